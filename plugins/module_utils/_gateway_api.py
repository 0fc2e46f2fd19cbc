# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gateway's HAProxy runtime API (its admin socket): read the servers, set their admin state, wait on them.

The gateway (roles/gateway) has one backend per served model (``model_<served name>``) and in each one server per
cluster that serves it, named after the cluster. Draining a cluster means setting every server of that name to
``drain``: HAProxy sends it no new request, lets the ones in flight finish and keeps health-checking it.

Parsing is pure (unit-tested on HAProxy's own output formats); ``RuntimeAPI`` is the socket client.
"""

from __future__ import annotations

import re
import socket
import time

NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
STATES = ("ready", "drain", "maint")

# srv_admin_state bits of `show servers state` (HAProxy's SRV_ADMF_*): forced/inherited/config/resolver/hostname
# maintenance, forced/inherited drain.
_MAINT_BITS = 0x01 | 0x02 | 0x04 | 0x20 | 0x40
_DRAIN_BITS = 0x08 | 0x10


class GatewayError(Exception):
    """The runtime API refused a command or could not be reached."""


def check_name(value: str, what: str) -> str:
    """Names go into a runtime API command line, where ';' would chain another command: only plain names pass."""
    if not isinstance(value, str) or not NAME.match(value):
        raise GatewayError(f"{what} {value!r} is not a plain name (letters, digits, '_', '.', ':', '-'; 1 to 64)")
    return value


def parse_stat(text: str) -> list[dict]:
    """`show stat` (CSV, header line starting with '# ') -> the server rows as dicts (no FRONTEND/BACKEND rows)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise GatewayError(f"unexpected 'show stat' answer: {text[:200]!r}")
    header = lines[0][2:].split(",")
    rows = []
    for line in lines[1:]:
        row = dict(zip(header, line.split(",")))
        if row.get("svname") in ("FRONTEND", "BACKEND", None):
            continue
        rows.append(row)
    return rows


def parse_servers_state(text: str) -> dict[tuple[str, str], int]:
    """`show servers state` -> {(backend, server): srv_admin_state bits}."""
    states: dict[tuple[str, str], int] = {}
    header: list[str] = []
    for line in text.splitlines():
        if line.startswith("# "):
            header = line[2:].split()
            continue
        fields = line.split()
        if not header or len(fields) < len(header) or fields == ["1"]:
            continue
        row = dict(zip(header, fields))
        try:
            states[(row["be_name"], row["srv_name"])] = int(row["srv_admin_state"])
        except (KeyError, ValueError):
            continue
    return states


def admin_state(bits: int) -> str:
    if bits & _MAINT_BITS:
        return "maint"
    if bits & _DRAIN_BITS:
        return "drain"
    return "ready"


def _int(value) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def servers_named(rows: list[dict], states: dict[tuple[str, str], int], server: str) -> list[dict]:
    """Every backend's server called SERVER: backend, status (health checks), admin state, sessions, queue."""
    found = []
    for row in rows:
        if row.get("svname") != server:
            continue
        backend = row.get("pxname", "")
        found.append({
            "backend": backend,
            "server": server,
            "status": row.get("status", ""),
            "admin": admin_state(states.get((backend, server), 0)),
            "sessions": _int(row.get("scur")),
            "queued": _int(row.get("qcur")),
            "check": row.get("check_status", ""),
        })
    return sorted(found, key=lambda s: s["backend"])


def is_up(status: str) -> bool:
    """HAProxy's status column: 'UP', or 'UP 1/3' (up, one check failed) is serving; 'DOWN 1/2' (coming up) is not."""
    return status == "UP" or status.startswith("UP ")


def is_healthy(status: str) -> bool:
    """Up by its health checks, whatever the admin state: 'DRAIN' is up and drained ('NOLB' likewise)."""
    return status.split(" ")[0] in ("UP", "DRAIN", "NOLB")


def others_serving(rows: list[dict], states: dict[tuple[str, str], int], server: str) -> dict[str, list[str]]:
    """{backend holding SERVER: the other servers in it that are up and ready}, i.e. who takes its traffic."""
    backends = {row.get("pxname") for row in rows if row.get("svname") == server}
    others: dict[str, list[str]] = {backend: [] for backend in backends}
    for row in rows:
        backend, name = row.get("pxname"), row.get("svname")
        if backend in others and name != server and is_up(row.get("status", "")) \
                and admin_state(states.get((backend, name), 0)) == "ready":
            others[backend].append(name)
    return {backend: sorted(names) for backend, names in sorted(others.items())}


def settled(servers: list[dict], state: str) -> bool:
    """Ready: every server is up by its health checks. Drain/maint: no request in flight or queued on any of them."""
    if state == "ready":
        return all(is_healthy(s["status"]) for s in servers)
    return all(s["sessions"] == 0 and s["queued"] == 0 for s in servers)


class RuntimeAPI:
    """One command per connection on HAProxy's stats socket (non-interactive mode: it answers, then closes)."""

    def __init__(self, path: str, timeout: float = 10.0):
        self.path = path
        self.timeout = timeout

    def command(self, line: str) -> str:
        if "\n" in line or ";" in line:
            raise GatewayError(f"refusing a runtime API command with a separator: {line!r}")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(self.timeout)
                sock.connect(self.path)
                sock.sendall(line.encode() + b"\n")
                chunks = []
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
        except OSError as exc:
            raise GatewayError(f"the gateway's runtime API at {self.path} did not answer '{line.split()[0]} ...': {exc}") from exc
        return b"".join(chunks).decode(errors="replace")

    def servers(self, server: str) -> tuple[list[dict], dict[str, list[str]]]:
        rows = parse_stat(self.command("show stat"))
        states = parse_servers_state(self.command("show servers state"))
        return servers_named(rows, states, server), others_serving(rows, states, server)

    def _set(self, backend: str, server: str, what: str) -> None:
        answer = self.command(f"set server {check_name(backend, 'backend')}/{check_name(server, 'server')} {what}")
        if answer.strip():
            raise GatewayError(f"the gateway refused 'set server {backend}/{server} {what}': {answer.strip()}")

    def set_state(self, backend: str, server: str, state: str) -> None:
        if state not in STATES:
            raise GatewayError(f"unknown server state {state!r} (one of {', '.join(STATES)})")
        self._set(backend, server, f"state {state}")

    def leave_maint(self, backend: str, server: str) -> None:
        """Out of maintenance into drain, health marked down. Leaving maintenance, HAProxy restores the health its
        checks saw before it (they do not run in maintenance), so the server would take traffic at once whatever it
        is now; drained and down, it takes none until the checks pass again (rise)."""
        self._set(backend, server, "state drain")
        self._set(backend, server, "health down")


def wait_settled(api: RuntimeAPI, server: str, state: str, timeout: float, interval: float = 1.0,
                 clock=time.monotonic, sleep=time.sleep) -> tuple[bool, list[dict], float]:
    """Poll until SERVER's rows are settled for STATE or TIMEOUT passes: (settled, last rows, seconds waited)."""
    start = clock()
    while True:
        servers, _others = api.servers(server)
        if settled(servers, state):
            return True, servers, clock() - start
        if clock() - start >= timeout:
            return False, servers, clock() - start
        sleep(interval)
