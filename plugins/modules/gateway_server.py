#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.gateway_server."""

from __future__ import annotations

DOCUMENTATION = r"""
module: gateway_server
short_description: Drain a cluster at the gateway, take it out, or admit it again, and wait until that holds
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - The gateway (role C(dgxspark.vllm.gateway)) is HAProxy with one backend per served model and, in each, one server
    per cluster serving that model, named after the cluster. This module talks to HAProxy's runtime API over its admin
    socket on the gateway host and sets every server of one cluster to an admin state.
  - V(drain) sends the cluster no new request (they go to the model's other clusters) and lets the ones in flight
    finish; with O(wait=true) it returns once none is left. V(maint) also takes it out of the health checks' hands.
    V(ready) admits it again. With O(wait=true) the cluster stays drained until the gateway's own health checks (a
    real completion through the cluster's door) see it up, and only then takes traffic, so traffic only comes back to
    a cluster that answers. Health checks do not run in maintenance and HAProxy would restore the health they saw
    before it, so a server leaving V(maint) is first drained and marked down, and taken back by the checks alone.
  - Without O(state) it only reports the cluster's servers and, per model, the other clusters serving it.
  - It warns when draining a cluster that is, at that moment, the only one serving a model at the gateway, since
    requests for that model then fail until it is back.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reports whether the admin state would change; nothing is set and nothing is waited for.
  diff_mode:
    support: full
    details: The admin state of each of the cluster's servers, before and after.
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  server:
    description: The cluster's name (its inventory group), which is its servers' name in every backend.
    type: str
    required: true
  state:
    description: The admin state to set on every server of the cluster. Omitted, nothing is set.
    type: str
    choices: [ready, drain, maint]
  wait:
    description:
      - Wait until the state holds. V(drain) and V(maint), no request in flight or queued on the cluster; V(ready),
        the gateway's health checks report every server of the cluster up.
    type: bool
    default: true
  timeout:
    description: Seconds to wait before failing; the admin state stays as set.
    type: int
    default: 600
  socket:
    description: The gateway's runtime API socket on the gateway host.
    type: path
    default: /var/lib/dgxspark/gateway/admin.sock
notes:
  - Run it on the gateway host (C(delegate_to)) as root, since the socket is the gateway's own (mode 0600).
seealso:
  - name: HAProxy runtime API (management guide)
    description: The C(set server ... state) and C(show stat) commands this module uses.
    link: https://docs.haproxy.org/3.0/management.html
"""

EXAMPLES = r"""
- name: Drain pair1 at the gateway and wait for its requests in flight to finish
  dgxspark.vllm.gateway_server:
    server: pair1
    state: drain
    timeout: 900
  delegate_to: gateway-1.example.internal

- name: Admit pair1 again once the gateway's health checks see it serve
  dgxspark.vllm.gateway_server:
    server: pair1
    state: ready
  delegate_to: gateway-1.example.internal
"""

RETURN = r"""
servers:
  description: The cluster's server in each backend (model) after the run.
  returned: always
  type: list
  elements: dict
  sample:
    - {backend: model_qwen3-30b-a3b, server: pair1, status: UP, admin: drain, sessions: 0, queued: 0, check: L7OK}
others:
  description: Per backend holding the cluster, the other clusters that are up and ready in it.
  returned: always
  type: dict
  sample: {model_qwen3-30b-a3b: [pair2]}
alone:
  description:
    - When draining or taking the cluster out, the backends (models) in which no other cluster was up and ready at that
      moment, whose requests fail until it is admitted again (also given as a warning).
  returned: always
  type: list
  elements: str
  sample: []
waited:
  description: Seconds spent waiting for the state to hold.
  returned: always
  type: float
  sample: 3.2
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._gateway_api import (
    GatewayError, RuntimeAPI, check_name, wait_settled)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "server": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["ready", "drain", "maint"]},
            "wait": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 600},
            "socket": {"type": "path", "default": "/var/lib/dgxspark/gateway/admin.sock"},
        },
        supports_check_mode=True,
    )
    server, state, timeout = module.params["server"], module.params["state"], module.params["timeout"]
    api = RuntimeAPI(module.params["socket"])
    try:
        check_name(server, "server")
        if timeout < 0:
            raise GatewayError(f"timeout must be 0 or more seconds, not {timeout}")
        servers, others = api.servers(server)
        if not servers:
            module.fail_json(msg=f"the gateway has no server named {server} in any backend: the gateway was not deployed "
                                 f"with this cluster (run playbooks/gateway.yml), or the cluster serves no model there",
                             servers=[], others={}, waited=0.0)
        before = {s["backend"]: s["admin"] for s in servers}
        changed = state is not None and any(admin != state for admin in before.values())
        alone = sorted(backend for backend, names in others.items() if not names) if state in ("drain", "maint") else []
        if alone:
            for backend in alone:
                module.warn(f"{server} is, right now, the only cluster serving {backend} at the gateway: requests for "
                            f"it fail until {server} is admitted again")
        waited = 0.0
        if changed and not module.check_mode:
            for entry in servers:
                if entry["admin"] == state:
                    continue
                if state == "ready" and entry["admin"] == "maint":
                    api.leave_maint(entry["backend"], server)
                elif state != "ready" or not module.params["wait"]:
                    api.set_state(entry["backend"], server, state)
        if state is not None and module.params["wait"] and not module.check_mode:
            ok, servers, waited = wait_settled(api, server, state, timeout)
            if not ok:
                detail = "; ".join(f"{s['backend']}: {s['status']}, {s['sessions']} in flight, {s['queued']} queued, "
                                   f"check {s['check'] or '-'}" for s in servers)
                why = ("the gateway's health checks do not see it serve" if state == "ready"
                       else "requests are still in flight")
                module.fail_json(msg=f"{server} at the gateway: {why} after {timeout} s ({detail}); its admin state is "
                                     f"{'drain' if state == 'ready' and changed else state}",
                                 servers=servers, others=others, waited=round(waited, 1), changed=changed)
            if state == "ready":
                # Healthy by the checks while still drained: only now does traffic come back.
                for entry in servers:
                    if entry["admin"] != "ready":
                        api.set_state(entry["backend"], server, "ready")
        if not module.check_mode:
            servers, others = api.servers(server)
        elif changed:
            servers = [dict(s, admin=state) for s in servers]
    except GatewayError as exc:
        module.fail_json(msg=f"{server}: {exc}")
    after = {s["backend"]: s["admin"] for s in servers}
    module.exit_json(changed=changed, servers=servers, others=others, alone=alone, waited=round(waited, 1),
                     diff={"before": before, "after": after})


if __name__ == "__main__":
    main()
