"""One error base and the exit-code table.

Exit codes: 0 ok, 1 user error (bad input, nothing changed), 3 conflicts left to resolve,
4 bug (traceback written to a log file).  Every message is one line that names the file (and
line where there is one) and, where it helps, the command to run next.  No message shows a
credential: a URL's user information is dropped from every line pq prints, as git drops it
(:func:`redact`).
"""

from __future__ import annotations

import re

# scheme://user[:password]@ : the user information of a URL, up to the last "@" before the path
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/\s'\"<>@]*(?:@[^/\s'\"<>@]*)*@")


def redact(text: str) -> str:
    """``text`` with the user information of every ``scheme://user:password@host`` URL in it dropped, as git
    prints a URL (``transport_anonymize_url``): ``https://host/path``."""
    return _USERINFO.sub(r"\1", text) if "@" in text else text


EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFLICT = 3
EXIT_BUG = 4


class PqError(Exception):
    """An expected failure: bad input, missing data, unreachable source.  One line, exit 1."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = redact(path) if path is not None else None
        self.line = line
        self.message = redact(message)  # without the "file:line: " prefix
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(where + self.message)


class SourceError(PqError):
    """An upstream or downstream source cannot be read, resolved, downloaded or verified."""


class PatchError(PqError):
    """A patch file is malformed or does not apply."""


class QueueError(PqError):
    """queue.toml or series is malformed, or the queue is in the wrong state for the command."""
