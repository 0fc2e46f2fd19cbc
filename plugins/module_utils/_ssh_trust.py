# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lines of the fleet's transfer trust: the dedicated known_hosts and the authorized_keys lines of the senders' keys.

Every value is checked before it reaches a line: key types, base64 key blobs that carry their own type, host names
and addresses, from= patterns, the forced command and the comment, none with a newline or a quote that would end
the line or the option early. Stdlib only; a bad value raises TrustLineError naming what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
import struct

from ansible_collections.dgxspark.vllm.plugins.module_utils._files import read_or_none

KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
# from= entries: addresses and CIDR networks only (sshd(8) would take wildcards and host names; the collection
# does not write them), each also parsed by ipaddress.
SOURCE = re.compile(r"^[0-9A-Fa-f.:/]+$")
# The forced command: absolute paths and plain words, no quote, backslash or shell character.
COMMAND = re.compile(r"^/[A-Za-z0-9/._-]+( [A-Za-z0-9/._=-]+)*$")
COMMENT = re.compile(r"^[A-Za-z0-9@._:+=-]+$")


class TrustLineError(ValueError):
    """A value that must not reach known_hosts or authorized_keys."""


def public_key(text: str, what: str = "the public key") -> tuple[str, str]:
    """(type, base64 blob) of an OpenSSH public key line 'TYPE BLOB [COMMENT]', checked.

    The blob must be base64 whose first field (a length-prefixed string) is TYPE itself, as ssh-keygen writes it."""
    if not isinstance(text, str) or "\n" in text.strip() or "\r" in text:
        raise TrustLineError(f"{what} must be one line 'TYPE BASE64 [COMMENT]' (is {text!r:.120})")
    fields = text.split()
    if len(fields) < 2:
        raise TrustLineError(f"{what} must be 'TYPE BASE64 [COMMENT]' (is {text!r:.120})")
    kind, blob = fields[0], fields[1]
    if kind not in KEY_TYPES:
        raise TrustLineError(f"{what} has the key type {kind!r:.60}, not one of {', '.join(KEY_TYPES)}")
    try:
        raw = base64.b64decode(blob, validate=True)
        (length,) = struct.unpack(">I", raw[:4])
        inner = raw[4:4 + length].decode("ascii")
    except (binascii.Error, struct.error, UnicodeDecodeError, ValueError):
        raise TrustLineError(f"{what} ({kind}) does not carry a base64 OpenSSH key blob") from None
    if inner != kind:
        raise TrustLineError(f"{what} says {kind} but its blob is a {inner!r:.60} key")
    return kind, blob


def host_address(address: str, what: str = "the address") -> str:
    """ADDRESS checked: an IPv4 or IPv6 address, or a DNS host name."""
    if not isinstance(address, str) or not address:
        raise TrustLineError(f"{what} is empty")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        pass
    else:
        # ipaddress takes an IPv6 scope (fe80::1%...) of any characters, a blank or newline included: none here.
        if "%" in address:
            raise TrustLineError(f"{what} {address!r:.120} has an IPv6 scope ('%'); give the address without it")
        return address  # as given: the same inventory makes the same file
    if HOST_NAME.fullmatch(address) and not address.replace(".", "").isdigit():
        return address
    raise TrustLineError(f"{what} {address!r:.120} is neither an IP address nor a host name")


def known_hosts_line(address: str, host_key: str, port: int = 22, name: str = "") -> str:
    """One known_hosts line (with its newline) pinning HOST_KEY under ADDRESS (and PORT when it is not 22)."""
    what = f"{name}: " if name else ""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise TrustLineError(f"the SSH port must be 1 to 65535 (is {port!r})")
    address = host_address(address, f"{what}the fabric address")
    kind, blob = public_key(host_key, f"{what}the SSH host key")
    where = address if port == 22 else f"[{address}]:{port}"
    return f"{where} {kind} {blob}\n"


def known_hosts_text(hosts: list[dict], port: int = 22) -> str:
    """known_hosts of HOSTS (each with 'address', 'host_key' and optionally 'name' for messages), in their order."""
    return "".join(known_hosts_line(h.get("address"), h.get("host_key"), port, h.get("name") or "") for h in hosts)


# The widest from= network that still counts as a fleet's, by IP version: a key admitted from a /0 (or anything this
# wide) is admitted from the internet. _inputs checks node_trust_allowed_from against the same bound.
MIN_PREFIX = {4: 8, 6: 16}


def source_address(source: str) -> str:
    """A from= entry checked with ipaddress: an IPv4/IPv6 address or network (no wildcard, no host name)."""
    if not isinstance(source, str) or not SOURCE.fullmatch(source or "-"):
        raise TrustLineError(f"the source {source!r:.120} of from= must be an IP address or network")
    try:
        network = ipaddress.ip_network(source, strict=False)
    except ValueError:
        raise TrustLineError(f"the source {source!r:.120} of from= must be an IP address or network") from None
    if network.prefixlen < MIN_PREFIX[network.version]:
        raise TrustLineError(f"the source {source} of from= admits {network.num_addresses} addresses (the internet, or "
                             "most of it); name the fleet's own networks, at most a /8 (IPv4) or a /16 (IPv6)")
    return source


def authorized_line(key: str, sources: list[str], command: str, comment: str, what: str = "the public key") -> str:
    """The authorized_keys line (no newline) letting KEY run only COMMAND, only from SOURCES, marked by COMMENT."""
    kind, blob = public_key(key, what)
    if not sources:
        raise TrustLineError(f"the from= list of {what} is empty: give the sender's fabric address")
    for source in sources:
        source_address(source)
    if not isinstance(command, str) or not COMMAND.fullmatch(command):
        raise TrustLineError(f"the forced command {command!r:.200} must be absolute paths and plain words"
                             " (letters, digits, '/', '.', '_', '-', '=') separated by single spaces")
    if not isinstance(comment, str) or not COMMENT.fullmatch(comment):
        raise TrustLineError(f"the key's comment {comment!r:.120} must be letters, digits and '@._:+=-'")
    return f'restrict,from="{",".join(sources)}",command="{command}" {kind} {blob} {comment}'


HOST_KEY = "/etc/ssh/ssh_host_ed25519_key.pub"


def read_trust(directory: str, host_key_path: str = HOST_KEY) -> dict:
    """What a node's transfer trust is (never the private key): whether its key pair is in DIRECTORY (``key_present``),
    its public key line (``public_key``, empty without a pair) and its SSH host key (``host_key``, from HOST_KEY_PATH,
    empty without one). Raises OSError when a file is there but cannot be read."""
    key = os.path.join(directory, "id_ed25519")
    public = read_or_none(key + ".pub") if os.path.isfile(key) else None
    result = {"key_present": bool(public), "public_key": public.decode().strip() if public else ""}
    host_key = read_or_none(host_key_path)
    result["host_key"] = host_key.decode(errors="replace").strip() if host_key else ""
    return result
