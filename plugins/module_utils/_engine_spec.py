# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""One node's engine-container spec, built in Python (the engine_spec action): the launcher's argv for the Ray head, a
Ray worker or an mp rank, the binds every engine container needs, and the one container definition of
``_node_container`` around them. engine_plan compares the members' specs; engine_container brings each to it.

The spec is what engine_plan fingerprints, so its shape is a contract: ``container`` and ``launcher`` always, and for
Ray ``image_id``, ``extra`` and ``token``, for mp ``env_checksum``.
"""

from __future__ import annotations

import typing as t

from ansible_collections.dgxspark.vllm.plugins.module_utils import _layout, _node_container

BACKENDS = ("ray", "mp")
LAUNCHER_FILE = "dgxspark-launch"
RAY_TOKEN = _layout.IN_CONTAINER["engine_ray_token"]  # where the launcher reads the cluster's Ray token in the container
SERVE_ENV = _layout.IN_CONTAINER["engine_serve_env"]  # where it reads the serving environment (the API key) on the head
MODELS = "/models"


class SpecError(ValueError):
    """A value the spec cannot be built from, in words that name it."""


def _text(value: t.Any, what: str) -> str:
    if value is None or isinstance(value, (dict, list, bool)) or str(value) == "":
        raise SpecError(f"{what} must be a non-empty string or number, got {value!r}")
    return str(value)


def _count(value: t.Any, what: str, minimum: int = 0) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise SpecError(f"{what} must be a whole number, got {value!r}") from None
    if isinstance(value, bool) or number < minimum:
        raise SpecError(f"{what} must be a whole number of at least {minimum}, got {value!r}")
    return number


def launcher_bind(launcher_dir: str) -> str:
    """The launcher, installed on the node in LAUNCHER_DIR, mounted read-only where the entrypoint runs it."""
    return f"{_text(launcher_dir, 'launcher_dir')}/{LAUNCHER_FILE}:{_node_container.LAUNCHER}:ro"


def ray_stop_grace(stop_timeout: t.Any) -> int:
    """The launcher's own stop grace: half of what Docker gives the container after its first 5 s, so that the
    launcher stops Ray (and vLLM under it) before Docker's SIGKILL."""
    return (_count(stop_timeout, "the engine's stop_timeout", _node_container.MIN_STOP_TIMEOUT) - 5) // 2


def ray_command(role: str, *, node_ip: str, port: t.Any, gpus: t.Any, stop_timeout: t.Any, object_store_bytes: t.Any,
                ray_args: t.Sequence[str] = (), members: t.Any = 1, worker_ips: t.Sequence[str] = (),
                wait_timeout: t.Any = 0, dashboard_host: str = "", launcher_args: t.Sequence[str] = (),
                serve_argv: t.Sequence[str] = (), head_ip: str = "") -> list[str]:
    """The launcher's argv for a Ray head (it waits for every member and GPU, then runs SERVE_ARGV when given) or a
    worker (it joins HEAD_IP)."""
    if role not in _node_container.ROLES:
        raise SpecError(f"role must be one of {', '.join(_node_container.ROLES)}, got {role!r}")
    gpus_per_node = _count(gpus, "gpus", 1)
    common = ["--node-ip", _text(node_ip, "node_ip"), "--port", str(_count(port, "port", 1)),
              "--num-gpus", str(gpus_per_node), "--stop-timeout", str(ray_stop_grace(stop_timeout)),
              f"--ray-arg=--object-store-memory={_text(object_store_bytes, 'object_store_bytes')}"]
    passed = [f"--ray-arg={_text(arg, 'a Ray argument')}" for arg in ray_args]
    if role == "worker":
        return (["worker"] + common + ["--head-ip", _text(head_ip, "head_ip"),
                                       "--connect-timeout", str(_count(wait_timeout, "wait_timeout", 1))] + passed)
    nodes = _count(members, "members", 1)
    return (["head"] + common
            + ["--expect-nodes", str(nodes), "--expect-gpus", str(nodes * gpus_per_node),
               "--wait-timeout", str(_count(wait_timeout, "wait_timeout", 1)),
               "--dashboard-host", _text(dashboard_host, "dashboard_host")]
            + [f"--expect-node-ip={_text(ip, 'a worker IP')}" for ip in worker_ips]
            + passed + [_text(arg, "a launcher argument") for arg in launcher_args]
            + ((["--"] + [str(arg) for arg in serve_argv]) if serve_argv else []))


def mp_command(role: str, serve_argv: t.Sequence[str]) -> list[str]:
    """The launcher's argv for an mp rank: the head reads the serving environment file, every rank runs SERVE_ARGV
    (its own --node-rank and, on a worker, --headless)."""
    if not serve_argv:
        raise SpecError("serve_argv must not be empty for an mp rank")
    return (["mp"] + (["--serve-env-file", SERVE_ENV] if role == "head" else []) + ["--"]
            + [str(arg) for arg in serve_argv])


def spec(backend: str, *, name: str, image: str, role: str, pair: str, launcher_dir: str, env: t.Mapping | None = None,
         engine: t.Mapping | None = None, logs: t.Any = None, launcher_checksum: str = "",
         ray: t.Mapping[str, t.Any] | None = None, mp: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """This node's spec for BACKEND (``ray`` or ``mp``): the container of ``_node_container.node_container`` with the
    launcher's argv and binds, and what else the plan fingerprints. RAY or MP holds the backend's own values."""
    if backend not in BACKENDS:
        raise SpecError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    binds = [launcher_bind(launcher_dir)]
    if backend == "ray":
        ray = dict(ray or {})
        token_auth = bool(ray.pop("token_auth", False))
        config_dir = ray.pop("config_dir", "")
        volumes = list(ray.pop("volumes", None) or [])
        image_id, extra, token = ray.pop("image_id", ""), ray.pop("extra", ""), ray.pop("token", "")
        own_env = dict(ray.pop("env", None) or {})  # the role's own environment, over the fabric's and the token's
        try:
            command = ray_command(role, **ray)
        except TypeError as exc:
            raise SpecError(f"ray: {exc}") from None
        if token_auth:
            binds.append(f"{_text(config_dir, 'config_dir')}/auth_token:{RAY_TOKEN}:ro")
        auth_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": RAY_TOKEN} if token_auth else {}
        container_env = {**dict(env or {}), **auth_env, **own_env}
        container = _build(name, image, command, "ray", role, pair, container_env, binds + volumes, engine, logs)
        return {"image_id": str(image_id or ""), "container": container, "extra": str(extra or "") if role == "head" else "",
                "launcher": str(launcher_checksum or ""), "token": str(token or "")}
    mp = dict(mp or {})
    binds.append(f"{_text(mp.get('models_dir'), 'models_dir')}:{MODELS}:ro")
    if role == "head":
        binds.append(f"{_text(mp.get('config_dir'), 'config_dir')}/serve.env:{SERVE_ENV}:ro")
    container = _build(name, image, mp_command(role, list(mp.get("serve_argv") or [])), "vllm", role, pair,
                       dict(env or {}), binds, engine, logs)
    return {"container": container, "env_checksum": str(mp.get("env_checksum") or ""),
            "launcher": str(launcher_checksum or "")}


def _build(name, image, command, component, role, pair, env, volumes, engine, logs) -> dict[str, t.Any]:
    try:
        return _node_container.node_container(name, image, command, component=component, role=role, pair=pair,
                                              env=env, volumes=volumes, engine=engine, logs=logs)
    except _node_container.ContainerError as exc:
        raise SpecError(str(exc)) from None
