# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The named volumes of an engine container's compile caches (what teardown_purge removes)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: node_cache_volumes
short_description: The named volumes an engine container keeps its compile caches in
version_added: 0.2.0
deprecated:
  why: The action M(dgxspark.vllm.fleet) publishes every node's engine settings resolved and checked
    (C(dgxspark_node.engine.cache_volumes)), whose values are these names; no playbook of the collection uses the filter.
  removed_in: 1.0.0
  alternative: The values of C(dgxspark_node.engine.cache_volumes), as M(dgxspark.vllm.fleet) publishes them.
author:
  - dgxspark.vllm maintainers
description:
  - Returns the Docker volume names of the compile caches that C(dgxspark.vllm.node_container) mounts into every
    engine container (Ray head, Ray worker, mp rank), sorted and without repeats - the same defaults and the same
    validation, so that C(teardown.yml) removes exactly what the engine containers use.
positional: _input
options:
  _input:
    description:
      - Container path -> named volume (C(dgxspark_node.engine.cache_volumes), the inventory's
        C(dgxspark_engine_cache_volumes)); V(null) means the defaults (C(dgxspark-vllm-cache),
        C(dgxspark-flashinfer-cache), C(dgxspark-triton-cache)).
    type: dict
"""

EXAMPLES = r"""
- name: Remove the engines' compile-cache volumes
  community.docker.docker_volume:
    name: "{{ item }}"
    state: absent
  loop: "{{ dgxspark_node.engine.cache_volumes | dgxspark.vllm.node_cache_volumes }}"
"""

RETURN = r"""
_value:
  description: The volume names, sorted.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils._node_container import ContainerError, cache_volume_names


def node_cache_volumes(cache_volumes=None):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.node_cache_volumes filter is deprecated: the fleet action publishes each "
                         "node's engine settings resolved (dgxspark_node.engine.cache_volumes)", version="1.0.0",
                         collection_name="dgxspark.vllm")
    try:
        return cache_volume_names(cache_volumes)
    except ContainerError as exc:
        raise AnsibleFilterError(f"node_cache_volumes: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"node_cache_volumes": node_cache_volumes}
