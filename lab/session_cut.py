#!/usr/bin/env python3
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cut the controller's SSH sessions on a lab node, as the network between an operator and a real Spark does.

Runs inside a lab node (lab.py cut-sessions copies it there and starts it). Every established TCP flow from PEER to
the node's sshd is watched with `ss -ti` (the kernel's own counters: milliseconds since the flow last sent and last
received) and cut with `ss -K` (the kernel destroys the socket: sshd loses its session and the controller's ssh gets a
reset, as from a firewall that forgets a flow):

- --idle N: a flow that carried nothing either way for N seconds, as a NAT or stateful firewall expires its entry.
  SSH keepalives (ServerAliveInterval) are traffic: a controller that sends them more often than N keeps its flow.
- --max-age N: a flow N seconds after it was first seen, traffic or not, as a VPN that reconnects or a NAT with a
  session limit: keepalives do not save it.

Each cut is one line in LOG: `<unix time> <peer>:<port> idle=<s> age=<s> why=<idle|max-age>`; a look that
failed is a line `<unix time> error <what>` (the cutter goes on).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

_FLOW = re.compile(r"^\S+\s+\S+\s+(?P<local>\S+):(?P<lport>\d+)\s+(?P<peer>\S+):(?P<pport>\d+)\b(?P<info>.*)$")
_LAST = re.compile(r"\blast(snd|rcv):(\d+)")


def parse_flows(text: str, port: int = 22) -> list[dict]:
    """The established flows to PORT in `ss -tinHO state established` output: peer, peer port and the milliseconds
    since the flow last sent and last received (None when ss does not say)."""
    flows = []
    for line in text.splitlines():
        match = _FLOW.match(line.strip())
        if not match or int(match["lport"]) != port:
            continue
        last = {kind: int(ms) for kind, ms in _LAST.findall(match["info"])}
        peer = match["peer"].strip("[]")
        if peer.startswith("::ffff:"):
            peer = peer[len("::ffff:"):]
        flows.append({"peer": peer, "port": int(match["pport"]),
                      "idle_ms": min(last.values()) if len(last) == 2 else None})
    return flows


def to_cut(flows: list[dict], first_seen: dict, now: float, *, peer: str, idle: float | None,
           max_age: float | None) -> list[tuple[dict, str, float]]:
    """The flows of PEER to cut now, each with why and its age in seconds. FIRST_SEEN ({(peer, port): time}) is
    updated: flows seen for the first time are added, flows gone are dropped."""
    alive = {(f["peer"], f["port"]) for f in flows}
    for key in list(first_seen):
        if key not in alive:
            del first_seen[key]
    cuts = []
    for flow in flows:
        if flow["peer"] != peer:
            continue
        age = now - first_seen.setdefault((flow["peer"], flow["port"]), now)
        if max_age is not None and age >= max_age:
            cuts.append((flow, "max-age", age))
        elif idle is not None and flow["idle_ms"] is not None and flow["idle_ms"] >= idle * 1000:
            cuts.append((flow, "idle", age))
    return cuts


def cut(flow: dict, port: int = 22) -> bool:
    """Destroy the flow's socket (sshd's side); True when ss found it."""
    proc = subprocess.run(["ss", "-HK", "state", "established",
                           f"( sport = :{port} and dst {flow['peer']} and dport = :{flow['port']} )"],
                          capture_output=True, text=True, check=False)
    return proc.returncode == 0 and proc.stdout.strip() != ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--peer", required=True, help="the controller's address as the node sees it")
    parser.add_argument("--idle", type=float, help="cut a flow idle this many seconds")
    parser.add_argument("--max-age", type=float, help="cut a flow this many seconds after it began, traffic or not")
    parser.add_argument("--port", type=int, default=22)
    parser.add_argument("--log", default="/run/dgxspark-lab-cut.log")
    parser.add_argument("--pidfile", default="/run/dgxspark-lab-cut.pid")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between two looks")
    args = parser.parse_args(argv)
    if args.idle is None and args.max_age is None:
        parser.error("give --idle, --max-age or both")
    with open(args.pidfile, "w", encoding="ascii") as handle:
        handle.write(f"{os.getpid()}\n")
    first_seen: dict = {}
    while True:
        now = time.time()
        try:
            listed = subprocess.run(["ss", "-tinHO", "state", "established", f"( sport = :{args.port} )"],
                                    capture_output=True, text=True, check=False).stdout
            lines = []
            for flow, why, age in to_cut(parse_flows(listed, args.port), first_seen, now, peer=args.peer,
                                         idle=args.idle, max_age=args.max_age):
                if cut(flow, args.port):
                    idle_s = "?" if flow["idle_ms"] is None else f"{flow['idle_ms'] / 1000:.1f}"
                    lines.append(f"{now:.1f} {flow['peer']}:{flow['port']} idle={idle_s} age={age:.1f} why={why}\n")
        except Exception as error:  # pylint: disable=broad-exception-caught  # keep cutting; say what went wrong
            lines = [f"{now:.1f} error {error!r}\n"]
        if lines:
            with open(args.log, "a", encoding="utf-8") as log:
                log.writelines(lines)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
