#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.benchmark_run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: benchmark_run
short_description: One concurrency step of llama-benchy against an OpenAI endpoint, bounded in time
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs llama-benchy (U(https://github.com/eugr/llama-benchy)) once, at one concurrency, against O(base_url), and
    returns its result as one row (aggregate and per-request decode tok/s, time to first token, inter-token latency
    and end-to-end percentiles).
  - Runs where llama-benchy is installed; the role C(dgxspark.vllm.benchmark) runs it on the controller with
    C(ansible_python_interpreter) set to the python of the virtualenv it made for llama-benchy.
  - The API key reaches llama-benchy on its standard input, read by a three-line wrapper that hands it to
    llama-benchy's configuration, never on a command line (llama-benchy 0.4.0 reads no key from the environment).
  - llama-benchy's corpus (its C(--book-url)) is read from its cache under O(home). With O(corpus) the local text file
    is put there first, under the name llama-benchy gives O(book_url), so no network is needed; the module checks
    that llama-benchy said it loaded the text from the cache.
  - O(timeout) bounds the step; when it passes, llama-benchy and anything it started are terminated (then killed)
    and RV(status) is C(timeout).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Runs nothing in check mode (RV(status) is C(skipped)).
  diff_mode:
    support: none
  idempotent:
    support: none
    details: A measurement; only the corpus in the cache is written, and only when it differs.
  platform:
    support: full
    platforms: posix
options:
  base_url:
    description: The OpenAI endpoint, with C(/v1).
    type: str
    required: true
  api_key:
    description: The endpoint's API key (given to llama-benchy on its standard input).
    type: str
    default: ""
  ca_file:
    description:
      - A PEM file of the certificates llama-benchy trusts for an C(https) O(base_url) (the gateway's own, which is
        self-signed unless the inventory gives one); empty, the system's.
    type: path
    default: ""
    version_added: 0.10.0
  model:
    description: The model's name for the report (its Hugging Face id).
    type: str
    required: true
  served_model_name:
    description: The model name the endpoint serves (the requests' C(model)).
    type: str
    required: true
  tokenizer:
    description: A local C(tokenizer.json), or a directory holding one (the served model's own, so no Hub access is needed).
    type: path
    required: true
  prompt_tokens:
    description: Prompt length in tokens (llama-benchy C(--pp)).
    type: int
    required: true
  output_tokens:
    description: Tokens every request generates (llama-benchy C(--tg) with C(--exact-tg)).
    type: int
    required: true
  concurrency:
    description: Requests in flight at once.
    type: int
    required: true
  runs:
    description: Batches of O(concurrency) requests (llama-benchy C(--runs)).
    type: int
    default: 1
  warmup:
    description: Let llama-benchy warm the engine up first (the first step of a sweep).
    type: bool
    default: false
  book_url:
    description: llama-benchy's corpus URL; with O(corpus) only the name it is cached under.
    type: str
    required: true
  corpus:
    description:
      - A local text file to use as the corpus, put into llama-benchy's cache for O(book_url).
      - Empty lets llama-benchy download O(book_url) (once; it caches it).
    type: path
  home:
    description: The HOME llama-benchy runs with (its cache is C(HOME/.cache/llama-benchy)); made when missing.
    type: path
    required: true
  timeout:
    description: Seconds the step may take before llama-benchy is stopped.
    type: float
    required: true
requirements:
  - llama-benchy 0.4.0 in the python the module runs with
seealso:
  - module: dgxspark.vllm.benchmark_report
"""

EXAMPLES = r"""
- name: One step of the sweep, on the controller, in the benchmark's virtualenv
  dgxspark.vllm.benchmark_run:
    base_url: http://10.20.0.11:8000/v1
    api_key: "{{ dgxspark_api_key }}"
    model: Qwen/Qwen3.5-122B-A10B-FP8
    served_model_name: qwen3.5-122b-a10b-fp8
    tokenizer: /home/me/.cache/dgxspark/benchmark/tokenizers/pair1
    prompt_tokens: 512
    output_tokens: 128
    concurrency: 4
    book_url: https://www.gutenberg.org/files/1661/1661-0.txt
    home: /home/me/.cache/dgxspark/benchmark/home
    timeout: 300
  delegate_to: localhost
  vars:
    ansible_python_interpreter: /home/me/.cache/dgxspark/benchmark/venv/bin/python
"""

RETURN = r"""
status:
  description:
    - C(ok), C(failed) (llama-benchy stopped with an error, no request succeeded, or no decode time could be measured),
      C(timeout) or C(skipped) (check mode).
  returned: always
  type: str
  sample: ok
detail:
  description: Why a step is not C(ok) (the end of llama-benchy's output).
  returned: always
  type: str
  sample: ""
row:
  description: The step's figures (see C(plugins/module_utils/_benchmark.py) step_row); empty unless RV(status) is C(ok).
  returned: always
  type: dict
  sample: {concurrency: 4, requests_ok: 4, aggregate_tok_s: 61.2, request_tok_s: 15.8, ttft_ms_p50: 212.0}
seconds:
  description: How long the step took.
  returned: always
  type: float
  sample: 12.4
argv:
  description: llama-benchy's arguments (the key is not among them).
  returned: always
  type: list
  elements: str
output:
  description: The last lines of llama-benchy's output.
  returned: always
  type: str
"""

import json
import os
import shutil
import sys
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import _benchmark

# The key comes on stdin; llama-benchy parses sys.argv, which is not the process's command line (/proc/PID/cmdline).
WRAPPER = ("import sys\nkey = sys.stdin.readline().rstrip('\\n')\n"
           "sys.argv = ['llama-benchy', *sys.argv[1:], '--api-key', key or 'EMPTY']\n"
           "from llama_benchy.__main__ import main\nmain()\n")


def seed_corpus(corpus, book_url, home):
    """Put CORPUS into llama-benchy's cache under HOME for BOOK_URL; True when the cache changed."""
    cache = os.path.join(home, ".cache", "llama-benchy")
    target = os.path.join(cache, _benchmark.book_cache_name(book_url))
    with open(corpus, "rb") as handle:
        text = handle.read()
    if not text.strip():
        raise ValueError(f"the corpus {corpus} is empty")
    text.decode("utf-8")  # llama-benchy reads the cache as UTF-8
    if os.path.isfile(target):
        with open(target, "rb") as handle:
            if handle.read() == text:
                return False
    os.makedirs(cache, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, prefix=".corpus-")
    with os.fdopen(fd, "wb") as handle:
        handle.write(text)
    os.replace(tmp, target)
    return True


def run_step(params, python=sys.executable, clock=time.monotonic):
    """Run one step; the module's result (without 'changed')."""
    work = tempfile.mkdtemp(prefix="dgxspark-benchmark-")
    try:
        result_file, progress_file = os.path.join(work, "result.json"), os.path.join(work, "progress.jsonl")
        argv = _benchmark.step_argv(
            base_url=params["base_url"], model=params["model"], served_model_name=params["served_model_name"],
            tokenizer=params["tokenizer"], prompt_tokens=params["prompt_tokens"], output_tokens=params["output_tokens"],
            concurrency=params["concurrency"], runs=params["runs"], book_url=params["book_url"],
            result_file=result_file, progress_file=progress_file, warmup=params["warmup"])
        env = dict(os.environ, HOME=params["home"], HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
        if params.get("ca_file"):
            # aiohttp's default context reads OpenSSL's default file, which SSL_CERT_FILE names.
            env["SSL_CERT_FILE"] = params["ca_file"]
        out = {"argv": argv, "row": {}, "detail": ""}
        began = clock()
        with tempfile.TemporaryFile(dir=work) as log:
            returncode, timed_out = _benchmark.run_bounded(
                [python, "-c", WRAPPER, *argv], stdin=(params["api_key"] or "").encode() + b"\n", log=log, env=env,
                cwd=work, timeout=params["timeout"])
            out["seconds"] = round(clock() - began, 2)
            log.seek(0)
            text = log.read().decode(errors="replace")
        out["output"] = "\n".join(text.splitlines()[-40:])
        if timed_out:
            detail = f"llama-benchy stopped after {params['timeout']:g} s (benchmark_step_timeout)"
            return dict(out, status="timeout", detail=detail)
        if params["corpus"] and _benchmark.CACHE_LINE not in text:
            return dict(out, status="failed", detail="llama-benchy did not load the corpus from its cache (no "
                                                     f"'{_benchmark.CACHE_LINE.strip()}' in its output)")
        if returncode != 0 or not os.path.isfile(result_file):
            return dict(out, status="failed", detail=f"llama-benchy exited with {returncode}: "
                                                     + " | ".join(text.strip().splitlines()[-5:]))
        with open(result_file, encoding="utf-8") as handle:
            result = json.load(handle)
        events = []
        if os.path.isfile(progress_file):
            with open(progress_file, encoding="utf-8") as handle:
                events = _benchmark.progress_events(handle.read())
        row = _benchmark.step_row(result, events, params["concurrency"], seconds=out["seconds"])
        if not row["requests_ok"]:
            return dict(out, row=row, status="failed",
                        detail="no request succeeded: " + ("; ".join(row["errors"]) or text.strip()[-300:]))
        if row["aggregate_tok_s"] is None:
            # Every token of every request reached llama-benchy in one read (the client starved of CPU, or a proxy
            # buffering the stream): it had no decode time to divide by.
            return dict(out, row=row, status="failed",
                        detail=f"{row['requests_ok']} request(s) succeeded but llama-benchy could not time their decode "
                               "(each stream's tokens arrived at once: a buffering proxy, or the controller short of "
                               "CPU); raise benchmark_output_tokens or run it from a less loaded controller")
        return dict(out, row=row, status="ok")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    module = AnsibleModule(
        argument_spec={
            "base_url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "ca_file": {"type": "path", "default": ""},
            "model": {"type": "str", "required": True},
            "served_model_name": {"type": "str", "required": True},
            "tokenizer": {"type": "path", "required": True},
            "prompt_tokens": {"type": "int", "required": True, "no_log": False},
            "output_tokens": {"type": "int", "required": True, "no_log": False},
            "concurrency": {"type": "int", "required": True},
            "runs": {"type": "int", "default": 1},
            "warmup": {"type": "bool", "default": False},
            "book_url": {"type": "str", "required": True},
            "corpus": {"type": "path"},
            "home": {"type": "path", "required": True},
            "timeout": {"type": "float", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not os.path.exists(params["tokenizer"]):
        module.fail_json(msg=f"benchmark_run: the tokenizer {params['tokenizer']} does not exist")
    if params["corpus"] and not os.path.isfile(params["corpus"]):
        module.fail_json(msg=f"benchmark_run: the corpus {params['corpus']} is not a file (benchmark_corpus)")
    if params["timeout"] <= 0:
        module.fail_json(msg="benchmark_run: timeout must be above 0 seconds")
    if module.check_mode:
        module.exit_json(changed=False, status="skipped", detail="check mode", row={}, seconds=0.0, argv=[], output="")
    changed = False
    try:
        os.makedirs(params["home"], mode=0o700, exist_ok=True)
        if params["corpus"]:
            changed = seed_corpus(params["corpus"], params["book_url"], params["home"])
        result = run_step(params)
    except (OSError, ValueError) as exc:  # BenchmarkError is a ValueError
        module.fail_json(msg=f"benchmark_run: {exc}", changed=changed)
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
