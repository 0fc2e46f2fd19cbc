"""Every cluster of the example inventory is sent a model that fits its Sparks, judged as the preflight judges it
(fails at 13f6075: the example's single Spark was sent Qwen3.5-122B-A10B-FP8, 119 GB, which one Spark cannot hold)."""

from __future__ import annotations

from pathlib import Path

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "hosts.yml"
GIB = 1 << 30
SPARK_128_MEMTOTAL = int(121.7 * GIB)  # a 128 GB DGX Spark's MemTotal
# The checkpoints' sizes (model.safetensors.index.json metadata.total_size, rounded): what the preflight reads.
CHECKPOINTS = {"Qwen/Qwen3.5-122B-A10B-FP8": 119 * 10**9, "Qwen/Qwen3.5-35B-A3B-FP8": 35 * 10**9}


def test_field_every_example_cluster_is_sent_a_model_that_fits_its_sparks():
    from ansible_collections.dgxspark.vllm.plugins.module_utils._model_fit import judge

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(EXAMPLE)])
    variables = VariableManager(loader=loader, inventory=inventory)
    seen = {}
    for host in inventory.get_hosts("spark_pairs"):
        hv = variables.get_vars(host=host)
        cluster = next(g.name for g in host.get_groups() if g.name not in ("all", "spark_pairs"))
        model = hv["dgxspark_model"]
        result = judge({"total_bytes": CHECKPOINTS[model], "source": "its index"}, host=host.name, cluster=cluster,
                       model=model, is_head=False, tensor_parallel_size=hv["dgxspark_tensor_parallel_size"],
                       pipeline_parallel_size=hv["dgxspark_pipeline_parallel_size"], gpus_per_node=1,
                       utilization=0.80, memory_total=SPARK_128_MEMTOTAL, overhead=8 * GIB, disk_headroom=5 * 10**9,
                       models_dir=hv["dgxspark_models_dir"])
        assert result["errors"] == [], result["errors"]
        seen[cluster] = model
    assert seen == {"pair_a": "Qwen/Qwen3.5-122B-A10B-FP8", "pair_b": "Qwen/Qwen3.5-122B-A10B-FP8",
                    "cluster_c": "Qwen/Qwen3.5-122B-A10B-FP8", "solo_d": "Qwen/Qwen3.5-35B-A3B-FP8"}
