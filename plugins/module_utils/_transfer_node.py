# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""The receiving side of the relay: the transfer program, the forced command of the fleet's transfer key.

dgxspark.vllm.node_trust installs it on every node as ``dgxspark-transfer``, a single python3 file that
``_node_program`` builds from this module and the module_utils it imports (``_relay``, ``_model_files``).

A peer that logs in with the fleet's transfer key gets this program and nothing else
(``restrict,from=<fabric addresses>,command="python3 dgxspark-transfer CONFIG"`` in
authorized_keys). The command line the client sent (SSH_ORIGINAL_COMMAND) is ignored:
the request is the first line of stdin, a JSON object, and these are the requests:

``inspect``  {"v": 1, "op": "inspect", "image": REF, "image_id": ID}
    Answers one JSON line: this engine's image store, the free bytes of its Docker
    root, and the image REF and the image ID point to (or null).
``tag``      {"v": 1, "op": "tag", "image_id": ID, "ref": REF, "nonce": NONCE}
    Points REF at ID, which must already be here.
``receive``  {"v": 1, "op": "receive", "name": NAME, "image_id": ID, "ref": REF, "nonce": NONCE,
              "next": [{"host": H, "port": P, "name": N}, ...]}
    followed by the image (a ``docker save`` archive of ID, with no tags) in frames:
    4-byte big-endian length + data, a zero-length frame, then a JSON trailer line
    {"bytes": TOTAL}. The stream is loaded into this engine while it is forwarded,
    frame for frame, to the first entry of ``next`` (which forwards to the rest), so
    the source reads and sends the image once whatever the number of targets.
    The load is verified against the controller's announcement alone (the loaded image
    ID must be the announced ID, or, when the announced store is not this node's, carry
    the announced content label or fingerprint; a load that cannot be verified is
    refused) before REF is moved to it: a truncated, failed or wrong load never touches
    REF, and every image it made is removed again. The engine's tags are compared
    before and after the load: any change (the archive's own names, in a form the
    guard missed) is put back and fails the receive, naming it. Answers one
    JSON line for this node (with ``after``: this engine's store and the image REF,
    or ID, points to at the end, as ``inspect`` reports them) followed by the lines
    of every node after it.

Nothing is placed on a node that the controller did not announce there first (module_utils/_announce.py, written by
dgxspark.vllm.transfer_announce beside the configuration): ``tag`` and ``receive`` must name an announced reference
and its announced image ID, with the announcement's nonce, before it expires, and each takes that reference's entry
(one use); the loaded image is verified against the announced identity, never anything the sender declares), a
``receive`` stream may not pass the announced size (plus a small margin), the archive may not name
images of its own (``docker load`` would apply its RepoTags before any check), and the node checks its own free
space first. A chain's next hop must be one of the nodes this node may forward to (``forward_to`` in the
configuration: the members after it in its cluster), so a peer cannot make a node reach any other host or port.

Protocol 2 adds two requests for model weights (``v`` must be 2 for them; image requests are
accepted with ``v`` 1 or 2). MODEL is a relative path under this node's models root, which comes
from the configuration file (``models_root``, written by node_trust), never from the request:

``files_inspect``  {"v": 2, "op": "files_inspect", "model": MODEL}
    Answers one JSON line: whether the model directory exists, its manifest
    {relative path: {"size", "sha256"}} (hashes cached in a sidecar keyed by size, mtime and
    inode), anything that is not allowed in it (symlinks leading out...) and the free bytes.
``files_receive``  {"v": 2, "op": "files_receive", "name": NAME, "model": MODEL,
                    "files": [{"path", "size", "sha256"}, ...], "want": [PATH, ...],
                    "delete": [PATH, ...], "next": [{"host", "port", "name", "want", "delete"}, ...]}
    followed by the bytes of every file of ``files``, in that order, in frames that never
    cross a file boundary, then a zero-length frame and the trailer {"bytes": TOTAL}. The
    stream is forwarded frame for frame to ``next`` like an image. The model must be announced, every file sent
    must be in its announced manifest with the same size and hash, no announced file may be deleted, and the files
    this node wants must fit its free space. This node writes the files
    it ``want``s, each to a hidden part file beside its final name, checking its sha256; only
    once the whole stream arrived and every file verified are they renamed into place
    (atomic per file), then the ``delete`` paths are removed. A cut stream, a wrong hash or a
    signal removes the part files and leaves the existing files as they were.

Protocol 2 also carries one request that is not a transfer, for the watchdog on the cluster's head
(dgxspark.vllm.watchdog), which recovers the whole cluster with the credential the cluster already holds:

``engine``  {"v": 2, "op": "engine", "action": ACTION, "containers": [NAME, ...]}
    ACTION is ``status``, ``stop``, ``start`` or ``restart``. Each NAME must be one of this node's engine
    containers, by name (``engine_containers`` in the configuration, the collection's default names otherwise)
    and by label (``org.dgxspark.vllm.component`` ``ray`` or ``vllm``): no other container, image or option can be
    named. Answers one JSON line with each container's state after the action.

The watchdog holds a key of its own (security review H3), authorized on every member of its cluster (its head
included) with the forced command ``dgxspark-transfer CONFIG.json --only engine``: that key can ask ``engine`` and
nothing else, no image, no model file, no relay.

No shell is involved anywhere: the next hop is reached with the relay's ssh argv. Standard library only (the
docker SDK, python3-docker on the node, is imported when an image request needs it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import queue
import re
import signal
import sys
import threading
import time

from ansible_collections.dgxspark.vllm.plugins.module_utils._announce import (
    NONCE_RE, HostileArchive, TarGuard, announced_files, announced_image, archive_limit,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils._model_files import (
    PathError, cache_key, check_relpath, load_cache, manifest, model_dir, part_name, save_cache, stale_parts,
    target_file, within,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils._unified_memory import evict
from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import (
    CONTENT_LABEL, FRAME, IMAGE_ID_RE, MAX_FRAME, MAX_HEADER, MAX_LAYERS, PROTOCOL, PROTOCOLS, Hop, IdleReader,
    chain_results, fingerprint, held_prefix, idle_timeout, image_summary, read_exact, read_full, ssh_argv, store_of,
)

IMAGE_OPS = ("inspect", "tag", "receive")
FILES_OPS = ("files_inspect", "files_receive")
ENGINE_ACTIONS = ("status", "stop", "start", "restart")
# The engine containers' default names (ray_cluster_head_container, ray_cluster_worker_container,
# vllm_serve_mp_container) and the components whose label they carry.
ENGINE_CONTAINERS = ("dgxspark-ray-head", "dgxspark-ray-worker", "dgxspark-vllm")
ENGINE_COMPONENTS = ("ray", "vllm")
ENGINE_STOP_TIMEOUT = 30
# repository[:tag], the way Docker accepts it (lower-case path components, optional registry with port).
REF_RE = re.compile(r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")
HOST_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.:-]{0,251}[A-Za-z0-9])?$")
NAME_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
LOCK_NAME = ".dgxspark-receive.lock"
MAX_FILES = 100000


class RequestError(ValueError):
    """The request is malformed or not allowed."""


class Interrupted(Exception):
    """A signal ended the transfer."""


# --------------------------------------------------------------------------- pure helpers (unit tested)

def split_ref(ref):
    """(repository, tag) of a validated REF; the tag defaults to latest."""
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag
    return ref, "latest"


def validate_request(req):
    """Check a request header; returns it normalised or raises RequestError."""
    if not isinstance(req, dict) or type(req.get("v")) is not int or req.get("v") not in PROTOCOLS:  # pylint: disable=unidiomatic-typecheck
        raise RequestError(f"unsupported request (this relay speaks protocols {PROTOCOLS[0]} to {PROTOCOL})")
    op = req.get("op")
    if op == "engine":
        if req["v"] < 2:
            raise RequestError("engine needs protocol 2")
        return validate_engine_request(req)
    if op in FILES_OPS:
        if req["v"] < 2:
            raise RequestError(f"{op} needs protocol 2")
        return validate_files_request(req)
    if op not in IMAGE_OPS:
        raise RequestError(f"unknown operation {op!r}")
    image_id = req.get("image_id")
    if image_id is not None and not (isinstance(image_id, str) and IMAGE_ID_RE.match(image_id)):
        raise RequestError("image_id must be sha256:<64 hex>")
    ref = req.get("ref", req.get("image"))
    if ref is not None and not (isinstance(ref, str) and (REF_RE.match(ref) or IMAGE_ID_RE.match(ref))):
        raise RequestError(f"invalid image reference {ref!r}")
    if op in ("tag", "receive") and image_id is None:
        raise RequestError(f"{op} needs image_id")
    if op == "tag" and (ref is None or IMAGE_ID_RE.match(ref)):
        raise RequestError("tag needs a repository[:tag] reference")
    clean = validate_hops(req.get("next", []))
    label = req.get("content_label")
    if label is not None and not isinstance(label, str):
        raise RequestError("content_label must be a string")
    mark = req.get("fingerprint")
    if mark is not None and not (isinstance(mark, str) and IMAGE_ID_RE.match(mark)):
        raise RequestError("fingerprint must be sha256:<64 hex>")
    nonce = req.get("nonce")
    if nonce is not None and not (isinstance(nonce, str) and NONCE_RE.match(nonce)):
        raise RequestError("nonce must be 32 to 128 lower-case hex digits")
    if op in ("tag", "receive") and nonce is None:
        raise RequestError(f"{op} needs the nonce of the controller's announcement")
    layers = req.get("layers")
    if layers is not None and (op != "inspect" or not isinstance(layers, list) or len(layers) > MAX_LAYERS
                               or not all(isinstance(d, str) and IMAGE_ID_RE.match(d) for d in layers)):
        raise RequestError(f"layers (inspect only) must be a list of at most {MAX_LAYERS} sha256:<64 hex> diff IDs")
    out = dict(req)
    out["ref"] = ref
    out["next"] = clean
    return out


def validate_engine_request(req, allowed=ENGINE_CONTAINERS):
    """An ``engine`` request: a known action on containers among ALLOWED, nothing else; RequestError otherwise."""
    extra = sorted(set(req) - {"v", "op", "action", "containers", "name"})
    if extra:
        raise RequestError(f"engine takes no {', '.join(extra)}")
    action = req.get("action")
    if action not in ENGINE_ACTIONS:
        raise RequestError(f"engine action must be one of {', '.join(ENGINE_ACTIONS)} (is {action!r:.40})")
    names = req.get("containers")
    if not isinstance(names, list) or not names or len(names) > len(allowed):
        raise RequestError("engine needs a list of container names")
    for name in names:
        if not isinstance(name, str) or name not in allowed:
            raise RequestError(f"{name!r:.80} is not an engine container of this node (allowed: {', '.join(allowed)})")
    if len(set(names)) != len(names):
        raise RequestError("a container is named twice")
    return {"v": req["v"], "op": "engine", "action": action, "containers": list(names), "name": req.get("name")}


def validate_hops(hops, paths=None):
    """The relay chain's hops, normalised; with PATHS (a files_receive) each hop's want/delete lists are checked."""
    if not isinstance(hops, list) or len(hops) > 64:
        raise RequestError("next must be a list of at most 64 hops")
    clean = []
    for hop in hops:
        if not isinstance(hop, dict) or not isinstance(hop.get("host"), str) or not HOST_RE.match(hop["host"]):
            raise RequestError(f"invalid hop {hop!r}")
        port = hop.get("port", 22)
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise RequestError(f"invalid port in hop {hop!r}")
        name = hop.get("name") or hop["host"]
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise RequestError(f"invalid name in hop {hop!r}")
        entry = {"host": hop["host"], "port": port, "name": name}
        if paths is not None:
            entry["want"] = validate_want(hop.get("want"), paths)
            entry["delete"] = validate_paths(hop.get("delete", []), "delete")
        clean.append(entry)
    return clean


def validate_paths(paths, what):
    if not isinstance(paths, list) or len(paths) > MAX_FILES:
        raise RequestError(f"{what} must be a list of at most {MAX_FILES} paths")
    for rel in paths:
        check_relpath(rel)
    if len(set(paths)) != len(paths):
        raise RequestError(f"{what} lists a path twice")
    return list(paths)


def validate_want(want, paths):
    """The files a hop writes: all of the stream's files when absent, else a subset of them."""
    if want is None:
        return list(paths)
    want = validate_paths(want, "want")
    unknown = sorted(set(want) - set(paths))
    if unknown:
        raise RequestError(f"want lists files that are not in the stream: {', '.join(unknown[:5])}")
    return want


def validate_files_request(req):
    """Check a files_inspect / files_receive header; returns it normalised or raises RequestError."""
    model = req.get("model")
    check_relpath(model, max_depth=4)
    out = {"v": req["v"], "op": req["op"], "name": req.get("name"), "model": model}
    if out["name"] is not None and not (isinstance(out["name"], str) and NAME_RE.match(out["name"])):
        raise RequestError(f"invalid name {out['name']!r}")
    if req["op"] == "files_inspect":
        return out
    files = req.get("files")
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise RequestError(f"files must be a list of at most {MAX_FILES} entries")
    clean = []
    for entry in files:
        if not isinstance(entry, dict):
            raise RequestError(f"invalid file entry {entry!r}")
        size, digest = entry.get("size"), entry.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise RequestError(f"invalid size in {entry!r}")
        if not isinstance(digest, str) or not SHA256_RE.match(digest):
            raise RequestError(f"invalid sha256 in {entry!r}")
        clean.append({"path": check_relpath(entry.get("path")), "size": size, "sha256": digest})
    paths = [e["path"] for e in clean]
    if len(set(paths)) != len(paths):
        raise RequestError("files lists a path twice")
    out["files"] = clean
    out["want"] = validate_want(req.get("want"), paths)
    out["delete"] = validate_paths(req.get("delete", []), "delete")
    if set(out["delete"]) & set(paths):
        raise RequestError("a path cannot be both sent and deleted")
    out["next"] = validate_hops(req.get("next", []), paths)
    return out


def next_header(req):
    """The header the next hop gets: same image, itself as name, the rest of the chain."""
    hop = req["next"][0]
    if req.get("op") == "files_receive":
        return {"v": req["v"], "op": "files_receive", "name": hop["name"], "model": req["model"], "files": req["files"],
                "want": hop["want"], "delete": hop["delete"], "next": req["next"][1:]}
    return {"v": req.get("v", 1), "op": "receive", "name": hop["name"], "image_id": req["image_id"], "ref": req.get("ref"),
            "nonce": req.get("nonce"), "next": req["next"][1:]}


def check_forward(req, config):
    """Refuse a chain whose next hop is not a node this one may send to (``forward_to`` in its configuration: the
    members after it in its cluster, written by node_trust). A peer cannot use a node to reach any host and port."""
    if not req.get("next"):
        return
    allowed = config.get("forward_to")
    if not isinstance(allowed, list):
        raise RequestError("this node's configuration names no node it may forward to (forward_to); rerun the "
                           "dgxspark.vllm.node_trust role")
    hop = req["next"][0]
    if hop["host"] not in allowed or hop["port"] != int(config.get("ssh_port", 22)):
        raise RequestError(f"this node does not forward to {hop['host']}:{hop['port']} (it forwards only to the "
                           f"members after it in its cluster: {', '.join(allowed) or 'none'})")


def announce_dir(config):
    """Where the controller's announcements are: beside the configuration (the trust directory, root only)."""
    return config.get("_dir") or os.path.dirname(config.get("key") or "/etc/dgxspark/transfer/x")


def forward(req, config, result):
    """The Hop to the next node of the chain (None at the end of it, or when ssh cannot start: RESULT says so)."""
    if not req["next"]:
        return None
    hop = req["next"][0]
    try:
        return Hop(ssh_argv(hop, config["key"], config["known_hosts"], config.get("user", "root"),
                            int(config.get("connect_timeout", 10)), config.get("ssh", "ssh")),
                   next_header(req), [hop["name"]])
    except OSError as exc:
        result["forward_error"] = f"could not start ssh to {hop['name']}: {exc}"
        return None


def downstream_answers(down, req, config):
    """The answers of the nodes after this one, in chain order: each node's own, or why it is missing."""
    if down is None:
        return []
    down.finish(timeout=int(config.get("finish_timeout", 3600)))
    results = chain_results([(down, req["next"])])
    return [results[hop["name"]] for hop in req["next"]]


def answer_chain(result, start, error, down, req, config):
    """Print this node's RESULT, then the answers of the nodes after it; the exit code (0 when this node succeeded)."""
    result["seconds"] = round(time.monotonic() - start, 3)
    result["ok"] = error is None
    if error:
        result["error"] = error
    emit(result)
    for answer in downstream_answers(down, req, config):
        emit(answer)
    return 0 if result["ok"] else 1


def loaded_ids(events):
    """Image IDs and references a docker load reported, and its error (if any)."""
    ids, refs, error = [], [], None
    for event in events:
        if not isinstance(event, dict):
            continue
        if event.get("error") or event.get("errorDetail"):
            error = event.get("error") or (event.get("errorDetail") or {}).get("message")
        text = (event.get("stream") or "").strip()
        if text.startswith("Loaded image ID: "):
            ids.append(text[len("Loaded image ID: "):].strip())
        elif text.startswith("Loaded image: "):
            refs.append(text[len("Loaded image: "):].strip())
    return ids, refs, error


def verify_loaded(entry, local_store, loaded, labels, mark):
    """None when the load produced the image the controller announced (ENTRY), else why not.

    Only the announcement counts: its ID when this node's store (LOCAL_STORE) is the source's (or the announcement
    names no store), else its content label or fingerprint, which the loaded image's LABELS or fingerprint (MARK)
    must carry. LOADED is the list of image IDs docker reported: exactly one image is expected."""
    if not loaded:
        return "docker load reported no image"
    if len(loaded) != 1:
        return f"docker load reported {len(loaded)} images ({', '.join(loaded)[:300]}), the archive of one was announced"
    if entry.get("store") in (None, local_store):
        if loaded[0] == entry["id"]:
            return None
        return f"loaded image {loaded[0]} is not the announced {entry['id']}"
    if entry.get("content_label"):
        if (labels or {}).get(CONTENT_LABEL) == entry["content_label"]:
            return None
        return f"loaded image lacks content label {CONTENT_LABEL}={entry['content_label']}"
    if entry.get("fingerprint"):
        if mark == entry["fingerprint"]:
            return None
        return f"loaded image's content fingerprint {mark} is not the announced {entry['fingerprint']}"
    return (f"the announcement names the {entry['store']} store, this node uses the {local_store} store, and it carries "
            f"no content label or fingerprint: the loaded image cannot be verified")


def tag_map(api):
    """Every tag of this engine and the image it points at."""
    return {tag: image["Id"] for image in api.images() for tag in image.get("RepoTags") or []
            if tag and tag != "<none>:<none>"}


def tag_changes(before, after):
    """The tags a load moved, added or removed: {tag: (image before or None, image after or None)}."""
    return {tag: (before.get(tag), after.get(tag)) for tag in sorted(set(before) | set(after))
            if before.get(tag) != after.get(tag)}


def revert_tags(api, changes):
    """Put the tags of CHANGES back where they were; the tags that could not be (why) as a list of strings."""
    failed = []
    for tag, (old, _new) in changes.items():
        try:
            if old is None:
                api.remove_image(tag, force=False, noprune=False)
            else:
                repo, name = split_ref(tag)
                api.tag(old, repo, name, force=True)
        except Exception as exc:  # pylint: disable=broad-except
            failed.append(f"{tag} ({exc})")
    return failed


# --------------------------------------------------------------------------- I/O

def read_line(stream, limit=MAX_HEADER):
    data = stream.readline(limit + 1)
    if not data.endswith(b"\n"):
        raise RequestError("no request line on stdin" if not data else "request line too long or cut off")
    return data


def emit(obj):
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def docker_client(config):
    try:
        import docker  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise RequestError(f"the docker SDK for Python is missing on this node ({exc}); install python3-docker") from exc
    return docker.APIClient(base_url=config.get("docker_host", "unix:///var/run/docker.sock"), version="auto",
                            timeout=int(config.get("docker_timeout", 600)))


def inspect_or_none(api, ref):
    if not ref:
        return None
    try:
        return api.inspect_image(ref)
    except Exception as exc:  # pylint: disable=broad-except
        if getattr(getattr(exc, "response", None), "status_code", None) == 404:
            return None
        raise


def do_inspect(api, req):
    info = api.info()
    root = info.get("DockerRootDir") or "/var/lib/docker"
    st = os.statvfs(root)
    return {"v": PROTOCOL, "ok": True, "protocol": PROTOCOL, "store": store_of(info), "driver": info.get("Driver"),
            "docker_root": root, "free_bytes": st.f_bavail * st.f_frsize, "server_version": info.get("ServerVersion"),
            "ref_image": image_summary(inspect_or_none(api, req.get("ref"))),
            "id_image": image_summary(inspect_or_none(api, req.get("image_id"))),
            **({"held": held_layers(api, req["layers"])} if req.get("layers") else {})}


def held_layers(api, layers):
    """How many of LAYERS (diff IDs, base first) this engine holds as one chain: a load needs none of them again."""
    chains = []
    for image_id in api.images(all=True, quiet=True):
        try:
            chains.append(((api.inspect_image(image_id).get("RootFS") or {}).get("Layers")) or [])
        except Exception:  # pylint: disable=broad-except  # removed meanwhile: it holds nothing
            continue
    return held_prefix(layers, chains)


def do_tag(api, req, config):
    announced_image(announce_dir(config), req["ref"], req["image_id"], req.get("nonce"))
    if inspect_or_none(api, req["image_id"]) is None:
        return {"v": PROTOCOL, "ok": False, "error": f"image {req['image_id']} is not on this node"}
    repo, tag = split_ref(req["ref"])
    api.tag(req["image_id"], repo, tag, force=True)
    return {"v": PROTOCOL, "ok": True, "action": "tag"}


def engine_allowed(config):
    """The engine container names this node's configuration allows (the collection's defaults without one)."""
    names = config.get("engine_containers") or list(ENGINE_CONTAINERS)
    if not isinstance(names, list) or not all(isinstance(n, str) and NAME_RE.match(n) for n in names):
        raise RequestError("engine_containers in the configuration must be a list of container names")
    return tuple(names)


def container_state(info):
    """What an engine request reports of a container (``docker inspect`` output): no environment, no command."""
    state = info.get("State") or {}
    return {"exists": True, "running": bool(state.get("Running")), "paused": bool(state.get("Paused")),
            "status": state.get("Status"),
            "started_at": state.get("StartedAt"), "exit_code": state.get("ExitCode"),
            "restart_count": info.get("RestartCount", 0)}


def _running(api, name):
    return bool((api.inspect_container(name).get("State") or {}).get("Running"))


def do_engine(api, req, config):
    """Act on this node's engine containers, checked by name and label; the state of each after the action."""
    req = validate_engine_request(req, engine_allowed(config))
    result = {"v": PROTOCOL, "ok": True, "action": req["action"], "containers": {}}
    for name in req["containers"]:
        try:
            info = api.inspect_container(name)
        except Exception as exc:  # pylint: disable=broad-except
            if getattr(getattr(exc, "response", None), "status_code", None) == 404:
                result["containers"][name] = {"exists": False}
                continue
            raise
        labels = (info.get("Config") or {}).get("Labels") or {}
        if labels.get("org.dgxspark.vllm.component") not in ENGINE_COMPONENTS:
            result["ok"] = False
            result["error"] = f"{name} is not an engine container of the collection (label org.dgxspark.vllm.component)"
            return result
        if req["action"] in ("stop", "restart"):
            api.stop(name, timeout=int(config.get("engine_stop_timeout", ENGINE_STOP_TIMEOUT)))
        if req["action"] in ("start", "restart"):
            root = config.get("models_root")
            if isinstance(root, str) and root.startswith("/") and not _running(api, name):
                # A restarted engine loads its weights again: what the last load left in the page cache is unified
                # memory the new engine cannot have (vllm_serve evicts them before a start; so does this request).
                result["evicted"] = evict([root])
            api.start(name)
        result["containers"][name] = container_state(api.inspect_container(name))
    return result


class Loader(threading.Thread):
    """Feeds the frames to the engine's load endpoint (docker SDK) from a small pool of reusable buffers.

    The reading thread fills a buffer (:meth:`take`), forwards it and hands it over (:meth:`put`); this
    thread passes it to the upload, which sends it before asking for the next one, and then gives the
    buffer back. Aborting raises inside the upload, which ends without its last chunk: nothing is created.
    """

    END = object()
    ABORT = object()

    def __init__(self, api, buffers=4):
        super().__init__(daemon=True)
        self.api = api
        self.q = queue.Queue()
        self.free = queue.Queue()
        self.buffers = buffers
        self.allocated = 0
        self.events = []
        self.error = None
        self.done = threading.Event()

    def take(self, size):
        """A buffer of at least SIZE bytes for the next frame; waits while every buffer is on its way to the engine."""
        buf = None
        while buf is None:
            try:
                buf = self.free.get_nowait()
            except queue.Empty:
                if self.allocated < self.buffers or self.done.is_set():
                    self.allocated += 1
                    buf = bytearray(size)
                else:
                    try:
                        buf = self.free.get(timeout=0.5)
                    except queue.Empty:
                        continue
        if len(buf) < size:
            buf = bytearray(size)
        return buf

    def put(self, item, size=0):
        """Hand a filled buffer (its first SIZE bytes), END or ABORT to the engine; a stopped loader drops the data."""
        if self.done.is_set():
            if isinstance(item, bytearray):
                self.free.put(item)
            return
        self.q.put((item, size))

    def _chunks(self):
        while True:
            item, size = self.q.get()
            if item is self.END:
                return
            if item is self.ABORT:
                raise IOError("the image stream was cut off; load aborted")
            yield memoryview(item)[:size]
            self.free.put(item)  # the upload sent it before asking for the next chunk

    def run(self):
        try:
            self.events = list(self.api.load_image(self._chunks()))
        except Exception as exc:  # pylint: disable=broad-except
            self.error = str(exc) or type(exc).__name__
        finally:
            self.done.set()


def do_receive(api, req, config, stdin):
    start = time.monotonic()
    result = {"v": PROTOCOL, "name": req.get("name"), "ok": False, "action": "transfer", "bytes": 0}
    if not req.get("ref") or IMAGE_ID_RE.match(req["ref"]):
        raise RequestError("receive needs the repository[:tag] reference the controller announced")
    entry = announced_image(announce_dir(config), req["ref"], req["image_id"], req.get("nonce"))
    limit = archive_limit(entry)
    info = api.info()
    local_store = store_of(info)
    root = info.get("DockerRootDir") or "/var/lib/docker"
    free = free_bytes(root)
    if free < entry["bytes"]:
        raise RequestError(f"not enough space for {req['ref']}: {free} bytes free on {root}, the image takes "
                           f"{entry['bytes']}; nothing was received")
    guard = TarGuard()
    before = set(api.images(all=True, quiet=True))
    tags_before = tag_map(api)
    down = forward(req, config, result)
    loader = Loader(api)
    loader.start()
    total = 0
    complete = False
    error = None
    stdin = IdleReader(stdin, idle_timeout(config))  # a silent sender ends the stream after idle_timeout s
    while True:
        head = read_exact(stdin, FRAME.size)
        if head is None:
            error = f"the image stream ended after {total} bytes without its end mark (sender interrupted?)"
            break
        (size,) = FRAME.unpack(head)
        if size > MAX_FRAME:
            error = f"frame of {size} bytes is larger than {MAX_FRAME}"
            break
        if size == 0:
            trailer = read_line(stdin, 4096)
            declared = json.loads(trailer).get("bytes")
            if declared != total:
                error = f"received {total} bytes, the sender declared {declared}"
                break
            if down:
                down.write(head, trailer)
            complete = True
            break
        if total + size > limit:
            error = (f"the stream passes {limit} bytes, more than the {entry['bytes']} bytes announced for "
                     f"{req['ref']}; refused")
            break
        buf = loader.take(size)
        data = memoryview(buf)[:size]
        if read_full(stdin, data) != size:
            error = f"the image stream ended inside a frame after {total} bytes (sender interrupted?)"
            break
        total += size
        try:
            guard.feed(data)
        except HostileArchive as exc:
            error = f"refused: {exc}"
            break
        if down:
            down.write(head, data)
        loader.put(buf, size)
    if stdin.idle:
        error = f"{stdin.idle} after {total} bytes"
    loader.put(Loader.END if complete else Loader.ABORT)
    loader.join()
    result["bytes"] = total
    if error is None and loader.error:
        error = f"docker load failed: {loader.error}"
    ids, refs, load_error = loaded_ids(loader.events)
    if error is None and load_error:
        error = f"docker load failed: {load_error}"
    # Whatever the guard saw, the engine's tags are compared: a load of an archive saved by ID changes none, so any
    # change is the archive's own names (a form the guard missed): put back, and the transfer fails naming it.
    moved = tag_changes(tags_before, tag_map(api))
    if moved:
        unreverted = revert_tags(api, moved)
        named = ", ".join(f"{tag} ({old or 'absent'} -> {new or 'absent'})" for tag, (old, new) in moved.items())
        error = (f"refused: the load changed tags the controller did not announce: {named[:600]}; "
                 + (f"could not put back {', '.join(unreverted)[:300]}" if unreverted else "put back as they were"))
    elif error is None and refs:
        error = f"refused: docker load applied names of the archive's own ({', '.join(refs)[:300]})"
    if error is None:
        attrs = inspect_or_none(api, ids[0]) if ids else None
        labels = ((attrs or {}).get("Config") or {}).get("Labels") or {}
        why = verify_loaded(entry, local_store, ids, labels, fingerprint(attrs) if attrs else None)
        if why:
            error = f"verification failed: {why}; the image was removed and no tag was changed"
        else:
            result["loaded_id"] = ids[0]
            repo, tag = split_ref(req["ref"])
            api.tag(ids[0], repo, tag, force=True)
    if error is not None:
        # Nothing the failed load made stays: every image that was not here before it (the image it loaded, or one
        # an archive's own names brought) is removed.
        for bad in sorted(set(ids) | (set(api.images(all=True, quiet=True)) - before)):
            if bad not in before:
                try:
                    api.remove_image(bad, force=True, noprune=False)
                except Exception:  # pylint: disable=broad-except
                    pass
    try:
        # Where the name (or the ID) points now, as an inspect answers it: the source verifies with this answer
        # instead of asking every node again over a new connection.
        result["after"] = {"store": local_store,
                           "ref_image": image_summary(inspect_or_none(api, req.get("ref") or req["image_id"]))}
    except Exception:  # pylint: disable=broad-except  # the source then asks with an inspect request
        pass
    return answer_chain(result, start, error, down, req, config)


def models_root(config):
    """The models root this node's configuration allows (node_trust writes it); requests never choose it."""
    root = config.get("models_root")
    if not isinstance(root, str) or not root.startswith("/"):
        raise RequestError("this node's transfer program has no models_root in its configuration; "
                           "rerun the dgxspark.vllm.node_trust role")
    return root


def free_bytes(path):
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def do_files_inspect(req, config):
    root = models_root(config)
    directory = model_dir(root, req["model"])
    answer = {"v": PROTOCOL, "ok": True, "protocol": PROTOCOL, "name": req.get("name"), "models_root": root,
              "path": directory, "exists": os.path.isdir(directory), "files": {}, "problems": [],
              "free_bytes": free_bytes(directory)}
    if answer["exists"]:
        found = manifest(directory)
        answer.update(files=found["files"], problems=found["problems"], hashed=found["hashed"], cached=found["cached"])
        # Part files a killed receive left are removed by the next receive into this directory before it writes:
        # their bytes are free space for it (else a tight disk refuses every later sync).
        stale = part_bytes(directory)
        answer["stale_part_bytes"] = stale
        answer["free_bytes"] += stale
    return answer


def part_bytes(directory):
    """The bytes of the part files a killed receive left under DIRECTORY."""
    total = 0
    for path in stale_parts(directory):
        try:
            total += os.lstat(path).st_size
        except OSError:
            pass
    return total


def _raise_interrupted(signum, _frame):
    raise Interrupted(f"signal {signum}")


class FileSink:
    """The files this node wants from a files_receive stream, each in a part file beside its final name."""

    def __init__(self, directory, want):
        self.directory = directory
        self.want = set(want)
        self.parts = []  # (part path, final path, relative path, sha256)
        self.fh = None
        self.digest = None
        self.current = None
        self.error = None
        self.written = 0

    def begin(self, entry):
        self.current = entry if entry["path"] in self.want and self.error is None else None
        if self.current is None:
            return
        try:
            final = target_file(self.directory, entry["path"])
            os.makedirs(os.path.dirname(final), exist_ok=True)
            part = part_name(final)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
            self.parts.append((part, final, entry["path"], entry["sha256"]))
            self.fh = os.fdopen(fd, "wb")
            self.digest = hashlib.sha256()
        except (OSError, ValueError) as exc:  # a PathError or RequestError too
            self.fail(f"cannot write {entry['path']}: {exc}")

    def write(self, data):
        if self.current is None or self.fh is None:
            return
        try:
            self.fh.write(data)
            self.digest.update(data)
            self.written += len(data)
        except OSError as exc:
            self.fail(f"writing {self.current['path']} failed: {exc}")

    def end(self):
        if self.current is None or self.fh is None:
            return
        try:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()
        except OSError as exc:
            self.fail(f"writing {self.current['path']} failed: {exc}")
            return
        self.fh = None
        if self.digest.hexdigest() != self.current["sha256"]:
            self.fail(f"{self.current['path']}: sha256 {self.digest.hexdigest()} received, "
                      f"{self.current['sha256']} expected")
        self.current = None

    def fail(self, why):
        if self.error is None:
            self.error = why
        self.close()
        self.current = None

    def close(self):
        """Close the part file being written, if any (after a failure: its content no longer matters)."""
        if self.fh is not None:
            try:
                self.fh.close()
            except OSError:
                pass
            self.fh = None

    def commit(self):
        """Move every verified part file to its final name; the hashes go into the cache."""
        cache = load_cache(self.directory)
        for part, final, rel, digest in self.parts:
            os.replace(part, final)
            cache[rel] = {"key": cache_key(os.stat(final)), "sha256": digest}
        self.parts = []
        save_cache(self.directory, cache)
        try:
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass

    def discard(self):
        self.close()
        for part, _final, _rel, _digest in self.parts:
            try:
                os.unlink(part)
            except OSError:
                pass
        self.parts = []


def delete_extra(directory, paths):
    """Remove the files PATHS (relative, checked) from DIRECTORY; returns the ones removed."""
    removed = []
    for rel in paths:
        path = target_file(directory, rel)
        if os.path.isfile(path) and not os.path.islink(path):
            os.unlink(path)
            removed.append(rel)
    return removed


def do_files_receive(req, config, stdin):
    start = time.monotonic()
    result = {"v": PROTOCOL, "name": req.get("name"), "ok": False, "action": "sync", "bytes": 0, "files": 0,
              "deleted": []}
    root = models_root(config)
    directory = model_dir(root, req["model"])
    announced_files(announce_dir(config), req["model"], req["files"], req["delete"])
    needed = sum(f["size"] for f in req["files"] if f["path"] in set(req["want"]))
    free = free_bytes(directory)
    if needed > free:
        raise RequestError(f"not enough space for {req['model']}: {needed} bytes to write, {free} free under {root}; "
                           "nothing was received")
    down = forward(req, config, result)
    sink = None
    lock = None
    error = None
    total = 0
    complete = False
    stdin = IdleReader(stdin, idle_timeout(config))  # a silent sender ends the stream (and frees the lock) in time
    # Interrupted mid-stream, the receive ends through its cleanup (parts removed, lock freed); the caller's own
    # handlers are back once it returns.
    handlers = {signum: signal.signal(signum, _raise_interrupted)
                for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        try:
            os.makedirs(root, exist_ok=True)
            lock = open(os.path.join(root, LOCK_NAME), "a", encoding="utf-8")  # pylint: disable=consider-using-with
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            if req["want"]:
                os.makedirs(directory, exist_ok=True)
                if not within(directory, root):
                    raise PathError(f"{directory} resolves outside the models root {root}")
                for stale in stale_parts(directory):
                    os.unlink(stale)
            sink = FileSink(directory, req["want"])
        except BlockingIOError:
            error = f"another transfer into {root} is running on this node"
        except (OSError, ValueError) as exc:  # a PathError or RequestError too
            error = f"cannot prepare {directory}: {exc}"
        if sink is None:
            sink = FileSink(directory, [])
        for entry in req["files"]:
            sink.begin(entry)
            remaining = entry["size"]
            while remaining > 0:
                head = read_exact(stdin, FRAME.size)
                if head is None:
                    raise EOFError(f"the stream ended after {total} bytes, inside {entry['path']} (sender interrupted?)")
                (size,) = FRAME.unpack(head)
                if size == 0 or size > remaining or size > MAX_FRAME:
                    raise ValueError(f"a frame of {size} bytes where {entry['path']} has {remaining} bytes left")
                data = read_exact(stdin, size)
                if data is None:
                    raise EOFError(f"the stream ended inside a frame after {total} bytes (sender interrupted?)")
                total += size
                remaining -= size
                if down:
                    down.write(head, data)
                sink.write(data)
            sink.end()
        head = read_exact(stdin, FRAME.size)
        if head is None or FRAME.unpack(head)[0] != 0:
            raise ValueError(f"no end mark after the {len(req['files'])} files ({total} bytes)")
        trailer = read_line(stdin, 4096)
        declared = json.loads(trailer).get("bytes")
        if declared != total:
            raise ValueError(f"received {total} bytes, the sender declared {declared}")
        if down:
            down.write(head, trailer)
        complete = True
        error = error or sink.error
        if error is None and complete:
            result["files"] = len(sink.parts)
            sink.commit()
            result["deleted"] = delete_extra(directory, req["delete"])
    except (EOFError, ValueError, OSError, RequestError, Interrupted) as exc:
        error = error or (sink.error if sink and sink.error else None) or stdin.idle or str(exc)
    finally:
        if sink is not None:
            result["bytes"] = sink.written
            sink.discard()  # only parts that were not committed are left to remove
        if lock is not None:
            lock.close()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return answer_chain(result, start, error and f"{error}; the existing files were left as they were", down, req,
                        config)


ONLY = ("engine",)


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and (argv[2] != "--only" or argv[3] not in ONLY)):
        sys.stderr.write("usage: dgxspark-transfer CONFIG.json [--only engine] (as the forced command of a key: the "
                         "transfer key, or with --only engine the watchdog's)\n")
        return 2
    only = argv[3] if len(argv) == 4 else None
    stdin = sys.stdin.buffer
    req = {}
    try:
        with open(argv[1], encoding="utf-8") as fh:
            config = json.load(fh)
        config["_dir"] = os.path.dirname(os.path.abspath(argv[1]))
        req = validate_request(json.loads(read_line(stdin)))
        if only is not None and req["op"] != only:
            raise RequestError(f"this key may only ask {only} requests (the watchdog's), not {req['op']}")
        check_forward(req, config)
        if req["op"] == "files_inspect":
            emit(do_files_inspect(req, config))
            return 0
        if req["op"] == "files_receive":
            return do_files_receive(req, config, stdin)
        api = docker_client(config)
        if req["op"] == "engine":
            answer = do_engine(api, req, config)
            emit(answer)
            return 0 if answer["ok"] else 1
        if req["op"] == "inspect":
            emit(do_inspect(api, req))
            return 0
        if req["op"] == "tag":
            answer = do_tag(api, req, config)
            emit(answer)
            return 0 if answer["ok"] else 1
        return do_receive(api, req, config, stdin)
    except (RequestError, ValueError, OSError) as exc:  # NotAnnounced too
        emit({"v": PROTOCOL, "ok": False, "name": req.get("name"), "error": str(exc)})
        return 1
    except Exception as exc:  # pylint: disable=broad-except
        emit({"v": PROTOCOL, "ok": False, "name": req.get("name"), "error": f"{type(exc).__name__}: {exc}"})
        return 1
