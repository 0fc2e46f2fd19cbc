# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model_fit filter: the preflight's verdict on a node from the head's model_checkpoint result."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.model_fit import FilterModule

model_fit = FilterModule().filters()["model_fit"]
SPARK = int(121.7 * (1 << 30))
HEAD = {"total_bytes": 119 * 10**9, "source": "the hub's model.safetensors.index.json", "url": "", "error": "",
        "local": {"complete": False, "present_bytes": 0}, "disk": {"path": "/srv", "free_bytes": 50 * 10**9}}


def test_a_single_spark_is_refused_the_122b_model_and_its_head_the_download():
    result = model_fit(HEAD, host="spark-d1", cluster="solo_d", model="Qwen/Qwen3.5-122B-A10B-FP8", is_head=True,
                       tensor_parallel_size=1, utilization="0.80", memory_total_bytes=SPARK, overhead_gib="8",
                       disk_headroom_gb=5, models_dir="/srv/dgxspark/models")
    memory, disk = result["errors"]
    assert memory.startswith("spark-d1: solo_d cannot serve Qwen/Qwen3.5-122B-A10B-FP8: 119.0 GB of weights")
    assert disk.startswith("spark-d1: solo_d's head cannot hold Qwen/Qwen3.5-122B-A10B-FP8: the download needs 124.0 GB")
    assert result["figures"]["disk"]["fits"] is False and result["figures"]["fits_memory"] is False


def test_a_pairs_worker_fits_and_is_not_judged_on_disk():
    result = model_fit(HEAD, host="spark-a2", cluster="pair_a", model="Qwen/Qwen3.5-122B-A10B-FP8",
                       tensor_parallel_size=2, memory_total_bytes=SPARK)
    assert result["errors"] == [] and result["figures"]["fits_memory"] is True and result["figures"]["disk"] is None


def test_a_head_that_was_not_read_leaves_the_fit_unjudged():
    result = model_fit({}, host="spark-a2", cluster="pair_a", model="m/x", memory_total_bytes=SPARK)
    assert result["errors"] == [] and result["notes"]


def test_bad_input_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="model_fit: expects the result of dgxspark.vllm.model_checkpoint"):
        model_fit("119", host="h", cluster="c", model="m/x")
    with pytest.raises(AnsibleFilterError, match="model_fit: "):
        model_fit(HEAD, host="h", cluster="c", model="m/x", utilization="most")
