"""The statements of a GPU or NPU method as ``pq sync-gpu`` compares them (pure logic): each statement (a compound
one: its header) or clause line as a unit of normalised code (:func:`units`, wrapping does not change a key),
the rows a change widens to so that it holds whole statements (:func:`statements`, :func:`whole`), the opcodes of
two unit sequences with uneven replacements split (:func:`opcodes`), and how like two statements are
(:func:`like`, :func:`similar`)."""

from __future__ import annotations

import ast
import difflib
import functools
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from patch_queue.checks import gpu_audit
from patch_queue.sync.ports import joined

# two statements this similar (difflib's ratio) are one edited statement
SIMILAR = 0.6


def code_rows(lines: Sequence[str]) -> dict[int, str]:
    """0-based row -> the normalised code of that line (rows without code are absent)."""
    return {r - 1: c for r, c in gpu_audit.code_lines(joined(lines)).code.items()}


# kept: one sync reads the same few hundred method texts again and again (units, spans, each placement round)
@functools.lru_cache(maxsize=1024)
def _statements(text: str) -> tuple[tuple[int, int, int], ...]:
    """(first, last header row, last row) of every statement of a method (0-based rows); a simple
    statement is all header."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return ()
    out: list[tuple[int, int, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.stmt, ast.ExceptHandler)) and not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            end = (node.end_lineno or node.lineno) - 1
            body = getattr(node, "body", None)
            header = max(node.lineno - 1, body[0].lineno - 2) if isinstance(body, list) and body else end
            out.append((node.lineno - 1, header, end))
    return tuple(sorted(out))


def spans(text: str) -> list[tuple[int, int, int, int]]:
    """(lo, hi, first, last): rows [lo, hi] of a method (0-based) that, touched, take the rows [first, last] of a
    whole statement along (:func:`whole`): every statement's header, and each ``else:`` / ``finally:`` clause line
    of a compound statement, which takes that whole statement along (a change that adds an ``else:`` re-indents the
    code after it, which the statement's other lines show; an added ``elif`` branch re-indents nothing)."""
    return list(_spans(text))


@functools.lru_cache(maxsize=1024)
def _spans(text: str) -> tuple[tuple[int, int, int, int], ...]:
    out = [(s, header, s, end) for s, header, end in _statements(text)]
    try:
        lines = textwrap.dedent(text).splitlines()
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return tuple(out)
    for node in (n for n in ast.walk(tree) if isinstance(n, ast.stmt)):
        for before, clause, words in _clauses(node):
            if before and clause:
                rows = range((before[-1].end_lineno or before[-1].lineno) - 1, clause[0].lineno)
                row = next((r for r in rows if lines[r].strip().split(" ", 1)[0].rstrip(":") in words), None)
                if row is not None:
                    out.append((row, row, node.lineno - 1, (node.end_lineno or node.lineno) - 1))
    return tuple(sorted(out))


def _clauses(node: ast.stmt) -> list[tuple[Sequence[ast.stmt | ast.excepthandler], list[ast.stmt], tuple[str, ...]]]:
    """(the block before a clause, the clause's block, the words its line starts with) of a compound statement."""
    if isinstance(node, (ast.If, ast.For, ast.AsyncFor, ast.While)):
        return [(node.body, node.orelse, ("else",))]
    if isinstance(node, ast.Try):
        return [
            (node.handlers or node.body, node.orelse, ("else",)),
            (node.orelse or node.handlers or node.body, node.finalbody, ("finally",)),
        ]
    return []


def whole(first: int, last: int, reach: Sequence[tuple[int, int, int, int]]) -> tuple[int, int]:
    """[first, last] widened to whole statements: every one whose header or clause line it touches (:func:`spans`;
    a simple statement is all header)."""
    while True:
        wider = [(s, end) for lo, hi, s, end in reach if lo <= last and hi >= first]
        lo, hi = min([first, *(s for s, _e in wider)]), max([last, *(e for _s, e in wider)])
        if (lo, hi) == (first, last):
            return first, last
        first, last = lo, hi


@dataclass(frozen=True)
class Unit:
    """A statement (a compound one: its header), or a clause line (``else:``), as normalised code."""

    first: int  # 0-based rows
    last: int  # the statement's last row (a compound statement: its header's)
    key: str


def units(lines: Sequence[str]) -> list[Unit]:
    """The units of a method's lines, in order: wrapping does not change their keys."""
    return list(_units(joined(lines)))


@functools.lru_cache(maxsize=1024)  # a sync reads the units of the same method texts in every placement round
def _units(text: str) -> tuple[Unit, ...]:
    code = {r - 1: c for r, c in gpu_audit.code_lines(text).code.items()}
    out: list[Unit] = []
    covered: set[int] = set()
    for s, header, _end in _statements(text):
        rows = [r for r in range(s, header + 1) if r in code and r not in covered]
        if rows:
            covered.update(rows)
            out.append(Unit(s, header, "".join(code[r] for r in rows)))
    out += [Unit(r, r, c) for r, c in code.items() if r not in covered]
    return tuple(sorted(out, key=lambda u: u.first))


def opcodes(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes a -> b with every uneven replacement split: a unit of b similar to one of a
    (in order) replaces it, the others of b are insertions and the others of a deletions."""
    out: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "replace" or i2 - i1 == j2 - j1:
            out.append((tag, i1, i2, j1, j2))
            continue
        i = i1
        for j in range(j1, j2):
            ratios = [like(a[k], b[j]) or -1.0 for k in range(i, i2)]  # below SIMILAR: never chosen
            best = max(range(len(ratios)), key=lambda k: ratios[k], default=-1)
            if best >= 0 and ratios[best] >= SIMILAR:
                if best:
                    out.append(("delete", i, i + best, j, j))
                out.append(("replace", i + best, i + best + 1, j, j + 1))
                i += best + 1
            else:
                out.append(("insert", i, i, j, j + 1))
        if i < i2:
            out.append(("delete", i, i2, j2, j2))
    return out


@functools.lru_cache(maxsize=1 << 16)  # a sync compares the same pairs of statements again in every round
def like(a: str, b: str) -> float:
    """difflib's ratio of two statements' normalised code when it is at least :data:`SIMILAR` (one edited
    statement), else 0."""
    m = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if m.real_quick_ratio() >= SIMILAR and m.quick_ratio() >= SIMILAR and (r := m.ratio()) >= SIMILAR:
        return r
    return 0.0


def similar(key: str, keys: Sequence[str], lo: int = 0) -> int | None:
    """Index in ``keys`` (from ``lo`` on) of the one statement most like ``key``: difflib's ratio at least
    :data:`SIMILAR` and above every other's; None when there is none or two are as close."""
    if gpu_audit.is_trivial(key):
        return None
    scored = sorted(((r, i) for i in range(lo, len(keys)) if (r := like(key, keys[i]))), reverse=True)
    if not scored or (len(scored) > 1 and scored[1][0] == scored[0][0]):
        return None
    return scored[0][1]
