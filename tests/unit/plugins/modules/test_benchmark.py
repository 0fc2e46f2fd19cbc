# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""benchmark_run and benchmark_report: a step bounded in time (llama-benchy and its children gone after a timeout),
the key on stdin and never on argv, llama-benchy's cache seeded with the corpus, and the report's files, previous run
and regression. llama-benchy is played by a small script standing in for its python (the lab tests run the real one)."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import ssl
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _benchmark
from ansible_collections.dgxspark.vllm.plugins.modules import benchmark_report as report_mod
from ansible_collections.dgxspark.vllm.plugins.modules import benchmark_run as run_mod

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llama_benchy"
KEY = "sentinel-key-8c1f0e"

# Stands in for the benchmark venv's python: `python -c WRAPPER ARGV...`. It records its argv and stdin, and acts
# as llama-benchy would per $FAKE_MODE.
FAKE = """#!/bin/sh
shift 2
printf '%s\\n' "$@" > "$FAKE_DIR/argv"
printf '%s' "${SSL_CERT_FILE:-}" > "$FAKE_DIR/ca"
cat > "$FAKE_DIR/stdin"
case "$FAKE_MODE" in
  sleep) sleep 300 & echo $! > "$FAKE_DIR/child"; sleep 300 ;;
  fail) echo "Error: endpoint refused"; exit 1 ;;
  ok|nocache)
    [ "$FAKE_MODE" = ok ] && echo "Loading text from cache: $HOME/.cache/llama-benchy/x.txt"
    while [ $# -gt 0 ]; do
      case "$1" in --save-result) cp "$FAKE_DIR/result.json" "$2" ;; --emit-progress) cp "$FAKE_DIR/progress.jsonl" "$2" ;; esac
      shift
    done ;;
esac
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    python = tmp_path / "python"
    python.write_text(FAKE)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    shutil.copy(FIXTURES / "result-c2.json", tmp_path / "result.json")
    shutil.copy(FIXTURES / "progress-c2.jsonl", tmp_path / "progress.jsonl")
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("It was the best of times.\n" * 50)
    params = {"base_url": "http://127.0.0.1:1/v1", "api_key": KEY, "model": "Q/M", "served_model_name": "m",
              "tokenizer": str(tmp_path / "tokenizer.json"), "prompt_tokens": 64, "output_tokens": 16,
              "concurrency": 2, "runs": 2, "warmup": False, "book_url": "https://example.invalid/corpus",
              "corpus": str(corpus), "home": str(tmp_path / "home"), "timeout": 30.0}
    return python, params, tmp_path


def test_a_step_returns_its_row_and_gives_the_key_on_stdin_only(fake, monkeypatch):
    python, params, tmp = fake
    monkeypatch.setenv("FAKE_MODE", "ok")
    out = run_mod.run_step(params, python=str(python))
    assert out["status"] == "ok", out
    assert out["row"]["concurrency"] == 2 and out["row"]["requests_ok"] == 4
    argv = (tmp / "argv").read_text()
    assert KEY not in argv and KEY not in json.dumps(out["argv"]) and "--concurrency\n2\n" in argv
    assert (tmp / "stdin").read_text() == KEY + "\n"


def test_m2_an_https_endpoint_is_trusted_by_the_ca_file_alone(fake, monkeypatch, tmp_path):
    """Through a gateway that serves TLS, llama-benchy trusts the gateway's certificate (ca_file): the step gives it
    as SSL_CERT_FILE, which the default context of llama-benchy's client (aiohttp: ssl.create_default_context) reads;
    a real TLS server with a certificate made as the gateway's is trusted that way, and not without it."""
    python, params, tmp = fake
    monkeypatch.setenv("FAKE_MODE", "ok")
    assert run_mod.run_step({**params, "ca_file": "/ctl/gateway-pair1.pem"}, python=str(python))["status"] == "ok"
    assert (tmp / "ca").read_text() == "/ctl/gateway-pair1.pem"
    run_mod.run_step({**params, "ca_file": ""}, python=str(python))
    assert (tmp / "ca").read_text() == os.environ.get("SSL_CERT_FILE", "")

    from ansible_collections.dgxspark.vllm.plugins.plugin_utils import _tls  # pylint: disable=import-outside-toplevel
    made = _tls.plan(None, ["127.0.0.1"], "gateway")
    (tmp_path / "tls.pem").write_text(made["pem"])
    (tmp_path / "ca.pem").write_text(made["certificate"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.pem")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ask = ("import ssl, sys, urllib.request\n"
           "try:\n"
           "    print(urllib.request.urlopen(sys.argv[1], context=ssl.create_default_context(), timeout=10).status)\n"
           "except Exception as exc:\n"
           "    print(type(exc).__name__)\n")
    url = f"https://127.0.0.1:{server.server_address[1]}/"
    try:
        trusted = subprocess.run([sys.executable, "-c", ask, url], capture_output=True, text=True, check=True,
                                 env={**os.environ, "SSL_CERT_FILE": str(tmp_path / "ca.pem")}).stdout.strip()
        untrusted = subprocess.run([sys.executable, "-c", ask, url], capture_output=True, text=True, check=True,
                                   env={k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}).stdout.strip()
    finally:
        server.shutdown()
    assert (trusted, untrusted) == ("200", "URLError")


def test_a_step_past_its_timeout_is_stopped_with_its_children(fake, monkeypatch):
    python, params, tmp = fake
    monkeypatch.setenv("FAKE_MODE", "sleep")
    began = time.monotonic()
    out = run_mod.run_step({**params, "timeout": 1.5}, python=str(python))
    assert out["status"] == "timeout" and "1.5 s" in out["detail"]
    assert time.monotonic() - began < 10
    child = int((tmp / "child").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists() and \
            Path(f"/proc/{child}/stat").read_text().split()[2] != "Z":
        time.sleep(0.1)
    gone = not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"
    assert gone, f"llama-benchy's child {child} outlived the timeout"


def test_a_failing_llama_benchy_is_reported_with_its_output(fake, monkeypatch):
    python, params, _tmp = fake
    monkeypatch.setenv("FAKE_MODE", "fail")
    out = run_mod.run_step({**params, "corpus": None}, python=str(python))
    assert out["status"] == "failed" and "exited with 1" in out["detail"] and "endpoint refused" in out["detail"]


def test_a_corpus_not_read_from_the_cache_fails_the_step(fake, monkeypatch):
    python, params, _tmp = fake
    monkeypatch.setenv("FAKE_MODE", "nocache")
    out = run_mod.run_step(params, python=str(python))
    assert out["status"] == "failed" and "did not load the corpus from its cache" in out["detail"]


def test_the_corpus_is_seeded_under_llama_benchys_cache_name(fake):
    _python, params, tmp = fake
    assert run_mod.seed_corpus(params["corpus"], params["book_url"], params["home"]) is True
    cached = tmp / "home" / ".cache" / "llama-benchy" / _benchmark.book_cache_name(params["book_url"])
    assert cached.read_text() == Path(params["corpus"]).read_text()
    assert run_mod.seed_corpus(params["corpus"], params["book_url"], params["home"]) is False
    empty = tmp / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        run_mod.seed_corpus(str(empty), params["book_url"], params["home"])


def _report_params(tmp_path, rows, date):
    return {"results_dir": str(tmp_path / "results"), "cluster": "pair1", "date": date,
            "release": {"model": "Q/M", "served_model_name": "m", "image": "img:1", "image_id": "sha256:" + "a" * 64},
            "endpoint": "http://h:8000/v1", "via": "cluster endpoint",
            "settings": {"concurrency": [1, 2], "prompt_tokens": 64, "output_tokens": 16}, "hardware": [],
            "rows": rows, "steps": [{"concurrency": r["concurrency"], "status": "ok"} for r in rows],
            "counters": [{"concurrency": 1, "before": [], "after": ['vllm:generation_tokens_total{a="b"} 9.0']}],
            "regression_threshold": 0.1, "tool_version": "0.4.0"}


ROWS = [{"concurrency": 1, "aggregate_tok_s": 20.0, "request_tok_s": 20.0, "ttft_ms_p50": 100.0},
        {"concurrency": 2, "aggregate_tok_s": 36.0, "request_tok_s": 18.0, "ttft_ms_p50": 120.0}]


def test_report_writes_files_points_latest_and_compares_with_the_previous_run(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(report_mod, "plot", lambda doc, previous, path: (drawn.append((doc, previous)),
                                                                         Path(path).write_bytes(b"png")))
    first = report_mod.report(_report_params(tmp_path, ROWS, "20261201T000000Z"))
    directory = tmp_path / "results" / "pair1"
    assert first["changed"] and sorted(os.listdir(directory)) == [
        "20261201T000000Z.csv", "20261201T000000Z.json", "20261201T000000Z.png", "latest.json"]
    assert os.readlink(directory / "latest.json") == "20261201T000000Z.json"
    doc = json.loads((directory / "latest.json").read_text())
    assert doc["image_id"].startswith("sha256:") and doc["rows"][0]["engine_generation_tokens"] == 9.0
    assert doc["engine"] == "vllm" and first["previous"] == "" and drawn[0][1] is None
    slower = [dict(r, aggregate_tok_s=r["aggregate_tok_s"] * 0.5) for r in ROWS]
    second = report_mod.report(_report_params(tmp_path, slower, "20261201T000100Z"))
    assert second["previous"].endswith("20261201T000000Z.json") and drawn[1][1]["date"] == "20261201T000000Z"
    dropped = [r.split(" (")[0] for r in second["regressions"]]
    assert dropped == ["c=1 aggregate_tok_s 20.0 -> 10.0", "c=2 aggregate_tok_s 36.0 -> 18.0"]
    assert second["table"][-1].startswith("REGRESSION against 20261201T000000Z")
    assert os.readlink(directory / "latest.json") == "20261201T000100Z.json"


def test_report_in_check_mode_writes_nothing(tmp_path):
    out = report_mod.report(_report_params(tmp_path, ROWS, "20261201T000000Z"), check_mode=True)
    assert out["changed"] is False and not (tmp_path / "results").exists()
    assert out["files"]["png"].endswith("pair1/20261201T000000Z.png")


@pytest.mark.parametrize("field,value", [("cluster", "../etc"), ("date", "yesterday")])
def test_report_refuses_names_that_are_not_file_names(tmp_path, field, value):
    with pytest.raises(ValueError):
        report_mod.report({**_report_params(tmp_path, ROWS, "20261201T000000Z"), field: value}, check_mode=True)


def test_plot_draws_both_runs(tmp_path):
    doc = {"cluster": "pair1", "rows": ROWS, "settings": {}, "date": "b", "engine": "stand-in"}
    path = tmp_path / "plot.png"
    report_mod.plot(doc, {"rows": ROWS[:1], "date": "a"}, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10000


def test_module_runs_nothing_in_check_mode(tmp_path):
    """The module through Ansible's module runner, in check mode: no llama-benchy, status skipped."""
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    args = {"ANSIBLE_MODULE_ARGS": {"base_url": "http://127.0.0.1:1/v1", "api_key": KEY, "model": "m",
                                    "served_model_name": "m", "tokenizer": str(tokenizer), "prompt_tokens": 8,
                                    "output_tokens": 8, "concurrency": 1, "book_url": "https://x.invalid/b",
                                    "home": str(tmp_path / "home"), "timeout": 5, "_ansible_check_mode": True}}
    proc = subprocess.run([sys.executable, run_mod.__file__], input=json.dumps(args),
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=str(Path(run_mod.__file__).parents[5])))
    result = json.loads(proc.stdout)
    assert result["status"] == "skipped" and result["changed"] is False, proc.stdout + proc.stderr
    assert KEY not in proc.stdout
