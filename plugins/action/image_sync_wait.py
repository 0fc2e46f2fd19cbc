# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.image_sync_wait: follow a background image_sync job until it ends, showing progress."""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


def progress_line(host: str, progress: dict) -> str:
    """The line shown for one look at the status file the image_sync module writes."""
    return (f"{host} -> {', '.join(str(t) for t in progress.get('targets') or [])}: {progress.get('phase')},"
            f" {float(progress.get('bytes') or 0) / 1e6:.1f} MB of ~{float(progress.get('expected_bytes') or 0) / 1e6:.1f} MB"
            f" ({progress.get('percent')}%), {progress.get('mb_per_s')} MB/s, {progress.get('seconds')} s")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("jid", "status_file", "lease_file", "interval", "timeout"))
    _supports_check_mode = False

    def _module(self, name: str, args: dict, task_vars: dict) -> dict:
        return self._execute_module(module_name=name, module_args=args, task_vars=task_vars)

    def _job_status(self, jid: str, task_vars: dict) -> dict:
        """What ansible.builtin.async_status reports for JID (the job's own result once it has finished)."""
        task = self._task.copy()
        task.args.clear()
        task.args["jid"] = jid
        action = self._shared_loader_obj.action_loader.get(
            "ansible.legacy.async_status", task=task, connection=self._connection, play_context=self._play_context,
            loader=self._loader, templar=self._templar, shared_loader_obj=self._shared_loader_obj)
        return action.run(task_vars=task_vars)

    def follow(self, jid: str, status_file: str, lease_file: str, interval: int, timeout: int,
               task_vars: dict) -> dict:
        """Rounds of: wait up to INTERVAL for the done mark while renewing the job's lease, ask the job, show a
        progress line; at most TIMEOUT s. When this loop ends (or the controller stops), nobody renews the lease and
        the job cancels itself."""
        host = task_vars.get("inventory_hostname", "")
        deadline = time.monotonic() + timeout
        while True:
            # The round renews the lease on the node while it waits, and stops renewing when the controller is gone.
            round_ = self._module("dgxspark.vllm.transfer_follow",
                                  {"status_file": status_file, "lease_file": lease_file, "wait": interval}, task_vars)
            if round_.get("failed"):
                return {"failed": True, "finished": False, "ansible_job_id": jid,
                        "msg": f"cannot follow the transfer (job {jid}) on {host}: {round_.get('msg')}; without its "
                               "lease renewed it cancels itself"}
            # The job's own result is asked for only once the round saw it end (done, or its process gone): a job
            # status request in every gap would double the time the lease goes unrenewed between two rounds.
            if round_.get("done") or not round_.get("running"):
                status = self._job_status(jid, task_vars)
                if status.get("finished"):
                    return status
            if time.monotonic() >= deadline:
                return {"failed": True, "finished": False, "ansible_job_id": jid,
                        "msg": f"the transfer (job {jid}) had not ended after {timeout} s; no longer followed, it"
                               f" cancels itself on {host} within seconds: look at {status_file} there"}
            progress = round_.get("progress")
            if isinstance(progress, dict):
                display.display(progress_line(host, progress))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _valid, args = self.validate_argument_spec(argument_spec={
            "jid": {"type": "str", "required": True},
            "status_file": {"type": "path", "required": True},
            "lease_file": {"type": "path"},
            "interval": {"type": "int", "default": 5},
            "timeout": {"type": "int", "required": True},
        })
        if args["interval"] < 1 or args["timeout"] < 1:
            raise AnsibleActionFail(f"interval and timeout must be at least 1 s (are {args['interval']} and"
                                    f" {args['timeout']})")
        try:
            result.update(self.follow(args["jid"], args["status_file"],
                                      args["lease_file"] or args["status_file"] + ".lease", args["interval"],
                                      args["timeout"], task_vars or {}))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
