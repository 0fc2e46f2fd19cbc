# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""Model directories: safe relative paths, manifests (size + sha256 per file) with a hash cache, and diffs.

A manifest is ``{relative path: {"size": N, "sha256": HEX}}`` of the regular files under a model directory.
Hashes are cached in a sidecar file in the directory (:data:`CACHE_NAME`), keyed by ``(size, mtime_ns, inode)``,
so that a rerun over a 119 GB model hashes only the files that changed. The transfer program on the targets
(``_transfer_node``, built into one file by ``_node_program``) uses these same functions. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
import typing as t

from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import end_mark, frame, human

CACHE_NAME = ".dgxspark-manifest.json"
# The revision the collection last downloaded into a model directory (what model_sync_revision asked for): a branch
# or tag name cannot be resolved offline, so it is recorded beside the files. Bookkeeping, not part of the model.
REVISION_NAME = ".dgxspark-revision"
PART_SUFFIX = ".dgxspark-part"
# Hugging Face's local-dir bookkeeping (``hf download --local-dir``): not part of the model.
SKIP_DIRS = (".cache",)
COMPONENT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+=@,-]{0,254}$")
MAX_DEPTH = 16
HASH_CHUNK = 4 << 20
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".msgpack", ".h5")


class PathError(ValueError):
    """A relative path that is not allowed (absolute, '..', hidden part files, odd characters) or escapes its root."""


# --------------------------------------------------------------------------- paths

def check_relpath(rel: t.Any, max_depth: int = MAX_DEPTH) -> str:
    """REL if it is a plain relative path (components of letters, digits and ``._+=@,-``, none ``.``/``..``), else raise."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or "\\" in rel:
        raise PathError(f"invalid relative path {rel!r}")
    if rel.startswith("/"):
        raise PathError(f"absolute path {rel!r} is not allowed")
    parts = rel.split("/")
    if len(parts) > max_depth:
        raise PathError(f"path {rel!r} is deeper than {max_depth} levels")
    for part in parts:
        if part in ("", ".", ".."):
            raise PathError(f"path {rel!r} has an empty, '.' or '..' component")
        if not COMPONENT_RE.match(part):
            raise PathError(f"path {rel!r} has a component with characters that are not allowed ({part!r})")
        if part.endswith(PART_SUFFIX) or part in (CACHE_NAME, REVISION_NAME):
            raise PathError(f"path {rel!r} names a transfer or bookkeeping file")
    return rel


def within(path: str, root: str) -> bool:
    """Is PATH (resolved) ROOT itself or under it (resolved)?"""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip("/") + "/")


def model_dir(root: str, model: str) -> str:
    """ROOT/MODEL after checking MODEL is a plain relative path and that the result does not escape ROOT."""
    check_relpath(model, max_depth=4)
    path = os.path.join(root, model)
    if not within(path, root):
        raise PathError(f"{path} resolves outside the models root {root} (symlink?)")
    return path


def target_file(directory: str, rel: str) -> str:
    """DIRECTORY/REL for writing: REL checked, and its existing parent directories must not lead out of DIRECTORY."""
    check_relpath(rel)
    path = os.path.join(directory, rel)
    parent = os.path.dirname(path)
    probe = parent
    while not os.path.lexists(probe) and probe != directory:
        probe = os.path.dirname(probe)
    if not within(probe, directory):
        raise PathError(f"{rel} would be written outside {directory} (a symlinked directory?)")
    if os.path.islink(path):
        raise PathError(f"{path} is a symlink; refusing to replace it")
    return path


def part_name(path: str) -> str:
    """The temporary name a file is received under (hidden, beside its final name, so the rename is atomic)."""
    directory, base = os.path.split(path)
    return os.path.join(directory, f".{base}{PART_SUFFIX}")


# --------------------------------------------------------------------------- manifests

def walk(directory: str) -> tuple[list[str], list[str]]:
    """Relative paths of the regular files under DIRECTORY (sorted), and problems found (escaping symlinks...).

    The cache sidecar, part files and Hugging Face's ``.cache`` directory are not part of a model. A symlink is
    followed when it resolves to a regular file inside DIRECTORY (Hugging Face cache layouts use them), else reported.
    """
    files, problems = [], []
    for current, dirs, names in os.walk(directory, followlinks=False):
        rel_dir = os.path.relpath(current, directory)
        rel_dir = "" if rel_dir == "." else rel_dir
        if not rel_dir:
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for d in list(dirs):
            full = os.path.join(current, d)
            if os.path.islink(full):
                dirs.remove(d)
                problems.append(f"{os.path.join(rel_dir, d)} is a symlinked directory (not followed)")
        dirs.sort()
        for name in sorted(names):
            if name in (CACHE_NAME, REVISION_NAME) or name.endswith(PART_SUFFIX):
                continue
            rel = os.path.join(rel_dir, name) if rel_dir else name
            full = os.path.join(current, name)
            try:
                check_relpath(rel)
            except PathError as exc:
                problems.append(str(exc))
                continue
            if os.path.islink(full):
                if not within(full, directory):
                    problems.append(f"{rel} is a symlink that leads outside {directory}")
                    continue
                if not os.path.isfile(full):
                    problems.append(f"{rel} is a symlink to something that is not a regular file")
                    continue
            elif not stat.S_ISREG(os.lstat(full).st_mode):
                problems.append(f"{rel} is not a regular file")
                continue
            files.append(rel)
    return sorted(files), problems


def stale_parts(directory: str) -> list[str]:
    """Part files a killed receive left behind under DIRECTORY (hidden, never under a final name)."""
    found = []
    for current, _dirs, names in os.walk(directory, followlinks=False):
        found += [os.path.join(current, n) for n in names if n.endswith(PART_SUFFIX)]
    return sorted(found)


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            data = fh.read(HASH_CHUNK)
            if not data:
                break
            digest.update(data)
    return digest.hexdigest()


def load_cache(directory: str) -> dict:
    try:
        with open(os.path.join(directory, CACHE_NAME), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else {}


def save_cache(directory: str, entries: dict) -> bool:
    """Write the cache sidecar atomically; False when the directory is not writable (the cache is an optimisation)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".dgxspark-manifest-", dir=directory)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"version": 1, "files": entries}, fh, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(directory, CACHE_NAME))
        return True
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        return False


def cache_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def manifest(directory: str, use_cache: bool = True, write_cache: bool = True,
             hasher: t.Callable[[str], str] = sha256_file) -> dict:
    """The manifest of DIRECTORY: ``{"files": {rel: {"size", "sha256"}}, "problems": [...], "hashed": N, "cached": N}``.

    A file whose (size, mtime_ns, inode) matches the cache sidecar is not read again.
    """
    files, problems = walk(directory)
    cache = load_cache(directory) if use_cache else {}
    out: dict[str, dict] = {}
    entries: dict[str, dict] = {}
    hashed = cached = 0
    for rel in files:
        full = os.path.join(directory, rel)
        st = os.stat(full)
        key = cache_key(st)
        hit = cache.get(rel)
        if isinstance(hit, dict) and hit.get("key") == key and isinstance(hit.get("sha256"), str):
            digest = hit["sha256"]
            cached += 1
        else:
            digest = hasher(full)
            hashed += 1
        out[rel] = {"size": st.st_size, "sha256": digest}
        entries[rel] = {"key": key, "sha256": digest}
    if use_cache and write_cache and (hashed or set(cache) != set(entries)):
        save_cache(directory, entries)
    return {"files": out, "problems": problems, "hashed": hashed, "cached": cached}


def remember(directory: str, rel: str, digest: str) -> None:
    """Record a file's hash in the cache after writing it (so the next inspect does not read it again)."""
    cache = load_cache(directory)
    try:
        cache[rel] = {"key": cache_key(os.stat(os.path.join(directory, rel))), "sha256": digest}
    except OSError:
        return
    save_cache(directory, cache)


# --------------------------------------------------------------------------- completeness and diffs

def completeness(directory: str, files: t.Iterable[str]) -> list[str]:
    """Why the model in DIRECTORY (with FILES) is not complete: nothing when it looks complete.

    Complete means: a ``config.json``, at least one weight file, every shard named by a ``*.index.json``
    weight map present, and no unfinished Hugging Face download (``.cache/huggingface/download/*.incomplete``).
    """
    present = set(files)
    missing = []
    if not os.path.isdir(directory):
        return [f"{directory} does not exist"]
    if "config.json" not in present:
        missing.append("config.json")
    if not any(f.endswith(WEIGHT_SUFFIXES) for f in present):
        missing.append("weight files (*.safetensors, *.bin, *.gguf ...)")
    for index in sorted(f for f in present if f.endswith(".index.json")):
        try:
            with open(os.path.join(directory, index), encoding="utf-8") as fh:
                weight_map = json.load(fh).get("weight_map") or {}
        except (OSError, ValueError, AttributeError):
            missing.append(f"a readable {index}")
            continue
        base = os.path.dirname(index)
        for shard in sorted(set(weight_map.values())):
            rel = os.path.join(base, shard) if base else shard
            if rel not in present:
                missing.append(rel)
    downloads = os.path.join(directory, ".cache", "huggingface", "download")
    if os.path.isdir(downloads):
        for current, _dirs, names in os.walk(downloads):
            for name in names:
                if name.endswith(".incomplete"):
                    missing.append(f"unfinished download {os.path.relpath(os.path.join(current, name), directory)}")
    return missing


COMMIT_RE = re.compile(r"[0-9a-f]{40}")


def judge(directory: str, names: t.Iterable[str], revision: str = "") -> tuple[list[str], dict]:
    """Why the model in DIRECTORY (holding NAMES) is not complete or not REVISION (nothing when it is), and what it
    says about its revision (:func:`revision_of`)."""
    missing = completeness(directory, names)
    found = revision_of(directory)
    other = revision_mismatch(revision, found)
    if other:
        missing.append(other)
    return missing, found


def revision_of(directory: str) -> dict:
    """What DIRECTORY says about its revision: the revision the collection recorded (``recorded``, None when none) and
    the commits Hugging Face's CLI noted per file in ``.cache/huggingface/download/*.metadata`` (``commits``, sorted;
    the first line of each is the commit the file came from)."""
    recorded = None
    try:
        with open(os.path.join(directory, REVISION_NAME), encoding="utf-8") as fh:
            recorded = fh.read(256).strip() or None
    except OSError:
        pass
    commits = set()
    downloads = os.path.join(directory, ".cache", "huggingface", "download")
    for current, _dirs, names in os.walk(downloads):
        for name in names:
            if not name.endswith(".metadata"):
                continue
            try:
                with open(os.path.join(current, name), encoding="utf-8") as fh:
                    first = fh.readline().strip()
            except OSError:
                continue
            if COMMIT_RE.fullmatch(first):
                commits.add(first)
    return {"recorded": recorded, "commits": sorted(commits)}


def revision_mismatch(wanted: str, found: dict) -> str | None:
    """Why a copy described by FOUND (:func:`revision_of`) is not revision WANTED, or None when it is (or when no
    revision is asked for). A commit hash matches the recorded revision or Hugging Face's own per-file commits (all of
    them); a branch or tag name only matches the recorded one, since it cannot be resolved offline."""
    if not wanted:
        return None
    if found["recorded"] == wanted:
        return None
    if COMMIT_RE.fullmatch(wanted) and found["commits"] == [wanted]:
        return None
    have = found["recorded"] or (", ".join(c[:12] for c in found["commits"]) if found["commits"] else None)
    return f"revision {wanted} (this copy is {'revision ' + have if have else 'of an unknown revision'})"


def diff(source: dict[str, dict], target: dict[str, dict]) -> tuple[list[str], list[str]]:
    """Paths to send (absent or different on the target) and paths only the target has, both sorted."""
    send = sorted(rel for rel, meta in source.items()
                  if rel not in target or target[rel].get("size") != meta["size"]
                  or target[rel].get("sha256") != meta["sha256"])
    extra = sorted(rel for rel in target if rel not in source)
    return send, extra


def total_bytes(files: dict[str, dict], paths: t.Iterable[str] | None = None) -> int:
    return sum(int(files[p]["size"]) for p in (files if paths is None else paths))


# --------------------------------------------------------------------------- download

# Where a container download finds the token file (read-only bind mount), and the variables that would carry the
# token itself (refused: ps, -vvv and docker inspect show an environment).
CONTAINER_TOKEN_PATH = "/run/dgxspark/hf_token"
SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
# With a token, the download runs under this script, which removes the token file on the node when the CLI ends,
# whatever its result, even if the controller that started it is gone (security review L5: the play's own removal, in
# an always section, never runs when the controller is killed or cut off during an hour's download). Its arguments
# are the token file, then the CLI's argv: nothing of the inventory is ever part of the script.
REMOVE_TOKEN_AFTER = 'token=$1; shift; "$@"; rc=$?; rm -f -- "$token"; exit "$rc"'


def _removing_token(token_file: str, argv: list[str]) -> list[str]:
    return ["/bin/sh", "-c", REMOVE_TOKEN_AFTER, "dgxspark-hf-download", token_file, *argv]


def download_command(model: str, local_dir: str, *, where: str = "host", cli: str = "hf", image: str = "",
                     revision: str = "", include: list[str] | None = None, exclude: list[str] | None = None,
                     token_file: str = "", docker: str = "docker", container_models_dir: str = "/models",
                     extra_env: dict | None = None) -> dict:
    """The argv (no shell) and environment of a Hugging Face download of MODEL into LOCAL_DIR.

    ``where=host`` runs CLI on the node; ``where=container`` runs it in IMAGE with LOCAL_DIR's parent mounted.
    CLI ``hf`` (huggingface_hub >= 0.34) or ``huggingface-cli`` (older) take the same ``download`` arguments.
    The token is never in the argv nor in an environment: TOKEN_FILE names a root-only file on the node that holds
    it, and the CLI reads it through ``HF_TOKEN_PATH`` (huggingface_hub's ``constants.HF_TOKEN_PATH``, honoured by
    every release that has ``hf``). Ansible puts a task's ``environment:`` on the remote command line (``ps``,
    ``-vvv``) and ``docker run -e NAME`` copies the value into ``docker inspect``'s Config.Env; a path in either
    is harmless. In a container the file is mounted read-only at :data:`CONTAINER_TOKEN_PATH`. With a token, the
    argv is :data:`REMOVE_TOKEN_AFTER`'s, which runs the download and then removes TOKEN_FILE on the node.
    """
    if where not in ("host", "container"):
        raise ValueError(f"where must be host or container, not {where!r}")
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$", model or ""):
        raise ValueError(f"{model!r} is not a Hugging Face repository id (org/name)")
    if not local_dir.startswith("/"):
        raise ValueError(f"local_dir must be absolute, not {local_dir!r}")
    if token_file and not token_file.startswith("/"):
        raise ValueError(f"token_file must be an absolute path on the node, not {token_file!r}")
    env = {"HF_HUB_DISABLE_TELEMETRY": "1"}
    env.update(extra_env or {})
    for name in SECRET_ENV:
        if name in env:
            raise ValueError(f"{name} must not be in the environment (ps, -vvv and docker inspect show it): "
                             "give the token as a file (token_file)")
    if token_file:
        env["HF_TOKEN_PATH"] = token_file if where == "host" else CONTAINER_TOKEN_PATH
    dest = local_dir
    if where == "container":
        if not image:
            raise ValueError("a container download needs an image")
        parent = os.path.dirname(local_dir.rstrip("/"))
        dest = container_models_dir.rstrip("/") + "/" + os.path.basename(local_dir.rstrip("/"))
    args = [cli, "download", model, "--local-dir", dest]
    if revision:
        args += ["--revision", revision]
    for pattern in include or []:
        args += ["--include", pattern]
    for pattern in exclude or []:
        args += ["--exclude", pattern]
    if where == "host":
        return {"argv": _removing_token(token_file, args) if token_file else args, "environment": env}
    # No capability is needed to fetch files over HTTPS and write them into a root-owned directory.
    argv = [docker, "run", "--rm", "--network", "host", "--cap-drop", "ALL", "--entrypoint", cli]
    for name in sorted(env):
        argv += ["-e", name]  # by name: the value comes from docker's own environment, never the argv
    argv += ["-v", f"{parent}:{container_models_dir.rstrip('/')}"]
    if token_file:
        argv += ["-v", f"{token_file}:{CONTAINER_TOKEN_PATH}:ro"]
    argv += [image] + args[1:]
    return {"argv": _removing_token(token_file, argv) if token_file else argv, "environment": env}


# --------------------------------------------------------------------------- accounting

# --------------------------------------------------------------------------- the source side of model_sync

def plan(source: dict[str, dict], targets: list[dict], answers: dict[str, dict], min_free_bytes: int,
         delete_extra: bool) -> tuple[list[dict], list[str]]:
    """Per target: ``skip`` (identical) or ``sync`` (files to send, extra files to delete); and disk errors.

    A target needs the size of every file it gets free (each file is written beside the old one and renamed),
    plus MIN_FREE_BYTES.
    """
    entries, disk_errors = [], []
    for target in targets:
        name = target["name"]
        answer = answers[name]
        have = answer.get("files") or {}
        send, extra = diff(source, have)
        delete = extra if delete_extra else []
        need = total_bytes(source, send)
        entry = {"name": name, "host": target["host"], "port": target.get("port", 22), "path": answer.get("path"),
                 "files": send, "extra": extra, "delete": delete, "bytes": need, "need_bytes": 0,
                 "free_bytes": answer.get("free_bytes"), "seconds": 0.0, "mb_per_s": 0.0, "deleted": []}
        if not send and not delete:
            entry["action"] = "skip"
            entry["reason"] = "same manifest" + (f" ({len(extra)} extra file(s) kept)" if extra else "")
        else:
            entry["action"] = "sync"
            missing = sum(1 for p in send if p not in have)
            entry["reason"] = (f"{missing} file(s) missing, {len(send) - missing} different"
                               + (f", {len(delete)} extra to delete" if delete else ""))
            entry["need_bytes"] = need + min_free_bytes if send else 0
            free = int(answer.get("free_bytes") or 0)
            if send and free < entry["need_bytes"]:
                disk_errors.append(f"{name}: {human(free)} free for {answer.get('path')}, but the files need "
                                   f"{human(entry['need_bytes'])} ({human(need)} + {human(min_free_bytes)} headroom)")
        entries.append(entry)
    return entries, disk_errors


def stream_files(source: dict[str, dict], entries: list[dict]) -> list[dict]:
    """The files of one relay stream: every file any of ENTRIES needs, in a stable order, with size and sha256."""
    wanted = set()
    for entry in entries:
        wanted.update(entry["files"])
    return [{"path": p, "size": int(source[p]["size"]), "sha256": source[p]["sha256"]} for p in sorted(wanted)]


def receive_header(model: str, files: list[dict], entries: list[dict], protocol: int = 2) -> dict:
    """The files_receive header of a chain: the first entry receives, the rest are its ``next`` hops."""
    first, rest = entries[0], entries[1:]
    return {"v": protocol, "op": "files_receive", "name": first["name"], "model": model, "files": files,
            "want": list(first["files"]), "delete": list(first["delete"]),
            "next": [{"host": e["host"], "port": e.get("port", 22), "name": e["name"], "want": list(e["files"]),
                      "delete": list(e["delete"])} for e in rest]}


def inspect_header(model: str, protocol: int = 2) -> dict:
    return {"v": protocol, "op": "files_inspect", "model": model}


def file_frames(directory: str, files: list[dict], chunk: int = 1 << 20) -> t.Iterator[bytes]:
    """The framed stream of FILES read from DIRECTORY (frames never cross a file), ending with the end mark.

    Raises OSError when a file is shorter than its manifest says (it changed during the run).
    """
    total = 0
    for entry in files:
        remaining = entry["size"]
        with open(os.path.join(directory, entry["path"]), "rb") as fh:
            while remaining > 0:
                data = fh.read(min(chunk, remaining))
                if not data:
                    raise OSError(f"{entry['path']} is shorter than its manifest says; it changed during the sync")
                remaining -= len(data)
                total += len(data)
                yield frame(data)
    yield end_mark(total)
