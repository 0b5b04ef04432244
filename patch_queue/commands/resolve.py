"""pq status, pq resolve and pq mergetool: where a pending refresh or merge stands, and the resolution of its
conflict regions on disk (going on and putting back: :mod:`patch_queue.commands.pending`)."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from patch_queue.commands.write import module_files, out_edits
from patch_queue.errors import EXIT_CONFLICT, EXIT_ERROR, EXIT_OK, PqError, QueueError
from patch_queue.fsutil import atomic_write
from patch_queue.git.diff import line_hunks, move_line
from patch_queue.merge import explain, markers, moved
from patch_queue.merge.conflict import Conflict, ConflictKind
from patch_queue.outputs import folder as output
from patch_queue.project import operation
from patch_queue.project.operation import OperationKind
from patch_queue.project.workspace import Workspace, applied_count, check_no_journal, load_stack
from patch_queue.series import stack
from patch_queue.series.queue import Queue
from patch_queue.series.status import PatchStatus
from patch_queue.sources import cache

if TYPE_CHECKING:
    from patch_queue.sources.snapshot import Snapshot


@dataclass(frozen=True)
class Status:
    in_progress: bool
    upstream: str
    target: str | None
    patches: list[tuple[str, PatchStatus]]  # (name, state)
    conflicts: list[Conflict]
    edits: list[output.Edited] = field(default_factory=list)  # in the output folder, held by no patch
    steps: int = 0  # of the lineage
    resolved: list[Conflict] = field(default_factory=list)  # conflicts whose markers the maintainer removed
    flags: list[Conflict] = field(default_factory=list)  # of the refresh in progress, at their lines on disk
    downstream: str = ""  # the pinned downstream release ("vllm-omni 0.24.0"), "" when adopted from a folder
    suggestions: dict[tuple[str, int], explain.Suggestion] = field(default_factory=dict)  # (file, line) of a conflict
    # the errors of `pq check` that keep the refresh pending, at their lines on disk: (file, line, rule, message)
    check_errors: list[tuple[str, int, str, str]] = field(default_factory=list)
    accepted: tuple[int, int] = (0, 0)  # (lineage step, errors) of the last step finished over errors of pq check
    accepted_kind: str = "refresh"  # that step's kind: "refresh" or "merge"
    operation: OperationKind = OperationKind.REFRESH  # what is in progress: a refresh onto ``target``, a merge of it
    # what is said under a conflict (file, line on disk) whose deleted lines upstream moved into a helper
    moved: dict[tuple[str, int], str] = field(default_factory=dict)
    warning: str = ""  # why the output folder cannot be used (said, not refused: status reports)

    @property
    def exit_code(self) -> int:
        """1 while errors of `pq check` alone keep the operation pending, 3 while conflicts do, else 0."""
        if self.in_progress and self.check_errors and not self.conflicts:
            return EXIT_ERROR
        return EXIT_CONFLICT if self.in_progress and self.conflicts else EXIT_OK

    def as_json(self) -> dict[str, object]:
        """`pq status --json`."""
        return {
            "upstream": self.upstream,
            "downstream": self.downstream,
            "warning": self.warning or None,
            "in_progress": str(self.operation) if self.in_progress else None,
            "target": self.target if self.in_progress else None,
            "patches": [{"name": name, "state": str(state)} for name, state in self.patches],
            "conflicts": [c.as_json(report=True) for c in self.conflicts],
            "resolved": len(self.resolved),
            "check_errors": [
                {"file": file, "line": line, "rule": rule, "message": message}
                for file, line, rule, message in self.check_errors
            ],
            "unrecorded": [{"file": e.file, "added": e.added, "removed": e.removed} for e in self.edits],
            "accepted_errors": {"step": self.accepted[0], "errors": self.accepted[1], "kind": self.accepted_kind}
            if self.accepted[1]
            else None,
        }


def do_status(ws: Workspace, *, upstream_git: str | None) -> Status:
    status = _status(ws, upstream_git=upstream_git)
    unusable = output.unusable(ws)
    return replace(status, warning="" if unusable is None else str(unusable))


def _status(ws: Workspace, *, upstream_git: str | None) -> Status:
    check_no_journal(ws)  # a killed command's half-done writes: say how to finish or undo them
    state = operation.load(ws)
    if state is not None:
        done = {d[0]: d[2] for d in state.done}
        rows = [(n, done.get(n, PatchStatus.PENDING)) for n, _c in state.patches]
        if state.merging is not None:  # the series as it stood, and the merge that goes into it once through
            rows = [(n, PatchStatus.APPLIED) for n, _c in state.merging.chain]
        conflicts = on_disk(ws, state.done[-1][1], list(state.conflicts))
        flags = on_disk(ws, state.done[-1][1], list(state.flags))
        open_ = [c for c in conflicts if _marked(ws, c)]
        resolved = [c for c in conflicts if not _marked(ws, c)]
        target = state.target()
        tips = suggestions(ws, state, conflicts)
        written = module_files(ws, state.done[-1][1])
        lines = on_disk_lines(ws, written, [(file, line) for file, line, _r, _m in state.check_errors])
        errors = [(f, n, r, m) for (f, _l, r, m), n in zip(state.check_errors, lines, strict=True)]
        onto = state.merging.release if state.merging is not None else target.upstream.label
        return Status(True, state.old_base_label, onto, rows, open_, resolved=resolved, flags=flags,
                      downstream=_downstream(target), suggestions=tips, check_errors=errors,
                      operation=state.kind, moved=moved_notes(ws, open_))  # fmt: skip
    loaded = load_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    rows = [
        (n, PatchStatus.APPLIED if i < applied else PatchStatus.UNAPPLIED) for i, (n, _c) in enumerate(loaded.patches)
    ]
    steps = loaded.queue.lineage
    last = max((i for i, s in enumerate(steps, 1) if s.kind in ("refresh", "merge")), default=0)
    accepted = (last, len(steps[last - 1].accepted_errors)) if last and steps[last - 1].accepted_errors else (0, 0)
    kind = steps[last - 1].kind if last else "refresh"
    return Status(False, loaded.queue.upstream.label, None, rows, [], out_edits(ws), len(steps),
                  downstream=_downstream(loaded.queue), accepted=accepted, accepted_kind=kind)  # fmt: skip


def suggestions(
    ws: Workspace, state: operation.Operation, conflicts: list[Conflict] | None = None
) -> dict[tuple[str, int], explain.Suggestion]:
    """The suggestion of each open conflict region of the pending ``state`` (``conflicts``: its conflicts at their
    lines on disk, when known), by (file, line) on disk: what `pq status` shows, and the refresh and `pq continue`
    print under each region; a resolution made in another copy carried over, from the regions resolved on disk or
    recorded in refs/pq/resolutions (:func:`suggestion`)."""
    if conflicts is None:
        conflicts = on_disk(ws, state.done[-1][1], list(state.conflicts))
    taken = _taken(ws, state)
    recorded = recorded_regions(ws)  # read once: every region's suggestion may carry one of them
    recorded += merged_regions(ws, state)
    return {
        (now.file, now.line or 0): tip
        for was, now in zip(state.conflicts, conflicts, strict=True)
        if _marked(ws, now)
        and (tip := suggestion(ws, was, now, taken, state.conflicts, conflicts, recorded)) is not None
    }


def merged_regions(ws: Workspace, state: operation.Operation) -> list[tuple[Conflict, str, str]]:
    """The regions the pending refresh resolved itself where both sides changed code (its ``merged-tokens``,
    ``merged-words`` and code-placing ``block-moved`` flags), each with the text now in its place (the maintainer
    may have rewritten it) and where it is (``FILE:LINE``): a copy's region of the same upstream change is
    resolved the same way (:func:`suggestion`), as if a maintainer had resolved it there."""
    from patch_queue.outputs.report_parts import to_read

    merges = (ConflictKind.MERGED_TOKENS, ConflictKind.BLOCK_MOVED, ConflictKind.MERGED_WORDS)
    flags = [f for f in state.flags if f.kind in merges and to_read(f) and f.resolution is not None and f.line]
    written = module_files(ws, state.done[-1][1]) if flags else {}
    out = []
    for f in flags:
        path, text, first = ws.out / f.file, f.resolution or "", f.line or 0
        if f.file in written and path.is_file():
            now = path.read_bytes()
            hunks = line_hunks(written[f.file], now)
            first = move_line(f.line or 0, hunks)
            after = move_line((f.line or 0) + len(text.splitlines()), hunks)
            text = "".join(now.decode("utf-8", "replace").splitlines(keepends=True)[first - 1 : after - 1])
        out.append((f, text, f"{ws.rel(path)}:{first}"))
    return out


def _downstream(queue: Queue) -> str:
    return f"{queue.downstream_name} {queue.downstream_release}" if queue.downstream_release else ""


def on_disk(ws: Workspace, top: str, findings: list[Conflict]) -> list[Conflict]:
    """``findings`` (lines of the stack commit ``top``, as pq wrote the output folder) at their lines in the
    output folder now, after the maintainer's edits."""
    from patch_queue.series import replay

    written = module_files(ws, top)
    hunks = {}
    for path in sorted({f.file for f in findings}):
        have = ws.out / path
        now = have.read_bytes() if have.is_file() else b""
        if path in written and now != written[path]:
            hunks[path] = line_hunks(written[path], now)
    return [replay.moved(f, hunks[f.file]) if f.file in hunks else f for f in findings]


def on_disk_lines(ws: Workspace, written: dict[str, bytes], places: Sequence[tuple[str, int]]) -> list[int]:
    """For each (module path, 1-based line of ``written``: module path -> text pq wrote), that line in the output
    folder now, after the maintainer's edits (a line the output folder no longer holds: the line standing in its
    place); 0 (the whole file) stays 0."""
    hunks: dict[str, list[tuple[int, int, int, int]]] = {}
    for path in sorted({p for p, line in places if line and p in written}):
        have = ws.out / path
        now = have.read_bytes() if have.is_file() else b""
        hunks[path] = line_hunks(written[path], now) if now != written[path] else []
    return [move_line(line, hunks[path]) if line and path in hunks else line for path, line in places]


def _marked(ws: Workspace, conflict: Conflict) -> bool:
    """The conflict's ``<<<<<<<`` marker is still at its line in the output folder."""
    path = ws.out / conflict.file
    lines = path.read_bytes().split(b"\n") if path.is_file() else []
    line = conflict.line or 0
    return 0 < line <= len(lines) and lines[line - 1].startswith(b"<<<<<<<")


@dataclass(frozen=True)
class Resolved:
    path: str  # shown: relative to the repository
    first: int
    last: int
    lines: int  # written in the region's place
    left: int  # regions left in the file
    linked: tuple[int, ...] = ()  # where the regions that go with it, resolved to the same side, now begin
    writes: str = ""  # what a suggestion wrote (:attr:`explain.Suggestion.writes`)


def _conflicted_file(ws: Workspace, where: str) -> tuple[Path, int]:
    """``FILE:LINE`` of a module in the output folder (relative to the working directory or to the folder)."""
    name, sep, number = where.rpartition(":")
    if not sep or not number.isdigit() or int(number) < 1:
        raise QueueError(f"expected FILE:LINE, got '{where}'")
    for candidate in (Path(name).resolve(), (ws.out / name).resolve()):
        if candidate.is_file() and candidate.is_relative_to(ws.out):
            return candidate, int(number)
    raise QueueError(f"no such file in {ws.rel(ws.out)}/: {name}")


def do_resolve(ws: Workspace, where: str, side: str, *, alone: bool = False) -> Resolved:
    """Resolve the one diff3 region at ``where`` (FILE:LINE) to ``side`` (upstream, patch, both, or suggested:
    the suggestion of the refresh for that conflict).  With ``upstream`` or ``patch``, unless ``alone``, the
    regions of the refresh that go with it (:func:`_linked`) are resolved to the same side."""
    path, line = _conflicted_file(ws, where)
    text = path.read_text(encoding="utf-8")
    region = markers.region_at(text, line)
    shown = f"{ws.rel(path)}:{line}"
    if region is None:
        raise QueueError(f"no conflict region at {shown}")
    # a suggestion is this region's alone (the regions that go with it have suggestions of their own)
    tip = _suggestion(ws, path, region) if side == "suggested" else None
    lines = tip.text.splitlines(keepends=True) if tip is not None else region.side(side)
    others = [] if alone or side not in ("upstream", "patch") else _linked(ws, path, text, region)
    written = {region.first: lines} | {r.first: r.side(side) for r in others}
    after = text
    for r in sorted([region, *others], key=lambda r: r.first, reverse=True):
        after = markers.resolve(after, r, written[r.first])
    atomic_write(path, after.encode("utf-8"))

    def now(first: int) -> int:  # where the lines written for the region at ``first`` begin
        above = [r for r in [region, *others] if r.first < first]
        return first + sum(len(written[r.first]) - (r.last - r.first + 1) for r in above)

    linked = tuple(now(r.first) for r in sorted(others, key=lambda r: r.first))
    writes = tip.writes if tip is not None else ""
    return Resolved(ws.rel(path), region.first, region.last, len(lines), len(markers.regions(after)), linked, writes)


def _group(conflict: Conflict, conflicts: tuple[Conflict, ...]) -> list[int]:
    """The indexes in ``conflicts`` of the others that go with ``conflict``: of the same patch, a link in common
    with it or with one that does."""
    links, group = set(conflict.links), set()
    grew = bool(links)
    while grew:
        grew = False
        for k, c in enumerate(conflicts):
            if c is not conflict and k not in group and c.patch == conflict.patch and links & set(c.links):
                group.add(k)
                links |= set(c.links)
                grew = True
    return sorted(group)


def _linked(ws: Workspace, path: Path, text: str, region: markers.Region) -> list[markers.Region]:
    """The other regions of ``text`` whose conflicts go with the one at ``region`` (the same patch, a link in
    common, or in common with one that does: :attr:`Conflict.links`); none outside a refresh."""
    state = operation.load(ws)
    if state is None:
        return []
    rel = path.relative_to(ws.out).as_posix()
    here = [c for c in on_disk(ws, state.done[-1][1], list(state.conflicts)) if c.file == rel]
    me = next((c for c in here if c.line == region.first), None)
    if me is None or not me.links:
        return []
    group, links = {region.first}, set(me.links)
    grew = True
    while grew:
        grew = False
        for c in here:
            if c.patch == me.patch and c.line not in group and links & set(c.links):
                group.add(c.line or 0)
                links |= set(c.links)
                grew = True
    return [r for r in markers.regions(text) if r.first in group and r.first != region.first]


def _suggestion(ws: Workspace, path: Path, region: markers.Region) -> explain.Suggestion:
    """The resolution suggested for the conflict at ``region`` (one line of error when it has none)."""
    state = operation.require(ws)
    rel = path.relative_to(ws.out).as_posix()
    conflicts = on_disk(ws, state.done[-1][1], list(state.conflicts))
    found = next(
        (
            was
            for was, now in zip(state.conflicts, conflicts, strict=True)
            if (now.file, now.line) == (rel, region.first)
        ),
        None,
    )
    tip = None
    if found is not None:
        now = conflicts[state.conflicts.index(found)]
        recorded = recorded_regions(ws) + merged_regions(ws, state)
        tip = suggestion(ws, found, now, _taken(ws, state), state.conflicts, conflicts, recorded)
    if tip is None:
        raise QueueError(f"no suggested resolution for the conflict at {ws.rel(path)}:{region.first}")
    return tip


def _taken(ws: Workspace, state: operation.Operation) -> dict[int, str]:
    """For each conflict of the refresh (by its index in ``state.conflicts``) that the maintainer resolved on
    disk, the text now in its place."""
    from patch_queue.series import replay

    written = module_files(ws, state.done[-1][1])
    out: dict[int, str] = {}
    for path in sorted({c.file for c in state.conflicts}):
        here = ws.out / path
        if path not in written or not here.is_file():
            continue
        now = replay.replaced_regions(written[path], here.read_bytes())
        for k, c in enumerate(state.conflicts):
            text = now.get(c.line or 0) if now is not None and c.file == path else None
            if text is not None and replay.has_markers(text.encode("utf-8")) is None:
                out[k] = text
    return out


def suggestion(
    ws: Workspace,
    conflict: Conflict,
    now: Conflict,
    taken: dict[int, str],
    conflicts: tuple[Conflict, ...],
    moved: list[Conflict],
    recorded: list[tuple[Conflict, str, str]] | None = None,
) -> explain.Suggestion | None:
    """The resolution suggested for the open ``conflict`` (``now``: at its line on disk): the way the maintainer
    resolved the same upstream change in another copy (``taken``: what replaced each resolved conflict of
    ``conflicts``, at their lines on disk in ``moved``; else ``recorded``, the regions of refs/pq/resolutions:
    :func:`recorded_regions`, read here when not given, and those the refresh merged itself: :func:`merged_regions`),
    carried over (:func:`explain.carried`), else the side
    taken in every resolved region that goes with it, else the one a rule is sure of (:func:`explain.suggest`)."""

    def where(k: int) -> str:
        return f"{ws.rel(ws.out / moved[k].file)}:{moved[k].line}"

    done = [(conflicts[k], text, where(k)) for k, text in sorted(taken.items()) if conflicts[k] is not conflict]
    if recorded is None:
        recorded = recorded_regions(ws)
    done += [(c, text, at) for c, text, at in recorded if c.key != conflict.key]
    # the same upstream change first, then one that is part of this region's
    for other, text, at in sorted(done, key=lambda d: not explain.same_upstream_change(d[0], conflict)):
        if explain.carried_change(other, conflict):
            tip = explain.carried(conflict, other, text)
            if tip is not None:  # a text of its own is that resolution ("re-indented", else "merged")
                wrote = f"the resolution of {at}, {tip.wrote or 'merged'}" if tip.side == "merged" else tip.wrote
                return replace(tip, reason=f"{tip.reason} at {at}", wrote=wrote)
    # a region only one side changed, there to go with others (name-linked): the side they all took
    group = _group(conflict, conflicts) if conflict.kind == ConflictKind.NAME_LINKED else []
    partners = [k for k in group if k in taken]
    sides = {explain.side_of(conflicts[k], taken[k]) for k in partners}
    if partners and len(sides) == 1 and (side := sides.pop()) in ("upstream", "patch"):
        text = (conflict.ours if side == "upstream" else conflict.theirs) or ""
        told = ", ".join(where(k) for k in partners)
        return explain.Suggestion(side, text, f"the {side} side, as the regions that go with it took ({told})")
    return explain.suggest(now) or _forwarded(ws, conflict) or _moved_tip(ws, conflict)


def recorded_regions(ws: Workspace) -> list[tuple[Conflict, str, str]]:
    """The regions refs/pq/resolutions holds (a conflict with its three sides, the resolution recorded, and where it
    is: ``FILE:LINE`` in the output folder where the file holds it once, else the file and the method), the ones
    resolved in the patches a pending refresh has gone past among them: a copy's region a later patch carries
    meets the resolution of the same upstream change made there (:func:`suggestion`)."""
    from patch_queue.series import rerere

    out = []
    for path, entry in rerere.Store(ws.repo, damaged_ok=True).entries().items():
        if rerere.entry_kind(path) != "region" or not all(
            isinstance(entry.get(k), str) for k in ("base", "upstream", "patch_text", "resolution", "file")
        ):
            continue
        file, text = str(entry["file"]), str(entry["resolution"])
        c = Conflict(
            str(entry.get("kind", "")),
            base=str(entry["base"]),
            ours=str(entry["upstream"]),
            theirs=str(entry["patch_text"]),
            key=str(entry.get("key", "")),
            patch=str(entry.get("patch", "")),
            file=file,
            symbol=str(entry.get("symbol") or ""),
        )
        have = ws.out / file
        held = have.read_text(encoding="utf-8", errors="replace") if have.is_file() else ""
        at = f"{ws.rel(have)} ({c.symbol or 'module level'}, recorded)"
        if text.strip() and held.count(text) == 1 and (held.startswith(text) or f"\n{text}" in held):
            at = f"{ws.rel(have)}:{held[: held.index(text)].count(chr(10)) + 1}"
        out.append((c, text, at))
    return out


def _forwarded(ws: Workspace, conflict: Conflict) -> explain.Suggestion | None:
    """:func:`explain.forwarded` (through the derived cache: :func:`report_parts.forwarded`) against the new
    upstream module the conflict's module carries code of."""
    from patch_queue.outputs import report_parts  # (a pending refresh's: only when one is)

    if not explain.renames(conflict.base or "", conflict.ours or ""):  # the rule is about renamed calls only
        return None
    state = operation.require(ws)
    module = next((m for m in state.target().modules if m.path == conflict.file and m.upstream), None)
    if module is None:
        return None
    vendored = ws.repo.read_tree(ws.repo.commit_info(state.new_base).tree).get(stack.VENDOR + module.upstream)
    return report_parts.forwarded(conflict, vendored.decode("utf-8", "replace")) if vendored is not None else None


def _moved_tip(ws: Workspace, conflict: Conflict) -> explain.Suggestion | None:
    """The patch's side without its copy of code upstream moved into a helper, upstream's new lines in its place
    (:func:`moved_code`), when the copy holds nothing of the omni edit's own."""
    found = moved_code(ws, conflict)
    if found is None or found.text is None:
        return None
    return explain.Suggestion("merged", found.text, found.reason, "the patch's side without its copy of the moved code")


def moved_notes(ws: Workspace, conflicts: list[Conflict]) -> dict[tuple[str, int], str]:
    """What `pq status` says under each open region of ``conflicts`` (at their lines on disk) where upstream moved
    the lines it deleted into a helper its new code calls (:func:`moved_code`), by (file, line)."""
    out = {}
    for c in conflicts:
        found = moved_code(ws, c) if _marked(ws, c) else None
        if found is not None:
            out[(c.file, c.line or 0)] = found.said
    return out


def moved_code(ws: Workspace, conflict: Conflict) -> moved.Told | None:
    """What :func:`moved.find` says of the pending refresh's ``conflict`` (:class:`moved.Told`: the ``moved:`` line,
    the suggestion's reason and text), None where it finds nothing: the helpers the new upstream module calls (read
    from the target's snapshot where the module imports them), the locals each side's method reads chains through
    (the patch side's from the module on disk)."""
    if not conflict.base or conflict.ours is None or conflict.theirs is None or not conflict.symbol:
        return None
    pending = _pending(ws)
    if pending is None:
        return None
    state, target = pending
    module = next((m for m in target.modules if m.path == conflict.file and m.upstream), None)
    if module is None:
        return None
    method = conflict.symbol.rpartition(".")[2]
    carried = next((s for s in module.symbols if s.rpartition(".")[2] == method), "")
    if not carried:
        return None
    new = _vendored(ws, state.new_base, module.upstream)
    old = _vendored(ws, state.orig_refs.get(stack.REF_BASE, ""), module.upstream)
    if new is None:
        return None
    here = ws.out / conflict.file
    patch_side = _patch_side(here.read_text(encoding="utf-8")) if here.is_file() else ""
    inputs = (
        conflict.base, conflict.ours, conflict.theirs, new, old or "", module.upstream, carried, conflict.symbol,
        patch_side, state.target_queue, state.upstream_git or "",
    )  # fmt: skip
    # kept in the download cache (`pq status` tells every region, ~40 ms each): the snapshot's files are those of
    # the target's pin, named in its queue.toml
    key = cache.derived_key(_moved_stamp(), *inputs)
    hit = cache.derived_json("moved", key, moved.Told | None)
    if hit is not None:
        told: moved.Told | None = hit[0]
        return told
    found = _moved_found(*inputs)
    told = None if found is None else found.told()
    if state.target_queue not in _memo().unread:  # an upstream that could not be read is asked again next time
        cache.derived_put("moved", key, json.dumps(None if told is None else asdict(told)).encode("utf-8"))
    return told


@functools.lru_cache(maxsize=1)
def _moved_stamp() -> str:
    """What :func:`moved_code` says depends on besides its inputs: the code that says it and Python's ``ast``."""
    return sys.version + cache.code_stamp("merge/moved.py", "merge/explain.py", "commands/resolve.py")


def _pending(ws: Workspace) -> tuple[operation.Operation, Queue] | None:
    """The pending refresh and its target queue (not a merge), read once while the state file stays as it was
    (`pq status` asks for each region)."""
    path = ws.state_dir / operation.STATE_FILE
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    kept = _memo().pending
    if key not in kept:
        state = operation.load(ws)
        kept.clear()
        kept[key] = None if state is None or state.merging is not None else (state, state.target())
    return kept[key]


@dataclass
class _Memo:
    """What :func:`moved_code` keeps for the process: the pending state and its target (by the state file's path,
    time and size), the vendored files read (by commit and path), the targets whose snapshot could not be read."""

    pending: dict[tuple[str, int, int], tuple[operation.Operation, Queue] | None] = field(default_factory=dict)
    vendored: dict[tuple[str, str], str | None] = field(default_factory=dict)
    unread: set[str] = field(default_factory=set)


@functools.lru_cache(maxsize=1)
def _memo() -> _Memo:
    """The process's :class:`_Memo` (a functools cache: what forgets a process's caches forgets it too)."""
    return _Memo()


@functools.lru_cache(maxsize=8)
def _patch_side(text: str) -> str:
    return markers.whole_side(text, "patch")


def _vendored(ws: Workspace, commit: str, path: str) -> str | None:
    """The vendored upstream file ``path`` of the stack commit ``commit`` (read once: a commit never changes)."""
    kept = _memo().vendored
    if (commit, path) not in kept:
        kept[(commit, path)] = _read_vendored(ws, commit, path)
    return kept[(commit, path)]


def _read_vendored(ws: Workspace, commit: str, path: str) -> str | None:
    if not commit:
        return None
    try:
        data = ws.repo.read_tree(ws.repo.commit_info(commit).tree).get(stack.VENDOR + path)
    except (KeyError, ValueError, OSError):
        return None
    return None if data is None else data.decode("utf-8", "replace")


@functools.lru_cache(maxsize=64)
def _moved_found(
    base: str,
    ours: str,
    theirs: str,
    new: str,
    old: str,
    path: str,
    symbol: str,
    patch_symbol: str,
    patch_side: str,
    target: str,
    upstream_git: str,
) -> moved.Moved | None:
    """:func:`moved.find` of one region, once per process (`pq status` asks for every region's suggestion and
    note); the target's snapshot is opened only when a helper is imported from another upstream module."""
    read = _reader(target, upstream_git)
    found: list[moved.Helper] = []

    def helpers() -> list[moved.Helper]:  # only where the region has deleted code to look for
        found.extend(moved.helpers(new, old, path, symbol, ours, read))
        return found

    def known(name: str) -> bool:
        texts = [new, old, *(read(h.module) or "" for h in found if h.module)]
        return moved.known_names(texts)(name)

    return moved.find(
        base,
        ours,
        theirs,
        helpers,
        upstream_names=moved.aliases(new, symbol),
        patch_names=moved.aliases(patch_side, patch_symbol),
        methods=moved.methods(new, symbol),
        known=known,
        patch_reads=moved.reads(patch_side, patch_symbol) if patch_side else None,
    )


@functools.lru_cache(maxsize=4)
def _reader(target: str, upstream_git: str) -> Callable[[str], str | None]:
    """An upstream file's text at the ``target`` queue's upstream (its queue.toml text; None when there is no such
    file, or the snapshot cannot be had), the snapshot opened on the first read."""
    from patch_queue.project.workspace import upstream_snapshot
    from patch_queue.series.queue import parse_queue

    @functools.cache
    def snapshot() -> Snapshot:
        return upstream_snapshot(parse_queue(target, path="target"), upstream_git=upstream_git or None)

    @functools.lru_cache(maxsize=32)
    def read(path: str) -> str | None:
        try:
            found = snapshot()
        except PqError:
            _memo().unread.add(target)
            return None
        if not found.exists(path):
            return None
        try:
            return found.read(path).decode("utf-8", "replace")
        except PqError:
            _memo().unread.add(target)
            return None

    return read


def do_mergetool(ws: Workspace, *, tool: str | None, names: list[str]) -> list[tuple[str, int]]:
    """Run the configured merge tool (``git config merge.tool``, or ``tool``) on each module of the output
    folder with conflict regions (or those of ``names``), the way ``git mergetool`` does: the upstream side
    is LOCAL, the patch side REMOTE, the old upstream BASE, the file with its markers MERGED.

    Returns (file, regions left) per file, in order.
    """
    if tool is None and not ws.repo.config("merge.tool"):
        raise QueueError("no merge tool configured: set one with `git config merge.tool NAME` (or --tool NAME)")
    files = [_conflicted_file(ws, f"{n}:1")[0] for n in names] if names else sorted(ws.out.rglob("*.py"))
    done = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        if not markers.regions(text):
            continue
        sides = {s: markers.whole_side(text, s).encode("utf-8") for s in ("base", "upstream", "patch")}
        rel = path.relative_to(ws.out).as_posix()
        ws.repo.mergetool(ws.out, rel, sides["base"], sides["upstream"], sides["patch"], tool)
        done.append((ws.rel(path), len(markers.regions(path.read_text(encoding="utf-8")))))
    return done
