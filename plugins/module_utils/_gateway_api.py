# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gateway's HAProxy runtime API (its admin socket): read the servers, set their admin state, wait on them.

The gateway (roles/gateway) has one backend per served model (``model_<served name>``) and in each one server per
cluster that serves it, named after the cluster. Draining a cluster means setting every server of that name to
``drain``: HAProxy sends it no new request, lets the ones in flight finish and keeps health-checking it.

Parsing is pure (unit-tested on HAProxy's own output formats); ``RuntimeAPI`` is the socket client.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import time
import typing as t

from ansible_collections.dgxspark.vllm.plugins.module_utils._files import write_atomically

NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
STATES = ("ready", "drain", "maint")
# The model backends (roles/gateway: model_<served name>), where each cluster is a server named as the cluster.
MODEL_PREFIX = "model_"
# The relays to the clusters' doors (roles/gateway: door_<digest>, one server "door"), which hold no state to keep.
RELAY_PREFIX = "door_"

# srv_admin_state bits of `show servers state` (HAProxy's SRV_ADMF_*): forced/inherited/config/resolver/hostname
# maintenance, forced/inherited drain.
_MAINT_BITS = 0x01 | 0x02 | 0x04 | 0x20 | 0x40
_DRAIN_BITS = 0x08 | 0x10


# Beside the socket (the gateway's run directory, the same path in its container): the servers' state HAProxy reads
# at every start (its configuration's server-state-file, plugins/module_utils/_gateway.py), and the drain holds.
STATE_FILE = "server-state"
HOLDS_FILE = "holds.json"


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
    """Every model backend's server called SERVER: backend, status (health checks), admin state, sessions, queue.
    The clusters' relays (``door_<digest>``, each with one server ``door``) are not model backends."""
    found = []
    for row in rows:
        if row.get("svname") != server or not str(row.get("pxname", "")).startswith(MODEL_PREFIX):
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
    backends = {row.get("pxname") for row in rows
                if row.get("svname") == server and str(row.get("pxname", "")).startswith(MODEL_PREFIX)}
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

    def save_state(self, config_path: str) -> list[str]:
        """The servers' state (admin states included) written where HAProxy reads it at its next start, for the
        configuration at CONFIG_PATH (the one that start reads: state_for_config); the servers moved."""
        try:
            with open(config_path, encoding="utf-8") as handle:
                config = handle.read()
        except OSError as exc:
            raise GatewayError(f"the gateway's configuration {config_path} cannot be read ({exc}): give its path "
                               "(the gateway role's gateway_config_dir/haproxy.cfg)") from exc
        path = beside(self.path, STATE_FILE)
        try:
            dump = self.command("show servers state")
        except GatewayError:
            # No HAProxy answers (not started yet, or stopped): the state saved before is what its next start reads.
            try:
                with open(path, encoding="utf-8") as handle:
                    dump = handle.read()
            except FileNotFoundError:
                return []
            except (OSError, UnicodeDecodeError) as exc:
                raise GatewayError(f"the gateway's saved server state {path} cannot be read ({exc}): remove it, then "
                                   "run again") from exc
        text, moved = state_for_config(dump, config)
        write_file(path, text, like=self.path if os.path.exists(self.path) else path)
        return moved

    def leave_maint(self, backend: str, server: str) -> None:
        """Out of maintenance into drain, health marked down. Leaving maintenance, HAProxy restores the health its
        checks saw before it (they do not run in maintenance), so the server would take traffic at once whatever it
        is now; drained and down, it takes none until the checks pass again (rise)."""
        self._set(backend, server, "state drain")
        self._set(backend, server, "health down")


def beside(socket_path: str, name: str) -> str:
    return os.path.join(os.path.dirname(socket_path), name)


def write_file(path: str, text: str, like: str | None = None) -> None:
    """TEXT into PATH whole (_files.write_atomically), mode 0600, owned as LIKE is (the socket: HAProxy's user reads
    the state file), else by root."""
    info = os.stat(like) if like is not None else None
    write_atomically(path, text.encode("utf-8"), 0o600, info.st_uid if info else 0, info.st_gid if info else 0)


def check_state_dump(text: str) -> str:
    """`show servers state` as HAProxy writes its server-state-file: version line 1, then the header."""
    if not text.startswith("1\n# "):
        raise GatewayError(f"unexpected 'show servers state' answer: {text[:200]!r}")
    return text


def _endpoint(address: str, port: str) -> tuple[str, str]:
    try:
        return str(ipaddress.ip_address(address.strip("[]"))), port
    except ValueError:
        return address, port


def configured_servers(config: str) -> dict[tuple[str, str], tuple[str, str]]:
    """A HAProxy configuration's servers: {(backend, server): (address, port)} (the gateway's own lines, rendered by
    plugins/module_utils/_gateway.py: ``server NAME ADDRESS:PORT`` or ``[ADDRESS]:PORT``)."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    backend = None
    for line in config.splitlines():
        words = line.split()
        if not words or line[0] not in " \t":
            backend = words[1] if len(words) >= 2 and words[0] == "backend" else None
            continue
        if backend and words[0] == "server" and len(words) >= 3 and words[2].startswith("unix@"):
            out[(backend, words[1])] = ("-", "0")  # a relay's socket: HAProxy saves no address for it
        elif backend and words[0] == "server" and len(words) >= 3 and ":" in words[2]:
            address, port = words[2].rsplit(":", 1)
            out[(backend, words[1])] = _endpoint(address, port)
    return out


def state_for_config(dump: str, config: str) -> tuple[str, list[str]]:
    """The saved state HAProxy may load with CONFIG. HAProxy applies a saved server's port and address over its
    configuration's (haproxy/haproxy#1412, #3296), so a cluster whose head or door moved would be sent to its old
    endpoint. Each server CONFIG has elsewhere keeps its admin state (a drain stays) at CONFIG's endpoint, marked down
    until the health checks pass there; servers CONFIG does not have are left out. (the text, the 'backend/server'
    moved)."""
    servers = configured_servers(config)
    lines, moved, header = [], [], []
    for line in check_state_dump(dump).splitlines():
        if line.startswith("# ") or not header:
            header = line[2:].split() if line.startswith("# ") else header
            lines.append(line)
            continue
        fields = line.split()
        row = dict(zip(header, fields))
        key = (row.get("be_name", ""), row.get("srv_name", ""))
        if key not in servers or not {"srv_addr", "srv_port", "srv_op_state"} <= set(header[:len(fields)]):
            continue
        if not key[0].startswith(MODEL_PREFIX):
            continue  # a relay to a door: never drained; its door's address is the configuration's
        if servers[key] != _endpoint(row["srv_addr"], row["srv_port"]):
            for name, value in zip(("srv_addr", "srv_port", "srv_op_state"), (*servers[key], "0")):
                fields[header.index(name)] = value
            moved.append("/".join(key))
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n", moved


def live_holds(holds: t.Mapping[str, t.Any], now: float) -> dict[str, float]:
    """The holds that have not expired: {server: until}."""
    out = {}
    for server, until in (holds or {}).items():
        if isinstance(server, str) and NAME.match(server) and isinstance(until, (int, float)) and until > now:
            out[server] = float(until)
    return out


def read_holds(path: str, now: float) -> dict[str, float]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise GatewayError(f"the drain holds in {path} cannot be read ({exc}): remove the file, then run again") from exc
    return live_holds(data if isinstance(data, dict) else {}, now)


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
