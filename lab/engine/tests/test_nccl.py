"""NCCL stand-in: interface selection rules (NCCL_SOCKET_IFNAME), IB detection, the silent hang."""

from __future__ import annotations

import shutil
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


def verbs_libraries(root, provider=True):
    """ROOT laid out as an image with Debian's libibverbs1 (and, with PROVIDER, ibverbs-providers' mlx5)."""
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    (lib / "libibverbs").mkdir(parents=True)
    (lib / "libibverbs.so.1.14.44.0").write_bytes(b"")
    (lib / "libibverbs.so.1").symlink_to("libibverbs.so.1.14.44.0")
    if provider:
        (lib / "libmlx5.so.1.24.44.0").write_bytes(b"")
        (lib / "libibverbs" / "libmlx5-rdmav34.so").symlink_to("../libmlx5.so.1.24.44.0")
    return root


@pytest.mark.parametrize("provider", [False, True])
def test_nccl_net_ib_in_an_image_without_the_verbs_libraries_fails_in_nccl_words(nccl, tmp_path, monkeypatch, capsys,
                                                                                  provider):
    """An image without libibverbs.so.1 (or with it but without the mlx5 provider, ibverbs-providers), started with the
    verbs devices on an RDMA fabric: NCCL finds no IB device and, with NCCL_NET=IB, stops as on a Spark."""
    sysfs = tmp_path / "infiniband"
    (sysfs / "rocep1s0f1").mkdir(parents=True)
    dev = tmp_path / "dev"
    (dev / "infiniband").mkdir(parents=True)
    (dev / "infiniband" / "uverbs0").touch()
    root = tmp_path / "root"
    if provider:
        verbs_libraries(root, provider=False)
    else:
        root.mkdir()
    monkeypatch.setattr(nccl, "SYS_CLASS_INFINIBAND", sysfs)
    monkeypatch.setenv("VLLM_LAB_DEV_ROOT", str(dev))
    monkeypatch.setenv("VLLM_LAB_LIB_ROOT", str(root))
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("NCCL_NET", "IB")
    with pytest.raises(RuntimeError) as err:
        nccl.NcclComm(0, 1, f"tcp://127.0.0.1:{free_port()}")
    assert "ncclInvalidUsage" in str(err.value) and "Failed to initialize any NET plugin" in str(err.value)
    captured = capsys.readouterr()
    assert "NCCL INFO NET/IB : No device found." in captured.out
    if provider:
        assert "libibverbs: Warning: couldn't load driver 'libmlx5-rdmav34.so'" in captured.err
    else:
        assert "NCCL INFO Failed to open libibverbs.so[.1]" in captured.out
    # The same image with both libraries uses IB.
    shutil.rmtree(root)
    verbs_libraries(root)
    comm = nccl.NcclComm(0, 1, f"tcp://127.0.0.1:{free_port()}")
    assert comm.transport == "IB"
    comm.shutdown()


def test_nccl_net_ib_without_verbs_devices_fails_in_nccl_words(nccl, tmp_path, monkeypatch, capsys):
    """A container that sees the RoCE sysfs tree but was not given /dev/infiniband: with NCCL_NET=IB, NCCL has no
    net to use and stops (ncclInvalidUsage), as on a Spark; without NCCL_NET it falls back to sockets."""
    sysfs = tmp_path / "infiniband"
    (sysfs / "rocep1s0f1").mkdir(parents=True)
    dev = tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setattr(nccl, "SYS_CLASS_INFINIBAND", sysfs)
    monkeypatch.setenv("VLLM_LAB_DEV_ROOT", str(dev))
    monkeypatch.setenv("VLLM_LAB_LIB_ROOT", str(verbs_libraries(tmp_path / "root")))
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


# ----------------------------------------------------------------------------- both rails (the CX7 twins)
def _rail_tree(root, rails):
    """An /sys/class/infiniband of HCAs {name: IPv4 or None}: each with the link-local GIDs at 0/1 and, with an
    address, its IPv4-mapped GIDs at 2/3 (RoCE v1, v2), as a Spark's twins show them; the netdev is lo here."""
    for hca, ip in rails.items():
        port = root / hca / "ports" / "1"
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (port / sub).mkdir(parents=True)
        table = [("fe80:0000:0000:0000:4ebb:47ff:fe2d:0011", "IB/RoCE v1"),
                 ("fe80:0000:0000:0000:4ebb:47ff:fe2d:0011", "RoCE v2")]
        if ip:
            value = int.from_bytes(bytes(int(o) for o in ip.split(".")), "big")
            mapped = f"0000:0000:0000:0000:0000:ffff:{value >> 16:04x}:{value & 0xFFFF:04x}"
            table += [(mapped, "IB/RoCE v1"), (mapped, "RoCE v2")]
        for index in range(8):
            gid, kind = table[index] if index < len(table) else (":".join(["0000"] * 8), None)
            (port / "gids" / str(index)).write_text(gid + "\n")
            if kind:
                (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
                (port / "gid_attrs" / "ndevs" / str(index)).write_text("lo\n")
    return root


@pytest.fixture
def two_nodes(nccl, tmp_path, monkeypatch):
    """Rank 0 on node 1 and rank 1 on node 2 (threads of this process, bootstrapped on 127.0.0.1 and 127.0.0.2), each
    with an RDMA tree of its own; lo's addresses stand in for the twins, a /24 each (127.0.0.x, 127.0.1.x)."""
    dev = tmp_path / "dev"
    (dev / "infiniband").mkdir(parents=True)
    (dev / "infiniband" / "uverbs0").touch()
    lib = tmp_path / "root" / "usr" / "lib" / "x86_64-linux-gnu"  # an image with the verbs libraries and mlx5
    (lib / "libibverbs").mkdir(parents=True)
    (lib / "libibverbs.so.1").write_bytes(b"")
    (lib / "libibverbs" / "libmlx5-rdmav34.so").write_bytes(b"")
    monkeypatch.setenv("VLLM_LAB_DEV_ROOT", str(dev))
    monkeypatch.setenv("VLLM_LAB_LIB_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("NCCL_NET", "IB")
    monkeypatch.delenv("NCCL_IB_GID_INDEX", raising=False)
    monkeypatch.delenv("NCCL_IB_HCA", raising=False)
    import threading

    bootstrap = {"rank0": "127.0.0.1", "rank1": "127.0.0.2"}
    monkeypatch.setattr(nccl, "find_interfaces",
                        lambda env=None, interfaces=None: [("lo", bootstrap[threading.current_thread().name])])
    monkeypatch.setattr(nccl, "netdev_prefixlen", lambda ifname: 24)

    def run(node1, node2):
        trees = [_rail_tree(tmp_path / "node1", node1), _rail_tree(tmp_path / "node2", node2)]
        init = f"tcp://127.0.0.1:{free_port()}"
        results = {}

        def rank(r):
            try:
                results[r] = nccl.NcclComm(r, 2, init, ib_root=trees[r])
            except RuntimeError as exc:
                results[r] = exc

        threads = [threading.Thread(target=rank, args=(r,), name=f"rank{r}", daemon=True) for r in (0, 1)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(30)
        assert not any(th.is_alive() for th in threads), "init hung"
        return results[0], results[1]
    return run


NODE1 = {"rocep1s0f1": "127.0.0.11", "roceP2p1s0f1": "127.0.1.11"}


def test_both_twins_connect_when_each_is_on_its_peers_subnet(two_nodes, capsys):
    head, worker = two_nodes(NODE1, {"rocep1s0f1": "127.0.0.12", "roceP2p1s0f1": "127.0.1.12"})
    assert not isinstance(head, Exception) and not isinstance(worker, Exception), (head, worker)
    assert (head.transport, worker.transport) == ("IB", "IB")
    out = capsys.readouterr().out
    assert "NET/IB : rocep1s0f1 (127.0.0.12) connected to rocep1s0f1 (127.0.0.11)" in out
    assert "NET/IB : roceP2p1s0f1 (127.0.1.12) connected to roceP2p1s0f1 (127.0.1.11)" in out
    assert "Init COMPLETE" in out
    head.shutdown()


def test_field_second_twin_without_address_fails_nccl_init_in_nccl_words(two_nodes, capsys):
    """Node 2's netplan left its second twin without an address, and NCCL_IB_HCA still lists its HCA: the queue pair
    of that HCA has only a link-local GID, so moving it to RTR towards node 1's twin fails; both ranks stop."""
    head, worker = two_nodes(NODE1, {"rocep1s0f1": "127.0.0.12", "roceP2p1s0f1": None})
    assert isinstance(worker, RuntimeError) and isinstance(head, RuntimeError), (head, worker)
    assert "ncclSystemError: System call (e.g. socket, malloc) or external library call failed" in str(worker)
    assert ("Call to ibv_modify_qp failed with 101 Network is unreachable, on dev roceP2p1s0f1:1, curr state INIT, "
            "next state RTR, local GID index 1, local GID fe80:0000:0000:0000:4ebb:47ff:fe2d:0011, remote GID "
            "::ffff:127.0.1.11") in str(worker)
    assert "ncclRemoteError" in str(head)
    out = capsys.readouterr().out
    assert "NCCL WARN Call to ibv_modify_qp failed with 101 Network is unreachable" in out
    assert "NCCL WARN [Proxy Service 0] Failed to execute operation Connect from rank 1, retcode 2" in out
    assert "Init COMPLETE" not in out


def test_field_second_twin_dropped_from_one_nodes_nccl_ib_hca_fails_nccl_init(two_nodes):
    """The collection as it was left the unaddressed twin out of node 2's NCCL_IB_HCA only: node 1 spreads its
    channels over two HCAs, node 2 over one, and node 1's second twin meets node 2's first across subnets."""
    head, worker = two_nodes(NODE1, {"rocep1s0f1": "127.0.0.12"})
    assert isinstance(worker, RuntimeError) and isinstance(head, RuntimeError), (head, worker)
    assert ("Call to ibv_modify_qp failed with 101 Network is unreachable, on dev rocep1s0f1:1, curr state INIT, next "
            "state RTR, local GID index 3, local GID ::ffff:127.0.0.12, remote GID ::ffff:127.0.1.11") in str(worker)


def test_field_second_twin_on_wrong_subnet_fails_nccl_init_in_nccl_words(two_nodes):
    head, worker = two_nodes(NODE1, {"rocep1s0f1": "127.0.0.12", "roceP2p1s0f1": "127.0.2.12"})
    assert isinstance(worker, RuntimeError) and isinstance(head, RuntimeError), (head, worker)
    assert ("Call to ibv_modify_qp failed with 101 Network is unreachable, on dev roceP2p1s0f1:1, curr state INIT, "
            "next state RTR, local GID index 3, local GID ::ffff:127.0.2.12, remote GID ::ffff:127.0.1.11") in str(worker)
    assert "ncclRemoteError" in str(head)


def test_the_rails_follow_nccl_ib_gid_index(nccl, tmp_path, monkeypatch):
    root = _rail_tree(tmp_path / "ib", NODE1)
    monkeypatch.setattr(nccl, "netdev_prefixlen", lambda ifname: 24)
    assert nccl.ib_rail("roceP2p1s0f1", {}, root) == {
        "hca": "roceP2p1s0f1", "gid_index": 3, "gid": "::ffff:127.0.1.11", "ip": "127.0.1.11", "netdev": "lo",
        "prefixlen": 24}
    assert nccl.ib_rail("roceP2p1s0f1", {"NCCL_IB_GID_INDEX": "1"}, root)["ip"] is None
    assert nccl.rail_pairs([{"n": 1}], [{"n": 1}, {"n": 2}]) == [({"n": 1}, {"n": 1}), ({"n": 1}, {"n": 2})]
