# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hybrid_image role's plan (plugins/action/hybrid_image_plan.py): its inputs checked, the pip requirements and
Ray's lock, the inputs the image is made from and the content tag derived from them.

Pure functions over plain data. The tag is the SHA-256 of the inputs as Ansible's ``to_json(sort_keys=True)`` wrote
them (the role's Jinja before 0.17.0): the same inputs give the same tag, so an upgrade of the collection rebuilds no
image.
"""

from __future__ import annotations

import hashlib
import json
import re
import typing as t

from ansible.module_utils.compat.version import LooseVersion

from ansible_collections.dgxspark.vllm.plugins.module_utils._inputs import VARIABLES, check_value
from ansible_collections.dgxspark.vllm.plugins.module_utils._pip_lock import problems as lock_problems

STRATEGIES = ("overlay", "graft")
RAY_INSTALL = ("auto", "always", "never")
REPOSITORY_RE = re.compile(r"[a-z0-9]+([._/-][a-z0-9]+)*")
TAG_RE = re.compile(r"[a-z0-9]+([._/-][a-z0-9]+)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")
IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
GRAFT_FILE_RE = re.compile(r"/?([A-Za-z0-9_.-]+/)*[A-Za-z0-9_.-]+")
DOT_COMPONENT_RE = re.compile(r"(^|/)\.\.?(/|$)")
LAUNCHER_VERSION_RE = re.compile(r'LAUNCHER_VERSION = "([^"]+)"')


class PlanError(ValueError):
    pass


def input_problems(host: str, given: t.Mapping[str, t.Any]) -> list[str]:
    """One sentence a problem with the role's inputs (GIVEN: the ``hybrid_image_*`` variables without their prefix),
    each naming HOST, the variable and the fix; checked before anything reaches a node."""
    out = []

    def say(variable: str, text: str) -> None:
        out.append(f"host {host}: hybrid_image_{variable} {text}")

    strategy = given.get("strategy")
    graft = strategy == "graft"
    if strategy not in STRATEGIES:
        say("strategy", f"is {strategy!r}: set it to overlay or graft")
    if not given.get("source"):
        say("source", "is empty: set it to the image whose vLLM the hybrid serves")
    if graft and not given.get("base"):
        say("base", "is empty: a graft needs the image it copies the source's files into")
    if given.get("ray_install") not in RAY_INSTALL:
        say("ray_install", f"is {given.get('ray_install')!r}: set it to auto, always or never")
    if not REPOSITORY_RE.fullmatch(str(given.get("repository") or "")):
        say("repository", f"is {given.get('repository')!r}: give a lowercase Docker repository name "
                          "(dgxspark/vllm-hybrid)")
    tag = str(given.get("tag") or "")
    if tag and not TAG_RE.fullmatch(tag):
        say("tag", f"is {tag!r}: give a lowercase Docker name with an optional :tag (dgxspark/vllm-hybrid:latest), "
                   "or nothing")
    architectures = given.get("architectures") or []
    bad = [a for a in architectures if not IDENTIFIER_RE.fullmatch(str(a))]
    if not architectures or bad:
        say("architectures", f"is {architectures!r}: give the model's architectures, Python identifiers "
                             "(Qwen3_5MoeForConditionalGeneration)")
    model_dir = str(given.get("model_dir") or "")
    if model_dir and not model_dir.startswith("/"):
        say("model_dir", f"is {model_dir!r}: give an absolute path on the build host, or nothing")
    if graft:
        bad = [f for f in given.get("graft_files") or []
               if not GRAFT_FILE_RE.fullmatch(str(f)) or DOT_COMPONENT_RE.search(str(f))]
        if bad:
            say("graft_files", f"has {bad!r}: give plain paths of letters, digits, '_', '.', '-' and '/' without '.' "
                               "or '..' components (vllm/model_executor/models/qwen3_5.py)")
    # The images the Dockerfile starts FROM, by the grammar the fleet checks the inventory's images with.
    for variable in ("source", "base"):
        problem = check_value(host, f"hybrid_image_{variable}", given.get(variable),
                              VARIABLES[f"hybrid_image_{variable}"])
        if problem:
            out.append(problem)
    return out


def launcher_version(text: str, origin: str) -> str:
    """The LAUNCHER_VERSION the launcher TEXT declares; PlanError naming ORIGIN when it has none."""
    found = LAUNCHER_VERSION_RE.search(text or "")
    if not found:
        raise PlanError(f"{origin} has no LAUNCHER_VERSION line: hybrid_image_launcher must be empty (the collection's "
                        "dgxspark-launch) or name a launcher built from it (lookup dgxspark.vllm.node_program)")
    return found.group(1)


def _older(version: t.Any, than: t.Any) -> bool:
    """VERSION < THAN as Ansible's ``version`` test compares them by default (loose)."""
    try:
        return LooseVersion(str(version)) < LooseVersion(str(than))
    except TypeError:  # a number against a word in the same place
        return str(version) < str(than)


def ray_plan(given: t.Mapping[str, t.Any], from_info: t.Mapping[str, t.Any], lock_text: str | None,
             lock_path: str) -> dict[str, t.Any]:
    """Whether the image gets Ray (``add``: hybrid_image_ray_install, and with auto the Ray the image FROM has against
    hybrid_image_min_ray_version), its requirement ``spec`` and the pip ``requirements``, and the ``problems`` of the
    lock it is installed from (LOCK_TEXT: the text of LOCK_PATH on the controller, None when it is no file there)."""
    extras = [str(e) for e in given.get("ray_extras") or []]
    spec = f"ray{'[' + ','.join(extras) + ']' if extras else ''}=={given.get('ray_version')}"
    have = ((from_info.get("versions") or {}).get("ray")) or "0"
    install = given.get("ray_install")
    add = install == "always" or (install == "auto" and (not from_info.get("ray_present") or
                                                         _older(have, given.get("min_ray_version"))))
    found: list[str] = []
    if add:
        found = ([f"{lock_path} is not a file on the controller"] if lock_text is None else
                 lock_problems(lock_text, lock_path, "ray", str(given.get("ray_version") or "")))
    return {"add": add, "spec": spec, "requirements": ([spec] if add else []) + list(given.get("pip_install") or []),
            "lock_text": (lock_text or "") if add else "", "problems": found}


def inputs(given: t.Mapping[str, t.Any], *, recipe_sha256: str, source_id: str, base_id: str, ray: dict,
           wheelhouse: list[str], launcher_sha256: str, launcher: str, architectures: list[str]) -> dict[str, t.Any]:
    """The inputs the image is made from: its content tag is their hash (:func:`content_tag`). The key names are the
    role's first ones (``donor`` for the source): a new name would rebuild every image."""
    graft = given.get("strategy") == "graft"
    return {
        "strategy": given.get("strategy"),
        "recipe": recipe_sha256,
        "donor": source_id,
        "base": base_id if graft else "",
        "files": list(given.get("graft_files") or []) if graft else [],
        "registry_entries": list(given.get("registry_entries") or []) if graft else [],
        "config_entries": list(given.get("config_entries") or []) if graft else [],
        "pip": list(ray["requirements"]),
        "pip_cert": len(str(given.get("pip_cert") or "")) > 0,
        "ray_lock": hashlib.sha256(ray["lock_text"].encode()).hexdigest() if ray["add"] else "",
        "wheelhouse": sorted(wheelhouse) if given.get("pip_wheelhouse") else [],
        "launcher_sha256": launcher_sha256,
        "launcher_version": launcher,
        "architectures": list(architectures),
        "accept_conflicts": given.get("accept_conflicts"),
        "min_ray_version": given.get("min_ray_version"),
        "verify": bool(given.get("verify")),
    }


def ansible_json(value: t.Any) -> str:
    """VALUE as Ansible's ``to_json(sort_keys=True)`` writes it (json.dumps' defaults: ``, `` and ``: ``, ASCII)."""
    return json.dumps(value, sort_keys=True)


def content_tag(repository: str, strategy: str, verify: bool, made_of: dict) -> tuple[str, str]:
    """(the inputs' SHA-256, the image's content tag: REPOSITORY:STRATEGY-[unverified-]<its first 12 digits>)."""
    digest = hashlib.sha256(ansible_json(made_of).encode()).hexdigest()
    return digest, f"{repository}:{strategy}-{'' if verify else 'unverified-'}{digest[:12]}"
