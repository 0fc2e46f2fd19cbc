# SPDX-License-Identifier: Apache-2.0
"""A tensor-parallel worker: joins the communicator, loads its shard, computes partials."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from vllm.logger import init_logger

logger = init_logger(__name__)


class Worker:
    """One rank. ``spec`` is a plain dict (it crosses process and node boundaries)."""

    def __init__(self, spec: dict, rank: int, local_rank: int, distributed_init_method: str) -> None:
        self.spec = spec
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = int(spec["world_size"])
        self.distributed_init_method = distributed_init_method
        self.comm = None
        self.model = None
        self.requested_memory = 0

    def init_device(self) -> None:
        logger.debug("world_size=%d rank=%d local_rank=%d distributed_init_method=%s backend=nccl",
                     self.world_size, self.rank, self.local_rank, self.distributed_init_method)
        from vllm.platforms import cuda_set_device

        cuda_set_device(self.local_rank)  # torch.cuda.set_device: CUDA's driver check comes first
        from vllm.v1.worker import lab_memory

        info = lab_memory.mem_get_info()
        if info is not None:  # vLLM's request_memory(): the guard runs before the communicator and the weights
            free, total = info
            logger.debug("free memory %s GiB of %s GiB", lab_memory.format_gib(free), lab_memory.format_gib(total))
            self.requested_memory = lab_memory.request_memory(
                f"cuda:{self.local_rank}", free, total, float(self.spec.get("gpu_memory_utilization", 0.9)))
        if self.world_size > 1:
            from vllm.distributed.lab_nccl import NcclComm

            self.comm = NcclComm(self.rank, self.world_size, self.distributed_init_method,
                                 cuda_graphs=bool(self.spec.get("cuda_graphs", True)))

    def load_model(self) -> None:
        from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator
        from vllm.model_executor.models.registry import ModelRegistry

        from vllm.v1.worker import lab_memory

        start = time.monotonic()
        model_dir = Path(self.spec["model_dir"])
        weights = lab_memory.rank_share(model_dir, self.world_size)
        free_before_load = lab_memory.load_weights(self.local_rank, weights) if self.requested_memory else None
        model_cls = ModelRegistry.models[self.spec["architecture"]].load_model_cls()
        self.model = model_cls(vllm_config=None, prefix="")
        shards = len(list(model_dir.glob("*.safetensors")))
        self._progress(0, shards, 0.0)
        loaded = self.model.load_weights(safetensors_weights_iterator(model_dir, self.rank))
        elapsed = time.monotonic() - start
        self._progress(shards, shards, elapsed)
        logger.info("Loading weights took %.2f seconds", elapsed)
        logger.info("Model loading took %.4f GiB memory and %.6f seconds", weights / 2**30, elapsed)
        logger.debug("loaded %d tensors", len(loaded))
        if self.requested_memory:  # the profile run, then the KV cache out of what the budget has left
            kv_cache = lab_memory.kv_cache_memory(self.requested_memory, weights)
            logger.info("Available KV cache memory: %.2f GiB", kv_cache / 2**30)
            lab_memory.allocate(self.local_rank, self.requested_memory, weights, free_before_load)

    def _progress(self, done: int, total: int, elapsed: float) -> None:
        """The shard progress bar as real vLLM's first local rank writes it: no prefix, CR first, even to a file."""
        if self.local_rank != 0 or total == 0:
            return
        rate = f"{done / elapsed:.2f}it/s" if done and elapsed > 0 else "?it/s"
        when = "00:00<00:00" if done else "00:00<?"
        sys.stderr.write(f"\rLoading safetensors checkpoint shards: {100 * done // total:3d}% Completed | "
                         f"{done}/{total} [{when}, {rate}]\n" + ("\n" if done == total else ""))
        sys.stderr.flush()

    def partial(self, step_input: int) -> int:
        return self.model.forward_partial(self.rank, step_input)

    def execute_model(self, step_input: int) -> int:
        """One decoding step: this rank's partial, all-reduced over every rank."""
        own = self.partial(step_input)
        if self.comm is None:
            return own
        return self.comm.all_reduce_step(step_input, own)

    def serve_steps(self) -> str:
        return self.comm.serve_steps(self.partial)

    def shutdown(self) -> None:
        if self.comm is not None and self.rank == 0:
            self.comm.shutdown()

    def get_node_ip(self) -> str:
        return get_ip()


def get_ip() -> str:
    """This node's IP: ``VLLM_HOST_IP``, else Ray's node IP when Ray is up, else the
    hostname's address (vLLM probes the default route instead; the lab has none)."""
    host_ip = os.environ.get("VLLM_HOST_IP", "")
    if host_ip:
        return host_ip
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
