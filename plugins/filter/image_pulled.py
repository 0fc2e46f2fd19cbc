# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node's pull of dgxspark_image left: its ID and the registry's digest (plugins/module_utils/_image_pull.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: image_pulled
short_description: The image a node pulled, by ID and by the registry's digest
version_added: 0.3.0
deprecated:
  why: The action M(dgxspark.vllm.source_image) pulls the image and returns this record in one step; no role or
    playbook of the collection uses the filter.
  removed_in: 1.0.0
  alternative: The action M(dgxspark.vllm.source_image) (its RV(dgxspark.vllm.source_image#module:image)).
author:
- dgxspark.vllm maintainers
description:
- From the engine's inspection of the image after the pull (M(community.docker.docker_image_pull)'s C(image), or an
  entry of M(community.docker.docker_image_info)'s C(images)), the record the release keeps of the source image - the
  reference, the image ID and the registry's digest under the reference's repository (C(repository@sha256:...), empty
  for an image never pulled, such as one built or loaded on the node).
- A reference pinned by digest (C(name@sha256:...)) is its own digest when the engine lists it.
- Fails naming the host, C(dgxspark_image) and the fix when the image is not on the node (with O(policy=never), nothing
  pulls it), when O(policy) is none of V(missing), V(always), V(never), or when the reference's digest is malformed.
positional: _input
options:
  _input:
    description: The engine's inspection of the image (C(Id), C(RepoDigests)); empty when it is not there.
    type: dict
    required: true
  reference:
    description: The image reference pulled (C(dgxspark_image)).
    type: str
    required: true
  policy:
    description: C(dgxspark_image_pull) - V(missing), V(always) or V(never).
    type: str
    default: missing
  changed:
    description: Whether the pull task changed something (it pulled a new image; in check mode, it would have).
    type: bool
    default: false
  host:
    description: The host named in errors (C(inventory_hostname)).
    type: str
"""

EXAMPLES = r"""
- name: Publish what the pull left
  ansible.builtin.set_fact:
    image_pull_result: >-
      {{ image_pull_pulled.image | dgxspark.vllm.image_pulled(reference=image_pull_image, policy=image_pull_policy,
         changed=image_pull_pulled is changed, host=inventory_hostname) }}
"""

RETURN = r"""
_value:
  description:
  - C(image) (the reference), C(id) (C(sha256:...)), C(digest) (C(repository@sha256:...) or empty), C(pulled) (this
    run pulled it), C(policy).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils import _image_pull


def image_pulled(image, reference="", policy="missing", changed=False, host=""):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.image_pulled filter is deprecated: use the dgxspark.vllm.source_image "
                         "action, which pulls the image and returns this record in one step", version="1.0.0",
                         collection_name="dgxspark.vllm")
    try:
        return _image_pull.pulled(image, reference, policy=policy, changed=bool(changed), host=host or "")
    except _image_pull.PullError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"image_pulled": image_pulled}
