# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role variables a release is built from (plugins/module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: release_variables
short_description: The role variables a release is built from
version_added: 0.2.0
author:
- dgxspark.vllm maintainers
description:
- The names of the variables whose values C(dgxspark.vllm.release) takes, in its order - the release keys (C(image), C(model),
  C(model_revision), C(served_model_name), C(backend)) then every serving setting of the table in C(plugins/module_utils/_release.py),
  each prefixed.
positional: _input
options:
  _input:
    description: The prefix of the variables (V(vllm_serve_)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The release's inputs
  ansible.builtin.debug:
    msg: "{{ query('ansible.builtin.vars', *('vllm_serve_' | dgxspark.vllm.release_variables)) }}"
"""

RETURN = r"""
_value:
  description: The variable names.
  type: list
  elements: str
"""

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def release_variables(prefix=_release.VARIABLE_PREFIX):
    return _release.variable_names(prefix or _release.VARIABLE_PREFIX)


class FilterModule:
    def filters(self):
        return {"release_variables": release_variables}
