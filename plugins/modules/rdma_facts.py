#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.rdma_facts."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rdma_facts
short_description: Discover the RoCE fabric of a DGX Spark and the environment its Ray and vLLM processes need
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads the RDMA devices below C(/sys/class/infiniband) (port state, physical state, link layer, rate, GID table and the
    RoCE v2 GID that carries an IPv4 address), every network interface below C(/sys/class/net) (state, MTU, MAC, virtual or
    not) and the IPv4 addresses from C(ip -j -4 addr show), and chooses the fabric interface of this node.
  - The fabric interface is O(interface) when given (and validated - it must exist, be up and have an IPv4 address). Otherwise it is
    the up netdev of an ACTIVE RoCE HCA that has an IPv4 address, preferring the name without a capital C(P)
    (V(enp1s0f1np1) over V(enP2p1s0f1np1)), like the community launch scripts do. O(fabric_cidr) narrows the choice by address.
  - Returns the environment this node's Ray and vLLM containers need, with every interface and IP value taken from that one
    interface (C(VLLM_HOST_IP), the Ray node IP, C(NCCL_SOCKET_IFNAME), C(GLOO_SOCKET_IFNAME), C(TP_SOCKET_IFNAME),
    C(UCX_NET_DEVICES), C(OMPI_MCA_btl_tcp_if_include), C(MN_IF_NAME)), the RDMA settings (C(NCCL_IB_HCA) listing every usable
    RoCE HCA, both twins on a Spark, C(NCCL_IB_GID_INDEX), C(NCCL_IB_DISABLE=0), C(NCCL_NET=IB)) and the Spark defaults
    C(NCCL_IGNORE_CPU_AFFINITY=1), C(RAY_memory_monitor_refresh_ms=0), C(RAY_num_prestart_python_workers=0).
    C(MASTER_ADDR) names the head, so it is not part of a node's facts.
  - Interface names may differ between the nodes of a pair; run the module on every node and use each node's own RV(env).
  - A RoCE port is usable when it is ACTIVE, its link layer is Ethernet, it has a RoCE v2 GID with an IPv4 address and its
    netdev is up.
  - Without a usable RoCE port (no C(/sys/class/infiniband), as in the GPU-free lab, or no ACTIVE port) the module falls back to
    socket transport (C(NCCL_IB_DISABLE=1), no C(NCCL_IB_HCA)) on the fabric interface and says so in a warning, unless
    O(require_rdma=true). The fabric interface is then O(interface), or the interface matching O(fabric_cidr), or the up
    interface with an IPv4 address ranked by rule - CX7 port name (ending in C(np<N>)), no default route, not virtual.
    Loopback, wireless and container bridge interfaces are never picked automatically.
  - The results are returned both as top-level keys and as the fact C(dgxspark_fabric).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
attributes:
  facts:
    description: Returns facts in C(ansible_facts) (as C(dgxspark_fabric)).
    support: full
options:
  interface:
    description:
      - Name of the fabric interface on this node, for example V(enp1s0f1np1). Overrides the automatic choice.
      - Set it per host (C(host_vars)) when the names differ between the nodes of a pair.
      - The module fails, naming the interface and listing the candidates, when it does not exist, is not up or has no IPv4
        address (inside O(fabric_cidr) when that is given).
    type: str
  fabric_cidr:
    description:
      - The fabric network (V(192.168.100.0/24)) or this node's fabric address (V(192.168.100.10), meaning C(/32)).
      - Only interfaces with an IPv4 address inside it are chosen, and the fabric IP is the first such address of the chosen
        interface. With O(interface), the interface must have an address inside it.
      - Interfaces that are never picked automatically (wireless, container bridges) are considered when they match.
    type: str
  require_rdma:
    description:
      - Fail instead of falling back to socket transport when no RoCE port is usable.
      - Set it on real DGX Sparks, where a missing RoCE link otherwise means a run at a fraction of the bandwidth.
    type: bool
    default: false
  mtu:
    description:
      - The MTU the fabric interface must have at least, for example V(9000).
      - The module fails when the chosen interface's MTU is lower, since the peers' C(ping -M do) checks and RoCE throughput
        depend on it. When not set, the MTU is only reported in RV(fabric_mtu).
      - Either way, an MTU below 9000 (NVIDIA's netplan sets none, so links come up at 1500) is a warning that says how
        to set 9000; the pair still works.
    type: int
  fabric:
    description:
      - Whether this node has a fabric to find. V(false) for a one-node cluster (a single Spark has no cabled
        fabric) - only RV(lan_ip) and RV(lan_interface) are looked for, RV(transport) is V(none), RV(env) holds only
        O(extra_env), and the fabric values are V(null).
    type: bool
    default: true
    version_added: 0.2.0
  lan_hint:
    description:
      - An address the controller reaches this node at, normally the inventory's C(ansible_host). When an interface of
        this node (other than the fabric) holds it, it is RV(lan_ip); a DNS name or an address behind NAT is ignored.
    type: str
    version_added: 0.2.0
  verbs_dir:
    description:
      - The directory of the RDMA verbs devices the engine containers are given; RV(verbs_devices) lists its C(uverbs*)
        entries (C(NCCL_NET=IB) stops NCCL in a container without them).
    type: path
    default: /dev/infiniband
    version_added: 0.2.0
  debug:
    description:
      - Add the debugging variables C(NCCL_DEBUG=INFO), C(NCCL_DEBUG_SUBSYS=INIT,NET) (shows C(NET/IB) versus
        C(NET/Socket)) and C(VLLM_LOGGING_LEVEL=DEBUG) to RV(env).
      - NCCL documents that its debugging variables must not stay set in production, so they are never added otherwise.
    type: bool
    default: false
  extra_env:
    description:
      - Variables merged into RV(env) last, overriding the derived values (a warning names each overridden fabric variable).
      - Values are strings or numbers; V(true) and V(false) become V(1) and V(0); V(null) removes the variable (for example
        C(NCCL_NET) to let NCCL fall back to socket transport).
    type: dict
    default: {}
notes:
  - The module runs C(ip -j -4 addr show) (iproute2) and reads C(/proc/net/route) to know which interface has the default route.
  - NCCL 2.21 and newer select the RoCE v2 GID itself when C(NCCL_IB_GID_INDEX) is unset; the module leaves it unset (with a
    warning) when the usable HCAs have different RoCE v2 IPv4 GID indices.
seealso:
  - name: NVIDIA DGX Spark playbooks, connect two Sparks
    description: Cabling, netplan addresses of the CX7 twins and C(ibdev2netdev).
    link: https://github.com/NVIDIA/dgx-spark-playbooks
  - name: NCCL environment variables
    description: C(NCCL_SOCKET_IFNAME), C(NCCL_IB_HCA), C(NCCL_IB_GID_INDEX) and the debugging variables.
    link: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
"""

EXAMPLES = r"""
- name: Discover the fabric of every node
  dgxspark.vllm.rdma_facts:
    require_rdma: true
    mtu: 9000

- name: Use the second CX7 twin on this node and add a variable
  dgxspark.vllm.rdma_facts:
    interface: enP2p1s0f1np1
    extra_env:
      NCCL_IB_TIMEOUT: 22

- name: Pick the interface by address (the lab has no RDMA device)
  dgxspark.vllm.rdma_facts:
    fabric_cidr: 192.168.100.0/24
  register: fabric

- name: Show the environment of this node
  ansible.builtin.debug:
    msg: "{{ dgxspark_fabric.fabric_interface }} {{ dgxspark_fabric.fabric_ip }} {{ fabric.env.NCCL_IB_HCA | default('socket') }}"
"""

RETURN = r"""
verbs_devices:
  description: The C(uverbs*) entries of O(verbs_dir), sorted; empty when there is none or the directory is missing.
  returned: always
  type: list
  elements: str
  sample: [uverbs0, uverbs1]
  version_added: 0.2.0
rdma_devices:
  description:
    - RDMA devices by name, from C(/sys/class/infiniband). Empty without RDMA.
    - Each has C(netdevs) (list), C(active) (bool) and C(ports), a list of dicts with C(port), C(state) (V(ACTIVE), V(DOWN)),
      C(phys_state) (V(LinkUp), V(Disabled)), C(link_layer) (V(Ethernet) or V(InfiniBand)), C(rate), C(netdev),
      C(roce_v2_gid_index), C(roce_v2_ipv4) and C(gids) (the non-zero GID entries with C(index), C(gid), C(type), C(ndev),
      C(ipv4)).
  returned: always
  type: dict
  sample:
    rocep1s0f1:
      active: true
      netdevs: [enp1s0f1np1]
      ports:
        - port: 1
          state: ACTIVE
          phys_state: LinkUp
          link_layer: Ethernet
          rate: 200 Gb/sec (4X HDR)
          netdev: enp1s0f1np1
          roce_v2_gid_index: 3
          roce_v2_ipv4: 192.168.100.10
          gids:
            - {index: 3, gid: "0000:0000:0000:0000:0000:ffff:c0a8:640a", type: RoCE v2, ndev: enp1s0f1np1, ipv4: 192.168.100.10}
netdevs:
  description:
    - Network interfaces by name, from C(/sys/class/net) and C(ip -j -4 addr show).
    - Each has C(operstate), C(up), C(mtu), C(address) (MAC), C(virtual), C(loopback), C(wireless), C(default_route),
      C(ipv4) (list of C(address), C(prefixlen)) and C(rdma_device) (the RDMA device whose netdev it is, or V(null)).
  returned: always
  type: dict
  sample:
    enp1s0f1np1:
      operstate: up
      up: true
      mtu: 9000
      address: "4c:bb:47:2d:00:11"
      virtual: false
      loopback: false
      wireless: false
      default_route: false
      ipv4: [{address: 192.168.100.10, prefixlen: 24}]
      rdma_device: rocep1s0f1
fabric_interface:
  description: The chosen fabric interface of this node.
  returned: always
  type: str
  sample: enp1s0f1np1
fabric_ip:
  description: The IPv4 address of RV(fabric_interface); the IP Ray, vLLM and the NCCL bootstrap use on this node.
  returned: always
  type: str
  sample: 192.168.100.10
fabric_mtu:
  description: The MTU of RV(fabric_interface).
  returned: always
  type: int
  sample: 9000
fabric_hcas:
  description: The RoCE HCAs in C(NCCL_IB_HCA); empty with socket transport.
  returned: always
  type: list
  elements: str
  sample: [rocep1s0f1, roceP2p1s0f1]
fabric_rails:
  description:
    - The rails NCCL sends over, in the same order on every node (the name without a capital C(P) first). With RoCE,
      one rail an ACTIVE RoCE port (on a Spark both twins of the cabled CX7 port, each on its own subnet); a rail
      NCCL cannot use (C(usable=false)) is an ACTIVE twin without an IPv4 address or whose netdev is down, and says
      why in C(problem). With socket transport, the fabric interface alone. Empty with O(fabric=false).
    - Each has C(interface), C(hca) (empty with sockets), C(ip), C(prefixlen), C(mtu), C(usable) and C(problem).
    - The P(dgxspark.vllm.preflight#role) role requires the same usable rails on every member of a cluster, rail by
      rail on one subnet, and pings each rail's peers over it.
  returned: always
  type: list
  elements: dict
  sample:
    - {interface: enp1s0f1np1, hca: rocep1s0f1, ip: 192.168.100.10, prefixlen: 24, mtu: 9000, usable: true, problem: ""}
    - {interface: enP2p1s0f1np1, hca: roceP2p1s0f1, ip: 192.168.101.10, prefixlen: 24, mtu: 9000, usable: true,
       problem: ""}
  version_added: 0.3.0
transport:
  description: V(roce) when at least one RoCE port is usable, otherwise V(socket); V(none) with O(fabric=false).
  returned: always
  type: str
  sample: roce
lan_ip:
  description:
    - This node's IPv4 address on the controller's network (the LAN), where API clients reach it; the fabric is point
      to point between the nodes of a pair, so no client outside the pair reaches a fabric address.
    - O(lan_hint) when an interface of this node holds it; else the address the controller's SSH connection arrived
      on (C(SSH_CONNECTION), which C(sudo) drops) when an interface holds it; else the first address of the interface
      with the default route; V(null) when none is found. Fabric interfaces never qualify.
  returned: always
  type: str
  sample: 10.0.0.10
lan_interface:
  description: The interface that holds RV(lan_ip), or V(null).
  returned: always
  type: str
  sample: enP7s7
env:
  description: The environment of this node's Ray and vLLM processes (all values are strings), O(extra_env) merged last.
  returned: always
  type: dict
  sample:
    VLLM_HOST_IP: 192.168.100.10
    RAY_NODE_IP_ADDRESS: 192.168.100.10
    RAY_OVERRIDE_NODE_IP_ADDRESS: 192.168.100.10
    NCCL_SOCKET_IFNAME: enp1s0f1np1
    GLOO_SOCKET_IFNAME: enp1s0f1np1
    TP_SOCKET_IFNAME: enp1s0f1np1
    UCX_NET_DEVICES: enp1s0f1np1
    OMPI_MCA_btl_tcp_if_include: enp1s0f1np1
    MN_IF_NAME: enp1s0f1np1
    NCCL_IB_DISABLE: "0"
    NCCL_IB_HCA: rocep1s0f1,roceP2p1s0f1
    NCCL_IB_GID_INDEX: "3"
    NCCL_NET: IB
    NCCL_IGNORE_CPU_AFFINITY: "1"
    RAY_memory_monitor_refresh_ms: "0"
    RAY_num_prestart_python_workers: "0"
ansible_facts:
  description: Facts to add to the host.
  returned: always
  type: dict
  contains:
    dgxspark_fabric:
      description:
        - The same keys as the top-level return values (RV(rdma_devices), RV(netdevs), RV(fabric_interface), RV(fabric_ip),
          RV(fabric_mtu), RV(fabric_hcas), RV(transport), RV(env), RV(lan_ip), RV(lan_interface)), plus C(warnings), the list of warnings the module
          issued (they also appear as the task's standard C(warnings)).
      returned: always
      type: dict
      sample:
        fabric_interface: enp1s0f1np1
        fabric_ip: 192.168.100.10
        transport: roce
        warnings: []
"""

import os
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._fabric import FabricError, analyse

# Filesystem root below which sysfs and procfs are read. Unit tests point it at a
# fixture tree; it is deliberately not a module option.
_FS_ROOT = "/"


def verbs_devices(directory: str) -> list[str]:
    """The uverbs* entries of DIRECTORY (below _FS_ROOT), sorted; [] when it cannot be listed."""
    try:
        return sorted(name for name in os.listdir(os.path.join(_FS_ROOT, directory.lstrip("/"))) if name.startswith("uverbs"))
    except OSError:
        return []


def run_module(module: AnsibleModule) -> dict:
    """Gather the facts; fails the module with a clear message on any problem."""
    ip_bin = module.get_bin_path("ip", required=True)
    rc, out, err = module.run_command([ip_bin, "-j", "-4", "addr", "show"])
    if rc != 0:
        module.fail_json(msg=f"'{ip_bin} -j -4 addr show' failed with rc={rc}: {err.strip() or out.strip()}",
                         rc=rc, stdout=out, stderr=err)
    params = module.params
    try:
        facts = analyse(
            root=_FS_ROOT,
            ip_json=out,
            interface=params["interface"],
            fabric_cidr=params["fabric_cidr"],
            require_rdma=params["require_rdma"],
            mtu=params["mtu"],
            debug=params["debug"],
            extra_env=params["extra_env"],
            ssh_connection=os.environ.get("SSH_CONNECTION"),
            lan_hint=params["lan_hint"],
            fabric=params["fabric"],
        )
    except FabricError as exc:
        module.fail_json(msg=f"rdma_facts: {exc}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        module.fail_json(msg=f"rdma_facts: unexpected error while reading the fabric: {exc}", exception=traceback.format_exc())
    facts["verbs_devices"] = verbs_devices(params["verbs_dir"])
    return facts


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            interface=dict(type="str"),
            fabric_cidr=dict(type="str"),
            require_rdma=dict(type="bool", default=False),
            mtu=dict(type="int"),
            debug=dict(type="bool", default=False),
            extra_env=dict(type="dict", default={}),
            lan_hint=dict(type="str"),
            fabric=dict(type="bool", default=True),
            verbs_dir=dict(type="path", default="/dev/infiniband"),
        ),
        supports_check_mode=True,
    )
    facts = run_module(module)
    for warning in facts["warnings"]:
        module.warn(warning)
    top_level = {key: value for key, value in facts.items() if key != "warnings"}
    module.exit_json(changed=False, ansible_facts={"dgxspark_fabric": facts}, **top_level)


if __name__ == "__main__":
    main()
