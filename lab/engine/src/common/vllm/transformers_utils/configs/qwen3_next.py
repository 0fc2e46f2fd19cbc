# SPDX-License-Identifier: Apache-2.0
"""Qwen3-Next model configuration."""

from vllm.transformers_utils.configs._base import PretrainedConfig


class Qwen3NextConfig(PretrainedConfig):
    model_type = "qwen3_next"

    def __init__(self, vocab_size=151936, hidden_size=2048, num_hidden_layers=48, num_attention_heads=16,
                 num_key_value_heads=2, head_dim=256, num_experts=512, num_experts_per_tok=10,
                 moe_intermediate_size=512, shared_expert_intermediate_size=512, full_attention_interval=4,
                 max_position_embeddings=32768, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.num_experts = num_experts
        self.num_experts_per_tok = num_experts_per_tok
        self.moe_intermediate_size = moe_intermediate_size
        self.shared_expert_intermediate_size = shared_expert_intermediate_size
        self.full_attention_interval = full_attention_interval
        self.max_position_embeddings = max_position_embeddings
        super().__init__(**kwargs)


__all__ = ["Qwen3NextConfig"]
