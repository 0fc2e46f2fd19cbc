# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the deploy_record module: a record written after a deploy reads back as converged, a change of the
node or of the inputs does not, check mode writes nothing."""

from __future__ import annotations

import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import deploy_record as mod
from ansible_collections.dgxspark.vllm.tests.unit.plugins.module_utils.test__deploy_record import FakeAPI, FakeClient, attrs


class Module:
    def __init__(self, params, check_mode=False):
        self.params = params
        self.check_mode = check_mode


def params(tmp_path, **over):
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "release.json").write_text("{}")
    p = {"state": "read", "inputs": "digest-1", "path": str(tmp_path / "lib" / "deploy" / "record.json"),
         "trees": [str(etc), str(tmp_path / "lib")], "exclude": [str(tmp_path / "lib" / "deploy")], "files": [],
         "stat_dirs": [], "images": ["src:1"], "label": "org.dgxspark.vllm.component", "result": {}}
    p.update(over)
    return p


def client():
    return FakeClient(FakeAPI([attrs("dgxspark-ray-head")], images={"src:1": "sha256:" + "1" * 64}))


def test_a_record_written_after_a_deploy_reads_back_converged_with_its_result(tmp_path):
    fake = client()
    first = mod.run(Module(params(tmp_path)), fake)
    assert not first["converged"] and first["differences"] == ["no record of an earlier deploy on this node"]
    wrote = mod.run(Module(params(tmp_path, state="present", result={"release": {"image": "h:1"}})), fake)
    assert wrote["changed"]
    record = tmp_path / "lib" / "deploy" / "record.json"
    assert oct(record.stat().st_mode & 0o777) == "0o600" and oct((tmp_path / "lib" / "deploy").stat().st_mode & 0o777) == "0o700"
    # Written again with nothing changed: the same bytes, no change.
    assert not mod.run(Module(params(tmp_path, state="present", result={"release": {"image": "h:1"}})), fake)["changed"]
    read = mod.run(Module(params(tmp_path)), fake)
    assert read == {"changed": False, "refreshed": False, "converged": True, "differences": [],
                    "result": {"release": {"image": "h:1"}}}
    # The lib directory the record step made is part of what it recorded (on a node that had none before).
    assert str(tmp_path / "lib") in json.loads(record.read_text())["state"]["files"]


def test_other_inputs_or_a_changed_node_are_not_converged(tmp_path):
    fake = client()
    mod.run(Module(params(tmp_path, state="present")), fake)
    assert mod.run(Module(params(tmp_path, inputs="digest-2")), fake)["differences"] == [
        "the deploy's inputs changed (the inventory, -e, a secret, the fleet or the collection)"]
    fake.api.by_id["dgxspark-ray-head-id"]["State"]["Running"] = False
    assert mod.run(Module(params(tmp_path)), fake)["differences"] == ["container dgxspark-ray-head: not running"]


def test_a_node_whose_state_alone_moved_refreshes_the_record_without_a_change(tmp_path):
    fake = client()
    mod.run(Module(params(tmp_path, state="present", result={"release": {"image": "h:1"}})), fake)
    (tmp_path / "etc" / "moved").write_text('x')  # as a model file's time after an identical copy
    again = mod.run(Module(params(tmp_path, state="present", result={"release": {"image": "h:1"}})), fake)
    assert again["refreshed"] and not again["changed"]
    assert mod.run(Module(params(tmp_path)), fake)["converged"]  # the refreshed record describes the node as it is
    # Other inputs or another result are a change.
    assert mod.run(Module(params(tmp_path, state="present", inputs="digest-2", result={"release": {"image": "h:1"}})), fake)["changed"]
    assert mod.run(Module(params(tmp_path, state="present", inputs="digest-2", result={"release": {"image": "h:2"}})), fake)["changed"]


def test_check_mode_reports_the_change_and_writes_nothing(tmp_path):
    result = mod.run(Module(params(tmp_path, state="present"), check_mode=True), client())
    assert result["changed"] and not os.path.exists(tmp_path / "lib")


def test_main_refuses_relative_paths_and_an_empty_inputs(capsys):
    with patch_module_args({"inputs": "3f0c9a" * 10, "trees": ["etc/dgxspark"]}), pytest.raises(SystemExit):
        mod.main()
    assert "every path must be absolute, got 'etc/dgxspark'" in capsys.readouterr().out
    with patch_module_args({"inputs": ""}), pytest.raises(SystemExit):
        mod.main()
    assert "inputs is empty" in capsys.readouterr().out
    with patch_module_args({"state": "present"}), pytest.raises(SystemExit):
        mod.main()
    assert "state is present but all of the following are missing: inputs" in capsys.readouterr().out


def test_l2_no_bare_hash_of_a_secret_is_at_rest(tmp_path):
    """Security review L2: the record held sha256(serve.env), which holds the API key, and the inputs digest, which
    covers the secrets: a copy of the record alone tested a guess of either. Now both are keyed with the node's key."""
    import hashlib
    (tmp_path / "etc").mkdir()
    secret = b"VLLM_API_KEY=lab-api-key-not-a-secret\n"
    (tmp_path / "etc" / "serve.env").write_bytes(secret)
    fake = client()
    mod.run(Module(params(tmp_path, state="present", inputs="digest-of-the-secrets")), fake)
    text = (tmp_path / "lib" / "deploy" / "record.json").read_text()
    assert hashlib.sha256(secret).hexdigest() not in text and "digest-of-the-secrets" not in text
    key = tmp_path / "lib" / "deploy" / "record.key"
    assert len(key.read_bytes()) == 32 and oct(key.stat().st_mode & 0o777) == "0o600"
    assert mod.run(Module(params(tmp_path, inputs="digest-of-the-secrets")), fake)["converged"]
    # The key is the node's: kept across records; a record without it is no record.
    mod.run(Module(params(tmp_path, state="present", inputs="digest-of-the-secrets")), fake)
    assert len(key.read_bytes()) == 32
    key.unlink()
    assert mod.run(Module(params(tmp_path, inputs="digest-of-the-secrets")), fake)["differences"] == [
        "no record of an earlier deploy on this node"]
    assert not key.exists()   # a read makes no key
