# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _model_files: paths, manifests with the hash cache, completeness, diffs, plans, the download argv."""

from __future__ import annotations

import hashlib
import json
import os

import subprocess
import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _model_files as mf
from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import FRAME


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_model(root, files):
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


@pytest.mark.parametrize("rel", ["config.json", "sub/dir/a.safetensors", "Qwen3.5-122B-A10B-FP8", "a+b=c@d,e"])
def test_check_relpath_accepts_plain_paths(rel):
    assert mf.check_relpath(rel) == rel


@pytest.mark.parametrize("rel", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\\b", "a\x00b",
                                 ".hidden", "a/-rf", "x.dgxspark-part", ".dgxspark-manifest.json", None, 3,
                                 "/".join(["a"] * 17)])
def test_check_relpath_refuses(rel):
    with pytest.raises(mf.PathError):
        mf.check_relpath(rel)


def test_model_dir_and_target_file_refuse_symlink_escapes(tmp_path):
    root = tmp_path / "models"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    with pytest.raises(mf.PathError, match="outside the models root"):
        mf.model_dir(str(root), "escape")
    with pytest.raises(mf.PathError):
        mf.model_dir(str(root), "../outside")
    model = root / "m"
    model.mkdir()
    (model / "sub").symlink_to(outside)
    with pytest.raises(mf.PathError, match="outside"):
        mf.target_file(str(model), "sub/x.bin")
    (model / "link.bin").symlink_to(outside / "f")
    with pytest.raises(mf.PathError, match="symlink"):
        mf.target_file(str(model), "link.bin")
    assert mf.target_file(str(model), "new/dir/x.bin") == str(model / "new/dir/x.bin")
    assert mf.part_name(str(model / "a/b.bin")) == str(model / "a/.b.bin.dgxspark-part")


def test_manifest_hashes_once_then_uses_the_cache(tmp_path):
    model = make_model(tmp_path / "m", {"config.json": b"{}", "w/model.safetensors": b"x" * 1000})
    (model / ".cache" / "huggingface").mkdir(parents=True)
    (model / ".cache" / "huggingface" / "meta").write_text("ignored")
    (model / ".model.safetensors.dgxspark-part").write_bytes(b"partial")
    calls = []

    def hasher(path):
        calls.append(os.path.relpath(path, model))
        return mf.sha256_file(path)

    first = mf.manifest(str(model), hasher=hasher)
    assert first["files"] == {"config.json": {"size": 2, "sha256": sha(b"{}")},
                              "w/model.safetensors": {"size": 1000, "sha256": sha(b"x" * 1000)}}
    assert (first["hashed"], first["cached"], sorted(calls)) == (2, 0, ["config.json", "w/model.safetensors"])
    calls.clear()
    second = mf.manifest(str(model), hasher=hasher)
    assert second["files"] == first["files"] and (second["hashed"], second["cached"], calls) == (0, 2, [])
    # Same size, new content and mtime: hashed again.
    (model / "config.json").write_bytes(b"[]")
    os.utime(model / "config.json", ns=(1, 1))
    third = mf.manifest(str(model), hasher=hasher)
    assert calls == ["config.json"] and third["files"]["config.json"]["sha256"] == sha(b"[]")


def test_manifest_check_mode_does_not_write_the_cache(tmp_path):
    model = make_model(tmp_path / "m", {"a.bin": b"1"})
    mf.manifest(str(model), write_cache=False)
    assert not (model / mf.CACHE_NAME).exists()


def test_walk_reports_symlinks_leading_out(tmp_path):
    model = make_model(tmp_path / "m", {"a.bin": b"1"})
    (tmp_path / "secret").write_text("s")
    (model / "out.bin").symlink_to(tmp_path / "secret")
    (model / "in.bin").symlink_to(model / "a.bin")
    files, problems = mf.walk(str(model))
    assert files == ["a.bin", "in.bin"]
    assert problems == ["out.bin is a symlink that leads outside " + str(model)]


def test_completeness(tmp_path):
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    model = make_model(tmp_path / "m", {"config.json": b"{}", "model.safetensors.index.json": json.dumps(index).encode(),
                                        "model-00001-of-00002.safetensors": b"w"})
    files, _problems = mf.walk(str(model))
    assert mf.completeness(str(model), files) == ["model-00002-of-00002.safetensors"]
    (model / "model-00002-of-00002.safetensors").write_bytes(b"w")
    files, _problems = mf.walk(str(model))
    assert mf.completeness(str(model), files) == []
    (model / ".cache/huggingface/download").mkdir(parents=True)
    (model / ".cache/huggingface/download/x.incomplete").write_text("")
    assert mf.completeness(str(model), files) == ["unfinished download .cache/huggingface/download/x.incomplete"]
    assert mf.completeness(str(tmp_path / "none"), []) == [f"{tmp_path / 'none'} does not exist"]
    empty = tmp_path / "e"
    empty.mkdir()
    assert mf.completeness(str(empty), []) == ["config.json", "weight files (*.safetensors, *.bin, *.gguf ...)"]


def test_diff_and_plan():
    source = {"a": {"size": 10, "sha256": "1" * 64}, "b": {"size": 20, "sha256": "2" * 64}, "c": {"size": 5, "sha256": "3" * 64}}
    same = dict(source)
    changed = {"a": {"size": 10, "sha256": "1" * 64}, "b": {"size": 20, "sha256": "f" * 64}, "old": {"size": 1, "sha256": "0" * 64}}
    assert mf.diff(source, same) == ([], [])
    assert mf.diff(source, changed) == (["b", "c"], ["old"])
    targets = [{"host": "h2", "name": "n2"}, {"host": "h3", "name": "n3"}, {"host": "h4", "name": "n4"}]
    answers = {"n2": {"files": same, "free_bytes": 100, "path": "/m/x"},
               "n3": {"files": changed, "free_bytes": 100, "path": "/m/x"},
               "n4": {"files": {}, "free_bytes": 40, "path": "/m/x"}}
    entries, errors = mf.plan(source, targets, answers, min_free_bytes=10, delete_extra=False)
    assert [(e["action"], e["files"], e["bytes"], e["delete"]) for e in entries] == [
        ("skip", [], 0, []), ("sync", ["b", "c"], 25, []), ("sync", ["a", "b", "c"], 35, [])]
    assert entries[1]["reason"] == "1 file(s) missing, 1 different"
    assert errors == ["n4: 40 B free for /m/x, but the files need 45 B (35 B + 10 B headroom)"]
    entries, _errors = mf.plan(source, targets[1:2], answers, min_free_bytes=0, delete_extra=True)
    assert entries[0]["delete"] == ["old"] and entries[0]["reason"].endswith(", 1 extra to delete")
    files = mf.stream_files(source, entries)
    assert [f["path"] for f in files] == ["b", "c"]
    header = mf.receive_header("x", files, entries + [dict(entries[0], name="n5", host="h5", files=["c"], delete=[])])
    assert header["want"] == ["b", "c"] and header["delete"] == ["old"]
    assert header["next"] == [{"host": "h5", "port": 22, "name": "n5", "want": ["c"], "delete": []}]


def test_file_frames_never_cross_a_file(tmp_path):
    model = make_model(tmp_path / "m", {"a": b"x" * 5, "b": b"", "c": b"y" * 3})
    files = [{"path": p, "size": s, "sha256": ""} for p, s in (("a", 5), ("b", 0), ("c", 3))]
    frames = list(mf.file_frames(str(model), files, chunk=2))
    assert frames[:-1] == [FRAME.pack(2) + b"xx", FRAME.pack(2) + b"xx", FRAME.pack(1) + b"x",
                           FRAME.pack(2) + b"yy", FRAME.pack(1) + b"y"]
    assert frames[-1] == FRAME.pack(0) + b'{"bytes": 8}\n'
    (model / "c").write_bytes(b"y")
    with pytest.raises(OSError, match="shorter"):
        list(mf.file_frames(str(model), files))


REMOVING = ["/bin/sh", "-c", 'token=$1; shift; "$@"; rc=$?; rm -f -- "$token"; exit "$rc"', "dgxspark-hf-download"]


@pytest.mark.parametrize("cli_exit", [0, 3])
def test_l5_the_token_file_goes_when_the_download_ends_on_the_node_whatever_the_controller_does(tmp_path, cli_exit):
    """Security review L5: the token file was removed by the play (an always section), which a controller killed or
    cut off during the download never runs. The node's own command removes it now when the CLI ends, passing on the
    CLI's exit status; a token without a download leaves no wrapper."""
    token = tmp_path / "token"
    token.write_text("hf_not_a_real_token")
    cli = tmp_path / "hf"
    cli.write_text(f"#!/bin/sh\ntest -s \"$HF_TOKEN_PATH\" || exit 9\necho \"$@\" > {tmp_path}/asked\nexit {cli_exit}\n")
    cli.chmod(0o755)
    cmd = mf.download_command("Qwen/X", str(tmp_path / "X"), cli=str(cli), token_file=str(token), revision="main")
    proc = subprocess.run(cmd["argv"], env={**os.environ, **cmd["environment"]}, check=False)
    assert proc.returncode == cli_exit and not token.exists()
    assert (tmp_path / "asked").read_text().split() == ["download", "Qwen/X", "--local-dir", str(tmp_path / "X"),
                                                        "--revision", "main"]
    assert mf.download_command("Qwen/X", "/m/X")["argv"][0] == "hf"


def test_download_command_on_the_host_names_the_token_file_never_the_token():
    """Issue 15.4: Ansible prefixes a task's environment to the remote command (ps, -vvv): the token travels as a
    root-only file, the environment only names it (HF_TOKEN_PATH)."""
    cmd = mf.download_command("Qwen/Qwen3.5-122B-A10B-FP8", "/srv/m/Qwen3.5-122B-A10B-FP8",
                              token_file="/etc/dgxspark/hf/token", revision="main", include=["*.safetensors"],
                              exclude=["*.bin"])
    assert cmd["argv"] == [*REMOVING, "/etc/dgxspark/hf/token",
                           "hf", "download", "Qwen/Qwen3.5-122B-A10B-FP8", "--local-dir", "/srv/m/Qwen3.5-122B-A10B-FP8",
                           "--revision", "main", "--include", "*.safetensors", "--exclude", "*.bin"]
    assert cmd["environment"] == {"HF_TOKEN_PATH": "/etc/dgxspark/hf/token", "HF_HUB_DISABLE_TELEMETRY": "1"}
    legacy = mf.download_command("Qwen/X", "/m/X", cli="huggingface-cli")
    assert legacy["argv"][:2] == ["huggingface-cli", "download"]
    assert not {"HF_TOKEN", "HF_TOKEN_PATH"} & set(legacy["environment"])


def test_download_command_in_a_container_mounts_the_token_file_read_only_and_drops_every_capability():
    """docker run -e NAME copies the value into docker inspect's Config.Env: the container gets the file, mounted
    read-only, and HF_TOKEN_PATH names the mount point."""
    cmd = mf.download_command("Qwen/X", "/srv/m/X", where="container", image="vllm-node:1",
                              token_file="/etc/dgxspark/hf/token")
    assert cmd["argv"] == [*REMOVING, "/etc/dgxspark/hf/token",
                           "docker", "run", "--rm", "--network", "host", "--cap-drop", "ALL", "--entrypoint", "hf",
                           "-e", "HF_HUB_DISABLE_TELEMETRY", "-e", "HF_TOKEN_PATH", "-v", "/srv/m:/models",
                           "-v", "/etc/dgxspark/hf/token:/run/dgxspark/hf_token:ro", "vllm-node:1",
                           "download", "Qwen/X", "--local-dir", "/models/X"]
    assert cmd["environment"] == {"HF_TOKEN_PATH": "/run/dgxspark/hf_token", "HF_HUB_DISABLE_TELEMETRY": "1"}


@pytest.mark.parametrize("kwargs, match", [
    ({"model": "x; rm -rf /", "local_dir": "/m/x"}, "repository id"),
    ({"model": "Qwen/X", "local_dir": "m/x"}, "absolute"),
    ({"model": "Qwen/X", "local_dir": "/m/x", "where": "container"}, "image"),
    ({"model": "Qwen/X", "local_dir": "/m/x", "where": "ssh"}, "host or container"),
    ({"model": "Qwen/X", "local_dir": "/m/x", "token_file": "token"}, "absolute path on the node"),
    ({"model": "Qwen/X", "local_dir": "/m/x", "extra_env": {"HF_TOKEN": "hf_x"}}, "HF_TOKEN must not be in the env"),
])
def test_download_command_refuses(kwargs, match):
    model, local_dir = kwargs.pop("model"), kwargs.pop("local_dir")
    with pytest.raises(ValueError, match=match):
        mf.download_command(model, local_dir, **kwargs)
