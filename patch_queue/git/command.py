"""The one way pq runs the git command line: GitPython's ``Git``, imported on first use.

pq reads and writes objects with pygit2 (``repo.py``, ``remote.py``); the git binary does what
only it does: clone and fetch every transport and the bundle format, and git's own file formats.
GitPython costs ~60 ms to import, so nothing imports it until a git command runs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import IO, Any

from patch_queue.errors import PqError

# Never let git stop to ask for credentials: pq may run in CI with no terminal.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}


class GitFailed(PqError):
    """A git command failed; the message is git's own one-line reason."""


def gitpython() -> Any:
    import git

    return git


def reason(exc: BaseException) -> str:
    """The one line of git's stderr that explains a failure ("fatal: ..."), without the prefix."""
    text = exc.stderr if isinstance(exc, gitpython().GitCommandError) else str(exc)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    # GitPython wraps git's stderr as "  stderr: '<text>'"; unwrap it to git's own words.
    lines = [line.strip().removeprefix("stderr:").strip().strip("'\"").strip() for line in str(text).splitlines()]
    lines = [line for line in lines if line]
    for line in lines:
        for prefix in ("fatal:", "error:"):
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
    return lines[0] if lines else type(exc).__name__


def run(cwd: Path | str, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    """stdout of ``git args...`` in ``cwd``; :class:`GitFailed` with git's reason when it exits non-zero."""
    git = gitpython()
    try:
        out = git.Git(str(cwd)).execute(
            ["git", *args],
            istream=None if input is None else _stdin(input),
            env={**GIT_ENV, **(env or {})},
            stdout_as_string=False,
            strip_newline_in_stdout=False,
        )
    except (git.GitCommandError, OSError) as exc:
        raise GitFailed(f"git {args[0] if args else ''} failed: {reason(exc)}") from None
    return bytes(out)


def _stdin(data: bytes) -> IO[bytes]:
    """stdin for :func:`run`: GitPython hands ``istream`` to Popen, which needs a real file."""
    f = tempfile.TemporaryFile()
    f.write(data)
    f.seek(0)
    return f
