# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja test dgxspark.vllm.started_before: Docker start times compared as times (module_utils/_engine_plan.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: started_before
author:
  - dgxspark.vllm maintainers (@dgxspark)
version_added: 0.12.0
short_description: Whether a container started before another, from Docker's start times
description:
  - Compares two C(StartedAt) values as Docker gives them (RFC 3339 with up to nine digits of a second, trailing zeros
    trimmed) as times, where a comparison as text puts C(10:00:00.5Z) after C(10:00:00.500001Z).
  - False when either is empty or Docker's zero time (a container never started).
positional: other
options:
  _input:
    description: The start time of the container asked about.
    type: str
    required: true
  other:
    description: The start time it is compared with.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Restart a worker that started before its head
  ansible.builtin.debug:
    msg: the worker belongs to a cluster that is gone
  when: worker.started_at is dgxspark.vllm.started_before(head.started_at)
"""

RETURN = r"""
_value:
  description: Whether the input started before O(other).
  type: bool
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils._engine_plan import PlanError, started


def started_before(value, other):
    try:
        mine, theirs = started(value), started(other)
    except PlanError as exc:
        raise AnsibleFilterError(f"started_before: {exc}") from None
    return mine is not None and theirs is not None and mine < theirs


class TestModule:
    def tests(self):
        return {"started_before": started_before}
