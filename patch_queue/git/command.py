"""How pq runs the git command line: a plain process for a command's output (:func:`run`), one whose output is
read as it comes (:func:`stream`), and a clone that reports progress (GitPython's parser of git's progress lines,
imported on a clone only).

pq reads and writes objects with pygit2 (``repo.py``, ``remote.py``); the git binary does what
only it does: clone and fetch every transport and the bundle format, and git's own file formats,
and ``cat-file --batch``, whose delta-base cache reads a run of revisions faster than libgit2.

Every git pq starts gets the environment of :func:`environment`: the user's, without the variables that name
or shape one repository (``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE``, ``GIT_OBJECT_DIRECTORY``, ...: git's
own list, :data:`LOCAL_ENV`, and ``GIT_NAMESPACE``), as git itself clears them before it works in another
repository.  A hook exports ``GIT_DIR`` and ``GIT_INDEX_FILE`` to what it runs; a user may set them for the
project's repository: they must not reach the upstream mirror in the cache or a scratch repository.  A git run
on the project's repository gets them back from its caller (:attr:`patch_queue.git.repo.ProjectRepo.env`).
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from patch_queue.errors import PqError

# Never let git stop to ask for credentials: pq may run in CI with no terminal.
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}

# What `git rev-parse --local-env-vars` prints: the variables git clears before it runs in another repository
# (a submodule), but for the configuration given on the command line, which it keeps (GIT_CONFIG_PARAMETERS,
# GIT_CONFIG_COUNT and its GIT_CONFIG_KEY_n/VALUE_n: a proxy or a credential header for the network).
LOCAL_ENV = (
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_OBJECT_DIRECTORY",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_COMMON_DIR",
    # not in git's list, but of the user's repository all the same: a fetch from a local upstream would ask its
    # upload-pack for that namespace's refs alone (and a mirror fetched so would prune every ref it has); a receive
    # hook's quarantine, where git refuses every ref update
    "GIT_NAMESPACE",
    "GIT_QUARANTINE_PATH",
)

# What a clone reports as it goes: (phase, done, total or None), e.g. ("Receiving objects", 5120, 81234).
CloneProgress = Callable[[str, float, float | None], None]


class GitFailed(PqError):
    """A git command failed; ``reason`` is git's own one-line reason."""

    def __init__(self, command: str, reason: str) -> None:
        self.reason = reason
        super().__init__(f"git {command} failed: {reason}")


def _reason_of(lines: list[str], fallback: str) -> str:
    """The one line of git's stderr that explains a failure ("fatal: ..."), without the prefix."""
    lines = [line.strip() for line in lines]
    lines = [line for line in lines if line]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return line.partition(":")[2].strip()
    return lines[0] if lines else fallback


def _failed(command: str, stderr: bytes | str, code: int) -> GitFailed:
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    return GitFailed(command, _reason_of(text.splitlines(), f"exit status {code}"))


def user_env() -> dict[str, str]:
    """The user's own values of :data:`LOCAL_ENV`: what names and shapes the project's repository for git."""
    return {key: os.environ[key] for key in LOCAL_ENV if key in os.environ}


# git's messages and dates in one language (what GitPython sets for every git it runs)
_C_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}


def environment(env: dict[str, str] | None = None, *, locale: bool = True) -> dict[str, str]:
    """The environment of a git pq starts: the user's without :data:`LOCAL_ENV` (see the module's docstring),
    git's messages in the C locale (``locale``), no prompt, then ``env``."""
    kept = {key: value for key, value in os.environ.items() if key not in LOCAL_ENV}
    return {**kept, **(_C_LOCALE if locale else {}), **GIT_ENV, **(env or {})}


def run(cwd: Path | str, *args: str, env: dict[str, str] | None = None) -> bytes:
    """stdout of ``git args...`` in ``cwd`` (:func:`environment`, no stdin); :class:`GitFailed` with git's reason
    when it exits non-zero."""
    command = args[0] if args else ""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=str(cwd),
            env=environment(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    except OSError as exc:
        raise GitFailed(command, _reason_of(str(exc).splitlines(), type(exc).__name__)) from None
    if proc.returncode != 0:
        raise _failed(command, proc.stderr, proc.returncode)
    return proc.stdout


def run_fed(cwd: Path | str, *args: str, input: bytes, env: dict[str, str] | None = None) -> bytes:
    """:func:`run` with ``input`` on git's stdin (``update-index --index-info``)."""
    proc = subprocess.run(["git", *args], cwd=str(cwd), env=environment(env), input=input, capture_output=True)
    if proc.returncode != 0:
        raise _failed(args[0] if args else "", proc.stderr, proc.returncode)
    return proc.stdout


def run_interactive(cwd: Path | str, *args: str, env: dict[str, str] | None = None) -> int:
    """``git args...`` in ``cwd`` on the user's terminal (stdin, stdout and stderr are pq's; the user's locale): a
    tool the user drives, such as ``git mergetool``; its exit code."""
    return subprocess.run(["git", *args], cwd=str(cwd), env=environment(env, locale=False), check=False).returncode


def clone_mirror(
    location: str, dest: Path, *, progress: CloneProgress | None = None, env: dict[str, str] | None = None
) -> None:
    """``git clone --mirror location dest``; with ``progress``, git reports its phases as it goes (parsed by
    GitPython's ``RemoteProgress``); ``env``: more of git's environment (a credential, see
    :func:`patch_queue.git.remote.transport`)."""
    args = ["git", "clone", "--mirror", "-v", *(["--progress"] if progress is not None else []), "--"]
    with subprocess.Popen(
        [*args, location, str(dest)],
        env=environment(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,  # universal newlines: each "\r"-ended progress update is a line of its own
        errors="replace",
    ) as proc:
        assert proc.stderr is not None
        if progress is None:
            lines = proc.stderr.read().splitlines()
        else:
            lines = _follow(proc.stderr, progress)
    if proc.returncode != 0:
        raise GitFailed("clone", _reason_of(lines, f"exit status {proc.returncode}"))


def _follow(stderr: IO[str], progress: CloneProgress) -> list[str]:
    """Each progress line of a clone's stderr reported to ``progress``; the lines that are no progress."""
    import git

    ops = git.RemoteProgress
    phases = {
        ops.COUNTING: "Counting objects",
        ops.COMPRESSING: "Compressing objects",
        ops.RECEIVING: "Receiving objects",
        ops.RESOLVING: "Resolving deltas",
        ops.CHECKING_OUT: "Checking out files",
    }

    def update(op_code: int, done: str | float | None, total: str | float | None = None, _message: str = "") -> None:
        phase = phases.get(op_code & ops.OP_MASK)
        if phase is not None:  # GitPython gives "" for a total git did not print
            progress(phase, float(done or 0), float(total) if total else None)

    from git.util import CallableRemoteProgress

    handler = CallableRemoteProgress(update)
    parse = handler.new_message_handler()
    for line in stderr:
        parse(line)
    return [*handler.error_lines, *handler.other_lines]


@contextmanager
def stream(cwd: Path | str, *args: str, input: bytes) -> Iterator[IO[bytes]]:
    """``git args...`` in ``cwd``, fed ``input`` while the caller reads its stdout as it comes (a request and
    answer protocol such as ``cat-file --batch``); git is ended when the block is left, read to the end
    or not."""
    try:
        proc = subprocess.Popen(
            ["git", *args],
            cwd=str(cwd),
            env=environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError as exc:
        raise GitFailed(args[0] if args else "", _reason_of(str(exc).splitlines(), type(exc).__name__)) from None
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
