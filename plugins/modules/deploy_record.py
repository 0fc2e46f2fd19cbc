#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.deploy_record."""

from __future__ import annotations

DOCUMENTATION = r"""
module: deploy_record
short_description: Record what a deploy left on a node, and tell in one read whether the node is still so
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - A deploy that ended serving writes, on every node of a cluster (O(state=present)), a root-only record of what it
    was asked (O(inputs), a digest of its inputs) and of what it left there - the collection's files under
    O(trees) and O(files) (content digest, mode, owner), the containers carrying O(label) (ID, image, whether they
    run, when they last started, a digest of their configuration), the images in O(images) (their IDs) and the files under O(stat_dirs)
    (size and modification time, not read) - with the cluster's serving result O(result) (no secrets).
  - The next deploy reads it back (O(state=read)) and compares it with the node as it is now, in one call; RV(converged)
    says whether every "is it already so?" question of the deploy has the answer the record gives, and
    RV(differences) names what differs. A deploy sends a cluster whose every node is converged (and whose head answers
    a completion) past the steps that would only find the same answers one round trip at a time.
  - O(inputs) is made on the controller by the action plugin of the same name when it is not given - a sha256 over
    the variables of the collection's prefixes that every node of the cluster sees (inventory, C(-e), secrets, all
    resolved), the cluster's place in the fleet, each member's fabric as the preflight read it, and the collection's
    own files - so that a change of any of them sends the cluster through the whole deploy. In O(state=present), give
    the read's RV(inputs) (by then the roles have published facts of their own).
  - What changes on its own while a cluster serves (the watchdog's state and events, runtime sockets, Prometheus'
    data) is excluded by O(exclude); the watchdog's maintenance marker is not (a paused watchdog is a difference).
  - Nothing in the record is a bare hash of a secret. File contents and the inputs digest are recorded as HMAC-SHA256
    under a random key of the node's own, C(record.key) beside the record (root only, made by the first
    O(state=present)), so that a copy of the record alone cannot test a guess of the API key, the Ray token or the
    transfer key. A record without its key is no record (the next deploy goes through every step).
extends_documentation_fragment:
  - dgxspark.vllm.attributes
  - dgxspark.vllm.docker
attributes:
  check_mode:
    support: full
    details: >-
      O(state=read) only reads. O(state=present) reports whether the record would change (RV(refreshed)), and writes
      nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  state:
    description: V(read) compares the node with its record; V(present) writes the record of the node as it is now.
    type: str
    choices: [read, present]
    default: read
  inputs:
    description:
      - The digest of the deploy's inputs. Made by the action plugin when not given (O(state=read)); required with
        O(state=present), where it is the read's RV(inputs).
      - It covers the deploy's secrets (resolved), so a task that registers it should have C(no_log), as
        C(deploy_qwen35.yml)'s do; the module's own invocation never shows it.
    type: str
  path:
    description: The record (root only; its directory is made 0700).
    type: path
    default: /var/lib/dgxspark/deploy/record.json
  trees:
    description: Directories whose every entry is recorded (files by content digest, all by mode and owner).
    type: list
    elements: path
    default: [/etc/dgxspark, /var/lib/dgxspark, /opt/dgxspark]
  exclude:
    description:
      - Paths (and everything under them) left out of O(trees) and O(files). The directory of O(path) is always left
        out.
      - The role C(dgxspark.vllm.deploy_state) derives them from the watchdog's, the gateway's and the monitoring's
        directories.
    type: list
    elements: path
    default:
      - /var/lib/dgxspark/watchdog/state.json
      - /var/lib/dgxspark/watchdog/lock
      - /var/lib/dgxspark/watchdog/events.jsonl
      - /var/lib/dgxspark/watchdog/events.jsonl.1
      - /var/lib/dgxspark/gateway
      - /var/lib/dgxspark/prometheus
  files:
    description: More files recorded like those under O(trees) (for example the transfer account's authorized_keys).
    type: list
    elements: path
    default: []
  stat_dirs:
    description: Directories whose files are recorded by size and modification time (the model's weights).
    type: list
    elements: path
    default: []
  images:
    description: Images recorded by ID (the serving image and the one it was built from). A read also checks every image the record holds.
    type: list
    elements: str
    default: []
  label:
    description: The label every container of the collection carries.
    type: str
    default: org.dgxspark.vllm.component
  result:
    description: With O(state=present), what the cluster serves (the release and endpoint; no secrets), returned by later reads in RV(result).
    type: dict
    default: {}
seealso:
  - module: dgxspark.vllm.node_facts
  - module: dgxspark.vllm.serve_probe
"""

EXAMPLES = r"""
- name: Compare every node with the record of its cluster's last deploy
  dgxspark.vllm.deploy_record:
    images: ["{{ dgxspark_image }}"]
    stat_dirs: ["/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8"]
  register: deploy_record_read

- name: Record what the deploy left (after it served)
  dgxspark.vllm.deploy_record:
    state: present
    inputs: "{{ deploy_record_read.inputs }}"
    images: ["{{ dgxspark_image }}", "{{ vllm_serve_result.release.image }}"]
    stat_dirs: ["/srv/dgxspark/models/Qwen3.5-122B-A10B-FP8"]
    result:
      release: "{{ vllm_serve_result.release }}"
"""

RETURN = r"""
inputs:
  description:
    - The digest of the deploy's inputs the node was compared with (or recorded with), added by the action plugin
      (the module itself never returns it, since O(inputs) is C(no_log)).
  returned: always
  type: str
  sample: 3f0c9a...
converged:
  description: With O(state=read), whether the record exists, has the same RV(inputs) and the node is as it describes.
  returned: always
  type: bool
  sample: true
differences:
  description: With O(state=read), what differs (at most eight reasons, then how many more); empty when RV(converged).
  returned: always
  type: list
  elements: str
  sample: ["container dgxspark-ray-head: not running", "file /etc/dgxspark/vllm/serve.env: content changed"]
refreshed:
  description:
    - With O(state=present), whether the record was written (or would be, in check mode). It is written when anything
      in it differs, but reported as C(changed) only when its inputs or result differ, or there was none. A node
      whose state alone moved (a model file's modification time after a copy that found the same bytes) is not a
      change the deploy made.
  returned: always
  type: bool
  sample: false
result:
  description: The O(result) the record holds (V({}) without a record).
  returned: always
  type: dict
  sample: {release: {image: "dgxspark/vllm-hybrid:overlay-a3b015b437c2"}}
"""

import os
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.dgxspark.vllm.plugins.module_utils import _deploy_record as record
from ansible_collections.dgxspark.vllm.plugins.module_utils import _docker
from ansible_collections.dgxspark.vllm.plugins.module_utils._files import read_or_none, write_atomically

try:
    import docker
    from docker.errors import DockerException, NotFound
except ImportError:
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None


def capture(client, p: dict, recorded: dict | None, key: bytes) -> dict:
    """The node as it is now, in the record's shape (file contents keyed with KEY)."""
    # The record's own directory is never part of what it records.
    exclude = [*p["exclude"], os.path.dirname(p["path"])]
    return {
        "files": record.capture_files(p["trees"], p["files"], exclude, key),
        "stats": record.capture_stats(p["stat_dirs"]),
        "containers": record.capture_containers(client, p["label"], NotFound),
        "images": record.capture_images(client, record.image_refs(p["images"], recorded), NotFound),
    }


def ensure_dir(path: str) -> None:
    """The record's directory, root only, made before the node is captured (so that it is part of what is there)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)


def run(module, client) -> dict:
    p = module.params
    text = read_or_none(p["path"])
    recorded = record.parse(text)
    directory = os.path.dirname(p["path"])
    if p["state"] == "read":
        key = record.load_key(directory, create=False)
        if key is None:
            recorded = None  # no record made on this node can be compared without its key
        now = capture(client, p, recorded, key or b"")
        diffs = record.differences(recorded, record.keyed(key or b"", p["inputs"]), now)
        return {"changed": False, "refreshed": False, "converged": not diffs, "differences": diffs,
                "result": (recorded or {}).get("result") or {}}
    if not module.check_mode:
        ensure_dir(p["path"])
    # Check mode makes no key: without one, nothing recorded compares, and the record would be written anew.
    key = record.load_key(directory, create=not module.check_mode)
    if key is None:
        key, recorded = os.urandom(32), None
    now = capture(client, p, None, key)
    inputs = record.keyed(key, p["inputs"])
    content = record.render(inputs, now, p["result"])
    # A change is a record of other inputs or another result (or none before). The node's state alone moving (a
    # model file's time after a copy that found the same bytes) refreshes the record without being reported: the
    # deploy that found nothing to change changed nothing.
    changed = (recorded is None or recorded.get("version") != record.VERSION or recorded.get("inputs") != inputs
               or recorded.get("result") != p["result"])
    refreshed = content != text
    if refreshed and not module.check_mode:
        write_atomically(p["path"], content, 0o600, 0, 0)
    return {"changed": changed, "refreshed": refreshed, "converged": True, "differences": [], "result": p["result"]}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["read", "present"], "default": "read"},
            "inputs": {"type": "str", "no_log": True},
            "path": {"type": "path", "default": record.PATH},
            "trees": {"type": "list", "elements": "path", "default": list(record.TREES)},
            "exclude": {"type": "list", "elements": "path", "default": list(record.EXCLUDE)},
            "files": {"type": "list", "elements": "path", "default": []},
            "stat_dirs": {"type": "list", "elements": "path", "default": []},
            "images": {"type": "list", "elements": "str", "default": []},
            "label": {"type": "str", "default": "org.dgxspark.vllm.component"},
            "result": {"type": "dict", "default": {}},
            **_docker.ARGUMENT_SPEC,
        },
        required_if=[("state", "present", ["inputs"])],
        supports_check_mode=True,
    )
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib("docker"), exception=DOCKER_IMPORT_ERROR)
    p = module.params
    if not p["inputs"]:
        module.fail_json(msg="inputs is empty: run the module through its action plugin (dgxspark.vllm.deploy_record), "
                             "which makes the digest of the deploy's inputs, or give the read's inputs")
    for name in (p["path"], *p["trees"], *p["stat_dirs"], *p["files"], *p["exclude"]):
        if not os.path.isabs(name):
            module.fail_json(msg=f"every path must be absolute, got {name!r}")
    if p["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {p['timeout']}")
    client = _docker.client(module, docker, p["docker_host"], timeout=p["timeout"])
    try:
        result = run(module, client)
    except DockerException as exc:
        module.fail_json(msg=_docker.unreachable_message(p["docker_host"], exc), exception=traceback.format_exc())
    except OSError as exc:
        module.fail_json(msg=f"{p['path']}: {exc}", exception=traceback.format_exc())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
