# SPDX-License-Identifier: Apache-2.0
"""The lab's stand-in for CUDA's memory query on a GB10 and vLLM's start-up memory guard.

A GB10 has no memory of its own: CUDA's total is the node's unified memory (about 121.7 GiB), and on this
shared-memory device (compute capability 12.1) vLLM 0.14.1 and 0.17.1 take the free figure from the OS
(``MemAvailable``, through psutil) rather than from CUDA. At start-up each worker requests
``total x gpu_memory_utilization`` and refuses to start when less is free, naming both figures.

The lab node keeps its unified-memory model in ``/run/dgxspark-lab/gpu/meminfo`` (``/proc/meminfo``'s format),
which a GPU container sees read-only at the same path. Without that file (a container without the GPU, or
a node whose model is not running) this stand-in has no memory figures and does not guard.
"""

from __future__ import annotations

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


def allocate(device_index: int, requested: int) -> None:
    """The weights and KV cache come out of memory the OS has not handed to anything else: page cache the kernel
    has not dropped yet is not there for the GPU (NVIDIA's advice on Sparks: drop it before starting vLLM)."""
    fields = node_meminfo()
    if fields is None or fields["MemFree"] >= requested:
        return
    raise OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate {format_gib(requested)} GiB. GPU {device_index} has a total capacity "
        f"of {format_gib(fields['MemTotal'])} GiB of which {format_gib(fields['MemFree'])} GiB is free.")


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
