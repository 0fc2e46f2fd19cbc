# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the engine_spec action: it publishes the spec as the named fact, and names the host on bad input."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task

from ansible_collections.dgxspark.vllm.plugins.action.engine_spec import ActionModule


def action(args):
    task = Task()
    task.args = args
    task.async_val = 0
    return ActionModule(task, MagicMock(), MagicMock(), loader=None, templar=None, shared_loader_obj=None)


ARGS = {"backend": "mp", "name": "dgxspark-vllm", "image": "img:1", "role": "head", "pair": "pair1",
        "launcher_dir": "/opt/dgxspark/bin", "mp": {"serve_argv": ["vllm", "serve"], "models_dir": "/m",
                                                    "config_dir": "/c"}, "publish": "vllm_serve_mp_spec"}


def test_the_spec_is_published_as_the_named_fact_and_nothing_changes():
    result = action(dict(ARGS)).run(task_vars={"inventory_hostname": "spark-1"})
    assert result["changed"] is False
    assert result["ansible_facts"] == {"vllm_serve_mp_spec": result["spec"]}
    assert result["spec"]["container"]["command"][:3] == ["mp", "--serve-env-file", "/etc/dgxspark/vllm/serve.env"]


@pytest.mark.parametrize(("changes", "needle"), [
    ({"publish": "not a name"}, "spark-1: engine_spec: publish is .not a name.: give a variable name"),
    ({"mp": {"serve_argv": [], "models_dir": "/m", "config_dir": "/c"}},
     "spark-1: engine_spec \\(dgxspark-vllm\\): serve_argv must not be empty"),
])
def test_bad_input_names_the_host_and_the_container(changes, needle):
    with pytest.raises(AnsibleActionFail, match=needle):
        action(dict(ARGS, **changes)).run(task_vars={"inventory_hostname": "spark-1"})
