# SPDX-License-Identifier: Apache-2.0
"""The lab's stand-in for torch.distributed + NCCL between tensor-parallel ranks.

Two stages, as in vLLM:

1. ``distributed_init_method`` (``tcp://host:port``): rank 0 hosts a small key
   store on all interfaces (torch's TCPStore does the same); the other ranks
   connect to it and fetch rank 0's "NCCL unique id" (its NCCL listen address).
2. NCCL bootstrap: every rank picks its socket interface the way NCCL does
   (``NCCL_SOCKET_IFNAME``: comma list of prefixes, ``^`` excludes, ``=`` exact;
   unset: ``ib*`` first, then anything but ``docker*``/``lo*``, then ``docker*``,
   then ``lo*``). Rank 0 listens on that interface's IPv4 address; the others
   connect to it from theirs.

Failure modes are NCCL's: no interface matching ``NCCL_SOCKET_IFNAME`` means
the rank never joins -- it waits forever without an error line (NCCL prints
``NCCL WARN Bootstrap : no socket interface found`` only with ``NCCL_DEBUG``
set), and the other ranks wait for it. An address that cannot be reached is
retried without end. After init, every decoding step is an all-reduce through
rank 0; a peer that disappears turns into NCCL's ``ncclRemoteError``, a peer
that stops answering (partition) hangs the step.

NCCL's own log lines (``NCCL INFO ...``) are printed when ``NCCL_DEBUG`` is
``INFO`` or ``TRACE`` (``WARN`` prints warnings only), like NCCL.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct
import sys
import threading
import time
from pathlib import Path

SIOCGIFADDR = 0x8915
SYS_CLASS_INFINIBAND = Path("/sys/class/infiniband")


def nccl_version() -> str:
    """The NCCL this engine runs with: the pip NCCL installed beside it (as torch loads it), else the flavour's."""
    if os.environ.get("VLLM_LAB_NCCL_VERSION"):
        return os.environ["VLLM_LAB_NCCL_VERSION"]
    from importlib import metadata

    try:
        return metadata.version("nvidia-nccl-cu13")
    except metadata.PackageNotFoundError:
        from vllm._version import __lab_nccl_version__

        return __lab_nccl_version__


# NCCL from 2.28.9 until the fix in 2.30.4 deadlocks when CUDA graphs replay collectives across nodes: the
# engine starts, answers /health, and hangs within the first requests (vLLM issue 52504). Eager mode avoids it.
GRAPH_DEADLOCK_NCCL = ((2, 28, 9), (2, 30, 4))
GRAPH_DEADLOCK_AFTER_STEPS = 2  # readiness probes of one token pass; a real request hangs


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("+")[0].split(".") if part.isdigit())


def graph_deadlock(version: str, cuda_graphs: bool, cross_node: bool) -> bool:
    """Whether this NCCL, with CUDA graphs on and ranks on different nodes, deadlocks (vLLM issue 52504)."""
    low, fixed = GRAPH_DEADLOCK_NCCL
    return cuda_graphs and cross_node and low <= _version_tuple(version) < fixed


# ----------------------------------------------------------------------------- interfaces
def list_ipv4_interfaces() -> list[tuple[str, str]]:
    """(name, IPv4 address) of every interface that has one, in kernel index order."""
    result = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in sorted(socket.if_nameindex()):
            try:
                packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address
            result.append((name, socket.inet_ntoa(packed[20:24])))
    return result


def parse_if_list(spec: str) -> tuple[list[str], bool, bool]:
    """NCCL's ``NCCL_SOCKET_IFNAME`` syntax -> (names, exclude, exact)."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    if exclude:
        spec = spec[1:]
    exact = spec.startswith("=")
    if exact:
        spec = spec[1:]
    names = []
    for item in spec.split(","):
        item = item.strip().split(":")[0]  # "eth0:port" -> "eth0"
        if item:
            names.append(item)
    return names, exclude, exact


def match_if_list(ifname: str, names: list[str], exact: bool) -> bool:
    if not names:
        return True
    return any(ifname == n if exact else ifname.startswith(n) for n in names)


def find_interfaces(env: dict | None = None, interfaces: list[tuple[str, str]] | None = None
                    ) -> list[tuple[str, str]]:
    """Interfaces NCCL would use, in its order of preference (empty: none found)."""
    env = os.environ if env is None else env
    interfaces = list_ipv4_interfaces() if interfaces is None else interfaces
    spec = env.get("NCCL_SOCKET_IFNAME")
    if spec:
        names, exclude, exact = parse_if_list(spec)
        return [(n, a) for n, a in interfaces if match_if_list(n, names, exact) != exclude]
    for names, exclude in ((["ib"], False), (["docker", "lo"], True), (["docker"], False), (["lo"], False)):
        found = [(n, a) for n, a in interfaces if match_if_list(n, names, False) != exclude]
        if found:
            return found
    return []


def ib_devices(env: dict | None = None, root: Path | None = None) -> list[str]:
    """RDMA devices NCCL's IB transport would use (empty: it falls back to sockets)."""
    env = os.environ if env is None else env
    root = SYS_CLASS_INFINIBAND if root is None else root
    if env.get("NCCL_IB_DISABLE", "0").strip() == "1" or env.get("NCCL_NET") == "Socket":
        return []
    try:
        devices = sorted(p.name for p in root.iterdir())
    except OSError:
        return []
    spec = env.get("NCCL_IB_HCA")
    if spec:
        names, exclude, exact = parse_if_list(spec)
        devices = [d for d in devices if match_if_list(d, names, exact) != exclude]
    return devices


def verbs_devices(dev_root: str | None = None) -> list[str]:
    """The verbs device nodes this process can open (``/dev/infiniband/uverbsN``)."""
    root = Path(dev_root or os.environ.get("VLLM_LAB_DEV_ROOT", "/dev")) / "infiniband"
    try:
        return sorted(p.name for p in root.iterdir() if p.name.startswith("uverbs"))
    except OSError:
        return []


# The RDMA user-space libraries NCCL's IB transport loads (Debian/Ubuntu: libibverbs1 and ibverbs-providers, from
# rdma-core): NCCL dlopens libibverbs.so.1, and libibverbs lists a ConnectX device only through its mlx5 provider
# (libibverbs/libmlx5-rdmav*.so in the library directory). An image without them (aarch64 CUDA base images ship
# none) has no IB device, whatever /dev/infiniband holds.
LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu",
            "lib64", "usr/lib64", "lib", "usr/lib", "usr/local/lib")


def verbs_userspace(env: dict | None = None, root: str | None = None) -> tuple[str | None, str | None]:
    """(libibverbs.so.1, the mlx5 provider) as this process's loader would find them; None for one that is missing.
    ROOT (VLLM_LAB_LIB_ROOT, default /) is where the library directories are looked for (tests point it elsewhere)."""
    env = os.environ if env is None else env
    base = Path(root or env.get("VLLM_LAB_LIB_ROOT") or "/")
    dirs = [Path(d) for d in (env.get("LD_LIBRARY_PATH") or "").split(":") if d.startswith("/")]
    dirs = [base / str(d).lstrip("/") for d in dirs] + [base / d for d in LIB_DIRS]
    verbs = next((str(d / "libibverbs.so.1") for d in dirs if (d / "libibverbs.so.1").exists()), None)
    provider = next((str(p) for d in dirs for p in sorted((d / "libibverbs").glob("libmlx5-rdmav*.so"))
                     if p.exists()), None)
    return verbs, provider


# ----------------------------------------------------------------------------- logging
class NcclLog:
    def __init__(self, rank: int) -> None:
        self.level = os.environ.get("NCCL_DEBUG", "").upper()
        self.prefix = f"{socket.gethostname()}:{os.getpid()}:{threading.get_native_id()} [{0}]"
        self.rank = rank

    def info(self, msg: str) -> None:
        if self.level in ("INFO", "TRACE"):
            print(f"{self.prefix} NCCL INFO {msg}", flush=True)

    def warn(self, msg: str) -> None:
        if self.level in ("WARN", "INFO", "TRACE"):
            print(f"{self.prefix} NCCL WARN {msg}", flush=True)


def _hang_forever() -> None:
    """What a rank that cannot bootstrap does: nothing, forever (until killed)."""
    threading.Event().wait()


# ----------------------------------------------------------------------------- IB rails
# NCCL_IB_HCA may list several HCAs: a DGX Spark's cabled CX7 port shows as two twins, each its own HCA with its own
# address and subnet. NCCL connects channel c of a rank over its HCA c % n to the peer's HCA c % m: every HCA of each
# side meets one of the other's. A RoCE v2 queue pair reaches its peer's GID only when the kernel can resolve it on the
# HCA's netdev (the same subnet: the twins are not routed), else moving it to RTR fails with ENETUNREACH; a peer that is
# on the subnet but silent times out (ETIMEDOUT). Nothing here moves bytes over RDMA: each pair of HCAs is proven by a
# TCP connection between the two twins' addresses, so the lab's wiring decides as the cable and netplan do.
SIOCGIFNETMASK = 0x891B
IB_CHANNELS = 2
IB_CONNECT_TIMEOUT = 5.0


def netdev_prefixlen(ifname: str) -> int | None:
    """The prefix length of IFNAME's (first) IPv4 address, None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFNETMASK, struct.pack("256s", ifname.encode()[:15]))
        except OSError:
            return None
    return bin(int.from_bytes(packed[20:24], "big")).count("1")


def _gid_ipv4(gid: str) -> str | None:
    groups = gid.strip().lower().split(":")
    if len(groups) != 8 or groups[:6] != ["0000"] * 5 + ["ffff"]:
        return None
    value = int(groups[6] + groups[7], 16)
    return socket.inet_ntoa(value.to_bytes(4, "big")) if value else None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return ""


def ib_rail(device: str, env: dict | None = None, root: Path | None = None) -> dict:
    """What NCCL would use on DEVICE's port 1: the GID (NCCL_IB_GID_INDEX, else the first RoCE v2 GID that maps an
    IPv4 address, else the RoCE v2 link-local one) with its index, IPv4 (None without one), netdev and prefix."""
    env = os.environ if env is None else env
    port = (SYS_CLASS_INFINIBAND if root is None else root) / device / "ports" / "1"
    table = []
    for entry in sorted((port / "gids").iterdir(), key=lambda p: int(p.name)) if (port / "gids").is_dir() else []:
        gid = _read(entry)
        if gid and set(gid.replace(":", "")) != {"0"}:
            table.append((int(entry.name), gid, _read(port / "gid_attrs" / "types" / entry.name),
                          _read(port / "gid_attrs" / "ndevs" / entry.name)))
    wanted = env.get("NCCL_IB_GID_INDEX", "").strip()
    chosen = None
    if wanted.isdigit():
        chosen = next((row for row in table if row[0] == int(wanted)), None)
    else:
        v2 = [row for row in table if row[2] == "RoCE v2"]
        chosen = next((row for row in v2 if _gid_ipv4(row[1])), v2[0] if v2 else None)
    if chosen is None:
        return {"hca": device, "gid_index": int(wanted) if wanted.isdigit() else 0, "gid": "::", "ip": None,
                "netdev": "", "prefixlen": None}
    index, gid, _kind, netdev = chosen
    ip = _gid_ipv4(gid)
    return {"hca": device, "gid_index": index, "gid": f"::ffff:{ip}" if ip else gid, "ip": ip, "netdev": netdev,
            "prefixlen": netdev_prefixlen(netdev) if ip and netdev else None}


def rail_pairs(mine: list[dict], theirs: list[dict]) -> list[tuple[dict, dict]]:
    """The (local HCA, remote HCA) of each channel, as NCCL spreads its channels over each side's HCAs."""
    count = max(IB_CHANNELS, len(mine), len(theirs))
    pairs = []
    for channel in range(count):
        pair = (mine[channel % len(mine)], theirs[channel % len(theirs)])
        if pair not in pairs:
            pairs.append(pair)
    return pairs


def rail_reachable(local: dict, remote: dict) -> bool:
    """Whether LOCAL's netdev can resolve REMOTE's address: same subnet (the twins are not routed)."""
    if not local.get("ip") or not remote.get("ip") or local.get("prefixlen") is None:
        return False
    mask = (0xFFFFFFFF << (32 - local["prefixlen"])) & 0xFFFFFFFF
    to_int = lambda a: int.from_bytes(socket.inet_aton(a), "big")  # noqa: E731
    return to_int(local["ip"]) & mask == to_int(remote["ip"]) & mask


def modify_qp_failure(local: dict, remote: dict, errno_: int, reason: str) -> str:
    """NCCL's words for a queue pair that cannot move to RTR towards REMOTE."""
    return (f"Call to ibv_modify_qp failed with {errno_} {reason}, on dev {local['hca']}:1, curr state INIT, next "
            f"state RTR, local GID index {local['gid_index']}, local GID {local['gid']}, remote GID {remote['gid']}")


def system_error(last: str) -> str:
    return (f"NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3353, unhandled system error "
            f"(run with NCCL_DEBUG=INFO for details), NCCL version {nccl_version()}\n"
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
            f"Last error:\n{last}")


# ----------------------------------------------------------------------------- wire format
def _send(sock: socket.socket, obj: dict) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def recv(self) -> dict | None:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def _parse_init_method(init_method: str) -> tuple[str, int]:
    if not init_method.startswith("tcp://"):
        raise ValueError(f"unsupported distributed_init_method {init_method!r}")
    hostport = init_method[len("tcp://"):]
    host, _, port = hostport.rpartition(":")
    return host.strip("[]"), int(port)


def _connect_retrying(addr: tuple[str, int], source_ip: str | None = None) -> socket.socket:
    """Connect like NCCL/TCPStore clients: retry quietly until the peer is there."""
    delay = 0.05
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if source_ip:
                s.bind((source_ip, 0))
            s.settimeout(5)
            s.connect(addr)
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            s.close()
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


# ----------------------------------------------------------------------------- store
class _StoreServer:
    """Rank 0's key store (listens on all interfaces, as torch's TCPStore)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", port))
        self.sock.listen(64)
        self.data: dict[str, object] = {}
        self.cond = threading.Condition()
        threading.Thread(target=self._accept, daemon=True, name="tcpstore").start()

    def set(self, key: str, value: object) -> None:
        with self.cond:
            self.data[key] = value
            self.cond.notify_all()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = _Reader(conn)
        try:
            while (msg := reader.recv()) is not None:
                with self.cond:
                    self.cond.wait_for(lambda: msg["key"] in self.data)
                    value = self.data[msg["key"]]
                _send(conn, {"value": value})
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


def _store_get(addr: tuple[str, int], key: str) -> object:
    s = _connect_retrying(addr)
    try:
        _send(s, {"key": key})
        msg = _Reader(s).recv()
        if msg is None:
            raise RuntimeError("TCPStore connection closed")
        return msg["value"]
    finally:
        s.close()


# ----------------------------------------------------------------------------- communicator
class NcclComm:
    """A tensor-parallel communicator: rank 0 is the root of a star over TCP."""

    def __init__(self, rank: int, world_size: int, init_method: str, cuda_graphs: bool = False,
                 ib_root: Path | None = None) -> None:
        self.ib_root = ib_root  # /sys/class/infiniband unless a test gives each rank a tree of its own
        self.rails: list[dict] = []
        self.hellos: dict[int, dict] = {}
        self.rank = rank
        self.cuda_graphs = cuda_graphs
        self.deadlock = False
        self.steps = 0
        self.world_size = world_size
        self.log = NcclLog(rank)
        self.peers: dict[int, tuple[socket.socket, _Reader]] = {}
        self.root: tuple[socket.socket, _Reader] | None = None
        self.transport = "Socket"
        self._store: _StoreServer | None = None
        self._init(init_method)

    def _init(self, init_method: str) -> None:
        store_host, store_port = _parse_init_method(init_method)
        if self.rank == 0:
            self._store = _StoreServer(store_port)
        self.log.info("cudaDriverVersion 13000")
        self.log.info(f"NCCL version {nccl_version()}+cuda13.0")
        spec = os.environ.get("NCCL_SOCKET_IFNAME")
        if spec:
            self.log.info(f"NCCL_SOCKET_IFNAME set by environment to {spec}")
        found = find_interfaces()
        if not found:
            self.log.warn("Bootstrap : no socket interface found")
            _hang_forever()
        ifname, ip = found[0]
        self.ifname, self.ip = ifname, ip
        self.log.info(f"Bootstrap : Using {ifname}:{ip}<0>")
        devices = ib_devices(root=self.ib_root)
        if devices:
            verbs, provider = verbs_userspace()
            if verbs is None:
                self.log.info("Failed to open libibverbs.so[.1]")
                self.log.info("NET/IB : No device found.")
                devices = []
            elif provider is None:
                print("libibverbs: Warning: couldn't load driver 'libmlx5-rdmav34.so': libmlx5-rdmav34.so: cannot open "
                      "shared object file: No such file or directory", file=sys.stderr, flush=True)
                self.log.info("NET/IB : No device found.")
                devices = []
        if devices and not verbs_devices():
            # libibverbs lists a device only when its /dev/infiniband/uverbsN is there (a container
            # started without --device /dev/infiniband has none).
            self.log.info("NET/IB : No device found.")
            devices = []
        if os.environ.get("NCCL_NET") == "IB" and not devices:
            # NCCL_NET forces the network: no fallback to sockets.
            self.log.warn("Failed to initialize any NET plugin")
            raise RuntimeError(
                f"NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3353, invalid usage "
                f"(run with NCCL_DEBUG=WARN for details), NCCL version {nccl_version()}\n"
                "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
                "Last error:\nFailed to initialize any NET plugin")
        if devices:
            self.transport = "IB"
            self.log.info(f"NET/IB : Using [0]{devices[0]}:1/RoCE [RO]; OOB {ifname}:{ip}<0>")
            self.log.info("Using network IB")
        else:
            self.log.info(f"NET/Socket : Using [0]{ifname}:{ip}<0>")
            self.log.info("Using network Socket")
        if self.rank == 0:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((ip, 0))
            listener.listen(64)
            self._store.set("nccl_unique_id", [ip, listener.getsockname()[1]])
            while len(self.peers) < self.world_size - 1:
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                reader = _Reader(conn)
                hello = reader.recv()
                if hello is None:
                    conn.close()
                    continue
                self.peers[int(hello["rank"])] = (conn, reader)
                self.hellos[int(hello["rank"])] = hello
            listener.close()
            for peer in sorted(self.peers):
                conn, _ = self.peers[peer]
                _send(conn, {"op": "init_done", "transport": self.transport})
            cross_node = any(conn.getpeername()[0] != ip for conn, _ in self.peers.values())
            self._connect_rails_root(devices, ip)
        else:
            root_ip, root_port = _store_get((store_host, store_port), "nccl_unique_id")
            conn = _connect_retrying((root_ip, int(root_port)), source_ip=ip)
            reader = _Reader(conn)
            _send(conn, {"rank": self.rank, "ip": ip, "transport": self.transport})
            msg = reader.recv()
            if msg is None or msg.get("op") != "init_done":
                raise RuntimeError(self._remote_error())
            self.root = (conn, reader)
            cross_node = root_ip != ip
            if self.transport == "IB" and msg.get("transport") == "IB" and cross_node:
                self._connect_rails_peer(devices, conn, reader)
        self.deadlock = graph_deadlock(nccl_version(), self.cuda_graphs, cross_node)
        via = "NET/IB/0/GDRDMA" if self.transport == "IB" else "NET/Socket/0"
        nxt, prv = (self.rank + 1) % self.world_size, (self.rank - 1) % self.world_size
        for ch in range(2):
            self.log.info(f"Channel {ch:02d}/0 : {prv}[0] -> {self.rank}[0] [receive] via {via}")
            self.log.info(f"Channel {ch:02d}/0 : {self.rank}[0] -> {nxt}[0] [send] via {via}")
        self.log.info(f"Connected all rings, use ring PXN 0 GDR {1 if self.transport == 'IB' else 0}")
        self.log.info(f"ncclCommInitRank comm 0x{id(self):x} rank {self.rank} nranks {self.world_size} "
                      f"cudaDev 0 nvmlDev 0 busId f01000 commId 0x{abs(hash(init_method)):x} - Init COMPLETE")

    # IB rails ------------------------------------------------------------------------
    def _own_rails(self, devices: list[str]) -> list[dict]:
        self.rails = [ib_rail(device, root=self.ib_root) for device in devices]
        for index, rail in enumerate(self.rails):
            where = f"{rail['netdev']}:{rail['ip']}" if rail["ip"] else "no IPv4 GID"
            self.log.info(f"NET/IB : [{index}] {rail['hca']}:1/RoCE GID index {rail['gid_index']} ({where})")
        return self.rails

    def _connect_rails_root(self, devices: list[str], ip: str) -> None:
        """Rank 0: give every IB peer on another node this rank's HCAs, each listening on its twin's address, and
        wait for the peer's verdict on every pair of HCAs (the peer makes the connections)."""
        peers = [peer for peer in sorted(self.peers) if self.transport == "IB"
                 and self.hellos.get(peer, {}).get("transport") == "IB" and self.hellos[peer].get("ip") != ip]
        if not peers:
            return
        rails = self._own_rails(devices)
        listeners = []
        for rail in rails:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((rail["ip"] or "127.0.0.1", 0))
            except OSError:
                listener.bind(("127.0.0.1", 0))  # an HCA without an address: nothing can reach it
            listener.listen(64)
            listeners.append(listener)
            threading.Thread(target=self._accept_rail, args=(listener,), daemon=True).start()
        offer = [dict(rail, port=listener.getsockname()[1]) for rail, listener in zip(rails, listeners)]
        for peer in peers:
            _send(self.peers[peer][0], {"op": "ib_rails", "rails": offer})
        failed = None
        for peer in peers:
            msg = self.peers[peer][1].recv()
            if msg is None or msg.get("op") != "ib_done":
                failed = failed or self._remote_error()
            elif msg.get("error"):
                self.log.warn(f"[Proxy Service {self.rank}] Failed to execute operation Connect from rank {peer}, "
                              "retcode 2")
                failed = failed or self._remote_error()
        self._rail_listeners = listeners
        if failed:
            raise RuntimeError(failed)

    @staticmethod
    def _accept_rail(listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.close()

    def _connect_rails_peer(self, devices: list[str], conn: socket.socket, reader: _Reader) -> None:
        """A rank on another node than rank 0: connect every pair of HCAs of the channels, from this twin's address
        to the peer twin's; the first that fails stops init in NCCL's words (and tells rank 0)."""
        msg = reader.recv()
        if msg is None or msg.get("op") != "ib_rails":
            raise RuntimeError(self._remote_error())
        error = None
        for local, remote in rail_pairs(self._own_rails(devices), msg["rails"]):
            if not rail_reachable(local, remote):
                error = modify_qp_failure(local, remote, 101, "Network is unreachable")
                break
            try:
                socket.create_connection((remote["ip"], int(remote["port"])), timeout=IB_CONNECT_TIMEOUT,
                                         source_address=(local["ip"], 0)).close()
            except OSError:
                error = modify_qp_failure(local, remote, 110, "Connection timed out")
                break
            self.log.info(f"NET/IB : {local['hca']} ({local['ip']}) connected to {remote['hca']} ({remote['ip']})")
        _send(conn, {"op": "ib_done", "error": error})
        if error:
            self.log.warn(error)
            self.log.info("transport/net_ib.cc -> 2")
            raise RuntimeError(system_error(error))

    def _remote_error(self) -> str:
        return (f"NCCL error: remote process exited or there was a network error, NCCL version "
                f"{nccl_version()}\nncclRemoteError: A call failed possibly due to a network error or a "
                "remote process exiting prematurely.")

    # rank 0 --------------------------------------------------------------------------
    def all_reduce_step(self, step_input: int, own_partial: int) -> int:
        """Ask every peer for its partial of ``step_input``; return the sum (mod 2**64)."""
        total = own_partial
        try:
            for peer in sorted(self.peers):
                _send(self.peers[peer][0], {"op": "step", "x": step_input})
            for peer in sorted(self.peers):
                msg = self.peers[peer][1].recv()
                if msg is None:
                    raise ConnectionResetError(f"rank {peer} closed the connection")
                total = (total + int(msg["p"])) & ((1 << 64) - 1)
        except OSError as e:
            raise RuntimeError(self._remote_error()) from e
        return total

    def shutdown(self) -> None:
        for conn, _ in self.peers.values():
            try:
                _send(conn, {"op": "shutdown"})
                conn.close()
            except OSError:
                pass
        if self._store:
            self._store.close()

    # ranks > 0 -----------------------------------------------------------------------
    def serve_steps(self, partial_fn) -> str:
        """Answer rank 0's steps until it says shutdown (-> "shutdown") or vanishes (-> "lost")."""
        conn, reader = self.root
        try:
            while (msg := reader.recv()) is not None:
                if msg.get("op") == "shutdown":
                    return "shutdown"
                if msg.get("op") == "step":
                    self.steps += 1
                    if self.deadlock and self.steps > GRAPH_DEADLOCK_AFTER_STEPS:
                        _hang_forever()  # a replayed graph's collective that never completes; NCCL says nothing
                    _send(conn, {"p": partial_fn(int(msg["x"]))})
        except OSError:
            pass
        return "lost"

