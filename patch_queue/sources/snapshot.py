"""Upstream sources behind one interface: registry releases, git commits and plain directories.

Everything a source yields is pinned: a release by its archive's sha256, a commit by its full
sha, so a spec printed by pq (``Snapshot.spec``) resolves to the same bytes again
(:func:`resolve_upstream`).  Releases come from the package registry (:mod:`.registry`,
:mod:`.archives`); commits from a mirror of the upstream repository kept in the cache
(:func:`open_git`, :class:`~patch_queue.git.remote.UpstreamGit`); a damaged mirror (a ref or pack cut short,
objects gone) is cloned again once, with a line saying so (:func:`heal_mirror`).
"""

from __future__ import annotations

import gc
import hashlib
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from patch_queue.errors import SourceError, without_userinfo
from patch_queue.git import mirror_health
from patch_queue.git.remote import UpstreamGit, normalize_location
from patch_queue.progress import Progress, say, timed
from patch_queue.sources import archives, registry
from patch_queue.sources.cache import cache_dir
from patch_queue.spec import QueueSpec

# -- readers: where a snapshot's files come from ---------------------------------------------


class _Reader(Protocol):
    def read(self, path: str) -> bytes | None: ...

    def list_files(self, prefix: str) -> list[str]: ...


@dataclass(frozen=True)
class _GitReader:
    repo: UpstreamGit
    commit: str

    def read(self, path: str) -> bytes | None:
        return self.repo.read(self.commit, path)

    def list_files(self, prefix: str) -> list[str]:
        return self.repo.list_files(self.commit, prefix)


@dataclass(frozen=True)
class _DirReader:
    """Files on disk; ``mount`` is prepended when the directory is the package folder itself."""

    root: Path
    mount: str

    def read(self, path: str) -> bytes | None:
        if not path.startswith(self.mount):
            return None
        disk = self.root / path[len(self.mount) :]
        return disk.read_bytes() if disk.is_file() else None

    def list_files(self, prefix: str) -> list[str]:
        files: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            # Caches and VCS folders are never source.
            dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__")]
            rel = Path(dirpath).relative_to(self.root).as_posix()
            base = self.mount + ("" if rel == "." else rel + "/")
            files.extend(base + f for f in filenames if (base + f).startswith(prefix))
        return sorted(files)


# -- snapshots -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """One pinned state of the upstream source tree, read by project-relative paths."""

    kind: Literal["git", "release", "dir"]
    spec: str
    pin: str
    label: str
    _reader: _Reader = field(repr=False, compare=False, hash=False)
    public_commit: str | None = None

    def _check(self, path: str) -> str:
        clean = archives.clean_member(path)
        if not clean:
            raise SourceError(f"not a relative path inside {self.spec}", path=path)
        return clean

    def read(self, path: str) -> bytes:
        data = self._reader.read(self._check(path))
        if data is None:
            raise SourceError(f"no such file in {self.spec}", path=path)
        return data

    def exists(self, path: str) -> bool:
        try:
            return self._reader.read(self._check(path)) is not None
        except SourceError:
            return False

    def list_files(self, prefix: str = "") -> list[str]:
        return self._reader.list_files(prefix.lstrip("/"))


def release_snapshot(name: str, version: str, progress: Progress | None = None) -> Snapshot:
    """The snapshot of a registry release (wheel or sdist), verified by sha256."""
    pinned = archives.fetch_release(name, version, progress)
    return Snapshot(
        kind="release",
        spec=f"{pinned.project}=={pinned.version}",
        pin=f"{pinned.filename}#sha256={pinned.sha256}",
        label=f"{pinned.project} {pinned.version}",
        _reader=archives.ArchiveReader(pinned),
    )


def dir_snapshot(path: str | Path, spec: QueueSpec) -> Snapshot:
    """A directory on disk: a project root holding the upstream's package (``spec``'s),
    or that folder itself."""
    package = spec.upstream_package
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise SourceError(f"no such directory {root}")
    # Pointed at the package folder itself: present it where a project root would hold it.
    is_package = root.name == package or (root / spec.upstream_file.split("/", 1)[-1]).is_file()
    mount = package + "/" if is_package and not (root / package).is_dir() else ""
    return Snapshot(
        kind="dir",
        spec=f"dir:{root}",
        pin="",
        label=f"dir {root}",
        _reader=_DirReader(root, mount),
    )


def _looks_like_upstream(path: Path, spec: QueueSpec) -> bool:
    package = spec.upstream_package
    return (path / package).is_dir() or path.resolve().name == package


def git_snapshot(repo: UpstreamGit, ref: str, progress: Progress | None = None) -> Snapshot:
    """A commit of the upstream repository, by any ref :meth:`UpstreamGit.resolve` accepts.

    A ref or commit the mirror cannot give, where ``git fsck`` finds the mirror damaged, is read again from a
    new clone (once: :func:`heal_mirror`)."""
    try:
        sha = repo.resolve(ref)
        public = repo.public_commit(sha)
    except (SourceError, OSError, ValueError, KeyError) as failed:  # KeyError etc.: pygit2 on a corrupt store
        why = mirror_health.fsck_damage(repo.path)
        if why is None or repo.path in _healed:
            if isinstance(failed, SourceError):
                raise
            raise SourceError(f"cannot read {ref}: {failed}", path=str(repo.path)) from None
        repo = heal_mirror(repo.location, repo.path, why, progress)
        sha = repo.resolve(ref)
        public = repo.public_commit(sha)
    return Snapshot(
        kind="git",
        spec=f"git:{repo.location}@{sha}",
        pin=sha,
        label=f"git {public[:12]}",  # the public commit: the same label (and patch text) from every mirror
        public_commit=public,
        _reader=_GitReader(repo, sha),
    )


# -- the upstream repository -----------------------------------------------------------------


def upstream_git_location(upstream_git: str | None, spec: QueueSpec) -> str:
    """Where the upstream history lives: the argument, else ``PQ_UPSTREAM_GIT``, else the public repository of the
    queue ``spec``.  A queue that names no git history ("": its registry releases are
    its history) has none but the argument's: ``PQ_UPSTREAM_GIT`` stands in for a queue's repository, and the
    environment of a machine that keeps two queues names one of them."""
    queue = spec
    if not queue.upstream_git:
        return upstream_git or ""
    return upstream_git or os.environ.get("PQ_UPSTREAM_GIT") or queue.upstream_git


_open_repos: dict[tuple[str, Path], UpstreamGit] = {}


def open_git(location: str, progress: Progress | None = None) -> UpstreamGit:
    """The upstream repository at ``location`` (URL, local repository or bundle), cloned into the cache.

    One instance per location and process, so a local location is fetched once per run.
    """
    normalized = normalize_location(location)
    key = hashlib.sha1(without_userinfo(normalized).encode()).hexdigest()[:16]  # one mirror whatever the credential
    path = cache_dir() / "git" / f"{key}.git"
    repo = _open_repos.get((normalized, path))
    if repo is None or not path.is_dir():
        with timed("download"):  # a clone, or a fetch when the local source changed
            why = mirror_health.damage(path) if path.is_dir() else None
            if why is not None:
                return heal_mirror(normalized, path, why, progress)
            repo = UpstreamGit(normalized, path, progress=progress)
        _open_repos[(normalized, path)] = repo
    return repo


_healed: set[Path] = set()  # the mirrors cloned again in this process (each once)


def heal_mirror(location: str, path: Path, why: str, progress: Progress | None = None) -> UpstreamGit:
    """Clone the damaged mirror at ``path`` again from ``location``, saying so (once per process and mirror:
    a second failure is the source's, and is reported as it is)."""
    import shutil

    _healed.add(path)
    say(progress, f"warning: the cached mirror {path} is damaged ({why}); cloning {location} again")
    shutil.rmtree(path, ignore_errors=True)
    # libgit2 keeps a pack open by its path while a repository that read it lives: the damaged mirror's are
    # garbage by now, some in reference cycles, and must be gone before the clone at that path is read
    gc.collect()
    with timed("download"):
        repo = UpstreamGit(location, path, progress=progress)
    _open_repos[(location, path)] = repo
    return repo


# -- specs -----------------------------------------------------------------------------------


def _is_folder(spec: str, queue: QueueSpec) -> bool:
    """An existing folder named as one: a path (``/``, ``.``, ``~``; one holding ``==`` too: ``x==1/vllm_ascend`` is
    that folder, never a release), or a bare word naming the upstream's package folder; a bare word that happens to
    name a folder in the working directory ("main") is a ref."""
    return os.path.isdir(spec) and (
        spec.startswith(("/", ".", "~")) or "==" in spec or _looks_like_upstream(Path(spec), queue)
    )


def named_release(spec: str | None, queue: QueueSpec) -> tuple[str, registry.Version] | None:
    """The registry release an upstream spec names, as :func:`resolve_upstream` reads it (``None``/``"latest"``: the
    newest release of the queue's upstream, from the index), without downloading it; None for a folder, a commit or
    a ref."""
    if spec is None or spec.strip() in ("", "latest"):
        newest = registry.parse_version(registry.newest_release(queue.upstream_dist))
        return None if newest is None else (queue.upstream_dist, newest)
    spec = spec.strip()
    if spec.startswith(("git:", "dir:")) or _is_folder(spec, queue):
        return None
    return registry.parse_release(spec)


def _no_repository(location: str) -> bool:
    """True for a URL that names no repository (no path): what is left of ``git:URL`` without its ``@REF`` when it
    splits at an "@" of the URL's own user information."""
    try:
        return "://" in location and not urllib.parse.urlsplit(location).path.strip("/")
    except ValueError:  # no URL at all: the transport says so
        return False


def resolve_upstream(
    spec: str | None,
    *,
    upstream_git: str | None = None,
    progress: Progress | None = None,
    queue: QueueSpec,
) -> Snapshot:
    """Resolve an upstream spec of the queue ``queue`` to a pinned snapshot.

    ``None``/``"latest"``: the newest release of the queue's upstream; ``NAME==VERSION``: that release;
    ``dir:PATH`` or an existing directory: files on disk; ``git:LOCATION@REF``: a commit there;
    anything else: a ref, a (possibly abbreviated) commit, or a public upstream sha (matched by
    the ``Upstream-Commit`` trailer) in the upstream git repository.
    """
    if spec is None or spec.strip() in ("", "latest"):
        return release_snapshot(queue.upstream_dist, registry.newest_release(queue.upstream_dist), progress)
    spec = spec.strip()
    try:
        spec.encode("utf-8")
    except UnicodeEncodeError as exc:  # a path of bytes that are not UTF-8: queue.toml could not record it
        raw = spec.encode("utf-8", "surrogateescape")
        raise SourceError(
            f"upstream spec '{raw.decode('utf-8', 'backslashreplace')}' is not UTF-8 text (byte "
            f"0x{raw[exc.start]:02x} at {exc.start}), and queue.toml records it: rename the folder"
        ) from None
    if spec.startswith("git:"):
        location, at, ref = spec[4:].rpartition("@")
        if not at or not location or not ref:
            raise SourceError(f"malformed upstream spec '{spec}': expected git:<location>@<ref>")
        if _no_repository(location):  # split inside a password: the spec is not shown
            raise SourceError(
                "malformed upstream spec: expected git:<location>@<ref>, and its URL names no repository (a '/', "
                "'?' or '#' in a password is percent-encoded: %2F, %3F, %23)"
            )
        return git_snapshot(open_git(location, progress), ref, progress)
    if spec.startswith("dir:"):
        return dir_snapshot(spec[4:], queue)
    if _is_folder(spec, queue):
        return dir_snapshot(spec, queue)
    release = registry.parse_release(spec)
    if release is not None:
        return release_snapshot(release[0], release[1].text, progress)
    if registry.RELEASE_SPEC.match(spec):
        raise SourceError(f"'{spec}' is neither a release NAME==VERSION (VERSION a PEP 440 version) nor a folder")
    location = upstream_git_location(upstream_git, queue)
    if not location:
        raise SourceError(
            f"'{spec}' is neither a release NAME==VERSION nor a folder, and the queue names no git history of "
            f"{queue.upstream_dist} to read a ref in (its releases are its history): name a release, or a repository "
            "with --upstream"
        )
    return git_snapshot(open_git(location, progress), spec, progress)
