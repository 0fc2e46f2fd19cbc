# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that checks the fabric rails (both CX7 twins) of a cluster and plans the pings that prove them."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fabric_rails
short_description: Check that every member of a cluster has the same fabric rails, and plan and judge their pings
version_added: 0.3.0
author:
  - dgxspark.vllm maintainers
description:
  - A DGX Spark's ConnectX-7 shows each port as two twins (V(enp1s0f1np1) and V(enP2p1s0f1np1)), each with its own
    RoCE HCA, address and subnet; C(NCCL_IB_HCA) lists both, and NCCL connects the n-th HCA of a node with the n-th
    HCA of its peer.
  - Takes the rails every member published (C(dgxspark_node.member_rails), from M(dgxspark.vllm.fleet), as
    M(dgxspark.vllm.rdma_facts) found them) and returns in C(errors) one sentence a problem, naming the host, the
    twin, the address and the fix - a member with fewer usable rails than another (a twin without an address,
    whose HCA drops out of that node's C(NCCL_IB_HCA)), and a rail whose addresses are not on one subnet on every member.
  - Returns in C(pings) what O(host) pings, the same rail of every other member from each of its own rails, for
    M(dgxspark.vllm.node_facts)' O(dgxspark.vllm.node_facts#module:ping_rails).
  - Given O(pings) (node_facts' result), C(errors) also holds every rail whose peer did not answer, with the fix.
  - Members that did not publish their rails (they failed earlier or are unreachable) are left out.
positional: _input
options:
  _input:
    description: C(dgxspark_node.member_rails) - one dict a member with C(host) and C(rails).
    type: list
    elements: dict
    required: true
  host:
    description: The node the pings start from (C(inventory_hostname)).
    type: str
    required: true
  cluster:
    description: The cluster's name, for the sentences.
    type: str
    required: true
  pings:
    description: The C(pings) of M(dgxspark.vllm.node_facts)' result, to judge; omitted, no ping is judged.
    type: list
    elements: dict
    default: []
  mtu:
    description: The fabric MTU the pings carried, for the sentences.
    type: int
"""

EXAMPLES = r"""
- name: Check the rails of the cluster and plan the pings over every rail
  ansible.builtin.set_fact:
    rails: "{{ dgxspark_node.member_rails | dgxspark.vllm.fabric_rails(host=inventory_hostname, cluster=dgxspark_node.cluster) }}"

- name: Stop when the members' rails differ
  ansible.builtin.fail:
    msg: "{{ inventory_hostname }}: {{ rails.errors | join(' ') }}"
  when: rails.errors | length > 0
"""

RETURN = r"""
_value:
  description: The verdict and the plan.
  type: dict
  contains:
    errors:
      description: Sentences to stop on (empty when the rails agree and, with O(pings), every peer answered).
      type: list
      elements: str
      sample:
        - >-
          cluster pair1: spark-2 has 1 usable fabric rail(s) (enp1s0f1np1 192.168.100.12/24) but spark-1 has 2 ...
    pings:
      description: One dict a ping O(host) makes, with C(target), C(interface), C(peer) and C(rail) (from 1).
      type: list
      elements: dict
      sample: [{target: 192.168.101.12, interface: enP2p1s0f1np1, peer: spark-2, rail: 2}]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils._rails import rail_pings, rail_problems, silent_rails


def fabric_rails(member_rails, host, cluster, pings=None, mtu=None):
    if not isinstance(member_rails, list) or not all(isinstance(m, dict) for m in member_rails):
        raise AnsibleFilterError("fabric_rails: expects dgxspark_node.member_rails (a list of dicts with host and "
                                 f"rails), got {type(member_rails).__name__}")
    planned = rail_pings(member_rails, host)
    errors = rail_problems(member_rails, cluster)
    if pings:
        errors = errors + silent_rails(pings, planned, host, mtu)
    return {"errors": errors, "pings": planned}


class FilterModule:
    def filters(self):
        return {"fabric_rails": fabric_rails}
