# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The diagnosis on logs shaped like real vLLM's (synthetic lines written here, no vLLM text copied).

Real vLLM prefixes every line of a child process with ``(Name pid=N) `` wrapped in ANSI colour codes
(whatever stdout is), ends progress and engine-core lines with CR, and prints a failed model
inspection's subprocess traceback line by line behind ``ERROR <date> [registry.py:NNN] ``. The
lab test tests/lab/test_real_vllm.py checks the same on logs real vLLM writes at test time.
"""

from __future__ import annotations

from ansible_collections.dgxspark.vllm.plugins.module_utils import _diagnosis as d

CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"


def prefixed(name, pid, level, where, lines, colour=True, cr=False):
    """LINES as a vLLM child process logs them."""
    head = f"{CYAN}({name} pid={pid}){RESET} " if colour else f"({name} pid={pid}) "
    end = "\r\n" if cr else "\n"
    return "".join(f"{head}{level} 12-01 10:00:00 [{where}] {line}{end}" for line in lines)


INSPECTION = [
    "Error in inspecting model architecture 'LabToyForCausalLM'",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/model_executor/models/registry.py", line 900, in _run_in_subprocess',
    "    returned.check_returncode()",
    "subprocess.CalledProcessError: Command '['/venv/bin/python3', '-m', 'vllm.model_executor.models.registry']' "
    "returned non-zero exit status 1.",
    "",
    "The above exception was the direct cause of the following exception:",
    "",
    "Traceback (most recent call last):",
    '  File "/venv/lib/python3.11/site-packages/vllm/model_executor/models/registry.py", line 500, in _try_inspect',
    "    return model.inspect_model_cls()",
    "RuntimeError: Error raised in subprocess:",
    "Traceback (most recent call last):",
    '  File "<frozen runpy>", line 198, in _run_module_as_main',
    '  File "/venv/lib/python3.11/site-packages/vllm/model_executor/models/lab_toy.py", line 12, in <module>',
    "    from vllm.model_executor.layers.lab_helpers import ToyHelper",
    "ImportError: cannot import name 'ToyHelper' from 'vllm.model_executor.layers.lab_helpers' "
    "(/venv/lib/python3.11/site-packages/vllm/model_executor/layers/lab_helpers.py)",
]
FINAL = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
         "  Value error, Model architectures ['LabToyForCausalLM'] failed to be inspected. "
         "Please check the logs for more details. [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n")


def inspection_log(colour=True, cr=True):
    return (prefixed("APIServer", 41, "INFO", "utils.py:250", ["non-default args: {'model': '/models/toy'}"], colour, cr)
            + "Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]\r"
            + "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 9.0it/s]\r\n"
            + prefixed("APIServer", 41, "ERROR", "registry.py:512", INSPECTION, colour, cr)
            + prefixed("APIServer", 41, "INFO", "utils.py:260", ["shutting down"], colour, cr)
            + "Traceback (most recent call last):\n  File \"/venv/bin/vllm\", line 8, in <module>\n    sys.exit(main())\n"
            + FINAL)


def test_plain_drops_colour_codes_and_carriage_returns():
    text = f"{CYAN}(EngineCore_DP0 pid=7){RESET} INFO 12-01 10:00:00 [core.py:1] up\r\nbar 10%\rbar 100%\r\n"
    assert d.plain(text) == "(EngineCore_DP0 pid=7) INFO 12-01 10:00:00 [core.py:1] up\nbar 10%\nbar 100%\n"


def test_inspection_root_is_found_behind_coloured_error_prefixes_and_cr_line_ends():
    result = d.classify(inspection_log(), exited=True)
    assert result["category"] == d.ARCHITECTURE_INSPECTION_FAILED
    assert result["root_exception"].startswith("ImportError: cannot import name 'ToyHelper' from "
                                               "'vllm.model_executor.layers.lab_helpers'")
    assert result["summary"].startswith("architecture failed inspection: ImportError: cannot import name 'ToyHelper'")
    assert "\x1b" not in result["summary"] + result["excerpt"] and "\r" not in result["summary"] + result["excerpt"]
    assert "lab_toy.py" in result["excerpt"]


def test_colour_does_not_change_the_verdict():
    coloured = d.classify(inspection_log(colour=True, cr=True), exited=True)
    plain = d.classify(inspection_log(colour=False, cr=False), exited=True)
    assert coloured == plain


def test_engine_core_failure_with_cr_line_ends_names_its_root():
    lines = ["EngineCore failed to start.", "Traceback (most recent call last):",
             '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 10, in run_engine_core',
             "    engine = Core()",
             "RuntimeError: Unsupported lab toy configuration: head size 16"]
    text = prefixed("EngineCore_DP0", 90, "ERROR", "core.py:1000", lines, cr=True)
    text += "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    result = d.classify(text, exited=True)
    assert result["root_exception"] == "RuntimeError: Unsupported lab toy configuration: head size 16"
    assert result["category"] == d.ENGINE_EXITED
    assert "head size 16" in result["summary"]


def test_rendezvous_lines_count_when_coloured():
    line = "world_size=2 rank=1 local_rank=0 distributed_init_method=tcp://10.0.0.1:29501"
    text = prefixed("Worker_TP1", 20, "INFO", "parallel_state.py:1", [line])
    assert d.rendezvous_state(text) == "started"


def test_a_config_refusal_wrapped_by_pydantic_names_vllms_own_words():
    text = (prefixed("APIServer", 7, "INFO", "utils.py:286", ["non-default args: {'max_model_len': 999999}"])
            + "Traceback (most recent call last):\n  File \"/venv/bin/vllm\", line 8, in <module>\n    sys.exit(main())\n"
            + "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
            + "  Value error, Lab toy limit: max_model_len (999999) exceeds what the toy model allows (64). "
              "[type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]\n"
            + "    For further information visit https://errors.example/value_error\n")
    result = d.classify(text, exited=True)
    assert result["category"] == d.ENGINE_EXITED
    assert result["summary"] == ("engine exited: pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                                 "ModelConfig: Lab toy limit: max_model_len (999999) exceeds what the toy model allows (64).")
