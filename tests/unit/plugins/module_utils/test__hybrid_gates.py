# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the hybrid_image gates' verdicts (the messages are those the role printed when this was Jinja)."""

from __future__ import annotations

import json

import jinja2
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.hybrid_image_gates import FilterModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import _hybrid_gates as g

CONFLICT = "vllm 0.14.1 has requirement transformers<5,>=4.56.0, but you have transformers 5.2.0."
OTHER = "torch 2.9.0 has requirement nvidia-nccl-cu12==2.27.5, but you have nvidia-nccl-cu12 2.28.9."
LAUNCHER = "0.2.0"
IMAGE = {"entrypoint": ["python3", "/opt/dgxspark/bin/dgxspark-launch"], "ray_present": True,
         "versions": {"ray": "2.54.1"}}
POLICY = {"launcher_version": LAUNCHER, "ray_install": "auto", "ray_added": "", "ray_version": "2.54.1",
          "min_ray_version": "2.54.0"}


def with_policy(**changes):
    """POLICY with CHANGES."""
    policy = dict(POLICY)
    policy.update(changes)
    return policy


def ran(rc, stdout="", stderr=""):
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "stdout_lines": stdout.splitlines()}


def inspected(results, rc=None, before="loading\n"):
    rc = (0 if all(r["ok"] for r in results) else 1) if rc is None else rc
    return ran(rc, before + "DGXSPARK_INSPECT " + json.dumps(results) + "\n")


QWEN_OK = {"architecture": "Qwen3_5ForConditionalGeneration", "module": "vllm.model_executor.models.qwen3_5",
           "class": "Qwen3_5ForConditionalGeneration", "ok": True, "error": "", "traceback": ""}
QWEN_BROKEN = dict(QWEN_OK, ok=False, traceback="Traceback ...\nImportError",
                   error="ImportError: cannot import name 'MambaStateCopyFunc' from "
                         "'vllm.model_executor.layers.mamba.mamba_utils'")


# Gate (a)

def test_pip_check_clean_passes():
    gate = g.pip_check_gate(ran(0, "No broken requirements found.\n"), [])
    assert gate["passed"] and gate["conflicts"] == [] and gate["requirements"] == [] and gate["gate"] == "a"


def test_pip_check_conflict_fails_naming_line_and_requirement():
    gate = g.pip_check_gate(ran(1, f"{CONFLICT}\n\n"), [])
    assert not gate["passed"]
    assert gate["conflicts"] == [CONFLICT] and gate["accepted"] == []
    assert gate["requirements"] == ["transformers<5,>=4.56.0"]
    assert gate["reason"] == (
        f"1 conflict(s) not accepted: {CONFLICT} (conflicting requirement(s): transformers<5,>=4.56.0); to ship it"
        " anyway, list the exact line in hybrid_image_accept_conflicts")


def test_source_image_with_its_own_pip_conflict_passes_the_overlay_gate():
    """Field: the images Sparks serve (NGC, source builds with +nv torch) rarely pass `pip check` themselves. Gate (a)
    judges what the build added: a conflict the source image already printed is not counted (fails at 13f6075, which
    had no baseline and refused every such image)."""
    gate = g.pip_check_gate(ran(1, f"{OTHER}\n"), [], baseline=ran(1, f"{OTHER}\n"))
    assert gate["passed"], gate["reason"]
    assert gate["inherited"] == [OTHER] and gate["accepted"] == [] and gate["requirements"] == []
    assert gate["reason"].endswith(f"; 1 the source image already had, not counted: {OTHER}")


def test_a_conflict_the_build_added_still_fails_beside_the_sources_own():
    gate = g.pip_check_gate(ran(1, f"{OTHER}\n{CONFLICT}\n"), [], baseline=ran(1, f"{OTHER}\n"))
    assert not gate["passed"]
    assert gate["inherited"] == [OTHER] and gate["requirements"] == ["transformers<5,>=4.56.0"]
    assert gate["reason"].startswith(f"1 conflict(s) not accepted: {CONFLICT} ")


def test_a_baseline_that_could_not_run_counts_nothing_as_the_sources_own():
    gate = g.pip_check_gate(ran(1, f"{OTHER}\n"), [], baseline=ran(125, "", "docker: no such image"))
    assert not gate["passed"] and gate["inherited"] == []
    assert gate["baseline_error"] == "pip check could not run in the source (exit 125): docker: no such image"


def test_a_line_the_build_changed_is_the_builds():
    """The same requirement with another installed version after the build is a new line: the build moved it."""
    before = "vllm 0.17.1 has requirement transformers<5,>=4.56.0, but you have transformers 4.55.0."
    gate = g.pip_check_gate(ran(1, f"{CONFLICT}\n"), [], baseline=ran(1, f"{before}\n"))
    assert not gate["passed"] and gate["inherited"] == []


def test_pip_check_accepted_conflicts_pass_and_are_compared_trimmed():
    gate = g.pip_check_gate(ran(1, f"  {CONFLICT}  \n{OTHER}\n"), [f" {CONFLICT}", OTHER + "  "])
    assert gate["passed"]
    assert gate["accepted"] == [CONFLICT, OTHER] and gate["requirements"] == []


def test_pip_check_one_accepted_one_not_names_only_the_other():
    gate = g.pip_check_gate(ran(1, f"{CONFLICT}\n{OTHER}\n{CONFLICT}\n"), [CONFLICT])
    assert not gate["passed"]
    assert gate["accepted"] == [CONFLICT]  # once, however often pip printed it
    assert gate["requirements"] == ["nvidia-nccl-cu12==2.27.5"]
    assert gate["reason"].startswith(f"1 conflict(s) not accepted: {OTHER} (conflicting requirement(s): "
                                     "nvidia-nccl-cu12==2.27.5);")


@pytest.mark.parametrize("result", [ran(1, "\n", "boom"), ran(127, "", "python3: not found"),
                                    ran(2, "x", "No module named pip")])
def test_pip_check_that_could_not_run_fails(result):
    gate = g.pip_check_gate(result, [CONFLICT])
    assert not gate["passed"]
    assert gate["reason"] == (f"pip check could not run (exit {result['rc']}): "
                              f"{(result['stderr'] + ' ' + result['stdout']).strip()}")


def test_pip_check_exit_0_passes_whatever_it_printed():
    assert g.pip_check_gate(ran(0, CONFLICT), [])["passed"]


def test_pip_check_output_is_cut_like_jinja_truncate():
    words = " ".join(["word"] * 400)
    reason = g.pip_check_gate(ran(3, "", words), [])["reason"]
    assert reason == "pip check could not run (exit 3): " + " ".join(["word"] * 159) + "..."


@pytest.mark.parametrize(("text", "length", "expected"), [
    ("short", 10, "short"),
    ("a" * 15, 10, "a" * 15),  # within the leeway of 5
    ("one two three four five six", 10, "one..."),
    ("x" * 30, 10, "x" * 7 + "..."),  # no space: cut inside the word
])
def test_truncate(text, length, expected):
    assert g.truncate(text, length) == expected
    # The Jinja filter the messages were cut with before is the reference.
    assert jinja2.Environment().from_string("{{ t | truncate(n) }}").render(t=text, n=length) == expected


# Gate (b)

def test_inspection_all_loaded_passes_without_tracebacks():
    gate = g.inspection_gate(inspected([QWEN_OK]))
    assert gate["passed"] and gate["gate"] == "b"
    assert gate["architectures"] == [{k: v for k, v in QWEN_OK.items() if k != "traceback"}]


def test_inspection_failure_names_architecture_module_class_and_error():
    registry = {"architecture": None, "module": "vllm.model_executor.models.registry", "class": None, "ok": False,
                "error": "ModuleNotFoundError: No module named 'vllm'", "traceback": "..."}
    gate = g.inspection_gate(inspected([QWEN_BROKEN, QWEN_OK, registry]))
    assert not gate["passed"]
    assert gate["reason"] == (
        "Qwen3_5ForConditionalGeneration (vllm.model_executor.models.qwen3_5.Qwen3_5ForConditionalGeneration): "
        "ImportError: cannot import name 'MambaStateCopyFunc' from 'vllm.model_executor.layers.mamba.mamba_utils'; "
        "the registry (vllm.model_executor.models.registry): ModuleNotFoundError: No module named 'vllm'"
        " - vLLM would stop with \"Model architectures [...] failed to be inspected\"")


def test_inspection_reads_the_last_marker_line():
    result = inspected([QWEN_OK])
    result["stdout_lines"].insert(0, "DGXSPARK_INSPECT " + json.dumps([QWEN_BROKEN]))
    assert g.inspection_gate(result)["passed"]


def test_inspection_nonzero_exit_fails_even_when_every_class_loaded():
    assert not g.inspection_gate(inspected([QWEN_OK], rc=1))["passed"]


def test_inspection_without_marker_did_not_run():
    gate = g.inspection_gate(ran(125, "", "docker: Error response from daemon: No such image"))
    assert not gate["passed"] and gate["architectures"] == []
    assert gate["reason"] == ("the inspection did not run (exit 125): docker: Error response from daemon:"
                              " No such image")


def test_inspection_marker_that_is_no_list_is_an_error():
    with pytest.raises(ValueError, match="JSON list of objects"):
        g.inspection_gate(ran(0, 'DGXSPARK_INSPECT {"ok": true}'))


# Gate (c)

def test_entrypoint_gate_passes_with_launcher_and_ray():
    gate = g.entrypoint_gate(ran(0, f"{LAUNCHER}\n"), IMAGE, **POLICY)
    assert gate == {"gate": "c", "passed": True, "output": LAUNCHER, "entrypoint": IMAGE["entrypoint"],
                    "ray": "2.54.1", "reason": ""}


def test_entrypoint_gate_names_every_problem():
    image = {"entrypoint": ["/bin/bash"], "ray_present": True, "versions": {"ray": "2.40.0"}}
    gate = g.entrypoint_gate(ran(127, "", "exec: vllm: not found"), image, **POLICY)
    assert not gate["passed"]
    assert gate["reason"] == (
        '`docker run <image> version` exited 127 printing "exec: vllm: not found", not the launcher version 0.2.0; '
        'the ENTRYPOINT is ["/bin/bash"], not the launcher; the launcher needs Ray >= 2.54.0 but the image has 2.40.0')


def test_entrypoint_gate_wants_exactly_the_ray_the_build_added():
    policy = with_policy(ray_added="ray[default]==2.54.1")
    assert g.entrypoint_gate(ran(0, LAUNCHER), IMAGE, **policy)["passed"]
    image = dict(IMAGE, versions={"ray": "2.55.0"})
    gate = g.entrypoint_gate(ran(0, LAUNCHER), image, **policy)
    assert gate["reason"] == "the launcher needs Ray 2.54.1 but the image has 2.55.0"


def test_entrypoint_gate_without_ray():
    image = dict(IMAGE, ray_present=False, versions={})
    assert g.entrypoint_gate(ran(0, LAUNCHER), image, **POLICY)["reason"] == (
        "the launcher needs Ray >= 2.54.0 but the image has none")
    assert g.entrypoint_gate(ran(0, LAUNCHER), image, **with_policy(ray_install="never"))["passed"]


def test_entrypoint_gate_compares_ray_versions_numerically():
    image = dict(IMAGE, versions={"ray": "2.100.0"})
    assert g.entrypoint_gate(ran(0, LAUNCHER), image, **POLICY)["passed"]


# The filter

def test_filter_returns_the_three_gates_in_order():
    f = FilterModule().filters()["hybrid_image_gates"]
    gates = f(ran(1, CONFLICT), inspection=inspected([QWEN_OK]), entrypoint=ran(0, LAUNCHER), image=IMAGE,
              accept_conflicts=[CONFLICT], **POLICY)
    assert list(gates) == ["pip_check", "inspection", "entrypoint"]
    assert [gate["passed"] for gate in gates.values()] == [True, True, True]
    inherited = f(ran(1, OTHER), inspection=inspected([QWEN_OK]), entrypoint=ran(0, LAUNCHER), image=IMAGE,
                  baseline=ran(1, OTHER), **POLICY)
    assert inherited["pip_check"]["passed"] and inherited["pip_check"]["inherited"] == [OTHER]


def test_filter_bad_input_is_a_filter_error():
    f = FilterModule().filters()["hybrid_image_gates"]
    with pytest.raises(AnsibleFilterError, match="inspection must be a registered result"):
        f(ran(0), inspection="x", entrypoint=ran(0), image=IMAGE, **POLICY)
    with pytest.raises(AnsibleFilterError, match="ray_install must be auto, always or never"):
        f(ran(0), inspection=ran(0), entrypoint=ran(0), image=IMAGE, **with_policy(ray_install="sometimes"))
    with pytest.raises(AnsibleFilterError, match="JSON list"):
        f(ran(0), inspection=ran(0, "DGXSPARK_INSPECT {"), entrypoint=ran(0), image=IMAGE, **POLICY)
