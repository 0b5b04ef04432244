"""What upstream changed in a conflict region, in one line, and a resolution when a rule is sure of it.

Pure functions of a conflict's three sides (old upstream, new upstream, the omni patch):

- :func:`upstream_change`: the upstream edit named by its shape (a phrase without a subject):
  identifiers renamed
  (``renamed `a` → `b```), arguments or parameters added or dropped, a block of lines moved,
  lines inserted or deleted, else the first line rewritten;
- :func:`suggest`: a resolution when one rule is certain, shown to the maintainer and never applied:
  upstream only renamed identifiers (the patch side with the same renames), or one side's edit is
  layout only (the other side).  None otherwise, and for a ``name-linked`` region (its side is the side
  taken in the regions that go with it).
"""

from __future__ import annotations

import difflib
import functools
import keyword
import re
from collections.abc import Sequence
from dataclasses import dataclass

from patch_queue.merge.conflict import Conflict

_WORD = re.compile(r"[A-Za-z_]\w*|\S")
_NAME = re.compile(r"[A-Za-z_]\w*")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_LAYOUT = re.compile(r"\s+|,(?=\s*[)\]}])")  # whitespace and trailing commas: what a formatter changes
_CUT = 60


@dataclass(frozen=True)
class Suggestion:
    """A resolution: which side (``upstream``, ``patch``, or ``merged``: a text of both) and the text, and why
    it is safe."""

    side: str
    text: str
    reason: str


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _CUT else text[: _CUT - 1] + "…"


def _code_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _layout(text: str) -> str:
    return _LAYOUT.sub("", "\n".join(_code_lines(text)))


_Opcode = tuple[str, int, int, int, int]


@functools.lru_cache(maxsize=64)
def _word_diff(base: str, ours: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[_Opcode, ...]]:
    """The words of the code lines of ``base`` and ``ours`` and the opcodes from the one to the other.

    The lines are diffed first and the words only within the lines that changed: a word diff of a whole
    region costs the product of its lengths (5x the time on the real conflicts, the same explanations).
    Kept for a while: a conflict's explanation and its suggestion diff the same pair, on the terminal and
    again in each report.
    """
    old, new = _code_lines(base), _code_lines(ours)
    a: list[str] = []
    b: list[str] = []
    opcodes: list[_Opcode] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        wa, wb = _WORD.findall(" ".join(old[i1:i2])), _WORD.findall(" ".join(new[j1:j2]))
        steps: Sequence[_Opcode] = [("equal", 0, len(wa), 0, len(wb))]
        if tag != "equal":
            steps = difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes()
        for t, k1, k2, m1, m2 in steps:
            at = (t, len(a) + k1, len(a) + k2, len(b) + m1, len(b) + m2)
            if opcodes and opcodes[-1][0] == t:
                last = opcodes.pop()
                at = (t, last[1], at[2], last[3], at[4])
            opcodes.append(at)
        a += wa
        b += wb
    return tuple(a), tuple(b), tuple(opcodes)


def renames(base: str, ours: str) -> list[tuple[str, str]] | None:
    """The identifier renames that turn ``base`` into ``ours`` (layout aside), None when it is more than that."""
    a, b, opcodes = _word_diff(base, ours)
    found: dict[str, str] = {}
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        olds, news = [t for t in a[i1:i2] if t != ","], [t for t in b[j1:j2] if t != ","]
        if tag != "replace":
            return None
        if len(olds) != len(news):  # a dotted name for another: `self.model.f` -> `self._g`
            olds, news = ["".join(olds)], ["".join(news)]
        for old, new in zip(olds, news, strict=True):
            if old == new:
                continue
            if not (_DOTTED.fullmatch(old) and _DOTTED.fullmatch(new)) or found.get(old, new) != new:
                return None
            found[old] = new
    return sorted(found.items()) or None


def _arguments(base: str, ours: str) -> str | None:
    """``new argument `x=`…`` when upstream only added (or dropped) keyword arguments or parameters."""
    a, b, opcodes = _word_diff(base, ours)
    added: list[str] = []
    dropped: list[str] = []
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        if tag not in ("insert", "delete"):
            return None
        words = b[j1:j2] if tag == "insert" else a[i1:i2]
        names = [
            w
            for k, (w, nxt) in enumerate(zip(words, words[1:], strict=False))
            if _NAME.fullmatch(w) and nxt in ("=", ":") and (k == 0 or words[k - 1] in ("(", ","))
        ]
        if not names or any(keyword.iskeyword(w) for w in words):
            return None
        (added if tag == "insert" else dropped).extend(names)
    what = "parameter" if re.search(r"\bdef\b", base) else "argument"
    parts = []
    for verb, names in (("new", added), ("dropped", dropped)):
        if names:
            parts.append(f"{verb} {what}{'s' if len(names) > 1 else ''} " + ", ".join(f"`{n}`" for n in names))
    return "; ".join(parts) or None


def _wrapped(base: str, ours: str) -> tuple[int, int, int] | None:
    """(first, last, extra indent) when ``ours`` holds every line of ``base``, in a row, indented deeper
    by one amount, inside lines of its own (a ``try:``, an ``if``, a ``with``): upstream wrapped the code."""
    old = [line for line in base.splitlines() if line.strip()]
    new = ours.splitlines()
    if not old or len(new) <= len(old):
        return None
    stripped = [line.strip() for line in new]
    want = [line.strip() for line in old]
    for first in range(len(new) - len(old) + 1):
        if stripped[first : first + len(want)] == want and [
            _indent(new[first + k]) - _indent(line) for k, line in enumerate(old)
        ] == [_indent(new[first]) - _indent(old[0])] * len(old):
            extra = _indent(new[first]) - _indent(old[0])
            if extra > 0:
                return first, first + len(old) - 1, extra
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _shape(base: str, ours: str) -> str | None:
    """The wrapper upstream put around the old lines, in a few words."""
    found = _wrapped(base, ours)
    if found is None:
        return None
    first, last, _extra = found
    lines = ours.splitlines()
    head = next((line.strip() for line in lines[:first] if line.strip()), "")
    tail = next((line.strip() for line in lines[last + 1 :] if line.strip()), "")
    parts = [f"`{_short(head)}`"] if head else []
    parts += [f"`{_short(tail)}`"] if tail else []
    return f"wrapped the {last - first + 1 - _blank(lines[first : last + 1])} line(s) in " + " … ".join(parts)


def _blank(lines: list[str]) -> int:
    return sum(1 for line in lines if not line.strip())


def upstream_change(conflict: Conflict) -> str:
    """What upstream did to the region, in one line."""
    base, ours = conflict.base or "", conflict.ours or ""
    if conflict.base is None or conflict.ours is None:
        return "deleted the file" if conflict.ours is None else "no old text here (a new file)"
    if base == ours:
        return "did not change these lines"
    if _layout(base) == _layout(ours):
        return "changed only the layout or comments"
    found = renames(base, ours)
    if found:
        told = "renamed " + ", ".join(f"`{a}` → `{b}`" for a, b in found)
        theirs = renames(base, conflict.theirs or "")
        if theirs:
            told += "; the patch renamed " + ", ".join(f"`{a}` → `{b}`" for a, b in theirs)
        return told
    wrapped = _shape(base, ours)
    if wrapped:
        return wrapped
    args = _arguments(base, ours)
    if args:
        return args
    old, new = _code_lines(base), _code_lines(ours)
    if not old:
        return f"inserted {len(new)} line(s): `{_short(new[0])}`" if new else "inserted blank lines"
    if not new:
        return f"deleted {len(old)} line(s): `{_short(old[0])}`"
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    gone = [
        line for tag, i1, i2, _j1, _j2 in matcher.get_opcodes() if tag in ("delete", "replace") for line in old[i1:i2]
    ]
    came = [
        line for tag, _i1, _i2, j1, j2 in matcher.get_opcodes() if tag in ("insert", "replace") for line in new[j1:j2]
    ]
    if gone and sorted(gone) == sorted(came):
        return f"moved {len(gone)} line(s): `{_short(gone[0])}`"
    if not gone:
        return f"inserted {len(came)} line(s): `{_short(came[0])}`"
    if not came:
        return f"deleted {len(gone)} line(s): `{_short(gone[0])}`"
    return f"rewrote `{_short(gone[0])}` as `{_short(came[0])}` ({len(gone)} → {len(came)} lines)"


def omni_block(conflict: Conflict) -> str:
    """The omni block the region belongs to, for humans."""
    a = conflict.anchor
    if a is None:
        old = set(_code_lines(conflict.base or ""))
        edit = next((line for line in _code_lines(conflict.theirs or "") if line not in old), "")
        return "no omni block: an unfenced omni edit" + (f" (`{_short(edit)}`)" if edit else "")
    at = f" at line {a.line}" if a.line is not None else ""
    return f"omni block {a.index}{at}" + (f": `{_short(a.first)}`" if a.first else "")


def suggest(conflict: Conflict) -> Suggestion | None:
    """A resolution a rule is certain of, or None."""
    if conflict.base is None or conflict.ours is None or conflict.theirs is None or conflict.kind == "name-linked":
        return None  # (a name-linked region is resolved with the regions that go with it)
    base, ours, theirs = conflict.base, conflict.ours, conflict.theirs
    if _layout(base) == _layout(ours):
        return Suggestion("patch", theirs, "upstream changed only the layout here")
    if _layout(base) == _layout(theirs):
        return Suggestion("upstream", ours, "the patch changed only the layout here")
    if _layout(ours) == _layout(theirs):
        return Suggestion("upstream", ours, "both sides wrote the same code (layout aside)")
    wrapped = _wrapped(base, ours)
    if wrapped is not None:
        first, last, extra = wrapped
        lines = ours.splitlines(keepends=True)
        inner = [(" " * extra + line) if line.strip() else line for line in theirs.splitlines(keepends=True)]
        text = "".join(lines[:first] + inner + lines[last + 1 :])
        return Suggestion(
            "merged", text, "upstream only wrapped the old lines: the patch side, indented into the wrapper"
        )
    pairs = renames(base, ours)
    if pairs and all(_word(old).search(theirs) and not _word(new).search(theirs) for old, new in pairs):
        names = ", ".join(f"`{a}` → `{b}`" for a, b in pairs)
        return Suggestion("merged", _renamed(theirs, pairs), f"upstream only renamed {names}: the patch side, renamed")
    return None


def _word(name: str) -> re.Pattern[str]:
    """``name`` (dotted or not) as a whole word of code."""
    return re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")


def _renamed(text: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        text = _word(old).sub(new, text)
    return text
