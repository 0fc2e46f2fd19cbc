#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.transfer_announce."""

from __future__ import annotations

DOCUMENTATION = r"""
module: transfer_announce
short_description: Tell a node what it may receive over the fleet's transfer trust, before a sync
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - The controller's side of every transfer between nodes. The transfer program a node runs for the transfer key of
    the nodes that send to it (P(dgxspark.vllm.node_trust#role)) refuses to tag an image, load an image or write a
    model file that was not announced to that node by this module, so a node holding a transfer key can place on
    its peers only what the play asked for.
  - O(images) replaces C(announced-images.json) in O(dir) (the references the node may receive or re-point, each
    with the image ID it must be and the image's size, which bounds the stream and which the node checks its free
    space against, and the image's identity across image stores). The node verifies a loaded image against this
    announcement alone, never against what the sender says.
  - An image announcement is one-use and expires. A request must carry O(nonce); each announced reference serves one
    request (the node removes its entry when it takes the request, whatever the outcome), and the announcement
    expires O(ttl) seconds after it was written (the node's clock). The same images with the same nonce, not expired,
    are left as they are.
  - O(model) with O(files) sets that model's entry of C(announced-models.json) (the files its directory may hold,
    with their sizes and sha256; files outside that manifest are never written, files in it are never deleted).
  - Every value is checked before anything is written (reference grammar, image IDs, relative paths, hashes). The
    files are 0600, owned by root, replaced atomically and only when their content differs.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reports whether an announcement would change; nothing is written.
  diff_mode:
    support: full
    details: The old and new announcement.
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  dir:
    description: The trust directory, beside the transfer program's configuration (P(dgxspark.vllm.node_trust#role)'s C(node_trust_dir)).
    type: path
    default: /etc/dgxspark/transfer
  images:
    description: The images the node may receive or re-point. Given, it replaces the node's image announcement.
    type: list
    elements: dict
    suboptions:
      ref:
        description: The reference (C(repository[:tag])) the node may point at the image.
        type: str
        required: true
      id:
        description: The image ID the reference must point at (C(sha256:<64 hex>)).
        type: str
        required: true
      bytes:
        description: The image's size; a stream may pass it by at most 10% plus 64 MiB, and the node needs this much free.
        type: int
        default: 0
      store:
        description:
          - The image store the source holds the image in (RV(dgxspark.vllm.image_sync#module:source.store)). A node
            with the same store must load exactly O(images[].id); a node with the other store, an image with
            O(images[].content_label) or O(images[].fingerprint) (a load that cannot be verified is refused).
          - Unset, every node must load exactly O(images[].id).
        type: str
        choices: [graphdriver, containerd]
        version_added: 0.5.0
      content_label:
        description: The image's content label (RV(dgxspark.vllm.image_sync#module:source.content_label)), if it has one.
        type: str
        version_added: 0.5.0
      fingerprint:
        description: The image's content fingerprint (RV(dgxspark.vllm.image_sync#module:source.fingerprint)).
        type: str
        version_added: 0.5.0
  nonce:
    description:
      - The nonce the requests of the transfer carry (RV(dgxspark.vllm.image_sync#module:nonce) of the check run).
        Required with O(images).
    type: str
    version_added: 0.5.0
  ttl:
    description: Seconds the image announcement stays valid.
    type: int
    default: 7200
    version_added: 0.5.0
  model:
    description: A model directory, relative to the node's models root. Needs O(files).
    type: str
  files:
    description:
      - The files the model's directory may hold (relative path to C(size) and C(sha256)), as
        RV(dgxspark.vllm.model_sync#module:manifest) returns them.
    type: dict
notes:
  - The module must run as root (C(become)); the trust directory belongs to root.
seealso:
  - module: dgxspark.vllm.image_sync
  - module: dgxspark.vllm.model_sync
  - module: dgxspark.vllm.transfer_trust
"""

EXAMPLES = r"""
- name: Announce the serving image to the workers before the head sends it
  dgxspark.vllm.transfer_announce:
    images:
      - ref: vllm-node:26.01
        id: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
        bytes: 21474836480
        store: graphdriver
    nonce: "{{ image_sync_check.nonce }}"

- name: Announce the model's files
  dgxspark.vllm.transfer_announce:
    model: Qwen3.5-122B-A10B-FP8
    files: "{{ head_manifest.files }}"
"""

RETURN = r"""
changed_files:
  description: The announcement files that were (or in check mode would be) written.
  returned: always
  type: list
  elements: str
  sample: [/etc/dgxspark/transfer/announced-images.json]
"""

import contextlib
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._announce import (
    IMAGES_FILE,
    MODELS_FILE,
    NotAnnounced,
    images_lock,
    images_text,
    models_text,
)
from ansible_collections.dgxspark.vllm.plugins.module_utils._files import Changes, read_or_none


def parsed_or_none(text):
    """An announcement file's content as a mapping; None when absent or unreadable (it is then replaced)."""
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def announce(p: dict, changes: Changes) -> None:
    """Write the announcements P asks for (NotAnnounced for a bad value, before anything is written)."""
    images = None
    if p["images"] is not None:
        if p["ttl"] <= 0:
            raise NotAnnounced(f"ttl must be a positive number of seconds (is {p['ttl']})")
        now = int(time.time())
        images = images_text(p["images"], p["nonce"], now + p["ttl"])
    models = None
    if p["model"] is not None:
        parsed = parsed_or_none(read_or_none(os.path.join(p["dir"], MODELS_FILE)))
        models = models_text(parsed, p["model"], p["files"])
    changes.ensure_dir(p["dir"], 0o700, 0, 0)
    if images is not None:
        path = os.path.join(p["dir"], IMAGES_FILE)
        # Under the lock the transfer program takes an entry with: an announcement never crosses a request.
        with contextlib.nullcontext() if changes.check else images_lock(p["dir"]):
            old = parsed_or_none(read_or_none(path))
            new = json.loads(images)
            # The same announcement, not expired, stays as it is (a rerun of the same task changes nothing).
            if not (old and {**old, "expires": 0} == {**new, "expires": 0} and isinstance(old.get("expires"), int)
                    and old["expires"] > now):
                changes.ensure_file(path, images.encode(), 0o600, 0, 0)
    if models is not None:
        changes.ensure_file(os.path.join(p["dir"], MODELS_FILE), models.encode(), 0o600, 0, 0)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "default": "/etc/dgxspark/transfer"},
            "images": {"type": "list", "elements": "dict", "options": {
                "ref": {"type": "str", "required": True},
                "id": {"type": "str", "required": True},
                "bytes": {"type": "int", "default": 0},
                "store": {"type": "str", "choices": ["graphdriver", "containerd"]},
                "content_label": {"type": "str"},
                "fingerprint": {"type": "str"},
            }},
            "nonce": {"type": "str"},
            "ttl": {"type": "int", "default": 7200},
            "model": {"type": "str"},
            "files": {"type": "dict"},
        },
        required_together=[("model", "files")],
        required_one_of=[("images", "model")],
        required_by={"images": "nonce"},
        supports_check_mode=True,
    )
    p = module.params
    changes = Changes(module.check_mode)
    try:
        announce(p, changes)
    except NotAnnounced as exc:
        module.fail_json(msg=f"nothing was announced: {exc}")
    except OSError as exc:
        module.fail_json(msg=f"writing the announcement failed: {exc}", changed_files=changes.paths)
    module.exit_json(**changes.result(module._diff))


if __name__ == "__main__":
    main()
