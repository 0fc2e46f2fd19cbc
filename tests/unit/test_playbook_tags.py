# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A partial deploy is a tagged one (issue 35): --tags trust, weights, image, serve, watch, gateway or monitoring runs
those steps after the checks and the comparison, which every run makes. Asked of ansible-playbook itself
(--list-tasks), on the example inventory."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "deploy_qwen35.yml"
ALWAYS = ["Check the fleet and every node", "Compare each cluster with what its last deploy left"]
GATEWAY = ["Read each cluster's release and run its head's door for the gateways",
           "Serve the fleet's models through the gateway"]
MONITORING = ["Run a node exporter on every node (removed when the fleet has no monitoring host)", "Run Prometheus"]
PULL = "Pull the source image on each cluster's head (dgxspark_image_pull - missing, always or never)"
TRUST = "Set up the fleet's transfer trust"
WEIGHTS = "Make the weights identical on every node of each pair (downloaded once on the head when missing)"
BUILD = "Build and verify the serving image on each pair's head"
SYNC = "Distribute the serving image over the fabric"
SERVE = "Serve the model across each pair"
WATCH = "Watch every cluster (a container on each head that outlives the play and reboots)"
SUMMARY = "Summarise the fleet"
RECORD = "Record what this deploy left on every node of each cluster that serves"


def running_plays(*args):
    """The plays that run a task with ARGS (the names of the plays --list-tasks lists tasks under, besides the check of
    a role's arguments, which Ansible tags always)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i",
                           str(REPO / "inventories" / "example"), str(PLAYBOOK), "--list-tasks", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    plays, current = [], None
    for line in proc.stdout.splitlines():
        match = re.match(r"^  play #\d+ \([^)]*\): (.*?)\tTAGS:", line)
        if match:
            current = match.group(1)
        elif (current and line.startswith("      ") and line.strip() and current not in plays
              and "Validating arguments against arg spec" not in line):  # a role's own check: tagged always
            plays.append(current)
    return plays


@pytest.mark.parametrize("tags, plays", [
    ("gateway", ALWAYS + GATEWAY),
    ("monitoring", ALWAYS + MONITORING),
    ("serve", [ALWAYS[0], PULL, ALWAYS[1], TRUST, BUILD, SYNC, SERVE, SUMMARY]),
    ("weights", [ALWAYS[0], PULL, ALWAYS[1], TRUST, WEIGHTS]),
    ("image", [ALWAYS[0], PULL, ALWAYS[1], TRUST, BUILD, SYNC]),
    ("trust", [ALWAYS[0], ALWAYS[1], TRUST]),
    ("watch", ALWAYS + [WATCH]),
])
def test_a_tagged_run_runs_its_steps_after_the_checks_and_the_comparison(tags, plays):
    assert running_plays("--tags", tags) == plays


def test_a_full_run_runs_every_step_and_records_last():
    plays = running_plays()
    assert plays == [ALWAYS[0], PULL, ALWAYS[1], TRUST, WEIGHTS, BUILD, SYNC, SERVE, WATCH, SUMMARY, *GATEWAY,
                     *MONITORING, RECORD], plays


def _run_tags(*args):
    """ansible_run_tags and ansible_skip_tags as ansible-playbook hands them to a play run with ARGS (a tuple, not a
    list: found when the record play compared a tuple with a list and never wrote the record)."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        play = pathlib.Path(tmp) / "tags.yml"
        play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug:\n"
                        "        msg: \"{{ {'run': ansible_run_tags | list, 'skip': ansible_skip_tags | list} | to_json }}\"\n"
                        "      tags: [always]\n")
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
                   ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
        proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                               "-c", "local", str(play), *args], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    msg = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]
    found = json.loads(msg) if isinstance(msg, str) else msg
    return tuple(found["run"]), tuple(found["skip"])


@pytest.mark.parametrize("args, records", [
    ((), True), (("--tags", "serve"), False), (("--skip-tags", "gateway"), False),
    # Molecule runs every converge with these: no play of the deploy carries them, the run is whole. At ee445cf the
    # record play wanted no skipped tag at all, so under molecule no deploy left a record and its idempotence step
    # never took the settled path.
    (("--skip-tags", "molecule-notest,notest"), True),
])
def test_only_a_full_run_writes_the_deploy_record(args, records):
    """The record play's condition, evaluated by Ansible with the tags a real run hands it."""
    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    run_tags, skip_tags = _run_tags(*args)
    plays = yaml.safe_load(PLAYBOOK.read_text())
    record = next(play for play in plays if play.get("name") == RECORD)["tasks"][0]["when"]
    templar = Templar(loader=DataLoader(), variables={
        "ansible_run_tags": run_tags, "ansible_skip_tags": skip_tags, "deploy_state_settled": False,
        "vllm_serve_result": {"release": {"image": "x"}}})
    assert templar.template(trust_as_template("{{ " + record + " }}")) is records


def test_the_record_plays_tags_are_the_deploys():
    """The tags whose skipping makes a run partial are every tag a play of the deploy carries."""
    import yaml

    plays = yaml.safe_load(PLAYBOOK.read_text())
    carried = {tag for play in plays for tag in play.get("tags") or []}
    record = next(play for play in plays if play.get("name") == RECORD)["tasks"][0]["when"]
    listed = set(re.search(r"intersect\((\[[^]]*\])\)", record).group(1).strip("[]").replace("'", "").replace(" ", "").split(","))
    assert listed == carried, (listed, carried)
