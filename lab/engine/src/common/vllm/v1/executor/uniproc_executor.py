# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

from vllm.distributed import get_distributed_init_method
from vllm.v1.executor.abstract import Executor
from vllm.v1.worker.gpu_worker import Worker


class UniProcExecutor(Executor):
    def _init_executor(self) -> None:
        self.driver_worker = Worker(self.worker_spec(), 0, 0, get_distributed_init_method("127.0.0.1", 0))
        self.driver_worker.init_device()
        self.driver_worker.load_model()

    def execute_model(self, step_input: int) -> int:
        return self.driver_worker.execute_model(step_input)
