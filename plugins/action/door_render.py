# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.door_render: a head's door, rendered on the controller from what the head published
(see the module's documentation)."""

from __future__ import annotations

import re

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway
from ansible_collections.dgxspark.vllm.plugins.plugin_utils._action import fleet as fleet_of, variable_names

FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # It reads the play's facts and renders text on the controller; nothing on a node: the same in check mode.
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _args, args = self.validate_argument_spec(argument_spec={
            "head_fact": {"type": "str", "default": "gateway_head"},
            "port": {"type": "int", "default": 8100},
            "timeout": {"type": "int", "default": 600},
            "paths": {"type": "list", "elements": "str", "default": list(_gateway.PATHS)},
            "metrics_key": {"type": "str", "default": "", "no_log": True},
            "client_keys": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "allow_no_api_key": {"type": "bool", "default": False},
            "tls": {"type": "bool", "default": True},
            "tls_identity": {"type": "dict", "default": {}},
            "tls_file": {"type": "str", "default": _gateway.TLS_FILE},
            "tls_certificate_file": {"type": "str", "default": "tls.crt"},
        })
        variable_names("door_render", args, ("head_fact",))
        fleet = fleet_of("door_render", task_vars)
        head = task_vars.get(args["head_fact"])
        if not isinstance(head, dict):
            raise AnsibleActionFail(f"door_render: no {args['head_fact']} on {task_vars.get('inventory_hostname')}: "
                                    "run it on a head after the role's door tasks published it")
        gateways = [g for g in fleet.get("gateways") or [] if isinstance(g, dict)]
        allowed = [str(g.get("lan_ip") or "") for g in gateways + [m for m in fleet.get("monitors") or []
                                                                   if isinstance(m, dict)]]
        for option in ("tls_file", "tls_certificate_file"):
            if not FILE_NAME.match(args[option]):
                raise AnsibleActionFail(f"door_render: {option} is {args[option]!r}: give a plain file name (letters, "
                                        "digits, '.', '_' and '-'; gateway_{option})")
        identity = args["tls_identity"]
        if args["tls"] and not (identity.get("pem") and identity.get("trust_anchor")):
            raise AnsibleActionFail("door_render: tls is on and tls_identity has no pem and trust_anchor: give the "
                                    "result of dgxspark.vllm.tls_identity for the door's certificate")
        try:
            door = _gateway.door_plan(
                head.get("release") or {}, bind=head.get("lan_ip"), port=args["port"], allowed=allowed,
                timeout=args["timeout"], paths=args["paths"], engine_env=head.get("engine_env"),
                metrics_key=args["metrics_key"],
                # Without gateways the door stands for the clients, with their keys.
                client_keys=None if gateways else args["client_keys"],
                allow_no_api_key=args["allow_no_api_key"], tls=args["tls"])
        except (_gateway.GatewayError, ValueError, TypeError) as exc:
            raise AnsibleActionFail(f"door_render: {exc}") from None
        # The files the door's container reads, by name: its configuration, its clients' keys, its certificate.
        files = [{"name": "haproxy.cfg", "content": door["config"]}]
        # "keys" is no name for a result (Jinja's dot reads the dict's method): the clients' keys are client_keys.
        door["client_keys"] = door.pop("keys")
        if door["clients"]:
            files.append({"name": _gateway.KEYS_FILE, "content": door["client_keys"]})
        if args["tls"]:
            files += [{"name": args["tls_file"], "content": identity["pem"]},
                      {"name": args["tls_certificate_file"], "content": identity["trust_anchor"]}]
        # The configuration holds the cluster's engine key, the files the clients' keys and the door's private key:
        # the result is censored like a no_log task's. A failure's message holds none of them, and is shown.
        result.update(changed=False, _ansible_no_log=True, files=files, **door)
        return result
