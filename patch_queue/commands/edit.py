"""Editing the series: pq new, record, push, pop, goto, delete, rename, show, diff, accept."""

from __future__ import annotations

import difflib
import re
import shlex
from pathlib import Path

from patch_queue.commands.write import (
    StepInfo,
    finish,
    module_files,
    refuse_out_edits,
    standalone,
    sync_stack,
    write_series,
)
from patch_queue.errors import PqError, QueueError
from patch_queue.fsutil import read_folder
from patch_queue.git.diff import line_hunks
from patch_queue.git.repo import Person, ProjectRepo
from patch_queue.outputs import folder as output
from patch_queue.project.journal import Writes
from patch_queue.project.operation import refuse_pending
from patch_queue.project.workspace import LoadedStack, Workspace, applied_count, base_for_queue, load_stack
from patch_queue.series import absorb, lineage, patchfile, replay, rerere, stack
from patch_queue.series.queue import render_queue
from patch_queue.sync import translation


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
    writes = Writes(ws, "accept", undoable=True)
    writes.write(ws.queue_dir.queue_path, render_queue(new_queue).encode(), group="patches")
    finish(ws, loaded, writes, len(loaded.patches))
    return changed


def do_new(ws: Workspace, name: str, *, message: str | None, upstream_git: str | None) -> str:
    """A new patch above the applied ones holding the edits of the output folder that no patch holds.

    Like ``git commit``: edit ``npu_worker/`` first, then ``pq new NAME``; ``pq record`` folds
    later edits into it.  With no edits it is an empty patch (as ``stg new`` makes): its body is the
    mail header and the message without a diff, the form ``git format-patch --always`` writes.
    """
    refuse_pending(ws)
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    slug = _new_slug(loaded, name)
    numbers = [int(n.split("-", 1)[0]) for n in loaded.names if n.split("-", 1)[0].isdigit()]
    filename = f"{max(numbers, default=0) + 1:04d}-{slug}.patch"  # after a delete too, no number twice
    parent = loaded.top(applied)
    info = ws.repo.commit_info(parent)
    work = _work_edits(ws, loaded, parent)
    files = {**ws.repo.read_tree(info.tree), **work}
    person = Person("pq user", "pq@localhost", info.author.time, 0)
    commit = ws.repo.commit(ws.repo.write_tree(files), [parent], (message or slug) + "\n", person, person)
    # the new patch goes right above the applied ones; unapplied ones stay after it
    names = loaded.patches[:applied] + [(filename, commit)] + loaded.patches[applied:]
    rebuilt = _rechain(ws, loaded, names, applied + 1)
    write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), applied + 1, "new")
    return filename


def _new_slug(loaded: LoadedStack, name: str, *, renaming: str | None = None) -> str:
    """The slug of a new patch name (the file is ``NNNN-<slug>.patch``); StGit's errors for a taken or bad one."""
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-").removesuffix(".patch")
    if not slug or slug != name.removesuffix(".patch"):
        raise QueueError(f"invalid patch name `{name}` (letters, digits and . _ + - only)")
    if not ProjectRepo.valid_ref(f"{stack.REF_PATCHES}0000-{slug}.patch"):
        raise QueueError(f"invalid patch name `{name}` (git takes no ref of that name: `..`, `.lock`, a final `.`)")
    for n in loaded.names:
        key = replay.patch_key(n)
        if key == slug:
            raise QueueError(f"patch `{slug}` already exists ({n})", path="patches/series")
        if key.lower() == slug.lower() and n != renaming:  # file names that differ in case only
            raise QueueError(f"new name `{slug}` collides with `{key}` ({n})", path="patches/series")
    return slug


def named_or_top(loaded: LoadedStack, applied: int, name: str | None) -> int:
    """The position of ``name``, or of the top applied patch when it is None (StGit's default)."""
    if name is None:
        if not applied:
            raise QueueError("no patches applied")
        return applied - 1
    return find_patch(loaded, name)


def find_patch(loaded: LoadedStack, name: str) -> int:
    """The series position of the patch ``name``: its file name, with or without ``.patch``, or without its
    number (``0005-foo.patch``, ``0005-foo``, ``foo``); StGit's error when there is none."""
    for exact in (name, name + ".patch"):
        if exact in loaded.names:
            return loaded.names.index(exact)
    found = [i for i, n in enumerate(loaded.names) if replay.patch_key(n) == replay.patch_key(name)]
    if len(found) == 1:
        return found[0]
    similar = [n for n in loaded.names if name and name in n]
    hint = f", but is similar to {', '.join(similar[:5])}" if similar else ""
    raise QueueError(f"patch `{name}` does not exist{hint}", path="patches/series")


def write_edit(
    ws: Workspace,
    old: LoadedStack,
    new: LoadedStack,
    applied: int,
    command: str,
    files: dict[Path, bytes] | None = None,
    downstream: str = "",
) -> None:
    """Write an edited series: bodies, refs, the output folder, and a lineage step whose changed bodies
    are recorded edits (so the step is reproducible without the bodies); ``files``: more files of the series
    folder the command writes with them (undone with them); ``downstream``: the release the step moves
    ``new``'s downstream pin to (``name==version``)."""
    old_bodies = stack.export_series(ws.repo, old.patches)
    old_commits = dict(old.patches)
    changes = []
    for (name, commit), after in zip(new.patches, stack.export_series(ws.repo, new.patches).values(), strict=True):
        before = old_bodies.get(name, b"")
        if before == after:
            continue
        info = ws.repo.commit_info(commit)
        # the stack at this patch before the edit: its old commit, or for a patch the command made, its parent
        was = ws.repo.commit_info(old_commits.get(name, info.parents[0])).tree
        changes.append(rerere.Edit(name, before, after, ws.repo.read_tree(was), ws.repo.read_tree(info.tree), info))
    store = rerere.Store(ws.repo)
    store.record_edits(changes, f"pq {command}: edits recorded\n")
    writes = Writes(ws, command, undoable=True)
    writes.move_refs(store.ref_update())
    for path, data in (files or {}).items():
        writes.write(path, data, group="patches")
    edited = tuple(e.name for e in changes)
    bases = tuple((e.name, stack.sha256(e.before)) for e in changes)
    step = StepInfo("edit", command, downstream=downstream, edited=edited, bases=bases)
    write_series(ws, new, writes=writes, step=step)
    finish(ws, new, writes, applied)


def _work_edits(ws: Workspace, loaded: LoadedStack, top: str) -> dict[str, bytes]:
    """The module files of the output folder that differ from what pq wrote there (the maintainer's edits)."""
    built = module_files(ws, top)
    written = output.manifest(ws.out)
    changed = {e.file for e in output.edits(ws.out, built)}
    package = output.standalone_package(ws.out)
    pointed = standalone(built, package) if package else built
    out: dict[str, bytes] = {}
    for rel, data in sorted(read_folder(ws.out).items()):
        if package and rel in built and rel in changed:  # the edits only: not the standalone build's imports
            data = _edits_onto(built[rel], pointed[rel], data)
        if rel == output.MANIFEST or (rel in written and rel not in changed) or built.get(rel) == data:
            continue
        line = replay.has_markers(data)
        if line is not None:
            raise QueueError("conflict markers remain", path=ws.rel(ws.out / rel), line=line)
        if loaded.queue.module(rel) is None:
            raise QueueError("is not an output module listed in queue.toml", path=ws.rel(ws.out / rel))
        output.refuse_binary(data, ws.rel(ws.out / rel))
        out[rel] = data
    for rel in sorted(changed - set(out)):
        if not (ws.out / rel).is_file():
            raise QueueError(
                "was deleted; pq records edits, not deletions of modules (`pq build` puts it back)",
                path=ws.rel(ws.out / rel),
            )
    return out


def _edits_onto(plain: bytes, written: bytes, edited: bytes) -> bytes:
    """The maintainer's edits of ``written`` (a standalone build of ``plain``: the same lines, imports pointed
    elsewhere) made to ``plain`` instead."""
    lines, new = plain.splitlines(keepends=True), edited.splitlines(keepends=True)
    out: list[bytes] = []
    pos = 0
    for old_start, old_lines, new_start, new_lines in line_hunks(written, edited):
        out += lines[pos:old_start] + new[new_start : new_start + new_lines]
        pos = old_start + old_lines
    return b"".join(out + lines[pos:])


def _rechain(
    ws: Workspace, loaded: LoadedStack, patches: list[tuple[str, str]], keep: int, *, why: str = "after this change"
) -> list[tuple[str, str]]:
    """Keep the first ``keep`` patches and re-parent the rest onto them (cherry-pick; must be clean)."""
    out = patches[:keep]
    parent = out[-1][1] if out else loaded.base
    labels = (f"base {loaded.queue.upstream.label}", "stack")
    for name, commit in patches[keep:]:
        res = replay.replay_patch(ws.repo, name, commit, parent, labels=labels)
        if res.conflicts:
            c = res.conflicts[0]
            raise QueueError(
                f"no longer applies {why} (a conflict at {c.file}:{c.line}); nothing was changed",
                path=f"patches/{name}",
            )
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
    if into is not None:
        at = find_patch(loaded, into)
        if at >= applied:  # as `stg refresh -p`: only an applied patch takes the edits of the tree
            raise QueueError(
                f"patch `{into}` is not applied; `pq goto {shlex.quote(into)}` first", path="patches/series"
            )
        into = loaded.names[at]
    work = _work_edits(ws, loaded, loaded.top(applied))
    if not work:
        return []
    absorbed, placements = absorb.absorb(ws.repo, loaded.base, loaded.patches[:applied], work, into=into)
    rebuilt = _rechain(ws, loaded, absorbed + loaded.patches[applied:], applied)
    write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), applied, "record")
    return placements


def do_push_pop(
    ws: Workspace, *, push: bool, all_: bool, upstream_git: str | None, discard: bool = False, name: str | None = None
) -> tuple[int, int, str]:
    """Apply or unapply patches (the next / the top one, all, or up to and including ``name``); returns (applied
    before, after, what --discard dropped)."""
    refuse_pending(ws)
    dropped = output.discarded(refuse_out_edits(ws, discard=discard))
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    if name is not None:
        at = find_patch(loaded, name)
        if push and at < applied:
            raise QueueError(f"patch `{loaded.names[at]}` is already applied", path="patches/series")
        if not push and at >= applied:
            raise QueueError(f"patch `{loaded.names[at]}` is not applied", path="patches/series")
        target = at + 1 if push else at
    elif push:
        if applied == len(loaded.patches):
            raise QueueError("no unapplied patches")
        target = len(loaded.patches) if all_ else applied + 1
    else:
        if applied == 0:
            raise QueueError("no patches applied")
        target = 0 if all_ else applied - 1
    finish(ws, loaded, Writes(ws, "push" if push else "pop", undoable=True), target)
    return applied, target, dropped


def do_goto(ws: Workspace, name: str, *, upstream_git: str | None, discard: bool = False) -> tuple[int, int, str]:
    """Push or pop until ``name`` is the top patch (``stg goto``); returns (applied before, after, dropped)."""
    refuse_pending(ws)
    loaded = sync_stack(ws, upstream_git=upstream_git)
    at = find_patch(loaded, name)
    dropped = output.discarded(refuse_out_edits(ws, discard=discard))
    applied = applied_count(ws, loaded)
    finish(ws, loaded, Writes(ws, "goto", undoable=True), at + 1)
    return applied, at + 1, dropped


def do_delete(
    ws: Workspace, name: str | None, *, upstream_git: str | None, discard: bool = False
) -> tuple[str, str, list[translation.Decline]]:
    """Remove a patch from the series (``stg delete``; the top one with ``name`` None, as ``--top``); the
    patches above it are re-applied without it, each must still apply.  A ``sync-gpu-*`` patch's GPU changes
    are declined in ``patches/gpu-sync-rules.toml``, so ``pq sync-gpu`` does not port them again.  Returns (its
    name, dropped, the changes declined)."""
    refuse_pending(ws)
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    at = named_or_top(loaded, applied, name)
    gone = loaded.names[at]
    dropped = output.discarded(refuse_out_edits(ws, discard=discard))
    declined, files = _declined(ws, gone, ws.repo.commit_info(loaded.patches[at][1]).message)
    rest = loaded.patches[:at] + loaded.patches[at + 1 :]
    rebuilt = _rechain(ws, loaded, rest, at, why=f"without {gone}")
    new = LoadedStack(loaded.queue, loaded.base, rebuilt)
    write_edit(ws, loaded, new, applied - 1 if at < applied else applied, "delete", files)
    return gone, dropped, declined


def _declined(ws: Workspace, name: str, message: str) -> tuple[list[translation.Decline], dict[Path, bytes]]:
    """The GPU changes the ``sync-gpu-*`` patch ``name`` ported that the project does not decline yet, and the
    rules file that declines them too ({} when there are none)."""
    return translation.with_declines(ws.queue_dir.root, translation.declines_of(name, message))


def do_rename(
    ws: Workspace, old: str | None, new: str, *, upstream_git: str | None, discard: bool = False
) -> tuple[str, str, str]:
    """Rename a patch (``stg rename [OLD] NEW``; the top one without OLD): its file keeps its number and its
    body; returns (old file name, new file name, dropped)."""
    refuse_pending(ws)
    dropped = output.discarded(refuse_out_edits(ws, discard=discard))
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    at = named_or_top(loaded, applied, old)
    before = loaded.names[at]
    after = f"{before.split('-', 1)[0]}-{_new_slug(loaded, new, renaming=before)}.patch"
    patches = list(loaded.patches)
    patches[at] = (after, patches[at][1])
    write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, patches), applied, "rename")
    return before, after, dropped


def do_show(ws: Workspace, name: str | None, *, upstream_git: str | None) -> bytes:
    """The body of a patch (``stg show``; the top one without ``name``), as it is in patches/."""
    loaded = load_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    at = named_or_top(loaded, applied, name)
    return (ws.queue_dir.root / loaded.names[at]).read_bytes()


def do_diff(ws: Workspace, *, upstream_git: str | None) -> str:
    """The edits of the output folder that no patch holds, as a unified diff against the applied top (what
    ``pq record`` takes; ``stg diff`` shows the work tree against the top patch)."""
    loaded = load_stack(ws, upstream_git=upstream_git)
    built = module_files(ws, loaded.top(applied_count(ws, loaded)))
    have = {rel: data for rel, data in read_folder(ws.out).items() if rel != output.MANIFEST}
    out = ws.rel(ws.out)
    chunks = []
    for rel in sorted(set(built) | set(have)):
        a, b = built.get(rel), have.get(rel)
        if a == b:
            continue
        text = difflib.unified_diff(
            _lines(a),
            _lines(b),
            f"a/{out}/{rel}" if a is not None else "/dev/null",
            f"b/{out}/{rel}" if b is not None else "/dev/null",
        )
        chunks.append(f"diff --git a/{out}/{rel} b/{out}/{rel}\n" + "".join(text))
    return "".join(chunks)


def _lines(data: bytes | None) -> list[str]:
    lines = [] if data is None else data.decode("utf-8", "replace").splitlines(keepends=True)
    return [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]


def patch_subject(ws: Workspace, name: str) -> str:
    try:
        return patchfile.parse((ws.queue_dir.root / name).read_bytes(), path=f"patches/{name}").subject
    except PqError:
        return "?"
