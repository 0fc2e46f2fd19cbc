# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the known-bad combinations table and its check."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils._known_issues import KNOWN_ISSUES, check, image_nccl

DEADLOCK, TWO_COPIES = "nccl-cuda-graphs-multinode-deadlock", "nccl-two-copies"


def image(*versions, pip=None):
    """vllm_image_info's facts: one library file per version (system libraries named by version)."""
    libs = [{"path": f"/usr/lib/aarch64-linux-gnu/libnccl.so.{v}", "version": v, "version_from": "file name"}
            for v in versions]
    if pip:
        libs.append({"path": "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2", "version": pip,
                     "version_from": "dist-info", "package": "nvidia-nccl-cu13"})
    return {"image": "img:1", "nccl_libraries": libs, "versions": {"nccl": pip}, "nccl_conflict": len(libs) > 1}


def test_every_entry_has_a_source_a_condition_and_a_remedy():
    assert len({issue["id"] for issue in KNOWN_ISSUES}) == len(KNOWN_ISSUES)
    for issue in KNOWN_ISSUES:
        assert issue["source"].startswith(("https://github.com/vllm-project/vllm/issues/",
                                           "https://github.com/NVIDIA/nvidia-container-toolkit/issues/"))
        assert issue["when"] and issue["remedy"]["advice"]


def test_nccl_2_28_9_across_nodes_unset_eager_is_remedied_with_a_warning_citing_the_source():
    result = check(image(pip="2.28.9"), 2, {"enforce_eager": None})
    assert result["settings"] == {"enforce_eager": True}
    assert [(m["id"], m["action"]) for m in result["matches"]] == [(DEADLOCK, "remedied")]
    assert result["remedies"] == [{"id": DEADLOCK, "set": {"enforce_eager": True},
                                   "source": "https://github.com/vllm-project/vllm/issues/52504",
                                   "text": f"enforce_eager=true ({DEADLOCK}, https://github.com/vllm-project/vllm/issues/52504)"}]
    assert result["errors"] == []
    (warning,) = result["warnings"]
    assert "vllm/issues/52504" in warning and "NCCL 2.28.9" in warning and "2 nodes" in warning
    assert "enforce_eager=true" in warning


def test_forced_cuda_graphs_stop_naming_the_variable_and_the_fix():
    result = check(image(pip="2.28.9"), 2, {"enforce_eager": False})
    assert result["settings"] == {"enforce_eager": False} and result["remedies"] == []
    assert [(m["id"], m["action"]) for m in result["matches"]] == [(DEADLOCK, "forced")]
    (error,) = result["errors"]
    assert "vllm_serve_enforce_eager" in error and "vllm_serve_enforce_eager: true" in error
    assert "issues/52504" in error and "2.30.4" in error


@pytest.mark.parametrize("versions,pip,nodes,eager", [
    ((), "2.30.4", 2, None),       # fixed NCCL
    ((), "2.27.5", 2, None),       # older than the regression
    ((), "2.28.9", 1, None),       # one node: no collective crosses nodes
    ((), "2.28.9", 2, True),       # eager already
    ((), None, 2, None),           # no NCCL found at all
])
def test_no_match(versions, pip, nodes, eager):
    result = check(image(*versions, pip=pip), nodes, {"enforce_eager": eager})
    assert result["matches"] == [] and result["warnings"] == [] and result["errors"] == []
    assert result["settings"] == {"enforce_eager": bool(eager)}


def test_two_copies_of_libnccl_stop_a_multinode_deploy_unless_ignored():
    img = image("2.30.4", pip="2.27.7")
    result = check(img, 2, {"enforce_eager": None})
    assert [(m["id"], m["action"]) for m in result["matches"]] == [(TWO_COPIES, "unremediable")]
    (error,) = result["errors"]
    assert "issues/42354" in error and "2 NCCL libraries" in error and "vllm_serve_known_issues_ignore" in error
    assert check(img, 1, {"enforce_eager": None})["matches"] == []
    ignored = check(img, 2, {"enforce_eager": None}, ignore=[TWO_COPIES])
    assert ignored["errors"] == [] and [m["action"] for m in ignored["matches"]] == ["ignored"]
    assert "ignored" in ignored["warnings"][0]


def test_both_issues_at_once():
    result = check(image("2.29.0", pip="2.28.9"), 2, {"enforce_eager": None})
    assert {m["id"]: m["action"] for m in result["matches"]} == {DEADLOCK: "remedied", TWO_COPIES: "unremediable"}
    assert "NCCL 2.28.9, 2.29.0" in result["matches"][0]["because"]


def test_ignoring_the_deadlock_serves_with_cuda_graphs():
    result = check(image(pip="2.28.9"), 2, {"enforce_eager": None}, ignore=[DEADLOCK])
    assert result["settings"] == {"enforce_eager": False} and result["errors"] == []


def test_image_nccl_reads_files_and_pip_version():
    assert image_nccl(image("2.30.4", pip="2.28.9")) == (["2.28.9", "2.30.4"], 2)
    assert image_nccl({"versions": {"nccl": "2.28.9+cuda13.0"}}) == (["2.28.9+cuda13.0"], 0)


@pytest.mark.parametrize("settings,ignore,message", [
    ({"cuda_graphs": True}, [], "unknown settings"),
    ({"enforce_eager": None}, ["no-such-issue"], "unknown known-issue ids"),
])
def test_bad_input(settings, ignore, message):
    with pytest.raises(ValueError, match=message):
        check(image(), 2, settings, ignore=ignore)


VERBS = "rdma-userspace-libraries-missing"
RDMA_ENV = {"NCCL_NET": "IB", "NCCL_IB_HCA": "rocep1s0f1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}
NO_VERBS = {"libibverbs": None, "mlx5": None, "mlx5_provider": None, "complete": False,
            "missing": ["libibverbs.so.1 (libibverbs1)",
                        "the mlx5 provider libibverbs/libmlx5-rdmav*.so (ibverbs-providers)"]}


def test_an_image_without_the_verbs_libraries_on_an_rdma_fabric_stops_naming_the_fix():
    """The field: NCCL_NET=IB with an image built on CUDA's aarch64 base (no libibverbs) stops every node's engine with
    "Failed to initialize any NET plugin". Fails at 13f6075, which served such an image."""
    facts = dict(image(pip="2.30.4"), verbs=NO_VERBS)
    result = check(facts, 2, {"enforce_eager": None}, engine_env=RDMA_ENV)
    assert [(m["id"], m["action"]) for m in result["matches"]] == [(VERBS, "unremediable")]
    (error,) = result["errors"]
    assert "NCCL over RDMA (NCCL_NET=IB) and an image without libibverbs.so.1 (libibverbs1) and without the mlx5 " \
        "provider libibverbs/libmlx5-rdmav*.so (ibverbs-providers)" in error
    assert "apt-get install -y libibverbs1 ibverbs-providers" in error
    assert "https://github.com/NVIDIA/nvidia-container-toolkit/issues/1877" in error
    assert f"list {VERBS} in vllm_serve_known_issues_ignore" in error
    # only the provider missing: named alone
    provider_only = dict(NO_VERBS, libibverbs="/usr/lib/aarch64-linux-gnu/libibverbs.so.1", missing=NO_VERBS["missing"][1:])
    (error,) = check(dict(facts, verbs=provider_only), 1, {"enforce_eager": None}, engine_env=RDMA_ENV)["errors"]
    assert "an image without the mlx5 provider" in error and "libibverbs1)" not in error


@pytest.mark.parametrize("env,verbs,exists", [
    ({"NCCL_NET": "Socket", "NCCL_IB_DISABLE": "1"}, NO_VERBS, True),  # a socket fabric: NCCL never loads them
    ({}, NO_VERBS, True),                                            # a single Spark: no fabric environment
    (RDMA_ENV, dict(NO_VERBS, libibverbs="/x", mlx5_provider="/y", missing=[], complete=True), True),
    (RDMA_ENV, None, True),                                          # facts that do not say (an older module)
    (RDMA_ENV, NO_VERBS, False),                                     # the image is not there yet
])
def test_verbs_not_needed_or_present_is_no_match(env, verbs, exists):
    facts = dict(image(pip="2.30.4"), exists=exists)
    if verbs is not None:
        facts["verbs"] = verbs
    result = check(facts, 2, {"enforce_eager": None}, engine_env=env)
    assert result["matches"] == [] and result["errors"] == []


def test_an_ignored_verbs_issue_is_a_warning():
    result = check(dict(image(pip="2.30.4"), verbs=NO_VERBS), 2, {"enforce_eager": None}, ignore=[VERBS],
                   engine_env={"NCCL_IB_DISABLE": "0"})
    assert result["errors"] == [] and [(m["id"], m["action"]) for m in result["matches"]] == [(VERBS, "ignored")]
