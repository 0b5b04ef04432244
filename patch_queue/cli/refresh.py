"""The commands of a refresh and what they print: adopt, build, refresh, sync-gpu, continue, resolve, mergetool,
check, blocks, abort, status."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from patch_queue import namespace, presets
from patch_queue.cli.app import (
    AcceptErrorsOpt,
    AnnotationsOpt,
    DiscardOpt,
    FlagsOpt,
    ImportAutoOpt,
    ImportOpt,
    MarkdownOpt,
    NoSourcesOpt,
    ReportOpt,
    UpstreamOpt,
    VerboseOpt,
    command,
    echo,
    err,
    locked,
    say,
    workspace,
)
from patch_queue.errors import EXIT_CONFLICT, EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    from patch_queue.commands.check import CheckOutcome
    from patch_queue.commands.machine import Outcome
    from patch_queue.commands.sync_gpu import SyncOutcome
    from patch_queue.merge.conflict import Conflict
    from patch_queue.merge.explain import Suggestion
    from patch_queue.project.workspace import Workspace
    from patch_queue.series.absorb import Placement, Relocation
    from patch_queue.series.replay import PatchResult


def _on_patch(result: PatchResult) -> None:
    detail = f" ({len(result.conflicts)} conflict region(s))" if result.conflicts else ""
    say(f"Pushing {result.name} ... {result.status}{detail}")


@command()
def adopt(
    source: Annotated[
        str, typer.Argument(help="vllm-omni release (vllm-omni==0.30.0) or a folder of NPU worker files")
    ],
    upstream: UpstreamOpt = None,
    at: Annotated[str | None, typer.Option("--at", help="upstream commit, ref or release instead of searching")] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing series")] = False,
    discard: DiscardOpt = False,
    preset: Annotated[
        str | None, typer.Option("--preset", help="the queue: npu (the default: vllm-ascend's runner) or gpu (vLLM's)")
    ] = None,
    upstream_dist: Annotated[str | None, typer.Option("--upstream-dist", help="the upstream distribution")] = None,
    upstream_file: Annotated[
        str | None, typer.Option("--upstream-file", help="the upstream module the runners copy, from its root")
    ] = None,
    upstream_class: Annotated[
        str | None, typer.Option("--upstream-class", help="the upstream class whose methods are copied")
    ] = None,
    package: Annotated[
        str | None, typer.Option("--package", help="the downstream package folder of the runners")
    ] = None,
    out: Annotated[str | None, typer.Option("--out", help="the output folder pq builds the runners into")] = None,
) -> None:
    """Derive the patch series from a hand-maintained release and write patches/ and the output folder.

    The queue (which upstream file and class, which downstream package, which output) is recorded in
    patches/queue.toml: a preset (--preset) and any option that sets one part of it; every later command reads it
    from there."""
    from patch_queue.commands import adopt
    from patch_queue.outputs import folder

    with locked("adopt", out_folder=False) as ws:
        spec = adopt.queue_spec(
            ws,
            preset,
            source,
            upstream_dist=upstream_dist,
            upstream_file=upstream_file,
            upstream_class=upstream_class,
            package=package,
            out=out,
        )
        ws.use_spec(spec)
        folder.refuse_unusable(ws)
        res = adopt.do_adopt(
            ws, source, upstream_git=upstream, at=at, force=force, discard=discard, progress=say, spec=spec
        )
    echo(res.discarded)
    if res.searched_auto:
        typer.echo(
            f"upstream base: {res.commit_label}{f' (public {res.public_commit[:12]})' if res.public_commit else ''},"
            f" score {res.matched}/{res.total} lines of the carried methods"
            f" ({100.0 * res.matched / max(res.total, 1):.1f}%), best of {res.searched} {res.searched_kind},"
            f" {res.ties} tied" + (f" ({', '.join(res.tied)}; a tie goes to the newest)" if len(res.tied) > 1 else "")
        )
    else:
        typer.echo(f"upstream base: {res.commit_label} (given with --at)")
    for c in res.carried:
        typer.echo(f"carried: {c.module} {c.downstream} <- {c.upstream} (similarity {c.ratio:.2f})")
    for warning in res.warnings:
        typer.echo(f"warning: {warning}")
    typer.echo(f"wrote {len(res.patches)} patches to patches/ and the runners to {ws.rel(ws.out)}/")


@command()
def build(
    out: Annotated[Path | None, typer.Option("--out", help="output folder (default npu_worker/)")] = None,
    standalone: Annotated[
        bool, typer.Option("--standalone", help="point vllm_omni.platforms.npu.worker imports into the package")
    ] = False,
    wheel: Annotated[
        bool,
        typer.Option(
            "--wheel",
            help="build an installable wheel of the standalone package into --out "
            "(default dist/); npu_worker/ is not touched",
        ),
    ] = False,
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
) -> None:
    """Write the top of the stack as the npu_worker package (or, with --wheel, as a wheel of it)."""
    from patch_queue.commands import machine, write

    if wheel:
        with locked("build") as ws:
            built = write.do_wheel(ws, out=out, upstream_git=upstream, progress=say)
        typer.echo(ws.rel(built))
        return
    with locked("build", out_folder=out is None) as ws:
        files, dropped = write.do_build(
            ws, out=out, standalone_pkg=standalone, upstream_git=upstream, discard=discard, progress=say
        )
    echo(dropped)
    where = ws.rel(out.resolve() if out else ws.out)
    for problem in machine.fence_problems(files):  # built all the same: the fences are the patches' business
        typer.echo(f"warning: {where}/{problem['file']}:{problem['line']}: {problem['message']}")
    typer.echo(f"built {len(files)} files into {where}/")


def print_placements(ws: Workspace, placements: list[Placement]) -> None:
    for p in placements:
        moved = f" (it does not merge into {p.moved_from}, which owns its lines)" if p.moved_from else ""
        typer.echo(
            f"recorded: {ws.rel(ws.out / p.file)}:{p.line} +{p.added} -{p.removed} into patches/{p.patch}{moved}"
        )


def print_relocations(ws: Workspace, relocations: Sequence[Relocation]) -> None:
    """Each edit of a carried method moved out of its module's skeleton patch (or left there), one a line."""
    from patch_queue.commands.machine import relocation_message

    for r in relocations:
        typer.echo(
            f"{'relocated' if r.patch else 'skeleton drift'}: {ws.rel(ws.out / r.file)}: {relocation_message(r)}"
        )


def _print_outcome(ws: Workspace, outcome: Outcome, listed: str | None = None) -> int:
    """Conflicts first, then the review flags to read and the others counted by kind (those of ``listed``,
    KIND,… or `all`, one a line), then `pq check`; the exit code.  A `pq continue` that wrote nothing (over
    errors of `pq check`) prints only the check, at the lines of the output folder as it is."""
    if not outcome.written:
        assert outcome.check is not None
        _print_check(ws, outcome.check)
        return _check_pending(ws, outcome.check, "nothing written (every line above is a line of the files on disk)")
    echo(outcome.state.discarded)
    print_placements(ws, outcome.placements)
    print_relocations(ws, outcome.relocations)
    if outcome.state.conflicts and outcome.state.culprits_note:
        typer.echo(f"culprits: {outcome.state.culprits_note}")
    tips, notes = {}, {}
    if outcome.state.conflicts:  # the suggestions `pq status` shows (the files are written, the state saved)
        from patch_queue.commands import resolve

        tips = resolve.suggestions(ws, outcome.state)
        notes = resolve.moved_notes(ws, list(outcome.state.conflicts))
    for c in outcome.state.conflicts:
        _print_conflict(ws, c, tips.get((c.file, c.line or 0)), notes.get((c.file, c.line or 0), ""))
    if outcome.state.conflicts:
        by_file = Counter(c.file for c in outcome.state.conflicts)
        summary = ", ".join(f"{f}: {n}" for f, n in sorted(by_file.items()))
        typer.echo(f"{len(outcome.state.conflicts)} conflict region(s) ({summary})")
    for sym in outcome.state.removed_symbols:
        typer.echo(f"warning: carried symbol removed upstream: {sym}")
    _print_flags(ws, outcome.state.flags, listed)
    for problem in outcome.fences:
        typer.echo(f"warning: {ws.rel(ws.out / str(problem['file']))}:{problem['line']}: {problem['message']}")
    before, after = outcome.blocks
    typer.echo(f"omni blocks: {before} before, {after} after")
    if outcome.check is not None:
        _print_check(ws, outcome.check)
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


def _print_conflict(ws: Workspace, c: Conflict, tip: Suggestion | None = None, moved: str = "") -> None:
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


def _print_flags(ws: Workspace, flags: Sequence[Conflict], listed: str | None) -> None:
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


def _print_check(ws: Workspace, result: CheckOutcome) -> None:
    for f in result.findings:
        typer.echo(f.render(prefix=ws.rel(ws.out) + "/" if f.file else ""))
    typer.echo(
        f"pq check: {result.errors} error(s), {len(result.findings) - result.errors} warning(s) "
        f"in {len(result.files)} modules (omni blocks compared with {result.reference})"
        + (f"; --import: {result.imported}" if result.imported else "")
    )


def _report_paths(ws: Workspace, report: Path | None, markdown: Path | None) -> tuple[str, str]:
    """The report paths as the refresh state keeps them: relative to the repository when inside it."""

    def kept(path: Path | None) -> str:
        if path is not None and str(path) == "-":  # stdout, at this run and at the `pq continue` that ends it
            return "-"
        full = path.resolve() if path else None
        if full is None:
            return ""
        return full.relative_to(ws.root).as_posix() if full.is_relative_to(ws.root) else str(full)

    return kept(report), kept(markdown)


def _write_reports(ws: Workspace, outcome: Outcome, annotations: bool) -> None:
    """The reports of ``outcome`` at the paths the refresh was given (the later `pq continue` rewrites them)."""
    if not any(outcome.state.reports) and not annotations:
        return  # no report asked for: none is made
    from patch_queue.commands import machine
    from patch_queue.fsutil import REFRESH_JSON, REFRESH_MARKDOWN, json_bytes, write_output
    from patch_queue.outputs import report as render

    report, markdown = (Path(p) if p == "-" else ws.root / p if p else None for p in outcome.state.reports)
    data = machine.report_json(outcome)
    if outcome.state.conflicts:  # what `pq status` says under each region: its suggestion, moved code (`moved:`)
        from patch_queue.commands import resolve

        entries = data["conflicts"]
        assert isinstance(entries, list)
        resolve.explain_report(ws, outcome.state, entries)
    if report is not None:
        write_output(report, json_bytes(data), REFRESH_JSON)
    if markdown is not None:
        write_output(markdown, render.markdown(data, queue=ws.spec).encode("utf-8"), REFRESH_MARKDOWN)
    if annotations:
        echo(*render.annotations(data, ws.spec))


@command()
def refresh(
    to: Annotated[
        str | None, typer.Option("--to", help="vllm-ascend==VER, an upstream ref or commit, or a folder")
    ] = None,
    no_stop: Annotated[bool, typer.Option("--no-stop", help="go through every patch and record all conflicts")] = False,
    report: ReportOpt = None,
    markdown: MarkdownOpt = None,
    annotations: AnnotationsOpt = False,
    no_check: Annotated[bool, typer.Option("--no-check", help="do not run pq check on the result")] = False,
    no_sources: NoSourcesOpt = False,
    import_test: ImportAutoOpt = None,
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
    sync_gpu: Annotated[
        bool, typer.Option("--sync-gpu", help="after a clean refresh, port the unported omni GPU changes (pq sync-gpu)")
    ] = False,
    flags: FlagsOpt = None,
    verbose: VerboseOpt = False,
    accept_errors: AcceptErrorsOpt = False,
) -> int:
    """Re-vendor the target upstream, replay the series onto it, export the patches, build npu_worker/."""
    from patch_queue.commands import refresh
    from patch_queue.fsutil import REFRESH_JSON, REFRESH_MARKDOWN, check_output

    check_output(report, REFRESH_JSON)
    check_output(markdown, REFRESH_MARKDOWN)
    with locked("refresh") as ws:
        outcome = refresh.do_refresh(
            ws,
            to=to,
            no_stop=no_stop,
            upstream_git=upstream,
            progress=say,
            on_patch=_on_patch,
            check=not no_check,
            check_sources=not no_sources,
            check_import=import_test,
            discard=discard,
            reports=_report_paths(ws, report, markdown),
            accept_errors=accept_errors,
        )
        synced = _refresh_sync_gpu(ws, outcome, upstream) if sync_gpu else None
    reported = outcome  # the report lists the flags of the ports too
    if synced is not None:
        reported = replace(outcome, state=replace(outcome.state, flags=outcome.state.flags + tuple(synced.flags)))
    _write_reports(ws, reported, annotations)
    code = _print_outcome(ws, outcome, "all" if verbose else flags)
    if synced is not None:
        _print_sync(ws, synced)
    return code


@command()
def merge(
    spec: Annotated[
        str | None,
        typer.Argument(
            help="vllm-omni release (X or vllm-omni==X) or a folder of NPU worker files; default the newest"
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="the release the series' NPU runners are (default: the last adopted or merged)"),
    ] = None,
    report: ReportOpt = None,
    markdown: MarkdownOpt = None,
    annotations: AnnotationsOpt = False,
    no_check: Annotated[bool, typer.Option("--no-check", help="do not run pq check on the result")] = False,
    no_sources: NoSourcesOpt = False,
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
    flags: FlagsOpt = None,
    verbose: VerboseOpt = False,
    accept_errors: AcceptErrorsOpt = False,
) -> int:
    """Take a newer vllm-omni release's NPU runners into the series, three-way (conflicts as for a refresh)."""
    from patch_queue.commands import merge as merge_mod
    from patch_queue.fsutil import REFRESH_JSON, REFRESH_MARKDOWN, check_output

    check_output(report, REFRESH_JSON)
    check_output(markdown, REFRESH_MARKDOWN)
    with locked("merge") as ws:
        before = ws.queue_dir.load_queue()
        outcome = merge_mod.do_merge(
            ws,
            spec,
            since=since,
            upstream_git=upstream,
            progress=say,
            check=not no_check,
            check_sources=not no_sources,
            discard=discard,
            reports=_report_paths(ws, report, markdown),
            accept_errors=accept_errors,
        )
    if not outcome.results:
        echo(outcome.state.discarded)
        typer.echo(
            f"already up to date: the series holds {presets.runners(ws.spec)} of {outcome.merged}; nothing changed"
        )
        return EXIT_OK
    _write_reports(ws, outcome, annotations)
    code = _print_outcome(ws, outcome, "all" if verbose else flags)
    if not outcome.pending and outcome.downstream[1] != before.downstream_release:
        typer.echo(
            f"downstream: {before.downstream_name} {before.downstream_release or '(none)'} -> {outcome.downstream[1]} "
            f"in {ws.rel(ws.queue_dir.queue_path)}"
        )
    return code


def _refresh_sync_gpu(ws: Workspace, outcome: Outcome, upstream: str | None) -> SyncOutcome | None:
    """``pq sync-gpu`` after a clean refresh (with conflicts it waits: resolve, then run it)."""
    from patch_queue.commands import sync_gpu

    if outcome.state.conflicts:
        typer.echo("sync-gpu skipped: the refresh left conflicts; resolve them, then run `pq sync-gpu`")
        return None
    if outcome.check_pending:
        typer.echo("sync-gpu skipped: pq check's errors keep the refresh pending; fix them, then run `pq sync-gpu`")
        return None
    return sync_gpu.do_sync_gpu(ws, omni=None, since=None, upstream_git=upstream, progress=say)


def _print_sync(ws: Workspace, outcome: SyncOutcome) -> None:
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


def _ids(text: str | None) -> frozenset[str]:
    return frozenset(i for part in (text or "").split(",") if (i := part.strip()))


@command(name="sync-gpu")
def sync_gpu_(
    omni: Annotated[
        str | None,
        typer.Option("--omni", help="vllm-omni release (X or vllm-omni==X) or folder; default the series' release"),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="the vllm-omni release the delta starts from (X or folder); default the last taken"
        ),
    ] = None,
    apply: Annotated[str | None, typer.Option("--apply", help="apply these proposals too: ID[,ID...], or all")] = None,
    decline: Annotated[
        str | None, typer.Option("--decline", help="decline these proposals: ID[,ID...] (patches/gpu-sync-rules.toml)")
    ] = None,
    backlog: Annotated[
        bool, typer.Option("--backlog", help="also the unported GPU omni code older than the release (as proposals)")
    ] = False,
    report: ReportOpt = None,
    markdown: MarkdownOpt = None,
    upstream: UpstreamOpt = None,
) -> int:
    """Port the omni changes of the GPU runners since the series' release: the sure ones applied (one patch per NPU
    method), the rest proposed with an id (--apply ID, --decline ID)."""
    from patch_queue.commands import sync_gpu
    from patch_queue.fsutil import SYNC_JSON, SYNC_MARKDOWN, check_output, json_bytes, write_output

    check_output(report, SYNC_JSON)
    check_output(markdown, SYNC_MARKDOWN)
    chosen = None if (apply or "").strip() == "all" else _ids(apply)
    with locked("sync-gpu") as ws:
        outcome = sync_gpu.do_sync_gpu(
            ws,
            omni=omni,
            since=since,
            upstream_git=upstream,
            apply=chosen,
            decline=_ids(decline),
            backlog=backlog,
            progress=say,
        )

    def shown(npu_file: str) -> str:
        return ws.rel(ws.out / npu_file)

    if report is not None:
        write_output(report, json_bytes(sync_gpu.report_json(outcome, shown)), SYNC_JSON)
    if markdown is not None:
        write_output(markdown, sync_gpu.report_markdown(outcome, shown).encode("utf-8"), SYNC_MARKDOWN)
    _print_sync(ws, outcome)
    return EXIT_OK


@command(name="continue")
def continue_(
    report: ReportOpt = None,
    markdown: MarkdownOpt = None,
    annotations: AnnotationsOpt = False,
    flags: FlagsOpt = None,
    verbose: VerboseOpt = False,
    accept_errors: AcceptErrorsOpt = False,
    import_test: ImportAutoOpt = None,
) -> int:
    """Take the resolved files in npu_worker/ and go on with the refresh (rewriting the refresh's reports)."""
    from patch_queue.commands import machine
    from patch_queue.fsutil import REFRESH_JSON, REFRESH_MARKDOWN, check_output
    from patch_queue.project import operation

    check_output(report, REFRESH_JSON)
    check_output(markdown, REFRESH_MARKDOWN)
    with locked("continue") as ws:
        interrupted = machine.recover_interrupted(ws, forward=True)
        if interrupted is not None:
            typer.echo(f"finished the writes of the interrupted `pq {interrupted}`; see `pq status`")
            return 0
        pending = operation.load(ws) if report is None or markdown is None else None
        if pending is not None:  # the refresh's own report paths, which continue rewrites: still its reports?
            kinds = (REFRESH_JSON, REFRESH_MARKDOWN)
            for given, kept, kind in zip((report, markdown), pending.reports, kinds, strict=True):
                check_output(ws.root / kept if kept and given is None else None, kind, shown=kept)
        outcome = machine.do_continue(
            ws,
            progress=say,
            on_patch=_on_patch,
            reports=_report_paths(ws, report, markdown),
            accept_errors=accept_errors,
            check_import=import_test,
        )
    if outcome.written:  # over errors of pq check nothing is written: the reports stay as they were too
        _write_reports(ws, outcome, annotations)
    return _print_outcome(ws, outcome, "all" if verbose else flags)


@command(name="resolve")
def resolve_(
    where: Annotated[str, typer.Argument(help="FILE:LINE of a line of the conflict region (markers included)")],
    upstream_side: Annotated[
        bool,
        typer.Option("--keep-upstream", "--ours", help="keep the first side: upstream's (a merge: the series')"),
    ] = False,
    patch_side: Annotated[
        bool, typer.Option("--keep-patch", "--theirs", help="keep the last side: the patch's (a merge: the release's)")
    ] = False,
    both: Annotated[bool, typer.Option("--both", help="keep upstream's lines, then the patch's (git's union)")] = False,
    suggested: Annotated[bool, typer.Option("--suggested", help="write the refresh's suggested resolution")] = False,
    alone: Annotated[
        bool,
        typer.Option("--alone", help="not the regions that go with it (--keep-upstream, --keep-patch take them too)"),
    ] = False,
    old_upstream: Annotated[bool, typer.Option("--upstream", hidden=True)] = False,
    old_patch: Annotated[bool, typer.Option("--patch", hidden=True)] = False,
) -> None:
    """Resolve the one conflict region at FILE:LINE in npu_worker/ to one side (the others: `pq mergetool`);
    with --keep-upstream or --keep-patch also the regions of the refresh that go with it (a name, a call)."""
    from patch_queue.commands import resolve

    for old, name in ((old_upstream, "upstream"), (old_patch, "patch")):
        if old:  # the old names: --upstream names a repository on every other command
            alias = "--ours" if name == "upstream" else "--theirs"
            err(f"note: `resolve --{name}` is deprecated: say --keep-{name} (or {alias})")
    sides = {
        "upstream": upstream_side or old_upstream,
        "patch": patch_side or old_patch,
        "both": both,
        "suggested": suggested,
    }
    chosen = [side for side, on in sides.items() if on]
    if len(chosen) != 1:
        err("error: give one of --keep-upstream (--ours), --keep-patch (--theirs), --both, --suggested")
        raise typer.Exit(EXIT_ERROR)
    with locked("resolve") as ws:
        done = resolve.do_resolve(ws, where, chosen[0], alone=alone)
    wrote = f"the suggestion, {done.writes}" if chosen[0] == "suggested" else f"the {chosen[0]} side"
    typer.echo(
        f"resolved {done.path}:{done.first}-{done.last} with {wrote} ({done.lines} line(s)); "
        f"{done.left} conflict region(s) left in the file"
    )
    if done.linked:
        at = ", ".join(f"{done.path}:{line}" for line in done.linked)
        typer.echo(f"also resolved with the {chosen[0]} side, as they go with it: {at} (--alone: not them)")


@command()
def mergetool(
    files: Annotated[
        list[str] | None, typer.Argument(help="modules of npu_worker/ (default: every conflicted one)")
    ] = None,
    tool: Annotated[
        str | None, typer.Option("--tool", "-t", help="the merge tool (default: git config merge.tool)")
    ] = None,
) -> None:
    """Resolve the conflict regions of npu_worker/ with your merge tool, as `git mergetool` does (LOCAL: upstream,
    REMOTE: the patch, BASE: the old upstream)."""
    from patch_queue.commands import resolve

    with locked("mergetool") as ws:
        done = resolve.do_mergetool(ws, tool=tool, names=files or [])
    for path, left in done:
        typer.echo(f"{path}: {'resolved' if not left else f'{left} conflict region(s) left'}")
    if not done:
        typer.echo(f"no conflict regions in {ws.rel(ws.out)}/")


@command()
def check(
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the findings as JSON here (- for stdout)")
    ] = None,
    no_sources: NoSourcesOpt = False,
    upstream: UpstreamOpt = None,
    import_test: ImportOpt = False,
) -> int:
    """Check the built npu_worker/: compile, fences, omni blocks, NPU rules, imports, signatures, GPU audit (and with
    --import, each module imported against the real releases)."""
    from patch_queue.commands import check
    from patch_queue.fsutil import CHECK_JSON, check_output, json_bytes, write_output

    check_output(json_out, CHECK_JSON)
    with locked("check") as ws:
        result = check.do_check(ws, upstream_git=upstream, sources_on=not no_sources, progress=say, imports=import_test)
    if json_out is not None:
        write_output(json_out, json_bytes(result.as_json()), CHECK_JSON)
    _print_check(ws, result)
    return EXIT_ERROR if result.errors else EXIT_OK


@command()
def blocks(
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="write the inventory as Markdown here (- for stdout)")
    ] = None,
    upstream: UpstreamOpt = None,
) -> None:
    """List every omni block and unfenced omni edit of the series, with the patch that carries it."""
    from patch_queue.commands import write
    from patch_queue.fsutil import BLOCKS_MARKDOWN, check_output, write_output
    from patch_queue.outputs import inventory

    check_output(markdown, BLOCKS_MARKDOWN)
    with locked("blocks") as ws:
        loaded = write.sync_stack(ws, upstream_git=upstream, progress=say)
    entries = inventory.inventory(ws.repo, loaded.base, loaded.patches)
    for e in entries:
        where = f"{ws.rel(ws.out / e.file)}:{e.line}"
        label = f"block {e.index}" if e.index is not None else "unfenced"
        typer.echo(
            f"{where}  {label:9} {e.kind:8} {e.symbol or '<module>'}  [{e.patch}]  {e.lines[0] if e.lines else ''}"
        )
    counts = Counter(e.kind for e in entries)
    typer.echo(", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no omni blocks")
    if markdown is not None:
        title = f"{loaded.queue.downstream_name} {loaded.queue.downstream_release} on {loaded.queue.upstream.label}"
        write_output(markdown, inventory.markdown(entries, title=title).encode("utf-8"), BLOCKS_MARKDOWN)


@command()
def abort() -> None:
    """Put every file and ref back as it was before the refresh (or merge)."""
    from patch_queue.commands import machine

    operation = "refresh"
    with locked("abort") as ws:
        interrupted = machine.recover_interrupted(ws, forward=False)
        if interrupted is None:
            operation = machine.do_abort(ws)
    if interrupted is None:
        typer.echo(f"{operation} aborted; patches/, {ws.rel(ws.out)}/ and {namespace.refs()} are as before")
    else:
        typer.echo(
            f"undid the writes of the interrupted `pq {interrupted}`; patches/, {ws.rel(ws.out)}/ and "
            f"{namespace.refs()} are as before it (see `pq status`)"
        )


@command()
def status(
    upstream: UpstreamOpt = None,
    flags: FlagsOpt = None,
    verbose: VerboseOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the status as JSON (same exit code)")] = False,
) -> int:
    """Where the queue stands: upstream pin, patches, a refresh in progress and its conflicts."""
    from patch_queue.commands import resolve
    from patch_queue.outputs import folder
    from patch_queue.project.operation import OperationKind

    ws = workspace()
    st = resolve.do_status(ws, upstream_git=upstream)
    code = (
        EXIT_ERROR
        if st.in_progress and st.check_errors and not st.conflicts
        else EXIT_CONFLICT
        if st.in_progress and st.conflicts
        else EXIT_OK
    )
    if as_json:
        import json

        unusable = folder.unusable(ws)
        data = {
            "upstream": st.upstream,
            "downstream": st.downstream,
            "warning": None if unusable is None else str(unusable),
            "in_progress": str(st.operation) if st.in_progress else None,
            "target": st.target if st.in_progress else None,
            "patches": [{"name": name, "state": str(state)} for name, state in st.patches],
            "conflicts": [c.as_json(report=True) for c in st.conflicts],
            "resolved": len(st.resolved),
            "check_errors": [
                {"file": file, "line": line, "rule": rule, "message": message}
                for file, line, rule, message in st.check_errors
            ],
            "unrecorded": [{"file": e.file, "added": e.added, "removed": e.removed} for e in st.edits],
            "accepted_errors": {"step": st.accepted[0], "errors": st.accepted[1], "kind": st.accepted_kind}
            if st.accepted[1]
            else None,
        }
        typer.echo(json.dumps(data, indent=2))
        return code
    typer.echo(f"upstream: {st.upstream}")
    unusable = folder.unusable(ws)
    if unusable is not None:  # said, not refused: status reports
        typer.echo(f"warning: {unusable}")
    if st.downstream:
        typer.echo(f"downstream: {st.downstream}")
    if st.in_progress:
        typer.echo(
            f"merge in progress of {st.target}"
            if st.operation is OperationKind.MERGE
            else f"refresh in progress onto {st.target}"
        )
    for name, state in st.patches:
        typer.echo(f"  {state:10} {name}")
    for c in st.conflicts:
        _print_conflict(ws, c, st.suggestions.get((c.file, c.line or 0)), st.moved.get((c.file, c.line or 0), ""))
    if st.resolved:
        typer.echo(f"{len(st.resolved)} of {len(st.resolved) + len(st.conflicts)} conflict region(s) resolved on disk")
    if st.in_progress:
        _print_flags(ws, st.flags, "all" if verbose else flags)
    for file, line, rule, message in st.check_errors:
        where = f"{ws.rel(ws.out / file)}:{line}" if line else ws.rel(ws.out / file) if file else ws.rel(ws.out)
        typer.echo(f"{where}: error: [{rule}] {message}")
    for e in st.edits:
        typer.echo(f"unrecorded: {ws.rel(ws.out / e.file)} +{e.added} -{e.removed} lines (`pq record` takes them)")
    step, accepted = st.accepted
    if accepted:
        typer.echo(
            f"the last {st.accepted_kind} (lineage step {step}) was finished over {accepted} error(s) of pq check "
            f"(--accept-errors; listed in {ws.rel(ws.queue_dir.queue_path)})"
        )
    if st.in_progress and st.check_errors and not st.conflicts:
        typer.echo(
            f"next: pq check found {len(st.check_errors)} error(s) in the result: fix them in {ws.rel(ws.out)}/, "
            "then `pq continue` (`--accept-errors` finishes over them); or `pq abort`"
        )
        return EXIT_ERROR
    if st.in_progress and not st.conflicts:
        typer.echo("next: `pq continue` (no conflict region is left on disk); or `pq abort`")
    elif st.in_progress:
        typer.echo("next: resolve the markers, then `pq continue`; or `pq abort`")
    return code
