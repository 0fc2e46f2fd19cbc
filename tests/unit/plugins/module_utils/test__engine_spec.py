# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of module_utils/_engine_spec.py: each spec is the one the roles' Jinja built before (argv, binds,
environment, labels), so that an upgrade to this code restarts no engine."""

from __future__ import annotations

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _engine_spec as es
from ansible_collections.dgxspark.vllm.plugins.module_utils._node_container import node_container

FABRIC_ENV = {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "rocep1s0f1"}
ENGINE = {"stop_timeout": 45}
RAY = {"node_ip": "192.168.100.11", "port": 6379, "gpus": 1, "stop_timeout": 45, "object_store_bytes": 4294967296,
       "ray_args": ["--include-dashboard=false"], "members": 2, "worker_ips": ["192.168.100.12"],
       "wait_timeout": 300, "dashboard_host": "127.0.0.1", "launcher_args": ["--serve-env-file", es.SERVE_ENV],
       "serve_argv": ["vllm", "serve", "/models/qwen"], "head_ip": "192.168.100.11", "token_auth": True,
       "config_dir": "/etc/dgxspark/ray", "env": {"RAY_DEDUP_LOGS": "0"}, "volumes": ["/data:/data:ro"],
       "image_id": "sha256:" + "a" * 64, "extra": "digest-of-the-env", "token": "keyed-token"}


def test_the_ray_head_is_the_spec_the_roles_built_before():
    built = es.spec("ray", name="dgxspark-ray-head", image="img:1", role="head", pair="pair1",
                    launcher_dir="/opt/dgxspark/bin", env=FABRIC_ENV, engine=ENGINE, launcher_checksum="c0ffee",
                    ray=RAY)
    common = ["--node-ip", "192.168.100.11", "--port", "6379", "--num-gpus", "1", "--stop-timeout", "20",
              "--ray-arg=--object-store-memory=4294967296"]
    argv = (["head"] + common + ["--expect-nodes", "2", "--expect-gpus", "2", "--wait-timeout", "300",
                                 "--dashboard-host", "127.0.0.1", "--expect-node-ip=192.168.100.12",
                                 "--ray-arg=--include-dashboard=false", "--serve-env-file", es.SERVE_ENV,
                                 "--", "vllm", "serve", "/models/qwen"])
    expected = node_container(
        "dgxspark-ray-head", "img:1", argv, component="ray", role="head", pair="pair1",
        env={**FABRIC_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/etc/dgxspark/ray/auth_token",
             "RAY_DEDUP_LOGS": "0"},
        volumes=["/opt/dgxspark/bin/dgxspark-launch:/opt/dgxspark/bin/dgxspark-launch:ro",
                 "/etc/dgxspark/ray/auth_token:/etc/dgxspark/ray/auth_token:ro", "/data:/data:ro"],
        engine=ENGINE)
    assert built == {"image_id": "sha256:" + "a" * 64, "container": expected, "extra": "digest-of-the-env",
                     "launcher": "c0ffee", "token": "keyed-token"}


def test_a_ray_worker_joins_its_head_and_carries_no_extra():
    built = es.spec("ray", name="dgxspark-ray-worker", image="img:1", role="worker", pair="pair1",
                    launcher_dir="/opt/dgxspark/bin", env=FABRIC_ENV, engine=ENGINE,
                    ray=dict(RAY, token_auth=False, serve_argv=[], volumes=[]))
    assert built["container"]["command"] == [
        "worker", "--node-ip", "192.168.100.11", "--port", "6379", "--num-gpus", "1", "--stop-timeout", "20",
        "--ray-arg=--object-store-memory=4294967296", "--head-ip", "192.168.100.11", "--connect-timeout", "300",
        "--ray-arg=--include-dashboard=false"]
    assert built["extra"] == ""
    assert "RAY_AUTH_MODE" not in built["container"]["env"]
    assert built["container"]["volumes"][0] == "/opt/dgxspark/bin/dgxspark-launch:/opt/dgxspark/bin/dgxspark-launch:ro"
    assert not any("auth_token" in v for v in built["container"]["volumes"])


def test_the_head_without_serving_argv_waits_only():
    command = es.ray_command("head", **{k: v for k, v in RAY.items() if k in (
        "node_ip", "port", "gpus", "stop_timeout", "object_store_bytes", "members", "wait_timeout", "dashboard_host")})
    assert "--" not in command and command[-1] == "127.0.0.1"


def test_an_mp_rank_is_the_spec_the_roles_built_before():
    mp = {"serve_argv": ["vllm", "serve", "/models/qwen", "--nnodes", "2"], "models_dir": "/var/lib/dgxspark/models",
          "config_dir": "/etc/dgxspark/vllm", "env_checksum": "k1"}
    head = es.spec("mp", name="dgxspark-vllm", image="img:1", role="head", pair="pair1",
                   launcher_dir="/opt/dgxspark/bin", env=FABRIC_ENV, engine=ENGINE, launcher_checksum="c0ffee", mp=mp)
    expected = node_container(
        "dgxspark-vllm", "img:1", ["mp", "--serve-env-file", "/etc/dgxspark/vllm/serve.env", "--", "vllm", "serve",
                                   "/models/qwen", "--nnodes", "2"],
        component="vllm", role="head", pair="pair1", env=FABRIC_ENV,
        volumes=["/opt/dgxspark/bin/dgxspark-launch:/opt/dgxspark/bin/dgxspark-launch:ro",
                 "/var/lib/dgxspark/models:/models:ro", "/etc/dgxspark/vllm/serve.env:/etc/dgxspark/vllm/serve.env:ro"],
        engine=ENGINE)
    assert head == {"container": expected, "env_checksum": "k1", "launcher": "c0ffee"}
    worker = es.spec("mp", name="dgxspark-vllm", image="img:1", role="worker", pair="pair1",
                     launcher_dir="/opt/dgxspark/bin", env=FABRIC_ENV, engine=ENGINE, mp=mp)
    assert worker["container"]["command"][:2] == ["mp", "--"]
    assert not any("serve.env" in v for v in worker["container"]["volumes"])


@pytest.mark.parametrize(("backend", "changes", "needle"), [
    ("ray", {"gpus": 0}, "gpus must be a whole number of at least 1"),
    ("ray", {"port": "http"}, "port must be a whole number"),
    ("ray", {"stop_timeout": 0}, "stop_timeout must be a whole number of at least 7"),
    ("ray", {"stop_timeout": 6}, "stop_timeout must be a whole number of at least 7"),
    ("ray", {"node_ip": ""}, "node_ip must be a non-empty string"),
    ("ray", {"bogus": 1}, "ray: "),
    ("ray", {"token_auth": True, "config_dir": ""}, "config_dir must be a non-empty string"),
    ("ray", {"env": {"BAD NAME": "1"}}, "environment variable name"),
    ("mp", {"serve_argv": []}, "serve_argv must not be empty"),
    ("mp", {"models_dir": None}, "models_dir must be a non-empty string"),
    ("other", {}, "backend must be one of ray, mp"),
])
def test_a_value_the_spec_cannot_be_built_from_is_named(backend, changes, needle):
    mp = {"serve_argv": ["vllm", "serve"], "models_dir": "/m", "config_dir": "/c", **changes}
    with pytest.raises(es.SpecError, match=needle):
        es.spec(backend, name="c", image="i", role="head", pair="p", launcher_dir="/opt", env={},
                ray=dict(RAY, **changes), mp=mp)
