"""An upstream's registry releases as its history: what ``pq adopt`` searches for the base of a queue whose upstream
has no git history (``upstream_git`` is "": the queue's releases are all there is to read).

The window (:func:`release_window`) is the upstream's final releases, newest first, at most :data:`SEARCHED` of
them at first (``pq adopt`` widens it up to :data:`WIDEST` when the base may be older), none newer than the newest
release of the downstream release's own major.minor when the upstream has one
(a downstream that goes with the upstream release of its own number, as vllm-omni goes with vLLM, cannot have
copied a later one).  Each release is downloaded once into pq's cache (:func:`archives.fetch_release`), and the
upstream file it holds is kept there too (:func:`file_blob`), so a search run again opens no archive.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from patch_queue.progress import Progress
from patch_queue.sources import archives, registry

SEARCHED = 12  # releases read at first
WIDEST = 48  # releases read at most, when the oldest of the first window scores the best (commands/adopt.py)


@dataclass(frozen=True)
class Window:
    """The releases a search reads, oldest first, and one line saying which and why."""

    versions: tuple[str, ...]
    why: str


def release_window(dist: str, downstream_version: str = "", limit: int = SEARCHED) -> Window:
    """The final releases of ``dist`` the base is searched among (see the module's doc)."""
    files = [f for f in registry.project_files(dist) if registry.pick_file([f]) is not None]
    finals = sorted(
        {f.version for f in files if not (f.version.key.is_prerelease or f.version.key.is_devrelease)},
        key=lambda v: v.key,
    )
    bound = ""
    down = registry.parse_version(downstream_version) if downstream_version else None
    if down is not None:
        same = [v for v in finals if v.key.release[:2] == down.key.release[:2]]
        if same:
            bound = same[-1].text
            finals = [v for v in finals if v.key <= same[-1].key]
    kept = tuple(v.text for v in finals[-limit:])
    name = registry.normalize_name(dist)
    if not kept:
        return Window((), f"no final release of {name} on the registry")
    span = kept[0] if len(kept) == 1 else f"{kept[0]} to {kept[-1]}"
    why = f"the {len(kept)} newest final releases of {name}, {span}"
    if bound:
        why += f": none newer than {bound}, the newest of the downstream release {downstream_version}'s major.minor"
    return Window(kept, why)


def blob_id(data: bytes) -> str:
    """The git blob id of ``data``: the key the method scans are cached by, the same as a git history's."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_blob(dist: str, version: str, path: str, progress: Progress | None = None) -> tuple[str, bytes | None]:
    """(the blob id of ``path`` in the release ``dist==version``, its bytes); ("", None) when the release holds no
    such file.  The archive is downloaded once and the file kept in pq's cache (:class:`archives.ArchiveReader`)."""
    data = archives.ArchiveReader(archives.fetch_release(dist, version, progress)).read(path)
    return (blob_id(data), data) if data is not None else ("", None)
