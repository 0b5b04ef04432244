"""The series verbs: series, new, record, goto, delete, rename, edit, squash, float, sink, import, show, diff, undo,
redo, reproduce, accept, push, pop."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from patch_queue import namespace
from patch_queue.cli.app import (
    AllOpt,
    DiscardOpt,
    OptPatchArg,
    OptPatchesArg,
    PatchArg,
    PatchesArg,
    UpstreamOpt,
    command,
    complete_patch,
    echo,
    err,
    locked,
    say,
    workspace,
)
from patch_queue.cli.show import print_placements
from patch_queue.errors import EXIT_ERROR, EXIT_OK, PqError


@command()
def series(
    upstream: UpstreamOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the series as JSON")] = False,
) -> None:
    """List the patches in order, as StGit does: > the top patch, + applied, - unapplied, ! in conflict."""
    import json

    from patch_queue.commands import edit
    from patch_queue.series.status import PatchStatus as S

    rows, merge = edit.do_series(workspace(), upstream_git=upstream)
    if as_json:
        typer.echo(json.dumps({"patches": rows, "merge": merge}, indent=2))
        return
    lines = []
    for r in rows:
        mark = ">" if r["top"] else "+" if r["applied"] else "!" if r["state"] == S.CONFLICT else "-"
        lines.append(f"{mark} {r['name']}  {r['subject']}")
    if merge is not None:
        mark = "!" if merge["conflicts"] else ">"
        lines.append(f"{mark} (merge of {merge['target']})  goes into the patches above at `pq continue`")
    echo(*lines)


@command()
def new(
    name: Annotated[str, typer.Argument(help="patch name")],
    message: Annotated[str | None, typer.Option("-m", "--message", help="the message (first line: subject)")] = None,
    take: Annotated[
        bool,
        typer.Option("--record", "-r", help="take the unrecorded edits of the output folder into it (as git commit)"),
    ] = False,
    upstream: UpstreamOpt = None,
) -> None:
    """Make a new, empty patch above the applied ones (as stg new; --record: of the edits in the output folder)."""
    from patch_queue.commands import edit

    with locked("new") as ws:
        filename, taken, left = edit.do_new(ws, name, message=message, upstream_git=upstream, take_edits=take)
    out = ws.rel(ws.out)
    if taken:
        typer.echo(f"created patches/{filename} of the edits of {taken} file(s) in {out}/")
    elif left:
        typer.echo(f"created patches/{filename} (empty); `pq record` puts the unrecorded edits of {out}/ into it")
    else:
        typer.echo(f"created patches/{filename} (empty); edit {out}/ then `pq record`")


@command()
def record(
    patch: Annotated[
        str | None,
        typer.Option("--patch", "-p", help="put every edit into this applied patch", autocompletion=complete_patch),
    ] = None,
    upstream: UpstreamOpt = None,
) -> None:
    """Put the edits of the output folder into the patches that own the lines they touch (all into an empty top
    patch, or into --patch)."""
    from patch_queue.commands import edit

    with locked("record") as ws:
        placements = edit.do_record(ws, upstream_git=upstream, into=patch)
    print_placements(ws, placements)
    if not placements:
        typer.echo("nothing to record")


@command()
def goto(name: PatchArg, upstream: UpstreamOpt = None, discard: DiscardOpt = False) -> None:
    """Push or pop patches until NAME is the top one."""
    from patch_queue.commands import edit

    with locked("goto") as ws:
        before, after, dropped = edit.do_goto(ws, name, upstream_git=upstream, discard=discard)
    echo(dropped, f"applied {after} of the series (was {before})")


@command()
def delete(
    name: OptPatchArg = None,
    top: Annotated[bool, typer.Option("--top", "-t", help="delete the top patch")] = False,
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
) -> int:
    """Delete a patch from the series; the patches above it must apply without it."""
    from patch_queue.commands import edit
    from patch_queue.sync import translation

    if (name is None) == (not top):
        err("error: name a patch, or pass --top (not both)")
        return EXIT_ERROR
    with locked("delete") as ws:
        gone, dropped, declined = edit.do_delete(ws, name, upstream_git=upstream, discard=discard)
    echo(dropped, f"deleted patches/{gone}")
    for d in declined:
        typer.echo(f"declined: {d.file} {d.method}: `{d.first}` (pq sync-gpu will not port it again)")
    if declined:
        typer.echo(f"  in {ws.rel(ws.queue_dir.root / translation.USER_RULES)}: remove an entry to port it again")
    return EXIT_OK


@command()
def rename(
    names: Annotated[
        list[str],
        typer.Argument(
            help="[OLD] NEW: the patch (default the top one) and its new name", autocompletion=complete_patch
        ),
    ],
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
) -> int:
    """Rename a patch (its file keeps its number, its body stays)."""
    from patch_queue.commands import edit

    if len(names) > 2:
        err(f"error: unexpected value {names[2]!r}: pq rename [OLD] NEW")
        return EXIT_ERROR
    old, new = (None, names[0]) if len(names) == 1 else (names[0], names[1])
    with locked("rename") as ws:
        before, after, dropped = edit.do_rename(ws, old, new, upstream_git=upstream, discard=discard)
    echo(dropped, f"renamed patches/{before} to patches/{after}")
    return EXIT_OK


MessageOpt = Annotated[str | None, typer.Option("-m", "--message", help="the message (first line: subject)")]
FileOpt = Annotated[Path | None, typer.Option("--file", "-f", help="read the message from this file (- for stdin)")]


def _message(message: str | None, file: Path | None) -> str | None:
    """The message of -m or --file (not both); None for neither."""
    if message is not None and file is not None:
        raise PqError("pass -m MESSAGE or --file FILE, not both")
    if file is None:
        return message
    if str(file) == "-":
        text = sys.stdin.read()
    else:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PqError(f"{file}: cannot be read as UTF-8 text ({getattr(exc, 'strerror', None) or exc})") from None
    if "\0" in text:  # git would cut the message there
        raise PqError(
            "a NUL byte in the message; a commit message is text",
            path=str(file),
            line=text.count("\n", 0, text.index("\0")) + 1,
        )
    return text


@command()
def edit(
    name: OptPatchArg = None, message: MessageOpt = None, file: FileOpt = None, upstream: UpstreamOpt = None
) -> int:
    """Give a patch (default the top one) another message (-m MESSAGE or --file FILE), as stg edit."""
    from patch_queue.commands import edit as edit_mod

    text = _message(message, file)
    if text is None:
        err("error: pass the new message: -m MESSAGE or --file FILE")
        return EXIT_ERROR
    with locked("edit") as ws:
        filename, changed = edit_mod.do_edit(ws, name, text, upstream_git=upstream)
    typer.echo(f"{'reworded' if changed else 'unchanged (the same message)'}: patches/{filename}")
    return EXIT_OK


@command()
def squash(
    names: PatchesArg,
    name: Annotated[str | None, typer.Option("--name", "-n", help="name of the squashed patch")] = None,
    message: MessageOpt = None,
    file: FileOpt = None,
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
) -> None:
    """Squash two or more patches into one, where the lowest of them stands (their changes in the order given)."""
    from patch_queue.commands import edit

    text = _message(message, file)
    with locked("squash") as ws:
        filename, gone, dropped = edit.do_squash(
            ws, names, name=name, message=text, upstream_git=upstream, discard=discard
        )
    echo(dropped, f"squashed {', '.join(gone)} into patches/{filename}")


@command(name="float")
def float_(names: PatchesArg, upstream: UpstreamOpt = None, discard: DiscardOpt = False) -> None:
    """Move patches (in the order given) to the top of the applied ones, applying them, as stg float."""
    _move_to(names, True, None, upstream, discard)


@command()
def sink(
    names: OptPatchesArg = None,
    to: Annotated[
        str | None, typer.Option("--to", "-t", help="sink below this applied patch", autocompletion=complete_patch)
    ] = None,
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
) -> None:
    """Move patches (default the top one) to the bottom of the series (or below --to), applied, as stg sink."""
    _move_to(names or [], False, to, upstream, discard)


def _move_to(names: list[str], top: bool, below: str | None, upstream: str | None, discard: bool) -> None:
    from patch_queue.commands import edit

    with locked("float" if top else "sink") as ws:
        moved, applied, dropped = edit.do_move(
            ws, names, to_top=top, below=below, upstream_git=upstream, discard=discard
        )
    where = "the top" if top else f"below {below}" if below else "the bottom"
    echo(dropped, f"moved {', '.join(moved)} to {where}; applied {applied} of the series")


@command(name="import")
def import_(
    file: Annotated[Path, typer.Argument(help="a patch file of git format-patch, or a git diff")],
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="the patch name (default: from the file name)")
    ] = None,
    message: MessageOpt = None,
    upstream: UpstreamOpt = None,
    discard: DiscardOpt = False,
) -> None:
    """Make an external patch file or git diff a new patch above the applied ones, as stg import."""
    from patch_queue.commands import edit

    with locked("import") as ws:
        filename, touched, dropped = edit.do_import(
            ws, file, name=name, message=message, upstream_git=upstream, discard=discard
        )
    echo(dropped, f"imported {file} as patches/{filename} ({', '.join(touched)})")


@command()
def show(name: OptPatchArg = None, upstream: UpstreamOpt = None) -> None:
    """Print a patch (default the top one) as it is in patches/."""
    from patch_queue.commands import edit

    body = edit.do_show(workspace(), name, upstream_git=upstream)
    sys.stdout.buffer.write(body)
    sys.stdout.flush()


@command()
def diff(upstream: UpstreamOpt = None) -> None:
    """Print the edits of the output folder that no patch holds, as a diff against the applied patches."""
    from patch_queue.commands import edit
    from patch_queue.outputs import folder

    ws = workspace()
    folder.refuse_unusable(ws)
    typer.echo(edit.do_diff(ws, upstream_git=upstream), nl=False)


def _undo(redo: bool, discard: bool) -> None:
    from patch_queue.commands import undo as undo_mod

    with locked("redo" if redo else "undo") as ws:
        undone, dropped, pending = undo_mod.do_undo(ws, redo=redo, discard=discard)
    echo(
        dropped,
        f"{'took back' if redo else 'undid'} `pq {undone}`: patches/, {ws.rel(ws.out)}/ and {namespace.refs()} are as "
        "before it",
    )
    if pending is not None:  # a merge `pq continue` finished: back to where continue found it
        typer.echo(
            f"the {pending} is pending again, as `pq continue` found it: `pq continue` finishes it, `pq abort` drops it"
        )


@command()
def undo(discard: DiscardOpt = False) -> None:
    """Put back the files and refs the last series-editing command wrote (pq keeps one command)."""
    _undo(False, discard)


@command()
def redo(discard: DiscardOpt = False) -> None:
    """Take back the last `pq undo`."""
    _undo(True, discard)


@command()
def reproduce(upstream: UpstreamOpt = None, discard: DiscardOpt = False) -> None:
    """Rebuild the patch bodies from the lineage in queue.toml (adopt, refreshes, recorded edits), hash-checked."""
    from patch_queue.commands import reproduce as reproduce_mod

    with locked("reproduce") as ws:
        res = reproduce_mod.do_reproduce(ws, upstream_git=upstream, discard=discard, progress=say)
    echo(res.discarded)
    if res.already:
        typer.echo(f"patches/ already holds the {res.patches} bodies the lineage records")
        return
    for where in res.merged:
        typer.echo(
            f"merged: the recorded edit of {where} onto this pq's merge, which differs from the one it was made on"
        )
    for line in res.differ:
        typer.echo(f"differs: {line}")
    merged = f", {len(res.merged)} of them merged onto another merge result" if res.merged else ""
    typer.echo(
        f"reproduced {res.patches} patches from {res.steps} lineage step(s) ({res.edited} recorded edit(s) applied"
        f"{merged}), "
        + (
            f"{len(res.differ)} body/bodies unlike the ones the lineage recorded, which queue.toml now records "
            "(commit it)"
            if res.differ
            else "every sha256 as queue.toml records"
        )
        + f"; runners in {ws.rel(ws.out)}/"
    )
    for i, verb, errors in res.accepted:  # the errors are still the series' to fix
        typer.echo(
            f"note: lineage step {i} (`pq {verb}`) was finished over {errors} "
            f"error(s) of pq check (--accept-errors); `pq check` lists them"
        )


@command()
def accept(upstream: UpstreamOpt = None, discard: DiscardOpt = False) -> None:
    """Take hand edits of patches/*.patch into the lineage (as a step that needs the bodies to reproduce)."""
    from patch_queue.commands import edit

    with locked("accept") as ws:
        changed = edit.do_accept(ws, upstream_git=upstream, discard=discard)
    typer.echo(f"accepted the series as it is in patches/ ({changed} body/bodies changed)")


def _move(push: bool, all_: bool, upstream: str | None, discard: bool, name: str | None) -> None:
    from patch_queue.commands import edit

    with locked("push" if push else "pop") as ws:
        before, after, dropped = edit.do_push_pop(
            ws, push=push, all_=all_, upstream_git=upstream, discard=discard, name=name
        )
    echo(dropped, f"applied {after} of the series (was {before})")


@command()
def push(
    name: OptPatchArg = None, all_: AllOpt = False, upstream: UpstreamOpt = None, discard: DiscardOpt = False
) -> None:
    """Apply the next patch (or all, or every one up to and including NAME)."""
    _move(True, all_, upstream, discard, name)


@command()
def pop(
    name: OptPatchArg = None, all_: AllOpt = False, upstream: UpstreamOpt = None, discard: DiscardOpt = False
) -> None:
    """Unapply the top patch (or all, or NAME and every one above it)."""
    _move(False, all_, upstream, discard, name)
