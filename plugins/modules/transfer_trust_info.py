#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.transfer_trust_info."""

from __future__ import annotations

DOCUMENTATION = r"""
module: transfer_trust_info
short_description: Read a node's part of the fleet's transfer trust and its SSH host key
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reports whether the fleet's transfer key pair is on the node, the node's SSH host key (which the fleet's
    C(known_hosts) pins), and with O(read_keypair=true) the key pair itself, in one call. The
    P(dgxspark.vllm.node_trust#role) role runs it on every node before M(dgxspark.vllm.transfer_trust).
  - Set C(no_log) on a task with O(read_keypair=true); its result holds the private key.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  dir:
    description: Directory of the fleet's key pair (C(id_ed25519), C(id_ed25519.pub)).
    type: path
    default: /etc/dgxspark/transfer
  host_key:
    description: The node's public SSH host key.
    type: path
    default: /etc/ssh/ssh_host_ed25519_key.pub
  read_keypair:
    description: Also return the key pair when the node has both halves.
    type: bool
    default: false
seealso:
  - module: dgxspark.vllm.transfer_trust
"""

EXAMPLES = r"""
- name: Read the node's trust (the key pair only travels under no_log)
  dgxspark.vllm.transfer_trust_info:
    read_keypair: true
  register: trust_info
  no_log: true
"""

RETURN = r"""
key_present:
  description: Whether the private key is in O(dir).
  returned: always
  type: bool
  sample: true
host_key:
  description: The text of O(host_key), empty when the node has none.
  returned: always
  type: str
  sample: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH0... root@spark-1
keypair:
  description: The key pair (C(private), C(public)).
  returned: when O(read_keypair=true) and the node has both halves
  type: dict
  sample: {private: "-----BEGIN OPENSSH PRIVATE KEY-----...", public: ssh-ed25519 AAAA... dgxspark-transfer@spark_pairs}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._files import read_or_none


def read(directory: str, host_key_path: str, read_keypair: bool) -> dict:
    key = os.path.join(directory, "id_ed25519")
    result = {"changed": False, "key_present": os.path.isfile(key)}
    host_key = read_or_none(host_key_path)
    result["host_key"] = host_key.decode(errors="replace").strip() if host_key else ""
    if read_keypair and result["key_present"]:
        private, public = read_or_none(key), read_or_none(key + ".pub")
        if private and public:
            result["keypair"] = {"private": private.decode(), "public": public.decode().strip()}
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "default": "/etc/dgxspark/transfer"},
            "host_key": {"type": "path", "default": "/etc/ssh/ssh_host_ed25519_key.pub"},
            "read_keypair": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = read(p["dir"], p["host_key"], p["read_keypair"])
    except OSError as exc:
        module.fail_json(msg=f"reading the transfer trust failed: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
