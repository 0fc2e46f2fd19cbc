# SPDX-License-Identifier: Apache-2.0
"""Engine arguments: the ``vllm serve`` flags, spelled and typed as vLLM spells them.

Flags are grouped as in vLLM (ModelConfig, LoadConfig, ParallelConfig, CacheConfig,
...). Booleans use ``argparse.BooleanOptionalAction`` (``--x`` / ``--no-x``), lists
use ``nargs="+"``, JSON options take a JSON string, exactly like vLLM's generated
parser. Flags the lab does not know are rejected by argparse (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field, fields
from typing import Any

DISTRIBUTED_EXECUTOR_BACKENDS = ["external_launcher", "mp", "ray", "uni"]
CACHE_DTYPES = ["auto", "bfloat16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]
MODEL_DTYPES = ["auto", "bfloat16", "float", "float16", "float32", "half"]
LOAD_FORMATS = ["auto", "bitsandbytes", "dummy", "fastsafetensors", "gguf", "mistral", "npcache",
                "pt", "runai_streamer", "runai_streamer_sharded", "safetensors", "sharded_state",
                "tensorizer"]


def human_readable_int(value: str) -> int:
    """Parse '1k' (1000), '1K' (1024), '25.6k' (25600), '2M', or a plain integer."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        if suffix in "kmgt":
            return int(float(number) * 10 ** (3 * ("kmgt".index(suffix) + 1)))
        try:
            return int(number) * 2 ** (10 * ("KMGT".index(suffix) + 1))
        except ValueError as e:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. "
                f"Did you mean to use {number}{suffix.lower()} instead?") from e
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    """Like human_readable_int; also accepts -1 or 'auto' for auto-detection."""
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


def optional_type(return_type):
    def _optional_type(val: str):
        if val == "" or val == "None":
            return None
        return return_type(val)
    return _optional_type


def _json(val: str) -> Any:
    try:
        return json.loads(val)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"invalid JSON: {e}") from e


BOOL = argparse.BooleanOptionalAction


@dataclass
class EngineArgs:
    model: str = "Qwen/Qwen3-0.6B"
    served_model_name: list[str] | None = None
    tokenizer: str | None = None
    trust_remote_code: bool = False
    dtype: str = "auto"
    seed: int | None = None
    revision: str | None = None
    max_model_len: int | None = None
    quantization: str | None = None
    enforce_eager: bool = False
    download_dir: str | None = None
    load_format: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    distributed_executor_backend: str | None = None
    master_addr: str = "127.0.0.1"
    master_port: int = 29501
    nnodes: int = 1
    node_rank: int = 0
    enable_expert_parallel: bool = False
    gpu_memory_utilization: float = 0.9
    kv_cache_dtype: str = "auto"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    reasoning_parser: str = ""
    speculative_config: dict | None = None
    hf_overrides: dict | None = None
    limit_mm_per_prompt: dict | None = None
    compilation_config: dict | None = None
    async_scheduling: bool | None = None
    disable_log_stats: bool = False
    extra: dict = field(default_factory=dict)

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        g = parser.add_argument_group(title="ModelConfig")
        g.add_argument("--model", type=str, default=EngineArgs.model)
        g.add_argument("--tokenizer", type=optional_type(str), default=None)
        g.add_argument("--trust-remote-code", action=BOOL, default=False)
        g.add_argument("--dtype", type=str, default="auto", choices=MODEL_DTYPES)
        g.add_argument("--seed", type=optional_type(int), default=None)
        g.add_argument("--revision", type=optional_type(str), default=None)
        g.add_argument("--max-model-len", type=optional_type(human_readable_int_or_auto), default=None)
        g.add_argument("--quantization", "-q", type=optional_type(str), default=None)
        g.add_argument("--enforce-eager", action=BOOL, default=False)
        g.add_argument("--served-model-name", type=str, nargs="+", default=None)
        g.add_argument("--hf-overrides", type=_json, default=None)
        g.add_argument("--generation-config", type=str, default="auto")

        g = parser.add_argument_group(title="LoadConfig")
        g.add_argument("--load-format", type=str, default="auto")
        g.add_argument("--download-dir", type=optional_type(str), default=None)

        g = parser.add_argument_group(title="StructuredOutputsConfig")
        g.add_argument("--reasoning-parser", type=str, default="")

        g = parser.add_argument_group(title="ParallelConfig")
        g.add_argument("--distributed-executor-backend", type=optional_type(str), default=None,
                       metavar="{" + ",".join(DISTRIBUTED_EXECUTOR_BACKENDS) + "}")
        g.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
        g.add_argument("--master-addr", type=str, default="127.0.0.1")
        g.add_argument("--master-port", type=int, default=29501)
        g.add_argument("--nnodes", "-n", type=int, default=1)
        g.add_argument("--node-rank", "-r", type=int, default=0)
        g.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
        g.add_argument("--data-parallel-size", "-dp", type=int, default=1)
        g.add_argument("--enable-expert-parallel", action=BOOL, default=False)

        g = parser.add_argument_group(title="CacheConfig")
        g.add_argument("--gpu-memory-utilization", type=float, default=0.9)
        g.add_argument("--kv-cache-dtype", type=str, default="auto", choices=CACHE_DTYPES)
        g.add_argument("--enable-prefix-caching", action=BOOL, default=None)
        g.add_argument("--kv-cache-memory-bytes", type=optional_type(human_readable_int), default=None)

        g = parser.add_argument_group(title="MultiModalConfig")
        g.add_argument("--limit-mm-per-prompt", type=_json, default=None)

        g = parser.add_argument_group(title="SchedulerConfig")
        g.add_argument("--max-num-batched-tokens", type=optional_type(human_readable_int), default=None)
        g.add_argument("--max-num-seqs", type=optional_type(int), default=None)
        g.add_argument("--enable-chunked-prefill", action=BOOL, default=None)
        g.add_argument("--async-scheduling", action=BOOL, default=None)

        g = parser.add_argument_group(title="VllmConfig")
        g.add_argument("--speculative-config", type=optional_type(_json), default=None)
        g.add_argument("--compilation-config", "-O", type=_json, default=None)

        g = parser.add_argument_group(title="ObservabilityConfig")
        g.add_argument("--disable-log-stats", action="store_true", default=False)
        return parser

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "EngineArgs":
        names = {f.name for f in fields(cls)} - {"extra"}
        kwargs = {n: getattr(args, n) for n in names if hasattr(args, n)}
        return cls(**kwargs)


class AsyncEngineArgs(EngineArgs):
    pass
