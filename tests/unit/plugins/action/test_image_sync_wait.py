# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the image_sync_wait action: the bounded loop that follows a background image_sync job."""

from __future__ import annotations

import os
import signal
from unittest.mock import MagicMock

import pytest

from ansible.errors import AnsibleActionFail
from ansible.playbook.task import Task

from ansible_collections.dgxspark.vllm.plugins.action import image_sync_wait as plugin

PROGRESS = {"phase": "transfer", "bytes": 12_345_678, "expected_bytes": 40_000_000, "percent": 30, "mb_per_s": 11.2,
            "seconds": 1.1, "targets": ["spark-2", "spark-3"], "done": False}
DONE = {"finished": True, "started": True, "changed": True, "ansible_job_id": "j1", "table": ["- spark-2 transfer"]}
FAILED = {"finished": True, "started": True, "failed": True, "ansible_job_id": "j1",
          "msg": "spark-2: the target refused the key", "table": ["- spark-2 failed"]}


def followed(progress, running=None):
    """A transfer_follow round's result that saw PROGRESS in the status file (its job's process alive unless it is
    done or RUNNING says otherwise)."""
    done = bool(progress and progress.get("done"))
    return {"changed": False, "done": done, "running": (not done) if running is None else running,
            "progress": progress, "renewed": 1, "controller_lost": False}


def make_action(statuses, slurps, args=None):
    """An action whose module calls are scripted: STATUSES for async_status, SLURPS for the transfer_follow rounds."""
    task = Task()
    task.args = args if args is not None else {"jid": "j1", "status_file": "/run/s.json", "interval": 1, "timeout": 60}
    connection = MagicMock()
    connection._shell.tmpdir = None
    action = plugin.ActionModule(task, connection, MagicMock(check_mode=False), loader=None, templar=None,
                                 shared_loader_obj=None)
    calls = []
    statuses, slurps = iter(statuses), iter(slurps)

    def module(name, module_args, task_vars):
        calls.append((name, module_args))
        assert name == "dgxspark.vllm.transfer_follow"
        return next(slurps)

    def job_status(jid, task_vars):
        calls.append(("async_status", {"jid": jid}))
        return next(statuses)

    action._module = module
    action._job_status = job_status
    action._remove_tmp_path = MagicMock()
    return action, calls


@pytest.fixture
def shown(monkeypatch):
    lines = []
    monkeypatch.setattr(plugin.display, "display", lines.append)
    return lines


def test_progress_line_is_the_one_the_role_showed():
    assert plugin.progress_line("spark-1", PROGRESS) == (
        "spark-1 -> spark-2, spark-3: transfer, 12.3 MB of ~40.0 MB (30%), 11.2 MB/s, 1.1 s")


def test_rounds_show_progress_until_the_job_ends_and_return_its_result(shown):
    running = {"finished": False, "started": True}
    action, calls = make_action([running, DONE], [followed(None, running=False), followed(PROGRESS),
                                                  followed(dict(PROGRESS, done=True))])
    result = action.run(task_vars={"inventory_hostname": "spark-1"})
    assert result == {**result, **DONE}
    assert shown == ["spark-1 -> spark-2, spark-3: transfer, 12.3 MB of ~40.0 MB (30%), 11.2 MB/s, 1.1 s"]
    # The job's status is asked for only when a round did not see it running (no progress yet, or done): while it
    # runs, the gap between two rounds is one module start, which the lease has to cover.
    assert [call[0] for call in calls] == ["dgxspark.vllm.transfer_follow", "async_status",
                                           "dgxspark.vllm.transfer_follow",
                                           "dgxspark.vllm.transfer_follow", "async_status"]
    # every round renews the job's lease (beside the status file unless told) while it waits on the node
    assert calls[0][1] == {"status_file": "/run/s.json", "lease_file": "/run/s.json.lease", "wait": 1}
    action._remove_tmp_path.assert_called_once()


def test_the_lease_file_is_the_one_given(shown):
    args = {"jid": "j1", "status_file": "/run/s.json", "lease_file": "/run/l", "interval": 2, "timeout": 9}
    action, calls = make_action([DONE], [followed(None, running=False)], args=args)
    assert action.run(task_vars={})["finished"] is True
    assert calls[0][1] == {"status_file": "/run/s.json", "lease_file": "/run/l", "wait": 2}


def test_a_round_that_cannot_run_ends_the_following_so_the_job_cancels_itself(shown):
    action, calls = make_action([], [{"failed": True, "msg": "the directory of lease_file /x/l does not exist"}])
    result = action.run(task_vars={"inventory_hostname": "spark-1"})
    assert result["failed"] is True and result["finished"] is False
    assert "lease_file /x/l does not exist" in result["msg"] and "cancels itself" in result["msg"]
    assert [call[0] for call in calls] == ["dgxspark.vllm.transfer_follow"]


def test_a_failed_job_fails_the_task_with_its_message_and_table(shown):
    action, _calls = make_action([FAILED], [followed(None, running=False)])
    result = action.run(task_vars={"inventory_hostname": "spark-1"})
    assert result["failed"] is True and result["msg"] == FAILED["msg"] and result["table"] == FAILED["table"]
    assert shown == []


def test_a_round_without_progress_shows_nothing(shown):
    action, _calls = make_action([{"finished": False}, DONE], [followed(None, running=False)] * 2)
    assert action.run(task_vars={"inventory_hostname": "spark-1"})["finished"] is True
    assert shown == []


def test_the_loop_is_bounded_by_the_timeout(shown, monkeypatch):
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(plugin.time, "monotonic", lambda: next(clock))
    running = {"finished": False}
    action, calls = make_action([running] * 10, [followed(PROGRESS, running=False)] * 10,
                                args={"jid": "j9", "status_file": "/run/s.json", "interval": 5, "timeout": 25})
    result = action.run(task_vars={"inventory_hostname": "spark-1"})
    assert result["failed"] is True and result["finished"] is False
    assert result["msg"] == ("the transfer (job j9) had not ended after 25 s; no longer followed, it cancels itself"
                             " on spark-1 within seconds: look at /run/s.json there")
    assert len([c for c in calls if c[0] == "async_status"]) == 3  # at 10, 20 and 30 s on the clock
    assert len(shown) == 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_play_marks_the_lease_then_hands_the_signal_on(shown, signum):
    """ansible-playbook passes Ctrl-C (or SIGTERM) on to its worker; the round under way on the node would go on (its
    session lives in the ssh control master), so the lease is marked cancelled first, then the play's own handler
    runs."""
    seen = []
    previous = {s: signal.signal(s, lambda s_, _f: seen.append(("handler", s_))) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        action, calls = make_action([{"finished": False}], [followed(PROGRESS), followed(PROGRESS)])
        rounds = action._module

        def round_then_signal(name, module_args, task_vars):
            result = rounds(name, module_args, task_vars)
            if len(calls) == 2:  # the second round: the signal lands while it runs
                os.kill(os.getpid(), signum)
            return result

        action._module = round_then_signal
        other = signal.SIGTERM if signum == signal.SIGINT else signal.SIGINT

        def mark(cmd):  # the play's next signal lands while the lease is being marked: it waits (ignored)
            os.kill(os.getpid(), other)
            seen.append(("node", cmd))
            return {"rc": 0}

        action._low_level_execute_command = mark
        with pytest.raises(AnsibleActionFail, match=f"interrupted by signal {int(signum)}; the transfer's lease was"):
            action.run(task_vars={"inventory_hostname": "spark-1"})
        assert seen == [("node", "printf %s cancelled > /run/s.json.lease; touch -d @0 -- /run/s.json.lease"), ("handler", signum)]
        assert signal.getsignal(signal.SIGINT) is not None and signal.getsignal(signum).__name__ == "<lambda>"
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def test_an_interrupt_passes_through_ansibles_except_exception_and_is_handled_even_when_swallowed(shown):
    """The signal lands in Ansible's own code: an `except Exception` there (building a module, the ssh connection's
    retry loop) must not turn it into another error or retry; and when some code swallows it anyway, the lease is
    still marked once the follow ends, and the play's handler still runs."""
    seen = []
    previous = {s: signal.signal(s, lambda s_, _f: seen.append(("handler", s_))) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        action, calls = make_action([], [followed(PROGRESS)])
        rounds = action._module

        def round_in_ansible_code(name, module_args, task_vars):
            for attempt in range(2):  # the ssh connection's retry loop (ansible_ssh_retries)
                try:
                    if attempt == 0:
                        os.kill(os.getpid(), signal.SIGINT)
                    return rounds(name, module_args, task_vars)
                except Exception:  # pylint: disable=broad-exception-caught
                    continue
            raise AssertionError("unreachable")

        action._module = round_in_ansible_code
        action._low_level_execute_command = lambda cmd: seen.append(("node", cmd)) or {"rc": 0}
        with pytest.raises(AnsibleActionFail, match="interrupted by signal 2"):
            action.run(task_vars={"inventory_hostname": "spark-1"})
        assert seen == [("node", "printf %s cancelled > /run/s.json.lease; touch -d @0 -- /run/s.json.lease"), ("handler", signal.SIGINT)]
        assert calls == []  # the retry loop did not run the round again (it would renew the lease)

        seen.clear()
        action, calls = make_action([DONE], [followed(None, running=False)])
        rounds = action._module

        def swallowing_round(name, module_args, task_vars):
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except BaseException:  # pylint: disable=broad-exception-caught
                pass
            return rounds(name, module_args, task_vars)

        action._module = swallowing_round
        action._low_level_execute_command = lambda cmd: seen.append(("node", cmd)) or {"rc": 0}
        with pytest.raises(AnsibleActionFail, match="interrupted by signal 2"):
            action.run(task_vars={"inventory_hostname": "spark-1"})
        assert seen == [("node", "printf %s cancelled > /run/s.json.lease; touch -d @0 -- /run/s.json.lease"), ("handler", signal.SIGINT)]
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@pytest.mark.parametrize("args", [{"jid": "j1", "status_file": "/s", "interval": 0, "timeout": 10},
                                  {"jid": "j1", "status_file": "/s", "timeout": 0}])
def test_intervals_below_a_second_are_refused(args):
    action, _calls = make_action([], [], args=args)
    with pytest.raises(AnsibleActionFail, match="at least 1 s"):
        action.run(task_vars={})


def test_unknown_options_are_refused():
    action, _calls = make_action([], [], args={"jid": "j1", "status_file": "/s", "timeout": 10, "poll": 3})
    with pytest.raises(AnsibleActionFail, match="Invalid options"):
        action.run(task_vars={})


def test_started_here_the_job_gets_this_tasks_files_and_an_async_limit_below_the_timeout(shown):
    args = {"start": {"image": "vllm-node:1", "targets": [{"host": "10.0.0.2"}]}, "status_file": "/run/s.json",
            "interval": 1, "timeout": 600}
    action, calls = make_action([DONE], [followed(None, running=False)], args=args)
    launched = []

    def execute_module(module_name, module_args, task_vars, wrap_async):
        launched.append((module_name, module_args, wrap_async, action._task.async_val))
        return {"started": 1, "finished": 0, "ansible_job_id": "j7", "changed": True}

    action._execute_module = execute_module
    action._job_status = lambda jid, task_vars: calls.append(("async_status", jid)) or DONE
    assert action.run(task_vars={"inventory_hostname": "spark-1"})["finished"] is True
    assert launched == [("dgxspark.vllm.image_sync", {"image": "vllm-node:1", "targets": [{"host": "10.0.0.2"}],
                                                      "status_file": "/run/s.json", "lease_file": "/run/s.json.lease"},
                         True, 540)]
    assert action._task.async_val == 0  # the task's own async time is left as it was
    assert ("async_status", "j7") in calls


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_the_job_starts_marks_its_lease_so_it_never_begins(shown, signum):
    """The handler is in place before the job exists: an interrupt while it is being started (the job may or may not
    have begun on the node) marks the lease, which a job starting afterwards reads as cancelled."""
    seen = []
    previous = {s: signal.signal(s, lambda s_, _f: seen.append(("handler", s_))) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        args = {"start": {"image": "vllm-node:1", "targets": [{"host": "10.0.0.2"}]}, "status_file": "/run/s.json",
                "interval": 1, "timeout": 600}
        action, calls = make_action([], [], args=args)

        def execute_module(module_name, module_args, task_vars, wrap_async):
            os.kill(os.getpid(), signum)
            return {"ansible_job_id": "j7"}

        action._execute_module = execute_module
        action._low_level_execute_command = lambda cmd: seen.append(("node", cmd)) or {"rc": 0}
        with pytest.raises(AnsibleActionFail, match="marked cancelled"):
            action.run(task_vars={"inventory_hostname": "spark-1"})
        assert seen == [("node", "printf %s cancelled > /run/s.json.lease; touch -d @0 -- /run/s.json.lease"), ("handler", signum)]
        assert calls == []  # no round was started
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@pytest.mark.parametrize("args, match", [
    ({"status_file": "/s", "timeout": 600}, "exactly one of start"),
    ({"jid": "j1", "start": {"image": "x"}, "status_file": "/s", "timeout": 600}, "exactly one of start"),
    ({"start": {"image": "x"}, "status_file": "/s", "timeout": 119}, "at least 120 s with start"),
])
def test_start_or_jid_and_a_timeout_the_job_fits_in(args, match):
    action, _calls = make_action([], [], args=args)
    with pytest.raises(AnsibleActionFail, match=match):
        action.run(task_vars={})
