#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.image_sync."""

from __future__ import annotations

DOCUMENTATION = r"""
module: image_sync
short_description: Make a Docker image present and identical on other nodes, streamed node to node over the fabric
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the B(source) node, the one that has O(image) (typically a pair's head), and makes the same image present
    under the same name on every node of O(targets), over SSH on the fabric network. Nothing passes through the controller.
  - The targets must trust the fleet's transfer key (role C(dgxspark.vllm.node_trust)), whose forced command on every
    node is the collection's transfer program. It answers C(inspect), C(tag) and C(receive) requests and nothing else.
  - B(Identity first.) Each target is asked (in parallel) which image O(image) is there. Image IDs are compared when both
    engines use the same image store (graph driver or containerd, from C(docker info)). Between stores, where the IDs
    differ, the C(org.dgxspark.vllm.content) label decides, then the content fingerprint (a digest of the layers' diff
    IDs, the creation time, the platform and the run configuration, which both stores show alike), then the repo
    digests; without any the IDs are compared with a warning. An identical target is skipped, and for a skipped target nothing is read from the source. A target
    that has the image under another name only gets the tag moved (no bytes).
  - B(Layer delta.) The targets also say how many of the image's layers they hold already, from the base up (the
    layers of any of their images; a rollout's new overlay shares all but its top layers with the release before it).
    With O(delta) the stream leaves out the layer blobs every transferring target holds, and Docker's load, which reads
    a layer only when its chain is not on the node, builds the same image (verified after the load as always). This
    takes the OCI layout C(docker save) writes from Docker 25 on, where a layer kept uncompressed (as a graph driver
    keeps them) is named by its diff ID; from an older engine the archive passes whole, and from a source with the
    containerd store, which keeps layers compressed, it seldom applies. A target with
    the containerd image store always gets the whole archive (its load looks for a left-out layer in its content
    store, which need not keep it). C(delta) in the result says what was left out.
  - B(Disk preflight.) Every target that needs the image must have the image size (twice that for the containerd
    store) plus O(min_free_bytes) free on its Docker root. Otherwise the module fails naming each such node with its
    free space, and nothing is sent to any target.
  - B(Transfer.) The image is saved by ID (so the archive carries no tag) from the source's engine with the docker SDK
    and streamed straight into the targets' engines, in frames of 1 MiB. SSH prefers the AES-GCM ciphers, which cost
    far less CPU than OpenSSH's default where the CPU has AES instructions. With O(strategy=relay) (the default) the
    targets form a chain.
    The source sends the image once to the first target, which loads it while forwarding the same stream to the next,
    and so on. The source's read and send cost therefore does not grow with the number of targets. With
    O(strategy=parallel) the source reads the image once and sends it to every target directly.
  - B(Verification and safety.) The stream is framed and ends with a byte count, so a target can tell a complete
    stream from a cut one. A cut stream aborts the load and creates no image. After a load, the loaded image ID must
    equal the ID the controller announced to that target (between stores, the loaded image must carry the announced
    content label, or else the announced content fingerprint; with neither, the load is refused). Nothing the sender
    says counts. Only then is O(image) moved to it. A load that changed any tag (an archive's own names) is undone and
    fails the transfer. A wrong image is removed again and the name is left
    where it was, so an interrupted or failed transfer never changes the target's existing tags, and a rerun
    completes it. After the transfer, where O(image) points is checked again on
    every target, as its transfer program reports it at the end of the receive, or with a new inspect request when a
    target gave no such report (a cut stream, an older transfer program).
  - B(Cancellation.) With O(lease_file), a run started in the background (C(async), C(poll=0)) goes on only while its
    follower (M(dgxspark.vllm.image_sync_wait)) renews the lease. When nobody renewed it for O(lease_timeout) seconds
    (the play was interrupted or lost its connection), the module kills its streams to the targets, whose receivers
    then abort their loads (no image, no tag changed), removes its temporary file and fails with a result starting
    with C(cancelled:). Run in the foreground, the module cancels itself the same way when the controller's
    connection to the source closes.
  - Reports bytes, seconds and MB/s per target. With O(status_file), progress (bytes, rate, percent) is written to a
    JSON file on the source about every second, so that a play running the module with C(async) can show it.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.transfer
attributes:
  check_mode:
    support: full
    details: Asks the targets and reports per target whether it would be skipped, tagged or transferred, with the bytes.
  diff_mode:
    support: full
    details: The image ID under O(image) on every target, before and after.
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
requirements:
  - docker SDK for Python (Debian/Ubuntu C(python3-docker)) on the source and on every target
  - the OpenSSH client on the source and the targets (the relay runs C(ssh) to the next target)
options:
  image:
    description:
      - The image on the source, as C(repository[:tag]) (the tag defaults to C(latest)) or as an image ID C(sha256:...).
      - With a name, the same name points to the same image on every target afterwards; with an ID, the image is only
        made present (no tag).
    type: str
    required: true
  min_free_bytes:
    description:
      - Bytes that must remain free on a target's Docker root once the image is loaded (headroom).
    type: int
    default: 5368709120
  strategy:
    description:
      - V(relay) streams through a chain of the targets (each loads while forwarding), so the source sends the image once.
      - V(parallel) sends a copy to every target straight from the source (one read, one stream per target).
    type: str
    choices: [relay, parallel]
    default: relay
  timeout:
    description: Seconds the whole transfer may take; when exceeded the streams are cut, which leaves the targets as they were.
    type: int
    default: 3600
  delta:
    description:
      - Leave out of the stream the layers every transferring target holds already (see B(Layer delta) above).
      - V(false) always sends the whole archive.
    type: bool
    default: true
  tmp_tar:
    description:
      - Save the image to a temporary file in O(tmp_dir) first and stream from that file, instead of streaming from
        C(docker save) directly. The file is removed at the end.
    type: bool
    default: false
  tmp_dir:
    description: Directory for O(tmp_tar).
    type: path
    default: /var/tmp
  status_file:
    description:
      - A file on the source the module rewrites about every second with its progress as JSON (C(phase), C(bytes),
        C(expected_bytes), C(percent), C(seconds), C(mb_per_s), C(targets), C(done)), for a poller such as the
        C(dgxspark.vllm.image_sync) role. Not written when unset.
    type: path
  lease_file:
    description:
      - A file on the source whose modification time the run's follower renews (M(dgxspark.vllm.transfer_follow),
        run by M(dgxspark.vllm.image_sync_wait)); the module creates it at its start. Not renewed for
        O(lease_timeout) seconds, the run cancels itself and leaves every target as it was.
      - Unset, a background run is not tied to its controller; a run in the foreground always is (by its connection).
    type: path
  lease_timeout:
    description:
      - Seconds without a renewal of O(lease_file) after which the run cancels itself. The follower renews it every
        second, and at the end of each of its rounds 2 seconds ahead (for the gap to the next round); the run's first
        renewal reaches 10 seconds ahead (for the follower's start).
      - An interrupted play marks the lease cancelled (M(dgxspark.vllm.image_sync_wait) writes C(cancelled) into it
        and sets its time to the epoch, creating it if need be; a renewal under way cannot undo the written mark),
        and a run whose lease is marked, or was there and is gone, cancels itself at once (a run that finds it marked
        at its start sends nothing). So this bound applies to a play that was killed or lost its connection.
        A busy controller stretches the gap between rounds; too short a bound cancels healthy transfers.
    type: int
    default: 30
  docker_host:
    description: The source's Docker engine.
    type: str
    default: unix:///var/run/docker.sock
  nonce:
    description:
      - The nonce of the announcement the controller wrote on the targets (M(dgxspark.vllm.transfer_announce)), which
        every C(tag) and C(receive) request carries; a target refuses a request without it, and each announced
        reference serves one request.
      - Unset, the module makes a fresh one and returns it (RV(nonce)). The role runs the module in check mode, announces
        with the returned nonce, then runs it again with that nonce.
    type: str
    version_added: 0.5.0
notes:
  - Docker's own C(docker load) replaces a tag as soon as the archive names it (moby#35625); this module never ships a
    tag. It saves by image ID and tags on the target only after the loaded ID has been verified.
  - Layers that a cut load had already unpacked may stay in the target's layer store until Docker cleans them up; they
    are not an image and carry no tag.
  - C(changed) is true when bytes moved or a tag moved.
  - With O(tmp_tar), the temporary archive is named after the process (C(image_sync-PID-*.tar)); one left by a run
    that was killed (C(SIGKILL)) is removed by the next run.
seealso:
  - name: Docker image transfer integrity
    description: Repo digests are lost on save/load, and image IDs differ between the graph-driver and containerd stores.
    link: https://github.com/moby/moby/issues/22011
"""

EXAMPLES = r"""
- name: Make the serving image identical on the workers of this pair (run on the head)
  dgxspark.vllm.image_sync:
    image: vllm-node:latest
    targets:
      - {host: 192.168.100.11, name: spark-2}
  register: synced

- name: Fan out to three nodes through a relay chain, with progress in a file
  dgxspark.vllm.image_sync:
    image: vllm-node:latest
    targets:
      - {host: 192.168.100.11, name: spark-2}
      - {host: 192.168.100.12, name: spark-3}
      - {host: 192.168.100.13, name: spark-4}
    min_free_bytes: "{{ 20 * 1024 ** 3 }}"
    status_file: /run/dgxspark-image-sync.json
    lease_file: /run/dgxspark-image-sync.json.lease
  async: 3600
  poll: 0
  register: job

- name: Show what would move
  dgxspark.vllm.image_sync:
    image: vllm-node:latest
    targets: [{host: 192.168.100.11, name: spark-2}]
  check_mode: true
"""

RETURN = r"""
nonce:
  description: The announcement's nonce the run's requests carry (O(nonce), or a fresh one).
  returned: always
  type: str
  sample: 8c1f6b0e2d4a4f3e9b7c5a1d0e2f4a6b
  version_added: 0.5.0
image_id:
  description: The image's ID on the source.
  returned: always
  type: str
  sample: sha256:4c0b5f3c0e0f5ab1d62c1ab7e0e5bd1c6f2bb4e64f6b1f2ab6e0d1f2a3b4c5d6
source:
  description: The source engine's image store, the image's size (uncompressed bytes) and what identifies its content
    across image stores.
  returned: always
  type: dict
  sample: {store: graphdriver, size: 19327352832, content_label: null, repo_digests: [],
           fingerprint: "sha256:9e1c0a7f2b3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7"}
targets:
  description:
    - One entry per target, in the order given. C(action) is V(skip) (identical), V(tag) (only the tag moved),
      V(transfer) or V(failed) (with C(error)).
    - C(bytes), C(seconds) and C(mb_per_s) are what the target received and loaded (C(0) unless transferred);
      C(before_id)/C(after_id) the image ID under O(image) before and after; C(reason) why the action was chosen;
      C(free_bytes) and C(need_bytes) the disk preflight.
  returned: always
  type: list
  elements: dict
  sample:
    - {name: spark-2, host: 192.168.100.11, action: transfer, bytes: 19330000000, seconds: 21.4, mb_per_s: 903.3,
       before_id: null, after_id: "sha256:4c0b...", reason: "vllm-node:latest is not on spark-2"}
delta:
  description:
    - What the stream left out. C(layers) the image's layers, C(held) how many of them (from the base) every
      transferring target holds, C(left_out) the layer blobs left out and C(bytes_left_out) their bytes, C(archive)
      the source's archive layout (V(oci) from Docker 25 on, V(legacy) before, where nothing can be left out), C(reason) why
      nothing was left out where that is so.
  returned: when a target was transferred
  type: dict
  sample: {layers: 42, held: 40, left_out: 40, bytes_left_out: 19012345678, archive: oci, reason: null}
bytes_sent:
  description: Bytes the source read from its engine and sent (once per chain; C(0) when nothing moved).
  returned: always
  type: int
  sample: 19330000000
elapsed:
  description: Wall time of the whole module run, in seconds (identity checks included).
  returned: always
  type: float
  sample: 0.9
seconds:
  description: Wall time of the transfer phase.
  returned: always
  type: float
  sample: 21.9
table:
  description: A per-node summary (node, action, bytes, seconds, MB/s), one line per entry.
  returned: always
  type: list
  elements: str
  sample: ["node                 action             bytes  seconds     MB/s", "spark-2              skip                   0      0.0      0.0"]
"""

import os
import secrets
import tempfile
import threading
import time
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.dgxspark.vllm.plugins.module_utils import _docker
from ansible_collections.dgxspark.vllm.plugins.module_utils._announce import NONCE_RE, HostileArchive
from ansible_collections.dgxspark.vllm.plugins.module_utils._image_sync import (
    PROTOCOL, LayerFilter, chains, delta_plan, identity, inspect_header, plan, receive_header, tag_header,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import (
    CANCELLED, CHUNK, LEASE_START, LEASE_TIMEOUT, TRANSFER_ARGUMENT_SPEC, Cancel, ControllerWatch, Hop, IterReader, Progress, ask_all,
    chain_results,
    close_reader, image_summary, mb_per_s, process_alive, pump, read_full, renew, request, ssh_argv, store_of, table,
)

try:
    import docker
    from docker.errors import DockerException, ImageNotFound
except ImportError:
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None


TMP_PREFIX = "image_sync-"


def stale_tmp_tars(tmp_dir: str, alive=None) -> list[str]:
    """The temporary archives in TMP_DIR of runs whose process is gone (``image_sync-PID-*.tar``, PID not alive)."""
    alive = alive or process_alive
    stale = []
    try:
        names = os.listdir(tmp_dir)
    except OSError:
        return []
    for name in names:
        parts = name.split("-", 2)
        if (len(parts) == 3 and name.startswith(TMP_PREFIX) and name.endswith(".tar") and parts[1].isdigit()
                and int(parts[1]) != os.getpid() and not alive(int(parts[1]))):
            stale.append(os.path.join(tmp_dir, name))
    return sorted(stale)


def save_stream(api, image_id: str, tmp_tar: bool, tmp_dir: str, cancelled=lambda: False):
    """The archive of IMAGE_ID (no tags) as a reader with ``readinto``, and the temporary file to remove afterwards.

    The docker SDK yields the archive in pieces the size of the engine's HTTP chunks (32 KiB from Docker 20.10, whatever
    ``chunk_size`` says); :func:`pump` gathers them into frames of ``CHUNK``, so each hop handles 32 times fewer frames.
    With TMP_TAR the archive is saved to a file first; that stops (leaving the file to the caller) once CANCELLED().
    """
    reader = IterReader(api.get_image(image_id, chunk_size=CHUNK))
    if not tmp_tar:
        return reader, None
    fd, path = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", suffix=".tar", dir=tmp_dir)
    buf = memoryview(bytearray(CHUNK))
    with os.fdopen(fd, "wb") as fh:
        while not cancelled():
            got = read_full(reader, buf)
            if not got:
                break
            fh.write(buf[:got])
    return open(path, "rb"), path  # pylint: disable=consider-using-with  # closed by the caller


def delta_result(delta: dict, layers: list, reader, transfers: list, wanted: bool) -> dict:
    """The result's ``delta``: what the stream left out, or why nothing."""
    out = {"layers": len(layers), "held": delta["held"], "left_out": len(getattr(reader, "skipped", [])),
           "bytes_left_out": int(getattr(reader, "skipped_bytes", 0)), "archive": getattr(reader, "layout", None),
           "reason": None}
    if not wanted:
        out["reason"] = "delta=false"
    elif not delta["held"]:
        no_answer = [e["name"] for e in transfers if e.get("held") is None]
        containerd = [e["name"] for e in transfers if e.get("store") == "containerd"]
        out["reason"] = (f"{', '.join(containerd)} keeps images in the containerd store: the whole archive" if containerd
                         else f"{', '.join(no_answer)} did not say which layers it holds" if no_answer
                         else "a transferring target holds none of the image's layers")
    elif out["archive"] == "legacy":
        out["reason"] = "the source's engine writes the legacy archive layout (before Docker 25): it passes whole"
    elif not out["left_out"]:
        out["reason"] = "no layer blob of the archive is named by a held layer's digest (compressed layers)"
    return out


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            **TRANSFER_ARGUMENT_SPEC,
            "image": {"type": "str", "required": True},
            "min_free_bytes": {"type": "int", "default": 5368709120},
            "strategy": {"type": "str", "choices": ["relay", "parallel"], "default": "relay"},
            "timeout": {"type": "int", "default": 3600},
            "delta": {"type": "bool", "default": True},
            "tmp_tar": {"type": "bool", "default": False},
            "tmp_dir": {"type": "path", "default": "/var/tmp"},
            "status_file": {"type": "path"},
            "lease_file": {"type": "path"},
            "lease_timeout": {"type": "int", "default": LEASE_TIMEOUT},
            "docker_host": {"type": "str", "default": "unix:///var/run/docker.sock"},
            "nonce": {"type": "str"},
        },
        supports_check_mode=True,
    )
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib("docker (python3-docker)"), exception=DOCKER_IMPORT_ERROR)
    began = time.monotonic()
    p = module.params
    image = p["image"]
    targets = [{"host": t["host"], "name": t.get("name") or t["host"], "port": t.get("port") or 22,
                "cluster": t.get("cluster")} for t in p["targets"]]
    names = [t["name"] for t in targets]
    if len(set(names)) != len(names):
        module.fail_json(msg=f"targets must have distinct names (got {', '.join(names)})")
    for path in (p["ssh_key"], p["known_hosts"]):
        if targets and not os.path.exists(path):
            module.fail_json(msg=f"{path} does not exist on the source: set up the fleet's transfer trust first "
                                 "(role dgxspark.vllm.node_trust)")

    api = _docker.client(module, docker, p["docker_host"], timeout=max(60, p["timeout"]), low_level=True)
    try:
        source_attrs = api.inspect_image(image)
        source_store = store_of(api.info())
    except ImageNotFound:
        module.fail_json(msg=f"the image {image} is not on the source's engine ({p['docker_host']}); build or pull it "
                             "there first, or run the module on the node that has it")
    except DockerException as exc:
        module.fail_json(msg=f"cannot ask the source's Docker engine at {p['docker_host']}: {exc}",
                         exception=traceback.format_exc())
    source = image_summary(source_attrs)
    if p["nonce"] is not None and not NONCE_RE.match(p["nonce"]):
        module.fail_json(msg="nonce must be 32 to 128 lower-case hex digits, as the check run returned it")
    # The announcement's nonce: given, the one the controller announced with; a check run (or a run without one)
    # makes a fresh one and returns it, for the controller to announce with and to give the real run.
    nonce = p["nonce"] or secrets.token_hex(16)
    result = {"changed": False, "image_id": source["id"], "bytes_sent": 0, "seconds": 0.0, "nonce": nonce,
              "source": {"store": source_store, "size": source["size"], "content_label": source["content_label"],
                         "repo_digests": source["repo_digests"], "fingerprint": source["fingerprint"]}}
    if p["lease_file"] and not module.check_mode:
        # before the first progress: a follower that sees the run's progress and no lease knows it was removed
        if not renew(p["lease_file"], ahead=LEASE_START):  # the follower's first round starts after the job started
            module.fail_json(msg=f"{CANCELLED} before it started (its lease {p['lease_file']} was marked cancelled:"
                                 " the play was interrupted); nothing was sent", **result)
    progress = Progress(p["status_file"], source["size"], names)
    progress.set_phase("preflight")
    hops = []  # (Hop, chain) of the transfer, killed when the run is cancelled

    def kill_hops() -> None:
        for proc, _members in list(hops):
            proc.kill()

    def before_exit(msg: str) -> None:
        """The run is ended by its Cancel (stuck): its temporary archive and the status file's done mark."""
        mine = f"{TMP_PREFIX}{os.getpid()}-"
        for name in os.listdir(p["tmp_dir"]) if p["tmp_tar"] and os.path.isdir(p["tmp_dir"]) else []:
            if name.startswith(mine) and name.endswith(".tar"):
                os.unlink(os.path.join(p["tmp_dir"], name))
        progress.write(done=True, error=msg)

    cancel = Cancel(kill_hops, before_exit)
    # the run renewed (created) its lease above: gone at the watch's first look, it was removed by the follower
    watch = ControllerWatch(cancel.lost, lease=(p["lease_file"], p["lease_timeout"])
                            if p["lease_file"] and not module.check_mode else None, stdout=True, lease_seen=True)
    watch.start()

    def argv_of(target: dict) -> list[str]:
        return ssh_argv(target, p["ssh_key"], p["known_hosts"], p["ssh_user"], p["connect_timeout"])

    def fail(msg: str, **extra) -> None:
        watch.stop()
        cancel.stop()
        if cancel.reason:
            msg = f"{cancel.reason}; {msg}"
        result["elapsed"] = round(time.monotonic() - began, 3)
        progress.write(done=True, error=msg)
        module.fail_json(msg=msg, **result, **extra)

    # 1. identity and disk space on every target, in parallel
    answers, unreachable = {}, []
    layers = [d for d in (source_attrs.get("RootFS") or {}).get("Layers") or [] if isinstance(d, str)]
    asked = ask_all(targets, inspect_header(image, source["id"], layers if p["delta"] else None), argv_of,
                    p["connect_timeout"] + 60)
    for name, (answer, err) in asked.items():
        if answer is None or not answer.get("ok"):
            why = (answer or {}).get("error") or err or "no answer"
            unreachable.append(f"{name}: {why}")
        elif not isinstance(answer.get("protocol"), int) or answer["protocol"] < PROTOCOL:
            # Protocol 2 added model files to the same program; image requests are unchanged since 1.
            unreachable.append(f"{name}: its transfer program speaks protocol {answer.get('protocol')}, this module {PROTOCOL}")
        else:
            answers[name] = answer
    if cancel.reason:
        result["targets"] = []
        fail("nothing was sent to any node")
    if unreachable:
        result["targets"] = []
        fail("cannot ask every target about the image over the fabric (is the fleet's transfer trust set up and up to "
             "date? role dgxspark.vllm.node_trust): " + " | ".join(unreachable))
    entries, disk_errors, warnings = plan(source, source_store, image, targets, answers, p["min_free_bytes"])
    for warning in warnings:
        module.warn(warning)
    result["targets"] = entries
    if disk_errors:
        fail("not enough disk space for the image; nothing was sent to any node: " + " | ".join(disk_errors))

    moving = [e for e in entries if e["action"] in ("tag", "transfer")]
    result["changed"] = bool(moving)
    result["diff"] = {"before": {e["name"]: e["before_id"] for e in entries},
                      "after": {e["name"]: (e["before_id"] if e["action"] == "skip" else source["id"]) for e in entries}}
    for e in entries:
        e["after_id"] = e["before_id"] if e["action"] == "skip" else source["id"]
        if e["action"] == "transfer":
            e["bytes"] = source["size"]  # estimate, replaced by the measured bytes below
    if module.check_mode or not moving:
        for e in entries:
            if e["action"] != "transfer":
                e["bytes"] = 0
        watch.stop()
        result["table"] = table(entries, size=source["size"])
        result["elapsed"] = round(time.monotonic() - began, 3)
        progress.write(done=True)
        module.exit_json(**result)
    if cancel.reason:
        fail("nothing was sent to any node")
    for stale in stale_tmp_tars(p["tmp_dir"]) if p["tmp_tar"] else []:
        try:
            os.unlink(stale)  # left by a run that was killed: it would hold the disk space this run needs
        except OSError as exc:
            module.warn(f"cannot remove the stale temporary archive {stale}: {exc}")

    # 2. tags only
    for e in entries:
        if e["action"] == "tag":
            answer, err = request(argv_of(e), tag_header(image, source["id"], nonce), p["connect_timeout"] + 60)
            if answer is None or not answer.get("ok"):
                e["action"], e["error"] = "failed", (answer or {}).get("error") or err or "no answer"
        elif e["action"] == "transfer":
            e["bytes"] = 0

    # 3. the stream: once per chain, framed, with a watchdog
    transfers = [e for e in entries if e["action"] == "transfer"]
    reported = {}  # where the image stands on a target, as its transfer program reported at the end of the receive
    if transfers:
        progress.set_phase("transfer")
        tmp_path = None
        started = time.monotonic()
        timed_out = threading.Event()

        def expire() -> None:
            timed_out.set()
            for proc, _members in hops:
                proc.kill()

        watchdog = threading.Timer(p["timeout"], expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            for chain in chains(transfers, p["strategy"]):
                header = receive_header(chain[0], chain[1:], image, source, nonce)
                hops.append((Hop(argv_of(chain[0]), header, [e["name"] for e in chain]), chain))
            if cancel.reason:
                kill_hops()  # a hop started while the watch was cancelling
            reader, tmp_path = save_stream(api, source["id"], p["tmp_tar"], p["tmp_dir"], lambda: bool(cancel.reason))
            delta = delta_plan(transfers, layers) if p["delta"] else {"held": 0, "skip": set()}
            if delta["skip"]:
                reader = LayerFilter(reader, delta["skip"], CHUNK)
            try:
                result["bytes_sent"] = pump(reader, [h for h, _m in hops], progress)
            finally:
                close_reader(getattr(reader, "source", reader))
            result["delta"] = delta_result(delta, layers, reader, transfers, p["delta"])
            progress.set_phase("loading")
            for proc, _members in hops:
                proc.finish(max(30.0, p["timeout"] - (time.monotonic() - started)))
        except (DockerException, OSError, HostileArchive) as exc:
            for proc, _members in hops:
                proc.kill()
                proc.finish(10)
            fail(f"reading {image} from the source's engine failed: {exc}; no target was tagged",
                 exception=traceback.format_exc())
        finally:
            watchdog.cancel()
            if tmp_path and os.path.exists(tmp_path):
                os.unlink(tmp_path)
        if cancel.reason:
            for proc, _members in hops:
                proc.finish(10)
            result["seconds"] = round(time.monotonic() - started, 3)
            for e in transfers:
                e["action"], e["error"] = "failed", "cancelled; its receiver aborted the load"
            result["table"] = table(entries, size=source["size"])
            fail("the streams were cut, so every target was left as it was (no image loaded, no tag moved); rerun to "
                 "transfer")
        result["seconds"] = round(time.monotonic() - started, 3)
        answers_by_name = chain_results(hops)
        for e in transfers:
            answer = answers_by_name[e["name"]]
            if isinstance(answer.get("after"), dict):
                reported[e["name"]] = dict(answer["after"], ok=True)
            e["bytes"] = int(answer.get("bytes") or 0)
            e["seconds"] = float(answer.get("seconds") or 0.0)
            e["mb_per_s"] = mb_per_s(e["bytes"], e["seconds"])
            if not answer.get("ok"):
                e["action"] = "failed"
                e["error"] = answer.get("error") or "failed"
                if timed_out.is_set():
                    e["error"] = f"the transfer exceeded timeout={p['timeout']}s and was cut; " + e["error"]

    # 4. look again at every target that was not skipped: verify the changed ones, record where the others stand.
    # A receive reports where the image stands at its end; the targets without such a report are asked.
    progress.set_phase("verify")
    touched = [e for e in entries if e["action"] != "skip"]
    ask = [e for e in touched if e["name"] not in reported]
    after = ask_all(ask, inspect_header(image, source["id"]), argv_of, p["connect_timeout"] + 60) if ask else {}
    after.update({name: (answer, "") for name, answer in reported.items()})
    for e in touched:
        answer, err = after[e["name"]]
        if answer is None or not answer.get("ok"):
            e["after_id"] = None
            if e["action"] != "failed":
                e["action"], e["error"] = "failed", f"could not verify: {(answer or {}).get('error') or err}"
            continue
        e["after_id"] = (answer.get("ref_image") or {}).get("id")
        same, reason, _warning = identity(source, source_store, answer, image, e["name"])
        if e["action"] != "failed" and not same:
            e["action"], e["error"] = "failed", f"verification after the transfer failed: {reason}"
    result["diff"]["after"] = {e["name"]: e.get("after_id") for e in entries}
    result["changed"] = any(e["bytes"] > 0 for e in entries) or any(e["action"] == "tag" for e in entries)
    result["table"] = table(entries, size=source["size"])
    failed = [e for e in entries if e["action"] == "failed"]
    if failed:
        fail(f"{image} did not reach every target (their previous tags are unchanged; rerun to complete): "
             + " | ".join(f"{e['name']}: {e['error']}" for e in failed))
    watch.stop()
    result["elapsed"] = round(time.monotonic() - began, 3)
    progress.write(done=True)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
