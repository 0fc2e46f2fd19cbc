# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_plan action reads what every member published and publishes the plan's facts for this member."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleActionFail
from ansible.plugins.filter.core import to_json

from ansible_collections.dgxspark.vllm.plugins.action import engine_plan as plugin
from ansible_collections.dgxspark.vllm.plugins.module_utils import _engine_plan as ep

ARGS = {"members": ["s1", "s2"], "head": "s1", "spec": "ray_cluster_spec", "before": "ray_cluster_before",
        "image_id": "facts.id", "workers_follow_head": True, "publish": "ray_cluster_pair"}
SPEC = {"container": {"restart_policy": "unless-stopped", "name": "x"}}


def hostvars(print_="", s2_started="2026-12-07T10:00:01Z"):
    def node(started):
        return {"ray_cluster_spec": SPEC, "facts": {"id": "sha256:1"},
                "ray_cluster_before": {"running": True, "labels": {ep.LABEL: print_}, "image_id": "sha256:1",
                                       "restart_policy": "unless-stopped", "started_at": started}}
    return {"s1": node("2026-12-07T10:00:00Z"), "s2": node(s2_started)}


def test_it_publishes_the_plans_facts_for_this_member(run_action):
    print_ = ep.fingerprint([SPEC, SPEC], to_json)
    _action, result = run_action(plugin, dict(ARGS), {"inventory_hostname": "s2", "hostvars": hostvars(print_)}, {})
    assert not result["changed"] and result["settled"] and not result["switch"]
    assert result["ansible_facts"] == {"ray_cluster_pair_fingerprint": print_, "ray_cluster_pair_settled": True,
                                       "ray_cluster_pair_switch": False}
    _action, result = run_action(plugin, dict(ARGS), {"inventory_hostname": "s2",
                                                      "hostvars": hostvars(print_, "2026-12-07T09:00:00Z")}, {})
    assert result["ansible_facts"]["ray_cluster_pair_switch"] and result["ansible_facts"]["ray_cluster_pair_settled"]


def test_a_member_without_a_spec_stops_the_cluster_naming_it(run_action):
    variables = hostvars()
    del variables["s2"]["ray_cluster_spec"]
    with pytest.raises(AnsibleActionFail, match="s1: engine_plan: no container spec from s2"):
        run_action(plugin, dict(ARGS), {"inventory_hostname": "s1", "hostvars": variables}, {})


@pytest.mark.parametrize("option, value", [("spec", "ray-spec"), ("publish", "a.b"), ("before", "{{ x }}")])
def test_fact_names_are_variable_names(run_action, option, value):
    with pytest.raises(AnsibleActionFail, match=f"engine_plan: {option} is"):
        run_action(plugin, dict(ARGS, **{option: value}), {"inventory_hostname": "s1", "hostvars": hostvars()}, {})
