# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gate (b) of the dgxspark.vllm.hybrid_image role: load model classes through vLLM's registry.

Run inside a container of a freshly built image, without a GPU and without the
image's entrypoint (the file is mounted read-only)::

    python3 inspect_architectures.py ARCHITECTURE [ARCHITECTURE ...]

Each architecture is looked up the way the engine resolves it: in
``vllm.model_executor.models.registry.ModelRegistry`` (its lazy entry names the
module and the class), falling back to the ``_VLLM_MODELS`` table
(``"Arch": ("module", "Class")`` below ``vllm.model_executor.models``); then the
module is imported with ``importlib.import_module`` and the class is taken from
it. That is the import vLLM runs when it inspects a model before loading it, so
an architecture whose module cannot be imported here is one the engine would
report as ``failed to be inspected``.

The last line of stdout is ``DGXSPARK_INSPECT <json>``: one result per
architecture (``architecture``, ``module``, ``class``, ``ok``, ``error`` and the
end of the ``traceback``). Exit status 0 when every class loaded, 1 otherwise,
2 when the registry itself cannot be imported.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback

MARKER = "DGXSPARK_INSPECT "
MODELS_PACKAGE = "vllm.model_executor.models"
TRACEBACK_CHARS = 3000


def _error(exc: BaseException) -> dict:
    """The root exception as one line, and the end of the traceback."""
    root = exc
    while root.__cause__ is not None or (root.__context__ is not None and not root.__suppress_context__):
        root = root.__cause__ if root.__cause__ is not None else root.__context__
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "error": f"{type(root).__name__}: {root}".strip(),
        "traceback": text[-TRACEBACK_CHARS:],
    }


def _lookup(registry_module, architecture: str) -> tuple[str, str] | None:
    """(absolute module, class) registered for ``architecture``, or None."""
    registry = getattr(registry_module, "ModelRegistry", None)
    models = getattr(registry, "models", None)
    if isinstance(models, dict) and architecture in models:
        entry = models[architecture]
        module_name = getattr(entry, "module_name", None)
        class_name = getattr(entry, "class_name", None)
        if module_name and class_name:
            return module_name, class_name
        # A class registered directly (ModelRegistry.register_model with a type).
        model_cls = getattr(entry, "model_cls", None)
        if model_cls is not None:
            return model_cls.__module__, model_cls.__name__
    table = getattr(registry_module, "_VLLM_MODELS", {})
    if architecture in table:
        module_name, class_name = table[architecture]
        if not module_name.startswith("vllm."):
            module_name = f"{MODELS_PACKAGE}.{module_name}"
        return module_name, class_name
    return None


def inspect(architectures: list[str]) -> tuple[int, list[dict]]:
    try:
        registry_module = importlib.import_module(f"{MODELS_PACKAGE}.registry")
    except Exception as exc:  # pylint: disable=broad-exception-caught
        result = {"architecture": None, "module": f"{MODELS_PACKAGE}.registry", "class": None, "ok": False}
        result.update(_error(exc))
        return 2, [result]
    results = []
    for architecture in architectures:
        found = _lookup(registry_module, architecture)
        if found is None:
            results.append({"architecture": architecture, "module": None, "class": None, "ok": False,
                            "error": "not registered in vLLM's model registry", "traceback": ""})
            continue
        module_name, class_name = found
        result = {"architecture": architecture, "module": module_name, "class": class_name, "ok": False,
                  "error": "", "traceback": ""}
        try:
            model_cls = getattr(importlib.import_module(module_name), class_name)
            result["ok"] = isinstance(model_cls, type)
            if not result["ok"]:
                result["error"] = f"{module_name}.{class_name} is not a class"
        except Exception as exc:  # pylint: disable=broad-exception-caught
            result.update(_error(exc))
        results.append(result)
    return (0 if all(r["ok"] for r in results) else 1), results


def main(argv: list[str]) -> int:
    architectures = [a for a in argv if a != "--"]
    if not architectures:
        sys.stderr.write("usage: inspect_architectures.py ARCHITECTURE [ARCHITECTURE ...]\n")
        return 2
    code, results = inspect(architectures)
    for result in results:
        if result["traceback"]:
            sys.stdout.write(result["traceback"] + "\n")
    sys.stdout.write(MARKER + json.dumps(results) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
