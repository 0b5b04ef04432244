"""Editing the series: pq new, record, push, pop, accept."""

from __future__ import annotations

import re

from patch_queue.commands.write import StepInfo, finish, module_files, refuse_out_edits, sync_stack, write_series
from patch_queue.errors import PqError, QueueError
from patch_queue.fsutil import read_folder
from patch_queue.git.repo import Person
from patch_queue.outputs import folder as output
from patch_queue.project.journal import Writes
from patch_queue.project.refresh_state import refuse_pending
from patch_queue.project.workspace import LoadedStack, Workspace, applied_count, base_for_queue
from patch_queue.series import absorb, lineage, patchfile, replay, rerere, stack
from patch_queue.series.queue import render_queue


def do_accept(ws: Workspace, *, upstream_git: str | None, discard: bool = False) -> int:
    """Take the patch bodies in patches/ as they are (hand edits included) as a lineage step of their own.

    Returns how many bodies differ from the last step.  Such a step cannot be reproduced without
    the bodies: a fork that commits them is where it belongs.
    """
    refuse_pending(ws)
    queue = ws.queue_dir.load_queue()
    names = ws.queue_dir.load_series()
    bodies = [(n, (ws.queue_dir.root / n).read_bytes()) for n in names]
    last = dict(queue.lineage[-1].patches) if queue.lineage else {}
    changed = sum(1 for n, b in bodies if last.get(n) != stack.sha256(b)) + len(set(last) - set(names))
    refuse_out_edits(ws, discard=discard)
    base, missing = base_for_queue(ws, queue, upstream_git=upstream_git)
    if missing:
        raise QueueError(
            "carried symbols missing at the pinned upstream: " + "; ".join(missing),
            path=ws.rel(ws.queue_dir.queue_path),
        )
    loaded = LoadedStack(queue, base, stack.import_series(ws.repo, queue, base, bodies))
    top = module_files(ws, loaded.top())
    step = lineage.step_of("import", "accept", bodies, upstream=queue.upstream)
    new_queue = lineage.with_step(queue, step, top)
    writes = Writes(ws, "accept")
    writes.write(ws.queue_dir.queue_path, render_queue(new_queue).encode(), group="patches")
    finish(ws, loaded, writes, len(loaded.patches))
    return changed


def do_new(ws: Workspace, name: str, *, message: str | None, upstream_git: str | None) -> str:
    """A new patch above the applied ones holding the edits of the output folder that no patch holds.

    Like ``git commit``: edit ``npu_worker/`` first, then ``pq new NAME``; ``pq record`` folds
    later edits into it.  An empty patch is refused, since git format-patch has no form for it.
    """
    refuse_pending(ws)
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-").removesuffix(".patch")
    if not slug:
        raise QueueError(f"{name!r} is not a usable patch name")
    if any(n.split("-", 1)[-1] == f"{slug}.patch" for n in loaded.names):
        raise QueueError(f"a patch named {slug} already exists")
    filename = f"{len(loaded.patches) + 1:04d}-{slug}.patch"
    if not ws.repo.valid_ref(stack.REF_PATCHES + filename):
        raise QueueError(f"{name!r} makes no valid patch name ({filename} is no git ref name); choose another")
    parent = loaded.top(applied)
    info = ws.repo.commit_info(parent)
    work = _work_edits(ws, loaded, parent)
    if not work:
        raise QueueError(f"nothing to put in a new patch: edit {ws.rel(ws.out)}/ first, then `pq new {name}`")
    files = {**ws.repo.read_tree(info.tree), **work}
    person = Person("pq user", "pq@localhost", info.author.time, 0)
    commit = ws.repo.commit(ws.repo.write_tree(files), [parent], (message or slug) + "\n", person, person)
    # the new patch goes right above the applied ones; unapplied ones stay after it
    names = loaded.patches[:applied] + [(filename, commit)] + loaded.patches[applied:]
    rebuilt = _rechain(ws, loaded, names, applied)
    write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), applied + 1, "new")
    return filename


def write_edit(ws: Workspace, old: LoadedStack, new: LoadedStack, applied: int, command: str) -> None:
    """Write an edited series: bodies, refs, the output folder, and a lineage step whose changed bodies
    are recorded edits (so the step is reproducible without the bodies)."""
    old_bodies = stack.export_series(ws.repo, old.patches)
    changes = [(n, old_bodies.get(n, b""), body) for n, body in stack.export_series(ws.repo, new.patches).items()]
    changes = [(n, before, after) for n, before, after in changes if before != after]
    store = rerere.Store(ws.repo)
    store.record_edits(changes, f"pq {command}: edits recorded\n")
    writes = Writes(ws, command)
    writes.move_refs(store.ref_update())
    write_series(ws, new, writes=writes, step=StepInfo("edit", command, edited=tuple(n for n, _b, _a in changes)))
    finish(ws, new, writes, applied)


def _work_edits(ws: Workspace, loaded: LoadedStack, top: str) -> dict[str, bytes]:
    """The module files of the output folder that differ from what pq wrote there (the maintainer's edits)."""
    built = module_files(ws, top)
    written = output.manifest(ws.out)
    changed = {e.file for e in output.edits(ws.out, built)}
    out: dict[str, bytes] = {}
    for rel, data in sorted(read_folder(ws.out).items()):
        if rel == output.MANIFEST or (rel in written and rel not in changed) or built.get(rel) == data:
            continue
        line = replay.has_markers(data)
        if line is not None:
            raise QueueError("conflict markers remain", path=ws.rel(ws.out / rel), line=line)
        if loaded.queue.module(rel) is None:
            raise QueueError("is not an output module listed in queue.toml", path=ws.rel(ws.out / rel))
        out[rel] = data
    for rel in sorted(changed - set(out)):
        if not (ws.out / rel).is_file():
            raise QueueError(
                "was deleted; pq records edits, not deletions of modules (`pq build` puts it back)",
                path=ws.rel(ws.out / rel),
            )
    return out


def _rechain(ws: Workspace, loaded: LoadedStack, patches: list[tuple[str, str]], applied: int) -> list[tuple[str, str]]:
    """Re-parent the unapplied tail after an insertion (cherry-pick; must be clean)."""
    out = patches[: applied + 1]
    parent = out[-1][1]
    labels = (f"base {loaded.queue.upstream.label}", "stack")
    for name, commit in patches[applied + 1 :]:
        res = replay.replay_patch(ws.repo, name, commit, parent, labels=labels)
        if res.conflicts:
            raise QueueError(f"{name} no longer applies after this change; nothing was changed")
        out.append((name, res.commit))
        parent = res.commit
    return out


def do_record(ws: Workspace, *, upstream_git: str | None, into: str | None = None) -> list[absorb.Placement]:
    """Put the maintainer's edits of the output files into the applied patches that own their lines
    (all into ``into`` when given); returns where each edit went ([] when there was none)."""
    refuse_pending(ws)
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    if not applied:
        raise QueueError("no patch is applied; `pq push` or `pq new NAME` first")
    if into is not None and into not in loaded.names:
        into = next((n for n in loaded.names if replay.patch_key(n) == replay.patch_key(into)), into)
    work = _work_edits(ws, loaded, loaded.top(applied))
    if not work:
        return []
    absorbed, placements = absorb.absorb(ws.repo, loaded.base, loaded.patches[:applied], work, into=into)
    rebuilt = _rechain(ws, loaded, absorbed + loaded.patches[applied:], applied - 1)
    write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), applied, "record")
    return placements


def do_push_pop(
    ws: Workspace, *, push: bool, all_: bool, upstream_git: str | None, discard: bool = False
) -> tuple[int, int, str]:
    """Apply or unapply patches; returns (applied before, after, what --discard dropped)."""
    refuse_pending(ws)
    dropped = output.discarded(refuse_out_edits(ws, discard=discard))
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    if push:
        if applied == len(loaded.patches):
            raise QueueError("all patches are applied")
        target = len(loaded.patches) if all_ else applied + 1
    else:
        if applied == 0:
            raise QueueError("no patch is applied")
        target = 0 if all_ else applied - 1
    finish(ws, loaded, Writes(ws, "push" if push else "pop"), target)
    return applied, target, dropped


def patch_subject(ws: Workspace, name: str) -> str:
    try:
        return patchfile.parse((ws.queue_dir.root / name).read_bytes(), path=f"patches/{name}").subject
    except PqError:
        return "?"
