# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One cluster's status table, as playbooks/status.yml shows it (module_utils/_status.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: cluster_status
short_description: One cluster's status table (engine, token counter, Ray, every member's containers)
version_added: 0.2.0
deprecated:
  why: The action M(dgxspark.vllm.fleet_status) draws every cluster's table from what its members read; no playbook of
    the collection uses the filter.
  removed_in: 1.0.0
  alternative: The action M(dgxspark.vllm.fleet_status) (its RV(dgxspark.vllm.fleet_status#module:tables)).
author:
- dgxspark.vllm maintainers
description:
- Returns the lines C(playbooks/status.yml) shows for a cluster. The first is the cluster's name, a colon and a
  summary; the engine the head serves (from its release record and containers, as M(dgxspark.vllm.status_info) finds
  it), its C(/health) code, the sum of C(vllm:generation_tokens_total) in its C(/metrics), what is wrong (an unhealthy
  engine, or Ray short of nodes), and the Ray cluster (nodes alive of the cluster's size, their addresses, GPUs,
  dead nodes, Ray version) or why it is not running; a release served with the C(mp) backend says it runs without Ray.
- Then one row per member, in order, with its containers' names and states.
positional: _input
options:
  _input:
    description: The cluster's members, in rank order.
    type: list
    elements: str
    required: true
  cluster:
    description: The cluster's name.
    type: str
    required: true
  head:
    description: The cluster's head (one of the members).
    type: str
    required: true
  containers:
    description: Each member's containers (M(dgxspark.vllm.status_info)'s or M(community.docker.docker_host_info)'s
      C(containers)), in the order of the members.
    type: list
    elements: list
    required: true
  release:
    description: The head's C(release.json), as M(ansible.builtin.slurp) returned it (or the record); empty when there is none.
    type: dict
  health:
    description: The status code of the engine's C(/health) (-1 or none when it did not answer).
    type: int
  metrics:
    description: The text of the engine's C(/metrics), or the counter lines M(dgxspark.vllm.status_info) returns.
    type: str
  ray:
    description: The head's M(dgxspark.vllm.ray_cluster_info) result; empty when the head was not reached.
    type: dict
  head_in_play:
    description: Whether the head is still in the play (a head that dropped out has no summary).
    type: bool
    default: true
  ray_head_container:
    description: The Ray head container's name.
    type: str
    default: dgxspark-ray-head
  mp_container:
    description: The mp backend's container name.
    type: str
    default: dgxspark-vllm
  watchdog:
    description:
      - The watchdog's C(state.json) on the head (a C(slurp) result or the parsed state), as the role
        C(dgxspark.vllm.watchdog) keeps it. Given, the table ends with the watchdog's line (verdict, restarts of the
        cap, FAILED after the cap) and its last events; V(null) leaves them out.
    type: raw
"""

EXAMPLES = r"""
- name: Show one table per cluster
  ansible.builtin.debug:
    msg: >-
      {{ item.value.hosts | dgxspark.vllm.cluster_status(cluster=item.key, head=item.value.head,
         containers=item.value.hosts | map('extract', hostvars, ['status_node', 'containers']) | map('default', []) | list,
         release=hostvars[item.value.head].status_node.release | default({}),
         health=hostvars[item.value.head].status_node.health | default(-1),
         metrics=hostvars[item.value.head].status_node.metrics | default(''),
         ray=hostvars[item.value.head].status_ray | default({}),
         head_in_play=item.value.head in ansible_play_hosts,
         watchdog=hostvars[item.value.head].status_node.watchdog | default({})) }}
  loop: "{{ dgxspark_fleet.clusters | dict2items }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: The cluster's line, then a row for every member.
  type: list
  elements: str
  sample:
    - "pair1: model qwen at http://10.0.0.11:8000, health 200, tokens generated 42; Ray 2/2 nodes alive (192.168.100.11,
      192.168.100.12), GPUs 0.0 free of 2.0, Ray 2.54.1"
    - "  spark-1  /dgxspark-ray-head  Up 5 minutes"
    - "  spark-2  /dgxspark-ray-worker  Up 5 minutes"
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils import _status


def cluster_status(members, cluster="", head="", containers=None, release=None, health=None, metrics=None, ray=None,
                   head_in_play=True, ray_head_container=_status.RAY_HEAD_CONTAINER, mp_container=_status.MP_CONTAINER,
                   watchdog=None):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.cluster_status filter is deprecated: use the dgxspark.vllm.fleet_status "
                         "action, which draws every cluster's table from what its members read", version="1.0.0",
                         collection_name="dgxspark.vllm")
    if not isinstance(members, (list, tuple)) or not members:
        raise AnsibleFilterError(f"cluster_status: {cluster or 'the cluster'}: its members must be a non-empty list, are {members!r}")
    if not isinstance(containers, (list, tuple)):
        raise AnsibleFilterError(f"cluster_status: {cluster}: containers must be a list of each member's containers")
    if ray is not None and not isinstance(ray, dict):
        raise AnsibleFilterError(f"cluster_status: {cluster}: ray must be the ray_cluster_info result (a dict)")
    try:
        return _status.table(str(cluster), list(members), head=str(head), containers=list(containers), release=release,
                             health=health, metrics=metrics, ray=ray, head_in_play=bool(head_in_play),
                             ray_head_container=ray_head_container, mp_container=mp_container, watchdog=watchdog)
    except _status.StatusError as exc:
        raise AnsibleFilterError(f"cluster_status: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"cluster_status": cluster_status}
