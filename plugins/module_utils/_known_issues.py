# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Known-bad combinations of image contents and serving settings, and known-bad host platforms: the tables, and the
checks against an image's facts and a node's.

KNOWN_ISSUES is the one place the collection keeps them. Each entry:

- ``id``: a stable name (what ``vllm_serve_known_issues_ignore`` lists).
- ``summary``: what happens in the field.
- ``source``: where it is documented.
- ``when``: every condition must hold:
  - ``nccl``: ``{"min": "X.Y.Z", "below": "X.Y.Z"}``, an NCCL in the image with min <= version < below;
  - ``nccl_copies_min``: at least this many distinct NCCL library files in the image;
  - ``nodes_min``: at least this many nodes serve together (tensor parallelism across Sparks);
  - ``settings``: ``{name: bad value}``, a serving setting at that value (a setting left unset, None, counts as
    ``defaults[name]``, what vLLM does when the flag is not given);
  - ``rdma_without_verbs``: the engine's environment has NCCL use RDMA (``NCCL_NET=IB``, as rdma_facts sets it on an
    RDMA fabric, or ``NCCL_IB_DISABLE=0``) and the image lacks the RDMA user-space libraries (vllm_image_info's
    ``verbs``: libibverbs.so.1 or the mlx5 provider missing). Facts without ``verbs`` never match.
- ``remedy``: ``set`` (settings that avoid it, applied when the inventory left them unset; empty when no setting
  helps) and ``advice`` (what to do otherwise).

HOST_ISSUES keeps the known-bad host platforms (kernels, NVIDIA drivers, DGX OS versions), which the preflight checks
against each node's own facts (dgxspark.vllm.node_facts' ``host``). Each entry:

- ``id``, ``summary``, ``source`` as above; ``also``: further reports of the same breakage (optional).
- ``when``: every condition must hold:
  - ``kernel`` (``uname -r``), ``driver`` (nvidia-smi's driver version), ``dgx_os`` (the DGX OS version of
    /etc/dgx-release): a version condition, ``{"is": [...], "min": "X", "below": "Y"}`` (each key optional, every
    one given must hold). ``is``: the release is exactly one of these (a kernel's flavour included:
    ``7.0.0-1019-nvidia``); ``min``/``below``: min <= version < below, compared by their numbers (a kernel's
    ``7.0.0-1019-nvidia`` as 7, 0, 0, 1019). A fact the node did not report never matches.
    The versions are the ones the source documents, no wider: a later release is not assumed broken (or fixed)
    until a source says so.
  - ``nodes_min``: at least this many nodes serve together; ``transport``: the fabric's transport (``roce``,
    ``socket``), as rdma_facts chose it.
- ``severity``: ``stop`` (the preflight stops the node) or ``warn`` (a warning).
- ``advice``: what to do about it.
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
    {
        "id": "rdma-userspace-libraries-missing",
        "summary": "the image has no RDMA user-space libraries for NCCL's IB transport (CUDA's aarch64 base images ship "
                   "no libibverbs): on an RDMA fabric (NCCL_NET=IB) every node's engine stops at start with \"Failed "
                   "to initialize any NET plugin\"",
        "source": "https://github.com/NVIDIA/nvidia-container-toolkit/issues/1877",
        "when": {"rdma_without_verbs": True},
        "remedy": {"set": {},
                   "advice": "add them to the image (a Dockerfile layer: RUN apt-get update && apt-get install -y "
                             "libibverbs1 ibverbs-providers, as https://github.com/dstackai/dstack/issues/2712 did) and "
                             "serve that image, or serve an image that has them"},
    },
)

# The fact each host condition reads, and how a message names it.
HOST_FACTS = {"kernel": "kernel {} (uname -r)", "driver": "NVIDIA driver {} (nvidia-smi)",
              "dgx_os": "DGX OS {} (/etc/dgx-release)"}
SEVERITIES = ("stop", "warn")

HOST_ISSUES = (
    {
        "id": "kernel-7.0.0-1019-nccl-roce-reg-mr",
        "summary": "kernel 7.0.0-1019-nvidia breaks NCCL's memory registration over RoCE (ibv_reg_mr fails with ENOMEM, "
                   "Cannot allocate memory), so the engine never starts across nodes; 6.17.0-1032-nvidia works",
        "source": "https://github.com/eugr/spark-vllm-docker/issues/392",
        "also": ("https://forums.developer.nvidia.com/t/383023",),
        "when": {"kernel": {"is": ["7.0.0-1019-nvidia"]}, "nodes_min": 2, "transport": "roce"},
        "severity": "stop",
        "advice": "boot the node into a kernel reported to work (6.17.0-1032-nvidia: pick it in GRUB's advanced options "
                  "or make it the default) and keep apt from moving it back (apt-mark hold) until a fixed kernel is "
                  "documented",
    },
    {
        "id": "kernel-6.17.0-1008-panics",
        "summary": "kernel 6.17.0-1008-nvidia has documented kernel panics on DGX Spark",
        "source": "https://forums.developer.nvidia.com/t/366026",
        "when": {"kernel": {"is": ["6.17.0-1008-nvidia"]}},
        "severity": "warn",
        "advice": "move the node to another kernel (a later DGX OS update, then a reboot) before serving on it",
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


def nccl_uses_rdma(env: t.Mapping[str, t.Any]) -> bool:
    """Whether the engine's environment has NCCL use RDMA (as _node_container.fabric_has_rdma reads it)."""
    net = str(env.get("NCCL_NET", ""))
    return net == "IB" or (net != "Socket" and str(env.get("NCCL_IB_DISABLE", "1")) == "0")


def missing_verbs(image: t.Mapping[str, t.Any]) -> t.Optional[t.List[str]]:
    """What of the RDMA user-space libraries the image's facts miss ([] none); None when the facts do not say."""
    verbs = image.get("verbs")
    if not isinstance(verbs, t.Mapping) or not image.get("exists", True):
        return None
    return [] if verbs.get("complete") else [str(item) for item in verbs.get("missing") or ["the RDMA libraries"]]


def _matches(when: t.Mapping[str, t.Any], nccl: t.Sequence[str], copies: int, nodes: int,
             effective: t.Mapping[str, t.Any], rdma: bool = False,
             verbs_missing: t.Optional[t.Sequence[str]] = None) -> t.Optional[str]:
    """Why the condition holds (a phrase naming the facts), or None."""
    why = []
    if when.get("rdma_without_verbs"):
        if not rdma or not verbs_missing:
            return None
        why.append(f"NCCL over RDMA (NCCL_NET=IB) and an image without {' and without '.join(verbs_missing)}")
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
          ignore: t.Iterable[str] = (), issues: t.Sequence[t.Mapping[str, t.Any]] = KNOWN_ISSUES,
          engine_env: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """Check an image's facts and the serving settings against ISSUES.

    ENGINE_ENV is the engine's environment on this node (the fabric's, with the inventory's over it): whether NCCL
    uses RDMA there.

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
    rdma, verbs_missing = nccl_uses_rdma(engine_env or {}), missing_verbs(image)
    result: t.Dict[str, t.Any] = {"settings": effective, "matches": [], "remedies": [], "warnings": [], "errors": []}
    for issue in issues:
        why = _matches(issue["when"], nccl, copies, int(nodes), effective, rdma, verbs_missing)
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


def release_tuple(release: str) -> t.Tuple[int, ...]:
    """The numbers of a release's leading version: (7, 0, 0, 1019) from '7.0.0-1019-nvidia-64k', (580, 95, 5) from
    '580.95.05' (a flavour after the numbers is not part of the version)."""
    match = re.match(r"\d+(?:[.-]\d+)*", str(release).strip())
    return tuple(int(part) for part in re.findall(r"\d+", match.group(0))) if match else ()


def validate_host_issue(issue: t.Mapping[str, t.Any]) -> None:
    """Raise ValueError when a HOST_ISSUES entry is malformed (a condition that could never be read as meant)."""
    name = issue.get("id", "?")
    missing = sorted({"id", "summary", "source", "when", "severity", "advice"} - set(issue))
    if missing:
        raise ValueError(f"{name}: missing {missing}")
    if issue["severity"] not in SEVERITIES:
        raise ValueError(f"{name}: severity must be one of {SEVERITIES}, is {issue['severity']!r}")
    when = issue["when"]
    unknown = sorted(set(when) - set(HOST_FACTS) - {"nodes_min", "transport"})
    if not when or unknown:
        raise ValueError(f"{name}: unknown host conditions {unknown} (or none); "
                         f"known: {sorted(HOST_FACTS) + ['nodes_min', 'transport']}")
    for fact in set(when) & set(HOST_FACTS):
        condition = when[fact]
        if not condition or set(condition) - {"is", "min", "below"}:
            raise ValueError(f"{name}: the {fact} condition has is, min and/or below, and nothing else: {condition}")


def _version_holds(condition: t.Mapping[str, t.Any], value: str) -> bool:
    value = str(value or "").strip()
    if not value or not release_tuple(value):
        return False
    if "is" in condition and value not in condition["is"]:
        return False
    if "min" in condition and release_tuple(value) < release_tuple(condition["min"]):
        return False
    if "below" in condition and release_tuple(value) >= release_tuple(condition["below"]):
        return False
    return True


def _host_matches(when: t.Mapping[str, t.Any], facts: t.Mapping[str, t.Any]) -> t.Optional[str]:
    """Why the host condition holds (a phrase naming each fact and where it was read), or None."""
    why = []
    for fact, label in HOST_FACTS.items():
        if fact in when:
            if not _version_holds(when[fact], facts.get(fact)):
                return None
            why.append(label.format(str(facts[fact]).strip()))
    if "nodes_min" in when:
        nodes = int(facts.get("nodes") or 1)
        if nodes < when["nodes_min"]:
            return None
        why.append(f"{nodes} nodes serving together")
    if "transport" in when:
        if facts.get("transport") != when["transport"]:
            return None
        why.append(f"{facts['transport']} transport on the fabric")
    return ", ".join(why)


def check_host(facts: t.Mapping[str, t.Any], host: str = "", ignore: t.Iterable[str] = (),
               issues: t.Sequence[t.Mapping[str, t.Any]] = HOST_ISSUES,
               ignore_variable: str = "preflight_known_issues_ignore") -> t.Dict[str, t.Any]:
    """Check one node's host facts against ISSUES (the known-bad host platforms).

    FACTS: ``kernel``, ``driver``, ``dgx_os`` (strings; empty when unknown), ``nodes`` (how many nodes serve
    together) and ``transport`` (the fabric's). Returns ``matches`` (one dict per issue that holds: ``id``,
    ``summary``, ``source``, ``because``, ``severity`` and ``action``: ``stop``, ``warn`` or ``ignored``),
    ``warnings`` and ``errors`` (sentences naming the host, the facts, the source and the fix).
    """
    for issue in issues:
        validate_host_issue(issue)
    ignore = set(ignore)
    known_ids = {issue["id"] for issue in issues}
    if ignore - known_ids:
        raise ValueError(f"unknown host known-issue ids {sorted(ignore - known_ids)} in {ignore_variable}; "
                         f"known: {sorted(known_ids)}")
    prefix = f"{host}: " if host else ""
    result: t.Dict[str, t.Any] = {"matches": [], "warnings": [], "errors": []}
    for issue in issues:
        why = _host_matches(issue["when"], facts)
        if why is None:
            continue
        head = f"{prefix}{issue['summary']} ({issue['source']}): this node has {why}"
        if issue["id"] in ignore:
            action = "ignored"
            result["warnings"].append(f"{head}; ignored because {ignore_variable} lists {issue['id']}")
        elif issue["severity"] == "stop":
            action = "stop"
            result["errors"].append(f"{head}. Fix: {issue['advice']} (or list {issue['id']} in {ignore_variable} "
                                    "to go on anyway)")
        else:
            action = "warn"
            result["warnings"].append(f"{head}. Fix: {issue['advice']} (or list {issue['id']} in {ignore_variable} "
                                      "to silence this warning)")
        result["matches"].append({"id": issue["id"], "summary": issue["summary"], "source": issue["source"],
                                  "because": why, "severity": issue["severity"], "action": action})
    return result
