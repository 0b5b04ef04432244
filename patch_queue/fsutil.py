"""Atomic file writes and whole-folder replacement, so an interrupted command never leaves half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_folder(root: Path) -> dict[str, bytes]:
    """Every regular file below ``root`` (relative slash paths); {} when it does not exist."""
    if not root.is_dir():
        return {}
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def sync_folder(root: Path, files: dict[str, bytes], *, owned: set[str] | None = None) -> None:
    """Make ``root`` hold ``files``: write changed ones atomically, delete the ``owned`` ones no longer there.

    Files pq never wrote (not in ``owned``) are left alone.
    """
    for rel, data in sorted(files.items()):
        target = root / rel
        if not target.is_file() or target.read_bytes() != data:
            atomic_write(target, data)
    for rel in sorted((owned or set()) - set(files)):
        target = root / rel
        if target.is_file():
            target.unlink()
