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
