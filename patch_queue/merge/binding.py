"""Names a merge leaves unbound: a function reads a name that one side of the merge binds and the
merged text (with each conflict region taken to one side) binds nowhere.

Upstream renames a local, or the omni patch rewrites the lines that assign it, while the other side
adds a line that reads it: each hunk merges cleanly, or the assignment sits inside a conflict region
whose other side the reader takes, and the result fails with a ``NameError`` at run time.  The scopes
come from :mod:`symtable` (a name a function reads is unbound when neither it, the functions around
it, the module's top level nor the builtins bind it); only what the merge made unbound counts, not
what either side already left unbound (a missing import is :mod:`patch_queue.series.reimport`'s).
"""

from __future__ import annotations

import ast
import builtins
import functools
import keyword
import re
import symtable
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from patch_queue.git.diff import line_hunks
from patch_queue.merge import markers, pieces

_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__path__", "__builtins__"}


@dataclass(frozen=True, order=True)
class Unbound:
    side: str  # the side of the conflict regions the merged text is read with: "ours" (upstream) or "theirs"
    scope: str  # Class.method (nested functions: Class.method.inner)
    name: str


def _scopes(table: symtable.SymbolTable, prefix: str) -> Iterator[tuple[str, symtable.SymbolTable]]:
    for child in table.get_children():
        name = f"{prefix}{child.get_name()}"
        yield name, child
        yield from _scopes(child, name + ".")


@functools.lru_cache(maxsize=32)
def scopes(text: str) -> tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]]] | None:
    """(scope, name) of every name a function of ``text`` reads and nothing binds, and of every name a function
    binds; None when ``text`` does not compile, or star-imports (then any name may be bound)."""
    if re.search(r"^\s*from\s+\S+\s+import\s+\*", text, re.M):
        return None
    try:
        top = symtable.symtable(text, "<merged>", "exec")
    except (SyntaxError, ValueError):
        return None
    module = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    unbound: set[tuple[str, str]] = set()
    local: set[tuple[str, str]] = set()
    for scope, table in _scopes(top, ""):
        if table.get_type() != "function":
            continue
        for sym in table.get_symbols():
            name = sym.get_name()
            if sym.is_local():
                local.add((scope, name))
            implicit = sym.is_global() and not sym.is_declared_global()
            if sym.is_referenced() and implicit and name not in module and name not in _BUILTINS:
                unbound.add((scope, name))
    return frozenset(unbound), frozenset(local)


_SCOPED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.comprehension, ast.arguments)
_BINDS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs, ast.MatchStar)
_DECLARES = re.compile(r"^\s*(?:global|nonlocal)\s", re.M)


@functools.lru_cache(maxsize=32)
def read_first(text: str, functions: frozenset[str]) -> frozenset[tuple[str, str]]:
    """(scope, name) for each name that a function of ``functions`` (Class.method) of ``text`` reads before any
    line of it binds the name, as ruff's F821 takes it (``print(x)`` then ``x = 1``).  The functions, classes,
    lambdas and comprehensions inside are left out (their names are their own, or read later); the name a
    nested def or class binds is not."""
    declares = _DECLARES.search(text) is not None
    found: set[tuple[str, str]] = set()
    for scope in sorted(functions):
        held = pieces.function(text, scope)
        if held is not None:
            found.update((scope, name) for name in _read_first_in(held[0], declares))
    return frozenset(found)


@functools.lru_cache(maxsize=4096)
def _read_first_in(function: ast.FunctionDef | ast.AsyncFunctionDef, declares: bool) -> frozenset[str]:
    """:func:`read_first` of one function (of a piece, kept: the texts a merge checks share their pieces; its
    lines counted from its piece, only their order counts), ``declares`` when its text holds a ``global`` or
    ``nonlocal`` statement."""
    declared = (
        {n for g in ast.walk(function) if isinstance(g, ast.Global | ast.Nonlocal) for n in g.names}
        if declares
        else set()
    )
    bound: dict[str, tuple[int, int]] = {}  # name -> where it is first bound
    read: dict[str, tuple[int, int]] = {}  # name -> where it is first read
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name):
            at = (node.lineno, node.col_offset)
            seen = bound if isinstance(node.ctx, ast.Store) else read
            if node.id not in seen or at < seen[node.id]:
                seen[node.id] = at
            continue
        name = getattr(node, "name", None) if isinstance(node, _BINDS) else None
        if isinstance(node, ast.alias):
            name = node.asname or node.name.split(".")[0]
        if isinstance(name, str):
            at = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
            if name not in bound or at < bound[name]:
                bound[name] = at
        if isinstance(node, _SCOPED) or isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            continue
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                stack += [v for v in value if isinstance(v, ast.AST)]
            elif isinstance(value, ast.AST):
                stack.append(value)
    args = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    return frozenset(
        name
        for name, at in read.items()
        if name not in args and name not in declared and name in bound and at < bound[name]
    )


def _region_functions(marked: set[int], view: str, where: list[int]) -> frozenset[str]:
    """The functions (Class.method) of ``view`` (one side of a text, ``where`` its line map) that hold a line
    of a conflict region (``marked``: the text's lines inside regions, :func:`markers.inside`)."""
    lines = [k for k, m in enumerate(where, 1) if m in marked]
    out: set[str] = set()
    for scope, f, shift in pieces.defs(view):
        if f.end_lineno is not None and any(f.lineno + shift <= k <= f.end_lineno + shift for k in lines):
            out.add(scope)
    return frozenset(out)


def made_unbound(merged: str, ours: str, theirs: str) -> list[Unbound] | None:
    """The locals ``merged`` leaves unbound, on either side of its conflict regions: names a function reads
    that it (or a function around it) binds in another of the texts (the other side, ``ours`` with each side
    of its own regions, ``theirs``) and that ``theirs`` (the patch's own text) does not leave unbound.  (``ours``
    may: a module's omni code lands with its skeleton patch, before the patch that changes the method around
    it.)  In the functions that hold a conflict region, a name read before the line that binds it counts too.
    None when a text does not compile."""
    views = markers.sides(merged)
    found = {side: scopes(view) for side, view in views.items()}
    if any(f is None for f in found.values()):
        return None
    missing = {side: set(f[0]) for side, f in found.items() if f is not None}
    functions: frozenset[str] = frozenset()
    if len(views) > 1:
        marked = markers.inside(merged)
        for side, view in views.items():
            functions |= _region_functions(marked, view, markers.one_side(merged, side)[1])
        for side, view in views.items():
            missing[side] |= read_first(view, functions)
    if not any(missing.values()):
        return []
    before: set[tuple[str, str]] = set(read_first(theirs, functions)) if functions else set()
    local: set[tuple[str, str]] = set()
    for text in (*markers.sides(ours).values(), theirs):
        names = scopes(text)
        if names is None:
            return None
        before |= names[0] if text is theirs else set()
        local |= names[1]
    for f in found.values():
        local |= f[1] if f is not None else set()
    out = [
        Unbound(side, scope, name)
        for side, names in missing.items()
        for scope, name in names
        if (scope, name) not in before and any((outer, name) in local for outer in _enclosing(scope))
    ]
    if len(views) == 1:  # no region: both sides read the same text
        out += [Unbound("theirs", u.scope, u.name) for u in out]
    return sorted(out)


def _enclosing(scope: str) -> list[str]:
    """``scope`` and the scopes around it: ``A.f.g``, ``A.f``, ``A``."""
    parts = scope.split(".")
    return [".".join(parts[:k]) for k in range(len(parts), 0, -1)]


def reads(text: str, scope: str, name: str) -> list[int]:
    """The 1-based lines where the function ``scope`` of ``text`` reads ``name``."""
    held = pieces.function(text, scope)
    if held is None:
        return []
    function, shift = held
    return sorted(
        {
            n.lineno + shift
            for n in ast.walk(function)
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        }
    )


def binds(text: str, scope: str, name: str) -> list[int]:
    """The 1-based lines where the function ``scope`` of ``text`` (which must compile) binds ``name``."""
    held = pieces.function(text, scope)
    return [] if held is None else [k + held[1] for k in _binding_lines(held[0], name)]


def _binding_lines(tree: ast.AST, name: str) -> list[int]:
    """The 1-based lines where ``tree`` binds ``name`` (its own name, when it is a def, aside)."""
    lines: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load):
            lines.add(n.lineno)
        elif isinstance(n, ast.arg | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.ExceptHandler):
            if getattr(n, "arg", None) == name or (n is not tree and getattr(n, "name", None) == name):
                lines.add(n.lineno)
        elif isinstance(n, ast.alias) and (n.asname or n.name.split(".")[0]) == name:
            lines.add(n.lineno)
    return sorted(lines)


def bound_in(lines: str | None, name: str) -> bool:
    """Whether ``lines`` (a region's side: whole statements, as a rule) bind ``name``; when they do not parse
    alone, whether a line binds it the way formatted code does (``name = …``, ``a, name: T = …``, ``for … in``,
    ``as name``, ``def``, ``class``, ``import``, ``:=``)."""
    if lines is None or name in _KEYWORDS or re.search(rf"(?<![\w.]){re.escape(name)}\b", lines) is None:
        return False
    try:
        tree = ast.parse(textwrap.dedent(lines))
    except SyntaxError:
        n = re.escape(name)
        forms = (
            rf"^\s*(?:[\w.\[\]]+\s*,\s*)*{n}\s*(?::\s*[^=\n]+)?\s+(?:[-+*/%&|^@]|//|\*\*|>>|<<)?=\s",
            rf"\bfor\s[^\n]*?(?<![\w.]){n}\b[^\n]*?\sin\s",
            rf"\bas\s+{n}\b",
            rf"\b(?:def|class)\s+{n}\b",
            rf"^\s*(?:from\s+\S+\s+)?import\s[^\n]*(?<![\w.]){n}\b",
            rf"(?<![\w.]){n}\s*:=",
        )
        return any(re.search(form, lines, re.M) for form in forms)
    return bool(_binding_lines(tree, name))


_OP = r"(?:[-+*/%&|^@]|//|\*\*|>>|<<)?"
# the binding forms of :func:`bound_in`, each finding the names it binds in one pass (group 1)
_FORMS = (
    re.compile(rf"^\s*(?:[\w.\[\]]+\s*,\s*)*([A-Za-z_]\w*)\s*(?::\s*[^=\n]+)?\s+{_OP}=\s", re.M),
    re.compile(r"\bas\s+([A-Za-z_]\w*)\b"),
    re.compile(r"\b(?:def|class)\s+([A-Za-z_]\w*)\b"),
    re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*:="),
)
_LISTS = (  # forms whose every name counts: `for … in`, `import …`
    re.compile(r"\bfor\s([^\n]*)\sin\s"),
    re.compile(r"^\s*(?:from\s+\S+\s+)?import\s([^\n]*)", re.M),
)
NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")  # a name, not an attribute
_KEYWORDS = frozenset(keyword.kwlist)  # what a line that does not parse alone may seem to bind (`else: …`)


def bound_names(lines: str) -> frozenset[str]:
    """The names ``lines`` (a region's side) bind, as :func:`bound_in` tells for each; parsed once when they
    parse alone, else each binding form read once."""
    words = set(NAME.findall(lines)) - _KEYWORDS
    found: set[str] = set()
    try:
        tree = ast.parse(textwrap.dedent(lines))
    except SyntaxError:
        found.update(name for form in _FORMS for name in form.findall(lines))
        found.update(name for form in _LISTS for part in form.findall(lines) for name in NAME.findall(part))
        return frozenset(found & words)
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            found.add(n.id)
        elif isinstance(n, ast.arg):
            found.add(n.arg)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.ExceptHandler) and n.name:
            found.add(n.name)
        elif isinstance(n, ast.alias):
            found.add(n.asname or n.name.split(".")[0])
    return frozenset(found & words)


def base_lines(base: str, view: str, *, inserted: bool = False) -> Callable[[int], tuple[int, int]]:
    """For a 1-based line of ``view`` (a text made from ``base``), the 0-based base lines [lo, hi) a region
    must cover to hold it: the line itself, or the base lines it replaced, or the base line it was inserted
    before (with ``inserted``: no line, the place it was inserted at)."""
    hunks = line_hunks(base.encode("utf-8", "surrogateescape"), view.encode("utf-8", "surrogateescape"))

    def where(line: int) -> tuple[int, int]:
        v = line - 1
        shift = 0
        for old, old_count, new, new_count in hunks:
            if v < new:
                break
            if v < new + new_count:
                return old, old + (old_count if inserted else max(old_count, 1))
            shift = old + old_count - (new + new_count)
        return v + shift, v + shift + 1

    return where
