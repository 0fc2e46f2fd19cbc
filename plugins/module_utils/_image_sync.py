# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""The source side of image_sync: an image's identity on a target, the plan, and the image requests' headers.

The wire protocol, the ssh argv, the processes and the progress are the relay's (:mod:`._relay`), shared with
model_sync and with the transfer program on the targets.
"""

from __future__ import annotations

from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import (
    CONTENT_LABEL, IMAGE_PROTOCOL, human, is_image_id,
)

PROTOCOL = IMAGE_PROTOCOL


# --------------------------------------------------------------------------- identity and plan

def identity(source: dict, source_store: str, answer: dict, image: str, name: str) -> tuple[bool, str, str | None]:
    """Is the target's image (from its ``inspect`` ANSWER) identical to SOURCE?

    Returns ``(identical, reason, warning)``. Image IDs are compared only when both engines use the same
    image store; otherwise the content label, then the content fingerprint (layers, creation time, platform and run
    configuration: the same under both stores), then the repo digests decide, and without any the IDs are compared
    with a warning (they differ between stores, so such a target is always transferred).
    """
    target = answer.get("ref_image")
    if target is None:
        return False, f"{image} is not on {name}", None
    if answer.get("store") == source_store:
        if target.get("id") == source.get("id"):
            return True, "same image ID", None
        return False, f"{image} is {target.get('id')} on {name}", None
    if source.get("content_label"):
        if target.get("content_label") == source["content_label"]:
            return True, f"same {CONTENT_LABEL} label", None
        return False, f"{name} has {CONTENT_LABEL}={target.get('content_label')}", None
    if source.get("fingerprint") and target.get("fingerprint"):
        if target["fingerprint"] == source["fingerprint"]:
            return True, "same content (layers and configuration; different stores)", None
        return False, f"{image} on {name} has other content (different stores)", None
    shared = sorted(set(source.get("repo_digests") or []) & set(target.get("repo_digests") or []))
    if shared:
        return True, f"same repo digest {shared[0]}", None
    warning = (f"{name}: its engine uses the {answer.get('store')} image store and the source the {source_store} store; "
               f"image IDs differ between the two and {image} has neither a {CONTENT_LABEL} label nor a repo digest, "
               "so its identity is judged by image ID (set the label when building the image)")
    if target.get("id") == source.get("id"):
        return True, "same image ID (different stores)", warning
    return False, f"{image} is {target.get('id')} on {name} (different stores)", warning


def need_bytes(size: int, target_store: str, min_free_bytes: int) -> int:
    """Free bytes a target's Docker root needs to load an image of SIZE (uncompressed) and keep MIN_FREE_BYTES.

    The containerd store keeps the compressed content beside the unpacked snapshots, so it needs about twice the size.
    """
    return size * (2 if target_store == "containerd" else 1) + min_free_bytes


def plan(source: dict, source_store: str, image: str, targets: list[dict], answers: dict[str, dict],
         min_free_bytes: int) -> tuple[list[dict], list[str], list[str]]:
    """What to do per target: ``skip`` (identical), ``tag`` (the image is there under another name) or ``transfer``.

    Returns ``(entries, disk_errors, warnings)``; every target needing a transfer is checked for disk space.
    """
    entries, disk_errors, warnings = [], [], []
    for target in targets:
        name = target["name"]
        answer = answers[name]
        same, reason, warning = identity(source, source_store, answer, image, name)
        if warning:
            warnings.append(warning)
        before = (answer.get("ref_image") or {}).get("id")
        entry = {"name": name, "host": target["host"], "port": target.get("port", 22), "cluster": target.get("cluster"),
                 "reason": reason,
                 "before_id": before, "store": answer.get("store"), "free_bytes": answer.get("free_bytes"),
                 "need_bytes": 0, "bytes": 0, "seconds": 0.0, "mb_per_s": 0.0}
        if same:
            entry["action"] = "skip"
        elif answer.get("store") == source_store and (answer.get("id_image") or {}).get("id") == source["id"] \
                and not is_image_id(image):
            entry["action"] = "tag"
            entry["reason"] = f"{source['id']} is on {name} already; {image} is moved to it"
        else:
            entry["action"] = "transfer"
            need = need_bytes(source["size"], answer.get("store"), min_free_bytes)
            entry["need_bytes"] = need
            free = int(answer.get("free_bytes") or 0)
            if free < need:
                disk_errors.append(
                    f"{name}: {human(free)} free on its Docker root {answer.get('docker_root')}, but the image needs "
                    f"{human(need)} ({human(source['size'])} image + {human(min_free_bytes)} headroom"
                    f"{', doubled for the containerd store' if answer.get('store') == 'containerd' else ''})")
        entries.append(entry)
    return entries, disk_errors, warnings


def hop(entry: dict) -> dict:
    return {"host": entry["host"], "port": entry.get("port", 22), "name": entry["name"]}


def inspect_header(image: str, image_id: str) -> dict:
    return {"v": PROTOCOL, "op": "inspect", "image": image, "image_id": image_id}


def tag_header(image: str, image_id: str) -> dict:
    return {"v": PROTOCOL, "op": "tag", "ref": image, "image_id": image_id}


def receive_header(first: dict, rest: list[dict], image: str, source: dict, source_store: str) -> dict:
    """The header the first hop of a chain gets; it forwards the stream to REST in order."""
    return {"v": PROTOCOL, "op": "receive", "name": first["name"], "image_id": source["id"],
            "ref": None if is_image_id(image) else image, "content_label": source.get("content_label"),
            "fingerprint": source.get("fingerprint"), "source_store": source_store, "next": [hop(e) for e in rest]}


def chains(entries: list[dict], strategy: str) -> list[list[dict]]:
    """Relay: one chain through the targets of each cluster, in their order (the source sends once per cluster: a
    node forwards only to the members after it in its own cluster). Parallel: one chain per target."""
    if not entries:
        return []
    if strategy == "relay":
        grouped: dict = {}
        for e in entries:
            grouped.setdefault(e.get("cluster"), []).append(e)
        return list(grouped.values())
    return [[e] for e in entries]
