# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""No rescue branches on a task's name (a renamed task would change what the error says): it reads the failed result
(ansible_failed_result), whose shape tells which step failed. At 2319bf3 ray_cluster's apply.yml searched
ansible_failed_task.name for 'Wait until'."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_no_task_file_reads_the_failed_tasks_name():
    files = sorted(ROOT.glob("roles/*/tasks/*.yml")) + sorted(ROOT.glob("playbooks/*.yml"))
    assert len(files) > 50
    offenders = [str(p.relative_to(ROOT)) for p in files if "ansible_failed_task" in p.read_text()]
    assert offenders == []
