# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""The relay: the wire protocol of the fleet's transfer program, shared by the sender and the receivers.

The sources (the modules image_sync and model_sync) and the targets (the transfer program, built from
``_transfer_node`` by ``_node_program``, the forced command of the transfer key) speak it. A request is one JSON
line on stdin; a ``receive`` / ``files_receive`` is followed by the data in frames (4-byte big-endian length +
data), a zero-length frame and a JSON trailer ``{"bytes": N}``, which lets every hop tell a complete stream from a
cut one. Every hop forwards the frames to the next with the ssh argv of :func:`ssh_argv`, through a :class:`Hop`.
Standard library only: this module runs on the nodes as part of the transfer program.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import typing as t

# Protocol 1: images (inspect, tag, receive); protocol 2 adds model files (files_inspect, files_receive).
PROTOCOL = 2
PROTOCOLS = (1, 2)
IMAGE_PROTOCOL = 1
FILES_PROTOCOL = 2
CONTENT_LABEL = "org.dgxspark.vllm.content"
CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"
FRAME = struct.Struct(">I")
# AES-GCM first: with the CPUs' AES instructions (x86 AES-NI, the Arm crypto extensions of the Sparks' Grace cores)
# it costs about half the CPU of OpenSSH's default chacha20-poly1305 on both ends of every hop.
CIPHERS = "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com"
CHUNK = 1 << 20  # bytes per frame: 1 and 4 MiB measured alike on the lab, 256 KiB cost more CPU
MAX_FRAME = 64 << 20  # the largest frame a receiver accepts
MAX_HEADER = 1 << 20  # the longest request line a receiver reads
IMAGE_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
PROGRAM = "dgxspark-transfer"  # the forced command's name, the last word of the ssh argv (ignored by the node)
# Seconds a receiver waits for the next byte of a stream before it aborts, leaves its target as it was and releases
# the models-root lock (``idle_timeout`` in the transfer program's configuration relay.json overrides it).
IDLE_TIMEOUT = 60
# Seconds a background transfer runs on without its controller renewing its lease (ControllerWatch).
LEASE_TIMEOUT = 30
# How far ahead a follower's last renewal of a round reaches, and the transfer's own first one: the gap between two
# rounds (the next round's start) and the start of the first round are not a lost controller.
LEASE_AHEAD = 2.0
LEASE_START = 10.0
# A lease marked cancelled holds CANCEL_TEXT and has the modification time CANCEL_MARK (touch -d @0): set by an
# interrupted follower, whether or not the job had created its lease yet; every watch of it cancels. The text is what
# no renewal can undo: a renewal that read the lease unmarked just before the mark landed moves its time, not its text.
CANCEL_MARK = 0.0
CANCEL_TEXT = b"cancelled"
CANCELLED = "cancelled: the controller stopped following the transfer"


# The options of the dgxspark.vllm.transfer doc fragment, shared by image_sync and model_sync.
TRANSFER_ARGUMENT_SPEC = {
    "targets": {"type": "list", "elements": "dict", "required": True, "options": {
        "host": {"type": "str", "required": True},
        "name": {"type": "str"},
        "port": {"type": "int", "default": 22},
        "cluster": {"type": "str"},
    }},
    "ssh_key": {"type": "path", "default": "/etc/dgxspark/transfer/id_ed25519"},
    "known_hosts": {"type": "path", "default": "/etc/dgxspark/transfer/known_hosts"},
    "ssh_user": {"type": "str", "default": "root"},
    "connect_timeout": {"type": "int", "default": 10},
}


# --------------------------------------------------------------------------- engine facts

def store_of(info: dict) -> str:
    """``containerd`` when the engine keeps images in the containerd store (Docker 29 default), else ``graphdriver``.

    ``docker info`` reports the containerd store as ``DriverStatus: [["driver-type", "io.containerd.snapshotter.v1"]]``;
    under graph drivers (overlay2, vfs...) the image ID is the config digest, under containerd the manifest digest.
    """
    for pair in info.get("DriverStatus") or []:
        if len(pair) == 2 and pair[0] == "driver-type" and pair[1] == CONTAINERD_SNAPSHOTTER:
            return "containerd"
    return "graphdriver"


# The run configuration an image carries, as both stores' ``docker image inspect`` show it. Fields the graph driver
# fills from the build container (Hostname, Image, AttachStdin...) and the containerd store leaves out are not here.
FINGERPRINT_CONFIG = ("Cmd", "Entrypoint", "Env", "ExposedPorts", "Healthcheck", "Labels", "OnBuild", "Shell",
                      "StopSignal", "User", "Volumes", "WorkingDir")


def fingerprint(attrs: dict) -> str | None:
    """A digest of what an image is, the same under both image stores (its ID is not: the config digest under a graph
    driver, the manifest digest under containerd): the layers' diff IDs, the creation time, the platform and the run
    configuration, from ``docker image inspect``. None without layers (nothing to compare)."""
    layers = (attrs.get("RootFS") or {}).get("Layers") or []
    if not layers:
        return None
    config = attrs.get("Config") or {}
    run_config = {}
    for key in FINGERPRINT_CONFIG:
        value = config.get(key)
        if value in (None, "", [], {}):
            continue  # absent, null and empty read the same in both stores
        run_config[key] = sorted(value) if key in ("ExposedPorts", "Volumes") else value
    doc = {"layers": list(layers), "created": attrs.get("Created"), "os": attrs.get("Os"),
           "architecture": attrs.get("Architecture"), "variant": attrs.get("Variant") or None, "config": run_config}
    return "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def image_summary(attrs: dict | None) -> dict | None:
    """The parts of ``docker image inspect`` identity needs."""
    if not attrs:
        return None
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    return {"id": attrs.get("Id"), "repo_digests": list(attrs.get("RepoDigests") or []),
            "content_label": labels.get(CONTENT_LABEL), "fingerprint": fingerprint(attrs),
            "size": int(attrs.get("Size") or 0)}


def held_prefix(layers: t.Sequence[str], held: t.Iterable[t.Sequence[str]]) -> int:
    """How many of LAYERS, from the base, a node holds: the longest prefix LAYERS shares with the layers of one of the
    node's images (HELD). A prefix is a chain ID: Docker's load skips a layer exactly when its chain is there."""
    best = 0
    for other in held:
        n = 0
        for mine, theirs in zip(layers, other or ()):
            if mine != theirs:
                break
            n += 1
        best = max(best, n)
    return best


MAX_LAYERS = 256  # more layers than an image can have (Docker's own limit is 127)


def is_image_id(image: str) -> bool:
    return bool(IMAGE_ID_RE.match(image))


# --------------------------------------------------------------------------- relay protocol

def ssh_argv(target: dict, key: str, known_hosts: str, user: str = "root", connect_timeout: int = 10,
             ssh: str = "ssh") -> list[str]:
    """The argv that reaches TARGET's forced command with the transfer key: no shell, no prompts, no TOFU.

    The sources use it for the first hop of a chain, and every hop of the transfer program for the next one.
    """
    return [
        ssh, "-F", "none",  # no ssh_config of the user or the system: only these options apply
        "-T", "-x",
        "-i", key,
        "-o", "IdentitiesOnly=yes",
        "-o", "IdentityAgent=none",
        "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=yes",
        "-o", "UserKnownHostsFile=" + known_hosts,
        "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "ConnectTimeout=%d" % int(connect_timeout),
        "-o", "ServerAliveInterval=10",
        "-o", "ServerAliveCountMax=6",
        "-o", "Compression=no",
        "-o", "Ciphers=" + CIPHERS,
        "-o", "LogLevel=ERROR",
        "-p", str(target.get("port", 22)),
        "-l", user,
        "--", target["host"], PROGRAM,
    ]


def frame(data: bytes) -> bytes:
    return FRAME.pack(len(data)) + data


def end_mark(total: int) -> bytes:
    return FRAME.pack(0) + json.dumps({"bytes": total}).encode() + b"\n"


def parse_answers(lines: list[str]) -> tuple[dict[str, dict], list[str]]:
    """Result lines of a chain by target name, and the lines that were not results."""
    by_name: dict[str, dict] = {}
    junk = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            junk.append(line)
            continue
        if isinstance(obj, dict) and obj.get("name"):
            by_name[obj["name"]] = obj
        else:
            junk.append(line)
    return by_name, junk


def first_answer(lines: list[str]) -> dict | None:
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


# --------------------------------------------------------------------------- accounting

def mb_per_s(nbytes: int, seconds: float) -> float:
    return round(nbytes / seconds / 1e6, 1) if seconds > 0 else 0.0


def human(nbytes: int | float) -> str:
    value = float(nbytes)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"  # pragma: no cover


class Progress:
    """Bytes sent so far, rate and an estimate of the whole, written to a JSON status file at most every INTERVAL s."""

    def __init__(self, path: str | None, expected: int, targets: list[str], clock: t.Callable[[], float] = time.monotonic,
                 interval: float = 1.0):
        self.path = path
        self.expected = expected
        self.targets = targets
        self.clock = clock
        self.interval = interval
        self.start = clock()
        self.bytes = 0
        self.phase = "preflight"
        self._last_write = None

    def snapshot(self, done: bool = False, **extra: t.Any) -> dict:
        seconds = max(self.clock() - self.start, 0.0)
        percent = 100.0 if done else (min(99.0, round(100.0 * self.bytes / self.expected, 1)) if self.expected else 0.0)
        data = {"phase": self.phase, "bytes": self.bytes, "expected_bytes": self.expected, "percent": percent,
                "seconds": round(seconds, 1), "mb_per_s": mb_per_s(self.bytes, seconds), "targets": self.targets,
                "done": done, "pid": os.getpid()}
        data.update(extra)
        return data

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        if phase == "transfer":
            self.start = self.clock()
        self.write(force=True)

    def add(self, nbytes: int) -> None:
        self.bytes += nbytes
        self.write()

    def write(self, force: bool = False, done: bool = False, **extra: t.Any) -> bool:
        now = self.clock()
        if not self.path or (not force and not done and self._last_write is not None
                             and now - self._last_write < self.interval):
            return False
        self._last_write = now
        write_status(self.path, self.snapshot(done=done, **extra))
        return True


def write_status(path: str, data: dict) -> None:
    """Replace PATH atomically, so a reader never sees half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".image_sync-", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- processes

def request(argv: list[str], header: dict, timeout: float) -> tuple[dict | None, str]:
    """Send one request line to a target's transfer program; its first JSON answer and ssh's stderr."""
    try:
        # Not run_command: requests to the targets run concurrently, each with a timeout.
        proc = subprocess.run(argv, input=(json.dumps(header) + "\n").encode(), capture_output=True,  # pylint: disable=ansible-bad-function
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout:.0f}s"
    except OSError as exc:
        return None, str(exc)
    answer = first_answer(proc.stdout.decode(errors="replace").splitlines())
    return answer, proc.stderr.decode(errors="replace").strip()[-1000:]


def ask_all(targets: list[dict], header: dict, argv_of, timeout: float) -> dict[str, tuple[dict | None, str]]:
    """Send HEADER to every target (``{"name", ...}``) at once, over ARGV_OF(target); :func:`request`'s answers by
    target name."""
    if not targets:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(targets))) as pool:
        futures = {target["name"]: pool.submit(request, argv_of(target), header, timeout) for target in targets}
        return {name: future.result() for name, future in futures.items()}


class Hop:
    """The ssh process to the first node of a chain; its answers and stderr are read in threads."""

    def __init__(self, argv: list[str], header: dict, names: list[str]):
        self.names = names
        self.lines: list[str] = []
        self.err = b""
        self.error: str | None = None
        # Not run_command: the docker save stream is piped into ssh while both run.
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # pylint: disable=consider-using-with,ansible-bad-function
                                     stderr=subprocess.PIPE, bufsize=0)
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for thread in self._threads:
            thread.start()
        self.write((json.dumps(header) + "\n").encode())

    def _read_out(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.decode(errors="replace"))

    def _read_err(self) -> None:
        self.err = self.proc.stderr.read(65536)

    @property
    def alive(self) -> bool:
        return self.error is None

    def write(self, *parts: bytes | memoryview) -> None:
        if self.error is not None:
            return
        try:
            write_all(self.proc.stdin.fileno(), parts)
        except OSError as exc:
            self.error = f"the stream to {self.names[0]} broke: {exc}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def finish(self, timeout: float) -> int:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.error = self.error or f"no answer within {timeout:.0f}s after the stream ended"
        for thread in self._threads:
            thread.join(5)
        return self.proc.returncode

    def stderr_text(self) -> str:
        return self.err.decode(errors="replace").strip()[-800:]


def chain_results(hops: list[tuple[Hop, list[dict]]]) -> dict[str, dict]:
    """Per target name, the relay's answer or an error saying why it is missing."""
    results: dict[str, dict] = {}
    for proc, members in hops:
        answers, junk = parse_answers(proc.lines)
        for entry in members:
            answer = answers.get(entry["name"])
            if answer is None:
                why = proc.error or f"ssh exited {proc.proc.returncode}"
                detail = "; ".join(x for x in (proc.stderr_text(), " ".join(junk)[-400:]) if x)
                answer = {"name": entry["name"], "ok": False, "bytes": 0,
                          "error": f"no answer from {entry['name']} ({why}{': ' + detail if detail else ''})"}
            results[entry["name"]] = answer
    return results


def write_all(fd: int, parts: t.Sequence[bytes | bytearray | memoryview]) -> None:
    """Write PARTS to the file descriptor FD with writev (a frame's header and data without joining them)."""
    views = [memoryview(part).cast("B") for part in parts if len(part)]
    while views:
        n = os.writev(fd, views)
        while n:
            if n >= len(views[0]):
                n -= len(views.pop(0))
            else:
                views[0] = views[0][n:]
                n = 0


def read_exact(source: t.Any, size: int) -> bytes | None:
    """SIZE bytes from SOURCE, or None when it ends first."""
    buf = bytearray(size)
    return bytes(buf) if read_full(source, memoryview(buf)) == size else None


def read_full(source: t.Any, view: memoryview) -> int:
    """Fill VIEW from SOURCE (anything with ``readinto``); fewer bytes only at the end of the source."""
    got = 0
    while got < len(view):
        n = source.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def pump(source: t.Any, hops: list[Hop], progress: Progress, size: int = CHUNK) -> int:
    """Send the archive read from SOURCE (``readinto``) once to every hop in frames of SIZE; returns the bytes read.

    One buffer is reused for every frame, and a frame's header and data are written with one writev.
    """
    total = 0
    buf = memoryview(bytearray(size))
    while True:
        got = read_full(source, buf)
        if not got:
            break
        head = FRAME.pack(got)
        for proc in hops:
            proc.write(head, buf[:got])
        total += got
        progress.add(got)
        if not any(proc.alive for proc in hops):
            return total
    for proc in hops:
        proc.write(end_mark(total))
    return total


class IterReader:
    """``readinto`` over an iterable of byte strings (the docker SDK's archive stream)."""

    def __init__(self, chunks: t.Iterable[bytes]):
        self.chunks = iter(chunks)
        self.rest = memoryview(b"")

    def readinto(self, view: memoryview) -> int:
        while not self.rest:
            try:
                self.rest = memoryview(next(self.chunks))
            except StopIteration:
                return 0
        n = min(len(view), len(self.rest))
        view[:n] = self.rest[:n]
        self.rest = self.rest[n:]
        return n


class IdleReader:
    """SOURCE (``readinto``/``readline``) with an idle deadline: a read that gets no byte for SECONDS ends the stream.

    A receiver blocked in a read of a silent sender would otherwise hold its lock until TCP gives up (hours). The
    deadline is a SIGALRM timer armed around each read only (a slow engine between reads is not idleness), so the
    reads must happen in the main thread. An expired read returns nothing, as at the end of the stream, and ``idle``
    says why; every later read returns nothing too.
    """

    def __init__(self, source: t.Any, seconds: float, timer: t.Callable[[int, float], t.Any] = signal.setitimer):
        self.source = source
        self.seconds = float(seconds)
        self.timer = timer
        self.idle: str | None = None
        self._reading = False
        self._previous = None

    def __enter__(self) -> "IdleReader":
        if self.seconds > 0 and self._previous is None:
            self._previous = signal.signal(signal.SIGALRM, self.expired) or signal.SIG_DFL
        return self

    def __exit__(self, *_exc: t.Any) -> None:
        if self._previous is not None:
            self.timer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)
            self._previous = None

    def expired(self, _signum: int = signal.SIGALRM, _frame: t.Any = None) -> None:
        """The timer's handler: interrupts the read in progress (a timer that fired between reads is ignored)."""
        if self._reading:
            raise _IdleExpired()

    def _read(self, call: t.Callable[[], t.Any], empty: t.Any) -> t.Any:
        if self.idle is not None:
            return empty
        if self.seconds > 0 and self._previous is None:
            self.__enter__()  # the handler stays installed until __exit__ (or the end of the process)
        self._reading = True
        if self.seconds > 0:
            self.timer(signal.ITIMER_REAL, self.seconds)
        try:
            return call()
        except _IdleExpired:
            self.idle = f"no byte from the sender for {self.seconds:g} s (idle_timeout); the receive was aborted"
            return empty
        finally:
            self._reading = False
            if self.seconds > 0:
                self.timer(signal.ITIMER_REAL, 0)

    def readinto(self, view: memoryview) -> int:
        return self._read(lambda: self.source.readinto(view), 0)

    def readline(self, limit: int = -1) -> bytes:
        return self._read(lambda: self.source.readline(limit), b"")


class _IdleExpired(Exception):
    """Raised by IdleReader's timer inside a read that got no byte in time."""


def idle_timeout(config: dict) -> float:
    """The receivers' idle deadline from the transfer program's configuration (IDLE_TIMEOUT without one; 0: none)."""
    value = config.get("idle_timeout", IDLE_TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return float(IDLE_TIMEOUT)
    return float(value)


# --------------------------------------------------------------------------- cancellation

def cancel_marked(path: str, stat: t.Callable[[str], t.Any] = os.stat) -> bool:
    """True when the lease file PATH carries the cancel mark (CANCEL_TEXT, or a modification time of CANCEL_MARK): an
    interrupted follower sets it, creating the file when the job has not yet, so a job that starts afterwards cancels
    too."""
    try:
        if stat(path).st_mtime == CANCEL_MARK:
            return True
        with open(path, "rb") as fh:
            return fh.read(len(CANCEL_TEXT)) == CANCEL_TEXT
    except OSError:
        return False


def renew(path: str, clock: t.Callable[[], float] = time.time, ahead: float = 0.0, create: bool = True) -> bool:
    """Renew the lease file PATH: set its modification time to now (AHEAD s later), creating it unless CREATE is
    false; False when it is not there (and was not created), or carries the cancel mark (before the renewal or after
    it: a mark that landed in between keeps its text, so a watch of the lease cancels all the same)."""
    if cancel_marked(path):
        return False
    if create:
        with open(path, "a", encoding="utf-8"):
            pass
    now = clock() + ahead
    try:
        os.utime(path, (now, now))
    except FileNotFoundError:
        return False
    return not cancel_marked(path)


def lease_lapsed(path: str, window: float, since: float, clock: t.Callable[[], float] = time.time,
                 stat: t.Callable[[str], t.Any] = os.stat) -> bool:
    """True when nobody renewed the lease file PATH for more than WINDOW seconds (a lease never seen counts from SINCE,
    a removed one has lapsed)."""
    try:
        mtime = stat(path).st_mtime
    except FileNotFoundError:
        mtime = since if clock() - since <= window else float("-inf")
    return clock() - mtime > window


def pipe_closed(fd: int = 1) -> bool:
    """True when the reader of the pipe or socket FD is gone: for a module run by the controller over ssh (with
    pipelining, in-process), its stdout is sshd's end of the session, which closes when the controller's connection
    does. A file or a terminal never reports it."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLERR | select.POLLHUP)
        return any(ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _fd, ev in poller.poll(0))
    except (OSError, ValueError):
        return False


class ControllerWatch(threading.Thread):
    """Calls ON_LOST once, with the reason, when the controller that started this run is gone.

    Gone means: with LEASE, a lease file (``path``, ``window`` s) nobody renewed for longer than its window (a
    background job, whose follower renews it); with STDOUT, the controller's connection closed (a module run in the
    foreground notices it on its stdout) or this process was reparented. Checked every PERIOD s until stop().
    LEASE_SEEN: the run created the lease itself before the watch started, so a lease missing at the first check was
    removed (the follower of a play interrupted within the first PERIOD removes it), not yet to come.
    """

    def __init__(self, on_lost: t.Callable[[str], None], lease: tuple[str, float] | None = None, stdout: bool = False,
                 period: float = 0.5, clock: t.Callable[[], float] = time.time,
                 closed: t.Callable[[], bool] = pipe_closed, ppid: t.Callable[[], int] = os.getppid,
                 stat: t.Callable[[str], t.Any] = os.stat, lease_seen: bool = False):
        super().__init__(daemon=True)
        self.on_lost = on_lost
        self.lease = lease
        self.stdout = stdout
        self.period = period
        self.clock = clock
        self.closed = closed
        self.ppid = ppid
        self.stat = stat
        self.parent = ppid()
        self.since = clock()
        self.reason: str | None = None
        self.lease_seen = lease_seen
        self._stop = threading.Event()

    def check(self) -> str | None:
        """Why the controller is gone, or None while it follows."""
        if self.lease:
            if cancel_marked(self.lease[0], self.stat):
                return f"{CANCELLED} (its lease {self.lease[0]} was marked cancelled: the play was interrupted)"
            try:
                self.stat(self.lease[0])
                self.lease_seen = True
            except FileNotFoundError:
                if self.lease_seen:  # removed by the follower of an interrupted play (or by hand)
                    return (f"{CANCELLED} (its lease {self.lease[0]} was removed: the play was interrupted or lost "
                            "its connection)")
        if self.lease and lease_lapsed(self.lease[0], self.lease[1], self.since, self.clock, self.stat):
            return (f"{CANCELLED} (its lease {self.lease[0]} was not renewed for {self.lease[1]:g} s: the play was "
                    "interrupted or lost its connection)")
        if self.stdout and self.closed():
            return f"{CANCELLED} (its connection to this node closed: the play was interrupted or lost its connection)"
        if self.stdout and self.ppid() != self.parent:
            return f"{CANCELLED} (its process on this node ended: the play was interrupted or lost its connection)"
        return None

    def run(self) -> None:
        while not self._stop.wait(self.period):
            reason = self.check()
            if reason:
                self.reason = reason
                self.on_lost(reason)
                return

    def stop(self) -> None:
        self._stop.set()


class Cancel:
    """What a sending module does when its controller is gone (ControllerWatch's ON_LOST): KILL its streams (ssh to
    the first hop of each chain; each receiver then sees its stream cut, aborts and leaves its target as it was), let
    the run fail on its own, and end the process after GRACE s if it has not (stuck in a request, in hashing or in the
    engine): BEFORE_EXIT(msg) cleans up, the failure is printed as the module's result."""

    GRACE = 3.0

    def __init__(self, kill: t.Callable[[], None], before_exit: t.Callable[[str], None] | None = None,
                 exit_: t.Callable[[int], t.Any] = os._exit, timer: t.Callable[..., t.Any] = threading.Timer):
        self.kill = kill
        self.before_exit = before_exit
        self.exit = exit_
        self.timer = timer
        self.reason: str | None = None
        self.pending = None

    def lost(self, reason: str) -> None:
        self.reason = reason
        self.kill()
        self.pending = self.timer(self.GRACE, self.hard_exit)
        self.pending.daemon = True
        self.pending.start()

    def stop(self) -> None:
        """The run ends on its own (it reports the cancellation itself): no hard exit."""
        if self.pending is not None:
            self.pending.cancel()

    def hard_exit(self) -> None:
        self.kill()
        msg = f"{self.reason}; it was ended before it changed anything more on the targets"
        try:
            if self.before_exit:
                self.before_exit(msg)
        except OSError:
            pass
        try:
            sys.stdout.write(json.dumps({"failed": True, "changed": False, "msg": msg}) + "\n")
            sys.stdout.flush()
        except OSError:
            pass
        self.exit(1)


def process_alive(pid: object) -> bool:
    """Whether the process PID exists (a zombie counts as ended)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def close_reader(reader: t.Any) -> None:
    """Close a reader from the engine or a file (an IterReader has nothing to close)."""
    if hasattr(reader, "close"):
        reader.close()


def table(rows: list[dict], files: bool = False, size: int | None = None) -> list[str]:
    """The per-node summary lines (node, action, [files,] bytes, [of SIZE,] seconds, MB/s) of image_sync and model_sync.

    With SIZE (an image's), each row's bytes also show as a share of it: what a layer delta spared."""
    files_head = f" {'files':>6}" if files else ""
    size_head = f" {'of image':>9}" if size else ""
    lines = [f"{'node':<20} {'action':<9}{files_head} {'bytes':>14}{size_head} {'seconds':>8} {'MB/s':>8}"]
    for row in rows:
        files_cell = f" {len(row.get('files') or []):>6}" if files else ""
        size_cell = f" {100.0 * row.get('bytes', 0) / size:>8.1f}%" if size else ""
        lines.append(f"{row['name']:<20} {row['action']:<9}{files_cell} {row.get('bytes', 0):>14}{size_cell} "
                     f"{row.get('seconds', 0):>8.1f} {row.get('mb_per_s', 0):>8.1f}")
    return lines
