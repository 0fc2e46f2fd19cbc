#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.engine_plan (it runs on the controller)."""

from __future__ import annotations

# The action plugin (plugins/action/engine_plan.py) runs on the controller and declares supports_check_mode
# there (_supports_check_mode = True: it reads published facts and changes nothing); this file only documents it.

DOCUMENTATION = r"""
module: engine_plan
short_description: Plan a cluster's engine containers from what every member published
version_added: 0.12.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the controller, for each member of a cluster, after every member published its engine container's spec,
    the container as it runs (its entry in RV(dgxspark.vllm.node_info#module:engines)) and its own ID of the serving image.
  - Returns the cluster's fingerprint (one value for every member, carried by each container's
    C(org.dgxspark.vllm.config) label, so that a change anywhere restarts the whole cluster), whether each member
    already runs as its spec says, and whether the cluster is switched.
  - The same for the Ray head and workers (P(dgxspark.vllm.ray_cluster#role)) and the mp ranks
    (P(dgxspark.vllm.vllm_serve#role)).
  - A member is settled when its container runs, carries the fingerprint, runs from the member's own image ID, has
    the spec's restart policy and, with O(component), is that component's. With O(workers_follow_head), a worker that
    started before its head's current start switches the cluster; start times are compared as times.
  - Publishes C(<publish>_fingerprint), C(<publish>_settled) (this member) and C(<publish>_switch) as facts.
  - Fails, naming the members, when one of them published no spec (it failed or is unreachable) - nothing of the
    cluster starts without every member.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  members:
    description: The cluster's members, the head first (C(dgxspark_node.members)).
    type: list
    elements: str
    required: true
  head:
    description: The cluster's head.
    type: str
    required: true
  spec:
    description: The fact in which each member published its container's spec (C({container, ...})).
    type: str
    required: true
  before:
    description: The fact in which each member published its engine container as it runs (empty for none).
    type: str
    required: true
  image_id:
    description: The fact (dotted path) holding each member's own ID of the serving image.
    type: str
    required: true
  component:
    description: The component a settled container must be (the C(org.dgxspark.vllm.component) label); any when
      empty.
    type: str
    default: ""
  workers_follow_head:
    description: A worker that started before its head's current start switches the cluster (Ray).
    type: bool
    default: false
  publish:
    description: The prefix of the facts published.
    type: str
    required: true
seealso:
  - module: dgxspark.vllm.engine_containers
"""

EXAMPLES = r"""
- name: Plan the pair's Ray containers
  dgxspark.vllm.engine_plan:
    members: "{{ dgxspark_node.members }}"
    head: "{{ dgxspark_node.head }}"
    spec: ray_cluster_spec
    before: ray_cluster_before
    image_id: ray_cluster_image_id
    workers_follow_head: true
    publish: ray_cluster
"""

RETURN = r"""
fingerprint:
  description: The cluster's fingerprint, 16 hex digits.
  returned: always
  type: str
  sample: 3f1c0a9b7d2e4f60
settled:
  description: Whether this member's container already runs as its spec says.
  returned: always
  type: bool
switch:
  description: Whether any container of the cluster is to change.
  returned: always
  type: bool
nodes:
  description: Per member, C(settled), C(why) (in words, empty when settled) and C(started_at).
  returned: always
  type: dict
reasons:
  description: Why the cluster is switched, one sentence a member; empty when it is not.
  returned: always
  type: list
  elements: str
"""
