# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of plugins/module_utils/_fabric.py against fixture sysfs trees."""

from __future__ import annotations

import json

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _fabric as fabric
from ansible_collections.dgxspark.vllm.tests.unit.plugins.module_utils import fabric_trees as trees

SPARK_ENV = {
    "VLLM_HOST_IP": "192.168.100.10",
    "RAY_NODE_IP_ADDRESS": "192.168.100.10",
    "RAY_OVERRIDE_NODE_IP_ADDRESS": "192.168.100.10",
    "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
    "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
    "TP_SOCKET_IFNAME": "enp1s0f1np1",
    "UCX_NET_DEVICES": "enp1s0f1np1",
    "OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1",
    "MN_IF_NAME": "enp1s0f1np1",
    "NCCL_IB_DISABLE": "0",
    "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_NET": "IB",
    "NCCL_IGNORE_CPU_AFFINITY": "1",
    "RAY_memory_monitor_refresh_ms": "0",
    "RAY_num_prestart_python_workers": "0",
}

LAB_ENV = {
    "VLLM_HOST_IP": "192.168.100.11",
    "RAY_NODE_IP_ADDRESS": "192.168.100.11",
    "RAY_OVERRIDE_NODE_IP_ADDRESS": "192.168.100.11",
    "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
    "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
    "TP_SOCKET_IFNAME": "enp1s0f1np1",
    "UCX_NET_DEVICES": "enp1s0f1np1",
    "OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1",
    "MN_IF_NAME": "enp1s0f1np1",
    "NCCL_IB_DISABLE": "1",
    "NCCL_IGNORE_CPU_AFFINITY": "1",
    "RAY_memory_monitor_refresh_ms": "0",
    "RAY_num_prestart_python_workers": "0",
}


def run(tmp_path, layout, **kwargs):
    ip_json = trees.write_layout(tmp_path, layout)
    return fabric.analyse(str(tmp_path), ip_json, **kwargs)


def assert_consistent(facts):
    """Requirement 4: every IF/IP value of the env comes from the one fabric interface."""
    env, name, ip = facts["env"], facts["fabric_interface"], facts["fabric_ip"]
    for key in fabric.IFNAME_VARS:
        assert env[key] == name, key
    for key in fabric.IP_VARS:
        assert env[key] == ip, key
    assert ip in [a["address"] for a in facts["netdevs"][name]["ipv4"]]
    assert facts["fabric_mtu"] == facts["netdevs"][name]["mtu"]
    assert all(isinstance(v, str) for v in facts["env"].values())


# --------------------------------------------------------------------------- parsers

@pytest.mark.parametrize("gid, expected", [
    ("0000:0000:0000:0000:0000:ffff:c0a8:640a", "192.168.100.10"),
    ("0000:0000:0000:0000:0000:FFFF:C0A8:650A", "192.168.101.10"),
    ("0000:0000:0000:0000:0000:ffff:0000:0000", None),
    ("0000:0000:0000:0000:0000:0000:0000:0000", None),
    ("fe80:0000:0000:0000:4ebb:47ff:fe2d:0011", None),
    ("2001:0db8:0000:0000:0000:ffff:c0a8:640a", None),
    ("::ffff:192.168.100.10", None),
    ("", None),
    (None, None),
])
def test_gid_ipv4(gid, expected):
    assert fabric.gid_ipv4(gid) == expected


@pytest.mark.parametrize("text, expected", [
    ("4: ACTIVE", "ACTIVE"), ("1: DOWN", "DOWN"), ("5: LinkUp", "LinkUp"), ("3: Disabled", "Disabled"),
    ("ACTIVE", "ACTIVE"), (None, None),
])
def test_parse_state(text, expected):
    assert fabric.parse_state(text) == expected


def test_parse_ip_addr_json_keeps_every_ipv4_and_flags():
    text = json.dumps([
        {"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"],
         "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
        {"ifindex": 7, "ifname": "enp1s0f1np1", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
         "addr_info": [{"family": "inet", "local": "192.168.100.10", "prefixlen": 24},
                       {"family": "inet", "local": "10.9.9.9", "prefixlen": 32, "secondary": True},
                       {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]},
        {"ifindex": 9, "ifname": "eth1", "flags": ["UP"], "addr_info": []},
    ])
    assert fabric.parse_ip_addr_json(text) == {
        "lo": {"flags": ["LOOPBACK", "UP", "LOWER_UP"], "ipv4": [{"address": "127.0.0.1", "prefixlen": 8}]},
        "enp1s0f1np1": {"flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
                        "ipv4": [{"address": "192.168.100.10", "prefixlen": 24}, {"address": "10.9.9.9", "prefixlen": 32}]},
        "eth1": {"flags": ["UP"], "ipv4": []},
    }


@pytest.mark.parametrize("text", ["{not json", '{"ifname": "eth0"}'])
def test_parse_ip_addr_json_rejects_garbage(text):
    with pytest.raises(fabric.FabricError, match="ip -j -4 addr show"):
        fabric.parse_ip_addr_json(text)


def test_default_route_interfaces(tmp_path):
    trees.write_layout(tmp_path, trees.spark_layout())
    assert fabric.read_default_route_interfaces(str(tmp_path)) == ["enP7s7"]
    assert fabric.read_default_route_interfaces(str(tmp_path / "nowhere")) == []


# --------------------------------------------------------------------------- sysfs readers

def test_read_rdma_devices_spark(tmp_path):
    ip_json = trees.write_layout(tmp_path, trees.spark_layout())
    addresses = {n: [a["address"] for a in d["ipv4"]] for n, d in fabric.parse_ip_addr_json(ip_json).items()}
    devices = fabric.read_rdma_devices(str(tmp_path), addresses)
    assert sorted(devices) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]

    dev = devices["rocep1s0f1"]
    assert dev["netdevs"] == ["enp1s0f1np1"]
    assert dev["active"] is True
    port = dev["ports"][0]
    assert {k: v for k, v in port.items() if k != "gids"} == {
        "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "link_layer": "Ethernet",
        "rate": "200 Gb/sec (4X HDR)", "netdev": "enp1s0f1np1",
        "roce_v2_gid_index": 3, "roce_v2_ipv4": "192.168.100.10",
    }
    # zero entries 4..7 are skipped; v1 and v2 for link-local and for the IPv4
    assert [(g["index"], g["type"], g["ipv4"]) for g in port["gids"]] == [
        (0, "IB/RoCE v1", None), (1, "RoCE v2", None), (2, "IB/RoCE v1", "192.168.100.10"), (3, "RoCE v2", "192.168.100.10"),
    ]
    assert devices["roceP2p1s0f1"]["ports"][0]["roce_v2_ipv4"] == "192.168.101.10"

    down = devices["rocep1s0f0"]
    assert down["active"] is False
    assert (down["ports"][0]["state"], down["ports"][0]["phys_state"]) == ("DOWN", "Disabled")
    assert down["ports"][0]["roce_v2_gid_index"] is None


def test_roce_v2_gid_prefers_the_netdevs_own_address(tmp_path):
    # the first RoCE v2 IPv4 GID (index 3) carries a secondary address; the
    # netdev's primary 192.168.100.10 is at index 5
    layout = trees.spark_layout(addresses={"enp1s0f1np1": ["192.168.100.10/24", "10.55.0.1/32"]})
    netdevs, rdma, _route = layout
    rdma["rocep1s0f1"]["gids"] = trees.spark_gids("4c:bb:47:2d:00:11", ["10.55.0.1", "192.168.100.10"], "enp1s0f1np1")
    facts = run(tmp_path, (netdevs, rdma, "enP7s7"))
    port = facts["rdma_devices"]["rocep1s0f1"]["ports"][0]
    assert (port["roce_v2_gid_index"], port["roce_v2_ipv4"]) == (5, "192.168.100.10")
    assert facts["fabric_ip"] == "192.168.100.10"
    # the twin still has index 3, so the GID index differs and is left to NCCL
    assert "NCCL_IB_GID_INDEX" not in facts["env"]
    assert any("differs between HCAs (rocep1s0f1=5, roceP2p1s0f1=3)" in w for w in facts["warnings"])


def test_select_roce_v2_gid_ignores_v1_and_link_local():
    gids = [
        {"index": 0, "type": "IB/RoCE v1", "ipv4": None, "ndev": "a"},
        {"index": 1, "type": "RoCE v2", "ipv4": None, "ndev": "a"},
        {"index": 2, "type": "IB/RoCE v1", "ipv4": "192.168.100.10", "ndev": "a"},
        {"index": 4, "type": "RoCE v2", "ipv4": "192.168.100.10", "ndev": "a.100"},
        {"index": 6, "type": "RoCE v2", "ipv4": "192.168.100.10", "ndev": "a"},
    ]
    assert fabric.select_roce_v2_gid(gids, "a", ["192.168.100.10"])["index"] == 6
    assert fabric.select_roce_v2_gid(gids[:3], "a", ["192.168.100.10"]) is None


def test_read_netdevs_spark(tmp_path):
    ip_json = trees.write_layout(tmp_path, trees.spark_layout())
    netdevs = fabric.read_netdevs(str(tmp_path), fabric.parse_ip_addr_json(ip_json), ["enP7s7"])
    assert sorted(netdevs) == ["docker0", "enP2p1s0f0np0", "enP2p1s0f1np1", "enP7s7", "enp1s0f0np0", "enp1s0f1np1",
                               "lo", "wlP9s9"]
    assert netdevs["enp1s0f1np1"] == {
        "operstate": "up", "up": True, "mtu": 9000, "address": "4c:bb:47:2d:00:11", "virtual": False,
        "loopback": False, "wireless": False, "default_route": False,
        "ipv4": [{"address": "192.168.100.10", "prefixlen": 24}], "rdma_device": None,
    }
    assert (netdevs["docker0"]["virtual"], netdevs["docker0"]["up"]) == (True, False)
    assert (netdevs["enP7s7"]["virtual"], netdevs["enP7s7"]["default_route"]) == (False, True)
    assert netdevs["wlP9s9"]["wireless"] is True
    assert (netdevs["lo"]["loopback"], netdevs["lo"]["up"]) == (True, True)
    assert (netdevs["enp1s0f0np0"]["up"], netdevs["enp1s0f0np0"]["ipv4"]) == (False, [])


# --------------------------------------------------------------------------- analyse: RoCE

def test_spark_auto_pick(tmp_path):
    facts = run(tmp_path, trees.spark_layout())
    assert facts["transport"] == "roce"
    assert (facts["fabric_interface"], facts["fabric_ip"], facts["fabric_mtu"]) == ("enp1s0f1np1", "192.168.100.10", 9000)
    assert facts["fabric_hcas"] == ["rocep1s0f1", "roceP2p1s0f1"]
    assert facts["env"] == SPARK_ENV
    assert facts["warnings"] == []
    assert facts["netdevs"]["enP2p1s0f1np1"]["rdma_device"] == "roceP2p1s0f1"
    assert_consistent(facts)


def test_override_wins_and_keeps_both_twins(tmp_path):
    facts = run(tmp_path, trees.spark_layout(), interface="enP2p1s0f1np1")
    assert (facts["fabric_interface"], facts["fabric_ip"]) == ("enP2p1s0f1np1", "192.168.101.10")
    assert facts["env"]["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert facts["env"]["GLOO_SOCKET_IFNAME"] == "enP2p1s0f1np1"
    assert facts["env"]["VLLM_HOST_IP"] == "192.168.101.10"
    assert facts["warnings"] == []
    assert_consistent(facts)


def test_override_to_a_non_roce_interface_warns(tmp_path):
    facts = run(tmp_path, trees.spark_layout(), interface="enP7s7")
    assert (facts["fabric_interface"], facts["fabric_ip"], facts["transport"]) == ("enP7s7", "10.0.0.10", "roce")
    assert len(facts["warnings"]) == 2  # and the management port's MTU 1500 is one
    assert facts["warnings"][1].startswith("fabric interface enP7s7 has MTU 1500")
    assert "enP7s7 (option interface) is not the netdev of a usable RoCE HCA" in facts["warnings"][0]
    assert_consistent(facts)


@pytest.mark.parametrize("name, problem", [
    ("enp9s9", "'enp9s9' (option interface) does not exist on this node"),
    ("enp1s0f0np0", "'enp1s0f0np0' (option interface) is not up (operstate 'down')"),
    ("docker0", "'docker0' (option interface) is not up (operstate 'down')"),
    ("lo", "'lo' (option interface) is the loopback interface"),
])
def test_bad_override_names_it_and_lists_candidates(tmp_path, name, problem):
    with pytest.raises(fabric.FabricError) as err:
        run(tmp_path, trees.spark_layout(), interface=name)
    msg = str(err.value)
    assert problem in msg
    assert ("candidates: enp1s0f1np1 (192.168.100.10/24; up, RoCE rocep1s0f1); "
            "enP2p1s0f1np1 (192.168.101.10/24; up, RoCE roceP2p1s0f1); enP7s7 (10.0.0.10/24; up, default route); "
            "wlP9s9 (192.168.1.10/24; up, wireless)") in msg


def test_override_without_ipv4(tmp_path):
    netdevs, rdma, route = trees.spark_layout()
    netdevs["enp1s0f0np0"]["operstate"] = "up"
    with pytest.raises(fabric.FabricError, match=r"'enp1s0f0np0' \(option interface\) has no IPv4 address; candidates: enp1s0f1np1"):
        run(tmp_path, (netdevs, rdma, route), interface="enp1s0f0np0")


def test_interface_names_differ_per_node(tmp_path):
    node_a = run(tmp_path / "a", trees.spark_layout(host=10, cabled="f1"))
    node_b = run(tmp_path / "b", trees.spark_layout(host=20, cabled="f0"))
    assert (node_a["fabric_interface"], node_a["fabric_ip"]) == ("enp1s0f1np1", "192.168.100.10")
    assert (node_b["fabric_interface"], node_b["fabric_ip"]) == ("enp1s0f0np0", "192.168.100.20")
    assert node_a["env"]["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert node_b["env"]["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0"
    assert node_b["env"]["GLOO_SOCKET_IFNAME"] == "enp1s0f0np0"
    for facts in (node_a, node_b):
        assert_consistent(facts)
        assert facts["env"]["NCCL_IB_GID_INDEX"] == "3"


def test_fabric_cidr_picks_by_address(tmp_path):
    facts = run(tmp_path, trees.spark_layout(), fabric_cidr="192.168.101.0/24")
    assert (facts["fabric_interface"], facts["fabric_ip"]) == ("enP2p1s0f1np1", "192.168.101.10")
    assert facts["env"]["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert_consistent(facts)


def test_fabric_cidr_single_address(tmp_path):
    facts = run(tmp_path, trees.spark_layout(), fabric_cidr="192.168.100.10")
    assert (facts["fabric_interface"], facts["fabric_ip"]) == ("enp1s0f1np1", "192.168.100.10")


def test_fabric_cidr_must_match_the_override(tmp_path):
    with pytest.raises(fabric.FabricError,
                       match=r"'enp1s0f1np1' \(option interface\) has no IPv4 address in 192\.168\.101\.0/24 \(option fabric_cidr\); "
                             r"it has 192\.168\.100\.10"):
        run(tmp_path, trees.spark_layout(), interface="enp1s0f1np1", fabric_cidr="192.168.101.0/24")


def test_fabric_cidr_without_match(tmp_path):
    with pytest.raises(fabric.FabricError, match=r"no interface is up with an IPv4 address in 10\.99\.0\.0/16"):
        run(tmp_path, trees.spark_layout(), fabric_cidr="10.99.0.0/16")


@pytest.mark.parametrize("value, message", [
    ("192.168.100.0/33", "is not an IPv4 address or network"),
    ("fabric", "is not an IPv4 address or network"),
    ("fd00::/64", "is not IPv4"),
])
def test_fabric_cidr_invalid(tmp_path, value, message):
    with pytest.raises(fabric.FabricError, match=message):
        run(tmp_path, trees.spark_layout(), fabric_cidr=value)


def test_active_port_without_ipv4_is_left_out_with_a_warning(tmp_path):
    netdevs, rdma, route = trees.spark_layout()
    # second cable plugged but its netplan entry is missing: ACTIVE, link-local GIDs only
    netdevs["enp1s0f0np0"]["operstate"] = "up"
    rdma["rocep1s0f0"]["state"] = "4: ACTIVE"
    facts = run(tmp_path, (netdevs, rdma, route))
    assert facts["env"]["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert facts["warnings"] == ["rocep1s0f0 port 1 (netdev enp1s0f0np0) is ACTIVE but has no RoCE v2 GID with an IPv4"
                                 " address; give its netdev an IPv4 address (netplan)"]


def test_every_active_roce_hca_is_listed(tmp_path):
    layout = trees.spark_layout(addresses={"enp1s0f0np0": ["192.168.102.10/24"], "enP2p1s0f0np0": ["192.168.103.10/24"]})
    netdevs, rdma, route = layout
    for dev, net in (("rocep1s0f0", "enp1s0f0np0"), ("roceP2p1s0f0", "enP2p1s0f0np0")):
        netdevs[net]["operstate"] = "up"
        rdma[dev]["state"] = "4: ACTIVE"
    facts = run(tmp_path, (netdevs, rdma, route))
    assert facts["env"]["NCCL_IB_HCA"] == "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1"
    assert facts["fabric_interface"] == "enp1s0f0np0"
    assert_consistent(facts)


def test_infiniband_link_layer_is_not_roce(tmp_path):
    netdevs, rdma, route = trees.spark_layout()
    rdma["roceP2p1s0f1"]["link_layer"] = "InfiniBand"
    facts = run(tmp_path, (netdevs, rdma, route))
    assert facts["env"]["NCCL_IB_HCA"] == "rocep1s0f1"
    assert "roceP2p1s0f1 port 1 is ACTIVE but its link layer is 'InfiniBand', not Ethernet (RoCE)" in facts["warnings"]


def test_nccl_ib_hca_names_ports_of_partly_usable_devices():
    usable = [
        {"device": "mlx5_0", "port": 2, "device_ports": 2},
        {"device": "roceP2p1s0f1", "port": 1, "device_ports": 1},
        {"device": "rocep1s0f1", "port": 1, "device_ports": 1},
    ]
    assert fabric.nccl_ib_hca(usable) == "mlx5_0:2,rocep1s0f1,roceP2p1s0f1"


def test_mtu_check(tmp_path):
    assert run(tmp_path / "ok", trees.spark_layout(), mtu=9000)["fabric_mtu"] == 9000
    with pytest.raises(fabric.FabricError, match="fabric interface enp1s0f1np1 has MTU 1500, lower than the expected 9000"):
        run(tmp_path / "low", trees.spark_layout(cx7_mtu=1500), mtu=9000)


def test_require_rdma_passes_on_a_spark(tmp_path):
    assert run(tmp_path, trees.spark_layout(), require_rdma=True)["transport"] == "roce"


def test_require_rdma_fails_when_no_port_is_active(tmp_path):
    netdevs, rdma, route = trees.spark_layout()
    for dev in rdma.values():
        dev["state"] = "1: DOWN"
    with pytest.raises(fabric.FabricError, match="RDMA is required .* no port of roceP2p1s0f0, roceP2p1s0f1, rocep1s0f0, "
                                                 "rocep1s0f1 is ACTIVE"):
        run(tmp_path, (netdevs, rdma, route), require_rdma=True)


# --------------------------------------------------------------------------- analyse: socket fallback

def test_lab_falls_back_to_socket_with_a_warning(tmp_path):
    facts = run(tmp_path, trees.lab_layout())
    assert facts["transport"] == "socket"
    assert facts["rdma_devices"] == {}
    assert facts["fabric_hcas"] == []
    assert (facts["fabric_interface"], facts["fabric_ip"], facts["fabric_mtu"]) == ("enp1s0f1np1", "192.168.100.11", 9000)
    assert facts["env"] == LAB_ENV
    assert facts["warnings"] == [
        "no usable RDMA device: /sys/class/infiniband does not exist (no RDMA driver or device). NCCL falls back to socket"
        " transport (NCCL_IB_DISABLE=1) over enp1s0f1np1 (192.168.100.11); expected in the GPU-free lab, on a DGX Spark"
        " check the CX7 link with ibdev2netdev"
    ]
    assert_consistent(facts)


def test_lab_require_rdma_fails(tmp_path):
    with pytest.raises(fabric.FabricError, match=r"RDMA is required \(require_rdma=true\) but no RoCE port can be used: "
                                                 r"/sys/class/infiniband does not exist"):
        run(tmp_path, trees.lab_layout(), require_rdma=True)


def test_lab_override_and_cidr(tmp_path):
    facts = run(tmp_path / "a", trees.lab_layout(), interface="eth0")
    assert (facts["fabric_interface"], facts["env"]["NCCL_SOCKET_IFNAME"], facts["env"]["VLLM_HOST_IP"]) == (
        "eth0", "eth0", "172.20.0.11")
    facts = run(tmp_path / "b", trees.lab_layout(), fabric_cidr="192.168.100.0/24")
    assert facts["fabric_interface"] == "enp1s0f1np1"


def test_fallback_prefers_the_interface_without_the_default_route(tmp_path):
    netdevs = {
        "lo": {"operstate": "unknown", "ipv4": ["127.0.0.1/8"], "virtual": True},
        "eth0": {"ipv4": ["172.20.0.2/16"], "virtual": True},
        "eth1": {"ipv4": ["10.10.0.2/24"], "virtual": True},
        "wlan0": {"ipv4": ["192.168.1.2/24"], "wireless": True},
    }
    facts = run(tmp_path, (netdevs, {}, "eth0"))
    assert (facts["fabric_interface"], facts["fabric_ip"]) == ("eth1", "10.10.0.2")
    assert facts["warnings"][1] == ("no CX7 interface (name ending in np<N>) is up with an IPv4 address; chose eth1 by rule"
                                    " (other candidates: eth0); set the option interface to make this explicit")


def test_fallback_never_picks_wifi_or_bridges(tmp_path):
    netdevs = {
        "lo": {"operstate": "unknown", "ipv4": ["127.0.0.1/8"], "virtual": True},
        "wlP9s9": {"ipv4": ["192.168.1.2/24"], "wireless": True},
        "docker0": {"ipv4": ["172.17.0.1/16"], "virtual": True},
        "enp1s0f1np1": {"operstate": "down", "ipv4": ["192.168.100.2/24"]},
    }
    with pytest.raises(fabric.FabricError) as err:
        run(tmp_path, (netdevs, {}, "wlP9s9"))
    assert "no interface is up with an IPv4 address that could carry the fabric" in str(err.value)
    assert "wlP9s9 (192.168.1.2/24; up, default route, wireless)" in str(err.value)


# --------------------------------------------------------------------------- environment

PRODUCTION_FORBIDDEN = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "VLLM_LOGGING_LEVEL", "VLLM_TRACE_FUNCTION", "CUDA_LAUNCH_BLOCKING")


@pytest.mark.parametrize("layout", [trees.spark_layout, trees.lab_layout])
def test_debug_variables_only_with_debug(tmp_path, layout):
    plain = run(tmp_path / "plain", layout())
    assert not set(PRODUCTION_FORBIDDEN) & set(plain["env"])
    debug = run(tmp_path / "debug", layout(), debug=True)
    assert {k: debug["env"][k] for k in fabric.DEBUG_ENV} == {
        "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "VLLM_LOGGING_LEVEL": "DEBUG"}
    assert {k: v for k, v in debug["env"].items() if k not in fabric.DEBUG_ENV} == plain["env"]


def test_extra_env_merges_last(tmp_path):
    facts = run(tmp_path, trees.spark_layout(), extra_env={
        "NCCL_IB_TIMEOUT": 22, "NCCL_NET": None, "RAY_memory_monitor_refresh_ms": "250", "MY_FLAG": True,
        "NCCL_IB_HCA": "rocep1s0f1",
    })
    env = facts["env"]
    assert env["NCCL_IB_TIMEOUT"] == "22"
    assert "NCCL_NET" not in env
    assert env["RAY_memory_monitor_refresh_ms"] == "250"
    assert env["MY_FLAG"] == "1"
    assert env["NCCL_IB_HCA"] == "rocep1s0f1"
    assert facts["warnings"] == ["extra_env overrides NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1 (derived from the fabric interface)"
                                 " with rocep1s0f1"]


@pytest.mark.parametrize("extra, message", [
    ({"BAD-NAME": "1"}, "extra_env key 'BAD-NAME' is not a valid environment variable name"),
    ({"LIST": [1, 2]}, r"extra_env\['LIST'\] must be a string or a number, not list"),
])
def test_extra_env_rejects_bad_entries(tmp_path, extra, message):
    with pytest.raises(fabric.FabricError, match=message):
        run(tmp_path, trees.spark_layout(), extra_env=extra)


def test_build_env_socket_has_no_ib_settings():
    env, warnings = fabric.build_env("eth1", "10.0.0.2", "socket", hcas="ignored", gid_index=3)
    assert warnings == []
    assert env["NCCL_IB_DISABLE"] == "1"
    assert not {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_NET", "MASTER_ADDR"} & set(env)


# --------------------------------------------------------------------------- MTU advice and the LAN address

def test_nvidia_netplan_mtu_1500_is_a_warning_that_says_how_to_set_9000(tmp_path):
    facts = run(tmp_path, trees.spark_layout(cx7_mtu=1500))
    assert facts["fabric_mtu"] == 1500
    assert facts["warnings"] == [
        "fabric interface enp1s0f1np1 has MTU 1500 (NVIDIA's netplan sets none): the pair works, but RoCE and NCCL move"
        " more per frame at 9000. Add `mtu: 9000` to enp1s0f1np1 and its twin in /etc/netplan/40-cx7.yaml on both"
        " nodes of the pair and run `sudo netplan apply`"]


@pytest.mark.parametrize("mtu", [9000, 9216, None])
def test_mtu_advice_only_below_9000(mtu):
    assert fabric.mtu_advice("enp1s0f1np1", mtu) is None


def test_lan_address_is_where_the_ssh_connection_arrived(tmp_path):
    facts = run(tmp_path, trees.spark_layout(), ssh_connection="10.0.0.2 51234 192.168.1.10 22")
    assert (facts["lan_interface"], facts["lan_ip"]) == ("wlP9s9", "192.168.1.10")


@pytest.mark.parametrize("ssh_connection", [None, "", "10.0.0.2 51234 203.0.113.7 22", "garbage"])
def test_lan_address_falls_back_to_the_default_route(tmp_path, ssh_connection):
    """No SSH (become, a local connection) or an address no interface holds (NAT): the default route's interface."""
    facts = run(tmp_path, trees.spark_layout(), ssh_connection=ssh_connection)
    assert (facts["lan_interface"], facts["lan_ip"]) == ("enP7s7", "10.0.0.10")


def test_lan_address_is_never_the_fabric(tmp_path):
    """A controller cabled to the fabric (SSH over the fabric address) still gets the LAN address: the fabric is point
    to point, so clients elsewhere on the LAN could not use it."""
    facts = run(tmp_path, trees.spark_layout(), ssh_connection="192.168.100.20 51234 192.168.100.10 22")
    assert (facts["lan_interface"], facts["lan_ip"]) == ("enP7s7", "10.0.0.10")


def test_lab_lan_address(tmp_path):
    facts = run(tmp_path, trees.lab_layout(), ssh_connection="172.20.0.1 40000 172.20.0.11 22")
    assert (facts["lan_interface"], facts["lan_ip"]) == ("eth0", "172.20.0.11")


def test_lan_address_unknown():
    assert fabric.lan_address({"lo": {"ipv4": [{"address": "127.0.0.1"}], "default_route": False}}) == (None, None)


def test_lan_address_prefers_ansible_host_when_the_node_holds_it(tmp_path):
    facts = run(tmp_path, trees.spark_layout(), lan_hint="192.168.1.10", ssh_connection="10.0.0.2 1 10.0.0.10 22")
    assert (facts["lan_interface"], facts["lan_ip"]) == ("wlP9s9", "192.168.1.10")


@pytest.mark.parametrize("hint", ["spark-a1.example.internal", "203.0.113.7", "192.168.100.10"])
def test_lan_address_ignores_a_dns_name_a_nat_address_and_the_fabric(tmp_path, hint):
    facts = run(tmp_path, trees.spark_layout(), lan_hint=hint)
    assert (facts["lan_interface"], facts["lan_ip"]) == ("enP7s7", "10.0.0.10")


def test_single_spark_without_a_cable_finds_only_its_lan_address(tmp_path):
    """A one-node cluster: no CX7 port is cabled (every port DOWN, no fabric address). With fabric=False no fabric
    interface is chosen and the LAN address is still found."""
    layout = trees.spark_layout(addresses={name: [] for _device, name, _mac in trees.CX7})
    for netdev in layout[0].values():
        if netdev.get("mac", "").startswith("4c:bb:47:2d:00:0"):
            netdev["operstate"] = "down"
    facts = run(tmp_path, layout, fabric=False, lan_hint="10.0.0.10", extra_env={"NCCL_DEBUG": "WARN"})
    assert (facts["lan_interface"], facts["lan_ip"]) == ("enP7s7", "10.0.0.10")
    assert facts["fabric_interface"] is None and facts["fabric_ip"] is None and facts["transport"] == "none"
    assert facts["env"] == {"NCCL_DEBUG": "WARN"} and facts["warnings"] == []
