# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gateway's HAProxy configuration and client keys file (plugins/module_utils/_gateway.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: gateway_config
short_description: Render the gateway's HAProxy configuration and its client keys file
version_added: 0.2.0
deprecated:
  why: The action M(dgxspark.vllm.gateway_render) renders the gateway's configuration from what the heads published, in one
    step; no role or playbook of the collection uses the filter.
  removed_in: 1.0.0
  alternative: The action M(dgxspark.vllm.gateway_render).
author:
- dgxspark.vllm maintainers
description:
- Renders C(haproxy.cfg) for the gateway (one authenticated OpenAI endpoint in front of the fleet's clusters) and
  the keys file it checks every request's bearer token against.
- One backend per served model, named C(model_<served name>), holding one server per cluster, named as the cluster;
  the runtime API socket is C(/var/lib/dgxspark/gateway/admin.sock) (what rollouts drain and re-admit through).
- Every value is validated (names, addresses, ports, keys) before it reaches a line; a bad one fails the filter
  with a sentence naming the variable and the fix (never the key itself).
- Each cluster gets its own engine key (security review L7), read from its head's serving env file. Each model's
  backend balances over one local relay per cluster (C(listen door_<digest>), a socket beside the runtime API's),
  which puts that cluster's key on the request and sends it to that cluster's door alone. A client's key stays at
  the gateway.
- The result holds secrets (each cluster's engine key in the configuration, the client keys); tasks passing it use
  C(no_log).
positional: _input
options:
  _input:
    description: "The models, C({served name: [{name, address, port}]}) (C(dgxspark.vllm.gateway_models)'s C(models))."
    type: dict
    required: true
  bind:
    description: The address the gateway listens on.
    type: str
    required: true
  port:
    description: The port the gateway listens on.
    type: int
    required: true
  clusters:
    description: The fleet's clusters (C(dgxspark_fleet.clusters)), which name each cluster's head.
    type: dict
    required: true
    version_added: 0.9.0
  heads:
    description:
      - What each head published for the gateway (C(gateway_head)) - its C(engine_env), the text of its serving env
        file, whose C(VLLM_API_KEY) is the cluster's engine key, put on every request and health check to that
        cluster's door.
    type: dict
    required: true
    version_added: 0.9.0
  keys:
    description: The client API keys.
    type: list
    elements: str
    required: true
  max_body:
    description: The largest request body routed, in bytes (the buffer size follows it); a larger one gets 413.
    type: int
    default: 1048576
  maxconn:
    description: The most concurrent connections.
    type: int
    default: 512
  check_interval:
    description: Seconds between two health checks (a real completion) of a cluster.
    type: int
    default: 10
  check_timeout:
    description: Seconds a health check's completion may take.
    type: int
    default: 30
  timeout:
    description: Seconds a client or an engine may stay silent within a request (long generations).
    type: int
    default: 600
  hard_stop_after:
    description: Seconds a reload lets the old worker finish its requests.
    type: int
    default: 600
  paths:
    description:
      - The OpenAI inference routes forwarded to the clusters (POST). Every other path is answered 404 by the gateway
        and never reaches an engine (vLLM's own key guards C(/v1) alone).
    type: list
    elements: str
    default: [/v1/chat/completions, /v1/completions]
    version_added: 0.6.0
  max_conn_per_source:
    description:
      - The most connections one source address may hold open; requests on the ones over it are answered 429 (above
        O(maxconn) it never applies).
    type: int
    default: 128
    version_added: 0.6.0
  tls:
    description:
      - Clients reach the gateway over HTTPS only (TLS 1.2 or newer), with the certificate and key in C(tls.pem) beside
        the configuration (M(dgxspark.vllm.tls_identity) keeps or makes them); V(false) serves plain HTTP.
    type: bool
    default: true
    version_added: 0.10.0
"""

EXAMPLES = r"""
- name: Render the gateway's configuration
  ansible.builtin.set_fact:
    gateway_rendered: >-
      {{ gateway_models_found.models | dgxspark.vllm.gateway_config(bind='10.20.0.5', port=8000,
         clusters=dgxspark_fleet.clusters, heads=gateway_heads, keys=[dgxspark_api_key]) }}
  no_log: true
"""

RETURN = r"""
_value:
  description:
    - C(config) (the text of haproxy.cfg), C(keys) (the text of the keys file) and C(files) (C(name) and C(content) of
      each door certificate the relays trust, beside haproxy.cfg; from the heads' C(door_certificate)).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway


def gateway_config(models, bind=None, port=None, clusters=None, heads=None, keys=None, max_body=1048576, maxconn=512,
                   check_interval=10, check_timeout=30, timeout=600, hard_stop_after=600, paths=_gateway.PATHS,
                   max_conn_per_source=128, tls=True):
    # Said when it is used (a deprecation in meta/runtime.yml warned on every use of any of the collection's filters).
    Display().deprecated("The dgxspark.vllm.gateway_config filter is deprecated: use the dgxspark.vllm.gateway_render "
                         "action, which renders the gateway's configuration from what the heads published", version="1.0.0",
                         collection_name="dgxspark.vllm")
    try:
        doors = _gateway.door_certificates(clusters, heads)
        served = {server["name"] for servers in (models or {}).values() for server in servers or []}
        doors = {cluster: text for cluster, text in doors.items() if cluster in served}
        return {"config": _gateway.render_gateway(models, bind, port, _gateway.engine_keys(clusters, heads),
                                                  max_body=max_body, maxconn=maxconn,
                                                  check_interval=check_interval, check_timeout=check_timeout,
                                                  timeout=timeout, hard_stop_after=hard_stop_after, paths=paths,
                                                  max_conn_per_source=max_conn_per_source, tls=bool(tls),
                                                  door_certificates=doors),
                "keys": _gateway.render_keys(keys),
                "files": _gateway.door_certificate_files(doors)}
    except _gateway.GatewayError as exc:
        raise AnsibleFilterError(f"gateway_config: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"gateway_config": gateway_config}
