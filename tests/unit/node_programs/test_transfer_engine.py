# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine request of dgxspark-transfer (what the watchdog on a cluster's head asks a worker): a known action on
the collection's own engine containers, by name and by label, nothing else.

Every test runs twice (the fixture R): against module_utils/_transfer_node and against the built program.
"""

from __future__ import annotations

import pytest


class FakeAPI:
    def __init__(self, containers):
        self.containers = containers
        self.calls = []

    def inspect_container(self, name):
        if name not in self.containers:
            error = Exception("404")
            error.response = type("R", (), {"status_code": 404})()
            raise error
        labels, running = self.containers[name]
        return {"Config": {"Labels": labels}, "RestartCount": 0,
                "State": {"Running": running, "Status": "running" if running else "exited",
                          "StartedAt": "2026-01-01T00:00:00Z", "ExitCode": 0}}

    def stop(self, name, timeout):
        self.calls.append(("stop", name, timeout))
        self.containers[name] = (self.containers[name][0], False)

    def start(self, name):
        self.calls.append(("start", name))
        self.containers[name] = (self.containers[name][0], True)


ENGINE = {"org.dgxspark.vllm.component": "ray"}


def test_valid_engine_requests(R):
    req = R.validate_engine_request({"v": 2, "op": "engine", "action": "restart", "containers": ["dgxspark-ray-worker"]})
    assert req == {"v": 2, "op": "engine", "action": "restart", "containers": ["dgxspark-ray-worker"], "name": None}
    assert R.validate_request({"v": 2, "op": "engine", "action": "status", "containers": ["dgxspark-vllm"]})["action"] == "status"


@pytest.mark.parametrize("req,message", [
    ({"v": 1, "op": "engine", "action": "stop", "containers": ["dgxspark-vllm"]}, "engine needs protocol 2"),
    ({"v": 2, "op": "engine", "action": "exec", "containers": ["dgxspark-vllm"]}, "engine action must be one of"),
    ({"v": 2, "op": "engine", "action": "stop", "containers": ["sshd"]}, "'sshd' is not an engine container"),
    ({"v": 2, "op": "engine", "action": "stop", "containers": "dgxspark-vllm"}, "engine needs a list of container names"),
    ({"v": 2, "op": "engine", "action": "stop", "containers": []}, "engine needs a list of container names"),
    ({"v": 2, "op": "engine", "action": "stop", "containers": ["dgxspark-vllm", "dgxspark-vllm"]}, "a container is named twice"),
    ({"v": 2, "op": "engine", "action": "start", "containers": ["dgxspark-vllm"], "image": "evil:1"}, "engine takes no image"),
    ({"v": 2, "op": "engine", "action": "start", "containers": ["dgxspark-vllm"], "command": ["sh"]}, "engine takes no command"),
])
def test_invalid_engine_requests_are_refused(R, req, message):
    with pytest.raises(R.RequestError, match=message):
        R.validate_request(req)


def test_restart_stops_then_starts_and_reports_the_state(R):
    api = FakeAPI({"dgxspark-ray-worker": (ENGINE, True)})
    answer = R.do_engine(api, {"v": 2, "op": "engine", "action": "restart", "containers": ["dgxspark-ray-worker"]}, {})
    assert api.calls == [("stop", "dgxspark-ray-worker", 30), ("start", "dgxspark-ray-worker")]
    assert answer["ok"] is True and answer["containers"]["dgxspark-ray-worker"]["running"] is True


def test_a_container_without_the_engine_label_is_not_touched(R):
    api = FakeAPI({"dgxspark-ray-worker": ({"org.dgxspark.vllm.component": "watchdog"}, True)})
    answer = R.do_engine(api, {"v": 2, "op": "engine", "action": "stop", "containers": ["dgxspark-ray-worker"]}, {})
    assert answer["ok"] is False and "is not an engine container of the collection" in answer["error"]
    assert api.calls == []


def test_the_configuration_names_the_allowed_containers(R):
    api = FakeAPI({"my-head": (ENGINE, False)})
    config = {"engine_containers": ["my-head"], "engine_stop_timeout": 5}
    answer = R.do_engine(api, {"v": 2, "op": "engine", "action": "stop", "containers": ["my-head"]}, config)
    assert answer["ok"] and api.calls == [("stop", "my-head", 5)]
    with pytest.raises(R.RequestError, match="'dgxspark-vllm' is not an engine container"):
        R.do_engine(api, {"v": 2, "op": "engine", "action": "stop", "containers": ["dgxspark-vllm"]}, config)


def test_a_missing_container_is_reported_not_created(R):
    api = FakeAPI({})
    answer = R.do_engine(api, {"v": 2, "op": "engine", "action": "start", "containers": ["dgxspark-vllm"]}, {})
    assert answer == {"v": 2, "ok": True, "action": "start", "containers": {"dgxspark-vllm": {"exists": False}}}
    assert api.calls == []


def test_a_start_evicts_the_models_root_from_the_page_cache_first(R, tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"x" * 4096)
    api = FakeAPI({"dgxspark-vllm": (ENGINE, True)})
    answer = R.do_engine(api, {"v": 2, "op": "engine", "action": "restart", "containers": ["dgxspark-vllm"]},
                         {"models_root": str(tmp_path)})
    assert answer["evicted"] == {"files": 1, "bytes": 4096}
    assert api.calls == [("stop", "dgxspark-vllm", 30), ("start", "dgxspark-vllm")]


@pytest.mark.parametrize("req", [
    {"v": 2, "op": "inspect", "ref": "lab/x:1"},
    {"v": 2, "op": "files_inspect", "model": "m", "files": []},
    {"v": 2, "op": "tag", "ref": "lab/x:1", "image_id": "sha256:" + "a" * 64, "nonce": "b" * 32},
])
def test_h3_the_watchdogs_key_asks_engine_requests_and_nothing_else(R, req, tmp_path, monkeypatch, capsys):
    """Security review H3: the watchdog's own key runs the program with --only engine (its forced command)."""
    import io
    import json
    config = tmp_path / "relay.json"
    config.write_text(json.dumps({"key": "/k", "known_hosts": "/kh"}))
    monkeypatch.setattr(R.sys, "stdin", io.TextIOWrapper(io.BytesIO((json.dumps(req) + "\n").encode())))
    called = []
    monkeypatch.setattr(R, "docker_client", lambda _config: called.append("docker") or FakeAPI({}))
    assert R.main(["dgxspark-transfer", str(config), "--only", "engine"]) == 1
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["ok"] is False and f"may only ask engine requests (the watchdog's), not {req['op']}" in answer["error"]
    assert called == []


def test_h3_with_only_engine_an_engine_request_is_served(R, tmp_path, monkeypatch, capsys):
    import io
    import json
    config = tmp_path / "relay.json"
    config.write_text(json.dumps({"key": "/k", "known_hosts": "/kh"}))
    req = {"v": 2, "op": "engine", "action": "status", "containers": ["dgxspark-ray-head"]}
    monkeypatch.setattr(R.sys, "stdin", io.TextIOWrapper(io.BytesIO((json.dumps(req) + "\n").encode())))
    monkeypatch.setattr(R, "docker_client", lambda _config: FakeAPI({"dgxspark-ray-head": (ENGINE, True)}))
    assert R.main(["dgxspark-transfer", str(config), "--only", "engine"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["ok"] and answer["containers"]["dgxspark-ray-head"]["running"] is True
    for argv in (["dgxspark-transfer", str(config), "--only", "tag"], ["dgxspark-transfer", str(config), "--only"]):
        assert R.main(argv) == 2
