from __future__ import annotations

from ansible_collections.dgxspark.vllm.plugins.filter.fabric_mtu import fabric_mtu_mismatch, mtu_mismatch


def members(**mtus):
    """dgxspark_node.member_fabric as the fleet action publishes it (None: the member published no fabric)."""
    return [{"host": host, "rank": rank, "ip": "", "lan_ip": "", "interface": "enp1s0f1np1" if mtu else "",
             "mtu": mtu} for rank, (host, mtu) in enumerate(mtus.items())]


def test_same_mtu_on_both_ends_is_fine():
    assert fabric_mtu_mismatch(members(s1=1500, s2=1500), "pair1") == ""
    assert fabric_mtu_mismatch(members(s1=9000, s2=9000), "pair1") == ""


def test_mismatch_names_both_nodes_and_the_fix():
    message = fabric_mtu_mismatch(members(s1=1500, s2=9000), "pair1")
    assert message.startswith("the two ends of pair1's fabric have different MTUs: s1 enp1s0f1np1 1500, "
                              "s2 enp1s0f1np1 9000. ")
    assert "`mtu: 9000`" in message and "/etc/netplan/40-cx7.yaml" in message and "nothing was started" in message


def test_hosts_without_the_fact_are_left_out():
    assert fabric_mtu_mismatch(members(s1=9000, s2=None, s3=None), "pair1") == ""


def test_per_host_interfaces():
    ends = members(s1=9000, s2=1500)
    ends[1]["interface"] = "enp1s0f0np0"
    assert "s1 enp1s0f1np1 9000, s2 enp1s0f0np0 1500" in fabric_mtu_mismatch(ends, "p")


def test_a_cluster_of_four_on_a_switch_names_every_node():
    ends = [("s1", "enp1s0f1np1", 9000), ("s2", "enp1s0f1np1", 9000), ("s3", "enp1s0f1np1", 1500),
            ("s4", "enp1s0f1np1", 9000)]
    message = mtu_mismatch(ends, "cluster1")
    assert message.startswith("the 4 nodes of cluster1's fabric have different MTUs: s1 enp1s0f1np1 9000, "
                              "s2 enp1s0f1np1 9000, s3 enp1s0f1np1 1500, s4 enp1s0f1np1 9000.")
    assert "`mtu: 9000`" in message and "the switch's ports" in message
    assert mtu_mismatch([(h, i, 9000) for h, i, _m in ends], "cluster1") == ""
