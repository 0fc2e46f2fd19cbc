# Copyright: dgxspark.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE: this file is internal to the dgxspark.vllm collection. It is not a
# public API and may change in any release without notice. Do not import it
# from other collections.
"""Static parsing and byte-preserving editing of vLLM's model registry files.

Two files are understood, both only as source text (vLLM is never imported):

``vllm/model_executor/models/registry.py``
    Module-level dict literals such as ``_TEXT_GENERATION_MODELS`` or
    ``_MULTIMODAL_MODELS`` that map an architecture name to a
    ``(module, class)`` tuple. :func:`parse_registry` returns every such table
    with its entries (including those inside ``**{...}`` literals) and the
    spreads of other names; :func:`patch_registry` adds, replaces or removes
    entries.

``vllm/transformers_utils/configs/__init__.py``
    Either the import style of vLLM <= 0.12 (``from
    vllm.transformers_utils.configs.<module> import <Class>`` lines) or the lazy
    style of vLLM >= 0.13 (a ``_CLASS_TO_MODULE`` dict literal), plus the
    ``__all__`` list. :func:`parse_configs` and :func:`patch_configs` handle it.

Edits are made as text: new entries become new lines in the file's own style
(indentation, quote character, trailing comma, line length with either the
exploded one-item-per-line form or a ``# noqa: E501`` comment, whatever the
file already does), removed entries take their whole lines with them, and
every other byte is left as it was. Every result is checked before it is
returned: it must compile, every table must evaluate to exactly the entries
it had plus the added and minus the removed ones, and every other top-level
statement must be unchanged. Anything the functions do not understand raises
:class:`RegistryError` with a message that says what to do.
"""

from __future__ import annotations

import ast
import dataclasses
import keyword
import typing as t

DEFAULT_TABLE = "_TEXT_GENERATION_MODELS"
CONFIGS_PACKAGE = "vllm.transformers_utils.configs"
LAZY_MAP = "_CLASS_TO_MODULE"
ALL_NAME = "__all__"
NOQA_E501 = "# noqa: E501"


class RegistryError(Exception):
    """Raised for input or files the functions refuse to handle; the message says why and what to do."""


# --------------------------------------------------------------------------- validation


def is_identifier(name: t.Any) -> bool:
    """True for a Python identifier that is not a keyword (``Qwen3_5MoeForConditionalGeneration``)."""
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def is_module_path(name: t.Any) -> bool:
    """True for a plain (``qwen3_5``) or dotted (``vllm.models.step5``) module name."""
    return isinstance(name, str) and bool(name) and all(is_identifier(part) for part in name.split("."))


def resolve_config_module(module: str) -> str:
    """The absolute module of a configs entry: plain or relative names live below ``vllm.transformers_utils.configs``.

    Names starting with ``vllm.`` and ``transformers`` (the lazy map of newer releases
    points some classes at the transformers package) are taken as they are.
    """
    if module == "transformers" or module.startswith(("vllm.", "transformers.")):
        return module
    return CONFIGS_PACKAGE + "." + module


# --------------------------------------------------------------------------- source text helpers


class _Source:
    """The text of a file with helpers to convert ast positions to offsets and to scan between tokens."""

    def __init__(self, text: str) -> None:
        if "\r" in text.replace("\r\n", ""):
            raise RegistryError("the file contains carriage returns that are not part of CRLF line endings; it cannot be edited safely")
        self.text = text
        self.lines = text.split("\n")
        self.starts = [0]
        for line in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.newline = "\r\n" if "\r\n" in text else "\n"
        try:
            self.tree = ast.parse(text)
        except SyntaxError as exc:
            raise RegistryError("the file is not valid Python (line %s: %s); it cannot be edited safely" % (exc.lineno, exc.msg)) from exc

    def offset(self, lineno: int, col: int) -> int:
        """Character offset of an ast position (1-based line, UTF-8 byte column)."""
        line = self.lines[lineno - 1]
        if not line.isascii():
            col = len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))
        return self.starts[lineno - 1] + col

    def span(self, node: ast.AST) -> t.Tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def line_of(self, pos: int) -> int:
        """1-based line number of a character offset."""
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def line_start(self, pos: int) -> int:
        return self.starts[self.line_of(pos) - 1]

    def line_end(self, pos: int) -> int:
        """Offset just after the newline ending the line of ``pos`` (or the end of the text)."""
        end = self.text.find("\n", pos)
        return len(self.text) if end < 0 else end + 1

    def indent_of(self, pos: int) -> str:
        line = self.lines[self.line_of(pos) - 1]
        return line[:len(line) - len(line.lstrip(" \t"))]

    def skip(self, pos: int) -> t.Tuple[int, str]:
        """Skip whitespace, line continuations and comments from ``pos``; return the next offset and its character."""
        text, size = self.text, len(self.text)
        while pos < size:
            char = text[pos]
            if char in " \t\r\n\f":
                pos += 1
            elif char == "\\" and text.startswith("\n", pos + 1):
                pos += 2
            elif char == "\\" and text.startswith("\r\n", pos + 1):
                pos += 3
            elif char == "#":
                end = text.find("\n", pos)
                pos = size if end < 0 else end
            else:
                return pos, char
        return size, ""

    def rest_is_blank(self, pos: int) -> bool:
        """True when the line from ``pos`` on holds only whitespace or a comment."""
        rest = self.text[pos:self.line_end(pos)].strip()
        return not rest or rest.startswith("#")

    def only_space_before(self, pos: int) -> bool:
        return not self.text[self.line_start(pos):pos].strip()


@dataclasses.dataclass
class _Elem:
    """One element of a dict or list literal, with the text span it occupies (parentheses included)."""

    key: t.Optional[ast.expr]
    value: ast.expr
    start: int
    end: int


def _elements(src: _Source, node: ast.expr) -> t.List[_Elem]:
    """The top-level elements of a dict, list or tuple literal, in source order."""
    container_start, _end = src.span(node)
    elems: t.List[_Elem] = []
    if isinstance(node, ast.Dict):
        pairs = list(zip(node.keys, node.values))
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        pairs = [(None, value) for value in node.elts]
    else:
        raise RegistryError("internal error: not a container literal")
    cursor = container_start + 1
    for key, value in pairs:
        value_start, value_end = src.span(value)
        if key is not None:
            start, key_end = src.span(key)
            pos, char = src.skip(key_end)
            if char != ":":
                raise RegistryError("line %d: unexpected text after a dict key; the dict cannot be edited safely" % key.lineno)
            cursor = pos + 1
        elif isinstance(node, ast.Dict):
            pos, char = src.skip(cursor)
            if not src.text.startswith("**", pos):
                raise RegistryError("line %d: unexpected text before a ** spread; the dict cannot be edited safely" % value.lineno)
            start, cursor = pos, pos + 2
        else:
            start = -1
        # Parentheses around a value are not part of its ast node: count them.
        opened = 0
        while True:
            pos, char = src.skip(cursor)
            if pos >= value_start:
                break
            if char != "(":
                raise RegistryError("line %d: unexpected text before a value; the literal cannot be edited safely" % value.lineno)
            if start < 0:
                start = pos
            opened += 1
            cursor = pos + 1
        if start < 0:
            start = value_start
        end = value_end
        for _index in range(opened):
            pos, char = src.skip(end)
            if char != ")":
                raise RegistryError("line %d: unbalanced parentheses around a value; the literal cannot be edited safely" % value.lineno)
            end = pos + 1
        elems.append(_Elem(key, value, start, end))
        pos, char = src.skip(end)
        cursor = pos + 1 if char == "," else end
    return elems


def _literal(node: ast.AST) -> t.Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


_NOT_LITERAL = object()


# --------------------------------------------------------------------------- registry parsing


@dataclasses.dataclass
class Entry:
    """One ``"Arch": ("module", "Class")`` entry of a registry table."""

    architecture: str
    module: str
    class_name: str
    table: str
    line: int
    end_line: int
    extra: t.Tuple[str, ...] = ()
    in_spread: bool = False
    elem: t.Optional[_Elem] = dataclasses.field(default=None, repr=False, compare=False)
    container: t.Optional[ast.Dict] = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def mapping(self) -> t.Tuple[str, str]:
        return (self.module, self.class_name)

    def as_dict(self) -> t.Dict[str, t.Any]:
        return {"architecture": self.architecture, "module": self.module, "class_name": self.class_name, "table": self.table, "line": self.line}


@dataclasses.dataclass
class Spread:
    """A ``**`` spread inside a table: ``name`` (``**_OTHER``), ``literal`` (``**{...}``) or ``expression`` (a comprehension...)."""

    kind: str
    source: str
    line: int
    end_line: int


@dataclasses.dataclass
class Table:
    """A module-level dict literal of a registry file."""

    name: str
    line: int
    end_line: int
    entries: t.List[Entry] = dataclasses.field(default_factory=list)
    spreads: t.List[Spread] = dataclasses.field(default_factory=list)
    problems: t.List[str] = dataclasses.field(default_factory=list)
    other_values: int = 0
    node: t.Optional[ast.Dict] = dataclasses.field(default=None, repr=False)

    @property
    def is_model_table(self) -> bool:
        """True when the dict maps names to ``(module, class)`` tuples (or only spreads other tables)."""
        if self.other_values and not self.entries:
            return False
        if self.entries or any(spread.kind == "name" for spread in self.spreads):
            return True
        return not self.spreads and self.name.endswith("_MODELS")

    @property
    def editable(self) -> bool:
        return self.is_model_table and not self.problems

    def evaluate(self) -> t.Dict[str, t.Tuple[str, ...]]:
        """The dict the literal evaluates to, ``**{...}`` literals merged in order; other spreads are left out."""
        return {entry.architecture: (entry.module, entry.class_name) + entry.extra for entry in self.entries}

    def as_dict(self) -> t.Dict[str, t.Any]:
        return {
            "line": self.line,
            "end_line": self.end_line,
            "entries": {entry.architecture: [entry.module, entry.class_name] + list(entry.extra) for entry in self.entries},
            "spreads": [spread.source for spread in self.spreads],
            "problems": list(self.problems),
        }


@dataclasses.dataclass
class Registry:
    """Everything :func:`parse_registry` found in a registry file."""

    tables: t.Dict[str, Table]
    unsupported: t.Dict[str, str]
    src: _Source = dataclasses.field(repr=False)

    @property
    def model_tables(self) -> t.Dict[str, Table]:
        return {name: table for name, table in self.tables.items() if table.is_model_table}

    def find(self, architecture: str, tables: t.Optional[t.Iterable[str]] = None) -> t.List[Entry]:
        """Every entry of ``architecture`` in the model tables (or in the given tables)."""
        names = list(tables) if tables is not None else list(self.model_tables)
        return [entry for name in names if name in self.tables for entry in self.tables[name].entries if entry.architecture == architecture]

    def architectures(self) -> t.Dict[str, t.List[str]]:
        """Every architecture of the model tables with the tables it is in."""
        found: t.Dict[str, t.List[str]] = {}
        for name, table in self.model_tables.items():
            for entry in table.entries:
                if name not in found.setdefault(entry.architecture, []):
                    found[entry.architecture].append(name)
        return found


def _assigned_name(stmt: ast.stmt) -> t.Optional[t.Tuple[str, t.Optional[ast.expr]]]:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, stmt.value
    return None


def _mutated_names(stmt: ast.stmt) -> t.List[str]:
    """Names a module-level statement changes in place (``X[k] = v``, ``X |= ...``, ``X.update(...)``, ``del X[k]``)."""
    names = []
    targets: t.List[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, ast.Delete):
        targets = list(stmt.targets)
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute):
        func = stmt.value.func
        if func.attr in ("update", "pop", "setdefault", "clear", "popitem", "__setitem__", "__delitem__") and isinstance(func.value, ast.Name):
            names.append(func.value.id)
    for target in targets:
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            names.append(target.value.id)
        elif isinstance(stmt, ast.AugAssign) and isinstance(target, ast.Name):
            names.append(target.id)
    return names


def _collect_dict(src: _Source, table: Table, node: ast.Dict, in_spread: bool) -> None:
    for elem in _elements(src, node):
        value = elem.value
        line, end_line = src.line_of(elem.start), src.line_of(elem.end)
        if elem.key is None:
            if isinstance(value, ast.Dict):
                table.spreads.append(Spread("literal", "**{...}", line, end_line))
                _collect_dict(src, table, value, True)
            elif isinstance(value, ast.Name):
                table.spreads.append(Spread("name", value.id, line, end_line))
            elif isinstance(value, ast.DictComp):
                sources = [" ".join((ast.get_source_segment(src.text, gen.iter) or "?").split()) for gen in value.generators]
                table.spreads.append(Spread("expression", "{comprehension over %s}" % ", ".join(sources), line, end_line))
            else:
                text = ast.get_source_segment(src.text, value) or type(value).__name__
                table.spreads.append(Spread("expression", " ".join(text.split()), line, end_line))
            continue
        key, val = _literal(elem.key), _literal(value)
        if not isinstance(key, str):
            table.problems.append("line %d: a key is not a string literal" % line)
        elif isinstance(val, tuple) and len(val) >= 2 and all(isinstance(item, str) for item in val):
            table.entries.append(Entry(key, val[0], val[1], table.name, line, end_line, tuple(val[2:]), in_spread, elem, node))
        else:
            table.other_values += 1
            table.problems.append("line %d: the value of %r is not a (module, class) tuple of strings" % (line, key))


def parse_registry(text: str) -> Registry:
    """Parse the text of a vLLM ``registry.py``; every module-level dict literal becomes a :class:`Table`.

    ``unsupported`` names module-level names ending in ``_MODELS`` that are not
    plain dict literals (built by a call, a comprehension...), with the reason.
    """
    src = _Source(text)
    tables: t.Dict[str, Table] = {}
    unsupported: t.Dict[str, str] = {}
    assigned: t.Dict[str, t.List[int]] = {}
    for stmt in src.tree.body:
        found = _assigned_name(stmt)
        if found is not None and found[1] is not None:
            name, value = found
            assigned.setdefault(name, []).append(stmt.lineno)
            if isinstance(value, ast.Dict):
                table = Table(name, stmt.lineno, stmt.end_lineno or stmt.lineno, node=value)  # type: ignore[arg-type]
                _collect_dict(src, table, value, False)
                tables[name] = table
                unsupported.pop(name, None)
            elif name.endswith("_MODELS"):
                tables.pop(name, None)
                kind = "a function call" if isinstance(value, ast.Call) else "a dict comprehension" if isinstance(value, ast.DictComp) else "an expression"
                unsupported[name] = "%s is built by %s (line %d), not a dict literal" % (name, kind, stmt.lineno)
        for name in _mutated_names(stmt):
            if name in tables:
                tables[name].problems.append("%s is changed after its definition (line %d)" % (name, stmt.lineno))
    for name, lines in assigned.items():
        if len(lines) > 1 and name in tables:
            tables[name].problems.append("%s is assigned more than once at module level (lines %s)" % (name, ", ".join(map(str, lines))))
    return Registry(tables, unsupported, src)


def describe_registry(text: str) -> t.Dict[str, t.Any]:
    """A JSON-friendly summary of a registry file: model tables, their entries and spreads, and every architecture."""
    registry = parse_registry(text)
    return {
        "tables": {name: table.as_dict() for name, table in registry.model_tables.items()},
        "architectures": registry.architectures(),
        "unsupported": dict(registry.unsupported),
    }


# --------------------------------------------------------------------------- rendering in the file's style


@dataclasses.dataclass
class _Style:
    quote: str = '"'
    limit: t.Optional[int] = None
    exploded_inner: t.Optional[str] = None
    noqa: bool = False


def _infer_style(src: _Source, containers: t.Iterable[ast.expr]) -> _Style:
    style = _Style()
    quotes: t.List[str] = []
    lengths: t.List[int] = []
    for node in containers:
        for elem in _elements(src, node):
            first = elem.key if elem.key is not None else elem.value
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                char = src.text[src.span(first)[0]:src.span(first)[0] + 1]
                if char in ("'", '"'):
                    quotes.append(char)
            if elem.key is None or not src.only_space_before(elem.start):
                continue
            first_line, last_line = src.line_of(elem.start), src.line_of(elem.end)
            text = src.lines[first_line - 1].rstrip()
            commented = "#" in src.text[elem.end:src.line_end(elem.end)]
            if commented and NOQA_E501 in src.text[elem.end:src.line_end(elem.end)]:
                style.noqa = True
            if first_line == last_line and not commented:
                lengths.append(len(text))
            elif style.exploded_inner is None and last_line > first_line and text.endswith("("):
                inner_node = elem.value.elts[0] if isinstance(elem.value, ast.Tuple) and elem.value.elts else elem.value
                inner_line = src.lines[inner_node.lineno - 1]
                key_indent = src.indent_of(elem.start)
                inner_indent = inner_line[:len(inner_line) - len(inner_line.lstrip(" \t"))]
                if inner_node.lineno == first_line + 1 and inner_indent.startswith(key_indent) and len(inner_indent) > len(key_indent):
                    style.exploded_inner = inner_indent[len(key_indent):]
    if quotes:
        style.quote = max(("'", '"'), key=quotes.count)
    style.limit = max(lengths) if lengths else None
    return style


def _render(key: t.Optional[str], parts: t.Sequence[str], as_tuple: bool, indent: str, style: _Style, comma: bool) -> t.List[str]:
    """Lines of one new element: ``"key": ("a", "b"),`` or ``"item",``, exploded or with ``# noqa: E501`` when too long."""
    quote = style.quote
    value = ("(" + ", ".join(quote + part + quote for part in parts) + ")") if as_tuple else quote + parts[0] + quote
    head = indent + (quote + key + quote + ": " if key is not None else "")
    single = head + value + ("," if comma else "")
    if key is None or style.limit is None or len(single) <= style.limit:
        return [single]
    if style.exploded_inner is not None:
        inner = indent + style.exploded_inner
        body = [inner + quote + part + quote + ("," if as_tuple else "") for part in parts]
        return [head + "("] + body + [indent + ")" + ("," if comma else "")]
    if style.noqa:
        return [single + "  " + NOQA_E501]
    return [single]


# --------------------------------------------------------------------------- edits


@dataclasses.dataclass
class _Edit:
    start: int
    end: int
    text: str


def _apply(text: str, edits: t.List[_Edit]) -> str:
    ordered = sorted(edits, key=lambda edit: (edit.start, edit.end))
    for before, after in zip(ordered, ordered[1:]):
        if after.start < before.end or (after.start == before.start and after.end == before.end and before.start != before.end):
            raise RegistryError("two requested changes touch the same lines; apply them in separate tasks")
    for edit in reversed(ordered):
        text = text[:edit.start] + edit.text + text[edit.end:]
    return text


def _comma_after(src: _Source, elem: _Elem) -> t.Optional[int]:
    pos, char = src.skip(elem.end)
    return pos if char == "," else None


def _removal(src: _Source, elems: t.List[_Elem], index: int) -> _Edit:
    """The edit removing element ``index``: its whole lines when it has them to itself, else just its text and comma."""
    elem = elems[index]
    comma = _comma_after(src, elem)
    same_line_comma = comma is not None and src.line_of(comma) == src.line_of(elem.end)
    after = comma + 1 if same_line_comma else elem.end  # type: ignore[operator]
    if src.only_space_before(elem.start) and (same_line_comma or comma is None) and src.rest_is_blank(after):
        return _Edit(src.line_start(elem.start), src.line_end(after), "")
    if comma is not None:
        start, pos = elem.start, comma + 1
        while pos < len(src.text) and src.text[pos] in " \t":
            pos += 1
        if src.text[pos:pos + 1] in ("\r", "\n", ""):
            while start > 0 and src.text[start - 1] in " \t" and not src.only_space_before(start):
                start -= 1
        return _Edit(start, pos, "")
    if index > 0:
        previous = _comma_after(src, elems[index - 1])
        if previous is not None:
            return _Edit(previous, elem.end, "")
    return _Edit(elem.start, elem.end, "")


def _insertion(src: _Source, node: ast.expr, items: t.List[t.Tuple[t.Optional[str], t.Sequence[str], bool]], style: _Style) -> t.List[_Edit]:
    """Edits that add ``items`` (key, parts, as_tuple) at the end of a dict or list literal, as new lines where possible."""
    elems = _elements(src, node)
    open_pos, close_end = src.span(node)
    close_pos = close_end - 1
    newline = src.newline
    if elems:
        last = elems[-1]
        comma = _comma_after(src, last)
        after = comma + 1 if comma is not None and src.line_of(comma) == src.line_of(last.end) else last.end
        line_mode = (comma is None or src.line_of(comma) == src.line_of(last.end)) and src.rest_is_blank(after) and \
            src.line_of(close_pos) > src.line_of(after)
        if not line_mode:
            singles = [" ".join(_render(key, parts, as_tuple, "", _Style(quote=style.quote), False)) for key, parts, as_tuple in items]
            return [_Edit(last.end, last.end, ", " + ", ".join(singles))]
        if src.only_space_before(last.start):
            indent = src.indent_of(last.start)
        else:
            indent = src.indent_of(close_pos) + "    "
        trailing = comma is not None
        lines: t.List[str] = []
        for number, (key, parts, as_tuple) in enumerate(items):
            lines.extend(_render(key, parts, as_tuple, indent, style, trailing or number < len(items) - 1))
        edits = [_Edit(src.line_end(after), src.line_end(after), "".join(line + newline for line in lines))]
        if not trailing:
            edits.append(_Edit(last.end, last.end, ","))
        return edits
    pos, _char = src.skip(open_pos + 1)
    if pos != close_pos:
        raise RegistryError("line %d: the literal has content that is not an element; it cannot be edited safely" % node.lineno)
    outer = src.indent_of(open_pos)
    if src.line_of(open_pos) == src.line_of(close_pos):
        lines = []
        for key, parts, as_tuple in items:
            lines.extend(_render(key, parts, as_tuple, outer + "    ", style, True))
        return [_Edit(open_pos + 1, close_pos, newline + "".join(line + newline for line in lines) + outer)]
    if not src.only_space_before(close_pos):
        raise RegistryError("line %d: the closing bracket does not start its line; the literal cannot be edited safely" % src.line_of(close_pos))
    indent = src.indent_of(close_pos) + "    "
    lines = []
    for key, parts, as_tuple in items:
        lines.extend(_render(key, parts, as_tuple, indent, style, True))
    start = src.line_start(close_pos)
    return [_Edit(start, start, "".join(line + newline for line in lines))]


def _replacement(src: _Source, elems: t.List[_Elem], index: int, key: str, parts: t.Sequence[str], style: _Style) -> _Edit:
    """The edit replacing the value of element ``index`` (its whole lines when it has them to itself)."""
    elem = elems[index]
    comma = _comma_after(src, elem)
    same_line_comma = comma is not None and src.line_of(comma) == src.line_of(elem.end)
    after = comma + 1 if same_line_comma else elem.end  # type: ignore[operator]
    if src.only_space_before(elem.start) and (same_line_comma or comma is None) and src.rest_is_blank(after):
        lines = _render(key, parts, True, src.indent_of(elem.start), style, comma is not None)
        return _Edit(src.line_start(elem.start), src.line_end(after), "".join(line + src.newline for line in lines))
    value_start = src.span(elem.key)[0] if elem.key is not None else elem.start
    return _Edit(value_start, elem.end, _render(key, parts, True, "", _Style(quote=style.quote), False)[0])


def _other_statements(tree: ast.Module, skip: t.Callable[[ast.stmt], bool]) -> t.List[str]:
    return [ast.dump(stmt) for stmt in tree.body if not skip(stmt)]


def _compile(text: str, what: str) -> None:
    try:
        compile(text, what, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise RegistryError("internal error: the edited %s would not compile (%s); the file was left untouched" % (what, exc)) from exc


# --------------------------------------------------------------------------- registry patching


@dataclasses.dataclass
class Wanted:
    """A normalised request: one architecture (registry) or config class (configs)."""

    name: str
    module: t.Optional[str]
    class_name: t.Optional[str]
    table: t.Optional[str] = None


@dataclasses.dataclass
class PatchResult:
    before: str
    after: str
    added: t.List[t.Dict[str, t.Any]] = dataclasses.field(default_factory=list)
    already_present: t.List[t.Dict[str, t.Any]] = dataclasses.field(default_factory=list)
    removed: t.List[t.Dict[str, t.Any]] = dataclasses.field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.before != self.after


def normalize_registry_entries(entries: t.Sequence[t.Mapping[str, t.Any]], state: str) -> t.List[Wanted]:
    """Validate the ``entries`` option for a registry; raise :class:`RegistryError` naming the bad entry."""
    wanted: t.List[Wanted] = []
    seen: t.Dict[str, Wanted] = {}
    for index, entry in enumerate(entries):
        where = "entries[%d]" % index
        arch = entry.get("architecture")
        module = entry.get("module")
        class_name = entry.get("class_name")
        if class_name is None and state == "present":
            class_name = arch
        table = entry.get("table")
        if arch is None:
            raise RegistryError("%s: architecture is required" % where)
        if not is_identifier(arch):
            raise RegistryError("%s: architecture %r is not a valid Python identifier" % (where, arch))
        if state == "present" and module is None:
            raise RegistryError("%s: module is required with state=present (the file below vllm/model_executor/models, without .py)" % where)
        if module is not None and not is_module_path(module):
            raise RegistryError("%s: module %r is not a valid Python module name (plain like qwen3_5 or dotted)" % (where, module))
        if class_name is not None and not is_identifier(class_name):
            raise RegistryError("%s: class_name %r is not a valid Python identifier" % (where, class_name))
        if table is not None and not is_identifier(table):
            raise RegistryError("%s: table %r is not a valid Python identifier" % (where, table))
        item = Wanted(arch, module, class_name, table if table is not None or state == "absent" else DEFAULT_TABLE)
        if arch in seen:
            if seen[arch] != item:
                raise RegistryError("%s: architecture %s is listed twice with different settings" % (where, arch))
            continue
        seen[arch] = item
        wanted.append(item)
    return wanted


def _table_or_fail(registry: Registry, name: str) -> Table:
    if name in registry.unsupported:
        raise RegistryError("cannot safely edit %s: %s; patch this file by hand" % (name, registry.unsupported[name]))
    table = registry.tables.get(name)
    if table is None:
        known = ", ".join(sorted(registry.model_tables)) or "none"
        raise RegistryError("table %s not found in the registry (model tables in this file: %s); set entries[].table to one of them" % (name, known))
    if not table.is_model_table:
        raise RegistryError("%s (line %d) is not a model table: its values are not (module, class) tuples" % (name, table.line))
    if table.problems:
        raise RegistryError("cannot safely edit %s: %s; patch this file by hand" % (name, "; ".join(table.problems)))
    return table


def _describe(entry: Entry) -> str:
    return "%s.%s (%s line %d)" % (entry.module, entry.class_name, entry.table, entry.line)


def patch_registry(text: str, entries: t.Sequence[t.Mapping[str, t.Any]], state: str = "present", force: bool = False) -> PatchResult:
    """Make the architectures of ``entries`` present in (or absent from) the text of a vLLM ``registry.py``.

    ``state=present``: an architecture already mapped to the same module and class
    in *any* model table is ``already_present`` (vLLM merges every table into one
    registry, and releases moved entries between tables); a different mapping
    anywhere is a conflict, refused unless ``force``, which replaces it in place
    when it is in the requested table and removes it from the other tables.
    ``state=absent``: removes the architecture from the given table (every model
    table when ``table`` is not set); with ``module``/``class_name`` set only the
    entries with that mapping, a different mapping being a conflict unless ``force``.
    """
    if state not in ("present", "absent"):
        raise RegistryError("state must be present or absent")
    wanted = normalize_registry_entries(entries, state)
    registry = parse_registry(text)
    src = registry.src
    if not any(table.entries for table in registry.model_tables.values()):
        raise RegistryError("this is not a vLLM registry: no module-level dict literal maps architectures to (module, class) tuples "
                            "(expected vllm/model_executor/models/registry.py with _TEXT_GENERATION_MODELS and the like)")
    result = PatchResult(text, text)
    edits: t.List[_Edit] = []
    removed: t.List[Entry] = []
    inserts: t.Dict[str, t.List[Wanted]] = {}
    touched: t.Set[str] = set()
    style = _infer_style(src, [table.node for table in registry.model_tables.values() if table.node is not None and table.entries])
    for item in wanted:
        if state == "present":
            target = _table_or_fail(registry, item.table or DEFAULT_TABLE)
            mapping = (item.module, item.class_name)
            found = registry.find(item.name)
            same = [entry for entry in found if entry.mapping == mapping]
            other = [entry for entry in found if entry.mapping != mapping]
            if other and not force:
                raise RegistryError("%s is already mapped to %s, not %s.%s; set force=true to replace it" % (
                    item.name, ", ".join(_describe(entry) for entry in other), item.module, item.class_name))
            if not other:
                tables = []
                for entry in same:
                    if entry.table not in tables:
                        tables.append(entry.table)
                if same:
                    table = target.name if target.name in tables else tables[0]
                    result.already_present.append({"architecture": item.name, "module": item.module, "class_name": item.class_name,
                                                   "table": table, "tables": tables})
                    continue
                inserts.setdefault(target.name, []).append(item)
                continue
            replaced = False
            for entry in other:
                table = _table_or_fail(registry, entry.table)
                touched.add(table.name)
                elems = _elements(src, entry.container)  # type: ignore[arg-type]
                index = [elem.start for elem in elems].index(entry.elem.start)  # type: ignore[union-attr]
                if not replaced and not same and entry.table == target.name and not entry.in_spread:
                    edits.append(_replacement(src, elems, index, item.name, [item.module, item.class_name], style))  # type: ignore[list-item]
                    replaced = True
                    result.added.append({"architecture": item.name, "module": item.module, "class_name": item.class_name, "table": target.name})
                else:
                    edits.append(_removal(src, elems, index))
                removed.append(entry)
            if not replaced and not same:
                inserts.setdefault(target.name, []).append(item)
        else:
            tables = [item.table] if item.table is not None else list(registry.model_tables)
            if item.table is not None:
                _table_or_fail(registry, item.table)
            found = registry.find(item.name, tables)
            for entry in found:
                if (item.module is not None and entry.module != item.module) or (item.class_name is not None and entry.class_name != item.class_name):
                    if not force:
                        raise RegistryError("%s is mapped to %s, not %s.%s; set force=true to remove it anyway" % (
                            item.name, _describe(entry), item.module or "*", item.class_name or "*"))
                table = _table_or_fail(registry, entry.table)
                touched.add(table.name)
                elems = _elements(src, entry.container)  # type: ignore[arg-type]
                index = [elem.start for elem in elems].index(entry.elem.start)  # type: ignore[union-attr]
                edits.append(_removal(src, elems, index))
                removed.append(entry)
    for name, items in inserts.items():
        table = registry.tables[name]
        if any(entry.extra for entry in table.entries if not entry.in_spread):
            raise RegistryError("the entries of %s have more than two elements; this module only writes (module, class) pairs" % name)
        touched.add(name)
        edits.extend(_insertion(src, table.node, [(item.name, [item.module, item.class_name], True) for item in items], style))  # type: ignore[arg-type,misc]
        for item in items:
            result.added.append({"architecture": item.name, "module": item.module, "class_name": item.class_name, "table": name})
    result.removed = [entry.as_dict() for entry in removed]
    if not edits:
        return result
    after = _apply(text, edits)
    _verify_registry(registry, after, result, removed)
    result.after = after
    return result


def _verify_registry(before: Registry, after_text: str, result: PatchResult, removed: t.List[Entry]) -> None:
    """Check an edited registry: compiles, same tables and statements, each table = old - removed + added."""
    _compile(after_text, "registry.py")
    after = parse_registry(after_text)
    if sorted(after.tables) != sorted(before.tables):
        raise RegistryError("internal error: the edit changed the set of tables; the file was left untouched")

    def is_table(stmt: ast.stmt) -> bool:
        return (_assigned_name(stmt) or ("", None))[0] in before.tables

    if _other_statements(before.src.tree, is_table) != _other_statements(after.src.tree, is_table):
        raise RegistryError("internal error: the edit changed statements outside the tables; the file was left untouched")
    for name, old in before.tables.items():
        new = after.tables[name]
        expected = sorted((entry.architecture, entry.mapping, entry.extra) for entry in old.entries if entry not in removed)
        expected += [(added["architecture"], (added["module"], added["class_name"]), ()) for added in result.added if added["table"] == name]
        if sorted(expected) != sorted((entry.architecture, entry.mapping, entry.extra) for entry in new.entries):
            raise RegistryError("internal error: %s would not evaluate to the expected entries; the file was left untouched" % name)
        if [(spread.kind, spread.source) for spread in old.spreads] != [(spread.kind, spread.source) for spread in new.spreads]:
            raise RegistryError("internal error: the spreads of %s changed; the file was left untouched" % name)
        evaluated = new.evaluate()
        for added in result.added:
            if added["table"] == name and evaluated.get(added["architecture"]) != (added["module"], added["class_name"]):
                raise RegistryError("internal error: %s does not map %s as requested; the file was left untouched" % (name, added["architecture"]))
    for entry in removed:
        still = [other for other in after.find(entry.architecture, [entry.table]) if other.mapping == entry.mapping]
        if still and not any(added["architecture"] == entry.architecture for added in result.added):
            raise RegistryError("internal error: %s is still in %s; the file was left untouched" % (entry.architecture, entry.table))


# --------------------------------------------------------------------------- configs/__init__.py


@dataclasses.dataclass
class ConfigImport:
    """A module-level ``from <module> import <Class>`` (or a ``_CLASS_TO_MODULE`` entry in the lazy style)."""

    class_name: str
    module: str
    line: int
    stmt: t.Optional[ast.ImportFrom] = dataclasses.field(default=None, repr=False)
    names: int = 1
    elem: t.Optional[_Elem] = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass
class Configs:
    """What :func:`parse_configs` found in ``vllm/transformers_utils/configs/__init__.py``."""

    style: str
    classes: t.Dict[str, t.List[ConfigImport]]
    exported: t.List[str]
    all_node: t.Optional[ast.expr] = dataclasses.field(default=None, repr=False)
    all_stmt: t.Optional[ast.stmt] = dataclasses.field(default=None, repr=False)
    lazy_node: t.Optional[ast.Dict] = dataclasses.field(default=None, repr=False)
    lazy_stmt: t.Optional[ast.stmt] = dataclasses.field(default=None, repr=False)
    last_import: t.Optional[ast.stmt] = dataclasses.field(default=None, repr=False)
    src: t.Optional[_Source] = dataclasses.field(default=None, repr=False)

    def mapping(self) -> t.Dict[str, str]:
        return {name: found[-1].module for name, found in self.classes.items()}


def parse_configs(text: str) -> Configs:
    """Parse ``vllm/transformers_utils/configs/__init__.py`` in either the import or the lazy ``_CLASS_TO_MODULE`` style."""
    src = _Source(text)
    classes: t.Dict[str, t.List[ConfigImport]] = {}
    configs = Configs("import", classes, [], src=src)
    last_config_import: t.Optional[ast.stmt] = None
    last_any_import: t.Optional[ast.stmt] = None
    for stmt in src.tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            last_any_import = stmt
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module and (
                stmt.module == CONFIGS_PACKAGE or stmt.module.startswith(CONFIGS_PACKAGE + ".")):
            last_config_import = stmt
            for alias in stmt.names:
                exported = alias.asname or alias.name
                if alias.name != "*" and exported == alias.name:
                    classes.setdefault(exported, []).append(ConfigImport(exported, stmt.module, stmt.lineno, stmt, len(stmt.names)))
        found = _assigned_name(stmt)
        if found is None or found[1] is None:
            continue
        name, value = found
        if name == LAZY_MAP:
            if not isinstance(value, ast.Dict):
                raise RegistryError("cannot safely edit %s: it is not a dict literal (line %d); patch this file by hand" % (LAZY_MAP, stmt.lineno))
            configs.style, configs.lazy_node, configs.lazy_stmt = "lazy", value, stmt
            for elem in _elements(src, value):
                key, module = (_literal(elem.key) if elem.key is not None else None), _literal(elem.value)
                if not isinstance(key, str) or not isinstance(module, str):
                    raise RegistryError("cannot safely edit %s: line %d is not a \"Class\": \"module\" pair of strings" % (LAZY_MAP, src.line_of(elem.start)))
                classes.setdefault(key, []).append(ConfigImport(key, module, src.line_of(elem.start), elem=elem))
        elif name == ALL_NAME:
            if not isinstance(value, (ast.List, ast.Tuple)):
                raise RegistryError("cannot safely edit __all__: it is not a list literal (line %d); patch this file by hand" % stmt.lineno)
            names = _literal(value)
            if names is _NOT_LITERAL or not all(isinstance(item, str) for item in names):
                raise RegistryError("cannot safely edit __all__ (line %d): it is not a list of strings" % stmt.lineno)
            configs.exported, configs.all_node, configs.all_stmt = list(names), value, stmt
        for mutated in _mutated_names(stmt):
            if mutated in (ALL_NAME, LAZY_MAP):
                raise RegistryError("cannot safely edit %s: it is changed after its definition (line %d)" % (mutated, stmt.lineno))
    if configs.all_node is None:
        raise RegistryError("this is not vLLM's transformers_utils/configs/__init__.py: it has no __all__ list "
                            "(expected vllm/transformers_utils/configs/__init__.py)")
    if configs.style == "import" and last_config_import is None:
        raise RegistryError("this is not vLLM's transformers_utils/configs/__init__.py: it has neither %s nor imports from %s" % (LAZY_MAP, CONFIGS_PACKAGE))
    configs.last_import = last_config_import or last_any_import
    return configs


def describe_configs(text: str) -> t.Dict[str, t.Any]:
    """A JSON-friendly summary: style, class -> module and ``__all__``."""
    configs = parse_configs(text)
    return {"style": configs.style, "classes": configs.mapping(), "all": list(configs.exported)}


def normalize_config_entries(entries: t.Sequence[t.Mapping[str, t.Any]], state: str) -> t.List[Wanted]:
    """Validate the ``entries`` option for a configs ``__init__.py``."""
    wanted: t.List[Wanted] = []
    seen: t.Dict[str, Wanted] = {}
    for index, entry in enumerate(entries):
        where = "entries[%d]" % index
        for option in ("architecture", "table"):
            if entry.get(option) is not None:
                raise RegistryError("%s: %s is not used with kind=configs; give class_name and module" % (where, option))
        class_name, module = entry.get("class_name"), entry.get("module")
        if class_name is None:
            raise RegistryError("%s: class_name is required with kind=configs (the config class, for example Qwen3_5MoeConfig)" % where)
        if not is_identifier(class_name):
            raise RegistryError("%s: class_name %r is not a valid Python identifier" % (where, class_name))
        if module is None and state == "present":
            raise RegistryError("%s: module is required with state=present (the file below vllm/transformers_utils/configs, without .py)" % where)
        if module is not None and not is_module_path(module):
            raise RegistryError("%s: module %r is not a valid Python module name (plain like qwen3_5_moe or dotted)" % (where, module))
        item = Wanted(class_name, resolve_config_module(module) if module is not None else None, class_name)
        if class_name in seen:
            if seen[class_name] != item:
                raise RegistryError("%s: class %s is listed twice with different modules" % (where, class_name))
            continue
        seen[class_name] = item
        wanted.append(item)
    return wanted


def _statement_removal(src: _Source, stmt: ast.stmt, replacement: str = "") -> _Edit:
    start, end = src.span(stmt)
    if not src.only_space_before(start) or not src.rest_is_blank(end):
        raise RegistryError("line %d: the statement shares its line with other code; patch this file by hand" % stmt.lineno)
    return _Edit(src.line_start(start), src.line_end(end), replacement)


def patch_configs(text: str, entries: t.Sequence[t.Mapping[str, t.Any]], state: str = "present", force: bool = False) -> PatchResult:
    """Make config classes importable from (or absent from) ``vllm/transformers_utils/configs/__init__.py``.

    Present means: the class is imported from (import style) or mapped to (lazy
    style) its module, and listed in ``__all__``. A class coming from another
    module is a conflict unless ``force``.
    """
    if state not in ("present", "absent"):
        raise RegistryError("state must be present or absent")
    wanted = normalize_config_entries(entries, state)
    configs = parse_configs(text)
    src = t.cast(_Source, configs.src)
    result = PatchResult(text, text)
    edits: t.List[_Edit] = []
    new_map: t.List[Wanted] = []
    new_imports: t.List[Wanted] = []
    new_all: t.List[str] = []
    drop_all: t.Set[str] = set()
    lazy_elems = _elements(src, configs.lazy_node) if configs.lazy_node is not None else []
    lazy_starts = [elem.start for elem in lazy_elems]
    lazy_style = _infer_style(src, [configs.lazy_node]) if configs.lazy_node is not None else _Style()
    all_style = _infer_style(src, [configs.all_node]) if configs.all_node is not None else _Style()
    for item in wanted:
        found = configs.classes.get(item.name, [])
        other = [imp for imp in found if item.module is not None and imp.module != item.module]
        same = [imp for imp in found if imp not in other]
        listed = item.name in configs.exported
        if other and not force:
            raise RegistryError("%s is %s %s (line %d), not %s; set force=true to %s it" % (
                item.name, "mapped to" if configs.style == "lazy" else "imported from", other[0].module, other[0].line, item.module,
                "remove" if state == "absent" else "replace"))
        record = {"class_name": item.name, "module": item.module}
        if state == "absent":
            for imp in found:
                if configs.style == "lazy":
                    edits.append(_removal(src, lazy_elems, lazy_starts.index(imp.elem.start)))  # type: ignore[union-attr]
                else:
                    if imp.names > 1:
                        raise RegistryError("line %d imports %s together with other names; remove it by hand" % (imp.line, item.name))
                    edits.append(_statement_removal(src, imp.stmt))  # type: ignore[arg-type]
            if listed:
                drop_all.add(item.name)
            if found or listed:
                record["module"] = found[0].module if found else item.module
                record["changes"] = ([LAZY_MAP if configs.style == "lazy" else "import"] if found else []) + ([ALL_NAME] if listed else [])
                result.removed.append(record)
            continue
        changes: t.List[str] = []
        for position, imp in enumerate(other):
            if configs.style == "lazy":
                index = lazy_starts.index(imp.elem.start)  # type: ignore[union-attr]
                if position == 0 and not same:
                    edits.append(_lazy_replacement(src, lazy_elems, index, item, lazy_style))
                else:
                    edits.append(_removal(src, lazy_elems, index))
            else:
                if imp.names > 1:
                    raise RegistryError("line %d imports %s together with other names; replace it by hand" % (imp.line, item.name))
                new_line = "from %s import %s" % (item.module, item.name) + src.newline if position == 0 and not same else ""
                edits.append(_statement_removal(src, imp.stmt, new_line))  # type: ignore[arg-type]
            result.removed.append({"class_name": item.name, "module": imp.module, "changes": [LAZY_MAP if configs.style == "lazy" else "import"]})
        if other and not same:
            changes.append(LAZY_MAP if configs.style == "lazy" else "import")
        elif not found:
            (new_map if configs.style == "lazy" else new_imports).append(item)
            changes.append(LAZY_MAP if configs.style == "lazy" else "import")
        if not listed:
            new_all.append(item.name)
            changes.append(ALL_NAME)
        if changes:
            record["changes"] = changes
            result.added.append(record)
        else:
            result.already_present.append(record)
    if new_map:
        edits.extend(_insertion(src, configs.lazy_node, [(item.name, [item.module], False) for item in new_map], lazy_style))  # type: ignore[arg-type,misc]
    if new_imports:
        anchor = configs.last_import
        text_lines = "".join("from %s import %s" % (item.module, item.name) + src.newline for item in new_imports)
        if anchor is None:
            raise RegistryError("no import statement to place the new imports after; patch this file by hand")
        start, end = src.span(anchor)
        if not src.rest_is_blank(end):
            raise RegistryError("line %d: the last import shares its line with other code; patch this file by hand" % anchor.lineno)
        edits.append(_Edit(src.line_end(end), src.line_end(end), text_lines))
    if new_all:
        edits.extend(_insertion(src, configs.all_node, [(None, [name], False) for name in new_all], all_style))  # type: ignore[arg-type]
    if drop_all:
        all_elems = _elements(src, configs.all_node)  # type: ignore[arg-type]
        for index, elem in enumerate(all_elems):
            if _literal(elem.value) in drop_all:
                edits.append(_removal(src, all_elems, index))
    if not edits:
        return result
    after = _apply(text, edits)
    _verify_configs(configs, after, result, state)
    result.after = after
    return result


def _lazy_replacement(src: _Source, elems: t.List[_Elem], index: int, item: Wanted, style: _Style) -> _Edit:
    elem = elems[index]
    comma = _comma_after(src, elem)
    same_line_comma = comma is not None and src.line_of(comma) == src.line_of(elem.end)
    after = comma + 1 if same_line_comma else elem.end  # type: ignore[operator]
    if src.only_space_before(elem.start) and (same_line_comma or comma is None) and src.rest_is_blank(after):
        lines = _render(item.name, [item.module], False, src.indent_of(elem.start), style, comma is not None)  # type: ignore[list-item]
        return _Edit(src.line_start(elem.start), src.line_end(after), "".join(line + src.newline for line in lines))
    value_start = src.span(elem.key)[0] if elem.key is not None else elem.start
    return _Edit(value_start, elem.end, _render(item.name, [item.module], False, "", _Style(quote=style.quote), False)[0])  # type: ignore[list-item]


def _verify_configs(before: Configs, after_text: str, result: PatchResult, state: str) -> None:
    _compile(after_text, "configs/__init__.py")
    after = parse_configs(after_text)
    if after.style != before.style:
        raise RegistryError("internal error: the edit changed the style of the file; the file was left untouched")

    def managed(stmt: ast.stmt) -> bool:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith(CONFIGS_PACKAGE):
            return True
        return (_assigned_name(stmt) or ("", None))[0] in (ALL_NAME, LAZY_MAP)

    if _other_statements(before.src.tree, managed) != _other_statements(after.src.tree, managed):  # type: ignore[union-attr]
        raise RegistryError("internal error: the edit changed other statements; the file was left untouched")
    expected_map = before.mapping()
    expected_all = list(before.exported)
    for record in result.removed:
        expected_map.pop(record["class_name"], None)
        if ALL_NAME in record["changes"]:
            expected_all = [name for name in expected_all if name != record["class_name"]]
    for record in result.added:
        expected_map[record["class_name"]] = record["module"]
        if ALL_NAME in record["changes"] and record["class_name"] not in expected_all:
            expected_all.append(record["class_name"])
    if after.mapping() != expected_map or sorted(after.exported) != sorted(expected_all):
        raise RegistryError("internal error: the edited file would not export the expected classes; the file was left untouched")
    if state == "present":
        for record in result.added + result.already_present:
            if after.mapping().get(record["class_name"]) != record["module"] or record["class_name"] not in after.exported:
                raise RegistryError("internal error: %s is not exported as requested; the file was left untouched" % record["class_name"])
