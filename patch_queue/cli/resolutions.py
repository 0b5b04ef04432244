"""The ``pq resolutions`` verbs: list, drop, merge and log the store of recorded resolutions and edits."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from patch_queue import namespace
from patch_queue.cli.app import app, command, err, locked, workspace

group = typer.Typer(
    no_args_is_help=True,
    help="The recorded resolutions and edits (refs/pq/resolutions): list, drop, merge another clone's, history.",
)
app.add_typer(group, name="resolutions")


@command("list", group=group)
def list_entries(as_json: Annotated[bool, typer.Option("--json", help="one JSON object per entry")] = False) -> None:
    """One line per entry: kind (region, edit, blob, damaged), key, patch, and an edit's sha256s."""
    from patch_queue.commands import resolutions

    for e in resolutions.do_list(workspace()):
        if as_json:
            fields = {"kind": e.kind, "key": e.key, "path": e.path, "blob": e.blob}
            more = {"patch": e.patch, "before": e.before, "after": e.after, "damaged": e.damaged}
            typer.echo(json.dumps({**fields, **{k: v for k, v in more.items() if v}}, sort_keys=True))
        elif e.kind == "edit":
            typer.echo(f"edit    {e.key}  {e.patch}  {e.before} -> {e.after}")
        elif e.kind == "region":
            typer.echo(f"region  {e.key}  {e.patch}")
        elif e.kind == "blob":
            typer.echo(f"blob    {e.key}")
        else:
            typer.echo(f"damaged {e.key}  {e.path} ({e.blob}): {e.damaged}")


@command(group=group)
def drop(keys: Annotated[list[str], typer.Argument(help="entry keys, blob ids or paths")]) -> None:
    """Remove entries from the store (`pq undo` puts them back)."""
    from patch_queue.commands import resolutions

    with locked("resolutions drop") as ws:
        paths, old = resolutions.do_drop(ws, keys)
    for path in paths:
        typer.echo(f"dropped {path}")
    typer.echo(f"the store was {old} (`pq undo` puts it back)")


@command(group=group)
def merge(
    source: Annotated[str, typer.Argument(help="a remote (its refs/pq/resolutions is fetched), a ref or a commit")],
    theirs: Annotated[bool, typer.Option("--theirs", help="where both hold an entry differently, take theirs")] = False,
) -> None:
    """Merge another store into refs/pq/resolutions: the union of both (a fast-forward where theirs holds it)."""
    from patch_queue.commands import resolutions

    with locked("resolutions merge") as ws:
        res = resolutions.do_merge(ws, source, theirs_wins=theirs)
    from patch_queue.series.rerere import REF as store

    kept = "took theirs" if theirs else "kept the local one (--theirs takes theirs)"
    for path, ours, their in res.clashes:
        err(f"warning: {store}:{path}: both stores hold it, differently (local {ours}, theirs {their}); {kept}")
    if res.how == "none":
        typer.echo(f"{source} has no {store}: nothing to merge")
    elif res.how == "up to date":
        typer.echo(f"{store} already holds {res.source} ({res.theirs}): nothing to merge")
    elif res.how == "fast-forward":
        was = f"was {res.old}" if res.old else "this clone had no store"
        typer.echo(f"{store}: fast-forward to {res.source} ({res.new}; {was})")
    elif res.how == "theirs":
        typer.echo(f"{store}: took {len(res.clashes)} entries of {res.source} ({res.theirs}): {res.new}")
    else:
        clashes = f", {len(res.clashes)} clash(es)" if res.clashes else ""
        typer.echo(f"{store}: merged {res.source} ({res.theirs}) into {res.old}: {res.new}{clashes}")


@command(group=group)
def log() -> None:
    """Every value refs/pq/resolutions held, newest first, and whether the store holds it now."""
    from patch_queue.commands import resolutions

    held = resolutions.do_log(workspace())
    if not held:
        typer.echo(f"no history of {namespace.refs()}resolutions yet (pq starts it the first time it reads the store)")
    for h in held:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(h.held.time)) if h.held.time else "-"
        hint = f" (`pq resolutions merge {h.held.commit[:12]}` merges it in)" if h.state == "not in the store" else ""
        typer.echo(f"{h.held.commit}  {when}  {h.held.why}: {h.state}{hint}")
