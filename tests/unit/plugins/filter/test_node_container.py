# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one engine-container definition (Ray head/worker, mp rank) and the tasks that start containers from it."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter.node_container import FilterModule
from ansible_collections.dgxspark.vllm.plugins.module_utils import _node_container as nc

ROOT = pathlib.Path(__file__).resolve().parents[4]
ROCE_ENV = {"NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
            "VLLM_HOST_IP": "192.168.100.11", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}
SOCKET_ENV = {"NCCL_IB_DISABLE": "1", "VLLM_HOST_IP": "192.168.100.11", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}
F = FilterModule().filters()["node_container"]


def build(**kw):
    kw.setdefault("component", "vllm")
    kw.setdefault("role", "head")
    kw.setdefault("pair", "pair1")
    return F("dgxspark-vllm", "img:1", ["mp", "--", "vllm", "serve", "/models/m"], **kw)


def test_every_engine_container_asks_docker_for_the_gpu_as_gpus_all():
    c = build(env=SOCKET_ENV)
    assert c["device_requests"] == [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]
    assert c["entrypoint"] == ["python3", "/opt/dgxspark/bin/dgxspark-launch"]
    assert (c["network_mode"], c["ipc_mode"], c["privileged"]) == ("host", "host", False)


def test_rdma_fabric_gets_the_verbs_devices_and_ipc_lock_socket_fabric_does_not():
    roce = build(env=ROCE_ENV)
    assert roce["devices"] == ["/dev/infiniband:/dev/infiniband:rwm"]
    assert roce["capabilities"] == ["IPC_LOCK"]
    sock = build(env=SOCKET_ENV)
    assert sock["devices"] == [] and sock["capabilities"] == []
    # NCCL_NET=IB alone forces IB in NCCL: the devices must come with it.
    assert build(env={"NCCL_NET": "IB"})["devices"]
    assert not build(env={"NCCL_NET": "Socket", "NCCL_IB_DISABLE": "0"})["devices"]
    assert build(env=SOCKET_ENV, rdma=True)["devices"] and not build(env=ROCE_ENV, rdma=False)["devices"]
    assert build(env=ROCE_ENV, capabilities=["sys_nice", "IPC_LOCK"])["capabilities"] == ["IPC_LOCK", "SYS_NICE"]


def test_every_engine_container_drops_every_capability_and_gets_back_only_what_it_needs():
    """Issue 15.5: Docker's default capabilities (NET_RAW among them: a Ray task could sniff the host's networks)
    are all dropped; RDMA gets IPC_LOCK back, the inventory's extra ones come on top, nothing else."""
    for env, added in ((SOCKET_ENV, []), (ROCE_ENV, ["IPC_LOCK"])):
        c = build(env=env)
        assert c["cap_drop"] == ["ALL"] and c["capabilities"] == added
    assert build(env=SOCKET_ENV, capabilities=["sys_ptrace"])["capabilities"] == ["SYS_PTRACE"]
    # --privileged is all capabilities anyway: nothing to drop (an explicit opt-out, off by default).
    assert build(env=SOCKET_ENV, privileged=True)["cap_drop"] == []


def test_spark_defaults_ulimits_shm_restart_and_compile_caches():
    c = build(env=ROCE_ENV, volumes=["/srv/models:/models:ro"])
    assert c["ulimits"] == ["nofile:1048576:1048576", "memlock:-1:-1", "stack:67108864:67108864"]
    assert (c["shm_size"], c["restart_policy"], c["stop_timeout"]) == ("16g", "unless-stopped", 30)
    assert c["volumes"] == ["/srv/models:/models:ro", "dgxspark-flashinfer-cache:/root/.cache/flashinfer",
                            "dgxspark-vllm-cache:/root/.cache/vllm", "dgxspark-triton-cache:/root/.triton"]
    assert c["labels"] == {"org.dgxspark.vllm.component": "vllm", "org.dgxspark.vllm.role": "head",
                           "org.dgxspark.vllm.pair": "pair1"}
    assert build(env={}, cache_volumes={})["volumes"] == []
    lab = build(env={}, ulimits=["nofile:20000:20000"], shm_size="2g", stop_timeout=10, restart_policy="no")
    assert (lab["ulimits"], lab["shm_size"], lab["stop_timeout"], lab["restart_policy"]) == (
        ["nofile:20000:20000"], "2g", 10, "no")


def test_none_means_the_spark_default_as_the_mp_path_passes_unset_ray_cluster_settings():
    assert build(env=ROCE_ENV, shm_size=None, ulimits=None, capabilities=None, privileged=None, restart_policy=None,
                 stop_timeout=None, cache_volumes=None, rdma_devices=None) == build(env=ROCE_ENV)


def test_environment_values_are_strings():
    assert build(env={"A": 1, "B": True, "C": "x"})["env"] == {"A": "1", "B": "1", "C": "x"}


def _documented_engine_settings():
    """The dgxspark_engine_* block of roles/ray_cluster/README.md, as YAML."""
    text = (ROOT / "roles" / "ray_cluster" / "README.md").read_text()
    block = next(b.split("```", 1)[0] for b in text.split("```yaml")[1:] if "dgxspark_engine_shm_size" in b)
    return yaml.safe_load(block)


def test_the_documented_engine_settings_are_the_definitions_defaults_and_no_role_defaults_them_again():
    documented = _documented_engine_settings()
    assert documented == {nc.ENGINE_PREFIX + key: value for key, value in nc.ENGINE_DEFAULTS.items()}
    assert nc.ENGINE_DEFAULTS["ulimits"] == nc.DEFAULT_ULIMITS
    assert nc.ENGINE_DEFAULTS["cache_volumes"] == nc.DEFAULT_CACHE_VOLUMES
    # The settings are resolved once (the fleet action): no role gives the old names a default of its own, which
    # would hide the inventory's neutral name.
    for path in ROOT.glob("roles/*/defaults/main.yml"):
        defaults = yaml.safe_load(path.read_text()) or {}
        assert not {nc.ENGINE_ALIAS_PREFIX + key for key in nc.ENGINE_DEFAULTS} & set(defaults), path


def test_engine_settings_take_the_neutral_name_then_the_alias_then_the_default():
    settings, problems, aliases = nc.engine_settings({
        "dgxspark_engine_shm_size": "4g", "ray_cluster_shm_size": "2g",  # the neutral name wins
        "ray_cluster_ulimits": ["nofile:20000:20000"],                    # the alias, when alone
        "dgxspark_engine_privileged": "no", "dgxspark_engine_stop_timeout": "45", "dgxspark_engine_capabilities": None})
    assert problems == []
    assert aliases == [("ray_cluster_ulimits", "dgxspark_engine_ulimits")]
    assert settings == dict(nc.ENGINE_DEFAULTS, shm_size="4g", ulimits=["nofile:20000:20000"], privileged=False,
                            stop_timeout=45)
    # Resolved settings make the same container as the keywords did (an upgrade restarts no engine).
    assert build(engine=settings) == build(shm_size="4g", ulimits=["nofile:20000:20000"], stop_timeout=45)
    assert build(engine=nc.ENGINE_DEFAULTS) == build()
    # A keyword given to the filter wins over the node's engine settings.
    assert build(engine=settings, shm_size="8g")["shm_size"] == "8g"


@pytest.mark.parametrize("values,problem", [
    ({"dgxspark_engine_privileged": "maybe"}, "dgxspark_engine_privileged: is 'maybe', not true or false"),
    ({"ray_cluster_stop_timeout": "30s"}, "ray_cluster_stop_timeout: is '30s', not a whole number of seconds"),
    ({"dgxspark_engine_stop_timeout": 0}, "dgxspark_engine_stop_timeout: stop timeout 0 is under 7 s"),
    # Below 7 s the launcher's grace to stop Ray was under a second (negative below 5 s: `ray start --stop-timeout -1`).
    ({"dgxspark_engine_stop_timeout": 4}, "dgxspark_engine_stop_timeout: stop timeout 4 is under 7 s"),
    ({"dgxspark_engine_ulimits": "nofile:1:1"}, "dgxspark_engine_ulimits: is 'nofile:1:1', not a list"),
    ({"dgxspark_engine_ulimits": ["nofiles:1:1"]}, "dgxspark_engine_ulimits: ulimit 'nofiles:1:1' is not NAME:SOFT"),
    ({"dgxspark_engine_shm_size": "lots"}, "dgxspark_engine_shm_size: shm size 'lots' is not a size"),
    ({"dgxspark_engine_restart_policy": "sometimes"}, "dgxspark_engine_restart_policy: restart policy 'sometimes'"),
    ({"dgxspark_engine_rdma_devices": "/srv/ib"}, "dgxspark_engine_rdma_devices: RDMA devices '/srv/ib' must be"),
    ({"dgxspark_engine_cache_volumes": ["x"]}, "dgxspark_engine_cache_volumes: is ['x'], not a mapping"),
    ({"dgxspark_engine_cache_volumes": {"/root/.triton": "bad name"}}, "not a Docker volume name"),
])
def test_a_bad_engine_setting_is_a_problem_naming_the_variable(values, problem):
    settings, problems, _aliases = nc.engine_settings(values)
    assert len(problems) == 1 and problem in problems[0], problems
    assert set(settings) == set(nc.ENGINE_DEFAULTS)


@pytest.mark.parametrize("kw,match", [
    ({"ulimits": ["stack=67108864"]}, "not NAME:SOFT"),
    ({"ulimits": ["nofile:1:1", "nofile:2:2"]}, "given twice"),
    ({"ulimits": ["memlock:lots:-1"]}, "not a number"),
    ({"volumes": ["models"]}, "SOURCE:/CONTAINER/PATH"),
    ({"cache_volumes": {"/root/.triton": "bad name"}}, "not a Docker volume name"),
    ({"volumes": ["/x:/root/.triton"]}, "both a bind mount and a cache volume"),
    ({"shm_size": "lots"}, "not a size"),
    ({"restart_policy": "sometimes"}, "restart policy"),
    ({"role": "boss"}, "role one of"),
    ({"env": {"BAD-NAME": "1"}}, "not valid"),
    ({"rdma_devices": "/srv/ib"}, "under /dev"),
])
def test_bad_input_stops_naming_the_container_and_the_input(kw, match):
    with pytest.raises(AnsibleFilterError, match=f"node_container \\(dgxspark-vllm\\): .*{match}"):
        build(**kw)


def _tasks(path, module):
    found = []

    def walk(tasks):
        for task in tasks or []:
            if module in task and (module != "community.docker.docker_container"
                                   or task[module].get("state", "started") == "started"):
                found.append(task)
            for key in ("block", "rescue", "always"):
                walk(task.get(key))
    walk(yaml.safe_load(path.read_text()))
    return found


def _container_tasks(path):
    return _tasks(path, "community.docker.docker_container")


def test_one_action_runs_every_engine_container():
    """The Ray head, the Ray workers and the mp ranks all run through the engine_container action, from the one
    definition: no task file of the roles starts an engine container from a spec of its own. The other containers roles
    start are the watchdog, the gateway's HAProxy, Prometheus and the node exporters, which are no engine containers:
    no GPU, no devices, labelled with their component."""
    starters = {str(p.relative_to(ROOT)) for p in ROOT.glob("roles/*/tasks/*.yml") if _container_tasks(p)}
    assert starters == {"roles/watchdog/tasks/present.yml",
                        "roles/gateway/tasks/apply.yml", "roles/monitoring/tasks/prometheus.yml",
                        "roles/monitoring/tasks/node.yml"}
    (watchdog,) = _container_tasks(ROOT / "roles/watchdog/tasks/present.yml")
    spec = watchdog["community.docker.docker_container"]
    # Its spec is described once (the labels carry its fingerprint) and the container task takes it from there.
    assert spec["labels"] == "{{ watchdog_spec.labels }}"
    (described,) = [task["vars"]["watchdog_spec_now"]
                    for task in yaml.safe_load((ROOT / "roles/watchdog/tasks/present.yml").read_text())
                    if task.get("ansible.builtin.set_fact", {}).get("watchdog_spec") == "{{ watchdog_spec_now }}"]
    assert described["labels"]["org.dgxspark.vllm.component"] == "watchdog"
    assert not {"device_requests", "devices", "privileged", "capabilities"} & (set(spec) | set(described))
    (haproxy,) = _container_tasks(ROOT / "roles/gateway/tasks/apply.yml")
    spec = haproxy["community.docker.docker_container"]
    assert spec["labels"]["org.dgxspark.vllm.component"] == "{{ gateway_apply_component }}"
    assert not {"device_requests", "devices", "privileged", "capabilities"} & set(spec)
    assert spec["cap_drop"] == ["ALL"] and spec["read_only"] is True
    # Prometheus and the node exporters (roles/monitoring): non-root, read-only, no capability, no device.
    for path, component in (("roles/monitoring/tasks/prometheus.yml", "prometheus"),
                            ("roles/monitoring/tasks/node.yml", "node-exporter")):
        (monitor,) = _container_tasks(ROOT / path)
        spec = monitor["community.docker.docker_container"]
        assert spec["labels"]["org.dgxspark.vllm.component"] == component
        assert not {"device_requests", "devices", "privileged", "capabilities", "env"} & set(spec)
        assert spec["cap_drop"] == ["ALL"] and spec["read_only"] is True and spec["security_opts"] == ["no-new-privileges"]
        assert spec["user"] == "{{ monitoring_uid }}:{{ monitoring_gid }}"
    engines = {str(p.relative_to(ROOT)): [t["dgxspark.vllm.engine_container"]["spec"]
                                          for t in _tasks(p, "dgxspark.vllm.engine_container")]
               for p in ROOT.glob("roles/*/tasks/*.yml")}
    assert {path: specs for path, specs in engines.items() if specs} == {
        "roles/ray_cluster/tasks/apply.yml": ["{{ ray_cluster_spec.container }}"] * 2,  # the head, the workers
        "roles/vllm_serve/tasks/present.yml": ["{{ vllm_serve_mp_spec.container }}"],
    }


def test_every_option_of_the_definition_reaches_the_container_module():
    """No backend may drop or hand-write an option: the action hands the container module every key of the one
    definition, as it is."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils._engine_container import module_args

    for env in (ROCE_ENV, SOCKET_ENV):
        spec = build(env=env)
        args = module_args(spec, image_id="", fingerprint="abc123", restart=False)
        for key, value in spec.items():
            if key != "labels":
                assert args[key] == value, key
        assert args["labels"] == dict(spec["labels"], **{"org.dgxspark.vllm.config": "abc123"})


def test_the_cache_volume_names_are_those_every_engine_container_mounts():
    """teardown_purge removes the volumes the engine containers use: the defaults when none are set, the given ones
    otherwise, validated the same way."""
    from ansible_collections.dgxspark.vllm.plugins.filter.node_cache_volumes import FilterModule as Caches

    names = Caches().filters()["node_cache_volumes"]
    mounted = sorted(v.split(":", 1)[0] for v in build()["volumes"] if v.split(":", 1)[0] in nc.DEFAULT_CACHE_VOLUMES.values())
    assert names(None) == mounted == ["dgxspark-flashinfer-cache", "dgxspark-triton-cache", "dgxspark-vllm-cache"]
    assert names({"/root/.cache/vllm": "mine", "/root/.triton": "mine"}) == ["mine"]
    assert names({}) == []
    with pytest.raises(AnsibleFilterError, match="not a Docker volume name"):
        names({"/root/.cache/vllm": "bad name"})
    with pytest.raises(AnsibleFilterError, match="mapping"):
        names(["dgxspark-vllm-cache"])
    # The defaults ray_cluster documents are the ones the definition uses.
    assert names(_documented_engine_settings()["dgxspark_engine_cache_volumes"]) == names(None)


@pytest.mark.parametrize("given", [None, {"/root/.cache/vllm": "mine", "/root/.triton": "mine"}, {}])
def test_teardown_removes_the_volumes_of_the_engine_settings_the_fleet_resolved(given):
    """teardown.yml takes the values of dgxspark_node.engine.cache_volumes (the fleet action's engine_settings),
    unique and sorted, in place of the node_cache_volumes filter: the same names, defaults included."""
    settings, problems, _aliases = nc.engine_settings({"dgxspark_engine_cache_volumes": given})
    assert problems == []
    teardown = sorted(set(settings["cache_volumes"].values()))
    assert teardown == nc.cache_volume_names(given)
    playbook = (pathlib.Path(__file__).resolve().parents[4] / "playbooks" / "teardown.yml").read_text()
    assert 'teardown_purge_volumes: "{{ dgxspark_node.engine.cache_volumes.values() | unique | sort }}"' in playbook
