"""``vllm`` CLI: version, flag spellings, rejection of unknown flags, early validation."""

from __future__ import annotations

import pytest
from enginekit import run_vllm


@pytest.mark.parametrize("flavour,version", [("0.14", "0.14.1"), ("0.17", "0.17.1")])
def test_version(trees, flavour, version):
    for flag in ("--version", "-v"):
        proc = run_vllm(trees[flavour], flag)
        assert proc.returncode == 0
        assert proc.stdout.strip() == version


def test_unknown_flag_is_rejected_like_argparse(trees, models):
    proc = run_vllm(trees["0.14"], "serve", str(models["qwen3moe"]), "--tensor-parallel", "2", "--bogus-flag")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == "vllm: error: unrecognized arguments: --bogus-flag"
    assert proc.stderr.startswith("usage: vllm [-h] [-v]")


def test_bad_choice_is_rejected(trees, models):
    proc = run_vllm(trees["0.14"], "serve", str(models["qwen3moe"]), "--kv-cache-dtype", "int3")
    assert proc.returncode == 2
    assert "argument --kv-cache-dtype: invalid choice: 'int3'" in proc.stderr


def test_auto_tool_choice_needs_parser(trees, models):
    proc = run_vllm(trees["0.17"], "serve", str(models["qwen35"]), "--enable-auto-tool-choice")
    assert proc.returncode == 1
    assert "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser" in proc.stderr


def test_invalid_reasoning_parser(trees, models):
    proc = run_vllm(trees["0.17"], "serve", str(models["qwen35"]), "--reasoning-parser", "qwen9")
    assert proc.returncode == 1
    assert "KeyError: 'invalid reasoning parser: qwen9 (chose from { deepseek_r1," in proc.stderr


def test_invalid_executor_backend_is_a_validation_error(trees, models):
    proc = run_vllm(trees["0.14"], "serve", str(models["qwen3moe"]), "--distributed-executor-backend", "mpi",
                    "-tp", "2")
    assert proc.returncode == 1
    assert "1 validation error for ParallelConfig" in proc.stderr
    assert "distributed_executor_backend" in proc.stderr


def test_tp2_on_one_gpu_node_without_backend(trees, models):
    proc = run_vllm(trees["0.14"], "serve", str(models["qwen3moe"]), "-tp", "2")
    assert proc.returncode == 1
    assert ("World size (2) is larger than the number of available GPUs (1) in this node. If this is "
            "intentional and you are using:\n") in proc.stderr
    assert "- ray, set '--distributed-executor-backend ray'." in proc.stderr


def test_nnodes_requires_mp(trees, models):
    proc = run_vllm(trees["0.14"], "serve", str(models["qwen3moe"]), "-tp", "2", "--nnodes", "2",
                    "--distributed-executor-backend", "ray")
    assert proc.returncode == 1
    assert "nnodes > 1 can only be set when distributed executor backend is mp, uni or external_launcher." \
        in proc.stderr


def test_parser_spellings_and_types(trees, monkeypatch):
    """Parse in-process (0.17 tree): aliases, underscores, JSON, human-readable ints, booleans."""
    import sys

    monkeypatch.syspath_prepend(str(trees["0.17"]))
    for mod in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, mod)
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    sub = parser.add_subparsers(dest="subparser")
    make_arg_parser(sub.add_parser("serve"))
    args = parser.parse_args([
        "serve", "/m", "-tp", "2", "-pp", "1", "--distributed_executor_backend", "ray", "--max-model-len", "32k",
        "--gpu-memory-utilization", "0.85", "--speculative-config", '{"method": "qwen3_5_mtp", '
        '"num_speculative_tokens": 1}', "--kv-cache-dtype", "fp8", "--enforce-eager", "--trust-remote-code",
        "--api-key", "k1", "k2", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
        "--download-dir", "/cache", "--served-model-name", "a", "b", "--host", "10.0.0.1", "--port", "8001",
        "--reasoning-parser", "qwen3", "-n", "2", "-r", "1", "--master-addr", "10.0.0.2", "--master-port",
        "29600", "--headless", "--no-enable-prefix-caching"])
    assert args.model_tag == "/m"
    assert args.tensor_parallel_size == 2 and args.pipeline_parallel_size == 1
    assert args.distributed_executor_backend == "ray"
    assert args.max_model_len == 32000
    assert args.gpu_memory_utilization == 0.85
    assert args.speculative_config == {"method": "qwen3_5_mtp", "num_speculative_tokens": 1}
    assert args.kv_cache_dtype == "fp8" and args.enforce_eager is True and args.trust_remote_code is True
    assert args.api_key == ["k1", "k2"] and args.served_model_name == ["a", "b"]
    assert args.enable_auto_tool_choice is True and args.tool_call_parser == "qwen3_coder"
    assert (args.nnodes, args.node_rank, args.master_addr, args.master_port) == (2, 1, "10.0.0.2", 29600)
    assert args.headless is True and args.enable_prefix_caching is False
    assert (args.host, args.port, args.download_dir, args.reasoning_parser) == ("10.0.0.1", 8001, "/cache",
                                                                                 "qwen3")
    defaults = parser.parse_args(["serve", "/m"])
    assert defaults.max_model_len is None and defaults.tensor_parallel_size == 1
    assert defaults.master_port == 29501 and defaults.master_addr == "127.0.0.1"
    assert defaults.distributed_executor_backend is None and defaults.api_key is None
    assert parser.parse_args(["serve", "/m", "--max-model-len", "1K"]).max_model_len == 1024
