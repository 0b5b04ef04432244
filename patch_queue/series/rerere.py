"""Recorded resolutions and edits: what a maintainer wrote once is written the same way when it comes back.

Like ``git rerere``, but keyed by what the anchor-aware merge knows about a region: the patch
(without its series number), the file, the omni block it sits at, and the three texts involved
(see :func:`patch_queue.merge.three_way._key`).  The store lives in the project repository itself, as a
commit under ``refs/pq/resolutions`` whose tree holds one JSON file per key, so it can be pushed
and fetched with the branch.  ``pq abort`` leaves it alone: a resolution a maintainer wrote is
never thrown away.

Beside the regions, the store keeps **recorded edits** (``edits/``): for a patch whose body a
maintainer changed (resolved conflicts, added imports, anything), the change from the body pq's
merge gave to the body the maintainer left, keyed by the patch name and the merged body, as line
edits.  The same refresh from the same inputs gives the same merged body, so the edit applies
exactly (its result is checked against its sha256); this is what makes a committed refresh
reproducible (see ``[[lineage]]`` in :mod:`patch_queue.series.queue`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from patch_queue.fsutil import json_bytes
from patch_queue.git.diff import line_hunks
from patch_queue.git.repo import ProjectRepo
from patch_queue.series.stack import PERSON, sha256

REF = "refs/pq/resolutions"


class Store:
    def __init__(self, repo: ProjectRepo) -> None:
        self.repo = repo
        self.head = repo.ref(REF)
        self.loaded = self.head  # the ref's value when the store was read
        self._files: dict[str, bytes] = repo.read_tree(repo.commit_info(self.head).tree) if self.head else {}

    def lookup(self, key: str) -> str | None:
        data = self._files.get(_path(key))
        resolution = None if data is None else json.loads(data).get("resolution")
        return resolution if isinstance(resolution, str) else None

    def ref_update(self) -> dict[str, tuple[str | None, str | None]]:
        """The ref move that records what was added ({} when nothing was): the caller moves it with its other writes."""
        return {REF: (self.loaded, self.head)} if self.head != self.loaded else {}

    def has_edits(self) -> bool:
        return any(path.startswith("edits/") for path in self._files)

    def edited_patches(self) -> set[str]:
        """The patches recorded edits belong to (each entry names its patch)."""
        names = set()
        for path, data in self._files.items():
            if path.startswith("edits/"):
                try:
                    name = json.loads(data).get("patch")
                except (ValueError, AttributeError):
                    continue
                if isinstance(name, str):
                    names.add(name)
        return names

    def lookup_edit(self, name: str, before: bytes) -> bytes | None:
        """The body a maintainer made of ``before`` (patch ``name``), or None when none is recorded."""
        data = self._files.get(_edit_path(name, before))
        if data is None:
            return None
        try:
            entry = json.loads(data)
            after = apply_ops(before, entry["ops"])
        except (ValueError, KeyError, TypeError, IndexError):
            return None
        return after if sha256(after) == entry.get("after") else None

    def record_edits(self, edits: list[tuple[str, bytes, bytes]], message: str) -> int:
        """Record (patch name, merged body, final body) triples (see :meth:`ref_update`)."""
        entries = {
            _edit_path(name, before): {
                "patch": name,
                "before": sha256(before),
                "after": sha256(after),
                "ops": make_ops(before, after),
            }
            for name, before, after in edits
            if before != after
        }
        return self._put(entries, message)

    def record(self, entries: list[dict[str, object]], message: str) -> int:
        """Add ``entries`` (each with ``key`` and ``resolution``; see :meth:`ref_update`)."""
        return self._put({_path(str(entry["key"])): entry for entry in entries}, message)

    def _put(self, entries: Mapping[str, object], message: str) -> int:
        """Commit ``entries`` (path -> JSON) into the store, without moving the ref; how many were new or changed."""
        new = {path: json_bytes(entry, indent=1) for path, entry in entries.items()}
        changed = {path: data for path, data in new.items() if self._files.get(path) != data}
        if not changed:
            return 0
        files = {**self._files, **changed}
        parents = [self.head] if self.head else []
        self.head = self.repo.commit(self.repo.write_tree(files), parents, message, PERSON, PERSON)
        self._files = files
        return len(changed)


def _path(key: str) -> str:
    return f"{key[:2]}/{key}.json"


def _edit_path(name: str, before: bytes) -> str:
    return "edits/" + _path(sha256(name.encode("utf-8") + b"\0" + before))


def make_ops(before: bytes, after: bytes) -> list[list[object]]:
    """Line edits turning ``before`` into ``after``: [first line (0-based), lines removed, text inserted]."""
    new = after.splitlines(keepends=True)
    return [
        [start, count, b"".join(new[n_start : n_start + n_count]).decode("utf-8", "surrogateescape")]
        for start, count, n_start, n_count in line_hunks(before, after)
    ]


def apply_ops(before: bytes, ops: list[list[object]]) -> bytes:
    lines = before.splitlines(keepends=True)
    for start, count, text in reversed(ops):
        assert isinstance(start, int) and isinstance(count, int) and isinstance(text, str)
        if start < 0 or start + count > len(lines):
            raise IndexError(start)
        lines[start : start + count] = [text.encode("utf-8", "surrogateescape")] if text else []
    return b"".join(lines)
