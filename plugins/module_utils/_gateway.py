# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gateway's HAProxy configurations: the front door (one authenticated OpenAI endpoint for the fleet) and each
head's door (the only way from the LAN to the engine, open to the gateways alone).

Pure functions over plain data, so that the filters the role calls and the unit tests share one implementation.
Every value is validated before it reaches a line of a configuration: names, addresses, ports, keys. A value that
does not pass raises GatewayError with a sentence naming the variable and the fix.

The runtime API contract (the rollouts' dgxspark.vllm.gateway_server relies on it): the stats socket is SOCKET, one
backend per served model named ``model_<served name>``, and in it one server per cluster named exactly the
cluster's name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import re

from ansible_collections.dgxspark.vllm.plugins.module_utils import _release
from ansible_collections.dgxspark.vllm.plugins.module_utils._gateway_api import RELAY_PREFIX, STATE_FILE
from ansible_collections.dgxspark.vllm.plugins.module_utils._watchdog import api_key as serve_env_key

NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
# Keys go into a pattern file (one a line) and the engine key into a quoted header value: no blank, quote,
# backslash, comma or control character can get in.
KEY_RE = re.compile(r"^[A-Za-z0-9._~+/=:@-]{8,512}$")
SOCKET = "/var/lib/dgxspark/gateway/admin.sock"
# Beside the socket: the servers' state (_gateway_api.STATE_FILE), which dgxspark.vllm.gateway_server writes (show
# servers state) after every admin-state change and before every reload, and HAProxy reads at every start, so that a
# drained cluster stays drained through a reload, a restart or a reboot of the gateway.
# The OpenAI inference routes the gateway forwards (POST): every other path is answered 404 here, never forwarded
# (vLLM's --api-key guards /v1 alone; /invocations, /tokenize, /pooling and the rest answer without it).
PATHS = ("/v1/chat/completions", "/v1/completions")
PATH_RE = re.compile(r"^/v1/[a-z0-9_]+(/[a-z0-9_]+)*$")
CONFIG_DIR_IN_CONTAINER = "/usr/local/etc/haproxy"
KEYS_FILE = "keys"
TLS_FILE = "tls.pem"  # the gateway's certificate, its chain and its private key (HAProxy's crt)
CERTIFICATE_RE = re.compile(r"(-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=\n]+-----END CERTIFICATE-----\n)+")
# Request headers and HAProxy's rewrite reserve on top of the largest body the gateway routes.
HEADER_ROOM = 65536
MAXREWRITE = 8192
HEADER = "# Rendered by dgxspark.vllm (roles/gateway); do not edit: the next run of the role rewrites it.\n"


class GatewayError(ValueError):
    pass


def check_name(value, what: str) -> str:
    text = str(value if value is not None else "")
    if not NAME_RE.match(text):
        raise GatewayError(f"{what} is {text!r}: use 1 to 100 of the characters A-Z a-z 0-9 _ . : - (it names a "
                           "HAProxy backend or server and goes into the configuration as it is)")
    return text


def check_address(value, what: str, allow_any: bool = False) -> str:
    text = str(value if value is not None else "").strip()
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        raise GatewayError(f"{what} is {text!r}: give an IPv4 or IPv6 address (not a name)") from None
    if addr.is_unspecified and not allow_any:
        raise GatewayError(f"{what} is {text!r}: give the one address to use, not the unspecified address")
    return str(addr)


def check_port(value, what: str) -> int:
    if isinstance(value, bool):
        raise GatewayError(f"{what} is {value!r}: give a TCP port from 1 to 65535")
    if not isinstance(value, int) and not re.match(r"^[0-9]{1,5}\Z", str(value)):
        raise GatewayError(f"{what} is {value!r}: give a TCP port from 1 to 65535")
    port = int(value)
    if not 1 <= port <= 65535:
        raise GatewayError(f"{what} is {value!r}: give a TCP port from 1 to 65535")
    return port


def check_key(value, what: str) -> str:
    text = str(value if value is not None else "")
    if not KEY_RE.match(text):
        # Never echo the key itself: it is a secret.
        raise GatewayError(f"{what} is not a usable API key ({len(text)} characters): use 8 to 512 of the characters "
                           "A-Z a-z 0-9 . _ ~ + / = : @ - (no blanks, quotes, commas or backslashes)")
    return text


def check_int(value, what: str, low: int, high: int) -> int:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise GatewayError(f"{what} is {value!r}: give a whole number from {low} to {high}") from None
    if isinstance(value, bool) or not low <= number <= high:
        raise GatewayError(f"{what} is {value!r}: give a whole number from {low} to {high}")
    return number


def _addr(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def render_keys(keys) -> str:
    """The client keys file: one key a line (the gateway compares the bearer token with each, exactly)."""
    if isinstance(keys, str) or not keys:
        raise GatewayError("gateway_api_keys is empty or not a list: give the list of client API keys (from vault)")
    out = []
    for index, key in enumerate(keys):
        checked = check_key(key, f"gateway_api_keys[{index}]")
        if checked not in out:
            out.append(checked)
    return "".join(f"{key}\n" for key in out)


def _json_error(code: int, kind: str, message: str) -> str:
    # HAProxy single-quoted strings take no escapes: the JSON must hold no single quote.
    text = json.dumps({"error": {"message": message, "type": kind, "code": code}}, separators=(",", ":"))
    if "'" in text:
        raise GatewayError(f"an error message for HAProxy holds a single quote: {message!r}")
    return text


def normalise_models(models) -> dict[str, list[dict]]:
    """MODELS ({served name: [{"name": cluster, "address": door IP, "port": door port}, ...]}) checked."""
    if not isinstance(models, dict) or not models:
        raise GatewayError("the gateway has no model to route to: no cluster's head holds a release record "
                           "(/etc/dgxspark/vllm/release.json); deploy a model first (deploy.yml)")
    out: dict[str, list[dict]] = {}
    for model, servers in sorted(models.items()):
        name = check_name(model, f"served model name {model!r}")
        if not isinstance(servers, list) or not servers:
            raise GatewayError(f"model {name}: no cluster serves it")
        seen = set()
        checked = []
        for server in servers:
            cluster = check_name((server or {}).get("name"), f"model {name}: cluster name")
            if cluster in seen:
                raise GatewayError(f"model {name}: cluster {cluster} is listed twice")
            seen.add(cluster)
            checked.append({"name": cluster,
                            "address": check_address(server.get("address"), f"model {name}: cluster {cluster}'s head "
                                                                            "LAN address"),
                            "port": check_port(server.get("port"), f"model {name}: cluster {cluster}'s door port")})
        out[name] = checked
    return out


def check_paths(paths) -> list[str]:
    """The inference paths the gateway forwards (gateway_paths): /v1/ routes, lower case, no empty or dot segment."""
    if isinstance(paths, str) or not isinstance(paths, (list, tuple)) or not paths:
        raise GatewayError(f"gateway_paths is {paths!r}: give a list of the OpenAI routes to forward, for example "
                           f"{list(PATHS)}")
    out = []
    for index, path in enumerate(paths):
        if not isinstance(path, str) or not PATH_RE.match(path) or len(path) > 100:
            raise GatewayError(f"gateway_paths[{index}] is {path!r}: give a route under /v1/ of a-z 0-9 _ segments "
                               "(such as /v1/chat/completions), without a trailing slash or a query")
        if path not in out:
            out.append(path)
    return out


def check_certificate(text, what: str) -> str:
    """TEXT when it is one PEM certificate or more and nothing else (it goes into a file HAProxy or Prometheus
    trusts), with one newline at its end; GatewayError naming WHAT otherwise."""
    text = str(text or "").strip().replace("\r\n", "\n") + "\n"
    if not CERTIFICATE_RE.fullmatch(text):
        raise GatewayError(f"{what} is not a PEM certificate: run the gateway role again to write it")
    return text


def door_certificates(clusters: dict, heads: dict) -> dict[str, str]:
    """{cluster: its door's certificate}, from what its head published in HEADS (``door_certificate``); a cluster
    whose door serves plain HTTP (gateway_door_tls false) is left out."""
    out = {}
    for cluster, entry in sorted((clusters or {}).items()):
        text = ((heads or {}).get((entry or {}).get("head")) or {}).get("door_certificate") or ""
        if str(text).strip():
            out[cluster] = check_certificate(text, f"cluster {cluster}'s door certificate")
    return out


def relay_name(cluster: str) -> str:
    """The name of the gateway's relay to CLUSTER's door (its proxy, and its socket's file name with .sock)."""
    return RELAY_PREFIX + hashlib.sha256(cluster.encode()).hexdigest()[:16]


def render_gateway(models, bind: str, port, engine_keys, max_body=1048576, maxconn=512,
                   check_interval=10, check_timeout=30, timeout=600, hard_stop_after=600,
                   socket: str = SOCKET, config_dir: str = CONFIG_DIR_IN_CONTAINER, paths=PATHS,
                   max_conn_per_source=128, tls: bool = True, door_certificates: dict | None = None) -> str:
    """The gateway's haproxy.cfg: every route behind a client key, requests routed on the body's ``model``.

    A source address with more than MAX_CONN_PER_SOURCE connections open is answered 429 on the ones over it. With a
    key: GET /v1/models answers the union of MODELS; /metrics the gateway's own Prometheus metrics; /health 200 when
    every model has a server up (503 naming none otherwise). Only a POST to one of PATHS is forwarded, every other
    request 404: one whose JSON body names a served model goes to that model's backend (leastconn over its clusters,
    each checked with a real completion); an unknown model 404; a body without ``model`` 400. A body over MAX_BODY
    bytes: 413. The servers' admin states are read at every start from the state file beside SOCKET (STATE_FILE).

    ENGINE_KEYS ({cluster: its engine key}, security review L7): each cluster's key goes to its own door alone. A
    model's backend balances over its clusters' servers; each server is a local socket (beside SOCKET) of a relay of
    its own (:func:`relay_name`), which puts that cluster's key on the request and forwards it to the cluster's door.
    (HAProxy sets a header in a backend before it picks the server, so one backend cannot send each server a key of
    its own.) A client's key never goes past the gateway.

    With TLS (security review M2), clients reach it over HTTPS only (TLS 1.2 or newer), with the certificate and key
    in TLS_FILE beside the configuration; without, over plain HTTP. DOOR_CERTIFICATES ({cluster: its door's
    certificate}): the relay to such a door speaks TLS to it and trusts that certificate alone (``<relay>.crt``
    beside the configuration, :func:`door_certificate_files`); a door without one is reached over plain HTTP.
    """
    models = normalise_models(models)
    paths = check_paths(paths)
    bind = check_address(bind, "gateway_bind", allow_any=True)
    port = check_port(port, "gateway_port")
    clusters = sorted({server["name"] for servers in models.values() for server in servers})
    if not isinstance(engine_keys, dict):
        raise GatewayError("the clusters' engine keys are not a mapping of cluster to key")
    certificates = {cluster: check_certificate(text, f"cluster {cluster}'s door certificate")
                    for cluster, text in (door_certificates or {}).items() if cluster in clusters and str(text or "").strip()}
    keys = {}
    for cluster in clusters:
        keys[cluster] = check_key(engine_keys.get(cluster), f"cluster {cluster}'s engine key (VLLM_API_KEY in its "
                                                            "head's serve.env; deploy the cluster again to make one)")
    max_body = check_int(max_body, "gateway_max_body", 16384, 64 * 1048576)
    maxconn = check_int(maxconn, "gateway_maxconn", 16, 100000)
    check_interval = check_int(check_interval, "gateway_check_interval", 1, 3600)
    check_timeout = check_int(check_timeout, "gateway_check_timeout", 1, 3600)
    timeout = check_int(timeout, "gateway_timeout", 10, 86400)
    hard_stop_after = check_int(hard_stop_after, "gateway_hard_stop_after", 1, 86400)
    max_conn_per_source = check_int(max_conn_per_source, "gateway_max_conn_per_source", 1, 100000)
    for path, what in ((socket, "the runtime API socket"), (config_dir, "the configuration directory")):
        if not re.match(r"^/[A-Za-z0-9_./-]+$", path or ""):
            raise GatewayError(f"{what} is {path!r}: give an absolute path of A-Z a-z 0-9 _ . / -")

    listing = json.dumps({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "dgxspark"}
                                                     for m in models]}, separators=(",", ":"))
    lines = [
        HEADER.rstrip("\n"),
        "global",
        "    log stdout format raw local0 info",
        # The runtime API: drain/ready of a cluster's servers (rollouts), read by root on the gateway host only.
        f"    stats socket {socket} mode 600 level admin",
        f"    server-state-file {socket.rsplit('/', 1)[0]}/{STATE_FILE}",
        # A request body is buffered whole (to read its model, and to retry it): it must fit in one buffer.
        f"    tune.bufsize {max_body + HEADER_ROOM + MAXREWRITE}",
        f"    tune.maxrewrite {MAXREWRITE}",
        f"    maxconn {maxconn}",
        # A reload lets the old worker finish its requests (streams included), for at most this long.
        f"    hard-stop-after {hard_stop_after}s",
    ]
    if tls:
        lines.append("    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets")
    if certificates:
        lines.append("    ssl-default-server-options ssl-min-ver TLSv1.2")
    lines += [
        "",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    option dontlognull",
        "    load-server-state-from-file global",
        "    timeout connect 5s",
        f"    timeout client {timeout}s",
        f"    timeout server {timeout}s",
        "    timeout http-request 60s",
        "    timeout queue 60s",
        f"    timeout check {check_timeout}s",
        # A request no backend started (refused, closed before any answer, or 503) goes to another cluster.
        "    retries 2",
        "    option redispatch 1",
        "    retry-on conn-failure empty-response 503",
        "    http-error status 503 content-type application/json string '"
        + _json_error(503, "ServiceUnavailable", "no cluster serving this model is available now; retry later") + "'",
        "",
        "frontend api",
        f"    bind {_addr(bind, port)}" + (f" ssl crt {config_dir}/{TLS_FILE}" if tls else ""),
        "    option http-buffer-request",
        # Each source address's open connections (IPv4 sources are stored mapped into IPv6); one over its share of
        # maxconn is answered 429, before anything else is read.
        "    stick-table type ipv6 size 100k expire 10m store conn_cur",
        "    tcp-request connection track-sc0 src",
        "    http-request return status 429 content-type application/json string '"
        + _json_error(429, "TooManyRequests", f"this address has more than {max_conn_per_source} connections open to "
                                              "the gateway (gateway_max_conn_per_source); close some and retry")
        + f"' if {{ sc0_conn_cur gt {max_conn_per_source} }}",
        # Every route: the bearer token must be one of the client keys (compared whole, exactly).
        f"    acl key_ok req.fhdr(authorization),regsub(^Bearer\\ ,) -m str -f {config_dir}/{KEYS_FILE}",
        "    acl bearer req.fhdr(authorization) -m beg \"Bearer \"",
        "    http-request return status 401 content-type application/json string '"
        + _json_error(401, "Unauthorized", "a valid API key is required (Authorization: Bearer <key>)")
        + "' hdr WWW-Authenticate Bearer unless bearer key_ok",
        "    http-request use-service prometheus-exporter if { path /metrics }",
        f"    http-request return status 200 content-type application/json string '{listing}' "
        "if { path /v1/models } METH_GET",
    ]
    up = [f"up_{i}" for i in range(len(models))]
    for i, model in enumerate(models):
        lines.append(f"    acl up_{i} nbsrv(model_{model}) gt 0")
    lines += [
        "    http-request return status 200 content-type application/json string '{\"status\":\"ok\"}' "
        f"if {{ path /health }} {' '.join(up)}",
        "    http-request return status 503 content-type application/json string '"
        + _json_error(503, "ServiceUnavailable", "a served model has no cluster available") + "' if { path /health }",
        # Only the inference routes go further: /invocations, /tokenize, /score, /v1/load_lora_adapter and the rest
        # are answered here.
        f"    acl inference path -m str {' '.join(paths)}",
        "    http-request return status 404 content-type application/json string '"
        + _json_error(404, "NotFoundError", f"this gateway serves GET /v1/models and POST {', '.join(paths)}")
        + "' unless inference METH_POST",
        f"    acl too_big req.hdr_val(content-length) gt {max_body}",
        "    http-request return status 413 content-type application/json string '"
        + _json_error(413, "PayloadTooLarge", f"the request body is larger than the gateway routes ({max_body} bytes, "
                                              "gateway_max_body)") + "' if too_big",
        "    http-request set-var(txn.model) req.body,json_query('$.model') if METH_POST",
        "    acl has_model var(txn.model) -m found",
        f"    acl known_model var(txn.model) -m str {' '.join(models)}",
        "    http-request return status 404 content-type application/json lf-string "
        "'{\"error\":{\"message\":\"The model %[var(txn.model),json(utf8s)] is not served here; GET /v1/models "
        "lists the models\",\"type\":\"NotFoundError\",\"code\":404}}' if has_model !known_model",
        "    http-request return status 400 content-type application/json string '"
        + _json_error(400, "BadRequestError", "this gateway routes requests by the model their JSON body names; "
                                              "this request names none (GET /v1/models lists the models)")
        + "' unless has_model",
    ]
    for model in models:
        lines.append(f"    use_backend model_{model} if {{ var(txn.model) -m str {model} }}")
    check_body = json.dumps({"model": "", "prompt": "ping", "max_tokens": 1, "temperature": 0}, separators=(",", ":"))
    run_dir = socket.rsplit("/", 1)[0]
    # Named after the cluster (a digest: a socket's path has at most 107 bytes), so that a relay stays the cluster's
    # whatever clusters come or go: a server's saved state is kept by name.
    relay = {cluster: relay_name(cluster) for cluster in clusters}
    # A unix socket's path has at most 107 bytes, and HAProxy binds <path>.<pid>.tmp first, then renames it.
    if len(f"{run_dir}/{relay_name('')}.sock") + len(".4194304.tmp") > 107:
        raise GatewayError(f"the gateway's run directory {run_dir} (gateway_run_dir) is too long for the relays' unix "
                           f"sockets (a path of at most 107 bytes): use a directory of at most "
                           f"{107 - len('.4194304.tmp') - len(relay_name('')) - 6} characters")
    doors = {}
    for model, servers in models.items():
        body = check_body.replace('"model":""', f'"model":{json.dumps(model)}')
        lines += [
            "",
            f"backend model_{model}",
            "    balance leastconn",
            # The health check is a real completion through the cluster's relay (which puts its key on) and door.
            "    option httpchk",
            "    http-check send meth POST uri /v1/completions ver HTTP/1.1 hdr Host dgxspark-gateway "
            f"hdr Content-Type application/json body '{body}'",
            "    http-check expect status 200",
            # The client's key stays here; the cluster's relay puts the cluster's own on.
            "    http-request del-header Authorization",
            f"    default-server check inter {check_interval}s fastinter 2s downinter {check_interval}s fall 2 rise 2",
        ]
        for server in servers:
            lines.append(f"    server {server['name']} unix@{run_dir}/{relay[server['name']]}.sock")
            doors[server["name"]] = _addr(server["address"], server["port"])
    for cluster in clusters:
        lines += [
            "",
            f"# cluster {cluster}: its own engine key, to its door alone",
            f"listen {relay[cluster]}",
            f"    bind unix@{run_dir}/{relay[cluster]}.sock mode 600",
            "    option dontlog-normal",
            f"    http-request set-header Authorization \"Bearer {keys[cluster]}\"",
            f"    server door {doors[cluster]}"
            + (f" ssl verify required ca-file {config_dir}/{relay[cluster]}.crt" if cluster in certificates else ""),
        ]
    return "\n".join(lines) + "\n"


def door_certificate_files(door_certificates: dict | None) -> list[dict]:
    """The files beside the gateway's configuration that its relays trust: ``[{"name": "<relay>.crt", "content"}]``."""
    out = []
    for cluster, text in sorted((door_certificates or {}).items()):
        out.append({"name": f"{relay_name(cluster)}.crt",
                    "content": check_certificate(text, f"cluster {cluster}'s door certificate")})
    return out


# What a door admits besides the inference paths: the engine's model list, its health and its metrics (Prometheus on the
# monitoring hosts scrapes the engine through the door with the metrics key, which admits GET /metrics alone).
DOOR_READS = ("/v1/models", "/health", "/metrics")


def render_door(bind: str, port, allowed, engine_key: str = "", target_address: str = "127.0.0.1", target_port=8000,
                timeout=600, maxconn=512, paths=PATHS, clients: bool = False,
                config_dir: str = CONFIG_DIR_IN_CONTAINER, keyless: bool = False, metrics_key: str = "",
                tls: bool = False) -> str:
    """A head's door: an HTTP relay from BIND:PORT (the head's LAN address) to the engine on TARGET.

    It closes every connection that does not come from one of ALLOWED (the gateways' and monitoring hosts' LAN
    addresses), then asks every request for its cluster's engine key (ENGINE_KEY, compared whole: 401 without it;
    each cluster has its own, security review L7), and
    relays only a POST to one of PATHS (gateway_paths) or a GET of DOOR_READS; every other route is answered 404 by
    the door itself (security review M1, M7). vLLM's own ``--api-key`` guards ``/v1`` alone: ``/tokenize``,
    ``/invocations`` (inference), ``/scale_elastic_ep`` and the rest answer without a key, so the door is what puts a
    key on every route.

    CLIENTS (a fleet without a gateway, the door in the gateway's place on the head's API port): every source is
    admitted, the bearer token must be one of the client keys of ``<config_dir>/keys`` (:func:`render_keys`), and
    the door sends the engine's key on. ALLOWED must then be empty.

    METRICS_KEY (the monitoring hosts' key, optional): admitted for a GET of /metrics alone, in both kinds of door.

    KEYLESS (CLIENTS only: a fleet served without any key, vllm_serve_allow_no_api_key, and no client key given):
    the door asks for no key and relays the same routes.

    TLS (security review M2): the door speaks TLS alone (1.2 or newer), with the certificate and key in TLS_FILE
    beside the configuration; the gateways' relays and Prometheus trust that certificate alone."""
    bind = check_address(bind, "the head's LAN address (the door's bind)")
    port = check_port(port, "gateway_door_port")
    target_address = check_address(target_address, "the engine's address")
    target_port = check_port(target_port, "the engine's port (vllm_serve_port)")
    timeout = check_int(timeout, "gateway_timeout", 10, 86400)
    maxconn = check_int(maxconn, "gateway_maxconn", 16, 100000)
    if keyless and not clients:
        raise GatewayError("a door for gateways asks for its cluster's engine key: it cannot be keyless")
    engine_key = check_key(engine_key, "the cluster's engine key (VLLM_API_KEY in the head's serve.env, made by "
                                       "dgxspark.vllm.vllm_serve), which the door asks for")
    metrics_key = check_key(metrics_key, "the monitoring hosts' key (gateway_door_metrics_api_key)") \
        if metrics_key else ""
    paths = check_paths(paths)
    if clients and allowed:
        raise GatewayError("a door for clients admits every source: give it no gateway addresses")
    if not clients and (isinstance(allowed, str) or not allowed):
        raise GatewayError("the door admits no gateway: the group dgxspark_gateway_group names has no host with a "
                           "LAN address")
    sources = []
    for index, address in enumerate(allowed or []):
        checked = check_address(address, f"gateway LAN address [{index}]")
        if checked not in sources:
            sources.append(checked)
    if (bind, port) == (target_address, target_port):
        raise GatewayError(f"the door would listen where the engine does ({_addr(bind, port)}): set "
                           "gateway_door_port to another port")
    lines = [
        HEADER.rstrip("\n"),
        "global",
        "    log stdout format raw local0 info",
        f"    maxconn {maxconn}",
        *(["    ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets"] if tls else []),
        "",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    timeout connect 5s",
        "    timeout http-request 60s",
        f"    timeout client {timeout}s",
        f"    timeout server {timeout}s",
        "",
        "frontend door",
        f"    bind {_addr(bind, port)}" + (f" ssl crt {config_dir}/{TLS_FILE}" if tls else ""),
    ]
    # The monitoring hosts' key reads /metrics alone.
    metrics = [f"    acl metrics_key req.fhdr(authorization) -m str \"Bearer {metrics_key}\"",
               "    acl metrics path /metrics"] if metrics_key else []
    metrics_ok = " || metrics_key metrics METH_GET" if metrics_key else ""
    if clients and keyless:
        pass  # served without a key by the operator's choice (vllm_serve_allow_no_api_key): the routes are filtered
    elif clients:
        # Every route: the bearer token must be one of the client keys (compared whole, exactly), or the cluster's
        # engine key.
        lines += [
            f"    acl key_ok req.fhdr(authorization),regsub(^Bearer\\ ,) -m str -f {config_dir}/{KEYS_FILE}",
            "    acl bearer req.fhdr(authorization) -m beg \"Bearer \"",
            f"    acl engine_key req.fhdr(authorization) -m str \"Bearer {engine_key}\"",
            *metrics,
            "    http-request return status 401 content-type application/json string '"
            + _json_error(401, "Unauthorized", "a valid API key is required (Authorization: Bearer <key>)")
            + f"' hdr WWW-Authenticate Bearer unless bearer key_ok || engine_key{metrics_ok}",
        ]
    else:
        lines += [
            f"    acl gateway src {' '.join(sources)}",
            "    tcp-request connection reject unless gateway",
            # The cluster's engine key on every route (compared whole, exactly), before anything is relayed.
            f"    acl key_ok req.fhdr(authorization) -m str \"Bearer {engine_key}\"",
            *metrics,
            "    http-request return status 401 content-type application/json string '"
            + _json_error(401, "Unauthorized", "this door asks for its cluster engine key (Authorization: Bearer "
                                               "<key>)")
            + f"' hdr WWW-Authenticate Bearer unless key_ok{metrics_ok}",
        ]
    lines += [
        f"    acl inference path -m str {' '.join(paths)}",
        f"    acl reads path -m str {' '.join(DOOR_READS)}",
        "    http-request return status 404 content-type application/json string '"
        + _json_error(404, "NotFoundError", f"this door relays GET {', '.join(DOOR_READS)} and POST "
                                            f"{', '.join(paths)}")
        + "' unless inference METH_POST || reads METH_GET",
        "    default_backend engine",
        "",
        "backend engine",
    ]
    # The cluster's engine key to the engine, whatever key the door admitted (a client's never goes on).
    lines.append(f"    http-request set-header Authorization \"Bearer {engine_key}\"")
    lines.append(f"    server engine {_addr(target_address, target_port)}")
    return "\n".join(lines) + "\n"


def gateway_models(clusters: dict, heads: dict, door_port) -> tuple[dict, list[str]]:
    """The models behind the gateway, from the clusters' release records.

    CLUSTERS is dgxspark_fleet.clusters; HEADS maps a head to ``{"release": <its release.json or {}>, "lan_ip":
    <its LAN address>, "engine_env": <its serve.env's text>}``. Returns ({served name: [{name, address, port}]},
    warnings) - a cluster whose head has no record (never deployed), no LAN address or no engine key is left out with
    a warning. The keys themselves are :func:`engine_keys`'.
    """
    door_port = check_port(door_port, "gateway_door_port")
    models: dict[str, list[dict]] = {}
    warnings = []
    for cluster, entry in sorted((clusters or {}).items()):
        head = (entry or {}).get("head")
        info = (heads or {}).get(head) or {}
        release = info.get("release") or {}
        served = release.get("served_model_name")
        if not served:
            warnings.append(f"cluster {cluster}: its head {head} has no release record (not deployed): the gateway "
                            "does not route to it")
            continue
        expected = (entry or {}).get("served_model_name")
        if expected and str(served) != str(expected):
            # The name comes from the inventory: a head cannot take another cluster's traffic by claiming its name.
            warnings.append(f"cluster {cluster}: its head {head}'s release serves '{served}', but the inventory gives "
                            f"the cluster '{expected}' (vllm_serve_served_model_name, else the model's name): the "
                            "gateway does not route to it; deploy the cluster again, or set the inventory to what it "
                            "serves")
            continue
        if not info.get("lan_ip"):
            warnings.append(f"cluster {cluster}: no LAN address is known for its head {head}: the gateway does not "
                            "route to it")
            continue
        if not serve_env_key(str(info.get("engine_env") or "")):
            warnings.append(f"cluster {cluster}: its head {head} has no engine key (VLLM_API_KEY in serve.env, made "
                            "by a deploy since 0.9.0): the gateway does not route to it; deploy the cluster again")
            continue
        models.setdefault(str(served), []).append({"name": cluster, "address": str(info["lan_ip"]),
                                                   "port": door_port})
    return models, warnings


def engine_keys(clusters: dict, heads: dict) -> dict[str, str]:
    """{cluster: its engine key}, from the serving env file (``engine_env``) its head published in HEADS; a cluster
    without one is left out (gateway_models leaves it out of the models, with a warning)."""
    keys = {}
    for cluster, entry in sorted((clusters or {}).items()):
        key = serve_env_key(str(((heads or {}).get((entry or {}).get("head")) or {}).get("engine_env") or ""))
        if key:
            keys[cluster] = key
    return keys


def door_target(release: dict) -> tuple[str, int]:
    """Where a head's door forwards: the engine's bound address (127.0.0.1 for 0.0.0.0) and port."""
    endpoint = (release or {}).get("endpoint") or {}
    host = str(endpoint.get("host") or "127.0.0.1")
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return host, int(endpoint.get("port") or 8000)


# The reads a gateway makes itself on a head not in its play (roles/gateway/tasks/gateway.yml), each a registered
# loop's results by head: what the head would have published as ``gateway_head``.
UNREAD_READS = ("release", "engine_env", "door_certificate", "lan")


def _decoded(result: dict) -> str:
    """The text of a slurp result (base64 ``content``); "" for a file that was not there."""
    try:
        return base64.b64decode(str(result.get("content") or ""), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise GatewayError(f"{result.get('item')}: a file read on it is not base64 text ({exc})") from None


def heads_read(heads: list, published: dict, unread: dict | None) -> dict:
    """{head: {"release", "lan_ip", "engine_env", "door_certificate"}} for every head of HEADS: what it PUBLISHED in
    the play (``gateway_head``), else what the gateway read on it (UNREAD: {read: [registered results]}, the reads of
    UNREAD_READS). A head neither published nor read is left out (gateway_models warns about its cluster)."""
    unknown = sorted(set(unread or {}) - set(UNREAD_READS))
    if unknown:
        raise GatewayError(f"unknown reads {', '.join(unknown)}: give {', '.join(UNREAD_READS)}")
    by_head: dict = {}
    for read, registered in (unread or {}).items():
        results = (registered or {}).get("results", []) if isinstance(registered, dict) else registered or []
        for result in results:
            if isinstance(result, dict) and not result.get("skipped") and result.get("item"):
                by_head.setdefault(str(result["item"]), {})[read] = result
    out = {}
    for head in heads:
        if isinstance(published.get(head), dict):
            out[head] = dict(published[head])
        elif head in by_head:
            read = by_head[head]
            out[head] = {"release": dict((read.get("release") or {}).get("release") or {}),
                         "lan_ip": str((read.get("lan") or {}).get("lan_ip") or ""),
                         "engine_env": _decoded(read.get("engine_env") or {}),
                         "door_certificate": _decoded(read.get("door_certificate") or {})}
    return out


def gateway_plan(fleet: dict, host: str, heads: dict, *, bind: str = "", port=8000, door_port=8100, keys=None,
                 tls: bool = True, **settings) -> dict:
    """What a gateway (HOST) serves, from the fleet fact and its HEADS (:func:`heads_read`): ``address`` (BIND, else
    its LAN address in the fleet), its clients' ``url`` (_release.clients_url), ``models`` and the clusters
    ``left_out`` with why (:func:`gateway_models`' warnings: not ``warnings``, which Ansible takes for its own and
    drops when empty), its ``config`` (SETTINGS: render_gateway's), its ``client_keys`` file and the relays' certificate
    ``files``. Raises GatewayError when no cluster serves a model."""
    clusters = (fleet or {}).get("clusters") or {}
    address = str(bind or "") or next((str(g.get("lan_ip") or "") for g in (fleet or {}).get("gateways") or []
                                       if isinstance(g, dict) and g.get("host") == host), "")
    models, warnings = gateway_models(clusters, heads, door_port)
    if not models:
        raise GatewayError(
            f"{host}: no cluster of {(fleet or {}).get('group') or 'the fleet'} has a release record on its head (or "
            "none of the heads was in this play): deploy a model first (deploy.yml), and run gateway.yml on the fleet "
            "and the gateways")
    served = {server["name"] for servers in models.values() for server in servers}
    doors = {cluster: text for cluster, text in door_certificates(clusters, heads).items() if cluster in served}
    return {"address": address, "models": models, "left_out": warnings,
            "url": _release.clients_url(address, port, bool(tls)) if address else "",
            "config": render_gateway(models, address, port, engine_keys(clusters, heads), tls=bool(tls),
                                     door_certificates=doors, **settings),
            "client_keys": render_keys(keys), "files": door_certificate_files(doors)}


def door_plan(release: dict, *, bind, port, allowed, timeout=600, engine_key=None, paths=None, client_keys=None,
              allow_no_api_key=False, engine_env=None, metrics_key="", tls=False) -> dict:
    """A head's door (:func:`render_door`) for the engine of RELEASE: ``config``, the clients' ``keys`` file, whether
    it stands for the ``clients`` (CLIENT_KEYS given: a fleet without gateways, on the engine's API port) or for the
    gateways and monitoring hosts (ALLOWED, on PORT), its ``target``, the address the engine bound (``engine_bind``)
    and whether that is on the LAN (``engine_on_lan``), and the clients' ``url`` of a door for clients."""
    clients = client_keys is not None
    # Served without any key by the operator's choice: no client key given (and no engine key needed).
    keyless = clients and bool(allow_no_api_key) and not any(client_keys or [])
    keys = ""
    address, engine_port = door_target(release)
    if clients:
        # No gateway: the door stands on the head's API port in the gateway's place, for every client with a key.
        port, allowed = engine_port, []
        keys = "" if keyless else render_keys(client_keys)
    config = render_door(bind, port, allowed, engine_key=engine_key or serve_env_key(str(engine_env or "")),
                         target_address=address, target_port=engine_port, timeout=timeout,
                         paths=PATHS if paths is None else paths, clients=clients, keyless=keyless,
                         metrics_key=metrics_key or "", tls=bool(tls))
    # Exposure is judged on the address the engine bound, not on where the door reaches it: an engine on 0.0.0.0
    # (reached by the door on 127.0.0.1) listens on the LAN too.
    bound = str(((release or {}).get("endpoint") or {}).get("host") or "127.0.0.1")
    return {"config": config, "keys": keys, "clients": clients, "target": f"{address}:{engine_port}",
            "engine_bind": f"{bound}:{engine_port}", "engine_on_lan": bound not in ("127.0.0.1", "::1"),
            # The clients' URL of a door for clients, as the release records it.
            "url": _release.clients_url(bind, engine_port, bool(tls)) if clients else ""}
