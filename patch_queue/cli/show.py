"""What the commands print: an operation's outcome (its conflicts, review flags and `pq check`), and `pq
sync-gpu`'s ports; each returns nothing or the exit code the outcome maps to."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

from patch_queue.cli.app import echo, err
from patch_queue.errors import EXIT_CONFLICT, EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    from patch_queue.commands.check import CheckOutcome
    from patch_queue.commands.machine import Outcome
    from patch_queue.commands.sync_gpu import SyncOutcome
    from patch_queue.merge.conflict import Conflict
    from patch_queue.merge.explain import Suggestion
    from patch_queue.project.workspace import Workspace
    from patch_queue.series.absorb import Placement, Relocation


def print_placements(ws: Workspace, placements: list[Placement]) -> None:
    for p in placements:
        moved = f" (it does not merge into {p.moved_from}, which owns its lines)" if p.moved_from else ""
        typer.echo(
            f"recorded: {ws.rel(ws.out / p.file)}:{p.line} +{p.added} -{p.removed} into patches/{p.patch}{moved}"
        )


def print_relocations(ws: Workspace, relocations: Sequence[Relocation]) -> None:
    """Each edit of a carried method moved out of its module's skeleton patch (or left there), one a line."""
    from patch_queue.commands.pending import relocation_message

    for r in relocations:
        typer.echo(
            f"{'relocated' if r.patch else 'skeleton drift'}: {ws.rel(ws.out / r.file)}: {relocation_message(r)}"
        )


def print_outcome(ws: Workspace, outcome: Outcome, listed: str | None = None) -> int:
    """Conflicts first, then the review flags to read and the others counted by kind (those of ``listed``,
    KIND,… or `all`, one a line), then `pq check`; the exit code.  A `pq continue` that wrote nothing (over
    errors of `pq check`) prints only the check, at the lines of the output folder as it is."""
    if not outcome.written:
        assert outcome.check is not None
        print_check(ws, outcome.check)
        return _check_pending(ws, outcome.check, "nothing written (every line above is a line of the files on disk)")
    echo(outcome.state.discarded)
    print_placements(ws, outcome.placements)
    print_relocations(ws, outcome.relocations)
    if outcome.state.conflicts and outcome.state.culprits_note:
        typer.echo(f"culprits: {outcome.state.culprits_note}")
    for c in outcome.state.conflicts:  # with what `pq status` says under each
        at = (c.file, c.line or 0)
        print_conflict(ws, c, outcome.suggestions.get(at), outcome.moved.get(at, ""))
    if outcome.state.conflicts:
        by_file = Counter(c.file for c in outcome.state.conflicts)
        summary = ", ".join(f"{f}: {n}" for f, n in sorted(by_file.items()))
        typer.echo(f"{len(outcome.state.conflicts)} conflict region(s) ({summary})")
    for sym in outcome.state.removed_symbols:
        typer.echo(f"warning: carried symbol removed upstream: {sym}")
    print_flags(ws, outcome.state.flags, listed)
    for problem in outcome.fences:
        typer.echo(f"warning: {ws.rel(ws.out / str(problem['file']))}:{problem['line']}: {problem['message']}")
    before, after = outcome.blocks
    typer.echo(f"omni blocks: {before} before, {after} after")
    if outcome.check is not None:
        print_check(ws, outcome.check)
    if outcome.check_pending:
        assert outcome.check is not None
        return _check_pending(ws, outcome.check, f"the {'merge' if outcome.merged else 'refresh'} is pending")
    if outcome.standing:
        typer.echo(
            f"the result is the series as it stands (nothing changed): its {outcome.standing} error(s) of pq check "
            "were there before and do not keep the refresh pending"
        )
    if outcome.accepted:
        typer.echo(
            f"finished over {len(outcome.accepted)} error(s) of pq check (--accept-errors): recorded in the "
            f"lineage step of {ws.rel(ws.queue_dir.queue_path)} and in the report"
        )
    if not outcome.state.conflicts and outcome.merged:
        name, release = outcome.downstream
        typer.echo(f"merged {outcome.merged} into the series, no conflicts; downstream: {name} {release or '(none)'}")
        return EXIT_OK
    if not outcome.state.conflicts:
        typer.echo(f"refreshed onto {outcome.target_label}: {len(outcome.results)} patches, no conflicts")
        return EXIT_OK
    where = f"stopped at {outcome.stopped_at}:" if outcome.stopped_at else "all patches replayed;"
    typer.echo(f"{where} resolve the markers in {ws.rel(ws.out)}/, then `pq continue` (or `pq abort`)")
    return EXIT_CONFLICT


def _check_pending(ws: Workspace, result: CheckOutcome, said: str) -> int:
    """The one error line of a refresh that `pq check`'s errors keep from finishing, naming the first; exit 1."""
    first = next(f for f in result.findings if f.severity == "error")
    where = f"{ws.rel(ws.out / first.file)}:{first.line}: " if first.line else ""
    where = where or (f"{ws.rel(ws.out / first.file)}: " if first.file else "")
    err(
        f"error: {where}pq check reports {result.errors} error(s) in the result: {said}; fix them in "
        f"{ws.rel(ws.out)}/, then `pq continue` (`--accept-errors` finishes over them), or `pq abort`"
    )
    return EXIT_ERROR


def print_conflict(ws: Workspace, c: Conflict, tip: Suggestion | None = None, moved: str = "") -> None:
    """A conflict and, indented, why it is one, what upstream changed there (and which commits), where upstream
    moved the lines it deleted (``moved``: :func:`resolve.moved_notes`), its omni block, its suggestion (``tip``:
    what `pq status` shows, :func:`resolve.suggestions`)."""
    from patch_queue.merge import explain
    from patch_queue.outputs import report_parts

    where = f"{ws.rel(ws.out / c.file)}:{c.line}"
    typer.echo(f"conflict: {where} {c.kind} in {c.symbol or '<module>'} (patch {c.patch})")
    typer.echo(f"  why: {c.message}")
    by = ", ".join(f"{u.commit[:12]}" + (f" (#{u.pr})" if u.pr is not None else "") for u in c.culprits)
    side = "series" if c.patch and not c.patch.endswith(".patch") else "upstream"  # a merge's one patch: the release
    typer.echo(f"  {side}: {report_parts.upstream_change(c)}" + (f" [{by}]" if by else ""))
    if moved:
        typer.echo(f"  moved: {moved}")
    typer.echo(f"  omni: {explain.omni_block(c)}")
    if tip is not None:  # this region's alone: the regions that go with it have suggestions of their own
        typer.echo(f"  suggestion: {tip.reason}: `pq resolve --suggested {shlex.quote(where)}`")


def print_flags(ws: Workspace, flags: Sequence[Conflict], listed: str | None) -> None:
    """The flags to read (:func:`report_parts.to_read`), or those of the ``listed`` kinds (KIND,…; `all`: every
    one), each with its message; then the count of every kind, those to read and the others."""
    from patch_queue.outputs.report_parts import to_read

    kinds = {k.strip() for k in (listed or "").split(",") if k.strip()}
    if kinds:
        shown = [f for f in flags if "all" in kinds or f.kind in kinds]
    else:
        shown = [f for f in flags if to_read(f)]
    for f in shown:
        typer.echo(f"review: {ws.rel(ws.out / f.file)}:{f.line} {f.kind} in {f.symbol or '<module>'} (patch {f.patch})")
        typer.echo(f"  why: {f.message}")
    if not flags:
        typer.echo("no review flags")
        return

    def counted(group: Sequence[Conflict]) -> str:
        counts = Counter(f.kind for f in group)
        return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kn: (-kn[1], kn[0])))

    read = [f for f in flags if to_read(f)]
    rest = [f for f in flags if not to_read(f)]
    if read:
        above = " (listed above)" if all(f in shown for f in read) else ""
        typer.echo(f"{len(read)} review flag(s) to read{above}: {counted(read)}")
    if rest:
        typer.echo(f"{len(rest)} other review flag(s): {counted(rest)}")
    if len(shown) < len(flags):
        typer.echo("`-v` lists every review flag, `--flags KIND,…` those of these kinds")


def print_check(ws: Workspace, result: CheckOutcome) -> None:
    for f in result.findings:
        typer.echo(f.render(prefix=ws.rel(ws.out) + "/" if f.file else ""))
    typer.echo(
        f"pq check: {result.errors} error(s), {len(result.findings) - result.errors} warning(s) "
        f"in {len(result.files)} modules (omni blocks compared with {result.reference})"
        + (f"; --import: {result.imported}" if result.imported else "")
    )


def print_sync(ws: Workspace, outcome: SyncOutcome) -> None:
    from patch_queue.commands import sync_gpu
    from patch_queue.sync import translation

    for s in outcome.synced:
        port = s.port
        typer.echo(
            f"synced: {ws.rel(ws.out / port.npu_file)}:{s.line} in {port.symbol} from {sync_gpu.where(port.changes)} "
            f"({ws.queue_dir.shown(s.patch)})"
        )
        if port.how:
            typer.echo(f"  note: placed {port.how}")
        for added in port.imports:
            typer.echo(f"  note: {added}")
        if port.missing_names:
            typer.echo(f"  note: {port.npu_file} does not import {', '.join(port.missing_names)}")
        for need in port.needs:
            typer.echo(f"  warning: {need}")
    for p in outcome.proposals:
        port = p.port
        typer.echo(
            f"proposed {p.id}: {ws.rel(ws.out / port.npu_file)}:{p.line} in {port.symbol} from "
            f"{sync_gpu.where(port.changes)}" + (f" (placed {port.how})" if port.how else "")
        )
        for line in port.replaced.splitlines():
            typer.echo(f"  -{line}")
        for line in port.result.splitlines():
            typer.echo(f"  +{line}")
    for d in outcome.newly_declined:
        typer.echo(
            f"declined now: {d.file} {d.method}: `{d.first}` ({ws.rel(ws.queue_dir.root / translation.USER_RULES)})"
        )
    for u in outcome.unplaced:
        where = f" in {u.symbol}" if u.symbol else ""
        typer.echo(f"unplaced: {sync_gpu.where(u.changes)}{where}: {u.reason}")
    rules_file = ws.rel(ws.queue_dir.root / translation.USER_RULES)
    for c in outcome.declined:
        typer.echo(f"declined: {c.gpu_file}:{c.gpu_line} in {c.method}: `{c.first}` ({rules_file})")
    synced = [s for s in outcome.synced if not sync_gpu.is_helper(s.port)]
    helpers = [s for s in outcome.synced if sync_gpu.is_helper(s.port)]
    unplaced = [u for u in outcome.unplaced if not sync_gpu.is_helper(u)]
    refused = [u for u in outcome.unplaced if sync_gpu.is_helper(u)]
    functions = [s for s in helpers if sync_gpu.is_function(s.port)]
    methods = [s for s in helpers if s not in functions]
    since = f" since {outcome.since}" if outcome.since else ""
    if not outcome.since and not outcome.unported and not outcome.synced:
        typer.echo(
            f"sync-gpu: nothing to do: the series ports {outcome.source}, whose GPU runners are the ones synced from "
            "(`pq check` lists the older unported GPU code as gpu-unported; --backlog proposes it)"
        )
    elif not outcome.unported and not outcome.synced:
        typer.echo(f"sync-gpu: nothing to do, every omni GPU change of {outcome.source}{since} is on NPU")
    else:
        typer.echo(
            f"sync-gpu: {outcome.unported} unported omni GPU change(s) in {outcome.source}{since}: "
            f"{sum(len(s.port.changes) for s in synced)} ported in {len({s.patch for s in synced})} patch(es), "
            f"{len(outcome.proposals)} proposed, "
            f"{sum(len(u.changes) for u in unplaced)} not placed"
            + (f", {len(outcome.declined)} declined" if outcome.declined else "")
            + (f", {outcome.carried} on NPU after those ports" if outcome.carried else "")
            + (f"; {len(methods)} helper method(s) copied" if methods else "")
            + (f"{',' if methods else ';'} {len(functions)} module function(s) copied" if functions else "")
            + (f", {len(refused)} not copied" if refused else "")
        )
    if outcome.pin is not None:
        before, after = outcome.pin
        name = outcome.source.partition("==")[0]
        typer.echo(
            f"downstream: {name} {before or '(none)'} -> {after} in {ws.rel(ws.queue_dir.queue_path)}: the series now "
            f"holds {after}'s GPU-side changes (`pq check` reads its sources, the next `pq sync-gpu` starts from it)"
        )
