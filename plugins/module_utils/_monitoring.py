# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's Prometheus configuration and rules (roles/monitoring).

Pure functions over plain data, so that the filter the role calls and the unit tests share one implementation.
Every value is validated before it reaches a line of a configuration (names, addresses, ports, durations,
thresholds, keys); a value that does not pass raises MonitoringError with a sentence naming the variable and the fix.
Scalars are written as JSON strings (a JSON string is a YAML double-quoted scalar), so no value can open a new key.

Scrape jobs (their names are what the rules and status.yml rely on):
- ``engine``: each cluster's engine ``/metrics`` (its head), with the metrics key the heads' doors admit for
  ``GET /metrics`` alone (never an engine key: each cluster has its own) as a bearer credential read from a file
  (``engine.key``);
- ``gateway``: each gateway's own ``/metrics``, behind a client key (``gateway.key``);
- ``node``: the node exporter of every node of the fleet.
Every target carries the labels ``cluster``, ``node`` (the inventory name) and ``role`` (head, worker or gateway).
Samples of the node job whose ``device`` is one of the node's fabric interfaces or RoCE HCAs get ``fabric="true"``.
"""

from __future__ import annotations

import ipaddress
import json
import re

from ansible_collections.dgxspark.vllm.plugins.module_utils._gateway import (
    GatewayError, check_address, check_certificate, check_key, check_name, check_port)

CONFIG_DIR_IN_CONTAINER = "/etc/prometheus"
RULES_FILE = "dgxspark-rules.yml"
ENGINE_KEY_FILE = "engine.key"
GATEWAY_KEY_FILE = "gateway.key"
GATEWAY_CA_FILE = "gateway-ca.pem"  # the gateways' certificates (security review M2), which Prometheus trusts alone
DOOR_CA_FILE = "door-ca.pem"  # the heads' doors' certificates, likewise
HEADER = "# Rendered by dgxspark.vllm (roles/monitoring); do not edit: the next run of the role rewrites it.\n"
# A Prometheus duration of one unit (what the role's variables take): 30s, 2m, 1h.
DURATION_RE = re.compile(r"^([0-9]{1,6})(ms|s|m|h|d)$")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Netdev and HCA names (the kernel's IFNAMSIZ and sysfs names): they go into a regular expression.
DEVICE_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")

# The settings the role passes, with their defaults (the role's defaults/main.yml says the same).
DEFAULTS = {
    "scrape_interval": "15s",
    "evaluation_interval": "15s",
    "stall_window": "2m",
    "stall_for": "2m",
    "kv_cache_threshold": 0.95,
    "kv_cache_for": "5m",
    "memory_available_ratio": 0.05,
    "memory_for": "5m",
    "fabric_window": "5m",
    "fabric_for": "1m",
    "target_down_for": "2m",
}


class MonitoringError(GatewayError):
    """A value that cannot go into Prometheus's configuration; the message names the variable and the fix."""


def check_duration(value, what: str, low: float = 1, high: float = 7 * 86400) -> str:
    text = str(value if value is not None else "").strip()
    match = DURATION_RE.match(text)
    if not match or not low <= int(match.group(1)) * _SECONDS[match.group(2)] <= high:
        raise MonitoringError(f"{what} is {value!r}: give a Prometheus duration of one unit (ms, s, m, h, d) from "
                              f"{low:g}s to {high:g}s, such as 30s or 5m")
    return text


def seconds(duration: str) -> float:
    match = DURATION_RE.match(duration)
    return int(match.group(1)) * _SECONDS[match.group(2)]


def check_ratio(value, what: str) -> float:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or not 0 < number < 1:
        raise MonitoringError(f"{what} is {value!r}: give a fraction between 0 and 1 (exclusive), such as 0.95")
    return number


def check_device(value, what: str) -> str:
    text = str(value if value is not None else "")
    if not DEVICE_RE.match(text):
        raise MonitoringError(f"{what} is {text!r}: give a network interface or RDMA device name (1 to 64 of "
                              "A-Z a-z 0-9 _ . : -)")
    return text


def settings(given: dict | None) -> dict:
    """The rule and scrape settings, every one checked (a missing one takes its default)."""
    given = {**DEFAULTS, **{k: v for k, v in (given or {}).items() if v not in (None, "")}}
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise MonitoringError(f"unknown monitoring settings: {', '.join(unknown)}")
    out = {}
    for key in ("scrape_interval", "evaluation_interval"):
        out[key] = check_duration(given[key], f"monitoring_{key}", 1, 3600)
    for key in ("stall_window", "fabric_window"):
        out[key] = check_duration(given[key], f"monitoring_{key}", 1, 86400)
    for key in ("stall_for", "kv_cache_for", "memory_for", "fabric_for", "target_down_for"):
        out[key] = check_duration(given[key], f"monitoring_{key}", 0.001, 7 * 86400)
    out["kv_cache_threshold"] = check_ratio(given["kv_cache_threshold"], "monitoring_kv_cache_threshold")
    out["memory_available_ratio"] = check_ratio(given["memory_available_ratio"], "monitoring_memory_available_ratio")
    # increase() needs two samples in its window.
    for key in ("stall_window", "fabric_window"):
        if seconds(out[key]) < 2 * seconds(out["scrape_interval"]):
            raise MonitoringError(f"monitoring_{key} is {out[key]}: it must hold at least two scrapes (2 x "
                                  f"monitoring_scrape_interval = 2 x {out['scrape_interval']})")
    return out


# ---------------------------------------------------------------------------------------------------- YAML writing
def _scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    return json.dumps(str(value), ensure_ascii=True)


def _yaml(value, indent: int = 0) -> list[str]:
    """Block-style YAML of dicts, lists and scalars; every string a JSON (double-quoted) scalar."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:")
                lines += _yaml(item, indent + 2)
            else:
                lines.append(f"{pad}{key}: {_scalar(item) if not isinstance(item, (dict, list)) else '{}' if isinstance(item, dict) else '[]'}")
    elif isinstance(value, list):
        for item in value:
            sub = _yaml(item, indent + 2) if isinstance(item, (dict, list)) else [f"{pad}  {_scalar(item)}"]
            lines.append(f"{pad}- {sub[0].lstrip()}")
            lines += sub[1:]
    else:
        lines.append(f"{pad}{_scalar(value)}")
    return lines


def to_yaml(value) -> str:
    return HEADER + "\n".join(_yaml(value)) + "\n"


# ---------------------------------------------------------------------------------------------------- rules
def rule_groups(given: dict | None = None) -> dict:
    """The recording and alerting rules, as the rules file's data."""
    s = settings(given)
    stall, fabric = s["stall_window"], s["fabric_window"]
    on_fabric = '{fabric="true"}'
    records = [
        {"record": "dgxspark:cluster_generation_tokens:rate1m",
         "expr": "sum by (cluster) (rate(vllm:generation_tokens_total[1m]))"},
        {"record": "dgxspark:cluster_requests:sum",
         "expr": "sum by (cluster) (vllm:num_requests_running) + sum by (cluster) (vllm:num_requests_waiting)"},
        # Progress is any token the engine processed: a long prefill (prompt tokens) is progress too.
        {"record": "dgxspark:cluster_tokens:increase_stall_window",
         "expr": f"sum by (cluster) (increase(vllm:generation_tokens_total[{stall}]))"
                 f" + sum by (cluster) (increase(vllm:prompt_tokens_total[{stall}]))"},
        # 0 to 1. (vLLM before 0.10, older than any image the collection serves, named it gpu_cache_usage_perc.)
        {"record": "dgxspark:cluster_kv_cache_usage:max",
         "expr": "max by (cluster) (vllm:kv_cache_usage_perc)"},
        {"record": "dgxspark:node_memory_available:ratio",
         "expr": "node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes"},
    ]
    alerts = [
        {"alert": "DgxsparkEngineStalled",
         "expr": "dgxspark:cluster_requests:sum > 0 and on (cluster) dgxspark:cluster_tokens:increase_stall_window == 0",
         "for": s["stall_for"],
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "{{ $labels.cluster }}: requests wait but the engine processed no token for " + stall,
             "description": "{{ $labels.cluster }} holds {{ $value }} request(s) running or waiting and its engine "
                            "processed no prompt or generated token in " + stall + " while /health may still say "
                            "200 (a silent stall). The watchdog restarts such a cluster; see status.yml."}},
        {"alert": "DgxsparkKvCacheNearlyFull",
         "expr": f"dgxspark:cluster_kv_cache_usage:max > {s['kv_cache_threshold']:g}",
         "for": s["kv_cache_for"],
         "labels": {"severity": "warning"},
         "annotations": {
             "summary": "{{ $labels.cluster }}: KV cache {{ $value | humanizePercentage }} full",
             "description": "The engine of {{ $labels.cluster }} has used more than "
                            f"{s['kv_cache_threshold']:.0%} of its KV cache for {s['kv_cache_for']}: requests are "
                            "queued or preempted. Lower the concurrency, or raise max_model_len headroom."}},
        {"alert": "DgxsparkMemoryAvailableLow",
         "expr": f"dgxspark:node_memory_available:ratio < {s['memory_available_ratio']:g}",
         "for": s["memory_for"],
         "labels": {"severity": "warning"},
         "annotations": {
             "summary": "{{ $labels.node }}: {{ $value | humanizePercentage }} of its unified memory available",
             "description": "{{ $labels.node }} ({{ $labels.cluster }}) has had less than "
                            f"{s['memory_available_ratio']:.0%} of its memory available for {s['memory_for']}. On a "
                            "Spark the CPU and the GPU share it: the engine's next allocation can fail."}},
        {"alert": "DgxsparkFabricLinkDown",
         # "or on (...)": a device both without carrier and down is one alert, not two with the same labels.
         "expr": f"node_network_carrier{on_fabric} == 0"
                 f" or on (cluster, node, device) node_network_up{on_fabric} == 0"
                 f" or on (cluster, node, device) node_infiniband_state_id{on_fabric} != 4",
         "for": s["fabric_for"],
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "{{ $labels.node }}: fabric link {{ $labels.device }} is down",
             "description": "The fabric interface or RoCE port {{ $labels.device }} of {{ $labels.node }} "
                            "({{ $labels.cluster }}) has no carrier, is not up, or its port is not ACTIVE: the "
                            "cluster's collectives cannot run over it."}},
        {"alert": "DgxsparkFabricErrors",
         "expr": " or ".join(f"increase({metric}{on_fabric}[{fabric}]) > 0" for metric in (
             "node_network_receive_errs_total", "node_network_transmit_errs_total",
             "node_infiniband_port_receive_errors_total", "node_infiniband_link_downed_total",
             "node_infiniband_symbol_error_total")),
         "for": s["fabric_for"],
         "labels": {"severity": "warning"},
         "annotations": {
             "summary": "{{ $labels.node }}: errors on fabric device {{ $labels.device }}",
             "description": "{{ $labels.device }} of {{ $labels.node }} ({{ $labels.cluster }}) counted errors "
                            f"(or link-down events) in the last {fabric}: check the cable and both ports."}},
        {"alert": "DgxsparkClusterMissingNode",
         "expr": 'up{job=~"node|engine"} == 0',
         "for": s["target_down_for"],
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "{{ $labels.cluster }}: {{ $labels.node }} ({{ $labels.job }}) does not answer",
             "description": "Prometheus has not scraped the {{ $labels.job }} target of {{ $labels.node }} "
                            "({{ $labels.role }} of {{ $labels.cluster }}) for " + s["target_down_for"] + ": the "
                            "node is down or unreachable, or its engine (job engine) is gone."}},
        # The watchdog's own verdict (dgxspark-watchdog.prom, read by the head's node exporter): a cluster given up
        # at its restart cap stays down, through a reboot, until an operator deploys it again (review M5).
        {"alert": "DgxsparkClusterFailed",
         "expr": "dgxspark_watchdog_failed == 1",
         "labels": {"severity": "critical"},
         "annotations": {
             "summary": "{{ $labels.cluster }}: the watchdog gave the cluster up",
             "description": "The watchdog of {{ $labels.cluster }} (on {{ $labels.node }}) spent its restarts and "
                            "stopped the cluster's engines: it stays down, through a reboot, until it is deployed "
                            "again. Its events: dgxspark.vllm.status."}},
        {"alert": "DgxsparkGatewayDown",
         "expr": 'up{job="gateway"} == 0',
         "for": s["target_down_for"],
         "labels": {"severity": "critical"},
         "annotations": {"summary": "gateway {{ $labels.node }} does not answer its /metrics"}},
    ]
    return {"groups": [{"name": "dgxspark", "interval": s["evaluation_interval"], "rules": records + alerts}]}


def render_rules(given: dict | None = None) -> str:
    return to_yaml(rule_groups(given))


# ---------------------------------------------------------------------------------------------------- targets
def _hostport(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _lan(host: str, nodes: dict, hints: dict) -> str:
    """HOST's LAN address: what its node play found, else its ansible_host when that is an IP ('' when neither)."""
    found = (nodes.get(host) or {}).get("lan_ip") or ""
    if found:
        return check_address(found, f"{host}'s LAN address")
    try:
        return str(ipaddress.ip_address(str(hints.get(host) or "").strip()))
    except ValueError:
        return ""


def engine_target(release: dict, head: str, lan_ip: str, monitor: str, gateways: bool, door_port) -> tuple[str, str]:
    """Where Prometheus on MONITOR scrapes the engine of a head serving RELEASE: (host:port, '') or ('', why not).
    :func:`through_door` tells whether that is the head's door."""
    endpoint = (release or {}).get("endpoint") or {}
    host = str(endpoint.get("host") or "")
    port = check_port(endpoint.get("port") or 8000, f"{head}'s engine port (release.json)")
    if not host:
        return "", f"{head} serves no release (no release.json): its engine is not scraped"
    address = ipaddress.ip_address(check_address(host, f"{head}'s engine address (release.json)", allow_any=True))
    if address.is_loopback or address.is_unspecified:
        if head == monitor:
            return _hostport("::1" if address.version == 6 else "127.0.0.1", port), ""
        if address.is_unspecified and lan_ip:
            return _hostport(lan_ip, port), ""
        if gateways and lan_ip:
            # The head's door (roles/gateway) admits the monitoring hosts beside the gateways.
            return _hostport(lan_ip, check_port(door_port, "gateway_door_port")), ""
        if lan_ip and address.is_loopback:
            # No gateway: the head's door for clients, on the engine's port of its LAN address (a key on every route).
            return _hostport(lan_ip, port), ""
        return "", (f"{head}'s engine listens on {host} only and its LAN address is not known: run Prometheus on "
                    "that head")
    return _hostport(str(address), port), ""


def through_door(release: dict, address: str, lan_ip: str) -> bool:
    """Whether the engine target ADDRESS (engine_target's) is the head's door: on its LAN address while the engine
    itself listens on the loopback."""
    host = str(((release or {}).get("endpoint") or {}).get("host") or "")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
    return bool(lan_ip) and loopback and address.rsplit(":", 1)[0].strip("[]") == lan_ip


def targets(clusters: dict, *, nodes: dict, hints: dict, releases: dict, gateways: list, monitor: str,
            node_port=9100, door_port=8100, gateway_port=8000, gateway_bind: str = "") -> dict:
    """The scrape targets: ``{"engine": [...], "node": [...], "gateway": [...], "fabric": [[node, device]],
    "warnings": [...]}``; each target ``{"address", "labels": {cluster, node, role}}``.

    CLUSTERS is dgxspark_fleet.clusters; NODES maps a host to what its node play published (``lan_ip``,
    ``fabric_devices``); HINTS a host to its ansible_host; RELEASES a head to its release record; GATEWAYS is
    dgxspark_fleet.gateways; MONITOR the Prometheus host's inventory name.
    """
    node_port = check_port(node_port, "monitoring_node_exporter_port")
    gateway_port = check_port(gateway_port, "gateway_port")
    out: dict = {"engine": [], "node": [], "gateway": [], "fabric": [], "warnings": []}
    for cluster, entry in sorted((clusters or {}).items()):
        cluster = check_name(cluster, "a cluster's name")
        head = check_name((entry or {}).get("head"), f"cluster {cluster}'s head")
        for host in (entry or {}).get("members") or (entry or {}).get("hosts") or []:
            host = check_name(host, f"a host of cluster {cluster}")
            labels = {"cluster": cluster, "node": host, "role": "head" if host == head else "worker"}
            lan = _lan(host, nodes or {}, hints or {})
            if not lan:
                out["warnings"].append(f"{host} ({cluster}): no LAN address known (not in this run, and its "
                                       "ansible_host is not an IP address): its node exporter is not scraped")
            else:
                out["node"].append({"address": _hostport(lan, node_port), "labels": labels})
            for device in ((nodes or {}).get(host) or {}).get("fabric_devices") or []:
                out["fabric"].append([host, check_device(device, f"{host}'s fabric device")])
            if host == head:
                address, why = engine_target((releases or {}).get(head) or {}, head, lan, monitor, bool(gateways),
                                             door_port)
                if address:
                    out["engine"].append({"address": address, "labels": labels,
                                          "door": through_door((releases or {}).get(head) or {}, address, lan)})
                else:
                    out["warnings"].append(f"{cluster}: {why}")
    for gateway in gateways or []:
        host = check_name(gateway.get("host"), "a gateway's name")
        address = check_address(gateway_bind or gateway.get("lan_ip"), f"gateway {host}'s address", allow_any=True)
        if ipaddress.ip_address(address).is_unspecified:
            address = "127.0.0.1" if host == monitor else check_address(gateway.get("lan_ip"), f"gateway {host}'s LAN address")
        out["gateway"].append({"address": _hostport(address, gateway_port),
                               "labels": {"cluster": "", "node": host, "role": "gateway"}})
    return out


def listen(address, port) -> str:
    """ADDRESS:PORT for a --web.listen-address (brackets around an IPv6 address), both checked."""
    return _hostport(check_address(address, "the listening address (monitoring_prometheus_listen or "
                                            "monitoring_node_exporter_bind)", allow_any=True),
                     check_port(port, "the listening port"))


# The options of the modules that ask Prometheus from its own host (plugins/doc_fragments/prometheus.py).
ARGUMENT_SPEC = {"listen": {"type": "str", "default": "127.0.0.1"}, "port": {"type": "int", "default": 9090}}


def api_url(address="127.0.0.1", port=9090) -> str:
    """The URL of Prometheus's API as its own host reaches it: its listening address ADDRESS, the loopback when it
    listens on every address (or none is given), both checked as :func:`listen` checks them. The one producer for
    the role (``monitoring_result.api``), prometheus_ready and monitoring_info."""
    address = str(address or "").strip()
    return f"http://{listen('127.0.0.1' if address in ('', '0.0.0.0', '::') else address, port)}"


# Prometheus's own gauges on its /metrics (it does not scrape itself, so its query API has no such series).
LOADED_AT = "prometheus_config_last_reload_success_timestamp_seconds"
LOADED_OK = "prometheus_config_last_reload_successful"


def loaded(metrics: str) -> tuple[bool, float]:
    """(whether the last load of its configuration succeeded, when its last successful load was: -1.0 when it does
    not say) from Prometheus's /metrics text."""
    values = {}
    for line in str(metrics or "").splitlines():
        name, value = (line.split(" ", 1) + [""])[:2]
        if name in (LOADED_AT, LOADED_OK) and name not in values:
            try:
                values[name] = float(value.split()[0])
            except (IndexError, ValueError):
                continue
    return values.get(LOADED_OK) == 1.0, values.get(LOADED_AT, -1.0)


def wait_loaded(url: str, *, after: float, get, timeout: float, clock, sleep, container: str = "") -> float:
    """Ask URL's /metrics (GET(url, seconds) -> (code, text)) once a second until Prometheus answers with its last
    load successful and made after AFTER (a time it gave before a reload; -1 for any); returns that time. Raises
    MonitoringError naming CONTAINER, what it last saw and the fix when TIMEOUT seconds pass first."""
    deadline = clock() + timeout
    seen = "no answer"
    while True:
        code, text = get(f"{url}/metrics", 10.0)
        if code == 200:
            ok, at = loaded(text)
            if ok and at > after:
                return at
            seen = (f"its last load of the configuration failed ({LOADED_OK} 0)" if not ok
                    else f"it has not loaded the configuration again since {after:.3f} (its last load: {at:.3f})")
        elif code != -1:
            seen = f"HTTP {code}"
        if clock() >= deadline:
            raise MonitoringError(
                f"Prometheus ({container or 'its container'}) at {url}: {seen} after {timeout:g} s; the reason is in "
                f"`docker logs {container or '<its container>'}` on this host (a configuration promtool accepted "
                "that Prometheus refused, or a port monitoring_prometheus_port another process holds)")
        sleep(1.0)


def _static(entries: list) -> list:
    return [{"targets": [e["address"]], "labels": e["labels"]} for e in entries]


def _regex_literal(text: str) -> str:
    return re.sub(r"([.:\\+*?()|\[\]{}^$])", r"\\\1", text)


def _certificates(certificates, kind: str, what: str) -> dict:
    """{host: its certificate (PEM)}, each checked to be one PEM certificate or more (nothing else); empty ones left
    out (a gateway or door that serves plain HTTP)."""
    out = {}
    for host, text in sorted((certificates or {}).items()):
        if not str(text or "").strip():
            continue
        out[check_name(host, f"a {kind}'s name")] = check_certificate(text, f"{kind} {host}: {what} (tls.crt)")
    return out


def render_config(found: dict, given: dict | None = None, engine_key: str = "", gateway_key: str = "",
                  config_dir: str = CONFIG_DIR_IN_CONTAINER, gateway_certificates: dict | None = None,
                  door_certificates: dict | None = None) -> dict:
    """prometheus.yml and the files beside it: ``{"files": [{"name", "content"}], "jobs": {job: targets}}``.

    FOUND is targets()' result. The doors' metrics key goes into ``engine.key`` (read by Prometheus as a bearer
    credential file), a gateway client key into ``gateway.key``; neither is in prometheus.yml.

    GATEWAY_CERTIFICATES ({gateway host: its certificate}) are the gateways that serve TLS (security review M2):
    Prometheus scrapes them over HTTPS, trusting those certificates alone (``gateway-ca.pem``); a gateway without
    one (gateway_tls false) over plain HTTP. DOOR_CERTIFICATES ({head: its door's certificate}) likewise for the
    engines scraped through their heads' doors (``door-ca.pem``).
    """
    s = settings(given)
    if not re.match(r"^/[A-Za-z0-9_./-]+$", config_dir or ""):
        raise MonitoringError(f"the configuration directory is {config_dir!r}: give an absolute path of A-Z a-z 0-9 _ . / -")
    config: dict = {
        "global": {"scrape_interval": s["scrape_interval"], "evaluation_interval": s["evaluation_interval"],
                   "scrape_timeout": s["scrape_interval"] if seconds(s["scrape_interval"]) < 10 else "10s"},
        "rule_files": [f"{config_dir}/{RULES_FILE}"],
        "scrape_configs": [],
    }
    files = [{"name": RULES_FILE, "content": render_rules(s)}]
    if found.get("engine"):
        files.append({"name": ENGINE_KEY_FILE,
                      "content": check_key(engine_key, "the metrics key (monitoring_engine_api_key)") + "\n"})
        doors = _certificates(door_certificates, "head", "its door's certificate")
        job = {"job_name": "engine", "metrics_path": "/metrics",
               "authorization": {"type": "Bearer", "credentials_file": f"{config_dir}/{ENGINE_KEY_FILE}"},
               "static_configs": [{"targets": [e["address"]],
                                   "labels": {**e["labels"], "__scheme__": "https" if e.get("door") and e["labels"]["node"]
                                              in doors else "http"}} for e in found["engine"]]}
        used = {e["labels"]["node"]: doors[e["labels"]["node"]] for e in found["engine"]
                if e.get("door") and e["labels"]["node"] in doors}
        if used:
            files.append({"name": DOOR_CA_FILE, "content": "".join(used[h] for h in sorted(used))})
            job["tls_config"] = {"ca_file": f"{config_dir}/{DOOR_CA_FILE}"}
        config["scrape_configs"].append(job)
    if found.get("gateway"):
        files.append({"name": GATEWAY_KEY_FILE,
                      "content": check_key(gateway_key, "the gateway client key (monitoring_gateway_api_key)") + "\n"})
        certificates = _certificates(gateway_certificates, "gateway", "its certificate")
        job = {"job_name": "gateway", "metrics_path": "/metrics",
               "authorization": {"type": "Bearer", "credentials_file": f"{config_dir}/{GATEWAY_KEY_FILE}"},
               "static_configs": [{"targets": [e["address"]],
                                   "labels": {**e["labels"],
                                              "__scheme__": "https" if e["labels"]["node"] in certificates else "http"}}
                                  for e in found["gateway"]]}
        if certificates:
            files.append({"name": GATEWAY_CA_FILE, "content": "".join(certificates.values())})
            job["tls_config"] = {"ca_file": f"{config_dir}/{GATEWAY_CA_FILE}"}
        config["scrape_configs"].append(job)
    if found.get("node"):
        job: dict = {"job_name": "node", "static_configs": _static(found["node"])}
        pairs = sorted({f"{_regex_literal(host)};{_regex_literal(device)}" for host, device in found.get("fabric") or []})
        if pairs:
            job["metric_relabel_configs"] = [{"source_labels": ["node", "device"], "separator": ";",
                                              "regex": f"({'|'.join(pairs)})", "target_label": "fabric",
                                              "replacement": "true"}]
        config["scrape_configs"].append(job)
    files.insert(0, {"name": "prometheus.yml", "content": to_yaml(config)})
    return {"files": files, "jobs": {k: len(found.get(k) or []) for k in ("engine", "gateway", "node")}}
