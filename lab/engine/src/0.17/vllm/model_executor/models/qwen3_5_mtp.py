# SPDX-License-Identifier: Apache-2.0
"""Multi-token-prediction (MTP) draft heads of Qwen3.5 / Qwen3.5-MoE (``--speculative-config
'{"method": "qwen3_5_mtp", ...}'``), lab stand-in."""

from .interfaces import SupportsMTP
from .qwen3_5 import Qwen3_5DecoderLayer
from .utils import CPUStandInForCausalLM


class Qwen3_5MultiTokenPredictor:
    def __init__(self, *, vllm_config=None, prefix: str = "") -> None:
        self.layers = [Qwen3_5DecoderLayer(vllm_config, "full_attention", f"{prefix}.layers.0")]


class Qwen3_5MTP(CPUStandInForCausalLM, SupportsMTP):
    pass


class Qwen3_5MoeMTP(Qwen3_5MTP):
    pass
