# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The status table of playbooks/status.yml (plugins/filter/cluster_status.py and status_engine.py over
module_utils/_status.py), fed the shapes the playbook registers: docker_host_info's containers, slurp's
release.json, uri's status code and /metrics text, ray_cluster_info's result."""

from __future__ import annotations

import base64
import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter import cluster_status, status_engine
from ansible_collections.dgxspark.vllm.plugins.module_utils import _status

F = {}
for _module in (cluster_status, status_engine):
    F.update(_module.FilterModule().filters())

RELEASE = {"image": "dgxspark/vllm-hybrid:overlay-9a0b", "image_id": "sha256:" + "a1" * 32, "backend": "ray",
           "model": "Qwen/Qwen3-30B-A3B", "served_model_name": "qwen3-30b-a3b",
           "endpoint": {"url": "http://192.168.240.11:8000/v1", "host": "192.168.240.11", "port": 8000}}
METRICS = """# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen3-30b-a3b"} 40.0
vllm:generation_tokens_total{engine="1",model_name="qwen3-30b-a3b"} 2.0
vllm:prompt_tokens_total{engine="0",model_name="qwen3-30b-a3b"} 999.0
"""


def slurped(record):
    return {"content": base64.b64encode(json.dumps(record).encode()).decode(), "encoding": "base64",
            "source": "/etc/dgxspark/vllm/release.json", "changed": False}


def container(name, status="Up 5 minutes"):
    return {"Id": "4f1c2a9b0d3e", "Names": [f"/{name}"], "Status": status, "State": "running",
            "Labels": {"org.dgxspark.vllm.component": "ray"}}


def ray(alive, size=None, ips=None, dead=0, gpus_available="0.0"):
    size = alive if size is None else size
    ips = ips or [f"192.168.100.{11 + i}" for i in range(alive)]
    return {"changed": False, "reachable": True, "alive_nodes": alive, "dead_nodes": dead, "alive_node_ips": ips,
            "gpus_total": f"{float(alive)}", "gpus_available": gpus_available, "ray_version": "2.54.1",
            "container": {"name": "dgxspark-ray-head", "status": "running", "id": "4f1c2a9b0d3e"}}


PAIR = ["spark-1", "spark-2"]
PAIR_CONTAINERS = [[container("dgxspark-ray-head")], [container("dgxspark-ray-worker")]]


def table(members=None, containers=None, **kwargs):
    members = PAIR if members is None else members
    containers = PAIR_CONTAINERS if containers is None else containers
    args = {"cluster": "pair1", "head": members[0], "containers": containers, "release": slurped(RELEASE),
            "health": 200, "metrics": METRICS, "ray": ray(len(members))}
    args.update(kwargs)
    return F["cluster_status"](members, **args)


def test_a_healthy_pair_shows_model_url_health_tokens_and_ray():
    assert table() == [
        "pair1: model qwen3-30b-a3b at http://192.168.240.11:8000, health 200, tokens generated 42;"
        " Ray 2/2 nodes alive (192.168.100.11, 192.168.100.12), GPUs 0.0 free of 2.0, Ray 2.54.1",
        "  spark-1  /dgxspark-ray-head  Up 5 minutes",
        "  spark-2  /dgxspark-ray-worker  Up 5 minutes",
    ]


@pytest.mark.parametrize("code,shown", [(503, "health 503"), (500, "health 500"), (-1, "health no answer")])
def test_an_engine_that_is_down_is_unhealthy_with_its_code(code, shown):
    line = table(health=code, metrics="")[0]
    assert line.startswith(f"pair1: model qwen3-30b-a3b at http://192.168.240.11:8000, {shown}, tokens generated 0"
                           f" (UNHEALTHY: health {code}); Ray 2/2 nodes alive")


def test_ray_short_of_nodes_is_unhealthy_although_health_says_200():
    line = table(ray=dict(ray(1), dead_nodes=1))[0]
    assert line == ("pair1: model qwen3-30b-a3b at http://192.168.240.11:8000, health 200, tokens generated 42"
                    " (UNHEALTHY: Ray has 1 of 2 nodes; /health stays 200 until a request reaches the lost rank);"
                    " Ray 1/2 nodes alive (192.168.100.11), GPUs 0.0 free of 1.0, 1 dead, Ray 2.54.1")


def test_a_container_missing_on_a_worker_shows_an_empty_row_for_it():
    got = table(containers=[[container("dgxspark-ray-head")], []], ray=dict(ray(1), dead_nodes=1))
    assert got[1:] == ["  spark-1  /dgxspark-ray-head  Up 5 minutes", "  spark-2    "]
    assert "UNHEALTHY: Ray has 1 of 2 nodes" in got[0]


@pytest.mark.parametrize("release", [{}, None, {"changed": False, "failed": True, "msg": "file not found"}])
def test_no_release_json_is_not_serving_and_still_shows_ray(release):
    assert table(release=release)[0] == ("pair1: not serving; Ray 2/2 nodes alive (192.168.100.11, 192.168.100.12),"
                                         " GPUs 0.0 free of 2.0, Ray 2.54.1")


def test_a_release_whose_engine_container_is_gone_is_not_serving():
    assert table(containers=[[], [container("dgxspark-ray-worker")]])[0].startswith("pair1: not serving; ")
    mp_release = slurped(dict(RELEASE, backend="mp"))
    assert table(release=mp_release)[0].startswith("pair1: not serving; ")  # the mp container is not there
    mp = [[container("dgxspark-vllm")], [container("dgxspark-vllm")]]
    assert table(release=mp_release, containers=mp)[0].startswith("pair1: model qwen3-30b-a3b at")
    assert table(release=mp_release, containers=[[container("my-vllm")], []], mp_container="my-vllm")[0].startswith(
        "pair1: model qwen3-30b-a3b at")


def test_an_mp_release_has_no_ray_and_its_line_does_not_ask_for_one():
    mp_release = slurped(dict(RELEASE, backend="mp"))
    mp = [[container("dgxspark-vllm")], [container("dgxspark-vllm")]]
    no_ray = {"reachable": False, "msg": "container dgxspark-ray-head does not exist on this node"}
    line = table(release=mp_release, containers=mp, ray=no_ray)[0]
    assert line.endswith("; mp across 2 node(s), no Ray") and "Ray: not running" not in line and "UNHEALTHY" not in line
    assert table(release=mp_release, containers=[[], []])[0] == "pair1: not serving; mp across 2 node(s), no Ray"


def test_ray_not_running_or_the_head_unreachable():
    down = {"reachable": False, "msg": "container dgxspark-ray-head does not exist on this node"}
    assert table(ray=down, release={})[0] == (
        "pair1: not serving; Ray: not running (container dgxspark-ray-head does not exist on this node)")
    assert table(ray={}, release={})[0] == "pair1: not serving; Ray: not running (head unreachable)"
    assert table(head_in_play=False)[0] == "pair1: not serving; Ray: not running (head unreachable)"


def test_a_four_node_cluster_names_every_member_and_counts_four():
    members = ["spark-3", "spark-4", "spark-5", "spark-6"]
    containers = [[container("dgxspark-ray-head")]] + [[container("dgxspark-ray-worker")]] * 3
    got = table(members=members, containers=containers, cluster="cluster_c", ray=ray(4))
    assert got[0] == ("cluster_c: model qwen3-30b-a3b at http://192.168.240.11:8000, health 200, tokens generated 42;"
                      " Ray 4/4 nodes alive (192.168.100.11, 192.168.100.12, 192.168.100.13, 192.168.100.14),"
                      " GPUs 0.0 free of 4.0, Ray 2.54.1")
    assert got[1:] == [f"  {m}  /dgxspark-ray-{'head' if m == 'spark-3' else 'worker'}  Up 5 minutes" for m in members]
    short = table(members=members, containers=containers[:3] + [[]], cluster="cluster_c", ray=ray(3))[0]
    assert "(UNHEALTHY: Ray has 3 of 4 nodes;" in short and "Ray 3/4 nodes alive" in short


def test_several_containers_on_a_node_are_listed_in_one_row():
    got = table(containers=[[container("dgxspark-ray-head"), container("dgxspark-vllm", "Exited (1) 2 hours ago")],
                            [container("dgxspark-ray-worker")]])
    assert got[1] == "  spark-1  /dgxspark-ray-head, /dgxspark-vllm  Up 5 minutes, Exited (1) 2 hours ago"


def test_status_engine_reads_slurp_or_record_and_needs_the_container():
    want = {"url": "http://192.168.240.11:8000", "endpoint": "http://192.168.240.11:8000", "model": "qwen3-30b-a3b"}
    assert F["status_engine"](slurped(RELEASE), containers=PAIR_CONTAINERS[0]) == want
    assert F["status_engine"](RELEASE, containers=PAIR_CONTAINERS[0]) == want
    assert F["status_engine"](slurped(RELEASE), containers=[]) == {}
    assert F["status_engine"](slurped(dict(RELEASE, endpoint={})), containers=PAIR_CONTAINERS[0]) == {}
    assert F["status_engine"]({"content": "bm90IGpzb24="}, containers=PAIR_CONTAINERS[0]) == {}  # "not json"
    assert F["status_engine"]({"failed": True, "msg": "file not found"}, containers=PAIR_CONTAINERS[0]) == {}


def test_tokens_sum_every_label_set_and_ignore_other_counters():
    assert _status.tokens_generated(METRICS) == 42
    assert _status.tokens_generated("vllm:generation_tokens_total 1.5e+03\n") == 1500
    assert _status.tokens_generated(None) == 0


@pytest.mark.parametrize("kwargs,match", [
    ({"head": "spark-9"}, "pair1: its head 'spark-9' is not one of its members"),
    ({"containers": [[]]}, "pair1: 1 container lists for 2 members"),
    ({"containers": "dgxspark-ray-head"}, "containers must be a list"),
    ({"ray": "up"}, "ray must be the ray_cluster_info result"),
])
def test_bad_input_is_refused_naming_the_cluster(kwargs, match):
    with pytest.raises(AnsibleFilterError, match=match):
        table(**kwargs)


def test_status_engine_refuses_a_non_list():
    with pytest.raises(AnsibleFilterError, match="containers must be a list"):
        F["status_engine"](RELEASE, containers="dgxspark-ray-head")
    with pytest.raises(AnsibleFilterError, match="the release must be"):
        F["status_engine"]("release.json", containers=[])


WATCHDOG = {"cluster": "pair1", "verdict": "ok", "detail": "completion answered in 0.01s", "attempts": 1,
            "max_restarts": 3, "interval": 30.0, "failed": False, "last_check": 0.0,
            "last_events": [{"time": 60.0, "cluster": "pair1", "event": "detected", "kind": "stall", "restarts": 0,
                             "detail": "/health 200 but no answer"},
                            {"time": 61.5, "cluster": "pair1", "event": "action", "action": "restart", "restart": 1,
                             "result": "done", "duration": 12.5, "error": ""}]}


def test_the_watchdog_line_and_its_last_events_close_the_table():
    lines = table(watchdog=slurped(WATCHDOG))
    assert lines[3:] == [
        "  watchdog: ok (completion answered in 0.01s); restarts 1 of 3, every 30.0s",
        "    1970-01-01T00:01:00Z detected kind=stall restarts=0 detail=/health 200 but no answer",
        "    1970-01-01T00:01:01Z action action=restart result=done restart=1 duration=12.5",
    ]


def test_a_failed_cluster_and_a_head_without_watchdog():
    failed = dict(WATCHDOG, failed=True, verdict="failed", attempts=3, last_events=[], last_check=None)
    assert table(watchdog=failed)[3] == "  watchdog: FAILED (completion answered in 0.01s); restarts 3 of 3, every 30.0s"
    missing = {"failed": True, "msg": "file not found: /var/lib/dgxspark/watchdog/state.json"}
    assert table(watchdog=missing)[3:] == ["  watchdog: none on the head"]
    assert len(table()) == 3  # without the option, no watchdog line


def test_status_asks_a_loopback_engine_on_the_heads_loopback_and_shows_the_clients_door():
    """Security review M1: the engine binds 127.0.0.1 and the head's door holds the LAN address's port (a key on
    every route). The status, on the head, asks the engine itself; its table shows the clients' URL."""
    behind = dict(RELEASE, endpoint={"url": "http://192.168.240.11:8000/v1", "host": "127.0.0.1", "port": 8000})
    assert F["status_engine"](behind, containers=PAIR_CONTAINERS[0]) == {
        "url": "http://127.0.0.1:8000", "endpoint": "http://192.168.240.11:8000", "model": "qwen3-30b-a3b"}
    wildcard = dict(RELEASE, endpoint={"url": "http://192.168.240.11:8000/v1", "host": "::", "port": 8001})
    assert F["status_engine"](wildcard, containers=PAIR_CONTAINERS[0])["url"] == "http://[::1]:8001"
