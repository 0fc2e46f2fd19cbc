# SPDX-License-Identifier: Apache-2.0
"""Engine configuration (ModelConfig, ParallelConfig, VllmConfig).

As in vLLM, ``ModelConfig`` and ``ParallelConfig`` are pydantic dataclasses: an
error raised while resolving the model (for example an architecture that fails
inspection) surfaces as ``pydantic_core._pydantic_core.ValidationError: 1
validation error for ModelConfig`` with vLLM's message inside.
"""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Any, Literal, Optional

import vllm.envs as envs
from vllm.logger import init_logger

try:
    from pydantic import ConfigDict
    from pydantic.dataclasses import dataclass as _pdc

    def config_dataclass(cls):
        return _pdc(config=ConfigDict(arbitrary_types_allowed=True))(cls)
except ImportError:  # pragma: no cover - every lab image has pydantic (vLLM requires it)
    from dataclasses import dataclass as config_dataclass  # type: ignore[assignment]

logger = init_logger(__name__)

DistributedExecutorBackend = Literal["ray", "mp", "uni", "external_launcher"]


def _text_config(hf_config: Any) -> Any:
    return getattr(hf_config, "text_config", None) or hf_config


@config_dataclass
class ModelConfig:
    model: str = "Qwen/Qwen3-0.6B"
    tokenizer: Optional[str] = None
    trust_remote_code: bool = False
    dtype: str = "auto"
    seed: Optional[int] = None
    revision: Optional[str] = None
    max_model_len: Optional[int] = None
    quantization: Optional[str] = None
    enforce_eager: bool = False
    served_model_name: Optional[list] = None
    hf_overrides: Optional[dict] = None
    download_dir: Optional[str] = None

    def __post_init__(self) -> None:
        from vllm.model_executor.models.registry import ModelRegistry
        from vllm.transformers_utils.config import get_config, resolve_model_dir

        self.model_dir = resolve_model_dir(self.model, self.revision, self.download_dir)
        self.hf_config = get_config(self.model_dir, self.trust_remote_code, self.hf_overrides)
        self.hf_text_config = _text_config(self.hf_config)
        architectures = list(getattr(self.hf_config, "architectures", None) or [])
        self.model_info, self.architecture = ModelRegistry.inspect_model_cls(architectures)
        logger.info("Resolved architecture: %s", self.architecture)
        quant = getattr(self.hf_config, "quantization_config", None)
        hf_quant = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
        if self.quantization is not None and hf_quant is not None and self.quantization != hf_quant:
            raise ValueError(f"Quantization method specified in the model config ({hf_quant}) does not "
                             f"match the quantization method specified in the `quantization` argument "
                             f"({self.quantization}).")
        self.quantization = self.quantization or hf_quant
        derived = getattr(self.hf_text_config, "max_position_embeddings", None) or 2048
        if self.max_model_len in (None, -1):
            self.max_model_len = int(derived)
        elif self.max_model_len > derived and not envs.VLLM_ALLOW_LONG_MAX_MODEL_LEN:
            raise ValueError(
                f"User-specified max_model_len ({self.max_model_len}) is greater than the derived "
                f"max_model_len (max_position_embeddings={derived} or model_max_length=None in model's "
                "config.json). To allow overriding this maximum, set the env var "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme "
                "caution. If the model uses relative position encoding (RoPE), positions exceeding "
                "derived_max_model_len lead to nan. If the model uses absolute position encoding, positions "
                "exceeding derived_max_model_len will cause a CUDA array out-of-bounds error.")
        logger.info("Using max model len %d", self.max_model_len)
        if not self.served_model_name:
            self.served_model_name = [self.model]

    @property
    def model_name(self) -> str:
        return self.served_model_name[0]


@config_dataclass
class ParallelConfig:
    pipeline_parallel_size: int = 1
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    distributed_executor_backend: Optional[DistributedExecutorBackend] = None
    master_addr: str = "127.0.0.1"
    master_port: int = 29501
    node_rank: int = 0
    nnodes: int = 1

    def __post_init__(self) -> None:
        self.world_size = self.pipeline_parallel_size * self.tensor_parallel_size
        if self.distributed_executor_backend is None and self.world_size > 1:
            if self.nnodes > 1:
                backend = "mp"
            elif envs.VLLM_LAB_NUM_GPUS < self.world_size:
                raise ValueError(
                    f"World size ({self.world_size}) is larger than the number of available GPUs "
                    f"({envs.VLLM_LAB_NUM_GPUS}) in this node. If this is intentional and you are using:\n"
                    "- ray, set '--distributed-executor-backend ray'.\n"
                    "- multiprocessing, set '--nnodes' appropriately.")
            else:
                backend = "mp"
            self.distributed_executor_backend = backend
        if self.distributed_executor_backend is None and self.world_size == 1:
            self.distributed_executor_backend = "uni"
        if self.distributed_executor_backend not in ("mp", "uni", "external_launcher") and self.nnodes > 1:
            raise ValueError("nnodes > 1 can only be set when distributed executor "
                             "backend is mp, uni or external_launcher.")
        if self.nnodes > 1 and self.world_size % self.nnodes:
            raise ValueError(f"world_size ({self.world_size}) must be divisible by nnodes ({self.nnodes})")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank ({self.node_rank}) must be in [0, nnodes={self.nnodes})")
        if self.data_parallel_size != 1:
            raise ValueError("the lab engine supports data_parallel_size=1 only")

    @property
    def use_ray(self) -> bool:
        return self.distributed_executor_backend == "ray"

    @property
    def local_world_size(self) -> int:
        return self.world_size // self.nnodes


@config_dataclass
class VllmConfig:
    model_config: Any = None
    parallel_config: Any = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float = 0.9
    speculative_config: Optional[dict] = None
    reasoning_parser: str = ""
    extra: dict = field(default_factory=dict)
