# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Root-cause diagnosis of serving logs. The *.log fixtures were captured from the lab engine (lab/engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _diagnosis as d

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_logs"
FAILED = ("Model architectures ['Qwen3_5MoeForConditionalGeneration'] failed to be inspected. "
          "Please check the logs for more details.")


def log(name):
    return (LOGS / name).read_text()


def test_graft_is_inspection_failure_with_the_real_import_error_as_root():
    text = log("inspection_failed_graft.log")
    result = d.classify(text, exited=True)
    assert result["category"] == d.ARCHITECTURE_INSPECTION_FAILED
    assert result["root_exception"].startswith("ImportError: cannot import name 'MambaStateCopyFunc' from "
                                               "'vllm.model_executor.layers.mamba.mamba_utils'")
    assert FAILED in result["final_line"]
    assert result["summary"].startswith("architecture failed inspection: ImportError: cannot import name 'MambaStateCopyFunc'")
    assert FAILED in result["summary"]
    assert "\n" not in result["summary"]
    # The excerpt carries the root traceback (from the inspection subprocess), not the pydantic wrapper only.
    assert "qwen3_5.py" in result["excerpt"] and "ImportError: cannot import name 'MambaStateCopyFunc'" in result["excerpt"]


def test_root_exception_is_found_although_a_tail_would_miss_it():
    text = log("inspection_failed_graft.log")
    tail = "\n".join(text.splitlines()[-20:])
    assert "MambaStateCopyFunc" not in tail  # what `tail -20` showed in the field
    assert "MambaStateCopyFunc" in d.classify(text, exited=True)["summary"]


def test_unsupported_architecture():
    result = d.classify(log("architecture_not_supported.log"), exited=True)
    assert result["category"] == d.ARCHITECTURE_NOT_SUPPORTED
    assert "Model architectures ['Qwen3_5MoeForConditionalGeneration'] are not supported for now" in result["summary"]


def test_transformers_too_old_for_the_model_type_is_unsupported_architecture():
    text = ("(APIServer pid=5) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
            "(APIServer pid=5)   Value error, The checkpoint you are trying to load has model type `qwen3_5_moe` but Transformers "
            "does not recognize this architecture. This could be because of an issue with the checkpoint, or because your "
            "version of Transformers is out of date. [type=value_error, input_value=ArgsKwargs(()), input_type=ArgsKwargs]\n")
    result = d.classify(text, exited=True)
    assert result["category"] == d.ARCHITECTURE_NOT_SUPPORTED
    assert result["summary"].startswith("architecture not supported by this image: The checkpoint you are trying to load "
                                        "has model type `qwen3_5_moe` but Transformers does not recognize this architecture.")


def test_missing_model_files():
    result = d.classify(log("model_missing.log"), exited=True)
    assert result["category"] == d.MODEL_FILES_MISSING
    assert "Invalid repository ID or local directory specified" in result["summary"]


def test_inspection_failure_caused_by_a_third_party_import_is_a_dependency_conflict():
    text = ("(APIServer pid=7) ERROR 11-29 08:00:01 [registry.py:1] Error in inspecting model architecture 'Qwen3_5X'\n"
            "Traceback (most recent call last):\n"
            '  File "/opt/venv/lib/python3.12/site-packages/vllm/model_executor/models/qwen3_5.py", line 12, in <module>\n'
            "    from transformers.models.qwen3_5 import Qwen3_5Config\n"
            "ModuleNotFoundError: No module named 'transformers.models.qwen3_5'\n"
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
            f"  Value error, {FAILED} [type=value_error]\n")
    result = d.classify(text, exited=True)
    assert result["category"] == d.DEPENDENCY_CONFLICT
    assert result["summary"].startswith("dependency conflict: ModuleNotFoundError: No module named 'transformers.models.qwen3_5'")


@pytest.mark.parametrize("text, category, needle", [
    ("(RayWorkerWrapper pid=88, ip=192.168.100.12) ERROR 11-29 08:00:00 [worker.py:9] x\n"
     "Traceback (most recent call last):\n  File \"w.py\", line 3, in load\n    alloc()\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 119.70 GiB\n"
     "(APIServer pid=7) ERROR 11-29 08:00:02 [core.py:1] EngineCore failed to start.\n",
     d.OUT_OF_MEMORY, "torch.OutOfMemoryError: CUDA out of memory"),
    ("(EngineCore_DP0 pid=9) ERROR 11-29 08:00:00 [core.py:1] EngineCore failed to start.\n"
     "Traceback (most recent call last):\n  File \"w.py\", line 3, in init_device\n    request_memory()\n"
     "ValueError: Free memory on device cuda:0 (102.0/121.7 GiB) on startup is less than desired GPU memory "
     "utilization (0.85, 103.44 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n"
     "(APIServer pid=7) RuntimeError: Engine core initialization failed. See root cause above.\n",
     d.OUT_OF_MEMORY, "ValueError: Free memory on device cuda:0 (102.0/121.7 GiB) on startup is less than desired"),
    ("INFO 11-29 08:00:00 [api_server.py:1] Starting vLLM API server 0 on http://192.168.100.11:8000\n"
     "Traceback (most recent call last):\n  File \"s.py\", line 1, in bind\n    sock.bind(addr)\n"
     "OSError: [Errno 98] Address already in use\n",
     d.ADDRESS_IN_USE, "OSError: [Errno 98] Address already in use"),
    ("INFO 11-29 08:00:00 [ray_utils.py:129] No current placement group found. Creating a new placement group.\n"
     "INFO 11-29 08:00:10 [ray_utils.py:91] Waiting for creating a placement group of specs for 10 seconds. "
     "specs=[{'GPU': 1.0, 'node:192.168.100.11': 0.001}, {'GPU': 1.0}]. Check `ray status` and `ray list nodes` "
     "to see if you have enough resources, and make sure the IP addresses used by ray cluster are the same as "
     "VLLM_HOST_IP environment variable specified in each node if you are running on a multi-node.\n",
     d.PLACEMENT_GROUP_UNAVAILABLE, "Waiting for creating a placement group of specs for 10 seconds"),
])
def test_known_failures(text, category, needle):
    result = d.classify(text, exited=False, timed_out=True)
    assert result["category"] == category
    assert needle in result["summary"]


HANG = ("(APIServer pid=7) INFO 11-29 08:00:00 [ray_utils.py:129] No current placement group found. Creating a new "
        "placement group.\n"
        "(APIServer pid=7) INFO 11-29 08:00:01 [ray_executor.py:48] workers: ['rank=0 ip=192.168.100.11 node=1f2e gpus=1', "
        "'rank=1 ip=192.168.100.12 node=9a8b gpus=1']\n"
        "(APIServer pid=7) INFO 11-29 08:00:01 [ray_executor.py:54] Copying the following environment variables to "
        "workers: ['VLLM_HOST_IP']\n")


def test_silent_rendezvous_is_a_collective_init_hang_only_after_the_deadline():
    assert d.rendezvous_state(HANG) == "started"
    early = d.classify(HANG, seconds_without_progress=20, hang_after=45, timed_out=False)
    assert early["category"] == d.TIMEOUT
    late = d.classify(HANG, seconds_without_progress=50, hang_after=45, timed_out=True)
    assert late["category"] == d.COLLECTIVE_INIT_HANG
    assert late["summary"] == ("collective (NCCL) init hang: no log progress for 50 s after the ranks started their "
                               "collective initialisation (NCCL/gloo rendezvous)")


def test_completed_rendezvous_is_not_a_hang():
    text = HANG + "(APIServer pid=7) INFO 11-29 08:00:03 [gpu_worker.py:47] Loading weights took 2.01 seconds\n"
    assert d.rendezvous_state(text) == "done"
    assert d.classify(text, seconds_without_progress=300, hang_after=45, timed_out=True)["category"] == d.TIMEOUT


def test_api_key_rejected_wins_when_the_server_answers_401():
    result = d.classify("INFO ... Application startup complete.\n", http_status=401)
    assert result["category"] == d.API_KEY_REJECTED
    assert result["summary"] == "API key rejected: HTTP 401 from the server for the probe's API key"


def test_engine_that_exits_without_a_known_message():
    text = "INFO 11-29 08:00:00 [x.py:1] starting\nTraceback (most recent call last):\n  File \"x\", line 1\nRuntimeError: boom\n"
    result = d.classify(text, exited=True)
    assert result["category"] == d.ENGINE_EXITED
    assert result["summary"] == "engine exited: RuntimeError: boom"
    empty = d.classify("", exited=True)
    assert empty["summary"] == "engine exited: the engine exited without an error line"


def test_chained_tracebacks_keep_the_first_as_root():
    text = ("Traceback (most recent call last):\n  File \"a\", line 1\nKeyError: 'x'\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            "Traceback (most recent call last):\n  File \"b\", line 2\nValueError: wrapped\n")
    assert [tb["exception"]["type"] for tb in d.tracebacks(text)] == ["KeyError", "ValueError"]
    assert d.root_exception(text)["line"] == "KeyError: 'x'"
