"""pq sync-gpu: port the omni changes of vllm-omni's GPU runners that the NPU runners lack, one patch each.

The audit (:mod:`patch_queue.checks.gpu_audit`) lists the unported changes of the GPU runners of
a vllm-omni release (default: the downstream release in ``queue.toml``) against the ``GPUModelRunner`` of
the vLLM release it goes with (:mod:`patch_queue.sources.vllm_release`); :mod:`patch_queue.sync.placement`
places and translates each.  Every port becomes a patch of its own at the end of the series
(``NNNN-sync-gpu-<method>-<n>.patch``, one commit on top of the stack), written once through the
journal like ``pq new``: a lineage step ``edit`` of the command ``sync-gpu`` whose new bodies are
recorded edits in ``refs/pq/resolutions``, so ``pq reproduce`` rebuilds them.  Each port is a
``gpu-synced`` review flag (the GPU hunk, the NPU code it replaced, what was written); each change
that could not be placed a ``gpu-unplaced`` flag with the GPU hunk and the reason.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from patch_queue.checks import gpu_audit, gpu_needs, imports
from patch_queue.commands.check import module_texts
from patch_queue.commands.edit import write_edit
from patch_queue.commands.merge import last_taken, refuse_backwards, release_version
from patch_queue.commands.write import module_files, refuse_out_edits, require_all_applied, sync_stack
from patch_queue.errors import QueueError
from patch_queue.fsutil import not_text
from patch_queue.git.repo import Person
from patch_queue.merge import symbols
from patch_queue.merge.conflict import Conflict, ConflictKind
from patch_queue.progress import Progress, say
from patch_queue.project.operation import refuse_pending
from patch_queue.project.workspace import LoadedStack, Workspace
from patch_queue.series import stack
from patch_queue.series.queue import Queue, cut_slug
from patch_queue.sources import registry
from patch_queue.sources.archives import release_files
from patch_queue.sources.vllm_release import vllm_release
from patch_queue.sync import changed_since, helper_methods, module_functions, placement, removals, translation
from patch_queue.sync.ports import Port, Since, Unplaced, method_at

SYNCED = ConflictKind.GPU_SYNCED
PROPOSED = ConflictKind.GPU_PROPOSED
UNPLACED = ConflictKind.GPU_UNPLACED
_RUNNER = re.compile(r"gpu_\w*model_runner\.py")
# at most this many rounds of ports (each on the NPU modules the one before left)
_PASSES = 4


@dataclass(frozen=True)
class Synced:
    patch: str  # the patch file holding the port
    port: Port
    line: int  # 1-based: the port's line (its opening fence) in the final module


@dataclass
class SyncOutcome:
    source: str  # which GPU runners were read
    unported: int  # the audit's unported changes (and the omni GPU code changed since the series' release)
    carried: int = 0  # of them, found on NPU after the ports of others (a later round's audit)
    synced: list[Synced] = field(default_factory=list)
    unplaced: list[Unplaced] = field(default_factory=list)
    declined: list[gpu_audit.GpuChange] = field(default_factory=list)  # left out by the project's [[decline]]s
    pin: tuple[str, str] | None = None  # the downstream release before and after, when the ports moved it
    since: str = ""  # the release whose GPU runners the delta starts from ("" with none: the backlog)
    proposals: list[Proposal] = field(default_factory=list)  # placed, not applied: `--apply ID` applies one
    newly_declined: list[translation.Decline] = field(default_factory=list)  # by this run's --decline

    @property
    def flags(self) -> list[Conflict]:
        return (
            [_synced_flag(s) for s in self.synced]
            + [_proposed_flag(p) for p in self.proposals]
            + [_unplaced_flag(u) for u in self.unplaced]
        )


def _gpu(changes: tuple[gpu_audit.GpuChange, ...]) -> list[dict[str, object]]:
    return [{"file": c.gpu_file, "line": c.gpu_line, "method": c.method, "first": c.first} for c in changes]


def report_json(outcome: SyncOutcome, shown: Callable[[str], str]) -> dict[str, object]:
    """The sync as JSON: what was applied (by patch), the proposals (with their ids), what was not placed and
    why, what is declined; ``shown``: an NPU module's path as the user sees it."""
    return {
        "format": 1,
        "source": outcome.source,
        "since": outcome.since,
        "applied": [
            {
                "patch": s.patch,
                "file": shown(s.port.npu_file),
                "line": s.line,
                "symbol": s.port.symbol,
                "how": s.port.how,
                "gpu": _gpu(s.port.changes),
                "gpu_hunk": s.port.gpu_hunk,
                "replaced": s.port.replaced,
                "result": s.port.result,
            }
            for s in outcome.synced
        ],
        "proposals": [
            {
                "id": p.id,
                "file": shown(p.port.npu_file),
                "line": p.line,
                "symbol": p.port.symbol,
                "how": p.port.how,
                "gpu": _gpu(p.port.changes),
                "gpu_hunk": p.port.gpu_hunk,
                "replaced": p.port.replaced,
                "result": p.port.result,
                "missing_names": list(p.port.missing_names),
            }
            for p in outcome.proposals
        ],
        "unplaced": [
            {"gpu": _gpu(u.changes), "symbol": u.symbol, "reason": u.reason, "gpu_hunk": u.gpu_hunk}
            for u in outcome.unplaced
        ],
        "declined": _gpu(tuple(outcome.declined)),
    }


def _diff(replaced: str, result: str) -> list[str]:
    return [f"-{line}" for line in replaced.splitlines()] + [f"+{line}" for line in result.splitlines()]


def report_markdown(outcome: SyncOutcome, shown: Callable[[str], str]) -> str:
    """The sync as a pull-request body: what was applied, then every proposal with its GPU hunk and its port."""
    since = f" since {outcome.since}" if outcome.since else " (the backlog)"
    out = [
        f"## GPU-side sync: {outcome.source}{since}",
        "",
        f"{len(outcome.synced)} port(s) applied, {len(outcome.proposals)} proposed, "
        f"{len(outcome.unplaced)} not placed.",
    ]
    if outcome.synced:
        out += ["", "### Applied", ""]
        out += [
            f"- `{shown(s.port.npu_file)}:{s.line}` {s.port.symbol}: from {where(s.port.changes)}"
            f" ({s.patch}{'; ' + s.port.how if s.port.how else ''})"
            for s in outcome.synced
        ]
    if outcome.proposals:
        out += ["", "### Proposed (apply: `pq sync-gpu --apply ID[,ID...]`, decline: `pq sync-gpu --decline ID`)"]
        for p in outcome.proposals:
            port = p.port
            out += ["", f"#### `{p.id}`: {port.symbol} at `{shown(port.npu_file)}:{p.line}`", ""]
            out += [f"GPU change: {where(port.changes)}" + (f"; placed {port.how}" if port.how else "")]
            if port.missing_names:
                out += [f"The NPU module does not import {', '.join(port.missing_names)}."]
            out += ["", "```diff", *_diff(port.replaced, port.result), "```"]
    if outcome.unplaced:
        out += ["", "### Not placed", ""]
        out += [f"- {where(u.changes)}{' in ' + u.symbol if u.symbol else ''}: {u.reason}" for u in outcome.unplaced]
    return "\n".join(out) + "\n"


def is_helper(result: Port | Unplaced) -> bool:
    """A whole GPU helper method or module function copied (or not copied), not a change of a GPU copy of a vLLM
    method."""
    return result.changes[0].reason in (helper_methods.HELPER, module_functions.FUNCTION)


def is_function(result: Port | Unplaced) -> bool:
    """A whole module-level GPU function copied for a change left unplaced."""
    return result.changes[0].reason == module_functions.FUNCTION


def where(changes: tuple[gpu_audit.GpuChange, ...]) -> str:
    return ", ".join(f"{c.gpu_file}:{c.gpu_line}" for c in changes)


def _flag(
    kind: str, changes: tuple[gpu_audit.GpuChange, ...], what: str, hunk: str, file: str, symbol: str
) -> Conflict:
    return Conflict(kind, message=f"{where(changes)} {what}", conflict=False, theirs=hunk, file=file, symbol=symbol)


def _synced_flag(s: Synced) -> Conflict:
    port = s.port
    note = f"; placed {port.how}" if port.how else ""
    note += f"; {'; '.join(port.imports)} (in this port's patch)" if port.imports else ""
    note += f"; the NPU module does not import {', '.join(port.missing_names)}" if port.missing_names else ""
    note += "".join(f"; {need}" for need in port.needs)
    what = port.changes[0].reason + " into" if is_helper(port) else "ported into"
    flag = _flag(SYNCED, port.changes, f"{what} {port.symbol}{note}", port.gpu_hunk, port.npu_file, port.symbol)
    length = len(port.result.splitlines())
    return replace(flag, base=port.replaced, line=s.line, length=length, resolution=port.result, patch=s.patch)


def _proposed_flag(p: Proposal) -> Conflict:
    port = p.port
    note = f"; placed {port.how}" if port.how else ""
    note += f"; the NPU module does not import {', '.join(port.missing_names)}" if port.missing_names else ""
    what = f"proposed for {port.symbol}{note} (apply: `pq sync-gpu --apply {p.id}`, decline: `--decline {p.id}`)"
    flag = _flag(PROPOSED, port.changes, what, port.gpu_hunk, port.npu_file, port.symbol)
    length = len(port.result.splitlines())
    return replace(flag, base=port.replaced, line=p.line, length=length, resolution=port.result, patch=p.id)


def _unplaced_flag(u: Unplaced) -> Conflict:
    return _flag(UNPLACED, u.changes, f"not ported: {u.reason}", u.gpu_hunk, u.npu_file, u.symbol)


def gpu_runners(queue: Queue, omni: str | None, *, progress: Progress | None = None) -> tuple[dict[str, str], str, str]:
    """The GPU runner modules of ``omni`` (a vllm-omni release ``X`` or ``vllm-omni==X``, or a folder
    holding ``gpu_*model_runner.py``; default the downstream release), what they are, and the vllm-omni
    version whose vLLM runner they copy (a folder: the downstream release)."""
    spec = omni or queue.downstream_release
    if not spec:
        raise QueueError("the series was adopted from a folder: name the GPU runners with --omni SPEC")
    version = release_version(queue, spec)
    if version is None and not queue.downstream_release:
        raise QueueError("a folder's GPU runners need the vLLM version of a pinned vllm-omni release")
    files, source = _runner_files(queue, spec, progress)
    return files, source, queue.downstream_release if version is None else version.text


def _runner_files(queue: Queue, spec: str, progress: Progress | None) -> tuple[dict[str, str], str]:
    """The GPU runner modules of a release or folder ``spec``, and what they are (:func:`_label`)."""
    version = release_version(queue, spec)
    if version is None:
        folder = Path(spec)
        found = sorted(p for p in folder.rglob("gpu_*model_runner.py") if _RUNNER.fullmatch(p.name))
        if not found:
            raise QueueError("holds no gpu_*model_runner.py", path=str(folder))
        return {p.name: _text(p.read_bytes(), str(p)) for p in found}, str(folder)
    name = queue.downstream_name
    package = gpu_audit.mirror(queue.spec).gpu_package  # a queue that mirrors no GPU runners: one line, first
    say(progress, f"Reading the GPU runners of {name} {version.text} ...")
    data = release_files(name, version.text, package + "/", progress=progress)
    files = {
        k.rsplit("/", 1)[-1]: _text(v, f"{name}=={version.text}: {k}")
        for k, v in data.items()
        if _RUNNER.fullmatch(k.rsplit("/", 1)[-1])
    }
    if not files:
        raise QueueError(f"{name}=={version.text} holds no {package}/gpu_*model_runner.py")
    return files, _label(queue, spec)


def _label(queue: Queue, spec: str) -> str:
    """What the GPU runners of ``spec`` are: ``name==version`` for a release, the path for a folder."""
    version = release_version(queue, spec)
    return str(Path(spec)) if version is None else f"{queue.downstream_name}=={version.text}"


def _text(data: bytes, shown: str) -> str:
    """A GPU runner's text; one line naming its file, line and column where it is not UTF-8 text without a NUL
    byte (what would be ported into a patch)."""
    if found := not_text(data):
        line, column, what = found
        raise QueueError(f"{what} at column {column}; a GPU runner is read as UTF-8 text", path=shown, line=line)
    return data.decode("utf-8")


def since_runners(queue: Queue, since: str | None, source: str, *, progress: Progress | None = None) -> Since | None:
    """The GPU runners of the release the NPU series ports (``since``, default the downstream release), when they
    are not the ones synced from (``source``); None when the series names none."""
    spec = since or queue.downstream_release
    if not spec or _label(queue, spec) == source:
        return None
    files, label = _runner_files(queue, spec, progress)
    return Since(label, files)


def _slug(method: str) -> str:
    return cut_slug(re.sub(r"[^A-Za-z0-9]+", "-", method).strip("-").lower()) or "module"


def _final_lines(ports: list[Port]) -> list[int]:
    """Each port's line in the final modules (later ports above it in its file shift it)."""
    out = []
    for i, port in enumerate(ports):
        line = port.line
        for later in ports[i + 1 :]:
            if later.npu_file == port.npu_file:
                line += later.import_lines  # the import block is above every method
                if later.line - later.import_lines <= line:
                    line += len(later.result.splitlines()) - len(later.replaced.splitlines())
        out.append(line)
    return out


@functools.cache
def _tree(name: str, version: str) -> imports.SourceTree:
    """The package's sources of the release ``name==version`` (the bases of its GPU runner classes)."""
    return imports.tree_from_release(name, version, name.replace("-", "_") + "/")


@dataclass(frozen=True)
class Proposal:
    """A port not applied on its own: listed for review with its id, applied by ``pq sync-gpu --apply ID``."""

    id: str
    port: Port  # as it would be written onto the modules the applied ports leave
    line: int  # 1-based: where it would go in that module


def proposal_id(port: Port) -> str:
    """A port's stable id: its GPU file, method and hunk (the same in every run on the same releases)."""
    change = port.changes[0]
    key = f"{change.gpu_file}\n{change.method}\n{port.gpu_hunk}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]


def is_sure(port: Port) -> bool:
    """Applied without asking: the removal of omni code both sides held the same way that the GPU side dropped
    (a name it uses is in no GPU runner any more: a feature gone, not code moved).  Measured on every pair of
    releases (bench/sync_delta.py), replacements of shared omni code and removals of code the GPU side moved
    elsewhere are what the maintainers did not do half the time or more: those are proposals."""
    return removals.is_dropped_feature(port)


def _keys(port: Port) -> set[tuple[str, int]]:
    return {(c.gpu_file, c.gpu_line) for c in port.changes}


def _new_since(before: Since, change: gpu_audit.GpuChange) -> bool:
    """Whether the GPU change holds a line its method lacked at ``before`` (the release the series ports)."""
    old = [
        sym
        for name, sym in symbols_of(before, change.gpu_file).items()
        if sym.is_method and name.rsplit(".", 1)[-1] == change.method
    ]
    had = {s for sym in old for line in sym.text.splitlines() if (s := line.strip())}
    wanted = change.meaningful or tuple(s for line in change.lines if (s := line.strip()))
    return any(line.strip() not in had for line in wanted)


def symbols_of(before: Since, gpu_file: str) -> dict[str, symbols.Symbol]:
    text = before.files.get(gpu_file)
    return {} if text is None else symbols.symbols_ast(text, path=gpu_file)


def _by_method(
    changes: list[gpu_audit.GpuChange], files: dict[str, str]
) -> list[tuple[str, list[gpu_audit.GpuChange]]]:
    """The changes grouped by the NPU method they go into (its name, "" for none), in file and method order."""
    groups: dict[tuple[str, int, str], list[gpu_audit.GpuChange]] = {}
    for c in changes:
        sym = method_at(files[c.npu_file], c.npu_file, line=c.npu_line) if c.npu_file in files and c.npu_line else None
        key = (c.npu_file, sym.start if sym else 0, sym.name if sym else "")
        groups.setdefault(key, []).append(c)
    return [(k[2], groups[k]) for k in sorted(groups)]


def _at_method(change: gpu_audit.GpuChange, name: str, files: dict[str, str]) -> gpu_audit.GpuChange:
    """The change with its NPU method's line as the method stands in ``files`` (earlier ports moved it)."""
    sym = method_at(files[change.npu_file], change.npu_file, name=name) if name else None
    return replace(change, npu_line=sym.start) if sym is not None else change


@dataclass
class _Run:
    ports: list[Port]
    results: list[Port | Unplaced]
    files: dict[str, str]
    unported: int
    declined: dict[tuple[str, int], gpu_audit.GpuChange]


def plan_sync(
    ws: Workspace,
    loaded: LoadedStack,
    omni: str | None,
    since: str | None = None,
    *,
    apply: frozenset[str] | None = frozenset(),
    backlog: bool = False,
    declined: Sequence[translation.Decline] = (),
    progress: Progress | None = None,
) -> tuple[SyncOutcome, list[tuple[str, str]]]:
    """The ports of the omni GPU changes since the release the series ports (``since``, default the release it last
    took in; with ``backlog`` every unported one), as commits on top of ``loaded`` (nothing written): the sure ones
    and the proposals ``apply`` names (None: every proposal); the other proposals listed."""
    gpu_files, source, version = gpu_runners(loaded.queue, omni, progress=progress)
    from_spec = since or last_taken(loaded.queue)[1] or loaded.queue.downstream_release
    before = since_runners(loaded.queue, from_spec, source, progress=progress)
    vllm = vllm_release(loaded.queue.downstream_name, version, progress)
    mirror = gpu_audit.mirror(loaded.queue.spec)
    say(progress, f"Reading the {mirror.gpu_class} of {vllm.describe()} ...")
    vllm_runner = gpu_audit.load_vllm_runner(vllm.version, loaded.queue.spec)
    top = loaded.top()
    tree = ws.repo.read_tree(ws.repo.commit_info(top).tree)
    vendored = ws.repo.read_tree(ws.repo.commit_info(loaded.base).tree).get(stack.VENDOR + mirror.npu_file)
    if vendored is None:
        raise QueueError(f"the stack's base vendors no {mirror.npu_file}")
    ascend = vendored.decode("utf-8", errors="replace")
    start_files = module_texts(module_files(ws, top))
    rules = translation.load_rules(ws.queue_dir.root)
    rules = replace(rules, declined=rules.declined + tuple(declined))
    if before is None and not backlog:  # nothing changed on the GPU side since the release the series ports
        outcome = SyncOutcome(source, 0)
        return outcome, list(loaded.patches)

    def run(chosen: set[tuple[str, int]] | None) -> _Run:
        """Removals, then the ports in NPU method order, pass after pass; only the ``chosen`` changes (by GPU file
        and line) when given."""
        files = dict(start_files)
        ports: list[Port] = []
        results: list[Port | Unplaced] = []
        refused: dict[tuple[str, int], gpu_audit.GpuChange] = {}
        if before is not None:
            gone, files = removals.removals(before, gpu_files, files, ascend, rules, only=chosen)
            results += gone
            ports += [r for r in gone if isinstance(r, Port)]

        def kept(found: list[gpu_audit.GpuChange]) -> list[gpu_audit.GpuChange]:
            for c in found:
                if not c.ported and rules.decline_of(c.gpu_file, c.method, c.first) is not None:
                    refused.setdefault((c.gpu_file, c.gpu_line), c)
            return [c for c in found if (c.gpu_file, c.gpu_line) not in refused]

        unported = -1
        placed: list[Port | Unplaced] = []
        for _pass in range(_PASSES):  # a port can make another placeable: again until a pass ports nothing
            changes = gpu_audit.audit(gpu_files, vllm_runner, files, ascend, queue=loaded.queue.spec)
            partly: list[gpu_audit.GpuChange] = []
            if before is not None:
                partly = kept(changed_since.partly_ported(before, changes, gpu_files))
                if not backlog:
                    changes = [c for c in changes if not c.ported and _new_since(before, c)]
                changes += changed_since.changes_since(before, gpu_files, files, vllm_runner, rules, mirror)
            changes = sorted(kept(changes), key=lambda c: (c.gpu_file, c.gpu_line))
            if unported < 0:
                unported = sum(1 for c in [*changes, *partly] if not c.ported) + len(refused)
            if chosen is not None:
                changes = [c for c in changes if (c.gpu_file, c.gpu_line) in chosen]
                partly = [c for c in partly if (c.gpu_file, c.gpu_line) in chosen]
            placed = []
            for todo in (changes, partly):  # the partial ports after the others, each on its own
                for name, group in _by_method([c for c in todo if not c.ported], files):
                    group = [_at_method(c, name, files) for c in group]
                    found, files = placement.sync(group, gpu_files, vllm_runner, files, rules, before, mirror=mirror)
                    placed += found
            ports += [r for r in placed if isinstance(r, Port)]
            if not any(isinstance(r, Port) for r in placed):
                break
        results += [r for r in placed if isinstance(r, Unplaced)]  # what the last pass left
        return _Run(ports, results, files, max(unported, 0), refused)

    first = run(None)
    proposals = [p for p in first.ports if not is_sure(p)]
    ids = {proposal_id(p): p for p in proposals}
    wanted = set(ids) if apply is None else set(apply)
    unknown = sorted(wanted - set(ids))
    if unknown:
        raise QueueError(f"no proposal {unknown[0]} in this sync (`pq sync-gpu` lists them)")
    chosen = {k for p in first.ports if is_sure(p) or proposal_id(p) in wanted for k in _keys(p)}
    done = first if all(is_sure(p) or proposal_id(p) in wanted for p in first.ports) else run(chosen)
    ports = list(done.ports)
    results = [r for r in first.results if isinstance(r, Unplaced)]
    files = done.files
    written = "".join(p.result for p in ports)
    if written.strip():  # the GPU helper methods the applied ports call (the backlog: every one the NPU lacks)
        called = None if backlog else set(re.findall(r"\bself\.(\w+)\s*\(", written))
        helpers, files = helper_methods.copy_helpers(
            files, gpu_files, vllm_runner, ascend, rules, only=called, mirror=mirror
        )
        results += [h for h in helpers if isinstance(h, Unplaced)]
        ports += [h for h in helpers if isinstance(h, Port)]
    outcome = SyncOutcome(source, first.unported, declined=[first.declined[k] for k in sorted(first.declined)])
    outcome.since = before.label if before is not None else ""
    outcome.unplaced = results
    if backlog:  # the module functions the changes left unplaced call, which their hand ports will need
        functions, files, refused = module_functions.copy_functions(outcome.unplaced, files, gpu_files, rules, mirror)
        ports += functions
        outcome.declined += refused
    left = [p for p in proposals if proposal_id(p) not in wanted]
    outcome.proposals = [Proposal(proposal_id(p), p, p.line) for p in left]
    # what a port reads from self that only a base of the GPU class provides, which the NPU class lacks
    released = release_version(loaded.queue, omni or loaded.queue.downstream_release) is not None

    def read(module: str) -> str | None:  # the release's modules, read only when a port needs a base's code
        return _tree(loaded.queue.downstream_name, version).text(module) if released else None

    code = [(p.npu_file, p.symbol.partition(".")[0], p.result) for p in ports]
    needed = gpu_needs.needed_bases(code, files, gpu_files, vllm_runner, ascend, read, mirror)
    ports = [
        replace(port, needs=tuple(n.message(port.symbol.partition(".")[0]) for n in needs)) if needs else port
        for port, needs in zip(ports, needed, strict=True)
    ]
    settled = sum(len(p.changes) for p in first.ports) + sum(
        len(u.changes) for u in outcome.unplaced if not is_helper(u)
    )
    settled += len(first.declined)
    outcome.carried = max(0, first.unported - settled)
    patches = _commits(ws, loaded, tree, top, ports, source)
    outcome.synced = patches[1]
    return outcome, patches[0]


def _commits(
    ws: Workspace, loaded: LoadedStack, tree: dict[str, bytes], top: str, ports: list[Port], source: str
) -> tuple[list[tuple[str, str]], list[Synced]]:
    """One commit per NPU method the ports change (consecutive ports of one method together), on top of ``top``."""
    patches = list(loaded.patches)
    synced: list[Synced] = []
    taken = {n.split("-", 1)[-1] for n, _c in patches}
    info = ws.repo.commit_info(top)
    person = Person("pq sync-gpu", "pq@localhost", info.author.time, 0)
    parent = top
    lines = _final_lines(ports)
    i = 0
    while i < len(ports):
        j = i + 1
        while j < len(ports) and (ports[j].npu_file, ports[j].symbol) == (ports[i].npu_file, ports[i].symbol):
            if is_helper(ports[j]) or is_helper(ports[i]):
                break
            j += 1
        group = ports[i:j]
        port = group[0]
        method = port.changes[0].method
        n = 1
        while f"sync-gpu-{_slug(method)}-{n}.patch" in taken:
            n += 1
        slug = f"sync-gpu-{_slug(method)}-{n}"
        taken.add(slug + ".patch")
        name = f"{len(patches) + 1:04d}-{slug}.patch"
        for p in group:
            tree[p.npu_file] = p.text.encode("utf-8")
        listed = "".join(
            translation.ported_line(c.gpu_file, c.gpu_line, c.method, c.first) for p in group for c in p.changes
        )
        what = (
            "copy the GPU module function"
            if is_function(port)
            else "copy the GPU helper method"
            if is_helper(port)
            else "port the omni GPU change(s) into"
        )
        message = f"{slug}: {what} {port.symbol}\n\nFrom the GPU runners of {source}:\n{listed}"
        parent = ws.repo.commit(ws.repo.write_tree(tree), [parent], message, person, person)
        patches.append((name, parent))
        synced += [Synced(name, p, line) for p, line in zip(group, lines[i:j], strict=True)]
        i = j
    return patches, synced


def do_sync_gpu(
    ws: Workspace,
    *,
    omni: str | None,
    since: str | None,
    upstream_git: str | None,
    apply: frozenset[str] | None = frozenset(),
    decline: frozenset[str] = frozenset(),
    backlog: bool = False,
    progress: Progress | None = None,
    report: Path | None = None,
    markdown: Path | None = None,
) -> SyncOutcome:
    """Apply the sure ports of the omni GPU changes since the series' release (and the proposals ``apply`` names,
    None: all) at the end of the series, one patch per NPU method; ``decline``: proposals to decline first (their
    ``[[decline]]`` tables written to the project's rules file, with the ports in one step); ``report``,
    ``markdown``: where the JSON report and the pull-request body go (:func:`write_reports`)."""
    refuse_pending(ws)
    refuse_out_edits(ws, discard=False)
    queue = ws.queue_dir.load_queue()  # rule 3, before anything is read: no older release, nor a reversed delta
    step_no, taken = last_taken(queue)
    if omni and not since and not backlog and not (taken or queue.downstream_release):
        # no release to start the delta from: comparing nothing, the sync would do nothing and move the pin anyway
        kind = queue.lineage[step_no - 1].kind if step_no else "adopt"
        raise QueueError(
            f"the series was {'adopted from' if kind == 'adopt' else 'last merged with'} a folder (lineage step "
            f"{step_no}) and pins no {queue.downstream_name} release to start the GPU changes of {omni} from: "
            "nothing synced, the pin stays none; name the release (or folder) its NPU runners are with --since, or "
            "--backlog for every unported GPU change",
            path=ws.rel(ws.queue_dir.queue_path),
        )
    version, start = (release_version(queue, s) if s else None for s in (omni or queue.downstream_release, since))
    why = "a sync does not take the series back"
    refuse_backwards(queue, version, ws.rel(ws.queue_dir.queue_path), why, start)
    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    require_all_applied(ws, loaded, "the ports go at the end of the series")
    both = sorted(decline & (apply or frozenset()))
    if both:
        raise QueueError(f"proposal {both[0]} is both applied and declined")
    files: dict[Path, bytes] = {}
    declined: list[translation.Decline] = []
    if decline:
        listed, _patches = plan_sync(ws, loaded, omni, since, backlog=backlog, progress=progress)
        found = {p.id: p for p in listed.proposals}
        unknown = sorted(decline - set(found))
        if unknown:
            raise QueueError(f"no proposal {unknown[0]} in this sync (`pq sync-gpu` lists them)")
        entries = [
            translation.Decline(c.gpu_file, c.method, c.first, f"pq sync-gpu --decline {i}")
            for i in sorted(decline)
            for c in found[i].port.changes
        ]
        declined, files = translation.with_declines(ws.queue_dir.root, entries)
    outcome, patches = plan_sync(
        ws, loaded, omni, since, apply=apply, backlog=backlog, declined=declined, progress=progress
    )
    outcome.newly_declined = declined
    queue = loaded.queue
    moved = None if version is None else newer_release(queue, outcome.source)  # a folder's path is no release
    if moved is not None:  # also with nothing left to port: the series holds that release's GPU side
        outcome.pin = (queue.downstream_release, moved)
        queue = replace(queue, downstream_release=moved)
    if outcome.synced or moved is not None or files:
        new = LoadedStack(queue, loaded.base, patches)
        write_edit(ws, loaded, new, len(patches), "sync-gpu", files, downstream=outcome.source if moved else "")
    write_reports(ws, outcome, report, markdown)
    return outcome


def write_reports(ws: Workspace, outcome: SyncOutcome, report: Path | None, markdown: Path | None) -> None:
    """The sync's JSON report and pull-request body at ``report`` and ``markdown`` (None: not asked for), each NPU
    module named by its path in the output folder."""
    from patch_queue.fsutil import SYNC_JSON, SYNC_MARKDOWN, json_bytes, write_output

    def shown(npu_file: str) -> str:
        return ws.rel(ws.out / npu_file)

    if report is not None:
        write_output(report, json_bytes(report_json(outcome, shown)), SYNC_JSON)
    if markdown is not None:
        write_output(markdown, report_markdown(outcome, shown).encode("utf-8"), SYNC_MARKDOWN)


def newer_release(queue: Queue, source: str) -> str | None:
    """The version of ``source`` (``name==version``) when it is a release of the series' downstream newer than
    the one pinned (or the series pins none): ports of its GPU changes make the series that release's NPU
    runners, so the pin follows them (``pq check`` reads that release's sources, the next sync starts from it,
    the wheel is named after it)."""
    release = registry.parse_release(source)
    if release is None or registry.normalize_name(release[0]) != registry.normalize_name(queue.downstream_name):
        return None
    pinned = registry.parse_version(queue.downstream_release) if queue.downstream_release else None
    return None if pinned is not None and release[1].key <= pinned.key else release[1].text
