"""docs/architecture.svg is what docs/architecture.dot renders to: the picture cannot drift from its text source."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def test_the_architecture_picture_is_current():
    dot = shutil.which("dot")
    assert dot, "Graphviz's dot is missing: `make host-deps` installs it (Debian's graphviz)"
    rendered = subprocess.run([dot, "-Tsvg", str(DOCS / "architecture.dot")], check=True, capture_output=True).stdout
    committed = (DOCS / "architecture.svg").read_bytes()
    assert rendered == committed, (
        "docs/architecture.svg is not what docs/architecture.dot renders to: run "
        "`dot -Tsvg docs/architecture.dot -o docs/architecture.svg` and commit both")


def test_the_architecture_page_shows_the_picture_and_the_readme_links_it():
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    assert "](architecture.svg)" in page
    assert "(docs/architecture.md)" in (REPO / "README.md").read_text(encoding="utf-8")
