# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""Parsing of the Ray CLI outputs the collection reads from a node's Ray head container.

Pure functions: they take the text the commands printed (Ray 2.5x, checked
against fixtures captured from Ray 2.54.1) and return plain data. The module
``dgxspark.vllm.ray_cluster_info`` runs the commands with ``docker exec``; the
launcher in the node containers (``_launcher``) runs them itself while it waits
for the cluster. Standard library only.
"""

from __future__ import annotations

import json
import re
import typing as t

# Commands run inside the head container (argv, no shell). The state API
# (`ray list`) asks the dashboard, which the collection binds to 127.0.0.1 in
# the head's host network namespace, so an exec into the head reaches it.
RAY_VERSION_CMD = ["ray", "--version"]
RAY_STATUS_CMD = ["ray", "status"]


def list_nodes_cmd(dashboard: str, detail: bool = True, ray: str = "ray") -> list[str]:
    """``ray list nodes`` as JSON; the launcher polls it without ``--detail`` (the totals are there without it)."""
    return [ray, "list", "nodes", "--format", "json"] + (["--detail"] if detail else []) + [
        "--limit", "10000", "--address", dashboard]


def list_placement_groups_cmd(dashboard: str) -> list[str]:
    return ["ray", "list", "placement-groups", "--format", "json", "--detail", "--limit", "10000",
            "--address", dashboard]


# Environment passed to the exec when the container has it: token auth needs
# the mode and the token file path (never the token value itself).
AUTH_ENV_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")

# `ray list` prints this plain text instead of JSON when the list is empty.
EMPTY_LIST_TEXT = "No resource in the cluster"

_VERSION_RE = re.compile(r"ray, version (\S+)")


class RayParseError(ValueError):
    """The output is not what the Ray command prints."""


def _number(value: t.Any) -> float | str | None:
    """Resource amounts: numbers stay numbers; memory comes as text ("16.349 GiB") and stays text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return value if isinstance(value, str) else None


def _load_list(text: str, what: str) -> list[dict[str, t.Any]]:
    stripped = text.strip()
    if stripped == EMPTY_LIST_TEXT:
        return []
    try:
        data = json.loads(stripped)
    except ValueError as exc:
        raise RayParseError(f"`ray list {what}` did not print JSON: {stripped[:200]!r}") from exc
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise RayParseError(f"`ray list {what}` did not print a JSON list of objects")
    return data


def parse_version(text: str) -> str | None:
    """``ray --version`` prints ``ray, version 2.54.1``."""
    match = _VERSION_RE.search(text)
    return match.group(1) if match else None


def parse_nodes(text: str) -> list[dict[str, t.Any]]:
    """Normalise ``ray list nodes --format json [--detail]``."""
    nodes = []
    for item in _load_list(text, "nodes"):
        resources = {key: _number(value) for key, value in (item.get("resources_total") or {}).items()}
        state = str(item.get("state") or "UNKNOWN").upper()
        nodes.append({
            "node_id": str(item.get("node_id") or ""),
            "ip": str(item.get("node_ip") or ""),
            "name": item.get("node_name"),
            "state": state,
            "alive": state == "ALIVE",
            "is_head": bool(item.get("is_head_node")),
            "state_message": item.get("state_message"),
            "gpus": resources.get("GPU") if isinstance(resources.get("GPU"), float) else 0.0,
            "resources": resources,
        })
    return sorted(nodes, key=lambda node: (not node["is_head"], not node["alive"], node["ip"], node["node_id"]))


def parse_placement_groups(text: str) -> list[dict[str, t.Any]]:
    """Normalise ``ray list placement-groups --format json --detail``."""
    groups = []
    for item in _load_list(text, "placement-groups"):
        bundles = []
        for bundle in item.get("bundles") or []:
            bundle_id = bundle.get("bundle_id") or {}
            bundles.append({
                "index": bundle_id.get("bundle_index"),
                "resources": {key: _number(value) for key, value in (bundle.get("unit_resources") or {}).items()},
                "node_id": bundle.get("node_id") or None,
            })
        stats = item.get("stats") or {}
        groups.append({
            "id": str(item.get("placement_group_id") or ""),
            "name": item.get("name") or "",
            "state": str(item.get("state") or "UNKNOWN").upper(),
            "strategy": item.get("strategy"),
            "is_detached": bool(item.get("is_detached")),
            "scheduling_state": stats.get("scheduling_state"),
            "bundles": sorted(bundles, key=lambda bundle: (bundle["index"] is None, bundle["index"] or 0)),
        })
    return sorted(groups, key=lambda group: group["id"])


_ACTIVE_RE = re.compile(r"^Active:\s*$(?P<body>.*?)^\S", re.M | re.S)
_NODE_LINE_RE = re.compile(r"^\s+(\d+)\s+(\S+)", re.M)
_USAGE_RE = re.compile(r"^\s*([\d.]+)/([\d.]+)\s+GPU\b", re.M)


def parse_status(text: str) -> dict[str, t.Any]:
    """GPU usage and the active node count from ``ray status`` text.

    ``ray status`` lags the state API when a node dies (it still counts the node
    for a while), so the module takes nodes from ``ray list nodes`` and only the
    GPU usage from here.
    """
    match = _ACTIVE_RE.search(text)
    if not match or "Resources" not in text:
        raise RayParseError("not `ray status` output: " + (text.strip().splitlines() or ["(empty)"])[-1][:200])
    active = sum(int(count) for count, _name in _NODE_LINE_RE.findall(match.group("body")))
    usage = _USAGE_RE.search(text)
    used, total = (float(usage.group(1)), float(usage.group(2))) if usage else (0.0, 0.0)
    return {"active_nodes": active, "gpus_total": total, "gpus_used": used, "gpus_available": total - used}


def summarise(nodes: list[dict[str, t.Any]], status: dict[str, t.Any] | None) -> dict[str, t.Any]:
    """The counts the module returns, from the parsed nodes and (optional) status."""
    alive = [node for node in nodes if node["alive"]]
    dead = [node for node in nodes if node["state"] == "DEAD"]
    gpus_total = sum(node["gpus"] for node in alive)
    if status is not None:
        # Alive nodes' GPUs from the state API; what is in use from `ray status`.
        gpus_available = max(0.0, gpus_total - status["gpus_used"])
    else:
        gpus_available = None
    return {
        "alive_nodes": len(alive),
        "dead_nodes": len(dead),
        "alive_node_ips": sorted({node["ip"] for node in alive}),
        "dead_node_ips": sorted({node["ip"] for node in dead} - {node["ip"] for node in alive}),
        "gpus_total": gpus_total,
        "gpus_available": gpus_available,
    }
