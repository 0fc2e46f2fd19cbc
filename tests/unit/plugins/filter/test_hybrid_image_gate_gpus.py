# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model-import gate (b) of hybrid_image runs the way the engine does: with the GPU asked for on a node that has
one. Fails at 13f6075, whose gate (b) ran every image without the GPU (a field image that loads its model modules
only where the GPU is was refused though it would serve)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter import hybrid_image_gate_gpus as plugin
from ansible_collections.dgxspark.vllm.plugins.module_utils import _hybrid_gates

SPARK = {"rc": 0, "stdout": "GPU 0: NVIDIA GB10 (UUID: GPU-5f0c6a1e-8d9b-4c3a-9e2f-0a1b2c3d4e5f)", "changed": False}
NO_DRIVER = {"rc": 9, "stdout": "", "stderr": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."}
NOT_INSTALLED = {"rc": 2, "stdout": "", "stderr": "[Errno 2] No such file or directory: b'nvidia-smi'", "failed": False}
SKIPPED = {"skipped": True, "changed": False}


@pytest.mark.parametrize("mode,probe,expected", [
    ("auto", SPARK, ["--gpus", "all"]),                       # a Spark: as the engine containers
    ("auto", {"rc": 0, "stdout": "GPU 0: A\nGPU 1: B\n"}, ["--gpus", "all"]),
    ("auto", NO_DRIVER, []),                                  # no driver: no GPU to ask for
    ("auto", NOT_INSTALLED, []),                              # a build host without NVIDIA's tools
    ("auto", {"rc": 0, "stdout": "No devices found."}, []),
    ("always", SKIPPED, ["--gpus", "all"]),
    ("never", SPARK, []),
    ("auto", None, []),
])
def test_the_model_import_gate_asks_for_the_gpu_where_the_engine_has_it(mode, probe, expected):
    assert plugin.hybrid_image_gate_gpus(probe, mode=mode) == expected


def test_run_args_that_already_ask_for_a_gpu_are_not_doubled():
    assert plugin.hybrid_image_gate_gpus(SPARK, mode="auto", run_args=["--gpus", "device=0"]) == []
    assert plugin.hybrid_image_gate_gpus(SPARK, mode="always", run_args=["--gpus=all"]) == []
    assert plugin.hybrid_image_gate_gpus(SPARK, mode="auto", run_args=["--shm-size", "1g"]) == ["--gpus", "all"]


def test_the_request_is_the_engine_containers():
    """--gpus all is what the engine containers' device_requests (driver nvidia, count -1, gpu) stand for."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import _node_container  # pylint: disable=import-outside-toplevel
    assert _node_container.GPU_REQUEST == {"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}
    assert _hybrid_gates.GPU_RUN_ARGS == ["--gpus", "all"]


def test_an_unknown_mode_names_the_variable():
    with pytest.raises(AnsibleFilterError, match="hybrid_image_gate_gpus is 'yes': it must be one of auto, always, never"):
        plugin.hybrid_image_gate_gpus(SPARK, mode="yes")
    with pytest.raises(AnsibleFilterError, match="expects the registered result of nvidia-smi -L"):
        plugin.hybrid_image_gate_gpus("GPU 0", mode="auto")
