# SPDX-License-Identifier: Apache-2.0
"""Token counting and the Qwen ChatML chat template (no BPE: words and marks are tokens)."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"<\|[a-z_]+\|>|</?think>|\w+|[^\w\s]|\n")


def count_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def _content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def apply_chat_template(messages: list[dict], *, add_generation_prompt: bool = True,
                        enable_thinking: bool = True, think_in_prompt: bool = False) -> str:
    """Qwen3 / Qwen3.5 ChatML. Qwen3.5's template opens ``<think>`` in the prompt;
    with ``enable_thinking=False`` both close an empty think block in the prompt."""
    out = []
    for m in messages:
        out.append(f"<|im_start|>{m.get('role', 'user')}\n{_content_text(m.get('content'))}<|im_end|>\n")
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
        if not enable_thinking:
            out.append("<think>\n\n</think>\n\n")
        elif think_in_prompt:
            out.append("<think>\n")
    return "".join(out)
