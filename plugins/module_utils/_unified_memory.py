# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unified memory on a DGX Spark: make room right before the engine starts, and check there is enough.

A GB10's GPU memory is the node's memory. vLLM takes total x gpu_memory_utilization at start-up and refuses to start
when less is free ("Free memory on device ... on startup is less than desired GPU memory utilization"); the page cache
lives in the same memory, and weights just written by model_sync (or an image just loaded by image_sync) sit there
when the engine starts. NVIDIA's advice is to drop the page cache first (`sync; echo 3 > /proc/sys/vm/drop_caches`,
root only); evicting the model's own files (posix_fadvise(POSIX_FADV_DONTNEED)) needs no privilege.
"""

from __future__ import annotations

import math
import os
import typing as t

GIB = 1 << 30
DROP_CACHES = "/proc/sys/vm/drop_caches"


def read_meminfo(path: str = "/proc/meminfo") -> t.Dict[str, int]:
    """/proc/meminfo's fields in bytes."""
    fields = {}
    with open(path, encoding="ascii") as fh:
        for line in fh:
            name, _sep, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                fields[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    for name in ("MemTotal", "MemFree"):
        if name not in fields:
            raise ValueError(f"{path} has no {name} line")
    fields.setdefault("MemAvailable", fields["MemFree"])
    fields.setdefault("Cached", 0)
    return fields


def drop_caches(path: str = DROP_CACHES) -> t.Optional[str]:
    """sync, then drop the clean page cache, dentries and inodes; None when done, else why not."""
    os.sync()
    try:
        with open(path, "w", encoding="ascii") as fh:
            fh.write("3\n")
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return None


def evict(paths: t.Iterable[str]) -> t.Dict[str, int]:
    """Write back and evict every regular file under PATHS from the page cache (no privilege needed)."""
    files = size = 0
    for top in paths:
        for root, _dirs, names in os.walk(top):
            for name in names:
                path = os.path.join(root, name)
                try:
                    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                except OSError:
                    continue
                try:
                    if not os.path.isfile(path):
                        continue
                    os.fdatasync(fd)  # dirty pages are not evicted: write them back first
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    files += 1
                    size += os.fstat(fd).st_size
                finally:
                    os.close(fd)
    return {"files": files, "bytes": size}


def gib(num_bytes: int) -> float:
    return round(num_bytes / GIB, 1)


def verdict(mem: t.Mapping[str, int], utilization: float) -> t.Dict[str, t.Any]:
    """What the engine will ask for against what is free now.

    Free means MemFree: memory the OS has not handed to anything, page cache included. vLLM's start-up guard on a
    GB10 reads the OS's figure, and its weights and KV cache are allocated from this memory right after."""
    total, free = mem["MemTotal"], mem["MemFree"]
    requested = math.ceil(total * utilization)
    return {"total": total, "free": free, "available": mem["MemAvailable"], "cached": mem["Cached"],
            "requested": requested, "utilization": utilization, "enough": free >= requested,
            "max_utilization": math.floor(free / total * 100) / 100 if total else 0.0}


def shortfall_message(host: str, figures: t.Mapping[str, t.Any], made_room: str) -> str:
    return (f"{host}: {gib(figures['free'])} GiB of {gib(figures['total'])} GiB unified memory is free right before "
            f"the engine starts ({made_room}; {gib(figures['cached'])} GiB still page cache), but "
            f"--gpu-memory-utilization {figures['utilization']} needs {gib(figures['requested'])} GiB: vLLM would refuse "
            "to start (Free memory on device ... is less than desired GPU memory utilization). Something other than "
            "the model's page cache holds the memory: free it (see `free -g` and the processes on the node), or set "
            f"vllm_serve_gpu_memory_utilization to at most {figures['max_utilization']}.")
