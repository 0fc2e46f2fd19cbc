# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One layout registry (issue 35): every directory, file and engine container of the collection written once
(module_utils/_layout.py); the roles that own them hold the same values; the others ask the layout lookup, which
answers the inventory's value first; and every path a role keeps lies in one of the recorded trees."""

from __future__ import annotations

import pathlib
import re
from unittest import mock

import pytest
import yaml

from ansible.errors import AnsibleLookupError

from ansible_collections.dgxspark.vllm.plugins.lookup.layout import LookupModule
from ansible_collections.dgxspark.vllm.plugins.module_utils._layout import IN_CONTAINER, LAYOUT, in_trees

REPO = pathlib.Path(__file__).resolve().parents[4]
ROLE_DEFAULTS = {path.parts[-3]: yaml.safe_load(path.read_text()) or {}
                 for path in sorted((REPO / "roles").glob("*/defaults/main.yml"))}
# What a default may name without being one of the collection's own places: programs and files of the system, and
# places of the containers' own file systems.
NOT_OURS = re.compile(r"^(/usr/bin/|/dev/|/proc/|/sys/|/root/\.cache|/models|/etc/ssh/|/run/|/tmp/|/usr/local/etc/|"
                      r"/var/tmp$|/var/lib/docker$)")
URL_PATHS = ("gateway_paths",)  # the routes the gateway relays, not places on a node


def lookup(terms, variables=None):
    module = LookupModule()
    module._templar = mock.Mock(template=lambda value: value.replace("{{ base }}", "/srv/x"))
    return module.run(terms, variables=variables or {})


def test_the_inventorys_value_first_the_registrys_otherwise():
    assert lookup(["vllm_serve_config_dir", "ray_cluster_head_container"]) == [
        "/etc/dgxspark/vllm", "dgxspark-ray-head"]
    assert lookup(["vllm_serve_config_dir"], {"vllm_serve_config_dir": "/data/vllm"}) == ["/data/vllm"]
    assert lookup(["vllm_serve_config_dir"], {"vllm_serve_config_dir": "{{ base }}/vllm"}) == ["/srv/x/vllm"]
    with pytest.raises(AnsibleLookupError, match="'vllm_config' is not in the collection's layout"):
        lookup(["vllm_config"])


def test_a_place_inside_the_engine_container_is_fixed_and_written_once():
    """The serving environment and the Ray token sit at fixed places in the engine container: the layout answers them
    (an inventory value of the same name moves nothing), the engine spec binds there, and the engine's roles do not
    write them again (the watchdog's container mounts the node's config directory at a place of its own)."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import _engine_spec

    assert lookup(["engine_serve_env", "engine_ray_token"], {"engine_serve_env": "/elsewhere"}) == [
        "/etc/dgxspark/vllm/serve.env", "/etc/dgxspark/ray/auth_token"]
    assert (_engine_spec.SERVE_ENV, _engine_spec.RAY_TOKEN) == (IN_CONTAINER["engine_serve_env"],
                                                                IN_CONTAINER["engine_ray_token"])
    engine_roles = [*REPO.glob("roles/ray_cluster/*/*.yml"), *REPO.glob("roles/vllm_serve/*/*.yml")]
    written = [f"{path.relative_to(REPO)}:{number}" for path in sorted(engine_roles)
               for number, line in enumerate(path.read_text().splitlines(), 1)
               for place in IN_CONTAINER.values() if place in line]
    assert written == [], written


@pytest.mark.parametrize("name", sorted(LAYOUT))
def test_the_role_that_owns_a_place_holds_the_registrys_value(name):
    owners = {role: values[name] for role, values in ROLE_DEFAULTS.items() if name in values}
    if name.startswith("dgxspark_"):
        assert not owners, owners  # an inventory-wide variable: no role owns it
        return
    assert owners, f"no role's defaults set {name}"
    for role, value in owners.items():
        assert value == LAYOUT[name], (role, value)


def test_no_role_or_playbook_writes_a_place_of_the_layout_again():
    """The default('/…/dgxspark/…') fallbacks are gone: one reads another role's place from the layout."""
    found = []
    for path in sorted([*REPO.glob("roles/*/*/*.yml"), *REPO.glob("playbooks/*.yml"), *REPO.glob("molecule/*/*.yml")]):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name, value in LAYOUT.items():
                if f"{name} | default('{value}')" in line or f"default('{value}')" in line:
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == [], found


def _paths(value):
    if isinstance(value, str):
        text = value
        for name, place in LAYOUT.items():
            text = text.replace(f"{{{{ lookup('dgxspark.vllm.layout', '{name}') }}}}", place)
        return [text] if text.startswith("/") and "{{" not in text else []
    if isinstance(value, list):
        return [p for item in value for p in _paths(item)]
    if isinstance(value, dict):
        return [p for item in value.values() for p in _paths(item)]
    return []


def test_every_path_a_role_keeps_lies_in_a_recorded_tree():
    """Each absolute path of the roles' defaults is the collection's own (in /etc/dgxspark, /var/lib/dgxspark,
    /srv/dgxspark, /opt/dgxspark, or one of its files in the node exporter's directory or root's authorized_keys),
    or a place of the system or of a container the collection only reads or mounts."""
    outside = [f"{role}: {name} = {path}" for role, values in ROLE_DEFAULTS.items() for name, value in values.items()
               for path in _paths(value) if name not in URL_PATHS and not in_trees(path) and not NOT_OURS.match(path)]
    assert outside == [], outside


def test_the_deploy_records_coverage_is_the_layouts():
    """Item 4 of issue 35: the record captures the layout's recorded trees whole (less what changes on its own), and
    each other place of the collection says why the record does without it; the deploy_state role asks the same."""
    from ansible_collections.dgxspark.vllm.plugins.module_utils import _deploy_record, _layout

    assert _deploy_record.TREES == _layout.RECORDED and _deploy_record.EXCLUDE == _layout.CHANGING
    assert set(_layout.TREES + _layout.SHARED) == set(_layout.RECORDED) | set(_layout.NOT_RECORDED)
    for name, path in _layout.PATHS.items():
        recorded = any(path == tree or path.startswith(tree + "/") for tree in _layout.RECORDED)
        assert recorded or any(path == other or path.startswith(other + "/") for other in _layout.NOT_RECORDED), name
    defaults = ROLE_DEFAULTS["deploy_state"]
    excluded = [_paths(value)[0] for value in defaults["deploy_state_exclude"]]
    assert tuple(excluded) == _layout.CHANGING
    assert _paths(defaults["deploy_state_files"]) == ["/root/.ssh/authorized_keys"]
