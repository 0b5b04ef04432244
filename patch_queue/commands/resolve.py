"""pq continue, pq abort and pq status: go on after resolving the conflicts of a refresh, or put everything back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from patch_queue.commands.refresh import (
    RefreshOutcome,
    _killable,
    advance,
    edit_lookup,
    import_sync,
    normalizer,
    on_disk_lines,
)
from patch_queue.commands.write import module_files, out_edits
from patch_queue.errors import QueueError
from patch_queue.fsutil import atomic_write, read_folder
from patch_queue.git.diff import line_hunks
from patch_queue.merge import explain, markers
from patch_queue.merge.conflict import Conflict
from patch_queue.outputs import folder as output
from patch_queue.progress import Progress
from patch_queue.project import journal as journal_mod
from patch_queue.project import refresh_state
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import REF_JOURNAL, Workspace, applied_count, check_no_journal, load_stack, ref_moves
from patch_queue.series import absorb, reimport, replay, rerere, stack
from patch_queue.series.queue import Queue


def do_continue(
    ws: Workspace,
    *,
    progress: Progress | None = None,
    on_patch: Callable[[replay.PatchResult], None] | None = None,
    reports: tuple[str, str] = ("", ""),
    accept_errors: bool = False,
) -> RefreshOutcome:
    """``reports``: report paths given again (each replaces the refresh's; "" keeps it); ``accept_errors``:
    finish over the errors of `pq check` (recorded in the lineage step), else they leave the refresh pending
    and nothing written (:func:`~patch_queue.commands.refresh.advance`)."""
    on_patch = _killable(on_patch)
    state = refresh_state.require(ws)
    state = replace(state, reports=(reports[0] or state.reports[0], reports[1] or state.reports[1]))
    target = state.target()
    patches, done = state.patches, state.done
    work = read_folder(ws.out)
    if not any(status == "conflict" for _n, _c, status in done) and not state.check_errors:
        raise QueueError("nothing to continue: no conflicted patch")
    old_top = done[-1][1]  # what the output folder held: the lines of the pending findings are its lines
    top_marked = module_files(ws, old_top)
    for rel, data in sorted(work.items()):
        line = replay.has_markers(data) if rel in top_marked else None
        if line is not None:
            raise QueueError(
                "conflict markers remain; resolve them, then run `pq continue`", path=ws.rel(ws.out / rel), line=line
            )
    resolved = {k: work.get(k, v) for k, v in top_marked.items()}
    for rel, data in sorted(resolved.items()):
        if data != top_marked[rel]:  # the maintainer's resolution becomes patch bodies: text only
            output.refuse_binary(data, ws.rel(ws.out / rel))
    labels = state.labels
    merging = state.merging is not None  # a merge replays the release's change as it is: no layout, no imports
    normalize = None if merging else normalizer(target)
    imports = None if merging else import_sync(target, patches)
    store = rerere.Store(ws.repo)
    replayed: set[str] = set()
    made: dict[str, str] = {}  # patch replayed one by one below -> the commit its findings' lines refer to
    # carry the resolution back into every conflicted patch: apply (top with markers -> resolved)
    # onto that patch's own result; rebase what follows onto the resolved commits
    parent = state.new_base
    results: list[replay.PatchResult] = []
    recorded: list[dict[str, object]] = []
    stop = not state.no_stop
    for name, commit, status in done:
        info = ws.repo.commit_info(commit)
        if status == "conflict":
            files = ws.repo.read_tree(info.tree)
            for path, data in sorted(files.items()):
                if path.startswith(stack.VENDOR) or path not in resolved or replay.has_markers(data) is None:
                    continue
                recorded += _resolved_regions(state, name, path, top_marked[path], resolved[path], data)
                carried = replay.carry_resolutions(top_marked[path], resolved[path], data)
                if carried is None or replay.has_markers(carried) is not None:
                    raise QueueError(
                        f"the resolution cannot be carried back into {name} automatically; "
                        "run `pq abort`, then `pq refresh` without --no-stop to resolve patch by patch",
                        path=ws.rel(ws.out / path),
                    )
                files[path] = carried
            res = replay.PatchResult(name, "modified", stack.commit_files(ws.repo, parent, files, info))
        elif info.parents[0] == parent:
            res = replay.PatchResult(name, status, commit)
        else:
            res = replay.replay_patch(
                ws.repo,
                name,
                commit,
                parent,
                labels=labels,
                normalize=normalize,
                recorded=store.lookup,
                imports=imports,
            )
            res.status = status if not res.conflicts else "conflict"
            # the refresh's findings of this patch stay (moved to their lines below): a merge of its merged
            # commit onto the resolution finds nothing about upstream, only a conflict with the resolution
            res.flags = []
            made[name] = res.commit
        on_patch(res)
        results.append(res)
        parent = res.commit
        if res.conflicts and stop:
            break
    # the maintainer's edits outside the conflict regions go into the patches that own their lines
    placements: list[absorb.Placement] = []
    if len(results) == len(done) and not any(r.conflicts for r in results):
        chain = [(r.name, r.commit) for r in results]
        absorbed, placements = absorb.absorb(ws.repo, state.new_base, chain, resolved)
        for i, ((n, c), (_n, moved)) in enumerate(zip(chain, absorbed, strict=True)):
            if moved != c:
                results[i] = replay.PatchResult(n, "modified", moved, results[i].conflicts, results[i].flags)
        parent = absorbed[-1][1]
    # then the patches not replayed yet
    if recorded:  # before the replay below, which looks them up
        store.record(recorded, "pq continue: resolutions recorded\n")
    if not (results and results[-1].status == "conflict"):
        more = replay.replay(
            ws.repo,
            list(patches[len(results) :]),
            parent,
            labels=labels,
            stop=stop,
            progress=on_patch,
            normalize=normalize,
            recorded=store.lookup,
            edited=edit_lookup(ws, store, target),
            imports=imports,
        )
        replayed.update(r.name for r in more)
        results += more
    # every line where it is in the new top (the output folder once this step is written)
    top = results[-1].commit if results else state.new_base
    order = {name: i for i, (name, _c) in enumerate(patches)}
    kept = replay.follow_lines(ws.repo, [f for f in state.flags if f.patch not in replayed], old_top, top)
    for r in results:
        if r.name in made:
            r.conflicts = replay.follow_lines(ws.repo, r.conflicts, made[r.name], top)
    flags = kept + [f for r in results for f in r.flags]
    if imports is not None and len(results) == len(patches) and not any(r.conflicts for r in results):
        results, changed, removed = _follow_imports(ws, state.new_base, target, imports, results, top_marked)
        if changed:
            followed = replay.follow_lines(ws.repo, flags, top, results[-1].commit)
            flags = _added_after(module_files(ws, results[-1].commit), followed, removed) + changed
    state = replace(
        state,
        done=tuple((r.name, r.commit, r.status) for r in results),
        conflicts=tuple(c for r in results for c in r.conflicts),
        flags=tuple(sorted(flags, key=lambda f: order.get(f.patch, 0))),
    )
    return advance(
        ws,
        state,
        target,
        results,
        progress=progress,
        command="continue",
        store=store,
        placements=placements,
        accept_errors=accept_errors,
    )


def _added_after(files: dict[str, bytes], flags: list[Conflict], removed: set[tuple[str, str]]) -> list[Conflict]:
    """``flags`` with each ``import-added`` flag whose statement the imports' following changed pointing at the
    statement as it is in ``files`` now; one whose every name it removed (``removed``: file, name) is left out (an
    ``import-removed`` flag says so)."""
    out = []
    for f in flags:
        text = files.get(f.file, b"").decode("utf-8", "replace")
        lines = text.splitlines(keepends=True)
        said = f.resolution or ""
        if f.kind != reimport.ADDED or "".join(lines[(f.line or 1) - 1 :][: said.count("\n")]) == said:
            out.append(f)
            continue
        left = [n for n in reimport.added_names(f.message) if (f.file, n) not in removed]
        now = reimport.statement_of(text, left[0]) if left else None
        if now is not None:
            out.append(replace(f, line=now[0], resolution=now[1]))
    return out


def _follow_imports(
    ws: Workspace,
    base: str,
    target: Queue,
    imports: replay.Imports,
    results: list[replay.PatchResult],
    written: dict[str, bytes],
) -> tuple[list[replay.PatchResult], list[Conflict], set[tuple[str, str]]]:
    """The series with the imports of each runner module made to follow the resolution
    (:func:`reimport.follow`: what the resolved code reads is imported, what the refresh imported, or the
    resolution stopped using, and the code does not use is removed), each edit in the patch that owns the lines
    it changes (the skeleton, or the patch whose merge added the import); one review flag per change, and the
    (file, name) of every import removed.  ``written``: the modules as pq wrote them for the maintainer (an
    import they do not hold is the maintainer's and stays)."""
    chain = [(r.name, r.commit) for r in results]
    top = module_files(ws, chain[-1][1])
    previous = module_files(ws, imports.old_top)
    vendored = ws.repo.read_tree(ws.repo.commit_info(base).tree)
    texts = {p: d.decode("utf-8", "replace") for p, d in top.items() if p.endswith(".py")}
    keep = reimport.imported_from(texts, target.package.replace("/", "."))
    work: dict[str, bytes] = {}
    changes: dict[str, list[reimport.Change]] = {}
    for path, upstream in sorted(imports.modules.items()):
        new_upstream = vendored.get(stack.VENDOR + upstream)
        if new_upstream is None or path not in texts:
            continue
        text, made = reimport.follow(
            texts[path],
            new_upstream=new_upstream.decode("utf-8", "replace"),
            upstream_module=upstream.removesuffix(".py").replace("/", "."),
            previous=previous.get(path, b"").decode("utf-8", "replace"),
            written=written.get(path, b"").decode("utf-8", "replace"),
            line_length=imports.line_length,
            keep=keep.get(path, set()),
        )
        if text != texts[path]:
            work[path], changes[path] = text.encode("utf-8"), made
    if not work:
        return results, [], set()
    absorbed, placements = absorb.absorb(ws.repo, base, chain, work)
    out = [
        r if moved == r.commit else replay.PatchResult(r.name, "modified", moved, r.conflicts, r.flags)
        for r, (_n, moved) in zip(results, absorbed, strict=True)
    ]
    flags = []
    for path, made in sorted(changes.items()):
        placed = sorted((p.line, p.patch) for p in placements if p.file == path)
        for c in made:  # the patch that took the edit at or above the change's line (its statement's edit)
            owner = ([patch for line, patch in placed if line <= c.line] or [placed[0][1]])[-1]
            flags.append(
                Conflict(c.kind, c.message, conflict=False, resolution=c.text, patch=owner, file=path, line=c.line)
            )
    removed = {(path, n) for path, made in changes.items() for c in made if c.kind == reimport.REMOVED for n in c.names}
    return out, flags, removed


def _resolved_regions(
    state: refresh_state.RefreshState, patch: str, path: str, top_marked: bytes, resolved: bytes, mine: bytes
) -> list[dict[str, object]]:
    """Recorded-resolution entries for the regions of ``patch`` in ``path`` the maintainer resolved."""
    texts = replay.resolutions_of(top_marked, resolved, mine, patch)
    mine_conflicts = sorted(
        (c for c in state.conflicts if c.patch == patch and c.file == path and c.key), key=lambda c: c.line or 0
    )
    if texts is None or len(texts) != len(mine_conflicts):
        return []
    return [
        {
            "key": c.key,
            "patch": replay.patch_key(patch),
            "file": path,
            "symbol": c.symbol,
            "kind": c.kind,
            "base": c.base or "",
            "upstream": c.ours or "",
            "patch_text": c.theirs or "",
            "resolution": text,
        }
        for c, text in zip(mine_conflicts, texts, strict=True)
    ]


def do_abort(ws: Workspace) -> str:
    """Put every file and ref back as before the refresh (or merge: which one it was is returned), in one
    journaled write."""
    state = refresh_state.require(ws)

    # recorded resolutions (and the remotes' as fetched) outlive an abort; the journal's ref is the journal's
    def kept(ref: str) -> bool:
        return ref in (rerere.REF, REF_JOURNAL) or ref.startswith(rerere.REMOTES)

    current = {k: v for k, v in ws.repo.refs().items() if not kept(k)}
    updates = ref_moves(current, {k: v for k, v in state.orig_refs.items() if not kept(k)})
    saved = ws.repo.read_tree(state.orig_out)
    writes = Writes(ws, "abort")
    # the output folder as it was saved when the refresh began: whatever is there and was not then goes
    for rel in sorted(set(read_folder(ws.out)) - set(saved)):
        writes.write(ws.out / rel, None, group="out")
    for rel, data in sorted(saved.items()):
        writes.write(ws.out / rel, data, group="out")
    if ws.queue_dir.queue_path.read_text(encoding="utf-8") != state.orig_queue:
        writes.write(ws.queue_dir.queue_path, state.orig_queue.encode(), group="patches")
    writes.move_refs(updates)
    writes.write(ws.state_dir / refresh_state.STATE_FILE, None, group="state")
    writes.commit()
    return state.operation


def recover_interrupted(ws: Workspace, *, forward: bool) -> str | None:
    """Finish (``forward``, `pq continue`) or undo (`pq abort`) the writes of a command that was killed part way.

    Returns the interrupted command's name, or None when no command was interrupted.
    """
    return journal_mod.recover(ws, forward=forward)


@dataclass(frozen=True)
class Status:
    in_progress: bool
    upstream: str
    target: str | None
    patches: list[tuple[str, str]]  # (name, state)
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
    operation: str = "refresh"  # what is in progress: "refresh" (onto ``target``) or "merge" (of ``target``)


def do_status(ws: Workspace, *, upstream_git: str | None) -> Status:
    check_no_journal(ws)  # a killed command's half-done writes: say how to finish or undo them
    state = refresh_state.load(ws)
    if state is not None:
        done = {d[0]: d[2] for d in state.done}
        rows = [(n, done.get(n, "pending")) for n, _c in state.patches]
        if state.merging is not None:  # the series as it stood, and the merge that goes into it once through
            rows = [(n, "applied") for n, _c in state.merging.chain]
        conflicts = on_disk(ws, state.done[-1][1], list(state.conflicts))
        flags = on_disk(ws, state.done[-1][1], list(state.flags))
        open_ = [c for c in conflicts if _marked(ws, c)]
        resolved = [c for c in conflicts if not _marked(ws, c)]
        target = state.target()
        taken = _taken(ws, state)
        tips = {
            (now.file, now.line or 0): tip
            for was, now in zip(state.conflicts, conflicts, strict=True)
            if now in open_ and (tip := suggestion(ws, was, now, taken, state.conflicts, conflicts)) is not None
        }
        written = module_files(ws, state.done[-1][1])
        lines = on_disk_lines(ws, written, [(file, line) for file, line, _r, _m in state.check_errors])
        errors = [(f, n, r, m) for (f, _l, r, m), n in zip(state.check_errors, lines, strict=True)]
        onto = state.merging.release if state.merging is not None else target.upstream.label
        return Status(True, state.old_base_label, onto, rows, open_, resolved=resolved, flags=flags,
                      downstream=_downstream(target), suggestions=tips, check_errors=errors,
                      operation=state.operation)  # fmt: skip
    loaded = load_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    rows = [(n, "applied" if i < applied else "unapplied") for i, (n, _c) in enumerate(loaded.patches)]
    steps = loaded.queue.lineage
    last = max((i for i, s in enumerate(steps, 1) if s.kind in ("refresh", "merge")), default=0)
    accepted = (last, len(steps[last - 1].accepted_errors)) if last and steps[last - 1].accepted_errors else (0, 0)
    kind = steps[last - 1].kind if last else "refresh"
    return Status(False, loaded.queue.upstream.label, None, rows, [], out_edits(ws), len(steps),
                  downstream=_downstream(loaded.queue), accepted=accepted, accepted_kind=kind)  # fmt: skip


def _downstream(queue: Queue) -> str:
    return f"{queue.downstream_name} {queue.downstream_release}" if queue.downstream_release else ""


def on_disk(ws: Workspace, top: str, findings: list[Conflict]) -> list[Conflict]:
    """``findings`` (lines of the stack commit ``top``, as pq wrote the output folder) at their lines in the
    output folder now, after the maintainer's edits."""
    written = module_files(ws, top)
    hunks = {}
    for path in sorted({f.file for f in findings}):
        have = ws.out / path
        now = have.read_bytes() if have.is_file() else b""
        if path in written and now != written[path]:
            hunks[path] = line_hunks(written[path], now)
    return [replay.moved(f, hunks[f.file]) if f.file in hunks else f for f in findings]


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
    lines = _suggestion(ws, path, region).text.splitlines(keepends=True) if side == "suggested" else region.side(side)
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
    return Resolved(ws.rel(path), region.first, region.last, len(lines), len(markers.regions(after)), linked)


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
    state = refresh_state.load(ws)
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
    state = refresh_state.require(ws)
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
        tip = suggestion(ws, found, now, _taken(ws, state), state.conflicts, conflicts)
    if tip is None:
        raise QueueError(f"no suggested resolution for the conflict at {ws.rel(path)}:{region.first}")
    return tip


def _taken(ws: Workspace, state: refresh_state.RefreshState) -> dict[int, str]:
    """For each conflict of the refresh (by its index in ``state.conflicts``) that the maintainer resolved on
    disk, the text now in its place."""
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
) -> explain.Suggestion | None:
    """The resolution suggested for the open ``conflict`` (``now``: at its line on disk): the way the maintainer
    resolved the same upstream change in another copy (``taken``: what replaced each resolved conflict of
    ``conflicts``, at their lines on disk in ``moved``), else the side taken in every resolved region that goes
    with it, else the one a rule is sure of (:func:`explain.suggest`)."""

    def where(k: int) -> str:
        return f"{ws.rel(ws.out / moved[k].file)}:{moved[k].line}"

    for k, text in sorted(taken.items()):
        done = conflicts[k]
        if done is not conflict and explain.same_upstream_change(done, conflict):
            tip = explain.as_resolved(conflict, done, text)
            if tip is not None:
                return replace(tip, reason=f"{tip.reason} at {where(k)}")
    # a region only one side changed, there to go with others (name-linked): the side they all took
    group = _group(conflict, conflicts) if conflict.kind == "name-linked" else []
    partners = [k for k in group if k in taken]
    sides = {explain.side_of(conflicts[k], taken[k]) for k in partners}
    if partners and len(sides) == 1 and (side := sides.pop()) in ("upstream", "patch"):
        text = (conflict.ours if side == "upstream" else conflict.theirs) or ""
        told = ", ".join(where(k) for k in partners)
        return explain.Suggestion(side, text, f"the {side} side, as the regions that go with it took ({told})")
    return explain.suggest(now) or _forwarded(ws, conflict)


def _forwarded(ws: Workspace, conflict: Conflict) -> explain.Suggestion | None:
    """:func:`explain.forwarded` against the new upstream module the conflict's module carries code of."""
    if not explain.renames(conflict.base or "", conflict.ours or ""):  # the rule is about renamed calls only
        return None
    state = refresh_state.require(ws)
    module = next((m for m in state.target().modules if m.path == conflict.file and m.upstream), None)
    if module is None:
        return None
    vendored = ws.repo.read_tree(ws.repo.commit_info(state.new_base).tree).get(stack.VENDOR + module.upstream)
    return explain.forwarded(conflict, vendored.decode("utf-8", "replace")) if vendored is not None else None


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
