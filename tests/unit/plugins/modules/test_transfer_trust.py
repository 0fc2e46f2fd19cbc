# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the transfer_trust and transfer_trust_info modules on a temporary directory tree."""

from __future__ import annotations

import json
import os
import pwd
import stat

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import transfer_trust as mod
from ansible_collections.dgxspark.vllm.plugins.modules import transfer_trust_info as info_mod

COMMENT = "dgxspark-transfer@spark_pairs"
PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nsecretsecretsecret\n-----END OPENSSH PRIVATE KEY-----\n"
PUBLIC = f"ssh-ed25519 AAAAfleet {COMMENT}"
LINE = f'restrict,from="10.0.0.1,10.0.0.2",command="/usr/bin/python3 /p/dgxspark-transfer /d/relay.json" ' \
       f"ssh-ed25519 AAAAfleet {COMMENT}"
ME = pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture(autouse=True)
def own_root(monkeypatch):
    """Root's files belong to whoever runs the tests (chown to root needs root)."""
    monkeypatch.setattr(mod, "ROOT_UID", os.geteuid())
    monkeypatch.setattr(mod, "ROOT_GID", os.getegid())


def run(capsys, args, module=mod):
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


def present_args(tmp_path, **extra):
    args = {
        "state": "present", "dir": str(tmp_path / "etc" / "transfer"),
        "program_path": str(tmp_path / "opt" / "bin" / "dgxspark-transfer"),
        "program": "#!/usr/bin/python3\nprint('hi')", "config": {"key": "/d/id_ed25519", "connect_timeout": 10},
        "private_key": PRIVATE, "public_key": PUBLIC, "known_hosts": "10.0.0.1 ssh-ed25519 AAAAh1\n",
        "authorized_keys": str(tmp_path / "home" / ".ssh" / "authorized_keys"), "authorized_line": LINE,
        "comment": COMMENT, "user": ME,
    }
    args.update(extra)
    return args


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_present_installs_everything_then_changes_nothing(tmp_path, capsys):
    args = present_args(tmp_path)
    first = run(capsys, args)
    d = tmp_path / "etc" / "transfer"
    assert first["changed"] is True and str(d / "id_ed25519") in first["changed_files"]
    assert (d / "id_ed25519").read_text() == PRIVATE and mode(d / "id_ed25519") == 0o600
    assert (d / "id_ed25519.pub").read_text() == PUBLIC + "\n" and mode(d) == 0o700
    assert json.loads((d / "relay.json").read_text()) == {"key": "/d/id_ed25519", "connect_timeout": 10}
    assert mode(d / "relay.json") == 0o600
    assert mode(tmp_path / "opt" / "bin" / "dgxspark-transfer") == 0o644
    assert (tmp_path / "home" / ".ssh" / "authorized_keys").read_text() == LINE + "\n"
    assert mode(tmp_path / "home" / ".ssh") == 0o700 and mode(tmp_path / "home" / ".ssh" / "authorized_keys") == 0o600
    second = run(capsys, args)
    assert second == {**second, "changed": False, "changed_files": []}
    assert PRIVATE not in json.dumps(first) and "secretsecret" not in json.dumps(first)


def test_the_key_line_is_replaced_in_place_and_other_keys_kept(tmp_path, capsys):
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    keys.parent.mkdir(parents=True, mode=0o700)
    keys.write_text(f"ssh-rsa AAAAadmin admin@laptop\nrestrict ssh-ed25519 AAAAold {COMMENT}\n"
                    f"ssh-ed25519 AAAAother ops\nssh-ed25519 AAAAdup {COMMENT}\n")
    result = run(capsys, present_args(tmp_path))
    assert result["changed"] is True
    assert keys.read_text() == f"ssh-rsa AAAAadmin admin@laptop\n{LINE}\nssh-ed25519 AAAAother ops\n"


def test_only_a_mode_drift_is_mended_and_the_diff_never_shows_the_key(tmp_path, capsys):
    args = present_args(tmp_path)
    run(capsys, args)
    private = tmp_path / "etc" / "transfer" / "id_ed25519"
    os.chmod(private, 0o644)
    result = run(capsys, {**args, "_ansible_diff": True})
    assert result["changed_files"] == [str(private)] and mode(private) == 0o600
    assert "mode 0644" in result["diff"]["before"] and "mode 0600" in result["diff"]["after"]
    (tmp_path / "etc" / "transfer" / "known_hosts").write_text("stale\n")
    private.write_text("tampered\n")
    result = run(capsys, {**args, "_ansible_diff": True})
    assert "secretsecret" not in json.dumps(result) and "(secret, 9 bytes)" in result["diff"]["before"]
    assert "stale" in result["diff"]["before"] and "AAAAh1" in result["diff"]["after"]
    assert private.read_text() == PRIVATE


def test_check_mode_reports_and_writes_nothing(tmp_path, capsys):
    result = run(capsys, {**present_args(tmp_path), "_ansible_check_mode": True})
    assert result["changed"] is True and len(result["changed_files"]) >= 8
    assert not (tmp_path / "etc").exists() and not (tmp_path / "home").exists()


def test_without_a_key_the_key_files_and_line_are_left_alone(tmp_path, capsys):
    args = present_args(tmp_path)
    for name in ("private_key", "public_key", "authorized_line"):
        del args[name]
    result = run(capsys, args)
    assert result["changed"] is True
    assert not (tmp_path / "etc" / "transfer" / "id_ed25519").exists() and not (tmp_path / "home").exists()


@pytest.mark.parametrize("drop, why", [
    ("known_hosts", "needs known_hosts"),
    ("public_key", "private_key and public_key together"),
    ("authorized_line", "needs authorized_line"),
])
def test_incomplete_input_fails_and_writes_nothing(tmp_path, capsys, drop, why):
    args = present_args(tmp_path)
    del args[drop]
    result = run(capsys, args)
    assert result["failed"] is True and why in result["msg"]
    assert not (tmp_path / "etc").exists()


def test_a_line_without_the_comment_is_refused(tmp_path, capsys):
    result = run(capsys, present_args(tmp_path, authorized_line="ssh-ed25519 AAAA someone-else"))
    assert result["failed"] is True and "ending with the comment" in result["msg"]


def test_info_reads_the_host_key_and_the_key_pair(tmp_path, capsys):
    host_key = tmp_path / "ssh_host_ed25519_key.pub"
    host_key.write_text("ssh-ed25519 AAAAhost root@spark-1\n")
    base = {"dir": str(tmp_path / "etc" / "transfer"), "host_key": str(host_key)}
    empty = run(capsys, {**base, "read_keypair": True}, info_mod)
    assert empty == {**empty, "key_present": False, "host_key": "ssh-ed25519 AAAAhost root@spark-1"}
    assert "keypair" not in empty
    run(capsys, present_args(tmp_path))
    without = run(capsys, base, info_mod)
    assert without["key_present"] is True and "keypair" not in without
    full = run(capsys, {**base, "read_keypair": True}, info_mod)
    assert full["keypair"] == {"private": PRIVATE, "public": PUBLIC}
    missing = run(capsys, {**base, "host_key": str(tmp_path / "none.pub")}, info_mod)
    assert missing["host_key"] == ""


def test_absent_removes_only_the_fleets_line_and_files(tmp_path, capsys):
    args = present_args(tmp_path)
    run(capsys, args)
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    keys.write_text("ssh-rsa AAAAadmin admin@laptop\n" + keys.read_text())
    gone = {"state": "absent", "dir": args["dir"], "program_path": args["program_path"],
            "authorized_keys": args["authorized_keys"], "comment": COMMENT}
    checked = run(capsys, {**gone, "_ansible_check_mode": True})
    assert checked["changed"] is True and (tmp_path / "etc" / "transfer").exists()
    result = run(capsys, gone)
    assert set(result["changed_files"]) == {args["authorized_keys"], args["dir"], args["program_path"]}
    assert keys.read_text() == "ssh-rsa AAAAadmin admin@laptop\n"
    assert not (tmp_path / "etc" / "transfer").exists() and not os.path.exists(args["program_path"])
    assert run(capsys, gone)["changed"] is False


def test_an_unknown_user_fails_naming_it(tmp_path, capsys):
    result = run(capsys, present_args(tmp_path, user="no-such-user-here"))
    assert result["failed"] is True and "no-such-user-here" in result["msg"] and "node_trust_user" in result["msg"]


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEoPWPoo+QKRpI+IwIwJMN+7i434K4ufFxAzLQAnVnMy root@spark-1"
FLEET_KEY = f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIxMVMSv1TgohZ0AkeMdHaIRAYLO1H7Y0VAtUcARZZxN {COMMENT}"
COMMAND = "/usr/bin/python3 /p/dgxspark-transfer /d/relay.json"


def built_args(tmp_path, **extra):
    args = present_args(tmp_path, public_key=FLEET_KEY, known_hosts=None, authorized_line=None,
                        known_hosts_entries=[{"name": "spark-1", "address": "10.0.0.1", "host_key": HOST_KEY}],
                        authorized_from=["10.0.0.1", "10.0.0.2"], authorized_command=COMMAND)
    for name in ("known_hosts", "authorized_line"):
        del args[name]
    args.update(extra)
    return args


def test_the_module_builds_the_lines_from_entries_then_changes_nothing(tmp_path, capsys):
    args = built_args(tmp_path, ssh_port=2222)
    assert run(capsys, args)["changed"] is True
    d = tmp_path / "etc" / "transfer"
    assert (d / "known_hosts").read_text() == (
        "[10.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEoPWPoo+QKRpI+IwIwJMN+7i434K4ufFxAzLQAnVnMy\n")
    assert (tmp_path / "home" / ".ssh" / "authorized_keys").read_text() == (
        f'restrict,from="10.0.0.1,10.0.0.2",command="{COMMAND}" {" ".join(FLEET_KEY.split()[:2])} {COMMENT}\n')
    assert run(capsys, args)["changed"] is False


def test_the_same_lines_given_as_text_or_as_entries_write_the_same_files(tmp_path, capsys):
    """Switching the role from Jinja-built text to entries changes no file on a node."""
    as_text = present_args(tmp_path, public_key=FLEET_KEY,
                           known_hosts="10.0.0.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEoPWPoo+QKRpI+IwIwJMN+7i434K4ufFxAzLQAnVnMy\n",
                           authorized_line=f'restrict,from="10.0.0.1,10.0.0.2",command="{COMMAND}" '
                                           f'{" ".join(FLEET_KEY.split()[:2])} {COMMENT}')
    assert run(capsys, as_text)["changed"] is True
    assert run(capsys, built_args(tmp_path)) == {**run(capsys, built_args(tmp_path)), "changed": False,
                                                 "changed_files": []}


@pytest.mark.parametrize(("extra", "message"), [
    ({"known_hosts_entries": [{"name": "spark-2", "address": "10.0.0.2", "host_key": "ssh-ed25519 AAAA\nx"}]},
     "spark-2: the SSH host key must be one line"),
    ({"known_hosts_entries": [{"name": "spark-2", "address": "10.0.0.2 x", "host_key": HOST_KEY}]},
     "spark-2: the fabric address '10.0.0.2 x' is neither"),
    ({"authorized_from": ['10.0.0.1",command="/bin/sh']}, "the source"),
    ({"public_key": "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIIxMVMSv1TgohZ0AkeMdHaIRAYLO1H7Y0VAtUcARZZxN"},
     "says ssh-rsa but its blob is a 'ssh-ed25519' key"),
])
def test_bad_values_stop_before_any_file_is_written(tmp_path, capsys, extra, message):
    result = run(capsys, built_args(tmp_path, **extra))
    assert result["failed"] is True and message in result["msg"], result
    assert not (tmp_path / "etc").exists() and not (tmp_path / "home").exists()
