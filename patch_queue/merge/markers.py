"""The diff3 regions of a text with conflict markers, and their resolutions (``pq resolve``, ``pq mergetool``).

A region is ``<<<<<<< upstream`` (the new upstream's lines), ``||||||| base`` (the old
upstream's), ``=======`` (the patch's), ``>>>>>>> patch``; a region without its ``|||||||``
section has no base lines.  Pure functions of the text.
"""

from __future__ import annotations

from dataclasses import dataclass

SIDES = ("upstream", "patch", "both")


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
