"""The lab engine driven by hand on two lab nodes: plain `docker` commands inside the nodes, none of the collection's roles.

What an operator does on a pair of Sparks with the field's `vllm-node` image: a Ray head container on node 1 and a worker
container on node 2 (the image's own run-cluster-node.sh, `--network host --ipc host`, the fabric interface and address of
each node in NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / VLLM_HOST_IP), then `docker exec` of `vllm serve ... -tp 2
--distributed-executor-backend ray` in the head container, its API on node 1's LAN address (the fabric is point to point:
only node 2 reaches it). Then the field's failure modes: the worker's container stopped, the head's interface name
copied to a worker cabled on the other CX7 port, the Qwen3.5 files of 0.17 grafted into 0.14, transformers 5 in 0.14.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request

import pytest

from labkit import BIN, INVENTORY, LAB, ansible_env, fabric_if, fabric_ip, mgmt_ip, node, node_exec, run, tested_with

pytestmark = pytest.mark.lab_minutes(1)  # labkit: the order files are handed out

OLD, NEW = "lab/vllm-node:0.14", "lab/vllm-qwen35:0.17"
LABEL = "org.dgxspark.test=engine-two-node"  # every container this file starts carries it (cleanup by label)
MODELS = "/srv/dgxspark-test/models"  # on each node, bind-mounted as /models
GRAFT_DIR = "/srv/dgxspark-test/graft"  # on node 1: the files of the graft
WHEELS = "/srv/dgxspark-test/wheels"  # on node 1
QWEN3, QWEN35 = "/models/Qwen3-30B-A3B", "/models/Qwen3.5-122B-A10B-FP8"
SERVED = "qwen3-moe"
PORT, PORT_TP1 = 8000, 8001
HEAD, WORKER, TP1 = "handtest-ray-head", "handtest-ray-worker", "handtest-tp1"
GRAFT_IMAGE = "handtest/vllm-node-graft:0.14-qwen35"
SITE = "/opt/venv/lib/python3.11/site-packages"
FAILED = ("Model architectures ['Qwen3_5MoeForConditionalGeneration'] failed to be inspected. "
          "Please check the logs for more details.")
IMPORT_ERROR = ("ImportError: cannot import name 'MambaStateCopyFunc' from "
                "'vllm.model_executor.layers.mamba.mamba_utils'")
# `vllm serve` in the background of the head container; its output, PID and exit status land in files there.
SERVE_SH = '"$@" > /tmp/serve.log 2>&1 & echo $! > /tmp/serve.pid; wait $!; echo $? > /tmp/serve.rc'
# Alive Ray nodes and GPUs, asked from inside the head container.
PROBE = ("import json, ray\nray.init(address='auto', logging_level='ERROR', log_to_driver=False)\n"
         "print(json.dumps({'alive': sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']),"
         " 'gpus': ray.cluster_resources().get('GPU', 0)}))\n")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the lab's LAN is never behind a proxy


def docker(i, *argv, check=True, input_text=None):
    """`docker ...` run inside lab node i."""
    return node_exec(node(i), "docker", *argv, check=check, input_text=input_text)


def rank_line(i, rank_text):
    """A line of the rank actor on node i as it reaches the driver's log (Ray tags remote actors with their node's IP)."""
    ip_tag = "" if i == 1 else ", ip=" + re.escape(fabric_ip(i))
    return rf"(?m)^\(RayWorkerWrapper pid=\d+{ip_tag}\) {re.escape(node(i))}:\d+:\d+ \[0\] {rank_text}$"


def cleanup(i):
    ids = docker(i, "ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout.split()
    if ids:
        docker(i, "rm", "-f", *ids, check=False)


def remove_cluster():
    docker(1, "rm", "-f", HEAD, check=False)
    docker(2, "rm", "-f", WORKER, check=False)


def start_ray(i, ifname):
    """Ray head (node 1) or worker (node 2) container, by hand, with the image's run-cluster-node.sh entrypoint."""
    env = {"RAY_NODE_TYPE": "head" if i == 1 else "worker", "VLLM_HOST_IP": fabric_ip(i), "RAY_HEAD_IP": fabric_ip(1),
           "NCCL_SOCKET_IFNAME": ifname, "GLOO_SOCKET_IFNAME": ifname, "NCCL_DEBUG": "INFO",
           # Ray holds back log lines that look alike across nodes (rank 1's NCCL lines look like rank 0's) until exit
           "RAY_DEDUP_LOGS": "0",
           # lighter on a loaded 2-core machine (no dashboard modules, small object store)
           "RAY_EXTRA_ARGS": ("--include-dashboard=false " if i == 1 else "") + "--object-store-memory=100000000"}
    # --gpus all: a Spark's containers have the GPU only when Docker is asked for it (as every reference recipe does).
    docker(i, "run", "-d", "--name", HEAD if i == 1 else WORKER, "--label", LABEL, "--gpus", "all", "--network", "host",
           "--ipc", "host",
           "-v", f"{MODELS}:/models:ro", *[f"--env={k}={v}" for k, v in env.items()], OLD)


def ray_logs():
    return "\n".join(f"--- docker logs {c} (on {node(i)}):\n{p.stdout}{p.stderr}"
                     for i, c in ((1, HEAD), (2, WORKER)) for p in [docker(i, "logs", "--tail", "15", c, check=False)])


def wait_cluster(deadline_s=120):
    """True once both nodes are alive in the cluster with a GPU each; False if a Ray container died on the way."""
    end = time.monotonic() + deadline_s
    want = {"alive": [fabric_ip(1), fabric_ip(2)], "gpus": 2.0}
    while True:
        proc = docker(1, "exec", HEAD, "python3", "-c", PROBE, check=False)
        lines = proc.stdout.strip().splitlines()
        seen = json.loads(lines[-1]) if proc.returncode == 0 and lines else proc.stderr[-500:]
        if seen == want:
            return True
        running = [docker(i, "inspect", "-f", "{{.State.Running}}", c).stdout.strip() for i, c in ((1, HEAD), (2, WORKER))]
        if running != ["true", "true"]:
            return False
        assert time.monotonic() < end, f"the Ray cluster did not come up in {deadline_s}s: {seen}\n{ray_logs()}"
        time.sleep(1)


def bring_up(worker_ifname):
    """Fresh Ray head and worker. Ray's own start-up can lose a race on a loaded machine (ray_client_server gives up
    after 30 s waiting for its raylet, and `ray start --block` then stops the node): one more try, then fail."""
    for attempt in (1, 2):
        remove_cluster()
        start_ray(1, fabric_if(1))
        start_ray(2, worker_ifname)
        if wait_cluster():
            return
        assert attempt == 1, f"a Ray container exited during start-up, twice:\n{ray_logs()}"


def start_serve():
    docker(1, "exec", HEAD, "rm", "-f", "/tmp/serve.log", "/tmp/serve.pid", "/tmp/serve.rc")
    docker(1, "exec", "-d", HEAD, "sh", "-c", SERVE_SH, "sh",
           "vllm", "serve", QWEN3, "--served-model-name", SERVED, "--tensor-parallel-size", "2",
           "--distributed-executor-backend", "ray", "--host", mgmt_ip(1), "--port", str(PORT), "--max-model-len", "4096",
           # A Spark has at most about 102 of its 121.7 GiB free (the lab's nodes model it): vLLM's default 0.9 never starts.
           "--gpu-memory-utilization", "0.8")


def serve_log():
    return ANSI.sub("", docker(1, "exec", HEAD, "cat", "/tmp/serve.log", check=False).stdout)


def serve_rc():
    """Exit status of `vllm serve` in the head container, None while it runs."""
    proc = docker(1, "exec", HEAD, "cat", "/tmp/serve.rc", check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def http(method, path, body=None, port=PORT, timeout=60):
    """(status, body) of a request to node 1's LAN address; connection errors are raised."""
    req = urllib.request.Request(f"http://{mgmt_ip(1)}:{port}{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with HTTP.open(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_ready(port, alive, describe, deadline_s=120):
    """Poll /health until 200; `alive()` says whether the server process still runs."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            if http("GET", "/health", port=port, timeout=5)[0] == 200:
                return
        except OSError:
            pass
        assert alive(), f"the server exited before it was ready:\n{describe()[-6000:]}"
        assert time.monotonic() < end, f"not ready after {deadline_s}s:\n{describe()[-6000:]}"
        time.sleep(0.5)


def wait_log(patterns, deadline_s):
    """The serve log once every regex in `patterns` matches it (the serve process must keep running)."""
    end = time.monotonic() + deadline_s
    while True:
        log = serve_log()
        missing = [p for p in patterns if not re.search(p, log)]
        if not missing:
            return log
        assert serve_rc() is None, f"vllm serve exited ({serve_rc()}):\n{log[-6000:]}"
        assert time.monotonic() < end, f"not in the log after {deadline_s}s: {missing}\n{log[-6000:]}"
        time.sleep(0.5)


def chat(prompt, port=PORT):
    code, raw = http("POST", "/v1/chat/completions", {"model": SERVED, "messages": [{"role": "user", "content": prompt}]},
                     port=port)
    assert code == 200, raw
    return json.loads(raw)


def metric(name):
    code, text = http("GET", "/metrics")
    assert code == 200
    found = re.search(rf'(?m)^{re.escape(name)}{{engine="0",model_name="{SERVED}"}} (\S+)$', text)
    assert found, f"{name} not in /metrics:\n{text[:3000]}"
    return float(found.group(1))


@pytest.fixture(scope="module")
def engine_lab(lab, request):
    """Both engine images in both nodes, and the tiny model directories on both nodes; everything removed at the end."""

    def teardown():
        for i in (1, 2):
            cleanup(i)
            node_exec(node(i), "rm", "-rf", "/srv/dgxspark-test", check=False)
        docker(1, "image", "rm", GRAFT_IMAGE, check=False)

    request.addfinalizer(teardown)
    run([*LAB, "images", "vllm-node-0.14", "vllm-qwen35-0.17"])
    run([*LAB, "load", OLD, NEW])
    for i in (1, 2):
        cleanup(i)  # leftovers of an interrupted run
        node_exec(node(i), "mkdir", "-p", MODELS)
        docker(i, "run", "--rm", "--label", LABEL, "-v", f"{MODELS}:/models", "--entrypoint", "python3", OLD,
               "/opt/lab/make_models.py", "--out", "/models", "--shard-kb", "64")
    return lab


@pytest.fixture(scope="module")
def cluster(engine_lab):
    """Ray head on node 1, worker on node 2, `vllm serve` TP=2 over both, answering on node 1's fabric address."""
    bring_up(fabric_if(2))
    start_serve()
    wait_ready(PORT, lambda: serve_rc() is None, serve_log)
    return engine_lab


def test_tp2_chat_completion_crosses_both_ranks_and_metrics_advance(cluster):
    # rank 1 is the actor on node 2: it bound on node 2's fabric interface and completed the NCCL-style init with rank 0
    log = wait_log([
        rf'workers: \["rank=0 ip={re.escape(fabric_ip(1))} node=\w+ gpus=\[\'0\'\]", '
        rf'"rank=1 ip={re.escape(fabric_ip(2))} node=\w+ gpus=\[\'0\'\]"\]',
        rank_line(1, re.escape(f"NCCL INFO Bootstrap : Using {fabric_if(1)}:{fabric_ip(1)}<0>")),
        rank_line(1, r"NCCL INFO ncclCommInitRank comm 0x[0-9a-f]+ rank 0 nranks 2 .* - Init COMPLETE"),
        rank_line(2, re.escape(f"NCCL INFO Bootstrap : Using {fabric_if(2)}:{fabric_ip(2)}<0>")),
        rank_line(2, re.escape("NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0")),
        rank_line(2, r"NCCL INFO ncclCommInitRank comm 0x[0-9a-f]+ rank 1 nranks 2 .* - Init COMPLETE"),
    ], deadline_s=30)
    assert "ERROR" not in log and "Traceback" not in log, log[-6000:]
    tested_with("vllm", f"`{OLD}`: the stand-in engine (lab/engine)", lambda: json.loads(http("GET", "/version")[1])["version"])

    answers = {}
    for prompt in ("Which link carries the all-reduce?", "Say hello to both Sparks.", "Which link carries the all-reduce?"):
        gen, prompt_total = metric("vllm:generation_tokens_total"), metric("vllm:prompt_tokens_total")
        reply = chat(prompt)
        usage = reply["usage"]
        assert usage["completion_tokens"] > 0 and reply["choices"][0]["message"]["content"]
        assert metric("vllm:generation_tokens_total") - gen == usage["completion_tokens"]
        assert metric("vllm:prompt_tokens_total") - prompt_total == usage["prompt_tokens"]
        answers.setdefault(prompt, []).append((reply["choices"][0]["message"]["content"], usage["completion_tokens"]))
    repeated = answers["Which link carries the all-reduce?"]
    assert repeated[0] == repeated[1]  # deterministic
    assert metric("vllm:num_requests_running") == 0

    # Every token is the sum of both ranks' partials: rank 0 alone (TP=1, same image, model and prompt) gives as many
    # tokens but other words, so the TP=2 answer could only come from tokens that crossed to node 2 and back.
    # The TP=2 server read the weights into the page cache (unified memory): make room as the collection does.
    run([*LAB, "evict-cache", node(1)])
    docker(1, "run", "-d", "--name", TP1, "--label", LABEL, "--gpus", "all", "--network", "host", "-v", f"{MODELS}:/models:ro",
           "--entrypoint", "vllm", OLD, "serve", QWEN3, "--served-model-name", SERVED, "--host", mgmt_ip(1),
           "--port", str(PORT_TP1), "--max-model-len", "4096", "--gpu-memory-utilization", "0.8")
    try:
        wait_ready(PORT_TP1, lambda: docker(1, "inspect", "-f", "{{.State.Running}}", TP1).stdout.strip() == "true",
                   lambda: docker(1, "logs", TP1).stdout, deadline_s=90)
        alone = chat("Which link carries the all-reduce?", port=PORT_TP1)
    finally:
        docker(1, "rm", "-f", TP1, check=False)
    assert alone["usage"]["completion_tokens"] == repeated[0][1]
    assert alone["choices"][0]["message"]["content"] != repeated[0][0]


def test_stopping_the_worker_fails_the_next_request_and_the_server_exits(cluster):
    assert http("GET", "/health")[0] == 200
    docker(2, "stop", "-t", "10", WORKER)
    start = time.monotonic()
    try:
        code = http("POST", "/v1/chat/completions", {"model": SERVED, "messages": [{"role": "user", "content": "still there?"}]},
                    timeout=30)[0]
    except OSError as e:  # a timeout or a dropped connection is a failure too
        code = repr(e)
    elapsed = time.monotonic() - start
    assert code == 500 and elapsed < 30, (code, elapsed)

    # vLLM's behaviour after an engine death (without VLLM_KEEP_ALIVE_ON_ENGINE_DEATH): /health is never 200 again,
    # 503 while the server winds down, then the server shuts down with exit status 0 and the port closes.
    end = time.monotonic() + 30
    health = []
    while True:
        try:
            health.append(http("GET", "/health", timeout=5)[0])
        except OSError:
            break
        assert time.monotonic() < end, health
        time.sleep(0.2)
    assert set(health) <= {503}, health
    end = time.monotonic() + 30
    while (rc := serve_rc()) is None:
        assert time.monotonic() < end, serve_log()[-4000:]
        time.sleep(0.5)
    assert rc == "0"
    log = serve_log()
    for line in ("EngineCore encountered a fatal error.", "ConnectionResetError: rank 1 closed the connection",
                 "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
                 '"POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
                 "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
                 "INFO:     Shutting down", "INFO:     Finished server process"):
        assert line in log, f"{line!r} not in:\n{log[-6000:]}"
    # only the engine died: the Ray head container is still up
    assert docker(1, "inspect", "-f", "{{.State.Running}}", HEAD).stdout.strip() == "true"


def test_wrong_nccl_interface_on_the_worker_hangs_at_rendezvous_without_an_error(engine_lab):
    # The field's mistake: node 2 is cabled on the CX7's other port (enp1s0f0np0), and the head's interface name is
    # copied into the worker's environment; node 2 has no such interface.
    run([*LAB, "cable", "2", "--port", "0"])
    worker_ifs = node_exec(node(2), "ls", "/sys/class/net").stdout.split()
    assert "enp1s0f0np0" in worker_ifs and not [n for n in worker_ifs if n.startswith(fabric_if(1))]
    try:
        bring_up(fabric_if(1))  # Ray itself does not care: both nodes join
        start_serve()
        # The rendezvous starts: rank 0 on node 1 binds its fabric address and waits for rank 1, which (with NCCL_DEBUG=INFO)
        # only warns that it found no interface, then waits forever too.
        log = wait_log([
            rf'"rank=1 ip={re.escape(fabric_ip(2))} node=\w+',
            rank_line(1, re.escape(f"NCCL INFO Bootstrap : Using {fabric_if(1)}:{fabric_ip(1)}<0>")),
            rank_line(1, "NCCL INFO Using network Socket"),
            rank_line(2, re.escape(f"NCCL INFO NCCL_SOCKET_IFNAME set by environment to {fabric_if(1)}")),
            rank_line(2, "NCCL WARN Bootstrap : no socket interface found"),
        ], deadline_s=90)
        # For 30 s: the API port never opens, the server keeps running, and the log does not move.
        end = time.monotonic() + 30
        while time.monotonic() < end:
            with pytest.raises(OSError):
                socket.create_connection((mgmt_ip(1), PORT), timeout=3).close()
            assert serve_rc() is None
            time.sleep(1)
        assert serve_log() == log
        for word in ("ERROR", "Error", "Traceback", "Exception"):
            assert word not in log, log[-6000:]
        for later in ("Init COMPLETE", "Loading weights", "Starting vLLM API server", "Application startup complete"):
            assert later not in log, later
    finally:
        remove_cluster()
        run([*LAB, "cable", "2", "--port", "1"])


def registry_patch(args):
    """dgxspark.vllm.registry_patch on node 1 (ad hoc); returns the host's result."""
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), node(1), "-m", "dgxspark.vllm.registry_patch",
                "-a", json.dumps(args)], check=False,
               env=ansible_env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"))
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][node(1)]


def test_graft_of_qwen35_into_0_14_fails_inspection_with_the_real_import_error(engine_lab, tmp_path):
    vllm_dir = f"{SITE}/vllm"
    models, configs = f"{vllm_dir}/model_executor/models", f"{vllm_dir}/transformers_utils/configs"
    new_files = {f"{models}/qwen3_5.py", f"{models}/qwen3_5_mtp.py", f"{configs}/qwen3_5.py", f"{configs}/qwen3_5_moe.py"}
    patched = {"registry.py": f"{models}/registry.py", "configs_init.py": f"{configs}/__init__.py",
               "config.py": f"{vllm_dir}/transformers_utils/config.py"}
    node_exec(node(1), "mkdir", "-p", GRAFT_DIR)
    docker(1, "create", "--name", "handtest-src-017", "--label", LABEL, NEW)
    docker(1, "create", "--name", "handtest-graft", "--label", LABEL, OLD)
    for path in new_files:
        docker(1, "cp", f"handtest-src-017:{path}", f"{GRAFT_DIR}/{path.rsplit('/', 2)[-2]}.{path.rsplit('/', 1)[-1]}")
    for name, path in patched.items():
        docker(1, "cp", f"handtest-graft:{path}", f"{GRAFT_DIR}/{name}")

    # registry entries and config classes added as the field did it, with the collection's module
    result = registry_patch({"path": f"{GRAFT_DIR}/registry.py", "entries": [
        {"architecture": "Qwen3_5ForConditionalGeneration", "module": "qwen3_5", "table": "_MULTIMODAL_MODELS"},
        {"architecture": "Qwen3_5MoeForConditionalGeneration", "module": "qwen3_5", "table": "_MULTIMODAL_MODELS"},
        {"architecture": "Qwen3_5MTP", "module": "qwen3_5_mtp", "table": "_SPECULATIVE_DECODING_MODELS"},
        {"architecture": "Qwen3_5MoeMTP", "module": "qwen3_5_mtp", "table": "_SPECULATIVE_DECODING_MODELS"}]})
    assert result["changed"] is True and len(result["added"]) == 4, result
    result = registry_patch({"path": f"{GRAFT_DIR}/configs_init.py", "kind": "configs", "entries": [
        {"class_name": "Qwen3_5Config", "module": "qwen3_5"}, {"class_name": "Qwen3_5MoeConfig", "module": "qwen3_5_moe"}]})
    assert result["changed"] is True and len(result["added"]) == 2, result
    # and the model types in _CONFIG_REGISTRY (transformers 4.57 does not know qwen3_5_moe)
    text = node_exec(node(1), "cat", f"{GRAFT_DIR}/config.py").stdout
    anchor = '    qwen3_next="Qwen3NextConfig",\n'
    assert text.count(anchor) == 1
    local = tmp_path / "config.py"
    local.write_text(text.replace(anchor, anchor + '    qwen3_5="Qwen3_5Config",\n    qwen3_5_moe="Qwen3_5MoeConfig",\n'))
    run(["docker", "cp", str(local), f"{node(1)}:{GRAFT_DIR}/config.py"])

    for path in new_files:
        docker(1, "cp", f"{GRAFT_DIR}/{path.rsplit('/', 2)[-2]}.{path.rsplit('/', 1)[-1]}", f"handtest-graft:{path}")
    for name, path in patched.items():
        docker(1, "cp", f"{GRAFT_DIR}/{name}", f"handtest-graft:{path}")
    docker(1, "commit", "handtest-graft", GRAFT_IMAGE)

    # one stream, so that the order of the lines is kept
    proc = docker(1, "run", "--rm", "--label", LABEL, "--gpus", "all", "-v", f"{MODELS}:/models:ro", "--entrypoint", "sh",
                  GRAFT_IMAGE,
                  "-c", 'exec "$@" 2>&1', "sh", "vllm", "serve", QWEN35, "--port", str(PORT), check=False)
    log = ANSI.sub("", proc.stdout)
    assert proc.returncode == 1, log[-6000:]
    # the registry knows the architecture: it is the import of the grafted module that fails
    assert "Error in inspecting model architecture 'Qwen3_5MoeForConditionalGeneration'" in log, log[-6000:]
    tb = log.index("Traceback (most recent call last):")
    assert tb < log.index(f'{models}/qwen3_5.py", line') < log.index(IMPORT_ERROR) < log.index(FAILED)
    assert "is not supported for now" not in log
    # the last error of the run is vLLM's summary (inside pydantic's ValidationError, as real vLLM prints it)
    tail = [re.sub(r"^\(APIServer pid=\d+\) ", "", line) for line in log.rstrip().splitlines() if line.strip()][-3:]
    assert tail[0].endswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig"), tail
    assert tail[1].startswith(f"  Value error, {FAILED} [type=value_error"), tail
    assert tail[2].strip().startswith("For further information visit https://errors.pydantic.dev/"), tail
    assert log.count(FAILED) == 1

    # the same module imports fine in the image it came from
    docker(1, "run", "--rm", "--label", LABEL, "--entrypoint", "python3", NEW, "-c", "import vllm.model_executor.models.qwen3_5")


def test_pip_check_in_0_14_with_transformers_5_reports_the_conflict(engine_lab, tmp_path):
    # The real transformers 5.0.0 wheel, fetched on this machine (the lab nodes' containers have no route to PyPI),
    # installed offline into the 0.14 image without its dependencies, as a `pip install transformers>=5` would leave vllm.
    run([str(BIN / "pip"), "download", "--no-deps", "--only-binary=:all:", "transformers==5.0.0", "-d", str(tmp_path)],
        timeout=300)
    wheel = next(tmp_path.glob("transformers-5.0.0-*.whl"))
    node_exec(node(1), "mkdir", "-p", WHEELS)
    run(["docker", "cp", str(wheel), f"{node(1)}:{WHEELS}/{wheel.name}"])
    proc = docker(1, "run", "--rm", "--label", LABEL, "--network", "none", "-v", f"{WHEELS}:/wheels:ro",
                  "-e", "PIP_DISABLE_PIP_VERSION_CHECK=1", "--entrypoint", "sh", OLD, "-c",
                  'pip check; echo "rc=$?"; pip install -q --no-compile --no-index --no-deps "$1"; pip list | grep "^transformers "; '
                  'pip check; echo "rc=$?"', "sh", f"/wheels/{wheel.name}", check=False)
    assert proc.returncode == 0, proc.stderr
    before, after = proc.stdout.split("rc=0\n", 1)
    assert before == "No broken requirements found.\n"
    lines = after.splitlines()
    assert re.fullmatch(r"transformers +5\.0\.0", lines[0]), lines
    assert "vllm 0.14.1 has requirement transformers<5,>=4.56.0, but you have transformers 5.0.0." in lines[1:-1]
    assert lines[-1] == "rc=1"
