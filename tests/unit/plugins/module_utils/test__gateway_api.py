"""The gateway's saved server state (L8): kept to the configuration HAProxy will read, since HAProxy applies a saved
server's port and address over its configuration's (haproxy/haproxy#1412); and the drain holds. No HAProxy needed:
tests/unit/plugins/modules/test_gateway_server.py runs a real one."""

from __future__ import annotations

import json

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway as gw
from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway_api as api

HEADER = ("# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight "
          "srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state "
          "srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port "
          "srv_check_addr srv_agent_addr srv_agent_port")


def line(backend, server, addr, port, op=2, admin=0):
    return f"3 {backend} 1 {server} {addr} {op} {admin} 1 1 40 6 3 4 6 0 0 0 - {port} - 0 0 - - 0"


def config(models):
    return gw.render_gateway(models, "10.0.0.5", 8000, "engine-key-0123456789")


MODELS = {"m1": [{"name": "pair1", "address": "10.0.0.11", "port": 8100},
                 {"name": "pair2", "address": "fd00::13", "port": 8100}]}


def test_the_rendered_configuration_s_servers_are_read_back():
    assert api.configured_servers(config(MODELS)) == {("model_m1", "pair1"): ("10.0.0.11", "8100"),
                                                      ("model_m1", "pair2"): ("fd00::13", "8100")}


def test_l8_a_drained_server_that_moved_keeps_its_drain_at_the_new_endpoint_marked_down():
    dump = "\n".join(["1", HEADER, line("model_m1", "pair1", "10.0.0.11", 8100, admin=8),
                      line("model_m1", "pair2", "fd00:0::13", 8100, admin=8),
                      line("model_gone", "pair3", "10.0.0.15", 8100)]) + "\n"
    moved_models = {"m1": [{"name": "pair1", "address": "10.0.0.21", "port": 8100},
                           {"name": "pair2", "address": "fd00::13", "port": 8100}]}
    text, moved = api.state_for_config(dump, config(moved_models))
    assert moved == ["model_m1/pair1"]
    rows = [r.split() for r in text.splitlines()[2:]]
    assert text.splitlines()[:2] == ["1", HEADER]
    header = HEADER[2:].split()
    pair1 = dict(zip(header, rows[0]))
    assert (pair1["srv_addr"], pair1["srv_port"], pair1["srv_op_state"], pair1["srv_admin_state"]) == (
        "10.0.0.21", "8100", "0", "8")
    # The same endpoint spelled another way is not a move; a server the configuration lacks is left out.
    assert dict(zip(header, rows[1]))["srv_addr"] == "fd00:0::13" and len(rows) == 2
    # A port change is a move too (the door's port).
    _text, moved = api.state_for_config(dump, config({"m1": [{"name": "pair1", "address": "10.0.0.11", "port": 8200},
                                                             {"name": "pair2", "address": "fd00::13", "port": 8100}]}))
    assert moved == ["model_m1/pair1"]


def test_a_dump_that_is_not_haproxy_s_is_refused():
    with pytest.raises(api.GatewayError, match="unexpected 'show servers state' answer"):
        api.state_for_config("Unknown command\n", config(MODELS))


def test_l8_without_a_running_haproxy_the_saved_state_is_brought_to_the_new_configuration(tmp_path):
    (tmp_path / "haproxy.cfg").write_text(config({"m1": [{"name": "pair1", "address": "10.0.0.21", "port": 8100}]}))
    client = api.RuntimeAPI(str(tmp_path / "admin.sock"), timeout=1)
    assert client.save_state(str(tmp_path / "haproxy.cfg")) == []           # nothing saved, nothing made
    assert not (tmp_path / api.STATE_FILE).exists()
    (tmp_path / api.STATE_FILE).write_text("\n".join(["1", HEADER, line("model_m1", "pair1", "10.0.0.11", 8100,
                                                                        admin=8)]) + "\n")
    assert client.save_state(str(tmp_path / "haproxy.cfg")) == ["model_m1/pair1"]
    saved = (tmp_path / api.STATE_FILE).read_text().splitlines()[2].split()
    assert saved[4] == "10.0.0.21" and saved[6] == "8" and (tmp_path / api.STATE_FILE).stat().st_mode & 0o777 == 0o600
    with pytest.raises(api.GatewayError, match="cannot be read"):
        client.save_state(str(tmp_path / "missing.cfg"))


def test_l8_holds_expire_and_only_plain_names_hold(tmp_path):
    assert api.live_holds({"pair1": 200.0, "pair2": 50, "bad;name": 300, "pair3": "soon"}, now=100) == {
        "pair1": 200.0}
    path = tmp_path / api.HOLDS_FILE
    assert api.read_holds(str(path), now=0) == {}
    path.write_text(json.dumps({"pair1": 10}))
    assert api.read_holds(str(path), now=0) == {"pair1": 10.0}
    path.write_text("{not json")
    with pytest.raises(api.GatewayError, match="remove the file"):
        api.read_holds(str(path), now=0)
