# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: node_program
author:
  - dgxspark.vllm maintainers (@dgxspark)
version_added: 0.2.0
short_description: The text of a program that runs on the nodes, built from the collection's module_utils
description:
  - Returns the text of C(dgxspark-transfer) (the forced command of the fleet's transfer key, installed by
    M(dgxspark.vllm.transfer_trust) through the role C(dgxspark.vllm.node_trust)) or C(dgxspark-launch) (the command
    of the node containers, installed by the role C(dgxspark.vllm.ray_cluster) and baked into images by
    C(dgxspark.vllm.hybrid_image)), or C(dgxspark-watchdog) (the program of the watchdog container on each
    cluster's head, installed by the role C(dgxspark.vllm.watchdog)).
  - Each is one python3 file that embeds, verbatim, the collection's module_utils the program is made of (the same
    code the modules use for the relay protocol, the model manifests and the Ray output parsing) and runs with the
    standard library alone.
  - The text depends only on the collection's sources, so the same collection always gives the same bytes (the
    roles' idempotence and the containers' fingerprints rely on it).
options:
  _terms:
    description: Program names, C(dgxspark-transfer), C(dgxspark-launch) or C(dgxspark-watchdog).
    type: list
    elements: str
    required: true
notes:
  - Runs on the controller. A module_util of the program that imports anything but the standard library and its
    sibling module_utils stops the build with an error naming the module and the line.
"""

EXAMPLES = r"""
- name: Install the launcher
  dgxspark.vllm.node_files:
    files:
      - path: /opt/dgxspark/bin/dgxspark-launch
        content: "{{ lookup('dgxspark.vllm.node_program', 'dgxspark-launch') }}"
        mode: "0644"

- name: The launcher's version, as `python3 dgxspark-launch version` prints it
  ansible.builtin.debug:
    msg: "{{ lookup('dgxspark.vllm.node_program', 'dgxspark-launch') | regex_search('LAUNCHER_VERSION = \"([^\"]+)\"', '\\1') }}"
"""

RETURN = r"""
_raw:
  description: The text of each program named, in the order named.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.dgxspark.vllm.plugins.module_utils._node_program import BuildError, build


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        out = []
        for term in terms:
            try:
                out.append(build(str(term)))
            except BuildError as exc:
                raise AnsibleLookupError(f"dgxspark.vllm.node_program: {exc}") from exc
        return out
