# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixture filesystem trees shaped like the sysfs/procfs of a DGX Spark and of a lab node.

Used by the unit tests of ``_fabric`` and ``rdma_facts``. A tree is described by
plain dicts and written below a temporary directory; :func:`build_tree` returns the
matching ``ip -j -4 addr show`` output.

Shapes follow a real Spark: four CX7 functions ``rocep1s0f0``/``rocep1s0f1`` and
their twins ``roceP2p1s0f0``/``roceP2p1s0f1`` (netdevs ``enp1s0f0np0``,
``enp1s0f1np1``, ``enP2p1s0f0np0``, ``enP2p1s0f1np1``), one port each; GID tables
with a RoCE v1 and a RoCE v2 entry per address (link-local at 0/1, the IPv4-mapped
GIDs at 2/3), unused entries all zeros with unreadable attributes; the 10GbE
management port ``enP7s7`` (default route), Wi-Fi ``wlP9s9``, ``lo`` and ``docker0``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import pathlib
import typing as t

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
GID_TABLE_SIZE = 8


def mapped_gid(ipv4: str) -> str:
    """``192.168.100.10`` -> ``0000:0000:0000:0000:0000:ffff:c0a8:640a``."""
    value = int(ipaddress.IPv4Address(ipv4))
    return f"0000:0000:0000:0000:0000:ffff:{value >> 16:04x}:{value & 0xFFFF:04x}"


def link_local_gid(mac: str) -> str:
    """EUI-64 link-local GID of a MAC address, the way the kernel fills GID 0 and 1."""
    octets = [int(x, 16) for x in mac.split(":")]
    octets[0] ^= 0x02
    eui = octets[:3] + [0xFF, 0xFE] + octets[3:]
    groups = [f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2)]
    return "fe80:0000:0000:0000:" + ":".join(groups)


def spark_gids(mac: str, ipv4s: t.Sequence[str], netdev: str) -> dict[int, tuple[str, str | None, str | None]]:
    """GID table ``{index: (gid, type, ndev)}``: RoCE v1 and v2 per address, zeros after."""
    table: dict[int, tuple[str, str | None, str | None]] = {
        0: (link_local_gid(mac), "IB/RoCE v1", netdev),
        1: (link_local_gid(mac), "RoCE v2", netdev),
    }
    index = 2
    for ip in ipv4s:
        table[index] = (mapped_gid(ip), "IB/RoCE v1", netdev)
        table[index + 1] = (mapped_gid(ip), "RoCE v2", netdev)
        index += 2
    while index < GID_TABLE_SIZE:
        table[index] = (ZERO_GID, None, None)
        index += 1
    return table


def _write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")


def _pci(name: str) -> str:
    return f"pci0000:00/0000:00:01.0/{name}"


def build_tree(root: pathlib.Path, netdevs: dict[str, dict[str, t.Any]], rdma: dict[str, dict[str, t.Any]] | None = None,
               default_route: str | None = None) -> str:
    """Write the tree below ``root``; return the ``ip -j -4 addr show`` JSON.

    ``netdevs[name]``: ``operstate``, ``mtu``, ``mac``, ``ipv4`` (``["a.b.c.d/len"]``),
    ``virtual``, ``wireless``, ``type``. ``rdma[device]``: ``netdev``, ``state``,
    ``phys_state``, ``link_layer``, ``rate`` and ``gids`` (see :func:`spark_gids`),
    or ``ports`` (a list of such dicts) for multi-port devices.
    """
    ip_json = []
    for index, (name, spec) in enumerate(sorted(netdevs.items()), start=1):
        if spec.get("virtual"):
            real = root / "sys" / "devices" / "virtual" / "net" / name
            target = f"../../devices/virtual/net/{name}"
        else:
            real = root / "sys" / "devices" / _pci(name) / "net" / name
            target = f"../../devices/{_pci(name)}/net/{name}"
        real.mkdir(parents=True, exist_ok=True)
        _write(real / "operstate", spec.get("operstate", "up"))
        _write(real / "mtu", str(spec.get("mtu", 1500)))
        _write(real / "address", spec.get("mac", "00:00:00:00:00:00"))
        _write(real / "type", str(spec.get("type", 772 if name == "lo" else 1)))
        if spec.get("wireless"):
            (real / "wireless").mkdir()
        link = root / "sys" / "class" / "net" / name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, link)
        state = spec.get("operstate", "up")
        flags = ["LOOPBACK", "UP", "LOWER_UP"] if name == "lo" else ["BROADCAST", "MULTICAST"]
        if name != "lo" and state == "up":
            flags += ["UP", "LOWER_UP"]
        addrs = [ipaddress.IPv4Interface(a) for a in spec.get("ipv4", [])]
        if addrs:
            ip_json.append({
                "ifindex": index, "ifname": name, "flags": flags, "mtu": spec.get("mtu", 1500),
                "operstate": state.upper(), "group": "default",
                "addr_info": [{"family": "inet", "local": str(a.ip), "prefixlen": a.network.prefixlen,
                               "scope": "host" if name == "lo" else "global", "label": name} for a in addrs],
            })

    for device, spec in (rdma or {}).items():
        dev_dir = root / "sys" / "class" / "infiniband" / device
        ports = spec.get("ports") or [spec]
        netdev = spec.get("netdev") or ports[0].get("netdev")
        if netdev:
            (dev_dir / "device" / "net" / netdev).mkdir(parents=True, exist_ok=True)
        for number, port in enumerate(ports, start=1):
            port_dir = dev_dir / "ports" / str(number)
            _write(port_dir / "state", port.get("state", "4: ACTIVE"))
            _write(port_dir / "phys_state", port.get("phys_state", "5: LinkUp"))
            _write(port_dir / "link_layer", port.get("link_layer", "Ethernet"))
            _write(port_dir / "rate", port.get("rate", "200 Gb/sec (4X HDR)"))
            (port_dir / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
            (port_dir / "gid_attrs" / "ndevs").mkdir(parents=True, exist_ok=True)
            for gid_index, (gid, gid_type, ndev) in port.get("gids", {}).items():
                _write(port_dir / "gids" / str(gid_index), gid)
                # Unused entries: the kernel returns EINVAL; a missing file reads the same way.
                if gid_type is not None:
                    _write(port_dir / "gid_attrs" / "types" / str(gid_index), gid_type)
                if ndev is not None:
                    _write(port_dir / "gid_attrs" / "ndevs" / str(gid_index), ndev)

    route = ["Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"]
    for name, spec in sorted(netdevs.items()):
        for addr in spec.get("ipv4", []):
            net = ipaddress.IPv4Interface(addr).network
            if name == "lo":
                continue
            dest = f"{int.from_bytes(net.network_address.packed, 'little'):08X}"
            mask = f"{int.from_bytes(net.netmask.packed, 'little'):08X}"
            route.append(f"{name}\t{dest}\t00000000\t0001\t0\t0\t0\t{mask}\t0\t0\t0")
    if default_route:
        route.insert(1, f"{default_route}\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0")
    _write(root / "proc" / "net" / "route", "\n".join(route))
    return json.dumps(ip_json)


# --------------------------------------------------------------------------- Spark shapes

CX7 = (
    # (rdma device, netdev, MAC)
    ("rocep1s0f0", "enp1s0f0np0", "4c:bb:47:2d:00:10"),
    ("rocep1s0f1", "enp1s0f1np1", "4c:bb:47:2d:00:11"),
    ("roceP2p1s0f0", "enP2p1s0f0np0", "4c:bb:47:2d:00:12"),
    ("roceP2p1s0f1", "enP2p1s0f1np1", "4c:bb:47:2d:00:13"),
)


def spark_layout(host: int = 10, cabled: str = "f1", cx7_mtu: int = 9000,
                 addresses: dict[str, list[str]] | None = None) -> tuple[dict, dict, str]:
    """A DGX Spark as ``(netdevs, rdma, default_route)``.

    The QSFP cable sits in the ``cabled`` port pair (``f1``: ``rocep1s0f1`` +
    ``roceP2p1s0f1``, as in NVIDIA's connect-two-sparks); that pair is ACTIVE with
    ``192.168.100.<host>/24`` and ``192.168.101.<host>/24`` (``addresses``
    overrides them per netdev); the other pair is DOWN without addresses.
    """
    netdevs: dict[str, dict[str, t.Any]] = {
        "lo": {"operstate": "unknown", "mtu": 65536, "ipv4": ["127.0.0.1/8"], "virtual": True},
        "enP7s7": {"mtu": 1500, "mac": "4c:bb:47:2d:00:70", "ipv4": [f"10.0.0.{host}/24"]},
        "wlP9s9": {"mtu": 1500, "mac": "4c:bb:47:2d:00:90", "ipv4": [f"192.168.1.{host}/24"], "wireless": True},
        "docker0": {"operstate": "down", "mtu": 1500, "mac": "02:42:ac:11:00:01", "ipv4": ["172.17.0.1/16"], "virtual": True},
    }
    rdma: dict[str, dict[str, t.Any]] = {}
    subnet = {"enp": 100, "enP": 101}
    for device, netdev, mac in CX7:
        active = netdev.endswith(f"{cabled}np{cabled[-1]}")
        ips: list[str] = []
        if active:
            ips = [f"192.168.{subnet[netdev[:3]]}.{host}/24"]
        if addresses and netdev in addresses:
            ips = addresses[netdev]
        netdevs[netdev] = {"operstate": "up" if active else "down", "mtu": cx7_mtu if active else 1500, "mac": mac, "ipv4": ips}
        rdma[device] = {
            "netdev": netdev,
            "state": "4: ACTIVE" if active else "1: DOWN",
            "phys_state": "5: LinkUp" if active else "3: Disabled",
            "link_layer": "Ethernet",
            "rate": "200 Gb/sec (4X HDR)" if active else "40 Gb/sec (4X QDR)",
            "gids": spark_gids(mac, [ipaddress.IPv4Interface(a).ip.compressed for a in ips], netdev),
        }
    return netdevs, rdma, "enP7s7"


def lab_layout(host: int = 11) -> tuple[dict, dict, str]:
    """A lab node: a container with no RDMA, ``eth0`` (mgmt, default route) and a veth renamed ``enp1s0f1np1``."""
    netdevs = {
        "lo": {"operstate": "unknown", "mtu": 65536, "ipv4": ["127.0.0.1/8"], "virtual": True},
        "eth0": {"mtu": 1500, "mac": "02:42:ac:14:00:02", "ipv4": [f"172.20.0.{host}/16"], "virtual": True},
        "enp1s0f1np1": {"mtu": 9000, "mac": "02:42:c0:a8:64:0b", "ipv4": [f"192.168.100.{host}/24"], "virtual": True},
        "docker0": {"operstate": "down", "mtu": 1500, "mac": "02:42:ac:11:00:01", "ipv4": ["172.17.0.1/16"], "virtual": True},
    }
    return netdevs, {}, "eth0"


def write_layout(root: pathlib.Path, layout: tuple[dict, dict, str]) -> str:
    """Write a ``(netdevs, rdma, default_route)`` layout below ``root``; return the ip JSON."""
    netdevs, rdma, default_route = layout
    return build_tree(root, netdevs, rdma, default_route)
