# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deprecated filters (fleet_pairs, release_compare) warn when they are used, and only then: a deprecation
routed through meta/runtime.yml warned on every use of any of the collection's filters (ansible-core loads every
filter file to find one), so every deploy would have printed both warnings. Run through ansible itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[4]
ANSIBLE = Path(sys.executable).parent / "ansible"


def adhoc(expression):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_DEPRECATION_WARNINGS="true")
    proc = subprocess.run([str(ANSIBLE), "localhost", "-i", "localhost,", "-c", "local", "-m", "ansible.builtin.debug",
                           "-a", f"msg={{{{ {expression} }}}}"], cwd=REPO, capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_a_filter_in_use_warns_of_no_deprecation():
    assert "DEPRECATION" not in adhoc("[] | dgxspark.vllm.fabric_mtu_mismatch(cluster='pair1')")


@pytest.mark.parametrize("expression,name", [
    ("{} | dgxspark.vllm.release_compare({})", "release_compare"),
    ("groups | dgxspark.vllm.fleet_pairs(hostvars, fleet='all')", "fleet_pairs"),
])
def test_a_deprecated_filter_warns_when_it_is_used(expression, name):
    said = " ".join(adhoc(expression).split())
    assert f"[DEPRECATION WARNING]: The dgxspark.vllm.{name} filter is deprecated" in said
    assert "removed from collection 'dgxspark.vllm' version 1.0.0" in said
