"""The state of a pending operation, a refresh or a merge that stopped on conflicts: ``.git/pq/refresh.json``,
typed (:class:`Operation`), read and written here only (the machine that runs it:
:mod:`patch_queue.commands.machine`).

It holds what ``pq continue`` needs to go on (the target, the replay so far, every conflict and
flag) and what ``pq abort`` needs to put back (the refs, the output folder, ``queue.toml``).  A merge
(``pq merge``) is the same machine: it replays one patch, the release's change since the release the
series last took in, onto the top of the series; :class:`Merging` holds what it goes into.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from enum import StrEnum

from patch_queue.errors import QueueError, without_userinfo
from patch_queue.fsutil import json_bytes
from patch_queue.merge.conflict import Conflict
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import Workspace
from patch_queue.series.queue import Queue, parse_queue
from patch_queue.series.status import PatchStatus

STATE_FILE = "refresh.json"


class OperationKind(StrEnum):
    """What is pending (its text is the one commands print: "refresh aborted", "pq merge: saved ...")."""

    REFRESH = "refresh"
    MERGE = "merge"


@dataclass(frozen=True)
class Merging:
    """What a pending merge goes into once its one patch is through: the series as it stood (its base and
    patches) and the release it takes in."""

    release: str  # "name==version", or a folder's path
    version: str  # the release's version ("": a folder)
    since: str  # the release the series held before: the merge's ancestor ("name==version"; "" for a folder)
    files: tuple[tuple[str, str], ...]  # (module, sha256) of the release
    base: str  # the series' base commit
    chain: tuple[tuple[str, str], ...]  # the series' patches (name, commit) as they stood

    def as_json(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: object) -> Merging | None:
        if data is None:
            return None
        if not isinstance(data, dict):
            raise ValueError("merging: expected an object")
        texts = [data.get(k) for k in ("release", "version", "since", "base")]
        rows = [data.get(k) for k in ("files", "chain")]
        if not all(isinstance(t, str) for t in texts) or not all(
            isinstance(r, list)
            and all(isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x) for x in r)
            for r in rows
        ):
            raise ValueError("merging: expected release, version, since, base, files and chain")
        release, version, since, base = (str(t) for t in texts)
        files, chain = (tuple((str(x[0]), str(x[1])) for x in r) for r in rows if isinstance(r, list))
        return cls(release, version, since, files, base, chain)


@dataclass(frozen=True)
class Operation:
    """A pending refresh, or merge (``merging``): the one record of it, serialised by :meth:`save`."""

    # what `pq abort` puts back (:func:`patch_queue.commands.machine.start` fills them in)
    orig_refs: dict[str, str] = field(default_factory=dict)  # every ref before the operation
    orig_out: str = ""  # a tree of the output folder before the operation
    orig_queue: str = ""  # queue.toml before the operation
    old_base_label: str = ""
    target_queue: str = ""  # queue.toml of the target (rendered)
    new_base: str = ""  # the new base commit (a merge: the top of the series)
    labels: tuple[str, str] = ("", "")  # (old base label, new base label) of the diff3 markers
    patches: tuple[tuple[str, str], ...] = ()  # (name, commit) of the series before the refresh (a merge: its one)
    done: tuple[tuple[str, str, PatchStatus], ...] = ()  # (name, replayed commit, status) so far
    no_stop: bool = False
    removed_symbols: tuple[str, ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    flags: tuple[Conflict, ...] = ()
    blocks_before: int = 0
    check: bool = True
    check_sources: bool = True
    check_import: bool | None = None  # pq check --import on the result: True asked, None when its environment is built
    upstream_git: str | None = None
    upstream_commits: tuple[str, str] = ("", "")
    recorded: bool = False  # recorded regions or edits were applied: the finished refresh records its edits
    discarded: str = ""  # what --discard dropped
    reports: tuple[str, str] = ("", "")  # the JSON and Markdown reports `pq continue` rewrites ("": none)
    culprits_note: str = ""  # between which upstream commits the culprits were searched, or why not
    # the series is through, but `pq check` found these errors (file, line, rule, message) in the result, at its
    # lines: the refresh waits for them to be fixed (or `pq continue --accept-errors`)
    check_errors: tuple[tuple[str, int, str, str], ...] = ()
    merging: Merging | None = None  # a merge (pq merge), not a refresh

    @property
    def kind(self) -> OperationKind:
        return OperationKind.MERGE if self.merging is not None else OperationKind.REFRESH

    def target(self) -> Queue:
        """The series' queue moved onto the target."""
        return parse_queue(self.target_queue, path=".git/pq/refresh.json")

    def as_json(self) -> dict[str, object]:
        # json writes the tuples as lists
        data: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(version=1, conflicts=[c.as_json() for c in self.conflicts], flags=[c.as_json() for c in self.flags])
        data["merging"] = self.merging.as_json() if self.merging is not None else None
        # --upstream as given, but never its credential: `pq continue` finds the mirror by the URL without it
        data["upstream_git"] = without_userinfo(self.upstream_git) if self.upstream_git is not None else None
        return data

    def bytes(self) -> bytes:
        return json_bytes(self.as_json())

    def save(self, ws: Workspace, writes: Writes) -> None:
        """Write the state (with ``writes``, the step's journaled writes)."""
        writes.write(ws.state_dir / STATE_FILE, self.bytes(), group="state")

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Operation:
        def strings(key: str, n: int) -> tuple[tuple[str, ...], ...]:
            rows = data.get(key, [])
            if not isinstance(rows, list) or not all(
                isinstance(r, list) and len(r) == n and all(isinstance(x, str) for x in r) for r in rows
            ):
                raise ValueError(f"{key}: expected a list of {n} strings each")
            return tuple(tuple(r) for r in rows)

        def text(key: str) -> str:
            value = data.get(key, "")
            if not isinstance(value, str):
                raise ValueError(f"{key}: expected a string")
            return value

        refs = data.get("orig_refs", {})
        if not isinstance(refs, dict) or not all(isinstance(v, str) for v in refs.values()):
            raise ValueError("orig_refs: expected an object of strings")
        git = data.get("upstream_git")
        blocks = data.get("blocks_before", 0)
        return cls(
            orig_refs={str(k): v for k, v in refs.items()},
            orig_out=text("orig_out"),
            orig_queue=text("orig_queue"),
            old_base_label=text("old_base_label"),
            target_queue=text("target_queue"),
            new_base=text("new_base"),
            labels=_pair(data.get("labels"), "labels"),
            patches=tuple((p[0], p[1]) for p in strings("patches", 2)),
            done=tuple((d[0], d[1], _status(d[2])) for d in strings("done", 3)),
            no_stop=bool(data.get("no_stop", False)),
            removed_symbols=tuple(str(s) for s in _list(data.get("removed_symbols"), "removed_symbols")),
            conflicts=tuple(
                Conflict.from_json(c, f"conflicts[{i}]")
                for i, c in enumerate(_list(data.get("conflicts"), "conflicts"))
            ),
            flags=tuple(
                Conflict.from_json(c, f"flags[{i}]", conflict=False)
                for i, c in enumerate(_list(data.get("flags"), "flags"))
            ),
            blocks_before=blocks if isinstance(blocks, int) else 0,
            check=bool(data.get("check", True)),
            check_sources=bool(data.get("check_sources", True)),
            check_import=bool(data["check_import"]) if isinstance(data.get("check_import"), bool) else None,
            upstream_git=git if isinstance(git, str) else None,
            upstream_commits=_pair(data.get("upstream_commits", ["", ""]), "upstream_commits"),
            recorded=bool(data.get("recorded", False)),
            discarded=text("discarded"),
            reports=_pair(data.get("reports", ["", ""]), "reports"),
            culprits_note=text("culprits_note"),
            check_errors=_errors(data.get("check_errors")),
            merging=Merging.from_json(data.get("merging")),
        )


def _status(text: str) -> PatchStatus:
    try:
        return PatchStatus(text)
    except ValueError:
        raise ValueError(f"done: unknown patch status {text!r}") from None


def _list(value: object, key: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{key}: expected a list")
    return value


def _errors(value: object) -> tuple[tuple[str, int, str, str], ...]:
    out = []
    for row in _list(value, "check_errors"):
        if not (
            isinstance(row, list)
            and len(row) == 4
            and isinstance(row[1], int)
            and all(isinstance(row[i], str) for i in (0, 2, 3))
        ):
            raise ValueError("check_errors: expected [file, line, rule, message] each")
        out.append((row[0], row[1], row[2], row[3]))
    return tuple(out)


def _pair(value: object, key: str) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{key}: expected two strings")
    return (value[0], value[-1])


def _read(ws: Workspace) -> dict[str, object] | None:
    path = ws.state_dir / STATE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise QueueError(f"corrupt pq state: {exc}; run `pq abort`", path=str(path)) from None
    if not isinstance(data, dict):
        raise QueueError("corrupt pq state; run `pq abort`", path=str(path))
    return data


def refuse_pending(ws: Workspace, message: str = "a refresh is in progress; `pq continue` or `pq abort` first") -> None:
    """Refuse a command while a refresh (or a merge: the message says so) waits for `pq continue` or `pq abort`
    (a file that is no JSON object is an error naming it)."""
    data = _read(ws)
    if data is not None:
        raise QueueError(message.replace("a refresh", "a merge") if data.get("merging") else message)


def load(ws: Workspace) -> Operation | None:
    """The pending operation, or None; a damaged file is an error naming it."""
    data = _read(ws)
    if data is None:
        return None
    try:
        return Operation.from_json(data)
    except ValueError as exc:
        raise QueueError(f"corrupt pq state: {exc}; run `pq abort`", path=str(ws.state_dir / STATE_FILE)) from None


def require(ws: Workspace) -> Operation:
    state = load(ws)
    if state is None:
        raise QueueError("no refresh or merge in progress")
    return state


def clear(ws: Workspace, writes: Writes) -> None:
    """Remove the state (with ``writes``): the operation is over."""
    writes.write(ws.state_dir / STATE_FILE, None, group="state")
