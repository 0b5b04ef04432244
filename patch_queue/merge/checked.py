"""A merge whose automatic resolutions must compile: :func:`merge3_checked` for Python modules, and
the helpers that read one side of a conflicted text."""

from __future__ import annotations

import ast
import bisect
import functools
from collections.abc import Callable
from dataclasses import dataclass

from patch_queue.merge.conflict import Conflict
from patch_queue.merge.folded import fold
from patch_queue.merge.three_way import MergeResult, merge3

_MARKERS = ("<<<<<<< ", "||||||| ", "=======", ">>>>>>> ")


def one_side(text: str, side: str = "ours", *, blank: bool = False) -> tuple[str, list[int]]:
    """``text`` with every diff3 conflict region reduced to one ``side`` ("ours" or "theirs"), and the line map.

    The map gives, for each line of the result, its 1-based line in ``text``.  With ``blank``, the
    lines of the other sides and the markers become empty lines, so line numbers stay as they were.
    """
    lines = text.splitlines(keepends=True)
    if "<<<<<<< " not in text:  # no region: every line as it is
        return text, list(range(1, len(lines) + 1))
    out: list[str] = []
    where: list[int] = []
    mode = ""
    done = 0  # the lines before this one are in ``out`` (when kept)

    def plain(stop: int) -> None:  # lines[done:stop] hold no marker: all kept, or all blanked, in ``mode``
        if mode in ("", side) or blank:
            out.extend(lines[done:stop] if mode in ("", side) else ["\n"] * (stop - done))
            where.extend(range(done + 1, stop + 1))

    for number in [k for k, line in enumerate(lines) if line.startswith(_MARKERS)]:
        plain(number)
        line, done = lines[number], number + 1
        if line.startswith("<<<<<<< "):
            mode = "ours"
        elif line.startswith("||||||| ") and mode == "ours":
            mode = "base"
        elif line.startswith("=======") and mode in ("ours", "base"):
            mode = "theirs"
        elif line.startswith(">>>>>>> ") and mode == "theirs":
            mode = ""
        else:  # a marker-like line out of place: a line of the current side
            done = number
            continue
        if blank:
            out.append("\n")
            where.append(number + 1)
    plain(len(lines))
    return "".join(out), where


@functools.lru_cache(maxsize=8)
def syntax_error_line(text: str) -> int | None:
    """The 1-based line of the first syntax error of ``text`` (Python), or None when it compiles.  Compiled to
    bytecode, which also refuses what only the compiler sees (``return`` outside a function), at two thirds of
    the cost of building its syntax tree.  Kept for the last few texts: along a replay, a merge's result read as
    its upstream side is the next patch's upstream side, checked again."""
    try:
        compile(text, "<merged>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc.lineno or 1
    except ValueError:  # a NUL byte
        return 1
    return None


@functools.lru_cache(maxsize=16)
def _ours_side_error(text: str) -> int | None:
    """:func:`syntax_error_line` of the upstream side of ``text`` (cached: a replay checks each text twice)."""
    return syntax_error_line(one_side(text)[0])


def merge3_checked(
    base: str,
    ours: str,
    theirs: str,
    *,
    labels: tuple[str, str, str] = ("base", "ours", "theirs"),
    key_prefix: str = "",
    recorded: Callable[[str], str | None] | None = None,
) -> MergeResult:
    """:func:`merge3` for Python modules: an automatic resolution that breaks the syntax becomes a conflict.

    Only when all three sides compile (conflict regions already in ``ours`` read as their upstream
    side): then the merged text, read the same way, must compile too.  The resolution nearest
    before the first syntax error is vetoed and the merge redone, until it compiles.
    """

    def run(veto: frozenset[int] = frozenset()) -> MergeResult:
        return merge3(base, ours, theirs, labels=labels, key_prefix=key_prefix, recorded=recorded, veto=veto)

    def automatic(r: Conflict) -> bool:  # near-block flags are in no group
        return not r.conflict and r.group >= 0

    result = run()
    veto: set[int] = set()
    if any(automatic(r) for r in result.regions):  # else no automatic resolution that a veto could take back
        for attempt in range(12):
            probe, where = one_side(result.text)
            error = syntax_error_line(probe)
            if error is None:
                break
            # the sides are checked only now: most merges compile, and each parse of a module costs
            if attempt == 0 and any(_ours_side_error(x) is not None for x in (base, ours, theirs)):
                return result
            line = where[min(error, len(where)) - 1]
            decided = [r for r in result.regions if automatic(r) and r.group not in veto and (r.line or 0) <= line + 1]
            if not decided:
                break
            veto.add(max(decided, key=lambda r: r.line or 0).group)
            result = run(frozenset(veto))
    if result.clean or any(_ours_side_error(x) is not None for x in (ours, theirs)):
        return result

    def widened(grow: list[tuple[int, int]]) -> MergeResult:
        return merge3(
            base, ours, theirs, labels=labels, key_prefix=key_prefix, recorded=recorded, veto=frozenset(veto), grow=grow
        )

    return _whole_statements(result, base, widened)


# ---------------------------------------------------------------------------------------------
# conflict regions that never cut a statement


@dataclass(frozen=True)
class _Statement:
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


def _statements(tree: ast.Module, lines: list[str]) -> list[_Statement]:
    found: list[_Statement] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.end_lineno is None:
            continue
        start = _first_line(node) - 1
        children: list[ast.stmt] = []
        for name in ("body", "orelse", "finalbody"):
            value = getattr(node, name, None)
            if isinstance(value, list):
                children += [c for c in value if isinstance(c, ast.stmt)]
        for part in [*getattr(node, "handlers", []), *getattr(node, "cases", [])]:
            children += part.body
        held = {k for c in children for k in range(_first_line(c) - 1, c.end_lineno or c.lineno)}
        own = frozenset(
            k
            for k in range(start, node.end_lineno)
            if k not in held and lines[k].strip() and not lines[k].lstrip().startswith("#")
        )
        function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        klass = isinstance(node, ast.ClassDef)
        found.append(_Statement(start, node.end_lineno, own, bool(children), function, klass))
    return found


def _widen(statements: list[_Statement], lo: int, hi: int) -> tuple[int, int] | None:
    """The base lines [lo, hi) grown to whole statements, or when they are, to the statement around them;
    None when they already cover their function, or would cover a whole class."""
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
    if any(s.klass and start <= s.start and s.end <= end for s in statements):
        return None  # never a whole class
    return start, end


def _side_error(text: str) -> int | None:
    """The line of ``text`` (with diff3 regions) of the first syntax error of its upstream side, else of its
    patch side; None when both parse."""
    for side in ("ours", "theirs"):
        probe, where = one_side(text, side)
        error = syntax_error_line(probe)
        if error is not None:
            return where[min(error, len(where)) - 1] if where else 1
    return None


def _whole_statements(
    result: MergeResult, base: str, widened: Callable[[list[tuple[int, int]]], MergeResult]
) -> MergeResult:
    """``result`` with its conflict regions grown until the module parses with every region taken to upstream
    and with every region taken to the patch.

    A region that cuts a statement (one side's text ends inside a call whose arguments are the other side's)
    takes in the base lines around it, up to whole statements of the base, then the statement enclosing
    those, at most its function: each side of the grown region is that side's own text of those lines (the
    unchanged lines on every side), and regions that meet become one.  None of it when no growth parses.
    """
    error = _side_error(result.text)
    if error is None:
        return result
    try:
        tree = ast.parse(base)
    except SyntaxError:
        return result
    side = fold(base)
    first: list[int] = []  # folded base line -> its first unfolded line
    total = 0
    for line in side.lines:
        first.append(total)
        total += len(side.blocks.get(line, [line]))
    statements = _statements(tree, base.splitlines())

    def unfolded(k: int) -> int:
        return first[k] if k < len(first) else total

    grow: list[tuple[int, int]] = []
    current = result
    for _ in range(24):
        conflicts = sorted((r for r in current.conflicts if r.line is not None), key=lambda r: r.line or 0)
        if not conflicts:
            return result
        at = [r for r in conflicts if (r.line or 0) <= error] or conflicts[:1]
        region = at[-1]
        span = current.spans.get(region.group)
        if span is None:
            return result
        wider = _widen(statements, unfolded(span[0]), unfolded(span[1]))
        if wider is None:
            return result
        lo, hi = bisect.bisect_right(first, wider[0]) - 1, bisect.bisect_left(first, wider[1])
        for s, e in list(grow):
            if s < hi and lo < e:
                grow.remove((s, e))
                lo, hi = min(lo, s), max(hi, e)
        grow = sorted([*grow, (max(lo, 0), hi)])
        current = widened(grow)
        error = _side_error(current.text)
        if error is None:
            return current
    return result
