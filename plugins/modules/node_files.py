#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.node_files."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_files
short_description: Make several files and directories of a node hold given contents, modes and owners, in one call
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - The collection's roles install a handful of small files per node (the launcher, the Ray token, the serving env
    file, the release record). Done with one M(ansible.builtin.copy) or M(ansible.builtin.file) task each, a run with
    nothing to change pays a round trip per file; this module handles them in one.
  - Entries are handled in order, so a directory listed before its files is made first.
  - A file is replaced atomically (written beside it, then renamed into place), and only when its content differs;
    a wrong mode or owner alone is mended in place.
  - An entry with O(files[].create_only=true) is written only when the file is missing, and an existing file keeps
    its content (a secret made once on a node, like the Ray token of a pair). With O(files[].read=true) the file's
    text after the run is returned in RV(contents).
  - A task that writes or reads a secret needs C(no_log), since the contents are module arguments (and RV(contents)
    results); O(files[].secret=true) only keeps the diff free of it.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Reports which files would change; nothing is written. RV(contents) then holds only files that exist, with the
      text they would hold.
  diff_mode:
    support: full
    details: Shows the old and new text of each changed file; an entry with O(files[].secret=true) shows its length only.
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  files:
    description: The files and directories, in the order they are made.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      state:
        description:
          - A regular file with O(files[].content), a directory, or V(absent) - no file at the path (a file or link
            there is removed; a directory there is refused, nothing is removed recursively).
        type: str
        choices: [file, directory, absent]
        default: file
      content:
        description: The file's exact text. Required for files.
        type: str
      mode:
        description: Octal permissions, for example V('0600'). Defaults to C(0644) for files and C(0755) for directories.
        type: str
      owner:
        description: Owning user, by name or numeric ID (an ID need not exist on the node, e.g. a container's user).
        type: str
        default: root
      group:
        description: Owning group, by name or numeric ID; defaults to O(files[].owner)'s primary group (its ID when
          O(files[].owner) is an ID).
        type: str
      create_only:
        description: Write O(files[].content) only when the file is missing; an existing file keeps its content.
        type: bool
        default: false
      read:
        description: Return the file's text (after the run) in RV(contents).
        type: bool
        default: false
      secret:
        description: Show only the length of the old and new text in the diff.
        type: bool
        default: false
notes:
  - Owners other than the connecting user need root (C(become)).
seealso:
  - module: ansible.builtin.copy
  - module: dgxspark.vllm.transfer_trust
"""

EXAMPLES = r"""
- name: Install the launcher and the root-only configuration directory
  dgxspark.vllm.node_files:
    files:
      - {path: /opt/dgxspark/bin, state: directory, mode: "0755"}
      - {path: /opt/dgxspark/bin/dgxspark-launch, content: "{{ lookup('dgxspark.vllm.node_program', 'dgxspark-launch') }}"}
      - {path: /etc/dgxspark/ray, state: directory, mode: "0700"}

- name: Remove a key file that is no longer used
  dgxspark.vllm.node_files:
    files:
      - {path: /etc/dgxspark/prometheus/gateway.key, state: absent}

- name: Make the pair's Ray token once on the head and read it
  dgxspark.vllm.node_files:
    files:
      - path: /etc/dgxspark/ray/auth_token
        content: "{{ lookup('ansible.builtin.password', '/dev/null', length=64, chars=['ascii_letters', 'digits']) }}"
        mode: "0600"
        create_only: true
        read: true
        secret: true
  register: token
  no_log: true
"""

RETURN = r"""
changed_files:
  description: The paths that were (or in check mode would be) created, changed or removed.
  returned: always
  type: list
  elements: str
  sample: [/opt/dgxspark/bin/dgxspark-launch]
checksums:
  description:
    - Path to the SHA-1 of each file's content after the run (what it would be, in check mode), as
      M(ansible.builtin.copy) reports it; a fingerprint of the files a container mounts.
  returned: always
  type: dict
  sample: {/opt/dgxspark/bin/dgxspark-launch: 0f6d1c1e9b1f3c63a6a2b6f0e1f3f2f4d5c6b7a8}
contents:
  description: Path to text of each entry with O(files[].read=true) that exists after the run.
  returned: always
  type: dict
  sample: {/etc/dgxspark/ray/auth_token: 3kT9...}
"""

import grp
import hashlib
import os
import pwd
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._files import Changes, read_or_none


class EntryError(Exception):
    pass


def owner_ids(entry: dict) -> tuple[int, int]:
    # A number is taken as an ID as it is (a container's user, e.g. the haproxy image's 99, need not exist here).
    if str(entry["owner"]).isdigit():
        uid = int(entry["owner"])
        gid = int(entry["group"]) if str(entry.get("group") or "").isdigit() else None
        if gid is None and entry.get("group"):
            try:
                gid = grp.getgrnam(entry["group"]).gr_gid
            except KeyError:
                raise EntryError(f"{entry['path']}: the group {entry['group']!r} does not exist on this node") from None
        return uid, uid if gid is None else gid
    try:
        user = pwd.getpwnam(entry["owner"])
    except KeyError:
        raise EntryError(f"{entry['path']}: the user {entry['owner']!r} does not exist on this node") from None
    if not entry.get("group"):
        return user.pw_uid, user.pw_gid
    if str(entry["group"]).isdigit():
        return user.pw_uid, int(entry["group"])
    try:
        return user.pw_uid, grp.getgrnam(entry["group"]).gr_gid
    except KeyError:
        raise EntryError(f"{entry['path']}: the group {entry['group']!r} does not exist on this node") from None


def checked(entry: dict) -> dict:
    """ENTRY with its mode as a number and its owner's IDs; EntryError names the path and what is wrong."""
    path = entry["path"]
    if not os.path.isabs(path):
        raise EntryError(f"{path}: the path must be absolute")
    if entry["state"] == "absent":
        if os.path.isdir(path) and not os.path.islink(path):
            raise EntryError(f"{path}: state absent removes a file, and this is a directory")
        return dict(entry)
    if entry["state"] == "file" and entry.get("content") is None:
        raise EntryError(f"{path}: a file needs its content")
    text = entry.get("mode") or ("0644" if entry["state"] == "file" else "0755")
    try:
        mode = int(text, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o7777:
        raise EntryError(f"{path}: mode must be octal permissions such as '0600' (is {text!r})")
    uid, gid = owner_ids(entry)
    return {**entry, "mode_bits": mode, "uid": uid, "gid": gid}


def apply(entries: list[dict], changes: Changes) -> tuple[dict[str, str], dict[str, str]]:
    """Make every entry as asked; returns the files' checksums and the text of the entries to read."""
    contents, checksums = {}, {}
    for e in entries:
        if e["state"] == "directory":
            changes.ensure_dir(e["path"], e["mode_bits"], e["uid"], e["gid"])
            continue
        if e["state"] == "absent":
            changes.remove(e["path"])
            continue
        existing = read_or_none(e["path"]) if e["create_only"] or e["read"] else None
        content = existing if e["create_only"] and existing is not None else e["content"].encode()
        changes.ensure_file(e["path"], content, e["mode_bits"], e["uid"], e["gid"], secret=e["secret"])
        checksums[e["path"]] = hashlib.sha1(content).hexdigest()  # a checksum, as copy reports it
        # After the run the file holds CONTENT; in check mode only a file that is already there is returned.
        if e["read"] and (existing is not None or not changes.check):
            contents[e["path"]] = content.decode(errors="replace")
    return checksums, contents


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {
                "type": "list", "elements": "dict", "required": True,
                "options": {
                    "path": {"type": "path", "required": True},
                    "state": {"type": "str", "choices": ["file", "directory", "absent"], "default": "file"},
                    "content": {"type": "str"},
                    "mode": {"type": "str"},
                    "owner": {"type": "str", "default": "root"},
                    "group": {"type": "str"},
                    "create_only": {"type": "bool", "default": False},
                    "read": {"type": "bool", "default": False},
                    "secret": {"type": "bool", "default": False},
                },
            },
        },
        supports_check_mode=True,
    )
    try:
        entries = [checked(e) for e in module.params["files"]]
    except EntryError as exc:
        module.fail_json(msg=f"node_files: {exc}; nothing was changed")
    changes = Changes(module.check_mode)
    try:
        checksums, contents = apply(entries, changes)
    except OSError as exc:
        module.fail_json(msg=f"node_files: writing {exc.filename or 'a file'} failed: {exc.strerror or exc}",
                         changed=bool(changes.paths), changed_files=changes.paths, exception=traceback.format_exc())
    module.exit_json(**changes.result(module._diff), checksums=checksums, contents=contents)


if __name__ == "__main__":
    main()
