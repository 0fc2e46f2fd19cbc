# SPDX-License-Identifier: Apache-2.0
"""Reasoning parsers: split a thinking model's output into ``reasoning`` and ``content``."""

from __future__ import annotations

from vllm.version import __version_tuple__

_REASONING_PARSERS = [
    "deepseek_r1", "deepseek_v3", "ernie45", "glm45", "openai_gptoss", "granite", "holo2",
    "hunyuan_a13b", "kimi_k2", "minimax_m2", "minimax_m2_append_think", "mistral",
    *(["nemotron_v3"] if __version_tuple__ >= (0, 17) else []),
    "olmo3", "qwen3", "seed_oss", "step3",
    *(["step3p5"] if __version_tuple__ >= (0, 17) else []),
]

THINK_START, THINK_END = "<think>", "</think>"


class ReasoningParserManager:
    @classmethod
    def list_registered(cls) -> list[str]:
        return list(_REASONING_PARSERS)


def split_reasoning(text: str) -> tuple[str | None, str | None]:
    """Qwen3-style split: everything before ``</think>`` is reasoning (the opening
    ``<think>`` may be in the prompt, as Qwen3.5's chat template puts it there)."""
    if THINK_END not in text:
        if text.startswith(THINK_START):
            return text[len(THINK_START):].strip("\n") or None, None
        return None, text
    reasoning, _, content = text.partition(THINK_END)
    reasoning = reasoning.removeprefix(THINK_START).strip("\n")
    return reasoning or None, content.lstrip("\n") or None
