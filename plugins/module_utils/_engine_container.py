# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One engine container brought to its spec: what the engine_container action hands community.docker's container
module, and what it says of the outcome (keep, create, recreate, start, restart, update; whether a new process runs).

The comparison of a container with its options, and the Docker calls, are community.docker's (a maintained component);
this module owns the collection's side of it: the spec of :mod:`_node_container` turned into the module's options, the
cluster's fingerprint as a label, the image by the node's own ID, the labels, environment and volumes compared
strictly, and a member the cluster's plan keeps (:mod:`_engine_plan`) answered without a call.
"""

from __future__ import annotations

import typing as t

from ansible_collections.dgxspark.vllm.plugins.module_utils._engine_plan import LABEL

MODULE = "community.docker.docker_container"
# Every key of _node_container.node_container's answer (the logs keys come from _container_logs).
SPEC_KEYS = frozenset((
    "name", "image", "entrypoint", "command", "env", "volumes", "devices", "device_requests", "network_mode", "ipc_mode",
    "shm_size", "ulimits", "capabilities", "cap_drop", "privileged", "restart_policy", "stop_timeout", "log_driver",
    "log_options", "labels"))
REQUIRED = ("name", "image", "command")
# Labels, environment and volumes are compared whole: a label, a variable or a mount the spec no longer has is a change.
COMPARISONS = {"labels": "strict", "env": "strict", "volumes": "strict"}
STARTED = frozenset(("create", "recreate", "start", "restart"))


class SpecError(ValueError):
    """A spec the action cannot run; the message names what is wrong."""


def module_args(spec: t.Mapping[str, t.Any], *, image_id: str, fingerprint: str, restart: bool) -> dict[str, t.Any]:
    """The options of community.docker.docker_container for SPEC (node_container's answer).

    The container is created from IMAGE_ID (the node's own ID of the image it checked) when given, never by a name
    whose tag could move in between; a container made by name from that same image is not recreated for the name
    alone (image_name_mismatch: ignore), only for another image. FINGERPRINT is the cluster's: it is the LABEL, so a
    change anywhere in the cluster recreates every member.
    """
    if not isinstance(spec, t.Mapping):
        raise SpecError(f"spec must be a dict (node_container's answer), not {type(spec).__name__}")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise SpecError(f"spec has keys node_container does not make: {', '.join(map(str, unknown))}")
    missing = [key for key in REQUIRED if not spec.get(key)]
    if missing:
        raise SpecError(f"spec has no {', '.join(missing)}")
    if not fingerprint or not str(fingerprint).isalnum():
        raise SpecError(f"fingerprint {fingerprint!r} is not the cluster's fingerprint (engine_plan's, hex digits)")
    labels = dict(spec.get("labels") or {})
    labels[LABEL] = str(fingerprint)
    args = {key: value for key, value in spec.items() if key != "labels"}
    args.update(image=image_id or spec["image"], image_name_mismatch="ignore", labels=labels,
                comparisons=dict(COMPARISONS), state="started", restart=bool(restart))
    return args


def kept(before: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The answer for a container the plan keeps (it runs as its spec says): no call, the container as it runs, in
    the shape of the container module's answer."""
    return {"changed": False, "action": "keep", "started": False,
            "container": {"Id": before.get("id", ""), "State": {"Running": True,
                                                                "StartedAt": before.get("started_at", "")}}}


def outcome(before: t.Mapping[str, t.Any], result: t.Mapping[str, t.Any], check_mode: bool) -> tuple[str, bool]:
    """(action, started) of the container module's RESULT for a container that was BEFORE (engine_containers' entry,
    empty for none): started is whether a new process runs (or would, in check mode) since the call."""
    if not result.get("changed"):
        return "keep", False
    if check_mode:  # the module lists what it would do (only in check mode)
        done = {key for action in result.get("actions") or [] if isinstance(action, t.Mapping) for key in action}
        if "created" in done:
            action = "recreate" if "removed" in done else "create"
        elif "restarted" in done:
            action = "restart"
        elif "started" in done:
            action = "start"
        else:
            action = "update"
        return action, action in STARTED
    container = result.get("container") or {}
    state = container.get("State") or {}
    if not before:
        return "create", True
    if before.get("id") and container.get("Id") and container["Id"] != before["id"]:
        return "recreate", True
    if before.get("running") and before.get("started_at", "") == state.get("StartedAt", ""):
        return "update", False  # changed in place (a restart policy put back): the same process runs on
    return ("restart" if before.get("running") else "start"), True
