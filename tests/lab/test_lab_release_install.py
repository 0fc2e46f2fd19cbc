"""The install a user runs (README, Install): the built tarball installed into an empty collections path, then used
from a directory outside the checkout with no ansible.cfg at all (no ANSIBLE_CONFIG, none of the checkout's settings,
no .collections link): ansible-doc renders a module and `ansible-playbook dgxspark.vllm.status` runs against the lab,
both with the collection loaded from the clean path."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
import yaml

from labkit import BIN, INVENTORY, REPO

pytestmark = pytest.mark.lab

VERSION = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]


def user_run(argv, env, cwd, timeout=900):
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                          check=False)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n" \
                                 f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def group_hosts(inventory, group):
    """The hosts of GROUP in `ansible-inventory --list` output, its children's included."""
    entry = inventory.get(group, {})
    hosts = set(entry.get("hosts", []))
    for child in entry.get("children", []):
        hosts |= group_hosts(inventory, child)
    return hosts


@pytest.fixture(scope="module", name="installed")
def fixture_installed(tmp_path_factory):
    """(clean collections path, the user's environment, a working directory outside the checkout)."""
    base = tmp_path_factory.mktemp("release-install")
    dist, collections, home, work = base / "dist", base / "collections", base / "home", base / "work"
    for path in (home, work):
        path.mkdir()
    # Nothing of the checkout's Ansible setup: no ANSIBLE_* variable (the Makefile exports ANSIBLE_CONFIG), a HOME
    # without ~/.ansible.cfg or ~/.ansible/collections; the virtualenv's programs first on PATH, as step 1 leaves them.
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(PATH=f"{BIN}:{env.get('PATH', '')}", HOME=str(home), ANSIBLE_NOCOLOR="1")

    user_run([BIN / "ansible-galaxy", "collection", "build", "--output-path", dist, REPO], env, work)
    tarball = dist / f"dgxspark-vllm-{VERSION}.tar.gz"
    assert tarball.is_file(), sorted(p.name for p in dist.iterdir())
    user_run([REPO / "tools" / "install-collection.sh", "--venv", BIN.parent, tarball, collections], env, work)
    env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    return collections, env, work


def test_no_ansible_cfg_takes_part(installed):
    _collections, env, work = installed
    assert REPO.resolve() not in work.resolve().parents and work.resolve() != REPO.resolve()
    out = user_run([BIN / "ansible", "--version"], env, work).stdout
    assert re.search(r"^  config file = None$", out, re.M), out


def test_the_collection_is_found_in_the_clean_path_only(installed):
    collections, env, work = installed
    out = user_run([BIN / "ansible-galaxy", "collection", "list", "dgxspark.vllm"], env, work).stdout
    holding, where = {}, None
    for line in out.splitlines():  # "# <path>", a table header, then "<name> <version>" rows
        if line.startswith("# "):
            where = line[2:]
        elif line.split()[:1] == ["dgxspark.vllm"]:
            holding[where] = line.split()[1]
    assert holding == {f"{collections}/ansible_collections": VERSION}, out


def test_ansible_doc_renders_a_module_of_the_installed_collection(installed):
    collections, env, work = installed
    proc = user_run([BIN / "ansible-doc", "-t", "module", "dgxspark.vllm.image_sync"], env, work)
    header = proc.stdout.splitlines()[0]
    assert header == (f"> MODULE dgxspark.vllm.image_sync "
                      f"({collections}/ansible_collections/dgxspark/vllm/plugins/modules/image_sync.py)"), header
    assert "OPTIONS" in proc.stdout and "EXAMPLES:" in proc.stdout
    assert not re.search(r"^\[(ERROR|WARNING)\]", proc.stderr, re.M), proc.stderr


def test_the_status_playbook_by_fqcn_runs_against_the_lab(installed, lab):
    collections, env, work = installed
    proc = user_run([BIN / "ansible-playbook", "dgxspark.vllm.status", "-i", INVENTORY, "-vv"], env, work)
    out = proc.stdout
    assert re.search(r"^No config file found; using defaults$", out, re.M), out[:2000]
    # every task comes from the installed copy, none from the checkout
    paths = re.findall(r"^task path: (\S+):\d+$", out, re.M)
    assert paths, out[-3000:]
    playbook = f"{collections}/ansible_collections/dgxspark/vllm/playbooks/status.yml"
    assert {p for p in paths if not p.startswith(f"{collections}/ansible_collections/")} == set(), paths
    assert playbook in paths
    hosts = group_hosts(lab, "spark_pairs")
    assert hosts, lab
    recap = dict(re.findall(r"^(\S+)\s+: (ok=\d+\s+changed=\d+\s+unreachable=\d+\s+failed=\d+)", out, re.M))
    for host in sorted(hosts):
        assert re.match(r"ok=[1-9]\d*\s+changed=\d+\s+unreachable=0\s+failed=0", recap.get(host, "")), \
            (host, recap, out[-3000:])
