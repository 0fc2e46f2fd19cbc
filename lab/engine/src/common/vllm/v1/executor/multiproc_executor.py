# SPDX-License-Identifier: Apache-2.0
"""``mp`` backend: ranks are processes; with ``--nnodes`` they span nodes.

The head (``--node-rank 0``) hosts the store at ``--master-addr:--master-port``;
headless nodes (``--headless --node-rank N``) run their ranks and serve steps.
"""

from __future__ import annotations

import multiprocessing
import os

import vllm.envs as envs
from vllm.distributed import get_distributed_init_method
from vllm.logger import init_logger
from vllm.v1.executor.abstract import Executor
from vllm.v1.worker.gpu_worker import Worker

logger = init_logger(__name__)


def _worker_main(spec: dict, rank: int, local_rank: int, init_method: str) -> None:
    os.environ["VLLM_LAB_PROCESS_ROLE"] = f"VllmWorker TP{rank}"
    worker = Worker(spec, rank, local_rank, init_method)
    worker.init_device()
    worker.load_model()
    outcome = worker.serve_steps()
    if outcome == "lost":
        logger.error("Worker TP%d lost the connection to rank 0; exiting.", rank)
        os._exit(1)


class MultiprocExecutor(Executor):
    def _init_executor(self) -> None:
        pc = self.parallel_config
        self.init_method = get_distributed_init_method(pc.master_addr, pc.master_port)
        local = pc.local_world_size
        if local > envs.VLLM_LAB_NUM_GPUS:
            raise RuntimeError("CUDA error: invalid device ordinal")
        first = pc.node_rank * local
        self.ranks = list(range(first, first + local))
        self.procs: list[multiprocessing.Process] = []
        ctx = multiprocessing.get_context("spawn")
        spec = self.worker_spec()
        for local_rank, rank in enumerate(self.ranks[1:], start=1):
            proc = ctx.Process(target=_worker_main, args=(spec, rank, local_rank, self.init_method),
                               name=f"VllmWorker-{rank}", daemon=True)
            proc.start()
            self.procs.append(proc)
        self.driver_worker = Worker(spec, self.ranks[0], 0, self.init_method)
        self.driver_worker.init_device()
        self.driver_worker.load_model()

    def execute_model(self, step_input: int) -> int:
        return self.driver_worker.execute_model(step_input)

    def serve_headless(self) -> str:
        return self.driver_worker.serve_steps()

    def shutdown(self) -> None:
        self.driver_worker.shutdown()
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
