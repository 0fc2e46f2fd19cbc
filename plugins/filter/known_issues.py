# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check an image's facts and the serving settings against the collection's known-bad combinations."""

from __future__ import annotations

DOCUMENTATION = r"""
name: known_issues
short_description: Check a vLLM image and its serving settings against the known-bad combinations
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers
description:
  - Compares the facts of an image (the result of M(dgxspark.vllm.vllm_image_info)) and the serving settings with the
    table of known-bad combinations shipped in the collection (C(plugins/module_utils/_known_issues.py)), each with its
    source, for example NCCL 2.28.9 with CUDA graphs across nodes (vLLM issue 52504) or two copies of libnccl in one
    image (vLLM issue 42354).
  - A setting left unset (null) is resolved; when a known issue holds and a setting avoids it, the setting is changed
    (the remedy) and a warning citing the source is shown. When the inventory set the bad value itself, or when no
    setting helps, the result carries an error for the caller to stop on.
  - Warnings are shown on the controller as Ansible warnings (once each).
positional: _input
options:
  _input:
    description: The registered result of M(dgxspark.vllm.vllm_image_info) for the serving image.
    type: dict
    required: true
  nodes:
    description: How many nodes serve the model together.
    type: int
    required: true
  settings:
    description: The serving settings, each true/false as the inventory set it or null when unset (V(enforce_eager)).
    type: dict
    required: true
  ignore:
    description: Ids of known issues to warn about only.
    type: list
    elements: str
    default: []
  host:
    description: The node's name, put in front of each warning.
    type: str
    default: ""
  engine_env:
    description:
      - The engine's environment on this node (the fabric's from M(dgxspark.vllm.rdma_facts), with the inventory's
        over it). When it has NCCL use RDMA (C(NCCL_NET=IB), or C(NCCL_IB_DISABLE=0)), an image whose facts show no
        C(libibverbs.so.1) or no mlx5 provider (RV(dgxspark.vllm.vllm_image_info#module:verbs)) is an error, since its
        NCCL would stop every node's engine with C(Failed to initialize any NET plugin).
    type: dict
    default: {}
    version_added: 0.3.0
"""

EXAMPLES = r"""
- name: Check the serving image against the known-bad combinations
  ansible.builtin.set_fact:
    checked: >-
      {{ image_facts | dgxspark.vllm.known_issues(nodes=2, settings={'enforce_eager': vllm_serve_enforce_eager},
         host=inventory_hostname) }}
"""

RETURN = r"""
_value:
  description: The verdict.
  type: dict
  contains:
    settings:
      description: The settings to serve with (unset ones resolved, remedies applied).
      type: dict
    matches:
      description: The known issues that hold, each with C(id), C(summary), C(source), C(because) and C(action)
        (V(remedied), V(forced), V(unremediable) or V(ignored)).
      type: list
      elements: dict
    remedies:
      description: The remedies applied (C(id), C(set), C(source), and C(text) for a summary line).
      type: list
      elements: dict
    warnings:
      description: Sentences shown as warnings.
      type: list
      elements: str
    errors:
      description: Sentences to stop on (a forced bad setting, or an issue no setting avoids).
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils._known_issues import check

display = Display()


def known_issues(image, nodes, settings, ignore=None, host="", engine_env=None):
    if not isinstance(image, dict):
        raise AnsibleFilterError(f"known_issues: expects the result of vllm_image_info, got {type(image).__name__}")
    try:
        result = check(image, int(nodes), dict(settings), ignore=list(ignore or []), engine_env=dict(engine_env or {}))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"known_issues: {exc}") from exc
    prefix = f"{host}: " if host else ""
    for warning in result["warnings"]:
        display.warning(f"{prefix}{image.get('image', '')}: {warning}")
    return result


class FilterModule:
    def filters(self):
        return {"known_issues": known_issues}
