"""Writing a planned series: patches/ and its lineage, refs/pq/, the output folder (pq build)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from patch_queue import namespace
from patch_queue.errors import QueueError
from patch_queue.fsutil import atomic_write, unreplaceable
from patch_queue.merge import anchors, markers
from patch_queue.outputs import folder as output
from patch_queue.progress import Progress
from patch_queue.project import operation
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import (
    LoadedStack,
    Workspace,
    applied_count,
    load_stack,
    stack_ref_updates,
    upstream_snapshot,
)
from patch_queue.series import lineage, stack
from patch_queue.series.queue import Queue, UpstreamPin, render_series
from patch_queue.spec import QueueSpec

# the downstream's formatter: the vllm-omni runners are exactly what `ruff format --line-length 120` makes
FORMATTER = ("ruff", 120)


REF_REFRESH = namespace.refs() + "refresh/"


REF_PREVIOUS = namespace.refs() + "previous"  # the top before the last finished refresh: what `pq check` compares with


def patch_files(ws: Workspace) -> set[str]:
    root = ws.queue_dir.root
    return {p.name for p in root.glob("*.patch")} if root.is_dir() else set()


@dataclass(frozen=True)
class StepInfo:
    """What a write of patches/ adds to the lineage (see patch_queue/series/lineage.py)."""

    kind: str
    command: str
    upstream: UpstreamPin | None = None
    downstream: str = ""
    edited: tuple[str, ...] = ()
    accepted: tuple[str, ...] = ()  # the errors of `pq check` a refresh finished over (--accept-errors)
    bases: tuple[tuple[str, str], ...] = ()  # (edited patch, sha256 of the body its recorded edit was made on)
    since: str = ""  # merge: the release the series held before
    files: tuple[tuple[str, str], ...] = ()  # merge: (module, sha256) of the release it took in
    resolved: str = ""  # merge: sha256 of the merge's body its recorded resolution was made on
    placed: str = ""  # merge: where the release's edits of carried methods went (:attr:`Step.placed`)


def write_series(ws: Workspace, loaded: LoadedStack, *, writes: Writes, step: StepInfo) -> None:
    """Export every patch, then series and queue.toml (its lineage one step on); drop old patch files no
    longer in the series."""
    exported = stack.export_series(ws.repo, loaded.patches)
    root = ws.queue_dir.root
    # only files the old series listed are pq's to drop; an unlisted one is a maintainer's work in progress
    try:
        listed = ws.queue_dir.load_series() if ws.queue_dir.series_path.is_file() else []
    except QueueError:
        listed = []
    previous = [(n, (root / n).read_bytes()) for n in listed if (root / n).is_file()]
    old_names = patch_files(ws) & set(listed)
    refuse_foreign_patches(ws, exported, listed, loaded.queue)
    for name, data in exported.items():
        writes.write(root / name, data, group="patches")
    anew = step.kind == "adopt"  # `pq adopt --force` starts a new series: nothing of the old files is kept
    before = "" if anew else ws.queue_dir.series_text()
    writes.write(ws.queue_dir.series_path, render_series(loaded.names, before).encode(), group="patches")
    top = module_files(ws, loaded.top())
    made = lineage.step_of(
        step.kind,
        step.command,
        list(exported.items()),
        upstream=step.upstream,
        downstream=step.downstream,
        edited=step.edited,
        accepted=step.accepted,
        bases=step.bases,
        since=step.since,
        files=step.files,
        resolved=step.resolved,
        placed=step.placed,
    )
    queue = lineage.with_step(loaded.queue, made, top, previous=previous)
    writes.write(ws.queue_dir.queue_path, ws.queue_dir.queue_bytes(queue, anew=anew), group="patches")
    for name in sorted(old_names - set(exported)):
        writes.write(root / name, None, group="patches")


def refuse_foreign_patches(ws: Workspace, bodies: dict[str, bytes], listed: list[str], queue: Queue) -> None:
    """Refuse to write a patch file over one pq did not write: a file in patches/ that the series does not
    list, whose bytes are neither the body to write nor one the lineage records under that name (a
    maintainer's work in progress, a patch of another series), is never replaced."""
    recorded = {(name, digest) for step in queue.lineage for name, digest in step.patches}
    for name, data in bodies.items():
        path = ws.queue_dir.root / name
        if name in listed or not (path.exists() or path.is_symlink()):
            continue
        have = path.read_bytes() if path.is_file() else None
        if have == data or (have is not None and (name, stack.sha256(have)) in recorded):
            continue
        raise QueueError(
            f"is not a patch of the series ({ws.rel(ws.queue_dir.series_path)} does not list it) and pq did not "
            "write it; pq does not overwrite it: move it away (or rename it), then run the command again",
            path=f"{ws.rel(ws.queue_dir.root)}/{name}",
        )


def standalone(files: dict[str, bytes], package: str, spec: QueueSpec) -> dict[str, bytes]:
    """Point the in-tree imports of the queue ``spec``'s package into the standalone ``package``: of the package
    itself and of each module the series holds.  A subpackage stays the downstream's own (a module of the series is
    a file of the package itself; the wheel requires the downstream release, which has it)."""
    modules = sorted({p.removesuffix(".py") for p in files if p.endswith(".py") and "/" not in p} - {"__init__"})
    own = r"(?=\s|$" + "".join(rf"|\.{re.escape(m)}\b" for m in modules) + ")"
    pattern = re.compile(r"^(\s*(?:from|import)\s+)" + re.escape(spec.package.replace("/", ".")) + own, re.MULTILINE)
    return {
        path: pattern.sub(lambda m: m.group(1) + package, data.decode("utf-8")).encode("utf-8")
        for path, data in files.items()
    }


def module_files(ws: Workspace, commit: str) -> dict[str, bytes]:
    files = ws.repo.read_tree(ws.repo.commit_info(commit).tree)
    return {k: v for k, v in files.items() if not k.startswith(stack.VENDOR)}


def _built_top(ws: Workspace) -> dict[str, bytes]:
    top = ws.repo.ref(stack.REF_TOP)
    return module_files(ws, top) if top is not None and ws.repo.has_object(top) else {}


def refuse_out_edits(ws: Workspace, *, discard: bool, out: Path | None = None) -> list[output.Edited]:
    """Refuse to overwrite edits in the output folder that no patch holds (unless ``discard``), or a file there pq
    must not replace (a symbolic link, see :func:`patch_queue.outputs.folder.refuse_unreplaceable`)."""
    out = out or ws.out
    output.refuse_unreplaceable(out, shown=ws.rel(out))
    return output.refuse_edits(out, _built_top(ws), shown=ws.rel(out), discard=discard)


def out_edits(ws: Workspace) -> list[output.Edited]:
    """The edits in the output folder that no patch holds (for `pq status`)."""
    return output.edits(ws.out, _built_top(ws))


def build_top(
    ws: Workspace,
    loaded: LoadedStack,
    *,
    out: Path | None = None,
    standalone_pkg: bool = False,
    writes: Writes | None = None,
    applied: int | None = None,
) -> dict[str, bytes]:
    """Write the top of the stack, ``applied`` patches on (default: as refs/pq/top says), into ``out`` (through
    ``writes``, else as a journaled write of its own)."""
    out = out or ws.out
    files = module_files(ws, loaded.top(applied_count(ws, loaded) if applied is None else applied))
    if standalone_pkg:
        files = standalone(files, out.name, ws.spec)
    journal = writes or Writes(ws, "build")
    output.sync(out, files, journal, standalone=out.name if standalone_pkg else "")
    if writes is None:
        journal.commit()
    return files


def finish(ws: Workspace, loaded: LoadedStack, writes: Writes, applied: int, *, build: bool = True) -> None:
    """Move refs/pq/ to ``loaded`` with ``applied`` patches on, build that top into the output folder (``build``:
    not for a top whose modules are the ones built there already) and apply ``writes``."""
    writes.move_refs(stack_ref_updates(ws, loaded, applied))
    if build:
        build_top(ws, loaded, writes=writes, applied=applied)
    writes.commit()


def do_build(
    ws: Workspace,
    *,
    out: Path | None,
    standalone_pkg: bool,
    upstream_git: str | None,
    discard: bool = False,
    progress: Progress | None = None,
) -> tuple[dict[str, bytes], str, list[dict[str, object]]]:
    """Build the top of the stack into ``out``; returns the files, what --discard dropped and the fence problems
    of the files (built all the same: the fences are the patches' business)."""
    operation.refuse_pending(ws)
    if out is not None:
        output.refuse_unusable(ws, out)
    target = (out or ws.out).resolve()
    dropped = refuse_out_edits(ws, discard=discard, out=target)
    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    files = build_top(ws, loaded, out=out, standalone_pkg=standalone_pkg)
    return files, output.discarded(dropped), fence_problems(files)


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


def require_all_applied(ws: Workspace, loaded: LoadedStack, why: str) -> None:
    """Refuse a command that works on the whole series while some patches are popped (``why``: what it does)."""
    applied = applied_count(ws, loaded)
    if applied < len(loaded.patches):
        raise QueueError(
            f"only {applied} of {len(loaded.patches)} patches are applied; `pq push --all` first: {why}",
            path=ws.rel(ws.queue_dir.series_path),
        )


def sync_stack(ws: Workspace, *, upstream_git: str | None, progress: Progress | None = None) -> LoadedStack:
    """Load the stack from patches/ and make refs/pq/ match it."""
    loaded = load_stack(ws, upstream_git=upstream_git, progress=progress)
    updates = stack_ref_updates(ws, loaded, applied_count(ws, loaded))
    if updates:
        ws.repo.update_refs(updates, "pq: sync with patches/")
    return loaded


def refuse_unwritable_queue(ws: Workspace) -> None:
    """Refuse early, before a refresh or merge computes anything, a ``queue.toml`` its write would refuse at the
    end: with a comment or key of the user's (:meth:`patch_queue.series.queue.QueueDir.refuse_unkept`), other hard
    links or read-only (:func:`patch_queue.fsutil.unreplaceable`; a symbolic link is written through)."""
    q = ws.queue_dir
    q.refuse_unkept()
    problem = unreplaceable(q.queue_path, follow=True)
    if problem is not None:
        raise QueueError(problem, path=q.shown(q.queue_path.name))


def do_wheel(ws: Workspace, *, out: Path | None, upstream_git: str | None, progress: Progress | None = None) -> Path:
    """Build the wheel of the top of the stack into ``out`` (default ``dist/``); npu_worker/ is not touched."""
    from patch_queue.outputs import wheel  # importlib.metadata and email: only a wheel needs them

    operation.refuse_pending(ws)
    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    applied = applied_count(ws, loaded)
    total = len(loaded.patches)
    if applied == 0:
        raise QueueError(
            "nothing built: no patch of the series is applied; `pq push --all` first",
            path=str(ws.queue_dir.series_path),
        )
    if applied < total:
        raise QueueError(
            f"only {applied} of {total} patches are applied; `pq push --all` first: the wheel's version "
            "names the whole series",
            path=str(ws.queue_dir.series_path),
        )
    top = loaded.top(applied)
    package = ws.out.name
    tree = ws.repo.read_tree(ws.repo.commit_info(top).tree)
    files = standalone({k: v for k, v in tree.items() if not k.startswith(stack.VENDOR)}, package, ws.spec)
    if not any(p.endswith(".py") for p in files):
        raise QueueError("nothing built: the top of the stack holds no module", path=str(ws.queue_dir.series_path))
    queue = loaded.queue
    # torch-npu and torch as the upstream pins them: a release's metadata, a commit's requirements.txt (a
    # folder may be gone since: its pins are not read)
    snap = (
        None if queue.upstream.kind == "dir" else upstream_snapshot(queue, upstream_git=upstream_git, progress=progress)
    )
    meta = wheel.wheel_meta(
        queue, package=package, patches=loaded.names, pinned=wheel.upstream_requirements(snap, queue.spec)
    )
    if progress is not None:
        progress(f"Building {meta.name} {meta.version} ({len(files)} modules in {package}/) ...")
    vendored = {k[len(stack.VENDOR) :]: v for k, v in tree.items() if k.startswith(stack.VENDOR)}
    notice = wheel.notice(queue, meta, package, files, vendored)
    epoch = ws.repo.commit_info(top).author.time  # the top patch's Date: fixed by the series
    name, data = wheel.build_wheel_bytes(meta, package, files, notice_text=notice, epoch=epoch)
    target = (out or ws.root / "dist").resolve() / name
    try:
        atomic_write(target, data)
        os.chmod(target, wheel.WHEEL_MODE)
    except OSError as exc:  # a file, a read-only folder, a full disk: the wheel is all pq writes here
        why = "is not a folder" if target.parent.exists() and not target.parent.is_dir() else exc.strerror or exc
        raise QueueError(
            f"the wheel cannot be written there ({why}); name a folder pq can write with --out",
            path=ws.rel(target.parent),
        ) from None
    return target
