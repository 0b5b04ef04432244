"""Editing the series: pq new, record, push, pop, goto, delete, rename, edit, squash, float, sink, import, show,
diff, accept."""

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
from patch_queue.outputs import folder as output
from patch_queue.project.journal import Writes
from patch_queue.project.operation import refuse_pending
from patch_queue.project.workspace import LoadedStack, Workspace, applied_count, base_for_queue, load_stack
from patch_queue.series import absorb, diffs, lineage, patchfile, replay, rerere, stack
from patch_queue.series.queue import cut_slug, name_problem, shown_name
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
    writes.write(ws.queue_dir.queue_path, ws.queue_dir.queue_bytes(new_queue), group="patches")
    finish(ws, loaded, writes, len(loaded.patches))
    return changed


def do_new(
    ws: Workspace, name: str, *, message: str | None, upstream_git: str | None, take_edits: bool = False
) -> tuple[str, int, int]:
    """A new, empty patch right above the applied ones (``stg new``); ``take_edits`` (``pq new --record``): holding
    the edits of the output folder that no patch holds (as ``git commit -a``).  Its author and date are git's
    (``git var GIT_AUTHOR_IDENT``: user.name/user.email, GIT_AUTHOR_*).  Without edits its body is the mail header
    and the message without a diff, the form ``git format-patch --always`` writes; the edits stay in the output
    folder for ``pq record``, which puts them into an empty top patch.  Returns (the file name, the files it
    took, the files of unrecorded edits left)."""
    refuse_pending(ws)
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    slug = _new_slug(loaded, name)
    parent = loaded.top(applied)
    info = ws.repo.commit_info(parent)
    work = _work_edits(ws, loaded, parent)
    taken = work if take_edits else {}
    person = ws.repo.author()
    text = (message or slug).strip()
    if not text:
        raise QueueError("the message is empty: pass -m MESSAGE (its first line is the subject)")
    tree = ws.repo.write_tree({**ws.repo.read_tree(info.tree), **taken})
    commit = ws.repo.commit(tree, [parent], text + "\n", person, person)
    filename = _insert(ws, loaded, applied, slug, commit, "new", build=bool(taken))
    return filename, len(taken), len(work) - len(taken)


def next_name(loaded: LoadedStack, slug: str) -> str:
    """The file name of a new patch: the next number (after a delete too, no number twice) and its slug."""
    numbers = [int(n.split("-", 1)[0]) for n in loaded.names if n.split("-", 1)[0].isdigit()]
    return f"{max(numbers, default=0) + 1:04d}-{slug}.patch"


def _insert(
    ws: Workspace, loaded: LoadedStack, applied: int, slug: str, commit: str, command: str, *, build: bool = True
) -> str:
    """Write the series with ``commit`` (on the top applied patch) as a new patch right above the applied ones,
    applied; the unapplied ones stay after it (each must still apply).  ``build``: write the output folder (not
    for a patch that changes nothing: the maintainer's unrecorded edits stay as they are)."""
    filename = next_name(loaded, slug)
    names = loaded.patches[:applied] + [(filename, commit)] + loaded.patches[applied:]
    rebuilt = _rechain(ws, loaded, names, applied + 1)
    write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), applied + 1, command, build=build)
    return filename


def _new_slug(loaded: LoadedStack, name: str, *, keeps: str | None = None, renaming: str | None = None) -> str:
    """The slug of a new patch name (the file is ``NNNN-<slug>.patch``: ``keeps``'s number, else the next one);
    StGit's errors for a taken or bad one, and the rule of every name (:func:`name_problem`)."""
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-").removesuffix(".patch")
    if not slug or slug != name.removesuffix(".patch"):
        raise QueueError(f"invalid patch name `{name}` (letters, digits and . _ + - only)")
    filename = f"{keeps.split('-', 1)[0]}-{slug}.patch" if keeps else next_name(loaded, slug)
    if problem := name_problem(filename):
        raise QueueError(f"invalid patch name {shown_name(name)}: the file name {problem}")
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
    *,
    build: bool = True,
) -> None:
    """Write an edited series: bodies, refs, the output folder (not without ``build``: for a change that leaves
    the top's modules as they are, so unrecorded edits stay), and a lineage step whose changed bodies
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
    finish(ws, new, writes, applied, build=build)


def _work_edits(ws: Workspace, loaded: LoadedStack, top: str) -> dict[str, bytes]:
    """The module files of the output folder that differ from what pq wrote there (the maintainer's edits)."""
    built = module_files(ws, top)
    written = output.manifest(ws.out)
    changed = {e.file for e in output.edits(ws.out, built)}
    package = output.standalone_package(ws.out)
    pointed = standalone(built, package, ws.spec) if package else built
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
    top = ws.repo.commit_info(loaded.patches[applied - 1][1])
    if into is None and top.tree == ws.repo.commit_info(top.parents[0]).tree:  # `pq new` then `pq record`
        into = loaded.names[applied - 1]  # as `stg refresh`: an empty top patch takes every edit
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
    after = f"{before.split('-', 1)[0]}-{_new_slug(loaded, new, keeps=before, renaming=before)}.patch"
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


def do_series(ws: Workspace, *, upstream_git: str | None) -> tuple[list[dict[str, object]], dict[str, object] | None]:
    """`pq series`: a row for each patch in order (name, state, applied, top, subject) and, while a merge is
    pending, the merge (its target and how many conflicts it has), which goes into the patches at `pq continue`."""
    from patch_queue.commands import resolve
    from patch_queue.project.operation import OperationKind
    from patch_queue.project.workspace import vanished
    from patch_queue.series.status import PatchStatus as S

    status = resolve.do_status(ws, upstream_git=upstream_git)
    rows = []
    for name, state in status.patches:
        try:
            subject = patch_subject(ws, name)
        except OSError as exc:  # removed by a `pq delete` since the listing: one line, not half a listing
            raise vanished(ws, ws.queue_dir.root / name, exc) from None
        applied = state in (S.APPLIED, S.MODIFIED, S.UNCHANGED, S.EMPTY)
        rows.append({"name": name, "state": str(state), "applied": applied, "top": False, "subject": subject})
    top = [r for r in rows if r["applied"]]
    if top and status.operation is not OperationKind.MERGE:
        top[-1]["top"] = True
    merge: dict[str, object] | None = None
    if status.operation is OperationKind.MERGE:
        merge = {"target": status.target, "conflicts": len(status.conflicts)}
    return rows, merge


def patch_subject(ws: Workspace, name: str) -> str:
    try:
        return patchfile.parse((ws.queue_dir.root / name).read_bytes(), path=f"patches/{name}").subject
    except PqError:
        return "?"


def _applied_after(patches: list[tuple[str, str]], applied: set[str]) -> int:
    """How many of ``patches`` are applied: up to the last one named in ``applied``."""
    return max((i + 1 for i, (name, _c) in enumerate(patches) if name in applied), default=0)


def _positions(loaded: LoadedStack, names: list[str]) -> list[int]:
    """The series position of each patch named, in the order given; one line for a patch named twice."""
    out: list[int] = []
    for name in names:
        at = find_patch(loaded, name)
        if at in out:
            raise QueueError(f"patch `{loaded.names[at]}` is named twice", path="patches/series")
        out.append(at)
    return out


def do_edit(ws: Workspace, name: str | None, message: str, *, upstream_git: str | None) -> tuple[str, bool]:
    """Give a patch (default the top one) another message (``stg edit -m``/``--file``): its body and the lineage
    change, its diff and every other patch's file stay.  Returns (its file name, whether the message changed)."""
    refuse_pending(ws)
    text = message.strip()
    if not text:
        raise QueueError("the message is empty (its first line is the patch's subject)")
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    at = named_or_top(loaded, applied, name)
    filename, commit = loaded.patches[at]
    info = ws.repo.commit_info(commit)
    reworded = ws.repo.commit(info.tree, list(info.parents), text + "\n", info.author, info.author)
    if reworded == commit:
        return filename, False
    patches = [*loaded.patches[:at], (filename, reworded), *loaded.patches[at + 1 :]]
    rebuilt = _rechain(ws, loaded, patches, at + 1)
    write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), applied, "edit", build=False)
    return filename, True


def do_squash(
    ws: Workspace,
    names: list[str],
    *,
    name: str | None,
    message: str | None,
    upstream_git: str | None,
    discard: bool = False,
) -> tuple[str, list[str], str]:
    """Squash two or more patches into one (``stg squash``): their changes applied in the order given, where the
    lowest of them stood, with the first one's author and message (``message``: another), named as the first
    one (``name``: another, with the first one's number); the patches above are applied again, each must still
    apply.  Returns (its file name, the files it replaced, what --discard dropped)."""
    refuse_pending(ws)
    if len(names) < 2:
        raise QueueError("squash needs two or more patches")
    dropped = output.discarded(refuse_out_edits(ws, discard=discard))
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    at = _positions(loaded, names)
    low = min(at)
    gone = [loaded.names[i] for i in at]
    parent = loaded.patches[low - 1][1] if low else loaded.base
    labels = (f"base {loaded.queue.upstream.label}", "the patches squashed before it")
    tip = parent
    for i in at:
        res = replay.replay_patch(ws.repo, loaded.names[i], loaded.patches[i][1], tip, labels=labels)
        if res.conflicts:
            c = res.conflicts[0]
            raise QueueError(
                f"does not apply onto the patches squashed before it (a conflict at {c.file}:{c.line}); "
                "nothing was changed: squash them in another order",
                path=f"patches/{loaded.names[i]}",
            )
        tip = res.commit
    first = ws.repo.commit_info(loaded.patches[at[0]][1])
    if message is None:  # StGit's template holds every message: here, the first one's, then the others'
        message = "\n\n".join(ws.repo.commit_info(loaded.patches[i][1]).message.strip() for i in at)
    text = message.strip()
    if not text:
        raise QueueError("the message is empty (its first line is the patch's subject)")
    filename = gone[0]
    if name is not None and replay.patch_key(name) not in {replay.patch_key(g) for g in gone}:
        filename = f"{gone[0].split('-', 1)[0]}-{_new_slug(loaded, name, keeps=gone[0])}.patch"
    elif name is not None:
        filename = next(g for g in gone if replay.patch_key(g) == replay.patch_key(name))
    tree = ws.repo.commit_info(tip).tree
    squashed = ws.repo.commit(tree, [parent], text + "\n", first.author, first.author)
    rest = [p for i, p in enumerate(loaded.patches) if i > low and i not in at]
    rebuilt = _rechain(ws, loaded, [*loaded.patches[:low], (filename, squashed), *rest], low + 1)
    on = set(loaded.names[:applied]) - set(gone) | ({filename} if min(at) < applied else set())
    write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), _applied_after(rebuilt, on), "squash")
    return filename, gone, dropped


def do_move(
    ws: Workspace,
    names: list[str],
    *,
    to_top: bool,
    below: str | None = None,
    upstream_git: str | None,
    discard: bool = False,
) -> tuple[list[str], int, str]:
    """Move patches, in the order given, to the top of the applied ones (``stg float``, ``to_top``) or to the bottom
    of the series, or right below the applied patch ``below`` (``stg sink [--to]``); each ends applied, and every
    patch they pass is applied again, each must still apply.  Returns (the patches moved, how many are applied
    after it, what --discard dropped)."""
    refuse_pending(ws)
    dropped = output.discarded(refuse_out_edits(ws, discard=discard))
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    if not names:
        names = [loaded.names[named_or_top(loaded, applied, None)]]
    at = _positions(loaded, names)
    moving = [loaded.patches[i] for i in at]
    others = [p for i, p in enumerate(loaded.patches) if i not in at]
    on = set(loaded.names[:applied]) | {n for n, _c in moving}
    if to_top:
        lower = [p for p in others if p[0] in on]
        order = lower + moving + others[len(lower) :]
    else:
        pos = 0
        if below is not None:
            target = find_patch(loaded, below)
            if target in at or target >= applied:
                why = "is one of the patches to sink" if target in at else "is not applied"
                raise QueueError(f"patch `{loaded.names[target]}` {why}", path="patches/series")
            pos = others.index(loaded.patches[target])
        order = others[:pos] + moving + others[pos:]
    keep = next((i for i, (a, b) in enumerate(zip(order, loaded.patches, strict=True)) if a != b), len(order))
    moved = [n for n, _c in moving]
    if keep == len(order) and _applied_after(order, on) == applied:
        return moved, applied, dropped
    rebuilt = _rechain(ws, loaded, order, keep, why=f"once {', '.join(moved)} moved")
    count = _applied_after(rebuilt, on)
    write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), count, "float" if to_top else "sink")
    return moved, count, dropped


def _import_name(path: Path) -> str:
    """The patch name a file gives (``0003-fix-the-thing.patch``: ``fix-the-thing``), as ``stg import`` takes it,
    made to fit the rule of names (no ``..``, a long one cut)."""
    stem = re.sub(r"\.(patch|diff)$", "", path.name)
    slug = re.sub(r"\.\.+", ".", re.sub(r"[^A-Za-z0-9._+-]+", "-", re.sub(r"^\d+-", "", stem)))
    return cut_slug(slug.strip("-.")) or "imported"


def do_import(
    ws: Workspace,
    path: Path,
    *,
    name: str | None,
    message: str | None,
    upstream_git: str | None,
    discard: bool = False,
) -> tuple[str, list[str], str]:
    """Make a patch file of ``git format-patch`` (its author, date and message) or a git diff (``git diff``,
    ``pq diff``: git's author, ``message`` or the name) a new patch above the applied ones (``stg import``).  Its
    paths may be those of the output folder (``npu_worker/x.py``), of the downstream package
    (``vllm_omni/platforms/npu/worker/x.py``) or the modules' own; it applies exactly (no fuzz) onto the top
    applied patch.  Returns (its file name, the modules it changes, what --discard dropped)."""
    refuse_pending(ws)
    shown = str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise QueueError(f"cannot be read ({exc.strerror or exc})", path=shown) from None
    dropped = output.discarded(refuse_out_edits(ws, discard=discard))
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    mail: patchfile.PatchFile | None = None
    if data.startswith(b"From "):
        mail = patchfile.parse(data, path=shown)
        diff = mail.parsed(shown)
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise QueueError(f"not UTF-8 text (byte 0x{data[exc.start]:02x})", path=shown, line=line) from None
        lines = text.splitlines(keepends=True)
        start = next((i for i, line in enumerate(lines) if line.startswith("diff --git ")), None)
        if start is None:
            raise QueueError("holds no git diff (no `diff --git` line) and is no `git format-patch` file", path=shown)
        diff = diffs.parse_diff("".join(lines[start:]), path=shown, first_line=start + 1)
    touched = diff.touched()
    if not touched:
        raise QueueError("changes nothing (an empty patch is `pq new`)", path=shown)
    prefixes = [f"{ws.rel(ws.out)}/", f"{loaded.queue.package}/", ""]
    prefix = next(
        (p for p in prefixes if all(t.startswith(p) and loaded.queue.module(t[len(p) :]) for t in touched)), None
    )
    if prefix is None:
        fits = [t for t in touched if any(t.startswith(p) and loaded.queue.module(t[len(p) :]) for p in prefixes)]
        bad = next((t for t in touched if t not in fits), touched[0])
        raise QueueError(
            f"changes {bad}, which is not a module of {ws.rel(ws.out)}/ (queue.toml lists the modules)", path=shown
        )
    parent = loaded.top(applied)
    files = ws.repo.read_tree(ws.repo.commit_info(parent).tree)
    modules = {prefix + k: v for k, v in files.items() if not k.startswith(stack.VENDOR)}
    for where, after in diff.apply(modules, patch_path=shown).items():
        rel = where[len(prefix) :]
        if after is None:
            files.pop(rel, None)
        else:
            output.refuse_binary(after, f"{ws.rel(ws.out)}/{rel}")
            files[rel] = after
    slug = _new_slug(loaded, name if name is not None else _import_name(path))
    if mail is not None:
        person = stack.parse_person(mail.author, mail.date, path=shown)
        text = message or stack.message_of(mail)
    else:
        person = ws.repo.author()
        text = message or slug
    if not text.strip():
        raise QueueError("the message is empty: pass -m MESSAGE (its first line is the subject)", path=shown)
    commit = ws.repo.commit(ws.repo.write_tree(files), [parent], text.strip() + "\n", person, person)
    filename = _insert(ws, loaded, applied, slug, commit, "import")
    return filename, sorted(t[len(prefix) :] for t in touched), dropped
