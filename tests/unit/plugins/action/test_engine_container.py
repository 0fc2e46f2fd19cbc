# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine_container action: one call of the container module per node, with the definition's options; a kept
container costs no call; check mode and --diff are the module's, and its diff comes back whole."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.dgxspark.vllm.plugins.action import engine_container as plugin
from ansible_collections.dgxspark.vllm.plugins.module_utils._node_container import node_container

SPEC = node_container("dgxspark-vllm", "vllm:1", ["mp", "--", "vllm", "serve", "/models/m", "--max-model-len", "8192"],
                      component="vllm", role="head", pair="pair1")
BEFORE = {"id": "c1", "running": True, "started_at": "2026-12-07T10:00:00Z"}
DIFF = {"before": {"command": ["mp", "--", "vllm", "serve", "/models/m", "--max-model-len", "4096"]},
        "after": {"command": SPEC["command"]}}


def args(**over):
    return dict({"spec": SPEC, "fingerprint": "3f1c0a9b7d2e4f60", "image_id": "sha256:" + "b" * 64,
                 "before": BEFORE}, **over)


def test_a_container_to_change_is_brought_to_its_spec_by_one_module_call(run_action):
    answer = {"changed": True, "container": {"Id": "c2", "State": {"Running": True, "StartedAt": "2026-12-07T11:00:00Z"}}}
    action, result = run_action(plugin, args(), {"inventory_hostname": "s1"}, answer)
    (call,) = action._execute_module.call_args_list
    assert call.kwargs["module_name"] == "community.docker.docker_container"
    options = call.kwargs["module_args"]
    assert options["command"] == SPEC["command"] and options["image"] == "sha256:" + "b" * 64
    assert options["labels"]["org.dgxspark.vllm.config"] == "3f1c0a9b7d2e4f60"
    assert (result["changed"], result["action"], result["started"], result["name"]) == (True, "recreate", True,
                                                                                        "dgxspark-vllm")


def test_a_kept_container_costs_no_call_and_a_kept_one_that_does_not_run_is_an_error(run_action):
    action, result = run_action(plugin, args(keep=True), {"inventory_hostname": "s1"}, {})
    action._execute_module.assert_not_called()
    assert (result["changed"], result["action"], result["container"]["State"]["StartedAt"]) == (
        False, "keep", BEFORE["started_at"])
    with pytest.raises(AnsibleActionFail, match="s1: engine_container: keep is true but dgxspark-vllm does not run"):
        run_action(plugin, args(keep=True, before={}), {"inventory_hostname": "s1"}, {})
    # A kept worker told to restart (its head is gone) is restarted all the same.
    action, result = run_action(plugin, args(keep=True, restart=True), {"inventory_hostname": "s1"},
                                {"changed": True, "container": {"Id": "c1", "State": {"StartedAt": "2026-12-07T12:00:00Z"}}})
    assert action._execute_module.call_args.kwargs["module_args"]["restart"] is True
    assert (result["action"], result["started"]) == ("restart", True)


def test_check_mode_and_diff_are_the_modules_and_its_diff_comes_back_whole(run_action):
    answer = {"changed": True, "diff": DIFF, "container": {"Id": "c1", "State": {"StartedAt": BEFORE["started_at"]}},
              "actions": [{"removed": "c1"}, {"created": "Created container"}, {"started": None}]}

    class CheckTask(plugin.ActionModule):
        def run(self, tmp=None, task_vars=None):
            self._task.check_mode = True
            return super().run(tmp, task_vars)

    action, result = run_action(type("P", (), {"ActionModule": CheckTask}), args(), {"inventory_hostname": "s1"}, answer)
    assert action._execute_module.call_count == 1
    assert result["diff"] == DIFF
    assert (result["changed"], result["action"], result["started"]) == (True, "recreate", True)


def test_a_failure_of_the_module_comes_back_as_it_is(run_action):
    answer = {"failed": True, "msg": "Error creating container: no such image"}
    _action, result = run_action(plugin, args(), {"inventory_hostname": "s1"}, answer)
    assert result["failed"] and result["msg"] == answer["msg"] and "action" not in result


def test_a_spec_the_definition_did_not_make_fails_naming_the_host_before_any_call(run_action):
    with pytest.raises(AnsibleActionFail, match="s1: engine_container: spec has keys node_container does not make"):
        run_action(plugin, args(spec=dict(SPEC, pid_mode="host")), {"inventory_hostname": "s1"}, {})
