# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fake image layers (overlay2 layout) and a fake Docker archive API serving a directory, for the image_fs tests."""

from __future__ import annotations

import base64
import io
import json
import os
import posixpath
import tarfile
from unittest import mock

from ansible_collections.dgxspark.vllm.plugins.module_utils import _image_fs

SITE = "/usr/local/lib/python3.12/dist-packages"

REGISTRY = '''\
_TEXT_GENERATION_MODELS = {
    # [Decoder-only]
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "Qwen3MoeForCausalLM": ("qwen3_moe", "Qwen3MoeForCausalLM"),
    **{"Qwen3NextForCausalLM": ("qwen3_next", "Qwen3NextForCausalLM")},
}

_MULTIMODAL_MODELS = {
    "Qwen3_5ForConditionalGeneration": ("qwen3_5", "Qwen3_5ForConditionalGeneration"),
    "Qwen3_5MoeForConditionalGeneration": (
        "qwen3_5",
        "Qwen3_5MoeForConditionalGeneration",
    ),
}

_VLLM_MODELS = {
    **_TEXT_GENERATION_MODELS,
    **_MULTIMODAL_MODELS,
}
'''

VLLM_METADATA = '''\
Metadata-Version: 2.4
Name: vllm
Version: 0.17.1
Summary: A high-throughput and memory-efficient inference and serving engine for LLMs
Requires-Dist: regex
Requires-Dist: transformers<5,>=4.56.0
Requires-Dist: torch==2.9.0
Requires-Dist: ray[cgraph]>=2.48.0; extra == "ray"
Provides-Extra: ray

# vLLM
Requires-Dist: this-is-the-description
'''


def write(root, path, text="", mode=None):
    """Create ``path`` (image-absolute) below the layer ``root``; bytes or str content."""
    host = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(host), exist_ok=True)
    with open(host, "wb") as handle:
        handle.write(text if isinstance(text, bytes) else text.encode())
    if mode is not None:
        os.chmod(host, mode)
    return host


def link(root, path, target):
    host = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(os.path.dirname(host), exist_ok=True)
    os.symlink(target, host)


def mkdir(root, path):
    host = os.path.join(str(root), path.lstrip("/"))
    os.makedirs(host, exist_ok=True)
    return host


def layers(tmp_path, count):
    """``count`` empty layer directories, returned bottom first (``OverlayFS`` wants them top first)."""
    dirs = []
    for index in range(count):
        path = tmp_path / ("layer%d" % index) / "diff"
        path.mkdir(parents=True)
        dirs.append(str(path))
    return dirs


def vllm_image(tmp_path, system_nccl=True, pip_nccl=True, ray=False, verbs=""):
    """A three-layer image like a vLLM engine: base OS + Python, the pip installs, a cleanup layer. Top layer first.
    VERBS: "" none of the RDMA user-space libraries, "libibverbs" Debian's libibverbs1 alone, "both" with
    ibverbs-providers (the mlx5 provider), "removed" both installed in the base and deleted by the cleanup layer."""
    base, pip, top = layers(tmp_path, 3)
    lib = "/usr/lib/aarch64-linux-gnu"
    if verbs:
        write(base, lib + "/libibverbs.so.1.14.50.0", b"v" * 64)
        link(base, lib + "/libibverbs.so.1", "libibverbs.so.1.14.50.0")
    if verbs in ("both", "removed"):
        write(base, lib + "/libmlx5.so.1.24.50.0", b"m" * 64)
        link(base, lib + "/libmlx5.so.1", "libmlx5.so.1.24.50.0")
        link(base, lib + "/libibverbs/libmlx5-rdmav34.so", "../libmlx5.so.1.24.50.0")
        write(base, lib + "/libibverbs/libmana-rdmav34.so", b"x")
    if verbs == "removed":
        for name in ("libibverbs.so.1", "libibverbs.so.1.14.50.0", "libmlx5.so.1", "libmlx5.so.1.24.50.0"):
            write(top, lib + "/.wh." + name)
        write(top, lib + "/.wh.libibverbs")
    write(base, "/usr/bin/python3.12", b"\x7fELF")
    link(base, "/usr/bin/python3", "python3.12")
    link(base, "/lib", "usr/lib")
    write(base, "/usr/include/python3.12/patchlevel.h", '#define PY_VERSION      "3.12.3"\n')
    mkdir(base, "/usr/lib/python3/dist-packages")
    if system_nccl:
        write(base, "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9", b"n" * 2048)
        link(base, "/usr/lib/aarch64-linux-gnu/libnccl.so.2", "libnccl.so.2.28.9")
        link(base, "/usr/lib/aarch64-linux-gnu/libnccl.so", "/lib/aarch64-linux-gnu/libnccl.so.2")
    write(base, "/opt/old/libnccl.so.2.18.1", b"o" * 10)
    write(pip, SITE + "/vllm/__init__.py")
    write(pip, SITE + "/vllm/_version.py", "__version__ = version = '0.17.1'\n")
    write(pip, SITE + "/vllm/model_executor/models/registry.py", REGISTRY)
    for name in ("__init__.py", "llama.py", "qwen3_5.py", "qwen3_5_mtp.py"):
        write(pip, SITE + "/vllm/model_executor/models/" + name)
    write(pip, SITE + "/vllm/model_executor/models/transformers/__init__.py")
    write(pip, SITE + "/vllm/model_executor/models/__pycache__/llama.cpython-312.pyc")
    write(pip, SITE + "/vllm-0.17.1.dist-info/METADATA", VLLM_METADATA)
    write(pip, SITE + "/transformers/__init__.py", '__version__ = "4.57.3"\n')
    write(pip, SITE + "/transformers-4.57.3.dist-info/METADATA", "Metadata-Version: 2.1\nName: transformers\nVersion: 4.57.3\n")
    write(pip, SITE + "/torch/version.py", "__version__ = '2.9.0+cu130'\n")
    write(pip, SITE + "/torch-2.9.0+cu130.dist-info/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0+cu130\n")
    write(pip, SITE + "/tokenizers/__init__.py", '__version__ = "0.22.1"\n')
    write(pip, SITE + "/tokenizers-0.22.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tokenizers\nVersion: 0.22.1\n")
    write(pip, SITE + "/ray/_version.py", 'version = "2.54.1"\ncommit = "abc"\n')
    write(pip, SITE + "/ray-2.54.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: ray\nVersion: 2.54.1\n")
    if pip_nccl:
        write(pip, SITE + "/nvidia/nccl/lib/libnccl.so.2", b"p" * 1024)
        write(pip, SITE + "/nvidia/nccl/include/nccl.h", "#define NCCL_MAJOR 2\n#define NCCL_MINOR 27\n#define NCCL_PATCH 7\n")
        write(pip, SITE + "/nvidia_nccl_cu13-2.27.7.dist-info/METADATA",
              "Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: 2.27.7\n")
    # The cleanup layer deletes the old NCCL (AUFS-style whiteout) and, unless asked for, Ray.
    write(top, "/opt/old/.wh.libnccl.so.2.18.1")
    if not ray:
        write(top, SITE + "/.wh.ray")
        write(top, SITE + "/.wh.ray-2.54.1.dist-info")
    return [top, pip, base]


def flatten(layer_dirs, dest):
    """Copy the merged view of ``layer_dirs`` (top first) into the directory ``dest`` (what a container would see)."""
    fs = _image_fs.OverlayFS(layer_dirs)

    def copy(path):
        for name in fs.listdir(path) or []:
            child = posixpath.join(path, name)
            entry = fs.lstat(child)
            host = os.path.join(str(dest), child.lstrip("/"))
            if entry.kind == "dir":
                os.makedirs(host, exist_ok=True)
                copy(child)
            elif entry.kind == "link":
                os.symlink(entry.target, host)
            elif entry.kind == "file":
                write(dest, child, fs.read_file(child, 1 << 30))

    os.makedirs(str(dest), exist_ok=True)
    copy("/")
    return str(dest)


class FakeResponse:
    def __init__(self, status, stat=None):
        self.status_code = status
        self.headers = {}
        if stat is not None:
            self.headers["X-Docker-Container-Path-Stat"] = base64.b64encode(json.dumps(stat).encode()).decode()


class ArchiveServer:
    """The Docker archive API of a container whose root file system is the directory ``root``.

    Like the engine, parents are resolved inside the root, a final link is reported (with its
    fully resolved target) but not followed, and GET returns a tar of the path.
    """

    def __init__(self, root):
        self.root = str(root)
        self.view = _image_fs.OverlayFS([self.root])
        self.heads = []
        self.gets = []
        self.api = mock.Mock(base_url="http+docker://localhost", api_version="1.41", timeout=60)
        self.api.head.side_effect = self.head
        self.container = mock.Mock(id="c0ffee", name="dgxspark-inspect-test")
        self.container.get_archive.side_effect = self.get_archive

    def _resolve(self, path):
        path = _image_fs.normpath(path)
        parent = self.view.realpath(posixpath.dirname(path))
        if parent is None:
            return None, None
        real = posixpath.join(parent, posixpath.basename(path)) if path != "/" else "/"
        return real, self.view.lstat(real)

    def _stat(self, real, entry):
        if entry.kind == "dir":
            mode = (1 << 31) | 0o755
        elif entry.kind == "link":
            mode = (1 << 27) | 0o777
        else:
            mode = 0o644
        target = self.view.realpath(real) if entry.kind == "link" else ""
        return {"name": posixpath.basename(real), "size": entry.size, "mode": mode, "mtime": "2026-01-01T00:00:00Z",
                "linkTarget": target or ""}

    def head(self, url, params=None, timeout=None):
        assert url == "http+docker://localhost/v1.41/containers/c0ffee/archive"
        self.heads.append(params["path"])
        real, entry = self._resolve(params["path"])
        if entry is None:
            return FakeResponse(404)
        return FakeResponse(200, self._stat(real, entry))

    def get_archive(self, path):
        self.gets.append(path)
        real, entry = self._resolve(path)
        if entry is None:
            raise AssertionError("GET of a missing path %s" % path)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(os.path.join(self.root, real.lstrip("/")), arcname=posixpath.basename(real) or ".", recursive=True)
        data = buffer.getvalue()
        return iter([data[i:i + 1000] for i in range(0, len(data), 1000)]), self._stat(real, entry)
