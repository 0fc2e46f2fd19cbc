# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether every member holds the image a rollback would serve (plugins/module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: release_rollback_missing
short_description: The message that stops a rollout when a member lacks the previous release's image
version_added: 0.2.0
author:
- dgxspark.vllm maintainers
description:
- Returns an empty string when every member of the cluster has the image a rollback would serve (the previous
  release's image by each member's own ID, see P(dgxspark.vllm.release_rollback#filter)), else a sentence naming the cluster, the image,
  the nodes that lack it and the fix.
positional: _input
options:
  _input:
    description: The stored release record (the previous release).
    type: dict
    required: true
  present:
    description: Each member's inventory name to whether its Docker engine has the image (a member missing counts as lacking it).
    type: dict
    required: true
  members:
    description: The cluster's members.
    type: list
    elements: str
    required: true
  cluster:
    description: The cluster's name.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Stop before the switch when a node lacks the previous release's image
  vars:
    rollout_missing: >-
      {{ rollout_previous | dgxspark.vllm.release_rollback_missing(present=rollout_present, members=rollout_pair_hosts,
         cluster=rollout_pair) }}
  ansible.builtin.fail:
    msg: "{{ rollout_missing }}"
  when: rollout_missing | length > 0
"""

RETURN = r"""
_value:
  description: Empty when every member has the image, else the error message.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def release_rollback_missing(record, present=None, members=None, cluster=""):
    if not isinstance(present, dict) or not isinstance(members, (list, tuple)):
        raise AnsibleFilterError("release_rollback_missing: present must be a dict and members a list")
    try:
        return _release.rollback_image_missing(record, present, [str(m) for m in members], str(cluster))
    except _release.ReleaseError as exc:
        raise AnsibleFilterError(f"release_rollback_missing: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"release_rollback_missing": release_rollback_missing}
