# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""What the controller announced to a node before a transfer, and the checks the transfer program makes with it.

Before a sync the controller writes on each target (module dgxspark.vllm.transfer_announce, into the trust
directory, root only) what that target may receive:

``announced-images.json``  {"images": [{"ref": REF, "id": "sha256:...", "bytes": SIZE, "store": STORE,
                            "content_label": LABEL, "fingerprint": "sha256:..."}, ...],
                            "nonce": HEX, "expires": EPOCH}
    the references the target may point at an image (``tag``) or load an image for (``receive``), each with the
    image ID it must be and the image's size (the stream may not exceed it by more than a margin, and the target's
    free space is checked against it by the target), and the image's identity across image stores: the store the
    source holds it in, its content label and its content fingerprint. The loaded image is verified against these
    alone, never against anything the sender's request says. The announcement is one-use: a request must carry its
    nonce, and a request for a reference consumes that reference's entry, whatever its outcome; it expires at
    ``expires`` (this node's clock) in any case;
``announced-models.json``  {"models": {MODEL: {"files": {PATH: {"size": N, "sha256": HEX}}}}}
    for each model directory (relative to the models root) the files it may hold.

The transfer program refuses any ``tag``, ``receive`` or ``files_receive`` that does not match (a sender with the
transfer key cannot place anything the controller did not ask for), and :class:`TarGuard` refuses an image archive
that carries names of its own (``docker load`` would apply them before any verification). Stdlib only: this file is
part of the transfer program the nodes run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import json
import os
import posixpath
import re
import time

IMAGES_FILE = "announced-images.json"
MODELS_FILE = "announced-models.json"
IMAGE_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
# docker's reference grammar (distribution/reference): lower-case repository, optional registry and tag, no digest.
# Every pattern ends in \Z, not $: a trailing newline must not pass.
REF_RE = re.compile(r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?\Z")
MODEL_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+=@,-]{0,254}(?:/[A-Za-z0-9_][A-Za-z0-9._+=@,-]{0,254}){0,3}\Z")
PATH_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+=@,-]{0,254}\Z")
NONCE_RE = re.compile(r"^[0-9a-f]{32,128}\Z")
STORES = ("graphdriver", "containerd")
MAX_ANNOUNCED = 64  # images per announcement
MAX_FILES = 100000
# An image archive is the image's layers uncompressed plus tar headers and its configuration: its size may pass
# the image's size by a little (and, on the containerd store, differ either way); never by this much.
ARCHIVE_SLACK = 1.10
ARCHIVE_EXTRA = 64 << 20


class NotAnnounced(ValueError):
    """A request for something the controller did not announce, or an announcement that is malformed."""


def _int(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NotAnnounced(f"{what} must be a whole number of bytes (is {value!r:.40})")
    return value


def check_images(images):
    """The image entries of an announcement, checked (ref grammar, ID, size); NotAnnounced otherwise."""
    if not isinstance(images, list) or len(images) > MAX_ANNOUNCED:
        raise NotAnnounced(f"images must be a list of at most {MAX_ANNOUNCED} entries")
    clean = []
    for entry in images:
        if not isinstance(entry, dict):
            raise NotAnnounced(f"an announced image must be a mapping (is {entry!r:.80})")
        ref, image_id = entry.get("ref"), entry.get("id")
        if not isinstance(ref, str) or not REF_RE.match(ref):
            raise NotAnnounced(f"{ref!r:.120} is not an image reference (repository[:tag])")
        if not isinstance(image_id, str) or not IMAGE_ID_RE.match(image_id):
            raise NotAnnounced(f"the ID of {ref} must be sha256:<64 hex> (is {image_id!r:.80})")
        store, label, mark = entry.get("store"), entry.get("content_label"), entry.get("fingerprint")
        if store is not None and store not in STORES:
            raise NotAnnounced(f"the store of {ref} must be one of {', '.join(STORES)} (is {store!r:.40})")
        if label is not None and (not isinstance(label, str) or not label or len(label) > 256):
            raise NotAnnounced(f"the content label of {ref} must be a string of 1 to 256 characters")
        if mark is not None and (not isinstance(mark, str) or not IMAGE_ID_RE.match(mark)):
            raise NotAnnounced(f"the fingerprint of {ref} must be sha256:<64 hex> (is {mark!r:.80})")
        clean.append({"ref": ref, "id": image_id, "bytes": _int(entry.get("bytes", 0), f"the size of {ref}"),
                      "store": store, "content_label": label, "fingerprint": mark})
    refs = [e["ref"] for e in clean]
    if len(set(refs)) != len(refs):
        raise NotAnnounced("an image reference is announced twice")
    return clean


def check_model(name, files):
    """A model's announcement (its directory NAME relative to the models root, its FILES), checked."""
    if not isinstance(name, str) or not MODEL_RE.match(name) or ".." in name.split("/"):
        raise NotAnnounced(f"{name!r:.120} is not a model directory name relative to the models root")
    if not isinstance(files, dict) or len(files) > MAX_FILES:
        raise NotAnnounced(f"the files of {name} must be a mapping of at most {MAX_FILES} paths")
    clean = {}
    for path, meta in files.items():
        parts = path.split("/") if isinstance(path, str) else []
        if not parts or not all(PATH_PART_RE.match(p) for p in parts):
            raise NotAnnounced(f"{path!r:.120} is not a relative path inside {name}")
        if not isinstance(meta, dict) or not isinstance(meta.get("sha256"), str) or not SHA256_RE.match(meta["sha256"]):
            raise NotAnnounced(f"{name}/{path}: sha256 must be 64 hex digits")
        clean[path] = {"size": _int(meta.get("size"), f"the size of {name}/{path}"), "sha256": meta["sha256"]}
    return clean


def check_nonce(nonce):
    if not isinstance(nonce, str) or not NONCE_RE.match(nonce):
        raise NotAnnounced("the announcement's nonce must be 32 to 128 lower-case hex digits")
    return nonce


def images_text(images, nonce, expires):
    """The text of announced-images.json for IMAGES (checked), one-use with NONCE until EXPIRES (epoch seconds)."""
    return json.dumps({"images": check_images(images), "nonce": check_nonce(nonce), "expires": _int(expires, "expires")},
                      indent=1, sort_keys=True) + "\n"


def models_text(old, name, files):
    """The text of announced-models.json: OLD's models (its parsed content or None) with NAME's files set."""
    models = dict((old or {}).get("models") or {})
    models[name] = {"files": check_model(name, files)}
    return json.dumps({"models": models}, indent=1, sort_keys=True) + "\n"


def _load(directory, name):
    path = os.path.join(directory, name)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise NotAnnounced(f"the announcement {path} cannot be read ({exc}); rerun the play") from None


def announced_image(directory, ref, image_id, nonce, now=None):
    """The announced entry for REF, which must name IMAGE_ID, asked with the announcement's NONCE before it expired.

    One use: the entry is consumed here, before the caller acts on it, whatever the outcome (a retry is announced
    anew by the controller). NotAnnounced when the controller did not announce it, or no longer does."""
    with images_lock(directory):  # two requests racing for one entry: one of them gets it
        data = _load(directory, IMAGES_FILE) or {}
        entries = check_images(data.get("images", []))
        entry = next((e for e in entries if e["ref"] == ref), None)
        if entry is None:
            raise NotAnnounced(f"{ref} -> {image_id} was not announced to this node by the controller")
        expected = data.get("nonce")
        if not isinstance(nonce, str) or not isinstance(expected, str) or not NONCE_RE.match(expected) \
                or not hmac.compare_digest(nonce.encode(), expected.encode()):
            raise NotAnnounced(f"the request for {ref} does not carry the nonce of this node's announcement")
        expires = data.get("expires")
        if isinstance(expires, bool) or not isinstance(expires, int) or (time.time() if now is None else now) >= expires:
            raise NotAnnounced(f"the announcement of {ref} expired; the controller announces it again at the next run")
        if entry["id"] != image_id:
            raise NotAnnounced(f"{ref} was announced as {entry['id']}, not {image_id}")
        consume(directory, data, ref)
    return entry


@contextlib.contextmanager
def images_lock(directory):
    """The image announcement held against other readers and writers (a request taking an entry, the controller
    announcing anew): an exclusive lock on a file beside it, root only."""
    fd = os.open(os.path.join(directory, IMAGES_FILE + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def consume(directory, data, ref):
    """Rewrite the image announcement (DATA, as read) without REF's entry: atomically, root only."""
    rest = [e for e in data.get("images", []) if not (isinstance(e, dict) and e.get("ref") == ref)]
    path = os.path.join(directory, IMAGES_FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(dict(data, images=rest), fh, indent=1, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def archive_limit(entry):
    """The most bytes an archive of the announced image ENTRY may take."""
    return int(entry["bytes"] * ARCHIVE_SLACK) + ARCHIVE_EXTRA


def announced_files(directory, model, files, delete):
    """Check a files_receive against the model's announcement: every file sent is announced with the same size and
    hash, and nothing announced is deleted. Returns the announced manifest; NotAnnounced otherwise."""
    data = _load(directory, MODELS_FILE)
    entry = ((data or {}).get("models") or {}).get(model)
    if entry is None:
        raise NotAnnounced(f"the model {model} was not announced to this node by the controller")
    manifest = check_model(model, entry.get("files"))
    for f in files:
        meta = manifest.get(f["path"])
        if meta is None:
            raise NotAnnounced(f"{model}/{f['path']} is not in the model's announced manifest")
        if meta["size"] != f["size"] or meta["sha256"] != f["sha256"]:
            raise NotAnnounced(f"{model}/{f['path']} was announced as {meta['size']} bytes sha256 {meta['sha256'][:12]}..., "
                               f"not {f['size']} bytes {f['sha256'][:12]}...")
    kept = sorted(set(delete) & set(manifest))
    if kept:
        raise NotAnnounced(f"{model}: {', '.join(kept[:5])} are in the announced manifest and cannot be deleted")
    return manifest


class HostileArchive(ValueError):
    """An image archive that names images (or is not a tar stream the guard can follow)."""


# The archive members that name images: docker load applies these names before the transfer program can verify
# anything, so an archive of the collection (saved by ID, without names) never carries one.
NAME_KEYS = ("io.containerd.image.name", "org.opencontainers.image.ref.name")
WATCHED = ("manifest.json", "repositories", "index.json")
BLOCK = 512


def header_name(block):
    """The member name of a tar header BLOCK, with its ustar prefix (before any pax or GNU long name)."""
    name = block[0:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0] if block[257:262] == b"ustar" else b""
    return prefix + b"/" + name if prefix else name


def clean_name(raw):
    """A member name (bytes) as the engines read it: Moby's Unpack and containerd's importer clean it as Go's
    path.Clean does and drop its leading slashes, so ``x/../manifest.json``, ``/manifest.json`` and
    ``./manifest.json`` all name ``manifest.json``. A name that climbs out of the archive is kept as its last
    parts (``../manifest.json`` reads as ``manifest.json``): the guard errs towards checking a member."""
    name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return posixpath.normpath("/" + name).lstrip("/")


def pax_fields(data):
    """(path, size, linkpath) a pax extended header's records give the next member (None where a record is absent)."""
    path = size = link = None
    for record in data.split(b"\n"):
        key, _eq, value = record.partition(b" ")[2].partition(b"=")
        if key == b"path":
            path = value
        elif key == b"linkpath":
            link = value
        elif key == b"size":
            try:
                size = int(value)
            except ValueError:
                raise HostileArchive(f"the archive's pax size {value!r:.40} is not a number") from None
    return path, size, link


def _octal(field, what):
    if field and field[0] & 0x80:  # base-256 (GNU) for large sizes
        value = int.from_bytes(field[1:], "big") | ((field[0] & 0x3F) << (8 * (len(field) - 1)))
        return value
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text or b"0", 8)
    except ValueError:
        raise HostileArchive(f"the archive's {what} field {text!r:.40} is not a number") from None


def check_names(member, data):
    """Refuse the metadata MEMBER's DATA when it names an image."""
    try:
        doc = json.loads(data.decode("utf-8")) if data.strip() else None
    except (UnicodeDecodeError, ValueError):
        raise HostileArchive(f"the archive's {member} is not JSON") from None
    if member == "manifest.json":
        for item in doc if isinstance(doc, list) else [doc]:
            tags = (item or {}).get("RepoTags") if isinstance(item, dict) else None
            if tags:
                raise HostileArchive(f"the archive names images of its own (RepoTags {', '.join(map(str, tags))[:200]})")
    elif member == "repositories":
        if doc:
            raise HostileArchive(f"the archive names images of its own (repositories {', '.join(map(str, doc))[:200]})")
    else:  # index.json
        for item in (doc or {}).get("manifests") or [] if isinstance(doc, dict) else []:
            notes = (item or {}).get("annotations") or {} if isinstance(item, dict) else {}
            named = [str(notes[k]) for k in NAME_KEYS if notes.get(k)]
            if named:
                raise HostileArchive(f"the archive names images of its own (index.json {', '.join(named)[:200]})")


class TarGuard:
    """Follows an image archive (a tar stream) as it passes, without holding it, and refuses one that names images.

    :meth:`feed` takes the stream in any slices; it raises HostileArchive at the member that names an image, before
    the end of the archive reaches the engine (a load that never sees the archive's end creates nothing)."""

    def __init__(self, limit=1 << 20):
        self.limit = limit
        self.header = bytearray()
        self.remaining = 0  # bytes of the current member (with padding) still to pass
        self.size = 0
        self.capture = None  # the content of a member being read, or None when it is skipped
        self.kind = None  # what the captured member is: "pax", "longname" or a WATCHED name
        self.override = None  # the next member's name from a pax or GNU long-name header
        self.link_override = None  # the next member's link target from a pax or GNU long-link header
        self.size_override = None  # the next member's size from a pax header (members of 8 GiB and more)
        self.links = set()  # the (clean) names of the links seen: a later member may not go through one
        self.members = 0

    def feed(self, data):
        view = memoryview(data)
        i, n = 0, len(view)
        while i < n:
            if self.remaining:
                take = min(self.remaining, n - i)
                if self.capture is not None and len(self.capture) < self.size:
                    self.capture += view[i:i + min(take, self.size - len(self.capture))]
                i += take
                self.remaining -= take
                if not self.remaining:
                    self._member_done()
                continue
            take = min(BLOCK - len(self.header), n - i)
            self.header += view[i:i + take]
            i += take
            if len(self.header) == BLOCK:
                block, self.header = bytes(self.header), bytearray()
                self._start(block)

    def _start(self, block):
        if block == b"\0" * BLOCK:
            return  # end-of-archive blocks (or padding)
        name = header_name(block)
        if self.override is not None:
            name, self.override = self.override, None
        link = block[157:257].split(b"\0", 1)[0]
        if self.link_override is not None:
            link, self.link_override = self.link_override, None
        kind = block[156:157]
        self.size = _octal(block[124:136], "size")
        if self.size_override is not None and kind not in (b"x", b"g", b"L", b"K"):
            # A pax size counts over the header's field, which cannot hold 8 GiB in octal (Go writes it so).
            self.size, self.size_override = self.size_override, None
        self.remaining = (self.size + BLOCK - 1) // BLOCK * BLOCK
        self.members += 1
        member = clean_name(name)
        self.capture, self.kind = None, None
        if kind in (b"x", b"L", b"K"):
            self.kind = {b"x": "pax", b"L": "longname", b"K": "longlink"}[kind]
        elif kind != b"g":  # a pax global header names no member
            self._check_member(member, kind, link)
            if member in WATCHED:
                self.kind = member
        if self.kind is not None:
            if self.size > self.limit:
                raise HostileArchive(f"the archive's {member} takes {self.size} bytes (at most {self.limit} expected)")
            self.capture = bytearray()
        if not self.remaining:
            self._member_done()

    def _check_member(self, member, kind, link):
        """Refuse a member Docker would read as a watched name other than through a plain file of that name: a link
        at or to one, or a name that goes through a link seen earlier (a directory link would put it anywhere)."""
        parts = member.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in self.links:
                raise HostileArchive(f"the archive's member {member[:200]} goes through the link {'/'.join(parts[:depth])}")
        if kind in (b"1", b"2"):
            what = "hard link" if kind == b"1" else "symbolic link"
            target = clean_name(link if kind == b"1" else posixpath.join(posixpath.dirname(member), link.decode("utf-8", "replace")))
            if member in WATCHED or target in WATCHED or target in ("", ".") or member in ("", "."):
                raise HostileArchive(f"the archive holds a {what} {member[:200] or '.'} -> {link.decode('utf-8', 'replace')[:200]}")
            self.links.add(member)
        elif member in WATCHED and kind not in (b"0", b"\0", b""):
            raise HostileArchive(f"the archive's {member} is not a plain file (tar type {kind.decode('ascii', 'replace')!r})")

    def _member_done(self):
        if self.capture is None:
            return
        data, kind = bytes(self.capture[:self.size]), self.kind
        self.capture, self.kind = None, None
        if kind == "longname":
            self.override = data.split(b"\0", 1)[0]
        elif kind == "longlink":
            self.link_override = data.split(b"\0", 1)[0]
        elif kind == "pax":
            path, size, link = pax_fields(data)
            if path is not None:
                self.override = path
            if size is not None:
                self.size_override = size
            if link is not None:
                self.link_override = link
        else:
            check_names(kind, data)
