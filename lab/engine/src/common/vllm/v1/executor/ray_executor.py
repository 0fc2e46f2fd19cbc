# SPDX-License-Identifier: Apache-2.0
"""``ray`` backend: one ``RayWorkerWrapper`` actor per rank, scheduled in the placement group."""

from __future__ import annotations

import os

from vllm import envs
from vllm.distributed import get_distributed_init_method
from vllm.logger import init_logger
from vllm.v1.executor.abstract import Executor
from vllm.v1.executor.ray_utils import RayWorkerWrapper, initialize_ray_cluster, ray

logger = init_logger(__name__)


def _get_open_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class RayDistributedExecutor(Executor):
    uses_ray = True
    # These env vars are worker-specific, therefore are NOT copied from the driver to the workers
    WORKER_SPECIFIC_ENV_VARS = {"VLLM_HOST_IP", "VLLM_HOST_PORT", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES"}
    ADDITIONAL_ENV_VARS = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}

    def _init_executor(self) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pc = self.parallel_config
        placement_group = initialize_ray_cluster(pc, os.environ.get("RAY_ADDRESS"))
        bundle_indices = [i for i, b in enumerate(placement_group.bundle_specs) if b.get("GPU", 0)]
        bundle_indices = bundle_indices[: pc.world_size]
        actor_cls = ray.remote(RayWorkerWrapper)
        self.workers = []
        for rank, bundle_id in enumerate(bundle_indices):
            strategy = PlacementGroupSchedulingStrategy(placement_group=placement_group,
                                                        placement_group_capture_child_tasks=True,
                                                        placement_group_bundle_index=bundle_id)
            self.workers.append(actor_cls.options(num_cpus=0, num_gpus=envs.VLLM_RAY_PER_WORKER_GPUS,
                                                  scheduling_strategy=strategy).remote(rpc_rank=rank))
        worker_ips = ray.get([w.get_node_ip.remote() for w in self.workers])
        node_gpus = ray.get([w.get_node_and_gpu_ids.remote() for w in self.workers])
        logger.info("workers: %s", [f"rank={r} ip={ip} node={n[:8]} gpus={g}"
                                    for r, (ip, (n, g)) in enumerate(zip(worker_ips, node_gpus))])
        # vLLM copies its own VLLM_* variables (and HF tokens) to the workers; NCCL_*
        # variables stay those of each node's Ray worker processes.
        to_copy = sorted(v for v in set(envs.environment_variables) | self.ADDITIONAL_ENV_VARS
                         if v not in self.WORKER_SPECIFIC_ENV_VARS and v in os.environ)
        logger.info("Copying the following environment variables to workers: %s", to_copy)
        env = {v: os.environ[v] for v in to_copy}
        ray.get([w.update_environment_variables.remote(env) for w in self.workers])
        distributed_init_method = get_distributed_init_method(worker_ips[0], _get_open_port())
        spec = self.worker_spec()
        ray.get([w.init_worker.remote(spec, rank, 0, distributed_init_method)
                 for rank, w in enumerate(self.workers)])
        ray.get([w.init_device.remote() for w in self.workers])
        ray.get([w.load_model.remote() for w in self.workers])
        ray.get([w.start_serving.remote() for w in self.workers[1:]])

    def execute_model(self, step_input: int) -> int:
        try:
            return ray.get(self.workers[0].execute_model.remote(step_input))
        except ray.exceptions.RayError as e:
            raise RuntimeError(f"RayWorkerProc rank=[0] failed: {e}") from e

    def check_health(self) -> None:
        return None

    def shutdown(self) -> None:
        try:
            ray.get(self.workers[0].shutdown.remote(), timeout=5)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
        for w in self.workers:
            ray.kill(w)
