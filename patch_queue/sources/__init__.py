"""Upstream sources behind one interface: registry releases, git commits and plain directories.

Everything a source yields is pinned: a release by its archive's sha256, a commit by its full
sha, so a spec printed by pq (``Snapshot.spec``) resolves to the same bytes again.  Downloads go
to a cache (``PQ_CACHE``, else ``$XDG_CACHE_HOME/pq``, else ``~/.cache/pq``) and are re-verified
against their sha256 on every use.

The package registry is whatever pip is configured to use (``pip config list`` and the
``PIP_*`` variables), with pip's own default index when none is set; no index host is named
here.  ``pip download`` cannot fetch the vllm-ascend sdists (it insists on building their
metadata, which needs Ascend's toolkit), so a small PEP 691 / PEP 503 simple-repository client
reads the index and the archives are opened as plain zip / tar.gz files, never built.
"""

from __future__ import annotations

import ast
import hashlib
import html.parser
import io
import json
import os
import posixpath
import re
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

from patch_queue.errors import SourceError
from patch_queue.git.remote import UpstreamGit, normalize_location

__all__ = [
    "Snapshot",
    "UpstreamGit",
    "cache_dir",
    "newest_release",
    "open_git",
    "release_files",
    "resolve_upstream",
    "upstream_git_location",
]

Progress = Callable[[str], None]

UPSTREAM_PROJECT = "vllm-ascend"
UPSTREAM_PACKAGE = "vllm_ascend"
UPSTREAM_GIT_URL = "https://github.com/vllm-project/vllm-ascend.git"

_JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_ACCEPT = f"{_JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_CHUNK = 1 << 20


# -- cache ---------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The download cache: ``PQ_CACHE``, else ``$XDG_CACHE_HOME/pq``, else ``~/.cache/pq``."""
    explicit = os.environ.get("PQ_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return (Path(xdg).expanduser() / "pq").resolve()
    return (Path.home() / ".cache" / "pq").resolve()


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)
    else:
        print(message, file=sys.stderr, flush=True)


# -- PEP 440 versions ------------------------------------------------------------------------

# The grammar of PEP 440 (as in `packaging`, which pq does not depend on).
_VERSION_RE = re.compile(
    r"""
    ^\s*v?
    (?:(?P<epoch>[0-9]+)!)?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?P<pre>[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?P<post>(?:-(?P<post_n1>[0-9]+))|(?:[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?))?
    (?P<dev>[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$
    """,
    re.VERBOSE | re.IGNORECASE,
)
_PRE_LETTER = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "c": "rc", "pre": "rc", "preview": "rc", "rc": "rc"}
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}

VersionKey = tuple[object, ...]


class Version(NamedTuple):
    """A parsed PEP 440 version: its canonical text and a key that sorts like PEP 440 says."""

    text: str
    key: VersionKey


def parse_version(text: str) -> Version | None:
    """Parse a PEP 440 version; None when ``text`` is not one (such files are ignored)."""
    m = _VERSION_RE.match(text)
    if m is None:
        return None
    epoch = int(m["epoch"] or 0)
    release = tuple(int(p) for p in m["release"].split("."))
    pre = (_PRE_LETTER[m["pre_l"].lower()], int(m["pre_n"] or 0)) if m["pre_l"] else None
    post_n = m["post_n1"] or m["post_n2"] or ("0" if m["post_l"] else None)
    post = int(post_n) if post_n is not None else None
    dev = int(m["dev_n"] or 0) if m["dev_l"] else None
    local = tuple(re.split(r"[-_.]", m["local"].lower())) if m["local"] else None

    parts = [f"{epoch}!" if epoch else "", ".".join(str(p) for p in release)]
    if pre is not None:
        parts.append(f"{pre[0]}{pre[1]}")
    if post is not None:
        parts.append(f".post{post}")
    if dev is not None:
        parts.append(f".dev{dev}")
    if local is not None:
        parts.append("+" + ".".join(local))

    # Ordering as PEP 440 defines it: trailing zeros do not count; a dev-only release sorts
    # before its pre-releases; a release without pre sorts after them; post after the release.
    trimmed = list(release)
    while len(trimmed) > 1 and trimmed[-1] == 0:
        trimmed.pop()
    if pre is None and post is None and dev is not None:
        pre_key: tuple[int, ...] = (0,)
    elif pre is None:
        pre_key = (2,)
    else:
        pre_key = (1, _PRE_RANK[pre[0]], pre[1])
    post_key = (0,) if post is None else (1, post)
    dev_key = (1,) if dev is None else (0, dev)
    if local is None:
        local_key: tuple[object, ...] = (0,)
    else:
        local_key = (1, tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in local))
    return Version("".join(parts), (epoch, tuple(trimmed), pre_key, post_key, dev_key, local_key))


def normalize_name(name: str) -> str:
    """PEP 503 name normalization: the index URL path and the spec use this spelling."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


# -- pip's configuration -------------------------------------------------------------------

# Where pip's sections rank: the PIP_* environment beats any command section of a config file,
# which beats [global].  Within a rank, later lines of `pip config list` come from files that
# pip loads later and so override earlier ones.
_SECTION_RANK = {"global": 0, "install": 1, "download": 1, ":env:": 2}
_pip_settings_memo: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}


def _pip_settings() -> dict[str, str]:
    """pip's effective settings for downloads, from ``python -m pip config list``."""
    env_key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_")))
    memo = _pip_settings_memo.get(env_key)
    if memo is not None:
        return dict(memo)
    ranked: dict[str, tuple[int, str]] = {}
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        key, sep, raw = line.partition("=")
        section, dot, option = key.rpartition(".")
        if not sep or not dot or section not in _SECTION_RANK:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw.strip("'\"")
        rank = _SECTION_RANK[section]
        if option not in ranked or rank >= ranked[option][0]:
            ranked[option] = (rank, str(value))
    settings = {option: value for option, (_, value) in ranked.items()}
    # Without pip (or if its config command failed) the PIP_* variables still say what the user wants.
    for option in ("index-url", "extra-index-url", "cert", "timeout", "default-timeout"):
        env_value = os.environ.get("PIP_" + option.upper().replace("-", "_"))
        if env_value is not None and option not in settings:
            settings[option] = env_value
    _pip_settings_memo[env_key] = settings
    return dict(settings)


def _default_index() -> str:
    """pip's built-in default index, asked of pip itself so that no host is written here."""
    try:
        from pip._internal.models.index import PyPI
    except ImportError as exc:
        raise SourceError("no package index configured and pip is not importable to supply its default") from exc
    return str(PyPI.simple_url)


def index_urls() -> list[str]:
    """The simple-repository indexes pip would use, primary first."""
    settings = _pip_settings()
    primary = settings.get("index-url", "").strip() or _default_index()
    extras = settings.get("extra-index-url", "").split()
    urls: list[str] = []
    for url in [primary, *extras]:
        if url and url not in urls:
            urls.append(url)
    return urls


def _timeout() -> float:
    settings = _pip_settings()
    for option in ("timeout", "default-timeout"):
        try:
            return float(settings[option])
        except (KeyError, ValueError):
            continue
    return 60.0


def _opener() -> urllib.request.OpenerDirector:
    """urllib with its default proxy handling, verifying TLS against pip's ``cert`` when set."""
    cert = _pip_settings().get("cert", "").strip()
    if cert and os.path.isdir(cert):
        context = ssl.create_default_context(capath=cert)
    elif cert and os.path.exists(cert):
        context = ssl.create_default_context(cafile=cert)
    else:
        context = ssl.create_default_context()
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


# -- the simple repository -----------------------------------------------------------------


@dataclass(frozen=True)
class DistFile:
    """One file of a project on an index."""

    filename: str
    url: str
    sha256: str | None
    version: Version
    kind: Literal["wheel", "sdist"]
    yanked: bool


def _file_version(project: str, filename: str) -> tuple[Version, Literal["wheel", "sdist"]] | None:
    """The version and kind of an archive, or None for other files and other projects' files."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        if len(parts) not in (5, 6):
            return None
        name, version, kind = parts[0], parts[1], "wheel"
    elif filename.endswith(".tar.gz"):
        name, _, version = filename[:-7].rpartition("-")
        kind = "sdist"
    else:
        return None
    parsed = parse_version(version)
    if parsed is None or normalize_name(name) != project:
        return None
    return parsed, kind  # type: ignore[return-value]


class _AnchorParser(html.parser.HTMLParser):
    """Collect the anchors of a PEP 503 page: (href, text, attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[tuple[str, dict[str, str | None]]] = []
        self.base: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "base" and attributes.get("href"):
            self.base = attributes["href"]
        elif tag == "a" and attributes.get("href"):
            self.anchors.append((str(attributes["href"]), attributes))


def _parse_page(project: str, page_url: str, body: bytes, content_type: str) -> list[DistFile]:
    files: list[DistFile] = []
    entries: list[tuple[str, str, str | None, bool]] = []  # filename, url, sha256, yanked
    if content_type.split(";")[0].strip() == _JSON_TYPE:
        data = json.loads(body)
        for item in data.get("files", []):
            url = urllib.parse.urljoin(page_url, item["url"])
            hashes = item.get("hashes") or {}
            yanked = item.get("yanked", False)
            entries.append((item["filename"], url, hashes.get("sha256"), bool(yanked)))
    else:
        parser = _AnchorParser()
        parser.feed(body.decode("utf-8", "replace"))
        base = urllib.parse.urljoin(page_url, parser.base) if parser.base else page_url
        for href, attributes in parser.anchors:
            url = urllib.parse.urljoin(base, href)
            url, _, fragment = url.partition("#")
            filename = urllib.parse.unquote(posixpath.basename(urllib.parse.urlsplit(url).path))
            hashes = dict(urllib.parse.parse_qsl(fragment))
            entries.append((filename, url, hashes.get("sha256"), "data-yanked" in attributes))
    for filename, url, sha256, yanked in entries:
        parsed = _file_version(project, filename)
        if parsed is not None:
            version, kind = parsed
            files.append(DistFile(filename, url, sha256.lower() if sha256 else None, version, kind, yanked))
    return files


def _read_index_page(index: str, project: str) -> tuple[str, bytes, str] | None:
    """(page URL, body, content type) of the project's page, or None when the index lacks it."""
    page_url = index.rstrip("/") + f"/{project}/"
    if urllib.parse.urlsplit(page_url).scheme == "file":
        # A local index is a directory tree; pip reads <dir>/index.html the same way.
        directory = Path(urllib.request.url2pathname(urllib.parse.urlsplit(page_url).path))
        page = directory / "index.html"
        if not page.is_file():
            return None
        return page_url, page.read_bytes(), "text/html"
    request = urllib.request.Request(page_url, headers={"Accept": _ACCEPT})
    try:
        with _opener().open(request, timeout=_timeout()) as response:
            return response.geturl(), response.read(), response.headers.get("Content-Type", "text/html")
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            return None
        raise


def project_files(name: str) -> list[DistFile]:
    """Every non-yanked wheel and sdist of ``name`` on the configured indexes (earlier index wins)."""
    project = normalize_name(name)
    seen: dict[str, DistFile] = {}
    errors: list[str] = []
    found = False
    for index in index_urls():
        try:
            page = _read_index_page(index, project)
        except (OSError, ValueError) as exc:
            errors.append(f"cannot read package index {index}: {_reason(exc)}")
            continue
        if page is None:
            continue
        found = True
        for dist in _parse_page(project, *page):
            seen.setdefault(dist.filename, dist)
    if not found and errors:
        raise SourceError(errors[0])
    return [dist for dist in seen.values() if not dist.yanked]


def _is_py3(python_tag: str) -> bool:
    return any(tag.startswith(("py3", "cp3")) for tag in python_tag.split("."))


def pick_file(files: Iterable[DistFile]) -> DistFile | None:
    """The archive to read for one version: a pure py3 wheel, else the sdist, else a platform wheel.

    pq reads Python sources only: a platform wheel carries compiled kernels besides them (vLLM's
    is 300 MB against a 40 MB sdist) and is taken only when there is nothing else.
    """
    ranked: list[tuple[int, str, DistFile]] = []
    for dist in files:
        if dist.kind == "sdist":
            ranked.append((1, dist.filename, dist))
            continue
        python_tag, abi, platform = dist.filename[:-4].split("-")[-3:]
        if _is_py3(python_tag):
            pure = abi == "none" and platform == "any"
            ranked.append((0 if pure else 2, dist.filename, dist))
    return min(ranked, key=lambda r: (r[0], r[1]))[2] if ranked else None


def _versions(files: Iterable[DistFile]) -> dict[str, Version]:
    return {dist.version.text: dist.version for dist in files}


def _newest(files: Iterable[DistFile]) -> str | None:
    usable = [d for d in files if pick_file([d]) is not None]
    versions = _versions(usable)
    if not versions:
        return None
    return max(versions.values(), key=lambda v: v.key).text


def newest_release(name: str) -> str:
    """The highest version of ``name`` on the registry by PEP 440 order, pre-releases included."""
    newest = _newest(project_files(name))
    if newest is None:
        raise SourceError(f"no release of {normalize_name(name)} on the registry")
    return newest


# -- downloads -----------------------------------------------------------------------------


def _download(dist: DistFile, dest: Path, progress: Progress | None) -> str:
    """Download ``dist`` to ``dest`` through a temp file in the same folder; return its sha256.

    The temp file is verified before ``os.replace`` puts it in place, so the cache never holds a
    partial or unverified archive, even after an interrupt.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".part-{dest.name}.*"):
        # left by a download that was killed; an hour-old one cannot still be running usefully
        try:
            if time.time() - stale.stat().st_mtime > 3600:
                stale.unlink()
        except OSError:
            pass
    fd, tmp_name = tempfile.mkstemp(prefix=f".part-{dest.name}.", dir=dest.parent)
    tmp = Path(tmp_name)
    digest = hashlib.sha256()
    tty = progress is None and sys.stderr.isatty()
    try:
        # mkstemp makes the file private; a cache entry is ordinary readable data.
        os.chmod(fd, 0o644)
        with os.fdopen(fd, "wb") as out, _opener().open(dist.url, timeout=_timeout()) as response:
            total = int(response.headers.get("Content-Length") or 0)
            size = f" ({total / (1 << 20):.1f} MiB)" if total else ""
            _say(progress, f"Downloading {dist.filename}{size}")
            done = 0
            shown = -1
            for chunk in iter(lambda: response.read(_CHUNK), b""):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                if tty and total:
                    percent = done * 100 // total
                    if percent != shown:
                        shown = percent
                        print(f"\r  {dist.filename}: {percent:3d}%", end="", file=sys.stderr, flush=True)
            if tty and total:
                print(file=sys.stderr, flush=True)
        actual = digest.hexdigest()
        if dist.sha256 is not None and actual != dist.sha256:
            raise SourceError(f"sha256 mismatch for {dist.filename}: the index says {dist.sha256}, downloaded {actual}")
        os.replace(tmp, dest)
        return actual
    except (OSError, ValueError) as exc:
        raise SourceError(f"cannot download {dist.filename} from {dist.url}: {_reason(exc)}") from exc
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class _Pinned:
    """A release's chosen archive, verified, held in memory (so later reads see verified bytes)."""

    project: str
    version: str
    filename: str
    sha256: str
    data: bytes


def _pin_file(project: str, version: str) -> Path:
    return cache_dir() / "dist" / f"{project}=={version}.json"


def _unknown_release(project: str, version: str, files: list[DistFile]) -> SourceError:
    newest = _newest(files)
    hint = f"newest on the registry: {newest}" if newest else "no such package on the registry"
    return SourceError(f"unknown release {project}=={version} ({hint})")


def _fetch_release(name: str, version: str, progress: Progress | None) -> _Pinned:
    """Download (or take from the cache) the archive of one release and verify its sha256."""
    project = normalize_name(name)
    parsed = parse_version(version)
    if parsed is None:
        raise SourceError(f"'{version}' is not a valid version in {project}=={version}")
    canon = parsed.text
    dist_dir = cache_dir() / "dist"
    pin_path = _pin_file(project, canon)

    # A release's files are immutable on the registry, so the choice made once is reused and a
    # pinned release resolves without the network; the sha256 is still checked on every use.
    dist: DistFile | None = None
    try:
        pin = json.loads(pin_path.read_text())
        dist = DistFile(pin["filename"], pin["url"], pin["sha256"], parsed, pin["kind"], False)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if dist is None:
        files = project_files(project)
        dist = pick_file(d for d in files if d.version.key == parsed.key)
        if dist is None:
            raise _unknown_release(project, canon, files)

    archive = dist_dir / dist.filename
    data: bytes | None = None
    if archive.is_file():
        data = archive.read_bytes()
        actual = hashlib.sha256(data).hexdigest()
        if dist.sha256 is not None and actual != dist.sha256:
            _say(
                progress,
                f"warning: cached {archive} fails its sha256 check (expected {dist.sha256}, got {actual});"
                " downloading it again",
            )
            data = None
    if data is None:
        actual = _download(dist, archive, progress)
        data = archive.read_bytes()
        if hashlib.sha256(data).hexdigest() != actual:
            raise SourceError(f"{archive} changed while it was being read; run the command again")
    sha256 = dist.sha256 or hashlib.sha256(data).hexdigest()
    if not pin_path.is_file():
        record = {"filename": dist.filename, "url": dist.url, "sha256": sha256, "kind": dist.kind}
        _write_json(pin_path, record)
    return _Pinned(project, canon, dist.filename, sha256, data)


def _write_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.chmod(fd, 0o644)
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _archive_members(pinned: _Pinned, prefix: str) -> dict[str, bytes]:
    """The regular files of an archive under ``prefix``; an sdist's top folder is stripped."""
    where = f"{pinned.filename} (pinned sha256 {pinned.sha256[:12]})"

    def read_zip(archive: zipfile.ZipFile) -> dict[str, bytes]:
        with archive:
            return {
                name: archive.read(info)
                for info in archive.infolist()
                if (name := _clean_member(info.filename)) and not info.is_dir() and name.startswith(prefix)
            }

    try:
        if pinned.filename.endswith(".whl"):
            return read_zip(zipfile.ZipFile(io.BytesIO(pinned.data)))
        index = _open_index(pinned)
        if index is not None:
            try:
                return read_zip(index)
            except zipfile.BadZipFile:  # a damaged member (CRC): unpack the verified archive again
                _index_path(pinned).unlink(missing_ok=True)
        members = _unpack_sdist(pinned)
        _write_index(pinned, members)
        return {name: data for name, data in members.items() if name.startswith(prefix)}
    except (OSError, zipfile.BadZipFile, tarfile.TarError, EOFError) as exc:
        raise SourceError(f"cannot read archive {where}: {exc}") from exc


def _unpack_sdist(pinned: _Pinned) -> dict[str, bytes]:
    """Every regular file of a verified sdist, its top folder stripped (one pass over the tar.gz)."""
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(pinned.data), mode="r:gz") as sdist:
        for member in sdist:
            if not member.isfile():
                continue
            # sdists hold "<name>-<version>/..."; the project root is that folder.
            name = _clean_member(member.name.split("/", 1)[1] if "/" in member.name else "")
            if name:
                handle = sdist.extractfile(member)
                if handle is not None:
                    members[name] = handle.read()
    return members


def _index_path(pinned: _Pinned) -> Path:
    return cache_dir() / "unpacked" / f"{pinned.sha256}.zip"


def _open_index(pinned: _Pinned) -> zipfile.ZipFile | None:
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
    if index.comment != pinned.sha256.encode():
        index.close()
        path.unlink(missing_ok=True)
        return None
    return index


def _write_index(pinned: _Pinned, members: dict[str, bytes]) -> None:
    """Keep the unpacked sdist, so later reads skip decompressing the whole tar.gz (0.8 s for vllm-ascend)."""
    from patch_queue.project.fsutil import atomic_write

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as index:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            index.writestr(info, members[name], compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
        index.comment = pinned.sha256.encode()
    try:
        atomic_write(_index_path(pinned), buffer.getvalue())
    except OSError:
        pass  # a read-only cache only costs time


def _clean_member(name: str) -> str:
    """A safe relative path, or "" for names that would escape the archive's root."""
    name = posixpath.normpath(name.replace("\\", "/")).lstrip("/")
    if name in ("", ".") or name == ".." or name.startswith("../"):
        return ""
    return name


def release_files(name: str, version: str, prefix: str, progress: Progress | None = None) -> dict[str, bytes]:
    """``{relative path: bytes}`` of the release's files under ``prefix``, from its (cached) archive."""
    return _archive_members(_fetch_release(name, version, progress), prefix)


# -- snapshots -----------------------------------------------------------------------------


class _Reader(Protocol):
    def read(self, path: str) -> bytes | None: ...

    def list_files(self, prefix: str) -> list[str]: ...


class _NoReader:
    def read(self, path: str) -> bytes | None:
        return None

    def list_files(self, prefix: str) -> list[str]:
        return []


class _GitReader:
    def __init__(self, repo: UpstreamGit, commit: str) -> None:
        self.repo = repo
        self.commit = commit

    def read(self, path: str) -> bytes | None:
        return self.repo.read(self.commit, path)

    def list_files(self, prefix: str) -> list[str]:
        return self.repo.list_files(self.commit, prefix)


class _ArchiveReader:
    """Reads a verified archive.  A wheel is a zip: members are read on demand.  A tar.gz has no
    index: its files are read from the cached unpacked copy (a zip, see :func:`_open_index`), made
    on first use."""

    def __init__(self, pinned: _Pinned) -> None:
        self.filename = pinned.filename
        self._source = pinned
        self._pinned: _Pinned | None = pinned
        self._zip: zipfile.ZipFile | None = None
        self._names: dict[str, str] = {}  # clean relative path -> zip member name
        self._members: dict[str, bytes] | None = None

    def _load(self) -> None:
        pinned = self._pinned
        if pinned is None:
            return
        index = None if pinned.filename.endswith(".whl") else _open_index(pinned)
        if pinned.filename.endswith(".whl") or index is not None:
            try:
                self._zip = index or zipfile.ZipFile(io.BytesIO(pinned.data))
            except zipfile.BadZipFile as exc:
                raise SourceError(f"cannot read archive {pinned.filename}: {exc}") from exc
            for info in self._zip.infolist():
                name = _clean_member(info.filename)
                if name and not info.is_dir():
                    self._names[name] = info.filename
        else:
            self._members = _archive_members(pinned, "")
        self._pinned = None

    def read(self, path: str) -> bytes | None:
        self._load()
        if self._members is not None:
            return self._members.get(path)
        member = self._names.get(path)
        if member is None or self._zip is None:
            return None
        try:
            return self._zip.read(member)
        except zipfile.BadZipFile:
            if self._source.filename.endswith(".whl"):
                raise SourceError(f"cannot read {member} from {self.filename}") from None
            # the cached unpacked copy is damaged (CRC): drop it and read the verified archive
            self._zip = None
            _index_path(self._source).unlink(missing_ok=True)
            self._members = _archive_members(self._source, "")
            return self._members.get(path)

    def list_files(self, prefix: str) -> list[str]:
        self._load()
        names = self._members if self._members is not None else self._names
        return sorted(name for name in names if name.startswith(prefix))


class _DirReader:
    """Files on disk; ``mount`` is prepended when the directory is the package folder itself."""

    def __init__(self, root: Path, mount: str) -> None:
        self.root = root
        self.mount = mount

    def _disk(self, path: str) -> Path | None:
        if not path.startswith(self.mount):
            return None
        relative = path[len(self.mount) :]
        return self.root / relative if relative else self.root

    def read(self, path: str) -> bytes | None:
        disk = self._disk(path)
        if disk is None or not disk.is_file():
            return None
        return disk.read_bytes()

    def list_files(self, prefix: str) -> list[str]:
        files: list[str] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            # Caches and VCS folders are never source.
            dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__")]
            rel = Path(dirpath).relative_to(self.root).as_posix()
            base = self.mount + ("" if rel == "." else rel + "/")
            files.extend(base + f for f in filenames if (base + f).startswith(prefix))
        return sorted(files)


@dataclass(frozen=True)
class Snapshot:
    """One pinned state of the upstream source tree, read by project-relative paths."""

    kind: Literal["git", "release", "dir"]
    spec: str
    pin: str
    label: str
    public_commit: str | None
    _reader: _Reader = field(default_factory=_NoReader, repr=False, compare=False, hash=False)

    def _check(self, path: str) -> str:
        clean = _clean_member(path)
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
    pinned = _fetch_release(name, version, progress)
    return Snapshot(
        kind="release",
        spec=f"{pinned.project}=={pinned.version}",
        pin=f"{pinned.filename}#sha256={pinned.sha256}",
        label=f"{pinned.project} {pinned.version}",
        public_commit=None,
        _reader=_ArchiveReader(pinned),
    )


def dir_snapshot(path: str | Path) -> Snapshot:
    """A directory on disk: a project root holding ``vllm_ascend/``, or that folder itself."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise SourceError(f"no such directory {root}")
    # Pointed at the package folder itself: present it where a project root would hold it.
    is_package = root.name == UPSTREAM_PACKAGE or (root / "worker" / "model_runner_v1.py").is_file()
    mount = UPSTREAM_PACKAGE + "/" if is_package and not (root / UPSTREAM_PACKAGE).is_dir() else ""
    return Snapshot(
        kind="dir",
        spec=f"dir:{root}",
        pin="",
        label=f"dir {root}",
        public_commit=None,
        _reader=_DirReader(root, mount),
    )


def _looks_like_upstream(path: Path) -> bool:
    return (path / UPSTREAM_PACKAGE).is_dir() or path.resolve().name == UPSTREAM_PACKAGE


def git_snapshot(repo: UpstreamGit, ref: str) -> Snapshot:
    """A commit of the upstream repository, by any ref :meth:`UpstreamGit.resolve` accepts."""
    sha = repo.resolve(ref)
    public = repo.public_commit(sha)
    label = f"git {public[:12]}"  # the public commit: the same label (and patch text) from every mirror
    return Snapshot(
        kind="git",
        spec=f"git:{repo.location}@{sha}",
        pin=sha,
        label=label,
        public_commit=public,
        _reader=_GitReader(repo, sha),
    )


def upstream_git_location(upstream_git: str | None) -> str:
    """Where the upstream history lives: the argument, else ``PQ_UPSTREAM_GIT``, else the public repo."""
    if upstream_git:
        return upstream_git
    return os.environ.get("PQ_UPSTREAM_GIT") or UPSTREAM_GIT_URL


_open_repos: dict[tuple[str, Path], UpstreamGit] = {}


def open_git(location: str, progress: Progress | None = None) -> UpstreamGit:
    """The upstream repository at ``location`` (URL, local repository or bundle), cloned into the cache.

    One instance per location and process, so a local location is fetched once per run.
    """
    normalized = normalize_location(location)
    key = hashlib.sha1(normalized.encode()).hexdigest()[:16]
    path = cache_dir() / "git" / f"{key}.git"
    repo = _open_repos.get((normalized, path))
    if repo is None or not path.is_dir():
        repo = UpstreamGit(normalized, path, progress=progress)
        _open_repos[(normalized, path)] = repo
    return repo


_RELEASE_SPEC = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)\s*$")


def resolve_upstream(
    spec: str | None,
    *,
    upstream_git: str | None = None,
    progress: Progress | None = None,
) -> Snapshot:
    """Resolve an upstream spec to a pinned snapshot.

    ``None``/``"latest"``: the newest vllm-ascend release; ``NAME==VERSION``: that release;
    ``dir:PATH`` or an existing directory: files on disk; ``git:LOCATION@REF``: a commit there;
    anything else: a ref, a (possibly abbreviated) commit, or a public upstream sha (matched by
    the ``Upstream-Commit`` trailer) in the upstream git repository.
    """
    if spec is None or spec.strip() in ("", "latest"):
        files = project_files(UPSTREAM_PROJECT)
        newest = _newest(files)
        if newest is None:
            raise SourceError(f"no release of {UPSTREAM_PROJECT} on the registry")
        return release_snapshot(UPSTREAM_PROJECT, newest, progress)
    spec = spec.strip()
    if spec.startswith("git:"):
        location, at, ref = spec[4:].rpartition("@")
        if not at or not location or not ref:
            raise SourceError(f"malformed upstream spec '{spec}': expected git:<location>@<ref>")
        return git_snapshot(open_git(location, progress), ref)
    if spec.startswith("dir:"):
        return dir_snapshot(spec[4:])
    release = _RELEASE_SPEC.match(spec)
    if release is not None:
        return release_snapshot(release[1], release[2], progress)
    if os.path.isdir(spec) and (spec.startswith(("/", ".", "~")) or _looks_like_upstream(Path(spec))):
        # A bare word that happens to name a folder in the working directory ("main") is a ref.
        return dir_snapshot(spec)
    return git_snapshot(open_git(upstream_git_location(upstream_git), progress), spec)


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
        body = _read_sealed(self.path)
        try:
            data = json.loads(body) if body is not None else {}
            if data.get("format") == self.FORMAT and data.get("scanner") == self._scanner:
                self._texts, self._blobs = dict(data["texts"]), dict(data["blobs"])
        except (ValueError, KeyError, TypeError, AttributeError):
            self._texts, self._blobs = {}, {}

    def get(self, blob: str) -> dict[str, str] | None:
        names = self._blobs.get(blob)
        if names is None:
            return None
        try:
            return {name: self._texts[key] for name, key in names.items()}
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
        self._dirty = not _write_sealed(self.path, body)


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
    return _read_sealed(_derived_path(kind, key))


def derived_put(kind: str, key: str, data: bytes) -> None:
    """Keep a result for :func:`derived_get`."""
    _write_sealed(_derived_path(kind, key), data)


def code_stamp(*modules: str) -> str:
    """A sha256 of pq's own source files (``"merge/fmt.py"``, ``"git/remote.py"``): derived results name the
    code that made them, so a changed pq never reads a stale one."""
    here = Path(__file__).parents[1]
    return hashlib.sha256(b"".join((here / name).read_bytes() for name in modules)).hexdigest()


def _read_sealed(path: Path) -> bytes | None:
    """The body of a cache file written by :func:`_write_sealed`; None when absent or damaged."""
    try:
        digest, _nl, body = path.read_bytes().partition(b"\n")
    except OSError:
        return None
    return body if hashlib.sha256(body).hexdigest().encode() == digest else None


def _write_sealed(path: Path, body: bytes) -> bool:
    """Write a cache file as its sha256, a newline and ``body``, atomically; False when it cannot be
    written (a read-only cache is only slower)."""
    from patch_queue.project.fsutil import atomic_write

    try:
        atomic_write(path, hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    except OSError:
        return False
    return True
