"""Results, logs and benchmark history go under the caller's directory, never inside the installed collection.

A user runs `ansible-playbook dgxspark.vllm.benchmark` from their own directory with the collection installed in
~/.ansible/collections: there `playbook_dir` is the collection's playbooks/ directory, so a default built from it
writes results into the installed collection (lost on the next install, and not where the user looks). Fails at
13f6075, whose benchmark_results_dir and collect_logs_dir were built from playbook_dir.
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = {"benchmark_results_dir": REPO / "roles" / "benchmark" / "defaults" / "main.yml",
           "collect_logs_dir": REPO / "playbooks" / "collect_logs.yml"}


def _default(name, path):
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        return data[name]
    return next(play["vars"][name] for play in data if name in (play.get("vars") or {}))


def test_result_and_log_directories_default_to_the_callers_directory():
    for name, path in OUTPUTS.items():
        value = _default(name, path)
        assert "playbook_dir" not in value and "role_path" not in value, f"{name} ({path.relative_to(REPO)}): {value}"
        assert value.startswith("{{ lookup('ansible.builtin.pipe', 'pwd') }}/"), f"{name}: {value}"


def test_no_default_writes_under_the_playbooks_directory():
    """No role default and no playbook variable is built from playbook_dir: the one such use was an output."""
    files = list((REPO / "roles").glob("*/defaults/main.yml")) + list((REPO / "playbooks").glob("*.yml"))
    users = [str(f.relative_to(REPO)) for f in files
             if any("playbook_dir" in line.split("#", 1)[0] for line in f.read_text(encoding="utf-8").splitlines())]
    assert users == []
