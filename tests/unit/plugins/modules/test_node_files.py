# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the node_files module (and the shared _files helpers) on a temporary directory tree."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import stat

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import node_files as mod

ME = pwd.getpwuid(os.geteuid()).pw_name
MY_GROUP = grp.getgrgid(os.getegid()).gr_name


def run(capsys, files, **extra):
    with patch_module_args({"files": files, **extra}), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def layout(tmp_path):
    return [
        {"path": str(tmp_path / "bin"), "state": "directory", "owner": ME},
        {"path": str(tmp_path / "bin" / "launch"), "content": "print('launch')\n", "owner": ME},
        {"path": str(tmp_path / "conf"), "state": "directory", "mode": "0700", "owner": ME, "group": MY_GROUP},
        {"path": str(tmp_path / "conf" / "token"), "content": "first-token", "mode": "0600", "owner": ME,
         "create_only": True, "read": True, "secret": True},
    ]


def test_makes_everything_in_order_then_changes_nothing(tmp_path, capsys):
    first = run(capsys, layout(tmp_path))
    assert first["changed"] is True and len(first["changed_files"]) == 4
    assert (tmp_path / "bin" / "launch").read_text() == "print('launch')\n"
    assert (mode(tmp_path / "bin"), mode(tmp_path / "bin" / "launch")) == (0o755, 0o644)
    assert (mode(tmp_path / "conf"), mode(tmp_path / "conf" / "token")) == (0o700, 0o600)
    assert first["contents"] == {str(tmp_path / "conf" / "token"): "first-token"}
    assert first["checksums"] == {str(tmp_path / "bin" / "launch"): hashlib.sha1(b"print('launch')\n").hexdigest(),
                                  str(tmp_path / "conf" / "token"): hashlib.sha1(b"first-token").hexdigest()}
    second = run(capsys, layout(tmp_path))
    assert (second["changed"], second["changed_files"]) == (False, [])
    assert second["contents"] == first["contents"]


def test_create_only_keeps_the_existing_secret_and_mends_its_mode(tmp_path, capsys):
    run(capsys, layout(tmp_path))
    token = tmp_path / "conf" / "token"
    os.chmod(token, 0o644)
    files = layout(tmp_path)
    files[3]["content"] = "another-token"
    result = run(capsys, files, _ansible_diff=True)
    assert result["changed_files"] == [str(token)] and mode(token) == 0o600
    assert token.read_text() == "first-token" and result["contents"][str(token)] == "first-token"
    assert result["checksums"][str(token)] == hashlib.sha1(b"first-token").hexdigest()
    assert "mode 0644" in result["diff"]["before"] and "first-token" not in json.dumps(result["diff"])


def test_a_changed_file_is_replaced_and_the_diff_shows_it(tmp_path, capsys):
    run(capsys, layout(tmp_path))
    files = layout(tmp_path)
    files[1]["content"] = "print('launch v2')\n"
    result = run(capsys, files, _ansible_diff=True)
    assert result["changed_files"] == [files[1]["path"]]
    assert "print('launch')" in result["diff"]["before"] and "launch v2" in result["diff"]["after"]
    assert (tmp_path / "bin" / "launch").read_text() == "print('launch v2')\n"
    assert sorted(os.listdir(tmp_path / "bin")) == ["launch"], "no temporary file is left beside it"


def test_a_secret_shows_its_length_only(tmp_path, capsys):
    files = [{"path": str(tmp_path / "serve.env"), "content": "VLLM_API_KEY=sk-abc\n", "mode": "0600",
              "owner": ME, "secret": True}]
    result = run(capsys, files, _ansible_diff=True)
    # The arguments themselves are the task's to hide (no_log); what the module says never holds the secret.
    said = {k: v for k, v in result.items() if k != "invocation"}
    assert "sk-abc" not in json.dumps(said) and "(secret, 20 bytes)" in result["diff"]["after"]


def test_check_mode_writes_nothing_and_reads_only_what_exists(tmp_path, capsys):
    result = run(capsys, layout(tmp_path), _ansible_check_mode=True)
    assert result["changed"] is True and len(result["changed_files"]) == 4
    assert result["contents"] == {} and os.listdir(tmp_path) == []


@pytest.mark.parametrize("entry, why", [
    ({"path": "relative/file", "content": "x"}, "relative/file: the path must be absolute"),
    ({"path": "/x/file"}, "/x/file: a file needs its content"),
    ({"path": "/x/file", "content": "x", "mode": "rw-r--r--"}, "mode must be octal permissions such as '0600'"),
    ({"path": "/x/file", "content": "x", "mode": "17777"}, "(is '17777')"),
    ({"path": "/x/file", "content": "x", "owner": "no-such-user-here"}, "the user 'no-such-user-here' does not exist"),
    ({"path": "/x/file", "content": "x", "group": "no-such-group-here"}, "the group 'no-such-group-here' does not exist"),
])
def test_bad_entries_fail_before_anything_is_written(tmp_path, capsys, entry, why):
    first = {"path": str(tmp_path / "made-first"), "state": "directory", "owner": ME}
    result = run(capsys, [first, {"owner": ME, **entry}])
    assert result["failed"] is True and why in result["msg"] and "nothing was changed" in result["msg"]
    assert not (tmp_path / "made-first").exists()


def test_numeric_owner_and_group_are_taken_as_ids(tmp_path, capsys):
    """A container's user (HAProxy's 99:99) need not exist on the node: IDs are used as they are."""
    uid, gid = os.geteuid(), os.getegid()
    entries = [{"path": str(tmp_path / "conf"), "state": "directory", "mode": "0750", "owner": str(uid), "group": str(gid)},
               {"path": str(tmp_path / "conf" / "keys"), "content": "k\n", "mode": "0640", "owner": ME,
                "group": str(gid), "secret": True}]
    first = run(capsys, entries)
    assert first["changed"] is True
    info = os.stat(tmp_path / "conf" / "keys")
    assert (info.st_uid, info.st_gid, mode(tmp_path / "conf" / "keys")) == (uid, gid, 0o640)
    assert run(capsys, entries)["changed"] is False
    assert mod.owner_ids({"path": "/x", "owner": "99", "group": "99"}) == (99, 99)
    assert mod.owner_ids({"path": "/x", "owner": "99"}) == (99, 99)


def test_absent_removes_a_file_once_and_refuses_a_directory(tmp_path, capsys):
    """A key file of a job that is gone: removed (check mode says so and keeps it), then nothing to do."""
    gone = tmp_path / "gateway.key"
    gone.write_text("secret")
    entries = [{"path": str(gone), "state": "absent"}]
    would = run(capsys, entries, _ansible_check_mode=True)
    assert (would["changed"], would["changed_files"]) == (True, [str(gone)]) and gone.exists()
    assert run(capsys, entries)["changed_files"] == [str(gone)] and not gone.exists()
    assert run(capsys, entries)["changed"] is False
    (tmp_path / "dir").mkdir()
    refused = run(capsys, [{"path": str(tmp_path / "first"), "state": "directory", "owner": ME},
                           {"path": str(tmp_path / "dir"), "state": "absent"}])
    assert refused["failed"] is True and "is a directory" in refused["msg"] and not (tmp_path / "first").exists()
    assert (tmp_path / "dir").is_dir()
