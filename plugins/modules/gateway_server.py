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
  - Every admin-state change is saved at once in HAProxy's server-state file beside the socket (C(server-state),
    C(show servers state)), which the gateway's configuration reads at every start, so that a drain survives a reload
    of the configuration, a restart of the container and a reboot of the gateway host.
  - HAProxy applies a saved server's port and address over its configuration's (haproxy/haproxy#1412), so the saved
    state gives each server the endpoint the configuration at O(config) gives it; a server that moved keeps its admin
    state there and is marked down until the health checks pass at the new endpoint; a server the configuration does
    not have is left out. Without O(server), the module only saves the state that way; the gateway role runs it once a
    new configuration is in place, before HAProxy reloads it, so that a cluster whose head or door moved is reached at
    its new endpoint.
  - A drain can be held (O(hold)); for that many seconds a V(ready) with O(respect_holds=true), which is what every run
    of the C(dgxspark.vllm.gateway) role asks, leaves the cluster as it is. A rollout holds the cluster it switches, so a
    gateway run during the rollout does not send it traffic before its new release serves. The holds are kept in
    C(holds.json) beside the socket.
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
    description:
      - The cluster's name (its inventory group), which is its servers' name in every backend.
      - Omitted, the module only saves the servers' state for the configuration at O(config) (no O(state), no O(hold)).
    type: str
  config:
    description: The gateway's configuration on the gateway host, the one HAProxy reads at its next start.
    type: path
    default: /etc/dgxspark/gateway/haproxy.cfg
    version_added: 0.6.0
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
  hold:
    description:
      - With O(state=drain) or O(state=maint), hold the cluster out for this many seconds from now, 0 to remove the
        hold (the admin state stays as set). A V(ready) without O(respect_holds) removes the hold too.
    type: int
    version_added: 0.6.0
  respect_holds:
    description:
      - With O(state=ready), leave a cluster that is held (O(hold)) as it is, and say so (RV(held)).
    type: bool
    default: false
    version_added: 0.6.0
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
moved:
  description:
    - The servers (C(backend/server)) the saved state gives the endpoint of O(config) in place of the one HAProxy
      runs them at.
  returned: always
  type: list
  elements: str
  sample: [model_qwen3-30b-a3b/pair2]
  version_added: 0.6.0
held:
  description: Until when (seconds since the epoch) the cluster is held out after the run; null when it is not.
  returned: always
  type: float
  sample: 1796563200.0
  version_added: 0.6.0
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._gateway_api import (
    HOLDS_FILE, GatewayError, RuntimeAPI, beside, check_name, read_holds, wait_settled, write_file)


def update_holds(holds: dict, server: str, state: str | None, hold: int | None, now: float) -> dict:
    """The holds after this run: a drain or maint with HOLD sets (or, 0, removes) the cluster's; a ready removes it."""
    out = dict(holds)
    if state in ("drain", "maint") and hold is not None:
        if hold > 0:
            out[server] = now + hold
        else:
            out.pop(server, None)
    elif state == "ready":
        out.pop(server, None)
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "server": {"type": "str"},
            "config": {"type": "path", "default": "/etc/dgxspark/gateway/haproxy.cfg"},
            "state": {"type": "str", "choices": ["ready", "drain", "maint"]},
            "wait": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 600},
            "socket": {"type": "path", "default": "/var/lib/dgxspark/gateway/admin.sock"},
            "hold": {"type": "int"},
            "respect_holds": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    server, state, timeout = module.params["server"], module.params["state"], module.params["timeout"]
    hold = module.params["hold"]
    api = RuntimeAPI(module.params["socket"])
    holds_path = beside(module.params["socket"], HOLDS_FILE)
    config = module.params["config"]
    if server is None:
        # The saved state for the configuration in place (before a reload): a cache HAProxy reads, not a managed state.
        if state is not None or hold is not None:
            module.fail_json(msg="state and hold need a server (the cluster's name)")
        try:
            moved = [] if module.check_mode else api.save_state(config)
        except (GatewayError, OSError) as exc:
            module.fail_json(msg=f"saving the gateway's server state: {exc}")
        module.exit_json(changed=False, moved=moved, servers=[], others={}, alone=[], waited=0.0, held=None)
    moved = []
    try:
        check_name(server, "server")
        if timeout < 0:
            raise GatewayError(f"timeout must be 0 or more seconds, not {timeout}")
        if hold is not None and (hold < 0 or state not in ("drain", "maint")):
            raise GatewayError(f"hold is {hold}: give 0 or more seconds, with state drain or maint")
        servers, others = api.servers(server)
        if not servers:
            module.fail_json(msg=f"the gateway has no server named {server} in any backend: the gateway was not deployed "
                                 f"with this cluster (run playbooks/gateway.yml), or the cluster serves no model there",
                             servers=[], others={}, waited=0.0, held=None, moved=[])
        now = time.time()
        holds = read_holds(holds_path, now)
        before = {s["backend"]: s["admin"] for s in servers}
        if state == "ready" and module.params["respect_holds"] and server in holds:
            # A rollout holds it: it serves again when the rollout admits it (or its hold ends).
            module.exit_json(changed=False, servers=servers, others=others, alone=[], waited=0.0, held=holds[server],
                             moved=[],
                             msg=f"{server} is held out at the gateway by a rollout for "
                                 f"{round(holds[server] - now)} s more: left {', '.join(sorted(set(before.values())))}",
                             diff={"before": before, "after": before})
        holds_after = update_holds(holds, server, state, hold, now)
        changed = state is not None and any(admin != state for admin in before.values())
        changed = changed or holds_after.keys() != holds.keys() or (hold or 0) > 0
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
            # Held before any wait: a gateway run meanwhile leaves it out.
            if holds_after != holds:
                write_file(holds_path, json_text(holds_after))
            moved = api.save_state(config)
        if state is not None and module.params["wait"] and not module.check_mode:
            ok, servers, waited = wait_settled(api, server, state, timeout)
            if not ok:
                detail = "; ".join(f"{s['backend']}: {s['status']}, {s['sessions']} in flight, {s['queued']} queued, "
                                   f"check {s['check'] or '-'}" for s in servers)
                why = ("the gateway's health checks do not see it serve" if state == "ready"
                       else "requests are still in flight")
                module.fail_json(msg=f"{server} at the gateway: {why} after {timeout} s ({detail}); its admin state is "
                                     f"{'drain' if state == 'ready' and changed else state}",
                                 servers=servers, others=others, waited=round(waited, 1), changed=changed,
                                 held=holds_after.get(server))
            if state == "ready":
                # Healthy by the checks while still drained: only now does traffic come back.
                admitted = False
                for entry in servers:
                    if entry["admin"] != "ready":
                        api.set_state(entry["backend"], server, "ready")
                        admitted = True
                if admitted:
                    moved = api.save_state(config)
        if not module.check_mode:
            servers, others = api.servers(server)
        elif changed and state is not None:
            servers = [dict(s, admin=state) for s in servers]
    except (GatewayError, OSError) as exc:
        module.fail_json(msg=f"{server}: {exc}")
    after = {s["backend"]: s["admin"] for s in servers}
    module.exit_json(changed=changed, servers=servers, others=others, alone=alone, waited=round(waited, 1),
                     held=holds_after.get(server), moved=moved, diff={"before": before, "after": after})


def json_text(holds: dict) -> str:
    return json.dumps(holds, sort_keys=True, indent=1) + "\n"


if __name__ == "__main__":
    main()
