# SPDX-License-Identifier: Apache-2.0
"""Executor interface: run one decoding step over every tensor-parallel rank."""

from __future__ import annotations


class Executor:
    uses_ray: bool = False

    def __init__(self, vllm_config) -> None:
        self.vllm_config = vllm_config
        self.parallel_config = vllm_config.parallel_config
        self.model_config = vllm_config.model_config
        self._init_executor()

    def _init_executor(self) -> None:
        raise NotImplementedError

    def worker_spec(self) -> dict:
        mc = self.model_config
        return {"architecture": mc.architecture, "model_dir": str(mc.model_dir.resolve()),
                "world_size": self.parallel_config.world_size, "cuda_graphs": not mc.enforce_eager,
                "gpu_memory_utilization": self.vllm_config.gpu_memory_utilization}

    def execute_model(self, step_input: int) -> int:
        raise NotImplementedError

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        return None

    @staticmethod
    def get_class(parallel_config) -> type["Executor"]:
        backend = parallel_config.distributed_executor_backend
        if backend == "ray":
            from vllm.v1.executor.ray_executor import RayDistributedExecutor

            return RayDistributedExecutor
        if backend == "mp":
            from vllm.v1.executor.multiproc_executor import MultiprocExecutor

            return MultiprocExecutor
        if backend in ("uni", "external_launcher"):
            from vllm.v1.executor.uniproc_executor import UniProcExecutor

            return UniProcExecutor
        raise ValueError(f"Unknown distributed executor backend: {backend}")
