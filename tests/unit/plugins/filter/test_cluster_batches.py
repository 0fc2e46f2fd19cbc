from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.cluster_batches import cluster_batches


def fleet():
    groups = {"all": [], "ungrouped": [], "spark_pairs": ["a1", "a2", "c1", "c2", "c3", "c4", "d1"],
              "pair_a": ["a1", "a2"], "cluster_c": ["c1", "c2", "c3", "c4"], "solo_d": ["d1"]}
    hostvars = {h: {"dgxspark_node_role": "head" if h.endswith("1") else "worker"} for h in groups["spark_pairs"]}
    for h in groups["cluster_c"]:
        hostvars[h]["dgxspark_fabric_topology"] = "switch"
    return groups, hostvars


def test_batches_of_whole_clusters():
    groups, hostvars = fleet()
    assert cluster_batches(groups, hostvars) == [2, 4, 1]
    assert cluster_batches(groups, hostvars, clusters=2) == [6, 1]


def test_an_invalid_fleet_or_a_scattered_cluster_is_named():
    groups, hostvars = fleet()
    hostvars["a2"]["dgxspark_node_role"] = "head"
    with pytest.raises(AnsibleFilterError, match=r"the inventory is not a valid fleet: cluster pair_a: it has 2 heads \(a1, a2\)"):
        cluster_batches(groups, hostvars)
    groups, hostvars = fleet()
    groups["spark_pairs"] = ["a1", "c1", "a2", "c2", "c3", "c4", "d1"]
    with pytest.raises(AnsibleFilterError, match="cluster pair_a: its hosts"):
        cluster_batches(groups, hostvars)


def test_without_hostvars_one_node_per_batch():
    """--syntax-check templates serial with no hostvars: the role's whole-cluster check guards a real run."""
    groups, _hostvars = fleet()
    assert cluster_batches(groups, {}) == [1]
