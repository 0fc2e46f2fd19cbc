# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of dgxspark-launch (the node containers' command, module_utils/_launcher built into one file).

The pure logic runs twice (the fixture L, tests/unit/node_programs/conftest.py): against the module_utils and against the
built program; the supervision paths run the built program as a real process (mode mp needs no Ray). The Ray outputs are fixtures captured
from a real Ray 2.54.1 cluster (tests/unit/plugins/fixtures/ray/README.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _node_program

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "unit" / "plugins" / "fixtures" / "ray"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


HEAD = ["head", "--node-ip", "192.168.100.10", "--expect-nodes", "2", "--expect-gpus", "2", "--wait-timeout", "300"]


# ---------------------------------------------------------------- arguments

def test_script_is_run_by_python3_not_by_its_shebang(L):
    # The collection always starts it as `python3 <path>` (images may have no `python`), so it has no
    # shebang and is not executable (ansible-test's shebang rule allows no python3 shebang here).
    assert not os.access(_script(), os.X_OK)
    assert not pathlib.Path(_script()).read_text().startswith("#!")
    assert L.LAUNCHER_VERSION == "1.4.0"


def test_split_serve_argv_at_first_double_dash(L):
    assert L.split_serve_argv(["mp", "--", "vllm", "serve", "--", "x"]) == (["mp"], ["vllm", "serve", "--", "x"])
    assert L.split_serve_argv(["version"]) == (["version"], [])


def test_head_defaults_and_serve_argv(L):
    args = L.parse_args(HEAD + ["--expect-node-ip", "192.168.100.11", "--ray-arg=--object-store-memory=1073741824",
                                "--", "vllm", "serve", "Qwen/Qwen3.5-122B-A10B-FP8", "-tp", "2"])
    assert args.mode == "head"
    assert (args.port, args.num_gpus, args.dashboard_host, args.dashboard_port) == (6379, 1, "127.0.0.1", 8265)
    assert args.expect_node_ip == ["192.168.100.11"]
    assert args.serve == ["vllm", "serve", "Qwen/Qwen3.5-122B-A10B-FP8", "-tp", "2"]
    assert args.wait_timeout == 300.0
    assert L.ray_head_argv(args) == [
        "ray", "start", "--head", "--block", "--node-ip-address", "192.168.100.10", "--port", "6379",
        "--dashboard-host", "127.0.0.1", "--num-gpus", "1", "--disable-usage-stats",
        "--ray-client-server-port", "10001", "--dashboard-port", "8265",
        "--node-manager-port", "6700", "--object-manager-port", "6701", "--runtime-env-agent-port", "6702",
        "--dashboard-agent-grpc-port", "6703", "--metrics-export-port", "6704",
        "--dashboard-agent-listen-port", "52365", "--min-worker-port", "10002", "--max-worker-port", "10101",
        "--object-store-memory=1073741824"]


def test_head_ip_in_expected_list_is_implied_and_deduplicated(L):
    args = L.parse_args(HEAD + ["--expect-node-ip", "192.168.100.10", "--expect-node-ip", "192.168.100.11",
                                "--expect-node-ip", "192.168.100.11"])
    assert args.expect_node_ip == ["192.168.100.11"]


@pytest.mark.parametrize("argv, needle", [
    (HEAD + ["--expect-node-ip", "10.0.0.1", "--expect-node-ip", "10.0.0.2"], "3 node IPs expected"),
    (["mp"], "mp needs the engine argv"),
    (["worker", "--head-ip", "1.2.3.4", "--node-ip", "1.2.3.5", "--", "vllm"], "worker takes no serving argv"),
    (HEAD[:-2], "--wait-timeout"),
    (HEAD + ["--port", "70000"], "not a TCP port"),
    (HEAD + ["--min-worker-port", "20000", "--max-worker-port", "10000"], "--min-worker-port must not be above"),
])
def test_bad_arguments_exit_2(L, capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        L.parse_args(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_worker_argv(L):
    args = L.parse_args(["worker", "--head-ip", "192.168.100.10", "--node-ip", "192.168.100.11", "--num-gpus", "1",
                         "--node-manager-port", "7000"])
    assert args.connect_timeout == 300.0
    assert L.ray_worker_argv(args, ray="/usr/bin/ray") == [
        "/usr/bin/ray", "start", "--block", "--address", "192.168.100.10:6379", "--node-ip-address",
        "192.168.100.11", "--num-gpus", "1", "--disable-usage-stats",
        "--node-manager-port", "7000", "--object-manager-port", "6701", "--runtime-env-agent-port", "6702",
        "--dashboard-agent-grpc-port", "6703", "--metrics-export-port", "6704",
        "--dashboard-agent-listen-port", "52365", "--min-worker-port", "10002", "--max-worker-port", "10101"]


@pytest.mark.parametrize("host, url", [("127.0.0.1", "http://127.0.0.1:8265"), ("0.0.0.0", "http://127.0.0.1:8265"),
                                       ("::1", "http://[::1]:8265")])
def test_dashboard_url(L, host, url):
    assert L.dashboard_url(L.parse_args(HEAD + ["--dashboard-host", host])) == url


def test_version_mode(L, capsys):
    assert L.main(["version"]) == 0
    assert capsys.readouterr().out == "1.4.0\n"


# ---------------------------------------------------------------- token auth

SECRET = "s3cr3t-token-value"


def test_auth_off(L):
    assert L.check_auth({}) is None
    assert L.check_auth({"RAY_AUTH_MODE": "disabled"}) is None


def test_auth_token_file_ok(L, tmp_path):
    token = tmp_path / "auth_token"
    token.write_text(SECRET)
    token.chmod(0o600)
    note = L.check_auth({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    assert note == f"Ray token authentication on, token file {token} (mode 0600)"
    token.chmod(0o644)
    note = L.check_auth({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
    assert note.endswith("WARNING: the file is readable by group/others, 0600 is expected")
    assert SECRET not in note


@pytest.mark.parametrize("env, needle", [
    ({"RAY_AUTH_MODE": "token"}, "RAY_AUTH_TOKEN_PATH is not set"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/nonexistent/auth_token"}, "cannot stat the token file"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": SECRET}, "RAY_AUTH_TOKEN is set in the environment"),
    ({"RAY_AUTH_MODE": "magic"}, "RAY_AUTH_MODE='magic' is not supported"),
])
def test_auth_errors(L, env, needle):
    with pytest.raises(L.LaunchError) as exc:
        L.check_auth(env)
    assert needle in str(exc.value)
    assert exc.value.code == L.EXIT_AUTH
    assert SECRET not in str(exc.value)


def test_auth_empty_file_and_directory(L, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(L.LaunchError, match="is empty"):
        L.check_auth({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(empty)})
    with pytest.raises(L.LaunchError, match="is not a regular file"):
        L.check_auth({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path)})


def test_auth_unreadable_file(L, tmp_path, monkeypatch):
    token = tmp_path / "auth_token"
    token.write_text(SECRET)
    token.chmod(0)

    def denied(path, *args, **kwargs):
        # What open() does for a non-root user on a mode-000 file (root would read it: CI runs as root).
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(L, "open", denied, raising=False)
    with pytest.raises(L.LaunchError, match=r"cannot read the token file \(Permission denied\)"):
        L.check_auth({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})


# ---------------------------------------------------------------- parsing real Ray output

def test_parse_list_nodes_healthy_fixture(L):
    nodes = L.parse_list_nodes(fixture("nodes_healthy.json"))
    assert [(n.ip, n.alive, n.gpus, n.is_head) for n in nodes] == [
        ("127.0.0.2", True, 1.0, True), ("127.0.0.3", True, 1.0, False)]
    assert all(len(n.node_id) == 56 for n in nodes)


def test_parse_list_nodes_dead_fixture(L):
    nodes = L.parse_list_nodes(fixture("nodes_dead.json"))
    assert sorted((n.ip, n.alive) for n in nodes) == [("127.0.0.2", True), ("127.0.0.3", False)]


def test_parse_list_nodes_rejects_non_list(L):
    with pytest.raises(ValueError):
        L.parse_list_nodes('{"node_id": "x"}')
    with pytest.raises(ValueError):
        L.parse_list_nodes("Traceback (most recent call last):\n  ConnectionError\n")
    assert L.parse_list_nodes(fixture("pgs_empty.txt")) == []  # `ray list` prints this text for an empty list


def test_the_ray_outputs_are_parsed_by_module_utils_ray(L):
    # One implementation of the `ray list nodes` / `ray status` parsing: _ray's, as ray_cluster_info uses it.
    assert L._ray.__name__ == "ansible_collections.dgxspark.vllm.plugins.module_utils._ray"
    assert not hasattr(L, "parse_status_text") and not hasattr(L, "_ACTIVE_RE")


def test_parse_sdk_nodes(L):
    nodes = L.parse_sdk_nodes('[{"node_id": "a", "ip": "10.0.0.1", "alive": true, "gpus": 1.0, "is_head": true},'
                              ' {"node_id": "b", "ip": "10.0.0.2", "alive": false, "gpus": 1}]')
    assert [(n.node_id, n.ip, n.alive, n.gpus, n.is_head) for n in nodes] == [
        ("a", "10.0.0.1", True, 1.0, True), ("b", "10.0.0.2", False, 1.0, False)]


# ---------------------------------------------------------------- wait decision

def node(L, ip, alive=True, gpus=1.0):
    return L.Node(node_id="id-" + ip, ip=ip, alive=alive, gpus=gpus)


def test_evaluate_complete_from_fixture(L):
    probe = L.Probe(source="ray list nodes", nodes=L.parse_list_nodes(fixture("nodes_healthy.json")))
    state = L.evaluate(probe, 2, 2, ["127.0.0.2", "127.0.0.3"])
    assert state.done is True
    assert state.summary(2, 2) == "2/2 nodes alive, 2/2 GPUs"


def test_evaluate_dead_worker_from_fixture(L):
    probe = L.Probe(source="ray list nodes", nodes=L.parse_list_nodes(fixture("nodes_dead.json")))
    state = L.evaluate(probe, 2, 2, ["127.0.0.2", "127.0.0.3"])
    assert state.done is False
    assert state.missing_ips == ["127.0.0.3"]
    assert state.summary(2, 2) == ("1/2 nodes alive, 1/2 GPUs; waiting for node(s) at 127.0.0.3; "
                                   "dead node(s) at 127.0.0.3")


def test_evaluate_wrong_ip_worker_is_named(L):
    probe = L.Probe(source="gcs", nodes=[node(L, "192.168.100.10"), node(L, "10.10.0.11")])
    state = L.evaluate(probe, 2, 2, ["192.168.100.10", "192.168.100.11"])
    assert state.done is False
    assert (state.alive, state.gpus, state.missing_ips, state.unexpected_ips) == (
        2, 2.0, ["192.168.100.11"], ["10.10.0.11"])
    assert "unexpected IP(s) 10.10.0.11 (wrong --node-ip" in state.summary(2, 2)


def test_evaluate_without_full_ip_list_does_not_flag_workers(L):
    probe = L.Probe(source="gcs", nodes=[node(L, "192.168.100.10"), node(L, "192.168.100.11")])
    state = L.evaluate(probe, 2, 2, ["192.168.100.10"])
    assert (state.done, state.unexpected_ips) == (True, [])


def test_evaluate_gpus_missing_keeps_waiting(L):
    probe = L.Probe(source="gcs", nodes=[node(L, "a"), node(L, "b", gpus=0.0)])
    state = L.evaluate(probe, 2, 2, ["a"])
    assert (state.done, state.gpus) == (False, 1.0)


def test_evaluate_counts_only(L):
    state = L.evaluate(L.Probe(source="ray status", alive_count=2, gpus=2.0), 2, 2, ["x", "y"])
    assert (state.done, state.ips_known) == (True, False)
    state = L.evaluate(L.Probe(source="ray status", alive_count=1, gpus=1.0), 2, 2, ["x", "y"])
    assert state.done is False
    assert state.summary(2, 2).endswith("node IPs unknown (state API unavailable), counting only")


def test_timeout_message_names_missing_node_and_status(L):
    args = L.parse_args(HEAD + ["--expect-node-ip", "192.168.100.11"])
    expected_ips = ["192.168.100.10", "192.168.100.11"]
    state = L.evaluate(L.Probe(source="gcs", nodes=[node(L, "192.168.100.10")]), 2, 2, expected_ips)
    text = L.timeout_message(state, None, args, fixture("status_dead.txt"))
    lines = text.splitlines()
    assert lines[0] == "timed out after 300s waiting for the Ray cluster (2 nodes, 2 GPUs)"
    assert lines[1] == "last state: 1/2 nodes alive, 1/2 GPUs; waiting for node(s) at 192.168.100.11"
    assert lines[2] == ("missing node 192.168.100.11: check that its worker container runs, reaches "
                        "192.168.100.10:6379 and starts Ray with --node-ip 192.168.100.11")
    assert lines[3] == "ray status:"
    assert "Active:" in text


def test_timeout_message_unreadable_state(L):
    args = L.parse_args(HEAD)
    text = L.timeout_message(None, L.Probe(source="none", error="gcs: connection refused"), args, None)
    assert text.splitlines()[1] == "the cluster state could not be read: gcs: connection refused"


def test_head_registered(L):
    assert L.head_registered([node(L, "10.0.0.1"), node(L, "10.0.0.2")], 0, "10.0.0.1") is True
    assert L.head_registered([node(L, "10.0.0.2")], 0, "10.0.0.1") is False
    assert L.head_registered([node(L, "10.0.0.1", alive=False)], 0, "10.0.0.1") is False
    assert L.head_registered(None, 1, "10.0.0.1") is True
    assert L.head_registered(None, 0, "10.0.0.1") is False


# ---------------------------------------------------------------- probing with stand-in `ray` commands

def _fake(path: pathlib.Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_probe_falls_back_to_ray_status(L, tmp_path):
    status = FIXTURES / "status_healthy.txt"
    script = f'if [ "$1" = status ]; then cat {status}; exit 0; fi\necho "Failed to connect to API server" >&2; exit 1\n'
    ray = _fake(tmp_path / "ray", script)
    python = _fake(tmp_path / "python", 'echo "ModuleNotFoundError: No module named ray" >&2; exit 1\n')
    probe = L.probe_cluster(ray, python, "10.0.0.1:6379", "http://127.0.0.1:8265", timeout=10)
    got = (probe.source, probe.nodes, probe.alive_count, probe.gpus, probe.error)
    assert got == ("ray status", None, 2, 2.0, None)


def test_probe_prefers_state_api(L, tmp_path):
    nodes = FIXTURES / "nodes_healthy.json"
    ray = _fake(tmp_path / "ray", f'[ "$1" = list ] && cat {nodes} && exit 0; exit 1\n')
    probe = L.probe_cluster(ray, "/bin/false", "10.0.0.1:6379", "http://127.0.0.1:8265", timeout=10)
    assert probe.source == "ray list nodes"
    assert [n.ip for n in probe.nodes] == ["127.0.0.2", "127.0.0.3"]


def test_probe_reports_every_failure(L, tmp_path):
    ray = _fake(tmp_path / "ray", 'echo "connection refused" >&2; exit 1\n')
    probe = L.probe_cluster(ray, "/bin/false", "10.0.0.1:6379", "http://127.0.0.1:8265", timeout=10)
    assert probe.error == "ray list nodes: connection refused; gcs: no output; ray status: connection refused"


def test_run_is_bounded(L, tmp_path):
    slow = _fake(tmp_path / "slow", "sleep 30\n")
    start = time.monotonic()
    code, _out, err = L._run([slow, "x"], timeout=1)
    assert code == 124
    assert time.monotonic() - start < 15  # far below the 30 s the child would sleep; loose for loaded CI
    assert "did not answer within 1s" in err


# ---------------------------------------------------------------- supervision, as a real process

_GPU_BIN = []
_BUILT = []


def _script():
    """The built launcher (one file, as the roles install it), written once to a temporary directory."""
    if not _BUILT:
        import tempfile

        path = pathlib.Path(tempfile.mkdtemp(prefix="launcher-built-")) / "dgxspark-launch"
        path.write_text(_node_program.build("dgxspark-launch"))
        _BUILT.append(str(path))
    return _BUILT[0]


def _gpu_bin():
    """A directory with an `nvidia-smi` that lists one GB10, as in a container started with the GPU."""
    if not _GPU_BIN:
        import tempfile

        path = pathlib.Path(tempfile.mkdtemp(prefix="launcher-gpu-"))
        _fake(path / "nvidia-smi", 'echo "GPU 0: NVIDIA GB10 (UUID: GPU-00000000-0000-0000-0000-000000000000)"\n')
        _GPU_BIN.append(path)
    return _GPU_BIN[0]


def _launch(args, env=None, gpu=True):
    """Run the launcher; `gpu`: with an nvidia-smi on PATH that sees a GPU (a container started with --gpus)."""
    env = dict(os.environ if env is None else env)
    if gpu:
        env["PATH"] = f"{_gpu_bin()}:{env.get('PATH', '/usr/bin:/bin')}"
    return subprocess.Popen([sys.executable, _script()] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)


def test_container_without_the_gpu_stops_the_launcher_in_every_mode(tmp_path):
    """A container started without --gpus / device_requests has no nvidia-smi: Ray would count no GPU
    (the launcher used to declare --num-gpus 1 whatever it saw) and vLLM would die at CUDA init."""
    _fake(tmp_path / "ray", f"touch {tmp_path}/ray-was-run\n")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)}
    for args in (HEAD, ["worker", "--head-ip", "127.0.0.1", "--node-ip", "127.0.0.5"], ["mp", "--", "true"]):
        proc = _launch(args, env=env, gpu=False)
        out, _err = proc.communicate(timeout=30)
        assert proc.returncode == 1, out
        assert "ERROR: this container sees no GPU (nvidia-smi is not in this container)" in out
        assert "docker run --gpus all" in out
    assert not (tmp_path / "ray-was-run").exists()


def test_visible_gpus_counts_what_nvidia_smi_lists(L):
    def runner(out, rc=0):
        return lambda *a, **k: subprocess.CompletedProcess(a, rc, out, "")
    assert L.visible_gpus(runner("GPU 0: NVIDIA GB10 (UUID: GPU-1)\n")) == (1, "")
    assert L.visible_gpus(runner("No devices were found\n", 6))[0] == 0
    assert L.require_gpus(1, runner("GPU 0: NVIDIA GB10 (UUID: GPU-1)\nGPU 1: NVIDIA GB10 (UUID: GPU-2)\n")) == 2
    with pytest.raises(L.LaunchError, match="sees 1 GPU.s., fewer than the 2 asked for"):
        L.require_gpus(2, runner("GPU 0: NVIDIA GB10 (UUID: GPU-1)\n"))


def test_mp_exit_code_is_the_engines():
    proc = _launch(["mp", "--", sys.executable, "-c", "import sys; print('engine up'); sys.exit(7)"])
    out, _err = proc.communicate(timeout=30)
    assert proc.returncode == 7
    assert "engine up" in out
    assert "[dgxspark-launch] engine exited with code 7" in out


def test_mp_sigterm_stops_engine_and_exits_143():
    proc = _launch(["mp", "--stop-timeout", "5", "--", sys.executable, "-c",
                    "import time; print('engine up', flush=True); time.sleep(120)"])
    assert proc.stdout.readline().startswith("[dgxspark-launch] version 1.4.0, mode mp")
    for line in proc.stdout:
        if line.strip() == "engine up":
            break
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _err = proc.communicate(timeout=20)
    assert proc.returncode == 143
    assert time.monotonic() - start < 15  # far below the 120 s the engine would sleep; loose for loaded CI
    assert "received SIGTERM, stopping" in out
    assert "engine exited with code 143" in out


def test_mp_engine_that_ignores_sigterm_is_killed():
    proc = _launch(["mp", "--stop-timeout", "1", "--", sys.executable, "-c",
                    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
                    "time.sleep(120)"])
    for line in proc.stdout:
        if line.strip() == "up":
            break
    proc.send_signal(signal.SIGTERM)
    out, _err = proc.communicate(timeout=20)
    assert proc.returncode == 143
    assert "engine did not stop within 1s, killing it" in out


def test_mp_missing_engine_binary():
    proc = _launch(["mp", "--", "/nonexistent/vllm", "serve"])
    out, _err = proc.communicate(timeout=30)
    assert proc.returncode == 127
    assert "ERROR: cannot start engine (/nonexistent/vllm)" in out


def test_head_without_ray_in_path(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    proc = _launch(HEAD, env=env)
    out, _err = proc.communicate(timeout=30)
    assert proc.returncode == 127
    assert "the `ray` command is not in this image's PATH" in out


def test_head_auth_error_before_ray_starts(L, tmp_path):
    ray = _fake(tmp_path / "ray", f"touch {tmp_path}/ray-was-run\n")
    assert stat.S_IMODE(os.stat(ray).st_mode) == 0o755
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "RAY_AUTH_MODE": "token"}
    proc = _launch(HEAD, env=env)
    out, _err = proc.communicate(timeout=30)
    assert proc.returncode == L.EXIT_AUTH
    assert "ERROR: RAY_AUTH_MODE=token but RAY_AUTH_TOKEN_PATH is not set" in out
    assert not (tmp_path / "ray-was-run").exists()


def _flaky_head(tmp_path, fail_first):
    """A `ray` whose `start --head` fails FAIL_FIRST times as Ray's does when its raylet registers too late, then
    starts (and lives 4 s); `list nodes` shows the two-node fixture cluster once a start succeeded."""
    nodes = FIXTURES / "nodes_healthy_brief.json"
    return _fake(tmp_path / "ray", f"""T={tmp_path}
case "$1" in
  start) n=$(($(cat $T/starts 2>/dev/null || echo 0) + 1)); echo $n > $T/starts
         if [ "$n" -le {fail_first} ]; then
           echo "Exception: The current node timed out during startup. This could happen because some of the"
           echo "raylet failed to startup or the GCS has become overloaded."
           exit 1
         fi
         echo "Ray runtime started."; sleep 4; exit 0 ;;
  stop) echo "stop after $(cat $T/starts)" >> $T/stops; exit 0 ;;
  list) if [ "$(cat $T/starts)" -gt {fail_first} ]; then cat {nodes}; exit 0; fi
        echo "Failed to connect to API server" >&2; exit 1 ;;
  *) echo "ray $* is not faked" >&2; exit 1 ;;
esac
""")


HEAD_LOCAL = ["head", "--node-ip", "127.0.0.2", "--expect-nodes", "2", "--expect-gpus", "2", "--wait-timeout", "300",
              "--progress-interval", "1"]


def test_a_head_that_timed_out_during_startup_is_stopped_and_started_again(L, tmp_path):
    """Ray's raylet has a hard-coded 30 s to register; a busy head misses it (ray-project/ray#65983). The launcher
    clears what the attempt left (`ray stop`) and starts the head again while the wait has time for it."""
    _flaky_head(tmp_path, fail_first=1)
    proc = _launch(HEAD_LOCAL, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert ("the Ray head (`ray start --head`, attempt 1) exited with code 1 before the cluster was complete (its "
            "output is above); stopping what it left and starting it again") in out
    assert "The current node timed out during startup" in out  # Ray's own words stay in the log
    assert "cluster ready after" in out and "2/2 nodes alive, 2/2 GPUs" in out
    assert (tmp_path / "stops").read_text().splitlines()[0] == "stop after 1"  # cleared before attempt 2


def test_a_head_that_never_starts_fails_after_its_attempts(L, tmp_path):
    _flaky_head(tmp_path, fail_first=9)
    proc = _launch(HEAD_LOCAL, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == L.EXIT_RAY_FAILED, out
    assert (tmp_path / "starts").read_text().strip() == str(L.HEAD_ATTEMPTS)
    assert (f"ERROR: the Ray head (`ray start --head`) exited with code 1 before the cluster was complete (attempt "
            f"{L.HEAD_ATTEMPTS} of {L.HEAD_ATTEMPTS}); its output is above") in out


def test_no_new_head_attempt_when_the_wait_has_no_room_for_it(L, tmp_path):
    _flaky_head(tmp_path, fail_first=1)
    proc = _launch([*HEAD_LOCAL[:-4], "--wait-timeout", "30", "--progress-interval", "1"], env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == L.EXIT_RAY_FAILED, out
    assert "(attempt 1 of 3)" in out and "starting it again" not in out


def test_worker_times_out_naming_head_and_node(L, tmp_path):
    ray = _fake(tmp_path / "ray", "exit 1\n")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    start = time.monotonic()
    # 127.0.0.1 port 9 (discard) is closed on test machines: connection refused at once.
    proc = _launch(["worker", "--head-ip", "127.0.0.1", "--port", "9", "--node-ip", "127.0.0.5",
                    "--connect-timeout", "3", "--progress-interval", "1"], env=env)
    out, _err = proc.communicate(timeout=30)
    assert proc.returncode == L.EXIT_TIMEOUT
    assert time.monotonic() - start < 20  # bounded by --connect-timeout 3, loose for loaded CI
    assert "waiting 0s/3s for the Ray head at 127.0.0.1:9 (this node 127.0.0.5): Connection refused" in out
    assert ("ERROR: could not join the Ray head at 127.0.0.1:9 within 3s as node 127.0.0.5: Connection refused"
            in out)


# ---------------------------------------------------------------- serving environment file

def test_serve_env_file_reaches_the_engine_only_and_is_never_printed(tmp_path):
    env_file = tmp_path / "serve.env"
    env_file.write_text("# the API key\nVLLM_API_KEY=s3cr3t-value=with-equals\n\nOTHER= spaced \n")
    env_file.chmod(0o600)
    proc = _launch(["mp", "--serve-env-file", str(env_file), "--", sys.executable, "-c",
                    "import hashlib, os; print('key', hashlib.sha256(os.environ['VLLM_API_KEY'].encode()).hexdigest()[:12], "
                    "repr(os.environ['OTHER']))"], env=dict(os.environ, HOME=str(tmp_path)))
    out, _err = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert f"key {hashlib.sha256(b's3cr3t-value=with-equals').hexdigest()[:12]} ' spaced '" in out
    assert "serving environment from" in out and "OTHER, VLLM_API_KEY (values not shown)" in out
    assert out.count("s3cr3t") == 0


def test_serve_env_file_variables_are_kept_from_vllms_ray_workers(L, tmp_path):
    """Issue 15.4: vLLM's Ray executor copies VLLM_API_KEY (a variable vLLM registers) to the Ray workers of every
    node unless VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json lists it (vllm/ray/ray_env.py). The launcher lists
    the env file's names there (names only) before the engine starts, keeping what the file already lists."""
    env_file = tmp_path / "serve.env"
    env_file.write_text("VLLM_API_KEY=s3cr3t\n")
    home = tmp_path / "home"
    (home / ".config" / "vllm").mkdir(parents=True)
    (home / ".config" / "vllm" / "ray_non_carry_over_env_vars.json").write_text('["MY_OWN"]')
    engine = ("import json, os; p = os.path.expanduser('~/.config/vllm/ray_non_carry_over_env_vars.json'); "
              "print('excluded', json.load(open(p)), 'key' if os.environ.get('VLLM_API_KEY') else 'no key')")
    proc = _launch(["mp", "--serve-env-file", str(env_file), "--", sys.executable, "-c", engine],
                   env=dict(os.environ, HOME=str(home)))
    out, _err = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "excluded ['MY_OWN', 'VLLM_API_KEY'] key" in out  # the engine has the key; its Ray workers will not
    assert "VLLM_API_KEY kept from vLLM's Ray workers" in out and "s3cr3t" not in out
    # VLLM_CONFIG_ROOT, then XDG_CONFIG_HOME, as vLLM resolves it; an unreadable list is replaced.
    root = tmp_path / "cfg"
    assert L.keep_from_ray_workers(["VLLM_API_KEY"], {"VLLM_CONFIG_ROOT": str(root)}) == str(
        root / "ray_non_carry_over_env_vars.json")
    assert L.vllm_config_root({"XDG_CONFIG_HOME": "/x"}) == "/x/vllm"
    (root / "ray_non_carry_over_env_vars.json").write_text("{not json")
    L.keep_from_ray_workers(["VLLM_API_KEY"], {"VLLM_CONFIG_ROOT": str(root)})
    assert json.loads((root / "ray_non_carry_over_env_vars.json").read_text()) == ["VLLM_API_KEY"]


@pytest.mark.parametrize("content, message", [
    ("not a pair\n", "line 1: expected KEY=VALUE"),
    ("1BAD=x\n", "line 1: expected KEY=VALUE"),
])
def test_serve_env_file_errors(L, tmp_path, content, message):
    env_file = tmp_path / "serve.env"
    env_file.write_text(content)
    with pytest.raises(L.LaunchError, match=message):
        L.read_env_file(str(env_file))
    with pytest.raises(L.LaunchError, match="cannot read --serve-env-file"):
        L.read_env_file(str(tmp_path / "missing.env"))


def test_a_hanging_ray_start_attempt_is_bounded_by_the_connect_budget(L, tmp_path):
    """Finding 8: a `ray start` attempt that hung (the head answers, the join never completes) was not bounded."""
    status = FIXTURES / "status_healthy.txt"
    _fake(tmp_path / "ray", f'case "$1" in status) cat {status};; start) exec sleep 120;; esac\nexit 0\n')
    with socket.socket() as head:  # the head's GCS port answers
        head.bind(("127.0.0.1", 0))
        head.listen(8)
        port = head.getsockname()[1]
        start = time.monotonic()
        proc = _launch(["worker", "--head-ip", "127.0.0.1", "--port", str(port), "--node-ip", "127.0.0.5",
                        "--connect-timeout", "3", "--stop-timeout", "2"], env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
        try:
            out, _err = proc.communicate(timeout=40)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == L.EXIT_TIMEOUT, out
    assert time.monotonic() - start < 30  # 3 s of budget and 2 s to stop; loose for loaded CI
    assert "starting ray worker (attempt 1)" in out
    assert ("ERROR: `ray start` (attempt 1) did not start Ray within the connect budget of 3s; it was stopped. "
            "Node 127.0.0.5 could not join the Ray head at 127.0.0.1:" in out), out
