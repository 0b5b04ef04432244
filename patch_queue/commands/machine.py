"""The machine of a pending operation: a refresh (`pq refresh`) or a merge (`pq merge`), one typed object.

An operation starts (:func:`start`: what `pq abort` puts back, with the refresh's or the merge's own
target, replay and findings), advances (:func:`advance`: finished when the series is through without
conflicts and `pq check` finds no error, else stopped with its state in ``.git/pq/refresh.json``,
:class:`~patch_queue.project.operation.Operation`), goes on after the maintainer resolved its conflicts
(:func:`do_continue`), is put back (:func:`do_abort`) or finished (:func:`finish`: the refresh's or the
merge's own writes, then what every operation writes).  What the terminal prints and the report renders is
:class:`Outcome`: the operation's state and what the step computed from it, never a copy of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from patch_queue.commands import write
from patch_queue.commands.write import REF_PREVIOUS, REF_REFRESH, module_files, write_series
from patch_queue.errors import PqError, QueueError
from patch_queue.fsutil import kill_point, read_folder
from patch_queue.git.diff import line_hunks, move_line
from patch_queue.git.repo import ProjectRepo
from patch_queue.merge import anchors, explain, markers
from patch_queue.merge.conflict import Conflict, ConflictKind
from patch_queue.outputs import folder as output
from patch_queue.outputs import report_parts
from patch_queue.progress import Bar, Progress, say, timed
from patch_queue.project import journal as journal_mod
from patch_queue.project import operation
from patch_queue.project.journal import Writes
from patch_queue.project.operation import Operation, OperationKind
from patch_queue.project.workspace import REF_JOURNAL, Workspace, ref_moves
from patch_queue.series import absorb, fmt, patchfile, reimport, replay, rerere, stack
from patch_queue.series.queue import Queue, parse_queue
from patch_queue.series.replay import PatchStatus

if TYPE_CHECKING:  # pq check is imported where it runs: `refresh --no-check` skips it
    from patch_queue.commands.check import CheckOutcome


@dataclass
class Outcome:
    """What a step of an operation (start, continue) did: its state (the conflicts, flags, labels the terminal
    and the report show are its) and what the step computed from it."""

    state: Operation
    target: Queue  # the queue the operation moves the series onto (a finished merge: the queue it left)
    results: list[replay.PatchResult]
    out: str = "npu_worker"
    blocks_after: int = 0  # omni blocks after (before: the state's)
    fences: list[dict[str, object]] = field(default_factory=list)  # Omni-new fence problems in the output
    check: CheckOutcome | None = None  # pq check on the result, once the series is through without conflicts
    placements: list[absorb.Placement] = field(default_factory=list)  # where `pq continue` put edits
    relocations: list[absorb.Relocation] = field(default_factory=list)  # skeleton edits moved (`pq continue`)
    check_pending: bool = False  # the series is through, but the errors of `pq check` keep the operation pending
    accepted: list[str] = field(default_factory=list)  # the errors of `pq check` it finished over (--accept-errors)
    written: bool = True  # False: nothing was written (`pq continue` over check errors; a merge with nothing to merge)
    standing: int = 0  # errors of `pq check` in a refresh that changed nothing: the series had them already

    @property
    def target_label(self) -> str:
        return self.target.upstream.label

    @property
    def finished(self) -> bool:
        """The whole series was replayed (conflicts may remain with --no-stop)."""
        return len(self.state.done) == len(self.state.patches)

    @property
    def stopped_at(self) -> str | None:
        done = self.state.done
        return done[-1][0] if done and done[-1][2] == PatchStatus.CONFLICT and not self.finished else None

    @property
    def blocks(self) -> tuple[int, int]:
        """Omni blocks before / after."""
        return self.state.blocks_before, self.blocks_after

    @property
    def downstream(self) -> tuple[str, str]:
        return self.target.downstream_name, self.target.downstream_release

    @property
    def merged(self) -> str:
        """A merge (pq merge): the release it takes in; "" for a refresh."""
        return self.state.merging.release if self.state.merging is not None else ""

    @property
    def pending(self) -> bool:
        """The operation waits for `pq continue` (conflicts left, or errors of `pq check`) or `pq abort`."""
        return bool(self.state.conflicts) or self.check_pending or not self.finished


def start(ws: Workspace, begun: Operation) -> Operation:
    """``begun`` (a refresh's or a merge's target, replay and findings) with what `pq abort` puts back: every
    ref but those of a pending operation, the recorded resolutions (and the remotes') and the journal's; a tree
    of the output folder (kept by a ref while the operation is open); ``queue.toml``."""
    orig = {
        k: v
        for k, v in ws.repo.refs().items()
        if not k.startswith((REF_REFRESH, rerere.REMOTES)) and k not in (rerere.REF, REF_JOURNAL)
    }
    return replace(
        begun,
        orig_refs=orig,
        orig_out=ws.repo.write_tree(read_folder(ws.out)),
        orig_queue=ws.queue_dir.queue_path.read_text(encoding="utf-8"),
    )


def advance(
    ws: Workspace,
    state: Operation,
    target: Queue,
    results: list[replay.PatchResult],
    *,
    progress: Progress | None,
    command: str = "refresh",
    store: rerere.Store,
    placements: list[absorb.Placement] | None = None,
    relocations: list[absorb.Relocation] | None = None,
    accept_errors: bool = False,
) -> Outcome:
    """Finish the operation if the series is through and `pq check` finds no error in the result (or
    ``accept_errors``), else record the stop.

    Every file and ref (refs/pq/resolutions, where ``store`` recorded resolutions and edits,
    included) is written once, through one journaled :class:`Writes`: a kill at any point leaves
    the old state or, after ``pq continue``, the new one (``pq abort`` puts the old one back).
    Only a checked result is finished: with errors of `pq check`, `pq refresh` leaves the refresh
    pending (the output folder holds the result, `pq continue` goes on once they are fixed) and
    `pq continue` writes nothing (its findings are at their lines in the output folder as it is).
    """
    writes = Writes(ws, command)
    patches, done = state.patches, state.done
    new_patches = [(n, c) for n, c, _s in done]
    top_files = module_files(ws, new_patches[-1][1]) if new_patches else {}
    outcome = Outcome(
        state,
        target,
        results,
        out=ws.rel(ws.out),
        blocks_after=count_blocks(top_files),
        fences=fence_problems(top_files),
        placements=placements or [],
        relocations=relocations or [],
    )
    if outcome.finished and not state.conflicts:
        old_top = patches[-1][1] if patches else None
        if state.check:
            outcome.check = _check_result(ws, state, target, top_files, old_top, progress)
        errors = [f for f in outcome.check.findings if f.severity == "error"] if outcome.check else []
        if errors and _changes_nothing(ws, state, target, top_files, old_top):
            # the result is the series as it stands, on the pin it has: the errors were there before (the lineage
            # holds how they were taken) and a refresh that changed nothing does not wait on them
            outcome.standing, errors = len(errors), []
        if errors and not accept_errors:
            outcome.check_pending = True
            if command == "continue":  # nothing written: the maintainer fixes the files on disk and continues again
                assert outcome.check is not None
                outcome.check = on_disk_findings(ws, top_files, outcome.check)
                outcome.written = False
                return outcome
            state = replace(state, check_errors=tuple((f.file, f.line, f.rule, f.message) for f in errors))
            outcome.state = state
        else:
            outcome.accepted = [f.render() for f in errors]
            if state.kind is OperationKind.MERGE:  # a finished merge is one command `pq undo` takes back
                writes = Writes(ws, "merge", undoable=True)
            outcome.target = finish(ws, state, target, writes, command, store, outcome.accepted)
            return outcome
    # stopped (or finished with conflicts under --no-stop, or over errors of pq check): keep everything needed
    # to go on or back
    top = new_patches[-1][1] if new_patches else state.new_base
    holder = ws.repo.commit(state.orig_out, [], f"pq {state.kind}: saved output folder\n", stack.PERSON, stack.PERSON)
    wanted = {REF_REFRESH + "top": top, REF_REFRESH + "base": state.new_base, REF_REFRESH + "saved-out": holder}
    writes.move_refs({ref: (ws.repo.ref(ref), value) for ref, value in wanted.items()})
    writes.move_refs(store.ref_update())
    state.save(ws, writes)
    output.sync(ws.out, module_files(ws, top), writes)
    writes.commit()
    return outcome


def _changes_nothing(
    ws: Workspace, state: Operation, target: Queue, top_files: dict[str, bytes], old_top: str | None
) -> bool:
    """A refresh onto the pin the series has whose result is the series' own top, module for module."""
    if state.kind is not OperationKind.REFRESH or old_top is None:
        return False
    return state.target().upstream == parse_queue(state.orig_queue).upstream and module_files(ws, old_top) == top_files


def finish(
    ws: Workspace,
    state: Operation,
    target: Queue,
    writes: Writes,
    command: str,
    store: rerere.Store,
    accepted: list[str],
) -> Queue:
    """Write the finished operation: the refresh's or the merge's own writes (recorded edits or resolution, the
    series and its lineage step), then what every one writes: the previous top, the state and the refs of the
    pending operation gone, the output folder.  The queue it leaves."""
    if state.kind is OperationKind.MERGE:
        from patch_queue.commands import merge

        loaded, step, old_top = merge.finish_merge(ws, state, writes, command, store, accepted)
    else:
        from patch_queue.commands import refresh

        loaded, step, old_top = refresh.finish_refresh(ws, state, target, writes, command, store, accepted)
    write_series(ws, loaded, writes=writes, step=step)
    if old_top is not None and old_top != loaded.top():
        writes.move_refs({REF_PREVIOUS: (ws.repo.ref(REF_PREVIOUS), old_top)})
    operation.clear(ws, writes)
    writes.move_refs({ref: (value, None) for ref, value in ws.repo.refs().items() if ref.startswith(REF_REFRESH)})
    write.finish(ws, loaded, writes, len(loaded.patches))
    return loaded.queue


def _check_result(
    ws: Workspace,
    state: Operation,
    target: Queue,
    files: dict[str, bytes],
    old_top: str | None,
    progress: Progress | None,
) -> CheckOutcome:
    """`pq check` on the refreshed ``files`` before anything is written; a check that cannot run is an error."""
    from patch_queue.checks.findings import ERROR, Finding
    from patch_queue.commands.check import CheckOutcome, module_texts, run_checks

    say(progress, "Checking the new runners (pq check) ...")
    try:
        with timed("check"):
            return run_checks(
                ws,
                module_texts(files),
                queue=target,
                base=state.new_base,
                reference=module_texts(module_files(ws, old_top)) if old_top else {},
                reference_label="the previous build",
                upstream_git=state.upstream_git,
                sources_on=state.check_sources,
                progress=progress,
                imports=state.check_import,
            )
    except PqError as exc:
        return CheckOutcome(
            [Finding("", 0, "check-failed", ERROR, f"pq check could not run: {exc}")],
            "the previous build",
            sorted(module_texts(files)),
            False,
        )


def on_disk_findings(ws: Workspace, written: dict[str, bytes], result: CheckOutcome) -> CheckOutcome:
    """``result`` (findings at lines of ``written``, module path -> text) with each finding at its line in the
    output folder now (:func:`on_disk_lines`)."""
    from patch_queue.commands.check import CheckOutcome

    lines = on_disk_lines(ws, written, [(f.file, f.line) for f in result.findings])
    moved = [replace(f, line=line) for f, line in zip(result.findings, lines, strict=True)]
    return CheckOutcome(moved, result.reference, result.files, result.sources, result.imported)


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


def do_continue(
    ws: Workspace,
    *,
    progress: Progress | None = None,
    on_patch: Callable[[replay.PatchResult], None] | None = None,
    reports: tuple[str, str] = ("", ""),
    accept_errors: bool = False,
    check_import: bool | None = None,
) -> Outcome:
    """``reports``: report paths given again (each replaces the refresh's; "" keeps it); ``check_import``: ``pq
    check --import`` on the result (True/False: asked or declined here; None: as the refresh was told);
    ``accept_errors``: finish over the errors of `pq check` (recorded in the lineage step), else they leave the
    refresh pending and nothing written (:func:`advance`)."""
    on_patch = killable(on_patch)
    state = operation.require(ws)
    state = replace(state, reports=(reports[0] or state.reports[0], reports[1] or state.reports[1]))
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
    return advance(
        ws,
        state,
        target,
        results,
        progress=progress,
        command="continue",
        store=store,
        placements=placements,
        relocations=relocations,
        accept_errors=accept_errors,
    )


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


def count_blocks(files: dict[str, bytes]) -> int:
    total = 0
    for path, data in files.items():
        if path.endswith(".py") and not path.startswith(stack.VENDOR):
            total += len(anchors.parse_blocks(data.decode("utf-8", errors="replace"))[0])
    return total


def fence_problems(files: dict[str, bytes]) -> list[dict[str, object]]:
    """Unbalanced or misplaced Omni-new fences in the output modules, with file and line."""
    out: list[dict[str, object]] = []
    for path in sorted(files):
        if not path.endswith(".py") or path.startswith(stack.VENDOR):
            continue
        # conflict regions read as the patch's side; line numbers kept
        text = markers.one_side(files[path].decode("utf-8", errors="replace"), "theirs", blank=True)[0]
        _blocks, problems = anchors.parse_blocks(text)
        out += [{"file": path, "line": p.line, "message": p.message} for p in problems]
    return out


def import_sync(queue: Queue, patches: Sequence[tuple[str, str]]) -> replay.Imports | None:
    """The import reconciliation of the runner modules that carry upstream code, against the old series'
    top (the last of ``patches``: name, old commit)."""
    modules = {m.path: m.upstream for m in queue.modules if m.upstream}
    if not modules or not patches:
        return None
    return replay.Imports(modules, queue.line_length, patches[-1][1], queue.spec.downstream_package)


def normalizer(
    queue: Queue, repo: ProjectRepo | None = None, patches: Sequence[tuple[str, str]] = ()
) -> replay.Normalize | None:
    """Lay out the carried symbols of a module text the way the queue's projection does.

    The old sides of ``patches`` (read from ``repo``) are laid out up front, in one formatter run.
    """
    if not queue.formatter:
        return None
    cache: dict[tuple[str, bytes], bytes] = {}

    def carried(path: str) -> list[str]:
        module = queue.module(path)
        return list(module.symbols) if module is not None else []

    def lay_out(items: list[tuple[str, bytes]]) -> None:
        todo = sorted({item for item in items if item not in cache and carried(item[0])})
        texts = fmt.format_carried_many(
            [(data.decode("utf-8"), carried(path)) for path, data in todo],
            formatter=queue.formatter,
            line_length=queue.line_length,
        )
        cache.update({item: text.encode("utf-8") for item, text in zip(todo, texts, strict=True)})

    def normalize(path: str, data: bytes) -> bytes:
        if not carried(path):
            return data
        if (path, data) not in cache:
            lay_out([(path, data)])
        return cache[(path, data)]

    if repo is not None:
        sides: list[tuple[str, bytes]] = []
        for _name, old in patches:
            info = repo.commit_info(old)
            before, after = repo.read_tree(repo.commit_info(info.parents[0]).tree), repo.read_tree(info.tree)
            for path in sorted(set(before) & set(after)):
                if path.endswith(".py") and before[path] != after[path]:
                    try:
                        before[path].decode("utf-8"), after[path].decode("utf-8")
                    except UnicodeDecodeError:
                        continue
                    sides += [(path, before[path]), (path, after[path])]
        lay_out(sides)
    return normalize


def edit_lookup(ws: Workspace, store: rerere.Store, queue: Queue) -> replay.Edited | None:
    """Recorded edits of a patch's merge result, as the commit they make (see rerere.Store.lookup_edit)."""
    if not store.has_edits():
        return None
    patches = store.edited_patches()

    def edited(name: str, merged: str) -> str | None:
        if name not in patches:  # then no edit is recorded for any body of it: skip writing this one
            return None
        # an edit recorded in either form of the bodies (see patch_queue.series.queue): one of an older lineage too
        found = (store.lookup_edit(name, body) for body in stack.body_forms(ws.repo, merged))
        after = next((body for body in found if body is not None), None)
        if after is None:
            return None
        shown = f"patches/{name}"
        parent = ws.repo.commit_info(merged).parents[0]
        return stack.commit_patch(ws.repo, parent, patchfile.parse(after, path=shown), queue, path=shown)

    return edited


def killable(
    on_patch: Callable[[replay.PatchResult], None] | None, shown: Bar | None = None, total: int = 0
) -> Callable[[replay.PatchResult], None]:
    """``on_patch`` with the interruption tests' kill point between two patches of a replay, moving
    ``shown`` (a progress bar over ``total`` patches) one patch on."""
    done = 0

    def each(result: replay.PatchResult) -> None:
        nonlocal done
        done += 1
        if shown is not None:
            shown.update(done, total)
        if on_patch is not None:
            on_patch(result)
        kill_point("between-patches")

    return each


def report_json(outcome: Outcome) -> dict[str, object]:
    """The refresh report (format 2; the schema is described in patch_queue/outputs/report.py); a merge's has
    ``merged`` too."""
    state = outcome.state
    data: dict[str, object] = {
        "format": 2,
        "upstream": {
            "base": state.old_base_label,
            "target": outcome.target_label,
            "base_commit": state.upstream_commits[0],
            "target_commit": state.upstream_commits[-1],
            "culprits": state.culprits_note,
        },
        "downstream": {"name": outcome.downstream[0], "release": outcome.downstream[1]},
        "out": outcome.out,
        "patches": [{"name": r.name, "status": r.status} for r in outcome.results],
        "conflicts": [explained(c) for c in state.conflicts],
        "flags": [c.as_json(report=True) for c in state.flags],
        "removed_symbols": list(state.removed_symbols),
        "blocks": {"before": outcome.blocks[0], "after": outcome.blocks[1]},
        "fences": outcome.fences,
        "check": outcome.check.as_json() if outcome.check is not None else None,
        "finished": outcome.finished,
        "stopped_at": outcome.stopped_at,
        "pending": outcome.pending,
        "accepted_errors": outcome.accepted,
    }
    if outcome.merged:
        data["merged"] = outcome.merged
    return data


def explained(conflict: Conflict) -> dict[str, object]:
    """A conflict's report entry with what upstream changed, its omni block and a suggested resolution."""
    data = conflict.as_json(report=True)
    tip = explain.suggest(conflict)
    data["explanation"] = {
        "upstream": report_parts.upstream_change(conflict),
        "block": explain.omni_block(conflict),
        "suggestion": explain.suggestion_json(tip),  # `pq status`'s, where the refresh is pending: `_write_reports`
        "moved": None,  # said where the refresh is pending (it reads the target's snapshot): `_write_reports`
    }
    return data
