#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.fleet_status (it runs on the controller)."""

from __future__ import annotations

# The action plugin (plugins/action/fleet_status.py) runs on the controller and declares supports_check_mode there
# (_supports_check_mode = True: it reads what the members registered and changes nothing); this file only documents it.

DOCUMENTATION = r"""
module: fleet_status
short_description: Draw each cluster's status table from what its members read
version_added: 0.16.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the controller, once, over the fleet M(dgxspark.vllm.fleet) published (C(dgxspark_fleet)). For each
    cluster it reads what each member registered from M(dgxspark.vllm.status_info) and what the head registered from
    M(dgxspark.vllm.ray_cluster_info), and draws the cluster's table - its line (the engine the head serves, its
    health and token counter, what is wrong, and the Ray cluster or why it is not running; a release served with the
    C(mp) backend says it runs without Ray), a row per member with its containers and their states, then the
    watchdog's line and last events.
  - A head the play lost has no summary, and the line says so. A member that registered nothing has an empty row.
  - The engine containers are the layout's (C(ray_cluster_head_container), C(vllm_serve_mp_container)), the
    inventory's names where it sets them.
  - It replaces the filter C(dgxspark.vllm.cluster_status) and the C(hostvars) reads of C(playbooks/status.yml).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  node_info:
    description: The variable each member registered M(dgxspark.vllm.status_info)'s answer as.
    type: str
    default: status_node
  ray_info:
    description: The variable each head registered M(dgxspark.vllm.ray_cluster_info)'s answer as.
    type: str
    default: status_ray
seealso:
  - module: dgxspark.vllm.status_info
  - module: dgxspark.vllm.fleet
"""

EXAMPLES = r"""
- name: Draw one table per cluster
  dgxspark.vllm.fleet_status:
  register: status_tables
  run_once: true

- name: Show them
  ansible.builtin.debug:
    msg: "{{ item.value }}"
  loop: "{{ status_tables.tables | dict2items }}"
  loop_control:
    label: "{{ item.key }}"
  run_once: true
"""

RETURN = r"""
tables:
  description: Each cluster's lines, by cluster.
  returned: success
  type: dict
  sample:
    pair1:
      - "pair1: model qwen at http://10.0.0.11:8000, health 200, tokens generated 42; Ray 2/2 nodes alive
        (192.168.100.11, 192.168.100.12), GPUs 0.0 free of 2.0, Ray 2.54.1"
      - "  spark-1  /dgxspark-ray-head  Up 5 minutes"
      - "  spark-2  /dgxspark-ray-worker  Up 5 minutes"
      - "  watchdog: none on the head"
"""
