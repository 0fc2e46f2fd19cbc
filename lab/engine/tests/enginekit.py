"""Fixtures for the lab engine's tests: built package trees, tiny models, running servers.

The two flavours are both importable as ``vllm``, so each test that needs a
flavour runs it in a subprocess with ``PYTHONPATH`` pointing at that flavour's
assembled tree (built by ``build_wheel.assemble_tree``, i.e. what the wheel ships).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ENGINE))

import build_wheel  # noqa: E402
import make_models  # noqa: E402


@pytest.fixture(scope="session")
def trees(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for flavour in ("0.14", "0.17"):
        root = tmp_path_factory.mktemp(f"tree-{flavour}")
        build_wheel.assemble_tree(flavour, root)
        out[flavour] = root
    return out


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {m: make_models.write_model(root, m, shard_kb=64) for m in ("qwen35", "qwen35a3b", "qwen3moe")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_GPU_DEV: list[Path] = []


def gpu_dev_root() -> Path:
    """A directory shaped like a GPU container's /dev (what the lab's GPU hook puts in): the engine runs here
    outside a container, so its CUDA stand-in is pointed at it (VLLM_LAB_DEV_ROOT)."""
    if not _GPU_DEV:
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="lab-gpu-dev-"))
        for name in ["nvidiactl", "nvidia-uvm"] + [f"nvidia{i}" for i in range(8)]:
            (root / name).touch()
        _GPU_DEV.append(root)
    return _GPU_DEV[0]


def flavour_env(tree: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "NCCL_"))}
    env["VLLM_LAB_DEV_ROOT"] = str(gpu_dev_root())
    env["PYTHONPATH"] = str(tree)
    env["PYTHONUNBUFFERED"] = "1"
    env["VLLM_LAB_LOAD_SECONDS_PER_GB"] = "0"
    env.update(extra)
    return env


def vllm_cmd(*args: str, python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "vllm.entrypoints.cli.main", *args]


def run_vllm(tree: Path, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(vllm_cmd(*args), env=flavour_env(tree, **env), capture_output=True, text=True,
                          timeout=timeout)


class Proc:
    """A background ``vllm`` process with its combined output in a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._fh = open(log, "w")
        self.p = subprocess.Popen(argv, env=env, stdout=self._fh, stderr=subprocess.STDOUT,
                                  start_new_session=True)

    def output(self) -> str:
        return self.log.read_text()

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.p.pid, sig)
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self._fh.close()
        return self.p.returncode


def http(method: str, url: str, body: dict | None = None, headers: dict | None = None,
         timeout: float = 30) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_ready(base: str, proc: Proc, deadline_s: float = 60) -> float:
    """Probe /health until 200; fail at once if the process exits. Returns seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        if proc.p.poll() is not None:
            raise AssertionError(f"server exited with {proc.p.returncode}:\n{proc.output()}")
        try:
            if http("GET", base + "/health", timeout=2)[0] == 200:
                return time.monotonic() - start
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"server not ready within {deadline_s}s:\n{proc.output()}")


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop(signal.SIGKILL)


__all__ = ["Proc", "flavour_env", "free_port", "http", "run_vllm", "shutil", "vllm_cmd", "wait_ready"]
