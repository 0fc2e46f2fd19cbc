"""tools/docs.py: docs/troubleshooting.md is what the diagnosis categories and the known-issues tables make.

Fails at 13f6075, which had neither tools/docs.py nor docs/troubleshooting.md.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


docs = _load(REPO / "tools" / "docs.py", "dgxspark_docs")
diagnosis = docs.load("_diagnosis")
known = docs.load("_known_issues")


def test_the_committed_troubleshooting_page_is_what_the_data_makes():
    committed = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    assert committed == docs.troubleshooting(), (
        "docs/troubleshooting.md differs from what _diagnosis.py and _known_issues.py make: run "
        "`python3 tools/docs.py troubleshooting --write` and commit it")


def test_the_page_has_every_category_and_every_row_with_its_sources():
    page = docs.troubleshooting()
    for category, description in diagnosis.DESCRIPTIONS.items():
        assert f"| `{category}` | {description} | {docs.cell(diagnosis.HINTS[category])} |" in page
    for issue in (*known.HOST_ISSUES, *known.KNOWN_ISSUES):
        (line,) = [line for line in page.splitlines() if line.startswith(f"| `{issue['id']}` |")]
        for url in (issue["source"], *issue.get("also", ())):
            assert f"<{url}>" in line
    (line,) = [line for line in page.splitlines() if line.startswith("| `kernel-7.0.0-1019-nccl-roce-reg-mr` |")]
    assert "| stop | kernel (uname -r) is `7.0.0-1019-nvidia`; 2+ nodes serving together; NCCL over `roce`" in line


def test_check_fails_with_a_diff_when_the_page_differs(tmp_path, monkeypatch, capsys):
    page = tmp_path / "troubleshooting.md"
    monkeypatch.setitem(docs.PAGES, "troubleshooting", (docs.troubleshooting, page))
    monkeypatch.setattr(docs, "REPO", tmp_path)
    assert docs.main(["troubleshooting", "--check"]) == 1  # missing
    assert docs.main(["troubleshooting", "--write"]) == 0
    assert docs.main(["troubleshooting", "--check"]) == 0
    page.write_text(page.read_text().replace("| stop |", "| warn |"))
    capsys.readouterr()
    assert docs.main(["troubleshooting", "--check"]) == 1
    out = capsys.readouterr()
    assert "-| `kernel-7.0.0-1019-nccl-roce-reg-mr` | warn |" in out.out and "--write" in out.err


def test_a_condition_the_script_cannot_say_is_refused():
    with pytest.raises(ValueError, match="host condition 'bios'"):
        docs.host_when({"bios": {"is": ["1"]}}, {})
    with pytest.raises(ValueError, match="image condition 'cuda'"):
        docs.image_when({"cuda": "13"}, {})


def test_the_readme_links_the_page():
    assert "(docs/troubleshooting.md)" in (REPO / "README.md").read_text(encoding="utf-8")
