"""pq's cache folder: downloads, git mirrors and results derived from them, each checked before use.

The folder is ``PQ_CACHE``, else ``$XDG_CACHE_HOME/pq``, else ``~/.cache/pq``.  Everything in it can
be made again, so a damaged or unwritable cache only costs time:

* ``dist/``, ``unpacked/``: release archives and their unpacked copies (:mod:`.archives`);
* ``git/``: mirror clones of the upstream repository (:func:`.snapshot.open_git`);
* ``methods/``: the methods of every upstream revision ``pq adopt`` scanned (:class:`MethodCache`);
* ``derived/``: results computed from immutable inputs, named by a hash of those inputs and of the
  code that computed them (:func:`derived_get`, :func:`derived_put`, :func:`code_stamp`).

``methods/`` and ``derived/`` are *sealed* files: the sha256 of the entry's name (its kind and key) and its
body, a newline, the body; an entry whose sha256 does not match (damaged, or moved from another name) is a
miss.  A sealed body is read back only through a door that checks its shape (:func:`derived_json`: JSON of
the types the code wrote, :func:`derived_text`: UTF-8 text): an entry of another shape is a miss too, never a
crash, and the result is computed again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import types
import typing
from pathlib import Path
from typing import Any

from patch_queue.errors import SourceError


def cache_dir() -> Path:
    """The download cache: ``PQ_CACHE``, else ``$XDG_CACHE_HOME/pq``, else ``~/.cache/pq``."""
    explicit = os.environ.get("PQ_CACHE")
    found = (Path(explicit) if explicit else Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "pq").expanduser()
    if found.exists() and not found.is_dir():
        variable = "PQ_CACHE" if explicit else "XDG_CACHE_HOME"
        raise SourceError(f"the download cache ({variable}) is not a folder; point it at one", path=str(found))
    return found.resolve()


def code_stamp(*modules: str) -> str:
    """A sha256 of pq's own source files (``"series/fmt.py"``, ``"git/remote.py"``): derived results name the
    code that made them, so a changed pq never reads a stale one."""
    here = Path(__file__).parents[1]
    return hashlib.sha256(b"".join((here / name).read_bytes() for name in modules)).hexdigest()


# -- sealed files ------------------------------------------------------------------------------


def _seal(name: str, body: bytes) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\0" + body).hexdigest().encode()


def read_sealed(path: Path, name: str) -> bytes | None:
    """The body of a cache file written by :func:`write_sealed` under ``name``; None when absent, damaged or
    written under another name."""
    try:
        digest, _nl, body = path.read_bytes().partition(b"\n")
    except OSError:
        return None
    return body if _seal(name, body) == digest else None


def write_sealed(path: Path, name: str, body: bytes) -> bool:
    """Write a cache file as the sha256 of ``name`` and ``body``, a newline and ``body``, atomically; False when
    it cannot be written (a read-only cache is only slower)."""
    from patch_queue.fsutil import atomic_write

    try:
        atomic_write(path, _seal(name, body) + b"\n" + body)
    except OSError:
        return False
    return True


def typed(hint: Any, value: object) -> Any:
    """``value`` (parsed JSON) as the type ``hint`` names: ``str``, ``int``, ``bool``, ``None``, ``object`` (any),
    a union of them, ``tuple[X, ...]``, ``tuple[X, Y]``, ``list[X]``, ``dict[str, X]``, a ``TypedDict`` (every
    key) or a dataclass (an object of its fields; JSON lists as tuples); ValueError when it is of another shape.
    How a cache entry is read: what the code wrote comes back as it was, anything else is a miss."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is object:
        return value
    if hint is None or hint is type(None):
        if value is None:
            return None
    elif origin in (typing.Union, types.UnionType):
        for arg in args:
            try:
                return typed(arg, value)
            except ValueError:
                continue
    elif hint in (str, int, bool):
        if type(value) is hint:
            return value
    elif origin is tuple and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(typed(args[0], item) for item in value)
        if len(args) == len(value):
            return tuple(typed(arg, item) for arg, item in zip(args, value, strict=True))
    elif origin is list and isinstance(value, list):
        return [typed(args[0], item) for item in value]
    elif origin is dict and isinstance(value, dict):
        return {typed(args[0], k): typed(args[1], v) for k, v in value.items()}
    elif typing.is_typeddict(hint) and isinstance(value, dict):
        hints = typing.get_type_hints(hint)
        if set(value) == set(hints):
            return {k: typed(hints[k], v) for k, v in value.items()}
    elif dataclasses.is_dataclass(hint) and isinstance(hint, type) and isinstance(value, dict):
        hints = typing.get_type_hints(hint)
        fields = dataclasses.fields(hint)
        required = {
            f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        if required <= set(value) <= {f.name for f in fields}:
            return hint(**{k: typed(hints[k], v) for k, v in value.items()})
    raise ValueError(f"not of the shape {hint}")


# -- derived results ---------------------------------------------------------------------------


def derived_key(*parts: str | bytes) -> str:
    """The cache key of a derived result: a sha256 over its inputs (each part length-prefixed)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def _derived_path(kind: str, key: str) -> Path:
    return cache_dir() / "derived" / kind / key[:2] / key


def derived_get(kind: str, key: str) -> bytes | None:
    """A result computed earlier from the inputs ``key`` names, or None (absent, damaged or another's)."""
    return read_sealed(_derived_path(kind, key), f"{kind}/{key}")


def derived_json(kind: str, key: str, hint: Any) -> tuple[Any] | None:
    """The JSON result kept under ``key``, as the type ``hint`` (see :func:`typed`), in a 1-tuple (a kept
    ``null`` is an answer too); None when absent, damaged or of another shape."""
    body = derived_get(kind, key)
    if body is None:
        return None
    try:
        return (typed(hint, json.loads(body)),)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, another shape; nested past Python's stack
        return None


def derived_text(kind: str, key: str) -> str | None:
    """The text result kept under ``key``; None when absent, damaged or not UTF-8."""
    body = derived_get(kind, key)
    try:
        return None if body is None else body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def derived_put(kind: str, key: str, data: bytes) -> None:
    """Keep a result for :func:`derived_get` (:func:`derived_json`, :func:`derived_text`)."""
    write_sealed(_derived_path(kind, key), f"{kind}/{key}", data)


# -- scanned methods of upstream revisions ---------------------------------------------------


class _Methods(typing.TypedDict):
    format: int
    scanner: str
    texts: dict[str, str]
    blobs: dict[str, dict[str, str]]


class MethodCache:
    """The methods of a class in upstream file revisions, by blob id, kept in the download cache.

    ``pq adopt`` scans every revision of the upstream file that upstream ever had (700+): reading
    and scanning them is most of its search.  Blobs are named by their content, so a scan never
    goes stale; the file records the scanner's own source hash and a sha256 of its body, so a
    changed scanner or a damaged file starts the cache afresh.
    """

    FORMAT = 1

    def __init__(self, cls: str) -> None:
        self.path = cache_dir() / "methods" / f"{cls}.json"
        self._name = f"methods/{cls}"
        self._scanner = code_stamp("merge/symbols.py")[:16]
        self._texts: dict[str, str] = {}
        self._blobs: dict[str, dict[str, str]] = {}
        self._dirty = False
        self._known: dict[str, str] | None = None
        body = read_sealed(self.path, self._name)
        try:  # a cache of another shape (or another scanner's) starts afresh
            data = typed(_Methods, json.loads(body)) if body is not None else None
        except (ValueError, RecursionError):
            data = None
        if data is not None and data["format"] == self.FORMAT and data["scanner"] == self._scanner:
            self._texts, self._blobs = data["texts"], data["blobs"]

    def get(self, blob: str) -> dict[str, str] | None:
        try:
            return {name: self._texts[key] for name, key in self._blobs[blob].items()}
        except KeyError:
            return None

    def has(self, blob: str) -> bool:
        return blob in self._blobs

    def put(self, blob: str, methods: dict[str, str]) -> None:
        if self._known is None:  # text -> key: most methods repeat from revision to revision, hash them once
            self._known = {text: key for key, text in self._texts.items()}
        names: dict[str, str] = {}
        for name, text in methods.items():
            key = self._known.get(text)
            if key is None:
                key = self._known[text] = hashlib.sha1(text.encode("utf-8")).hexdigest()
                self._texts[key] = text
            names[name] = key
        self._blobs[blob] = names
        self._dirty = True

    def save(self) -> None:
        """Write the cache if anything was added (atomically; a read-only cache is only slower)."""
        if not self._dirty:
            return
        body = json.dumps(
            {"format": self.FORMAT, "scanner": self._scanner, "texts": self._texts, "blobs": self._blobs},
            sort_keys=True,
        ).encode("utf-8")
        self._dirty = not write_sealed(self.path, self._name, body)
