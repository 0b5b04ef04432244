"""pq refresh: re-vendor the target, replay the series onto it, write once (the pending operation's machine:
:mod:`patch_queue.commands.machine`; going on and putting back: :mod:`patch_queue.commands.pending`); what a
finished refresh writes of its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from patch_queue.commands import machine
from patch_queue.commands.adopt import snapshot_pin
from patch_queue.commands.write import StepInfo, module_files, refuse_out_edits, refuse_unwritable_queue, sync_stack
from patch_queue.errors import QueueError
from patch_queue.fsutil import kill_point
from patch_queue.merge.conflict import Conflict, ConflictKind
from patch_queue.outputs import folder as output
from patch_queue.progress import Progress, bar, say
from patch_queue.project import operation
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import LoadedStack, Workspace
from patch_queue.series import culprits, replay, rerere, stack
from patch_queue.series.queue import Queue, UpstreamPin, render_queue
from patch_queue.sources import registry
from patch_queue.sources.snapshot import Snapshot, named_release, release_snapshot, resolve_upstream

if TYPE_CHECKING:  # pq sync-gpu is imported where it runs: only `refresh --sync-gpu` reads the GPU runners
    from patch_queue.commands.sync_gpu import SyncOutcome


@dataclass
class Refreshed:
    """What `pq refresh` did: the operation's outcome and, with ``--sync-gpu``, the `pq sync-gpu` that followed a
    clean refresh, or the line that says why it waits."""

    outcome: machine.Outcome
    synced: SyncOutcome | None = None
    sync_waits: str = ""


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


def refuse_older(queue: Queue, to: str | None, shown: str) -> tuple[str, registry.Version] | None:
    """Rule 3, no command takes the series backwards: a release of the upstream older than the release the series
    is on is refused before anything is downloaded (the newest one too, when the index lags behind).  A commit, a
    ref or a folder is taken as named: pq cannot order it against a release, and naming one is the deliberate way
    back.  The release ``to`` names when the series is on one (the newest one read from the index), else None."""
    pinned = registry.parse_release(queue.upstream.spec) if queue.upstream.kind == "release" else None
    target = named_release(to, queue.spec) if pinned is not None else None
    if pinned is None or target is None:
        return None
    (name, version), (pinned_name, held) = target, pinned
    if registry.normalize_name(name) == registry.normalize_name(pinned_name) and version.key < held.key:
        raise QueueError(
            f"{pinned_name} {version.text} is older than {pinned_name} {held.text}, the release the series is on: a "
            f"refresh does not take the series back (`pq undo` takes one back; to replay the series onto "
            f"{version.text} deliberately, name its tag or commit: `pq refresh --to v{version.text}`)",
            path=shown,
        )
    return target


NEWER_TRIED = 4  # releases below the newest read for the newest that still has the upstream file


def refuse_release_without_file(
    queue: Queue,
    release: tuple[str, registry.Version],
    snapshot: Snapshot,
    *,
    newest: bool,
    progress: Progress | None = None,
) -> None:
    """One line when the release a refresh goes to has no file the series copies (upstream removed or moved it):
    for the default target, the newest release, it names the newest of the :data:`NEWER_TRIED` below it (and above
    the series' own) that still has them, the release to name with ``--to``."""
    missing = [p for p in queue.upstream_paths() if not snapshot.exists(p)]
    if not missing:
        return
    name, version = release
    what = (
        f"{registry.normalize_name(name)} {version.text}{', the newest release,' if newest else ''} has no "
        f"{missing[0]}, the file the series copies {queue.spec.upstream_class} from (upstream removed or moved it)"
    )
    held = registry.parse_release(queue.upstream.spec)
    found = ""
    if newest and held is not None:
        from patch_queue.sources import release_search

        window = release_search.release_window(name)
        parsed = [registry.parse_version(v) for v in window.versions]
        below = [v.text for v in parsed if v is not None and held[1].key < v.key < version.key]
        for candidate in reversed(below[-NEWER_TRIED:]):
            if release_search.file_blob(name, candidate, missing[0], progress)[0]:
                found = candidate
                break
    if found:
        raise QueueError(f"{what}; the newest release that has it is {found}: `pq refresh --to {name}=={found}`")
    raise QueueError(f"{what}: refresh onto a release that has it with --to {name}==VERSION")


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
    check_import: bool | None = None,
    discard: bool = False,
    reports: tuple[Path | None, Path | None] = (None, None),
    annotations: bool = False,
    accept_errors: bool = False,
    sync_gpu: bool = False,
) -> Refreshed:
    """``reports``: the JSON and Markdown report paths, written (with the flags of the ports of ``sync_gpu``) and
    kept for `pq continue` to rewrite; ``annotations``: the report's workflow commands in the outcome;
    ``accept_errors``: a result without conflicts is finished over the errors of `pq check` (else they leave the
    refresh pending); ``sync_gpu``: `pq sync-gpu` after a clean refresh (with conflicts it waits)."""
    outcome = _refresh(
        ws,
        to=to,
        no_stop=no_stop,
        upstream_git=upstream_git,
        progress=progress,
        on_patch=on_patch,
        check=check,
        check_sources=check_sources,
        check_import=check_import,
        discard=discard,
        reports=machine.report_paths(ws, *reports),
        accept_errors=accept_errors,
    )
    done = Refreshed(outcome)
    if sync_gpu and outcome.state.conflicts:
        done.sync_waits = "sync-gpu skipped: the refresh left conflicts; resolve them, then run `pq sync-gpu`"
    elif sync_gpu and outcome.check_pending:
        done.sync_waits = (
            "sync-gpu skipped: pq check's errors keep the refresh pending; fix them, then run `pq sync-gpu`"
        )
    elif sync_gpu:
        from patch_queue.commands import sync_gpu as sync

        done.synced = sync.do_sync_gpu(ws, omni=None, since=None, upstream_git=upstream_git, progress=progress)
    reported = outcome  # the report lists the flags of the ports too
    if done.synced is not None:
        reported = replace(outcome, state=replace(outcome.state, flags=outcome.state.flags + tuple(done.synced.flags)))
    outcome.annotations = machine.write_reports(ws, reported, annotations)
    return done


def _refresh(
    ws: Workspace,
    *,
    to: str | None,
    no_stop: bool,
    upstream_git: str | None,
    progress: Progress | None,
    on_patch: Callable[[replay.PatchResult], None] | None,
    check: bool,
    check_sources: bool,
    check_import: bool | None,
    discard: bool,
    reports: tuple[str, str],
    accept_errors: bool,
) -> machine.Outcome:
    """The refresh itself: replayed, and finished or stopped (:func:`machine.advance`)."""
    operation.refuse_pending(ws, "a refresh is already in progress; `pq continue` or `pq abort` it first")
    refuse_unwritable_queue(ws)
    dropped = refuse_out_edits(ws, discard=discard)
    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    say(progress, f"Resolving {to or f'the newest {loaded.queue.spec.upstream_dist} release'} ...")
    release = refuse_older(loaded.queue, to, ws.rel(ws.queue_dir.queue_path))
    if release is not None:  # read once from the index: the release itself, not a folder of its name
        snapshot = release_snapshot(release[0], release[1].text, progress)
    else:
        snapshot = resolve_upstream(to, upstream_git=upstream_git, progress=progress, queue=loaded.queue.spec)
    kill_point("after-download")
    if release is not None:
        refuse_release_without_file(loaded.queue, release, snapshot, newest=to is None, progress=progress)
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
            progress=machine.killable(on_patch, shown, len(loaded.patches)),
            normalize=machine.normalizer(target, ws.repo, loaded.patches),
            recorded=store.lookup,
            edited=machine.edit_lookup(ws, store, target),
            imports=machine.import_sync(target, loaded.patches),
        )
    removed = list(projection.missing)
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
        queue=loaded.queue.spec,
    )
    begun = operation.Operation(
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
        blocks_before=machine.count_blocks(module_files(ws, loaded.patches[-1][1]) if loaded.patches else {}),
        check=check,
        check_sources=check_sources,
        check_import=check_import,
        upstream_git=upstream_git,
        upstream_commits=(loaded.queue.upstream.public_commit, target.upstream.public_commit),
        # recorded regions or edits were applied: the finished refresh records its edits (see _merge_edits)
        recorded=any(f.kind in (ConflictKind.REUSED, ConflictKind.RECORDED_EDITS) for f in flags),
        discarded=output.discarded(dropped),
        reports=reports,
        culprits_note=note,
    )
    state = machine.start(ws, begun)
    return machine.advance(
        ws, state, target, results, own=finish_refresh, progress=progress, store=store, accept_errors=accept_errors
    )


def _mark_removed(conflicts: list[Conflict], removed: list[str]) -> list[Conflict]:
    """Conflicts over a carried symbol that upstream removed or renamed are that kind."""
    gone = [r.split(": ", 1)[1].split(".")[-1] for r in removed]
    out = []
    for c in conflicts:
        for name in gone:
            head = f"def {name}("
            if head in (c.base or "") and head not in (c.ours or ""):
                message = f"upstream removed or renamed {name}, which this patch carries; port the omni edits"
                c = replace(c, kind=ConflictKind.SYMBOL_REMOVED, message=message)
                break
        out.append(c)
    return out


def finish_refresh(
    ws: Workspace,
    state: operation.Operation,
    target: Queue,
    writes: Writes,
    command: str,
    store: rerere.Store,
    accepted: list[str],
) -> tuple[LoadedStack, StepInfo, str | None]:
    """The refresh's own writes when it finishes (:func:`machine.finish` writes the rest): its recorded edits.
    The series it leaves, its lineage step (with the errors of `pq check` it finished over) and the old top."""
    patches = state.patches
    new_patches = [(n, c) for n, c, _s in state.done]
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
    return loaded, step, patches[-1][1] if patches else None


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
    normalize = machine.normalizer(target, ws.repo, old)
    imports = machine.import_sync(target, old)
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
