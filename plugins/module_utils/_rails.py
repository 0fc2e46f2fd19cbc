# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""The fabric rails of a cluster: every member must have the same ones, rail by rail on one subnet, and answer on each.

A DGX Spark's ConnectX-7 shows each physical port as two netdevs, the twins (``enp1s0f1np1`` and ``enP2p1s0f1np1``),
each with its own RoCE HCA, address and subnet (NVIDIA's netplan: 192.168.100.x and 192.168.101.x). ``NCCL_IB_HCA``
lists both, and NCCL connects the n-th HCA of one node with the n-th HCA of its peer: a twin without an address on
one node (its HCA drops out of that node's list) or on another subnet than its peer's makes NCCL's connections over it
fail at init. The rails each node found are ``rdma_facts``' ``fabric_rails``, published by the fleet action in
``dgxspark_node.member_rails``; the functions here take that list and return sentences naming the host, the twin, the
address and the fix, and the pings that prove each rail end to end.
"""

from __future__ import annotations

import ipaddress
import typing as t

NETPLAN = "/etc/netplan/40-cx7.yaml"


def _usable(entry: t.Mapping[str, t.Any]) -> list[dict]:
    return [dict(r) for r in entry.get("rails") or [] if r.get("usable") and r.get("ip")]


def _network(rail: t.Mapping[str, t.Any]) -> ipaddress.IPv4Network | None:
    try:
        return ipaddress.ip_interface(f"{rail['ip']}/{rail.get('prefixlen') or 32}").network  # type: ignore[return-value]
    except (KeyError, ValueError):
        return None


def _cidr(rail: t.Mapping[str, t.Any]) -> str:
    return f"{rail['ip']}/{rail['prefixlen']}" if rail.get("prefixlen") is not None else str(rail.get("ip") or "")


def _twin(rail: t.Mapping[str, t.Any]) -> str:
    return f"{rail['interface']} ({rail['hca']})" if rail.get("hca") else str(rail.get("interface") or "")


def _listed(rails: list[dict]) -> str:
    return ", ".join(f"{r['interface']} {_cidr(r)}" for r in rails) or "none"


def _published(member_rails: t.Sequence[t.Mapping[str, t.Any]]) -> list[t.Mapping[str, t.Any]]:
    """The members that published their rails (a member that failed earlier or is unreachable is left out)."""
    return [m for m in member_rails or [] if m.get("rails")]


def rail_problems(member_rails: t.Sequence[t.Mapping[str, t.Any]], cluster: str) -> list[str]:
    """What is wrong with the cluster's rails, before anything is pinged: [] when every member that published its
    rails has the same number of usable rails and each rail is on one subnet on every member."""
    members = _published(member_rails)
    if len(members) < 2:
        return []
    usable = {m["host"]: _usable(m) for m in members}
    counts = {host: len(rails) for host, rails in usable.items()}
    most = max(counts.values())
    problems = []
    if len(set(counts.values())) > 1:
        model = next(m["host"] for m in members if counts[m["host"]] == most)
        for member in members:
            host = member["host"]
            if counts[host] == most:
                continue
            have = {_network(r) for r in usable[host]}
            missing = [r for r in usable[model] if _network(r) not in have] or usable[model][counts[host]:]
            down = [r for r in member.get("rails") or [] if not r.get("usable")]
            why = "; ".join(f"{host}'s twin {_twin(r)} is up on the cable but {r.get('problem') or 'cannot be used'}"
                            for r in down) or f"{host} has no other ACTIVE RoCE port"
            fixes = []
            for index, rail in enumerate(missing):
                twin = down[index]["interface"] if len(down) == len(missing) else rail["interface"]
                fixes.append(f"give {host}'s {twin} an address in {_network(rail)} (the subnet of {model}'s "
                             f"{rail['interface']} {_cidr(rail)})")
            problems.append(
                f"cluster {cluster}: {host} has {counts[host]} usable fabric rail(s) ({_listed(usable[host])}) but "
                f"{model} has {most} ({_listed(usable[model])}): {why}. NCCL_IB_HCA then lists "
                f"{', '.join(r['hca'] or r['interface'] for r in usable[model])} on {model} and only "
                f"{', '.join(r['hca'] or r['interface'] for r in usable[host]) or 'none'} on {host}, and NCCL's "
                f"connections between the extra HCA and {host} fail at init. Fix: {'; '.join(fixes)}, in {NETPLAN}, "
                f"then `sudo netplan apply` on {host} (or remove that twin from {NETPLAN} on every node of "
                f"{cluster}); nothing was started on {cluster}")
        return problems
    for index in range(most):
        ends = [(m["host"], usable[m["host"]][index]) for m in members]
        networks = [_network(rail) for _host, rail in ends]
        if len(set(networks)) <= 1:
            continue
        by_net: dict[t.Any, list[str]] = {}
        for (host, _rail), net in zip(ends, networks):
            by_net.setdefault(net, []).append(host)
        major_net, major_hosts = max(by_net.items(), key=lambda item: len(item[1]))
        alone = len(major_hosts) * 2 > len(ends)
        listed = ", ".join(f"{host} {rail['interface']} {_cidr(rail)} (subnet {net})"
                           for (host, rail), net in zip(ends, networks))
        if alone:
            wrong = [(host, rail) for (host, rail), net in zip(ends, networks) if net != major_net]
            fix = "; ".join(f"move {host}'s {rail['interface']} from {_cidr(rail)} into {major_net}" for host, rail in wrong)
        else:
            fix = (f"put rail {index + 1} ({', '.join(sorted({r['interface'] for _h, r in ends}))}) of every node on "
                   "one subnet, each node with its own address")
        problems.append(
            f"cluster {cluster}: fabric rail {index + 1} is not on one subnet: {listed}. RoCE does not route between "
            f"the twins' subnets, so NCCL's connections over this rail fail at init. Fix: {fix}, in {NETPLAN}, then "
            f"`sudo netplan apply`; nothing was started on {cluster}")
    return problems


def rail_pings(member_rails: t.Sequence[t.Mapping[str, t.Any]], host: str) -> list[dict]:
    """What HOST pings: from each of its usable rails, the same rail of every other member that published one,
    as ``{target, interface, peer, rail}`` (rail numbered from 1)."""
    members = _published(member_rails)
    own = next((_usable(m) for m in members if m.get("host") == host), [])
    pings = []
    for index, rail in enumerate(own):
        for member in members:
            if member.get("host") == host:
                continue
            theirs = _usable(member)
            if index < len(theirs):
                pings.append({"target": theirs[index]["ip"], "interface": rail["interface"], "peer": member["host"],
                              "rail": index + 1})
    return pings


def silent_rails(pings: t.Sequence[t.Mapping[str, t.Any]], planned: t.Sequence[t.Mapping[str, t.Any]], host: str,
                 mtu: int | str | None) -> list[str]:
    """The pings of PLANNED (rail_pings) that got no answer, from node_facts' PINGS (target, interface, rc, output):
    one sentence each, naming HOST, the twin, the peer's address and the fix."""
    results = {(p.get("target"), p.get("interface") or ""): p for p in pings or []}
    problems = []
    for plan in planned:
        result = results.get((plan["target"], plan["interface"]))
        if result is None or result.get("rc") == 0:
            continue
        problems.append(
            f"{host}: no answer over the fabric ({plan['interface']}, MTU {mtu}, DF set) from {plan['target']} "
            f"({plan['peer']}, fabric rail {plan['rail']}: {result.get('output') or 'rc ' + str(result.get('rc'))})")
    if problems:
        problems.append(
            f"Check the cable, that every hop between them carries MTU {mtu} (the same `mtu:` on both twins in "
            f"{NETPLAN} on every node, or none on every node for 1500) and that each twin's address is on the subnet "
            "of the same twin on the other nodes (ip -br addr on each node); nothing was started")
    return problems
