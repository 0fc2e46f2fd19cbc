"""Both rails: a Spark's CX7 shows the cabled port as two twins, each with its own HCA, address and subnet, and
NCCL_IB_HCA lists both. The lab's faults (lab.py fault N ...) break the second twin as netplan does in the field; the
preflight must stop the cluster on them before any slow step, naming the host, the twin, the address and the fix.
Each preflight test also runs the collection as it was at 13f6075 against the same fault: its preflight passed (it
pinged and compared the first twin only), which is the field failure these tests model. The last tests show what the
engines then met: the lab's stand-in NCCL, with each node's NCCL_IB_HCA as the collection computes it, fails its init
in NCCL's words over the broken twin."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

import pytest

from labkit import (BIN, INVENTORY, LAB, REPO, ansible_env, collection_as_it_was, fabric2_ip, fabric_ip, node, node_exec,
                    parse_adhoc, run)

PREFLIGHT = "tests/lab/playbooks/preflight.yml"
TWIN = "enP2p1s0f1np1"
AS_IT_WAS_RAILS = "13f6075"  # the collection before both rails were checked


def preflight(root=REPO, env=None):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(root / PREFLIGHT)], check=False,
               env=env or ansible_env())


@contextlib.contextmanager
def fault(index, kind):
    run([*LAB, "fault", str(index), kind])
    try:
        yield
    finally:
        run([*LAB, "fault", str(index), "clear"])
        assert f"inet {fabric2_ip(index)}/" in node_exec(node(index), "ip", "-o", "-4", "addr", "show", TWIN).stdout


def flat(proc):
    return " ".join(proc.stdout.split())


def assert_stopped_before_the_slow_steps(proc):
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert proc.stdout.count("failed=1") == 2, proc.stdout[-3000:]  # every member of the cluster stops
    # Before node_facts (the engine, GPUs, pings) and anything after it.
    assert "TASK [dgxspark.vllm.preflight : Read the engine, GPUs" not in proc.stdout, proc.stdout[-3000:]


def test_field_second_twin_without_address_is_found_by_preflight(lab, tmp_path):
    old_root, old_env = collection_as_it_was(tmp_path, commit=AS_IT_WAS_RAILS)
    with fault(2, "twin-no-address"):
        assert TWIN not in " ".join(re.findall(r"\d+: (\S+)\s+inet ", node_exec(node(2), "ip", "-o", "-4", "addr").stdout))
        was = preflight(old_root, old_env)
        now = preflight()
    # The field: 13f6075's preflight passed this pair (a warning at most); NCCL then failed at the engine's init.
    assert was.returncode == 0, was.stdout[-3000:]
    assert_stopped_before_the_slow_steps(now)
    text = flat(now)
    for index in (1, 2):
        assert (f"{node(index)}: cluster pair1: {node(2)} has 1 usable fabric rail(s) (enp1s0f1np1 {fabric_ip(2)}/28) "
                f"but {node(1)} has 2 (enp1s0f1np1 {fabric_ip(1)}/28, {TWIN} {fabric2_ip(1)}/28): {node(2)}'s twin "
                f"{TWIN} (roceP2p1s0f1) is up on the cable but it has no IPv4 address") in text, text[-3000:]
    prefix = fabric2_ip(1).rsplit(".", 1)[0]
    assert (f"Fix: give {node(2)}'s {TWIN} an address in {prefix}.0/28 (the subnet of {node(1)}'s {TWIN} "
            f"{fabric2_ip(1)}/28), in /etc/netplan/40-cx7.yaml, then `sudo netplan apply` on {node(2)}") in text


def test_field_second_twin_on_wrong_subnet_is_found_by_preflight(lab, tmp_path):
    old_root, old_env = collection_as_it_was(tmp_path, commit=AS_IT_WAS_RAILS)
    with fault(2, "twin-wrong-subnet"):
        moved = node_exec(node(2), "ip", "-o", "-4", "addr", "show", TWIN).stdout.split()
        wrong = moved[moved.index("inet") + 1]
        assert wrong.split("/")[0] != fabric2_ip(2)
        was = preflight(old_root, old_env)
        now = preflight()
    assert was.returncode == 0, was.stdout[-3000:]
    assert_stopped_before_the_slow_steps(now)
    text = flat(now)
    for index in (1, 2):
        assert (f"{node(index)}: cluster pair1: fabric rail 2 is not on one subnet: {node(1)} {TWIN} "
                f"{fabric2_ip(1)}/28 (subnet {fabric2_ip(1).rsplit('.', 1)[0]}.0/28), {node(2)} {TWIN} {wrong} "
                "(subnet ") in text, text[-3000:]
    assert "Fix: put rail 2 (enP2p1s0f1np1) of every node on one subnet" in text


def test_both_twins_of_every_member_are_pinged_with_df_at_the_fabric_mtu(lab):
    """A healthy pair: every node pings its peer on each twin, from that twin, and passes."""
    proc = run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / PREFLIGHT), "-v"], check=False,
               env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    for peer, source in ((2, 1), (1, 2)):
        for ifname, address in (("enp1s0f1np1", fabric_ip(peer)), (TWIN, fabric2_ip(peer))):
            pattern = (rf'"interface": "{ifname}",\s*"output": "[^"]*received, 0% packet loss[^"]*",\s*"peer": '
                       rf'"{node(peer)}",\s*"rail": \d,\s*"rc": 0,\s*"target": "{re.escape(address)}"')
            assert re.search(pattern, proc.stdout), (source, ifname, proc.stdout[-4000:])


# ----------------------------------------------------------------------------- what NCCL then does on these nodes
RANK = """import sys
from vllm.distributed.lab_nccl import NcclComm
try:
    comm = NcclComm(int(sys.argv[1]), 2, sys.argv[2])
except RuntimeError as exc:
    print(f"RuntimeError: {exc}", flush=True)
    sys.exit(3)
print("INIT OK", flush=True)
if comm.rank == 0:
    comm.shutdown()
"""


@pytest.fixture(scope="module")
def stand_in_nccl(lab, tmp_path_factory):
    """The lab engine's NCCL (lab/engine) on both nodes, run by the nodes' own python3: in the node's network
    namespace and with its RoCE tree, as an engine container with --network host and the verbs devices sees them."""
    tree = tmp_path_factory.mktemp("engine") / "tree"
    run([sys.executable, str(REPO / "lab" / "engine" / "build_wheel.py"), "--flavour", "0.17", "--tree", str(tree)])
    for index in (1, 2):
        node_exec(node(index), "rm", "-rf", "/tmp/rails-nccl")
        run(["docker", "cp", str(tree), f"{node(index)}:/tmp/rails-nccl"])
        # an image with the verbs libraries and the mlx5 provider (the lab's engine images have them)
        node_exec(node(index), "sh", "-c", "d=/tmp/rails-nccl-libs/usr/lib/x86_64-linux-gnu; mkdir -p $d/libibverbs && "
                  "touch $d/libibverbs.so.1 $d/libibverbs/libmlx5-rdmav34.so")
    return "/tmp/rails-nccl"


def nccl_env(index):
    """Node INDEX's NCCL environment as the collection computes it (dgxspark.vllm.rdma_facts), for the engines."""
    proc = run([str(BIN / "ansible"), "-i", str(INVENTORY), node(index), "-m", "dgxspark.vllm.rdma_facts"],
               env=ansible_env(ANSIBLE_CALLBACK_RESULT_FORMAT="json"))
    env = parse_adhoc(proc.stdout)["env"]
    return {key: env[key] for key in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_NET") if key in env}


def nccl_init(path):
    """Rank 0 on node 1 and rank 1 on node 2, each with its node's NCCL environment: (rank 0's output, rank 1's)."""
    init = f"tcp://{fabric_ip(1)}:{29500 + os.getpid() % 400}"
    jobs = []
    for rank, index in ((0, 1), (1, 2)):
        env = dict(nccl_env(index), NCCL_DEBUG="INFO", PYTHONPATH=path, VLLM_LAB_LIB_ROOT="/tmp/rails-nccl-libs")
        argv = ["docker", "exec", *[f"-e{k}={v}" for k, v in env.items()], node(index), "python3", "-c", RANK,
                str(rank), init]
        jobs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return [" ".join(job.communicate(timeout=90)[0].split()) for job in jobs]


def test_both_twins_carry_the_stand_in_nccl_on_a_healthy_pair(stand_in_nccl):
    head, worker = nccl_init(stand_in_nccl)
    assert "INIT OK" in head and "INIT OK" in worker, (head, worker)
    for twin, net in (("rocep1s0f1", fabric_ip), ("roceP2p1s0f1", fabric2_ip)):
        assert f"NET/IB : {twin} ({net(2)}) connected to {twin} ({net(1)})" in worker, worker


@pytest.mark.parametrize("kind", ["twin-no-address", "twin-wrong-subnet"])
def test_field_second_twin_fault_fails_nccl_init_in_nccl_words(stand_in_nccl, kind):
    """What the engines met after 13f6075's preflight let the pair through: node 2's NCCL (its NCCL_IB_HCA as the
    collection computes it) cannot move the queue pair of a channel to RTR towards node 1's second twin."""
    with fault(2, kind):
        head, worker = nccl_init(stand_in_nccl)
    assert "INIT OK" not in worker and "INIT OK" not in head, (head, worker)
    assert "NCCL WARN Call to ibv_modify_qp failed with 101 Network is unreachable" in worker, worker
    assert f"remote GID ::ffff:{fabric2_ip(1)}" in worker, worker
    assert "ncclSystemError" in worker and "ncclRemoteError" in head, (head, worker)
