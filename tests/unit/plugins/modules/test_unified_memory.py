# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the unified_memory module: make room (drop, evict), then check, naming the figures."""

from __future__ import annotations

import json
from unittest import mock

import pytest

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.dgxspark.vllm.plugins.module_utils import _unified_memory as um
from ansible_collections.dgxspark.vllm.plugins.modules import unified_memory as mod

GIB = 1 << 30


def _kb(gib):
    return int(gib * (1 << 20))


def write(path, free_gib, cached_gib):
    path.write_text(f"MemTotal: {_kb(121.7)} kB\nMemFree: {_kb(free_gib)} kB\nMemAvailable: {_kb(free_gib + cached_gib)} kB\n"
                    f"Cached: {_kb(cached_gib)} kB\n")


def run(capsys, warnings=None, **args):
    """(exit code, result); AnsibleModule.warn is recorded into WARNINGS (once controller code is imported in the
    test process, ansible-core sends module warnings to the controller's display instead of the result)."""
    warn = mock.Mock()
    with patch_module_args(args), mock.patch.object(AnsibleModule, "warn", warn), \
            pytest.raises(SystemExit) as exit_info:
        mod.main()
    if warnings is not None:
        warnings.extend(call.args[0] for call in warn.call_args_list)
    return exit_info.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node whose page cache holds the weights until they are evicted (or the cache dropped)."""
    info = tmp_path / "meminfo"
    write(info, 10.0, 92.0)
    models = tmp_path / "models"
    models.mkdir()
    (models / "w.safetensors").write_bytes(b"w" * 100)

    def evict(paths):
        write(info, 102.0, 0.0)
        return {"files": 1, "bytes": 100}

    def drop(path=um.DROP_CACHES):
        return "/proc/sys/vm/drop_caches: Read-only file system"

    monkeypatch.setattr(um, "evict", evict)
    monkeypatch.setattr(um, "drop_caches", drop)
    return {"meminfo": str(info), "paths": [str(models)]}


def test_makes_room_then_passes(capsys, node):
    code, out = run(capsys, utilization=0.8, paths=node["paths"], meminfo=node["meminfo"])
    assert code == 0 and out["changed"] is False and out["enough"] is True
    assert out["dropped"] is False and out["drop_caches_error"].endswith("Read-only file system")
    assert out["evicted"] == {"files": 1, "bytes": 100}
    assert out["cached_before"] == 92 * GIB and out["cached"] == 0 and out["free"] == 102 * GIB


def test_check_mode_changes_nothing_and_warns_of_the_shortfall(capsys, node):
    warnings = []
    code, out = run(capsys, warnings, utilization=0.8, paths=node["paths"], meminfo=node["meminfo"],
                    _ansible_check_mode=True)
    assert code == 0 and out["changed"] is False and out["evicted"]["files"] == 0 and out["enough"] is False
    (warning,) = warnings
    assert "10.0 GiB of 121.7 GiB unified memory is free" in warning
    assert "check mode: nothing dropped or evicted; 92.0 GiB still page cache" in warning


def test_short_even_after_making_room_fails_with_the_figures(capsys, node):
    code, out = run(capsys, utilization=0.85, paths=node["paths"], meminfo=node["meminfo"])
    assert code == 1 and out["enough"] is False and out["max_utilization"] == 0.83
    assert ("102.0 GiB of 121.7 GiB unified memory is free right before the engine starts (page cache not dropped "
            "(/proc/sys/vm/drop_caches: Read-only file system), 1 model files evicted; 0.0 GiB still page cache), "
            "but --gpu-memory-utilization 0.85 needs 103.4 GiB") in out["msg"]


def test_bad_utilisation(capsys, node):
    code, out = run(capsys, utilization=1.5, meminfo=node["meminfo"])
    assert code == 1 and "utilization must be in (0, 1]" in out["msg"]


def test_without_check_only_makes_room(capsys, node):
    code, out = run(capsys, utilization=0.85, paths=node["paths"], meminfo=node["meminfo"], check=False)
    assert code == 0 and out["enough"] is False and out["evicted"]["files"] == 1 and out["changed"] is False
