# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that compares the fabric MTU of the two ends of a pair."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fabric_mtu_mismatch
short_description: Say whether the nodes of a pair disagree on their fabric interface's MTU
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers
description:
  - Takes the hosts of one pair and C(hostvars), reads each host's C(dgxspark.vllm.rdma_facts) result (registered
    under O(fact)) and returns an empty string when every host that has one reports the same C(fabric_mtu).
  - Otherwise returns one message naming every node with its fabric interface and MTU, and how to set the same MTU on
    both ends. A mismatch drops large frames on one direction of the cable, so the pair must not start.
  - Hosts without the fact (they failed earlier or are unreachable) are left out.
positional: _input
options:
  _input:
    description: The inventory names of the pair's hosts.
    type: list
    elements: str
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  pair:
    description: The pair's name, for the message.
    type: str
    required: true
  fact:
    description: The variable under which each host registered its C(rdma_facts) result.
    type: str
    default: preflight_fabric
"""

EXAMPLES = r"""
- name: Check that both ends of the pair's fabric have the same MTU
  vars:
    mismatch: "{{ pair_hosts | dgxspark.vllm.fabric_mtu_mismatch(hostvars, pair='pair1') }}"
  ansible.builtin.assert:
    that: mismatch | length == 0
    fail_msg: "{{ inventory_hostname }}: {{ mismatch }}"
"""

RETURN = r"""
_value:
  description: An empty string when the MTUs agree, otherwise the message.
  type: str
  sample: >-
    the two ends of pair1's fabric have different MTUs: spark-1 enp1s0f1np1 1500, spark-2 enp1s0f1np1 9000. ...
"""


def mtu_mismatch(ends: list[tuple[str, str, int | None]], pair: str) -> str:
    """ENDS: (host, interface, MTU) of each node of PAIR. '' when they agree, otherwise the message."""
    if len({mtu for _host, _ifname, mtu in ends}) <= 1:
        return ""
    listed = ", ".join(f"{host} {ifname} {mtu}" for host, ifname, mtu in ends)
    top = max((mtu or 0) for _host, _ifname, mtu in ends)
    if len(ends) == 2:
        return (f"the two ends of {pair}'s fabric have different MTUs: {listed}. Frames above the smaller MTU are "
                f"dropped on the way to that node. Set the same MTU on both ends: `mtu: {top}` on the fabric interface "
                "and its twin in /etc/netplan/40-cx7.yaml on every node of the pair (or remove it on every node), then"
                " `sudo netplan apply`; nothing was started on this pair")
    return (f"the {len(ends)} nodes of {pair}'s fabric have different MTUs: {listed}. Frames above the smallest MTU are"
            f" dropped on the way to the nodes that have it. Set the same MTU on every node: `mtu: {top}` on the fabric"
            " interface and its twin in /etc/netplan/40-cx7.yaml on every node of the cluster, and the same on the"
            " switch's ports (or remove it on every node), then `sudo netplan apply`; nothing was started on this"
            " cluster")


def fabric_mtu_mismatch(hosts, hostvars, pair, fact="preflight_fabric"):
    ends = []
    for host in hosts:
        facts = (hostvars[host] if host in hostvars else {}).get(fact) or {}
        if facts.get("fabric_interface"):
            ends.append((host, facts["fabric_interface"], facts.get("fabric_mtu")))
    return mtu_mismatch(ends, pair)


class FilterModule:
    def filters(self):
        return {"fabric_mtu_mismatch": fabric_mtu_mismatch}
