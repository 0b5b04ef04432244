"""How pq runs the git command line: a plain process for a command's output (:func:`run`), GitPython's
``Git`` for a clone that reports progress and for a request-and-answer stream, imported on first use.

pq reads and writes objects with pygit2 (``repo.py``, ``remote.py``); the git binary does what
only it does: clone and fetch every transport and the bundle format, and git's own file formats,
and ``cat-file --batch``, whose delta-base cache reads a run of revisions faster than libgit2.
GitPython costs ~60 ms to import, so only a clone or a stream imports it.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from patch_queue.errors import PqError

# Never let git stop to ask for credentials: pq may run in CI with no terminal.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}

# What a clone reports as it goes: (phase, done, total or None), e.g. ("Receiving objects", 5120, 81234).
CloneProgress = Callable[[str, float, float | None], None]


class GitFailed(PqError):
    """A git command failed; ``reason`` is git's own one-line reason."""

    def __init__(self, command: str, reason: str) -> None:
        self.reason = reason
        super().__init__(f"git {command} failed: {reason}")


def gitpython() -> Any:
    import git

    return git


def reason(exc: BaseException) -> str:
    """The one line of git's stderr that explains a failure ("fatal: ..."), without the prefix."""
    text = exc.stderr if isinstance(exc, gitpython().GitCommandError) else str(exc)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return _reason_of(str(text).splitlines(), type(exc).__name__)


def _reason_of(lines: list[str], fallback: str) -> str:
    # GitPython wraps git's stderr as "  stderr: '<text>'"; unwrap it to git's own words.
    lines = [line.strip().removeprefix("stderr:").strip().strip("'\"").strip() for line in lines]
    lines = [line for line in lines if line]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line.partition(":")[2].strip()
    return lines[0] if lines else fallback


def _execute(cwd: Path | str, args: tuple[str, ...], **options: Any) -> Any:
    """GitPython's ``execute`` of ``git args...`` in ``cwd``; :class:`GitFailed` with git's reason on failure."""
    git = gitpython()
    try:
        return git.Git(str(cwd)).execute(["git", *args], **options)
    except (git.GitCommandError, OSError) as exc:
        raise GitFailed(args[0] if args else "", reason(exc)) from None


# What GitPython sets for every git it runs, kept for ``run``: git's messages and dates in one language.
_C_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}


def run(cwd: Path | str, *args: str, env: dict[str, str] | None = None) -> bytes:
    """stdout of ``git args...`` in ``cwd`` (the C locale, no stdin); :class:`GitFailed` with git's reason when
    it exits non-zero.  A plain process: a command that runs git only this way never imports GitPython."""
    full = {**os.environ, **_C_LOCALE, **GIT_ENV, **(env or {})}
    command = args[0] if args else ""
    try:
        proc = subprocess.run(
            ["git", *args], cwd=str(cwd), env=full, stdin=subprocess.DEVNULL, capture_output=True, check=False
        )
    except OSError as exc:
        raise GitFailed(command, _reason_of(str(exc).splitlines(), type(exc).__name__)) from None
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").splitlines()
        raise GitFailed(command, _reason_of(lines, f"exit status {proc.returncode}"))
    return proc.stdout


def run_fed(cwd: Path | str, *args: str, input: bytes, env: dict[str, str] | None = None) -> bytes:
    """:func:`run` with ``input`` on git's stdin (``update-index --index-info``)."""
    full = {**os.environ, **GIT_ENV, **(env or {})}
    proc = subprocess.run(["git", *args], cwd=str(cwd), env=full, input=input, capture_output=True, check=False)
    if proc.returncode != 0:
        raise GitFailed(args[0] if args else "", _reason_of(proc.stderr.decode("utf-8", "replace").splitlines(), ""))
    return proc.stdout


def run_interactive(cwd: Path | str, *args: str, env: dict[str, str] | None = None) -> int:
    """``git args...`` in ``cwd`` on the user's terminal (stdin, stdout and stderr are pq's): a tool the user
    drives, such as ``git mergetool``; its exit code."""
    return subprocess.run(["git", *args], cwd=str(cwd), env={**os.environ, **(env or {})}, check=False).returncode


def clone_mirror(
    location: str, dest: Path, *, progress: CloneProgress | None = None, env: dict[str, str] | None = None
) -> None:
    """``git clone --mirror location dest``; with ``progress``, git reports its phases as it goes; ``env``: more
    of git's environment (a credential, see :func:`patch_queue.git.remote.transport`)."""
    git = gitpython()
    handler = None
    if progress is not None:
        ops = git.RemoteProgress
        phases = {
            ops.COUNTING: "Counting objects",
            ops.COMPRESSING: "Compressing objects",
            ops.RECEIVING: "Receiving objects",
            ops.RESOLVING: "Resolving deltas",
            ops.CHECKING_OUT: "Checking out files",
        }

        def update(
            op_code: int, done: str | float | None, total: str | float | None = None, _message: str = ""
        ) -> None:
            phase = phases.get(op_code & ops.OP_MASK)
            if phase is not None:  # GitPython gives "" for a total git did not print
                progress(phase, float(done or 0), float(total) if total else None)

        from git.util import CallableRemoteProgress

        handler = CallableRemoteProgress(update)
    try:
        git.Repo.clone_from(location, str(dest), mirror=True, env={**GIT_ENV, **(env or {})}, progress=handler)
    except git.GitCommandError as exc:
        # with a progress handler git's stderr went to the handler, which keeps the lines that are no progress
        lines = [*handler.error_lines, *handler.other_lines] if handler is not None and not exc.stderr else []
        raise GitFailed("clone", _reason_of(lines, reason(exc)) if lines else reason(exc)) from None


@contextmanager
def stream(cwd: Path | str, *args: str, input: bytes) -> Iterator[IO[bytes]]:
    """``git args...`` in ``cwd``, fed ``input`` while the caller reads its stdout as it comes (a request and
    answer protocol such as ``cat-file --batch``); git is ended when the block is left, read to the end
    or not.  GitPython starts the process (``as_process``); the streams are the caller's."""
    # keep GitPython's handle while git runs: collecting it ends git
    running = _execute(cwd, args, as_process=True, istream=subprocess.PIPE, env=GIT_ENV)
    proc: subprocess.Popen[bytes] = running.proc
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def feed() -> None:  # on a thread: git answers while it reads, so a long input would fill both pipes
        try:
            stdin.write(input)
            stdin.close()
        except (OSError, ValueError):
            pass  # git stopped early: its output says why

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        yield stdout
    finally:
        stdout.close()
        proc.kill()
        proc.wait()
        writer.join()
