# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of plugins/module_utils/_rails.py (both CX7 twins of every member) and of the rails rdma_facts finds."""

from __future__ import annotations

from ansible_collections.dgxspark.vllm.plugins.filter.fabric_rails import fabric_rails
from ansible_collections.dgxspark.vllm.plugins.module_utils import _fabric as fabric
from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import node_fabric
from ansible_collections.dgxspark.vllm.plugins.module_utils._rails import rail_pings, rail_problems, silent_rails
from ansible_collections.dgxspark.vllm.tests.unit.plugins.module_utils import fabric_trees as trees


def spark_rails(tmp_path, host, **addresses):
    """The rails rdma_facts publishes for a Spark whose twins have ADDRESSES (netdev -> list of CIDRs)."""
    root = tmp_path / f"spark-{host}"
    root.mkdir()
    layout = trees.spark_layout(host=host, addresses={k.replace("_", ""): v for k, v in addresses.items()} or None)
    facts = fabric.analyse(str(root), trees.write_layout(root, layout))
    return node_fabric(facts)["rails"], facts


def twins(host, second="192.168.101", prefixlen=24):
    return [{"interface": "enp1s0f1np1", "hca": "rocep1s0f1", "ip": f"192.168.100.{host}", "prefixlen": prefixlen,
             "mtu": 9000, "usable": True, "problem": ""},
            {"interface": "enP2p1s0f1np1", "hca": "roceP2p1s0f1", "ip": f"{second}.{host}" if second else "",
             "prefixlen": prefixlen if second else None, "mtu": 9000, "usable": bool(second),
             "problem": "" if second else "it has no IPv4 address (so no RoCE v2 GID)"}]


def test_a_spark_publishes_both_twins_as_rails_in_nccl_ib_hca_order(tmp_path):
    rails, facts = spark_rails(tmp_path, 10)
    assert facts["env"]["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert rails == twins(10)


def test_field_second_twin_without_address_is_published_as_an_unusable_rail(tmp_path):
    """netplan gave enP2p1s0f1np1 no address: its HCA is ACTIVE (the twin shares the cabled port) but NCCL cannot use
    it, so this node's NCCL_IB_HCA lists one HCA while its peer's lists two."""
    rails, facts = spark_rails(tmp_path, 12, enP2p1s0f1np1=[])
    assert facts["env"]["NCCL_IB_HCA"] == "rocep1s0f1"
    assert rails == twins(12, second="")


def test_socket_transport_has_the_fabric_interface_as_its_one_rail(tmp_path):
    root = tmp_path / "lab"
    root.mkdir()
    facts = fabric.analyse(str(root), trees.write_layout(root, trees.lab_layout()))
    assert node_fabric(facts)["rails"] == [{"interface": "enp1s0f1np1", "hca": "", "ip": "192.168.100.11",
                                            "prefixlen": 24, "mtu": 9000, "usable": True, "problem": ""}]


def members(*rails):
    return [{"host": f"spark-{i}", "rails": r} for i, r in enumerate(rails, start=1)]


def test_two_sparks_with_both_twins_on_their_subnets_pass_and_ping_every_rail():
    pair = members(twins(11), twins(12))
    assert rail_problems(pair, "pair1") == []
    assert rail_pings(pair, "spark-1") == [
        {"target": "192.168.100.12", "interface": "enp1s0f1np1", "peer": "spark-2", "rail": 1},
        {"target": "192.168.101.12", "interface": "enP2p1s0f1np1", "peer": "spark-2", "rail": 2}]
    assert rail_pings(pair, "spark-2") == [
        {"target": "192.168.100.11", "interface": "enp1s0f1np1", "peer": "spark-1", "rail": 1},
        {"target": "192.168.101.11", "interface": "enP2p1s0f1np1", "peer": "spark-1", "rail": 2}]


def test_field_second_twin_without_address_stops_the_cluster_naming_host_twin_address_and_fix():
    problems = rail_problems(members(twins(11), twins(12, second="")), "pair1")
    assert problems == [
        "cluster pair1: spark-2 has 1 usable fabric rail(s) (enp1s0f1np1 192.168.100.12/24) but spark-1 has 2 "
        "(enp1s0f1np1 192.168.100.11/24, enP2p1s0f1np1 192.168.101.11/24): spark-2's twin enP2p1s0f1np1 "
        "(roceP2p1s0f1) is up on the cable but it has no IPv4 address (so no RoCE v2 GID). NCCL_IB_HCA then lists "
        "rocep1s0f1, roceP2p1s0f1 on spark-1 and only rocep1s0f1 on spark-2, and NCCL's connections between the "
        "extra HCA and spark-2 fail at init. Fix: give spark-2's enP2p1s0f1np1 an address in 192.168.101.0/24 (the "
        "subnet of spark-1's enP2p1s0f1np1 192.168.101.11/24), in /etc/netplan/40-cx7.yaml, then `sudo netplan "
        "apply` on spark-2 (or remove that twin from /etc/netplan/40-cx7.yaml on every node of pair1); nothing was "
        "started on pair1"]
    # The pings go over the rail both have; the check above stops the play before them.
    assert [p["rail"] for p in rail_pings(members(twins(11), twins(12, second="")), "spark-1")] == [1]


def test_field_first_twin_without_address_names_that_twin():
    second_only = twins(12)
    second_only[0].update(ip="", prefixlen=None, usable=False, problem="it has no IPv4 address (so no RoCE v2 GID)")
    second_only = [second_only[1], second_only[0]]  # rdma_facts puts the usable rails first
    [problem] = rail_problems(members(twins(11), second_only), "pair1")
    assert "spark-2's twin enp1s0f1np1 (rocep1s0f1) is up on the cable but it has no IPv4 address" in problem
    assert "give spark-2's enp1s0f1np1 an address in 192.168.100.0/24" in problem


def test_field_second_twin_on_the_wrong_subnet_stops_the_cluster_naming_both_ends():
    problems = rail_problems(members(twins(11), twins(12, second="192.168.102")), "pair1")
    assert problems == [
        "cluster pair1: fabric rail 2 is not on one subnet: spark-1 enP2p1s0f1np1 192.168.101.11/24 (subnet "
        "192.168.101.0/24), spark-2 enP2p1s0f1np1 192.168.102.12/24 (subnet 192.168.102.0/24). RoCE does not route "
        "between the twins' subnets, so NCCL's connections over this rail fail at init. Fix: put rail 2 "
        "(enP2p1s0f1np1) of every node on one subnet, each node with its own address, in /etc/netplan/40-cx7.yaml, "
        "then `sudo netplan apply`; nothing was started on pair1"]


def test_field_one_twin_on_the_wrong_subnet_in_a_switched_cluster_names_the_odd_node():
    cluster = members(twins(11), twins(12), twins(13, second="192.168.102"))
    [problem] = rail_problems(cluster, "c4")
    assert "Fix: move spark-3's enP2p1s0f1np1 from 192.168.102.13/24 into 192.168.101.0/24," in problem


def test_same_subnet_with_a_narrower_mask_is_another_subnet():
    """The lab's /28 blocks: .11/28 and .220/28 of one /24 are different subnets."""
    moved = twins(12, prefixlen=28)
    moved[1]["ip"] = "192.168.101.220"
    problems = rail_problems(members(twins(11, prefixlen=28), moved), "pair1")
    assert len(problems) == 1 and "192.168.101.220/28 (subnet 192.168.101.208/28)" in problems[0]


def test_members_that_published_nothing_are_left_out():
    assert rail_problems(members(twins(11), []), "pair1") == []
    assert rail_pings(members(twins(11), []), "spark-1") == []
    assert rail_problems([{"host": "solo", "rails": twins(11)}], "solo") == []


def test_field_silent_second_twin_is_named_with_its_address_and_the_fix():
    pair = members(twins(11), twins(12))
    planned = rail_pings(pair, "spark-1")
    pings = [{"target": "192.168.100.12", "interface": "enp1s0f1np1", "rc": 0, "output": "0% packet loss"},
             {"target": "192.168.101.12", "interface": "enP2p1s0f1np1", "rc": 1,
              "output": "2 packets transmitted, 0 received, 100% packet loss"}]
    problems = silent_rails(pings, planned, "spark-1", 9000)
    assert problems[0] == ("spark-1: no answer over the fabric (enP2p1s0f1np1, MTU 9000, DF set) from 192.168.101.12 "
                           "(spark-2, fabric rail 2: 2 packets transmitted, 0 received, 100% packet loss)")
    assert len(problems) == 2 and "the same `mtu:` on both twins" in problems[1]
    assert silent_rails(pings[:1], planned, "spark-1", 9000) == []


def test_the_filter_plans_then_judges():
    pair = members(twins(11), twins(12))
    out = fabric_rails(pair, host="spark-2", cluster="pair1")
    assert out["errors"] == [] and len(out["pings"]) == 2
    silent = [dict(p, rc=1, output="connect: Network is unreachable") for p in out["pings"]]
    judged = fabric_rails(pair, host="spark-2", cluster="pair1", pings=silent, mtu=1500)
    assert len(judged["errors"]) == 3
    assert judged["errors"][1].startswith("spark-2: no answer over the fabric (enP2p1s0f1np1, MTU 1500, DF set) from "
                                          "192.168.101.11 (spark-1, fabric rail 2: connect: Network is unreachable)")
