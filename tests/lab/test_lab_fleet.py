"""A fleet of two pairs on a four-node lab behind a gateway: concurrent deploy, the gateway (a key on every route,
engines off the LAN, two models on two clusters), a health-gated rollout with rollback, and faults.

With a gateway in the inventory the engines listen on their head's 127.0.0.1 only: the per-pair canaries reach each
pair through its head's door (port 8100), from the gateway box, the one host the doors admit.

Every fault test runs canary completions against every pair while the fault happens and prints, per pair,
the requests sent, answered and failed. A pair the fault does not touch must answer every one; a pair being
switched may only miss requests while it is switched (its window is recorded by the rollout on its head).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from ansible_collections.dgxspark.vllm.tests.unit.plugins.plugin_utils.tls_chains import company_ca
from labkit import (BIN, GATEWAY, INVENTORY, LAB, REPO, ansible_env, broken_image_dockerfile, door_certificate,
                    engine_key, fabric_ip, gateway_certificate, gateway_context, gateway_url, load_into, mgmt_ip, node,
                    node_exec, run)
from labkit import ENGINES, LAST

# It starts Ray clusters: the engines' worker (labkit.ENGINES), after the pairs' files (labkit.LAST), when the other
# worker's image builds are over.
pytestmark = [ENGINES, LAST, pytest.mark.lab_minutes(15)]

NODES = 4
BASE = "lab/vllm-node:0.14"
NEW = "lab/vllm-node:0.14-r2"        # the next release: same engine, another image
BROKEN = "lab/vllm-node:0.14-bad"    # passes the hybrid gates, dies when vllm serve starts
NEXT = "lab/vllm-node:0.14-r3"       # the release after NEW, rolled over both pairs
MODEL = "Qwen/Qwen3-30B-A3B"
SERVED = "qwen3-30b-a3b"
SAME_MODEL = ("-e", f"dgxspark_model={MODEL}")  # what every play of this file is asked (play())
KEY = "lab-api-key-not-a-secret"
DEPLOY = str(REPO / "playbooks" / "deploy_qwen35.yml")
ROLLOUT = str(REPO / "playbooks" / "rollout.yml")
TEARDOWN = str(REPO / "playbooks" / "teardown.yml")
HEADS = {"pair1": 1, "pair2": 3}
# The operator's CA of pair2's door (fleet()), and the host_vars file that gives its certificate, beside the lab's
# inventory as an operator keeps one.
OPERATOR_CA: dict = {}
DOOR_HOST_VARS = INVENTORY.parent / "host_vars" / f"{node(HEADS['pair2'])}.yml"
GATEWAY_PLAY = str(REPO / "playbooks" / "gateway.yml")
DOOR_PORT = 8100
ENGINE_URL = "http://127.0.0.1:8000"  # where each head's engine listens, with a gateway in the fleet


def play(path, *args, inventory_extra=None, timeout=1500):
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY)]
    if inventory_extra:
        argv += ["-i", str(inventory_extra)]
    return run([*argv, path, "-e", f"dgxspark_model={MODEL}", *args], check=False, env=ansible_env(), timeout=timeout)


def flat(proc):
    return " ".join(proc.stdout.split())


def why(proc):
    """A failed play's failures (every fatal/failed task result), then its recap: what an assertion should show."""
    lines = proc.stdout.splitlines()
    picked = [" ".join(lines[i:i + 3]) for i, line in enumerate(lines)
              if line.startswith(("fatal:", "failed:")) or "FAILED!" in line]
    return "\n".join(picked)[-6000:] + "\n" + flat(proc)[-1500:]


def containers(i):
    return node_exec(node(i), "docker", "ps", "-a", "--format", "{{.Names}}").stdout.split()


# A 1-token completion to one pair's door, sent from the gateway box (the doors admit the gateways only).
DOOR_PY = ("import json, ssl, sys, urllib.request\n"
           "url, model, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])\n"
           "context = ssl.create_default_context(cadata=sys.argv[4])\n"
           "body = json.dumps({'model': model, 'prompt': 'canary', 'max_tokens': 1, 'temperature': 0}).encode()\n"
           "req = urllib.request.Request(url, data=body, headers={'Content-Type': 'application/json',\n"
           "                             'Authorization': 'Bearer ' + sys.stdin.read().strip()})\n"
           "with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:\n"
           "    sys.exit(0 if resp.status == 200 and json.load(resp).get('choices') else 1)\n")


def pair_door_certificate(pair):
    """The certificate of PAIR's door (gateway_door_tls), read on its head: what the gateway's relay trusts alone."""
    return door_certificate(HEADS[pair])


def completion(pair, timeout=10.0):
    """One pair answers a completion, asked through its head's door (over TLS, trusting its certificate alone) from
    the gateway box."""
    url = f"https://{mgmt_ip(HEADS[pair])}:{DOOR_PORT}/v1/completions"
    try:
        proc = subprocess.run(["docker", "exec", "-i", GATEWAY, "python3", "-c", DOOR_PY, url, SERVED, str(timeout),
                               pair_door_certificate(pair)],
                              input=engine_key(node(HEADS[pair])), text=True, capture_output=True,
                              timeout=timeout + 15, check=False)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


# The status a pair's door answers a POST to PATH with, asked from the gateway box with the key on stdin (none if empty).
DOOR_STATUS_PY = ("import ssl, sys, urllib.error, urllib.request\n"
                  "key = sys.stdin.read().strip()\n"
                  "context = ssl.create_default_context(cadata=sys.argv[2])\n"
                  "headers = {'Content-Type': 'application/json', **({'Authorization': 'Bearer ' + key} if key else {})}\n"
                  "req = urllib.request.Request(sys.argv[1], data=b'{}', headers=headers)\n"
                  "try:\n"
                  "    print(urllib.request.urlopen(req, timeout=10, context=context).status)\n"
                  "except urllib.error.HTTPError as err:\n"
                  "    print(err.code)\n")


def door_status(pair, path, key):
    url = f"https://{mgmt_ip(HEADS[pair])}:{DOOR_PORT}{path}"
    return run(["docker", "exec", "-i", GATEWAY, "python3", "-c", DOOR_STATUS_PY, url, pair_door_certificate(pair)],
               input_text=key).stdout.strip()


def gateway_server(**args):
    """dgxspark.vllm.gateway_server on the gateway box, as a rollout runs it: its result."""
    proc = run([str(BIN / "ansible"), GATEWAY, "-i", str(INVENTORY), "--become", "-m",
                "dgxspark.vllm.gateway_server", "-a", json.dumps(args)], check=False,
               env=ansible_env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"))
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][GATEWAY]
    assert proc.returncode == 0 and not result.get("failed"), (args, result)
    return result


def through_gateway(method, path, key=None, body=None, timeout=30.0, context=None):
    """(status, parsed JSON or text) of a request to the gateway, from the controller, over HTTPS trusting the
    gateway's certificate alone (CONTEXT, else read on the gateway box)."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{gateway_url()}{path}", data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context or gateway_context()) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


class GatewayClient:
    """One client of the fleet: a 1-token completion through the gateway every quarter second, from a thread."""

    def __init__(self, model=SERVED, period=0.25):
        self.model, self.period = model, period
        self.results = []                # (sent at, answered, status)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.context = gateway_context()

    def _run(self):
        body = {"model": self.model, "prompt": "canary", "max_tokens": 1, "temperature": 0}
        while not self.stop.is_set():
            sent = time.time()
            try:
                status, answer = through_gateway("POST", "/v1/completions", key=KEY, body=body, timeout=120,
                                                 context=self.context)
            except OSError as exc:          # the gateway itself did not answer
                status, answer = type(exc).__name__, {}
            ok = status == 200 and isinstance(answer, dict) and bool(answer.get("choices"))
            self.results.append((sent, ok, status))
            self.stop.wait(self.period)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=150)

    def report(self, event):
        """Print and return (sent, answered, failed)."""
        sent, answered = len(self.results), sum(ok for _t, ok, _s in self.results)
        failures = sorted({str(s) for _t, ok, s in self.results if not ok})
        print(f"through the gateway during {event}: sent {sent}, answered {answered}, failed {sent - answered}"
              + (f" (status {', '.join(failures)})" if failures else ""))
        return sent, answered, sent - answered


class Canary:
    """Sends a 1-token completion to each pair every half second, from a thread per pair."""

    def __init__(self, pairs):
        self.pairs = pairs
        self.results = {pair: [] for pair in pairs}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(pair,), daemon=True) for pair in pairs]

    def _run(self, pair):
        while not self.stop.is_set():
            sent = time.time()
            self.results[pair].append((sent, completion(pair)))
            self.stop.wait(0.5)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def report(self, event, windows=None):
        """Print and return {pair: (sent, answered, failed, failed outside the pair's own window)}."""
        windows = windows or {}
        counts = {}
        for pair, results in self.results.items():
            start, end = windows.get(pair, (None, None))
            outside = [t for t, ok in results if not ok and not (start is not None and start - 1 <= t <= end + 1)]
            counts[pair] = (len(results), sum(ok for _t, ok in results), sum(not ok for _t, ok in results), len(outside))
            print(f"canary during {event}: {pair}: sent {counts[pair][0]}, answered {counts[pair][1]}, failed {counts[pair][2]}"
                  + (f" (all within its own switch, {end - start:.0f} s)" if start is not None and not outside else
                     f", {len(outside)} outside its own switch" if start is not None else ""))
        return counts


def build_release_images():
    """NEW and BROKEN on this machine's engine, from the lab's 0.14 image."""
    run(["docker", "build", "-q", "-t", NEW, "-"], input_text=f"FROM {BASE}\nLABEL org.dgxspark.test.release=2\n")
    run(["docker", "build", "-q", "-t", BROKEN, "-"], input_text=broken_image_dockerfile(BASE, "2-broken"))


def images_file(tmp_path, pair1, pair2):
    """An extra inventory source giving each pair's nodes their image (host vars: the lab's group_vars/all, next to
    the main inventory, would win over group vars of another source)."""
    path = tmp_path / f"images-{abs(hash((pair1, pair2)))}.yml"
    path.write_text("all:\n  hosts:\n" + "".join(
        f"    {node(i)}:\n      dgxspark_image: {pair1 if i <= 2 else pair2}\n" for i in range(1, NODES + 1)))
    return path


def release(pair):
    return json.loads(node_exec(node(HEADS[pair]), "cat", "/etc/dgxspark/vllm/release.json").stdout)


def rollout_record(pair):
    return json.loads(node_exec(node(HEADS[pair]), "cat", "/etc/dgxspark/vllm/rollout.json").stdout)


def image_label(i, image, label):
    return node_exec(node(i), "docker", "image", "inspect", "-f", "{{index .Config.Labels \"" + label + "\"}}",
                     image).stdout.strip()


def serving(pair):
    deadline = time.monotonic() + 30
    while not completion(pair, timeout=15):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


@pytest.fixture(scope="module")
def fleet(lab):
    """Two pairs, both serving the 0.14 image (overlaid) and the small model, deployed concurrently from zero."""
    grew = len(lab["_meta"]["hostvars"]) < NODES
    # Four nodes and the gateway box (on the LAN only, in dgxspark_gateway): the deploy ends with the gateway.
    run([*LAB, "up", "--nodes", str(NODES), "--no-engine-images", "--gateway"])
    run([*LAB, "images", "vllm-node-0.14"])
    run([*LAB, "load", BASE])
    run([*LAB, "models"])
    build_release_images()
    # pair2's head serves its door with a certificate of the operator's CA, given in its host_vars as an operator
    # does (pair1's door and the gateway make their own): every play of this file runs with it.
    OPERATOR_CA.update(zip(("certificate", "key", "issuing", "root"), company_ca([mgmt_ip(HEADS["pair2"])])))
    DOOR_HOST_VARS.parent.mkdir(exist_ok=True)
    DOOR_HOST_VARS.write_text(json.dumps({
        "gateway_door_tls_certificate": OPERATOR_CA["certificate"] + OPERATOR_CA["issuing"] + OPERATOR_CA["root"],
        "gateway_door_tls_private_key": OPERATOR_CA["key"]}))
    try:
        first = play(DEPLOY, "-e", f"dgxspark_image={BASE}")
        yield first
        # The teardown checks every node and the gateway box: nothing of the collection is left on any of them.
        down = play(TEARDOWN)
    finally:
        DOOR_HOST_VARS.unlink(missing_ok=True)
    assert down.returncode == 0, why(down)
    assert re.search(r"TASK \[Check no gateway of the collection is left on the host\][^\n]*\nok: \[", down.stdout), flat(down)[-3000:]
    # Back to the session's lab (without the gateway box), so later tests run on the pair they were written for.
    run([*LAB, "up", "--nodes", str(len(lab["_meta"]["hostvars"]) if grew else NODES), "--no-engine-images"])


def test_a_door_with_a_certificate_of_the_operators_ca_is_trusted_through_its_root(fleet):
    """Found in the review of 96ffade: a door given a certificate of the operator's CA published that certificate as
    the one its clients trust alone (tls.crt); OpenSSL accepts no chain that stops at a certificate that is not
    self-signed, so the gateway's relay (HAProxy) failed every check and marked the door down. The door now publishes
    its chain's root, which the relay trusts, and the gateway finds the door up."""
    assert fleet.returncode == 0, flat(fleet)[-5000:]
    assert door_certificate(HEADS["pair2"]).strip() == OPERATOR_CA["root"].strip()
    relay = "door_" + hashlib.sha256(b"pair2").hexdigest()[:16]
    assert node_exec(GATEWAY, "cat", f"/etc/dgxspark/gateway/{relay}.crt").stdout.strip() == OPERATOR_CA["root"].strip()
    servers = gateway_server(server="pair2")["servers"]
    print(f"pair2 (its door served with the operator's CA): the gateway's view {servers}")
    assert servers and all(s["status"] == "UP" and s["check"] == "L7OK" for s in servers), servers
    # The door serves its whole chain: a client on the gateway box that trusts the root alone, without OpenSSL's
    # partial chains (as HAProxy), verifies it.
    verified = run(["docker", "exec", "-i", GATEWAY, "python3", "-c", ROOT_ONLY_PY, mgmt_ip(HEADS["pair2"]),
                    str(DOOR_PORT)], input_text=OPERATOR_CA["root"], check=False)
    assert verified.returncode == 0 and verified.stdout.strip() == "verified", verified.stdout + verified.stderr


# A TLS handshake to a door (argv: address, port) from a client that trusts the PEM on stdin alone, partial chains off.
ROOT_ONLY_PY = ("import socket, ssl, sys\n"
                "context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)\n"
                "context.load_verify_locations(cadata=sys.stdin.read())\n"
                "context.verify_flags &= ~getattr(ssl, 'VERIFY_X509_PARTIAL_CHAIN', 0)\n"
                "with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as raw:\n"
                "    with context.wrap_socket(raw, server_hostname=sys.argv[1]):\n"
                "        print('verified')\n")


def test_fleet_deploy_serves_every_pair(fleet):
    assert fleet.returncode == 0, flat(fleet)[-5000:]
    text = flat(fleet)
    for pair, head in HEADS.items():
        # The engine listens on its head's 127.0.0.1 (a gateway is in the fleet).
        assert f"{pair}: serving {SERVED} at {ENGINE_URL}/v1, TP 2 over {node(head)} + {node(head + 1)}" in text
        assert completion(pair)
    # status.yml (the fleet_status action): a line per pair with its engine, tokens and Ray, a row per member.
    status = flat(run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / "status.yml")],
                      env=ansible_env()))
    for pair, head in HEADS.items():
        assert re.search(rf"{pair}: model {SERVED} at {re.escape(ENGINE_URL)}, health 200, tokens generated [1-9][0-9]*;"
                         rf" Ray 2/2 nodes alive \({re.escape(fabric_ip(head))}, {re.escape(fabric_ip(head + 1))}\),"
                         r" GPUs 0\.0 free of 2\.0, Ray [0-9.]+\b", status), status[-3000:]
        # The head runs its door beside the engine (the gateways' way in).
        row = re.search(rf"{node(head)} ((?:/dgxspark-[a-z-]+, )*/dgxspark-[a-z-]+) Up", status)
        assert row and {"/dgxspark-ray-head", "/dgxspark-door"} <= set(row.group(1).split(", ")), status[-3000:]
        assert f"{node(head + 1)} /dgxspark-ray-worker Up" in status


# Every route the engine has (and one it has not): the gateway answers none of them without a client key.
ROUTES = [("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/invocations"),
          ("POST", "/tokenize"), ("POST", "/detokenize"), ("POST", "/v1/embeddings"), ("GET", "/metrics"),
          ("GET", "/health"), ("GET", "/version"), ("GET", "/ping"), ("GET", "/load"), ("GET", "/no/such/route")]


def chat_body(model=SERVED):
    return {"model": model, "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8, "temperature": 0}


def gateway_started_at():
    return node_exec(GATEWAY, "docker", "inspect", "-f", "{{.State.StartedAt}}", "dgxspark-gateway").stdout.strip()


def test_fleet_gateway_needs_a_key_on_every_route_and_the_engines_are_off_the_lan(fleet, tmp_path):
    assert fleet.returncode == 0, flat(fleet)[-5000:]
    assert (f"gateway {GATEWAY}: {gateway_url()}/v1 (API key required on every route), models: {SERVED} on pair1 + "
            "pair2") in flat(fleet)
    # Security review M2: at efb599c the gateway served plain HTTP. It serves TLS with a certificate made for it, whose
    # fingerprint the run prints; the controller fetches it as an operator does and finds the same.
    address = gateway_url().split("//", 1)[1].split(":")[0]
    served = ssl.get_server_certificate((address, 8000))
    printed = ":".join(f"{b:02X}" for b in hashlib.sha256(ssl.PEM_cert_to_DER_cert(served)).digest())
    print(f"gateway: TLS certificate SHA-256 {printed}")
    assert f"gateway {GATEWAY}: TLS certificate SHA-256 {printed} (self-signed, for {address}, " in flat(fleet)
    assert served.strip() == gateway_certificate().strip()
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(gateway_url().replace("https://", "http://") + "/v1/models", timeout=10)
    refused = 0
    for method, path in ROUTES:
        body = chat_body() if method == "POST" else None
        for label, key in (("no key", None), ("a wrong key", "not-the-lab-key-0000")):
            status, answer = through_gateway(method, path, key=key, body=body)
            print(f"gateway, {label}: {method} {path} -> {status}")
            assert status == 401, (method, path, label, status, answer)
            refused += 1
    print(f"gateway: {refused} of {2 * len(ROUTES)} requests without a valid key refused with 401")
    # With the key: a chat completion, the models, the gateway's own metrics.
    status, answer = through_gateway("POST", "/v1/chat/completions", key=KEY, body=chat_body())
    print(f"gateway, with the key: POST /v1/chat/completions -> {status}, model {answer.get('model')}, "
          f"{answer.get('usage', {}).get('completion_tokens')} token(s)")
    assert status == 200 and answer["model"] == SERVED and answer["choices"][0]["message"], answer
    status, answer = through_gateway("GET", "/v1/models", key=KEY)
    assert status == 200 and [m["id"] for m in answer["data"]] == [SERVED], answer
    status, metrics = through_gateway("GET", "/metrics", key=KEY)
    assert status == 200 and f'haproxy_backend_active_servers{{proxy="model_{SERVED}"}} 2' in metrics, metrics[:2000]
    status, answer = through_gateway("POST", "/v1/completions", key=KEY, body={"model": "no-such-model", "prompt": "x"})
    assert status == 404 and "no-such-model" in answer["error"]["message"], answer
    status, answer = through_gateway("POST", "/v1/chat/completions", key=KEY, body={"messages": []})
    assert status == 400 and "names none" in answer["error"]["message"], answer
    # Security review M7: with the key, every route that is not an inference route is answered by the gateway itself
    # (vLLM's key guards /v1 alone: /invocations, /tokenize and /pooling answer real vLLM without one), never
    # forwarded, whatever model its body names.
    for method, path in (("POST", "/invocations"), ("POST", "/tokenize"), ("POST", "/pooling"), ("POST", "/score"),
                         ("POST", "/v1/load_lora_adapter"), ("GET", "/version"), ("GET", "/v1/chat/completions"),
                         ("POST", "/v1/chat/completions/"), ("POST", "/v1/%63hat/completions")):
        status, answer = through_gateway(method, path, key=KEY, body=chat_body() if method == "POST" else None)
        assert status == 404 and answer["error"]["message"].startswith("this gateway serves GET /v1/models and POST "
                                                                       "/v1/chat/completions"), (method, path, answer)
    print("gateway, with the key: unknown model -> 404, no model -> 400, 9 routes that are no inference route "
          "(/invocations, /tokenize, GET /version, ...) -> 404 from the gateway itself")
    # From the controller, the engines' own ports refuse connections, and the doors close on it at once.
    for pair, head in HEADS.items():
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((mgmt_ip(head), 8000), timeout=5).close()
        print(f"{pair}: {mgmt_ip(head)}:8000 (the engine's port) refuses the controller's connection")
        with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected, urllib.error.URLError)) as err:
            urllib.request.urlopen(f"https://{mgmt_ip(head)}:{DOOR_PORT}/health", timeout=5)
        print(f"{pair}: the door {mgmt_ip(head)}:{DOOR_PORT} drops the controller ({type(err.value).__name__}), "
              "and answers the gateway box")
        assert completion(pair)
        # Security review M2: the gateway's relay to this door trusts this door's certificate alone.
        relay = "door_" + hashlib.sha256(pair.encode()).hexdigest()[:16]
        trusted = node_exec(GATEWAY, "cat", f"/etc/dgxspark/gateway/{relay}.crt").stdout
        assert trusted.strip() == pair_door_certificate(pair).strip(), pair
        # Security review M1: the door asks the gateway box too for the cluster's engine key, and relays no other
        # route. L7: each cluster has its own key: a client key, or the other cluster's engine key, is refused.
        own = engine_key(node(head))
        other = engine_key(node(next(h for p, h in HEADS.items() if p != pair)))
        asked = {"no key": door_status(pair, "/v1/completions", ""),
                 "a client key": door_status(pair, "/v1/completions", KEY),
                 "the other cluster's engine key": door_status(pair, "/v1/completions", other),
                 "/tokenize": door_status(pair, "/tokenize", own), "/invocations": door_status(pair, "/invocations", own)}
        print(f"{pair}: its door, asked from the gateway box: {asked}")
        assert own != other and own != KEY
        assert asked == {"no key": "401", "a client key": "401", "the other cluster's engine key": "401",
                         "/tokenize": "404", "/invocations": "404"}, asked
    # Security review L1: the configuration and client keys belong to a group only the gateway's container has.
    assert node_exec(GATEWAY, "stat", "-c", "%a %U %g", "/etc/dgxspark/gateway/keys").stdout.split() == [
        "640", "root", "64641"]
    assert node_exec(GATEWAY, "docker", "inspect", "-f", "{{json .HostConfig.GroupAdd}}",
                     "dgxspark-gateway").stdout.strip() == '["64641"]'
    # Security review L4: the gateway and every door rotate their logs (HAProxy logs every request and health check).
    for host, container in [(GATEWAY, "dgxspark-gateway")] + [(node(i), "dgxspark-door") for i in HEADS.values()]:
        config = json.loads(node_exec(host, "docker", "inspect", "-f", "{{json .HostConfig.LogConfig}}",
                                      container).stdout)
        assert config == {"Type": "json-file", "Config": {"max-file": "5", "max-size": "50m"}}, (host, config)
    # A new client key is a graceful reload (the same HAProxy process, never a restart); a rerun changes nothing.
    # Security review L8: a cluster a rollout drained and holds stays drained through that reload and through the
    # run's admission of every cluster.
    held = gateway_server(server="pair1", state="drain", hold=600, timeout=60)
    assert held["changed"] and {s["admin"] for s in held["servers"]} == {"drain"}, held
    started = gateway_started_at()
    keys = tmp_path / "keys.yml"
    keys.write_text(f"all:\n  vars:\n    gateway_api_keys: [{KEY}, second-client-key-123]\n")
    # gateway.yml is asked what the deploy was (the model: the gateway routes each cluster under the name the
    # inventory gives it, security review M6).
    added = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "-i", str(keys), GATEWAY_PLAY, *SAME_MODEL],
                check=False, env=ansible_env())
    assert added.returncode == 0, flat(added)[-3000:]
    assert re.search(rf"{GATEWAY} +: ok=\d+ +changed=[1-9]", added.stdout), added.stdout[-1500:]
    status, answer = through_gateway("POST", "/v1/chat/completions", key="second-client-key-123", body=chat_body())
    assert status == 200, answer
    assert gateway_started_at() == started
    assert "pair1 is held out at the gateway by a rollout" in added.stdout, added.stdout[-3000:]
    after = gateway_server(server="pair1")
    assert {s["admin"] for s in after["servers"]} == {"drain"}, after
    print("gateway: pair1, drained and held, stayed drained through the reload and the run's admission")
    readmitted = gateway_server(server="pair1", state="ready", timeout=120)
    assert readmitted["changed"] and {s["admin"] for s in readmitted["servers"]} == {"ready"}, readmitted
    again = run([str(BIN / "ansible-playbook"), "-vvv", "-i", str(INVENTORY), "-i", str(keys), GATEWAY_PLAY,
                 *SAME_MODEL], check=False, env=ansible_env())
    assert again.returncode == 0 and re.search(rf"{GATEWAY} +: ok=\d+ +changed=0 ", again.stdout), again.stdout[-1500:]
    assert all(re.search(rf"{node(i)} +: ok=\d+ +changed=0 ", again.stdout) for i in range(1, NODES + 1))
    back = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), GATEWAY_PLAY, *SAME_MODEL], check=False,
               env=ansible_env())
    assert back.returncode == 0
    assert through_gateway("GET", "/v1/models", key="second-client-key-123")[0] == 401
    assert gateway_started_at() == started
    print(f"gateway: a client key added and removed by graceful reloads (the container started once, {started}); "
          "a rerun with nothing changed: changed=0 on every host")
    # Security review, the secret sweep: the client keys and each cluster's engine key (L7) are in no process command
    # line, no docker inspect and no log of the gateway box or a head, nor in the -vvv run's output.
    secrets = {"client key": KEY, "second client key": "second-client-key-123",
               **{f"{pair}'s engine key": engine_key(node(head)) for pair, head in HEADS.items()}}
    # M2: the TLS private keys of the gateway and of each door (their longest base64 line).
    for what, host, path in [("gateway's TLS key", GATEWAY, "/etc/dgxspark/gateway/tls.pem")] + [
            (f"{pair}'s door TLS key", node(head), "/etc/dgxspark/gateway-door/tls.pem") for pair, head in HEADS.items()]:
        pem = node_exec(host, "cat", path).stdout
        lines = pem[pem.index("-----BEGIN PRIVATE KEY-----"):].splitlines()[1:-1]
        secrets[what] = max(lines, key=len)
    needles = {**secrets, **{f"{name} {algo}": hashlib.new(algo, value.encode()).hexdigest()
                             for name, value in secrets.items() for algo in ("sha256", "sha1", "md5")}}
    places = {"gateway.yml -vvv": again.stdout + again.stderr}
    for host in [GATEWAY] + [node(i) for i in HEADS.values()]:
        places[f"{host} /proc/*/cmdline"] = node_exec(
            host, "sh", "-c", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done").stdout
        names = node_exec(host, "docker", "ps", "-aq").stdout.split()
        places[f"{host} docker inspect"] = node_exec(host, "docker", "inspect", *names).stdout
        for name in ("dgxspark-gateway", "dgxspark-door"):
            logs = node_exec(host, "docker", "logs", name, check=False)
            if logs.returncode == 0:
                places[f"{host} docker logs {name}"] = logs.stdout + logs.stderr
    assert {f"{GATEWAY} docker logs dgxspark-gateway", f"{node(1)} docker logs dgxspark-door"} <= set(places)
    found = [(what, where) for what, needle in needles.items() for where, text in places.items() if needle in text]
    print(f"secret sweep: {len(needles)} needles in {len(places)} places, found {found}")
    assert not found, found


def serving_image_id(i, container):
    return node_exec(node(i), "docker", "inspect", "-f", "{{.Image}}", container).stdout.strip()


@pytest.mark.slow  # make test: TLS through the deployed gateway (the test above), plain HTTP rendered (unit tests)
def test_m2_plain_http_only_when_asked_and_the_run_says_so(fleet):
    """Security review M2: plain HTTP is an explicit choice (gateway_tls and gateway_door_tls false). The run says
    that keys cross the network in clear, the certificates and keys leave the gateway and the doors, and the
    gateway answers over HTTP. Asked for TLS again, the gateway makes a new certificate, whose fingerprint the run
    prints, and serves it."""
    assert fleet.returncode == 0
    before = gateway_certificate()
    plain = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), GATEWAY_PLAY, *SAME_MODEL,
                 "-e", "gateway_tls=false", "-e", "gateway_door_tls=false"], check=False, env=ansible_env())
    text = flat(plain)
    assert plain.returncode == 0, why(plain)
    assert (f"gateway {GATEWAY}: plain HTTP (gateway_tls: false): client keys and prompts cross the network in clear"
            in text), text[-3000:]
    assert f"gateway {GATEWAY}: http://" in text and "TLS certificate SHA-256" not in text
    left = [f"{host}:{path}" for host, path in [(GATEWAY, "/etc/dgxspark/gateway/tls.pem"),
                                                (GATEWAY, "/etc/dgxspark/gateway/tls.crt")]
            + [(node(h), "/etc/dgxspark/gateway-door/tls.pem") for h in HEADS.values()]
            if node_exec(host, "test", "-e", path, check=False).returncode == 0]
    assert not left, left
    request = urllib.request.Request(gateway_url().replace("https://", "http://") + "/v1/models",
                                     headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200 and SERVED in resp.read().decode()
    back = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), GATEWAY_PLAY, *SAME_MODEL], check=False,
               env=ansible_env())
    assert back.returncode == 0, why(back)
    after = gateway_certificate()
    printed = ":".join(f"{b:02X}" for b in hashlib.sha256(ssl.PEM_cert_to_DER_cert(after)).digest())
    assert after != before and f"gateway {GATEWAY}: TLS certificate SHA-256 {printed}" in flat(back)
    status, _answer = through_gateway("GET", "/v1/models", key=KEY)
    assert status == 200 and completion("pair1")
    print(f"gateway: plain HTTP when asked (said, certificates removed), then TLS again with a new certificate "
          f"{printed[:23]}...")


def test_a0_a_rollout_stops_before_the_switch_when_a_worker_lacks_the_previous_image_by_id(fleet, tmp_path):
    """The record names an image (by ID, for both nodes) only spark-3 holds: the rollout stops naming spark-4, nothing
    switches."""
    original = node_exec(node(3), "cat", "/etc/dgxspark/vllm/release.json").stdout
    load_into(NEW, 3)
    only_on_head = node_exec(node(3), "docker", "image", "inspect", "-f", "{{.Id}}", NEW).stdout.strip()
    assert node_exec(node(4), "docker", "image", "inspect", only_on_head, check=False).returncode != 0
    containers_before = {i: node_exec(node(i), "docker", "ps", "--format", "{{.ID}} {{.Names}}").stdout for i in (3, 4)}
    node_exec(node(3), "sh", "-c", "cat > /etc/dgxspark/vllm/release.json",
              input_text=json.dumps(dict(json.loads(original), image_id=only_on_head,
                                         image_ids={node(3): only_on_head, node(4): only_on_head})))
    try:
        proc = play(ROLLOUT, "-l", "pair2", "-e", f"dgxspark_image={NEW}")
    finally:
        node_exec(node(3), "sh", "-c", "cat > /etc/dgxspark/vllm/release.json", input_text=original)
        node_exec(node(3), "docker", "image", "rm", NEW, check=False)
    text = flat(proc)
    assert proc.returncode != 0
    assert (f"pair2: the previous release's image {only_on_head} ({json.loads(original)['image']}) is not on {node(4)},"
            " so a rollback could not serve it there. Nothing was switched") in text, text[-4000:]
    assert f"is not on {node(3)}" not in text
    # Nothing was staged or switched: the same containers serve, and answer.
    assert {i: node_exec(node(i), "docker", "ps", "--format", "{{.ID}} {{.Names}}").stdout for i in (3, 4)} == containers_before
    assert serving("pair2")


def test_a0_a_rollout_stops_before_staging_when_the_head_has_no_engine_key_of_its_own(fleet):
    """An upgrade trap of 0.9.0 (L7): each cluster's engine key is made by a deploy, and a rollout keeps the doors and
    the gateway as they are. A rollout run first after the upgrade would bring the engine back on a key no door sends
    and never admit it again: it stops before anything is staged, naming the fix."""
    containers_before = {i: node_exec(node(i), "docker", "ps", "--format", "{{.ID}} {{.Names}}").stdout for i in (3, 4)}
    node_exec(node(3), "mv", "/etc/dgxspark/vllm/engine.key", "/etc/dgxspark/vllm/engine.key.aside")
    try:
        proc = play(ROLLOUT, "-l", "pair2", "-e", f"dgxspark_image={NEW}")
    finally:
        node_exec(node(3), "mv", "/etc/dgxspark/vllm/engine.key.aside", "/etc/dgxspark/vllm/engine.key")
    text = flat(proc)
    assert proc.returncode != 0
    assert (f"pair2: its head {node(3)} has no engine key of its own (/etc/dgxspark/vllm/engine.key, made by a deploy "
            "since 0.9.0)") in text and "Run deploy.yml (or deploy_qwen35.yml) on the fleet once, then the rollout" \
        in text, text[-4000:]
    # Nothing pulled or staged: no image pulled, built or moved, no weights moved.
    assert "Pull dgxspark_image" not in proc.stdout and "Stage - " not in proc.stdout
    assert {i: node_exec(node(i), "docker", "ps", "--format", "{{.ID}} {{.Names}}").stdout for i in (3, 4)} == containers_before
    assert serving("pair2")


@pytest.mark.slow  # a failed rollout rolled back by ID: molecule's rollout scenario in make test; make lab-test
def test_a_rollout_whose_new_image_fails_on_pair2_rolls_pair2_back_and_stops(fleet, tmp_path):
    before = {pair: release(pair) for pair in HEADS}
    # pair2's serving tag moves to another image on both its nodes after the deploy (an overlay rebuilt under the
    # same tag): the rollback must serve the image that served, by its ID, not what the tag names now.
    old_id = before["pair2"]["image_id"]
    assert old_id.startswith("sha256:") and serving_image_id(3, "dgxspark-ray-head") == old_id, before["pair2"]
    moved_to = node_exec(node(3), "docker", "image", "inspect", "-f", "{{.Id}}", BASE).stdout.strip()
    assert moved_to != old_id
    for i in (3, 4):
        node_exec(node(i), "docker", "tag", BASE, before["pair2"]["image"])
    try:
        rollout_with_a_moved_tag(before, old_id, tmp_path)
    finally:  # the tag names the image it named again, for the deploys of the tests below
        for i in (3, 4):
            node_exec(node(i), "docker", "tag", old_id, before["pair2"]["image"])


def rollout_with_a_moved_tag(before, old_id, tmp_path):
    # The new release is in the inventory: pair1 gets the good image, pair2 an image that dies at start.
    # Both are only on the heads: staging syncs them to the workers.
    load_into(NEW, 1)
    load_into(BROKEN, 3)
    override = images_file(tmp_path, NEW, BROKEN)
    with GatewayClient() as client, Canary(list(HEADS)) as canary:
        proc = play(ROLLOUT, inventory_extra=override)
        time.sleep(2)
    text = flat(proc)
    sent, _answered, failed = client.report("a rollout whose new image fails on pair2 (rolled back)")
    assert sent > 20 and failed == 0, (sent, failed)
    assert proc.returncode != 0
    assert "pair2: the new release (" in text and "did not serve:" in text, text[-6000:]
    windows = {}
    for pair in HEADS:
        record = rollout_record(pair)
        windows[pair] = (float(record["switch_started"]), float(record["recorded_at"]))
    counts = canary.report("the rollout", windows)
    assert "libcudart.so.13: cannot open shared object file" in text
    assert "Rolled back: pair2 serves the previous release again" in text
    # pair1 switched and serves the new release; pair2 serves its old one again, and answers the canary prompt.
    assert rollout_record("pair1")["result"] == "switched" and rollout_record("pair2")["result"] == "rolled back"
    assert image_label(1, release("pair1")["image"], "org.dgxspark.test.release") == "2", release("pair1")
    # Served by ID: the record names the image by ID, every other field is the one before.
    after = release("pair2")
    assert after["image"] == old_id and after["image_id"] == old_id, after
    assert {k: v for k, v in after.items() if k != "image"} == {k: v for k, v in before["pair2"].items() if k != "image"}
    assert serving_image_id(3, "dgxspark-ray-head") == old_id and serving_image_id(4, "dgxspark-ray-worker") == old_id
    assert rollout_record("pair2")["from"]["image"] == before["pair2"]["image"]
    assert serving("pair2") and serving("pair1")
    for pair in HEADS:
        sent, answered, _failed, outside = counts[pair]
        assert sent > 0 and answered > 0 and outside == 0, (pair, counts[pair])


def test_a2_a_rollout_over_both_pairs_through_the_gateway_fails_no_request(fleet, tmp_path):
    """Both pairs serve SERVED; a new release (NEXT) rolls over both, each drained at the gateway before its switch,
    while one client sends through the gateway for the whole rollout: not one request fails."""
    run(["docker", "build", "-q", "-t", NEXT, "-"], input_text=f"FROM {BASE}\nLABEL org.dgxspark.test.release=3\n")
    load_into(NEXT, 1, 3)
    with GatewayClient() as client:
        time.sleep(2)
        proc = play(ROLLOUT, inventory_extra=images_file(tmp_path, NEXT, NEXT))
        time.sleep(2)
    text = flat(proc)
    sent, answered, failed = client.report("a rollout over both pairs")
    assert proc.returncode == 0, text[-6000:]
    for pair in HEADS:
        record = rollout_record(pair)
        print(f"{pair}: switched in {float(record['switch_ended']) - float(record['switch_started']):.0f} s, "
              "drained at the gateway meanwhile")
        assert record["result"] == "switched", record
        assert image_label(HEADS[pair], release(pair)["image"], "org.dgxspark.test.release") == "3"
    assert "Drain it at every gateway" in proc.stdout and "Admit the cluster again at the gateway" in proc.stdout
    assert sent > 20 and failed == 0, (sent, answered, failed)
    # Each cluster that switched recorded what the rollout left, as a deploy does: a deploy of the same inventory
    # finds every pair settled (one read per node and a completion), changes nothing and restarts nothing.
    heads = {pair: node_exec(node(i), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", "dgxspark-ray-head").stdout
             for pair, i in HEADS.items()}
    deployed = play(DEPLOY, inventory_extra=images_file(tmp_path, NEXT, NEXT))
    assert deployed.returncode == 0, why(deployed)
    for i in range(1, NODES + 1):
        assert f"{node(i)} goes through the whole deploy" not in deployed.stdout, flat(deployed)[-3000:]
        recap = next(line for line in deployed.stdout.splitlines() if line.startswith(node(i) + " ") and "ok=" in line)
        assert " changed=0 " in recap, (recap, flat(deployed)[-3000:])
    assert heads == {pair: node_exec(node(i), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", "dgxspark-ray-head").stdout
                     for pair, i in HEADS.items()}


def watchdog_events(pair, since):
    raw = node_exec(node(HEADS[pair]), "cat", "/var/lib/dgxspark/watchdog/events.jsonl", check=False).stdout
    return [e for e in (json.loads(line) for line in raw.splitlines() if line.strip()) if e.get("time", 0) >= since]


@pytest.mark.slow  # stall recovery: test_lab_deploy's watchdog tests in make test; routing around a drained pair: test_a2
def test_a3_a_stalled_pair_is_restarted_by_its_watchdog_while_the_gateway_routes_around_it(fleet):
    """The engine of pair1 stalls (its rank-0 worker SIGSTOPped: /health stays 200, completions hang). Its watchdog
    (default interval) restarts the whole pair; meanwhile one client through the gateway is answered by pair2."""
    head = node(HEADS["pair1"])
    pids = node_exec(head, "docker", "exec", "dgxspark-ray-head", "pgrep", "-f", "RayWorkerWrapper").stdout.split()
    assert pids
    with GatewayClient() as client:
        time.sleep(2)
        stalled = time.time()
        node_exec(head, "docker", "exec", "dgxspark-ray-head", "kill", "-STOP", *pids)
        deadline = time.monotonic() + 600
        while not [e for e in watchdog_events("pair1", stalled) if e["event"] == "recovered"]:
            assert time.monotonic() < deadline, watchdog_events("pair1", stalled)
            time.sleep(1)
        assert serving("pair1")
        time.sleep(2)
    events = watchdog_events("pair1", stalled)
    detected = next(e for e in events if e["event"] == "detected")
    action = next(e for e in events if e["event"] == "action")
    sent, _answered, failed = client.report("pair1's stall and its watchdog's restart")
    print(f"pair1: stall detected as {detected['kind']} after {detected['time'] - stalled:.1f} s, restart took "
          f"{action['duration']} s; the gateway meanwhile sent pair1's share to pair2")
    after_detection = [ok for t, ok, _s in client.results if t > detected["time"] + 1]
    assert detected["kind"] == "stall" and action["result"] == "done"
    assert all(after_detection) and len(after_detection) > 10, client.results
    assert sent > 20 and failed <= 2, (sent, failed)  # at most the requests in flight on the stalled engine


# After the rollout tests both pairs serve NEXT: the deploys below name exactly that, so a deploy is a no-op on the
# pair the fault does not touch.
AFTER = (NEXT, NEXT)


@pytest.mark.slow  # a worker that cannot reach its head fails bounded: test_ray_cluster in make test
def test_d_fabric_cut_during_startup_fails_bounded_and_leaves_nothing_running(fleet, tmp_path):
    play(TEARDOWN, "-l", "pair2")
    rules = [(4, ["OUTPUT", "-d", fabric_ip(3), "-j", "DROP"]), (3, ["OUTPUT", "-d", fabric_ip(4), "-j", "DROP"])]
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "-i", str(images_file(tmp_path, *AFTER)), DEPLOY,
            "-e", f"dgxspark_model={MODEL}"]
    started = time.monotonic()
    with Canary(["pair1"]) as canary:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ansible_env())
        try:
            # Cut the fabric between spark-3 and spark-4 once pair2's Ray head has started.
            while "dgxspark-ray-head" not in containers(3):
                assert proc.poll() is None, proc.stdout.read()[-4000:]
                time.sleep(0.5)
            for i, rule in rules:
                node_exec(node(i), "iptables", "-I", *rule)
            out = proc.communicate(timeout=900)[0]
        finally:
            for i, rule in rules:
                node_exec(node(i), "iptables", "-D", *rule, check=False)
    elapsed = time.monotonic() - started
    counts = canary.report("a fabric cut inside pair2 during its start-up")
    text = " ".join(out.split())
    assert proc.returncode != 0
    assert "pair2: the Ray cluster did not come up" in text, text[-4000:]
    assert "Every node of the cluster was torn down." in text
    assert elapsed < 600
    for i in (3, 4):
        assert not [c for c in containers(i) if c.startswith("dgxspark-")], (i, containers(i))
    assert counts["pair1"][3] == 0 and counts["pair1"][1] > 0


@pytest.mark.slow  # a restart without Ansible: test_lab_deploy's watchdog tests in make test; a rerun's changes: test_lab_deploy's
def test_c_a_killed_serving_container_is_restored_by_a_rerun(fleet, tmp_path):
    """After test_d (a slow test too): pair2 torn down, so its deploy here starts from zero. Then
    pair1's head container killed (its watchdog may restart the cluster first: the rerun waits for that recovery and
    leaves what it started running)."""
    images = images_file(tmp_path, *AFTER)
    up = play(DEPLOY, inventory_extra=images)
    assert up.returncode == 0, why(up)
    with Canary(["pair2"]) as canary:
        node_exec(node(1), "docker", "kill", "dgxspark-ray-head")
        node_exec(node(1), "docker", "update", "--restart", "no", "dgxspark-ray-head")  # stays down until the rerun
        assert not completion("pair1", timeout=5)
        rerun = play(DEPLOY, inventory_extra=images)
    counts = canary.report("the head's serving container killed and the rerun")
    assert rerun.returncode == 0, why(rerun)
    assert serving("pair1")
    assert counts["pair2"][2] == 0 and counts["pair2"][1] > 0


OTHER = "qwen3-30b-a3b-pair2"


def engine_requests(pair):
    """The number of requests pair's engine has answered (its own /metrics, read on its head's 127.0.0.1)."""
    text = node_exec(node(HEADS[pair]), "python3", "-c",
                     "import sys, urllib.request; req = urllib.request.Request(sys.argv[1], headers={'Authorization': "
                     "'Bearer ' + sys.stdin.read().strip()}); print(urllib.request.urlopen(req, timeout=10).read().decode())",
                     f"{ENGINE_URL}/metrics", input_text=KEY).stdout
    return sum(float(v) for v in re.findall(r"(?m)^vllm:request_success_total(?:\{[^}]*\})? ([0-9.e+]+)$", text))


@pytest.mark.slow  # the gateway's routing by model: test_lab_gateway_config (rendered) and the unit tests in make test
def test_z_two_models_on_two_clusters_behind_one_endpoint(fleet, tmp_path):
    """The module's last test (it leaves pair2 serving another model): pair2 redeployed, alone, with another served
    name; the one endpoint lists both models and each is answered by its own cluster."""
    served = tmp_path / "served.yml"
    served.write_text("all:\n  hosts:\n" + "".join(f"    {node(i)}:\n      vllm_serve_served_model_name: {OTHER}\n"
                                                   for i in (3, 4)))
    proc = play(DEPLOY, "-l", "pair2:dgxspark_gateway", "-e", f"dgxspark_image={BASE}", inventory_extra=served)
    text = flat(proc)
    assert proc.returncode == 0, text[-5000:]
    assert f"gateway {GATEWAY}: {gateway_url()}/v1 (API key required on every route), models: {SERVED} on pair1, " \
           f"{OTHER} on pair2" in text, text[-2000:]
    status, answer = through_gateway("GET", "/v1/models", key=KEY)
    print(f"gateway: GET /v1/models -> {status}: {[m['id'] for m in answer['data']]}")
    assert status == 200 and sorted(m["id"] for m in answer["data"]) == [SERVED, OTHER]
    before = {pair: engine_requests(pair) for pair in HEADS}
    log_start = node_exec(GATEWAY, "date", "-u", "+%Y-%m-%dT%H:%M:%SZ").stdout.strip()
    per_model = 5
    for model in (SERVED, OTHER):
        for _request in range(per_model):
            status, answer = through_gateway("POST", "/v1/chat/completions", key=KEY, body=chat_body(model))
            assert status == 200 and answer["model"] == model and answer["choices"], answer
    after = {pair: engine_requests(pair) for pair in HEADS}
    # The gateway's log names the backend and server (the cluster) of every request it forwarded.
    log = node_exec(GATEWAY, "docker", "logs", "--since", log_start, "dgxspark-gateway").stdout
    line = r" model_{}/{} .* 200 .*\"POST /v1/chat/completions"
    routed = {(backend, server): len(re.findall(line.format(re.escape(backend), server), log))
              for backend in (SERVED, OTHER) for server in HEADS}
    for (model, pair), count in routed.items():
        print(f"gateway: {count} chat completion(s) for {model} answered by {pair}")
    for pair in HEADS:
        print(f"{pair}: its engine answered {after[pair] - before[pair]:.0f} request(s) meanwhile (with the gateway's "
              "health checks)")
    assert routed == {(SERVED, "pair1"): per_model, (SERVED, "pair2"): 0, (OTHER, "pair1"): 0, (OTHER, "pair2"): per_model}
    assert after["pair1"] - before["pair1"] >= per_model and after["pair2"] - before["pair2"] >= per_model
    # An engine refuses a model it does not serve: pair2, asked through its door for pair1's model, does not answer.
    assert not completion("pair2")  # completion() names SERVED: pair2 no longer serves it
