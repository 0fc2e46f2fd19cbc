#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the action plugin dgxspark.vllm.gateway_render (it runs on the controller)."""

from __future__ import annotations

# The action plugin (plugins/action/gateway_render.py) runs on the controller and declares supports_check_mode there
# (_supports_check_mode = True: it renders text from the play's facts and changes nothing); this file only documents it.

DOCUMENTATION = r"""
module: gateway_render
short_description: Render a gateway's configuration from what the clusters' heads published
version_added: 0.17.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Runs on the controller, for a host of the gateway group, over the fleet M(dgxspark.vllm.fleet) published
    (C(dgxspark_fleet)). It takes what each cluster's head published in the play (O(head_fact) - its release, LAN
    address, engine key and door certificate), or, for a head not in the play, what the gateway read on it
    (O(unread)), and returns the gateway's address, the models it routes with their clusters, the clusters it leaves
    out and why, its HAProxy configuration, its client keys file and the certificates its relays trust.
  - Every value is checked before it reaches a line of the configuration; a bad one fails naming the variable.
  - No cluster with a model to route fails, naming the fix, before anything is written on the gateway.
  - It replaces the P(dgxspark.vllm.gateway#role) role's C(hostvars) reads and the filters
    C(dgxspark.vllm.gateway_models) and C(dgxspark.vllm.gateway_config).
  - The result holds the clusters' engine keys and the client keys, so it is censored as a C(no_log) task's is. A
    failure's message holds neither, and is shown.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  head_fact:
    description:
      - The fact each head published for the gateway (C(release), C(lan_ip), C(engine_env),
        C(door_certificate)).
    type: str
    default: gateway_head
  unread:
    description:
      - For the heads that published nothing in this play, the results of the gateway's own reads on them, each
        registered over a loop of those heads - C(release) (M(dgxspark.vllm.release_info)), C(engine_env) and
        C(door_certificate) (M(ansible.builtin.slurp) of the serving env file and of the door's certificate), C(lan)
        (M(dgxspark.vllm.rdma_facts)).
    type: dict
    default: {}
  bind:
    description: The address the gateway listens on (C(gateway_bind)); its LAN address in the fleet when empty.
    type: str
    default: ""
  port:
    description: Its port (C(gateway_port)).
    type: int
    default: 8000
  door_port:
    description: The heads' doors' port (C(gateway_door_port)).
    type: int
    default: 8100
  api_keys:
    description: The client API keys (C(gateway_api_keys)).
    type: list
    elements: str
    required: true
  tls:
    description: Whether the gateway serves HTTPS (C(gateway_tls)).
    type: bool
    default: true
  paths:
    description: The inference routes it forwards (C(gateway_paths)).
    type: list
    elements: str
    default: [/v1/chat/completions, /v1/completions]
  max_body:
    description: The largest request body in bytes (C(gateway_max_body)).
    type: int
    default: 1048576
  maxconn:
    description: Its connection limit (C(gateway_maxconn)).
    type: int
    default: 512
  max_conn_per_source:
    description: Connections one source address may hold (C(gateway_max_conn_per_source)).
    type: int
    default: 128
  check_interval:
    description: Seconds between its health checks of each cluster (C(gateway_check_interval)).
    type: int
    default: 10
  check_timeout:
    description: Seconds a health check may take (C(gateway_check_timeout)).
    type: int
    default: 30
  timeout:
    description: Seconds a request may take (C(gateway_timeout)).
    type: int
    default: 600
  hard_stop_after:
    description: Seconds an old HAProxy process serves its requests after a reload (C(gateway_hard_stop_after)).
    type: int
    default: 600
seealso:
  - module: dgxspark.vllm.fleet
  - module: dgxspark.vllm.release_info
"""

EXAMPLES = r"""
- name: Render the gateway's configuration
  dgxspark.vllm.gateway_render:
    unread:
      release: "{{ gateway_unread_release }}"
      engine_env: "{{ gateway_unread_env }}"
      door_certificate: "{{ gateway_unread_door_certificate }}"
      lan: "{{ gateway_unread_lan }}"
    port: "{{ gateway_port }}"
    api_keys: "{{ gateway_api_keys }}"
  register: gateway_rendered
"""

RETURN = r"""
address:
  description: The address the gateway listens on.
  returned: success
  type: str
  sample: 192.168.1.20
url:
  description: The clients' base URL of the gateway (with C(/v1)).
  returned: success
  type: str
  sample: https://192.168.1.20:8000/v1
models:
  description: Each served model's clusters, as the gateway routes to their doors.
  returned: success
  type: dict
  sample: {qwen3.5-122b-a10b-fp8: [{name: pair1, address: 192.168.1.11, port: 8100}]}
left_out:
  description: The clusters left out, and why.
  returned: success
  type: list
  elements: str
config:
  description: The gateway's haproxy.cfg (holds the clusters' engine keys).
  returned: success
  type: str
client_keys:
  description: The client keys file, a key a line.
  returned: success
  type: str
files:
  description: The relays' certificate files beside the configuration (C(name), C(content)).
  returned: success
  type: list
  elements: dict
"""
