# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release a cluster serves: one record, and the one place a serving setting becomes a ``vllm serve`` flag.

A release is a plain dict (what ``release.json`` on the head holds, no secrets)::

    {"image": "dgxspark/vllm-hybrid:overlay-...", "image_id": "sha256:...",   # the head's ID where known, else ""
     "image_ids": {"spark-1": "sha256:...", "spark-2": "sha256:..."},         # every member's ID (stores differ)
     "model": "Qwen/Qwen3.5-122B-A10B-FP8", "model_revision": "",
     "served_model_name": "qwen3.5-122b-a10b-fp8", "backend": "ray",
     "settings": {"tensor_parallel_size": 2, ...},                              # one key per SETTINGS entry
     "endpoint": {"url": "http://10.0.0.11:8000/v1", "host": "10.0.0.11", "port": 8000},
     "remedies": [...]}                                                         # known issues remedied

``SETTINGS`` is the one table of serving settings: a new setting is a row here, plus its role variable
(``vllm_serve_<key>``) in the vllm_serve role's defaults and argument spec. Everything else (the release record,
the argv, the comparison, the rollback) follows from the table.

Pure Python, no Ansible imports: the filters in plugins/filter/serve_argv.py wrap it.
"""

from __future__ import annotations

import ipaddress
import json
import re
import typing as t

# How a setting renders:
#   value   -- flag and value, always
#   nonempty -- flag and value when the value is not empty
#   json    -- flag and the value as JSON (json.dumps defaults) when the value is not empty
#   switch  -- the flag alone when true
#   argv    -- the items themselves, at the end of the settings (no flag)
VALUE, NONEMPTY, JSON, SWITCH, ARGV = "value", "nonempty", "json", "switch", "argv"


class Setting(t.NamedTuple):
    key: str           # the release key; the role variable is vllm_serve_<key>
    flag: str | None   # the vllm serve flag (None for argv)
    type: type         # int, float, str, bool, dict, list
    render: str        # VALUE, NONEMPTY, JSON, SWITCH, ARGV
    only_with: str | None = None  # rendered only when this (switch) setting is true
    nullable: bool = False  # None allowed (decided later, e.g. by the known-bad combinations)


# In argv order (the order of today's command line: changing it changes every container's fingerprint).
SETTINGS: tuple[Setting, ...] = (
    Setting("tensor_parallel_size", "--tensor-parallel-size", int, VALUE),
    Setting("pipeline_parallel_size", "--pipeline-parallel-size", int, VALUE),
    Setting("max_model_len", "--max-model-len", int, VALUE),
    Setting("gpu_memory_utilization", "--gpu-memory-utilization", float, VALUE),
    Setting("kv_cache_dtype", "--kv-cache-dtype", str, VALUE),
    Setting("reasoning_parser", "--reasoning-parser", str, NONEMPTY),
    Setting("speculative_config", "--speculative-config", dict, JSON),
    Setting("enforce_eager", "--enforce-eager", bool, SWITCH, nullable=True),
    Setting("enable_auto_tool_choice", "--enable-auto-tool-choice", bool, SWITCH),
    Setting("tool_call_parser", "--tool-call-parser", str, VALUE, only_with="enable_auto_tool_choice"),
    Setting("trust_remote_code", "--trust-remote-code", bool, SWITCH),
    Setting("extra_args", None, list, ARGV),
)
SETTING_KEYS = tuple(s.key for s in SETTINGS)
# The release's other inputs (besides the settings), each from the role variable vllm_serve_<key>.
RELEASE_KEYS = ("image", "model", "model_revision", "served_model_name", "backend")
BACKENDS = ("ray", "mp")
VARIABLE_PREFIX = "vllm_serve_"
MAX_NODES = 8


_ID = re.compile(r"sha256:[0-9a-f]{64}")


class ReleaseError(ValueError):
    """A release input or record that cannot be served; the message names the variable and the fix."""


def variable_names(prefix: str = VARIABLE_PREFIX) -> list[str]:
    """The role variables a release is built from, in a fixed order (RELEASE_KEYS, then SETTINGS)."""
    return [prefix + key for key in RELEASE_KEYS + SETTING_KEYS]


_TRUE = ("true", "yes", "on", "1", "y", "t")
_FALSE = ("false", "no", "off", "0", "n", "f", "")


def _bool(value: t.Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{value!r} is not a boolean")


def _coerce(setting: Setting, value: t.Any, where: str) -> t.Any:
    """Value as the setting's type (Ansible hands ints over as strings after templating)."""
    name = where + setting.key
    if value is None:
        if setting.nullable:
            return None
        raise ReleaseError(f"{name} is not set (null); set it or remove the null to take the role default")
    try:
        if setting.type is bool:
            return _bool(value)
        if setting.type is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if setting.type is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if setting.type is str:
            if not isinstance(value, str):
                raise ValueError(value)
            return value
        if setting.type is dict:
            if isinstance(value, str) and value.strip() == "":
                return {}
            if not isinstance(value, t.Mapping):
                raise ValueError(value)
            return dict(value)
        if setting.type is list:
            if isinstance(value, (str, bytes)) or not isinstance(value, t.Iterable) or isinstance(value, t.Mapping):
                raise ValueError(value)
            return [str(item) for item in value]
    except (TypeError, ValueError):
        pass
    else:
        raise AssertionError(setting.type)  # pragma: no cover - every type of SETTINGS is handled above
    kind = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "a mapping",
            list: "a list of strings"}[setting.type]
    raise ReleaseError(f"{name} must be {kind}, is {value!r}")


def _check_settings(settings: dict[str, t.Any], where: str) -> None:
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len"):
        if settings[key] < 1:
            raise ReleaseError(f"{where}{key} must be at least 1, is {settings[key]}")
    if not 0 < settings["gpu_memory_utilization"] <= 1:
        raise ReleaseError(f"{where}gpu_memory_utilization must be in (0, 1], is {settings['gpu_memory_utilization']}"
                           " (a share of the GB10's unified memory, e.g. 0.80)")
    if settings["enable_auto_tool_choice"] and not settings["tool_call_parser"]:
        raise ReleaseError(f"{where}enable_auto_tool_choice is true but {where}tool_call_parser is empty:"
                           " vLLM needs a parser for automatic tool choice (e.g. qwen3_coder, hermes)")
    flags = {s.flag for s in SETTINGS if s.flag}
    for item in settings["extra_args"]:
        if item.split("=", 1)[0] in flags:
            raise ReleaseError(f"{where}extra_args repeats {item.split('=', 1)[0]}, which the role renders from"
                               f" {where}{next(s.key for s in SETTINGS if s.flag == item.split('=', 1)[0])}:"
                               " set that variable instead")


def build(inputs: t.Mapping[str, t.Any], *, where: str = VARIABLE_PREFIX) -> dict[str, t.Any]:
    """A release (without endpoint, image ID and remedies) from the role's inputs, checked.

    ``inputs`` maps RELEASE_KEYS and SETTING_KEYS (without the prefix) to the role's values; ``where`` prefixes
    the names in errors (the role variables).
    """
    missing = [key for key in RELEASE_KEYS + SETTING_KEYS if key not in inputs]
    if missing:
        raise ReleaseError("missing release inputs: " + ", ".join(where + key for key in missing))
    release: dict[str, t.Any] = {}
    for key in RELEASE_KEYS:
        value = inputs[key]
        if value is None:
            value = ""
        if not isinstance(value, str):
            raise ReleaseError(f"{where}{key} must be a string, is {value!r}")
        release[key] = value.strip()
    hints = {"image": " (dgxspark_image: the serving image)", "model": " (dgxspark_model: a Hugging Face id or a path)",
             "served_model_name": " (the name clients use in requests)"}
    for key, hint in hints.items():
        if not release[key]:
            raise ReleaseError(f"{where}{key} is empty; set it{hint}")
    if release["backend"] not in BACKENDS:
        raise ReleaseError(f"{where}backend must be one of {', '.join(BACKENDS)}, is {release['backend']!r}")
    release["settings"] = {s.key: _coerce(s, inputs[s.key], where) for s in SETTINGS}
    _check_settings(release["settings"], where)
    return release


def for_cluster(release: dict[str, t.Any], nodes: t.Any = None) -> dict[str, t.Any]:
    """RELEASE as a cluster of NODES serves it: a single Spark serves in one engine container, without Ray or
    multi-node flags (backend mp); larger clusters (and an unknown size) keep the backend they asked for."""
    if nodes is not None and int(nodes) == 1 and release.get("backend") != "mp":
        release = dict(release, backend="mp")
    return release


def finish(release: t.Mapping[str, t.Any], *, enforce_eager: bool | None = None,
           remedies: t.Sequence[t.Any] = (), endpoint: t.Mapping[str, t.Any] | None = None,
           image_id: str = "", image_ids: t.Mapping[str, t.Any] | None = None,
           source: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """The complete record: the known-bad combinations' decision on enforce_eager, remedies, endpoint, image ID, and
    the image the serving image was built from, as pulled (``source``).

    ``image_ids`` maps each member to the ID its Docker engine gives the serving image. One image has one ID on
    engines of one kind, and another on a node with the containerd image store (Docker 29's default) next to a
    graph-driver node: a rollback serves each node its own ID.
    """
    record = {key: release[key] for key in RELEASE_KEYS}
    record["settings"] = dict(release["settings"])
    if enforce_eager is not None:
        record["settings"]["enforce_eager"] = _coerce(SETTINGS[SETTING_KEYS.index("enforce_eager")], enforce_eager, "")
    if record["settings"]["enforce_eager"] is None:
        raise ReleaseError("enforce_eager is still undecided: pass the known-bad combinations' decision")
    record["image_id"] = image_id or ""
    ids = {}
    for host, value in dict(image_ids or {}).items():
        value = str(value or "").strip()
        if value and not _ID.fullmatch(value):
            raise ReleaseError(f"image_ids: {host}'s image ID must be sha256:<64 hex digits>, is {value!r}")
        if value:
            ids[str(host)] = value
    record["image_ids"] = dict(sorted(ids.items()))
    record["remedies"] = list(remedies or [])
    endpoint = dict(endpoint or {})
    if endpoint and "url" not in endpoint and "lan_ip" in endpoint:
        endpoint = serving_endpoint(endpoint.get("host"), endpoint.get("port"), endpoint["lan_ip"],
                                    gateways=endpoint.get("gateways"), door_tls=endpoint.get("door_tls"))
    if endpoint:
        try:
            port = int(endpoint["port"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ReleaseError(f"endpoint needs host, port and url, is {endpoint!r}") from exc
        if not endpoint.get("host") or not endpoint.get("url"):
            raise ReleaseError(f"endpoint needs host, port and url, is {endpoint!r}")
        endpoint = {"url": str(endpoint["url"]), "host": str(endpoint["host"]), "port": port}
    record["endpoint"] = endpoint
    record["source"] = source_record(source)
    return record


def clients_url(host: str, port: t.Any, tls: bool) -> str:
    """The clients' base URL (with ``/v1``) of an API at HOST:PORT, over HTTPS with TLS; an IPv6 address bracketed.
    The one producer of the URL the deploy records and prints and the door says it serves."""
    text = str(host or "").strip()
    try:
        if ipaddress.ip_address(text).version == 6:
            text = f"[{text}]"
    except ValueError:
        if not text:
            raise ReleaseError("the clients' URL needs a host") from None
    try:
        port = int(port)
    except (TypeError, ValueError) as exc:
        raise ReleaseError(f"the clients' URL needs a port, is {port!r}") from exc
    return f"{'https' if tls else 'http'}://{text}:{port}/v1"


def serving_endpoint(bind: t.Any, port: t.Any, lan_ip: t.Any, gateways: t.Any = False,
                     door_tls: t.Any = True) -> dict[str, t.Any]:
    """The release's ``endpoint`` of an engine bound to BIND:PORT on a head whose LAN address is LAN_IP.

    The clients' URL: with GATEWAYS, the engine's own (the gateway's URL is the clients'); without, the head's LAN
    address, where the door for clients stands in the engine's place (an engine on the loopback) or the engine itself
    listens (bound to every address). The door speaks TLS unless DOOR_TLS is false (security review M2); an engine on
    the LAN is plain HTTP."""
    bind = str(bind or "127.0.0.1").strip()
    loopback = bind in ("127.0.0.1", "::1")
    gateways = bool(gateways)
    host = str(lan_ip or "").strip() if bind in ("0.0.0.0", "::") or (not gateways and loopback) else bind
    tls = _true(door_tls) and not gateways and loopback
    return {"url": clients_url(host, port, tls), "host": bind, "port": int(port)}


def _true(value: t.Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1", "y", "t")
    return bool(value)


def engine_url(release: t.Mapping[str, t.Any] | None) -> str:
    """The engine's own base URL (no ``/v1``) as its head reaches it: the loopback for an engine bound to the loopback
    or to every address, its bind address otherwise; ``""`` for a release without an endpoint.

    The release's ``endpoint.url`` is the clients' (the head's door on the LAN); what runs on the head itself (the
    deploy's readiness and fast-path probes, the status) asks the engine here, with the engines' key, not through the
    door."""
    endpoint = (release or {}).get("endpoint") or {}
    host, port = str(endpoint.get("host") or ""), endpoint.get("port")
    if not host or port in (None, ""):
        return ""
    try:
        port = int(port)
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise ReleaseError(f"the release's endpoint has no address and port: {endpoint!r}") from exc
    if address.is_loopback or address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return f"http://{'[' + str(address) + ']' if address.version == 6 else address}:{port}"


SOURCE_KEYS = ("image", "id", "digest")


def source_record(source: t.Mapping[str, t.Any] | None) -> dict[str, str]:
    """The release's ``source``: the image the serving image was built from (or is), as the head pulled it -
    ``image`` (the reference), ``id`` and ``digest`` (``repository@sha256:...`` as its registry served it, '' when it
    was never pulled). {} when not known. Not compared between releases: a rebuilt image says what changed."""
    if not source:
        return {}
    if not isinstance(source, t.Mapping):
        raise ReleaseError(f"source must be a mapping (image, id, digest), is {source!r}")
    record = {key: str(source.get(key) or "").strip() for key in SOURCE_KEYS}
    if not record["image"]:
        return {}
    if record["id"] and not _ID.fullmatch(record["id"]):
        raise ReleaseError(f"source: the image ID must be sha256:<64 hex digits>, is {record['id']!r}")
    if record["digest"] and not re.fullmatch(r"[^@\s]+@sha256:[0-9a-f]{64}", record["digest"]):
        raise ReleaseError(f"source: the digest must be repository@sha256:<64 hex digits>, is {record['digest']!r}")
    return record


def _render_settings(settings: t.Mapping[str, t.Any]) -> list[str]:
    argv: list[str] = []
    tail: list[str] = []
    for setting in SETTINGS:
        value = settings[setting.key]
        if setting.only_with and not settings[setting.only_with]:
            continue
        if setting.render == VALUE:
            argv += [setting.flag, str(value)]
        elif setting.render == NONEMPTY:
            if value:
                argv += [setting.flag, str(value)]
        elif setting.render == JSON:
            if value:
                argv += [setting.flag, json.dumps(value)]
        elif setting.render == SWITCH:
            if value:
                argv.append(setting.flag)
        elif setting.render == ARGV:
            tail += [str(item) for item in value]
        else:  # pragma: no cover - the table is checked by the tests
            raise AssertionError(setting.render)
    return argv + tail


def model_path(model: str) -> str:
    """Where the engine finds the model: an absolute path as is, a Hugging Face id under /models/<its name>."""
    return model if model.startswith("/") else "/models/" + model.rstrip("/").rsplit("/", 1)[-1]


def serve_argv(release: t.Mapping[str, t.Any], *, rank: int = 0, nodes: int = 1, master_addr: str = "",
               master_port: int = 29501, host: str | None = None, port: int | None = None) -> list[str]:
    """The ``vllm serve`` argv of one node of a cluster of ``nodes`` (rank 0 is the head).

    ray: the head runs the engine over the cluster's Ray (the workers run no vllm serve; their argv is the head's).
    mp: every node runs a rank, ``--nnodes/--node-rank/--master-addr/--master-port``; rank 0 has the API
    (``--host/--port``), ranks 1.. run ``--headless``. A one-node cluster has neither Ray nor multi-node flags.
    ``host``/``port`` default to the release's endpoint.
    """
    try:
        nodes, rank = int(nodes), int(rank)
    except (TypeError, ValueError) as exc:
        raise ReleaseError(f"nodes and rank must be integers, are {nodes!r} and {rank!r}") from exc
    if not 1 <= nodes <= MAX_NODES:
        raise ReleaseError(f"a cluster has 1 to {MAX_NODES} nodes, this one {nodes}")
    if not 0 <= rank < nodes:
        raise ReleaseError(f"rank {rank} is not a rank of a cluster of {nodes} nodes (0..{nodes - 1})")
    backend = release.get("backend")
    if backend not in BACKENDS:
        raise ReleaseError(f"backend must be one of {', '.join(BACKENDS)}, is {backend!r}")
    settings = release["settings"]
    if settings.get("enforce_eager") is None:
        raise ReleaseError("enforce_eager is undecided: render the release the known-bad combinations decided")
    gpus = settings["tensor_parallel_size"] * settings["pipeline_parallel_size"]
    if gpus != nodes:
        raise ReleaseError(f"tensor_parallel_size x pipeline_parallel_size is {settings['tensor_parallel_size']} x"
                           f" {settings['pipeline_parallel_size']} = {gpus}, but the cluster has {nodes} node(s)"
                           " with one GPU each: set vllm_serve_tensor_parallel_size (and pipeline) to match")
    endpoint = release.get("endpoint") or {}
    host = endpoint.get("host") if host is None else host
    port = endpoint.get("port") if port is None else port
    if not host or port in (None, ""):
        raise ReleaseError("the API needs a host and a port (the release's endpoint)")
    base = ["vllm", "serve", model_path(release["model"]), "--served-model-name", release["served_model_name"]]
    base += _render_settings(settings)
    api = ["--host", str(host), "--port", str(port)]
    if nodes == 1:
        return base + api
    if backend == "ray":
        return base + api + ["--distributed-executor-backend", "ray"]
    if not master_addr:
        raise ReleaseError("the mp backend needs the head's fabric address (master_addr)")
    multi = ["--distributed-executor-backend", "mp", "--nnodes", str(nodes), "--node-rank", str(rank),
             "--master-addr", str(master_addr), "--master-port", str(master_port)]
    return base + multi + (api if rank == 0 else ["--headless"])


def compare(old: t.Mapping[str, t.Any] | None, new: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What differs between two releases: {"same": bool, "changes": {key: [old, new]}} (settings as settings.<key>).

    Timings and the image ID are not compared: a rebuilt image under the same name is the same release to the role
    (its container restarts on the image change anyway), and an old record has no ID.
    """
    old = old or {}
    changes: dict[str, list[t.Any]] = {}
    for key in RELEASE_KEYS:
        before, after = old.get(key, "" if key == "model_revision" else None), new.get(key)
        if before != after:
            changes[key] = [before, after]
    old_settings, new_settings = old.get("settings") or {}, new.get("settings") or {}
    for key in SETTING_KEYS:
        if old_settings.get(key) != new_settings.get(key):
            changes["settings." + key] = [old_settings.get(key), new_settings.get(key)]
    old_endpoint, new_endpoint = old.get("endpoint") or {}, new.get("endpoint") or {}
    if old_endpoint and new_endpoint and old_endpoint != new_endpoint:
        changes["endpoint"] = [old_endpoint, new_endpoint]
    return {"same": not changes, "changes": changes}


def rollback_inputs(record: t.Mapping[str, t.Any] | None, current: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The inputs of ``build`` that serve a stored release again (``release.json``, this version's or older).

    ``current`` (the role's own inputs) fills what the record does not hold: a setting added after the record
    was written takes today's value. enforce_eager is the one the record was served with (forced).
    """
    if not isinstance(record, t.Mapping) or not record:
        raise ReleaseError("no release record to roll back to (release.json on the head): deploy the cluster first")
    for key in ("image", "model", "backend"):
        if not record.get(key):
            raise ReleaseError(f"the release record has no {key} (keys: {', '.join(sorted(record))}):"
                               " it was not written by vllm_serve; deploy the cluster again")
    inputs = {key: current.get(key) for key in RELEASE_KEYS + SETTING_KEYS}
    for key in RELEASE_KEYS:
        if key in record:
            inputs[key] = record[key]
    settings = record.get("settings") or {}
    if not isinstance(settings, t.Mapping):
        raise ReleaseError(f"the release record's settings must be a mapping, are {settings!r}")
    for key in SETTING_KEYS:
        if key in settings:
            inputs[key] = settings[key]
    return inputs


def rollback_target(record: t.Mapping[str, t.Any] | None, current: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The release (checked, as ``build``) a stored record serves again."""
    return build(rollback_inputs(record, current), where="release.json: ")


def _short_id(image_id: t.Any) -> str:
    """An image ID without its ``sha256:`` prefix, lower case ('' when there is none)."""
    text = str(image_id or "").strip().lower()
    return text.split(":", 1)[1] if text.startswith("sha256:") else text


def rollback_record(record: t.Mapping[str, t.Any] | None, host: str | None = None) -> dict[str, t.Any]:
    """The stored record with its image named by ID, which is what a rollback serves (on HOST, when given).

    A tag can have moved since the record was written (an overlay rebuilt under the same tag): the ID is the image
    that served. Each member serves the ID it recorded (``image_ids``: one image has two IDs across image stores);
    a member the record does not list serves the head's ``image_id``. A record without an ID (an older one) keeps its
    image name, the only thing it knows.
    """
    if not isinstance(record, t.Mapping) or not record:
        raise ReleaseError("no release record to roll back to (release.json on the head): deploy the cluster first")
    if not record.get("image"):
        raise ReleaseError(f"the release record has no image (keys: {', '.join(sorted(record))}):"
                           " it was not written by vllm_serve; deploy the cluster again")
    restore = dict(record)
    ids = record.get("image_ids") if isinstance(record.get("image_ids"), t.Mapping) else {}
    image_id = str((ids.get(host) if host is not None else None) or record.get("image_id") or "").strip()
    if image_id:
        restore["image"] = image_id if image_id.startswith("sha256:") else "sha256:" + image_id
    return restore


def rollback_image_missing(record: t.Mapping[str, t.Any], present: t.Mapping[str, t.Any],
                           members: t.Sequence[str], cluster: str) -> str:
    """'' when every member has the image the rollback would serve, else the message that stops the rollout.

    ``present`` maps each member to whether its Docker engine has the image (its own ID, ``rollback_record`` with
    its name; a member absent from it has not answered, and counts as missing).
    """
    missing = [host for host in members if not present.get(host)]
    if not missing:
        return ""
    images = [rollback_record(record, host)["image"] for host in missing]
    name = record.get("image") if record.get("image") not in images else ""
    shown = images[0] if len(set(images)) == 1 else ", ".join(f"{h}: {i}" for h, i in zip(missing, images))
    return (f"{cluster}: the previous release's image {shown}{' (' + name + ')' if name else ''} is not on"
            f" {', '.join(missing)}, so a rollback could not serve it there. Nothing was switched: {cluster} keeps"
            " serving its release. Load that image on those nodes again (docker save/load, or the"
            " dgxspark.vllm.image_sync role with its ID), or pass -e rollout_rollback=false to roll out without a"
            " way back.")


def prune_images(listed: t.Sequence[str], keep_names: t.Sequence[str], keep_ids: t.Sequence[str]) -> list[str]:
    """The image names a prune removes from ``docker image ls --no-trunc --format '{{.Repository}}:{{.Tag}} {{.ID}}'``.

    Kept: the images named in ``keep_names`` (every tag of the image each names, its aliases too) and the images
    whose ID is in ``keep_ids`` (a release's image whose tag has since moved to another image is kept by its ID).
    Untagged images (``<none>``) are left to Docker's own pruning.
    """
    rows = []
    for line in listed:
        parts = str(line).split()
        if len(parts) >= 2:
            rows.append((parts[0], _short_id(parts[1])))
    names = {str(name).strip() for name in keep_names if str(name or "").strip()}
    ids = {_short_id(image_id) for image_id in keep_ids if _short_id(image_id)}
    ids |= {image_id for name, image_id in rows if name in names}

    def kept(image_id: str) -> bool:
        # docker may list a short ID; a record holds the full one.
        return any(image_id and (k.startswith(image_id) or image_id.startswith(k)) for k in ids)

    remove = []
    for name, image_id in rows:
        if name.endswith(":<none>") or name in names or kept(image_id) or name in remove:
            continue
        remove.append(name)
    return remove


def lone_models(records: t.Mapping[str, t.Mapping[str, t.Any]]) -> list[str]:
    """What a rollout says before it starts: the models one cluster alone serves, whose switch refuses them.

    RECORDS maps each cluster to ``{"release": release.json or {}, "rollout": rollout.json or {}}`` read from its head.
    Returns one sentence per model served by exactly one cluster, with how long that cluster's last switch took
    (the rollout record's switch window), in the order of the clusters' names.
    """
    serving: dict[str, list[str]] = {}
    for cluster in sorted(records):
        release = (records[cluster] or {}).get("release") or {}
        name = release.get("served_model_name") or release.get("model")
        if name:
            serving.setdefault(str(name), []).append(cluster)
    said = []
    for name, clusters in serving.items():
        if len(clusters) != 1:
            continue
        cluster = clusters[0]
        rollout = (records[cluster] or {}).get("rollout") or {}
        try:
            took = float(rollout["switch_ended"]) - float(rollout["switch_started"])
        except (KeyError, TypeError, ValueError):
            took = None
        last = (f"its last switch took {took:.0f} s" if took is not None and took >= 0
                else "no switch of it is on record yet; on real Sparks a model load takes 10-15 minutes")
        said.append(f"{name} is served by {cluster} alone: while {cluster} switches, requests for {name} are refused "
                    f"({last}). Serve {name} on a second cluster to roll without refusing any.")
    return said
