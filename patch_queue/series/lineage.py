"""The lineage in ``queue.toml``: where the series came from, every step since, and the hashes that lock it.

A step is recorded at every write of ``patches/`` (adopt, a finished refresh, record, new, accept);
the format and its rules are in :mod:`patch_queue.series.queue`.  The bodies in ``patches/`` must
match the last step (:func:`check_bodies`), so a hand edit is caught.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from patch_queue.errors import QueueError
from patch_queue.series.queue import BODIES, Queue, QueueDir, Step, UpstreamPin
from patch_queue.series.stack import sha256


def step_of(
    kind: str,
    command: str,
    bodies: Sequence[tuple[str, bytes]],
    *,
    upstream: UpstreamPin | None = None,
    downstream: str = "",
    edited: Sequence[str] = (),
    accepted: Sequence[str] = (),
    bases: Sequence[tuple[str, str]] = (),
    since: str = "",
    files: Sequence[tuple[str, str]] = (),
    resolved: str = "",
    placed: str = "",
) -> Step:
    """``accepted``: the errors of `pq check` a refresh finished over; ``bases``: (edited patch, sha256 of the body
    its recorded edit was made on); a merge's ``since``, ``files``, ``resolved`` and ``placed``: see :class:`Step`."""
    patches = tuple((n, sha256(b)) for n, b in bodies)
    names = tuple(n for n, _h in patches if n in edited)
    base = dict(bases)
    known = tuple((n, base[n]) for n in names if n in base)
    return Step(
        kind,
        command,
        patches,
        upstream,
        downstream,
        names,
        tuple(accepted),
        known,
        since,
        tuple(files),
        resolved,
        BODIES,  # the bodies are exported in pq's form
        placed,
    )


def with_step(
    queue: Queue, step: Step, top_modules: dict[str, bytes], *, previous: Sequence[tuple[str, bytes]] = ()
) -> Queue:
    """``queue`` with ``step`` appended (not when the bodies are those of the last step) and ``[build]`` set.

    A queue of format 1 or 2 has no lineage: it starts with an ``import`` step of ``previous``
    (the bodies it had at its pin), unless ``step`` is an adoption.
    """
    lineage = queue.lineage or (step_of("import", "migrate", previous, upstream=queue.upstream),)
    if step.kind == "adopt":
        lineage = (step,)
    elif lineage[-1].patches != step.patches or step.accepted_errors or step.kind == "merge":
        lineage += (step,)  # a step over accepted errors, or a merge (it moves the pin), is recorded all the same
    return replace(queue, lineage=lineage, build={path: sha256(data) for path, data in sorted(top_modules.items())})


def check_bodies(qdir: QueueDir, queue: Queue, names: list[str], bodies: Sequence[bytes]) -> None:
    """Refuse bodies that are not the ones the last lineage step records (one line naming the first)."""
    if not queue.lineage:
        return
    last = queue.lineage[-1]
    if names != last.names:
        extra = [n for n in names if n not in last.names]
        gone = [n for n in last.names if n not in names]
        what = (
            f"lists {extra[0]}, which" if extra else f"does not list {gone[0]}, which" if gone else "orders patches as"
        )
        raise QueueError(
            f"{what} the lineage in queue.toml does not record: the series was edited by hand; "
            "put it back, or take it with `pq accept`",
            path=qdir.shown("series"),
        )
    for (name, want), data in zip(last.patches, bodies, strict=True):
        got = sha256(data)
        if got != want:
            raise QueueError(
                f"sha256 {got[:12]} is not the {want[:12]} queue.toml records: the body was edited "
                "by hand; restore it (git checkout), or take the edit with `pq accept`",
                path=qdir.shown(name),
            )


def present_bodies(qdir: QueueDir, names: list[str]) -> dict[str, bytes]:
    return {n: (qdir.root / n).read_bytes() for n in names if (qdir.root / n).is_file()}
