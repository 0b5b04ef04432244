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

pq trusts no entry: each is checked as the store is read (:func:`_damage`: JSON of the shape pq
writes, a blob named for its text, every object present), and a damaged one is one error naming
``refs/pq/resolutions:PATH (BLOB)`` and ``pq resolutions drop KEY``.  The ref keeps a reflog
(:func:`keep_history`), so a forced update (a user's ``git fetch +refs/pq/resolutions:...``) loses
nothing; two clones' stores are merged by ``pq resolutions merge`` (see
:mod:`patch_queue.commands.resolutions`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patch_queue import namespace
from patch_queue.errors import QueueError
from patch_queue.fsutil import clean_relative, json_bytes
from patch_queue.git import command
from patch_queue.git.diff import line_hunks
from patch_queue.git.repo import CommitInfo, Person, ProjectRepo
from patch_queue.series.stack import PERSON, VENDOR, sha256

REF = namespace.refs() + "resolutions"
# each remote's store as `pq resolutions merge REMOTE` last fetched it: REMOTE/resolutions
REMOTES = namespace.refs() + "remotes/"


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
    """The store at ``refs/pq/resolutions`` (or at commit ``at``, named ``label`` in messages), every entry checked
    as it is read: a damaged one (not JSON, of the wrong shape, its object missing) is one error naming it and
    the command that drops it, unless ``damaged_ok`` (then :attr:`damaged` lists them and no lookup sees them)."""

    def __init__(self, repo: ProjectRepo, at: str | None = None, *, label: str = REF, damaged_ok: bool = False) -> None:
        self.repo = repo
        self.label = label
        self.head = repo.ref(REF) if at is None else at
        self.loaded = self.head  # the ref's value when the store was read
        self.damaged: dict[str, tuple[str, str]] = {}  # path -> (blob id, what is wrong)
        self.ids: dict[str, str] = {}  # path -> blob id, every entry, damaged ones too
        self._files: dict[str, bytes] = {}
        if label == REF:
            keep_history(repo)
        if self.head is None:
            return
        kind = repo.kind_of(self.head)
        if kind != "commit":
            what = "an object this repository does not have" if kind is None else f"a {kind}, not a commit"
            raise QueueError(
                f"points at {what}: set it to a store `pq resolutions log` lists "
                f"(`git update-ref {label} ID`), or delete it (`git update-ref -d {label}`)",
                path=f"{label} ({self.head})",
            )
        self.ids = repo.tree_ids(repo.commit_info(self.head).tree)
        for path, blob in sorted(self.ids.items()):
            data = repo.read_blob(blob) if repo.has_object(blob) else None
            why = "its object is missing from this repository" if data is None else _damage(path, blob, data)
            if why is None:
                assert data is not None
                self._files[path] = data
                continue
            if not damaged_ok:
                raise QueueError(
                    f"{why}; the entry is damaged: drop it (`pq resolutions drop {entry_key(path)}`)",
                    path=f"{label}:{path} ({blob})",
                )
            self.damaged[path] = (blob, why)

    def lookup(self, key: str) -> str | None:
        data = self._files.get(_path(key))
        if data is None:
            return None
        resolution = json.loads(data)["resolution"]
        assert isinstance(resolution, str)
        return resolution

    def ref_update(self) -> dict[str, tuple[str | None, str | None]]:
        """The ref move that records what was added ({} when nothing was): the caller moves it with its other writes."""
        return {REF: (self.loaded, self.head)} if self.head != self.loaded else {}

    def has_edits(self) -> bool:
        return any(path.startswith("edits/") for path in self._files)

    def entries(self) -> dict[str, dict[str, object]]:
        """Every region and edit entry (path -> its JSON object), by path."""
        return {p: json.loads(d) for p, d in sorted(self._files.items()) if not p.startswith("blobs/")}

    def edited_patches(self) -> set[str]:
        """The patches recorded edits belong to (each entry names its patch)."""
        return {str(e["patch"]) for p, e in self.entries().items() if p.startswith("edits/")}

    def lookup_edit(self, name: str, before: bytes) -> bytes | None:
        """The body a maintainer made of ``before`` (patch ``name``), or None when none is recorded."""
        data = self._files.get(_edit_path(name, before))
        if data is None:
            return None
        entry = json.loads(data)
        path = _edit_path(name, before)
        try:
            after = apply_ops(before, entry["ops"])
        except IndexError:
            after = None
        if after is None or sha256(after) != entry["after"]:
            raise QueueError(
                f"its line edits do not give the body of sha256 {str(entry['after'])[:12]} it records from the "
                f"body it is kept for; the entry is damaged: drop it (`pq resolutions drop {entry_key(path)}`)",
                path=f"{self.label}:{path} ({self.ids[path]})",
            )
        return after

    def edit_path(self, name: str, before: bytes) -> str:
        """Where the store keeps the edit of patch ``name`` made on ``before``."""
        return _edit_path(name, before)

    def find_edit(self, name: str, *, before: str | None = None, after: str | None = None) -> RecordedEdit | None:
        """The recorded edit of patch ``name`` made on the body of sha256 ``before`` (or, without it, giving the
        body of sha256 ``after``); None when the store holds none.  Of several, the first by path."""
        for path, entry in self.entries().items():
            if not path.startswith("edits/") or entry["patch"] != name:
                continue
            if (before is not None and entry["before"] != before) or (after is not None and entry["after"] != after):
                continue
            return self._recorded(entry)
        return None

    def _recorded(self, entry: dict[str, object]) -> RecordedEdit:
        files: dict[str, tuple[bytes | None, bytes | None]] | None = None
        raw = entry.get("files")
        if isinstance(raw, dict):
            files = {}
            for path, pair in sorted(raw.items()):
                texts = [self._files.get(_blob_path(b)) if b else None for b in pair]
                if any(b and t is None for b, t in zip(pair, texts, strict=True)):
                    files = None  # a text dropped from the store: it applies only as an exact one
                    break
                files[str(path)] = (texts[0], texts[1])
        author = entry.get("author")
        person = Person(*author) if isinstance(author, list) else None
        message = entry.get("message")
        return RecordedEdit(
            str(entry["patch"]),
            str(entry["before"]),
            str(entry["after"]),
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
        self.ids = {
            **self.ids,
            **{path: ProjectRepo.blob_id(data) for path, data in {**(blobs or {}), **changed}.items()},
        }
        return len(changed)


def entry_key(path: str) -> str:
    """The key of the entry at ``path``: a region's or an edit's key, a blob's id (what `pq resolutions drop` takes)."""
    name = path.rsplit("/", 1)[-1]
    return name.removesuffix(".json")


def entry_kind(path: str) -> str:
    return "blob" if path.startswith("blobs/") else "edit" if path.startswith("edits/") else "region"


_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX40 = re.compile(r"[0-9a-f]{40}")


def _damage(path: str, blob: str, data: bytes) -> str | None:
    """What is wrong with the entry at ``path`` (blob ``blob``, text ``data``), or None when it is sound."""
    kind = entry_kind(path)
    parts = path.split("/")
    if kind == "blob":
        ok = len(parts) == 3 and _HEX40.fullmatch(parts[2]) and parts[1] == parts[2][:2]
        if not ok:
            return "not a path pq writes (blobs/XX/<git id>)"
        return None if parts[2] == blob else f"holds the text of blob {blob}, not of the one it is named for"
    key = entry_key(path)
    if parts[-2:] != [key[:2], f"{key}.json"] or len(parts) != (3 if kind == "edit" else 2) or not key:
        return "not a path pq writes (XX/<key>.json, edits/XX/<key>.json, blobs/XX/<git id>)"
    try:
        entry = json.loads(data)
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg}, line {exc.lineno} column {exc.colno}: truncated or overwritten?)"
    if not isinstance(entry, dict):
        return f"JSON {type(entry).__name__}, not an object"
    if kind == "region":
        return _wrong(entry, {"resolution": str}, {"key": str, "patch": str, "file": str})
    why = _wrong(entry, {"patch": str, "before": str, "after": str, "ops": list}, {"files": dict, "message": str})
    if why:
        return why
    for name in ("before", "after"):
        if not _HEX64.fullmatch(entry[name]):
            return f'"{name}" is not a sha256'
    for op in entry["ops"]:
        if not (
            isinstance(op, list)
            and len(op) == 3
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in op[:2])
            and isinstance(op[2], str)
        ):
            return f'"ops" holds {json.dumps(op)[:40]}, not [line, count, text]'
    for name, pair in entry.get("files", {}).items():
        if not clean_relative(name) or name.startswith(VENDOR):
            return f'"files" names {json.dumps(name)[:40]}, which is no module of a series'
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(b, str) for b in pair)):
            return f'"files" holds {json.dumps(name)[:40]}: {json.dumps(pair)[:40]}, not [base blob, final blob]'
        if not all(b == "" or _HEX40.fullmatch(b) for b in pair):
            return f'"files" holds {json.dumps(name)[:40]} with a blob that is not a git id'
    author = entry.get("author")
    if author is not None and not (
        isinstance(author, list)
        and len(author) == 4
        and all(isinstance(a, str) for a in author[:2])
        and all(isinstance(a, int) and not isinstance(a, bool) for a in author[2:])
    ):
        return '"author" is not [name, email, time, offset]'
    return None


def _wrong(entry: dict[str, object], required: dict[str, type], optional: dict[str, type]) -> str | None:
    """What is wrong with the fields of ``entry``: a required one missing, or one of the wrong JSON type."""
    for name, want in {**required, **optional}.items():
        if name not in entry:
            if name in required:
                return f'no "{name}"'
            continue
        value = entry[name]
        if not isinstance(value, want) or isinstance(value, bool):
            return f'"{name}" is {json.dumps(value)[:40]}, not {_JSON_TYPES[want]}'
    return None


_JSON_TYPES: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}


def keep_history(repo: ProjectRepo) -> None:
    """Make git and pq keep a reflog of refs/pq/resolutions (git logs a ref under refs/pq/ only when its log
    exists): every update, pq's and a user's forced fetch alike, appends the value it replaced, so nothing
    recorded is lost (`pq resolutions log`; the objects stay reachable from the log for `git gc`, which is
    told never to expire its entries: ``gc.refs/pq/resolutions.reflogExpire[Unreachable] = never`` in the
    repository's config).  A repository that cannot be written is left as it is."""
    log = history_path(repo)
    if log.exists():
        return
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        for key in ("reflogExpire", "reflogExpireUnreachable"):
            repo.git("config", f"gc.{REF}.{key}", "never")
    except (OSError, command.GitFailed):
        pass


def history_path(repo: ProjectRepo) -> Path:
    return (repo.main_gitdir or repo.gitdir) / "logs" / REF


@dataclass(frozen=True)
class Held:
    """A value refs/pq/resolutions held, as its reflog says: the commit, when and by what it was set."""

    commit: str
    time: int
    why: str


def history(repo: ProjectRepo) -> list[Held]:
    """Every value the ref held, newest first (its current value first); the value it held when the log began
    is given as "(before the history began)"."""
    try:
        lines = history_path(repo).read_bytes().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    held: list[Held] = []
    first: str | None = None
    for line in lines:
        head, _tab, why = line.partition("\t")
        fields = head.split()
        if len(fields) < 4 or not all(_HEX40.fullmatch(f) for f in fields[:2]):
            continue
        old, new = fields[0], fields[1]
        time = int(fields[-2]) if fields[-2].isdigit() else 0
        if first is None:
            first = old
        held.append(Held(new, time, why.strip() or "(no message)"))
    if first is not None and first != "0" * 40:
        held.insert(0, Held(first, 0, "(held before the history began)"))
    return held[::-1]


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
