# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that tells what keeps a requirements file from being a hashed lock."""

from __future__ import annotations

DOCUMENTATION = r"""
name: pip_lock_problems
short_description: What keeps a requirements file from being a lock that pip installs with --require-hashes
version_added: 0.2.0
deprecated:
  why: The action M(dgxspark.vllm.hybrid_image_plan) checks the hashed lock Ray is installed from, in one step;
    no role or playbook of the collection uses the filter.
  removed_in: 1.0.0
  alternative: The action M(dgxspark.vllm.hybrid_image_plan).
author:
  - dgxspark.vllm maintainers
description:
  - Reads the text of a pip requirements file and returns one message per problem, naming O(source) - an empty list
    when every requirement is pinned with C(==) and carries at least one C(--hash=sha256:...), as
    C(pip install --require-hashes) needs.
  - With O(package) and O(version), the file must also pin that package at exactly that version (the
    P(dgxspark.vllm.hybrid_image#role) role checks its Ray lock against C(hybrid_image_ray_version) this way).
positional: _input
options:
  _input:
    description: The text of the requirements file.
    type: str
    required: true
  source:
    description: The file's name, for the messages.
    type: str
    default: the lock
  package:
    description: A package the lock must pin.
    type: str
    default: ""
  version:
    description: The version O(package) must be pinned at.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Refuse a Ray lock that is not hashed or pins another Ray
  ansible.builtin.assert:
    that: lock_problems | length == 0
    fail_msg: "{{ lock_problems | join('; ') }}"
  vars:
    lock_problems: >-
      {{ lookup('ansible.builtin.file', 'ray.txt') | dgxspark.vllm.pip_lock_problems(source='ray.txt',
         package='ray', version='2.54.1') }}
"""

RETURN = r"""
_value:
  description: One message per problem; empty when the file is a hashed lock (that pins O(package) at O(version)).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils._pip_lock import problems


def pip_lock_problems(text, source="the lock", package="", version=""):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.pip_lock_problems filter is deprecated: use the "
                         "dgxspark.vllm.hybrid_image_plan action, which checks the hashed lock Ray is installed from",
                         version="1.0.0", collection_name="dgxspark.vllm")
    if not isinstance(text, str):
        raise AnsibleFilterError(f"pip_lock_problems expects the text of a requirements file, got {type(text).__name__}")
    return problems(text, source, package, version)


class FilterModule:
    def filters(self):
        return {"pip_lock_problems": pip_lock_problems}
