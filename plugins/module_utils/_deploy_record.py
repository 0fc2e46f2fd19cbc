# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The record a deploy leaves on each node, and the one read that tells whether the node is still as it left it.

A deploy that ended serving writes, on every node of the cluster, what it was asked (a digest of its inputs) and what
it left there: the collection's files (content, mode, owner), its containers (ID, image, whether they run, a digest of
their configuration), the images it served and was built from, and the model's files (size and modification time).
The next deploy reads it back in one call per node and compares: the same inputs and the same node state answer every
"is it already so?" question the roles would ask one by one. Anything else (an input, a file, a container, an image,
a model file that differs, or no record) sends the cluster through the whole deploy, which writes a new record.

The node side (capture, compare) runs in the deploy_record module; the digest of the inputs is made on the controller
(the action plugin) from the variables every node of the cluster sees, the fleet's shape and the collection's own
files, so that a change of the inventory, of -e, of a secret or of the collection is a change of the inputs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import typing as t

from ansible_collections.dgxspark.vllm.plugins.module_utils._files import write_atomically
from ansible_collections.dgxspark.vllm.plugins.module_utils._layout import CHANGING, PATHS, RECORDED

VERSION = 3
PATH = PATHS["deploy_state_path"]
# Beside the record (its directory is never captured): the node's key of the record's digests.
KEY_FILE = "record.key"
# The collection's trees the record captures whole, and what changes in them on its own while a cluster serves (the
# module adds the record's own directory): the layout registry's (_layout.RECORDED, _layout.CHANGING).
TREES = RECORDED
EXCLUDE = CHANGING
MAX_DIFFERENCES = 8


def digest(value: t.Any) -> str:
    """sha256 of VALUE's canonical JSON (keys sorted; anything JSON cannot hold as its str())."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _excluded(path: str, exclude: t.Sequence[str]) -> bool:
    return any(path == e or path.startswith(e.rstrip("/") + "/") for e in exclude)


def keyed(key: bytes, text: str) -> str:
    """HMAC-SHA256 of TEXT under KEY: how the record holds the inputs digest."""
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def _file_digest(path: str, key: bytes | None) -> str:
    h = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _entry(path: str, key: bytes | None = None) -> list | None:
    """[kind, mode, uid, gid, content] of PATH (not followed), or None when missing. Content: a file's HMAC-SHA256
    under KEY (its sha256 without one), a link's target; a directory's or anything else's is empty."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISREG(st.st_mode):
        return ["file", mode, st.st_uid, st.st_gid, _file_digest(path, key)]
    if stat.S_ISDIR(st.st_mode):
        return ["dir", mode, st.st_uid, st.st_gid, ""]
    if stat.S_ISLNK(st.st_mode):
        return ["link", mode, st.st_uid, st.st_gid, os.readlink(path)]
    return ["other", mode, st.st_uid, st.st_gid, ""]


def capture_files(trees: t.Sequence[str], files: t.Sequence[str], exclude: t.Sequence[str],
                  key: bytes | None = None) -> dict:
    """{path: _entry(path, KEY)} of everything under TREES (not crossing into EXCLUDE) and of FILES (None when
    missing)."""
    out: dict[str, list | None] = {}
    for top in trees:
        if _excluded(top, exclude) or not os.path.lexists(top):
            out[top] = None
            continue
        out[top] = _entry(top, key)
        for root, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if not _excluded(os.path.join(root, d), exclude))
            for name in sorted(dirs) + sorted(names):
                path = os.path.join(root, name)
                if not _excluded(path, exclude):
                    out[path] = _entry(path, key)
    for path in files:
        if not _excluded(path, exclude):
            out[path] = _entry(path, key)
    return out


def capture_stats(directories: t.Sequence[str]) -> dict:
    """{directory: {relative path: [size, mtime_ns]} or None when missing}: what a model's files are, without reading
    them (the deploy's own check of a model reads names; a changed file changes its size or time)."""
    out: dict[str, dict | None] = {}
    for top in directories:
        if not os.path.isdir(top):
            out[top] = None
            continue
        files = {}
        for root, dirs, names in os.walk(top, followlinks=True):
            dirs.sort()
            for name in names:
                path = os.path.join(root, name)
                try:
                    st = os.stat(path)
                except OSError:
                    files[os.path.relpath(path, top)] = None
                    continue
                files[os.path.relpath(path, top)] = [st.st_size, st.st_mtime_ns]
        out[top] = files
    return out


def load_key(directory: str, create: bool) -> bytes | None:
    """The node's record key (KEY_FILE in DIRECTORY, 32 random bytes, root only); made when CREATE and missing. None
    when it is missing and not made (no record made without it can be compared)."""
    path = os.path.join(directory, KEY_FILE)
    try:
        with open(path, "rb") as f:
            key = f.read()
    except FileNotFoundError:
        key = None
    if key is not None and len(key) == 32:
        return key
    if not create:
        return None
    key = os.urandom(32)
    write_atomically(path, key, 0o600, 0, 0)
    return key


def describe_container(attrs: dict) -> dict:
    """What identifies a container as the deploy left it: its ID, image, whether it runs, when it last started (a
    restart by Docker's policy or by the watchdog is a difference: the deploy then checks the cluster whole, as a Ray
    head restarted after its workers needs), and a digest of its configuration (Config and HostConfig: what
    `docker update` could change under the same ID)."""
    state = attrs.get("State") or {}
    return {
        "id": attrs.get("Id", ""),
        "image": attrs.get("Image", ""),
        "running": bool(state.get("Running")) and not state.get("Paused"),
        "started": state.get("StartedAt") or "",
        "config": digest({"config": attrs.get("Config") or {}, "host": attrs.get("HostConfig") or {}}),
    }


def capture_containers(client, label: str, not_found: type[Exception]) -> dict:
    """{name: describe_container()} of every container carrying LABEL (the collection's)."""
    out = {}
    for summary in client.api.containers(all=True, filters={"label": label}):
        try:
            attrs = client.api.inspect_container(summary["Id"])
        except not_found:  # removed between the list and the inspection: not there
            continue
        out[(attrs.get("Name") or "").lstrip("/")] = describe_container(attrs)
    return out


def capture_images(client, refs: t.Iterable[str], not_found: type[Exception]) -> dict:
    """{ref: image ID or None when the node does not have it}."""
    out = {}
    for ref in sorted(set(r for r in refs if r)):
        try:
            out[ref] = client.api.inspect_image(ref).get("Id", "")
        except not_found:
            out[ref] = None
    return out


def _name_diff(kind: str, before: dict, after: dict, what: t.Callable[[t.Any, t.Any], str]) -> list[str]:
    out = []
    for key in sorted(set(before) | set(after)):
        b, a = before.get(key), after.get(key)
        if b != a:
            out.append(f"{kind} {key}: {what(b, a)}")
    return out


def _file_change(before, after) -> str:
    if before is None:
        return "new"
    if after is None:
        return "missing"
    if before[0] != after[0]:
        return f"was a {before[0]}, now a {after[0]}"
    if before[4] != after[4]:
        return "content changed"
    return "mode or owner changed"


def _container_change(before, after) -> str:
    if before is None:
        return "new"
    if after is None:
        return "missing"
    if before["id"] != after["id"]:
        return "recreated"
    if before["running"] and not after["running"]:
        return "not running"
    if not before["running"] and after["running"]:
        return "running (it was stopped)"
    if before["image"] != after["image"]:
        return "another image"
    if before.get("started") != after.get("started"):
        return f"restarted since the last deploy (started {after.get('started') or '?'}, was {before.get('started') or '?'})"
    return "configuration changed"


def _image_change(before, after) -> str:
    if after is None:
        return "missing"
    if before is None:
        return "present (it was missing)"
    return f"now {after[:19]} (was {before[:19]})"


def _stats_change(before, after) -> str:
    if before is None or after is None:
        return "missing" if after is None else "present (it was missing)"
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return f"{len(changed)} file(s) differ ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})"


def differences(recorded: dict | None, inputs: str, now: dict) -> list[str]:
    """Why the node is not as the recorded deploy left it (empty: it is), at most MAX_DIFFERENCES reasons."""
    if not recorded:
        return ["no record of an earlier deploy on this node"]
    if recorded.get("version") != VERSION:
        return [f"the record is of version {recorded.get('version')} (this collection writes {VERSION})"]
    out = []
    if recorded.get("inputs") != inputs:
        out.append("the deploy's inputs changed (the inventory, -e, a secret, the fleet or the collection)")
    state = recorded.get("state") or {}
    out += _name_diff("file", state.get("files") or {}, now.get("files") or {}, _file_change)
    out += _name_diff("container", state.get("containers") or {}, now.get("containers") or {}, _container_change)
    out += _name_diff("image", state.get("images") or {}, now.get("images") or {}, _image_change)
    out += _name_diff("model directory", state.get("stats") or {}, now.get("stats") or {}, _stats_change)
    if len(out) > MAX_DIFFERENCES:
        out = out[:MAX_DIFFERENCES] + [f"and {len(out) - MAX_DIFFERENCES} more"]
    return out


def image_refs(images: t.Iterable[str], recorded: dict | None) -> list[str]:
    """The images to read: those asked for and those the record holds (an image it served that is gone is a
    difference)."""
    held = ((recorded or {}).get("state") or {}).get("images") or {}
    return sorted(set(i for i in images if i) | set(held))


def parse(text: bytes | None) -> dict | None:
    """The record in TEXT, or None (missing or unreadable: the node then goes through the whole deploy)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def render(inputs: str, state: dict, result: dict) -> bytes:
    return (json.dumps({"version": VERSION, "inputs": inputs, "state": state, "result": result},
                       sort_keys=True, indent=1) + "\n").encode("utf-8")
