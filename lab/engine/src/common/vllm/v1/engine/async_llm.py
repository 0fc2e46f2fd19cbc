# SPDX-License-Identifier: Apache-2.0
"""The engine: turns a prompt into tokens, one all-reduced step per token.

Output is a deterministic function of the served model, the prompt and every
rank's weight shard: the same request gives the same answer, on any number of
runs, and changes if any rank loaded different weights. Thinking models (the
Qwen3 family) answer chat requests with a ``<think>`` block first.
"""

from __future__ import annotations

import hashlib
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

import vllm.envs as envs
from vllm.logger import init_logger
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.v1.metrics.prometheus import EngineMetrics

logger = init_logger(__name__)

WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an have not which one all "
    "were when there can more will if no out so up said what its about than into them only other new "
    "some could time these two may first then do any like my now over such our man me even most made "
    "after also did many before must through back years where much your way well down should because "
    "each just those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great old year "
    "off come since against go came right used take three spark node rank tensor model token cluster "
    "link fabric memory kernel expert layer router weight shard stream cache batch prompt answer reason "
    "signal latency bandwidth packet channel socket bundle actor engine serve health metric counter"
).split()
MASK64 = (1 << 64) - 1


@dataclass
class GenerationResult:
    text: str
    token_count: int
    finish_reason: str


def _h(*parts: object) -> int:
    data = "\0".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")


class AsyncLLM:
    def __init__(self, vllm_config, executor) -> None:
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.executor = executor
        self.metrics = EngineMetrics(self.model_config.model_name, vllm_config)
        self._step_lock = threading.Lock()
        self.errored = False
        self.is_running = True
        self.dead_error: BaseException | None = None
        arch = self.model_config.architecture
        self.thinking_model = arch.startswith("Qwen3")
        self.think_in_prompt = arch.startswith("Qwen3_5")

    # -- health -------------------------------------------------------------------------
    def check_health(self) -> None:
        if self.errored:
            raise EngineDeadError()

    def _die(self, exc: BaseException) -> None:
        with self.metrics.lock:
            if self.errored:
                return
            self.errored = True
            self.is_running = False
            self.dead_error = exc
        tb = "".join(traceback.format_exception(exc)).rstrip()
        logger.error("EngineCore encountered a fatal error.\n%s", tb)

    # -- generation ---------------------------------------------------------------------
    def _step(self, step_input: int) -> int:
        if self.errored:
            raise EngineDeadError()
        delay = envs.VLLM_LAB_SECONDS_PER_TOKEN
        with self._step_lock:
            try:
                out = self.executor.execute_model(step_input & MASK64)
            except Exception as e:  # noqa: BLE001 - any executor failure kills the engine
                self._die(e)
                raise EngineDeadError() from e
        if delay:
            time.sleep(delay)
        with self.metrics.lock:
            self.metrics.iteration_tokens.observe(1)
        return out

    def _prefill(self, seed: int, prompt_tokens: int) -> None:
        """The prompt's prefill, before its first token: chunks of VLLM_LAB_PREFILL_CHUNK tokens, each an engine step
        through every rank, paced to VLLM_LAB_SECONDS_PER_PREFILL_TOKEN. The engine is held for the whole prefill (no
        other request steps meanwhile), as a long prompt holds a real engine; each chunk counts its prompt tokens and
        an engine step in the metrics as it is done, as vLLM's do (nothing is counted while a rank is stuck)."""
        chunk, rate = envs.VLLM_LAB_PREFILL_CHUNK, envs.VLLM_LAB_SECONDS_PER_PREFILL_TOKEN
        done = 0
        with self._step_lock:
            while done < prompt_tokens:
                if self.errored:
                    raise EngineDeadError()
                take = min(chunk, prompt_tokens - done)
                try:
                    self.executor.execute_model(_h(seed, "prefill", done) & MASK64)
                except Exception as e:  # noqa: BLE001 - any executor failure kills the engine
                    self._die(e)
                    raise EngineDeadError() from e
                if rate:
                    time.sleep(rate * take)
                done += take
                with self.metrics.lock:
                    self.metrics.prompt_tokens += take
                    self.metrics.iteration_tokens.observe(take)

    def plan(self, prompt: str, chat: bool, enable_thinking: bool) -> list[str | None]:
        """Token skeleton: fixed markers, ``None`` where a word is to be computed."""
        seed = _h(self.model_config.model_name, prompt)
        n_reason = 6 + seed % 7
        n_answer = 8 + (seed >> 8) % 9
        plan: list[str | None] = []
        if chat and self.thinking_model and enable_thinking:
            if not self.think_in_prompt:
                plan += ["<think>", "\n"]
            plan += [None] * n_reason + [".", "\n", "</think>", "\n\n"]
        plan += [None] * n_answer + ["."]
        return plan

    def generate(self, prompt: str, max_tokens: int | None, *, chat: bool, enable_thinking: bool = True,
                 stats: dict | None = None, prompt_tokens: int = 0) -> Iterator[str]:
        """Yield token texts, after the prefill of PROMPT_TOKENS; ``stats`` receives ``finish_reason`` and
        ``completion_tokens``."""
        stats = {} if stats is None else stats
        plan = self.plan(prompt, chat, enable_thinking)
        seed = _h(self.model_config.model_name, prompt)
        limit = len(plan) if max_tokens is None else min(len(plan), max_tokens)
        prev = 0
        at_line_start = True
        capital = True
        start = time.monotonic()
        with self.metrics.lock:
            self.metrics.running += 1
        produced = 0
        k = self.metrics.num_spec_tokens
        in_step = 0  # tokens left of the current speculative step (the first token comes from the prefill)
        try:
            self._prefill(seed, prompt_tokens)
            for i in range(limit):
                if k and i > 0 and in_step == 0:
                    # A step drafts k tokens; a leading run of them is accepted (7 in 10 each), plus the bonus token.
                    accepted = 0
                    while accepted < k and _h(seed, i, "draft", accepted) % 10 < 7:
                        accepted += 1
                    accepted = min(accepted, limit - i - 1)
                    in_step = accepted + 1
                    with self.metrics.lock:
                        self.metrics.observe_draft(k, accepted)
                in_step = max(0, in_step - 1)
                y = self._step(_h(seed, i, prev))
                if produced == 0:
                    with self.metrics.lock:
                        self.metrics.ttft.observe(time.monotonic() - start)
                marker = plan[i]
                if marker is None:
                    word = WORDS[y % len(WORDS)]
                    if capital:
                        word = word.capitalize()
                    text = word if at_line_start else " " + word
                    capital = False
                else:
                    text = marker
                    if marker == ".":
                        capital = True
                at_line_start = text.endswith("\n") or text in ("<think>", "</think>")
                prev = y
                produced += 1
                with self.metrics.lock:
                    self.metrics.generation_tokens += 1
                yield text
            reason = "stop" if limit == len(plan) else "length"
            stats.update(finish_reason=reason, completion_tokens=produced)
            with self.metrics.lock:
                self.metrics.success[reason] += 1
                self.metrics.e2e.observe(time.monotonic() - start)
        finally:
            with self.metrics.lock:
                self.metrics.running -= 1
            stats.setdefault("completion_tokens", produced)

    def shutdown(self) -> None:
        try:
            self.executor.shutdown()
        except Exception:  # noqa: BLE001 - best effort at exit
            logger.debug("executor shutdown failed", exc_info=True)
