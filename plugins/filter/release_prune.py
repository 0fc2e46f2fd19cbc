# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The serving images a prune removes, keeping releases by name and by ID (plugins/module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: release_prune
short_description: The image names a prune removes, keeping the kept releases by name and by ID
version_added: 0.2.0
author:
- dgxspark.vllm maintainers
description:
- Reads the lines of C(docker image ls --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}') and returns the names
  of the images that are neither named in O(keep_names) (nor another tag of such an image) nor have an ID in
  O(keep_ids). A release's image whose tag has since moved to another image is kept by its ID.
- Untagged images (C(<none>)) are never returned (Docker's own pruning removes them).
positional: _input
options:
  _input:
    description: The listing's lines.
    type: list
    elements: str
    required: true
  keep_names:
    description: Image names to keep.
    type: list
    elements: str
    default: []
  keep_ids:
    description: Image IDs to keep (C(sha256:<id>), or the short ID).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Remove the images that are neither the new nor the previous release
  community.docker.docker_image_remove:
    name: "{{ item }}"
  loop: >-
    {{ rollout_repo_images.stdout_lines | dgxspark.vllm.release_prune(keep_names=[rollout_image],
       keep_ids=[rollout_previous.image_id]) }}
"""

RETURN = r"""
_value:
  description: The names (C(repository:tag)) to remove.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def release_prune(listed, keep_names=None, keep_ids=None):
    for name, value in (("the listing", listed), ("keep_names", keep_names or []), ("keep_ids", keep_ids or [])):
        if not isinstance(value, (list, tuple)):
            raise AnsibleFilterError(f"release_prune: {name} must be a list, is {value!r}")
    return _release.prune_images(listed, keep_names or [], keep_ids or [])


class FilterModule:
    def filters(self):
        return {"release_prune": release_prune}
