#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.status_info."""

from __future__ import annotations

DOCUMENTATION = r"""
module: status_info
short_description: Read what the status playbook shows of a node - its containers, and on a head its release, watchdog and engine
version_added: 0.16.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads in one call what C(playbooks/status.yml) shows of a node - the collection's containers (those with the
    C(org.dgxspark.vllm.component) label, running or not, in the shape of M(community.docker.docker_host_info)), and
    with O(head) the release record the head serves, its watchdog's state and, when the release's engine container is
    on the node, the engine's C(/health) status code and token counter, asked from the node itself.
  - It replaces five tasks of the playbook and the filter C(dgxspark.vllm.status_engine); the action
    M(dgxspark.vllm.fleet_status) draws the cluster's table from the members' answers.
  - A missing record is an empty answer (a cluster that never served, a head without a watchdog); a record that
    cannot be read is an empty answer and a line in RV(problems). Only the containers need the Docker SDK.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
  - dgxspark.vllm.docker
options:
  head:
    description: Whether the node is its cluster's head (C(dgxspark_node.is_head)); only a head reads the release,
      the watchdog and the engine.
    type: bool
    default: false
  release_file:
    description: The release record on the head (C(vllm_serve_config_dir)/release.json).
    type: path
    default: /etc/dgxspark/vllm/release.json
  watchdog_state_file:
    description: The watchdog's state on the head (C(watchdog_state_dir)/state.json).
    type: path
    default: /var/lib/dgxspark/watchdog/state.json
  ray_head_container:
    description: The Ray head's container (the engine of a release with the C(ray) backend).
    type: str
    default: dgxspark-ray-head
  mp_container:
    description: The mp rank's container (the engine of a release with the C(mp) backend).
    type: str
    default: dgxspark-vllm
  http_timeout:
    description: Seconds each of the engine's two answers may take.
    type: int
    default: 10
seealso:
  - module: dgxspark.vllm.ray_cluster_info
  - module: community.docker.docker_host_info
"""

EXAMPLES = r"""
- name: Read each node's containers, and on each head its release, watchdog and engine
  dgxspark.vllm.status_info:
    head: "{{ dgxspark_node.is_head }}"
    release_file: "{{ lookup('dgxspark.vllm.layout', 'vllm_serve_config_dir') }}/release.json"
    watchdog_state_file: "{{ lookup('dgxspark.vllm.layout', 'watchdog_state_dir') }}/state.json"
  register: status_node
"""

RETURN = r"""
containers:
  description: The collection's containers on the node, as the engine lists them (C(Names), C(State), C(Status),
    C(Labels), ...; the shape of M(community.docker.docker_host_info)'s C(containers)).
  returned: always
  type: list
  elements: dict
  sample: [{Names: [/dgxspark-ray-head], State: running, Status: Up 2 hours, Labels: {org.dgxspark.vllm.component: ray}}]
release:
  description: The release record the head serves; empty on a worker, or when the cluster never served.
  returned: always
  type: dict
  sample: {image: "dgxspark/vllm-hybrid:0.17-1a2b3c4d", backend: ray, served_model_name: Qwen/Qwen3.5-122B-A10B-FP8,
           endpoint: {url: "http://192.168.1.11:8000/v1"}}
watchdog:
  description: The watchdog's state on the head (its verdict, restarts and last events); empty without one.
  returned: always
  type: dict
engine:
  description: The engine the head serves - C(url) (its own, as the head reaches it), C(endpoint) (the clients'),
    C(model) - or empty when its release's engine container is not on the node.
  returned: always
  type: dict
  sample: {url: "http://127.0.0.1:8000", endpoint: "http://192.168.1.11:8000", model: Qwen/Qwen3.5-122B-A10B-FP8}
health:
  description: The status code of the engine's C(/health); -1 when nothing answered or the head serves nothing.
  returned: always
  type: int
  sample: 200
metrics:
  description: The C(vllm:generation_tokens_total) lines of the engine's C(/metrics) (empty without an answer).
  returned: always
  type: str
  sample: 'vllm:generation_tokens_total{model_name="Qwen/Qwen3.5-122B-A10B-FP8"} 5120.0'
problems:
  description: The records that are there but could not be read, each with why.
  returned: always
  type: list
  elements: str
"""

import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import _docker
from ansible_collections.dgxspark.vllm.plugins.module_utils import _status

try:
    import docker
    from docker.errors import DockerException
except ImportError:  # _docker.client reports the SDK missing
    docker = None

    class DockerException(Exception):  # type: ignore[no-redef]  # never raised without the SDK
        pass

    DOCKER_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    DOCKER_IMPORT_ERROR = None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "head": {"type": "bool", "default": False},
            "release_file": {"type": "path", "default": "/etc/dgxspark/vllm/release.json"},
            "watchdog_state_file": {"type": "path", "default": "/var/lib/dgxspark/watchdog/state.json"},
            "ray_head_container": {"type": "str", "default": _status.RAY_HEAD_CONTAINER},
            "mp_container": {"type": "str", "default": _status.MP_CONTAINER},
            "http_timeout": {"type": "int", "default": 10},
            **_docker.ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params
    for name in ("timeout", "http_timeout"):
        if p[name] < 1:
            module.fail_json(msg=f"{name} must be at least 1 second, got {p[name]}")
    api = _docker.client(module, docker, p["docker_host"], timeout=p["timeout"], low_level=True,
                         import_error=DOCKER_IMPORT_ERROR)

    def list_containers():
        return api.containers(all=True, filters={"label": _status.LABEL})

    try:
        found = _status.node_status(head=p["head"], release_file=p["release_file"],
                                    watchdog_state_file=p["watchdog_state_file"], list_containers=list_containers,
                                    http_timeout=float(p["http_timeout"]), ray_head_container=p["ray_head_container"],
                                    mp_container=p["mp_container"])
    except DockerException as exc:
        module.fail_json(msg=_docker.unreachable_message(p["docker_host"], exc), exception=traceback.format_exc())
    except _status.StatusError as exc:
        module.fail_json(msg=f"the release record in {p['release_file']}: {exc}")
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
