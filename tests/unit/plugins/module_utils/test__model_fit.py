# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model's fit: the checkpoint's size from its index or the hub's file metadata, each node's share against its
unified memory, the head's disk against the download, and the sentences that stop a cluster."""

from __future__ import annotations

import json

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _model_fit as f

GIB = 1 << 30
# MemTotal of a 128 GB DGX Spark (121.7 GiB as CUDA and /proc/meminfo see it) and of a 64 GB one.
SPARK_128 = int(121.7 * GIB)
SPARK_64 = int(60.8 * GIB)
QWEN122 = 119 * 10**9  # Qwen/Qwen3.5-122B-A10B-FP8
QWEN35 = 35 * 10**9  # Qwen/Qwen3.5-35B-A3B-FP8
MODEL = "Qwen/Qwen3.5-122B-A10B-FP8"


def checkpoint(total, complete=False, present=0, free=None, source="the hub's model.safetensors.index.json"):
    return {"total_bytes": total, "source": source, "url": "", "status": None, "error": "",
            "local": {"complete": complete, "present_bytes": present},
            "disk": {"path": "/srv", "free_bytes": 2 * 10**12 if free is None else free, "error": ""}}


def verdict(found, tp=1, pp=1, memory=SPARK_128, is_head=True, host="spark-d1", cluster="solo_d", model=MODEL,
            utilization=0.8):
    return f.judge(found, host=host, cluster=cluster, model=model, is_head=is_head, tensor_parallel_size=tp,
                   pipeline_parallel_size=pp, gpus_per_node=1, utilization=utilization, memory_total=memory,
                   overhead=8 * GIB, disk_headroom=5 * 10**9, models_dir="/srv/dgxspark/models")


def test_index_total_is_the_metadata_total_size():
    assert f.index_total({"metadata": {"total_size": QWEN122}, "weight_map": {}}) == QWEN122
    assert f.index_total({"metadata": {"total_size": 1.19e11}}) == QWEN122
    for bad in ({}, {"metadata": {}}, {"metadata": {"total_size": "119"}}, {"metadata": {"total_size": True}},
                {"metadata": {"total_size": 0}}, [], None):
        assert f.index_total(bad) is None


def test_tree_total_sums_the_weight_files_lfs_sizes_first():
    tree = [{"type": "file", "path": "config.json", "size": 4000},
            {"type": "file", "path": "model.safetensors", "size": 135, "lfs": {"size": 16 * 10**9}},
            {"type": "file", "path": "extra/model.bin", "size": 10},
            {"type": "directory", "path": "extra", "size": 0}]
    assert f.tree_total(tree) == 16 * 10**9 + 10
    assert f.tree_total([{"type": "file", "path": "README.md", "size": 5}]) is None
    assert f.tree_total({"error": "Repository not found"}) is None


def test_hub_urls_fetch_the_index_alone_and_the_tree():
    assert f.hub_urls("https://huggingface.co/", MODEL) == {
        "index": "https://huggingface.co/Qwen/Qwen3.5-122B-A10B-FP8/resolve/main/model.safetensors.index.json",
        "tree": "https://huggingface.co/api/models/Qwen/Qwen3.5-122B-A10B-FP8/tree/main?recursive=true"}
    index = f.hub_urls("https://hf.example", MODEL, "refs/pr/1")["index"]
    assert index.endswith("/resolve/refs%2Fpr%2F1/model.safetensors.index.json")


def test_local_copy_reads_the_index_and_what_is_there(tmp_path):
    assert f.local_copy(str(tmp_path / "absent"))["exists"] is False
    shards = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": QWEN122}, "weight_map": shards}))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 100)
    copy = f.local_copy(str(tmp_path))
    assert (copy["index_bytes"], copy["present_bytes"], copy["complete"]) == (QWEN122, 100, False)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"x" * 50)
    assert f.local_copy(str(tmp_path))["complete"] is True


def test_free_where_walks_up_to_an_existing_directory(tmp_path):
    found = f.free_where(str(tmp_path / "models" / "Qwen3.5-122B-A10B-FP8"))
    assert found["path"] == str(tmp_path) and found["free_bytes"] > 0 and found["error"] == ""


def test_field_122b_on_one_128_gb_spark_is_refused_with_the_figures_and_fixes():
    result = verdict(checkpoint(QWEN122))
    (error,) = result["errors"]
    assert error == (
        "spark-d1: solo_d cannot serve Qwen/Qwen3.5-122B-A10B-FP8: 119.0 GB of weights (the hub's "
        "model.safetensors.index.json) is 110.8 GiB on each node at TP 1 x PP 1, and with vLLM's overhead of 8.0 GiB "
        "(preflight_model_overhead_gib) a node needs 118.8 GiB, but gpu_memory_utilization 0.8 x 121.7 GiB of unified "
        "memory on spark-d1 is 97.4 GiB: vLLM would run out of memory loading it, or find no memory for the KV cache, "
        "after the download. Fix: more nodes: 2 Sparks like spark-d1 would hold it (a cluster of 2, "
        "dgxspark_tensor_parallel_size: 2); or a smaller quantisation or a smaller model (dgxspark_model, e.g. an FP8 "
        "or 4-bit checkpoint of at most 95.9 GB at TP 1 x PP 1).")
    assert result["figures"]["fits_memory"] is False
    assert result["figures"]["share_bytes"] == QWEN122 and result["figures"]["budget_bytes"] == int(SPARK_128 * 0.8)


@pytest.mark.parametrize("memory,tp,fits", [
    (SPARK_128, 2, True), (SPARK_128, 4, True), (SPARK_64, 2, False), (SPARK_64, 4, True), (SPARK_128, 1, False)])
def test_122b_fp8_on_128_and_64_gb_sparks(memory, tp, fits):
    result = verdict(checkpoint(QWEN122), tp=tp, memory=memory, is_head=False, host="spark-a2", cluster="pair_a")
    assert result["figures"]["fits_memory"] is fits
    assert bool(result["errors"]) is not fits


def test_64_gb_pair_is_told_how_many_nodes_would_hold_it():
    (error,) = verdict(checkpoint(QWEN122), tp=2, memory=SPARK_64, is_head=False, host="spark-a2",
                       cluster="pair_a")["errors"]
    assert "spark-a2: pair_a cannot serve Qwen/Qwen3.5-122B-A10B-FP8: 119.0 GB of weights" in error
    assert "55.4 GiB on each node at TP 2 x PP 1" in error and "a node needs 63.4 GiB" in error
    assert "0.8 x 60.8 GiB of unified memory on spark-a2 is 48.6 GiB" in error
    assert "more nodes: 4 Sparks like spark-a2 would hold it (a cluster of 4, dgxspark_tensor_parallel_size: 4)" in error


def test_a_model_no_cluster_can_hold_says_more_nodes_cannot_help():
    (error,) = verdict(checkpoint(2 * 10**12), tp=8, memory=SPARK_128, is_head=False)["errors"]
    assert "more nodes cannot help: not even 8 Sparks like this one would hold it" in error


def test_35b_fits_one_spark_and_pipeline_parallel_divides_too():
    assert verdict(checkpoint(QWEN35))["errors"] == []
    assert verdict(checkpoint(QWEN122), tp=1, pp=2)["figures"]["fits_memory"] is True


def test_field_head_disk_too_small_for_the_download_is_refused():
    result = verdict(checkpoint(QWEN35, present=10**9, free=20 * 10**9))
    (error,) = result["errors"]
    assert error == (
        "spark-d1: solo_d's head cannot hold Qwen/Qwen3.5-122B-A10B-FP8: the download needs 39.0 GB under "
        "/srv/dgxspark/models (34.0 GB of weights not there yet + 5.0 GB headroom, preflight_model_disk_headroom_gb), "
        "but the file system there (/srv) has 20.0 GB free. Fix: free space there, a bigger disk (or "
        "dgxspark_models_dir on one), or a smaller quantisation of the model (dgxspark_model).")
    assert result["figures"]["disk"] == {"path": "/srv", "free_bytes": 20 * 10**9, "download_bytes": 34 * 10**9,
                                         "need_bytes": 39 * 10**9, "fits": False}


def test_a_complete_copy_needs_no_room_and_workers_are_not_judged_on_disk():
    assert verdict(checkpoint(QWEN35, complete=True, present=QWEN35, free=10**9))["errors"] == []
    assert verdict(checkpoint(QWEN35, free=10**9), is_head=False)["errors"] == []


def test_unknown_size_is_a_note_and_a_failed_hub_read_stops_the_head():
    quiet = verdict({"total_bytes": 0, "error": "", "url": ""})
    assert quiet["errors"] == []
    assert quiet["notes"][0].startswith("spark-d1: the size of Qwen/Qwen3.5-122B-A10B-FP8 is unknown")
    gated = {"total_bytes": 0, "url": "https://huggingface.co/x/y/resolve/main/model.safetensors.index.json",
             "status": 401, "error": "HTTP 401 Unauthorized"}
    (error,) = verdict(gated)["errors"]
    assert error == (
        "spark-d1: the size of Qwen/Qwen3.5-122B-A10B-FP8 could not be read before the download "
        "(https://huggingface.co/x/y/resolve/main/model.safetensors.index.json: HTTP 401 Unauthorized). Fix: the model "
        "is gated or private: accept its licence on the hub and set dgxspark_hf_token (in the vault) to a token that "
        "may read it; or set preflight_model_fit: false to skip the check.")
    assert verdict(gated, is_head=False)["errors"] == []
    offline = dict(gated, status=None, error="[Errno -3] Temporary failure in name resolution")
    assert "make sure the head reaches the hub (DNS, proxy, firewall)" in verdict(offline)["errors"][0]


def test_nodes_needed():
    assert f.nodes_needed(QWEN122, SPARK_128, 0.8, 8 * GIB) == 2
    assert f.nodes_needed(QWEN122, SPARK_64, 0.8, 8 * GIB) == 4  # 3 would do, but TP must divide the heads
    assert f.nodes_needed(QWEN35, SPARK_64, 0.8, 8 * GIB) == 1
    assert f.nodes_needed(10**13, SPARK_128, 0.8, 8 * GIB) is None
