# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Docker connection options of the modules that read or act on a node's own Docker engine (one definition,
with ``_docker.ARGUMENT_SPEC`` in plugins/module_utils/_docker.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  docker_host:
    description: The Docker daemon to talk to (the node's own).
    type: str
    default: unix:///var/run/docker.sock
  timeout:
    description: Seconds each Docker API call may take.
    type: int
    default: 30
"""
