# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark playbook's logic (playbooks/benchmark.yml, role dgxspark.vllm.benchmark), pure Python.

The tool is llama-benchy (PyPI, MIT, what DGX Spark users publish their figures with). One llama-benchy run is one
concurrency step; this module builds its argv from validated values, reads its JSON result and its progress events
(JSONL) into one row per step, takes the engine's speculative-decoding counters before and after the step from
vLLM's ``/metrics``, compares a run with the previous one of the same cluster, and renders the JSON document, the
CSV and the printed table. The modules ``benchmark_run`` and ``benchmark_report`` wrap it; the PNG is drawn by
``benchmark_report`` (matplotlib is only in the benchmark's own virtualenv).

No Ansible imports, standard library only.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
import signal
import subprocess
import typing as t

TOOL = "llama-benchy"
TOOL_VERSION = "0.4.0"
# llama-benchy's own default corpus (Sherlock Holmes on Project Gutenberg); it caches a book under
# $HOME/.cache/llama-benchy/<md5 of the URL>.txt and reads the cache instead of the network when the file is there.
DEFAULT_BOOK_URL = "https://www.gutenberg.org/files/1661/1661-0.txt"
CACHE_LINE = "Loading text from cache: "
MAX_CONCURRENCY = 1024
MAX_TOKENS = 1_000_000

# vLLM's counters (vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py): prometheus_client adds _total to a
# Counter's name. The speculative-decoding ones exist only on an engine started with a speculative config.
GENERATION_TOKENS = "vllm:generation_tokens_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
COUNTERS = (GENERATION_TOKENS, SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED)
# The lab's stand-in engine says what it is (lab/engine: vllm/v1/metrics/prometheus.py); real vLLM has no such line.
STAND_IN_MARKER = "dgxspark_lab_stand_in"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+([-+0-9.eEnaNinfIF]+)(?:\s+\d+)?$")

# The table's and the CSV's columns: key, heading, format.
COLUMNS = (
    ("concurrency", "c", "{:d}"),
    ("requests_ok", "ok", "{:d}"),
    ("aggregate_tok_s", "agg tok/s", "{:.1f}"),
    ("request_tok_s", "req tok/s", "{:.1f}"),
    ("ttft_ms_p50", "TTFT p50 ms", "{:.0f}"),
    ("ttft_ms_p90", "p90", "{:.0f}"),
    ("ttft_ms_p99", "p99", "{:.0f}"),
    ("itl_ms_p50", "ITL p50 ms", "{:.1f}"),
    ("itl_ms_p99", "p99", "{:.1f}"),
    ("e2e_s_p50", "e2e p50 s", "{:.2f}"),
    ("e2e_s_p99", "p99", "{:.2f}"),
    ("acceptance_rate", "spec accept", "{:.2f}"),
    ("mean_acceptance_length", "accept len", "{:.2f}"),
)
CSV_FIELDS = ("cluster", "date", "engine", "model", "image_id", "prompt_tokens", "output_tokens", "status",
              "concurrency", "requests", "requests_ok", "output_tokens_observed", "engine_generation_tokens",
              "aggregate_tok_s", "request_tok_s", "request_tok_s_p50", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99",
              "itl_ms_p50", "itl_ms_p90", "itl_ms_p99", "e2e_s_p50", "e2e_s_p90", "e2e_s_p99", "spec_drafts",
              "spec_draft_tokens", "spec_accepted_tokens", "acceptance_rate", "mean_acceptance_length", "seconds")


class BenchmarkError(ValueError):
    """Input of the wrong shape; the message names it."""


def _int(value: t.Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
        return int(value)
    return None


def _number(value: t.Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def concurrency_levels(value: t.Any) -> list[int]:
    """The sweep as a list of ints: a list, or a comma-separated string ("1,2,4" from -e)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise BenchmarkError("must be a non-empty list of concurrency levels, e.g. [1, 2, 4, 8, 16, 32]")
    levels = [_int(item.strip() if isinstance(item, str) else item) for item in items]
    if any(level is None or not 1 <= level <= MAX_CONCURRENCY for level in levels):
        raise BenchmarkError(f"every level must be a whole number from 1 to {MAX_CONCURRENCY}, is {value!r}")
    if len(set(levels)) != len(levels):
        raise BenchmarkError(f"a level is repeated: {value!r}")
    return sorted(t.cast("list[int]", levels))


def check_settings(settings: t.Mapping[str, t.Any]) -> list[str]:
    """The problems of the role's settings, each naming the variable and the fix (empty when they are good).

    Keys: concurrency, prompt_tokens, output_tokens, runs, step_timeout, timeout, regression_threshold, book_url.
    """
    problems = []
    try:
        concurrency_levels(settings.get("concurrency"))
    except BenchmarkError as exc:
        problems.append(f"benchmark_concurrency {exc}")
    for key, low, high in (("prompt_tokens", 1, MAX_TOKENS), ("output_tokens", 2, MAX_TOKENS), ("runs", 1, 100)):
        value = _int(settings.get(key))
        if value is None or not low <= value <= high:
            problems.append(f"benchmark_{key} must be a whole number from {low} to {high}, is {settings.get(key)!r}")
    for key in ("step_timeout", "timeout"):
        value = _number(settings.get(key))
        if value is None or value <= 0:
            problems.append(f"benchmark_{key} must be a number of seconds above 0, is {settings.get(key)!r}")
    threshold = _number(settings.get("regression_threshold"))
    if threshold is None or not 0 <= threshold < 1:
        problems.append("benchmark_regression_threshold must be a fraction from 0 to below 1 (0.10: a drop of more "
                        f"than 10% is a regression), is {settings.get('regression_threshold')!r}")
    book = settings.get("book_url")
    if not isinstance(book, str) or not re.fullmatch(r"https?://[^\s'\"]+", book):
        problems.append(f"benchmark_book_url must be an http(s) URL without spaces or quotes, is {book!r}")
    return problems


def book_cache_name(book_url: str) -> str:
    """The file name llama-benchy caches BOOK_URL under ($HOME/.cache/llama-benchy/<this>)."""
    return hashlib.md5(book_url.encode()).hexdigest() + ".txt"  # llama-benchy's cache key, not for security


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}")


def step_argv(*, base_url: str, model: str, served_model_name: str, tokenizer: str, prompt_tokens: int,
              output_tokens: int, concurrency: int, runs: int, book_url: str, result_file: str,
              progress_file: str, warmup: bool) -> list[str]:
    """llama-benchy's arguments for one concurrency step (never the API key: the runner gives it on stdin).

    Coherence is skipped (it asks for "Paris", which a lab or a small model need not answer) and every request
    generates exactly OUTPUT_TOKENS (``--exact-tg``: ``min_tokens`` and ``ignore_eos``), so steps compare.
    """
    if not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+(?:/[A-Za-z0-9._~/-]*)?", str(base_url)):
        raise BenchmarkError(f"base_url must be an http(s) URL, is {base_url!r}")
    for name, value in (("model", model), ("served_model_name", served_model_name)):
        if not _NAME.fullmatch(str(value)):
            raise BenchmarkError(f"{name} must be a model name (letters, digits, ._:/@+-), is {value!r}")
    for name, value in (("tokenizer", tokenizer), ("result_file", result_file), ("progress_file", progress_file)):
        if not str(value).startswith("/") or "\n" in str(value):
            raise BenchmarkError(f"{name} must be an absolute path, is {value!r}")
    numbers = {"prompt_tokens": prompt_tokens, "output_tokens": output_tokens, "concurrency": concurrency, "runs": runs}
    for name, value in numbers.items():
        if _int(value) is None or _int(value) < 1:  # type: ignore[operator]
            raise BenchmarkError(f"{name} must be a whole number of at least 1, is {value!r}")
    if not re.fullmatch(r"https?://[^\s'\"]+", str(book_url)):
        raise BenchmarkError(f"book_url must be an http(s) URL, is {book_url!r}")
    argv = ["--base-url", str(base_url).rstrip("/"), "--model", str(model), "--served-model-name",
            str(served_model_name), "--tokenizer", str(tokenizer), "--pp", str(int(prompt_tokens)), "--tg",
            str(int(output_tokens)), "--concurrency", str(int(concurrency)), "--runs", str(int(runs)),
            "--exact-tg", "--skip-coherence", "--latency-mode", "api", "--book-url", str(book_url),
            "--format", "json", "--save-result", str(result_file), "--emit-progress", str(progress_file)]
    return argv + ([] if warmup else ["--no-warmup"])


def counters(metrics_text: t.Any) -> dict[str, t.Any]:
    """The counters the benchmark reads from a ``/metrics`` text, each summed over its label sets (absent: not in
    the text), and whether the engine is the lab's stand-in."""
    found: dict[str, float] = {}
    stand_in = False
    for line in str(metrics_text or "").splitlines():
        match = _SAMPLE.match(line.strip())
        if not match:
            continue
        name, value = match.group(1), _number(match.group(2))
        if name == STAND_IN_MARKER:
            stand_in = True
        if name in COUNTERS and value is not None:
            found[name] = found.get(name, 0.0) + value
    return {"values": found, "stand_in": stand_in}


def spec_decode(before: t.Mapping[str, t.Any], after: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What the engine counted during a step (AFTER minus BEFORE, both ``counters()`` results).

    ``generation_tokens`` is every token the engine generated (warm-up and other clients included). With speculative
    decoding: drafts, draft tokens, accepted tokens, the acceptance rate (accepted / drafted) and the mean acceptance
    length (1 + accepted / drafts: the tokens one target-model step yields, the bonus token included), as vLLM
    defines them (vllm/v1/spec_decode/metrics.py). None where the engine has no such counter.
    """
    old, new = dict(before.get("values") or {}), dict(after.get("values") or {})

    def delta(name: str) -> float | None:
        if name not in new:
            return None
        # A counter that went down was reset (engine restarted): the new value is what it counted since.
        return new[name] - old.get(name, 0.0) if new[name] >= old.get(name, 0.0) else new[name]

    out: dict[str, t.Any] = {"generation_tokens": delta(GENERATION_TOKENS), "spec_drafts": delta(SPEC_DRAFTS),
                             "spec_draft_tokens": delta(SPEC_DRAFT_TOKENS), "spec_accepted_tokens": delta(SPEC_ACCEPTED),
                             "acceptance_rate": None, "mean_acceptance_length": None}
    if out["spec_draft_tokens"]:
        out["acceptance_rate"] = (out["spec_accepted_tokens"] or 0.0) / out["spec_draft_tokens"]
    if out["spec_drafts"]:
        out["mean_acceptance_length"] = 1.0 + (out["spec_accepted_tokens"] or 0.0) / out["spec_drafts"]
    return out


def percentile(values: t.Sequence[float], pct: float) -> float | None:
    """The PCT percentile of VALUES with linear interpolation between the closest ranks (numpy's default)."""
    data = sorted(v for v in (_number(v) for v in values) if v is not None)
    if not data:
        return None
    rank = (len(data) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def progress_events(text: t.Any) -> list[dict[str, t.Any]]:
    """llama-benchy's progress events (``--emit-progress``, JSONL); lines that are not JSON objects are skipped."""
    events = []
    for line in str(text or "").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _requests(events: t.Sequence[t.Mapping[str, t.Any]]) -> dict[t.Any, dict[str, t.Any]]:
    by_id: dict[t.Any, dict[str, t.Any]] = {}
    for event in events:
        rid = event.get("request_id")
        if rid is None:
            continue
        request = by_id.setdefault(rid, {})
        kind = event.get("type")
        if kind == "request_first_token":
            request["ttft_s"] = _number(event.get("ttft_s"))
        elif kind == "request_end":
            request.update(tokens=_int(event.get("total_tokens")) or 0, decode_s=_number(event.get("decode_seconds")),
                           error=str(event.get("error") or ""), ended=True)
    return by_id


def _metric(run: t.Mapping[str, t.Any], name: str) -> dict[str, t.Any]:
    metric = run.get(name)
    return metric if isinstance(metric, dict) else {}


def step_row(result: t.Any, events: t.Sequence[t.Mapping[str, t.Any]], concurrency: int,
             seconds: float | None = None) -> dict[str, t.Any]:
    """One row of the sweep from llama-benchy's JSON RESULT for one concurrency and its progress EVENTS.

    Throughput is llama-benchy's, from the tokens it observed arriving (token ids where the server sends them, else
    the usage count spread over the chunks), never requests x length: ``aggregate_tok_s`` is all requests' decoded
    tokens over the batch's decode window (per-request speed at concurrency 1), ``request_tok_s`` the mean speed of
    one request. TTFT is llama-benchy's end-to-end time to first token; ITL (inter-token latency) is 1000 / a request's
    decode speed; e2e is TTFT + the request's decode time (from the progress events).
    """
    if not isinstance(result, t.Mapping) or not isinstance(result.get("benchmarks"), list):
        raise BenchmarkError("llama-benchy's result must be its JSON report (with 'benchmarks'), is "
                             f"{type(result).__name__}")
    runs = [r for r in result["benchmarks"] if isinstance(r, dict) and not r.get("is_context_prefill_phase")
            and _int(r.get("concurrency")) == int(concurrency)]
    if len(runs) != 1:
        raise BenchmarkError(f"llama-benchy's result has {len(runs)} runs at concurrency {concurrency}, expected 1")
    run = runs[0]
    requests = _requests(events)
    ended = [r for r in requests.values() if r.get("ended")]
    ok = [r for r in ended if not r.get("error")]
    ttft = list(_metric(run, "e2e_ttft").get("values") or [])
    speeds = [v for v in (_number(v) for v in (_metric(run, "tg_req_throughput").get("values") or [])) if v]
    itl = [1000.0 / v for v in speeds if v > 0]
    e2e = [r["ttft_s"] + (r.get("decode_s") or 0.0) for r in ok if r.get("ttft_s") is not None]
    row: dict[str, t.Any] = {
        "concurrency": int(concurrency),
        "requests": len(requests),
        "requests_ok": len(ok),
        "errors": sorted({r["error"][:200] for r in ended if r.get("error")}),
        "output_tokens_observed": sum(r.get("tokens") or 0 for r in ok),
        "aggregate_tok_s": _number(_metric(run, "tg_throughput").get("mean")),
        "request_tok_s": _number(_metric(run, "tg_req_throughput").get("mean")),
        "request_tok_s_p50": percentile(speeds, 50),
        "prefill_tok_s": _number(_metric(run, "pp_throughput").get("mean")),
        "seconds": round(seconds, 2) if seconds is not None else None,
    }
    for name, values in (("ttft_ms", ttft), ("itl_ms", itl), ("e2e_s", e2e)):
        for pct in (50, 90, 99):
            row[f"{name}_p{pct}"] = percentile(values, pct)
    return row


SPEC_KEYS = ("engine_generation_tokens", "spec_drafts", "spec_draft_tokens", "spec_accepted_tokens", "acceptance_rate",
             "mean_acceptance_length")


def merge_counters(rows: t.Sequence[t.Mapping[str, t.Any]],
                   readings: t.Sequence[t.Mapping[str, t.Any]]) -> tuple[list[dict[str, t.Any]], str]:
    """ROWS with what the engine counted during each step, and the engine's kind (``stand-in`` or ``vllm``).

    READINGS: per step ``{"concurrency", "before", "after"}``, the ``/metrics`` lines (or text) read on the head
    before and after it.
    """
    engine = "vllm"
    by_level = {}
    for reading in readings or []:
        texts = []
        for key in ("before", "after"):
            value = reading.get(key)
            texts.append("\n".join(value) if isinstance(value, (list, tuple)) else str(value or ""))
        before, after = counters(texts[0]), counters(texts[1])
        if before["stand_in"] or after["stand_in"]:
            engine = "stand-in"
        by_level[_int(reading.get("concurrency"))] = spec_decode(before, after)
    merged = []
    for row in rows:
        spec = by_level.get(_int(row.get("concurrency")), {})
        merged.append({**row, "engine_generation_tokens": spec.get("generation_tokens"),
                       **{key: spec.get(key) for key in SPEC_KEYS[1:]}})
    return merged, engine


def _round(value: t.Any, digits: int = 3) -> t.Any:
    return round(value, digits) if isinstance(value, float) else value


def compare(rows: t.Sequence[t.Mapping[str, t.Any]], previous: t.Mapping[str, t.Any] | None, threshold: float,
            settings: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """This run's rows against the previous run's document of the same cluster.

    Compared only when the previous run measured the same model, engine kind and prompt/output lengths; then every
    concurrency both measured: a drop of aggregate or per-request tok/s by more than THRESHOLD (a fraction) is a
    regression. Returns ``{"compared", "reason", "previous", "regressions": [sentences], "deltas": [...]}``.
    """
    out: dict[str, t.Any] = {"compared": False, "reason": "", "previous": "", "threshold": threshold,
                             "regressions": [], "deltas": []}
    if not previous:
        out["reason"] = "no previous run of this cluster"
        return out
    out["previous"] = str(previous.get("date") or "")
    for key in ("model", "engine"):
        if previous.get(key) != settings.get(key):
            out["reason"] = f"the previous run measured {key} {previous.get(key)!r}, this one {settings.get(key)!r}"
            return out
    old_settings = previous.get("settings") or {}
    for key in ("prompt_tokens", "output_tokens"):
        if _int(old_settings.get(key)) != _int((settings.get("settings") or {}).get(key)):
            out["reason"] = (f"the previous run used {key} {old_settings.get(key)!r}, this one "
                             f"{(settings.get('settings') or {}).get(key)!r}")
            return out
    old_rows = {_int(r.get("concurrency")): r for r in previous.get("rows") or [] if isinstance(r, dict)}
    for row in rows:
        old = old_rows.get(row["concurrency"])
        if not old:
            continue
        for key in ("aggregate_tok_s", "request_tok_s"):
            now, then = _number(row.get(key)), _number(old.get(key))
            if now is None or not then:
                continue
            change = (now - then) / then
            out["deltas"].append({"concurrency": row["concurrency"], "metric": key, "previous": _round(then),
                                  "now": _round(now), "change": _round(change)})
            if change < -threshold:
                out["regressions"].append(f"c={row['concurrency']} {key} {then:.1f} -> {now:.1f} ({change:+.0%}, "
                                          f"threshold -{threshold:.0%})")
    out["compared"] = bool(out["deltas"])
    out["reason"] = "" if out["compared"] else "no concurrency measured by both runs"
    return out


RELEASE_KEYS = ("image", "image_id", "image_ids", "model", "model_revision", "served_model_name", "backend", "settings")


def document(*, cluster: str, date: str, engine: str, release: t.Mapping[str, t.Any], endpoint: str, via: str,
             settings: t.Mapping[str, t.Any], hardware: t.Any, rows: t.Sequence[t.Mapping[str, t.Any]],
             steps: t.Sequence[t.Mapping[str, t.Any]], tool_version: str = TOOL_VERSION) -> dict[str, t.Any]:
    """The run's JSON document (what ``<cluster>/<date>.json`` holds), without the comparison."""
    return {
        "cluster": cluster, "date": date,
        "engine": engine,
        "figures": ("pipeline only: the lab's stand-in engine generates without a GPU, its speeds mean nothing"
                    if engine == "stand-in" else "measured"),
        "tool": {"name": TOOL, "version": tool_version},
        "model": release.get("model", ""), "served_model_name": release.get("served_model_name", ""),
        "release": {key: release.get(key) for key in RELEASE_KEYS if key in release},
        "image_id": release.get("image_id", ""),
        "endpoint": endpoint, "via": via,
        "settings": dict(settings),
        "hardware": hardware,
        "status": ("ok" if steps and all(s.get("status") == "ok" for s in steps) else "incomplete"),
        "steps": [dict(s) for s in steps],
        "rows": [{k: _round(v) for k, v in r.items()} for r in rows],
    }


def headline(doc: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Single-stream figures (the concurrency-1 row, else the lowest measured): decode tok/s, TTFT, ITL."""
    rows = sorted(doc.get("rows") or [], key=lambda r: r.get("concurrency") or 0)
    if not rows:
        return {}
    first = rows[0]
    return {"concurrency": first.get("concurrency"), "decode_tok_s": first.get("request_tok_s"),
            "ttft_ms": first.get("ttft_ms_p50"), "itl_ms": first.get("itl_ms_p50"),
            "peak_aggregate_tok_s": max((r.get("aggregate_tok_s") or 0.0) for r in rows)}


def csv_text(doc: t.Mapping[str, t.Any]) -> str:
    """One CSV line per concurrency step, with the run's identity repeated on every line."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    common = {"cluster": doc.get("cluster"), "date": doc.get("date"), "engine": doc.get("engine"),
              "model": doc.get("model"), "image_id": doc.get("image_id"), "status": doc.get("status"),
              "prompt_tokens": (doc.get("settings") or {}).get("prompt_tokens"),
              "output_tokens": (doc.get("settings") or {}).get("output_tokens")}
    for row in doc.get("rows") or []:
        writer.writerow({**common, **{k: ("" if v is None else v) for k, v in row.items() if k in CSV_FIELDS}})
    return buf.getvalue()


def _cell(fmt: str, value: t.Any) -> str:
    if value is None or value == "":
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def table(doc: t.Mapping[str, t.Any]) -> list[str]:
    """The printed table: a title line, a heading and a line per concurrency step, then the comparison."""
    settings = doc.get("settings") or {}
    title = (f"{doc.get('cluster')}: {doc.get('model')} ({doc.get('engine')}"
             + (", PIPELINE ONLY: stand-in figures" if doc.get("engine") == "stand-in" else "")
             + f") via {doc.get('via')} {doc.get('endpoint')}, prompt {settings.get('prompt_tokens')} / output "
             f"{settings.get('output_tokens')} tokens, {doc.get('tool', {}).get('name')} "
             f"{doc.get('tool', {}).get('version')}, {doc.get('date')}")
    heads = [head for _key, head, _fmt in COLUMNS]
    cells = [[_cell(fmt, row.get(key)) for key, _head, fmt in COLUMNS] for row in doc.get("rows") or []]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths)) for cell in cells]
    for step in doc.get("steps") or []:
        if step.get("status") != "ok":
            lines.append(f"c={step.get('concurrency')}: {step.get('status')}: {step.get('detail', '')}")
    comparison = doc.get("comparison") or {}
    if comparison.get("regressions"):
        lines.append(f"REGRESSION against {comparison.get('previous')}: " + "; ".join(comparison["regressions"]))
    elif comparison.get("compared"):
        lines.append(f"no regression against {comparison.get('previous')} (threshold "
                     f"{comparison.get('threshold', 0):.0%})")
    else:
        lines.append(f"not compared: {comparison.get('reason') or 'no previous run'}")
    return lines


def stop_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """Terminate PROC's process group (it leads a session of its own), then kill it after GRACE seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_bounded(argv: list[str], *, stdin: bytes, log: t.IO[bytes], env: dict[str, str], cwd: str,
                timeout: float) -> tuple[int | None, bool]:
    """Run ARGV in a session of its own with STDIN written and closed (a key never reaches an argv), its output to
    LOG; past TIMEOUT seconds, or on any exception here, the whole group is stopped (llama-benchy's children too).
    Returns (returncode, timed_out)."""
    # pylint: disable-next=consider-using-with,ansible-bad-function
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            start_new_session=True)
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        return proc.returncode, True
    except BaseException:
        stop_group(proc)
        raise
    return proc.returncode, False
