# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""_benchmark: llama-benchy's argv, its JSON and progress events as rows, vLLM's spec-decode counters, the comparison
with the previous run, the CSV and the table. The fixtures are llama-benchy 0.4.0's own output (a run against the lab
stand-in on loopback, c=2, 2 runs, 16 output tokens)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _benchmark as b

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llama_benchy"
RESULT = json.loads((FIXTURES / "result-c2.json").read_text())
EVENTS = b.progress_events((FIXTURES / "progress-c2.jsonl").read_text())
GOOD = {"concurrency": [1, 2, 4], "prompt_tokens": 64, "output_tokens": 16, "runs": 1, "step_timeout": 60,
        "timeout": 300, "regression_threshold": 0.1, "book_url": b.DEFAULT_BOOK_URL}


def test_good_settings_pass_and_a_string_sweep_is_read():
    assert b.check_settings(GOOD) == []
    assert b.check_settings({**GOOD, "concurrency": "4, 1,2"}) == []
    assert b.concurrency_levels("4, 1,2") == [1, 2, 4]


@pytest.mark.parametrize("key,value,words", [
    ("concurrency", [], "benchmark_concurrency must be a non-empty list"),
    ("concurrency", [1, 1], "repeated"),
    ("concurrency", [0, 2], "from 1 to 1024"),
    ("concurrency", "1,two", "from 1 to 1024"),
    ("prompt_tokens", "x", "benchmark_prompt_tokens must be a whole number"),
    ("output_tokens", 1, "benchmark_output_tokens must be a whole number from 2"),
    ("runs", 0, "benchmark_runs"),
    ("step_timeout", -1, "benchmark_step_timeout must be a number of seconds above 0"),
    ("timeout", "soon", "benchmark_timeout"),
    ("regression_threshold", 1.5, "benchmark_regression_threshold must be a fraction"),
    ("book_url", "file:///etc/passwd", "benchmark_book_url must be an http(s) URL"),
    ("book_url", "https://x/a b", "benchmark_book_url"),
])
def test_bad_settings_name_the_variable_and_the_fix(key, value, words):
    problems = b.check_settings({**GOOD, key: value})
    assert len(problems) == 1 and words in problems[0], problems


def test_argv_has_every_setting_and_never_the_key():
    argv = b.step_argv(base_url="http://10.0.0.1:8000/v1/", model="Qwen/Qwen3.5-122B-A10B-FP8",
                       served_model_name="qwen3.5-122b-a10b-fp8", tokenizer="/t/tokenizer.json", prompt_tokens=512,
                       output_tokens=128, concurrency=8, runs=3, book_url=b.DEFAULT_BOOK_URL, result_file="/w/r.json",
                       progress_file="/w/p.jsonl", warmup=False)
    pairs = dict(zip(argv[::1], argv[1:]))
    assert pairs["--base-url"] == "http://10.0.0.1:8000/v1" and pairs["--concurrency"] == "8"
    assert pairs["--pp"] == "512" and pairs["--tg"] == "128" and pairs["--runs"] == "3"
    assert {"--exact-tg", "--skip-coherence", "--no-warmup"} <= set(argv)
    assert pairs["--format"] == "json" and pairs["--save-result"] == "/w/r.json"
    assert "--api-key" not in argv
    warm = b.step_argv(base_url="http://h:1/v1", model="m", served_model_name="m", tokenizer="/t", prompt_tokens=1,
                       output_tokens=2, concurrency=1, runs=1, book_url=b.DEFAULT_BOOK_URL, result_file="/r",
                       progress_file="/p", warmup=True)
    assert "--no-warmup" not in warm


@pytest.mark.parametrize("field,value", [
    ("base_url", "http://h:1/v1; rm -rf /"), ("base_url", "ftp://h/v1"), ("model", "a b"), ("model", "-x"),
    ("served_model_name", "m\nn"), ("tokenizer", "relative/tok.json"), ("concurrency", 0), ("runs", "2"),
])
def test_argv_refuses_values_that_are_not_their_grammar(field, value):
    args = {"base_url": "http://h:1/v1", "model": "m", "served_model_name": "m", "tokenizer": "/t", "prompt_tokens": 1,
            "output_tokens": 2, "concurrency": 1, "runs": 1, "book_url": b.DEFAULT_BOOK_URL, "result_file": "/r",
            "progress_file": "/p", "warmup": False}
    args[field] = value
    if field == "runs":
        assert b.step_argv(**args)  # a digit string is a number
        return
    with pytest.raises(b.BenchmarkError):
        b.step_argv(**args)


def test_book_cache_name_is_llama_benchys():
    # llama_benchy/corpus.py: hashlib.md5(url.encode()).hexdigest() + ".txt"
    assert b.book_cache_name("https://example.invalid/corpus") == "353358d80a60e38e80131f587db85c96.txt"


def test_step_row_from_llama_benchys_own_output():
    row = b.step_row(RESULT, EVENTS, 2, seconds=3.0)
    run = RESULT["benchmarks"][0]
    assert row["concurrency"] == 2 and row["requests"] == 4 and row["requests_ok"] == 4 and row["errors"] == []
    assert row["aggregate_tok_s"] == pytest.approx(run["tg_throughput"]["mean"])
    assert row["request_tok_s"] == pytest.approx(run["tg_req_throughput"]["mean"])
    # Tokens are the ones llama-benchy observed per request, not requests x length.
    assert row["output_tokens_observed"] == sum(e["total_tokens"] for e in EVENTS if e["type"] == "request_end")
    ttft = sorted(run["e2e_ttft"]["values"])
    assert row["ttft_ms_p50"] == pytest.approx((ttft[1] + ttft[2]) / 2)
    assert row["ttft_ms_p50"] <= row["ttft_ms_p90"] <= row["ttft_ms_p99"] <= ttft[-1]
    assert row["itl_ms_p50"] == pytest.approx(b.percentile([1000 / v for v in run["tg_req_throughput"]["values"]], 50))
    assert row["e2e_s_p50"] * 1000 > row["ttft_ms_p50"]
    assert row["seconds"] == 3.0


def test_step_row_refuses_a_result_without_the_step():
    with pytest.raises(b.BenchmarkError, match="0 runs at concurrency 4"):
        b.step_row(RESULT, EVENTS, 4)
    with pytest.raises(b.BenchmarkError):
        b.step_row({"no": "benchmarks"}, EVENTS, 2)


def test_failed_requests_are_counted_apart():
    events = EVENTS + [{"type": "request_start", "request_id": 99},
                       {"type": "request_end", "request_id": 99, "total_tokens": 0, "decode_seconds": 0,
                        "error": "HTTP 500: boom"}]
    row = b.step_row(RESULT, events, 2)
    assert row["requests"] == 5 and row["requests_ok"] == 4 and row["errors"] == ["HTTP 500: boom"]


def test_percentile_is_numpys_linear():
    assert b.percentile([1, 2, 3, 4], 50) == 2.5
    assert b.percentile([10], 99) == 10
    assert b.percentile([], 50) is None
    assert b.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == pytest.approx(9.1)


# What vLLM 0.17's /metrics shows with --speculative-config (names from vllm/v1/spec_decode/metrics.py).
BEFORE = """# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="q"} 100.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="q"} 40.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="q"} 80.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="q"} 50.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="q",position="0"} 30.0
"""
AFTER = BEFORE.replace(" 100.0", " 400.0").replace(" 40.0", " 140.0").replace(" 80.0", " 280.0").replace(" 50.0", " 250.0")


def test_spec_decode_deltas_follow_vllms_definitions():
    spec = b.spec_decode(b.counters(BEFORE), b.counters(AFTER))
    assert spec["generation_tokens"] == 300 and spec["spec_drafts"] == 100
    assert spec["spec_draft_tokens"] == 200 and spec["spec_accepted_tokens"] == 200
    assert spec["acceptance_rate"] == pytest.approx(1.0)  # accepted / drafted
    assert spec["mean_acceptance_length"] == pytest.approx(3.0)  # 1 + accepted / drafts (the bonus token)


def test_no_spec_decode_without_its_counters_and_a_reset_counter_counts_from_zero():
    plain = 'vllm:generation_tokens_total{engine="0",model_name="q"} 10.0\n'
    spec = b.spec_decode(b.counters(plain.replace("10.0", "500.0")), b.counters(plain))
    assert spec["generation_tokens"] == 10 and spec["spec_drafts"] is None and spec["acceptance_rate"] is None
    assert b.counters(plain)["stand_in"] is False
    assert b.counters(plain + 'dgxspark_lab_stand_in{engine="0",model_name="q"} 1.0\n')["stand_in"] is True


def test_counters_sum_label_sets():
    text = ('vllm:generation_tokens_total{engine="0",model_name="q"} 3.0\n'
            'vllm:generation_tokens_total{engine="1",model_name="q"} 4.0\n# HELP x\n')
    assert b.counters(text)["values"] == {b.GENERATION_TOKENS: 7.0}


def test_merge_counters_puts_each_steps_spec_figures_on_its_row_and_finds_the_stand_in():
    rows = [b.step_row(RESULT, EVENTS, 2)]
    merged, engine = b.merge_counters(rows, [{"concurrency": 2, "before": BEFORE.splitlines(), "after": AFTER}])
    assert engine == "vllm" and merged[0]["mean_acceptance_length"] == pytest.approx(3.0)
    assert merged[0]["engine_generation_tokens"] == 300
    _rows, engine = b.merge_counters(rows, [{"concurrency": 2, "before": ["dgxspark_lab_stand_in 1"], "after": []}])
    assert engine == "stand-in"


def _doc(rows, engine="vllm", **settings):
    return b.document(cluster="pair1", date="20261201T000000Z", engine=engine,
                      release={"model": "Q/M", "served_model_name": "m", "image": "i", "image_id": "sha256:ab"},
                      endpoint="http://h:8000/v1", via="cluster endpoint",
                      settings={"prompt_tokens": 64, "output_tokens": 16, **settings}, hardware=[], rows=rows,
                      steps=[{"concurrency": r["concurrency"], "status": "ok"} for r in rows])


def test_compare_reports_a_drop_beyond_the_threshold_only():
    old = _doc([{"concurrency": 1, "aggregate_tok_s": 100.0, "request_tok_s": 100.0},
                {"concurrency": 2, "aggregate_tok_s": 180.0, "request_tok_s": 90.0}])
    new = _doc([{"concurrency": 1, "aggregate_tok_s": 95.0, "request_tok_s": 95.0},
                {"concurrency": 2, "aggregate_tok_s": 150.0, "request_tok_s": 75.0},
                {"concurrency": 4, "aggregate_tok_s": 300.0, "request_tok_s": 75.0}])
    comparison = b.compare(new["rows"], old, 0.10, new)
    assert comparison["compared"] and len(comparison["deltas"]) == 4
    assert comparison["regressions"] == ["c=2 aggregate_tok_s 180.0 -> 150.0 (-17%, threshold -10%)",
                                         "c=2 request_tok_s 90.0 -> 75.0 (-17%, threshold -10%)"]
    assert b.compare(new["rows"], old, 0.20, new)["regressions"] == []


def test_compare_only_like_with_like():
    rows = [{"concurrency": 1, "aggregate_tok_s": 1.0, "request_tok_s": 1.0}]
    assert b.compare(rows, None, 0.1, _doc(rows))["reason"] == "no previous run of this cluster"
    stand_in = _doc(rows, engine="stand-in")
    assert "engine" in b.compare(rows, stand_in, 0.1, _doc(rows))["reason"]
    longer = _doc(rows, prompt_tokens=2048)
    result = b.compare(rows, longer, 0.1, _doc(rows))
    assert not result["compared"] and "prompt_tokens" in result["reason"]


def test_document_csv_and_table():
    row = b.step_row(RESULT, EVENTS, 2)
    doc = _doc([row], engine="stand-in")
    doc["comparison"] = b.compare(doc["rows"], None, 0.1, doc)
    assert doc["status"] == "ok" and doc["image_id"] == "sha256:ab" and doc["figures"].startswith("pipeline only")
    assert doc["tool"] == {"name": "llama-benchy", "version": "0.4.0"}
    lines = list(csv.DictReader(io.StringIO(b.csv_text(doc))))
    assert len(lines) == 1 and lines[0]["concurrency"] == "2" and lines[0]["engine"] == "stand-in"
    assert float(lines[0]["aggregate_tok_s"]) == pytest.approx(row["aggregate_tok_s"], rel=1e-3)
    table = b.table(doc)
    assert "PIPELINE ONLY" in table[0] and "agg tok/s" in table[1] and table[2].split()[0] == "2"
    assert table[-1] == "not compared: no previous run of this cluster"
    assert b.headline(doc)["decode_tok_s"] == pytest.approx(row["request_tok_s"], rel=1e-3)
