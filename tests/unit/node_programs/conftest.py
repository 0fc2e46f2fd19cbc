# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node programs' tests run twice: against their module_utils, and against the built program (one file)."""

from __future__ import annotations

import importlib
import sys

import pytest

from ansible_collections.dgxspark.vllm.plugins.module_utils import _node_program

PREFIX = "ansible_collections"


def load_built(program: str):
    """The program's main module from its built text, executed in this process without touching the real imports.

    The built file registers its modules in sys.modules under the module_utils names; they are put aside while it
    runs and restored afterwards, so the tests' own imports of the module_utils stay the real ones.
    """
    saved = {name: mod for name, mod in sys.modules.items() if name == PREFIX or name.startswith(PREFIX + ".")}
    for name in saved:
        del sys.modules[name]
    try:
        namespace = {"__name__": "built_" + program.replace("-", "_")}
        exec(compile(_node_program.build(program), program, "exec"), namespace)  # pylint: disable=exec-used
        return namespace["_install"]()
    finally:
        for name in [n for n in sys.modules if n == PREFIX or n.startswith(PREFIX + ".")]:
            del sys.modules[name]
        sys.modules.update(saved)


def program_fixture(program: str):
    """A fixture parametrized over the program's module_utils module and its built text."""
    module_name = _node_program.PROGRAMS[program][0]
    cache = {}

    @pytest.fixture(params=["module_utils", "built"])
    def fixture(request):
        if request.param not in cache:
            cache[request.param] = (importlib.import_module(f"{_node_program.PACKAGE}.{module_name}")
                                    if request.param == "module_utils" else load_built(program))
        return cache[request.param]

    return fixture


R = program_fixture("dgxspark-transfer")
L = program_fixture("dgxspark-launch")


@pytest.fixture
def built_program(tmp_path_factory):
    """Writes a built program to a file: built_program("dgxspark-launch") -> its path."""
    def write(program: str) -> str:
        path = tmp_path_factory.mktemp("built") / program
        path.write_text(_node_program.build(program))
        return str(path)
    return write
