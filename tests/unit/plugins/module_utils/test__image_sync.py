# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the pure logic of image_sync: identity, plan, relay argv and headers, framing, progress."""

from __future__ import annotations

import io
import json
import os
import random
import struct
import tarfile

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _image_sync as img, _relay as u
from ansible_collections.dgxspark.vllm.tests.unit.plugins.module_utils.test__announce import pax_sized

s = img

ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64
SRC = {"id": ID_A, "repo_digests": [], "content_label": None, "size": 10_000_000_000}

INFO_GRAPH = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"], ["Supports d_type", "true"]]}
INFO_CONTAINERD = {"Driver": "overlayfs", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}


def answer(ref_id=None, store="graphdriver", free=100_000_000_000, id_image=None, label=None, digests=None):
    ref = None if ref_id is None else {"id": ref_id, "repo_digests": digests or [], "content_label": label, "size": 1}
    return {"ok": True, "protocol": 1, "store": store, "free_bytes": free, "docker_root": "/var/lib/docker",
            "ref_image": ref, "id_image": id_image}


def test_store_of_docker_info():
    assert u.store_of(INFO_GRAPH) == "graphdriver"
    assert u.store_of(INFO_CONTAINERD) == "containerd"
    assert u.store_of({"Driver": "vfs", "DriverStatus": None}) == "graphdriver"


def test_image_summary_reads_id_digests_label_and_size():
    attrs = {"Id": ID_A, "RepoDigests": ["r@sha256:" + "c" * 64], "Size": 42,
             "Config": {"Labels": {u.CONTENT_LABEL: "patch-1", "other": "x"}}}
    assert u.image_summary(attrs) == {"id": ID_A, "repo_digests": ["r@sha256:" + "c" * 64], "content_label": "patch-1",
                                      "fingerprint": None, "size": 42}  # no layers: nothing to fingerprint
    assert u.image_summary(None) is None
    assert u.image_summary({"Id": ID_A, "Config": {"Labels": None}})["content_label"] is None


def test_identity_same_store_compares_ids():
    assert img.identity(SRC, "graphdriver", answer(ID_A), "img:1", "n2") == (True, "same image ID", None)
    assert img.identity(SRC, "graphdriver", answer(ID_B), "img:1", "n2") == (False, f"img:1 is {ID_B} on n2", None)
    assert img.identity(SRC, "graphdriver", answer(None), "img:1", "n2") == (False, "img:1 is not on n2", None)


def test_identity_across_stores_uses_label_then_digests_then_warns():
    labelled = dict(SRC, content_label="p1")
    assert img.identity(labelled, "graphdriver", answer(ID_B, "containerd", label="p1"), "i", "n") == (
        True, f"same {u.CONTENT_LABEL} label", None)
    assert img.identity(labelled, "graphdriver", answer(ID_A, "containerd", label="p2"), "i", "n")[0] is False
    digested = dict(SRC, repo_digests=["r@sha256:" + "d" * 64])
    assert img.identity(digested, "graphdriver", answer(ID_B, "containerd", digests=["r@sha256:" + "d" * 64]), "i", "n") == (
        True, "same repo digest r@sha256:" + "d" * 64, None)
    same, reason, warning = img.identity(SRC, "graphdriver", answer(ID_B, "containerd"), "i", "n")
    assert (same, reason) == (False, f"i is {ID_B} on n (different stores)")
    assert warning.startswith("n: its engine uses the containerd image store and the source the graphdriver store")


def test_need_bytes_doubles_for_containerd():
    assert img.need_bytes(10, "graphdriver", 5) == 15
    assert img.need_bytes(10, "containerd", 5) == 25


def test_plan_skip_tag_transfer_and_disk():
    targets = [{"name": "n2", "host": "10.0.0.2"}, {"name": "n3", "host": "10.0.0.3", "port": 2222},
               {"name": "n4", "host": "10.0.0.4"}, {"name": "n5", "host": "10.0.0.5"}]
    answers = {"n2": answer(ID_A), "n3": answer(ID_B, id_image={"id": ID_A}), "n4": answer(None),
               "n5": answer(None, free=12_000_000_000)}
    entries, disk, warnings = img.plan(SRC, "graphdriver", "img:1", targets, answers, 5_000_000_000)
    assert [e["action"] for e in entries] == ["skip", "tag", "transfer", "transfer"]
    assert entries[1]["port"] == 2222 and entries[1]["before_id"] == ID_B
    assert entries[2]["need_bytes"] == 15_000_000_000
    assert disk == ["n5: 12.0 GB free on its Docker root /var/lib/docker, but the image needs 15.0 GB "
                    "(10.0 GB image + 5.0 GB headroom)"]
    assert warnings == []


def test_plan_by_image_id_never_tags():
    entries, _disk, _w = img.plan(SRC, "graphdriver", ID_A, [{"name": "n2", "host": "h"}],
                                  {"n2": answer(None, id_image={"id": ID_A})}, 0)
    assert entries[0]["action"] == "transfer"


def test_ssh_argv_is_strict_and_shell_free():
    argv = u.ssh_argv({"host": "192.168.100.12", "port": 2222}, "/k", "/kh", "root", 7)
    assert argv[0] == "ssh" and argv[-3:] == ["--", "192.168.100.12", "dgxspark-transfer"]
    assert argv[1:3] == ["-F", "none"]  # no ssh_config can add a ProxyCommand, a LocalCommand or another key
    assert "StrictHostKeyChecking=yes" in argv and "UserKnownHostsFile=/kh" in argv and "BatchMode=yes" in argv
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == "/k"
    assert "ConnectTimeout=7" in argv and not any("StrictHostKeyChecking=no" in a for a in argv)


def test_chains_and_headers():
    entries = [{"name": f"n{i}", "host": f"h{i}", "port": 22} for i in (2, 3, 4)]
    relay = img.chains(entries, "relay")
    assert [[e["name"] for e in c] for c in relay] == [["n2", "n3", "n4"]]
    assert [[e["name"] for e in c] for c in img.chains(entries, "parallel")] == [["n2"], ["n3"], ["n4"]]
    assert img.chains([], "relay") == []
    # A chain never leaves a cluster: the source sends once per cluster, each chain in the targets' order.
    fleet = [{"name": n, "cluster": c} for n, c in (("a2", "pa"), ("b1", "pb"), ("a3", "pa"), ("b2", "pb"))]
    assert [[e["name"] for e in c] for c in img.chains(fleet, "relay")] == [["a2", "a3"], ["b1", "b2"]]
    nonce = "9" * 32
    header = img.receive_header(entries[0], entries[1:], "img:1", SRC, nonce)
    # The image and the announcement's nonce: no store, label or fingerprint of the sender's (security review H2).
    assert header == {"v": 1, "op": "receive", "name": "n2", "image_id": ID_A, "ref": "img:1", "nonce": nonce,
                      "next": [{"host": "h3", "port": 22, "name": "n3"}, {"host": "h4", "port": 22, "name": "n4"}]}
    assert img.receive_header(entries[0], [], ID_A, SRC, nonce)["ref"] is None
    assert img.inspect_header("img:1", ID_A) == {"v": 1, "op": "inspect", "image": "img:1", "image_id": ID_A}
    assert img.tag_header("img:1", ID_A, nonce) == {"v": 1, "op": "tag", "ref": "img:1", "image_id": ID_A, "nonce": nonce}


def test_framing():
    assert u.frame(b"abc") == struct.pack(">I", 3) + b"abc"
    assert u.end_mark(123) == struct.pack(">I", 0) + b'{"bytes": 123}\n'
    reader = u.IterReader([b"x" * 5, b"", b"y" * 2])
    buf = memoryview(bytearray(3))
    assert [bytes(buf[:n]) for n in iter(lambda: u.read_full(reader, buf), 0)] == [b"xxx", b"xxy", b"y"]


def test_parse_answers_and_first_answer():
    lines = ['{"name": "n2", "ok": true, "bytes": 5}\n', "garbage\n", '{"ok": false}\n', "\n"]
    by_name, junk = u.parse_answers(lines)
    assert by_name == {"n2": {"name": "n2", "ok": True, "bytes": 5}}
    assert junk == ["garbage", '{"ok": false}']
    assert u.first_answer(["noise", '{"ok": true}']) == {"ok": True}
    assert u.first_answer(["noise"]) is None


class FakeProc:
    def __init__(self, lines, error=None, rc=1, err=b""):
        self.lines, self.error, self.err = lines, error, err
        self.proc = type("P", (), {"returncode": rc})()

    def stderr_text(self):
        return self.err.decode()


def test_chain_results_names_missing_answers():
    proc = FakeProc(['{"name": "n2", "ok": true, "bytes": 9}'], error=None, rc=1, err=b"broken pipe")
    results = u.chain_results([(proc, [{"name": "n2"}, {"name": "n3"}])])
    assert results["n2"] == {"name": "n2", "ok": True, "bytes": 9}
    assert results["n3"] == {"name": "n3", "ok": False, "bytes": 0, "error": "no answer from n3 (ssh exited 1: broken pipe)"}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_accounting_and_throttled_status_file(tmp_path):
    clock = Clock()
    path = tmp_path / "status.json"
    progress = u.Progress(str(path), 200_000_000, ["n2", "n3"], clock=clock, interval=1.0)
    progress.set_phase("transfer")
    clock.now += 0.5
    progress.add(50_000_000)  # within the interval: not written
    assert json.loads(path.read_text())["bytes"] == 0
    clock.now += 0.5
    progress.add(50_000_000)
    data = json.loads(path.read_text())
    assert (data["bytes"], data["percent"], data["seconds"], data["mb_per_s"], data["done"]) == (
        100_000_000, 50.0, 1.0, 100.0, False)
    progress.add(150_000_000)
    assert progress.snapshot()["percent"] == 99.0  # never 100 % before the end
    assert progress.write(done=True)
    assert json.loads(path.read_text())["done"] is True and '"done": true' in path.read_text()


def test_progress_without_file_writes_nothing():
    progress = u.Progress(None, 0, [], clock=Clock())
    assert progress.write(force=True) is False
    assert progress.snapshot()["percent"] == 0.0


class Sink:
    def __init__(self):
        self.data, self.alive, self.writes = b"", True, []

    def write(self, *parts):
        self.writes.append(len(parts))
        self.data += b"".join(bytes(part) for part in parts)


def test_pump_sends_frames_of_the_chunk_size_once_and_marks_the_end():
    sinks = [Sink(), Sink()]
    progress = u.Progress(None, 10, ["a"], clock=Clock())
    assert u.pump(u.IterReader([b"ab", b"", b"cde"]), sinks, progress, size=4) == 5
    expected = u.frame(b"abcd") + u.frame(b"e") + u.end_mark(5)
    assert sinks[0].data == expected and sinks[1].data == expected
    assert sinks[0].writes == [2, 2, 1]  # header and data in one write, not joined
    assert progress.bytes == 5


def test_pump_reads_files_and_stops_when_every_hop_is_dead(tmp_path):
    path = tmp_path / "a.tar"
    path.write_bytes(b"0123456789")
    with open(path, "rb") as fh:
        sink = Sink()
        assert u.pump(fh, [sink], u.Progress(None, 10, [], clock=Clock()), size=3) == 10
    assert sink.data == b"".join(u.frame(p) for p in (b"012", b"345", b"678", b"9")) + u.end_mark(10)

    class Dead:
        alive = False

        def __init__(self):
            self.writes = 0

        def write(self, *_parts):
            self.writes += 1

    dead = Dead()
    assert u.pump(u.IterReader([b"a", b"b", b"c"]), [dead], u.Progress(None, 3, [], clock=Clock()), size=1) == 1
    assert dead.writes == 1  # no end mark after a dead hop


def test_write_all_writes_every_part_in_order():
    rfd, wfd = os.pipe()
    try:
        u.write_all(wfd, [b"head", memoryview(b"0123456789" * 3000)[:20_000], b"", bytearray(b"!")])
        got = b""
        while len(got) < 20_005:
            got += os.read(rfd, 1 << 16)
        assert got == b"head" + (b"0123456789" * 2000) + b"!"
    finally:
        os.close(rfd)
        os.close(wfd)


def test_mb_per_s_human_and_table():
    assert u.mb_per_s(100_000_000, 2.0) == 50.0 and u.mb_per_s(5, 0) == 0.0
    assert u.human(999) == "999 B" and u.human(1_500_000) == "1.5 MB" and u.human(73_336_115_200) == "73.3 GB"
    lines = u.table([{"name": "n2", "action": "transfer", "bytes": 10, "seconds": 1.25, "mb_per_s": 0.0}])
    assert lines[1].split() == ["n2", "transfer", "10", "1.2", "0.0"]
    rows = [{"name": "n2", "action": "sync", "files": ["a"], "bytes": 10, "seconds": 1.0, "mb_per_s": 0.0}]
    with_files = u.table(rows, files=True)
    assert with_files[0].split() == ["node", "action", "files", "bytes", "seconds", "MB/s"]
    assert with_files[1].split() == ["n2", "sync", "1", "10", "1.0", "0.0"]
    sized = u.table([{"name": "n2", "action": "transfer", "bytes": 25, "seconds": 1.0, "mb_per_s": 0.0}], size=1000)
    assert sized[0].split() == ["node", "action", "bytes", "of", "image", "seconds", "MB/s"]
    assert sized[1].split() == ["n2", "transfer", "25", "2.5%", "1.0", "0.0"]


# The same image as `docker image inspect` shows it under Docker 20.10's overlay2 and under Docker 26's containerd
# store (lab nodes of both kinds; trimmed): other IDs, the graph driver's build-container fields, null against empty.
LAYERS = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
GRAPH_ATTRS = {"Id": ID_A, "RepoTags": ["img:1"], "Created": "2026-12-03T10:54:37.123456789Z",
               "Architecture": "amd64", "Os": "linux", "RootFS": {"Type": "layers", "Layers": LAYERS},
               "Config": {"Hostname": "", "Domainname": "", "User": "", "AttachStdin": False, "Tty": False,
                          "Env": ["PATH=/usr/bin"], "Cmd": ["/bin/sh"], "Image": "sha256:" + "9" * 64,
                          "Volumes": None, "WorkingDir": "", "Entrypoint": None, "OnBuild": None,
                          "Labels": {"a": "b"}, "ExposedPorts": {"8000/tcp": {}}}}
CONTAINERD_ATTRS = {"Id": ID_B, "RepoTags": ["img:1"], "Created": "2026-12-03T10:54:37.123456789Z",
                    "Architecture": "amd64", "Os": "linux", "RootFS": {"Type": "layers", "Layers": LAYERS},
                    "Config": {"Env": ["PATH=/usr/bin"], "Cmd": ["/bin/sh"], "Labels": {"a": "b"},
                               "ExposedPorts": {"8000/tcp": {}}, "Volumes": {}, "WorkingDir": "",
                               "AttachStdout": False, "Image": ""}}


def test_fingerprint_is_the_same_under_both_stores_and_follows_content():
    mark = u.fingerprint(GRAPH_ATTRS)
    assert mark.startswith("sha256:") and len(mark) == 71
    assert u.fingerprint(CONTAINERD_ATTRS) == mark
    for change in ({"RootFS": {"Layers": LAYERS[:1]}}, {"Created": "2026-12-03T10:54:38Z"},
                   {"Architecture": "arm64"},
                   {"Config": dict(CONTAINERD_ATTRS["Config"], Env=["PATH=/usr/bin", "HF_HUB_OFFLINE=1"])},
                   {"Config": dict(CONTAINERD_ATTRS["Config"], Entrypoint=["/x"])},
                   {"Config": dict(CONTAINERD_ATTRS["Config"], Labels={"a": "c"})}):
        assert u.fingerprint(dict(CONTAINERD_ATTRS, **change)) != mark, change
    assert u.fingerprint({"Id": ID_A, "RootFS": {"Layers": []}}) is None


def test_identity_across_stores_by_fingerprint_when_unlabelled():
    src = dict(SRC, fingerprint=u.fingerprint(GRAPH_ATTRS))
    same = answer(ID_B, "containerd")
    same["ref_image"]["fingerprint"] = u.fingerprint(CONTAINERD_ATTRS)
    assert img.identity(src, "graphdriver", same, "i", "n") == (
        True, "same content (layers and configuration; different stores)", None)
    other = answer(ID_B, "containerd")
    other["ref_image"]["fingerprint"] = "sha256:" + "0" * 64
    assert img.identity(src, "graphdriver", other, "i", "n") == (
        False, "i on n has other content (different stores)", None)
    # A content label still decides first.
    labelled = dict(src, content_label="p1")
    assert img.identity(labelled, "graphdriver", other, "i", "n")[0] is False


# --- layer delta -------------------------------------------------------------------------------------------------

def _d(c):
    return "sha256:" + c * 64


def test_held_prefix_is_the_longest_chain_a_node_holds():
    layers = [_d("1"), _d("2"), _d("3")]
    assert u.held_prefix(layers, [[_d("1"), _d("9")], [_d("1"), _d("2")], []]) == 2
    assert u.held_prefix(layers, [[_d("2"), _d("3")]]) == 0  # the same layer on another base is another chain
    assert u.held_prefix(layers, [layers + [_d("4")]]) == 3
    assert u.held_prefix(layers, []) == 0


def test_a_layer_repeated_above_the_held_prefix_is_still_sent():
    layers = [_d("1"), _d("2"), _d("1"), _d("3")]
    assert s.skippable(layers, 2) == {"2" * 64}
    assert s.skippable(layers, 0) == set()


def test_the_stream_leaves_out_what_every_transferring_target_holds():
    entries = [{"action": "transfer", "held": 3}, {"action": "transfer", "held": 2}, {"action": "skip", "held": 0}]
    layers = [_d("1"), _d("2"), _d("3"), _d("4")]
    assert s.delta_plan(entries, layers) == {"held": 2, "skip": {"1" * 64, "2" * 64}}
    assert s.delta_plan([{"action": "transfer"}], layers) == {"held": 0, "skip": set()}  # an older program says nothing


def oci_archive(blobs, fmt=tarfile.PAX_FORMAT, extra=()):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in [("blobs/", None), ("blobs/sha256/", None)] + [("blobs/sha256/" + h, d) for h, d in blobs] + \
                [("index.json", b"{}"), ("manifest.json", b"[]"), ("oci-layout", b"{}")] + list(extra):
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


class Odd:
    """A reader that hands out its bytes in odd slices, as HTTP chunks come."""

    def __init__(self, data, seed):
        self.data, self.i, self.rng = data, 0, random.Random(seed)

    def readinto(self, view):
        n = min(len(view), self.rng.choice([1, 100, 511, 512, 513, 5000]), len(self.data) - self.i)
        view[:n] = self.data[self.i:self.i + n]
        self.i += n
        return n


def filtered(data, skip, seed=0):
    flt = s.LayerFilter(Odd(data, seed), skip, chunk=4096)
    out, buf = bytearray(), memoryview(bytearray(3000))
    while True:
        n = flt.readinto(buf)
        if not n:
            return flt, bytes(out)
        out += buf[:n]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("seed", range(3))
def test_the_filter_drops_the_held_blobs_and_passes_the_rest_unchanged(fmt, seed):
    base, top = random.Random(seed).randbytes(20000), b"new layer" * 100
    data = oci_archive([("a" * 64, base), ("b" * 64, top)], fmt, extra=[("d" * 120 + "/long", b"x")])
    flt, out = filtered(data, {"a" * 64}, seed)
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        members = {m.name: tar.extractfile(m).read() if m.isfile() else None for m in tar}
    assert "blobs/sha256/" + "a" * 64 not in members and members["blobs/sha256/" + "b" * 64] == top
    assert members["d" * 120 + "/long"] == b"x" and members["manifest.json"] == b"[]"
    assert flt.skipped == ["a" * 64] and flt.skipped_bytes == len(base) and flt.layout == "oci"
    assert len(data) - len(out) >= len(base)


def test_a_blob_sized_by_pax_is_dropped_whole():
    big = random.Random(1).randbytes(7000)
    data = pax_sized("blobs/sha256/" + "a" * 64, big) + oci_archive([("b" * 64, b"top")])
    flt, out = filtered(data, {"a" * 64})
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        assert [m.name for m in tar if m.isfile()] == ["blobs/sha256/" + "b" * 64, "index.json", "manifest.json",
                                                       "oci-layout"]
    assert flt.skipped_bytes == 7000


def test_a_legacy_archive_passes_byte_for_byte():
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in [("1" * 64 + "/layer.tar", b"L" * 3000), ("c" * 64 + ".json", b"{}"), ("manifest.json", b"[]")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = out.getvalue()
    flt, passed = filtered(data, {"1" * 64})
    assert passed == data and flt.layout == "legacy" and not flt.skipped


def test_an_archive_cut_inside_a_member_is_an_error():
    data = oci_archive([("a" * 64, b"z" * 5000)])
    with pytest.raises(s.HostileArchive, match="ended inside a member"):
        filtered(data[:1500], set())
