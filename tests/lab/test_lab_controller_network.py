# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A controller on a real network (issue 33, point 6): the lab cuts the controller's SSH sessions on the LAN as a NAT,
a stateful firewall or a VPN between an operator and the Sparks does (labkit.sessions_cut, lab/session_cut.py), and
the long steps survive it."""

from __future__ import annotations

import shlex
import subprocess
import time

import pytest

from labkit import (BIN, INVENTORY, LAB, REPO, SSH_ARGS_NO_KEEPALIVE, ansible_env, collection_as_it_was, mgmt_ip, node,
                    node_exec, recap, report, run, sessions_cut)

SERVE = "tests/lab/playbooks/serve.yml"
# The stand-in engine loads the weights at this pace (VLLM_LAB_LOAD_SECONDS_PER_GB): the readiness wait lasts well
# over the cut's idle limit, as a real 120 GB checkpoint's minutes of loading do.
LOAD_SECONDS_PER_GB = "40"
IDLE_CUT = 25


def ssh(hosts, i, command, *options):
    """A plain ssh session from the controller to node I, with the inventory's key and host keys; the process."""
    hostvars = hosts["_meta"]["hostvars"][node(i)]
    return subprocess.Popen(["ssh", "-i", hostvars["ansible_ssh_private_key_file"],
                             *shlex.split(hostvars["ansible_ssh_common_args"]), "-o", "BatchMode=yes", *options,
                             f"root@{mgmt_ip(i)}", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_lab_cuts_an_idle_controller_session_and_keepalives_keep_it(lab):
    """The cutter cuts real sessions: an ssh that sends nothing for 3 s is cut (ssh ends with 255, the remote command
    did not finish), one whose keepalives flow every second is not."""
    with sessions_cut(1, idle=3) as cuts:
        began = time.monotonic()
        quiet = ssh(lab, 1, "sleep 12; echo finished")
        kept = ssh(lab, 1, "sleep 12; echo finished", "-o", "ServerAliveInterval=1")
        out, err = quiet.communicate(timeout=60)
        took = time.monotonic() - began
        kept_out, kept_err = kept.communicate(timeout=60)
        logged = cuts()[1]
    assert quiet.returncode == 255 and "finished" not in out, (quiet.returncode, out, err)
    assert took < 10, took
    assert kept.returncode == 0 and kept_out.strip() == "finished", (kept.returncode, kept_out, kept_err)
    assert len(logged) == 1 and "why=idle" in logged[0], logged
    report(f"session cut: an idle controller session cut after {took:.1f} s (idle limit 3 s); keepalives kept another")


def test_lab_vpn_reconnect_cuts_a_session_even_with_keepalives(lab):
    """--max-age cuts a flow that carries traffic all the time (keepalives every second), as a VPN reconnecting does."""
    with sessions_cut(1, max_age=4) as cuts:
        began = time.monotonic()
        busy = ssh(lab, 1, "sleep 12; echo finished", "-o", "ServerAliveInterval=1")
        out, err = busy.communicate(timeout=60)
        took = time.monotonic() - began
        logged = cuts()[1]
    assert busy.returncode == 255 and "finished" not in out, (busy.returncode, out, err)
    assert took < 10, took
    assert len(logged) == 1 and "why=max-age" in logged[0], logged
