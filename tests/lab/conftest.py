"""Fixtures for tests that run against the Docker lab (lab/lab.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB = [sys.executable, str(REPO / "lab" / "lab.py")]
INVENTORY = REPO / "inventories" / "lab"
BIN = Path(sys.executable).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if str(item.fspath).startswith(str(Path(__file__).parent)):
            item.add_marker(pytest.mark.lab)


def run(argv, check=True, env=None, timeout=900, input_text=None):
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, input=input_text,
                          check=False, cwd=REPO)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def ansible_env(**extra):
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env.update(extra)
    return env


def playbook(name, *args, check=False, **env):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / name), *args],
               check=check, env=ansible_env(**env))


def node_exec(node, *argv, check=True, input_text=None):
    return run(["docker", "exec", "-i", node, *argv], check=check, input_text=input_text)


@pytest.fixture(scope="session")
def lab():
    """A running two-node lab for the whole session; removed at the end unless DGXSPARK_LAB_KEEP=1."""
    run([str(REPO / "lab" / "docker-engine.sh")])
    run([*LAB, "up", "--nodes", "2"])
    hosts = json.loads(run([str(BIN / "ansible-inventory"), "-i", str(INVENTORY), "--list"],
                           env=ansible_env()).stdout)
    yield hosts
    if os.environ.get("DGXSPARK_LAB_KEEP") != "1":
        run([*LAB, "down", "--keep-images"], check=False)
