# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the hybrid_image_plan action: the hybrid_image role's inputs checked before anything reaches the
build host, the images inspected and the content tag derived in one step, and the facts the role's build reads."""

from __future__ import annotations

import hashlib
from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.task import Task

from ansible_collections.dgxspark.vllm.plugins.action.hybrid_image_plan import ActionModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import _hybrid_plan, _node_program

SOURCE = {"id": "sha256:" + "a" * 64, "python": "/usr/bin/python3", "site_packages": ["/opt/venv/site-packages"],
          "ray_present": False, "versions": {"vllm": "0.17.0"}, "checked_architectures": ["Qwen3_5MoeForCausalLM"]}
LOCK = "ray[default]==2.54.1 \\\n    --hash=sha256:" + "b" * 64 + "\n"


class Node:
    """The build host as the action's module calls see it."""

    def __init__(self, existing=None, source=None, wheels=()):
        self.calls = []
        self.existing = existing or {"exists": False, "id": "", "recorded_id": ""}
        self.source = source or SOURCE
        self.wheels = wheels

    def __call__(self, module_name=None, module_args=None, task_vars=None, **kwargs):  # pylint: disable=unused-argument
        self.calls.append((module_name, dict(module_args)))
        if module_name == "ansible.builtin.find":
            return {"files": [{"path": f"{module_args['paths']}/{w}"} for w in self.wheels], "matched": len(self.wheels)}
        if module_name == "community.docker.docker_image_pull":
            return {"changed": True}
        if module_args["image"].startswith("dgxspark/vllm-hybrid:"):
            return dict(self.existing)
        return dict(self.source)


def run(tmp_path, node, **args):
    (tmp_path / "ray.txt").write_text(LOCK)
    (tmp_path / "Dockerfile.j2").write_text("FROM {{ hybrid_image_from }}\n")
    task = Task()
    task.args = {"source": "lab/vllm-qwen35:0.17", "repository": "dgxspark/vllm-hybrid", "ray_version": "2.54.1",
                 "min_ray_version": "2.54.0", "ray_extras": ["default"], "ray_lock": str(tmp_path / "ray.txt"),
                 "architectures": ["Qwen3_5MoeForConditionalGeneration"], "record": "/var/lib/dgxspark/v.json",
                 "recipe": str(tmp_path / "Dockerfile.j2"), **args}
    task.async_val = 0
    module = ActionModule(task, MagicMock(), MagicMock(), loader=DataLoader(), templar=None, shared_loader_obj=None)
    module._execute_module = node  # pylint: disable=protected-access
    return module.run(task_vars={"inventory_hostname": "spark-1"})


def test_the_plan_inspects_the_source_derives_the_tag_and_publishes_what_the_build_reads(tmp_path):
    node = Node()
    result = run(tmp_path, node)
    facts = result["ansible_facts"]
    launcher = _node_program.build("dgxspark-launch")
    made_of = facts["hybrid_image_inputs"]
    assert made_of["recipe"] == hashlib.sha256(b"FROM {{ hybrid_image_from }}\n").hexdigest()
    assert made_of["launcher_sha256"] == hashlib.sha256(launcher.encode()).hexdigest()
    assert made_of["donor"] == SOURCE["id"] and made_of["pip"] == ["ray[default]==2.54.1"]
    assert made_of["ray_lock"] == hashlib.sha256(LOCK.encode()).hexdigest()
    # The gates check the architectures the model declared (vllm_image_info's checked_architectures).
    assert made_of["architectures"] == facts["hybrid_image_gate_architectures"] == ["Qwen3_5MoeForCausalLM"]
    digest, tag = _hybrid_plan.content_tag("dgxspark/vllm-hybrid", "overlay", True, made_of)
    assert result["image"] == facts["hybrid_image_content_tag"] == tag and facts["hybrid_image_inputs_sha256"] == digest
    assert facts["hybrid_image_from"] == "lab/vllm-qwen35:0.17" and facts["hybrid_image_from_info"] == SOURCE
    assert facts["hybrid_image_ray_lock_content"] == LOCK and facts["hybrid_image_ray_added"] == "ray[default]==2.54.1"
    assert facts["hybrid_image_base_site"] == facts["hybrid_image_source_site"] == "/opt/venv/site-packages"
    assert facts["hybrid_image_launcher_text"] == launcher and facts["hybrid_image_launcher_version"]
    assert result["changed"] is False and result["reuse"] is False and facts["hybrid_image_reuse"] is False
    assert [call[0] for call in node.calls] == ["dgxspark.vllm.vllm_image_info"] * 2
    assert node.calls[1][1] == {"image": tag, "architectures": ["Qwen3_5MoeForCausalLM"], "missing": "report",
                                "record": "/var/lib/dgxspark/v.json"}


def test_the_image_under_the_tag_is_reused_only_when_it_is_the_one_recorded_as_verified(tmp_path):
    same = {"exists": True, "id": "sha256:" + "c" * 64, "recorded_id": "sha256:" + "c" * 64}
    assert run(tmp_path, Node(existing=same))["reuse"] is True
    other = dict(same, recorded_id="sha256:" + "d" * 64)
    assert run(tmp_path, Node(existing=other))["reuse"] is False


def test_a_graft_inspects_the_base_pulls_when_asked_and_lists_the_wheelhouse(tmp_path):
    node = Node(wheels=("b-1.whl", "a-1.whl"))
    result = run(tmp_path, node, strategy="graft", base="vllm-node:0.14", pull=True, pip_wheelhouse="/w")
    assert [call[0] for call in node.calls] == ["community.docker.docker_image_pull"] * 2 + [
        "dgxspark.vllm.vllm_image_info"] * 2 + ["ansible.builtin.find", "dgxspark.vllm.vllm_image_info"]
    assert result["pulled"] == ["lab/vllm-qwen35:0.17", "vllm-node:0.14"] and result["changed"] is True
    assert result["ansible_facts"]["hybrid_image_inputs"]["wheelhouse"] == ["a-1.whl", "b-1.whl"]
    assert result["ansible_facts"]["hybrid_image_from"] == "vllm-node:0.14"


@pytest.mark.parametrize(("args", "node", "needle"), [
    ({"source": "lab/vllm:0.17\nRUN id"}, Node(), "host spark-1: hybrid_image_source is"),
    ({"strategy": "graft", "base": ""}, Node(), "hybrid_image_base is empty"),
    ({"launcher": "/nonexistent/launch"}, Node(), "hybrid_image_launcher /nonexistent/launch is not a file"),
    ({"ray_install": "always", "ray_lock": "/nonexistent/ray.txt"}, Node(), "/nonexistent/ray.txt is not a file on the"),
    ({"pip_wheelhouse": "/w"}, Node(), "the wheelhouse /w (hybrid_image_pip_wheelhouse, a directory on the build host)"),
    ({}, Node(source=dict(SOURCE, python=None)), "lab/vllm-qwen35:0.17 has no python3 on its PATH"),
    ({}, Node(source=dict(SOURCE, site_packages=[])), "has no vLLM in any site-packages"),
])
def test_bad_input_fails_naming_the_fix_and_nothing_reaches_the_node_before_the_inputs_pass(tmp_path, args, node,
                                                                                            needle):
    with pytest.raises(AnsibleActionFail) as failed:
        run(tmp_path, node, **args)
    assert needle in str(failed.value), str(failed.value)
    if "hybrid_image_source is" in needle or "hybrid_image_base is" in needle or "launcher" in needle:
        assert node.calls == []  # before any module call on the build host
