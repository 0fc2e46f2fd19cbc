# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hybrid_image role refuses an image its Dockerfile would start FROM when it is no image reference, given as a
role variable (which the fleet's check of the inventory does not see), before anything reaches a node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLAY = """- name: The role's input checks, on the controller
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Include the role
      ansible.builtin.include_role:
        name: dgxspark.vllm.hybrid_image
"""


@pytest.mark.parametrize(("variable", "value"), [
    ("hybrid_image_source", "lab/vllm:0.17\nRUN id"),
    ("hybrid_image_base", "Lab/Base Image"),
])
def test_a_malformed_image_stops_the_role_naming_host_variable_and_fix(tmp_path, variable, value):
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    extra = {"hybrid_image_source": "lab/vllm-qwen35:0.17", variable: value}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(tmp_path / "play.yml"), "-e", json.dumps(extra)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False)
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0, out[-2000:]
    assert ("TASK [dgxspark.vllm.hybrid_image : Check the inputs, inspect the images the build starts from and derive the "
            "image's content tag]") \
        in out, out[-2000:]
    assert f"host localhost: {variable} is" in out and "not an image reference; set it to [registry" in out, out[-2000:]
    recap = out.rsplit("PLAY RECAP", maxsplit=1)[-1]
    assert "Read the architectures" not in out and "changed=0" in recap and "failed=1" in recap, recap
