"""The fleet model: clusters of 1 to 8 Sparks from the inventory, each node's place, and every inventory mistake
named with its cluster, host, variable and fix."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import (
    node_fabric, plain_hostvars, resolve_fleet, service_host_warnings, with_fabric,
)


def inv(clusters, extra_groups=None, topology=None):
    """CLUSTERS: name -> [(host, role)]; every host gets a unique fabric IP, every cluster TOPOLOGY if given."""
    groups = {"all": [], "ungrouped": [], "spark_pairs": []}
    hostvars = {}
    for name, hosts in clusters.items():
        groups[name] = [host for host, _role in hosts]
        for host, role in hosts:
            groups["spark_pairs"].append(host)
            groups["all"].append(host)
            hostvars[host] = {"dgxspark_node_role": role, "dgxspark_fabric_ip": f"192.168.100.{len(hostvars) + 11}"}
            if topology:
                hostvars[host]["dgxspark_fabric_topology"] = topology
    groups.update(extra_groups or {})
    return groups, hostvars


def nodes(n, name="c1"):
    return {name: [("h0", "head")] + [(f"w{i}", "worker") for i in range(1, n)]}


def test_two_pairs_resolved_head_first_with_each_nodes_place():
    groups, hv = inv({"pair1": [("s2", "worker"), ("s1", "head")], "pair2": [("s3", "head"), ("s4", "worker")]})
    fleet = resolve_fleet(groups, hv, parallel={"*": {"tensor": 2, "pipeline": 1}})
    assert fleet["errors"] == []
    pair1 = fleet["clusters"]["pair1"]
    assert pair1["members"] == pair1["hosts"] == ["s1", "s2"] and pair1["workers"] == ["s2"]
    assert (pair1["size"], pair1["gpus"], pair1["topology"]) == (2, 2, "direct")
    assert fleet["host_cluster"] == {"s2": "pair1", "s1": "pair1", "s3": "pair2", "s4": "pair2"}
    assert fleet["nodes"]["s2"] == {"cluster": "pair1", "head": "s1", "members": ["s1", "s2"], "rank": 1,
                                    "is_head": False, "size": 2, "gpus": 2, "topology": "direct",
                                    "fabric_ip": "192.168.100.11"}
    assert fleet["nodes"]["s1"]["rank"] == 0 and fleet["nodes"]["s1"]["is_head"] is True


def test_a_gateway_or_prometheus_on_a_head_is_no_second_cluster():
    """The service groups hold a head alone (a cluster-shaped group): by name, the fleet never takes them as
    clusters; a renamed service group is passed in."""
    clusters = {"pair1": [("s1", "head"), ("s2", "worker")]}
    groups, hv = inv(clusters, {"dgxspark_gateway": ["s1"], "dgxspark_monitoring": ["s1"], "watchers": ["s1"]})
    assert resolve_fleet(groups, hv, service_groups=("dgxspark_gateway", "watchers"))["errors"] == [
        "host s1: it is in several groups that look like clusters (dgxspark_monitoring, pair1); a host belongs to one "
        "cluster: move it, or set dgxspark_cluster to the right one", "cluster pair1: it has no head; set "
        "dgxspark_node_role: head on exactly one of its hosts"]
    fleet = resolve_fleet(groups, hv, service_groups=("dgxspark_gateway", "dgxspark_monitoring", "watchers"))
    assert fleet["errors"] == [] and fleet["host_cluster"] == {"s1": "pair1", "s2": "pair1"}
    del groups["watchers"]
    assert resolve_fleet(groups, hv)["errors"] == []  # the default names


def test_m1_a_gateway_or_monitoring_host_that_is_a_fleet_node_is_told_what_it_can_reach():
    """Security review M1: a service host that is also a node of the fleet holds every cluster's engine key (a gateway) and is admitted at
    every door, so its own cluster's code reaches every cluster's engine; it is warned, naming the clusters."""
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")], "pair2": [("s3", "head"), ("s4", "worker")]})
    fleet = resolve_fleet(groups, hv)
    gateways, monitors = [{"host": "s1", "lan_ip": "10.0.0.11"}], [{"host": "s1", "lan_ip": "10.0.0.11"}]
    (warning,) = service_host_warnings("s1", fleet["nodes"], gateways, monitors)
    assert warning.startswith("s1 is a gateway and a monitoring host and a node of cluster pair1: every head's door")
    assert "reaches the engines of pair1, pair2 through their doors" in warning
    assert service_host_warnings("s3", fleet["nodes"], gateways, monitors) == []  # no service on it
    assert service_host_warnings("gw", fleet["nodes"], [{"host": "gw", "lan_ip": "10.0.0.5"}], []) == []  # no node
    assert service_host_warnings("s1", fleet["nodes"], [], monitors) == []  # no gateway: no door to reach through
    # A monitoring host alone holds the metrics key, no engine key (security review L7).
    (warning,) = service_host_warnings("s3", fleet["nodes"], gateways, [{"host": "s3", "lan_ip": "10.0.0.13"}])
    assert "it holds the metrics key" in warning and "reads the /metrics of the engines of pair1, pair2" in warning


def test_one_node_cluster_is_single():
    groups, hv = inv(nodes(1))
    fleet = resolve_fleet(groups, hv, parallel={"h0": {"tensor": 1, "pipeline": 1}})
    assert fleet["errors"] == []
    assert fleet["nodes"]["h0"] == {"cluster": "c1", "head": "h0", "members": ["h0"], "rank": 0, "is_head": True,
                                    "size": 1, "gpus": 1, "topology": "single", "fabric_ip": "192.168.100.11"}


@pytest.mark.parametrize("size", [3, 4, 8])
def test_clusters_of_three_to_eight_on_a_switch_in_inventory_order(size):
    groups, hv = inv(nodes(size), topology="switch")
    fleet = resolve_fleet(groups, hv, parallel={"w1": {"tensor": size, "pipeline": 1}})
    assert fleet["errors"] == []
    assert fleet["clusters"]["c1"]["members"] == ["h0"] + [f"w{i}" for i in range(1, size)]
    assert [fleet["nodes"][h]["rank"] for h in fleet["clusters"]["c1"]["members"]] == list(range(size))


def test_tp2_pp2_on_four_nodes():
    groups, hv = inv(nodes(4), topology="switch")
    assert resolve_fleet(groups, hv, parallel={"h0": {"tensor": 2, "pipeline": 2}})["errors"] == []


def test_nine_nodes_is_too_many():
    groups, hv = inv(nodes(9), topology="switch")
    errors = resolve_fleet(groups, hv)["errors"]
    assert len(errors) == 1 and errors[0].startswith("cluster c1: it has 9 Sparks (h0, w1,")
    assert "a cluster has 1 to 8: split it into clusters" in errors[0]


def test_three_nodes_without_a_topology_need_a_switch():
    groups, hv = inv(nodes(3))
    assert resolve_fleet(groups, hv)["errors"] == [
        "cluster c1: it has 3 Sparks and no dgxspark_fabric_topology; more than two Sparks share a fabric through a "
        "switch: cable them to one and set dgxspark_fabric_topology: switch on the cluster's group"]


def test_a_ring_is_refused_with_the_reason():
    groups, hv = inv(nodes(3), topology="ring")
    (error,) = resolve_fleet(groups, hv)["errors"]
    assert error.startswith("cluster c1: dgxspark_fabric_topology 'ring' is not supported: the collection gives each "
                            "Spark one fabric interface and IP")
    assert error.endswith("Cable the 3 Sparks to one switch and set dgxspark_fabric_topology: switch")


@pytest.mark.parametrize("size, topology, message", [
    (3, "direct", "'direct' (one cable between two Sparks) but the cluster has 3 Spark(s); cable them to one switch"),
    (2, "single", "'single' but the cluster has 2 Sparks; set it to direct or switch"),
    (2, "mesh", "dgxspark_fabric_topology is 'mesh'; set it to one of single, direct, switch"),
])
def test_topology_that_does_not_fit(size, topology, message):
    groups, hv = inv(nodes(size), topology=topology)
    (error,) = resolve_fleet(groups, hv)["errors"]
    assert error.startswith("cluster c1: ") and message in error


def test_members_disagreeing_on_topology():
    groups, hv = inv(nodes(2))
    hv["h0"]["dgxspark_fabric_topology"] = "switch"
    hv["w1"]["dgxspark_fabric_topology"] = "direct"
    assert resolve_fleet(groups, hv)["errors"] == [
        "cluster c1: its members disagree on dgxspark_fabric_topology (h0=switch, w1=direct); set it once, on the "
        "cluster's group"]


def test_two_nodes_on_a_switch():
    groups, hv = inv(nodes(2), topology="switch")
    fleet = resolve_fleet(groups, hv)
    assert fleet["errors"] == [] and fleet["clusters"]["c1"]["topology"] == "switch"


def test_explicit_ranks_order_the_workers():
    groups, hv = inv(nodes(4), topology="switch")
    hv["w1"]["dgxspark_rank"], hv["w2"]["dgxspark_rank"], hv["w3"]["dgxspark_rank"] = 3, "1", 2
    fleet = resolve_fleet(groups, hv)
    assert fleet["errors"] == [] and fleet["clusters"]["c1"]["members"] == ["h0", "w2", "w3", "w1"]
    assert fleet["nodes"]["w1"]["rank"] == 3


@pytest.mark.parametrize("ranks, message", [
    ({"w1": 1, "w2": 1, "w3": 2}, "the workers' dgxspark_rank values (w1=1, w2=1, w3=2) must be 1 to 3, each once"),
    ({"w1": 1}, "dgxspark_rank is set on some workers and not on w2, w3; set it on every worker of the cluster or on none"),
    ({"w1": "first", "w2": 2, "w3": 3}, "host w1: dgxspark_rank is 'first'; set it to a whole number from 1 to 3"),
    ({"h0": 2}, "host h0: dgxspark_rank is '2' on the head; the head is rank 0"),
])
def test_bad_ranks(ranks, message):
    groups, hv = inv(nodes(4), topology="switch")
    for host, rank in ranks.items():
        hv[host]["dgxspark_rank"] = rank
    errors = resolve_fleet(groups, hv)["errors"]
    assert any(e.startswith("cluster c1: ") and message in e for e in errors), errors


def test_parallel_sizes_must_cover_the_clusters_gpus_naming_host_and_variables():
    groups, hv = inv(nodes(4), topology="switch")
    errors = resolve_fleet(groups, hv, parallel={"w2": {"tensor": 2, "pipeline": 1, "variables": (
        "dgxspark_tensor_parallel_size", "dgxspark_pipeline_parallel_size")}})["errors"]
    assert errors == [
        "cluster c1: host w2: dgxspark_tensor_parallel_size x dgxspark_pipeline_parallel_size is 2 x 1 = 2 GPU(s), but "
        "the cluster has 4 Spark(s) = 4 GPU(s); set them so that the product is 4 (e.g. "
        "dgxspark_tensor_parallel_size=4 and dgxspark_pipeline_parallel_size=1), or add or remove nodes"]


def test_parallel_sizes_per_host_check_only_that_hosts_cluster():
    groups, hv = inv({"big": [("b0", "head")] + [(f"b{i}", "worker") for i in range(1, 4)],
                      "small": [("s0", "head"), ("s1", "worker")]})
    for host in ("b0", "b1", "b2", "b3"):
        hv[host]["dgxspark_fabric_topology"] = "switch"
    assert resolve_fleet(groups, hv, parallel={"b0": {"tensor": 4, "pipeline": 1},
                                               "s1": {"tensor": 2, "pipeline": 1}})["errors"] == []


def test_cross_cutting_groups_without_one_head_are_not_clusters():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")], "pair2": [("s3", "head"), ("s4", "worker")]},
                     extra_groups={"heads": ["s1", "s3"], "workers": ["s2", "s4"]})
    fleet = resolve_fleet(groups, hv)
    assert fleet["errors"] == [] and sorted(fleet["clusters"]) == ["pair1", "pair2"]


def test_a_host_in_two_clusters_is_named():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")]}, extra_groups={"heads": ["s1"]})
    errors = resolve_fleet(groups, hv)["errors"]
    assert any(e.startswith("host s1: it is in several groups that look like clusters (heads, pair1)") for e in errors)


@pytest.mark.parametrize("var", ["dgxspark_cluster", "dgxspark_pair"])
def test_explicit_cluster_wins(var):
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")]}, extra_groups={"heads": ["s1"]})
    hv["s1"][var] = "pair1"
    assert resolve_fleet(groups, hv)["errors"] == []


@pytest.mark.parametrize("roles, message", [
    ([("s1", "worker"), ("s2", "worker")], "host s1: it is in no cluster"),
    ([("s1", "head"), ("s2", "bogus")], "host s2: dgxspark_node_role is 'bogus'; set it to head or worker"),
])
def test_bad_roles(roles, message):
    groups, hv = inv({"pair1": roles})
    assert any(message in e for e in resolve_fleet(groups, hv)["errors"])


def test_two_heads_and_no_head():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "head")], "pair2": [("s3", "worker"), ("s4", "worker")]})
    for host in ("s1", "s2"):
        hv[host]["dgxspark_cluster"] = "pair1"
    for host in ("s3", "s4"):
        hv[host]["dgxspark_cluster"] = "pair2"
    errors = resolve_fleet(groups, hv)["errors"]
    assert ("cluster pair1: it has two heads (s1, s2); exactly one host per cluster has dgxspark_node_role: head: "
            "set dgxspark_node_role: worker on all but one of them") in errors
    assert "cluster pair2: it has no head; set dgxspark_node_role: head on exactly one of its hosts" in errors


def test_duplicate_fabric_ips_across_clusters():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")], "pair2": [("s3", "head"), ("s4", "worker")]})
    hv["s3"]["dgxspark_fabric_ip"] = hv["s1"]["dgxspark_fabric_ip"]
    assert resolve_fleet(groups, hv)["errors"] == [
        "cluster pair2: host s3 has dgxspark_fabric_ip 192.168.100.11, which s1 (cluster pair1) already uses; fabric "
        "IPs must be unique across the fleet"]


def test_missing_fleet_group():
    assert "no group 'spark_pairs'" in resolve_fleet({"all": []}, {})["errors"][0]


def test_a_caller_may_refuse_single_node_clusters_naming_them():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")], "solo": [("s3", "head")]})
    (error,) = resolve_fleet(groups, hv, min_nodes=2)["errors"]
    assert error.startswith("cluster solo: it has 1 Spark(s) (s3); this play serves clusters of 2 to 8 Sparks")
    assert resolve_fleet(groups, hv)["errors"] == []


def _fab(ip, lan, iface="enp1s0f1np1"):
    return {"fabric_interface": iface, "fabric_ip": ip, "fabric_mtu": 9000, "transport": "roce",
            "env": {"VLLM_HOST_IP": ip, "NCCL_IB_GID_INDEX": 3}, "lan_ip": lan, "lan_interface": "enP7s7",
            "netdevs": {"ignored": {}}}


def test_the_fabric_each_member_published_is_in_every_members_node_fact():
    groups, hv = inv({"c": [("s1", "head"), ("s2", "worker"), ("s3", "worker")]})
    hv["s1"]["dgxspark_fabric_topology"] = "switch"
    node = resolve_fleet(groups, hv)["nodes"]["s2"]
    fabrics = {"s1": node_fabric(_fab("10.9.0.1", "10.0.0.1")), "s2": node_fabric(_fab("10.9.0.2", "10.0.0.2")),
               "s3": None}
    out, errors = with_fabric(node, fabrics)
    assert errors == []
    assert out["fabric"] == {"interface": "enp1s0f1np1", "ip": "10.9.0.2", "mtu": 9000, "transport": "roce",
                             "env": {"VLLM_HOST_IP": "10.9.0.2", "NCCL_IB_GID_INDEX": "3"}, "lan_ip": "10.0.0.2",
                             "lan_interface": "enP7s7", "rails": []}
    assert [(m["host"], m["rank"], m["ip"]) for m in out["member_fabric"]] == [
        ("s1", 0, "10.9.0.1"), ("s2", 1, "10.9.0.2"), ("s3", 2, "")]
    assert (out["head_fabric_ip"], out["head_lan_ip"], out["fabric_complete"]) == ("10.9.0.1", "10.0.0.1", False)
    fabrics["s3"] = node_fabric(_fab("10.9.0.3", "10.0.0.3"))
    assert with_fabric(node, fabrics)[0]["fabric_complete"] is True
    # A published fabric dict goes through unchanged (a later call keeps what an earlier one published).
    assert node_fabric(out["fabric"]) == out["fabric"]


def test_two_members_with_one_fabric_ip_are_named():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")]})
    node = resolve_fleet(groups, hv)["nodes"]["s1"]
    _out, errors = with_fabric(node, {"s1": node_fabric(_fab("10.9.0.1", "10.0.0.1")),
                                      "s2": node_fabric(_fab("10.9.0.1", "10.0.0.2"))})
    assert errors == ["cluster pair1: hosts s1 and s2 both have the fabric IP 10.9.0.1 (found on their fabric "
                      "interfaces); give each node its own address (netplan) or set dgxspark_fabric_interface to the "
                      "right port"]


def test_a_single_node_has_no_fabric_but_its_lan_address():
    groups, hv = inv({"solo": [("s1", "head")]})
    node = resolve_fleet(groups, hv)["nodes"]["s1"]
    single = {"fabric_interface": None, "fabric_ip": None, "fabric_mtu": None, "transport": "none", "env": {},
              "lan_ip": "10.0.0.1", "lan_interface": "enP7s7"}
    out, errors = with_fabric(node, {"s1": node_fabric(single)})
    assert errors == [] and out["topology"] == "single" and out["fabric_complete"]
    assert (out["fabric"]["ip"], out["fabric"]["env"], out["head_lan_ip"], out["head_fabric_ip"]) == ("", {}, "10.0.0.1", "")


def test_rolling_batches_hold_whole_clusters_whatever_their_sizes():
    from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import cluster_batches
    groups, hv = inv({"pair1": [("a1", "head"), ("a2", "worker")],
                      "big": [("c1", "head"), ("c2", "worker"), ("c3", "worker"), ("c4", "worker")],
                      "solo": [("d1", "head")]})
    hv["c1"]["dgxspark_fabric_topology"] = "switch"
    fleet = resolve_fleet(groups, hv)
    order = groups["spark_pairs"]
    assert cluster_batches(fleet, order, 1) == [2, 4, 1]
    assert cluster_batches(fleet, order, 2) == [6, 1]
    assert cluster_batches(fleet, order, 5) == [7]
    with pytest.raises(ValueError, match="at least 1"):
        cluster_batches(fleet, order, 0)
    scattered = ["a1", "c1", "a2", "c2", "c3", "c4", "d1"]
    with pytest.raises(ValueError, match=r"cluster pair1: its hosts \(a1, a2\) are not listed together"):
        cluster_batches(fleet, scattered, 1)


def test_gateways_are_published_with_their_lan_address_and_are_not_cluster_members():
    from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import resolve_gateways
    groups, hostvars = inv({"pair1": [("s1", "head"), ("s2", "worker")]},
                           extra_groups={"dgxspark_gateway": ["gw1", "s1", "gw2"]})
    hostvars.update({"gw1": {"ansible_host": "10.0.0.5"}, "gw2": {"ansible_host": "gw2.example", "dgxspark_gateway_address": "10.0.0.6"}})
    hostvars["s1"]["ansible_host"] = "10.0.0.11"
    gateways, errors = resolve_gateways(groups, hostvars)
    assert errors == []
    assert gateways == [{"host": "gw1", "lan_ip": "10.0.0.5"}, {"host": "s1", "lan_ip": "10.0.0.11"},
                        {"host": "gw2", "lan_ip": "10.0.0.6"}]
    fleet = resolve_fleet(groups, hostvars)
    assert fleet["errors"] == [] and "gw1" not in fleet["nodes"] and sorted(fleet["clusters"]) == ["pair1"]
    assert resolve_gateways(groups, hostvars, "no_such_group") == ([], [])


def test_a_gateway_without_an_ip_is_named_with_the_fix():
    from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import resolve_gateways
    gateways, errors = resolve_gateways({"dgxspark_gateway": ["gw.example"]}, {"gw.example": {}})
    assert gateways == []
    assert errors == ["gateway gw.example: its LAN address 'gw.example' is not an IP address (the heads' doors admit "
                      "the gateways by address); set dgxspark_gateway_address (or ansible_host) to its LAN IP"]


def test_each_clusters_served_name_comes_from_its_heads_inventory_variables():
    """Security review M6: the gateway holds each cluster to this name (the rule of vllm_serve's defaults)."""
    groups, hv = inv({"pa": [("s1", "head"), ("s2", "worker")], "pb": [("s3", "head"), ("s4", "worker")],
                      "pc": [("s5", "head"), ("s6", "worker")], "pd": [("s7", "head"), ("s8", "worker")]})
    hv["s1"]["dgxspark_model"] = "Qwen/Qwen3.5-35B-A3B-FP8"
    hv["s3"].update(dgxspark_model="Qwen/Qwen3.5-35B-A3B-FP8", vllm_serve_model="/models/Tiny-Model/")
    hv["s5"]["vllm_serve_served_model_name"] = "tiny"
    hv["s8"]["dgxspark_model"] = "other/Worker-Only"  # a worker's variables name nothing
    clusters = resolve_fleet(groups, hv)["clusters"]
    assert {name: entry["served_model_name"] for name, entry in clusters.items()} == {
        "pa": "qwen3.5-35b-a3b-fp8", "pb": "tiny-model", "pc": "tiny", "pd": "qwen3.5-122b-a10b-fp8"}


class LazyVars(dict):
    """A host's variables as Ansible's lazy hostvars hand them over: a broken template raises when it is read."""

    def get(self, key, default=None):
        value = super().get(key, default)
        if value == "{{ undefined_thing }}":
            raise ValueError(f"{key}: 'undefined_thing' is undefined")
        return value


def test_a_broken_model_template_falls_through_but_a_broken_place_in_the_fleet_is_an_error():
    """Only the served-name variables are read leniently (a model named by a play's variable is no inventory error);
    a broken dgxspark_node_role still stops the play with the template's error, as before."""
    groups = {"spark_pairs": ["s1"], "pa": ["s1"]}
    out = plain_hostvars(groups, {"s1": LazyVars(dgxspark_node_role="head", vllm_serve_model="{{ undefined_thing }}",
                                                 dgxspark_model="Qwen/Small")}, "spark_pairs")
    assert out["s1"]["vllm_serve_model"] is None and out["s1"]["dgxspark_model"] == "Qwen/Small"
    with pytest.raises(ValueError, match="undefined_thing"):
        plain_hostvars(groups, {"s1": LazyVars(dgxspark_node_role="{{ undefined_thing }}")}, "spark_pairs")
