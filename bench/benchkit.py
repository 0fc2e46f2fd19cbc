# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the deploy benches share: where the repo, its venv, the lab and its inventory are, and how they run things."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
PREFIX = os.environ.get("DGXSPARK_LAB_PREFIX", "spark")
INVENTORY = REPO / "inventories" / "lab" / ("hosts.yml" if PREFIX == "spark" else f"hosts-{PREFIX}.yml")
LAB = [sys.executable, str(REPO / "lab" / "lab.py")]


def env() -> dict:
    out = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0")
    out["PATH"] = f"{BIN}:{out.get('PATH', '')}"
    return out


def sh(argv, check: bool = True) -> subprocess.CompletedProcess:
    """Run ARGV with the repo's Ansible settings; stop the bench with its output when it fails and CHECK."""
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env(), check=False)
    if check and proc.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, argv))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def playbook(path, *args) -> list[str]:
    """ansible-playbook on the lab's inventory; PATH is a name under playbooks/ or a path."""
    target = REPO / "playbooks" / path if "/" not in str(path) else Path(path)
    return [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(target), *args]


def compare_rounds(rounds, small, large, ratio_label, note):
    """Alternate two timed runs for ROUNDS rounds and print each round, the medians and their ratio (large / small).

    SMALL and LARGE are (label, callable returning seconds); RATIO_LABEL names the ratio, NOTE follows it.
    Returns the two medians.
    """
    (small_label, small_run), (large_label, large_run) = small, large
    smalls, larges = [], []
    for i in range(rounds):
        smalls.append(small_run())
        larges.append(large_run())
        print(f"round {i + 1}: {small_label} {smalls[-1]:.1f} s, {large_label} {larges[-1]:.1f} s", flush=True)
    m_small, m_large = statistics.median(smalls), statistics.median(larges)
    print(f"median: {small_label} {m_small:.1f} s, {large_label} {m_large:.1f} s")
    print(f"ratio {ratio_label} wall time: {m_large / m_small:.2f}x  ({note})", flush=True)
    return m_small, m_large
