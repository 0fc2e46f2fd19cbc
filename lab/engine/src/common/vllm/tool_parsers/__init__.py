# SPDX-License-Identifier: Apache-2.0
"""Tool-call parser names (``--tool-call-parser``)."""

from __future__ import annotations

from vllm.version import __version_tuple__

_TOOL_PARSERS = [
    "deepseek_v3", "deepseek_v31", "deepseek_v32", "ernie45", "glm45", "glm47", "granite", "hermes",
    "hunyuan_a13b", "internlm", "jamba", "kimi_k2", "llama3_json", "llama4_json", "llama4_pythonic",
    "longcat", "minimax_m2", "minimax", "mistral", "olmo3", "openai", "phi4_mini_json", "pythonic",
    "qwen3_coder", "qwen3_xml", "seed_oss", "step3",
    *(["step3p5"] if __version_tuple__ >= (0, 17) else []),
    "xlam", "gigachat3", "functiongemma",
]


class ToolParserManager:
    @classmethod
    def list_registered(cls) -> list[str]:
        return list(_TOOL_PARSERS)
