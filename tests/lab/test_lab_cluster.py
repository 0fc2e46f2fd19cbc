"""Clusters, not pairs: four lab Sparks behind one switch serving one model (TP=4, or TP=2 x PP=2), through
deploy_qwen35.yml.

The inventory has one cluster of four (lab.py up --cluster-size 4 --fabric-topology switch): the head is rank 0 and
the workers ranks 1 to 3. The image is on the head only, so image_sync relays it to the three others. Ray forms a
cluster of four and waits for four GPUs; the mp backend runs `--nnodes 4` with ranks 1 to 3 headless. A worker killed
while the cluster forms fails the deploy naming that node, and nothing is left running on the other three.
Then two one-node clusters (single Sparks, no fabric) serve TP=1 each, without Ray or multi-node flags.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from labkit import BIN, INVENTORY, LAB, REPO, ansible_env, api_opener, api_url, node, node_exec, recap, run
from labkit import ENGINES

pytestmark = ENGINES  # it starts Ray clusters (or real vLLM): the engines' worker (labkit.ENGINES)

NODES = 4
ENGINE = "lab/vllm-qwen35:0.17"
DEPLOY = str(REPO / "playbooks" / "deploy_qwen35.yml")
TEARDOWN = str(REPO / "playbooks" / "teardown.yml")
KEY = "lab-api-key-not-a-secret"
TP4 = ["-e", "dgxspark_tensor_parallel_size=4"]


def deploy(*args, timeout=1500):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), DEPLOY, *TP4, *args], check=False,
               env=ansible_env(), timeout=timeout)


def teardown():
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), TEARDOWN], check=False, env=ansible_env())


def flat(proc):
    return " ".join((proc.stdout + proc.stderr).split())


def engines(i):
    """Node I's engine containers: name -> (id, start time, argv)."""
    names = node_exec(node(i), "docker", "ps", "-aq", "--filter", "label=org.dgxspark.vllm.component").stdout.split()
    if not names:
        return {}
    # The engines (components ray and vllm), not the watchdog beside them on a head.
    out = node_exec(node(i), "docker", "inspect", "-f", "{{index .Config.Labels \"org.dgxspark.vllm.component\"}} "
                    "{{.Name}} {{.Id}} {{.State.StartedAt}} {{json .Args}}", *names).stdout
    return {line.split(" ", 4)[1].lstrip("/"): tuple(line.split(" ", 4)[2:]) for line in out.splitlines()
            if line.split(" ", 1)[0] in ("ray", "vllm")}


def completion(model="qwen3.5-122b-a10b-fp8"):
    request = urllib.request.Request(
        f"{api_url(1)}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        data=json.dumps({"model": model, "max_tokens": 8,
                         "messages": [{"role": "user", "content": "hello"}]}).encode())
    with api_opener(1).open(request, timeout=60) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def cluster4(lab):
    run([*LAB, "images", "vllm-qwen35-0.17"])
    run([*LAB, "up", "--nodes", str(NODES), "--fabric-topology", "switch", "--cluster-size", str(NODES)])
    # The image on the head only (and no overlay of it anywhere else): image_sync brings it to ranks 1 to 3.
    for i in range(2, NODES + 1):
        node_exec(node(i), "sh", "-c", f"docker rmi -f $(docker images -q {ENGINE}) $(docker images -q "
                                       "dgxspark/vllm-hybrid) 2>/dev/null; true", check=False)
    save = subprocess.Popen(["docker", "save", ENGINE], stdout=subprocess.PIPE)
    subprocess.run(["docker", "exec", "-i", node(1), "docker", "load", "-q"], stdin=save.stdout, check=True,
                   capture_output=True)
    save.stdout.close()
    assert save.wait() == 0
    run([*LAB, "models"])
    teardown()
    yield
    teardown()
    # back to the session's lab (pairs on point-to-point cables), so later tests run on the lab they were written for
    run([*LAB, "up", "--nodes", str(len(lab["_meta"]["hostvars"]))])


@pytest.mark.slow  # TP over Ray across a pair: test_lab_deploy and test_lab_fleet in make test; 4 nodes: test_lab_image_sync's relay
def test_four_sparks_on_a_switch_serve_tp4_over_ray_and_a_rerun_restarts_nothing(cluster4):
    first = deploy()
    assert first.returncode == 0, first.stdout[-5000:]
    assert (f"cluster1: serving qwen3.5-122b-a10b-fp8 at {api_url(1)}/v1, TP 4 over {node(1)} + {node(2)} + "
            f"{node(3)} + {node(4)}, 4 GPU(s), ready in") in flat(first), flat(first)[-3000:]
    assert completion()["usage"]["completion_tokens"] > 0
    # Every rank runs the image the head built, relayed to the three others by image_sync.
    served = {node_exec(node(i), "docker", "inspect", "-f", "{{.Image}}",
                        "dgxspark-ray-head" if i == 1 else "dgxspark-ray-worker").stdout.strip()
              for i in range(1, NODES + 1)}
    assert len(served) == 1, served
    before = [engines(i) for i in range(1, NODES + 1)]
    second = deploy()
    assert second.returncode == 0, second.stdout[-5000:]
    for i in range(1, NODES + 1):
        assert recap(second.stdout, node(i))["changed"] == 0, second.stdout[-3000:]
    assert [engines(i) for i in range(1, NODES + 1)] == before


@pytest.mark.slow  # mp across nodes with headless ranks: test_lab_deploy's mp pair in make test
def test_four_sparks_serve_tp4_with_mp_ranks_1_to_3_headless(cluster4):
    first = deploy("-e", "vllm_serve_backend=mp")
    assert first.returncode == 0, first.stdout[-5000:]
    assert "TP 4 over" in flat(first) and "4 GPU(s)" in flat(first)
    for i in range(1, NODES + 1):
        (_id, _started, args) = engines(i)["dgxspark-vllm"]
        argv = json.loads(args)
        assert argv[argv.index("--nnodes") + 1] == "4" and argv[argv.index("--node-rank") + 1] == str(i - 1), argv
        assert ("--headless" in argv) == (i > 1), argv
        assert not any(name.startswith("dgxspark-ray") for name in engines(i))  # one backend at a time
    assert completion()["usage"]["completion_tokens"] > 0
    before = [engines(i) for i in range(1, NODES + 1)]
    second = deploy("-e", "vllm_serve_backend=mp")
    assert second.returncode == 0, second.stdout[-5000:]
    for i in range(1, NODES + 1):
        assert recap(second.stdout, node(i))["changed"] == 0, second.stdout[-3000:]
    assert [engines(i) for i in range(1, NODES + 1)] == before


@pytest.mark.slow  # the 4-node cluster over Ray: the TP4 test in make test; PP's argv: unit tests
def test_four_sparks_serve_tp2_pp2_and_a_rerun_restarts_nothing(cluster4):
    pp = ["-e", "vllm_serve_backend=mp", "-e", "dgxspark_tensor_parallel_size=2", "-e", "dgxspark_pipeline_parallel_size=2"]
    first = deploy(*pp)
    assert first.returncode == 0, first.stdout[-5000:]
    for i in range(1, NODES + 1):
        argv = json.loads(engines(i)["dgxspark-vllm"][2])
        assert argv[argv.index("--tensor-parallel-size") + 1] == "2", argv
        assert argv[argv.index("--pipeline-parallel-size") + 1] == "2", argv
        assert argv[argv.index("--nnodes") + 1] == "4" and argv[argv.index("--node-rank") + 1] == str(i - 1), argv
    assert completion()["usage"]["completion_tokens"] > 0
    before = [engines(i) for i in range(1, NODES + 1)]
    second = deploy(*pp)
    assert second.returncode == 0, second.stdout[-5000:]
    for i in range(1, NODES + 1):
        assert recap(second.stdout, node(i))["changed"] == 0, second.stdout[-3000:]
    assert [engines(i) for i in range(1, NODES + 1)] == before


@pytest.mark.slow  # a worker lost as a cluster forms: test_ray_cluster's and molecule's faults scenario in make test
def test_a_worker_killed_while_the_cluster_forms_fails_the_deploy_naming_it_and_leaves_nothing_running(cluster4):
    assert teardown().returncode == 0
    proc = subprocess.Popen([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), DEPLOY, *TP4,
                             "-e", "ray_cluster_wait_timeout=90"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=ansible_env())
    killed = False
    deadline = time.monotonic() + 900
    while not killed and proc.poll() is None and time.monotonic() < deadline:
        running = node_exec(node(3), "docker", "ps", "-q", "--filter", "name=dgxspark-ray-worker",
                            "--filter", "status=running").stdout.strip()
        if running:
            # As a Spark whose engine container dies: docker kill, which the restart policy does not undo.
            killed = node_exec(node(3), "docker", "kill", "dgxspark-ray-worker", check=False).returncode == 0
        time.sleep(0.2)
    out, _err = proc.communicate(timeout=900)
    assert killed, out[-4000:]
    assert proc.returncode != 0
    text = " ".join(out.split())
    assert ("cluster1: the Ray cluster did not come up (timed out after 90 s waiting for every node and GPU); nodes "
            f"missing from the cluster: {node(3)} (fabric IP ") in text, text[-4000:]
    assert "Every node of the cluster was torn down." in text
    for i in range(1, NODES + 1):
        assert engines(i) == {}, (i, engines(i))


SINGLE_MODEL = "Qwen3.5-35B-A3B-FP8"  # a Qwen3.5 that fits one Spark (the 122B one is refused by the preflight)


def seed_single_model(*indexes):
    """The stand-in of Qwen/Qwen3.5-35B-A3B-FP8 (its index states 35 GB) under /srv/dgxspark/models on nodes INDEXES."""
    import sys  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel
    from pathlib import Path  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, str(REPO / "lab" / "engine"))
    import make_models  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory() as tmp:
        make_models.write_model(Path(tmp), "qwen35a3b", shard_kb=64)
        tar = subprocess.run(["tar", "-C", tmp, "-c", "."], stdout=subprocess.PIPE, check=True).stdout
    for i in indexes:
        subprocess.run(["docker", "exec", "-i", node(i), "tar", "-C", "/srv/dgxspark/models", "-x"], input=tar,
                       check=True)


@pytest.fixture(scope="module")
def singles(cluster4):
    """Two one-node clusters (lab.py up --cluster-size 1): single Sparks with nothing cabled to their CX7 ports."""
    run([*LAB, "up", "--nodes", "2", "--cluster-size", "1"])
    run([*LAB, "load", ENGINE])  # each head builds its own serving image: no fabric to sync one over
    run([*LAB, "models"])
    seed_single_model(1, 2)
    teardown()
    yield
    teardown()
    for i in (1, 2):  # the lab's own stand-ins only (the unified-memory model counts every weight file there)
        node_exec(node(i), "rm", "-rf", f"/srv/dgxspark/models/{SINGLE_MODEL}")


@pytest.mark.slow  # one node per cluster, no Ray: the TP1 argv and roles' single-node paths in unit tests
def test_single_sparks_serve_tp1_without_ray_fabric_or_multi_node_flags_and_a_rerun_restarts_nothing(singles):
    for i in (1, 2):  # no fabric link at all: the roles must not need one
        assert "enp1s0f1np1" not in node_exec(node(i), "ip", "-br", "link").stdout
    tp1 = ["-e", "dgxspark_tensor_parallel_size=1", "-e", f"dgxspark_model=Qwen/{SINGLE_MODEL}"]
    first = deploy(*tp1)
    assert first.returncode == 0, first.stdout[-5000:]
    for i, name in ((1, "cluster1"), (2, "cluster2")):
        assert (f"{name}: serving qwen3.5-35b-a3b-fp8 at {api_url(i)}/v1, TP 1 over {node(i)}, 1 GPU(s), "
                "ready in") in flat(first), flat(first)[-3000:]
    assert f"{node(1)} (cluster1 head): GPU" in flat(first) and "a single Spark (no fabric)" in flat(first)
    for i in (1, 2):
        running = engines(i)
        assert list(running) == ["dgxspark-vllm"], running  # one engine container, no Ray
        argv = json.loads(running["dgxspark-vllm"][2])
        assert argv[argv.index("--tensor-parallel-size") + 1] == "1", argv
        assert not {"--distributed-executor-backend", "--nnodes", "--node-rank", "--master-addr", "--headless"} & set(argv)
        env = node_exec(node(i), "docker", "inspect", "-f", "{{json .Config.Env}} {{json .HostConfig.Devices}}",
                        "dgxspark-vllm").stdout
        assert "NCCL_SOCKET_IFNAME" not in env and "VLLM_HOST_IP" not in env and "/dev/infiniband" not in env, env
    request = urllib.request.Request(
        f"{api_url(2)}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        data=json.dumps({"model": "qwen3.5-35b-a3b-fp8", "max_tokens": 8,
                         "messages": [{"role": "user", "content": "hello"}]}).encode())
    with api_opener(2).open(request, timeout=60) as response:
        assert json.load(response)["usage"]["completion_tokens"] > 0
    assert completion("qwen3.5-35b-a3b-fp8")["usage"]["completion_tokens"] > 0
    before = [engines(i) for i in (1, 2)]
    second = deploy(*tp1)
    assert second.returncode == 0, second.stdout[-5000:]
    for i in (1, 2):
        assert recap(second.stdout, node(i))["changed"] == 0, second.stdout[-3000:]
    assert [engines(i) for i in (1, 2)] == before
