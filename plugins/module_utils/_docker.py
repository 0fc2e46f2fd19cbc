# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""The Docker SDK client of the collection's modules, made from their ``docker_host`` option.

Each module imports the SDK itself (in ``try/except ImportError``, reporting a missing SDK with
``missing_required_lib``) and hands the imported package to :func:`client`, which makes the client
and turns an engine that does not answer into one clear ``fail_json``.
"""

from __future__ import annotations

import traceback
import typing as t

from ansible.module_utils.basic import missing_required_lib

SDK = "docker"

# The options of plugins/doc_fragments/docker.py: the node's own Docker engine, and each API call's time limit.
ARGUMENT_SPEC: dict[str, dict[str, t.Any]] = {
    "docker_host": {"type": "str", "default": "unix:///var/run/docker.sock"},
    "timeout": {"type": "int", "default": 30},
}


def unreachable_message(docker_host: str | None, exc: BaseException) -> str:
    """What a module says when the engine at DOCKER_HOST (the SDK's defaults when unset) does not answer."""
    where = f" at {docker_host}" if docker_host else ""
    return f"cannot talk to the Docker daemon{where} on this node: {exc}; is Docker running and may this user use it?"


def client(module, sdk, docker_host: str | None, *, timeout: int | None = None, low_level: bool = False,
           import_error: str | None = None) -> t.Any:
    """A client of the Docker engine at DOCKER_HOST, made with SDK (the module's ``docker`` package, or None).

    ``docker.DockerClient`` (``docker.from_env()`` when DOCKER_HOST is empty), or ``docker.APIClient`` with
    LOW_LEVEL; TIMEOUT (seconds per API call) is passed only when given. The SDK asks the engine for its API
    version while making the client, so an engine that does not answer fails the module here, naming the
    address. A missing SDK (SDK is None) fails it with ``missing_required_lib``.
    """
    if sdk is None:
        module.fail_json(msg=missing_required_lib(SDK), exception=import_error)
    kwargs: dict[str, t.Any] = {} if timeout is None else {"timeout": timeout}
    try:
        if low_level:
            return sdk.APIClient(base_url=docker_host, version="auto", **kwargs)
        if docker_host:
            return sdk.DockerClient(base_url=docker_host, **kwargs)
        return sdk.from_env(**kwargs)
    except sdk.errors.DockerException as exc:
        module.fail_json(msg=unreachable_message(docker_host, exc), exception=traceback.format_exc())
    return None  # not reached: fail_json exits
