# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the deploy_record action: the digest of a deploy's inputs changes with every input (a variable of
any member, a secret, the fleet, a member's fabric, the collection's files) and with nothing the preflight reads."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

from ansible.errors import AnsibleActionFail

from ansible_collections.dgxspark.vllm.plugins.action import deploy_record as plugin

ROOT = plugin.COLLECTION_ROOT
CONVERGED = {"converged": True}


class Broken(dict):
    """A host's variables where one template fails when read (as a lazy hostvars does)."""

    def __getitem__(self, key):
        if key == "vllm_serve_port":
            raise ValueError("undefined variable")
        return super().__getitem__(key)


def hostvars(**over):
    base = {
        "s1": {"dgxspark_api_key": "k1", "vllm_serve_max_model_len": 4096, "ansible_host": "10.0.0.11",
               "dgxspark_node": {"fabric": {"ip": "192.168.100.11"}}, "preflight_memory_available_gb": 100.5,
               "preflight_min_free_disk_gb": 200, "other_var": 1},
        "s2": {"dgxspark_api_key": "k1", "dgxspark_node": {"fabric": {"ip": "192.168.100.12"}}},
    }
    for host, values in over.items():
        base[host] = dict(base[host], **values)
    return base


def digest(hv=None, fleet=None, root=ROOT):
    return plugin.inputs_digest(hv or hostvars(), ["s1", "s2"], fleet or {"clusters": {"pair1": ["s1", "s2"]}}, root=root)


def test_every_input_changes_the_digest_and_what_the_preflight_reads_does_not():
    base = digest()
    assert digest() == base
    assert digest(hostvars(s2={"dgxspark_api_key": "k2"})) != base  # a secret of another member
    assert digest(hostvars(s1={"vllm_serve_max_model_len": 8192})) != base
    assert digest(hostvars(s1={"preflight_min_free_disk_gb": 100})) != base  # a role's input with a run-fact prefix
    assert digest(hostvars(s2={"dgxspark_node": {"fabric": {"ip": "192.168.100.13"}}})) != base  # a member's fabric
    assert digest(fleet={"clusters": {"pair1": ["s1", "s2"], "pair2": ["s3", "s4"]}}) != base
    # Not inputs: what the preflight read of the node, other variables, connection settings, dgxspark_full_run.
    assert digest(hostvars(s1={"preflight_memory_available_gb": 90.0})) == base
    assert digest(hostvars(s1={"other_var": 2, "ansible_host": "10.0.0.99"})) == base
    assert digest(hostvars(s1={"dgxspark_full_run": True})) == base
    # Nor how the comparison itself is made (the deploy_state role's settings and its results).
    assert digest(hostvars(s1={"deploy_state_probe_timeout": 60, "deploy_state_settled": True})) == base


def test_a_template_that_fails_is_an_input_of_its_own():
    broken = hostvars()
    broken["s1"] = Broken(broken["s1"], vllm_serve_port=8000)
    values = plugin.host_inputs(broken, "s1", plugin.prefixes())
    assert values["vllm_serve_port"] == plugin.BROKEN and values["dgxspark_api_key"] == "k1"


def test_the_collections_files_are_inputs(tmp_path):
    for name in ("roles/a/defaults", "plugins", "playbooks", "meta"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "galaxy.yml").write_text("version: 1\n")
    (tmp_path / "roles/a/defaults/main.yml").write_text("a_x: 1\n")
    before = digest(root=str(tmp_path))
    (tmp_path / "plugins" / "__pycache__").mkdir()
    (tmp_path / "plugins" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert digest(root=str(tmp_path)) == before  # caches are not the collection
    (tmp_path / "roles/a/defaults/main.yml").write_text("a_x: 2\n")
    assert digest(root=str(tmp_path)) != before
    assert plugin.prefixes(str(tmp_path)) == ("dgxspark_", "a_")


def test_the_facts_the_preflight_sets_are_all_left_out():
    """RUN_FACTS names every variable the preflight role registers or sets (the read runs right after it)."""
    names = set()

    def walk(tasks):
        for task in tasks or []:
            if not isinstance(task, dict):
                continue
            if "register" in task:
                names.add(task["register"])
            for key in ("ansible.builtin.set_fact", "set_fact"):
                if isinstance(task.get(key), dict):
                    names.update(k for k in task[key] if k != "cacheable")
            for key in ("block", "rescue", "always"):
                walk(task.get(key))

    for path in glob.glob(os.path.join(ROOT, "roles", "preflight", "tasks", "*.yml")):
        with open(path, encoding="utf-8") as f:
            walk(yaml.safe_load(f))
    assert names and names <= plugin.RUN_FACTS, sorted(names - plugin.RUN_FACTS)


def test_what_the_heads_pull_did_this_run_is_not_an_input():
    """Issue 33, 2: image_pull runs on each head before the read, and every variable it registers or sets is left out.
    Whether it pulled (true on the run that pulled, false after) would otherwise make the next deploy of the same
    inventory go through every step again; the image itself is compared by ID (deploy_state_images)."""
    names = set()
    with open(os.path.join(ROOT, "roles", "image_pull", "tasks", "main.yml"), encoding="utf-8") as f:
        text = f.read()
    for task in yaml.safe_load(text):
        for inner in [task, *task.get("block", []), *task.get("rescue", [])]:
            names.update([inner["register"]] if "register" in inner else [])
            names.update(inner.get("ansible.builtin.set_fact", {}))
            names.update([inner["dgxspark.vllm.source_image"]["publish"]] if "dgxspark.vllm.source_image" in inner else [])
    assert names == {"image_pull_result"}
    pulled = {"image_pull_result": {"image": "r/x:1", "id": "sha256:" + "a" * 64, "pulled": True}}
    assert digest(hostvars(s1=pulled)) == digest(hostvars(s1=dict(pulled, image_pull_result={"pulled": False})))


def test_the_action_makes_the_digest_for_a_read_and_requires_one_to_record(run_action):
    task_vars = {"inventory_hostname": "s1", "hostvars": hostvars(), "dgxspark_fleet": {"clusters": {"pair1": ["s1", "s2"]}},
                 "dgxspark_node": {"members": ["s1", "s2"]}}
    action, result = run_action(plugin, {}, task_vars, CONVERGED)
    assert result["converged"]
    sent = action._execute_module.call_args.kwargs["module_args"]
    assert sent["inputs"] == digest() and result["inputs"] == digest()  # the module masks it: the action returns it
    with pytest.raises(AnsibleActionFail, match="state=present records the read's inputs"):
        run_action(plugin, {"state": "present"}, task_vars, CONVERGED)
    action, _result = run_action(plugin, {"state": "present", "inputs": "given"}, task_vars, CONVERGED)
    assert action._execute_module.call_args.kwargs["module_args"]["inputs"] == "given"
