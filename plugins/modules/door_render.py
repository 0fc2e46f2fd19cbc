#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.door_render (it runs on the controller)."""

from __future__ import annotations

# The action plugin (plugins/action/door_render.py) runs on the controller and declares supports_check_mode there
# (_supports_check_mode = True: it renders text from the play's facts and changes nothing); this file only documents it.

DOCUMENTATION = r"""
module: door_render
short_description: Render a head's door, the keyed relay from its LAN address to its engine, from what the head published
version_added: 0.17.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the controller, for a cluster's head, over the fleet M(dgxspark.vllm.fleet) published (C(dgxspark_fleet))
    and what the head published (O(head_fact) - its release, LAN address and serving env file).
  - With gateways in the fleet, the door listens on the head's LAN address and O(port) and admits the gateways' and
    monitoring hosts' addresses alone. Without, it stands on the engine's API port for the clients, with their keys
    (O(client_keys)), or none with O(allow_no_api_key).
  - Either way it puts the cluster's engine key (from the serving env file) on every request it relays, relays only a
    POST to one of O(paths) or a read of the model list, health and metrics, and answers every other route itself.
  - Returns the door's files by name (its configuration, its clients' keys, its certificate and key), and what the
    role says of the engine's exposure.
  - It replaces the P(dgxspark.vllm.gateway#role) role's render of the door and its files list, and the filter
    C(dgxspark.vllm.gateway_door).
  - The result holds the engine key, the clients' keys and the door's private key, so it is censored as a C(no_log)
    task's is. A failure's message holds none of them, and is shown.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  head_fact:
    description: The fact this head published for the gateway (C(release), C(lan_ip), C(engine_env)).
    type: str
    default: gateway_head
  port:
    description: The door's port when the fleet has gateways (C(gateway_door_port)).
    type: int
    default: 8100
  timeout:
    description: Seconds either side of a request may stay silent (C(gateway_timeout)).
    type: int
    default: 600
  paths:
    description: The inference routes it relays (C(gateway_paths)).
    type: list
    elements: str
    default: [/v1/chat/completions, /v1/completions]
  metrics_key:
    description: The key Prometheus scrapes the engine's metrics with (C(gateway_door_metrics_api_key)); it admits
      C(GET /metrics) alone.
    type: str
    default: ""
  client_keys:
    description: The clients' keys (C(gateway_api_keys)), asked for by a door of a fleet without gateways.
    type: list
    elements: str
    default: []
  allow_no_api_key:
    description: A fleet without gateways served without any client key (C(vllm_serve_allow_no_api_key)).
    type: bool
    default: false
  tls:
    description: Whether the door speaks TLS (C(gateway_door_tls)).
    type: bool
    default: true
  tls_identity:
    description: With O(tls), the answer of M(dgxspark.vllm.tls_identity) for the door (C(pem), C(trust_anchor)).
    type: dict
    default: {}
  tls_file:
    description: The file name of the door's certificate and key (C(gateway_tls_file)).
    type: str
    default: tls.pem
  tls_certificate_file:
    description: The file name of its certificate alone (C(gateway_tls_certificate_file)).
    type: str
    default: tls.crt
seealso:
  - module: dgxspark.vllm.gateway_render
  - module: dgxspark.vllm.tls_identity
"""

EXAMPLES = r"""
- name: Render the door
  dgxspark.vllm.door_render:
    port: "{{ gateway_door_port }}"
    client_keys: "{{ gateway_api_keys }}"
    tls_identity: "{{ gateway_door_tls_found }}"
  register: gateway_door
"""

RETURN = r"""
files:
  description: The door's files by name (C(name), C(content)) - C(haproxy.cfg), the clients' C(keys), the certificate.
  returned: success
  type: list
  elements: dict
config:
  description: The door's haproxy.cfg (holds the engine key).
  returned: success
  type: str
client_keys:
  description: The clients' keys file (a door for clients), else empty.
  returned: success
  type: str
clients:
  description: Whether the door stands for the clients (a fleet without gateways).
  returned: success
  type: bool
target:
  description: Where the door reaches the engine.
  returned: success
  type: str
  sample: 127.0.0.1:8000
engine_bind:
  description: The address and port the engine bound.
  returned: success
  type: str
engine_on_lan:
  description: Whether the engine itself listens on the LAN (an address other than the loopback).
  returned: success
  type: bool
url:
  description: The clients' URL of a door for clients, else empty.
  returned: success
  type: str
  sample: https://192.168.1.11:8000/v1
"""
