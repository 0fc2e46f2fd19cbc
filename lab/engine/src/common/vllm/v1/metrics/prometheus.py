# SPDX-License-Identifier: Apache-2.0
"""The engine's Prometheus metrics, with vLLM's names and labels (model_name, engine)."""

from __future__ import annotations

import threading

_E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                240.0, 480.0, 960.0, 1920.0, 7680.0]
# vLLM's iteration_tokens_total buckets (tokens an engine step processed).
_ITERATION_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
_TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]


class _Histogram:
    def __init__(self, buckets: list[float]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for i, b in enumerate(self.buckets):
            if value <= b:
                self.counts[i] += 1


class EngineMetrics:
    FINISH_REASONS = ("stop", "length", "abort", "error")

    def __init__(self, model_name: str, vllm_config=None) -> None:
        self.labels = f'engine="0",model_name="{model_name}"'
        self.lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.running = 0
        self.waiting = 0
        self.preemptions = 0
        self.success = dict.fromkeys(self.FINISH_REASONS, 0)
        self.e2e = _Histogram(_E2E_BUCKETS)
        self.ttft = _Histogram(_TTFT_BUCKETS)
        # One observation per engine step (a prefill chunk, a decode step): its count moves while the engine works.
        self.iteration_tokens = _Histogram(_ITERATION_BUCKETS)
        self.vllm_config = vllm_config
        # Speculative decoding, as vLLM counts it (vllm/v1/spec_decode/metrics.py), only with a speculative config:
        # per step of a request with drafts, one draft of k tokens of which `accepted` were accepted.
        spec = getattr(vllm_config, "speculative_config", None) or {}
        self.num_spec_tokens = int(spec.get("num_speculative_tokens") or 0) if isinstance(spec, dict) else 0
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted = 0
        self.spec_accepted_per_pos = [0] * self.num_spec_tokens

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """One draft (caller holds the lock): vLLM's SpecDecodingStats.observe_draft."""
        self.spec_drafts += 1
        self.spec_draft_tokens += num_draft_tokens
        self.spec_accepted += num_accepted_tokens
        for i in range(num_accepted_tokens):
            self.spec_accepted_per_pos[i] += 1

    def render(self) -> str:
        L = self.labels
        out: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                out.append(f"{name}{{{labels}}} {float(value)}")

        def hist(name: str, help_: str, h: _Histogram) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} histogram")
            for b, c in zip(h.buckets, h.counts):
                out.append(f'{name}_bucket{{{L},le="{b}"}} {float(c)}')
            out.append(f'{name}_bucket{{{L},le="+Inf"}} {float(h.count)}')
            out.append(f"{name}_count{{{L}}} {float(h.count)}")
            out.append(f"{name}_sum{{{L}}} {h.sum}")

        with self.lock:
            metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                   [(L, self.running)])
            metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                   [(L, self.waiting)])
            metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
                   [(L, min(1.0, 0.01 * self.running))])
            metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
                   [(L, self.preemptions)])
            metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                   [(L, self.prompt_tokens)])
            metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                   [(L, self.generation_tokens)])
            metric("vllm:request_success_total", "counter", "Count of successfully processed requests.",
                   [(f'{L},finished_reason="{r}"', n) for r, n in self.success.items() if r != "error"])
            if self.num_spec_tokens:
                metric("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
                       [(L, self.spec_drafts)])
                metric("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
                       [(L, self.spec_draft_tokens)])
                metric("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
                       [(L, self.spec_accepted)])
                metric("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
                       "Accepted tokens per draft position.",
                       [(f'{L},position="{pos}"', n) for pos, n in enumerate(self.spec_accepted_per_pos)])
            hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft)
            hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", self.iteration_tokens)
            hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e)
            # Not vLLM's: the lab's stand-in says what it is, so a benchmark marks its figures as pipeline-only.
            metric("dgxspark_lab_stand_in", "gauge", "1: this engine is the dgxspark lab's GPU-free stand-in for vLLM, "
                   "its speeds mean nothing.", [(L, 1)])
        return "\n".join(out) + "\n"
