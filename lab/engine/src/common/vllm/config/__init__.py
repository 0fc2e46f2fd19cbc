# SPDX-License-Identifier: Apache-2.0
from vllm.config.model import DistributedExecutorBackend, ModelConfig, ParallelConfig, VllmConfig

__all__ = ["DistributedExecutorBackend", "ModelConfig", "ParallelConfig", "VllmConfig"]
