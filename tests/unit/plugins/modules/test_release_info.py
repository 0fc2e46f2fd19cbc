# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one reader of a cluster's release record (issue 35): the record with the engine's and the clients' URLs, the
rollback target by each member's image ID, and the last rollout's record; a missing file is no release, a broken one
is named."""

from __future__ import annotations

import json

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import release_info as mod

RELEASE = {"image": "vllm-node:0.14", "image_id": "sha256:" + "a" * 64,
           "image_ids": {"spark-1": "sha256:" + "a" * 64, "spark-2": "sha256:" + "b" * 64},
           "model": "Qwen/Qwen3-30B-A3B", "served_model_name": "qwen3-30b-a3b",
           "endpoint": {"url": "https://10.0.0.11:8000/v1", "host": "127.0.0.1", "port": 8000}}


def run(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        mod.main()
    return json.loads(capsys.readouterr().out), exc.value.code


def test_a_record_with_its_urls_rollback_and_rollout(tmp_path, capsys):
    (tmp_path / "release.json").write_text(json.dumps(RELEASE))
    (tmp_path / "rollout.json").write_text(json.dumps({"switch_started": 10.0, "switch_ended": 70.0}))
    result, code = run(capsys, path=str(tmp_path / "release.json"), rollout_path=str(tmp_path / "rollout.json"),
                       rollback_host="spark-2")
    assert code == 0 and not result["changed"] and result["exists"]
    assert result["release"] == RELEASE
    assert result["engine_url"] == "http://127.0.0.1:8000" and result["url"] == "https://10.0.0.11:8000/v1"
    # A rollback serves the image the member recorded, by its ID (its tag may have moved).
    assert result["rollback"]["image"] == "sha256:" + "b" * 64
    assert result["rollout"] == {"switch_started": 10.0, "switch_ended": 70.0}


def test_no_record_is_no_release_and_no_rollout_file_is_none(tmp_path, capsys):
    result, code = run(capsys, path=str(tmp_path / "release.json"), rollout_path=str(tmp_path / "rollout.json"))
    assert code == 0 and result["exists"] is False
    assert (result["release"], result["engine_url"], result["url"], result["rollback"], result["rollout"]) == (
        {}, "", "", {}, {})


@pytest.mark.parametrize("text, match", [("{not json", "is not JSON"), ("[1, 2]", "holds a list, not a record")])
def test_a_broken_record_fails_naming_the_file_and_the_fix(tmp_path, capsys, text, match):
    (tmp_path / "release.json").write_text(text)
    result, code = run(capsys, path=str(tmp_path / "release.json"))
    assert code == 1 and result["failed"]
    assert f"release_info: {tmp_path / 'release.json'}" in result["msg"] and match in result["msg"]
    assert "deploy the cluster again" in result["msg"]


def test_a_record_vllm_serve_did_not_write_has_no_rollback(tmp_path, capsys):
    (tmp_path / "release.json").write_text(json.dumps({"model": "m"}))
    result, code = run(capsys, path=str(tmp_path / "release.json"))
    assert code == 0 and result["exists"] and result["rollback"] == {} and result["engine_url"] == ""
