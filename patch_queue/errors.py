"""One error base and the exit-code table.

Exit codes: 0 ok, 1 user error (bad input, nothing changed), 3 conflicts left to resolve,
4 bug (traceback written to a log file).  Every message is one line that names the file (and
line where there is one) and, where it helps, the command to run next.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFLICT = 3
EXIT_BUG = 4


class PqError(Exception):
    """An expected failure: bad input, missing data, unreachable source.  One line, exit 1."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.message = message  # without the "file:line: " prefix
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


class SourceError(PqError):
    """An upstream or downstream source cannot be read, resolved, downloaded or verified."""


class PatchError(PqError):
    """A patch file is malformed or does not apply."""


class QueueError(PqError):
    """queue.toml or series is malformed, or the queue is in the wrong state for the command."""
