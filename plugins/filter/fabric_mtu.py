# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that compares the fabric MTU of the two ends of a pair."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fabric_mtu_mismatch
short_description: Say whether the nodes of a cluster disagree on their fabric interface's MTU
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers
description:
  - Takes the cluster's members as the contract publishes them (C(dgxspark_node.member_fabric), from
    M(dgxspark.vllm.fleet)) and returns an empty string when every member that published its fabric reports the same
    C(mtu).
  - Otherwise returns one message naming every node with its fabric interface and MTU, and how to set the same MTU on
    every node. A mismatch drops large frames on the way to the nodes with the smaller MTU, so the cluster must not
    start.
  - Members that did not publish a fabric (they failed earlier or are unreachable) are left out.
positional: _input
options:
  _input:
    description: C(dgxspark_node.member_fabric) - one dict a member with C(host), C(interface) and C(mtu).
    type: list
    elements: dict
    required: true
  cluster:
    description: The cluster's name, for the message.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Check that every node of the cluster's fabric has the same MTU
  vars:
    mismatch: "{{ dgxspark_node.member_fabric | dgxspark.vllm.fabric_mtu_mismatch(cluster=dgxspark_node.cluster) }}"
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


def fabric_mtu_mismatch(members, cluster):
    ends = [(m["host"], m["interface"], m.get("mtu")) for m in members or [] if m.get("interface")]
    return mtu_mismatch(ends, cluster)


class FilterModule:
    def filters(self):
        return {"fabric_mtu_mismatch": fabric_mtu_mismatch}
