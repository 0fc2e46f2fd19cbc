# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The commands an operator copies on a first run work as copied (issue 33, notes/first-run.md part B): every
ansible-playbook command the playbooks' headers and the README show asks for the vault's password (group_vars/all/
vault.yml is encrypted) and for sudo's (DGX OS's admin user has one, and the example sets ansible_become), and the
README shows the first request to the served model, by its served name and with the key."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
# A command as written in a comment or a code block (one line), or inline in backticks (over a line break too).
COMMAND = re.compile(r"ansible-playbook dgxspark\.vllm\.\w+")


def header(playbook: Path) -> list[str]:
    """The ansible-playbook commands of a playbook's header comment (the comment lines before its first play)."""
    lines = []
    for line in playbook.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        if "ansible-playbook " in line and COMMAND.search(line):
            lines.append(line.strip("# "))
    return lines


def readme_commands() -> list[str]:
    """Every ansible-playbook command of the README that runs a playbook of the collection: lines of its code blocks,
    and inline code spans of its text (joined over a line break)."""
    found, text, fenced = [], [], False
    for line in README.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif fenced:
            found += [line.strip()] if COMMAND.search(line) else []
        else:
            text.append(line)
    for span in re.findall(r"`([^`]+)`", "\n".join(text)):
        if COMMAND.search(span):
            found.append(" ".join(span.split()))
    return found


def test_every_playbook_header_command_asks_for_the_vault_and_the_sudo_password():
    """fails at 13f6075: status.yml, teardown.yml, collect_logs.yml, benchmark.yml and build_hybrid_image.yml showed
    no --ask-vault-pass ("no vault secrets found" with the documented encrypted vault.yml) and none showed -K
    ("Missing sudo password" on every node of a stock DGX OS)."""
    playbooks = sorted((REPO / "playbooks").glob("*.yml"))
    seen = 0
    for playbook in playbooks:
        for command in header(playbook):
            seen += 1
            assert "--ask-vault-pass" in command.split(), (playbook.name, command)
            assert "-K" in command.split(), (playbook.name, command)
    assert seen >= len(playbooks)  # every playbook shows at least one command


def test_every_readme_command_asks_for_the_vault_and_the_sudo_password_and_says_why():
    """fails at 13f6075: the README's first commands had no -K, and the install's had no --ask-vault-pass."""
    commands = readme_commands()
    assert len(commands) >= 5, commands
    for command in commands:
        assert "--ask-vault-pass" in command and re.search(r"(^|\s)-K(\s|$)", command), command
    text = " ".join(README.split())
    assert "`-K` (`--ask-become-pass`)" in text and "NOPASSWD" in text


def test_the_readme_shows_the_first_request_by_the_served_name_with_the_key_through_the_gateway_and_to_a_head():
    """fails at 13f6075: no curl or OpenAI-client example existed; the served name (not the Hugging Face id) had to
    be guessed."""
    example = yaml.safe_load((REPO / "inventories" / "example" / "group_vars" / "all" / "main.yml").read_text())
    defaults = yaml.safe_load((REPO / "roles" / "vllm_serve" / "defaults" / "main.yml").read_text())
    assert defaults["vllm_serve_served_model_name"] == "{{ (vllm_serve_model | basename | lower) }}"
    served = example["dgxspark_model"].rsplit("/", 1)[-1].lower()
    port = yaml.safe_load((REPO / "roles" / "gateway" / "defaults" / "main.yml").read_text())["gateway_port"]
    assert port == defaults["vllm_serve_port"] == 8000
    section = README.split("### The first request", 1)[1].split("\n## ", 1)[0]
    assert f'"model": "{served}"' in section and f'model="{served}"' in section
    assert '-H "Authorization: Bearer $DGXSPARK_API_KEY"' in section
    # the example's gateway, over HTTPS with its certificate (security review M2), once its fingerprint is checked
    assert re.search(r"curl [^\n]*--cacert gateway\.pem https://10\.20\.0\.5:8000/v1/chat/completions", section)
    assert "openssl s_client -connect 10.20.0.5:8000" in section and "-fingerprint -sha256" in section
    # pair_a's head's door, over HTTPS with its own certificate (without gateways)
    assert re.search(r"curl [^\n]*--cacert pair_a\.pem https://10\.20\.0\.11:8000/v1/chat/completions", section)
    assert "from openai import OpenAI" in section and 'base_url="https://10.20.0.5:8000/v1"' in section
    assert "127.0.0.1:8000" in section  # with gateways, the engine is reached on its head only
