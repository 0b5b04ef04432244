"""Exact source text of Python symbols, and the projection of carried symbols.

A *symbol* is a top-level class or function (``ExecuteModelState``) or a method of a top-level
class (``NPUModelRunner.execute_model``).  Its text is the exact lines of the source, from the
first decorator (or the comment block glued above it) to the last line of its body, including
comment lines that trail the body at a deeper indent.  Nothing is reformatted: the projection of
a snapshot is byte-for-byte the upstream text, so a three-way merge sees upstream's real edits.

Two extractors share these rules:
- :func:`symbols_ast` parses with :mod:`ast` (exact, used for projections and for the
  downstream runners);
- :func:`scan_methods` is a line scanner about 20x faster, used only to score the hundreds of
  upstream revisions during the adopt search, where an approximate extent is good enough.
"""

from __future__ import annotations

import ast
import functools
import re
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from patch_queue.errors import PqError
from patch_queue.merge.anchors import indent_of


@dataclass(frozen=True)
class Symbol:
    """One symbol: ``name`` is ``Class.method`` or a top-level name; lines are 1-based, inclusive."""

    name: str
    start: int
    end: int
    text: str  # the lines start..end joined, each ending in "\n"
    indent: int

    @property
    def is_method(self) -> bool:
        return "." in self.name


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _extent(lines: Sequence[str], first: int, last: int, indent: int, floor: int) -> tuple[int, int]:
    """Widen [first, last] (0-based) over the glued comment block above and trailing comments below.

    ``floor`` is the first line that may belong to the symbol (the line after the previous
    sibling's last statement), so a comment is never claimed by two symbols.
    """
    start = first
    while start - 1 >= floor and _is_comment(lines[start - 1]) and indent_of(lines[start - 1]) == indent:
        start -= 1
    end = last
    for probe in range(last + 1, len(lines)):
        line = lines[probe]
        if _is_comment(line) and indent_of(line) > indent:
            end = probe
        elif line.strip():
            break
    return start, end


@functools.lru_cache(maxsize=64)  # a tree of a 6,600-line module is ~4 MB
def parsed(text: str) -> ast.Module:
    """The syntax tree of ``text``, shared by every reader: read it, never change it.  Kept for the last few
    texts: a refresh parses the old and the new upstream module for their projections and the import step
    reads them again; a merge's checks read each side several times (statements, bindings, calls); the
    layout of a patch's module and the import step read the texts the merge checks read."""
    return ast.parse(text)


def symbols_ast(source: str, *, path: str = "<source>") -> dict[str, Symbol]:
    """All top-level classes and functions and the methods of top-level classes, by name (a new dict each call:
    the caller may change it; the symbols are frozen)."""
    try:
        return dict(_symbols_of(source))
    except SyntaxError as exc:
        raise PqError(f"does not parse: {exc.msg}", path=path, line=exc.lineno) from None


@functools.lru_cache(maxsize=64)
def _symbols_of(source: str) -> dict[str, Symbol]:
    """:func:`symbols_ast`'s answer, kept for the last few texts: ``pq sync-gpu`` asks for the methods of the
    same few GPU and NPU modules some 1,300 times."""
    return collect(source, [(node, 0) for node in parsed(source).body])


class CutClass(Protocol):
    """A top-level class read as its members, each parsed apart (:class:`patch_queue.merge.pieces.Split`)."""

    @property
    def name(self) -> str: ...
    @property
    def line(self) -> int: ...  # its header, 0-based
    @property
    def members(self) -> tuple[tuple[ast.stmt, int], ...]: ...


def collect(source: str, top: Iterable[tuple[ast.stmt | CutClass, int]]) -> dict[str, Symbol]:
    """:func:`symbols_ast` of ``source`` from its top-level statements, each with the shift that gives its lines
    in ``source`` (a class may come cut into its members)."""
    lines = source.splitlines(keepends=True)
    found: dict[str, Symbol] = {}

    def walk(body: Iterable[tuple[ast.stmt | CutClass, int]], prefix: str, indent: int, floor: int) -> None:
        for node, shift in body:
            members: list[tuple[ast.stmt | CutClass, int]] | None = None
            if not isinstance(node, ast.stmt):  # a cut class: no decorators, its body its members
                first = node.line
                member, at = node.members[-1]
                last = (member.end_lineno or member.lineno) - 1 + at
                members = list(node.members)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1 + shift
                last = (node.end_lineno or node.lineno) - 1 + shift
                if isinstance(node, ast.ClassDef):
                    members = [(m, shift) for m in node.body]
            else:
                floor = (node.end_lineno or node.lineno) + shift
                continue
            start, end = _extent(lines, first, last, indent, floor)
            name = prefix + node.name
            # First definition wins, as Python's last-wins would hide the copy a human reads first;
            # duplicates are rare (conditional definitions) and reported by callers if they matter.
            if name not in found:
                found[name] = Symbol(name, start + 1, end + 1, "".join(lines[start : end + 1]), indent)
            if members is not None and not prefix:
                walk(members, node.name + ".", indent + 4, first + 1)
            floor = end + 1

    walk(top, "", 0, 0)
    return found


DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)")  # a def line: (indentation, name)
_CLASS = re.compile(r"^class\s+(\w+)")


_SHALLOW = re.compile(r"\n[ \t]{0,4}[^ \t\n]")  # after the newline: a line indented 4 or less
_OTHER_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _trim_blank_tail(text: str) -> str:
    """``text`` without its trailing blank lines (lines end in "\n" only)."""
    while text:
        k = text.rfind("\n", 0, len(text) - 1) + 1
        if text[k:].strip():
            break
        text = text[:k]
    return text


def _trim_blank_lines(text: str) -> str:
    """``text`` without its trailing blank lines, for any line break."""
    lines = text.splitlines(keepends=True)
    while lines and not lines[-1].strip():
        lines.pop()
    return "".join(lines)


def _header_rows(lines: Iterator[str]) -> int:
    """How many of ``lines`` the class header they start with spans, read by Python's tokenizer up to the
    header's end: 1 for ``class A(B):``, 4 for ``class A(\\n    B,\\n    C,\\n):``.  A header that does not
    tokenize counts as its first line alone."""
    try:
        for token in tokenize.generate_tokens(lambda: next(lines, "")):
            if token.type == tokenize.NEWLINE:  # the end of the logical line: the header's last line
                return max(token.start[0], 1)
    except (tokenize.TokenError, SyntaxError):
        pass
    return 1


def _header_end(source: str, start: int) -> int:
    """The offset just after the last line of the class header at ``start`` (lines end in "\\n" only)."""

    def lines() -> Iterator[str]:
        pos = start
        while pos < len(source):
            end = source.find("\n", pos) + 1 or len(source)
            yield source[pos:end]
            pos = end

    end = start
    for _ in range(_header_rows(lines())):
        end = source.find("\n", end) + 1 or len(source)
    return end


def _shallow_lines(source: str, class_name: str) -> Iterator[tuple[str, str]]:
    """(the text since the previous one, the line) for each non-blank line of the body of class
    ``class_name`` indented 4 or less, then (the rest of the source, "").

    Only the lines indented 4 or less are visited: the deeper and blank lines between them are
    taken as whole slices.  Lines must end in "\n" only.
    """
    pos = 0
    while pos < len(source):
        end = source.find("\n", pos) + 1 or len(source)
        m = _CLASS.match(source[pos:end])
        if m and m.group(1) == class_name:
            pos = _header_end(source, pos)
            break
        pos = end
    else:
        return
    prev = pos
    for found in _SHALLOW.finditer(source, pos - 1):
        start = found.start() + 1
        end = source.find("\n", start) + 1 or len(source)
        line = source[start:end]
        if line.strip():
            yield source[prev:start], line
            prev = end
    yield source[prev:], ""


def _shallow_lines_any_break(source: str, class_name: str) -> Iterator[tuple[str, str]]:
    """:func:`_shallow_lines` for any line break, one line at a time."""
    all_lines = source.splitlines(keepends=True)
    header = next(
        (k for k, line in enumerate(all_lines) if (m := _CLASS.match(line)) and m.group(1) == class_name), None
    )
    if header is None:
        return
    lines = iter(all_lines[header + _header_rows(iter(all_lines[header:])) :])
    gap: list[str] = []
    for line in lines:
        if line.strip() and indent_of(line) <= 4:
            yield "".join(gap), line
            gap = []
        else:
            gap.append(line)
    yield "".join(gap), ""


def scan_methods(source: str, class_name: str) -> dict[str, str]:
    """Approximate method texts of one top-level class by indentation alone (adopt search only)."""
    plain = not any(ch in source for ch in _OTHER_BREAKS)  # the fast path: lines end in "\n" only
    trim = _trim_blank_tail if plain else _trim_blank_lines
    out: dict[str, str] = {}
    current: str | None = None
    buf: list[str] = []
    pending: list[str] = []  # decorators/comments seen before the next def

    def flush() -> None:
        nonlocal current, buf
        if current is not None and current not in out:
            out[current] = trim("".join(buf))
        current, buf = None, []

    for gap, line in (_shallow_lines if plain else _shallow_lines_any_break)(source, class_name):
        if current is not None:
            buf.append(gap)  # deeper and blank lines only ever go to the current method
        stripped = line.strip()
        ind = indent_of(line)
        if not stripped or (ind == 0 and not stripped.startswith("#")):
            break  # the end of the source or of the class
        m = DEF.match(line)
        if m and ind == 4:
            flush()
            current = m.group(2)
            buf = pending + [line]
            pending = []
        elif current is not None and stripped[0] in ")]}":
            buf.append(line)  # the closing line of a multi-line signature
        elif ind == 4 and stripped.startswith(("@", "#")):
            flush()
            pending.append(line)
        else:
            flush()
            pending = []
    flush()
    return out


def project(texts: Sequence[Symbol]) -> str:
    """The projected base text of one output module: the carried symbols in the given order.

    Methods are separated by one blank line and top-level symbols by two, as the downstream
    modules lay them out, so diff hunks against the downstream file stay small and readable.
    """
    parts: list[str] = []
    for i, sym in enumerate(texts):
        if i:
            parts.append("\n" if sym.is_method and texts[i - 1].is_method else "\n\n")
        parts.append(sym.text if sym.text.endswith("\n") else sym.text + "\n")
    return "".join(parts)
