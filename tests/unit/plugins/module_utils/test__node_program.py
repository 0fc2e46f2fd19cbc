# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of _node_program: the node programs built as one file from the module_utils."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _node_program as np


def test_the_same_sources_give_the_same_bytes():
    for program in np.PROGRAMS:
        assert np.build(program) == np.build(program)


def test_each_program_embeds_its_module_and_what_it_imports_verbatim():
    assert [m for m, _source in np.modules("_transfer_node")] == ["_announce", "_relay", "_model_files", "_unified_memory", "_transfer_node"]
    assert [m for m, _source in np.modules("_launcher")] == ["_ray", "_launcher"]
    assert [m for m, _source in np.modules("_watchdog")] == ["_relay", "_watchdog"]  # it evicts nothing itself (the engine request does)
    text = np.build("dgxspark-launch")
    namespace = {"__name__": "not_main"}
    exec(compile(text, "dgxspark-launch", "exec"), namespace)  # pylint: disable=exec-used
    assert [(m, "".join(lines)) for m, lines in namespace["MODULES"]] == np.modules("_launcher")


@pytest.mark.parametrize("program, args, out", [
    ("dgxspark-launch", ["version"], "1.4.0\n"),
    ("dgxspark-watchdog", ["version"], "1.0.0\n"),
    ("dgxspark-transfer", [], ""),
])
def test_the_built_file_runs_alone_with_python3_isolated(tmp_path, program, args, out):
    """From an empty directory, `python3 -I` (no PYTHONPATH, no site-packages, so no Ansible): the stdlib is enough."""
    path = tmp_path / "bin" / program
    path.parent.mkdir()
    path.write_text(np.build(program))
    work = tmp_path / "empty"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-I", "-S", str(path)] + args, cwd=work, capture_output=True, text=True,
                          timeout=60, check=False, env={"PATH": "/usr/bin:/bin"})
    if program == "dgxspark-transfer":  # no configuration argument: its usage line, exit 2
        assert proc.returncode == 2 and proc.stderr.startswith("usage: dgxspark-transfer CONFIG.json"), proc.stderr
    else:
        assert proc.returncode == 0 and proc.stdout == out, proc.stderr


def _sources(extra: str):
    real = np.read_source

    def read(module):
        if module == "_ray":
            return real("_ray") + extra
        return real(module)
    return read


@pytest.mark.parametrize("line", ["import yaml\n", "from ansible.module_utils.basic import AnsibleModule\n",
                                  "from . import _ray\n"])
def test_a_module_importing_outside_the_stdlib_is_refused(line):
    with pytest.raises(np.BuildError, match=r"_ray\.py line \d+ imports .*neither the standard library"):
        np.build("dgxspark-launch", read=_sources(line))


def test_an_optional_import_guarded_by_except_importerror_is_allowed():
    text = np.build("dgxspark-launch", read=_sources("try:\n    import yaml\nexcept ImportError:\n    yaml = None\n"))
    assert "import yaml" in text
    with pytest.raises(np.BuildError):  # another exception type does not make it optional
        np.build("dgxspark-launch", read=_sources("try:\n    import yaml\nexcept OSError:\n    pass\n"))


def test_unknown_program_and_missing_or_circular_modules():
    with pytest.raises(np.BuildError, match="no node program 'x'; the collection builds dgxspark-launch, dgxspark-t"):
        np.build("x")
    with pytest.raises(np.BuildError, match=r"_nothere is needed by _launcher -> _ray but cannot be read"):
        np.build("dgxspark-launch", read=_sources(
            "from ansible_collections.dgxspark.vllm.plugins.module_utils import _nothere\n"))
    with pytest.raises(np.BuildError, match="circular import: _launcher -> _ray -> _launcher"):
        np.build("dgxspark-launch", read=_sources(
            "from ansible_collections.dgxspark.vllm.plugins.module_utils import _launcher\n"))
