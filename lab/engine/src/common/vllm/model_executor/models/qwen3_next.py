# SPDX-License-Identifier: Apache-2.0
"""Qwen3-Next: hybrid Gated DeltaNet / gated attention MoE (lab stand-in)."""

from vllm.model_executor.layers.mamba.mamba_utils import (
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)

from .interfaces import HasInnerState, IsHybrid, MixtureOfExperts, SupportsLoRA, SupportsPP
from .qwen2_moe import Qwen2MoeMLP as Qwen3NextMLP
from .utils import CPUStandInForCausalLM, maybe_prefix


class Qwen3NextSparseMoeBlock:
    def __init__(self, vllm_config=None, prefix: str = "") -> None:
        self.prefix = prefix
        self.shared_expert = Qwen3NextMLP()


class Qwen3NextGatedDeltaNet:
    def __init__(self, config=None, prefix: str = "") -> None:
        self.prefix = prefix
        self.state_dtype = MambaStateDtypeCalculator.gated_delta_net_state_dtype("auto", "auto")


class Qwen3NextAttention:
    def __init__(self, config=None, prefix: str = "") -> None:
        self.prefix = prefix


class Qwen3NextDecoderLayer:
    def __init__(self, vllm_config=None, layer_type: str = "full_attention", prefix: str = "") -> None:
        self.layer_type = layer_type
        self.prefix = prefix


class Qwen3NextModel:
    def __init__(self, *, vllm_config=None, prefix: str = "") -> None:
        self.prefix = maybe_prefix(prefix, "model")


class QwenNextMixtureOfExperts(MixtureOfExperts):
    def set_moe_parameters(self) -> None:
        self.num_routed_experts = 0


class Qwen3NextForCausalLM(CPUStandInForCausalLM, HasInnerState, SupportsLoRA, SupportsPP, IsHybrid,
                           QwenNextMixtureOfExperts):
    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        return MambaStateShapeCalculator.gated_delta_net_state_shape(1, 1, 1, 1, 1, 4)
