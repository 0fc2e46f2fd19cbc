#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.node_info."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_info
short_description: Read what the roles ask of a node as it is - its engine containers, paths and transfer trust - in sections
version_added: 0.14.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads, in one call, the sections of a node the roles ask about before they change anything, each only when it is
    asked for (in the shape of M(community.docker.docker_host_info)).
  - O(engines=true) reads the node's containers of the collection whose label O(label) is one of
    O(engine_components), running or not, with what a deploy compares (RV(engines)). Only this section talks to Docker
    and needs the Docker SDK for Python on the node.
  - O(paths) reads whether each path is there (RV(paths)), O(trust_dir) the node's transfer trust (RV(trust)).
  - The P(dgxspark.vllm.preflight#role) role reads all three once per node; the P(dgxspark.vllm.vllm_serve#role) and
    P(dgxspark.vllm.ray_cluster#role) roles read the engine containers right before they plan the engine switch.
  - The one reader of these answers, in place of the extra answers of M(dgxspark.vllm.node_facts) (O(dgxspark.vllm.node_facts#module:paths),
    O(dgxspark.vllm.node_facts#module:trust_dir)), M(dgxspark.vllm.engine_containers) and
    O(dgxspark.vllm.vllm_image_info#module:engine_components), which are deprecated.
  - Environment values can hold secrets - the containers' C(Config.Env) is never returned, and neither is the
    transfer's private key.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
  - dgxspark.vllm.docker
options:
  engines:
    description: Read the engine containers (RV(engines)).
    type: bool
    default: false
  label:
    description: The label every container of the collection carries; its value is the component.
    type: str
    default: org.dgxspark.vllm.component
  engine_components:
    description:
      - The values of O(label) read with O(engines=true). By default the engine containers of both backends (the Ray
        head and workers and the C(mp) ranks); the roles add C(watchdog) and C(door) to read the head's watchdog and
        door in the same call. A container started from a hybrid image without its own label carries the image's
        (V(hybrid-image)) and is not read unless asked.
    type: list
    elements: str
    default: [ray, vllm]
  paths:
    description: Paths whose presence is asked (RV(paths)); not read when empty.
    type: list
    elements: path
    default: []
  trust_dir:
    description: The node's transfer trust directory (RV(trust)); not read when unset.
    type: path
seealso:
  - module: community.docker.docker_host_info
  - module: dgxspark.vllm.node_facts
  - module: dgxspark.vllm.transfer_trust_info
"""

EXAMPLES = r"""
- name: Read the engine containers, the door's configuration and the transfer trust of every node
  dgxspark.vllm.node_info:
    engines: true
    paths: [/etc/dgxspark/gateway-door]
    trust_dir: /etc/dgxspark/transfer
  register: node

- name: Name the running engine containers
  ansible.builtin.debug:
    msg: "{{ node.engines.containers | dict2items | selectattr('value.running') | map(attribute='key') | list }}"

- name: Read the head's engines, watchdog and door in one call
  dgxspark.vllm.node_info:
    engines: true
    engine_components: [ray, vllm, watchdog, door]
  register: head
"""

RETURN = r"""
sections:
  description: The sections read, in the order C(engines), C(paths), C(trust).
  returned: always
  type: list
  elements: str
  sample: [engines, paths, trust]
engines:
  description: The containers O(engine_components) names, and the components of the running ones.
  returned: with O(engines=true)
  type: dict
  contains:
    containers:
      description:
        - The containers by name. For each, C(id), C(component) (the label's value), C(running), C(status) (Docker's
          state), C(started_at) (the current or last start, RFC 3339 as Docker writes it), C(image_id) (the image it
          was created from), C(labels) (every label), C(restart_policy) (its name), C(restart_count) and C(exit_code).
      returned: always
      type: dict
      sample:
        dgxspark-ray-head:
          id: 9b1e4c7d2a0f...
          component: ray
          running: true
          status: running
          started_at: "2026-12-04T21:50:01.123456789Z"
          image_id: sha256:3f0c...
          labels: {org.dgxspark.vllm.component: ray, org.dgxspark.vllm.config: 5e1f0a7c9d2b4e61}
          restart_policy: unless-stopped
          restart_count: 0
          exit_code: 0
    running_components:
      description: The components of the running containers (a node where an engine runs holds its share of memory
        and the GPU).
      returned: always
      type: list
      elements: str
      sample: [ray]
paths:
  description: Whether each of O(paths) is there (as C(lstat) finds it, so a dangling link is there), by path.
  returned: when O(paths) is not empty
  type: dict
  sample: {/etc/dgxspark/gateway-door: false}
trust:
  description:
    - The node's transfer trust in O(trust_dir) - C(dir), C(key_present), C(public_key) and C(host_key), as
      M(dgxspark.vllm.transfer_trust_info) returns them; C(dir) and C(error) instead when a file could not be read
      (never a failure - P(dgxspark.vllm.node_trust#role) reads it again itself, and that read names the problem).
  returned: with O(trust_dir)
  type: dict
  sample: {dir: /etc/dgxspark/transfer, key_present: true, public_key: "ssh-ed25519 AAAAC3Nz... dgxspark-transfer@spark_pairs:spark-1",
           host_key: "ssh-ed25519 AAAAC3Nz... root@spark-1"}
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import _docker
from ansible_collections.dgxspark.vllm.plugins.module_utils import _engines
from ansible_collections.dgxspark.vllm.plugins.module_utils import _node_info

try:
    import docker
    from docker.errors import DockerException, NotFound
except ImportError:  # only the engines section needs the SDK: _docker.client reports it missing when asked
    docker = None

    class DockerException(Exception):  # type: ignore[no-redef]  # never raised without the SDK
        pass

    NotFound = DockerException  # type: ignore[misc,assignment]
    DOCKER_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    DOCKER_IMPORT_ERROR = None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "engines": {"type": "bool", "default": False},
            "label": {"type": "str", "default": _engines.LABEL},
            "engine_components": {"type": "list", "elements": "str", "default": list(_node_info.ENGINE_COMPONENTS)},
            "paths": {"type": "list", "elements": "path", "default": []},
            "trust_dir": {"type": "path"},
            **_docker.ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {p['timeout']}")

    def client():
        return _docker.client(module, docker, p["docker_host"], timeout=p["timeout"],
                              import_error=DOCKER_IMPORT_ERROR)

    try:
        found = _node_info.read(p, client, NotFound)
    except DockerException as exc:
        module.fail_json(msg=_docker.unreachable_message(p["docker_host"], exc), exception=traceback.format_exc())
    module.exit_json(changed=False, sections=_node_info.wanted(p), **found)


if __name__ == "__main__":
    main()
