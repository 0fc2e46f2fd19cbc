# SPDX-License-Identifier: Apache-2.0
"""Qwen3-MoE (``Qwen3MoeForCausalLM``), e.g. Qwen/Qwen3-30B-A3B (lab stand-in)."""

from .interfaces import MixtureOfExperts, SupportsLoRA, SupportsPP
from .qwen2_moe import Qwen2MoeMLP as Qwen3MoeMLP
from .utils import CPUStandInForCausalLM, maybe_prefix


class Qwen3MoeSparseMoeBlock:
    def __init__(self, vllm_config=None, prefix: str = "") -> None:
        self.prefix = maybe_prefix(prefix, "mlp")
        self.shared = Qwen3MoeMLP()


class Qwen3MoeForCausalLM(CPUStandInForCausalLM, SupportsPP, SupportsLoRA, MixtureOfExperts):
    packed_modules_mapping = {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
    }
