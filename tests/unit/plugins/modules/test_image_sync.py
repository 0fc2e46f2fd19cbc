# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of main() of the image_sync module with a mocked Docker client and mocked targets."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from docker.errors import ImageNotFound

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import image_sync as mod
from ansible_collections.dgxspark.vllm.plugins.module_utils import _relay as u

ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64
SIZE = 300_000_000


def inspect_answer(ref_id=None, free=100_000_000_000, store="graphdriver"):
    ref = None if ref_id is None else {"id": ref_id, "repo_digests": [], "content_label": None, "size": SIZE}
    return {"v": 1, "ok": True, "protocol": 1, "store": store, "free_bytes": free, "docker_root": "/var/lib/docker",
            "ref_image": ref, "id_image": ref if ref_id == ID_A else None}


class FakeHop:
    """Records the header and the stream; answers like a relay chain whose members all load the image."""

    instances: list = []
    report_after = False

    def __init__(self, argv, header, names, fail=()):
        self.argv, self.header, self.names = argv, header, names
        self.data = b""
        self.error = None
        self.err = b""
        self.lines = []
        self.fail = fail
        self.proc = mock.Mock(returncode=0)
        FakeHop.instances.append(self)

    @property
    def alive(self):
        return True

    def write(self, *parts):
        self.data += b"".join(bytes(part) for part in parts)

    def kill(self):
        pass

    def finish(self, timeout):
        for name in self.names:
            ok = name not in self.fail
            line = {"name": name, "ok": ok, "bytes": 6, "seconds": 0.5, "action": "transfer"}
            if not ok:
                line["error"] = "docker load failed: unexpected EOF"
            elif FakeHop.report_after:
                line["after"] = {"store": "graphdriver", "ref_image": inspect_answer(ID_A)["ref_image"]}
            self.lines.append(json.dumps(line))
        return 0

    def stderr_text(self):
        return ""


def run(capsys, args, answers_before, answers_after=None, check=False, fail=(), source_error=None, exists=True,
        report_after=False):
    api = mock.Mock()
    if source_error:
        api.inspect_image.side_effect = source_error
    else:
        api.inspect_image.return_value = {"Id": ID_A, "RepoDigests": [], "Size": SIZE, "Config": {"Labels": {}}}
    api.info.return_value = {"Driver": "overlay2", "DriverStatus": []}
    api.get_image.return_value = iter([b"abc", b"def"])
    calls = []
    after = answers_after or {}

    def fake_request(argv, header, timeout):
        host = argv[-2]
        calls.append((host, header["op"]))
        if header["op"] == "tag":
            return {"v": 1, "ok": True, "action": "tag"}, ""
        phase = answers_before if sum(1 for c in calls if c == (host, "inspect")) == 1 else after
        return phase[host], ""

    FakeHop.instances = []
    FakeHop.report_after = report_after
    module_args = dict(args)
    if check:
        module_args["_ansible_check_mode"] = True
    with patch_module_args(module_args), \
            mock.patch.object(mod.docker, "APIClient", return_value=api), \
            mock.patch.object(mod, "request", side_effect=fake_request) as request_mock, \
            mock.patch.object(u, "request", request_mock), \
            mock.patch.object(mod, "Hop", side_effect=lambda a, h, n: FakeHop(a, h, n, fail)), \
            mock.patch.object(mod.os.path, "exists", return_value=exists), \
            mock.patch.object(AnsibleModule, "warn") as warn:
        with pytest.raises(SystemExit) as exc:
            mod.main()
    return json.loads(capsys.readouterr().out), exc.value.code, api, calls, warn


ARGS = {"image": "vllm-node:latest",
        "targets": [{"host": "10.0.0.2", "name": "n2"}, {"host": "10.0.0.3", "name": "n3"}]}


def test_identical_everywhere_reads_nothing(capsys):
    result, code, api, calls, _w = run(capsys, ARGS, {"10.0.0.2": inspect_answer(ID_A), "10.0.0.3": inspect_answer(ID_A)})
    assert code == 0 and result["changed"] is False
    assert [t["action"] for t in result["targets"]] == ["skip", "skip"]
    api.get_image.assert_not_called()
    assert sorted(calls) == [("10.0.0.2", "inspect"), ("10.0.0.3", "inspect")]
    assert FakeHop.instances == [] and result["bytes_sent"] == 0


def test_relay_sends_once_through_a_chain_and_verifies(capsys):
    before = {"10.0.0.2": inspect_answer(None), "10.0.0.3": inspect_answer(ID_B)}
    after = {"10.0.0.2": inspect_answer(ID_A), "10.0.0.3": inspect_answer(ID_A)}
    result, code, api, _calls, _w = run(capsys, ARGS, before, after)
    assert code == 0 and result["changed"] is True
    api.get_image.assert_called_once_with(ID_A, chunk_size=u.CHUNK)  # by ID: the archive carries no tag
    assert len(FakeHop.instances) == 1
    hop = FakeHop.instances[0]
    assert hop.argv[-2] == "10.0.0.2"
    assert hop.header["next"] == [{"host": "10.0.0.3", "port": 22, "name": "n3"}]
    assert hop.data == u.frame(b"abcdef") + u.end_mark(6)  # the SDK's pieces are gathered into frames of u.CHUNK
    assert result["bytes_sent"] == 6
    assert [(t["name"], t["action"], t["bytes"], t["mb_per_s"], t["before_id"], t["after_id"]) for t in result["targets"]] == [
        ("n2", "transfer", 6, 0.0, None, ID_A), ("n3", "transfer", 6, 0.0, ID_B, ID_A)]
    assert result["diff"] == {"before": {"n2": None, "n3": ID_B}, "after": {"n2": ID_A, "n3": ID_A}}


def test_parallel_strategy_opens_one_stream_per_target(capsys):
    before = {"10.0.0.2": inspect_answer(None), "10.0.0.3": inspect_answer(None)}
    after = {"10.0.0.2": inspect_answer(ID_A), "10.0.0.3": inspect_answer(ID_A)}
    result, code, _api, _calls, _w = run(capsys, dict(ARGS, strategy="parallel"), before, after)
    assert code == 0
    assert [h.argv[-2] for h in FakeHop.instances] == ["10.0.0.2", "10.0.0.3"]
    assert all(h.header["next"] == [] for h in FakeHop.instances)
    assert result["bytes_sent"] == 6


def test_check_mode_reports_and_moves_nothing(capsys):
    before = {"10.0.0.2": inspect_answer(ID_A), "10.0.0.3": inspect_answer(None)}
    result, code, api, _calls, _w = run(capsys, ARGS, before, check=True)
    assert code == 0 and result["changed"] is True
    assert [(t["action"], t["bytes"]) for t in result["targets"]] == [("skip", 0), ("transfer", SIZE)]
    api.get_image.assert_not_called()
    assert FakeHop.instances == []


def test_disk_preflight_fails_naming_the_node_and_sends_nothing(capsys):
    before = {"10.0.0.2": inspect_answer(None, free=1_000_000_000), "10.0.0.3": inspect_answer(None)}
    result, code, api, _calls, _w = run(capsys, dict(ARGS, min_free_bytes=1_000_000_000), before)
    assert code == 1 and result["failed"] is True
    assert result["msg"] == ("not enough disk space for the image; nothing was sent to any node: n2: 1.0 GB free on its "
                             "Docker root /var/lib/docker, but the image needs 1.3 GB (300.0 MB image + 1.0 GB headroom)")
    api.get_image.assert_not_called()
    assert FakeHop.instances == []


def test_a_failed_load_fails_and_keeps_the_old_tag(capsys):
    before = {"10.0.0.2": inspect_answer(ID_B), "10.0.0.3": inspect_answer(None)}
    after = {"10.0.0.2": inspect_answer(ID_B), "10.0.0.3": inspect_answer(ID_A)}
    result, code, _api, _calls, _w = run(capsys, ARGS, before, after, fail=("n2",))
    assert code == 1
    assert result["msg"].startswith("vllm-node:latest did not reach every target (their previous tags are unchanged")
    assert "n2: docker load failed: unexpected EOF" in result["msg"]
    assert [(t["name"], t["action"], t["after_id"]) for t in result["targets"]] == [
        ("n2", "failed", ID_B), ("n3", "transfer", ID_A)]


def test_verification_after_the_transfer_catches_a_wrong_image(capsys):
    before = {"10.0.0.2": inspect_answer(None), "10.0.0.3": inspect_answer(ID_A)}
    after = {"10.0.0.2": inspect_answer(ID_B)}
    result, code, _api, _calls, _w = run(capsys, ARGS, before, after)
    assert code == 1
    assert result["targets"][0]["error"] == f"verification after the transfer failed: vllm-node:latest is {ID_B} on n2"


def test_tag_only_moves_no_bytes(capsys):
    tagged = inspect_answer(ID_B)
    tagged["id_image"] = {"id": ID_A, "repo_digests": [], "content_label": None, "size": SIZE}
    before = {"10.0.0.2": tagged, "10.0.0.3": inspect_answer(ID_A)}
    after = {"10.0.0.2": inspect_answer(ID_A)}
    result, code, api, calls, _w = run(capsys, ARGS, before, after)
    assert code == 0 and result["changed"] is True
    assert ("10.0.0.2", "tag") in calls
    api.get_image.assert_not_called()
    assert [t["action"] for t in result["targets"]] == ["tag", "skip"]


def test_unreachable_target_fails_before_anything_moves(capsys):
    before = {"10.0.0.2": {"v": 1, "ok": False, "error": "Permission denied (publickey)"}, "10.0.0.3": inspect_answer(None)}
    result, code, api, _calls, _w = run(capsys, ARGS, before)
    assert code == 1 and "n2: Permission denied (publickey)" in result["msg"] and "node_trust" in result["msg"]
    api.get_image.assert_not_called()


def test_missing_source_image_and_missing_trust(capsys):
    result, code, *_rest = run(capsys, ARGS, {}, source_error=ImageNotFound("nope"))
    assert code == 1 and result["msg"].startswith("the image vllm-node:latest is not on the source's engine")
    result, code, *_rest = run(capsys, ARGS, {}, exists=False)
    assert code == 1 and result["msg"] == ("/etc/dgxspark/transfer/id_ed25519 does not exist on the source: set up the "
                                           "fleet's transfer trust first (role dgxspark.vllm.node_trust)")


def test_duplicate_target_names_are_refused(capsys):
    args = {"image": "i:1", "targets": [{"host": "10.0.0.2", "name": "n"}, {"host": "10.0.0.3", "name": "n"}]}
    result, code, *_rest = run(capsys, args, {})
    assert code == 1 and result["msg"] == "targets must have distinct names (got n, n)"


def test_store_mismatch_without_label_warns(capsys):
    before = {"10.0.0.2": inspect_answer(ID_A, store="containerd"), "10.0.0.3": inspect_answer(ID_A)}
    result, code, _api, _calls, warn = run(capsys, ARGS, before, check=True)
    assert code == 0 and [t["action"] for t in result["targets"]] == ["skip", "skip"]
    assert warn.call_count == 1 and "containerd image store" in warn.call_args[0][0]


def test_a_receive_that_reports_where_the_image_stands_is_not_asked_again(capsys):
    before = {"10.0.0.2": inspect_answer(None), "10.0.0.3": inspect_answer(ID_B)}
    after = {"10.0.0.3": inspect_answer(ID_B)}
    result, code, _api, calls, _w = run(capsys, ARGS, before, after, fail=("n3",), report_after=True)
    assert code == 1 and [t["action"] for t in result["targets"]] == ["transfer", "failed"]
    # n2 reported where its image stands at the end of the receive; only n3 (a failed receive) is asked again
    assert calls.count(("10.0.0.2", "inspect")) == 1 and calls.count(("10.0.0.3", "inspect")) == 2
    assert [t["after_id"] for t in result["targets"]] == [ID_A, ID_B]


def test_save_stream_directly_or_through_a_temporary_file(tmp_path):
    api = mock.Mock()
    api.get_image.return_value = iter([b"abc", b"def"])
    reader, path = mod.save_stream(api, ID_A, False, str(tmp_path))
    assert path is None and [bytes(buf[:n]) for buf in [memoryview(bytearray(8))] for n in [u.read_full(reader, buf)]] == [b"abcdef"]
    api.get_image.return_value = iter([b"abc", b"def"])
    reader, path = mod.save_stream(api, ID_A, True, str(tmp_path))
    with reader:
        assert reader.read() == b"abcdef" and path.startswith(str(tmp_path))
    api.get_image.assert_called_with(ID_A, chunk_size=u.CHUNK)


class FakeWatch:
    """Stands in for ControllerWatch: the test decides when the lease lapses (calls on_lost)."""

    last = None

    def __init__(self, on_lost, lease=None, stdout=False, lease_seen=False):
        self.on_lost, self.lease, self.stdout, self.lease_seen = on_lost, lease, stdout, lease_seen
        FakeWatch.last = self

    def start(self):
        pass

    def stop(self):
        pass


def test_a_lapsed_lease_kills_the_streams_and_fails_cancelled(capsys, tmp_path):
    """Issue 15: Ctrl-C on the play ended the controller while the transfer ran on to completion on the nodes."""
    killed = []

    class LapsingHop(FakeHop):
        def write(self, *parts):
            super().write(*parts)
            if not killed:
                FakeWatch.last.on_lost("cancelled: the controller stopped following the transfer (its lease was not "
                                       "renewed for 5 s)")

        def kill(self):
            killed.append(self.names)
            self.error = "killed"

        @property
        def alive(self):
            return self.error is None

    lease = tmp_path / "s.json.lease"
    api = mock.Mock()
    api.inspect_image.return_value = {"Id": ID_A, "RepoDigests": [], "Size": SIZE, "Config": {"Labels": {}}}
    api.info.return_value = {"Driver": "overlay2", "DriverStatus": []}
    api.get_image.return_value = iter([b"abc", b"def"])
    asked = []

    def fake_request(argv, header, timeout):
        asked.append((argv[-2], header["op"]))
        return inspect_answer(None), ""

    args = dict(ARGS, lease_file=str(lease), lease_timeout=5, status_file=str(tmp_path / "s.json"))
    with patch_module_args(args), mock.patch.object(mod.docker, "APIClient", return_value=api), \
            mock.patch.object(mod, "request", side_effect=fake_request) as request_mock, \
            mock.patch.object(u, "request", request_mock), \
            mock.patch.object(mod, "Hop", side_effect=LapsingHop), \
            mock.patch.object(mod, "ControllerWatch", FakeWatch), mock.patch.object(mod.Cancel, "GRACE", 3600), \
            mock.patch.object(mod.os.path, "exists", return_value=True), pytest.raises(SystemExit) as exc:
        mod.main()
    result = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1 and killed == [["n2", "n3"]]
    assert FakeWatch.last.lease == (str(lease), 5) and lease.exists()  # the run took its lease at its start
    assert FakeWatch.last.lease_seen  # so the lease gone at the watch's first look was removed
    assert result["msg"].startswith("cancelled: the controller stopped following the transfer"), result["msg"]
    assert "every target was left as it was" in result["msg"]
    assert sorted(asked) == [("10.0.0.2", "inspect"), ("10.0.0.3", "inspect")]  # no verification round after the cut
    assert [t["action"] for t in result["targets"]] == ["failed", "failed"]
    status = json.loads((tmp_path / "s.json").read_text())
    assert status["done"] is True and status["error"].startswith("cancelled:")


def test_a_job_whose_lease_was_marked_before_it_started_sends_nothing(capsys, tmp_path):
    """The play was interrupted while the job was being started: the follower marked the lease (epoch time, the file
    created) before the job took it. The job ends at once, cancelled, and asks no target anything."""
    lease = tmp_path / "s.json.lease"
    lease.touch()
    mod.os.utime(lease, (0, 0))
    api = mock.Mock()
    api.inspect_image.return_value = {"Id": ID_A, "RepoDigests": [], "Size": SIZE, "Config": {"Labels": {}}}
    api.info.return_value = {"Driver": "overlay2", "DriverStatus": []}
    args = dict(ARGS, lease_file=str(lease), lease_timeout=5, status_file=str(tmp_path / "s.json"))
    with patch_module_args(args), mock.patch.object(mod.docker, "APIClient", return_value=api), \
            mock.patch.object(mod, "request", side_effect=AssertionError("a target was asked")) as request_mock, \
            mock.patch.object(u, "request", request_mock), \
            mock.patch.object(mod, "Hop", side_effect=AssertionError("a stream was opened")), \
            mock.patch.object(mod.os.path, "exists", return_value=True), pytest.raises(SystemExit) as exc:
        mod.main()
    result = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1 and result["msg"].startswith(
        "cancelled: the controller stopped following the transfer before it started"), result["msg"]
    assert mod.os.stat(lease).st_mtime == 0  # the mark stays


def test_the_archive_of_a_killed_run_is_found_by_its_pid(tmp_path):
    """Finding 7: a tmp_tar of a killed run stayed in /var/tmp for good."""
    for name in ("image_sync-111-ab.tar", "image_sync-222-cd.tar", f"image_sync-{mod.os.getpid()}-ef.tar",
                 "image_sync-xyz.tar", "image_sync-333-gh.tmp", "other-111-x.tar"):
        (tmp_path / name).write_bytes(b"x")
    stale = mod.stale_tmp_tars(str(tmp_path), alive=lambda pid: pid == 222)
    assert stale == [str(tmp_path / "image_sync-111-ab.tar")]
    assert mod.stale_tmp_tars(str(tmp_path / "absent")) == []
