#!/usr/bin/env python3
"""Build the lab's stand-in ``vllm`` package as a real, installable wheel.

Two flavours come from one source tree:

* ``0.14`` -- metadata of vLLM 0.14.1, the field's ``vllm-node`` engine: no Qwen3.5.
* ``0.17`` -- metadata of vLLM 0.17.1, the field's community image: Qwen3.5 models
  (``qwen3_5.py``, ``qwen3_5_mtp.py``, configs ``qwen3_5.py`` / ``qwen3_5_moe.py``).

Layout of ``src/``: ``common/`` holds files shared by both flavours, ``0.14/`` and
``0.17/`` hold files that exist only in (or differ for) one flavour. Two shared files
carry a marker line that is replaced by the flavour's text, so that the installed
files look like vLLM's own (module-level dicts inside ``registry.py`` and
``transformers_utils/config.py``):

* ``# @@MODEL_DICTS@@``      <- ``<flavour>/registry_models.txt``
* ``# @@CONFIG_REGISTRY@@``  <- ``<flavour>/config_registry.txt``

Only the standard library is used.  Usage::

    build_wheel.py --flavour 0.14 --out DIR        # writes DIR/vllm-0.14.1-py3-none-any.whl
    build_wheel.py --flavour 0.17 --tree DIR       # writes the importable package tree only
    build_wheel.py --flavour 0.14 --list-dropped   # real Requires-Dist left out of the wheel
    build_wheel.py --flavour 0.14 --requirements   # the kept pins, for pip install in the images
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"

# Requires-Dist exactly as the real wheels declare them (vllm-0.14.1 / vllm-0.17.1,
# cp38-abi3-manylinux_2_31, read from their METADATA), in their order, without extras.
_REAL_REQUIRES_COMMON_HEAD = [
    "regex", "cachetools", "psutil", "sentencepiece", "numpy", "requests>=2.26.0", "tqdm",
    "blake3", "py-cpuinfo", "transformers<5,>=4.56.0", "tokenizers>=0.21.1",
]
REAL_REQUIRES = {
    "0.14": _REAL_REQUIRES_COMMON_HEAD + [
        "protobuf>=6.30.0", "fastapi[standard]>=0.115.0", "aiohttp", "openai>=1.99.1",
        "pydantic>=2.12.0", "prometheus_client>=0.18.0", "pillow",
        "prometheus-fastapi-instrumentator>=7.0.0", "tiktoken>=0.6.0", "lm-format-enforcer==0.11.3",
        'llguidance<1.4.0,>=1.3.0; platform_machine == "x86_64" or platform_machine == "arm64" or '
        'platform_machine == "aarch64" or platform_machine == "s390x" or platform_machine == "ppc64le"',
        "outlines_core==0.2.11", "diskcache==5.6.3", "lark==1.2.2",
        'xgrammar==0.1.29; platform_machine == "x86_64" or platform_machine == "aarch64" or '
        'platform_machine == "arm64" or platform_machine == "s390x" or platform_machine == "ppc64le"',
        "typing_extensions>=4.10", "filelock>=3.16.1", "partial-json-parser", "pyzmq>=25.0.0", "msgspec",
        "gguf>=0.17.0", "mistral_common[image]>=1.8.8", "opencv-python-headless>=4.13.0", "pyyaml",
        'six>=1.16.0; python_version > "3.11"', 'setuptools<81.0.0,>=77.0.3; python_version > "3.11"',
        "einops", "compressed-tensors==0.13.0", "depyf==0.20.0", "cloudpickle", "watchfiles",
        "python-json-logger", "ninja", "pybase64", "cbor2", "ijson", "setproctitle", "openai-harmony>=0.0.3",
        "anthropic==0.71.0", "model-hosting-container-standards<1.0.0,>=0.1.10", "mcp", "grpcio>=1.76.0",
        "grpcio-reflection>=1.76.0", "numba==0.61.2", "ray[cgraph]>=2.48.0", "torch==2.9.1",
        "torchaudio==2.9.1", "torchvision==0.24.1", "flashinfer-python==0.5.3",
    ],
    "0.17": _REAL_REQUIRES_COMMON_HEAD + [
        "protobuf!=6.30.*,!=6.31.*,!=6.32.*,!=6.33.0.*,!=6.33.1.*,!=6.33.2.*,!=6.33.3.*,!=6.33.4.*,>=5.29.6",
        "fastapi[standard]>=0.115.0", "aiohttp>=3.13.3", "openai<2.25.0,>=1.99.1", "pydantic>=2.12.0",
        "prometheus_client>=0.18.0", "pillow", "prometheus-fastapi-instrumentator>=7.0.0",
        "tiktoken>=0.6.0", "lm-format-enforcer==0.11.3",
        'llguidance<1.4.0,>=1.3.0; platform_machine == "x86_64" or platform_machine == "arm64" or '
        'platform_machine == "aarch64" or platform_machine == "s390x" or platform_machine == "ppc64le"',
        "outlines_core==0.2.11", "diskcache==5.6.3", "lark==1.2.2",
        'xgrammar==0.1.29; platform_machine == "x86_64" or platform_machine == "aarch64" or '
        'platform_machine == "arm64" or platform_machine == "s390x" or platform_machine == "ppc64le"',
        "typing_extensions>=4.10", "filelock>=3.16.1", "partial-json-parser", "pyzmq>=25.0.0", "msgspec",
        "gguf>=0.17.0", "mistral_common[image]>=1.9.1", "opencv-python-headless>=4.13.0", "pyyaml",
        'six>=1.16.0; python_version > "3.11"', 'setuptools<81.0.0,>=77.0.3; python_version > "3.11"',
        "einops", "compressed-tensors==0.13.0", "depyf==0.20.0", "cloudpickle", "watchfiles",
        "python-json-logger", "ninja", "pybase64", "cbor2", "ijson", "setproctitle", "openai-harmony>=0.0.3",
        "anthropic>=0.71.0", "model-hosting-container-standards<1.0.0,>=0.1.13", "mcp", "grpcio",
        "grpcio-reflection", "opentelemetry-sdk>=1.27.0", "opentelemetry-api>=1.27.0",
        "opentelemetry-exporter-otlp>=1.27.0", "opentelemetry-semantic-conventions-ai>=0.4.1",
        "kaldi-native-fbank>=1.18.7", "numba==0.61.2", "ray[cgraph]>=2.48.0", "torch==2.10.0",
        "torchaudio==2.10.0", "torchvision==0.25.0", "flashinfer-python==0.6.4",
        "nvidia-cudnn-frontend<1.19.0,>=1.13.0", "nvidia-cutlass-dsl>=4.4.0.dev1", "quack-kernels>=0.2.7",
    ],
}

# The distributions each lab image really installs (its Dockerfile lists them). Only
# their pins are kept, so that `pip check` in the image reports what it would report
# for a real vLLM over the same packages, and nothing about packages that cannot be
# installed on a GPU-free machine.
_TRANSFORMERS_CLOSURE = {"regex", "numpy", "requests", "tqdm", "transformers", "tokenizers", "filelock",
                         "pyyaml", "typing-extensions", "pydantic"}
LAB_INSTALLED = {
    "0.14": _TRANSFORMERS_CLOSURE | {"protobuf", "aiohttp", "prometheus-client", "grpcio", "ray", "six",
                                     "setuptools"},
    "0.17": _TRANSFORMERS_CLOSURE | {"six", "setuptools"},
}

FLAVOURS = {
    "0.14": {"version": "0.14.1", "nccl": "2.27.5", "torch": "2.9.1"},
    "0.17": {"version": "0.17.1", "nccl": "2.28.9", "torch": "2.10.0"},
}

SUMMARY = "A high-throughput and memory-efficient inference and serving engine for LLMs"


def _dist_name(req: str) -> str:
    name = req.split(";")[0]
    for sep in "[<>=!~ ":
        name = name.split(sep)[0]
    return name.strip().lower().replace("_", "-")


def kept_requires(flavour: str) -> list[str]:
    return [r for r in REAL_REQUIRES[flavour] if _dist_name(r) in LAB_INSTALLED[flavour]]


def dropped_requires(flavour: str) -> list[str]:
    return [r for r in REAL_REQUIRES[flavour] if _dist_name(r) not in LAB_INSTALLED[flavour]]


def assemble_tree(flavour: str, dest: Path) -> Path:
    """Write the importable ``vllm`` package of ``flavour`` under ``dest`` and return ``dest/vllm``."""
    if flavour not in FLAVOURS:
        raise SystemExit(f"unknown flavour {flavour!r}; choose from {', '.join(FLAVOURS)}")
    pkg = dest / "vllm"
    if pkg.exists():
        shutil.rmtree(pkg)
    for layer in (SRC / "common", SRC / flavour):
        for path in sorted(layer.rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            rel = path.relative_to(layer)
            if rel.parts[0] != "vllm":
                continue  # flavour text fragments live next to the package
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    fragments = {
        "# @@MODEL_DICTS@@": (SRC / flavour / "registry_models.txt").read_text(),
        "# @@CONFIG_REGISTRY@@": (SRC / flavour / "config_registry.txt").read_text(),
    }
    for rel in ("model_executor/models/registry.py", "transformers_utils/config.py"):
        path = pkg / rel
        text = path.read_text()
        for marker, body in fragments.items():
            if marker in text:
                text = text.replace(marker + "\n", body)
        path.write_text(text)
    _generate_plain_model_modules(pkg, fragments["# @@MODEL_DICTS@@"])
    meta = FLAVOURS[flavour]
    version = meta["version"]
    vt = tuple(int(x) for x in version.split("."))
    (pkg / "_version.py").write_text(
        "# file generated by build_wheel.py (the lab's stand-in for setuptools-scm)\n"
        f"__version__ = version = {version!r}\n"
        f"__version_tuple__ = version_tuple = {vt!r}\n"
        f"__lab_nccl_version__ = {meta['nccl']!r}\n"
        f"__lab_torch_version__ = {meta['torch']!r}\n"
    )
    return pkg


_ENTRY = re.compile(r'\(\s*"([a-z0-9_]+)",\s*"([A-Za-z0-9_]+)",?\s*\)')


def _generate_plain_model_modules(pkg: Path, dicts_text: str) -> None:
    """Write a module for every registry entry whose module has no hand-written file.

    Hand-written modules (``src/*/vllm/model_executor/models/*.py``) carry the
    imports that matter for inspection (Qwen3-Next, Qwen3.5, ...); all other
    architectures get a plain module with the registered class names.
    """
    models = pkg / "model_executor" / "models"
    wanted: dict[str, list[str]] = {}
    live = "\n".join(line for line in dicts_text.splitlines() if not line.lstrip().startswith("#"))
    for module, cls in _ENTRY.findall(live):
        wanted.setdefault(module, [])
        if cls not in wanted[module]:
            wanted[module].append(cls)
    for module, classes in sorted(wanted.items()):
        path = models / f"{module}.py"
        if path.exists():
            continue
        lines = ["# SPDX-License-Identifier: Apache-2.0",
                 f'"""``{module}`` models (lab stand-in generated by build_wheel.py)."""', "",
                 "from .interfaces import SupportsMultiModal, SupportsPP",
                 "from .utils import CPUStandInForCausalLM", ""]
        for cls in classes:
            mm = "SupportsMultiModal, " if ("ConditionalGeneration" in cls or "VL" in cls) else ""
            lines += ["", f"class {cls}(CPUStandInForCausalLM, {mm}SupportsPP):", "    pass", ""]
        path.write_text("\n".join(lines))


def _metadata(flavour: str) -> str:
    version = FLAVOURS[flavour]["version"]
    lines = [
        "Metadata-Version: 2.4",
        "Name: vllm",
        f"Version: {version}",
        f"Summary: {SUMMARY}",
        "Author: vLLM Team",
        "License-Expression: Apache-2.0",
        "Project-URL: Homepage, https://github.com/vllm-project/vllm",
        "Classifier: Programming Language :: Python :: 3.11",
        "Requires-Python: <3.14,>=3.10",
        "Description-Content-Type: text/markdown",
    ]
    lines += [f"Requires-Dist: {r}" for r in kept_requires(flavour)]
    body = (
        "GPU-free stand-in for vLLM used by the dgxspark.vllm lab. Same CLI, registry layout, "
        "OpenAI endpoints and metadata as the real release; no kernels.\n\n"
        "Left out of Requires-Dist (not installable on the lab's CPU-only nodes):\n"
        + "".join(f"- {r}\n" for r in dropped_requires(flavour))
    )
    return "\n".join(lines) + "\n\n" + body


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(out: Path, wheel_name: str, distinfo: str, files: list[tuple[str, bytes]],
                 top_level: str) -> Path:
    """Add WHEEL, top_level.txt and RECORD to FILES and write them as OUT/WHEEL_NAME (reproducibly)."""
    out.mkdir(parents=True, exist_ok=True)
    wheel_path = out / wheel_name
    files = list(files)
    files.append((f"{distinfo}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: dgxspark-lab build_wheel.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    ).encode()))
    files.append((f"{distinfo}/top_level.txt", f"{top_level}\n".encode()))
    record = [_record_line(n, d) for n, d in files] + [f"{distinfo}/RECORD,,"]
    files.append((f"{distinfo}/RECORD", ("\n".join(record) + "\n").encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))  # reproducible
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    tmp_path = wheel_path.with_suffix(".tmp")
    tmp_path.write_bytes(buf.getvalue())
    os.replace(tmp_path, wheel_path)
    return wheel_path


def build_wheel(flavour: str, out: Path) -> Path:
    import tempfile

    version = FLAVOURS[flavour]["version"]
    distinfo = f"vllm-{version}.dist-info"
    with tempfile.TemporaryDirectory() as tmp:
        pkg = assemble_tree(flavour, Path(tmp))
        files: list[tuple[str, bytes]] = []
        for path in sorted(pkg.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files.append((path.relative_to(Path(tmp)).as_posix(), path.read_bytes()))
    files.append((f"{distinfo}/METADATA", _metadata(flavour).encode()))
    files.append((f"{distinfo}/entry_points.txt", (
        "[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n"
    ).encode()))
    return _write_wheel(out, f"vllm-{version}-py3-none-any.whl", distinfo, files, "vllm")


NCCL_DIST = "nvidia-nccl-cu13"


def build_nccl_wheel(flavour: str, out: Path) -> Path:
    """The pip NCCL the flavour's torch brings (``nvidia-nccl-cu13`` at the flavour's NCCL version).

    Real images carry NCCL as ``nvidia/nccl/lib/libnccl.so.2`` from this distribution; the stand-in ships the same
    names with no code: the library file is a placeholder, ``nccl.h`` carries only the version defines, and the
    engine's NCCL log lines read their version from this distribution's metadata. So the image facts
    (dgxspark.vllm.vllm_image_info) and the engine's log agree, as they do on a real image."""
    version = FLAVOURS[flavour]["nccl"]
    major, minor, patch = version.split(".")
    distinfo = f"nvidia_nccl_cu13-{version}.dist-info"
    files = [
        ("nvidia/nccl/lib/libnccl.so.2", f"lab stand-in for libnccl {version}: no code\n".encode()),
        ("nvidia/nccl/include/nccl.h", (f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n"
                                        f"#define NCCL_PATCH {patch}\n").encode()),
        (f"{distinfo}/METADATA", (f"Metadata-Version: 2.1\nName: {NCCL_DIST}\nVersion: {version}\n"
                                  "Summary: NVIDIA Collective Communication Library (NCCL) Runtime (lab stand-in)\n"
                                  "Requires-Python: >=3\n").encode()),
    ]
    return _write_wheel(out, f"nvidia_nccl_cu13-{version}-py3-none-any.whl", distinfo, files, "nvidia")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flavour", required=True, choices=sorted(FLAVOURS))
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path, help="directory for the .whl files (vLLM and its pip NCCL)")
    group.add_argument("--tree", type=Path, help="directory for the package tree only")
    group.add_argument("--list-dropped", action="store_true", help="print the real pins left out")
    group.add_argument("--requirements", action="store_true",
                       help="print the kept pins as a pip requirements file (extras dropped: the lab "
                            "image installs them with --no-deps and these pins)")
    args = parser.parse_args(argv)
    if args.list_dropped:
        print("\n".join(dropped_requires(args.flavour)))
    elif args.requirements:
        print("\n".join(re.sub(r"\[[^\]]*\]", "", r) for r in kept_requires(args.flavour)))
    elif args.tree:
        print(assemble_tree(args.flavour, args.tree))
    else:
        print(build_wheel(args.flavour, args.out))
        print(build_nccl_wheel(args.flavour, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
