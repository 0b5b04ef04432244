"""Recorded resolutions: a conflict resolved once is resolved the same way when it comes back.

Like ``git rerere``, but keyed by what the anchor-aware merge knows about a region: the patch
(without its series number), the file, the omni block it sits at, and the three texts involved
(see :func:`patch_queue.merge._key`).  The store lives in the project repository itself, as a
commit under ``refs/pq/resolutions`` whose tree holds one JSON file per key, so it can be pushed
and fetched with the branch.  ``pq abort`` leaves it alone: a resolution a maintainer wrote is
never thrown away.
"""

from __future__ import annotations

import json

from patch_queue.git.repo import Person, ProjectRepo

REF = "refs/pq/resolutions"
_PERSON = Person("pq", "pq@localhost", 0, 0)


class Store:
    def __init__(self, repo: ProjectRepo) -> None:
        self.repo = repo
        self.head = repo.ref(REF)
        self.loaded = self.head  # the ref's value when the store was read
        self._files: dict[str, bytes] = repo.read_tree(repo.commit_info(self.head).tree) if self.head else {}

    def lookup(self, key: str) -> str | None:
        data = self._files.get(f"{key[:2]}/{key}.json")
        if data is None:
            return None
        entry = json.loads(data)
        resolution = entry.get("resolution")
        return resolution if isinstance(resolution, str) else None

    def ref_update(self) -> dict[str, tuple[str | None, str | None]]:
        """The ref move that records what was added with ``move=False`` ({} when nothing was)."""
        return {REF: (self.loaded, self.head)} if self.head != self.loaded else {}

    def __len__(self) -> int:
        return len(self._files)

    def record(self, entries: list[dict[str, object]], message: str, *, move: bool = True) -> int:
        """Add ``entries`` (each with ``key`` and ``resolution``); returns how many were new or changed.

        ``move=False`` keeps the new commit in the store without moving the ref: the caller moves
        it with its other writes (:meth:`ref_update`).
        """
        files = dict(self._files)
        changed = 0
        for entry in entries:
            key = str(entry["key"])
            data = (json.dumps(entry, indent=1, sort_keys=True) + "\n").encode("utf-8")
            path = f"{key[:2]}/{key}.json"
            if files.get(path) != data:
                files[path] = data
                changed += 1
        if not changed:
            return 0
        parents = [self.head] if self.head else []
        commit = self.repo.commit(self.repo.write_tree(files), parents, message, _PERSON, _PERSON)
        if move:
            self.repo.update_refs({REF: (self.head, commit)}, "pq: record resolutions")
            self.loaded = commit
        self.head, self._files = commit, files
        return changed
