"""Crash-safe writes: a command's file and ref changes go through a journal, all or nothing.

A mutating command plans everything in memory, then hands its writes to a :class:`Writes`:
files (under ``patches/``, the output folder, ``.git/pq/``) with their new bytes or a deletion,
and ref moves with their expected old values.  :meth:`Writes.commit` then

1. stores the old and the new bytes of every changed file as blobs in the project repository,
2. writes the journal ``.git/pq/journal.json`` (atomically, fsynced): every file's old and new
   blob id and every ref's old and new value, before it touches anything,
3. applies it: ``patches/`` files, the refs (one compare-and-swap transaction), output files,
   ``.git/pq/`` state files, each file by an atomic rename (a ``patches/`` file that is a symbolic link: its
   target, the link kept; what a rename would break, a link elsewhere, a hard link, a read-only file, is
   refused in step 1 with one line, see :func:`patch_queue.fsutil.unreplaceable`),
4. removes the journal.

A command killed in step 3 leaves the journal behind.  Every command then stops with one line
naming the way out (:func:`patch_queue.project.workspace.check_no_journal`): ``pq continue`` rolls the
writes forward (the state the interrupted command was writing), ``pq abort`` rolls them back (the
state before it).  Both are idempotent and check before they write: each file and ref must hold
its old or its new value, and one that holds anything else (changed by someone since) is an
error naming it, with nothing written.

**Undo.**  The commands that edit the series (``Writes(..., undoable=True)``: new, record, push,
pop, goto, delete, rename, edit, squash, float, sink, import, accept, undo and redo themselves) write,
in the same journaled step, ``.git/pq/undo.json``: the same list of old and new values, without the recorded resolutions
(``refs/pq/resolutions`` only grows: an edit recorded and then undone is kept, unused; only what
``pq resolutions drop`` removed is put back).  The
saved contents stay reachable from ``refs/pq/undo``.  ``pq undo`` (:func:`undo_writes`) writes
the old values back, as a command of its own, when every file and ref still holds the new ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from patch_queue import namespace
from patch_queue.errors import QueueError
from patch_queue.fsutil import (
    atomic_write,
    clean_relative,
    json_bytes,
    kill_point,
    linked_folder,
    unreplaceable,
    written_path,
)
from patch_queue.git.repo import Person
from patch_queue.project.workspace import JOURNAL_FILE, MANIFEST, REF_JOURNAL, REF_UNDO, UNDO_FILE, Workspace

VERSION = 1
_JOURNAL_PERSON = Person("pq", "pq@localhost", 0, 0)
# the order of the writes; the interruption tests kill a command between and inside the groups
GROUPS = ("patches", "out", "state")


@dataclass(frozen=True)
class _File:
    key: str  # "work:<path>" (below the work tree), "git:<path>" (below .git) or "abs:<path>"
    group: str
    old: str | None  # blob ids; None: no file
    new: str | None


def _roots(ws: Workspace) -> dict[str, Path]:
    return {"git": ws.repo.gitdir, "work": ws.root}  # .git first: it is below the work tree


def _key(ws: Workspace, path: Path) -> str:
    path = path.absolute()
    for kind, root in _roots(ws).items():
        if path.is_relative_to(root):
            return f"{kind}:{path.relative_to(root).as_posix()}"
    return "abs:" + str(path)


def _path(ws: Workspace, key: str) -> Path:
    kind, _, rel = key.partition(":")
    root = _roots(ws).get(kind)
    return root / rel if root is not None else Path(rel)


def _foreign(ws: Workspace, files: list[_File], *, undo: bool) -> None:
    """Refuse (ValueError: the record is unreadable) a file of a journal or undo record that is none pq writes: a
    path that is not clean, or outside ``patches/`` (group "patches"), ``.git/pq/`` ("state") or an output folder
    ("out": ``npu_worker/``; in a journal also a folder with pq's manifest, the folder of a ``pq build --out``),
    or reached through a symbolic link inside it."""
    roots = {"patches": ws.queue_dir.root, "state": ws.state_dir, "out": ws.out}
    keys = {f.key for f in files}
    for f in files:
        kind, _, rel = f.key.partition(":")
        path = _path(ws, f.key)
        clean = kind in ("git", "work", "abs") and (kind == "abs") == rel.startswith("/")
        root = roots.get(f.group) if clean and clean_relative(rel.removeprefix("/")) else None
        if root is not None and f.group == "out" and not undo:
            root = next((p for p in path.parents if p == ws.out or _key(ws, p / MANIFEST) in keys), None)
            root = root or next((p for p in path.parents if (p / MANIFEST).is_file()), None)
        if root is None or root not in path.parents or linked_folder(root, path.relative_to(root).as_posix()):
            raise ValueError(f"it names {f.key}, which is no file pq writes in its folders")


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() else None
    except OSError:
        return None


class Writes:
    """The file writes and ref moves of one command, applied through the journal."""

    def __init__(self, ws: Workspace, command: str, *, undoable: bool = False) -> None:
        self.ws = ws
        self.command = command
        self.undoable = undoable
        self._files: dict[Path, tuple[str, bytes | None]] = {}
        self._refs: dict[str, tuple[str | None, str | None]] = {}

    def write(self, path: Path, data: bytes | None, *, group: str) -> None:
        """Make ``path`` hold ``data`` (None: remove it); the last call for a path wins."""
        assert group in GROUPS, group
        self._files[path.absolute()] = (group, data)

    def move_refs(self, updates: dict[str, tuple[str | None, str | None]]) -> None:
        """Ref moves (old, new); a ref moved twice keeps its first old value."""
        for name, (old, new) in updates.items():
            if name in (REF_JOURNAL, REF_UNDO):
                continue  # the journal's own refs
            if name in self._refs:
                old = self._refs[name][0]
            self._refs[name] = (old, new)

    def commit(self) -> None:
        """Apply the writes (see the module's docstring).  A file or object that cannot be written (a full
        disk, a file size limit, a read-only folder) is one line naming it: with everything put back as it
        was, or, where even that failed, with the journal left for `pq abort`."""
        try:
            self._commit()
        except _Unwritable as exc:
            raise exc.error(self.ws) from None

    def _commit(self) -> None:
        repo = self.ws.repo
        again = f"make room (or make it writable) and run `pq {self.command}` again"
        unchanged = f"nothing was changed; {again}"

        def blob(data: bytes | None) -> str | None:  # an object that cannot be stored: one line, from the repo
            return None if data is None else repo.write_blob(data)

        changed = []
        for path, (group, data) in sorted(self._files.items(), key=lambda kv: (GROUPS.index(kv[1][0]), str(kv[0]))):
            old = _read(path)
            if old != data:
                _refuse_unreplaceable(self.ws, path, group, remove=data is None)
                changed.append((path, group, old, data))
        files = [_File(_key(self.ws, path), group, blob(old), blob(data)) for path, group, old, data in changed]
        refs = {k: v for k, v in sorted(self._refs.items()) if v[0] != v[1]}
        if not files and not refs:
            return
        if self.undoable:
            files.append(self._undo_record(files, refs, blob))
        for name, (expected, _new) in refs.items():  # before the journal, so that a moved ref changes nothing
            current = repo.ref(name)
            if current != expected:
                raise QueueError(
                    f"{name} moved underneath pq (expected {expected}, found {current}); nothing was "
                    "written, retry the command",
                    path=self.ws.rel(repo.gitdir / name),
                )
        # the saved contents are reachable from a ref while the journal lives: `git gc` keeps them
        saved = [b for f in files for b in (f.old, f.new) if b is not None]
        holder = repo.commit(
            repo.tree_of_blobs(saved),
            [],
            f"pq journal: the saved files of `pq {self.command}`\n",
            _JOURNAL_PERSON,
            _JOURNAL_PERSON,
        )
        repo.update_refs({REF_JOURNAL: (repo.ref(REF_JOURNAL), holder)}, f"pq {self.command}: journal")
        if self.undoable:
            refs[REF_UNDO] = (repo.ref(REF_UNDO), holder)
        journal = {
            "version": VERSION,
            "command": self.command,
            "pid": os.getpid(),
            "files": [{"path": f.key, "group": f.group, "old": f.old, "new": f.new} for f in files],
            "refs": [{"ref": k, "old": o, "new": n} for k, (o, n) in refs.items()],
        }
        path = self.ws.state_dir / JOURNAL_FILE
        try:
            atomic_write(path, json_bytes(journal, indent=1), durable=True)
        except OSError as exc:
            _drop_holder(self.ws)
            raise _Unwritable(path, exc, unchanged) from None
        kill_point("after-journal")
        try:
            _apply(self.ws, files, refs, forward=True, message=f"pq {self.command}")
        except Exception as failed:
            # an error while writing (a git ref lock, a full disk, a bug) with this process still alive: undo
            # what was written and drop the journal, which is only needed when the process dies part way
            try:
                _apply(self.ws, files, refs, forward=False, message=f"pq {self.command} (undone)")
            except Exception:
                if isinstance(failed, _Unwritable):  # the journal stays: `pq abort` / `pq continue` finish the job
                    failed.after = (
                        "what was written could not be put back: `pq abort` puts every file and ref back as it "
                        f"was (or, with room made, `pq continue` finishes the writes of `pq {self.command}`)"
                    )
                raise failed from None
            path.unlink()
            _drop_holder(self.ws)
            if isinstance(failed, _Unwritable):
                failed.after = f"everything was put back as it was; {again}"
            raise
        path.unlink()
        _drop_holder(self.ws)

    def _undo_record(
        self,
        files: list[_File],
        refs: dict[str, tuple[str | None, str | None]],
        blob: Callable[[bytes | None], str | None],
    ) -> _File:
        """The write of .git/pq/undo.json that lets `pq undo` put ``files`` and ``refs`` back (the store only where
        `pq resolutions drop` moved it, or an undo of that)."""
        dropping = self.command in ("resolutions drop", "undo", "redo")
        record = {
            "version": VERSION,
            "command": self.command,
            "files": [{"path": f.key, "group": f.group, "old": f.old, "new": f.new} for f in files],
            "refs": [{"ref": k, "old": o, "new": n} for k, (o, n) in refs.items() if k != _RESOLUTIONS or dropping],
        }
        path = self.ws.state_dir / UNDO_FILE
        return _File(_key(self.ws, path), "state", blob(_read(path)), blob(json_bytes(record, indent=1)))


def _refuse_unreplaceable(ws: Workspace, path: Path, group: str, *, remove: bool) -> None:
    """One line, before anything is written, for a file of the work tree (or an output folder) that pq must not
    replace: ``patches/`` files are the user's, written through a symbolic link; the output folder is pq's, where
    a link is refused (see :func:`patch_queue.fsutil.unreplaceable`).  ``.git/pq/`` is pq's own."""
    key = _key(ws, path)
    if key.startswith("git:"):
        return
    problem = unreplaceable(path, follow=group == "patches", remove=remove)
    if problem is not None:
        raise QueueError(problem, path=key.partition(":")[2])


class _Unwritable(Exception):
    """A file (or the object store) that could not be written, why, and what that left."""

    def __init__(self, path: Path, exc: OSError, after: str = "") -> None:
        super().__init__(f"{path}: {exc}")
        self.path, self.exc, self.after = path, exc, after

    def error(self, ws: Workspace) -> QueueError:
        why = self.exc.strerror or str(self.exc)
        return QueueError(f"cannot be written ({why}){'; ' + self.after if self.after else ''}", path=ws.rel(self.path))


# only grows but by `pq resolutions drop`: `pq undo` leaves it otherwise
_RESOLUTIONS = namespace.refs() + "resolutions"


@dataclass(frozen=True)
class Undo:
    """What ``.git/pq/undo.json`` says the last undoable command wrote."""

    command: str
    files: list[_File]
    refs: dict[str, tuple[str | None, str | None]]


def last_undoable(ws: Workspace) -> Undo | None:
    path = ws.state_dir / UNDO_FILE
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
        files = [_File(str(f["path"]), str(f["group"]), f["old"], f["new"]) for f in value["files"]]
        _foreign(ws, files, undo=True)
        return Undo(str(value["command"]), files, {str(r["ref"]): (r["old"], r["new"]) for r in value["refs"]})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise QueueError(f"unreadable undo record ({exc}); pq cannot undo", path=ws.rel(path)) from None


def undo_writes(ws: Workspace, undo: Undo, command: str, *, restore: dict[Path, bytes | None]) -> Writes:
    """The writes that put back what ``undo`` changed; refuses (one line naming it) a file or ref changed since.

    ``restore``: edited files to drop (``--discard``), with what pq wrote there; they are not checked.
    """
    repo = ws.repo
    writes = Writes(ws, command, undoable=True)
    for path, data in restore.items():
        writes.write(path, data, group="out")
    dropped = {p.resolve() for p in restore}
    for f in undo.files:
        path = _path(ws, f.key)
        data = _read(path)
        if path.resolve() not in dropped and (None if data is None else repo.blob_id(data)) != f.new:
            raise QueueError(
                f"changed since `pq {undo.command}`; pq undoes the last command only while what it wrote is "
                "unchanged: nothing was written",
                path=ws.rel(path),
            )
        if f.old is not None and not repo.has_object(f.old):
            raise QueueError(f"the saved contents ({f.old}) are gone from the object store", path=ws.rel(path))
        writes.write(path, None if f.old is None else repo.read_blob(f.old), group=f.group)
    for name, (_old, new) in undo.refs.items():
        if repo.ref(name) != new:
            raise QueueError(
                f"{name} moved since `pq {undo.command}`; pq undoes the last command only while what it wrote is "
                "unchanged: nothing was written",
                path=ws.rel(repo.gitdir / name),
            )
    writes.move_refs({name: (new, old) for name, (old, new) in undo.refs.items()})
    return writes


def read(ws: Workspace) -> tuple[str, list[_File], dict[str, tuple[str | None, str | None]]] | None:
    """(command, files, refs) of the journal an interrupted command left, or None."""
    path = ws.state_dir / JOURNAL_FILE
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
        if not isinstance(value, dict) or value.get("version") != VERSION:
            raise ValueError("not a pq journal of format 1")
        files = [_File(str(f["path"]), str(f["group"]), f["old"], f["new"]) for f in value["files"]]
        _foreign(ws, files, undo=False)
        refs = {str(r["ref"]): (r["old"], r["new"]) for r in value["refs"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise QueueError(
            f"unreadable pq journal ({exc}); compare patches/ and refs/pq/ by hand, then delete it", path=ws.rel(path)
        ) from None
    return str(value.get("command", "?")), files, refs


def recover(ws: Workspace, *, forward: bool) -> str | None:
    """Finish (``forward``) or undo the writes of an interrupted command; its name, or None without a journal."""
    journal = read(ws)
    if journal is None:
        return None
    command, files, refs = journal
    verb = "continue" if forward else "abort"
    try:
        _apply(ws, files, refs, forward=forward, message=f"pq {verb} (interrupted {command})")
    except _Unwritable as exc:
        exc.after = f"the journal is kept: make room (or make it writable) and run `pq {verb}` again"
        raise exc.error(ws) from None
    (ws.state_dir / JOURNAL_FILE).unlink()
    _drop_holder(ws)
    return command


def _drop_holder(ws: Workspace) -> None:
    current = ws.repo.ref(REF_JOURNAL)
    if current is not None:
        ws.repo.update_refs({REF_JOURNAL: (current, None)}, "pq: journal done")


def _apply(
    ws: Workspace, files: list[_File], refs: dict[str, tuple[str | None, str | None]], *, forward: bool, message: str
) -> None:
    """Move every file and ref from its old value to its new one (backwards: the other way), checking first."""
    repo = ws.repo
    todo: list[tuple[Path, _File, str | None]] = []
    for f in files:
        src, dst = (f.old, f.new) if forward else (f.new, f.old)
        path = _path(ws, f.key)
        data = _read(path)
        current = None if data is None else repo.blob_id(data)
        if current == dst:
            continue
        if current != src:
            raise QueueError(
                "changed since the interrupted pq command started writing; put it back as it was "
                f"(or delete {ws.rel(ws.state_dir / JOURNAL_FILE)} to leave everything as it is)",
                path=ws.rel(path),
            )
        if dst is not None and not repo.has_object(dst):
            raise QueueError(
                f"the saved contents ({dst}) are gone from the object store; restore the file by hand",
                path=ws.rel(path),
            )
        todo.append((path, f, dst))
    moves: dict[str, tuple[str | None, str | None]] = {}
    for name, (old, new) in refs.items():
        src, dst = (old, new) if forward else (new, old)
        current = repo.ref(name)
        if current == dst:
            continue
        if current != src:
            raise QueueError(
                f"{name} changed since the interrupted pq command started writing (expected {src}, "
                f"found {current}); nothing was written",
                path=ws.rel(ws.repo.gitdir / name),
            )
        moves[name] = (src, dst)
    # patches/, then the refs, then the output folder, then .git/pq/ state; a rollback goes back the same way
    steps = ("patches", "refs", "out", "state")
    for step in steps if forward else tuple(reversed(steps)):
        if step == "refs":
            if moves:
                repo.update_refs(moves, message)
            kill_point("after-refs")
            continue
        batch = [(p, f, dst) for p, f, dst in todo if f.group == step]
        for i, (path, _f, dst) in enumerate(batch):
            try:
                if dst is None:
                    path.unlink(missing_ok=True)
                else:
                    atomic_write(written_path(path), repo.read_blob(dst))
            except OSError as exc:
                raise _Unwritable(path, exc) from None
            if i == 0:
                kill_point(f"mid-write-{step}")
    for path, _f, _dst in todo:  # an output folder left empty goes too
        parent = path.parent
        if path.exists() or not parent.is_dir() or any(parent.iterdir()) or parent in (ws.root, ws.state_dir):
            continue
        if _key(ws, parent).startswith("work:"):
            parent.rmdir()
