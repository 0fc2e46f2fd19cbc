"""One version: galaxy.yml's. No content claims to be newer, the changelog has released it, and the collections it
depends on are the same ranges in galaxy.yml and requirements.yml, ranges that admit the copies the pinned `ansible`
package bundles."""

from __future__ import annotations

import json
import re
from pathlib import Path

import ansible_collections
import pytest
import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
VERSION = Version(GALAXY["version"])
# version_added as a YAML key in any DOCUMENTATION, RETURN, doc fragment or argument spec (quoted or not)
VERSION_ADDED = re.compile(r"""^\s*(?:-\s+)?version_added:\s*['"]?([^'"\s#]+)""", re.M)


def version_added_anywhere():
    """(file relative to the collection, line, value) of every version_added under plugins/ and in the roles'
    meta/argument_specs.yml."""
    files = [p for p in sorted((REPO / "plugins").rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    files += sorted(REPO.glob("roles/*/meta/argument_specs.yml"))
    found = []
    for path in files:
        text = path.read_text(errors="replace")
        for match in VERSION_ADDED.finditer(text):
            found.append((str(path.relative_to(REPO)), text.count("\n", 0, match.start()) + 1, match.group(1)))
    return found


def test_no_version_added_is_newer_than_the_collection():
    found = version_added_anywhere()
    # the modules and roles all state one; a pattern that finds none would pass anything
    assert len(found) >= 20, found
    assert any(name.startswith("roles/") for name, _line, _value in found)
    newer = [f"{name}:{line}: version_added {value}" for name, line, value in found if Version(value) > VERSION]
    assert newer == [], f"newer than galaxy.yml's version {VERSION}"


def test_the_pattern_sees_a_version_added_of_every_shape():
    text = "version_added: 0.3.0\n  - version_added: '1.0.0'\n    version_added: \"0.2.0\"  # comment\n"
    assert [m.group(1) for m in VERSION_ADDED.finditer(text)] == ["0.3.0", "1.0.0", "0.2.0"]


def test_the_changelog_lists_the_collection_version_as_released():
    # `antsibull-changelog release` writes both; until it ran for this version, this test fails
    changes = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())
    releases = [str(v) for v in (changes.get("releases") or {})]
    assert str(VERSION) in releases, f"changelogs/changelog.yaml releases {releases}, not galaxy.yml's {VERSION}"
    rst = REPO / "CHANGELOG.rst"
    assert rst.is_file(), "no CHANGELOG.rst (antsibull-changelog release writes it)"
    assert re.search(rf"^v{re.escape(str(VERSION))}\n=+$", rst.read_text(), re.M), \
        f"CHANGELOG.rst has no section for v{VERSION}"


def requirements_yml():
    collections = yaml.safe_load((REPO / "requirements.yml").read_text())["collections"]
    return {entry["name"]: entry.get("version", "*") for entry in collections}


def test_requirements_yml_asks_for_the_same_collections_and_ranges_as_galaxy_yml():
    assert requirements_yml() == GALAXY["dependencies"]


def test_every_dependency_is_a_range_with_an_upper_bound():
    for name, spec in GALAXY["dependencies"].items():
        parts = [part.strip() for part in spec.split(",")]
        assert any(part.startswith(">=") for part in parts), f"{name}: {spec}"
        assert any(part.startswith("<") and not part.startswith("<=") for part in parts), f"{name}: {spec}"


def bundled(name):
    namespace, collection = name.split(".")
    for base in ansible_collections.__path__:
        manifest = Path(base) / namespace / collection / "MANIFEST.json"
        if manifest.is_file():
            return json.loads(manifest.read_text())["collection_info"]["version"]
    return None


@pytest.mark.parametrize("name", sorted(GALAXY["dependencies"]))
def test_the_ranges_admit_what_the_pinned_ansible_package_bundles(name):
    version = bundled(name)
    assert version, f"{name} is not bundled in this virtualenv (the `ansible` package of requirements.txt)"
    assert meets_requirements(version, GALAXY["dependencies"][name]), \
        f"{name} {version} (bundled) is outside galaxy.yml's {GALAXY['dependencies'][name]}"
