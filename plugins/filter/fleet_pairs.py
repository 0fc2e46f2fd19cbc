# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that turn an inventory into the fleet model: pairs, heads, workers."""

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_pairs
short_description: Resolve the clusters of a DGX Spark fleet from the inventory
version_added: 0.2.0
deprecated:
  why: No role or playbook of the collection uses it; the fleet action publishes the same model with each node's place.
  removed_in: 1.0.0
  alternative: The action M(dgxspark.vllm.fleet) (C(dgxspark_fleet), C(dgxspark_node)).
author:
  - dgxspark.vllm maintainers
description:
  - Takes the C(groups) magic variable and C(hostvars) and returns one entry per cluster of the fleet group (a pair
    is a cluster of two), with its head, workers, members in rank order and every host's fabric IP.
  - The same model as the action plugin M(dgxspark.vllm.fleet), which the roles use (it also publishes each node's
    place as C(dgxspark_node)); this filter serves playbooks that only need the clusters, such as status.yml.
  - A cluster is a group whose hosts are all in the fleet group and which holds exactly one host with
    C(dgxspark_node_role=head). A host may name its cluster explicitly with C(dgxspark_cluster) (or the older
    C(dgxspark_pair)), which wins over group membership. A cluster has 1 to 8 nodes.
  - Inconsistent inventories are reported, not guessed. The result's C(errors) lists every problem with the
    cluster or host it concerns and how to fix it (a host in no cluster or in two, a cluster without a head or with
    two, more than 8 nodes, a fabric topology that does not fit, duplicate fabric IPs, a GPU count that does not
    match the parallelism).
positional: _input
options:
  _input:
    description: The C(groups) magic variable.
    type: dict
    required: true
  hostvars:
    description: The C(hostvars) magic variable.
    type: dict
    required: true
  fleet:
    description: Name of the fleet group.
    type: str
    default: spark_pairs
  gpus_per_pair:
    description: Expected GPUs per cluster (tensor parallel size times pipeline parallel size); 0 skips the check.
    type: int
    default: 0
  gpus_per_node:
    description: GPUs per node (one GB10 per DGX Spark).
    type: int
    default: 1
"""

EXAMPLES = r"""
- name: Resolve the fleet
  ansible.builtin.set_fact:
    fleet: "{{ groups | dgxspark.vllm.fleet_pairs(hostvars, gpus_per_pair=2) }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: The fleet model.
  type: dict
  contains:
    pairs:
      description: Cluster name to C(head), C(workers), C(members) and C(hosts) (rank order, head first), C(size),
        C(gpus), C(topology) and C(fabric_ips).
      type: dict
    host_pair:
      description: Host name to its cluster name.
      type: dict
    errors:
      description: Problems found, each a sentence naming the cluster or host, the variable and the fix.
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import plain_hostvars, resolve_fleet


def fleet_pairs(groups, hostvars, fleet="spark_pairs", gpus_per_pair=0, gpus_per_node=1):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.fleet_pairs filter is deprecated: no role or playbook uses it; use the "
                         "dgxspark.vllm.fleet action (dgxspark_fleet, dgxspark_node)", version="1.0.0",
                         collection_name="dgxspark.vllm")
    if not isinstance(groups, dict):
        raise AnsibleFilterError("fleet_pairs expects the 'groups' magic variable as input")
    groups = {name: list(members) for name, members in groups.items()}
    try:
        plain = plain_hostvars(groups, hostvars, fleet)
    except Exception as exc:  # hostvars is a lazy mapping; surface template errors clearly
        raise AnsibleFilterError(f"fleet_pairs could not read hostvars: {exc}") from exc
    try:
        expected, per_node = int(gpus_per_pair), int(gpus_per_node)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"fleet_pairs: gpus_per_pair and gpus_per_node must be integers, are {gpus_per_pair!r}"
                                 f" and {gpus_per_node!r}") from exc
    model = resolve_fleet(groups, plain, fleet=fleet, gpus_per_node=per_node)
    errors = list(model["errors"]) + gpu_count_errors(model["clusters"], expected)
    return {"pairs": model["clusters"], "host_pair": model["host_cluster"], "errors": errors}


def gpu_count_errors(clusters, expected):
    """A sentence for each cluster whose GPUs are not the EXPECTED count (gpus_per_pair; 0 checks nothing)."""
    if not expected:
        return []
    errors = []
    for name, entry in sorted(clusters.items()):
        if entry["gpus"] != expected:
            errors.append(f"cluster {name}: it has {entry['size']} Spark(s) ({', '.join(entry['members']) or 'none'}) ="
                          f" {entry['gpus']} GPU(s), but gpus_per_pair is {expected} (the GPUs tensor x pipeline"
                          f" parallel size needs): add or remove nodes in group {name} so that it has {expected},"
                          f" or pass gpus_per_pair={entry['gpus']}")
    return errors


class FilterModule:
    def filters(self):
        return {"fleet_pairs": fleet_pairs}
