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

import re
import typing as t

from ansible_collections.dgxspark.vllm.plugins.module_utils._announce import (
    BLOCK, HostileArchive, _octal, header_name, pax_fields,
)
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
                 "need_bytes": 0, "bytes": 0, "seconds": 0.0, "mb_per_s": 0.0,
                 # layers of the image this target holds (None: it did not say); the containerd store counts none
                 "held": (0 if answer.get("store") == "containerd" else answer.get("held"))}
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


def inspect_header(image: str, image_id: str, layers: t.Sequence[str] | None = None) -> dict:
    """An inspect request; with LAYERS (the image's diff IDs, base first) the target also says how many of them, from
    the base, it holds (``held``)."""
    header = {"v": PROTOCOL, "op": "inspect", "image": image, "image_id": image_id}
    if layers:
        header["layers"] = list(layers)
    return header


def tag_header(image: str, image_id: str, nonce: str) -> dict:
    return {"v": PROTOCOL, "op": "tag", "ref": image, "image_id": image_id, "nonce": nonce}


def receive_header(first: dict, rest: list[dict], image: str, source: dict, nonce: str) -> dict:
    """The header the first hop of a chain gets; it forwards the stream to REST in order. It names the image and the
    announcement's NONCE only: each target verifies the load against what the controller announced to it."""
    return {"v": PROTOCOL, "op": "receive", "name": first["name"], "image_id": source["id"],
            "ref": None if is_image_id(image) else image, "nonce": nonce, "next": [hop(e) for e in rest]}


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


# --------------------------------------------------------------------------- layer delta

DIFF_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
BLOB_RE = re.compile(r"^(?:\./)?blobs/sha256/([0-9a-f]{64})$")


def skippable(layers: t.Sequence[str], held: int) -> set[str]:
    """The layer blobs (hex digests) an archive may leave out for targets that hold the first HELD of LAYERS: those
    whose every use lies within the held prefix (a layer repeated above it is still needed there)."""
    inside = {d.split(":", 1)[1] for d in layers[:held] if DIFF_ID_RE.match(d)}
    return inside - {d.split(":", 1)[1] for d in layers[held:] if DIFF_ID_RE.match(d)}


def delta_plan(entries: list[dict], layers: t.Sequence[str]) -> dict:
    """What the one stream to every transferring target leaves out: the layers all of them hold (the fewest any
    holds). ``{"held": k, "skip": set of hex digests}``; k is 0 when a target does not say (an older program)."""
    moving = [e for e in entries if e["action"] == "transfer"]
    held = min((int(e.get("held") or 0) for e in moving), default=0)
    held = max(0, min(held, len(layers)))
    return {"held": held, "skip": skippable(layers, held) if held else set()}


class LayerFilter:
    """A reader (``readinto``) of the archive SOURCE yields, without the layer blobs named in SKIP.

    It follows the tar stream's headers (pax and GNU long names included) and drops a member ``blobs/sha256/<hex>``
    whose hex is in SKIP, header, extended headers and data, passing every other byte unchanged. That is the OCI
    layout ``docker save`` writes from Docker 25 on, where a layer blob is named by its digest (its diff ID when the
    layer is kept uncompressed, as a graph driver keeps every layer). The legacy layout of older engines names layers
    by their v1 ID, which says nothing of the content: nothing matches, and the archive passes whole.
    Docker's load reads a layer from the archive only when its chain is not on the node already.
    """

    def __init__(self, source: t.Any, skip: t.Iterable[str], chunk: int = 1 << 20):
        self.source = source
        self.skip = set(skip)
        self.chunk = memoryview(bytearray(chunk))
        self.out = bytearray()
        self.header = bytearray()
        self.pending = bytearray()  # extended headers (pax, long name) waiting for the member they describe
        self.pending_left = 0  # bytes of an extended header's data still to gather into pending
        self.name_override: bytes | None = None
        self.size_override: int | None = None
        self.passing = 0  # data bytes (with padding) of a kept member still to pass
        self.dropping = 0  # data bytes (with padding) of a dropped member still to drop
        self.extended = b""  # the kind of the extended header being gathered
        self.extended_size = 0
        self.skipped_bytes = 0
        self.skipped: list[str] = []
        self.layout = "legacy"  # "oci" once a blobs/sha256/ member passes
        self.ended = False

    def readinto(self, view: memoryview) -> int:
        while not self.out and not self.ended:
            got = self.source.readinto(self.chunk)
            if not got:
                self.ended = True
                if self.header or self.pending or self.passing or self.dropping:
                    raise HostileArchive("the image archive ended inside a member")
                break
            self._feed(self.chunk[:got])
        n = min(len(view), len(self.out))
        view[:n] = self.out[:n]
        del self.out[:n]
        return n

    def _feed(self, data: memoryview) -> None:
        i, n = 0, len(data)
        while i < n:
            if self.passing:
                take = min(self.passing, n - i)
                self.out += data[i:i + take]
                self.passing -= take
                i += take
            elif self.dropping:
                take = min(self.dropping, n - i)
                self.dropping -= take
                i += take
            elif self.pending_left:
                take = min(self.pending_left, n - i)
                self.pending += data[i:i + take]
                self.pending_left -= take
                i += take
                if not self.pending_left:
                    self._extended_done()
            else:
                take = min(BLOCK - len(self.header), n - i)
                self.header += data[i:i + take]
                i += take
                if len(self.header) == BLOCK:
                    block, self.header = bytes(self.header), bytearray()
                    self._start(block)

    def _start(self, block: bytes) -> None:
        if block == b"\0" * BLOCK:
            self.out += block  # end-of-archive blocks pass as they are
            return
        kind = block[156:157]
        size = _octal(block[124:136], "size")
        padded = (size + BLOCK - 1) // BLOCK * BLOCK
        if kind in (b"x", b"L"):
            if size > 1 << 20:
                raise HostileArchive(f"an extended header of {size} bytes")
            self.pending += block
            self.extended, self.extended_size, self.pending_left = kind, size, padded
            if not padded:
                self._extended_done()
            return
        name = header_name(block) if self.name_override is None else self.name_override
        if self.size_override is not None:
            size = self.size_override
            padded = (size + BLOCK - 1) // BLOCK * BLOCK
        self.name_override = self.size_override = None
        match = BLOB_RE.match(name.decode("utf-8", "replace"))
        if match:
            self.layout = "oci"
        if match and match.group(1) in self.skip and kind in (b"0", b"\0"):
            self.skipped.append(match.group(1))
            self.skipped_bytes += size
            self.pending = bytearray()
            self.dropping = padded
            return
        self.out += self.pending
        self.pending = bytearray()
        self.out += block
        self.passing = padded

    def _extended_done(self) -> None:
        data = bytes(self.pending[-((self.extended_size + BLOCK - 1) // BLOCK * BLOCK):][:self.extended_size]) \
            if self.extended_size else b""
        if self.extended == b"L":
            self.name_override = data.split(b"\0", 1)[0]
        else:
            path, size, _link = pax_fields(data)
            self.name_override = path if path is not None else self.name_override
            self.size_override = size if size is not None else self.size_override
