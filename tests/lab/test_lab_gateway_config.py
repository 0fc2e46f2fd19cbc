"""The gateway's rendered configurations are ones HAProxy itself accepts (haproxy -c in the lab's HAProxy image,
Debian 13's 3.0, the branch of the official haproxy:3.0 image real gateways run), and a broken one is refused."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from labkit import LAB, run, tested_with

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway as gw
from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway_api as gwapi
from ansible_collections.dgxspark.vllm.plugins.plugin_utils import _tls

# The gateway's TLS identity (security review M2), as dgxspark.vllm.tls_identity makes one: for 127.0.0.1 and the
# addresses of the cases.
TLS = _tls.plan(None, ["127.0.0.1", "10.0.0.5", "fd00::5"], "gateway")
# pair1's door speaks TLS with a certificate of its own (gateway_door_tls); pair2's plain HTTP.
DOOR_TLS = _tls.plan(None, ["127.0.0.1"], "pair1 door")

IMAGE = "lab/haproxy:3.0"

CASES = {
    "one model, one cluster": ({"qwen3-30b-a3b": [{"name": "pair1", "address": "10.0.0.11", "port": 8100}]}, {}),
    "two models, three clusters, IPv6": ({
        "qwen3-30b-a3b": [{"name": "pair1", "address": "10.0.0.11", "port": 8100},
                          {"name": "pair2", "address": "10.0.0.13", "port": 8100}],
        "org.model:v2_b-1": [{"name": "cluster.c:3", "address": "fd00::15", "port": 65535}]}, {"bind": "fd00::5"}),
    "every tunable at a bound": ({"m": [{"name": "c", "address": "10.0.0.11", "port": 1}]},
                                 {"bind": "0.0.0.0", "port": 65535, "max_body": 64 * 1048576, "maxconn": 16,
                                  "check_interval": 3600, "check_timeout": 1, "timeout": 86400,
                                  "hard_stop_after": 1}),
}


@pytest.fixture(scope="module")
def image():
    run([*LAB, "images", "haproxy-3.0"])
    shown = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "haproxy", IMAGE, "-v"],
                           capture_output=True, text=True, check=False).stdout  # "HAProxy version 3.0.11-1+deb13u4 ..."
    tested_with("haproxy", f"`{IMAGE}`", shown.split("version ", 1)[1].split()[0] if "version " in shown else "")
    return IMAGE


def haproxy_check(tmp_path, config, keys=None):
    tmp_path.chmod(0o755)
    (tmp_path / "haproxy.cfg").write_text(config)
    (tmp_path / "haproxy.cfg").chmod(0o644)
    if keys is not None:
        (tmp_path / "keys").write_text(keys)
        (tmp_path / "keys").chmod(0o644)
    if " ssl crt " in config:
        (tmp_path / gw.TLS_FILE).write_text(TLS["pem"])
        (tmp_path / gw.TLS_FILE).chmod(0o644)
    # -V: HAProxy 3.0's -c says "Configuration file is valid" only when verbose (2.6 always did; the role reads the rc)
    return subprocess.run(["docker", "run", "--rm", "--network", "none", "--user", "99:99", "--entrypoint", "haproxy",
                           "-v", f"{tmp_path}:/usr/local/etc/haproxy:ro", IMAGE, "-c", "-V", "-f",
                           "/usr/local/etc/haproxy/haproxy.cfg"], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("case", list(CASES))
def test_haproxy_accepts_the_rendered_gateway(image, tmp_path, case):
    models, extra = CASES[case]
    args = {"bind": "10.0.0.5", "port": 8000,
            "engine_keys": {s["name"]: f"engine-key-of-{s['name']}" for servers in models.values() for s in servers}}
    args.update(extra)
    proc = haproxy_check(tmp_path, gw.render_gateway(models, **args), gw.render_keys(["client-key-0123", "k2-0123456"]))
    print(f"haproxy -c ({image}), gateway, {case}: rc {proc.returncode}, {(proc.stdout + proc.stderr).strip()}")
    assert proc.returncode == 0 and "Configuration file is valid" in proc.stdout + proc.stderr, proc.stderr


def test_haproxy_accepts_the_rendered_door(image, tmp_path):
    door = gw.render_door("10.0.0.11", 8100, ["10.0.0.5", "fd00::5"], "engine-key-0123456789", target_port=8000,
                          metrics_key="metrics-key-0123456789")
    proc = haproxy_check(tmp_path, door)
    print(f"haproxy -c ({image}), door: rc {proc.returncode}, {(proc.stdout + proc.stderr).strip()}")
    assert proc.returncode == 0, proc.stderr


def test_haproxy_refuses_a_broken_configuration_and_a_missing_keys_file(image, tmp_path):
    config = gw.render_gateway({"m": [{"name": "c", "address": "10.0.0.11", "port": 8100}]}, "10.0.0.5", 8000,
                               {"c": "engine-key-0123456789"})
    broken = haproxy_check(tmp_path, config.replace("balance leastconn", "balance no-such-algorithm"), "client-key-01\n")
    (tmp_path / "keys").unlink()
    missing = haproxy_check(tmp_path, config)
    print(f"haproxy -c ({image}): a broken configuration rc {broken.returncode}, no keys file rc {missing.returncode}")
    assert broken.returncode != 0 and missing.returncode != 0


class Door(http.server.BaseHTTPRequestHandler):
    """A cluster's door: answers every POST 200 with its name, and records the paths and bearer tokens it was asked."""
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.paths.append(self.path)
        self.server.tokens.append(self.headers.get("Authorization", ""))
        body = json.dumps({"cluster": self.server.name}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.fixture()
def live_gateway(image, tmp_path):
    """The rendered gateway in the lab's HAProxy 3.0, run as the role runs it (-W -db, the haproxy user, read-only,
    host network) on loopback, in front of two doors: {port, socket, config, doors, reload(), container}."""
    doors = {}
    for name in ("pair1", "pair2"):
        server = QuietServer(("127.0.0.1", 0), Door)
        server.name, server.paths, server.tokens = name, [], []
        if name == "pair1":
            pem = tmp_path / "door-tls.pem"
            pem.write_text(DOOR_TLS["pem"])
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(pem)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        doors[name] = server
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The runtime API's and the relays' unix sockets: a path of at most 107 bytes, with HAProxy's temporary name
    # (<path>.<pid>.tmp) beside it; pytest-xdist's tmp_path is too long for it, so a short directory of its own.
    config_dir, run_dir = tmp_path / "etc", Path(tempfile.mkdtemp(prefix="gw-", dir="/tmp"))
    config_dir.mkdir()
    os.chown(run_dir, 99, 99)
    models = {"m": [{"name": name, "address": "127.0.0.1", "port": d.server_address[1]} for name, d in doors.items()]}

    def write(door_certificate=DOOR_TLS["certificate"], **extra):
        trusted = {"pair1": door_certificate}
        text = gw.render_gateway(models, "127.0.0.1", port, {name: f"engine-key-of-{name}" for name in doors},
                                 check_interval=1, door_certificates=trusted,
                                 socket=f"{run_dir}/admin.sock", **extra)
        for file in gw.door_certificate_files(trusted):
            (config_dir / file["name"]).write_text(file["content"])
            (config_dir / file["name"]).chmod(0o644)
        (config_dir / "haproxy.cfg").write_text(text)
        (config_dir / "keys").write_text(gw.render_keys([CLIENT_KEY]))
        (config_dir / gw.TLS_FILE).write_text(TLS["pem"])
        for path in (config_dir, config_dir / "haproxy.cfg", config_dir / "keys", config_dir / gw.TLS_FILE):
            path.chmod(0o755 if path.is_dir() else 0o644)

    write(max_conn_per_source=3)
    name = f"dgxspark-test-gateway-{os.getpid()}-{port}"
    subprocess.run(["docker", "run", "-d", "--name", name, "--network", "host", "--user", "99:99", "--read-only",
                    "--cap-drop", "ALL", "-v", f"{config_dir}:/usr/local/etc/haproxy:ro", "-v", f"{run_dir}:{run_dir}",
                    "--entrypoint", "haproxy", image, "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"],
                   check=True, capture_output=True)
    client = gwapi.RuntimeAPI(f"{run_dir}/admin.sock")

    def wait_up():
        deadline = time.monotonic() + 30
        while True:
            try:
                rows = [r for name in doors for r in client.servers(name)[0]]
                if len(rows) == 2 and all(gwapi.is_healthy(r["status"]) for r in rows):
                    return
            except gwapi.GatewayError:
                pass
            logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
            assert time.monotonic() < deadline, logs.stdout + logs.stderr
            time.sleep(0.2)

    def reload(wait=True, **extra):
        """The role's reload: the new configuration in place, the saved state brought to it, SIGUSR2."""
        write(**extra)
        client.save_state(str(config_dir / "haproxy.cfg"))
        subprocess.run(["docker", "kill", "--signal", "USR2", name], check=True, capture_output=True)
        time.sleep(1.0)   # the new worker takes over; its runtime API answers for it
        if wait:
            wait_up()

    wait_up()
    yield {"port": port, "doors": doors, "api": client, "reload": reload, "run_dir": run_dir, "config_dir": config_dir,
           "container": name}
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    shutil.rmtree(run_dir, ignore_errors=True)
    for door in doors.values():
        door.shutdown()


CLIENT_KEY = "client-key-0123456789"


def connect(port):
    """A client of the live gateway over HTTPS, trusting its certificate alone (what `curl --cacert` does)."""
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=10,
                                       context=ssl.create_default_context(cadata=TLS["certificate"]))


def post(conn, path, model="m", key=CLIENT_KEY):
    body = json.dumps({"model": model, "prompt": "x"})
    conn.request("POST", path, body=body, headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def test_m7_the_gateway_forwards_inference_routes_alone(live_gateway):
    conn = connect(live_gateway["port"])
    for path in ("/invocations", "/tokenize", "/pooling", "/v1/load_lora_adapter", "/v1/chat/completions/",
                 "/v1/embeddings", "/v1//completions"):
        status, answer = post(conn, path)
        assert status == 404 and "this gateway serves" in answer["error"]["message"], (path, answer)
    status, answer = post(conn, "/v1/completions?stream=false")
    assert status == 200 and answer["cluster"] in ("pair1", "pair2")
    paths = [p for d in live_gateway["doors"].values() for p in d.paths]
    print(f"HAProxy 3.0, M7: 7 routes that are no inference route answered 404 by the gateway; the doors were asked "
          f"{paths} (health checks and the one completion)")
    assert set(paths) <= {"/v1/completions", "/v1/completions?stream=false"}, paths


def test_m2_the_gateway_speaks_tls_alone_with_the_certificate_whose_fingerprint_the_run_prints(live_gateway):
    """Security review M2: at efb599c the gateway served plain HTTP, so client keys crossed the LAN in clear. Now a
    client that trusts the certificate (its fingerprint as the run prints it) is served; a plain HTTP request on the
    port is not answered by the API, and a client that trusts nothing refuses the self-signed certificate."""
    conn = connect(live_gateway["port"])
    status, _answer = post(conn, "/v1/completions")
    seen = ":".join(f"{b:02X}" for b in __import__("hashlib").sha256(conn.sock.getpeercert(binary_form=True)).digest())
    assert status == 200 and seen == TLS["fingerprint_sha256"] and conn.sock.version() in ("TLSv1.2", "TLSv1.3")
    plain = http.client.HTTPConnection("127.0.0.1", live_gateway["port"], timeout=10)
    try:
        plain_status, plain_answer = post(plain, "/v1/completions")
    except (http.client.HTTPException, ConnectionError, json.JSONDecodeError) as exc:
        plain_status, plain_answer = 0, repr(exc)
    with pytest.raises(ssl.SSLCertVerificationError):
        post(http.client.HTTPSConnection("127.0.0.1", live_gateway["port"], timeout=10,
                                         context=ssl.create_default_context()), "/v1/completions")
    print(f"HAProxy 3.0, M2: over {conn.sock.version()} 200, certificate {seen}; plain HTTP {plain_status} "
          f"{str(plain_answer)[:80]}; a client trusting only the system CAs refuses it")
    assert plain_status != 200


def test_l7_each_door_gets_its_own_cluster_key_and_never_a_client_key(live_gateway):
    """Security review L7: at 4d7e9fc the gateway put one engine key, every cluster's, on every request and health
    check. In HAProxy 3.0 now, each door is asked (completions and health checks alike) with its own cluster's key
    alone, through the gateway's relay to it; the client's key stays at the gateway."""
    conn = connect(live_gateway["port"])
    answered = {post(conn, "/v1/completions")[1]["cluster"] for _i in range(8)}
    tokens = {name: set(door.tokens) for name, door in live_gateway["doors"].items()}
    print(f"HAProxy 3.0, L7: 8 completions answered by {sorted(answered)}; each door was asked with {tokens}")
    assert answered == {"pair1", "pair2"}
    assert tokens == {name: {f"Bearer engine-key-of-{name}"} for name in ("pair1", "pair2")}


def test_m2_a_relay_reaches_its_door_over_tls_and_refuses_a_door_with_another_certificate(live_gateway):
    """Security review M2: the relay to pair1 speaks TLS to its door and trusts pair1's certificate alone. With
    another certificate trusted (a door that is not pair1's, or a man in the middle), pair1's health checks fail and
    no request reaches it; pair2 (plain HTTP, gateway_door_tls false) serves them all."""
    conn = connect(live_gateway["port"])
    answered = {post(conn, "/v1/completions")[1]["cluster"] for _i in range(8)}
    assert answered == {"pair1", "pair2"}
    other = _tls.plan(None, ["127.0.0.1"], "another door")["certificate"]
    live_gateway["reload"](wait=False, door_certificate=other)
    client, deadline = live_gateway["api"], time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = client.servers("pair1")[0]
        if rows and not any(gwapi.is_healthy(r["status"]) for r in rows):
            break
        time.sleep(0.5)
    status = [r["status"] for r in client.servers("pair1")[0]]
    before = len(live_gateway["doors"]["pair1"].paths)
    conn = connect(live_gateway["port"])
    after = {post(conn, "/v1/completions")[1]["cluster"] for _i in range(6)}
    print(f"HAProxy 3.0, M2: over TLS to pair1's door, answered by {sorted(answered)}; with another certificate "
          f"trusted, pair1 is {status} and 6 completions were answered by {sorted(after)}")
    assert status and not any(gwapi.is_healthy(s) for s in status) and after == {"pair2"}
    assert len(live_gateway["doors"]["pair1"].paths) == before


def test_l10_a_source_over_its_share_of_connections_is_answered_429(live_gateway):
    conns = [connect(live_gateway["port"]) for _i in range(4)]
    answers = [post(conn, "/v1/completions")[0] for conn in conns]   # keep-alive: each stays open
    print(f"HAProxy 3.0, L10: 4 connections from one address with gateway_max_conn_per_source 3: {answers}")
    assert answers == [200, 200, 200, 429]
    # Two closed (the refused one counts while it is open): a new connection is the third.
    conns[0].close()
    conns[3].close()
    time.sleep(0.5)
    assert post(connect(live_gateway["port"]), "/v1/completions")[0] == 200


def test_l8_a_drain_survives_a_reload_of_haproxy_3_0(live_gateway):
    client = live_gateway["api"]
    for backend in ("model_m",):
        client.set_state(backend, "pair1", "drain")
    client.save_state(str(live_gateway["config_dir"] / "haproxy.cfg"))
    saved = (live_gateway["run_dir"] / gwapi.STATE_FILE).read_text()
    assert saved.startswith("1\n# be_id ") and " pair1 " in saved
    live_gateway["reload"](max_conn_per_source=5)   # a changed configuration: a graceful reload
    admin = {name: {r["admin"] for r in client.servers(name)[0]} for name in ("pair1", "pair2")}
    print(f"HAProxy 3.0, L8: after a reload (SIGUSR2, -W), admin states {admin}")
    assert admin == {"pair1": {"drain"}, "pair2": {"ready"}}
    conn = connect(live_gateway["port"])
    assert {post(conn, "/v1/completions")[1]["cluster"] for _i in range(6)} == {"pair2"}


class Engine(http.server.BaseHTTPRequestHandler):
    """An engine behind a door: answers every route 200 and records the method, path and bearer token it was asked
    (vLLM answers /tokenize, /invocations and its other non-/v1 routes with no key at all)."""
    protocol_version = "HTTP/1.1"

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.asked.append((self.command, self.path, self.headers.get("Authorization", "")))
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815 (http.server's names)

    def log_message(self, *_args):
        pass


ENGINE_KEY = "engine-key-0123456789"


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # HAProxy closes its idle connections to the engine: a reset, not a failure


class RunningDoor:
    """A door HAProxy renders from CONFIG (and a keys file, KEYS) runs in the lab's image, in front of an Engine on
    the loopback; ask() sends it a request, with a bearer token unless key is None."""

    def __init__(self, image, tmp_path, render, keys=None):
        self.engine = QuietServer(("127.0.0.1", 0), Engine)
        self.engine.asked = []
        threading.Thread(target=self.engine.serve_forever, daemon=True).start()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config_dir = tmp_path / "etc"
        config_dir.mkdir(mode=0o755)
        (config_dir / "haproxy.cfg").write_text(render(self.port, self.engine.server_address[1]))
        (config_dir / "haproxy.cfg").chmod(0o644)
        if keys is not None:
            (config_dir / "keys").write_text(keys)
            (config_dir / "keys").chmod(0o644)
        self.name = f"dgxspark-test-door-{os.getpid()}-{self.port}"
        subprocess.run(["docker", "run", "-d", "--name", self.name, "--network", "host", "--user", "99:99",
                        "--read-only", "--cap-drop", "ALL", "-v", f"{config_dir}:/usr/local/etc/haproxy:ro",
                        "--entrypoint", "haproxy", image, "-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"],
                       check=True, capture_output=True)

    def ask(self, method, path, key):
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                headers = {"Content-Type": "application/json"}
                if key is not None:
                    headers["Authorization"] = f"Bearer {key}"
                conn.request(method, path, body=b'{"model": "m", "prompt": "x"}' if method == "POST" else None,
                             headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (ConnectionRefusedError, http.client.RemoteDisconnected):
                assert time.monotonic() < deadline, "the door did not listen"
                time.sleep(0.2)

    def close(self):
        subprocess.run(["docker", "rm", "-f", self.name], capture_output=True, check=False)
        self.engine.shutdown()


# Every route the engine serves (vLLM 0.32), each with the method it takes, and those a door relays.
ROUTES = (("POST", "/tokenize"), ("POST", "/detokenize"), ("POST", "/invocations"), ("POST", "/scale_elastic_ep"),
          ("GET", "/version"), ("GET", "/load"), ("POST", "/v1/embeddings"), ("GET", "/v1/completions"),
          ("POST", "/metrics"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
          ("GET", "/health"), ("GET", "/metrics"))
RELAYED = {("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/health"),
           ("GET", "/metrics")}
ASKED_WITHOUT_A_GOOD_KEY = (("POST", "/v1/completions"), ("POST", "/tokenize"), ("POST", "/invocations"),
                            ("GET", "/metrics"), ("GET", "/version"), ("GET", "/health"))


METRICS_KEY = "metrics-key-0123456789"


def test_m1_l7_a_request_to_a_door_without_the_cluster_engine_key_is_refused(image, tmp_path):
    """Security review M1: the door was a TCP relay whose only barrier was the source address, so an admitted host (a
    monitoring box) reached every route of the engine, /tokenize and /invocations among them, with no key. L7: one
    engine key served every cluster, so one cluster's key opened every door. The door rendered today, in the lab's
    HAProxy 3.0, asks every request for its own cluster's engine key (another cluster's is refused), admits the
    monitoring hosts' metrics key for GET /metrics alone, and relays the inference routes, the model list, health and
    metrics alone."""
    def render(port, target):
        return gw.render_door("127.0.0.1", port, ["127.0.0.1"], ENGINE_KEY, target_port=target,
                              metrics_key=METRICS_KEY)

    door = RunningDoor(image, tmp_path, render)
    try:
        refused = {(method, path, label): door.ask(method, path, key)[0]
                   for method, path in ASKED_WITHOUT_A_GOOD_KEY
                   for label, key in (("no key", None), ("another key", "client-key-0123456789"),
                                      ("another cluster's engine key", "engine-key-of-another-cluster"),
                                      ("a prefix of the key", ENGINE_KEY[:-1]), ("the key and more", ENGINE_KEY + "0"))}
        assert set(refused.values()) == {401}, refused
        metrics = {(method, path): door.ask(method, path, METRICS_KEY)[0] for method, path in ROUTES}
        assert {route for route, status in metrics.items() if status != 401} == {("GET", "/metrics")}, metrics
        assert metrics[("GET", "/metrics")] == 200
        door.engine.asked.clear()
        routes = {(method, path): door.ask(method, path, ENGINE_KEY)[0] for method, path in ROUTES}
        print(f"HAProxy 3.0, M1: {len(refused)} requests without the engines' key answered 401; with it: {routes}; "
              f"the engine was asked {[(m, p) for m, p, _token in door.engine.asked]}")
        assert {route for route, status in routes.items() if status == 200} == RELAYED, routes
        assert {status for route, status in routes.items() if route not in RELAYED} == {404}, routes
        assert {(m, p) for m, p, _token in door.engine.asked} == RELAYED
        assert {token for _m, _p, token in door.engine.asked} == {f"Bearer {ENGINE_KEY}"}
    finally:
        door.close()


def test_m1_without_a_gateway_the_door_for_clients_asks_every_route_for_a_key(image, tmp_path):
    """Security review M1, a fleet without a gateway: the engine listened on the head's LAN address, where vLLM's own
    key guards /v1 alone (/tokenize, /invocations, /metrics and /version answered anyone). Now the head's door stands
    there for every client: a client key or the engines' key on every route, the inference routes, the model list,
    health and metrics alone relayed, and the engine asked with the engines' key only."""
    clients = ["client-key-0123456789", "second-client-key-98765"]

    def render(port, target):
        return gw.render_door("127.0.0.1", port, [], ENGINE_KEY, target_port=target, clients=True)

    door = RunningDoor(image, tmp_path, render, keys=gw.render_keys(clients))
    try:
        refused = {(method, path, label): door.ask(method, path, key)[0]
                   for method, path in ASKED_WITHOUT_A_GOOD_KEY
                   for label, key in (("no key", None), ("another key", "other-key-0123456789"),
                                      ("a prefix of a client key", clients[0][:-1]),
                                      ("a client key and more", clients[0] + "0"), ("an empty bearer", ""),
                                      ("a prefix of the engines' key", ENGINE_KEY[:-1]))}
        assert set(refused.values()) == {401}, refused
        assert not door.engine.asked
        routes = {(method, path, key): door.ask(method, path, key)[0]
                  for method, path in ROUTES for key in (*clients, ENGINE_KEY)}
        print(f"HAProxy 3.0, M1 without a gateway: {len(refused)} requests without a good key answered 401; with a "
              f"client key or the engines' key: {sorted(set(routes.values()))}")
        assert {(m, p) for (m, p, _k), status in routes.items() if status == 200} == RELAYED, routes
        assert {status for (m, p, _k), status in routes.items() if (m, p) not in RELAYED} == {404}, routes
        assert {(m, p) for m, p, _token in door.engine.asked} == RELAYED
        # The engine sees the engines' key alone: no client key goes further than the door.
        assert {token for _m, _p, token in door.engine.asked} == {f"Bearer {ENGINE_KEY}"}
    finally:
        door.close()
