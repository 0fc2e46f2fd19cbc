# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Complete a release into the record written to the head (plugins/module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: release_record
short_description: Complete a release into the record written to the head (release.json)
version_added: 0.2.0
author:
- dgxspark.vllm maintainers
description:
- Adds to a release from C(dgxspark.vllm.release) what is known only on the nodes - the known-bad combinations' decision on
  C(enforce_eager), the remedies applied, the API endpoint and the serving image's ID.
- Fails naming the host when C(enforce_eager) stays undecided or the endpoint lacks a host, port or URL.
positional: _input
options:
  _input:
    description: The release from C(dgxspark.vllm.release).
    type: dict
    required: true
  enforce_eager:
    description: The decided C(--enforce-eager) (V(null) keeps the release's own value).
    type: bool
  remedies:
    description: The known-bad combinations remedied (C(dgxspark.vllm.known_issues)'s C(remedies)).
    type: list
    elements: dict
  endpoint:
    description:
    - The API - C(url) (with C(/v1)), C(host) (the bind address) and C(port).
    - Or, in place of C(url), the head's C(lan_ip), whether the fleet has C(gateways) and whether the door speaks TLS
      (C(door_tls)), from which the clients' URL is made (the head's door on its LAN address, or the engine's own
      behind gateways; an IPv6 address bracketed).
    type: dict
  image_id:
    description: The serving image's ID (C(sha256:...)); empty when not known.
    type: str
  image_ids:
    description:
    - Each member's ID of the serving image (inventory name to C(sha256:...)); the IDs differ across image stores
      (containerd store against a graph driver). Empty IDs are left out.
    type: dict
  source:
    description:
    - The image the serving image was built from, as the head pulled it (C(dgxspark.vllm.image_pull)'s
      C(image_pull_result)) - C(image), C(id), C(digest) (C(repository@sha256:...)); recorded as C(source).
    type: dict
    version_added: 0.3.0
  host:
    description: The host named in errors (C(inventory_hostname)).
    type: str
"""

EXAMPLES = r"""
- name: Complete the release
  ansible.builtin.set_fact:
    vllm_serve_release: >-
      {{ vllm_serve_wanted | dgxspark.vllm.release_record(enforce_eager=vllm_serve_known_issues.settings.enforce_eager,
         remedies=vllm_serve_known_issues.remedies, image_id=vllm_serve_image_facts.id | default('', true),
         endpoint={'url': 'http://10.0.0.11:8000/v1', 'host': '10.0.0.11', 'port': 8000}, host=inventory_hostname) }}
"""

RETURN = r"""
_value:
  description:
  - The record - C(image), C(image_id), C(image_ids), C(model), C(model_revision), C(served_model_name), C(backend), C(settings), C(endpoint)
    (C(url), C(host), C(port)), C(remedies), C(source) (C(image), C(id), C(digest) of the pulled source image, or
    empty). No secrets.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def release_record(wanted, enforce_eager=None, remedies=None, endpoint=None, image_id="", image_ids=None, source=None,
                   host=None):
    try:
        return _release.finish(wanted, enforce_eager=enforce_eager, remedies=remedies or [], endpoint=endpoint,
                               image_id=image_id or "", image_ids=image_ids, source=source)
    except (_release.ReleaseError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"{host or ''}{': ' if host else ''}release_record: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"release_record": release_record}
