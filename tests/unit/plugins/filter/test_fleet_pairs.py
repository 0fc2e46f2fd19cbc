"""The fleet_pairs filter: the fleet model of module_utils/_fleet.py (tested in test__fleet.py) in the shape the
playbooks have always read (pairs, host_pair, errors)."""

from __future__ import annotations

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
    assert len(errors) == 1 and "cluster c: " in errors[0] and "the cluster has 3 Spark(s) = 3 GPU(s)" in errors[0]


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
