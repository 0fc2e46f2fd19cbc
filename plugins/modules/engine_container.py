#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.engine_container (it runs community.docker's container module on
the node)."""

from __future__ import annotations

# The action plugin (plugins/action/engine_container.py) declares supports_check_mode there
# (_supports_check_mode = True: check mode and --diff are handed to community.docker.docker_container, which reports
# what it would change); this file only documents it.

DOCUMENTATION = r"""
module: engine_container
short_description: Bring one engine container (a Ray head or worker, an mp rank) to its spec, in one call
version_added: 0.13.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Compares the node's engine container with its spec and the cluster's fingerprint, and creates, recreates, starts
    or restarts it when they differ, in one call on the node.
  - The spec is the answer of the P(dgxspark.vllm.node_container#filter) filter (image, argv, GPU, RDMA devices,
    capabilities, ulimits, volumes, environment, labels, log rotation); the fingerprint is
    M(dgxspark.vllm.engine_plan)'s, carried by the C(org.dgxspark.vllm.config) label, so a change anywhere in the cluster
    recreates every member.
  - The container is created from O(image_id), the node's own ID of the image it checked, never by a name whose tag
    could move in between; a container made by name from the same image is not recreated for the name alone.
  - Labels, environment and volumes are compared whole; a label, a variable or a mount the spec no longer has is a
    change.
  - The comparison and the Docker calls are M(community.docker.docker_container)'s; its answer is returned with the
    outcome in the collection's words (RV(action), RV(started)). With C(--diff), RV(diff) holds what differs, before
    and after, and check mode changes nothing.
  - With O(keep) (the plan's C(settled)), the container runs as its spec says and is answered as it runs, without a
    call.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: The container module reports whether it would create, recreate, start or restart the container; nothing
      is changed and no process is started.
  diff_mode:
    support: full
    details: The container module's before and after of what differs (the fingerprint label, the command, the
      environment, a restart), the same in check mode.
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  spec:
    description: The container's spec, the P(dgxspark.vllm.node_container#filter) filter's answer.
    type: dict
    required: true
  fingerprint:
    description: The cluster's fingerprint (M(dgxspark.vllm.engine_plan)'s RV(dgxspark.vllm.engine_plan#module:fingerprint)).
    type: str
    required: true
  image_id:
    description: The node's own ID of the image (the container is created from it); the spec's image name when empty.
    type: str
    default: ""
  before:
    description: The container as it runs (M(dgxspark.vllm.engine_containers)' entry for it; empty for none).
    type: dict
    default: {}
  keep:
    description:
      - The cluster's plan keeps this container (M(dgxspark.vllm.engine_plan)'s C(settled)); it is answered as it runs
        without a call. Fails when O(before) does not run.
    type: bool
    default: false
  restart:
    description: Restart the container even when it runs as its spec says (a Ray worker of a head that is gone).
    type: bool
    default: false
requirements:
  - community.docker (its docker_container module and, on the node, what that needs)
seealso:
  - module: dgxspark.vllm.engine_plan
  - module: dgxspark.vllm.engine_containers
  - module: community.docker.docker_container
"""

EXAMPLES = r"""
- name: Run the Ray head as its spec says (left alone when the plan keeps it)
  dgxspark.vllm.engine_container:
    spec: "{{ ray_cluster_spec.container }}"
    image_id: "{{ ray_cluster_image_id }}"
    fingerprint: "{{ ray_cluster_pair_fingerprint }}"
    before: "{{ ray_cluster_before }}"
    keep: "{{ ray_cluster_pair_settled }}"
  register: ray_cluster_head_result
"""

RETURN = r"""
action:
  description:
    - What was done (or would be, in check mode) - C(keep) (nothing), C(create), C(recreate), C(start), C(restart), or
      C(update) (changed in place, the same process running on).
  returned: success
  type: str
  sample: recreate
started:
  description: Whether a new process of the container runs (or would, in check mode) since the call.
  returned: success
  type: bool
name:
  description: The container's name.
  returned: success
  type: str
  sample: dgxspark-ray-head
container:
  description:
    - The container as M(community.docker.docker_container) returns it (C(docker inspect)); for a kept container, its
      C(Id) and C(State.Running) and C(State.StartedAt) as it runs.
  returned: success
  type: dict
diff:
  description:
    - With C(--diff), M(community.docker.docker_container)'s C(before) and C(after) of what differs (the fingerprint
      label, the command, the environment), and its C(differences).
  returned: when changed and diff is requested
  type: dict
"""
