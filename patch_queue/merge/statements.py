"""The statements of a base text as line ranges, and base line ranges grown to whole statements: what a
conflict region may cover (:mod:`patch_queue.merge.checked`)."""

from __future__ import annotations

import ast
import bisect
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from patch_queue.merge.folded import fold
from patch_queue.merge.symbols import CutClass


@dataclass(frozen=True)
class Statement:
    start: int  # 0-based lines [start, end) of the base text, decorators included
    end: int
    own: frozenset[int]  # the lines no statement of its bodies holds (headers, ``else:``), code only
    compound: bool
    function: bool
    klass: bool


def _first_line(node: ast.stmt) -> int:
    """The 1-based first line of a statement, its decorators included."""
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def _bodies(node: ast.AST) -> list[ast.AST]:
    """The statements right inside ``node`` and its ``except`` handlers and ``case`` clauses, in the order of
    :func:`ast.iter_child_nodes` (the nodes that hold a statement: nothing inside an expression does)."""
    out: list[ast.AST] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            out += [v for v in value if isinstance(v, ast.stmt | ast.excepthandler | ast.match_case)]
    return out


def statements(top: Iterable[tuple[ast.stmt | CutClass, int]], lines: list[str]) -> list[Statement]:
    """Every statement of the text whose ``lines`` these are, in the order of :func:`ast.walk` over its tree,
    from its top-level statements, each with the shift that gives its lines (a class may come cut into its
    members: :attr:`patch_queue.merge.pieces.Outline.top`)."""
    code = [bool(line.strip()) and not line.lstrip().startswith("#") for line in lines]
    found: list[Statement] = []
    todo: deque[tuple[ast.AST | CutClass, int]] = deque(top)
    while todo:
        node, shift = todo.popleft()
        if not isinstance(node, ast.AST):  # a cut class: no decorators, its body its members
            todo.extend(node.members)
            children = list(node.members)
            last, at = children[-1]
            start, end, function, klass = node.line, (last.end_lineno or last.lineno) + at, False, True
        else:
            todo.extend((child, shift) for child in _bodies(node))
            if not isinstance(node, ast.stmt) or node.end_lineno is None:
                continue
            children = []
            for name in ("body", "orelse", "finalbody"):
                value = getattr(node, name, None)
                if isinstance(value, list):
                    children += [(c, shift) for c in value if isinstance(c, ast.stmt)]
            for part in [*getattr(node, "handlers", []), *getattr(node, "cases", [])]:
                children += [(c, shift) for c in part.body]
            start, end = _first_line(node) - 1 + shift, node.end_lineno + shift
            function, klass = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef), isinstance(node, ast.ClassDef)
        own: set[int] = set()
        k = start
        for first, stop in sorted((_first_line(c) - 1 + at, (c.end_lineno or c.lineno) + at) for c, at in children):
            own.update(j for j in range(k, min(first, end)) if code[j])
            k = max(k, stop)
        own.update(j for j in range(k, end) if code[j])
        found.append(Statement(start, end, frozenset(own), bool(children), function, klass))
    return found


def close(statements: list[Statement], lo: int, hi: int) -> tuple[int, int]:
    """The base lines [lo, hi) grown until no statement is cut: a statement they meet is taken whole, unless
    they lie in its body and hold none of its own lines (a header, ``else:``)."""
    start, end = lo, hi
    changed = True
    while changed:
        changed = False
        for s in statements:
            meets = s.start < end and start < s.end if start < end else s.start < start < s.end
            if not meets or (start <= s.start and s.end <= end):
                continue
            if s.compound and s.start <= start and end <= s.end:
                inside = not any(start <= k < end for k in s.own) if start < end else not {start - 1, start} <= s.own
                if inside:
                    continue
            start, end, changed = min(start, s.start), max(end, s.end), True
    return start, end


def widen(statements: list[Statement], lo: int, hi: int) -> tuple[int, int] | None:
    """The base lines [lo, hi) grown to whole statements, or when they are, to the statement around them;
    None when they already cover their function, or would cover a whole class."""
    start, end = close(statements, lo, hi)
    if (start, end) == (lo, hi):
        if any(s.function and (s.start, s.end) == (lo, hi) for s in statements):
            return None
        around = [
            s for s in statements if s.compound and s.start <= lo and hi <= s.end and (s.start, s.end) != (lo, hi)
        ]
        if not around:
            return None
        inner = min(around, key=lambda s: s.end - s.start)
        start, end = inner.start, inner.end
    if whole_class(statements, start, end):
        return None
    return start, end


def whole_class(statements: list[Statement], start: int, end: int) -> bool:
    """Whether the base lines [start, end) cover a whole class (a conflict region never does)."""
    return any(s.klass and start <= s.start and s.end <= end for s in statements)


class Folding:
    """The lines of a base text, unfolded, against merge3's folded lines (an omni block is one folded line)."""

    def __init__(self, base: str) -> None:
        self.first: list[int] = []  # folded line -> its first unfolded line
        self.total = 0
        side = fold(base)
        for line in side.lines:
            self.first.append(self.total)
            self.total += len(side.blocks.get(line, [line]))

    def unfolded(self, k: int) -> int:
        return self.first[k] if k < len(self.first) else self.total

    def folded(self, lo: int, hi: int) -> tuple[int, int]:
        """The folded lines that hold the unfolded lines [lo, hi)."""
        return max(bisect.bisect_right(self.first, lo) - 1, 0), bisect.bisect_left(self.first, hi)


def head(node: ast.stmt, *, arguments: bool = True) -> str:
    """A statement as ``ast.unparse`` writes it, a compound statement by its header alone (``if x:``, ``try:``,
    ``def f(a, b):``, or ``def f(…):`` without ``arguments``): what a statement is, layout and body aside."""
    if isinstance(node, ast.If):
        return f"if {ast.unparse(node.test)}:"
    if isinstance(node, ast.While):
        return f"while {ast.unparse(node.test)}:"
    if isinstance(node, ast.For | ast.AsyncFor):
        prefix = "async for" if isinstance(node, ast.AsyncFor) else "for"
        return f"{prefix} {ast.unparse(node.target)} in {ast.unparse(node.iter)}:"
    if isinstance(node, ast.With | ast.AsyncWith):
        prefix = "async with" if isinstance(node, ast.AsyncWith) else "with"
        return f"{prefix} {', '.join(ast.unparse(item) for item in node.items)}:"
    if isinstance(node, ast.Try | ast.TryStar):
        return "try:"
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return f"def {node.name}({ast.unparse(node.args) if arguments else '…'}):"
    if isinstance(node, ast.ClassDef):
        return f"class {node.name}:"
    if isinstance(node, ast.Match):
        return f"match {ast.unparse(node.subject)}:"
    return ast.unparse(node)
