# SPDX-License-Identifier: Apache-2.0
"""State dtype / shape calculators of the mamba-style (linear attention) layers."""


class MambaStateDtypeCalculator:
    @classmethod
    def gated_delta_net_state_dtype(cls, model_dtype: str, mamba_cache_dtype: str) -> tuple[str, str]:
        dtype = "bfloat16" if model_dtype == "auto" else model_dtype
        return dtype, dtype


class MambaStateShapeCalculator:
    @classmethod
    def gated_delta_net_state_shape(cls, tp_world_size: int, num_k_heads: int, num_v_heads: int,
                                    head_k_dim: int, head_v_dim: int, conv_kernel_size: int):
        conv_dim = head_k_dim * num_k_heads * 2 + head_v_dim * num_v_heads
        conv_state_shape = (conv_dim // tp_world_size, conv_kernel_size - 1)
        temporal_state_shape = (num_v_heads // tp_world_size, head_k_dim, head_v_dim)
        return conv_state_shape, temporal_state_shape
