# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Security review L4: every long-running container the collection starts rotates its logs, from one fleet setting
(dgxspark_container_logs), checked before any task changes a node."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.container_logs import FilterModule
from ansible_collections.dgxspark.vllm.plugins.filter.node_container import FilterModule as NodeContainer
from ansible_collections.dgxspark.vllm.plugins.module_utils import _inputs
from ansible_collections.dgxspark.vllm.plugins.module_utils._container_logs import LogsError, container_logs

ROOT = pathlib.Path(__file__).resolve().parents[4]
F = FilterModule().filters()["container_logs"]
DEFAULT = {"log_driver": "json-file", "log_options": {"max-size": "50m", "max-file": "5"}}


def test_l4_unset_is_json_file_rotated_at_five_files_of_50_mb():
    for unset in (None, {}, ""):
        assert container_logs(unset) == DEFAULT
    assert F(None, "log_driver") == "json-file"
    assert F(None, "log_options") == {"max-size": "50m", "max-file": "5"}


def test_l4_options_of_the_default_driver_go_over_the_defaults_as_strings():
    assert container_logs({"options": {"max-size": "200m"}}) == {
        "log_driver": "json-file", "log_options": {"max-size": "200m", "max-file": "5"}}
    assert container_logs({"options": {"max-file": 3, "compress": "true"}})["log_options"] == {
        "max-size": "50m", "max-file": "3", "compress": "true"}


def test_l4_other_drivers_take_only_their_own_options():
    assert container_logs({"driver": "local"}) == {"log_driver": "local", "log_options": {}}
    assert container_logs({"driver": "local", "options": {"max-size": "10m"}})["log_options"] == {"max-size": "10m"}
    assert container_logs({"driver": "journald", "options": {"tag": "{{.Name}}"}}) == {
        "log_driver": "journald", "log_options": {"tag": "{{.Name}}"}}
    assert container_logs({"driver": "none"}) == {"log_driver": "none", "log_options": {}}


@pytest.mark.parametrize("value,match", [
    ({"driver": "json-file", "options": {"max-file": "5", "max-size": ""}}, "max-size must be 1 to 256"),
    ({"options": {"max-size": "lots"}}, "max-size is 'lots'"),
    ({"options": {"max-size": "0m"}}, "max-size is '0m'"),
    ({"options": {"max-file": "0"}}, "max-file is '0'"),
    ({"options": {"max-file": True}}, "option max-file is a bool"),
    ({"options": {"Max_Size": "50m"}}, "not a Docker log option name"),
    ({"options": {"tag": "a\nb"}}, "printable"),
    ({"driver": "syslogd"}, "driver is 'syslogd'; set it to one of json-file, local"),
    ({"driver": "none", "options": {"max-size": "1m"}}, "keeps no logs and takes no options"),
    ({"drivers": "local"}, "has drivers; it takes only driver and options"),
    ({"options": ["max-size=50m"]}, "options is a list"),
    ("json-file", "is a str; set it to a mapping"),
])
def test_l4_a_setting_docker_would_refuse_is_refused_with_the_fix(value, match):
    with pytest.raises(LogsError, match=match):
        container_logs(value)
    with pytest.raises(AnsibleFilterError, match="dgxspark_container_logs"):
        F(value)


def test_l4_json_file_without_max_size_is_the_unbounded_file_and_is_refused():
    """What Docker does by default (json-file, no option) is what the review found; asking for it is refused."""
    with pytest.raises(LogsError, match="grows until the disk is full; set options.max-size"):
        container_logs({"driver": "json-file", "options": {"max-size": None}})


def test_l4_the_fleet_checks_the_setting_at_the_first_task_naming_host_variable_and_fix():
    assert _inputs.VARIABLES["dgxspark_container_logs"] == _inputs.LOGS_KIND
    setting = {"driver": "json-file", "options": {"max-size": "huge"}}
    problems = _inputs.check_host("spark-1", {"dgxspark_container_logs": setting})
    assert problems == ["host spark-1: dgxspark_container_logs option max-size is 'huge'; give a size such as 50m "
                        "(a number and k, m or g)"]
    assert _inputs.check_host("spark-1", {"dgxspark_container_logs": {"driver": "local"}}) == []


def test_l4_every_engine_container_carries_the_fleet_setting():
    node_container = NodeContainer().filters()["node_container"]
    spec = node_container("dgxspark-vllm", "img:1", ["mp"], component="vllm", role="head", pair="p")
    assert (spec["log_driver"], spec["log_options"]) == (DEFAULT["log_driver"], DEFAULT["log_options"])
    spec = node_container("dgxspark-vllm", "img:1", ["mp"], component="vllm", role="head", pair="p",
                          logs={"driver": "journald"})
    assert (spec["log_driver"], spec["log_options"]) == ("journald", {})
    with pytest.raises(AnsibleFilterError, match="node_container .dgxspark-vllm.: dgxspark_container_logs driver"):
        node_container("dgxspark-vllm", "img:1", ["mp"], component="vllm", role="head", pair="p",
                       logs={"driver": "bogus"})


def _container_tasks(path):
    found = []

    def walk(tasks):
        for task in tasks or []:
            if "community.docker.docker_container" in task and task["community.docker.docker_container"].get(
                    "state", "started") != "absent":
                found.append(task["community.docker.docker_container"])
            for key in ("block", "rescue", "always"):
                walk(task.get(key))
    walk(yaml.safe_load(path.read_text()))
    return found


def test_l4_every_task_that_starts_a_container_passes_the_fleet_log_setting():
    """At 13f6075 no task set log_driver or log_options: Docker's json-file grew without a bound."""
    starters = {p: tasks for p in ROOT.glob("roles/*/tasks/*.yml") if (tasks := _container_tasks(p))}
    assert len(starters) == 4  # the watchdog, the gateway's HAProxy, Prometheus, the node exporters
    # The engine containers go through the engine_container action, which hands the module the definition's options,
    # the fleet's log setting among them.
    from ansible_collections.dgxspark.vllm.plugins.module_utils._engine_container import module_args
    from ansible_collections.dgxspark.vllm.plugins.module_utils._node_container import node_container
    spec = node_container("dgxspark-vllm", "vllm:1", ["mp"], component="vllm", role="head", pair="pair1",
                          logs={"driver": "local", "options": {"max-size": "20m"}})
    options = module_args(spec, image_id="", fingerprint="ab12", restart=False)
    assert (options["log_driver"], options["log_options"]) == ("local", {"max-size": "20m"})
    for path, tasks in starters.items():
        for args in tasks:
            for key in ("log_driver", "log_options"):
                value = str(args.get(key, ""))
                assert "dgxspark.vllm.container_logs" in value or ".container." + key in value or (
                    "watchdog_spec.logs." + key in value), f"{path}: {key} is {value!r}"
    watchdog = (ROOT / "roles/watchdog/tasks/present.yml").read_text()
    # The watchdog's spec is settled by its config label: the log setting must be in it, or a change would never reach
    # a running watchdog.
    label = watchdog[watchdog.index("org.dgxspark.vllm.config: >-"):watchdog.index("watchdog_now:")]
    assert "dgxspark_container_logs | default(none) | dgxspark.vllm.container_logs]" in label, label
