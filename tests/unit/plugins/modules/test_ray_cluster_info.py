# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of main() of the ray_cluster_info module with a mocked Docker client and real Ray outputs."""

from __future__ import annotations

import json
import pathlib
from unittest import mock

import pytest
from docker.errors import DockerException, NotFound

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import ray_cluster_info as mod

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "ray"
SECRET = "0123456789abcdef-token"


def fx(name):
    return (FIXTURES / name).read_bytes()


class FakeContainer:
    """A head container whose exec answers from fixtures, keyed by the Ray subcommand."""

    def __init__(self, answers, status="running", env=None):
        self.answers = answers
        self.status = status
        self.short_id = "4f1c2a9b0d3e"
        default_env = ["PATH=/usr/bin", "RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN_PATH=/run/dgxspark/ray_token"]
        self.attrs = {"Config": {"Env": env if env is not None else default_env}}
        self.calls = []

    def exec_run(self, cmd, **kwargs):
        self.calls.append((cmd, kwargs))
        key = cmd[3] if cmd[3] != "list" else cmd[4]  # after ["timeout", N, "ray"]
        code, out, err = self.answers[key]
        return mock.Mock(exit_code=code, output=(out, err))


HEALTHY = {"--version": (0, fx("version.txt"), None), "nodes": (0, fx("nodes_healthy.json"), None),
           "placement-groups": (0, fx("pgs_healthy.json"), None), "status": (0, fx("status_healthy.txt"), None)}
DEAD = {"--version": (0, fx("version.txt"), None), "nodes": (0, fx("nodes_dead.json"), None),
        "placement-groups": (0, fx("pgs_dead.json"), None), "status": (0, fx("status_dead.txt"), None)}


def run(capsys, args=None, container=None, get_error=None, from_env_error=None):
    client = mock.Mock()
    if get_error:
        client.containers.get.side_effect = get_error
    else:
        client.containers.get.return_value = container
    from_env = mock.Mock(return_value=client, side_effect=from_env_error)
    with patch_module_args(args or {}), mock.patch.object(mod.docker, "from_env", from_env):
        with pytest.raises(SystemExit) as exc:
            mod.main()
    return json.loads(capsys.readouterr().out), exc.value.code, client


def test_healthy_cluster(capsys):
    container = FakeContainer(HEALTHY)
    result, code, client = run(capsys, {"_ansible_check_mode": True}, container)
    assert code == 0
    client.containers.get.assert_called_once_with("dgxspark-ray-head")
    assert result["changed"] is False
    assert result["reachable"] is True
    assert (result["ray_version"], result["auth_mode"]) == ("2.54.1", "token")
    assert (result["alive_nodes"], result["dead_nodes"], result["gpus_total"], result["gpus_available"]) == (
        2, 0, 2.0, 2.0)
    assert result["alive_node_ips"] == ["127.0.0.2", "127.0.0.3"]
    assert [g["state"] for g in result["placement_groups"]] == ["PENDING", "CREATED"]
    assert result["container"] == {"name": "dgxspark-ray-head", "status": "running", "id": "4f1c2a9b0d3e"}
    assert result["status_text"].startswith("======== Autoscaler status")
    argv = [cmd for cmd, _kw in container.calls]
    assert argv[1] == ["timeout", "30", "ray", "list", "nodes", "--format", "json", "--detail", "--limit", "10000",
                       "--address", "http://127.0.0.1:8265"]
    for _cmd, kwargs in container.calls:
        assert kwargs["environment"] == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/run/dgxspark/ray_token"}
        assert kwargs["demux"] is True


def test_dead_worker(capsys):
    result, code, _client = run(capsys, {"container": "head", "dashboard_address": "http://127.0.0.1:28265",
                                         "timeout": 5}, FakeContainer(DEAD, env=[]))
    assert code == 0
    assert (result["alive_nodes"], result["dead_nodes"], result["dead_node_ips"], result["gpus_total"]) == (
        1, 1, ["127.0.0.3"], 1.0)
    assert result["auth_mode"] is None
    assert result["nodes"][1]["state"] == "DEAD"
    assert {g["name"]: g["state"] for g in result["placement_groups"]}["vllm_tp2"] == "RESCHEDULING"


def test_no_auth_env_passes_nothing(capsys):
    container = FakeContainer(HEALTHY, env=["PATH=/usr/bin", "RAY_AUTH_TOKEN_PATH="])
    run(capsys, {}, container)
    assert all(kwargs["environment"] == {} for _cmd, kwargs in container.calls)


def test_missing_container_is_not_a_failure(capsys):
    result, code, _client = run(capsys, {}, get_error=NotFound("no such container"))
    assert code == 0
    assert result == {"changed": False, "reachable": False,
                      "msg": "container dgxspark-ray-head does not exist on this node",
                      "container": {"name": "dgxspark-ray-head", "status": None, "id": None},
                      "wait_satisfied": False, "waited": 0.0, "container_ended": None, "missing_node_ips": [],
                      "invocation": result["invocation"]}


def test_stopped_container_fails_when_asked(capsys):
    container = FakeContainer(HEALTHY, status="exited")
    result, code, _client = run(capsys, {"fail_on_unreachable": True}, container)
    assert code == 1
    assert result["failed"] is True
    assert result["msg"] == ("container dgxspark-ray-head is exited, not running; start the Ray head (the ray_cluster "
                             "role) first")
    assert container.calls == []


def test_ray_command_failure_is_an_error(capsys):
    answers = dict(HEALTHY, nodes=(1, b"", b"Error: Failed to connect to API server.\n"))
    result, code, _client = run(capsys, {}, FakeContainer(answers))
    assert code == 1
    assert result["msg"] == ("`ray list nodes --format json --detail --limit 10000 --address http://127.0.0.1:8265` "
                             "failed in the head container (exit 1): Error: Failed to connect to API server.")


def test_ray_command_timeout(capsys):
    answers = dict(HEALTHY, status=(124, b"", b""))
    result, code, _client = run(capsys, {"timeout": 7}, FakeContainer(answers))
    assert code == 1
    assert result["msg"].endswith("failed in the head container (exit 124): no answer within 7s")


def test_unparsable_output(capsys):
    answers = dict(HEALTHY, nodes=(0, b"Traceback (most recent call last):\n", b""))
    result, code, _client = run(capsys, {}, FakeContainer(answers))
    assert code == 1
    assert result["msg"].startswith("unexpected Ray output in dgxspark-ray-head: `ray list nodes` did not print JSON")


def test_docker_daemon_down(capsys):
    result, code, _client = run(capsys, {}, from_env_error=DockerException("Error while fetching server API version"))
    assert code == 1
    assert result["msg"].startswith("cannot talk to the Docker daemon on this node: Error while fetching server API")


def test_docker_host_option(capsys):
    client = mock.Mock()
    client.containers.get.return_value = FakeContainer(HEALTHY)
    with patch_module_args({"docker_host": "unix:///run/docker.sock"}), \
            mock.patch.object(mod.docker, "DockerClient", return_value=client) as docker_client:
        with pytest.raises(SystemExit):
            mod.main()
    docker_client.assert_called_once_with(base_url="unix:///run/docker.sock")
    assert json.loads(capsys.readouterr().out)["reachable"] is True


def test_missing_docker_sdk(capsys):
    with patch_module_args({}), mock.patch.object(mod, "HAS_DOCKER", False), \
            mock.patch.object(mod, "DOCKER_IMPORT_ERROR", "ImportError: No module named docker"):
        with pytest.raises(SystemExit):
            mod.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True
    assert "Failed to import the required Python library (docker)" in result["msg"]


def test_token_value_never_returned(capsys, tmp_path):
    container = FakeContainer(HEALTHY, env=["RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN_PATH=/run/t",
                                            f"RAY_AUTH_TOKEN={SECRET}"])
    result, _code, _client = run(capsys, {}, container)
    assert SECRET not in json.dumps(result)
    assert all("RAY_AUTH_TOKEN" not in kwargs["environment"] for _cmd, kwargs in container.calls)


# ----------------------------------------------------------------------------- bounded wait


class Clock:
    """A fake monotonic clock that sleep() advances."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += max(seconds, 0.01)


class Sequence(FakeContainer):
    """A head container whose `ray list nodes` answers change over reads, and whose state can change over time."""

    def __init__(self, node_answers, clock, states=None):
        super().__init__(HEALTHY)
        self.node_answers = list(node_answers)
        self.clock = clock
        self.states = states or []  # [(from time, status, started_at, restart count)]
        self.attrs["State"] = {"StartedAt": "T0"}
        self.attrs["RestartCount"] = 0

    def reload(self):
        for since, status, started, restarts in self.states:
            if self.clock.now >= since:
                self.status = status
                self.attrs["State"] = {"StartedAt": started}
                self.attrs["RestartCount"] = restarts

    def exec_run(self, cmd, **kwargs):
        self.clock.now += 1.0  # a Ray command takes a second
        if cmd[3] == "list" and cmd[4] == "nodes":
            answer = self.node_answers.pop(0) if len(self.node_answers) > 1 else self.node_answers[0]
            return mock.Mock(exit_code=answer[0], output=(answer[1], answer[2]))
        return super().exec_run(cmd, **kwargs)


def one_alive():
    nodes = json.loads(fx("nodes_healthy.json"))
    return json.dumps([n for n in nodes if n.get("is_head_node")]).encode()


WAIT = {"dashboard_address": "http://127.0.0.1:8265", "timeout": 30, "wait_timeout": 60, "wait_nodes": 2, "wait_gpus": 2.0,
        "wait_node_ips": [], "wait_interval": 3, "started_at": None}


def healthy_ips():
    return sorted(n["node_ip"] for n in json.loads(fx("nodes_healthy.json")))


def test_wait_verdict():
    summary = {"alive_nodes": 2, "gpus_total": 2.0, "alive_node_ips": ["10.0.0.1", "10.0.0.2"]}
    assert mod.wait_verdict(summary, 2, 2.0, ["10.0.0.1", "10.0.0.2"]) == (True, [])
    assert mod.wait_verdict(summary, 2, 2.0, ["10.0.0.1", "10.0.0.3"]) == (False, ["10.0.0.3"])
    assert mod.wait_verdict(dict(summary, gpus_total=1.0), 2, 2.0, []) == (False, [])
    assert mod.wait_verdict(None, 2, 2.0, ["10.0.0.2"]) == (False, ["10.0.0.2"])


def test_wait_returns_once_the_cluster_is_complete():
    clock = Clock()
    container = Sequence([(0, one_alive(), None), (0, one_alive(), None), (0, fx("nodes_healthy.json"), None)], clock)
    out = mod.wait_for_cluster(container, "head", dict(WAIT, wait_node_ips=healthy_ips()), clock=clock, sleep=clock.sleep)
    assert out["wait_satisfied"] is True and out["container_ended"] is None and out["missing_node_ips"] == []
    assert 6 <= out["waited"] <= 10  # three reads, two intervals


def test_wait_times_out_at_its_deadline_and_names_the_missing_node():
    clock = Clock()
    container = Sequence([(0, one_alive(), None)], clock)
    out = mod.wait_for_cluster(container, "head", dict(WAIT, wait_timeout=20, wait_node_ips=healthy_ips()),
                               clock=clock, sleep=clock.sleep)
    assert out["wait_satisfied"] is False and out["container_ended"] is None
    assert len(out["missing_node_ips"]) == 1 and out["snapshot"]["alive_nodes"] == 1
    assert 20 <= out["waited"] <= 22


def test_wait_ends_within_a_second_when_the_head_restarts_and_keeps_the_last_view():
    clock = Clock()
    container = Sequence([(0, one_alive(), None)], clock, states=[(7.2, "running", "T1", 1)])
    out = mod.wait_for_cluster(container, "head", dict(WAIT, started_at="T0", wait_node_ips=healthy_ips()),
                               clock=clock, sleep=clock.sleep)
    assert out["container_ended"] == "container head restarted (restart count 1)"
    assert out["wait_satisfied"] is False and 7.2 <= out["waited"] <= 8.0
    assert out["snapshot"]["alive_nodes"] == 1  # the view from before the restart


def test_wait_survives_ray_errors_while_the_head_starts():
    clock = Clock()
    container = Sequence([(1, b"", b"Failed to connect to API server"), (0, fx("nodes_healthy.json"), None)], clock)
    out = mod.wait_for_cluster(container, "head", dict(WAIT), clock=clock, sleep=clock.sleep)
    assert out["wait_satisfied"] is True and "last_error" not in out


def test_wait_through_main_returns_the_last_view_without_failing(capsys):
    clock = Clock()
    container = Sequence([(0, one_alive(), None)], clock, states=[(2.0, "exited", "T0", 0)])
    with mock.patch.object(mod.time, "monotonic", clock), mock.patch.object(mod.time, "sleep", clock.sleep):
        result, code, _client = run(capsys, {"wait_timeout": 30, "wait_nodes": 2, "wait_node_ips": healthy_ips()}, container)
    assert code == 0 and result["wait_satisfied"] is False
    assert result["container_ended"] == "container dgxspark-ray-head is exited"
    assert result["reachable"] is True and result["alive_nodes"] == 1 and len(result["missing_node_ips"]) == 1


def test_a_satisfied_wait_returns_its_view_without_more_ray_commands(capsys):
    clock = Clock()
    container = Sequence([(0, fx("nodes_healthy.json"), None)], clock)
    container.answers = {}  # any other Ray command would fail the test with a KeyError
    with mock.patch.object(mod.time, "monotonic", clock), mock.patch.object(mod.time, "sleep", clock.sleep):
        result, code, _client = run(capsys, {"wait_timeout": 30, "wait_nodes": 2}, container)
    assert code == 0 and result["wait_satisfied"] is True and result["alive_nodes"] == 2 and result["reachable"] is True
    assert "status_text" not in result


def test_a_failed_read_without_waiting_still_fails_with_the_wait_fields(capsys):
    container = FakeContainer(dict(HEALTHY, status=(1, b"", b"boom")))
    result, code, _client = run(capsys, {}, container)
    assert code == 1 and result["failed"] and result["wait_satisfied"] is False and result["container_ended"] is None


def test_detail_nodes_runs_one_ray_command_and_returns_the_nodes(capsys):
    """The head's "which nodes are alive" read of a rerun needs the node list only: one Ray command, not four."""
    container = FakeContainer({"nodes": (0, fx("nodes_dead.json"), None)})  # any other command: KeyError
    result, code, _client = run(capsys, {"detail": "nodes"}, container)
    assert code == 0 and result["reachable"] is True
    assert [cmd[3:5] for cmd, _kw in container.calls] == [["list", "nodes"]]
    assert (result["alive_nodes"], result["alive_node_ips"], result["dead_node_ips"]) == (1, ["127.0.0.2"], ["127.0.0.3"])
    assert result["gpus_available"] is None and "status_text" not in result and "ray_version" not in result
