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
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.version import InvalidVersion, Version

from patch_queue.checks import gpu_audit, gpu_needs, imports
from patch_queue.commands.check import module_texts
from patch_queue.commands.edit import write_edit
from patch_queue.commands.write import module_files, refuse_out_edits, require_all_applied, sync_stack
from patch_queue.errors import QueueError
from patch_queue.git.repo import Person
from patch_queue.merge.conflict import Conflict, ConflictKind
from patch_queue.progress import Progress, say
from patch_queue.project.operation import refuse_pending
from patch_queue.project.workspace import LoadedStack, Workspace
from patch_queue.series import adopt, stack
from patch_queue.series.queue import Queue
from patch_queue.sources.archives import release_files
from patch_queue.sources.vllm_release import vllm_release
from patch_queue.sync import changed_since, helper_methods, module_functions, placement, translation
from patch_queue.sync.ports import Port, Since, Unplaced

SYNCED = ConflictKind.GPU_SYNCED
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

    @property
    def flags(self) -> list[Conflict]:
        return [_synced_flag(s) for s in self.synced] + [_unplaced_flag(u) for u in self.unplaced]


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


def _unplaced_flag(u: Unplaced) -> Conflict:
    return _flag(UNPLACED, u.changes, f"not ported: {u.reason}", u.gpu_hunk, u.npu_file, u.symbol)


def gpu_runners(queue: Queue, omni: str | None, *, progress: Progress | None = None) -> tuple[dict[str, str], str, str]:
    """The GPU runner modules of ``omni`` (a vllm-omni release ``X`` or ``vllm-omni==X``, or a folder
    holding ``gpu_*model_runner.py``; default the downstream release), what they are, and the vllm-omni
    version whose vLLM runner they copy (a folder: the downstream release)."""
    spec = omni or queue.downstream_release
    if not spec:
        raise QueueError("the series was adopted from a folder: name the GPU runners with --omni SPEC")
    files, source = _runner_files(queue, spec, progress)
    if Path(spec).is_dir() and not queue.downstream_release:
        raise QueueError("a folder's GPU runners need the vLLM version of a pinned vllm-omni release")
    return files, source, queue.downstream_release if Path(spec).is_dir() else spec.rpartition("==")[2]


def _runner_files(queue: Queue, spec: str, progress: Progress | None) -> tuple[dict[str, str], str]:
    """The GPU runner modules of a release or folder ``spec``, and what they are."""
    folder = Path(spec)
    if folder.is_dir():
        found = sorted(p for p in folder.rglob("gpu_*model_runner.py") if _RUNNER.fullmatch(p.name))
        if not found:
            raise QueueError("holds no gpu_*model_runner.py", path=str(folder))
        return {p.name: p.read_text(encoding="utf-8", errors="replace") for p in found}, str(folder)
    name, _sep, version = spec.rpartition("==")
    name = name or queue.downstream_name
    say(progress, f"Reading the GPU runners of {name} {version} ...")
    data = release_files(name, version, "vllm_omni/worker/", progress=progress)
    files = {
        k.rsplit("/", 1)[-1]: v.decode("utf-8", errors="replace")
        for k, v in data.items()
        if _RUNNER.fullmatch(k.rsplit("/", 1)[-1])
    }
    if not files:
        raise QueueError(f"{name}=={version} holds no vllm_omni/worker/gpu_*model_runner.py")
    return files, f"{name}=={version}"


def since_runners(queue: Queue, since: str | None, source: str, *, progress: Progress | None = None) -> Since | None:
    """The GPU runners of the release the NPU series ports (``since``, default the downstream release), when they
    are not the ones synced from (``source``); None when the series names none."""
    spec = since or queue.downstream_release
    if not spec or (not Path(spec).is_dir() and f"{queue.downstream_name}=={spec.rpartition('==')[2]}" == source):
        return None
    files, label = _runner_files(queue, spec, progress)
    return None if label == source else Since(label, files)


def _slug(method: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", method).strip("-").lower() or "module"


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


def plan_sync(
    ws: Workspace, loaded: LoadedStack, omni: str | None, since: str | None = None, *, progress: Progress | None = None
) -> tuple[SyncOutcome, list[tuple[str, str]]]:
    """The ports of the unported GPU changes, as commits on top of ``loaded`` (nothing written)."""
    gpu_files, source, version = gpu_runners(loaded.queue, omni, progress=progress)
    before = since_runners(loaded.queue, since, source, progress=progress)
    omni_name = loaded.queue.downstream_name if Path(source).is_dir() else source.partition("==")[0]
    vllm = vllm_release(omni_name, version, progress)
    say(progress, f"Reading the GPUModelRunner of {vllm.describe()} ...")
    vllm_runner = gpu_audit.load_vllm_runner(vllm.version)
    top = loaded.top()
    tree = ws.repo.read_tree(ws.repo.commit_info(top).tree)
    vendored = ws.repo.read_tree(ws.repo.commit_info(loaded.base).tree).get(stack.VENDOR + adopt.UPSTREAM_FILE)
    if vendored is None:
        raise QueueError(f"the stack's base vendors no {adopt.UPSTREAM_FILE}")
    ascend = vendored.decode("utf-8", errors="replace")
    files = module_texts(module_files(ws, top))
    rules = translation.load_rules(ws.queue_dir.root)
    ports: list[Port] = []
    unported = -1
    declined: dict[tuple[str, int], gpu_audit.GpuChange] = {}

    def kept(found: list[gpu_audit.GpuChange]) -> list[gpu_audit.GpuChange]:
        for c in found:
            if not c.ported and rules.decline_of(c.gpu_file, c.method, c.first) is not None:
                declined.setdefault((c.gpu_file, c.gpu_line), c)
        return [c for c in found if (c.gpu_file, c.gpu_line) not in declined]

    for _pass in range(_PASSES):  # a port can make another placeable: again until a pass ports nothing
        changes = gpu_audit.audit(gpu_files, vllm_runner, files, ascend)
        partly: list[gpu_audit.GpuChange] = []
        if before is not None:
            partly = kept(changed_since.partly_ported(before, changes, gpu_files))
            changes += changed_since.changes_since(before, gpu_files, files, vllm_runner, rules)
        changes = sorted(kept(changes), key=lambda c: (c.gpu_file, c.gpu_line))
        unported = sum(1 for c in [*changes, *partly] if not c.ported) + len(declined) if unported < 0 else unported
        results, files = placement.sync(changes, gpu_files, vllm_runner, files, rules, before)
        # the rest of the partial ports, each on its own after the others: grouped with an unported neighbour, the
        # code it replaces would be the NPU's rewrite
        more, files = placement.sync(partly, gpu_files, vllm_runner, files, rules, before)
        results += more
        ports += [r for r in results if isinstance(r, Port)]
        if not any(isinstance(r, Port) for r in results):
            break
    helpers, files = helper_methods.copy_helpers(files, gpu_files, vllm_runner, ascend, rules)
    results += helpers
    ports += [r for r in helpers if isinstance(r, Port)]
    outcome = SyncOutcome(source, unported, declined=[declined[k] for k in sorted(declined)])
    outcome.unplaced = [r for r in results if isinstance(r, Unplaced)]
    # the module functions the changes left unplaced call, which their hand ports will need
    functions, files, refused = module_functions.copy_functions(outcome.unplaced, files, gpu_files, rules)
    ports += functions
    outcome.declined += refused
    # what a port reads from self that only a base of the GPU class provides, which the NPU class lacks
    name, sep, version = source.partition("==")

    def read(module: str) -> str | None:  # the release's modules, read only when a port needs a base's code
        return _tree(name, version).text(module) if sep else None

    code = [(p.npu_file, p.symbol.partition(".")[0], p.result) for p in ports]
    needed = gpu_needs.needed_bases(code, files, gpu_files, vllm_runner, ascend, read)
    ports = [
        replace(port, needs=tuple(n.message(port.symbol.partition(".")[0]) for n in needs)) if needs else port
        for port, needs in zip(ports, needed, strict=True)
    ]
    settled = sum(len(p.changes) for p in ports if not is_helper(p)) + sum(
        len(u.changes) for u in outcome.unplaced if not is_helper(u)
    )
    settled += len(declined)
    outcome.carried = max(0, unported - settled)
    patches = list(loaded.patches)
    taken = {n.split("-", 1)[-1] for n, _c in patches}
    info = ws.repo.commit_info(top)
    person = Person("pq sync-gpu", "pq@localhost", info.author.time, 0)
    parent = top
    for port, line in zip(ports, _final_lines(ports), strict=True):
        method = port.changes[0].method
        n = 1
        while f"sync-gpu-{_slug(method)}-{n}.patch" in taken:
            n += 1
        slug = f"sync-gpu-{_slug(method)}-{n}"
        taken.add(slug + ".patch")
        name = f"{len(patches) + 1:04d}-{slug}.patch"
        tree[port.npu_file] = port.text.encode("utf-8")
        lines = "".join(translation.ported_line(c.gpu_file, c.gpu_line, c.method, c.first) for c in port.changes)
        what = (
            "copy the GPU module function"
            if is_function(port)
            else "copy the GPU helper method"
            if is_helper(port)
            else "port the omni GPU change(s) into"
        )
        message = f"{slug}: {what} {port.symbol}\n\nFrom the GPU runners of {source}:\n{lines}"

        parent = ws.repo.commit(ws.repo.write_tree(tree), [parent], message, person, person)
        patches.append((name, parent))
        outcome.synced.append(Synced(name, port, line))
    return outcome, patches


def do_sync_gpu(
    ws: Workspace, *, omni: str | None, since: str | None, upstream_git: str | None, progress: Progress | None = None
) -> SyncOutcome:
    """Port every unported omni GPU change that can be placed, one patch each at the end of the series."""
    refuse_pending(ws)
    refuse_out_edits(ws, discard=False)
    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    require_all_applied(ws, loaded, "the ports go at the end of the series")
    outcome, patches = plan_sync(ws, loaded, omni, since, progress=progress)
    queue, moved = loaded.queue, newer_release(loaded.queue, outcome.source)
    if moved is not None:  # also with nothing left to port: the series holds that release's GPU side
        outcome.pin = (queue.downstream_release, moved)
        queue = replace(queue, downstream_release=moved)
    if outcome.synced or moved is not None:
        new = LoadedStack(queue, loaded.base, patches)
        write_edit(ws, loaded, new, len(patches), "sync-gpu", downstream=outcome.source if moved else "")
    return outcome


def newer_release(queue: Queue, source: str) -> str | None:
    """The version of ``source`` (``name==version``) when it is a release of the series' downstream newer than
    the one pinned (or the series pins none): ports of its GPU changes make the series that release's NPU
    runners, so the pin follows them (``pq check`` reads that release's sources, the next sync starts from it,
    the wheel is named after it)."""
    name, sep, version = source.partition("==")
    if not sep or name != queue.downstream_name:
        return None
    try:
        if queue.downstream_release and Version(version) <= Version(queue.downstream_release):
            return None
    except InvalidVersion:
        return None
    return version
