"""lab/session_cut.py: which of the controller's SSH flows a lab node cuts (no Docker needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
_SPEC = importlib.util.spec_from_file_location("session_cut", REPO / "lab" / "session_cut.py")
session_cut = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(session_cut)

# `ss -tinHO state established '( sport = :22 )'` on a lab node (iproute2 6.1), trimmed: the controller's session,
# a node-to-node transfer on the fabric, and one on another port.
SS = """\
0      0      192.168.234.11:22 192.168.234.1:57446 bbr wscale:10,10 rto:208 mss:1448 lastsnd:1984 lastrcv:2984 lastack:1984 pacing_rate 1bps
0      0      192.168.162.1:22 192.168.162.2:40000 cubic wscale:7,7 rto:204 lastsnd:90000 lastrcv:90000 lastack:1
0      0      192.168.234.11:8000 192.168.234.1:50000 cubic lastsnd:99999 lastrcv:99999
0      0      [::ffff:192.168.234.11]:22 [::ffff:192.168.234.1]:57447 cubic lastsnd:40 lastrcv:7000
"""


def test_flows_to_sshd_with_the_kernels_idle_time():
    assert session_cut.parse_flows(SS) == [
        {"peer": "192.168.234.1", "port": 57446, "idle_ms": 1984},
        {"peer": "192.168.162.2", "port": 40000, "idle_ms": 90000},
        {"peer": "192.168.234.1", "port": 57447, "idle_ms": 40},
    ]


def test_an_idle_controller_flow_is_cut_and_a_busy_one_or_another_peers_is_not():
    seen = {}
    cuts = session_cut.to_cut(session_cut.parse_flows(SS), seen, 100.0, peer="192.168.234.1", idle=1.5, max_age=None)
    assert [(flow["port"], why) for flow, why, _age in cuts] == [(57446, "idle")]
    assert seen == {("192.168.234.1", 57446): 100.0, ("192.168.234.1", 57447): 100.0}


def test_a_flow_is_cut_at_its_max_age_whatever_its_traffic_and_gone_flows_are_forgotten():
    flows = session_cut.parse_flows(SS)
    seen = {("192.168.234.1", 57447): 90.0, ("192.168.234.1", 1): 10.0}
    cuts = session_cut.to_cut(flows, seen, 100.0, peer="192.168.234.1", idle=None, max_age=10)
    assert [(flow["port"], why, age) for flow, why, age in cuts] == [(57447, "max-age", 10.0)]
    assert ("192.168.234.1", 1) not in seen
    assert session_cut.to_cut(flows, {}, 100.0, peer="192.168.234.1", idle=None, max_age=10) == []
