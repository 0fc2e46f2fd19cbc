"""Session hooks for every test under tests/: the README's "Tested with" block made from what the run used.

The tests record what they observed (labkit.tested_with, into a directory of this run's own that the controller makes
and hands to pytest-xdist's workers). At the end of the session the controller (never a worker) adds its own
ansible-core and Python, renders the block into tests/output/TESTED-WITH.md, prints it and compares it with the
README's (tools/tested_with.py). When every recording test file ran (`make test`, `make lab-test`) and the run
passed, a README that disagrees fails the session; a subset of the tests only writes the file.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_WORKER_KEY = "dgxspark_tested_with_dir"


def _tool():
    module = sys.modules.get("dgxspark_tested_with")
    if module is None:
        spec = importlib.util.spec_from_file_location("dgxspark_tested_with", REPO / "tools" / "tested_with.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["dgxspark_tested_with"] = module
        spec.loader.exec_module(module)
    return module


class _State:
    run_dir = None
    collected = set()  # the test files the session collected (from any worker's collection)


def _controller(config):
    return not hasattr(config, "workerinput")


def pytest_configure(config):
    tool = _tool()
    if not _controller(config):
        run_dir = config.workerinput.get(_WORKER_KEY)
        if run_dir:
            os.environ[tool.ENV] = run_dir
        return
    try:
        _State.run_dir = tool.new_run_dir()
        tool.prune_runs(keep=_State.run_dir)
    except OSError as err:
        print(f"tested-with: no record directory ({err}): nothing is recorded in this run")
        return
    os.environ[tool.ENV] = str(_State.run_dir)  # inherited by workers and by anything the tests start
    # What the controller itself runs: every playbook and ansible command of the tests comes from this interpreter's
    # environment (labkit's BIN is its directory).
    try:
        from ansible.release import __version__ as core  # pylint: disable=import-outside-toplevel
        tool.record("ansible-core", "controller: the tests' playbooks, ad-hoc commands and molecule", core,
                    by="tests/conftest.py")
    except ImportError:
        pass
    tool.record("python", f"controller ({platform.system()} {platform.machine()})", platform.python_version(),
                by="tests/conftest.py", implementation=platform.python_implementation())


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist, on the controller: each worker records into the controller's run directory."""
    if _State.run_dir:
        node.workerinput[_WORKER_KEY] = str(_State.run_dir)


def _note(nodeids):
    _State.collected.update(nodeid.split("::", 1)[0] for nodeid in nodeids)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):  # pylint: disable=unused-argument
    _note(ids)


def pytest_collection_finish(session):
    if _controller(session.config):
        _note(item.nodeid for item in session.items)


def pytest_sessionfinish(session, exitstatus):
    if not _controller(session.config) or _State.run_dir is None:
        return
    tool = _tool()
    try:
        verdict = tool.judge(tool.merge(tool.load(_State.run_dir)), _State.run_dir.name, _State.collected,
                             tool.README.read_text(), failed=exitstatus != 0 or bool(session.testsfailed))
        if verdict["write"]:
            tool.REPORT.parent.mkdir(parents=True, exist_ok=True)
            tool.REPORT.write_text(verdict["report"])
    except Exception as err:  # pylint: disable=broad-exception-caught
        _writer(session.config)(f"tested-with: the block could not be made: {err!r}")
        if exitstatus == 0 and not session.testsfailed and set(tool.RECORDING_FILES) <= _State.collected:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR  # a full run must judge its block
        return
    write = _writer(session.config)
    if not verdict["write"]:  # no test recorded anything (the unit tests alone): nothing to keep or say
        tool.prune_runs(keep=None, older_than=-1, only=_State.run_dir)
        return
    write("")
    write(f"tested-with: {os.path.relpath(tool.REPORT, REPO)} written from this run's records "
          f"({os.path.relpath(_State.run_dir, REPO)})")
    for line in (verdict["block"] or "").splitlines():
        write(line)
    for line in verdict["diff"]:
        write(line)
    for line in verdict["messages"]:
        write(f"tested-with: {line}")
    if verdict["fail"]:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _writer(config):
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        return reporter.write_line
    return print
