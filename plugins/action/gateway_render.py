# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.gateway_render: a gateway's configuration, rendered on the controller from what the
clusters' heads published (see the module's documentation)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway
from ansible_collections.dgxspark.vllm.plugins.plugin_utils._action import fleet as fleet_of, published, variable_names

SETTINGS = {  # option: (type, default), handed to _gateway.render_gateway as they are
    "max_body": ("int", 1048576), "maxconn": ("int", 512), "check_interval": ("int", 10),
    "check_timeout": ("int", 30), "timeout": ("int", 600), "hard_stop_after": ("int", 600),
    "max_conn_per_source": ("int", 128),
}


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
            "unread": {"type": "dict", "default": {}},
            "bind": {"type": "str", "default": ""},
            "port": {"type": "int", "default": 8000},
            "door_port": {"type": "int", "default": 8100},
            "api_keys": {"type": "list", "elements": "str", "required": True, "no_log": True},
            "tls": {"type": "bool", "default": True},
            "paths": {"type": "list", "elements": "str", "default": list(_gateway.PATHS)},
            **{name: {"type": kind, "default": default} for name, (kind, default) in SETTINGS.items()},
        })
        variable_names("gateway_render", args, ("head_fact",))
        fleet = fleet_of("gateway_render", task_vars)
        host = str(task_vars.get("inventory_hostname") or "")
        hostvars = task_vars.get("hostvars", {})
        heads = sorted({str((place or {}).get("head") or "") for place in fleet["clusters"].values()} - {""})
        given = {}
        for head in heads:
            value = published("gateway_render", hostvars, head, args["head_fact"])
            if isinstance(value, dict):
                given[head] = value
        try:
            plan = _gateway.gateway_plan(
                fleet, host, _gateway.heads_read(heads, given, args["unread"]), bind=args["bind"],
                port=args["port"], door_port=args["door_port"], keys=args["api_keys"], tls=args["tls"],
                paths=args["paths"], **{name: args[name] for name in SETTINGS})
        except (_gateway.GatewayError, ValueError, TypeError) as exc:
            raise AnsibleActionFail(f"gateway_render: {exc}") from None
        # The configuration holds the clusters' engine keys, the keys file the clients' keys: the result is censored
        # like a no_log task's. A failure's message holds neither, and is shown.
        result.update(changed=False, _ansible_no_log=True, **plan)
        return result
