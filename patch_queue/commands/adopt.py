"""pq adopt: derive the series from a hand-maintained release or folder."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from patch_queue import presets
from patch_queue.commands.write import (
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
from patch_queue.sources import registry, release_search
from patch_queue.sources.archives import release_files
from patch_queue.sources.cache import MethodCache
from patch_queue.sources.snapshot import Snapshot, open_git, resolve_upstream, upstream_git_location
from patch_queue.spec import QueueSpec

if TYPE_CHECKING:  # the adopt search is imported where it runs: a refresh needs only snapshot_pin from here
    from patch_queue.series import adopt as adopt_mod


def author(spec: QueueSpec, when: int = 0) -> Person:
    """The author of the patches that hold the maintainers' own edits (``pq adopt``'s, and a module new in a merged
    release): the contributors of the queue's downstream, at ``when``."""
    return Person(f"{spec.downstream_dist} contributors (adopted by pq)", "pq@localhost", when, 0)


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
    searched_kind: str = "revisions"  # what the search read: git "revisions", or registry "releases"
    tied: tuple[str, ...] = ()  # the releases that tie with the best, newest first (a search among releases)


def queue_spec(ws: Workspace, preset: str | None, source: str = "", **options: str | None) -> QueueSpec:
    """The queue ``pq adopt`` adopts: the preset named (else the queue ``queue.toml`` describes, else the default
    preset's) with every option given set; an unknown preset, or an option that is no path of the kind it names,
    is one line.

    Without ``--preset``, options that name another upstream (its distribution, file or class) make another pair
    (:func:`presets.other_pair`): nothing of the base's own upstream carries over (its git history, fence, check
    rules, GPU reference, wheel).  A release ``source`` (``NAME==VERSION``) of another distribution than the base's
    downstream names the downstream."""
    if preset is not None:
        base = presets.preset(preset)
        if base is None:
            raise QueueError(f"--preset {preset!r} is no preset (they are {', '.join(presets.PRESETS)})")
    else:
        base = ws.spec
    for key in ("upstream_file", "package", "out"):
        value = options.get(key)
        if value is not None and (not value.strip() or value.startswith("/") or ".." in value.split("/")):
            raise QueueError(f"--{key.replace('_', '-')} {value!r} must be a relative path inside the project")
    for key in ("upstream_dist", "upstream_class"):
        value = options.get(key)
        if value is not None and not value.strip():
            raise QueueError(f"--{key.replace('_', '-')} must not be empty")
    if (f := options.get("upstream_file")) is not None and not f.endswith(".py"):
        raise QueueError(f"--upstream-file {f!r} must name a Python module (*.py)")
    options = {k: (v.strip("/") if k in ("upstream_file", "package", "out") and v else v) for k, v in options.items()}
    release = registry.parse_release(source) if source and not Path(source).is_dir() else None
    if release is not None and registry.normalize_name(release[0]) != registry.normalize_name(base.downstream_dist):
        options["downstream_dist"] = registry.normalize_name(release[0])
    upstream = ("upstream_dist", "upstream_file", "upstream_class")
    if preset is None and any(options.get(k) not in (None, getattr(base, k)) for k in upstream):
        base = presets.other_pair(base.with_options(**options))
    return base.with_options(**options)


class Downstream(NamedTuple):
    modules: dict[str, bytes]
    name: str  # the downstream distribution
    release: str  # its version; "" for a folder
    where: str  # where the modules were read: the folder, or "name==version: package"
    subpackages: tuple[str, ...] = ()  # the folders below the package holding Python files, not read (sorted)


def read_downstream(source: str, progress: Progress | None, spec: QueueSpec) -> Downstream:
    """The modules of the queue ``spec``'s runners in a downstream release spec or a directory, every module
    checked (:func:`_check_modules`): an
    existing directory is one whatever its path holds (``./x==1/npu``), a release is ``NAME==VERSION``
    (:func:`registry.parse_release`), anything else one line before anything is downloaded.

    A directory holds the modules in the downstream package's path, in the folder named after the queue's preset
    (``npu/``, ``gpu/``: a vllm-omni release's two runner folders, as the corpus keeps them; :func:`_preset_folder`)
    or itself (the first that holds ``*.py``).  Reading its preset's folder where the folders of other presets stand
    beside it says so in one line (they hold the runners of other queues, never of this series); a directory that
    holds only other presets' folders is one line naming them."""
    root = Path(source)
    if root.is_dir():
        own = _preset_folder(spec)
        others = [name for name in presets.PRESETS if name != own and (root / name).is_dir()]
        for candidate in (root / spec.package, *([root / own] if own else []), root):
            modules = {p.name: p.read_bytes() for p in sorted(candidate.glob("*.py")) if p.is_file()}
            if modules:
                _check_modules(modules, str(candidate))
                if own and candidate == root / own and others:
                    say(
                        progress,
                        f"Reading {candidate}: {root} holds both {own}/ and {'/, '.join(others)}/, and this queue's "
                        f"runners are the {own.upper()} ones (copies of {spec.upstream_dist}'s {spec.upstream_class}); "
                        f"{'/, '.join(others)}/ {'is' if len(others) == 1 else 'are'} not read",
                    )
                below = _subpackages(str(p.relative_to(candidate)) for p in candidate.rglob("*.py"))
                return Downstream(modules, spec.downstream_dist, "", str(candidate), below)
        own_kind = f"{own.upper()} worker modules (*.py)"
        kind = own_kind if own else f"runner modules (*.py) of {spec.downstream_dist}'s {spec.package}/"
        held = ", ".join(f"{name}/ holds {name.upper()} runners" for name in others)
        name_it = f"the {own.upper()} runners" if own else "this queue's runners"
        why = f" ({held}, not this queue's: name the folder of {name_it})" if others else ""
        raise QueueError(f"holds no {kind}{why}", path=source)
    release = registry.parse_release(source)
    if release is None:
        raise QueueError("neither a NAME==VERSION release nor a directory", path=source)
    name, version = release[0], release[1].text
    modules, below = _release_package(name, version, progress, spec)
    return Downstream(modules, name, version, f"{name}=={version}: {spec.package}", below)


def _preset_folder(spec: QueueSpec) -> str:
    """The folder a directory of several queues' runners keeps the queue ``spec``'s in: its preset's name, or for a
    queue set by options the name of the preset whose downstream package it keeps ("" for none)."""
    if spec.preset:
        return spec.preset
    same = [
        p.preset
        for p in presets.PRESETS.values()
        if (p.downstream_dist, p.package) == (spec.downstream_dist, spec.package)
    ]
    return same[0] if len(same) == 1 else ""


def release_modules(name: str, version: str, progress: Progress | None, spec: QueueSpec) -> dict[str, bytes]:
    """The runner modules of the release ``name==version`` (read from the registry, never from a folder) in the
    queue ``spec``'s package, every module checked (:func:`_check_modules`)."""
    return _release_package(name, version, progress, spec)[0]


def _release_package(
    name: str, version: str, progress: Progress | None, spec: QueueSpec
) -> tuple[dict[str, bytes], tuple[str, ...]]:
    """(:func:`release_modules`, the package's subpackages: :func:`_subpackages`)."""
    prefix = spec.package + "/"
    files = release_files(name, version, prefix, progress=progress)
    local = {k.removeprefix(prefix): v for k, v in files.items()}
    modules = {k: v for k, v in local.items() if "/" not in k and k.endswith(".py")}
    if not modules:
        raise QueueError(f"{name}=={version} has no runner modules under {spec.package}/")
    _check_modules(modules, f"{name}=={version}: {spec.package}")
    return modules, _subpackages(local)


def _subpackages(paths: Iterable[str]) -> tuple[str, ...]:
    """The first folders of the Python files among ``paths`` (relative to the package) that lie below it: a series
    keeps the modules of the package itself (a module is a plain file name), so these stay the downstream's own."""
    return tuple(sorted({p.split("/", 1)[0] for p in paths if "/" in p and p.endswith(".py")}))


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


def adopt_queue(
    ws: Workspace,
    source: str,
    *,
    preset: str | None,
    options: dict[str, str | None],
    upstream_git: str | None,
    at: str | None,
    force: bool,
    discard: bool = False,
    progress: Progress | None = None,
) -> AdoptResult:
    """`pq adopt`: the queue it adopts (:func:`queue_spec`: ``preset`` with ``options`` set) made the workspace's,
    its output folder refused where it is unusable, then :func:`do_adopt`."""
    spec = queue_spec(ws, preset, source, **options)
    ws.use_spec(spec)
    output.refuse_unusable(ws)
    return do_adopt(
        ws, source, upstream_git=upstream_git, at=at, force=force, discard=discard, progress=progress, spec=spec
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
    spec: QueueSpec | None = None,
) -> AdoptResult:
    """Adopt ``source`` as the queue ``spec`` (None: the queue ``queue.toml`` describes, else the default preset's)."""
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
    spec = spec or ws.spec
    ws.use_spec(spec)
    loaded, result = plan_adopt(ws, source, upstream_git=upstream_git, at=at, progress=progress, spec=spec)
    result = replace(result, discarded=dropped)
    writes = Writes(ws, "adopt")
    write_series(ws, loaded, writes=writes, step=StepInfo("adopt", "adopt", loaded.queue.upstream, result.downstream))
    finish(ws, loaded, writes, len(loaded.patches))
    return result


def plan_adopt(
    ws: Workspace,
    source: str,
    *,
    upstream_git: str | None,
    at: str | None,
    progress: Progress | None = None,
    spec: QueueSpec | None = None,
) -> tuple[LoadedStack, AdoptResult]:
    """The adopted stack of the queue ``spec`` (None: the workspace's) as unreferenced commits (nothing written),
    and what the search found."""
    from patch_queue.series import adopt as adopt_mod

    spec = spec or ws.spec
    modules, down_name, down_release, where, below = read_downstream(source, progress, spec)
    texts = {k: v.decode("utf-8") for k, v in modules.items()}  # read_downstream checked them
    upath, cls = spec.upstream_file, spec.upstream_class
    searched = None
    location = ""
    if at is None:
        location = upstream_git_location(upstream_git, spec)
    if at is None and not location:  # no git history: the upstream's registry releases are its history
        searched, snapshot = _search_releases(spec, texts, down_release, progress)
    elif at is None:
        git = open_git(location, progress=progress)
        history = git.commits_touching(upath)
        say(progress, f"Searching {len(history)} upstream commits that touched {upath} ...")

        scans = MethodCache(cls)
        # the revisions not scanned before, read in one stream (history order: neighbours share deltas)
        unscanned = [b for b in dict.fromkeys(git.blob_id(c, upath) for c in history) if b and not scans.has(b)]
        for blob, data in git.read_blobs(unscanned):
            scans.put(blob, symbols.scan_methods(data.decode("utf-8", errors="replace"), cls))

        def methods(commit: str, blob: str) -> dict[str, str]:
            found = scans.get(blob)
            if found is None:
                data = git.read(commit, upath)
                assert data is not None
                found = symbols.scan_methods(data.decode("utf-8", errors="replace"), cls)
                scans.put(blob, found)
            return found

        searched = adopt_mod.search_base(texts, history, lambda c: git.blob_id(c, upath), methods, git.commit_time)
        scans.save()
        snapshot = resolve_upstream(searched.best.commit, upstream_git=location, progress=progress, queue=spec)
    else:
        snapshot = resolve_upstream(at, upstream_git=upstream_git, progress=progress, queue=spec)
    upstream_text = snapshot.read(upath).decode("utf-8")
    carried = adopt_mod.classify(texts, upstream_text, upstream_path=upath, cls=cls)
    label = snapshot.label
    warnings = _class_warnings(texts, upstream_text, carried, label, where, spec)
    warnings += search_warnings(searched, carried, upath, cls, label)
    if below:
        folders = ", ".join(f"{b}/" for b in below)
        warnings += (
            f"{where}: {folders} not read: the series keeps the modules of {spec.package}/ itself, not its "
            f"subpackages (the runners import them from {spec.downstream_dist} as it ships them)",
        )
    layout, steps = adopt_mod.plan_series(
        modules,
        carried,
        upstream_text,
        base_label=label,
        upstream_path=upath,
        downstream=spec.downstream_dist,
        fence=spec.fence,
        formatter=FORMATTER[0],
        line_length=FORMATTER[1],
    )
    pin = snapshot_pin(snapshot, spec.upstream_dist, [upath])
    queue = Queue(pin, down_name, down_release, spec.package, layout, FORMATTER[0], FORMATTER[1], spec=spec)
    projection = stack.project_modules(queue, snapshot.read, label=label)
    base = stack.base_commit(ws.repo, queue, projection)
    when = 0
    if snapshot.kind == "git":
        when = open_git(upstream_git_location(upstream_git, spec)).commit_time(snapshot.pin)
    person = author(spec, when)
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
        searched_kind="releases" if searched is not None and not location else "revisions",
        tied=tuple(c.commit for c in searched.ranking if c.matched == searched.best.matched)
        if searched is not None and not location
        else (),
        downstream=f"{down_name}=={down_release}" if down_release else "",
        warnings=warnings,
    )


def _search_releases(
    spec: QueueSpec, texts: dict[str, str], down_release: str, progress: Progress | None
) -> tuple[adopt_mod.SearchResult, Snapshot]:
    """The base of a queue whose upstream has no git history, searched among the upstream's registry releases
    (:func:`release_search.release_window`), and its snapshot.

    When the oldest release read scores the best (alone or in a tie) the base may be older still: a folder names no
    release to bound the window, so its newest releases may all be later than the copies.  The window then widens by
    :data:`release_search.SEARCHED` releases at a time, up to :data:`release_search.WIDEST`, until the best is
    inside it (or the oldest release read no longer holds the upstream file: its history starts there)."""
    from patch_queue.series import adopt as adopt_mod

    upath, cls = spec.upstream_file, spec.upstream_class
    unbounded = "" if down_release else " (a folder names no release to bound them: --at names the base)"
    scans = MethodCache(cls)
    blobs: dict[str, str] = {}
    limit = release_search.SEARCHED
    while True:
        window = release_search.release_window(spec.upstream_dist, down_release, limit)
        if not window.versions:
            raise QueueError(
                f"the queue names no git history of {spec.upstream_dist} and {window.why}: name the base with --at "
                f"({spec.upstream_dist}==VERSION, or a folder of its sources), or its repository with --upstream"
            )
        say(
            progress,
            f"Searching {window.why}, for the base (the queue names no git history of {spec.upstream_dist})"
            f"{unbounded} ...",
        )
        for version in window.versions:
            if version in blobs:
                continue
            blob, data = release_search.file_blob(spec.upstream_dist, version, upath, progress)
            if not blob:
                continue
            blobs[version] = blob
            if not scans.has(blob):
                assert data is not None
                scans.put(blob, symbols.scan_methods(data.decode("utf-8", errors="replace"), cls))
        scans.save()
        read = [v for v in window.versions if v in blobs]
        if not read:
            raise QueueError(f"no release of {window.why} holds {upath}: name the base with --at")
        order = {v: i for i, v in enumerate(window.versions)}  # a tie goes to the newest release

        def methods(_version: str, blob: str) -> dict[str, str]:
            return scans.get(blob) or {}

        searched = adopt_mod.search_base(texts, read, blobs.get, methods, order.__getitem__)
        best = [c.commit for c in searched.ranking if c.matched == searched.best.matched]
        oldest = window.versions[0]
        at_edge = oldest in blobs and (oldest in best or searched.ties > len(best))
        if not at_edge or len(window.versions) < limit or limit >= release_search.WIDEST:
            break
        limit += release_search.SEARCHED
        say(
            progress,
            f"{registry.normalize_name(spec.upstream_dist)} {oldest}, the oldest release read, scores the best "
            f"({searched.best.matched}/{searched.best.total}): the base may be older; widening the search",
        )
    name = registry.normalize_name(spec.upstream_dist)
    return searched, resolve_upstream(f"{name}=={searched.best.commit}", progress=progress, queue=spec)


def _class_warnings(
    texts: dict[str, str],
    upstream_text: str,
    carried: list[adopt_mod.Carried],
    label: str,
    where: str,
    spec: QueueSpec,
) -> tuple[str, ...]:
    """The line that says the runners and the upstream file disagree on the upstream class
    (:func:`adopt_mod.class_mismatch`): an error when nothing at all is carried (no series to keep), else a warning
    that what was carried was matched by name alone."""
    from patch_queue.series import adopt as adopt_mod

    mismatch = adopt_mod.class_mismatch(texts, upstream_text, upstream_path=spec.upstream_file, cls=spec.upstream_class)
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


def search_warnings(
    searched: adopt_mod.SearchResult | None, carried: list[adopt_mod.Carried], upath: str, cls: str, label: str
) -> tuple[str, ...]:
    """The line that says the search for the base read no method of ``cls`` in any revision (every one scored 0/0,
    so the tie went to the newest) while the base taken carries methods of it: the search's line scan
    (:func:`symbols.scan_methods`) and the syntax tree disagree, and the base is a guess."""
    if searched is None or searched.best.total:
        return ()
    methods = sum(1 for c in carried if "." in c.downstream)
    if not methods:
        return ()
    return (
        f"{upath}: the search read no method of {cls} the runners define in any of {searched.searched} revision(s) "
        f"(each scored 0/0; the newest, {label}, was taken), yet {methods} method(s) are carried from it: the base is "
        "a guess; name it with --at",
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
