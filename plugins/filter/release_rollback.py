# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release a rollback serves: the stored record with its image named by ID (plugins/module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: release_rollback
short_description: The stored release with its image named by ID, as a rollback serves it
version_added: 0.2.0
author:
- dgxspark.vllm maintainers
description:
- Returns the release record (C(release.json) on the head) with C(image) replaced by the record's C(image_id), so a
  rollback serves the image that served, even when its tag has since moved to another image (an overlay rebuilt
  under the same tag).
- Given O(host), the image is that member's own ID from the record's C(image_ids), since one image has another ID on a node
  with the containerd image store than on a graph-driver node, so each member of a mixed cluster serves its own. A
  member the record does not list serves the head's C(image_id).
- A record without an image ID (an older record) keeps its image name.
- Fails when there is no record, or the record has no image.
positional: _input
options:
  _input:
    description: The stored release record.
    type: dict
    required: true
  host:
    description: The member that serves the rollback (C(inventory_hostname)); omitted, the head's ID.
    type: str
"""

EXAMPLES = r"""
- name: Serve the previous release again, its image by ID
  ansible.builtin.include_role:
    name: dgxspark.vllm.vllm_serve
  vars:
    vllm_serve_restore: "{{ rollout_previous | dgxspark.vllm.release_rollback(host=inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: The record, C(image) being C(sha256:<id>) (the member's own where the record lists it) when the record
    holds the ID.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def release_rollback(record, host=None):
    try:
        return _release.rollback_record(record, host)
    except _release.ReleaseError as exc:
        raise AnsibleFilterError(f"release_rollback: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"release_rollback": release_rollback}
