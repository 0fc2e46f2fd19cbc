# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the modules that ask the monitoring role's Prometheus reach it, from its own host (one definition, with
``_monitoring.ARGUMENT_SPEC`` and ``_monitoring.api_url`` in plugins/module_utils/_monitoring.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  listen:
    description:
      - The address Prometheus listens on (C(monitoring_prometheus_listen)). It is asked there, or on the loopback
        when it listens on every address (V(0.0.0.0), V(::)); the address and the port are checked as the
        P(dgxspark.vllm.monitoring#role) role checks them.
    type: str
    default: 127.0.0.1
  port:
    description: Its port (C(monitoring_prometheus_port)).
    type: int
    default: 9090
"""
