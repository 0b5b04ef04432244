"""The output folder (``npu_worker/``): what pq wrote there, and the edits a maintainer made since.

Every write of the folder ends with its manifest ``.pq-build``: one ``<sha256> <path>`` line per
file pq wrote.  A file whose bytes no longer have that sha256 (or that is gone) holds edits no
patch holds: commands that would overwrite the folder refuse, naming the first such file, unless
told to ``--discard`` them; ``pq record`` and ``pq new`` take them into the series.  A manifest
of older pq (paths only) is compared with the top of the stack instead.

The folder must be a folder of the project: a regular file or a symbolic link there (which would send
pq's writes elsewhere) is named in one line by every command that reads or writes it, and reported by
``pq status``; so is, by every command that writes it, a file in it that is a symbolic link, has other
hard links or is read-only (:func:`refuse_unreplaceable`).  So is a manifest line naming a path that is not
a file below the folder (``../notes.txt``, an absolute path, one through a symbolic link inside it: a
manifest that came with a folder from elsewhere, or was edited): pq writes and deletes the files of its
folder only, and never takes such a line as its own.  A module turned into a patch body (``pq record``,
``pq new``, ``pq continue``) must be UTF-8 text without a NUL byte (:func:`refuse_binary`): a patch holds
text changes only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from patch_queue.errors import QueueError
from patch_queue.fsutil import clean_relative, linked_folder, not_text, read_folder, unreplaceable
from patch_queue.git.diff import line_hunks
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import MANIFEST as MANIFEST  # (the journal reads it too: defined below it)
from patch_queue.project.workspace import Workspace
from patch_queue.series.stack import sha256

_HEADER = "# files written by pq build: sha256 and path\n"
_STANDALONE = "# files written by pq build --standalone {}: sha256 and path\n"


@dataclass(frozen=True)
class Edited:
    file: str  # relative to the output folder
    added: int
    removed: int


def unusable(ws: Workspace, out: Path | None = None) -> QueueError | None:
    """Why the output folder (``out`` as given, default ``npu_worker/``) cannot be used, or None: it is a
    symbolic link, something other than a folder, or its manifest names a path that is no file below it."""
    path = out if out is not None else ws.root / ws.spec.out
    parent = ws.rel(path.parent)  # the folder resolved, not the link
    shown = path.name if parent == "." else f"{parent}/{path.name}"
    if path.is_symlink():
        return QueueError(
            f"is a symbolic link (to {os.readlink(path)}); pq writes the runners into a folder of the project "
            f"only, never through a link: remove the link (`rm {shown}`), then run the command again",
            path=shown,
        )
    if path.exists() and not path.is_dir():
        return QueueError(
            "is not a folder; pq writes the runners into a folder of that name: move the file away, then run the "
            "command again",
            path=shown,
        )
    for line, rel, _digest in _lines(path):
        why = outside(path, rel)
        if why:
            return QueueError(
                f"names {rel!r}, {why}; pq writes and deletes the files of {shown}/ only, and did not write this "
                "one: delete the line, then run the command again",
                path=f"{shown}/{MANIFEST}",
                line=line,
            )
    return None


def outside(out: Path, rel: str) -> str:
    """Why ``rel`` (a path a file gave) is not a file below the folder ``out``, or "" when it is one: it must be a
    clean relative path, and reach its file through no symbolic link inside the folder."""
    if not clean_relative(rel):
        return f"which is not a file below {out.name}/"
    link = linked_folder(out, rel)
    return f"which is reached through the symbolic link {out.name}/{link}" if link else ""


def refuse_binary(data: bytes, shown: str) -> None:
    """One line naming the first byte of the module ``shown`` that a patch body cannot hold (one that is not
    UTF-8, or a NUL), at its line and column; nothing when it is text."""
    found = not_text(data)
    if found is None:
        return
    line, column, what = found
    raise QueueError(
        f"{what} at column {column}; a patch holds UTF-8 text only: remove the byte (or `pq build --discard` "
        "drops every edit no patch holds), then run the command again",
        path=shown,
        line=line,
    )


def refuse_unusable(ws: Workspace, out: Path | None = None) -> None:
    """One line (exit 1) when the output folder cannot be used (see :func:`unusable`)."""
    problem = unusable(ws, out)
    if problem is not None:
        raise problem


def refuse_unreplaceable(out: Path, *, shown: str) -> None:
    """One line, before a command computes anything, for a file of ``out`` pq wrote (or its manifest) that its
    journaled write would refuse: a symbolic link (which would send pq's writes elsewhere), a file with other hard
    links, a read-only one (:func:`patch_queue.fsutil.unreplaceable`)."""
    for rel in [*manifest(out), MANIFEST]:
        problem = unreplaceable(out / rel, follow=False)
        if problem is not None:
            raise QueueError(problem, path=f"{shown}/{rel}")


def sync(out: Path, files: dict[str, bytes], writes: Writes, *, standalone: str = "") -> None:
    """Make ``out`` hold ``files``; files of an earlier build no longer there go, files pq never wrote stay
    (and one in the way of a file to write is refused).  ``standalone``: the package name of a
    standalone build (its imports point into it), recorded in the manifest's header."""
    owned = set(manifest(out))
    for rel in sorted(set(files) | owned):
        why = outside(out, rel)
        if why:  # a tree of refs/pq/ made by hand: pq never writes outside the folder
            raise QueueError(f"pq does not write {rel!r}, {why}", path=str(out))
    for rel, data in sorted(files.items()):
        path = out / rel
        if rel not in owned and path.is_file() and path.read_bytes() != data:
            raise QueueError(
                f"is not a file pq wrote ({MANIFEST} does not list it); pq does not overwrite it: "
                "move it away, or build into another folder",
                path=str(path),
            )
        writes.write(path, data, group="out")
    for rel in sorted(owned - set(files)):
        writes.write(out / rel, None, group="out")
    listing = "".join(f"{sha256(files[f])} {f}\n" for f in sorted(files))
    header = _STANDALONE.format(standalone) if standalone else _HEADER
    writes.write(out / MANIFEST, (header + listing).encode(), group="out")


def standalone_package(out: Path) -> str:
    """The package a standalone build in ``out`` points its imports into; "" for a plain build."""
    path = out / MANIFEST
    first = path.read_text(encoding="utf-8", errors="replace").partition("\n")[0] if path.is_file() else ""
    found = re.fullmatch(_STANDALONE.format(r"(\S+)").rstrip("\n"), first)
    return found.group(1) if found else ""


def manifest(out: Path) -> dict[str, str]:
    """path -> sha256 pq wrote ("" from a manifest of older pq); {} when pq never wrote ``out``.  A line naming
    no file below ``out`` is not pq's (:func:`unusable` names it): it is left out."""
    return {rel: digest for _line, rel, digest in _lines(out) if not outside(out, rel)}


def _lines(out: Path) -> list[tuple[int, str, str]]:
    """(line number, path, sha256 or "") of each entry of the manifest in ``out``."""
    path = out / MANIFEST
    if not path.is_file():
        return []
    entries = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        digest, _, rel = line.partition(" ")
        entries.append((n, rel, digest) if len(digest) == 64 and rel else (n, line, ""))
    return entries


def edits(out: Path, built: dict[str, bytes]) -> list[Edited]:
    """The files of ``out`` changed since pq wrote them; ``built`` is the top of the stack (for line counts,
    and for manifests without hashes)."""
    written = manifest(out)
    current = read_folder(out)
    found = []
    for rel, digest in sorted(written.items()):
        data = current.get(rel)
        reference = built.get(rel)
        if digest:
            if data is not None and sha256(data) == digest:
                continue
            if reference is not None and sha256(reference) != digest:
                reference = None  # the top moved since (a hand-edited series): count against nothing better
        elif data is None or reference is None or data == reference:
            continue
        hunks = line_hunks(reference or b"", data or b"")
        found.append(Edited(rel, sum(h[3] for h in hunks), sum(h[1] for h in hunks)))
    return found


def refuse_edits(
    out: Path, built: dict[str, bytes], *, shown: str, discard: bool, found: list[Edited] | None = None
) -> list[Edited]:
    """Refuse (one line naming the first file) when ``out`` holds edits (``found``, default all of them), unless
    ``discard``; returns them."""
    found = edits(out, built) if found is None else found
    if found and not discard:
        first = found[0]
        more = f", and {len(found) - 1} more file(s)" if len(found) > 1 else ""
        raise QueueError(
            f"has edits no patch holds (+{first.added} -{first.removed} lines{more}); "
            "`pq record` them into the series, or pass --discard to drop them",
            path=f"{shown}/{first.file}",
        )
    return found


def discarded(found: list[Edited]) -> str:
    """What --discard dropped, for the command's output ("" when nothing)."""
    if not found:
        return ""
    lines = sum(e.added + e.removed for e in found)
    return f"discarded {lines} edited line(s) in {len(found)} file(s): {', '.join(e.file for e in found)}"
