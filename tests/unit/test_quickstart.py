"""docs/quickstart.md and the `fresh` molecule scenario are one path: the scenario runs the page's marked shell blocks
as written (molecule/fresh/first_run.py), with substitutions only for what a test cannot do (type passwords, reach
Ansible Galaxy, own the example's addresses). These tests keep the page, the runner and the scenario from drifting:
a changed command either changes what the scenario runs or fails here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "docs" / "quickstart.md"


def first_run():
    spec = importlib.util.spec_from_file_location("first_run", REPO / "molecule" / "fresh" / "first_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scenario_runs_the_quickstarts_steps_in_order(tmp_path):
    steps = first_run().plan(QUICKSTART.read_text(), tmp_path)
    kinds = [kind for kind, _body in steps]
    assert kinds == ["run", "run", "edit", "run", "run"], steps
    install, copy, edit, vault, deploy = (body for _kind, body in steps)
    assert "tools/install-collection.sh" in install and install.endswith("~/.ansible/collections")
    assert copy.startswith("cp -r ~/.ansible/collections/ansible_collections/dgxspark/vllm/inventories/example ")
    assert edit == "inventory/hosts.yml"
    assert f"ansible-vault encrypt --vault-password-file={tmp_path}/vault-password $vault" in vault
    assert "openssl rand -hex 32" in vault  # a real key, never the example's placeholder
    assert deploy == (f"ansible-playbook dgxspark.vllm.deploy_qwen35 -i inventory "
                      f"--vault-password-file={tmp_path}/vault-password --become-password-file={tmp_path}/become-password")


def test_the_page_shows_the_prompts_an_operator_answers():
    text = QUICKSTART.read_text()
    assert "ansible-playbook dgxspark.vllm.deploy_qwen35 -i inventory --ask-vault-pass -K" in text
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    assert f"ansible-galaxy collection install dgxspark-vllm-{version}.tar.gz" in text


@pytest.mark.parametrize("change", [
    ("--ask-vault-pass -K", "--ask-vault-pass"),  # the sudo prompt gone: the runner would not answer it
    ("ansible-vault encrypt $vault", "ansible-vault create $vault"),
    ("dgxspark-vllm-", "dgxspark-vllm-9.9.9-"),
])
def test_a_changed_command_fails_the_runner_instead_of_drifting(tmp_path, change):
    text = QUICKSTART.read_text().replace(*change)
    with pytest.raises(SystemExit, match="match nothing"):
        first_run().plan(text, tmp_path)


def test_the_fresh_scenario_converges_and_verifies_with_the_runner():
    converge = yaml.safe_load((REPO / "molecule" / "fresh" / "converge.yml").read_text())
    argvs = [task["ansible.builtin.command"]["argv"] for play in converge for task in play["tasks"]
             if isinstance(task.get("ansible.builtin.command", {}).get("argv"), list)]
    runner = [argv[2] for argv in argvs if argv[1].endswith("/first_run.py") or "molecule_first_run" in argv[1]]
    assert runner == ["setup", "deploy"], argvs
    assert "--fresh" in next(argv for argv in argvs if "up" in argv)
    verify = (REPO / "molecule" / "fresh" / "verify.yml").read_text()
    assert "first_run.py" in verify and re.search(r"^\s+- verify$", verify, re.M)
    scenario = yaml.safe_load((REPO / "molecule" / "fresh" / "molecule.yml").read_text())
    assert "idempotence" in scenario["scenario"]["test_sequence"]


def test_the_readme_links_the_quickstart():
    assert "(docs/quickstart.md)" in (REPO / "README.md").read_text()
