# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the gateway_render action (module_utils/_gateway.heads_read and gateway_plan): a gateway's
configuration rendered on the controller from what the heads published, or what the gateway read on the heads that
were not in its play, in place of the role's hostvars reads, three set_facts, an assert and two filters."""

from __future__ import annotations

import base64
from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task

from ansible_collections.dgxspark.vllm.plugins.action.gateway_render import ActionModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway
from ansible_collections.dgxspark.vllm.tests.unit.plugins.plugin_utils.tls_chains import company_ca

FLEET = {"group": "dgxspark", "clusters": {"pair1": {"hosts": ["s1", "s2"], "head": "s1"},
                                           "pair2": {"hosts": ["s3", "s4"], "head": "s3"}},
         "gateways": [{"host": "gw", "lan_ip": "192.168.1.20"}]}
KEYS = ["client-key-0123456789"]


def release(model="qwen"):
    return {"image": "x", "served_model_name": model,
            "endpoint": {"url": "http://127.0.0.1:8000/v1", "host": "127.0.0.1", "port": 8000}}


def head(lan, key, model="qwen", certificate=""):
    return {"release": release(model), "lan_ip": lan, "engine_env": f"VLLM_API_KEY={key}\n",
            "door_certificate": certificate}


def run(hostvars, args=None, fleet=None):
    task = Task()
    task.args = {"api_keys": KEYS, **(args or {})}
    task.async_val = 0
    module = ActionModule(task, MagicMock(), MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return module.run(task_vars={"dgxspark_fleet": fleet or FLEET, "hostvars": hostvars,
                                 "inventory_hostname": "gw"})


def slurped(item, text):
    return {"item": item, "content": base64.b64encode(text.encode()).decode(), "changed": False}


def test_the_configuration_is_the_one_the_filters_rendered_from_the_published_heads():
    heads = {"s1": head("192.168.1.11", "engine-key-pair1-0123"), "s3": head("192.168.1.13", "engine-key-pair2-0123")}
    result = run({"s1": {"gateway_head": heads["s1"]}, "s2": {}, "s3": {"gateway_head": heads["s3"]}, "s4": {}},
                 {"tls": False, "port": 8000})
    models, warnings = _gateway.gateway_models(FLEET["clusters"], heads, 8100)
    assert result["models"] == models == {"qwen": [{"name": "pair1", "address": "192.168.1.11", "port": 8100},
                                                   {"name": "pair2", "address": "192.168.1.13", "port": 8100}]}
    assert result["left_out"] == warnings == []
    # Not under a key Ansible takes for its own: an empty "warnings" is dropped from the registered result (the
    # first version's role failed on gateway_rendered.warnings in the lab's fleet deploy).
    assert not set(result) & {"warnings", "deprecations", "exception", "invocation"}
    assert result["config"] == _gateway.render_gateway(models, "192.168.1.20", 8000,
                                                       _gateway.engine_keys(FLEET["clusters"], heads), tls=False,
                                                       door_certificates={})
    assert result["client_keys"] == "client-key-0123456789\n" and result["files"] == []
    assert result["address"] == "192.168.1.20" and result["url"] == "http://192.168.1.20:8000/v1"
    # The result holds the engine keys: it is censored like a no_log task's.
    assert result["_ansible_no_log"] is True and result["changed"] is False
    assert "engine-key-pair1-0123" in result["config"]


def test_a_head_not_in_the_play_is_taken_from_the_gateways_own_reads_on_it():
    pem = company_ca(("192.168.1.13",))[0]  # the door's certificate
    unread = {"release": {"results": [{"item": "s3", "release": release("qwen")}]},
              "engine_env": {"results": [slurped("s3", "VLLM_API_KEY=engine-key-pair2-0123\n")]},
              "door_certificate": {"results": [slurped("s3", pem)]},
              "lan": {"results": [{"item": "s3", "lan_ip": "192.168.1.13"}]}}
    result = run({"s1": {"gateway_head": head("192.168.1.11", "engine-key-pair1-0123")}, "s3": {}},
                 {"unread": unread, "bind": "::1"})
    assert [s["name"] for s in result["models"]["qwen"]] == ["pair1", "pair2"]
    assert "engine-key-pair2-0123" in result["config"]
    assert result["files"] == [{"name": f"{_gateway.relay_name('pair2')}.crt", "content": pem}]
    assert result["address"] == "::1" and result["url"] == "https://[::1]:8000/v1"


def test_a_cluster_left_out_is_a_warning_and_none_served_fails_naming_the_fix_and_no_key():
    result = run({"s1": {"gateway_head": head("192.168.1.11", "engine-key-pair1-0123")},
                  "s3": {"gateway_head": {"release": {}, "lan_ip": "192.168.1.13", "engine_env": ""}}})
    assert result["left_out"] == ["cluster pair2: its head s3 has no release record (not deployed): the gateway does "
                                  "not route to it"]
    with pytest.raises(AnsibleActionFail) as failed:
        run({"s1": {}, "s3": {}})
    assert str(failed.value) == (
        "gateway_render: gw: no cluster of dgxspark has a release record on its head (or none of the heads was in this "
        "play): deploy a model first (deploy.yml), and run gateway.yml on the fleet and the gateways")


@pytest.mark.parametrize(("args", "needle"), [
    ({"api_keys": ["short"]}, "gateway_api_keys[0]"),
    ({"door_port": 0}, "gateway_door_port"),
    ({"head_fact": "not a name"}, "head_fact is 'not a name': give a variable name"),
    ({"unread": {"releases": []}}, "unknown reads releases"),
])
def test_bad_input_fails_naming_the_variable_and_no_engine_key(args, needle):
    hostvars = {"s1": {"gateway_head": head("192.168.1.11", "engine-key-pair1-0123")}}
    with pytest.raises(AnsibleActionFail) as failed:
        run(hostvars, args)
    assert needle in str(failed.value) and "engine-key-pair1-0123" not in str(failed.value)


def test_without_the_fleet_fact_it_says_which_action_to_run_first():
    task = Task()
    task.args = {"api_keys": KEYS}
    task.async_val = 0
    module = ActionModule(task, MagicMock(), MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    with pytest.raises(AnsibleActionFail, match="run dgxspark.vllm.fleet first"):
        module.run(task_vars={"hostvars": {}, "inventory_hostname": "gw"})
