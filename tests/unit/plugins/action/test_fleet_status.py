# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the fleet_status action: each cluster's table drawn on the controller from what its members
registered, the same table the cluster_status filter drew from the playbook's hostvars reads."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task

from ansible_collections.dgxspark.vllm.plugins.action.fleet_status import ActionModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import _status

FLEET = {"clusters": {"pair1": {"hosts": ["s1", "s2"], "head": "s1"}, "pair2": {"hosts": ["s3", "s4"], "head": "s3"}}}
HEAD = {"Names": ["/dgxspark-ray-head"], "State": "running", "Status": "Up 2 hours"}
WORKER = {"Names": ["/dgxspark-ray-worker"], "State": "running", "Status": "Up 2 hours"}
RELEASE = {"image": "x", "backend": "ray", "served_model_name": "m",
           "endpoint": {"url": "http://127.0.0.1:8000/v1", "host": "127.0.0.1", "port": 8000}}
RAY = {"changed": False, "reachable": True, "alive_nodes": 2, "dead_nodes": 0, "alive_node_ips": ["10.0.0.1", "10.0.0.2"],
       "gpus_total": 2.0, "gpus_available": 0.0, "ray_version": "2.54.1"}
SERVING = {"containers": [HEAD], "release": RELEASE, "health": 200,
           "metrics": "vllm:generation_tokens_total 42.0", "watchdog": {"verdict": "ok", "attempts": 0}}


def run(hostvars, play_hosts, args=None, fleet="the fleet", **more):
    task = Task()
    task.args = args or {}
    task.async_val = 0
    module = ActionModule(task, MagicMock(), MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    fleet = FLEET if fleet == "the fleet" else fleet
    return module.run(task_vars={"dgxspark_fleet": fleet, "hostvars": hostvars, "ansible_play_hosts": play_hosts,
                                 **more})


def test_each_clusters_table_is_the_one_the_filter_drew_from_the_same_answers():
    hostvars = {"s1": {"status_node": SERVING, "status_ray": RAY},
                "s2": {"status_node": {"containers": [WORKER]}, "status_ray": {"skipped": True, "changed": False}},
                "s3": {}, "s4": {"status_node": {"containers": []}}}
    result = run(hostvars, ["s1", "s2", "s4"])
    assert result["changed"] is False and list(result["tables"]) == ["pair1", "pair2"]
    assert result["tables"]["pair1"] == _status.table(
        "pair1", ["s1", "s2"], head="s1", containers=[[HEAD], [WORKER]], release=RELEASE, health=200,
        metrics=SERVING["metrics"], ray=RAY, watchdog=SERVING["watchdog"])
    assert "tokens generated 42; Ray 2/2 nodes alive" in result["tables"]["pair1"][0]
    # pair2's head left the play: no summary, and the rows of what was read.
    assert result["tables"]["pair2"] == ["pair2: not serving; Ray: not running (head unreachable)", "  s3    ",
                                         "  s4    "]


def test_the_engine_container_is_the_inventorys_name_where_it_sets_one():
    named = dict(SERVING, containers=[dict(HEAD, Names=["/my-head"])])
    hostvars = {"s1": {"status_node": named, "status_ray": RAY}, "s2": {}}
    fleet = {"clusters": {"pair1": FLEET["clusters"]["pair1"]}}
    assert "not serving" in run(hostvars, ["s1", "s2"], fleet=fleet)["tables"]["pair1"][0]
    moved = run(hostvars, ["s1", "s2"], fleet=fleet, ray_cluster_head_container="my-head")
    assert moved["tables"]["pair1"][0].startswith("pair1: model m at http://127.0.0.1:8000, health 200")


@pytest.mark.parametrize(("args", "fleet", "needle"), [
    ({}, None, "no dgxspark_fleet: run dgxspark.vllm.fleet first"),
    ({"node_info": "not a name"}, FLEET, "node_info is 'not a name'"),
    ({}, {"clusters": {"pair1": {"hosts": ["s1"], "head": "s9"}}}, "its head 's9' is not one of its members"),
])
def test_what_it_cannot_draw_from_is_named(args, fleet, needle):
    with pytest.raises(AnsibleActionFail, match=needle):
        run({}, [], args=args, fleet=fleet)
