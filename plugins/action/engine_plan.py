# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.engine_plan: a cluster's engine plan from its members' published facts, on the
controller (see the module's documentation)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.filter.core import to_json

from ansible_collections.dgxspark.vllm.plugins.module_utils._engine_plan import PlanError, plan
from ansible_collections.dgxspark.vllm.plugins.plugin_utils._action import variable_names

_MISSING = object()


def _fact(hostvars, host: str, path: str):
    """HOST's published fact at PATH (dotted), or _MISSING."""
    try:
        value = hostvars[host] if host in hostvars else _MISSING
        for part in path.split("."):
            if value is _MISSING or not hasattr(value, "__contains__") or part not in value:
                return _MISSING
            value = value[part]
    except Exception as exc:  # pylint: disable=broad-except  # lazy hostvars: a template error in a published fact
        raise AnsibleActionFail(f"engine_plan: cannot read {host}'s {path}: {exc}") from exc
    return value


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # It reads the members' facts on the controller and changes nothing: the same in check mode.
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _args, args = self.validate_argument_spec(argument_spec={
            "members": {"type": "list", "elements": "str", "required": True},
            "head": {"type": "str", "required": True},
            "spec": {"type": "str", "required": True},
            "before": {"type": "str", "required": True},
            "image_id": {"type": "str", "required": True},
            "component": {"type": "str", "default": ""},
            "workers_follow_head": {"type": "bool", "default": False},
            "publish": {"type": "str", "required": True},
        })
        variable_names("engine_plan", args, ("spec", "before", "image_id", "publish"),
                       dotted=("spec", "before", "image_id"))
        hostvars = task_vars.get("hostvars", {})
        members = list(args["members"])
        specs, befores, image_ids = {}, {}, {}
        for member in members:
            spec = _fact(hostvars, member, args["spec"])
            if spec is not _MISSING:
                specs[member] = spec
            before = _fact(hostvars, member, args["before"])
            befores[member] = {} if before is _MISSING else before
            image_id = _fact(hostvars, member, args["image_id"])
            image_ids[member] = "" if image_id is _MISSING or image_id is None else str(image_id)
        try:
            found = plan(members, args["head"], specs, befores, image_ids, to_json, component=args["component"],
                         workers_follow_head=args["workers_follow_head"])
        except PlanError as exc:
            raise AnsibleActionFail(f"{task_vars.get('inventory_hostname', 'this host')}: engine_plan: {exc}") from None
        host = task_vars.get("inventory_hostname")
        mine = found["nodes"].get(host, {"settled": False, "why": "it is not a member"})
        prefix = args["publish"]
        result.update(found, changed=False, settled=mine["settled"], ansible_facts={
            f"{prefix}_fingerprint": found["fingerprint"], f"{prefix}_settled": mine["settled"],
            f"{prefix}_switch": found["switch"]})
        return result
