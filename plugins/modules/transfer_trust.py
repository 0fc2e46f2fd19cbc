#!/usr/bin/python
# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module dgxspark.vllm.transfer_trust."""

from __future__ import annotations

DOCUMENTATION = r"""
module: transfer_trust
short_description: Install or remove a node's part of the fleet's transfer trust in one call
version_added: 0.2.0
author:
  - dgxspark.vllm maintainers (@dgxspark)
description:
  - The files behind the transfer trust of the P(dgxspark.vllm.node_trust#role) role, handled together so that a run
    with nothing to change costs one round trip per node instead of one per file.
  - Every node has a key pair of its own, made on the node (O(state=keypair)); the private key never leaves it. A
    node's key is authorized only on the nodes it sends to (O(senders) on the receiving node), each line restricted to
    the transfer program (C(restrict), C(command=)) and to the sender's own addresses (C(from=)).
  - M(dgxspark.vllm.transfer_trust_info) reads what is there (the public key, the node's SSH host key).
  - With O(state=keypair) it makes the node's key pair in O(dir) with C(ssh-keygen) when there is none, or a new one
    when O(rotate=true), and returns its public key.
  - With O(state=present) it makes O(dir) (0700) hold C(known_hosts) and the transfer program's configuration
    C(relay.json) (0600), installs the transfer program at O(program_path) (0644, run as the interpreter's argument),
    and makes the lines of O(authorized_keys) that carry the O(comment) mark exactly one line per sender of
    O(senders) (lines of other senders, of an older key or of the old single fleet key are removed; lines
    without the mark are kept). Each file is replaced atomically (written beside it, then renamed), and only when its
    content, mode or owner differs.
  - With O(state=absent) the marked lines leave O(authorized_keys), and O(dir) (the key pair with it) and
    O(program_path) are removed.
extends_documentation_fragment:
  - dgxspark.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reports which files would change and whether a key pair would be made; nothing is written.
  diff_mode:
    support: full
    details: Shows the old and new text of the files (public keys only; the private key never leaves the node).
  idempotent:
    support: full
  platform:
    support: full
    platforms: posix
options:
  state:
    description: Make the trust as given (V(present)), remove it (V(absent)), or make the node's key pair (V(keypair)).
    type: str
    choices: [present, absent, keypair]
    default: present
  rotate:
    description: With O(state=keypair), replace an existing key pair by a new one.
    type: bool
    default: false
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
  senders:
    description:
      - The nodes whose keys may run the transfer program here, one C(authorized_keys) line each, built as
        C(restrict,from="FROM",command="COMMAND" TYPE BASE64 COMMENT:NAME) after checking every part (the key's type
        and blob, each address or network with Python's C(ipaddress), the command, the name). An empty list leaves
        no line (a node nobody sends to, such as a cluster's head).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The sender's inventory name; it ends the line's comment.
        type: str
        required: true
      public_key:
        description: The sender's public key line.
        type: str
        required: true
      from:
        description: The addresses or networks the sender connects from (its fabric address).
        type: list
        elements: str
        required: true
      only:
        description:
          - The one request kind this key may ask, appended to O(command) as C(--only ONLY). V(engine) is the
            watchdog's key (status, stop, start, restart of the engine containers; no image, no model file, no relay).
        type: str
        choices: [engine]
        version_added: 0.6.0
  command:
    description: The forced command of every sender's line (absolute paths and plain words). Required with O(senders).
    type: str
  comment:
    description: The mark of the collection's lines in O(authorized_keys) (each line ends with C(COMMENT:SENDER)), and
      the comment of a key pair O(state=keypair) makes.
    type: str
    default: dgxspark-transfer
  user:
    description: The account the keys are authorized for; owns O(authorized_keys) and its directory (0700).
    type: str
    default: root
notes:
  - Files under O(dir) and the program belong to root; the module must run as root (C(become)).
seealso:
  - module: dgxspark.vllm.transfer_trust_info
  - module: dgxspark.vllm.transfer_announce
  - module: dgxspark.vllm.image_sync
  - module: dgxspark.vllm.model_sync
"""

EXAMPLES = r"""
- name: Make the node's own key pair (once; rotate with rotate=true)
  dgxspark.vllm.transfer_trust:
    state: keypair
    comment: dgxspark-transfer@spark_pairs
  register: own_key

- name: Install the node's part of the trust (spark-2 receives from its head spark-1)
  dgxspark.vllm.transfer_trust:
    state: present
    program: "{{ lookup('dgxspark.vllm.node_program', 'dgxspark-transfer') }}"
    config: {key: /etc/dgxspark/transfer/id_ed25519, known_hosts: /etc/dgxspark/transfer/known_hosts, user: root,
             forward_to: []}
    known_hosts_entries:
      - {name: spark-1, address: 192.168.100.11, host_key: "{{ spark_1_host_key }}"}
      - {name: spark-2, address: 192.168.100.12, host_key: "{{ spark_2_host_key }}"}
    senders:
      - {name: spark-1, public_key: "{{ spark_1_public_key }}", from: [192.168.100.11]}
    command: /usr/bin/python3 /opt/dgxspark/bin/dgxspark-transfer /etc/dgxspark/transfer/relay.json
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
public_key:
  description: The node's public key line, with O(state=keypair) (empty in check mode when a key would be made).
  returned: when O(state=keypair)
  type: str
  sample: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... dgxspark-transfer@spark_pairs
"""

import json
import os
import pwd
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


def owned(line: str, comment: str) -> bool:
    """Whether an authorized_keys LINE is one of the collection's: its last field is COMMENT or COMMENT:SENDER."""
    fields = line.split()
    return bool(fields) and (fields[-1] == comment or fields[-1].startswith(comment + ":"))


def authorized_text(old: str, lines: list[str], comment: str) -> str:
    """OLD authorized_keys text with the collection's lines replaced by LINES (where the first of them was, or at
    the end); every other line kept as it is."""
    kept, placed = [], False
    for existing in old.splitlines():
        if owned(existing, comment):
            if not placed:
                kept.extend(lines)
                placed = True
            continue
        kept.append(existing)
    if not placed:
        kept.extend(lines)
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
    old = read_or_none(p["authorized_keys"])
    new = authorized_text((old or b"").decode(), p["lines"], p["comment"]).encode()
    if old is None and not p["lines"]:
        return  # nothing to authorize and no file: none is made
    changes.ensure_dir(os.path.dirname(p["authorized_keys"]), 0o700, user.pw_uid, user.pw_gid)
    changes.ensure_file(p["authorized_keys"], new, 0o600, user.pw_uid, user.pw_gid)


def absent(p: dict, changes: Changes) -> None:
    old = read_or_none(p["authorized_keys"])
    if old is not None:
        new = authorized_text(old.decode(), [], p["comment"]).encode()
        if new != old:
            st = os.stat(p["authorized_keys"])
            changes.ensure_file(p["authorized_keys"], new, st.st_mode & 0o7777, st.st_uid, st.st_gid)
    changes.remove(p["dir"])
    changes.remove(p["program_path"])


def keypair(module: AnsibleModule, p: dict, changes: Changes) -> str:
    """Make the node's key pair when it has none (or a new one with rotate); its public key line."""
    private = os.path.join(p["dir"], "id_ed25519")
    public = private + ".pub"
    have = os.path.isfile(private) and os.path.isfile(public)
    if have and not p["rotate"]:
        return (read_or_none(public) or b"").decode().strip()
    changes.ensure_dir(p["dir"], 0o700, ROOT_UID, ROOT_GID)
    changes.paths.append(private)
    if changes.check:
        return ""
    # ssh-keygen writes beside the final names, which are then replaced together: a failure leaves the old pair.
    fresh = os.path.join(p["dir"], ".id_ed25519.new")
    for leftover in (fresh, fresh + ".pub"):
        if os.path.exists(leftover):
            os.unlink(leftover)
    keygen = module.get_bin_path("ssh-keygen")
    if keygen is None:
        raise OSError("ssh-keygen is not installed on this node (package openssh-client)")
    rc, _out, err = module.run_command([keygen, "-q", "-t", "ed25519", "-N", "", "-C", p["comment"], "-f", fresh])
    if rc != 0:
        for leftover in (fresh, fresh + ".pub"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        raise OSError(f"ssh-keygen failed (rc {rc}): {err.strip()[-500:]}")
    os.chmod(fresh, 0o600)
    os.chmod(fresh + ".pub", 0o644)
    os.replace(fresh + ".pub", public)
    os.replace(fresh, private)
    return (read_or_none(public) or b"").decode().strip()


def build_lines(p: dict) -> None:
    """Turn known_hosts_entries and senders into the known_hosts text and the authorized lines."""
    if p["known_hosts_entries"] is not None:
        p["known_hosts"] = known_hosts_text(p["known_hosts_entries"], p["ssh_port"])
    p["lines"] = [authorized_line(s["public_key"], s["from"],
                                  p["command"] + (f" --only {s['only']}" if s.get("only") else ""),
                                  f"{p['comment']}:{s['name']}", what=f"the key of {s['name']}")
                  for s in p["senders"]]
    names = [s["name"] for s in p["senders"]]
    if len(set(names)) != len(names):
        raise TrustLineError(f"a sender is named twice in senders ({', '.join(names)})")


def check_inputs(p: dict) -> str | None:
    if p["state"] != "present":
        return None
    missing = [name for name in ("program", "config") if p[name] is None]
    if p["known_hosts"] is None and p["known_hosts_entries"] is None:
        missing.append("known_hosts or known_hosts_entries")
    if p["senders"] and p["command"] is None:
        missing.append("command (with senders)")
    if missing:
        return f"state=present needs {', '.join(missing)}"
    try:
        build_lines(p)
    except TrustLineError as exc:
        return str(exc)
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent", "keypair"], "default": "present"},
            "rotate": {"type": "bool", "default": False},
            "dir": {"type": "path", "default": "/etc/dgxspark/transfer"},
            "program_path": {"type": "path", "default": "/opt/dgxspark/bin/dgxspark-transfer"},
            "program": {"type": "str"},
            "config": {"type": "dict"},
            "known_hosts": {"type": "str"},
            "known_hosts_entries": {"type": "list", "elements": "dict", "options": {
                "name": {"type": "str", "default": ""},
                "address": {"type": "str", "required": True},
                "host_key": {"type": "str", "required": True, "no_log": False},  # a public key
            }},
            "ssh_port": {"type": "int", "default": 22},
            "authorized_keys": {"type": "path", "default": "/root/.ssh/authorized_keys"},
            "senders": {"type": "list", "elements": "dict", "default": [], "options": {
                "name": {"type": "str", "required": True},
                "public_key": {"type": "str", "required": True, "no_log": False},  # a public key
                "from": {"type": "list", "elements": "str", "required": True},
                "only": {"type": "str", "choices": ["engine"]},
            }},
            "command": {"type": "str"},
            "comment": {"type": "str", "default": "dgxspark-transfer"},
            "user": {"type": "str", "default": "root"},
        },
        mutually_exclusive=[("known_hosts", "known_hosts_entries")],
        supports_check_mode=True,
    )
    p = module.params
    why = check_inputs(p)
    if why:
        module.fail_json(msg=why)
    changes = Changes(module.check_mode)
    if p["state"] == "keypair":
        try:
            public = keypair(module, p, changes)
        except OSError as exc:
            module.fail_json(msg=f"making this node's transfer key failed: {exc}; the old key (if any) is unchanged",
                             changed_files=changes.paths)
        module.exit_json(changed=bool(changes.paths), changed_files=changes.paths, public_key=public)
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
