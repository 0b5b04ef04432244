"""The Typer app of ``pq``: the options several commands share, and how a command's end maps to an exit code.

Exit codes: 0 ok, 1 user error, 3 conflicts left to resolve, 4 bug (traceback in .git/pq/crash.log).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, ParamSpec

import typer

from patch_queue.errors import EXIT_BUG, EXIT_ERROR, PqError, redact
from patch_queue.fsutil import is_stdout, kill_point

if TYPE_CHECKING:  # the commands are imported when they run: `pq --help` stays fast
    from patch_queue.project.workspace import Workspace

P = ParamSpec("P")

EXIT_CODES = (
    "Exit codes: 0 done; 1 error (one line naming the file and line); 2 usage error; 3 conflicts or a pending"
    " operation to resolve (see `pq status`); 4 a bug in pq (traceback in .git/pq/crash.log); 130 interrupted;"
    " 141 the reader of stdout went away."
)
app = typer.Typer(
    add_completion=True,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Keep a downstream's copies of an upstream class's methods (vllm-omni's NPU runners of vllm-ascend's,"
    " say) as a patch series and replay it onto new upstream releases."
    " `pq -C DIR COMMAND ...` works on the queue in the folder DIR (its own patches/queue.toml and output), as"
    " `git -C DIR`.",
    epilog=EXIT_CODES,
)


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        typer.echo(f"pq {version('patch-queue')}")
        raise typer.Exit(0)


@app.callback()
def _options(
    _shown: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print pq's version and exit"),
    ] = False,
) -> None:
    """Keep a downstream's copies of an upstream class's methods (vllm-omni's NPU runners of vllm-ascend's, say)
    as a patch series and replay it onto new upstream releases."""


UpstreamOpt = Annotated[
    str | None,
    typer.Option("--upstream", help="upstream git repository (URL, path or bundle); default $PQ_UPSTREAM_GIT"),
]
DiscardOpt = Annotated[
    bool, typer.Option("--discard", help="drop the edits in the output folder that no patch holds (they are lost)")
]
AllOpt = Annotated[bool, typer.Option("--all", "-a")]
NoSourcesOpt = Annotated[
    bool, typer.Option("--no-sources", help="skip the checks that need upstream source trees (imports, GPU audit)")
]
ImportOpt = Annotated[
    bool,
    typer.Option(
        "--import",
        help="also import each built module in a fresh interpreter against the real releases, only the "
        "accelerator's native modules stubbed (its environment is built once, in pq's cache)",
    ),
]
ImportAutoOpt = Annotated[
    bool | None,
    typer.Option(
        "--import/--no-import",
        help="run pq check --import on the result (default: when its environment is built)",
    ),
]
ReportOpt = Annotated[Path | None, typer.Option("--report", help="write the JSON report here (- for stdout)")]
MarkdownOpt = Annotated[
    Path | None, typer.Option("--markdown", help="write the report as a pull-request body here (- for stdout)")
]
AnnotationsOpt = Annotated[
    bool, typer.Option("--annotations", help="print GitHub workflow-command annotations for conflicts and flags")
]
FlagsOpt = Annotated[
    str | None, typer.Option("--flags", help="list the review flags of these kinds (KIND,…; `all`: every flag)")
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="list every review flag")]
AcceptErrorsOpt = Annotated[
    bool,
    typer.Option(
        "--accept-errors",
        help="finish over the errors `pq check` finds in the result (recorded in the lineage step and the report)",
    ),
]


def complete_patch(incomplete: str) -> list[str]:
    """The patches of the series in ``patches/series`` of the cwd's project (or a folder above it) whose name
    starts with ``incomplete``: each by its name without number (``foo``) and its file name without ``.patch``
    (``0005-foo``).  Reads one small file; [] for anything amiss (shell completion must never fail)."""
    try:
        from patch_queue.series.queue import parse_series

        here = Path.cwd()
        series = next(d / "patches" / "series" for d in (here, *here.parents) if (d / "patches" / "series").is_file())
        out: list[str] = []
        for name in parse_series(series.read_text(encoding="utf-8", errors="replace")):
            stem = name.removesuffix(".patch")
            for shown in (re.sub(r"^\d+-", "", stem), stem):
                if shown.startswith(incomplete) and shown not in out:
                    out.append(shown)
        return out
    except Exception:  # no series here, an unreadable one: nothing to offer
        return []


_PATCH_HELP = "patch: its file name, with or without .patch, or without its number"
PatchArg = Annotated[str, typer.Argument(help=_PATCH_HELP, autocompletion=complete_patch)]
OptPatchArg = Annotated[str | None, typer.Argument(help=_PATCH_HELP, autocompletion=complete_patch)]
PatchesArg = Annotated[list[str], typer.Argument(help="patches (" + _PATCH_HELP + ")", autocompletion=complete_patch)]
OptPatchesArg = Annotated[
    list[str] | None, typer.Argument(help="patches (" + _PATCH_HELP + ")", autocompletion=complete_patch)
]


def err(message: str) -> None:
    """One line on stderr, whatever ``message`` holds: a control character (a newline in a value a user gave) is
    written escaped, as is a byte of a name that is not UTF-8."""
    one = re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", redact(message))
    typer.echo(f"pq: {one.encode('utf-8', 'backslashreplace').decode('utf-8')}", err=True)


def say(message: str) -> None:
    typer.echo(redact(message), err=True)


def echo(*lines: str) -> None:
    """Print each non-empty line on stdout (a command's result; an empty one, such as no dropped edits, is not)."""
    for line in lines:
        if line:
            typer.echo(line)


def command(
    name: str | None = None, *, group: typer.Typer | None = None
) -> Callable[[Callable[P, int | None]], Callable[P, None]]:
    """Register a command (of ``group``, a verb family, when given): its body returns the exit code; a PqError
    exits with its one-line message, anything else with exit 4 (a bug)."""

    def register(body: Callable[P, int | None]) -> Callable[P, None]:
        @functools.wraps(body)
        def run(*args: P.args, **kwargs: P.kwargs) -> None:
            try:
                kill_point("command")
                if any(isinstance(v, Path) and is_stdout(v) for v in kwargs.values()):
                    # a report goes to stdout: the listing goes to stderr, so stdout holds the report alone
                    with contextlib.redirect_stdout(sys.stderr):
                        code = body(*args, **kwargs)
                else:
                    code = body(*args, **kwargs)
            except PqError as exc:
                err(f"error: {exc}")
                raise typer.Exit(exc.exit_code) from None
            except KeyboardInterrupt:
                err("interrupted; nothing was written past the last completed step (see `pq status`)")
                raise typer.Exit(130) from None
            except BrokenPipeError:  # the reader went away (`pq status | head`): not a bug
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise typer.Exit(141) from None
            except typer.Exit:
                raise
            except OSError as exc:
                vanished = _vanished_patch(exc)
                if vanished is not None:
                    err(f"error: {vanished}")
                    raise typer.Exit(EXIT_ERROR) from None
                if exc.errno not in _OUTPUT_ERRNOS:
                    _bug()
                if exc.filename:  # a file no journaled write covers (a cache file, the lock): name it
                    err(f"error: {os.fsdecode(exc.filename)}: cannot be written: {exc.strerror}")
                else:  # stdout on a full or failing device
                    err(f"error: cannot write the output: {exc.strerror}")
                raise typer.Exit(EXIT_ERROR) from None
            except Exception:  # a bug: keep the traceback for the report
                _bug()
            try:
                sys.stdout.flush()  # here, not at exit, so a full device is one line, not a traceback
            except OSError as exc:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                err(f"error: cannot write the output: {exc.strerror}")
                raise typer.Exit(EXIT_ERROR) from None
            raise typer.Exit(code or 0)

        (group or app).command(name=name)(run)
        return run

    return register


_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG)


def _vanished_patch(exc: OSError) -> str | None:
    """The line for a file of ``patches/`` that was removed while a command read the series (a ``pq delete`` that
    ran meanwhile: the reading commands take no lock), else None."""
    if not isinstance(exc, FileNotFoundError) or not exc.filename:
        return None
    try:
        from patch_queue.project.workspace import vanished

        ws = workspace()
        path = Path(os.fsdecode(exc.filename))
        if path.parent.resolve() != ws.queue_dir.root.resolve():
            return None
        return str(vanished(ws, path, exc))
    except Exception:  # no workspace to name it in: the traceback, as for any other error
        return None


def _bug() -> NoReturn:
    """Exit 4 with the traceback kept for the report."""
    err(f"internal error (a bug); traceback written to {_crash_log()}")
    raise typer.Exit(EXIT_BUG) from None


def _crash_log() -> str:
    """Where the traceback went, with the command line, pq's version and the time: ``.git/pq/crash.log``, else
    ``pq-crash.log`` here, else stderr (this never fails: it runs when something already did)."""
    try:
        from importlib.metadata import version

        stamp = f"pq {version('patch-queue')}"
    except Exception:
        stamp = "pq (version unknown)"
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = redact(f"{stamp} at {when}\ncommand: {shlex.join(sys.argv)}\n\n{traceback.format_exc()}")
    candidates: list[Callable[[], Path]] = [lambda: workspace().state_dir / "crash.log", lambda: Path("pq-crash.log")]
    for candidate in candidates:
        try:
            path = candidate().resolve()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return str(path)
        except Exception:  # the next place, then stderr
            continue
    try:
        sys.stderr.write(text)
    except Exception:  # nowhere left to say it
        pass
    return "stderr (above)"


def workspace() -> Workspace:
    from patch_queue.project.workspace import open_workspace

    return open_workspace()


@contextmanager
def locked(name: str, *, out_folder: bool = True) -> Iterator[Workspace]:
    """The workspace, with the repository's lock held for the command ``name``; with ``out_folder``, refused
    when the output folder is not a folder of the project (a file, a symbolic link)."""
    from patch_queue.outputs import folder
    from patch_queue.project import workspace as project

    ws = workspace()
    if out_folder:
        folder.refuse_unusable(ws)
    with project.locked(ws, name):
        yield ws
