# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of community.docker.docker_container for an engine container (Ray head/worker, mp rank)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: node_container
short_description: The one definition of an engine container on a DGX Spark (Ray head, Ray worker, mp rank)
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers
description:
  - Returns the options of C(community.docker.docker_container) for an engine container, for every backend, so
    that no container misses what a Spark needs. The GPU through Docker's C(nvidia) device driver
    (C(device_requests), as C(--gpus all)); host network and IPC; shared memory; ulimits (C(memlock) unlimited,
    C(nofile), C(stack) 64 MiB); every capability dropped (C(cap_drop) V([ALL])), with RDMA the verbs devices and
    C(IPC_LOCK) given back; the fleet's log rotation; named volumes for the compile caches
    (C(/root/.cache/vllm), C(/root/.cache/flashinfer), C(/root/.triton)) that survive restarts; restart policy,
    stop timeout, labels, environment; the collection's launcher as the entrypoint.
  - Options left V(null) take the Spark default.
positional: _input, image, command
options:
  _input:
    description: The container name.
    type: str
    required: true
  image:
    description: The serving image.
    type: str
    required: true
  command:
    description: The launcher's argv (after C(python3 /opt/dgxspark/bin/dgxspark-launch)).
    type: list
    elements: str
    required: true
  component:
    description: V(ray) or V(vllm) (label C(org.dgxspark.vllm.component)).
    type: str
    required: true
  role:
    description: V(head) or V(worker) (label C(org.dgxspark.vllm.role)).
    type: str
    required: true
  pair:
    description: The pair's name (label C(org.dgxspark.vllm.pair)).
    type: str
    required: true
  env:
    description: The container's environment, normally the fabric environment of C(dgxspark.vllm.rdma_facts).
    type: dict
  volumes:
    description: Bind mounts C(SOURCE:/PATH[:ro]).
    type: list
    elements: str
  rdma:
    description: Give the RDMA devices and C(IPC_LOCK). V(null) means when O(env) has NCCL use RDMA
      (C(NCCL_NET=IB), or C(NCCL_IB_DISABLE=0) without C(NCCL_NET=Socket)).
    type: bool
  rdma_devices:
    description: The verbs devices' directory.
    type: str
    default: /dev/infiniband
  shm_size:
    description: Size of C(/dev/shm).
    type: str
    default: 16g
  ulimits:
    description: C(NAME:SOFT:HARD) items; replaces the default list.
    type: list
    elements: str
    default: [nofile:1048576:1048576, "memlock:-1:-1", stack:67108864:67108864]
  capabilities:
    description: Capabilities given back after C(cap_drop) V([ALL]) (C(IPC_LOCK) is added with RDMA).
    type: list
    elements: str
  privileged:
    description: Run privileged (not needed on Sparks); then nothing is dropped.
    type: bool
    default: false
  restart_policy:
    description: Docker's restart policy.
    type: str
    default: unless-stopped
  stop_timeout:
    description: Seconds Docker gives the launcher on stop.
    type: int
    default: 30
  cache_volumes:
    description: Container path -> named volume for the compile caches; V({}) for none.
    type: dict
  gpus:
    description: V(false) leaves the GPU out (only for tests of what happens without it).
    type: bool
    default: true
  logs:
    description: The fleet's log setting, C(dgxspark_container_logs) (see P(dgxspark.vllm.container_logs#filter));
      V(null) is the default rotation (V(json-file), 5 files of 50 MB).
    type: raw
    version_added: 0.7.0
"""

EXAMPLES = r"""
- name: Start this node's engine rank
  vars:
    container: >-
      {{ 'dgxspark-vllm' | dgxspark.vllm.node_container(image, ['mp', '--', 'vllm', 'serve', '/models/m'],
         component='vllm', role='head', pair='pair1', env=preflight_fabric.env) }}
  community.docker.docker_container:
    name: "{{ container.name }}"
    image: "{{ container.image }}"
    device_requests: "{{ container.device_requests }}"
    # ... every key of the definition
"""

RETURN = r"""
_value:
  description: The options of C(community.docker.docker_container) (name, image, entrypoint, command, env,
    volumes, devices, device_requests, network_mode, ipc_mode, shm_size, ulimits, capabilities, cap_drop, privileged,
    restart_policy, stop_timeout, log_driver, log_options, labels).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils._node_container import ContainerError
from ansible_collections.dgxspark.vllm.plugins.module_utils._node_container import node_container as _build


def node_container(name, image, command, **options):
    try:
        return _build(name, image, list(command or []), **options)
    except (ContainerError, TypeError) as exc:
        raise AnsibleFilterError(f"node_container ({name}): {exc}") from exc


class FilterModule:
    def filters(self):
        return {"node_container": node_container}
