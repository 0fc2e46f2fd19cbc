"""tests/lab/labkit.py's ansible_failures: what a failed molecule step reports (no Docker needed). CI's stop 41 showed
only 'fatal: [localhost]: FAILED! =>' for the fresh scenario's deploy: the reason sat in the result's YAML body and in
the nested ansible-playbook's own output."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

NESTED = """PLAY [Run the quickstart against fresh lab nodes] ******************************
TASK [The quickstart's deploy command] *****************************************
fatal: [localhost]: FAILED! =>
    changed: true
    cmd:
    - /usr/bin/python3
    msg: non-zero return code
    rc: 1
    stderr: |-
        first_run: the deploy failed (2)
    stdout: |-
        PLAY [Preflight] ***************************************************************
        TASK [dgxspark.vllm.preflight : Read each node] ********************************
        ok: [spark-1]

        fatal: [spark-2]: FAILED! =>
            changed: false
            msg: |-
                spark-2: the Python Docker SDK is missing
                fix: sudo apt-get install python3-docker
        PLAY RECAP *********************************************************************
        spark-2                    : ok=1    changed=0    unreachable=0    failed=1
    stdout_lines: <omitted>

PLAY RECAP *********************************************************************
localhost                  : ok=2    changed=1    unreachable=0    failed=1
"""


def labkit(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    spec = importlib.util.spec_from_file_location("labkit_failures", REPO / "tests/lab/labkit.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "labkit_failures", module)
    spec.loader.exec_module(module)
    return module


def test_a_nested_playbook_failure_is_reported_with_its_task_and_message(monkeypatch):
    report = labkit(monkeypatch).ansible_failures(NESTED).splitlines()
    assert report[:2] == ["TASK [The quickstart's deploy command] *****************************************",
                          "fatal: [localhost]: FAILED! =>"]
    assert "    msg: non-zero return code" in report
    inner = report.index("TASK [dgxspark.vllm.preflight : Read each node] ********************************")
    assert report[inner + 1] == "fatal: [spark-2]: FAILED! =>"
    assert [line.strip() for line in report[inner + 2:]] == [
        "changed: false", "msg: |-", "spark-2: the Python Docker SDK is missing",
        "fix: sudo apt-get install python3-docker"]
    # the stdout block is not copied whole: no ok lines, no recap
    assert not [line for line in report if "ok=" in line or line.startswith("ok:")]


def test_each_failure_body_is_cut_and_the_report_keeps_its_end(monkeypatch):
    kit = labkit(monkeypatch)
    long = "TASK [t] ***\nfatal: [n]: FAILED! =>\n    msg: " + "x" * 5000 + "\n    rc: 1\n"
    report = kit.ansible_failures(long, per_failure=200)
    assert report.startswith("TASK [t] ***\nfatal: [n]: FAILED! =>\n    msg: xxx")
    assert len(report) < 300 and "rc: 1" not in report
    many = "".join(f"TASK [t{i}] ***\nfatal: [n]: FAILED! =>\n    msg: failure {i}\n" for i in range(200))
    assert kit.ansible_failures(many, limit=500).endswith("msg: failure 199")
