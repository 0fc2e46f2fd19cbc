"""Speculative-decoding counters: present only with --speculative-config, counted as vLLM counts them
(vllm/v1/spec_decode/metrics.py), and the stand-in's marker that a benchmark reads."""

from __future__ import annotations

import json
import re

from enginekit import Proc, flavour_env, free_port, http, vllm_cmd, wait_ready


def _serve(trees, models, tmp_path, procs, *extra):
    port = free_port()
    proc = Proc(vllm_cmd("serve", str(models["qwen35"]), "--served-model-name", "qwen", "--host", "127.0.0.1",
                         "--port", str(port), *extra), flavour_env(trees["0.17"]), tmp_path / "serve.log")
    procs.append(proc)
    base = f"http://127.0.0.1:{port}"
    wait_ready(base, proc)
    return base


def _values(text):
    found = {}
    for name, labels, value in re.findall(r"^([a-z_:]+)\{([^}]*)\} ([0-9.e+]+)$", text, re.M):
        found[(name, labels)] = float(value)
    return found


def test_spec_decode_counters_follow_vllms_definition(trees, models, tmp_path, procs):
    base = _serve(trees, models, tmp_path, procs, "--speculative-config",
                  json.dumps({"method": "mtp", "num_speculative_tokens": 2}))
    body = {"model": "qwen", "prompt": "Count the tokens of a speculative step.", "max_tokens": 40}
    completion = json.loads(http("POST", base + "/v1/completions", body)[1])
    produced = completion["usage"]["completion_tokens"]
    values = _values(http("GET", base + "/metrics")[1].decode())
    labels = 'engine="0",model_name="qwen"'
    drafts = values[("vllm:spec_decode_num_drafts_total", labels)]
    drafted = values[("vllm:spec_decode_num_draft_tokens_total", labels)]
    accepted = values[("vllm:spec_decode_num_accepted_tokens_total", labels)]
    per_pos = [values[("vllm:spec_decode_num_accepted_tokens_per_pos_total", f'{labels},position="{p}"')]
               for p in (0, 1)]
    assert drafts > 0 and drafted == 2 * drafts  # every draft proposes num_speculative_tokens
    assert 0 < accepted < drafted  # some accepted, not all (7 in 10 per position)
    assert sum(per_pos) == accepted and per_pos[0] >= per_pos[1]  # a leading run is accepted
    # Every step yields its accepted tokens plus the bonus token; the prefill yields the first.
    assert values[("vllm:generation_tokens_total", labels)] == produced == 1 + drafts + accepted
    assert values[("dgxspark_lab_stand_in", labels)] == 1.0


def test_no_spec_decode_counters_without_a_speculative_config(trees, models, tmp_path, procs):
    base = _serve(trees, models, tmp_path, procs)
    http("POST", base + "/v1/completions", {"model": "qwen", "prompt": "Hi", "max_tokens": 5})
    text = http("GET", base + "/metrics")[1].decode()
    assert "vllm:generation_tokens_total{" in text and "spec_decode" not in text
