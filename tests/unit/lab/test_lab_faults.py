"""lab/lab.py's fabric faults (lab.py fault N ...): the wrong subnet of a twin is one no pair of the lab uses."""

from __future__ import annotations

import importlib.util
import ipaddress
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_a_twin_on_the_wrong_subnet_is_outside_every_pairs_block_and_inside_the_labs_own_24(monkeypatch, tmp_path):
    for key in ("PYTEST_XDIST_WORKER", "DGXSPARK_LAB_PREFIX", "DGXSPARK_LAB_FABRIC_SUBNET", "DGXSPARK_LAB_FABRIC2_SUBNET"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DGXSPARK_LAB_INVENTORY", str(tmp_path / "hosts.yml"))
    spec = importlib.util.spec_from_file_location("lab_faults_under_test", REPO / "lab" / "lab.py")
    lab = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "lab_faults_under_test", lab)
    spec.loader.exec_module(lab)
    assert set(lab.FAULTS) == {"twin-no-address", "twin-wrong-subnet", "clear"}
    blocks = [ipaddress.ip_network(lab.fabric_nets(pair, "pair")[1][1]) for pair in range(1, lab.MAX_NODES // 2 + 1)]
    moved = []
    for i in range(1, lab.MAX_NODES + 1):
        wrong = ipaddress.ip_interface(lab.twin_fault_address(i))
        assert not any(wrong.ip in block for block in blocks), (i, wrong)
        assert wrong.ip in ipaddress.ip_network(lab.FABRIC2_SUBNET)  # no address outside the lab's own subnets
        assert wrong.network.prefixlen == 28
        moved.append(wrong.ip)
    assert len(set(moved[:2])) == 2  # the two nodes of a pair stay distinct
