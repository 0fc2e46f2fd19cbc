# SPDX-License-Identifier: Apache-2.0
"""Capability markers of model classes (vLLM's ``interfaces.py``, without torch)."""

from __future__ import annotations

from typing import ClassVar, Literal

MultiModalEmbeddings = list


class SupportsPP:
    supports_pp: ClassVar[Literal[True]] = True


class SupportsLoRA:
    supports_lora: ClassVar[Literal[True]] = True


class SupportsMultiModal:
    supports_multimodal: ClassVar[Literal[True]] = True


class HasInnerState:
    has_inner_state: ClassVar[Literal[True]] = True


class IsHybrid:
    is_hybrid: ClassVar[Literal[True]] = True


class MixtureOfExperts:
    is_mixture_of_experts: ClassVar[Literal[True]] = True
    num_logical_experts: int = 0
    num_routed_experts: int = 0


class SupportsMTP:
    supports_mtp: ClassVar[Literal[True]] = True


def _require_is_multimodal(is_multimodal):
    if is_multimodal is None:
        raise ValueError("`embed_input_ids` now requires `is_multimodal` arg, "
                         "please update your model runner according to "
                         "https://github.com/vllm-project/vllm/pull/16229.")
    return is_multimodal
