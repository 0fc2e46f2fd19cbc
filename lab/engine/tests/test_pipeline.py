"""Pipeline parallelism: TP=2 x PP=2 over four single-GPU "nodes" (vLLM's mp multi-node mode on loopback), as four
Sparks serve a model too big for a tensor-parallel group of two."""

from __future__ import annotations

import json

from enginekit import Proc, flavour_env, free_port, http, vllm_cmd, wait_ready


def test_tp2_pp2_over_four_nodes_answers_a_completion(trees, models, tmp_path, procs):
    port, master = free_port(), free_port()
    common = ["serve", str(models["qwen35"]), "-tp", "2", "-pp", "2", "--nnodes", "4", "--master-addr", "127.0.0.1",
              "--master-port", str(master), "--served-model-name", "m"]
    env = flavour_env(trees["0.17"], NCCL_SOCKET_IFNAME="lo")
    for rank in (1, 2, 3):
        procs.append(Proc(vllm_cmd(*common, "--node-rank", str(rank), "--headless"), env, tmp_path / f"rank{rank}.log"))
    head = Proc(vllm_cmd(*common, "--node-rank", "0", "--port", str(port)), env, tmp_path / "rank0.log")
    procs.append(head)
    wait_ready(f"http://127.0.0.1:{port}", head, deadline_s=120)
    status, body = http("POST", f"http://127.0.0.1:{port}/v1/completions", {"model": "m", "prompt": "hi", "max_tokens": 4})
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 4
    assert "tensor_parallel_size=2, pipeline_parallel_size=2" in head.output()
    # every rank took part: each loaded its share of the weights
    for rank in (1, 2, 3):
        assert "Loading weights took" in (tmp_path / f"rank{rank}.log").read_text()
