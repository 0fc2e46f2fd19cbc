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
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEoPWPoo+QKRpI+IwIwJMN+7i434K4ufFxAzLQAnVnMy root@spark-1"
KEY1 = f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIxMVMSv1TgohZ0AkeMdHaIRAYLO1H7Y0VAtUcARZZxN {COMMENT}:spark-1"
KEY2 = f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEoPWPoo+QKRpI+IwIwJMN+7i434K4ufFxAzLQAnVnMy {COMMENT}:spark-2"
COMMAND = "/usr/bin/python3 /p/dgxspark-transfer /d/relay.json"
ME = pwd.getpwuid(os.geteuid()).pw_name


def line(key, source, sender):
    return f'restrict,from="{source}",command="{COMMAND}" {" ".join(key.split()[:2])} {COMMENT}:{sender}'


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
        "program": "#!/usr/bin/python3\nprint('hi')", "config": {"key": "/d/id_ed25519", "forward_to": []},
        "known_hosts_entries": [{"name": "spark-1", "address": "10.0.0.1", "host_key": HOST_KEY}],
        "authorized_keys": str(tmp_path / "home" / ".ssh" / "authorized_keys"),
        "senders": [{"name": "spark-1", "public_key": KEY1, "from": ["10.0.0.1"]}], "command": COMMAND,
        "comment": COMMENT, "user": ME,
    }
    args.update(extra)
    return args


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_present_installs_everything_then_changes_nothing(tmp_path, capsys):
    args = present_args(tmp_path, ssh_port=2222)
    first = run(capsys, args)
    d = tmp_path / "etc" / "transfer"
    assert first["changed"] is True and mode(d) == 0o700
    assert json.loads((d / "relay.json").read_text()) == {"key": "/d/id_ed25519", "forward_to": []}
    assert mode(d / "relay.json") == 0o600
    assert (d / "known_hosts").read_text() == (
        "[10.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEoPWPoo+QKRpI+IwIwJMN+7i434K4ufFxAzLQAnVnMy\n")
    assert mode(tmp_path / "opt" / "bin" / "dgxspark-transfer") == 0o644
    assert (tmp_path / "home" / ".ssh" / "authorized_keys").read_text() == line(KEY1, "10.0.0.1", "spark-1") + "\n"
    assert mode(tmp_path / "home" / ".ssh") == 0o700 and mode(tmp_path / "home" / ".ssh" / "authorized_keys") == 0o600
    assert not (d / "id_ed25519").exists()  # the key pair is made by state=keypair, never shipped
    second = run(capsys, args)
    assert second == {**second, "changed": False, "changed_files": []}


def test_one_line_per_sender_each_from_its_own_address_and_the_old_fleet_line_goes(tmp_path, capsys):
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    keys.parent.mkdir(parents=True, mode=0o700)
    # 0.1.0's single fleet line, a line of a sender that no longer sends here, and keys that are not the collection's.
    keys.write_text(f"ssh-rsa AAAAadmin admin@laptop\nrestrict,from=\"10.0.0.1,10.0.0.2\" ssh-ed25519 AAAAold {COMMENT}\n"
                    f"ssh-ed25519 AAAAother ops\nrestrict ssh-ed25519 AAAAgone {COMMENT}:spark-9\n"
                    f"ssh-ed25519 AAAAsimilar {COMMENT}x\n")
    senders = [{"name": "spark-1", "public_key": KEY1, "from": ["10.0.0.1"]},
               {"name": "spark-2", "public_key": KEY2, "from": ["10.0.0.2"]}]
    result = run(capsys, present_args(tmp_path, senders=senders))
    assert result["changed"] is True
    assert keys.read_text() == (f"ssh-rsa AAAAadmin admin@laptop\n{line(KEY1, '10.0.0.1', 'spark-1')}\n"
                                f"{line(KEY2, '10.0.0.2', 'spark-2')}\nssh-ed25519 AAAAother ops\n"
                                f"ssh-ed25519 AAAAsimilar {COMMENT}x\n")
    # A head: nobody sends to it, so none of the collection's lines stays.
    assert run(capsys, present_args(tmp_path, senders=[]))["changed"] is True
    assert keys.read_text() == f"ssh-rsa AAAAadmin admin@laptop\nssh-ed25519 AAAAother ops\nssh-ed25519 AAAAsimilar {COMMENT}x\n"


def test_a_node_nobody_sends_to_gets_no_authorized_keys_file(tmp_path, capsys):
    assert run(capsys, present_args(tmp_path, senders=[]))["changed"] is True
    assert not (tmp_path / "home").exists()


def test_a_mode_drift_is_mended_and_the_diff_shows_public_text_only(tmp_path, capsys):
    args = present_args(tmp_path)
    run(capsys, args)
    relay = tmp_path / "etc" / "transfer" / "relay.json"
    os.chmod(relay, 0o644)
    result = run(capsys, {**args, "_ansible_diff": True})
    assert result["changed_files"] == [str(relay)] and mode(relay) == 0o600
    assert "mode 0644" in result["diff"]["before"] and "mode 0600" in result["diff"]["after"]


def test_check_mode_reports_and_writes_nothing(tmp_path, capsys):
    result = run(capsys, {**present_args(tmp_path), "_ansible_check_mode": True})
    assert result["changed"] is True and len(result["changed_files"]) >= 6
    assert not (tmp_path / "etc").exists() and not (tmp_path / "home").exists()


@pytest.mark.parametrize("drop, why", [
    ("known_hosts_entries", "needs known_hosts"),
    ("command", "command (with senders)"),
    ("program", "needs program"),
])
def test_incomplete_input_fails_and_writes_nothing(tmp_path, capsys, drop, why):
    args = present_args(tmp_path)
    del args[drop]
    result = run(capsys, args)
    assert result["failed"] is True and why in result["msg"]
    assert not (tmp_path / "etc").exists()


def keygen_args(tmp_path, **extra):
    return {"state": "keypair", "dir": str(tmp_path / "etc" / "transfer"), "comment": f"{COMMENT}:spark-1", **extra}


def test_keypair_is_made_on_the_node_once_and_rotated_on_request(tmp_path, capsys):
    d = tmp_path / "etc" / "transfer"
    checked = run(capsys, {**keygen_args(tmp_path), "_ansible_check_mode": True})
    assert checked["changed"] is True and checked["public_key"] == "" and not d.exists()
    made = run(capsys, keygen_args(tmp_path))
    assert made["changed"] is True and made["public_key"].startswith("ssh-ed25519 ")
    assert made["public_key"].endswith(f"{COMMENT}:spark-1") and mode(d) == 0o700
    assert mode(d / "id_ed25519") == 0o600 and mode(d / "id_ed25519.pub") == 0o644
    private = (d / "id_ed25519").read_text()
    assert "PRIVATE KEY" in private and private not in json.dumps(made)
    again = run(capsys, keygen_args(tmp_path))
    assert again["changed"] is False and again["public_key"] == made["public_key"]
    rotated = run(capsys, keygen_args(tmp_path, rotate=True))
    assert rotated["changed"] is True and rotated["public_key"] != made["public_key"]
    assert (d / "id_ed25519").read_text() != private
    assert sorted(p.name for p in d.iterdir()) == ["id_ed25519", "id_ed25519.pub"]


def test_a_failed_keygen_keeps_the_old_pair(tmp_path, capsys, monkeypatch):
    made = run(capsys, keygen_args(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no ssh-keygen to run
    failed = run(capsys, keygen_args(tmp_path, rotate=True))
    assert failed["failed"] is True and "the old key (if any) is unchanged" in failed["msg"]
    assert run(capsys, {"dir": str(tmp_path / "etc" / "transfer")}, info_mod)["public_key"] == made["public_key"]


def test_info_reads_the_host_key_and_the_public_key_never_the_private_one(tmp_path, capsys):
    host_key = tmp_path / "ssh_host_ed25519_key.pub"
    host_key.write_text("ssh-ed25519 AAAAhost root@spark-1\n")
    base = {"dir": str(tmp_path / "etc" / "transfer"), "host_key": str(host_key)}
    empty = run(capsys, base, info_mod)
    assert empty == {**empty, "key_present": False, "public_key": "", "host_key": "ssh-ed25519 AAAAhost root@spark-1"}
    made = run(capsys, keygen_args(tmp_path))
    found = run(capsys, base, info_mod)
    assert found["key_present"] is True and found["public_key"] == made["public_key"]
    assert "PRIVATE" not in json.dumps(found)
    missing = run(capsys, {**base, "host_key": str(tmp_path / "none.pub")}, info_mod)
    assert missing["host_key"] == ""


def test_absent_removes_only_the_collections_lines_and_files(tmp_path, capsys):
    args = present_args(tmp_path)
    run(capsys, keygen_args(tmp_path))
    run(capsys, args)
    keys = tmp_path / "home" / ".ssh" / "authorized_keys"
    keys.write_text("ssh-rsa AAAAadmin admin@laptop\n" + keys.read_text() + f"restrict ssh-ed25519 AAAAold {COMMENT}\n")
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


@pytest.mark.parametrize(("extra", "message"), [
    ({"known_hosts_entries": [{"name": "spark-2", "address": "10.0.0.2", "host_key": "ssh-ed25519 AAAA\nx"}]},
     "spark-2: the SSH host key must be one line"),
    ({"known_hosts_entries": [{"name": "spark-2", "address": "10.0.0.2 x", "host_key": HOST_KEY}]},
     "spark-2: the fabric address '10.0.0.2 x' is neither"),
    ({"senders": [{"name": "spark-1", "public_key": KEY1, "from": ['10.0.0.1",command="/bin/sh']}]}, "the source"),
    ({"senders": [{"name": "spark-1", "public_key": KEY1, "from": ["*"]}]}, "must be an IP address or network"),
    ({"senders": [{"name": "spark-1", "public_key": KEY1, "from": []}]}, "from= list of the key of spark-1 is empty"),
    ({"senders": [{"name": "spark 1", "public_key": KEY1, "from": ["10.0.0.1"]}]}, "comment"),
    ({"senders": [{"name": "spark-1", "public_key": KEY1, "from": ["10.0.0.1"]},
                  {"name": "spark-1", "public_key": KEY2, "from": ["10.0.0.2"]}]}, "named twice"),
    ({"senders": [{"name": "spark-1", "from": ["10.0.0.1"],
                   "public_key": "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIIxMVMSv1TgohZ0AkeMdHaIRAYLO1H7Y0VAtUcARZZxN"}]},
     "the key of spark-1 says ssh-rsa but its blob is a 'ssh-ed25519' key"),
])
def test_bad_values_stop_before_any_file_is_written(tmp_path, capsys, extra, message):
    result = run(capsys, present_args(tmp_path, **extra))
    assert result["failed"] is True and message in result["msg"], result
    assert not (tmp_path / "etc").exists() and not (tmp_path / "home").exists()


def test_h3_the_watchdogs_key_is_authorized_for_engine_requests_alone(tmp_path, capsys):
    senders = [{"name": "spark-1", "public_key": KEY1, "from": ["10.0.0.1"]},
               {"name": "watchdog@spark-1", "public_key": KEY2, "from": ["10.0.0.1"], "only": "engine"}]
    assert run(capsys, present_args(tmp_path, senders=senders))["changed"] is True
    lines = (tmp_path / "home" / ".ssh" / "authorized_keys").read_text().splitlines()
    assert lines[0].startswith(f'restrict,from="10.0.0.1",command="{COMMAND}" ssh-ed25519 ')
    assert lines[1].startswith(f'restrict,from="10.0.0.1",command="{COMMAND} --only engine" ssh-ed25519 ')
    assert lines[1].endswith(f"{COMMENT}:watchdog@spark-1")
    failed = run(capsys, present_args(tmp_path, senders=[dict(senders[1], only="tag")]))
    assert failed["failed"] is True and "only" in failed["msg"]
