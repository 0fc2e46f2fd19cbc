# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the transfer_announce module on a temporary directory."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import transfer_announce as mod

ID = "sha256:" + "a" * 64
SHA = "c" * 64
NONCE = "0f" * 16


@pytest.fixture(autouse=True)
def own_root(monkeypatch):
    """The directory belongs to whoever runs the tests (chown to root needs root)."""
    real = mod.Changes.ensure_dir, mod.Changes.ensure_file
    monkeypatch.setattr(mod.Changes, "ensure_dir", lambda self, p, m, _u, _g: real[0](self, p, m, os.geteuid(), os.getegid()))
    monkeypatch.setattr(mod.Changes, "ensure_file",
                        lambda self, p, c, m, _u, _g, **kw: real[1](self, p, c, m, os.geteuid(), os.getegid(), **kw))


def run(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def test_images_and_models_are_announced_once_then_nothing_changes(tmp_path, capsys):
    d = tmp_path / "transfer"
    images = {"dir": str(d), "images": [{"ref": "vllm-node:26.01", "id": ID, "bytes": 7, "store": "graphdriver"}],
              "nonce": NONCE}
    checked = run(capsys, {**images, "_ansible_check_mode": True})
    assert checked["changed"] is True and not d.exists()
    before = time.time()
    assert run(capsys, images)["changed"] is True
    written = json.loads((d / "announced-images.json").read_text())
    assert written["images"] == [{"bytes": 7, "id": ID, "ref": "vllm-node:26.01", "store": "graphdriver",
                                  "content_label": None, "fingerprint": None}]
    assert written["nonce"] == NONCE and before + 7200 - 5 <= written["expires"] <= time.time() + 7200
    assert stat.S_IMODE(os.stat(d / "announced-images.json").st_mode) == 0o600
    assert run(capsys, images)["changed"] is False
    # A new nonce (the next sync) is a new announcement.
    assert run(capsys, {**images, "nonce": "f" * 32})["changed"] is True
    model = {"dir": str(d), "model": "Qwen3-0.6B", "files": {"config.json": {"size": 2, "sha256": SHA}}}
    assert run(capsys, model)["changed"] is True
    other = {"dir": str(d), "model": "other", "files": {"w.bin": {"size": 1, "sha256": SHA}}}
    diffed = run(capsys, {**other, "_ansible_diff": True})
    assert diffed["changed"] is True and "Qwen3-0.6B" in diffed["diff"]["before"] and "w.bin" in diffed["diff"]["after"]
    assert set(json.loads((d / "announced-models.json").read_text())["models"]) == {"Qwen3-0.6B", "other"}
    assert run(capsys, model)["changed"] is False


@pytest.mark.parametrize(("args", "message"), [
    ({"images": [{"ref": "a:1\n", "id": ID}], "nonce": "a" * 32}, "not an image reference"),
    ({"images": [{"ref": "a:1", "id": "sha256:1"}], "nonce": "a" * 32}, "sha256:<64 hex>"),
    ({"images": [{"ref": "a:1", "id": ID}], "nonce": "not hex"}, "nonce"),
    ({"images": [{"ref": "a:1", "id": ID}], "nonce": "a" * 32, "ttl": 0}, "ttl"),
    ({"model": "../etc", "files": {}}, "not a model directory"),
    ({"model": "m", "files": {"/etc/passwd": {"size": 1, "sha256": SHA}}}, "not a relative path"),
])
def test_bad_values_announce_nothing(tmp_path, capsys, args, message):
    result = run(capsys, {"dir": str(tmp_path / "transfer"), **args})
    assert result["failed"] is True and message in result["msg"] and result["msg"].startswith("nothing was announced")
    assert not (tmp_path / "transfer").exists()
