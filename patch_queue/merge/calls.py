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
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from patch_queue.merge import markers

Function = ast.FunctionDef | ast.AsyncFunctionDef


def methods(text: str) -> dict[str, Function]:
    """Class.method (and top-level function) -> its node; {} when the text does not parse."""
    try:
        tree = ast.parse(text)
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


def made_twice(merged: str, ours: str, theirs: str) -> list[Twice]:
    """The call statements a side of ``merged`` makes in a method more often than ``ours`` (each side of its
    own regions) and ``theirs`` both do, where both make it."""
    inputs = [methods(text) for text in (*markers.sides(ours).values(), theirs)]
    out: list[Twice] = []
    for side, view in markers.sides(merged).items():
        where = markers.one_side(merged, side)[1]
        for scope, method in methods(view).items():
            found = list(calls(method))
            made = Counter(code for code, _line in found)
            before = [counts(m.get(scope)) for m in inputs]
            for code, n in sorted(made.items()):
                if n > 1 and before[-1][code] and any(b[code] for b in before[:-1]):
                    if n > max(b[code] for b in before):
                        out.append(Twice(side, scope, code, tuple(where[k - 1] for c, k in found if c == code)))
    return sorted(out)
