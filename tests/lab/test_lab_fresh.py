"""Nodes as a fresh DGX OS install leaves them (issue 33, 1): the lab's fresh profile (lab.py up --fresh) connects
Ansible as the admin user `nvidia`, whose sudo asks for a password, grants no root SSH and has no Python Docker SDK.
The lab profile granted all three, and so hid the first stops of a real run. This file remakes this worker's lab
nodes in the fresh profile and, at its end, in the lab profile again (the files after it find the lab as before).

The whole first run on such nodes (the quickstart, through the gateway) is the `fresh` molecule scenario."""

from __future__ import annotations

import os
import subprocess

import pytest

from labkit import BIN, INVENTORY, LAB, REPO, ansible_env, collection_as_it_was, mgmt_ip, node, node_exec, run

# make lab-test: in make test, molecule's fresh scenario runs the whole first run on such nodes (the SDK installed by
# the preflight, a second run changed=0) and needs the password and the registry; remaking this worker's pair twice
# here would cost make test its hour.
pytestmark = [pytest.mark.lab, pytest.mark.slow]

PREFLIGHT = str(REPO / "tests" / "lab" / "playbooks" / "preflight.yml")
STATE = REPO / "lab" / ".state"
# The commit before issue 33's first-run work: its preflight neither installed nor checked the Docker SDK.
BEFORE_FIRST_RUN = "13f6075"


@pytest.fixture(scope="module", name="fresh")
def fixture_fresh(lab):  # pylint: disable=unused-argument
    """This worker's pair in the fresh profile for the module; in the lab profile again afterwards."""
    run([*LAB, "up", "--fresh", "--nodes", "2", "--no-engine-images"])
    try:
        yield
    finally:
        run([*LAB, "up", "--nodes", os.environ.get("DGXSPARK_LAB_NODES", "2"), "--no-engine-images"])


def without_the_sdk():
    """The fresh state again on both nodes: no python3-docker (an earlier test of this file may have installed it)."""
    for i in (1, 2):
        node_exec(node(i), "sh", "-c", "! dpkg -s python3-docker >/dev/null 2>&1 || dpkg --purge python3-docker")


def test_field_fresh_node_sudo_asks_for_a_password_and_root_has_no_ssh(fresh):  # pylint: disable=unused-argument
    """DGX OS's admin user has sudo with a password: a run without -K stops every node ("Missing sudo password"); root
    logs in with no key. The lab profile (root, no sudo) could not show either."""
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), "spark_pairs", "-b", "-m", "ansible.builtin.command",
                "-a", "id -u", "-e", "ansible_become_password=''"], check=False, env=ansible_env())
    assert proc.returncode != 0
    assert proc.stdout.count("Missing sudo password") + proc.stdout.count("Incorrect sudo password") >= 2, proc.stdout
    key = STATE / "ssh" / "id_ed25519"
    root = subprocess.run(["ssh", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                           "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                           f"root@{mgmt_ip(1)}", "true"], capture_output=True, text=True, check=False, timeout=60)
    assert root.returncode == 255 and "Permission denied" in root.stderr, root.stderr
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), "spark_pairs", "-b", "-m", "ansible.builtin.command",
                "-a", "id -u"], env=ansible_env())
    assert proc.stdout.count("rc=0") == 2 and "\n0\n" in proc.stdout + "\n", proc.stdout


@pytest.mark.slow  # 13f6075's deploy on fresh nodes: make lab-test; today's run is this file's next test and molecule's fresh
def test_field_fresh_node_as_the_collection_was_fails_hidden_after_the_preflight(fresh, tmp_path):  # pylint: disable=unused-argument
    """At 13f6075 nothing installed or checked the Python Docker SDK: on a fresh node the preflight passed and the deploy
    stopped in the next play, in a module that imports the SDK under no_log ("the output has been hidden"), the
    node's failure either hidden or blamed on something else, and no step saying what to install."""
    without_the_sdk()
    root, env = collection_as_it_was(tmp_path, BEFORE_FIRST_RUN)
    proc = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(root / "playbooks/deploy_qwen35.yml")],
               check=False, env=env)
    assert proc.returncode != 0, proc.stdout[-3000:]
    flat = " ".join(proc.stdout.split())
    assert "TASK [dgxspark.vllm.preflight" in flat and "output has been hidden" in flat, flat[-3000:]
    assert "python3-docker" not in flat


def test_field_fresh_node_preflight_installs_the_docker_sdk_once(fresh):  # pylint: disable=unused-argument
    """The preflight installs python3-docker from the node's own package mirror (dgxspark_node_packages: install, the
    default), through sudo with the password; a second preflight changes nothing."""
    without_the_sdk()
    first = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), PREFLIGHT], check=False, env=ansible_env())
    assert first.returncode == 0, first.stdout[-4000:]
    for i in (1, 2):
        assert node_exec(node(i), "python3", "-c", "import docker", check=False).returncode == 0
    assert first.stdout.count("changed: [") >= 2, first.stdout[-4000:]
    again = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), PREFLIGHT], env=ansible_env())
    assert all(" changed=0 " in line for line in again.stdout.splitlines() if " : ok=" in line), again.stdout[-2000:]
