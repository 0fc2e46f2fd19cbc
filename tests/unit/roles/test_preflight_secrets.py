# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An operator's first run with a secret missing, left as a placeholder or never mapped: the real playbooks stop at
their first task, on the controller, before any connection to a node (issue 33, notes/first-run.md part B).

The node of the inventory is unreachable on purpose (127.0.0.1, port 1): a check that does not fire lets the play go
on to its first remote task, which fails UNREACHABLE instead of with the message asserted here, and nothing of the
deploy ever runs on this machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
PASSWORD = "vault-password-of-the-test"
HOSTS = """all:
  children:
    spark_pairs:
      children:
        solo:
          hosts:
            spark-1:
              ansible_host: 127.0.0.1
              ansible_port: 1
              dgxspark_node_role: head
  vars:
    dgxspark_tensor_parallel_size: 1
    ansible_ssh_common_args: -o ConnectTimeout=5
"""
# group_vars/all/main.yml as the example has it (the key mapped, the token mapped only where a case says so)
MAIN = 'dgxspark_api_key: "{{ vault_dgxspark_api_key }}"\n'


def run(tmp_path: Path, playbook: str, main: str | None, vault: str | None) -> str:
    """ansible-playbook PLAYBOOK on the inventory above with group_vars/all/{main,vault}.yml (vault.yml encrypted, as
    the README says), --vault-password-file standing in for --ask-vault-pass; its output on one line."""
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(HOSTS)
    if main is not None:
        (inventory / "group_vars" / "all" / "main.yml").write_text(main)
    password = tmp_path / "password"
    password.write_text(PASSWORD + "\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    if vault is not None:
        (inventory / "group_vars" / "all" / "vault.yml").write_text(vault)
        subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password),
                        str(inventory / "group_vars" / "all" / "vault.yml")],
                       check=True, capture_output=True, env=env, cwd=REPO, timeout=120)
    proc = subprocess.run([str(BIN / "ansible-playbook"), f"dgxspark.vllm.{playbook}", "-i", str(inventory),
                           "--vault-password-file", str(password)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300, check=False)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out[-3000:]
    return out


def first_task_failure(out: str) -> str:
    """The failure of the preflight's first task (the fleet action), or an assertion naming what happened instead."""
    assert "UNREACHABLE" not in out, f"the play went on to a node: {out[-3000:]}"
    match = re.search(r"TASK \[dgxspark\.vllm\.preflight : Publish the fleet and this node's place in its cluster"
                      r"(?:(?!TASK \[).)*?fatal: \[spark-1\]: FAILED! => (.*?) PLAY RECAP", out)
    assert match, out[-3000:]
    return match.group(1)


def test_a_deploy_with_the_example_vaults_change_me_stops_at_its_first_task_without_showing_it(tmp_path):
    """fails at 13f6075: change-me passed and the deploy went on (here: to a node, UNREACHABLE)."""
    out = run(tmp_path, "deploy_qwen35", MAIN, "vault_dgxspark_api_key: change-me\n")
    failure = first_task_failure(out)
    assert "host spark-1: dgxspark_api_key is a placeholder, not a key (the value is not shown)" in failure
    assert "openssl rand -hex 32" in failure
    assert "change-me" not in out


def test_a_deploy_without_a_vault_stops_at_its_first_task_naming_the_key_and_the_fix(tmp_path):
    """fails at 13f6075: with no vault.yml the key's template was undefined and skipped, and vllm_serve refused the
    empty key only after the download, the build and the sync."""
    failure = first_task_failure(run(tmp_path, "deploy_qwen35", MAIN, None))
    assert ("host spark-1: no API key for the clients: dgxspark_api_key cannot be read (vault_dgxspark_api_key is "
            "undefined") in failure
    assert "ansible-vault encrypt" in failure and "--ask-vault-pass" in failure


def test_a_rollout_with_an_unmapped_hf_token_stops_at_its_first_task_naming_the_line_to_add(tmp_path):
    """fails at 13f6075: the token filled in the vault but never mapped reached no download (a 401 on gated models)."""
    out = run(tmp_path, "rollout", MAIN,
              "vault_dgxspark_api_key: 0f1e2d3c4b5a69788796a5b4c3d2e1f0\nvault_dgxspark_hf_token: hf_AbCdEf0123456789\n")
    failure = first_task_failure(out)
    assert ("host spark-1: vault_dgxspark_hf_token is set (in the vault) but dgxspark_hf_token is not, so nothing "
            'uses it; add the line dgxspark_hf_token: "{{ vault_dgxspark_hf_token }}" to group_vars/all/main.yml'
            in failure)
    assert "hf_AbCdEf0123456789" not in out and "0f1e2d3c4b5a69788796a5b4c3d2e1f0" not in out


@pytest.mark.parametrize("playbook", ["status", "teardown"])
def test_status_and_teardown_need_no_api_key(tmp_path, playbook):
    """The plays that serve nothing pass their fleet task with no vault at all and go on to the node."""
    out = run(tmp_path, playbook, MAIN, None)
    assert "no API key" not in out
    assert re.search(r"TASK \[Publish the fleet[^\]]*\][ *]*ok: \[spark-1\]", out), out[-3000:]
    assert "UNREACHABLE" in out
