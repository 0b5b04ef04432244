"""``python -m patch_queue`` and the ``pq`` command: the command line, then an exit without the
interpreter's teardown.

Freeing every object and libgit2's caches at exit took ~40 ms of each command (a tenth of a refresh),
and nothing is left to do then: the commands write their files and refs before they return and
flush their output.  So, as mypy does, the process ends with ``os._exit`` once stdout and stderr
are flushed (a failing flush, or an exit that is not a plain code, takes Python's own way out).

For the same reason the cyclic garbage collector runs every 100,000 allocations instead of every 700: a
command's imports (Typer, libgit2's bindings, pq's modules) make some 20,000 objects that live until it exits,
and the 50-odd collections among them as they were made took ~20-30 ms of every command's start, finding
nothing to free.
"""

from __future__ import annotations

import gc
import os
import sys

gc.set_threshold(100_000)  # before the imports below: see the module's docstring

from patch_queue.cli import main as command_line  # noqa: E402  (after the collector's threshold)


def main() -> None:
    try:
        command_line()
    except SystemExit as done:
        code = done.code
        if code is None or isinstance(code, int):
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except OSError:
                raise done from None
            os._exit(code or 0)
        raise


if __name__ == "__main__":
    main()
