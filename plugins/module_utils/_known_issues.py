# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Known-bad combinations of image contents and serving settings: the table, and the check against an image's facts.

KNOWN_ISSUES is the one place the collection keeps them. Each entry:

- ``id``: a stable name (what ``vllm_serve_known_issues_ignore`` lists).
- ``summary``: what happens in the field.
- ``source``: where it is documented.
- ``when``: every condition must hold:
  - ``nccl``: ``{"min": "X.Y.Z", "below": "X.Y.Z"}``, an NCCL in the image with min <= version < below;
  - ``nccl_copies_min``: at least this many distinct NCCL library files in the image;
  - ``nodes_min``: at least this many nodes serve together (tensor parallelism across Sparks);
  - ``settings``: ``{name: bad value}``, a serving setting at that value (a setting left unset, None, counts as
    ``defaults[name]``, what vLLM does when the flag is not given).
- ``remedy``: ``set`` (settings that avoid it, applied when the inventory left them unset; empty when no setting
  helps) and ``advice`` (what to do otherwise).
"""

from __future__ import annotations

import re
import typing as t

# What vLLM does for a setting the inventory left unset.
DEFAULTS = {"enforce_eager": False}

KNOWN_ISSUES = (
    {
        "id": "nccl-cuda-graphs-multinode-deadlock",
        "summary": "NCCL 2.28.9 with CUDA graphs across nodes deadlocks within the first requests (fixed in NCCL 2.30.4)",
        "source": "https://github.com/vllm-project/vllm/issues/52504",
        "when": {"nccl": {"min": "2.28.9", "below": "2.30.4"}, "nodes_min": 2, "settings": {"enforce_eager": False}},
        "remedy": {"set": {"enforce_eager": True},
                   "advice": "serve in eager mode (--enforce-eager), or use an image with NCCL 2.30.4 or later"},
    },
    {
        "id": "nccl-two-copies",
        "summary": "two copies of libnccl in one image hang multi-node inference",
        "source": "https://github.com/vllm-project/vllm/issues/42354",
        "when": {"nccl_copies_min": 2, "nodes_min": 2},
        "remedy": {"set": {},
                   "advice": "rebuild the image with one NCCL (remove the pip nvidia-nccl-cu* package or the system "
                             "libnccl, so that vLLM and torch load the same library)"},
    },
)


def version_tuple(version: str) -> t.Tuple[int, ...]:
    """(2, 28, 9) from '2.28.9' (a '+cuda13.0' suffix and non-numeric parts are ignored)."""
    return tuple(int(part) for part in re.findall(r"\d+", str(version).split("+", 1)[0]))


def image_nccl(image: t.Mapping[str, t.Any]) -> t.Tuple[t.List[str], int]:
    """The NCCL versions an image's facts (dgxspark.vllm.vllm_image_info) name, and how many library files it has."""
    libraries = image.get("nccl_libraries") or []
    versions = [lib.get("version") for lib in libraries]
    versions.append((image.get("versions") or {}).get("nccl"))
    return sorted({v for v in versions if v}, key=version_tuple), len(libraries)


def _matches(when: t.Mapping[str, t.Any], nccl: t.Sequence[str], copies: int, nodes: int,
             effective: t.Mapping[str, t.Any]) -> t.Optional[str]:
    """Why the condition holds (a phrase naming the facts), or None."""
    why = []
    if "nccl" in when:
        low, below = version_tuple(when["nccl"]["min"]), version_tuple(when["nccl"]["below"])
        bad = [v for v in nccl if low <= version_tuple(v) < below]
        if not bad:
            return None
        why.append(f"NCCL {', '.join(bad)}")
    if "nccl_copies_min" in when:
        if copies < when["nccl_copies_min"]:
            return None
        why.append(f"{copies} NCCL libraries")
    if "nodes_min" in when:
        if nodes < when["nodes_min"]:
            return None
        why.append(f"{nodes} nodes")
    for name, bad_value in (when.get("settings") or {}).items():
        if effective[name] != bad_value:
            return None
        why.append(f"{name}={str(effective[name]).lower()}")
    return ", ".join(why)


def check(image: t.Mapping[str, t.Any], nodes: int, settings: t.Mapping[str, t.Any],
          ignore: t.Iterable[str] = (), issues: t.Sequence[t.Mapping[str, t.Any]] = KNOWN_ISSUES) -> t.Dict[str, t.Any]:
    """Check an image's facts and the serving settings against ISSUES.

    SETTINGS maps each setting to True/False as the inventory set it, or None when left unset. Returns ``settings``
    (the values to serve with: unset ones resolved, remedies applied), ``matches`` (one dict per issue that holds,
    with ``action``: ``remedied``, ``forced`` (the inventory set the bad value: stop), ``unremediable`` (no setting
    helps: stop) or ``ignored``), ``remedies`` (what was applied, with the source, for the release record),
    ``warnings`` and ``errors`` (sentences that cite the source).
    """
    unknown = sorted(set(settings) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown settings {unknown}; known: {sorted(DEFAULTS)}")
    ignore = set(ignore)
    known_ids = {issue["id"] for issue in issues}
    if ignore - known_ids:
        raise ValueError(f"unknown known-issue ids {sorted(ignore - known_ids)}; known: {sorted(known_ids)}")
    explicit = {name: value for name, value in settings.items() if value is not None}
    effective = dict(DEFAULTS, **explicit)
    nccl, copies = image_nccl(image)
    result: t.Dict[str, t.Any] = {"settings": effective, "matches": [], "remedies": [], "warnings": [], "errors": []}
    for issue in issues:
        why = _matches(issue["when"], nccl, copies, int(nodes), effective)
        if why is None:
            continue
        remedy = issue["remedy"]
        head = f"{issue['summary']} ({issue['source']}): this deployment has {why}"
        forced = sorted(name for name in remedy["set"] if name in explicit)
        if issue["id"] in ignore:
            action = "ignored"
            result["warnings"].append(f"{head}; ignored because vllm_serve_known_issues_ignore lists {issue['id']}")
        elif not remedy["set"]:
            action = "unremediable"
            result["errors"].append(f"{head}. Fix: {remedy['advice']} (or list {issue['id']} in "
                                    "vllm_serve_known_issues_ignore to serve anyway)")
        elif forced:
            action = "forced"
            result["errors"].append(
                f"{head}, set explicitly by the inventory ({', '.join(f'vllm_serve_{n}' for n in forced)}). Fix: "
                f"{remedy['advice']}: set {', '.join(f'vllm_serve_{n}: {str(v).lower()}' for n, v in remedy['set'].items())}"
                f" or leave it unset so the deploy applies it")
        else:
            action = "remedied"
            effective.update(remedy["set"])
            applied = ", ".join(f"{n}={str(v).lower()}" for n, v in remedy["set"].items())
            result["remedies"].append({"id": issue["id"], "set": dict(remedy["set"]), "source": issue["source"],
                                       "text": f"{applied} ({issue['id']}, {issue['source']})"})
            result["warnings"].append(f"{head}; applying the remedy: {applied} ({remedy['advice']})")
        result["matches"].append({"id": issue["id"], "summary": issue["summary"], "source": issue["source"],
                                  "because": why, "action": action})
    return result
