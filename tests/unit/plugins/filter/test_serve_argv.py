# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The release record and its vllm serve argv (plugins/filter/serve_argv.py over module_utils/_release.py).

The pinned argvs below are what 0.1.0's Jinja in roles/vllm_serve/tasks/present.yml rendered for the same inputs
(the lab's settings): the engine containers' fingerprints hash the argv, so a byte of difference restarts every
node of every cluster on the upgrade.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.dgxspark.vllm.plugins.filter import release as release_filter
from ansible_collections.dgxspark.vllm.plugins.filter import release_compare, release_record, release_variables
from ansible_collections.dgxspark.vllm.plugins.filter import serve_argv as serve_argv_filter
from ansible_collections.dgxspark.vllm.plugins.module_utils import _release

ROOT = pathlib.Path(__file__).resolve().parents[4]
F = {}
for _module in (release_filter, release_record, release_variables, release_compare, serve_argv_filter):
    F.update(_module.FilterModule().filters())
HEAD_LAN = "192.168.241.11"
HEAD_FABRIC = "192.168.110.11"

# The role's variables as they reach the role in the lab (TP/PP through dgxspark_* defaults: strings).
LAB_VARS = {
    "vllm_serve_image": "dgxspark/vllm-hybrid:overlay-3f1c", "vllm_serve_model": "Qwen/Qwen3.5-122B-A10B-FP8",
    "vllm_serve_model_revision": "", "vllm_serve_served_model_name": "qwen3.5-122b-a10b-fp8",
    "vllm_serve_backend": "ray", "vllm_serve_tensor_parallel_size": "2", "vllm_serve_pipeline_parallel_size": "1",
    "vllm_serve_max_model_len": 32768, "vllm_serve_gpu_memory_utilization": 0.80, "vllm_serve_kv_cache_dtype": "fp8",
    "vllm_serve_reasoning_parser": "qwen3", "vllm_serve_speculative_config": {}, "vllm_serve_enforce_eager": None,
    "vllm_serve_enable_auto_tool_choice": False, "vllm_serve_tool_call_parser": "",
    "vllm_serve_trust_remote_code": False, "vllm_serve_extra_args": [],
}
ALL_ON = {"vllm_serve_speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
          "vllm_serve_enable_auto_tool_choice": True, "vllm_serve_tool_call_parser": "qwen3_coder",
          "vllm_serve_trust_remote_code": True, "vllm_serve_extra_args": ["--max-num-seqs", 8, "--enable-prefix-caching"]}
ENDPOINT = {"url": f"http://{HEAD_LAN}:8000/v1", "host": HEAD_LAN, "port": 8000}


def values(**overrides):
    """The role variables' values in release_variables order, as the role's query('vars', ...) hands them over."""
    merged = dict(LAB_VARS, **overrides)
    return [merged[name] for name in F["release_variables"]("vllm_serve_")]


def release(enforce_eager=False, endpoint=None, **overrides):
    wanted = F["release"](values(**overrides), host="rel-1")
    return F["release_record"](wanted, enforce_eager=enforce_eager, remedies=[], endpoint=endpoint or ENDPOINT)


def argv(rel, rank, nodes=2):
    return F["serve_argv"](rel, rank=rank, nodes=nodes, master_addr=HEAD_FABRIC, master_port=29501)


BASE = ["vllm", "serve", "/models/Qwen3.5-122B-A10B-FP8", "--served-model-name", "qwen3.5-122b-a10b-fp8",
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--max-model-len", "32768",
        "--gpu-memory-utilization", "0.8", "--kv-cache-dtype", "fp8", "--reasoning-parser", "qwen3"]
ALL_FLAGS = ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}', "--enforce-eager",
             "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder", "--trust-remote-code",
             "--max-num-seqs", "8", "--enable-prefix-caching"]
API = ["--host", HEAD_LAN, "--port", "8000"]


# --- byte-identical to 0.1.0 -------------------------------------------------------------------------------------

def test_ray_head_and_worker_argv_are_those_of_0_1_0():
    rel = release()
    expected = BASE + API + ["--distributed-executor-backend", "ray"]
    assert argv(rel, 0) == expected
    assert argv(rel, 1) == expected  # a Ray worker runs no vllm serve; 0.1.0 computed the head's argv there too


def test_mp_head_and_headless_worker_argv_are_those_of_0_1_0():
    rel = release(vllm_serve_backend="mp")
    multi = ["--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank"]
    master = ["--master-addr", HEAD_FABRIC, "--master-port", "29501"]
    assert argv(rel, 0) == BASE + multi + ["0"] + master + API
    assert argv(rel, 1) == BASE + multi + ["1"] + master + ["--headless"]


def test_every_optional_flag_renders_where_and_as_0_1_0_did():
    rel = release(enforce_eager=True, **ALL_ON)
    assert argv(rel, 0) == BASE + ALL_FLAGS + API + ["--distributed-executor-backend", "ray"]
    mp = release(enforce_eager=True, vllm_serve_backend="mp", **ALL_ON)
    tail = ["--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "1", "--master-addr", HEAD_FABRIC,
            "--master-port", "29501", "--headless"]
    assert argv(mp, 1) == BASE + ALL_FLAGS + tail


def test_bind_on_every_interface_an_absolute_model_path_and_no_reasoning_parser():
    rel = release(endpoint={"url": f"http://{HEAD_LAN}:8001/v1", "host": "0.0.0.0", "port": "8001"},
                  vllm_serve_model="/srv/m/x", vllm_serve_reasoning_parser="", vllm_serve_gpu_memory_utilization=0.85)
    assert argv(rel, 0) == ["vllm", "serve", "/srv/m/x", "--served-model-name", "qwen3.5-122b-a10b-fp8",
                            "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--max-model-len", "32768",
                            "--gpu-memory-utilization", "0.85", "--kv-cache-dtype", "fp8",
                            "--host", "0.0.0.0", "--port", "8001", "--distributed-executor-backend", "ray"]


def test_tool_call_parser_renders_only_with_auto_tool_choice():
    rel = release(vllm_serve_tool_call_parser="hermes")
    assert "--tool-call-parser" not in argv(rel, 0)


# --- clusters of 1 to 8 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes", [3, 4, 8])
def test_mp_ranks_of_an_n_node_cluster(nodes):
    rel = release(vllm_serve_backend="mp", vllm_serve_tensor_parallel_size=nodes)
    for rank in range(nodes):
        got = argv(rel, rank, nodes)
        flags = dict(zip(got[:-1], got[1:]))
        assert (flags["--nnodes"], flags["--node-rank"], flags["--master-addr"]) == (str(nodes), str(rank), HEAD_FABRIC)
        assert flags["--tensor-parallel-size"] == str(nodes)
        if rank == 0:
            assert got[-4:] == API and "--headless" not in got
        else:
            assert got[-1] == "--headless" and "--host" not in got and "--port" not in got


def test_tp_times_pp_spans_the_cluster():
    rel = release(vllm_serve_backend="mp", vllm_serve_tensor_parallel_size=2, vllm_serve_pipeline_parallel_size=2)
    assert "--pipeline-parallel-size" in argv(rel, 3, nodes=4)
    with pytest.raises(AnsibleFilterError, match=r"2 x 2 = 4, but the cluster has 2 node\(s\)"):
        argv(rel, 0, nodes=2)


@pytest.mark.parametrize("backend", ["ray", "mp"])
def test_a_one_node_cluster_has_tp1_and_no_multi_node_flags(backend):
    rel = release(vllm_serve_backend=backend, vllm_serve_tensor_parallel_size=1)
    got = F["serve_argv"](rel, rank=0, nodes=1)
    assert got == BASE[:6] + ["1"] + BASE[7:] + API
    assert not {"--distributed-executor-backend", "--nnodes", "--node-rank", "--master-addr", "--headless"} & set(got)


@pytest.mark.parametrize("backend", ["ray", "mp"])
def test_a_single_spark_serves_without_ray_whatever_the_backend_asked(backend):
    """One engine container, no Ray: with nodes=1 the release's backend is mp (the container the role then runs)."""
    wanted = F["release"](values(vllm_serve_backend=backend, vllm_serve_tensor_parallel_size=1), host="s", nodes=1)
    assert wanted["backend"] == "mp"
    for nodes in (2, None):
        assert F["release"](values(vllm_serve_backend=backend), host="s", nodes=nodes)["backend"] == backend
    restored = F["release"](values(), restore=dict(release(vllm_serve_backend="ray", vllm_serve_tensor_parallel_size=1)),
                            host="s", nodes=1)
    assert restored["backend"] == "mp"


@pytest.mark.parametrize("rank,nodes,match", [(2, 2, "rank 2 is not a rank of a cluster of 2"),
                                              (-1, 2, "rank -1"), (0, 9, "1 to 8 nodes"), (0, 0, "1 to 8 nodes")])
def test_ranks_and_sizes_outside_a_cluster_are_refused(rank, nodes, match):
    with pytest.raises(AnsibleFilterError, match=match):
        argv(release(), rank, nodes)


def test_mp_without_the_heads_fabric_address_is_refused():
    with pytest.raises(AnsibleFilterError, match="master_addr"):
        F["serve_argv"](release(vllm_serve_backend="mp"), rank=1, nodes=2)


def test_an_undecided_enforce_eager_is_not_rendered():
    wanted = F["release"](values(), host="rel-1")
    assert wanted["settings"]["enforce_eager"] is None
    with pytest.raises(AnsibleFilterError, match="enforce_eager"):
        F["serve_argv"](dict(wanted, endpoint=ENDPOINT), rank=0, nodes=2)
    with pytest.raises(AnsibleFilterError, match="rel-1: release_record: enforce_eager is still undecided"):
        F["release_record"](wanted, endpoint=ENDPOINT, host="rel-1")


# --- validation: errors name the variable ------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,match", [
    ({"vllm_serve_image": ""}, "rel-1: release: vllm_serve_image is empty; set it \\(dgxspark_image"),
    ({"vllm_serve_model": None}, "vllm_serve_model is empty"),
    ({"vllm_serve_backend": "k8s"}, "vllm_serve_backend must be one of ray, mp, is 'k8s'"),
    ({"vllm_serve_tensor_parallel_size": "two"}, "vllm_serve_tensor_parallel_size must be an integer, is 'two'"),
    ({"vllm_serve_tensor_parallel_size": 0}, "vllm_serve_tensor_parallel_size must be at least 1"),
    ({"vllm_serve_gpu_memory_utilization": 1.5}, "vllm_serve_gpu_memory_utilization must be in \\(0, 1\\]"),
    ({"vllm_serve_gpu_memory_utilization": "lots"}, "vllm_serve_gpu_memory_utilization must be a number"),
    ({"vllm_serve_speculative_config": "mtp"}, "vllm_serve_speculative_config must be a mapping"),
    ({"vllm_serve_extra_args": "--foo"}, "vllm_serve_extra_args must be a list of strings"),
    ({"vllm_serve_trust_remote_code": "maybe"}, "vllm_serve_trust_remote_code must be true or false"),
    ({"vllm_serve_max_model_len": None}, "vllm_serve_max_model_len is not set"),
    ({"vllm_serve_enable_auto_tool_choice": True}, "vllm_serve_tool_call_parser is empty"),
    ({"vllm_serve_extra_args": ["--max-model-len=4096"]}, "extra_args repeats --max-model-len.*vllm_serve_max_model_len"),
])
def test_bad_inputs_stop_naming_host_and_variable(overrides, match):
    with pytest.raises(AnsibleFilterError, match=match):
        F["release"](values(**overrides), host="rel-1")


def test_inputs_are_coerced_as_ansible_hands_them_over():
    wanted = F["release"](values(vllm_serve_enforce_eager="false", vllm_serve_trust_remote_code="yes",
                                 vllm_serve_max_model_len="4096", vllm_serve_speculative_config=""))
    settings = wanted["settings"]
    assert (settings["enforce_eager"], settings["trust_remote_code"], settings["max_model_len"]) == (False, True, 4096)
    assert settings["speculative_config"] == {} and settings["tensor_parallel_size"] == 2


def test_release_needs_one_value_per_variable():
    with pytest.raises(AnsibleFilterError, match=f"expected {len(_release.RELEASE_KEYS + _release.SETTING_KEYS)} values"):
        F["release"](values()[:-1])


# --- the record, comparison, rollback ----------------------------------------------------------------------------

def test_the_record_holds_image_model_settings_endpoint_remedies():
    remedy = {"id": "nccl-cuda-graphs-multinode-deadlock", "set": {"enforce_eager": True}, "text": "eager"}
    wanted = F["release"](values())
    rec = F["release_record"](wanted, enforce_eager=True, remedies=[remedy], endpoint=ENDPOINT, image_id="sha256:ab")
    assert rec["image"] == "dgxspark/vllm-hybrid:overlay-3f1c" and rec["image_id"] == "sha256:ab"
    assert rec["settings"]["enforce_eager"] is True and rec["remedies"] == [remedy]
    assert rec["endpoint"] == ENDPOINT and set(rec["settings"]) == set(_release.SETTING_KEYS)
    assert json.loads(json.dumps(rec)) == rec  # what release.json holds


def test_the_record_holds_every_members_image_id_and_refuses_one_that_is_not_an_id():
    head, worker = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    wanted = F["release"](values())
    rec = F["release_record"](wanted, enforce_eager=False, endpoint=ENDPOINT, image_id=head,
                              image_ids={"spark-2": worker, "spark-1": head, "spark-3": ""})
    assert rec["image_ids"] == {"spark-1": head, "spark-2": worker}  # an unknown ID is left out
    assert F["release_compare"](dict(rec, image_ids={}), rec)["same"]  # IDs are not a change of release
    with pytest.raises(AnsibleFilterError, match="rel-1: release_record: image_ids: spark-2's image ID must be"):
        F["release_record"](wanted, enforce_eager=False, endpoint=ENDPOINT, image_ids={"spark-2": "x\n"}, host="rel-1")


def test_compare_names_what_changed():
    old, new = release(), release(vllm_serve_image="img:2", vllm_serve_max_model_len=4096)
    diff = F["release_compare"](old, new)
    assert not diff["same"]
    assert diff["changes"] == {"image": ["dgxspark/vllm-hybrid:overlay-3f1c", "img:2"],
                               "settings.max_model_len": [32768, 4096]}
    assert F["release_compare"](old, release()) == {"same": True, "changes": {}}


# A release.json written by 0.1.0's vllm_serve (its exact keys and value types).
RECORD_0_1_0 = {
    "backend": "mp", "image": "dgxspark/vllm-hybrid:overlay-9a0b", "model": "Qwen/Qwen3-30B-A3B",
    "remedies": [], "served_model_name": "qwen3-30b-a3b",
    "settings": {"enable_auto_tool_choice": False, "enforce_eager": True, "extra_args": [],
                 "gpu_memory_utilization": 0.8, "kv_cache_dtype": "fp8", "max_model_len": 32768,
                 "pipeline_parallel_size": 1, "reasoning_parser": "qwen3", "speculative_config": {},
                 "tensor_parallel_size": 2, "tool_call_parser": "", "trust_remote_code": False},
}


def test_a_release_json_of_0_1_0_still_rolls_back():
    target = F["release"](values(), restore=RECORD_0_1_0, host="rel-1")
    assert (target["image"], target["model"], target["backend"], target["served_model_name"]) == (
        "dgxspark/vllm-hybrid:overlay-9a0b", "Qwen/Qwen3-30B-A3B", "mp", "qwen3-30b-a3b")
    assert target["settings"] == RECORD_0_1_0["settings"] and target["model_revision"] == ""
    rec = F["release_record"](target, enforce_eager=target["settings"]["enforce_eager"], endpoint=ENDPOINT)
    got = argv(rec, 1)
    assert got[:3] == ["vllm", "serve", "/models/Qwen3-30B-A3B"] and "--enforce-eager" in got and got[-1] == "--headless"


def test_a_rollback_takes_todays_value_for_a_setting_the_record_predates():
    record = json.loads(json.dumps(RECORD_0_1_0))
    del record["settings"]["trust_remote_code"]
    target = F["release"](values(vllm_serve_trust_remote_code=True), restore=record)
    assert target["settings"]["trust_remote_code"] is True


def test_this_versions_record_rolls_back_to_itself():
    rec = release(enforce_eager=True, vllm_serve_backend="mp", **ALL_ON)
    target = F["release"](values(vllm_serve_image="other:1"), restore=json.loads(json.dumps(rec)))
    again = F["release_record"](target, enforce_eager=target["settings"]["enforce_eager"], endpoint=ENDPOINT)
    assert F["release_compare"](rec, again)["same"] and argv(again, 0) == argv(rec, 0)


@pytest.mark.parametrize("record,match", [
    ({"image": "img:1", "backend": "ray"}, "release.json has no model|the release record has no model"),
    ({"image": "img:1", "model": "m", "backend": "ray", "settings": {"max_model_len": "long"}},
     "release.json: max_model_len must be an integer"),
])
def test_a_broken_record_is_refused_naming_the_record(record, match):
    with pytest.raises(AnsibleFilterError, match=match):
        F["release"](values(), restore=record, host="rel-1")


# --- one table -----------------------------------------------------------------------------------------------------

def test_every_setting_is_a_role_variable_with_a_default_and_an_argument_spec():
    defaults = yaml.safe_load((ROOT / "roles/vllm_serve/defaults/main.yml").read_text())
    spec = yaml.safe_load((ROOT / "roles/vllm_serve/meta/argument_specs.yml").read_text())["argument_specs"]["main"]
    readme = (ROOT / "roles/vllm_serve/README.md").read_text()
    for name in F["release_variables"]("vllm_serve_"):
        assert name in defaults, name
        assert name in spec["options"], name
        assert name in readme, name
    kinds = {int: "int", float: "float", str: "str", bool: "bool", dict: "dict", list: "list"}
    for setting in _release.SETTINGS:
        assert spec["options"]["vllm_serve_" + setting.key]["type"] == kinds[setting.type], setting.key


def test_the_role_renders_the_argv_only_through_the_filter():
    present = (ROOT / "roles/vllm_serve/tasks/present.yml").read_text()
    assert "dgxspark.vllm.serve_argv(" in present
    for setting in _release.SETTINGS:
        if setting.flag:
            assert setting.flag not in present, setting.flag


def test_the_record_makes_the_clients_url_from_the_endpoints_parts():
    """vllm_serve gives the record its bind address, port, the head's LAN address, whether the fleet has gateways and
    whether the door speaks TLS; the record's URL is _release.clients_url's (the one the door prints)."""
    parts = {"host": "::1", "port": 8000, "lan_ip": "fd00::11", "gateways": False, "door_tls": True}
    assert release(endpoint=parts)["endpoint"] == {"url": "https://[fd00::11]:8000/v1", "host": "::1", "port": 8000}
