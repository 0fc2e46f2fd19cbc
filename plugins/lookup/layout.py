# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
name: layout
author:
  - dgxspark.vllm maintainers (@dgxspark)
version_added: 0.12.0
short_description: Where the collection keeps a directory, a file or an engine container on a node
description:
  - Returns the place of each term, a variable of the collection's layout (C(vllm_serve_config_dir),
    C(watchdog_state_dir), C(ray_cluster_head_container), ...) - the inventory's value where it sets the variable,
    the collection's otherwise.
  - The one place those defaults are written (C(module_utils/_layout.py)); the role that owns a variable keeps the same
    value in its defaults. A role or playbook that reads another role's place asks here.
  - Two terms name fixed places inside an engine container, which no variable moves - C(engine_serve_env), where the
    head's launcher reads the serving environment, and C(engine_ray_token), where the launcher reads the cluster's
    Ray token (both since version 0.16.0).
  - An unknown term fails, naming the ones the layout holds.
options:
  _terms:
    description: Variables of the layout.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Read the release record wherever vllm_serve keeps it
  ansible.builtin.slurp:
    src: "{{ lookup('dgxspark.vllm.layout', 'vllm_serve_config_dir') }}/release.json"
"""

RETURN = r"""
_raw:
  description: The place of each term (a path or a container name).
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.dgxspark.vllm.plugins.module_utils._layout import LayoutError, place


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        out = []
        for term in terms:
            name = str(term)
            given = variables.get(name) if name in variables else None
            if isinstance(given, str) and "{{" in given:
                given = self._templar.template(given)
            try:
                out.append(place(name, given))
            except LayoutError as exc:
                raise AnsibleLookupError(f"dgxspark.vllm.layout: {exc.args[0]}") from None
        return out
