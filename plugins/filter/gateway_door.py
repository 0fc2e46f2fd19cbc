# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A head's door to its engine, open to the gateways only (plugins/module_utils/_gateway.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gateway_door
short_description: Render a head's door, the HAProxy relay from its LAN address to its engine, keyed, for the gateways only
version_added: 0.2.0
deprecated:
  why: The action M(dgxspark.vllm.door_render) renders the door from what its head published, in one step; no role
    or playbook of the collection uses the filter.
  removed_in: 1.0.0
  alternative: The action M(dgxspark.vllm.door_render).
author:
- dgxspark.vllm maintainers
description:
- With gateways, the engine listens on the head's C(127.0.0.1) only; the door listens on the head's LAN address,
  refuses every connection that does not come from a gateway's (or monitoring host's) address, answers 401 to every
  request without its cluster's engine key (each cluster has its own; the monitoring hosts' O(metrics_key) reads
  C(/metrics) alone), and relays only a POST to one of O(paths) or a GET of C(/v1/models),
  C(/health) or C(/metrics) to the engine; every other route is answered 404 by the door (vLLM's own key guards
  C(/v1) alone, so C(/tokenize) or C(/invocations) would answer without one).
- The engine's address and port come from the cluster's release record (its endpoint; C(0.0.0.0) is reached on
  C(127.0.0.1)).
positional: _input
options:
  _input:
    description: The release record the head serves (C(release.json)).
    type: dict
    required: true
  bind:
    description: The head's LAN address.
    type: str
    required: true
  port:
    description: The door's port.
    type: int
    required: true
  allowed:
    description: The gateways' LAN addresses.
    type: list
    elements: str
    required: true
  timeout:
    description: Seconds either side may stay silent.
    type: int
    default: 600
  engine_key:
    description: The cluster's engine key, which the door asks every request for (the gateways send it). Give it or
      O(engine_env).
    type: str
    version_added: 0.7.0
  engine_env:
    description: The text of the head's serving env file, whose C(VLLM_API_KEY) is the cluster's engine key (used
      when O(engine_key) is not given).
    type: str
    version_added: 0.9.0
  metrics_key:
    description: The monitoring hosts' key, admitted for a C(GET /metrics) alone. Empty admits none.
    type: str
    default: ""
    version_added: 0.9.0
  client_keys:
    description: A fleet without a gateway - the client keys. The door then listens on the engine's port of the
      head's LAN address, admits every source, asks for one of these keys and sends the engines' key on.
    type: list
    elements: str
    version_added: 0.8.0
  allow_no_api_key:
    description:
      - The fleet is allowed to serve without any key (C(vllm_serve_allow_no_api_key)). With O(client_keys) given
        and none of them set, the door for clients then asks for no key (it still relays only the routes above; the
        engine keeps its own key, which the door puts on). Without it, a missing client key is an error.
    type: bool
    default: false
    version_added: 0.9.0
  paths:
    description: The inference routes relayed (POST), as the gateway's C(gateway_paths).
    type: list
    elements: str
    default: [/v1/chat/completions, /v1/completions]
    version_added: 0.7.0
  tls:
    description:
      - The door speaks TLS alone (1.2 or newer), with the certificate and key in C(tls.pem) beside its configuration
        (M(dgxspark.vllm.tls_identity) keeps or makes them); the gateways' relays and Prometheus trust that certificate
        alone.
    type: bool
    default: false
    version_added: 0.10.0
"""

EXAMPLES = r"""
- name: Render the door
  ansible.builtin.set_fact:
    gateway_door_rendered: >-
      {{ release | dgxspark.vllm.gateway_door(bind='10.20.0.11', port=8100, allowed=['10.20.0.5'],
                                              engine_env=serve_env_text) }}
  no_log: true  # the configuration holds the cluster's engine key
"""

RETURN = r"""
_value:
  description: C(config) (the text of haproxy.cfg, which holds the cluster's engine key), C(target) (the engine's address and port, C(address:port)) and
    C(engine_bind) (the address and port the engine bound) and C(engine_on_lan) (true when the engine bound an address
    other than the loopback, a wildcard among them), and C(url), the clients' URL of a door for clients (C(https) with
    TLS, an IPv6 address bracketed, as the release records it; empty for a door for gateways).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway


def gateway_door(release, bind=None, port=None, allowed=None, timeout=600, engine_key=None, paths=None,
                 client_keys=None, allow_no_api_key=False, engine_env=None, metrics_key="", tls=False):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.gateway_door filter is deprecated: use the dgxspark.vllm.door_render "
                         "action, which renders the door from what its head published", version="1.0.0",
                         collection_name="dgxspark.vllm")
    try:
        return _gateway.door_plan(release, bind=bind, port=port, allowed=allowed, timeout=timeout,
                                  engine_key=engine_key, paths=paths, client_keys=client_keys,
                                  allow_no_api_key=allow_no_api_key, engine_env=engine_env, metrics_key=metrics_key,
                                  tls=tls)
    except (_gateway.GatewayError, ValueError, TypeError) as exc:
        raise AnsibleFilterError(f"gateway_door: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"gateway_door": gateway_door}
