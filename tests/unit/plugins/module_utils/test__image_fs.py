# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of plugins/module_utils/_image_fs.py: overlay layer resolution, the archive reader and the inspection."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _image_fs

from ansible_collections.dgxspark.vllm.tests.unit.plugins.module_utils.image_trees import (
    REGISTRY, SITE, ArchiveServer, flatten, layers, link, mkdir, vllm_image, write)


# --------------------------------------------------------------------------- overlay layer resolution


@pytest.fixture
def stack(tmp_path):
    """Three layers (bottom, middle, top) exercising shadowing, whiteouts and opaque directories."""
    bottom, middle, top = layers(tmp_path, 3)
    write(bottom, "/etc/a", "bottom-a")
    write(bottom, "/etc/b", "bottom-b")
    write(bottom, "/etc/gone", "bottom-gone")
    write(bottom, "/data/old1", "1")
    write(bottom, "/data/old2", "2")
    write(bottom, "/tree/sub/deep", "deep")
    write(bottom, "/was-dir/x", "x")
    write(bottom, "/was-file", "file")
    write(middle, "/etc/a", "middle-a")
    write(middle, "/etc/.wh.gone")
    write(middle, "/data/.wh..wh..opq")
    write(middle, "/data/new", "new")
    write(middle, "/.wh.tree")
    write(middle, "/was-dir", "now a file")
    write(middle, "/was-file/inside", "now a dir")
    write(top, "/etc/c", "top-c")
    write(top, "/tree/fresh", "recreated")  # recreated above the whiteout: only the new contents
    link(top, "/usr/lib64", "lib")
    write(bottom, "/usr/lib/libx.so", "x")
    link(top, "/abs", "/etc")
    link(top, "/loop1", "loop2")
    link(top, "/loop2", "loop1")
    link(top, "/dangling", "/nowhere")
    return _image_fs.OverlayFS([top, middle, bottom])


def read(fs, path):
    return fs.read_text(path)


def test_upper_layers_shadow_lower_ones(stack):
    assert read(stack, "/etc/a") == "middle-a"
    assert read(stack, "/etc/b") == "bottom-b"
    assert read(stack, "/etc/c") == "top-c"
    assert stack.listdir("/etc") == ["a", "b", "c"]


def test_wh_file_hides_the_name_in_lower_layers(stack):
    assert stack.lstat("/etc/gone") is None
    assert read(stack, "/etc/gone") is None
    assert "gone" not in stack.listdir("/etc")


def test_opaque_directory_hides_lower_contents_but_keeps_its_own(stack):
    assert stack.listdir("/data") == ["new"]
    assert stack.lstat("/data/old1") is None
    assert read(stack, "/data/new") == "new"


def test_whited_out_directory_recreated_above_has_only_new_contents(stack):
    assert stack.listdir("/tree") == ["fresh"]
    assert stack.lstat("/tree/sub") is None
    assert stack.lstat("/tree/sub/deep") is None


def test_file_and_directory_replacing_each_other(stack):
    assert stack.lstat("/was-dir").kind == "file"
    assert stack.lstat("/was-dir/x") is None
    assert stack.lstat("/was-file").kind == "dir"
    assert stack.listdir("/was-file") == ["inside"]


def test_links_resolve_inside_the_image(stack):
    assert stack.lstat("/abs") == _image_fs.Entry("link", 0, "/etc", stack.lstat("/abs").key)
    assert stack.realpath("/abs/a") == "/etc/a"
    assert read(stack, "/abs/b") == "bottom-b"
    assert stack.realpath("/usr/lib64/libx.so") == "/usr/lib/libx.so"
    assert stack.listdir("/abs") == ["a", "b", "c"]
    assert stack.realpath("/loop1") is None
    assert stack.realpath("/dangling") is None
    assert stack.realpath("/etc/a/../c") == "/etc/c"
    assert stack.realpath("/../../etc/a") == "/etc/a"
    assert stack.realpath("/etc/a/x") is None  # a file is not a directory


def test_root_listing_merges_every_layer(stack):
    assert stack.listdir("/") == ["abs", "dangling", "data", "etc", "loop1", "loop2", "tree", "usr", "was-dir", "was-file"]


def test_read_limit(stack):
    with pytest.raises(_image_fs.TooLarge):
        stack.read_file("/etc/a", 3)
    assert stack.read_file("/etc/a", 8) == b"middle-a"


def test_native_overlay2_whiteout_and_opaque_xattr(tmp_path):
    """What overlay2 really stores: a 0:0 character device for a deleted name, an xattr for an opaque directory."""
    bottom, top = layers(tmp_path, 2)
    write(bottom, "/d/keep", "k")
    write(bottom, "/d/del", "d")
    write(bottom, "/o/lower", "l")
    mkdir(top, "/d")
    write(top, "/o/upper", "u")
    try:
        os.mknod(os.path.join(top, "d", "del"), 0o600 | 0o020000, os.makedev(0, 0))
    except PermissionError:
        pytest.skip("creating a character device needs root")
    for attr in _image_fs.OPAQUE_XATTRS:
        try:
            os.setxattr(os.path.join(top, "o"), attr, b"y")
            break
        except OSError:
            continue
    else:
        pytest.skip("the temporary file system takes no overlay xattrs")
    fs = _image_fs.OverlayFS([top, bottom])
    assert fs.listdir("/d") == ["keep"]
    assert fs.lstat("/d/del") is None
    assert fs.listdir("/o") == ["upper"]
    assert fs.lstat("/o/lower") is None


def test_walk_finds_only_visible_nccl_and_site_dirs(tmp_path):
    fs = _image_fs.OverlayFS(vllm_image(tmp_path))
    libs, sites = fs.walk(_image_fs.Deadline(None))
    assert libs == ["/usr/lib/aarch64-linux-gnu/libnccl.so", "/usr/lib/aarch64-linux-gnu/libnccl.so.2",
                    "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9", SITE + "/nvidia/nccl/lib/libnccl.so.2"]
    assert sites == ["/usr/lib/python3/dist-packages", SITE]


def test_walk_respects_the_deadline(tmp_path):
    fs = _image_fs.OverlayFS(vllm_image(tmp_path))
    deadline = _image_fs.Deadline(0.001)
    time.sleep(0.01)
    with pytest.raises(_image_fs.ImageFSError, match="walking the image layers took longer than the 0.001s timeout"):
        fs.walk(deadline)


def test_from_graph_driver(tmp_path):
    top, bottom = layers(tmp_path, 2)
    fs = _image_fs.OverlayFS.from_graph_driver({"Name": "overlay2", "Data": {"UpperDir": top, "LowerDir": bottom,
                                                                             "MergedDir": "/nope", "WorkDir": "/nope"}})
    assert fs.layers == [top, bottom]
    with pytest.raises(_image_fs.ImageFSError, match="the engine stores images with 'overlayfs', not overlay2"):
        _image_fs.OverlayFS.from_graph_driver({"Name": "overlayfs", "Data": None})
    with pytest.raises(_image_fs.ImageFSError, match="layer directory /var/lib/docker-elsewhere/l1/diff is not readable"):
        _image_fs.OverlayFS.from_graph_driver({"Name": "overlay2", "Data": {"UpperDir": "/var/lib/docker-elsewhere/l1/diff"}})
    with pytest.raises(_image_fs.ImageFSError, match="names no layer directories"):
        _image_fs.OverlayFS.from_graph_driver({"Name": "overlay2", "Data": {}})


# --------------------------------------------------------------------------- parsing helpers


def test_parse_metadata_headers_only_with_markers():
    meta = _image_fs.parse_metadata("Metadata-Version: 2.1\nName: vllm\nVersion: 0.14.1\n"
                                    "Requires-Dist: transformers<5,>=4.56.0\n"
                                    "Requires-Dist: ray[cgraph]>=2.48.0;\n  extra == \"ray\"\n"
                                    "\nRequires-Dist: from-the-body\n")
    assert meta == {"name": "vllm", "version": "0.14.1",
                    "requires_dist": ["transformers<5,>=4.56.0", 'ray[cgraph]>=2.48.0; extra == "ray"']}
    assert _image_fs.parse_metadata("garbage") == {"name": None, "version": None, "requires_dist": []}


@pytest.mark.parametrize("name, expected", [
    ("libnccl.so.2.28.9", "2.28.9"), ("libnccl.so.2.27", "2.27"), ("libnccl.so.2", None), ("libnccl.so", None),
    ("libnccl.so.2.28.9.bak", None), ("libnccl-net.so", None), ("libnccl_static.a", None),
])
def test_nccl_name_version(name, expected):
    assert _image_fs.nccl_name_version(name) == expected


@pytest.mark.parametrize("text, expected", [
    ("__version__ = version = '0.17.1rc1.dev3+g1f2a'\n", "0.17.1rc1.dev3+g1f2a"),
    ("__version__: str\nversion: str\n__version__ = version = '0.14.1'\n", "0.14.1"),
    ('__version__ = "4.57.3"\n', "4.57.3"),
    ('version = "2.54.1"\ncommit = "abc"\n', "2.54.1"),
    ("from ._version import __version__\n", None),
])
def test_module_version(text, expected):
    assert _image_fs.module_version(text) == expected


def test_nccl_header_version():
    assert _image_fs.nccl_header_version("#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n") == "2.28.9"
    assert _image_fs.nccl_header_version("#define NCCL_MAJOR 2\n") is None


def test_split_dist_dir():
    assert _image_fs.split_dist_dir("nvidia_nccl_cu13-2.27.7.dist-info") == ("nvidia-nccl-cu13", "2.27.7")
    assert _image_fs.split_dist_dir("vllm-0.14.1-py3.12.egg-info") == ("vllm", "0.14.1")
    assert _image_fs.split_dist_dir("vllm") is None


def test_safe_env_returns_names_and_only_safe_values():
    names, values = _image_fs.safe_env([
        "PATH=/usr/bin", "VLLM_USE_V1=1", "VLLM_API_KEY=sk-1", "HF_TOKEN=hf_x", "NCCL_SOCKET_IFNAME=enp1s0f1np1",
        "PIP_INDEX_URL=https://u:p@example/simple", "RAY_AUTH_TOKEN_PATH=/x", "CUDA_VERSION=13.0",
        "VLLM_MIRROR=https://user:pw@mirror/", "NOVALUE"])
    assert names == ["PATH", "VLLM_USE_V1", "VLLM_API_KEY", "HF_TOKEN", "NCCL_SOCKET_IFNAME", "PIP_INDEX_URL",
                     "RAY_AUTH_TOKEN_PATH", "CUDA_VERSION", "VLLM_MIRROR", "NOVALUE"]
    assert values == {"PATH": "/usr/bin", "VLLM_USE_V1": "1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1", "CUDA_VERSION": "13.0"}


def test_registry_architectures_leave_out_spread_only_dicts():
    assert _image_fs.registry_architectures(REGISTRY) == {
        "_TEXT_GENERATION_MODELS": ["LlamaForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM"],
        "_MULTIMODAL_MODELS": ["Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"],
    }


# --------------------------------------------------------------------------- inspection


EXPECTED_NCCL = (
    {"path": "/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9", "size": 2048, "version": "2.28.9",
     "version_from": "file name", "package": None,
     "links": ["/usr/lib/aarch64-linux-gnu/libnccl.so", "/usr/lib/aarch64-linux-gnu/libnccl.so.2"]},
    {"path": SITE + "/nvidia/nccl/lib/libnccl.so.2", "size": 1024, "version": "2.27.7", "version_from": "dist-info",
     "package": "nvidia-nccl-cu13", "links": []},
)


def check_vllm_result(result, nccl=EXPECTED_NCCL):
    assert result["python"] == {"path": "/usr/bin/python3", "resolved": "/usr/bin/python3.12", "version": "3.12.3",
                                "prefix": "/usr", "venv": False}
    assert result["site_packages"] == [SITE]
    assert result["versions"] == {"vllm": "0.17.1", "transformers": "4.57.3", "torch": "2.9.0+cu130", "ray": None,
                                  "tokenizers": "0.22.1", "nccl": "2.27.7" if len(nccl) > 1 else None}
    assert result["ray_present"] is False
    assert result["distributions"]["vllm"] == {"name": "vllm", "version": "0.17.1", "source": "dist-info",
                                               "path": SITE + "/vllm-0.17.1.dist-info"}
    assert result["vllm_requires"] == ["regex", "transformers<5,>=4.56.0", "torch==2.9.0",
                                       'ray[cgraph]>=2.48.0; extra == "ray"']
    assert result["registry_path"] == SITE + "/vllm/model_executor/models/registry.py"
    assert result["architectures"]["_MULTIMODAL_MODELS"] == [
        "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"]
    assert result["supported_architectures"] == ["LlamaForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
                                                 "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"]
    assert result["missing_architectures"] == ["Qwen3_5MTP"]
    assert result["model_files"] == ["__init__.py", "llama.py", "qwen3_5.py", "qwen3_5_mtp.py", "registry.py",
                                     "transformers"]
    assert result["model_modules"] == {"qwen3_5": True, "qwen3_5_mtp": True, "transformers": True, "qwen3_6": False}
    assert result["nccl_libraries"] == list(nccl)
    assert result["nccl_conflict"] is (len(nccl) > 1)


CONFIG = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
ARCHS = ["Qwen3_5MoeForConditionalGeneration", "Qwen3_5MTP"]
MODULES = ["qwen3_5", "qwen3_5_mtp", "transformers", "qwen3_6"]


def test_inspect_layers_reports_two_nccl_copies(tmp_path):
    result = _image_fs.inspect_image(_image_fs.OverlayFS(vllm_image(tmp_path)), CONFIG, ARCHS, MODULES)
    check_vllm_result(result)
    assert len(result["warnings"]) == 1
    assert result["warnings"][0].startswith(
        "the image holds 2 copies of NCCL: /usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9 (2.28.9), " + SITE
        + "/nvidia/nccl/lib/libnccl.so.2 (2.27.7); a pip NCCL beside the system one hangs two-Spark inference")


def test_inspect_layers_single_nccl_is_no_conflict(tmp_path):
    result = _image_fs.inspect_image(_image_fs.OverlayFS(vllm_image(tmp_path, pip_nccl=False)), CONFIG, ARCHS, MODULES)
    check_vllm_result(result, EXPECTED_NCCL[:1])
    assert result["warnings"] == []


def test_inspect_archive_gives_the_same_answers(tmp_path):
    root = flatten(vllm_image(tmp_path / "layers"), tmp_path / "root")
    server = ArchiveServer(root)
    fs = _image_fs.ArchiveFS(server.container, server.api)
    result = _image_fs.inspect_image(fs, CONFIG, ARCHS, MODULES)
    check_vllm_result(result)
    # Only small things are ever fetched: single files and the models directory, never site-packages.
    assert SITE not in server.gets
    assert [path for path in server.gets if not path.endswith((".py", "METADATA", ".h", ".cfg"))] == [
        SITE + "/vllm/model_executor/models"]


VERBS = {"libibverbs": "/usr/lib/aarch64-linux-gnu/libibverbs.so.1", "mlx5": "/usr/lib/aarch64-linux-gnu/libmlx5.so.1",
         "mlx5_provider": "/usr/lib/aarch64-linux-gnu/libibverbs/libmlx5-rdmav34.so", "missing": [], "complete": True}
NO_VERBS = {"libibverbs": None, "mlx5": None, "mlx5_provider": None, "complete": False,
            "missing": ["libibverbs.so.1 (libibverbs1)",
                        "the mlx5 provider libibverbs/libmlx5-rdmav*.so (ibverbs-providers)"]}


@pytest.mark.parametrize("reader", ["layers", "archive"])
@pytest.mark.parametrize("verbs,expected", [
    ("both", VERBS),
    ("", NO_VERBS),
    # removed by a later layer (a slimmed image): what the container sees counts
    ("removed", NO_VERBS),
    ("libibverbs", dict(NO_VERBS, libibverbs=VERBS["libibverbs"], missing=NO_VERBS["missing"][1:])),
])
def test_inspect_reports_the_rdma_userspace_libraries(tmp_path, reader, verbs, expected):
    """The field's images carry libibverbs and the mlx5 provider that NCCL_NET=IB needs; CUDA's aarch64 base images do
    not. Fails at 13f6075, whose image facts had no verbs at all."""
    layer_dirs = vllm_image(tmp_path / "layers", verbs=verbs)
    if reader == "layers":
        fs = _image_fs.OverlayFS(layer_dirs)
    else:
        server = ArchiveServer(flatten(layer_dirs, tmp_path / "root"))
        fs = _image_fs.ArchiveFS(server.container, server.api)
    result = _image_fs.inspect_image(fs, CONFIG, ARCHS, MODULES)
    assert result["verbs"] == expected


def test_verbs_libraries_follow_ld_library_path(tmp_path):
    """An image with rdma-core built into /opt (MOFED-style), found through LD_LIBRARY_PATH as the loader finds it."""
    (base,) = layers(tmp_path, 1)
    write(base, "/opt/rdma/lib/libibverbs.so.1", b"v")
    write(base, "/opt/rdma/lib/libibverbs/libmlx5-rdmav34.so", b"m")
    link(base, "/opt/rdma/lib/libibverbs/libmlx4-rdmav34.so", "/nowhere")
    fs = _image_fs.OverlayFS([base])
    assert _image_fs.verbs_libraries(fs, {})["complete"] is False
    found = _image_fs.verbs_libraries(fs, {"LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/opt/rdma/lib"})
    assert found == {"libibverbs": "/opt/rdma/lib/libibverbs.so.1", "mlx5": None,
                     "mlx5_provider": "/opt/rdma/lib/libibverbs/libmlx5-rdmav34.so", "missing": [], "complete": True}


def test_archive_listing_limit(tmp_path):
    write(tmp_path, "/big/file", b"x" * 50000)
    server = ArchiveServer(tmp_path)
    fs = _image_fs.ArchiveFS(server.container, server.api, listing_limit=10000)
    with pytest.raises(_image_fs.TooLarge):
        fs.listdir("/big")
    with pytest.raises(_image_fs.TooLarge):
        fs.read_file("/big/file", 1000)
    assert fs.lstat("/big/nothing") is None
    assert fs.realpath("/big/file") == "/big/file"


def test_inspect_venv_ray_and_pythonpath(tmp_path):
    base, top = layers(tmp_path, 2)
    write(base, "/usr/bin/python3.11", b"\x7fELF")
    link(base, "/opt/venv/bin/python3", "/usr/bin/python3.11")
    write(base, "/opt/venv/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n")
    venv_site = "/opt/venv/lib/python3.11/site-packages"
    write(top, venv_site + "/ray/_version.py", 'version = "2.54.1"\n')
    write(top, venv_site + "/ray-2.54.1.dist-info/METADATA", "Name: ray\nVersion: 2.54.1\n")
    write(top, venv_site + "/torch/version.py", "__version__ = '2.10.0'\n")
    # vLLM from a source checkout on PYTHONPATH: no dist-info, the version comes from _version.py.
    write(top, "/workspace/vllm/vllm/_version.py", "__version__ = version = '0.18.0.dev1'\n")
    write(top, "/workspace/vllm/vllm/model_executor/models/registry.py", "_TEXT_GENERATION_MODELS = {}\n")
    config = {"Env": ["PATH=/opt/venv/bin:/usr/bin", "PYTHONPATH=/workspace/vllm"]}
    result = _image_fs.inspect_image(_image_fs.OverlayFS([top, base]), config, None, ["qwen3_5"])
    assert result["python"] == {"path": "/opt/venv/bin/python3", "resolved": "/usr/bin/python3.11", "version": "3.11.2",
                                "prefix": "/opt/venv", "venv": True}
    assert result["site_packages"] == ["/workspace/vllm"]
    assert result["versions"] == {"vllm": "0.18.0.dev1", "transformers": None, "torch": "2.10.0", "ray": "2.54.1",
                                  "tokenizers": None, "nccl": None}
    assert result["distributions"]["vllm"]["source"] == "package"
    assert result["distributions"]["torch"]["source"] == "package"
    assert result["ray_present"] is True
    assert result["vllm_requires"] == []
    assert result["architectures"] == {}
    assert result["model_modules"] == {"qwen3_5": False}
    assert "missing_architectures" not in result
    assert result["nccl_libraries"] == [] and result["nccl_conflict"] is False


def test_inspect_image_without_vllm(tmp_path):
    (base,) = layers(tmp_path, 1)
    write(base, "/bin/sh", b"\x7fELF")
    result = _image_fs.inspect_image(_image_fs.OverlayFS([base]), {}, ["LlamaForCausalLM"], ["llama"])
    assert result["python"] is None
    assert result["versions"] == dict.fromkeys(("vllm", "transformers", "torch", "ray", "tokenizers", "nccl"))
    assert result["missing_architectures"] == ["LlamaForCausalLM"]
    assert result["model_modules"] == {"llama": False}
    assert result["warnings"] == ["no vllm package was found in the image's site-packages (none found)"]


def test_unparsable_registry_is_a_warning(tmp_path):
    (base,) = layers(tmp_path, 1)
    write(base, SITE + "/vllm/model_executor/models/registry.py", "_TEXT_GENERATION_MODELS = {\n")
    write(base, "/usr/bin/python3.12", b"")
    result = _image_fs.inspect_image(_image_fs.OverlayFS([base]), {"Env": ["PATH=/usr/bin"]})
    assert result["architectures"] == {} and result["registry_path"] == SITE + "/vllm/model_executor/models/registry.py"
    assert len(result["warnings"]) == 2
    assert result["warnings"][0] == "vllm is installed (%s/vllm) but its version could not be read" % SITE
    assert result["warnings"][1].startswith(SITE + "/vllm/model_executor/models/registry.py could not be parsed: the file "
                                            "is not valid Python")


def test_package_without_readable_version(tmp_path):
    """tokenizers keeps its __version__ in the compiled extension: present, version unknown, a warning."""
    (base,) = layers(tmp_path, 1)
    write(base, "/usr/bin/python3.12", b"")
    write(base, SITE + "/tokenizers/__init__.py", "from .tokenizers import __version__\n")
    write(base, SITE + "/ray/__init__.py", "from ray._version import version as __version__\n")
    result = _image_fs.inspect_image(_image_fs.OverlayFS([base]), {"Env": ["PATH=/usr/bin"]})
    assert result["versions"]["tokenizers"] is None and result["versions"]["ray"] is None
    assert result["distributions"]["tokenizers"] == {"name": "tokenizers", "version": None, "source": "package",
                                                     "path": SITE + "/tokenizers"}
    assert result["ray_present"] is True
    assert result["warnings"][:2] == ["ray is installed (%s/ray) but its version could not be read" % SITE,
                                      "tokenizers is installed (%s/tokenizers) but its version could not be read" % SITE]
