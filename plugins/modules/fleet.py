#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.fleet (it runs on the controller only)."""

from __future__ import annotations

# The action plugin (plugins/action/fleet.py) runs on the controller and declares supports_check_mode
# there (_supports_check_mode = True); this file only documents it.

DOCUMENTATION = r"""
module: fleet
short_description: Publish the fleet of DGX Spark clusters and this node's place in it, from the inventory
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads the inventory (the C(groups) magic variable and a few host variables) on the controller and publishes two
    facts, the contract every role of the collection reads, so that no role works the fleet out again.
  - C(dgxspark_fleet), the same on every host, describes every cluster of the fleet group. C(dgxspark_node) is this
    host's place in it - cluster, head, members in rank order, rank, whether it is the head, size, GPUs, fabric
    topology and the inventory's fabric IP. The preflight adds what only the node can tell (fabric interface, IP, NCCL
    and RoCE environment, LAN address) to C(dgxspark_node).
  - A cluster is a group under the fleet group with exactly one host whose C(dgxspark_node_role) is V(head), or the
    hosts naming it with C(dgxspark_cluster) (or the older C(dgxspark_pair)). It has 1 to 8 nodes; the head is rank 0
    and the workers follow in inventory order, or in C(dgxspark_rank) order when every worker sets one.
  - The fabric topology, C(dgxspark_fabric_topology), is V(single) for one node, V(direct) (one cable; the default for
    two) or V(switch) (every member on one fabric; required for three or more). A ring is refused, with the reason.
  - Inventory mistakes fail the task before anything runs on a node, each named with its cluster, host, variable and
    fix - a host in no cluster or in two, no head or two, more than 8 nodes, a topology that does not fit, ranks that
    are not 1..N-1, duplicate fabric IPs, and parallel sizes whose product is not the cluster's GPU count. A group
    under the fleet group with two heads is named with both heads.
  - The values the inventory (or C(-e)) gives the members of this host's cluster are checked against their grammar
    before any of them reaches a file, a line or an argv, and the task fails on every member naming host, variable
    and fix - fabric addresses (C(dgxspark_fabric_ip)) must be IP addresses (no name, pattern, network, IPv6 scope or
    quote); API keys and tokens (C(dgxspark_api_key), C(dgxspark_hf_token) and the roles' own) 8 to 512 of the
    characters C(A-Za-z0-9._~+/=:@-), as the gateway takes them (their values are never shown); cluster and group names and the
    inventory's host names letters, digits, C(_), C(.) and C(-); images (C(dgxspark_image), C(hybrid_image_source),
    C(hybrid_image_base)) references of the Docker grammar; models (C(dgxspark_model)) Hugging Face ids and
    revisions plain ref names; the directories the collection makes 0700 or removes (C(node_trust_dir) and the
    roles' other C(*_dir) variables) plain absolute paths with a component named C(dgxspark...), so never C(/),
    C(/etc) or C(/root); the weights' directories (C(dgxspark_models_dir)) plain absolute paths outside the system's.
    An unset value is left to the role's default. A host outside the fleet (a gateway) has its own values checked.
  - Keys and tokens are refused when they are obvious placeholders - the example vault's C(change-me), C(changeme),
    C(replace-me), C(your-api-key), C(secret), C(password), C(example), C(token), C(apikey), C(xxxxxxxx), C(hf_xxxx),
    anything in C(<...>), one character repeated, a run such as C(12345678), compared case-insensitively without
    separators (the whole list is in C(module_utils/_inputs.py), beside C(PLACEHOLDER_WORDS)) - with how to make a
    real one (C(openssl rand -hex 32) for a key, a read token of Hugging Face for C(dgxspark_hf_token)).
  - A vault value of one of the checked variables, C(vault_<variable>) (the example's C(vault_dgxspark_api_key),
    C(vault_dgxspark_hf_token)), set while C(<variable>) is not, and used by no other variable, fails naming both and
    the line to add to C(group_vars/all/main.yml) - a token only in the vault reaches no download. A vault value is
    never shown; one that cannot be decrypted counts as set.
  - With O(require_api_key) (the preflight's first task, so every playbook that serves), a member of the cluster
    without a client key - C(dgxspark_api_key) unset, empty or whose template names an undefined variable - fails
    naming the variable and how to make, store and map a key, unless C(vllm_serve_allow_no_api_key) is true. A
    C(vllm_serve_api_key) (the engine's own key, made per cluster when unset) equal to C(dgxspark_api_key) fails too.
  - The fabric a node reports (O(fabric), from M(dgxspark.vllm.rdma_facts)) is checked the same way - IP addresses,
    interface names, and environment variables without newlines or quotes - before any member reads it.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
attributes:
  action:
    support: full
    description: Runs on the controller as an action plugin; no module is sent to the node.
  platform:
    support: full
    platforms: posix
options:
  fleet_group:
    description:
      - The group that holds every cluster's group. The default is the play's C(dgxspark_fleet_group), else
        V(spark_pairs).
    type: str
  gateway_group:
    description:
      - The group of the gateway hosts (C(dgxspark.vllm.gateway) role). The default is the play's
        C(dgxspark_gateway_group), else V(dgxspark_gateway). An absent or empty group means no gateway.
      - On a host of this group that is not in the fleet group, only C(dgxspark_fleet) is published.
    type: str
  monitoring_group:
    description:
      - The group of the monitoring hosts (C(dgxspark.vllm.monitoring) role, Prometheus). The default is the play's
        C(dgxspark_monitoring_group), else V(dgxspark_monitoring). An absent or empty group means no monitoring.
      - On a host of this group that is not in the fleet group, only C(dgxspark_fleet) is published.
    type: str
    version_added: 0.2.0
  tensor_parallel_size:
    description:
      - Tensor parallel size this host's cluster will serve with. With O(pipeline_parallel_size), checked against the
        cluster's GPU count. Unset skips the check.
    type: int
  pipeline_parallel_size:
    description: Pipeline parallel size this host's cluster will serve with.
    type: int
    default: 1
  parallel_variables:
    description: Names of the variables that set the two sizes, used in error messages.
    type: list
    elements: str
    default: [vllm_serve_tensor_parallel_size, vllm_serve_pipeline_parallel_size]
  gpus_per_node:
    description: GPUs per node (one GB10 per DGX Spark).
    type: int
    default: 1
  min_nodes:
    description: Refuse clusters with fewer nodes, naming them.
    type: int
    default: 1
  require_api_key:
    description:
      - The play serves a model, so every member of this host's cluster must have an API key (see the description); the
        preflight role sets it (C(preflight_require_api_key)). The plays that serve nothing (status, teardown,
        collect_logs) leave it false and need no key.
    type: bool
    default: false
  fabric:
    description:
      - This node's fabric as M(dgxspark.vllm.rdma_facts) found it (its registered result), published in
        C(dgxspark_node.fabric). Unset keeps what an earlier call of this play published for this node.
      - Every call also collects the fabric the other members of the cluster published, in
        C(dgxspark_node.member_fabric); a call after every member found its own (the preflight's second call) sees
        them all, and C(dgxspark_node.fabric_complete) says so. Two members with one fabric IP fail the task.
    type: dict
seealso:
  - module: dgxspark.vllm.rdma_facts
notes:
  - The fleet is computed from the inventory alone, so it is the same whichever host computes it; only the fabric
    comes from the nodes.
"""

EXAMPLES = r"""
- name: Publish the fleet and each node's place in it
  dgxspark.vllm.fleet:
    tensor_parallel_size: "{{ vllm_serve_tensor_parallel_size }}"
    pipeline_parallel_size: "{{ vllm_serve_pipeline_parallel_size }}"

- name: Find this node's fabric
  dgxspark.vllm.rdma_facts:
  register: fabric

- name: Publish it in dgxspark_node.fabric
  dgxspark.vllm.fleet:
    fabric: "{{ fabric }}"

- name: Collect every member's (now that each published its own)
  dgxspark.vllm.fleet:

- name: Show the ranks
  ansible.builtin.debug:
    msg: "{{ dgxspark_node.cluster }} rank {{ dgxspark_node.rank }} of {{ dgxspark_node.size }}"
"""

RETURN = r"""
ansible_facts:
  description: The two facts.
  returned: success
  type: dict
  contains:
    dgxspark_fleet:
      description:
        - C(group), C(clusters) (name to C(head), C(workers), C(members) in rank order, C(hosts) (the same list),
          C(size), C(gpus), C(topology), C(fabric_ips) from the inventory), C(host_cluster) (host to cluster name) and
          C(fabric_ips) (every node of the fleet to the fabric IP it published, else the inventory's, else empty).
        - C(gateway_group) and C(gateways) (one entry a host of that group - C(host), C(lan_ip) (its
          C(dgxspark_gateway_address), else C(ansible_host); an IP address) - empty without gateways).
        - C(monitoring_group) and C(monitors) (the same for the hosts of the monitoring group, with
          C(dgxspark_monitoring_address); the heads' doors admit them too).
      type: dict
      sample:
        group: spark_pairs
        clusters:
          pair1: {head: spark-1, workers: [spark-2], members: [spark-1, spark-2], hosts: [spark-1, spark-2], size: 2,
                  gpus: 2, topology: direct, fabric_ips: {spark-1: 192.168.100.11, spark-2: 192.168.100.12}}
        host_cluster: {spark-1: pair1, spark-2: pair1}
        fabric_ips: {spark-1: 192.168.100.11, spark-2: 192.168.100.12}
        gateway_group: dgxspark_gateway
        gateways: [{host: gateway-1, lan_ip: 10.0.0.5}]
        monitoring_group: dgxspark_monitoring
        monitors: [{host: monitor-1, lan_ip: 10.0.0.6}]
    dgxspark_node:
      description: This host's C(cluster), C(head), C(members), C(rank), C(is_head), C(size), C(gpus), C(topology)
        and C(fabric_ip) (from the inventory; empty when the preflight is to find it).
        - With O(fabric) (or once published), C(fabric) (this node's C(interface), C(ip), C(mtu), C(transport), C(env)
          - the NCCL, Ray and vLLM variables - C(lan_ip), C(lan_interface), C(rails)), C(member_fabric) (one entry a
          member in rank order - C(host), C(rank), C(ip), C(lan_ip), C(interface) - empty strings where not yet known),
          C(member_rails) (one entry a member in rank order - C(host) and its C(rails), the fabric rails it published, with
          C(interface), C(hca), C(ip), C(prefixlen), C(mtu), C(usable), C(problem); an empty list where not yet known),
          C(head_fabric_ip), C(head_lan_ip) and C(fabric_complete).
        - C(engine) (added in 0.13.0), the node's engine-container settings for every backend (C(shm_size), C(ulimits),
          C(capabilities), C(rdma_devices), C(cache_volumes), C(privileged), C(restart_policy), C(stop_timeout)), from
          the inventory's C(dgxspark_engine_<setting>), or its deprecated alias C(ray_cluster_<setting>) (a
          deprecation warning says so), or the Spark default. A value the engine container definition refuses
          fails the cluster here, naming the host and the variable.
      type: dict
      sample: {cluster: pair1, head: spark-1, members: [spark-1, spark-2], rank: 1, is_head: false, size: 2, gpus: 2,
               topology: direct, fabric_ip: 192.168.100.12,
               fabric: {interface: enp1s0f1np1, ip: 192.168.100.12, mtu: 9000, transport: roce,
                        env: {VLLM_HOST_IP: 192.168.100.12, NCCL_SOCKET_IFNAME: enp1s0f1np1}, lan_ip: 10.0.0.12,
                        lan_interface: enP7s7},
               member_fabric: [{host: spark-1, rank: 0, ip: 192.168.100.11, lan_ip: 10.0.0.11, interface: enp1s0f1np1},
                               {host: spark-2, rank: 1, ip: 192.168.100.12, lan_ip: 10.0.0.12, interface: enp1s0f1np1}],
               head_fabric_ip: 192.168.100.11, head_lan_ip: 10.0.0.11, fabric_complete: true,
               engine: {shm_size: 16g, ulimits: [nofile:1048576:1048576, "memlock:-1:-1", stack:67108864:67108864],
                        capabilities: [], rdma_devices: /dev/infiniband, privileged: false,
                        cache_volumes: {/root/.cache/vllm: dgxspark-vllm-cache}, restart_policy: unless-stopped,
                        stop_timeout: 30}}
"""
