"""The ``Omni-new`` fences of the vllm-omni runners, paired into omni blocks.

Every variant the published runners use is a fence: a comment line of dashes around the word
(``# ----- Omni-new -----``, ``#  ---- Omni-new ----``, ``# -----Omni-new-----``).  Open and close
lines are usually the same fence line; a block may also be closed by a plain dashed comment
line (``# ------------------``).  A code line ending in a ``# Omni-new...`` comment is a one-line
block.  Fences pair in order: the first one opens, the next closes.

Problems are reported, never guessed around: a fence that is not closed before the end of the
file (or before code that sits shallower than the fence), a close whose indentation differs from
its open, and a block whose body leaves the fence's indentation (it would cross the end of the
method or branch it starts in).
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass

FENCE = re.compile(r"^[ \t]*#[ \t]*-{3,}[ \t]*Omni-new[ \t]*-{3,}[ \t]*$")
PLAIN = re.compile(r"^[ \t]*#[ \t]*-{20,}[ \t]*$")
INLINE = re.compile(r"\S.*#[ \t]*Omni-new\b")


@dataclass(frozen=True)
class Block:
    """One omni block: lines ``start``..``end`` (1-based, inclusive, fences included)."""

    index: int  # 0-based, in file order
    start: int
    end: int
    indent: int
    fenced: bool  # False for a one-line ``# Omni-new`` tagged line
    first: str  # the first meaningful line inside (stripped), for humans

    def as_json(self) -> dict[str, object]:
        return {"index": self.index, "line": self.start, "text": self.first}


@dataclass(frozen=True)
class FenceProblem:
    line: int
    message: str


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _first_meaningful(lines: list[str]) -> str:
    for line in lines:
        s = line.strip()
        if s and not FENCE.match(line) and not PLAIN.match(line):
            return s
    return ""


def parse_blocks(text: str) -> tuple[list[Block], list[FenceProblem]]:
    """The omni blocks of ``text`` and the fence problems found, both in file order."""
    lines = text.splitlines()
    blocks: list[tuple[int, int, int, bool]] = []
    problems: list[FenceProblem] = []
    open_at: int | None = None  # 0-based line of the open fence
    open_indent = 0

    def close(i: int) -> None:
        """Line ``i`` closes the open block (reported when at another indentation)."""
        nonlocal open_at
        assert open_at is not None
        indent = indent_of(lines[i])
        if indent != open_indent:
            problems.append(
                FenceProblem(
                    i + 1,
                    f"closes the Omni-new block opened on line {open_at + 1} "
                    f"at another indentation ({indent} vs {open_indent})",
                )
            )
        blocks.append((open_at, i, open_indent, True))
        open_at = None

    # outside an open block only lines that carry the word can matter: skip straight to them
    marked = list(itertools.compress(range(len(lines)), map(str.__contains__, lines, itertools.repeat("Omni-new"))))
    i = -1
    while True:
        i += 1
        if open_at is None:
            nxt = bisect.bisect_left(marked, i)
            if nxt == len(marked):
                break
            i = marked[nxt]
        if i >= len(lines):
            break
        line = lines[i]
        if FENCE.match(line):
            if open_at is None:
                open_at, open_indent = i, indent_of(line)
            else:
                close(i)
            continue
        if open_at is not None:
            if PLAIN.match(line):
                close(i)
                continue
            stripped = line.strip()
            if stripped and indent_of(line) < open_indent and not stripped.startswith("#"):
                problems.append(
                    FenceProblem(
                        open_at + 1, f"Omni-new block is not closed before line {i + 1}, which leaves its indentation"
                    )
                )
                open_at = None
            continue
        if INLINE.search(line) and not line.lstrip().startswith("#"):
            blocks.append((i, i, indent_of(line), False))
    if open_at is not None:
        problems.append(FenceProblem(open_at + 1, "Omni-new block is never closed"))
    out = [
        Block(n, s + 1, e + 1, ind, fenced, _first_meaningful(lines[s : e + 1]))
        for n, (s, e, ind, fenced) in enumerate(sorted(blocks))
    ]
    return out, problems


def fence_lines(text: str) -> list[str]:
    """Every line that carries an ``Omni-new`` mark, as written (for the no-block-lost checks)."""
    return [line for line in text.splitlines() if "Omni-new" in line]
