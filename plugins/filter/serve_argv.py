# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release a cluster serves, and its ``vllm serve`` argv (plugins/module_utils/_release.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: serve_argv
short_description: The C(vllm serve) argv of one node of a cluster, rendered from the release it serves
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers
description:
  - The one place a serving setting becomes a C(vllm serve) flag. The settings, their flags and how each renders
    (a value, a switch, JSON) are one table in C(plugins/module_utils/_release.py); a new setting is a row there
    plus its C(vllm_serve_<key>) variable in the vllm_serve role.
  - The model is C(/models/<name>) for a Hugging Face id, the path itself for an absolute path.
  - V(ray) backend, head (rank 0) - the settings, C(--host)/C(--port) and C(--distributed-executor-backend ray); the
    workers run no C(vllm serve) (Ray carries the engine to them).
  - V(mp) backend - every node runs a rank with C(--distributed-executor-backend mp --nnodes N --node-rank R
    --master-addr A --master-port P); rank 0 adds C(--host)/C(--port), ranks 1 to N-1 C(--headless).
  - A one-node cluster renders neither Ray nor multi-node flags.
  - Fails naming the fix when TP x PP is not the number of nodes, the rank is out of range, or C(enforce_eager) is
    undecided (render the release C(dgxspark.vllm.release_record) completed).
  - Companion filters - C(dgxspark.vllm.release) builds and checks the release from the role's
    variables (or from a stored C(release.json) to roll back to), C(dgxspark.vllm.release_record) completes it
    (known-issue decision, remedies, endpoint, image ID), C(dgxspark.vllm.release_variables) lists the role
    variables a release is built from.
positional: _input
options:
  _input:
    description: The release (C(dgxspark.vllm.release_record)'s result, or a C(release.json) written by it).
    type: dict
    required: true
  rank:
    description: This node's rank in the cluster (0 is the head).
    type: int
    default: 0
  nodes:
    description: The number of nodes in the cluster (1 to 8).
    type: int
    default: 1
  master_addr:
    description: mp backend with more than one node - the head's fabric address.
    type: str
  master_port:
    description: mp backend - rank 0's rendezvous port.
    type: int
    default: 29501
  host:
    description: The API's bind address; defaults to the release's C(endpoint.host).
    type: str
  port:
    description: The API's port; defaults to the release's C(endpoint.port).
    type: int
"""

EXAMPLES = r"""
- name: Build the release once, from the role's variables (or the stored release being restored)
  ansible.builtin.set_fact:
    vllm_serve_wanted: >-
      {{ query('ansible.builtin.vars', *('vllm_serve_' | dgxspark.vllm.release_variables))
         | dgxspark.vllm.release(restore=vllm_serve_restore, host=inventory_hostname) }}

- name: Complete it and render this node's argv
  vars:
    release: >-
      {{ vllm_serve_wanted | dgxspark.vllm.release_record(enforce_eager=true, remedies=[],
         endpoint={'url': 'http://10.0.0.11:8000/v1', 'host': '10.0.0.11', 'port': 8000}) }}
  ansible.builtin.set_fact:
    vllm_serve_argv: >-
      {{ release | dgxspark.vllm.serve_argv(rank=1, nodes=4, master_addr='192.168.100.11', master_port=29501) }}
"""

RETURN = r"""
_value:
  description: The argv, every item a string (C(vllm), C(serve), the model path, then the flags).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release


def serve_argv(release, rank=0, nodes=1, master_addr="", master_port=29501, host=None, port=None):
    try:
        return _release.serve_argv(release, rank=rank, nodes=nodes, master_addr=master_addr or "",
                                   master_port=master_port, host=host, port=port)
    except (_release.ReleaseError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"serve_argv: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"serve_argv": serve_argv}
