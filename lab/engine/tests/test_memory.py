"""Unified memory: the stand-in's CUDA memory figures come from the node's model file, vLLM's start-up guard
refuses a utilisation the free memory cannot cover, and each rank charges its share of the checkpoint (its bytes
divided by TP x PP) against its budget, failing in vLLM's words when the weights do not fit."""

from __future__ import annotations


import pytest
from enginekit import Proc, flavour_env, free_port, vllm_cmd, wait_ready

GIB_KB = 1 << 20
# A GB10 as CUDA sees it: 121.7 GiB in all; the field's best case is about 102 GiB available.
TOTAL_KB = int(121.7 * GIB_KB)


def write_meminfo(directory, available_gib, free_gib=None):
    directory.mkdir(parents=True, exist_ok=True)
    available = int(available_gib * GIB_KB)
    free = int((free_gib if free_gib is not None else available_gib) * GIB_KB)
    (directory / "meminfo").write_text(f"MemTotal:       {TOTAL_KB} kB\nMemFree:        {free} kB\n"
                                       f"MemAvailable:   {available} kB\nCached:         {available - free} kB\n")
    return directory


@pytest.fixture
def memory(trees, monkeypatch):
    import sys
    monkeypatch.syspath_prepend(str(trees["0.17"]))
    for mod in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, mod)
    from vllm.v1.worker import lab_memory

    return lab_memory


def test_memory_figures_come_from_the_nodes_model_file(memory, tmp_path, monkeypatch):
    monkeypatch.setenv(memory.GPU_DIR_ENV, str(tmp_path / "absent"))
    assert memory.mem_get_info() is None  # no model: no figures, no guard
    monkeypatch.setenv(memory.GPU_DIR_ENV, str(write_meminfo(tmp_path / "gpu", 102.0, free_gib=40.0)))
    free, total = memory.mem_get_info()
    assert (free, total) == (102 * (1 << 30), TOTAL_KB * 1024)  # MemAvailable, as vLLM reads it on a GB10


@pytest.mark.parametrize("utilization,starts", [(0.80, True), (0.83, True), (0.85, False), (0.87, False)])
def test_field_utilisations_against_102_gib_available(memory, utilization, starts):
    total, free = TOTAL_KB * 1024, 102 * (1 << 30)
    if starts:
        assert memory.request_memory("cuda:0", free, total, utilization) >= total * utilization
    else:
        with pytest.raises(ValueError) as err:
            memory.request_memory("cuda:0", free, total, utilization)
        assert str(err.value) == (
            f"Free memory on device cuda:0 (102.0/121.7 GiB) on startup is less than desired GPU memory utilization "
            f"({utilization}, {round(total * utilization / (1 << 30), 2)} GiB). Decrease GPU memory utilization or "
            "reduce GPU memory used by other processes.")


def test_serve_refuses_to_start_when_free_memory_is_short(trees, models, tmp_path, procs):
    gpu = write_meminfo(tmp_path / "gpu", 60.0)
    port = free_port()
    env = flavour_env(trees["0.17"], VLLM_LAB_GPU_DIR=str(gpu))
    head = Proc(vllm_cmd("serve", str(models["qwen35a3b"]), "--port", str(port), "--gpu-memory-utilization", "0.8"),
                env, tmp_path / "short.log")
    procs.append(head)
    head.p.wait(timeout=60)
    out = head.output()
    assert head.p.returncode != 0
    assert ("ValueError: Free memory on device cuda:0 (60.0/121.7 GiB) on startup is less than desired GPU memory "
            "utilization (0.8, 97.36 GiB).") in out, out[-3000:]
    write_meminfo(gpu, 102.0)
    again = Proc(vllm_cmd("serve", str(models["qwen35a3b"]), "--port", str(port), "--gpu-memory-utilization", "0.8"),
                 env, tmp_path / "room.log")
    procs.append(again)
    wait_ready(f"http://127.0.0.1:{port}", again)


def test_page_cache_not_dropped_runs_out_of_memory_loading(trees, models, tmp_path, procs):
    # The guard reads MemAvailable (the kernel counts the page cache there) and passes; the weights then need memory
    # nothing holds: with the page cache full, CUDA runs out of memory while loading them (35 GB: 32.6 GiB).
    gpu = write_meminfo(tmp_path / "gpu", 102.0, free_gib=20.0)
    port = free_port()
    head = Proc(vllm_cmd("serve", str(models["qwen35a3b"]), "--port", str(port), "--gpu-memory-utilization", "0.8"),
                flavour_env(trees["0.17"], VLLM_LAB_GPU_DIR=str(gpu)), tmp_path / "oom.log")
    procs.append(head)
    head.p.wait(timeout=60)
    out = head.output()
    assert head.p.returncode != 0
    assert ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.6 GiB. GPU 0 has a total capacity "
            "of 121.7 GiB of which 20.0 GiB is free.") in out, out[-3000:]
    assert "on startup is less than desired GPU memory utilization" not in out


def test_page_cache_taking_the_kv_caches_room_runs_out_of_memory_after_the_weights(memory, tmp_path, monkeypatch):
    # 40 GiB free: the 32.6 GiB of weights load, then the rest of the 97.36 GiB budget is not there.
    monkeypatch.setenv(memory.GPU_DIR_ENV, str(write_meminfo(tmp_path / "gpu", 102.0, free_gib=40.0)))
    weights, requested = 35 * 10**9, memory.request_memory("cuda:0", 102 << 30, TOTAL_KB * 1024, 0.8)
    memory.load_weights(0, weights)
    with pytest.raises(memory.OutOfMemoryError) as err:
        memory.allocate(0, requested, weights)
    assert str(err.value) == ("CUDA out of memory. Tried to allocate 64.76 GiB. GPU 0 has a total capacity of "
                              "121.7 GiB of which 7.4 GiB is free.")


def test_the_loads_own_reads_through_the_page_cache_do_not_take_the_kv_caches_room(memory, tmp_path, monkeypatch):
    """Loading reads the shards through the page cache: the node's free memory falls while the weights come in (the
    lab's memory model counts the stand-in shards it read at the checkpoint's size). Those pages are the weights on
    their way in: the KV cache is judged against the memory free before the load, as a GB10 reclaims that clean cache.
    A deploy of the 122B model at TP=2 ran out of memory here when the figure was taken after the load."""
    gpu = write_meminfo(tmp_path / "gpu", 102.0, free_gib=100.0)
    monkeypatch.setenv(memory.GPU_DIR_ENV, str(gpu))
    weights, requested = 119 * 10**9 // 2, memory.request_memory("cuda:0", 102 << 30, TOTAL_KB * 1024, 0.8)
    free_before = memory.load_weights(0, weights)
    assert free_before == 100 * GIB_KB * 1024
    write_meminfo(gpu, 102.0, free_gib=36.0)  # the shards read: 64 GiB of page cache
    memory.allocate(0, requested, weights, free_before)
    with pytest.raises(memory.OutOfMemoryError):  # the figure after the load would have refused it
        memory.allocate(0, requested, weights)


def test_checkpoint_bytes_are_the_index_total_size_divided_by_tp_x_pp(memory, models, tmp_path):
    assert memory.checkpoint_bytes(models["qwen35"]) == 119 * 10**9  # what the stand-in's index says it stands for
    assert [memory.rank_share(models["qwen35"], n) for n in (1, 2, 4)] == [119 * 10**9, 59_500_000_000, 29_750_000_000]
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "model.safetensors").write_bytes(b"x" * 4096)
    assert memory.checkpoint_bytes(bare) == 4096  # no index: the shards' own sizes


@pytest.mark.parametrize("world_size,kv_gib", [(1, None), (2, 37.95), (4, 65.65)])
def test_kv_cache_is_the_budget_left_after_the_rank_share_and_the_profile(memory, models, world_size, kv_gib):
    # 121.7 GiB x 0.8 = 97.36 GiB per rank; Qwen3.5-122B-A10B-FP8 is 110.83 GiB on one rank, 55.41 GiB on two.
    requested = memory.request_memory("cuda:0", 102 << 30, TOTAL_KB * 1024, 0.8)
    weights = memory.rank_share(models["qwen35"], world_size)
    if kv_gib is None:
        with pytest.raises(ValueError) as err:
            memory.kv_cache_memory(requested, weights)
        assert str(err.value) == ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                                  "when initializing the engine.")
    else:
        assert memory.format_gib(memory.kv_cache_memory(requested, weights)) == str(kv_gib)


def test_64_gb_spark_cannot_hold_half_of_the_122b_checkpoint(memory, models):
    # A 64 GB Spark: about 60 GiB as CUDA sees it, 48 GiB at 0.8; half of 110.83 GiB plus the profile does not fit.
    requested = memory.request_memory("cuda:0", 55 << 30, 60 << 30, 0.8)
    with pytest.raises(ValueError, match="No available memory for the cache blocks"):
        memory.kv_cache_memory(requested, memory.rank_share(models["qwen35"], 2))
    assert memory.kv_cache_memory(requested, memory.rank_share(models["qwen35"], 4)) > 0


def test_field_122b_fp8_on_one_spark_has_no_memory_for_the_cache_blocks(trees, models, tmp_path, procs):
    # The example's single Spark sent Qwen3.5-122B-A10B-FP8 at TP=1: the guard passes (102 GiB free), the weights load
    # (110.83 GiB fit in free memory), and nothing of the 97.36 GiB budget is left for the KV cache.
    gpu = write_meminfo(tmp_path / "gpu", 115.0)
    port = free_port()
    head = Proc(vllm_cmd("serve", str(models["qwen35"]), "--port", str(port), "--gpu-memory-utilization", "0.8"),
                flavour_env(trees["0.17"], VLLM_LAB_GPU_DIR=str(gpu)), tmp_path / "nokv.log")
    procs.append(head)
    head.p.wait(timeout=60)
    out = head.output()
    assert head.p.returncode != 0
    assert "Model loading took 110.8274 GiB memory" in out, out[-3000:]
    assert ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.") in out, out[-3000:]


def test_field_122b_fp8_weights_larger_than_free_memory_run_out_of_memory_loading(trees, models, tmp_path, procs):
    # 102 GiB free (the field's best case) is less than the 110.83 GiB of weights one rank loads at TP=1.
    gpu = write_meminfo(tmp_path / "gpu", 102.0)
    port = free_port()
    head = Proc(vllm_cmd("serve", str(models["qwen35"]), "--port", str(port), "--gpu-memory-utilization", "0.8"),
                flavour_env(trees["0.17"], VLLM_LAB_GPU_DIR=str(gpu)), tmp_path / "oom122.log")
    procs.append(head)
    head.p.wait(timeout=60)
    out = head.output()
    assert head.p.returncode != 0
    assert ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 110.83 GiB. GPU 0 has a total capacity "
            "of 121.7 GiB of which 102.0 GiB is free.") in out, out[-3000:]


def test_legacy_engine_charges_the_checkpoint_too(trees, models, tmp_path, procs):
    # 0.14 with Qwen3-30B-A3B in BF16 (61 GB: 56.81 GiB) at 0.49 (59.63 GiB): the weights load, no KV cache is left.
    gpu = write_meminfo(tmp_path / "gpu", 102.0)
    port = free_port()
    head = Proc(vllm_cmd("serve", str(models["qwen3moe"]), "--port", str(port), "--gpu-memory-utilization", "0.49"),
                flavour_env(trees["0.14"], VLLM_LAB_GPU_DIR=str(gpu)), tmp_path / "legacy.log")
    procs.append(head)
    head.p.wait(timeout=60)
    out = head.output()
    assert head.p.returncode != 0
    assert "Model loading took 56.8107 GiB memory" in out, out[-3000:]
    assert "ValueError: No available memory for the cache blocks." in out, out[-3000:]
