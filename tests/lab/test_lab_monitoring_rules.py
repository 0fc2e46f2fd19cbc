"""The monitoring role's rules and configuration as Prometheus itself reads them: `promtool test rules` (each alert
with a firing and a non-firing case, tests/lab/monitoring/rules.test.yml) and `promtool check config` on rendered
configurations, in the lab's Prometheus image (Debian's 3.5 from forky, built by `make test`'s lab-images step: the
branch of the official v3.5 image real Sparks run). A broken rule is refused."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from labkit import LAB, report, run, tested_with

from ansible_collections.dgxspark.vllm.plugins.module_utils import _monitoring as mon

IMAGE = "lab/prometheus:3.5"
TESTS = Path(__file__).parent / "monitoring"


@pytest.fixture(scope="module")
def image():
    run([*LAB, "images", "prometheus-3.5"])
    version = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/promtool", IMAGE,
                              "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"version (\S+)", version.stdout + version.stderr)
    tested_with("prometheus", f"`{IMAGE}`", found.group(1) if found else "", tool="promtool")
    return IMAGE


def promtool(directory, *args):
    directory.chmod(0o755)
    for path in directory.iterdir():
        path.chmod(0o644)
    return subprocess.run(["docker", "run", "--rm", "--network", "none", "--user", "65534:65534", "--entrypoint",
                           "/bin/promtool", "--workdir", "/etc/prometheus", "-v", f"{directory}:/etc/prometheus:ro",
                           IMAGE, *args], capture_output=True, text=True, check=False)


def test_promtool_test_rules_passes_on_the_rules_the_role_renders_by_default(image, tmp_path):
    (tmp_path / mon.RULES_FILE).write_text(mon.render_rules({}))
    shutil.copy(TESTS / "rules.test.yml", tmp_path / "rules.test.yml")
    proc = promtool(tmp_path, "test", "rules", "rules.test.yml")
    groups = (TESTS / "rules.test.yml").read_text().count("\n  - interval:")
    report(f"monitoring: promtool test rules ({image}): rc {proc.returncode}, {groups} test groups, "
           f"{(proc.stdout + proc.stderr).strip().splitlines()[-1]}")
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_promtool_refuses_a_rule_test_that_expects_the_stall_too_early(image, tmp_path):
    """The test file does test: moving the stall's expected firing into its pending time fails."""
    (tmp_path / mon.RULES_FILE).write_text(mon.render_rules({}))
    text = (TESTS / "rules.test.yml").read_text()
    assert "      - eval_time: 7m\n" in text
    (tmp_path / "rules.test.yml").write_text(text.replace("      - eval_time: 7m\n", "      - eval_time: 5m30s\n", 1))
    proc = promtool(tmp_path, "test", "rules", "rules.test.yml")
    assert proc.returncode != 0 and "DgxsparkEngineStalled" in proc.stdout + proc.stderr


@pytest.mark.parametrize("settings", [{}, {"scrape_interval": "5s", "evaluation_interval": "5s", "stall_window": "20s",
                                           "stall_for": "30s"}])
def test_promtool_accepts_the_rendered_configuration_and_refuses_a_broken_rule(image, tmp_path, settings):
    found = mon.targets({"pair1": {"head": "s-1.example.internal", "members": ["s-1.example.internal", "s-2"]}},
                        nodes={"s-1.example.internal": {"lan_ip": "10.0.0.11", "fabric_devices": ["enp1s0f1np1"]},
                               "s-2": {"lan_ip": "fd00::12", "fabric_devices": ["enp1s0f1np1", "rocep1s0f1"]}},
                        hints={}, releases={"s-1.example.internal": {"endpoint": {"host": "127.0.0.1", "port": 8000}}},
                        gateways=[{"host": "gw", "lan_ip": "10.0.0.5"}], monitor="gw")
    rendered = mon.render_config(found, settings, engine_key="engine-key-0123", gateway_key="client-key-0123")
    for file in rendered["files"]:
        (tmp_path / file["name"]).write_text(file["content"])
    good = promtool(tmp_path, "check", "config", "/etc/prometheus/prometheus.yml")
    assert good.returncode == 0 and "SUCCESS" in good.stdout, good.stdout + good.stderr
    rules = tmp_path / mon.RULES_FILE
    rules.chmod(0o644)
    rules.write_text(rules.read_text().replace("sum by (cluster) (vllm:num_requests_running)", "sum by (cluster (", 1))
    broken = promtool(tmp_path, "check", "config", "/etc/prometheus/prometheus.yml")
    assert broken.returncode != 0, broken.stdout
