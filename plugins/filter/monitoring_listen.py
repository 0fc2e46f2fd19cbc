# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The address Prometheus or a node exporter listens on (plugins/module_utils/_monitoring.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: monitoring_listen
short_description: An address and port for Prometheus's or the node exporter's --web.listen-address, both validated
version_added: 0.2.0
author:
- dgxspark.vllm maintainers
description:
- Returns C(address:port), with brackets around an IPv6 address; fails naming the variable for anything that is not
  an IP address or a TCP port.
positional: _input, port
options:
  _input:
    description: The address (an IP address; C(0.0.0.0) or C(::) for every address).
    type: str
    required: true
  port:
    description: The TCP port.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Prometheus's listening address
  ansible.builtin.debug:
    msg: "{{ '127.0.0.1' | dgxspark.vllm.monitoring_listen(9090) }}"
"""

RETURN = r"""
_value:
  description: C(address:port).
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway, _monitoring


def monitoring_listen(address, port):
    try:
        return _monitoring.listen(address, port)
    except (_gateway.GatewayError, ValueError, TypeError) as exc:
        raise AnsibleFilterError(f"monitoring_listen: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"monitoring_listen": monitoring_listen}
