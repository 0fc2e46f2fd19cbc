"""lab/lab.py and tests/lab/labkit.py agree on the lab's addresses and interface names (no Docker needed)."""

from __future__ import annotations

import importlib.util
import ipaddress
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def load(name, path, monkeypatch, **env):
    # PYTEST_XDIST_WORKER too: under make test labkit would otherwise pick the worker's own lab.
    for key in ("PYTEST_XDIST_WORKER", "DGXSPARK_LAB_PREFIX", "DGXSPARK_LAB_MGMT_SUBNET", "DGXSPARK_LAB_FABRIC_SUBNET",
                "DGXSPARK_LAB_FABRIC2_SUBNET", "DGXSPARK_LAB_INVENTORY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("env", [{}, {"DGXSPARK_LAB_FABRIC_SUBNET": "192.168.110.0/24"},
                                 {"DGXSPARK_LAB_FABRIC_SUBNET": "192.168.120.0/24",
                                  "DGXSPARK_LAB_FABRIC2_SUBNET": "192.168.130.0/24"}])
def test_lab_and_labkit_agree(monkeypatch, tmp_path, env):
    env = dict(env, DGXSPARK_LAB_INVENTORY=str(tmp_path / "hosts.yml"))
    lab = load("lab_under_test", REPO / "lab" / "lab.py", monkeypatch, **env)
    kit = load("labkit_under_test", REPO / "tests" / "lab" / "labkit.py", monkeypatch, **env)
    for i in range(1, lab.MAX_NODES + 1):
        mgmt, fabric, ifname = lab.node_addrs(i)
        assert (mgmt, fabric, ifname) == (kit.mgmt_ip(i), kit.fabric_ip(i), kit.fabric_if(i))
        twins = lab.node_twins(i)
        assert twins == [("enp1s0f1np1", kit.fabric_ip(i)), ("enP2p1s0f1np1", kit.fabric2_ip(i))]
        # Each address sits in its own pair's /28 of its /24, and the two nodes of a pair share it.
        for (_net, subnet), (_name, address) in zip(lab.fabric_nets(lab.pair_of(i)), twins):
            assert ipaddress.ip_address(address) in ipaddress.ip_network(subnet)
    assert lab.fabric_nets(1, "pair")[1][1] == (env.get("DGXSPARK_LAB_FABRIC2_SUBNET")
                                                or lab._next_subnet(lab.FABRIC_SUBNET)).replace(".0/24", ".0/28")
    # Pairs never overlap (Docker refuses overlapping subnets).
    nets = [ipaddress.ip_network(s) for p in range(1, lab.MAX_NODES // 2 + 1) for _n, s in lab.fabric_nets(p, "pair")]
    assert all(not a.overlaps(b) for k, a in enumerate(nets) for b in nets[k + 1:])


def test_default_subnets_are_nvidia_netplans(monkeypatch, tmp_path):
    lab = load("lab_under_test", REPO / "lab" / "lab.py", monkeypatch, DGXSPARK_LAB_INVENTORY=str(tmp_path / "h.yml"))
    assert [s for _n, s in lab.fabric_nets(1, "pair")] == ["192.168.100.0/28", "192.168.101.0/28"]
    assert [s for _n, s in lab.fabric_nets(2, "pair")] == ["192.168.100.16/28", "192.168.101.16/28"]
    assert [s for _n, s in lab.fabric_nets(2, "switch")] == ["192.168.100.0/24", "192.168.101.0/24"]
    assert lab.fabric_ifnames(0) == ("enp1s0f0np0", "enP2p1s0f0np0")
