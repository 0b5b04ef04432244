"""Telling the user what a long step is doing: one ``say`` for messages, one ``bar`` for how far it has got.

Commands hand a ``progress`` callable down to the code that downloads, clones and searches; ``say``
sends a message through it, or to stderr when there is none.  A bar shows how far a download or a
clone has got, and only when stderr is a terminal: piped or captured (tests, CI, logs), stderr
carries the messages and nothing else.  rich draws the bar; it is imported only when one is shown.

With ``PQ_TIMINGS`` naming a file, :func:`timed` appends how long the phases of a command took
(``scripts/main.sh`` names it, and ``bench/bench.py`` reads its breakdown from it).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from patch_queue.errors import redact

Progress = Callable[[str], None]


def say(progress: Progress | None, message: str) -> None:
    """Send ``message`` through ``progress``, or to stderr when there is none (no URL's credentials in it)."""
    message = redact(message)
    if progress is not None:
        progress(message)
    else:
        print(message, file=sys.stderr, flush=True)


class Bar:
    """How far one long step has got.  Without ``update`` it shows nothing: stderr is not a terminal."""

    def __init__(self, update: Callable[[float, float | None, str | None], None] | None = None) -> None:
        self._update = update
        self.shown = update is not None

    def update(self, done: float, total: float | None = None, *, what: str | None = None) -> None:
        """``done`` of ``total`` units (None: not known yet); ``what`` renames the step (a clone's phase)."""
        if self._update is not None:
            self._update(done, total, what)


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


@contextmanager
def bar(what: str, *, unit: str = "") -> Iterator[Bar]:
    """A progress bar on stderr for the ``with`` block, removed when it ends; silent unless stderr is a
    terminal.  ``unit="bytes"`` shows sizes and speed (downloads), else counts (a clone's objects,
    patches of a replay)."""
    if not _terminal():
        yield Bar()
        return
    from rich import progress as rich
    from rich.console import Console

    columns: list[rich.ProgressColumn] = [rich.TextColumn("{task.description}"), rich.BarColumn()]
    if unit == "bytes":
        columns += [rich.DownloadColumn(binary_units=True), rich.TransferSpeedColumn()]
    else:
        columns += [rich.MofNCompleteColumn()]
    columns.append(rich.TimeRemainingColumn())
    with rich.Progress(*columns, console=Console(stderr=True), transient=True) as shown:
        task = shown.add_task(what, total=None)

        def update(done: float, total: float | None, renamed: str | None) -> None:
            if renamed is not None:
                shown.update(task, completed=done, total=total, description=renamed)
            else:
                shown.update(task, completed=done, total=total)

        yield Bar(update)


_open_phases: list[list[float]] = []  # the seconds spent in the phases nested in each open one


@contextmanager
def timed(phase: str) -> Iterator[None]:
    """With ``PQ_TIMINGS`` set, append ``within PHASE SECONDS`` to that file when the block ends: the
    time spent in it less that of the phases timed inside it, so the lines of a command add up."""
    path = os.environ.get("PQ_TIMINGS")
    if not path:
        yield
        return
    started = time.perf_counter()
    _open_phases.append([0.0])
    try:
        yield
    finally:
        nested = _open_phases.pop()[0]
        took = time.perf_counter() - started
        if _open_phases:
            _open_phases[-1][0] += took
        with suppress(OSError), open(path, "a", encoding="utf-8") as out:
            out.write(f"within {phase} {took - nested:.3f}\n")
