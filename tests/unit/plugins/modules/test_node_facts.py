# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the node_facts module, with docker, nvidia-smi and ping as small scripts on PATH."""

from __future__ import annotations

import json
import time

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.modules import node_facts as mod


def tool(bindir, name, body):
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def bindir(tmp_path, monkeypatch):
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", f"{path}:/usr/bin:/bin")
    return path


def run(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        mod.main()
    return json.loads(capsys.readouterr().out)


def test_a_healthy_node(bindir, tmp_path, capsys):
    tool(bindir, "docker", '[ "$1" = ps ] || echo "28.3.3"')
    tool(bindir, "nvidia-smi", 'echo "NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"')
    tool(bindir, "ping", 'echo "$@" >> "%s"; echo "2 packets transmitted, 2 received, 0%% packet loss"' % (tmp_path / "pings"))
    before = time.time()
    result = run(capsys, {"docker_root": str(tmp_path), "ping_targets": ["10.0.0.2", "10.0.0.3"],
                          "ping_interface": "enp1s0f1np1", "mtu": 9000})
    assert result["changed"] is False
    assert result["docker"] == {"rc": 0, "version": "28.3.3", "error": ""}
    assert result["running_engines"] == []
    assert result["gpus"]["rc"] == 0 and result["gpus"]["lines"] == ["NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"]
    assert result["memory_total_bytes"] > 0 and 0 < result["memory_available_bytes"] <= result["memory_total_bytes"]
    assert result["disk"]["error"] == "" and result["disk"]["free_bytes"] > 0
    assert before <= result["clock"] <= time.time()
    assert [p["target"] for p in result["pings"]] == ["10.0.0.2", "10.0.0.3"]
    assert all(p["rc"] == 0 and "0% packet loss" in p["output"] for p in result["pings"])
    calls = sorted((tmp_path / "pings").read_text().splitlines())
    assert calls == ["-c 2 -i 0.2 -W 2 -M do -s 8972 -I enp1s0f1np1 -- 10.0.0.2",
                     "-c 2 -i 0.2 -W 2 -M do -s 8972 -I enp1s0f1np1 -- 10.0.0.3"]


def test_failures_are_reported_not_raised(bindir, tmp_path, capsys):
    tool(bindir, "docker", 'echo "Cannot connect to the Docker daemon" >&2; exit 1')
    tool(bindir, "nvidia-smi", 'echo "No devices were found"; exit 6')
    tool(bindir, "ping", 'echo "1 packets transmitted, 0 received, 100% packet loss"; exit 1')
    result = run(capsys, {"docker_root": str(tmp_path / "missing"), "ping_targets": ["10.0.0.9"]})
    assert result.get("failed") is not True
    assert result["docker"] == {"rc": 1, "version": "", "error": "Cannot connect to the Docker daemon"}
    assert result["gpus"]["rc"] == 6 and result["gpus"]["lines"] == [] and result["gpus"]["output"] == "No devices were found"
    assert result["disk"]["free_bytes"] == -1 and "missing" in result["disk"]["error"]
    assert result["pings"] == [{"target": "10.0.0.9", "interface": "", "rc": 1,
                                "output": "1 packets transmitted, 0 received, 100% packet loss"}]


def test_missing_tools(bindir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setattr(mod.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    result = run(capsys, {"docker_root": str(tmp_path), "ping_targets": ["10.0.0.2"]})
    assert result["docker"]["rc"] == 127 and "docker is not installed" in result["docker"]["error"]
    assert result["gpus"]["rc"] == 127 and "nvidia-smi is not installed" in result["gpus"]["error"]
    assert result["pings"][0]["rc"] == 127 and "ping is not installed" in result["pings"][0]["output"]


@pytest.mark.parametrize("target", ["-f", '10.0.0.2",x', "*", "10.0.0.0/24", "fe80::1%eth0 -f", "spark-2"])
def test_a_target_that_is_no_ip_address_fails_and_pings_nothing(bindir, tmp_path, capsys, target):
    tool(bindir, "docker", 'echo "28.3.3"')
    tool(bindir, "nvidia-smi", 'echo "NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"')
    tool(bindir, "ping", 'echo "$@" >> "%s"' % (tmp_path / "pings"))
    result = run(capsys, {"docker_root": str(tmp_path), "ping_targets": ["10.0.0.2", target]})
    assert result["failed"] and "ping_targets:" in result["msg"] and "not an IP address" in result["msg"]
    assert not (tmp_path / "pings").exists()


def test_meminfo_parsing():
    text = "MemTotal:       131072 kB\nMemAvailable:    65536 kB\nHugePages_Total:       0\nbogus line\n"
    assert mod.meminfo(text) == {"MemTotal": 131072 * 1024, "MemAvailable": 65536 * 1024, "HugePages_Total": 0}


def test_bad_mtu_is_refused(bindir, capsys):
    result = run(capsys, {"mtu": 100})
    assert result["failed"] is True and "mtu must be 576-65535 (is 100)" in result["msg"]


def test_pings_run_at_once(bindir, tmp_path, capsys):
    """Each ping waits until all four have started: run one after another, the first would give up."""
    marks = tmp_path / "marks"
    marks.mkdir()
    tool(bindir, "ping", 'touch "%s/$(echo "$@" | tr " " _)"; n=0\n'
                         'while [ "$(ls "%s" | wc -l)" -lt 4 ]; do n=$((n+1)); [ $n -gt 100 ] && exit 1; sleep 0.1; done\n'
                         'echo together' % (marks, marks))
    result = run(capsys, {"docker_root": str(tmp_path), "ping_targets": [f"10.0.0.{i}" for i in range(2, 6)]})
    assert [(p["rc"], p["output"]) for p in result["pings"]] == [(0, "together")] * 4


def test_running_engine_containers_are_named(bindir, tmp_path, capsys):
    tool(bindir, "docker", 'if [ "$1" = ps ]; then echo "$@" > "%s"; '
                           'printf "dgxspark-ray-head\\tray\\ndgxspark-watchdog\\twatchdog\\nx\\thybrid-image\\n"; '
                           'else echo "28.3.3"; fi' % (tmp_path / "ps"))
    tool(bindir, "nvidia-smi", 'echo "NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"')
    result = run(capsys, {"docker_root": str(tmp_path)})
    assert result["running_engines"] == ["dgxspark-ray-head"]
    assert (tmp_path / "ps").read_text().split(" ")[:4] == ["ps", "--filter", "label=org.dgxspark.vllm.component",
                                                            "--format"]


def test_the_transfer_trust_is_read_in_the_same_call_when_asked(bindir, tmp_path, capsys, monkeypatch):
    """With trust_dir the node's public key and SSH host key come back in the same call (node_trust reads them from
    there); the private key never; unset, nothing is read; an unreadable file is reported, not raised."""
    tool(bindir, "docker", '[ "$1" = ps ] || echo "28.3.3"')
    tool(bindir, "nvidia-smi", 'echo "NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"')
    trust = tmp_path / "transfer"
    trust.mkdir()
    (trust / "id_ed25519").write_text("PRIVATE KEY SENTINEL")
    (trust / "id_ed25519.pub").write_text("ssh-ed25519 AAAAC3Nz dgxspark-transfer@spark_pairs:spark-1\n")
    host_key = tmp_path / "ssh_host_ed25519_key.pub"
    host_key.write_text("ssh-ed25519 AAAAHOST root@spark-1\n")
    real = mod.read_trust
    monkeypatch.setattr(mod, "read_trust", lambda directory: real(directory, str(host_key)))
    result = run(capsys, {"docker_root": str(tmp_path), "trust_dir": str(trust)})
    assert result["trust"] == {"dir": str(trust), "key_present": True,
                               "public_key": "ssh-ed25519 AAAAC3Nz dgxspark-transfer@spark_pairs:spark-1",
                               "host_key": "ssh-ed25519 AAAAHOST root@spark-1"}
    assert "SENTINEL" not in json.dumps(result)
    assert "trust" not in run(capsys, {"docker_root": str(tmp_path)})
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(capsys, {"docker_root": str(tmp_path), "trust_dir": str(empty)})["trust"] == {
        "dir": str(empty), "key_present": False, "public_key": "", "host_key": "ssh-ed25519 AAAAHOST root@spark-1"}

    def unreadable(directory):
        raise PermissionError(13, "Permission denied", directory)

    monkeypatch.setattr(mod, "read_trust", unreadable)
    failed = run(capsys, {"docker_root": str(tmp_path), "trust_dir": str(trust)})
    assert failed.get("failed") is None and failed["trust"]["dir"] == str(trust)
    assert "Permission denied" in failed["trust"]["error"]


def test_paths_report_whether_each_is_there(bindir, tmp_path, capsys):
    tool(bindir, "docker", '[ "$1" = ps ] || echo "28.3.3"')
    tool(bindir, "nvidia-smi", 'echo "NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"')
    there = tmp_path / "gateway-door"
    there.mkdir()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    result = run(capsys, {"docker_root": str(tmp_path), "paths": [str(there), str(tmp_path / "gone"), str(dangling)]})
    assert result["paths"] == {str(there): True, str(tmp_path / "gone"): False, str(dangling): True}
    assert run(capsys, {"docker_root": str(tmp_path)})["paths"] == {}


def test_the_host_platform_comes_in_the_same_call(bindir, tmp_path, capsys, monkeypatch):
    """The kernel release, the driver of the first GPU line, os-release and DGX OS's version (the last OTA's, else the
    install image's), which the preflight checks against the known-bad host platforms. Fails at 13f6075, whose
    node_facts returned no host platform."""
    tool(bindir, "docker", '[ "$1" = ps ] || echo "28.3.3"')
    tool(bindir, "nvidia-smi", 'echo "NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"')
    os_release = tmp_path / "os-release"
    os_release.write_text('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\n')
    dgx_release = tmp_path / "dgx-release"
    dgx_release.write_text('DGX_NAME="DGX Spark"\nDGX_SWBUILD_VERSION="7.2.3"\n\nDGX_OTA_VERSION="7.3.1"\n'
                           'DGX_OTA_DATE="Wed Nov 19 05:05:30 PM CET 2025"\nDGX_OTA_VERSION="7.4.0"\n')
    monkeypatch.setattr(mod, "OS_RELEASE", str(os_release))
    monkeypatch.setattr(mod, "DGX_RELEASE", str(dgx_release))
    uname = type("uname", (), {"release": "7.0.0-1019-nvidia"})
    monkeypatch.setattr(mod.os, "uname", uname)
    result = run(capsys, {"docker_root": str(tmp_path)})
    assert result["host"] == {"kernel": "7.0.0-1019-nvidia", "driver": "580.95.05", "dgx_os": "7.4.0",
                              "os": {"id": "ubuntu", "version_id": "24.04", "pretty_name": "Ubuntu 24.04.3 LTS"}}
    dgx_release.write_text('DGX_NAME="DGX Spark"\nDGX_SWBUILD_VERSION="7.2.3"\n')  # a factory install: no OTA yet
    assert run(capsys, {"docker_root": str(tmp_path)})["host"]["dgx_os"] == "7.2.3"


def test_a_node_without_dgx_release_or_working_nvidia_smi_reports_empty_host_facts(
        bindir, tmp_path, capsys, monkeypatch):
    tool(bindir, "docker", '[ "$1" = ps ] || echo "28.3.3"')
    tool(bindir, "nvidia-smi", 'echo "No devices were found"; exit 6')
    monkeypatch.setattr(mod, "OS_RELEASE", str(tmp_path / "none"))
    monkeypatch.setattr(mod, "DGX_RELEASE", str(tmp_path / "none"))
    host = run(capsys, {"docker_root": str(tmp_path)})["host"]
    assert host == {"kernel": mod.os.uname().release, "driver": "", "dgx_os": "",
                    "os": {"id": "", "version_id": "", "pretty_name": ""}}


def test_release_file_parsing():
    text = "# comment\nA=1\nB=\"two words\"\nC='x'\nnot a pair\nA=3\n"
    assert mod.release_file(text) == [("A", "1"), ("B", "two words"), ("C", "x"), ("A", "3")]


def test_a_node_without_the_docker_sdk_says_so_in_the_same_call(bindir, tmp_path, capsys, monkeypatch):
    """Field (issue 33, 1): DGX OS does not install python3-docker, which most of the collection's modules import; the
    preflight learns it from node_facts before any of them runs (fails at 13f6075: no such fact)."""
    import sys  # pylint: disable=import-outside-toplevel
    tool(bindir, "docker", '[ "$1" = ps ] || echo "28.3.3"')
    tool(bindir, "nvidia-smi", 'echo "NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"')
    monkeypatch.setitem(sys.modules, "docker", None)  # `import docker` raises ImportError, as without the package
    result = run(capsys, {"docker_root": str(tmp_path)})
    assert result["docker_sdk"]["present"] is False and result["docker_sdk"]["version"] == ""
    assert result["docker_sdk"]["python"] == sys.executable
    assert result["docker_sdk"]["error"].startswith("ModuleNotFoundError: import of docker")


def test_the_docker_sdk_and_its_version_are_reported(bindir, tmp_path, capsys, monkeypatch):
    import sys  # pylint: disable=import-outside-toplevel
    import types  # pylint: disable=import-outside-toplevel
    tool(bindir, "docker", '[ "$1" = ps ] || echo "28.3.3"')
    tool(bindir, "nvidia-smi", 'echo "NVIDIA GB10, [N/A], 580.95.05, GPU-5d1c"')
    monkeypatch.setitem(sys.modules, "docker", types.SimpleNamespace(__version__="5.0.3"))
    result = run(capsys, {"docker_root": str(tmp_path)})
    sdk = result["docker_sdk"]
    assert {k: sdk[k] for k in ("present", "version", "python", "error")} == {
        "present": True, "version": "5.0.3", "python": sys.executable, "error": ""}


def test_the_docker_sdk_fix_is_the_os_package_only_for_the_system_python(bindir, tmp_path, capsys, monkeypatch):
    """The install decision is the module's (one place): python3-docker for /usr/bin/python3 on Debian or Ubuntu, pip
    for any other interpreter (a venv's), whose import the OS package would not change."""
    monkeypatch.setattr(mod.sys, "executable", "/usr/bin/python3")
    assert mod.docker_sdk("ubuntu")["package"] == "python3-docker"
    assert mod.docker_sdk("ubuntu")["fix"] == "sudo apt-get install -y python3-docker"
    assert mod.docker_sdk("rhel")["package"] == ""
    monkeypatch.setattr(mod.sys, "executable", "/opt/venv/bin/python")
    sdk = mod.docker_sdk("ubuntu")
    assert sdk["package"] == "" and sdk["fix"].startswith("/opt/venv/bin/python -m pip install docker")


def test_every_rail_is_pinged_from_its_own_twin(bindir, tmp_path, capsys):
    """ping_rails: each peer address from the twin on its subnet (both CX7 twins proven, not only the first)."""
    tool(bindir, "ping", 'echo "$@" >> "%s"; echo "2 packets transmitted, 2 received, 0%% packet loss"' % (tmp_path / "pings"))
    result = run(capsys, {"docker_root": str(tmp_path), "mtu": 1500, "ping_rails": [
        {"target": "192.168.100.12", "interface": "enp1s0f1np1"},
        {"target": "192.168.101.12", "interface": "enP2p1s0f1np1"}]})
    assert [(p["target"], p["interface"], p["rc"]) for p in result["pings"]] == [
        ("192.168.100.12", "enp1s0f1np1", 0), ("192.168.101.12", "enP2p1s0f1np1", 0)]
    calls = sorted((tmp_path / "pings").read_text().splitlines())
    assert calls == ["-c 2 -i 0.2 -W 2 -M do -s 1472 -I enP2p1s0f1np1 -- 192.168.101.12",
                     "-c 2 -i 0.2 -W 2 -M do -s 1472 -I enp1s0f1np1 -- 192.168.100.12"]


def test_a_rail_target_that_is_no_ip_address_fails_and_pings_nothing(bindir, tmp_path, capsys):
    tool(bindir, "ping", 'echo "$@" >> "%s"' % (tmp_path / "pings"))
    result = run(capsys, {"docker_root": str(tmp_path), "ping_rails": [{"target": "-f", "interface": "enp1s0f1np1"}]})
    assert result.get("failed") is True and "ping_targets: '-f'" in result["msg"]
    assert not (tmp_path / "pings").exists()
