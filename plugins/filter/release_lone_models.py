# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The models a single cluster serves, said before a rollout (plugins/module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: release_lone_models
short_description: Sentences naming the models one cluster alone serves, whose switch will refuse their requests
version_added: 0.2.0
author:
- dgxspark.vllm maintainers
description:
- A rollout switches a cluster only after draining it at the gateway, so a model served by several clusters is
  answered throughout. A model served by one cluster only cannot be, and its requests are refused while that cluster
  switches. This filter returns one sentence per such model, with how long the cluster's last switch took (from the
  rollout record on its head), so the rollout can say it before it starts.
positional: _input
options:
  _input:
    description:
    - Each cluster's name to a dict with C(release) (its release.json) and C(rollout) (its rollout.json), either empty
      when the head has none.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say which models a single cluster serves
  ansible.builtin.debug:
    msg: "{{ rollout_records | dgxspark.vllm.release_lone_models }}"
"""

RETURN = r"""
_value:
  description: One sentence per model served by exactly one cluster; empty when every model has two or more.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def release_lone_models(records):
    if not isinstance(records, dict) or not all(isinstance(v, dict) for v in records.values()):
        raise AnsibleFilterError("release_lone_models: expects {cluster: {release: {...}, rollout: {...}}}")
    return _release.lone_models(records)


class FilterModule:
    def filters(self):
        return {"release_lone_models": release_lone_models}
