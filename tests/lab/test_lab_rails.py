"""Both rails: a Spark's CX7 shows the cabled port as two twins, each with its own HCA, address and subnet, and
NCCL_IB_HCA lists both. The lab's faults (lab.py fault N ...) break the second twin as netplan does in the field; the
preflight must stop the cluster on them before any slow step, naming the host, the twin, the address and the fix.
Each test also runs the collection as it was at 13f6075 against the same fault: its preflight passed (it pinged and
compared the first twin only), which is the field failure these tests model."""

from __future__ import annotations

import contextlib
import re

from labkit import BIN, INVENTORY, LAB, REPO, collection_as_it_was, fabric2_ip, fabric_ip, node, node_exec, run, ansible_env

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
