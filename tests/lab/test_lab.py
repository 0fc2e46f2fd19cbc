"""The lab itself: real engines, SSH, two networks, Spark-like fabric, and the preflight against it."""

from __future__ import annotations

import json
import os
import pytest

from labkit import BIN, INVENTORY, LAB, REPO, ansible_env, fabric_ip, node, node_exec, run


# The preflight stage of deploy_qwen35.yml, alone (the whole deployment is tested in test_lab_deploy.py).
PREFLIGHT = str(REPO / "tests" / "lab" / "playbooks" / "preflight.yml")


def preflight(*args):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), PREFLIGHT, *args], check=False, env=ansible_env())


def test_ansible_reaches_every_node(lab):
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), "all", "-m", "ansible.builtin.ping"], env=ansible_env())
    assert proc.stdout.count("SUCCESS") == 2, proc.stdout


def test_inventory_has_the_example_structure(lab):
    meta = lab["_meta"]["hostvars"]
    assert lab["spark_pairs"]["children"] == ["pair1"]
    assert lab["pair1"]["hosts"] == [node(1), node(2)]
    assert meta[node(1)]["dgxspark_node_role"] == "head" and meta[node(2)]["dgxspark_node_role"] == "worker"
    # Interface names differ between the two nodes, as on real pairs.
    assert meta[node(1)]["dgxspark_fabric_interface"] == "enp1s0f1np1"
    assert meta[node(2)]["dgxspark_fabric_interface"] == "enP2p1s0f1np1"


@pytest.mark.parametrize("index", [1, 2])
def test_each_node_runs_its_own_engine_with_host_networking(lab, index):
    name = node(index)
    info = json.loads(node_exec(name, "docker", "info", "--format", "{{json .}}").stdout)
    assert info["Name"] == name
    fabric = lab["_meta"]["hostvars"][name]
    proc = node_exec(name, "docker", "run", "--rm", "--network", "host", "dgxspark-lab/tiny:latest",
                     "ip", "-o", "-4", "addr", "show", fabric["dgxspark_fabric_interface"])
    assert f"inet {fabric['dgxspark_fabric_ip']}/24" in proc.stdout


def test_fabric_carries_mtu_9000_unfragmented(lab):
    proc = node_exec(node(1), "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "8972", fabric_ip(2))
    assert " 0% packet loss" in proc.stdout
    too_big = node_exec(node(1), "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "9001", fabric_ip(2), check=False)
    assert too_big.returncode != 0


def test_nodes_do_not_trust_each_other(lab):
    proc = node_exec(node(1), "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "StrictHostKeyChecking=no",
                     "-o", "UserKnownHostsFile=/dev/null", fabric_ip(2), "true", check=False)
    assert proc.returncode == 255 and "Permission denied" in proc.stderr


def test_nvidia_smi_stand_in_formats(lab):
    assert node_exec(node(1), "nvidia-smi", "--query-gpu=name,memory.total",
                     "--format=csv,noheader").stdout == "NVIDIA GB10, [N/A]\n"
    assert node_exec(node(1), "nvidia-smi", "--query-gpu=name,memory.total",
                     "--format=csv").stdout.splitlines()[0] == "name, memory.total [MiB]"
    table = node_exec(node(1), "nvidia-smi").stdout
    assert "NVIDIA GB10" in table and "Not Supported" in table


def test_deploy_preflight_prints_every_node(lab):
    proc = preflight()
    assert proc.returncode == 0, proc.stdout[-3000:]
    for index in (1, 2):
        line = next(line for line in proc.stdout.splitlines() if f"{node(index)} (pair1" in line)
        assert "GPU NVIDIA GB10 x1" in line
    flat = " ".join(proc.stdout.split())
    assert f"fabric enp1s0f1np1 {fabric_ip(1)} MTU 9000" in flat
    assert f"fabric enP2p1s0f1np1 {fabric_ip(2)} MTU 9000" in flat
    assert "Docker 20.10" in flat
    assert "changed=0" in proc.stdout and "failed=0" in proc.stdout


def test_preflight_names_the_node_without_a_gpu(lab):
    node_exec(node(2), "sh", "-c", "mkdir -p /etc/dgxspark-lab && echo 0 > /etc/dgxspark-lab/gpus")
    try:
        proc = preflight()
    finally:
        node_exec(node(2), "rm", "-f", "/etc/dgxspark-lab/gpus")
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert f"{node(2)}: nvidia-smi must report 1 GPU(s)" in flat and "No devices were found" in flat
    assert f"{node(1)}: nvidia-smi" not in flat


def test_fleet_validation_refuses_duplicate_fabric_ips(lab):
    proc = preflight("-e", '{"dgxspark_fabric_ip": "%s"}' % fabric_ip(89))
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert f"pair pair1: host {node(2)} has fabric IP {fabric_ip(89)}, which {node(1)} already uses" in flat
    assert "TASK [dgxspark.vllm.preflight : Ask the Docker engine" not in proc.stdout  # nothing ran on the nodes


def test_preflight_names_the_node_with_a_wrong_fabric_ip(lab, tmp_path):
    override = tmp_path / "override.yml"
    override.write_text("all:\n  children:\n    spark_pairs:\n      children:\n        pair1:\n          hosts:\n"
                        f"            {node(2)}:\n              dgxspark_fabric_ip: {fabric_ip(89)}\n")
    proc = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "-i", str(override),
                PREFLIGHT], check=False, env=ansible_env())
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert (f"{node(2)}: the fabric interface enP2p1s0f1np1 has {fabric_ip(2)}, but the inventory says "
            f"dgxspark_fabric_ip={fabric_ip(89)}") in flat
    assert f"{node(1)}: the fabric interface" not in flat


def test_lab_up_and_down_leave_nothing_behind(tmp_path):
    """A separate one-node lab (own prefix, subnets and inventory) is created and removed; nothing labelled stays."""
    env = dict(os.environ, DGXSPARK_LAB_PREFIX="ltest", DGXSPARK_LAB_MGMT_SUBNET="192.168.241.0/24",
               DGXSPARK_LAB_FABRIC_SUBNET="192.168.101.0/24", DGXSPARK_LAB_INVENTORY=str(tmp_path / "hosts.yml"))
    main_inventory = INVENTORY.read_text()
    run([*LAB, "up", "--nodes", "1", "--no-engine-images"], env=env)
    assert "ltest-1" in (tmp_path / "hosts.yml").read_text()
    assert node_exec("ltest-1", "docker", "info", "--format", "{{.Name}}").stdout.strip() == "ltest-1"
    run([*LAB, "down", "--keep-images"], env=env)  # the image tags are shared with the session lab
    for kind in ("ps -a", "network ls", "volume ls"):
        listed = run(["docker", *kind.split(), "-q", "--filter", "label=org.dgxspark.lab.prefix=ltest"]).stdout
        assert listed.strip() == "", f"docker {kind} still lists lab objects: {listed}"
    assert not (tmp_path / "hosts.yml").exists()
    # The session's lab is untouched: same inventory, and Ansible still reaches it with its host keys.
    assert INVENTORY.read_text() == main_inventory
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), "all", "-m", "ansible.builtin.ping"], env=ansible_env())
    assert proc.stdout.count("SUCCESS") == 2
