# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin dgxspark.vllm.image_sync_wait: follow a background image_sync job until it ends, showing progress."""

from __future__ import annotations

import shlex
import signal
import threading
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import CANCEL_TEXT

display = Display()


def progress_line(host: str, progress: dict) -> str:
    """The line shown for one look at the status file the image_sync module writes."""
    return (f"{host} -> {', '.join(str(t) for t in progress.get('targets') or [])}: {progress.get('phase')},"
            f" {float(progress.get('bytes') or 0) / 1e6:.1f} MB of ~{float(progress.get('expected_bytes') or 0) / 1e6:.1f} MB"
            f" ({progress.get('percent')}%), {progress.get('mb_per_s')} MB/s, {progress.get('seconds')} s")


class Interrupted(BaseException):
    """ansible-playbook passed a SIGINT or SIGTERM on to this worker while it followed the job.

    A BaseException, like KeyboardInterrupt: Ansible's own code that the signal lands in (building a module, its ssh
    connection's retry loop) catches Exception and would turn it into another error or retry the command."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("start", "jid", "status_file", "lease_file", "interval", "timeout"))
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

    def _mark_lease(self, lease_file: str) -> None:
        """Mark the job's lease on the node cancelled (the file created if the job has not yet, the mark written into
        it and its time set to the epoch): the job sees it within a second and cancels itself, and a job starting
        later never begins. A renewal under way at that moment moves the time but leaves the written mark."""
        quoted = shlex.quote(lease_file)
        self._low_level_execute_command(f"printf %s {CANCEL_TEXT.decode()} > {quoted}; touch -d @0 -- {quoted}")

    def _start(self, args: dict, status_file: str, lease_file: str, async_time: int, task_vars: dict) -> str:
        """Start image_sync with ARGS in the background (async_wrapper, ASYNC_TIME s at most); its job ID."""
        module_args = dict(args, status_file=status_file, lease_file=lease_file)
        saved = self._task.async_val
        self._task.async_val = async_time  # the module's async limit, as an `async:` keyword on a task would set it
        try:
            started = self._execute_module(module_name="dgxspark.vllm.image_sync", module_args=module_args,
                                           task_vars=task_vars, wrap_async=True)
        finally:
            self._task.async_val = saved
        if started.get("failed") or not started.get("ansible_job_id"):
            raise AnsibleActionFail(f"cannot start the transfer in the background on "
                                    f"{task_vars.get('inventory_hostname', '')}: {started.get('msg', started)}")
        return started["ansible_job_id"]

    def follow_or_cancel(self, jid: str | None, status_file: str, lease_file: str, interval: int, timeout: int,
                         task_vars: dict, start: dict | None = None) -> dict:
        """Start the job from START (when JID is None), follow() it, and when the play is interrupted meanwhile, mark
        the lease cancelled before the worker ends.

        The handler is in place before the job exists, so no interrupt goes unseen. A round under way is not ended by
        the interrupt: with an ssh control master (Ansible's default ControlPersist) the session outlives the play's
        process, and the round would go on renewing; a marked lease is never renewed. Marking it cancels the job at
        once whether the interrupt came before it started, during a round or between two."""
        def run() -> dict:
            job = jid or self._start(start or {}, status_file, lease_file, timeout - 60, task_vars)
            return self.follow(job, status_file, lease_file, interval, timeout, task_vars)

        if threading.current_thread() is not threading.main_thread():
            return run()

        caught: list[int] = []

        def interrupted(signum, _frame):
            # The play sends SIGTERM right after SIGINT: the second must not interrupt the lease's marking.
            for each in previous:
                signal.signal(each, signal.SIG_IGN)
            caught.append(signum)
            raise Interrupted(signum)

        previous = {signum: signal.signal(signum, interrupted) for signum in (signal.SIGINT, signal.SIGTERM)}

        def restore() -> None:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

        try:
            result = run()
        except BaseException:
            if not caught:
                restore()
                raise
        else:
            if not caught:
                restore()
                return result
        # Interrupted, whatever Ansible's code the signal landed in made of the Interrupted on its way out (passed it
        # on, turned it into another error, or swallowed it).
        # Both signals are ignored from the first on: the play's second waits for the mark.
        try:
            self._mark_lease(lease_file)
        except Exception as error:  # pylint: disable=broad-exception-caught
            display.warning(f"could not mark the transfer's lease {lease_file} cancelled ({error}); the transfer"
                            " cancels itself when the lease lapses")
        restore()
        signal.raise_signal(caught[0])  # the play's own handling of the signal (an Ansible worker ends here)
        raise AnsibleActionFail(f"interrupted by signal {caught[0]}; the transfer's lease was marked cancelled,"
                                " so the transfer cancels itself")

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _valid, args = self.validate_argument_spec(argument_spec={
            "start": {"type": "dict"},
            "jid": {"type": "str"},
            "status_file": {"type": "path", "required": True},
            "lease_file": {"type": "path"},
            "interval": {"type": "int", "default": 5},
            "timeout": {"type": "int", "required": True},
        })
        if args["interval"] < 1 or args["timeout"] < 1:
            raise AnsibleActionFail(f"interval and timeout must be at least 1 s (are {args['interval']} and"
                                    f" {args['timeout']})")
        if (args["start"] is None) == (args["jid"] is None):
            raise AnsibleActionFail("give exactly one of start (the image_sync arguments of a job to start) and jid"
                                    " (a job started before)")
        if args["start"] is not None and args["timeout"] < 120:
            raise AnsibleActionFail(f"timeout must be at least 120 s with start (is {args['timeout']}): the job's own"
                                    " time limit is timeout less 60 s")
        try:
            result.update(self.follow_or_cancel(args["jid"], args["status_file"],
                                                args["lease_file"] or args["status_file"] + ".lease",
                                                args["interval"], args["timeout"], task_vars or {}, args["start"]))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
