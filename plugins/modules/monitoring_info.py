#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.monitoring_info."""

from __future__ import annotations

DOCUMENTATION = r"""
module: monitoring_info
short_description: Read Prometheus's view of the fleet from its own host - its alerts per cluster and the targets down
version_added: 0.16.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Asks the Prometheus the P(dgxspark.vllm.monitoring#role) role runs, from its own host, for its alerts and its
    targets (C(/api/v1/alerts), C(/api/v1/targets)), and returns the lines C(playbooks/status.yml) shows - one for
    Prometheus (targets up, alerts firing and pending), one per cluster with alerts, one per target that is down - with
    the counts.
  - Its address is its listening address, the loopback when it listens on every address (V(0.0.0.0), V(::)); the
    address and the port are checked as the role checks them.
  - It replaces the playbook's two API reads and the filter C(dgxspark.vllm.monitoring_status). A Prometheus that does
    not answer is a line saying so, never a failure.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.prometheus
  - dgxspark.vllm.attributes.read_only
options:
  name:
    description: The host named in the first line (C(inventory_hostname)).
    type: str
    required: true
  http_timeout:
    description: Seconds each of the two answers may take.
    type: int
    default: 10
seealso:
  - module: dgxspark.vllm.status_info
"""

EXAMPLES = r"""
- name: Read Prometheus's view
  dgxspark.vllm.monitoring_info:
    listen: "{{ monitoring_prometheus_listen | default('127.0.0.1') }}"
    port: "{{ monitoring_prometheus_port | default(9090) }}"
    name: "{{ inventory_hostname }}"
  register: status_prometheus
"""

RETURN = r"""
url:
  description: The API's base URL, as its host reaches it.
  returned: always
  type: str
  sample: http://127.0.0.1:9090
answered:
  description: Whether both answers came.
  returned: always
  type: bool
lines:
  description: Prometheus's line, one per cluster with alerts, one per target down.
  returned: always
  type: list
  elements: str
  sample: ["prometheus on gw-1: 3 of 3 targets up, 0 alert(s) firing, 0 pending"]
firing:
  description: The alerts firing.
  returned: always
  type: int
pending:
  description: The alerts pending.
  returned: always
  type: int
targets_up:
  description: The targets up.
  returned: always
  type: int
targets:
  description: The active targets.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import _monitoring, _status


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **_monitoring.ARGUMENT_SPEC,
            "name": {"type": "str", "required": True},
            "http_timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["http_timeout"] < 1:
        module.fail_json(msg=f"http_timeout must be at least 1 second, got {p['http_timeout']}")
    try:
        url = _monitoring.api_url(p["listen"], p["port"])
    except (ValueError, TypeError) as exc:
        module.fail_json(msg=f"monitoring_prometheus_listen / monitoring_prometheus_port: {exc}")
    module.exit_json(changed=False, **_status.prometheus_status(p["name"], url, http_timeout=float(p["http_timeout"])))


if __name__ == "__main__":
    main()
