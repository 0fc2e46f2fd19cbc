#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.node_facts."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_facts
short_description: Read what the preflight of a DGX Spark checks, in one call
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads the Docker engine's version (C(docker version)), the GPUs (C(nvidia-smi --query-gpu)), the memory
    (C(/proc/meminfo)), the free space under O(docker_root), the clock, the host platform (kernel release, NVIDIA
    driver, C(/etc/os-release) and DGX OS's C(/etc/dgx-release), without running anything more), whether its Python
    imports the Docker SDK the other modules need, and pings
    O(ping_targets) with the don't-fragment bit at O(mtu), the peers in parallel. The
    P(dgxspark.vllm.preflight#role) role checks the results; one call per node replaces a round trip per check.
  - Never fails because of what it finds. Each part reports its return code and error text, so the caller can name
    the node, the problem and the fix.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  docker_root:
    description: Where the Docker engine keeps its images; its file system's free space is reported.
    type: path
    default: /var/lib/docker
  ping_targets:
    description: Fabric addresses to ping (the node's peers); each must be an IP address, else nothing is pinged.
    type: list
    elements: str
    default: []
  ping_interface:
    description: Interface the pings of O(ping_targets) leave by (C(ping -I)).
    type: str
  ping_rails:
    description:
      - Fabric addresses to ping each from its own interface - on a DGX Spark the peer's address on each CX7 twin,
        pinged from the same twin (C(ping -I)), so that every rail NCCL uses is proven, not only the first. Planned
        by the P(dgxspark.vllm.fabric_rails#filter) filter.
      - Pinged in parallel with O(ping_targets), with the same O(mtu) and don't-fragment bit; each result in
        RV(pings) carries the C(interface).
    type: list
    elements: dict
    default: []
    version_added: 0.3.0
    suboptions:
      target:
        description: The peer's address on that rail.
        type: str
        required: true
      interface:
        description: This node's interface on that rail.
        type: str
        required: true
      peer:
        description: The peer's name, given back in its RV(pings) entry.
        type: str
      rail:
        description: The rail's number, given back in its RV(pings) entry.
        type: int
  mtu:
    description: The fabric MTU; the pings carry MTU - 28 bytes of payload with fragmentation forbidden.
    type: int
    default: 9000
  ping_count:
    description: Echo requests per target.
    type: int
    default: 2
  ping_timeout:
    description: Seconds to wait for each answer (C(ping -W)).
    type: int
    default: 2
  ping_interval:
    description: Seconds between the echo requests to one target (C(ping -i); below 0.2 needs root).
    type: float
    default: 0.2
  paths:
    description:
      - Paths whose presence the roles after the preflight ask about (the P(dgxspark.vllm.gateway#role) door's
        configuration, removed on a fleet without gateways only when it is there); each comes back in RV(paths).
      - Deprecated, and removed in 1.0.0 - use M(dgxspark.vllm.node_info) with O(dgxspark.vllm.node_info#module:paths).
    type: list
    elements: path
    default: []
    version_added: 0.2.0
  trust_dir:
    description:
      - Also read the node's transfer trust in this directory, as M(dgxspark.vllm.transfer_trust_info) does (its
        public key and the node's SSH host key; never the private key), and return it in RV(trust). The
        P(dgxspark.vllm.preflight#role) role read it here so that P(dgxspark.vllm.node_trust#role) needed no read of
        its own.
      - Unset, the trust is not read.
      - Deprecated, and removed in 1.0.0 - use M(dgxspark.vllm.node_info) with O(dgxspark.vllm.node_info#module:trust_dir).
    type: path
    version_added: 0.2.0
seealso:
  - module: dgxspark.vllm.rdma_facts
"""

EXAMPLES = r"""
- name: Read the node's preflight facts and ping its peer over the fabric
  dgxspark.vllm.node_facts:
    docker_root: /var/lib/docker
    ping_targets: [192.168.100.12]
    ping_interface: enp1s0f1np1
    mtu: 9000
  register: node
"""

RETURN = r"""
docker:
  description: C(docker version)'s server version, its return code and error text.
  returned: always
  type: dict
  sample: {rc: 0, version: 28.3.3, error: ""}
gpus:
  description:
    - The GPU lines of C(nvidia-smi --query-gpu=name,memory.total,driver_version,uuid --format=csv,noheader), its whole
      output, return code and error text.
  returned: always
  type: dict
  sample: {rc: 0, lines: ["NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"], output: "NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c", error: ""}
memory_total_bytes:
  description: C(MemTotal) of C(/proc/meminfo), in bytes (0 when unreadable).
  returned: always
  type: int
  sample: 128849018880
memory_available_bytes:
  description: C(MemAvailable) of C(/proc/meminfo), in bytes (0 when unreadable).
  returned: always
  type: int
  sample: 119185342464
disk:
  description: Free bytes (for unprivileged users, as C(df) shows) under O(docker_root), or the error reading it.
  returned: always
  type: dict
  sample: {path: /var/lib/docker, free_bytes: 1869730201600, error: ""}
clock:
  description: The node's clock (seconds since the epoch) when the module read it.
  returned: always
  type: float
  sample: 1795960000.123
running_engines:
  description:
    - The names of the running containers whose label C(org.dgxspark.vllm.component) is C(ray) or C(vllm) (the
      collection's engine containers of either backend; empty when the engine does not answer). A running engine holds the GPU, and the
      P(dgxspark.vllm.preflight#role) role proves the GPU in a new container only on a node where none runs.
    - Deprecated, and removed in 1.0.0 - the preflight reads RV(dgxspark.vllm.node_info#module:engines) of
      M(dgxspark.vllm.node_info) instead, which needs the Docker SDK it installs first.
  returned: always
  type: list
  elements: str
  sample: [dgxspark-ray-head]
  version_added: 0.2.0
paths:
  description: Whether each of O(paths) is there (as C(lstat) finds it), by path.
  returned: always
  type: dict
  sample: {/etc/dgxspark/gateway-door: false}
  version_added: 0.2.0
trust:
  description:
    - The node's transfer trust in O(trust_dir) - C(dir), C(key_present), C(public_key) and C(host_key), as
      M(dgxspark.vllm.transfer_trust_info) returns them; C(dir) and C(error) instead when a file could not be read.
  returned: with O(trust_dir)
  type: dict
  sample: {dir: /etc/dgxspark/transfer, key_present: true, public_key: "ssh-ed25519 AAAAC3Nz... dgxspark-transfer@spark_pairs:spark-1",
           host_key: "ssh-ed25519 AAAAC3Nz... root@spark-1"}
  version_added: 0.2.0
host:
  description:
    - The host platform the P(dgxspark.vllm.preflight#role) role checks against the known-bad ones shipped in the
      collection (filter P(dgxspark.vllm.host_known_issues#filter)) - C(kernel) (the release C(uname -r) prints),
      C(driver) (the NVIDIA driver version of the first GPU line, empty when nvidia-smi failed), C(os) (C(ID),
      C(VERSION_ID) and C(PRETTY_NAME) of C(/etc/os-release)) and C(dgx_os) (the DGX OS version of
      C(/etc/dgx-release) - its last C(DGX_OTA_VERSION), else C(DGX_SWBUILD_VERSION); empty on other systems).
  returned: always
  type: dict
  sample: {kernel: 6.17.0-1032-nvidia, driver: 580.95.05, dgx_os: 7.2.3,
           os: {id: ubuntu, version_id: "24.04", pretty_name: Ubuntu 24.04.3 LTS}}
  version_added: 0.2.0
docker_sdk:
  description:
    - Whether the Python that runs the collection's modules on this node imports the Docker SDK for Python
      (C(import docker)), which most of them need; DGX OS does not install it (Debian and Ubuntu package it as
      C(python3-docker)). C(python) is that interpreter, C(version) the SDK's version, C(error) why the import failed.
    - C(package) is the OS package that gives this interpreter the SDK (C(python3-docker) when the interpreter is the
      system's C(/usr/bin/python3) on Debian or Ubuntu, else empty - the OS package manager cannot install it there),
      and C(fix) the command that installs it.
  returned: always
  type: dict
  sample: {present: true, version: 5.0.3, python: /usr/bin/python3, error: "", package: python3-docker,
           fix: sudo apt-get install -y python3-docker}
  version_added: 0.2.0
pings:
  description:
    - One entry per O(ping_targets), then one per O(ping_rails), with C(target), C(interface) (the one it left by,
      empty when none was named), C(rc) (0 when every echo was answered) and C(output); an entry of O(ping_rails)
      also has its C(peer) and C(rail) when they were given.
  returned: always
  type: list
  elements: dict
  sample: [{target: 192.168.100.12, interface: enp1s0f1np1, rc: 0,
            output: "2 packets transmitted, 2 received, 0% packet loss"}]
"""

import os
import sys
import threading
import time
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._inputs import InputError, ip
from ansible_collections.dgxspark.vllm.plugins.module_utils._ssh_trust import read_trust

ENGINE_LABEL = "org.dgxspark.vllm.component"
ENGINE_COMPONENTS = ("ray", "vllm")  # the watchdog's, the gateway's and the monitoring's containers carry other values
GPU_QUERY = ["--query-gpu=name,memory.total,driver_version,uuid", "--format=csv,noheader"]
OS_RELEASE = "/etc/os-release"
DGX_RELEASE = "/etc/dgx-release"  # DGX OS: DGX_SWBUILD_VERSION (the install image), DGX_OTA_VERSION per update


def run(module: AnsibleModule, name: str, args: list[str]) -> tuple[int, str, str]:
    """(rc, stdout, stderr) of NAME ARGS; rc 127 when NAME is not installed."""
    binary = module.get_bin_path(name)
    if not binary:
        return 127, "", f"{name} is not installed (not in PATH)"
    try:
        rc, out, err = module.run_command([binary, *args])
    except OSError as exc:
        return 126, "", str(exc)
    return rc, out, err.strip()


def meminfo(text: str) -> dict[str, int]:
    """Bytes of each ``Key: N kB`` line of /proc/meminfo."""
    values = {}
    for line in text.splitlines():
        key, _sep, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return values


def release_file(text: str) -> list[tuple[str, str]]:
    """The ``KEY=value`` lines of an os-release style file, in order (a key may repeat), quotes removed."""
    pairs = []
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            pairs.append((key.strip(), value))
    return pairs


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(65536)
    except OSError:
        return ""


def host_platform(gpu_lines: list[str]) -> dict:
    """The kernel release, the NVIDIA driver (from the GPU lines), the OS and the DGX OS version, read in-process."""
    os_release = dict(release_file(_read(OS_RELEASE)))
    dgx = release_file(_read(DGX_RELEASE))
    ota = [value for key, value in dgx if key == "DGX_OTA_VERSION" and value]
    build = [value for key, value in dgx if key == "DGX_SWBUILD_VERSION" and value]
    fields = gpu_lines[0].split(",") if gpu_lines else []
    return {
        "kernel": os.uname().release,
        "driver": fields[2].strip() if len(fields) > 2 else "",
        "os": {"id": os_release.get("ID", ""), "version_id": os_release.get("VERSION_ID", ""),
               "pretty_name": os_release.get("PRETTY_NAME", "")},
        "dgx_os": (ota or build or [""])[-1],
    }


def docker_sdk(os_id: str) -> dict:
    """Whether this Python imports the Docker SDK (what the collection's other modules import on this node), and the
    package and command that install it for this interpreter on this OS."""
    system = os_id in ("ubuntu", "debian") and sys.executable.startswith("/usr/bin/python3")
    where = {"python": sys.executable, "package": "python3-docker" if system else "",
             "fix": ("sudo apt-get install -y python3-docker" if system else
                     f"{sys.executable} -m pip install docker (or set ansible_python_interpreter to /usr/bin/python3 "
                     "and install python3-docker)")}
    try:
        import docker  # pylint: disable=import-outside-toplevel
    except Exception as exc:  # pylint: disable=broad-exception-caught  # a broken install raises more than ImportError
        return {"present": False, "version": "", "error": f"{type(exc).__name__}: {exc}", **where}
    return {"present": True, "version": str(getattr(docker, "__version__", "")), "error": "", **where}


def free_space(path: str) -> dict:
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return {"path": path, "free_bytes": -1, "error": f"{path}: {exc.strerror}"}
    return {"path": path, "free_bytes": st.f_bavail * st.f_frsize, "error": ""}


def ping_args(target: str, p: dict, interface: str | None = None) -> list[str]:
    args = ["-c", str(p["ping_count"]), "-i", f"{p['ping_interval']:g}", "-W", str(p["ping_timeout"]), "-M", "do",
            "-s", str(p["mtu"] - 28)]
    if interface:
        args += ["-I", interface]
    return [*args, "--", target]


def ping_plan(p: dict) -> list[tuple[str, str, dict]]:
    """(target, interface, what to give back) of every ping: O(ping_targets) from O(ping_interface), then each of
    O(ping_rails)."""
    return ([(target, p["ping_interface"] or "", {}) for target in p["ping_targets"]]
            + [(rail["target"], rail["interface"], {k: rail[k] for k in ("peer", "rail") if rail.get(k) is not None})
               for rail in p["ping_rails"]])


def start_pings(module: AnsibleModule, p: dict) -> t.Callable[[], list[dict]]:
    """Ping every target at once, in the background; returns the call that waits for them and gives their results.

    The slowest peer sets the time, not their number, and the node's other reads run while the pings are under way.
    """
    plan = ping_plan(p)
    results: list[dict] = [{} for _ping in plan]

    def one(index: int, target: str, interface: str, extra: dict) -> None:
        rc, out, err = run(module, "ping", ping_args(target, p, interface))
        lines = [line for line in (out + "\n" + err).splitlines() if line.strip()]
        results[index] = {"target": target, "interface": interface, "rc": rc, "output": "; ".join(lines[-3:]), **extra}

    threads = [threading.Thread(target=one, args=(i, *ping)) for i, ping in enumerate(plan)]
    for th in threads:
        th.start()

    def wait() -> list[dict]:
        for th in threads:
            th.join()
        return results
    return wait


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "docker_root": {"type": "path", "default": "/var/lib/docker"},
            "ping_targets": {"type": "list", "elements": "str", "default": []},
            "ping_interface": {"type": "str"},
            "ping_rails": {"type": "list", "elements": "dict", "default": [],
                           "options": {"target": {"type": "str", "required": True},
                                       "interface": {"type": "str", "required": True},
                                       "peer": {"type": "str"}, "rail": {"type": "int"}}},
            "mtu": {"type": "int", "default": 9000},
            "ping_count": {"type": "int", "default": 2},
            "ping_timeout": {"type": "int", "default": 2},
            "ping_interval": {"type": "float", "default": 0.2},
            # Deprecated: node_info reads them (its paths and trust sections).
            "trust_dir": {"type": "path", "removed_in_version": "1.0.0", "removed_from_collection": "dgxspark.vllm"},
            "paths": {"type": "list", "elements": "path", "default": [], "removed_in_version": "1.0.0",
                      "removed_from_collection": "dgxspark.vllm"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not 576 <= p["mtu"] <= 65535 or p["ping_count"] < 1 or p["ping_timeout"] < 1 or p["ping_interval"] <= 0:
        module.fail_json(msg=f"mtu must be 576-65535 (is {p['mtu']}), ping_count and ping_timeout at least 1, "
                             f"ping_interval above 0")
    for target, _interface, _extra in ping_plan(p):
        try:
            ip(target)
        except InputError as exc:
            module.fail_json(msg=f"ping_targets: {target!r:.80} {exc} (the peers' fabric IPs, as rdma_facts found "
                                 "them or the inventory's dgxspark_fabric_ip)")
    clock = time.time()
    pings = start_pings(module, p)
    rc, out, err = run(module, "docker", ["version", "--format", "{{.Server.Version}}"])
    docker = {"rc": rc, "version": out.strip() if rc == 0 else "", "error": "" if rc == 0 else (err or out.strip())}
    engines: list[str] = []
    if rc == 0:
        rc, out, _err = run(module, "docker", ["ps", "--filter", f"label={ENGINE_LABEL}", "--format",
                                               '{{.Names}}\t{{.Label "%s"}}' % ENGINE_LABEL])
        rows = [line.split("\t") for line in out.splitlines()] if rc == 0 else []
        engines = sorted(row[0].strip() for row in rows if len(row) == 2 and row[1].strip() in ENGINE_COMPONENTS)
    rc, out, err = run(module, "nvidia-smi", GPU_QUERY)
    gpus = {"rc": rc, "lines": [line.strip() for line in out.splitlines() if "," in line], "output": out.strip(),
            "error": err}
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            memory = meminfo(fh.read())
    except OSError:
        memory = {}
    host = host_platform(gpus["lines"])
    found = {}
    if p["trust_dir"]:
        try:
            found["trust"] = {"dir": p["trust_dir"], **read_trust(p["trust_dir"])}
        except OSError as exc:  # never fails: the caller reads it again itself, and that read names the problem
            found["trust"] = {"dir": p["trust_dir"], "error": str(exc)}
    module.exit_json(
        changed=False, clock=clock, docker=docker, gpus=gpus, running_engines=engines, **found,
        paths={path: os.path.lexists(path) for path in p["paths"]},
        memory_total_bytes=memory.get("MemTotal", 0), memory_available_bytes=memory.get("MemAvailable", 0),
        disk=free_space(p["docker_root"]), host=host, docker_sdk=docker_sdk(host["os"]["id"]), pings=pings(),
    )


if __name__ == "__main__":
    main()
