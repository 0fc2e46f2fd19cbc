"""Model resolution: registry layout, inspection in a subprocess, vLLM's final messages."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys

from enginekit import flavour_env, run_vllm

FAILED = ("Model architectures ['Qwen3_5MoeForConditionalGeneration'] failed to be inspected. "
          "Please check the logs for more details.")


def _registry_text(tree):
    return (tree / "vllm/model_executor/models/registry.py").read_text()


def test_registry_is_laid_out_like_vllms(trees):
    text = _registry_text(trees["0.17"])
    tree = ast.parse(text)
    dicts = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name) and isinstance(node.value, ast.Dict)}
    assert {"_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS", "_SPECULATIVE_DECODING_MODELS",
            "_EMBEDDING_MODELS", "_VLLM_MODELS"} <= dicts
    assert '    "Qwen3MoeForCausalLM": ("qwen3_moe", "Qwen3MoeForCausalLM"),\n' in text
    assert ('    "Qwen3_5MoeForConditionalGeneration": (\n        "qwen3_5",\n'
            '        "Qwen3_5MoeForConditionalGeneration",\n    ),\n') in text
    assert "    **{\n        # Multiple models share the same architecture" in text
    assert '    "Qwen3_5MTP": ("qwen3_5_mtp", "Qwen3_5MTP"),\n' in text
    legacy = _registry_text(trees["0.14"])
    assert "Qwen3_5" not in legacy
    assert '    "Qwen3MoeForCausalLM": ("qwen3_moe", "Qwen3MoeForCausalLM"),\n' in legacy


def test_flavour_files(trees):
    new, old = trees["0.17"] / "vllm", trees["0.14"] / "vllm"
    for rel in ("model_executor/models/qwen3_5.py", "model_executor/models/qwen3_5_mtp.py",
                "transformers_utils/configs/qwen3_5.py", "transformers_utils/configs/qwen3_5_moe.py"):
        assert (new / rel).is_file()
        assert not (old / rel).exists()
    configs = (new / "transformers_utils/configs/__init__.py").read_text()
    assert '"Qwen3_5MoeConfig": "vllm.transformers_utils.configs.qwen3_5_moe",' in configs
    assert '    "Qwen3_5MoeConfig",\n' in configs
    assert "Qwen3_5" not in (old / "transformers_utils/configs/__init__.py").read_text()


def _inspect(tree, archs):
    code = ("import json,sys\nfrom vllm.model_executor.models.registry import ModelRegistry\n"
            f"info, arch = ModelRegistry.inspect_model_cls({archs!r})\n"
            "print(json.dumps([arch, info.supports_multimodal, info.is_hybrid]))")
    return subprocess.run([sys.executable, "-c", code], env=flavour_env(tree), capture_output=True, text=True,
                          timeout=60)


def test_every_registered_architecture_inspects(trees):
    for flavour, tree in trees.items():
        code = ("import json\nfrom vllm.model_executor.models.registry import ModelRegistry, _try_inspect_model_cls\n"
                "bad = [a for a, m in ModelRegistry.models.items() if _try_inspect_model_cls(a, m) is None]\n"
                "print(json.dumps(bad))")
        proc = subprocess.run([sys.executable, "-c", code], env=flavour_env(tree), capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == [], flavour


def test_qwen35_resolves_on_017(trees):
    proc = _inspect(trees["0.17"], ["Qwen3_5MoeForConditionalGeneration"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["Qwen3_5MoeForConditionalGeneration", True, True]


def test_unregistered_architecture_is_not_supported(trees, models):
    proc = run_vllm(trees["0.14"], "serve", str(models["qwen35"]))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()
    assert "1 validation error for ModelConfig" in proc.stderr
    msg = ("Value error, Model architectures ['Qwen3_5MoeForConditionalGeneration'] are not supported for now. "
           "Supported architectures: dict_keys(['AfmoeForCausalLM', ")
    assert any(msg in line for line in last)
    assert "'Qwen3MoeForCausalLM'" in proc.stderr


def test_missing_model_dir(trees, tmp_path):
    proc = run_vllm(trees["0.17"], "serve", str(tmp_path / "nope"))
    assert proc.returncode == 1
    assert f"Invalid repository ID or local directory specified: '{tmp_path / 'nope'}'." in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = run_vllm(trees["0.17"], "serve", str(tmp_path / "empty"))
    assert "ensure the presence of a 'config.json'" in proc.stderr


def test_hf_cache_layout_resolves(trees, tmp_path):
    import make_models

    make_models.write_model(tmp_path, "qwen3moe", shard_kb=8, hf_cache=True)
    proc = subprocess.run(
        [sys.executable, "-c", "from vllm.transformers_utils.config import resolve_model_dir as r;"
         f"print(r('Qwen/Qwen3-30B-A3B', None, {str(tmp_path)!r}))"],
        env=flavour_env(trees["0.14"]), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(rf"{tmp_path}/models--Qwen--Qwen3-30B-A3B/snapshots/[0-9a-f]{{40}}", proc.stdout.strip())


def _graft(trees, dest):
    """The field's hybrid: 0.17's Qwen3.5 files copied into 0.14, registry + configs patched."""
    shutil.copytree(trees["0.14"], dest)
    new, old = trees["0.17"] / "vllm", dest / "vllm"
    for rel in ("model_executor/models/qwen3_5.py", "model_executor/models/qwen3_5_mtp.py",
                "transformers_utils/configs/qwen3_5.py", "transformers_utils/configs/qwen3_5_moe.py",
                "transformers_utils/configs/__init__.py"):
        shutil.copyfile(new / rel, old / rel)
    registry = old / "model_executor/models/registry.py"
    anchor = '    "Qwen3MoeForCausalLM": ("qwen3_moe", "Qwen3MoeForCausalLM"),\n'
    text = registry.read_text()
    assert anchor in text
    registry.write_text(text.replace(anchor, anchor
                                     + '    "Qwen3_5ForConditionalGeneration": ("qwen3_5", "Qwen3_5ForConditionalGeneration"),\n'
                                     + '    "Qwen3_5MoeForConditionalGeneration": ("qwen3_5", '
                                       '"Qwen3_5MoeForConditionalGeneration"),\n'))
    return dest


def test_graft_fails_inspection_with_the_real_import_error(trees, models, tmp_path):
    graft = _graft(trees, tmp_path / "graft")
    proc = run_vllm(graft, "serve", str(models["qwen35"]), "--port", "18999")
    assert proc.returncode == 1
    log = proc.stdout + proc.stderr
    assert "Error in inspecting model architecture 'Qwen3_5MoeForConditionalGeneration'" in proc.stdout
    assert ("ImportError: cannot import name 'MambaStateCopyFunc' from "
            "'vllm.model_executor.layers.mamba.mamba_utils'") in proc.stdout
    # the real exception comes before the final summary, which is the last error of the run
    assert log.index("ImportError: cannot import name") < log.index(FAILED)
    tail = proc.stderr.strip().splitlines()
    assert tail[-3].endswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig")
    assert f"Value error, {FAILED} [type=value_error" in tail[-2]
    # the same files import fine in the 0.17 tree they came from
    assert _inspect(trees["0.17"], ["Qwen3_5MoeForConditionalGeneration"]).returncode == 0
