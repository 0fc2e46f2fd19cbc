"""docs/security.md names, for each finding it calls fixed or partly fixed, the tests that show it: every test it
names exists (a renamed or removed test makes the page wrong), and every finding of the review has a row."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "security.md").read_text()
FINDINGS = ["H1", "H2", "H3", "M1", "M2", "M3", "M4", "M5", "M6", "M7"] + [f"L{i}" for i in range(1, 12)]


def rows():
    """{finding: (status, tests cell)} of the second pass's table."""
    out = {}
    for line in PAGE.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in FINDINGS:
            out[cells[0]] = (cells[2].strip("*"), cells[3])
    return out


def test_every_finding_has_a_row_with_a_status():
    found = rows()
    assert sorted(found) == sorted(FINDINGS)
    assert {status for status, _tests in found.values()} <= {"fixed", "partly", "open"}


def test_every_fixed_finding_names_tests_and_every_named_test_exists():
    for finding, (status, cell) in rows().items():
        named, last = 0, None
        # In order: `tests/...py[::name]`, or `::name` for one more test of the file named last.
        for path, test in re.findall(r"`((?:tests|lab)/[\w/.-]+\.py|)(?:::([\w*]+))?`", cell):
            if path:
                last = path
                assert (REPO / path).is_file(), (finding, path)
            if test:
                assert last and re.search(rf"^def {test.replace('*', '[A-Za-z0-9_]*')}\(", (REPO / last).read_text(),
                                          re.M), (finding, last, test)
            named += bool(path or test)
        if status == "fixed" and finding != "L9":  # L9: a line of the role's configuration, said in the row
            assert named, f"{finding} is called fixed without a test"
