#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.model_sync."""

from __future__ import annotations

DOCUMENTATION = r"""
module: model_sync
short_description: Make a model directory identical on other nodes, sending only the files that differ over the fabric
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the B(source) node, the one that has the weights under O(models_dir)/O(model) (typically a pair's head),
    and makes the same files present under the same model directory on every node of O(targets), over SSH on the
    fabric network. Nothing passes through the controller.
  - The targets must trust the fleet's transfer key (role C(dgxspark.vllm.node_trust)), whose forced command on every
    node is the collection's transfer program (protocol 2). On a target, model files are only read and written under
    the models root of that program's configuration (C(node_trust_models_root)); O(model) is relative to it.
  - B(Identity.) A manifest (relative path, size, sha256 of every regular file) of the source directory is compared
    with each target's, which the targets compute themselves. Hashes are cached beside the files in
    C(.dgxspark-manifest.json), keyed by size, modification time and inode, so a rerun reads nothing that did not
    change. A target whose manifest equals the source's is skipped and nothing is sent to it.
  - B(Disk preflight.) A target must have the size of the files it gets plus O(min_free_bytes) free, as every file is
    written beside the old one before it replaces it. Otherwise the module fails naming each such node, and nothing is
    sent.
  - B(Transfer.) The files that differ are streamed once, in frames, into a relay chain of the targets that need
    them. Each target writes the files it needs to hidden part files while forwarding the stream to the next, checks
    every file's sha256, and only when the whole stream has arrived and every file verified renames them into place.
    A cut stream, a wrong hash, a full disk or a signal removes the part files and leaves the existing files as they
    were; a rerun completes the transfer. Files the source does not have are kept unless O(delete_extra=true).
  - Every target that received files is inspected again and must then have the source's manifest.
  - B(Cancellation.) When the controller's connection to the source closes (the play was interrupted with Ctrl-C or
    C(SIGTERM), or lost its connection), the module cuts its stream. Every receiver removes its part files, releases
    its lock and leaves the existing files as they were, and the module fails with a result starting with
    C(cancelled).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.transfer
attributes:
  check_mode:
    support: full
    details: Asks the targets for their manifests and reports per target which files would move, and their bytes.
  diff_mode:
    support: full
    details: Per target, the sha256 of every file that differs (or would be deleted), before and after.
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
requirements:
  - the OpenSSH client on the source and the targets (the relay runs C(ssh) to the next target)
options:
  model:
    description:
      - The model's directory, relative to O(models_dir) on the source and to the models root of the transfer program
        on the targets (for example C(Qwen3.5-122B-A10B-FP8)). Plain relative path components only.
    type: str
    required: true
  models_dir:
    description: The directory holding the models on the source.
    type: path
    default: /srv/dgxspark/models
  delete_extra:
    description:
      - Remove files from a target's model directory that the source does not have. Off by default, so that files
        added on a node by hand are never lost.
    type: bool
    default: false
  plan:
    description:
      - Ask the targets and report what would move, as check mode does, but keep the source's hash cache (bookkeeping,
        so the run that follows does not hash the model again) and return RV(manifest), which the controller
        announces to the targets (M(dgxspark.vllm.transfer_announce)) before it runs the module again to send. Never
        C(changed).
    type: bool
    default: false
  check_source:
    description:
      - First look whether the source's copy is complete (as M(dgxspark.vllm.model_manifest) tells it, of
        O(revision) when one is given) and return the answer in RV(source_complete) and RV(source_missing). When it
        is not complete, nothing else is done (no target is asked, no file hashed) and the module does not fail. With
        no O(targets), nothing else is done either. The P(dgxspark.vllm.model_sync#role) role asks this and what would
        move in one call.
    type: bool
    default: false
    version_added: 0.2.0
  revision:
    description: With O(check_source), the revision the source's copy must be (empty accepts any).
    type: str
    default: ""
    version_added: 0.2.0
  min_free_bytes:
    description: Bytes that must remain free on a target once the files it gets are written.
    type: int
    default: 1073741824
  timeout:
    description:
      - Seconds the whole run may take (the targets' first manifests hash every file, about 1 GB/s), from the
        targets' manifests to the check after the transfer, every phase within the one deadline.
      - When the transfer exceeds it the stream is cut, which leaves the targets' files as they were.
    type: int
    default: 7200
notes:
  - C(changed) is true only when bytes moved or files were deleted.
  - Part files of a receiving process killed with C(SIGKILL) stay hidden (C(.NAME.dgxspark-part)) and are not part of
    any manifest; the next transfer into that model directory removes them before it writes, and the disk preflight
    counts their bytes as free.
  - A receiver that gets no byte for the C(idle_timeout) of its transfer program's configuration (60 s by default)
    aborts the same way and releases its lock, so a silent sender does not block later syncs.
seealso:
  - module: dgxspark.vllm.model_manifest
  - module: dgxspark.vllm.image_sync
"""

EXAMPLES = r"""
- name: Make the weights identical on the worker of this pair (run on the head)
  dgxspark.vllm.model_sync:
    model: Qwen3.5-122B-A10B-FP8
    models_dir: /srv/dgxspark/models
    targets:
      - {host: 192.168.100.12, name: spark-2}
  register: synced

- name: Show which files would move
  dgxspark.vllm.model_sync:
    model: Qwen3.5-122B-A10B-FP8
    targets: [{host: 192.168.100.12, name: spark-2}]
  check_mode: true
  diff: true
"""

RETURN = r"""
moving:
  description: Whether files would move (check mode and O(plan=true)); false when O(check_source) ended the run early.
  returned: in check mode, with O(plan=true), and with O(check_source)
  type: bool
  sample: true
manifest:
  description: The source's files (relative path to C(size) and C(sha256)), what the targets are to be told they may hold.
  returned: with O(plan=true) when files would move
  type: dict
  sample: {config.json: {size: 4211, sha256: 9f2c0e5b8d7a1c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e}}
source_complete:
  description: Whether the source's copy is complete (and of O(revision)).
  returned: with O(check_source)
  type: bool
  sample: true
source_missing:
  description: What the source's copy lacks (see RV(dgxspark.vllm.model_manifest#module:missing)); empty when complete.
  returned: with O(check_source)
  type: list
  elements: str
  sample: ["model-00003-of-00052.safetensors (named by model.safetensors.index.json)"]
path:
  description: The model directory on the source.
  returned: always
  type: str
  sample: /srv/dgxspark/models/Qwen3.5-122B-A10B-FP8
source:
  description: The source's manifest summary (C(files), C(bytes)) and how many files were hashed or taken from the cache.
  returned: always
  type: dict
  sample: {files: 52, bytes: 125112061952, hashed: 0, cached: 52}
targets:
  description:
    - One entry per target, in the order given. C(action) is V(skip) (same manifest), V(sync) or V(failed) (with C(error)).
    - C(files) the files sent (or that would be), C(bytes) their bytes, C(seconds) and C(mb_per_s) the target's
      receive; C(extra) the files only the target has, C(deleted) those removed; C(reason) why the action was chosen.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: spark-2, host: 192.168.100.12, action: sync, files: [model-00003-of-00040.safetensors], bytes: 3221225472,
       seconds: 4.1, mb_per_s: 785.7, extra: [], deleted: [], reason: "0 file(s) missing, 1 different"}
bytes_sent:
  description: Bytes the source read and sent (once per chain; C(0) when nothing moved).
  returned: always
  type: int
  sample: 3221225472
seconds:
  description: Wall time of the transfer phase.
  returned: always
  type: float
  sample: 4.3
elapsed:
  description: Wall time of the whole run, manifests included.
  returned: always
  type: float
  sample: 5.1
table:
  description: A per-node summary (node, action, files, bytes, seconds, MB/s), one line per entry.
  returned: always
  type: list
  elements: str
  sample: ["node                 action    files          bytes  seconds     MB/s"]
"""

import os
import threading
import time
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import _model_files as mf
from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import (
    FRAME, TRANSFER_ARGUMENT_SPEC, Cancel, ControllerWatch, Hop, ask_all, chain_results, ssh_argv, table,
)

PROTOCOL = 2


def answer_problem(name: str, answer: dict | None, err: str) -> str | None:
    """Why a files_inspect answer cannot be used, or None."""
    if answer is None:
        return f"{name}: {err or 'no answer'}"
    if not answer.get("ok"):
        why = answer.get("error") or err or "no answer"
        if "unsupported request" in why or "unknown operation" in why:
            why += " (its transfer program predates model files: rerun the dgxspark.vllm.node_trust role)"
        return f"{name}: {why}"
    if not isinstance(answer.get("protocol"), int) or answer["protocol"] < PROTOCOL:
        return f"{name}: its transfer program speaks protocol {answer.get('protocol')}, this module needs {PROTOCOL}"
    return None


def file_diff(entries: list[dict], source: dict[str, dict], answers: dict[str, dict]) -> dict:
    """Per target, the sha256 of every file that differs, before and after (None: absent)."""
    before, after = {}, {}
    for e in entries:
        have = answers.get(e["name"], {}).get("files") or {}
        before[e["name"]] = {p: (have.get(p) or {}).get("sha256") for p in e["files"] + e["delete"]}
        after[e["name"]] = {p: (source[p]["sha256"] if p in source else None) for p in e["files"] + e["delete"]}
    return {"before": before, "after": after}


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            **TRANSFER_ARGUMENT_SPEC,
            "model": {"type": "str", "required": True},
            "models_dir": {"type": "path", "default": "/srv/dgxspark/models"},
            "delete_extra": {"type": "bool", "default": False},
            "plan": {"type": "bool", "default": False},
            "check_source": {"type": "bool", "default": False},
            "revision": {"type": "str", "default": ""},
            "min_free_bytes": {"type": "int", "default": 1073741824},
            "timeout": {"type": "int", "default": 7200},
        },
        supports_check_mode=True,
    )
    began = time.monotonic()
    p = module.params
    deadline = began + p["timeout"]

    def remaining() -> float:
        """Seconds left of the run's one deadline (every phase gets what the earlier ones left; at least 1)."""
        return max(1.0, deadline - time.monotonic())

    hops = []  # the stream's Hop, killed when the controller is gone
    cancel = Cancel(lambda: [hop.kill() for hop in list(hops)])
    watch = ControllerWatch(cancel.lost, stdout=True)
    watch.start()
    targets = [{"host": t["host"], "name": t.get("name") or t["host"], "port": t.get("port") or 22} for t in p["targets"]]
    names = [t["name"] for t in targets]
    if len(set(names)) != len(names):
        module.fail_json(msg=f"targets must have distinct names (got {', '.join(names)})")
    try:
        directory = mf.model_dir(p["models_dir"], p["model"])
    except mf.PathError as exc:
        module.fail_json(msg=f"model: {exc}")
    result = {"changed": False, "path": directory, "bytes_sent": 0, "seconds": 0.0, "targets": []}

    def fail(msg: str, **extra) -> None:
        watch.stop()
        cancel.stop()
        if cancel.reason:
            msg = f"{cancel.reason}; {msg}"
        result["elapsed"] = round(time.monotonic() - began, 3)
        module.fail_json(msg=msg, **result, **extra)

    if p["check_source"]:
        # the cheap look first (names, no hashing): an incomplete copy is downloaded before anything is asked
        missing = (mf.judge(directory, mf.walk(directory)[0], p["revision"])[0] if os.path.isdir(directory)
                   else [f"{directory} does not exist"])
        result.update(source_complete=not missing, source_missing=missing)
        if missing or not targets:
            watch.stop()
            result["moving"] = False
            result["elapsed"] = round(time.monotonic() - began, 3)
            module.exit_json(**result)
    if not os.path.isdir(directory):
        fail(f"{directory} does not exist on the source: download the model there first (role dgxspark.vllm.model_sync)")
    for path in (p["ssh_key"], p["known_hosts"]):
        if targets and not os.path.exists(path):
            fail(f"{path} does not exist on the source: set up the fleet's transfer trust first "
                 "(role dgxspark.vllm.node_trust)")
    try:
        found = mf.manifest(directory, write_cache=not module.check_mode)
    except OSError as exc:
        fail(f"reading {directory} on the source failed: {exc}", exception=traceback.format_exc())
    source = found["files"]
    for problem in found["problems"]:
        module.warn(f"{directory}: {problem}; not synced")
    if not source:
        fail(f"{directory} on the source holds no files")
    result["source"] = {"files": len(source), "bytes": mf.total_bytes(source), "hashed": found["hashed"],
                        "cached": found["cached"]}

    def argv_of(target: dict) -> list[str]:
        return ssh_argv(target, p["ssh_key"], p["known_hosts"], p["ssh_user"], p["connect_timeout"])

    # 1. every target's manifest, in parallel
    answers, unusable = {}, []
    for name, (answer, err) in ask_all(targets, mf.inspect_header(p["model"], PROTOCOL), argv_of, remaining()).items():
        problem = answer_problem(name, answer, err)
        if problem:
            unusable.append(problem)
        else:
            answers[name] = answer
    if cancel.reason:
        fail("nothing was sent to any node")
    if unusable:
        fail("cannot ask every target for its manifest of the model over the fabric (is the fleet's transfer trust set "
             "up and up to date? role dgxspark.vllm.node_trust): " + " | ".join(unusable))
    for name, answer in answers.items():
        for problem in answer.get("problems") or []:
            module.warn(f"{name}: {problem}")
    entries, disk_errors = mf.plan(source, targets, answers, p["min_free_bytes"], p["delete_extra"])
    result["targets"] = entries
    result["diff"] = file_diff(entries, source, answers)
    if disk_errors:
        fail("not enough disk space for the model's files; nothing was sent to any node: " + " | ".join(disk_errors))
    moving = [e for e in entries if e["action"] == "sync"]
    result["changed"] = bool(moving)
    if p["plan"] and moving:
        # What the controller announces to the targets before the real run (dgxspark.vllm.transfer_announce).
        result["manifest"] = {path: {"size": meta["size"], "sha256": meta["sha256"]} for path, meta in source.items()}
    if module.check_mode or p["plan"] or not moving:
        watch.stop()
        result["moving"] = bool(moving)
        if p["plan"]:
            result["changed"] = False
        result["table"] = table(entries, files=True)
        result["elapsed"] = round(time.monotonic() - began, 3)
        module.exit_json(**result)
    if cancel.reason:
        fail("nothing was sent to any node")

    # 2. one stream through a chain of the targets that need something
    files = mf.stream_files(source, moving)
    header = mf.receive_header(p["model"], files, moving, PROTOCOL)
    started = time.monotonic()
    hop = Hop(argv_of(moving[0]), header, [e["name"] for e in moving])
    hops.append(hop)
    if cancel.reason:
        hop.kill()  # started while the watch was cancelling
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        hop.kill()

    watchdog = threading.Timer(remaining(), expire)
    watchdog.daemon = True
    watchdog.start()
    read_error = None
    try:
        for data in mf.file_frames(directory, files):
            hop.write(data)
            if not hop.alive:
                break
            result["bytes_sent"] += len(data) - FRAME.size
        hop.finish(remaining())
    except OSError as exc:
        read_error = f"reading the model's files on the source failed: {exc}"
        hop.kill()
        hop.finish(10)
    finally:
        watchdog.cancel()
    result["bytes_sent"] = max(0, min(result["bytes_sent"], mf.total_bytes({f["path"]: f for f in files})))
    result["seconds"] = round(time.monotonic() - started, 3)
    for e in moving:
        answer = chain_results([(hop, moving)])[e["name"]]
        e["bytes"] = int(answer.get("bytes") or 0)
        e["seconds"] = float(answer.get("seconds") or 0.0)
        e["mb_per_s"] = round(e["bytes"] / e["seconds"] / 1e6, 1) if e["seconds"] > 0 else 0.0
        e["deleted"] = list(answer.get("deleted") or [])
        if not answer.get("ok"):
            e["action"] = "failed"
            e["error"] = read_error or answer.get("error") or "failed"
            if timed_out.is_set():
                e["error"] = f"the transfer exceeded timeout={p['timeout']}s and was cut; " + e["error"]
    if cancel.reason:
        for e in moving:
            e["action"], e["error"] = "failed", "cancelled; its receiver removed its part files"
        result["table"] = table(entries, files=True)
        fail("the stream was cut, so every target removed its part files and kept its existing files; rerun to "
             "transfer")

    # 3. every target that received files must now have the source's manifest
    after = ask_all(moving, mf.inspect_header(p["model"], PROTOCOL), argv_of, remaining())
    for e in moving:
        answer, err = after[e["name"]]
        problem = answer_problem(e["name"], answer, err)
        if problem:
            if e["action"] != "failed":
                e["action"], e["error"] = "failed", f"could not verify: {problem}"
            continue
        send, extra = mf.diff(source, answer.get("files") or {})
        e["extra"] = extra
        if e["action"] != "failed" and (send or (p["delete_extra"] and extra)):
            e["action"] = "failed"
            e["error"] = f"after the transfer {len(send)} file(s) still differ ({', '.join(send[:3])})"
    result["changed"] = any(e["bytes"] > 0 or e["deleted"] for e in entries)
    result["table"] = table(entries, files=True)
    failed = [e for e in entries if e["action"] == "failed"]
    if failed:
        fail(f"{p['model']} did not reach every target (their existing files are unchanged; rerun to complete): "
             + " | ".join(f"{e['name']}: {e['error']}" for e in failed))
    watch.stop()
    result["elapsed"] = round(time.monotonic() - began, 3)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
