# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of cancellation and deadlines in the relay (issue 15, point 6): the receivers' idle deadline, the
lease a background transfer runs under, the watch that notices a controller gone and what a run does then.
Fake clocks, timers and file stats: nothing here waits for real time."""

from __future__ import annotations

import os
import signal
import types

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _relay as u


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def stat_of(mtimes):
    """A stat() over {path: mtime}; a path not in MTIMES does not exist."""
    def stat(path):
        if path not in mtimes:
            raise FileNotFoundError(path)
        return types.SimpleNamespace(st_mtime=mtimes[path])
    return stat


# ---------------------------------------------------------------- the idle deadline

class Source:
    """readinto/readline that, on the calls listed in SILENT, block until the timer fires (they call the handler)."""

    def __init__(self, reader_box, silent=()):
        self.box = reader_box
        self.silent = set(silent)
        self.calls = 0

    def _call(self, data):
        self.calls += 1
        if self.calls in self.silent:
            self.box[0].expired()  # what SIGALRM does to a read that got nothing in time
            raise AssertionError("the handler must interrupt the read")
        return data

    def readinto(self, view):
        data = self._call(b"abc")
        view[:len(data)] = data
        return len(data)

    def readline(self, _limit=-1):
        return self._call(b'{"bytes": 3}\n')


def test_each_read_arms_the_deadline_and_disarms_it_after():
    timers = []
    box = [None]
    reader = u.IdleReader(Source(box), 30, timer=lambda which, secs: timers.append((which, secs)))
    box[0] = reader
    buf = memoryview(bytearray(8))
    with reader:
        assert reader.readinto(buf) == 3 and reader.readline(10) == b'{"bytes": 3}\n'
    assert timers == [(signal.ITIMER_REAL, 30.0), (signal.ITIMER_REAL, 0)] * 2 + [(signal.ITIMER_REAL, 0)]
    assert reader.idle is None


def test_a_read_that_gets_nothing_in_time_ends_the_stream_for_good():
    box = [None]
    source = Source(box, silent={2})
    reader = u.IdleReader(source, 45, timer=lambda *_a: None)
    box[0] = reader
    buf = memoryview(bytearray(8))
    with reader:
        assert reader.readinto(buf) == 3
        assert reader.readinto(buf) == 0  # the silent read: as at the end of the stream
        assert reader.readline() == b"" and source.calls == 2  # later reads do not touch the source
    assert reader.idle == "no byte from the sender for 45 s (idle_timeout); the receive was aborted"


def test_a_timer_that_fires_between_reads_is_ignored():
    reader = u.IdleReader(Source([None]), 5, timer=lambda *_a: None)
    reader.expired()  # not reading: nothing raised, nothing recorded
    assert reader.idle is None


def test_no_deadline_with_zero_and_the_handler_is_restored():
    timers = []
    reader = u.IdleReader(Source([None]), 0, timer=lambda *a: timers.append(a))
    before = signal.getsignal(signal.SIGALRM)
    with reader:
        assert reader.readinto(memoryview(bytearray(4))) == 3
    assert timers == [] and signal.getsignal(signal.SIGALRM) is before
    armed = u.IdleReader(Source([None]), 7, timer=lambda *_a: None)
    with armed:
        assert signal.getsignal(signal.SIGALRM) == armed.expired
    assert signal.getsignal(signal.SIGALRM) is before


# ---------------------------------------------------------------- the lease

def test_a_lease_lapses_when_nobody_renewed_it_for_its_window():
    clock = Clock(1000.0)
    stat = stat_of({"/run/l": 996.0})
    assert not u.lease_lapsed("/run/l", 5, since=990.0, clock=clock, stat=stat)  # renewed 4 s ago
    clock.now = 1001.0
    assert not u.lease_lapsed("/run/l", 5, since=990.0, clock=clock, stat=stat)  # 5 s: not more than the window
    clock.now = 1001.5
    assert u.lease_lapsed("/run/l", 5, since=990.0, clock=clock, stat=stat)


def test_a_lease_never_written_counts_from_the_start_and_a_removed_one_has_lapsed():
    clock = Clock(1003.0)
    stat = stat_of({})
    assert not u.lease_lapsed("/run/l", 5, since=1000.0, clock=clock, stat=stat)
    clock.now = 1006.0
    assert u.lease_lapsed("/run/l", 5, since=1000.0, clock=clock, stat=stat)


def test_renew_creates_the_lease_and_sets_its_time(tmp_path):
    path = str(tmp_path / "s.json.lease")
    u.renew(path, clock=lambda: 1234.0)
    assert os.stat(path).st_mtime == 1234.0
    u.renew(path, clock=lambda: 1240.0)
    assert os.stat(path).st_mtime == 1240.0 and os.path.getsize(path) == 0
    u.renew(path, clock=lambda: 1250.0, ahead=3.0)  # the end of a follower's round: the gap to the next is covered
    assert os.stat(path).st_mtime == 1253.0
    assert not u.lease_lapsed(path, 3, since=0.0, clock=lambda: 1255.5)
    assert u.lease_lapsed(path, 3, since=0.0, clock=lambda: 1256.5)


# ---------------------------------------------------------------- the watch

def watch(**kw):
    lost = []
    kw.setdefault("closed", lambda: False)
    kw.setdefault("ppid", lambda: 42)
    return u.ControllerWatch(lost.append, **kw), lost


def test_the_watch_sees_a_lapsed_lease():
    clock = Clock(1000.0)
    mtimes = {"/run/l": 1000.0}
    w, _lost = watch(lease=("/run/l", 5), clock=clock, stat=stat_of(mtimes))
    clock.now = 1004.0
    assert w.check() is None
    mtimes["/run/l"] = 1004.0  # renewed
    clock.now = 1008.0
    assert w.check() is None
    clock.now = 1009.5
    reason = w.check()
    assert reason.startswith(u.CANCELLED) and "its lease /run/l was not renewed for 5 s" in reason


def test_the_watch_sees_a_removed_lease_at_once(tmp_path):
    """The follower of an interrupted play removes the lease: the run cancels within one check, not after the
    window (a long one, so that a busy controller's gaps between rounds do not cancel healthy runs)."""
    lease = tmp_path / "l"
    w, _lost = watch(lease=(str(lease), 30))
    assert w.check() is None  # not there yet: the window counts from the watch's start
    u.renew(str(lease))
    assert w.check() is None
    lease.unlink()
    reason = w.check()
    assert reason.startswith(u.CANCELLED) and f"its lease {lease} was removed" in reason
    assert u.renew(str(lease), create=False) is False and not lease.exists()


def test_a_lease_the_run_created_and_that_is_gone_at_the_first_check_was_removed(tmp_path):
    """The run creates its lease before its watch starts; the follower of a play interrupted at once marks it and
    removes it before the watch's first look. With LEASE_SEEN the watch knows the lease was there: it cancels at that
    look, not when the lease window ends (30 s later)."""
    lease = tmp_path / "l"
    assert u.renew(str(lease), ahead=u.LEASE_START)
    lease.unlink()
    w, _lost = watch(lease=(str(lease), 30), lease_seen=True)
    reason = w.check()
    assert reason.startswith(u.CANCELLED) and f"its lease {lease} was removed" in reason
    not_yet, _lost = watch(lease=(str(lease), 30))  # a watch of a lease another process creates later waits for it
    assert not_yet.check() is None


def test_a_lease_marked_cancelled_cancels_at_once_and_is_never_renewed(tmp_path):
    """An interrupted follower marks the lease (its time set to the epoch, creating it when the job had not yet): the
    watch cancels at its next check, and no renewal (the job's own first one, a round under way) moves the mark."""
    lease = tmp_path / "l"
    w, _lost = watch(lease=(str(lease), 30))
    u.renew(str(lease))
    assert w.check() is None and not u.cancel_marked(str(lease))
    os.utime(lease, (u.CANCEL_MARK, u.CANCEL_MARK))
    reason = w.check()
    assert reason.startswith(u.CANCELLED) and "was marked cancelled" in reason
    assert u.renew(str(lease)) is False and u.renew(str(lease), ahead=10.0, create=False) is False
    assert os.stat(lease).st_mtime == u.CANCEL_MARK
    early = tmp_path / "early"  # marked before the job created it: the job's first renewal refuses
    early.touch()
    os.utime(early, (0, 0))
    assert u.cancel_marked(str(early)) and u.renew(str(early), ahead=u.LEASE_START) is False
    fresh, _lost = watch(lease=(str(early), 30))
    assert "was marked cancelled" in fresh.check()
    assert not u.cancel_marked(str(tmp_path / "absent"))


def test_a_mark_that_lands_while_a_renewal_is_under_way_is_not_renewed_away(tmp_path, monkeypatch):
    """The follower's mark can land after the renewal read the lease unmarked and before it moved its time (the
    job's first renewal, as the play is interrupted): the written mark survives the renewal, which reports the lease
    cancelled, and the watch cancels at its next check."""
    lease = tmp_path / "l"
    lease.touch()
    real_utime = os.utime

    def utime_after_the_mark(path, times):
        with open(path, "wb") as fh:  # the follower's ``printf %s cancelled > lease; touch -d @0 -- lease``
            fh.write(u.CANCEL_TEXT)
        real_utime(path, (u.CANCEL_MARK, u.CANCEL_MARK))
        real_utime(path, times)  # the renewal's own utime, after the mark

    monkeypatch.setattr(u.os, "utime", utime_after_the_mark)
    assert u.renew(str(lease), ahead=u.LEASE_START) is False
    monkeypatch.setattr(u.os, "utime", real_utime)
    assert os.stat(lease).st_mtime != u.CANCEL_MARK and u.cancel_marked(str(lease))
    w, _lost = watch(lease=(str(lease), 30))
    assert "was marked cancelled" in w.check()
    assert u.renew(str(lease)) is False


def test_only_the_mark_text_counts_as_a_mark(tmp_path):
    """A lease whose text is anything else (empty, as the job and the follower create it) is not marked."""
    lease = tmp_path / "l"
    lease.write_bytes(b"cancel")
    assert not u.cancel_marked(str(lease)) and u.renew(str(lease)) is True
    lease.write_bytes(u.CANCEL_TEXT + b"\n")
    assert u.cancel_marked(str(lease))


def test_the_watch_sees_the_connection_closed_or_the_parent_gone():
    closed = [False]
    parent = [42]
    w, _lost = watch(stdout=True, closed=lambda: closed[0], ppid=lambda: parent[0])
    assert w.check() is None
    parent[0] = 1
    assert "its process on this node ended" in w.check()
    parent[0] = 42
    closed[0] = True
    assert "its connection to this node closed" in w.check()
    lease_only, _lost = watch(closed=lambda: True, ppid=lambda: 7)  # not told to watch stdout: a background job
    assert lease_only.check() is None


def test_the_watch_calls_on_lost_once_and_stops():
    waits = []

    class Stop:
        def wait(self, period):
            waits.append(period)
            return len(waits) > 3  # stopped after three periods unless lost before

        def set(self):
            pass

    closed = iter([False, True])
    w, lost = watch(stdout=True, closed=lambda: next(closed), period=0.5)
    w._stop = Stop()
    w.run()
    assert lost == [w.reason] and "connection to this node closed" in w.reason and waits == [0.5, 0.5]


def test_pipe_closed_sees_the_reader_go():
    read_fd, write_fd = os.pipe()
    try:
        assert u.pipe_closed(write_fd) is False
        os.close(read_fd)
        assert u.pipe_closed(write_fd) is True
    finally:
        os.close(write_fd)


def test_pipe_closed_is_false_for_a_file(tmp_path):
    with open(tmp_path / "out", "w", encoding="utf-8") as fh:
        assert u.pipe_closed(fh.fileno()) is False


# ---------------------------------------------------------------- what a run does

class FakeTimer:
    made = []

    def __init__(self, delay, func):
        self.delay, self.func, self.daemon, self.started = delay, func, False, False
        FakeTimer.made.append(self)

    def start(self):
        self.started = True

    def cancel(self):
        self.started = False


def test_cancel_kills_the_streams_then_ends_a_stuck_run(capsys):
    FakeTimer.made = []
    kills, exits, cleaned = [], [], []
    cancel = u.Cancel(lambda: kills.append(1), cleaned.append, exit_=exits.append, timer=FakeTimer)
    cancel.lost(f"{u.CANCELLED} (x)")
    assert kills == [1] and exits == [] and cancel.reason == f"{u.CANCELLED} (x)"
    (pending,) = FakeTimer.made
    assert pending.delay == u.Cancel.GRACE and pending.daemon and pending.started
    pending.func()  # the run did not end on its own within GRACE
    assert kills == [1, 1] and exits == [1]
    msg = f"{u.CANCELLED} (x); it was ended before it changed anything more on the targets"
    assert cleaned == [msg]
    assert capsys.readouterr().out.strip() == '{"failed": true, "changed": false, "msg": "%s"}' % msg


def test_a_run_that_reports_its_cancellation_itself_is_not_ended():
    FakeTimer.made = []
    cancel = u.Cancel(lambda: None, exit_=lambda code: pytest.fail("ended"), timer=FakeTimer)
    cancel.lost("cancelled: x")
    cancel.stop()
    assert FakeTimer.made[0].started is False
