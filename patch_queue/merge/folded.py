"""The atoms :mod:`patch_queue.merge.three_way` diffs: a text's lines with every ``Omni-new`` fenced block
folded into one token line, and the hunks of libgit2's patience diff of two folded texts.

Shared by the whole-file merge and the windowed replay (:mod:`patch_queue.merge.window`), so both fold
and diff the same way.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

from patch_queue.git import diff
from patch_queue.merge import anchors

TOKEN = "\u241fpq-omni-block:"  # no NUL: libgit2 would call the text binary


def token(body: list[str]) -> str:
    """The token line a fenced block of these lines folds into (the same block text, the same token)."""
    return TOKEN + hashlib.sha1("".join(body).encode()).hexdigest()[:16] + "\n"


@dataclass
class Side:
    lines: list[str]  # with omni blocks folded into one token line each
    blocks: dict[str, list[str]]  # token line -> the block's lines
    info: dict[str, anchors.Block]


@functools.lru_cache(maxsize=8)
def fold(text: str) -> Side:
    """The text with its omni blocks folded (cached: a replay folds each patch's text twice; read-only)."""
    lines = text.splitlines(keepends=True)
    blocks: dict[str, list[str]] = {}
    info: dict[str, anchors.Block] = {}
    out: list[str] = []
    pos = 0
    for b in anchors.parse_blocks(text)[0]:
        if not b.fenced or b.start - 1 < pos:
            continue
        body = lines[b.start - 1 : b.end]
        line = token(body)
        out += lines[pos : b.start - 1]
        out.append(line)
        blocks[line] = body
        info[line] = b
        pos = b.end
    out += lines[pos:]
    return Side(out, blocks, info)


@dataclass(frozen=True)
class Hunk:
    start: int  # base range [start, end) replaced by lines
    end: int
    lines: tuple[str, ...]
    side: str  # "o" | "t"

    @property
    def insertion(self) -> bool:
        return self.start == self.end


_last: list[tuple[list[str], list[str], str, list[Hunk]]] = []  # the last diff, its inputs held (ids stay theirs)


def diff_hunks(base: list[str], other: list[str], side: str) -> list[Hunk]:
    """The hunks of libgit2's patience diff of two folded texts.  The last one is kept by the identity of its
    inputs (:func:`fold`'s cached, read-only lists): the windowed replay diffs P and N the way merge3 then does."""
    if _last and _last[0][0] is base and _last[0][1] is other and _last[0][2] == side:
        return list(_last[0][3])
    a, b = ("".join(x).encode("utf-8", "surrogateescape") for x in (base, other))
    hunks = [
        Hunk(start, start + count, tuple(other[new_start : new_start + new_count]), side)
        for start, count, new_start, new_count in diff.line_hunks(a, b, patience=True)
    ]
    _last[:] = [(base, other, side, hunks)]
    return list(hunks)


def touching(hunks: list[Hunk]) -> list[list[Hunk]]:
    groups: list[list[Hunk]] = []
    end = -1
    for h in sorted(hunks, key=lambda h: (h.start, h.end, h.side)):
        touches = h.start == end and (h.insertion or any(x.insertion and x.start == end for x in groups[-1]))
        if h.start < end or touches:  # never true for the first hunk: end is -1
            groups[-1].append(h)
            end = max(end, h.end)
        else:
            groups.append([h])
            end = h.end
    return groups


def apply_hunks(base: list[str], start: int, end: int, hunks: list[Hunk]) -> list[str]:
    out: list[str] = []
    pos = start
    for h in sorted(hunks, key=lambda h: (h.start, h.end)):
        out += base[pos : h.start]
        out += h.lines
        pos = max(pos, h.end)
    out += base[pos:end]
    return out
