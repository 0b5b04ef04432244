"""A conflict or a review flag: the one representation, from the merge to the report.

The merge makes one per region (:func:`patch_queue.merge.three_way.merge3`), the replay names
its patch, file and symbol, the culprit search adds the upstream commits, the refresh state and
the report store it as JSON (:meth:`Conflict.as_json`), and both read it back through
:meth:`Conflict.from_json`, which takes missing keys as empty and refuses a key of the wrong type
with a ``ValueError`` naming it.  Instances are frozen: a later step makes a changed copy
(:func:`dataclasses.replace`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

_T = TypeVar("_T")


class ConflictKind(StrEnum):
    """What a conflict or a review flag is: its text is the ``kind`` of the refresh state, the report and the
    terminal (a ``StrEnum``: the member is that text).  Conflicts first, then flags, in the report's table order
    (:data:`patch_queue.outputs.report_parts.KIND_ORDER`); a kind read from JSON that is none of these stays
    its text."""

    # conflicts
    BOTH_CHANGED = "both-changed"
    UPSTREAM_CHANGED_REPLACED = "upstream-changed-replaced"
    ANCHOR_LOST = "anchor-lost"
    BOTH_ADDED_SAME = "both-added-same"
    NAME_LINKED = "name-linked"
    SYMBOL_REMOVED = "symbol-removed"
    DELETED_FILE = "deleted-file"
    # review flags
    BOTH_INSERTED = "both-inserted"
    ALREADY_UPSTREAM = "already-upstream"
    KEPT_REPLACEMENT = "kept-replacement"
    BLOCK_MOVED = "block-moved"
    NEAR_BLOCK = "near-block"
    REUSED = "reused"
    MERGED_WORDS = "merged-words"
    MERGED_TOKENS = "merged-tokens"
    LAYOUT_ONLY = "layout-only"
    COMMENT_ONLY = "comment-only"
    REFORMATTED = "reformatted"
    RECORDED_EDITS = "recorded-edits"
    IMPORT_ADDED = "import-added"
    IMPORT_STALE = "import-stale"
    IMPORT_REMOVED = "import-removed"
    API_REPLACED = "api-replaced"
    RELOCATED = "relocated"
    GPU_SYNCED = "gpu-synced"
    GPU_PROPOSED = "gpu-proposed"
    GPU_UNPLACED = "gpu-unplaced"


@dataclass(frozen=True)
class Culprit:
    """One upstream commit, named by its public sha."""

    commit: str
    subject: str
    pr: int | None
    date: str

    def as_json(self) -> dict[str, object]:
        return {"commit": self.commit, "subject": self.subject, "pr": self.pr, "date": self.date}


@dataclass(frozen=True)
class Anchor:
    """The omni block a region belongs to: its index in the file, its first line, and its first meaningful
    line (stripped) for humans; ``fenced``: a fenced block (the merge anchors to no other kind)."""

    index: int | None
    line: int | None
    first: str
    fenced: bool = True

    def as_json(self) -> dict[str, object]:
        return {"index": self.index, "line": self.line, "text": self.first}


@dataclass(frozen=True)
class Conflict:
    """A region left for a human (``conflict``) or a decision the tool took on its own (a review flag)."""

    kind: str  # a ConflictKind (its text), or a kind from JSON that is none of them
    message: str = ""
    conflict: bool = True
    base: str | None = None  # the three sides; None when the region has none (a deleted file)
    ours: str | None = None  # the new upstream
    theirs: str | None = None  # the omni patch
    line: int | None = None  # 1-based: the "<<<<<<<" marker of a conflict, the first line of a flag's region
    length: int = 0  # lines the region spans in the merged text
    resolution: str | None = None  # what the tool wrote (flags)
    key: str = ""  # identifies the region for recorded resolutions
    anchor: Anchor | None = None
    reused: bool = False
    group: int = -1  # which hunk group of the merge it is (merge-internal)
    patch: str = ""
    file: str = ""
    symbol: str = ""  # Class.method (or top-level name) enclosing the region, "" at module level
    culprits: tuple[Culprit, ...] = ()
    # the regions of one merge (patch and file) that share a link go together: take the same side in each;
    # ``name:x`` (one binds ``x``, another reads it), ``call:c`` (each may make the call ``c``)
    links: tuple[str, ...] = ()

    @property
    def sides(self) -> dict[str, str]:
        named = (("base", self.base), ("upstream", self.ours), ("patch", self.theirs))
        return {name: text for name, text in named if text is not None}

    def as_json(self, *, report: bool = False) -> dict[str, object]:
        """The JSON of the refresh state; ``report``: of the refresh report (no ``conflict``, which
        the list it is in says, and no ``resolution`` for a conflict)."""
        data: dict[str, object] = {
            "patch": self.patch,
            "file": self.file,
            "line": self.line,
            "symbol": self.symbol,
            "kind": self.kind,
            "message": self.message,
            "anchor": self.anchor.as_json() if self.anchor else None,
            "sides": self.sides,
            "culprits": [c.as_json() for c in self.culprits],
            "reused": self.reused,
            "key": self.key,
            "links": list(self.links),
        }
        if not report:
            data["conflict"] = self.conflict
        if not (report and self.conflict):
            data["resolution"] = self.resolution
        return data

    @classmethod
    def from_json(cls, raw: object, where: str, *, conflict: bool = True) -> Conflict:
        """Read :meth:`as_json`; ``conflict`` when the data does not say."""
        data = mapping(raw, where)
        anchor = None
        if data.get("anchor") is not None:
            aw = f"{where}.anchor"
            a = mapping(data["anchor"], aw)
            anchor = Anchor(integer(a, "index", aw), integer(a, "line", aw), string(a, "text", aw))
        culprits = []
        for i, c_raw in enumerate(listing(data, "culprits", where)):
            cw = f"{where}.culprits[{i}]"
            c = mapping(c_raw, cw)
            culprits.append(
                Culprit(string(c, "commit", cw), string(c, "subject", cw), integer(c, "pr", cw), string(c, "date", cw))
            )
        sides = mapping(data.get("sides"), f"{where}.sides")
        side = {n: _read(sides, n, f"{where}.sides", str, "a string") for n in ("base", "upstream", "patch")}
        is_conflict = boolean(data, "conflict", where, conflict)
        return cls(
            kind=_kind(string(data, "kind", where) or ("conflict" if is_conflict else "flag")),
            message=string(data, "message", where),
            conflict=is_conflict,
            base=side["base"],
            ours=side["upstream"],
            theirs=side["patch"],
            line=integer(data, "line", where),
            resolution=_read(data, "resolution", where, str, "a string"),
            key=string(data, "key", where),
            anchor=anchor,
            reused=boolean(data, "reused", where, False),
            patch=string(data, "patch", where),
            file=string(data, "file", where),
            symbol=string(data, "symbol", where),
            culprits=tuple(culprits),
            links=tuple(_strings(data, "links", where)),
        )


# reading JSON: missing keys are empty, a wrong type is a ValueError naming the key


def wrong(where: str, expected: str, value: object) -> ValueError:
    return ValueError(f"report {where}: expected {expected}, got {type(value).__name__}")


def _read(data: Mapping[str, object], key: str, where: str, kind: type[_T], expected: str) -> _T | None:
    """``data[key]``, None when missing or null; a ValueError when it is not a ``kind`` (a bool is no integer)."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise wrong(f"{where}.{key}", expected, value)
    return value


def string(data: Mapping[str, object], key: str, where: str) -> str:
    return _read(data, key, where, str, "a string") or ""


def integer(data: Mapping[str, object], key: str, where: str) -> int | None:
    return _read(data, key, where, int, "an integer")


def boolean(data: Mapping[str, object], key: str, where: str, default: bool) -> bool:
    value = _read(data, key, where, bool, "true or false")
    return default if value is None else value


def mapping(value: object, where: str) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise wrong(where, "an object", value)
    return value


def listing(data: Mapping[str, object], key: str, where: str) -> list[object]:
    return _read(data, key, where, list, "a list") or []


def _strings(data: Mapping[str, object], key: str, where: str) -> list[str]:
    items = listing(data, key, where)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise wrong(f"{where}.{key}[{i}]", "a string", item)
    return [str(item) for item in items]


def _kind(text: str) -> str:
    """The :class:`ConflictKind` of ``text``, or ``text`` when it is none."""
    try:
        return ConflictKind(text)
    except ValueError:
        return text
