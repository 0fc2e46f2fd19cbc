# SPDX-License-Identifier: Apache-2.0
"""Environment variables read by vLLM (the subset the lab engine honours).

Like vLLM's own ``vllm.envs``, values are read lazily on attribute access, so a
test or a launcher can change ``os.environ`` before the engine looks.
"""

from __future__ import annotations

import os
from typing import Any, Callable


def _bool(name: str, default: str = "0") -> Callable[[], bool]:
    return lambda: os.environ.get(name, default).strip().lower() in ("1", "true")


environment_variables: dict[str, Callable[[], Any]] = {
    "VLLM_HOST_IP": lambda: os.environ.get("VLLM_HOST_IP", ""),
    "VLLM_PORT": lambda: int(os.environ["VLLM_PORT"]) if "VLLM_PORT" in os.environ else None,
    "VLLM_API_KEY": lambda: os.environ.get("VLLM_API_KEY", None),
    "VLLM_CONFIGURE_LOGGING": lambda: int(os.environ.get("VLLM_CONFIGURE_LOGGING", "1")),
    "VLLM_LOGGING_LEVEL": lambda: os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper(),
    "VLLM_LOGGING_PREFIX": lambda: os.environ.get("VLLM_LOGGING_PREFIX", ""),
    "VLLM_CACHE_ROOT": lambda: os.path.expanduser(
        os.environ.get("VLLM_CACHE_ROOT", os.path.join(
            os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "vllm"))),
    "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": _bool("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH"),
    "VLLM_SERVER_DEV_MODE": _bool("VLLM_SERVER_DEV_MODE"),
    "VLLM_RAY_PER_WORKER_GPUS": lambda: float(os.environ.get("VLLM_RAY_PER_WORKER_GPUS", "1.0")),
    "VLLM_ENGINE_READY_TIMEOUT_S": lambda: int(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600")),
    "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": lambda: int(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "5")),
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": _bool("VLLM_ALLOW_LONG_MAX_MODEL_LEN"),
    "VLLM_USE_MODELSCOPE": _bool("VLLM_USE_MODELSCOPE"),
    "HF_HUB_OFFLINE": _bool("HF_HUB_OFFLINE"),
    # --- lab-only knobs (no GPU here) -------------------------------------------------
    # Seconds "loading weights" takes per GB of the model directory (reads are real;
    # the rest of the time is paced to this rate so readiness probing is real).
    "VLLM_LAB_LOAD_SECONDS_PER_GB": lambda: float(os.environ.get("VLLM_LAB_LOAD_SECONDS_PER_GB", "20")),
    # GPUs a lab node pretends to have (a DGX Spark has one GB10).
    "VLLM_LAB_NUM_GPUS": lambda: int(os.environ.get("VLLM_LAB_NUM_GPUS", "1")),
    # Seconds of "compute" per generated token, on top of the rank round-trip.
    "VLLM_LAB_SECONDS_PER_TOKEN": lambda: float(os.environ.get("VLLM_LAB_SECONDS_PER_TOKEN", "0")),
    # Seconds of "compute" per prompt token of a prefill (0.0005: 2000 tokens/s, a 20k-token prompt holds the engine
    # 10 s), and the prompt tokens one engine step prefills (vLLM's chunked prefill, max_num_batched_tokens).
    "VLLM_LAB_SECONDS_PER_PREFILL_TOKEN": lambda: float(os.environ.get("VLLM_LAB_SECONDS_PER_PREFILL_TOKEN", "0.0005")),
    "VLLM_LAB_PREFILL_CHUNK": lambda: max(1, int(os.environ.get("VLLM_LAB_PREFILL_CHUNK", "2048"))),
}


def __getattr__(name: str) -> Any:
    if name in environment_variables:
        return environment_variables[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return list(environment_variables.keys())
