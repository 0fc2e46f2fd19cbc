#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.release_info."""

from __future__ import annotations

DOCUMENTATION = r"""
module: release_info
short_description: Read a cluster's release record on its head, with the URLs and the rollback target it implies
version_added: 0.12.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads the release record the P(dgxspark.vllm.vllm_serve#role) role writes on a cluster's head (C(release.json)) in
    one call, and, when asked, the last rollout's record beside it.
  - Returns the record with what the roles derive from it - the engine's own URL on the head, the clients' URL, and
    the release a rollback serves (its image named by the node's own image ID).
  - The one reader of the record for the gateway, the doors, Prometheus, the rollout, the benchmark and the watchdog,
    in place of a C(slurp) and a template each.
  - A head without a record answers RV(exists=false) and empty values; a record that is no JSON object fails, naming
    the file.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  path:
    description: The release record.
    type: path
    default: /etc/dgxspark/vllm/release.json
  rollout_path:
    description: The last rollout's record (C(rollout.json), written by the P(dgxspark.vllm.rollout#role) role); not
      read when empty.
    type: path
    default: ""
  rollback_host:
    description:
      - The member whose rollback target RV(rollback) names (each member serves the image ID it recorded); the head's
        own ID when empty.
    type: str
    default: ""
seealso:
  - module: dgxspark.vllm.deploy_record
"""

EXAMPLES = r"""
- name: Read the cluster's release on its head
  dgxspark.vllm.release_info:
  register: release
  when: dgxspark_node.is_head

- name: Ask the engine on the head
  ansible.builtin.uri:
    url: "{{ release.engine_url }}/health"
  when: release.exists

- name: Read the release and the last rollout's record
  dgxspark.vllm.release_info:
    rollout_path: /etc/dgxspark/vllm/rollout.json
  register: records
"""

RETURN = r"""
exists:
  description: Whether the head holds a release record.
  returned: always
  type: bool
  sample: true
release:
  description: The record as written (image, image IDs, model, settings, endpoint, source); empty without one.
  returned: always
  type: dict
  sample: {image: "vllm-node:0.14", model: Qwen/Qwen3.5-122B-A10B-FP8, served_model_name: qwen3.5-122b-a10b-fp8}
engine_url:
  description: The engine's own base URL as the head reaches it (the loopback for an engine behind the door), without
    C(/v1); empty without a record or an endpoint.
  returned: always
  type: str
  sample: http://127.0.0.1:8000
url:
  description: The clients' URL the deploy recorded (with C(/v1)); empty without one.
  returned: always
  type: str
  sample: https://10.0.0.11:8000/v1
rollback:
  description: The release a rollback to this record serves, its image named by O(rollback_host)'s recorded image ID;
    empty without a record.
  returned: always
  type: dict
rollout:
  description: The last rollout's record (its switch window); empty when O(rollout_path) is empty or has no file.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._files import read_json_object
from ansible_collections.dgxspark.vllm.plugins.module_utils._release import ReleaseError, engine_url, rollback_record


def _record(path: str) -> dict | None:
    """The JSON object in PATH; None when there is no file. Raises ValueError naming the file and the fix when it is
    no object."""
    try:
        return read_json_object(path)
    except ValueError as exc:
        raise ValueError(f"{exc}: remove it and deploy the cluster again") from None


def read(path: str, rollout_path: str = "", rollback_host: str = "") -> dict:
    """The module's result for the record at PATH (and the rollout's at ROLLOUT_PATH); nothing is changed."""
    release = _record(path)
    rollout = (_record(rollout_path) if rollout_path else None) or {}
    if not release:
        return {"changed": False, "exists": release is not None, "release": release or {}, "engine_url": "",
                "url": "", "rollback": {}, "rollout": rollout}
    try:
        url = engine_url(release)
    except ReleaseError as exc:
        raise ValueError(f"{path}: {exc}") from None
    try:
        rollback = rollback_record(release, rollback_host or None)
    except ReleaseError:
        rollback = {}  # a record vllm_serve did not write: nothing to roll back to (the rollout says so)
    endpoint = release.get("endpoint") if isinstance(release.get("endpoint"), dict) else {}
    return {"changed": False, "exists": True, "release": release, "engine_url": url,
            "url": str(endpoint.get("url") or ""), "rollback": rollback, "rollout": rollout}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/dgxspark/vllm/release.json"},
            "rollout_path": {"type": "path", "default": ""},
            "rollback_host": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = read(p["path"], p["rollout_path"] or "", p["rollback_host"] or "")
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"release_info: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
