#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.transfer_trust."""

from __future__ import annotations

DOCUMENTATION = r"""
module: transfer_trust
short_description: Install or remove a node's part of the fleet's transfer trust in one call
version_added: 0.1.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - The files behind the transfer trust of the P(dgxspark.vllm.node_trust#role) role, handled together so that a run
    with nothing to change costs one round trip per node instead of one per file.
  - M(dgxspark.vllm.transfer_trust_info) reads what is there (the key pair, the node's SSH host key).
  - With O(state=present) it makes O(dir) (0700) hold the private key (0600), the public key, C(known_hosts) and the
    transfer program's configuration C(relay.json) (0600), installs the transfer program at O(program_path) (0644,
    run as the interpreter's argument), and puts O(authorized_line) into O(authorized_keys) in place of every line
    that ends with O(comment). Each file is replaced atomically (written beside it, then renamed), and only when its
    content, mode or owner differs.
  - With O(state=absent) the lines ending with O(comment) leave O(authorized_keys), and O(dir) and O(program_path)
    are removed.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reports which files would change; nothing is written.
  diff_mode:
    support: full
    details: Shows the old and new text of the public files; the private key shows as its length only (C(secret, N bytes)).
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  state:
    description: Make the trust as given (V(present)) or remove it (V(absent)).
    type: str
    choices: [present, absent]
    default: present
  dir:
    description: Directory of the key pair, C(known_hosts) and C(relay.json), owned by root.
    type: path
    default: /etc/dgxspark/transfer
  program_path:
    description: Where the transfer program is installed.
    type: path
    default: /opt/dgxspark/bin/dgxspark-transfer
  program:
    description:
      - The transfer program's text (P(dgxspark.vllm.node_program#lookup) builds it). Required with O(state=present).
    type: str
  config:
    description: The transfer program's configuration, written as JSON to C(relay.json). Required with O(state=present).
    type: dict
  private_key:
    description:
      - The fleet's private key (OpenSSH format). Never shown in output. When omitted the key files, and then the
        line in O(authorized_keys), are left as they are (check mode on a fleet without a key yet).
    type: str
  public_key:
    description: The fleet's public key line. Managed together with O(private_key).
    type: str
  known_hosts:
    description:
      - The text of the dedicated C(known_hosts), as it is. With O(state=present) either this or O(known_hosts_entries)
        is required.
    type: str
  known_hosts_entries:
    description:
      - The nodes whose host keys the dedicated C(known_hosts) pins, one line each in this order
        (C(ADDRESS TYPE BASE64), or C([ADDRESS]:PORT TYPE BASE64) when O(ssh_port) is not 22; the key's comment is
        dropped). Every value is checked first (the key type, the base64 blob carrying that type, the address an IP
        address or host name), so that no value can add or break a line.
    type: list
    elements: dict
    suboptions:
      name:
        description: The node's inventory name, for messages.
        type: str
        default: ""
      address:
        description: The address the other nodes reach the node at (its fabric address).
        type: str
        required: true
      host_key:
        description: The node's SSH host public key line (C(TYPE BASE64 [COMMENT])).
        type: str
        required: true
  ssh_port:
    description: The port of the nodes' sshd, written into the lines of O(known_hosts_entries).
    type: int
    default: 22
  authorized_keys:
    description: The C(authorized_keys) file of O(user).
    type: path
    default: /root/.ssh/authorized_keys
  authorized_line:
    description:
      - The line that authorizes the fleet's key (options, key, O(comment) at its end), as it is. With
        O(state=present) and O(public_key), either this or O(authorized_command) is required.
    type: str
  authorized_command:
    description:
      - The forced command of the fleet's key. The module then builds the line itself from O(public_key), as
        C(restrict,from="SOURCES",command="COMMAND" TYPE BASE64 COMMENT), after checking every part (the key's type
        and blob, each source, the command's absolute paths and plain words, the comment).
    type: str
  authorized_from:
    description: The source addresses, networks or patterns of the C(from=) option of the line O(authorized_command) builds.
    type: list
    elements: str
    default: []
  comment:
    description: The comment that ends the key's line in O(authorized_keys); it identifies the line to replace or remove.
    type: str
    default: dgxspark-transfer
  user:
    description: The account the key is authorized for; owns O(authorized_keys) and its directory (0700).
    type: str
    default: root
notes:
  - Files under O(dir) and the program belong to root; the module must run as root (C(become)).
seealso:
  - module: dgxspark.vllm.transfer_trust_info
  - module: dgxspark.vllm.image_sync
  - module: dgxspark.vllm.model_sync
"""

EXAMPLES = r"""
- name: Install the node's part of the trust
  dgxspark.vllm.transfer_trust:
    state: present
    program: "{{ lookup('dgxspark.vllm.node_program', 'dgxspark-transfer') }}"
    config: {key: /etc/dgxspark/transfer/id_ed25519, known_hosts: /etc/dgxspark/transfer/known_hosts, user: root}
    private_key: "{{ fleet_private_key }}"
    public_key: "{{ fleet_public_key }}"
    known_hosts_entries:
      - {name: spark-1, address: 192.168.100.11, host_key: "{{ spark_1_host_key }}"}
      - {name: spark-2, address: 192.168.100.12, host_key: "{{ spark_2_host_key }}"}
    authorized_from: [192.168.100.11, 192.168.100.12]
    authorized_command: /usr/bin/python3 /opt/dgxspark/bin/dgxspark-transfer /etc/dgxspark/transfer/relay.json
    comment: dgxspark-transfer@spark_pairs

- name: Remove it
  dgxspark.vllm.transfer_trust:
    state: absent
    comment: dgxspark-transfer@spark_pairs
"""

RETURN = r"""
changed_files:
  description: The files and directories that were (or in check mode would be) created, changed or removed.
  returned: always
  type: list
  elements: str
  sample: [/etc/dgxspark/transfer/known_hosts]
"""

import json
import os
import pwd
import re
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxspark.vllm.plugins.module_utils._files import Changes, read_or_none
from ansible_collections.dgxspark.vllm.plugins.module_utils._ssh_trust import (
    TrustLineError,
    authorized_line,
    known_hosts_text,
)

# Owner of everything but authorized_keys and its directory.
ROOT_UID = 0
ROOT_GID = 0


def marked(line: str, comment: str) -> bool:
    """Whether an authorized_keys LINE is the one ending with COMMENT (after whitespace)."""
    return re.search(r"\s" + re.escape(comment) + r"$", line.rstrip("\r\n")) is not None


def authorized_text(old: str, line: str | None, comment: str) -> str:
    """OLD authorized_keys text with the marked line replaced by LINE in place (or appended), or removed when None."""
    kept, placed = [], False
    for existing in old.splitlines():
        if marked(existing, comment):
            if line is not None and not placed:
                kept.append(line)
                placed = True
            continue
        kept.append(existing)
    if line is not None and not placed:
        kept.append(line)
    return "".join(f"{k}\n" for k in kept)


def text(value: str) -> bytes:
    return (value if value.endswith("\n") else value + "\n").encode()


def present(p: dict, changes: Changes, user: pwd.struct_passwd) -> None:
    root = (ROOT_UID, ROOT_GID)
    changes.ensure_dir(p["dir"], 0o700, *root)
    changes.ensure_dir(os.path.dirname(p["program_path"]), 0o755, *root)
    changes.ensure_file(p["program_path"], text(p["program"]), 0o644, *root)
    config = json.dumps(p["config"], indent=4, sort_keys=True) + "\n"
    changes.ensure_file(os.path.join(p["dir"], "relay.json"), config.encode(), 0o600, *root)
    changes.ensure_file(os.path.join(p["dir"], "known_hosts"), text(p["known_hosts"]), 0o644, *root)
    if p["private_key"] is None:
        return
    changes.ensure_file(os.path.join(p["dir"], "id_ed25519"), text(p["private_key"]), 0o600, *root, secret=True)
    changes.ensure_file(os.path.join(p["dir"], "id_ed25519.pub"), text(p["public_key"]), 0o644, *root)
    changes.ensure_dir(os.path.dirname(p["authorized_keys"]), 0o700, user.pw_uid, user.pw_gid)
    old = (read_or_none(p["authorized_keys"]) or b"").decode()
    changes.ensure_file(p["authorized_keys"], authorized_text(old, p["authorized_line"], p["comment"]).encode(),
                        0o600, user.pw_uid, user.pw_gid)


def absent(p: dict, changes: Changes) -> None:
    old = read_or_none(p["authorized_keys"])
    if old is not None:
        new = authorized_text(old.decode(), None, p["comment"]).encode()
        if new != old:
            st = os.stat(p["authorized_keys"])
            changes.ensure_file(p["authorized_keys"], new, st.st_mode & 0o7777, st.st_uid, st.st_gid)
    changes.remove(p["dir"])
    changes.remove(p["program_path"])


def build_lines(p: dict) -> None:
    """Turn known_hosts_entries and authorized_command into the known_hosts text and the authorized line."""
    if p["known_hosts_entries"] is not None:
        p["known_hosts"] = known_hosts_text(p["known_hosts_entries"], p["ssh_port"])
    if p["authorized_command"] is not None and p["public_key"] is not None:
        p["authorized_line"] = authorized_line(p["public_key"], p["authorized_from"], p["authorized_command"],
                                               p["comment"])


def check_inputs(p: dict) -> str | None:
    if p["state"] != "present":
        return None
    missing = [name for name in ("program", "config") if p[name] is None]
    if p["known_hosts"] is None and p["known_hosts_entries"] is None:
        missing.append("known_hosts or known_hosts_entries")
    if (p["private_key"] is None) != (p["public_key"] is None):
        missing.append("private_key and public_key together")
    if p["public_key"] is not None and not p["authorized_line"] and p["authorized_command"] is None:
        missing.append("authorized_line or authorized_command")
    if missing:
        return f"state=present needs {', '.join(missing)}"
    try:
        build_lines(p)
    except TrustLineError as exc:
        return str(exc)
    if p["authorized_line"] and ("\n" in p["authorized_line"] or not marked(p["authorized_line"], p["comment"])):
        return f"authorized_line must be one line ending with the comment {p['comment']!r}"
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "dir": {"type": "path", "default": "/etc/dgxspark/transfer"},
            "program_path": {"type": "path", "default": "/opt/dgxspark/bin/dgxspark-transfer"},
            "program": {"type": "str"},
            "config": {"type": "dict"},
            "private_key": {"type": "str", "no_log": True},
            "public_key": {"type": "str"},
            "known_hosts": {"type": "str"},
            "known_hosts_entries": {"type": "list", "elements": "dict", "options": {
                "name": {"type": "str", "default": ""},
                "address": {"type": "str", "required": True},
                "host_key": {"type": "str", "required": True, "no_log": False},  # a public key
            }},
            "ssh_port": {"type": "int", "default": 22},
            "authorized_keys": {"type": "path", "default": "/root/.ssh/authorized_keys"},
            "authorized_line": {"type": "str"},
            "authorized_command": {"type": "str"},
            "authorized_from": {"type": "list", "elements": "str", "default": []},
            "comment": {"type": "str", "default": "dgxspark-transfer"},
            "user": {"type": "str", "default": "root"},
        },
        mutually_exclusive=[("known_hosts", "known_hosts_entries"), ("authorized_line", "authorized_command")],
        supports_check_mode=True,
    )
    p = module.params
    why = check_inputs(p)
    if why:
        module.fail_json(msg=why)
    changes = Changes(module.check_mode)
    try:
        if p["state"] == "present":
            try:
                user = pwd.getpwnam(p["user"])
            except KeyError:
                module.fail_json(msg=f"the account {p['user']!r} does not exist on this node (node_trust_user)")
            present(p, changes, user)
        else:
            absent(p, changes)
    except OSError as exc:
        module.fail_json(msg=f"writing the transfer trust failed: {exc}", changed_files=changes.paths,
                         exception=traceback.format_exc())
    module.exit_json(**changes.result(module._diff))


if __name__ == "__main__":
    main()
