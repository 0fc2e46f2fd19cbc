"""deploy_qwen35.yml end to end on the lab: preflight, hybrid overlay, image_sync, Ray, vllm serve TP=2, probe; then
the watchdog on the same pair (issue 14, 3 and 4): a stalled engine detected within two intervals and the whole
cluster restarted; both nodes powered off and on, the head last, serving again without Ansible; a cluster that can
never start stopped at the cap. The module deploys once and tears down at the end, so later modules find the pair
clean."""

from __future__ import annotations

import base64
import datetime
import hashlib
import http.client
import json
import os
import re
import shutil
import ssl
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from labkit import (BIN, INVENTORY, LAB, REPO, ansible_env, ansible_failures, api_opener, api_url, collection_as_it_was,
                    door_certificate, engine_key, fabric_if, fabric_ip, mgmt_ip, node, node_exec, png_pixels, report, run, tested_with)
from labkit import ENGINES

# It starts Ray clusters: the engines' worker (labkit.ENGINES), its longest file, first.
pytestmark = [ENGINES, pytest.mark.lab_minutes(20)]

DEPLOY = str(REPO / "playbooks" / "deploy_qwen35.yml")
TEARDOWN = str(REPO / "playbooks" / "teardown.yml")
STATUS = str(REPO / "playbooks" / "status.yml")
KEY = "lab-api-key-not-a-secret"


def deploy(*args):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), DEPLOY, *args], check=False, env=ansible_env(),
               timeout=1500)


def recap(proc, host):
    line = next(line for line in proc.stdout.splitlines() if line.startswith(host + " ") and "ok=" in line)
    return dict(item.split("=") for item in line.split(":", 1)[1].split())


def head_container():
    return node_exec(node(1), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}} {{.RestartCount}}",
                     "dgxspark-ray-head").stdout.strip()


# Issue 15.4's sweep: a sentinel Hugging Face token beside the inventory's API key (KEY), given as from vault (a vars
# file, not the ansible-playbook command line), and the first deploy at -vvv.
HF_SENTINEL = "hf_labSENTINELtoken7c1d0e"


SERVING = {}  # the Ray head container the first deploy made (the watchdog's tests start from that deployment)


@pytest.fixture(scope="module")
def deployed(lab, tmp_path_factory):
    run([*LAB, "images", "vllm-qwen35-0.17"])
    run([*LAB, "load", "lab/vllm-qwen35:0.17"])
    run([*LAB, "models"])
    secrets = tmp_path_factory.mktemp("secrets") / "vault.json"
    secrets.write_text(json.dumps({"dgxspark_hf_token": HF_SENTINEL}))
    first = deploy("-vvv", "-e", f"@{secrets}")
    SERVING["secrets"] = secrets
    SERVING["head"] = node_exec(node(1), "docker", "inspect", "-f", "{{.Id}}", "dgxspark-ray-head", check=False).stdout
    yield first
    history = teardown_history()
    down = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), TEARDOWN], check=False, env=ansible_env())
    assert down.returncode == 0, down.stdout[-4000:]
    for i in (1, 2):
        left = node_exec(node(i), "docker", "ps", "-a", "--format", "{{.Names}}").stdout.split()
        assert left == [], f"{node(i)} still has {left}"
    # Security review L3: a plain teardown keeps the history (only teardown_purge removes it). The release record is
    # moved aside (nothing reads it as what the cluster serves), the watchdog's events and Prometheus' time series
    # stay; the watchdog's live state goes.
    after = teardown_history()
    assert not after["release"] and len(after["history"]) == len(history["history"]) + bool(history["release"]), after
    assert after["events"] == history["events"] and not after["state"], (history, after)
    assert after["prometheus"] == history["prometheus"], (history, after)
    print(f"teardown (L3): the release record kept as {after['history'][-1:]}, the watchdog's events "
          f"{'kept' if after['events'] else '(none)'}, Prometheus' data {'kept' if after['prometheus'] else '(none)'}")


def teardown_history():
    """What of the deployment's history the head holds: the release record and its history, the watchdog's events and
    live state, Prometheus' time series."""
    def there(path):
        return node_exec(node(1), "test", "-e", path, check=False).returncode == 0
    listed = node_exec(node(1), "sh", "-c", "ls /etc/dgxspark/vllm/history 2>/dev/null", check=False).stdout.split()
    return {"release": there("/etc/dgxspark/vllm/release.json"), "history": sorted(listed),
            "events": there("/var/lib/dgxspark/watchdog/events.jsonl"),
            "state": there("/var/lib/dgxspark/watchdog/state.json"), "prometheus": there("/var/lib/dgxspark/prometheus")}


def test_deploy_from_zero_serves_a_chat_completion(deployed):
    assert deployed.returncode == 0, deployed.stdout[-5000:]
    flat = " ".join(deployed.stdout.split())
    assert (f"pair1: serving qwen3.5-122b-a10b-fp8 at {api_url(1)}/v1, TP 2 over {node(1)} + {node(2)}, "
            "2 GPU(s), ready in") in flat
    # make demo's last step: lab/chat.py finds the head's LAN address in the inventory.
    chat = run([sys.executable, str(LAB[1].replace("lab.py", "chat.py"))], env=dict(os.environ, DEMO_API_KEY=KEY))
    assert f"POST {api_url(1)}/v1/chat/completions" in chat.stdout
    assert "assistant: " in chat.stdout and "reasoning: " in chat.stdout and "usage:" in chat.stdout
    # The fingerprint the demo prints (of the certificate it fetched and then trusts) is the one the deploy printed.
    shown = re.search(r"^certificate SHA-256 ([0-9A-F:]{95}) ", chat.stdout, re.M)
    assert shown and f"pair1: the door at {api_url(1)}/v1: TLS certificate SHA-256 {shown.group(1)} " in flat, \
        chat.stdout


def test_api_answers_on_the_lan_from_the_controller(deployed, lab):
    """What a new user does after a deploy: from the controller, GET https://<head's ansible_host>:8000/v1/models with
    the API key, trusting the certificate whose fingerprint the run printed. The fabric is point to point, so only an
    API on the LAN answers."""
    assert deployed.returncode == 0, deployed.stdout[-5000:]
    head = lab["_meta"]["hostvars"][node(1)]["ansible_host"]
    request = urllib.request.Request(f"https://{head}:8000/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    with api_opener(1).open(request, timeout=10) as response:
        models = json.load(response)
    assert [m["id"] for m in models["data"]] == ["qwen3.5-122b-a10b-fp8"]
    flat = " ".join(deployed.stdout.split())
    assert f"at https://{head}:8000/v1," in flat  # the summary prints that endpoint
    # Security review M2: without a gateway, the door serves its clients over TLS, and the run prints the fingerprint
    # of the certificate the door serves, and how to save and check it.
    served = ssl.get_server_certificate((head, 8000))
    fingerprint = ":".join(f"{b:02X}" for b in hashlib.sha256(ssl.PEM_cert_to_DER_cert(served)).digest())
    assert (f"pair1: the door at https://{head}:8000/v1: TLS certificate SHA-256 {fingerprint} (self-signed, for "
            f"{head}" in flat), flat[-3000:]
    assert f"openssl s_client -connect {head}:8000 </dev/null | openssl x509 > pair1.pem" in flat
    assert served.strip() == door_certificate(1).strip()
    # Plain HTTP gets no answer from the door.
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"http://{head}:8000/v1/models", timeout=10)

    def served_version():  # what the engine behind that door says it is, asked on the head's loopback (the door
        # relays no /version)
        answer = node_exec(node(1), "python3", "-c", ENGINE_VERSION).stdout
        return json.loads(answer)["version"]

    tested_with("vllm", "`lab/vllm-qwen35:0.17`: the stand-in engine (lab/engine)", served_version)


PEER_GET = """
import sys, time, urllib.error, urllib.request
deadline = time.monotonic() + 20
while True:
    try:
        print(urllib.request.urlopen(sys.argv[1], timeout=10).status)
        break
    except urllib.error.URLError as error:
        if not isinstance(error.reason, ConnectionRefusedError) or time.monotonic() > deadline:
            raise
        time.sleep(0.2)
"""


def test_api_where_the_collection_was_binding_it_answers_the_peer_but_not_the_controller(deployed, tmp_path):
    """The collection as it was bound the API to the head's VLLM_HOST_IP, its fabric IP, unless vllm_serve_host was
    set. A server there (here a plain HTTP server, the engine now listens on the LAN) answers the peer Spark across the
    cable and nobody on the LAN: the controller has no route to the fabric."""
    root, _env = collection_as_it_was(tmp_path)
    present = (root / "roles" / "vllm_serve" / "tasks" / "present.yml").read_text()
    assert "vllm_serve_head_ip: \"{{ hostvars[vllm_serve_pair_head].vllm_serve_node_env.VLLM_HOST_IP }}\"" in present
    assert "vllm_serve_bind: \"{{ vllm_serve_host if vllm_serve_host | length > 0 else vllm_serve_head_ip }}\"" in present
    assert 'vllm_serve_host: ""' in (root / "roles" / "vllm_serve" / "defaults" / "main.yml").read_text()
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    node_exec(node(1), "sh", "-c", f"python3 -m http.server 8000 --bind {fabric_ip(1)} >/dev/null 2>&1 & "
                                   "echo $! > /tmp/old-bind.pid")
    try:
        # The server was started in the background: the peer retries a refused connection (the server not yet
        # listening) for up to 20 s, any other error ends it at once.
        peer = node_exec(node(2), "python3", "-c", PEER_GET, f"http://{fabric_ip(1)}:8000/", check=False)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with pytest.raises(OSError) as unreachable:
            opener.open(f"http://{fabric_ip(1)}:8000/", timeout=5)
    finally:
        node_exec(node(1), "sh", "-c", "kill $(cat /tmp/old-bind.pid); rm -f /tmp/old-bind.pid", check=False)
    assert peer.stdout.strip() == "200", peer.stdout + peer.stderr
    assert "No route to host" in str(unreachable.value), unreachable.value


def test_nvidia_netplan_mtu_1500_warns_and_serves(deployed):
    """The lab's fabric is at 1500 as NVIDIA's netplan leaves it: the deploy serves, with a warning on how to set 9000."""
    assert deployed.returncode == 0, deployed.stdout[-5000:]
    flat = " ".join((deployed.stdout + deployed.stderr).split())
    assert f"fabric interface {fabric_if(1)} has MTU 1500 (NVIDIA's netplan sets none)" in flat
    assert "mtu: 9000" in flat


def _digests(secret):
    """What a log could hold instead of the secret: its common hashes, and those of the lines and encodings the
    collection ever hashed (the env file's line, the token's base64 text)."""
    forms = [secret, f"VLLM_API_KEY={secret}\n", base64.b64encode(secret.encode()).decode()]
    return {name: getattr(hashlib, name)(form.encode()).hexdigest() for form in forms for name in ("md5", "sha1", "sha256")}


def test_sentinel_secrets_are_nowhere_a_node_or_the_play_shows(deployed):
    """Issue 15.4's sweep, after a -vvv deploy: the API key, the Hugging Face token and the pair's Ray token (read
    from the head's 0600 file) - or a hash of one - are in no process command line of either node (every process of
    the node and of its containers: /proc/*/cmdline), no container's `docker inspect`, no engine container's log, and
    not in the play's -vvv output."""
    assert deployed.returncode == 0, deployed.stdout[-5000:]
    ray_token = node_exec(node(1), "cat", "/etc/dgxspark/ray/auth_token").stdout.strip()
    assert len(ray_token) >= 32  # token auth is on (Ray 2.54): the sweep looks for a real secret too
    # Security review L7: the cluster's engine key is its own (made on the head), no client's.
    own = engine_key(node(1))
    assert own != KEY and len(own) >= 32
    secrets = {"API key": KEY, "HF token": HF_SENTINEL, "Ray token": ray_token, "engine key": own}
    needles = {**secrets,
               **{f"{name} {kind}": digest for name, value in secrets.items() for kind, digest in _digests(value).items()}}
    places = {"the play's -vvv output": deployed.stdout + deployed.stderr}
    for index in (1, 2):
        places[f"{node(index)} /proc/*/cmdline"] = node_exec(
            node(index), "sh", "-c", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done").stdout
        # What Ansible leaves on a node: its background jobs' results and its remote temp files.
        places[f"{node(index)} ~/.ansible_async and ~/.ansible/tmp"] = node_exec(
            node(index), "sh", "-c", "cat $(find /root/.ansible_async /root/.ansible/tmp /home/*/.ansible_async "
                                     "/home/*/.ansible/tmp -type f 2>/dev/null) /dev/null 2>/dev/null").stdout
        names = node_exec(node(index), "docker", "ps", "-aq").stdout.split()
        assert names, f"no container on {node(index)}"
        places[f"{node(index)} docker inspect"] = node_exec(node(index), "docker", "inspect", *names).stdout
        for name in ("dgxspark-ray-head", "dgxspark-ray-worker"):
            logs = node_exec(node(index), "docker", "logs", name, check=False)
            if logs.returncode == 0:
                places[f"{node(index)} docker logs {name}"] = logs.stdout + logs.stderr
    assert f"{node(1)} docker logs dgxspark-ray-head" in places and f"{node(2)} docker logs dgxspark-ray-worker" in places
    assert len(places[f"{node(1)} /proc/*/cmdline"].splitlines()) > 20  # the sweep did read the processes
    found = [(what, where) for what, needle in needles.items() for where, text in places.items() if needle in text]
    assert not found, found
    # ... but the server does require the key.
    with tempfile.NamedTemporaryFile("w", suffix=".pem") as ca_file:
        ca_file.write(door_certificate(1))
        ca_file.flush()
        assert run(["curl", "-s", "--noproxy", "*", "--cacert", ca_file.name, "-o", "/dev/null", "-w", "%{http_code}",
                    f"{api_url(1)}/v1/models"]).stdout == "401"


def engine_config(i, name):
    return json.loads(node_exec(node(i), "docker", "inspect", "-f", "{{json .HostConfig}}", name).stdout)


def test_engine_containers_ask_for_the_gpu_and_get_rdma_devices_and_compile_caches(deployed):
    """As on a Spark: the GPU through Docker's nvidia driver, the verbs devices with IPC_LOCK (the lab's RDMA
    profile), a 64 MiB stack, and the compile caches in named volumes that outlive the container."""
    for i, name in ((1, "dgxspark-ray-head"), (2, "dgxspark-ray-worker")):
        config = engine_config(i, name)
        assert [(r["Driver"], r["Count"], r["Capabilities"]) for r in config["DeviceRequests"]] == [
            ("nvidia", -1, [["gpu"]])]
        assert [d["PathOnHost"] for d in config["Devices"]] == ["/dev/infiniband"]
        # Least privilege (issue 15.5): every capability dropped, IPC_LOCK (RDMA) given back, nothing else - in the
        # definition and in what the engine's processes hold (CapEff of the launcher, PID 1: bit 14 only).
        assert config["CapDrop"] == ["ALL"] and config["CapAdd"] == ["IPC_LOCK"], (config["CapDrop"], config["CapAdd"])
        status = node_exec(node(i), "docker", "exec", name, "cat", "/proc/1/status").stdout
        assert re.search(r"^CapEff:\s+0000000000004000$", status, re.M), status
        assert {u["Name"]: u["Hard"] for u in config["Ulimits"]}["stack"] == 67108864
        assert {"dgxspark-vllm-cache:/root/.cache/vllm", "dgxspark-flashinfer-cache:/root/.cache/flashinfer",
                "dgxspark-triton-cache:/root/.triton"} <= {b.removesuffix(":rw") for b in config["Binds"]}
        assert node_exec(node(i), "docker", "exec", name, "nvidia-smi", "-L").stdout.startswith("GPU 0: NVIDIA GB10")
        # Created from the image ID the node checked, not from a name whose tag could have moved since (issue 15.2).
        started_from = node_exec(node(i), "docker", "inspect", "-f", "{{.Config.Image}} {{.Image}}", name).stdout.split()
        assert started_from[0] == started_from[1] and started_from[0].startswith("sha256:"), started_from
        assert "this container sees 1 GPU(s)" in node_exec(node(i), "docker", "logs", name).stdout


def listeners(index, container):
    """(address, port, program) of every TCP socket listening in CONTAINER's processes on node INDEX (host network:
    `ss` in the node sees them, `docker top` gives the container's PIDs; PROGRAM is the process's command line)."""
    pids = set(node_exec(node(index), "docker", "top", container, "-eo", "pid").stdout.split()[1:])
    found = set()
    for line in node_exec(node(index), "ss", "-ltnpH").stdout.splitlines():
        address, _sep, port = line.split()[3].rpartition(":")
        for pid in re.findall(r"pid=(\d+)", line):
            if pid in pids:
                program = node_exec(node(index), "sh", "-c", f"tr '\\0' ' ' < /proc/{pid}/cmdline", check=False).stdout
                found.add((address.strip("[]"), int(port), program[:200]))
    return found


# Measured with Ray 2.54.1 (issue 15.5). Ray binds these to --node-ip-address (the fabric IP) and 127.0.0.1 ...
RAY_ON_FABRIC = {6702: "runtime env agent", 6703: "dashboard agent gRPC", 52365: "dashboard agent HTTP",
                 10001: "Ray client server (head)"}
# ... and gives no way to bind these: GCS, raylet, object manager, metrics exporter, the core workers' gRPC
# ports (pinned range) listen on every interface until a Ray release binds them to the node IP (ray PR #59852).
RAY_EVERY_INTERFACE = {6379, 6700, 6701, 6704, *range(10002, 10102)}
# Unpinned ports on every interface, with no Ray flag to pin or bind them: the head's dashboard and autoscaler
# monitor processes (gRPC / metrics), and the engine's own collective set-up in its Ray workers.
UNPINNED = ("ray/dashboard/dashboard.py", "ray/autoscaler/_private/monitor.py", "ray::RayWorkerWrapper")


def test_ray_listens_on_the_fabric_where_ray_lets_it_and_the_rest_is_the_documented_set(deployed):
    """Issue 15.5, as measured: the launcher starts Ray with --node-ip-address = the fabric IP and the dashboard on
    127.0.0.1; what Ray 2.54 binds to that address must stay there, what it cannot bind is exactly the README's
    firewall list. On the LAN address nothing of the engine listens: its API is on the head's 127.0.0.1, and the LAN
    address's API port is the head's door (security review M1: a key on every route, with or without a gateway)."""
    assert deployed.returncode == 0, deployed.stdout[-5000:]
    for index, name in ((1, "dgxspark-ray-head"), (2, "dgxspark-ray-worker")):
        found = listeners(index, name)
        table = "\n".join(map(str, sorted(found)))
        fabric_ports = {port for port in RAY_ON_FABRIC if port != 10001 or index == 1}
        for port in fabric_ports:
            addresses = {a for a, p, _prog in found if p == port}
            assert fabric_ip(index) in addresses and addresses <= {fabric_ip(index), "127.0.0.1"}, (port, table)
        assert {a for a, p, _prog in found if p == 8265} == ({"127.0.0.1"} if index == 1 else set()), table
        wildcard = {(p, prog) for a, p, prog in found if a in ("0.0.0.0", "::", "*")}
        assert {p for p, _prog in wildcard} >= {6700, 6701}, table  # the measurement did see Ray's own servers
        stray = sorted((p, prog) for p, prog in wildcard
                       if p not in RAY_EVERY_INTERFACE and not any(u in prog for u in UNPINNED))
        assert not stray, f"{node(index)}: listening on every interface beyond the README's list: {stray}\n{table}"
        assert not {(a, p) for a, p, _prog in found if a == mgmt_ip(index)}, table
        assert (("127.0.0.1", 8000) in {(a, p) for a, p, _prog in found}) == (index == 1), table
    door = listeners(1, "dgxspark-door")
    assert {(a, p) for a, p, _prog in door} == {(mgmt_ip(1), 8000)}, door


def ran_tasks(proc):
    """The names of the tasks that ran (ok or changed) on some host."""
    return [block.split("]", 1)[0] for block in proc.stdout.split("\nTASK [")[1:]
            if re.search(r"^(ok|changed): \[", block, re.M)]


def test_second_deploy_changes_and_restarts_nothing(deployed):
    before = head_container()
    same = ("-e", f"@{SERVING['secrets']}")  # the first deploy's inputs, its vault file included
    # The record the first deploy left answers every "is it already so?": one read per node, the preflight in full,
    # the head's completion, and none of the roles' steps.
    second = deploy(*same)
    assert second.returncode == 0, second.stdout[-5000:]
    changed = [block.split("]", 1)[0] for block in second.stdout.split("\nTASK [")[1:] if "\nchanged: [" in block]
    why = re.findall(r"goes through the whole deploy: [^\n]*(?:\n {8}[^\n]*)*", second.stdout)
    assert recap(second, node(1))["changed"] == "0" and recap(second, node(2))["changed"] == "0", (changed, why)
    assert head_container() == before  # same container, same start, no restart
    ran = ran_tasks(second)
    assert "dgxspark.vllm.deploy_state : Compare this node with the record of its cluster's last deploy (one read)" in ran, ran
    assert "dgxspark.vllm.deploy_state : Ask the head of a cluster whose every node is as recorded for a real completion" in ran, ran
    assert any("Read the engine, GPUs, memory, disk and clock" in t for t in ran), ran  # the preflight's checks
    # vllm_serve only publishes the settled cluster's result (its settled entry point): no step of serving ran.
    assert [t for t in ran if t.startswith("dgxspark.vllm.vllm_serve") and "Validating arguments" not in t] == [
        "dgxspark.vllm.vllm_serve : Publish the role's result for a settled cluster (its recorded release and endpoint, "
        "with this run's completion)"], ran
    assert not any(t.startswith(("dgxspark.vllm.model_sync", "dgxspark.vllm.hybrid_image", "dgxspark.vllm.image_sync",
                                 "dgxspark.vllm.ray_cluster", "dgxspark.vllm.watchdog")) for t in ran), ran
    assert not any("Say why a cluster goes through the whole deploy" in t for t in ran), ran
    assert f"{node(1)} goes through the whole deploy" not in second.stdout
    flat = " ".join(second.stdout.split())
    assert f"pair1: serving qwen3.5-122b-a10b-fp8 at {api_url(1)}/v1, TP 2 over {node(1)} + {node(2)}" in flat
    # The whole deploy, asked for, finds the same: changed=0. One read of every node's containers answered "is any to
    # change?": no switch, so none of its steps ran (the watchdog's pause and lock, the memory, the GPU proof in a new
    # container), and no container call was made.
    full = deploy(*same, "-e", "dgxspark_full_run=true")
    assert full.returncode == 0, full.stdout[-5000:]
    assert recap(full, node(1))["changed"] == "0" and recap(full, node(2))["changed"] == "0", full.stdout[-3000:]
    assert head_container() == before
    ran = ran_tasks(full)
    assert "goes through the whole deploy: dgxspark_full_run is set" in " ".join(full.stdout.split())
    assert any("NCCL and RDMA libraries (statically, without running the image)" in t for t in ran), ran
    assert any("Read the engine containers of either backend, and the head's watchdog and door" in t for t in ran), ran
    for step in ("Pause the cluster's watchdog", "Wait for a recovery the watchdog has in flight",
                 "Make room in unified memory (drop", "Run nvidia-smi -L in a container",
                 "Check the serving image has an ssh client", "Run the watchdog"):
        # On a failure: what the engine's plan decided, and why.
        plan = full.stdout[full.stdout.find("Work out every node's Ray container"):][:8000]
        assert not any(step in t for t in ran), (step, plan)
    # The engine containers' task answered every container as the plan keeps it (engine_container: keep, no call).
    assert "dgxspark.vllm.ray_cluster : Start the Ray head (left alone when it runs as its spec says)" in ran, ran
    # The checks still ran: the cluster's wait for every node and GPU, and the probe's real completion.
    assert any("Wait until the cluster shows every node and GPU" in t for t in ran), ran
    assert any("Probe readiness (a real completion)" in t for t in ran), ran
    # A node that is not as recorded (the serving env file edited on the head) sends its cluster through the whole
    # deploy, which mends the file, restarts nothing, and leaves the record as it was: the next run is settled again.
    env_before = node_exec(node(1), "sha256sum", "/etc/dgxspark/vllm/serve.env").stdout
    node_exec(node(1), "sh", "-c", "echo EXTRA=1 >> /etc/dgxspark/vllm/serve.env")
    drift = deploy(*same)
    assert drift.returncode == 0, drift.stdout[-5000:]
    flat = " ".join(drift.stdout.split())
    assert f"{node(1)} goes through the whole deploy: file /etc/dgxspark/vllm/serve.env: content changed" in flat
    assert f"{node(2)} goes through the whole deploy: another node of its cluster differs from its record" in flat
    assert node_exec(node(1), "sha256sum", "/etc/dgxspark/vllm/serve.env").stdout == env_before
    assert head_container() == before
    settled = deploy(*same)
    assert settled.returncode == 0 and f"{node(1)} goes through the whole deploy" not in settled.stdout, settled.stdout[-3000:]
    assert recap(settled, node(1))["changed"] == "0" and recap(settled, node(2))["changed"] == "0"
    # A container restarted since the record (the watchdog here; Docker's policy after a reboot, or the watchdog's own
    # recovery of an engine, alike) sends its cluster through the whole deploy, which checks it whole and finds
    # nothing to change; the record is refreshed without a change, and the run after is settled again.
    node_exec(node(1), "docker", "restart", "-t", "5", "dgxspark-watchdog")
    restarted = deploy(*same)
    assert restarted.returncode == 0, restarted.stdout[-5000:]
    flat = " ".join(restarted.stdout.split())
    assert f"{node(1)} goes through the whole deploy: container dgxspark-watchdog: restarted since the last deploy" in flat, flat[-3000:]
    assert recap(restarted, node(1))["changed"] == "0" and recap(restarted, node(2))["changed"] == "0", restarted.stdout[-3000:]
    assert head_container() == before
    again = deploy(*same)
    assert again.returncode == 0 and f"{node(1)} goes through the whole deploy" not in again.stdout, again.stdout[-3000:]


def lan_status(method, path, key=None, tls=True):
    """The status the head's LAN address answers the controller on the API port for METHOD PATH (with KEY): over TLS
    trusting the door's certificate alone, or over plain HTTP (an engine on the LAN, a door without TLS)."""
    url = api_url(1) if tls else api_url(1).replace("https://", "http://")
    request = urllib.request.Request(f"{url}{path}", method=method, data=b"{}" if method == "POST" else None,
                                     headers={"Authorization": f"Bearer {key}"} if key else {})
    opener = api_opener(1) if tls else urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_without_gateways_a_keyless_fleet_gets_a_filtering_door_and_an_engine_on_the_lan_gets_none(deployed):
    """Two operator traps of the door without gateways (0.8.0, as of 4d7e9fc), where the deploy failed:
    - vllm_serve_allow_no_api_key with no key at all: the door's rendering asked for the engines' key after the
      engine had started. Now the door asks for no key and still relays only its routes (the engine keeps a key of its
      own, so the door alone differs: gateway.yml renders it, as the deploy's last play does).
    - vllm_serve_host on the LAN (here 0.0.0.0): the door held the engine's port of the LAN address and the new
      engine could not bind it. Now the door goes before the engine starts, and the run says the engine has no door.
      The default deploy then puts the engine back on 127.0.0.1 behind its door, as the tests after this one expect."""
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    keyless = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / "gateway.yml"),
                   "-e", "vllm_serve_allow_no_api_key=true", "-e", "dgxspark_api_key="], check=False,
                  env=ansible_env())
    try:
        assert keyless.returncode == 0, keyless.stdout[-5000:]
        assert lan_status("GET", "/v1/models") == 200
        assert [lan_status("POST", path) for path in ("/tokenize", "/invocations")] == [404, 404]
        assert [lan_status("GET", path) for path in ("/version", "/ping")] == [404, 404]
    finally:
        keyed = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / "gateway.yml")],
                    check=False, env=ansible_env())
    assert keyed.returncode == 0 and lan_status("GET", "/v1/models") == 401, keyed.stdout[-3000:]

    # Security review M2: plain HTTP at the door only when asked, and the run says so; its certificate goes.
    plain = deploy("-e", "gateway_door_tls=false")
    assert plain.returncode == 0, plain.stdout[-5000:]
    flat = " ".join(plain.stdout.split())
    lan = f"http://{mgmt_ip(1)}:8000/v1"
    assert f"pair1: serving qwen3.5-122b-a10b-fp8 at {lan}, TP 2" in flat
    assert (f"pair1: the door at {lan}: plain HTTP (gateway_door_tls: false): client keys and prompts cross the "
            "network in clear") in flat
    assert [lan_status("GET", "/v1/models", tls=False), lan_status("GET", "/v1/models", KEY, tls=False)] == [401, 200]
    left = node_exec(node(1), "ls", "/etc/dgxspark/gateway-door").stdout.split()
    assert "haproxy.cfg" in left and not {"tls.pem", "tls.crt"} & set(left), left

    on_lan = deploy("-e", "vllm_serve_host=0.0.0.0")
    assert on_lan.returncode == 0, on_lan.stdout[-5000:]
    assert "dgxspark-door" not in node_exec(node(1), "docker", "ps", "-a", "--format", "{{.Names}}").stdout.split()
    assert "so it answers on the LAN itself, with no door" in " ".join(on_lan.stdout.split())
    # The engine itself answers: its own key on /v1 (no client's), and /version without one (vLLM's key guards /v1
    # alone).
    assert [lan_status("GET", "/v1/models", tls=False), lan_status("GET", "/v1/models", KEY, tls=False)] == [401, 401]
    assert lan_status("GET", "/v1/models", engine_key(node(1)), tls=False) == 200
    assert lan_status("GET", "/version", tls=False) == 200

    back = deploy()
    assert back.returncode == 0, back.stdout[-5000:]
    assert "dgxspark-door" in node_exec(node(1), "docker", "ps", "--format", "{{.Names}}").stdout.split()
    assert [lan_status("GET", "/v1/models"), lan_status("GET", "/version", KEY)] == [401, 404]


@pytest.mark.slow  # mp across nodes: test_real_vllm (real vLLM) and test_lab_known_issues (stand-in) in make test
def test_mp_backend_serves_across_both_nodes_without_ray(deployed):
    # The same pipeline with vLLM's own multi-node mode: a rank per node, the worker headless, no Ray container left.
    first = deploy("-e", "vllm_serve_backend=mp")
    assert first.returncode == 0, first.stdout[-5000:]
    flat = " ".join(first.stdout.split())
    assert f"pair1: serving qwen3.5-122b-a10b-fp8 at {api_url(1)}/v1, TP 2 over {node(1)} + {node(2)}" in flat
    for index in (1, 2):
        names = node_exec(node(index), "docker", "ps", "-a", "--format", "{{.Names}}").stdout.split()
        assert "dgxspark-vllm" in names and not any(name.startswith("dgxspark-ray") for name in names), names
    for index in (1, 2):
        # The mp ranks come from the same definition: the GPU, and the verbs devices NCCL_NET=IB needs.
        config = engine_config(index, "dgxspark-vllm")
        assert [r["Driver"] for r in config["DeviceRequests"]] == ["nvidia"]
        assert [d["PathOnHost"] for d in config["Devices"]] == ["/dev/infiniband"] and "IPC_LOCK" in config["CapAdd"]
        started_from = node_exec(node(index), "docker", "inspect", "-f", "{{.Config.Image}} {{.Image}}",
                                 "dgxspark-vllm").stdout.split()
        assert started_from[0] == started_from[1] and started_from[0].startswith("sha256:"), started_from
    worker_cmd = node_exec(node(2), "docker", "inspect", "-f", "{{json .Config.Cmd}}", "dgxspark-vllm").stdout
    assert '"--headless"' in worker_cmd and '"--node-rank","1"' in worker_cmd.replace(", ", ","), worker_cmd
    chat = run([sys.executable, str(LAB[1].replace("lab.py", "chat.py"))], env=dict(os.environ, DEMO_API_KEY=KEY))
    assert "assistant: " in chat.stdout
    # The engine on 127.0.0.1, its door in front.
    assert [lan_status("GET", "/v1/models"), lan_status("GET", "/version", KEY)] == [401, 404]
    before = node_exec(node(1), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", "dgxspark-vllm").stdout
    second = deploy("-e", "vllm_serve_backend=mp")
    assert second.returncode == 0, second.stdout[-5000:]
    changed = [block.split("]", 1)[0] for block in second.stdout.split("\nTASK [")[1:] if "\nchanged: [" in block]
    why = re.findall(r"goes through the whole deploy: [^\n]*(?:\n {8}[^\n]*)*", second.stdout)
    assert recap(second, node(1))["changed"] == "0" and recap(second, node(2))["changed"] == "0", (changed, why)
    assert node_exec(node(1), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", "dgxspark-vllm").stdout == before


@pytest.mark.slow  # per-host interface names: test_lab's preflight test in make test
def test_per_host_interface_names_cabled_on_different_ports_serve(deployed):
    """Node 2 cabled on the CX7's other port: its twins are enp1s0f0np0/enP2p1s0f0np0, the inventory names them per
    host (dgxspark_fabric_interface), and the pair serves with each node on its own interface."""
    run([*LAB, "cable", "2", "--port", "0"])
    try:
        proc = deploy()
        assert proc.returncode == 0, proc.stdout[-5000:]
        flat = " ".join(proc.stdout.split())
        assert "fabric enp1s0f0np0 " in flat and f"pair1: serving qwen3.5-122b-a10b-fp8 at {api_url(1)}/v1" in flat
        worker_env = node_exec(node(2), "docker", "inspect", "-f", "{{json .Config.Env}}", "dgxspark-ray-worker").stdout
        assert '"NCCL_SOCKET_IFNAME=enp1s0f0np0"' in worker_env, worker_env
        head_env = node_exec(node(1), "docker", "inspect", "-f", "{{json .Config.Env}}", "dgxspark-ray-head").stdout
        assert '"NCCL_SOCKET_IFNAME=enp1s0f1np1"' in head_env, head_env
        chat = run([sys.executable, str(LAB[1].replace("lab.py", "chat.py"))], env=dict(os.environ, DEMO_API_KEY=KEY))
        assert "assistant: " in chat.stdout
    finally:
        run([*LAB, "cable", "2", "--port", "1"])


# --------------------------------------------------------------------------- the benchmark (issue 16, 1 and 3)
# playbooks/benchmark.yml against the pair deployed above: llama-benchy on the controller (its own virtualenv under
# ~/.cache/dgxspark/benchmark, made by the first run), the corpus from the lab inventory (benchmark_corpus), a small
# sweep. The stand-in's figures are pipeline-only: the test checks the pipeline (files, plot, table, comparison,
# regression), never a speed.

BENCHMARK = str(REPO / "playbooks" / "benchmark.yml")
SWEEP = ["-e", "benchmark_concurrency=1,2,4", "-e", "benchmark_prompt_tokens=64", "-e", "benchmark_output_tokens=64",
         "-e", "benchmark_runs=1", "-e", "benchmark_step_timeout=120", "-e", "benchmark_timeout=400"]


# llama-benchy times a request's decode from its stream's tokens. On a 2-core machine that runs molecule beside this
# file, a stream's tokens can reach it in one read; the run then says, rightly, that the decode could not be timed
# (the controller short of CPU). Fresh replicas of make test failed so (203a91d: all three tests below; 6c1205e with
# 256 tokens: the third). Such a run says nothing of the pipeline these tests check: it is made once more, as an
# operator would on a loaded controller; any other failure, or the same one twice, fails the test.
UNTIMED = "could not time their decode"


def benchmark(results, *args):
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), BENCHMARK, "-e", f"benchmark_results_dir={results}",
            *SWEEP, *args]
    # The results directory as it is before the run, links as links (latest.json is a link to the newest run: read
    # through, restoring it wrote the old document into the untimed run's file, which the next run then compared with).
    before = Path(tempfile.mkdtemp(prefix="benchmark-before-"))
    shutil.copytree(results, before / "results", symlinks=True)
    proc = run(argv, check=False, env=ansible_env(), timeout=900)
    # The stand-in's decode is unpaced (about 20 tokens at once): on a loaded controller llama-benchy may read a whole
    # stream at once and rightly not time it. Such a run is made again, up to twice (one rerun failed the same way in
    # the fresh replica of 0827079); any other failure, or a third untimed run, fails the test.
    for _again in range(2):
        if proc.returncode == 0 or UNTIMED not in proc.stdout:
            break
        print(f"benchmark: the controller could not time a decode; run again: {proc.stdout[-600:]}")
        # The results directory as it was before the untimed run (it writes what it measured).
        shutil.rmtree(results)
        shutil.copytree(before / "results", results, symlinks=True)
        proc = run(argv, check=False, env=ansible_env(), timeout=900)
    shutil.rmtree(before)
    return proc


@pytest.fixture(scope="module")
def benchmarked(deployed, tmp_path_factory):
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    results = tmp_path_factory.mktemp("benchmark")
    began = time.monotonic()
    first = benchmark(results)
    took = time.monotonic() - began
    return {"results": results / "pair1", "first": first, "took": took}


def test_benchmark_writes_json_csv_and_a_png_and_prints_a_table(benchmarked):
    first = benchmarked["first"]
    assert first.returncode == 0, first.stdout[-6000:]
    flat = " ".join(first.stdout.split())
    for i, level in enumerate((1, 2, 4), 1):  # a progress line per step
        assert re.search(rf"pair1 step {i}/3 c={level}: [\d.]+ tok/s aggregate", flat), flat[-4000:]
    assert "agg tok/s" in flat and "TTFT p50 ms" in flat and "PIPELINE ONLY: stand-in figures" in flat
    assert "not compared: no previous run of this cluster" in flat
    runs = sorted(benchmarked["results"].glob("*.json"))
    assert [p.name for p in runs][-1] == "latest.json" and len(runs) == 2
    doc = json.loads((benchmarked["results"] / "latest.json").read_text())
    assert doc["engine"] == "stand-in" and doc["figures"].startswith("pipeline only") and doc["status"] == "ok"
    assert [r["concurrency"] for r in doc["rows"]] == [1, 2, 4] and all(r["requests_ok"] >= 1 for r in doc["rows"])
    assert doc["tool"] == {"name": "llama-benchy", "version": "0.4.0"} and doc["model"] == "Qwen/Qwen3.5-122B-A10B-FP8"
    assert doc["image_id"].startswith("sha256:") and doc["release"]["backend"] == "ray"
    assert [h["node"] for h in doc["hardware"]] == [node(1), node(2)]
    assert "NVIDIA GB10" in doc["hardware"][0]["gpus"][0] and doc["hardware"][0]["fabric_interface"] == fabric_if(1)
    # The engine counted the tokens the tool observed (and the warm-up's): not requests x length.
    assert all(r["engine_generation_tokens"] >= r["output_tokens_observed"] > 0 for r in doc["rows"])
    lines = (benchmarked["results"] / f"{doc['date']}.csv").read_text().splitlines()
    assert lines[0].startswith("cluster,date,engine,model,image_id") and len(lines) == 4
    width, height, colours = png_pixels(benchmarked["results"] / f"{doc['date']}.png")
    report(f"benchmark (stand-in, pipeline only): c=1,2,4 in {benchmarked['took']:.0f}s (the first run makes "
           f"llama-benchy's virtualenv when ~/.cache/dgxspark/benchmark has none); PNG {width}x{height}, "
           f"{len(colours)} colours")
    assert (width, height) == (1200, 500) and len(colours) > 50  # two panels, axes, lines, legend: not blank


def test_a_second_benchmark_is_compared_with_the_first_and_draws_it(benchmarked):
    assert benchmarked["first"].returncode == 0
    first = json.loads((benchmarked["results"] / "latest.json").read_text())
    time.sleep(1)  # a new second: a new file
    second = benchmark(benchmarked["results"].parent)
    assert second.returncode == 0, second.stdout[-5000:]
    doc = json.loads((benchmarked["results"] / "latest.json").read_text())
    assert doc["date"] != first["date"] and doc["comparison"]["previous_file"] == f"{first['date']}.json"
    assert doc["comparison"]["compared"] and len(doc["comparison"]["deltas"]) == 6
    flat = " ".join(second.stdout.split())
    assert f"against {first['date']}" in flat
    assert len(list(benchmarked["results"].glob("*.png"))) == 2


def test_a_drop_beyond_the_threshold_is_a_regression_and_fails_when_asked(benchmarked):
    latest = benchmarked["results"] / "latest.json"
    doc = json.loads(latest.read_text())
    for row in doc["rows"]:  # the previous run, doctored: 100 times faster than any run here
        row["aggregate_tok_s"] *= 100
        row["request_tok_s"] *= 100
    latest.resolve().write_text(json.dumps(doc))
    proc = benchmark(benchmarked["results"].parent, "-e", "benchmark_concurrency=1", "-e",
                     "benchmark_fail_on_regression=true")
    flat = " ".join(proc.stdout.split())
    report("benchmark: a doctored previous run 100x faster: " +
           (re.search(r"REGRESSION against [^\"]*", flat) or re.search(r".{0,200}$", flat)).group(0)[:200])
    assert proc.returncode != 0
    # A failure of another task is shown whole (the fresh replication at d30653d kept only the recap).
    assert "pair1: REGRESSION against its previous run" in flat and "c=1 aggregate_tok_s" in flat, \
        ansible_failures(proc.stdout)
    assert "benchmark_fail_on_regression is true" in flat


# --------------------------------------------------------------------------- monitoring (issue 16, parts 2 and 3)
# Prometheus on the pair's head (the group dgxspark_monitoring, added by an extra inventory source), a node exporter on
# both nodes, short intervals; then the silent-stall alert: pending and firing while the engine's worker is
# SIGSTOPped with requests waiting, resolved after SIGCONT. Before the watchdog's tests (they share the pair); the
# module's teardown removes the containers.

MONITORING = str(REPO / "playbooks" / "monitoring.yml")
SCRAPE, STALL_WINDOW, STALL_FOR = 5, 20, 30
MONITOR_VARS = {"monitoring_scrape_interval": f"{SCRAPE}s", "monitoring_evaluation_interval": f"{SCRAPE}s",
                "monitoring_stall_window": f"{STALL_WINDOW}s", "monitoring_stall_for": f"{STALL_FOR}s"}
PROMETHEUS_GET = """
import sys, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:9090" + sys.argv[1], timeout=10).read().decode())
"""


def prometheus(path):
    """GET PATH of Prometheus's API on the head (it listens on the head's 127.0.0.1 only)."""
    return json.loads(node_exec(node(1), "python3", "-c", PROMETHEUS_GET, path).stdout)


def stall_alerts():
    return [a for a in prometheus("/api/v1/alerts")["data"]["alerts"] if a["labels"]["alertname"] == "DgxsparkEngineStalled"]


@pytest.fixture(scope="module")
def monitored(deployed, tmp_path_factory):
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    run([*LAB, "images", "prometheus-3.5", "node-exporter-1.9"])
    run([*LAB, "load", "lab/prometheus:3.5", "lab/node-exporter:1.9"])
    extra = tmp_path_factory.mktemp("monitoring") / "monitoring.yml"
    extra.write_text(f"all:\n  children:\n    dgxspark_monitoring:\n      hosts:\n        {node(1)}: {{}}\n")
    argv = [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "-i", str(extra)]
    began = time.monotonic()
    first = run([*argv, MONITORING, "-e", json.dumps(MONITOR_VARS)], check=False, env=ansible_env())
    return {"argv": argv, "first": first, "took": time.monotonic() - began}


def test_prometheus_scrapes_the_engine_and_both_node_exporters_and_a_second_run_changes_nothing(monitored):
    first = monitored["first"]
    assert first.returncode == 0, first.stdout[-5000:]
    wanted = {("engine", node(1), "head"), ("node", node(1), "head"), ("node", node(2), "worker")}

    def targets_up():
        active = prometheus("/api/v1/targets")["data"]["activeTargets"]
        found = {(t["labels"]["job"], t["labels"]["node"], t["labels"]["role"]): t for t in active}
        return found if set(found) == wanted and all(t["health"] == "up" for t in found.values()) else None

    found = wait_for("every target up in Prometheus", targets_up, 60, step=1)
    assert {t["labels"]["cluster"] for t in found.values()} == {"pair1"}
    # What ran, as Prometheus tells it: its own build, and the build of each node exporter it scraped.
    tested_with("prometheus", "`lab/prometheus:3.5`", lambda: prometheus("/api/v1/status/buildinfo")["data"]["version"])

    def exporters_version():  # the one version every node's exporter reported (else nothing is recorded)
        (version,) = {r["metric"]["version"] for r in
                      prometheus("/api/v1/query?query=node_exporter_build_info")["data"]["result"]}
        return version

    tested_with("node-exporter", "`lab/node-exporter:1.9`", exporters_version)
    # Prometheus on the head itself scrapes the engine on the loopback, where it listens (not through the door).
    assert found[("engine", node(1), "head")]["scrapeUrl"] == "http://127.0.0.1:8000/metrics"
    # The fabric interface's samples carry fabric="true" (what the fabric rules select).
    fabric = prometheus("/api/v1/query?query=node_network_carrier%7Bfabric%3D%22true%22%7D")["data"]["result"]
    assert {(r["metric"]["node"], r["metric"]["device"], r["value"][1]) for r in fabric} == {
        (node(1), fabric_if(1), "1"), (node(2), fabric_if(2), "1")}, fabric
    # Least privilege: non-root, read-only, no capability, no new privileges; no key in the containers' definition.
    for index, name in ((1, "dgxspark-prometheus"), (1, "dgxspark-node-exporter"), (2, "dgxspark-node-exporter")):
        inspect = node_exec(node(index), "docker", "inspect", name).stdout
        assert KEY not in inspect, name
        config = json.loads(inspect)[0]
        assert config["Config"]["User"] == "65534:65534" and config["HostConfig"]["ReadonlyRootfs"], name
        assert config["HostConfig"]["CapDrop"] == ["ALL"] and not config["HostConfig"]["CapAdd"], name
        # Docker itself adds label=disable (no SELinux label) to a container in the host's PID namespace.
        wanted = ["no-new-privileges"] + (["label=disable"] if config["HostConfig"]["PidMode"] == "host" else [])
        assert config["HostConfig"]["SecurityOpt"] == wanted, name
    assert node_exec(node(1), "docker", "inspect", "-f", "{{.HostConfig.PidMode}}", "dgxspark-node-exporter").stdout.strip() == "host"
    key_file = node_exec(node(1), "stat", "-c", "%a %U %g", "/etc/dgxspark/monitoring/engine.key").stdout.split()
    assert key_file == ["640", "root", "64640"], key_file
    # Security review L1: the key files' group is Prometheus's alone. The node exporter runs as nobody:nogroup like
    # Prometheus's image user and sees the host's / read-only: it cannot read them.
    assert node_exec(node(1), "docker", "inspect", "-f", "{{json .HostConfig.GroupAdd}}",
                     "dgxspark-prometheus").stdout.strip() == '["64640"]'
    peek = node_exec(node(1), "docker", "exec", "dgxspark-node-exporter", "cat",
                     "/host/etc/dgxspark/monitoring/engine.key", check=False)
    assert peek.returncode != 0 and "Permission denied" in peek.stderr and KEY not in peek.stdout, peek
    # Prometheus's API is on the head's loopback only: the controller gets no answer on the head's LAN address.
    assert run(["curl", "-s", "--noproxy", "*", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                f"http://{mgmt_ip(1)}:9090/api/v1/targets"], check=False).stdout == "000"
    before = node_exec(node(1), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", "dgxspark-prometheus").stdout
    began = time.monotonic()
    second = run([*monitored["argv"], MONITORING, "-e", json.dumps(MONITOR_VARS)], check=False, env=ansible_env())
    took = time.monotonic() - began
    assert second.returncode == 0, second.stdout[-4000:]
    changed = [block.split("]", 1)[0] for block in second.stdout.split("\nTASK [")[1:] if "\nchanged: [" in block]
    report(f"monitoring: monitoring.yml took {monitored['took']:.0f}s (Prometheus on {node(1)}, node exporters on "
           f"both nodes, targets {sorted(found)} up); a second run {took:.0f}s, changed tasks {changed}")
    assert recap(second, node(1))["changed"] == "0" and recap(second, node(2))["changed"] == "0", changed
    assert node_exec(node(1), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}",
                     "dgxspark-prometheus").stdout == before
    status = run([*monitored["argv"], STATUS], env=ansible_env())
    assert "prometheus on " + node(1) + ": 3 of 3 targets up" in " ".join(status.stdout.split()), status.stdout[-3000:]


def test_the_stall_alert_fires_within_its_for_window_after_sigstop_and_resolves_after_sigcont(monitored):
    assert monitored["first"].returncode == 0
    wait_for("a healthy cluster", completion, 120)
    # The watchdog would restart the stalled cluster: stopped for the test, started again after it.
    node_exec(node(1), "docker", "stop", "dgxspark-watchdog")
    pids = node_exec(node(1), "docker", "exec", HEAD, "pgrep", "-f", "RayWorkerWrapper").stdout.split()
    assert pids
    hanging = []
    try:
        node_exec(node(1), "docker", "exec", HEAD, "kill", "-STOP", *pids)
        stopped = time.time()
        # Requests that wait: each holds a slot of the engine (num_requests_running) and gets no token.
        for _waiting in range(3):
            thread = threading.Thread(target=lambda: hanging.append(completion(timeout=180)), daemon=True)
            thread.start()
        pending = wait_for("the stall alert pending", lambda: next(
            (a for a in stall_alerts() if a["state"] in ("pending", "firing")), None), STALL_WINDOW + 4 * SCRAPE, step=1)
        firing = wait_for("the stall alert firing", lambda: next(
            (a for a in stall_alerts() if a["state"] == "firing"), None), STALL_FOR + 4 * SCRAPE, step=1)
        fired = time.time()
        active_at = datetime.datetime.fromisoformat(pending["activeAt"].replace("Z", "+00:00")).timestamp()
        health_during = health()
        node_exec(node(1), "docker", "exec", HEAD, "kill", "-CONT", *pids)
        resumed = time.time()
        wait_for("the stall alert resolved", lambda: not stall_alerts(), 3 * SCRAPE + 10, step=1)
        resolved = time.time()
        report(f"monitoring: engine worker SIGSTOPped with 3 requests waiting (/health {health_during}); the stall "
               f"alert pending {active_at - stopped:.1f}s after the stop, firing {fired - active_at:.1f}s after it "
               f"went pending (for: {STALL_FOR}s, scrape and evaluation every {SCRAPE}s, stall window {STALL_WINDOW}s;"
               f" {fired - stopped:.1f}s after the stop); resolved {resolved - resumed:.1f}s after SIGCONT; "
               f"alert: {firing['labels']}, value {firing['value']}")
        assert firing["labels"]["cluster"] == "pair1" and float(firing["value"]) >= 3
        assert STALL_FOR <= fired - active_at <= STALL_FOR + SCRAPE + 3
        assert fired - stopped <= STALL_WINDOW + STALL_FOR + 4 * SCRAPE
        assert resolved - resumed <= 3 * SCRAPE + 10
        wait_for("the waiting requests answered", lambda: len(hanging) == 3, 60)
        assert all(hanging), hanging
    finally:
        node_exec(node(1), "docker", "exec", HEAD, "kill", "-CONT", *pids, check=False)
        node_exec(node(1), "docker", "start", "dgxspark-watchdog")
    wait_for("the watchdog back", lambda: state(1, "dgxspark-watchdog").startswith("running"), 30)
    assert completion()


# --------------------------------------------------------------------------- the watchdog (issue 14, 3 and 4)
# On the pair deployed above, with a short interval and cap. These tests run last: the cap test leaves the cluster
# failed for the module's teardown.

SERVED = "qwen3.5-122b-a10b-fp8"
INTERVAL = 3.0
MAX_RESTARTS = 2
WATCH = ["-e", f"watchdog_interval={INTERVAL}", "-e", f"watchdog_max_restarts={MAX_RESTARTS}",
         "-e", "watchdog_backoff_base=2", "-e", "watchdog_load_timeout=120", "-e", "watchdog_stable_seconds=10"]
EVENTS = "/var/lib/dgxspark/watchdog/events.jsonl"
HEAD, WORKER = "dgxspark-ray-head", "dgxspark-ray-worker"


def completion(timeout=5.0, prompt="watchdog test"):
    body = json.dumps({"model": SERVED, "prompt": prompt, "max_tokens": 1}).encode()
    req = urllib.request.Request(f"{api_url(1)}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    opener = api_opener(1)
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status == 200 and bool(json.load(resp).get("choices"))
    except (OSError, urllib.error.URLError, ValueError):
        return False


ENGINE_VERSION = """
import urllib.request
from pathlib import Path
print(urllib.request.urlopen("http://127.0.0.1:8000/version", timeout=5).read().decode())
"""


ENGINE_HEALTH = """
import sys, urllib.error, urllib.request
try:
    print(urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=5).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
except OSError:
    print("none")
"""


def health():
    """The engine's own /health, asked on the head's loopback where it listens (the LAN address's port is the head's
    door, which asks for a key): its status, or None when nothing answers."""
    answer = node_exec(node(1), "python3", "-c", ENGINE_HEALTH, check=False).stdout.strip()
    return int(answer) if answer.isdigit() else None


def events(since=0.0):
    text = node_exec(node(1), "cat", EVENTS, check=False).stdout
    return [e for e in (json.loads(line) for line in text.splitlines() if line.strip()) if e["time"] >= since]


def wait_for(what, predicate, timeout, step=0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; events: "
                         + json.dumps(events()[-8:], indent=1)[-4000:])


def first(kind, since, **match):
    return next((e for e in events(since) if e["event"] == kind and all(e.get(k) == v for k, v in match.items())), None)


def state(i, name):
    return node_exec(node(i), "docker", "inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", name,
                     check=False).stdout.strip()


def watchdog_state():
    return json.loads(node_exec(node(1), "cat", "/var/lib/dgxspark/watchdog/state.json", check=False).stdout or "{}")


@pytest.fixture(scope="module")
def watched(deployed):
    """The deploy again with only the watchdog's settings changed: the watchdog is made anew, no engine restarts."""
    assert deployed.returncode == 0, deployed.stdout[-3000:]
    now = node_exec(node(1), "docker", "inspect", "-f", "{{.Id}}", HEAD, check=False).stdout
    if now != SERVING["head"]:  # the slow tests (mp, other cabling) served otherwise: back to the first deployment
        again = deploy()
        assert again.returncode == 0, again.stdout[-4000:]
    before = {name: state(i, name) for i, name in ((1, HEAD), (2, WORKER))}
    proc = deploy(*WATCH)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return {"play": proc, "before": before}


def test_a_watchdog_runs_on_the_head_and_its_settings_change_restarts_no_engine(watched):
    after = {name: state(i, name) for i, name in ((1, HEAD), (2, WORKER))}
    changed = [block.split("]", 1)[0] for block in watched["play"].stdout.split("\nTASK [")[1:]
               if "\nchanged: [" in block]
    report(f"watchdog: a deploy that changes only the watchdog's settings changed {changed}; engine containers "
           f"restarted: {[n for n in after if after[n] != watched['before'][n]]}")
    assert after == watched["before"]
    # The watchdog's steps changed, and the record of the deploy (its inputs changed): nothing else.
    assert changed and all(task.startswith("dgxspark.vllm.watchdog") for task in changed[:-1]), changed
    assert changed[-1] == "dgxspark.vllm.deploy_state : Record this node as the deploy left it (the next deploy compares with it)", changed
    assert state(1, "dgxspark-watchdog").startswith("running")
    assert state(2, "dgxspark-watchdog") == ""  # on the head only
    inspect = node_exec(node(1), "docker", "inspect", "dgxspark-watchdog").stdout
    assert KEY not in inspect and "unless-stopped" in inspect
    host_config = json.loads(inspect)[0]["HostConfig"]
    assert host_config["CapDrop"] == ["ALL"] and not host_config["CapAdd"], host_config  # issue 15: least privilege
    assert host_config["SecurityOpt"] == ["no-new-privileges:true"] and not host_config["Privileged"]
    # Security review H3: no Docker socket, no transfer key in the watchdog; its own key asks engine requests alone.
    mounts = sorted(f"{m['Source']}:{m['Destination']}:{'rw' if m['RW'] else 'ro'}"
                    for m in json.loads(inspect)[0]["Mounts"])
    assert not [m for m in mounts if "docker.sock" in m or "/etc/dgxspark/transfer" in m], mounts
    assert "/etc/dgxspark/watchdog-key:/etc/dgxspark/watchdog-key:ro" in mounts, mounts
    assert "/usr:/usr:ro" in mounts and host_config["ReadonlyRootfs"], mounts
    # Its image is the collection's own, FROM scratch: no file in it, so no serving-image code (it runs the head's
    # python3 and ssh, mounted read-only).
    image = json.loads(node_exec(node(1), "docker", "image", "inspect",
                                 json.loads(inspect)[0]["Image"]).stdout)[0]
    assert image["RepoTags"] == ["dgxspark/watchdog-root:1"] and not image["RootFS"].get("Layers"), image["RootFS"]
    serving = node_exec(node(1), "docker", "inspect", "-f", "{{.Image}}", HEAD).stdout.strip()
    assert json.loads(inspect)[0]["Image"] != serving
    asks = {}
    for what, request in (("engine", {"v": 2, "op": "engine", "action": "status", "containers": [WORKER]}),
                          ("inspect", {"v": 2, "op": "inspect", "ref": "lab/vllm-qwen35:0.17"})):
        proc = node_exec(node(1), "ssh", "-F", "none", "-i", "/etc/dgxspark/watchdog-key/id_ed25519", "-o",
                         "UserKnownHostsFile=/etc/dgxspark/watchdog-key/known_hosts", "-o", "BatchMode=yes",
                         "-o", "StrictHostKeyChecking=yes", f"root@{fabric_ip(2)}", check=False,
                         input_text=json.dumps(request) + "\n")
        asks[what] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert asks["engine"]["ok"] and asks["engine"]["containers"][WORKER]["running"], asks
    assert not asks["inspect"]["ok"] and "may only ask engine requests" in asks["inspect"]["error"], asks
    report(f"watchdog (H3): mounts {mounts}; with its own key, the worker answers an engine status and refuses an "
           f"image inspect ({asks['inspect']['error']})")
    # Security review L9: both forced commands' configurations name the engine containers as this deployment names
    # them (the transfer key's, and the watchdog key's, which alone may ask engine requests).
    for path in ("/etc/dgxspark/transfer/relay.json", "/etc/dgxspark/watchdog-key/relay.json"):
        relay = json.loads(node_exec(node(2), "cat", path).stdout)
        assert relay["engine_containers"] == [HEAD, WORKER, "dgxspark-vllm"], (path, relay)
    wait_for("the watchdog's first answered look", lambda: watchdog_state().get("verdict") == "ok", 30)
    status = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), STATUS], env=ansible_env())
    flat = " ".join(status.stdout.split())
    assert "watchdog: ok (completion answered in" in flat and f"restarts 0 of {MAX_RESTARTS}, every {INTERVAL}s" in flat
    assert "started detail=watching every 3s" in flat


def test_the_secret_sweep_covers_the_doors_and_prometheus_keys(monitored, watched):
    """Security review, point 10: the sweep of the deploy (above) extended to what came after it. Prometheus's key
    files (the engines' key it scrapes with, the gateway client key) and the key the door asks for, as the head holds
    them, are in no process command line, no `docker inspect`, no log of the door, Prometheus, the node exporters or
    the watchdog, and not in a -vvv run of monitoring.yml."""
    assert monitored["first"].returncode == 0 and watched["play"].returncode == 0
    # (This fleet has no gateway: Prometheus holds no gateway key; tests/lab/test_lab_fleet.py sweeps the gateway's.)
    assert node_exec(node(1), "test", "-e", "/etc/dgxspark/monitoring/gateway.key", check=False).returncode != 0
    secrets = {"Prometheus metrics key": node_exec(node(1), "cat", "/etc/dgxspark/monitoring/engine.key").stdout.strip(),
               "door client key": node_exec(node(1), "cat", "/etc/dgxspark/gateway-door/keys").stdout.strip(),
               "the cluster's engine key (the door's)": engine_key(node(1))}
    assert all(len(value) >= 8 for value in secrets.values()), {k: len(v) for k, v in secrets.items()}
    needles = {**secrets,
               **{f"{name} {kind}": digest for name, value in secrets.items() for kind, digest in _digests(value).items()}}
    again = run([*monitored["argv"], MONITORING, "-vvv", "-e", json.dumps(MONITOR_VARS)], check=False, env=ansible_env())
    assert again.returncode == 0, again.stdout[-3000:]
    places = {"monitoring.yml -vvv": again.stdout + again.stderr}
    for index in (1, 2):
        places[f"{node(index)} /proc/*/cmdline"] = node_exec(
            node(index), "sh", "-c", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done").stdout
        names = node_exec(node(index), "docker", "ps", "-aq").stdout.split()
        places[f"{node(index)} docker inspect"] = node_exec(node(index), "docker", "inspect", *names).stdout
        for name in ("dgxspark-door", "dgxspark-prometheus", "dgxspark-node-exporter", "dgxspark-watchdog"):
            logs = node_exec(node(index), "docker", "logs", name, check=False)
            if logs.returncode == 0:
                places[f"{node(index)} docker logs {name}"] = logs.stdout + logs.stderr
    logged = ("dgxspark-door", "dgxspark-prometheus", "dgxspark-node-exporter", "dgxspark-watchdog")
    assert {f"{node(1)} docker logs {name}" for name in logged} <= set(places)
    found = [(what, where) for what, needle in needles.items() for where, text in places.items() if needle in text]
    assert not found, found
    report(f"secret sweep: {len(secrets)} keys the door and Prometheus hold ({len(needles)} forms) in none of "
           f"{len(places)} places")


def test_l4_every_container_the_collection_started_rotates_its_logs(monitored, watched):
    """Security review L4: at 13f6075 every container ran with Docker's json-file and no option, one log file growing
    until the disk is full. Now each one the collection started (engine ranks, watchdog, Prometheus, node exporters)
    has the fleet's rotation (dgxspark_container_logs unset: json-file, 5 files of 50 MB)."""
    seen = {}
    for i in (1, 2):
        names = node_exec(node(i), "docker", "ps", "-a", "--filter", "label=org.dgxspark.vllm.component",
                          "--format", "{{.Names}}").stdout.split()
        for name in names:
            config = json.loads(node_exec(node(i), "docker", "inspect", "-f", "{{json .HostConfig.LogConfig}}",
                                          name).stdout)
            component = node_exec(node(i), "docker", "inspect", "-f",
                                  '{{index .Config.Labels "org.dgxspark.vllm.component"}}', name).stdout.strip()
            seen[f"{node(i)}/{name}"] = (component, config)
    report("L4: log settings of the collection's containers: "
           + ", ".join(f"{where} ({c}) {cfg['Type']} {cfg['Config']}" for where, (c, cfg) in sorted(seen.items())))
    assert {component for component, _config in seen.values()} >= {"ray", "watchdog", "prometheus", "node-exporter"}
    for where, (_component, config) in seen.items():
        assert config == {"Type": "json-file", "Config": {"max-file": "5", "max-size": "50m"}}, (where, config)


def test_a_long_prefill_under_the_watchdog_is_busy_and_nothing_is_restarted(watched):
    """Security review M5: only generated tokens counted as progress, so a long prompt (a prefill decodes nothing for
    minutes) was a stall and the whole cluster was restarted, killing the request. The stand-in holds the engine for
    a prompt's prefill as a real engine does (2000 tokens/s here), counting prompt tokens and engine steps."""
    wait_for("an answered completion", completion, 60)
    head_start = state(1, HEAD)
    began = time.time()
    answer = {}
    prompt = " ".join(["spark"] * 24000)  # 12 s of prefill: four watch intervals without a decoded token
    thread = threading.Thread(target=lambda: answer.update(ok=completion(timeout=120, prompt=prompt)))
    thread.start()
    verdicts = []
    while thread.is_alive():
        verdicts.append(watchdog_state().get("verdict"))
        time.sleep(0.5)
    took = time.time() - began
    report(f"watchdog: a 24000-token prompt held the engine {took:.1f}s (interval {INTERVAL:g}s); verdicts meanwhile "
           f"{sorted(set(v for v in verdicts if v))}")
    assert answer.get("ok") and took > 2 * INTERVAL
    assert "busy" in verdicts, verdicts
    assert [e for e in events(began) if e["event"] in ("detected", "action", "failed")] == [], events(began)
    assert state(1, HEAD) == head_start


def test_a_stalled_engine_is_detected_within_two_intervals_and_the_cluster_restarted(watched):
    assert completion()
    # vLLM's EngineCore and workers are processes of their own; SIGSTOP of one keeps the API server's /health 200.
    # Here: the rank-0 worker (the Ray actor on the head that executes the model).
    pids = node_exec(node(1), "docker", "exec", HEAD, "pgrep", "-f", "RayWorkerWrapper").stdout.split()
    assert pids, node_exec(node(1), "docker", "exec", HEAD, "ps", "axo", "pid,args").stdout
    head_start = state(1, HEAD)
    stopped_at = time.time()
    node_exec(node(1), "docker", "exec", HEAD, "kill", "-STOP", *pids)
    assert not completion(timeout=2)
    health_during = health()
    detected = wait_for("the stall's detection", lambda: first("detected", stopped_at), 4 * INTERVAL)
    detection = detected["time"] - stopped_at
    report(f"watchdog: engine worker SIGSTOPped ({len(pids)} process(es)), /health during the stall {health_during}; "
           f"detected as {detected['kind']} after {detection:.1f}s (interval {INTERVAL:g}s): {detected['detail']}")
    assert health_during == 200
    assert detected["kind"] == "stall"
    assert detection <= 2 * INTERVAL
    action = wait_for("the restart", lambda: first("action", stopped_at), 120)
    assert action["action"] == "restart" and action["result"] == "done", action
    serving = wait_for("an answered completion", completion, 300, step=0.2)
    answered_at = time.time()
    recovered = wait_for("the recovered event", lambda: first("recovered", stopped_at), 60)
    report(f"watchdog: restart 1 of {MAX_RESTARTS} took {action['duration']}s; the controller's first answered "
           f"completion {answered_at - stopped_at:.1f}s after the stall ({answered_at - action['time']:.1f}s after "
           f"the restart); the watchdog's 'recovered' after {recovered['duration']}s")
    assert serving and state(1, HEAD) != head_start


def test_both_nodes_restarted_head_last_serve_again_without_ansible(watched):
    wait_for("a healthy cluster before the power cut", completion, 120)
    run(["docker", "stop", "-t", "60", node(1), node(2)])
    off = time.time()
    run(["docker", "start", node(2)])
    worker_on = time.time()
    # The worker's engine container comes back and waits for its head: the head comes back later.
    waiting = wait_for("the worker's launcher waiting for its head", lambda: next(
        (line for line in node_exec(node(2), "docker", "logs", "--since", "2m", WORKER, check=False).stdout.splitlines()
         if "for the Ray head" in line), None), 120)
    run(["docker", "start", node(1)])
    head_on = time.time()
    wait_for("an answered completion after the restart", completion, 600, step=0.5)
    answered = time.time()
    links = node_exec(node(1), "ip", "-br", "addr").stdout
    report(f"watchdog: both nodes off at +0s, the worker on at +{worker_on - off:.1f}s, the head on at "
           f"+{head_on - off:.1f}s; first answered completion {answered - head_on:.1f}s after the head's restart "
           f"({answered - worker_on:.1f}s after the first node's), without Ansible")
    assert "enp1s0f1np1" in links  # the node's boot named its fabric link as a Spark's does
    report(f"watchdog: the worker meanwhile: {waiting.strip()}")
    wait_for("the watchdog back and answered", lambda: state(1, "dgxspark-watchdog").startswith("running")
             and watchdog_state().get("verdict") == "ok", 60)
    restarts = [e for e in events(head_on) if e["event"] == "action"]
    assert restarts == [], restarts  # the reboot needed no recovery: a loading engine is left alone


def failed_in_prometheus():
    """{(cluster, value)} of the watchdog's dgxspark_watchdog_failed in Prometheus (from the head's node exporter),
    and whether DgxsparkClusterFailed fires."""
    series = {(r["metric"].get("cluster"), r["value"][1]) for r in
              prometheus("/api/v1/query?query=dgxspark_watchdog_failed")["data"]["result"]}
    firing = [a for a in prometheus("/api/v1/alerts")["data"]["alerts"]
              if a["labels"]["alertname"] == "DgxsparkClusterFailed" and a["state"] == "firing"]
    return series, [a["labels"].get("cluster") for a in firing]


@pytest.mark.slow  # the watchdog's restart: test_a_stalled_engine_is_detected... in make test; the cap: make lab-test
def test_a_cluster_that_can_never_start_stops_at_the_cap_stays_failed_through_a_reboot_and_a_deploy_serves_it(
        watched, monitored):
    assert monitored["first"].returncode == 0
    wait_for("a healthy cluster", completion, 120)
    wait_for("Prometheus seeing the watchdog's verdict", lambda: failed_in_prometheus() == ({("pair1", "0")}, []),
             60, step=1)
    # Answers for watchdog_stable_seconds forget the restarts of the tests before: the cap is counted from 0.
    wait_for("the restarts forgotten", lambda: watchdog_state().get("attempts") == 0, 60)
    since = time.time()
    # The engine now fails at import on every start (the writable layer of the head's container survives restarts).
    module = node_exec(node(1), "docker", "exec", HEAD, "python3", "-c",
                       "import vllm.entrypoints.openai.api_server as m; print(m.__file__)").stdout.strip()
    original = node_exec(node(1), "docker", "exec", HEAD, "cat", module).stdout
    node_exec(node(1), "docker", "exec", HEAD, "sh", "-c",
              f"printf 'raise ImportError(\"libcudart.so.13: cannot open shared object file\")\\n' > {module} && "
              "pkill -f 'bin/vllm[ ]serve'")
    failed = wait_for("the watchdog giving up", lambda: first("failed", since), 600, step=1)
    actions = [e for e in events(since) if e["event"] == "action"]
    backoffs = [e["wait"] for e in events(since) if e["event"] == "backoff"]
    report(f"watchdog: a cluster that cannot start: {len(actions)} restart(s) (cap {MAX_RESTARTS}), backoff waits "
           f"{backoffs}, then failed after {failed['time'] - since:.1f}s: {failed['detail']}")
    assert len(actions) == MAX_RESTARTS and failed["restarts"] == MAX_RESTARTS and failed["result"] == "stopped"
    assert [a["restart"] for a in actions] == list(range(1, MAX_RESTARTS + 1))
    assert state(1, HEAD).startswith("exited") and state(2, WORKER).startswith("exited")
    assert health() is None  # nothing listens: a gateway's health check fails
    time.sleep(3 * INTERVAL)  # and it stays so: no further restart
    assert [e for e in events(failed["time"] + 0.001) if e["event"] in ("action", "failed")] == []
    assert state(1, HEAD).startswith("exited")
    status = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), STATUS], env=ansible_env())
    assert "watchdog: FAILED" in " ".join(status.stdout.split())
    # Review M5: Prometheus too says it (the watchdog's textfile, read by the head's node exporter), and alerts.
    wait_for("Prometheus seeing the cluster failed", lambda: failed_in_prometheus() == ({("pair1", "1")}, ["pair1"]),
             60, step=1)
    # Review M5: a failed cluster stays failed through a reboot of both nodes, until an operator acts. The operator's
    # fix (the module put back, in the stopped container) is made before the reboot: nothing starts it but a deploy.
    node_exec(node(1), "sh", "-c", "cat > /tmp/api_server.py", input_text=original)
    node_exec(node(1), "docker", "cp", "/tmp/api_server.py", f"{HEAD}:{module}")
    run(["docker", "stop", "-t", "60", node(1), node(2)])
    run(["docker", "start", node(2), node(1)])
    rebooted = time.time()
    wait_for("the watchdog back after the reboot", lambda: state(1, "dgxspark-watchdog").startswith("running")
             and (watchdog_state().get("last_check") or 0) > rebooted, 180)
    time.sleep(3 * INTERVAL)
    assert watchdog_state()["failed"] and watchdog_state()["verdict"] == "failed", watchdog_state()
    assert state(1, HEAD).startswith("exited") and state(2, WORKER).startswith("exited")
    assert health() is None and [e for e in events(rebooted) if e["event"] in ("action", "failed")] == []
    status = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), STATUS], env=ansible_env())
    assert "watchdog: FAILED" in " ".join(status.stdout.split())
    wait_for("Prometheus seeing the cluster failed after the reboot",
             lambda: failed_in_prometheus() == ({("pair1", "1")}, ["pair1"]), 90, step=1)
    report(f"watchdog: after the give-up both nodes rebooted; {3 * INTERVAL:.0f}s later the cluster is still failed "
           "(engines exited, status FAILED, no restart)")
    # A deploy brings it back (the deploy record sees the engines stopped), and the watchdog sees it serve again.
    again = deploy(*WATCH)
    assert again.returncode == 0, again.stdout[-4000:]
    wait_for("the watchdog seeing the cluster serve again", lambda: first("serving_again", rebooted), 120, step=1)
    assert not watchdog_state()["failed"] and completion()
    wait_for("Prometheus seeing the cluster serve again", lambda: failed_in_prometheus() == ({("pair1", "0")}, []),
             60, step=1)
