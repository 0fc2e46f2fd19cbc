# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The models behind the gateway, from the clusters' release records (plugins/module_utils/_gateway.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gateway_models
short_description: The models behind the gateway and the clusters serving each, from the heads' release records
version_added: 0.2.0
deprecated:
  why: The action M(dgxspark.vllm.gateway_render) returns the models with the gateway's configuration, in one
    step; no role or playbook of the collection uses the filter.
  removed_in: 1.0.0
  alternative: The action M(dgxspark.vllm.gateway_render).
author:
- dgxspark.vllm maintainers
description:
- Groups the fleet's clusters by the served model name their head's release record names; each cluster is reached
  at its head's LAN address on the door's port.
- A cluster whose head has no release record, no known LAN address or no engine key is left out, with a warning.
positional: _input
options:
  _input:
    description: The fleet's clusters (C(dgxspark_fleet.clusters)).
    type: dict
    required: true
  heads:
    description: Each head's C(release) (its record, or an empty dict), C(lan_ip) and C(engine_env) (the text of its
      serving env file; a cluster without a key in it is left out, with a warning).
    type: dict
    required: true
  door_port:
    description: The doors' port.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Find the models behind the gateway
  ansible.builtin.set_fact:
    gateway_models_found: "{{ dgxspark_fleet.clusters | dgxspark.vllm.gateway_models(heads=heads, door_port=8100) }}"
"""

RETURN = r"""
_value:
  description: "C(models) (C({served name: [{name, address, port}]})) and C(warnings)."
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway


def gateway_models(clusters, heads=None, door_port=None):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.gateway_models filter is deprecated: use the dgxspark.vllm.gateway_render "
                         "action, which returns the models with the gateway's configuration", version="1.0.0",
                         collection_name="dgxspark.vllm")
    try:
        models, warnings = _gateway.gateway_models(clusters, heads or {}, door_port)
    except _gateway.GatewayError as exc:
        raise AnsibleFilterError(f"gateway_models: {exc}") from exc
    return {"models": models, "warnings": warnings}


class FilterModule:
    def filters(self):
        return {"gateway_models": gateway_models}
