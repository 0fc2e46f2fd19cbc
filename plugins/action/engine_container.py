# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.engine_container: one engine container brought to its spec in one call on its node
(see the module's documentation)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.module_utils._engine_container import (
    MODULE, SpecError, kept, module_args, outcome)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # Check mode and --diff are the container module's: it reports what it would change, with its before and after.
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _args, args = self.validate_argument_spec(argument_spec={
            "spec": {"type": "dict", "required": True},
            "fingerprint": {"type": "str", "required": True},
            "image_id": {"type": "str", "default": ""},
            "before": {"type": "dict", "default": {}},
            "keep": {"type": "bool", "default": False},
            "restart": {"type": "bool", "default": False},
        })
        host = task_vars.get("inventory_hostname", "this host")
        try:
            options = module_args(args["spec"], image_id=args["image_id"], fingerprint=args["fingerprint"],
                                  restart=args["restart"])
        except SpecError as exc:
            raise AnsibleActionFail(f"{host}: engine_container: {exc}") from None
        before = args["before"] or {}
        if args["keep"] and not args["restart"]:
            if not before.get("running"):
                raise AnsibleActionFail(f"{host}: engine_container: keep is true but {options['name']} does not run "
                                        "(keep is engine_plan's settled, which only a running container is)")
            result.update(kept(before), name=options["name"])
            return result
        answer = self._execute_module(module_name=MODULE, module_args=options, task_vars=task_vars)
        result.update(answer)
        if answer.get("failed"):
            return result
        action, started = outcome(before, answer, bool(self._task.check_mode))
        result.update(action=action, started=started, name=options["name"])
        return result
