# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""PRIVATE: reading a pip lock (a requirements file whose every line is ``name==version --hash=sha256:...``).

The collection installs Python packages only from such locks with ``pip install --require-hashes``: the Ray an
overlay adds to a serving image (``roles/hybrid_image/files/ray-*.txt``) and the benchmark's virtualenv. The
project's own ``tools/locks.py`` reads its locks with the same functions.
"""

from __future__ import annotations

import re

_CONTINUATION = re.compile(r"\\\n\s*")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_PINNED = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s,;]+)")


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(text: str) -> list[tuple[str, str, list[str]]]:
    """(name, version, sha256 hashes) of every requirement of a lock, in order.

    A line that is not pinned with ``==`` gives version ``""`` (its whole requirement as the name), and so does an
    option line (``-r``, ``--index-url``...), which has no place in a lock.
    """
    out = []
    for line in _CONTINUATION.sub(" ", text).splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            out.append((line, "", []))
            continue
        hashes = _HASH.findall(line)
        req = line.split("--hash", 1)[0].split(";", 1)[0].strip()
        match = _PINNED.fullmatch(req)
        out.append((match.group(1), match.group(3), hashes) if match else (req, "", hashes))
    return out


def problems(text: str, source: str, package: str = "", version: str = "") -> list[str]:
    """What keeps TEXT (read from SOURCE) from being a lock pip can install with --require-hashes.

    With PACKAGE and VERSION, the lock must also pin PACKAGE at exactly VERSION.
    """
    found = []
    pinned = {}
    for name, pin, hashes in entries(text):
        if not pin:
            found.append(f"{source}: `{name}` is not pinned with == (a lock holds only name==version lines)")
        elif not hashes:
            found.append(f"{source}: {name}=={pin} has no --hash=sha256")
        else:
            pinned.setdefault(normalize(name), set()).add(pin)
    if not pinned and not found:
        found.append(f"{source}: holds no requirement")
    if package:
        have = pinned.get(normalize(package), set())
        if version not in have:
            found.append(f"{source}: pins {package} at {', '.join(sorted(have)) or 'no version'}, not {version}")
    return found
