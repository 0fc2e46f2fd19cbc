from __future__ import annotations

import pytest

from ansible_collections.dgxspark.vllm.plugins.filter.fleet_pairs import fleet_pairs, resolve_fleet


def inv(pairs, extra_groups=None):
    groups = {"all": [], "ungrouped": [], "spark_pairs": []}
    hostvars = {}
    for pair, hosts in pairs.items():
        groups[pair] = [host for host, _role in hosts]
        for host, role in hosts:
            groups["spark_pairs"].append(host)
            groups["all"].append(host)
            hostvars[host] = {"dgxspark_node_role": role, "dgxspark_fabric_ip": f"192.168.100.{len(hostvars) + 11}"}
    groups.update(extra_groups or {})
    return groups, hostvars


def test_two_pairs_resolved_head_first():
    groups, hv = inv({"pair1": [("s2", "worker"), ("s1", "head")], "pair2": [("s3", "head"), ("s4", "worker")]})
    fleet = resolve_fleet(groups, hv, gpus_per_pair=2)
    assert fleet["errors"] == []
    assert fleet["pairs"]["pair1"]["hosts"] == ["s1", "s2"]
    assert fleet["pairs"]["pair2"]["head"] == "s3"
    assert fleet["host_pair"] == {"s2": "pair1", "s1": "pair1", "s3": "pair2", "s4": "pair2"}


def test_cross_cutting_groups_without_one_head_are_not_pairs():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")], "pair2": [("s3", "head"), ("s4", "worker")]},
                     extra_groups={"heads": ["s1", "s3"], "workers": ["s2", "s4"]})
    fleet = resolve_fleet(groups, hv)
    assert fleet["errors"] == []
    assert sorted(fleet["pairs"]) == ["pair1", "pair2"]


def test_ambiguous_membership_is_an_error_naming_the_host():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")]}, extra_groups={"heads": ["s1"]})
    fleet = resolve_fleet(groups, hv)
    assert any("host s1" in e and "heads, pair1" in e for e in fleet["errors"])


def test_explicit_pair_var_wins():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")]}, extra_groups={"heads": ["s1"]})
    hv["s1"]["dgxspark_pair"] = "pair1"
    assert resolve_fleet(groups, hv)["errors"] == []


@pytest.mark.parametrize("roles, message", [
    ([("s1", "worker"), ("s2", "worker")], "is in no pair"),
    ([("s1", "head"), ("s2", "bogus")], "host s2: dgxspark_node_role is 'bogus'"),
])
def test_bad_roles(roles, message):
    groups, hv = inv({"pair1": roles})
    assert any(message in e for e in resolve_fleet(groups, hv)["errors"])


def test_two_heads_in_a_pair():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "head")]})
    hv["s1"]["dgxspark_pair"] = hv["s2"]["dgxspark_pair"] = "pair1"
    errors = resolve_fleet(groups, hv)["errors"]
    assert errors == ["pair pair1: it has two heads (s1, s2); exactly one host per pair has dgxspark_node_role: head"]


def test_node_count_must_match_parallelism():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker"), ("s3", "worker")]})
    errors = resolve_fleet(groups, hv, gpus_per_pair=2)["errors"]
    assert errors == ["pair pair1: it has 3 node(s) = 3 GPU(s), but tensor x pipeline parallel size is 2; "
                      "add or remove nodes, or change the parallel sizes"]


def test_duplicate_fabric_ips_across_pairs():
    groups, hv = inv({"pair1": [("s1", "head"), ("s2", "worker")], "pair2": [("s3", "head"), ("s4", "worker")]})
    hv["s3"]["dgxspark_fabric_ip"] = hv["s1"]["dgxspark_fabric_ip"]
    errors = resolve_fleet(groups, hv)["errors"]
    assert len(errors) == 1 and "host s3 has fabric IP 192.168.100.11, which s1 already uses" in errors[0]


def test_missing_fleet_group():
    assert "no group 'spark_pairs'" in resolve_fleet({"all": []}, {})["errors"][0]


def test_filter_reads_only_needed_vars():
    class Lazy(dict):
        def __getitem__(self, key):
            raise AssertionError(f"templated {key}")

        def get(self, key, default=None):
            if key not in ("dgxspark_node_role", "dgxspark_pair", "dgxspark_fabric_ip"):
                raise AssertionError(f"templated {key}")
            return dict.get(self, key, default)

    groups = {"spark_pairs": ["s1", "s2"], "p": ["s1", "s2"]}
    hostvars = {"s1": Lazy(dgxspark_node_role="head", dgxspark_api_key="x"), "s2": Lazy(dgxspark_node_role="worker")}
    assert fleet_pairs(groups, hostvars)["pairs"]["p"]["hosts"] == ["s1", "s2"]
