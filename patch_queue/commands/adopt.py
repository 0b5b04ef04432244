"""pq adopt: derive the series from a hand-maintained release or folder."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from patch_queue.commands.write import (
    DOWNSTREAM_PACKAGE,
    FORMATTER,
    StepInfo,
    finish,
    patch_files,
    refuse_out_edits,
    write_series,
)
from patch_queue.errors import QueueError
from patch_queue.fsutil import not_text
from patch_queue.git.repo import Person
from patch_queue.merge import symbols
from patch_queue.outputs import folder as output
from patch_queue.progress import Progress, say
from patch_queue.project import operation
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import LoadedStack, Workspace
from patch_queue.series import stack
from patch_queue.series.queue import Queue, UpstreamPin, cut_slug, name_problem, shown_name
from patch_queue.sources import registry
from patch_queue.sources.archives import release_files
from patch_queue.sources.cache import MethodCache
from patch_queue.sources.snapshot import Snapshot, open_git, resolve_upstream, upstream_git_location

if TYPE_CHECKING:  # the adopt search is imported where it runs: a refresh needs only snapshot_pin from here
    from patch_queue.series import adopt as adopt_mod

ADOPT_AUTHOR = ("vllm-omni contributors (adopted by pq)", "pq@localhost")


@dataclass(frozen=True)
class AdoptResult:
    commit_label: str
    public_commit: str
    matched: int
    total: int
    ties: int
    searched: int
    patches: list[str]
    carried: list[adopt_mod.Carried]
    searched_auto: bool
    downstream: str = ""  # "name==version" of an adopted release
    discarded: str = ""  # what --discard dropped from the output folder
    warnings: tuple[str, ...] = ()  # one line each: what the adopted series may not be what the user meant


class Downstream(NamedTuple):
    modules: dict[str, bytes]
    name: str  # the downstream distribution
    release: str  # its version; "" for a folder
    where: str  # where the modules were read: the folder, or "name==version: package"


def read_downstream(source: str, progress: Progress | None = None) -> Downstream:
    """The modules of a vllm-omni release spec or a directory, every module checked (:func:`_check_modules`): an
    existing directory is one whatever its path holds (``./x==1/npu``), a release is ``NAME==VERSION``
    (:func:`registry.parse_release`), anything else one line before anything is downloaded.

    A directory holds the modules in the downstream package's path, in ``npu/`` or itself (the first that holds
    ``*.py``).  One that holds both ``npu/`` and ``gpu/`` (a vllm-omni release's two runner folders, as the corpus
    keeps them) gives ``npu/``, this queue's runners, and says so in one line: ``gpu/`` holds the GPU runners the
    NPU ones mirror (``pq sync-gpu --omni`` reads those), never the runners of this series."""
    root = Path(source)
    if root.is_dir():
        for candidate in (root / DOWNSTREAM_PACKAGE, root / "npu", root):
            modules = {p.name: p.read_bytes() for p in sorted(candidate.glob("*.py")) if p.is_file()}
            if modules:
                _check_modules(modules, str(candidate))
                if candidate == root / "npu" and (root / "gpu").is_dir():
                    from patch_queue.series.adopt import UPSTREAM_CLASS

                    say(
                        progress,
                        f"Reading {candidate}: {root} holds both npu/ and gpu/, and this queue's runners are the NPU "
                        f"ones (copies of vllm-ascend's {UPSTREAM_CLASS}); gpu/ is not read",
                    )
                return Downstream(modules, "vllm-omni", "", str(candidate))
        gpu = " (gpu/ holds GPU runners, not this queue's: name the folder of the NPU runners)"
        raise QueueError("holds no NPU worker modules (*.py)" + (gpu if (root / "gpu").is_dir() else ""), path=source)
    release = registry.parse_release(source)
    if release is None:
        raise QueueError("neither a NAME==VERSION release nor a directory", path=source)
    name, version = release[0], release[1].text
    return Downstream(
        release_modules(name, version, progress), name, version, f"{name}=={version}: {DOWNSTREAM_PACKAGE}"
    )


def release_modules(name: str, version: str, progress: Progress | None = None) -> dict[str, bytes]:
    """The NPU worker modules of the release ``name==version`` (read from the registry, never from a folder), every
    module checked (:func:`_check_modules`).  Always ``DOWNSTREAM_PACKAGE``, whatever runners the series holds: a
    series of other runners (a GPU queue) merging a release would take in the NPU modules (issue 49; the queue
    described in queue.toml is to name the package)."""
    prefix = DOWNSTREAM_PACKAGE + "/"
    files = release_files(name, version, prefix, progress=progress)
    local = {k.removeprefix(prefix): v for k, v in files.items()}
    modules = {k: v for k, v in local.items() if "/" not in k and k.endswith(".py")}
    if not modules:
        raise QueueError(f"{name}=={version} has no NPU worker modules under {DOWNSTREAM_PACKAGE}/")
    _check_modules(modules, f"{name}=={version}: {DOWNSTREAM_PACKAGE}")
    return modules


def _check_modules(modules: dict[str, bytes], where: str) -> None:
    """One line (exit 1) for the first module whose name breaks the rule of names (:func:`name_problem`: it
    names a file of npu_worker/ and patches/) or whose bytes are not UTF-8 text without a NUL byte (a patch
    holds text only), naming the file (in the folder ``where``) and the byte's line and column."""
    for name, data in sorted(modules.items()):
        if problem := name_problem(name):
            raise QueueError(f"module file {shown_name(name)} {problem}: rename it", path=where)
        if found := not_text(data):
            line, column, what = found
            raise QueueError(
                f"{what} at column {column}; a module of the series is UTF-8 text without NUL bytes (a patch holds "
                "text only): fix the file, then run the command again",
                path=f"{where}/{name}",
                line=line,
            )


def do_adopt(
    ws: Workspace,
    source: str,
    *,
    upstream_git: str | None,
    at: str | None,
    force: bool,
    discard: bool = False,
    progress: Progress | None = None,
) -> AdoptResult:
    operation.refuse_pending(ws, "a refresh is in progress; finish it with `pq continue` or `pq abort` first")
    if not force and patch_files(ws):
        raise QueueError("already holds a series; pass --force to replace it", path=str(ws.queue_dir.root))
    if not force and ws.queue_dir.exists():
        steps = ws.queue_dir.load_queue().lineage
        if steps:
            raise QueueError(
                f"records a lineage of {len(steps)} step(s) (the last: {steps[-1].kind}); "
                "`pq reproduce` rebuilds its patches, --force starts a new series",
                path=ws.rel(ws.queue_dir.queue_path),
            )
    dropped = output.discarded(refuse_out_edits(ws, discard=discard))
    loaded, result = plan_adopt(ws, source, upstream_git=upstream_git, at=at, progress=progress)
    result = replace(result, discarded=dropped)
    writes = Writes(ws, "adopt")
    write_series(ws, loaded, writes=writes, step=StepInfo("adopt", "adopt", loaded.queue.upstream, result.downstream))
    finish(ws, loaded, writes, len(loaded.patches))
    return result


def plan_adopt(
    ws: Workspace, source: str, *, upstream_git: str | None, at: str | None, progress: Progress | None = None
) -> tuple[LoadedStack, AdoptResult]:
    """The adopted stack as unreferenced commits (nothing written), and what the search found."""
    from patch_queue.series import adopt as adopt_mod

    modules, down_name, down_release, where = read_downstream(source, progress)
    texts = {k: v.decode("utf-8") for k, v in modules.items()}  # read_downstream checked them
    upath = adopt_mod.UPSTREAM_FILE
    searched = None
    if at is None:
        location = upstream_git_location(upstream_git)
        git = open_git(location, progress=progress)
        history = git.commits_touching(upath)
        say(progress, f"Searching {len(history)} upstream commits that touched {upath} ...")

        scans = MethodCache(adopt_mod.UPSTREAM_CLASS)
        # the revisions not scanned before, read in one stream (history order: neighbours share deltas)
        unscanned = [b for b in dict.fromkeys(git.blob_id(c, upath) for c in history) if b and not scans.has(b)]
        for blob, data in git.read_blobs(unscanned):
            scans.put(blob, symbols.scan_methods(data.decode("utf-8", errors="replace"), adopt_mod.UPSTREAM_CLASS))

        def methods(commit: str, blob: str) -> dict[str, str]:
            found = scans.get(blob)
            if found is None:
                data = git.read(commit, upath)
                assert data is not None
                found = symbols.scan_methods(data.decode("utf-8", errors="replace"), adopt_mod.UPSTREAM_CLASS)
                scans.put(blob, found)
            return found

        searched = adopt_mod.search_base(texts, history, lambda c: git.blob_id(c, upath), methods, git.commit_time)
        scans.save()
        snapshot = resolve_upstream(searched.best.commit, upstream_git=location, progress=progress)
    else:
        snapshot = resolve_upstream(at, upstream_git=upstream_git, progress=progress)
    upstream_text = snapshot.read(upath).decode("utf-8")
    carried = adopt_mod.classify(texts, upstream_text)
    label = snapshot.label
    warnings = _class_warnings(texts, upstream_text, carried, label, where)
    layout, steps = adopt_mod.plan_series(
        modules, carried, upstream_text, base_label=label, formatter=FORMATTER[0], line_length=FORMATTER[1]
    )
    pin = snapshot_pin(snapshot, "vllm-ascend", [upath])
    queue = Queue(pin, down_name, down_release, DOWNSTREAM_PACKAGE, layout, FORMATTER[0], FORMATTER[1])
    projection = stack.project_modules(queue, snapshot.read, label=label)
    base = stack.base_commit(ws.repo, queue, projection)
    when = 0
    if snapshot.kind == "git":
        when = open_git(upstream_git_location(upstream_git)).commit_time(snapshot.pin)
    person = Person(ADOPT_AUTHOR[0], ADOPT_AUTHOR[1], when, 0)
    files = ws.repo.read_tree(ws.repo.commit_info(base).tree)
    parent = base
    commits: list[tuple[str, str]] = []
    for i, step in enumerate(steps, 1):
        files[step.module] = step.after
        message = step.subject + "\n\n" + step.description + "\n"
        parent = ws.repo.commit(ws.repo.write_tree(files), [parent], message, person, person)
        commits.append((f"{i:04d}-{cut_slug(step.name)}.patch", parent))
    loaded = LoadedStack(queue, base, commits)
    best = searched.best if searched else None
    return loaded, AdoptResult(
        commit_label=label,
        public_commit=pin.public_commit,
        matched=best.matched if best else 0,
        total=best.total if best else 0,
        ties=searched.ties if searched else 0,
        searched=searched.searched if searched else 0,
        patches=[n for n, _ in commits],
        carried=carried,
        searched_auto=searched is not None,
        downstream=f"{down_name}=={down_release}" if down_release else "",
        warnings=warnings,
    )


def _class_warnings(
    texts: dict[str, str], upstream_text: str, carried: list[adopt_mod.Carried], label: str, where: str
) -> tuple[str, ...]:
    """The line that says the runners and the upstream file disagree on the upstream class
    (:func:`adopt_mod.class_mismatch`): an error when nothing at all is carried (no series to keep), else a warning
    that what was carried was matched by name alone."""
    from patch_queue.series import adopt as adopt_mod

    mismatch = adopt_mod.class_mismatch(texts, upstream_text)
    if mismatch is None:
        return ()
    path = mismatch.path if mismatch.line is None else f"{where}/{mismatch.path}"
    what = f"{mismatch.message} (upstream at {label})"
    if not carried:
        raise QueueError(
            f"{what}: nothing can be carried, so there is no series to adopt", path=path, line=mismatch.line
        )
    methods = sum(1 for c in carried if "." in c.downstream)
    at = f"{path}:{mismatch.line}" if mismatch.line is not None else path
    return (
        f"{at}: {what}: {methods} method(s) and {len(carried) - methods} top-level symbol(s) carried by name alone",
    )


def snapshot_pin(snapshot: Snapshot, name: str, paths: Iterable[str]) -> UpstreamPin:
    """The pin queue.toml records for ``snapshot`` and the sha256 of its ``paths``; its spec names a git pin
    by its public commit, never a machine's path."""
    return UpstreamPin(
        name=name,
        kind=snapshot.kind,
        spec=(snapshot.public_commit or snapshot.pin) if snapshot.kind == "git" else snapshot.spec,
        pin=snapshot.pin,
        label=snapshot.label,
        public_commit=snapshot.public_commit or "",
        files={p: stack.sha256(snapshot.read(p)) for p in paths},
    )
