"""Unified memory: the stand-in's CUDA memory figures come from the node's model file, and vLLM's start-up guard
refuses a utilisation the free memory cannot cover, in vLLM's words."""

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
    head = Proc(vllm_cmd("serve", str(models["qwen35"]), "--port", str(port), "--gpu-memory-utilization", "0.8"),
                env, tmp_path / "short.log")
    procs.append(head)
    head.p.wait(timeout=60)
    out = head.output()
    assert head.p.returncode != 0
    assert ("ValueError: Free memory on device cuda:0 (60.0/121.7 GiB) on startup is less than desired GPU memory "
            "utilization (0.8, 97.36 GiB).") in out, out[-3000:]
    write_meminfo(gpu, 102.0)
    again = Proc(vllm_cmd("serve", str(models["qwen35"]), "--port", str(port), "--gpu-memory-utilization", "0.8"),
                 env, tmp_path / "room.log")
    procs.append(again)
    wait_ready(f"http://127.0.0.1:{port}", again)


def test_page_cache_not_dropped_runs_out_of_memory_loading(trees, models, tmp_path, procs):
    # The guard reads MemAvailable (the kernel counts the page cache there) and passes; the weights and KV cache
    # then need memory nothing holds: with the page cache full, CUDA runs out of memory while loading.
    gpu = write_meminfo(tmp_path / "gpu", 102.0, free_gib=20.0)
    port = free_port()
    head = Proc(vllm_cmd("serve", str(models["qwen35"]), "--port", str(port), "--gpu-memory-utilization", "0.8"),
                flavour_env(trees["0.17"], VLLM_LAB_GPU_DIR=str(gpu)), tmp_path / "oom.log")
    procs.append(head)
    head.p.wait(timeout=60)
    out = head.output()
    assert head.p.returncode != 0
    assert ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 97.36 GiB. GPU 0 has a total capacity "
            "of 121.7 GiB of which 20.0 GiB is free.") in out, out[-3000:]
    assert "on startup is less than desired GPU memory utilization" not in out
