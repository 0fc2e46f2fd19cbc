# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that sizes a rolling play's batches to whole clusters (plugins/module_utils/_fleet.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: cluster_batches
short_description: The batch sizes of a rolling play (its serial list) that keep every cluster whole
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers
description:
  - Takes the C(groups) magic variable and C(hostvars) and returns the list of batch sizes for a play's C(serial)
    (with C(order=inventory)) such that each batch holds O(clusters) whole clusters, whatever their sizes (a pair,
    four Sparks on a switch, a single Spark).
  - Fails, naming the cluster, when the inventory is not a valid fleet or when a cluster's hosts are not listed
    together (Ansible cuts batches by count, so such a cluster would be split).
  - Ansible templates a play's C(serial) before the play runs, with the C(hostvars) of the plays before it. With no
    C(hostvars) (C(--syntax-check), or a first play) it returns V([1]) - one node per batch - and the rollout role's
    whole-cluster check refuses to run a batch that splits a cluster.
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
  clusters:
    description: Clusters per batch.
    type: int
    default: 1
  service_groups:
    description:
      - The groups of the collection's services (gateway, monitoring), never clusters even when they hold a head alone.
    type: list
    elements: str
    default: [dgxspark_gateway, dgxspark_monitoring]
"""

EXAMPLES = r"""
- name: Roll out cluster by cluster
  hosts: spark_pairs
  order: inventory
  serial: "{{ groups | dgxspark.vllm.cluster_batches(hostvars, clusters=2) }}"
  roles:
    - role: dgxspark.vllm.rollout
"""

RETURN = r"""
_value:
  description: Batch sizes, in nodes, in inventory order.
  type: list
  elements: int
  sample: [2, 2, 4, 1]
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import cluster_batches as _batches
from ansible_collections.dgxspark.vllm.plugins.module_utils._fleet import SERVICE_GROUPS, plain_hostvars, resolve_fleet


def cluster_batches(groups, hostvars, fleet="spark_pairs", clusters=1, service_groups=SERVICE_GROUPS):
    if not isinstance(groups, dict):
        raise AnsibleFilterError("cluster_batches expects the 'groups' magic variable as input")
    if not hostvars:
        return [1]
    groups = {name: list(members) for name, members in groups.items()}
    try:
        plain = plain_hostvars(groups, hostvars, fleet)
    except Exception as exc:  # hostvars is a lazy mapping; surface template errors clearly
        raise AnsibleFilterError(f"cluster_batches could not read hostvars: {exc}") from exc
    model = resolve_fleet(groups, plain, fleet=fleet, service_groups=service_groups)
    if model["errors"]:
        raise AnsibleFilterError("the inventory is not a valid fleet: " + " | ".join(model["errors"]))
    try:
        return _batches(model, groups.get(fleet, []), int(clusters))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"cluster_batches": cluster_batches}
