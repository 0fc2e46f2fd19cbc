# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine plan of one cluster (issue 35): from every member's container spec and its engine container as it runs,
the cluster's fingerprint, which members already run as their spec says, and whether the cluster is switched.

The same for the Ray head and workers and for the mp ranks: the action dgxspark.vllm.engine_plan reads the members'
published facts on the controller and calls :func:`plan`.

- The fingerprint is one value for every member (a change anywhere restarts the whole cluster: Ray workers cannot
  outlive their head's cluster, mp ranks only work together). It is the value the roles computed in Jinja before
  (``specs | to_json | hash('sha256') | truncate(16, true, '')``), so that a collection upgrade restarts no engine.
- A member is settled when its container runs, carries the fingerprint, runs from the member's own image ID (an image
  has another ID under the containerd store), has the spec's restart policy and, where one is asked, the component.
- The cluster is switched when a member is not settled, or (Ray) a worker started before its head's current start:
  start times are compared as times (Docker's RFC 3339 with up to nanoseconds), not as text.
"""

from __future__ import annotations

import datetime
import hashlib
import re
import typing as t

LABEL = "org.dgxspark.vllm.config"
_STARTED = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$")


class PlanError(ValueError):
    """A member's facts that cannot be planned with; the message names the member and the fact."""


def started(value: t.Any) -> datetime.datetime | None:
    """Docker's StartedAt (``2026-12-07T10:00:00.123456789Z``) as an aware datetime (to the microsecond); None for
    an empty value or Docker's zero time (a container never started)."""
    text = str(value or "").strip()
    if not text or text.startswith("0001-01-01"):
        return None
    match = _STARTED.match(text)
    if not match:
        raise PlanError(f"{text!r} is not a start time as Docker gives it")
    base, fraction, zone = match.groups()
    stamp = datetime.datetime.fromisoformat(base + "." + (fraction or "0").ljust(6, "0")[:6]
                                            + ("+00:00" if zone == "Z" else zone))
    return stamp.astimezone(datetime.timezone.utc)


def fingerprint(specs: t.Sequence[t.Any], to_json: t.Callable[[t.Any], str]) -> str:
    """The cluster's fingerprint: the first 16 hex digits of the sha256 of the members' specs, in member order, as
    TO_JSON (Ansible's to_json filter) writes them."""
    return hashlib.sha256(to_json(list(specs)).encode("utf-8")).hexdigest()[:16]


def settled(before: t.Mapping[str, t.Any], print_: str, image_id: str, restart_policy: str,
            component: str = "") -> tuple[bool, str]:
    """(whether the container BEFORE runs as its spec says, why not in words)."""
    before = before or {}
    if not before.get("running"):
        return False, "its container is not running" if before else "it has no engine container"
    if component and before.get("component", "") != component:
        return False, f"its container is a {before.get('component') or 'foreign'} container, not {component}"
    if (before.get("labels") or {}).get(LABEL, "") != print_:
        return False, "its container runs another configuration"
    if before.get("image_id", "") != (image_id or ""):
        return False, "its container runs another image"
    if before.get("restart_policy", "") != restart_policy:
        return False, f"its restart policy is {before.get('restart_policy') or 'none'}, not {restart_policy}"
    return True, ""


def plan(members: t.Sequence[str], head: str, specs: t.Mapping[str, t.Any], befores: t.Mapping[str, t.Any],
         image_ids: t.Mapping[str, str], to_json: t.Callable[[t.Any], str], component: str = "",
         workers_follow_head: bool = False) -> dict[str, t.Any]:
    """The cluster's plan: ``fingerprint``, ``nodes`` ({member: {settled, why, started_at}}), ``switch`` and
    ``reasons`` (why it is switched, one sentence a member).

    SPECS: each member's spec ({container: {restart_policy, ...}, ...}); BEFORES: each member's engine container as
    it runs (engine_containers' entry, {} for none); IMAGE_IDS: each member's own ID of the image. With
    WORKERS_FOLLOW_HEAD (Ray), a worker that started before its head's current start is a reason to switch."""
    missing = [m for m in members if m not in specs]
    if missing:
        raise PlanError(f"no container spec from {', '.join(missing)} (it failed or is unreachable): nothing of the "
                        "cluster is started without every member")
    if head not in members:
        raise PlanError(f"the head {head} is not among the members {', '.join(members)}")
    print_ = fingerprint([specs[m] for m in members], to_json)
    nodes: dict[str, dict[str, t.Any]] = {}
    reasons = []
    for member in members:
        spec = specs[member] or {}
        policy = str((spec.get("container") or {}).get("restart_policy", ""))
        ok, why = settled(befores.get(member) or {}, print_, str(image_ids.get(member) or ""), policy, component)
        nodes[member] = {"settled": ok, "why": why, "started_at": str((befores.get(member) or {}).get("started_at")
                                                                      or "")}
        if not ok:
            reasons.append(f"{member}: {why}")
    if workers_follow_head:
        head_start = started(nodes[head]["started_at"])
        for member in members:
            if member == head:
                continue
            start = started(nodes[member]["started_at"])
            if head_start is not None and start is not None and start < head_start:
                reasons.append(f"{member}: its container started before its head's ({nodes[member]['started_at']} < "
                               f"{nodes[head]['started_at']})")
    return {"fingerprint": print_, "nodes": nodes, "switch": bool(reasons), "reasons": reasons}
