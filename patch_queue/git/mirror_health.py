"""Is a cached upstream mirror whole?  Checks cheap enough for every open, and git's own for a failed read.

A mirror in the cache can be damaged by a disk or a hand (a pack truncated or deleted, a ref file cut short,
objects gone): then every run would say "unknown upstream commit" although the source has it.
:func:`damage` looks at what costs no reading of the history: every ref reads and names an object the store
has, and every pack's trailer is the checksum its index records (a truncated or rewritten pack fails it).
:func:`fsck_damage` asks ``git fsck --connectivity-only`` (~0.4 s on vllm-ascend), for when a read failed.
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from patch_queue.git import command


def damage(path: Path) -> str | None:
    """Why the bare mirror at ``path`` is damaged, or None when it looks whole."""
    try:
        repo = pygit2.Repository(str(path))
        for name in list(repo.references):
            target = repo.references[name].resolve().target
            if not isinstance(target, pygit2.Oid) or target not in repo.odb:
                return f"{name} points at {target}, which the mirror lacks"
    except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
        return str(exc) or type(exc).__name__
    for index in sorted((path / "objects" / "pack").glob("*.idx")):
        pack = index.with_suffix(".pack")
        try:
            recorded = index.read_bytes()[-40:-20]  # an index ends with its pack's checksum, then its own
            with pack.open("rb") as fh:
                fh.seek(-20, 2)
                trailer = fh.read(20)
        except OSError as exc:
            return f"{pack.name}: {exc.strerror or exc}"
        if trailer != recorded:
            return f"{pack.name} does not match its index (cut short or rewritten)"
    return None


def fsck_damage(path: Path) -> str | None:
    """git's word on the mirror at ``path``: its first complaint, or None when ``git fsck`` finds it whole."""
    try:
        command.run(path, "fsck", "--connectivity-only", "--no-dangling", "--no-progress")
    except command.GitFailed as exc:
        return exc.reason
    return None
