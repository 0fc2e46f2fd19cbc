# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the node_info module and its sections (module_utils/_node_info.py)."""

from __future__ import annotations

import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args
from docker.errors import NotFound

from ansible_collections.dgxspark.vllm.plugins.module_utils import _node_info
from ansible_collections.dgxspark.vllm.plugins.modules import node_info as mod

LABEL = "org.dgxspark.vllm.component"


def inspect(name, component, running=True):
    return {
        "Id": name + "-id", "Name": "/" + name, "Image": "sha256:" + "a" * 64, "RestartCount": 0,
        "State": {"Running": running, "Status": "running" if running else "exited",
                  "StartedAt": "2026-12-04T21:50:01Z", "ExitCode": 0 if running else 137},
        "Config": {"Labels": {LABEL: component}, "Env": ["VLLM_API_KEY=secret-key"]},
        "HostConfig": {"RestartPolicy": {"Name": "unless-stopped"}},
    }


class FakeClient:
    def __init__(self, containers, vanish=()):
        self.api = self
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


def params(**given):
    return {"engines": False, "label": LABEL, "engine_components": ["ray", "vllm"], "paths": [], "trust_dir": None,
            **given}


def test_only_the_asked_sections_are_read_and_docker_only_for_the_engines():
    def no_docker():
        raise AssertionError("Docker was asked without the engines section")

    assert _node_info.read(params(), no_docker) == {}
    assert _node_info.wanted(params()) == []
    assert _node_info.wanted(params(engines=True, paths=["/x"], trust_dir="/t")) == ["engines", "paths", "trust"]


def test_the_engines_section_is_the_engine_containers_without_their_environment():
    client = FakeClient([inspect("dgxspark-ray-head", "ray"), inspect("dgxspark-vllm", "vllm", running=False),
                         inspect("dgxspark-watchdog", "watchdog"), inspect("dgxspark-door", "door"),
                         inspect("gone", "ray")], vanish={"gone-id"})
    found = _node_info.read(params(engines=True), lambda: client, NotFound)
    assert client.filters == {"label": LABEL}
    assert sorted(found["engines"]["containers"]) == ["dgxspark-ray-head", "dgxspark-vllm"]
    assert found["engines"]["running_components"] == ["ray"]
    assert found["engines"]["containers"]["dgxspark-vllm"]["exit_code"] == 137
    assert "secret-key" not in json.dumps(found)
    head = _node_info.read(params(engines=True, engine_components=["ray", "vllm", "watchdog", "door"]),
                           lambda: client, NotFound)
    assert sorted(head["engines"]["containers"]) == ["dgxspark-door", "dgxspark-ray-head", "dgxspark-vllm",
                                                     "dgxspark-watchdog"]
    assert head["engines"]["running_components"] == ["door", "ray", "watchdog"]


def test_the_paths_section_says_whether_each_is_there_a_dangling_link_included(tmp_path):
    there = tmp_path / "door"
    there.mkdir()
    dangling = tmp_path / "link"
    os.symlink(tmp_path / "nowhere", dangling)
    found = _node_info.read(params(paths=[str(there), str(tmp_path / "gone"), str(dangling)]))
    assert found == {"paths": {str(there): True, str(tmp_path / "gone"): False, str(dangling): True}}


def test_the_trust_section_never_fails_and_never_holds_the_private_key(tmp_path):
    trust = tmp_path / "transfer"
    trust.mkdir()
    (trust / "id_ed25519").write_text("PRIVATE KEY SENTINEL")
    (trust / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3Nz dgxspark-transfer@spark_pairs:spark-1\n")
    host_key = tmp_path / "ssh_host_ed25519_key.pub"
    host_key.write_text("ssh-ed25519 AAAAhost root@spark-1\n")
    found = _node_info.trust_section(str(trust), lambda d: _node_info.read_trust(d, str(host_key)))
    assert found == {"dir": str(trust), "key_present": True,
                     "public_key": "ssh-ed25519 AAAAC3Nz dgxspark-transfer@spark_pairs:spark-1",
                     "host_key": "ssh-ed25519 AAAAhost root@spark-1"}
    assert "SENTINEL" not in json.dumps(found)

    def unreadable(directory):
        raise PermissionError(13, "Permission denied", directory)

    failed = _node_info.trust_section(str(trust), unreadable)
    assert failed["dir"] == str(trust) and "Permission denied" in failed["error"] and "key_present" not in failed


def run(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def test_main_reads_paths_without_docker_and_changes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(mod._docker, "client", lambda *a, **k: pytest.fail("Docker was asked"))
    result = run(capsys, {"paths": [str(tmp_path)], "_ansible_check_mode": True})
    assert result["changed"] is False and result["sections"] == ["paths"]
    assert result["paths"] == {str(tmp_path): True} and "engines" not in result and "trust" not in result


def test_main_reads_the_engines_with_the_client_docker_host_names(capsys, monkeypatch):
    made = {}

    def client(module, sdk, docker_host, **kwargs):
        made.update(docker_host=docker_host, **kwargs)
        return FakeClient([inspect("dgxspark-ray-head", "ray")])

    monkeypatch.setattr(mod._docker, "client", client)
    result = run(capsys, {"engines": True, "docker_host": "unix:///run/other.sock", "timeout": 7})
    assert made["docker_host"] == "unix:///run/other.sock" and made["timeout"] == 7
    assert result["sections"] == ["engines"] and list(result["engines"]["containers"]) == ["dgxspark-ray-head"]


def test_main_rejects_a_timeout_below_one_second(capsys):
    out = run(capsys, {"timeout": 0})
    assert out["failed"] and "timeout must be at least 1 second" in out["msg"]
