# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of plugins/module_utils/_ray.py against outputs captured from Ray 2.54.1."""

from __future__ import annotations

import pathlib

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _ray

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "ray"
HEAD_ID = "296e1ad97c1d77ccb06c60564d20144af493ac61b7d26b5bc0178626"
WORKER_ID = "41803fbf52b23258dea376fb264960f03a9363963ddd13fd53b927ae"


def fx(name):
    return (FIXTURES / name).read_text()


def test_version():
    assert _ray.parse_version(fx("version.txt")) == "2.54.1"
    assert _ray.parse_version("bash: ray: command not found") is None


def test_nodes_healthy():
    nodes = _ray.parse_nodes(fx("nodes_healthy.json"))
    assert [(n["ip"], n["state"], n["alive"], n["is_head"], n["gpus"]) for n in nodes] == [
        ("127.0.0.2", "ALIVE", True, True, 1.0), ("127.0.0.3", "ALIVE", True, False, 1.0)]
    assert nodes[0]["resources"]["CPU"] == 2.0
    assert nodes[0]["resources"]["memory"].endswith("GiB")


def test_nodes_dead():
    nodes = _ray.parse_nodes(fx("nodes_dead.json"))
    assert [(n["node_id"], n["ip"], n["state"]) for n in nodes] == [
        (HEAD_ID, "127.0.0.2", "ALIVE"), (WORKER_ID, "127.0.0.3", "DEAD")]
    assert nodes[1]["state_message"] == "Unexpected termination: health check failed due to missing too many heartbeats"


def test_nodes_brief_format():
    nodes = _ray.parse_nodes(fx("nodes_healthy_brief.json"))
    assert [n["ip"] for n in nodes if n["alive"]] == ["127.0.0.2", "127.0.0.3"]


def test_placement_groups():
    groups = _ray.parse_placement_groups(fx("pgs_healthy.json"))
    assert [(g["name"], g["state"], g["is_detached"], g["scheduling_state"]) for g in groups] == [
        ("", "PENDING", True, "INFEASIBLE"), ("vllm_tp2", "CREATED", True, "FINISHED")]
    assert groups[1]["bundles"] == [
        {"index": 0, "resources": {"CPU": 1.0, "GPU": 1.0}, "node_id": HEAD_ID},
        {"index": 1, "resources": {"CPU": 1.0, "GPU": 1.0}, "node_id": WORKER_ID}]
    assert groups[0]["bundles"] == [{"index": 0, "resources": {"GPU": 4.0}, "node_id": None}]
    assert groups[1]["strategy"] is None  # not in Ray 2.54's state API output


def test_placement_groups_after_node_death():
    groups = _ray.parse_placement_groups(fx("pgs_dead.json"))
    assert {g["name"]: g["state"] for g in groups} == {"": "PENDING", "vllm_tp2": "RESCHEDULING"}


def test_empty_list_is_plain_text():
    assert _ray.parse_placement_groups(fx("pgs_empty.txt")) == []
    assert _ray.parse_nodes("No resource in the cluster\n") == []


@pytest.mark.parametrize("text", ["Traceback (most recent call last):", '{"a": 1}', "[1, 2]"])
def test_not_a_list(text):
    with pytest.raises(_ray.RayParseError):
        _ray.parse_nodes(text)


def test_status():
    assert _ray.parse_status(fx("status_healthy.txt")) == {
        "active_nodes": 2, "gpus_total": 2.0, "gpus_used": 0.0, "gpus_available": 2.0}
    assert _ray.parse_status(fx("status_dead.txt"))["active_nodes"] == 2  # lags the state API
    assert _ray.parse_status(fx("status_nogpu.txt"))["gpus_total"] == 0.0
    with pytest.raises(_ray.RayParseError,
                       match="not `ray status` output: ray.exceptions.RpcError: Timed out while waiting for GCS"):
        _ray.parse_status(fx("status_down.err"))


def test_status_gpus_in_use():
    text = fx("status_healthy.txt").replace(" 0.0/2.0 GPU", " 1.5/2.0 GPU")
    assert _ray.parse_status(text)["gpus_available"] == 0.5


def test_summarise_dead_worker():
    nodes = _ray.parse_nodes(fx("nodes_dead.json"))
    assert _ray.summarise(nodes, _ray.parse_status(fx("status_dead.txt"))) == {
        "alive_nodes": 1, "dead_nodes": 1, "alive_node_ips": ["127.0.0.2"], "dead_node_ips": ["127.0.0.3"],
        "gpus_total": 1.0, "gpus_available": 1.0}


def test_summarise_restarted_worker_ip_not_dead():
    nodes = _ray.parse_nodes(fx("nodes_dead.json")) + _ray.parse_nodes(fx("nodes_healthy.json"))[1:]
    summary = _ray.summarise(nodes, None)
    assert (summary["alive_nodes"], summary["dead_nodes"], summary["dead_node_ips"], summary["gpus_available"]) == (
        2, 1, [], None)


def test_commands():
    assert _ray.list_nodes_cmd("http://127.0.0.1:8265") == [
        "ray", "list", "nodes", "--format", "json", "--detail", "--limit", "10000",
        "--address", "http://127.0.0.1:8265"]
    assert _ray.list_placement_groups_cmd("http://x:1")[:4] == ["ray", "list", "placement-groups", "--format"]
