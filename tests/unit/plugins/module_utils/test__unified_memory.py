# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the unified-memory helpers (make room, check, the message)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _unified_memory as um

GIB = 1 << 30


def _kb(gib):
    return int(gib * (1 << 20))


def meminfo(tmp_path, total_gib=121.7, free_gib=102.0, cached_gib=0.0, available=True):
    text = f"MemTotal:       {_kb(total_gib)} kB\nMemFree:        {_kb(free_gib)} kB\n"
    if available:
        text += f"MemAvailable:   {_kb(free_gib + cached_gib)} kB\n"
    text += f"Cached:         {_kb(cached_gib)} kB\nHugePages_Total:       0\n"
    path = tmp_path / "meminfo"
    path.write_text(text)
    return str(path)


def test_read_meminfo_in_bytes(tmp_path):
    mem = um.read_meminfo(meminfo(tmp_path, cached_gib=5))
    assert mem["MemTotal"] == int(121.7 * (1 << 20)) * 1024 and mem["Cached"] == 5 * GIB
    assert mem["HugePages_Total"] == 0
    assert um.read_meminfo(meminfo(tmp_path, available=False))["MemAvailable"] == 102 * GIB


def test_read_meminfo_without_totals_is_an_error(tmp_path):
    (tmp_path / "m").write_text("Cached: 1 kB\n")
    with pytest.raises(ValueError, match="has no MemTotal"):
        um.read_meminfo(str(tmp_path / "m"))


@pytest.mark.parametrize("utilization,enough", [(0.80, True), (0.83, True), (0.85, False), (0.87, False)])
def test_field_utilisations_against_102_gib_free(tmp_path, utilization, enough):
    figures = um.verdict(um.read_meminfo(meminfo(tmp_path)), utilization)
    assert figures["enough"] is enough and figures["max_utilization"] == 0.83


def test_page_cache_is_not_free(tmp_path):
    figures = um.verdict(um.read_meminfo(meminfo(tmp_path, free_gib=40, cached_gib=62)), 0.80)
    assert not figures["enough"] and figures["available"] == 102 * GIB


def test_shortfall_names_node_figures_and_fix(tmp_path):
    figures = um.verdict(um.read_meminfo(meminfo(tmp_path, free_gib=72.0)), 0.8)
    msg = um.shortfall_message("spark-2", figures, "page cache dropped, 3 model files evicted")
    assert msg.startswith("spark-2: 72.0 GiB of 121.7 GiB unified memory is free right before the engine starts "
                          "(page cache dropped, 3 model files evicted; 0.0 GiB still page cache), but "
                          "--gpu-memory-utilization 0.8 needs 97.4 GiB")
    assert msg.endswith("set vllm_serve_gpu_memory_utilization to at most 0.59.")


def test_evict_walks_regular_files_and_skips_links(tmp_path):
    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "a.safetensors").write_bytes(b"x" * 5000)
    (tmp_path / "m" / "sub" / "b.json").write_bytes(b"{}")
    os.symlink(tmp_path / "m" / "a.safetensors", tmp_path / "m" / "link")
    assert um.evict([str(tmp_path / "m"), str(tmp_path / "missing")]) == {"files": 2, "bytes": 5002}


def test_drop_caches_reports_why_not(tmp_path):
    assert um.drop_caches(str(tmp_path / "no" / "such")).startswith(str(tmp_path / "no" / "such") + ": ")
    target = tmp_path / "drop_caches"
    target.write_text("")
    assert um.drop_caches(str(target)) is None and target.read_text() == "3\n"
