"""A release's archive: chosen once, downloaded into the cache, verified by sha256 on every use, read.

The choice of archive for ``NAME==VERSION`` (:func:`.registry.pick_file`) is pinned in
``dist/NAME==VERSION.json`` beside the archive, so a release that was read once resolves again
without the network.  A cached archive whose sha256 differs from its record is checked against the index:
where the index gives the file's sha256, the record was wrong and is fixed; else the file is fetched again.
A wheel is a zip and is read member by member; an sdist (tar.gz) has no index,
so it is unpacked once into ``unpacked/<sha256>.zip`` and read from there.  A file a snapshot read is
kept in ``derived/member/`` by the archive's sha256 and its path.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import re
import tarfile
import zipfile
import zlib
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from patch_queue.errors import SourceError
from patch_queue.fsutil import atomic_write
from patch_queue.progress import Progress, say, timed
from patch_queue.sources import registry
from patch_queue.sources.cache import cache_dir, code_stamp, derived_get, derived_key, derived_put, typed


@dataclass(frozen=True)
class Pinned:
    """A release's chosen archive, verified, held in memory (so later reads see verified bytes)."""

    project: str
    version: str
    filename: str
    sha256: str
    data: bytes


@timed("download")
def fetch_release(name: str, version: str, progress: Progress | None) -> Pinned:
    """Download (or take from the cache) the archive of one release and verify its sha256."""
    project = registry.normalize_name(name)
    parsed = registry.parse_version(version)
    if parsed is None:
        raise SourceError(f"'{version}' is not a valid version in {project}=={version}")
    canon = parsed.text
    pin_path = cache_dir() / "dist" / f"{project}=={canon}.json"

    # A release's files are immutable on the registry, so the choice made once is reused and a
    # pinned release resolves without the network; the sha256 is still checked on every use.
    dist = _recorded(pin_path, parsed)
    if dist is None:
        files = registry.project_files(project)
        dist = registry.pick_file(d for d in files if d.version.key == parsed.key)
        if dist is None:
            newest = registry.newest_version(files)
            hint = f"newest on the registry: {newest}" if newest else "no such package on the registry"
            raise SourceError(f"unknown release {project}=={canon} ({hint})")

    archive = pin_path.parent / dist.filename
    data: bytes | None = None
    if archive.is_file():
        data = archive.read_bytes()
        actual = hashlib.sha256(data).hexdigest()
        if dist.sha256 is not None and actual != dist.sha256:
            # the record or the file is wrong: the index says which (the record is fixed, or the file fetched again)
            listed = _listed(project, dist, pin_path, actual)
            if listed.sha256 == actual:
                say(
                    progress,
                    f"warning: {pin_path} recorded sha256 {dist.sha256} for {dist.filename}, which the index and the "
                    f"cached file give as {actual}; the record is fixed",
                )
            else:
                say(
                    progress,
                    f"warning: cached {archive} fails its sha256 check (expected {listed.sha256}, got {actual});"
                    " downloading it again",
                )
                data = None
            dist = listed
    if data is None:
        actual = registry.download(dist, archive, progress)
        data = archive.read_bytes()
        if hashlib.sha256(data).hexdigest() != actual:
            raise SourceError(f"{archive} changed while it was being read; run the command again")
    sha256 = dist.sha256 or hashlib.sha256(data).hexdigest()
    record = {"filename": dist.filename, "url": dist.url, "sha256": sha256, "kind": dist.kind}
    with suppress(OSError, ValueError):
        if json.loads(pin_path.read_text()) == record:
            return Pinned(project, canon, dist.filename, sha256, data)
    with suppress(OSError):  # a read-only cache chooses again next time
        atomic_write(pin_path, json.dumps(record).encode())
    return Pinned(project, canon, dist.filename, sha256, data)


class _Record(TypedDict):
    filename: str
    url: str
    sha256: str
    kind: str


def _recorded(pin_path: Path, version: registry.Version) -> registry.DistFile | None:
    """The archive the record ``pin_path`` chose for the release; None when there is none, or when it is damaged
    or names no archive file of ``dist/`` (another shape, a path that leads elsewhere: pq downloads into and reads
    ``dist/`` only): the archive is chosen again."""
    try:
        pin = typed(_Record, json.loads(pin_path.read_bytes()))
    except (OSError, ValueError, RecursionError):
        return None
    name, kind = pin["filename"], pin["kind"]
    if kind not in ("wheel", "sdist") or not name.endswith((".whl", ".tar.gz")) or clean_member(name) != name:
        return None
    if "/" in name or not re.fullmatch(r"[0-9a-f]{64}", pin["sha256"]):
        return None
    return registry.DistFile(name, pin["url"], pin["sha256"], version, kind, False)


def _listed(project: str, dist: registry.DistFile, pin_path: Path, actual: str) -> registry.DistFile:
    """The index's entry for the pinned archive's file (its sha256 as the index gives it now); one line naming
    the record when the index cannot be read or no longer lists the file."""
    try:
        listed = next((d for d in registry.project_files(project) if d.filename == dist.filename), None)
    except SourceError as exc:
        raise SourceError(
            f"records sha256 {dist.sha256} for {dist.filename}, which the cached file ({actual}) does not match, "
            f"and the index that would tell which is right cannot be read ({exc.message}); delete the record to "
            "choose the archive again",
            path=str(pin_path),
        ) from None
    if listed is None:
        raise SourceError(
            f"records {dist.filename}, which the index no longer lists; delete the record to choose the archive again",
            path=str(pin_path),
        )
    return listed if listed.sha256 is not None else dist


def release_files(name: str, version: str, prefix: str, progress: Progress | None = None) -> dict[str, bytes]:
    """``{relative path: bytes}`` of the release's files under ``prefix``, from its (cached) archive."""
    return archive_members(fetch_release(name, version, progress), prefix)


# -- reading an archive ----------------------------------------------------------------------


# what reading a member of a damaged zip raises (a CRC, a cut file, a compression method or a stream zlib does not
# know): for the unpacked copy of an sdist, a miss (it is made again from the verified archive)
_DAMAGED = (zipfile.BadZipFile, zlib.error, NotImplementedError, EOFError, ValueError, OSError)


def clean_member(name: str) -> str:
    """A safe relative path, or "" for names that would escape the archive's root."""
    name = posixpath.normpath(name.replace("\\", "/")).lstrip("/")
    return "" if name in ("", ".", "..") or name.startswith("../") else name


def _open_zip(pinned: Pinned) -> zipfile.ZipFile | None:
    """A wheel, or the cached unpacked copy of an sdist (None when there is none)."""
    return zipfile.ZipFile(io.BytesIO(pinned.data)) if pinned.filename.endswith(".whl") else _open_index(pinned)


def _zip_names(archive: zipfile.ZipFile) -> dict[str, str]:
    """``{clean relative path: member name}`` of the regular files of a zip, in its order."""
    return {
        name: info.filename
        for info in archive.infolist()
        if (name := clean_member(info.filename)) and not info.is_dir()
    }


def archive_members(pinned: Pinned, prefix: str) -> dict[str, bytes]:
    """The regular files of an archive under ``prefix``; an sdist's top folder is stripped."""
    try:
        archive = _open_zip(pinned)
        if archive is not None:
            with archive:
                try:
                    return {
                        name: archive.read(member)
                        for name, member in _zip_names(archive).items()
                        if name.startswith(prefix)
                    }
                except _DAMAGED:  # a damaged member (CRC, a method zlib does not know): unpack the archive again
                    if pinned.filename.endswith(".whl"):
                        raise
                    _index_path(pinned).unlink(missing_ok=True)
        members = _unpack_sdist(pinned)
        _write_index(pinned, members)
        return {name: data for name, data in members.items() if name.startswith(prefix)}
    except (*_DAMAGED, tarfile.TarError) as exc:
        raise SourceError(f"cannot read archive {pinned.filename} (pinned sha256 {pinned.sha256[:12]}): {exc}") from exc


def _unpack_sdist(pinned: Pinned) -> dict[str, bytes]:
    """Every regular file of a verified sdist, its top folder stripped (one pass over the tar.gz)."""
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(pinned.data), mode="r:gz") as sdist:
        for member in sdist:
            # sdists hold "<name>-<version>/..."; the project root is that folder.
            name = clean_member(member.name.split("/", 1)[1] if "/" in member.name else "")
            handle = sdist.extractfile(member) if member.isfile() and name else None
            if handle is not None:
                members[name] = handle.read()
    return members


def _index_path(pinned: Pinned) -> Path:
    return cache_dir() / "unpacked" / f"{pinned.sha256}.zip"


def _open_index(pinned: Pinned) -> zipfile.ZipFile | None:
    """The cached unpacked copy of a verified sdist (a zip: random access and a CRC per member), or
    None; a copy that is damaged or made from other bytes is dropped and made again."""
    path = _index_path(pinned)
    try:
        index = zipfile.ZipFile(path)
    except FileNotFoundError:
        return None
    except (OSError, zipfile.BadZipFile):
        path.unlink(missing_ok=True)
        return None
    if index.comment == pinned.sha256.encode():
        return index
    index.close()
    path.unlink(missing_ok=True)
    return None


def _write_index(pinned: Pinned, members: dict[str, bytes]) -> None:
    """Keep the unpacked sdist, so later reads skip decompressing the whole tar.gz (0.8 s for vllm-ascend)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as index:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            index.writestr(info, members[name], compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
        index.comment = pinned.sha256.encode()
    with suppress(OSError):  # a read-only cache only costs time
        atomic_write(_index_path(pinned), buffer.getvalue())


class ArchiveReader:
    """Reads a verified archive for a :class:`~patch_queue.sources.snapshot.Snapshot`.  A wheel is a
    zip: members are read on demand.  A tar.gz has no index: its files are read from the cached
    unpacked copy (a zip, see :func:`_open_index`), made on first use."""

    def __init__(self, pinned: Pinned) -> None:
        self.filename = pinned.filename
        self._pinned = pinned
        self._zip: zipfile.ZipFile | None = None
        self._names: dict[str, str] | None = None  # clean relative path -> zip member name, once loaded
        self._members: dict[str, bytes] | None = None  # every file, when there is no zip to read them from

    def _load(self) -> dict[str, str]:
        if self._names is None:
            try:
                self._zip = _open_zip(self._pinned)
            except zipfile.BadZipFile as exc:
                raise SourceError(f"cannot read archive {self.filename}: {exc}") from exc
            if self._zip is None:
                self._members = archive_members(self._pinned, "")
                self._names = {}
            elif self.filename.endswith(".whl"):
                self._names = _zip_names(self._zip)
            else:  # pq's unpacked copy holds clean relative paths (_write_index); another name is not pq's
                self._names = {name: name for name in self._zip.namelist() if clean_member(name) == name}
        return self._names

    def read(self, path: str) -> bytes | None:
        """The file at ``path`` (None: no such file), kept in the derived cache by the archive's sha256: a
        later read skips opening the archive, whose index alone (an sdist's unpacked copy holds some 5,000
        files) takes longer to read than the file."""
        key = derived_key(code_stamp("sources/archives.py"), self._pinned.sha256, path)
        kept = derived_get("member", key)
        if kept is not None:
            return kept
        data = self._read(path)
        if data is not None:
            derived_put("member", key, data)
        return data

    def _read(self, path: str) -> bytes | None:
        member = self._load().get(path)
        if self._members is not None:
            return self._members.get(path)
        if member is None or self._zip is None:
            return None
        try:
            return self._zip.read(member)
        except _DAMAGED:
            if self.filename.endswith(".whl"):
                raise SourceError(f"cannot read {member} from {self.filename}") from None
            # the cached unpacked copy is damaged (CRC): drop it and read the verified archive
            self._zip = None
            _index_path(self._pinned).unlink(missing_ok=True)
            self._members = archive_members(self._pinned, "")
            return self._members.get(path)

    def list_files(self, prefix: str) -> list[str]:
        names = self._load()  # an sdist not unpacked yet: loading reads its members
        return sorted(name for name in (names if self._members is None else self._members) if name.startswith(prefix))
