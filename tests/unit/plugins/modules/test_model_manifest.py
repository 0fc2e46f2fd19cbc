# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of main() of the model_manifest module on a temporary model directory."""

from __future__ import annotations

import hashlib
import json

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import model_manifest as mod


def run(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def test_manifest_of_a_complete_model_and_the_cache(tmp_path, capsys):
    (tmp_path / "config.json").write_bytes(b"{}")
    (tmp_path / "model.safetensors").write_bytes(b"w" * 100)
    first = run(capsys, {"path": str(tmp_path)})
    assert first["changed"] is False and first["complete"] is True and first["missing"] == []
    assert first["files"]["model.safetensors"] == {"size": 100, "sha256": hashlib.sha256(b"w" * 100).hexdigest()}
    assert (first["file_count"], first["total_bytes"], first["hashed"], first["cached"]) == (2, 102, 2, 0)
    second = run(capsys, {"path": str(tmp_path)})
    assert (second["hashed"], second["cached"]) == (0, 2)


def test_check_mode_and_sizes_only(tmp_path, capsys):
    (tmp_path / "config.json").write_bytes(b"{}")
    checked = run(capsys, {"path": str(tmp_path), "_ansible_check_mode": True})
    assert checked["complete"] is False and checked["missing"] == ["weight files (*.safetensors, *.bin, *.gguf ...)"]
    assert not (tmp_path / ".dgxspark-manifest.json").exists()
    sizes = run(capsys, {"path": str(tmp_path), "hashes": False})
    assert sizes["files"] == {"config.json": {"size": 2, "sha256": None}}


def test_a_missing_directory(tmp_path, capsys):
    result = run(capsys, {"path": str(tmp_path / "absent")})
    assert result["exists"] is False and result["complete"] is False and result["files"] == {}


COMMIT = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"


def model(tmp_path, recorded=None, commits=()):
    (tmp_path / "config.json").write_bytes(b"{}")
    (tmp_path / "model.safetensors").write_bytes(b"w" * 10)
    if recorded is not None:
        (tmp_path / ".dgxspark-revision").write_text(recorded + "\n")
    meta = tmp_path / ".cache" / "huggingface" / "download"
    for i, commit in enumerate(commits):
        meta.mkdir(parents=True, exist_ok=True)
        (meta / f"file{i}.metadata").write_text(f"{commit}\n\"etag\"\n1764000000.0\n")
    return str(tmp_path)


def test_no_revision_asked_accepts_any_copy_and_the_record_is_not_a_model_file(tmp_path, capsys):
    result = run(capsys, {"path": model(tmp_path, recorded="v1"), "hashes": False})
    assert result["complete"] is True and result["revision"] == {"recorded": "v1", "commits": []}
    assert ".dgxspark-revision" not in result["files"]


@pytest.mark.parametrize("recorded, commits, wanted, reason", [
    ("v1", (), "v1", None),
    ("v1", (), "v2", "revision v2 (this copy is revision v1)"),
    (None, (), "v2", "revision v2 (this copy is of an unknown revision)"),
    # A commit hash matches Hugging Face's own per-file record, when every file came from it.
    (None, (COMMIT, COMMIT), COMMIT, None),
    (None, (COMMIT, "1" * 40), COMMIT, f"revision {COMMIT} (this copy is revision {COMMIT[:12]}, 111111111111)"),
    # A branch cannot be resolved offline: the CLI's commits do not say which branch they were.
    (None, (COMMIT,), "main", f"revision main (this copy is revision {COMMIT[:12]})"),
])
def test_a_copy_of_another_revision_is_not_complete(tmp_path, capsys, recorded, commits, wanted, reason):
    result = run(capsys, {"path": model(tmp_path, recorded, commits), "hashes": False, "revision": wanted})
    assert result["complete"] is (reason is None)
    assert result["missing"] == ([reason] if reason else [])
