# SPDX-License-Identifier: Apache-2.0
"""Qwen3-VL (lab stand-in: no vision tower, same names)."""

from .interfaces import SupportsLoRA, SupportsMultiModal, SupportsPP
from .utils import CPUStandInForCausalLM


class Qwen3_VisionTransformer:
    def __init__(self, vision_config=None, prefix: str = "") -> None:
        self.prefix = prefix


class Qwen3VLProcessingInfo:
    def __init__(self, ctx=None) -> None:
        self.ctx = ctx


class Qwen3VLDummyInputsBuilder:
    pass


class Qwen3VLMultiModalProcessor:
    pass


class Qwen3VLForConditionalGeneration(CPUStandInForCausalLM, SupportsMultiModal, SupportsLoRA, SupportsPP):
    pass
