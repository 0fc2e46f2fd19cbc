# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""Read the files of a container image without running anything from it.

Two readers implement the same small interface (:class:`ImageFS`: ``lstat``,
``listdir``, ``read`` and a ``realpath`` that resolves symbolic links inside the
image, never on the host):

:class:`OverlayFS`
    Reads the image's layer directories directly, as the overlay2 graph driver
    keeps them on the node (``GraphDriver.Data`` ``UpperDir`` + ``LowerDir``).
    A path is resolved top layer first, the way overlayfs merges them: a
    whiteout (the character device 0:0 that overlay2 stores, or a
    ``.wh.<name>`` file as in layer tarballs) hides the name in every lower
    layer, and an opaque directory (the ``trusted.overlay.opaque`` or
    ``user.overlay.opaque`` xattr, or a ``.wh..wh..opq`` file) hides the lower
    layers' contents of that directory. Nothing is copied, and directory walks
    (every ``libnccl.so*``, every ``site-packages``) are cheap.

:class:`ArchiveFS`
    Talks to a created, never started container through the Docker archive
    API: ``HEAD /containers/{id}/archive`` for the stat of a path (no content
    transferred), ``GET`` for a small file or a small directory, with a byte
    limit. Used when the layers cannot be read (another storage driver, the
    containerd image store, a remote engine). It cannot list large
    directories, so :func:`inspect_image` probes a bounded set of candidate
    paths instead of walking.

:func:`inspect_image` turns either reader into the result of the
``vllm_image_info`` module: Python, site-packages, package versions from
dist-info ``METADATA``, vLLM's ``Requires-Dist``, the architectures of vLLM's
registry (parsed statically by ``_vllm_registry``), the model files, every
NCCL library and the RDMA user-space libraries (libibverbs, the mlx5 provider).
"""

from __future__ import annotations

import base64
import dataclasses
import email.parser
import io
import json
import os
import posixpath
import re
import stat as stat_mod
import tarfile
import time
import typing as t

from ansible_collections.dgxspark.vllm.plugins.module_utils import _vllm_registry

WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")
MAX_SYMLINKS = 40
TEXT_LIMIT = 8 * 1024 * 1024
LISTING_LIMIT = 64 * 1024 * 1024
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MODELS_DIR = "vllm/model_executor/models"
REGISTRY_FILE = MODELS_DIR + "/registry.py"
NCCL_ISSUE = "https://github.com/vllm-project/vllm/issues/42354"

# Directories never walked: kernel file systems (empty in an image anyway) and bytecode caches.
PRUNE_TOP = frozenset(("proc", "sys", "dev"))
PRUNE_ANY = frozenset(("__pycache__",))

# Places where NCCL is found when the layers cannot be walked (ArchiveFS).
NCCL_SYSTEM_DIRS = (
    "/usr/lib/aarch64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/usr/lib/sbsa-linux-gnu", "/usr/lib64", "/usr/lib",
    "/usr/local/lib", "/usr/local/cuda/lib64", "/usr/local/cuda/targets/sbsa-linux/lib",
    "/usr/local/cuda/targets/aarch64-linux/lib", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/nccl/lib",
    "/opt/nccl/lib", "/opt/nccl/build/lib",
)
NCCL_SITE_DIRS = ("nvidia/nccl/lib", "torch/lib")
NCCL_NAMES = ("libnccl.so", "libnccl.so.2")
NCCL_NAME_RE = re.compile(r"^libnccl\.so(?:\.([0-9]+(?:\.[0-9]+)*))?$")
NCCL_DIST_RE = re.compile(r"^nvidia-nccl-cu[0-9]+$")

# The RDMA user-space libraries NCCL's IB transport needs (rdma-core; Debian and Ubuntu: libibverbs1 and
# ibverbs-providers): NCCL loads libibverbs.so.1, and libibverbs lists a ConnectX device only through its mlx5 provider
# (libibverbs/libmlx5-rdmav<ABI>.so in the library directory, a link to libmlx5.so.1). Looked for where the dynamic
# loader finds them: LD_LIBRARY_PATH and the usual library directories.
VERBS_DIRS = (
    "/usr/lib/aarch64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/lib/x86_64-linux-gnu",
    "/usr/lib64", "/lib64", "/usr/lib", "/lib", "/usr/local/lib",
)
VERBS_LIBRARY = "libibverbs.so.1"
MLX5_LIBRARY = "libmlx5.so.1"
MLX5_PROVIDER_RE = re.compile(r"^libmlx5-rdmav[0-9]+\.so$")
VERBS_MISSING = {"libibverbs": "libibverbs.so.1 (libibverbs1)",
                 "mlx5_provider": "the mlx5 provider libibverbs/libmlx5-rdmav*.so (ibverbs-providers)"}

# Environment variables whose values are returned; every other variable is returned by name only.
ENV_VALUE_NAMES = frozenset((
    "PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHON_VERSION",
    "LANG", "LC_ALL", "TZ", "HOME", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TIKTOKEN_CACHE_DIR",
    "TRITON_PTXAS_PATH", "TRITON_CACHE_DIR", "MAX_JOBS", "NVCC_THREADS",
))
ENV_VALUE_PREFIXES = ("VLLM_", "NCCL_", "CUDA_", "TORCH_", "NVIDIA_", "NV_", "RAY_", "PYTORCH_", "UCX_", "OMPI_")
ENV_SECRET_RE = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|PRIVATE|COOKIE|SESSION|CERT", re.IGNORECASE)
URL_USERINFO_RE = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s]+@", re.IGNORECASE)

# Distributions reported in ``versions``: canonical dist names, top-level package, files holding ``__version__``.
PACKAGES: t.Dict[str, t.Tuple[t.Tuple[str, ...], str, t.Tuple[str, ...]]] = {
    "vllm": (("vllm",), "vllm", ("_version.py", "version.py")),
    "transformers": (("transformers",), "transformers", ("__init__.py",)),
    "torch": (("torch",), "torch", ("version.py",)),
    "ray": (("ray",), "ray", ("_version.py", "__init__.py")),
    "tokenizers": (("tokenizers",), "tokenizers", ("__init__.py",)),
    "nccl": (("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"), "nvidia/nccl", ()),
}
VERSION_RE = re.compile(r"""^(?:__version__|version)\s*(?::\s*str\s*)?=\s*(?:(?:__version__|version)\s*=\s*)?['"]([^'"]+)['"]""",
                        re.MULTILINE)
NCCL_HEADER_RE = re.compile(r"^#define\s+NCCL_(MAJOR|MINOR|PATCH)\s+([0-9]+)", re.MULTILINE)
PY_VERSION_RE = re.compile(r'^#define\s+PY_VERSION\s+"([^"]+)"', re.MULTILINE)


class ImageFSError(Exception):
    """The image's files could not be read; the message says which and why."""


class TooLarge(ImageFSError):
    """A file or directory is larger than the limit given for reading it."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """What ``lstat`` knows about a path: ``kind`` is ``file``, ``dir``, ``link`` or ``other``."""

    kind: str
    size: int = 0
    target: t.Optional[str] = None
    key: t.Any = None


def normpath(path: str) -> str:
    """An absolute, normalised image path (``..`` cannot leave the root)."""
    return posixpath.normpath("/" + path.lstrip("/")).replace("//", "/")


class Deadline:
    """A time budget; :meth:`check` raises :class:`ImageFSError` once it is spent."""

    def __init__(self, seconds: t.Optional[float]) -> None:
        self.seconds = seconds
        self.end = None if seconds is None else time.monotonic() + seconds

    def check(self, what: str) -> None:
        if self.end is not None and time.monotonic() > self.end:
            raise ImageFSError("%s took longer than the %ss timeout" % (what, self.seconds))


class ImageFS:
    """A read-only view of an image's merged file system."""

    method = ""
    can_walk = False
    cheap_listing = False

    def lstat(self, path: str) -> t.Optional[Entry]:
        raise NotImplementedError

    def listdir(self, path: str) -> t.Optional[t.List[str]]:
        """Names in the directory ``path`` (links in ``path`` resolved), or None when it is not a directory."""
        raise NotImplementedError

    def read_file(self, path: str, limit: int) -> bytes:
        """Content of the regular file at the resolved path ``path``."""
        raise NotImplementedError

    def realpath(self, path: str) -> t.Optional[str]:
        """``path`` with every symbolic link resolved inside the image, or None when it does not exist."""
        pending = [part for part in normpath(path).split("/") if part]
        done: t.List[str] = []
        hops = 0
        while pending:
            name = pending.pop(0)
            if name == "..":
                if done:
                    done.pop()
                continue
            current = "/" + "/".join(done + [name])
            entry = self.lstat(current)
            if entry is None:
                return None
            if entry.kind == "link":
                hops += 1
                if hops > MAX_SYMLINKS:
                    return None
                target = entry.target or ""
                if target.startswith("/"):
                    done = []
                pending = [part for part in target.split("/") if part and part != "."] + pending
                continue
            if pending and entry.kind != "dir":
                return None
            done.append(name)
        return "/" + "/".join(done)

    def stat(self, path: str) -> t.Optional[t.Tuple[str, Entry]]:
        """The resolved path and its entry, following links; None when missing."""
        real = self.realpath(path)
        if real is None:
            return None
        entry = self.lstat(real)
        return None if entry is None else (real, entry)

    def read_text(self, path: str, limit: int = TEXT_LIMIT) -> t.Optional[str]:
        """The text of the file at ``path`` (links followed), or None when it is not a regular file."""
        found = self.stat(path)
        if found is None or found[1].kind != "file":
            return None
        return self.read_file(found[0], limit).decode("utf-8", "replace")

    def exists(self, path: str) -> bool:
        return self.stat(path) is not None

    def is_dir(self, path: str) -> bool:
        found = self.stat(path)
        return found is not None and found[1].kind == "dir"


# --------------------------------------------------------------------------- overlay2 layers


def _is_whiteout(st: os.stat_result) -> bool:
    return stat_mod.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(host_dir: str) -> bool:
    if os.path.lexists(os.path.join(host_dir, OPAQUE_MARKER)):
        return True
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(host_dir, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _lstat_host(path: str) -> t.Optional[os.stat_result]:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


class OverlayFS(ImageFS):
    """The merged view of overlay2 layer directories, given top layer first."""

    method = "layers"
    can_walk = True
    cheap_listing = True

    def __init__(self, layers: t.Sequence[str]) -> None:
        self.layers = list(layers)
        root: t.List[t.Tuple[int, str]] = []
        for index, layer in enumerate(self.layers):
            root.append((index, layer))
            if _is_opaque(layer):
                break
        self._dirs: t.Dict[str, t.Optional[t.List[t.Tuple[int, str]]]] = {"/": root}

    @classmethod
    def from_graph_driver(cls, graph_driver: t.Optional[t.Mapping[str, t.Any]]) -> "OverlayFS":
        """The reader for an image's ``GraphDriver``; raises :class:`ImageFSError` when it is not usable overlay2 data."""
        graph_driver = graph_driver or {}
        name = graph_driver.get("Name")
        data = graph_driver.get("Data") or {}
        if name != "overlay2":
            raise ImageFSError("the engine stores images with %r, not overlay2" % (name,))
        layers = [data["UpperDir"]] if data.get("UpperDir") else []
        layers += [item for item in (data.get("LowerDir") or "").split(":") if item]
        if not layers:
            raise ImageFSError("the image's GraphDriver data names no layer directories")
        for layer in layers:
            if not os.path.isabs(layer) or not os.path.isdir(layer):
                raise ImageFSError("layer directory %s is not readable on this host (is the engine remote, or in a VM?)" % layer)
            if not os.access(layer, os.R_OK | os.X_OK):
                raise ImageFSError("layer directory %s is not readable by this user (run as root)" % layer)
        return cls(layers)

    def _find(self, parents: t.List[t.Tuple[int, str]], name: str) -> t.Optional[t.Tuple[str, t.Any]]:
        """Resolve ``name`` in a merged directory: ``("dir", contributors)`` or ``("entry", (index, host, stat))``."""
        dirs: t.List[t.Tuple[int, str]] = []
        for index, host_dir in parents:
            host = os.path.join(host_dir, name)
            st = _lstat_host(host)
            if st is not None:
                if _is_whiteout(st):
                    break
                if stat_mod.S_ISDIR(st.st_mode):
                    dirs.append((index, host))
                    if _is_opaque(host) or os.path.lexists(os.path.join(host_dir, WHITEOUT_PREFIX + name)):
                        break
                    continue
                if dirs:
                    break  # a file in a lower layer is hidden by the directory above it
                return ("entry", (index, host, st))
            if os.path.lexists(os.path.join(host_dir, WHITEOUT_PREFIX + name)):
                break
        return ("dir", dirs) if dirs else None

    def _contributors(self, path: str) -> t.Optional[t.List[t.Tuple[int, str]]]:
        """The layer directories that make up the merged directory ``path`` (no links in ``path``)."""
        if path in self._dirs:
            return self._dirs[path]
        parent, name = posixpath.split(path)
        parents = self._contributors(parent)
        found = self._find(parents, name) if parents else None
        result = found[1] if found is not None and found[0] == "dir" else None
        self._dirs[path] = result
        return result

    def _lookup(self, path: str) -> t.Optional[t.Tuple[str, t.Any]]:
        path = normpath(path)
        if path == "/":
            return ("dir", self._dirs["/"])
        parent, name = posixpath.split(path)
        parents = self._contributors(parent)
        return self._find(parents, name) if parents else None

    def lstat(self, path: str) -> t.Optional[Entry]:
        found = self._lookup(path)
        if found is None:
            return None
        if found[0] == "dir":
            return Entry("dir", 0, None, found[1][0][1])
        _index, host, st = found[1]
        if stat_mod.S_ISLNK(st.st_mode):
            return Entry("link", 0, os.readlink(host), (st.st_dev, st.st_ino))
        kind = "file" if stat_mod.S_ISREG(st.st_mode) else "other"
        return Entry(kind, st.st_size, None, (st.st_dev, st.st_ino))

    def host_path(self, path: str) -> t.Optional[str]:
        """Where the (top) copy of ``path`` lives on the host."""
        found = self._lookup(path)
        if found is None:
            return None
        return found[1][0][1] if found[0] == "dir" else found[1][1]

    def listdir(self, path: str) -> t.Optional[t.List[str]]:
        real = self.realpath(path)
        if real is None:
            return None
        found = self._lookup(real)
        if found is None or found[0] != "dir":
            return None
        seen: t.Set[str] = set()
        hidden: t.Set[str] = set()
        names: t.List[str] = []
        for _index, host_dir in found[1]:
            layer_hidden: t.Set[str] = set()
            with os.scandir(host_dir) as entries:
                for item in entries:
                    name = item.name
                    if name == OPAQUE_MARKER:
                        continue
                    if name.startswith(WHITEOUT_PREFIX):
                        layer_hidden.add(name[len(WHITEOUT_PREFIX):])
                        continue
                    if not item.is_dir(follow_symlinks=False) and not item.is_file(follow_symlinks=False) \
                            and not item.is_symlink() and _is_whiteout(item.stat(follow_symlinks=False)):
                        layer_hidden.add(name)
                        continue
                    if name in seen or name in hidden:
                        continue
                    seen.add(name)
                    names.append(name)
            hidden |= layer_hidden
        return sorted(names)

    def read_file(self, path: str, limit: int) -> bytes:
        host = self.host_path(path)
        if host is None:
            raise ImageFSError("%s is not in the image" % path)
        with open(host, "rb") as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise TooLarge("%s is larger than %d bytes" % (path, limit))
        return data

    def walk(self, deadline: Deadline) -> t.Tuple[t.List[str], t.List[str]]:
        """Every visible ``libnccl.so*`` (files and links) and every ``site-packages``/``dist-packages`` directory.

        Each layer directory is walked once (links are not followed); candidates are
        then resolved through the merged view, so that files hidden by a whiteout, an
        opaque directory or an upper layer's copy are left out.
        """
        libraries: t.Set[str] = set()
        sites: t.Set[str] = set()
        for layer in self.layers:
            stack = [(layer, "")]
            while stack:
                host_dir, rel = stack.pop()
                deadline.check("walking the image layers")
                try:
                    entries = os.scandir(host_dir)
                except (FileNotFoundError, NotADirectoryError, PermissionError):
                    continue
                with entries:
                    for item in entries:
                        name = item.name
                        if item.is_dir(follow_symlinks=False):
                            if name in PRUNE_ANY or (not rel and name in PRUNE_TOP):
                                continue
                            child = rel + "/" + name
                            if name in ("site-packages", "dist-packages"):
                                sites.add(child)
                            stack.append((item.path, child))
                        elif name.startswith("libnccl.so") and NCCL_NAME_RE.match(name):
                            libraries.add(rel + "/" + name)
        visible_libs = sorted(path for path in libraries if self._visible(path, ("file", "link")))
        visible_sites = sorted(path for path in sites if self._visible(path, ("dir",)))
        return visible_libs, visible_sites

    def _visible(self, path: str, kinds: t.Tuple[str, ...]) -> bool:
        entry = self.lstat(path)
        return entry is not None and entry.kind in kinds


# --------------------------------------------------------------------------- Docker archive API


# Go's os.FileMode type bits, as the Docker archive API reports them.
_GO_MODE_DIR = 1 << 31
_GO_MODE_SYMLINK = 1 << 27
_GO_MODE_TYPE = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)


def decode_path_stat(header: t.Optional[str]) -> t.Optional[t.Dict[str, t.Any]]:
    """The ``X-Docker-Container-Path-Stat`` header (base64 JSON) as a dict."""
    if not header:
        return None
    return json.loads(base64.b64decode(header).decode("utf-8"))


def entry_from_path_stat(stat: t.Mapping[str, t.Any], path: str) -> Entry:
    mode = int(stat.get("mode") or 0)
    if mode & _GO_MODE_SYMLINK:
        kind = "link"
    elif mode & _GO_MODE_DIR:
        kind = "dir"
    elif mode & _GO_MODE_TYPE:
        kind = "other"
    else:
        kind = "file"
    return Entry(kind, int(stat.get("size") or 0), stat.get("linkTarget") or None, path)


class _ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks that refuses to read more than ``limit`` bytes."""

    def __init__(self, chunks: t.Iterator[bytes], limit: int, what: str) -> None:
        super().__init__()
        self._chunks = chunks
        self._buffer = b""
        self._limit = limit
        self._what = what
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
            self.total += len(self._buffer)
            if self.total > self._limit:
                raise TooLarge("%s is larger than %d bytes" % (self._what, self._limit))
        size = min(len(buffer), len(self._buffer))
        buffer[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


class ArchiveFS(ImageFS):
    """Files of a created (never started) container through the Docker archive API."""

    method = "archive"

    def __init__(self, container: t.Any, api: t.Any, listing_limit: int = LISTING_LIMIT) -> None:
        self.container = container
        self.api = api
        self.listing_limit = listing_limit
        self._stats: t.Dict[str, t.Optional[Entry]] = {}
        self.requests = 0

    def _url(self) -> str:
        return "%s/v%s/containers/%s/archive" % (self.api.base_url, self.api.api_version, self.container.id)

    def lstat(self, path: str) -> t.Optional[Entry]:
        path = normpath(path)
        if path not in self._stats:
            self.requests += 1
            response = self.api.head(self._url(), params={"path": path}, timeout=self.api.timeout)
            if response.status_code == 404:
                self._stats[path] = None
            elif response.status_code >= 400:
                raise ImageFSError("HEAD archive %s failed with HTTP %s" % (path, response.status_code))
            else:
                stat = decode_path_stat(response.headers.get("X-Docker-Container-Path-Stat"))
                self._stats[path] = None if stat is None else entry_from_path_stat(stat, path)
        return self._stats[path]

    def realpath(self, path: str) -> t.Optional[str]:
        # The engine resolves links in the parents itself and reports a link's fully resolved target.
        path = normpath(path)
        entry = self.lstat(path)
        if entry is None:
            return None
        if entry.kind == "link":
            target = normpath(entry.target or "")
            found = self.lstat(target)
            return target if found is not None and found.kind != "link" else None
        return path

    def _members(self, path: str, limit: int) -> t.Iterator[t.Tuple[tarfile.TarFile, tarfile.TarInfo]]:
        self.requests += 1
        chunks, _stat = self.container.get_archive(path)
        reader = _ChunkReader(iter(chunks), limit, path)
        try:
            with tarfile.open(fileobj=io.BufferedReader(reader), mode="r|") as archive:
                for member in archive:
                    yield archive, member
        except tarfile.TarError as exc:
            raise ImageFSError("the archive of %s could not be read: %s" % (path, exc)) from exc
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def read_file(self, path: str, limit: int) -> bytes:
        entry = self.lstat(path)
        if entry is None or entry.kind != "file":
            raise ImageFSError("%s is not a regular file in the image" % path)
        if entry.size > limit:
            raise TooLarge("%s is larger than %d bytes" % (path, limit))
        for archive, member in self._members(path, limit + 64 * 1024):
            if member.isfile():
                handle = archive.extractfile(member)
                return handle.read() if handle is not None else b""
        raise ImageFSError("the archive of %s holds no file" % path)

    def listdir(self, path: str) -> t.Optional[t.List[str]]:
        real = self.realpath(path)
        if real is None or not self.is_dir(real):
            return None
        names: t.Set[str] = set()
        for _archive, member in self._members(real, self.listing_limit):
            parts = member.name.strip("/").split("/")
            if len(parts) >= 2 and parts[1]:
                names.add(parts[1])
        return sorted(names)


# --------------------------------------------------------------------------- parsing helpers


def canonical_name(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_dist_dir(dirname: str) -> t.Optional[t.Tuple[str, str]]:
    """``(canonical name, version)`` of a ``name-version.dist-info`` / ``.egg-info`` entry."""
    for suffix in (".dist-info", ".egg-info"):
        if dirname.endswith(suffix):
            stem = dirname[:-len(suffix)]
            name, sep, version = stem.partition("-")
            if name:
                return canonical_name(name), version.split("-py")[0] if sep else ""
    return None


def parse_metadata(text: str) -> t.Dict[str, t.Any]:
    """``name``, ``version`` and ``requires_dist`` (as written, markers included) from a METADATA/PKG-INFO text."""
    head = re.split(r"\r?\n\r?\n", text, maxsplit=1)[0]
    message = email.parser.HeaderParser().parsestr(head)
    requires = [" ".join(str(item).split()) for item in (message.get_all("Requires-Dist") or [])]
    name = message.get("Name")
    version = message.get("Version")
    return {"name": str(name).strip() if name else None, "version": str(version).strip() if version else None,
            "requires_dist": requires}


def module_version(text: str) -> t.Optional[str]:
    """The ``__version__``/``version`` string literal of a Python source file."""
    match = VERSION_RE.search(text)
    return match.group(1) if match else None


def nccl_header_version(text: str) -> t.Optional[str]:
    """``2.27.3`` from the ``NCCL_MAJOR``/``NCCL_MINOR``/``NCCL_PATCH`` defines of ``nccl.h``."""
    found = dict(NCCL_HEADER_RE.findall(text))
    if not all(key in found for key in ("MAJOR", "MINOR", "PATCH")):
        return None
    return "%s.%s.%s" % (found["MAJOR"], found["MINOR"], found["PATCH"])


def nccl_name_version(name: str) -> t.Optional[str]:
    """The version a ``libnccl.so.X.Y.Z`` file name carries; None for ``libnccl.so`` and the bare soname ``libnccl.so.2``."""
    match = NCCL_NAME_RE.match(name)
    if not match or not match.group(1) or "." not in match.group(1):
        return None
    return match.group(1)


def env_pairs(env: t.Optional[t.Sequence[str]]) -> t.List[t.Tuple[str, str]]:
    pairs = []
    for item in env or []:
        name, _sep, value = item.partition("=")
        pairs.append((name, value))
    return pairs


def env_value_allowed(name: str, value: str) -> bool:
    """True when a variable's value may be returned: allowlisted by name, no secret-like name, no credentials in a URL."""
    if ENV_SECRET_RE.search(name) or URL_USERINFO_RE.search(value):
        return False
    return name in ENV_VALUE_NAMES or name.startswith(ENV_VALUE_PREFIXES)


def safe_env(env: t.Optional[t.Sequence[str]]) -> t.Tuple[t.List[str], t.Dict[str, str]]:
    """All variable names (image order) and the values of the allowlisted ones."""
    pairs = env_pairs(env)
    return [name for name, _value in pairs], {name: value for name, value in pairs if env_value_allowed(name, value)}


# --------------------------------------------------------------------------- inspection


def _unique(items: t.Iterable[str]) -> t.List[str]:
    seen: t.Set[str] = set()
    result = []
    for item in items:
        if item not in seen:
            seen.add(item)
            result.append(item)
    return result


def find_python(fs: ImageFS, env: t.Mapping[str, str]) -> t.Optional[t.Dict[str, t.Any]]:
    """The interpreter a bare ``python3`` (or ``python``) finds on the image's PATH, with its version and site dirs."""
    search = [item for item in (env.get("PATH") or DEFAULT_PATH).split(":") if item.startswith("/")]
    for name in ("python3", "python"):
        for directory in search:
            path = normpath(directory + "/" + name)
            found = fs.stat(path)
            if found is None or found[1].kind != "file":
                continue
            return _describe_python(fs, path, found[0])
    return None


def _describe_python(fs: ImageFS, path: str, resolved: str) -> t.Dict[str, t.Any]:
    prefix = posixpath.dirname(posixpath.dirname(path))
    base_prefix = posixpath.dirname(posixpath.dirname(resolved))
    venv_cfg = fs.read_text(prefix + "/pyvenv.cfg", 64 * 1024)
    cfg: t.Dict[str, str] = {}
    for line in (venv_cfg or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            cfg[key.strip().lower()] = value.strip()
    match = re.search(r"python(\d+\.\d+)$", posixpath.basename(resolved))
    short = match.group(1) if match else None
    version = cfg.get("version_info") or cfg.get("version")
    if short is None and version:
        short = ".".join(version.split(".")[:2])
    if short is None:
        candidates = [name for name in (fs.listdir(base_prefix + "/lib") or []) if re.match(r"^python\d+\.\d+$", name)]
        short = sorted(candidates)[-1][len("python"):] if candidates else None
    if version is None and short is not None:
        header = fs.read_text("%s/include/python%s/patchlevel.h" % (base_prefix, short), 256 * 1024)
        found = PY_VERSION_RE.search(header or "")
        version = found.group(1) if found else short
    venv = venv_cfg is not None
    sites: t.List[str] = []
    if short is not None:
        if venv:
            sites.append("%s/lib/python%s/site-packages" % (prefix, short))
        if not venv or cfg.get("include-system-site-packages", "").lower() == "true":
            if not venv:
                sites.append("/root/.local/lib/python%s/site-packages" % short)
            if base_prefix == "/usr":
                sites += ["/usr/local/lib/python%s/dist-packages" % short, "/usr/lib/python3/dist-packages",
                          "/usr/lib/python%s/dist-packages" % short]
            sites += ["%s/lib/python%s/site-packages" % (base_prefix, short),
                      "%s/lib/python%s/dist-packages" % (base_prefix, short)]
    return {"path": path, "resolved": resolved, "version": version, "prefix": prefix if venv else base_prefix,
            "venv": venv, "sys_path_sites": _unique(sites)}


def _read_metadata(fs: ImageFS, dist_dir: str) -> t.Optional[t.Dict[str, t.Any]]:
    for name in ("METADATA", "PKG-INFO"):
        text = fs.read_text(dist_dir + "/" + name, TEXT_LIMIT)
        if text is not None:
            return parse_metadata(text)
    if dist_dir.endswith(".egg-info"):  # an egg-info may be a single file
        text = fs.read_text(dist_dir, TEXT_LIMIT)
        if text is not None:
            return parse_metadata(text)
    return None


class _Site:
    """One site-packages directory, listed once when listing is cheap."""

    def __init__(self, fs: ImageFS, path: str) -> None:
        self.fs = fs
        self.path = path
        self._names: t.Optional[t.List[str]] = None
        self._dists: t.Dict[t.Any, t.Optional[t.Dict[str, t.Any]]] = {}

    @property
    def names(self) -> t.Optional[t.List[str]]:
        if self._names is None and self.fs.cheap_listing:
            self._names = self.fs.listdir(self.path) or []
        return self._names

    def has_package(self, module: str) -> bool:
        names = self.names
        first = module.split("/")[0]
        if names is not None and first not in names:
            return False
        return self.fs.is_dir(self.path + "/" + module)

    def dist(self, dist_names: t.Sequence[str], module: str, version_files: t.Sequence[str]) -> t.Optional[t.Dict[str, t.Any]]:
        """The installed distribution (METADATA of its dist-info), or the version its package declares."""
        key = (tuple(dist_names), module)
        if key not in self._dists:
            self._dists[key] = self._dist(dist_names, module, version_files)
        found = self._dists[key]
        return None if found is None else dict(found)

    def _dist(self, dist_names: t.Sequence[str], module: str, version_files: t.Sequence[str]) -> t.Optional[t.Dict[str, t.Any]]:
        wanted = set(dist_names)
        names = self.names
        if names is not None:
            for name in names:
                split = split_dist_dir(name)
                if split is None or not (split[0] in wanted or (module == "nvidia/nccl" and NCCL_DIST_RE.match(split[0]))):
                    continue
                meta = _read_metadata(self.fs, self.path + "/" + name)
                if meta and meta.get("version"):
                    meta["path"] = self.path + "/" + name
                    meta["source"] = "dist-info" if name.endswith(".dist-info") else "egg-info"
                    return meta
        if not self.has_package(module):
            return None
        version = None
        for filename in version_files:
            text = self.fs.read_text("%s/%s/%s" % (self.path, module, filename), TEXT_LIMIT)
            version = module_version(text or "")
            if version:
                break
        if module == "nvidia/nccl":
            version = nccl_header_version(self.fs.read_text(self.path + "/nvidia/nccl/include/nccl.h", 1024 * 1024) or "")
        if names is None and version:
            # No listing (ArchiveFS): try the dist-info directory names pip would have written.
            for dist in dist_names:
                dist_dir = "%s/%s-%s.dist-info" % (self.path, dist.replace("-", "_"), version)
                meta = _read_metadata(self.fs, dist_dir)
                if meta and meta.get("version"):
                    meta["path"] = dist_dir
                    meta["source"] = "dist-info"
                    return meta
        # A package without readable metadata or version (ArchiveFS, a compiled __version__) is present, version unknown.
        return {"name": dist_names[0], "version": version, "requires_dist": [], "path": "%s/%s" % (self.path, module),
                "source": "package"}

    def pth_paths(self) -> t.List[str]:
        """Directories named by ``.pth`` files (editable installs), when the directory can be listed."""
        found = []
        for name in self.names or []:
            if not name.endswith(".pth"):
                continue
            for line in (self.fs.read_text(self.path + "/" + name, 1024 * 1024) or "").splitlines():
                line = line.strip()
                if line.startswith("/"):
                    found.append(normpath(line))
        return found


def _model_files(fs: ImageFS, vllm_dir: str) -> t.Optional[t.List[str]]:
    names = fs.listdir(vllm_dir + "/" + MODELS_DIR[len("vllm/"):])
    return None if names is None else [name for name in names if name not in PRUNE_ANY]


def _module_exists(fs: ImageFS, models_dir: str, names: t.Sequence[str], module: str) -> bool:
    parts = module.split(".")
    if len(parts) == 1:
        if parts[0] + ".py" in names:
            return True
        return parts[0] in names and fs.exists("%s/%s/__init__.py" % (models_dir, parts[0]))
    path = models_dir + "/" + "/".join(parts)
    return fs.exists(path + ".py") or fs.exists(path + "/__init__.py")


def registry_architectures(text: str) -> t.Dict[str, t.List[str]]:
    """Per registry dict, the sorted architectures it maps itself (``**{...}`` literals included, ``**OTHER`` spreads not)."""
    registry = _vllm_registry.parse_registry(text)
    result = {}
    for name, table in registry.model_tables.items():
        archs = sorted({entry.architecture for entry in table.entries})
        if archs:
            result[name] = archs
    return result


def nccl_libraries(fs: ImageFS, paths: t.Iterable[str], sites: t.Sequence[str],
                   nccl_dists: t.Mapping[str, t.Dict[str, t.Any]]) -> t.List[t.Dict[str, t.Any]]:
    """Every distinct NCCL library file, with the links that point at it and its version."""
    copies: t.Dict[t.Any, t.Dict[str, t.Any]] = {}
    for path in sorted(set(paths)):
        entry = fs.lstat(path)
        if entry is None:
            continue
        real = path
        if entry.kind == "link":
            resolved = fs.stat(path)
            if resolved is None or resolved[1].kind != "file":
                continue
            real, entry = resolved
        if entry.kind != "file":
            continue
        key = entry.key if entry.key is not None else real
        copy = copies.get(key)
        if copy is None:
            copy = copies[key] = {"path": real, "size": entry.size, "links": []}
        if path != copy["path"]:
            copy["links"].append(path)
    result = []
    for copy in copies.values():
        copy["links"] = sorted(set(copy["links"]) - {copy["path"]})
        version, source, package = nccl_name_version(posixpath.basename(copy["path"])), "file name", None
        for link in copy["links"]:
            if version is None:
                version = nccl_name_version(posixpath.basename(link))
        for site in sites:
            if copy["path"].startswith(site + "/nvidia/nccl/lib/") and site in nccl_dists:
                package = nccl_dists[site]["name"]
                if version is None:
                    version, source = nccl_dists[site]["version"], "dist-info"
        if version is None:
            header = fs.read_text(posixpath.dirname(posixpath.dirname(copy["path"])) + "/include/nccl.h", 1024 * 1024)
            version = nccl_header_version(header or "")
            source = "nccl.h"
        copy.update(version=version, version_from=source if version else None, package=package)
        result.append(copy)
    return sorted(result, key=lambda item: item["path"])


def _probe_nccl(fs: ImageFS, env: t.Mapping[str, str], sites: t.Sequence[str]) -> t.List[str]:
    """Candidate NCCL paths for readers that cannot walk: the usual library dirs, LD_LIBRARY_PATH and site-packages."""
    dirs = [item for item in (env.get("LD_LIBRARY_PATH") or "").split(":") if item.startswith("/")]
    dirs += list(NCCL_SYSTEM_DIRS) + [site + "/" + sub for site in sites for sub in NCCL_SITE_DIRS]
    found = []
    for directory in _unique(normpath(item) for item in dirs):
        if not fs.is_dir(directory):
            continue
        for name in NCCL_NAMES:
            path = directory + "/" + name
            entry = fs.lstat(path)
            if entry is not None:
                found.append(path)
                if entry.kind == "link" and entry.target:
                    found.append(normpath(entry.target))
    return found


def _library_file(fs: ImageFS, path: str) -> t.Optional[str]:
    """The file PATH is (links resolved inside the image), or None when it is missing or not a file."""
    found = fs.stat(path)
    return found[0] if found is not None and found[1].kind == "file" else None


def verbs_libraries(fs: ImageFS, env: t.Mapping[str, str]) -> t.Dict[str, t.Any]:
    """The RDMA user-space libraries the image's dynamic loader would find: ``libibverbs`` (libibverbs.so.1),
    ``mlx5`` (libmlx5.so.1) and ``mlx5_provider`` (libibverbs/libmlx5-rdmav*.so), each the path found or None (a
    link is reported where it is, its target must be a file); ``complete`` when libibverbs and the provider are both
    there (what NCCL's IB transport needs to see a ConnectX device), and ``missing``, what is not."""
    dirs = [item for item in (env.get("LD_LIBRARY_PATH") or "").split(":") if item.startswith("/")]
    result: t.Dict[str, t.Any] = {"libibverbs": None, "mlx5": None, "mlx5_provider": None}
    for directory in _unique(normpath(item) for item in dirs + list(VERBS_DIRS)):
        if not fs.is_dir(directory):
            continue
        for key, name in (("libibverbs", VERBS_LIBRARY), ("mlx5", MLX5_LIBRARY)):
            if result[key] is None and _library_file(fs, directory + "/" + name):
                result[key] = directory + "/" + name
        if result["mlx5_provider"] is None:
            for name in sorted(fs.listdir(directory + "/libibverbs") or []):
                if MLX5_PROVIDER_RE.match(name) and _library_file(fs, directory + "/libibverbs/" + name):
                    result["mlx5_provider"] = directory + "/libibverbs/" + name
                    break
    result["missing"] = [text for key, text in VERBS_MISSING.items() if result[key] is None]
    result["complete"] = not result["missing"]
    return result


def inspect_image(fs: ImageFS, config: t.Optional[t.Mapping[str, t.Any]], architectures: t.Optional[t.Sequence[str]] = None,
                  model_modules: t.Optional[t.Sequence[str]] = None, deadline: t.Optional[Deadline] = None) -> t.Dict[str, t.Any]:
    """Everything ``vllm_image_info`` reports from the files of an image; ``config`` is the image's ``Config``."""
    deadline = deadline or Deadline(None)
    config = config or {}
    env = dict(env_pairs(config.get("Env")))
    warnings: t.List[str] = []

    walked_libs: t.List[str] = []
    walked_sites: t.List[str] = []
    if fs.can_walk:
        walked_libs, walked_sites = fs.walk(deadline)  # type: ignore[attr-defined]

    python = find_python(fs, env)
    deadline.check("finding the Python interpreter")
    candidates = [normpath(item) for item in (env.get("PYTHONPATH") or "").split(":") if item.startswith("/")]
    candidates += (python or {}).get("sys_path_sites", [])
    candidates += walked_sites
    sites = [_Site(fs, path) for path in _unique(candidates) if fs.is_dir(path)]
    for site in list(sites):
        for extra in site.pth_paths():
            if extra not in [item.path for item in sites] and fs.is_dir(extra):
                sites.append(_Site(fs, extra))

    vllm_sites = [site for site in sites if site.has_package("vllm") or site.dist(*PACKAGES["vllm"]) is not None]
    ordered = vllm_sites[:1] + [site for site in sites if site not in vllm_sites[:1]]
    deadline.check("reading site-packages")

    versions: t.Dict[str, t.Optional[str]] = {}
    dists: t.Dict[str, t.Optional[t.Dict[str, t.Any]]] = {}
    for key, (dist_names, module, version_files) in PACKAGES.items():
        dists[key] = None
        for site in ordered:
            meta = site.dist(dist_names, module, version_files)
            if meta is not None:
                meta["site"] = site.path
                dists[key] = meta
                break
        versions[key] = dists[key]["version"] if dists[key] else None
    for key, meta in dists.items():
        if meta is not None and meta["version"] is None:
            warnings.append("%s is installed (%s) but its version could not be read%s"
                            % (key, meta["path"], "" if fs.cheap_listing else " without listing site-packages"))
    nccl_dists = {}
    for site in ordered:
        meta = site.dist(*PACKAGES["nccl"])
        if meta is not None and meta["version"] is not None:
            nccl_dists[site.path] = meta
    deadline.check("reading the package metadata")

    result: t.Dict[str, t.Any] = {
        "python": None if python is None else {key: python[key] for key in ("path", "resolved", "version", "prefix", "venv")},
        "site_packages": [site.path for site in vllm_sites],
        "versions": versions,
        "distributions": {key: None if meta is None else {"name": meta["name"], "version": meta["version"],
                                                          "path": meta["path"], "source": meta["source"]}
                          for key, meta in dists.items()},
        "ray_present": dists["ray"] is not None,
        "vllm_requires": list(dists["vllm"]["requires_dist"]) if dists["vllm"] else [],
        "registry_path": None,
        "architectures": {},
        "supported_architectures": [],
        "model_files": [],
        "model_modules": {},
    }

    vllm_dir = None
    for site in ordered:
        if site.has_package("vllm"):
            vllm_dir = site.path + "/vllm"
            break
    if vllm_dir is not None:
        registry_path = vllm_dir + REGISTRY_FILE[len("vllm"):]
        text = fs.read_text(registry_path)
        if text is None:
            warnings.append("%s has no %s; the registered architectures are unknown" % (vllm_dir, REGISTRY_FILE[len("vllm/"):]))
        else:
            result["registry_path"] = registry_path
            try:
                result["architectures"] = registry_architectures(text)
            except _vllm_registry.RegistryError as exc:
                warnings.append("%s could not be parsed: %s" % (registry_path, exc))
        result["supported_architectures"] = sorted({arch for archs in result["architectures"].values() for arch in archs})
        names = _model_files(fs, vllm_dir) or []
        result["model_files"] = names
        models_dir = vllm_dir + MODELS_DIR[len("vllm"):]
        result["model_modules"] = {module: _module_exists(fs, models_dir, names, module) for module in model_modules or []}
    elif model_modules:
        result["model_modules"] = {module: False for module in model_modules}
    if architectures is not None:
        supported = set(result["supported_architectures"])
        result["missing_architectures"] = [arch for arch in architectures if arch not in supported]
    deadline.check("reading vLLM's registry")

    if not fs.can_walk:
        walked_libs = _probe_nccl(fs, env, [site.path for site in ordered])
    libraries = nccl_libraries(fs, walked_libs, [site.path for site in ordered], nccl_dists)
    result["nccl_libraries"] = libraries
    result["nccl_conflict"] = len(libraries) > 1
    result["verbs"] = verbs_libraries(fs, env)
    deadline.check("looking for the RDMA user-space libraries")
    if result["nccl_conflict"]:
        warnings.append("the image holds %d copies of NCCL: %s; a pip NCCL beside the system one hangs two-Spark inference "
                        "(%s): keep one, or make sure every process loads the same one"
                        % (len(libraries), ", ".join("%s (%s)" % (lib["path"], lib["version"] or "version unknown")
                                                     for lib in libraries), NCCL_ISSUE))
    if vllm_dir is None:
        warnings.append("no vllm package was found in the image's site-packages (%s)"
                        % (", ".join(site.path for site in ordered) or "none found"))
    result["warnings"] = warnings
    return result
