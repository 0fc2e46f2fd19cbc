# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of module_utils/_announce: the announcements' grammar and the archive guard."""

from __future__ import annotations

import io
import json
import random
import tarfile

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


def test_image_announcements_are_checked():
    text = a.images_text([{"ref": "reg:5000/vllm-node:26.01", "id": ID, "bytes": 5}])
    assert json.loads(text) == {"images": [{"bytes": 5, "id": ID, "ref": "reg:5000/vllm-node:26.01"}]}
    for bad, message in [
        ([{"ref": "x/UPPER", "id": ID}], "not an image reference"),
        ([{"ref": "a:1\n", "id": ID}], "not an image reference"),
        ([{"ref": "a:1", "id": ID + "\n"}], "sha256:<64 hex>"),
        ([{"ref": "a:1\nb", "id": ID}], "not an image reference"),
        ([{"ref": "a:1", "id": "sha256:xyz"}], "sha256:<64 hex>"),
        ([{"ref": "a:1", "id": ID, "bytes": -1}], "whole number"),
        ([{"ref": "a:1", "id": ID}, {"ref": "a:1", "id": ID}], "announced twice"),
    ]:
        with pytest.raises(a.NotAnnounced, match=message):
            a.images_text(bad)


def test_announced_image_and_files(tmp_path):
    with pytest.raises(a.NotAnnounced, match="was not announced"):
        a.announced_image(str(tmp_path), "a:1", ID)
    (tmp_path / a.IMAGES_FILE).write_text(a.images_text([{"ref": "a:1", "id": ID, "bytes": 9}]))
    assert a.announced_image(str(tmp_path), "a:1", ID)["bytes"] == 9
    with pytest.raises(a.NotAnnounced, match="announced as"):
        a.announced_image(str(tmp_path), "a:1", "sha256:" + "f" * 64)
    (tmp_path / a.IMAGES_FILE).write_text("{not json")
    with pytest.raises(a.NotAnnounced, match="cannot be read"):
        a.announced_image(str(tmp_path), "a:1", ID)
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
