# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of transfer_follow: one round of following a background transfer, renewing its lease. Fake clock and
pauses; the controller's presence is scripted."""

from __future__ import annotations

import json
import os

from ansible_collections.dgxspark.vllm.plugins.modules import transfer_follow as mod


class Round:
    """A fake clock whose pauses advance it, and the renewals made."""

    def __init__(self):
        self.now = 0.0
        self.renewed = []

    def clock(self):
        return self.now

    def pause(self, seconds):
        self.now = round(self.now + seconds, 6)

    def renew(self, path, ahead=0.0, create=True):
        self.renewed.append((self.now + ahead, path))
        return True


def write(path, **data):
    path.write_text(json.dumps(data))


def test_a_round_renews_every_second_until_its_wait_is_over(tmp_path):
    status = tmp_path / "s.json"
    write(status, phase="transfer", done=False, pid=4242)
    r = Round()
    result = mod.follow_round(str(status), "/run/l", 5, clock=r.clock, pause=r.pause, gone=lambda: False,
                              is_alive=lambda pid: pid == 4242, renew_lease=r.renew)
    # every second, and at the end 2 s ahead: the gap to the next round is covered, a stopped controller is not
    assert [t for t, _p in r.renewed] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0]
    assert result == {"changed": False, "done": False, "running": True, "renewed": 6, "controller_lost": False,
                      "progress": {"phase": "transfer", "done": False, "pid": 4242}}


def test_the_done_mark_ends_the_round_at_once(tmp_path):
    status = tmp_path / "s.json"
    write(status, done=True, pid=4242)
    r = Round()
    result = mod.follow_round(str(status), "/run/l", 5, clock=r.clock, pause=r.pause, gone=lambda: False,
                              is_alive=lambda pid: False, renew_lease=r.renew)
    assert result["done"] is True and result["running"] is False and r.now == 0.0


def test_a_job_that_died_without_its_mark_ends_the_round(tmp_path):
    status = tmp_path / "s.json"
    write(status, done=False, pid=4242)
    r = Round()
    result = mod.follow_round(str(status), "/run/l", 5, clock=r.clock, pause=r.pause, gone=lambda: False,
                              is_alive=lambda pid: False, renew_lease=r.renew)
    assert result["done"] is False and result["running"] is False and r.now == 0.0


def test_the_lease_is_removed_as_soon_as_the_controller_is_gone(tmp_path):
    """Issue 15: the transfer must stop when the play is interrupted, not when this round's wait is over."""
    status = tmp_path / "s.json"
    write(status, done=False, pid=4242)
    r = Round()
    dropped = []
    result = mod.follow_round(str(status), "/run/l", 30, clock=r.clock, pause=r.pause,
                              gone=lambda: r.now >= 1.5, is_alive=lambda pid: True, renew_lease=r.renew,
                              drop_lease=lambda path: dropped.append((r.now, path)))
    assert result["controller_lost"] is True and [t for t, _p in r.renewed] == [0.0, 1.0]
    assert dropped == [(1.5, "/run/l")]  # seen within a quarter of a second, between two renewals


def test_a_lease_removed_while_the_job_runs_is_not_brought_back(tmp_path):
    """The play's follower removes the lease when the play is interrupted (image_sync_wait); a round still running on
    the node (its ssh session outlives the play's, in the ssh control master) must not renew it back."""
    status, lease = tmp_path / "s.json", tmp_path / "l"
    write(status, done=False, pid=4242)
    lease.write_text("")
    r = Round()

    def pause(seconds):
        r.pause(seconds)
        if r.now >= 1.5 and lease.exists():
            lease.unlink()

    result = mod.follow_round(str(status), str(lease), 30, clock=r.clock, pause=pause, gone=lambda: False,
                              is_alive=lambda pid: True)
    assert result["controller_lost"] is True and result["renewed"] == 2 and r.now == 2.0
    assert not lease.exists()


def test_a_round_before_the_job_started_creates_the_lease(tmp_path):
    lease = tmp_path / "l"
    r = Round()
    mod.follow_round(str(tmp_path / "absent.json"), str(lease), 1, clock=r.clock, pause=r.pause, gone=lambda: False,
                     is_alive=lambda pid: True)
    assert lease.exists()


def test_drop_removes_the_lease_and_minds_no_missing_one(tmp_path):
    lease = tmp_path / "l"
    lease.write_text("")
    mod.drop(str(lease))
    mod.drop(str(lease))
    assert not lease.exists()


def test_before_the_job_wrote_its_status_the_round_waits_and_renews(tmp_path):
    r = Round()
    result = mod.follow_round(str(tmp_path / "absent.json"), "/run/l", 2, clock=r.clock, pause=r.pause,
                              gone=lambda: False, is_alive=lambda pid: True, renew_lease=r.renew)
    assert result["progress"] is None and result["running"] is False and len(r.renewed) == 4


def test_alive_reads_the_process_table():
    assert mod.process_alive(os.getpid()) is True
    assert mod.process_alive(0) is False and mod.process_alive(None) is False and mod.process_alive(True) is False
