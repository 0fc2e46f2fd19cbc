# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that turn an inventory into the fleet model: pairs, heads, workers."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_pairs
short_description: Resolve the pairs of a DGX Spark fleet from the inventory
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers
description:
  - Takes the C(groups) magic variable and C(hostvars) and returns one entry per pair of the fleet
    group, with its head, workers and every host's fabric settings.
  - A pair is a group whose hosts are all in the fleet group and which holds exactly one host with
    C(dgxspark_node_role=head). A host may name its pair explicitly with the host variable C(dgxspark_pair),
    which wins over group membership.
  - Inconsistent inventories are reported, not guessed. The result's C(errors) lists every problem with the
    pair or host it concerns and how to fix it (a host in no pair or in two, a pair without a head or with two,
    duplicate fabric IPs, a node count that does not match the parallelism).
positional: _input
options:
  _input:
    description: The C(groups) magic variable.
    type: dict
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  fleet:
    description: Name of the fleet group.
    type: str
    default: spark_pairs
  gpus_per_pair:
    description: Expected GPUs per pair (tensor parallel size times pipeline parallel size); 0 skips the check.
    type: int
    default: 0
  gpus_per_node:
    description: GPUs per node (one GB10 per DGX Spark).
    type: int
    default: 1
"""

EXAMPLES = r"""
- name: Resolve the fleet
  ansible.builtin.set_fact:
    fleet: "{{ groups | dgxspark.vllm.fleet_pairs(hostvars, gpus_per_pair=2) }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: The fleet model.
  type: dict
  contains:
    pairs:
      description: Pair name to C(head), C(workers), C(hosts) (head first) and C(fabric_ips).
      type: dict
    host_pair:
      description: Host name to its pair name.
      type: dict
    errors:
      description: Problems found, each a sentence naming the pair or host and the fix.
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError

ROLE_VAR = "dgxspark_node_role"
PAIR_VAR = "dgxspark_pair"
FABRIC_IP_VAR = "dgxspark_fabric_ip"
SPECIAL_GROUPS = ("all", "ungrouped")


def resolve_fleet(groups: dict, hostvars: dict, fleet: str = "spark_pairs", gpus_per_pair: int = 0,
                  gpus_per_node: int = 1) -> dict:
    """Return {'pairs': ..., 'host_pair': ..., 'errors': [...]} for the fleet group."""
    errors: list[str] = []
    if fleet not in groups:
        return {"pairs": {}, "host_pair": {}, "errors": [
            f"the inventory has no group '{fleet}': put every pair group under it (see inventories/example/hosts.yml)"]}
    fleet_hosts = list(groups[fleet])
    fleet_set = set(fleet_hosts)

    def role(host: str) -> str:
        return str((hostvars.get(host) or {}).get(ROLE_VAR, "") or "")

    for host in fleet_hosts:
        if role(host) not in ("head", "worker"):
            errors.append(f"host {host}: {ROLE_VAR} is '{role(host) or 'unset'}'; set it to head or worker")

    candidates = {}
    for name, members in groups.items():
        if name in SPECIAL_GROUPS or name == fleet or not members:
            continue
        if not set(members) <= fleet_set:
            continue
        heads = [h for h in members if role(h) == "head"]
        if len(heads) == 1:
            candidates[name] = list(members)

    host_pair: dict[str, str] = {}
    for host in fleet_hosts:
        explicit = (hostvars.get(host) or {}).get(PAIR_VAR)
        if explicit:
            host_pair[host] = str(explicit)
            continue
        mine = [g for g, members in candidates.items() if host in members]
        if not mine:
            errors.append(f"host {host}: it is in no pair (a group under '{fleet}' with exactly one head); "
                          f"add it to its pair's group or set {PAIR_VAR} for it")
        elif len(mine) > 1:
            errors.append(f"host {host}: it is in several groups that look like pairs ({', '.join(sorted(mine))}); "
                          f"a host belongs to one pair: move it, or set {PAIR_VAR} to the right one")
        else:
            host_pair[host] = mine[0]

    pairs: dict[str, dict] = {}
    for host in fleet_hosts:
        pair = host_pair.get(host)
        if pair is None:
            continue
        entry = pairs.setdefault(pair, {"head": None, "workers": [], "hosts": [], "fabric_ips": {}})
        if role(host) == "head":
            if entry["head"] is not None:
                errors.append(f"pair {pair}: it has two heads ({entry['head']}, {host}); exactly one host per pair "
                              f"has {ROLE_VAR}: head")
            else:
                entry["head"] = host
        elif role(host) == "worker":
            entry["workers"].append(host)
        ip = (hostvars.get(host) or {}).get(FABRIC_IP_VAR)
        if ip:
            entry["fabric_ips"][host] = str(ip)

    seen_ips: dict[str, str] = {}
    for pair, entry in sorted(pairs.items()):
        if entry["head"] is None:
            errors.append(f"pair {pair}: it has no head; set {ROLE_VAR}: head on exactly one of its hosts")
        entry["hosts"] = ([entry["head"]] if entry["head"] else []) + entry["workers"]
        gpus = len(entry["hosts"]) * gpus_per_node
        if gpus_per_pair and gpus != gpus_per_pair:
            errors.append(f"pair {pair}: it has {len(entry['hosts'])} node(s) = {gpus} GPU(s), but tensor x pipeline "
                          f"parallel size is {gpus_per_pair}; add or remove nodes, or change the parallel sizes")
        for host, ip in entry["fabric_ips"].items():
            if ip in seen_ips:
                errors.append(f"pair {pair}: host {host} has fabric IP {ip}, which {seen_ips[ip]} already uses; "
                              "fabric IPs must be unique across the fleet")
            else:
                seen_ips[ip] = host
    return {"pairs": pairs, "host_pair": host_pair, "errors": errors}


def fleet_pairs(groups, hostvars, fleet="spark_pairs", gpus_per_pair=0, gpus_per_node=1):
    if not isinstance(groups, dict):
        raise AnsibleFilterError("fleet_pairs expects the 'groups' magic variable as input")
    try:
        # Read only the variables the model needs: templating every host variable would fail on
        # unrelated undefined ones (e.g. a vault variable this play does not use).
        plain_hostvars = {}
        for host in groups.get(fleet, []):
            hv = hostvars[host] if host in hostvars else {}
            plain_hostvars[host] = {k: hv.get(k) for k in (ROLE_VAR, PAIR_VAR, FABRIC_IP_VAR)}
    except Exception as exc:  # hostvars is a lazy mapping; surface template errors clearly
        raise AnsibleFilterError(f"fleet_pairs could not read hostvars: {exc}") from exc
    return resolve_fleet(dict(groups), plain_hostvars, fleet=fleet, gpus_per_pair=int(gpus_per_pair),
                         gpus_per_node=int(gpus_per_node))


class FilterModule:
    def filters(self):
        return {"fleet_pairs": fleet_pairs}
