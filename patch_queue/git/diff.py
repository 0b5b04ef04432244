"""Line diffs of two texts by libgit2 (git's xdiff), so pq's merges and line maps agree with git.

A text algorithm, not a repository: the one part of ``git/`` the pure core (``merge/``) uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import pygit2

Hunk = tuple[int, int, int, int]  # (old start, old count, new start, new count), 0-based


def line_hunks(old: bytes, new: bytes, *, patience: bool = False) -> list[Hunk]:
    """The changed line ranges of ``old`` -> ``new``, with no context; an insertion has old count 0
    and starts at the line it precedes.  ``patience``: git's patience algorithm.  Both are diffed as text
    even with a NUL byte (libgit2 would call them binary and give no hunk)."""
    if old == new:
        return []
    options = pygit2.enums.DiffOption
    flag = (options.PATIENCE if patience else options.NORMAL) | options.FORCE_TEXT
    out = []
    for h in pygit2.Patch.create_from(old, new, context_lines=0, interhunk_lines=0, flag=flag).hunks:
        old_start = h.old_start - 1 if h.old_lines else h.old_start  # git numbers an insertion after its line
        new_start = h.new_start - 1 if h.new_lines else h.new_start
        out.append((old_start, h.old_lines, new_start, h.new_lines))
    return out


def move_line(line: int, hunks: Sequence[Hunk]) -> int:
    """1-based ``line`` of a text after the edit ``hunks`` (old start, old lines, new start, new lines, 0-based)."""
    at = line
    for old_start, old_lines, new_start, new_lines in hunks:
        if line >= old_start + 1 + old_lines:
            at += new_lines - old_lines
        elif line >= old_start + 1:  # the edit rewrote the line itself: point at what replaced it
            return new_start + 1
    return at
