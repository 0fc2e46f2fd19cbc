# SPDX-License-Identifier: Apache-2.0
"""The lab's stand-in for vLLM's platform detection and for CUDA's driver check.

On a DGX Spark a container sees the GPU only when Docker was asked for it (``--gpus`` /
``device_requests``): NVIDIA's prestart hook then puts the device nodes (``/dev/nvidiactl``,
``/dev/nvidiaN``) and the driver's libraries (NVML, libcuda) into it. The lab's hook
(lab/images/node/nvidia-container-runtime-hook) puts the device nodes in; they stand for the
whole driver here. Without them vLLM finds no platform (NVML does not load) and fails with
``Failed to infer device type``, and torch's CUDA says it found no NVIDIA driver.
"""

from __future__ import annotations

import glob
import os

from vllm.logger import init_logger

logger = init_logger(__name__)

# Where the device nodes are looked for (tests that run the engine outside a container point it
# at a directory of their own; nothing in the collection sets it).
_DEV_ROOT_ENV = "VLLM_LAB_DEV_ROOT"

NO_DRIVER = ("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
             "driver from http://www.nvidia.com/Download/index.aspx")
NO_DEVICE_TYPE = ("Failed to infer device type, please set the environment variable `VLLM_LOGGING_LEVEL=DEBUG` "
                  "to turn on verbose logging to help debug the issue.")


def dev_root() -> str:
    return os.environ.get(_DEV_ROOT_ENV, "/dev")


def cuda_device_count() -> int:
    """GPUs this process can use: 0 without the driver's control device."""
    root = dev_root()
    if not os.path.exists(os.path.join(root, "nvidiactl")):
        return 0
    return len([p for p in glob.glob(os.path.join(root, "nvidia[0-9]*")) if os.path.basename(p)[6:].isdigit()])


def device_type() -> str:
    """What vLLM's platform detection settles on: "cuda", or "" when no platform is found."""
    logger.debug("Checking if CUDA platform is available.")
    if not os.path.exists(os.path.join(dev_root(), "nvidiactl")):
        logger.debug("Exception happens when checking CUDA platform: NVML Shared Library Not Found")
        logger.debug("No platform detected, vLLM is running on UnspecifiedPlatform")
        return ""
    if cuda_device_count() <= 0:
        logger.debug("CUDA platform is not available because no GPU is found.")
        return ""
    logger.debug("Confirmed CUDA platform is available.")
    return "cuda"


def check_device_type() -> str:
    """vLLM's DeviceConfig with device="auto"."""
    found = device_type()
    if not found:
        raise RuntimeError(NO_DEVICE_TYPE)
    return found


def cuda_set_device(index: int) -> None:
    """torch.cuda.set_device: the driver check first, then the ordinal."""
    count = cuda_device_count()
    if not os.path.exists(os.path.join(dev_root(), "nvidiactl")):
        raise RuntimeError(NO_DRIVER)
    if index >= count:
        raise RuntimeError("CUDA error: invalid device ordinal")
