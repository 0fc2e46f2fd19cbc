"""How `make test` spreads the lab files over its two pytest-xdist workers (tests/lab/labkit.py): `--dist loadgroup`,
the files that start Ray in the xdist_group ENGINES, every other lab file a group of its own. Run on a tree of small
test files beside a link to labkit (no Docker needed): each group's tests on one worker, in the order labkit gives.

With pytest 9.2 and pytest-xdist 3.8.0 the marks alone group nothing (pytest-dev/pytest-xdist#1386): the worker sets
`item._nodeid`, which pytest no longer reads, and every test is handed out on its own. labkit names the groups itself
when xdist could not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

FILES = {
    "test_engines_a.py": "from labkit import ENGINES\n\npytestmark = ENGINES\n",
    "test_engines_b.py": "from labkit import ENGINES, LAST\n\npytestmark = [ENGINES, LAST]\n",
    "test_engines_c.py": "from labkit import ENGINES\n\npytestmark = ENGINES\n",
    "test_builds.py": "from labkit import FIRST\n\npytestmark = FIRST\n",
    "test_long.py": "import pytest\n\npytestmark = pytest.mark.lab_minutes(9)\n",
    "test_remakes.py": "from labkit import LAST\n\npytestmark = LAST\n",
    "test_short_a.py": "",
    "test_short_b.py": "",
}
TEST = "\n\ndef test_{n}():\n    time.sleep(0.2)\n"


def run_lab_tree(tmp_path):
    """The files above, three tests each, under TMP/tests/lab with labkit and the lab's conftest; pytest -n 2 as in
    `make test`. Returns [(worker, file, test id)] in the order they finished."""
    lab = tmp_path / "tests" / "lab"
    lab.mkdir(parents=True)
    (lab / "labkit.py").symlink_to(REPO / "tests" / "lab" / "labkit.py")
    (lab / "conftest.py").write_text((REPO / "tests" / "lab" / "conftest.py").read_text())
    for name, head in FILES.items():
        (lab / name).write_text("import time\n" + head + "".join(TEST.format(n=n) for n in range(3)))
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = tests/lab\nmarkers =\n    lab\n    lab_first\n"
                                         "    lab_last\n    lab_minutes(n)\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder",
                           "-v", "-p", "no:cacheprovider", "tests/lab"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return re.findall(r"^\[(gw\d)\] .*?PASSED (tests/lab/(\w+)\.py::\S+)", proc.stdout, re.M)


def test_each_group_runs_on_one_worker_and_its_tests_carry_its_name(tmp_path):
    ran = run_lab_tree(tmp_path)
    assert len(ran) == 3 * len(FILES), ran
    workers = {}
    for worker, test_id, stem in ran:
        group = "engines" if stem.startswith("test_engines") else stem
        assert test_id.endswith(f"@{group}"), test_id  # the ID --dist loadgroup schedules by
        workers.setdefault(group, set()).add(worker)
    assert all(len(used) == 1 for used in workers.values()), workers
    # The engines' group took a worker to itself: every file that could start Ray ran after one another there.
    engines = workers["engines"].pop()
    assert [stem for worker, test_id, stem in ran if worker == engines][:9] == (
        ["test_engines_a"] * 3 + ["test_engines_c"] * 3 + ["test_engines_b"] * 3)


def test_the_other_files_are_handed_out_first_marked_then_longest_then_last_marked(tmp_path):
    ran = run_lab_tree(tmp_path)
    engines = next(worker for worker, test_id, stem in ran if stem.startswith("test_engines"))
    other = []
    for worker, test_id, stem in ran:
        if worker != engines and stem not in other:
            other.append(stem)
    # The worker beside the engines takes the files in labkit's order; the engines' worker, once free, takes some of
    # the last ones.
    order = ["test_builds", "test_long", "test_short_a", "test_short_b", "test_remakes"]
    assert other == [stem for stem in order if stem in other] and other[:2] == order[:2], other
