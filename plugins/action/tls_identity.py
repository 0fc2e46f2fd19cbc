# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.tls_identity: read a node's TLS identity file, then keep it, take the inventory's or
make a new self-signed one on the controller (see the module's documentation)."""

from __future__ import annotations

import base64

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.dgxspark.vllm.plugins.plugin_utils._tls import TlsError, plan


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # It reads one file on the node and writes nothing: the same in check mode.
    _supports_check_mode = True
    _VALID_ARGS = frozenset(("path", "names", "optional_names", "common_name", "certificate", "private_key",
                             "valid_days", "renew_before_days"))

    def _read(self, path: str, task_vars) -> str | None:
        """The file's text on the node (one module call); None when there is none."""
        read = self._execute_module(module_name="ansible.legacy.slurp", module_args={"src": path},
                                    task_vars=task_vars)
        if read.get("failed"):
            if str(read.get("msg", "")).lower().startswith("file not found"):
                return None
            raise AnsibleActionFail(f"tls_identity: cannot read {path} on the node: {read.get('msg', '')}")
        return base64.b64decode(read["content"]).decode("utf-8", errors="replace")

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        path = args.get("path")
        if not isinstance(path, str) or not path.startswith("/") or "\n" in path:
            raise AnsibleActionFail(f"tls_identity: path is {path!r}: give the absolute path of the identity file")
        current = self._read(path, task_vars)
        try:
            found = plan(current, args.get("names"), str(args.get("common_name") or ""),
                         given_certificate=str(args.get("certificate") or ""),
                         given_private_key=str(args.get("private_key") or ""),
                         valid_days=args.get("valid_days", 397), renew_before_days=args.get("renew_before_days", 30),
                         optional_names=args.get("optional_names") or [])
        except TlsError as exc:
            raise AnsibleActionFail(f"{task_vars.get('inventory_hostname', 'this host')}: tls_identity: {exc}") from None
        result.update(found)
        # It writes nothing; whoever installs the file reports the change.
        result["changed"] = False
        result["renew"] = found.pop("changed")
        return result
