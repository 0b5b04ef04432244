"""Upstream statements a refresh lost: what the new upstream adds to a carried symbol and the output lacks.

For each upstream symbol an output module carries (``NPUModelRunner.execute_model``), the statements of
the new upstream symbol that the old one does not have (a statement as :func:`ast.unparse` writes it, so
layout does not count; a compound statement by its header: ``if x:``, ``for a in b:``) are looked for in
the output's copy of the symbol (the method of that name in the module's classes), read with every
conflict region taken to upstream's side and to the patch's.  One found in neither is *lost*: the merge
dropped it without a conflict showing it.  A statement already in the old upstream symbol never counts,
nor one the output holds elsewhere in the same method (moved by the omni patch).  Nor does a statement the
omni patch changed too (``ExecuteModelState(...)`` with an omni field): it is kept when each of its lines
that upstream wrote new (code, layout aside, that no line of the old symbol has) is a line of the output's
method on one side or the other, where a conflict region shows it, or when a line of the output much like it
holds the words upstream changed in it (a word merge: upstream's ``flash_comm_v1_enabled`` for
``sp_enabled`` in the omni patch's ``isinstance(model_output, ...)``).  A line of it that is only a run of the old
statement's own code (the old statement most like it), laid out anew (``) or self.enable_prompt_embeds:`` where
upstream split the old ``if`` header over lines), is nothing upstream wrote: a statement merged by tokens that drops
that run, as the omni patch did, loses nothing of upstream's. The same run found only in another statement of the
old symbol is upstream's new line.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from patch_queue.merge import markers, statements, symbols


@dataclass(frozen=True, order=True)
class Lost:
    file: str  # the output module
    symbol: str  # the carried upstream symbol
    line: int  # 1-based line of the statement in the new upstream module
    statement: str  # as ast.unparse writes it (a compound statement: its header)


def _header(node: ast.stmt) -> str | None:
    """The statement as ``ast.unparse`` writes it; a compound statement by its header alone; None for a
    docstring, ``pass`` and a bare ``try:`` (nothing a merge can lose on its own)."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return None
    if isinstance(node, ast.Pass | ast.Try | ast.TryStar):
        return None
    return statements.head(node)


def _statements(node: ast.AST) -> Iterator[tuple[str, int, int]]:
    """(text, first, last 1-based line) of every statement of ``node``, itself included, nested ones too; a
    compound statement's lines are those of its header."""
    for child in ast.walk(node):
        if isinstance(child, ast.stmt):
            text = _header(child)
            if text is not None:
                body = getattr(child, "body", None)
                last = body[0].lineno - 1 if isinstance(body, list) and body else child.end_lineno or child.lineno
                yield text, child.lineno, max(child.lineno, last)


_RUN = 12  # characters of code: a new line that is a run this long of its old statement's code is only re-laid out


def _code(line: str) -> str:
    """A line's code without layout: whitespace, commas, brackets and a trailing comment dropped."""
    code = line.split("#", 1)[0] if "#" in line and not any(q in line for q in "'\"") else line
    return "".join(ch for ch in code if not ch.isspace() and ch not in ",()[]{}\\")


def _span(node: ast.AST, lines: list[str]) -> list[str]:
    first, last = getattr(node, "lineno", 1), getattr(node, "end_lineno", None) or getattr(node, "lineno", 1)
    return [line.strip() for line in lines[first - 1 : last]]


_WORD = re.compile(r"\w+|[^\w\s]")


def _words_kept(line: str, old: list[str], out: list[str]) -> bool:
    """Whether a line of ``out`` much like ``line`` holds every word upstream changed in it: the words that
    differ from the old line most like it (all of them when there is none)."""
    words = _WORD.findall(line)
    before = difflib.get_close_matches(line, old, n=1, cutoff=0.6)
    changed = set(words)
    if before:
        sm = difflib.SequenceMatcher(None, _WORD.findall(before[0]), words, autojunk=False)
        changed = {w for tag, _i1, _i2, j1, j2 in sm.get_opcodes() if tag != "equal" for w in words[j1:j2]}
        if not changed:
            return False  # only old words: a piece of the old line re-laid out (its statement's run), or of another
    return any(changed <= set(_WORD.findall(m)) for m in difflib.get_close_matches(line, out, n=5, cutoff=0.5))


def _units(tree: ast.Module) -> dict[str, ast.AST]:
    """The top-level classes and functions of ``tree`` by name, and the methods of its classes by name alone
    (the output renames the class: ``NPUModelRunner.execute_model`` is ``NPUARModelRunner.execute_model``)."""
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found.setdefault(node.name, node)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    found.setdefault("." + member.name, member)
    return found


def _unit(tree: ast.Module, symbol: str) -> ast.AST | None:
    units = _units(tree)
    if "." in symbol:
        klass, method = symbol.split(".", 1)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == klass:
                return next((m for m in node.body if getattr(m, "name", None) == method), None)
        return units.get("." + method)
    return units.get(symbol)


def _views(output: str) -> Iterable[tuple[ast.Module, str]]:
    """The output module with every conflict region taken to each side, those that parse, with their text."""
    for text in markers.sides(output).values():
        try:
            yield symbols.parsed(text), text
        except SyntaxError:
            continue


def lost(old_upstream: str, new_upstream: str, output: str, carried: Iterable[str], *, file: str) -> list[Lost]:
    """The statements the new upstream module adds to each ``carried`` symbol that the output module lacks.

    ``old_upstream`` / ``new_upstream``: the upstream module the output's symbols are copied from, before and
    after the refresh; ``output``: the output module, conflict markers and all."""
    old_tree, new_tree = symbols.parsed(old_upstream), symbols.parsed(new_upstream)
    old_lines, new_lines = old_upstream.splitlines(), new_upstream.splitlines()
    views = [(tree, text.splitlines()) for tree, text in _views(output)]
    found: list[Lost] = []
    for symbol in carried:
        new_unit = _unit(new_tree, symbol)
        if new_unit is None:
            continue  # upstream removed the symbol: a symbol-removed conflict says so
        old_unit = _unit(old_tree, symbol)
        old_statements = list(_statements(old_unit)) if old_unit is not None else []
        had = {text for text, _first, _last in old_statements}
        # each old statement's code without layout, by its text: where a new line may be only re-laid out
        old_code: dict[str, str] = {}
        for text, first, last in old_statements:
            old_code[text] = old_code.get(text, "") + "".join(_code(line) for line in old_lines[first - 1 : last])
        before = _span(old_unit, old_lines) if old_unit is not None else []
        had_code = {c for line in before if (c := _code(line))}
        key = "." + symbol.split(".", 1)[1] if "." in symbol else symbol  # the output's class has its own name
        held: set[str] = set()
        after: list[str] = []
        for tree, lines in views:
            unit = _units(tree).get(key)
            if unit is not None:
                held.update(text for text, _first, _last in _statements(unit))
                after += _span(unit, lines)
        held_code = {c for line in after if (c := _code(line))}
        for text, first, last in _statements(new_unit):
            if text in had or text in held:
                continue
            own = "".join(old_code[t] for t in difflib.get_close_matches(text, list(old_code), n=1, cutoff=0.6))
            wrote = [
                line.strip()
                for line in new_lines[first - 1 : last]
                if (c := _code(line)) and c not in had_code and not (len(c) >= _RUN and c in own)
            ]
            if any(_code(line) not in held_code and not _words_kept(line, before, after) for line in wrote):
                found.append(Lost(file, symbol, first, text))
    return sorted(set(found))
