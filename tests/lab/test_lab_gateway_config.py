"""The gateway's rendered configurations are ones HAProxy itself accepts (haproxy -c in the lab's HAProxy image,
Debian 13's 3.0, the branch of the official haproxy:3.0 image real gateways run), and a broken one is refused."""

from __future__ import annotations

import subprocess

import pytest

from labkit import LAB, run, tested_with

from ansible_collections.dgxspark.vllm.plugins.module_utils import _gateway as gw

IMAGE = "lab/haproxy:3.0"

CASES = {
    "one model, one cluster": ({"qwen3-30b-a3b": [{"name": "pair1", "address": "10.0.0.11", "port": 8100}]}, {}),
    "two models, three clusters, IPv6": ({
        "qwen3-30b-a3b": [{"name": "pair1", "address": "10.0.0.11", "port": 8100},
                          {"name": "pair2", "address": "10.0.0.13", "port": 8100}],
        "org.model:v2_b-1": [{"name": "cluster.c:3", "address": "fd00::15", "port": 65535}]}, {"bind": "fd00::5"}),
    "every tunable at a bound": ({"m": [{"name": "c", "address": "10.0.0.11", "port": 1}]},
                                 {"bind": "0.0.0.0", "port": 65535, "max_body": 64 * 1048576, "maxconn": 16,
                                  "check_interval": 3600, "check_timeout": 1, "timeout": 86400,
                                  "hard_stop_after": 1}),
}


@pytest.fixture(scope="module")
def image():
    run([*LAB, "images", "haproxy-3.0"])
    shown = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "haproxy", IMAGE, "-v"],
                           capture_output=True, text=True, check=False).stdout  # "HAProxy version 3.0.11-1+deb13u4 ..."
    tested_with("haproxy", f"`{IMAGE}`", shown.split("version ", 1)[1].split()[0] if "version " in shown else "")
    return IMAGE


def haproxy_check(tmp_path, config, keys=None):
    tmp_path.chmod(0o755)
    (tmp_path / "haproxy.cfg").write_text(config)
    (tmp_path / "haproxy.cfg").chmod(0o644)
    if keys is not None:
        (tmp_path / "keys").write_text(keys)
        (tmp_path / "keys").chmod(0o644)
    # -V: HAProxy 3.0's -c says "Configuration file is valid" only when verbose (2.6 always did; the role reads the rc)
    return subprocess.run(["docker", "run", "--rm", "--network", "none", "--user", "99:99", "--entrypoint", "haproxy",
                           "-v", f"{tmp_path}:/usr/local/etc/haproxy:ro", IMAGE, "-c", "-V", "-f",
                           "/usr/local/etc/haproxy/haproxy.cfg"], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("case", list(CASES))
def test_haproxy_accepts_the_rendered_gateway(image, tmp_path, case):
    models, extra = CASES[case]
    args = {"bind": "10.0.0.5", "port": 8000, "engine_key": "engine-key-0123456789"}
    args.update(extra)
    proc = haproxy_check(tmp_path, gw.render_gateway(models, **args), gw.render_keys(["client-key-0123", "k2-0123456"]))
    print(f"haproxy -c ({image}), gateway, {case}: rc {proc.returncode}, {(proc.stdout + proc.stderr).strip()}")
    assert proc.returncode == 0 and "Configuration file is valid" in proc.stdout + proc.stderr, proc.stderr


def test_haproxy_accepts_the_rendered_door(image, tmp_path):
    proc = haproxy_check(tmp_path, gw.render_door("10.0.0.11", 8100, ["10.0.0.5", "fd00::5"], target_port=8000))
    print(f"haproxy -c ({image}), door: rc {proc.returncode}, {(proc.stdout + proc.stderr).strip()}")
    assert proc.returncode == 0, proc.stderr


def test_haproxy_refuses_a_broken_configuration_and_a_missing_keys_file(image, tmp_path):
    config = gw.render_gateway({"m": [{"name": "c", "address": "10.0.0.11", "port": 8100}]}, "10.0.0.5", 8000,
                               "engine-key-0123456789")
    broken = haproxy_check(tmp_path, config.replace("balance leastconn", "balance no-such-algorithm"), "client-key-01\n")
    (tmp_path / "keys").unlink()
    missing = haproxy_check(tmp_path, config)
    print(f"haproxy -c ({image}): a broken configuration rc {broken.returncode}, no keys file rc {missing.returncode}")
    assert broken.returncode != 0 and missing.returncode != 0
