# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus's configuration, rules and credential files for the fleet (plugins/module_utils/_monitoring.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: monitoring_config
short_description: Render Prometheus's configuration, the collection's rules and the credential files for the fleet
version_added: 0.2.0
author:
- dgxspark.vllm maintainers
description:
- Scrape jobs C(engine) (each cluster's engine, on its head, with the metrics key the heads' doors admit for
  C(GET /metrics) alone as a bearer credential file),
  C(gateway) (each gateway's own metrics, with a client key) and C(node) (the node exporter of every node), every
  target labelled C(cluster), C(node) and C(role).
- The engine's address comes from the head's release record - its LAN address, C(127.0.0.1) when Prometheus runs on
  that head, or the head's door when the engine listens on the loopback behind gateways.
- Samples of the fabric interfaces and RoCE HCAs of each node get the label C(fabric="true") (the fabric rules use it).
- Every value is validated before it reaches a line; a bad one fails the filter with a sentence naming the variable
  and the fix (never a key itself). The result holds secrets (the key files); tasks passing it use C(no_log).
positional: _input
options:
  _input:
    description: The fleet's clusters (C(dgxspark_fleet.clusters)).
    type: dict
    required: true
  nodes:
    description: Per host, what the monitoring role's node tasks published (C(lan_ip), C(fabric_devices)).
    type: dict
    default: {}
  hints:
    description: Per host, its C(ansible_host) (the LAN address of a host not in this run, when it is an IP address).
    type: dict
    default: {}
  releases:
    description: Per head, the release record it serves (C(release.json)), or an empty dict.
    type: dict
    default: {}
  gateways:
    description: The fleet's gateways (C(dgxspark_fleet.gateways)).
    type: list
    elements: dict
    default: []
  monitor:
    description: The inventory name of the Prometheus host.
    type: str
    required: true
  settings:
    description: The scrape and rule settings (C(scrape_interval), C(stall_window), C(stall_for), ...); see the role.
    type: dict
    default: {}
  engine_key:
    description: The metrics key the heads' doors admit for C(GET /metrics) alone (each engine has a key of its own).
    type: str
    default: ''
  gateway_key:
    description: A client key of the gateways.
    type: str
    default: ''
  node_port:
    description: The node exporters' port.
    type: int
    default: 9100
  door_port:
    description: The heads' door port (C(gateway_door_port)).
    type: int
    default: 8100
  gateway_port:
    description: The gateways' port (C(gateway_port)).
    type: int
    default: 8000
  gateway_bind:
    description: The gateways' listening address when set (C(gateway_bind)); empty means their LAN address.
    type: str
    default: ''
  gateway_certificates:
    description:
      - The results of M(ansible.builtin.slurp) looped over the gateway hosts on their C(tls.crt) (C(item) the host,
        C(content) the file); a gateway without the file serves plain HTTP. Prometheus scrapes the others over HTTPS
        and trusts these certificates alone.
    type: list
    elements: dict
    default: []
    version_added: 0.10.0
  door_certificates:
    description:
      - The same for the heads' doors (slurp looped over the heads on their door's C(tls.crt)). An engine scraped
        through its head's door that has one is scraped over HTTPS, trusting these certificates alone.
    type: list
    elements: dict
    default: []
    version_added: 0.10.0
"""

EXAMPLES = r"""
- name: Render Prometheus's files
  ansible.builtin.set_fact:
    monitoring_rendered: "{{ dgxspark_fleet.clusters | dgxspark.vllm.monitoring_config(monitor=inventory_hostname,
                             releases=releases, engine_key=key) }}"
  no_log: true
"""

RETURN = r"""
_value:
  description: C(files) (C(name) and C(content) of prometheus.yml, the rules file and the key files), C(jobs) (the
    number of targets of each job), C(targets) (the addresses scraped, per job) and C(warnings) (what is not scraped,
    and why).
  type: dict
"""

import base64

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway, _monitoring


def _read(results) -> dict:
    """{host: text} from slurp's loop results (item: the host, content: base64); a host with no file is left out."""
    return {r["item"]: base64.b64decode(r["content"]).decode("utf-8", "replace")
            for r in results or [] if isinstance(r, dict) and r.get("content")}


def monitoring_config(clusters, nodes=None, hints=None, releases=None, gateways=None, monitor=None, settings=None,
                      engine_key="", gateway_key="", node_port=9100, door_port=8100, gateway_port=8000, gateway_bind="",
                      gateway_certificates=None, door_certificates=None):
    try:
        found = _monitoring.targets(clusters, nodes=nodes or {}, hints=hints or {}, releases=releases or {},
                                    gateways=gateways or [], monitor=str(monitor or ""), node_port=node_port,
                                    door_port=door_port, gateway_port=gateway_port, gateway_bind=gateway_bind or "")
        rendered = _monitoring.render_config(found, settings, engine_key=engine_key, gateway_key=gateway_key,
                                             gateway_certificates=_read(gateway_certificates),
                                             door_certificates=_read(door_certificates))
    except (_gateway.GatewayError, ValueError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError(f"monitoring_config: {exc}") from exc
    rendered["warnings"] = found["warnings"]
    rendered["targets"] = {job: [t["address"] for t in found[job]] for job in ("engine", "gateway", "node")}
    return rendered


class FilterModule:
    def filters(self):
        return {"monitoring_config": monitoring_config}
