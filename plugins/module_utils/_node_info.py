# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""What the roles ask of a node as it is, in sections (the node_info module), in the shape of community.docker's
docker_host_info: each section is read only when it is asked for, and only the engines section talks to Docker.

- ``engines``: the collection's containers whose component label is one of the asked values (``_engines.read``);
- ``paths``: whether each path is there (as ``lstat`` finds it);
- ``trust``: the node's transfer trust (``_ssh_trust.read_trust``), or the error reading it.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.dgxspark.vllm.plugins.module_utils import _engines
from ansible_collections.dgxspark.vllm.plugins.module_utils._ssh_trust import read_trust

SECTIONS = ("engines", "paths", "trust")
ENGINE_COMPONENTS = ("ray", "vllm")  # the engine containers of either backend; the watchdog and door are asked by name


def paths_section(paths: t.Iterable[str]) -> dict[str, bool]:
    """Whether each of PATHS is there; a dangling symlink is there (it names something the roles remove)."""
    return {path: os.path.lexists(path) for path in paths}


def trust_section(trust_dir: str, reader: t.Callable[[str], dict] = read_trust) -> dict:
    """The transfer trust in TRUST_DIR as READER finds it, with ``dir``; an unreadable file is ``error``, never a
    failure (node_trust reads it again itself, and that read names the problem)."""
    try:
        return {"dir": trust_dir, **reader(trust_dir)}
    except OSError as exc:
        return {"dir": trust_dir, "error": str(exc)}


def wanted(params: dict) -> list[str]:
    """The sections PARAMS (the module's options) ask for, in SECTIONS order."""
    asked = {"engines": bool(params.get("engines")), "paths": bool(params.get("paths")),
             "trust": bool(params.get("trust_dir"))}
    return [name for name in SECTIONS if asked[name]]


def read(params: dict, client_factory: t.Callable[[], t.Any] | None = None,
         not_found: type[Exception] = LookupError) -> dict:
    """Each asked section of PARAMS, by name. CLIENT_FACTORY makes the Docker SDK client, called only when the
    engines section is asked; NOT_FOUND is the SDK's docker.errors.NotFound."""
    found: dict[str, t.Any] = {}
    sections = wanted(params)
    if "engines" in sections:
        if client_factory is None:
            raise ValueError("the engines section needs a Docker client")
        found["engines"] = _engines.read(client_factory(), params.get("label") or _engines.LABEL,
                                         params.get("engine_components") or ENGINE_COMPONENTS, not_found)
    if "paths" in sections:
        found["paths"] = paths_section(params["paths"])
    if "trust" in sections:
        found["trust"] = trust_section(params["trust_dir"])
    return found
