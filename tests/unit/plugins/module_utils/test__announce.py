# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of module_utils/_announce: the announcements' grammar and the archive guard."""

from __future__ import annotations

import io
import json
import random
import re
import tarfile
import threading
import time

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _announce as a

ID = "sha256:" + "a" * 64
SHA = "b" * 64


def tar_bytes(members, fmt=tarfile.USTAR_FORMAT):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def feed_in_slices(data, seed):
    guard, rng, i = a.TarGuard(), random.Random(seed), 0
    while i < len(data):
        step = rng.choice([1, 7, 511, 512, 513, 4096])
        guard.feed(data[i:i + step])
        i += step
    return guard


def manifest(tags):
    return json.dumps([{"Config": "c.json", "RepoTags": tags, "Layers": ["l/layer.tar"]}]).encode()


@pytest.mark.parametrize("seed", range(4))
def test_an_archive_saved_by_id_passes_in_any_slicing(seed):
    data = tar_bytes([("l/layer.tar", b"x" * 3000), ("c.json", b"{}"), ("manifest.json", manifest(None)),
                      ("index.json", json.dumps({"manifests": [{"digest": "sha256:" + "c" * 64}]}).encode()),
                      ("repositories", b"{}")])
    assert feed_in_slices(data, seed).members == 5


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("seed", range(3))
def test_names_are_found_whatever_the_tar_dialect_and_slicing(fmt, seed):
    long_dir = "d" * 120  # past ustar's 100-byte name: GNU long names, pax headers or the ustar prefix
    data = tar_bytes([(f"{long_dir}/layer.tar", b"y" * 1500), ("./manifest.json", manifest(["evil:latest"]))], fmt)
    with pytest.raises(a.HostileArchive, match="RepoTags evil:latest"):
        feed_in_slices(data, seed)


def test_an_index_that_names_an_image_is_refused():
    index = {"manifests": [{"digest": "sha256:" + "c" * 64, "annotations": {"io.containerd.image.name": "docker.io/x:1"}}]}
    with pytest.raises(a.HostileArchive, match="index.json docker.io/x:1"):
        a.TarGuard().feed(tar_bytes([("index.json", json.dumps(index).encode())]))


def test_a_huge_or_broken_metadata_member_is_refused():
    with pytest.raises(a.HostileArchive, match="at most"):
        a.TarGuard(limit=10).feed(tar_bytes([("manifest.json", manifest(None))]))
    with pytest.raises(a.HostileArchive, match="not JSON"):
        a.TarGuard().feed(tar_bytes([("manifest.json", b"[{")]))
    header = bytearray(tar_bytes([("f", b"")])[:512])
    header[124:136] = b"zzzzzzzzzzz\0"
    with pytest.raises(a.HostileArchive, match="size field"):
        a.TarGuard().feed(bytes(header))


NONCE = "0123456789abcdef" * 2


def test_image_announcements_are_checked():
    text = a.images_text([{"ref": "reg:5000/vllm-node:26.01", "id": ID, "bytes": 5, "store": "containerd",
                           "fingerprint": "sha256:" + SHA}], NONCE, 1000)
    assert json.loads(text) == {"images": [{"bytes": 5, "id": ID, "ref": "reg:5000/vllm-node:26.01", "store": "containerd",
                                            "content_label": None, "fingerprint": "sha256:" + SHA}],
                                "nonce": NONCE, "expires": 1000}
    for bad, message in [
        ([{"ref": "x/UPPER", "id": ID}], "not an image reference"),
        ([{"ref": "a:1\n", "id": ID}], "not an image reference"),
        ([{"ref": "a:1", "id": ID + "\n"}], "sha256:<64 hex>"),
        ([{"ref": "a:1\nb", "id": ID}], "not an image reference"),
        ([{"ref": "a:1", "id": "sha256:xyz"}], "sha256:<64 hex>"),
        ([{"ref": "a:1", "id": ID, "bytes": -1}], "whole number"),
        ([{"ref": "a:1", "id": ID}, {"ref": "a:1", "id": ID}], "announced twice"),
        ([{"ref": "a:1", "id": ID, "store": "overlay"}], "store of a:1"),
        ([{"ref": "a:1", "id": ID, "fingerprint": "x"}], "fingerprint of a:1"),
        ([{"ref": "a:1", "id": ID, "content_label": ""}], "content label of a:1"),
    ]:
        with pytest.raises(a.NotAnnounced, match=message):
            a.images_text(bad, NONCE, 1000)
    for nonce in (None, "", "abc", NONCE.upper(), NONCE + "\n"):
        with pytest.raises(a.NotAnnounced, match="nonce"):
            a.images_text([{"ref": "a:1", "id": ID}], nonce, 1000)


def test_announced_image_and_files(tmp_path):
    with pytest.raises(a.NotAnnounced, match="was not announced"):
        a.announced_image(str(tmp_path), "a:1", ID, NONCE)
    (tmp_path / a.IMAGES_FILE).write_text(a.images_text([{"ref": "a:1", "id": ID, "bytes": 9}], NONCE, 2 ** 40))
    with pytest.raises(a.NotAnnounced, match="announced as"):
        a.announced_image(str(tmp_path), "a:1", "sha256:" + "f" * 64, NONCE)
    assert a.announced_image(str(tmp_path), "a:1", ID, NONCE)["bytes"] == 9
    (tmp_path / a.IMAGES_FILE).write_text("{not json")
    with pytest.raises(a.NotAnnounced, match="cannot be read"):
        a.announced_image(str(tmp_path), "a:1", ID, NONCE)
    text = a.models_text(None, "m", {"config.json": {"size": 2, "sha256": SHA}})
    text = a.models_text(json.loads(text), "other", {"w.bin": {"size": 1, "sha256": SHA}})
    (tmp_path / a.MODELS_FILE).write_text(text)
    assert set(json.loads(text)["models"]) == {"m", "other"}
    assert a.announced_files(str(tmp_path), "m", [{"path": "config.json", "size": 2, "sha256": SHA}], ["old.bin"])
    for bad, message in [("../etc", "not a model directory"), ("m", None)]:
        if message:
            with pytest.raises(a.NotAnnounced, match=message):
                a.models_text(None, bad, {})
    for files, message in [({"../x": {"size": 1, "sha256": SHA}}, "not a relative path"),
                           ({"a/.hidden": {"size": 1, "sha256": SHA}}, "not a relative path"),
                           ({"x": {"size": 1, "sha256": "nope"}}, "64 hex")]:
        with pytest.raises(a.NotAnnounced, match=message):
            a.models_text(None, "m", files)


def pax_sized(name, data):
    """A member whose size is in a pax record and 0 in its header's field, as Go's archive/tar writes a member of 8 GiB
    and more (the octal field cannot hold it); here small, so the test stays small."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.pax_headers = {"size": str(len(data))}
    head = bytearray(info.tobuf(tarfile.PAX_FORMAT))
    head[-512 + 124:-512 + 136] = b"00000000000\0"
    return bytes(head) + data + b"\0" * (-len(data) % 512)


@pytest.mark.parametrize("seed", range(3))
def test_a_member_sized_by_pax_is_followed_to_the_manifest_after_it(seed):
    blob = random.Random(seed).randbytes(5000)  # header-like garbage if the guard took the size field's 0
    data = pax_sized("blobs/sha256/" + SHA, blob) + tar_bytes([("manifest.json", manifest(["evil:latest"]))])
    with pytest.raises(a.HostileArchive, match="RepoTags evil:latest"):
        feed_in_slices(data, seed)
    clean = pax_sized("blobs/sha256/" + SHA, blob) + tar_bytes([("manifest.json", manifest(None))])
    assert feed_in_slices(clean, seed).members == 3  # the pax header, the blob, the manifest


def test_h2_an_announcement_serves_one_request_with_its_nonce_before_it_expires(tmp_path):
    """Security review H2: the announcement never expired and anyone holding a transfer key could use it. Now a request
    needs the announcement's nonce, is refused once the announcement expired, and consumes its reference."""
    images = [{"ref": "a:1", "id": ID, "bytes": 9}, {"ref": "b:1", "id": ID, "bytes": 9}]
    (tmp_path / a.IMAGES_FILE).write_text(a.images_text(images, NONCE, 1000))
    for nonce in (None, "f" * 32, NONCE[:-1] + "0"):
        with pytest.raises(a.NotAnnounced, match="does not carry the nonce"):
            a.announced_image(str(tmp_path), "a:1", ID, nonce, now=10)
    with pytest.raises(a.NotAnnounced, match="expired"):
        a.announced_image(str(tmp_path), "a:1", ID, NONCE, now=1000)
    assert a.announced_image(str(tmp_path), "a:1", ID, NONCE, now=999)["ref"] == "a:1"
    with pytest.raises(a.NotAnnounced, match="was not announced"):
        a.announced_image(str(tmp_path), "a:1", ID, NONCE, now=999)  # one use
    assert [e["ref"] for e in json.loads((tmp_path / a.IMAGES_FILE).read_text())["images"]] == ["b:1"]
    assert (tmp_path / a.IMAGES_FILE).stat().st_mode & 0o777 == 0o600
    # An announcement written before nonces existed is refused: the controller announces anew.
    (tmp_path / a.IMAGES_FILE).write_text(json.dumps({"images": images}))
    with pytest.raises(a.NotAnnounced, match="does not carry the nonce"):
        a.announced_image(str(tmp_path), "b:1", ID, NONCE, now=10)


def raw_member(name, kind=tarfile.REGTYPE, data=b"", link=""):
    """One tar member with NAME as written (tarfile would normalise some forms), of KIND, with DATA or a LINK target."""
    info = tarfile.TarInfo("placeholder")
    info.type, info.size, info.linkname = kind, len(data), link
    head = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    raw = name.encode()
    head[0:100] = raw[:100].ljust(100, b"\0")
    if len(raw) > 100:  # the rest through the ustar prefix field: prefix/name
        prefix, rest = raw.rsplit(b"/", 1)
        head[0:100] = rest.ljust(100, b"\0")
        head[345:500] = prefix.ljust(155, b"\0")
    head[148:156] = b" " * 8
    head[148:156] = f"{sum(head):06o}\0 ".encode()
    return bytes(head) + data + b"\0" * (-len(data) % 512)


TAGGED = manifest(["victim:latest"])


@pytest.mark.parametrize("name", ["x/../manifest.json", "/manifest.json", "//manifest.json", "./x/./../manifest.json",
                                  "../manifest.json", "a/b/../../repositories", "/index.json",
                                  "p" * 60 + "/" + "q" * 60 + "/../../manifest.json"])
def test_h1_every_spelling_docker_cleans_to_a_watched_name_is_checked(name):
    """Security review H1: the guard compared member names literally; Docker cleans them (Go's path.Clean, leading
    slashes dropped). Each spelling here carries names of its own and is refused."""
    member = "repositories" if name.endswith("repositories") else "index.json" if name.endswith("index.json") else None
    data = {None: TAGGED, "repositories": json.dumps({"victim": {"latest": SHA}}).encode(),
            "index.json": json.dumps({"manifests": [{"annotations": {"org.opencontainers.image.ref.name": "latest"}}]}).encode()}[member]
    with pytest.raises(a.HostileArchive, match="names images of its own"):
        a.TarGuard().feed(raw_member(name, data=data) + b"\0" * 1024)


@pytest.mark.parametrize("members, message", [
    # a link named as a watched name, pointing at a tagged manifest elsewhere
    ([("evil.json", tarfile.REGTYPE, TAGGED, ""), ("manifest.json", tarfile.SYMTYPE, b"", "evil.json")], "symbolic link manifest.json"),
    ([("evil.json", tarfile.REGTYPE, TAGGED, ""), ("manifest.json", tarfile.LNKTYPE, b"", "evil.json")], "hard link manifest.json"),
    ([("evil.json", tarfile.REGTYPE, TAGGED, ""), ("x/../manifest.json", tarfile.SYMTYPE, b"", "evil.json")], "symbolic link manifest.json"),
    # a link to a watched name, and a directory link a later member goes through
    ([("l", tarfile.SYMTYPE, b"", "manifest.json")], "symbolic link l -> manifest.json"),
    ([("d/l", tarfile.SYMTYPE, b"", "../index.json")], "symbolic link d/l -> ../index.json"),
    ([("d", tarfile.SYMTYPE, b"", ".")], "symbolic link d -> ."),
    ([("d", tarfile.SYMTYPE, b"", "e"), ("d/manifest.json", tarfile.REGTYPE, TAGGED, "")], "goes through the link d"),
    # a watched name that is not a plain file
    ([("manifest.json", tarfile.DIRTYPE, b"", "")], "not a plain file"),
    ([("repositories", tarfile.FIFOTYPE, b"", "")], "not a plain file"),
])
def test_h1_links_at_or_to_a_watched_name_are_refused(members, message):
    data = b"".join(raw_member(n, k, d, lk) for n, k, d, lk in members) + b"\0" * 1024
    with pytest.raises(a.HostileArchive, match=re.escape(message)):
        a.TarGuard().feed(data)


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_h1_a_long_link_target_is_followed_in_every_dialect(fmt):
    target = "d" * 120 + "/../manifest.json"
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        info = tarfile.TarInfo("l")
        info.type, info.linkname = tarfile.SYMTYPE, target
        tar.addfile(info)
    with pytest.raises(a.HostileArchive, match="symbolic link l"):
        a.TarGuard().feed(out.getvalue())


def test_h1_the_links_docker_save_writes_pass():
    """Docker 25+ writes each legacy layer path as a link into blobs/, Docker 20 a repeated layer as a link to the
    first: neither is refused."""
    members = [("blobs/sha256/" + SHA, tarfile.REGTYPE, b"z" * 700, ""),
               ("abc/layer.tar", tarfile.SYMTYPE, b"", "../blobs/sha256/" + SHA),
               ("def/layer.tar", tarfile.SYMTYPE, b"", "../abc/layer.tar"),
               ("manifest.json", tarfile.REGTYPE, manifest(None), "")]
    guard = a.TarGuard()
    guard.feed(b"".join(raw_member(n, k, d, lk) for n, k, d, lk in members) + b"\0" * 1024)
    assert guard.members == 4


def test_h2_two_requests_racing_for_one_entry_get_it_once(tmp_path, monkeypatch):
    """One use holds when two requests (two senders with the transfer key) arrive together: the read, the checks and
    the taking of the entry happen under one lock, so the second request finds the entry gone."""
    (tmp_path / a.IMAGES_FILE).write_text(a.images_text([{"ref": "a:1", "id": ID, "bytes": 9}], NONCE, 2 ** 40))
    real = a.consume

    def slow_consume(*args):
        time.sleep(0.3)  # widens the window between the read and the write a lock must close
        real(*args)

    monkeypatch.setattr(a, "consume", slow_consume)
    outcomes = []

    def take():
        try:
            outcomes.append(a.announced_image(str(tmp_path), "a:1", ID, NONCE)["ref"])
        except a.NotAnnounced as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=take) for _thread in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(outcomes) == sorted(["a:1", f"a:1 -> {ID} was not announced to this node by the controller"])
