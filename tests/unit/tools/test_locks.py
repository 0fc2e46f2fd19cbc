"""tools/locks.py: every place the project installs Python packages installs from a lock, pinned and hashed.

The faults are made on a copy of the project's lock inputs and outputs: a requirement added unpinned or unhashed to a
lock, an input changed since its lock was made, and an install site that does not use a lock each fail the check.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


locks = _load(REPO / "tools" / "locks.py", "dgxspark_locks")


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of every lock's inputs and output, the shared reader, and the install sites, as a git work tree."""
    root = tmp_path / "repo"
    wanted = {Path("plugins/module_utils/_pip_lock.py")}
    for lock in locks.LOCKS:
        wanted.add(Path(lock.output))
        wanted.update(p.relative_to(REPO) for p in lock.input_files())
    tracked = subprocess.run(["git", "ls-files", *locks.SCAN_DIRS], cwd=REPO, check=True, capture_output=True,
                             text=True).stdout.split()
    wanted.update(Path(p) for p in tracked)
    for rel in wanted:
        if (REPO / rel).is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, root / rel)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    monkeypatch.setattr(locks, "REPO", root)
    return root


def _problems(capsys, root):
    rc = locks.check(root)
    err = capsys.readouterr().err
    return rc, err


def test_the_projects_locks_pass(capsys):
    assert locks.check() == 0, capsys.readouterr().err


def test_the_copy_passes_before_any_fault(tree, capsys):
    rc, err = _problems(capsys, tree)
    assert rc == 0, err


def test_a_requirement_added_unpinned_to_a_lock_fails(tree, capsys):
    with open(tree / "requirements.txt", "a", encoding="utf-8") as lock:
        lock.write("rich>=13 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    rc, err = _problems(capsys, tree)
    assert rc == 1
    assert "requirements.txt: `rich>=13` is not pinned with ==" in err


def test_a_requirement_added_unhashed_to_a_lock_fails(tree, capsys):
    with open(tree / "lab/images/vllm-node-0.14/requirements.txt", "a", encoding="utf-8") as lock:
        lock.write("rich==13.9.4\n")
    rc, err = _problems(capsys, tree)
    assert rc == 1
    assert "lab/images/vllm-node-0.14/requirements.txt: rich==13.9.4 has no --hash=sha256" in err


def test_an_input_changed_since_its_lock_was_made_is_stale(tree, capsys):
    with open(tree / "requirements.in", "a", encoding="utf-8") as infile:
        infile.write("rich==13.9.4\n")
    rc, err = _problems(capsys, tree)
    assert rc == 1
    assert "requirements.txt: stale: requirements.in" in err
    assert "rich (from requirements.in) is not in the lock" in err
    # the test lock is resolved with requirements.in too (-r), so it is stale as well
    assert "requirements-test.txt: stale:" in err


def test_a_lock_whose_pin_no_longer_meets_its_input_fails(tree, capsys):
    text = (tree / "roles/hybrid_image/files/ray-2.54.1.txt").read_text(encoding="utf-8")
    (tree / "roles/hybrid_image/files/ray-2.54.1.txt").write_text(text.replace("ray==2.54.1", "ray==2.53.0"),
                                                                  encoding="utf-8")
    rc, err = _problems(capsys, tree)
    assert rc == 1
    assert "ray[default]==2.54.1 (from roles/hybrid_image/files/ray-2.54.1.in) is not met by the lock's ray==2.53.0" in err


@pytest.mark.parametrize("path, text, site", [
    ("lab/images/extra/Dockerfile", "FROM x\nRUN pip install --no-cache-dir requests==2.32.3\n",
     "lab/images/extra/Dockerfile:2"),
    ("roles/extra/tasks/main.yml", "---\n- name: Tool\n  ansible.builtin.pip:\n    name: requests==2.32.3\n",
     "roles/extra/tasks/main.yml:3"),
    ("tools/extra.py", "import subprocess\nsubprocess.run(['python3', '-m', 'pip', 'install', 'requests'])\n",
     "tools/extra.py:2"),
    ("Makefile", "all:\n\tpip install -r requirements.txt\n", "Makefile:2"),
])
def test_an_install_site_without_a_lock_fails(tree, capsys, path, text, site):
    target = tree / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    rc, err = _problems(capsys, tree)
    assert rc == 1
    assert f"{site}: installs Python packages without --require-hashes and a lock" in err


@pytest.mark.parametrize("text", [
    "FROM x\nRUN pip install --no-cache-dir --require-hashes -r /tmp/requirements.txt\n",
    "FROM x\nRUN set -eu \\\n && pip install -q \\\n      --require-hashes -r /tmp/requirements.txt\n",
    "FROM x\n# locks: exempt (a wheel built in this image)\nRUN pip install --no-index --no-deps /tmp/x.whl\n",
])
def test_an_install_site_from_a_lock_or_with_a_reason_passes(tree, capsys, text):
    (tree / "lab/images/extra").mkdir(parents=True)
    (tree / "lab/images/extra/Dockerfile").write_text(text, encoding="utf-8")
    rc, err = _problems(capsys, tree)
    assert rc == 0, err


def test_the_stand_in_images_lock_every_pin_the_stand_in_engine_keeps():
    """The stand-in images install from their locks only: the lock's input must hold every requirement of vLLM's
    that the stand-in engine's wheel declares (lab/engine/build_wheel.py), or `pip check` in the image fails."""
    for flavour, image in (("0.14", "vllm-node-0.14"), ("0.17", "vllm-qwen35-0.17")):
        infile = (REPO / "lab" / "images" / image / "requirements.in").read_text(encoding="utf-8").splitlines()
        kept = subprocess.run([sys.executable, str(REPO / "lab" / "engine" / "build_wheel.py"), "--flavour", flavour,
                               "--requirements"], check=True, capture_output=True, text=True).stdout.splitlines()
        assert kept, "build_wheel.py --requirements printed nothing"
        missing = [r for r in kept if r.strip() and r not in infile]
        assert not missing, f"lab/images/{image}/requirements.in lacks {missing}"


def test_refresh_is_the_only_step_that_resolves(monkeypatch):
    """`check` must not ask an index: it reads files only (an upstream release never changes its answer)."""
    def no_network(*args, **kwargs):
        raise AssertionError("check ran the resolver")
    monkeypatch.setattr(locks, "_compile", no_network)
    assert locks.check() == 0


def test_the_command_line_refuses_an_unknown_lock(capsys):
    assert locks.main(["refresh", "nope"]) == 2
    assert "unknown lock(s) nope" in capsys.readouterr().err


def test_sanity_wheels_refuse_an_ansible_test_pin_the_lock_lacks(monkeypatch, tmp_path, capsys):
    """ansible-test's sanity venvs install only from the lock's wheels: a pin of ansible-test's that the lock does not
    hold (a new ansible-core) stops tools/sanity.sh before anything is downloaded."""
    version, lines, pip = locks._ansible_test_requirements(REPO / ".venv")
    monkeypatch.setattr(locks, "_ansible_test_requirements",
                        lambda venv: (version, [*lines, "pylint==0.0.1"], pip))
    assert locks.sanity_wheels(REPO / ".venv", tmp_path / "wheels") == 1
    assert "wants pylint==0.0.1, which the lock does not pin" in capsys.readouterr().err
    assert not (tmp_path / "wheels").exists()
