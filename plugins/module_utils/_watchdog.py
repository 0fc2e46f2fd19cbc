# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""dgxspark-watchdog: the program of the watchdog container on a cluster's head (role dgxspark.vllm.watchdog).

``_node_program`` builds it into one python3 file (standard library only) that runs with the python3 of the
cluster's serving image::

    dgxspark-watchdog run CONFIG.json
    dgxspark-watchdog version

Every ``interval`` seconds it looks at the cluster the head serves (the release record, ``release.json``, names the
backend, the served model and the endpoint):

* the head's engine container (gone, exited, restarted by Docker since the last look: the engine died), read with
  an ``engine`` request to the head's own transfer program over ssh, as the workers' are;
* ``/metrics`` (``vllm:generation_tokens_total``, requests running and waiting), then a real completion with the API
  key of ``serve.env`` (never on a command line, in the environment or in a log), bounded by
  ``completion_timeout``, then ``/metrics`` again.

A completion that answers is health. One that does not, while the generation counter moved, is a busy engine, not a
stall. One that does not while ``/health`` says 200 and the counter stands still is a stall (the engine process
stopped, a rank that does not answer). A port that does not listen within ``load_timeout`` of the engine's start is
a load that will not finish; before that it is a load in progress, which is left alone.

On a fault it recovers the whole cluster in order: the head's engine container stopped, every worker's engine
container restarted, the head's started again, each node's model weights evicted from the page cache before its
engine starts by that node's transfer program (unified memory: vllm_serve does the same before a deploy). Restarts
are spaced by an
exponential backoff (``backoff_base`` x 2^(n-1), at most ``backoff_max``) and capped (``max_restarts``); at the cap
the cluster is marked failed and its engine containers are stopped on every node (freeing unified memory; health
checks then fail) instead of looping. A failed cluster that answers again (someone deployed it) is healthy again.

It has no Docker socket and no transfer key (security review H3). It reaches the engine containers through one
narrow path, the head's included: an ``engine`` request (status, stop, start, restart of the collection's engine
containers, by name and label) over ssh with a key of its own, which every member of the cluster authorizes from the
head's address (the head itself at the loopback) with the forced command ``dgxspark-transfer relay.json --only
engine`` (role dgxspark.vllm.watchdog, tasks/trust.yml).

Every event (detected, action, result, duration) is a JSON line in ``events.jsonl`` (bounded: one rotated file
kept) and the state, with the last events, is ``state.json``; both in ``state_dir``. While the maintenance marker
exists (a rollout or a deploy switching the cluster: JSON ``{"reason": ..., "until": EPOCH}``) and ``until`` is in
the future, nothing is acted on.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import typing as t
from datetime import datetime

from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import ssh_argv

VERSION = "1.0.0"
PROG = "dgxspark-watchdog"

DEFAULTS: dict[str, t.Any] = {
    "interval": 30.0,
    "completion_timeout": 30.0,
    "load_timeout": 1800.0,
    "max_restarts": 3,
    "stall_verdicts": 2,
    "backoff_base": 60.0,
    "backoff_max": 1800.0,
    "stable_seconds": 3600.0,
    # While a member cannot be reached over ssh, a restart cannot form the cluster: no restart is spent for this long.
    "member_wait": 900.0,
    "stop_timeout": 30,
    "release_file": "/etc/dgxspark/vllm/release.json",
    "key_file": "/etc/dgxspark/vllm/serve.env",
    "state_dir": "/var/lib/dgxspark/watchdog",
    # The node exporter's textfile directory (roles/monitoring): the watchdog's verdict for Prometheus ("" for none).
    "metrics_dir": "",
    "maintenance_file": "/var/lib/dgxspark/watchdog/maintenance",
    "events_max_bytes": 1048576,
    "last_events": 10,
    "containers": {"ray": {"head": "dgxspark-ray-head", "worker": "dgxspark-ray-worker"},
                   "mp": {"head": "dgxspark-vllm", "worker": "dgxspark-vllm"}},
    "workers": [],
    "head": {},
    "ssh": {},
}
# Findings: no action, or a fault that calls for a recovery.
QUIET = ("ok", "busy", "loading", "idle")
FAULTS = ("stall", "dead_rank", "engine_gone", "engine_exited", "unhealthy", "load_timeout")
_SAMPLE = re.compile(r"^(vllm:[a-z_]+)(?:\{[^}]*\})? ([-+0-9.eE]+|NaN)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class ConfigError(ValueError):
    """The configuration file is unusable; the message names the key."""


# --------------------------------------------------------------------------- pure helpers (unit tested)

def load_config(data: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The configuration with defaults, checked."""
    if not isinstance(data, t.Mapping):
        raise ConfigError("the configuration must be a JSON object")
    cfg = dict(DEFAULTS)
    cfg.update(data)
    if not isinstance(cfg.get("cluster"), str) or not cfg["cluster"]:
        raise ConfigError("cluster must name the cluster")
    for key in ("interval", "completion_timeout", "load_timeout", "backoff_base", "backoff_max", "stable_seconds",
                "member_wait"):
        try:
            cfg[key] = float(cfg[key])
        except (TypeError, ValueError):
            raise ConfigError(f"{key} must be a number of seconds (is {cfg[key]!r})") from None
        if cfg[key] <= 0:
            raise ConfigError(f"{key} must be positive (is {cfg[key]})")
    for key in ("max_restarts", "stop_timeout", "events_max_bytes", "last_events"):
        if isinstance(cfg[key], bool) or not isinstance(cfg[key], int) or cfg[key] < 0:
            raise ConfigError(f"{key} must be a whole number >= 0 (is {cfg[key]!r})")
    if isinstance(cfg["stall_verdicts"], bool) or not isinstance(cfg["stall_verdicts"], int) or cfg["stall_verdicts"] < 1:
        raise ConfigError(f"stall_verdicts must be a whole number >= 1 (is {cfg['stall_verdicts']!r})")
    for backend, names in cfg["containers"].items():
        if backend not in ("ray", "mp") or not isinstance(names, t.Mapping) or \
                not all(_NAME.match(str(names.get(r, ""))) for r in ("head", "worker")):
            raise ConfigError("containers must map ray and mp to {head: NAME, worker: NAME}")
    workers = cfg["workers"]
    if not isinstance(workers, list) or not all(isinstance(w, t.Mapping) and w.get("host") and w.get("ip")
                                                for w in workers):
        raise ConfigError("workers must be a list of {host, ip} (their fabric addresses)")
    head = cfg["head"]
    if not isinstance(head, t.Mapping) or not head.get("host") or not head.get("ip"):
        raise ConfigError("head must be {host, ip}: the head itself, at the address its own ssh server answers on "
                          "(the role writes 127.0.0.1; its engine container is reached as the workers' are)")
    if not isinstance(cfg["metrics_dir"], str) or (cfg["metrics_dir"] and not cfg["metrics_dir"].startswith("/")):
        raise ConfigError(f"metrics_dir must be an absolute directory, or empty for none (is {cfg['metrics_dir']!r})")
    if not isinstance(cfg["ssh"], t.Mapping) or not all(cfg["ssh"].get(k) for k in ("key", "known_hosts")):
        raise ConfigError("ssh needs key (the watchdog's own) and known_hosts")
    return cfg


# The counters that move while the engine works: decoded tokens, prefilled (prompt) tokens, and the engine's steps (the
# iteration histogram's count: a long prompt is prefilled in chunks, one step each, before its first token).
PROGRESS = {"generation_tokens": "generated", "prompt_tokens": "prefilled", "iterations": "engine steps"}


def parse_metrics(text: str) -> dict[str, float]:
    """Sums over label sets of the vLLM samples the watchdog reads: generated and prompt tokens, engine iterations,
    requests running and waiting."""
    wanted = {"vllm:generation_tokens_total": "generation_tokens", "vllm:prompt_tokens_total": "prompt_tokens",
              "vllm:iteration_tokens_total_count": "iterations", "vllm:num_requests_running": "running",
              "vllm:num_requests_waiting": "waiting"}
    out: dict[str, float] = {}
    for line in str(text or "").splitlines():
        match = _SAMPLE.match(line.strip())
        if match and match.group(1) in wanted and match.group(2) != "NaN":
            key = wanted[match.group(1)]
            out[key] = out.get(key, 0.0) + float(match.group(2))
    return out


def docker_time(text: t.Any) -> float | None:
    """Seconds since the epoch of a Docker timestamp (nanoseconds cut); None for Docker's zero time or junk."""
    if not isinstance(text, str) or not text or text.startswith("0001-"):
        return None
    match = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    if not match:
        return None
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    stamp = datetime.fromisoformat(match.group(1) + zone).timestamp()
    return stamp + (float("0." + match.group(2)[:6]) if match.group(2) else 0.0)


def endpoint(release: t.Mapping[str, t.Any]) -> tuple[str, int] | None:
    """(host, port) the head reaches its engine at: the release's bind address, loopback for a wildcard one."""
    ep = release.get("endpoint") or {}
    try:
        port = int(ep.get("port"))
    except (TypeError, ValueError):
        return None
    host = str(ep.get("host") or "")
    if host in ("", "0.0.0.0", "::", "127.0.0.1", "localhost"):
        host = "127.0.0.1"
    return host, port


def diagnose(obs: t.Mapping[str, t.Any], cfg: t.Mapping[str, t.Any], previous: t.Mapping[str, t.Any] | None = None
             ) -> tuple[str, str]:
    """(finding, detail) of one look at the cluster.

    ``obs``: ``release`` (bool: the head serves a release), ``container`` (the head's engine container: ``exists``,
    ``running``, ``status``, ``exit_code``, ``started_at`` epoch, ``restart_count``), ``listening``, ``health``
    (status code or None), ``completion`` (``ok``, ``seconds``, ``error``), ``before``/``after`` (parsed metrics or
    None), ``workers`` ({host: {name: state} or {"error": text}}, read only when the engine does not answer),
    ``now``. ``previous``: the last observation's container (a restart count that grew means Docker restarted a dead
    engine).
    """
    if not obs.get("release"):
        return "idle", "no release recorded on the head (nothing deployed)"
    box = obs.get("container") or {}
    if not box.get("exists"):
        return "engine_gone", "the engine container is gone"
    if not box.get("running"):
        return "engine_exited", f"the engine container is {box.get('status')} (exit code {box.get('exit_code')})"
    prev_count = (previous or {}).get("restart_count")
    if prev_count is not None and box.get("restart_count", 0) > prev_count and \
            (previous or {}).get("started_at") != box.get("started_at"):
        return "engine_exited", (f"the engine exited and Docker restarted it (restart count {prev_count} -> "
                                 f"{box.get('restart_count')})")
    completion = obs.get("completion") or {}
    if completion.get("ok"):
        return "ok", f"completion answered in {completion.get('seconds', 0):.2f}s"
    started = box.get("started_at")
    age = obs["now"] - started if started else None
    loading = age is not None and age < cfg["load_timeout"]
    if not obs.get("listening"):
        if loading:
            return "loading", f"engine started {age:.0f}s ago, not listening yet (load timeout {cfg['load_timeout']:.0f}s)"
        return "load_timeout", f"the engine does not listen {cfg['load_timeout']:.0f}s after its start"
    health = obs.get("health")
    if health != 200:
        if loading and health in (None, 404):
            return "loading", f"engine started {age:.0f}s ago, /health {health}"
        return "unhealthy", f"/health answers {health}: {completion.get('error', '')}".rstrip(": ")
    before, after = obs.get("before"), obs.get("after")
    moved = [f"{after[key] - before.get(key, 0):.0f} {what}" for key, what in PROGRESS.items()
             if before and after and after.get(key, 0) > before.get(key, 0)]
    if moved:
        # A long prefill decodes nothing for minutes: prompt tokens and engine steps are progress too (review M5).
        return "busy", (f"the completion did not answer within {cfg['completion_timeout']:.0f}s but the engine "
                        f"moved meanwhile ({', '.join(moved)})")
    queue = after or before or {}
    detail = (f"/health 200 but the completion did not answer within {cfg['completion_timeout']:.0f}s "
              f"({completion.get('error', 'no answer')}) and the engine made no progress: no token generated or "
              f"prefilled, no engine step ({queue.get('running', 0):.0f} running, {queue.get('waiting', 0):.0f} waiting)")
    down = []
    for host, states in sorted((obs.get("workers") or {}).items()):
        for name, state in sorted(states.items()):
            if name != "error" and isinstance(state, t.Mapping) and not state.get("running"):
                down.append(f"{host} {name} {'gone' if not state.get('exists') else state.get('status')}")
    if down:
        return "dead_rank", detail + "; worker engine container(s) down: " + ", ".join(down)
    return "stall", detail


def backoff(attempts: int, cfg: t.Mapping[str, t.Any]) -> float:
    """Seconds to wait before the next restart when ATTEMPTS restarts were made (the first one is immediate)."""
    if attempts <= 0:
        return 0.0
    return float(min(cfg["backoff_base"] * (2 ** (attempts - 1)), cfg["backoff_max"]))


def hold_for_members(state: dict[str, t.Any], unreachable: t.Mapping[str, str], cfg: t.Mapping[str, t.Any],
                     now: float) -> tuple[bool, list[dict[str, t.Any]]]:
    """Whether a restart DECIDE chose waits because members cannot be reached (UNREACHABLE: host -> why), and the
    events to record (review M5).

    A restart while a member is unreachable cannot form the cluster: it would spend the restart budget and end at the
    cap, with every engine stopped, for a node that was merely rebooting or off the fabric for a while. So no restart
    is spent for up to ``member_wait`` seconds from the first look that found a member unreachable (event
    ``members_unreachable``, the hosts and why); the wait ends when every member answers (``members_back``), or at
    ``member_wait`` (``member_wait_over``: the restarts go on, and the cap still bounds them).
    """
    events: list[dict[str, t.Any]] = []
    if not unreachable:
        if state.get("unreachable_since") is not None:
            events.append({"event": "members_back", "detail": "every member answers again",
                           "waited": round(now - state["unreachable_since"], 1)})
        state.update(unreachable_since=None, unreachable_wait_over=False)
        return False, events
    hosts = ", ".join(f"{host} ({why})" for host, why in sorted(unreachable.items()))
    if state.get("unreachable_since") is None:
        state["unreachable_since"] = now
        events.append({"event": "members_unreachable", "hosts": sorted(unreachable), "detail": (
            f"cannot reach {hosts}: no restart is spent on a cluster that cannot form; waiting up to "
            f"{cfg['member_wait']:.0f}s for it"), "restarts": state.get("attempts", 0)})
    waited = now - state["unreachable_since"]
    if waited < cfg["member_wait"]:
        state["verdict"] = "waiting_for_members"
        state["detail"] = (f"{state.get('detail', '')} - waiting {waited:.0f}s of {cfg['member_wait']:.0f}s for "
                           f"{', '.join(sorted(unreachable))} (unreachable): no restart spent").lstrip(" -")
        return True, events
    if not state.get("unreachable_wait_over"):
        state["unreachable_wait_over"] = True
        events.append({"event": "member_wait_over", "hosts": sorted(unreachable), "detail": (
            f"{hosts} still unreachable after {waited:.0f}s: restarting anyway (at most "
            f"{cfg['max_restarts']} restart(s))")})
    return False, events


METRICS_FILE = "dgxspark-watchdog.prom"
VERDICTS = QUIET + FAULTS + ("starting", "maintenance", "failed", "waiting_for_members")


def render_metrics(state: t.Mapping[str, t.Any]) -> str:
    """The watchdog's state in the text exposition format, for the node exporter's textfile collector (review M5:
    Prometheus sees a cluster given up, not only its engine target down). No cluster label: the node exporter's
    target carries the head's cluster, node and role labels."""
    verdict = str(state.get("verdict") or "starting")
    lines = [
        "# HELP dgxspark_watchdog_failed 1 when the watchdog gave the cluster up at its restart cap: its engines are "
        "stopped and stay so (through a reboot) until an operator deploys it again.",
        "# TYPE dgxspark_watchdog_failed gauge",
        f"dgxspark_watchdog_failed {1 if state.get('failed') else 0}",
        "# HELP dgxspark_watchdog_restarts Restarts spent of the cluster's budget (watchdog_max_restarts).",
        "# TYPE dgxspark_watchdog_restarts gauge",
        f"dgxspark_watchdog_restarts {int(state.get('attempts') or 0)}",
        "# HELP dgxspark_watchdog_verdict The watchdog's last verdict on the cluster (1 for the current one).",
        "# TYPE dgxspark_watchdog_verdict gauge",
    ]
    lines += [f'dgxspark_watchdog_verdict{{verdict="{name}"}} {1 if name == verdict else 0}' for name in VERDICTS]
    if state.get("last_check"):
        lines += ["# HELP dgxspark_watchdog_last_check_timestamp_seconds When the watchdog last looked.",
                  "# TYPE dgxspark_watchdog_last_check_timestamp_seconds gauge",
                  f"dgxspark_watchdog_last_check_timestamp_seconds {float(state['last_check']):.3f}"]
    return "\n".join(lines) + "\n"


def new_state(cluster: str) -> dict[str, t.Any]:
    return {"cluster": cluster, "verdict": "starting", "detail": "", "attempts": 0, "stalls": 0, "failed": False,
            "failed_at": None, "last_restart_at": None, "incident": None, "healthy_since": None, "last_ok": None,
            "last_check": None, "next_restart_at": None, "unreachable_since": None, "unreachable_wait_over": False}


def decide(state: dict[str, t.Any], finding: str, detail: str, cfg: t.Mapping[str, t.Any], now: float,
           maintenance: bool = False) -> tuple[str, list[dict[str, t.Any]]]:
    """Update STATE with a finding; returns (action, events). Actions: none, wait, restart, give_up.

    A fault opens an incident (event ``detected``); a restart is made at once for the first fault, then only after
    the backoff; at ``max_restarts`` restarts the cluster is given up (``give_up``: stop it, mark it failed). An
    answered completion closes the incident (event ``recovered`` with its duration); ``stable_seconds`` of answers
    in a row forget the restarts made.
    """
    events: list[dict[str, t.Any]] = []
    state["verdict"], state["detail"], state["last_check"] = finding, detail, now
    # A stall acts only after stall_verdicts looks in a row found one (review M5): one slow look is no stall.
    state["stalls"] = state.get("stalls", 0) + 1 if finding == "stall" else 0
    if maintenance:
        state["verdict"] = "maintenance"
        # Whatever a rollout or a deploy does while it holds the marker is its own business.
        state.update(incident=None, healthy_since=None, next_restart_at=None)
        return "none", events
    if finding == "ok":
        state["last_ok"] = now
        if state.get("incident"):
            incident = state["incident"]
            events.append({"event": "recovered", "kind": incident["kind"], "detail": detail,
                           "duration": round(now - incident["detected_at"], 2),
                           "since_restart": round(now - state["last_restart_at"], 2)
                           if state.get("last_restart_at") else None, "restarts": state["attempts"]})
            state["incident"] = None
        if state.get("failed"):
            events.append({"event": "serving_again", "detail": "a failed cluster answers again (redeployed)"})
            state.update(failed=False, failed_at=None, attempts=0)
        state["healthy_since"] = state.get("healthy_since") or now
        if state["attempts"] and now - state["healthy_since"] >= cfg["stable_seconds"]:
            events.append({"event": "stable", "detail": f"served for {cfg['stable_seconds']:.0f}s: restarts forgotten",
                           "restarts": state["attempts"]})
            state["attempts"] = 0
        state.update(next_restart_at=None, unreachable_since=None, unreachable_wait_over=False)
        return "none", events
    if finding in QUIET:
        if finding == "idle":
            state.update(incident=None, healthy_since=None)
        return "none", events
    state["healthy_since"] = None
    if state.get("failed"):
        state["verdict"] = "failed"
        return "none", events
    if not state.get("incident"):
        state["incident"] = {"kind": finding, "detected_at": now}
        events.append({"event": "detected", "kind": finding, "detail": detail, "restarts": state["attempts"]})
    if finding == "stall" and state["stalls"] < cfg["stall_verdicts"]:
        # Seen, not acted on: the next look (at once, Watchdog.run) must find the stall again.
        state["detail"] = f"{detail} (stall verdict {state['stalls']} of {cfg['stall_verdicts']} in a row: no action yet)"
        return "none", events
    if state["attempts"] >= cfg["max_restarts"]:
        return "give_up", events
    wait = backoff(state["attempts"], cfg)
    last = state.get("last_restart_at")
    if last is not None and now - last < wait:
        state["next_restart_at"] = last + wait
        return "wait", events
    return "restart", events


def maintenance_active(text: str | None, mtime: float | None, now: float) -> bool:
    """Whether the maintenance marker (its TEXT, None when absent) holds: ``until`` in the future; a marker that
    cannot be read holds for an hour from its modification time, so a forgotten one never disables the watchdog."""
    if text is None:
        return False
    try:
        until = float(json.loads(text)["until"])
    except (ValueError, KeyError, TypeError):
        until = (mtime or now) + 3600
    return now < until


def api_key(text: str) -> str:
    """VLLM_API_KEY from the serving env file's text ('' without one)."""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "VLLM_API_KEY":
            return value.strip()
    return ""


# --------------------------------------------------------------------------- I/O

def log(message: str) -> None:
    sys.stdout.write(f"[{PROG}] {message}\n")
    sys.stdout.flush()


class Engines:
    """The cluster's engine containers through the watchdog's one narrow path: an ``engine`` request over ssh with its
    own key to a node's transfer program (forced command ``--only engine``), the head's own included."""

    def __init__(self, cfg: t.Mapping[str, t.Any]) -> None:
        self.cfg = cfg

    def request(self, node: t.Mapping[str, t.Any], action: str, names: list[str]) -> dict[str, t.Any]:
        """{name: state} after ACTION on NODE's containers NAMES, or {"error": why}."""
        ssh = self.cfg["ssh"]
        argv = ssh_argv({"host": node["ip"], "port": int(ssh.get("port", 22))}, ssh["key"], ssh["known_hosts"],
                        user=ssh.get("user", "root"), connect_timeout=int(ssh.get("connect_timeout", 10)))
        request = json.dumps({"v": 2, "op": "engine", "action": action, "containers": names}) + "\n"
        try:
            proc = subprocess.run(argv, input=request, capture_output=True, text=True, check=False,  # pylint: disable=ansible-bad-function
                                  timeout=self.cfg["stop_timeout"] + 90)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"error": f"ssh to {node['host']}: {exc}", "unreachable": True}
        try:
            answer = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            # ssh's own failures (no route, refused, timed out, the host key) exit 255 with nothing on stdout.
            return {"error": f"ssh to {node['host']} exited {proc.returncode}: {proc.stderr.strip()[-300:]}",
                    "unreachable": proc.returncode == 255}
        if not answer.get("ok"):
            return {"error": f"{node['host']}: {answer.get('error')}"}
        return answer.get("containers", {})

    def state(self, name: str) -> dict[str, t.Any]:
        """The head's container NAME as the diagnosis reads it; OSError when the head cannot be asked."""
        answer = self.request(self.cfg["head"], "status", [name])
        if "error" in answer:
            raise OSError(answer["error"])
        found = answer.get(name) or {}
        if not found.get("exists"):
            return {"exists": False}
        return {"exists": True, "running": bool(found.get("running")) and not found.get("paused"),
                "status": found.get("status"), "exit_code": found.get("exit_code"),
                "started_at": docker_time(found.get("started_at")), "restart_count": found.get("restart_count", 0)}

    def act(self, name: str, action: str) -> str:
        """stop or start the head's container NAME; '' on success, else the reason."""
        answer = self.request(self.cfg["head"], action, [name])
        if "error" in answer:
            return f"{action} {name} on {self.cfg['head']['host']}: {answer['error']}"[:300]
        found = answer.get(name) or {}
        if action == "start" and not found.get("running"):
            return f"start {name} on {self.cfg['head']['host']}: it is {found.get('status') or 'gone'}"[:300]
        return ""


def http_call(host: str, port: int, method: str, path: str, timeout: float, body: bytes | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


class Watchdog:
    def __init__(self, cfg: dict[str, t.Any]) -> None:
        self.cfg = cfg
        self.engines = Engines(cfg)
        self.state_path = os.path.join(cfg["state_dir"], "state.json")
        self.events_path = os.path.join(cfg["state_dir"], "events.jsonl")
        self.state = self._load_state()
        self.previous: dict[str, t.Any] | None = None
        self.stop = False

    # -- records
    def _load_state(self) -> dict[str, t.Any]:
        state = new_state(self.cfg["cluster"])
        text = _read(self.state_path)
        if text:
            try:
                saved = json.loads(text)
                state.update({k: saved[k] for k in state if k in saved})
                state["last_events"] = saved.get("last_events", [])
            except ValueError:
                pass
        state["cluster"] = self.cfg["cluster"]
        return state

    def record(self, event: dict[str, t.Any]) -> None:
        event = {"time": round(time.time(), 3), "cluster": self.cfg["cluster"], **event}
        line = json.dumps(event, sort_keys=True) + "\n"
        log(line.strip())
        try:
            if os.path.getsize(self.events_path) + len(line) > self.cfg["events_max_bytes"]:
                os.replace(self.events_path, self.events_path + ".1")
        except OSError:
            pass
        with open(self.events_path, "a", encoding="utf-8") as fh:
            fh.write(line)
        last = self.state.setdefault("last_events", [])
        last.append(event)
        del last[:-self.cfg["last_events"]]

    def save(self) -> None:
        self.state["interval"] = self.cfg["interval"]
        self.state["max_restarts"] = self.cfg["max_restarts"]
        self.state["version"] = VERSION
        tmp = self.state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.state, fh, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, self.state_path)
        if self.cfg.get("metrics_dir"):
            # Written whole and renamed into place, as the textfile collector asks; readable by the exporter's user.
            path = os.path.join(self.cfg["metrics_dir"], METRICS_FILE)
            try:
                fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(render_metrics(self.state))
                os.chmod(path + ".tmp", 0o644)
                os.replace(path + ".tmp", path)
            except OSError as exc:
                log(f"metrics not written to {path}: {exc}")

    # -- looking
    def release(self) -> dict[str, t.Any]:
        text = _read(self.cfg["release_file"])
        try:
            record = json.loads(text) if text else {}
        except ValueError:
            record = {}
        return record if isinstance(record, dict) else {}

    def names(self, release: t.Mapping[str, t.Any]) -> dict[str, str]:
        return self.cfg["containers"]["ray" if release.get("backend") == "ray" else "mp"]

    def _metrics(self, host: str, port: int) -> dict[str, float] | None:
        try:
            status, body = http_call(host, port, "GET", "/metrics", min(10.0, self.cfg["completion_timeout"]))
        except (OSError, http.client.HTTPException):
            return None
        return parse_metrics(body.decode(errors="replace")) if status == 200 else None

    def observe(self) -> dict[str, t.Any]:
        now = time.time()
        release = self.release()
        obs: dict[str, t.Any] = {"now": now, "release": bool(release.get("endpoint"))}
        if not obs["release"]:
            return obs
        obs["container"] = self.engines.state(self.names(release)["head"])
        where = endpoint(release)
        if not obs["container"].get("running") or where is None:
            return obs
        host, port = where
        try:
            socket.create_connection((host, port), timeout=3).close()
            obs["listening"] = True
        except OSError:
            obs["listening"] = False
            return obs
        try:
            obs["health"] = http_call(host, port, "GET", "/health", min(10.0, self.cfg["completion_timeout"]))[0]
        except (OSError, http.client.HTTPException):
            obs["health"] = None
        # The workers' engine containers are read alongside the completion (over ssh, a second or so), so that a
        # stall's detection does not wait for them; their states only matter when the completion fails.
        workers: dict[str, t.Any] = {}
        reader = threading.Thread(target=lambda: workers.update(self.workers(release, "status")), daemon=True)
        if self.cfg["workers"]:
            reader.start()
        obs["before"] = self._metrics(host, port)
        key = api_key(_read(self.cfg["key_file"]) or "")
        body = json.dumps({"model": release.get("served_model_name", ""), "prompt": "watchdog",
                           "max_tokens": 1}).encode()
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        start = time.monotonic()
        try:
            status, answer = http_call(host, port, "POST", "/v1/completions", self.cfg["completion_timeout"], body, headers)
            ok = status == 200 and bool(json.loads(answer).get("choices"))
            obs["completion"] = {"ok": ok, "seconds": time.monotonic() - start,
                                 "error": "" if ok else f"HTTP {status}"}
        except (OSError, ValueError, http.client.HTTPException) as exc:
            obs["completion"] = {"ok": False, "seconds": time.monotonic() - start,
                                 "error": "timed out" if isinstance(exc, socket.timeout) else type(exc).__name__}
        obs["after"] = self._metrics(host, port)
        if not obs["completion"]["ok"] and self.cfg["workers"]:
            reader.join(timeout=self.cfg["interval"])
            obs["workers"] = dict(workers)
        return obs

    # -- acting
    def workers(self, release: t.Mapping[str, t.Any], action: str) -> dict[str, t.Any]:
        name = self.names(release)["worker"]
        return {w["host"]: self.engines.request(w, action, [name]) for w in self.cfg["workers"]}

    def recover(self, release: t.Mapping[str, t.Any], give_up: bool) -> tuple[bool, str]:
        """The whole cluster in order: the head's engine stopped, the workers' restarted (or stopped), the head's
        started. (ok, what went wrong)."""
        head = self.names(release)["head"]
        problems = [self.engines.act(head, "stop")]
        for host, answer in self.workers(release, "stop" if give_up else "restart").items():
            if "error" in answer:
                problems.append(answer["error"])
            elif not give_up and not all(s.get("running") for s in answer.values()):
                problems.append(f"{host}: the worker's engine container did not start")
        if not give_up:
            # The head's transfer program evicts the last load's weights from the page cache before it starts the
            # engine (unified memory the new engine cannot have), as the workers' do on their restart.
            problems.append(self.engines.act(head, "start"))
        problems = [p for p in problems if p]
        return not problems, "; ".join(problems)

    def maintenance(self) -> bool:
        """Whether a play holds the maintenance marker now."""
        text = _read(self.cfg["maintenance_file"])
        mtime = None
        if text is not None:
            try:
                mtime = os.path.getmtime(self.cfg["maintenance_file"])
            except OSError:
                text = None
        return maintenance_active(text, mtime, time.time())

    @contextlib.contextmanager
    def action_lock(self) -> t.Iterator[None]:
        """Held for a whole recovery: ``lock`` beside the maintenance marker. A play (vllm_serve) writes the marker,
        then takes this lock before it touches an engine container, so it waits for a recovery in flight; a recovery
        that takes the lock after that sees the marker and leaves the cluster to the play."""
        path = os.path.join(os.path.dirname(self.cfg["maintenance_file"]), "lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def round(self) -> None:
        cfg = self.cfg
        maintenance = self.maintenance()
        try:
            obs = self.observe()
            finding, detail = diagnose(obs, cfg, self.previous)
        except (OSError, http.client.HTTPException) as exc:
            obs, finding, detail = ({"now": time.time()}, "head_unreachable",
                                    f"cannot read the head's engine container (an engine request over ssh): {exc}")
        self.previous = obs.get("container")
        now = time.time()
        if finding == "head_unreachable":
            self.state.update(verdict=finding, detail=detail, last_check=now)
            self.save()
            return
        was_maintenance = self.state.get("verdict") == "maintenance"
        action, events = decide(self.state, finding, detail, cfg, now, maintenance)
        if was_maintenance and not maintenance:
            self.record({"event": "maintenance_over", "detail": "the marker is gone: watching again"})
        for event in events:
            self.record(event)
        if action == "wait" and self.state.get("waiting_logged") != self.state.get("next_restart_at"):
            self.state["waiting_logged"] = self.state.get("next_restart_at")
            self.record({"event": "backoff", "kind": finding, "detail": detail,
                         "wait": round(self.state["next_restart_at"] - now, 1), "restarts": self.state["attempts"]})
        if action == "restart" and self.cfg["workers"]:
            release = self.release()
            unreachable = {host: answer["error"] for host, answer in self.workers(release, "status").items()
                           if answer.get("unreachable")}
            hold, held = hold_for_members(self.state, unreachable, cfg, time.time())
            for event in held:
                self.record(event)
            if hold:
                action = "none"
        if action in ("restart", "give_up") and self.stop:
            self.record({"event": "skipped", "action": action, "kind": finding,
                         "detail": "the watchdog is stopping (docker stop, teardown): no new action"})
            action = "none"
        if action in ("restart", "give_up"):
            with self.action_lock():
                if self.maintenance():
                    # A play wrote the marker after this round read it: the cluster is the play's now.
                    self.record({"event": "skipped", "action": action, "kind": finding,
                                 "detail": "a play took the cluster over (maintenance marker): no action"})
                    decide(self.state, finding, detail, cfg, time.time(), True)
                    self.save()
                    return
                self._act(action, finding)
        self.save()

    def _act(self, action: str, finding: str) -> None:
        """The recovery DECIDE chose (restart or give_up), recorded with its result; under the action lock."""
        cfg = self.cfg
        release = self.release()
        start = time.monotonic()
        ok, problem = self.recover(release, action == "give_up")
        duration = round(time.monotonic() - start, 2)
        if action == "restart":
            self.state["attempts"] += 1
            self.state["last_restart_at"] = time.time()
            self.state["next_restart_at"] = None
            self.record({"event": "action", "action": "restart", "kind": finding, "restart": self.state["attempts"],
                         "of": cfg["max_restarts"], "result": "done" if ok else "error", "error": problem,
                         "duration": duration})
        else:
            self.state.update(failed=True, failed_at=time.time(), verdict="failed", incident=None)
            self.record({"event": "failed", "action": "stop", "kind": finding, "restarts": self.state["attempts"],
                         "result": "stopped" if ok else "error", "error": problem, "duration": duration,
                         "detail": f"gave up after {self.state['attempts']} restart(s): the cluster's engine "
                                   "containers are stopped; redeploy it"})
        self.previous = None  # our own stop/start is not Docker restarting a dead engine

    def run(self) -> int:
        os.makedirs(self.cfg["state_dir"], exist_ok=True)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        detail = f"watching every {self.cfg['interval']:g}s, at most {self.cfg['max_restarts']} restart(s)"
        self.record({"event": "started", "detail": detail, "version": VERSION})
        self.save()
        while not self.stop:
            began = time.monotonic()
            try:
                self.round()
            except Exception as exc:  # pylint: disable=broad-except  # a watchdog must keep watching
                log(f"round failed: {type(exc).__name__}: {exc}")
            remaining = self.cfg["interval"] - (time.monotonic() - began)
            if 0 < self.state.get("stalls", 0) < self.cfg["stall_verdicts"]:
                remaining = 0  # a first stall verdict is confirmed (or not) by the next look, at once
            while remaining > 0 and not self.stop:
                time.sleep(min(remaining, 0.5))
                remaining -= 0.5
        self.save()
        return 0

    def _on_signal(self, _signum, _frame) -> None:
        self.stop = True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="the cluster watchdog of dgxspark.vllm")
    sub = parser.add_subparsers(dest="mode", required=True)
    run = sub.add_parser("run", help="watch the cluster this head serves")
    run.add_argument("config", help="the JSON configuration the watchdog role writes")
    sub.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.mode == "version":
        sys.stdout.write(VERSION + "\n")
        return 0
    try:
        with open(args.config, encoding="utf-8") as fh:
            cfg = load_config(json.load(fh))
    except (OSError, ValueError) as exc:
        log(f"ERROR: configuration {args.config}: {exc}")
        return 2
    return Watchdog(cfg).run()
