"""The operations behind the commands: adopt, build, refresh / continue / abort / status, series edits.

Every operation plans in memory first (commits are unreferenced objects until then), then
hands all its file writes and ref moves to one :class:`patch_queue.project.journal.Writes`: journaled,
files replaced atomically, refs moved by compare-and-swap, so a command killed at any point
leaves the old state or one `pq continue` / `pq abort` completes or undoes.  A refresh that stops on a
conflict keeps its plan in ``.git/pq/refresh.json`` plus refs under ``refs/pq/refresh/`` so
that ``pq continue`` can go on and ``pq abort`` can put back every file and ref.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from patch_queue import sources
from patch_queue.checks.findings import ERROR, WARNING, Finding
from patch_queue.errors import PqError, QueueError
from patch_queue.git.repo import Person, ProjectRepo
from patch_queue.merge import anchors, fmt, symbols
from patch_queue.merge import three_way as merge
from patch_queue.outputs import folder as output
from patch_queue.project import journal as journal_mod
from patch_queue.project.fsutil import atomic_write, kill_point, read_folder
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import (
    REF_JOURNAL,
    LoadedStack,
    Progress,
    Workspace,
    applied_count,
    base_for_queue,
    check_no_journal,
    load_stack,
    read_state,
    stack_ref_updates,
    state_bytes,
)
from patch_queue.series import absorb, lineage, patchfile, replay, rerere, stack
from patch_queue.series import adopt as adopt_mod
from patch_queue.series.queue import Queue, UpstreamPin, render_queue, render_series
from patch_queue.sources import culprits

DOWNSTREAM_PACKAGE = "vllm_omni/platforms/npu/worker"
# the downstream's formatter: the vllm-omni runners are exactly what `ruff format --line-length 120` makes
FORMATTER = ("ruff", 120)
ADOPT_AUTHOR = ("vllm-omni contributors (adopted by pq)", "pq@localhost")
STATE_FILE = "refresh.json"
REF_REFRESH = "refs/pq/refresh/"
REF_PREVIOUS = "refs/pq/previous"  # the top before the last finished refresh: what `pq check` compares with


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


# ---------------------------------------------------------------------------------------------
# adopt


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


def read_downstream(source: str, progress: Progress | None = None) -> tuple[dict[str, bytes], str, str]:
    """(module files, downstream name, release) of a vllm-omni release spec or a directory."""
    if "==" in source:
        name, version = source.split("==", 1)
        files = sources.release_files(name.strip(), version.strip(), DOWNSTREAM_PACKAGE + "/", progress=progress)
        prefix = DOWNSTREAM_PACKAGE + "/"
        local = {k.removeprefix(prefix): v for k, v in files.items()}
        modules = {k: v for k, v in local.items() if "/" not in k and k.endswith(".py")}
        if not modules:
            raise QueueError(f"{source} has no NPU worker modules under {DOWNSTREAM_PACKAGE}/")
        return modules, name.strip(), version.strip()
    root = Path(source)
    if not root.is_dir():
        raise QueueError("neither a NAME==VERSION release nor a directory", path=source)
    for candidate in (root / DOWNSTREAM_PACKAGE, root / "npu", root):
        modules = {p.name: p.read_bytes() for p in sorted(candidate.glob("*.py")) if p.is_file()}
        if modules:
            return modules, "vllm-omni", ""
    raise QueueError("holds no NPU worker modules (*.py)", path=source)


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
    if read_state(ws, STATE_FILE) is not None:
        raise QueueError("a refresh is in progress; finish it with `pq continue` or `pq abort` first")
    if not force and _existing_patch_files(ws):
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
    _write_series(
        ws,
        loaded,
        old_names=_existing_patch_files(ws),
        writes=writes,
        step=StepInfo("adopt", "adopt", loaded.queue.upstream, result.downstream),
    )
    writes.move_refs(stack_ref_updates(ws, loaded, len(loaded.patches)))
    build_top(ws, loaded, writes=writes, applied=len(loaded.patches))
    writes.commit()
    return result


def plan_adopt(
    ws: Workspace, source: str, *, upstream_git: str | None, at: str | None, progress: Progress | None = None
) -> tuple[LoadedStack, AdoptResult]:
    """The adopted stack as unreferenced commits (nothing written), and what the search found."""
    modules, down_name, down_release = read_downstream(source, progress)
    texts = {}
    for k, v in modules.items():
        try:
            texts[k] = v.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise QueueError(f"not UTF-8 at byte {exc.start}", path=k) from None
    upath = adopt_mod.UPSTREAM_FILE
    searched = None
    if at is None:
        location = sources.upstream_git_location(upstream_git)
        git = sources.open_git(location, progress=progress)
        history = git.commits_touching(upath)
        _say(progress, f"Searching {len(history)} upstream commits that touched {upath} ...")

        scans = sources.MethodCache(adopt_mod.UPSTREAM_CLASS)
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
        snapshot = sources.resolve_upstream(searched.best.commit, upstream_git=location, progress=progress)
    else:
        snapshot = sources.resolve_upstream(at, upstream_git=upstream_git, progress=progress)
    upstream_text = snapshot.read(upath).decode("utf-8")
    carried = adopt_mod.classify(texts, upstream_text)
    label = snapshot.label
    layout, steps = adopt_mod.plan_series(
        modules, carried, upstream_text, base_label=label, formatter=FORMATTER[0], line_length=FORMATTER[1]
    )
    pin = UpstreamPin(
        name="vllm-ascend",
        kind=snapshot.kind,
        spec=portable_spec(snapshot),
        pin=snapshot.pin,
        label=label,
        public_commit=snapshot.public_commit or "",
        files={upath: stack.sha256(snapshot.read(upath))},
    )
    queue = Queue(pin, down_name, down_release, DOWNSTREAM_PACKAGE, layout, FORMATTER[0], FORMATTER[1])
    projection = stack.project_modules(queue, snapshot.read, label=label)
    base = stack.base_commit(ws.repo, queue, projection)
    when = 0
    if snapshot.kind == "git":
        when = sources.open_git(sources.upstream_git_location(upstream_git)).commit_time(snapshot.pin)
    person = Person(ADOPT_AUTHOR[0], ADOPT_AUTHOR[1], when, 0)
    files = ws.repo.read_tree(ws.repo.commit_info(base).tree)
    parent = base
    commits: list[tuple[str, str]] = []
    for i, step in enumerate(steps, 1):
        files[step.module] = step.after
        message = step.subject + "\n\n" + step.description + "\n"
        parent = ws.repo.commit(ws.repo.write_tree(files), [parent], message, person, person)
        commits.append((f"{i:04d}-{step.name}.patch", parent))
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
    )


def portable_spec(snapshot: sources.Snapshot) -> str:
    """The spec recorded in queue.toml: a git pin by its public commit, never a machine's path."""
    if snapshot.kind == "git":
        return snapshot.public_commit or snapshot.pin
    return snapshot.spec


def _existing_patch_files(ws: Workspace) -> set[str]:
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


def _write_series(ws: Workspace, loaded: LoadedStack, *, old_names: set[str], writes: Writes, step: StepInfo) -> None:
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
    old_names = old_names & set(listed)
    for name, data in exported.items():
        writes.write(root / name, data, group="patches")
    writes.write(ws.queue_dir.series_path, render_series(loaded.names).encode(), group="patches")
    top = module_files(ws, loaded.patches[-1][1] if loaded.patches else loaded.base)
    made = lineage.step_of(
        step.kind,
        step.command,
        list(exported.items()),
        upstream=step.upstream,
        downstream=step.downstream,
        edited=step.edited,
    )
    queue = lineage.with_step(loaded.queue, made, top, previous=previous)
    writes.write(ws.queue_dir.queue_path, render_queue(queue).encode(), group="patches")
    for name in sorted(old_names - set(exported)):
        writes.write(root / name, None, group="patches")


# ---------------------------------------------------------------------------------------------
# build

_IMPORT = re.compile(r"^(\s*)(from|import)(\s+)vllm_omni\.platforms\.npu\.worker\b", re.MULTILINE)


def standalone(files: dict[str, bytes], package: str) -> dict[str, bytes]:
    """Point the in-tree imports of the worker package into the standalone ``package``."""
    out = {}
    for path, data in files.items():
        text = data.decode("utf-8")
        out[path] = _IMPORT.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{package}", text).encode("utf-8")
    return out


def module_files(ws: Workspace, commit: str) -> dict[str, bytes]:
    files = ws.repo.read_tree(ws.repo.commit_info(commit).tree)
    return {k: v for k, v in files.items() if not k.startswith(stack.VENDOR)}


def build_files(
    ws: Workspace, commit: str, *, out: Path, standalone_pkg: bool, writes: Writes | None = None
) -> dict[str, bytes]:
    """Write the modules of ``commit`` into ``out`` (through ``writes``, else as a journaled write of its own)."""
    files = module_files(ws, commit)
    if standalone_pkg:
        files = standalone(files, out.name)
    own = writes is None
    writes = writes or Writes(ws, "build")
    output.sync(out, files, writes)
    if own:
        writes.commit()
    return files


def _built_top(ws: Workspace) -> dict[str, bytes]:
    top = ws.repo.ref(stack.REF_TOP)
    return module_files(ws, top) if top is not None and ws.repo.has_object(top) else {}


def refuse_out_edits(ws: Workspace, *, discard: bool, out: Path | None = None) -> list[output.Edited]:
    """Refuse to overwrite edits in the output folder that no patch holds (unless ``discard``)."""
    out = out or ws.out
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
    """Build the top of the stack: ``applied`` patches on (default: as refs/pq/top says)."""
    if applied is None:
        applied = applied_count(ws, loaded)
    top = loaded.patches[applied - 1][1] if applied else loaded.base
    return build_files(ws, top, out=out or ws.out, standalone_pkg=standalone_pkg, writes=writes)


def do_build(
    ws: Workspace,
    *,
    out: Path | None,
    standalone_pkg: bool,
    upstream_git: str | None,
    discard: bool = False,
    progress: Progress | None = None,
) -> tuple[dict[str, bytes], str]:
    """Build the top of the stack into ``out``; returns the files and what --discard dropped."""
    if read_state(ws, STATE_FILE) is not None:
        raise QueueError("a refresh is in progress; `pq continue` or `pq abort` first")
    _refuse_links(ws, (out or ws.out).resolve(), patches=False)
    dropped = refuse_out_edits(ws, discard=discard, out=(out or ws.out).resolve())
    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    return build_top(ws, loaded, out=out, standalone_pkg=standalone_pkg), output.discarded(dropped)


def sync_stack(ws: Workspace, *, upstream_git: str | None, progress: Progress | None = None) -> LoadedStack:
    """Load the stack from patches/ and make refs/pq/ match it."""
    loaded = load_stack(ws, upstream_git=upstream_git, progress=progress)
    updates = stack_ref_updates(ws, loaded, applied_count(ws, loaded))
    if updates:
        ws.repo.update_refs(updates, "pq: sync with patches/")
    return loaded


# ---------------------------------------------------------------------------------------------
# refresh


@dataclass
class RefreshOutcome:
    base_label: str
    target_label: str
    results: list[replay.PatchResult]
    conflicts: list[replay.Conflict]
    removed_symbols: list[str]
    finished: bool  # the whole series was replayed (conflicts may remain with --no-stop)
    stopped_at: str | None = None
    flags: list[replay.Conflict] = field(default_factory=list)
    blocks: tuple[int, int] = (0, 0)  # omni blocks before / after
    fences: list[dict[str, object]] = field(default_factory=list)  # Omni-new fence problems in the output
    upstream_commits: tuple[str, ...] = ("", "")
    downstream: tuple[str, str] = ("", "")
    out: str = "npu_worker"
    check: CheckOutcome | None = None  # pq check on the result, once the series is through without conflicts
    placements: list[absorb.Placement] = field(default_factory=list)  # where `pq continue` put edits
    discarded: str = ""  # what --discard dropped from the output folder


def _target_queue(queue: Queue, snapshot: sources.Snapshot) -> tuple[Queue, stack.Projection]:
    files = {p: stack.sha256(snapshot.read(p)) for p in queue.upstream_paths()}
    pin = UpstreamPin(
        name=queue.upstream.name,
        kind=snapshot.kind,
        spec=portable_spec(snapshot),
        pin=snapshot.pin,
        label=snapshot.label,
        public_commit=snapshot.public_commit or "",
        files=files,
    )
    return target_queue(queue, pin, snapshot.read)


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
) -> RefreshOutcome:
    if read_state(ws, STATE_FILE) is not None:
        raise QueueError("a refresh is already in progress; `pq continue` or `pq abort` it first")
    _refuse_links(ws, ws.out, patches=True)
    dropped = refuse_out_edits(ws, discard=discard)
    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    _say(progress, f"Resolving {to or 'the newest vllm-ascend release'} ...")
    snapshot = sources.resolve_upstream(to, upstream_git=upstream_git, progress=progress)
    kill_point("after-download")
    target, projection = _target_queue(loaded.queue, snapshot)
    new_base = stack.base_commit(ws.repo, target, projection)
    labels = (f"base {loaded.queue.upstream.label}", f"upstream {snapshot.label}")
    store = rerere.Store(ws.repo)
    results = replay.replay(
        ws.repo,
        loaded.patches,
        new_base,
        labels=labels,
        stop=not no_stop,
        progress=_killable(on_patch),
        normalize=normalizer(target, ws.repo, loaded.patches),
        recorded=store.lookup,
        edited=edit_lookup(ws, store, target),
    )
    removed = list(projection.missing)
    orig = {
        k: v for k, v in ws.repo.refs().items() if not k.startswith(REF_REFRESH) and k not in (rerere.REF, REF_JOURNAL)
    }
    found = [c for r in results for c in r.conflicts + r.flags]
    _mark_removed(found, removed)
    _say(progress, "Naming the upstream commits behind each conflict and flag ...")
    culprits.annotate(found, loaded.queue.upstream, target.upstream, upstream_git=upstream_git, progress=progress)
    blocks_before = _count_blocks(module_files(ws, loaded.patches[-1][1]) if loaded.patches else {})
    state = {
        "version": 1,
        "orig_refs": orig,
        "orig_out": _save_out(ws),
        "orig_queue": ws.queue_dir.queue_path.read_text(encoding="utf-8"),
        "old_base_label": loaded.queue.upstream.label,
        "target_queue": render_queue(target),
        "new_base": new_base,
        "labels": list(labels),
        "patches": [[n, c] for n, c in loaded.patches],
        "done": [[r.name, r.commit, r.status] for r in results],
        "no_stop": no_stop,
        "removed_symbols": removed,
        "conflicts": [c.as_json() for r in results for c in r.conflicts],
        "flags": [c.as_json() for r in results for c in r.flags],
        "blocks_before": blocks_before,
        "check": check,
        "check_sources": check_sources,
        "upstream_git": upstream_git,
        "upstream_commits": [loaded.queue.upstream.public_commit, target.upstream.public_commit],
        # recorded regions or edits were applied: the finished refresh records its edits (see _merge_edits)
        "recorded": any(f.kind in ("reused", "recorded-edits") for r in results for f in r.flags),
        "discarded": output.discarded(dropped),
    }
    return _advance(ws, state, target, results, progress=progress, store=store)


def _mark_removed(found: list[replay.Conflict], removed: list[str]) -> None:
    """Conflicts over a carried symbol that upstream removed or renamed are that kind."""
    gone = [r.split(": ", 1)[1].split(".")[-1] for r in removed]
    for c in found:
        if not c.conflict:
            continue
        for name in gone:
            head = f"def {name}("
            if head in c.sides.get("base", "") and head not in c.sides.get("upstream", ""):
                c.kind = "symbol-removed"
                c.message = f"upstream removed or renamed {name}, which this patch carries; port the omni edits"
                break


def _count_blocks(files: dict[str, bytes]) -> int:
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
        text = merge.one_side(files[path].decode("utf-8", errors="replace"), "theirs", blank=True)[0]
        _blocks, problems = anchors.parse_blocks(text)
        out += [{"file": path, "line": p.line, "message": p.message} for p in problems]
    return out


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


def _save_out(ws: Workspace) -> str:
    """The output folder as a tree object (kept by a ref while the refresh is open)."""
    return ws.repo.write_tree(read_folder(ws.out))


def _refuse_links(ws: Workspace, out: Path, *, patches: bool) -> None:
    """A symbolic link where pq would write is an error: pq replaces files, it never writes through a link
    (which could point outside the project) nor silently turns one into a copy."""
    q = ws.queue_dir
    paths = [out / m.path for m in q.load_queue().modules] + [out / ".pq-build"]
    if patches:
        paths += [q.queue_path, q.series_path] + [q.root / name for name in q.load_series()]
    for path in paths:
        if path.is_symlink():
            shown = path.relative_to(ws.root).as_posix() if path.is_relative_to(ws.root) else str(path)
            raise QueueError(
                f"is a symbolic link (to {os.readlink(path)}); pq writes regular files only: "
                "replace the link with a copy of its file",
                path=shown,
            )


def _advance(
    ws: Workspace,
    state: dict[str, object],
    target: Queue,
    results: list[replay.PatchResult],
    *,
    progress: Progress | None,
    command: str = "refresh",
    store: rerere.Store,
    placements: list[absorb.Placement] | None = None,
) -> RefreshOutcome:
    """Finish the refresh if the series is through, else record the stop.

    Every file and ref (refs/pq/resolutions, where ``store`` recorded resolutions and edits,
    included) is written once, through one journaled :class:`Writes`: a kill at any point leaves
    the old state or, after ``pq continue``, the new one (``pq abort`` puts the old one back).
    """
    writes = Writes(ws, command)
    patches: list[list[str]] = state["patches"]  # type: ignore[assignment]
    done: list[list[str]] = state["done"]  # type: ignore[assignment]
    conflicts = [replay.Conflict(**c) for c in state["conflicts"]]  # type: ignore[attr-defined]
    flags = [replay.Conflict(**c) for c in state.get("flags", [])]  # type: ignore[attr-defined]
    finished = len(done) == len(patches)
    last_conflicted = bool(done) and done[-1][2] == "conflict"
    new_patches = [(n, c) for n, c, _s in done]
    outcome = RefreshOutcome(
        base_label=str(state["old_base_label"]),
        target_label=target.upstream.label,
        results=results,
        conflicts=conflicts,
        removed_symbols=list(state["removed_symbols"]),  # type: ignore[call-overload]
        finished=finished,
        flags=flags,
        blocks=(
            int(state.get("blocks_before", 0)),  # type: ignore[call-overload]
            _count_blocks(module_files(ws, new_patches[-1][1])) if new_patches else 0,
        ),
        fences=fence_problems(module_files(ws, new_patches[-1][1])) if new_patches else [],
        upstream_commits=tuple(state.get("upstream_commits", ["", ""])),  # type: ignore[arg-type]
        downstream=(target.downstream_name, target.downstream_release),
        out=ws.rel(ws.out),
        placements=placements or [],
        discarded=str(state.get("discarded", "")),
    )
    if finished and not conflicts:
        loaded = LoadedStack(target, str(state["new_base"]), new_patches)
        edited: list[str] = []
        if command == "continue" or state.get("recorded"):
            edits = _merge_edits(
                ws,
                target,
                [(n, c) for n, c in patches],
                new_patches,
                str(state["new_base"]),
                (str(state["labels"][0]), str(state["labels"][1])),  # type: ignore[index]
            )
            store.record_edits(edits, f"pq {command}: edits recorded\n")
            edited = [n for n, _b, _a in edits]
        writes.move_refs(store.ref_update())
        _write_series(
            ws,
            loaded,
            old_names=_existing_patch_files(ws),
            writes=writes,
            step=StepInfo("refresh", command, target.upstream, edited=tuple(edited)),
        )
        updates = stack_ref_updates(ws, loaded, len(new_patches))
        old_top = patches[-1][1] if patches else None
        if old_top is not None and old_top != new_patches[-1][1]:
            updates[REF_PREVIOUS] = (ws.repo.ref(REF_PREVIOUS), old_top)
        for ref in ws.repo.refs(REF_REFRESH):
            updates[ref] = (ws.repo.ref(ref), None)
        writes.move_refs(updates)
        built = build_top(ws, loaded, writes=writes, applied=len(new_patches))
        writes.write(ws.state_dir / STATE_FILE, None, group="state")
        writes.commit()
        if state.get("check", True):
            # the refresh is done and written: a check that cannot run is a finding, never a failure
            _say(progress, "Checking the new runners (pq check) ...")
            try:
                outcome.check = run_checks(
                    ws,
                    _texts(built),
                    queue=target,
                    base=str(state["new_base"]),
                    reference=_texts(module_files(ws, old_top)) if old_top else {},
                    reference_label="the previous build",
                    upstream_git=state.get("upstream_git"),  # type: ignore[arg-type]
                    sources_on=bool(state.get("check_sources", True)),
                    progress=progress,
                )
            except PqError as exc:
                outcome.check = CheckOutcome(
                    [Finding("", 0, "check-failed", ERROR, f"pq check could not run: {exc}")],
                    "the previous build",
                    sorted(_texts(built)),
                    False,
                )
        return outcome
    # stopped (or finished with conflicts under --no-stop): keep everything needed to go on or back
    top = new_patches[-1][1] if new_patches else str(state["new_base"])
    keep: dict[str, tuple[str | None, str | None]] = {}
    wanted = {REF_REFRESH + "top": top, REF_REFRESH + "base": str(state["new_base"])}
    out_tree = str(state["orig_out"])
    holder = ws.repo.commit(out_tree, [], "pq refresh: saved output folder\n", _PQ, _PQ)
    wanted[REF_REFRESH + "saved-out"] = holder
    for ref, value in wanted.items():
        keep[ref] = (ws.repo.ref(ref), value)
    writes.move_refs(keep)
    writes.move_refs(store.ref_update())
    writes.write(ws.state_dir / STATE_FILE, state_bytes(state), group="state")
    output.sync(ws.out, module_files(ws, top), writes)
    writes.commit()
    outcome.stopped_at = done[-1][0] if last_conflicted and not finished else None
    return outcome


_PQ = Person(stack.BASE_PERSON_NAME, stack.BASE_PERSON_EMAIL, 0, 0)


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
) -> list[tuple[str, bytes, bytes]]:
    """(patch, merged body, final body) for every patch whose final body is not its plain merge.

    The plain merge is the one a later refresh from the same inputs computes before it looks for
    recorded edits: each old patch merged onto the final patch below it, no recorded regions.
    """
    normalize = normalizer(target, ws.repo, old)
    out = []
    parent = new_base
    for (name, old_commit), (_name, commit) in zip(old, final, strict=True):
        merged = replay.replay_patch(ws.repo, name, old_commit, parent, labels=labels, normalize=normalize)
        if merged.commit != commit:
            before, after = stack.export_patches(ws.repo, [merged.commit, commit])
            if before != after:
                out.append((name, before, after))
        parent = commit
    return out


def _require_state(ws: Workspace) -> dict[str, object]:
    state = read_state(ws, STATE_FILE)
    if state is None:
        raise QueueError("no refresh in progress")
    return state


def _killable(on_patch: Callable[[replay.PatchResult], None] | None) -> Callable[[replay.PatchResult], None]:
    """``on_patch`` with the interruption tests' kill point between two patches of a replay."""

    def each(result: replay.PatchResult) -> None:
        if on_patch is not None:
            on_patch(result)
        kill_point("between-patches")

    return each


def do_continue(
    ws: Workspace, *, progress: Progress | None = None, on_patch: Callable[[replay.PatchResult], None] | None = None
) -> RefreshOutcome:
    on_patch = _killable(on_patch)
    state = _require_state(ws)
    target = _parse_target(state)
    patches: list[list[str]] = state["patches"]  # type: ignore[assignment]
    done: list[list[str]] = state["done"]  # type: ignore[assignment]
    work = read_folder(ws.out)
    conflicted = [i for i, d in enumerate(done) if d[2] == "conflict"]
    if not conflicted:
        raise QueueError("nothing to continue: no conflicted patch")
    top_marked = module_files(ws, done[-1][1])
    for rel, data in sorted(work.items()):
        if rel in top_marked:
            line = replay.has_markers(data)
            if line is not None:
                raise QueueError(
                    "conflict markers remain; resolve them, then run `pq continue`",
                    path=ws.rel(ws.out / rel),
                    line=line,
                )
    resolved = {k: work.get(k, v) for k, v in top_marked.items()}
    label_list: list[str] = state["labels"]  # type: ignore[assignment]
    labels = (label_list[0], label_list[1])
    normalize = normalizer(target)
    store = rerere.Store(ws.repo)
    replayed: set[str] = set()
    new_flags: list[dict[str, object]] = []
    # carry the resolution back into every conflicted patch: apply (top with markers -> resolved)
    # onto that patch's own result; rebase what follows onto the resolved commits
    new_done: list[list[str]] = []
    parent = str(state["new_base"])
    results: list[replay.PatchResult] = []
    stale_conflicts: list[dict[str, object]] = []
    recorded: list[dict[str, object]] = []
    stop = not state["no_stop"]
    for name, commit, status in done:
        info = ws.repo.commit_info(commit)
        if status == "conflict":
            files = ws.repo.read_tree(info.tree)
            for path, data in sorted(files.items()):
                if path.startswith(stack.VENDOR) or path not in resolved or replay.has_markers(data) is None:
                    continue
                recorded += _resolved_regions(state, name, path, top_marked[path], resolved[path], data)
                carried = replay.carry_resolutions(top_marked[path], resolved[path], data)
                if carried is None or replay.has_markers(carried) is not None:
                    raise QueueError(
                        f"the resolution cannot be carried back into {name} automatically; "
                        "run `pq abort`, then `pq refresh` without --no-stop to resolve patch by patch",
                        path=ws.rel(ws.out / path),
                    )
                files[path] = carried
            res = replay.PatchResult(name, "modified", stack.commit_files(ws.repo, parent, files, info))
        elif info.parents[0] == parent:
            res = replay.PatchResult(name, status, commit)
        else:
            res = replay.replay_patch(
                ws.repo, name, commit, parent, labels=labels, normalize=normalize, recorded=store.lookup
            )
            res.status = status if not res.conflicts else "conflict"
            replayed.add(name)
            new_flags += [c.as_json() for c in res.flags]
            stale_conflicts += [c.as_json() for c in res.conflicts]
        if on_patch is not None:
            on_patch(res)
        results.append(res)
        new_done.append([res.name, res.commit, res.status])
        parent = res.commit
        if res.conflicts and stop:
            break
    # the maintainer's edits outside the conflict regions go into the patches that own their lines
    placements: list[absorb.Placement] = []
    if len(new_done) == len(done) and not stale_conflicts:
        chain = [(n, c) for n, c, _s in new_done]
        absorbed, placements = absorb.absorb(ws.repo, str(state["new_base"]), chain, resolved)
        for i, ((n, c), (_n, moved)) in enumerate(zip(chain, absorbed, strict=True)):
            if moved != c:
                new_done[i] = [n, moved, "modified"]
                results[i] = replay.PatchResult(n, "modified", moved, results[i].conflicts, results[i].flags)
        parent = absorbed[-1][1]
    # then the patches not replayed yet
    remaining = patches[len(new_done) :]
    if not (new_done and new_done[-1][2] == "conflict"):
        if recorded:
            store.record(recorded, "pq continue: resolutions recorded\n", move=False)
            recorded = []
        more = replay.replay(
            ws.repo,
            [(n, c) for n, c in remaining],
            parent,
            labels=labels,
            stop=stop,
            progress=on_patch,
            normalize=normalize,
            recorded=store.lookup,
            edited=edit_lookup(ws, store, target),
        )
        replayed.update(r.name for r in more)
        new_flags += [c.as_json() for r in more for c in r.flags]
        results += more
        new_done += [[r.name, r.commit, r.status] for r in more]
        stale_conflicts += [c.as_json() for r in more for c in r.conflicts]
    if recorded:
        store.record(recorded, "pq continue: resolutions recorded\n", move=False)
    state["done"] = new_done
    state["conflicts"] = stale_conflicts
    state["flags"] = [f for f in state.get("flags", []) if f["patch"] not in replayed] + new_flags  # type: ignore[attr-defined]
    return _advance(
        ws, state, target, results, progress=progress, command="continue", store=store, placements=placements
    )


def _resolved_regions(
    state: dict[str, object], patch: str, path: str, top_marked: bytes, resolved: bytes, mine: bytes
) -> list[dict[str, object]]:
    """Recorded-resolution entries for the regions of ``patch`` in ``path`` the maintainer resolved."""
    texts = replay.resolutions_of(top_marked, resolved, mine, patch)
    mine_conflicts = sorted(
        (
            c
            for c in state["conflicts"]  # type: ignore[attr-defined]
            if c["patch"] == patch and c["file"] == path and c.get("key")
        ),
        key=lambda c: c["line"],
    )
    if texts is None or len(texts) != len(mine_conflicts):
        return []
    return [
        {
            "key": c["key"],
            "patch": replay.patch_key(patch),
            "file": path,
            "symbol": c["symbol"],
            "kind": c["kind"],
            "base": c["sides"].get("base", ""),
            "upstream": c["sides"].get("upstream", ""),
            "patch_text": c["sides"].get("patch", ""),
            "resolution": text,
        }
        for c, text in zip(mine_conflicts, texts, strict=True)
    ]


def _parse_target(state: dict[str, object]) -> Queue:
    from patch_queue.series.queue import parse_queue

    return parse_queue(str(state["target_queue"]), path=".git/pq/refresh.json")


def do_abort(ws: Workspace) -> None:
    """Put every file and ref back as before the refresh, in one journaled write."""
    state = _require_state(ws)
    orig: dict[str, str] = state["orig_refs"]  # type: ignore[assignment]
    current = ws.repo.refs()
    updates: dict[str, tuple[str | None, str | None]] = {}
    for ref in sorted(set(current) | set(orig)):
        if ref in (rerere.REF, REF_JOURNAL):
            continue  # recorded resolutions outlive an abort; the journal's ref is the journal's
        if current.get(ref) != orig.get(ref):
            updates[ref] = (current.get(ref), orig.get(ref))
    saved = ws.repo.read_tree(str(state["orig_out"]))
    writes = Writes(ws, "abort")
    # the output folder as it was saved when the refresh began: whatever is there and was not then goes
    for rel in sorted(set(read_folder(ws.out)) - set(saved)):
        writes.write(ws.out / rel, None, group="out")
    for rel, data in sorted(saved.items()):
        writes.write(ws.out / rel, data, group="out")
    if ws.queue_dir.queue_path.read_text(encoding="utf-8") != state["orig_queue"]:
        writes.write(ws.queue_dir.queue_path, str(state["orig_queue"]).encode(), group="patches")
    writes.move_refs(updates)
    writes.write(ws.state_dir / STATE_FILE, None, group="state")
    writes.commit()


def recover_interrupted(ws: Workspace, *, forward: bool) -> str | None:
    """Finish (``forward``, `pq continue`) or undo (`pq abort`) the writes of a command that was killed part way.

    Returns the interrupted command's name, or None when no command was interrupted.
    """
    return journal_mod.recover(ws, forward=forward)


@dataclass(frozen=True)
class Status:
    in_progress: bool
    upstream: str
    target: str | None
    patches: list[tuple[str, str]]  # (name, state)
    conflicts: list[replay.Conflict]
    edits: list[output.Edited] = field(default_factory=list)  # in the output folder, held by no patch
    steps: int = 0  # of the lineage


def do_status(ws: Workspace, *, upstream_git: str | None) -> Status:
    check_no_journal(ws)  # a killed command's half-done writes: say how to finish or undo them
    state = read_state(ws, STATE_FILE)
    if state is not None:
        target = _parse_target(state)
        done = {d[0]: d[2] for d in state["done"]}  # type: ignore[attr-defined]
        rows = [(n, done.get(n, "pending")) for n, _c in state["patches"]]  # type: ignore[attr-defined]
        conflicts = [replay.Conflict(**c) for c in state["conflicts"]]  # type: ignore[attr-defined]
        return Status(True, str(state["old_base_label"]), target.upstream.label, rows, conflicts)
    loaded = load_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    rows = [(n, "applied" if i < applied else "unapplied") for i, (n, _c) in enumerate(loaded.patches)]
    return Status(False, loaded.queue.upstream.label, None, rows, [], out_edits(ws), len(loaded.queue.lineage))


def do_accept(ws: Workspace, *, upstream_git: str | None, discard: bool = False) -> int:
    """Take the patch bodies in patches/ as they are (hand edits included) as a lineage step of their own.

    Returns how many bodies differ from the last step.  Such a step cannot be reproduced without
    the bodies: a fork that commits them is where it belongs.
    """
    _no_refresh(ws)
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
    top = module_files(ws, loaded.patches[-1][1] if loaded.patches else base)
    step = lineage.step_of("import", "accept", bodies, upstream=queue.upstream)
    new_queue = lineage.with_step(queue, step, top)
    writes = Writes(ws, "accept")
    writes.write(ws.queue_dir.queue_path, render_queue(new_queue).encode(), group="patches")
    writes.move_refs(stack_ref_updates(ws, loaded, len(loaded.patches)))
    build_top(ws, loaded, writes=writes, applied=len(loaded.patches))
    writes.commit()
    return changed


def report_json(outcome: RefreshOutcome) -> dict[str, object]:
    """The refresh report (format 2; the schema is described in patch_queue/outputs/report.py)."""

    def entry(c: replay.Conflict) -> dict[str, object]:
        data = c.as_json()
        data.pop("conflict")
        if c.conflict:
            data.pop("resolution")
        return data

    return {
        "format": 2,
        "upstream": {
            "base": outcome.base_label,
            "target": outcome.target_label,
            "base_commit": outcome.upstream_commits[0],
            "target_commit": outcome.upstream_commits[-1],
        },
        "downstream": {"name": outcome.downstream[0], "release": outcome.downstream[1]},
        "out": outcome.out,
        "patches": [{"name": r.name, "status": r.status} for r in outcome.results],
        "conflicts": [entry(c) for c in outcome.conflicts],
        "flags": [entry(c) for c in outcome.flags],
        "removed_symbols": outcome.removed_symbols,
        "blocks": {"before": outcome.blocks[0], "after": outcome.blocks[1]},
        "fences": outcome.fences,
        "check": outcome.check.as_json() if outcome.check is not None else None,
        "finished": outcome.finished,
        "stopped_at": outcome.stopped_at,
    }


def write_report(path: Path, data: dict[str, object]) -> None:
    atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


# ---------------------------------------------------------------------------------------------
# editing the series


def do_new(ws: Workspace, name: str, *, message: str | None, upstream_git: str | None) -> str:
    """A new patch above the applied ones holding the edits of the output folder that no patch holds.

    Like ``git commit``: edit ``npu_worker/`` first, then ``pq new NAME``; ``pq record`` folds
    later edits into it.  An empty patch is refused, since git format-patch has no form for it.
    """
    _no_refresh(ws)
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    slug = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-").removesuffix(".patch")
    if not slug:
        raise QueueError(f"{name!r} is not a usable patch name")
    if any(n.split("-", 1)[-1] == f"{slug}.patch" for n in loaded.names):
        raise QueueError(f"a patch named {slug} already exists")
    filename = f"{len(loaded.patches) + 1:04d}-{slug}.patch"
    parent = loaded.patches[applied - 1][1] if applied else loaded.base
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
    _write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), applied + 1, "new")
    return filename


def _write_edit(ws: Workspace, old: LoadedStack, new: LoadedStack, applied: int, command: str) -> None:
    """Write an edited series: bodies, refs, the output folder, and a lineage step whose changed bodies
    are recorded edits (so the step is reproducible without the bodies)."""
    old_bodies = stack.export_series(ws.repo, old.patches)
    changes = [(n, old_bodies.get(n, b""), body) for n, body in stack.export_series(ws.repo, new.patches).items()]
    changes = [(n, before, after) for n, before, after in changes if before != after]
    store = rerere.Store(ws.repo)
    store.record_edits(changes, f"pq {command}: edits recorded\n")
    writes = Writes(ws, command)
    writes.move_refs(store.ref_update())
    _write_series(
        ws,
        new,
        old_names=_existing_patch_files(ws),
        writes=writes,
        step=StepInfo("edit", command, edited=tuple(n for n, _b, _a in changes)),
    )
    writes.move_refs(stack_ref_updates(ws, new, applied))
    build_top(ws, new, writes=writes, applied=applied)
    writes.commit()


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
    _no_refresh(ws)
    loaded = sync_stack(ws, upstream_git=upstream_git)
    applied = applied_count(ws, loaded)
    if not applied:
        raise QueueError("no patch is applied; `pq push` or `pq new NAME` first")
    if into is not None and into not in loaded.names:
        into = next((n for n in loaded.names if replay.patch_key(n) == replay.patch_key(into)), into)
    work = _work_edits(ws, loaded, loaded.patches[applied - 1][1])
    if not work:
        return []
    absorbed, placements = absorb.absorb(ws.repo, loaded.base, loaded.patches[:applied], work, into=into)
    rebuilt = _rechain(ws, loaded, absorbed + loaded.patches[applied:], applied - 1)
    _write_edit(ws, loaded, LoadedStack(loaded.queue, loaded.base, rebuilt), applied, "record")
    return placements


def do_push_pop(
    ws: Workspace, *, push: bool, all_: bool, upstream_git: str | None, discard: bool = False
) -> tuple[int, int, str]:
    """Apply or unapply patches; returns (applied before, after, what --discard dropped)."""
    _no_refresh(ws)
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
    writes = Writes(ws, "push" if push else "pop")
    writes.move_refs(stack_ref_updates(ws, loaded, target))
    build_top(ws, loaded, writes=writes, applied=target)
    writes.commit()
    return applied, target, dropped


def _no_refresh(ws: Workspace) -> None:
    if read_state(ws, STATE_FILE) is not None:
        raise QueueError("a refresh is in progress; `pq continue` or `pq abort` first")


def patch_subject(ws: Workspace, name: str) -> str:
    try:
        return patchfile.parse((ws.queue_dir.root / name).read_bytes(), path=f"patches/{name}").subject
    except PqError:
        return "?"


# ---------------------------------------------------------------------------------------------
# check


@dataclass
class CheckOutcome:
    findings: list[Finding]
    reference: str  # what the omni blocks were compared with
    files: list[str]
    sources: bool  # import resolution and the GPU audit ran

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == ERROR)

    def as_json(self) -> dict[str, object]:
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.rule] = counts.get(f.rule, 0) + 1
        return {
            "format": 1,
            "reference": self.reference,
            "files": self.files,
            "sources": self.sources,
            "errors": self.errors,
            "warnings": len(self.findings) - self.errors,
            "counts": dict(sorted(counts.items())),
            "findings": [f.as_json() for f in self.findings],
        }


def _texts(files: dict[str, bytes]) -> dict[str, str]:
    return {
        k: v.decode("utf-8", errors="replace")
        for k, v in files.items()
        if k.endswith(".py") and not k.startswith(stack.VENDOR) and "/" not in k
    }


def run_checks(
    ws: Workspace,
    files: dict[str, str],
    *,
    queue: Queue,
    base: str,
    reference: dict[str, str],
    reference_label: str,
    upstream_git: str | None,
    sources_on: bool,
    progress: Progress | None = None,
) -> CheckOutcome:
    """Every check of ``pq check`` on ``files`` (module name -> text)."""
    from patch_queue.checks import rules as check

    findings = check.check_parse(files) + check.check_fences(files)
    findings += check.check_blocks(reference, files, what=reference_label)
    findings += check.check_rules(files, check.load_rules(ws.queue_dir.root))
    vendored = ws.repo.read_tree(ws.repo.commit_info(base).tree)
    for path in queue.upstream_paths():
        data = vendored.get(stack.VENDOR + path)
        if data is not None:
            findings += check.check_signatures(
                files, data.decode("utf-8", errors="replace"), label=queue.upstream.label
            )
    if sources_on:
        findings += source_checks(queue, files, upstream_git=upstream_git, progress=progress)
    return CheckOutcome(sorted(set(findings)), reference_label, sorted(files), sources_on)


def source_checks(
    queue: Queue, files: dict[str, str], *, upstream_git: str | None, progress: Progress | None = None
) -> list[Finding]:
    """Import resolution against the real source trees, and the GPU-side sync audit."""
    from patch_queue.checks import gpu_audit, imports

    out: list[Finding] = []
    release = queue.downstream_release
    trees: dict[str, imports.SourceTree] = {}
    try:
        _say(progress, f"Reading the vllm-ascend source tree at {queue.upstream.label} ...")
        snapshot = sources.resolve_upstream(queue.upstream.spec, upstream_git=upstream_git, progress=progress)
        trees["vllm_ascend"] = imports.tree_from_snapshot(snapshot, "vllm_ascend/")
        if release:
            _say(progress, f"Reading vllm-omni {release} and vllm {release} ...")
            trees["vllm_omni"] = imports.tree_from_release(queue.downstream_name, release, "vllm_omni/")
            trees["vllm"] = imports.tree_from_release("vllm", release, "vllm/")
    except PqError as exc:
        out.append(
            Finding(
                "",
                0,
                "sources-unavailable",
                WARNING,
                f"import resolution and the GPU audit need the upstream sources: {exc}",
            )
        )
        return out
    package = queue.package.replace("/", ".")
    for path, text in sorted(files.items()):
        out += imports.check_imports(text, file=path, package=package, trees=trees)
    if not release or "vllm" not in trees:
        out.append(
            Finding(
                "",
                0,
                "gpu-audit-skipped",
                WARNING,
                "the GPU-side audit needs the pinned vllm-omni release (the series was adopted from a folder)",
            )
        )
        return out
    try:
        gpu = sources.release_files(queue.downstream_name, release, "vllm_omni/worker/", progress=progress)
        gpu_files = {
            k.rsplit("/", 1)[-1]: v.decode("utf-8", errors="replace")
            for k, v in gpu.items()
            if re.fullmatch(r"gpu_\w*model_runner\.py", k.rsplit("/", 1)[-1])
        }
        vllm_runner = gpu_audit.load_vllm_runner(release)
    except PqError as exc:
        out.append(Finding("", 0, "sources-unavailable", WARNING, f"the GPU-side audit needs vLLM {release}: {exc}"))
        return out
    ascend = snapshot.read("vllm_ascend/worker/model_runner_v1.py").decode("utf-8", errors="replace")
    broken = sorted(k for k, v in files.items() if not _parses(v))
    if broken:  # the parse rule reports them; an audit of half the runners would only mislead
        out.append(
            Finding(
                "",
                0,
                "gpu-audit-skipped",
                WARNING,
                f"the GPU-side audit needs runners that parse; {', '.join(broken)} do not",
            )
        )
        return out
    try:
        out += gpu_audit.findings(gpu_audit.audit(gpu_files, vllm_runner, files, ascend))
    except PqError as exc:
        out.append(Finding("", 0, "gpu-audit-skipped", WARNING, f"the GPU-side audit could not run: {exc}"))
    return out


def _parses(text: str) -> bool:
    import ast

    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def do_check(
    ws: Workspace, *, upstream_git: str | None, sources_on: bool, progress: Progress | None = None
) -> CheckOutcome:
    """Check the built package in the output folder against the series and the upstream sources."""
    files = _texts(read_folder(ws.out))
    if not files:
        raise QueueError(f"nothing to check: no modules in {ws.rel(ws.out)}/; run `pq build` first")
    if read_state(ws, STATE_FILE) is not None:
        state = _require_state(ws)
        queue = _parse_target(state)
        base = str(state["new_base"])
        previous = str(state["patches"][-1][1]) if state["patches"] else base  # type: ignore[index]
    else:
        loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
        queue, base = loaded.queue, loaded.base
        previous = ws.repo.ref(REF_PREVIOUS) or (loaded.patches[-1][1] if loaded.patches else base)
    label = "the previous build" if ws.repo.ref(REF_PREVIOUS) == previous else "the series"
    reference = _texts(module_files(ws, previous))
    return run_checks(
        ws,
        files,
        queue=queue,
        base=base,
        reference=reference,
        reference_label=label,
        upstream_git=upstream_git,
        sources_on=sources_on,
        progress=progress,
    )
