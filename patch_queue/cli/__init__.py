"""The ``pq`` command line: thin commands that parse options, call ``commands/`` and map exit codes.

``app.py`` holds the Typer app, the shared options and the exit-code handling; ``refresh.py`` the commands
of a refresh (adopt, build, refresh, sync-gpu, continue, resolve, mergetool, check, blocks, abort, status);
``show.py`` what they print of an operation, of `pq check` and of `pq sync-gpu`; ``series.py`` the series
verbs (series, new, record, goto, delete, rename, show, diff, undo, redo, reproduce, accept, push, pop);
``resolutions.py`` the ``pq resolutions`` verbs (list, drop, merge, log). Importing them registers their
commands in that order, the order of ``pq --help``.
"""

from __future__ import annotations

import copy
import os
import sys

import typer
from typer.main import get_command_name

from patch_queue.cli import refresh, resolutions, series  # noqa: F401  (importing them registers their commands)
from patch_queue.cli.app import app


def main() -> None:
    sys.argv[1:] = queue_folder(sys.argv[1:])
    only(sys.argv[1:2])(prog_name="pq")


def queue_folder(args: list[str]) -> list[str]:
    """Settle the queue this process works on (:mod:`patch_queue.namespace`) before anything that names a
    ref is imported, and return the command line without its leading ``-C DIR`` options: ``pq -C DIR ...`` runs as
    if started in ``DIR`` (as ``git -C``; each one relative to the one before, an empty one naming the folder it is
    in), and names ``DIR`` the queue's folder (:func:`namespace.choose`)."""
    from pathlib import Path

    from patch_queue import namespace

    given = False
    while args and args[0] == "-C":
        if len(args) < 2:
            print("pq: error: -C needs a folder: pq -C DIR COMMAND ...", file=sys.stderr)
            raise SystemExit(2)
        if args[1]:
            try:
                os.chdir(args[1])
            except OSError as exc:
                print(f"pq: error: {args[1]}: cannot change into it ({exc.strerror or exc})", file=sys.stderr)
                raise SystemExit(2) from None
        given, args = True, args[2:]
    try:
        here = Path.cwd()
    except OSError:  # a working directory removed under the shell: the workspace says so, in its words
        return args
    os.environ[namespace.ENV] = namespace.choose(here, given)
    return args


def only(first: list[str]) -> typer.Typer:
    """The app with just the command (or verb family) that ``first``, the first word of the command line, names:
    Typer makes a click command of every registered one, reading each signature and its type hints, before it
    parses a word, and a run needs one.  The whole app when ``first`` names none (no word, an option such as
    ``--help``, a typo: the help and the suggestions list them all)."""
    word = first[0] if first else ""
    commands = [
        c for c in app.registered_commands if word == (c.name or get_command_name(getattr(c.callback, "__name__", "")))
    ]
    groups = [g for g in app.registered_groups if word == g.name]
    if not commands and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = commands, groups
    return one
