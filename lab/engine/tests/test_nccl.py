"""NCCL stand-in: interface selection rules (NCCL_SOCKET_IFNAME), IB detection, the silent hang."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from enginekit import Proc, flavour_env, free_port, vllm_cmd

IFACES = [("lo", "127.0.0.1"), ("eth0", "192.168.240.11"), ("docker0", "172.17.0.1"),
          ("enp1s0f1np1", "192.168.100.11"), ("enP2p1s0f1np1", "192.168.100.12")]


@pytest.fixture
def nccl(trees, monkeypatch):
    monkeypatch.syspath_prepend(str(trees["0.17"]))
    for mod in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, mod)
    from vllm.distributed import lab_nccl

    return lab_nccl


@pytest.mark.parametrize("spec,expected", [
    ("enp1s0f1np1", ["enp1s0f1np1"]),
    ("enp", ["enp1s0f1np1"]),                       # prefix match
    ("en", ["enp1s0f1np1", "enP2p1s0f1np1"]),
    ("=enp1s0f1np", []),                            # '=' means exact
    ("=enP2p1s0f1np1", ["enP2p1s0f1np1"]),
    ("^lo,docker,eth", ["enp1s0f1np1", "enP2p1s0f1np1"]),  # '^' excludes
    ("^=enp1s0f1np1", ["lo", "eth0", "docker0", "enP2p1s0f1np1"]),
    ("eth0,enP2", ["eth0", "enP2p1s0f1np1"]),
    ("enp1s0f1np1:5000", ["enp1s0f1np1"]),
    ("ib", []),
])
def test_socket_ifname_rules(nccl, spec, expected):
    found = nccl.find_interfaces({"NCCL_SOCKET_IFNAME": spec}, IFACES)
    assert [n for n, _ in found] == expected


def test_default_interface_order(nccl):
    assert nccl.find_interfaces({}, IFACES)[0] == ("eth0", "192.168.240.11")
    assert nccl.find_interfaces({}, [("lo", "127.0.0.1"), ("docker0", "172.17.0.1")])[0][0] == "docker0"
    assert nccl.find_interfaces({}, [("lo", "127.0.0.1")]) == [("lo", "127.0.0.1")]
    assert nccl.find_interfaces({}, [("lo", "127.0.0.1"), ("ib0", "10.0.0.1"), ("eth0", "10.1.0.1")])[0][0] == "ib0"


def test_real_interfaces_are_listed(nccl):
    names = dict(nccl.list_ipv4_interfaces())
    assert names.get("lo") == "127.0.0.1"


def test_ib_transport_detection(nccl, tmp_path):
    root = tmp_path / "infiniband"
    assert nccl.ib_devices({"NCCL_IB_DISABLE": "0"}, root) == []          # no sysfs dir: sockets
    for dev in ("rocep1s0f1", "roceP2p1s0f1"):
        (root / dev).mkdir(parents=True)
    assert nccl.ib_devices({}, root) == ["roceP2p1s0f1", "rocep1s0f1"]
    assert nccl.ib_devices({"NCCL_IB_DISABLE": "1"}, root) == []
    assert nccl.ib_devices({"NCCL_IB_HCA": "=rocep1s0f1"}, root) == ["rocep1s0f1"]
    assert nccl.ib_devices({"NCCL_IB_HCA": "^rocep"}, root) == ["roceP2p1s0f1"]
    assert nccl.ib_devices({"NCCL_IB_HCA": "mlx5"}, root) == []


def test_missing_interface_hangs_without_error(trees, models, tmp_path, procs):
    """A worker whose NCCL_SOCKET_IFNAME names no interface never joins; nobody reports an error."""
    port, master = free_port(), free_port()
    common = ["serve", str(models["qwen35"]), "-tp", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
              "--master-port", str(master)]
    worker = Proc(vllm_cmd(*common, "--node-rank", "1", "--headless"),
                  flavour_env(trees["0.17"], NCCL_SOCKET_IFNAME="enp1s0f1np1"), tmp_path / "w.log")
    head = Proc(vllm_cmd(*common, "--node-rank", "0", "--port", str(port)),
                flavour_env(trees["0.17"], NCCL_SOCKET_IFNAME="lo"), tmp_path / "h.log")
    procs += [worker, head]
    deadline = time.monotonic() + 20
    # both sides reach the rendezvous (the head logs nothing more before it)
    while not ("Launching vLLM" in worker.output() and "Initializing a V1 LLM engine" in head.output()):
        assert time.monotonic() < deadline, head.output() + worker.output()
        time.sleep(0.1)
    before = (head.output(), worker.output())
    time.sleep(5)  # observe: nothing happens
    assert head.p.poll() is None and worker.p.poll() is None
    assert (head.output(), worker.output()) == before
    text = head.output() + worker.output()
    assert "ERROR" not in text and "Traceback" not in text and "NCCL WARN" not in text
    assert "Loading weights" not in text and "Application startup complete" not in text
    with pytest.raises(OSError):
        import socket

        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_nccl_net_ib_without_verbs_devices_fails_in_nccl_words(nccl, tmp_path, monkeypatch, capsys):
    """A container that sees the RoCE sysfs tree but was not given /dev/infiniband: with NCCL_NET=IB, NCCL has no
    net to use and stops (ncclInvalidUsage), as on a Spark; without NCCL_NET it falls back to sockets."""
    sysfs = tmp_path / "infiniband"
    (sysfs / "rocep1s0f1").mkdir(parents=True)
    dev = tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setattr(nccl, "SYS_CLASS_INFINIBAND", sysfs)
    monkeypatch.setenv("VLLM_LAB_DEV_ROOT", str(dev))
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("NCCL_NET", "IB")
    port = free_port()
    with pytest.raises(RuntimeError) as err:
        nccl.NcclComm(0, 1, f"tcp://127.0.0.1:{port}")
    assert "ncclInvalidUsage" in str(err.value) and "Failed to initialize any NET plugin" in str(err.value)
    out = capsys.readouterr().out
    assert "NCCL INFO NET/IB : No device found." in out
    assert "NCCL WARN Failed to initialize any NET plugin" in out
    # Given the devices, the same rank uses IB.
    (dev / "infiniband").mkdir()
    (dev / "infiniband" / "uverbs0").touch()
    comm = nccl.NcclComm(0, 1, f"tcp://127.0.0.1:{free_port()}")
    assert comm.transport == "IB"
    comm.shutdown()
    # Without NCCL_NET, no verbs device means sockets.
    (dev / "infiniband" / "uverbs0").unlink()
    monkeypatch.delenv("NCCL_NET")
    comm = nccl.NcclComm(0, 1, f"tcp://127.0.0.1:{free_port()}")
    assert comm.transport == "Socket"
    comm.shutdown()


@pytest.mark.parametrize("version,graphs,cross,hangs", [
    ("2.28.9", True, True, True),       # vLLM issue 52504: CUDA graphs across nodes deadlock
    ("2.29.2", True, True, True),
    ("2.28.9", False, True, False),     # eager mode (--enforce-eager) is the workaround
    ("2.28.9", True, False, False),     # ranks on one node
    ("2.30.4", True, True, False),      # the fix
    ("2.27.5", True, True, False),
])
def test_graph_deadlock_of_nccl_2_28_9_across_nodes(nccl, version, graphs, cross, hangs):
    assert nccl.graph_deadlock(version, graphs, cross) is hangs


def test_nccl_version_is_the_installed_pip_nccl(nccl, monkeypatch, tmp_path):
    monkeypatch.delenv("VLLM_LAB_NCCL_VERSION", raising=False)
    assert nccl.nccl_version() == "2.28.9"  # no pip NCCL on the path: the flavour's
    site = tmp_path / "site"
    (site / "nvidia_nccl_cu13-2.30.4.dist-info").mkdir(parents=True)
    (site / "nvidia_nccl_cu13-2.30.4.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: 2.30.4\n")
    monkeypatch.syspath_prepend(str(site))
    assert nccl.nccl_version() == "2.30.4"
