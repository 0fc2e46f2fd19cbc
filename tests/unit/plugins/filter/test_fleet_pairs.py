"""The fleet_pairs filter: the fleet model of module_utils/_fleet.py (tested in test__fleet.py) in the shape the
playbooks have always read (pairs, host_pair, errors)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.fleet_pairs import fleet_pairs
from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import HOST_VARS


def test_two_pairs_in_the_shape_playbooks_read():
    groups = {"all": [], "spark_pairs": ["s2", "s1", "s3", "s4"], "pair1": ["s2", "s1"], "pair2": ["s3", "s4"]}
    hostvars = {"s1": {"dgxspark_node_role": "head"}, "s2": {"dgxspark_node_role": "worker"},
                "s3": {"dgxspark_node_role": "head"}, "s4": {"dgxspark_node_role": "worker"}}
    fleet = fleet_pairs(groups, hostvars, gpus_per_pair=2)
    assert fleet["errors"] == []
    assert fleet["pairs"]["pair1"]["hosts"] == ["s1", "s2"] and fleet["pairs"]["pair1"]["head"] == "s1"
    assert fleet["host_pair"] == {"s2": "pair1", "s1": "pair1", "s3": "pair2", "s4": "pair2"}


def test_gpu_count_must_match():
    groups = {"spark_pairs": ["s1", "s2", "s3"], "c": ["s1", "s2", "s3"]}
    hostvars = {"s1": {"dgxspark_node_role": "head", "dgxspark_fabric_topology": "switch"},
                "s2": {"dgxspark_node_role": "worker"}, "s3": {"dgxspark_node_role": "worker"}}
    errors = fleet_pairs(groups, hostvars, gpus_per_pair=2)["errors"]
    assert errors == ["cluster c: it has 3 Spark(s) (s1, s2, s3) = 3 GPU(s), but gpus_per_pair is 2 (the GPUs tensor x"
                      " pipeline parallel size needs): add or remove nodes in group c so that it has 2, or pass"
                      " gpus_per_pair=3"]
    assert fleet_pairs(groups, hostvars, gpus_per_pair=3)["errors"] == []
    assert fleet_pairs(groups, hostvars)["errors"] == []  # 0 checks nothing


def test_gpu_counts_that_are_not_integers_are_refused():
    with pytest.raises(AnsibleFilterError, match="gpus_per_pair and gpus_per_node must be integers"):
        fleet_pairs({"spark_pairs": []}, {}, gpus_per_pair="two")


def test_filter_reads_only_needed_vars():
    class Lazy(dict):
        def __getitem__(self, key):
            raise AssertionError(f"templated {key}")

        def get(self, key, default=None):
            if key not in HOST_VARS:
                raise AssertionError(f"templated {key}")
            return dict.get(self, key, default)

    groups = {"spark_pairs": ["s1", "s2"], "p": ["s1", "s2"]}
    hostvars = {"s1": Lazy(dgxspark_node_role="head", dgxspark_api_key="x"), "s2": Lazy(dgxspark_node_role="worker")}
    assert fleet_pairs(groups, hostvars)["pairs"]["p"]["hosts"] == ["s1", "s2"]
