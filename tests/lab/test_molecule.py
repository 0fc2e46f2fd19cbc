"""`molecule test --all` in make test: every scenario under molecule/ (default, fresh, rollout, faults, teardown; cluster4
in make lab-test), each with its idempotence step, on a lab of molecule's own (prefix mol, its own subnets and inventory),
which the default scenario's create brings up and its destroy removes: this worker's lab, which the files after this
one use, is never touched. The scenarios deploy with the mp backend (.config/molecule/config.yml): the engine files run
Ray clusters on the other worker meanwhile.

Molecule's own output is kept in tests/output/molecule.log; the steps it ran, one line each, are printed at the end of
the pytest run (tests/lab/conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from labkit import BIN, MOLECULE_LOG, REPO, ansible_failures, molecule_steps

pytestmark = pytest.mark.lab_minutes(18)  # labkit: the order files are handed out

SCENARIOS = ("cluster4", "default", "faults", "fresh", "rollout", "teardown")
MOLECULE_LAB = {
    "DGXSPARK_LAB_PREFIX": "mol",
    "DGXSPARK_LAB_MGMT_SUBNET": "192.168.239.0/24",
    "DGXSPARK_LAB_FABRIC_SUBNET": "192.168.126.0/24",
    "DGXSPARK_LAB_FABRIC2_SUBNET": "192.168.127.0/24",
    "DGXSPARK_LAB_INVENTORY": str(REPO / "inventories" / "lab" / "hosts-mol.yml"),
    "DGXSPARK_LAB_INVENTORY_FILE": "hosts-mol.yml",
}


# In make test, every scenario but cluster4 (four nodes serving TP4: the longest after fresh, and the same roles as the
# pair's scenarios); make lab-test runs cluster4 too (the test after this one).
LAB_TEST_ONLY = ("cluster4",)


def molecule_test(selection, scenarios):
    """`molecule test SELECTION` on molecule's lab; asserts that each of SCENARIOS passed with its idempotence step."""
    # This worker's lab is named by the environment (labkit); molecule's is not that one. The lab's other settings
    # (its image cache) stay.
    own = ("DGXSPARK_LAB_PREFIX", "DGXSPARK_LAB_MGMT_SUBNET", "DGXSPARK_LAB_FABRIC_SUBNET", "DGXSPARK_LAB_FABRIC2_SUBNET",
           "DGXSPARK_LAB_INVENTORY", "DGXSPARK_LAB_NODES", "DGXSPARK_LAB_CLUSTER_SIZE", "DGXSPARK_LAB_FABRIC_TOPOLOGY")
    env = {k: v for k, v in os.environ.items() if k not in own and not k.startswith("MOLECULE_")}
    env.update(MOLECULE_LAB, PATH=f"{BIN}:{env.get('PATH', '')}", ANSIBLE_FORCE_COLOR="0", NO_COLOR="1")
    # Molecule's state from an earlier run (a killed one says its instances exist, and the fresh scenario's operator
    # directory lives in the same ephemeral directory) is not this run's: every scenario and the shared state start
    # from nothing, as on a fresh machine. With shared_state every scenario's ephemeral directory is the default's
    # (reset --all removes it for the first scenario, then fails on the second: molecule 25).
    reset = subprocess.run([str(BIN / "molecule"), "reset", "-s", "default"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env, timeout=300, check=False, cwd=REPO)
    assert reset.returncode == 0, reset.stdout[-4000:]
    # Molecule logs to stderr and Ansible writes to stdout: one stream keeps them in order.
    proc = subprocess.run([str(BIN / "molecule"), "test", *selection], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=env, timeout=3600, check=False, cwd=REPO)
    MOLECULE_LOG.parent.mkdir(parents=True, exist_ok=True)
    MOLECULE_LOG.write_text(proc.stdout)
    text = "\n".join(molecule_steps(proc.stdout))
    if proc.returncode != 0:
        # A plain message: pytest prints it whole (an assert's tuple is cut to a line).
        pytest.fail(f"molecule test {' '.join(selection)} failed ({proc.returncode}):\n{text}\n"
                    f"failed tasks:\n{ansible_failures(proc.stdout)}", pytrace=False)
    for scenario in scenarios:
        # Molecule's summary: a line per scenario (the default's create and destroy have lines of their own), none
        # with a failed action.
        failed = re.findall(rf"^{scenario}\s+: actions=\d+\s+successful=\d+ .* failed=(\d+)$", text, re.M)
        assert failed and set(failed) == {"0"}, (scenario, text[-4000:])
        assert re.search(rf"^{scenario} > idempotence: Executed: Successful", text, re.M), (scenario, text[-4000:])
    assert re.search(r"^default > destroy: Executed: Successful", text, re.M)
    for scenario in set(SCENARIOS) - set(scenarios):
        assert not re.search(rf"^{scenario} > converge", text, re.M), (scenario, text[-4000:])


def test_molecule_test_all_passes_every_scenario_with_its_idempotence_step():
    assert sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml")) == sorted(SCENARIOS)
    molecule_test(["--all", *[arg for name in LAB_TEST_ONLY for arg in ("--exclude", name)]],
                  [name for name in SCENARIOS if name not in LAB_TEST_ONLY])


@pytest.mark.slow  # make lab-test: see LAB_TEST_ONLY
def test_molecule_test_cluster4_passes_with_its_idempotence_step():
    molecule_test([arg for name in LAB_TEST_ONLY for arg in ("-s", name)], list(LAB_TEST_ONLY))
