"""The diff3 regions of a text with conflict markers, and their resolutions (``pq resolve``, ``pq mergetool``).

A region is ``<<<<<<< upstream`` (the new upstream's lines), ``||||||| base`` (the old
upstream's), ``=======`` (the patch's), ``>>>>>>> patch``; a region without its ``|||||||``
section has no base lines.  Pure functions of the text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

SIDES = ("upstream", "patch", "both")
MARKER = re.compile(r"^(<{7}|\|{7}|={7}|>{7})(?: |$)", re.M)  # a line of diff3 markers


@dataclass(frozen=True)
class Region:
    """One diff3 region: lines ``first``..``last`` (1-based, markers included) and its three sides."""

    first: int
    last: int
    upstream: tuple[str, ...]
    base: tuple[str, ...]
    patch: tuple[str, ...]

    def side(self, side: str) -> list[str]:
        """The lines that resolve the region: ``upstream``, ``patch``, ``base``, or ``both`` (upstream's
        then the patch's, as git's union merge writes them)."""
        if side == "both":
            return [*self.upstream, *self.patch]
        lines: tuple[str, ...] = getattr(self, side)
        return list(lines)


def regions(text: str) -> list[Region]:
    """The complete diff3 regions of ``text``, in order (an unclosed region is not one)."""
    out: list[Region] = []
    lines = text.splitlines(keepends=True)
    at: int | None = None
    parts: dict[str, list[str]] = {}
    part = ""
    for i, line in enumerate(lines):
        if line.startswith("<<<<<<<") and at is None:
            at, part, parts = i, "upstream", {"upstream": [], "base": [], "patch": []}
        elif at is None:
            continue
        elif line.startswith("|||||||") and part == "upstream":
            part = "base"
        elif line.startswith("=======") and part in ("upstream", "base"):
            part = "patch"
        elif line.startswith(">>>>>>>") and part == "patch":
            out.append(Region(at + 1, i + 1, *(tuple(parts[k]) for k in ("upstream", "base", "patch"))))
            at = None
        else:
            parts[part].append(line)
    return out


def region_at(text: str, line: int) -> Region | None:
    """The region that holds 1-based ``line`` (its markers included), or None."""
    return next((r for r in regions(text) if r.first <= line <= r.last), None)


def resolve(text: str, region: Region, lines: list[str]) -> str:
    """``text`` with ``region`` replaced by ``lines``."""
    all_lines = text.splitlines(keepends=True)
    return "".join(all_lines[: region.first - 1] + lines + all_lines[region.last :])


def whole_side(text: str, side: str) -> str:
    """``text`` with every region resolved to its ``side`` (``upstream``, ``base`` or ``patch``): the
    three files a merge tool compares."""
    for region in reversed(regions(text)):
        text = resolve(text, region, region.side(side))
    return text


def inside(text: str) -> set[int]:
    """The 1-based lines of ``text`` that its complete regions hold, markers included."""
    return {k for r in regions(text) for k in range(r.first, r.last + 1)}


_MARKERS = ("<<<<<<< ", "||||||| ", "=======", ">>>>>>> ")


@functools.lru_cache(maxsize=16)
def one_side(text: str, side: str = "ours", *, blank: bool = False) -> tuple[str, list[int]]:
    """``text`` with every diff3 conflict region reduced to one ``side`` ("ours" or "theirs"), and the line map.

    The map gives, for each line of the result, its 1-based line in ``text``.  With ``blank``, the
    lines of the other sides and the markers become empty lines, so line numbers stay as they were.
    Kept for the last few texts (read the map, never change it): a merge's checks read each side of a merged
    text several times.
    """
    lines = text.splitlines(keepends=True)
    if "<<<<<<< " not in text:  # no region: every line as it is
        return text, list(range(1, len(lines) + 1))
    out: list[str] = []
    where: list[int] = []
    mode = ""
    done = 0  # the lines before this one are in ``out`` (when kept)

    def plain(stop: int) -> None:  # lines[done:stop] hold no marker: all kept, or all blanked, in ``mode``
        if mode in ("", side) or blank:
            out.extend(lines[done:stop] if mode in ("", side) else ["\n"] * (stop - done))
            where.extend(range(done + 1, stop + 1))

    for number in [k for k, line in enumerate(lines) if line.startswith(_MARKERS)]:
        plain(number)
        line, done = lines[number], number + 1
        if line.startswith("<<<<<<< "):
            mode = "ours"
        elif line.startswith("||||||| ") and mode == "ours":
            mode = "base"
        elif line.startswith("=======") and mode in ("ours", "base"):
            mode = "theirs"
        elif line.startswith(">>>>>>> ") and mode == "theirs":
            mode = ""
        else:  # a marker-like line out of place: a line of the current side
            done = number
            continue
        if blank:
            out.append("\n")
            where.append(number + 1)
    plain(len(lines))
    return "".join(out), where


def sides(text: str) -> dict[str, str]:
    """``text`` read with every region taken to each side ("ours": upstream, "theirs": the patch); one entry
    ("ours") without regions."""
    if not MARKER.search(text):
        return {"ours": text}
    return {side: one_side(text, side)[0] for side in ("ours", "theirs")}
