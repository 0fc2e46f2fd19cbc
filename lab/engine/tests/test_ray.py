"""Ray backend on a local single-node Ray cluster with 2 (pretend) GPUs.

Needs a Python with ``ray`` installed: the current interpreter, ``$LAB_ENGINE_RAY_PYTHON``,
or ``/tmp/engine-venv/bin/python``; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from enginekit import Proc, flavour_env, free_port, http, vllm_cmd, wait_ready, which_python_with

RAY_PY = which_python_with("ray")
pytestmark = pytest.mark.skipif(RAY_PY is None, reason="ray is not importable by any known interpreter")


@pytest.fixture(scope="module")
def ray_cluster(trees):
    tmp = Path(tempfile.mkdtemp(prefix="engray", dir="/tmp"))
    port = free_port()
    env = flavour_env(trees["0.17"], NCCL_SOCKET_IFNAME="lo", NCCL_DEBUG="INFO", RAY_USAGE_STATS_ENABLED="0",
                      RAY_DEDUP_LOGS="0")
    ray_bin = str(Path(RAY_PY).parent / "ray")
    # A session of its own: every process `ray start` spawns shares its process group, so the teardown
    # stops this cluster only. (`ray stop` would kill every Ray process on the machine, including the
    # raylets inside lab nodes, which the host's PID namespace sees.)
    starter = subprocess.run([ray_bin, "start", "--head", "--port", str(port), "--num-gpus", "2", "--num-cpus", "2",
                              "--node-ip-address", "127.0.0.1", "--include-dashboard", "false",
                              "--object-store-memory", "100000000", "--temp-dir", str(tmp), "--disable-usage-stats"],
                             env=env, check=False, capture_output=True, timeout=180, start_new_session=True)
    group = _group_of_session(tmp)
    assert starter.returncode == 0, starter.stderr.decode(errors="replace")[-2000:]
    env["RAY_ADDRESS"] = f"127.0.0.1:{port}"
    yield env
    _stop_group(group)
    shutil.rmtree(tmp, ignore_errors=True)


def _group_of_session(temp_dir):
    """Process group of the Ray processes whose command line names temp_dir (our cluster's)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if str(temp_dir).encode() in fh.read():
                    return os.getpgid(int(pid))
        except OSError:
            continue
    return None


def _stop_group(group):
    if group is None:
        return
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def test_tp2_over_ray(ray_cluster, models, tmp_path, procs):
    port = free_port()
    head = Proc(vllm_cmd("serve", str(models["qwen35"]), "--served-model-name", "qwen", "-tp", "2",
                         "--distributed-executor-backend", "ray", "--port", str(port), "--reasoning-parser",
                         "qwen3", python=RAY_PY), ray_cluster, tmp_path / "ray.log")
    procs.append(head)
    base = f"http://127.0.0.1:{port}"
    wait_ready(base, head, deadline_s=120)
    code, raw = http("POST", base + "/v1/chat/completions",
                     {"model": "qwen", "messages": [{"role": "user", "content": "hello"}]})
    assert code == 200
    msg = json.loads(raw)["choices"][0]["message"]
    assert msg["reasoning"] and msg["content"]
    # lines of the rank actors reach the driver's output through Ray's log forwarding (async)
    wanted = ["NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0",  # rank 1's NCCL init
              "(RayWorkerWrapper pid=", "Loading weights took",
              "No current placement group found. Creating a new placement group."]
    deadline = time.monotonic() + 20
    while not all(w in head.output() for w in wanted):
        assert time.monotonic() < deadline, [w for w in wanted if w not in head.output()]
        time.sleep(0.2)
    assert head.stop() is not None


def test_not_enough_gpus_waits_on_placement_group(ray_cluster, models, tmp_path, procs):
    port = free_port()
    head = Proc(vllm_cmd("serve", str(models["qwen35"]), "-tp", "3", "--distributed-executor-backend", "ray",
                         "--port", str(port), python=RAY_PY), ray_cluster, tmp_path / "pg.log")
    procs.append(head)
    deadline = time.monotonic() + 60
    while "Waiting for creating a placement group of specs for" not in head.output():
        assert head.p.poll() is None, head.output()
        assert time.monotonic() < deadline, head.output()
        time.sleep(0.5)
    out = head.output()
    assert "The number of required GPUs exceeds the total number of available GPUs in the placement group." in out
    node, gpu = r"'node:[0-9.]+': 0.001", r"'GPU': 1.0"
    assert re.search(rf"specs=\[\{{({gpu}, {node}|{node}, {gpu})\}}, \{{{gpu}\}}, \{{{gpu}\}}\]", out), out
    assert head.p.poll() is None
