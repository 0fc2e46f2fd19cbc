# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""The programs that run on the nodes, each built as one python3 file from the module_utils the modules use.

``dgxspark-transfer`` (the transfer key's forced command, from ``_transfer_node``) and ``dgxspark-launch`` (the
node containers' command, from ``_launcher``) are not kept as separate scripts: :func:`build` embeds the source
of the program's module and of every sibling module_util it imports, verbatim, registers each under its
``ansible_collections.dgxspark.vllm.plugins.module_utils.X`` name when the file runs, then calls the program's
``main``. There is one implementation of the manifest, the relay protocol and the Ray output parsing, and the
nodes need nothing but python3 (no Ansible, no collection).

The text is deterministic (the same sources give the same bytes: node_trust's and the containers' fingerprints
depend on it), and a module that imports anything but the standard library and its sibling module_utils is
refused, except an import guarded by ``except ImportError`` (an optional dependency, such as the docker SDK the
transfer program asks for only when it handles an image).
"""

from __future__ import annotations

import ast
import os
import sys
import typing as t

PACKAGE = "ansible_collections.dgxspark.vllm.plugins.module_utils"
# program name -> (its module, how the built file calls the module's main)
PROGRAMS = {
    "dgxspark-transfer": ("_transfer_node", "main(sys.argv)"),
    "dgxspark-launch": ("_launcher", "main(sys.argv[1:])"),
    "dgxspark-watchdog": ("_watchdog", "main(sys.argv[1:])"),
}
HERE = os.path.dirname(os.path.abspath(__file__))


class BuildError(ValueError):
    """A program cannot be built (unknown name, a module that is missing or imports outside the stdlib)."""


def read_source(module: str) -> str:
    """The source of the sibling module_util MODULE (``_relay``...)."""
    with open(os.path.join(HERE, module + ".py"), encoding="utf-8") as fh:
        return fh.read()


def _stdlib(name: str) -> bool:
    return name.split(".")[0] in sys.stdlib_module_names  # pylint: disable=no-member  # Python >= 3.10


def _guarded(parents: list[ast.AST]) -> bool:
    """Is the import inside a ``try`` whose handlers catch ImportError (an optional dependency)?"""
    for node in parents:
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                if any(isinstance(k, ast.Name) and k.id in ("ImportError", "ModuleNotFoundError") for k in kinds):
                    return True
    return False


def siblings(module: str, source: str) -> list[str]:
    """The sibling module_utils MODULE imports (sorted); BuildError for an import outside the stdlib and them."""
    try:
        tree = ast.parse(source, filename=module + ".py")
    except SyntaxError as exc:
        raise BuildError(f"{module}.py does not parse: {exc}") from exc
    found: set[str] = set()

    def refuse(node: ast.AST, what: str) -> t.NoReturn:
        raise BuildError(f"{module}.py line {node.lineno} imports {what}, which is neither the standard library nor "
                         f"a module of {PACKAGE}: a program that runs on the nodes may use only those (guard an "
                         "optional import with try/except ImportError)")

    def visit(node: ast.AST, parents: list[ast.AST]) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name[len(PACKAGE) + 1:])
                elif not _stdlib(alias.name) and not _guarded(parents):
                    refuse(node, alias.name)
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                refuse(node, "." * node.level + name + " (a relative import)")
            if name == PACKAGE:
                found.update(alias.name for alias in node.names)
            elif name.startswith(PACKAGE + "."):
                found.add(name[len(PACKAGE) + 1:])
            elif not _stdlib(name) and not _guarded(parents):
                refuse(node, name)
        for child in ast.iter_child_nodes(node):
            visit(child, parents + [node])

    visit(tree, [])
    for name in found:
        if "." in name or not name.isidentifier():
            raise BuildError(f"{module}.py imports {PACKAGE}.{name}, which is not a module of it")
    return sorted(found)


def modules(main: str, read: t.Callable[[str], str] = read_source) -> list[tuple[str, str]]:
    """``(module, source)`` of MAIN and everything it imports, each after the modules it imports (MAIN last)."""
    order: list[tuple[str, str]] = []
    state: dict[str, str] = {}

    def add(module: str, chain: list[str]) -> None:
        if state.get(module) == "done":
            return
        if state.get(module) == "open":
            raise BuildError("circular import: " + " -> ".join(chain + [module]))
        state[module] = "open"
        try:
            source = read(module)
        except OSError as exc:
            raise BuildError(f"{PACKAGE}.{module} is needed by {' -> '.join(chain) or 'the program'} but cannot be "
                             f"read: {exc}") from exc
        for dep in siblings(module, source):
            add(dep, chain + [module])
        state[module] = "done"
        order.append((module, source))

    add(main, [])
    return order


LOADER = '''

def _install():
    """Register the embedded modules under their module_utils names; returns the program's module (the last)."""
    import linecache
    import types
    parent = None
    parts = PACKAGE.split(".")
    for i, part in enumerate(parts):
        name = ".".join(parts[:i + 1])
        package = sys.modules.get(name)
        if package is None:
            package = types.ModuleType(name)
            package.__path__ = []
            sys.modules[name] = package
            if parent is not None:
                setattr(parent, part, package)
        parent = package
    module = None
    for short, lines in MODULES:
        name = PACKAGE + "." + short
        filename = PROGRAM + ":" + short + ".py"
        source = "".join(lines)
        module = types.ModuleType(name)
        module.__file__ = filename
        sys.modules[name] = module
        setattr(parent, short, module)
        linecache.cache[filename] = (len(source), None, list(lines), filename)  # tracebacks show the lines
        exec(compile(source, filename, "exec"), module.__dict__)  # pylint: disable=exec-used
    return module


if __name__ == "__main__":
    sys.exit(_install().%s)
'''


def build(program: str, read: t.Callable[[str], str] = read_source) -> str:
    """The text of PROGRAM (a key of :data:`PROGRAMS`): one python3 file with no dependency outside the stdlib."""
    if program not in PROGRAMS:
        raise BuildError(f"no node program {program!r}; the collection builds {', '.join(sorted(PROGRAMS))}")
    main, call = PROGRAMS[program]
    parts = modules(main, read)
    out = [
        "# Copyright: dgxspark.vllm contributors\n",
        "# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)\n",
        f"# {program}: built by the dgxspark.vllm collection (plugins/module_utils/_node_program.py) from its\n",
        f"# module_utils {', '.join(name for name, _source in parts)}, embedded verbatim below. Do not edit: the roles\n",
        "# install it again from the collection. Run it with python3 (standard library only).\n",
        "import sys\n\n",
        f"PROGRAM = {program!r}\n",
        f"PACKAGE = {PACKAGE!r}\n",
        "MODULES = (\n",
    ]
    for name, source in parts:
        out.append(f"    ({name!r}, (\n")
        out.extend(f"        {line!r},\n" for line in source.splitlines(True))
        out.append("    )),\n")
    out.append(")\n")
    out.append(LOADER % call)
    return "".join(out)
