"""pq refresh: re-vendor the target, replay the series onto it, write once; the report's JSON."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from patch_queue.commands.adopt import snapshot_pin
from patch_queue.commands.write import (
    REF_PREVIOUS,
    REF_REFRESH,
    StepInfo,
    finish,
    module_files,
    refuse_links,
    refuse_out_edits,
    sync_stack,
    write_series,
)
from patch_queue.errors import PqError
from patch_queue.fsutil import kill_point, read_folder
from patch_queue.git.diff import line_hunks, move_line
from patch_queue.git.repo import ProjectRepo
from patch_queue.merge import anchors, explain, markers
from patch_queue.merge.conflict import Conflict
from patch_queue.outputs import folder as output
from patch_queue.progress import Bar, Progress, bar, say, timed
from patch_queue.project import refresh_state
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import (
    REF_JOURNAL,
    LoadedStack,
    Workspace,
)
from patch_queue.series import culprits, fmt, patchfile, replay, rerere, stack
from patch_queue.series.queue import Queue, UpstreamPin, render_queue
from patch_queue.sources.snapshot import resolve_upstream

if TYPE_CHECKING:  # pq check and the absorption of edits are imported where they run: `refresh --no-check` skips them
    from patch_queue.commands.check import CheckOutcome
    from patch_queue.series import absorb


@dataclass
class RefreshOutcome:
    base_label: str
    target_label: str
    results: list[replay.PatchResult]
    conflicts: list[Conflict]
    removed_symbols: list[str]
    finished: bool  # the whole series was replayed (conflicts may remain with --no-stop)
    stopped_at: str | None = None
    flags: list[Conflict] = field(default_factory=list)
    blocks: tuple[int, int] = (0, 0)  # omni blocks before / after
    fences: list[dict[str, object]] = field(default_factory=list)  # Omni-new fence problems in the output
    upstream_commits: tuple[str, ...] = ("", "")
    downstream: tuple[str, str] = ("", "")
    out: str = "npu_worker"
    check: CheckOutcome | None = None  # pq check on the result, once the series is through without conflicts
    placements: list[absorb.Placement] = field(default_factory=list)  # where `pq continue` put edits
    discarded: str = ""  # what --discard dropped from the output folder
    reports: tuple[str, str] = ("", "")  # the JSON and Markdown reports of this refresh ("": none)
    culprits_note: str = ""  # between which upstream commits the culprits were searched, or why not
    check_pending: bool = False  # the series is through, but the errors of `pq check` keep the refresh pending
    accepted: list[str] = field(default_factory=list)  # the errors of `pq check` it finished over (--accept-errors)
    written: bool = True  # False: nothing was written (`pq continue` over check errors; a merge with nothing to merge)
    merged: str = ""  # a merge (pq merge): the release it takes in

    @property
    def pending(self) -> bool:
        """The refresh waits for `pq continue` (conflicts left, or errors of `pq check`) or `pq abort`."""
        return bool(self.conflicts) or self.check_pending or not self.finished


def target_queue(queue: Queue, pin: UpstreamPin, read: Callable[[str], bytes]) -> tuple[Queue, stack.Projection]:
    """``queue`` moved onto ``pin`` and its projection; carried symbols gone upstream leave the layout."""
    target = replace(queue, upstream=pin)
    projection = stack.project_modules(target, read, label=pin.label)
    if projection.missing:
        gone = set(projection.missing)
        modules = tuple(
            replace(m, symbols=tuple(s for s in m.symbols if f"{m.path}: {s}" not in gone)) for m in target.modules
        )
        target = replace(target, modules=modules)
    return target, projection


def do_refresh(
    ws: Workspace,
    *,
    to: str | None,
    no_stop: bool,
    upstream_git: str | None,
    progress: Progress | None = None,
    on_patch: Callable[[replay.PatchResult], None] | None = None,
    check: bool = True,
    check_sources: bool = True,
    discard: bool = False,
    reports: tuple[str, str] = ("", ""),
    accept_errors: bool = False,
) -> RefreshOutcome:
    """``reports``: the JSON and Markdown report paths, kept for `pq continue` to rewrite; ``accept_errors``: a
    result without conflicts is finished over the errors of `pq check` (else they leave the refresh pending)."""
    refresh_state.refuse_pending(ws, "a refresh is already in progress; `pq continue` or `pq abort` it first")
    refuse_links(ws, ws.out, patches=True)
    dropped = refuse_out_edits(ws, discard=discard)
    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    say(progress, f"Resolving {to or 'the newest vllm-ascend release'} ...")
    snapshot = resolve_upstream(to, upstream_git=upstream_git, progress=progress)
    kill_point("after-download")
    pin = snapshot_pin(snapshot, loaded.queue.upstream.name, loaded.queue.upstream_paths())
    target, projection = target_queue(loaded.queue, pin, snapshot.read)
    new_base = stack.base_commit(ws.repo, target, projection)
    new_files = projection.files
    labels = (f"base {loaded.queue.upstream.label}", f"upstream {snapshot.label}")
    store = rerere.Store(ws.repo)
    with bar(f"Replaying onto {snapshot.label}") as shown:
        results = replay.replay(
            ws.repo,
            loaded.patches,
            new_base,
            labels=labels,
            stop=not no_stop,
            progress=_killable(on_patch, shown, len(loaded.patches)),
            normalize=normalizer(target, ws.repo, loaded.patches),
            recorded=store.lookup,
            edited=edit_lookup(ws, store, target),
            imports=import_sync(target, loaded.patches),
        )
    removed = list(projection.missing)
    orig = {
        k: v
        for k, v in ws.repo.refs().items()
        if not k.startswith((REF_REFRESH, rerere.REMOTES)) and k not in (rerere.REF, REF_JOURNAL)
    }
    conflicts = _mark_removed([c for r in results for c in r.conflicts], removed)
    flags = [c for r in results for c in r.flags]
    say(progress, "Naming the upstream commits behind each conflict and flag ...")
    vendored = stack.VENDOR + (sorted(loaded.queue.upstream.files) or [""])[0]
    named, note = culprits.annotate(
        conflicts + flags,
        loaded.queue.upstream,
        target.upstream,
        upstream_git=upstream_git,
        progress=progress,
        files=(ws.repo.read_tree(ws.repo.commit_info(loaded.base).tree).get(vendored), new_files.get(vendored)),
    )
    state = refresh_state.RefreshState(
        orig_refs=orig,
        orig_out=ws.repo.write_tree(read_folder(ws.out)),  # kept by a ref while the refresh is open
        orig_queue=ws.queue_dir.queue_path.read_text(encoding="utf-8"),
        old_base_label=loaded.queue.upstream.label,
        target_queue=render_queue(target),
        new_base=new_base,
        labels=labels,
        patches=tuple(loaded.patches),
        done=tuple((r.name, r.commit, r.status) for r in results),
        no_stop=no_stop,
        removed_symbols=tuple(removed),
        conflicts=tuple(named[: len(conflicts)]),
        flags=tuple(named[len(conflicts) :]),
        blocks_before=count_blocks(module_files(ws, loaded.patches[-1][1]) if loaded.patches else {}),
        check=check,
        check_sources=check_sources,
        upstream_git=upstream_git,
        upstream_commits=(loaded.queue.upstream.public_commit, target.upstream.public_commit),
        # recorded regions or edits were applied: the finished refresh records its edits (see _merge_edits)
        recorded=any(f.kind in ("reused", "recorded-edits") for f in flags),
        discarded=output.discarded(dropped),
        reports=reports,
        culprits_note=note,
    )
    return advance(ws, state, target, results, progress=progress, store=store, accept_errors=accept_errors)


def _mark_removed(conflicts: list[Conflict], removed: list[str]) -> list[Conflict]:
    """Conflicts over a carried symbol that upstream removed or renamed are that kind."""
    gone = [r.split(": ", 1)[1].split(".")[-1] for r in removed]
    out = []
    for c in conflicts:
        for name in gone:
            head = f"def {name}("
            if head in (c.base or "") and head not in (c.ours or ""):
                message = f"upstream removed or renamed {name}, which this patch carries; port the omni edits"
                c = replace(c, kind="symbol-removed", message=message)
                break
        out.append(c)
    return out


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
    return replay.Imports(modules, queue.line_length, patches[-1][1])


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


def advance(
    ws: Workspace,
    state: refresh_state.RefreshState,
    target: Queue,
    results: list[replay.PatchResult],
    *,
    progress: Progress | None,
    command: str = "refresh",
    store: rerere.Store,
    placements: list[absorb.Placement] | None = None,
    accept_errors: bool = False,
) -> RefreshOutcome:
    """Finish the refresh if the series is through and `pq check` finds no error in the result (or
    ``accept_errors``), else record the stop.

    Every file and ref (refs/pq/resolutions, where ``store`` recorded resolutions and edits,
    included) is written once, through one journaled :class:`Writes`: a kill at any point leaves
    the old state or, after ``pq continue``, the new one (``pq abort`` puts the old one back).
    Only a checked result is finished: with errors of `pq check`, `pq refresh` leaves the refresh
    pending (the output folder holds the result, `pq continue` goes on once they are fixed) and
    `pq continue` writes nothing (its findings are at their lines in the output folder as it is).
    """
    writes = Writes(ws, command)
    patches, done, conflicts = state.patches, state.done, list(state.conflicts)
    finished = len(done) == len(patches)
    new_patches = [(n, c) for n, c, _s in done]
    top_files = module_files(ws, new_patches[-1][1]) if new_patches else {}
    outcome = RefreshOutcome(
        base_label=state.old_base_label,
        target_label=target.upstream.label,
        results=results,
        conflicts=conflicts,
        removed_symbols=list(state.removed_symbols),
        finished=finished,
        flags=list(state.flags),
        blocks=(state.blocks_before, count_blocks(top_files)),
        fences=fence_problems(top_files),
        upstream_commits=state.upstream_commits,
        downstream=(target.downstream_name, target.downstream_release),
        out=ws.rel(ws.out),
        placements=placements or [],
        discarded=state.discarded,
        reports=state.reports,
        culprits_note=state.culprits_note,
        merged=state.merging.release if state.merging is not None else "",
    )
    if finished and not conflicts:
        old_top = patches[-1][1] if patches else None
        if state.check:
            outcome.check = _check_result(ws, state, target, top_files, old_top, progress)
        errors = [f for f in outcome.check.findings if f.severity == "error"] if outcome.check else []
        if errors and not accept_errors:
            outcome.check_pending = True
            if command == "continue":  # nothing written: the maintainer fixes the files on disk and continues again
                assert outcome.check is not None
                outcome.check = on_disk_findings(ws, top_files, outcome.check)
                outcome.written = False
                return outcome
            state = replace(state, check_errors=tuple((f.file, f.line, f.rule, f.message) for f in errors))
        else:
            outcome.accepted = [f.render() for f in errors]
            if state.merging is not None:  # a finished merge is one command `pq undo` takes back
                from patch_queue.commands import merge

                writes = Writes(ws, "merge", undoable=True)
                merged = merge.finish_merge(ws, state, writes, command, store, outcome.accepted)
                outcome.downstream = (merged.downstream_name, merged.downstream_release)
            else:
                _finish_refresh(ws, state, target, new_patches, writes, command, store, outcome.accepted)
            return outcome
    # stopped (or finished with conflicts under --no-stop, or over errors of pq check): keep everything needed
    # to go on or back
    top = new_patches[-1][1] if new_patches else state.new_base
    holder = ws.repo.commit(
        state.orig_out, [], f"pq {state.operation}: saved output folder\n", stack.PERSON, stack.PERSON
    )
    wanted = {REF_REFRESH + "top": top, REF_REFRESH + "base": state.new_base, REF_REFRESH + "saved-out": holder}
    writes.move_refs({ref: (ws.repo.ref(ref), value) for ref, value in wanted.items()})
    writes.move_refs(store.ref_update())
    writes.write(ws.state_dir / refresh_state.STATE_FILE, state.bytes(), group="state")
    output.sync(ws.out, module_files(ws, top), writes)
    writes.commit()
    outcome.stopped_at = done[-1][0] if done and done[-1][2] == "conflict" and not finished else None
    return outcome


def _check_result(
    ws: Workspace,
    state: refresh_state.RefreshState,
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
    return CheckOutcome(moved, result.reference, result.files, result.sources)


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


def _finish_refresh(
    ws: Workspace,
    state: refresh_state.RefreshState,
    target: Queue,
    new_patches: list[tuple[str, str]],
    writes: Writes,
    command: str,
    store: rerere.Store,
    accepted: list[str],
) -> None:
    """Write the finished refresh: its recorded edits, the series and its lineage step (with the errors of
    `pq check` it finished over), refs/pq/, the output folder; the refresh state goes."""
    patches = state.patches
    loaded = LoadedStack(target, state.new_base, new_patches)
    edits: list[rerere.Edit] = []
    if command == "continue" or state.recorded:
        edits = _merge_edits(ws, target, list(patches), new_patches, state.new_base, state.labels)
        store.record_edits(edits, f"pq {command}: edits recorded\n")
    writes.move_refs(store.ref_update())
    step = StepInfo(
        "refresh",
        command,
        target.upstream,
        edited=tuple(e.name for e in edits),
        accepted=tuple(accepted),
        bases=tuple((e.name, stack.sha256(e.before)) for e in edits),
    )
    write_series(ws, loaded, writes=writes, step=step)
    old_top = patches[-1][1] if patches else None
    if old_top is not None and old_top != new_patches[-1][1]:
        writes.move_refs({REF_PREVIOUS: (ws.repo.ref(REF_PREVIOUS), old_top)})
    writes.write(ws.state_dir / refresh_state.STATE_FILE, None, group="state")
    writes.move_refs({ref: (value, None) for ref, value in ws.repo.refs().items() if ref.startswith(REF_REFRESH)})
    finish(ws, loaded, writes, len(new_patches))


def edit_lookup(ws: Workspace, store: rerere.Store, queue: Queue) -> replay.Edited | None:
    """Recorded edits of a patch's merge result, as the commit they make (see rerere.Store.lookup_edit)."""
    if not store.has_edits():
        return None
    patches = store.edited_patches()

    def edited(name: str, merged: str) -> str | None:
        if name not in patches:  # then no edit is recorded for any body of it: skip writing this one
            return None
        after = store.lookup_edit(name, stack.export_patch(ws.repo, merged))
        if after is None:
            return None
        shown = f"patches/{name}"
        parent = ws.repo.commit_info(merged).parents[0]
        return stack.commit_patch(ws.repo, parent, patchfile.parse(after, path=shown), queue, path=shown)

    return edited


def _merge_edits(
    ws: Workspace,
    target: Queue,
    old: list[tuple[str, str]],
    final: list[tuple[str, str]],
    new_base: str,
    labels: tuple[str, str],
) -> list[rerere.Edit]:
    """The edit of every patch whose final body is not its plain merge (from the merge to the final commit).

    The plain merge is the one a later refresh from the same inputs computes before it looks for
    recorded edits: each old patch merged onto the final patch below it, no recorded regions.
    """
    normalize = normalizer(target, ws.repo, old)
    imports = import_sync(target, old)
    out = []
    parent = new_base
    for (name, old_commit), (_name, commit) in zip(old, final, strict=True):
        merged = replay.replay_patch(
            ws.repo, name, old_commit, parent, labels=labels, normalize=normalize, imports=imports
        )
        if merged.commit != commit:
            before, after = stack.export_patches(ws.repo, [merged.commit, commit])
            if before != after:
                was, now = (ws.repo.read_tree(ws.repo.commit_info(c).tree) for c in (merged.commit, commit))
                out.append(rerere.Edit(name, before, after, was, now, ws.repo.commit_info(commit)))
        parent = commit
    return out


def _killable(
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


def report_json(outcome: RefreshOutcome) -> dict[str, object]:
    """The refresh report (format 2; the schema is described in patch_queue/outputs/report.py)."""
    return {
        "format": 2,
        "upstream": {
            "base": outcome.base_label,
            "target": outcome.target_label,
            "base_commit": outcome.upstream_commits[0],
            "target_commit": outcome.upstream_commits[-1],
            "culprits": outcome.culprits_note,
        },
        "downstream": {"name": outcome.downstream[0], "release": outcome.downstream[1]},
        "out": outcome.out,
        "patches": [{"name": r.name, "status": r.status} for r in outcome.results],
        "conflicts": [explained(c) for c in outcome.conflicts],
        "flags": [c.as_json(report=True) for c in outcome.flags],
        "removed_symbols": outcome.removed_symbols,
        "blocks": {"before": outcome.blocks[0], "after": outcome.blocks[1]},
        "fences": outcome.fences,
        "check": outcome.check.as_json() if outcome.check is not None else None,
        "finished": outcome.finished,
        "stopped_at": outcome.stopped_at,
        "pending": outcome.pending,
        "accepted_errors": outcome.accepted,
    }


def explained(conflict: Conflict) -> dict[str, object]:
    """A conflict's report entry with what upstream changed, its omni block and a suggested resolution."""
    data = conflict.as_json(report=True)
    tip = explain.suggest(conflict)
    data["explanation"] = {
        "upstream": explain.upstream_change(conflict),
        "block": explain.omni_block(conflict),
        "suggestion": None if tip is None else {"side": tip.side, "reason": tip.reason, "text": tip.text},
    }
    return data
