"""The anchor-aware three-way merge of one file: base (old parent), ours (upstream side), theirs (patch).

Plain diff3 turns every change of one side that overlaps or touches a change of the other into a
conflict.  Replaying an omni patch onto new upstream code, most such regions have an answer that
follows from what the omni change is:

- **Omni blocks are atomic.**  Every ``Omni-new`` fenced block is replaced by one token line
  before diffing, so a block is inserted, moved or kept whole, never split, dropped or doubled.
- **An insertion follows its anchor.**  When one side inserts lines (an omni block, or new
  upstream code) next to lines the other side changed, the insertion is placed by the base line
  above it, or else by the one below it, where that line now is.  With both anchors gone the
  region is a conflict (``anchor-lost``); when both sides insert at the same place, upstream's
  lines go first (``both-inserted``).  A blank line inserted beside code the other side deleted,
  with a blank line beyond that code, is dropped: it would make two blank lines neither side has.
- **Already upstream.**  Upstream now has the very lines the patch inserts, or inserts near the same
  place the same code (layout and comments aside; an omni block's too, which is then reported with
  its fences): they are kept once, upstream's copy.  Where both insert the same call written
  differently (``assert x`` vs ``if x:``), it is a conflict (``both-added-same``), never two copies.
- **Layout-only changes yield.**  A side whose change is only layout (whitespace, line breaks,
  trailing commas, comment wrapping) gives way to the other side's real change; where both made the
  same change in a different layout, upstream's lines are taken.
- **Comment edits yield to code edits.**  The patch only changed comments where upstream changed
  code: upstream's code is taken and the dropped comment edit is listed (``comment-only``).
- **Words merge.**  Both sides edited the same lines in different places of them: a word-level
  three-way merge of the region, accepted only when it is clean.
- **Statements merge by tokens.**  Where the word merge fails (the region holds more than one statement and
  other parts of it changed, or edits touch), a statement both sides changed in different tokens (a call, a
  ``with``/``if`` header, a ``def`` line) is merged token by token, the region's other statements taken from the
  side that changed them (:mod:`patch_queue.merge.tokens`): kept only when the merged statement parses and binds
  no name neither side binds, and no omni block is cut (``merged-tokens``, a flag naming what each side
  changed).  Overlapping token changes stay a conflict.
- **Replaced code keeps its replacement, when nothing upstream wrote is lost.**  Upstream changed only
  lines the omni patch deleted or rewrote beyond recognition: where every line of code upstream wrote
  there is in the merged text anyway (upstream only deleted code, or wrote a comment, or its new line is
  where the patch moved it), the omni text stays and the upstream change is listed
  (``kept-replacement``); else it is a conflict showing upstream's change (``upstream-changed-replaced``).
- Anything else is a conflict with diff3 markers (``both-changed``).  So is one side's change that reads or
  binds a name another region binds or reads on one side only, or that makes a call another region makes
  (``name-linked``, asked for by :mod:`patch_queue.merge.checked`): each side of the module then binds what
  it reads and makes each call once.

Every decision the merge takes on its own is returned as a flag region, and so is every clean
upstream change within a few lines of an omni change (``near-block``), so none is silent.
A recorded resolution for the very same region (see :mod:`patch_queue.series.rerere`) is reused.
"""

from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import itertools
import re
import textwrap
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from patch_queue.merge import anchors, markers, symbols
from patch_queue.merge.conflict import Anchor, Conflict, ConflictKind
from patch_queue.merge.folded import TOKEN, Hunk, apply_hunks, diff_hunks, fold, touching
from patch_queue.merge.tokens import merge as merge_statements

NEAR = 3  # lines: a clean upstream change this close to an omni change is flagged
_WORD = re.compile(r"\w+|\s+|[^\w\s]")
_Expand = Callable[[Sequence[str]], list[str]]  # folded lines -> the lines with their omni blocks unfolded


@dataclass
class MergeResult:
    text: str
    regions: list[Conflict] = field(default_factory=list)
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # group -> its range of folded base lines

    @property
    def clean(self) -> bool:
        return not self.conflicts

    @property
    def conflicts(self) -> list[Conflict]:
        return [r for r in self.regions if r.conflict]


# ---------------------------------------------------------------------------------------------
# groups of hunks (the hunks and the folded lines: patch_queue.merge.folded)


def _groups(hunks: list[Hunk], expand: _Expand | None = None) -> list[list[Hunk]]:
    """Hunks gathered where they overlap, or where an insertion touches another hunk (its anchor), or
    where the two sides insert the same call within :data:`NEAR` lines of each other (see :func:`_twins`)."""
    groups = touching(hunks)
    if expand is None:
        return groups
    joined: list[list[Hunk]] = []
    for group in groups:
        if joined and any(_calls_shared([h], [g], expand) for h in group for g in joined[-1]):
            joined[-1] = joined[-1] + group
        else:
            joined.append(group)
    return joined


# ---------------------------------------------------------------------------------------------
# the rules


def _squash(lines: Sequence[str]) -> str:
    """The text without layout: whitespace, commas, backslashes, comment hashes and brackets dropped.

    Omni block tokens stay in: a side that adds or drops a block never counts as layout-only.
    """
    return re.sub(r"[\s,\\#()\[\]]", "", "".join(lines)).replace("'", '"')


_TRAILING_COMMENT = re.compile(r"\s+#[^\"']*$")


def _code(lines: Sequence[str]) -> str:
    """The squashed text without comments (whole comment lines and plain trailing comments)."""
    kept = [
        _TRAILING_COMMENT.sub("", line.rstrip("\n")) + "\n"
        for line in lines
        if not line.lstrip().startswith("#") or line.startswith(TOKEN)
    ]
    return _squash(kept)


@functools.lru_cache(maxsize=1 << 16)
def _line_code(line: str) -> str:
    """:func:`_code` of one line, kept: a refresh's merges read the same module lines again and again."""
    return _code([line])


def _word_merge(base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]) -> list[str] | None:
    """A three-way merge of the region word by word; None unless it is clean."""
    bw, ow, tw = (_WORD.findall("".join(x)) for x in (base, ours, theirs))

    def ops(other: list[str]) -> list[tuple[int, int, tuple[str, ...]]]:
        sm = difflib.SequenceMatcher(None, bw, other, autojunk=False)
        return [(i1, i2, tuple(other[j1:j2])) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal"]

    mine, pat = ops(ow), ops(tw)
    for s1, e1, w1 in mine:
        for s2, e2, w2 in pat:
            if (s1, e1, w1) != (s2, e2, w2) and s1 <= e2 and s2 <= e1:  # overlapping or touching
                return None
    out: list[str] = []
    pos = 0
    for s, e, w in sorted(set(mine + pat)):  # an edit both sides made is taken once
        out += bw[pos:s]
        out += w
        pos = e
    out += bw[pos:]
    return "".join(out).splitlines(keepends=True)


def _tokens_whole(merged: list[str], sources: list[str]) -> bool:
    """Every omni block token of a word-level merge still stands alone on its own line."""
    tokens = {line for line in sources if line.startswith(TOKEN)}
    starting = sum(1 for line in merged if line.startswith(TOKEN))
    return all(line in tokens for line in merged if TOKEN in line) and "".join(merged).count(TOKEN) == starting


_CONTINUATION = re.compile(r"^(elif\b|else\s*:|except\b|finally\s*:)")


def _continues(lines: Sequence[str], base: list[str], k: int) -> bool:
    """Inserted ``lines`` carry on the statement above them (``elif``/``else``/``except``/``finally``,
    or code deeper than the line that follows), so they belong to the code before position ``k``."""
    first = next((line for line in lines if line.strip()), "")
    if not first:
        return False
    if _CONTINUATION.match(first.lstrip()):
        return True
    following = next((line for line in base[k:] if line.strip()), None)
    return following is not None and anchors.indent_of(first) > anchors.indent_of(following)


def _similar(a: str, b: str) -> bool:
    """The two lines' similarity ratio is at least 0.6; the cheap upper bounds of the ratio rule out most
    pairs first (the same answer, without matching the characters)."""
    sm = difflib.SequenceMatcher(None, a.strip(), b.strip(), autojunk=False)
    return sm.real_quick_ratio() >= 0.6 and sm.quick_ratio() >= 0.6 and sm.ratio() >= 0.6


def _replaced_wholesale(base: list[str], ours: list[Hunk], theirs: list[Hunk], expand: _Expand) -> bool:
    """Upstream changed only base lines the patch deleted (no look-alike of them left in its text).

    The patch's text is looked at with its omni blocks unfolded: a block that wraps an upstream
    line it kept does not replace that line.
    """
    gone = {j for h in theirs for j in range(h.start, h.end)}
    new_text = expand([line for h in theirs for line in h.lines])
    for h in ours:
        if h.insertion:  # must sit inside the deletion, or carry on the deleted line above it
            if not (h.start - 1 in gone and (h.start in gone or _continues(h.lines, base, h.start))):
                return False
            continue
        for j in range(h.start, h.end):
            if j not in gone or (base[j].strip() and any(_similar(base[j], line) for line in new_text)):
                return False
    return True


# ---------------------------------------------------------------------------------------------
# the merge


def merge3(
    base: str,
    ours: str,
    theirs: str,
    *,
    labels: tuple[str, str, str] = ("base", "ours", "theirs"),
    key_prefix: str = "",
    recorded: Callable[[str], str | None] | None = None,
    veto: frozenset[int] = frozenset(),
    grow: Sequence[tuple[int, int]] = (),
) -> MergeResult:
    """Merge ``theirs`` (the patch) into ``ours`` (the new upstream side) against ``base``.

    ``labels`` are (base, ours, theirs) for the diff3 markers.  ``recorded(key)`` returns a
    resolution a maintainer recorded for a conflict region with that key, if any.  The groups
    in ``veto`` get no automatic resolution: they are left as conflicts (the caller found that
    their resolution does not compile).  Each range of folded base lines in ``grow`` is merged as one
    group with every group it meets, and left as a conflict, even when only one side changed those lines
    (``name-linked``: see :mod:`patch_queue.merge.checked`).

    Replaced code keeps its replacement only where nothing upstream wrote is lost: a ``kept-replacement``
    whose upstream side holds a line of code the merged text has nowhere (upstream's new call in code the
    patch replaced) is merged again as an ``upstream-changed-replaced`` conflict showing upstream's change.
    """
    refused: frozenset[int] = frozenset()
    while True:
        result, lossy = _merge(base, ours, theirs, labels, key_prefix, recorded, veto, grow, refused)
        if not lossy - refused:
            return result
        refused |= lossy


def _merge(
    base: str,
    ours: str,
    theirs: str,
    labels: tuple[str, str, str],
    key_prefix: str,
    recorded: Callable[[str], str | None] | None,
    veto: frozenset[int],
    grow: Sequence[tuple[int, int]],
    refused: frozenset[int],
) -> tuple[MergeResult, frozenset[int]]:
    """:func:`merge3` once, with no ``kept-replacement`` for the groups in ``refused``; and the groups whose
    ``kept-replacement`` loses a line of upstream's code (see :func:`_lossy`)."""
    inputs = _prepared(base, ours, theirs)
    blocks, info, b_lines, expand = inputs.blocks, inputs.info, inputs.base, inputs.expand
    theirs_hunks = [h for h in inputs.hunks if h.side == "t"]
    out: list[str] = []
    pending: list[tuple[int, Conflict, list[str]]] = []  # (index in out, region, folded text placed)
    pos = 0

    def joined(lines: Sequence[str]) -> str:
        return "".join(expand(lines))

    tokens: dict[int, str] = {}  # id of an anchor -> the token of its block, to find where the block lands

    def anchor_of(*texts: Sequence[str]) -> Anchor | None:
        token = next((line for line in itertools.chain(*texts) if line in info), None)
        if token is None:
            return None
        block = info[token]
        anchor = Anchor(block.index, block.start, block.first, block.fenced)
        tokens[id(anchor)] = token
        return anchor

    def emit_region(region: Conflict, lines: list[str]) -> None:
        pending.append((len(out), region, lines))
        out.extend(lines)

    spans: dict[int, tuple[int, int]] = {}
    upstream_code: dict[int, list[str]] = {}  # group of a kept-replacement -> upstream's lines there
    for index, start, end, group, widened in _grown(inputs.groups, grow):
        spans[index] = (start, end)
        forced = widened or index in veto
        out += b_lines[pos:start]
        pos = end
        mine = [h for h in group if h.side == "o"]
        pat = [h for h in group if h.side == "t"]
        b = b_lines[start:end]
        o = apply_hunks(b_lines, start, end, mine)
        t = apply_hunks(b_lines, start, end, pat)
        if not pat and not widened:
            near = [h for h in theirs_hunks if h.start - NEAR <= end and start <= h.end + NEAR]
            if near:
                message = "upstream changed lines next to an omni change; merged cleanly"
                anchor = anchor_of([line for h in near for line in h.lines])
                emit_region(
                    Conflict(ConflictKind.NEAR_BLOCK, message, False, joined(b), joined(o), joined(b), anchor=anchor), o
                )
            else:
                out += o
            continue
        if (not mine and not widened) or o == t:
            out += t
            continue
        eb, eo, et = joined(b), joined(o), joined(t)
        anchor = anchor_of(t, o)
        decided = None if forced else inputs.decide(start, end, mine, pat, keep=index not in refused)
        if decided is not None and decided[0] == ConflictKind.KEPT_REPLACEMENT:
            upstream_code[index] = expand([line for h in mine for line in h.lines])
        # never drop or duplicate an omni block, but one whose code upstream now has (reported, fence and all)
        if decided is not None and (decided[0] == ConflictKind.ALREADY_UPSTREAM or _blocks_kept(b, o, t, decided[2])):
            kind, message, lines = decided
            emit_region(Conflict(kind, message, False, eb, eo, et, anchor=anchor, group=index), lines)
            continue
        kind = ConflictKind.BOTH_CHANGED
        # each side inserted arguments into one call, which the patch made a call of another function
        rewritten = (
            bool(mine and pat) and all(h.insertion for h in group) and _call_rewritten(b_lines, start, inputs.changed)
        )
        if not mine or not pat:  # one side's change, grown into a region with the other side's text
            kind = ConflictKind.NAME_LINKED
        elif not forced and _twins(mine, pat, expand)[0]:
            kind = ConflictKind.BOTH_ADDED_SAME
        elif index in refused:  # the omni text would lose what upstream wrote in the code it replaced
            kind = ConflictKind.UPSTREAM_CHANGED_REPLACED
        elif rewritten:
            pass  # both changed the call
        elif all(h.insertion for h in pat) or all(h.insertion for h in mine):
            kind = ConflictKind.ANCHOR_LOST
        elif _replaced_wholesale(b_lines, mine, pat, expand):
            kind = ConflictKind.UPSTREAM_CHANGED_REPLACED
        key = _key(key_prefix, anchor, eb, eo, et)
        reuse = recorded(key) if recorded is not None else None
        if reuse is not None:
            message = f"a recorded resolution of this {kind} conflict was applied"
            region = Conflict(
                ConflictKind.REUSED, message, False, eb, eo, et, key=key, anchor=anchor, reused=True, group=index
            )
            emit_region(region, reuse.splitlines(keepends=True))
            continue
        message = _MESSAGES[kind] + ("; the automatic resolution did not compile" if index in veto else "")
        message += "; widened to whole statements, so that either side parses" if widened and mine and pat else ""
        message += (
            "; both inserted arguments into a call the omni patch made a call of another function: upstream's new "
            "arguments may not fit it"
            if rewritten
            else ""
        )
        emit_region(Conflict(kind, message, True, eb, eo, et, key=key, anchor=anchor, group=index), [_MARK])
    out += b_lines[pos:]
    # unfold the tokens and the conflict placeholders into the final text, filling in each region's line
    text: list[str] = []
    regions: list[Conflict] = []
    placed_at: dict[str, int] = {}  # token -> the 1-based line its block's first fence lands on

    def unfold(lines: Sequence[str]) -> list[str]:
        grown = 0  # lines the blocks before line k add when unfolded
        for k in itertools.compress(range(len(lines)), map(str.startswith, lines, itertools.repeat(TOKEN))):
            block = blocks.get(lines[k])
            if block is not None:
                placed_at.setdefault(lines[k], len(text) + 1 + k + grown)
                grown += len(block) - 1
        return expand(lines)

    i = 0
    for at, region, placed in pending:  # in output order; a region may place no line at all
        text += unfold(out[i:at])
        if region.conflict:
            body = _markers(region, labels)
            token = tokens.get(id(region.anchor), "")
            if token in blocks:  # the block inside the markers: its first copy
                placed_at.setdefault(token, len(text) + 1 + _find_run(body, blocks[token]))
        else:
            body = unfold(placed)
        resolution = region.resolution if region.conflict else "".join(body)
        regions.append(replace(region, line=len(text) + 1, length=len(body), resolution=resolution))
        text += body
        i = at + len(placed)
    text += unfold(out[i:])
    # each region's omni block where it stands in the merged text (the sides' line numbers match no file)
    for k, r in enumerate(regions):
        if r.anchor is not None:
            regions[k] = replace(r, anchor=replace(r.anchor, line=placed_at.get(tokens.get(id(r.anchor), ""))))
    placed_line = {r.group: r.line for r in regions if r.kind == ConflictKind.KEPT_REPLACEMENT and r.line is not None}
    return MergeResult("".join(text), regions, spans), _lossy(upstream_code, text, placed_line)


class _Inputs:
    """What a merge of three texts works out before its regions, the same for every run of it (a checked merge
    runs it again with groups vetoed, grown or refused their ``kept-replacement``): the folded sides, their
    hunks and groups, and each group's automatic resolution (:func:`_decide`), worked out once."""

    def __init__(self, base: str, ours: str, theirs: str) -> None:
        sides = [fold(x) for x in (base, ours, theirs)]
        self.blocks = {**sides[0].blocks, **sides[1].blocks, **sides[2].blocks}
        self.info = {**sides[0].info, **sides[1].info, **sides[2].info}
        self.base = sides[0].lines
        self.hunks = diff_hunks(self.base, sides[1].lines, "o") + diff_hunks(self.base, sides[2].lines, "t")
        self.groups = _groups(self.hunks, self.expand)
        # the base lines each side changed (a deletion or replacement; an insertion changes no base line)
        self.changed = {side: {j for h in self.hunks if h.side == side for j in range(h.start, h.end)} for side in "ot"}
        self._decided: dict[tuple[int, int, tuple[Hunk, ...], tuple[Hunk, ...], bool], _Decided] = {}

    def expand(self, lines: Sequence[str]) -> list[str]:
        """The lines with each omni block token replaced by its block's lines."""
        res: list[str] = []
        pos = 0
        for k in itertools.compress(range(len(lines)), map(str.startswith, lines, itertools.repeat(TOKEN))):
            res += lines[pos:k]
            res += self.blocks.get(lines[k], [lines[k]])
            pos = k + 1
        res += lines[pos:]
        return res

    def decide(self, start: int, end: int, mine: list[Hunk], pat: list[Hunk], *, keep: bool) -> _Decided:
        """:func:`_decide` of the group of base lines [start, end) (read it, never change it)."""
        key = (start, end, tuple(mine), tuple(pat), keep)
        if key not in self._decided:
            self._decided[key] = _decide(self.base, start, end, mine, pat, self.expand, keep=keep, changed=self.changed)
        return self._decided[key]


@functools.lru_cache(maxsize=2)
def _prepared(base: str, ours: str, theirs: str) -> _Inputs:
    """The :class:`_Inputs` of a merge, kept for the runs of the same merge that follow."""
    return _Inputs(base, ours, theirs)


def _lossy(upstream: dict[int, list[str]], merged: Sequence[str], placed: dict[int, int]) -> frozenset[int]:
    """The groups among ``upstream`` (group -> upstream's lines of a kept replacement) with a line of code, layout
    and comments aside, that no line of the function holding the replacement in the ``merged`` text has (``placed``:
    group -> its 1-based line there; the whole text for a group not placed).  The same line in another function
    is not upstream's: a keyword line upstream added to a call the patch rewrote (``kv_cache_groups=...``) is found
    in many other calls of a large module."""
    if not upstream:
        return frozenset()
    lossy: set[int] = set()
    for g, lines in upstream.items():
        first, last = _function_at(merged, placed[g]) if g in placed else (0, len(merged))
        have = {_line_code(line) for line in merged[first:last]}
        if any((c := _line_code(x)) and c not in have for x in lines):
            lossy.add(g)
    return frozenset(lossy)


def _function_at(lines: Sequence[str], line: int) -> tuple[int, int]:
    """The 0-based range of the lines of the innermost ``def`` that holds 1-based ``line`` (from its ``def`` line
    to the first line after it indented no deeper, conflict markers aside); the whole text when none holds it."""
    for start in range(min(line, len(lines)) - 1, -1, -1):
        found = symbols.DEF.match(lines[start])
        if found is None:
            continue
        indent = len(found.group(1))
        end = start + 1
        while end < len(lines):
            text = lines[end]
            stripped = text.lstrip()
            ends = stripped and not stripped.startswith(("#", ")")) and not markers.MARKER.match(text)
            if ends and anchors.indent_of(text) <= indent:
                break
            end += 1
        if end >= line:
            return start, end
    return 0, len(lines)


def _grown(groups: list[list[Hunk]], grow: Sequence[tuple[int, int]]) -> list[tuple[int, int, int, list[Hunk], bool]]:
    """(index, start, end, hunks, grown) of each group; a range of ``grow`` and every group it meets are one
    group: the range, widened over the groups that cross its ends, with the index of its first group.  An
    empty range meets the insertions at its place."""
    out: list[tuple[int, int, int, list[Hunk], bool]] = []
    for index, group in enumerate(groups):
        start, end = min(h.start for h in group), max(h.end for h in group)
        span = next(((s, e) for s, e in grow if (start < e and s < end) or s < start < e or s == e == start), None)
        if span is not None and out and out[-1][4] and min(span[0], start) < out[-1][2]:  # meets the one before
            first, s0, e0, hunks, _ = out[-1]
            out[-1] = (first, s0, max(e0, end, span[1]), hunks + group, True)
        elif span is not None:
            out.append((index, min(span[0], start), max(span[1], end), list(group), True))
        else:
            out.append((index, start, end, group, False))
    return out


def _find_run(lines: Sequence[str], run: Sequence[str]) -> int:
    """0-based index of the first copy of ``run`` in ``lines`` (0 when there is none)."""
    for k in range(len(lines) - len(run) + 1):
        if lines[k : k + len(run)] == list(run):
            return k
    return 0


_MARK = "\u241fpq-conflict\n"
_MESSAGES = {
    ConflictKind.BOTH_CHANGED: "upstream and the omni patch changed the same lines",
    ConflictKind.ANCHOR_LOST: "upstream changed the lines on both sides of an omni insertion; its anchor is gone",
    ConflictKind.UPSTREAM_CHANGED_REPLACED: "upstream changed lines the omni patch replaced; port the change by hand",
    ConflictKind.BOTH_ADDED_SAME: "upstream and the omni patch both inserted the same call here, written "
    "differently; keep one",
    ConflictKind.NAME_LINKED: "only one side changed these lines; they go with another region (a name one side "
    "binds and the other reads, or a call both make)",
}


def _blocks_kept(b: list[str], o: list[str], t: list[str], lines: list[str]) -> bool:
    """Every omni block either side added is in ``lines`` once, and none that a side removed came back.

    A block both sides added counts once: the decision that would double it is refused.
    """
    cb, co, ct, got = (Counter(line for line in seq if line.startswith(TOKEN)) for seq in (b, o, t, lines))
    for token in cb | co | ct | got:
        base = cb[token]
        d_o, d_t = co[token] - base, ct[token] - base
        if d_o * d_t > 0:  # both sides added (or both removed) the block: once, not twice
            want = base + (d_o if abs(d_o) >= abs(d_t) else d_t)
        else:
            want = base + d_o + d_t
        if got[token] != max(0, want):
            return False
    return True


def _key(prefix: str, anchor: Anchor | None, base: str, ours: str, theirs: str) -> str:
    h = hashlib.sha256()
    for part in (prefix, anchor.first if anchor else "", base, ours, theirs):
        h.update(part.encode("utf-8", "surrogateescape") + b"\x00")
    return h.hexdigest()


_Decided = tuple[str, str, list[str]] | None


def _decide(
    base: list[str],
    start: int,
    end: int,
    mine: list[Hunk],
    pat: list[Hunk],
    expand: _Expand,
    *,
    keep: bool = True,
    changed: dict[str, set[int]] | None = None,
) -> _Decided:
    """(kind, message, lines) of an automatic resolution of a group, or None for a conflict; no
    ``kept-replacement`` unless ``keep``.  ``changed``: the base lines each side (``o``, ``t``) changed anywhere."""
    b, o, t = base[start:end], apply_hunks(base, start, end, mine), apply_hunks(base, start, end, pat)
    if all(h.insertion for h in pat) and all(_has_run(o, list(h.lines)) for h in pat):
        return ConflictKind.ALREADY_UPSTREAM, "upstream already has the lines the omni patch inserts here; kept once", o
    same_calls, twins = _twins(mine, pat, expand)
    if same_calls:
        return None  # a both-added-same conflict (see merge3)
    if twins:
        rest = [h for h in pat if h not in twins]
        decided = _decide(base, start, end, mine, rest, expand, keep=keep) if rest else ("", "", o)
        return None if decided is None else (ConflictKind.ALREADY_UPSTREAM, _ALREADY, decided[2])
    for fixed, inserts, upstream_first, moved in (
        (mine, pat, True, "the omni insertion was placed by its anchor line next to an upstream change"),
        (pat, mine, False, "upstream's insertion was placed by its anchor line next to an omni change"),
    ):
        if not all(h.insertion for h in inserts):
            continue
        # an insertion whose code the other side wrote here too (in its own change, not in base lines) is the same
        # change: kept once
        written = [line for h in fixed for line in h.lines]
        dup = [h for h in inserts if _code(list(h.lines)).strip() and _has_run(written, list(h.lines))]
        rest = [h for h in inserts if h not in dup]
        there = o if upstream_first else t
        placed = _place(base, start, end, fixed, rest, upstream_first=upstream_first) if rest else (there, False)
        if placed is not None:
            lines, both = placed
            if dup:
                return ConflictKind.ALREADY_UPSTREAM, _BOTH_INSERTED, lines
            if both and _call_rewritten(base, start, changed):
                return None  # upstream's arguments of a call the patch made another one: they may not fit it
            if both:
                return ConflictKind.BOTH_INSERTED, "both sides inserted lines at one place; upstream's go first", lines
            return ConflictKind.BLOCK_MOVED, moved, lines
    if _squash(t) == _squash(b):
        return (
            ConflictKind.LAYOUT_ONLY,
            "the omni patch only changed the layout of these lines; upstream's change is taken",
            o,
        )
    if _squash(o) == _squash(b):
        return ConflictKind.LAYOUT_ONLY, "upstream only changed the layout of these lines; the omni text is kept", t
    if _squash(o) == _squash(t):
        return (
            ConflictKind.LAYOUT_ONLY,
            "both sides made the same change here, layout aside; upstream's lines are taken",
            o,
        )
    if _code(t) == _code(b) and _code(o) != _code(b):
        return (
            ConflictKind.COMMENT_ONLY,
            "the omni patch only changed comments here; upstream's code change is taken",
            o,
        )
    if _holds_edit(b, o, t):
        return ConflictKind.ALREADY_UPSTREAM, _HOLDS, o
    words = _word_merge(b, o, t)
    if words is not None and _tokens_whole(words, b + o + t):
        return (
            ConflictKind.MERGED_WORDS,
            "both sides changed these lines in different words; merged word by word",
            words,
        )
    by_tokens = merge_statements(b, o, t)
    if by_tokens is not None and _tokens_whole(by_tokens.lines, b + o + t):
        return ConflictKind.MERGED_TOKENS, by_tokens.message(), by_tokens.lines
    if keep and _replaced_wholesale(base, mine, pat, expand):
        return ConflictKind.KEPT_REPLACEMENT, "upstream changed lines the omni patch replaced; the omni text is kept", t
    return None


def _call_rewritten(base: Sequence[str], at: int, changed: dict[str, set[int]] | None) -> bool:
    """Whether base line ``at`` stands inside a call's arguments whose opening line the patch changed and upstream did
    not: both sides' lines inserted there would pass upstream's new arguments of the old call to the patch's call
    (vLLM's new keywords of ``dispatch_cg_and_sync_dp(...)`` given to vllm-omni's own
    ``self._dispatch_batch_descriptor(...)``, which takes none of them)."""
    if changed is None:
        return False
    depth = 0
    for k in range(at - 1, max(-1, at - 40), -1):
        code = "" if base[k].lstrip().startswith("#") else _TRAILING_COMMENT.sub("", base[k])
        depth += code.count("(") - code.count(")")
        if depth > 0:  # the line that opens the bracket the insertion stands in
            return k in changed["t"] and k not in changed["o"]
    return False


_BOTH_INSERTED = "both sides inserted the same lines here; kept once (the other lines each inserted placed by anchor)"
_ALREADY = "upstream now inserts the same code here (layout and comments aside); the omni copy was dropped"
_HOLDS = (
    "upstream's change holds the omni patch's (every line it wrote, every line it removed); upstream's lines are taken"
)


def _holds_edit(b: list[str], o: list[str], t: list[str]) -> bool:
    """Upstream's change of the region holds the patch's, layout and comments aside: the patch wrote code, every
    line of it is a line of upstream's side, and every line it removed upstream removed too (the omni copy
    carried part of this very upstream change already).  Taking upstream's lines then loses nothing of the
    patch; an omni block the patch added is a line upstream never has.  A patch that only removed lines is
    not taken for one: it may have moved them, and upstream's side would bring them back."""
    codes = [{c for line in x if (c := _line_code(line))} for x in (b, o, t)]
    wrote, removed = codes[2] - codes[0], codes[0] - codes[2]
    return bool(wrote) and wrote <= codes[1] and not removed & codes[1]


def _calls_shared(a: list[Hunk], b: list[Hunk], expand: _Expand) -> bool:
    """Whether an upstream insertion and an omni insertion of ``a`` and ``b`` (either way round) lie within
    :data:`NEAR` lines of each other and share a call statement."""
    for h in a:
        for g in b:
            if h.side == g.side or not (h.insertion and g.insertion) or abs(h.start - g.start) > NEAR:
                continue
            if _call_lines(expand(h.lines)) & _call_lines(expand(g.lines)):
                return True
    return False


def _call_lines(lines: Sequence[str]) -> set[str]:
    """The call statements of ``lines`` (their code as ``ast`` writes it, so layout does not count); by
    line, whitespace dropped, when the lines do not parse on their own."""
    text = textwrap.dedent("".join(line for line in lines if not line.startswith(TOKEN)))
    try:
        tree = ast.parse(text)
    except SyntaxError:
        code = (_TRAILING_COMMENT.sub("", line) for line in lines if not line.lstrip().startswith("#"))
        return {re.sub(r"\s+", "", line) for line in code if re.search(r"\w\(", line)}
    return {
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, (ast.Call, ast.Await))
    }


def _twins(mine: list[Hunk], pat: list[Hunk], expand: _Expand) -> tuple[bool, list[Hunk]]:
    """(same calls, twins) of a group.  ``twins``: the omni insertions (an omni block too, its fences
    being comments) whose code, layout and comments aside, is part of the code upstream inserts within
    :data:`NEAR` lines of them; they are kept once, upstream's copy.  ``same calls``: an omni insertion
    shares a call statement with upstream's nearby insertion but differs otherwise (a guard written
    another way): a ``both-added-same`` conflict, never two copies."""
    same: list[Hunk] = []
    for h in pat:
        if not h.insertion:
            continue
        near = [line for g in mine if g.insertion and abs(g.start - h.start) <= NEAR for line in expand(g.lines)]
        theirs = expand(h.lines)
        their_code = _code(theirs)
        if not their_code.strip() or not near:
            continue
        if their_code in _code(near):
            same.append(h)
        elif _call_lines(theirs) & _call_lines(near):
            return True, []
    return False, same


def _has_run(lines: list[str], run: list[str]) -> bool:
    n = len(run)
    return n > 0 and any(lines[i : i + n] == run for i in range(len(lines) - n + 1))


def _place(
    base: list[str], start: int, end: int, fixed: list[Hunk], inserts: list[Hunk], *, upstream_first: bool
) -> tuple[list[str], bool] | None:
    """Apply ``fixed``, then put each pure insertion of ``inserts`` next to its surviving anchor line.

    An insertion before base line k sticks to line k-1 when that line survives, else to line k.
    Returns (lines, both sides inserted at one place) or None when an insertion lost both anchors.
    ``upstream_first`` says whether ``fixed`` is the upstream side.  Where both sides insert at
    one place, upstream's lines go first and the omni lines after them: on the upgrades from
    vllm-omni 0.14.0 to 0.20.0 this agreed with the maintainers more often than the reverse.
    """
    changed = {j for h in fixed for j in range(h.start, h.end)}
    # base lines the fixed side removed without putting anything in their place
    deleted = {j for h in fixed if not h.lines for j in range(h.start, h.end)}
    replace_at = {h.start: h for h in fixed if not h.insertion}
    fixed_ins: defaultdict[int, list[str]] = defaultdict(list)
    for h in fixed:
        if h.insertion:
            fixed_ins[h.start].extend(h.lines)

    def kept(j: int) -> bool:
        return 0 <= j < len(base) and j not in changed

    slot_a: defaultdict[int, list[str]] = defaultdict(list)  # right after base line k-1, before fixed insertions at k
    slot_b: defaultdict[int, list[str]] = defaultdict(list)  # right before base line k, after fixed insertions at k
    both = False
    for h in inserts:
        k = h.start
        if _separates_deleted(base, k, h.lines, deleted, changed):
            continue  # a blank line put between code and code the other side deleted: it separates nothing now
        if k in fixed_ins:
            both = True
            # upstream's new lines stay right under the anchor line; the omni lines follow them
            slot = slot_b if upstream_first else slot_a
        elif kept(k - 1) or k == 0:
            slot = slot_a
        elif (kept(k) or k >= len(base)) and not (k - 1 in deleted and _continues(h.lines, base, k)):
            slot = slot_b
        else:
            return None  # both anchors gone, or the lines carry on code the other side deleted
        slot[k].extend(h.lines)
    out: list[str] = []
    j = start
    while True:
        out += slot_a.get(j, []) + fixed_ins.get(j, []) + slot_b.get(j, [])
        if j >= end:
            break
        if j in replace_at:
            out += replace_at[j].lines
            j = replace_at[j].end
            continue
        out.append(base[j])
        j += 1
    return out, both


def _separates_deleted(base: list[str], k: int, lines: Sequence[str], deleted: set[int], changed: set[int]) -> bool:
    """Whether the insertion of ``lines`` before base line ``k`` is blank lines only, put next to base lines the other
    side deleted (at ``k``, or just above it), with a blank line the other side kept on the far side of that deletion:
    placed by its anchor it would stand beside that blank line (two blank lines where neither side has them, as
    upstream's new blank line above a block the omni patch deleted, before the blank line that followed the block)."""
    if not lines or any(line.strip() for line in lines):
        return False
    below, above = k, k - 1
    if below in deleted:
        while below in deleted:
            below += 1
        return below < len(base) and below not in changed and not base[below].strip()
    if above in deleted:
        while above in deleted:
            above -= 1
        return above >= 0 and above not in changed and not base[above].strip()
    return False


def _markers(region: Conflict, labels: tuple[str, str, str]) -> list[str]:
    def section(marker: str, side: str | None) -> list[str]:
        lines = (side or "").splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        return [marker, *lines]

    return [
        *section(f"<<<<<<< {labels[1]}\n", region.ours),
        *section(f"||||||| {labels[0]}\n", region.base),
        *section("=======\n", region.theirs),
        f">>>>>>> {labels[2]}\n",
    ]
