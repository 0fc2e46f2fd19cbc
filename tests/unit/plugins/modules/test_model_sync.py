# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of main() of the model_sync module with a temporary source directory and mocked targets."""

from __future__ import annotations

import hashlib
import json
from unittest import mock

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import model_sync as mod
from ansible_collections.dgxspark.vllm.plugins.module_utils import _model_files as mf
from ansible_collections.dgxspark.vllm.plugins.module_utils import _relay as relay


def sha(data):
    return hashlib.sha256(data).hexdigest()


class FakeHop:
    """Records the header and the stream, and answers for every member of the chain."""

    instances: list = []

    def __init__(self, argv, header, names):
        self.argv, self.header, self.names = argv, header, names
        self.data = b""
        self.error = None
        self.err = b""
        self.lines = []
        self.proc = mock.Mock(returncode=0)
        FakeHop.instances.append(self)

    alive = True

    def write(self, data):
        self.data += data

    def kill(self):
        pass

    def finish(self, timeout):
        want = {self.header["name"]: self.header["want"]}
        want.update({h["name"]: h["want"] for h in self.header["next"]})
        sizes = {f["path"]: f["size"] for f in self.header["files"]}
        for name in self.names:
            self.lines.append(json.dumps({"name": name, "ok": True, "bytes": sum(sizes[p] for p in want[name]),
                                          "seconds": 0.5, "deleted": []}))
        return 0

    def stderr_text(self):
        return ""


@pytest.fixture
def source(tmp_path):
    model = tmp_path / "models" / "M"
    model.mkdir(parents=True)
    (model / "config.json").write_bytes(b"{}")
    (model / "a.safetensors").write_bytes(b"a" * 10)
    (model / "b.safetensors").write_bytes(b"b" * 20)
    keys = tmp_path / "key"
    keys.write_text("k")
    return {"models": tmp_path / "models", "key": str(keys)}


def manifest_of(files):
    return {p: {"size": len(d), "sha256": sha(d)} for p, d in files.items()}


SAME = manifest_of({"config.json": b"{}", "a.safetensors": b"a" * 10, "b.safetensors": b"b" * 20})


def run(capsys, source, before, after=None, check=False, **extra):
    FakeHop.instances = []
    asked = []

    def fake_request(argv, header, timeout):
        host = argv[-2]
        asked.append((host, header["op"]))
        files = (after if after is not None and len([a for a in asked if a[0] == host]) > 1 else before)[host]
        return {"v": 2, "ok": True, "protocol": 2, "path": f"/srv/models/{header['model']}", "exists": True,
                "files": files, "free_bytes": 10 ** 12, "problems": []}, ""

    args = {"model": "M", "models_dir": str(source["models"]), "ssh_key": source["key"], "known_hosts": source["key"],
            "targets": [{"host": "10.0.0.2", "name": "n2"}, {"host": "10.0.0.3", "name": "n3"}]}
    if check:
        args["_ansible_check_mode"] = True
    args.update(extra)
    with patch_module_args(args), mock.patch.object(relay, "request", fake_request), \
            mock.patch.object(mod, "Hop", FakeHop), pytest.raises(SystemExit) as exc:
        mod.main()
    return exc.value.code, json.loads(capsys.readouterr().out), asked


def test_identical_targets_move_nothing(capsys, source):
    rc, result, _asked = run(capsys, source, {"10.0.0.2": SAME, "10.0.0.3": SAME})
    assert rc == 0 and result["changed"] is False and result["bytes_sent"] == 0 and FakeHop.instances == []
    assert [t["action"] for t in result["targets"]] == ["skip", "skip"]
    assert result["source"]["files"] == 3 and result["source"]["bytes"] == 32


def test_only_the_changed_shard_moves_once_through_the_chain(capsys, source):
    stale = dict(SAME, **{"b.safetensors": {"size": 20, "sha256": "0" * 64}})
    missing = {k: v for k, v in SAME.items() if k != "a.safetensors"}
    rc, result, _asked = run(capsys, source, {"10.0.0.2": stale, "10.0.0.3": missing},
                             after={"10.0.0.2": SAME, "10.0.0.3": SAME})
    assert rc == 0 and result["changed"] is True
    hop = FakeHop.instances[0]
    assert hop.header["want"] == ["b.safetensors"] and hop.header["next"][0]["want"] == ["a.safetensors"]
    assert [f["path"] for f in hop.header["files"]] == ["a.safetensors", "b.safetensors"]
    assert hop.data == b"".join(mf.file_frames(str(source["models"] / "M"), hop.header["files"]))
    assert result["bytes_sent"] == 30
    assert [(t["name"], t["action"], t["files"], t["bytes"]) for t in result["targets"]] == [
        ("n2", "sync", ["b.safetensors"], 20), ("n3", "sync", ["a.safetensors"], 10)]
    assert result["diff"]["before"]["n2"] == {"b.safetensors": "0" * 64}
    assert result["diff"]["after"]["n3"] == {"a.safetensors": sha(b"a" * 10)}


def test_check_mode_reports_the_files_and_sends_nothing(capsys, source):
    rc, result, asked = run(capsys, source, {"10.0.0.2": {}, "10.0.0.3": SAME}, check=True)
    assert rc == 0 and result["changed"] is True and FakeHop.instances == []
    assert result["targets"][0]["files"] == ["a.safetensors", "b.safetensors", "config.json"]
    assert result["targets"][0]["bytes"] == 32 and result["bytes_sent"] == 0
    assert {op for _h, op in asked} == {"files_inspect"}
    assert not (source["models"] / "M" / mf.CACHE_NAME).exists()


def test_a_target_that_still_differs_after_the_transfer_fails(capsys, source):
    rc, result, _asked = run(capsys, source, {"10.0.0.2": {}, "10.0.0.3": SAME}, after={"10.0.0.2": {}, "10.0.0.3": SAME})
    assert rc == 1 and "n2: after the transfer 3 file(s) still differ" in result["msg"]
    assert "existing files are unchanged" in result["msg"]


def test_a_missing_source_model_fails(capsys, source, tmp_path):
    args = {"model": "Nope", "models_dir": str(source["models"]), "targets": [{"host": "10.0.0.2"}]}
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] and f"{source['models']}/Nope does not exist on the source" in result["msg"]


def test_check_source_answers_the_heads_copy_and_what_would_move_in_one_call(capsys, source):
    """The role's one call on the head: the source's copy is complete, so the targets are asked at once (plan)."""
    rc, result, asked = run(capsys, source, {"10.0.0.2": {}, "10.0.0.3": SAME}, check_source=True, plan=True)
    assert rc == 0 and result["source_complete"] is True and result["source_missing"] == []
    assert result["moving"] is True and result["changed"] is False and "manifest" in result
    assert sorted(h for h, _op in asked) == ["10.0.0.2", "10.0.0.3"] and FakeHop.instances == []


def test_check_source_stops_at_an_incomplete_or_other_revision_copy_without_asking_or_hashing(capsys, source):
    """An incomplete copy (or another revision's) is downloaded first: nobody is asked, nothing hashed, no failure."""
    (source["models"] / "M" / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "c.safetensors"}}))
    rc, result, asked = run(capsys, source, {}, check_source=True, plan=True)
    assert rc == 0 and result["source_complete"] is False and result["moving"] is False and asked == []
    assert any("c.safetensors" in m for m in result["source_missing"]), result["source_missing"]
    assert not (source["models"] / "M" / mf.CACHE_NAME).exists() and "source" not in result
    (source["models"] / "M" / "model.safetensors.index.json").unlink()
    rc, result, asked = run(capsys, source, {}, check_source=True, plan=True, revision="v2")
    assert rc == 0 and result["source_complete"] is False and asked == []
    assert any("v2" in m for m in result["source_missing"]), result["source_missing"]
    rc, result, asked = run(capsys, source, {}, check_source=True, plan=True, model="Nope")
    assert rc == 0 and result["source_missing"] == [f"{source['models']}/Nope does not exist"] and asked == []


def test_check_source_with_no_targets_only_looks_at_the_copy(capsys, source):
    """A single Spark: the look at its copy is the whole call (no hashing of 100+ GB of weights for nobody)."""
    rc, result, asked = run(capsys, source, {}, check_source=True, plan=True, targets=[])
    assert rc == 0 and result["source_complete"] is True and result["moving"] is False and asked == []
    assert not (source["models"] / "M" / mf.CACHE_NAME).exists()


def test_answer_problem_names_an_old_transfer_program():
    old = {"v": 1, "ok": False, "error": "unsupported request (this relay speaks protocol 1)"}
    assert "rerun the dgxspark.vllm.node_trust role" in mod.answer_problem("n2", old, "")
    assert mod.answer_problem("n2", {"ok": True, "protocol": 1}, "") == \
        "n2: its transfer program speaks protocol 1, this module needs 2"
    assert mod.answer_problem("n2", None, "Permission denied") == "n2: Permission denied"


class FakeWatch:
    """Stands in for ControllerWatch: the test decides when the controller is gone (calls on_lost)."""

    last = None

    def __init__(self, on_lost, lease=None, stdout=False):
        self.on_lost, self.lease, self.stdout = on_lost, lease, stdout
        self.stopped = False
        FakeWatch.last = self

    def start(self):
        pass

    def stop(self):
        self.stopped = True


class LosingHop(FakeHop):
    """A hop whose controller is lost after the first frame: the watch fires, the run kills the stream."""

    killed = 0

    def write(self, data):
        super().write(data)
        if FakeWatch.last and FakeWatch.last.stdout and not LosingHop.killed:
            FakeWatch.last.on_lost("cancelled: the controller stopped following the transfer (its connection to this "
                                   "node closed: the play was interrupted or lost its connection)")

    def kill(self):
        LosingHop.killed += 1
        self.error = "killed"

    @property
    def alive(self):
        return self.error is None


def test_a_lost_controller_cuts_the_stream_and_fails_cancelled(capsys, source):
    """Issue 15: Ctrl-C on the play left the transfer running to completion on the nodes."""
    LosingHop.killed = 0
    FakeWatch.last = None
    differs = manifest_of({"config.json": b"{}", "a.safetensors": b"x" * 10, "b.safetensors": b"b" * 20})
    asked = []

    def fake_request(argv, header, timeout):
        asked.append((argv[-2], header["op"]))
        return {"v": 2, "ok": True, "protocol": 2, "exists": True, "files": differs, "free_bytes": 10 ** 12,
                "problems": []}, ""

    args = {"model": "M", "models_dir": str(source["models"]), "ssh_key": source["key"], "known_hosts": source["key"],
            "targets": [{"host": "10.0.0.2", "name": "n2"}]}
    with patch_module_args(args), mock.patch.object(relay, "request", fake_request), \
            mock.patch.object(mod, "Hop", LosingHop), mock.patch.object(mod, "ControllerWatch", FakeWatch), \
            mock.patch.object(mod.Cancel, "GRACE", 3600), pytest.raises(SystemExit) as exc:
        mod.main()
    result = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1 and LosingHop.killed >= 1 and FakeWatch.last.stdout is True
    assert result["msg"].startswith("cancelled: the controller stopped following the transfer"), result["msg"]
    assert "kept its existing files" in result["msg"]
    assert asked == [("10.0.0.2", "files_inspect")]  # nothing asked after the cut: the run ends at once
    assert result["targets"][0]["action"] == "failed"


def test_every_phase_gets_what_is_left_of_the_one_timeout(capsys, source, monkeypatch):
    """Finding 8: model_sync_timeout allowed about three times its value (manifests, stream, check: each the whole)."""
    now = [100.0]
    monkeypatch.setattr(mod.time, "monotonic", lambda: now[0])
    timeouts = []
    differs = manifest_of({"config.json": b"{}", "a.safetensors": b"x" * 10, "b.safetensors": b"b" * 20})

    def fake_request(argv, header, timeout):
        timeouts.append(timeout)
        now[0] += 30  # each round of requests takes 30 s
        files = differs if len(timeouts) == 1 else SAME
        return {"v": 2, "ok": True, "protocol": 2, "exists": True, "files": files, "free_bytes": 10 ** 12,
                "problems": []}, ""

    args = {"model": "M", "models_dir": str(source["models"]), "ssh_key": source["key"], "known_hosts": source["key"],
            "targets": [{"host": "10.0.0.2", "name": "n2"}], "timeout": 100}
    finish_timeouts = []

    class TimedHop(FakeHop):
        def finish(self, timeout):
            finish_timeouts.append(timeout)
            now[0] += 20
            return super().finish(timeout)

    with patch_module_args(args), mock.patch.object(relay, "request", fake_request), \
            mock.patch.object(mod, "Hop", TimedHop), pytest.raises(SystemExit) as exc:
        mod.main()
    assert exc.value.code == 0, capsys.readouterr().out
    assert timeouts == [100, 50] and finish_timeouts == [70]  # 100 s in all, never 100 s again
