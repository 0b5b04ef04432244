"""Statements merge by tokens: a region where both sides changed one statement (a call, a ``with``/``if``
header, a ``def`` line) in different tokens, merged statement by statement and, in that statement, token by
token (:func:`merge`).

Each side of the region (folded lines: an omni block is one token line) is cut into items: a logical statement
(its lines joined while a bracket or a triple-quoted string is open, or a line ends with a backslash; a compound
header such as ``if (...):`` is one), a comment line, a blank line, an omni block's token line.  Each side is
aligned with the base by item (:class:`difflib.SequenceMatcher` on the items' text); in a replaced run a base
statement is paired with the side's statement most like it (a similarity ratio of at least 0.6 on their tokens,
whitespace aside), in order.  Then a three-way merge of the items:

- an item only one side changed, deleted or replaced takes that side; lines only one side inserted at a place
  are taken there, before a statement the other side changed at that place, after one it changed above;
- a statement both sides changed (each paired with it) is merged token by token (names, numbers, one
  character of punctuation, whitespace runs with their line breaks): each side's edits are taken where they do
  not overlap; an insertion of one side may touch a deletion of the other (``a or b`` with ``and c`` inserted
  before ``or`` and ``or b`` deleted gives ``a and c``); overlapping edits, edits that touch otherwise, and
  different insertions at one point are a conflict;
- where both sides insert at one place, only blank lines on one side and code on the other, the blank lines go
  first; other different insertions at one place are a conflict, and so is any other overlap of the two sides'
  changes.

The merge is kept only when it holds a statement merged token by token, every such statement parses on its own
(a header with a placeholder body, an ``elif``/``else``/``except``/``finally`` after a placeholder opener) and
binds no name that neither side's statement binds, and no omni block token went into a statement: a block is
only ever taken whole, as one side has it.  The caller flags it ``merged-tokens`` (never a silent decision) with
:func:`Merged.message`, which names what each side changed.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from patch_queue.merge.binding import bound_names
from patch_queue.merge.folded import TOKEN

SIMILAR = 0.6  # a base statement and a side's statement are one statement changed when this alike (tokens)
_TOKENS = re.compile(r"\w+|\s+|[^\w\s]")
_REOPEN = re.compile(r"(elif|else)\b")
_HANDLER = re.compile(r"(except|finally)\b")


@dataclass(frozen=True)
class Item:
    """A statement, a comment line, a blank line or an omni block's token line of a region's side."""

    lines: tuple[str, ...]
    kind: str  # "code" | "comment" | "blank" | "block"

    @property
    def text(self) -> str:
        return "".join(self.lines)


def items(lines: Sequence[str]) -> list[Item]:
    """The items of ``lines`` in order; their lines are ``lines``, each once."""
    out: list[Item] = []
    current: list[str] = []
    depth, string = 0, ""
    for line in lines:
        if not current:
            if line.startswith(TOKEN):
                out.append(Item((line,), "block"))
                continue
            if not line.strip():
                out.append(Item((line,), "blank"))
                continue
            if line.lstrip().startswith("#"):
                out.append(Item((line,), "comment"))
                continue
        current.append(line)
        depth, string, backslash = _scan(line, depth, string)
        if depth == 0 and not string and not backslash:
            out.append(Item(tuple(current), "code"))
            current = []
    if current:  # a statement the region cuts (its brackets close below the region)
        out.append(Item(tuple(current), "code"))
    return out


def _scan(line: str, depth: int, string: str) -> tuple[int, str, bool]:
    """(bracket depth, open triple-quoted string delimiter, ends with a backslash) after ``line``, from those
    before it; a bracket closing more than opened leaves the depth at 0 (a region may begin inside brackets)."""
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if string:
            if c == "\\":
                i += 2
                continue
            if line.startswith(string, i):
                i += len(string)
                string = ""
                continue
            i += 1
            continue
        if c == "#":
            break
        if c in "'\"":
            string = c * 3 if line.startswith(c * 3, i) else c
            i += len(string)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        i += 1
    if len(string) == 1:  # a one-line string left open: the line is not Python; it ends there
        string = ""
    return depth, string, line.rstrip("\r\n").endswith("\\") and not string


# ---------------------------------------------------------------------------------------------
# alignment of a side with the base, by item


@dataclass(frozen=True)
class _Hunk:
    """Base items [start, end) replaced by ``items``; ``pair``: one base statement changed into one statement."""

    start: int
    end: int
    items: tuple[Item, ...]
    pair: bool = False

    @property
    def insertion(self) -> bool:
        return self.start == self.end


def _code_tokens(text: str) -> list[str]:
    return [t for t in _TOKENS.findall(text) if not t.isspace()]


def _ratio(a: Item, b: Item) -> float:
    sm = difflib.SequenceMatcher(None, _code_tokens(a.text), _code_tokens(b.text), autojunk=False)
    if sm.real_quick_ratio() < SIMILAR or sm.quick_ratio() < SIMILAR:
        return 0.0
    return sm.ratio()


def _pairs(base: Sequence[Item], side: Sequence[Item]) -> list[tuple[int, int]]:
    """(base index, side index) of the statements of a replaced run that are one statement changed: each base
    statement in order with the side's statement most like it after the last one paired."""
    out: list[tuple[int, int]] = []
    last = -1
    for i, b in enumerate(base):
        if b.kind != "code" or TOKEN in b.text:
            continue
        best, at = SIMILAR, -1
        for j in range(last + 1, len(side)):
            if side[j].kind == "code" and TOKEN not in side[j].text and (r := _ratio(b, side[j])) >= best:
                if r > best or at < 0:
                    best, at = r, j
        if at >= 0:
            out.append((i, at))
            last = at
    return out


def _hunks(base: list[Item], side: list[Item]) -> list[_Hunk]:
    sm = difflib.SequenceMatcher(None, [x.text for x in base], [x.text for x in side], autojunk=False)
    out: list[_Hunk] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        bi, sj = i1, j1
        for i, j in _pairs(base[i1:i2], side[j1:j2]):
            if bi < i1 + i or sj < j1 + j:
                out.append(_Hunk(bi, i1 + i, tuple(side[sj : j1 + j])))
            out.append(_Hunk(i1 + i, i1 + i + 1, (side[j1 + j],), pair=True))
            bi, sj = i1 + i + 1, j1 + j + 1
        if bi < i2 or sj < j2:
            out.append(_Hunk(bi, i2, tuple(side[sj:j2])))
    return out


# ---------------------------------------------------------------------------------------------
# the merge


@dataclass(frozen=True)
class Statement:
    """A statement both sides changed, merged token by token."""

    base: str
    ours: str
    theirs: str
    merged: str


@dataclass(frozen=True)
class Merged:
    lines: list[str]
    statements: tuple[Statement, ...]

    def message(self) -> str:
        """What each side changed in each statement merged token by token, and what came of it."""
        parts = []
        for s in self.statements:
            parts.append(
                f"both sides changed `{_short(s.base)}` in different tokens (upstream: {_edits(s.base, s.ours)}; "
                f"the omni patch: {_edits(s.base, s.theirs)}), merged token by token into `{_short(s.merged)}`"
            )
        return "; ".join(parts) + "; the other lines as the side that changed them has them"


def merge(base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]) -> Merged | None:
    """The region's three sides (folded lines) merged by statement and token (see the module), or None."""
    bi, oi, ti = items(base), items(ours), items(theirs)
    mine, pat = _hunks(bi, oi), _hunks(bi, ti)
    merged: dict[int, Statement] = {}  # base item -> the statement both changed, merged
    first: dict[int, str] = {}  # gap -> the side whose insertion goes first there, where both insert
    dropped: set[_Hunk] = set()  # a hunk of the patch's that is the very hunk of upstream's (taken once)
    for h in mine:
        for g in pat:
            if h == g or (h.items == g.items and h.start == g.start and h.end == g.end):
                dropped.add(g)
            elif h.insertion and g.insertion and h.start == g.start:
                blank_h, blank_g = _blank(h.items), _blank(g.items)
                if blank_h == blank_g:
                    return None  # different code (or different blank lines) inserted at one place
                first[h.start] = "o" if blank_h else "t"
            elif h.start < g.end and g.start < h.end:
                if not (h.pair and g.pair):
                    return None
                b, o, t = bi[h.start].text, h.items[0].text, g.items[0].text
                text = _merge_tokens(b, o, t)
                if text is None or not _sound(text, o, t):
                    return None
                merged[h.start] = Statement(b, o, t, text)
    if not merged:
        return None
    starts: dict[int, list[_Hunk]] = {}
    ins: dict[int, dict[str, _Hunk]] = {}
    for side, hunks in (("o", mine), ("t", pat)):
        for h in hunks:
            if h in dropped and side == "t":
                continue
            if h.insertion:
                ins.setdefault(h.start, {})[side] = h
            elif not (h.pair and h.start in merged):
                starts.setdefault(h.start, []).append(h)
    out: list[str] = []
    k = 0
    while True:
        here = ins.get(k, {})
        order = ("t", "o") if first.get(k) == "t" else ("o", "t")
        for side in order:
            if side in here:
                out += [line for item in here[side].items for line in item.lines]
        if k >= len(bi):
            break
        if k in merged:
            out += merged[k].merged.splitlines(keepends=True)
            k += 1
        elif k in starts:
            h = starts[k][0]  # one side's: hunks of both sides here overlap, refused above unless the same
            out += [line for item in h.items for line in item.lines]
            k = h.end
        else:
            out += bi[k].lines
            k += 1
    return Merged(out, tuple(merged[k] for k in sorted(merged)))


def _blank(inserted: Sequence[Item]) -> bool:
    return all(item.kind == "blank" for item in inserted)


def _ops(base: list[str], other: list[str]) -> list[tuple[int, int, tuple[str, ...]]]:
    sm = difflib.SequenceMatcher(None, base, other, autojunk=False)
    return [(i1, i2, tuple(other[j1:j2])) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal"]


def _merge_tokens(base: str, ours: str, theirs: str) -> str | None:
    """A three-way merge of one statement's tokens, or None where the two sides' edits overlap, touch (but an
    insertion beside a deletion), or insert different tokens at one point."""
    bt, ot, tt = (_TOKENS.findall(x) for x in (base, ours, theirs))
    mine, pat = _ops(bt, ot), _ops(bt, tt)
    for s1, e1, w1 in mine:
        for s2, e2, w2 in pat:
            if (s1, e1, w1) == (s2, e2, w2):
                continue
            if s1 < e2 and s2 < e1:
                return None  # overlapping
            if s1 == e1 == s2 == e2:
                return None  # different insertions at one point
            if e1 == s2 or e2 == s1:  # touching: only an insertion beside a deletion
                if not ((s1 == e1 and not w2 and s2 < e2) or (s2 == e2 and not w1 and s1 < e1)):
                    return None
    out: list[str] = []
    pos = 0
    for s, e, w in sorted(set(mine + pat)):  # an edit both sides made is taken once
        out += bt[pos:s]
        out += w
        pos = max(pos, e)
    out += bt[pos:]
    text = "".join(out)
    return text if text.endswith("\n") or not base.endswith("\n") else None


def _sound(merged: str, ours: str, theirs: str) -> bool:
    """The merged statement holds no omni block token, parses, and binds no name neither side's statement binds."""
    if TOKEN in merged:
        return False
    code = _parsable(merged)
    if code is None or not _compiles(code):
        return False
    sides = [c for c in (_parsable(ours), _parsable(theirs)) if c is not None]
    bound = set().union(*(bound_names(c) for c in sides)) if sides else set()
    return bound_names(code) <= bound


def _parsable(statement: str) -> str | None:
    """The statement as a text that parses alone: unindented, a header given a placeholder body, a clause
    (``elif``, ``else``, ``except``, ``finally``) a placeholder opener; None when it does not parse so."""
    code = statement.lstrip(" \t")
    prefix = ""
    if _REOPEN.match(code):
        prefix = "if _:\n    pass\n"
    elif _HANDLER.match(code):
        prefix = "try:\n    pass\n"
    body = code if code.endswith("\n") else code + "\n"
    for text in (prefix + body, prefix + body + "    pass\n"):
        try:
            ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        return text
    return None


def _compiles(code: str) -> bool:
    """Whether ``code`` (a statement :func:`_parsable` gave) compiles in the body of a loop of a function: what
    only the compiler refuses (a starred expression alone, ``return * 2``) is refused too."""
    opener = "async def _pq_():\n" if re.search(r"\bawait\b", code) else "def _pq_():\n"
    body = "".join("        " + line if line.strip() else line for line in code.splitlines(keepends=True))
    try:
        compile(opener + "    while _:\n" + body, "<merged>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _short(text: str, cut: int = 80) -> str:
    one = re.sub(r"\s+", " ", text).strip()
    one = re.sub(r"([(\[{]) ", r"\1", one)
    one = re.sub(r" ([)\]}])", r"\1", one)
    return one if len(one) <= cut else one[: cut - 1] + "…"


def _edits(base: str, side: str) -> str:
    """A side's token edits of a statement, in words (``a`` → ``b``, added ``c``, dropped ``d``)."""
    bt, st = _TOKENS.findall(base), _TOKENS.findall(side)
    words = []
    layout = False
    for s, e, w in _ops(bt, st):
        old, new = _short("".join(bt[s:e]), 40), _short("".join(w), 40)
        if not old and not new:
            layout = True
        elif not old:
            words.append(f"added `{new}`")
        elif not new:
            words.append(f"dropped `{old}`")
        else:
            words.append(f"`{old}` → `{new}`")
    if layout:
        words.append("the layout")
    return ", ".join(words) or "nothing"
