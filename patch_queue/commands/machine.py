"""The machine of a pending operation: a refresh (`pq refresh`) or a merge (`pq merge`), one typed object.

An operation starts (:func:`start`: what `pq abort` puts back, with the refresh's or the merge's own
target, replay and findings), advances (:func:`advance`: finished when the series is through without
conflicts and `pq check` finds no error, else stopped with its state in ``.git/pq/refresh.json``,
:class:`~patch_queue.project.operation.Operation`) and is finished (:func:`finish`: the operation's own
writes, :data:`OwnWrites`, which each kind hands in, then what every operation writes).  Going on after the
maintainer resolved its conflicts and putting it back are :mod:`patch_queue.commands.pending`'s, above both
kinds.  What the terminal prints and the report renders is :class:`Outcome`: the operation's state and what
the step computed from it, never a copy of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from patch_queue.commands import resolve, write
from patch_queue.commands.write import REF_PREVIOUS, REF_REFRESH, StepInfo, module_files, write_series
from patch_queue.errors import PqError
from patch_queue.fsutil import kill_point, read_folder
from patch_queue.git.repo import ProjectRepo
from patch_queue.merge import anchors, explain
from patch_queue.merge.conflict import Conflict
from patch_queue.outputs import folder as output
from patch_queue.outputs import report_parts
from patch_queue.progress import Bar, Progress, say, timed
from patch_queue.project import operation
from patch_queue.project.journal import Writes
from patch_queue.project.operation import Operation, OperationKind
from patch_queue.project.workspace import REF_JOURNAL, LoadedStack, Workspace
from patch_queue.series import absorb, fmt, patchfile, replay, rerere, stack
from patch_queue.series.queue import Queue, parse_queue
from patch_queue.series.replay import PatchStatus

if TYPE_CHECKING:  # pq check is imported where it runs: `refresh --no-check` skips it
    from patch_queue.commands.check import CheckOutcome

# An operation's own writes when it finishes (the refresh's recorded edits, the merge's recorded resolution), given
# (workspace, state, target, writes, command, store, accepted errors): the series it leaves, its lineage step and
# the top of the series as it stood.  Each kind hands its own to :func:`advance`.
OwnWrites: TypeAlias = Callable[
    [Workspace, Operation, Queue, Writes, str, rerere.Store, list[str]], tuple[LoadedStack, StepInfo, str | None]
]


@dataclass
class Outcome:
    """What a step of an operation (start, continue) did: its state (the conflicts, flags, labels the terminal
    and the report show are its) and what the step computed from it."""

    state: Operation
    target: Queue  # the queue the operation moves the series onto (a finished merge: the queue it left)
    results: list[replay.PatchResult]
    out: str = ""  # the output folder, as the maintainer names it
    blocks_after: int = 0  # omni blocks after (before: the state's)
    fences: list[dict[str, object]] = field(default_factory=list)  # Omni-new fence problems in the output
    check: CheckOutcome | None = None  # pq check on the result, once the series is through without conflicts
    placements: list[absorb.Placement] = field(default_factory=list)  # where `pq continue` put edits
    relocations: list[absorb.Relocation] = field(default_factory=list)  # skeleton edits moved (`pq continue`)
    check_pending: bool = False  # the series is through, but the errors of `pq check` keep the operation pending
    accepted: list[str] = field(default_factory=list)  # the errors of `pq check` it finished over (--accept-errors)
    written: bool = True  # False: nothing was written (`pq continue` over check errors; a merge with nothing to merge)
    standing: int = 0  # errors of `pq check` in a refresh that changed nothing: the series had them already
    # under each conflict as `pq status` says it, by (file, line) on disk: its suggestion, where upstream moved the
    # lines it deleted (the refresh's `moved:` line)
    suggestions: dict[tuple[str, int], explain.Suggestion] = field(default_factory=dict)
    moved: dict[tuple[str, int], str] = field(default_factory=dict)
    downstream_before: tuple[str, str] = ("", "")  # a merge: the downstream pin (name, release) it started from
    annotations: list[str] = field(default_factory=list)  # GitHub workflow commands of the report (--annotations)

    @property
    def target_label(self) -> str:
        return self.target.upstream.label

    @property
    def finished(self) -> bool:
        """The whole series was replayed (conflicts may remain with --no-stop)."""
        return len(self.state.done) == len(self.state.patches)

    @property
    def stopped_at(self) -> str | None:
        done = self.state.done
        return done[-1][0] if done and done[-1][2] == PatchStatus.CONFLICT and not self.finished else None

    @property
    def blocks(self) -> tuple[int, int]:
        """Omni blocks before / after."""
        return self.state.blocks_before, self.blocks_after

    @property
    def downstream(self) -> tuple[str, str]:
        return self.target.downstream_name, self.target.downstream_release

    @property
    def merged(self) -> str:
        """A merge (pq merge): the release it takes in; "" for a refresh."""
        return self.state.merging.release if self.state.merging is not None else ""

    @property
    def pending(self) -> bool:
        """The operation waits for `pq continue` (conflicts left, or errors of `pq check`) or `pq abort`."""
        return bool(self.state.conflicts) or self.check_pending or not self.finished


def start(ws: Workspace, begun: Operation) -> Operation:
    """``begun`` (a refresh's or a merge's target, replay and findings) with what `pq abort` puts back: every
    ref but those of a pending operation, the recorded resolutions (and the remotes') and the journal's; a tree
    of the output folder (kept by a ref while the operation is open); ``queue.toml``."""
    orig = {
        k: v
        for k, v in ws.repo.refs().items()
        if not k.startswith((REF_REFRESH, rerere.REMOTES)) and k not in (rerere.REF, REF_JOURNAL)
    }
    return replace(
        begun,
        orig_refs=orig,
        orig_out=ws.repo.write_tree(read_folder(ws.out)),
        orig_queue=ws.queue_dir.queue_path.read_text(encoding="utf-8"),
    )


def advance(
    ws: Workspace,
    state: Operation,
    target: Queue,
    results: list[replay.PatchResult],
    *,
    own: OwnWrites,
    progress: Progress | None,
    command: str = "refresh",
    store: rerere.Store,
    placements: list[absorb.Placement] | None = None,
    relocations: list[absorb.Relocation] | None = None,
    accept_errors: bool = False,
) -> Outcome:
    """Finish the operation (``own``: the kind's own writes) if the series is through and `pq check` finds no
    error in the result (or ``accept_errors``), else record the stop.

    Every file and ref (refs/pq/resolutions, where ``store`` recorded resolutions and edits,
    included) is written once, through one journaled :class:`Writes`: a kill at any point leaves
    the old state or, after ``pq continue``, the new one (``pq abort`` puts the old one back).
    Only a checked result is finished: with errors of `pq check`, `pq refresh` leaves the refresh
    pending (the output folder holds the result, `pq continue` goes on once they are fixed) and
    `pq continue` writes nothing (its findings are at their lines in the output folder as it is).
    """
    writes = Writes(ws, command)
    patches, done = state.patches, state.done
    new_patches = [(n, c) for n, c, _s in done]
    top_files = module_files(ws, new_patches[-1][1]) if new_patches else {}
    outcome = Outcome(
        state,
        target,
        results,
        out=ws.rel(ws.out),
        blocks_after=count_blocks(top_files),
        fences=write.fence_problems(top_files),
        placements=placements or [],
        relocations=relocations or [],
    )
    if outcome.finished and not state.conflicts:
        old_top = patches[-1][1] if patches else None
        if state.check:
            outcome.check = _check_result(ws, state, target, top_files, old_top, progress)
        errors = [f for f in outcome.check.findings if f.severity == "error"] if outcome.check else []
        if errors and _changes_nothing(ws, state, target, top_files, old_top):
            # the result is the series as it stands, on the pin it has: the errors were there before (the lineage
            # holds how they were taken) and a refresh that changed nothing does not wait on them
            outcome.standing, errors = len(errors), []
        if errors and not accept_errors:
            outcome.check_pending = True
            if command == "continue":  # nothing written: the maintainer fixes the files on disk and continues again
                assert outcome.check is not None
                outcome.check = on_disk_findings(ws, top_files, outcome.check)
                outcome.written = False
                return outcome
            state = replace(state, check_errors=tuple((f.file, f.line, f.rule, f.message) for f in errors))
            outcome.state = state
        else:
            outcome.accepted = [f.render() for f in errors]
            if state.kind is OperationKind.MERGE:  # a finished merge is one command `pq undo` takes back
                writes = Writes(ws, "merge", undoable=True)
            outcome.target = finish(ws, state, target, writes, command, store, outcome.accepted, own)
            return outcome
    # stopped (or finished with conflicts under --no-stop, or over errors of pq check): keep everything needed
    # to go on or back
    top = new_patches[-1][1] if new_patches else state.new_base
    holder = ws.repo.commit(state.orig_out, [], f"pq {state.kind}: saved output folder\n", stack.PERSON, stack.PERSON)
    wanted = {REF_REFRESH + "top": top, REF_REFRESH + "base": state.new_base, REF_REFRESH + "saved-out": holder}
    writes.move_refs({ref: (ws.repo.ref(ref), value) for ref, value in wanted.items()})
    writes.move_refs(store.ref_update())
    state.save(ws, writes)
    output.sync(ws.out, module_files(ws, top), writes)
    writes.commit()
    if state.conflicts:  # what `pq status` says under each region, now that the files are written and the state saved
        outcome.suggestions = resolve.suggestions(ws, state)
        outcome.moved = resolve.moved_notes(ws, list(state.conflicts))
    return outcome


def _changes_nothing(
    ws: Workspace, state: Operation, target: Queue, top_files: dict[str, bytes], old_top: str | None
) -> bool:
    """A refresh onto the pin the series has whose result is the series' own top, module for module."""
    if state.kind is not OperationKind.REFRESH or old_top is None:
        return False
    return state.target().upstream == parse_queue(state.orig_queue).upstream and module_files(ws, old_top) == top_files


def finish(
    ws: Workspace,
    state: Operation,
    target: Queue,
    writes: Writes,
    command: str,
    store: rerere.Store,
    accepted: list[str],
    own: OwnWrites,
) -> Queue:
    """Write the finished operation: its ``own`` writes (the refresh's recorded edits or the merge's recorded
    resolution, the series and its lineage step), then what every one writes: the previous top, the state and the
    refs of the pending operation gone, the output folder.  The queue it leaves."""
    loaded, step, old_top = own(ws, state, target, writes, command, store, accepted)
    write_series(ws, loaded, writes=writes, step=step)
    if old_top is not None and old_top != loaded.top():
        writes.move_refs({REF_PREVIOUS: (ws.repo.ref(REF_PREVIOUS), old_top)})
    operation.clear(ws, writes)
    writes.move_refs({ref: (value, None) for ref, value in ws.repo.refs().items() if ref.startswith(REF_REFRESH)})
    write.finish(ws, loaded, writes, len(loaded.patches))
    return loaded.queue


def _check_result(
    ws: Workspace,
    state: Operation,
    target: Queue,
    files: dict[str, bytes],
    old_top: str | None,
    progress: Progress | None,
) -> CheckOutcome:
    """`pq check` on the refreshed ``files`` before anything is written; a check that cannot run is an error."""
    from patch_queue.checks.findings import ERROR, Finding
    from patch_queue.commands.check import CheckOutcome, module_texts, run_checks

    say(progress, "Checking the new runners (pq check) ...")
    try:
        with timed("check"):
            return run_checks(
                ws,
                module_texts(files),
                queue=target,
                base=state.new_base,
                reference=module_texts(module_files(ws, old_top)) if old_top else {},
                reference_label="the previous build",
                upstream_git=state.upstream_git,
                sources_on=state.check_sources,
                progress=progress,
                imports=state.check_import,
            )
    except PqError as exc:
        return CheckOutcome(
            [Finding("", 0, "check-failed", ERROR, f"pq check could not run: {exc}")],
            "the previous build",
            sorted(module_texts(files)),
            False,
        )


def on_disk_findings(ws: Workspace, written: dict[str, bytes], result: CheckOutcome) -> CheckOutcome:
    """``result`` (findings at lines of ``written``, module path -> text) with each finding at its line in the
    output folder now (:func:`resolve.on_disk_lines`)."""
    from patch_queue.commands.check import CheckOutcome

    lines = resolve.on_disk_lines(ws, written, [(f.file, f.line) for f in result.findings])
    moved = [replace(f, line=line) for f, line in zip(result.findings, lines, strict=True)]
    return CheckOutcome(moved, result.reference, result.files, result.sources, result.imported)


def count_blocks(files: dict[str, bytes]) -> int:
    total = 0
    for path, data in files.items():
        if path.endswith(".py") and not path.startswith(stack.VENDOR):
            total += len(anchors.parse_blocks(data.decode("utf-8", errors="replace"))[0])
    return total


def import_sync(queue: Queue, patches: Sequence[tuple[str, str]]) -> replay.Imports | None:
    """The import reconciliation of the runner modules that carry upstream code, against the old series'
    top (the last of ``patches``: name, old commit)."""
    modules = {m.path: m.upstream for m in queue.modules if m.upstream}
    if not modules or not patches:
        return None
    return replay.Imports(modules, queue.line_length, patches[-1][1], queue.spec.downstream_package)


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


def edit_lookup(ws: Workspace, store: rerere.Store, queue: Queue) -> replay.Edited | None:
    """Recorded edits of a patch's merge result, as the commit they make (see rerere.Store.lookup_edit)."""
    if not store.has_edits():
        return None
    patches = store.edited_patches()

    def edited(name: str, merged: str) -> str | None:
        if name not in patches:  # then no edit is recorded for any body of it: skip writing this one
            return None
        # an edit recorded in either form of the bodies (see patch_queue.series.queue): one of an older lineage too
        found = (store.lookup_edit(name, body) for body in stack.body_forms(ws.repo, merged))
        after = next((body for body in found if body is not None), None)
        if after is None:
            return None
        shown = f"patches/{name}"
        parent = ws.repo.commit_info(merged).parents[0]
        return stack.commit_patch(ws.repo, parent, patchfile.parse(after, path=shown), queue, path=shown)

    return edited


def killable(
    on_patch: Callable[[replay.PatchResult], None] | None, shown: Bar | None = None, total: int = 0
) -> Callable[[replay.PatchResult], None]:
    """``on_patch`` with the interruption tests' kill point between two patches of a replay, moving
    ``shown`` (a progress bar over ``total`` patches) one patch on."""
    done = 0

    def each(result: replay.PatchResult) -> None:
        nonlocal done
        done += 1
        if shown is not None:
            shown.update(done, total)
        if on_patch is not None:
            on_patch(result)
        kill_point("between-patches")

    return each


def report_json(outcome: Outcome) -> dict[str, object]:
    """The refresh report (format 2; the schema is described in patch_queue/outputs/report.py); a merge's has
    ``merged`` too."""
    state = outcome.state
    data: dict[str, object] = {
        "format": 2,
        "upstream": {
            "base": state.old_base_label,
            "target": outcome.target_label,
            "base_commit": state.upstream_commits[0],
            "target_commit": state.upstream_commits[-1],
            "culprits": state.culprits_note,
        },
        "downstream": {"name": outcome.downstream[0], "release": outcome.downstream[1]},
        "out": outcome.out,
        "patches": [{"name": r.name, "status": r.status} for r in outcome.results],
        "conflicts": [
            explained(c, outcome.moved.get((c.file, c.line or 0)), outcome.suggestions.get((c.file, c.line or 0)))
            for c in state.conflicts
        ],
        "flags": [c.as_json(report=True) for c in state.flags],
        "removed_symbols": list(state.removed_symbols),
        "blocks": {"before": outcome.blocks[0], "after": outcome.blocks[1]},
        "fences": outcome.fences,
        "check": outcome.check.as_json() if outcome.check is not None else None,
        "finished": outcome.finished,
        "stopped_at": outcome.stopped_at,
        "pending": outcome.pending,
        "accepted_errors": outcome.accepted,
    }
    if outcome.merged:
        data["merged"] = outcome.merged
    return data


def explained(conflict: Conflict, moved: str | None = None, tip: explain.Suggestion | None = None) -> dict[str, object]:
    """A conflict's report entry with what upstream changed, its omni block, its suggestion and where upstream moved
    the lines it deleted, as `pq status` shows them (``tip``: :attr:`Outcome.suggestions`, carried from another
    copy's resolution and moved code among them, with what `pq resolve --suggested` writes; ``moved``:
    :attr:`Outcome.moved`)."""
    data = conflict.as_json(report=True)
    data["explanation"] = {
        "upstream": report_parts.upstream_change(conflict),
        "block": explain.omni_block(conflict),
        "suggestion": explain.suggestion_json(tip),
        "moved": moved,
    }
    return data


def report_paths(ws: Workspace, report: Path | None, markdown: Path | None) -> tuple[str, str]:
    """The report paths as the operation's state keeps them (for `pq continue` to rewrite): relative to the
    repository when inside it, ``-`` for stdout."""

    def kept(path: Path | None) -> str:
        if path is not None and str(path) == "-":  # stdout, at this run and at the `pq continue` that ends it
            return "-"
        full = path.resolve() if path else None
        if full is None:
            return ""
        return full.relative_to(ws.root).as_posix() if full.is_relative_to(ws.root) else str(full)

    return kept(report), kept(markdown)


def write_reports(ws: Workspace, outcome: Outcome, annotations: bool) -> list[str]:
    """The reports of ``outcome`` at the paths the operation was given (the later `pq continue` rewrites them);
    with ``annotations``, the report's GitHub workflow commands, for the terminal."""
    if not any(outcome.state.reports) and not annotations:
        return []  # no report asked for: none is made
    from patch_queue.fsutil import REFRESH_JSON, REFRESH_MARKDOWN, json_bytes, write_output
    from patch_queue.outputs import report as render

    report, markdown = (Path(p) if p == "-" else ws.root / p if p else None for p in outcome.state.reports)
    data = report_json(outcome)
    if report is not None:
        write_output(report, json_bytes(data), REFRESH_JSON)
    if markdown is not None:
        write_output(markdown, render.markdown(data, queue=ws.spec).encode("utf-8"), REFRESH_MARKDOWN)
    return render.annotations(data, ws.spec) if annotations else []
