# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release a cluster serves, built and checked from the vllm_serve role's variables (plugins/module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: release
short_description: The release a cluster serves, built and checked from the vllm_serve role's variables
version_added: 0.2.0
author:
- dgxspark.vllm maintainers
description:
- Builds the release (image, model, model revision, served model name, backend and every serving setting of the table in C(plugins/module_utils/_release.py))
  from the role variables' values, each converted to its type.
- A bad value stops with the host, the variable and the fix (an empty image or model, an unknown backend, a number that is
  not one, a GPU memory share outside (0, 1], automatic tool choice without a parser, an extra argument repeating a flag a
  setting renders).
- With O(restore), the stored release record (C(release.json), also an older one without image IDs) instead;
  settings the record predates take the variables' values. This is the rollback target.
- The result has no endpoint, image ID or remedies yet, and C(enforce_eager) may be V(null) (undecided); complete it with
  C(dgxspark.vllm.release_record) before rendering it with C(dgxspark.vllm.serve_argv).
positional: _input
options:
  _input:
    description:
    - The values of the variables C(dgxspark.vllm.release_variables) names, in that order (a list), or a dict keyed by release
      key (C(image), C(model), ..., C(tensor_parallel_size), ...).
    type: raw
    required: true
  restore:
    description: A stored release record to serve again; empty for none.
    type: dict
  host:
    description: The host named in errors (C(inventory_hostname)).
    type: str
  nodes:
    description:
    - The number of nodes of the cluster that serves it (C(dgxspark_node.size)). A single Spark serves in one engine
      container without Ray or multi-node flags, so with V(1) the backend is V(mp) whatever the variables say.
    type: int
"""

EXAMPLES = r"""
- name: Take the release to serve
  ansible.builtin.set_fact:
    vllm_serve_wanted: >-
      {{ query('ansible.builtin.vars', *('vllm_serve_' | dgxspark.vllm.release_variables))
         | dgxspark.vllm.release(restore=vllm_serve_restore, host=inventory_hostname, nodes=dgxspark_node.size) }}
"""

RETURN = r"""
_value:
  description: The release - C(image), C(model), C(model_revision), C(served_model_name), C(backend), C(settings).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def release(values, restore=None, host=None, nodes=None):
    """values: the role variables' values in release_variables order (a list), or a dict keyed by release key."""
    keys = _release.RELEASE_KEYS + _release.SETTING_KEYS
    if isinstance(values, dict):
        inputs = dict(values)
    else:
        values = list(values or [])
        if len(values) != len(keys):
            raise AnsibleFilterError(f"{host or ''}{': ' if host else ''}release: expected {len(keys)} values"
                                     f" (release_variables), got {len(values)}")
        inputs = dict(zip(keys, values))
    try:
        result = _release.rollback_target(restore, inputs) if restore else _release.build(inputs)
        return _release.for_cluster(result, nodes)
    except _release.ReleaseError as exc:
        raise AnsibleFilterError(f"{host or ''}{': ' if host else ''}release: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"release": release}
