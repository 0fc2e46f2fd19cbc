# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the engine_containers module against a fake Docker API."""

from __future__ import annotations

import json

import pytest

from ansible.module_utils.testing import patch_module_args
from docker.errors import NotFound

from ansible_collections.dgxspark.vllm.plugins.modules import engine_containers as mod

LABEL = "org.dgxspark.vllm.component"


def inspect(name, component, running=True, **extra):
    return {
        "Id": name + "-id", "Name": "/" + name, "Image": "sha256:" + "a" * 64, "RestartCount": extra.get("restarts", 0),
        "State": {"Running": running, "Status": "running" if running else "exited", "StartedAt": "2026-12-04T21:50:01Z",
                  "ExitCode": 0 if running else 137},
        "Config": {"Labels": {LABEL: component, "org.dgxspark.vllm.config": "f1"},
                   "Env": ["VLLM_API_KEY=secret-key"]},
        "HostConfig": {"RestartPolicy": {"Name": "unless-stopped"}},
    }


class FakeAPI:
    def __init__(self, containers, vanish=()):
        self.by_id = {c["Id"]: c for c in containers}
        self.vanish = set(vanish)
        self.filters = None

    def containers(self, all=False, filters=None):  # noqa: A002 - the SDK's own argument name
        assert all is True
        self.filters = filters
        return [{"Id": i} for i in self.by_id]

    def inspect_container(self, container_id):
        if container_id in self.vanish:
            raise NotFound("gone")
        return self.by_id[container_id]


class FakeClient:
    def __init__(self, api):
        self.api = api


def test_read_describes_each_container_without_its_environment():
    api = FakeAPI([inspect("dgxspark-ray-head", "ray"), inspect("dgxspark-vllm", "vllm", running=False, restarts=2)])
    result = mod.read(FakeClient(api), LABEL)
    assert api.filters == {"label": LABEL}
    head = result["containers"]["dgxspark-ray-head"]
    assert head == {"id": "dgxspark-ray-head-id", "component": "ray", "running": True, "status": "running", "started_at": "2026-12-04T21:50:01Z",
                    "image_id": "sha256:" + "a" * 64,
                    "labels": {LABEL: "ray", "org.dgxspark.vllm.config": "f1"},
                    "restart_policy": "unless-stopped", "restart_count": 0, "exit_code": 0}
    stopped = result["containers"]["dgxspark-vllm"]
    assert (stopped["running"], stopped["exit_code"], stopped["restart_count"]) == (False, 137, 2)
    assert result["running_components"] == ["ray"]
    assert "secret-key" not in json.dumps(result)


def test_the_collections_other_containers_are_not_engines():
    api = FakeAPI([inspect("dgxspark-ray-head", "ray"), inspect("dgxspark-watchdog", "watchdog"),
                   inspect("nice_turing", "hybrid-image")])
    result = mod.read(FakeClient(api), LABEL)
    assert list(result["containers"]) == ["dgxspark-ray-head"] and result["running_components"] == ["ray"]


def test_a_container_removed_between_list_and_inspection_is_not_reported():
    api = FakeAPI([inspect("dgxspark-ray-head", "ray"), inspect("dgxspark-ray-worker", "ray")],
                  vanish={"dgxspark-ray-worker-id"})
    assert list(mod.read(FakeClient(api), LABEL)["containers"]) == ["dgxspark-ray-head"]


def test_no_engine_container_is_an_empty_answer():
    assert mod.read(FakeClient(FakeAPI([])), LABEL) == {"containers": {}, "running_components": []}


def test_main_rejects_a_timeout_below_one_second(capsys):
    with patch_module_args({"timeout": 0}), pytest.raises(SystemExit):
        mod.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and "timeout must be at least 1 second" in out["msg"]
