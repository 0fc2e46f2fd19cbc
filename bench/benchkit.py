# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the deploy benches share: where the repo, its venv, the lab and its inventory are, and how they run things."""

from __future__ import annotations

import os
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
