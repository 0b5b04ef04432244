"""The ``pq`` command line: thin commands that parse options, call ``commands/`` and map exit codes.

``app.py`` holds the Typer app, the shared options and the exit-code handling; ``refresh.py`` the commands
of a refresh and what they print (adopt, build, refresh, sync-gpu, continue, resolve, mergetool, check,
blocks, abort, status); ``series.py`` the series verbs (series, new, record, goto, delete, rename, show,
diff, undo, redo, reproduce, accept, push, pop); ``resolutions.py`` the ``pq resolutions`` verbs (list, drop,
merge, log). Importing them registers their commands in that order,
the order of ``pq --help``.
"""

from __future__ import annotations

from patch_queue.cli import refresh, resolutions, series  # noqa: F401  (importing them registers their commands)
from patch_queue.cli.app import app


def main() -> None:
    app(prog_name="pq")
