"""What the maintainer does with a pending operation, whichever kind it is (a refresh or a merge): go on once its
conflicts are resolved (:func:`do_continue`) or put everything back (:func:`do_abort`).

It stands above both kinds: the operation's own writes when it finishes are chosen by its kind through
:data:`OWN_WRITES` (:func:`patch_queue.commands.refresh.finish_refresh`,
:func:`patch_queue.commands.merge.finish_merge`), and the rest of the machine is
:mod:`patch_queue.commands.machine`'s, which each kind's start shares.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from patch_queue.commands.machine import (
    Outcome,
    OwnWrites,
    advance,
    edit_lookup,
    import_sync,
    killable,
    normalizer,
    report_paths,
    write_reports,
)
from patch_queue.commands.merge import finish_merge
from patch_queue.commands.refresh import finish_refresh
from patch_queue.commands.write import module_files
from patch_queue.errors import QueueError
from patch_queue.fsutil import REFRESH_JSON, REFRESH_MARKDOWN, check_output, read_folder
from patch_queue.merge.conflict import Conflict, ConflictKind
from patch_queue.outputs import folder as output
from patch_queue.progress import Progress
from patch_queue.project import journal as journal_mod
from patch_queue.project import operation
from patch_queue.project.journal import Writes
from patch_queue.project.operation import Operation, OperationKind
from patch_queue.project.workspace import REF_JOURNAL, Workspace, ref_moves
from patch_queue.series import absorb, reimport, replay, rerere, stack
from patch_queue.series.queue import Queue
from patch_queue.series.replay import PatchStatus

OWN_WRITES: dict[OperationKind, OwnWrites] = {
    OperationKind.REFRESH: finish_refresh,
    OperationKind.MERGE: finish_merge,
}


def do_continue(
    ws: Workspace,
    *,
    progress: Progress | None = None,
    on_patch: Callable[[replay.PatchResult], None] | None = None,
    reports: tuple[Path | None, Path | None] = (None, None),
    annotations: bool = False,
    accept_errors: bool = False,
    check_import: bool | None = None,
) -> Outcome:
    """``reports``: the JSON and Markdown report paths given again (each replaces the refresh's; None keeps it, if
    it is still the refresh's report), rewritten once something is written (``annotations``: with the report's
    workflow commands in the outcome); ``check_import``: ``pq check --import`` on the result (True/False: asked or
    declined here; None: as the refresh was told); ``accept_errors``: finish over the errors of `pq check`
    (recorded in the lineage step), else they leave the refresh pending and nothing written (:func:`advance`)."""
    on_patch = killable(on_patch)
    state = operation.require(ws)
    for given, held, kind in zip(reports, state.reports, (REFRESH_JSON, REFRESH_MARKDOWN), strict=True):
        if given is None:  # the refresh's own report path, which continue rewrites: still its report?
            check_output(ws.root / held if held else None, kind, shown=held)
    paths = report_paths(ws, *reports)
    state = replace(state, reports=(paths[0] or state.reports[0], paths[1] or state.reports[1]))
    if check_import is not None:
        state = replace(state, check_import=check_import)
    target = state.target()
    patches, done = state.patches, state.done
    work = read_folder(ws.out)
    if not any(status == PatchStatus.CONFLICT for _n, _c, status in done) and not state.check_errors:
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
    merging = state.kind is OperationKind.MERGE  # a merge replays the release's change as it is: no layout, no imports
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
        if status == PatchStatus.CONFLICT:
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
            res = replay.PatchResult(name, PatchStatus.MODIFIED, stack.commit_files(ws.repo, parent, files, info))
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
            res.status = status if not res.conflicts else PatchStatus.CONFLICT
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
                results[i] = replay.PatchResult(n, PatchStatus.MODIFIED, moved, results[i].conflicts, results[i].flags)
        parent = absorbed[-1][1]
    # then the patches not replayed yet
    if recorded:  # before the replay below, which looks them up
        store.record(recorded, "pq continue: resolutions recorded\n")
    if not (results and results[-1].status == PatchStatus.CONFLICT):
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
    # a carried method's lines in its skeleton that upstream did not write (a release's merge left them there) go
    # into the patch that carries the method: the series is rewritten now, and the top stays as it is
    relocations: list[absorb.Relocation] = []
    if not merging and len(results) == len(patches) and not any(r.conflicts for r in results):
        results, relocations = _relocate(ws, state.new_base, target, results)
        flags += relocated_flags(ws, results[-1].commit, relocations)
    state = replace(
        state,
        done=tuple((r.name, r.commit, r.status) for r in results),
        conflicts=tuple(c for r in results for c in r.conflicts),
        flags=tuple(sorted(flags, key=lambda f: order.get(f.patch, 0))),
    )
    outcome = advance(
        ws,
        state,
        target,
        results,
        own=OWN_WRITES[state.kind],
        progress=progress,
        command="continue",
        store=store,
        placements=placements,
        relocations=relocations,
        accept_errors=accept_errors,
    )
    if outcome.written:  # over errors of pq check nothing is written: the reports stay as they were too
        outcome.annotations = write_reports(ws, outcome, annotations)
    return outcome


def _relocate(
    ws: Workspace, base: str, target: Queue, results: list[replay.PatchResult]
) -> tuple[list[replay.PatchResult], list[absorb.Relocation]]:
    """``results`` with every skeleton's copy of a carried method upstream's text as projected in ``base``, the
    edits it held in the patch that carries the method (:func:`absorb.relocate`); what moved."""
    chain = [(r.name, r.commit) for r in results]
    moved, relocations = absorb.relocate(ws.repo, base, chain, target)
    out = [
        r if commit == r.commit else replay.PatchResult(r.name, PatchStatus.MODIFIED, commit, r.conflicts, r.flags)
        for r, (_n, commit) in zip(results, moved, strict=True)
    ]
    return out, relocations


def relocated_flags(ws: Workspace, top: str, relocations: Sequence[absorb.Relocation]) -> list[Conflict]:
    """One ``relocated`` review flag per relocation (in the patch that took the edit, its patch side the lines
    moved; the method's first line in ``top``); a method whose edit stayed in the skeleton (no patch carries it)
    has none."""
    files = module_files(ws, top)
    out = []
    for r in relocations:
        if not r.patch:
            continue
        sym = absorb.methods_of(files.get(r.file)).get(r.symbol)
        out.append(
            Conflict(
                ConflictKind.RELOCATED,
                relocation_message(r),
                conflict=False,
                theirs=r.lines or None,
                line=sym.start if sym is not None else 1,
                patch=r.patch,
                file=r.file,
                symbol=r.symbol,
            )
        )
    return out


def relocation_message(r: absorb.Relocation) -> str:
    """What a relocation did, in one line."""
    edit = f"{r.added + r.removed} line(s) (+{r.added} -{r.removed}) of {r.symbol} that upstream did not write"
    if not r.patch:
        return f"the skeleton patches/{r.skeleton} holds {edit}, and no later patch changes the method: left there"
    return (
        f"the skeleton patches/{r.skeleton} held {edit}: moved into patches/{r.patch}, the patch that carries the "
        "method; the skeleton's copy is upstream's text as projected again, the built module is unchanged"
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
            upstream_module=reimport.module_of(upstream),
            previous=previous.get(path, b"").decode("utf-8", "replace"),
            written=written.get(path, b"").decode("utf-8", "replace"),
            line_length=imports.line_length,
            keep=keep.get(path, set()),
            first_party=target.spec.downstream_package,
        )
        if text != texts[path]:
            work[path], changes[path] = text.encode("utf-8"), made
    if not work:
        return results, [], set()
    absorbed, placements = absorb.absorb(ws.repo, base, chain, work)
    out = [
        r if moved == r.commit else replay.PatchResult(r.name, PatchStatus.MODIFIED, moved, r.conflicts, r.flags)
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
    state: Operation, patch: str, path: str, top_marked: bytes, resolved: bytes, mine: bytes
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


def do_abort(ws: Workspace) -> OperationKind:
    """Put every file and ref back as before the refresh (or merge: which one it was is returned), in one
    journaled write."""
    state = operation.require(ws)

    # recorded resolutions (and the remotes' as fetched) outlive an abort; the journal's ref is the journal's
    def kept(ref: str) -> bool:
        return ref in (rerere.REF, REF_JOURNAL) or ref.startswith(rerere.REMOTES)

    current = {k: v for k, v in ws.repo.refs().items() if not kept(k)}
    updates = ref_moves(current, {k: v for k, v in state.orig_refs.items() if not kept(k)})
    saved = ws.repo.read_tree(state.orig_out)
    for rel in saved:  # the folder as it was then, its folders since replaced by a link: pq never writes through it
        why = output.outside(ws.out, rel)
        if why:
            raise QueueError(
                f"pq does not put back {rel!r}, {why}: remove the link, then run `pq abort` again", path=ws.rel(ws.out)
            )
    writes = Writes(ws, "abort")
    # the output folder as it was saved when the refresh began: whatever is there and was not then goes
    for rel in sorted(set(read_folder(ws.out)) - set(saved)):
        writes.write(ws.out / rel, None, group="out")
    for rel, data in sorted(saved.items()):
        writes.write(ws.out / rel, data, group="out")
    if ws.queue_dir.queue_path.read_text(encoding="utf-8") != state.orig_queue:
        writes.write(ws.queue_dir.queue_path, state.orig_queue.encode(), group="patches")
    writes.move_refs(updates)
    operation.clear(ws, writes)
    writes.commit()
    return state.kind


def recover_interrupted(ws: Workspace, *, forward: bool) -> str | None:
    """Finish (``forward``, `pq continue`) or undo (`pq abort`) the writes of a command that was killed part way.

    Returns the interrupted command's name, or None when no command was interrupted.
    """
    return journal_mod.recover(ws, forward=forward)
