# SPDX-License-Identifier: Apache-2.0
"""
Whenever you add an architecture to this page, please also update
`tests/models/registry.py` with example HuggingFace models for it.

(dgxspark.vllm lab engine: the architecture tables below are laid out the way
vLLM lays out its own -- module-level dicts of ``"Arch": ("module", "Class")``
entries -- so registry patching can be exercised on a realistic file.)
"""

import importlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from vllm.logger import init_logger

logger = init_logger(__name__)

# @@MODEL_DICTS@@

_VLLM_MODELS = {
    **_TEXT_GENERATION_MODELS,
    **_EMBEDDING_MODELS,
    **_MULTIMODAL_MODELS,
    **_SPECULATIVE_DECODING_MODELS,
    **_TRANSFORMERS_BACKEND_MODELS,
}

# This variable is used as the args for subprocess.run(). The inspection of a
# model class runs in another process, as vLLM does it (to avoid initialising
# CUDA in the parent).
_SUBPROCESS_COMMAND = [sys.executable, "-m", "vllm.model_executor.models.registry"]

_PREVIOUSLY_SUPPORTED_MODELS = {
    "MotifForCausalLM": "0.10.2",
    "Phi3SmallForCausalLM": "0.9.2",
    "Phi4FlashForCausalLM": "0.10.2",
    "BartForConditionalGeneration": "0.10.2",
    "MllamaForConditionalGeneration": "0.10.2",
}


@dataclass(frozen=True)
class _ModelInfo:
    architecture: str
    is_text_generation_model: bool
    supports_multimodal: bool
    supports_pp: bool
    has_inner_state: bool
    is_hybrid: bool
    supports_mtp: bool

    @staticmethod
    def from_model_cls(model: type) -> "_ModelInfo":
        return _ModelInfo(
            architecture=model.__name__,
            is_text_generation_model=bool(getattr(model, "is_text_generation_model", True)),
            supports_multimodal=bool(getattr(model, "supports_multimodal", False)),
            supports_pp=bool(getattr(model, "supports_pp", False)),
            has_inner_state=bool(getattr(model, "has_inner_state", False)),
            is_hybrid=bool(getattr(model, "is_hybrid", False)),
            supports_mtp=bool(getattr(model, "supports_mtp", False)),
        )


@dataclass(frozen=True)
class _LazyRegisteredModel:
    """Represents a model that has not been imported in the main process."""

    module_name: str
    class_name: str

    def inspect_model_cls(self) -> _ModelInfo:
        # Performed in another process, as vLLM does.
        return _run_in_subprocess(self.module_name, self.class_name)

    def load_model_cls(self) -> type:
        mod = importlib.import_module(self.module_name)
        return getattr(mod, self.class_name)


@lru_cache(maxsize=128)
def _try_inspect_model_cls(model_arch: str, model: _LazyRegisteredModel) -> "_ModelInfo | None":
    try:
        return model.inspect_model_cls()
    except Exception:
        logger.exception("Error in inspecting model architecture '%s'", model_arch)
        return None


@dataclass
class _ModelRegistry:
    # Keyed by model_arch
    models: dict = field(default_factory=dict)

    def get_supported_archs(self):
        return self.models.keys()

    def register_model(self, model_arch: str, model_cls: str) -> None:
        if not isinstance(model_arch, str):
            raise TypeError(f"`model_arch` should be a string, not a {type(model_arch)}")
        split_str = model_cls.split(":")
        if len(split_str) != 2:
            raise ValueError("Expected a string in the format `<module>:<class>`")
        if model_arch in self.models:
            logger.warning("Model architecture %s is already registered, and will be "
                           "overwritten by the new model class %s.", model_arch, model_cls)
        self.models[model_arch] = _LazyRegisteredModel(*split_str)

    def _raise_for_unsupported(self, architectures: list):
        all_supported_archs = self.get_supported_archs()
        if any(arch in all_supported_archs for arch in architectures):
            raise ValueError(
                f"Model architectures {architectures} failed "
                "to be inspected. Please check the logs for more details.")
        for arch in architectures:
            if arch in _PREVIOUSLY_SUPPORTED_MODELS:
                previous_version = _PREVIOUSLY_SUPPORTED_MODELS[arch]
                raise ValueError(
                    f"Model architecture {arch} was supported in vLLM until "
                    f"v{previous_version}, and is not supported anymore. "
                    "Please use an older version of vLLM if you want to "
                    "use this model architecture.")
        raise ValueError(
            f"Model architectures {architectures} are not supported for now. "
            f"Supported architectures: {all_supported_archs}")

    def inspect_model_cls(self, architectures) -> tuple:
        if isinstance(architectures, str):
            architectures = [architectures]
        if not architectures:
            raise ValueError("No model architectures are specified")
        for arch in architectures:
            if arch not in self.models:
                continue
            model_info = _try_inspect_model_cls(arch, self.models[arch])
            if model_info is not None:
                return model_info, arch
        return self._raise_for_unsupported(architectures)

    def resolve_model_cls(self, architectures) -> tuple:
        info, arch = self.inspect_model_cls(architectures)
        return self.models[arch].load_model_cls(), arch


ModelRegistry = _ModelRegistry({
    model_arch: _LazyRegisteredModel(
        module_name=f"vllm.model_executor.models.{mod_relname}",
        class_name=cls_name,
    )
    for model_arch, (mod_relname, cls_name) in _VLLM_MODELS.items()
})


def _run_in_subprocess(module_name: str, class_name: str) -> _ModelInfo:
    with tempfile.TemporaryDirectory() as tempdir:
        output_filepath = os.path.join(tempdir, "registry_output.tmp")
        request = json.dumps({"module": module_name, "class": class_name, "output": output_filepath})
        returned = subprocess.run(_SUBPROCESS_COMMAND, input=request.encode(), capture_output=True)
        # check if the subprocess is successful
        try:
            returned.check_returncode()
        except Exception as e:
            # wrap raised exception to provide more information
            raise RuntimeError(f"Error raised in subprocess:\n{returned.stderr.decode()}") from e
        with open(output_filepath, encoding="utf-8") as f:
            return _ModelInfo(**json.load(f))


def _run() -> None:
    request = json.loads(sys.stdin.buffer.read())
    model_cls = getattr(importlib.import_module(request["module"]), request["class"])
    result = _ModelInfo.from_model_cls(model_cls)
    with open(request["output"], "w", encoding="utf-8") as f:
        json.dump(asdict(result), f)


if __name__ == "__main__":
    _run()
