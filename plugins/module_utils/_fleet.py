# Copyright (c) dgxspark.vllm contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet model: an inventory turned into clusters of DGX Sparks, and each node's place in its cluster.

Pure functions over plain data (the ``groups`` magic variable and the few host variables the model reads), so
that the action plugin ``dgxspark.vllm.fleet`` and the ``fleet_pairs`` filter share one implementation and the
unit tests need no Ansible.

A fleet is the group ``fleet_group`` (default ``spark_pairs``). A cluster is a group under it that holds exactly
one host with ``dgxspark_node_role: head``, or the hosts that name it with ``dgxspark_cluster`` (or the older
``dgxspark_pair``), which wins over group membership. A cluster has 1 to 8 nodes; the head is rank 0 and the
workers follow in inventory order, or in the order of their ``dgxspark_rank`` when every worker sets one.

Topology of the fabric (``dgxspark_fabric_topology``, read from every member and required to agree):
``single`` for one node; ``direct`` (one cable, two nodes: the default for two) or ``switch`` (every member on one
fabric subnet: required for three or more). A ring is refused: the collection gives each node one fabric interface
and IP, and in a ring a node reaches its two neighbours through two different ports.
"""

from __future__ import annotations

import ipaddress

from ansible_collections.dgxspark.vllm.plugins.module_utils._inputs import check_fabric, check_value

ROLE_VAR = "dgxspark_node_role"
CLUSTER_VAR = "dgxspark_cluster"
PAIR_VAR = "dgxspark_pair"  # the name of CLUSTER_VAR before clusters had more than two nodes
FABRIC_IP_VAR = "dgxspark_fabric_ip"
TOPOLOGY_VAR = "dgxspark_fabric_topology"
RANK_VAR = "dgxspark_rank"
# What a cluster serves clients under, as the inventory says (its head's variables): vllm_serve_served_model_name,
# else the lower-cased last part of vllm_serve_model, else of dgxspark_model, else of the collection's default model
# (the rule of roles/vllm_serve/defaults/main.yml). The gateway routes a cluster under this name only.
SERVED_VARS = ("vllm_serve_served_model_name", "vllm_serve_model", "dgxspark_model")
DEFAULT_MODEL = "Qwen/Qwen3.5-122B-A10B-FP8"
HOST_VARS = (ROLE_VAR, CLUSTER_VAR, PAIR_VAR, FABRIC_IP_VAR, TOPOLOGY_VAR, RANK_VAR, *SERVED_VARS)

MAX_NODES = 8
TOPOLOGIES = ("single", "direct", "switch")
SPECIAL_GROUPS = ("all", "ungrouped")
GATEWAY_GROUP = "dgxspark_gateway"
GATEWAY_ADDRESS_VAR = "dgxspark_gateway_address"
GATEWAY_HOST_VARS = ("ansible_host", GATEWAY_ADDRESS_VAR)
MONITORING_GROUP = "dgxspark_monitoring"
MONITORING_ADDRESS_VAR = "dgxspark_monitoring_address"
MONITORING_HOST_VARS = ("ansible_host", MONITORING_ADDRESS_VAR)
# The groups of the collection's services (a gateway or Prometheus may run on a head): never a cluster.
SERVICE_GROUPS = (GATEWAY_GROUP, MONITORING_GROUP)


def _role(hostvars: dict, host: str) -> str:
    return str((hostvars.get(host) or {}).get(ROLE_VAR, "") or "")


def _explicit_cluster(hostvars: dict, host: str) -> str:
    hv = hostvars.get(host) or {}
    return str(hv.get(CLUSTER_VAR) or hv.get(PAIR_VAR) or "")


def _rank(value) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    rank = int(value)
    if str(rank) != str(value).strip():
        raise ValueError(value)
    return rank


def _order_members(name: str, head: str | None, workers: list[str], hostvars: dict, errors: list[str]) -> list[str]:
    """The cluster's members in rank order: the head, then the workers (by dgxspark_rank when every worker sets one)."""
    ranks: dict[str, int] = {}
    for host in workers:
        raw = (hostvars.get(host) or {}).get(RANK_VAR)
        try:
            rank = _rank(raw)
        except (TypeError, ValueError):
            errors.append(f"cluster {name}: host {host}: {RANK_VAR} is '{raw}'; set it to a whole number from 1 to "
                          f"{len(workers)} (the head is rank 0), or leave it unset on every worker of the cluster")
            return ([head] if head else []) + workers
        if rank is not None:
            ranks[host] = rank
    head_rank = (hostvars.get(head) or {}).get(RANK_VAR) if head else None
    if head_rank not in (None, "", 0, "0"):
        errors.append(f"cluster {name}: host {head}: {RANK_VAR} is '{head_rank}' on the head; the head is rank 0: "
                      f"remove {RANK_VAR} from it")
    if ranks and len(ranks) != len(workers):
        unset = [h for h in workers if h not in ranks]
        errors.append(f"cluster {name}: {RANK_VAR} is set on some workers and not on {', '.join(unset)}; set it on "
                      "every worker of the cluster or on none")
    elif ranks:
        if sorted(ranks.values()) != list(range(1, len(workers) + 1)):
            listed = ", ".join(f"{h}={r}" for h, r in sorted(ranks.items(), key=lambda item: item[1]))
            errors.append(f"cluster {name}: the workers' {RANK_VAR} values ({listed}) must be 1 to {len(workers)}, "
                          "each once")
        else:
            workers = sorted(workers, key=lambda h: ranks[h])
    return ([head] if head else []) + workers


def _topology(name: str, members: list[str], hostvars: dict, errors: list[str]) -> str:
    said = {}
    for host in members:
        value = (hostvars.get(host) or {}).get(TOPOLOGY_VAR)
        if value not in (None, ""):
            said[host] = str(value)
    if len(set(said.values())) > 1:
        listed = ", ".join(f"{h}={v}" for h, v in sorted(said.items()))
        errors.append(f"cluster {name}: its members disagree on {TOPOLOGY_VAR} ({listed}); set it once, on the "
                      "cluster's group")
        return ""
    size = len(members)
    topology = next(iter(said.values()), "single" if size == 1 else "direct" if size == 2 else "")
    where = f"cluster {name}"
    if topology == "ring":
        errors.append(f"{where}: {TOPOLOGY_VAR} 'ring' is not supported: the collection gives each Spark one fabric "
                      "interface and IP, and in a ring a Spark reaches its two neighbours through two different "
                      f"ports. Cable the {size} Sparks to one switch and set {TOPOLOGY_VAR}: switch")
    elif topology not in TOPOLOGIES:
        if size > 2 and not said:
            errors.append(f"{where}: it has {size} Sparks and no {TOPOLOGY_VAR}; more than two Sparks share a fabric "
                          f"through a switch: cable them to one and set {TOPOLOGY_VAR}: switch on the cluster's group")
        else:
            errors.append(f"{where}: {TOPOLOGY_VAR} is '{topology}'; set it to one of {', '.join(TOPOLOGIES)}")
    elif topology == "single" and size != 1:
        errors.append(f"{where}: {TOPOLOGY_VAR} is 'single' but the cluster has {size} Sparks; set it to "
                      f"{'direct or switch' if size == 2 else 'switch'}")
    elif topology == "direct" and size != 2:
        errors.append(f"{where}: {TOPOLOGY_VAR} is 'direct' (one cable between two Sparks) but the cluster has "
                      f"{size} Spark(s); {'remove it' if size == 1 else f'cable them to one switch and set {TOPOLOGY_VAR}: switch'}")
    elif topology == "switch" and size == 1:
        topology = "single"
    return topology


def served_model_name(hv: dict) -> str:
    """The name a cluster whose head has the variables HV serves under (SERVED_VARS)."""
    named = hv.get(SERVED_VARS[0])
    if isinstance(named, str) and named:
        return named
    model = next((hv.get(v) for v in SERVED_VARS[1:] if isinstance(hv.get(v), str) and hv.get(v)), DEFAULT_MODEL)
    return model.rstrip("/").rsplit("/", 1)[-1].lower()


def resolve_fleet(groups: dict, hostvars: dict, fleet: str = "spark_pairs", gpus_per_node: int = 1,
                  parallel: dict | None = None, max_nodes: int = MAX_NODES, min_nodes: int = 1,
                  service_groups: tuple[str, ...] | list[str] = SERVICE_GROUPS) -> dict:
    """The fleet model of FLEET in GROUPS.

    HOSTVARS maps each host to the variables in HOST_VARS (others are ignored). PARALLEL maps a host (or ``"*"``
    for every cluster) to ``{"tensor": int, "pipeline": int, "variables": (str, str)}``: the parallel sizes that
    host's play will serve its cluster with, checked against the cluster's GPUs.

    Returns ``{"group", "clusters", "host_cluster", "nodes", "errors"}``: clusters by name (``head``, ``workers``,
    ``members`` in rank order, ``size``, ``gpus``, ``topology``, ``fabric_ips``, ``served_model_name``: what the
    inventory says the cluster serves clients under), each host's cluster, each host's
    place (``cluster``, ``head``, ``members``, ``rank``, ``is_head``, ``size``, ``gpus``, ``topology``,
    ``fabric_ip``) and every problem found, as sentences naming the cluster, host and variable and the fix.
    SERVICE_GROUPS (the gateway and monitoring groups) are never clusters, even when they hold a head alone.
    """
    errors: list[str] = []
    services = set(service_groups)
    if fleet not in groups:
        return {"group": fleet, "clusters": {}, "host_cluster": {}, "nodes": {}, "errors": [
            f"the inventory has no group '{fleet}': put every cluster's group under it (see "
            "inventories/example/hosts.yml), or set dgxspark_fleet_group to the group that holds them"]}
    fleet_hosts = list(dict.fromkeys(groups[fleet]))
    fleet_set = set(fleet_hosts)

    for host in fleet_hosts:
        if _role(hostvars, host) not in ("head", "worker"):
            errors.append(f"host {host}: {ROLE_VAR} is '{_role(hostvars, host) or 'unset'}'; set it to head or worker")

    for host in fleet_hosts:
        problem = check_value(host, FABRIC_IP_VAR, (hostvars.get(host) or {}).get(FABRIC_IP_VAR), "ip")
        if problem:
            errors.append(problem)

    candidates = {}
    several_heads: dict[str, list[str]] = {}
    for name, members in groups.items():
        if name in SPECIAL_GROUPS or name in services or name == fleet or not members or not set(members) <= fleet_set:
            continue
        heads = [h for h in dict.fromkeys(members) if _role(hostvars, h) == "head"]
        if len(heads) == 1:
            candidates[name] = list(members)
        elif len(heads) > 1:
            several_heads[name] = heads

    host_cluster: dict[str, str] = {}
    for host in fleet_hosts:
        explicit = _explicit_cluster(hostvars, host)
        if explicit:
            host_cluster[host] = explicit
            continue
        mine = [g for g, members in candidates.items() if host in members]
        crowded = [g for g, members in several_heads.items() if host in groups[g]]
        if not mine and crowded:
            # A group meant as a cluster with more than one head: name the heads, once per group.
            for name in crowded:
                message = (f"cluster {name}: it has {len(several_heads[name])} heads ({', '.join(several_heads[name])}); "
                           f"exactly one host per cluster has {ROLE_VAR}: head: set {ROLE_VAR}: worker on all but "
                           "one of them, or split the group into clusters (one head each)")
                if message not in errors:
                    errors.append(message)
        elif not mine:
            errors.append(f"host {host}: it is in no cluster (a group under '{fleet}' with exactly one head); add it "
                          f"to its cluster's group or set {CLUSTER_VAR} for it")
        elif len(mine) > 1:
            errors.append(f"host {host}: it is in several groups that look like clusters ({', '.join(sorted(mine))}); "
                          f"a host belongs to one cluster: move it, or set {CLUSTER_VAR} to the right one")
        else:
            host_cluster[host] = mine[0]

    clusters: dict[str, dict] = {}
    for host in fleet_hosts:
        name = host_cluster.get(host)
        if name is None:
            continue
        entry = clusters.setdefault(name, {"head": None, "workers": [], "fabric_ips": {}})
        if _role(hostvars, host) == "head":
            if entry["head"] is not None:
                errors.append(f"cluster {name}: it has two heads ({entry['head']}, {host}); exactly one host per "
                              f"cluster has {ROLE_VAR}: head: set {ROLE_VAR}: worker on all but one of them")
            else:
                entry["head"] = host
        elif _role(hostvars, host) == "worker":
            entry["workers"].append(host)
        ip = (hostvars.get(host) or {}).get(FABRIC_IP_VAR)
        if ip and not check_value(host, FABRIC_IP_VAR, ip, "ip"):
            entry["fabric_ips"][host] = str(ip)

    seen_ips: dict[str, tuple[str, str]] = {}
    parallel = parallel or {}
    for name, entry in sorted(clusters.items()):
        if entry["head"] is None:
            errors.append(f"cluster {name}: it has no head; set {ROLE_VAR}: head on exactly one of its hosts")
        members = _order_members(name, entry["head"], entry["workers"], hostvars, errors)
        entry["members"] = members
        entry["hosts"] = members  # the name fleet_pairs has always used
        entry["workers"] = members[1:] if entry["head"] else members
        entry["size"] = len(members)
        entry["gpus"] = len(members) * gpus_per_node
        if len(members) > max_nodes:
            errors.append(f"cluster {name}: it has {len(members)} Sparks ({', '.join(members)}); a cluster has 1 to "
                          f"{max_nodes}: split it into clusters (groups under '{fleet}', each with one head)")
        if len(members) < min_nodes:
            errors.append(f"cluster {name}: it has {len(members)} Spark(s) ({', '.join(members) or 'none'}); this play "
                          f"serves clusters of {min_nodes} to {max_nodes} Sparks: add a worker to the cluster's group, "
                          "or leave the node out of the fleet group")
        entry["topology"] = _topology(name, members, hostvars, errors)
        entry["served_model_name"] = served_model_name(hostvars.get(entry["head"]) or {}) if entry["head"] else ""
        checks = [(h, parallel[h]) for h in members if h in parallel] or (
            [("", parallel["*"])] if "*" in parallel else [])
        for host, want in checks:
            tensor, pipeline = int(want["tensor"]), int(want["pipeline"])
            tp_var, pp_var = want.get("variables") or ("tensor_parallel_size", "pipeline_parallel_size")
            if tensor < 1 or pipeline < 1 or tensor * pipeline != entry["gpus"]:
                who = f"host {host}: " if host else ""
                errors.append(f"cluster {name}: {who}{tp_var} x {pp_var} is {tensor} x {pipeline} = "
                              f"{tensor * pipeline} GPU(s), but the cluster has {entry['size']} Spark(s) = "
                              f"{entry['gpus']} GPU(s); set them so that the product is {entry['gpus']} "
                              f"(e.g. {tp_var}={entry['gpus']} and {pp_var}=1), or add or remove nodes")
        for host, ip in entry["fabric_ips"].items():
            if ip in seen_ips:
                other, other_cluster = seen_ips[ip]
                errors.append(f"cluster {name}: host {host} has {FABRIC_IP_VAR} {ip}, which {other} (cluster "
                              f"{other_cluster}) already uses; fabric IPs must be unique across the fleet")
            else:
                seen_ips[ip] = (host, name)

    nodes = {}
    for name, entry in clusters.items():
        for rank, host in enumerate(entry["members"]):
            nodes[host] = {"cluster": name, "head": entry["head"], "members": list(entry["members"]), "rank": rank,
                           "is_head": host == entry["head"], "size": entry["size"], "gpus": entry["gpus"],
                           "topology": entry["topology"], "fabric_ip": entry["fabric_ips"].get(host, "")}
    return {"group": fleet, "clusters": clusters, "host_cluster": host_cluster, "nodes": nodes, "errors": errors}


def resolve_gateways(groups: dict, hostvars: dict, gateway_group: str = GATEWAY_GROUP, *,
                     address_var: str = GATEWAY_ADDRESS_VAR, what: str = "gateway") -> tuple[list[dict], list[str]]:
    """The gateways: ``[{"host", "lan_ip"}]``, one per host of GATEWAY_GROUP (none when the group is absent or empty).

    A gateway's LAN address is its ``dgxspark_gateway_address``, else its ``ansible_host``, else its name; it must be
    an IP address (the heads' doors admit connections from it alone). A gateway host is not a cluster member unless
    it is also in the fleet group. Returns the gateways and the problems found, as sentences naming host and fix.
    The monitoring hosts (ADDRESS_VAR dgxspark_monitoring_address, WHAT "monitoring host") are resolved the same way:
    the doors admit them too.
    """
    gateways, errors = [], []
    for host in dict.fromkeys(groups.get(gateway_group) or []):
        hv = hostvars.get(host) or {}
        raw = hv.get(address_var) or hv.get("ansible_host") or host
        try:
            lan_ip = str(ipaddress.ip_address(str(raw).strip()))
        except ValueError:
            errors.append(f"{what} {host}: its LAN address '{raw}' is not an IP address (the heads' doors admit the "
                          f"{what}s by address); set {address_var} (or ansible_host) to its LAN IP")
            continue
        gateways.append({"host": host, "lan_ip": lan_ip})
    return gateways, errors


def service_host_warnings(host: str, nodes: dict, gateways: list[dict], monitors: list[dict]) -> list[str]:
    """What HOST, a gateway or monitoring host that is also a node of the fleet, can reach (security review M1): every
    head's door admits its address, so whatever runs on it (its own cluster's engine, Ray's workers running the
    model's code) reaches every cluster's engine through the doors with the engine keys a gateway holds (each
    cluster's, security review L7), or every engine's /metrics with the metrics key a monitoring host holds. Nothing
    without gateways (no door)."""
    node = nodes.get(host)
    roles = [what for what, hosts in (("a gateway", gateways), ("a monitoring host", monitors))
             if any(entry["host"] == host for entry in hosts)]
    if not node or not roles or not gateways:  # no gateway: no door, and the engines listen on the LAN anyway
        return []
    clusters = ", ".join(sorted({entry["cluster"] for entry in nodes.values()}))
    reach = (f"it holds every cluster's engine key, so a process on it (its own engine, Ray's workers running the "
             f"model's code) reaches the engines of {clusters} through their doors" if "a gateway" in roles else
             f"it holds the metrics key, so a process on it (its own engine, Ray's workers running the model's code) "
             f"reads the /metrics of the engines of {clusters} through their doors")
    return [f"{host} is {' and '.join(roles)} and a node of cluster {node['cluster']}: every head's door admits its "
            f"address and {reach}. Run the gateway and Prometheus on a host of their own to keep the clusters apart."]


def plain_hostvars(groups: dict, hostvars, fleet: str) -> dict:
    """The variables the model reads, for the fleet's hosts, from Ansible's lazy HOSTVARS (templating every variable
    of a host would fail on unrelated undefined ones, such as a vault variable this play does not use)."""
    out = {}
    for host in groups.get(fleet, []):
        hv = hostvars[host] if host in hostvars else {}
        out[host] = {key: hv.get(key) for key in HOST_VARS if key not in SERVED_VARS}
        out[host].update({key: _get(hv, key) for key in SERVED_VARS})
    return out


def _get(hv, key):
    """HV[KEY] templated, or None when it is unset or its template cannot be rendered here (a model variable that
    names a play's variable): served_model_name then goes on to the next variable, and the gateway names both
    names should the release disagree."""
    try:
        return hv.get(key)
    except Exception:  # pylint: disable=broad-except  # lazy hostvars: an undefined or broken template
        return None


FABRIC_KEYS = {"interface": "fabric_interface", "ip": "fabric_ip", "mtu": "fabric_mtu", "transport": "transport",
               "env": "env", "lan_ip": "lan_ip", "lan_interface": "lan_interface", "rails": "fabric_rails"}


def node_fabric(facts: dict | None) -> dict:
    """This node's fabric as the contract publishes it, from dgxspark.vllm.rdma_facts' result (or an already
    published ``fabric`` dict): interface, ip, mtu, transport, env (the NCCL/Ray/vLLM variables), lan_ip."""
    facts = facts or {}
    if "fabric_interface" not in facts and "interface" in facts:
        facts = {source: facts.get(key) for key, source in FABRIC_KEYS.items()}
    out = {key: facts.get(source) for key, source in FABRIC_KEYS.items()}
    out["env"] = {str(k): str(v) for k, v in (out["env"] or {}).items()}
    out["rails"] = [node_rail(rail) for rail in out["rails"] or [] if isinstance(rail, dict)]
    for key in ("interface", "ip", "transport", "lan_ip", "lan_interface"):
        out[key] = str(out[key]) if out[key] not in (None, "") else ""
    return out


def node_rail(rail: dict) -> dict:
    """One rail as the contract publishes it (rdma_facts' fabric_rails): interface, hca, ip, prefixlen, mtu,
    usable, problem."""
    def number(value):
        return int(value) if isinstance(value, int) or (isinstance(value, str) and value.isdigit()) else None
    return {"interface": str(rail.get("interface") or ""), "hca": str(rail.get("hca") or ""),
            "ip": str(rail.get("ip") or ""), "prefixlen": number(rail.get("prefixlen")), "mtu": number(rail.get("mtu")),
            "usable": bool(rail.get("usable")), "problem": str(rail.get("problem") or "")}


def with_fabric(node: dict, fabrics: dict) -> tuple[dict, list[str]]:
    """NODE (one entry of resolve_fleet's ``nodes``) with the fabric of its cluster's members added.

    FABRICS maps a member to its published fabric (node_fabric) or None when it has not published one yet. Adds
    ``fabric`` (this node's, {} when unknown), ``member_fabric`` (one entry a member, in rank order: host, rank, ip,
    lan_ip, interface, mtu; empty where unknown), ``member_rails`` (one entry a member, in rank order: host and the
    rails it published, see node_rail; an empty list where unknown), ``head_fabric_ip``, ``head_lan_ip`` and
    ``fabric_complete``
    (every member published). Returns it with the problems found: two members with one fabric IP.
    """
    errors = []
    members = []
    for rank, host in enumerate(node["members"]):
        fab = fabrics.get(host) or {}
        members.append({"host": host, "rank": rank, "ip": fab.get("ip") or "", "lan_ip": fab.get("lan_ip") or "",
                        "interface": fab.get("interface") or "", "mtu": fab.get("mtu")})
    for host in node["members"]:
        errors.extend(check_fabric(host, fabrics.get(host) or {}))
    seen: dict[str, str] = {}
    for entry in members:
        if entry["ip"] and entry["ip"] in seen:
            errors.append(f"cluster {node['cluster']}: hosts {seen[entry['ip']]} and {entry['host']} both have the "
                          f"fabric IP {entry['ip']} (found on their fabric interfaces); give each node its own address "
                          "(netplan) or set dgxspark_fabric_interface to the right port")
        elif entry["ip"]:
            seen[entry["ip"]] = entry["host"]
    head = members[0] if members and node.get("head") == members[0]["host"] else {"ip": "", "lan_ip": ""}
    out = dict(node)
    rails = [{"host": host, "rails": list((fabrics.get(host) or {}).get("rails") or [])} for host in node["members"]]
    out.update(fabric=dict(fabrics.get(node["members"][node["rank"]]) or {}), member_fabric=members, member_rails=rails,
               head_fabric_ip=head["ip"], head_lan_ip=head["lan_ip"],
               fabric_complete=all(fabrics.get(h) for h in node["members"]))
    return out, errors


def cluster_batches(fleet: dict, order: list[str], clusters_per_batch: int = 1) -> list[int]:
    """The sizes of a rolling play's batches (its ``serial`` list) such that every batch holds whole clusters.

    FLEET is resolve_fleet's result, ORDER the hosts in the play's order (``order: inventory``: the fleet group's
    order). Each batch is CLUSTERS_PER_BATCH clusters, in the order their first host comes. Raises ValueError when a
    cluster's hosts are not next to each other in ORDER (Ansible cuts batches by count, so a batch would split it).
    """
    if int(clusters_per_batch) < 1:
        raise ValueError(f"clusters per batch must be at least 1, is {clusters_per_batch}")
    hosts = [h for h in order if h in fleet["host_cluster"]]
    runs: list[tuple[str, int]] = []
    for host in hosts:
        name = fleet["host_cluster"][host]
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1] + 1)
        else:
            runs.append((name, 1))
    seen: set[str] = set()
    for name, _count in runs:
        if name in seen:
            members = [h for h in hosts if fleet["host_cluster"][h] == name]
            raise ValueError(f"cluster {name}: its hosts ({', '.join(members)}) are not listed together in the "
                             "inventory, so a rolling batch would split it; list each cluster's hosts under its group, "
                             "one cluster after the other")
        seen.add(name)
    step = int(clusters_per_batch)
    return [sum(count for _name, count in runs[i:i + step]) for i in range(0, len(runs), step)] or [1]
