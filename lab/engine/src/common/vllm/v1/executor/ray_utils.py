# SPDX-License-Identifier: Apache-2.0
"""Ray helpers: join the cluster, reserve one GPU bundle per rank, wrap workers in actors."""

from __future__ import annotations

import os
import time

from vllm.logger import init_logger

logger = init_logger(__name__)

PG_WAIT_TIMEOUT = 1800

try:
    import ray
    from ray.util.placement_group import PlacementGroup  # noqa: F401
except ImportError as e:
    ray = None
    ray_import_err = e
else:
    ray_import_err = None


def ray_is_available() -> bool:
    return ray is not None


def assert_ray_available() -> None:
    if ray is None:
        raise ValueError(f"Failed to import Ray: {ray_import_err}. Please install Ray with "
                         "`pip install ray`.")


class RayWorkerWrapper:
    """The actor holding one rank (created with ``num_gpus=1`` in a placement-group bundle)."""

    def __init__(self, rpc_rank: int = 0) -> None:
        os.environ["VLLM_LAB_PROCESS_ROLE"] = "none"  # Ray prefixes forwarded lines itself
        self.rpc_rank = rpc_rank
        self.worker = None
        self._serving = None

    def get_node_ip(self) -> str:
        from vllm.v1.worker.gpu_worker import get_ip

        return get_ip()

    def get_node_and_gpu_ids(self) -> tuple[str, list]:
        return ray.get_runtime_context().get_node_id(), [str(g) for g in ray.get_gpu_ids()]

    def update_environment_variables(self, env: dict) -> None:
        for key, value in env.items():
            os.environ[key] = value

    def init_worker(self, spec: dict, rank: int, local_rank: int, init_method: str) -> None:
        from vllm.v1.worker.gpu_worker import Worker

        self.worker = Worker(spec, rank, local_rank, init_method)

    def init_device(self) -> None:
        self.worker.init_device()

    def load_model(self) -> None:
        self.worker.load_model()

    def start_serving(self) -> None:
        import threading

        self._serving = threading.Thread(target=self.worker.serve_steps, daemon=True, name="tp-steps")
        self._serving.start()

    def execute_model(self, step_input: int) -> int:
        return self.worker.execute_model(step_input)

    def shutdown(self) -> None:
        self.worker.shutdown()


def _wait_until_pg_ready(current_placement_group) -> None:
    placement_group_specs = current_placement_group.bundle_specs
    s = time.time()
    pg_ready_ref = current_placement_group.ready()
    wait_interval = 10
    while time.time() - s < PG_WAIT_TIMEOUT:
        ready, _ = ray.wait([pg_ready_ref], timeout=wait_interval)
        if len(ready) > 0:
            break
        # Exponential backoff for warning print.
        wait_interval *= 2
        logger.info(
            "Waiting for creating a placement group of specs for %d seconds. specs=%s. Check `ray status` "
            "and `ray list nodes` to see if you have enough resources, and make sure the IP addresses used "
            "by ray cluster are the same as VLLM_HOST_IP environment variable specified in each node if "
            "you are running on a multi-node.", int(time.time() - s), placement_group_specs)
    try:
        ray.get(pg_ready_ref, timeout=0)
    except ray.exceptions.GetTimeoutError:
        total_gpu_required = sum(spec.get("GPU", 0) for spec in placement_group_specs)
        raise ValueError(
            f"Cannot provide a placement group requiring {total_gpu_required} GPUs "
            f"(placement_group_specs={placement_group_specs}) within {PG_WAIT_TIMEOUT} seconds.\n"
            "Tensor parallel size may exceed available GPUs in your cluster. Check resources with "
            "`ray status` and `ray list nodes`.\nIf running on K8s with limited GPUs, consider reducing "
            "--tensor-parallel-size to match available GPU resources.") from None


def initialize_ray_cluster(parallel_config, ray_address: str | None = None):
    """Connect to the running Ray cluster and reserve ``world_size`` GPU bundles."""
    assert_ray_available()
    from vllm import envs
    from vllm.v1.worker.gpu_worker import get_ip

    if parallel_config.world_size > envs.VLLM_LAB_NUM_GPUS:
        logger.warning(
            "Tensor parallel size (%d) exceeds available GPUs (%d). This may result in Ray placement group "
            "allocation failures. Consider reducing tensor_parallel_size to %d or less, or ensure your Ray "
            "cluster has %d GPUs available.", parallel_config.world_size, envs.VLLM_LAB_NUM_GPUS,
            envs.VLLM_LAB_NUM_GPUS, parallel_config.world_size)
    if ray.is_initialized():
        logger.info("Ray is already initialized. Skipping Ray initialization.")
    else:
        ray.init(address=ray_address)
    device_str = "GPU"
    current_placement_group = ray.util.get_current_placement_group()
    if current_placement_group:
        logger.info("Using the existing placement group")
    else:
        logger.info("No current placement group found. Creating a new placement group.")
        num_devices_in_cluster = ray.cluster_resources().get(device_str, 0)
        if parallel_config.world_size > num_devices_in_cluster:
            logger.warning("The number of required %ss exceeds the total number of available %ss in the "
                           "placement group.", device_str, device_str)
        placement_group_specs = [{device_str: 1.0} for _ in range(parallel_config.world_size)]
        current_ip = get_ip()
        current_node_id = ray.get_runtime_context().get_node_id()
        node_resources = {n["NodeID"]: n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")}
        current_node_resource = node_resources.get(current_node_id, {})
        if current_node_resource.get(device_str, 0) < 1:
            raise ValueError(
                f"Current node has no {device_str} available. {current_node_resource=}. vLLM engine cannot "
                f"start without {device_str}. Make sure you have at least 1 {device_str} available in a node "
                f"{current_node_id=} {current_ip=}.")
        # at least one bundle on the current node
        placement_group_specs[0][f"node:{current_ip}"] = 0.001
        # By default, Ray packs resources as much as possible.
        current_placement_group = ray.util.placement_group(placement_group_specs, strategy="PACK")
        _wait_until_pg_ready(current_placement_group)
    return current_placement_group
