"""tools/build-check.sh judges whether pages render, not whether anything wrote to stderr.

Each test runs the real build check (build, contents, offline install, ansible-doc) on a copy of the collection's
tracked files, rendering only the page it looks at (--only), with the checkout's virtualenv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
MODULE = "image_sync"
PAGE = f"dgxspark.vllm.{MODULE}"
MARK = "dgxspark-build-check-test: a library's warning at interpreter start"


@pytest.fixture(name="tree")
def fixture_tree(tmp_path):
    """The checkout's tracked files (as they are in the working tree) copied to TMP_PATH/collection."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    root = tmp_path / "collection"
    for name in files.decode().split("\0"):
        src = REPO / name
        if name and src.is_file():  # a tracked file removed in the working tree is not copied
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / name)
    return root


def build_check(tree, *args, **env):
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environ.update(env)
    return subprocess.run([str(tree / "tools" / "build-check.sh"), "--venv", str(VENV), "--only", PAGE, *args],
                          cwd=tree, capture_output=True, text=True, env=environ, timeout=600, check=False)


def test_a_module_whose_documentation_is_not_yaml_fails_the_build_check_by_name(tree):
    path = tree / "plugins" / "modules" / f"{MODULE}.py"
    text = path.read_text()
    head = 'DOCUMENTATION = r"""\n'
    assert head in text
    path.write_text(text.replace(head, head + "broken: [not, closed\n", 1))

    proc = build_check(tree)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"DOES NOT RENDER: ansible-doc -t module {PAGE}: ansible-doc exited 1" in proc.stderr, proc.stderr
    assert f"[ERROR]: module {PAGE} Missing documentation (or could not parse documentation)" in proc.stderr
    assert "BUILD-CHECK FAILED: 1 problem(s)" in proc.stderr
    assert "BUILD-CHECK PASSED" not in proc.stdout


def test_a_python_warning_on_stderr_is_shown_and_does_not_fail_a_page_that_renders(tree, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import warnings\n\n\n"
        "class LibraryDeprecationWarning(UserWarning):\n"
        "    pass\n\n\n"
        f"warnings.warn({MARK!r}, LibraryDeprecationWarning)\n")
    # the interpreter the build check uses does print it
    probe = subprocess.run([str(VENV / "bin" / "python"), "-c", "pass"], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(site)})
    assert f"LibraryDeprecationWarning: {MARK}" in probe.stderr

    proc = build_check(tree, PYTHONPATH=str(site))

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DOES NOT RENDER" not in proc.stderr
    assert f"WARNING (not a rendering error): ansible-doc -t module {PAGE} printed on stderr:" in proc.stderr
    warned = proc.stderr.split(f"WARNING (not a rendering error): ansible-doc -t module {PAGE} printed on stderr:")[1]
    assert f"LibraryDeprecationWarning: {MARK}" in warned
    assert "BUILD-CHECK PASSED: dgxspark-vllm-" in proc.stdout


def test_only_a_name_that_is_no_page_fails(tree):
    proc = build_check(tree, "--only", "dgxspark.vllm.no_such_page")

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NO SUCH PAGE: --only dgxspark.vllm.no_such_page names no module, plugin or role of dgxspark.vllm" in \
        proc.stderr


def test_the_pages_of_the_deprecated_filters_and_of_their_neighbours_render_without_warnings(tree):
    """fleet_pairs and release_compare are deprecated in their documentation and warn when used, not through
    meta/runtime.yml: ansible-doc loads every filter file to find one filter, so a routed deprecation printed its
    warnings on every filter's page (found by the fresh replication at 9bfd3ce, where three pages failed)."""
    proc = build_check(tree, "--only", "dgxspark.vllm.fleet_pairs", "--only", "dgxspark.vllm.fabric_mtu_mismatch")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DOES NOT RENDER" not in proc.stderr and "has been deprecated" not in proc.stderr, proc.stderr
    assert "BUILD-CHECK PASSED: dgxspark-vllm-" in proc.stdout
