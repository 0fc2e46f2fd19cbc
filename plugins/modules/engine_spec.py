#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.engine_spec (it runs on the controller)."""

from __future__ import annotations

# The action plugin (plugins/action/engine_spec.py) runs on the controller and declares supports_check_mode there
# (_supports_check_mode = True: it builds a value and changes nothing); this file only documents it.

DOCUMENTATION = r"""
module: engine_spec
short_description: Build one node's engine-container spec - the Ray head, a Ray worker or an mp rank
version_added: 0.15.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the controller and builds, in Python, this node's engine container - the launcher's argv for its backend
    and role, the binds every engine container needs (the launcher, and the Ray token, the weights or the serving
    environment) and the one container definition of the collection (GPU, RDMA, ulimits, caches, the node's engine
    settings) - with what else M(dgxspark.vllm.engine_plan) fingerprints.
  - Publishes it as the fact O(publish). M(dgxspark.vllm.engine_plan) compares the members' specs and
    M(dgxspark.vllm.engine_container) brings each node's container to it.
  - The P(dgxspark.vllm.ray_cluster#role) role builds the Ray head's and workers' specs with it, the
    P(dgxspark.vllm.vllm_serve#role) role the mp ranks'.
  - Fails, naming the host, the container and the value, on a value the container cannot be built from.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  backend:
    description: The engine's backend - V(ray) (the launcher runs a Ray head or worker, and the head runs vLLM) or
      V(mp) (the launcher runs a vLLM rank of its own multi-node mode).
    type: str
    required: true
    choices: [ray, mp]
  name:
    description: The container's name.
    type: str
    required: true
  image:
    description: The image the container runs.
    type: str
    required: true
  role:
    description: This node's role in its cluster.
    type: str
    required: true
    choices: [head, worker]
  pair:
    description: The cluster's name, carried by the container's C(org.dgxspark.vllm.pair) label.
    type: str
    required: true
  launcher_dir:
    description: Where the launcher (C(dgxspark-launch)) is installed on the node; it is mounted read-only.
    type: str
    required: true
  launcher_checksum:
    description: The installed launcher's checksum (a new launcher restarts the cluster).
    type: str
    default: ""
  env:
    description: The container's environment (the fabric's NCCL/RoCE environment and the role's own).
    type: dict
    default: {}
  engine:
    description: The node's engine settings, as the M(dgxspark.vllm.fleet) action publishes them in
      C(dgxspark_node.engine).
    type: dict
    default: {}
  logs:
    description: The value of C(dgxspark_container_logs) (the containers' log rotation).
    type: raw
  ray:
    description:
      - With O(backend=ray), the Ray launcher's values - C(node_ip), C(port), C(gpus), C(stop_timeout) (Docker's; the
        launcher's grace is half of it after 5 s), C(object_store_bytes), C(ray_args), C(wait_timeout); on the head
        C(members), C(worker_ips), C(dashboard_host), C(launcher_args) and C(serve_argv); on a worker C(head_ip).
      - And C(token_auth) with C(config_dir) (the token is mounted from there), C(env) (the role's own environment,
        over O(env) and the token's), C(volumes) (more binds), C(image_id), C(extra) (the head's extra fingerprint
        input) and C(token) (the token's keyed digest).
    type: dict
    default: {}
  mp:
    description:
      - With O(backend=mp), the rank's values - C(serve_argv) (the rank's C(vllm serve) argv), C(models_dir) (mounted
        read-only on C(/models)), C(config_dir) (the head's serving environment file is mounted from there) and
        C(env_checksum) (its keyed digest).
    type: dict
    default: {}
  publish:
    description: The fact the spec is published as (the name M(dgxspark.vllm.engine_plan)'s C(spec) option gives).
    type: str
    required: true
seealso:
  - module: dgxspark.vllm.engine_plan
  - module: dgxspark.vllm.engine_container
"""

EXAMPLES = r"""
- name: Describe this node's mp rank
  dgxspark.vllm.engine_spec:
    backend: mp
    name: dgxspark-vllm
    image: vllm/vllm-openai:v0.17.1
    role: "{{ dgxspark_node.role }}"
    pair: "{{ dgxspark_node.cluster }}"
    launcher_dir: /opt/dgxspark/bin
    env: "{{ dgxspark_node.fabric.env }}"
    engine: "{{ dgxspark_node.engine }}"
    mp:
      serve_argv: [vllm, serve, /models/qwen, --tensor-parallel-size, "2", --nnodes, "2"]
      models_dir: /var/lib/dgxspark/models
      config_dir: /etc/dgxspark/vllm
    publish: my_rank_spec
"""

RETURN = r"""
spec:
  description:
    - This node's spec - C(container) (the options of M(community.docker.docker_container)) and C(launcher); for Ray
      also C(image_id), C(extra) and C(token), for mp C(env_checksum). Also published as the fact O(publish).
  returned: success
  type: dict
  sample:
    container: {name: dgxspark-vllm, image: "vllm/vllm-openai:v0.17.1", entrypoint: [python3, /opt/dgxspark/bin/dgxspark-launch],
                command: [mp, --serve-env-file, /etc/dgxspark/vllm/serve.env, --, vllm, serve, /models/qwen],
                labels: {org.dgxspark.vllm.component: vllm, org.dgxspark.vllm.role: head, org.dgxspark.vllm.pair: pair1}}
    env_checksum: 5e1f0a7c9d2b4e61
    launcher: 3f0c9a1b
"""
