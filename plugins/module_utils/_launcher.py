# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""dgxspark-launch: the command of every node container of the dgxspark.vllm collection.

The collection always starts node containers with ``--entrypoint`` set to this
program, so the image's own ENTRYPOINT never runs. ``_node_program`` builds it
into one python3 file from this module and the module_utils it imports (``_ray``
parses the Ray CLI's outputs, as for the module ray_cluster_info). Standard
library only; it runs with the ``python3`` of arbitrary vLLM images (Python >= 3.10)
and calls the ``ray`` CLI of that image. It is a program of its own, not an Ansible module (no AnsibleModule,
hence no run_command): it starts and supervises its processes with ``subprocess``.

Modes (argv only, never a shell string)::

    dgxspark-launch head --node-ip IP [--port 6379] --expect-nodes N --expect-gpus G --wait-timeout S
                         [--expect-node-ip IP ...] [--dashboard-host 127.0.0.1] [--num-gpus 1]
                         [--ray-arg=--object-store-memory=1073741824 ...] [-- SERVE ARGV...]
    dgxspark-launch worker --head-ip IP [--port 6379] --node-ip IP [--num-gpus 1] [--connect-timeout S]
    dgxspark-launch mp -- SERVE ARGV...
    dgxspark-launch version

``head`` runs ``ray start --head --block`` as a supervised child, waits (bounded)
until the cluster has the expected nodes and GPUs, printing a progress line that
names the nodes it still waits for, then runs the serving argv as a supervised
child: its output is the container's output and its exit code becomes the
container's. ``worker`` waits (bounded) until the head's GCS port answers, then
runs ``ray start --address HEAD:PORT --block`` in the foreground, retrying while
Ray has not started and the connect budget lasts; an attempt that hangs before
Ray started is stopped when the budget is spent. ``mp`` runs the engine
directly. The launcher stays PID 1: it forwards SIGTERM/SIGINT to its children,
reaps orphans, and on the way out runs ``ray stop`` (bounded) so that
``docker stop`` leaves no raylet behind.

Ray token authentication (Ray >= 2.52), as implemented by Ray 2.54
(``ray/_private/authentication/authentication_token_setup.py``,
``ray/scripts/scripts.py`` and the C++ ``AuthenticationTokenLoader``):

* ``RAY_AUTH_MODE=token`` switches it on; it is read from the environment only
  (``ray start`` refuses it in ``--system-config``). Every process of the
  cluster and every client (``ray status``, ``ray list``, the vLLM driver)
  inherits it from the container environment.
* The token is looked up in ``RAY_AUTH_TOKEN`` (env value), then the file named
  by ``RAY_AUTH_TOKEN_PATH`` ("RAY_AUTH_TOKEN_PATH is set but file cannot be
  opened or is empty" is fatal), then ``~/.ray/auth_token``.
  ``ray start`` calls ``ensure_token_if_auth_enabled(create_token_if_missing=False)``:
  without a token it fails; ``ray get-auth-token --generate`` creates one.
* This launcher requires ``RAY_AUTH_TOKEN_PATH`` to name a readable, non-empty
  regular file when ``RAY_AUTH_MODE=token``, refuses ``RAY_AUTH_TOKEN`` in the
  environment (``docker inspect`` would show it) and never reads the token into
  its output. Only the path and the file mode are ever printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from ansible_collections.dgxspark.vllm.plugins.module_utils import _ray

# Other roles hash this into image tags: bump it with every behaviour change.
LAUNCHER_VERSION = "1.4.0"

PROG = "dgxspark-launch"

# Ports pinned so that a firewall can allow exactly them (Ray picks random
# ports otherwise). The flag names are those of `ray start --help` in Ray 2.54.
DEFAULT_PORTS = {
    "node_manager_port": 6700,
    "object_manager_port": 6701,
    "runtime_env_agent_port": 6702,
    "dashboard_agent_grpc_port": 6703,
    "metrics_export_port": 6704,
    "dashboard_agent_listen_port": 52365,
    "min_worker_port": 10002,
    "max_worker_port": 10101,
}
HEAD_PORTS = {
    "ray_client_server_port": 10001,
    "dashboard_port": 8265,
}
RAY_STARTED_MARKER = "Ray runtime started"
EXIT_USAGE = 2
EXIT_TIMEOUT = 3
EXIT_RAY_FAILED = 4
EXIT_AUTH = 5
# `ray start --head` gives its raylet a hard-coded 30 s to register with the GCS, and fails ("The current node timed
# out during startup") when a busy node starts its agents late (ray-project/ray#65983). The head is started again,
# after `ray stop`, while the wait leaves at least HEAD_RETRY_MIN_S for the new attempt.
HEAD_ATTEMPTS = 3
HEAD_RETRY_MIN_S = 45.0


class LaunchError(Exception):
    """A failure with a message for the container log and an exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def log(message: str) -> None:
    """One line to stdout (the container log), flushed at once."""
    sys.stdout.write(f"[{PROG}] {message}\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------
# Argument parsing
# --------------------------------------------------------------------------

def split_serve_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split ``argv`` at the first ``--``: (launcher args, serving argv)."""
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], argv[index + 1:]
    return list(argv), []


def _port(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port")
    return number


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return number


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} must not be negative")
    return number


def _seconds(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be a positive number of seconds")
    return number


def _add_node_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-ip", required=True, help="fabric IP of this node (Ray --node-ip-address)")
    parser.add_argument("--port", type=_port, default=6379, help="GCS port of the head (default 6379)")
    parser.add_argument("--num-gpus", type=_non_negative, default=1,
                        help="GPUs this node must have (default 1); Ray is given the GPUs the container sees "
                             "(nvidia-smi -L), and the launcher fails when it sees fewer")
    for name, default in DEFAULT_PORTS.items():
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=_port, default=default,
                            help=f"pinned Ray port (default {default})")
    parser.add_argument("--ray-arg", action="append", default=[], metavar="ARG",
                        help="extra argument for `ray start`, repeatable; write values starting with - as "
                             "--ray-arg=--object-store-memory=1073741824")
    parser.add_argument("--stop-timeout", type=_seconds, default=10.0,
                        help="seconds given to the children on shutdown, then as much again to `ray stop` "
                             "(default 10; give `docker run --stop-timeout` at least twice this plus 5)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Ray head/worker and engine launcher of dgxspark.vllm")
    sub = parser.add_subparsers(dest="mode", required=True)

    head = sub.add_parser("head", help="start the Ray head, wait for the cluster, then run the serving argv")
    _add_node_options(head)
    head.add_argument("--expect-nodes", type=_positive, required=True, help="alive Ray nodes to wait for")
    head.add_argument("--expect-gpus", type=_non_negative, required=True, help="GPUs the cluster must show")
    head.add_argument("--expect-node-ip", action="append", default=[], metavar="IP",
                      help="IP a node must register with (repeatable; the head's own IP is implied)")
    head.add_argument("--wait-timeout", type=_seconds, required=True, help="seconds to wait for the cluster")
    head.add_argument("--progress-interval", type=_seconds, default=5.0, help="seconds between progress lines")
    head.add_argument("--dashboard-host", default="127.0.0.1", help="dashboard bind address (default 127.0.0.1)")
    for name, default in HEAD_PORTS.items():
        head.add_argument("--" + name.replace("_", "-"), dest=name, type=_port, default=default,
                          help=f"pinned Ray head port (default {default})")

    worker = sub.add_parser("worker", help="run a Ray worker node in the foreground")
    _add_node_options(worker)
    worker.add_argument("--head-ip", required=True, help="fabric IP of the Ray head")
    worker.add_argument("--connect-timeout", type=_seconds, default=300.0,
                        help="seconds to keep trying to reach the head (default 300)")
    worker.add_argument("--progress-interval", type=_seconds, default=5.0, help="seconds between progress lines")

    mp = sub.add_parser("mp", help="run the engine directly, without Ray")
    mp.add_argument("--stop-timeout", type=_seconds, default=10.0, help="seconds given to the engine on shutdown")
    for parser_ in (head, mp):
        parser_.add_argument("--serve-env-file", metavar="PATH",
                             help="KEY=VALUE lines added to the serving process's environment only (e.g. VLLM_API_KEY); "
                                  "values are never printed, and never reach docker inspect or the command line")

    sub.add_parser("version", help="print the launcher version")
    return parser


_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def read_env_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines (blank lines and # comments skipped); values are taken literally, no shell expansion."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise LaunchError(f"--serve-env-file {path} is not a regular file", EXIT_USAGE)
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise LaunchError(f"cannot read --serve-env-file {path}: {exc.strerror}", EXIT_USAGE) from None
    env = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not _ENV_KEY.match(key.strip()):
            raise LaunchError(f"--serve-env-file {path}, line {number}: expected KEY=VALUE", EXIT_USAGE)
        env[key.strip()] = value
    return env


# vLLM's Ray executor copies every variable vLLM registers (VLLM_API_KEY among them) and every VLLM_*/HF_* one from
# the engine's environment to its Ray workers, on every node, except the names listed in this file under
# VLLM_CONFIG_ROOT (vllm/ray/ray_env.py: RAY_NON_CARRY_OVER_ENV_VARS_FILE, read when vLLM imports it).
RAY_NON_CARRY_OVER_FILE = "ray_non_carry_over_env_vars.json"


def vllm_config_root(environ: dict[str, str]) -> str:
    """VLLM_CONFIG_ROOT as vLLM resolves it (vllm/envs.py): the variable, else $XDG_CONFIG_HOME/vllm, else
    ~/.config/vllm."""
    if environ.get("VLLM_CONFIG_ROOT"):
        return os.path.expanduser(environ["VLLM_CONFIG_ROOT"])
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.expanduser(os.path.join(base, "vllm"))


def keep_from_ray_workers(names, environ: dict[str, str]) -> str:
    """Add NAMES to vLLM's list of variables its Ray executor does not copy to the workers; returns the file.

    The names already listed are kept; a list that is not valid JSON is replaced (vLLM would ignore it whole).
    Only names are written, never values.
    """
    root = vllm_config_root(environ)
    path = os.path.join(root, RAY_NON_CARRY_OVER_FILE)
    listed: list[str] = []
    try:
        with open(path, encoding="utf-8") as fh:
            loaded = json.load(fh)
        if isinstance(loaded, list):
            listed = [str(name) for name in loaded]
    except (OSError, ValueError):
        pass
    wanted = sorted(set(listed) | set(names))
    if wanted != sorted(listed):
        os.makedirs(root, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(wanted, fh)
        os.replace(tmp, path)
    return path


def serve_environment(path: str | None) -> dict[str, str] | None:
    """The serving process's environment: the container's plus the env file's (None: inherit as is).

    The env file's variables are for the serving process only: they are kept from vLLM's Ray workers
    (:func:`keep_from_ray_workers`), so the API key does not travel to the other nodes' processes.
    """
    if not path:
        return None
    extra = read_env_file(path)
    log(f"serving environment from {path}: {', '.join(sorted(extra)) or 'nothing'} (values not shown)")
    env = {**os.environ, **extra}
    if extra:
        try:
            listed = keep_from_ray_workers(extra, env)
        except OSError as exc:
            raise LaunchError(f"cannot keep {', '.join(sorted(extra))} from vLLM's Ray workers: {exc}",
                              EXIT_USAGE) from None
        log(f"{', '.join(sorted(extra))} kept from vLLM's Ray workers ({listed})")
    return env


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse the launcher argv; the serving argv after ``--`` lands in ``serve``."""
    own, serve = split_serve_argv(argv)
    parser = build_parser()
    args = parser.parse_args(own)
    args.serve = serve
    if args.mode == "mp" and not serve:
        parser.error("mp needs the engine argv after --, e.g. mp -- vllm serve MODEL ...")
    if args.mode == "worker" and serve:
        parser.error("worker takes no serving argv; run the engine on the head, or use mp")
    if args.mode in ("head", "worker") and args.min_worker_port > args.max_worker_port:
        parser.error("--min-worker-port must not be above --max-worker-port")
    if args.mode == "head":
        args.expect_node_ip = list(dict.fromkeys(args.expect_node_ip))
        if args.node_ip in args.expect_node_ip:
            args.expect_node_ip.remove(args.node_ip)
        if len(args.expect_node_ip) + 1 > args.expect_nodes:
            parser.error(f"{len(args.expect_node_ip) + 1} node IPs expected (head included) but "
                         f"--expect-nodes is {args.expect_nodes}")
    return args


# --------------------------------------------------------------------------
# Ray command lines
# --------------------------------------------------------------------------

def _port_flags(args: argparse.Namespace, names) -> list[str]:
    flags: list[str] = []
    for name in names:
        flags += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    return flags


def ray_head_argv(args: argparse.Namespace, ray: str = "ray") -> list[str]:
    """`ray start` argv of the head (blocking, so the launcher supervises it)."""
    return ([ray, "start", "--head", "--block", "--node-ip-address", args.node_ip, "--port", str(args.port),
             "--dashboard-host", args.dashboard_host, "--num-gpus", str(args.num_gpus), "--disable-usage-stats"]
            + _port_flags(args, list(HEAD_PORTS) + list(DEFAULT_PORTS)) + list(args.ray_arg))


def ray_worker_argv(args: argparse.Namespace, ray: str = "ray") -> list[str]:
    """`ray start` argv of a worker node."""
    return ([ray, "start", "--block", "--address", f"{args.head_ip}:{args.port}", "--node-ip-address", args.node_ip,
             "--num-gpus", str(args.num_gpus), "--disable-usage-stats"]
            + _port_flags(args, DEFAULT_PORTS) + list(args.ray_arg))


def dashboard_url(args: argparse.Namespace) -> str:
    """The state API address as seen from inside the head's network namespace."""
    host = args.dashboard_host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{args.dashboard_port}"


# --------------------------------------------------------------------------
# Token authentication
# --------------------------------------------------------------------------

def check_auth(environ: dict[str, str]) -> str | None:
    """Validate the token setup; return a note for the log or None when auth is off.

    Raises LaunchError(EXIT_AUTH) with the reason. The token itself is never read
    into a message.
    """
    mode = environ.get("RAY_AUTH_MODE", "").strip().lower()
    if mode in ("", "disabled"):
        return None
    if mode != "token":
        raise LaunchError(f"RAY_AUTH_MODE={mode!r} is not supported; use 'token' or leave it unset", EXIT_AUTH)
    if environ.get("RAY_AUTH_TOKEN"):
        raise LaunchError("RAY_AUTH_TOKEN is set in the environment, where `docker inspect` shows it; mount the "
                          "token as a file and set RAY_AUTH_TOKEN_PATH instead", EXIT_AUTH)
    path = environ.get("RAY_AUTH_TOKEN_PATH", "")
    if not path:
        raise LaunchError("RAY_AUTH_MODE=token but RAY_AUTH_TOKEN_PATH is not set; mount the pair's token file "
                          "and point RAY_AUTH_TOKEN_PATH at it", EXIT_AUTH)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise LaunchError(f"RAY_AUTH_TOKEN_PATH={path}: cannot stat the token file ({exc.strerror})",
                          EXIT_AUTH) from None
    if not stat.S_ISREG(info.st_mode):
        raise LaunchError(f"RAY_AUTH_TOKEN_PATH={path} is not a regular file", EXIT_AUTH)
    try:
        with open(path, "rb") as handle:
            empty = not handle.read().strip()
    except OSError as exc:
        raise LaunchError(f"RAY_AUTH_TOKEN_PATH={path}: cannot read the token file ({exc.strerror}); check its "
                          f"owner and mode", EXIT_AUTH) from None
    if empty:
        raise LaunchError(f"RAY_AUTH_TOKEN_PATH={path} is empty", EXIT_AUTH)
    mode_bits = stat.S_IMODE(info.st_mode)
    note = f"Ray token authentication on, token file {path} (mode {mode_bits:04o})"
    if mode_bits & 0o077:
        note += "; WARNING: the file is readable by group/others, 0600 is expected"
    return note


# --------------------------------------------------------------------------
# Cluster state: parsing and the wait decision (pure)
# --------------------------------------------------------------------------

@dataclass
class Node:
    node_id: str
    ip: str
    alive: bool
    gpus: float
    is_head: bool = False


@dataclass
class Probe:
    """What one look at the cluster returned."""

    source: str
    nodes: list[Node] | None = None  # None: only counts are known (`ray status`)
    alive_count: int = 0
    gpus: float = 0.0
    error: str | None = None


def _gpu_value(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def parse_list_nodes(text: str) -> list[Node]:
    """The nodes of `ray list nodes --format json` (Ray 2.5x state API), parsed by _ray.parse_nodes."""
    return [Node(node_id=node["node_id"], ip=node["ip"], alive=node["alive"], gpus=node["gpus"],
                 is_head=node["is_head"]) for node in _ray.parse_nodes(text)]


def parse_sdk_nodes(text: str) -> list[Node]:
    """Parse the JSON printed by SDK_SNIPPET (autoscaler v2 cluster status, GCS only)."""
    return [Node(node_id=str(item["node_id"]), ip=str(item["ip"]), alive=bool(item["alive"]),
                 gpus=_gpu_value(item.get("gpus", 0)), is_head=bool(item.get("is_head", False)))
            for item in json.loads(text)]


@dataclass
class WaitState:
    done: bool
    alive: int
    gpus: float
    missing_ips: list[str] = field(default_factory=list)
    unexpected_ips: list[str] = field(default_factory=list)
    dead_ips: list[str] = field(default_factory=list)
    ips_known: bool = True

    def summary(self, expect_nodes: int, expect_gpus: int) -> str:
        text = f"{self.alive}/{expect_nodes} nodes alive, {_fmt_gpus(self.gpus)}/{expect_gpus} GPUs"
        if self.missing_ips:
            text += "; waiting for node(s) at " + ", ".join(self.missing_ips)
        if self.unexpected_ips:
            text += ("; node(s) registered at unexpected IP(s) " + ", ".join(self.unexpected_ips)
                     + " (wrong --node-ip / VLLM_HOST_IP / fabric interface on that node?)")
        if self.dead_ips:
            text += "; dead node(s) at " + ", ".join(self.dead_ips)
        if not self.ips_known:
            text += "; node IPs unknown (state API unavailable), counting only"
        return text


def _fmt_gpus(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def evaluate(probe: Probe, expect_nodes: int, expect_gpus: int, expected_ips: list[str]) -> WaitState:
    """Decide whether the cluster is complete.

    Complete means: at least ``expect_nodes`` alive nodes, at least ``expect_gpus``
    GPUs on alive nodes, and every expected IP registered by an alive node.
    When only counts are known (``ray status`` fallback) the IPs cannot be checked.
    """
    if probe.nodes is None:
        state = WaitState(done=False, alive=probe.alive_count, gpus=probe.gpus, ips_known=False)
        state.done = state.alive >= expect_nodes and state.gpus >= expect_gpus
        return state
    alive = [node for node in probe.nodes if node.alive]
    alive_ips = {node.ip for node in alive}
    state = WaitState(done=False, alive=len(alive), gpus=sum(node.gpus for node in alive))
    state.missing_ips = [ip for ip in expected_ips if ip not in alive_ips]
    if expected_ips and len(expected_ips) >= expect_nodes:
        # Only when every node's IP is known is an IP outside the list a mistake.
        state.unexpected_ips = sorted(ip for ip in alive_ips if ip not in expected_ips)
    state.dead_ips = sorted({node.ip for node in probe.nodes if not node.alive} - alive_ips)
    state.done = state.alive >= expect_nodes and state.gpus >= expect_gpus and not state.missing_ips
    return state


def timeout_message(state: WaitState | None, probe: Probe | None, args: argparse.Namespace,
                    status_text: str | None) -> str:
    """The reason printed when the wait times out."""
    lines = [f"timed out after {int(args.wait_timeout)}s waiting for the Ray cluster "
             f"({args.expect_nodes} nodes, {args.expect_gpus} GPUs)"]
    if state is None:
        lines.append("the cluster state could not be read: " + (probe.error if probe and probe.error else "no answer"))
    else:
        lines.append("last state: " + state.summary(args.expect_nodes, args.expect_gpus))
        for ip in state.missing_ips:
            if ip == args.node_ip:
                lines.append(f"the head itself is not registered at {ip}: check --node-ip and the fabric interface")
                continue
            lines.append(f"missing node {ip}: check that its worker container runs, reaches {args.node_ip}:{args.port}"
                         f" and starts Ray with --node-ip {ip}")
        if not state.missing_ips and state.alive < args.expect_nodes:
            lines.append(f"missing {args.expect_nodes - state.alive} node(s)")
        if state.alive >= args.expect_nodes and state.gpus < args.expect_gpus:
            lines.append("every node is there but the GPUs are not: check --num-gpus and that the container sees "
                         "its GPU")
    if status_text:
        lines.append("ray status:\n" + status_text.rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Probing a running cluster (subprocess; each call bounded)
# --------------------------------------------------------------------------

# The state API needs the dashboard (ray[default]); vLLM images often have Ray
# without it. This snippet reads the same facts from the GCS through the
# autoscaler v2 SDK, which `ray status` itself uses.
SDK_SNIPPET = r"""
import json, sys
from ray.autoscaler.v2.sdk import get_cluster_status
status = get_cluster_status(sys.argv[1])
out = []
for alive, group in ((True, status.active_nodes), (True, status.idle_nodes), (False, status.failed_nodes)):
    for node in group:
        res = node.total_resources() if callable(getattr(node, "total_resources", None)) else {}
        out.append({"node_id": node.node_id, "ip": node.ip_address, "alive": alive, "gpus": res.get("GPU", 0),
                    "is_head": "node:__internal_head__" in res})
print(json.dumps(out))
"""


def _run(argv: list[str], timeout: float, stop=lambda: False) -> tuple[int, str, str]:
    """Run a short command, bounded by ``timeout``; abandoned early when ``stop()`` turns true."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                text=True, start_new_session=True)
    except OSError as exc:
        return 127, "", f"cannot run {argv[0]}: {exc.strerror}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            out, err = proc.communicate(timeout=min(0.5, max(0.01, deadline - time.monotonic())))
            return proc.returncode, out, err
        except subprocess.TimeoutExpired:
            if stop() or time.monotonic() >= deadline:
                # The whole group: a grandchild holding the pipes would block communicate().
                _signal_group(proc.pid, signal.SIGKILL)
                proc.communicate()
                what = " ".join(argv[:2]) if argv[1:2] != ["-c"] else argv[0] + " -c"
                return 124, "", f"{what} did not answer within {timeout:.0f}s"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def probe_cluster(ray: str, python: str, gcs_address: str, dashboard: str, timeout: float = 15.0,
                  stop=lambda: False) -> Probe:
    """Look at the cluster: state API, then the GCS SDK, then `ray status` counts.

    ``stop()`` true (a signal arrived) skips the remaining probes.
    """
    errors = []
    code, out, err = _run(_ray.list_nodes_cmd(dashboard, detail=False, ray=ray), timeout, stop)
    if code == 0:
        try:
            return Probe(source="ray list nodes", nodes=parse_list_nodes(out))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            errors.append(f"ray list nodes: unparsable output ({exc})")
    else:
        errors.append("ray list nodes: " + _last_line(err or out))
    if stop():
        return Probe(source="none", error="stopping")
    code, out, err = _run([python, "-c", SDK_SNIPPET, gcs_address], timeout, stop)
    if code == 0:
        try:
            return Probe(source="gcs", nodes=parse_sdk_nodes(out))
        except (ValueError, KeyError, TypeError) as exc:
            errors.append(f"gcs: unparsable output ({exc})")
    else:
        errors.append("gcs: " + _last_line(err or out))
    if stop():
        return Probe(source="none", error="stopping")
    code, out, err = _run([ray, "status", "--address", gcs_address], timeout, stop)
    if code == 0:
        try:
            status = _ray.parse_status(out)
            return Probe(source="ray status", alive_count=status["active_nodes"], gpus=status["gpus_total"])
        except ValueError as exc:
            errors.append(f"ray status: {exc}")
    else:
        errors.append("ray status: " + _last_line(err or out))
    return Probe(source="none", error="; ".join(errors))


def ray_status_text(ray: str, gcs_address: str, timeout: float = 20.0) -> str:
    code, out, err = _run([ray, "status", "--address", gcs_address], timeout)
    return out if code == 0 else f"(ray status failed with exit code {code}: {_last_line(err or out)})"


# --------------------------------------------------------------------------
# Process supervision
# --------------------------------------------------------------------------

class Supervisor:
    """Starts children in their own process groups, forwards signals, reaps orphans."""

    def __init__(self, stop_timeout: float) -> None:
        self.stop_timeout = stop_timeout
        self.children: dict[int, str] = {}
        self.ray_pids: set[int] = set()
        self.exited: dict[int, int] = {}
        self.stop_signal: int | None = None
        self.ray_used = False

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
            log(f"received {signal.Signals(signum).name}, stopping")
            # The engine first; Ray is stopped afterwards with `ray stop`.
            for pid in list(self.children):
                if pid not in self.exited and pid not in self.ray_pids:
                    _signal_group(pid, signal.SIGTERM)

    def spawn(self, argv: list[str], name: str, stdout=None, ray: bool = False, env: dict | None = None) -> subprocess.Popen:
        log(f"starting {name}: {' '.join(argv)}")
        try:
            proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, stdout=stdout,  # pylint: disable=ansible-bad-function
                                    stderr=subprocess.STDOUT if stdout is not None else None, env=env)
        except OSError as exc:
            raise LaunchError(f"cannot start {name} ({argv[0]}): {exc.strerror}", 127) from None
        self.children[proc.pid] = name
        if ray:
            self.ray_pids.add(proc.pid)
        return proc

    def reap(self, block_seconds: float = 0.0) -> None:
        """Collect every exited child (ours and orphans re-parented to PID 1)."""
        deadline = time.monotonic() + block_seconds
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.05)
                continue
            if pid in self.children:
                self.exited[pid] = os.waitstatus_to_exitcode(status)

    def returncode(self, proc: subprocess.Popen) -> int | None:
        """The exit code of ``proc`` once reaped, as a shell reports it (128+N for signal N)."""
        code = self.exited.get(proc.pid)
        if code is None:
            return None
        proc.returncode = code
        return 128 - code if code < 0 else code

    def stop_children(self, include_ray: bool = True) -> None:
        """SIGTERM every live child group (but `ray start` ones unless asked), SIGKILL after stop_timeout."""
        live = [pid for pid in self.children if pid not in self.exited and (include_ray or pid not in self.ray_pids)]
        for pid in live:
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while any(pid not in self.exited for pid in live) and time.monotonic() < deadline:
            self.reap(0.1)
        for pid in live:
            if pid not in self.exited:
                log(f"{self.children[pid]} did not stop within {self.stop_timeout:.0f}s, killing it")
                _signal_group(pid, signal.SIGKILL)
        self.reap(0.2)

    def shutdown(self, ray: str | None) -> None:
        """Stop the engine, then Ray (`ray stop` ends `ray start --block`), then whatever is left."""
        self.stop_children(include_ray=False)
        if ray:
            self.ray_stop(ray)
            deadline = time.monotonic() + min(5.0, self.stop_timeout)
            while any(pid not in self.exited for pid in self.ray_pids) and time.monotonic() < deadline:
                self.reap(0.1)
        self.stop_children(include_ray=True)

    def ray_stop(self, ray: str) -> None:
        """`ray stop`, bounded; `--force` when the graceful stop does not finish."""
        if not self.ray_used:
            return
        grace = max(1, int(self.stop_timeout / 2))
        code, _out, err = _run([ray, "stop", "--grace-period", str(grace)], timeout=self.stop_timeout)
        if code != 0:
            log(f"ray stop failed ({_last_line(err)}), forcing")
            _run([ray, "stop", "--force"], timeout=15)
        log("ray stopped")


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _relay(stream, marker: str, seen: threading.Event) -> None:
    """Copy a child's output to ours line by line, noting when ``marker`` passes."""
    for raw in iter(stream.readline, b""):
        sys.stdout.buffer.write(raw)
        sys.stdout.buffer.flush()
        if marker.encode() in raw:
            seen.set()
    stream.close()


# --------------------------------------------------------------------------
# Modes
# --------------------------------------------------------------------------

def _find_ray() -> str:
    ray = shutil.which("ray")
    if not ray:
        raise LaunchError("the `ray` command is not in this image's PATH; use an image with Ray (the collection's "
                          "overlay strategy adds it) or mode mp", 127)
    return ray


def _wait_for_serve(sup: Supervisor, serve: subprocess.Popen, others: list[subprocess.Popen], ray: str | None) -> int:
    """Supervise ``serve``; its exit code is the container's. A death of ``others`` ends it too."""
    while True:
        sup.reap(0.5)
        code = sup.returncode(serve)
        if code is not None:
            log(f"{sup.children[serve.pid]} exited with code {code}")
            result = code
            break
        dead = [proc for proc in others if sup.returncode(proc) is not None]
        if dead:
            proc = dead[0]
            log(f"{sup.children[proc.pid]} exited with code {sup.returncode(proc)} while "
                f"{sup.children[serve.pid]} was running; stopping")
            result = EXIT_RAY_FAILED
            break
        if sup.stop_signal is not None:
            result = 128 + sup.stop_signal
            break
    sup.shutdown(ray)
    return result if sup.stop_signal is None else 128 + sup.stop_signal


def run_head(args: argparse.Namespace, sup: Supervisor) -> int:
    ray = _find_ray()
    args.num_gpus = require_gpus(args.num_gpus)
    gcs = f"{args.node_ip}:{args.port}"
    dashboard = dashboard_url(args)
    expected_ips = [args.node_ip] + args.expect_node_ip
    sup.ray_used = True
    attempt = 1
    head = sup.spawn(ray_head_argv(args, ray), "ray head", ray=True)
    log(f"waiting up to {int(args.wait_timeout)}s for {args.expect_nodes} node(s) and {args.expect_gpus} GPU(s)"
        + (f"; expected node IPs: {', '.join(expected_ips)}" if args.expect_node_ip else ""))
    start = time.monotonic()
    deadline = start + args.wait_timeout
    last_print = 0.0
    state: WaitState | None = None
    probe: Probe | None = None
    while True:
        sup.reap(0)
        if sup.stop_signal is not None:
            sup.shutdown(ray)
            return 128 + sup.stop_signal
        code = sup.returncode(head)
        if code is not None:
            left = deadline - time.monotonic()
            if attempt < HEAD_ATTEMPTS and left >= HEAD_RETRY_MIN_S:
                log(f"the Ray head (`ray start --head`, attempt {attempt}) exited with code {code} before the "
                    f"cluster was complete (its output is above); stopping what it left and starting it again "
                    f"({left:.0f}s of the wait left)")
                sup.ray_stop(ray)
                attempt += 1
                head = sup.spawn(ray_head_argv(args, ray), f"ray head (attempt {attempt})", ray=True)
                continue
            sup.shutdown(ray)
            raise LaunchError(f"the Ray head (`ray start --head`) exited with code {code} before the cluster was "
                              f"complete (attempt {attempt} of {HEAD_ATTEMPTS}); its output is above",
                              EXIT_RAY_FAILED)
        remaining = deadline - time.monotonic()
        probe = probe_cluster(ray, sys.executable, gcs, dashboard, timeout=max(2.0, min(15.0, remaining)),
                              stop=lambda: sup.stop_signal is not None)
        if sup.stop_signal is not None:
            continue
        if probe.error is None:
            state = evaluate(probe, args.expect_nodes, args.expect_gpus, expected_ips)
            if state.done:
                log(f"cluster ready after {time.monotonic() - start:.0f}s: "
                    f"{state.summary(args.expect_nodes, args.expect_gpus)} (via {probe.source})")
                break
        now = time.monotonic()
        if now >= deadline:
            message = timeout_message(state, probe, args, ray_status_text(ray, gcs))
            sup.shutdown(ray)
            raise LaunchError(message, EXIT_TIMEOUT)
        if now - last_print >= args.progress_interval:
            last_print = now
            what = (state.summary(args.expect_nodes, args.expect_gpus) if probe.error is None and state
                    else f"cluster state not readable yet ({probe.error})")
            log(f"waiting {now - start:.0f}s/{int(args.wait_timeout)}s: {what}")
        sup.reap(min(1.0, max(0.0, deadline - time.monotonic())))
    if not args.serve:
        log("no serving argv given; the container lives as long as the Ray head")
        code = _wait_for_serve(sup, head, [], ray)
        return code
    serve = sup.spawn(args.serve, "serving process", env=serve_environment(args.serve_env_file))
    return _wait_for_serve(sup, serve, [head], ray)


def _tcp_open(host: str, port: int, timeout: float) -> str | None:
    """None when a TCP connection succeeds, else the reason."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


def head_registered(nodes: list[Node] | None, alive_count: int, head_ip: str) -> bool:
    """Whether the head's own node is alive in the GCS (so a worker may join)."""
    if nodes is None:
        return alive_count >= 1
    return any(node.alive and node.ip == head_ip for node in nodes)


def _head_ready(ray: str, gcs: str, head_ip: str, stop) -> str | None:
    """None once the head node is registered; else the reason. GCS only (no dashboard)."""
    code, out, err = _run([sys.executable, "-c", SDK_SNIPPET, gcs], 15.0, stop)
    if code == 0:
        try:
            nodes = parse_sdk_nodes(out)
        except (ValueError, KeyError, TypeError):
            nodes = None
        if nodes is not None:
            if head_registered(nodes, 0, head_ip):
                return None
            return "the GCS answers but the head node is not registered yet"
    code, out, err = _run([ray, "status", "--address", gcs], 15.0, stop)
    if code != 0:
        return "the GCS port is open but `ray status` fails: " + _last_line(err or out)
    try:
        alive = _ray.parse_status(out)["active_nodes"]
    except ValueError:
        return "`ray status` gave no node list"
    return None if head_registered(None, alive, head_ip) else "the GCS answers but the head node is not registered yet"


def run_worker(args: argparse.Namespace, sup: Supervisor) -> int:
    ray = _find_ray()
    args.num_gpus = require_gpus(args.num_gpus)
    start = time.monotonic()
    deadline = start + args.connect_timeout
    target = f"{args.head_ip}:{args.port}"
    attempt = 0
    last_print = 0.0
    while True:
        reason = _tcp_open(args.head_ip, args.port, timeout=min(3.0, max(0.5, deadline - time.monotonic())))
        if reason is None:
            # Joining while the head is still starting its own raylet can make the
            # head's start time out; wait until the GCS lists the head node.
            reason = _head_ready(ray, target, args.head_ip, lambda: sup.stop_signal is not None)
        if sup.stop_signal is not None:
            return 128 + sup.stop_signal
        if reason is None:
            attempt += 1
            sup.ray_used = True
            started = threading.Event()
            proc = sup.spawn(ray_worker_argv(args, ray), f"ray worker (attempt {attempt})", stdout=subprocess.PIPE,
                             ray=True)
            relay = threading.Thread(target=_relay, args=(proc.stdout, RAY_STARTED_MARKER, started), daemon=True)
            relay.start()
            while sup.returncode(proc) is None and sup.stop_signal is None:
                if not started.is_set() and time.monotonic() >= deadline:
                    break  # an attempt that hangs before Ray started is bounded by the connect budget too
                sup.reap(0.5)
            if sup.stop_signal is not None:
                sup.shutdown(ray)
                return 128 + sup.stop_signal
            if sup.returncode(proc) is None and not started.is_set():
                sup.stop_children(include_ray=True)
                sup.ray_stop(ray)
                raise LaunchError(f"`ray start` (attempt {attempt}) did not start Ray within the connect budget of "
                                  f"{int(args.connect_timeout)}s; it was stopped. Node {args.node_ip} could not join "
                                  f"the Ray head at {target}", EXIT_TIMEOUT)
            relay.join(timeout=5)
            code = sup.returncode(proc)
            if started.is_set():
                log(f"ray worker exited with code {code}; the container ends with it")
                sup.shutdown(ray)
                return code
            reason = f"`ray start` exited with code {code} before Ray started"
            sup.ray_stop(ray)  # clear what the failed attempt left before the next one
        now = time.monotonic()
        if now >= deadline:
            raise LaunchError(f"could not join the Ray head at {target} within {int(args.connect_timeout)}s as "
                              f"node {args.node_ip}: {reason}", EXIT_TIMEOUT)
        if now - last_print >= args.progress_interval or attempt:
            last_print = now
            log(f"waiting {now - start:.0f}s/{int(args.connect_timeout)}s for the Ray head at {target} "
                f"(this node {args.node_ip}): {reason}")
        sup.reap(min(2.0, max(0.0, deadline - time.monotonic())))


def visible_gpus(runner=subprocess.run) -> tuple[int, str]:
    """GPUs this container sees, as ``(count, why none)``: the lines of ``nvidia-smi -L``.

    On a Spark, nvidia-smi and the GPU's devices are in a container only when Docker was asked for the GPU
    (``--gpus`` / ``device_requests``, NVIDIA's prestart hook puts them in); Ray's own GPU detection finds
    the same devices.
    """
    try:
        proc = runner(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, check=False)  # pylint: disable=ansible-bad-function
    except FileNotFoundError:
        return 0, "nvidia-smi is not in this container"
    except (OSError, subprocess.SubprocessError) as exc:
        return 0, f"nvidia-smi -L failed: {exc}"
    if proc.returncode != 0:
        return 0, f"nvidia-smi -L exited {proc.returncode}: {(proc.stdout + proc.stderr).strip()[:300]}"
    count = sum(1 for line in proc.stdout.splitlines() if line.startswith("GPU "))
    return count, "" if count else "nvidia-smi -L listed no GPU"


def require_gpus(wanted: int, runner=subprocess.run) -> int:
    """The GPUs to give Ray (what the container sees); LaunchError when there are fewer than ``wanted``."""
    count, why = visible_gpus(runner)
    if count == 0 and wanted > 0:
        raise LaunchError(f"this container sees no GPU ({why}). Start it with the GPU (docker run --gpus all, or "
                          "device_requests with driver nvidia): without it Ray counts no GPU and vLLM fails at CUDA init.")
    if count < wanted:
        raise LaunchError(f"this container sees {count} GPU(s), fewer than the {wanted} asked for (--num-gpus).")
    log(f"this container sees {count} GPU(s)")
    return count


def run_mp(args: argparse.Namespace, sup: Supervisor) -> int:
    require_gpus(1)
    serve = sup.spawn(args.serve, "engine", env=serve_environment(args.serve_env_file))
    return _wait_for_serve(sup, serve, [], None)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.mode == "version":
        sys.stdout.write(LAUNCHER_VERSION + "\n")
        return 0
    log(f"version {LAUNCHER_VERSION}, mode {args.mode}, python {sys.version.split()[0]}")
    sup = Supervisor(args.stop_timeout)
    sup.install_signal_handlers()
    try:
        if args.mode in ("head", "worker"):
            note = check_auth(dict(os.environ))
            log(note or "Ray token authentication off (RAY_AUTH_MODE not set to token)")
        if args.mode == "head":
            return run_head(args, sup)
        if args.mode == "worker":
            return run_worker(args, sup)
        return run_mp(args, sup)
    except LaunchError as exc:
        for line in str(exc).splitlines():
            log(("ERROR: " if line == str(exc).splitlines()[0] else "  ") + line)
        return exc.code
