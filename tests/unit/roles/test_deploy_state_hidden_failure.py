# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Field (issue 33, 1): a node without the Python Docker SDK (DGX OS does not install python3-docker) failed the
deploy record's read, which runs under no_log (its digest covers the secrets), and the operator read only "the output
has been hidden due to the fact that 'no_log: true' was specified". Now the next task says which module failed and
why, in the module's own words, and still never shows the digest or a secret. Fails at 13f6075.

The role's real read task runs on this machine (connection local) with a Python whose `import docker` fails, as on
a node without the SDK: a `docker` package that raises ImportError stands first on the module's PYTHONPATH.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
SECRET = "sk-SENTINEL-api-key-7f3a9c"

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  environment:
    PYTHONPATH: {shadow}
  tasks:
    - name: The role's read, as deploy_qwen35.yml runs it on every node
      ansible.builtin.include_role:
        name: dgxspark.vllm.deploy_state
        tasks_from: read
"""


def test_a_hidden_read_that_fails_says_the_module_and_the_missing_docker_sdk(tmp_path):
    shadow = tmp_path / "shadow"
    (shadow / "docker").mkdir(parents=True)
    (shadow / "docker" / "__init__.py").write_text("raise ImportError('No module named docker (as on a fresh DGX OS)')\n")
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(shadow=shadow))
    node = tmp_path / "node.json"  # what the fleet action publishes for a single node (the read names its members)
    node.write_text('{"dgxspark_node": {"cluster": "solo", "members": ["localhost"], "head": "localhost"}}')
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"dgxspark_api_key={SECRET}",
                           "-e", f"deploy_state_path={tmp_path / 'record.json'}", "-e", f"@{node}", str(play), "-v"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-4000:]
    assert "Say why the record could not be read" in out, out[-4000:]
    assert ("localhost: dgxspark.vllm.deploy_record (reading " + str(tmp_path / "record.json") + ") failed: "
            "Failed to import the required Python library (docker)") in " ".join(out.split()), out[-4000:]
    assert SECRET not in out
    assert "inputs" not in out.split("Say why the record could not be read", 1)[1]
