"""The windowed replay of one module: a patch merged where its lines changed, not over the whole file.

Replaying a series, patch *i* of a module is merged with base P (its old parent), ours N (the
replayed stack so far) and theirs C (its old result).  :func:`patch_queue.merge.three_way.merge3`
folds and diffs the three whole texts for that.  A patch whose lines stand far from every upstream
change needs none of it: the answer is N with the patch's lines spliced in.  :class:`Window` keeps
what showing that takes from one patch to the next (the lines of P and N, their fenced omni blocks,
the counts of their folded lines, and the hunks of merge3's diff P -> N, the upstream delta) and
updates it by splicing, so a patch costs in proportion to its change, not to the file.

It answers only when merge3 would give the very same text and no region; else None, and the
caller runs merge3.  The argument, on the folded lines (``merge.folded``) that merge3 diffs with
libgit2's patience algorithm:

- The patch changes P's lines ``[x0, x1)`` into C's lines Y (common prefix and suffix; widened to
  whole omni blocks).  P and C parse with no fence problem, so a block is folded the same in the
  whole file and in the window.
- ``lo`` above the window and ``hi`` below it are lines unique in P, N, C and R (the result): no
  other line pairs across them, so patience takes both as anchors, no hunk of diff(P, C) leaves
  ``(lo, hi)`` and no hunk slides over them (a slide needs a second copy of the line).
- No hunk of diff(P, N) lies within ``NEAR`` lines of ``[lo, hi]``, and no line moved by one
  (unique in P and N but changed) crosses ``lo`` or ``hi``: every group of merge3 holds one side
  only and none is near the other side, so merge3 applies both sides as they are, with no flag.
- No name the patch stops using is one upstream's changed lines use, and no name it starts using is one
  they stopped using: else the merge may leave a read unbound, which only
  :func:`patch_queue.merge.checked.merge3_checked` answers (:mod:`patch_queue.merge.binding`).
- For the next patch (base C, ours R) the same diff holds, shifted after the window: no line
  outside the window changes from unique to repeated or back, so patience sees the same anchors
  outside, and inside ``[lo, hi]`` both texts are equal.

Texts with bytes that libgit2 or ``str.splitlines`` read differently (NUL and other control
characters, CR, the Unicode line separators) are left to merge3.
"""

from __future__ import annotations

import bisect
import itertools
import keyword
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from patch_queue.merge import anchors, binding, symbols
from patch_queue.merge.folded import TOKEN, Hunk, diff_hunks, fold, token
from patch_queue.merge.three_way import NEAR

SCAN = 64  # folded lines searched above and below a window for an anchor line
_UNSAFE = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2\x85|\xe2\x80[\xa8\xa9]")
_IMPORT = re.compile(r"^(?:from|import) ")
_NOT_LOCAL = frozenset(keyword.kwlist) | {"self", "cls"}


@dataclass
class _Text:
    """P or N: the lines, the fenced omni blocks (0-based first and last lines) and the folded line counts."""

    data: bytes
    lines: list[str]
    starts: list[int]
    ends: list[int]
    tokens: list[str]
    counts: Counter[str]
    shrink: list[int] = field(default_factory=list)  # lines folded away by the blocks before block j
    folded_starts: list[int] = field(default_factory=list)  # each block's line in the folded text

    def __post_init__(self) -> None:
        self.reindex()

    def reindex(self) -> None:
        self.shrink = [0, *itertools.accumulate(map(operator.sub, self.ends, self.starts))]
        self.folded_starts = list(map(operator.sub, self.starts, self.shrink))

    def folded_index(self, k: int) -> int:
        """The folded line of unfolded line ``k`` (not inside a block)."""
        return k - self.shrink[bisect.bisect_left(self.ends, k)]

    def unfolded_index(self, f: int) -> int:
        """The unfolded line of folded line ``f`` (a block's token: its first line)."""
        return f + self.shrink[bisect.bisect_left(self.folded_starts, f)]

    def inside(self, k: int) -> bool:
        """Whether the boundary before line ``k`` falls inside a block."""
        j = bisect.bisect_left(self.starts, k) - 1
        return j >= 0 and self.ends[j] >= k

    def folded_line(self, k: int, step: int) -> tuple[str, int]:
        """The folded line at unfolded line ``k`` and the next unfolded line in direction ``step``."""
        j = bisect.bisect_left(self.ends, k) if step < 0 else bisect.bisect_left(self.starts, k)
        if step < 0 and j < len(self.ends) and self.ends[j] == k:
            return self.tokens[j], self.starts[j] - 1
        if step > 0 and j < len(self.starts) and self.starts[j] == k:
            return self.tokens[j], self.ends[j] + 1
        return self.lines[k], k + step

    def occurrence(self, line: str, x0: int, x1: int) -> int | None:
        """The unfolded line where the folded line ``line`` stands outside lines ``[x0, x1)`` (the first), or None."""
        if line.startswith(TOKEN):
            return next(
                (s for s, t in zip(self.starts, self.tokens, strict=True) if t == line and not x0 <= s < x1), None
            )
        k = -1
        while True:
            try:
                k = self.lines.index(line, k + 1)
            except ValueError:
                return None
            j = bisect.bisect_right(self.starts, k) - 1
            if x0 <= k < x1:
                k = x1 - 1
            elif j >= 0 and self.ends[j] >= k:  # a line inside a block is no folded line
                k = self.ends[j]
            else:
                return k

    def splice(
        self, k0: int, k1: int, lines: list[str], blocks: list[tuple[int, int, str]], delta: Counter[str]
    ) -> None:
        """Lines ``[k0, k1)`` replaced by ``lines`` holding ``blocks`` (relative lines); ``delta``: folded counts."""
        self.lines[k0:k1] = lines
        j0, j1 = bisect.bisect_left(self.starts, k0), bisect.bisect_left(self.starts, k1)
        moved = len(lines) - (k1 - k0)
        self.starts[j0:] = [k0 + s for s, _e, _t in blocks] + [s + moved for s in self.starts[j1:]]
        self.ends[j0:] = [k0 + e for _s, e, _t in blocks] + [e + moved for e in self.ends[j1:]]
        self.tokens[j0:j1] = [t for _s, _e, t in blocks]
        self.counts.update(delta)
        self.reindex()


def _text(data: bytes) -> _Text | None:
    if _UNSAFE.search(data):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    blocks, problems = anchors.parse_blocks(text)
    if problems:
        return None
    lines = text.splitlines(keepends=True)
    fenced = [b for b in blocks if b.fenced]
    tokens = [token(lines[b.start - 1 : b.end]) for b in fenced]
    starts, ends = [b.start - 1 for b in fenced], [b.end - 1 for b in fenced]
    return _Text(data, lines, starts, ends, tokens, Counter(fold(text).lines))


def _blocks(lines: list[str]) -> list[tuple[int, int, str]] | None:
    """The fenced blocks of a window's lines (relative first and last lines, token); None on a fence problem."""
    blocks, problems = anchors.parse_blocks("".join(lines))
    if problems:
        return None
    return [(b.start - 1, b.end - 1, token(lines[b.start - 1 : b.end])) for b in blocks if b.fenced]


def _folded(lines: list[str], blocks: list[tuple[int, int, str]]) -> list[str]:
    out: list[str] = []
    pos = 0
    for s, e, t in blocks:
        out += lines[pos:s]
        out.append(t)
        pos = e + 1
    out += lines[pos:]
    return out


def _scan(
    P: _Text, k: int, f: int, step: int, anchor: Callable[[str], bool], sliding: set[str]
) -> tuple[int | None, int]:
    """From the window's edge (unfolded line ``k``, folded line ``f``) in direction ``step``: the folded line of the
    nearest anchor (None when none is within :data:`SCAN` lines), and how far the patch's hunks may reach.

    libgit2 matches everything between the anchor and the window, then may slide a hunk over the lines next
    to it that equal a line of the hunk (``xdl_change_compact``): those lines, of the patch's, are its reach.
    """
    k, f = (k - 1, f - 1) if step < 0 else (k, f)
    reach = None
    for _ in range(SCAN):
        if not 0 <= k < len(P.lines):
            break
        line, k = P.folded_line(k, step)
        if reach is None and line not in sliding:
            reach = f + 1 if step < 0 else f  # hunks start at or after it (above), end at or before it (below)
        if reach is not None and anchor(line):
            return f, reach
        f += step
    return None, f


def _window(p: bytes, c: bytes) -> tuple[int, int] | None:
    """Where ``c`` differs from ``p``: the byte range ``[start, end)`` of whole lines of ``p`` that ``c`` replaces
    by its ``c[start : len(c) - (len(p) - end)]``, also whole lines; None when they are equal."""
    limit = min(len(p), len(c))
    lo, hi = 0, limit
    while lo < hi:  # the longest common prefix, by halving
        mid = (lo + hi + 1) // 2
        if p[lo:mid] == c[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    prefix = lo
    lo, hi = 0, limit - prefix
    while lo < hi:  # the longest common suffix that does not overlap it
        mid = (lo + hi + 1) // 2
        if p[len(p) - mid : len(p) - lo] == c[len(c) - mid : len(c) - lo]:
            lo = mid
        else:
            hi = mid - 1
    if prefix == len(p) == len(c):
        return None
    start = p.rfind(b"\n", 0, prefix) + 1
    end = len(p) - lo

    def boundary(data: bytes, at: int) -> bool:
        return at in (0, len(data)) or data[at - 1] == 10

    if not (boundary(p, end) and boundary(c, len(c) - lo)):
        found = p.find(b"\n", end)
        end = len(p) if found < 0 else found + 1
    return start, end


@dataclass
class _Hunks:
    """merge3's hunks of diff(P, N) as (start, end) in folded P and (start, end) in folded N, in order, and the
    lines unique in P and N that a hunk moved, as (folded P line, folded N line)."""

    spans: list[tuple[int, int, int, int]]
    moved: list[tuple[int, int]]
    added: list[frozenset[str]] = field(default_factory=list)  # per hunk, the names of its new lines (blocks unfolded)
    removed: list[frozenset[str]] = field(default_factory=list)  # and those of the lines it replaced

    @classmethod
    def of(
        cls, base: list[str], ours: list[str], p: Counter[str], n: Counter[str], blocks: dict[str, list[str]]
    ) -> _Hunks:
        hunks: list[Hunk] = diff_hunks(base, ours, "o")
        spans = []
        shift = 0
        for h in hunks:
            spans.append((h.start, h.end, h.start + shift, h.start + shift + len(h.lines)))
            shift += len(h.lines) - (h.end - h.start)
        inserted = {line: n0 + i for _s, _e, n0, n1 in spans for i, line in enumerate(ours[n0:n1])}
        moved = [
            (j, inserted[base[j]])
            for s, e, _n0, _n1 in spans
            for j in range(s, e)
            if p[base[j]] == 1 and n[base[j]] == 1 and base[j] in inserted
        ]
        added = [_names(line for x in ours[n0:n1] for line in blocks.get(x, [x])) for _s, _e, n0, n1 in spans]
        removed = [_names(line for x in base[s:e] for line in blocks.get(x, [x])) for s, e, _n0, _n1 in spans]
        return cls(spans, moved, added, removed)


def _function_around(lines: list[str], x0: int, x1: int) -> tuple[int, int]:
    """The lines [start, end) of the function that holds the lines [x0, x1), found by indentation; the whole
    text at module level."""
    if x0 >= len(lines):
        return 0, len(lines)
    body = [len(x) - len(x.lstrip()) for x in lines[x0:x1] if x.strip()] or [len(lines[x0]) - len(lines[x0].lstrip())]
    inner = min(body)
    start = next(
        (
            k
            for k in range(x0 - 1, -1, -1)
            if symbols.DEF.match(lines[k]) and len(lines[k]) - len(lines[k].lstrip()) < inner
        ),
        None,
    )
    if start is None:
        return 0, len(lines)
    indent = len(lines[start]) - len(lines[start].lstrip())
    for k in range(max(x1, start + 1), len(lines)):
        text = lines[k].strip()
        if text and not text.startswith("#") and len(lines[k]) - len(lines[k].lstrip()) <= indent:
            return start, k
    return start, len(lines)


def _names(lines: Iterable[str]) -> frozenset[str]:
    """The names ``lines`` hold that a function may bind: no attribute, keyword, ``self``; comments too."""
    return frozenset(word for line in lines for word in binding.NAME.findall(line)) - _NOT_LOCAL


class Window:
    """The state of one module across a replay; :meth:`merge` answers a patch or returns None."""

    def __init__(self) -> None:
        self._p: _Text | None = None
        self._n: _Text | None = None
        self._hunks = _Hunks([], [])

    def _reset(self, p: bytes, n: bytes) -> bool:
        self._p = _text(p)
        self._n = None if self._p is None else _text(n)
        if self._p is None or self._n is None:
            self._p = self._n = None
            return False
        base, ours = fold(p.decode("utf-8")), fold(n.decode("utf-8"))
        blocks = {**base.blocks, **ours.blocks}
        self._hunks = _Hunks.of(base.lines, ours.lines, self._p.counts, self._n.counts, blocks)
        return True

    def _flip_harmless(self, P: _Text, N: _Text, line: str, window: tuple[int, int], changing: set[str]) -> bool:
        """Whether the copy of ``line`` outside the window may turn into a patience anchor of diff(P, N), or stop
        being one, and leave the diff as it is: when no line moved (so every anchor is an unchanged line and all
        are taken) and it stands between two anchors that stay (or a file end) with no upstream change between."""
        if self._hunks.moved:
            return False
        k = P.occurrence(line, *window)
        if k is None:
            return False
        bounds = []
        for step in (-1, 1):
            at, f, bound = P.folded_line(k, 1)[1] if step > 0 else k - 1, P.folded_index(k) + step, None
            for _ in range(SCAN):
                if not 0 <= at < len(P.lines):
                    bound = f
                    break
                probe, at = P.folded_line(at, step)
                if P.counts[probe] == 1 and N.counts[probe] == 1 and probe not in changing:
                    bound = f
                    break
                f += step
            if bound is None:
                return False
            bounds.append(bound)
        up, down = bounds
        spans = self._hunks.spans
        last = bisect.bisect_right(spans, (down, len(P.lines) + 1, 0, 0))  # the hunks starting at or before down
        return not last or spans[last - 1][1] < up

    def merge(self, p: bytes, n: bytes, c: bytes, *, same_imports: bool = False) -> bytes | None:
        """merge3's text of theirs ``c`` into ours ``n`` against base ``p``, when it is N with the patch spliced
        in and no region; None when that cannot be shown.  ``same_imports``: also None when the patch changes
        an import line."""
        if self._p is None or self._n is None or self._p.data != p or self._n.data != n:
            if not self._reset(p, n):
                return None
        P, N = self._p, self._n
        assert P is not None and N is not None
        window = _window(p, c)
        if window is None:
            return None
        start_b, end_b = window
        x0 = p.count(b"\n", 0, start_b)
        x1 = x0 + p.count(b"\n", start_b, end_b) + (end_b == len(p) > start_b and not p.endswith(b"\n"))
        # widen to whole omni blocks of P
        if P.inside(x0):
            w = P.starts[bisect.bisect_left(P.starts, x0) - 1]
            start_b -= len("".join(P.lines[w:x0]).encode())
            x0 = w
        if P.inside(x1):
            w = P.ends[bisect.bisect_left(P.starts, x1) - 1] + 1
            end_b += len("".join(P.lines[x1:w]).encode())
            x1 = w
        X = P.lines[x0:x1]
        c_end = len(c) - (len(p) - end_b)
        if p[start_b:end_b] != "".join(X).encode():
            return None
        y_bytes = c[start_b:c_end]
        if _UNSAFE.search(y_bytes):
            return None
        Y = y_bytes.decode("utf-8").splitlines(keepends=True)
        if same_imports and [x for x in X if _IMPORT.match(x)] != [y for y in Y if _IMPORT.match(y)]:
            return None
        # a name the patch stops using that upstream's changes use, or the reverse: the merge may leave a read
        # unbound (merge.binding), which merge3_checked answers
        x_names, y_names = _names(X), _names(Y)
        if x_names != y_names:
            f0, f1 = (P.folded_index(k) for k in _function_around(P.lines, x0, x1))
            for k, (s, e, _n0, _n1) in enumerate(self._hunks.spans):
                if s <= f1 and f0 <= e:
                    if (x_names - y_names) & self._hunks.added[k] or (y_names - x_names) & self._hunks.removed[k]:
                        return None
        y_blocks = _blocks(Y)
        if y_blocks is None:
            return None
        jx0, jx1 = bisect.bisect_left(P.starts, x0), bisect.bisect_left(P.starts, x1)
        x_blocks = [
            (s - x0, e - x0, t) for s, e, t in zip(P.starts[jx0:jx1], P.ends[jx0:jx1], P.tokens[jx0:jx1], strict=True)
        ]
        x_folded, y_folded = _folded(X, x_blocks), _folded(Y, y_blocks)
        cx, cy = Counter(x_folded), Counter(y_folded)

        def anchor(line: str) -> bool:
            return P.counts[line] == 1 and N.counts[line] == 1 and cy[line] == 0

        fx0 = P.folded_index(x0)
        fx1 = fx0 + len(x_folded)
        sliding = set(x_folded) | set(y_folded)
        lo, t0 = _scan(P, x0, fx0, -1, anchor, sliding)
        hi, t1 = _scan(P, x1, fx1, 1, anchor, sliding)
        if lo is None or hi is None:
            return None
        # no upstream hunk in [lo, hi] (for the next patch), nor within NEAR lines of the patch's (for this one)
        spans = self._hunks.spans
        after = bisect.bisect_right(spans, (max(hi, t1 + NEAR), len(P.lines) + 1, 0, 0))
        if after and spans[after - 1][1] > min(lo, t0 - NEAR - 1):
            return None
        shift = spans[after - 1][3] - spans[after - 1][1] if after else 0
        for u in (lo, hi):
            if any((i < u) != (j < u + shift) for i, j in self._hunks.moved):
                return None
        changing = cx.keys() | cy.keys()
        for line in changing:
            outside_p, outside_n = P.counts[line] - cx[line], N.counts[line] - cx[line]
            if outside_p == 1 and outside_n == 1 and (cx[line] == 0) != (cy[line] == 0):
                # the one copy elsewhere turns into a patience anchor, or stops being one
                if not self._flip_harmless(P, N, line, (x0, x1), changing):
                    return None
        n0 = N.unfolded_index(fx0 + shift)
        n1 = n0 + len(X)
        if N.lines[n0:n1] != X or N.inside(n0) or N.inside(n1):
            return None
        # certain: splice the patch into P (it becomes C) and N (it becomes the result), shift the hunks
        delta = Counter(cy)
        delta.subtract(cx)
        P.splice(x0, x1, Y, y_blocks, delta)
        N.splice(n0, n1, Y, y_blocks, delta)
        moved = len(y_folded) - len(x_folded)
        self._hunks = _Hunks(
            spans[:after] + [(s + moved, e + moved, ns + moved, ne + moved) for s, e, ns, ne in spans[after:]],
            [(i + moved if i >= fx1 else i, j + moved if j >= fx1 + shift else j) for i, j in self._hunks.moved],
            self._hunks.added,
            self._hunks.removed,
        )
        P.data = c
        N.data = "".join(N.lines).encode("utf-8")
        return N.data
