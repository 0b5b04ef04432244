"""pq merge: take a newer release of the downstream (the maintainers' own NPU runners) into the series.

The series has two lines of descent: upstream (a refresh re-vendors a newer vllm-ascend) and the
downstream (the vllm-omni maintainers keep editing the NPU runners by hand in every release).  A
merge takes the downstream's change since the release the series last took in (the adopted one, or
the last merged one: the ancestor) into the series as it stands now, refreshed, recorded and edited,
three-way: the ancestor's runners, the series' output, the release's runners.

It is the refresh's machine with one patch: the release's change is a commit (the ancestor's
modules -> the release's, on the vendored tree of the series' top), replayed onto the top of the
series with the same anchor-aware merge, recorded resolutions and conflict regions (the series'
side first, the release's side last), stopped and gone on with by ``pq continue``, put back by
``pq abort`` (:mod:`patch_queue.commands.machine`, :mod:`patch_queue.commands.pending`).  Once it is
through, the merged modules go into the patches that own their lines, by blame over the stack as
``pq record`` puts edits (:func:`patch_queue.series.absorb.absorb`); a module new in the release
becomes a new patch (and a ``[[module]]``), one the release removed leaves every patch.  The lineage
records a ``merge`` step (the release, its modules' sha256, the ancestor, the body its recorded
resolution was made on), which ``pq reproduce`` replays (:func:`reproduce_merge`); the downstream pin
moves to the release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from patch_queue import presets
from patch_queue.commands import machine
from patch_queue.commands.adopt import author, read_downstream, release_modules
from patch_queue.commands.write import (
    StepInfo,
    module_files,
    refuse_out_edits,
    refuse_unwritable_queue,
    require_all_applied,
    sync_stack,
)
from patch_queue.errors import QueueError
from patch_queue.git.repo import ProjectRepo
from patch_queue.merge.conflict import Conflict, ConflictKind
from patch_queue.outputs import folder as output
from patch_queue.progress import Progress, say
from patch_queue.project import operation
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import LoadedStack, Workspace
from patch_queue.series import absorb, replay, rerere, stack
from patch_queue.series.queue import PLACED_BY_METHOD, Module, Queue, Step, cut_slug, render_queue
from patch_queue.sources import registry
from patch_queue.spec import QueueSpec


@dataclass(frozen=True)
class Release:
    """A release (or folder) of the downstream's NPU runners."""

    spec: str  # "name==version", or the folder's path
    version: str  # "" for a folder
    files: dict[str, bytes]  # module -> text

    @property
    def label(self) -> str:
        name, sep, version = self.spec.partition("==")
        return f"{name} {version}" if sep else f"folder {self.spec}"

    def digests(self) -> tuple[tuple[str, str], ...]:
        return tuple((path, stack.sha256(data)) for path, data in sorted(self.files.items()))


def release_version(queue: Queue, spec: str) -> registry.Version | None:
    """The version of the release of the series' downstream ``spec`` names (``X`` or ``name==X``); None for a
    folder (an existing folder is one whatever its path holds: ``./x==1/npu``).  Anything else, another package's
    release too, is one line before anything is read: the door every command taking a downstream release goes
    through."""
    if Path(spec).is_dir():
        return None
    release = registry.parse_release(spec)
    name, version = release if release is not None else (queue.downstream_name, registry.parse_version(spec.strip()))
    if version is None:
        raise QueueError(
            f"{spec!r} is neither a release of {queue.downstream_name} (X or {queue.downstream_name}==X) nor a folder"
        )
    if registry.normalize_name(name) != registry.normalize_name(queue.downstream_name):
        raise QueueError(f"{name} is not {queue.downstream_name}, the downstream of the series")
    return version


def read_release(queue: Queue, spec: str, progress: Progress | None = None) -> Release:
    """The runner modules of ``spec``: a release ``X`` / ``name==X`` of the series' downstream, or a folder."""
    version = release_version(queue, spec)
    if version is None:
        files = read_downstream(spec, progress, queue.spec).modules
        return Release(str(Path(spec)), "", files)
    files = release_modules(queue.downstream_name, version.text, progress, queue.spec)
    return Release(f"{queue.downstream_name}=={version.text}", version.text, files)


def last_taken(queue: Queue) -> tuple[int, str]:
    """The lineage step (1-based) that last took a release of the downstream in (adopt or merge), and which."""
    for i in range(len(queue.lineage), 0, -1):
        step = queue.lineage[i - 1]
        if step.kind in ("adopt", "merge"):
            return i, step.downstream
    return 0, ""


def held_release(queue: Queue) -> tuple[registry.Version, str] | None:
    """The release of the downstream the series holds, and what makes it so: the newer of the release it last took
    in (adopt or merge) and its pin (which ``pq sync-gpu`` moves forward); None for a series of a folder."""
    step_no, taken = last_taken(queue)
    last = registry.parse_release(taken) if taken else None
    pin = registry.parse_version(queue.downstream_release) if queue.downstream_release else None
    if last is not None and (pin is None or last[1].key >= pin.key):
        return last[1], f"the release the series last took in (lineage step {step_no})"
    return None if pin is None else (pin, "the release the series holds (its [downstream] release)")


def refuse_backwards(
    queue: Queue, version: registry.Version | None, shown: str, why: str, since: registry.Version | None = None
) -> None:
    """Rule 3: no command takes the series backwards.  A release of the downstream (``version``; None: a folder,
    which cannot be ordered) older than the one the series holds, or than the release ``--since`` names (``since``:
    the change would run backwards), is refused before anything is read; ``why``: what taking it would do."""
    name = queue.downstream_name
    for floor in (held_release(queue), None if since is None else (since, "the release --since names")):
        if version is not None and floor is not None and version.key < floor[0].key:
            raise QueueError(
                f"{name} {version.text} is older than {name} {floor[0].text}, {floor[1]}: {why}", path=shown
            )


@dataclass(frozen=True)
class Planned:
    """The merge's one patch, ready to replay onto the top of the series."""

    name: str  # the patch's name: the release's label
    commit: str  # the release's change (the ancestor's modules -> the release's), on the series' vendored tree
    labels: tuple[str, str]  # (the ancestor, the series) as the diff3 markers name them


def plan(repo: ProjectRepo, loaded: LoadedStack, since: Release, release: Release) -> Planned:
    """The release's change as one commit whose parent holds the ancestor's modules, on the vendored tree of the
    series' top (so the replay's merge sees only the modules)."""
    top = loaded.top()
    vendored = {p: d for p, d in repo.read_tree(repo.commit_info(top).tree).items() if p.startswith(stack.VENDOR)}
    # dated as the series' top: git format-patch of two sibling commits dated 0 lists their parent instead
    person = repo.commit_info(top).author
    before = repo.commit(repo.write_tree({**vendored, **since.files}), [top], f"{since.label}\n", person, person)
    message = f"{release.label}: {presets.runners(loaded.queue.spec)}\n"
    after = repo.commit(repo.write_tree({**vendored, **release.files}), [before], message, person, person)
    labels = (f"base {since.label}", f"series on {loaded.queue.upstream.label}")
    return Planned(release.label, after, labels)


def target_queue(queue: Queue, release: Release, merged: dict[str, bytes]) -> Queue:
    """``queue`` with the downstream pin on ``release`` (a folder leaves it) and a module for each of ``merged``
    (the modules after the merge: a new one is omni-only, a removed one leaves)."""
    modules = [m for m in queue.modules if m.path in merged]
    modules += [Module(path, "", ()) for path in sorted(merged) if queue.module(path) is None]
    target = replace(queue, modules=tuple(sorted(modules, key=lambda m: m.path)))
    if release.version:
        target = replace(target, downstream_release=release.version)
    return target


def wide_queue(queue: Queue, release: Release) -> Queue:
    """``queue`` listing the release's modules too: the layout a recorded resolution of the merge applies in."""
    names = {m.path: b"" for m in queue.modules} | dict.fromkeys(release.files, b"")
    return target_queue(queue, release, names)


def into_series(
    repo: ProjectRepo,
    base: str,
    chain: list[tuple[str, str]],
    merged: dict[str, bytes],
    release_label: str,
    spec: QueueSpec,
    by_method: Queue | None = None,
) -> list[tuple[str, str]]:
    """The series ``chain`` (on ``base``) holding ``merged`` (module -> text after the merge): each change of a
    module it has goes into the patch that owns the lines (:func:`absorb.absorb`), a module it lacks becomes a
    new patch on top (by the contributors of the queue ``spec``'s downstream), one ``merged`` lacks leaves every
    patch (a patch left empty leaves the series).  With ``by_method`` (the queue after the merge; a merge step's
    ``placed``), the release's edits of a carried upstream method then leave the skeleton for the patch that
    carries the method (:func:`absorb.relocate`): the top stays as it is."""
    top = repo.read_tree(repo.commit_info(chain[-1][1]).tree)
    modules = {p for p in top if not p.startswith(stack.VENDOR)}
    gone = sorted(modules - set(merged))
    if gone:
        chain = _without(repo, base, chain, gone)
    # a release's edits of upstream lines go to the skeleton first, as the merge steps of an older pq put them
    # (reproducing its lineage replays this very placement); by method below
    chain, _placements = absorb.absorb(
        repo, base, chain, {p: d for p, d in merged.items() if p in modules}, by_method=False
    )
    names = {n for n, _c in chain}
    for path in sorted(set(merged) - modules):
        slug = cut_slug(re.sub(r"[^A-Za-z0-9]+", "-", path.removesuffix(".py")).strip("-").lower()) or "module"
        number, name, k = len(chain) + 1, "", 1
        while not name or name in names:
            name = f"{number:04d}-{slug}{'' if k == 1 else f'-{k}'}.patch"
            k += 1
        files = repo.read_tree(repo.commit_info(chain[-1][1]).tree)
        files[path] = merged[path]
        message = f"{path}: new in {release_label}\n\nThe module as the maintainers wrote it, taken in by `pq merge`.\n"
        person = author(spec)
        chain.append((name, repo.commit(repo.write_tree(files), [chain[-1][1]], message, person, person)))
        names.add(name)
    if by_method is not None:
        chain, _moved = absorb.relocate(repo, base, chain, by_method)
    return chain


def _without(repo: ProjectRepo, base: str, chain: list[tuple[str, str]], gone: list[str]) -> list[tuple[str, str]]:
    """``chain`` with the modules ``gone`` removed from every patch; a patch that then changes nothing leaves."""
    out: list[tuple[str, str]] = []
    parent = base
    parent_tree = repo.read_tree(repo.commit_info(base).tree)
    for name, commit in chain:
        info = repo.commit_info(commit)
        files = {p: d for p, d in repo.read_tree(info.tree).items() if p not in gone}
        if files == parent_tree:
            continue
        parent = stack.commit_files(repo, parent, files, info)
        parent_tree = files
        out.append((name, parent))
    if not out:
        raise QueueError(f"the merge removes every module the series holds ({', '.join(gone)})")
    return out


def do_merge(
    ws: Workspace,
    spec: str | None,
    *,
    since: str | None = None,
    upstream_git: str | None,
    progress: Progress | None = None,
    check: bool = True,
    check_sources: bool = True,
    check_import: bool | None = None,
    discard: bool = False,
    reports: tuple[Path | None, Path | None] = (None, None),
    annotations: bool = False,
    accept_errors: bool = False,
) -> machine.Outcome:
    """Merge ``spec`` (default: the newest release of the downstream on the registry, pre-releases included) into
    the series; the refresh's outcome (``merged`` names the release; nothing to merge: ``merged`` and no
    ``results``, and no report).  ``reports``, ``annotations``, ``check_import``: as for `pq refresh`."""
    operation.refuse_pending(ws, "a refresh is in progress; `pq continue` or `pq abort` it first")
    refuse_unwritable_queue(ws)
    dropped = refuse_out_edits(ws, discard=discard)
    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    queue = loaded.queue
    require_all_applied(ws, loaded, "the merge goes into the whole series")
    step_no, held = last_taken(queue)
    ancestor = since or held
    if not ancestor:
        kind = queue.lineage[step_no - 1].kind if step_no else "adopt"
        raise QueueError(
            f"the series was {'adopted from' if kind == 'adopt' else 'last merged with'} a folder (lineage step "
            f"{step_no}): name the release (or folder) its NPU runners are with --since",
            path=ws.rel(ws.queue_dir.queue_path),
        )
    if spec is None:
        say(progress, f"Resolving the newest {queue.downstream_name} release ...")
        spec = registry.newest_release(queue.downstream_name)
    shown = ws.rel(ws.queue_dir.queue_path)
    old_v = release_version(queue, ancestor)  # a bad spec or an older release: refused before anything is read
    refuse_backwards(queue, release_version(queue, spec), shown, "nothing to merge", old_v if since else None)
    say(
        progress, f"Reading {presets.runners(queue.spec)} of {spec} and of {ancestor}, the release the series holds ..."
    )
    release = read_release(queue, spec, progress)
    old = read_release(queue, ancestor, progress)
    if release.files == old.files:  # nothing written; the outcome names the release by its label
        nothing = operation.Merging(release.label, release.version, old.spec, release.digests(), loaded.base, ())
        state = operation.Operation(
            old_base_label=queue.upstream.label, discarded=output.discarded(dropped), merging=nothing
        )
        return machine.Outcome(state, queue, [], out=ws.rel(ws.out), written=False)
    planned = plan(ws.repo, loaded, old, release)
    store = rerere.Store(ws.repo)
    results = replay.replay(
        ws.repo,
        [(planned.name, planned.commit)],
        loaded.top(),
        labels=planned.labels,
        stop=True,
        recorded=store.lookup,
        edited=machine.edit_lookup(ws, store, wide_queue(queue, release)),
    )
    for r in results:  # the merge's sides are the series (first) and the release (last): its messages say so
        r.conflicts, r.flags = [_relabel(c) for c in r.conflicts], [_relabel(c) for c in r.flags]
    # pq check reads the release's sources; the layout follows the merged modules (again once resolved)
    target = target_queue(queue, release, module_files(ws, results[-1].commit))
    flags = [c for r in results for c in r.flags]
    begun = operation.Operation(
        old_base_label=queue.upstream.label,
        target_queue=render_queue(target),
        new_base=loaded.top(),
        labels=planned.labels,
        patches=((planned.name, planned.commit),),
        done=tuple((r.name, r.commit, r.status) for r in results),
        no_stop=False,
        conflicts=tuple(c for r in results for c in r.conflicts),
        flags=tuple(flags),
        blocks_before=machine.count_blocks(module_files(ws, loaded.top())),
        check=check,
        check_sources=check_sources,
        check_import=check_import,
        upstream_git=upstream_git,
        upstream_commits=(queue.upstream.public_commit, queue.upstream.public_commit),
        recorded=any(f.kind in (ConflictKind.REUSED, ConflictKind.RECORDED_EDITS) for f in flags),
        discarded=output.discarded(dropped),
        reports=machine.report_paths(ws, *reports),
        merging=operation.Merging(
            release.spec,
            release.version,
            old.spec if old.version else "",  # a folder's path is this machine's: not recorded
            release.digests(),
            loaded.base,
            tuple(loaded.patches),
        ),
    )
    state = machine.start(ws, begun)
    outcome = machine.advance(
        ws,
        state,
        target,
        results,
        own=finish_merge,
        progress=progress,
        command="merge",
        store=store,
        accept_errors=accept_errors,
    )
    outcome.downstream_before = (queue.downstream_name, queue.downstream_release)
    outcome.annotations = machine.write_reports(ws, outcome, annotations)
    return outcome


_SIDES = (
    ("the omni patch's", "the release's"),
    ("the omni patch", "the release"),
    ("the omni copy", "the release's copy"),
    ("the omni text", "the release's text"),
    ("the omni insertion", "the release's insertion"),
    ("an omni change", "a change of the release"),
    ("an omni insertion", "an insertion of the release"),
    ("upstream's", "the series'"),
    ("upstream", "the series"),
)


def _relabel(finding: Conflict) -> Conflict:
    """A finding of the refresh's merge worded for a merge: its first side is the series, its last the release."""
    message = finding.message
    for old, new in _SIDES:
        message = message.replace(old, new)
    return replace(finding, message=message)


def finish_merge(
    ws: Workspace,
    state: operation.Operation,
    target: Queue,
    writes: Writes,
    command: str,
    store: rerere.Store,
    accepted: list[str],
) -> tuple[LoadedStack, StepInfo, str | None]:
    """The merge's own writes when it finishes (:func:`machine.finish` writes the rest): its recorded resolution.
    The series it leaves (the merged modules in the patches that own their lines), its lineage step and the top
    of the series as it stood.  ``target`` is not read: the queue left is the state's, laid out anew over the
    merged modules as resolved."""
    m = state.merging
    assert m is not None
    name, synthetic = state.patches[0]
    result = state.done[-1][1]
    merged = module_files(ws, result)
    resolved = ""
    if command == "continue" or state.recorded:  # the resolution, from the plain merge to the result
        plain = replay.replay_patch(ws.repo, name, synthetic, state.new_base, labels=state.labels)
        if plain.commit != result:
            before, after = stack.export_patches(ws.repo, [plain.commit, result])
            if before != after:
                was, now = (ws.repo.read_tree(ws.repo.commit_info(c).tree) for c in (plain.commit, result))
                edit = rerere.Edit(name, before, after, was, now, ws.repo.commit_info(result))
                store.record_edits([edit], f"pq {command}: the resolution of the merge of {name} recorded\n")
                resolved = stack.sha256(before)
    writes.move_refs(store.ref_update())
    release = Release(m.release, m.version, merged)
    queue = target_queue(state.target(), release, merged)
    chain = into_series(ws.repo, m.base, list(m.chain), merged, name, queue.spec, by_method=queue)
    step = StepInfo(
        "merge",
        command,
        downstream=m.release if m.version else "",
        accepted=tuple(accepted),
        since=m.since if registry.parse_release(m.since) else "",  # "" for a folder (an older pq's state: its path)
        files=m.files,
        resolved=resolved,
        placed=PLACED_BY_METHOD,
    )
    return LoadedStack(queue, m.base, chain), step, m.chain[-1][1] if m.chain else None


def reproduce_merge(
    repo: ProjectRepo,
    loaded: LoadedStack,
    step: Step,
    edited: replay.Edited,
    progress: Progress | None,
) -> tuple[LoadedStack, str, replay.PatchResult]:
    """The merge ``step`` replayed onto ``loaded``: both releases read again (the release's modules checked against
    the step's sha256), the release's change replayed onto the top with ``edited`` (the step's recorded
    resolution), put into the patches; the stack, the merge's name and its replayed result (conflicts left are the
    caller's to refuse)."""
    release = read_release(loaded.queue, step.downstream, progress)
    if release.digests() != step.files:
        got = dict(release.digests())
        bad = next((p for p, d in step.files if got.get(p) != d), sorted(got)[0] if got else "")
        raise QueueError(f"{release.label}: {bad} is not the module the step records (its sha256 differs)")
    old = read_release(loaded.queue, step.since, progress)
    planned = plan(repo, loaded, old, release)
    result = replay.replay(
        repo, [(planned.name, planned.commit)], loaded.top(), labels=planned.labels, stop=True, edited=edited
    )[0]
    merged = {
        p: d for p, d in repo.read_tree(repo.commit_info(result.commit).tree).items() if not p.startswith(stack.VENDOR)
    }
    queue = target_queue(loaded.queue, release, merged)
    # where the step put the release's edits of carried methods: a step an older pq recorded, in the skeleton
    by_method = queue if step.placed == PLACED_BY_METHOD else None
    chain = into_series(repo, loaded.base, list(loaded.patches), merged, planned.name, queue.spec, by_method=by_method)
    return LoadedStack(queue, loaded.base, chain), planned.name, result
