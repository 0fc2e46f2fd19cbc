# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter that gives the hybrid_image role's model-import gate the GPU where the engine would have it."""

from __future__ import annotations

DOCUMENTATION = r"""
name: hybrid_image_gate_gpus
short_description: The docker run arguments that give the model-import gate the GPU, as the engine containers have it
version_added: 0.3.0
author:
  - dgxspark.vllm maintainers
description:
  - The engine containers ask Docker for the GPU (C(device_requests), as C(--gpus all) does). The model-import gate
    (b) of the P(dgxspark.vllm.hybrid_image#role) role loads the model classes the engine will load, and some images
    load them only where the GPU is (a CUDA extension that needs the driver's C(libcuda)); run without it, the gate
    refuses an image that would serve.
  - Returns V([--gpus, all]) when O(mode=always), or when O(mode=auto) and the node's C(nvidia-smi -L) (the input)
    listed a GPU; otherwise, and when O(run_args) already ask for a GPU, an empty list.
positional: _input
options:
  _input:
    description: The registered result of C(nvidia-smi -L) on the build host (skipped or failed means no GPU).
    type: dict
    required: true
  mode:
    description: V(auto), V(always) or V(never) (P(dgxspark.vllm.hybrid_image#role)'s C(hybrid_image_gate_gpus)).
    type: str
    default: auto
  run_args:
    description: The gates' extra C(docker run) arguments; when they hold C(--gpus) already, nothing is added.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Gate (b) with the GPU on a node that has one
  ansible.builtin.command:
    argv: >-
      {{ ['docker', 'run', '--rm'] + (gpu_probe | dgxspark.vllm.hybrid_image_gate_gpus(mode='auto'))
         + [image, 'python3', '/tmp/inspect.py'] }}
"""

RETURN = r"""
_value:
  description: The arguments to add to the gate's C(docker run) (V([--gpus, all]) or V([])).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.module_utils._hybrid_gates import gate_gpu_args


def hybrid_image_gate_gpus(probe, mode="auto", run_args=None):
    if probe is not None and not isinstance(probe, dict):
        raise AnsibleFilterError(f"hybrid_image_gate_gpus: expects the registered result of nvidia-smi -L, got "
                                 f"{type(probe).__name__}")
    try:
        return gate_gpu_args(str(mode), probe, list(run_args or []))
    except ValueError as exc:
        raise AnsibleFilterError(f"hybrid_image_gate_gpus: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"hybrid_image_gate_gpus": hybrid_image_gate_gpus}
