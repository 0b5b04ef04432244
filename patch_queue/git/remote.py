"""The upstream git repository: a bare mirror clone in the cache, read through pygit2.

The upstream may be a URL, a local repository or a ``.bundle`` file (the offline corpus ships one
whose history was filtered to ``vllm_ascend/``, so its hashes differ from the public repository's
and every commit carries an ``Upstream-Commit: <public sha>`` trailer).  Cloning and fetching go
through the git command line (:mod:`patch_queue.git.command`: the git binary knows every transport
and the bundle format); objects are read with pygit2, which is much faster than a process per blob.

A URL's credentials (``https://user:token@host/...``) never land in a file nor in a line pq prints:
the location is kept, shown, recorded and keyed without its user information (as git prints a URL),
the mirror's remote URL is stored so, and the credential reaches the git process alone, as an
``http.<url>.extraHeader`` (HTTP Basic, what git sends for such a URL) in its environment
(:func:`transport`).  A credential git finds itself (``~/.netrc``, a credential helper) works as usual.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import urllib.parse
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import suppress
from itertools import takewhile
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from patch_queue.errors import SourceError, without_userinfo
from patch_queue.fsutil import atomic_write, unwritable_cache
from patch_queue.git import command
from patch_queue.progress import Progress, bar, say

_HEX = re.compile(r"^[0-9a-fA-F]+$")
_SHA = re.compile(r"[0-9a-f]{40}")
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_TRAILER = re.compile(r"^Upstream-Commit:[ \t]*([0-9a-fA-F]{7,40})[ \t]*$", re.MULTILINE)
# A URL (scheme://...) or git's scp-like "user@host:path" syntax; anything else is a local path.
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|[^/@:]+@[^/:]+:)")


def is_url(location: str) -> bool:
    """True when ``location`` is fetched over a transport rather than read from the local disk."""
    return _URL.match(location) is not None and not location.startswith("file://")


def normalize_location(location: str) -> str:
    """The canonical spelling of a location: URLs as given, local paths absolute and resolved."""
    if _URL.match(location):
        return location
    return str(Path(location).expanduser().resolve())


def transport(location: str) -> tuple[str, dict[str, str]]:
    """What git is given for ``location``: the URL, without a password (an http(s) URL without its user
    information), and the environment that carries the credential to that process only (an
    ``http.<url>.extraHeader`` of HTTP Basic through ``GIT_CONFIG_COUNT``, after the caller's own)."""
    try:
        parts = urllib.parse.urlsplit(location) if "://" in location else None
        if parts is not None:
            parts.port  # noqa: B018  (a port that is not a number raises here, not in git's message)
    except ValueError as exc:  # the location is never shown: a password with a "/" reads as the host's port
        why = "its port is not a number" if "port" in str(exc).lower() else "it is not a URL"
        raise SourceError(f"the upstream git location is a URL git cannot read: {why}") from None
    if parts is None or "@" not in parts.netloc:
        return location, {}
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    if parts.scheme.lower() not in ("http", "https"):  # ssh://user@host: the user name is no secret, git needs it
        return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host)), {}
    url = urllib.parse.urlunsplit(parts._replace(netloc=host))
    token = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode()
    count = os.environ.get("GIT_CONFIG_COUNT", "0")
    n = int(count) if count.isdigit() else 0
    return url, {
        "GIT_CONFIG_COUNT": str(n + 1),
        f"GIT_CONFIG_KEY_{n}": f"http.{url}.extraHeader",
        f"GIT_CONFIG_VALUE_{n}": "Authorization: Basic " + base64.b64encode(token).decode("ascii"),
    }


class UpstreamGit:
    """One upstream repository, mirrored (all branches and tags) into a bare clone in the cache."""

    def __init__(self, location: str, path: Path, *, progress: Progress | None = None) -> None:
        self._remote, self._env = transport(normalize_location(location))
        self.location = without_userinfo(self._remote)  # shown and recorded: no user information
        self.path = path
        self._progress = progress
        self._fetched = False
        self._touching: dict[tuple[str, str], list[str]] = {}
        self._trailers: tuple[str, dict[str, str], list[str]] | None = None
        if self._valid_clone():
            if not is_url(self.location) and self._source_stamp() != _read(self.path / "pq-source-stamp"):
                # Local paths and bundles are cheap to fetch from, so keep the mirror current
                # (skipped while the source is unchanged: a fetch costs a git process, ~0.1 s).
                self.fetch()
        else:
            self._clone()
        self._repo = pygit2.Repository(str(self.path))

    # -- clone and fetch -------------------------------------------------------------------

    def _valid_clone(self) -> bool:
        return (self.path / "HEAD").is_file() and (self.path / "objects").is_dir()

    def _unreadable(self, reason: str) -> SourceError:
        # offline, the public repository is out of reach: say where a local copy is named
        # (a corpus names its bundles after the repository: vllm-ascend.git -> ../shared/corpus/vllm-ascend.bundle)
        bundle = self.location.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git") + ".bundle"
        hint = (
            f"; offline? set PQ_UPSTREAM_GIT (or --upstream) to a local clone or bundle of it, such as "
            f"../shared/corpus/{bundle}"
            if is_url(self.location)
            else ""
        )
        return SourceError(f"cannot read upstream git repository {self.location}: {reason}{hint}")

    def _clone(self) -> None:
        if not is_url(self.location) and not Path(self.location.removeprefix("file://")).exists():
            raise self._unreadable("no such file or directory")
        try:
            if self.path.exists():
                # A leftover that is not a usable clone (e.g. emptied by hand): start over.
                shutil.rmtree(self.path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            for stale in self.path.parent.glob(f".tmp-{self.path.name}-*"):
                # Left by a clone that was killed; an hour-old one cannot still be running usefully.
                if time.time() - stale.stat().st_mtime > 3600:
                    shutil.rmtree(stale, ignore_errors=True)
            # Clone beside the final place and rename, so an interrupted clone never looks like a cache hit.
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{self.path.name}-", dir=self.path.parent))
        except OSError as exc:
            raise unwritable_cache(self.path.parent, exc, "the upstream mirror") from None
        say(self._progress, f"Cloning {self.location} into {self.path}")
        try:
            with bar("Cloning") as shown:
                # git reports its phases only to a bar that shows: elsewhere it runs as it always did
                on_phase = (lambda phase, done, total: shown.update(done, total, what=phase)) if shown.shown else None
                command.clone_mirror(self._remote, tmp / "repo.git", progress=on_phase, env=self._env)
            try:
                os.rename(tmp / "repo.git", self.path)
            except OSError:
                if not self._valid_clone():  # not a concurrent clone that won the race
                    raise
        except command.GitFailed as exc:
            raise self._unreadable(exc.reason) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._fetched = True

    def _source_stamp(self) -> str | None:
        """What a local source looks like now: a bundle's size and mtime, a repository's refs; None for
        a URL or a source that cannot be read (then the mirror is fetched)."""
        local = Path(self.location.removeprefix("file://"))
        try:
            if local.is_file():
                st = local.stat()
                return f"bundle {st.st_size} {st.st_mtime_ns}"
            source = pygit2.Repository(str(local))
            refs = sorted(f"{name} {source.references[name].target}" for name in source.references)
            return "refs " + hashlib.sha256("\n".join(refs).encode()).hexdigest()
        except (OSError, pygit2.GitError, KeyError, ValueError):
            return None

    def fetch(self) -> None:
        """Bring the mirror up to date (all refs, pruning deleted ones)."""
        stamp = None if is_url(self.location) else self._source_stamp()
        try:
            command.run(self.path, "fetch", "--prune", "--quiet", "origin", env=self._env)
        except command.GitFailed as exc:
            if not self._valid_clone():
                raise self._unreadable(exc.reason) from None
            # The cached mirror still answers everything it knew; say why it may be stale.
            say(self._progress, f"warning: cannot fetch {self.location} ({exc.reason}); using the cached clone")
        else:
            with suppress(OSError):  # a read-only cache fetches every time
                if stamp is not None:
                    (self.path / "pq-source-stamp").write_text(stamp)
        self._fetched = True
        self._touching.clear()
        self._trailers = None

    # -- refs ------------------------------------------------------------------------------

    def tip_key(self) -> str:
        """A digest of every ref and its target: caches keyed by it die with any ref change."""
        digest = hashlib.sha1()
        for name in sorted(self._repo.references):
            ref = self._repo.references[name]
            try:
                target = str(ref.resolve().target)
            except (KeyError, pygit2.GitError):
                continue
            digest.update(f"{name} {target}\n".encode())
        return digest.hexdigest()

    def _revparse(self, ref: str) -> str | None:
        # A mirror has no remote-tracking refs: "origin/releases/x" is the branch "releases/x".
        for candidate in dict.fromkeys([ref, ref.removeprefix("origin/")]):
            try:
                obj = self._repo.revparse_single(candidate)
                return str(obj.peel(pygit2.Commit).id)
            except ValueError as exc:
                if "ambiguous" in str(exc).lower():
                    raise SourceError(f"ambiguous upstream ref '{ref}' in {self.location}") from None
            except (KeyError, pygit2.GitError, TypeError):
                pass
        return None

    def _resolve_once(self, ref: str) -> str | None:
        if _FULL_SHA.match(ref) and pygit2.Oid(hex=ref) in self._repo:
            obj = self._repo[ref]
            return str(obj.id) if isinstance(obj, pygit2.Commit) else None
        return self._revparse(ref) or self.find_public(ref)

    def resolve(self, ref: str) -> str:
        """The 40-hex commit for a branch, tag, local sha (abbreviated or not) or public sha."""
        ref = ref.strip()
        sha = self._resolve_once(ref) if ref else None
        if sha is None and is_url(self.location) and not self._fetched:
            # A URL is fetched only on a miss: the ref may be newer than the mirror.
            self.fetch()
            sha = self._resolve_once(ref)
        if sha is None:
            raise SourceError(f"unknown upstream ref '{ref}' in {self.location}")
        return sha

    # -- history ---------------------------------------------------------------------------

    def _cache_file(self, kind: str) -> Path:
        return self.path.parent / f"{self.path.name.removesuffix('.git')}.{kind}.json"

    def _load_cache(self, kind: str, tips: str, field: str) -> dict[str, object] | None:
        """The ``field`` of the cache file of ``kind`` when it was made for these ``tips``."""
        try:
            loaded = json.loads(self._cache_file(kind).read_text())
        except (OSError, ValueError):
            return None
        value = loaded.get(field) if isinstance(loaded, dict) and loaded.get("tips") == tips else None
        return value if isinstance(value, dict) else None

    def commits_touching(self, path: str) -> list[str]:
        """Every commit reachable from any ref that changed ``path``, newest first (topological)."""
        tips = self.tip_key()
        commits = self._touching.get((path, tips))
        if commits is None:
            paths = self._load_cache("touching", tips, "paths") or {}
            stored = paths.get(path)
            if isinstance(stored, list) and all(
                isinstance(s, str) and _SHA.fullmatch(s) and s in self._repo for s in stored
            ):
                commits = list(stored)  # (commits of the mirror only: another shape is a miss)
            else:
                # git's own log is the reference answer (history simplification, topo order); it is fast.
                out = command.run(self.path, "log", "--all", "--topo-order", "--format=%H", "--", path)
                commits = out.decode().split()
                _write_json(self._cache_file("touching"), {"tips": tips, "paths": {**paths, path: commits}})
            self._touching[(path, tips)] = commits
        return list(commits)

    def commits_with_blob(self, path: str, blob: str) -> list[str]:
        """The commits reachable from any ref that made ``path`` the blob ``blob``, oldest first: of the commits
        that changed it (:meth:`commits_touching`), those whose file is that blob, merges aside (what
        ``git log --raw`` lists: it shows no diff for a merge), read from their trees."""
        found = []
        for sha in self.commits_touching(path):
            commit = self._commit(sha)
            if len(commit.parents) <= 1 and (held := _file(commit.tree, path)) is not None and str(held.id) == blob:
                found.append(sha)
        return found[::-1]

    def newest_date(self) -> str:
        """The date (YYYY-MM-DD, UTC) of the newest commit of any ref: where the history ends."""
        out = command.run(self.path, "log", "--all", "-1", "--format=%cs")
        return out.decode().strip()

    def commits_between(self, old: str, new: str, path: str) -> list[str]:
        """The commits reachable from ``new`` and not from ``old`` whose blob of ``path`` differs from their
        first parent's, oldest first (topological, then by time)."""
        sort = pygit2.enums.SortMode
        walker = self._repo.walk(pygit2.Oid(hex=new), sort.TOPOLOGICAL | sort.TIME | sort.REVERSE)
        walker.hide(pygit2.Oid(hex=old))
        found: list[str] = []
        for commit in walker:
            if _file(commit.tree, path) != (_file(commit.parents[0].tree, path) if commit.parents else None):
                found.append(str(commit.id))
        return found

    def _commit(self, commit: str) -> pygit2.Commit:
        try:
            obj = self._repo[commit]
        except (KeyError, ValueError) as exc:
            raise SourceError(f"unknown upstream commit '{commit}' in {self.location}") from exc
        if not isinstance(obj, pygit2.Commit):
            raise SourceError(f"'{commit}' is not a commit in {self.location}")
        return obj

    def read(self, commit: str, path: str) -> bytes | None:
        """The file's bytes at ``commit``, or None when the path is absent (or a directory)."""
        blob = _file(self._commit(commit).tree, path)
        return None if blob is None else bytes(blob.data)

    def read_blobs(self, blobs: list[str]) -> Iterator[tuple[str, bytes]]:
        """The contents of many blobs, in the order given, from one ``git cat-file --batch``: git's
        delta-base cache reads a run of revisions of one file 3x faster than libgit2 lookups."""
        if not blobs:
            return
        requests = "".join(f"{b}\n" for b in blobs).encode()
        with command.stream(self.path, "cat-file", "--batch", input=requests) as stdout:
            for blob in blobs:
                header = stdout.readline().decode("utf-8", "replace").split()
                if len(header) != 3 or header[0] != blob or header[1] != "blob":
                    raise SourceError(f"cannot read blob {blob} from {self.path} ({' '.join(header) or 'no output'})")
                data = stdout.read(int(header[2]))
                stdout.read(1)  # the newline after the contents
                yield blob, data

    def blob_id(self, commit: str, path: str) -> str | None:
        """The blob sha of ``path`` at ``commit``: equal ids mean equal content, so it keys caches."""
        blob = _file(self._commit(commit).tree, path)
        return None if blob is None else str(blob.id)

    def public_commit(self, commit: str) -> str:
        """The ``Upstream-Commit`` trailer of a commit (the public sha), else the commit itself."""
        c = self._commit(commit)
        found = _TRAILER.findall(c.message)
        return found[-1].lower() if found else str(c.id)

    def subject(self, commit: str) -> str:
        message: str = self._commit(commit).message
        return message.strip().split("\n", 1)[0].strip()

    def commit_time(self, commit: str) -> int:
        return int(self._commit(commit).commit_time)

    def _trailer_map(self) -> tuple[dict[str, str], list[str]]:
        tips = self.tip_key()
        if self._trailers is None or self._trailers[0] != tips:
            stored = self._load_cache("trailers", tips, "map")
            if stored is not None and not all(isinstance(v, str) and _SHA.fullmatch(v) for v in stored.values()):
                stored = None  # another shape: a miss
            mapping = {str(k): str(v) for k, v in stored.items()} if stored is not None else {}
            if stored is None:
                walker = self._repo.walk(None, pygit2.enums.SortMode.NONE)
                for name in self._repo.references:
                    try:
                        walker.push(self._repo.references[name].peel(pygit2.Commit).id)
                    except (KeyError, ValueError, pygit2.GitError):
                        continue  # a ref to a tree or blob, or a dangling symbolic ref
                for commit in walker:
                    found = _TRAILER.findall(commit.message)
                    if found:
                        mapping.setdefault(found[-1].lower(), str(commit.id))
                _write_json(self._cache_file("trailers"), {"tips": tips, "map": mapping})
            self._trailers = (tips, mapping, sorted(mapping))
        return self._trailers[1], self._trailers[2]

    def find_public(self, prefix: str) -> str | None:
        """The local commit whose ``Upstream-Commit`` trailer starts with ``prefix`` (>= 7 hex chars)."""
        prefix = prefix.strip().lower()
        if len(prefix) < 7 or len(prefix) > 40 or not _HEX.match(prefix):
            return None
        mapping, keys = self._trailer_map()
        if prefix in mapping:
            return mapping[prefix]
        matches = list(takewhile(lambda key: key.startswith(prefix), keys[bisect_left(keys, prefix) :]))
        if len(matches) > 1:
            shown = ", ".join(m[:12] for m in matches[:5])
            raise SourceError(f"ambiguous upstream commit '{prefix}' in {self.location}: matches {shown}")
        return mapping[matches[0]] if matches else None

    def list_files(self, commit: str, prefix: str) -> list[str]:
        """Sorted paths of the files at ``commit`` whose path starts with ``prefix``."""
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        try:
            tree = self._commit(commit).tree[base] if base else self._commit(commit).tree
        except KeyError:
            return []
        if not isinstance(tree, pygit2.Tree):
            return []
        index = pygit2.Index()
        index.read_tree(tree)
        base = base + "/" if base else ""
        return sorted(name for e in index if e.mode != FileMode.COMMIT and (name := base + e.path).startswith(prefix))


def _file(tree: pygit2.Tree, path: str) -> pygit2.Blob | None:
    """The blob at ``path`` in ``tree``; None when the path is absent or not a file."""
    try:
        entry = tree[path.strip("/")]
    except (KeyError, ValueError):
        return None
    return entry if isinstance(entry, pygit2.Blob) else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _write_json(path: Path, data: object) -> None:
    """Write a cache file atomically; a cache that cannot be written is only slower, never wrong."""
    with suppress(OSError):
        atomic_write(path, json.dumps(data).encode())
