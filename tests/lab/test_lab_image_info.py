"""vllm_image_info on a lab node: both lab engine images, read without starting a container."""

from __future__ import annotations

import json

import pytest

from labkit import BIN, INVENTORY, LAB, ansible_env, node_exec, run, node

OLD, NEW = "lab/vllm-node:0.14", "lab/vllm-qwen35:0.17"
QWEN35 = ["Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"]
NODE = node(1)


@pytest.fixture(scope="module")
def loaded(lab):
    run([*LAB, "load", OLD, NEW])
    return lab


def containers():
    return node_exec(NODE, "docker", "ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Names}}").stdout.split("\n")


def image_info(**args):
    """Run the module on spark-1 through an ad hoc command; returns (host result, stats)."""
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), NODE, "-m", "dgxspark.vllm.vllm_image_info",
                "-a", json.dumps(args)], check=False,
               env=ansible_env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"))
    out = json.loads(proc.stdout)
    return out["plays"][0]["tasks"][0]["hosts"][NODE], out["stats"][NODE]


@pytest.mark.parametrize("method", ["auto", "archive"])
def test_vllm_0_14_image(loaded, method):
    before = containers()
    result, stats = image_info(image=OLD, method=method, architectures=QWEN35, model_modules=["qwen3_5", "qwen3_5_mtp"])
    assert stats["failures"] == 0 and stats["changed"] == 0, result
    assert result["method"] == ("layers" if method == "auto" else "archive")
    assert result["store"] == "overlay2"
    assert result["versions"]["vllm"] == "0.14.1"
    assert result["versions"]["transformers"] == "4.57.6"
    assert (result["ray_present"], result["versions"]["ray"]) == (True, "2.54.1")
    assert result["entrypoint"] == ["/usr/local/bin/run-cluster-node.sh"]
    assert "transformers<5,>=4.56.0" in result["vllm_requires"]
    assert result["missing_architectures"] == QWEN35
    assert not [arch for arch in result["supported_architectures"] if arch.startswith("Qwen3_5")]
    assert "Qwen3MoeForCausalLM" in result["architectures"]["_TEXT_GENERATION_MODELS"]
    assert result["model_modules"] == {"qwen3_5": False, "qwen3_5_mtp": False}
    assert result["python"]["venv"] is True and result["site_packages"] == ["/opt/venv/lib/python3.11/site-packages"]
    assert containers() == before  # nothing created, or created and removed, never started


@pytest.mark.parametrize("method", ["auto", "archive"])
def test_vllm_0_17_image(loaded, method):
    before = containers()
    result, stats = image_info(image=NEW, method=method, architectures=QWEN35, model_modules=["qwen3_5", "qwen3_5_mtp"])
    assert stats["failures"] == 0 and stats["changed"] == 0, result
    assert result["versions"]["vllm"] == "0.17.1"
    assert result["versions"]["transformers"] == "4.57.3"
    assert (result["ray_present"], result["versions"]["ray"]) == (False, None)
    assert result["entrypoint"] == ["/usr/local/bin/entrypoint.sh"]
    assert result["missing_architectures"] == []
    assert set(QWEN35) <= set(result["architectures"]["_MULTIMODAL_MODELS"])
    assert result["model_modules"] == {"qwen3_5": True, "qwen3_5_mtp": True}
    assert result["nccl_conflict"] is False
    assert containers() == before


def test_missing_image_names_the_node(loaded):
    result, stats = image_info(image="lab/not-there:1")
    assert stats["failures"] == 1
    assert result["msg"] == (f"image lab/not-there:1 is not present on this node's Docker engine ({NODE}); build it or "
                             "sync it first")
