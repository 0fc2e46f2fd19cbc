# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the door_render action (module_utils/_gateway.door_plan, which the deprecated gateway_door filter
wraps too): a head's door rendered on the controller from what the head published, its files by name, and its view of
the engine's exposure."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task

from ansible_collections.dgxspark.vllm.plugins.action.door_render import ActionModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway


ENV = "VLLM_API_KEY=engine-key-0123456789\n"


def gateway_door(release_, bind=None, port=None, allowed=None, **kw):
    return _gateway.door_plan(release_, bind=bind, port=port, allowed=allowed, **kw)


def release(host):
    return {"endpoint": {"host": host, "port": 8000, "url": f"http://{host}:8000/v1"}}


@pytest.mark.parametrize(("host", "target", "on_lan"), [
    ("127.0.0.1", "127.0.0.1:8000", False),
    ("192.168.1.20", "192.168.1.20:8000", True),
    # Security review M3: a wildcard bind was reached on the loopback and so reported as off the LAN.
    ("0.0.0.0", "127.0.0.1:8000", True),
    ("::", "127.0.0.1:8000", True),
])
def test_m3_exposure_is_judged_on_the_address_the_engine_bound(host, target, on_lan):
    door = gateway_door(release(host), bind="192.168.1.20", port=8100, allowed=["192.168.1.5"],
                        engine_key="engine-key-0123456789")
    assert door["target"] == target and door["engine_on_lan"] is on_lan and door["engine_bind"] == f"{host}:8000"


def test_a_fleet_served_without_any_key_gets_a_door_that_asks_for_none_and_still_filters_routes():
    """vllm_serve_allow_no_api_key and no client key (no gateway): at 4d7e9fc the filter refused the empty key, after
    the engine had started. Now the door asks clients for no key and relays the same routes; the engine keeps its own
    key (made per cluster), which the door puts on."""
    door = gateway_door(release("127.0.0.1"), bind="192.168.1.20", port=8100, allowed=[], engine_env=ENV,
                        client_keys=[], allow_no_api_key=True)
    lines = [line.strip() for line in door["config"].splitlines()]
    assert door["clients"] and door["keys"] == "" and "bind 192.168.1.20:8000" in lines
    assert not [line for line in lines if "status 401" in line or "acl key_ok" in line]
    assert any(line.endswith("unless inference METH_POST || reads METH_GET") for line in lines)
    assert lines[-2:] == ['http-request set-header Authorization "Bearer engine-key-0123456789"',
                          "server engine 127.0.0.1:8000"]


@pytest.mark.parametrize("kw", [
    {"client_keys": [], "engine_env": ENV},                            # no client key, not allowed
    {"client_keys": ["client-key-0123456789"], "engine_env": ""},      # no engine key (a head never deployed)
    {"client_keys": ["client-key-0123456789"], "engine_env": "OTHER=x\n"},
])
def test_a_missing_key_is_an_error(kw):
    with pytest.raises(_gateway.GatewayError, match="key"):
        gateway_door(release("127.0.0.1"), bind="192.168.1.20", port=8100, allowed=[], **kw)


def test_l7_the_door_takes_its_cluster_key_from_the_serving_env_file_and_admits_the_metrics_key_for_metrics_alone():
    door = gateway_door(release("127.0.0.1"), bind="192.168.1.20", port=8100, allowed=["192.168.1.5"],
                        engine_env="# made by vllm_serve\nVLLM_API_KEY=engine-key-0123456789\n",
                        metrics_key="metrics-key-0123456789")
    lines = [line.strip() for line in door["config"].splitlines()]
    assert 'acl key_ok req.fhdr(authorization) -m str "Bearer engine-key-0123456789"' in lines
    assert 'acl metrics_key req.fhdr(authorization) -m str "Bearer metrics-key-0123456789"' in lines
    assert any(line.endswith("unless key_ok || metrics_key metrics METH_GET") for line in lines)


IDENTITY = {"pem": "CERT AND KEY", "trust_anchor": "CERT"}
FLEET = {"clusters": {"pair1": {"hosts": ["s1", "s2"], "head": "s1"}}, "gateways": [{"host": "gw", "lan_ip": "192.168.1.5"}],
         "monitors": [{"host": "mon", "lan_ip": "192.168.1.6"}]}
HEAD = {"release": release("127.0.0.1"), "lan_ip": "192.168.1.20", "engine_env": ENV}


def run(args=None, fleet=None, head=None):
    task = Task()
    task.args = dict(args or {})
    task.async_val = 0
    module = ActionModule(task, MagicMock(), MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return module.run(task_vars={"dgxspark_fleet": FLEET if fleet is None else fleet,
                                 "gateway_head": HEAD if head is None else head, "inventory_hostname": "s1"})


def test_with_gateways_the_door_admits_the_gateways_and_monitors_and_its_files_are_named():
    result = run({"client_keys": ["client-key-0123456789"], "tls_identity": IDENTITY, "metrics_key": "metrics-key-01"})
    door = gateway_door(HEAD["release"], bind="192.168.1.20", port=8100, allowed=["192.168.1.5", "192.168.1.6"],
                        engine_env=ENV, metrics_key="metrics-key-01", tls=True)
    door["client_keys"] = door.pop("keys")  # "keys" is no name for a result (Jinja's dot reads the dict's method)
    assert result == {**result, **door}
    assert not result["clients"] and result["client_keys"] == "" and result["url"] == ""
    assert result["files"] == [{"name": "haproxy.cfg", "content": result["config"]},
                               {"name": "tls.pem", "content": "CERT AND KEY"}, {"name": "tls.crt", "content": "CERT"}]
    assert "bind 192.168.1.20:8100 ssl crt" in result["config"]
    assert result["_ansible_no_log"] is True and result["changed"] is False


def test_without_gateways_the_door_stands_for_the_clients_on_the_api_port_with_their_keys():
    result = run({"client_keys": ["client-key-0123456789"], "tls": False}, fleet={**FLEET, "gateways": []})
    assert result["clients"] and result["client_keys"] == "client-key-0123456789\n"
    assert [f["name"] for f in result["files"]] == ["haproxy.cfg", "keys"]
    assert result["url"] == "http://192.168.1.20:8000/v1"
    assert "bind 192.168.1.20:8000" in result["config"]


@pytest.mark.parametrize(("args", "head", "needle"), [
    ({"tls_identity": {}}, None, "tls is on and tls_identity has no pem and trust_anchor"),
    ({"tls": False, "tls_file": "../x"}, None, "tls_file is '../x': give a plain file name"),
    ({"tls": False}, {"release": release("127.0.0.1"), "lan_ip": "192.168.1.20", "engine_env": ""}, "key"),
    ({"tls": False, "head_fact": "a b"}, None, "head_fact is 'a b': give a variable name"),
])
def test_bad_input_fails_naming_the_fix_and_no_key(args, head, needle):
    with pytest.raises(AnsibleActionFail) as failed:
        run(args, head=head)
    assert needle in str(failed.value) and "engine-key-0123456789" not in str(failed.value)
