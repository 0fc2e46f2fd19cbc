# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""Discovery of the RDMA (RoCE) fabric of a DGX Spark and of the per-node environment it needs.

Every function is pure with respect to the host: sysfs and procfs are read below
a ``root`` directory (``/`` on a real node, a fixture tree in unit tests), and the
output of ``ip -j -4 addr show`` is passed in as text. The module
``dgxspark.vllm.rdma_facts`` runs the command and calls :func:`analyse`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import typing as t

ROCE_V2 = "RoCE v2"

# The interface-derived variables. Every one of them is set from the one chosen
# fabric interface (one source of truth): eugr's get_env_flags,
# sparkrun's per-host IB detection and NVIDIA's connect-two-sparks/nccl playbooks
# all set this list to the CX7 interface.
IFNAME_VARS = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "UCX_NET_DEVICES",
    "OMPI_MCA_btl_tcp_if_include",
    "MN_IF_NAME",
)
# The node-IP variables: vLLM's VLLM_HOST_IP, and the two variables vLLM's own
# run_cluster.sh and eugr derive from it so that Ray registers the fabric IP,
# not the management IP (eugr/spark-vllm-docker#227).
IP_VARS = (
    "VLLM_HOST_IP",
    "RAY_NODE_IP_ADDRESS",
    "RAY_OVERRIDE_NODE_IP_ADDRESS",
)
FABRIC_VARS = IFNAME_VARS + IP_VARS + ("NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_DISABLE")

# Spark defaults, each one set by the projects named beside it:
SPARK_DEFAULTS = {
    # eugr (global) and sparkrun (IB detection) both set it on GB10.
    "NCCL_IGNORE_CPU_AFFINITY": "1",
    # Ray's memory monitor kills workers at 95 % of the unified memory and buries
    # the real OOM; eugr and NVIDIA's vLLM playbook set it.
    "RAY_memory_monitor_refresh_ms": "0",
    # eugr: no idle Python workers eating unified memory.
    "RAY_num_prestart_python_workers": "0",
}
# Deliberately NOT set:
# - NCCL_CUMEM_ENABLE=0: sparkrun sets it for its mp runtime only, and vLLM sets
#   it itself on import (vllm/env_override.py), so it would be redundant here.
# - NCCL_CROSS_NIC=1 (sparkrun): on a Spark the two twins sit on different
#   subnets (192.168.100.x / 192.168.101.x), so cross-NIC pairs cannot reach each
#   other; NCCL's default is left alone.
# - RAY_object_store_memory, PYTORCH_CUDA_ALLOC_CONF: sizing and allocator
#   choices belong to the role that starts Ray/vLLM, not to the fabric.
# - MASTER_ADDR: it names the head, so it is not a per-node value.

# With RoCE, sparkrun forces NCCL's IB transport (NCCL_NET=IB): if RDMA cannot be
# used NCCL then fails at init instead of silently running over NET/Socket at a
# fraction of the bandwidth. Remove it with extra_env if needed.
ROCE_DEFAULTS = {"NCCL_NET": "IB"}

# Only with debug=true (NCCL's documentation says its debugging variables must not
# stay set in production). INIT,NET is what shows NET/IB versus NET/Socket.
DEBUG_ENV = {
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
    "VLLM_LOGGING_LEVEL": "DEBUG",
}

# Interfaces never picked automatically (they may still be named with `interface`).
_AUTO_EXCLUDE_PREFIXES = (
    "docker", "br-", "virbr", "veth", "cni", "flannel", "cali", "weave", "lxc", "lxd",
    "podman", "tailscale", "tun", "tap", "wg", "vxlan", "genev", "kube",
)
# mlx5 netdevs carry the physical port name as suffix ("np0", "np1"): the CX7
# ports of a Spark are enp1s0f0np0, enp1s0f1np1, enP2p1s0f0np0, enP2p1s0f1np1.
_CX7_NAME = re.compile(r"np\d+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ARPHRD_LOOPBACK = "772"


class FabricError(Exception):
    """A configuration problem that the module reports with fail_json."""


# --------------------------------------------------------------------------- sysfs helpers

def _path(root: str, *parts: str) -> str:
    return os.path.join(root, *[p.lstrip("/") for p in parts])


def read_text(path: str) -> str | None:
    """Return the stripped content of a sysfs file, or None if it cannot be read.

    Reading sysfs attributes of unused GID entries fails with EINVAL on real
    kernels, so every read error means "no value".
    """
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except (OSError, ValueError):
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _numeric_entries(path: str) -> list[int]:
    return sorted(int(name) for name in _listdir(path) if name.isdigit())


def parse_state(text: str | None) -> str | None:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``; ``"5: LinkUp"`` -> ``"LinkUp"``."""
    if text is None:
        return None
    _num, sep, name = text.partition(":")
    return name.strip() if sep else text.strip()


def gid_ipv4(gid: str | None) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (``::ffff:a.b.c.d``), else None.

    ``0000:0000:0000:0000:0000:ffff:c0a8:640a`` -> ``192.168.100.10``. The all-zero
    GID and the mapped ``0.0.0.0`` are not addresses.
    """
    if not gid:
        return None
    groups = gid.strip().lower().split(":")
    if len(groups) != 8 or any(len(g) != 4 for g in groups):
        return None
    if groups[:5] != ["0000"] * 5 or groups[5] != "ffff":
        return None
    try:
        value = int(groups[6] + groups[7], 16)
    except ValueError:
        return None
    if value == 0:
        return None
    return str(ipaddress.IPv4Address(value))


def _is_zero_gid(gid: str | None) -> bool:
    return not gid or set(gid.replace(":", "")) <= {"0"}


# --------------------------------------------------------------------------- RDMA devices

def read_gid_table(port_dir: str) -> list[dict[str, t.Any]]:
    """The non-zero GID entries of one port, with their type, netdev and IPv4 (if mapped)."""
    table = []
    for index in _numeric_entries(os.path.join(port_dir, "gids")):
        gid = read_text(os.path.join(port_dir, "gids", str(index)))
        if _is_zero_gid(gid):
            continue
        table.append({
            "index": index,
            "gid": gid,
            "type": read_text(os.path.join(port_dir, "gid_attrs", "types", str(index))),
            "ndev": read_text(os.path.join(port_dir, "gid_attrs", "ndevs", str(index))) or None,
            "ipv4": gid_ipv4(gid),
        })
    return table


def select_roce_v2_gid(gids: list[dict[str, t.Any]], netdev: str | None,
                       addresses: t.Sequence[str] = ()) -> dict[str, t.Any] | None:
    """Pick the RoCE v2 GID entry with an IPv4-mapped address.

    Preference: its IPv4 is one of ``addresses`` (earlier addresses first), then
    its netdev is the port's own netdev (not a VLAN on top of it), then the
    lowest index.
    """
    candidates = [g for g in gids if g.get("type") == ROCE_V2 and g.get("ipv4")]
    if not candidates:
        return None
    order = list(addresses)

    def key(entry: dict[str, t.Any]) -> tuple[int, int, int]:
        addr_rank = order.index(entry["ipv4"]) if entry["ipv4"] in order else len(order)
        return (addr_rank, 0 if (netdev and entry.get("ndev") == netdev) else 1, entry["index"])

    return sorted(candidates, key=key)[0]


def read_rdma_devices(root: str = "/", addresses: t.Mapping[str, t.Sequence[str]] | None = None) -> dict[str, dict[str, t.Any]]:
    """Read ``<root>/sys/class/infiniband/*``.

    ``addresses`` maps netdev names to their IPv4 addresses (see
    :func:`parse_ip_addr_json`); it is used to prefer the GID that carries the
    netdev's own address. Returns ``{device: {"netdevs": [...], "ports": [...]}}``.
    """
    addresses = addresses or {}
    base = _path(root, "sys/class/infiniband")
    devices: dict[str, dict[str, t.Any]] = {}
    for name in _listdir(base):
        dev_dir = os.path.join(base, name)
        dev_netdevs = _listdir(os.path.join(dev_dir, "device", "net"))
        ports = []
        for port_num in _numeric_entries(os.path.join(dev_dir, "ports")):
            port_dir = os.path.join(dev_dir, "ports", str(port_num))
            gids = read_gid_table(port_dir)
            netdev = read_text(os.path.join(port_dir, "gid_attrs", "ndevs", "0")) or None
            if netdev is None:
                ndevs = [g["ndev"] for g in gids if g.get("ndev")]
                netdev = ndevs[0] if ndevs else (dev_netdevs[0] if dev_netdevs else None)
            chosen = select_roce_v2_gid(gids, netdev, addresses.get(netdev or "", ()))
            ports.append({
                "port": port_num,
                "state": parse_state(read_text(os.path.join(port_dir, "state"))),
                "phys_state": parse_state(read_text(os.path.join(port_dir, "phys_state"))),
                "link_layer": read_text(os.path.join(port_dir, "link_layer")),
                "rate": read_text(os.path.join(port_dir, "rate")),
                "netdev": netdev,
                "gids": gids,
                "roce_v2_gid_index": chosen["index"] if chosen else None,
                "roce_v2_ipv4": chosen["ipv4"] if chosen else None,
            })
        netdevs = list(dev_netdevs)
        for port in ports:
            for candidate in [port["netdev"]] + [g.get("ndev") for g in port["gids"]]:
                if candidate and candidate not in netdevs:
                    netdevs.append(candidate)
        devices[name] = {
            "netdevs": netdevs,
            "ports": ports,
            "active": any(p["state"] == "ACTIVE" for p in ports),
        }
    return devices


# --------------------------------------------------------------------------- netdevs

def parse_ip_addr_json(text: str) -> dict[str, dict[str, t.Any]]:
    """Parse ``ip -j -4 addr show`` into ``{ifname: {"flags": [...], "ipv4": [{address, prefixlen}]}}``."""
    try:
        data = json.loads(text or "[]")
    except ValueError as exc:
        raise FabricError(f"cannot parse the JSON output of 'ip -j -4 addr show': {exc}") from exc
    if not isinstance(data, list):
        raise FabricError("unexpected output of 'ip -j -4 addr show': not a JSON list")
    result: dict[str, dict[str, t.Any]] = {}
    for link in data:
        if not isinstance(link, dict) or not link.get("ifname"):
            continue
        entry = result.setdefault(str(link["ifname"]), {"flags": [], "ipv4": []})
        entry["flags"] = [str(f) for f in link.get("flags") or []]
        for addr in link.get("addr_info") or []:
            if not isinstance(addr, dict) or addr.get("family", "inet") != "inet" or not addr.get("local"):
                continue
            entry["ipv4"].append({"address": str(addr["local"]), "prefixlen": int(addr.get("prefixlen", 32))})
    return result


def read_default_route_interfaces(root: str = "/") -> list[str]:
    """Interfaces that carry an IPv4 default route, from ``<root>/proc/net/route``."""
    text = read_text(_path(root, "proc/net/route"))
    found: list[str] = []
    for line in (text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        iface, dest, flags, mask = fields[0], fields[1], fields[3], fields[7]
        try:
            up = int(flags, 16) & 0x1
        except ValueError:
            continue
        if dest == "00000000" and mask == "00000000" and up and iface not in found:
            found.append(iface)
    return found


def read_netdevs(root: str = "/", ip_info: t.Mapping[str, t.Mapping[str, t.Any]] | None = None,
                 default_route: t.Sequence[str] = ()) -> dict[str, dict[str, t.Any]]:
    """Read ``<root>/sys/class/net/*`` and merge the IPv4 addresses of ``ip_info``."""
    ip_info = ip_info or {}
    base = _path(root, "sys/class/net")
    netdevs: dict[str, dict[str, t.Any]] = {}
    for name in _listdir(base):
        link = os.path.join(base, name)
        operstate = (read_text(os.path.join(link, "operstate")) or "unknown").lower()
        mtu_text = read_text(os.path.join(link, "mtu"))
        info = ip_info.get(name, {})
        flags = list(info.get("flags", []))
        resolved = os.path.realpath(link).replace(os.sep, "/")
        virtual = "/devices/virtual/" in resolved or os.path.isdir(_path(root, "sys/devices/virtual/net", name))
        loopback = name == "lo" or read_text(os.path.join(link, "type")) == _ARPHRD_LOOPBACK or "LOOPBACK" in flags
        up = operstate == "up" or (operstate == "unknown" and "UP" in flags and "LOWER_UP" in flags)
        netdevs[name] = {
            "operstate": operstate,
            "up": up,
            "mtu": int(mtu_text) if mtu_text and mtu_text.isdigit() else None,
            "address": read_text(os.path.join(link, "address")),
            "virtual": virtual,
            "loopback": loopback,
            "wireless": os.path.isdir(os.path.join(link, "wireless")) or os.path.exists(os.path.join(link, "phy80211")),
            "default_route": name in default_route,
            "ipv4": [dict(a) for a in info.get("ipv4", [])],
            "rdma_device": None,
        }
    return netdevs


def _ipv4_list(netdev: t.Mapping[str, t.Any]) -> list[str]:
    return [a["address"] for a in netdev.get("ipv4", [])]


# --------------------------------------------------------------------------- choice

def parse_network(value: str | None) -> ipaddress.IPv4Network | None:
    """``fabric_cidr``: a network (``192.168.100.0/24``) or one address (``192.168.100.10``, i.e. /32)."""
    if value is None or str(value).strip() == "":
        return None
    try:
        network = ipaddress.ip_network(str(value).strip(), strict=False)
    except ValueError as exc:
        raise FabricError(f"fabric_cidr {value!r} is not an IPv4 address or network: {exc}") from exc
    if not isinstance(network, ipaddress.IPv4Network):
        raise FabricError(f"fabric_cidr {value!r} is not IPv4; the fabric needs an IPv4 address (RoCE v2 IPv4 GID)")
    return network


def usable_roce_ports(rdma_devices: t.Mapping[str, t.Mapping[str, t.Any]],
                      netdevs: t.Mapping[str, t.Mapping[str, t.Any]]) -> tuple[list[dict[str, t.Any]], list[str]]:
    """RoCE ports NCCL can use, and the reasons the other ACTIVE ports cannot be used.

    Usable: state ACTIVE, link layer Ethernet, a RoCE v2 GID with an IPv4
    address, and a netdev that is up.
    """
    usable, problems = [], []
    for device in sorted(rdma_devices):
        for port in rdma_devices[device]["ports"]:
            if port["state"] != "ACTIVE":
                continue
            label = f"{device} port {port['port']}"
            if port["link_layer"] != "Ethernet":
                problems.append(f"{label} is ACTIVE but its link layer is {port['link_layer']!r}, not Ethernet (RoCE)")
                continue
            netdev = port["netdev"]
            if port["roce_v2_gid_index"] is None:
                problems.append(f"{label} (netdev {netdev}) is ACTIVE but has no RoCE v2 GID with an IPv4 address;"
                                " give its netdev an IPv4 address (netplan)")
                continue
            if not netdev or netdev not in netdevs or not netdevs[netdev]["up"]:
                problems.append(f"{label} is ACTIVE but its netdev {netdev!r} is not up")
                continue
            usable.append({"device": device, "port": port["port"], "netdev": netdev,
                           "gid_index": port["roce_v2_gid_index"], "ipv4": port["roce_v2_ipv4"],
                           "device_ports": len(rdma_devices[device]["ports"])})
    return usable, problems


def _spark_rank(name: str) -> tuple[bool, str]:
    # eugr's autodiscover prefers the name without a capital P (enp1s0f1np1 over enP2p1s0f1np1).
    return ("P" in name, name)


def nccl_ib_hca(usable: list[dict[str, t.Any]]) -> str:
    """NCCL_IB_HCA: every usable HCA, in the same order on every node.

    A single-port device (a Spark's CX7 functions) is named bare, like eugr and
    sparkrun do; a multi-port device whose ports are not all usable is named
    ``device:port``.
    """
    by_device: dict[str, list[int]] = {}
    device_ports: dict[str, int] = {}
    for entry in usable:
        by_device.setdefault(entry["device"], []).append(entry["port"])
        device_ports[entry["device"]] = entry["device_ports"]
    names = []
    for device in sorted(by_device, key=_spark_rank):
        ports = sorted(by_device[device])
        if len(ports) == device_ports[device]:
            names.append(device)
        else:
            names.extend(f"{device}:{p}" for p in ports)
    return ",".join(names)


def fabric_rails(rdma_devices: t.Mapping[str, t.Mapping[str, t.Any]], netdevs: t.Mapping[str, t.Mapping[str, t.Any]],
                 usable: list[dict[str, t.Any]], fabric_interface: str, fabric_ip: str) -> list[dict[str, t.Any]]:
    """The rails of this node: what NCCL sends over, in the same order on every node (no capital P first).

    With RoCE, one rail a RoCE port that is ACTIVE on Ethernet: on a Spark the two twins of the cabled CX7 port
    (``enp1s0f1np1`` and ``enP2p1s0f1np1``), each with its own address and subnet. ``usable`` rails are the ones
    ``NCCL_IB_HCA`` lists; an ACTIVE twin that cannot be used (no IPv4 address, netdev down) is kept with
    ``usable: false`` and its ``problem``, so that the cluster's check can name it. Without RoCE, NCCL's sockets use
    the fabric interface alone: one rail. Each rail: ``interface``, ``hca`` (empty with sockets), ``ip``,
    ``prefixlen``, ``mtu``, ``usable``, ``problem``.
    """
    def prefixlen(name: str, address: str | None) -> int | None:
        for entry in netdevs.get(name, {}).get("ipv4", []):
            if entry.get("address") == address:
                return entry.get("prefixlen")
        return None

    if not usable:
        return [{"interface": fabric_interface, "hca": "", "ip": fabric_ip,
                 "prefixlen": prefixlen(fabric_interface, fabric_ip),
                 "mtu": netdevs.get(fabric_interface, {}).get("mtu"), "usable": True, "problem": ""}]
    by_port = {(u["device"], u["port"]): u for u in usable}
    rails = []
    for device in sorted(rdma_devices):
        for port in rdma_devices[device]["ports"]:
            if port["state"] != "ACTIVE" or port["link_layer"] != "Ethernet":
                continue
            netdev = port["netdev"] or ""
            hca = device if len(rdma_devices[device]["ports"]) == 1 else f"{device}:{port['port']}"
            entry = by_port.get((device, port["port"]))
            dev = netdevs.get(netdev) or {}
            if entry:
                rails.append({"interface": netdev, "hca": hca, "ip": entry["ipv4"],
                              "prefixlen": prefixlen(netdev, entry["ipv4"]), "mtu": dev.get("mtu"), "usable": True,
                              "problem": ""})
                continue
            if port["roce_v2_gid_index"] is None:
                problem = "it has no IPv4 address (so no RoCE v2 GID)"
            else:
                problem = "its netdev is not up"
            rails.append({"interface": netdev, "hca": hca, "ip": "", "prefixlen": None, "mtu": dev.get("mtu"),
                          "usable": False, "problem": problem})
    rails.sort(key=lambda r: (not r["usable"], _spark_rank(r["interface"] or r["hca"])))
    return rails


def _describe(name: str, netdev: t.Mapping[str, t.Any]) -> str:
    addrs = ", ".join(f"{a['address']}/{a['prefixlen']}" for a in netdev.get("ipv4", [])) or "no IPv4"
    extra = [netdev["operstate"]]
    if netdev.get("rdma_device"):
        extra.append(f"RoCE {netdev['rdma_device']}")
    if netdev.get("default_route"):
        extra.append("default route")
    if netdev.get("wireless"):
        extra.append("wireless")
    return f"{name} ({addrs}; {', '.join(extra)})"


def candidate_list(netdevs: t.Mapping[str, t.Mapping[str, t.Any]]) -> str:
    """Human-readable list of the interfaces that could be the fabric (up, IPv4, not loopback)."""
    names = [n for n, d in netdevs.items() if d["up"] and d["ipv4"] and not d["loopback"]]
    names.sort(key=lambda n: (not netdevs[n].get("rdma_device"), not _CX7_NAME.search(n), _spark_rank(n)))
    return "; ".join(_describe(n, netdevs[n]) for n in names) or "none (no interface is up with an IPv4 address)"


def _auto_excluded(name: str, netdev: t.Mapping[str, t.Any]) -> bool:
    return netdev["loopback"] or netdev["wireless"] or name.startswith(_AUTO_EXCLUDE_PREFIXES)


def _pick_ip(name: str, netdev: t.Mapping[str, t.Any], network: ipaddress.IPv4Network | None,
             preferred: t.Sequence[str] = ()) -> str | None:
    addrs = _ipv4_list(netdev)
    if network is not None:
        addrs = [a for a in addrs if ipaddress.IPv4Address(a) in network]
    for address in preferred:
        if address in addrs:
            return address
    return addrs[0] if addrs else None


def choose_fabric_interface(netdevs: t.Mapping[str, t.Mapping[str, t.Any]], roce_netdevs: t.Sequence[str] = (),
                            interface: str | None = None, network: ipaddress.IPv4Network | None = None,
                            gid_ipv4: t.Mapping[str, str] | None = None) -> tuple[str, str, list[str]]:
    """Return ``(interface, ipv4, warnings)`` or raise :class:`FabricError`.

    1. ``interface`` (the inventory override) wins; it must exist, be up and have
       an IPv4 address (inside ``network`` when that is given).
    2. Otherwise, among the interfaces that are up with an IPv4 address (inside
       ``network`` when given), rank: RoCE netdev with a usable HCA, CX7 port name
       (``...np<N>``), no default route, not virtual, no capital ``P`` (eugr's
       rule), name. Loopback, wireless and container bridges are never picked
       automatically.
    """
    gid_ipv4 = gid_ipv4 or {}
    warnings: list[str] = []
    where = f" in {network}" if network is not None else ""
    if interface:
        if interface not in netdevs:
            raise FabricError(f"fabric interface {interface!r} (option interface) does not exist on this node;"
                              f" candidates: {candidate_list(netdevs)}")
        dev = netdevs[interface]
        if dev["loopback"]:
            raise FabricError(f"fabric interface {interface!r} (option interface) is the loopback interface;"
                              f" candidates: {candidate_list(netdevs)}")
        if not dev["up"]:
            raise FabricError(f"fabric interface {interface!r} (option interface) is not up (operstate {dev['operstate']!r});"
                              f" candidates: {candidate_list(netdevs)}")
        if not dev["ipv4"]:
            raise FabricError(f"fabric interface {interface!r} (option interface) has no IPv4 address;"
                              f" candidates: {candidate_list(netdevs)}")
        ip = _pick_ip(interface, dev, network, [gid_ipv4[interface]] if interface in gid_ipv4 else ())
        if ip is None:
            raise FabricError(f"fabric interface {interface!r} (option interface) has no IPv4 address{where}"
                              f" (option fabric_cidr); it has {', '.join(_ipv4_list(dev))}; candidates: {candidate_list(netdevs)}")
        if roce_netdevs and interface not in roce_netdevs:
            warnings.append(f"fabric interface {interface} (option interface) is not the netdev of a usable RoCE HCA"
                            f" ({', '.join(roce_netdevs)}): NCCL data still goes over RoCE, but Ray, vLLM and the NCCL"
                            f" bootstrap will use {interface} ({ip})")
        return interface, ip, warnings

    pool = []
    for name, dev in netdevs.items():
        if not dev["up"] or not dev["ipv4"] or dev["loopback"]:
            continue
        if network is None and _auto_excluded(name, dev):
            continue
        if network is not None and _pick_ip(name, dev, network) is None:
            continue
        pool.append(name)
    if not pool:
        raise FabricError(f"no interface is up with an IPv4 address{where} that could carry the fabric;"
                          f" set the option interface (or fabric_cidr); candidates: {candidate_list(netdevs)}")

    def rank(name: str) -> tuple[t.Any, ...]:
        dev = netdevs[name]
        return (name not in roce_netdevs, not _CX7_NAME.search(name), dev["default_route"], dev["virtual"]) + _spark_rank(name)

    pool.sort(key=rank)
    chosen = pool[0]
    if chosen not in roce_netdevs and not _CX7_NAME.search(chosen):
        others = ", ".join(pool[1:]) or "none"
        warnings.append(f"no CX7 interface (name ending in np<N>) is up with an IPv4 address{where}; chose {chosen}"
                        f" by rule (other candidates: {others}); set the option interface to make this explicit")
    if roce_netdevs and chosen not in roce_netdevs:
        warnings.append(f"no netdev of a usable RoCE HCA ({', '.join(roce_netdevs)}) has an address{where};"
                        f" Ray, vLLM and the NCCL bootstrap will use {chosen}")
    ip = _pick_ip(chosen, netdevs[chosen], network, [gid_ipv4[chosen]] if chosen in gid_ipv4 else ())
    return chosen, t.cast(str, ip), warnings


# --------------------------------------------------------------------------- environment

def _env_value(key: str, value: t.Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise FabricError(f"extra_env[{key!r}] must be a string or a number, not {type(value).__name__}")


def build_env(interface: str, ip: str, transport: str, hcas: str = "", gid_index: int | None = None,
              debug: bool = False, extra_env: t.Mapping[str, t.Any] | None = None) -> tuple[dict[str, str], list[str]]:
    """The environment of this node's Ray/vLLM containers, as ``(env, warnings)``.

    Every interface and IP value comes from ``interface`` / ``ip``. ``extra_env``
    is merged last; a ``None`` value removes a variable.
    """
    warnings: list[str] = []
    env: dict[str, str] = {}
    for key in IP_VARS:
        env[key] = ip
    for key in IFNAME_VARS:
        env[key] = interface
    if transport == "roce":
        env["NCCL_IB_DISABLE"] = "0"
        env["NCCL_IB_HCA"] = hcas
        if gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(gid_index)
        env.update(ROCE_DEFAULTS)
    else:
        env["NCCL_IB_DISABLE"] = "1"
    env.update(SPARK_DEFAULTS)
    if debug:
        env.update(DEBUG_ENV)
    for key, value in (extra_env or {}).items():
        key = str(key)
        if not _ENV_NAME.match(key):
            raise FabricError(f"extra_env key {key!r} is not a valid environment variable name")
        if value is None:
            env.pop(key, None)
            continue
        value = _env_value(key, value)
        if key in FABRIC_VARS and key in env and env[key] != value:
            warnings.append(f"extra_env overrides {key}={env[key]} (derived from the fabric interface) with {value}")
        env[key] = value
    return env, warnings


# --------------------------------------------------------------------------- MTU and the LAN

# NVIDIA's cx7-netplan.yaml sets no MTU, so a Spark's fabric comes up at 1500: it works, only slower than at 9000.
RECOMMENDED_MTU = 9000


def mtu_advice(interface: str, mtu: int | None) -> str | None:
    """A warning for a fabric interface below RECOMMENDED_MTU, saying how to raise it; None at or above it."""
    if mtu is None or mtu >= RECOMMENDED_MTU:
        return None
    return (f"fabric interface {interface} has MTU {mtu} (NVIDIA's netplan sets none): the pair works, but RoCE and"
            f" NCCL move more per frame at {RECOMMENDED_MTU}. Add `mtu: {RECOMMENDED_MTU}` to {interface} and its twin"
            " in /etc/netplan/40-cx7.yaml on both nodes of the pair and run `sudo netplan apply`")


def lan_address(netdevs: t.Mapping[str, t.Mapping[str, t.Any]], ssh_connection: str | None = None,
                exclude: t.Sequence[str] = (), hint: str | None = None) -> tuple[str | None, str | None]:
    """(interface, IPv4) of this node on the controller's network (the LAN), or (None, None).

    In order: ``hint`` (the inventory's ``ansible_host``) when an interface of this node holds it (a DNS name never
    does); the address the controller's SSH connection arrived on (``SSH_CONNECTION``: client address, client port,
    server address, server port; sudo drops it) when an interface holds it; otherwise the first address of the
    interface with the default route. Interfaces in ``exclude`` (the fabric) never qualify: the fabric is point to
    point, so no client on the LAN could use them.
    """
    fields = (ssh_connection or "").split()
    for address in ([hint] if hint else []) + ([fields[2]] if len(fields) == 4 else []):
        for name, dev in netdevs.items():
            if name not in exclude and address in _ipv4_list(dev):
                return name, address
    for name, dev in sorted(netdevs.items()):
        if dev.get("default_route") and name not in exclude and _ipv4_list(dev):
            return name, _ipv4_list(dev)[0]
    return None, None


# --------------------------------------------------------------------------- all together

def analyse(root: str = "/", ip_json: str = "[]", interface: str | None = None, fabric_cidr: str | None = None,
            require_rdma: bool = False, mtu: int | None = None, debug: bool = False,
            extra_env: t.Mapping[str, t.Any] | None = None, ssh_connection: str | None = None,
            lan_hint: str | None = None, fabric: bool = True) -> dict[str, t.Any]:
    """Discover the fabric below ``root`` and return the facts of ``dgxspark.vllm.rdma_facts``.

    With ``fabric`` false (a one-node cluster: a single Spark has no cabled fabric) only the LAN address is looked
    for: no fabric interface is chosen, the transport is ``none`` and the environment is empty.

    Raises :class:`FabricError` with a message naming what is wrong.
    """
    network = parse_network(fabric_cidr)
    ip_info = parse_ip_addr_json(ip_json)
    netdevs = read_netdevs(root, ip_info, read_default_route_interfaces(root))
    if not fabric:
        lan_interface, lan_ip = lan_address(netdevs, ssh_connection, hint=lan_hint)
        return {"rdma_devices": {}, "netdevs": netdevs, "fabric_interface": None, "fabric_ip": None,
                "fabric_mtu": None, "fabric_hcas": [], "fabric_rails": [], "transport": "none", "env": dict(extra_env or {}),
                "lan_interface": lan_interface, "lan_ip": lan_ip, "warnings": []}
    addresses = {name: _ipv4_list(dev) for name, dev in netdevs.items()}
    rdma_devices = read_rdma_devices(root, addresses)
    for device in sorted(rdma_devices, key=_spark_rank):
        for name in rdma_devices[device]["netdevs"]:
            if name in netdevs and netdevs[name]["rdma_device"] is None:
                netdevs[name]["rdma_device"] = device

    warnings: list[str] = []
    usable, problems = usable_roce_ports(rdma_devices, netdevs)
    roce_netdevs = sorted({u["netdev"] for u in usable}, key=_spark_rank)
    gid_ip = {u["netdev"]: u["ipv4"] for u in usable}

    if usable:
        transport = "roce"
        warnings.extend(problems)
    else:
        transport = "socket"
        if not os.path.isdir(_path(root, "sys/class/infiniband")):
            reason = "/sys/class/infiniband does not exist (no RDMA driver or device)"
        elif not rdma_devices:
            reason = "/sys/class/infiniband has no device"
        elif problems:
            reason = "; ".join(problems)
        else:
            reason = f"no port of {', '.join(sorted(rdma_devices))} is ACTIVE (is the QSFP cable connected?)"
        if require_rdma:
            raise FabricError(f"RDMA is required (require_rdma=true) but no RoCE port can be used: {reason}")

    fabric_interface, fabric_ip, choice_warnings = choose_fabric_interface(
        netdevs, roce_netdevs, interface=interface, network=network, gid_ipv4=gid_ip)
    warnings.extend(choice_warnings)
    fabric_mtu = netdevs[fabric_interface]["mtu"]
    if mtu is not None and (fabric_mtu is None or fabric_mtu < mtu):
        raise FabricError(f"fabric interface {fabric_interface} has MTU {fabric_mtu}, lower than the expected {mtu}"
                          " (option mtu); set the MTU (e.g. 9000 in /etc/netplan/40-cx7.yaml) on every node of the pair")
    advice = mtu_advice(fabric_interface, fabric_mtu)
    if advice:
        warnings.append(advice)

    hcas = nccl_ib_hca(usable) if usable else ""
    gid_index = None
    if usable:
        indices = sorted({u["gid_index"] for u in usable})
        if len(indices) == 1:
            gid_index = indices[0]
        else:
            detail = ", ".join(f"{u['device']}={u['gid_index']}" for u in sorted(usable, key=lambda u: _spark_rank(u["device"])))
            warnings.append(f"the RoCE v2 IPv4 GID index differs between HCAs ({detail}); NCCL_IB_GID_INDEX is left"
                            " unset so that NCCL (>= 2.21) selects the RoCE v2 GID of each HCA itself")
    else:
        warnings.insert(0, f"no usable RDMA device: {reason}. NCCL falls back to socket transport (NCCL_IB_DISABLE=1)"
                           f" over {fabric_interface} ({fabric_ip}); expected in the GPU-free lab, on a DGX Spark"
                           " check the CX7 link with ibdev2netdev")

    env, env_warnings = build_env(fabric_interface, fabric_ip, transport, hcas, gid_index, debug, extra_env)
    warnings.extend(env_warnings)
    twins = [name for name, dev in netdevs.items() if dev.get("rdma_device") and dev["rdma_device"] in rdma_devices]
    lan_interface, lan_ip = lan_address(netdevs, ssh_connection, exclude=[fabric_interface, *twins], hint=lan_hint)
    return {
        "rdma_devices": rdma_devices,
        "netdevs": netdevs,
        "fabric_interface": fabric_interface,
        "fabric_ip": fabric_ip,
        "fabric_mtu": fabric_mtu,
        "fabric_hcas": hcas.split(",") if hcas else [],
        "fabric_rails": fabric_rails(rdma_devices, netdevs, usable, fabric_interface, fabric_ip),
        "transport": transport,
        "env": env,
        "lan_interface": lan_interface,
        "lan_ip": lan_ip,
        "warnings": warnings,
    }
