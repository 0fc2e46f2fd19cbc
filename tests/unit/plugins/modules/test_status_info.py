# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the status_info module (module_utils/_status.node_status): one call per node in place of the status
playbook's five reads and the status_engine filter; the table drawn from its answers is the one it drew before."""

from __future__ import annotations

import base64
import http.server
import json
import threading

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.module_utils import _status
from ansible_collections.dgxspark.vllm.plugins.modules import status_info as mod

HEAD = {"Names": ["/dgxspark-ray-head"], "State": "running", "Status": "Up 2 hours",
        "Labels": {"org.dgxspark.vllm.component": "ray"}}
WATCHDOG = {"Names": ["/dgxspark-watchdog"], "State": "running", "Status": "Up 2 hours",
            "Labels": {"org.dgxspark.vllm.component": "watchdog"}}
METRICS = ('# HELP vllm:generation_tokens_total Number of generation tokens processed.\n'
           'vllm:generation_tokens_total{engine="0",model_name="m"} 5120.0\nvllm:num_requests_running 0.0\n')


def release(url="http://127.0.0.1:8000/v1", backend="ray"):
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    return {"image": "dgxspark/vllm-hybrid:x", "backend": backend, "served_model_name": "m",
            "endpoint": {"url": url, "host": "127.0.0.1", "port": port}}


class Engine(http.server.BaseHTTPRequestHandler):
    health = 200

    def do_GET(self):  # noqa: N802 - http.server's name
        code, body = {"/health": (Engine.health, ""), "/metrics": (200, METRICS)}.get(self.path, (404, ""))
        self.send_response(code)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture(name="engine")
def engine_fixture():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_a_head_reads_its_release_watchdog_and_engine_and_the_table_is_the_one_drawn_before(tmp_path, engine):
    (tmp_path / "release.json").write_text(json.dumps(release(engine)))
    (tmp_path / "state.json").write_text(json.dumps({"verdict": "serving", "attempts": 0, "max_restarts": 3}))
    got = _status.node_status(head=True, release_file=str(tmp_path / "release.json"),
                              watchdog_state_file=str(tmp_path / "state.json"), list_containers=lambda: [HEAD, WATCHDOG])
    assert got["engine"]["url"] == engine.removesuffix("/v1") and got["health"] == 200 and got["problems"] == []
    assert got["metrics"] == 'vllm:generation_tokens_total{engine="0",model_name="m"} 5120.0'
    assert got["watchdog"]["verdict"] == "serving" and got["release"]["backend"] == "ray"
    # The table from the module's answers, and from the playbook's former reads (the slurp, the whole /metrics).
    slurp = {"content": base64.b64encode(json.dumps(release(engine)).encode()).decode()}
    now = _status.table("pair1", ["s1", "s2"], head="s1", containers=[got["containers"], []], release=got["release"],
                        health=got["health"], metrics=got["metrics"], ray={}, watchdog=got["watchdog"])
    before = _status.table("pair1", ["s1", "s2"], head="s1", containers=[[HEAD, WATCHDOG], []], release=slurp,
                           health=200, metrics=METRICS, ray={}, watchdog=got["watchdog"])
    assert now == before and "tokens generated 5120" in now[0]


def test_an_engine_that_does_not_answer_is_health_minus_one(tmp_path):
    (tmp_path / "release.json").write_text(json.dumps(release("http://127.0.0.1:9/v1")))
    got = _status.node_status(head=True, release_file=str(tmp_path / "release.json"), watchdog_state_file="",
                              list_containers=lambda: [HEAD], http_timeout=2)
    assert got["engine"] and got["health"] == -1 and got["metrics"] == ""


def test_a_worker_reads_only_its_containers_and_asks_no_engine(tmp_path):
    (tmp_path / "release.json").write_text(json.dumps(release()))

    def get(url, timeout):
        raise AssertionError(f"a worker asked {url}")

    got = _status.node_status(head=False, release_file=str(tmp_path / "release.json"), watchdog_state_file="",
                              list_containers=lambda: [WATCHDOG], get=get)
    assert got["containers"] == [WATCHDOG] and got["release"] == {} and got["engine"] == {} and got["health"] == -1


def test_missing_records_are_empty_and_an_unreadable_one_is_a_problem(tmp_path):
    (tmp_path / "state.json").write_text("{not json")
    got = _status.node_status(head=True, release_file=str(tmp_path / "none.json"),
                              watchdog_state_file=str(tmp_path / "state.json"), list_containers=lambda: [])
    assert got["release"] == {} and got["watchdog"] == {} and got["engine"] == {}
    assert len(got["problems"]) == 1 and "state.json is not JSON" in got["problems"][0]
    assert _status.watchdog_lines(got["watchdog"]) == ["  watchdog: none on the head"]


def test_a_record_that_is_no_object_or_cannot_be_read_is_named_as_release_info_names_it(tmp_path):
    (tmp_path / "release.json").write_text("[1, 2]")
    (tmp_path / "state.json").mkdir()
    got = _status.node_status(head=True, release_file=str(tmp_path / "release.json"),
                              watchdog_state_file=str(tmp_path / "state.json"), list_containers=lambda: [])
    assert got["release"] == {} and got["watchdog"] == {}
    assert got["problems"][0] == f"{tmp_path / 'release.json'} holds a list, not a record"
    assert got["problems"][1].startswith(f"{tmp_path / 'state.json'}: Is a directory")


def test_a_release_whose_engine_container_is_gone_is_not_serving(tmp_path):
    (tmp_path / "release.json").write_text(json.dumps(release(backend="mp")))
    got = _status.node_status(head=True, release_file=str(tmp_path / "release.json"), watchdog_state_file="",
                              list_containers=lambda: [HEAD], get=lambda *a: pytest.fail("asked"))
    assert got["engine"] == {} and got["release"]["backend"] == "mp"


class FakeAPI:
    def __init__(self):
        self.asked = None

    def containers(self, all=False, filters=None):  # noqa: A002 - the SDK's own argument name
        self.asked = (all, filters)
        return [HEAD]


def test_main_lists_every_container_of_the_collection_with_the_low_level_client(tmp_path, capsys, monkeypatch):
    api, made = FakeAPI(), {}

    def client(module, sdk, docker_host, **kwargs):
        made.update(docker_host=docker_host, **kwargs)
        return api

    monkeypatch.setattr(mod._docker, "client", client)
    with patch_module_args({"docker_host": "unix:///run/d.sock", "release_file": str(tmp_path / "r.json"),
                            "_ansible_check_mode": True}), pytest.raises(SystemExit):
        mod.main()
    out = json.loads(capsys.readouterr().out)
    assert out["changed"] is False and out["containers"] == [HEAD] and out["release"] == {}
    assert api.asked == (True, {"label": "org.dgxspark.vllm.component"})
    assert made["docker_host"] == "unix:///run/d.sock" and made["low_level"] is True


def test_main_rejects_an_http_timeout_below_one_second(capsys):
    with patch_module_args({"http_timeout": 0}), pytest.raises(SystemExit):
        mod.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and "http_timeout must be at least 1 second" in out["msg"]


PROMETHEUS = {
    "alerts": {"status": "success", "data": {"alerts": [
        {"state": "firing", "labels": {"alertname": "VllmEngineStalled", "cluster": "pair1", "node": "s1"},
         "activeAt": "2026-12-07T20:00:00.000Z"},
        {"state": "pending", "labels": {"alertname": "KvCacheFull", "cluster": "pair2"}}]}},
    "targets": {"status": "success", "data": {"activeTargets": [
        {"health": "up", "labels": {"job": "vllm"}, "scrapeUrl": "https://s1:8000/metrics"},
        {"health": "down", "labels": {"job": "node", "node": "s2", "cluster": "pair1"},
         "scrapeUrl": "http://s2:9100/metrics", "lastError": "connection refused"}]}},
}
