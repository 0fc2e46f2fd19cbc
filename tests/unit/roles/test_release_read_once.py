# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One reader of the release record (issue 35): the roles read release.json (and rollout.json) through
dgxspark.vllm.release_info, never by a slurp and a template of their own."""

from __future__ import annotations

import pathlib

import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"


def tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from tasks(node.get(key) or [])


def test_no_role_slurps_a_release_record_or_parses_one_itself():
    found = []
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        text = path.read_text()
        if "b64decode | from_json" in text:
            found.append(f"{path.relative_to(ROLES)}: b64decode | from_json")
        for task in tasks(yaml.safe_load(text) or []):
            slurp = task.get("ansible.builtin.slurp") or {}
            if isinstance(slurp, dict) and any(name in str(slurp.get("src", "")) for name in
                                               ("release.json", "rollout.json", "release_file", "config_dir }}/{{ item")):
                found.append(f"{path.relative_to(ROLES)}: {task.get('name')}")
    assert found == [], found
