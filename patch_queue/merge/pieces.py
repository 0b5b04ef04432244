"""A module's syntax tree in pieces, each parsed on its own and kept by its text.

The checks of a merge read many texts that differ in a few functions: the three inputs, each side of the merged
text, each growth of its regions.  Parsing each whole (a 6,000-line runner module per text) repeats the work on
every function that is the same in all of them.  Here a text is cut into its top-level statements, and a
top-level class (``class Name(...):`` on one line) into its members; each piece is parsed alone (a member inside
a stand-in ``class _:``), kept by its text, and shared by every text that holds it.

The cut is made by a line scan, and checked by the parse: a line that starts a piece is one at the piece's
indentation that is not a comment, a decorated ``def``, ``else``/``elif``/``except``/``finally``/``case`` or
a closing bracket.  A cut inside a statement (a line of a string or of brackets at that indentation) leaves a
piece that does not parse alone; then the text is parsed whole, as before.  The nodes of a piece number their
lines from the piece: ``shift`` added gives the text's.
"""

from __future__ import annotations

import ast
import bisect
import functools
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from patch_queue.errors import PqError
from patch_queue.merge import symbols

Function = ast.FunctionDef | ast.AsyncFunctionDef

_HEAD = re.compile(r"class\s+([A-Za-z_]\w*)\s*(?:\([^()\n]*\))?\s*:\s*(?:#[^\n]*)?\n?")
_GOES_ON = re.compile(r"(?:else|elif|except|finally|case)\b|[)\]}]")
_WRAP = "class _:\n"


@dataclass(frozen=True)
class Split:
    """A top-level class cut into its members: each (node, shift), in order; ``line`` its header (0-based)."""

    name: str
    line: int
    members: tuple[tuple[ast.stmt, int], ...]


@dataclass(frozen=True)
class Outline:
    """The top-level statements of a text, each (node, shift), a cut class as a :class:`Split`; and the pieces
    as (first line, last line, 1-based and inclusive, the source parsed, shift) for :func:`holding`."""

    top: tuple[tuple[ast.stmt | Split, int], ...]
    pieces: tuple[tuple[int, int, str, int], ...]
    whole: bool = False  # not cut: the text's own tree


def _lines(text: str) -> list[str]:
    """The lines of ``text`` as the tokenizer counts them (``\\n`` only), each with its newline."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


_TRIPLE = re.compile(r'"""|\'\'\'')


def _in_strings(text: str, lines: list[str]) -> set[int]:
    """The lines that begin inside a triple-quoted string (as a scan of the quotes alone pairs them: one
    quoted otherwise makes a cut that does not parse)."""
    spans: list[tuple[int, int]] = []
    opened: tuple[str, int] | None = None
    for m in _TRIPLE.finditer(text):
        if opened is None:
            opened = (m[0], m.end())
        elif m[0] == opened[0] and text[m.start() - 1] != "\\":
            spans.append((opened[1], m.start()))
            opened = None
    if opened is not None:
        spans.append((opened[1], len(text)))
    if not spans:
        return set()
    starts = list(itertools.accumulate((len(line) for line in lines), initial=0))
    out: set[int] = set()
    for a, b in spans:
        out.update(range(bisect.bisect_left(starts, a), bisect.bisect_right(starts, b)))
    return out


def _starts(lines: list[str], lo: int, hi: int, indent: str, inside: set[int]) -> list[int]:
    """The lines of [lo, hi) that may start a statement at exactly ``indent`` (none of ``inside``)."""
    out: list[int] = []
    decorated = False
    width = len(indent)
    for k in range(lo, hi):
        line = lines[k]
        if not line.startswith(indent) or len(line) <= width or line[width] in " \t#\n\r\f" or k in inside:
            continue
        if _GOES_ON.match(line, width):  # (the closing bracket of a decorator's call too)
            continue
        if not decorated:
            out.append(k)
        decorated = line[width] == "@"  # what follows a decorator is the rest of it, or what it decorates
    return out


@functools.lru_cache(maxsize=8192)
def _parse(source: str) -> ast.Module | None:
    """The tree of one piece (kept by its text: read it, never change it); None when it does not parse alone."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _cut(text: str) -> Outline | None:
    lines = _lines(text)
    if "\r" in text or not lines:
        return None
    inside = _in_strings(text, lines)
    tops = _starts(lines, 0, len(lines), "", inside)
    if not tops:
        return None
    bounds = [0, *tops[1:], len(lines)]  # lines before the first statement (comments) go with it
    top: list[tuple[ast.stmt | Split, int]] = []
    pieces: list[tuple[int, int, str, int]] = []
    for first, lo, hi in zip(tops, bounds, bounds[1:], strict=False):
        head = _HEAD.fullmatch(lines[first]) if lines[first].startswith("class") else None
        members = _members(lines, first, hi, inside) if head is not None and _header(lines[first]) else None
        if head is None or members is None:
            source = "".join(lines[lo:hi])
            tree = _parse(source)
            if tree is None:
                return None
            top += [(node, lo) for node in tree.body]
            pieces.append((lo + 1, hi, source, lo))
            continue
        split: list[tuple[ast.stmt, int]] = []
        for a, b in members:
            source = _WRAP + "".join(lines[a:b])
            tree = _parse(source)
            if tree is None or len(tree.body) != 1 or not isinstance(tree.body[0], ast.ClassDef):
                return None
            split += [(node, a - 1) for node in tree.body[0].body]
            pieces.append((a + 1, b, source, a - 1))
        top.append((Split(head[1], first, tuple(split)), 0))
    return Outline(tuple(top), tuple(pieces))


def _header(line: str) -> bool:
    """Whether ``line`` is a class header that parses (its members are parsed apart)."""
    tree = _parse(line.rstrip("\n") + "\n    pass\n")
    return tree is not None and len(tree.body) == 1 and isinstance(tree.body[0], ast.ClassDef)


def _members(lines: list[str], head: int, hi: int, inside: set[int]) -> list[tuple[int, int]] | None:
    """The members of the class whose header is line ``head`` and that ends before ``hi``, each [lo, hi)."""
    body = next((k for k in range(head + 1, hi) if lines[k].strip() and not lines[k].lstrip().startswith("#")), None)
    if body is None:
        return None
    indent = lines[body][: len(lines[body]) - len(lines[body].lstrip())]
    if not indent:
        return None
    starts = _starts(lines, head + 1, hi, indent, inside)
    if not starts or starts[0] != body:
        return None
    bounds = [head + 1, *starts[1:], hi]
    return list(zip(bounds, bounds[1:], strict=False))


@functools.lru_cache(maxsize=64)
def outline(text: str) -> Outline:
    """The pieces of ``text``, or its whole tree as one piece when a cut does not parse alone; raises
    SyntaxError (or ValueError) as :func:`ast.parse` does when ``text`` does not parse."""
    found = _cut(text)
    if found is not None:
        return found
    tree = symbols.parsed(text)
    return Outline(tuple((node, 0) for node in tree.body), ((1, len(_lines(text)), text, 0),), whole=True)


def symbols_of(text: str, *, path: str = "<source>") -> dict[str, symbols.Symbol]:
    """:func:`symbols.symbols_ast` of ``text`` read from its pieces (the same symbols; a piece is parsed once for
    every text that holds it: the module texts of a series differ in a few methods each)."""
    try:
        found = outline(text)
    except SyntaxError as exc:
        raise PqError(f"does not parse: {exc.msg}", path=path, line=exc.lineno) from None
    return symbols.collect(text, found.top)


def defs(text: str) -> Iterator[tuple[str, Function, int]]:
    """(scope, node, shift) of each top-level function (``name``) and each method of a top-level class
    (``Class.method``), in order."""
    for node, shift in outline(text).top:
        if isinstance(node, Split):
            members: Iterable[tuple[ast.stmt, int]] = node.members
            prefix = f"{node.name}."
        elif isinstance(node, ast.ClassDef):
            members, prefix = ((m, shift) for m in node.body), f"{node.name}."
        else:
            members, prefix = ((node, shift),), ""
        for f, at in members:
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + f.name, f, at


_NAMED = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def function(text: str, scope: str) -> tuple[Function, int] | None:
    """The function ``scope`` (Class.method) of ``text`` names and its shift: the first top-level class or
    function of its first part, and in a class the first member of the next part, down to a function."""
    body: list[tuple[ast.stmt | Split, int]] = list(outline(text).top)
    for part in scope.split("."):
        found = next(((n, at) for n, at in body if isinstance(n, (Split, *_NAMED)) and n.name == part), None)
        if found is None:
            return None
        node, at = found
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return node, at
        if isinstance(node, Split):
            body = list(node.members)
        else:
            assert isinstance(node, ast.ClassDef)
            body = [(m, at) for m in node.body]
    return None


def holding(text: str, lines: Iterable[int]) -> list[tuple[ast.stmt, int]]:
    """The statements of the pieces of ``text`` that hold one of ``lines`` (1-based), each with its shift: the
    trees kept by their text (the members of a cut class inside a stand-in class), or the statements of the
    whole tree.  Read them, never change them."""
    wanted = sorted(set(lines))
    found = outline(text)
    if found.whole:
        nodes = [n for n, _at in found.top if isinstance(n, ast.stmt)]
        return [(n, 0) for n in nodes if any(n.lineno <= k <= (n.end_lineno or n.lineno) for k in wanted)]
    out: list[tuple[ast.stmt, int]] = []
    for first, last, source, shift in found.pieces:
        if any(first <= k <= last for k in wanted):
            tree = _parse(source)
            assert tree is not None  # (the outline was cut from pieces that parse)
            out += [(n, shift) for n in tree.body]
    return out
