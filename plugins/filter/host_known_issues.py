# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check a node's host platform (kernel, NVIDIA driver, DGX OS) against the collection's known-bad ones."""

from __future__ import annotations

DOCUMENTATION = r"""
name: host_known_issues
short_description: Check a node's kernel, NVIDIA driver and DGX OS against the known-bad host platforms
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers
description:
  - Compares the host platform a node reported (the C(host) of M(dgxspark.vllm.node_facts)' result - kernel release,
    NVIDIA driver version, DGX OS version) with the known-bad host platforms shipped in the collection
    (C(HOST_ISSUES) in C(plugins/module_utils/_known_issues.py)), each with its source, for example kernel
    7.0.0-1019-nvidia, which breaks NCCL's memory registration over RoCE (eugr/spark-vllm-docker issue 392).
  - An entry of severity C(warn) that holds is shown as an Ansible warning; one of severity C(stop) is in the result's
    C(errors) for the caller to stop on; an entry O(ignore) lists is a warning only. Every sentence names the host, the
    fact (and where it was read), the source and the fix.
positional: _input
options:
  _input:
    description: The registered result of M(dgxspark.vllm.node_facts) for the node.
    type: dict
    required: true
  nodes:
    description: How many nodes serve the model together (the node's cluster size).
    type: int
    default: 1
  transport:
    description: The fabric's transport as M(dgxspark.vllm.rdma_facts) chose it (V(roce), V(socket), V(none)).
    type: str
    default: none
  ignore:
    description: Ids of known-bad host platforms to warn about only (the acknowledged ones).
    type: list
    elements: str
    default: []
  host:
    description: The node's name, put in front of each sentence.
    type: str
    default: ""
  ignore_variable:
    description: The variable named in the sentences as the place to acknowledge an entry.
    type: str
    default: preflight_known_issues_ignore
"""

EXAMPLES = r"""
- name: Check the node's kernel, driver and DGX OS against the known-bad host platforms
  ansible.builtin.set_fact:
    checked: >-
      {{ preflight_node | dgxspark.vllm.host_known_issues(nodes=dgxspark_node.size,
         transport=dgxspark_node.fabric.transport, ignore=preflight_known_issues_ignore, host=inventory_hostname) }}
"""

RETURN = r"""
_value:
  description: The verdict.
  type: dict
  contains:
    facts:
      description: The facts checked (C(kernel), C(driver), C(dgx_os), C(nodes), C(transport)).
      type: dict
    matches:
      description: The known-bad host platforms that hold, each with C(id), C(summary), C(source), C(because),
        C(severity) (V(stop) or V(warn)) and C(action) (V(stop), V(warn) or V(ignored)).
      type: list
      elements: dict
    warnings:
      description: Sentences shown as warnings.
      type: list
      elements: str
    errors:
      description: Sentences to stop on.
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils._known_issues import check_host

display = Display()


def host_known_issues(node, nodes=1, transport="none", ignore=None, host="",
                      ignore_variable="preflight_known_issues_ignore"):
    if not isinstance(node, dict) or not isinstance(node.get("host"), dict):
        raise AnsibleFilterError("host_known_issues: expects the result of dgxspark.vllm.node_facts (with its host "
                                 f"facts), got {type(node).__name__}")
    platform = node["host"]
    facts = {"kernel": platform.get("kernel") or "", "driver": platform.get("driver") or "",
             "dgx_os": platform.get("dgx_os") or "", "nodes": int(nodes), "transport": str(transport or "none")}
    try:
        result = check_host(facts, host=host, ignore=list(ignore or []), ignore_variable=ignore_variable)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"host_known_issues: {exc}") from exc
    for warning in result["warnings"]:
        display.warning(warning)
    return dict(result, facts=facts)


class FilterModule:
    def filters(self):
        return {"host_known_issues": host_known_issues}
