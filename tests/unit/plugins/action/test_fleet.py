# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the fleet action's gateways: published on every host, a gateway outside the fleet gets the fleet
only, and a gateway without an IP fails naming the fix."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from ansible.playbook.task import Task

from ansible_collections.dgxspark.vllm.plugins.action import fleet as plugin

GROUPS = {"all": ["s1", "s2", "gw1"], "ungrouped": [], "spark_pairs": ["s1", "s2"], "pair1": ["s1", "s2"],
          "dgxspark_gateway": ["gw1"]}
HOSTVARS = {"s1": {"dgxspark_node_role": "head", "ansible_host": "10.0.0.11"},
            "s2": {"dgxspark_node_role": "worker", "ansible_host": "10.0.0.12"},
            "gw1": {"ansible_host": "10.0.0.5"}}


def run_on(host, hostvars=None, groups=None):
    task = Task()
    task.args = {}
    connection = MagicMock()
    connection._shell.tmpdir = None
    action = plugin.ActionModule(task, connection, MagicMock(check_mode=False), loader=None, templar=None,
                                 shared_loader_obj=None)
    task_vars = {"inventory_hostname": host, "groups": groups or GROUPS, "hostvars": hostvars or HOSTVARS}
    return action.run(task_vars=task_vars)


def test_every_host_sees_the_gateways_and_a_gateway_gets_the_fleet_only():
    head = run_on("s1")
    assert not head.get("failed"), head
    assert head["ansible_facts"]["dgxspark_fleet"]["gateways"] == [{"host": "gw1", "lan_ip": "10.0.0.5"}]
    assert head["ansible_facts"]["dgxspark_fleet"]["gateway_group"] == "dgxspark_gateway"
    assert head["ansible_facts"]["dgxspark_node"]["is_head"]
    gateway = run_on("gw1")
    assert not gateway.get("failed"), gateway
    assert set(gateway["ansible_facts"]) == {"dgxspark_fleet"}
    assert sorted(gateway["ansible_facts"]["dgxspark_fleet"]["clusters"]) == ["pair1"]


def test_no_gateway_group_means_no_gateway_and_a_host_outside_both_groups_still_fails():
    groups = {k: v for k, v in GROUPS.items() if k != "dgxspark_gateway"}
    assert run_on("s2", groups=groups)["ansible_facts"]["dgxspark_fleet"]["gateways"] == []
    outside = run_on("gw1", groups=groups)
    assert outside["failed"] and "it is not in the fleet group 'spark_pairs'" in outside["msg"]


def test_a_gateway_without_an_ip_fails_naming_the_fix():
    hostvars = dict(HOSTVARS, gw1={"ansible_host": "gw1.example"})
    result = run_on("s1", hostvars=hostvars)
    assert result["failed"]
    assert "gateway gw1: its LAN address 'gw1.example' is not an IP address" in result["msg"]
    assert "set dgxspark_gateway_address (or ansible_host) to its LAN IP" in result["msg"]


# The bad-inventory cases, as the action sees them: each fails the first task of every playbook on every member of
# the cluster, naming host, variable and fix (tests/lab/test_lab_bad_inventory.py runs them against the lab).
BAD = {
    "two heads": ({"s2": {"dgxspark_node_role": "head"}}, {},
                  ["cluster pair1: it has 2 heads (s1, s2)", "dgxspark_node_role", "set dgxspark_node_role: worker"]),
    "a host in two clusters": ({}, {"pair9": ["s1", "s2"]},
                               ["host s1: it is in several groups that look like clusters (pair1, pair9)",
                                "dgxspark_cluster", "move it"]),
    "an IP with a quote": ({"s2": {"dgxspark_fabric_ip": '192.168.100.12",port-forwarding,permitopen="any'}}, {},
                           ["host s2: dgxspark_fabric_ip is", "not an IP address", "set it to one IP address"]),
    "an IP that is a wildcard": ({"s1": {"dgxspark_fabric_ip": "*"}}, {},
                                 ["host s1: dgxspark_fabric_ip is '*', not an IP address", "set it to one IP"]),
    "a newline in the API key": ({"s2": {"dgxspark_api_key": "abc\nVLLM_ALLOW_RUNTIME_LORA_UPDATING=1"}}, {},
                                 ["host s2: dgxspark_api_key contains a newline", "set it to 8 to 512 of the characters"]),
    "a quote in the HF token": ({"s1": {"dgxspark_hf_token": 'hf_x"y'}}, {},
                                ["host s1: dgxspark_hf_token contains a quote", "set it to 8 to 512 of the characters"]),
    "a directory outside the collection's": (
        {"s1": {"node_trust_dir": "/etc"}}, {},
        ["host s1: node_trust_dir is '/etc', which is not a directory of the collection's own",
         "e.g. /etc/dgxspark/transfer"]),
    "a malformed image name": ({"s1": {"dgxspark_image": "lab/vllm:0.17\nRUN id"}}, {},
                               ["host s1: dgxspark_image is", "not an image reference", "set it to [registry"]),
    "a model id that leaves the models directory": ({"s2": {"dgxspark_model": "Qwen/../../etc"}}, {},
                                                    ["host s2: dgxspark_model is 'Qwen/../../etc', not a Hugging "
                                                     "Face id", "set it to namespace/name"]),
    "a models directory in /etc": ({"s2": {"dgxspark_models_dir": "/etc"}}, {},
                                   ["host s2: dgxspark_models_dir is '/etc'", "set it to a plain absolute path"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_inventory_fails_on_every_member_naming_host_variable_and_fix(case):
    changes, groups_added, wanted = BAD[case]
    hostvars = {h: dict(v, **changes.get(h, {})) for h, v in HOSTVARS.items()}
    groups = dict(GROUPS, **groups_added)
    for host in ("s1", "s2"):
        result = run_on(host, hostvars=hostvars, groups=groups)
        assert result.get("failed") and "ansible_facts" not in result, result
        assert result["msg"].startswith(f"{host}: the inventory is not a valid fleet: ")
        for text in wanted:
            assert text in result["msg"], (text, result["msg"])


def test_a_gateway_outside_the_fleet_checks_its_own_values_only():
    hostvars = dict(HOSTVARS, gw1={"ansible_host": "10.0.0.5", "gateway_config_dir": "/etc"})
    gateway = run_on("gw1", hostvars=hostvars)
    assert gateway["failed"] and "host gw1: gateway_config_dir is '/etc'" in gateway["msg"]
    assert not run_on("s1", hostvars=hostvars).get("failed")


def test_an_undefined_template_is_left_to_the_role_that_uses_it():
    class Lazy(dict):
        def __getitem__(self, key):
            if key == "dgxspark_api_key":
                raise RuntimeError("'vault_dgxspark_api_key' is undefined")
            return super().__getitem__(key)

    hostvars = dict(HOSTVARS, s1=Lazy(HOSTVARS["s1"], dgxspark_api_key="{{ vault_dgxspark_api_key }}"))
    assert not run_on("s1", hostvars=hostvars).get("failed")


def test_a_fabric_a_node_reports_with_a_wildcard_fails_the_publishing():
    fabric = {"fabric_interface": "enp1s0f1np1", "fabric_ip": "*", "fabric_mtu": 1500, "transport": "socket",
              "env": {}, "lan_ip": "10.0.0.12", "lan_interface": "eth0"}
    task = Task()
    task.args = {"fabric": fabric}
    connection = MagicMock()
    connection._shell.tmpdir = None
    action = plugin.ActionModule(task, connection, MagicMock(check_mode=False), loader=None, templar=None,
                                 shared_loader_obj=None)
    result = action.run(task_vars={"inventory_hostname": "s2", "groups": GROUPS, "hostvars": HOSTVARS})
    assert result["failed"] and "ansible_facts" not in result
    assert "host s2: the fabric IP it reported (dgxspark_node.fabric.ip) is '*', not an IP address" in result["msg"]


def test_monitoring_hosts_are_published_and_one_outside_the_fleet_gets_the_fleet_only():
    groups = {**GROUPS, "all": GROUPS["all"] + ["mon1"], "dgxspark_monitoring": ["mon1", "s1"]}
    hostvars = {**HOSTVARS, "mon1": {"ansible_host": "mon1.example.internal", "dgxspark_monitoring_address": "10.0.0.6"}}
    head = run_on("s1", hostvars=hostvars, groups=groups)
    assert not head.get("failed"), head
    assert head["ansible_facts"]["dgxspark_fleet"]["monitors"] == [{"host": "mon1", "lan_ip": "10.0.0.6"},
                                                                   {"host": "s1", "lan_ip": "10.0.0.11"}]
    assert head["ansible_facts"]["dgxspark_fleet"]["monitoring_group"] == "dgxspark_monitoring"
    monitor = run_on("mon1", hostvars=hostvars, groups=groups)
    assert not monitor.get("failed") and set(monitor["ansible_facts"]) == {"dgxspark_fleet"}, monitor
    assert run_on("s2")["ansible_facts"]["dgxspark_fleet"]["monitors"] == []


def test_a_monitoring_host_without_an_ip_fails_naming_the_variable():
    groups = {**GROUPS, "all": GROUPS["all"] + ["mon1"], "dgxspark_monitoring": ["mon1"]}
    hostvars = {**HOSTVARS, "mon1": {"ansible_host": "mon1.example.internal"}}
    result = run_on("s1", hostvars=hostvars, groups=groups)
    assert result["failed"] and "monitoring host mon1: its LAN address 'mon1.example.internal' is not an IP" in result["msg"]
    assert "set dgxspark_monitoring_address (or ansible_host)" in result["msg"]
