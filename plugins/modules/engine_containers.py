#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.engine_containers."""

from __future__ import annotations

DOCUMENTATION = r"""
module: engine_containers
short_description: Read every engine container of the collection on a node, in one call
version_added: 0.2.0
deprecated:
  removed_in: 1.0.0
  why: M(dgxspark.vllm.node_info) reads what the roles ask of a node as it is, in sections; its engines section is this
    module's answer.
  alternative: Use M(dgxspark.vllm.node_info) with O(dgxspark.vllm.node_info#module:engines=true).
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Lists the node's containers, running or not, whose label O(label) is one of O(components) (by default the engine
    containers of both backends, that is the Ray head and workers and the C(mp) ranks) and reports for each what a
    deploy asks before it changes anything - whether it runs, when it started, the image it was created from, its
    configuration fingerprint label, its restart policy and restart count.
  - The P(dgxspark.vllm.vllm_serve#role) role ran it once per node before the engine switch (it now reads
    M(dgxspark.vllm.node_info)). Its answer decides
    whether any container of the cluster is to be created, recreated or restarted; when none is, the steps that only a
    switch needs (pausing the watchdog, making room in unified memory, proving the GPU in a new container) are left
    out, and the containers are not touched.
  - Environment values can hold secrets (the containers' C(Config.Env) is never returned).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
  - dgxspark.vllm.docker
options:
  label:
    description: The label every container of the collection carries; its value is the component.
    type: str
    default: org.dgxspark.vllm.component
  components:
    description:
      - The values of O(label) that make an engine container. The collection's other containers (the watchdog, the
        gateway, the monitoring) carry the label with other values, and so does a container started from a hybrid
        image without its own (the image's label, V(hybrid-image)); they are not reported.
    type: list
    elements: str
    default: [ray, vllm]
seealso:
  - module: community.docker.docker_container_info
  - module: dgxspark.vllm.ray_cluster_info
"""

EXAMPLES = r"""
- name: Read the engine containers on every node
  dgxspark.vllm.engine_containers:
  register: engines

- name: Name the running ones
  ansible.builtin.debug:
    msg: "{{ engines.containers | dict2items | selectattr('value.running') | map(attribute='key') | list }}"
"""

RETURN = r"""
containers:
  description:
    - The engine containers by name. For each, C(id), C(component) (the label's value), C(running), C(status) (Docker's
      state), C(started_at) (the current or last start, RFC 3339 as Docker writes it), C(image_id) (the image it was
      created from), C(labels) (every label), C(restart_policy) (its name), C(restart_count) and C(exit_code).
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
  description: The components of the running engine containers (a node where one runs holds its share of memory).
  returned: always
  type: list
  elements: str
  sample: [ray]
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.dgxspark.vllm.plugins.module_utils import _docker
from ansible_collections.dgxspark.vllm.plugins.module_utils import _engines

try:
    import docker
    from docker.errors import DockerException, NotFound
except ImportError:
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None


def read(client, label: str, components=("ray", "vllm")) -> dict:
    """The engine containers whose LABEL is one of COMPONENTS (_engines.read with the SDK's NotFound)."""
    return _engines.read(client, label, components, NotFound)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "label": {"type": "str", "default": _engines.LABEL},
            "components": {"type": "list", "elements": "str", "default": ["ray", "vllm"]},
            **_docker.ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib("docker"), exception=DOCKER_IMPORT_ERROR)
    p = module.params
    if p["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {p['timeout']}")
    client = _docker.client(module, docker, p["docker_host"], timeout=p["timeout"])
    try:
        result = read(client, p["label"], p["components"])
    except DockerException as exc:
        module.fail_json(msg=_docker.unreachable_message(p["docker_host"], exc), exception=traceback.format_exc())
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
