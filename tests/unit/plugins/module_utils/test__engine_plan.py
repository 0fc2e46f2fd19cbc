# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One engine plan for the Ray head and workers and the mp ranks (issue 35): the cluster's fingerprint (the value the
roles' Jinja computed, so that an upgrade restarts no engine), each member's settledness with its reason, and the
switch, with start times compared as times."""

from __future__ import annotations

import datetime

import pytest

from ansible.parsing.dataloader import DataLoader
from ansible.plugins.filter.core import to_json
from ansible.template import Templar, trust_as_template

from ansible_collections.dgxspark.vllm.plugins.filter.node_container import FilterModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import _engine_plan as ep

NODE_CONTAINER = FilterModule().filters()["node_container"]
MEMBERS = ["spark-1", "spark-2"]
ENV = {"NCCL_IB_DISABLE": "1", "VLLM_HOST_IP": "192.168.100.11", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}


def spec(role):
    container = NODE_CONTAINER(f"dgxspark-ray-{role}", "lab/vllm-node:0.14", [role, "--node-ip", "192.168.100.11"],
                               component="ray", role=role, pair="pair1", env=ENV)
    return {"image_id": "sha256:" + "a" * 64, "container": container, "extra": "", "launcher": "0" * 40,
            "token": "f" * 64}


SPECS = {"spark-1": spec("head"), "spark-2": spec("worker")}
IDS = {"spark-1": "sha256:" + "a" * 64, "spark-2": "sha256:" + "b" * 64}


def running(print_, host, started="2026-12-07T10:00:00.5Z", component="ray"):
    return {"running": True, "component": component, "labels": {ep.LABEL: print_}, "image_id": IDS[host],
            "restart_policy": "unless-stopped", "started_at": started}


def test_the_fingerprint_is_the_one_the_roles_jinja_computed():
    """An upgrade of the collection must restart no engine: the label every container carries is compared with this."""
    templar = Templar(loader=DataLoader(), variables={"specs": [SPECS[m] for m in MEMBERS]})
    jinja = templar.template(trust_as_template("{{ specs | to_json | hash('sha256') | truncate(16, true, '') }}"))
    assert ep.fingerprint([SPECS[m] for m in MEMBERS], to_json) == jinja and len(jinja) == 16


@pytest.mark.parametrize("text, expected", [
    ("2026-12-07T10:00:00.123456789Z", datetime.datetime(2026, 12, 7, 10, 0, 0, 123456, datetime.timezone.utc)),
    ("2026-12-07T10:00:00Z", datetime.datetime(2026, 12, 7, 10, 0, 0, 0, datetime.timezone.utc)),
    ("2026-12-07T11:00:00.5+01:00", datetime.datetime(2026, 12, 7, 10, 0, 0, 500000, datetime.timezone.utc)),
    ("0001-01-01T00:00:00Z", None), ("", None),
])
def test_start_times_are_read_as_times(text, expected):
    assert ep.started(text) == expected


def test_start_times_compare_as_times_where_text_does_not():
    """Docker trims trailing zeros of the fraction: as text ".5Z" sorts after ".5000001Z", as times it is before."""
    early, late = "2026-12-07T10:00:00.5Z", "2026-12-07T10:00:00.500001Z"
    assert early > late  # the string comparison the roles made
    assert ep.started(early) < ep.started(late)
    with pytest.raises(ep.PlanError, match="is not a start time"):
        ep.started("yesterday")


def test_a_cluster_running_as_its_specs_say_is_settled_and_not_switched():
    print_ = ep.fingerprint([SPECS[m] for m in MEMBERS], to_json)
    befores = {"spark-1": running(print_, "spark-1"),
               "spark-2": running(print_, "spark-2", "2026-12-07T10:00:00.500001Z")}
    found = ep.plan(MEMBERS, "spark-1", SPECS, befores, IDS, to_json, workers_follow_head=True)
    assert found["fingerprint"] == print_ and not found["switch"] and found["reasons"] == []
    assert all(node["settled"] for node in found["nodes"].values())


@pytest.mark.parametrize("change, why", [
    ({"running": False}, "spark-2: its container is not running"),
    ({"labels": {ep.LABEL: "0" * 16}}, "spark-2: its container runs another configuration"),
    ({"image_id": IDS["spark-1"]}, "spark-2: its container runs another image"),  # the head's ID, not its own
    ({"restart_policy": "no"}, "spark-2: its restart policy is no, not unless-stopped"),
    ({"started_at": "2026-12-07T09:59:59.999999Z"}, "spark-2: its container started before its head's"),
])
def test_each_reason_to_switch_is_named(change, why):
    print_ = ep.fingerprint([SPECS[m] for m in MEMBERS], to_json)
    befores = {"spark-1": running(print_, "spark-1"), "spark-2": dict(running(print_, "spark-2"), **change)}
    found = ep.plan(MEMBERS, "spark-1", SPECS, befores, IDS, to_json, workers_follow_head=True)
    assert found["switch"] and found["reasons"][0].startswith(why), found["reasons"]
    assert found["nodes"]["spark-1"]["settled"]


def test_mp_ranks_must_be_vllm_containers_and_no_worker_follows_a_head():
    print_ = ep.fingerprint([SPECS[m] for m in MEMBERS], to_json)
    befores = {"spark-1": running(print_, "spark-1", component="vllm"),
               "spark-2": running(print_, "spark-2", "2026-12-07T09:00:00Z", component="vllm")}
    assert not ep.plan(MEMBERS, "spark-1", SPECS, befores, IDS, to_json, component="vllm")["switch"]
    befores["spark-2"]["component"] = "ray"
    found = ep.plan(MEMBERS, "spark-1", SPECS, befores, IDS, to_json, component="vllm")
    assert found["reasons"] == ["spark-2: its container is a ray container, not vllm"]
    found = ep.plan(MEMBERS, "spark-1", SPECS, {}, IDS, to_json, component="vllm")
    assert found["reasons"] == ["spark-1: it has no engine container", "spark-2: it has no engine container"]


def test_nothing_is_planned_without_every_members_spec():
    with pytest.raises(ep.PlanError, match="no container spec from spark-2 .it failed or is unreachable."):
        ep.plan(MEMBERS, "spark-1", {"spark-1": SPECS["spark-1"]}, {}, IDS, to_json)


def test_the_started_before_test_compares_times_and_knows_no_start():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.dgxspark.vllm.plugins.test.started_before import TestModule

    before = TestModule().tests()["started_before"]
    assert before("2026-12-07T10:00:00.5Z", "2026-12-07T10:00:00.500001Z")
    assert not before("2026-12-07T10:00:00.500001Z", "2026-12-07T10:00:00.5Z")
    assert not before("", "2026-12-07T10:00:00Z") and not before("0001-01-01T00:00:00Z", "2026-12-07T10:00:00Z")
    with pytest.raises(AnsibleFilterError, match="started_before: 'soon' is not a start time"):
        before("soon", "2026-12-07T10:00:00Z")
