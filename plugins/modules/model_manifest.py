#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.model_manifest."""

from __future__ import annotations

DOCUMENTATION = r"""
module: model_manifest
short_description: The manifest (size and sha256 of every file) of a model directory, and whether the model is complete
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Lists the regular files under O(path) with their size and sha256, the identity that
    M(dgxspark.vllm.model_sync) compares between nodes.
  - Hashes are cached in C(.dgxspark-manifest.json) in O(path), keyed by each file's size, modification time (ns) and
    inode, so a rerun over a large model only reads the files that changed. The cache is bookkeeping, not state;
    writing it does not make the task C(changed).
  - Left out as not part of a model are the cache file, hidden C(.NAME.dgxspark-part) files of an unfinished transfer
    and Hugging Face's C(.cache) directory. A symlink is followed only when it leads to a regular file inside O(path);
    any other is reported in RV(problems).
  - Also tells whether the model looks complete (RV(complete), RV(missing)). That needs a C(config.json), at least
    one weight file, every shard named by a C(*.index.json) weight map, and no unfinished Hugging Face download.
  - With O(revision), a copy of another revision is not complete either (RV(missing) says which revision it is).
    The revision a copy holds is the one recorded in C(.dgxspark-revision) in O(path) (written by the
    M(dgxspark.vllm.model_sync) role after a download), or, for a commit hash, the commit Hugging Face's CLI noted
    for every file under C(.cache/huggingface/download). A branch or tag name cannot be resolved without the network,
    so only the recorded revision matches it.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Computes the manifest; the hash cache is read but not written.
  diff_mode:
    support: none
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  path:
    description: The model directory.
    type: path
    required: true
  cache:
    description: Use and update the hash cache. V(false) reads every file.
    type: bool
    default: true
  hashes:
    description:
      - Compute hashes. V(false) lists the files with their sizes only (RV(files) then has C(sha256=null)), which is
        enough to tell whether a model is complete.
    type: bool
    default: true
  revision:
    description:
      - The revision the model must be (a branch, a tag or a commit hash). Empty accepts any revision.
    type: str
    default: ""
seealso:
  - module: dgxspark.vllm.model_sync
"""

EXAMPLES = r"""
- name: Is the model complete on the head?
  dgxspark.vllm.model_manifest:
    path: /srv/dgxspark/models/Qwen3.5-122B-A10B-FP8
    hashes: false
  register: head_model

- name: The manifest of the model (cached hashes)
  dgxspark.vllm.model_manifest:
    path: /srv/dgxspark/models/Qwen3.5-122B-A10B-FP8
  register: manifest
"""

RETURN = r"""
exists:
  description: Whether O(path) is a directory.
  returned: always
  type: bool
  sample: true
complete:
  description: Whether the model looks complete (see RV(missing)).
  returned: always
  type: bool
  sample: true
missing:
  description: What a complete model would have and this one lacks (files named by the index, C(config.json), ...).
  returned: always
  type: list
  elements: str
  sample: [model-00002-of-00004.safetensors]
files:
  description: Relative path to C(size) and C(sha256) (null when O(hashes=false)).
  returned: always
  type: dict
  sample: {config.json: {size: 4211, sha256: 9f2c0e5b8d7a1c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e}}
file_count:
  description: Number of files in RV(files).
  returned: always
  type: int
  sample: 52
total_bytes:
  description: Bytes of all files in RV(files).
  returned: always
  type: int
  sample: 125112061952
hashed:
  description: Files read and hashed in this run (the others came from the cache).
  returned: always
  type: int
  sample: 0
cached:
  description: Files whose hash came from the cache.
  returned: always
  type: int
  sample: 52
revision:
  description:
    - What O(path) says about its revision. C(recorded) is the revision recorded after the collection's last download
      (null when none); C(commits) are the commits Hugging Face's CLI noted for the files (sorted, often one).
  returned: always
  type: dict
  sample: {recorded: main, commits: [0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c]}
problems:
  description: Entries that are not part of the manifest and why (a symlink leading out of O(path), a device...).
  returned: always
  type: list
  elements: str
  sample: []
"""

import os
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils import _model_files as mf


def describe(path: str, cache: bool, hashes: bool, write_cache: bool, revision: str = "") -> dict:
    """The module's result for PATH (no AnsibleModule needed)."""
    result = {"changed": False, "exists": os.path.isdir(path), "files": {}, "file_count": 0, "total_bytes": 0,
              "hashed": 0, "cached": 0, "problems": [], "revision": {"recorded": None, "commits": []}}
    if not result["exists"]:
        result.update(complete=False, missing=[f"{path} does not exist"])
        return result
    if hashes:
        found = mf.manifest(path, use_cache=cache, write_cache=write_cache)
    else:
        names, problems = mf.walk(path)
        found = {"files": {n: {"size": os.stat(os.path.join(path, n)).st_size, "sha256": None} for n in names},
                 "problems": problems, "hashed": 0, "cached": 0}
    missing, result["revision"] = mf.judge(path, found["files"], revision)
    result.update(files=found["files"], problems=found["problems"], hashed=found["hashed"], cached=found["cached"],
                  file_count=len(found["files"]), total_bytes=mf.total_bytes(found["files"]),
                  complete=not missing, missing=missing)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "cache": {"type": "bool", "default": True},
            "hashes": {"type": "bool", "default": True},
            "revision": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = describe(p["path"], p["cache"], p["hashes"], write_cache=not module.check_mode,
                          revision=p["revision"])
    except OSError as exc:
        module.fail_json(msg=f"reading {p['path']} failed: {exc}", exception=traceback.format_exc())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
