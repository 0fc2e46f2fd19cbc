# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What differs between two releases (plugins/module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: release_compare
short_description: What differs between two releases
version_added: 0.2.0
deprecated:
  why: No role or playbook of the collection uses it.
  removed_in: 1.0.0
  alternative: Compare the release records themselves (C(release.json) on the heads).
author:
- dgxspark.vllm maintainers
description:
- Compares the image, model, model revision, served model name, backend, every serving setting, and the endpoint when both
  have one. The image ID and timings are not compared (an older record has no ID).
positional: _input
options:
  _input:
    description: The release before (may be empty).
    type: dict
    required: true
  new:
    description: The release after.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: What the rollout changes
  ansible.builtin.debug:
    msg: "{{ (rollout_previous | dgxspark.vllm.release_compare(vllm_serve_result.release)).changes }}"
"""

RETURN = r"""
_value:
  description: C(same) (bool) and C(changes) (key, or C(settings.<key>), to C([before, after])).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def release_compare(old, new):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.release_compare filter is deprecated: no role or playbook uses it; compare "
                         "the release records (release.json) themselves", version="1.0.0",
                         collection_name="dgxspark.vllm")
    if not isinstance(new, dict) or (old is not None and not isinstance(old, dict)):
        raise AnsibleFilterError("release_compare: both releases must be dicts")
    return _release.compare(old, new)


class FilterModule:
    def filters(self):
        return {"release_compare": release_compare}
