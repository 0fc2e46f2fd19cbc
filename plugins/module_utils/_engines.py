# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's engine containers on a node, as a deploy asks about them before it changes anything (read by the
engine_containers and vllm_image_info modules)."""

from __future__ import annotations

import typing as t

LABEL = "org.dgxspark.vllm.component"


def describe(attrs: dict, label: str) -> dict:
    """What a deploy asks of one container, from its ``docker inspect`` ATTRS (never its environment)."""
    state = attrs.get("State") or {}
    config = attrs.get("Config") or {}
    labels = config.get("Labels") or {}
    host = attrs.get("HostConfig") or {}
    return {
        "id": attrs.get("Id", ""),
        "component": labels.get(label, ""),
        "running": bool(state.get("Running")),
        "status": state.get("Status", ""),
        "started_at": state.get("StartedAt", ""),
        "image_id": attrs.get("Image", ""),
        "labels": labels,
        "restart_policy": (host.get("RestartPolicy") or {}).get("Name", ""),
        "restart_count": int(attrs.get("RestartCount") or 0),
        "exit_code": int(state.get("ExitCode") or 0),
    }


def read(client, label: str, components: t.Sequence[str], not_found: type[Exception]) -> dict:
    """{containers: {name: describe(...)}, running_components: [...]} of every container whose LABEL is in COMPONENTS.
    CLIENT is a docker SDK client, NOT_FOUND the SDK's docker.errors.NotFound (the module imports the SDK)."""
    containers = {}
    for summary in client.api.containers(all=True, filters={"label": label}):
        try:
            attrs = client.api.inspect_container(summary["Id"])
        except not_found:  # removed between the list and the inspection: not there
            continue
        described = describe(attrs, label)
        if described["component"] in components:
            containers[(attrs.get("Name") or "").lstrip("/")] = described
    running = sorted({c["component"] for c in containers.values() if c["running"] and c["component"]})
    return {"containers": containers, "running_components": running}
