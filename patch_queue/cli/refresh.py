"""The commands of a refresh: adopt, build, refresh, sync-gpu, continue, resolve, mergetool, check, blocks, abort,
status (what they print of an operation, `pq check` and `pq sync-gpu`: :mod:`patch_queue.cli.show`)."""

from __future__ import annotations

from collections import Counter
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
from patch_queue.cli.show import print_check, print_conflict, print_flags, print_outcome, print_sync
from patch_queue.errors import EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:
    from patch_queue.series.replay import PatchResult


def _on_patch(result: PatchResult) -> None:
    detail = f" ({len(result.conflicts)} conflict region(s))" if result.conflicts else ""
    say(f"Pushing {result.name} ... {result.status}{detail}")


@command()
def adopt(
    source: Annotated[
        str, typer.Argument(help="a release of the downstream (DIST==VERSION) or a folder of its runner files")
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

    options = {
        "upstream_dist": upstream_dist,
        "upstream_file": upstream_file,
        "upstream_class": upstream_class,
        "package": package,
        "out": out,
    }
    with locked("adopt", out_folder=False) as ws:
        res = adopt.adopt_queue(
            ws,
            source,
            preset=preset,
            options=options,
            upstream_git=upstream,
            at=at,
            force=force,
            discard=discard,
            progress=say,
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
    out: Annotated[Path | None, typer.Option("--out", help="output folder (default: the queue's)")] = None,
    standalone: Annotated[
        bool, typer.Option("--standalone", help="point imports of the downstream package into the built one")
    ] = False,
    wheel: Annotated[
        bool,
        typer.Option(
            "--wheel",
            help="build an installable wheel of the standalone package into --out "
            "(default dist/); the output folder is not touched",
        ),
    ] = False,
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
) -> None:
    """Write the top of the stack as the runner package in the output folder (or, with --wheel, as a wheel of it)."""
    from patch_queue.commands import write

    if wheel:
        with locked("build") as ws:
            built = write.do_wheel(ws, out=out, upstream_git=upstream, progress=say)
        typer.echo(ws.rel(built))
        return
    with locked("build", out_folder=out is None) as ws:
        files, dropped, fences = write.do_build(
            ws, out=out, standalone_pkg=standalone, upstream_git=upstream, discard=discard, progress=say
        )
    echo(dropped)
    where = ws.rel(out.resolve() if out else ws.out)
    for problem in fences:
        typer.echo(f"warning: {where}/{problem['file']}:{problem['line']}: {problem['message']}")
    typer.echo(f"built {len(files)} files into {where}/")


@command()
def refresh(
    to: Annotated[
        str | None, typer.Option("--to", help="an upstream release (DIST==VERSION), ref or commit, or a folder")
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
        bool,
        typer.Option(
            "--sync-gpu", help="after a clean refresh, port the unported omni changes of the GPU runners (pq sync-gpu)"
        ),
    ] = False,
    flags: FlagsOpt = None,
    verbose: VerboseOpt = False,
    accept_errors: AcceptErrorsOpt = False,
) -> int:
    """Re-vendor the target upstream, replay the series onto it, export the patches, build the output folder."""
    from patch_queue.commands import refresh
    from patch_queue.fsutil import REFRESH_JSON, REFRESH_MARKDOWN, check_output

    check_output(report, REFRESH_JSON)
    check_output(markdown, REFRESH_MARKDOWN)
    with locked("refresh") as ws:
        done = refresh.do_refresh(
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
            reports=(report, markdown),
            annotations=annotations,
            accept_errors=accept_errors,
            sync_gpu=sync_gpu,
        )
    echo(done.sync_waits, *done.outcome.annotations)
    code = print_outcome(ws, done.outcome, "all" if verbose else flags)
    if done.synced is not None:
        print_sync(ws, done.synced)
    return code


@command()
def merge(
    spec: Annotated[
        str | None,
        typer.Argument(
            help="a release of the downstream (X or DIST==X) or a folder of its runner files; default the newest"
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="the release the series' runners are (default: the last adopted or merged)"),
    ] = None,
    report: ReportOpt = None,
    markdown: MarkdownOpt = None,
    annotations: AnnotationsOpt = False,
    no_check: Annotated[bool, typer.Option("--no-check", help="do not run pq check on the result")] = False,
    no_sources: NoSourcesOpt = False,
    import_test: ImportAutoOpt = None,
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
    flags: FlagsOpt = None,
    verbose: VerboseOpt = False,
    accept_errors: AcceptErrorsOpt = False,
) -> int:
    """Take a newer downstream release's runners into the series, three-way (conflicts as for a refresh)."""
    from patch_queue.commands import merge as merge_mod
    from patch_queue.fsutil import REFRESH_JSON, REFRESH_MARKDOWN, check_output

    check_output(report, REFRESH_JSON)
    check_output(markdown, REFRESH_MARKDOWN)
    with locked("merge") as ws:
        outcome = merge_mod.do_merge(
            ws,
            spec,
            since=since,
            upstream_git=upstream,
            progress=say,
            check=not no_check,
            check_sources=not no_sources,
            check_import=import_test,
            discard=discard,
            reports=(report, markdown),
            annotations=annotations,
            accept_errors=accept_errors,
        )
    if not outcome.results:
        echo(outcome.state.discarded)
        typer.echo(
            f"already up to date: the series holds {presets.runners(ws.spec)} of {outcome.merged}; nothing changed"
        )
        return EXIT_OK
    echo(*outcome.annotations)
    code = print_outcome(ws, outcome, "all" if verbose else flags)
    name, release = outcome.downstream_before
    if not outcome.pending and outcome.downstream[1] != release:
        typer.echo(
            f"downstream: {name} {release or '(none)'} -> {outcome.downstream[1]} in {ws.rel(ws.queue_dir.queue_path)}"
        )
    return code


def _ids(text: str | None) -> frozenset[str]:
    return frozenset(i for part in (text or "").split(",") if (i := part.strip()))


@command(name="sync-gpu")
def sync_gpu_(
    omni: Annotated[
        str | None,
        typer.Option("--omni", help="the downstream release (X or DIST==X) or folder; default the series' release"),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="the downstream release the delta starts from (X or folder); default the last taken"
        ),
    ] = None,
    apply: Annotated[str | None, typer.Option("--apply", help="apply these proposals too: ID[,ID...], or all")] = None,
    decline: Annotated[
        str | None, typer.Option("--decline", help="decline these proposals: ID[,ID...] (patches/gpu-sync-rules.toml)")
    ] = None,
    backlog: Annotated[
        bool,
        typer.Option(
            "--backlog", help="also the unported omni code of the GPU runners older than the release (as proposals)"
        ),
    ] = False,
    report: ReportOpt = None,
    markdown: MarkdownOpt = None,
    upstream: UpstreamOpt = None,
) -> int:
    """Port the omni changes of the downstream's GPU runners since the series' release (a queue that mirrors them,
    as npu does): the sure ones applied (one patch per method), the rest proposed with an id (--apply ID, --decline
    ID)."""
    from patch_queue.commands import sync_gpu
    from patch_queue.fsutil import SYNC_JSON, SYNC_MARKDOWN, check_output

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
            report=report,
            markdown=markdown,
        )
    print_sync(ws, outcome)
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
    """Take the resolved files in the output folder and go on with the refresh (rewriting the refresh's reports)."""
    from patch_queue.commands import pending
    from patch_queue.fsutil import REFRESH_JSON, REFRESH_MARKDOWN, check_output

    check_output(report, REFRESH_JSON)
    check_output(markdown, REFRESH_MARKDOWN)
    with locked("continue") as ws:
        interrupted = pending.recover_interrupted(ws, forward=True)
        if interrupted is not None:
            typer.echo(f"finished the writes of the interrupted `pq {interrupted}`; see `pq status`")
            return 0
        outcome = pending.do_continue(
            ws,
            progress=say,
            on_patch=_on_patch,
            reports=(report, markdown),
            annotations=annotations,
            accept_errors=accept_errors,
            check_import=import_test,
        )
    echo(*outcome.annotations)
    return print_outcome(ws, outcome, "all" if verbose else flags)


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
    """Resolve the one conflict region at FILE:LINE in the output folder to one side (the others: `pq mergetool`);
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
        list[str] | None, typer.Argument(help="modules of the output folder (default: every conflicted one)")
    ] = None,
    tool: Annotated[
        str | None, typer.Option("--tool", "-t", help="the merge tool (default: git config merge.tool)")
    ] = None,
) -> None:
    """Resolve the conflict regions of the output folder with your merge tool, as `git mergetool` does (LOCAL: upstream,
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
    """Check the built output folder: compile, fences, omni blocks, the queue's rules (npu: the NPU rules), imports,
    signatures, the GPU audit where the queue mirrors GPU runners (and with --import, each module imported against the
    real releases)."""
    from patch_queue.commands import check
    from patch_queue.fsutil import CHECK_JSON, check_output

    check_output(json_out, CHECK_JSON)
    with locked("check") as ws:
        result = check.do_check(
            ws, upstream_git=upstream, sources_on=not no_sources, progress=say, imports=import_test, json_out=json_out
        )
    print_check(ws, result)
    return EXIT_ERROR if result.errors else EXIT_OK


@command()
def blocks(
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="write the inventory as Markdown here (- for stdout)")
    ] = None,
    upstream: UpstreamOpt = None,
) -> None:
    """List every omni block and unfenced omni edit of the series, with the patch that carries it."""
    from patch_queue.commands import check
    from patch_queue.fsutil import BLOCKS_MARKDOWN, check_output

    check_output(markdown, BLOCKS_MARKDOWN)
    with locked("blocks") as ws:
        entries = check.do_blocks(ws, upstream_git=upstream, markdown=markdown, progress=say)
    for e in entries:
        where = f"{ws.rel(ws.out / e.file)}:{e.line}"
        label = f"block {e.index}" if e.index is not None else "unfenced"
        typer.echo(
            f"{where}  {label:9} {e.kind:8} {e.symbol or '<module>'}  [{e.patch}]  {e.lines[0] if e.lines else ''}"
        )
    counts = Counter(e.kind for e in entries)
    typer.echo(", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no omni blocks")


@command()
def abort() -> None:
    """Put every file and ref back as it was before the refresh (or merge)."""
    from patch_queue.commands import pending

    operation = "refresh"
    with locked("abort") as ws:
        interrupted = pending.recover_interrupted(ws, forward=False)
        if interrupted is None:
            operation = pending.do_abort(ws)
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
    from patch_queue.project.operation import OperationKind

    ws = workspace()
    st = resolve.do_status(ws, upstream_git=upstream)
    if as_json:
        import json

        typer.echo(json.dumps(st.as_json(), indent=2))
        return st.exit_code
    typer.echo(f"upstream: {st.upstream}")
    if st.warning:  # said, not refused: status reports
        typer.echo(f"warning: {st.warning}")
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
        print_conflict(ws, c, st.suggestions.get((c.file, c.line or 0)), st.moved.get((c.file, c.line or 0), ""))
    if st.resolved:
        typer.echo(f"{len(st.resolved)} of {len(st.resolved) + len(st.conflicts)} conflict region(s) resolved on disk")
    if st.in_progress:
        print_flags(ws, st.flags, "all" if verbose else flags)
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
    return st.exit_code
