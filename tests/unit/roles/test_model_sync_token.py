# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 15.4: the Hugging Face token of model_sync's download never reaches a command line or the play's output.

The role's real download tasks run on this machine (connection local, as root or not) at -vvv with a sentinel token
and a stand-in CLI (model_sync_hf_cli may be a path). The stand-in records what the real `hf` would see: its
environment, the file HF_TOKEN_PATH names (content and mode), and the command lines of every process above it up to
PID 1 (what `ps` shows while it runs). It then writes a complete model, as a download does.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
SENTINEL = "hf_SENTINEL_token_4d9c1e"

STAND_IN = r'''#!{python}
import json, os, pathlib, sys
out = pathlib.Path({record!r})
chain, pid = [], os.getppid()
while pid > 1:
    chain.append(pathlib.Path(f"/proc/{{pid}}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    pid = int(pathlib.Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[1])
path = os.environ.get("HF_TOKEN_PATH", "")
token = pathlib.Path(path).read_text() if path else None
mode = oct(os.stat(path).st_mode & 0o777) if path else None
out.write_text(json.dumps({{"argv": sys.argv, "env": dict(os.environ), "chain": chain, "token": token, "mode": mode}}))
dest = pathlib.Path(sys.argv[sys.argv.index("--local-dir") + 1])
dest.mkdir(parents=True, exist_ok=True)
(dest / "config.json").write_text('{{"architectures": ["Qwen3ForCausalLM"]}}')
(dest / "model.safetensors").write_bytes(b"\0" * 16)
'''

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: The role's download tasks, as the role runs them on a head
      ansible.builtin.include_role:
        name: dgxspark.vllm.model_sync
        tasks_from: download
"""


def test_download_reads_the_token_from_a_root_only_file_and_no_command_line_or_output_holds_it(tmp_path):
    record = tmp_path / "record.json"
    cli = tmp_path / "hf"
    cli.write_text(STAND_IN.format(python=sys.executable, record=str(record)))
    cli.chmod(0o755)
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    token_dir = tmp_path / "hf-token"
    extra = {
        "model_sync_model": "Qwen/Tiny", "model_sync_models_dir": str(tmp_path / "models"),
        "model_sync_path": str(tmp_path / "models" / "Tiny"), "model_sync_download_in": "host",
        "model_sync_hf_cli": str(cli), "model_sync_hf_token": SENTINEL, "model_sync_hf_token_dir": str(token_dir),
        "model_sync_download": "auto", "model_sync_offline": "", "model_sync_download_image": "",
        "model_sync_revision": "", "model_sync_include": [], "model_sync_exclude": [],
        "model_sync_download_timeout": 60,
        "model_sync_target_hosts": [], "model_sync_name": "Tiny",  # a single node: the look asks no worker
    }
    varfile = tmp_path / "vars.json"  # as from vault: not on the ansible-playbook command line either
    varfile.write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(play), "-vvv", "-e", f"@{varfile}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    seen = json.loads(record.read_text())
    # The token is in no command line above the CLI (ps), no output of the play (-vvv), no argv, no environment ...
    assert seen["chain"] and not [line for line in seen["chain"] if SENTINEL in line]
    assert SENTINEL not in proc.stdout and SENTINEL not in proc.stderr
    assert SENTINEL not in " ".join(seen["argv"])
    assert "HF_TOKEN" not in seen["env"] and SENTINEL not in json.dumps(seen["env"])
    # ... the CLI found it where HF_TOKEN_PATH points, in a file only its owner reads.
    assert seen["env"]["HF_TOKEN_PATH"] == str(token_dir / "token")
    assert seen["token"] == SENTINEL and seen["mode"] == "0o600"
    # The file is only there while the CLI runs.
    assert not (token_dir / "token").exists() and oct(token_dir.stat().st_mode & 0o777) == "0o700"
