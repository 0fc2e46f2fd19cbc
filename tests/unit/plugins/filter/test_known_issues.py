# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the known_issues filter (warnings on the controller, errors for the role to stop on)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter import known_issues as plugin

FACTS = {"image": "lab/vllm-qwen35:0.17", "versions": {"nccl": "2.28.9"},
         "nccl_libraries": [{"path": "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
                             "version": "2.28.9"}]}


def test_remedy_is_warned_once_with_host_image_and_source(monkeypatch):
    shown = []
    monkeypatch.setattr(plugin.display, "warning", shown.append)
    f = plugin.FilterModule().filters()["known_issues"]
    result = f(FACTS, nodes="2", settings={"enforce_eager": None}, host="spark-1")
    assert result["settings"]["enforce_eager"] is True
    (warning,) = shown
    assert warning.startswith("spark-1: lab/vllm-qwen35:0.17: NCCL 2.28.9 with CUDA graphs across nodes")
    assert "https://github.com/vllm-project/vllm/issues/52504" in warning


def test_bad_input_is_a_filter_error():
    f = plugin.FilterModule().filters()["known_issues"]
    with pytest.raises(AnsibleFilterError, match="expects the result of vllm_image_info"):
        f("not a dict", nodes=2, settings={})
    with pytest.raises(AnsibleFilterError, match="unknown settings"):
        f(FACTS, nodes=2, settings={"graphs": True})


def test_an_image_without_verbs_libraries_on_an_rdma_fabric_is_an_error_naming_the_fix():
    """Fails at 13f6075, whose filter took no engine_env and had no such row."""
    facts = dict(FACTS, versions={"nccl": "2.30.4"}, nccl_libraries=[], verbs={
        "libibverbs": None, "mlx5": None, "mlx5_provider": None, "complete": False,
        "missing": ["libibverbs.so.1 (libibverbs1)", "the mlx5 provider libibverbs/libmlx5-rdmav*.so (ibverbs-providers)"]})
    result = plugin.known_issues(facts, 2, {"enforce_eager": None}, host="spark-1",
                                 engine_env={"NCCL_NET": "IB", "NCCL_IB_HCA": "rocep1s0f1"})
    (error,) = result["errors"]
    assert "libibverbs1 ibverbs-providers" in error and "Failed to initialize any NET plugin" in error
    assert plugin.known_issues(facts, 2, {"enforce_eager": None}, engine_env={"NCCL_NET": "Socket"})["errors"] == []
