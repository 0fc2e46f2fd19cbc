# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the image requests of dgxspark-transfer (the transfer key's forced command).

Every test runs twice (the fixture R, tests/unit/node_programs/conftest.py): against module_utils/_transfer_node and
against the built program. A receive runs against a fake Docker API, reading a framed stream.
"""

from __future__ import annotations

import io
import json
import os
import signal
import tarfile
import threading
import time

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _announce, _image_sync, _relay as u

ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64
NONCE = "5eed" * 8


CONFIG = {"key": "/etc/dgxspark/transfer/id_ed25519", "known_hosts": "/etc/dgxspark/transfer/known_hosts",
          "user": "root", "connect_timeout": 10}


def test_the_next_hop_is_reached_with_the_relays_ssh_argv(R):
    # One implementation: the program forwards with _relay's ssh argv and Hop (built: the same source).
    assert R.ssh_argv.__module__ == R.Hop.__module__ == u.__name__
    hop = R.forward({"next": [], "name": "n1"}, CONFIG, {})
    assert hop is None
    assert _image_sync.PROTOCOL in R.PROTOCOLS and R.CONTENT_LABEL == u.CONTENT_LABEL


def test_validate_request(R):
    req = R.validate_request({"v": 1, "op": "receive", "name": "n2", "image_id": ID_A, "ref": "reg:5000/a/b:1.0",
                              "nonce": NONCE, "next": [{"host": "10.0.0.3", "name": "n3"}]})
    assert req["next"] == [{"host": "10.0.0.3", "port": 22, "name": "n3"}]
    bad = [
        {"v": 1, "op": "receive", "image_id": ID_A, "ref": "a:1"},
        {"v": 1, "op": "tag", "image_id": ID_A, "ref": "a:1"},
        {"v": 1, "op": "tag", "image_id": ID_A, "ref": "a:1", "nonce": "xyz"},
        {"v": 3, "op": "inspect"},
        {"v": True, "op": "inspect"},
        {"v": 1, "op": "files_inspect", "model": "m"},
        {"v": 1, "op": "exec", "image_id": ID_A},
        {"v": 1, "op": "receive", "image_id": "sha256:xyz"},
        {"v": 1, "op": "receive"},
        {"v": 1, "op": "tag", "image_id": ID_A, "ref": ID_A},
        {"v": 1, "op": "inspect", "image": "UPPER;rm -rf /"},
        {"v": 1, "op": "receive", "image_id": ID_A, "next": [{"host": "-oProxyCommand=x"}]},
        {"v": 1, "op": "receive", "image_id": ID_A, "next": [{"host": "h", "port": 0}]},
        {"v": 1, "op": "receive", "image_id": ID_A, "next": [{"host": "h", "name": "a b"}]},
        {"v": 1, "op": "receive", "image_id": ID_A, "ref": "a:1", "fingerprint": "md5:abc"},
        {"v": 1, "op": "receive", "image_id": ID_A, "ref": "a:1", "fingerprint": ["sha256:" + "e" * 64]},
        {"v": 1, "op": "inspect", "image": "a:1", "layers": ["sha256:xyz"]},
        {"v": 1, "op": "inspect", "image": "a:1", "layers": "sha256:" + "e" * 64},
        {"v": 1, "op": "inspect", "image": "a:1", "layers": [ID_A] * (u.MAX_LAYERS + 1)},
        {"v": 1, "op": "receive", "image_id": ID_A, "ref": "a:1", "layers": [ID_A]},
    ]
    for item in bad:
        with pytest.raises(R.RequestError):
            R.validate_request(item)


def test_split_ref_and_next_header(R):
    assert R.split_ref("reg:5000/a/b") == ("reg:5000/a/b", "latest")
    assert R.split_ref("reg:5000/a/b:1.0") == ("reg:5000/a/b", "1.0")
    req = {"image_id": ID_A, "ref": "a:1", "content_label": None, "source_store": "graphdriver", "nonce": NONCE,
           "next": [{"host": "h3", "port": 22, "name": "n3"}, {"host": "h4", "port": 22, "name": "n4"}]}
    # The sender's word on the image's store, label or fingerprint is not passed on: each node verifies against what
    # the controller announced to it (security review H2).
    assert R.next_header(req) == {"v": 1, "op": "receive", "name": "n3", "image_id": ID_A, "ref": "a:1", "nonce": NONCE,
                                  "next": [{"host": "h4", "port": 22, "name": "n4"}]}


def test_loaded_ids_and_verify(R):
    events = [{"stream": "Loaded image ID: " + ID_A + "\n"}, {"stream": "Loaded image: a:1\n"}]
    assert R.loaded_ids(events) == ([ID_A], ["a:1"], None)
    assert R.loaded_ids([{"errorDetail": {"message": "no space left on device"}}]) == ([], [], "no space left on device")
    gd = {"id": ID_A, "store": "graphdriver"}
    assert R.verify_loaded(gd, "graphdriver", [ID_A], {}, None) is None
    assert R.verify_loaded({"id": ID_A}, "containerd", [ID_A], {}, None) is None  # no store announced: the ID decides
    assert R.verify_loaded(gd, "graphdriver", [ID_B], {}, None) == f"loaded image {ID_B} is not the announced {ID_A}"
    assert R.verify_loaded(gd, "graphdriver", [], {}, None) == "docker load reported no image"
    assert R.verify_loaded(gd, "graphdriver", [ID_A, ID_B], {}, None).startswith("docker load reported 2 images")
    labelled = dict(gd, content_label="p1")
    assert R.verify_loaded(labelled, "containerd", [ID_B], {R.CONTENT_LABEL: "p1"}, None) is None
    assert R.verify_loaded(labelled, "containerd", [ID_B], {}, None).startswith("loaded image lacks")
    # Across stores without a label, the announced content fingerprint decides (it is the same under both stores).
    mark, other = "sha256:" + "e" * 64, "sha256:" + "f" * 64
    marked = dict(gd, fingerprint=mark)
    assert R.verify_loaded(marked, "containerd", [ID_B], {}, mark) is None
    assert R.verify_loaded(marked, "containerd", [ID_B], {}, other) == (
        f"loaded image's content fingerprint {other} is not the announced {mark}")
    # Across stores with nothing to compare, the load cannot be verified: refused (it was accepted before).
    assert "cannot be verified" in R.verify_loaded(gd, "containerd", [ID_B], {}, mark)


def archive_names(data):
    """The names a whole archive's manifest.json gives (as docker load applies them: the member name cleaned)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                if _announce.clean_name(member.name) == "manifest.json" and member.isfile():
                    return [tag for item in json.load(tar.extractfile(member)) for tag in item.get("RepoTags") or []]
    except (tarfile.TarError, ValueError):
        pass
    return []


class FakeAPI:
    """The images and tags of a Docker engine, as far as a receive touches them. A load of a whole archive applies
    the names of its manifest.json, as docker load does."""

    def __init__(self, loaded_id=ID_A, fail=None):
        self.loaded_id, self.fail = loaded_id, fail
        self.received = b""
        self.held = {ID_B: ["docker.io/library/python:3"]}  # image ID -> its tags
        self.tags, self.removed = [], []

    def info(self):
        return {"Driver": "overlay2", "DriverStatus": []}

    def images(self, quiet=False, **_kw):
        if quiet:
            return list(self.held)
        return [{"Id": image, "RepoTags": list(tags) or None} for image, tags in self.held.items()]

    def load_image(self, data):
        for chunk in data:
            self.received += chunk  # copied before the next chunk is asked for, as an upload sends it
        if self.fail:
            return [{"error": self.fail}]
        self.held.setdefault(self.loaded_id, [])
        names = archive_names(self.received)
        for name in names:
            self._point(name, self.loaded_id)
        return [{"stream": f"Loaded image: {name}\n"} for name in names] or [
            {"stream": f"Loaded image ID: {self.loaded_id}\n"}]

    def inspect_image(self, ref):
        return {"Id": ref, "Config": {"Labels": {}}}

    def _point(self, ref, image):
        for tags in self.held.values():
            if ref in tags:
                tags.remove(ref)
        self.held.setdefault(image, []).append(ref)

    def tag(self, image, repo, tag, force):
        self.tags.append((image, repo, tag, force))
        self._point(f"{repo}:{tag}", image)

    def remove_image(self, image, force, noprune):
        self.removed.append(image)
        if image in self.held:
            del self.held[image]
        for tags in self.held.values():
            if image in tags:
                tags.remove(image)


def stream(payload, chunk=3, cut=None):
    data = b"".join(u.frame(payload[i:i + chunk]) for i in range(0, len(payload), chunk)) + u.end_mark(len(payload))
    return io.BytesIO(data if cut is None else data[:cut])


def archive(members=None, tags=None):
    """A tar stream shaped like `docker save` of an image by ID (layer, config, manifest.json without RepoTags)."""
    members = dict(members or {"abc/layer.tar": b"layer-bytes" * 50, "abc/json": b"{}", "cfg.json": b"{}"})
    members.setdefault("manifest.json", json.dumps([{"Config": "cfg.json", "RepoTags": tags,
                                                     "Layers": ["abc/layer.tar"]}]).encode())
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


PAYLOAD = archive()


def announce(directory, ref="a:1", image_id=ID_A, size=1 << 20, **identity):
    entry = {"ref": ref, "id": image_id, "bytes": size, "store": "graphdriver", **identity}
    (directory / _announce.IMAGES_FILE).write_text(_announce.images_text([entry], NONCE, int(time.time()) + 600))


def receive(R, api, source, capsys, tmp_path, ref="a:1", announced=True, **claims):
    """A receive of REF as ID_A (with the sender's CLAIMS in its header); the controller announced a:1 -> ID_A first
    unless ANNOUNCED is false."""
    if announced:
        announce(tmp_path)
    req = R.validate_request({"v": 1, "op": "receive", "name": "n2", "image_id": ID_A, "ref": ref, "nonce": NONCE,
                              **claims})
    try:
        rc = R.do_receive(api, req, {**CONFIG, "_dir": str(tmp_path)}, source)
    except (R.RequestError, ValueError) as exc:  # refused before the stream is read: main() answers with it
        return 1, [{"ok": False, "error": str(exc)}]
    return rc, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_receive_loads_verifies_then_tags(R, capsys, tmp_path):
    api = FakeAPI()
    rc, lines = receive(R, api, stream(PAYLOAD, chunk=700), capsys, tmp_path)
    assert rc == 0 and api.received == PAYLOAD
    assert api.tags == [(ID_A, "a", "1", True)]
    assert lines[0]["ok"] is True and lines[0]["bytes"] == len(PAYLOAD) and lines[0]["loaded_id"] == ID_A
    assert lines[0]["after"] == {"store": "graphdriver", "ref_image": {"id": "a:1", "repo_digests": [],
                                                                       "content_label": None, "fingerprint": None,
                                                                       "size": 0}}


def test_cut_stream_aborts_the_load_and_tags_nothing(R, capsys, tmp_path):
    api = FakeAPI()
    rc, lines = receive(R, api, stream(b"0123456789", cut=12), capsys, tmp_path)  # inside the second 3-byte frame
    assert rc == 1 and api.tags == []
    assert lines[0]["ok"] is False and lines[0]["error"].startswith("the image stream ended inside a frame after 3 bytes")
    rc, lines = receive(R, FakeAPI(), stream(b"0123456789", cut=14), capsys, tmp_path)  # after two whole frames
    assert rc == 1 and lines[0]["error"].startswith("the image stream ended after 6 bytes without its end mark")


def test_wrong_image_is_removed_and_not_tagged(R, capsys, tmp_path):
    other = "sha256:" + "c" * 64
    api = FakeAPI(loaded_id=other)
    rc, lines = receive(R, api, stream(b"abc"), capsys, tmp_path)
    assert rc == 1 and api.tags == [] and api.removed == [other]
    assert lines[0]["error"].startswith(f"verification failed: loaded image {other} is not the announced {ID_A}")


def test_load_error_is_reported(R, capsys, tmp_path):
    api = FakeAPI(fail="no space left on device")
    rc, lines = receive(R, api, stream(b"abc"), capsys, tmp_path)
    assert rc == 1 and api.tags == [] and lines[0]["error"] == "docker load failed: no space left on device"


def test_receive_reuses_a_few_buffers_for_many_frames(R, capsys, tmp_path):
    api = FakeAPI()
    payload = archive({"l/layer.tar": bytes(range(256)) * 40})
    rc, lines = receive(R, api, stream(payload, chunk=7), capsys, tmp_path)
    assert rc == 0 and api.received == payload and lines[0]["bytes"] == len(payload)


def test_write_all_and_read_full_move_every_byte():
    rfd, wfd = os.pipe()
    try:
        u.write_all(wfd, [b"head", memoryview(bytearray(b"data"))[:3], b"", b"!"])
        buf = bytearray(8)
        assert u.read_full(io.FileIO(rfd, closefd=False), memoryview(buf)) == 8 and bytes(buf) == b"headdat!"
        assert u.read_full(io.BytesIO(b"ab"), memoryview(bytearray(3))) == 2
        assert u.read_exact(io.BytesIO(b"abc"), 3) == b"abc" and u.read_exact(io.BytesIO(b"ab"), 3) is None
    finally:
        os.close(rfd)
        os.close(wfd)


# ---------------------------------------------------------------- what the controller did not announce is refused

def test_an_unannounced_receive_or_tag_is_refused_and_nothing_is_loaded(R, capsys, tmp_path):
    api = FakeAPI()
    rc, lines = receive(R, api, stream(PAYLOAD), capsys, tmp_path, announced=False)
    assert rc == 1 and "a:1 -> " + ID_A + " was not announced to this node" in lines[0]["error"]
    assert api.received == b"" and api.tags == []
    announce(tmp_path, ref="a:1", image_id=ID_B)  # the name, but another image
    rc, lines = receive(R, api, stream(PAYLOAD), capsys, tmp_path, announced=False)
    assert rc == 1 and f"a:1 was announced as {ID_B}, not {ID_A}" in lines[0]["error"] and api.received == b""
    # tag: only an announced name, pointed at its announced ID.
    for ref in ("docker.io/library/python:3", "a:1"):
        req = R.validate_request({"v": 1, "op": "tag", "image_id": ID_A, "ref": ref, "nonce": NONCE})
        with pytest.raises(ValueError, match="announced"):
            R.do_tag(api, req, {"_dir": str(tmp_path)})
    assert api.tags == []
    announce(tmp_path)
    api.held[ID_A] = []
    tag = R.validate_request({"v": 1, "op": "tag", "image_id": ID_A, "ref": "a:1", "nonce": NONCE})
    assert R.do_tag(api, tag, {"_dir": str(tmp_path)})["ok"] is True
    with pytest.raises(ValueError, match="was not announced"):  # one use
        R.do_tag(api, tag, {"_dir": str(tmp_path)})


def test_an_archive_that_names_images_is_refused_before_its_end_reaches_the_engine(R, capsys, tmp_path):
    hostile = archive(tags=["docker.io/library/python:3", "a:1"])
    api = FakeAPI()
    rc, lines = receive(R, api, stream(hostile, chunk=512), capsys, tmp_path)
    assert rc == 1 and "refused: the archive names images of its own (RepoTags docker.io/library/python:3" in lines[0]["error"]
    assert api.tags == [] and len(api.received) < len(hostile)  # the load never saw the archive's end
    legacy = archive({"repositories": json.dumps({"busybox": {"latest": "abc"}}).encode(), "abc/layer.tar": b"x"})
    rc, lines = receive(R, FakeAPI(), stream(legacy, chunk=100), capsys, tmp_path)
    assert rc == 1 and "repositories busybox" in lines[0]["error"]


def test_h1_a_name_spelled_as_docker_cleans_it_is_refused_before_the_end_reaches_the_engine(R, capsys, tmp_path):
    """Security review H1: x/../manifest.json passed the guard, and Docker applied its RepoTags."""
    hostile = archive({"abc/layer.tar": b"x" * 2000, "cfg.json": b"{}",
                       "x/../manifest.json": json.dumps([{"Config": "cfg.json", "RepoTags": ["docker.io/library/python:3"],
                                                          "Layers": ["abc/layer.tar"]}]).encode()})
    api = FakeAPI()
    rc, lines = receive(R, api, stream(hostile, chunk=512), capsys, tmp_path)
    assert rc == 1 and "RepoTags docker.io/library/python:3" in lines[0]["error"]
    assert api.tags == [] and len(api.received) < len(hostile)
    assert api.held == {ID_B: ["docker.io/library/python:3"]}


class BlindGuard:
    """A guard that misses every form: what the tag comparison after the load must catch on its own."""

    def feed(self, data):
        pass


def test_h1_tags_the_load_changed_are_put_back_and_the_transfer_fails_naming_them(R, capsys, tmp_path, monkeypatch):
    """Security review H1: whatever the guard misses, the engine's tags are compared before and after the load; every
    change (a moved tag, a new one) is put back, the images the load made are removed, and the error names them."""
    monkeypatch.setattr(R, "TarGuard", BlindGuard)
    hostile = archive(tags=["docker.io/library/python:3", "a:1"])
    api = FakeAPI()
    rc, lines = receive(R, api, stream(hostile, chunk=512), capsys, tmp_path)
    error = lines[0]["error"]
    assert rc == 1 and error.startswith("refused: the load changed tags the controller did not announce")
    assert f"docker.io/library/python:3 ({ID_B} -> {ID_A})" in error and f"a:1 (absent -> {ID_A})" in error
    assert "put back as they were" in error
    assert api.held == {ID_B: ["docker.io/library/python:3"]} and ID_A in api.removed


def test_h2_the_senders_claims_of_store_label_or_fingerprint_count_for_nothing(R, capsys, tmp_path, monkeypatch):
    """Security review H2: the receiver took the image store, content label and fingerprint from the sender's request,
    so a sender claiming another store made any image "verified". Now only the announcement counts."""
    other = "sha256:" + "c" * 64
    mark = "sha256:" + "e" * 64
    monkeypatch.setattr(R, "fingerprint", lambda attrs: mark)
    for claims in ({"source_store": "containerd"}, {"source_store": "evil"},
                   {"source_store": "containerd", "content_label": "x"}, {"source_store": "containerd", "fingerprint": mark}):
        api = FakeAPI(loaded_id=other)
        api.inspect_image = lambda ref: {"Id": ref, "Config": {"Labels": {R.CONTENT_LABEL: "x"}}}
        rc, lines = receive(R, api, stream(PAYLOAD), capsys, tmp_path, **claims)
        assert rc == 1 and f"loaded image {other} is not the announced {ID_A}" in lines[0]["error"], (claims, lines)
        assert api.tags == [] and api.removed == [other] and other not in api.held
    # Across stores, what the controller announced decides: its fingerprint, here the loaded image's.
    api = FakeAPI(loaded_id=other)
    announce(tmp_path, store="containerd", fingerprint=mark)
    rc, lines = receive(R, api, stream(PAYLOAD), capsys, tmp_path, announced=False)
    assert rc == 0 and api.tags == [(other, "a", "1", True)]
    # And with nothing to compare across stores, the load is refused and removed.
    api = FakeAPI(loaded_id=other)
    announce(tmp_path, store="containerd")
    rc, lines = receive(R, api, stream(PAYLOAD), capsys, tmp_path, announced=False)
    assert rc == 1 and "cannot be verified" in lines[0]["error"] and api.removed == [other] and api.tags == []


def test_a_stream_longer_than_announced_is_cut(R, capsys, tmp_path, monkeypatch):
    big = archive({"l/layer.tar": b"z" * 4096})
    announce(tmp_path, size=10)
    assert _announce.archive_limit({"bytes": 10 << 30}) == int((10 << 30) * 1.1) + (64 << 20)
    monkeypatch.setattr(R, "archive_limit", lambda entry: 1000)  # a margin small enough for this test's stream
    api = FakeAPI()
    rc, lines = receive(R, api, stream(big, chunk=512), capsys, tmp_path, announced=False)
    assert rc == 1 and "the stream passes 1000 bytes, more than the 10 bytes announced for a:1" in lines[0]["error"]
    assert api.tags == [] and len(api.received) <= 1000


def test_a_target_without_the_space_refuses_before_reading(R, capsys, tmp_path, monkeypatch):
    announce(tmp_path, size=1 << 40)
    api = FakeAPI()
    monkeypatch.setattr(R, "free_bytes", lambda _path: 1 << 30)
    rc, lines = receive(R, api, stream(PAYLOAD), capsys, tmp_path, announced=False)
    assert rc == 1 and "not enough space for a:1" in lines[0]["error"] and api.received == b""


class SilentSender:
    """The read end of a pipe whose writer sent PAYLOAD and then stays silent with the pipe open (a sender that hung
    or a link that went dark without a reset). A guard closes the writer after GUARD s, so a receiver without an idle
    deadline ends (with a cut-stream error, which the tests tell apart) instead of hanging the suite."""

    def __init__(self, payload, guard=10.0):
        read_fd, self.write_fd = os.pipe()
        os.write(self.write_fd, payload)
        self.reader = os.fdopen(read_fd, "rb")
        self.guard = threading.Timer(guard, self.close)
        self.guard.start()

    def close(self):
        try:
            os.close(self.write_fd)
        except OSError:
            pass

    def __enter__(self):
        return self.reader

    def __exit__(self, *_exc):
        self.guard.cancel()
        self.close()
        self.reader.close()


def test_a_silent_sender_is_aborted_after_the_idle_timeout(R, capsys, tmp_path):
    """Finding 8: a receiver blocked on a silent sender gave up only when TCP did (hours)."""
    api = FakeAPI()
    announce(tmp_path)
    whole = stream(b"0123456789").getvalue()
    req = R.validate_request({"v": 1, "op": "receive", "name": "n2", "image_id": ID_A, "ref": "a:1", "nonce": NONCE})
    with SilentSender(whole[:9]) as source:  # one whole frame and a part of the next
        began = time.monotonic()
        rc = R.do_receive(api, req, dict(CONFIG, idle_timeout=0.3, _dir=str(tmp_path)), source)
        took = time.monotonic() - began
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 1 and api.tags == [] and took < 5
    assert lines[0]["error"] == "no byte from the sender for 0.3 s (idle_timeout); the receive was aborted after 3 bytes"
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no timer left running


class LayeredAPI(FakeAPI):
    """An engine holding images by their layers (diff IDs, base first)."""

    def __init__(self, images):
        super().__init__()
        self.held = images

    def images(self, **_kw):
        return list(self.held)

    def inspect_image(self, ref):
        if ref not in self.held:
            raise NotFound(ref)
        return {"Id": ref, "Config": {"Labels": {}}, "RootFS": {"Type": "layers", "Layers": self.held[ref]}}


class NotFound(Exception):
    """As the docker SDK's ImageNotFound: an HTTP 404."""

    class response:  # pylint: disable=invalid-name,too-few-public-methods
        status_code = 404


def test_inspect_says_how_many_of_the_images_layers_the_node_holds_as_one_chain(R, monkeypatch):
    real = os.statvfs("/")
    monkeypatch.setattr(R.os, "statvfs", lambda _p: real)
    donor, other = [ID_A, ID_B], ["sha256:" + "c" * 64]
    api = LayeredAPI({"sha256:" + "1" * 64: donor, "sha256:" + "2" * 64: other})
    new = donor + ["sha256:" + "d" * 64]
    answer = R.do_inspect(api, R.validate_request({"v": 1, "op": "inspect", "image": "a:2", "layers": new}))
    assert answer["held"] == 2
    answer = R.do_inspect(api, R.validate_request({"v": 1, "op": "inspect", "image": "a:2", "layers": other[::-1] + new}))
    assert answer["held"] == 1
    assert "held" not in R.do_inspect(api, R.validate_request({"v": 1, "op": "inspect", "image": "a:2"}))
