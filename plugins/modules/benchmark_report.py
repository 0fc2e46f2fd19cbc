#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.benchmark_report."""

from __future__ import annotations

DOCUMENTATION = r"""
module: benchmark_report
short_description: Write a benchmark run as JSON, CSV and a PNG plot, compared with the cluster's previous run
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Takes the rows of a concurrency sweep (from M(dgxspark.vllm.benchmark_run)) with the run's identity (release,
    image ID, model, settings, hardware facts, date, engine) and writes C(RESULTS/CLUSTER/DATE.json), C(.csv) and
    C(.png), then points C(RESULTS/CLUSTER/latest.json) at the new JSON.
  - The previous run of the same cluster (what C(latest.json) pointed at) is compared with this one; a drop of
    aggregate or per-request decode tok/s by more than O(regression_threshold) at a concurrency both measured is a
    regression (RV(regressions)). It is drawn beside this run in the PNG.
  - The PNG (matplotlib, Agg backend) has two panels against concurrency, throughput and latency, with labelled
    axes and a legend; a stand-in engine's run is titled as pipeline-only figures.
  - Runs on the controller in the benchmark's virtualenv (matplotlib is not a requirement of the collection).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the previous run, compares and returns the table; writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: none
    details: Every run is a new dated set of files.
  platform:
    support: full
    platforms: posix
options:
  results_dir:
    description: The results directory; each cluster gets a directory in it.
    type: path
    required: true
  cluster:
    description: The cluster's name (a file name component).
    type: str
    required: true
  date:
    description: The run's UTC date, C(YYYYMMDDTHHMMSSZ) (the files' name).
    type: str
    required: true
  release:
    description: The release record the cluster's head serves (C(release.json)).
    type: dict
    required: true
  endpoint:
    description: The URL the benchmark sent its requests to.
    type: str
    required: true
  via:
    description: C(gateway) or C(cluster endpoint).
    type: str
    required: true
  settings:
    description: The benchmark's settings (concurrency, prompt and output tokens, runs, timeouts).
    type: dict
    required: true
  hardware:
    description: Hardware facts of the cluster's members (from the same reads as the preflight's).
    type: raw
    default: {}
  rows:
    description: One row per concurrency step that ran to the end (M(dgxspark.vllm.benchmark_run)'s RV(dgxspark.vllm.benchmark_run#module:row)).
    type: list
    elements: dict
    required: true
  steps:
    description: Every step with its C(concurrency), C(status) and C(detail).
    type: list
    elements: dict
    required: true
  counters:
    description:
      - Per step, C(concurrency), and C(before) and C(after) - the engine's C(/metrics) lines (or text) read on the
        cluster's head around the step. They give the tokens the engine generated and, with speculative decoding,
        drafts, drafted and accepted tokens, the acceptance rate and the mean acceptance length; and whether the
        engine is the lab's stand-in (C(dgxspark_lab_stand_in)), whose figures are then marked pipeline-only.
    type: list
    elements: dict
    default: []
  regression_threshold:
    description: A drop by more than this fraction is a regression.
    type: float
    default: 0.1
  tool_version:
    description: llama-benchy's version.
    type: str
    default: 0.4.0
requirements:
  - matplotlib (in the python the module runs with)
seealso:
  - module: dgxspark.vllm.benchmark_run
"""

EXAMPLES = r"""
- name: Write the results and the plot
  dgxspark.vllm.benchmark_report:
    results_dir: /home/me/benchmark_results
    cluster: pair1
    date: 20261201T101500Z
    release: "{{ benchmark_release }}"
    endpoint: http://10.20.0.11:8000/v1
    via: cluster endpoint
    settings: {concurrency: [1, 2, 4], prompt_tokens: 512, output_tokens: 128}
    rows: "{{ benchmark_rows }}"
    steps: "{{ benchmark_steps }}"
  delegate_to: localhost
  vars:
    ansible_python_interpreter: /home/me/.cache/dgxspark/benchmark/venv/bin/python
"""

RETURN = r"""
files:
  description: The files written (or that would be, in check mode).
  returned: always
  type: dict
  sample: {json: /r/pair1/20261201T101500Z.json, csv: /r/pair1/20261201T101500Z.csv, png: /r/pair1/20261201T101500Z.png}
previous:
  description: The previous run's JSON file, or empty.
  returned: always
  type: str
regressions:
  description: One sentence per figure that dropped beyond the threshold.
  returned: always
  type: list
  elements: str
table:
  description: The printed table, a line each.
  returned: always
  type: list
  elements: str
headline:
  description: Single-stream decode tok/s, TTFT and ITL, and the peak aggregate tok/s.
  returned: always
  type: dict
document:
  description: What the JSON file holds.
  returned: always
  type: dict
"""

import json
import os
import re
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import _benchmark


def previous_run(directory):
    """The previous run's (path, document) in a cluster's directory: latest.json's target, else the newest dated
    JSON; (\"\", None) when there is none or it does not parse."""
    latest = os.path.join(directory, "latest.json")
    candidates = []
    if os.path.islink(latest):
        candidates.append(os.path.join(directory, os.readlink(latest)))
    if os.path.isdir(directory):
        candidates += [os.path.join(directory, name) for name in sorted(os.listdir(directory), reverse=True)
                       if re.fullmatch(r"\d{8}T\d{6}Z\.json", name)]
    for path in candidates:
        try:
            with open(path, encoding="utf-8") as handle:
                doc = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            return path, doc
    return "", None


def _series(doc, key):
    rows = sorted((r for r in doc.get("rows") or [] if r.get(key) is not None), key=lambda r: r["concurrency"])
    return [r["concurrency"] for r in rows], [r[key] for r in rows]


def plot(doc, previous, path):
    """Throughput and latency against concurrency, this run solid and the previous one dashed, to PATH (PNG)."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=import-outside-toplevel

    fig, (left, right) = pyplot.subplots(1, 2, figsize=(12, 5), dpi=100)
    runs = [(doc, "-", "o", "this run")]
    if previous:
        runs.append((previous, "--", "s", "previous"))
    for run, style, marker, label in runs:
        when = f"{label} {run.get('date', '')}"
        for key, name, colour in (("aggregate_tok_s", "aggregate tok/s", "tab:blue"),
                                  ("request_tok_s", "per-request tok/s", "tab:green")):
            xs, ys = _series(run, key)
            if xs:
                left.plot(xs, ys, linestyle=style, marker=marker, color=colour, alpha=1.0 if style == "-" else 0.6,
                          label=f"{name} ({when})")
        for key, name, colour in (("ttft_ms_p50", "TTFT p50", "tab:orange"), ("ttft_ms_p99", "TTFT p99", "tab:red"),
                                  ("itl_ms_p50", "ITL p50", "tab:purple")):
            xs, ys = _series(run, key)
            if xs:
                right.plot(xs, ys, linestyle=style, marker=marker, color=colour, alpha=1.0 if style == "-" else 0.6,
                           label=f"{name} ({when})")
    for axis, ylabel, title in ((left, "tokens per second", "Decode throughput"),
                                (right, "milliseconds", "Latency")):
        axis.set_xscale("log", base=2)
        levels = sorted({r["concurrency"] for r in (doc.get("rows") or []) + ((previous or {}).get("rows") or [])})
        if levels:
            axis.set_xticks(levels)
            axis.set_xticklabels([str(level) for level in levels])
        axis.set_xlabel("concurrency (requests in flight)")
        axis.set_ylabel(ylabel)
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7, loc="best")
    settings = doc.get("settings") or {}
    title = (f"{doc.get('cluster')}: {doc.get('model')}, prompt {settings.get('prompt_tokens')} / output "
             f"{settings.get('output_tokens')} tokens, via {doc.get('via')}")
    if doc.get("engine") == "stand-in":
        title += "\nlab STAND-IN engine: pipeline only, the figures mean nothing"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".plot-", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    finally:
        pyplot.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".result-")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def report(params, check_mode=False):
    """The module's result; writes the files unless CHECK_MODE."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", params["cluster"]):
        raise ValueError(f"cluster must be a name (letters, digits, _.-), is {params['cluster']!r}")
    if not re.fullmatch(r"\d{8}T\d{6}Z", params["date"]):
        raise ValueError(f"date must be YYYYMMDDTHHMMSSZ, is {params['date']!r}")
    directory = os.path.join(params["results_dir"], params["cluster"])
    previous_path, previous = previous_run(directory)
    rows, engine = _benchmark.merge_counters(params["rows"], params["counters"])
    doc = _benchmark.document(cluster=params["cluster"], date=params["date"], engine=engine,
                              release=params["release"], endpoint=params["endpoint"], via=params["via"],
                              settings=params["settings"], hardware=params["hardware"], rows=rows,
                              steps=params["steps"], tool_version=params["tool_version"])
    doc["comparison"] = _benchmark.compare(doc["rows"], previous, params["regression_threshold"], doc)
    doc["comparison"]["previous_file"] = os.path.basename(previous_path)
    doc["headline"] = _benchmark.headline(doc)
    base = os.path.join(directory, params["date"])
    files = {"json": base + ".json", "csv": base + ".csv", "png": base + ".png"}
    if not check_mode:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        write_text(files["csv"], _benchmark.csv_text(doc))
        plot(doc, previous, files["png"])
        write_text(files["json"], json.dumps(doc, indent=2, sort_keys=True) + "\n")
        latest = os.path.join(directory, "latest.json")
        tmp = os.path.join(directory, ".latest.json")
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.path.basename(files["json"]), tmp)
        os.replace(tmp, latest)
    return {"changed": not check_mode, "files": files, "previous": previous_path,
            "regressions": doc["comparison"]["regressions"], "table": _benchmark.table(doc),
            "headline": doc["headline"], "document": doc}


def main():
    module = AnsibleModule(
        argument_spec={
            "results_dir": {"type": "path", "required": True},
            "cluster": {"type": "str", "required": True},
            "date": {"type": "str", "required": True},
            "release": {"type": "dict", "required": True},
            "endpoint": {"type": "str", "required": True},
            "via": {"type": "str", "required": True},
            "settings": {"type": "dict", "required": True},
            "hardware": {"type": "raw", "default": {}},
            "rows": {"type": "list", "elements": "dict", "required": True},
            "steps": {"type": "list", "elements": "dict", "required": True},
            "counters": {"type": "list", "elements": "dict", "default": []},
            "regression_threshold": {"type": "float", "default": 0.1},
            "tool_version": {"type": "str", "default": _benchmark.TOOL_VERSION},
        },
        supports_check_mode=True,
    )
    try:
        result = report(module.params, module.check_mode)
    except ImportError as exc:
        module.fail_json(msg=f"benchmark_report: matplotlib is not importable in {sys.executable} ({exc}); "
                             "run it in the benchmark's virtualenv (role dgxspark.vllm.benchmark)")
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"benchmark_report: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
