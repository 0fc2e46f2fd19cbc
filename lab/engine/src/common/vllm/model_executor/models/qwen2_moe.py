# SPDX-License-Identifier: Apache-2.0
"""Qwen2-MoE (lab stand-in: same module and class names as vLLM's)."""

from .interfaces import MixtureOfExperts, SupportsLoRA, SupportsPP
from .utils import CPUStandInForCausalLM


class Qwen2MoeMLP:
    def __init__(self, hidden_size: int = 0, intermediate_size: int = 0, hidden_act: str = "silu",
                 quant_config=None, reduce_results: bool = True, prefix: str = "") -> None:
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size


class Qwen2MoeForCausalLM(CPUStandInForCausalLM, SupportsPP, SupportsLoRA, MixtureOfExperts):
    pass
