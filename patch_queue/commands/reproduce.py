"""``pq reproduce``: rebuild the patch bodies from the lineage in ``queue.toml``, or stop at the first that fails.

This repository commits ``queue.toml`` and ``series`` but not the patch bodies (they are
vllm-omni and vllm-ascend code).  The lineage is their recipe: adopt the origin release at its
upstream commit, then replay every step in order: a refresh onto its pinned target (the same
merge, then the maintainer's recorded edits from ``refs/pq/resolutions``), an edit (the recorded
edits of the bodies it changed).  A step applies the recorded edits of its own ``edited`` patches
only, each the one made on the body its ``bases`` names (an edit recorded by a later step is
never applied early).  Every body is checked against the sha256 the step records, then the built
modules against ``[build]``.

Where this pq's merge gives another body than the lineage records (a newer pq, another
formatter), the recorded edits are merged three-way onto the new merge result (see
:meth:`patch_queue.series.rerere.Store.onto`) and the steps after it replayed on what that
gives; each body that differs is said, and queue.toml then records the bodies reproduced.  Only
a recorded edit that conflicts with the new merge, one that is missing, or a conflict the edits
do not resolve stops it (exit 1, one line naming the patch and the lines).  Nothing is written
unless the whole lineage reproduces; then patches/, refs/pq/ and the output folder (and
queue.toml, when a body differs) are written in one journaled step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from patch_queue.commands import adopt, machine, merge, refresh, resolutions, write
from patch_queue.errors import PqError, QueueError
from patch_queue.git.repo import CommitInfo
from patch_queue.outputs import folder as output
from patch_queue.progress import Progress
from patch_queue.project import operation
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import LoadedStack, Workspace, upstream_reader
from patch_queue.series import lineage, patchfile, replay, rerere, stack
from patch_queue.series.queue import Step, parse_series, render_series

FETCH_HINT = "git fetch origin refs/pq/resolutions:refs/pq/resolutions"  # where the clone has no store
MERGE_HINT = "`pq resolutions merge origin`"
SHOWN = "patches/queue.toml"  # where it has one: a fetch into it is refused once they diverged


@dataclass(frozen=True)
class Reproduced:
    steps: int
    patches: int
    edited: int  # recorded edits applied, over all steps
    already: bool  # patches/ already held the bodies of the last step
    discarded: str = ""
    merged: tuple[str, ...] = ()  # each recorded edit merged onto another merge result: "patches/X (step N)"
    differ: tuple[str, ...] = ()  # each body that differs from the one the lineage recorded, with why
    # each lineage step finished over errors of pq check (--accept-errors): (step, its command, the errors)
    accepted: tuple[tuple[int, str, int], ...] = ()


def do_reproduce(
    ws: Workspace, *, upstream_git: str | None, discard: bool = False, progress: Progress | None = None
) -> Reproduced:
    operation.refuse_pending(ws)
    queue = ws.queue_dir.load_queue()
    shown = ws.rel(ws.queue_dir.queue_path)
    if not queue.lineage:
        raise QueueError(
            f"format {queue.format} records no lineage, so the patch bodies it describes cannot be "
            "reproduced; restore patches/*.patch, or start again with `pq adopt ... --force`",
            path=shown,
        )
    final = queue.lineage[-1]
    present = lineage.present_bodies(ws.queue_dir, final.names)
    if len(present) == len(final.names):
        lineage.check_bodies(ws.queue_dir, queue, final.names, [present[n] for n in final.names])
        return Reproduced(len(queue.lineage), len(final.names), 0, True)
    for name, digest in final.patches:
        if name in present and stack.sha256(present[name]) != digest:
            raise QueueError(
                f"differs from the body queue.toml records (sha256 {digest[:12]}) and reproducing "
                "would replace it: restore it (git checkout), or move it away first",
                path=ws.queue_dir.shown(name),
            )
    for i, step in enumerate(queue.lineage, 1):
        if step.kind == "import":
            raise QueueError(
                f"lineage step {i} took the patch bodies as they were (`pq {step.command}`), so the "
                "series cannot be reproduced without them: restore patches/*.patch",
                path=shown,
            )
    dropped = write.refuse_out_edits(ws, discard=discard)
    run = _Run(ws, rerere.Store(ws.repo))
    loaded: LoadedStack | None = None
    for i, step in enumerate(queue.lineage, 1):
        where = f"lineage step {i} ({step.kind}, `pq {step.command}`)"
        if step.kind == "adopt":
            loaded = _adopt(ws, step, where, upstream_git=upstream_git, progress=progress)
            run.steps.append(step)
        elif step.kind == "refresh":
            assert loaded is not None
            loaded = _refresh(run, loaded, step, where, upstream_git=upstream_git, progress=progress)
        elif step.kind == "merge":
            assert loaded is not None
            loaded = _merge(run, loaded, step, where, progress=progress)
        else:
            assert loaded is not None
            loaded = _edit(run, loaded, step, where)
    assert loaded is not None
    if loaded.queue.modules != queue.modules or loaded.queue.upstream.files != queue.upstream.files:
        raise QueueError(
            "the reproduced series does not end on the upstream and module layout queue.toml records "
            "([upstream] or [[module]] was edited by hand)",
            path=shown,
        )
    top = write.module_files(ws, loaded.top())
    if run.differ:  # another merge: the lineage records what this pq reproduced
        build = {path: stack.sha256(data) for path, data in sorted(top.items())}
        queue = replace(queue, lineage=tuple(run.steps), build=build)
    for path, digest in sorted(queue.build.items()):
        got = top.get(path)
        if got is None or stack.sha256(got) != digest:
            raise QueueError(
                f"[build] records sha256 {digest[:12]} for {path}, the reproduced series builds "
                f"{stack.sha256(got)[:12] if got is not None else 'no such module'}",
                path=shown,
            )
    final_stack = LoadedStack(queue, loaded.base, loaded.patches)
    writes = Writes(ws, "reproduce")
    bodies = stack.export_series(ws.repo, final_stack.patches, bodies=queue.lineage[-1].bodies)
    series = ws.queue_dir.series_path
    listed = parse_series(series.read_text(encoding="utf-8", errors="replace")) if series.is_file() else []
    write.refuse_foreign_patches(ws, bodies, listed, queue)
    for name, body in bodies.items():
        writes.write(ws.queue_dir.root / name, body, group="patches")
    if not series.is_file() or listed != final_stack.names:
        writes.write(series, render_series(final_stack.names, ws.queue_dir.series_text()).encode(), group="patches")
    if run.differ:
        writes.write(ws.queue_dir.queue_path, ws.queue_dir.queue_bytes(queue), group="patches")
    write.finish(ws, final_stack, writes, len(final_stack.patches))
    discarded = output.discarded(dropped)
    merged, differ = tuple(run.merged), tuple(run.differ)
    steps = enumerate(ws.queue_dir.load_queue().lineage, 1)  # reproduced like any other step: its errors stay
    accepted = tuple((i, step.command, len(step.accepted_errors)) for i, step in steps if step.accepted_errors)
    return Reproduced(len(queue.lineage), len(final.names), run.applied, False, discarded, merged, differ, accepted)


class _Run:
    """What a reproduction carries from step to step: the store, the lineage as reproduced, and what it said."""

    def __init__(self, ws: Workspace, store: rerere.Store) -> None:
        self.ws, self.store = ws, store
        self.steps: list[Step] = []
        self.applied = 0  # recorded edits applied
        self.merged: list[str] = []  # edits merged onto another merge result
        self.differ: list[str] = []  # bodies unlike the recorded ones

    def exact(self, step: Step, name: str, before: bytes) -> bytes | None:
        """The body the recorded edit of ``name`` that ``step`` made gives, when ``before`` (its body as
        reproduced) is the very body it was made on; else None (the caller counts it in :attr:`applied`)."""
        base = step.base_of(name)
        if base is not None and stack.sha256(before) != base:
            return None
        return self.store.lookup_edit(name, before)

    def merge(
        self, step: Step, where: str, name: str, before: bytes, ours: str
    ) -> tuple[dict[str, bytes | None], rerere.RecordedEdit]:
        """The module files the recorded edit of ``name`` that ``step`` made changes, merged three-way onto the
        tree of ``ours`` (the stack at that patch as reproduced, before the edit), and the edit; ``before`` is
        the patch's body there."""
        shown = f"patches/{name}"
        base = step.base_of(name)
        got = stack.sha256(before)
        found = (
            self.store.find_edit(name, before=base)
            if base
            else self.store.find_edit(name, after=dict(step.patches)[name])
        )
        if found is None:
            raise self._missing(where, name, base or got, known=base is not None)
        if found.files is None:
            raise QueueError(
                f"the recorded edit of {where} for this patch was made on the body with sha256 {found.before[:12]}; "
                f"this pq gives {got[:12]} there, and the edit was recorded by a pq that kept no base to merge it "
                "onto another body: reproduce with the pq that recorded the step",
                path=shown,
            )
        files, clashes = self.store.onto(found, self.ws.repo.read_tree(self.ws.repo.commit_info(ours).tree))
        if clashes:
            c = clashes[0]
            more = f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else ""
            raise QueueError(
                f"the recorded edit of {where} conflicts with this pq's merge of {c.path}, lines {c.first}-{c.last}"
                f"{more}: this pq gives another body than the one it was made on (sha256 {got[:12]}, not "
                f"{found.before[:12]}), and both changed those lines; reproduce with the pq that recorded the step",
                path=shown,
            )
        for path, data in sorted(files.items()):
            line = replay.has_markers(data) if data is not None else None
            if line is not None:
                raise QueueError(
                    f"this pq's merge leaves a conflict region at {path}:{line} that the recorded edit of {where} "
                    "does not resolve (the pq that recorded the step merged these lines cleanly)",
                    path=shown,
                )
        self.applied += 1
        self.merged.append(f"{shown} ({where.split(' (')[0]})")
        return files, found

    def _missing(self, where: str, name: str, base: str, *, known: bool) -> QueueError:
        """The error for a recorded edit the store lacks, naming why: no store at all, a remote's store it has
        diverged from or is behind, none of this patch, or none made on ``base`` (the body the step names, when
        ``known``; else the body this pq's merge gives)."""
        at = f"refs/pq/resolutions (at {(self.store.head or '')[:12]})"
        if self.store.head is None:
            why = f"this repository has no refs/pq/resolutions: fetch it: {FETCH_HINT}"
        elif (apart := resolutions.diverged(self.ws)) is not None:
            why = apart
        elif name not in self.store.edited_patches():
            why = f"{at} holds no edit of this patch: take origin's: {MERGE_HINT}"
        elif known:
            why = (
                f"{at} holds edits of this patch, none made on the body with sha256 {base[:12]} the step names: "
                f"take the store of the clone that made the step ({MERGE_HINT})"
            )
        else:
            why = (
                f"{at} holds edits of this patch, none made on the body this pq's merge gives (sha256 {base[:12]}) or "
                f"giving the one the step records: take the store of the clone that made the step ({MERGE_HINT}), or "
                "reproduce with the pq that made it (it merges otherwise)"
            )
        return QueueError(
            f"the recorded edit of {where} for this patch is not in refs/pq/resolutions; {why}", path=f"patches/{name}"
        )

    def done(self, step: Step, where: str, bodies: list[tuple[str, bytes]], *, strict: bool) -> None:
        """Check the bodies ``step`` gave: its series always, each sha256 when ``strict`` (an edit step on the very
        bodies it was recorded on: a body that differs is an error), else each body that differs is said (this
        pq's merge, or the steps before, gave another) and the lineage records it."""
        _same_series(step, where, bodies)
        for (name, digest), (_n, data) in zip(step.patches, bodies, strict=True):
            if stack.sha256(data) == digest:
                continue
            if strict:
                apart = resolutions.diverged(self.ws)
                why = (
                    apart
                    if apart is not None
                    else "refs/pq/resolutions holds another edit of this body (where two clones recorded one each, "
                    "`pq resolutions merge` kept the local one: `pq resolutions merge origin --theirs` takes "
                    "origin's; `pq resolutions log` lists what the store held)"
                )
                raise QueueError(
                    f"reproduced body has sha256 {stack.sha256(data)[:12]}, {where} records {digest[:12]}: the "
                    f"recorded edits do not give the recorded body; {why}",
                    path=f"patches/{name}",
                )
            why = "this pq's merge gives another body" if step.kind == "refresh" else "the steps before gave others"
            step_no = where.split(" (")[0]
            self.differ.append(f"patches/{name}: {step_no}: sha256 {stack.sha256(data)[:12]}, not {digest[:12]}: {why}")
        bases = dict(step.bases)
        for name in step.edited:  # the bodies the edits were made on, named for a step recorded without them
            if name not in bases:
                found = self.store.find_edit(name, after=dict(step.patches)[name])
                if found is not None:
                    bases[name] = found.before
        patches = tuple((n, stack.sha256(b)) for n, b in bodies)
        self.steps.append(replace(step, patches=patches, bases=tuple((n, bases[n]) for n in step.edited if n in bases)))


def _bodies(ws: Workspace, patches: list[tuple[str, str]], step: Step) -> list[tuple[str, bytes]]:
    """The patch files of ``patches`` in the form ``step`` recorded them in."""
    return list(stack.export_series(ws.repo, patches, bodies=step.bodies).items())


def _same_series(step: Step, where: str, bodies: list[tuple[str, bytes]]) -> None:
    got = [n for n, _b in bodies]
    if got != step.names:
        raise QueueError(
            f"{where} records the series {', '.join(step.names)}; reproducing it gives {', '.join(got)}",
            path=f"patches/{step.names[0] if step.names else 'series'}",
        )


def _adopt(
    ws: Workspace, step: Step, where: str, *, upstream_git: str | None, progress: Progress | None
) -> LoadedStack:
    if not step.downstream or step.upstream is None:
        raise QueueError(
            f"{where} adopted a folder, which cannot be fetched again; restore patches/*.patch",
            path="patches/queue.toml",
        )
    at = step.upstream.public_commit or step.upstream.spec
    if progress is not None:
        progress(f"Adopting {step.downstream} at {step.upstream.label} ...")
    loaded, _result = adopt.plan_adopt(ws, step.downstream, upstream_git=upstream_git, at=at, progress=progress)
    if loaded.queue.upstream.files != step.upstream.files:
        raise QueueError(
            f"{where}: the upstream at {at} is not the one recorded (sha256 of its files differs)",
            path="patches/queue.toml",
        )
    bodies = _bodies(ws, loaded.patches, step)
    _same_series(step, where, bodies)
    for (name, digest), (_n, data) in zip(step.patches, bodies, strict=True):
        if stack.sha256(data) != digest:
            raise QueueError(
                f"reproduced body has sha256 {stack.sha256(data)[:12]}, {where} records {digest[:12]}: "
                "pq adopt gives another series than the one recorded (a different pq version?)",
                path=f"patches/{name}",
            )
    return loaded


def _refresh(
    run: _Run,
    loaded: LoadedStack,
    step: Step,
    where: str,
    *,
    upstream_git: str | None,
    progress: Progress | None,
) -> LoadedStack:
    assert step.upstream is not None
    ws = run.ws
    if progress is not None:
        progress(f"Replaying the refresh onto {step.upstream.label} ...")
    pin = step.upstream
    probe = replace(loaded.queue, upstream=pin)
    target, projection = refresh.target_queue(
        loaded.queue, pin, upstream_reader(probe, upstream_git=upstream_git, progress=progress)
    )
    new_base = stack.base_commit(ws.repo, target, projection)
    labels = (f"base {loaded.queue.upstream.label}", f"upstream {pin.label}")

    def edited(name: str, merged: str) -> str | None:
        """The step's own recorded edit of ``name`` on its merge result (only of the patches it edited)."""
        if name not in step.edited:
            return None
        info = ws.repo.commit_info(merged)
        before = stack.export_patch(ws.repo, merged, bodies=step.bodies)
        after = run.exact(step, name, before)
        if after is not None:  # the very merge it was made on (the body names its commit, so its parents too)
            run.applied += 1
            shown = f"patches/{name}"
            return stack.commit_patch(ws.repo, info.parents[0], patchfile.parse(after, path=shown), target, path=shown)
        files, _found = run.merge(step, where, name, before, merged)
        return _commit_merged(ws, info.parents[0], merged, files, info)

    def each(r: replay.PatchResult) -> None:  # in series order, so the first patch that fails is the one named
        if r.conflicts:
            c = r.conflicts[0]
            raise QueueError(
                f"the merge of {where} leaves {len(r.conflicts)} conflict(s) (first at {c.file}:{c.line}) "
                "and the lineage records no resolution for them",
                path=f"patches/{r.name}",
            )

    results = replay.replay(
        ws.repo,
        loaded.patches,
        new_base,
        labels=labels,
        stop=False,
        progress=each,
        normalize=machine.normalizer(target, ws.repo, loaded.patches),
        edited=edited,
        imports=machine.import_sync(target, loaded.patches),
    )
    patches = [(r.name, r.commit) for r in results]
    run.done(step, where, _bodies(ws, patches, step), strict=False)
    return LoadedStack(target, new_base, patches)


def _merge(run: _Run, loaded: LoadedStack, step: Step, where: str, *, progress: Progress | None) -> LoadedStack:
    """The merge ``step`` replayed (:func:`merge.reproduce_merge`) with its own recorded resolution, made on the body
    its ``resolved`` names (merged three-way onto another body this pq's merge gives, as a refresh's edits)."""
    ws = run.ws
    if not step.downstream or not step.since:
        raise QueueError(f"{where} merged a folder, which cannot be read again; restore patches/*.patch", path=SHOWN)
    if progress is not None:
        progress(f"Replaying the merge of {step.downstream} ...")
    layout = merge.wide_queue(loaded.queue, merge.read_release(loaded.queue, step.downstream, progress))

    def edited(name: str, merged: str) -> str | None:
        if not step.resolved:
            return None
        as_edit = replace(step, edited=(name,), bases=((name, step.resolved),))
        info = ws.repo.commit_info(merged)
        before = stack.export_patch(ws.repo, merged, bodies=step.bodies)
        after = run.exact(as_edit, name, before)
        if after is not None:
            run.applied += 1
            shown = f"patches/{name}"
            return stack.commit_patch(ws.repo, info.parents[0], patchfile.parse(after, path=shown), layout, path=shown)
        files, _found = run.merge(as_edit, where, name, before, merged)
        return _commit_merged(ws, info.parents[0], merged, files, info)

    try:
        new, name, result = merge.reproduce_merge(ws.repo, loaded, step, edited, progress)
    except QueueError as exc:
        raise QueueError(f"{where}: {exc.message}", path=exc.path or SHOWN, line=exc.line) from None
    if result.conflicts:
        c = result.conflicts[0]
        raise QueueError(
            f"the merge of {where} leaves {len(result.conflicts)} conflict(s) (first at {c.file}:{c.line}) and the "
            f"lineage records no resolution for them (the merge of {name})",
            path=SHOWN,
        )
    run.done(step, where, _bodies(ws, new.patches, step), strict=False)
    return new


def _commit_merged(ws: Workspace, parent: str, ours: str, files: dict[str, bytes | None], like: CommitInfo) -> str:
    """A commit on ``parent`` of the tree of ``ours`` with ``files`` (None: removed) in it, like ``like``."""
    tree = ws.repo.read_tree(ws.repo.commit_info(ours).tree)
    for path, data in files.items():
        if data is None:
            tree.pop(path, None)
        else:
            tree[path] = data
    return stack.commit_files(ws.repo, parent, tree, like)


def _edit(run: _Run, loaded: LoadedStack, step: Step, where: str) -> LoadedStack:
    ws = run.ws
    old = dict(_bodies(ws, loaded.patches, step))
    old_commits = dict(loaded.patches)
    commits: list[tuple[str, str]] = []
    parent = loaded.base
    for name in step.names:
        shown = f"patches/{name}"
        if name not in old and name not in step.edited:
            raise QueueError(f"{where} lists a patch it neither had nor recorded", path=shown)
        before = old.get(name, b"")
        after = run.exact(step, name, before) if name in step.edited else before
        commit = None
        if after is not None:
            try:
                commit = stack.commit_patch(
                    ws.repo, parent, patchfile.parse(after, path=shown), loaded.queue, path=shown
                )
            except PqError:
                if not run.differ or name not in step.edited:  # the very patches it applied on when recorded
                    raise
            else:
                if name in step.edited:
                    run.applied += 1
        if commit is None:  # made on another body, or on patches below that this pq gave otherwise
            was = old_commits.get(name, parent)  # the stack at this patch before the edit (a new patch: below it)
            files, found = run.merge(step, where, name, before, was)
            like = ws.repo.commit_info(was) if name in old_commits else _made(found, where, shown)
            commit = _commit_merged(ws, parent, was, files, like)
        commits.append((name, commit))
        parent = commit
    bodies = _bodies(ws, commits, step)
    run.done(step, where, bodies, strict=not run.differ)
    queue = loaded.queue
    if "==" in step.downstream:  # a sync from a newer release moved the pin
        name, _sep, version = step.downstream.partition("==")
        queue = replace(queue, downstream_name=name, downstream_release=version)
    return LoadedStack(queue, loaded.base, commits)


def _made(found: rerere.RecordedEdit, where: str, shown: str) -> CommitInfo:
    """The commit a patch that a step made is committed like: the message and author its recorded edit holds."""
    if found.message is None or found.author is None:
        raise QueueError(f"the recorded edit of {where} for this patch holds no message to commit it with", path=shown)
    return CommitInfo("", "", (), found.message, found.author)
