# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_serve_result has one producer, the vllm_serve role, on both paths: serving (present.yml) and a settled cluster
(settled.yml, from deploy_state's record). At a3ec59b the deploy playbook set it from deploy_state_result, a second
producer whose answer had no argv."""

from __future__ import annotations

import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _setters(fact):
    """{path: [the value each set_fact task of the path gives FACT]} over the roles' tasks and the playbooks."""
    found = {}

    def walk(path, tasks):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            args = task.get("ansible.builtin.set_fact") or {}
            if isinstance(args, dict) and fact in args:
                found.setdefault(str(path.relative_to(ROOT)), []).append(args[fact])
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                walk(path, task.get(key))

    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")) + sorted(ROOT.glob("playbooks/*.yml")):
        walk(path, yaml.safe_load(path.read_text()))
    return found


def test_vllm_serve_result_comes_only_from_vllm_serve_and_both_paths_give_the_same_keys():
    setters = _setters("vllm_serve_result")
    assert sorted(setters) == ["roles/vllm_serve/tasks/present.yml", "roles/vllm_serve/tasks/settled.yml"]
    (served,) = setters["roles/vllm_serve/tasks/present.yml"]
    (settled,) = setters["roles/vllm_serve/tasks/settled.yml"]
    assert set(served) == set(settled) == {"cluster", "head", "is_head", "release", "argv", "endpoint",
                                           "release_changed"}
    # The argv is rendered from the (recorded) release by the same filter, with the same arguments.
    assert "dgxspark.vllm.serve_argv(rank=" in settled["argv"]
    assert settled["release_changed"] is False
    # deploy_state publishes what was recorded, not a result of its own.
    assert not _setters("deploy_state_result")
    deploy = (ROOT / "playbooks" / "deploy_qwen35.yml").read_text()
    assert "tasks_from: settled" in deploy and "deploy_state_result" not in deploy
