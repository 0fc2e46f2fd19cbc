# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that checks variables against their grammar (module_utils/_inputs), for a role's own input check."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils._inputs import VARIABLES, check_value

DOCUMENTATION = r"""
name: input_problems
short_description: Check values against the grammar of the variables they reach files, lines and argv as
version_added: 0.2.0
deprecated:
  why: The action M(dgxspark.vllm.hybrid_image_plan) checks the role's images against the same grammar with the
    rest of its inputs, in one step; no role or playbook of the collection uses the filter.
  removed_in: 1.0.0
  alternative: The action M(dgxspark.vllm.hybrid_image_plan).
author:
  - dgxspark.vllm maintainers
description:
  - Takes a dict of variable name to value and returns one sentence a problem, naming the host, the variable and the
    fix, by the same checks as M(dgxspark.vllm.fleet) runs on the inventory at the start of every playbook - IP
    addresses, keys and tokens (their values are never repeated), names, image references, Hugging Face ids,
    revisions, the collection's own directories and the weights' directories.
  - A role uses it on the values it was given as role variables, which the fleet's check of the inventory does not
    see. An unset or empty value passes (the role requires what it needs).
positional: _input, host
options:
  _input:
    description: Variable name to value. Each name must be one the checks know (or carry O(kinds)).
    type: dict
    required: true
  host:
    description: The host the values are for, named in each problem.
    type: str
    required: true
  kinds:
    description:
      - Variable name to the kind of value (V(ip), V(secret), V(hf_token), V(name), V(image), V(model), V(model_or_path),
        V(revision), V(own_dir), V(data_dir)), for names the checks do not know.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Check the image the Dockerfile starts FROM
  vars:
    problems: "{{ {'hybrid_image_source': hybrid_image_source} | dgxspark.vllm.input_problems(inventory_hostname) }}"
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join(' | ') }}"
    quiet: true
"""

RETURN = r"""
_value:
  description: One sentence a problem; empty when every value passes.
  type: list
  elements: str
  sample:
    - "host spark-1: hybrid_image_source is 'lab/vllm:0.17\\nRUN id', not an image reference; set it to ..."
"""


def input_problems(values, host, kinds=None):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.input_problems filter is deprecated: use the "
                         "dgxspark.vllm.hybrid_image_plan action, which checks the role's images against the same "
                         "grammar with the rest of its inputs", version="1.0.0", collection_name="dgxspark.vllm")
    kinds = kinds or {}
    if not isinstance(values, dict):
        raise AnsibleFilterError(f"input_problems takes a dict of variable to value (got {type(values).__name__})")
    problems = []
    for variable, value in values.items():
        kind = kinds.get(variable) or VARIABLES.get(variable)
        if kind is None:
            raise AnsibleFilterError(f"input_problems: no check for {variable}; give its kind in kinds=")
        try:
            problem = check_value(host, variable, value, kind)
        except KeyError:
            raise AnsibleFilterError(f"input_problems: {variable}: no kind '{kind}'") from None
        if problem:
            problems.append(problem)
    return problems


class FilterModule:
    def filters(self):
        return {"input_problems": input_problems}
