# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.fleet_status: each cluster's status table, drawn on the controller from what its
members read (see the module's documentation)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.module_utils import _layout, _status
from ansible_collections.dgxspark.vllm.plugins.plugin_utils._action import fleet as fleet_of, published, variable_names


def _read(hostvars, host: str, name: str) -> dict:
    """HOST's registered NAME, or {} when it has none (a host the play lost, a task skipped on it)."""
    value = published("fleet_status", hostvars, host, name)
    return dict(value) if isinstance(value, dict) and not value.get("skipped") else {}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # It reads what the members registered, on the controller, and changes nothing: the same in check mode.
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _args, args = self.validate_argument_spec(argument_spec={
            "node_info": {"type": "str", "default": "status_node"},
            "ray_info": {"type": "str", "default": "status_ray"},
        })
        variable_names("fleet_status", args, ("node_info", "ray_info"))
        fleet = fleet_of("fleet_status", task_vars)
        hostvars = task_vars.get("hostvars", {})
        in_play = set(task_vars.get("ansible_play_hosts") or [])
        names = {name: _layout.place(name, task_vars.get(name))
                 for name in ("ray_cluster_head_container", "vllm_serve_mp_container")}
        tables = {}
        for cluster, place in sorted(fleet["clusters"].items()):
            members, head = [str(m) for m in place.get("hosts") or []], str(place.get("head") or "")
            head_node = _read(hostvars, head, args["node_info"])
            try:
                tables[cluster] = _status.table(
                    cluster, members, head=head,
                    containers=[_read(hostvars, m, args["node_info"]).get("containers") or [] for m in members],
                    release=head_node.get("release") or {}, health=head_node.get("health", -1),
                    metrics=head_node.get("metrics") or "", ray=_read(hostvars, head, args["ray_info"]),
                    head_in_play=head in in_play, ray_head_container=names["ray_cluster_head_container"],
                    mp_container=names["vllm_serve_mp_container"], watchdog=head_node.get("watchdog") or {})
            except _status.StatusError as exc:
                raise AnsibleActionFail(f"fleet_status: {exc}") from None
        result.update(changed=False, tables=tables)
        return result
