# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the fleet action's gateways: published on every host, a gateway outside the fleet gets the fleet
only, and a gateway without an IP fails naming the fix."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from ansible.playbook.task import Task

from ansible_collections.dgxspark.vllm.plugins.action import fleet as plugin
from ansible_collections.dgxspark.vllm.tests.unit.plugins.plugin_utils.tls_chains import company_ca

GROUPS = {"all": ["s1", "s2", "gw1"], "ungrouped": [], "spark_pairs": ["s1", "s2"], "pair1": ["s1", "s2"],
          "dgxspark_gateway": ["gw1"]}
HOSTVARS = {"s1": {"dgxspark_node_role": "head", "ansible_host": "10.0.0.11"},
            "s2": {"dgxspark_node_role": "worker", "ansible_host": "10.0.0.12"},
            "gw1": {"ansible_host": "10.0.0.5"}}


def run_on(host, hostvars=None, groups=None, args=None):
    task = Task()
    task.args = dict(args or {})
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


# The first real run (issue 33, notes/first-run.md part B): an operator's mistakes with secrets stop the first task of
# the playbook on every member of the cluster, before anything reaches a node, and no message shows a secret.
EXAMPLE_VAULT = {"dgxspark_api_key": "change-me", "vault_dgxspark_api_key": "change-me"}


def test_an_operator_who_keeps_the_example_vaults_change_me_is_stopped_on_every_member():
    """fails at 13f6075: the example vault's change-me passed and went live as the key of every engine."""
    hostvars = {h: dict(v, **EXAMPLE_VAULT) if h in ("s1", "s2") else v for h, v in HOSTVARS.items()}
    for host in ("s1", "s2"):
        result = run_on(host, hostvars=hostvars)
        assert result.get("failed") and "ansible_facts" not in result, result
        for member in ("s1", "s2"):
            assert (f"host {member}: dgxspark_api_key is a placeholder, not a key (the value is not shown)"
                    in result["msg"])
        assert "openssl rand -hex 32" in result["msg"] and "change-me" not in result["msg"]


def test_an_operator_who_fills_the_hf_token_in_the_vault_only_is_told_the_line_to_add():
    """fails at 13f6075: vault_dgxspark_hf_token filled and never mapped; the gated download failed with a 401."""
    hostvars = dict(HOSTVARS, s2=dict(HOSTVARS["s2"], vault_dgxspark_hf_token="hf_AbCdEf0123456789"))
    result = run_on("s1", hostvars=hostvars)
    assert result.get("failed") and "ansible_facts" not in result, result
    assert ('host s2: vault_dgxspark_hf_token is set (in the vault) but dgxspark_hf_token is not, so nothing uses it; '
            'add the line dgxspark_hf_token: "{{ vault_dgxspark_hf_token }}" to group_vars/all/main.yml') in result["msg"]
    assert "hf_AbCdEf0123456789" not in str(result)


def test_an_operator_who_forgets_the_api_key_is_stopped_at_the_first_task_of_a_serving_playbook():
    """fails at 13f6075: with no key the deploy ran the download, the build and the sync, and vllm_serve refused
    only then; the preflight's first task (require_api_key) now names every member without one."""
    result = run_on("s1", args={"require_api_key": True})
    assert result.get("failed") and "ansible_facts" not in result, result
    for member in ("s1", "s2"):
        assert (f"host {member}: no API key for the clients: dgxspark_api_key (the clients' key) is not set"
                in result["msg"])
    assert "vllm_serve_allow_no_api_key: true" in result["msg"]


def test_an_undefined_vault_variable_behind_the_key_is_named_when_serving():
    """fails at 13f6075: dgxspark_api_key: "{{ vault_dgxspark_api_key }}" with no vault.yml was skipped silently."""
    class Lazy(dict):
        def __getitem__(self, key):
            if key == "dgxspark_api_key":
                raise RuntimeError("'vault_dgxspark_api_key' is undefined. 'vault_dgxspark_api_key' is undefined")
            return super().__getitem__(key)

    hostvars = {h: Lazy(v, dgxspark_api_key="{{ vault_dgxspark_api_key }}") if h in ("s1", "s2") else v
                for h, v in HOSTVARS.items()}
    result = run_on("s2", hostvars=hostvars, args={"require_api_key": True})
    assert result.get("failed"), result
    assert ("host s1: no API key for the clients: dgxspark_api_key cannot be read (vault_dgxspark_api_key is "
            "undefined") in result["msg"]


def test_status_teardown_and_a_serving_play_with_a_key_or_an_explicit_no_key_pass():
    assert not run_on("s1").get("failed")  # status, teardown: no key needed
    keyed = {h: dict(v, dgxspark_api_key="0f1e2d3c4b5a69788796a5b4c3d2e1f0") for h, v in HOSTVARS.items()}
    assert not run_on("s1", hostvars=keyed, args={"require_api_key": True}).get("failed")
    open_api = {h: dict(v, vllm_serve_allow_no_api_key=True) for h, v in HOSTVARS.items()}
    assert not run_on("s2", hostvars=open_api, args={"require_api_key": True}).get("failed")


class Templated(dict):
    """hostvars as Ansible hands them to an action: hostvars[host] templated, hostvars.raw_get(host) as written."""

    def __init__(self, raw, templated):
        super().__init__(templated)
        self.raw = raw

    def raw_get(self, host):
        return self.raw[host]


def test_an_hf_token_mapped_straight_into_the_roles_variable_is_used_and_passes():
    token = {"vault_dgxspark_hf_token": "hf_AbCdEf0123456789"}
    raw = dict(HOSTVARS, s1=dict(HOSTVARS["s1"], model_sync_hf_token="{{ vault_dgxspark_hf_token }}", **token))
    templated = dict(HOSTVARS, s1=dict(HOSTVARS["s1"], model_sync_hf_token="hf_AbCdEf0123456789", **token))
    assert not run_on("s1", hostvars=Templated(raw, templated)).get("failed")
    # the same value under a name nothing reads is still named
    raw["s1"] = dict(raw["s1"], model_sync_hf_token="{{ vault_other }}")
    assert "vault_dgxspark_hf_token is set" in run_on("s1", hostvars=Templated(raw, templated))["msg"]


def test_a_metrics_key_set_for_the_monitoring_hosts_alone_is_stopped_before_any_node_is_touched():
    """Operator trap (fails at efb599c): monitoring_engine_api_key set in the monitoring group's variables alone. The
    heads never see it, their doors admit dgxspark_api_key for /metrics, and Prometheus's every scrape of an engine
    is refused (401) with nothing said. Now the first task stops on every host, naming the variables, not the keys."""
    groups = {**GROUPS, "all": GROUPS["all"] + ["mon1"], "dgxspark_monitoring": ["mon1"]}
    base = {h: {**v, "dgxspark_api_key": "client-key-0123456789"} for h, v in HOSTVARS.items()}
    trapped = {**base, "mon1": {"ansible_host": "10.0.0.6", "dgxspark_api_key": "client-key-0123456789",
                                "monitoring_engine_api_key": "metrics-key-0123456789"}}
    for host in ("s1", "s2", "gw1", "mon1"):
        result = run_on(host, hostvars=trapped, groups=groups)
        assert result.get("failed"), (host, result)
        assert ("host s1: its door admits the metrics key of dgxspark_api_key, but Prometheus on mon1 sends "
                "monitoring_engine_api_key, another key") in result["msg"]
        assert "set monitoring_engine_api_key where both see it (group_vars/all" in result["msg"]
        assert "metrics-key-0123456789" not in result["msg"] and "client-key-0123456789" not in result["msg"]
    # The same key seen by both (group_vars/all), a door key set for the heads that is Prometheus's, or no monitoring
    # host at all: nothing to say.
    shared = {h: {**v, "monitoring_engine_api_key": "metrics-key-0123456789"} for h, v in trapped.items()}
    assert not run_on("s1", hostvars=shared, groups=groups).get("failed")
    door_set = {**trapped, "s1": {**trapped["s1"], "gateway_door_metrics_api_key": "metrics-key-0123456789"}}
    assert not run_on("s2", hostvars=door_set, groups=groups).get("failed")
    assert not run_on("s1", hostvars=trapped, groups=GROUPS).get("failed")
    # Prometheus on the head itself reads its engine on the loopback: no door in between.
    on_head = {**trapped, "s1": {**trapped["s1"], "monitoring_engine_api_key": "metrics-key-0123456789"}}
    assert not run_on("s1", hostvars=on_head, groups={**groups, "dgxspark_monitoring": ["s1"]}).get("failed")


def test_a_given_tls_certificate_that_cannot_be_served_is_refused_at_the_first_task_naming_host_and_variables():
    """Found in the review of 96ffade: a given certificate was refused only by the gateway role, after the deploy, and
    under no_log (the message hidden). A chain short of its root (which the relays must trust) is named now, before
    any node changes; a good chain, or a certificate for a switched-off identity, passes."""
    cert, key, middle, root = company_ca(["10.0.0.11"])
    short = dict(HOSTVARS, s1=dict(HOSTVARS["s1"], gateway_door_tls_certificate=cert + middle,
                                   gateway_door_tls_private_key=key))
    result = run_on("s2", hostvars=short)
    assert result["failed"]
    assert ("s1: gateway_door_tls_certificate and gateway_door_tls_private_key: the given certificate cannot be used: "
            "the chain ends at 'Company Issuing CA'") in result["msg"]
    assert "append the issuing CA's certificates up to its self-signed root" in result["msg"]
    assert key.split("\n")[1] not in result["msg"]
    off = dict(HOSTVARS, s1=dict(short["s1"], gateway_door_tls=False))
    assert not run_on("s1", hostvars=off).get("failed")
    good = dict(HOSTVARS, s1=dict(HOSTVARS["s1"], gateway_door_tls_certificate=cert + middle + root,
                                  gateway_door_tls_private_key=key))
    assert not run_on("s1", hostvars=good).get("failed")
    gateway = dict(HOSTVARS, gw1=dict(HOSTVARS["gw1"], gateway_tls_certificate=cert + middle + root))
    refused = run_on("gw1", hostvars=gateway)
    assert refused["failed"] and "gw1: gateway_tls_certificate and gateway_tls_private_key" in refused["msg"]
    assert "give both" in refused["msg"]


def test_every_member_gets_its_engine_settings_resolved_once_and_the_old_name_is_a_deprecated_alias(monkeypatch):
    said = []
    monkeypatch.setattr(plugin.display, "deprecated", lambda msg, **kw: said.append((msg, kw)))
    hostvars = dict(HOSTVARS, s1=dict(HOSTVARS["s1"], dgxspark_engine_shm_size="2g"),
                    s2=dict(HOSTVARS["s2"], ray_cluster_ulimits=["nofile:20000:20000"]))
    head = run_on("s1", hostvars=hostvars)
    assert head["ansible_facts"]["dgxspark_node"]["engine"]["shm_size"] == "2g"
    assert head["ansible_facts"]["dgxspark_node"]["engine"]["ulimits"] == plugin.ENGINE_DEFAULTS["ulimits"]
    assert said == []
    worker = run_on("s2", hostvars=hostvars)
    assert worker["ansible_facts"]["dgxspark_node"]["engine"]["ulimits"] == ["nofile:20000:20000"]
    assert said == [("s2: ray_cluster_ulimits is deprecated; set dgxspark_engine_ulimits instead (the same value; it "
                     "applies to the engine containers of every backend, Ray's and mp's)",
                     {"version": "1.0.0", "collection_name": "dgxspark.vllm"})]


def test_a_bad_engine_setting_fails_every_member_at_the_first_task_naming_host_and_variable():
    hostvars = dict(HOSTVARS, s2=dict(HOSTVARS["s2"], dgxspark_engine_stop_timeout="soon"))
    for host in ("s1", "s2"):
        result = run_on(host, hostvars=hostvars)
        assert result["failed"], result
        assert ("host s2: dgxspark_engine_stop_timeout: is 'soon', not a whole number of seconds; fix it in the "
                "inventory") in result["msg"]
