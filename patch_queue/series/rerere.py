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

An edit also keeps the module files it changed as they were in the stack at that patch before
and after it (``files``: path -> [base blob, final blob], "" for no file; the blobs under
``blobs/``, named by their git ids, so one text is kept once), and the final commit's message
and author.  A pq whose merge gives another body than the one an edit was made on (a newer
merge, another formatter) merges the edit onto its own result three-way (:meth:`Store.onto`:
base the files the edit was made on, ours the new merge's, theirs the edit's), so an older
lineage stays reproducible; only lines both changed conflict.  Entries written before pq kept
``files`` apply only to the very body they were made on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from patch_queue.fsutil import json_bytes
from patch_queue.git.diff import line_hunks
from patch_queue.git.repo import CommitInfo, Person, ProjectRepo
from patch_queue.series.stack import PERSON, sha256

REF = "refs/pq/resolutions"


@dataclass(frozen=True)
class Edit:
    """A patch's edit as a command makes it: the body it was made on and the body it gave, the module files
    of the stack at that patch before and after it (the trees of the two commits), and the final commit."""

    name: str
    before: bytes
    after: bytes
    base: Mapping[str, bytes]
    final: Mapping[str, bytes]
    like: CommitInfo


@dataclass(frozen=True)
class RecordedEdit:
    """A recorded edit as the store holds it."""

    patch: str
    before: str  # sha256 of the body it was made on
    after: str  # sha256 of the body it gave
    files: dict[str, tuple[bytes | None, bytes | None]] | None  # path -> (base, final); None: kept by an older pq
    message: str | None
    author: Person | None


@dataclass(frozen=True)
class Clash:
    """Where a recorded edit and a newer merge changed the same lines: lines ``first``-``last`` of ``path`` as
    the newer merge has it."""

    path: str
    first: int
    last: int


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

    def find_edit(self, name: str, *, before: str | None = None, after: str | None = None) -> RecordedEdit | None:
        """The recorded edit of patch ``name`` made on the body of sha256 ``before`` (or, without it, giving the
        body of sha256 ``after``); None when the store holds none.  Of several, the first by path."""
        for path in sorted(p for p in self._files if p.startswith("edits/")):
            try:
                entry = json.loads(self._files[path])
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("patch") != name:
                continue
            if (before is not None and entry.get("before") != before) or (
                after is not None and entry.get("after") != after
            ):
                continue
            return self._recorded(entry)
        return None

    def _recorded(self, entry: dict[str, object]) -> RecordedEdit:
        files: dict[str, tuple[bytes | None, bytes | None]] | None = None
        raw = entry.get("files")
        if isinstance(raw, dict):
            files = {}
            for path, pair in sorted(raw.items()):
                if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(b, str) for b in pair)):
                    files = None  # a damaged entry: it applies only as an exact one
                    break
                texts = [self._files.get(_blob_path(b)) if b else None for b in pair]
                if any(b and t is None for b, t in zip(pair, texts, strict=True)):
                    files = None
                    break
                files[str(path)] = (texts[0], texts[1])
        author = entry.get("author")
        person = None
        if isinstance(author, list) and len(author) == 4:
            name, email, time, offset = author
            if isinstance(name, str) and isinstance(email, str) and isinstance(time, int) and isinstance(offset, int):
                person = Person(name, email, time, offset)
        message = entry.get("message")
        return RecordedEdit(
            str(entry.get("patch")),
            str(entry.get("before")),
            str(entry.get("after")),
            files,
            message if isinstance(message, str) else None,
            person,
        )

    def onto(self, edit: RecordedEdit, ours: Mapping[str, bytes]) -> tuple[dict[str, bytes | None], list[Clash]]:
        """``edit`` merged three-way onto ``ours`` (the module files of another merge of its patch): the files it
        changes as they come out (None: no such file), and where both changed the same lines."""
        assert edit.files is not None
        out: dict[str, bytes | None] = {}
        clashes: list[Clash] = []
        for path, (base, final) in sorted(edit.files.items()):
            mine = ours.get(path)
            if mine == base or mine == final:
                out[path] = final
            elif base is None or final is None or mine is None:  # a file made or removed on one side only
                clashes.append(Clash(path, 1, max(1, len((mine or b"").splitlines()))))
            else:
                merged = self.repo.merge_file(base, mine, final, labels=_LABELS, path=path)
                if merged.clean:
                    out[path] = merged.text
                else:
                    clashes += [Clash(path, first, last) for first, last in _ours_spans(merged.text)]
        return out, clashes

    def record_edits(self, edits: Sequence[Edit], message: str) -> int:
        """Record each edit that changed its body (see :meth:`ref_update`)."""
        entries: dict[str, object] = {}
        blobs: dict[str, bytes] = {}
        for e in edits:
            if e.before == e.after:
                continue
            files = {}
            for path in sorted(set(e.base) | set(e.final)):
                pair = (e.base.get(path), e.final.get(path))
                if pair[0] == pair[1]:
                    continue
                ids = []
                for data in pair:
                    ids.append(ProjectRepo.blob_id(data) if data is not None else "")
                    if data is not None:
                        blobs[_blob_path(ids[-1])] = data
                files[path] = ids
            author = e.like.author
            entries[_edit_path(e.name, e.before)] = {
                "patch": e.name,
                "before": sha256(e.before),
                "after": sha256(e.after),
                "ops": make_ops(e.before, e.after),
                "files": files,
                "message": e.like.message,
                "author": [author.name, author.email, author.time, author.offset],
            }
        return self._put(entries, message, blobs)

    def record(self, entries: list[dict[str, object]], message: str) -> int:
        """Add ``entries`` (each with ``key`` and ``resolution``; see :meth:`ref_update`)."""
        return self._put({_path(str(entry["key"])): entry for entry in entries}, message)

    def _put(self, entries: Mapping[str, object], message: str, blobs: Mapping[str, bytes] | None = None) -> int:
        """Commit ``entries`` (path -> JSON) and ``blobs`` (path -> the text it names) into the store, without
        moving the ref; how many entries were new or changed."""
        new = {path: json_bytes(entry, indent=1) for path, entry in entries.items()}
        changed = {path: data for path, data in new.items() if self._files.get(path) != data}
        if not changed:
            return 0
        files = {**self._files, **(blobs or {}), **changed}
        parents = [self.head] if self.head else []
        self.head = self.repo.commit(self.repo.write_tree(files), parents, message, PERSON, PERSON)
        self._files = files
        return len(changed)


def _path(key: str) -> str:
    return f"{key[:2]}/{key}.json"


def _edit_path(name: str, before: bytes) -> str:
    return "edits/" + _path(sha256(name.encode("utf-8") + b"\0" + before))


_LABELS = ("pq: the merge the edit was recorded on", "pq: this merge", "pq: the recorded edit")  # base, ours, theirs


def _blob_path(blob: str) -> str:
    return f"blobs/{blob[:2]}/{blob}"


def _ours_spans(text: bytes) -> list[tuple[int, int]]:
    """The regions :meth:`Store.onto`'s merge left in ``text`` as lines of its ours side, first to last (a region
    where ours has no line is given as the line after it).  The sides may hold diff3 regions of pq's own merge
    (a conflicted patch's merge result has them): only the labels of :data:`_LABELS` mark this merge's."""
    base, ours, theirs = (label.encode() for label in _LABELS)
    spans = []
    line = 0
    side = None
    first = 0
    for raw in text.splitlines():
        if side is None and raw == b"<<<<<<< " + ours:
            side, first = "ours", line + 1
        elif side == "ours" and raw == b"||||||| " + base:
            side = "rest"
        elif side == "rest" and raw == b">>>>>>> " + theirs:
            spans.append((first, max(first, line)))
            side = None
        elif side in (None, "ours"):
            line += 1
    return spans


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
