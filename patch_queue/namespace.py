"""Where one queue keeps its state in a repository that holds more than one: the queue folder, its refs and its
state folder.

A repository's first queue lives at the work tree's root (``patches/``, its output folder), with its refs under
``refs/pq/`` and its state in ``.git/pq/``, as ever.  A second queue lives in a folder of its own (``queues/gpu/``:
its own ``patches/queue.toml`` and output folder) and keeps its refs under ``refs/pq-<folder>/`` and its state in
``.git/pq-<folder>/`` (``<folder>`` the folder's path with ``-`` for ``/``), so neither queue sees, moves or
restores the other's.  ``pq -C DIR`` names the folder (as ``git -C DIR`` names the directory git starts in; ``-C``
naming the root is the root's queue); without it, the queue is the one of the nearest folder from the working
directory up to the work tree's root that holds ``patches/queue.toml``, else the root's.

The command line settles the folder (:func:`choose`, kept in ``PQ_QUEUE_FOLDER``) before anything that names a ref
is imported: the modules' ref names are constants made from :func:`refs`, one queue per process.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "PQ_QUEUE_FOLDER"  # the queue folder, relative to the work tree's root ("" = the root); set by the command line
QUEUE_FILE = Path("patches") / "queue.toml"


def folder() -> str:
    """The queue folder of this process, relative to the work tree's root ("" for the root)."""
    return os.environ.get(ENV, "").strip("/")


def _slug(path: str) -> str:
    return path.replace("/", "-")


def refs() -> str:
    """The prefix of the refs of this process's queue: ``refs/pq/``, or ``refs/pq-<folder>/``."""
    return f"refs/pq-{_slug(folder())}/" if folder() else "refs/pq/"


def state() -> str:
    """The name of its state folder in the git directory: ``pq``, or ``pq-<folder>``."""
    return f"pq-{_slug(folder())}" if folder() else "pq"


def work_tree(start: Path) -> Path | None:
    """The work tree holding ``start``: the nearest folder up from it with a ``.git`` (None: none)."""
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


def choose(cwd: Path, given: bool) -> str:
    """The queue folder for a command started in ``cwd`` (relative to its work tree's root): ``cwd`` itself when
    ``pq -C`` named it (``given``: the folder of a queue, or of a new one, as ``pq -C DIR adopt`` makes); else the
    nearest folder from ``cwd`` up to the root (itself included) that holds ``patches/queue.toml``, else the root
    ("")."""
    root = work_tree(cwd)
    if root is None:
        return ""
    if given:
        return _relative(cwd, root)
    for candidate in (cwd, *cwd.parents):
        if not candidate.is_relative_to(root):
            break
        if (candidate / QUEUE_FILE).is_file():
            return _relative(candidate, root)
    return ""


def _relative(path: Path, root: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return "" if rel == "." else rel
