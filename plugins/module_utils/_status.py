# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The status of a cluster, as playbooks/status.yml shows it: one line for the cluster, one row per member.

:func:`node_status` is what dgxspark.vllm.status_info reads on a node in one call: the collection's containers
(as ``docker_host_info`` lists them), and on a head the release record (``release.json``), the watchdog's state, and
the engine's ``/health`` status code and token counter. The rest is pure Python over those answers and the
``ray_cluster_info`` result. No Ansible imports: plugins/modules/status_info.py, monitoring_info.py and
plugins/action/fleet_status.py wrap it (and the deprecated filters cluster_status, status_engine and
monitoring_status).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import time
import typing as t
import urllib.error
import urllib.request

from ansible_collections.dgxspark.vllm.plugins.module_utils._files import read_json_object
from ansible_collections.dgxspark.vllm.plugins.module_utils._release import ReleaseError, engine_url

RAY_HEAD_CONTAINER = "dgxspark-ray-head"
MP_CONTAINER = "dgxspark-vllm"
HEAD_UNREACHABLE = "head unreachable"
# The label every container of the collection carries (its component).
LABEL = "org.dgxspark.vllm.component"
# vLLM's counter of generated tokens, one sample per label set (model, engine).
_TOKENS = re.compile(r"(?m)^vllm:generation_tokens_total(?:\{[^}]*\})? ([0-9.e+]+)$")
_TOKEN_LINES = re.compile(r"(?m)^vllm:generation_tokens_total(?:\{[^}]*\})? [0-9.e+]+$")


class StatusError(ValueError):
    """Input of the wrong shape; the message names it."""


def release_record(release: t.Any) -> dict[str, t.Any]:
    """The release record from ``release.json``: a ``slurp`` result (base64 ``content``), or the record itself.

    A missing or unreadable file (no ``content``: the cluster never served) is ``{}``.
    """
    if not release:
        return {}
    if not isinstance(release, t.Mapping):
        raise StatusError(f"the release must be a slurp result or a release record, is {type(release).__name__}")
    if "content" not in release:
        # A slurp result without content (the file is missing) has 'failed'/'msg'; a record has 'image'.
        return dict(release) if "image" in release or "endpoint" in release else {}
    try:
        record = json.loads(base64.b64decode(str(release["content"])).decode())
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def container_names(containers: t.Any) -> list[str]:
    """Every name of the containers ``docker_host_info`` listed (``/name``, as Docker reports them)."""
    names: list[str] = []
    for container in containers or []:
        names += [str(name) for name in (container.get("Names") or [])] if isinstance(container, t.Mapping) else []
    return names


def engine(release: t.Any, containers: t.Any, *, ray_head_container: str = RAY_HEAD_CONTAINER,
           mp_container: str = MP_CONTAINER) -> dict[str, str]:
    """``{"url", "endpoint", "model"}`` of the engine the head serves, or ``{}`` when it serves none.

    It serves when the release record has an endpoint and the release's engine container (the Ray head's for the
    ray backend, the mp container's otherwise) is among the head's containers. ``url`` is the engine's own, as the
    head reaches it (``_release.engine_url``), not the clients' door, which asks every route for a key;
    ``endpoint`` is the clients' (the release's URL without ``/v1``), which the table shows.
    """
    record = release_record(release)
    try:
        url = engine_url(record)
    except ReleaseError as exc:
        raise StatusError(str(exc)) from exc
    wanted = "/" + (ray_head_container if record.get("backend") == "ray" else mp_container)
    if not url or wanted not in container_names(containers):
        return {}
    endpoint = re.sub(r"/v1$", "", str((record.get("endpoint") or {}).get("url") or "")) or url
    return {"url": url, "endpoint": endpoint, "model": str(record.get("served_model_name") or "")}


def read_record(path: str) -> tuple[dict[str, t.Any], str]:
    """(the JSON object in PATH, a problem): ({}, "") when the file is not there (the cluster never served, or has
    no watchdog); ({}, why) when it cannot be read or holds no JSON object (the reader release_info uses too)."""
    try:
        return read_json_object(path) or {}, ""
    except OSError as exc:
        return {}, f"{path}: {exc.strerror or exc}"
    except ValueError as exc:
        return {}, str(exc)


def http_get(url: str, timeout: float) -> tuple[int, str]:
    """(status code, body) of a GET of URL from this node, without a proxy; (-1, "") when nothing answered."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, method="GET"), timeout=timeout) as answer:
            return int(answer.status), answer.read(8 << 20).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""
    except (urllib.error.URLError, OSError, ValueError):
        return -1, ""


def node_status(*, head: bool, release_file: str, watchdog_state_file: str, list_containers: t.Callable[[], t.Any],
                get: t.Callable[[str, float], tuple[int, str]] | None = None, http_timeout: float = 10.0,
                ray_head_container: str = RAY_HEAD_CONTAINER, mp_container: str = MP_CONTAINER) -> dict[str, t.Any]:
    """What status.yml asks of one node, read in one call.

    ``containers``: the collection's containers (LIST_CONTAINERS: the engine's low-level list, which is
    ``docker_host_info``'s shape). On a head (HEAD): ``release`` (the record, ``{}`` when it never served),
    ``watchdog`` (its state, ``{}`` without one), ``engine`` (:func:`engine`: ``{}`` when it serves none), and when
    it serves, the engine's ``health`` (its ``/health`` status code, -1 without an answer) and ``metrics`` (the
    ``vllm:generation_tokens_total`` lines of its ``/metrics``). ``problems``: files that could not be read.
    """
    get = get or http_get
    containers = [dict(c) for c in (list_containers() or []) if isinstance(c, t.Mapping)]
    out: dict[str, t.Any] = {"containers": containers, "release": {}, "watchdog": {}, "engine": {}, "health": -1,
                             "metrics": "", "problems": []}
    if not head:
        return out
    for key, path in (("release", release_file), ("watchdog", watchdog_state_file)):
        if path:
            out[key], problem = read_record(os.path.expanduser(path))
            out["problems"] += [problem] if problem else []
    out["engine"] = engine(out["release"], containers, ray_head_container=ray_head_container,
                           mp_container=mp_container)
    if out["engine"]:
        base = out["engine"]["url"].rstrip("/")
        out["health"], _body = get(f"{base}/health", http_timeout)
        code, text = get(f"{base}/metrics", http_timeout)
        out["metrics"] = "\n".join(_TOKEN_LINES.findall(text)) if code == 200 else ""
    return out


def tokens_generated(metrics: t.Any) -> int:
    """The sum of ``vllm:generation_tokens_total`` over its label sets in a ``/metrics`` text (0 without it)."""
    return int(sum(float(value) for value in _TOKENS.findall(str(metrics or ""))))


def _int(value: t.Any, default: int) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


def summary(engine_: t.Mapping[str, t.Any] | None, health: t.Any, metrics: t.Any, ray: t.Mapping[str, t.Any] | None,
            size: int, backend: str = "ray") -> str:
    """The cluster's line: the engine (model, URL, health, tokens, what is wrong) and its Ray cluster.

    ``health`` is the ``/health`` status code (-1 or None: no answer), ``ray`` the ``ray_cluster_info`` result
    (``{}``: the head was not reached), ``size`` the number of members. ``backend`` is the release's: with ``mp``
    (vLLM's own multi-node mode) the cluster has no Ray, and the line says so instead of "Ray: not running".
    """
    ray = ray or {}
    code = _int(health, -1)
    if backend == "mp":
        ray = {}
    ray_up = bool(ray.get("reachable"))
    alive = _int(ray.get("alive_nodes"), 0)
    ray_short = ray_up and alive < size
    text = ""
    if engine_:
        problem = (f"health {code}" if code != 200 else
                   f"Ray has {alive} of {size} nodes; /health stays 200 until a request reaches the lost rank")
        text = (f"model {engine_.get('model', '')} at {engine_.get('endpoint') or engine_.get('url', '')}, health {code if code > 0 else 'no answer'},"
                f" tokens generated {tokens_generated(metrics)}"
                + (f" (UNHEALTHY: {problem})" if code != 200 or ray_short else "") + "; ")
    else:
        text = "not serving; "
    if backend == "mp":
        return text + f"mp across {size} node(s), no Ray"
    if not ray_up:
        return text + f"Ray: not running ({ray.get('msg') or HEAD_UNREACHABLE})"
    dead = _int(ray.get("dead_nodes"), 0)
    return (text + f"Ray {ray.get('alive_nodes')}/{size} nodes alive ({', '.join(str(ip) for ip in ray.get('alive_node_ips') or [])}),"
            f" GPUs {ray.get('gpus_available')} free of {ray.get('gpus_total')}"
            + (f", {dead} dead" if dead > 0 else "") + f", Ray {ray.get('ray_version')}")


def rows(members: t.Sequence[str], containers: t.Sequence[t.Any]) -> list[str]:
    """One row per member: its name, its containers' names and their states (empty when it has none)."""
    out = []
    for member, listed in zip(members, list(containers) + [[]] * (len(members) - len(containers))):
        listed = [c for c in (listed or []) if isinstance(c, t.Mapping)]
        names = ", ".join(container_names(listed))
        states = ", ".join(str(c.get("Status", "")) for c in listed)
        out.append(f"  {member}  {names}  {states}")
    return out


def _event_text(event: t.Mapping[str, t.Any]) -> str:
    parts = [str(event.get("event", "?"))]
    for key in ("kind", "action", "result", "restart", "restarts", "duration", "since_restart", "error", "detail"):
        value = event.get(key)
        if value not in (None, ""):
            parts.append(f"{key}={value}")
    when = event.get("time")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(when))) if isinstance(when, (int, float)) else "?"
    return f"{stamp} " + " ".join(parts)


def watchdog_lines(state: t.Any, events: int = 5) -> list[str]:
    """The watchdog's line (verdict, restarts of the cap, failed) and its last EVENTS events, from its state.json
    (a slurp result or the parsed state); one line saying there is none when the head has no watchdog state."""
    record = release_record(state) if isinstance(state, t.Mapping) and "content" in state else dict(state or {})
    if not record or "verdict" not in record:
        return ["  watchdog: none on the head"]
    line = (f"  watchdog: {'FAILED' if record.get('failed') else record.get('verdict')}"
            f" ({record.get('detail') or 'no detail'}); restarts {record.get('attempts', 0)} of"
            f" {record.get('max_restarts', '?')}, every {record.get('interval', '?')}s")
    if record.get("last_check"):
        line += ", last look " + time.strftime("%H:%M:%SZ", time.gmtime(float(record["last_check"])))
    return [line] + [f"    {_event_text(e)}" for e in (record.get("last_events") or [])[-events:]
                     if isinstance(e, t.Mapping)]


def table(cluster: str, members: t.Sequence[str], *, head: str, containers: t.Sequence[t.Any], release: t.Any = None,
          health: t.Any = None, metrics: t.Any = None, ray: t.Mapping[str, t.Any] | None = None,
          head_in_play: bool = True, ray_head_container: str = RAY_HEAD_CONTAINER,
          mp_container: str = MP_CONTAINER, watchdog: t.Any = None) -> list[str]:
    """The cluster's table: ``<cluster>: <summary>``, then a row for every member in order.

    ``containers`` lists each member's containers (``docker_host_info``'s ``containers``), in the order of
    ``members``. A head that dropped out of the play (``head_in_play`` false) has no summary: the line says so.
    ``watchdog``: the watchdog's ``state.json`` on the head (slurp result or parsed; None leaves its lines out).
    """
    members = [str(m) for m in members]
    if head not in members:
        raise StatusError(f"{cluster}: its head {head!r} is not one of its members ({', '.join(members)})")
    if len(containers) != len(members):
        raise StatusError(f"{cluster}: {len(containers)} container lists for {len(members)} members")
    if head_in_play:
        head_containers = containers[members.index(head)]
        engine_ = engine(release, head_containers, ray_head_container=ray_head_container, mp_container=mp_container)
        line = summary(engine_, health, metrics, ray, len(members), backend=str(release_record(release).get("backend") or "ray"))
    else:
        line = f"not serving; Ray: not running ({HEAD_UNREACHABLE})"
    lines = [f"{cluster}: {line}"] + rows(members, containers)
    if watchdog is not None and head_in_play:
        lines += watchdog_lines(watchdog)
    return lines


def prometheus_lines(host: str, alerts: t.Any, targets: t.Any) -> list[str]:
    """Prometheus's view, as status.yml shows it: its firing (and pending) alerts per cluster, then the targets that
    are down. ALERTS and TARGETS are the JSON answers of /api/v1/alerts and /api/v1/targets (or None: no answer)."""
    if not isinstance(alerts, t.Mapping) or not isinstance(targets, t.Mapping):
        return [f"prometheus on {host}: no answer from its API"]
    found = [a for a in ((alerts.get("data") or {}).get("alerts") or []) if isinstance(a, t.Mapping)]
    active = [t_ for t_ in ((targets.get("data") or {}).get("activeTargets") or []) if isinstance(t_, t.Mapping)]
    down = [t_ for t_ in active if t_.get("health") != "up"]
    lines = [f"prometheus on {host}: {len(active) - len(down)} of {len(active)} targets up, "
             f"{sum(1 for a in found if a.get('state') == 'firing')} alert(s) firing, "
             f"{sum(1 for a in found if a.get('state') == 'pending')} pending"]
    by_cluster: dict[str, list[str]] = {}
    for alert in found:
        labels = alert.get("labels") or {}
        where = ", ".join(f"{k}={labels[k]}" for k in ("node", "device", "job") if labels.get(k))
        by_cluster.setdefault(str(labels.get("cluster") or "-"), []).append(
            f"{str(alert.get('state', '?')).upper()} {labels.get('alertname', '?')}" + (f" ({where})" if where else "")
            + (f" since {alert['activeAt'][:19]}Z" if alert.get("activeAt") else ""))
    for cluster in sorted(by_cluster):
        lines.append(f"  {cluster}: " + "; ".join(sorted(by_cluster[cluster])))
    for target in sorted(down, key=lambda x: str(x.get("scrapeUrl"))):
        labels = target.get("labels") or {}
        lines.append(f"  target down: {labels.get('job', '?')} {labels.get('node', '?')} ({labels.get('cluster') or '-'})"
                     f" {target.get('scrapeUrl', '')}: {target.get('lastError') or target.get('health')}")
    return lines


def prometheus_status(name: str, url: str, *, get: t.Callable[[str, float], tuple[int, str]] | None = None,
                      http_timeout: float = 10.0) -> dict[str, t.Any]:
    """Prometheus's view, read from its API at URL in one call (GET, :func:`http_get` by default): ``lines``
    (:func:`prometheus_lines`, NAME its host), ``answered``, and the counts they show."""
    get = get or http_get
    answers = []
    for path in ("alerts", "targets"):
        code, text = get(f"{url}/api/v1/{path}", http_timeout)
        try:
            answers.append(json.loads(text) if code == 200 else None)
        except ValueError:
            answers.append(None)
    alerts, targets = answers
    answered = isinstance(alerts, t.Mapping) and isinstance(targets, t.Mapping)
    found = [a for a in ((alerts or {}).get("data") or {}).get("alerts") or [] if isinstance(a, t.Mapping)] \
        if answered else []
    active = [x for x in ((targets or {}).get("data") or {}).get("activeTargets") or [] if isinstance(x, t.Mapping)] \
        if answered else []
    return {"url": url, "answered": answered, "lines": prometheus_lines(name, alerts, targets),
            "firing": sum(1 for a in found if a.get("state") == "firing"),
            "pending": sum(1 for a in found if a.get("state") == "pending"),
            "targets_up": sum(1 for x in active if x.get("health") == "up"), "targets": len(active)}
