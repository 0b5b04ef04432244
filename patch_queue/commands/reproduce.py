"""``pq reproduce``: rebuild the patch bodies from the lineage in ``queue.toml``, or stop at the first that differs.

This repository commits ``queue.toml`` and ``series`` but not the patch bodies (they are
vllm-omni and vllm-ascend code).  The lineage is their recipe: adopt the origin release at its
upstream commit, then replay every step in order: a refresh onto its pinned target (the same
merge, then the maintainer's recorded edits from ``refs/pq/resolutions``), an edit (the recorded
edits of the bodies it changed).  Every body is checked against the sha256 the step records,
then the built modules against ``[build]``.  Nothing is written unless the whole lineage
reproduces; then patches/, refs/pq/ and the output folder are written in one journaled step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from patch_queue.commands import adopt, refresh, write
from patch_queue.errors import QueueError
from patch_queue.outputs import folder as output
from patch_queue.progress import Progress
from patch_queue.project import refresh_state
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import LoadedStack, Workspace, upstream_reader
from patch_queue.series import lineage, patchfile, replay, rerere, stack
from patch_queue.series.queue import Step, parse_series, render_series

FETCH_HINT = "fetch them: git fetch origin refs/pq/resolutions:refs/pq/resolutions"


@dataclass(frozen=True)
class Reproduced:
    steps: int
    patches: int
    edited: int  # bodies that took recorded edits, over all steps
    already: bool  # patches/ already held the bodies of the last step
    discarded: str = ""


def do_reproduce(
    ws: Workspace, *, upstream_git: str | None, discard: bool = False, progress: Progress | None = None
) -> Reproduced:
    refresh_state.refuse_pending(ws)
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
    store = rerere.Store(ws.repo)
    loaded: LoadedStack | None = None
    for i, step in enumerate(queue.lineage, 1):
        where = f"lineage step {i} ({step.kind}, `pq {step.command}`)"
        if step.kind == "adopt":
            loaded = _adopt(ws, step, where, upstream_git=upstream_git, progress=progress)
        elif step.kind == "refresh":
            assert loaded is not None
            loaded = _refresh(ws, loaded, step, where, store, upstream_git=upstream_git, progress=progress)
        else:
            assert loaded is not None
            loaded = _edit(ws, loaded, step, where, store)
    assert loaded is not None
    if loaded.queue.modules != queue.modules or loaded.queue.upstream.files != queue.upstream.files:
        raise QueueError(
            "the reproduced series does not end on the upstream and module layout queue.toml records "
            "([upstream] or [[module]] was edited by hand)",
            path=shown,
        )
    top = write.module_files(ws, loaded.top())
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
    for name, body in stack.export_series(ws.repo, final_stack.patches).items():
        writes.write(ws.queue_dir.root / name, body, group="patches")
    series = ws.queue_dir.series_path
    if not series.is_file() or parse_series(series.read_text(encoding="utf-8", errors="replace")) != final_stack.names:
        writes.write(series, render_series(final_stack.names).encode(), group="patches")
    write.finish(ws, final_stack, writes, len(final_stack.patches))
    edited = sum(len(step.edited) for step in queue.lineage)
    return Reproduced(len(queue.lineage), len(final.names), edited, False, output.discarded(dropped))


def _check(step: Step, where: str, bodies: list[tuple[str, bytes]], why: str) -> None:
    got = [n for n, _b in bodies]
    if got != step.names:
        raise QueueError(
            f"{where} records the series {', '.join(step.names)}; reproducing it gives {', '.join(got)}",
            path=f"patches/{step.names[0] if step.names else 'series'}",
        )
    for (name, digest), (_n, data) in zip(step.patches, bodies, strict=True):
        if stack.sha256(data) != digest:
            raise QueueError(
                f"reproduced body has sha256 {stack.sha256(data)[:12]}, {where} records {digest[:12]}: {why}",
                path=f"patches/{name}",
            )


def _edits_missing(where: str, name: str) -> QueueError:
    return QueueError(
        f"the recorded edits of {where} for this patch are not in refs/pq/resolutions; " + FETCH_HINT,
        path=f"patches/{name}",
    )


def _bodies(ws: Workspace, patches: list[tuple[str, str]]) -> list[tuple[str, bytes]]:
    return list(stack.export_series(ws.repo, patches).items())


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
    why = "pq adopt gives another series than the one recorded (a different pq version?)"
    _check(step, where, _bodies(ws, loaded.patches), why)
    return loaded


def _refresh(
    ws: Workspace,
    loaded: LoadedStack,
    step: Step,
    where: str,
    store: rerere.Store,
    *,
    upstream_git: str | None,
    progress: Progress | None,
) -> LoadedStack:
    assert step.upstream is not None
    if progress is not None:
        progress(f"Replaying the refresh onto {step.upstream.label} ...")
    pin = step.upstream
    probe = replace(loaded.queue, upstream=pin)
    target, projection = refresh.target_queue(
        loaded.queue, pin, upstream_reader(probe, upstream_git=upstream_git, progress=progress)
    )
    new_base = stack.base_commit(ws.repo, target, projection)
    labels = (f"base {loaded.queue.upstream.label}", f"upstream {pin.label}")
    results = replay.replay(
        ws.repo,
        loaded.patches,
        new_base,
        labels=labels,
        stop=False,
        normalize=refresh.normalizer(target, ws.repo, loaded.patches),
        edited=refresh.edit_lookup(ws, store, target),
        imports=refresh.import_sync(target, loaded.patches),
    )
    for r in results:
        took = any(f.kind == "recorded-edits" for f in r.flags)
        if r.name in step.edited and not took:
            raise _edits_missing(where, r.name)
        if r.conflicts:
            c = r.conflicts[0]
            raise QueueError(
                f"the merge of {where} leaves {len(r.conflicts)} conflict(s) (first at {c.file}:{c.line}) "
                "and the lineage records no resolution for them",
                path=f"patches/{r.name}",
            )
    patches = [(r.name, r.commit) for r in results]
    why = "the merge gives another result than the one recorded (a different pq version?)"
    _check(step, where, _bodies(ws, patches), why)
    return LoadedStack(target, new_base, patches)


def _edit(ws: Workspace, loaded: LoadedStack, step: Step, where: str, store: rerere.Store) -> LoadedStack:
    old = dict(_bodies(ws, loaded.patches))
    bodies = []
    for name in step.names:
        before = old.get(name, b"")
        after = store.lookup_edit(name, before) if name in step.edited else before
        if after is None:
            raise _edits_missing(where, name)
        if name not in old and name not in step.edited:
            raise QueueError(f"{where} lists a patch it neither had nor recorded", path=f"patches/{name}")
        bodies.append((name, after))
    _check(step, where, bodies, "the recorded edits do not give the recorded body")
    commits = []
    parent = loaded.base
    for name, data in bodies:
        shown = f"patches/{name}"
        parent = stack.commit_patch(ws.repo, parent, patchfile.parse(data, path=shown), loaded.queue, path=shown)
        commits.append((name, parent))
    queue = loaded.queue
    if "==" in step.downstream:  # a sync from a newer release moved the pin
        name, _sep, version = step.downstream.partition("==")
        queue = replace(queue, downstream_name=name, downstream_release=version)
    return LoadedStack(queue, loaded.base, commits)
