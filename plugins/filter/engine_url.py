# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's own URL on its head, from a release record (module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: engine_url
short_description: The URL at which a cluster's head reaches its own engine
version_added: 0.8.0
author:
- dgxspark.vllm maintainers
description:
- Returns the engine's base URL (without C(/v1)) as the head itself reaches it. An engine bound to the loopback or
  to every address is reached on the loopback, any other on its bind address.
- The release's C(endpoint.url) is the clients' URL (the head's door on its LAN address), which asks every route for
  a client key. What runs on the head, such as the deploy's probes, asks the engine here with the engines' key.
- An empty string for a release without an endpoint.
positional: _input
options:
  _input:
    description: The release record (C(release.json) on the head).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Ask the engine on the head for a completion
  dgxspark.vllm.serve_probe:
    url: "{{ release | dgxspark.vllm.engine_url }}"
    model: "{{ release.served_model_name }}"
    api_key_file: /etc/dgxspark/vllm/serve.env
"""

RETURN = r"""
_value:
  description: The base URL, such as C(http://127.0.0.1:8000), or an empty string.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def engine_url(release):
    if not isinstance(release, dict):
        raise AnsibleFilterError(f"engine_url: the release must be a dict, is {type(release).__name__}")
    try:
        return _release.engine_url(release)
    except _release.ReleaseError as exc:
        raise AnsibleFilterError(f"engine_url: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"engine_url": engine_url}
