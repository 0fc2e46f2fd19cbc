# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A controller on a real network (issue 33, point 6): the lab cuts the controller's SSH sessions on the LAN as a NAT,
a stateful firewall or a VPN between an operator and the Sparks does (labkit.sessions_cut, lab/session_cut.py), and
the long steps survive it."""

from __future__ import annotations

import select
import shlex
import subprocess
import time

import pytest

from labkit import (BIN, INVENTORY, LAB, REPO, SSH_ARGS_NO_KEEPALIVE, ansible_env, collection_as_it_was, fleet_play,
                    mgmt_ip, node, node_exec, recap, report, run, sessions_cut)
from labkit import ENGINES, LAST

# It serves a pair with the controller's SSH sessions cut: the engines' worker (labkit.ENGINES), last of its files.
pytestmark = [ENGINES, LAST, pytest.mark.lab_minutes(4)]

SERVE = "tests/lab/playbooks/serve.yml"
# The stand-in engine takes this long per step (VLLM_LAB_SECONDS_PER_TOKEN): the readiness probe's first completion,
# and with it the readiness wait, lasts well over the cut's idle limit, as a real engine's minutes of loading and
# compiling do.
SECONDS_PER_TOKEN = "60"
IDLE_CUT = 30


def ssh(hosts, i, command, *options):
    """A plain ssh session from the controller to node I, with the inventory's key and host keys; the process."""
    hostvars = hosts["_meta"]["hostvars"][node(i)]
    return subprocess.Popen(["ssh", "-i", hostvars["ansible_ssh_private_key_file"],
                             *shlex.split(hostvars["ansible_ssh_common_args"]), "-o", "BatchMode=yes", *options,
                             f"root@{mgmt_ip(i)}", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def started(*procs, timeout=60):
    """Wait until each ssh session printed its first line ("started"): connected, authenticated, its command running.
    ssh sends keepalives only from then on, so a cutter started earlier could cut a keepalive session still in its
    handshake."""
    for proc in procs:
        ready = select.select([proc.stdout], [], [], timeout)[0]
        assert ready, "the ssh session did not start"
        assert proc.stdout.readline().strip() == "started"


def local_port(proc, i):
    """The controller's port of ssh process PROC's connection to node I's sshd."""
    listed = subprocess.run(["ss", "-tnpH", "state", "established", f"( dst {mgmt_ip(i)} and dport = :22 )"],
                            capture_output=True, text=True, check=True).stdout
    line = next(line for line in listed.splitlines() if f"pid={proc.pid}," in line)
    return line.split()[2].rsplit(":", 1)[1]


def test_lab_cuts_an_idle_controller_session_and_keepalives_keep_it(lab):
    """The cutter cuts real sessions: an ssh that sends nothing for 6 s is cut (ssh ends with 255, the remote command
    did not finish), one whose keepalives flow every second is not."""
    quiet = ssh(lab, 1, "echo started; sleep 18; echo finished")
    kept = ssh(lab, 1, "echo started; sleep 18; echo finished", "-o", "ServerAliveInterval=1")
    started(quiet, kept)
    ports = {"quiet": local_port(quiet, 1), "kept": local_port(kept, 1)}
    with sessions_cut(1, idle=6) as cuts:
        began = time.monotonic()
        out, err = quiet.communicate(timeout=60)
        took = time.monotonic() - began
        kept_out, kept_err = kept.communicate(timeout=60)
        logged = cuts()[1]
    assert quiet.returncode == 255 and "finished" not in out, (quiet.returncode, out, err)
    assert took < 15, took
    assert kept.returncode == 0 and kept_out.strip() == "finished", (kept.returncode, kept_out, kept_err)
    # The cutter also cuts other idle flows of the controller (Ansible's persistent connections of earlier tests).
    assert [line for line in logged if f":{ports['quiet']} " in line and "why=idle" in line], (ports, logged)
    assert not [line for line in logged if f":{ports['kept']} " in line], (ports, logged)
    report(f"session cut: an idle controller session cut after {took:.1f} s (idle limit 6 s); keepalives kept another")


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


# ------------------------------------------------------------------------------- the long steps against a cut session
MODEL = "Qwen/Qwen3-30B-A3B"  # its 61 GB fit a pair
IMAGE = "lab/vllm-qwen35:0.17"


def serve(playbook, env, *args):
    """tests/lab/playbooks/serve.yml (of the collection ENV resolves) on the pair (vLLM's own multi-node mode: the
    serving image has no Ray), with the ssh options of an operator whose ssh config sends no keepalives; the process."""
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(playbook), "-e", f"dgxspark_image={IMAGE}",
                "-e", f"dgxspark_model={MODEL}", "-e", "vllm_serve_backend=mp", *args], check=False, timeout=1200,
               env=dict(env, ANSIBLE_SSH_ARGS=SSH_ARGS_NO_KEEPALIVE))


def slow_engine():
    return ["-e", '{"vllm_serve_env": {"VLLM_LAB_SECONDS_PER_TOKEN": "%s"}}' % SECONDS_PER_TOKEN,
            "-e", "vllm_serve_completion_timeout=300"]


@pytest.fixture(scope="module")
def pair_with_weights(lab):
    run([*LAB, "images", "vllm-qwen35-0.17"])
    run([*LAB, "load", IMAGE])
    run([*LAB, "models"])
    yield lab
    serve(REPO / SERVE, ansible_env(), "-e", "vllm_serve_state=absent")


@pytest.mark.slow  # the collection as it was, beside the test below: make lab-test
def test_field_idle_controller_session_cut_during_readiness_wait_failed_at_13f6075(pair_with_weights, tmp_path):
    """Between the operator and the Sparks a NAT or firewall drops an SSH flow idle for IDLE_CUT s, and the operator's
    ssh sends no keepalives (OpenSSH's default). The engine takes longer than that to be ready. The collection as it
    was (13f6075) waited for readiness inside one SSH session: cut, the head is unreachable and the play fails."""
    root, old_env = collection_as_it_was(tmp_path, commit="13f6075")
    old_serve = root / SERVE
    assert "async:" not in (root / "roles" / "vllm_serve" / "tasks" / "present.yml").read_text()
    with sessions_cut(1, 2, idle=IDLE_CUT) as cuts:
        old = serve(old_serve, old_env, *slow_engine())
        old_cuts = cuts()
    serve(REPO / SERVE, ansible_env(), "-e", "vllm_serve_state=absent")
    assert old.returncode != 0, old.stdout[-4000:]
    assert recap(old.stdout, node(1))["unreachable"] == 1, old.stdout[-4000:]
    assert old_cuts[1], old_cuts  # node 1 (the head) cut the controller's session


def test_field_idle_controller_session_cut_during_readiness_wait_is_survived(pair_with_weights):
    """The same cut and engine as above (13f6075 was unreachable at the first cut): the wait now runs in the
    background on the head and each poll is a session of its own: cut between two polls, the next reconnects and the
    pair serves; a second run changes nothing."""
    # A poll less often than the cut: the controller's session goes idle between two polls and is cut there.
    poll = ["-e", f"vllm_serve_ready_poll={IDLE_CUT + 15}"]
    with sessions_cut(1, 2, idle=IDLE_CUT) as cuts:
        began = time.monotonic()
        new = serve(REPO / SERVE, ansible_env(), *slow_engine(), *poll)
        took = time.monotonic() - began
        new_cuts = cuts()
        again = serve(REPO / SERVE, ansible_env(), *slow_engine(), *poll)
    assert new.returncode == 0, new.stdout[-6000:]
    assert new_cuts[1], new_cuts  # the head's session was cut during the run, and the run went on
    assert recap(new.stdout, node(1))["unreachable"] == 0
    assert again.returncode == 0, again.stdout[-4000:]
    assert recap(again.stdout, node(1))["changed"] == 0 and recap(again.stdout, node(2))["changed"] == 0, (
        again.stdout[-4000:])
    report(f"readiness wait: served in {took:.0f} s with the head's idle controller sessions cut after {IDLE_CUT} s "
           f"({len(new_cuts[1])} cut(s) on the head)")


# The model download: the lab has no internet, so the head runs a stand-in of the Hugging Face CLI (model_sync_hf_cli
# may be a path) that takes DOWNLOAD_SECONDS, sending nothing, then writes the model from a copy on the node.
MODELS = "/srv/dgxspark/models"
HUB_MODEL = "Qwen3.5-122B-A10B-FP8"
HUB = "/var/tmp/dgxspark-test-hub"
HF = "/usr/local/bin/dgxspark-test-hf"
DOWNLOAD_SECONDS = 75
STAND_IN_HF = f"""#!/bin/sh
# A stand-in for `hf download MODEL --local-dir DIR ...`: {DOWNLOAD_SECONDS} s, then the model from {HUB}.
set -e
while [ $# -gt 0 ]; do
  if [ "$1" = --local-dir ]; then dest=$2; fi
  shift
done
sleep {DOWNLOAD_SECONDS}
mkdir -p "$dest"
cp -a {HUB}/{HUB_MODEL}/. "$dest"/
"""


def model_files(i):
    """{relative path: sha256} of the model's files on node I (its dot files left out: the revision record)."""
    listed = node_exec(node(i), "sh", "-c", f"cd {MODELS}/{HUB_MODEL} 2>/dev/null && find . -type f ! -name '.*' "
                                            "-exec sha256sum {} + | sort -k 2", check=False).stdout
    return {line.split()[1]: line.split()[0] for line in listed.splitlines()}


def stop_stand_in(i):
    """End a stand-in download the cut left running on node I (it goes on after its session is gone)."""
    pids = node_exec(node(i), "pgrep", "-f", HF, check=False).stdout.split()
    if pids:
        node_exec(node(i), "kill", *pids, check=False)


@pytest.fixture
def hub_on_head(lab):
    run([*LAB, "models"])
    node_exec(node(1), "sh", "-c", f"rm -rf {HUB} && mkdir -p {HUB} && cp -a {MODELS}/{HUB_MODEL} {HUB}/")
    node_exec(node(1), "sh", "-c", f"cat > {HF} && chmod 0755 {HF}", input_text=STAND_IN_HF)
    yield model_files(1)
    stop_stand_in(1)
    node_exec(node(1), "rm", "-rf", HUB, HF)
    run([*LAB, "models"])


def sync(play, env, *args):
    """The model_sync play (of the collection ENV resolves) with the stand-in CLI and no keepalives; the process."""
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(play),
                "-e", f"model_sync_model=Qwen/{HUB_MODEL}", "-e", f"model_sync_hf_cli={HF}",
                "-e", "model_sync_download_in=host", *args], check=False, timeout=900,
               env=dict(env, ANSIBLE_SSH_ARGS=SSH_ARGS_NO_KEEPALIVE))


@pytest.mark.slow  # the same async and cut as the readiness wait's test, on the download: make lab-test
def test_field_idle_controller_session_cut_during_model_download_is_survived(hub_on_head, tmp_path):
    """The head lacks the model and downloads it for longer than the network lets an SSH flow idle (IDLE_CUT s, no
    keepalives). 13f6075 ran the download inside one session: cut, the head is unreachable and the play fails. Now
    the download runs in the background and each poll is a session of its own: the model arrives complete and a second
    run changes nothing."""
    root, old_env = collection_as_it_was(tmp_path, commit="13f6075")
    assert "async:" not in (root / "roles" / "model_sync" / "tasks" / "fetch.yml").read_text()
    play = tmp_path / "sync.yml"
    play.write_text(fleet_play("Model sync", "dgxspark.vllm.model_sync"))
    node_exec(node(1), "rm", "-rf", f"{MODELS}/{HUB_MODEL}")
    with sessions_cut(1, 2, idle=IDLE_CUT) as cuts:
        old = sync(play, old_env)
        old_cuts = cuts()
    stop_stand_in(1)
    assert old.returncode != 0, old.stdout[-4000:]
    assert recap(old.stdout, node(1))["unreachable"] == 1, old.stdout[-4000:]
    assert old_cuts[1], old_cuts

    node_exec(node(1), "rm", "-rf", f"{MODELS}/{HUB_MODEL}")
    poll = ["-e", f"model_sync_download_poll={IDLE_CUT + 15}"]
    with sessions_cut(1, 2, idle=IDLE_CUT) as cuts:
        new = sync(play, ansible_env(), *poll)
        new_cuts = cuts()
        again = sync(play, ansible_env(), *poll)
    assert new.returncode == 0, new.stdout[-6000:]
    assert new_cuts[1], new_cuts  # the head's session was cut during the download, and the download went on
    assert model_files(1) == hub_on_head
    assert again.returncode == 0, again.stdout[-4000:]
    assert recap(again.stdout, node(1))["changed"] == 0, again.stdout[-4000:]
    report(f"model download: {DOWNLOAD_SECONDS} s with the head's idle controller sessions cut after {IDLE_CUT} s "
           f"({len(new_cuts[1])} cut(s)); 13f6075 was unreachable at the first cut")
