"""Unified memory on the lab: each node is a GB10 with 121.7 GiB, of which at most 102 GiB is free, and a page
cache that is real (the stand-in weights resident in this machine's page cache, scaled to the 119 GB checkpoint).

Right after the weights were written or read, the page cache holds them and little is free: the collection as it
was (commit 1b5e624) started the engine into it. Now the deploy makes room right before the engine starts (drops the
page cache where permitted; evicts the weights with posix_fadvise, which the lab's nodes permit) and checks free
memory at that moment; a node short of memory for a reason the collection cannot fix stops before the engine
starts, naming the node and the figures. The engine's own guard and out-of-memory (vLLM's message) are in
lab/engine/tests/test_memory.py.
"""

from __future__ import annotations

import json

import pytest
import yaml

from labkit import AS_IT_WAS, BIN, INVENTORY, LAB, REPO, ansible_env, collection_as_it_was, node, node_exec, run

pytestmark = pytest.mark.lab_minutes(5)  # labkit: the order files are handed out

SERVE = str(REPO / "tests" / "lab" / "playbooks" / "serve.yml")
COMMON = ["-e", "vllm_serve_backend=mp", "-e", "dgxspark_image=lab/vllm-qwen35:0.17"]
GIB = 1 << 30


def serve(*args, **env):
    return run([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), SERVE, *COMMON, *args], check=False,
               env=ansible_env(**env), timeout=900)


def results(proc, name):
    """Per-host results of the tasks whose name ends with NAME, from the JSON callback's output."""
    out = json.loads(proc.stdout)
    return [task["hosts"] for play in out["plays"] for task in play["tasks"] if task["task"]["name"].endswith(name)]


def flat(proc):
    return " ".join((proc.stdout + proc.stderr).split())


def meminfo(i):
    """The node's own /proc/meminfo (what `free`, node_facts and the collection read), in bytes."""
    fields = {}
    for line in node_exec(node(i), "cat", "/proc/meminfo").stdout.splitlines():
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) * 1024
    return fields


def engines(i):
    return node_exec(node(i), "docker", "ps", "-a", "--format", "{{.Names}}").stdout.split()


@pytest.fixture(scope="module")
def memory_lab(lab):
    run([*LAB, "images", "vllm-qwen35-0.17"])
    run([*LAB, "load", "lab/vllm-qwen35:0.17"])
    run([*LAB, "models"])
    serve("-e", "vllm_serve_state=absent")
    yield lab
    for i in (1, 2):
        node_exec(node(i), "rm", "-f", "/etc/dgxspark-lab/memory-held-gib")
    serve("-e", "vllm_serve_state=absent")


def test_node_memory_is_a_gb10s_and_reading_the_weights_fills_its_page_cache(memory_lab):
    run([*LAB, "fill-cache"])
    full = meminfo(1)
    assert round(full["MemTotal"] / GIB, 1) == 121.7
    assert full["Cached"] > 90 * GIB and full["MemFree"] < 15 * GIB, full  # the 119 GB checkpoint, cached
    assert full["MemAvailable"] >= 101 * GIB  # the kernel counts clean page cache as available
    free = node_exec(node(1), "free", "-g").stdout.split("\n")[1].split()
    assert free[1] == "121", free  # `free` on the node agrees


@pytest.mark.slow  # needs the page cache kept full, and make test's other lab drops it (drop_caches is the host's)
def test_engine_started_as_the_collection_was_into_a_full_page_cache_fails_in_vllm_words(memory_lab, tmp_path):
    """The collection as it was started the engine right after model_sync had written the weights, at
    gpu_memory_utilization 0.85, with nothing in its roles about the page cache: on a GB10 whose page cache holds
    the checkpoint, vLLM's start-up guard refuses that (the engine below is given the GPU, as point 1 now does)."""
    root, _env = collection_as_it_was(tmp_path)
    defaults = yaml.safe_load((root / "roles" / "vllm_serve" / "defaults" / "main.yml").read_text())
    utilisation = defaults["vllm_serve_gpu_memory_utilization"]
    assert utilisation == 0.85, AS_IT_WAS
    roles = " ".join(path.read_text() for path in (root / "roles").rglob("*.yml"))
    # (its preflight only told the user to drop the page cache by hand when disk or memory looked short)
    assert "unified_memory" not in roles and "fadvise" not in roles and "drop_caches:" not in roles
    serve("-e", "vllm_serve_state=absent")
    run([*LAB, "fill-cache"])
    proc = node_exec(node(1), "docker", "run", "--rm", "--gpus", "all", "--network", "host", "--ipc", "host",
                     "-v", "/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8:/models/m:ro", "--entrypoint", "vllm",
                     "lab/vllm-qwen35:0.17", "serve", "/models/m", "--port", "8013",
                     "--gpu-memory-utilization", str(utilisation), check=False)
    assert proc.returncode != 0
    text = flat(proc)
    assert "ValueError: Free memory on device cuda:0 (" in text and "on startup is less than desired GPU memory " \
        "utilization (0.85, 103.44 GiB)" in text, text[-3000:]


@pytest.mark.slow  # needs the page cache kept full, and make test's other lab drops it (drop_caches is the host's)
def test_deploy_after_the_weights_were_read_makes_room_then_serves(memory_lab):
    run([*LAB, "fill-cache"])
    assert meminfo(1)["MemFree"] < 15 * GIB and meminfo(2)["MemFree"] < 15 * GIB
    proc = serve(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    assert proc.returncode == 0, proc.stdout[-5000:]
    (room,) = results(proc, "Make room in unified memory (drop the page cache, evict the weights)")
    (check,) = results(proc, "Check free unified memory covers the engine (with the figures as they are after making room)")
    for i in (1, 2):
        made = room[node(i)]
        # drop_caches is not permitted in a lab node (read-only /proc/sys): evicting the weights made the room
        assert made["dropped"] is False and made["drop_caches_error"].endswith("Read-only file system"), made
        assert made["evicted"]["files"] > 0 and made["cached_before"] > 90 * GIB, made
        assert check[node(i)]["enough"] is True and check[node(i)]["free"] >= check[node(i)]["requested"], check
    for i in (1, 2):
        assert "dgxspark-vllm" in engines(i)


def test_memory_held_by_something_else_stops_the_pair_before_the_engine_starts(memory_lab):
    serve("-e", "vllm_serve_state=absent")
    node_exec(node(2), "sh", "-c", "mkdir -p /etc/dgxspark-lab && echo 30 > /etc/dgxspark-lab/memory-held-gib && "
                                   "/usr/local/sbin/lab-unified-memory --once")
    run([*LAB, "fill-cache"])
    proc = serve()
    assert proc.returncode != 0
    text = flat(proc)
    assert (f"{node(2)}: 72.0 GiB of 121.7 GiB unified memory is free right before the engine starts") in text, \
        text[-4000:]
    assert "--gpu-memory-utilization 0.8 needs 97.4 GiB" in text
    assert "set vllm_serve_gpu_memory_utilization to at most 0.59" in text
    assert "dgxspark-vllm" not in engines(2)  # stopped before the engine
