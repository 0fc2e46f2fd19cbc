# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 33, point 6: the long steps run in the background on the node (async) and are polled in short SSH sessions,
so that a NAT or firewall dropping the controller's idle session, or a VPN reconnecting, does not end them.

The lab shows the readiness wait surviving a cut session
(tests/lab/test_lab_controller_network.py::test_field_idle_controller_session_cut_during_readiness_wait_is_survived);
the download cannot run in the lab (no internet) and the build is not long there, so their tasks are read here: each
is async with its timeout as the job's limit and a documented poll variable, and keeps its no_log.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]

# (role, tasks file, the task's name starts with, the job's limit, the poll variable)
LONG_STEPS = [
    ("vllm_serve", "present.yml", "Probe readiness", "vllm_serve_ready_timeout", "vllm_serve_ready_poll"),
    ("hybrid_image", "build.yml", "Build the candidate image", "hybrid_image_build_timeout", "hybrid_image_build_poll"),
    ("model_sync", "fetch.yml", "Run the Hugging Face CLI", "model_sync_download_timeout", "model_sync_download_poll"),
]


def tasks(items):
    for item in items or []:
        yield item
        for key in ("block", "rescue", "always"):
            yield from tasks(item.get(key))


def find(role, tasks_file, name):
    found = [task for task in tasks(yaml.safe_load((ROOT / "roles" / role / "tasks" / tasks_file).read_text()))
             if str(task.get("name", "")).startswith(name)]
    assert len(found) == 1, f"roles/{role}/tasks/{tasks_file}: {len(found)} tasks named {name}..."
    return found[0]


@pytest.mark.parametrize("role, tasks_file, name, limit, poll", LONG_STEPS, ids=[step[0] for step in LONG_STEPS])
def test_field_long_step_runs_in_the_background_so_a_cut_controller_session_does_not_end_it(
        role, tasks_file, name, limit, poll):
    task = find(role, tasks_file, name)
    assert limit in str(task.get("async", "")), f"{role}: '{name}' is not async (bounded by {limit}): {task}"
    assert str(task.get("poll", "")) == "{{ %s | int }}" % poll, f"{role}: '{name}' is not polled every {poll}"
    assert "timeout" not in task, f"{role}: '{name}' still bounds one SSH session with the timeout keyword"
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    assert defaults[poll] == 10
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    assert specs["argument_specs"]["main"]["options"][poll]["default"] == 10
    assert f"{poll}: 10" in (ROOT / "roles" / role / "README.md").read_text()


def test_the_download_in_the_background_keeps_its_no_log():
    assert find("model_sync", "fetch.yml", "Run the Hugging Face CLI")["no_log"] is True
