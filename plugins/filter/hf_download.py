# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The argv and environment of a Hugging Face download, for ansible.builtin.command (no shell)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: hf_download
short_description: The argv and environment of a Hugging Face model download (on the host or in a container)
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers
description:
  - Builds the command that downloads a Hugging Face model repository into a local directory with the Hugging Face
    CLI (C(hf download), or C(huggingface-cli download) from older huggingface_hub releases), for
    C(ansible.builtin.command)'s C(argv) and the task's C(environment). No shell is involved.
  - The token is never in the argv nor in the returned C(environment). O(token_file) names a root-only file on the
    node holding it, and the CLI reads it through C(HF_TOKEN_PATH) (huggingface_hub; every release with C(hf)).
    Ansible writes a task's C(environment) onto the remote command line (C(ps), C(-vvv)) and C(docker run -e)
    copies values into C(docker inspect), so only the path goes there. In a container the file is mounted
    read-only at C(/run/dgxspark/hf_token), and the container runs with every capability dropped.
positional: _input, local_dir
options:
  _input:
    description: The model's repository id (C(org/name)).
    type: str
    required: true
  local_dir:
    description: The absolute directory on the node the files are written to.
    type: str
    required: true
  where:
    description: V(host) runs the CLI on the node, V(container) in O(image) with the parent of O(local_dir) mounted.
    type: str
    choices: [host, container]
    default: host
  cli:
    description: The CLI program (C(hf), C(huggingface-cli), or an absolute path to one).
    type: str
    default: hf
  image:
    description: The image to run the CLI in (O(where=container)).
    type: str
    default: ""
  revision:
    description: A branch, tag or commit; empty means the default branch.
    type: str
    default: ""
  include:
    description: Glob patterns of the files to download; empty means all.
    type: list
    elements: str
    default: []
  exclude:
    description: Glob patterns of files to leave out.
    type: list
    elements: str
    default: []
  token_file:
    description:
      - Absolute path on the node of a file (mode 0600) holding the Hugging Face token; empty means no token.
      - Write it with M(dgxspark.vllm.node_files) under C(no_log), and remove it after the download.
    type: str
    default: ""
  docker:
    description: The docker CLI (O(where=container)).
    type: str
    default: docker
"""

EXAMPLES = r"""
- name: Download the model on the head (the token is read from a root-only file, never passed)
  vars:
    download: >-
      {{ 'Qwen/Qwen3.5-122B-A10B-FP8' | dgxspark.vllm.hf_download('/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8',
         token_file='/etc/dgxspark/hf/token') }}
  ansible.builtin.command:
    argv: "{{ download.argv }}"
  environment: "{{ download.environment }}"
  changed_when: true
"""

RETURN = r"""
_value:
  description: The command.
  type: dict
  contains:
    argv:
      description: The program and its arguments.
      type: list
      elements: str
    environment:
      description: Variables the command needs (C(HF_TOKEN_PATH) with O(token_file), C(HF_HUB_DISABLE_TELEMETRY)).
      type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils._model_files import download_command


def hf_download(model, local_dir, where="host", cli="hf", image="", revision="", include=None, exclude=None,
                token_file="", docker="docker"):
    try:
        return download_command(str(model), str(local_dir), where=where, cli=cli, image=image, revision=revision,
                                include=list(include or []), exclude=list(exclude or []),
                                token_file=str(token_file or ""), docker=docker)
    except ValueError as exc:
        raise AnsibleFilterError(f"hf_download: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"hf_download": hf_download}
