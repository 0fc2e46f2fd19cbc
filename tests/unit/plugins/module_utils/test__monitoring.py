"""Prometheus's configuration and rules for the fleet: targets from the fleet fact and the release records, labelled
cluster/node/role; every value validated before it reaches a line (injection attempts refused); keys only in their
files. The rules themselves are tested with promtool (tests/lab/test_lab_monitoring_rules.py)."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _monitoring as mon
from ansible_collections.dgxspark.vllm.plugins.module_utils import _status

KEY = "engine-key-0123456789"
CLUSTERS = {"pair1": {"head": "spark-1", "members": ["spark-1", "spark-2"]},
            "solo": {"head": "spark-a1.example.internal", "members": ["spark-a1.example.internal"]}}
NODES = {"spark-1": {"lan_ip": "10.0.0.11", "fabric_devices": ["enp1s0f1np1", "rocep1s0f1"]},
         "spark-2": {"lan_ip": "10.0.0.12", "fabric_devices": ["enp1s0f1np1"]}}
HINTS = {"spark-a1.example.internal": "10.0.0.21"}
RELEASES = {"spark-1": {"endpoint": {"host": "10.0.0.11", "port": 8000}},
            "spark-a1.example.internal": {"endpoint": {"host": "127.0.0.1", "port": 8000}}}


def found(**kw):
    args = {"nodes": NODES, "hints": HINTS, "releases": RELEASES, "gateways": [], "monitor": "spark-1"}
    args.update(kw)
    return mon.targets(kw.pop("clusters", CLUSTERS), **{k: v for k, v in args.items() if k != "clusters"})


def test_targets_are_labelled_and_an_engine_on_the_loopback_is_scraped_through_the_door_for_clients():
    """Without a gateway, every head's door stands on the engine's port of its LAN address (security review M1)."""
    out = found()
    assert [(t["address"], t["labels"]) for t in out["node"]] == [
        ("10.0.0.11:9100", {"cluster": "pair1", "node": "spark-1", "role": "head"}),
        ("10.0.0.12:9100", {"cluster": "pair1", "node": "spark-2", "role": "worker"}),
        ("10.0.0.21:9100", {"cluster": "solo", "node": "spark-a1.example.internal", "role": "head"})]
    assert [t["address"] for t in out["engine"]] == ["10.0.0.11:8000", "10.0.0.21:8000"]
    assert not out["warnings"]


def test_an_engine_on_the_loopback_of_a_head_without_a_known_lan_address_is_left_out_with_a_warning():
    out = found(hints={"spark-a1.example.internal": "spark-a1.lan"})
    assert [t["address"] for t in out["engine"]] == ["10.0.0.11:8000"]
    assert ("solo: spark-a1.example.internal's engine listens on 127.0.0.1 only and its LAN address is not known: run "
            "Prometheus on that head") in out["warnings"]


def test_an_engine_behind_the_gateways_is_scraped_through_its_door_or_on_the_loopback_of_its_own_head():
    gateways = [{"host": "gw1", "lan_ip": "10.0.0.5"}]
    out = found(gateways=gateways)
    assert [t["address"] for t in out["engine"]] == ["10.0.0.11:8000", "10.0.0.21:8100"]
    assert out["gateway"] == [{"address": "10.0.0.5:8000", "labels": {"cluster": "", "node": "gw1", "role": "gateway"}}]
    local = found(monitor="spark-a1.example.internal")
    assert [t["address"] for t in local["engine"]] == ["10.0.0.11:8000", "127.0.0.1:8000"]
    unspecified = found(releases={"spark-1": {"endpoint": {"host": "0.0.0.0", "port": 8001}}}, monitor="gw1")
    assert [t["address"] for t in unspecified["engine"]] == ["10.0.0.11:8001"]


def test_a_node_without_a_known_lan_address_is_named():
    out = found(nodes={}, hints={"spark-1": "10.0.0.11", "spark-2": "spark-2.lan"})
    assert [t["labels"]["node"] for t in out["node"]] == ["spark-1"]
    assert any(w.startswith("spark-2 (pair1): no LAN address known") for w in out["warnings"])


def test_the_configuration_puts_keys_in_files_and_labels_the_fabric_devices():
    rendered = mon.render_config(found(gateways=[{"host": "gw1", "lan_ip": "10.0.0.5"}]), {"scrape_interval": "5s"},
                                 engine_key=KEY, gateway_key="client-key-0123")
    files = {f["name"]: f["content"] for f in rendered["files"]}
    assert sorted(files) == ["dgxspark-rules.yml", "engine.key", "gateway.key", "prometheus.yml"]
    config = files["prometheus.yml"]
    assert KEY not in config and "client-key-0123" not in config
    assert files["engine.key"] == KEY + "\n" and files["gateway.key"] == "client-key-0123\n"
    assert 'credentials_file: "/etc/prometheus/engine.key"' in config
    assert 'scrape_interval: "5s"' in config and 'scrape_timeout: "5s"' in config
    assert r'regex: "(spark-1;enp1s0f1np1|spark-1;rocep1s0f1|spark-2;enp1s0f1np1)"' in config
    assert rendered["jobs"] == {"engine": 2, "gateway": 1, "node": 3}


def test_no_engine_means_no_engine_job_and_no_key_file():
    rendered = mon.render_config(found(releases={}), {}, engine_key="")
    assert [f["name"] for f in rendered["files"]] == ["prometheus.yml", "dgxspark-rules.yml"]
    assert '"engine"' not in rendered["files"][0]["content"]


@pytest.mark.parametrize("clusters, nodes, message", [
    ({'pair1"\n  evil: "x': {"head": "s1", "members": ["s1"]}}, {}, "a cluster's name is"),
    ({"pair1": {"head": "s1", "members": ["s1\nscrape_configs:"]}}, {}, "a host of cluster pair1 is"),
    ({"pair1": {"head": "s1", "members": ["s1"]}}, {"s1": {"lan_ip": "10.0.0.1\n- evil"}}, "s1's LAN address is"),
    ({"pair1": {"head": "s1", "members": ["s1"]}}, {"s1": {"lan_ip": "10.0.0.1", "fabric_devices": ["eth0|.*"]}},
     "s1's fabric device is"),
])
def test_injection_attempts_in_names_addresses_and_devices_are_refused(clusters, nodes, message):
    with pytest.raises(mon.GatewayError) as refused:
        mon.targets(clusters, nodes=nodes, hints={}, releases={}, gateways=[], monitor="s1")
    assert message in str(refused.value)


def test_a_release_address_that_is_not_an_ip_is_refused():
    with pytest.raises(mon.GatewayError) as refused:
        found(releases={"spark-1": {"endpoint": {"host": "10.0.0.11:80/x", "port": 8000}}})
    assert "spark-1's engine address (release.json) is '10.0.0.11:80/x'" in str(refused.value)


@pytest.mark.parametrize("given, message", [
    ({"stall_for": "2m\nevil: x"}, "monitoring_stall_for is"),
    ({"stall_for": "5x"}, "monitoring_stall_for is"),
    ({"scrape_interval": "0s"}, "monitoring_scrape_interval is"),
    ({"kv_cache_threshold": "1.5"}, "monitoring_kv_cache_threshold is"),
    ({"kv_cache_threshold": "0.9) or vector(1"}, "monitoring_kv_cache_threshold is"),
    ({"memory_available_ratio": True}, "monitoring_memory_available_ratio is"),
    ({"stall_window": "10s", "scrape_interval": "15s"}, "it must hold at least two scrapes"),
    ({"surprise": "1m"}, "unknown monitoring settings: surprise"),
])
def test_settings_are_checked(given, message):
    with pytest.raises(mon.MonitoringError) as refused:
        mon.settings(given)
    assert message in str(refused.value)


def test_keys_are_checked_and_never_echoed():
    with pytest.raises(mon.GatewayError) as refused:
        mon.render_config(found(), {}, engine_key="bad key\nwith newline")
    assert "not a usable API key" in str(refused.value) and "newline" not in str(refused.value)


def test_rules_carry_the_settings():
    rules = mon.render_rules({"stall_window": "20s", "stall_for": "30s", "scrape_interval": "5s",
                              "kv_cache_threshold": 0.9})
    assert 'increase(vllm:generation_tokens_total[20s])' in rules
    assert 'alert: "DgxsparkEngineStalled"' in rules and 'for: "30s"' in rules
    assert 'dgxspark:cluster_kv_cache_usage:max > 0.9"' in rules


def test_listen_addresses():
    assert mon.listen("127.0.0.1", 9090) == "127.0.0.1:9090"
    assert mon.listen("fd00::5", "9100") == "[fd00::5]:9100"
    for address, port in (("localhost", 9090), ("127.0.0.1 --web.enable-admin-api", 9090), ("127.0.0.1", 70000)):
        with pytest.raises(mon.GatewayError):
            mon.listen(address, port)


def test_prometheus_lines_show_alerts_per_cluster_and_targets_down():
    alerts = {"data": {"alerts": [
        {"labels": {"alertname": "DgxsparkEngineStalled", "cluster": "pair1", "severity": "critical"},
         "state": "firing", "activeAt": "2026-01-02T03:04:05.678Z"},
        {"labels": {"alertname": "DgxsparkFabricLinkDown", "cluster": "pair1", "node": "spark-2",
                    "device": "enp1s0f1np1"}, "state": "pending"}]}}
    targets = {"data": {"activeTargets": [
        {"labels": {"job": "node", "node": "spark-1", "cluster": "pair1"}, "health": "up"},
        {"labels": {"job": "node", "node": "spark-2", "cluster": "pair1"}, "health": "down",
         "scrapeUrl": "http://10.0.0.12:9100/metrics", "lastError": "connection refused"}]}}
    assert _status.prometheus_lines("mon1", alerts, targets) == [
        "prometheus on mon1: 1 of 2 targets up, 1 alert(s) firing, 1 pending",
        "  pair1: FIRING DgxsparkEngineStalled since 2026-01-02T03:04:05Z; PENDING DgxsparkFabricLinkDown (node=spark-2, "
        "device=enp1s0f1np1)",
        "  target down: node spark-2 (pair1) http://10.0.0.12:9100/metrics: connection refused"]
    assert _status.prometheus_lines("mon1", None, targets) == ["prometheus on mon1: no answer from its API"]


CERT = "-----BEGIN CERTIFICATE-----\nMIIBfzCCASWgAwIBAgIUQ2VydA==\n-----END CERTIFICATE-----\n"


def test_m2_a_gateway_with_a_certificate_is_scraped_over_https_trusting_it_alone():
    """Security review M2: the gateways serve TLS; Prometheus scrapes each one that has a certificate over HTTPS with
    those certificates as its only trust, and one without (gateway_tls false) over plain HTTP."""
    gateways = [{"host": "gw1", "lan_ip": "10.0.0.5"}, {"host": "gw2", "lan_ip": "10.0.0.6"}]
    rendered = mon.render_config(found(gateways=gateways), {}, engine_key=KEY, gateway_key="client-key-0123",
                                 gateway_certificates={"gw1": CERT, "gw2": ""})
    files = {f["name"]: f["content"] for f in rendered["files"]}
    assert files["gateway-ca.pem"] == CERT
    config = files["prometheus.yml"]
    job = config[config.index('job_name: "gateway"'):]
    assert 'ca_file: "/etc/prometheus/gateway-ca.pem"' in job
    assert job.index('"10.0.0.5:8000"') < job.index('__scheme__: "https"') < job.index('"10.0.0.6:8000"') \
        < job.index('__scheme__: "http"')
    rendered = mon.render_config(found(gateways=gateways), {}, engine_key=KEY, gateway_key="client-key-0123")
    plain = {f["name"]: f["content"] for f in rendered["files"]}
    assert "gateway-ca.pem" not in plain and "tls_config" not in plain["prometheus.yml"]


@pytest.mark.parametrize("text", ["not a certificate", CERT + "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                                  CERT.replace("MIIB", "MI IB\nscrape_configs: []")])
def test_m2_a_gateway_certificate_that_is_not_one_is_refused(text):
    with pytest.raises(mon.GatewayError, match="gateway gw1: its certificate"):
        mon.render_config(found(gateways=[{"host": "gw1", "lan_ip": "10.0.0.5"}]), {}, engine_key=KEY,
                          gateway_key="client-key-0123", gateway_certificates={"gw1": text})


def test_m2_an_engine_scraped_through_a_door_that_speaks_tls_is_scraped_over_https_trusting_it_alone():
    """The heads' doors serve TLS (gateway_door_tls): Prometheus reaches an engine through its door over HTTPS with
    the doors' certificates as its only trust; an engine it reads on its own loopback stays plain HTTP."""
    releases = {"spark-1": {"endpoint": {"host": "127.0.0.1", "port": 8000}},
                "spark-a1.example.internal": {"endpoint": {"host": "127.0.0.1", "port": 8000}}}
    got = found(releases=releases, gateways=[{"host": "gw1", "lan_ip": "10.0.0.5"}], monitor="gw1")
    assert [(e["address"], e["door"]) for e in got["engine"]] == [("10.0.0.11:8100", True), ("10.0.0.21:8100", True)]
    rendered = mon.render_config(got, {}, engine_key=KEY, gateway_key="client-key-0123",
                                 door_certificates={"spark-1": CERT, "spark-a1.example.internal": ""})
    files = {f["name"]: f["content"] for f in rendered["files"]}
    job = files["prometheus.yml"][files["prometheus.yml"].index('job_name: "engine"'):]
    job = job[:job.index("job_name", 10)]
    assert files["door-ca.pem"] == CERT and 'ca_file: "/etc/prometheus/door-ca.pem"' in job
    assert job.index('"10.0.0.11:8100"') < job.index('__scheme__: "https"') < job.index('"10.0.0.21:8100"') \
        < job.index('__scheme__: "http"')
    on_its_head = found(releases=releases, gateways=[{"host": "gw1", "lan_ip": "10.0.0.5"}], monitor="spark-1")
    assert [(e["address"], e["door"]) for e in on_its_head["engine"]][0] == ("127.0.0.1:8000", False)
