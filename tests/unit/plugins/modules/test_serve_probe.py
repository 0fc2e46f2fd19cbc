# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""serve_probe: the readiness loop with fakes, and against the lab engine serving on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.dgxspark.vllm.plugins.modules import serve_probe as sp

REPO = Path(__file__).resolve().parents[4]
LOGS = REPO / "tests" / "unit" / "plugins" / "fixtures" / "vllm_logs"
PARAMS = {"url": "http://10.0.0.1:8000/", "model": "qwen", "api_key": "k", "timeout": 30, "completion_timeout": 5,
          "hang_after": 10, "interval": 1.0, "prompt": "Hi", "max_tokens": 1}


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeWatch:
    names = ["head"]

    def __init__(self, log="", end_after=None, quiet=0.0):
        self.log, self.end_after, self.quiet, self.rounds = log, end_after, quiet, 0

    def start(self):
        pass

    def ended(self):
        self.rounds += 1
        if self.end_after is not None and self.rounds > self.end_after:
            return "head", "container head is exited (exit code 1)"
        return None, None

    def logs(self, _name):
        return self.log

    def text(self):
        return self.log

    def seconds_without_progress(self):
        return self.quiet


def server(responses):
    """A fake http_call answering per path from a dict of callables(round) -> (status, body)."""
    calls = []

    def call(method, url, api_key=None, body=None, timeout=10.0):
        path = url.split("8000", 1)[1]
        calls.append((method, path, api_key, body))
        return responses[path](len([c for c in calls if c[1] == path]))
    call.calls = calls
    return call


MODELS = {"object": "list", "data": [{"id": "qwen"}]}
DONE = {"choices": [{"text": " there"}]}


def test_ready_needs_health_models_and_a_real_completion():
    clock = Clock()
    call = server({"/health": lambda n: (200, "") if n >= 3 else (0, "Connection refused"),
                   "/v1/models": lambda n: (200, MODELS),
                   "/v1/completions": lambda n: (200, DONE)})
    result = sp.probe(PARAMS, FakeWatch(), clock=clock, sleep=clock.sleep, call=call)
    assert result["ready"] is True and result["completion"] == " there"
    assert result["time_to_ready"] == 2.0
    assert ("POST", "/v1/completions", "k", {"model": "qwen", "prompt": "Hi", "max_tokens": 1, "temperature": 0}) in call.calls


def test_health_200_with_a_hanging_completion_is_not_ready():
    clock = Clock()
    call = server({"/health": lambda n: (200, ""), "/v1/models": lambda n: (200, MODELS),
                   "/v1/completions": lambda n: (0, "timed out")})
    result = sp.probe(PARAMS, FakeWatch(log="INFO Application startup complete.\n"), clock=clock, sleep=clock.sleep, call=call)
    assert result["ready"] is False
    assert result["checks"] == {"health": "200", "models": "listed", "completion": "no answer within 5 s"}
    assert result["diagnosis"]["category"] == "timeout"
    assert "not ready after 30 s: health 200, models listed, completion no answer within 5 s" in result["diagnosis"]["summary"]


def test_stops_the_moment_the_container_exits_and_diagnoses_the_whole_log():
    clock = Clock()
    call = server({"/health": lambda n: (0, "Connection refused")})
    watch = FakeWatch(log=(LOGS / "inspection_failed_graft.log").read_text(), end_after=2)
    result = sp.probe(PARAMS, watch, clock=clock, sleep=clock.sleep, call=call)
    assert clock.now == 2.5  # two rounds and one look that the log stopped growing, not the 30 s deadline
    diag = result["diagnosis"]
    assert diag["category"] == "architecture_inspection_failed" and diag["container"] == "head"
    assert "ImportError: cannot import name 'MambaStateCopyFunc'" in diag["summary"]
    assert diag["summary"].endswith("[container head is exited (exit code 1)]")


class GrowingWatch(FakeWatch):
    """A log whose last lines Docker copies only after the container was seen exited."""

    def __init__(self, parts, end_after):
        super().__init__(log=parts[0], end_after=end_after)
        self.parts, self.reads = parts, 0

    def seconds_without_progress(self):
        self.reads += 1
        if self.ended_seen and self.parts[1:]:
            self.log += self.parts.pop(1)
        return 0.0

    @property
    def ended_seen(self):
        return self.end_after is not None and self.rounds > self.end_after


def test_after_an_exit_the_log_is_read_until_it_stops_growing_so_the_detail_is_diagnosed():
    head = ("(APIServer pid=1) Traceback (most recent call last):\n"
            "(APIServer pid=1)   File \"/x.py\", line 1, in <module>\n"
            "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n")
    detail = ("(APIServer pid=1)   Value error, User-specified max_model_len (262144) is greater than the derived "
              "max_model_len (max_position_embeddings=4096) [type=value_error]\n")
    clock = Clock()
    call = server({"/health": lambda n: (0, "Connection refused")})
    result = sp.probe(PARAMS, GrowingWatch([head, detail], end_after=1), clock=clock, sleep=clock.sleep, call=call)
    summary = result["diagnosis"]["summary"]
    assert "ValidationError: 1 validation error for ModelConfig: User-specified max_model_len (262144)" in summary, summary
    # A log that keeps growing (a restarted engine writing again) is read for LOG_SETTLE_SECONDS at most.
    clock = Clock()

    class Endless(FakeWatch):
        def seconds_without_progress(self):
            self.log += "(APIServer pid=7) INFO starting\n"
            return 0.0

    sp.probe(PARAMS, Endless(log=head, end_after=1), clock=clock, sleep=clock.sleep, call=call)
    assert clock.now == 1.0 + sp.LOG_SETTLE_SECONDS


def test_api_key_rejected():
    clock = Clock()
    call = server({"/health": lambda n: (200, ""), "/v1/models": lambda n: (401, {"error": "Unauthorized"})})
    result = sp.probe(PARAMS, FakeWatch(), clock=clock, sleep=clock.sleep, call=call)
    assert result["diagnosis"]["category"] == "api_key_rejected" and clock.now == 0.0


def test_silent_rendezvous_becomes_a_collective_init_hang():
    log = ("INFO 11-29 08:00:01 [ray_executor.py:54] Copying the following environment variables to workers: "
           "['VLLM_HOST_IP']\n")
    clock = Clock()
    call = server({"/health": lambda n: (0, "Connection refused")})
    result = sp.probe(PARAMS, FakeWatch(log=log, quiet=31.0), clock=clock, sleep=clock.sleep, call=call)
    assert result["diagnosis"]["category"] == "collective_init_hang"
    assert clock.now == 0.0  # found in the first round, not at the 30 s deadline


# ------------------------------------------------------------------ against the lab engine on loopback

ENGINE = REPO / "lab" / "engine"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    if not (ENGINE / "build_wheel.py").exists():
        pytest.skip("lab engine not present")
    sys.path.insert(0, str(ENGINE))
    import build_wheel  # pylint: disable=import-error,import-outside-toplevel
    import make_models  # pylint: disable=import-error,import-outside-toplevel
    root = tmp_path_factory.mktemp("engine")
    tree = root / "tree"
    tree.mkdir()
    build_wheel.assemble_tree("0.17", tree)
    model = make_models.write_model(root / "models", "qwen35", shard_kb=64)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The stand-in's CUDA looks for the device nodes a GPU container has (the lab's GPU hook puts them in).
    dev = root / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia0"):
        (dev / name).touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "NCCL_"))}
    env.update(PYTHONPATH=str(tree), PYTHONUNBUFFERED="1", VLLM_LAB_LOAD_SECONDS_PER_GB="0", VLLM_API_KEY="secret-key",
               VLLM_LAB_DEV_ROOT=str(dev))
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model), "--served-model-name",
                             "qwen", "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=20)


def test_real_engine_becomes_ready(engine):
    params = dict(PARAMS, url=engine, api_key="secret-key", timeout=60, interval=0.2, completion_timeout=20)
    started = time.monotonic()
    result = sp.probe(params)
    assert result["ready"] is True, result
    assert result["models"] == ["qwen"] and result["first_token_latency"] < 20
    assert time.monotonic() - started < 60


def test_real_engine_rejects_a_wrong_key(engine):
    params = dict(PARAMS, url=engine, api_key="wrong", timeout=60, interval=0.2)
    result = sp.probe(params)
    assert result["ready"] is False and result["diagnosis"]["category"] == "api_key_rejected"


class CountingApi:
    """The part of docker's low-level API ContainerWatch uses; counts whole-log reads."""

    def __init__(self, logs):
        self.log_text, self.reads = logs, []

    def inspect_container(self, name):
        return {"State": {"Status": "running", "StartedAt": "t0", "ExitCode": 0}, "RestartCount": 0, "Name": name}

    def logs(self, name, **_kwargs):
        self.reads.append(name)
        return self.log_text[name].encode()


def test_container_watch_reads_each_log_once_per_round():
    api = CountingApi({"head": "NCCL INFO Bootstrap : Using eth0\n", "worker": ""})
    watch = sp.ContainerWatch(type("Client", (), {"api": api})(), ["head", "worker"])
    clock = Clock()
    result = sp.probe(dict(PARAMS, hang_after=0, timeout=30), watch, clock=clock, sleep=clock.sleep,
                      call=lambda *a, **k: (0, "refused"))
    # Round 1 reads both logs once (progress and the rendezvous check share the text) and finds the hang;
    # the diagnosis reads them once more.
    assert api.reads == ["head", "worker", "head", "worker"]
    assert watch.text() == "NCCL INFO Bootstrap : Using eth0\n"
    assert result["ready"] is False and result["diagnosis"]["category"] == "collective_init_hang"
    assert clock.now == 0.0


class FakeApi:
    """inspect_container/logs of a Docker API client, from a dict the test changes."""

    def __init__(self, containers):
        self.containers = containers

    def inspect_container(self, name):
        if name not in self.containers:
            raise KeyError(name)
        return self.containers[name]

    def logs(self, name, **_kwargs):
        return self.containers[name].get("log", b"")


def test_a_restart_before_the_probe_began_ends_the_wait_at_once():
    # The engine died (and the container restarted) between the caller starting it and the probe: with the
    # caller's start time as baseline the probe sees it in its first round.
    api = FakeApi({"head": {"State": {"Status": "running", "StartedAt": "T1", "ExitCode": 0}, "RestartCount": 1,
                            "log": (LOGS / "inspection_failed_graft.log").read_bytes()}})
    client = type("Client", (), {"api": api})()
    watch = sp.ContainerWatch(client, ["head"], {"head": "T0"})
    clock = Clock()
    result = sp.probe(PARAMS, watch, clock=clock, sleep=clock.sleep, call=server({"/health": lambda n: (0, "refused")}))
    assert clock.now == sp.LOG_SETTLE_STEP  # no round waited: only one look that the log stopped growing
    assert result["diagnosis"]["category"] == "architecture_inspection_failed"
    assert result["diagnosis"]["summary"].endswith("[container head restarted (restart count 1)]")
    # Without the caller's start time, the same container is simply the baseline.
    unaware = sp.ContainerWatch(client, ["head"])
    unaware.start()
    assert unaware.ended() == (None, None)


def test_api_key_file_gives_the_key_of_its_vllm_api_key_line(tmp_path):
    env = tmp_path / "serve.env"
    env.write_text("OTHER=1\nVLLM_API_KEY=key=with=equals\n")
    assert sp.read_api_key_file(str(env)) == "key=with=equals"
    env.write_text("")  # vllm_serve_allow_no_api_key: the file is there, empty
    assert sp.read_api_key_file(str(env)) is None
    with pytest.raises(OSError):
        sp.read_api_key_file(str(tmp_path / "absent.env"))


def test_real_engine_becomes_ready_with_the_key_from_the_env_file(engine, tmp_path):
    env = tmp_path / "serve.env"
    env.write_text("VLLM_API_KEY=secret-key\n")
    params = dict(PARAMS, url=engine, api_key=sp.read_api_key_file(str(env)), timeout=60, interval=0.2,
                  completion_timeout=20)
    assert sp.probe(params)["ready"] is True
