#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.vllm_image_info."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_image_info
short_description: Inspect a vLLM container image without running it and without a GPU
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads the files of a Docker image on this node and reports what a vLLM deployment needs to know about it, without
    starting a container, without running the image's entrypoint and without importing vLLM (which needs a GPU).
  - "Reported: the image's ID, repo digests, labels, architecture, C(ENTRYPOINT) and C(CMD), its environment (see RV(env)),
    the Python interpreter on its C(PATH), the site-packages directories holding vLLM, the versions of vLLM, transformers,
    torch, Ray, tokenizers and the pip NCCL (C(nvidia-nccl-cu*)) from their dist-info C(METADATA), vLLM's C(Requires-Dist)
    lines, the architectures registered in each dict of vLLM's C(vllm/model_executor/models/registry.py) (parsed
    statically), the files under C(vllm/model_executor/models/), every C(libnccl.so*) in the image and the RDMA user-space
    libraries NCCL's IB transport loads (C(libibverbs.so.1) and the mlx5 provider, see RV(verbs))."
  - When the engine uses the overlay2 storage driver and its layer directories are readable on this node, the module reads
    the layers directly (RV(method=layers)). The merged view is resolved top layer first, honouring whiteouts and opaque
    directories. No container is created and nothing is copied.
  - Otherwise (another storage driver, the containerd image store, a remote O(docker_host)) it creates a container from the
    image with the entrypoint C(/nonexistent) and networking disabled, never starts it, reads single files and small
    directories through the Docker archive API (RV(method=archive)) and removes the container (and its anonymous volumes)
    at the end, also on failure. The container is named C(dgxspark-inspect-<random>). In this mode NCCL libraries are only
    looked for in the usual library directories, C(LD_LIBRARY_PATH) and below each site-packages (C(nvidia/nccl/lib),
    C(torch/lib)), and package versions are read from each package's version file and the dist-info named after it.
  - More than one distinct NCCL library file sets RV(nccl_conflict) and adds a warning; a pip NCCL beside the system one
    hangs two-Spark inference (vLLM issue 42354).
  - Read-only; it never reports a change.
requirements:
  - docker (the Docker SDK for Python, 5.0 or later) on the managed node
  - root on the managed node to read the overlay2 layer directories (otherwise the archive API is used)
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
  - dgxspark.vllm.docker
options:
  image:
    description:
      - The image to inspect, as a name with tag (V(lab/vllm-qwen35:0.17)), a name with digest or an image ID.
      - The module never pulls. An image missing from this node's engine fails the module, unless O(missing=report).
    type: str
    required: true
  missing:
    description:
      - What an image missing from the engine means. V(fail) fails the module naming the node's engine and the image;
        V(report) returns RV(exists=false) and nothing else, for a caller that builds or syncs it next.
    type: str
    choices: [fail, report]
    default: fail
  engine_components:
    description:
      - Also read the node's engine containers in the same call, those whose label C(org.dgxspark.vllm.component) is
        one of these values (as M(dgxspark.vllm.engine_containers) does), and return them in RV(engines). The
        P(dgxspark.vllm.vllm_serve#role) role asked both questions of every node at once this way.
      - Unset, no container is read.
      - Deprecated, and removed in 1.0.0 - use M(dgxspark.vllm.node_info) with O(dgxspark.vllm.node_info#module:engines=true).
    type: list
    elements: str
    version_added: 0.2.0
  record:
    description:
      - A JSON file on the node mapping image names to the IDs the collection verified under them (the
        P(dgxspark.vllm.hybrid_image#role) role writes it after its gates pass). Its entry for O(image) is returned
        in RV(recorded_id), and the whole record in RV(record); a name whose image is not the recorded one was not
        verified by the collection, whatever its tag says.
    type: path
  architectures:
    description:
      - Model architectures the image must support, for example V(Qwen3_5MoeForConditionalGeneration).
      - Those not registered in any registry dict are returned in RV(missing_architectures).
      - With O(model_config), the architectures the model declares there take their place.
    type: list
    elements: str
  model_config:
    description:
      - A model's C(config.json) on the node. When it declares C(architectures) (Python identifiers), those are checked
        in place of O(architectures); when it is missing or declares none, O(architectures) are. The architectures
        checked are returned in RV(checked_architectures).
      - A C(config.json) that is not JSON, or declares architectures that are not Python identifiers, fails the module
        naming the file.
    type: path
    version_added: 0.2.0
  model_modules:
    description:
      - Model modules to look for under C(vllm/model_executor/models/), for example V(qwen3_5) and V(qwen3_5_mtp) (a module
        is present as C(<name>.py) or as a package C(<name>/__init__.py); dotted names are looked up below the directory).
      - The result is RV(model_modules).
    type: list
    elements: str
  method:
    description:
      - How the files are read.
      - V(auto) reads the overlay2 layers when it can, and uses the archive API of a created container otherwise.
      - V(layers) and V(archive) force one of them; V(layers) fails when the layers cannot be read.
    type: str
    choices: [auto, layers, archive]
    default: auto
  timeout:
    description:
      - Seconds each Docker API call may take, and the time budget of the whole inspection.
    type: int
    default: 60
notes:
  - Environment values can hold secrets, so RV(env) only carries the values of an allowlist (see its description); every
    variable's name is in RV(env_names).
  - The image ID differs between image stores (config digest under a graph driver, manifest digest under the containerd
    store); compare images across nodes by RV(repo_digests) or by their contents, not by RV(id) alone.
seealso:
  - module: dgxspark.vllm.ray_cluster_info
  - name: vLLM issue 42354
    description: Two NCCL libraries in one image hang multi-node inference.
    link: https://github.com/vllm-project/vllm/issues/42354
  - name: Docker archive API
    description: C(HEAD) and C(GET /containers/{id}/archive).
    link: https://docs.docker.com/reference/api/engine/version/v1.41/#tag/Container/operation/ContainerArchiveInfo
"""

EXAMPLES = r"""
- name: Inspect the engine image on the head node
  dgxspark.vllm.vllm_image_info:
    image: lab/vllm-qwen35:0.17
    architectures:
      - Qwen3_5ForConditionalGeneration
      - Qwen3_5MoeForConditionalGeneration
    model_modules: [qwen3_5, qwen3_5_mtp]
  register: img

- name: Refuse an image that cannot serve Qwen3.5 or ships two NCCLs
  ansible.builtin.assert:
    that:
      - img.missing_architectures | length == 0
      - img.model_modules.values() | select | list | length == 2
      - not img.nccl_conflict
    fail_msg: >-
      {{ img.image }}: vLLM {{ img.versions.vllm }}, missing {{ img.missing_architectures }},
      NCCL {{ img.nccl_libraries | map(attribute='path') | join(', ') }}

- name: Does the image bring Ray, or must the overlay install it?
  ansible.builtin.debug:
    msg: "Ray {{ img.versions.ray if img.ray_present else 'absent' }}; entrypoint {{ img.entrypoint }}"
"""

RETURN = r"""
engines:
  description:
    - The engine containers O(engine_components) names, as M(dgxspark.vllm.engine_containers) returns them -
      C(containers) by name (each with C(component), C(running), C(status), C(started_at), C(image_id), C(labels),
      C(restart_policy), C(restart_count), C(exit_code); never the environment) and C(running_components). Read
      whether or not the image is there.
  returned: with O(engine_components)
  type: dict
  sample: {containers: {dgxspark-ray-head: {component: ray, running: true, image_id: "sha256:3f0c..."}},
           running_components: [ray]}
image:
  description: The image reference that was asked for.
  returned: always
  type: str
  sample: lab/vllm-qwen35:0.17
exists:
  description: Whether the image is on this node's engine (false only with O(missing=report)).
  returned: always
  type: bool
  sample: true
repo_tags:
  description: The image's tags on this engine.
  returned: success
  type: list
  elements: str
  sample: [dgxspark/vllm-hybrid:overlay-d6424a7f3d8e, dgxspark/vllm-hybrid:latest]
id:
  description: The image ID on this engine (it depends on the image store, see the notes).
  returned: success
  type: str
  sample: sha256:0b7c2d9c1c5e4f0ab0c1cf6a1f5a8d4c1f0b1a3c2b6e1f5d7a9c3e2b1d0f4a6c
fingerprint:
  description:
    - A digest of the image's content that is the same under every image store (RV(id) is not), from the layers' diff
      IDs, the creation time, the platform and the run configuration; null for an image without layers.
    - Two nodes hold the same image when their fingerprints are equal, whichever store each engine uses.
  returned: success
  type: str
  sample: sha256:9e1c0a7f2b3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7
repo_digests:
  description: The image's repo digests (empty for images that were built or loaded, never pulled).
  returned: success
  type: list
  elements: str
  sample: []
labels:
  description: The image's labels.
  returned: success
  type: dict
  sample: {"org.opencontainers.image.version": "0.17.1"}
architecture:
  description: The image's CPU architecture.
  returned: success
  type: str
  sample: arm64
os:
  description: The image's operating system.
  returned: success
  type: str
  sample: linux
entrypoint:
  description: The image's C(ENTRYPOINT), or null when it has none.
  returned: success
  type: list
  elements: str
  sample: ["/opt/entrypoint.sh"]
cmd:
  description: The image's C(CMD), or null when it has none.
  returned: success
  type: list
  elements: str
  sample: ["vllm", "serve"]
env_names:
  description: The names of every environment variable of the image, in image order.
  returned: success
  type: list
  elements: str
  sample: ["PATH", "CUDA_VERSION", "HF_TOKEN", "VLLM_USE_V1"]
env:
  description:
    - Values of the image's environment variables that are safe to show. A value is returned when the name is C(PATH),
      C(PYTHONPATH), C(LD_LIBRARY_PATH), C(LIBRARY_PATH), C(VIRTUAL_ENV), C(CONDA_PREFIX), C(PYTHON_VERSION), C(LANG),
      C(LC_ALL), C(TZ), C(HOME), C(HF_HOME), C(HF_HUB_OFFLINE), C(TRANSFORMERS_OFFLINE), C(TIKTOKEN_CACHE_DIR),
      C(TRITON_PTXAS_PATH), C(TRITON_CACHE_DIR), C(MAX_JOBS), C(NVCC_THREADS) or starts with C(VLLM_), C(NCCL_), C(CUDA_),
      C(TORCH_), C(NVIDIA_), C(NV_), C(RAY_), C(PYTORCH_), C(UCX_) or C(OMPI_), and the name contains none of C(KEY),
      C(TOKEN), C(SECRET), C(PASSW), C(CREDENTIAL), C(AUTH), C(PRIVATE), C(COOKIE), C(SESSION), C(CERT) and the value
      holds no URL with user information (C(https://user:pass@host)). Other variables appear in RV(env_names) only.
  returned: success
  type: dict
  sample: {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "VLLM_USE_V1": "1"}
store:
  description: The engine's storage driver for this image (C(GraphDriver.Name)), for example V(overlay2).
  returned: success
  type: str
  sample: overlay2
method:
  description: How the files were read, V(layers) (overlay2 layer directories) or V(archive) (Docker archive API).
  returned: success
  type: str
  sample: layers
python:
  description: The interpreter C(python3) (or C(python)) resolves to on the image's C(PATH), or null when there is none.
  returned: success
  type: dict
  sample: {"path": "/usr/bin/python3", "resolved": "/usr/bin/python3.12", "version": "3.12.3", "prefix": "/usr",
           "venv": false}
  contains:
    path:
      description: The path found on C(PATH).
      type: str
    resolved:
      description: The path with symbolic links resolved inside the image.
      type: str
    version:
      description:
        - The Python version, from C(pyvenv.cfg) or C(patchlevel.h) when present, otherwise V(X.Y) from the file name.
      type: str
    prefix:
      description: The virtual environment, or the installation prefix.
      type: str
    venv:
      description: Whether the interpreter is a virtual environment's.
      type: bool
site_packages:
  description: The site-packages directories that hold a C(vllm) package or distribution, the one Python imports first first.
  returned: success
  type: list
  elements: str
  sample: ["/usr/local/lib/python3.12/dist-packages"]
versions:
  description:
    - Versions of C(vllm), C(transformers), C(torch), C(ray), C(tokenizers) and C(nccl) (the pip C(nvidia-nccl-cu*)
      distribution), null when absent.
    - Read from the dist-info C(METADATA); a package without distribution metadata (a source tree on C(PYTHONPATH))
      contributes its C(__version__).
    - A package that is present but whose version cannot be read (with RV(method=archive), a package whose C(__version__)
      is compiled, such as tokenizers) has a null version, an entry in RV(distributions) and a warning.
    - The site-packages directory of vLLM is searched first, then the interpreter's, then any other in the image.
  returned: success
  type: dict
  sample: {"vllm": "0.17.1rc1", "transformers": "4.57.3", "torch": "2.9.0+cu130", "ray": null, "tokenizers": "0.22.1",
           "nccl": "2.27.7"}
distributions:
  description:
    - Where each version in RV(versions) came from (null when absent); each C(source) is V(dist-info),
      V(egg-info) or V(package) (the package's own version file).
  returned: success
  type: dict
  sample: {"vllm": {"name": "vllm", "version": "0.17.1rc1", "source": "dist-info",
                    "path": "/usr/local/lib/python3.12/dist-packages/vllm-0.17.1rc1.dist-info"}}
ray_present:
  description: Whether Ray is installed for the image's Python (its package or distribution is there).
  returned: success
  type: bool
  sample: false
vllm_requires:
  description: The C(Requires-Dist) lines of vLLM's C(METADATA), as written (markers included).
  returned: success
  type: list
  elements: str
  sample: ["transformers>=4.56.0,<5", "ray[cgraph]>=2.48.0; extra == \"ray\""]
registry_path:
  description: The C(registry.py) that was parsed, or null.
  returned: success
  type: str
  sample: /usr/local/lib/python3.12/dist-packages/vllm/model_executor/models/registry.py
architectures:
  description:
    - Per registry dict, the sorted architectures it maps (entries of C(**{...}) literals included; a dict that only spreads
      other dicts, such as C(_VLLM_MODELS), is left out).
  returned: success
  type: dict
  sample: {"_TEXT_GENERATION_MODELS": ["LlamaForCausalLM", "Qwen3MoeForCausalLM"],
           "_MULTIMODAL_MODELS": ["Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"]}
supported_architectures:
  description: The sorted union of RV(architectures).
  returned: success
  type: list
  elements: str
  sample: ["LlamaForCausalLM", "Qwen3MoeForCausalLM", "Qwen3_5ForConditionalGeneration"]
recorded_id:
  description: The image ID O(record) holds for O(image) (empty without O(record) or without an entry).
  returned: when O(record) is given
  type: str
  sample: sha256:4be0ab1e58d2c7c6f0d4bd4b8a09a7b0d9d0a1a2b3c4d5e6f7a8b9c0d1e2f3a4
record:
  description: Every entry of O(record) (image name to ID).
  returned: when O(record) is given
  type: dict
  sample: {"dgxspark/vllm-hybrid:overlay-0123456789ab": "sha256:4be0ab1e58d2c7c6f0d4bd4b8a09a7b0d9d0a1a2b3c4d5e6f7a8b9c0d1e2f3a4"}
checked_architectures:
  description: The architectures checked (O(model_config)'s when it declares some, else O(architectures)).
  returned: when O(architectures) or O(model_config) is set
  type: list
  elements: str
  sample: ["Qwen3_5MoeForConditionalGeneration"]
  version_added: 0.2.0
missing_architectures:
  description: The O(architectures) not in RV(supported_architectures), in the order given.
  returned: when O(architectures) is set
  type: list
  elements: str
  sample: ["Qwen3_5MoeForConditionalGeneration"]
model_files:
  description: The names under C(vllm/model_executor/models/) (files and packages, bytecode caches left out), sorted.
  returned: success
  type: list
  elements: str
  sample: ["__init__.py", "llama.py", "qwen3_5.py", "qwen3_5_mtp.py", "registry.py"]
model_modules:
  description: For each O(model_modules) entry, whether the module exists.
  returned: success
  type: dict
  sample: {"qwen3_5": true, "qwen3_5_mtp": true}
nccl_libraries:
  description: Every distinct C(libnccl.so*) file in the image, sorted by path.
  returned: success
  type: list
  elements: dict
  sample:
    - path: /usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9
      version: 2.28.9
      version_from: file name
      size: 254312128
      links: ["/usr/lib/aarch64-linux-gnu/libnccl.so", "/usr/lib/aarch64-linux-gnu/libnccl.so.2"]
      package: null
    - path: /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2
      version: 2.27.7
      version_from: dist-info
      size: 253112320
      links: []
      package: nvidia-nccl-cu13
  contains:
    path:
      description: The library file (links resolved).
      type: str
    version:
      description: Its version, or null when neither its name, nor the pip distribution, nor a C(nccl.h) beside it tells.
      type: str
    version_from:
      description: V(file name), V(dist-info) or V(nccl.h).
      type: str
    size:
      description: Size in bytes.
      type: int
    links:
      description: The C(libnccl.so*) symbolic links that point at this file.
      type: list
      elements: str
    package:
      description: The pip distribution that installed it, or null.
      type: str
nccl_conflict:
  description: Whether more than one distinct NCCL library file exists (a warning explains it).
  returned: success
  type: bool
  sample: true
verbs:
  description:
    - The RDMA user-space libraries (rdma-core; C(libibverbs1) and C(ibverbs-providers) on Debian and Ubuntu) where the
      image's dynamic loader finds them (C(LD_LIBRARY_PATH), then the usual library directories). NCCL's IB transport
      (C(NCCL_NET=IB), which the collection sets on an RDMA fabric) loads C(libibverbs.so.1), and libibverbs sees a
      ConnectX device only through its mlx5 provider; an image without them stops at engine start on every node with
      C(Failed to initialize any NET plugin).
  returned: success
  type: dict
  sample: {"libibverbs": "/usr/lib/aarch64-linux-gnu/libibverbs.so.1", "mlx5": "/usr/lib/aarch64-linux-gnu/libmlx5.so.1",
           "mlx5_provider": "/usr/lib/aarch64-linux-gnu/libibverbs/libmlx5-rdmav34.so", "complete": true, "missing": []}
  version_added: 0.3.0
  contains:
    libibverbs:
      description: Where C(libibverbs.so.1) is (its link target a file), or null.
      type: str
    mlx5:
      description: Where C(libmlx5.so.1) is, or null.
      type: str
    mlx5_provider:
      description: Where libibverbs' mlx5 provider (C(libibverbs/libmlx5-rdmav*.so)) is, or null.
      type: str
    complete:
      description: Whether C(libibverbs.so.1) and the mlx5 provider are both there.
      type: bool
    missing:
      description: What is missing, each with the Debian package that ships it.
      type: list
      elements: str
"""

import json
import platform
import re
import secrets
import traceback
import typing as t

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.dgxspark.vllm.plugins.module_utils import _docker, _engines, _image_fs
from ansible_collections.dgxspark.vllm.plugins.module_utils._relay import fingerprint

try:
    import docker
    from docker.errors import DockerException, ImageNotFound, NotFound
except ImportError:
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def model_architectures(path: str) -> list[str] | None:
    """The architectures the model's config.json at PATH declares; None when it is missing or declares none.

    Raises ValueError naming the file when it is not JSON or declares something that is not a Python identifier.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            config = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} cannot be read as JSON: {exc}") from exc
    declared = config.get("architectures") if isinstance(config, dict) else None
    if not declared:
        return None
    if not isinstance(declared, list) or not all(isinstance(a, str) and IDENTIFIER.match(a) for a in declared):
        raise ValueError(f"{path} declares architectures that are not Python identifiers ({declared!r:.300}); "
                         "fix the model's config.json")
    return declared


CONTAINER_PREFIX = "dgxspark-inspect-"
CONTAINER_LABEL = "org.dgxspark.vllm.inspect"


def image_facts(ref: str, attrs: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What ``docker image inspect`` says about the image, environment values filtered."""
    config = attrs.get("Config") or {}
    names, values = _image_fs.safe_env(config.get("Env"))
    return {
        "image": ref,
        "exists": True,
        "id": attrs.get("Id"),
        "fingerprint": fingerprint(attrs),
        "repo_tags": list(attrs.get("RepoTags") or []),
        "repo_digests": list(attrs.get("RepoDigests") or []),
        "labels": dict(config.get("Labels") or {}),
        "architecture": attrs.get("Architecture"),
        "os": attrs.get("Os"),
        "entrypoint": config.get("Entrypoint"),
        "cmd": config.get("Cmd"),
        "env_names": names,
        "env": values,
        "store": (attrs.get("GraphDriver") or {}).get("Name"),
    }


def read_record(path: str) -> dict[str, str]:
    """The verified-images record at PATH (name -> image ID); empty when there is none. Entries that are not a
    name with an image ID are dropped: the record is only ever trusted for what it can mean."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}  # unreadable: nothing counts as recorded, the caller verifies again
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", v)}


def create_inspection_container(client, image_id: str):
    """A container that is never started: its entrypoint does not exist, it has no network."""
    return client.containers.create(
        image_id, entrypoint=["/nonexistent"], command=[], name=CONTAINER_PREFIX + secrets.token_hex(6),
        network_disabled=True, labels={CONTAINER_LABEL: "1"}, detach=True)


def engine_name(client) -> str:
    try:
        return client.info().get("Name") or platform.node()
    except DockerException:
        return platform.node()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "image": {"type": "str", "required": True},
            "architectures": {"type": "list", "elements": "str"},
            "model_config": {"type": "path"},
            "model_modules": {"type": "list", "elements": "str"},
            "method": {"type": "str", "choices": ["auto", "layers", "archive"], "default": "auto"},
            **_docker.ARGUMENT_SPEC,
            "timeout": {"type": "int", "default": 60},
            "missing": {"type": "str", "choices": ["fail", "report"], "default": "fail"},
            "record": {"type": "path"},
            # Deprecated: node_info reads the engine containers (its engines section).
            "engine_components": {"type": "list", "elements": "str", "removed_in_version": "1.0.0",
                                  "removed_from_collection": "dgxspark.vllm"},
        },
        supports_check_mode=True,
    )
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib("docker"), exception=DOCKER_IMPORT_ERROR)
    ref = module.params["image"]
    timeout = module.params["timeout"]
    if module.params["model_config"]:
        try:
            declared = model_architectures(module.params["model_config"])
        except ValueError as exc:
            module.fail_json(msg=str(exc), image=ref)
        if declared:
            module.params["architectures"] = declared
    if timeout < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {timeout}")

    extra = {}
    if module.params["record"]:
        record = read_record(module.params["record"])
        extra = {"record": record, "recorded_id": record.get(ref, "")}
    client = _docker.client(module, docker, module.params["docker_host"], timeout=timeout)
    if module.params["engine_components"] is not None:
        try:
            extra["engines"] = _engines.read(client, _engines.LABEL, module.params["engine_components"], NotFound)
        except DockerException as exc:
            module.fail_json(msg=_docker.unreachable_message(module.params["docker_host"], exc), image=ref,
                             exception=traceback.format_exc())
    try:
        image = client.images.get(ref)
    except ImageNotFound:
        if module.params["missing"] == "report":
            module.exit_json(changed=False, image=ref, exists=False, **extra)
        module.fail_json(msg=f"image {ref} is not present on this node's Docker engine ({engine_name(client)}); "
                             f"build it or sync it first", image=ref)
    except DockerException as exc:
        module.fail_json(msg=_docker.unreachable_message(module.params["docker_host"], exc), image=ref,
                         exception=traceback.format_exc())

    result = image_facts(ref, image.attrs)
    result.update(extra)
    deadline = _image_fs.Deadline(timeout)
    fs = None
    layers_error = None
    if module.params["method"] in ("auto", "layers"):
        try:
            fs = _image_fs.OverlayFS.from_graph_driver(image.attrs.get("GraphDriver"))
        except _image_fs.ImageFSError as exc:
            layers_error = str(exc)
            if module.params["method"] == "layers":
                module.fail_json(msg=f"the layers of image {ref} cannot be read on this node: {exc}; use method=auto",
                                 **result)

    container = None
    try:
        if fs is None:
            container = create_inspection_container(client, image.id)
            fs = _image_fs.ArchiveFS(container, client.api)
        info = _image_fs.inspect_image(fs, image.attrs.get("Config"), module.params["architectures"],
                                       module.params["model_modules"], deadline)
    except _image_fs.ImageFSError as exc:
        module.fail_json(msg=f"inspecting image {ref} failed: {exc}", method=getattr(fs, "method", None), **result)
    except DockerException as exc:
        module.fail_json(msg=f"inspecting image {ref} through the Docker API failed: {exc}", exception=traceback.format_exc(),
                         **result)
    except OSError as exc:
        module.fail_json(msg=f"reading the layers of image {ref} failed: {exc}", exception=traceback.format_exc(),
                         **result)
    finally:
        if container is not None:
            try:
                container.remove(force=True, v=True)
            except NotFound:
                pass
            except DockerException as exc:
                module.warn(f"could not remove the inspection container {container.name}: {exc}; remove it with "
                            f"docker rm -f {container.name}")

    for warning in info.pop("warnings"):
        module.warn(f"{ref}: {warning}")
    if layers_error and module.params["method"] == "auto" and result["store"] == "overlay2":
        module.warn(f"{ref}: the overlay2 layers could not be read ({layers_error}); used the archive API instead")
    result.update(info)
    result["method"] = fs.method
    if module.params["architectures"] is not None:
        result["checked_architectures"] = module.params["architectures"]
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
