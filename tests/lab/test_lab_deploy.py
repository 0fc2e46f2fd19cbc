"""deploy_qwen35.yml end to end on the lab: preflight, hybrid overlay, image_sync, Ray, vllm serve TP=2, probe."""

from __future__ import annotations

import json
import os
import sys
import urllib.request

import pytest

from labkit import (BIN, INVENTORY, LAB, REPO, ansible_env, api_url, collection_as_it_was, fabric_if, fabric_ip,
                    node, node_exec, run)

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


@pytest.fixture(scope="module")
def deployed(lab):
    run([*LAB, "images", "vllm-qwen35-0.17"])
    run([*LAB, "load", "lab/vllm-qwen35:0.17"])
    run([*LAB, "models"])
    first = deploy("-v")
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


def test_api_key_never_in_inspect_ps_or_ansible_output(deployed):
    assert KEY not in deployed.stdout  # the -v run
    for index in (1, 2):
        inspect = node_exec(node(index), "sh", "-c", "docker inspect $(docker ps -aq)").stdout
        assert KEY not in inspect
        assert KEY not in node_exec(node(index), "ps", "auxww").stdout
    # ... but the server does require it.
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
        assert "IPC_LOCK" in config["CapAdd"]
        assert {u["Name"]: u["Hard"] for u in config["Ulimits"]}["stack"] == 67108864
        assert {"dgxspark-vllm-cache:/root/.cache/vllm", "dgxspark-flashinfer-cache:/root/.cache/flashinfer",
                "dgxspark-triton-cache:/root/.triton"} <= {b.removesuffix(":rw") for b in config["Binds"]}
        assert node_exec(node(i), "docker", "exec", name, "nvidia-smi", "-L").stdout.startswith("GPU 0: NVIDIA GB10")
        assert "this container sees 1 GPU(s)" in node_exec(node(i), "docker", "logs", name).stdout


def test_second_deploy_changes_and_restarts_nothing(deployed):
    before = head_container()
    second = deploy()
    assert second.returncode == 0, second.stdout[-5000:]
    assert recap(second, node(1))["changed"] == "0" and recap(second, node(2))["changed"] == "0"
    assert head_container() == before  # same container, same start, no restart


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
