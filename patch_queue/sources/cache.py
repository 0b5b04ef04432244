"""pq's cache folder: downloads, git mirrors and results derived from them, each checked before use.

The folder is ``PQ_CACHE``, else ``$XDG_CACHE_HOME/pq``, else ``~/.cache/pq``.  Everything in it can
be made again, so a damaged or unwritable cache only costs time:

* ``dist/``, ``unpacked/``: release archives and their unpacked copies (:mod:`.archives`);
* ``git/``: mirror clones of the upstream repository (:func:`.snapshot.open_git`);
* ``methods/``: the methods of every upstream revision ``pq adopt`` scanned (:class:`MethodCache`);
* ``derived/``: results computed from immutable inputs, named by a hash of those inputs and of the
  code that computed them (:func:`derived_get`, :func:`derived_put`, :func:`code_stamp`).

``methods/`` and ``derived/`` are *sealed* files: the sha256 of the body, a newline, the body; a body
that does not match its sha256 is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import suppress
from pathlib import Path

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


def read_sealed(path: Path) -> bytes | None:
    """The body of a cache file written by :func:`write_sealed`; None when absent or damaged."""
    try:
        digest, _nl, body = path.read_bytes().partition(b"\n")
    except OSError:
        return None
    return body if hashlib.sha256(body).hexdigest().encode() == digest else None


def write_sealed(path: Path, body: bytes) -> bool:
    """Write a cache file as its sha256, a newline and ``body``, atomically; False when it cannot be
    written (a read-only cache is only slower)."""
    from patch_queue.fsutil import atomic_write

    try:
        atomic_write(path, hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    except OSError:
        return False
    return True


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
    """A result computed earlier from the inputs ``key`` names, or None (absent or damaged)."""
    return read_sealed(_derived_path(kind, key))


def derived_put(kind: str, key: str, data: bytes) -> None:
    """Keep a result for :func:`derived_get`."""
    write_sealed(_derived_path(kind, key), data)


# -- scanned methods of upstream revisions ---------------------------------------------------


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
        self._scanner = code_stamp("merge/symbols.py")[:16]
        self._texts: dict[str, str] = {}
        self._blobs: dict[str, dict[str, str]] = {}
        self._dirty = False
        self._known: dict[str, str] | None = None
        body = read_sealed(self.path)
        with suppress(ValueError, KeyError, TypeError, AttributeError):  # a cache of another shape: start afresh
            data = json.loads(body) if body is not None else {}
            if data.get("format") == self.FORMAT and data.get("scanner") == self._scanner:
                self._texts, self._blobs = dict(data["texts"]), dict(data["blobs"])

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
        self._dirty = not write_sealed(self.path, body)
