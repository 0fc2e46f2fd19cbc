# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus's view for status.yml: alerts per cluster and targets down (plugins/module_utils/_status.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: monitoring_status
short_description: Lines of Prometheus's view of the fleet, its alerts per cluster and the targets down
version_added: 0.2.0
deprecated:
  why: The module M(dgxspark.vllm.monitoring_info) asks Prometheus and returns these lines in one call; no playbook of
    the collection uses the filter.
  removed_in: 1.0.0
  alternative: The module M(dgxspark.vllm.monitoring_info) (its RV(dgxspark.vllm.monitoring_info#module:lines)).
author:
- dgxspark.vllm maintainers
description:
- Takes the JSON answers of Prometheus's C(/api/v1/alerts) and C(/api/v1/targets) and returns one line for
  Prometheus (targets up, alerts firing and pending), one per cluster with alerts (state, alert, node, device, since
  when), and one per target that is down (job, node, cluster, URL, last error).
positional: _input
options:
  _input:
    description: The Prometheus host's name.
    type: str
    required: true
  alerts:
    description: The answer of C(/api/v1/alerts) (None when Prometheus did not answer).
    type: raw
    required: true
  targets:
    description: The answer of C(/api/v1/targets).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Show Prometheus's view
  ansible.builtin.debug:
    msg: "{{ inventory_hostname | dgxspark.vllm.monitoring_status(alerts=alerts.json, targets=targets.json) }}"
"""

RETURN = r"""
_value:
  description: The lines.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils import _status


def monitoring_status(host, alerts=None, targets=None):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.monitoring_status filter is deprecated: use the dgxspark.vllm.monitoring_info "
                         "module, which asks Prometheus and returns these lines in one call", version="1.0.0",
                         collection_name="dgxspark.vllm")
    try:
        return _status.prometheus_lines(str(host), alerts, targets)
    except (TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError(f"monitoring_status: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"monitoring_status": monitoring_status}
