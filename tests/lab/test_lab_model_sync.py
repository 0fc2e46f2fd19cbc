# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lab tests of the model_sync role and module (issue 6, part 4) on the session's pair.

The stand-in weights are seeded on node 1 only (`lab.py models --nodes 1`) and moved by the collection to node 2
over the lab's fabric network. The download path cannot be exercised here (the lab has no internet): only its
offline refusal is; the argv and environment of the download are unit tested.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest

from labkit import (BIN, INVENTORY, LAB, REPO, ansible_env, cut_midway, fabric_if, fabric_ip, fleet_play, node,
                    node_exec, parse_adhoc, recap, report, run, throttled, transfer_processes, wait_until_no_transfer)

MODELS = "/srv/dgxspark/models"
NAME = "Qwen3.5-122B-A10B-FP8"
MODEL_DIR = f"{MODELS}/{NAME}"
SHARD = "model-00003-of-00004.safetensors"

SYNC_PLAY = fleet_play("Model sync", "dgxspark.vllm.model_sync")


def play(path, *args, env=None):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(path), *args], check=False,
               env=ansible_env(**(env or {})))


def module(*, extra=None, check=False):
    """The model_sync module on node 1 towards node 2; its JSON result and the process."""
    args = {"model": NAME, "models_dir": MODELS, "targets": [{"host": fabric_ip(2), "name": node(2)}]}
    args.update(extra or {})
    argv = [str(BIN / "ansible"), "-i", str(INVENTORY), node(1), "-m", "dgxspark.vllm.model_sync", "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    proc = run(argv, check=False, env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    return parse_adhoc(proc.stdout), proc


def announce():
    """What the role does before it sends: the head's manifest (the module's plan), announced to node 2."""
    planned, proc = module(extra={"plan": True})
    assert proc.returncode == 0 and planned["changed"] is False, proc.stdout[-3000:]
    args = {"model": NAME, "files": planned["manifest"]}
    run([str(BIN / "ansible"), "-i", str(INVENTORY), node(2), "-m", "dgxspark.vllm.transfer_announce", "-a",
         json.dumps(args)], env=ansible_env())


def sums(i, directory=MODEL_DIR):
    """{relative path: (size, sha256)} of the files under DIRECTORY on node I, computed by the node's own tools."""
    proc = node_exec(node(i), "sh", "-c", f"cd {directory} 2>/dev/null && find . -type f ! -name '.*' -printf '%P %s\\n'",
                     check=False)
    out = {}
    for line in proc.stdout.splitlines():
        rel, size = line.rsplit(" ", 1)
        digest = node_exec(node(i), "sha256sum", f"{directory}/{rel}").stdout.split()[0]
        out[rel] = (int(size), digest)
    return out


def hidden_parts(i):
    return node_exec(node(i), "find", MODELS, "-name", "*.dgxspark-part", check=False).stdout.split()


@pytest.fixture(scope="module")
def head_only(lab, tmp_path_factory):
    """The stand-in weights on node 1 only; the transfer trust set up by the role's first run."""
    node_exec(node(2), "rm", "-rf", MODEL_DIR)
    node_exec(node(1), "rm", "-rf", MODEL_DIR)
    run([*LAB, "models", "--nodes", "1"])
    path = tmp_path_factory.mktemp("model_sync") / "sync.yml"
    path.write_text(SYNC_PLAY)
    yield {"play": path, "seeded": sums(1)}
    # Give the session's lab its identical stand-ins back on every node.
    for i in (1, 2):
        node_exec(node(i), "rm", "-rf", MODEL_DIR)
        node_exec(node(i), "tc", "qdisc", "del", "dev", fabric_if(i), "root", check=False)
    run([*LAB, "models"])


def test_model_reaches_node2_identical_and_a_rerun_moves_nothing(head_only):
    assert sums(2) == {} and len(head_only["seeded"]) == 13
    first = play(head_only["play"], "-e", f"model_sync_model=Qwen/{NAME}")
    assert first.returncode == 0, first.stdout[-4000:]
    total = sum(size for size, _digest in head_only["seeded"].values())
    row = re.search(rf"- {re.escape(node(2))}\s+sync\s+13\s+(\d+)\s", first.stdout)
    assert row and int(row.group(1)) == total, first.stdout[-3000:]
    assert sums(2) == head_only["seeded"]

    second = play(head_only["play"], "-e", f"model_sync_model=Qwen/{NAME}", "-e", "model_sync_trust=false")
    assert second.returncode == 0, second.stdout[-4000:]
    assert recap(second.stdout, node(1))["changed"] == 0 and recap(second.stdout, node(2))["changed"] == 0
    assert re.search(rf"- {re.escape(node(2))}\s+skip\s+0\s+0\s", second.stdout), second.stdout[-3000:]

    result, proc = module()
    assert proc.returncode == 0 and result["changed"] is False, proc.stdout[-3000:]
    assert result["bytes_sent"] == 0 and result["targets"][0]["action"] == "skip"
    assert result["source"]["hashed"] == 0 and result["source"]["cached"] == 13  # nothing re-hashed on a rerun


def test_a_changed_shard_moves_alone(head_only):
    node_exec(node(1), "sh", "-c", f"head -c 4096 /dev/urandom | dd of={MODEL_DIR}/{SHARD} bs=1 seek=2048 conv=notrunc "
                                   "status=none")
    source = sums(1)
    before = sums(2)
    size = source[SHARD][0]
    checked, proc = module(check=True)
    assert proc.returncode == 0 and checked["changed"] is True, proc.stdout[-3000:]
    assert checked["targets"][0]["files"] == [SHARD] and checked["targets"][0]["bytes"] == size
    assert checked["bytes_sent"] == 0 and checked["targets"][0]["reason"] == "0 file(s) missing, 1 different"
    assert sums(2) == before  # check mode moved nothing

    # Not announced yet: node 2 refuses the changed shard (its announcement holds the old hash) and keeps its copy.
    refused, proc = module()
    assert proc.returncode != 0 and "was announced as" in refused["targets"][0]["error"], proc.stdout[-3000:]
    assert sums(2) == before
    announce()
    result, proc = module()
    assert proc.returncode == 0 and result["changed"] is True, proc.stdout[-3000:]
    target = result["targets"][0]
    assert target["action"] == "sync" and target["files"] == [SHARD]
    assert target["bytes"] == size and result["bytes_sent"] == size
    assert sums(2) == source


def test_an_interrupted_stream_leaves_the_old_files_and_a_rerun_completes(head_only):
    # A 60 MB extra shard and another changed shard; node 1's fabric egress slowed so the stream takes seconds.
    node_exec(node(1), "sh", "-c", f"head -c 62914560 /dev/urandom > {MODEL_DIR}/extra-00001.safetensors")
    node_exec(node(1), "sh", "-c", f"head -c 4096 /dev/urandom | dd of={MODEL_DIR}/model-00001-of-00004.safetensors "
                                   "bs=1 seek=2048 conv=notrunc status=none")
    before = sums(2)
    announce()
    mid_stream = []
    with throttled(1, "40mbit"):
        result, code, out = cut_midway(
            "dgxspark.vllm.model_sync",
            {"model": NAME, "models_dir": MODELS, "targets": [{"host": fabric_ip(2), "name": node(2)}]}, 15_000_000,
            signal="-TERM", during=lambda: mid_stream.extend(hidden_parts(2)))
    assert mid_stream  # the files were being received under hidden names
    assert code != 0, out[-3000:]
    assert node(2) in result["msg"] and "existing files are unchanged" in result["msg"], result["msg"]
    assert result["targets"][0]["action"] == "failed"
    assert sums(2) == before  # the old shard is intact, the extra file is not there under its name
    assert hidden_parts(2) == []  # and no part file was left behind

    result, proc = module()
    assert proc.returncode == 0 and result["changed"] is True, proc.stdout[-3000:]
    assert result["targets"][0]["files"] == ["extra-00001.safetensors", "model-00001-of-00004.safetensors"]
    assert sums(2) == sums(1) and hidden_parts(2) == []


def test_offline_with_a_missing_model_fails_naming_host_and_path_and_writes_nothing(head_only):
    missing = "Qwen/Qwen9-NotHere-1B"
    before = {i: node_exec(node(i), "find", MODELS).stdout for i in (1, 2)}
    out = play(head_only["play"], "-e", f"model_sync_model={missing}", "-e", "model_sync_trust=false",
               env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode != 0
    assert recap(out.stdout, node(1))["failed"] == 1, out.stdout[-3000:]
    start = out.stdout.find(f"fatal: [{node(1)}]: FAILED!")
    assert start >= 0, out.stdout[-3000:]
    msg = re.sub(r"\s+", " ", out.stdout[start:out.stdout.find("PLAY RECAP", start)])
    assert f"{node(1)}: the model {missing} is not complete under {MODELS}/Qwen9-NotHere-1B" in msg, msg
    assert "offline mode is on" in msg and "HF_HUB_OFFLINE" in msg, msg
    for i in (1, 2):
        assert node_exec(node(i), "find", MODELS).stdout == before[i]


def test_offline_with_the_head_holding_another_revision_fails_naming_both_and_writes_nothing(head_only):
    """Issue 15: a changed model_sync_revision is not served from the old copy. The head's copy was recorded as v1;
    asking for v2 offline stops before anything moves, naming both revisions; asking for v1 syncs as before."""
    node_exec(node(1), "sh", "-c", f"echo v1 > {MODEL_DIR}/.dgxspark-revision")
    try:
        before = {i: node_exec(node(i), "find", MODELS).stdout for i in (1, 2)}
        out = play(head_only["play"], "-e", f"model_sync_model=Qwen/{NAME}", "-e", "model_sync_revision=v2",
                   "-e", "model_sync_trust=false", env={"HF_HUB_OFFLINE": "1"})
        assert out.returncode != 0 and recap(out.stdout, node(1))["failed"] == 1, out.stdout[-3000:]
        msg = " ".join(out.stdout.split())
        assert f"{node(1)}: the model Qwen/{NAME} is not complete under {MODEL_DIR} (missing: revision v2 (this copy " \
               "is revision v1))" in msg and "offline mode is on" in msg, msg[-3000:]
        for i in (1, 2):
            assert node_exec(node(i), "find", MODELS).stdout == before[i]
        same = play(head_only["play"], "-e", f"model_sync_model=Qwen/{NAME}", "-e", "model_sync_revision=v1",
                    "-e", "model_sync_trust=false", env={"HF_HUB_OFFLINE": "1"})
        assert same.returncode == 0 and recap(same.stdout, node(2))["changed"] == 0, same.stdout[-3000:]
    finally:
        node_exec(node(1), "rm", "-f", f"{MODEL_DIR}/.dgxspark-revision")


def test_ctrl_c_on_the_play_stops_the_transfer_on_every_node_within_10s(head_only):
    """Issue 15, point 6: SIGINT to ansible-playbook in the middle of a model transfer: within 10 s no transfer
    process runs on any node, node 2 holds the files it held before (no part file left) and its lock is free."""
    node_exec(node(1), "sh", "-c", f"head -c 62914560 /dev/urandom > {MODEL_DIR}/extra-cancel.safetensors")
    before = sums(2)
    with throttled(1, "20mbit"):  # 60 MB: about 25 s, far longer than the test needs
        with subprocess.Popen([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(head_only["play"]),
                               "-e", f"model_sync_model=Qwen/{NAME}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=ansible_env(), cwd=REPO) as job:
            deadline = time.monotonic() + 120
            while not hidden_parts(2):  # bytes are being written on node 2
                assert job.poll() is None and time.monotonic() < deadline, "no transfer started"
                time.sleep(0.2)
            assert all(transfer_processes(i) for i in (1, 2))  # the ssh hop on node 1, the receiver on node 2
            job.send_signal(signal.SIGINT)
            stopped, left = wait_until_no_transfer((1, 2), 10)
            out, _err = job.communicate(timeout=60)
    assert not any(left.values()) and stopped <= 10, (
        f"still running {stopped:.1f} s after SIGINT: {left}\n{out[-2000:]}")
    report(f"model transfer: every transfer process gone {stopped:.1f} s after SIGINT")
    assert job.returncode != 0
    assert sums(2) == before and hidden_parts(2) == []  # as it was: no new file, no part file
    lock = node_exec(node(2), "flock", "-n", f"{MODELS}/.dgxspark-receive.lock", "true", check=False)
    assert lock.returncode == 0, lock.stderr  # the receiver released the models-root lock
    node_exec(node(1), "rm", "-f", f"{MODEL_DIR}/extra-cancel.safetensors")
