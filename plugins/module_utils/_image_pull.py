# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node's pull of ``dgxspark_image`` left: the image's ID and the registry's digest of it (the release records it).

The pull itself is community.docker's docker_image_pull (``dgxspark_image_pull``: missing -> pull=not_present, always ->
pull=always; never looks only). This is the part after it: from the engine's inspection of the image (``Id``,
``RepoDigests``), the digest under the reference's own repository, so that a release names the exact image its
registry served under a tag that can move. Pure Python, no Ansible imports: plugins/filter/image_pulled.py wraps it.
"""

from __future__ import annotations

import re
import typing as t

POLICIES = ("missing", "always", "never")
_DIGEST = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
_HUB = ("docker.io/", "index.docker.io/", "registry-1.docker.io/")


class PullError(ValueError):
    """A pull result that names no image; the message names the host, the variable and the fix."""


def split_reference(reference: str) -> tuple[str, str, str]:
    """(repository, tag, digest) of an image reference ``[domain[:port]/]path[:tag][@digest]`` ('' when absent)."""
    reference = str(reference or "").strip()
    name, _sep, digest = reference.partition("@")
    tag = ""
    last = name.rsplit("/", 1)[-1]
    if ":" in last:  # a tag (a ':' before the last '/' is a registry's port)
        name, tag = name.rsplit(":", 1)
    return name, tag, digest


def familiar(repository: str) -> str:
    """REPOSITORY as Docker shows it: Docker Hub's domain and its library/ namespace left out."""
    for hub in _HUB:
        if repository.startswith(hub):
            repository = repository[len(hub):]
            break
    else:
        return repository
    return repository[len("library/"):] if repository.startswith("library/") and repository.count("/") == 1 \
        else repository


def repo_digest(reference: str, repo_digests: t.Iterable[t.Any]) -> str:
    """The entry of REPO_DIGESTS (``repository@sha256:...``) for REFERENCE's repository; '' when the engine holds none
    (an image built or loaded on the node, never pulled). A reference pinned by digest is its own, when the engine
    lists it."""
    repository, _tag, digest = split_reference(reference)
    wanted = familiar(repository)
    found = [str(entry) for entry in repo_digests or () if "@" in str(entry)]
    if digest:
        pinned = f"{wanted}@{digest}"
        return pinned if any(familiar(e.split("@")[0]) + "@" + e.split("@")[1] == pinned for e in found) else ""
    mine = [e for e in found if familiar(e.split("@")[0]) == wanted]
    return sorted(mine)[0] if mine else ""


def check(reference: t.Any, policy: t.Any, host: str = "") -> None:
    """Raise PullError naming HOST, the variable and the fix when REFERENCE (dgxspark_image) or POLICY
    (dgxspark_image_pull) cannot be pulled with: before anything runs on the node."""
    where = f"{host}: " if host else ""
    if policy not in POLICIES:
        raise PullError(f"{where}dgxspark_image_pull must be one of {', '.join(POLICIES)}, is {policy!r}")
    if not reference or not isinstance(reference, str):
        raise PullError(f"{where}dgxspark_image is empty: set it to the serving image's reference (repository:tag or "
                        "repository@sha256:...)")
    _repository, _tag, digest = split_reference(reference)
    if digest and not _DIGEST.fullmatch(digest):
        raise PullError(f"{where}dgxspark_image {reference}: {digest!r} is not a digest (algorithm:hex, e.g. "
                        "sha256:<64 hex digits>)")


def pulled(image: t.Mapping[str, t.Any] | None, reference: str, *, policy: str = "missing", changed: bool = False,
           host: str = "") -> dict[str, t.Any]:
    """The record of REFERENCE on a node after the pull: {"image", "id", "digest", "pulled", "policy"}.

    IMAGE is the engine's inspection (docker_image_pull's ``image``, or one of docker_image_info's ``images``); empty
    when the image is not there, which is an error unless nothing could have pulled it yet (check mode: CHANGED).
    ``pulled`` is whether this run pulled something new (the pull task's ``changed``).
    """
    check(reference, policy, host)
    where = f"{host}: " if host else ""
    image = dict(image or {})
    if not image.get("Id") and not changed:
        if policy == "never":
            raise PullError(f"{where}the image {reference} (dgxspark_image) is not on this node, and dgxspark_image_pull "
                            "is never, so nothing pulls it. Put it there (docker pull or docker load on the node), or "
                            "set dgxspark_image_pull: missing (the default) to pull it from its registry.")
        raise PullError(f"{where}the image {reference} (dgxspark_image) is still not on this node after the pull")
    return {"image": reference, "id": str(image.get("Id") or ""),
            "digest": repo_digest(reference, image.get("RepoDigests") or ()),
            "pulled": bool(changed), "policy": policy}
