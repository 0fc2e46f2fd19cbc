"""The gateway's HAProxy configurations: every value validated before it reaches a line, every route behind a key,
requests routed on the body's model to backends and servers named as the runtime API contract says."""

from __future__ import annotations

import re

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway as gw

KEY = "engine-key-0123456789"
ENV = f"VLLM_API_KEY={KEY}\n"
MODELS = {"qwen3-30b-a3b": [{"name": "pair1", "address": "10.0.0.11", "port": 8100},
                            {"name": "pair2", "address": "10.0.0.13", "port": 8100}],
          "qwen3.5-122b-a10b-fp8": [{"name": "cluster3", "address": "10.0.0.15", "port": 8100}]}


class EveryClusterKey(dict):
    """Each cluster's own engine key, for whichever clusters a test names."""

    def get(self, key, default=None):
        return f"engine-key-of-{key}"


def render(**kw):
    args = {"models": MODELS, "bind": "10.0.0.5", "port": 8000, "engine_keys": EveryClusterKey()}
    args.update(kw)
    return gw.render_gateway(**args)


def section(text, name):
    """The lines of section NAME (e.g. 'backend model_x'), up to the next blank line."""
    block = text.split(f"\n{name}\n", 1)[1]
    return block.split("\n\n", 1)[0].splitlines()


def test_one_backend_per_model_one_server_per_cluster_named_as_the_cluster():
    text = render()
    backends = re.findall(r"^backend (\S+)$", text, re.M)
    assert backends == ["model_qwen3-30b-a3b", "model_qwen3.5-122b-a10b-fp8"]
    # Each cluster's server is its relay (L7), named as the cluster; the relay holds the door's address.
    assert [line.split()[1:3] for line in section(text, "backend model_qwen3-30b-a3b") if line.strip().startswith("server ")] \
        == [["pair1", f"unix@/var/lib/dgxspark/gateway/{gw.relay_name('pair1')}.sock"],
            ["pair2", f"unix@/var/lib/dgxspark/gateway/{gw.relay_name('pair2')}.sock"]]
    assert [line.split()[1:3] for line in section(text, "backend model_qwen3.5-122b-a10b-fp8")
            if line.strip().startswith("server ")] == [["cluster3",
                                                        f"unix@/var/lib/dgxspark/gateway/{gw.relay_name('cluster3')}.sock"]]
    assert [section(text, f"listen {gw.relay_name(c)}")[-1] for c in ("pair1", "pair2", "cluster3")] == [
        "    server door 10.0.0.11:8100", "    server door 10.0.0.13:8100", "    server door 10.0.0.15:8100"]
    assert gw.relay_name("pair1") != gw.relay_name("pair2") and re.fullmatch(r"door_[0-9a-f]{16}", gw.relay_name("x"))
    assert "    stats socket /var/lib/dgxspark/gateway/admin.sock mode 600 level admin" in text.splitlines()
    assert "    bind 10.0.0.5:8000 ssl crt /usr/local/etc/haproxy/tls.pem" in text.splitlines()
    # Routing: each model to its own backend, on the body's model.
    assert "    use_backend model_qwen3-30b-a3b if { var(txn.model) -m str qwen3-30b-a3b }" in text.splitlines()
    assert "    use_backend model_qwen3.5-122b-a10b-fp8 if { var(txn.model) -m str qwen3.5-122b-a10b-fp8 }" in text
    assert "req.body,json_query('$.model')" in text and "option http-buffer-request" in text


def test_every_route_needs_a_key_before_anything_else_answers():
    lines = render().splitlines()
    start = lines.index("frontend api")
    rules = [line.strip() for line in lines[start:] if line.strip().startswith(("http-request", "use_backend"))]
    # The 401 comes right after the per-source connection limit (L10), which reads nothing of the request: /metrics,
    # /v1/models, /health and every backend come after it.
    assert rules[0].startswith("http-request return status 429 ") and rules[0].endswith("if { sc0_conn_cur gt 128 }")
    assert rules[1].startswith("http-request return status 401 ") and rules[1].endswith("unless bearer key_ok")
    assert "    acl key_ok req.fhdr(authorization),regsub(^Bearer\\ ,) -m str -f /usr/local/etc/haproxy/keys" in lines
    assert any("use-service prometheus-exporter if { path /metrics }" in r for r in rules[2:])
    assert not any("unless" in r and "401" not in r and "has_model" not in r and "inference" not in r for r in rules)


def test_v1_models_answers_the_union_of_the_models():
    text = render()
    line = next(line for line in text.splitlines() if "if { path /v1/models } METH_GET" in line)
    assert '{"id":"qwen3-30b-a3b","object":"model","owned_by":"dgxspark"}' in line
    assert '{"id":"qwen3.5-122b-a10b-fp8","object":"model","owned_by":"dgxspark"}' in line


def test_l7_each_cluster_key_goes_to_its_own_door_alone_on_requests_and_health_checks_never_a_client_key():
    """Security review L7: at 4d7e9fc every backend put one engine key, shared by every cluster, on its requests and
    checks. Now each cluster's server is a relay of its own that puts that cluster's key on, for its door alone."""
    keys = {"pair1": "key-of-pair1-0123", "pair2": "key-of-pair2-4567", "cluster3": "key-of-cluster3-89"}
    text = render(engine_keys=keys)
    backend = section(text, "backend model_qwen3-30b-a3b")
    assert "    http-request del-header Authorization" in backend  # the client's key stays at the gateway
    assert not [line for line in backend if "Bearer" in line]
    check = next(line for line in backend if "http-check send" in line)
    assert "meth POST uri /v1/completions" in check and '\'{"model":"qwen3-30b-a3b","prompt":"ping","max_tokens":1' in check
    assert "    http-check expect status 200" in backend
    for cluster, address in (("pair1", "10.0.0.11:8100"), ("pair2", "10.0.0.13:8100"), ("cluster3", "10.0.0.15:8100")):
        relay = section(text, f"listen {gw.relay_name(cluster)}")
        assert relay[-1] == f"    server door {address}"
        assert [line for line in relay if "Bearer" in line] == \
            [f'    http-request set-header Authorization "Bearer {keys[cluster]}"']
    assert text.count("Bearer key-of-") == 3


@pytest.mark.parametrize("keys", [{"pair1": "key-of-pair1-0123"}, {"pair1": "x", "pair2": "y", "cluster3": "z"},
                                  {"pair1": "k\"ey-1234", "pair2": "key-2-1234", "cluster3": "key-3-1234"}, None])
def test_l7_a_cluster_without_a_usable_engine_key_is_refused_naming_it(keys):
    with pytest.raises(gw.GatewayError, match="engine key"):
        render(engine_keys=keys)


def test_l7_engine_keys_come_from_each_head_serving_env_file():
    clusters = {"pair1": {"head": "s1"}, "pair2": {"head": "s3"}, "pair3": {"head": "s5"}}
    heads = {"s1": {"engine_env": "VLLM_API_KEY=key-of-pair1-0123\n"}, "s3": {"engine_env": "OTHER=1\n"}, "s5": {}}
    assert gw.engine_keys(clusters, heads) == {"pair1": "key-of-pair1-0123"}
    models, warnings = gw.gateway_models(
        clusters, {h: dict(v, release={"served_model_name": "m"}, lan_ip="10.0.0.1") for h, v in heads.items()}, 8100)
    assert [s["name"] for s in models["m"]] == ["pair1"]
    assert [w.split(":")[0] for w in warnings] == ["cluster pair2", "cluster pair3"]
    assert all("has no engine key" in w and "deploy the cluster again" in w for w in warnings)


def test_retries_only_what_no_backend_started_and_sizes_the_buffer_for_the_body():
    text = render(max_body=2 * 1048576)
    assert "    retry-on conn-failure empty-response 503" in text and "    option redispatch 1" in text
    assert f"    tune.bufsize {2 * 1048576 + gw.HEADER_ROOM + gw.MAXREWRITE}" in text
    assert "acl too_big req.hdr_val(content-length) gt 2097152" in text and "return status 413" in text


def test_an_unknown_model_is_404_and_a_request_without_one_400():
    text = render()
    assert "acl known_model var(txn.model) -m str qwen3-30b-a3b qwen3.5-122b-a10b-fp8" in text
    assert re.search(r"return status 404 .*json\(utf8s\).* if has_model !known_model$", text, re.M)
    assert re.search(r"return status 400 .* unless has_model$", text, re.M)


@pytest.mark.parametrize("name", ["m1\n    server evil 1.2.3.4:80", "a b", "model'x", 'm"', "m{1}", "", "x" * 101,
                                  "m#1", "m;1", "m/1", "m\\1", "ünï"])
def test_model_names_that_could_inject_are_refused(name):
    with pytest.raises(gw.GatewayError, match="served model name"):
        render(models={name: [{"name": "pair1", "address": "10.0.0.11", "port": 8100}]})


@pytest.mark.parametrize("cluster", ["pair1\n    server x 1.1.1.1:1", "pair 1", "pair1'", "", None])
def test_cluster_names_that_could_inject_are_refused(cluster):
    with pytest.raises(gw.GatewayError, match="cluster name"):
        render(models={"m": [{"name": cluster, "address": "10.0.0.11", "port": 8100}]})


@pytest.mark.parametrize("address", ["10.0.0.11\n    bind 0.0.0.0:1", "spark-1.example", "10.0.0.256", "", "0.0.0.0",
                                     "10.0.0.11 check"])
def test_server_addresses_must_be_one_ip(address):
    with pytest.raises(gw.GatewayError, match="LAN address"):
        render(models={"m": [{"name": "pair1", "address": address, "port": 8100}]})


@pytest.mark.parametrize("port", [0, 65536, "8100 check", "80a", True, None, -1, "0x50"])
def test_ports_are_checked(port):
    with pytest.raises(gw.GatewayError, match="port"):
        render(models={"m": [{"name": "pair1", "address": "10.0.0.11", "port": port}]})
    with pytest.raises(gw.GatewayError, match="gateway_port"):
        render(port=port)


def test_bind_may_be_every_address_and_ipv6_is_bracketed():
    assert "    bind 0.0.0.0:8000 ssl crt /usr/local/etc/haproxy/tls.pem" in render(bind="0.0.0.0").splitlines()
    text = render(bind="fd00::5", models={"m": [{"name": "pair1", "address": "fd00::11", "port": 8100}]}, tls=False)
    assert "    bind [fd00::5]:8000" in text.splitlines() and "    server door [fd00::11]:8100" in text.splitlines()
    with pytest.raises(gw.GatewayError, match="gateway_bind"):
        render(bind="gateway.example")


def test_a_cluster_twice_in_one_model_and_no_model_at_all_are_refused():
    with pytest.raises(gw.GatewayError, match="listed twice"):
        render(models={"m": [{"name": "pair1", "address": "10.0.0.11", "port": 8100}] * 2})
    with pytest.raises(gw.GatewayError, match="deploy a model first"):
        render(models={})
    with pytest.raises(gw.GatewayError, match="no cluster serves it"):
        render(models={"m": []})


@pytest.mark.parametrize("key", ["short", "has space-in-it", 'quote"inside-key', "comma,inside-key", "back\\slash-key",
                                 "new\nline-in-key", "x" * 513, "", None, "tab\tinside-key", "hash#inside-key"])
def test_keys_that_could_break_a_line_are_refused_and_never_echoed(key):
    with pytest.raises(gw.GatewayError) as err:
        gw.render_keys(["good-key-123456", key])
    assert "gateway_api_keys[1]" in str(err.value)
    if key and len(key) > 3:
        assert key not in str(err.value)
    with pytest.raises(gw.GatewayError, match="engine key") as err:
        render(engine_keys={"pair1": key, "pair2": "key-2-123456", "cluster3": "key-3-123456"})
    if key and len(key) > 3:
        assert key not in str(err.value)


def test_the_keys_file_is_one_key_a_line_without_duplicates():
    assert gw.render_keys(["key-one-12345", "key-two-12345", "key-one-12345"]) == "key-one-12345\nkey-two-12345\n"
    assert gw.render_keys(["A.b_c~d+e/f=g:h@i-j"]) == "A.b_c~d+e/f=g:h@i-j\n"
    for bad in ([], "key-one-12345", None):
        with pytest.raises(gw.GatewayError, match="gateway_api_keys is empty or not a list"):
            gw.render_keys(bad)


@pytest.mark.parametrize("field,value,match", [("max_body", 100, "gateway_max_body"), ("maxconn", "lots", "gateway_maxconn"),
                                               ("check_interval", 0, "gateway_check_interval"),
                                               ("timeout", "10m", "gateway_timeout")])
def test_tunables_are_whole_numbers_in_range(field, value, match):
    with pytest.raises(gw.GatewayError, match=match):
        render(**{field: value})


DOOR_KEY = "engine-key-0123456789"


def test_the_door_admits_the_gateways_only_and_relays_to_the_engine():
    text = gw.render_door("10.0.0.11", 8100, ["10.0.0.5", "10.0.0.6", "10.0.0.5"], DOOR_KEY, target_port=8000)
    lines = text.splitlines()
    assert "    bind 10.0.0.11:8100" in lines
    assert "    acl gateway src 10.0.0.5 10.0.0.6" in lines
    assert "    tcp-request connection reject unless gateway" in lines
    assert "    server engine 127.0.0.1:8000" in lines and "    mode http" in lines


def test_m1_m7_the_door_asks_every_request_for_the_engines_key_and_relays_inference_routes_alone():
    """Security review M1: the door's only barrier was the source address (a TCP relay: an admitted host, a monitoring
    box, reached /tokenize, /invocations and every other route of the engine with no key). M7 at the door: only the
    routes the gateway serves, the engine's model list, health and metrics."""
    lines = gw.render_door("10.0.0.11", 8100, ["10.0.0.5"], DOOR_KEY, paths=["/v1/chat/completions"]).splitlines()
    rules = [line.strip() for line in lines[lines.index("frontend door"):]]
    reject = rules.index("tcp-request connection reject unless gateway")
    key = rules.index(f'acl key_ok req.fhdr(authorization) -m str "Bearer {DOOR_KEY}"')
    refuse_401 = next(i for i, r in enumerate(rules) if r.startswith("http-request return status 401 ")
                      and r.endswith("hdr WWW-Authenticate Bearer unless key_ok"))
    assert "acl inference path -m str /v1/chat/completions" in rules
    assert "acl reads path -m str /v1/models /health /metrics" in rules
    refuse_404 = next(i for i, r in enumerate(rules) if r.startswith("http-request return status 404 ")
                      and r.endswith("unless inference METH_POST || reads METH_GET"))
    assert reject < key < refuse_401 < refuse_404 < rules.index("default_backend engine")
    with pytest.raises(gw.GatewayError, match="cluster's engine key .*not a usable API key") as err:
        gw.render_door("10.0.0.11", 8100, ["10.0.0.5"], "")
    with pytest.raises(gw.GatewayError, match="gateway_paths"):
        gw.render_door("10.0.0.11", 8100, ["10.0.0.5"], DOOR_KEY, paths=["/tokenize"])
    assert DOOR_KEY not in str(err.value)


@pytest.mark.parametrize("kw,match", [({"allowed": []}, "admits no gateway"), ({"allowed": "10.0.0.5"}, "admits no gateway"),
                                      ({"allowed": ["10.0.0.5 10.0.0.0/8"]}, "gateway LAN address"),
                                      ({"bind": "0.0.0.0"}, "not the unspecified"),
                                      ({"port": 8000, "bind": "127.0.0.1"}, "where the engine does"),
                                      ({"target_port": "8000\n"}, "engine's port")])
def test_door_mistakes_are_refused(kw, match):
    args = {"bind": "10.0.0.11", "port": 8100, "allowed": ["10.0.0.5"], "engine_key": DOOR_KEY}
    args.update(kw)
    with pytest.raises(gw.GatewayError, match=match):
        gw.render_door(**args)


def test_models_come_from_the_heads_release_records():
    clusters = {"pair1": {"head": "s1"}, "pair2": {"head": "s3"}, "pair3": {"head": "s5"}, "pair4": {"head": "s7"}}
    heads = {"s1": {"release": {"served_model_name": "a"}, "lan_ip": "10.0.0.11", "engine_env": ENV},
             "s3": {"release": {"served_model_name": "b"}, "lan_ip": "10.0.0.13", "engine_env": ENV},
             "s5": {"release": {}, "lan_ip": "10.0.0.15", "engine_env": ENV},
             "s7": {"release": {"served_model_name": "a"}, "lan_ip": "", "engine_env": ENV}}
    models, warnings = gw.gateway_models(clusters, heads, 8100)
    assert models == {"a": [{"name": "pair1", "address": "10.0.0.11", "port": 8100}],
                      "b": [{"name": "pair2", "address": "10.0.0.13", "port": 8100}]}
    assert warnings == ["cluster pair3: its head s5 has no release record (not deployed): the gateway does not route to it",
                        "cluster pair4: no LAN address is known for its head s7: the gateway does not route to it"]
    heads["s7"]["lan_ip"] = "10.0.0.17"
    models, _warnings = gw.gateway_models(clusters, heads, 8100)
    assert [s["name"] for s in models["a"]] == ["pair1", "pair4"]


def test_m6_a_head_that_claims_another_clusters_model_gets_none_of_its_traffic():
    """Security review M6: the gateway took each head's word (release.json) for the model it serves, so a head that
    claimed another cluster's name joined that backend and received its tenants' prompts. The name comes from the
    inventory now (dgxspark_fleet.clusters' served_model_name)."""
    clusters = {"pa": {"head": "s1", "served_model_name": "big"}, "pb": {"head": "s3", "served_model_name": "small"}}
    heads = {"s1": {"release": {"served_model_name": "big"}, "lan_ip": "10.0.0.11", "engine_env": ENV},
             "s3": {"release": {"served_model_name": "big"}, "lan_ip": "10.0.0.13", "engine_env": ENV}}
    models, warnings = gw.gateway_models(clusters, heads, 8100)
    assert models == {"big": [{"name": "pa", "address": "10.0.0.11", "port": 8100}]}
    assert warnings == ["cluster pb: its head s3's release serves 'big', but the inventory gives the cluster 'small' "
                        "(vllm_serve_served_model_name, else the model's name): the gateway does not route to it; "
                        "deploy the cluster again, or set the inventory to what it serves"]


def test_the_door_forwards_where_the_engine_listens():
    assert gw.door_target({"endpoint": {"host": "127.0.0.1", "port": 8000}}) == ("127.0.0.1", 8000)
    assert gw.door_target({"endpoint": {"host": "0.0.0.0", "port": 8001}}) == ("127.0.0.1", 8001)
    assert gw.door_target({"endpoint": {"host": "10.0.0.11", "port": 8000}}) == ("10.0.0.11", 8000)


def test_m7_only_a_post_to_an_inference_path_goes_further_than_the_gateway():
    lines = render().splitlines()
    start = lines.index("frontend api")
    rules = [line.strip() for line in lines[start:] if line.strip().startswith(("http-request", "use_backend", "acl"))]
    acl = rules.index("acl inference path -m str /v1/chat/completions /v1/completions")
    refuse = next(i for i, r in enumerate(rules) if r.startswith("http-request return status 404 ")
                  and r.endswith("unless inference METH_POST"))
    assert "POST /v1/chat/completions, /v1/completions" in rules[refuse]
    # After the key, /metrics, /v1/models and /health; before anything reads the body or picks a backend.
    assert acl < refuse < min(i for i, r in enumerate(rules) if "req.body" in r or r.startswith("use_backend"))
    assert refuse > next(i for i, r in enumerate(rules) if "{ path /health }" in r)
    text = render(paths=["/v1/chat/completions", "/v1/embeddings", "/v1/chat/completions"])
    assert "    acl inference path -m str /v1/chat/completions /v1/embeddings" in text.splitlines()


@pytest.mark.parametrize("paths", ["/v1/chat/completions", [], ["/invocations"], ["/v1/chat/completions/"],
                                   ["/v1/../tokenize"], ["/v1/chat completions"], ["/v1/chat/completions?x=1"],
                                   ["/v1//completions"], [None], ["/V1/Completions"]])
def test_m7_inference_paths_that_are_no_v1_route_are_refused(paths):
    with pytest.raises(gw.GatewayError, match="gateway_paths"):
        render(paths=paths)


def test_l10_each_source_holds_at_most_its_share_of_connections():
    lines = render(maxconn=512, max_conn_per_source=40).splitlines()
    assert "    stick-table type ipv6 size 100k expire 10m store conn_cur" in lines
    assert "    tcp-request connection track-sc0 src" in lines
    assert any(line.endswith("if { sc0_conn_cur gt 40 }") and "status 429" in line for line in lines)
    for bad in (0, 100001, "x"):
        with pytest.raises(gw.GatewayError, match="gateway_max_conn_per_source"):
            render(maxconn=512, max_conn_per_source=bad)


def test_l8_haproxy_reads_the_servers_state_beside_its_socket_at_every_start():
    lines = render().splitlines()
    assert "    server-state-file /var/lib/dgxspark/gateway/server-state" in lines
    assert lines.index("    server-state-file /var/lib/dgxspark/gateway/server-state") < lines.index("defaults")
    assert "    load-server-state-from-file global" in lines[lines.index("defaults"):]


def test_m1_a_door_for_clients_asks_for_a_client_key_and_sends_the_engines_key_on():
    """A fleet without a gateway (the planned door on every head): every source admitted, a client key asked on every
    route, the engines' key sent on to the engine, the same routes relayed."""
    lines = gw.render_door("10.0.0.11", 8000, [], DOOR_KEY, clients=True).splitlines()
    front = [line.strip() for line in lines[lines.index("frontend door"):lines.index("backend engine")]]
    assert not [r for r in front if r.startswith(("acl gateway", "tcp-request"))]
    assert "acl key_ok req.fhdr(authorization),regsub(^Bearer\\ ,) -m str -f /usr/local/etc/haproxy/keys" in front
    assert f'acl engine_key req.fhdr(authorization) -m str "Bearer {DOOR_KEY}"' in front
    assert any(r.endswith("unless bearer key_ok || engine_key") and r.startswith("http-request return status 401")
               for r in front)
    assert any(r.endswith("unless inference METH_POST || reads METH_GET") for r in front)
    back = [line.strip() for line in lines[lines.index("backend engine"):]]
    assert back[1:] == [f'http-request set-header Authorization "Bearer {DOOR_KEY}"', "server engine 127.0.0.1:8000"]
    with pytest.raises(gw.GatewayError, match="admits every source"):
        gw.render_door("10.0.0.11", 8000, ["10.0.0.5"], DOOR_KEY, clients=True)


def test_a_run_directory_too_long_for_the_relays_unix_sockets_is_refused():
    """The relays' sockets live beside the runtime API's (gateway_run_dir): a unix socket's path has at most 107
    bytes, and HAProxy binds a temporary name beside it first; a longer one would leave the gateway unable to start."""
    assert "door_" in render(socket="/" + "d" * 60 + "/admin.sock")
    with pytest.raises(gw.GatewayError, match="gateway_run_dir.*too long"):
        render(socket="/" + "d" * 70 + "/admin.sock")


def test_m2_clients_reach_the_gateway_over_tls_by_default_and_over_plain_http_only_when_asked():
    """Security review M2: the gateway terminates TLS (1.2 or newer) unless tls=False is asked for."""
    lines = render().splitlines()
    assert [line for line in lines if line.startswith("    bind ") and "unix@" not in line] == [
        "    bind 10.0.0.5:8000 ssl crt /usr/local/etc/haproxy/tls.pem"]
    assert "    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets" in lines
    plain = render(tls=False).splitlines()
    assert [line for line in plain if line.startswith("    bind ") and "unix@" not in line] == ["    bind 10.0.0.5:8000"]
    assert not [line for line in plain if "ssl" in line]


DOOR_CERT = "-----BEGIN CERTIFICATE-----\nMIIBfzCCASWgAwIBAgIUZG9vcg==\n-----END CERTIFICATE-----\n"


def test_m2_each_relay_speaks_tls_to_its_door_and_trusts_its_certificate_alone():
    """Security review M2: between the gateway and the doors, each relay verifies its own door's certificate (a file
    of its own beside the configuration); a door without one (gateway_door_tls false) is reached over plain HTTP."""
    text = render(door_certificates={"pair1": DOOR_CERT, "pair2": ""})
    relay1, relay2 = gw.relay_name("pair1"), gw.relay_name("pair2")
    assert section(text, f"listen {relay1}")[-1] == (
        f"    server door 10.0.0.11:8100 ssl verify required ca-file /usr/local/etc/haproxy/{relay1}.crt")
    assert section(text, f"listen {relay2}")[-1] == "    server door 10.0.0.13:8100"
    assert "    ssl-default-server-options ssl-min-ver TLSv1.2" in text.splitlines()
    assert gw.door_certificate_files({"pair1": DOOR_CERT}) == [{"name": f"{relay1}.crt", "content": DOOR_CERT}]
    assert gw.door_certificates({"pair1": {"head": "h1"}, "pair2": {"head": "h2"}},
                                {"h1": {"door_certificate": DOOR_CERT}, "h2": {}}) == {"pair1": DOOR_CERT}
    for bad in ("x", DOOR_CERT + "-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n",
                DOOR_CERT.replace("MIIB", "MI\"IB")):
        with pytest.raises(gw.GatewayError, match="pair1's door certificate is not a PEM certificate"):
            render(door_certificates={"pair1": bad})


def test_m2_a_door_speaks_tls_alone_when_asked():
    lines = gw.render_door("10.0.0.11", 8100, ["10.0.0.5"], DOOR_KEY, tls=True).splitlines()
    assert "    bind 10.0.0.11:8100 ssl crt /usr/local/etc/haproxy/tls.pem" in lines
    assert "    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets" in lines
    plain = gw.render_door("10.0.0.11", 8100, ["10.0.0.5"], DOOR_KEY).splitlines()
    assert "    bind 10.0.0.11:8100" in plain and not [line for line in plain if "ssl" in line]
