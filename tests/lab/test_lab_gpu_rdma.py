"""The GPU and RDMA as a DGX Spark gives them to containers, and what the collection as it was (1b5e624) did there.

On a Spark a container has the GPU only when Docker is asked for it (`--gpus` / `device_requests`, driver nvidia,
through NVIDIA's prestart hook), and the RDMA verbs devices only when it is given /dev/infiniband; the RoCE sysfs
tree is the node's. The lab's nodes behave so (lab/images/node/nvidia-container-runtime-hook, lab-rdma). The
collection as it was started its engine containers without the GPU, and its mp ranks without /dev/infiniband while
rdma_facts set NCCL_NET=IB: here, as on a Spark, the engine stops in CUDA's and NCCL's words.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from labkit import (AS_IT_WAS, BIN, INVENTORY, LAB, REPO, ansible_env, fabric_if, fabric_ip, node, node_exec, node_run,
                    parse_adhoc, run)

TINY = "dgxspark-lab/tiny:latest"
ENGINE = "lab/vllm-qwen35:0.17"
MODEL = "/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8"
LABEL = "org.dgxspark.test=gpu-rdma"


@pytest.fixture(scope="module")
def engine_lab(lab):
    run([*LAB, "images", "vllm-qwen35-0.17"])
    run([*LAB, "load", ENGINE])
    yield lab
    for i in (1, 2):
        ids = node_exec(node(i), "docker", "ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout.split()
        if ids:
            node_exec(node(i), "docker", "rm", "-f", *ids, check=False)


def rdma_facts(i):
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), node(i), "-m", "dgxspark.vllm.rdma_facts", "-a",
                json.dumps({"interface": fabric_if(i)})], check=False,
               env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    return parse_adhoc(proc.stdout)


def engine_run(i, *docker_args, env=None, argv=()):
    """`docker run` of the engine image on node I with DOCKER_ARGS; its exit code and output."""
    env_args = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
    proc = node_exec(node(i), "docker", "run", "--rm", "--label", LABEL, "--network", "host", "--ipc", "host",
                     "-v", f"{MODEL}:/models/m:ro", *env_args, *docker_args, "--entrypoint", "vllm", ENGINE,
                     "serve", "/models/m", "--gpu-memory-utilization", "0.8", *argv, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def old_engine_task(path):
    """The docker_container task of the collection as it was (git show 1b5e624:PATH)."""
    text = subprocess.run(["git", "show", f"{AS_IT_WAS}:{path}"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout
    tasks = [t for t in yaml.safe_load(text) if "community.docker.docker_container" in t]
    return [t["community.docker.docker_container"] for t in tasks
            if t["community.docker.docker_container"].get("state") == "started"]


def test_node_gives_the_gpu_only_to_containers_that_ask_for_it_as_docker_does_on_a_spark(lab):
    # nvidia-smi on the node itself, as on a Spark.
    assert node_exec(node(1), "nvidia-smi", "-L").stdout.startswith("GPU 0: NVIDIA GB10")
    # Docker registered its nvidia device driver (the hook is on dockerd's PATH).
    plain = node_run(node(1), TINY, "sh", "-c",
                     "ls /dev; ls /usr/bin/nvidia-smi /sys/class/infiniband 2>&1; true").stdout
    assert "nvidia0" not in plain and "nvidiactl" not in plain and "No such file" in plain
    gpu = node_run(node(1), "--gpus", "all", TINY, "sh", "-c",
                   "ls /dev /run/dgxspark-lab; ls -l /usr/bin/nvidia-smi; grep -c nvidia-smi /proc/self/mountinfo").stdout
    assert "nvidia0" in gpu and "nvidiactl" in gpu and "gpu" in gpu and "/usr/bin/nvidia-smi" in gpu
    # A broken driver stops the start as NVIDIA's hook does.
    node_exec(node(1), "touch", "/etc/dgxspark-lab/no-driver")
    try:
        broken = node_exec(node(1), "docker", "run", "--rm", "--gpus", "all", TINY, "true", check=False)
    finally:
        node_exec(node(1), "rm", "-f", "/etc/dgxspark-lab/no-driver")
    assert broken.returncode != 0
    assert "nvidia-container-cli: initialization error: nvml error: driver not loaded" in broken.stderr


def test_spark_roce_tree_for_rdma_facts_and_verbs_devices_only_for_containers_given_them(lab):
    facts = rdma_facts(1)
    assert facts["transport"] == "roce", facts
    assert facts["env"]["NCCL_NET"] == "IB" and facts["env"]["NCCL_IB_DISABLE"] == "0"
    assert facts["fabric_ip"] == fabric_ip(1)
    assert facts["env"]["NCCL_IB_GID_INDEX"] == "3"  # the RoCE v2 GID that carries the fabric IPv4
    gid = node_exec(node(1), "cat", "/sys/class/infiniband/rocep1s0f1/ports/1/gids/3").stdout.strip()
    a, b, c, d = (int(x) for x in fabric_ip(1).split("."))
    assert gid == f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"
    assert set(node_exec(node(1), "ls", "/dev/infiniband").stdout.split()) == {"uverbs0", "uverbs1", "uverbs2", "uverbs3", "rdma_cm"}
    without = node_run(node(1), "--gpus", "all", TINY, "sh", "-c",
                       "ls /sys/class/infiniband; ls /dev/infiniband 2>&1; true").stdout
    assert "rocep1s0f1" in without and "No such file" in without
    given = node_run(node(1), "--gpus", "all", "--device", "/dev/infiniband:/dev/infiniband:rwm",
                     TINY, "ls", "/dev/infiniband").stdout.split()
    assert set(given) == {"uverbs0", "uverbs1", "uverbs2", "uverbs3", "rdma_cm"}


def test_engine_container_started_as_the_collection_was_has_no_gpu_and_fails_in_vllm_words(engine_lab):
    # The collection as it was: no device_requests (nor runtime nvidia) on any engine container.
    old = old_engine_task("roles/ray_cluster/tasks/present.yml") + old_engine_task("roles/vllm_serve/tasks/mp.yml")
    assert len(old) == 3 and not any("device_requests" in t or "runtime" in t for t in old)
    rc, out = engine_run(1, "--cap-add", "IPC_LOCK", argv=["--port", "8011"])
    assert rc != 0
    assert "RuntimeError: Failed to infer device type" in out, out[-3000:]


def test_mp_rank_started_as_the_collection_was_has_no_verbs_devices_and_fails_in_nccl_words(engine_lab):
    # The collection as it was: the mp rank container had no devices, yet rdma_facts' env (NCCL_NET=IB) was its env.
    (mp,) = old_engine_task("roles/vllm_serve/tasks/mp.yml")
    assert "devices" not in mp
    env = dict(rdma_facts(1)["env"], NCCL_DEBUG="WARN")
    assert env["NCCL_NET"] == "IB"
    rank0 = ["--port", "8012", "--tensor-parallel-size", "2", "--distributed-executor-backend", "mp", "--nnodes", "2",
             "--node-rank", "0", "--master-addr", fabric_ip(1), "--master-port", "29512", "--enforce-eager"]
    rc, out = engine_run(1, "--gpus", "all", "--cap-add", "IPC_LOCK", env=env, argv=rank0)
    assert rc != 0
    assert "NCCL WARN Failed to initialize any NET plugin" in out, out[-3000:]
    assert "ncclInvalidUsage" in out
    assert re.search(r"invalid usage \(run with NCCL_DEBUG=WARN for details\), NCCL version 2\.", out)
