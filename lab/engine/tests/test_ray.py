"""Ray backend on a local single-node Ray cluster with 2 (pretend) GPUs.

Ray comes from where the lab has it: the lab engine image ``lab/vllm-node:0.14`` (Ray 2.54.1), built or restored
from the image cache by ``lab/lab.py images vllm-node-0.14`` when this module starts. Ray and the engine run in one
container of that image on the host network (``docker exec``), the flavour tree and the models mounted at their own
paths, so the test talks to the server on loopback as before. The container is removed at the end, and with it every
Ray process it started.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from enginekit import ENGINE, Proc, flavour_env, free_port, http, wait_ready

pytestmark = pytest.mark.lab  # needs Docker and a lab engine image (built here when missing)

IMAGE = "lab/vllm-node:0.14"
PYTHON = "/opt/venv/bin/python"
LAB_PY = ENGINE.parent / "lab.py"
PASSED_ENV = ("PYTHONPATH", "PYTHONUNBUFFERED", "VLLM_", "NCCL_", "RAY_")


def _run(argv, timeout=900):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    return proc


def env_flags(env):
    """`docker exec` flags that pass the engine's part of ENV into the container."""
    return [f"--env={k}={v}" for k, v in sorted(env.items()) if k.startswith(PASSED_ENV)]


class InImage(Proc):
    """A process in CONTAINER, started through ``docker exec`` with the image's Python.

    Its pid inside the container is kept in a file, so that stop() signals the engine itself (``docker exec`` does
    not forward signals) and then waits for the exec to end with it."""

    def __init__(self, container: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.container = container
        self.pidfile = f"/run/{log.stem}-{uuid.uuid4().hex[:6]}.pid"
        super().__init__(["docker", "exec", "-i", *env_flags(env), container, "sh", "-c", 'echo $$ > "$0" && exec "$@"',
                          self.pidfile, *argv], dict(os.environ), log)

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.p.poll() is None:
            subprocess.run(["docker", "exec", self.container, "sh", "-c",
                            f'kill -{signal.Signals(sig).name[3:]} "$(cat {self.pidfile})"'],
                           capture_output=True, check=False)
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        return super().stop(sig)


def vllm_in_image(container, *args):
    return container, [PYTHON, "-m", "vllm.entrypoints.cli.main", *args]


@pytest.fixture(scope="module")
def engine_container(trees, models, tmp_path_factory):
    """A container of the lab engine image with the 0.17 tree and the models mounted; removed at the end."""
    _run([str(ENGINE.parent / "docker-engine.sh")])
    _run([sys.executable, str(LAB_PY), "images", "vllm-node-0.14"], timeout=1800)
    # The trees and models live under pytest's base directory; paths the engine's environment names (VLLM_LAB_*)
    # are mounted too, at the same place.
    paths = {str(tmp_path_factory.getbasetemp())}
    paths |= {v for k, v in flavour_env(trees["0.17"]).items()
              if k.startswith("VLLM_") and os.path.isabs(v) and os.path.exists(v)}
    name = f"engray-{uuid.uuid4().hex[:8]}"
    _run(["docker", "run", "-d", "--rm", "--name", name, "--network", "host", "--ipc", "host", "--shm-size", "1g",
          *[f"--volume={p}:{p}:ro" for p in sorted(paths)], "--entrypoint", "sleep", IMAGE, "infinity"])
    try:
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


@pytest.fixture(scope="module")
def ray_cluster(engine_container, trees):
    port = free_port()
    env = flavour_env(trees["0.17"], NCCL_SOCKET_IFNAME="lo", NCCL_DEBUG="INFO", RAY_USAGE_STATS_ENABLED="0",
                      RAY_DEDUP_LOGS="0")
    # Ray's workers get the environment of `ray start`: the 0.17 tree on their PYTHONPATH too.
    _run(["docker", "exec", *env_flags(env), engine_container, "/opt/venv/bin/ray", "start", "--head", "--port", str(port),
          "--num-gpus", "2", "--num-cpus", "2", "--node-ip-address", "127.0.0.1", "--include-dashboard", "false",
          "--object-store-memory", "100000000", "--disable-usage-stats"], timeout=180)
    env["RAY_ADDRESS"] = f"127.0.0.1:{port}"
    return env


def test_tp2_over_ray(engine_container, ray_cluster, models, tmp_path, procs):
    port = free_port()
    head = InImage(*vllm_in_image(engine_container, "serve", str(models["qwen35"]), "--served-model-name", "qwen",
                                  "-tp", "2", "--distributed-executor-backend", "ray", "--port", str(port),
                                  "--reasoning-parser", "qwen3"), ray_cluster, tmp_path / "ray.log")
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


def test_not_enough_gpus_waits_on_placement_group(engine_container, ray_cluster, models, tmp_path, procs):
    port = free_port()
    head = InImage(*vllm_in_image(engine_container, "serve", str(models["qwen35"]), "-tp", "3",
                                  "--distributed-executor-backend", "ray", "--port", str(port)),
                   ray_cluster, tmp_path / "pg.log")
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
