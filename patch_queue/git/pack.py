"""Objects written as one pack file instead of a loose file each: a replay's many near-identical module texts.

A replay writes, per patch, a blob of every module it changed (the whole text again, a line or two
different from the last), a tree and a commit.  As loose objects each blob is compressed whole;
here each is a delta against the text written before it at the same path (``OFS_DELTA``: the common
head and tail copied, the middle inserted), and only that delta is compressed.  A chain is at most
:data:`DEPTH` deltas long (then the text is stored whole again), so a later read stays cheap.

The pack (format 2) and its index (version 2) are written as git writes them: a temporary file in
``objects/pack``, read-only, renamed to ``pack-<sha1 of the pack>``; the ``.pack`` first, so a
reader never finds an index without its pack.  The objects are the same objects, with the same ids,
as loose ones would be.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import tempfile
import zlib
from pathlib import Path

DEPTH = 16  # the longest chain of deltas (git packs with at most 50)
LEVEL = 1  # zlib's level, as libgit2's loose objects
_KINDS = {"commit": 1, "tree": 2, "blob": 3}
_OFS_DELTA = 6
_CHUNK = 0xFFFF00  # the longest copy of one delta instruction (below 2**24)
_DELTA_LIMIT = 1 << 24  # texts this long or longer are stored whole


def object_id(kind: str, data: bytes) -> bytes:
    """git's id of an object of ``kind`` holding ``data`` (raw 20 bytes)."""
    digest = hashlib.sha1(b"%s %d\0" % (kind.encode(), len(data)))
    digest.update(data)
    return digest.digest()


def _type_size(kind: int, size: int) -> bytes:
    """The head of a pack entry: its type and its (inflated) size."""
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def _varint(n: int) -> bytes:
    """A size in a delta's head: 7 bits a byte, least significant first."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _distance(n: int) -> bytes:
    """How far back an ``OFS_DELTA``'s base starts, in git's encoding (most significant first, each
    continuation one more)."""
    out = [n & 0x7F]
    n >>= 7
    while n:
        n -= 1
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    return bytes(reversed(out))


def _copy(offset: int, size: int) -> bytes:
    op, args = 0x80, bytearray()
    for i in range(4):
        byte = (offset >> (8 * i)) & 0xFF
        if byte:
            op |= 1 << i
            args.append(byte)
    for i in range(3):
        byte = (size >> (8 * i)) & 0xFF
        if byte:
            op |= 1 << (4 + i)
            args.append(byte)
    return bytes([op]) + bytes(args)


def _copies(offset: int, size: int) -> list[bytes]:
    return [_copy(at, min(_CHUNK, offset + size - at)) for at in range(offset, offset + size, _CHUNK)]


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    lo, hi = 0, limit
    while lo < hi:  # by halving: each comparison is one memcmp
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid : len(a) - lo] == b[len(b) - mid : len(b) - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def delta(base: bytes, target: bytes) -> bytes | None:
    """A git delta that makes ``target`` from ``base`` (their common head and tail copied, the rest inserted);
    None when it would not be much smaller than ``target``."""
    if len(base) >= _DELTA_LIMIT or len(target) >= _DELTA_LIMIT:
        return None
    limit = min(len(base), len(target))
    head = _common_prefix(base, target, limit)
    tail = _common_suffix(base, target, limit - head)
    middle = target[head : len(target) - tail]
    if len(middle) * 2 > len(target):
        return None
    out = [_varint(len(base)), _varint(len(target)), *_copies(0, head)]
    out += [bytes([len(middle[i : i + 127])]) + middle[i : i + 127] for i in range(0, len(middle), 127)]
    out += _copies(len(base) - tail, tail)
    return b"".join(out)


class Pack:
    """Objects to write as one pack: each entry is compressed when it is added (memory: the compressed
    entries only)."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 12  # the pack's head
        self.where: dict[bytes, tuple[int, int, int]] = {}  # raw id -> (offset, crc32 of the entry, delta depth)

    def __len__(self) -> int:
        return len(self.where)

    def add(self, kind: str, oid: bytes, data: bytes, base: tuple[bytes, bytes] | None = None) -> None:
        """Object ``oid`` of ``kind`` holding ``data``; ``base`` (id, data): an object of this pack to store it
        as a delta of, when that helps."""
        if oid in self.where:
            return
        entry, depth = None, 0
        if base is not None and base[0] in self.where:
            offset, _crc, depth = self.where[base[0]]
            made = delta(base[1], data) if depth < DEPTH else None
            if made is not None:
                entry = _type_size(_OFS_DELTA, len(made)) + _distance(self._size - offset) + zlib.compress(made, LEVEL)
                depth += 1
        if entry is None:
            entry, depth = _type_size(_KINDS[kind], len(data)) + zlib.compress(data, LEVEL), 0
        self.where[oid] = (self._size, zlib.crc32(entry), depth)
        self._chunks.append(entry)
        self._size += len(entry)

    def write(self, folder: Path) -> str:
        """The pack and its index written into ``folder`` (``objects/pack``); the pack's name."""
        head = b"PACK" + struct.pack(">II", 2, len(self.where))
        digest = hashlib.sha1(head)
        for chunk in self._chunks:
            digest.update(chunk)
        trailer = digest.digest()
        ids = sorted(self.where)
        fan = [0] * 256
        for oid in ids:
            fan[oid[0]] += 1
        total = 0
        for i, count in enumerate(fan):
            total += count
            fan[i] = total
        small: list[int] = []
        large: list[int] = []
        for oid in ids:
            offset = self.where[oid][0]
            if offset < 0x80000000:
                small.append(offset)
            else:
                small.append(0x80000000 | len(large))
                large.append(offset)
        index = b"".join(
            [
                b"\xfftOc",
                struct.pack(">I", 2),
                struct.pack(">256I", *fan),
                *ids,
                struct.pack(f">{len(ids)}I", *(self.where[oid][1] for oid in ids)),
                struct.pack(f">{len(small)}I", *small),
                struct.pack(f">{len(large)}Q", *large),
                trailer,
            ]
        )
        index += hashlib.sha1(index).digest()
        name = f"pack-{trailer.hex()}"
        folder.mkdir(parents=True, exist_ok=True)
        _write(folder / f"{name}.pack", [head, *self._chunks, trailer])
        _write(folder / f"{name}.idx", [index])
        return name


def _write(path: Path, chunks: list[bytes]) -> None:
    """``chunks`` into ``path`` through a temporary file beside it, read-only (as git leaves a pack)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="tmp_pack_")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
