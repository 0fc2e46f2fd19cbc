# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""Will the model fit? Its checkpoint's size against each node's unified memory and the head's disk.

The size comes, before anything is downloaded, from the checkpoint's safetensors index
(``model.safetensors.index.json``, ``metadata.total_size``: the bytes of every tensor): the head's own copy of it when
there is one, else the hub's, fetched alone; a repository without an index is sized from the hub's file metadata (the
tree of the repository, with the size of each file). vLLM loads on each node its share of the weights, the checkpoint
divided by TP x PP (times the node's GPUs), into a budget of ``gpu_memory_utilization`` x the node's memory (a GB10's
memory is the node's: ``MemTotal``), and needs room beside the weights for the profile run (activations, CUDA graphs,
the CUDA context) and at least some KV cache: the overhead. Standard library only; no I/O except reading a local copy.
"""

from __future__ import annotations

import json
import math
import os
import typing as t
import urllib.parse

INDEX_NAME = "model.safetensors.index.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
GB = 10**9
GIB = 1 << 30
# Cluster sizes to suggest: tensor parallelism must divide the model's attention heads, which are a power of two.
CLUSTER_SIZES = (1, 2, 4, 8)


def index_total(data: t.Any) -> t.Optional[int]:
    """``metadata.total_size`` of a safetensors index (parsed JSON), or None when it has none."""
    if not isinstance(data, dict):
        return None
    meta = data.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(total, bool) or not isinstance(total, (int, float)) or total <= 0:
        return None
    return int(total)


def tree_total(entries: t.Any) -> t.Optional[int]:
    """The bytes of the weight files in the hub's tree of a repository (``/api/models/<id>/tree/<revision>``: a list
    of ``{"type": "file", "path", "size", "lfs": {"size"}}``), or None when it lists none."""
    if not isinstance(entries, list):
        return None
    total, found = 0, False
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("type", "file") != "file":
            continue
        path = str(entry.get("path", ""))
        if not path.endswith(WEIGHT_SUFFIXES):
            continue
        lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else {}
        size = lfs.get("size", entry.get("size"))
        if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
            total += size
            found = True
    return total if found else None


def hub_urls(endpoint: str, model: str, revision: str = "") -> dict[str, str]:
    """The hub's URLs of a repository's safetensors index (alone) and of its file metadata."""
    base = endpoint.rstrip("/")
    rev = urllib.parse.quote(revision or "main", safe="")
    return {"index": f"{base}/{model}/resolve/{rev}/{INDEX_NAME}",
            "tree": f"{base}/api/models/{model}/tree/{rev}?recursive=true"}


def local_copy(directory: str) -> dict[str, t.Any]:
    """What a node's copy of the model says: the index's total (``index_bytes``, None without one), the bytes of the
    weight files there (``present_bytes``) and whether every shard the index names is there (``complete``)."""
    out: dict[str, t.Any] = {"path": directory, "exists": os.path.isdir(directory), "index_bytes": None,
                             "present_bytes": 0, "complete": False, "error": ""}
    if not out["exists"]:
        return out
    weights = {}
    for name in sorted(os.listdir(directory)):
        full = os.path.join(directory, name)
        if name.endswith(WEIGHT_SUFFIXES) and os.path.isfile(full):
            weights[name] = os.path.getsize(full)
    out["present_bytes"] = sum(weights.values())
    index = os.path.join(directory, INDEX_NAME)
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            out["error"] = f"{index}: {exc}"
            return out
        out["index_bytes"] = index_total(data)
        shards = set((data.get("weight_map") or {}).values()) if isinstance(data, dict) else set()
        out["complete"] = bool(shards) and shards <= set(weights)
    else:
        out["complete"] = bool(weights)
    return out


def free_where(path: str) -> dict[str, t.Any]:
    """Free bytes (as an unprivileged user sees them) on the file system that holds PATH, or would: the nearest
    existing directory above it."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and probe != "/":
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe)
    except OSError as exc:
        return {"path": probe, "free_bytes": -1, "error": f"{probe}: {exc.strerror}"}
    return {"path": probe, "free_bytes": st.f_bavail * st.f_frsize, "error": ""}


def gib(num: float) -> str:
    return f"{num / GIB:.1f}"


def gb(num: float) -> str:
    return f"{num / GB:.1f}"


def nodes_needed(total: int, memory_total: int, utilization: float, overhead: int, gpus_per_node: int = 1,
                 sizes: t.Sequence[int] = CLUSTER_SIZES) -> t.Optional[int]:
    """The smallest cluster of nodes like this one (of SIZES) whose shares fit, or None when none does."""
    budget = memory_total * utilization
    for nodes in sizes:
        if math.ceil(total / nodes) + overhead * gpus_per_node <= budget:
            return nodes
    return None


def judge(checkpoint: t.Mapping[str, t.Any], *, host: str, cluster: str, model: str, is_head: bool,
          tensor_parallel_size: int, pipeline_parallel_size: int, gpus_per_node: int, utilization: float,
          memory_total: int, overhead: int, disk_headroom: int, models_dir: str) -> dict[str, t.Any]:
    """The fit of MODEL on this node, from the head's CHECKPOINT (the result of the model_checkpoint module).

    Returns the figures (``figures``), sentences to stop on (``errors``: the memory on every node, the disk on the
    head) and ones to show (``notes``: why nothing was judged). Every sentence names the host, the cluster, the model,
    the figures and the fixes.
    """
    total = int(checkpoint.get("total_bytes") or 0)
    world = max(1, tensor_parallel_size * pipeline_parallel_size)
    share = math.ceil(total * gpus_per_node / world)
    budget = int(memory_total * utilization)
    need = share + overhead * gpus_per_node
    figures = {"total_bytes": total, "source": checkpoint.get("source", ""), "share_bytes": share,
               "overhead_bytes": overhead * gpus_per_node, "need_bytes": need, "memory_total_bytes": memory_total,
               "utilization": utilization, "budget_bytes": budget, "fits_memory": None, "disk": None}
    errors: list[str] = []
    notes: list[str] = []
    if not total and checkpoint.get("url") and checkpoint.get("error"):
        if is_head:  # the head asked the hub; its workers wait for the cluster's verdict
            errors.append(fetch_failure(host, model, checkpoint["url"], checkpoint.get("status"),
                                        checkpoint["error"]))
        return {"figures": figures, "errors": errors, "notes": notes}
    if not total:
        why = checkpoint.get("error") or "no index of its checkpoint on the head and the hub was not asked"
        notes.append(f"{host}: the size of {model} is unknown ({why}): its fit in memory and on disk is not checked.")
        return {"figures": figures, "errors": errors, "notes": notes}
    parallel = f"TP {tensor_parallel_size} x PP {pipeline_parallel_size}"
    weights = f"{gb(total)} GB of weights ({checkpoint.get('source') or 'its index'})"
    if memory_total > 0:
        figures["fits_memory"] = need <= budget
        if need > budget:
            enough = nodes_needed(total, memory_total, utilization, overhead, gpus_per_node)
            more = (f"more nodes: {enough} Sparks like {host} would hold it (a cluster of {enough}, "
                    f"dgxspark_tensor_parallel_size: {enough})" if enough and enough > world else
                    "more nodes cannot help: not even 8 Sparks like this one would hold it")
            errors.append(
                f"{host}: {cluster} cannot serve {model}: {weights} is {gib(share)} GiB on each node at {parallel}, "
                f"and with vLLM's overhead of {gib(overhead * gpus_per_node)} GiB (preflight_model_overhead_gib) a node "
                f"needs {gib(need)} GiB, but gpu_memory_utilization {utilization} x {gib(memory_total)} GiB of unified "
                f"memory on {host} is {gib(budget)} GiB: vLLM would run out of memory loading it, or find no memory for "
                f"the KV cache, after the download. Fix: {more}; or a smaller quantisation or a smaller model "
                f"(dgxspark_model, e.g. an FP8 or 4-bit checkpoint of at most "
                f"{gb(max(budget - overhead * gpus_per_node, 0) * world / gpus_per_node)} GB at {parallel}).")
    if is_head:
        disk = checkpoint.get("disk") or {}
        free = int(disk.get("free_bytes", -1))
        local = checkpoint.get("local") or {}
        remaining = 0 if local.get("complete") else max(total - int(local.get("present_bytes") or 0), 0)
        want = remaining + disk_headroom if remaining else 0
        figures["disk"] = {"path": disk.get("path", models_dir), "free_bytes": free, "download_bytes": remaining,
                           "need_bytes": want, "fits": None if free < 0 else free >= want}
        if remaining and free >= 0 and free < want:
            errors.append(
                f"{host}: {cluster}'s head cannot hold {model}: the download needs {gb(want)} GB under {models_dir} "
                f"({gb(remaining)} GB of weights not there yet + {gb(disk_headroom)} GB headroom, "
                f"preflight_model_disk_headroom_gb), but the file system there ({disk.get('path', models_dir)}) has "
                f"{gb(free)} GB free. Fix: free space there, a bigger disk (or dgxspark_models_dir on one), or a "
                "smaller quantisation of the model (dgxspark_model).")
        elif remaining and free < 0:
            notes.append(f"{host}: the free space under {models_dir} is unknown ({disk.get('error', '')}): "
                         "the download's room is not checked.")
    return {"figures": figures, "errors": errors, "notes": notes}


def fetch_failure(host: str, model: str, url: str, status: t.Optional[int], error: str) -> str:
    """Why the size of MODEL could not be read from the hub, with the fixes."""
    if status in (401, 403):
        fix = ("the model is gated or private: accept its licence on the hub and set dgxspark_hf_token (in the vault) "
               "to a token that may read it")
    elif status == 404:
        fix = "check dgxspark_model (a Hugging Face id, org/name) and model_sync_revision"
    else:
        fix = ("make sure the head reaches the hub (DNS, proxy, firewall), or put the model's "
               f"{INDEX_NAME} (or the whole model) under dgxspark_models_dir on the head")
    return (f"{host}: the size of {model} could not be read before the download ({url}: {error}). Fix: {fix}; "
            "or set preflight_model_fit: false to skip the check.")
