# SPDX-License-Identifier: Apache-2.0
"""The lab's stand-in for CUDA's memory query on a GB10 and vLLM's start-up memory guard.

A GB10 has no memory of its own: CUDA's total is the node's unified memory (about 121.7 GiB), and on this
shared-memory device (compute capability 12.1) vLLM 0.14.1 and 0.17.1 take the free figure from the OS
(``MemAvailable``, through psutil) rather than from CUDA. At start-up each worker requests
``total x gpu_memory_utilization`` and refuses to start when less is free, naming both figures.

The lab node keeps its unified-memory model in ``/run/dgxspark-lab/gpu/meminfo`` (``/proc/meminfo``'s format),
which a GPU container sees read-only at the same path. Without that file (a container without the GPU, or
a node whose model is not running) this stand-in has no memory figures and does not guard.

With the figures, each rank then charges its share of the checkpoint, the checkpoint's bytes divided by the world
size (TP x PP), as vLLM's loader does: the weights come out of free memory first (CUDA out of memory while loading
when they do not fit), and what is left of the rank's budget after the weights and the profile run's own memory
(activations, CUDA graphs, the CUDA context: :data:`PROFILE_BYTES`) is the KV cache. Nothing left is vLLM's
"No available memory for the cache blocks". The checkpoint's bytes are the ``metadata.total_size`` of its safetensors
index: the lab's stand-in shards are a few MB, and their index states the size of the checkpoint they stand for.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

GPU_DIR_ENV = "VLLM_LAB_GPU_DIR"  # tests outside a container point it elsewhere; nothing in the collection sets it
DEFAULT_GPU_DIR = "/run/dgxspark-lab/gpu"
GiB_bytes = 1 << 30


def meminfo_path() -> Path:
    return Path(os.environ.get(GPU_DIR_ENV, DEFAULT_GPU_DIR)) / "meminfo"


def read_meminfo(path: Path) -> dict[str, int]:
    """``/proc/meminfo``'s fields in bytes."""
    fields = {}
    for line in path.read_text().splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return fields


def mem_get_info() -> tuple[int, int] | None:
    """(free, total) bytes as vLLM sees them on a GB10, or None without the node's memory model."""
    fields = node_meminfo()
    return None if fields is None else (fields["MemAvailable"], fields["MemTotal"])


def node_meminfo() -> dict[str, int] | None:
    try:
        return read_meminfo(meminfo_path())
    except OSError:
        return None


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError (raised by the CUDA caching allocator)."""


OutOfMemoryError.__module__ = "torch"


# What the profile run adds to the weights on one rank (peak activations, CUDA graphs, the CUDA context and NCCL's
# buffers): a fixed figure in the lab, of the size vLLM reports for a large MoE on a GB10.
PROFILE_BYTES = 4 * GiB_bytes
INDEX_NAME = "model.safetensors.index.json"


def checkpoint_bytes(model_dir: Path) -> int:
    """The checkpoint's bytes: its safetensors index's ``metadata.total_size``, else the shards' sizes."""
    try:
        total = json.loads((Path(model_dir) / INDEX_NAME).read_text())["metadata"]["total_size"]
        if isinstance(total, int) and total > 0:
            return total
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors"))


def rank_share(model_dir: Path, world_size: int) -> int:
    """One rank's share of the weights: the checkpoint's bytes divided by TP x PP."""
    return math.ceil(checkpoint_bytes(model_dir) / max(1, world_size))


def out_of_memory(device_index: int, requested: int, free: int, total: int) -> OutOfMemoryError:
    return OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {format_gib(requested)} GiB. GPU {device_index} has a total capacity "
        f"of {format_gib(total)} GiB of which {format_gib(max(free, 0))} GiB is free.")


def load_weights(device_index: int, weights: int) -> int | None:
    """The rank's weights come out of memory the OS has not handed to anything else: page cache the kernel has not
    dropped yet is not there for the GPU (NVIDIA's advice on Sparks: drop it before starting vLLM). Returns the free
    memory found before the load (None without the memory model): the load itself reads the shards through the page
    cache, and those pages are the weights on their way in, not memory taken from the KV cache (:func:`allocate`)."""
    fields = node_meminfo()
    if fields is None:
        return None
    if fields["MemFree"] < weights:
        raise out_of_memory(device_index, weights, fields["MemFree"], fields["MemTotal"])
    return fields["MemFree"]


def kv_cache_memory(requested: int, weights: int, profile: int = PROFILE_BYTES) -> int:
    """Bytes left for the KV cache once the weights and the profile run are counted against the budget; ValueError in
    vLLM's words when nothing is left."""
    available = requested - weights - profile
    if available <= 0:
        raise ValueError("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                         "initializing the engine.")
    return available


def allocate(device_index: int, requested: int, weights: int = 0, free_before_load: int | None = None) -> None:
    """The KV cache (and what the profile run holds) after the rank's WEIGHTS: the whole budget REQUESTED must have
    been free before the load (FREE_BEFORE_LOAD, from :func:`load_weights`; the node's free memory now without it),
    else CUDA runs out of memory allocating the rest."""
    fields = node_meminfo()
    if fields is None:
        return
    free = fields["MemFree"] if free_before_load is None else free_before_load
    if free >= requested:
        return
    raise out_of_memory(device_index, requested - weights, free - weights, fields["MemTotal"])


def format_gib(num_bytes: int) -> str:
    return f"{round(num_bytes / GiB_bytes, 2)}"


def request_memory(device: str, free: int, total: int, utilization: float) -> int:
    """Bytes this worker may use; ValueError in vLLM's words when less than that is free at start-up."""
    requested = math.ceil(total * utilization)
    if free < requested:
        raise ValueError(
            f"Free memory on device {device} ({format_gib(free)}/{format_gib(total)} GiB) on startup is less than "
            f"desired GPU memory utilization ({utilization}, {format_gib(requested)} GiB). Decrease GPU memory "
            "utilization or reduce GPU memory used by other processes.")
    return requested
