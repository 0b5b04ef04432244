"""Call statements a merge makes a method run more often than either input of the merge does.

Upstream moves a call out of lines the omni patch rewrote, or both sides add the same call at different
places: each side of the merged method, its regions taken to that side, may then hold two copies where
each input holds one.  A call statement (``x.fill_(-1)``, ``await f()``; compared by its code, layout
dropped) counts when both inputs make it and a side of the merge makes it more often than either; a value
assigned twice is most often two branches of one ``if``, a call made twice is work done twice.
:mod:`patch_queue.checks.duplicates` reports what is left in the output; :mod:`patch_queue.merge.checked`
grows regions so that the merge leaves none.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from patch_queue.merge import markers, pieces, symbols

Function = ast.FunctionDef | ast.AsyncFunctionDef


def methods(text: str) -> dict[str, Function]:
    """Class.method (and top-level function) -> its node; {} when the text does not parse."""
    try:
        tree = symbols.parsed(text)
    except SyntaxError:
        return {}
    out: dict[str, Function] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    out[f"{node.name}.{item.name}"] = item
    return out


def _methods(text: str) -> dict[str, tuple[Function, int]]:
    """:func:`methods` read from the text's pieces (:mod:`patch_queue.merge.pieces`): each node with the shift
    that gives the text's lines."""
    try:
        return {scope: (node, shift) for scope, node, shift in pieces.defs(text)}
    except SyntaxError:
        return {}


@functools.lru_cache(maxsize=4096)
def _calls_of(method: Function) -> tuple[tuple[str, int], ...]:
    """:func:`calls` of a method of a piece, kept: the pieces of the texts a merge checks are shared."""
    return tuple(calls(method))


def calls(method: Function) -> Iterator[tuple[str, int]]:
    """(code, line) of each statement of ``method``'s body that is a call, nested defs left out."""
    todo: list[ast.AST] = list(method.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call | ast.Await):
            yield ast.unparse(node), node.lineno
        todo.extend(ast.iter_child_nodes(node))


def counts(method: Function | None) -> Counter[str]:
    return Counter(code for code, _line in calls(method)) if method is not None else Counter()


@dataclass(frozen=True, order=True)
class Twice:
    side: str  # the side of the regions the merged text is read with: "ours" (upstream) or "theirs"
    scope: str  # Class.method
    code: str  # the call statement
    lines: tuple[int, ...]  # 1-based lines of its copies in the merged text


_CALL = re.compile(r"^(?:await)?[\w.]+(?:\[[^\]]*\])*\(")


@functools.lru_cache(maxsize=32)
def _call_lines(text: str) -> dict[str, Counter[str]]:
    """For each ``def`` line of ``text`` (stripped), the lines after it (up to the next ``def`` indented no deeper:
    a nested one is the method's own; a method after a function holds with it) that start a call statement,
    whitespace dropped, counted: a cheap upper view of :func:`calls`, from the text alone."""
    out: dict[str, Counter[str]] = {}
    section: Counter[str] = Counter()
    depth = -1
    for line in text.splitlines():
        indent, call = _line(line)
        if indent >= 0 and (depth < 0 or indent <= depth):
            section, depth = out.setdefault(line.strip(), Counter()), indent
            continue
        if call:
            section[call] += 1
    return out


@functools.lru_cache(maxsize=1 << 16)
def _line(line: str) -> tuple[int, str]:
    """For :func:`_call_lines`, one line: its indentation when it is a ``def`` line (else -1), and the call it
    starts, whitespace dropped (else ""); kept: the texts a replay checks share most of their lines."""
    code = "".join(line.split())
    return (len(line) - len(line.lstrip()) if symbols.DEF.match(line) else -1), (code if _CALL.match(code) else "")


def _may_repeat(merged: str, inputs: list[str]) -> bool:
    """Whether a side of ``merged`` holds some call line more often, after the same ``def`` line, than each of
    ``inputs`` does: a method made to run a call twice does, when its copies are written alike (the formatter
    writes them so; ``pq check`` reports any other)."""
    before = [_call_lines(text) for text in inputs]
    for view in markers.sides(merged).values():
        for head, made in _call_lines(view).items():
            for code, n in made.items():
                if n > 1 and all(n > b.get(head, Counter())[code] for b in before):
                    return True
    return False


def made_twice(merged: str, ours: str, theirs: str) -> list[Twice]:
    """The call statements a side of ``merged`` makes in a method more often than ``ours`` (each side of its
    own regions) and ``theirs`` both do, where both make it."""
    texts = [*markers.sides(ours).values(), theirs]
    if not _may_repeat(merged, texts):
        return []
    inputs = [_methods(text) for text in texts]
    out: list[Twice] = []
    for side, view in markers.sides(merged).items():
        where = markers.one_side(merged, side)[1]
        for scope, (method, shift) in _methods(view).items():
            found = [(code, line + shift) for code, line in _calls_of(method)]
            made = Counter(code for code, _line in found)
            before = [
                Counter(code for code, _line in _calls_of(m[scope][0])) if scope in m else Counter() for m in inputs
            ]
            for code, n in sorted(made.items()):
                if n > 1 and before[-1][code] and any(b[code] for b in before[:-1]):
                    if n > max(b[code] for b in before):
                        out.append(Twice(side, scope, code, tuple(sorted(where[k - 1] for c, k in found if c == code))))
    return sorted(out)
