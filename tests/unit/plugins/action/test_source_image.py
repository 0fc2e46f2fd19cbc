# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the source_image action (issue 35, one-use filters folded into the step that needs them): the inputs
are checked before anything runs on the node, the pull is community.docker's, and the record is the release's."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task

from ansible_collections.dgxspark.vllm.plugins.action.source_image import INFO, PULL, ActionModule

ID = "sha256:" + "a" * 64
DIGEST = "sha256:" + "b" * 64
IMAGE = {"Id": ID, "RepoDigests": [f"registry.lab:5000/vllm/node@{DIGEST}"]}


def run(args, answer=None):
    task = Task()
    task.args = args
    task.async_val = 0
    module = ActionModule(task, MagicMock(), MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    module._execute_module = MagicMock(return_value=answer or {})
    result = module.run(task_vars={"inventory_hostname": "spark-1"})
    return result, module._execute_module


def test_a_missing_image_is_pulled_by_community_docker_and_recorded_by_id_and_digest():
    result, execute = run({"image": "registry.lab:5000/vllm/node:0.17", "publish": "image_pull_result"},
                          {"changed": True, "image": IMAGE})
    call = execute.call_args.kwargs
    assert call["module_name"] == PULL and call["module_args"] == {"name": "registry.lab:5000/vllm/node:0.17",
                                                                   "pull": "not_present"}
    record = {"image": "registry.lab:5000/vllm/node:0.17", "id": ID, "digest": f"registry.lab:5000/vllm/node@{DIGEST}",
              "pulled": True, "policy": "missing"}
    assert result["changed"] is True and result["image"] == record
    assert result["ansible_facts"] == {"image_pull_result": record}


def test_always_asks_the_registry_and_an_unchanged_pull_changes_nothing():
    result, execute = run({"image": "vllm/node:0.17", "policy": "always", "docker_host": "unix:///run/d.sock"},
                          {"changed": False, "image": {"Id": ID}})
    assert execute.call_args.kwargs["module_args"] == {"name": "vllm/node:0.17", "pull": "always",
                                                       "docker_host": "unix:///run/d.sock"}
    assert result["changed"] is False and result["image"]["pulled"] is False and "ansible_facts" not in result


def test_never_only_looks_and_stops_naming_the_fix_when_the_node_lacks_the_image():
    result, execute = run({"image": "vllm/node:0.17", "policy": "never"}, {"images": [IMAGE]})
    assert execute.call_args.kwargs["module_name"] == INFO and result["changed"] is False
    assert result["image"]["id"] == ID
    with pytest.raises(AnsibleActionFail, match="spark-1: the image vllm/node:0.17 .* is not on this node, and "
                                                "dgxspark_image_pull is never"):
        run({"image": "vllm/node:0.17", "policy": "never"}, {"images": []})


def test_a_failed_pull_names_the_node_the_image_and_what_to_check():
    with pytest.raises(AnsibleActionFail, match=r"spark-1: could not pull vllm/node:0.17 \(dgxspark_image, "
                                                r"dgxspark_image_pull=missing\): manifest unknown\. Check the reference"):
        run({"image": "vllm/node:0.17"}, {"failed": True, "msg": "manifest unknown"})


def test_check_mode_reports_the_pull_it_would_make_without_an_image_id():
    result = run({"image": "vllm/node:0.17"}, {"changed": True, "image": {}})[0]
    assert result["changed"] is True and result["image"]["id"] == "" and result["image"]["pulled"] is True


@pytest.mark.parametrize(("args", "needle"), [
    ({"image": "", "policy": "missing"}, "spark-1: dgxspark_image is empty"),
    ({"image": "vllm/node:0.17", "policy": "sometimes"}, "spark-1: dgxspark_image_pull must be one of missing"),
    ({"image": "vllm/node@sha256:xyz"}, "spark-1: dgxspark_image vllm/node@sha256:xyz: 'sha256:xyz' is not a digest"),
    ({"image": "vllm/node:0.17", "publish": "not a name"}, "spark-1: source_image: publish is .not a name.: give a variable name"),
])
def test_bad_input_fails_before_anything_runs_on_the_node(args, needle):
    task = Task()
    task.args = args
    task.async_val = 0
    module = ActionModule(task, MagicMock(), MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    module._execute_module = MagicMock()
    with pytest.raises(AnsibleActionFail, match=needle):
        module.run(task_vars={"inventory_hostname": "spark-1"})
    module._execute_module.assert_not_called()
