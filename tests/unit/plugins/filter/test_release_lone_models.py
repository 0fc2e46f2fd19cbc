# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""release_lone_models: what a rollout says before it starts about models a single cluster serves."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.release_lone_models import release_lone_models


def rel(name):
    return {"image": "img", "model": f"Org/{name}", "served_model_name": name}


def test_a_model_on_two_clusters_is_not_named_and_one_on_one_cluster_is_with_its_last_switch():
    said = release_lone_models({
        "pair1": {"release": rel("a"), "rollout": {}},
        "pair2": {"release": rel("a"), "rollout": {"switch_started": 100.0, "switch_ended": 190.4}},
        "quad": {"release": rel("b"), "rollout": {"switch_started": "1000.5", "switch_ended": "1742.1"}},
    })
    assert said == ["b is served by quad alone: while quad switches, requests for b are refused (its last switch "
                    "took 742 s). Serve b on a second cluster to roll without refusing any."]


def test_no_switch_on_record_says_so_and_undeployed_clusters_count_for_nothing():
    said = release_lone_models({"solo": {"release": rel("c"), "rollout": {}}, "new": {"release": {}, "rollout": {}}})
    assert len(said) == 1 and said[0].startswith("c is served by solo alone") and "no switch of it is on record" in said[0]
    assert release_lone_models({"p1": {"release": rel("d"), "rollout": {}}, "p2": {"release": rel("d"), "rollout": {}}}) == []


def test_bad_input_is_refused():
    with pytest.raises(AnsibleFilterError):
        release_lone_models({"pair1": "not a dict"})
