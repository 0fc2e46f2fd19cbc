# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of main() of the vllm_image_info module with a mocked Docker client over fake image layers."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from docker.errors import APIError, DockerException, ImageNotFound

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import vllm_image_info as mod
from ansible_collections.dgxspark.vllm.tests.unit.plugins.module_utils.image_trees import (
    SITE, ArchiveServer, flatten, vllm_image)

IMAGE_ID = "sha256:3a1c45c01de05c921dcecd113751b34d9839173c5422e48051c033817a71a1bd"


def image_attrs(graph_driver):
    return {
        "Id": IMAGE_ID, "RepoTags": ["lab/vllm-qwen35:0.17"], "RepoDigests": [], "Architecture": "arm64", "Os": "linux", "GraphDriver": graph_driver,
        "Config": {"Entrypoint": ["/opt/entrypoint.sh"], "Cmd": ["vllm", "serve"], "Labels": {"maintainer": "hal"},
                   "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HF_TOKEN=hf_secret",
                           "VLLM_USE_V1=1"]},
    }


def overlay_driver(layer_dirs):
    return {"Name": "overlay2", "Data": {"UpperDir": layer_dirs[0], "LowerDir": ":".join(layer_dirs[1:]),
                                         "MergedDir": "/nope/merged", "WorkDir": "/nope/work"}}


def make_client(attrs=None, get_error=None, container=None, api=None):
    client = mock.Mock()
    client.info.return_value = {"Name": "spark-1"}
    if get_error is not None:
        client.images.get.side_effect = get_error
    else:
        client.images.get.return_value = mock.Mock(id=IMAGE_ID, attrs=attrs)
    client.containers.create.return_value = container
    if api is not None:
        client.api = api
    return client


def run(capsys, args, client=None, client_error=None):
    factory = mock.Mock(return_value=client, side_effect=client_error)
    with patch_module_args(args), mock.patch.object(mod.docker, "DockerClient", factory), \
            mock.patch.object(AnsibleModule, "warn") as warn:
        with pytest.raises(SystemExit) as exc:
            mod.main()
    return json.loads(capsys.readouterr().out), exc.value.code, [call.args[0] for call in warn.call_args_list], factory


ARGS = {"image": "lab/vllm-qwen35:0.17", "architectures": ["Qwen3_5MoeForConditionalGeneration", "Qwen3_5MTP"],
        "model_modules": ["qwen3_5", "qwen3_5_mtp"], "_ansible_check_mode": True}


def check_common(result):
    assert result["changed"] is False
    assert result["image"] == "lab/vllm-qwen35:0.17"
    assert result["id"] == IMAGE_ID
    assert (result["architecture"], result["os"]) == ("arm64", "linux")
    assert result["entrypoint"] == ["/opt/entrypoint.sh"] and result["cmd"] == ["vllm", "serve"]
    assert result["labels"] == {"maintainer": "hal"}
    assert result["env_names"] == ["PATH", "HF_TOKEN", "VLLM_USE_V1"]
    assert result["env"] == {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "VLLM_USE_V1": "1"}
    assert "hf_secret" not in json.dumps(result)
    assert result["versions"] == {"vllm": "0.17.1", "transformers": "4.57.3", "torch": "2.9.0+cu130", "ray": None,
                                  "tokenizers": "0.22.1", "nccl": "2.27.7"}
    assert result["site_packages"] == [SITE]
    assert result["missing_architectures"] == ["Qwen3_5MTP"]
    assert result["model_modules"] == {"qwen3_5": True, "qwen3_5_mtp": True}
    assert [lib["path"] for lib in result["nccl_libraries"]] == ["/usr/lib/aarch64-linux-gnu/libnccl.so.2.28.9",
                                                                 SITE + "/nvidia/nccl/lib/libnccl.so.2"]
    assert result["nccl_conflict"] is True
    assert "warnings" not in result or all("NCCL" in item for item in result["warnings"])


def test_overlay2_reads_layers_and_creates_no_container(capsys, tmp_path):
    client = make_client(image_attrs(overlay_driver(vllm_image(tmp_path))))
    result, code, warnings, factory = run(capsys, ARGS, client)
    assert code == 0, result
    factory.assert_called_once_with(base_url="unix:///var/run/docker.sock", timeout=60)
    client.images.get.assert_called_once_with("lab/vllm-qwen35:0.17")
    check_common(result)
    assert (result["store"], result["method"]) == ("overlay2", "layers")
    assert result["exists"] is True and result["repo_tags"] == ["lab/vllm-qwen35:0.17"]
    client.containers.create.assert_not_called()
    assert len(warnings) == 1
    assert warnings[0].startswith("lab/vllm-qwen35:0.17: the image holds 2 copies of NCCL: ")
    assert "vllm-project/vllm/issues/42354" in warnings[0]


def test_other_store_uses_a_never_started_container_and_removes_it(capsys, tmp_path):
    server = ArchiveServer(flatten(vllm_image(tmp_path / "layers"), tmp_path / "root"))
    client = make_client(image_attrs({"Name": "overlayfs", "Data": None}), container=server.container, api=server.api)
    result, code, warnings, _factory = run(capsys, dict(ARGS, docker_host="tcp://127.0.0.1:2375", timeout=20), client)
    assert code == 0, result
    check_common(result)
    assert (result["store"], result["method"]) == ("overlayfs", "archive")
    kwargs = client.containers.create.call_args.kwargs
    assert client.containers.create.call_args.args == (IMAGE_ID,)
    assert kwargs["entrypoint"] == ["/nonexistent"] and kwargs["command"] == [] and kwargs["network_disabled"] is True
    assert kwargs["name"].startswith("dgxspark-inspect-") and len(kwargs["name"]) == len("dgxspark-inspect-") + 12
    server.container.start.assert_not_called()
    server.container.remove.assert_called_once_with(force=True, v=True)
    assert len(warnings) == 1 and "2 copies of NCCL" in warnings[0]


def test_container_is_removed_when_the_inspection_fails(capsys, tmp_path):
    server = ArchiveServer(flatten(vllm_image(tmp_path / "layers"), tmp_path / "root"))
    server.api.head.side_effect = APIError("500 Server Error: mount failed")
    client = make_client(image_attrs({"Name": "overlayfs", "Data": None}), container=server.container, api=server.api)
    result, code, _warnings, _factory = run(capsys, ARGS, client)
    assert code == 1
    assert result["msg"] == ("inspecting image lab/vllm-qwen35:0.17 through the Docker API failed: 500 Server Error: "
                             "mount failed")
    server.container.remove.assert_called_once_with(force=True, v=True)


def test_failed_removal_is_a_warning(capsys, tmp_path):
    server = ArchiveServer(flatten(vllm_image(tmp_path / "layers", pip_nccl=False), tmp_path / "root"))
    server.container.name = "dgxspark-inspect-abc"
    server.container.remove.side_effect = APIError("409 Conflict: removal in progress")
    client = make_client(image_attrs({"Name": "btrfs", "Data": {}}), container=server.container, api=server.api)
    result, code, warnings, _factory = run(capsys, ARGS, client)
    assert code == 0 and result["nccl_conflict"] is False
    assert warnings == ["could not remove the inspection container dgxspark-inspect-abc: 409 Conflict: removal in progress; "
                        "remove it with docker rm -f dgxspark-inspect-abc"]


def test_missing_image_names_image_and_node(capsys):
    result, code, _warnings, _factory = run(capsys, {"image": "lab/vllm-qwen35:0.17"},
                                            make_client(get_error=ImageNotFound("No such image")))
    assert code == 1
    assert result["msg"] == ("image lab/vllm-qwen35:0.17 is not present on this node's Docker engine (spark-1); build it "
                             "or sync it first")


def test_missing_image_reported_when_asked(capsys):
    result, code, _warnings, _factory = run(capsys, {"image": "lab/vllm-qwen35:0.17", "missing": "report"},
                                            make_client(get_error=ImageNotFound("No such image")))
    assert code == 0
    assert result == {**result, "changed": False, "image": "lab/vllm-qwen35:0.17", "exists": False}
    assert "id" not in result and "versions" not in result


def test_unreachable_daemon(capsys):
    result, code, _warnings, _factory = run(capsys, {"image": "x"}, client_error=DockerException("Connection refused"))
    assert code == 1
    assert result["msg"] == ("cannot talk to the Docker daemon at unix:///var/run/docker.sock on this node: Connection "
                             "refused; is Docker running and may this user use it?")


def test_method_layers_fails_on_another_store(capsys):
    client = make_client(image_attrs({"Name": "overlayfs", "Data": None}))
    result, code, _warnings, _factory = run(capsys, {"image": "x", "method": "layers"}, client)
    assert code == 1
    assert result["msg"] == ("the layers of image x cannot be read on this node: the engine stores images with 'overlayfs', "
                             "not overlay2; use method=auto")
    client.containers.create.assert_not_called()


def test_unreadable_overlay2_layers_fall_back_with_a_warning(capsys, tmp_path):
    server = ArchiveServer(flatten(vllm_image(tmp_path / "layers", pip_nccl=False), tmp_path / "root"))
    attrs = image_attrs({"Name": "overlay2", "Data": {"UpperDir": "/remote/host/l1/diff", "LowerDir": ""}})
    client = make_client(attrs, container=server.container, api=server.api)
    result, code, warnings, _factory = run(capsys, {"image": "x"}, client)
    assert code == 0 and result["method"] == "archive"
    assert warnings == ["x: the overlay2 layers could not be read (layer directory /remote/host/l1/diff is not readable on "
                        "this host (is the engine remote, or in a VM?)); used the archive API instead"]


def test_timeout_must_be_positive(capsys):
    result, code, _warnings, factory = run(capsys, {"image": "x", "timeout": 0}, make_client())
    assert code == 1 and result["msg"] == "timeout must be at least 1 second, got 0"
    factory.assert_not_called()


def test_the_record_says_which_image_was_verified_under_the_name(capsys, tmp_path):
    record = tmp_path / "verified-images.json"
    other = "sha256:" + "f" * 64
    record.write_text(json.dumps({"lab/vllm-qwen35:0.17": IMAGE_ID, "x:1": other, "bad:1": "not-an-id\nx"}))
    client = make_client(image_attrs(overlay_driver(vllm_image(tmp_path))))
    result, code, _warnings, _factory = run(capsys, {**ARGS, "record": str(record)}, client)
    assert code == 0 and result["recorded_id"] == IMAGE_ID == result["id"]
    assert result["record"] == {"lab/vllm-qwen35:0.17": IMAGE_ID, "x:1": other}  # what cannot be an ID is dropped
    record.write_text(json.dumps({"lab/vllm-qwen35:0.17": other}))  # the tag now holds another image than recorded
    result, code, _warnings, _factory = run(capsys, {**ARGS, "record": str(record)}, client)
    assert code == 0 and result["recorded_id"] == other != result["id"]
    missing, code, _warnings, _factory = run(capsys, {"image": "y:1", "missing": "report", "record": str(tmp_path / "none")},
                                             make_client(get_error=ImageNotFound("No such image")))
    assert code == 0 and missing["exists"] is False and missing["recorded_id"] == "" and missing["record"] == {}


def test_image_facts_carry_a_fingerprint_the_same_under_both_stores():
    layers = {"Type": "layers", "Layers": ["sha256:" + "1" * 64]}
    graph = {"Id": "sha256:" + "a" * 64, "Created": "2026-12-03T10:00:00Z", "Os": "linux", "Architecture": "arm64",
             "RootFS": layers, "Config": {"Env": ["A=1"], "Cmd": ["x"], "Hostname": "", "Volumes": None}}
    containerd = {"Id": "sha256:" + "b" * 64, "Created": "2026-12-03T10:00:00Z", "Os": "linux",
                  "Architecture": "arm64", "RootFS": layers, "Config": {"Env": ["A=1"], "Cmd": ["x"]}}
    one, two = mod.image_facts("i:1", graph), mod.image_facts("i:1", containerd)
    assert one["id"] != two["id"] and one["fingerprint"] is not None and one["fingerprint"] == two["fingerprint"]
    assert mod.image_facts("i:1", dict(containerd, Created="2026-12-04T10:00:00Z"))["fingerprint"] != one["fingerprint"]


def test_the_architectures_the_models_config_declares_are_checked(capsys, tmp_path):
    client = make_client(image_attrs(overlay_driver(vllm_image(tmp_path / "image"))))
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"architectures": ["Qwen3_5MTP"], "model_type": "qwen3_5"}))
    result, code, _warnings, _factory = run(capsys, dict(ARGS, model_config=str(config)), client)
    assert code == 0, result
    assert result["checked_architectures"] == ["Qwen3_5MTP"] and result["missing_architectures"] == ["Qwen3_5MTP"]
    # a config.json that declares none, or none at all: the given architectures
    config.write_text("{}")
    result, code, _warnings, _factory = run(capsys, dict(ARGS, model_config=str(config)), client)
    assert result["checked_architectures"] == ARGS["architectures"]
    result, code, _warnings, _factory = run(capsys, dict(ARGS, model_config=str(tmp_path / "none.json")), client)
    assert result["checked_architectures"] == ARGS["architectures"]


@pytest.mark.parametrize("text", ['{"architectures": ["Qwen3; rm -rf /"]}', "not json"])
def test_a_config_json_that_is_not_json_or_declares_non_identifiers_fails_naming_it(capsys, tmp_path, text):
    config = tmp_path / "config.json"
    config.write_text(text)
    result, code, _warnings, _factory = run(capsys, dict(ARGS, model_config=str(config)), make_client())
    assert code == 1 and result["failed"] and str(config) in result["msg"]


def engine_api(containers):
    """A low-level API mock listing CONTAINERS ({name: (component, running)}) under the collection's label."""
    api = mock.Mock()
    attrs = {f"id-{name}": {"Name": f"/{name}", "Image": "sha256:" + "e" * 64, "RestartCount": 0,
                            "State": {"Running": running, "Status": "running" if running else "exited",
                                      "StartedAt": "2026-12-05T01:00:00Z", "ExitCode": 0},
                            "Config": {"Labels": {"org.dgxspark.vllm.component": component},
                                       "Env": ["VLLM_API_KEY=sk-secret"]},
                            "HostConfig": {"RestartPolicy": {"Name": "unless-stopped"}}}
             for name, (component, running) in containers.items()}
    api.containers.return_value = [{"Id": cid} for cid in attrs]
    api.inspect_container.side_effect = lambda cid: attrs[cid]
    return api


def test_the_engine_containers_are_read_in_the_same_call_image_or_not(capsys):
    """With engine_components, one call answers both questions a deploy asks of a node: the serving image's facts and
    the engine containers (vllm_serve reads every node this way). Asked for even when the image is missing; never
    the containers' environment; only the components asked for."""
    api = engine_api({"dgxspark-ray-head": ("ray", True), "dgxspark-watchdog": ("watchdog", False),
                      "other": ("hybrid-image", True)})
    client = make_client(get_error=ImageNotFound("No such image"), api=api)
    result, code, _warnings, _factory = run(capsys, {"image": "lab/vllm-qwen35:0.17", "missing": "report",
                                                     "engine_components": ["ray", "vllm", "watchdog"]}, client)
    assert code == 0 and result["exists"] is False
    assert sorted(result["engines"]["containers"]) == ["dgxspark-ray-head", "dgxspark-watchdog"]
    assert result["engines"]["running_components"] == ["ray"]
    assert result["engines"]["containers"]["dgxspark-ray-head"]["restart_policy"] == "unless-stopped"
    assert "sk-secret" not in json.dumps(result)
    api.containers.assert_called_once_with(all=True, filters={"label": "org.dgxspark.vllm.component"})
    plain, code, _warnings, _factory = run(capsys, {"image": "lab/vllm-qwen35:0.17", "missing": "report"},
                                           make_client(get_error=ImageNotFound("No such image"), api=engine_api({})))
    assert code == 0 and "engines" not in plain  # not asked: no container read


def test_an_engine_read_that_fails_names_the_daemon(capsys):
    api = mock.Mock()
    api.containers.side_effect = DockerException("Connection aborted")
    result, code, _warnings, _factory = run(capsys, {"image": "x", "engine_components": ["ray"]},
                                            make_client(attrs={}, api=api))
    assert code == 1 and "Connection aborted" in result["msg"] and result["image"] == "x"
