#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.model_checkpoint."""

from __future__ import annotations

DOCUMENTATION = r"""
module: model_checkpoint
short_description: The size of a model's checkpoint, read before any download, and the free disk where it goes
version_added: 0.3.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - Reads the size of a Hugging Face model's weights without downloading them, for the
    P(dgxspark.vllm.preflight#role) role to judge whether the model fits each node's memory and the head's disk
    (filter P(dgxspark.vllm.model_fit#filter)) before any slow step.
  - The size is the C(metadata.total_size) of the checkpoint's safetensors index (C(model.safetensors.index.json)) -
    the node's own copy of it under O(models_dir)/<name> when there is one; else, with O(fetch), the hub's, fetched
    alone (one small JSON file). A repository without an index is sized from the hub's file metadata (its tree, with
    every file's size).
  - Also reports what the node's copy holds (the bytes of its weight files, whether every shard the index names is
    there) and the free space on the file system the weights go to.
  - Never fails because of what it finds; a hub that cannot be read is reported in RV(error) and RV(status).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.attributes.read_only
options:
  model:
    description: The model's Hugging Face repository id (C(org/name)); its copy is O(models_dir)/<name>.
    type: str
    required: true
  models_dir:
    description: Where the weights live on the node (the collection's C(dgxspark_models_dir)).
    type: path
    default: /srv/dgxspark/models
  revision:
    description: The branch, tag or commit to size on the hub; empty means the default branch.
    type: str
    default: ""
  fetch:
    description: Ask the hub when the node has no index of the model. V(false) reads the node's copy only.
    type: bool
    default: true
  endpoint:
    description: The hub's address.
    type: str
    default: https://huggingface.co
  token:
    description: A Hugging Face token for a gated or private model (sent to O(endpoint) only); empty sends none.
    type: str
    default: ""
  timeout:
    description: Seconds each request to the hub may take.
    type: int
    default: 30
seealso:
  - module: dgxspark.vllm.model_manifest
"""

EXAMPLES = r"""
- name: Read the size of the model's checkpoint on the head, before any download
  dgxspark.vllm.model_checkpoint:
    model: Qwen/Qwen3.5-122B-A10B-FP8
    models_dir: /srv/dgxspark/models
    token: "{{ dgxspark_hf_token | default('') }}"
  register: checkpoint
"""

RETURN = r"""
total_bytes:
  description: The checkpoint's bytes (0 when unknown).
  returned: always
  type: int
  sample: 119000000000
source:
  description: Where RV(total_bytes) was read (empty when unknown).
  returned: always
  type: str
  sample: the hub's model.safetensors.index.json
url:
  description: The hub address asked last (empty when the hub was not asked).
  returned: always
  type: str
  sample: https://huggingface.co/Qwen/Qwen3.5-122B-A10B-FP8/resolve/main/model.safetensors.index.json
status:
  description: The HTTP status of a failed request to the hub (null when none failed or there was no answer).
  returned: always
  type: int
  sample: 401
error:
  description: Why the size is unknown (empty when it is known).
  returned: always
  type: str
  sample: ""
local:
  description:
    - The node's copy - C(path), C(exists), C(index_bytes) (its index's total, null without one), C(present_bytes)
      (its weight files), C(complete) (every shard the index names is there) and C(error).
  returned: always
  type: dict
  sample: {path: /srv/dgxspark/models/Qwen3.5-122B-A10B-FP8, exists: false, index_bytes: null, present_bytes: 0,
           complete: false, error: ""}
disk:
  description: The free bytes of the file system the weights go to (C(path) is its nearest existing directory).
  returned: always
  type: dict
  sample: {path: /srv, free_bytes: 1869730201600, error: ""}
"""

import json
import os
import re
from urllib.error import HTTPError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.dgxspark.vllm.plugins.module_utils._model_fit import (
    free_where, hub_urls, index_total, local_copy, tree_total)

MODEL_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$"
MAX_BYTES = 64 << 20  # an index of a very large checkpoint is a few MB


def get_json(url: str, token: str, timeout: int) -> tuple:
    """(parsed JSON, HTTP status of a failure or None, error text)."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        response = open_url(url, headers=headers, timeout=timeout, http_agent="dgxspark.vllm")
        return json.loads(response.read(MAX_BYTES).decode("utf-8")), None, ""
    except HTTPError as exc:
        return None, exc.code, f"HTTP {exc.code} {exc.reason}"
    except ValueError as exc:
        return None, None, f"not JSON ({exc})"
    except Exception as exc:  # pylint: disable=broad-exception-caught  # URLError, socket and TLS errors alike
        return None, None, str(getattr(exc, "reason", exc))


def from_hub(model: str, revision: str, endpoint: str, token: str, timeout: int) -> dict:
    urls = hub_urls(endpoint, model, revision)
    data, status, error = get_json(urls["index"], token, timeout)
    total = index_total(data)
    if total:
        return {"total_bytes": total, "source": "the hub's model.safetensors.index.json", "url": urls["index"],
                "status": None, "error": ""}
    if status not in (None, 404) or (status is None and error):
        return {"total_bytes": 0, "source": "", "url": urls["index"], "status": status, "error": error}
    data, status, error = get_json(urls["tree"], token, timeout)  # no index: the repository's file metadata
    total = tree_total(data)
    if total:
        return {"total_bytes": total, "source": "the hub's file metadata", "url": urls["tree"], "status": None,
                "error": ""}
    return {"total_bytes": 0, "source": "", "url": urls["tree"], "status": status,
            "error": error or "the hub lists no weight files for it"}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "model": {"type": "str", "required": True},
            "models_dir": {"type": "path", "default": "/srv/dgxspark/models"},
            "revision": {"type": "str", "default": ""},
            "fetch": {"type": "bool", "default": True},
            "endpoint": {"type": "str", "default": "https://huggingface.co"},
            "token": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not re.match(MODEL_RE, p["model"] or ""):
        module.fail_json(msg=f"model must be a Hugging Face id org/name (dgxspark_model), not {p['model']!r:.100}")
    if not p["endpoint"].startswith(("https://", "http://")):
        module.fail_json(msg=f"endpoint must be an http(s) address, not {p['endpoint']!r:.100}")
    directory = os.path.join(p["models_dir"], os.path.basename(p["model"]))
    local = local_copy(directory)
    found = {"total_bytes": 0, "source": "", "url": "", "status": None, "error": ""}
    if local["index_bytes"]:
        found.update(total_bytes=local["index_bytes"], source=f"{directory}/model.safetensors.index.json")
    elif local["complete"]:
        found.update(total_bytes=local["present_bytes"], source=f"the weight files under {directory}")
    elif p["fetch"]:
        found = from_hub(p["model"], p["revision"], p["endpoint"], p["token"], p["timeout"])
    else:
        found["error"] = f"no index under {directory}, and the hub is not asked (offline or downloads off)"
    module.exit_json(changed=False, local=local, disk=free_where(directory), **found)


if __name__ == "__main__":
    main()
