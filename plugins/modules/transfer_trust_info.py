#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.transfer_trust_info."""

from __future__ import annotations

DOCUMENTATION = r"""
module: transfer_trust_info
short_description: Read a node's part of the fleet's transfer trust and its SSH host key
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reports whether the node's own transfer key pair is there, its public key (which the nodes it sends to
    authorize), and the node's SSH host key (which the fleet's C(known_hosts) pins), in one call. The
    P(dgxspark.vllm.node_trust#role) role runs it on every node before M(dgxspark.vllm.transfer_trust).
  - The private key is never read; it does not leave the node.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  dir:
    description: Directory of the node's key pair (C(id_ed25519), C(id_ed25519.pub)).
    type: path
    default: /etc/dgxspark/transfer
  host_key:
    description: The node's public SSH host key.
    type: path
    default: /etc/ssh/ssh_host_ed25519_key.pub
seealso:
  - module: dgxspark.vllm.transfer_trust
"""

EXAMPLES = r"""
- name: Read the node's trust
  dgxspark.vllm.transfer_trust_info:
  register: trust_info
"""

RETURN = r"""
key_present:
  description: Whether the node's key pair (both halves) is in O(dir).
  returned: always
  type: bool
  sample: true
public_key:
  description: The node's public key line, empty without a key pair.
  returned: always
  type: str
  sample: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... dgxspark-transfer@spark_pairs
host_key:
  description: The text of O(host_key), empty when the node has none.
  returned: always
  type: str
  sample: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH0... root@spark-1
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._ssh_trust import HOST_KEY, read_trust


def read(directory: str, host_key_path: str) -> dict:
    """The module's result: the node's trust (_ssh_trust.read_trust), never changed."""
    return {"changed": False, **read_trust(directory, host_key_path)}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "default": "/etc/dgxspark/transfer"},
            "host_key": {"type": "path", "default": HOST_KEY},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = read(p["dir"], p["host_key"])
    except OSError as exc:
        module.fail_json(msg=f"reading the transfer trust failed: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
