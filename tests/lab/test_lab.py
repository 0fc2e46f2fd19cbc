"""The lab itself: real engines, SSH, a LAN and a point-to-point fabric as a Spark pair has, and the preflight against it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import pytest

from labkit import (BIN, FABRIC_IFNAMES, INVENTORY, LAB, REPO, ansible_env, collection_as_it_was, fabric2_ip, fabric_if,
                    fabric_ip, mgmt_ip, node, node_exec, node_run, run)


# The preflight stage of deploy_qwen35.yml, alone (the whole deployment is tested in test_lab_deploy.py).
PREFLIGHT = str(REPO / "tests" / "lab" / "playbooks" / "preflight.yml")
# A node number no lab has, whose fabric address is still an IP address (fabric_ip(89) was x.x.x.715, which the
# fleet's first task now refuses as no IP address before the check these tests are about).
UNUSED = 29


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
    # NVIDIA's netplan: the same interface name on both nodes, the LAN address as ansible_host.
    assert meta[node(1)]["dgxspark_fabric_interface"] == "enp1s0f1np1"
    assert meta[node(2)]["dgxspark_fabric_interface"] == "enp1s0f1np1"
    assert meta[node(1)]["ansible_host"] == mgmt_ip(1) and meta[node(2)]["ansible_host"] == mgmt_ip(2)


@pytest.mark.parametrize("index", [1, 2])
def test_each_node_runs_its_own_engine_with_host_networking(lab, index):
    name = node(index)
    info = json.loads(node_exec(name, "docker", "info", "--format", "{{json .}}").stdout)
    assert info["Name"] == name
    fabric = lab["_meta"]["hostvars"][name]
    proc = node_run(name, "--network", "host", "dgxspark-lab/tiny:latest",
                    "ip", "-o", "-4", "addr", "show", fabric["dgxspark_fabric_interface"])
    assert f"inet {fabric['dgxspark_fabric_ip']}/28" in proc.stdout, proc


@pytest.mark.parametrize("index", [1, 2])
def test_every_node_has_the_twin_netdevs_of_nvidia_netplan(lab, index):
    """cx7-netplan.yaml: enp1s0f1np1 on 192.168.100.x and its twin enP2p1s0f1np1 on 192.168.101.x, on every node."""
    for ifname, address in zip(FABRIC_IFNAMES, (fabric_ip(index), fabric2_ip(index))):
        assert f"inet {address}/28" in node_exec(node(index), "ip", "-o", "-4", "addr", "show", ifname).stdout


def test_fabric_is_point_to_point_controller_has_no_route(lab):
    """The fabric is a QSFP cable between the two Sparks: they reach each other on both twins, the controller (this
    machine, on the LAN) reaches neither, while it does reach the nodes' LAN addresses."""
    for address in (fabric_ip(2), fabric2_ip(2)):
        assert " 0% packet loss" in node_exec(node(1), "ping", "-c", "1", "-W", "2", address).stdout
    for address in (fabric_ip(1), fabric_ip(2), fabric2_ip(1), fabric2_ip(2)):
        route = run(["ip", "route", "get", address], check=False)
        assert route.returncode != 0 and "No route to host" in route.stderr, route.stdout + route.stderr
        with pytest.raises(OSError) as refused, contextlib.closing(socket.socket()) as sock:
            sock.settimeout(3)
            sock.connect((address, 22))
        assert refused.value.errno == errno.EHOSTUNREACH, refused.value
    with contextlib.closing(socket.create_connection((mgmt_ip(1), 22), timeout=5)) as sock:
        assert sock.recv(64).startswith(b"SSH-")


def test_fabric_comes_up_at_nvidia_netplan_mtu_1500(lab):
    """NVIDIA's netplan sets no MTU: 1500 bytes pass with DF set, one more does not."""
    proc = node_exec(node(1), "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "1472", fabric_ip(2))
    assert " 0% packet loss" in proc.stdout
    too_big = node_exec(node(1), "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "1473", fabric_ip(2), check=False)
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
    assert f"fabric enp1s0f1np1 {fabric_ip(1)} MTU 1500" in flat
    assert f"fabric enp1s0f1np1 {fabric_ip(2)} MTU 1500" in flat
    assert "Docker 26.1" in flat  # every lab node: Debian 13's Docker 26 (lab.py DEFAULT_ENGINE)
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


@contextlib.contextmanager
def without_the_docker_sdk(index):
    """Node INDEX as DGX OS leaves it: its python3 does not import the Docker SDK (the lab's nodes have python3-docker;
    its files are moved aside, and back afterwards)."""
    site = "/usr/lib/python3/dist-packages"
    node_exec(node(index), "mv", f"{site}/docker", f"{site}/docker.lab-hidden")
    try:
        yield
    finally:
        node_exec(node(index), "mv", f"{site}/docker.lab-hidden", f"{site}/docker")


def test_preflight_stops_a_node_without_the_python_docker_sdk_naming_the_command(lab):
    """Field (issue 33, 1): DGX OS ships no python3-docker, which most modules import. At 13f6075 the preflight passed
    and the first module that needed it failed under no_log ("the output has been hidden"); with
    dgxspark_node_packages=check the preflight now stops that node, naming its python and the command."""
    with without_the_docker_sdk(2):
        proc = preflight("-e", "dgxspark_node_packages=check")
    assert proc.returncode != 0, proc.stdout[-3000:]
    flat = " ".join(proc.stdout.split())
    assert (f"{node(2)}: the Python that runs the collection's modules here (/usr/bin/python3) does not import the "
            "Docker SDK for Python") in flat, flat[-3000:]
    assert "Install it: sudo apt-get install -y python3-docker" in flat
    assert f"{node(1)}: the Python that runs" not in flat
    assert "output has been hidden" not in proc.stdout


def test_fleet_validation_refuses_duplicate_fabric_ips(lab):
    proc = preflight("-e", '{"dgxspark_fabric_ip": "%s"}' % fabric_ip(UNUSED))
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert (f"cluster pair1: host {node(2)} has dgxspark_fabric_ip {fabric_ip(UNUSED)}, which {node(1)} (cluster pair1) "
            "already uses" in flat), flat[-3000:]
    assert proc.stdout.count("failed=1") == 2, proc.stdout[-3000:]
    # Nothing ran on the nodes: the fleet is the first task, and it runs on the controller.
    assert "TASK [dgxspark.vllm.preflight : Find the fabric interface" not in proc.stdout


def test_preflight_names_the_node_with_a_wrong_fabric_ip(lab, tmp_path):
    override = tmp_path / "override.yml"
    override.write_text("all:\n  children:\n    spark_pairs:\n      children:\n        pair1:\n          hosts:\n"
                        f"            {node(2)}:\n              dgxspark_fabric_ip: {fabric_ip(UNUSED)}\n")
    proc = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "-i", str(override),
                PREFLIGHT], check=False, env=ansible_env())
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert (f"{node(2)}: the fabric interface enp1s0f1np1 has {fabric_ip(2)}, but the inventory says "
            f"dgxspark_fabric_ip={fabric_ip(UNUSED)}") in flat
    assert f"{node(1)}: the fabric interface" not in flat


@contextlib.contextmanager
def fabric_mtu(mtus):
    """Inside the block, node i's fabric link has MTU mtus[i] (as netplan would set it on that node alone); the lab's
    cable (the bridge) stays at 1500."""
    try:
        for index, mtu in mtus.items():
            node_exec(node(index), "ip", "link", "set", "dev", fabric_if(index), "mtu", str(mtu))
        yield
    finally:
        for index in mtus:
            node_exec(node(index), "ip", "link", "set", "dev", fabric_if(index), "mtu", "1500")


def test_preflight_as_the_collection_was_stops_both_nodes_at_nvidia_netplan_mtu_1500(lab, tmp_path):
    """The collection as it was (its own preflight playbook and roles) against the lab's fabric at 1500, the MTU
    NVIDIA's netplan leaves: it refused a pair that serves."""
    root, env = collection_as_it_was(tmp_path)
    proc = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(root / "tests/lab/playbooks/preflight.yml")],
               check=False, env=env)
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    for index in (1, 2):
        assert f"fatal: [{node(index)}]: FAILED!" in proc.stdout, proc.stdout[-3000:]
    assert (f"rdma_facts: fabric interface {fabric_if(1)} has MTU 1500, lower than the expected 9000 (option mtu)"
            in flat), flat[-3000:]


def test_nvidia_netplan_mtu_1500_warns_how_to_set_9000(lab):
    proc = preflight()
    assert proc.returncode == 0, proc.stdout[-3000:]
    flat = " ".join((proc.stdout + proc.stderr).split())
    for index in (1, 2):
        assert (f"fabric interface {fabric_if(index)} has MTU 1500 (NVIDIA's netplan sets none)") in flat, flat[-3000:]
    assert "mtu: 9000" in flat and "on both nodes of the pair" in flat


def test_mtu_mismatch_stops_pair_naming_both_nodes(lab):
    with fabric_mtu({2: 9000}):
        proc = preflight()
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    for index in (1, 2):
        assert (f"{node(index)}: the two ends of pair1's fabric have different MTUs: {node(1)} {fabric_if(1)} 1500, "
                f"{node(2)} {fabric_if(2)} 9000") in flat, flat[-3000:]
    assert proc.stdout.count("failed=1") == 2, proc.stdout[-3000:]
    assert "TASK [dgxspark.vllm.preflight : Read the engine, GPUs" not in proc.stdout


def test_df_pings_failing_at_the_configured_mtu_stop_the_pair_naming_both_nodes(lab):
    """Both nodes say 9000, the path between them carries 1500: the pings with DF set at 9000 get no answer."""
    with fabric_mtu({1: 9000, 2: 9000}):
        proc = preflight()
    assert proc.returncode != 0
    flat = " ".join(proc.stdout.split())
    assert (f"{node(1)}: no answer over the fabric ({fabric_if(1)}, MTU 9000, DF set) from {fabric_ip(2)} ({node(2)}"
            in flat), flat[-3000:]
    assert (f"{node(2)}: no answer over the fabric ({fabric_if(2)}, MTU 9000, DF set) from {fabric_ip(1)} ({node(1)}"
            in flat), flat[-3000:]


def test_per_host_interface_names_cabled_on_different_ports(lab):
    """Node 2 cabled on the CX7's other port: its twins are enp1s0f0np0/enP2p1s0f0np0, and the inventory names them
    per host (dgxspark_fabric_interface); the preflight finds each node's own interface."""
    run([*LAB, "cable", "2", "--port", "0"])
    try:
        hosts = json.loads(run([str(BIN / "ansible-inventory"), "-i", str(INVENTORY), "--list"],
                               env=ansible_env()).stdout)["_meta"]["hostvars"]
        assert hosts[node(1)]["dgxspark_fabric_interface"] == "enp1s0f1np1"
        assert hosts[node(2)]["dgxspark_fabric_interface"] == "enp1s0f0np0"
        assert f"inet {fabric_ip(2)}/28" in node_exec(node(2), "ip", "-o", "-4", "addr", "show", "enp1s0f0np0").stdout
        twin = node_exec(node(2), "ip", "-o", "-4", "addr", "show", "enP2p1s0f0np0").stdout
        assert f"inet {fabric2_ip(2)}/28" in twin
        proc = preflight()
        assert proc.returncode == 0, proc.stdout[-3000:]
        flat = " ".join(proc.stdout.split())
        assert f"fabric enp1s0f1np1 {fabric_ip(1)} MTU 1500" in flat
        assert f"fabric enp1s0f0np0 {fabric_ip(2)} MTU 1500" in flat
    finally:
        run([*LAB, "cable", "2", "--port", "1"])
    assert "enp1s0f1np1" in node_exec(node(2), "ls", "/sys/class/net").stdout.split()


def test_a_custom_fleet_group_is_followed_by_preflight_and_teardown(lab, tmp_path):
    """Every role's *_fleet_group follows dgxspark_fleet_group: an inventory whose fleet group is not spark_pairs
    preflights and tears down (serving engines, Ray and the transfer trust) with only dgxspark_fleet_group set."""
    (tmp_path / "group_vars").mkdir()
    for source in (INVENTORY.parent / "group_vars").iterdir():
        (tmp_path / "group_vars" / source.name).write_text(source.read_text())
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY.read_text().replace("    spark_pairs:\n", "    my_fleet:\n"))
    playbook = tmp_path / "preflight.yml"
    playbook.write_text("- name: Preflight\n  hosts: \"{{ dgxspark_fleet_group }}\"\n  gather_facts: false\n"
                        "  roles:\n    - role: dgxspark.vllm.preflight\n")
    fleet = ["-i", str(inventory), "-e", "dgxspark_fleet_group=my_fleet"]
    listed = json.loads(run([str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"], env=ansible_env()).stdout)
    assert "spark_pairs" not in listed and listed["my_fleet"]["children"] == ["pair1"]
    proc = run([str(BIN / "ansible-playbook"), *fleet, str(playbook)], check=False, env=ansible_env())
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"{node(1)} (pair1 head): GPU NVIDIA GB10 x1" in proc.stdout
    assert f"{node(2)} (pair1 worker): GPU NVIDIA GB10 x1" in proc.stdout
    proc = run([str(BIN / "ansible-playbook"), *fleet, str(REPO / "playbooks" / "teardown.yml"),
                "-e", "teardown_trust=true"], check=False, env=ansible_env())
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed=0" in proc.stdout and f"{node(2)}" in proc.stdout


def test_lab_up_and_down_leave_nothing_behind(tmp_path):
    """A separate one-node lab (own prefix, subnets and inventory) is created and removed; nothing labelled stays.
    Its fabric is asked for MTU 9000 (lab.py up --fabric-mtu 9000)."""
    # Its subnets can be moved (DGXSPARK_LAB_LTEST_*_SUBNET) when other labs on the machine use the defaults.
    env = dict(os.environ, DGXSPARK_LAB_PREFIX="ltest",
               DGXSPARK_LAB_MGMT_SUBNET=os.environ.get("DGXSPARK_LAB_LTEST_MGMT_SUBNET", "192.168.241.0/24"),
               DGXSPARK_LAB_FABRIC_SUBNET=os.environ.get("DGXSPARK_LAB_LTEST_FABRIC_SUBNET", "192.168.102.0/24"),
               DGXSPARK_LAB_INVENTORY=str(tmp_path / "hosts.yml"))
    env.pop("DGXSPARK_LAB_FABRIC2_SUBNET", None)
    main_inventory = INVENTORY.read_text()
    run([*LAB, "up", "--nodes", "1", "--no-engine-images", "--fabric-mtu", "9000"], env=env)
    assert "ltest-1" in (tmp_path / "hosts.yml").read_text()
    assert node_exec("ltest-1", "docker", "info", "--format", "{{.Name}}").stdout.strip() == "ltest-1"
    for ifname in FABRIC_IFNAMES:
        assert node_exec("ltest-1", "cat", f"/sys/class/net/{ifname}/mtu").stdout.strip() == "9000"
    # A node container that stopped (the machine rebooted, its dockerd restarted) is made anew by the next `up`:
    # e5398c5 tried to wire the stopped container and failed ("is not running"), and so did every lab test after it.
    run(["docker", "stop", "-t", "1", "ltest-1"])
    again = run([*LAB, "up", "--nodes", "1", "--no-engine-images", "--fabric-mtu", "9000"], env=env)
    assert "ltest-1 is not running: made anew" in again.stderr + again.stdout
    assert node_exec("ltest-1", "docker", "info", "--format", "{{.Name}}").stdout.strip() == "ltest-1"
    run([*LAB, "down", "--keep-images"], env=env)  # the image tags are shared with the session lab
    for kind in ("ps -a", "network ls", "volume ls"):
        listed = run(["docker", *kind.split(), "-q", "--filter", "label=org.dgxspark.lab.prefix=ltest"]).stdout
        assert listed.strip() == "", f"docker {kind} still lists lab objects: {listed}"
    assert not (tmp_path / "hosts.yml").exists()
    ltest_fabric = env["DGXSPARK_LAB_FABRIC_SUBNET"].rsplit(".", 1)[0] + "."
    assert ltest_fabric not in run(["ip", "route"]).stdout  # its fence went with it
    # The session's lab is untouched: same inventory, and Ansible still reaches it with its host keys.
    assert INVENTORY.read_text() == main_inventory
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), "all", "-m", "ansible.builtin.ping"], env=ansible_env())
    assert proc.stdout.count("SUCCESS") == 2
