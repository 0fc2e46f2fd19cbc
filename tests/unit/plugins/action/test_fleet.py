# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the fleet action's gateways: published on every host, a gateway outside the fleet gets the fleet
only, and a gateway without an IP fails naming the fix."""

from __future__ import annotations

from unittest.mock import MagicMock

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
