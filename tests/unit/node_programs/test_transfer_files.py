# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the model-file requests of dgxspark-transfer (files_inspect, files_receive) on a temporary root.

Every test runs twice (the fixture R, tests/unit/node_programs/conftest.py): against module_utils/_transfer_node and
against the built program, as the nodes run it; the last tests run the built file as a process, as sshd does.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _announce, _model_files as mf


def sha(data):
    return hashlib.sha256(data).hexdigest()


def entry(path, data):
    return {"path": path, "size": len(data), "sha256": sha(data)}


def stream(files, contents, chunk=3, cut_after=None):
    data = b"".join(mf.file_frames(str(contents), files, chunk=chunk))
    return io.BytesIO(data if cut_after is None else data[:cut_after])


@pytest.fixture
def root(tmp_path):
    models = tmp_path / "models"
    (models / "m").mkdir(parents=True)
    (models / "m" / "keep.bin").write_bytes(b"old-keep")
    (models / "m" / "shard.bin").write_bytes(b"old-shard")
    (models / "m" / "extra.txt").write_bytes(b"extra")
    return models


def announce(directory, files, model="m"):
    """What the controller announces before a sync: the model's manifest (module transfer_announce)."""
    path = pathlib.Path(directory) / _announce.MODELS_FILE
    old = json.loads(path.read_text()) if path.exists() else None
    path.write_text(_announce.models_text(old, model, {f["path"]: {"size": f["size"], "sha256": f["sha256"]}
                                                       for f in files}))


def receive(R, root, files, body, delete=(), want=None, capsys=None, announced=None):
    """A files_receive into ROOT/m; ANNOUNCED (default: FILES) is what the controller announced first."""
    trust = root.parent / "trust"
    trust.mkdir(exist_ok=True)
    announce(trust, files if announced is None else announced)
    req = R.validate_request({"v": 2, "op": "files_receive", "name": "n2", "model": "m", "files": files,
                              "want": want, "delete": list(delete)})
    try:
        rc = R.do_files_receive(req, {"models_root": str(root), "_dir": str(trust)}, body)
    except (R.RequestError, ValueError) as exc:  # refused before the stream is read: main() answers with it
        return 1, {"ok": False, "error": str(exc)}
    answer = json.loads(capsys.readouterr().out.splitlines()[0])
    return rc, answer


def test_the_same_rules_as_the_module_utils(R, tmp_path):
    # One implementation: the program's path and manifest functions are _model_files' (built: the same source).
    for name in ("check_relpath", "model_dir", "target_file", "manifest", "stale_parts"):
        assert getattr(R, name).__module__ == mf.__name__
    model = tmp_path / "m"
    (model / "d").mkdir(parents=True)
    (model / "d" / "a.bin").write_bytes(b"abc")
    (model / "config.json").write_bytes(b"{}")
    assert R.manifest(str(model), use_cache=False)["files"] == mf.manifest(str(model), use_cache=False)["files"]


def test_validate_files_requests(R):
    ok = R.validate_request({"v": 2, "op": "files_receive", "model": "m", "files": [entry("a", b"1"), entry("d/b", b"2")],
                             "next": [{"host": "10.0.0.3", "name": "n3", "want": ["a"]}]})
    assert ok["want"] == ["a", "d/b"] and ok["delete"] == []
    assert ok["next"] == [{"host": "10.0.0.3", "port": 22, "name": "n3", "want": ["a"], "delete": []}]
    assert R.validate_request({"v": 2, "op": "files_inspect", "model": "org/m"})["model"] == "org/m"
    assert R.validate_request({"v": 1, "op": "inspect", "image": "a:1"})["op"] == "inspect"  # images keep protocol 1
    bad = [
        {"v": 1, "op": "files_inspect", "model": "m"},
        {"v": 2, "op": "files_inspect", "model": "../etc"},
        {"v": 2, "op": "files_inspect", "model": "/etc"},
        {"v": 2, "op": "files_receive", "model": "m", "files": [entry("../x", b"1")]},
        {"v": 2, "op": "files_receive", "model": "m", "files": [entry("/abs", b"1")]},
        {"v": 2, "op": "files_receive", "model": "m", "files": [entry("a", b"1"), entry("a", b"1")]},
        {"v": 2, "op": "files_receive", "model": "m", "files": [{"path": "a", "size": -1, "sha256": "0" * 64}]},
        {"v": 2, "op": "files_receive", "model": "m", "files": [{"path": "a", "size": 1, "sha256": "xyz"}]},
        {"v": 2, "op": "files_receive", "model": "m", "files": [entry("a", b"1")], "want": ["b"]},
        {"v": 2, "op": "files_receive", "model": "m", "files": [entry("a", b"1")], "delete": ["a"]},
        {"v": 2, "op": "files_receive", "model": "m", "files": [], "delete": ["../../etc/passwd"]},
        {"v": 2, "op": "files_receive", "model": "m", "files": [], "next": [{"host": "h", "want": ["zz"]}]},
    ]
    for req in bad:
        with pytest.raises((R.RequestError, R.PathError)):  # PathError: _model_files' path rules
            R.validate_request(req)


def test_next_header_of_a_files_chain(R):
    req = R.validate_request({"v": 2, "op": "files_receive", "name": "n2", "model": "m", "files": [entry("a", b"1")],
                              "next": [{"host": "h3", "name": "n3", "want": []}, {"host": "h4", "name": "n4"}]})
    assert R.next_header(req) == {"v": 2, "op": "files_receive", "name": "n3", "model": "m", "files": req["files"],
                                  "want": [], "delete": [], "next": [{"host": "h4", "port": 22, "name": "n4",
                                                                      "want": ["a"], "delete": []}]}


def test_files_inspect_confined_to_the_configured_root(R, root, tmp_path):
    answer = R.do_files_inspect({"model": "m", "name": "n2"}, {"models_root": str(root)})
    assert answer["ok"] and answer["exists"] and answer["protocol"] == 2
    assert answer["files"]["keep.bin"] == {"size": 8, "sha256": sha(b"old-keep")}
    assert R.do_files_inspect({"model": "absent"}, {"models_root": str(root)})["exists"] is False
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(R.PathError):
        R.do_files_inspect({"model": "link"}, {"models_root": str(root)})
    with pytest.raises(R.RequestError, match="no models_root"):
        R.do_files_inspect({"model": "m"}, {})


def test_files_receive_writes_verifies_and_renames(R, root, tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "shard.bin").write_bytes(b"new-shard-bytes")
    (src / "sub").mkdir()
    (src / "sub" / "new.bin").write_bytes(b"fresh")
    files = [entry("shard.bin", b"new-shard-bytes"), entry("sub/new.bin", b"fresh")]
    (root / "m" / ".stale.bin.dgxspark-part").write_bytes(b"left by a SIGKILL")
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    rc, answer = receive(R, root, files, stream(files, src), capsys=capsys)
    # a receive turns signals into its own cleanup only while it runs: the caller's handlers are back
    assert {signum: signal.getsignal(signum) for signum in before} == before
    assert rc == 0 and answer["ok"] and answer["files"] == 2 and answer["bytes"] == 20
    assert (root / "m" / "shard.bin").read_bytes() == b"new-shard-bytes"
    assert (root / "m" / "sub" / "new.bin").read_bytes() == b"fresh"
    assert (root / "m" / "keep.bin").read_bytes() == b"old-keep" and (root / "m" / "extra.txt").exists()
    assert R.stale_parts(str(root / "m")) == []
    # The hashes of the received files went into the cache: the next inspect reads nothing.
    hashed = []
    found = R.manifest(str(root / "m"), hasher=lambda p: hashed.append(p) or mf.sha256_file(p))
    assert found["files"]["shard.bin"]["sha256"] == sha(b"new-shard-bytes")
    assert sorted(pathlib.Path(p).name for p in hashed) == ["extra.txt", "keep.bin"]  # never inspected before
    rc, answer = receive(R, root, [], stream([], src), delete=["extra.txt"], capsys=capsys)
    assert rc == 0 and answer["deleted"] == ["extra.txt"] and not (root / "m" / "extra.txt").exists()


@pytest.mark.parametrize("cut_after", [10, 25, 38])
def test_a_cut_stream_leaves_the_old_files_and_no_part_file(R, root, tmp_path, capsys, cut_after):
    src = tmp_path / "src"
    src.mkdir()
    (src / "shard.bin").write_bytes(b"new-shard-bytes")
    (src / "keep.bin").write_bytes(b"new-keep")
    files = [entry("keep.bin", b"new-keep"), entry("shard.bin", b"new-shard-bytes")]
    rc, answer = receive(R, root, files, stream(files, src, cut_after=cut_after), capsys=capsys)
    assert rc == 1 and not answer["ok"] and "existing files were left as they were" in answer["error"]
    assert (root / "m" / "keep.bin").read_bytes() == b"old-keep"  # even the complete first file is not renamed
    assert (root / "m" / "shard.bin").read_bytes() == b"old-shard"
    assert R.stale_parts(str(root / "m")) == []


def test_a_wrong_hash_keeps_the_old_file(R, root, tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "shard.bin").write_bytes(b"tampered")
    files = [{"path": "shard.bin", "size": 8, "sha256": sha(b"expected")}]
    rc, answer = receive(R, root, files, stream(files, src), capsys=capsys)
    assert rc == 1 and "sha256" in answer["error"] and "expected" not in answer["error"].split("sha256")[0]
    assert (root / "m" / "shard.bin").read_bytes() == b"old-shard" and R.stale_parts(str(root / "m")) == []


def test_only_wanted_files_are_written(R, root, tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"aaa")
    (src / "b.bin").write_bytes(b"bbb")
    files = [entry("a.bin", b"aaa"), entry("b.bin", b"bbb")]
    rc, answer = receive(R, root, files, stream(files, src), want=["b.bin"], capsys=capsys)
    assert rc == 0 and answer["files"] == 1 and answer["bytes"] == 3
    assert not (root / "m" / "a.bin").exists() and (root / "m" / "b.bin").read_bytes() == b"bbb"


# ---------------------------------------------------------------- the built program as a process, relaying to the next

def _relay_chain(tmp_path, built_program, cut_after=None):
    """n2 receives from stdin and forwards to n3 through a stand-in ssh that runs n3's program (as sshd would)."""
    program = built_program("dgxspark-transfer")
    ssh = tmp_path / "ssh"
    ssh.write_text(f"#!{sys.executable}\nimport os, sys\n"
                   f"os.execv({sys.executable!r}, [{sys.executable!r}, '-I', {program!r}, "
                   f"{str(tmp_path)!r} + '/' + sys.argv[-2] + '.json'])\n")
    ssh.chmod(0o755)
    for name, forward_to in (("n2", ["n3"]), ("n3", [])):
        (tmp_path / name / "m").mkdir(parents=True)
        config = {"models_root": str(tmp_path / name), "ssh": str(ssh), "key": "/nonexistent/key",
                  "known_hosts": "/dev/null", "forward_to": forward_to}
        (tmp_path / f"{name}.json").write_text(json.dumps(config))
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    contents = {"config.json": b"{}", "d/w.safetensors": bytes(range(256)) * 9}
    for rel, data in contents.items():
        (src / rel).write_bytes(data)
    files = [entry(rel, data) for rel, data in sorted(contents.items())]
    announce(tmp_path, files)  # both configurations are in tmp_path: the announcement beside them serves both
    header = {"v": 2, "op": "files_receive", "name": "n2", "model": "m", "files": files,
              "next": [{"host": "n3", "port": 22, "name": "n3"}]}
    body = stream(files, src, chunk=100, cut_after=cut_after).read()
    proc = subprocess.run([sys.executable, "-I", program, str(tmp_path / "n2.json")], cwd=tmp_path,
                          input=json.dumps(header).encode() + b"\n" + body, capture_output=True, timeout=60, check=False)
    answers = {a["name"]: a for a in map(json.loads, proc.stdout.decode().splitlines())}
    return proc.returncode, answers, contents


def test_built_program_relays_files_to_the_next_node(tmp_path, built_program):
    rc, answers, contents = _relay_chain(tmp_path, built_program)
    assert rc == 0 and sorted(answers) == ["n2", "n3"]
    assert all(a["ok"] and a["files"] == 2 for a in answers.values()), answers
    for name in ("n2", "n3"):
        for rel, data in contents.items():
            assert (tmp_path / name / "m" / rel).read_bytes() == data


def test_built_program_cut_stream_writes_nothing_on_any_node(tmp_path, built_program):
    rc, answers, _contents = _relay_chain(tmp_path, built_program, cut_after=500)
    assert rc == 1 and sorted(answers) == ["n2", "n3"]
    assert not any(a["ok"] for a in answers.values())
    assert "the existing files were left as they were" in answers["n3"]["error"]
    for name in ("n2", "n3"):
        assert [p.name for p in (tmp_path / name / "m").rglob("*") if not p.is_dir()] == []


# ---------------------------------------------------------------- what the controller did not announce is refused

def test_files_the_controller_did_not_announce_are_refused_and_nothing_is_written(R, root, tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "shard.bin").write_bytes(b"evil-shard")
    (src / "x.py").write_bytes(b"import os")
    files = [entry("shard.bin", b"evil-shard")]
    before = {p.name: p.read_bytes() for p in (root / "m").iterdir()}
    cases = [
        ([], "m/shard.bin is not in the model's announced manifest"),                    # nothing announced for it
        ([entry("shard.bin", b"good-shard")], "was announced as 10 bytes"),              # another hash
    ]
    for announced, message in cases:
        rc, answer = receive(R, root, files, stream(files, src), announced=announced, capsys=capsys)
        assert rc == 1 and message in answer["error"], answer
    more = [entry("x.py", b"import os")]
    rc, answer = receive(R, root, more, stream(more, src), announced=files, capsys=capsys)
    assert rc == 1 and "m/x.py is not in the model's announced manifest" in answer["error"]
    # An announced file is never deleted; an unannounced model is refused as a whole.
    keep = [entry("keep.bin", b"old-keep")]
    rc, answer = receive(R, root, [], stream([], src), delete=["keep.bin"], announced=keep, capsys=capsys)
    assert rc == 1 and "keep.bin are in the announced manifest and cannot be deleted" in answer["error"]
    req = R.validate_request({"v": 2, "op": "files_receive", "name": "n2", "model": "other", "files": [], "delete": []})
    with pytest.raises(ValueError, match="the model other was not announced"):
        R.do_files_receive(req, {"models_root": str(root), "_dir": str(root.parent / "trust")}, io.BytesIO(b""))
    assert {p.name: p.read_bytes() for p in (root / "m").iterdir()} == before


def test_a_target_without_the_space_refuses_before_reading(R, root, tmp_path, capsys, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    (src / "shard.bin").write_bytes(b"new-shard-bytes")
    files = [entry("shard.bin", b"new-shard-bytes")]
    monkeypatch.setattr(R, "free_bytes", lambda _path: 14)
    rc, answer = receive(R, root, files, stream(files, src), capsys=capsys)
    assert rc == 1 and "not enough space for m: 15 bytes to write, 14 free" in answer["error"]
    assert (root / "m" / "shard.bin").read_bytes() == b"old-shard"


def test_the_next_hop_must_be_one_this_node_forwards_to(R):
    req = R.validate_request({"v": 2, "op": "files_receive", "name": "n2", "model": "m", "files": [],
                              "next": [{"host": "192.168.1.1", "port": 6379, "name": "redis"}]})
    with pytest.raises(R.RequestError, match="does not forward to 192.168.1.1:6379"):
        R.check_forward(req, {"forward_to": ["10.0.0.3"]})
    with pytest.raises(R.RequestError, match="names no node it may forward to"):
        R.check_forward(req, {})
    ok = R.validate_request({"v": 2, "op": "files_receive", "name": "n2", "model": "m", "files": [],
                             "next": [{"host": "10.0.0.3", "name": "n3"}]})
    assert R.check_forward(ok, {"forward_to": ["10.0.0.3"]}) is None
    assert R.check_forward({"next": []}, {}) is None


def test_a_silent_sender_aborts_the_receive_and_releases_the_lock(R, root, tmp_path, capsys):
    """Finding 8: with the sender silent, the models-root lock was held until TCP gave up, and every sync meanwhile
    failed with "another transfer is running"."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "shard.bin").write_bytes(b"new-shard-bytes")
    files = [entry("shard.bin", b"new-shard-bytes")]
    trust = root.parent / "trust"
    trust.mkdir()
    announce(trust, files)
    read_fd, write_fd = os.pipe()
    os.write(write_fd, stream(files, src).getvalue()[:10])  # one frame of 3 bytes and part of the next
    guard = threading.Timer(10.0, os.close, (write_fd,))  # ends a receiver without a deadline (another error)
    guard.start()
    req = R.validate_request({"v": 2, "op": "files_receive", "name": "n2", "model": "m", "files": files})
    try:
        with os.fdopen(read_fd, "rb") as body:
            rc = R.do_files_receive(req, {"models_root": str(root), "idle_timeout": 0.3, "_dir": str(trust)}, body)
    finally:
        if guard.is_alive():
            guard.cancel()
            os.close(write_fd)
    answer = json.loads(capsys.readouterr().out.splitlines()[0])
    assert rc == 1 and answer["error"] == ("no byte from the sender for 0.3 s (idle_timeout); the receive was aborted; "
                                           "the existing files were left as they were")
    assert (root / "m" / "shard.bin").read_bytes() == b"old-shard" and R.stale_parts(str(root / "m")) == []
    with open(root / R.LOCK_NAME, "a", encoding="utf-8") as lock:  # released: the next sync gets it
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_idle_timeout_comes_from_the_configuration_with_a_default(R):
    assert R.idle_timeout({}) == 60.0
    assert R.idle_timeout({"idle_timeout": 15}) == 15.0 and R.idle_timeout({"idle_timeout": 0}) == 0.0
    assert R.idle_timeout({"idle_timeout": "x"}) == 60.0 and R.idle_timeout({"idle_timeout": -1}) == 60.0
    assert R.idle_timeout({"idle_timeout": True}) == 60.0


def test_part_files_of_a_killed_receive_count_as_free_space(R, root, monkeypatch):
    """Finding 7: the parts a SIGKILLed receive left were not counted, so on a tight disk the next sync's preflight
    refused the transfer that would have removed them."""
    monkeypatch.setattr(R, "free_bytes", lambda _path: 1_000_000)  # the disk's own free space, held still
    before = R.do_files_inspect({"model": "m"}, {"models_root": str(root)})
    assert before["free_bytes"] == 1_000_000 and before["stale_part_bytes"] == 0
    (root / "m" / ".shard.bin.dgxspark-part").write_bytes(b"x" * 40960)
    (root / "m" / "sub").mkdir()
    (root / "m" / "sub" / ".w.safetensors.dgxspark-part").write_bytes(b"y" * 8192)
    after = R.do_files_inspect({"model": "m"}, {"models_root": str(root)})
    assert after["stale_part_bytes"] == 49152 and after["files"] == before["files"]
    assert after["free_bytes"] == 1_000_000 + 49152  # the next receive removes them before it writes
