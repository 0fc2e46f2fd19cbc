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
    return gw.render_gateway(models, "10.0.0.5", 8000, {c["name"]: f"key-of-{c['name']}" for servers in models.values()
                                                        for c in servers})


MODELS = {"m1": [{"name": "pair1", "address": "10.0.0.11", "port": 8100},
                 {"name": "pair2", "address": "fd00::13", "port": 8100}]}
RELAY1 = gw.relay_name("pair1")


def test_the_rendered_configuration_s_servers_are_read_back():
    """Each cluster's server is its relay's socket (L7), for which HAProxy saves no address; the relays themselves
    (listen sections) hold no state to keep."""
    assert api.configured_servers(config(MODELS)) == {("model_m1", "pair1"): ("-", "0"),
                                                      ("model_m1", "pair2"): ("-", "0")}


def test_l8_a_drained_cluster_whose_door_moved_keeps_its_drain_and_its_relay_goes_to_the_new_door():
    """HAProxy applies a saved server's address over its configuration's (haproxy/haproxy#1412): the relay's saved
    row would send the cluster's key to the door's old address. The relays' rows are left out of the saved state, so
    the configuration's door address holds; the cluster's server keeps its drain."""
    dump = "\n".join(["1", HEADER, line("model_m1", "pair1", "-", 0, admin=8), line(RELAY1, "door", "10.0.0.11", 8100),
                      line("model_m1", "pair2", "-", 0, admin=8), line("model_gone", "pair3", "-", 0)]) + "\n"
    moved_models = {"m1": [{"name": "pair1", "address": "10.0.0.21", "port": 8100},
                           {"name": "pair2", "address": "fd00::13", "port": 8100}]}
    text, moved = api.state_for_config(dump, config(moved_models))
    assert moved == []
    assert text.splitlines()[:2] == ["1", HEADER]
    header = HEADER[2:].split()
    rows = [dict(zip(header, r.split())) for r in text.splitlines()[2:]]
    kept = [(r["be_name"], r["srv_name"], r["srv_admin_state"]) for r in rows]
    assert kept == [("model_m1", "pair1", "8"), ("model_m1", "pair2", "8")]
    assert f"listen {RELAY1}" in config(moved_models) and "    server door 10.0.0.21:8100" in config(moved_models)


def test_l8_a_state_saved_before_the_relays_is_brought_to_them_and_keeps_its_drain():
    """A state saved by 0.8 (each cluster's server at its door's address): the drain stays, at the relay."""
    dump = "\n".join(["1", HEADER, line("model_m1", "pair1", "10.0.0.11", 8100, admin=8)]) + "\n"
    text, moved = api.state_for_config(dump, config(MODELS))
    assert moved == ["model_m1/pair1"]
    row = dict(zip(HEADER[2:].split(), text.splitlines()[2].split()))
    assert (row["srv_addr"], row["srv_port"], row["srv_op_state"], row["srv_admin_state"]) == ("-", "0", "0", "8")


def test_a_dump_that_is_not_haproxy_s_is_refused():
    with pytest.raises(api.GatewayError, match="unexpected 'show servers state' answer"):
        api.state_for_config("Unknown command\n", config(MODELS))


def test_l8_without_a_running_haproxy_the_saved_state_is_brought_to_the_new_configuration(tmp_path):
    (tmp_path / "haproxy.cfg").write_text(config({"m1": [{"name": "pair1", "address": "10.0.0.21", "port": 8100}]}))
    client = api.RuntimeAPI(str(tmp_path / "admin.sock"), timeout=1)
    assert client.save_state(str(tmp_path / "haproxy.cfg")) == []           # nothing saved, nothing made
    assert not (tmp_path / api.STATE_FILE).exists()
    (tmp_path / api.STATE_FILE).write_text("\n".join(["1", HEADER, line("model_m1", "pair1", "10.0.0.11", 8100,
                                                                        admin=8),
                                                      line(RELAY1, "door", "10.0.0.11", 8100)]) + "\n")
    assert client.save_state(str(tmp_path / "haproxy.cfg")) == ["model_m1/pair1"]
    saved = (tmp_path / api.STATE_FILE).read_text().splitlines()[2:]
    assert len(saved) == 1 and saved[0].split()[4] == "-" and saved[0].split()[6] == "8"
    assert (tmp_path / api.STATE_FILE).stat().st_mode & 0o777 == 0o600
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
