"""A module read in pieces (patch_queue.merge.pieces) tells what its whole tree tells: the same functions and
methods at the same lines, the same function for a scope, the same statements around a line; a text that does
not parse raises as the whole parse does; and a piece of one text is shared by another that holds it."""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from pathlib import Path

import pytest

from patch_queue.merge import pieces, statements, symbols

ROOT = Path(__file__).resolve().parents[1]

TRICKY = '''"""A module docstring
whose lines start at column 0
class NotAClass:
    and a line at a class's indentation
"""
from __future__ import annotations

import os

X = [
    1,
]
if os.name:
    Y = 1
else:
    Y = 2


@decorator
@other(
    arg,
)
def top(a, b):
    """Doc."""
    return a + b


class Plain:
    """Its docstring
    goes on at the members' indentation
    def not_a_method(self):
    """

    attribute = """text
    at the members' indentation
    """

    @property
    def first(self):
        return 1

    def first(self):  # a second one of the same name
        return 2

    class Inner:
        def deep(self):
            def nested():
                return 3
            return nested

    async def waits(self):
        try:
            await x
        except E:
            pass
        finally:
            done()
# a comment at column 0 inside the class
    def after_comment(self):
        return s[
            1
        ]


class Based(Plain, metaclass=Meta):  # a comment
    x: int = 1

    def m(self): return self.x


def top(a):  # a second top of the same name
    return a
'''


def _reference(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in tree.body:
        prefix, members = (f"{node.name}.", node.body) if isinstance(node, ast.ClassDef) else ("", [node])
        for f in members:
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + f.name, f


def _first(tree: ast.Module, scope: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    body: list[ast.stmt] = tree.body
    for part in scope.split("."):
        node = next(
            (
                n
                for n in body
                if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        if not isinstance(node, ast.ClassDef):
            return node
        body = node.body
    return None


def _dump(node: ast.AST, shift: int = 0) -> str:
    """The node with every attribute, its lines moved by ``shift``."""
    return ast.dump(ast.increment_lineno(copy.deepcopy(node), shift) if shift else node, include_attributes=True)


def _same_as_whole(text: str) -> None:
    tree = ast.parse(text)
    assert pieces.symbols_of(text) == symbols.symbols_ast(text)
    rows = text.splitlines()
    whole = statements.statements([(node, 0) for node in tree.body], rows)
    assert statements.statements(pieces.outline(text).top, rows) == whole
    found = list(pieces.defs(text))
    reference = list(_reference(tree))
    assert [(scope, _dump(node, shift)) for scope, node, shift in found] == [(s, _dump(n)) for s, n in reference]
    # a scope names the same function: the first of its name (a nested class's method too)
    probes = {s for s, _n in reference} | {f"{s}.inner" for s, _n in reference}
    probes |= {f"{c.name}.{i.name}.{m.name}" for c in tree.body if isinstance(c, ast.ClassDef) for i in c.body
               if isinstance(i, ast.ClassDef) for m in i.body}  # fmt: skip
    for probe in sorted(probes | {"missing", "missing.x"}):
        got, want = pieces.function(text, probe), _first(tree, probe)
        assert (got is None) == (want is None), probe
        if got is not None and want is not None:
            assert (got[0].lineno + got[1], got[0].name) == (want.lineno, want.name), probe
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    lines = text.count("\n") + 1
    for line in range(1, lines + 1, max(1, lines // 25)):
        near = [
            _dump(n, shift)
            for s, shift in pieces.holding(text, [line])
            for n in ast.walk(s)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            and n.lineno + shift <= line <= (n.end_lineno or 0) + shift
        ]
        want = [n for n in functions if n.lineno <= line <= (n.end_lineno or 0)]
        assert sorted(near) == sorted(map(_dump, want)), line


def test_a_tricky_module_reads_as_its_whole_tree() -> None:
    found = pieces.outline(TRICKY)
    assert not found.whole  # cut: the strings at a piece's indentation are no cut
    assert [n.name for n, _ in found.top if isinstance(n, pieces.Split)] == ["Plain", "Based"]
    _same_as_whole(TRICKY)


def test_real_runner_modules_read_as_their_whole_trees(corpus: Path) -> None:
    texts = sorted((corpus / "vllm-omni-0.30.0" / "npu").glob("*.py"))
    texts += sorted((ROOT / "patch_queue" / "merge").glob("*.py"))
    assert len(texts) > 10
    cut = 0
    for path in texts:
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            continue
        cut += not pieces.outline(text).whole
        _same_as_whole(text)
    assert cut >= len(texts) - 2  # empty ones aside, all cut


@pytest.mark.parametrize(
    "text",
    [
        "def f(:\n    pass\n",  # a piece that does not parse
        "class A:\n    def f(self):\n        return (\n\nclass B:\n    pass\n",  # a member that does not
        "class A(B C):\n    x = 1\n",  # a header that does not
        'x = """\nopen\n',  # a string left open
    ],
)
def test_a_text_that_does_not_parse_raises_as_the_whole_parse_does(text: str) -> None:
    with pytest.raises(SyntaxError) as whole:
        ast.parse(text)
    with pytest.raises(SyntaxError) as cut:
        list(pieces.defs(text))
    assert (cut.value.msg, cut.value.lineno) == (whole.value.msg, whole.value.lineno)


def test_a_cut_that_falls_inside_a_statement_parses_the_text_whole() -> None:
    text = "x = {\n'a': 1,\n}\ndef f():\n    return x\n"  # a line of a dict at column 0
    found = pieces.outline(text)
    assert found.whole
    _same_as_whole(text)


def test_two_texts_share_the_pieces_they_both_hold() -> None:
    a = TRICKY
    b = TRICKY.replace("return 2", "return 22")
    one = dict((s, n) for s, n, _ in pieces.defs(a))
    two = dict((s, n) for s, n, _ in pieces.defs(b))
    assert one["Plain.first"] is not two["Plain.first"]  # the member that changed
    assert all(one[s] is two[s] for s in one if s != "Plain.first")  # every other one parsed once
    # a line added above moves the shift, not the piece
    moved = list(pieces.defs("import sys\n" + a))
    assert moved == [(s, n, at + 1) for s, n, at in pieces.defs(a)]
