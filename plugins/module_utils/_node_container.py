# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one definition of an engine container on a DGX Spark, for every backend.

Ray head, Ray worker and ``mp`` rank containers are all built here, so that what a real Spark needs is never
missing from one of them (it used to be: no container asked for the GPU, and the ``mp`` container, a second
hand-written spec, had no RDMA devices while the fabric set ``NCCL_NET=IB``). What the references use
(NVIDIA's dgx-spark-playbooks, vLLM's ``run_cluster.sh``, eugr's ``launch-cluster.sh``):

* the GPU through Docker's ``nvidia`` device driver: ``--gpus all``, i.e. ``device_requests`` with count -1 and
  the ``gpu`` capability (DGX OS does not make ``nvidia`` Docker's default runtime);
* host network and IPC, a large ``/dev/shm`` (NCCL, Ray's object store);
* with RDMA (the fabric environment enables NCCL's IB transport): the verbs devices (``/dev/infiniband``) and
  ``IPC_LOCK`` for pinned memory, with unlimited ``memlock`` -- not ``--privileged``;
* least privilege: ``cap_drop: ALL``, then only what the container needs: ``IPC_LOCK`` with RDMA (above), the
  inventory's extra capabilities, nothing else. Docker's default set would leave ``NET_RAW`` (a Ray task could sniff
  the fabric and the LAN on the host network), ``NET_BIND_SERVICE``, ``CHOWN``, ``DAC_OVERRIDE``, ``FOWNER``,
  ``SETUID``/``SETGID``, ``KILL``, ``MKNOD``, ``SYS_CHROOT`` and others that neither the launcher, Ray nor vLLM use:
  they run as root over root-owned files (the launcher, the 0600 token and env file, the caches), on ports above
  1023, and signal only their own processes;
* ulimits: ``memlock`` unlimited, ``nofile`` 1048576, ``stack`` 64 MiB (eugr's non-privileged recipe);
* the fleet's log rotation (``dgxspark_container_logs``, module_utils/_container_logs.py): a rank that serves for
  weeks must not fill the node's disk with one log file;
* named volumes for the compile caches (``/root/.cache/vllm``, ``/root/.cache/flashinfer``, ``/root/.triton``),
  so that a restart (rollout, reboot, rollback) does not redo torch.compile, FlashInfer JIT and Triton work.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.dgxspark.vllm.plugins.module_utils._container_logs import LogsError, container_logs

LAUNCHER = "/opt/dgxspark/bin/dgxspark-launch"
ENTRYPOINT = ["python3", LAUNCHER]
GPU_REQUEST = {"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}
DEFAULT_SHM_SIZE = "16g"
DEFAULT_ULIMITS = ["nofile:1048576:1048576", "memlock:-1:-1", "stack:67108864:67108864"]
DEFAULT_RDMA_DEVICES = "/dev/infiniband"
DEFAULT_RESTART_POLICY = "unless-stopped"
DEFAULT_STOP_TIMEOUT = 30
# The launcher stops Ray (and vLLM under it) within half of what Docker gives the container after its first 5 s
# (_engine_spec.ray_stop_grace): below 7 s that grace would be under one second (negative below 5 s).
MIN_STOP_TIMEOUT = 7
# Every capability is dropped; the container gets back only these (plus IPC_LOCK with RDMA and the extra ones).
CAP_DROP = ["ALL"]
DEFAULT_CACHE_VOLUMES = {
    "/root/.cache/vllm": "dgxspark-vllm-cache",
    "/root/.cache/flashinfer": "dgxspark-flashinfer-cache",
    "/root/.triton": "dgxspark-triton-cache",
}
COMPONENTS = ("ray", "vllm")
ROLES = ("head", "worker")
ULIMIT_NAMES = ("core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc", "rss",
                "rtprio", "rttime", "sigpending", "stack")
RESTART_POLICIES = ("no", "on-failure", "always", "unless-stopped")
_VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIZE = re.compile(r"^[0-9]+[bkmgBKMG]?$")


class ContainerError(ValueError):
    """An input that cannot make a container; the message names the input and the fix."""


def fabric_has_rdma(env: t.Mapping[str, t.Any]) -> bool:
    """Whether the fabric environment (rdma_facts' ``env``) has NCCL use RDMA."""
    net = str(env.get("NCCL_NET", ""))
    return net == "IB" or (net != "Socket" and str(env.get("NCCL_IB_DISABLE", "1")) == "0")


def _ulimits(value: t.Sequence[str]) -> list[str]:
    seen = set()
    result = []
    for item in value:
        parts = str(item).split(":")
        if len(parts) not in (2, 3) or parts[0] not in ULIMIT_NAMES:
            raise ContainerError(f"ulimit {item!r} is not NAME:SOFT[:HARD] with NAME one of {', '.join(ULIMIT_NAMES)}"
                                 " (e.g. stack:67108864:67108864)")
        for number in parts[1:]:
            if not re.match(r"^-?[0-9]+$", number):
                raise ContainerError(f"ulimit {item!r}: {number!r} is not a number (-1 means unlimited)")
        if parts[0] in seen:
            raise ContainerError(f"ulimit {parts[0]} is given twice")
        seen.add(parts[0])
        result.append(str(item))
    return result


def _volumes(binds: t.Sequence[str], caches: t.Mapping[str, str]) -> list[str]:
    result = []
    targets = set()
    for bind in binds:
        parts = str(bind).split(":")
        if len(parts) not in (2, 3) or not parts[1].startswith("/"):
            raise ContainerError(f"volume {bind!r} is not SOURCE:/CONTAINER/PATH[:ro|rw]")
        targets.add(parts[1])
        result.append(str(bind))
    for path, name in sorted(caches.items()):
        if not str(path).startswith("/"):
            raise ContainerError(f"cache volume path {path!r} is not absolute")
        if not _VOLUME_NAME.match(str(name)):
            raise ContainerError(f"cache volume name {name!r} for {path} is not a Docker volume name "
                                 "(letters, digits, _ . -)")
        if path in targets:
            raise ContainerError(f"{path} is both a bind mount and a cache volume")
        result.append(f"{name}:{path}")
    return result


def cache_volume_names(cache_volumes: t.Mapping[str, str] | None = None) -> list[str]:
    """The named volumes an engine container keeps its compile caches in (the defaults when CACHE_VOLUMES is None),
    validated as node_container validates them: what a purge removes."""
    caches = DEFAULT_CACHE_VOLUMES if cache_volumes is None else cache_volumes
    if not isinstance(caches, t.Mapping):
        raise ContainerError(f"cache volumes must be a mapping of container path to volume name, got {caches!r}")
    return sorted(set(entry.split(":", 1)[0] for entry in _volumes([], caches)))


# The engine containers' settings: one value each for every backend, set in the inventory as dgxspark_engine_<setting>
# (node_container's keyword). Each was a ray_cluster_<setting> before the mp ranks shared the definition; that name is
# still read, as a deprecated alias. The fleet action resolves them once per node (dgxspark_node.engine).
ENGINE_PREFIX = "dgxspark_engine_"
ENGINE_ALIAS_PREFIX = "ray_cluster_"
ENGINE_DEFAULTS: dict[str, t.Any] = {
    "shm_size": DEFAULT_SHM_SIZE,
    "ulimits": list(DEFAULT_ULIMITS),
    "capabilities": [],
    "rdma_devices": DEFAULT_RDMA_DEVICES,
    "cache_volumes": dict(DEFAULT_CACHE_VOLUMES),
    "privileged": False,
    "restart_policy": DEFAULT_RESTART_POLICY,
    "stop_timeout": DEFAULT_STOP_TIMEOUT,
}
ENGINE_REMOVED_IN = "1.0.0"
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def engine_setting(setting: str, value: t.Any) -> t.Any:
    """VALUE of the engine SETTING, checked as node_container checks it and in its plain type (a bool from its words,
    an int from its digits, a copy of a list or a mapping). Raises :class:`ContainerError` naming what is wrong."""
    if setting not in ENGINE_DEFAULTS:
        raise ContainerError(f"{setting!r} is no engine setting (one of {', '.join(ENGINE_DEFAULTS)})")
    if setting == "privileged":
        if isinstance(value, bool):
            return value
        if str(value).strip().lower() in _TRUE + _FALSE:
            return str(value).strip().lower() in _TRUE
        raise ContainerError(f"is {value!r:.40}, not true or false")
    if setting == "stop_timeout":
        if isinstance(value, bool) or not re.fullmatch(r"[0-9]+", str(value).strip()):
            raise ContainerError(f"is {value!r:.40}, not a whole number of seconds")
        value = int(str(value).strip())
    elif setting in ("ulimits", "capabilities"):
        if isinstance(value, (str, bytes)) or not isinstance(value, t.Sequence):
            raise ContainerError(f"is {value!r:.60}, not a list")
        value = [str(item) for item in value]
    elif setting == "cache_volumes":
        if not isinstance(value, t.Mapping):
            raise ContainerError(f"is {value!r:.60}, not a mapping of container path to volume name ({{}} for none)")
        value = {str(path): str(name) for path, name in value.items()}
    elif not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ContainerError(f"is {value!r:.60}, not a string")
    else:
        value = str(value)
    # The one check of the definition, on this setting alone.
    node_container("check", "check", ["check"], component="ray", role="head", pair="check", **{setting: value})
    return value


def engine_settings(values: t.Mapping[str, t.Any]) -> tuple[dict[str, t.Any], list[str], list[tuple[str, str]]]:
    """(settings, problems, aliases used) of a node whose variables are VALUES (dgxspark_engine_* and the deprecated
    ray_cluster_* names, as the inventory or -e sets them; unset ones absent or None).

    Every setting is in the answer: the one given (the neutral name wins over its alias), the Spark default otherwise.
    A problem names the variable; an alias used is (alias, neutral name)."""
    settings, problems, aliases = {}, [], []
    for setting, default in ENGINE_DEFAULTS.items():
        name, alias = ENGINE_PREFIX + setting, ENGINE_ALIAS_PREFIX + setting
        given, variable = values.get(name), name
        if given is None and values.get(alias) is not None:
            given, variable = values[alias], alias
            aliases.append((alias, name))
        if given is None:
            settings[setting] = default
            continue
        try:
            settings[setting] = engine_setting(setting, given)
        except ContainerError as exc:
            problems.append(f"{variable}: {exc}")
            settings[setting] = default
    return settings, problems, aliases


def node_container(name: str, image: str, command: t.Sequence[str], *, component: str, role: str, pair: str,
                   env: t.Mapping[str, t.Any] | None = None, volumes: t.Sequence[str] | None = None,
                   rdma: bool | None = None, rdma_devices: str | None = None, shm_size: str | None = None,
                   ulimits: t.Sequence[str] | None = None, capabilities: t.Sequence[str] | None = None,
                   privileged: bool | None = None, restart_policy: str | None = None,
                   stop_timeout: int | None = None, cache_volumes: t.Mapping[str, str] | None = None,
                   gpus: bool | None = None, logs: t.Any = None,
                   engine: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """The options of ``community.docker.docker_container`` for one engine container.

    ``None`` means the Spark default. ``rdma`` None: derived from ``env`` (:func:`fabric_has_rdma`). ``logs``: the value
    of ``dgxspark_container_logs``. ``engine``: the node's engine settings (:func:`engine_settings`, published as
    ``dgxspark_node.engine``), for every setting its keyword leaves None.
    Raises :class:`ContainerError`.
    """
    if engine:
        unknown = sorted(set(engine) - set(ENGINE_DEFAULTS))
        if unknown:
            raise ContainerError(f"engine has settings that are no engine settings: {', '.join(map(str, unknown))}")
        given = {"shm_size": shm_size, "ulimits": ulimits, "capabilities": capabilities, "rdma_devices": rdma_devices,
                 "cache_volumes": cache_volumes, "privileged": privileged, "restart_policy": restart_policy,
                 "stop_timeout": stop_timeout}
        given = {key: engine.get(key) if value is None else value for key, value in given.items()}
        shm_size, ulimits, capabilities, rdma_devices = (given["shm_size"], given["ulimits"], given["capabilities"],
                                                         given["rdma_devices"])
        cache_volumes, privileged, restart_policy, stop_timeout = (given["cache_volumes"], given["privileged"],
                                                                   given["restart_policy"], given["stop_timeout"])
    if not name or not image:
        raise ContainerError("the container name and the image must not be empty")
    if component not in COMPONENTS or role not in ROLES:
        raise ContainerError(f"component must be one of {COMPONENTS} and role one of {ROLES}")
    if not command or any(not isinstance(a, (str, int, float)) for a in command):
        raise ContainerError("the command must be a non-empty list of strings")
    env_out: dict[str, str] = {}
    for key, value in (env or {}).items():
        if not _ENV_NAME.match(str(key)):
            raise ContainerError(f"environment variable name {key!r} is not valid")
        if isinstance(value, bool):
            value = "1" if value else "0"
        if value is None or isinstance(value, (dict, list)):
            raise ContainerError(f"environment variable {key} must be a string or a number")
        env_out[str(key)] = str(value)
    with_rdma = fabric_has_rdma(env_out) if rdma is None else bool(rdma)
    shm = DEFAULT_SHM_SIZE if shm_size in (None, "") else str(shm_size)
    if not _SIZE.match(shm):
        raise ContainerError(f"shm size {shm!r} is not a size such as 16g")
    policy = DEFAULT_RESTART_POLICY if restart_policy in (None, "") else str(restart_policy)
    if policy not in RESTART_POLICIES:
        raise ContainerError(f"restart policy {policy!r} is not one of {', '.join(RESTART_POLICIES)}")
    timeout = DEFAULT_STOP_TIMEOUT if stop_timeout in (None, "") else int(stop_timeout)
    if timeout < MIN_STOP_TIMEOUT:
        raise ContainerError(f"stop timeout {timeout} is under {MIN_STOP_TIMEOUT} s: the launcher needs 5 s and a grace "
                             "of at least one second to stop Ray and vLLM before Docker kills them")
    devices_path = DEFAULT_RDMA_DEVICES if rdma_devices in (None, "") else str(rdma_devices)
    if not devices_path.startswith("/dev/"):
        raise ContainerError(f"RDMA devices {devices_path!r} must be a path under /dev")
    caps = [str(c).upper() for c in (capabilities or [])]
    try:
        log_config = container_logs(logs)
    except LogsError as exc:
        raise ContainerError(f"dgxspark_container_logs {exc}") from None
    if with_rdma and "IPC_LOCK" not in caps:
        caps.append("IPC_LOCK")
    return {
        "name": str(name),
        "image": str(image),
        "entrypoint": list(ENTRYPOINT),
        "command": [str(a) for a in command],
        "env": env_out,
        "volumes": _volumes(volumes or [], DEFAULT_CACHE_VOLUMES if cache_volumes is None else cache_volumes),
        "devices": [f"{devices_path}:{devices_path}:rwm"] if with_rdma else [],
        "device_requests": [] if gpus is False else [dict(GPU_REQUEST, capabilities=[["gpu"]])],
        "network_mode": "host",
        "ipc_mode": "host",
        "shm_size": shm,
        "ulimits": _ulimits(DEFAULT_ULIMITS if ulimits is None else ulimits),
        "capabilities": sorted(set(caps)),
        "cap_drop": [] if privileged else list(CAP_DROP),
        "privileged": bool(privileged),
        "restart_policy": policy,
        "stop_timeout": timeout,
        **log_config,
        "labels": {
            "org.dgxspark.vllm.component": component,
            "org.dgxspark.vllm.role": role,
            "org.dgxspark.vllm.pair": str(pair),
        },
    }
