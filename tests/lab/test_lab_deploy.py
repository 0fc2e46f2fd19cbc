"""deploy_qwen35.yml end to end on the lab: preflight, hybrid overlay, image_sync, Ray, vllm serve TP=2, probe."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sys
import urllib.request

import pytest

from labkit import (BIN, INVENTORY, LAB, REPO, ansible_env, api_url, collection_as_it_was, fabric_if, fabric_ip,
                    mgmt_ip, node, node_exec, run)

DEPLOY = str(REPO / "playbooks" / "deploy_qwen35.yml")
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


@pytest.fixture(scope="module")
def deployed(lab, tmp_path_factory):
    run([*LAB, "images", "vllm-qwen35-0.17"])
    run([*LAB, "load", "lab/vllm-qwen35:0.17"])
    run([*LAB, "models"])
    secrets = tmp_path_factory.mktemp("secrets") / "vault.json"
    secrets.write_text(json.dumps({"dgxspark_hf_token": HF_SENTINEL}))
    first = deploy("-vvv", "-e", f"@{secrets}")
    yield first
    for backend in ("ray", "mp"):  # the last test leaves the mp ranks: take both backends' containers away
        run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "tests" / "lab" / "playbooks" / "serve.yml"),
             "-e", "vllm_serve_state=absent", "-e", f"vllm_serve_backend={backend}"], check=False, env=ansible_env())


def test_deploy_from_zero_serves_a_chat_completion(deployed):
    assert deployed.returncode == 0, deployed.stdout[-5000:]
    flat = " ".join(deployed.stdout.split())
    assert (f"pair1: serving qwen3.5-122b-a10b-fp8 at {api_url(1)}/v1, TP 2 over {node(1)} + {node(2)}, "
            "2 GPU(s), ready in") in flat
    # make demo's last step: lab/chat.py finds the head's LAN address in the inventory.
    chat = run([sys.executable, str(LAB[1].replace("lab.py", "chat.py"))], env=dict(os.environ, DEMO_API_KEY=KEY))
    assert f"POST {api_url(1)}/v1/chat/completions" in chat.stdout
    assert "assistant: " in chat.stdout and "reasoning: " in chat.stdout and "usage:" in chat.stdout


def test_api_answers_on_the_lan_from_the_controller(deployed, lab):
    """What a new user does after a deploy: from the controller, GET http://<head's ansible_host>:8000/v1/models with
    the API key. The fabric is point to point, so only an API on the LAN answers."""
    assert deployed.returncode == 0, deployed.stdout[-5000:]
    head = lab["_meta"]["hostvars"][node(1)]["ansible_host"]
    request = urllib.request.Request(f"http://{head}:8000/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as response:
        models = json.load(response)
    assert [m["id"] for m in models["data"]] == ["qwen3.5-122b-a10b-fp8"]
    assert f"at http://{head}:8000/v1," in " ".join(deployed.stdout.split())  # the summary prints that endpoint


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
    secrets = {"API key": KEY, "HF token": HF_SENTINEL, "Ray token": ray_token}
    needles = {**secrets,
               **{f"{name} {kind}": digest for name, value in secrets.items() for kind, digest in _digests(value).items()}}
    places = {"the play's -vvv output": deployed.stdout + deployed.stderr}
    for index in (1, 2):
        places[f"{node(index)} /proc/*/cmdline"] = node_exec(
            node(index), "sh", "-c", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done").stdout
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
    assert run(["curl", "-s", "--noproxy", "*", "-o", "/dev/null", "-w", "%{http_code}",
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
    firewall list, and on the LAN address itself only the API listens (the head)."""
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
        on_lan = {(a, p) for a, p, _prog in found if a == mgmt_ip(index)}
        assert on_lan == ({(mgmt_ip(1), 8000)} if index == 1 else set()), table


def test_second_deploy_changes_and_restarts_nothing(deployed):
    before = head_container()
    second = deploy()
    assert second.returncode == 0, second.stdout[-5000:]
    assert recap(second, node(1))["changed"] == "0" and recap(second, node(2))["changed"] == "0"
    assert head_container() == before  # same container, same start, no restart


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
    before = node_exec(node(1), "docker", "inspect", "-f", "{{.Id}} {{.State.StartedAt}}", "dgxspark-vllm").stdout
    second = deploy("-e", "vllm_serve_backend=mp")
    assert second.returncode == 0, second.stdout[-5000:]
    changed = [block.split("]", 1)[0] for block in second.stdout.split("\nTASK [")[1:] if "\nchanged: [" in block]
    assert recap(second, node(1))["changed"] == "0" and recap(second, node(2))["changed"] == "0", changed
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
