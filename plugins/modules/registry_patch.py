#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.registry_patch."""

from __future__ import annotations

DOCUMENTATION = r"""
module: registry_patch
short_description: Make sure model architectures (or config classes) are registered in a vLLM source tree
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Edits vLLM's model registry C(vllm/model_executor/models/registry.py) (O(kind=registry), the default) or the config package
    C(vllm/transformers_utils/configs/__init__.py) (O(kind=configs)) so that the given entries are present or absent. This is what
    grafting a model from a newer vLLM release into an older image needs, done as a parsed, checked edit rather than a
    C(str.replace) or a C(sed) sent through a shell.
  - The file is parsed with Python's C(ast) module; vLLM is never imported, so no GPU, torch or matching transformers are needed.
  - "With O(kind=registry), the tables are the module-level dict literals mapping an architecture to a tuple of module and class name:
    C(_TEXT_GENERATION_MODELS), C(_MULTIMODAL_MODELS), C(_SPECULATIVE_DECODING_MODELS), C(_EMBEDDING_MODELS) and the others of
    each release, including entries inside C(**{...}) literals. Its unit tests use hand-written files in the shapes of the
    C(registry.py) of vLLM 0.10, 0.14, 0.17 and 0.33 and the C(configs/__init__.py) of 0.11, 0.14, 0.17 and 0.33."
  - "New entries are added as new lines after the last entry of the table, in the file's own style (indentation, quote character,
    trailing comma; an entry longer than the file's longest plain entry line is split one item per line when the file does that,
    or gets C(# noqa: E501) when the file does that). Removed entries take their lines with them. Every other byte of the file
    is left as it was."
  - An architecture that is already mapped to the same module and class in B(any) table of the file is reported in
    RV(already_present), with the table it was found in, and not added again. vLLM merges every table into one registry and
    releases moved entries between tables (for example from C(_TEXT_GENERATION_MODELS) to C(_MULTIMODAL_MODELS)), so the table
    only decides where a B(new) entry goes.
  - An architecture mapped to a B(different) module or class anywhere in the file is a conflict and fails the task, unless
    O(force=true).
  - "With O(kind=configs), an entry is a config class and the module file that defines it. Present means: the class is importable
    and listed in C(__all__). In the import style of vLLM 0.12 and older, that is a line
    C(from vllm.transformers_utils.configs.<module> import <class>) added after the last such import; in the lazy style of
    vLLM 0.13 and newer, an entry C(\"<class>\": \"vllm.transformers_utils.configs.<module>\") in the C(_CLASS_TO_MODULE) dict.
    The file's own style is detected, never chosen."
  - Before anything is written, the edited text must compile, every table (or the configs imports and C(__all__)) must evaluate to
    exactly its old entries plus the added and minus the removed ones, and every other top-level statement must be unchanged.
  - The file is replaced atomically (a temporary file in the same directory, renamed over it), keeping its mode, owner and
    SELinux context. A symbolic link is followed and its target is edited.
  - "The module refuses, with a message naming the problem and the file left untouched: a file that is not a vLLM registry or
    configs C(__init__.py), a table that does not exist or is not a dict literal (built by a function call or a comprehension,
    changed after its definition, assigned twice), an architecture or class already mapped elsewhere (unless O(force=true)),
    names that are not valid Python identifiers, and edits it cannot make line by line."
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: In check mode the edit is computed and verified, and nothing is written.
  diff_mode:
    support: full
    details: Returns the whole file before and after the edit.
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  path:
    description:
      - The file to edit.
      - With O(kind=registry), C(<site-packages>/vllm/model_executor/models/registry.py) (or a copy of it read out of an image).
      - With O(kind=configs), C(<site-packages>/vllm/transformers_utils/configs/__init__.py).
    type: path
    required: true
  kind:
    description:
      - What O(path) is.
      - V(registry) is the model registry; O(entries) give C(architecture), C(module), C(class_name) and C(table).
      - V(configs) is the config package's C(__init__.py); O(entries) give C(class_name) and C(module).
    type: str
    choices: [registry, configs]
    default: registry
  entries:
    description:
      - The entries to add or remove, in order.
      - An empty list changes nothing.
    type: list
    elements: dict
    required: true
    suboptions:
      architecture:
        description:
          - The architecture name as it appears in a model's C(config.json) C(architectures) list,
            for example V(Qwen3_5MoeForConditionalGeneration).
          - Required with O(kind=registry); not used with O(kind=configs).
          - Must be a valid Python identifier.
        type: str
      module:
        description:
          - With O(kind=registry), the module below C(vllm/model_executor/models) without C(.py), for example V(qwen3_5), or a
            dotted module name as newer releases use (V(vllm.models.step5)).
          - With O(kind=configs), the module below C(vllm/transformers_utils/configs) without C(.py), for example V(qwen3_5_moe)
            (V(speculators.base) for a sub-package); a name starting with C(vllm.), or V(transformers), is taken as an absolute
            module.
          - Required with O(state=present). With O(state=absent) it is optional; when given, only entries with this module are
            removed and an entry with another module is a conflict (unless O(force=true)).
        type: str
      class_name:
        description:
          - With O(kind=registry), the model class inside O(entries[].module). Defaults to O(entries[].architecture) with
            O(state=present), since most architectures are implemented by a class of the same name.
          - With O(kind=configs), the config class, for example V(Qwen3_5MoeConfig). Required.
          - With O(state=absent) and O(kind=registry), when given, only entries with this class are removed.
          - Must be a valid Python identifier.
        type: str
      table:
        description:
          - Only with O(kind=registry). The table (module-level dict) that a new entry goes into, for example
            V(_MULTIMODAL_MODELS). With O(state=present) it defaults to V(_TEXT_GENERATION_MODELS).
          - It must exist in the file; the task fails listing the tables of the file when it does not.
          - It does not make an existing entry in another table count as missing, see the description.
          - With O(state=absent), the architecture is removed from this table only; when not set, from every table it is in.
        type: str
  state:
    description:
      - V(present) adds the entries that are missing.
      - V(absent) removes the entries that are there (with their whole lines); entries that are not there are ignored.
    type: str
    choices: [present, absent]
    default: present
  force:
    description:
      - Replace (with O(state=present)) or remove (with O(state=absent)) an entry that maps the architecture or class to
        a different module or class, instead of failing.
      - With O(kind=registry) and O(state=present), a conflicting entry in the requested table is replaced in place and
        conflicting entries in other tables are removed; they are listed in RV(removed).
    type: bool
    default: false
  backup:
    description:
      - Create a backup file (with a timestamp in its name) next to O(path) before changing it.
    type: bool
    default: false
notes:
  - Registering an architecture does not make the model run. The model's module file (for example C(qwen3_5.py)), its config
    classes and every library it imports must exist in the same vLLM tree; vLLM imports the module only when a model with that
    architecture is loaded, and fails then with C(Model architectures [...] failed to be inspected). Test the result by
    importing the module through the registry on a CPU before shipping an image.
  - Grafting may also need the C(model_type) to config class mapping in C(vllm/transformers_utils/config.py)
    (C(_CONFIG_REGISTRY)); this module does not edit that file.
  - The edit is verified on the new text, and the file is written only when that succeeds, so a refused or failed task
    never leaves a partly edited file behind.
seealso:
  - name: Registering a model with vLLM
    description: How vLLM's registry maps architectures to model classes.
    link: https://docs.vllm.ai/en/latest/contributing/model/registration.html
"""

EXAMPLES = r"""
- name: Register the Qwen3.5 architectures in a vLLM 0.14 registry (a graft of the 0.17 model files)
  dgxspark.vllm.registry_patch:
    path: /build/vllm/model_executor/models/registry.py
    entries:
      - architecture: Qwen3_5ForConditionalGeneration
        module: qwen3_5
        class_name: Qwen3_5ForConditionalGeneration
        table: _MULTIMODAL_MODELS
      - architecture: Qwen3_5MoeForConditionalGeneration
        module: qwen3_5
        class_name: Qwen3_5MoeForConditionalGeneration
        table: _MULTIMODAL_MODELS
    backup: true
  register: registry

- name: And the MTP heads used for speculative decoding (class_name defaults to the architecture)
  dgxspark.vllm.registry_patch:
    path: /build/vllm/model_executor/models/registry.py
    entries:
      - {architecture: Qwen3_5MTP, module: qwen3_5_mtp, table: _SPECULATIVE_DECODING_MODELS}
      - {architecture: Qwen3_5MoeMTP, module: qwen3_5_mtp, table: _SPECULATIVE_DECODING_MODELS}

- name: Make the Qwen3.5 config classes importable from vllm.transformers_utils.configs
  dgxspark.vllm.registry_patch:
    path: /build/vllm/transformers_utils/configs/__init__.py
    kind: configs
    entries:
      - {class_name: Qwen3_5Config, module: qwen3_5}
      - {class_name: Qwen3_5TextConfig, module: qwen3_5}
      - {class_name: Qwen3_5MoeConfig, module: qwen3_5_moe}
      - {class_name: Qwen3_5MoeTextConfig, module: qwen3_5_moe}

- name: Point an architecture at a patched module, replacing the existing mapping
  dgxspark.vllm.registry_patch:
    path: /build/vllm/model_executor/models/registry.py
    entries:
      - architecture: Qwen3MoeForCausalLM
        module: qwen3_moe_patched
        class_name: Qwen3MoeForCausalLM
    force: true

- name: Remove the grafted architectures again (from whichever table they are in)
  dgxspark.vllm.registry_patch:
    path: /build/vllm/model_executor/models/registry.py
    state: absent
    entries:
      - architecture: Qwen3_5ForConditionalGeneration
      - architecture: Qwen3_5MoeForConditionalGeneration

- name: Show where each architecture was found
  ansible.builtin.debug:
    msg: "{{ registry.already_present | map(attribute='table') | list }} / added {{ registry.added | map(attribute='architecture') | list }}"
"""

RETURN = r"""
added:
  description:
    - The entries that were added (or would be, in check mode).
    - With O(kind=registry), each has C(architecture), C(module), C(class_name) and the C(table) it went into. An entry
      replaced with O(force=true) is listed here and its old mapping in RV(removed).
    - With O(kind=configs), each has C(class_name), the absolute C(module) and C(changes), the parts that were added
      (V(import) or V(_CLASS_TO_MODULE), and V(__all__)).
  returned: always
  type: list
  elements: dict
  sample:
    - {architecture: Qwen3_5ForConditionalGeneration, module: qwen3_5, class_name: Qwen3_5ForConditionalGeneration, table: _MULTIMODAL_MODELS}
already_present:
  description:
    - The entries that were already there with the same mapping, and were left alone.
    - With O(kind=registry), each has C(architecture), C(module), C(class_name), C(table) (the requested table when the entry is
      in it, otherwise the first table it was found in) and C(tables) (every table it is in).
    - With O(kind=configs), each has C(class_name) and the absolute C(module).
  returned: always
  type: list
  elements: dict
  sample:
    - architecture: Qwen3_5MoeForConditionalGeneration
      module: qwen3_5
      class_name: Qwen3_5MoeForConditionalGeneration
      table: _MULTIMODAL_MODELS
      tables: [_MULTIMODAL_MODELS]
removed:
  description:
    - The entries that were removed (or would be), with O(state=absent) or replaced with O(force=true).
    - With O(kind=registry), each has C(architecture), C(module), C(class_name), C(table) and C(line) (in the file before the edit).
    - With O(kind=configs), each has C(class_name), C(module) and C(changes).
  returned: always
  type: list
  elements: dict
  sample:
    - {architecture: Qwen3_5ForConditionalGeneration, module: qwen3_5, class_name: Qwen3_5ForConditionalGeneration,
       table: _MULTIMODAL_MODELS, line: 444}
backup_file:
  description: The backup of the original file.
  returned: when O(backup=true) and the file was changed
  type: str
  sample: /build/vllm/model_executor/models/registry.py.12345.2026-03-11@09:55:00~
diff:
  description: The whole file before and after the edit.
  returned: in diff mode
  type: dict
  contains:
    before:
      description: The text before.
      type: str
    after:
      description: The text after.
      type: str
    before_header:
      description: O(path).
      type: str
    after_header:
      description: O(path).
      type: str
  sample:
    before_header: /build/vllm/model_executor/models/registry.py
    after_header: /build/vllm/model_executor/models/registry.py
    before: "..."
    after: "..."
"""

import os
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.dgxspark.vllm.plugins.module_utils._vllm_registry import (
    PatchResult,
    RegistryError,
    patch_configs,
    patch_registry,
)

_BOM = "\ufeff"


def compute(text: str, kind: str, entries: list, state: str, force: bool) -> PatchResult:
    """The edit of ``text``; raises RegistryError when the file or the entries are refused."""
    if kind == "configs":
        return patch_configs(text, entries, state=state, force=force)
    return patch_registry(text, entries, state=state, force=force)


def read_text(path: str) -> str:
    """The file's text; RegistryError when it is missing, not a regular file or not UTF-8."""
    if not os.path.exists(path):
        raise RegistryError("%s does not exist" % path)
    if not os.path.isfile(path):
        raise RegistryError("%s is not a regular file" % path)
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RegistryError("%s is not UTF-8 text (%s)" % (path, exc)) from exc


def write_atomic(module: AnsibleModule, path: str, text: str) -> None:
    """Write ``text`` to a temporary file next to ``path`` and move it over ``path`` (mode, owner and context kept)."""
    directory = os.path.dirname(path) or "."
    handle, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(text.encode("utf-8"))
            stream.flush()
            os.fsync(stream.fileno())
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def run_module(module: AnsibleModule) -> dict:
    params = module.params
    path = params["path"]
    real = os.path.realpath(path)
    bom, patch = False, PatchResult("", "")
    try:
        text = read_text(real)
        bom = text.startswith(_BOM)
        patch = compute(text[1:] if bom else text, params["kind"], params["entries"], params["state"], params["force"])
    except RegistryError as exc:
        module.fail_json(msg="%s: %s" % (path, to_native(exc)), changed=False)
    except (OSError, ValueError, RecursionError) as exc:
        module.fail_json(msg="%s: cannot read or parse the file: %s" % (path, to_native(exc)), changed=False, exception=traceback.format_exc())
    before = (_BOM if bom else "") + patch.before
    after = (_BOM if bom else "") + patch.after
    result = {
        "changed": patch.changed,
        "added": patch.added,
        "already_present": patch.already_present,
        "removed": patch.removed,
    }
    if module._diff:
        result["diff"] = {"before": before, "after": after, "before_header": path, "after_header": path}
    if patch.changed and not module.check_mode:
        if params["backup"]:
            result["backup_file"] = module.backup_local(real)
        try:
            write_atomic(module, real, after)
        except OSError as exc:
            module.fail_json(msg="%s: cannot write the file: %s" % (path, to_native(exc)), exception=traceback.format_exc(), **result)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "kind": {"type": "str", "choices": ["registry", "configs"], "default": "registry"},
            "entries": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "architecture": {"type": "str"},
                    "module": {"type": "str"},
                    "class_name": {"type": "str"},
                    "table": {"type": "str"},
                },
            },
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "force": {"type": "bool", "default": False},
            "backup": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    module.exit_json(**run_module(module))


if __name__ == "__main__":
    main()
