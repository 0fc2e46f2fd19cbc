# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options image_sync and model_sync share: the target nodes and the transfer key's SSH settings."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  targets:
    description:
      - The nodes that must have the image or model, in relay order (each target forwards the stream to the next
        of its cluster). The controller announces on each what it may receive first (M(dgxspark.vllm.transfer_announce)).
    type: list
    elements: dict
    required: true
    suboptions:
      host:
        description: The target's fabric address (or a name that resolves to it), as it appears in O(known_hosts).
        type: str
        required: true
      name:
        description: The target's inventory name, used in messages and results. Defaults to O(targets[].host).
        type: str
      port:
        description: The target's SSH port.
        type: int
        default: 22
      cluster:
        description:
          - The target's cluster. A relay chain never leaves a cluster (a node forwards only to the members after it
            in its cluster), so targets of different clusters get a chain each, in the order given.
        type: str
  ssh_key:
    description: This node's transfer private key on the source (and, for the relay, each target's own key).
    type: path
    default: /etc/dgxspark/transfer/id_ed25519
  known_hosts:
    description:
      - The known_hosts file with the targets' host keys under their fabric addresses (written by the
        P(dgxspark.vllm.node_trust#role) role).
      - Host keys are always checked strictly; an unknown or changed key fails the target.
    type: path
    default: /etc/dgxspark/transfer/known_hosts
  ssh_user:
    description: The user the transfer key is authorized for on the targets.
    type: str
    default: root
  connect_timeout:
    description: Seconds SSH waits for a target to answer.
    type: int
    default: 10
"""
