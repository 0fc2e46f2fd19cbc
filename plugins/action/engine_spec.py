# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.engine_spec: one node's engine-container spec, built on the controller (see the
module's documentation)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.module_utils._engine_spec import BACKENDS, SpecError, spec
from ansible_collections.dgxspark.vllm.plugins.plugin_utils._action import variable_names


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # It builds a value on the controller and changes nothing: the same in check mode.
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        _args, args = self.validate_argument_spec(argument_spec={
            "backend": {"type": "str", "required": True, "choices": list(BACKENDS)},
            "name": {"type": "str", "required": True},
            "image": {"type": "str", "required": True},
            "role": {"type": "str", "required": True, "choices": ["head", "worker"]},
            "pair": {"type": "str", "required": True},
            "launcher_dir": {"type": "str", "required": True},
            "launcher_checksum": {"type": "str", "default": ""},
            "env": {"type": "dict", "default": {}},
            "engine": {"type": "dict", "default": {}},
            "logs": {"type": "raw"},
            "ray": {"type": "dict", "default": {}},
            "mp": {"type": "dict", "default": {}},
            "publish": {"type": "str", "required": True},
        })
        host = task_vars.get("inventory_hostname", "this host")
        variable_names(f"{host}: engine_spec", args, ("publish",))
        try:
            built = spec(args["backend"], name=args["name"], image=args["image"], role=args["role"],
                         pair=args["pair"], launcher_dir=args["launcher_dir"], env=args["env"],
                         engine=args["engine"] or None, logs=args["logs"],
                         launcher_checksum=args["launcher_checksum"], ray=args["ray"], mp=args["mp"])
        except SpecError as exc:
            raise AnsibleActionFail(f"{host}: engine_spec ({args['name']}): {exc}") from None
        result.update(changed=False, spec=built, ansible_facts={args["publish"]: built})
        return result
