# SPDX-License-Identifier: Apache-2.0
"""Weight files: find them, check them, stream them to the model.

The lab's model directories carry ``*.safetensors`` shards (a real safetensors
header + payload) and ``model.safetensors.index.json``; ``lab_manifest.json``
lists each file's sha256. Loading reads every byte (so a missing or corrupt
file fails here, as it would on a Spark) and is paced to
``VLLM_LAB_LOAD_SECONDS_PER_GB`` so it takes time proportional to the size.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import vllm.envs as envs
from vllm.logger import init_logger

logger = init_logger(__name__)


def default_weight_loader(param, loaded_weight) -> None:
    param.append(loaded_weight)


def maybe_remap_kv_scale_name(name: str, params_dict: dict) -> str | None:
    return name


def _read_safetensors_header(path: Path) -> dict:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise RuntimeError(f"Error while deserializing header: HeaderTooSmall ({path})")
        (n,) = struct.unpack("<Q", raw)
        header = f.read(n)
    try:
        return json.loads(header)
    except ValueError as e:
        raise RuntimeError(f"Error while deserializing header: InvalidHeaderDeserialization ({path})") from e


def safetensors_weights_iterator(model_dir: Path, rank: int = 0) -> Iterator[tuple[str, str]]:
    """Yield (tensor name, sha256 of the file holding it) for every tensor of the checkpoint."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise RuntimeError(f"Cannot find any model weights with `{model_dir}`")
    manifest_path = model_dir / "lab_manifest.json"
    manifest = json.loads(manifest_path.read_text())["files"] if manifest_path.exists() else {}
    total = sum(p.stat().st_size for p in files)
    rate = envs.VLLM_LAB_LOAD_SECONDS_PER_GB
    start = time.monotonic()
    done = 0
    for path in files:
        header = _read_safetensors_header(path)
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                done += len(chunk)
                # pace reads to the configured GB/s so loading time scales with size
                due = start + rate * done / 1e9
                if (delay := due - time.monotonic()) > 0:
                    time.sleep(delay)
        digest = h.hexdigest()
        want = manifest.get(path.name)
        if want is not None and want != digest:
            raise RuntimeError(f"Error while deserializing header: checksum mismatch for {path.name} "
                               f"(sha256 {digest}, manifest {want})")
        for name in sorted(k for k in header if k != "__metadata__"):
            yield name, digest
    logger.debug("read %d bytes of weights in %.2fs", total, time.monotonic() - start)
