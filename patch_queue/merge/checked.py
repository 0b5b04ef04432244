"""A merge whose automatic resolutions must compile: :func:`merge3_checked` for Python modules, and
the helpers that read one side of a conflicted text."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable

from patch_queue.merge.conflict import Conflict
from patch_queue.merge.three_way import MergeResult, merge3


def one_side(text: str, side: str = "ours", *, blank: bool = False) -> tuple[str, list[int]]:
    """``text`` with every diff3 conflict region reduced to one ``side`` ("ours" or "theirs"), and the line map.

    The map gives, for each line of the result, its 1-based line in ``text``.  With ``blank``, the
    lines of the other sides and the markers become empty lines, so line numbers stay as they were.
    """
    out: list[str] = []
    where: list[int] = []
    mode = ""
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        keep = False
        if line.startswith("<<<<<<< "):
            mode = "ours"
        elif line.startswith("||||||| ") and mode == "ours":
            mode = "base"
        elif line.startswith("=======") and mode in ("ours", "base"):
            mode = "theirs"
        elif line.startswith(">>>>>>> ") and mode == "theirs":
            mode = ""
        else:
            keep = mode in ("", side)
        if keep or blank:
            out.append(line if keep else "\n")
            where.append(number)
    return "".join(out), where


def syntax_error_line(text: str) -> int | None:
    """The 1-based line of the first syntax error of ``text`` (Python), or None when it compiles."""
    try:
        ast.parse(text)
    except SyntaxError as exc:
        return exc.lineno or 1
    return None


@functools.lru_cache(maxsize=16)
def _ours_side_error(text: str) -> int | None:
    """:func:`syntax_error_line` of the upstream side of ``text`` (cached: a replay checks each text twice)."""
    return syntax_error_line(one_side(text)[0])


def merge3_checked(
    base: str,
    ours: str,
    theirs: str,
    *,
    labels: tuple[str, str, str] = ("base", "ours", "theirs"),
    key_prefix: str = "",
    recorded: Callable[[str], str | None] | None = None,
) -> MergeResult:
    """:func:`merge3` for Python modules: an automatic resolution that breaks the syntax becomes a conflict.

    Only when all three sides compile (conflict regions already in ``ours`` read as their upstream
    side): then the merged text, read the same way, must compile too.  The resolution nearest
    before the first syntax error is vetoed and the merge redone, until it compiles.
    """

    def run(veto: frozenset[int] = frozenset()) -> MergeResult:
        return merge3(base, ours, theirs, labels=labels, key_prefix=key_prefix, recorded=recorded, veto=veto)

    def automatic(r: Conflict) -> bool:  # near-block flags are in no group
        return not r.conflict and r.group >= 0

    result = run()
    if not any(automatic(r) for r in result.regions):
        return result  # no automatic resolution that a veto could take back: nothing to check
    veto: set[int] = set()
    for attempt in range(12):
        probe, where = one_side(result.text)
        error = syntax_error_line(probe)
        if error is None:
            return result
        # the sides are checked only now: most merges compile, and each parse of a module costs
        if attempt == 0 and any(_ours_side_error(x) is not None for x in (base, ours, theirs)):
            return result
        line = where[min(error, len(where)) - 1]
        decided = [r for r in result.regions if automatic(r) and r.group not in veto and (r.line or 0) <= line + 1]
        if not decided:
            return result
        veto.add(max(decided, key=lambda r: r.line or 0).group)
        result = run(frozenset(veto))
    return result
