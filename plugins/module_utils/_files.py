# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files and directories made to hold given contents, modes and owners, atomically, with check mode and a diff.

Used by the modules that set up several files of a node in one call (node_files, transfer_trust), so that a run with
nothing to change costs one round trip, not one per file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

SECRET = "(secret, {n} bytes)\n"


class Changes:
    """Applies file changes (unless CHECK) and keeps the list of changed paths and the diff."""

    def __init__(self, check: bool):
        self.check = check
        self.paths: list[str] = []
        self.before: list[str] = []
        self.after: list[str] = []

    def result(self, diff: bool) -> dict:
        """The module's ``changed``, ``changed_files`` and, when DIFF and something changed, ``diff``."""
        out = {"changed": bool(self.paths), "changed_files": self.paths}
        if diff and self.paths:
            out["diff"] = {"before": "".join(self.before), "after": "".join(self.after)}
        return out

    def note(self, path: str, before: str, after: str) -> None:
        self.paths.append(path)
        self.before.append(f"# {path}\n{before}")
        self.after.append(f"# {path}\n{after}")

    def ensure_dir(self, path: str, mode: int, uid: int, gid: int) -> None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self.note(path, "(absent)\n", f"(directory, mode {mode:04o})\n")
            if not self.check:
                os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
                os.mkdir(path, mode)
                os.chown(path, uid, gid)
                os.chmod(path, mode)
            return
        if (st.st_mode & 0o7777, st.st_uid, st.st_gid) != (mode, uid, gid):
            self.note(path, f"(directory, mode {st.st_mode & 0o7777:04o}, owner {st.st_uid}:{st.st_gid})\n",
                      f"(directory, mode {mode:04o}, owner {uid}:{gid})\n")
            if not self.check:
                os.chown(path, uid, gid)
                os.chmod(path, mode)

    def ensure_file(self, path: str, content: bytes, mode: int, uid: int, gid: int, secret: bool = False) -> None:
        old = read_or_none(path)
        st = os.stat(path) if old is not None else None
        if old == content:
            if (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (mode, uid, gid):
                return
            self.note(path, f"(mode {st.st_mode & 0o7777:04o}, owner {st.st_uid}:{st.st_gid})\n",
                      f"(mode {mode:04o}, owner {uid}:{gid})\n")
            if not self.check:
                os.chown(path, uid, gid)
                os.chmod(path, mode)
            return
        if secret:
            before = "(absent)\n" if old is None else SECRET.format(n=len(old))
            after = SECRET.format(n=len(content))
        else:
            before = "(absent)\n" if old is None else old.decode(errors="replace")
            after = content.decode(errors="replace")
        self.note(path, before, after)
        if not self.check:
            write_atomically(path, content, mode, uid, gid)

    def remove(self, path: str) -> None:
        if not os.path.lexists(path):
            return
        self.note(path, "(present)\n", "(absent)\n")
        if self.check:
            return
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def read_json_object(path: str) -> dict | None:
    """The JSON object in PATH (a record the collection keeps on a node); None when there is no file. Raises
    ValueError naming the file when it holds no JSON object, OSError when it cannot be read."""
    raw = read_or_none(path)
    if raw is None:
        return None
    try:
        record = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path} holds a {type(record).__name__}, not a record")
    return record


def write_atomically(path: str, content: bytes, mode: int, uid: int, gid: int) -> None:
    """PATH holds CONTENT with MODE and owner UID:GID, or is left as it was (the new text is renamed into place)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=f".{os.path.basename(path)}.")
    try:
        os.fchmod(fd, mode)
        os.fchown(fd, uid, gid)
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
