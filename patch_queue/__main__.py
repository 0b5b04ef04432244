"""``python -m patch_queue`` and the ``pq`` command: the command line, then an exit without the
interpreter's teardown.

Freeing every object and libgit2's caches at exit took ~40 ms of each command (a tenth of a refresh),
and nothing is left to do then: the commands write their files and refs before they return and
flush their output.  So, as mypy does, the process ends with ``os._exit`` once stdout and stderr
are flushed (a failing flush, or an exit that is not a plain code, takes Python's own way out).
"""

from __future__ import annotations

import os
import sys

from patch_queue.cli import main as command_line


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
