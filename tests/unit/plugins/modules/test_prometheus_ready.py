# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the prometheus_ready module (module_utils/_monitoring.api_url, loaded, wait_loaded): the monitoring
role's reload and readiness in one call, at the URL monitoring_info asks (one producer of Prometheus's address)."""

from __future__ import annotations

import json
import re

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.module_utils import _monitoring, _status
from ansible_collections.dgxspark.vllm.plugins.modules import prometheus_ready as mod


def metrics(ok=1, at=1765000000.0):
    return (f"# HELP {_monitoring.LOADED_OK} Whether the last configuration reload attempt was successful.\n"
            f"{_monitoring.LOADED_OK} {ok}\n{_monitoring.LOADED_AT} {at:.10e}\nprometheus_build_info{{}} 1\n")


class Prometheus:
    """Prometheus's /metrics as the module reads it: a SIGHUP (docker kill) makes it load again at a later time, or
    fail to when its configuration is refused."""

    def __init__(self, refuses=False, answers=True):
        self.ok, self.at, self.refuses, self.answers = 1, 1765000000.0, refuses, answers
        self.signals = []
        self.asked = []

    def get(self, url, timeout):  # pylint: disable=unused-argument
        self.asked.append(url)
        return (200, metrics(self.ok, self.at)) if self.answers else (-1, "")

    def run_command(self, argv, **kwargs):  # pylint: disable=unused-argument
        self.signals.append(argv)
        if self.refuses:
            self.ok = 0
        else:
            self.at += 5
        return 0, "", ""


@pytest.fixture(name="prometheus")
def prometheus_fixture(monkeypatch):
    prometheus = Prometheus()
    monkeypatch.setattr(_status, "http_get", prometheus.get)
    monkeypatch.setattr(AnsibleModule, "run_command", lambda self, argv, **kw: prometheus.run_command(argv, **kw))
    monkeypatch.setattr(mod.time, "sleep", lambda seconds: None)
    return prometheus


def run(capsys, **args):
    with patch_module_args({"container": "dgxspark-prometheus", **args}), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("listen", "port", "url"), [
    ("127.0.0.1", 9090, "http://127.0.0.1:9090"), ("0.0.0.0", 9090, "http://127.0.0.1:9090"),
    ("::", "9091", "http://127.0.0.1:9091"), ("", 9090, "http://127.0.0.1:9090"), ("::1", 9090, "http://[::1]:9090"),
    ("192.168.1.5", 9090, "http://192.168.1.5:9090")])
def test_prometheus_is_asked_at_its_listening_address_or_the_loopback(listen, port, url):
    assert _monitoring.api_url(listen, port) == url


@pytest.mark.parametrize(("listen", "port", "needle"), [
    ("not an address", 9090, "the listening address (monitoring_prometheus_listen or monitoring_node_exporter_bind) is "
                             "'not an address'"),
    ("127.0.0.1", 0, "the listening port is 0"), ("127.0.0.1", "http", "the listening port is 'http'")])
def test_a_bad_listening_address_or_port_is_named(listen, port, needle):
    with pytest.raises((ValueError, TypeError), match=re.escape(needle)):
        _monitoring.api_url(listen, port)


@pytest.mark.parametrize(("text", "seen"), [
    (metrics(1, 1765000000.5), (True, 1765000000.5)), (metrics(0, 12.0), (False, 12.0)),
    ("", (False, -1.0)), (f"{_monitoring.LOADED_OK} x\n{_monitoring.LOADED_AT}\n", (False, -1.0)),
    # a longer name that starts with the gauge's is another series
    (f"{_monitoring.LOADED_AT}_total 9\n{_monitoring.LOADED_OK} 1\n", (True, -1.0))])
def test_the_last_load_is_read_from_prometheus_own_metrics(text, seen):
    assert _monitoring.loaded(text) == seen


def test_a_changed_configuration_is_loaded_with_sighup_and_the_module_waits_for_the_later_load(capsys, prometheus):
    out = run(capsys, listen="0.0.0.0", reload=True)
    assert out["changed"] is True and out["reloaded"] is True and out["url"] == "http://127.0.0.1:9090"
    assert prometheus.signals == [["docker", "kill", "--signal", "HUP", "dgxspark-prometheus"]]
    assert out["loaded_at"] == 1765000005.0
    assert prometheus.asked[0] == "http://127.0.0.1:9090/metrics"  # the load time read before the signal


def test_without_a_change_it_only_waits_for_the_loaded_configuration_and_changes_nothing(capsys, prometheus):
    out = run(capsys)
    assert out["changed"] is False and out["reloaded"] is False and out["loaded_at"] == 1765000000.0
    assert not prometheus.signals


def test_check_mode_reports_the_reload_and_neither_signals_nor_waits(capsys, prometheus):
    out = run(capsys, reload=True, _ansible_check_mode=True)
    assert out["changed"] is True and out["loaded_at"] == -1.0
    assert not prometheus.signals and not prometheus.asked


def test_a_configuration_prometheus_refuses_fails_naming_the_container_and_where_its_reason_is(capsys, prometheus,
                                                                                               monkeypatch):
    prometheus.refuses = True
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(mod.time, "monotonic", lambda: float(next(clock)))
    out = run(capsys, reload=True, timeout=30)
    assert out["failed"], out
    assert out["msg"].startswith("Prometheus (dgxspark-prometheus) at http://127.0.0.1:9090: its last load of the "
                                 "configuration failed (prometheus_config_last_reload_successful 0) after 30 s")
    assert "`docker logs dgxspark-prometheus`" in out["msg"]


def test_no_answer_within_the_timeout_fails_saying_so(capsys, prometheus, monkeypatch):
    prometheus.answers = False
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(mod.time, "monotonic", lambda: float(next(clock)))
    out = run(capsys, timeout=20)
    assert out["failed"] and "at http://127.0.0.1:9090: no answer after 20 s" in out["msg"], out


@pytest.mark.parametrize(("args", "needle"), [
    ({"container": "bad name;rm"}, "monitoring_prometheus_container is 'bad name;rm'"),
    ({"timeout": 0}, "timeout must be at least 1 second"),
    ({"port": 70000}, "monitoring_prometheus_listen / monitoring_prometheus_port")])
def test_bad_input_fails_before_anything_is_asked_or_signalled(capsys, prometheus, args, needle):
    out = run(capsys, reload=True, **args)
    assert out["failed"] and needle in out["msg"], out
    assert not prometheus.signals and not prometheus.asked
