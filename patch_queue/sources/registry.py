"""The package registry: pip's configuration, a simple-repository client, and downloads.

The registry is whatever pip is configured to use (its configuration files and the ``PIP_*``
variables, read by pip's own configuration class), with pip's own default index when none is set;
no index host is named here.  pq honours the options of pip's that say where and how to download:
``index-url``, ``extra-index-url``, ``no-index`` (then ``find-links`` alone), ``find-links`` (folders, HTML
files and pages), ``proxy``, ``cert``, ``client-cert``, ``trusted-host`` (TLS not verified), ``timeout`` and
``retries``; a value it cannot use is one line naming where it was set (the variable or the file), never the
value itself.
``pip download`` cannot fetch the vllm-ascend sdists (it insists on building their metadata, which
needs Ascend's toolkit), so this small PEP 691 / PEP 503 client reads the index, and
:mod:`.archives` opens the downloaded archives as plain zip / tar.gz files, never built.

Versions and file names are read by ``packaging`` (PEP 440, wheel and sdist file names); a name is
normalized by PEP 503's own rule, as ``packaging.utils`` does it (that module brings the platform tags,
~15 ms, into every command that names a release).  ``packaging`` is imported where it is used: it costs
~25 ms, and most commands never read the index; so are urllib's HTTP client and the HTML parser (~10 ms):
a pinned release resolves without them.

Credentials are pip's: an index URL's user information (``https://user:token@host/simple``) and
``~/.netrc`` (or ``$NETRC``) authenticate every request to that host with HTTP Basic, sent with the
request itself (not after a 401) and never to the host a redirect leads to; the URL is requested,
shown and recorded without them (cut by the URL's structure: quotes, spaces, "@" or "%xx" in a password
change nothing), and every setting's credentials are handed to :func:`patch_queue.errors.hide`.
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import json
import os
import posixpath
import re
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, NamedTuple, TypedDict

from patch_queue.errors import SourceError, hide, without_userinfo
from patch_queue.fsutil import unwritable_cache
from patch_queue.progress import Progress, bar, say, timed

if TYPE_CHECKING:
    import urllib.request

    import packaging.version

_JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_ACCEPT = f"{_JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_CHUNK = 1 << 20


# -- names and versions ----------------------------------------------------------------------


class Version(NamedTuple):
    """A PEP 440 version as pq prints it (``text``, the canonical spelling) and orders it (``key``)."""

    text: str
    key: packaging.version.Version


def parse_version(text: str) -> Version | None:
    """Parse a PEP 440 version; None when ``text`` is not one (such files are ignored)."""
    from packaging.version import InvalidVersion
    from packaging.version import Version as Pep440

    try:
        parsed = Pep440(text)
    except InvalidVersion:
        return None
    return Version(str(parsed), parsed)


def normalize_name(name: str) -> str:
    """PEP 503 name normalization: the index URL path and the spec use this spelling."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


# pq's own spelling of a release, NAME==VERSION (not a PEP 508 requirement: one exact version only)
RELEASE_SPEC = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)\s*$")


def parse_release(spec: str) -> tuple[str, Version] | None:
    """``NAME==VERSION``, pq's spelling of one release (a project name, a PEP 440 version): the name as written and
    the version; None for anything else (a folder's path such as ``./x==1/npu``, a ref), so no command takes
    such a path for a release to download."""
    found = RELEASE_SPEC.match(spec)
    version = parse_version(found[2]) if found is not None else None
    return None if found is None or version is None else (found[1], version)


# -- pip's configuration -------------------------------------------------------------------

# Where pip's sections rank: the PIP_* environment beats any command section of a config file,
# which beats [global]; pip has already merged the files of one section in its own order.
_SECTION_RANK = {"global": 0, "install": 1, "download": 1, ":env:": 2}
# What decides which config files pip reads (besides the PIP_* variables): a cached answer is for these only.
_PIP_PLACES = ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "VIRTUAL_ENV", "APPDATA", "PROGRAMDATA")
# pip's option names that are one option (``--timeout`` is also ``--default-timeout``)
_ALIASES = {"default-timeout": "timeout"}


class Setting(NamedTuple):
    """One option of pip's configuration: its value, and where it was set (a ``PIP_*`` variable or a file)."""

    value: str
    origin: str


def _pip_settings() -> dict[str, Setting]:
    """pip's effective settings for downloads: its configuration's options, ranked as pip ranks them."""
    return _pip_settings_for(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_"))))


@functools.cache
def _pip_settings_for(pip_environment: tuple[tuple[str, str], ...]) -> dict[str, Setting]:
    """:func:`_pip_settings` once per set of ``PIP_*`` variables; every value's credentials are kept for
    :func:`~patch_queue.errors.redact` (a file's ``proxy = http://user:password@host`` is no URL pq shows)."""
    ranked: dict[str, tuple[int, Setting]] = {}
    # the PIP_* variables as pip's configuration names them (PIP_INDEX_URL is :env:.index-url), with or without pip
    environment = [(k, ":env:." + k[4:].lower().replace("_", "-"), v) for k, v in pip_environment]
    for origin, key, value in [*_pip_config_items(pip_environment), *environment]:
        hide(value)
        section, dot, option = key.rpartition(".")
        if not dot or section not in _SECTION_RANK:
            continue
        option, rank = _ALIASES.get(option, option), _SECTION_RANK[section]
        if option not in ranked or rank >= ranked[option][0]:
            ranked[option] = (rank, Setting(value, origin))
    return {option: setting for option, (_, setting) in ranked.items()}


def _stamp(path: str) -> list[int] | None:
    """What tells a file changed (as git's index tells it): its modification time, size and inode; None if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


class _PipConfig(TypedDict):
    """pip's configuration as the download cache keeps it: each file pip read with its stamp, the options."""

    files: tuple[tuple[str, object], ...]
    items: tuple[tuple[str, str, str], ...]


def _pip_config_items(pip_environment: tuple[tuple[str, str], ...]) -> list[tuple[str, str, str]]:
    """pip's configuration files' options (file, ``section.option``, value) in the order pip loads them (a later
    file overrides an earlier one), without the ``PIP_*`` variables, read by pip's own configuration class in this
    process (``python -m pip config list`` costs a whole pip start, ~0.7 s). The answer is kept in the download
    cache with the files pip read (and pip's own module): while none of them changed, nor the ``PIP_*`` variables,
    nor what places them (HOME, XDG_*, the interpreter), it stands. An answer that may hold a credential (any
    value with an "@", whatever else it holds) is never kept."""
    from patch_queue.sources import cache

    places = [sys.executable, sys.prefix, *(f"{k}={os.environ.get(k, '')}" for k in _PIP_PLACES)]
    key = cache.derived_key(json.dumps([places, pip_environment]))
    kept = cache.derived_json("pip-config", key, _PipConfig)
    if kept is not None and all(_stamp(f) == stamp for f, stamp in kept[0]["files"]):
        return [(f, k, v) for f, k, v in kept[0]["items"]]
    try:
        from pip._internal.configuration import Configuration
        from pip._internal.configuration import __file__ as pip_module

        config = Configuration(isolated=False)
        config.load()
        items: list[tuple[str, str, str]] = []
        for name, value in config.items():  # in pip's load order; pip 23.3+ gives each file's options apart
            pairs = value.items() if isinstance(value, dict) else [(name, value)]
            origin = str(name) if isinstance(value, dict) else "pip's configuration"
            items += [(origin, str(k), str(v)) for k, v in pairs if not str(k).startswith(":env:")]
        files = [pip_module, *(f for _, names in config.iter_config_files() for f in names)]
    except Exception:  # pip absent or its internals changed: ask its command line, keep nothing
        return _pip_config_list()
    if any("@" in value for _, _, value in items):
        return items
    stamps = [[f, _stamp(f)] for f in dict.fromkeys(files)]
    cache.derived_put("pip-config", key, json.dumps({"files": stamps, "items": items}).encode("utf-8"))
    return items


def _pip_config_list() -> list[tuple[str, str, str]]:
    """``python -m pip config list``, read: [] when pip is not there or the command fails.  Its lines come sorted
    by file name, not in pip's load order: only when pip's configuration class cannot be used."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    items: list[tuple[str, str, str]] = []
    for line in out.splitlines():
        key, sep, raw = line.partition("=")
        if not sep or key.startswith(":env:"):  # the PIP_* variables: read from the environment itself
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw.strip("'\"")
        items.append(("pip's configuration", key, str(value)))
    return items


def _refused(option: str, why: str) -> SourceError:
    """The one line for a setting pq cannot use, naming where it was set and never showing its value."""
    setting = _pip_settings()[option]
    return SourceError(f"pip's {option} {why}", path=setting.origin)


_BOOLEANS = {
    **dict.fromkeys(("y", "yes", "t", "true", "on", "1"), True),
    **dict.fromkeys(("n", "no", "f", "false", "off", "0"), False),
}


def _flag(option: str) -> bool:
    """A yes/no option as pip reads it (``strtobool``), False when unset."""
    setting = _pip_settings().get(option)
    if setting is None:
        return False
    value = setting.value.strip().lower()
    if value not in _BOOLEANS:
        raise _refused(option, "is not a yes/no value (yes/no, true/false, on/off or 1/0)")
    return _BOOLEANS[value]


def _number(option: str, default: float) -> float:
    setting = _pip_settings().get(option)
    if setting is None:
        return default
    try:
        number = float(setting.value)
    except ValueError:
        raise _refused(option, "is not a number") from None
    if not number >= 0:
        raise _refused(option, "is not a number of zero or more") from None
    return number


def _url(option: str, url: str) -> str:
    """``url`` (an index, a find-links page, the proxy), checked at the door: a URL urllib can request once its
    user information is set aside; else one line naming the setting (never its value: it may hold a password)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (a port that is not a number raises here, not in the middle of a download)
    except ValueError as exc:
        why = "its port is not a number" if "port" in str(exc).lower() else "it is not a URL"
        raise _refused(option, f"holds a URL pq cannot read: {why}") from None
    if parts.scheme.lower() not in ("http", "https", "file"):
        raise _refused(option, "holds a URL pq cannot read: not an http, https or file URL")
    if parts.scheme.lower() != "file" and not parts.hostname:
        raise _refused(option, "holds a URL pq cannot read: it names no host")
    if re.search(r"[\x00-\x20\x7f]", without_userinfo(url)):
        raise _refused(option, "holds a URL pq cannot read: a space or a control character outside its user name")
    return url


def index_urls() -> list[str]:
    """The simple-repository indexes pip would use, primary first: none when pip's ``no-index`` is set."""
    if _flag("no-index"):
        return []
    settings = _pip_settings()
    primary = settings["index-url"].value.strip() if "index-url" in settings else ""
    urls = [_url("index-url", primary)] if primary else [_default_index()]
    if "extra-index-url" in settings:
        urls += [_url("extra-index-url", url) for url in settings["extra-index-url"].value.split()]
    return list(dict.fromkeys(urls))


def find_links() -> list[str]:
    """pip's ``find-links``: folders, HTML files and pages listing archives, searched besides the indexes."""
    setting = _pip_settings().get("find-links")
    links = setting.value.split() if setting else []
    return [_url("find-links", link) if "://" in link else link for link in links]


def _timeout() -> float:
    return _number("timeout", 60.0)


def check_configuration() -> None:
    """pip's configuration read and checked as pq's own requests read it, before pq hands a download to pip's own
    command line (the import test's environment): every URL setting (``index-url``, ``extra-index-url``,
    ``find-links``, ``proxy``), ``no-index``, ``cert``, ``client-cert``, ``timeout`` and ``retries``.  A value pq
    cannot use is the same one line naming where it was set, never the value, and every credential of the
    configuration is then known to :func:`~patch_queue.errors.redact`, through which pip's own output is printed."""
    _timeout()
    _number("retries", 0)
    for url in [*index_urls(), *(link for link in find_links() if "://" in link)]:
        _opener(url)


@functools.cache
def _tls(cert: str, client_cert: str, verify: bool) -> ssl.SSLContext:
    """The TLS context of a request: verified against ``cert`` (pip's CA bundle, a file or folder) unless the
    host is trusted, presenting ``client_cert``."""
    if cert and os.path.isdir(cert):
        context = ssl.create_default_context(capath=cert)
    else:
        context = ssl.create_default_context(cafile=cert or None)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if client_cert:
        context.load_cert_chain(client_cert)
    return context


def _opener(url: str) -> urllib.request.OpenerDirector:
    """urllib as pip's session is set up for ``url``: its ``proxy`` (else the environment's proxies), TLS verified
    against its ``cert``, not verified for a ``trusted-host``, its ``client-cert`` presented."""
    import urllib.request

    settings = _pip_settings()
    cert, client = (settings[o].value.strip() if o in settings else "" for o in ("cert", "client-cert"))
    for option, path in (("cert", cert), ("client-cert", client)):
        if path and not os.path.exists(path):
            raise _refused(option, "names no file or folder")
    try:
        context = _tls(cert, client, not _trusted(url))
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise _refused("client-cert" if client else "cert", f"cannot be loaded: {_reason(exc)}") from None
    handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=context)]
    if proxy := (settings["proxy"].value.strip() if "proxy" in settings else ""):
        proxy = _url("proxy", proxy) if "://" in proxy else proxy
        handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    return urllib.request.build_opener(*handlers)


def _trusted(url: str) -> bool:
    """Whether pip's ``trusted-host`` names the host of ``url`` (``host`` for any port, or ``host:port``)."""
    setting = _pip_settings().get("trusted-host")
    if setting is None:
        return False
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    names = {host, f"{host}:{parts.port}"} if parts.port else {host}
    return any(entry.lower() in names for entry in setting.value.split())


_RETRY_STATUS = (500, 502, 503, 520, 527)  # pip's own list of answers worth asking again


def _open(request: urllib.request.Request) -> Any:  # urllib's own type: an HTTP response, or a file's
    """The response to ``request`` through :func:`_opener`, asked again on a failed connection or a server error
    as often as pip's ``retries`` says (pip's backoff: none, then 0.5 s, 1 s, ...); unset, once."""
    import urllib.error

    attempts, failed = 1 + int(_number("retries", 0)), 0
    while True:
        try:
            return _opener(request.full_url).open(request, timeout=_timeout())
        except urllib.error.HTTPError as exc:
            failed += 1
            if exc.code not in _RETRY_STATUS or failed >= attempts:
                raise
        except OSError:  # no connection, a timeout (urllib's URLError is one)
            failed += 1
            if failed >= attempts:
                raise
        time.sleep(min(120.0, 0.25 * 2 ** (failed - 1)) if failed > 1 else 0.0)


def _default_index() -> str:
    """pip's built-in default index, asked of pip itself so that no host is written here."""
    try:
        from pip._internal.models.index import PyPI
    except ImportError as exc:
        raise SourceError("no package index configured and pip is not importable to supply its default") from exc
    return str(PyPI.simple_url)


def _netloc(url: str) -> str:
    """host[:port] of ``url``, lower case, without user information: what credentials are kept by."""
    return urllib.parse.urlsplit(url).netloc.rpartition("@")[2].lower()


def _userinfo(url: str) -> tuple[str, str] | None:
    """The (user, password) a URL carries, percent-decoded; None without user information."""
    netloc = urllib.parse.urlsplit(url).netloc
    if "@" not in netloc:
        return None
    user, _, password = netloc.rpartition("@")[0].partition(":")
    return urllib.parse.unquote(user), urllib.parse.unquote(password)


def _netrc(host: str) -> tuple[str, str] | None:
    """(login, password) for ``host`` in ``$NETRC`` or ``~/.netrc``, as pip reads it; None without one."""
    import netrc

    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        found = netrc.netrc(str(path)).authenticators(host) if path.is_file() else None
    except (OSError, netrc.NetrcParseError):
        return None
    return (found[0], found[2] or "") if found else None


_LINK_CREDENTIALS: dict[str, tuple[str, str]] = {}  # host[:port] -> the credential an index page's link carried


def _credentials(url: str) -> tuple[str, str] | None:
    """What authenticates a request for ``url``: its own user information, else that of a configured index on
    the same host (or of a link of its pages there), else ``~/.netrc``'s entry for the host (pip's order,
    keyring aside)."""
    own = _userinfo(url)
    if own is not None:
        return own
    netloc = _netloc(url)
    for index in [*index_urls(), *(link for link in find_links() if "://" in link)]:
        if _netloc(index) == netloc and (theirs := _userinfo(index)) is not None:
            return theirs
    if netloc in _LINK_CREDENTIALS:
        return _LINK_CREDENTIALS[netloc]
    return _netrc(urllib.parse.urlsplit(url).hostname or "")


def _request(url: str, headers: dict[str, str] | None = None) -> urllib.request.Request:
    """A request for ``url`` without its user information, authenticated as pip would (HTTP Basic)."""
    import urllib.request

    request = urllib.request.Request(without_userinfo(url), headers=headers or {})
    found = _credentials(url)
    if found is not None:
        token = base64.b64encode(f"{found[0]}:{found[1]}".encode()).decode("ascii")
        request.add_unredirected_header("Authorization", f"Basic {token}")
    return request


def _reason(exc: BaseException) -> str:
    import urllib.error

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
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename

    kind: Literal["wheel", "sdist"]
    try:
        if filename.endswith(".whl"):
            name, version, _build, _tags = parse_wheel_filename(filename)
            kind = "wheel"
        elif filename.endswith(".tar.gz"):  # a .zip sdist is an old format no release pq reads uses
            name, version = parse_sdist_filename(filename)
            kind = "sdist"
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    if name != project:
        return None
    return Version(str(version), version), kind


def _anchors(page: str) -> tuple[list[tuple[str, dict[str, str | None]]], str | None]:
    """The anchors of a PEP 503 page, (href, attributes), and its ``<base>``."""
    import html.parser

    class Parser(html.parser.HTMLParser):
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

    parser = Parser()
    parser.feed(page)
    return parser.anchors, parser.base


def _parse_page(project: str, page_url: str, body: bytes, content_type: str) -> list[DistFile]:
    entries: list[tuple[str, str, str | None, bool]] = []  # filename, url, sha256, yanked
    if content_type.split(";")[0].strip() == _JSON_TYPE:
        for item in json.loads(body).get("files", []):
            url = urllib.parse.urljoin(page_url, item["url"])
            hashes = item.get("hashes") or {}
            entries.append((item["filename"], url, hashes.get("sha256"), bool(item.get("yanked", False))))
    else:
        anchors, found_base = _anchors(body.decode("utf-8", "replace"))
        base = urllib.parse.urljoin(page_url, found_base) if found_base else page_url
        for href, attributes in anchors:
            with suppress(ValueError):  # a link that is no URL (a host's "[" left open): skipped, as pip skips it
                url, _, fragment = urllib.parse.urljoin(base, href).partition("#")
                filename = urllib.parse.unquote(posixpath.basename(urllib.parse.urlsplit(url).path))
                hashes = dict(urllib.parse.parse_qsl(fragment))
                entries.append((filename, url, hashes.get("sha256"), "data-yanked" in attributes))
    files: list[DistFile] = []
    for filename, url, sha256, yanked in entries:
        parsed = _file_version(project, filename)
        if parsed is not None:
            if (carried := _userinfo(url)) is not None:  # a link with a credential: kept aside, not in the URL
                hide(url)
                _LINK_CREDENTIALS[_netloc(url)] = carried
            files.append(DistFile(filename, without_userinfo(url), sha256.lower() if sha256 else None, *parsed, yanked))
    return files


def _local_files(project: str, folder: Path) -> list[DistFile]:
    """The archives of ``project`` in a find-links folder, as pip lists them (the folder's own files)."""
    files: list[DistFile] = []
    for path in sorted(folder.iterdir()):
        parsed = _file_version(project, path.name)
        if parsed is not None and path.is_file():
            files.append(DistFile(path.name, path.resolve().as_uri(), None, *parsed, False))
    return files


def _read_page(url: str, accept: str) -> tuple[str, bytes, str] | None:
    """(URL, body, content type) of a page over HTTP, or None when the server has none (404, 410)."""
    import urllib.error

    try:
        with _open(_request(url, {"Accept": accept})) as response:
            return response.geturl(), response.read(), response.headers.get("Content-Type", "text/html")
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 410):
            return None
        raise


def _read_index_page(index: str, project: str) -> tuple[str, bytes, str] | None:
    """(page URL, body, content type) of the project's page, or None when the index lacks it."""
    import urllib.request

    page_url = index.rstrip("/") + f"/{project}/"
    if urllib.parse.urlsplit(page_url).scheme == "file":
        # A local index is a directory tree; pip reads <dir>/index.html the same way.
        directory = Path(urllib.request.url2pathname(urllib.parse.urlsplit(page_url).path))
        page = directory / "index.html"
        if not page.is_file():
            return None
        return page_url, page.read_bytes(), "text/html"
    return _read_page(page_url, _ACCEPT)


def _linked_files(project: str, link: str) -> list[DistFile]:
    """The archives of ``project`` a find-links location gives: a folder's files, or the links of an HTML file or
    page (an http(s) URL); nothing from a place that is not there, as pip ignores it."""
    import urllib.request

    parts = urllib.parse.urlsplit(link) if "://" in link else None
    if parts is not None and parts.scheme.lower() in ("http", "https"):
        page = _read_page(link, "text/html")
        return [] if page is None else _parse_page(project, page[0], page[1], "text/html")
    path = Path(urllib.request.url2pathname(parts.path)) if parts is not None else Path(link).expanduser()
    if path.is_dir():
        return _local_files(project, path)
    if path.is_file():
        return _parse_page(project, path.resolve().as_uri(), path.read_bytes(), "text/html")
    return []


@timed("download")
def project_files(name: str) -> list[DistFile]:
    """Every non-yanked wheel and sdist of ``name`` on the configured indexes and find-links locations (an earlier
    one wins); with pip's ``no-index``, on the find-links locations alone, and one line naming that setting when
    none holds the project."""
    project = normalize_name(name)
    seen: dict[str, DistFile] = {}
    errors: list[str] = []
    found = False
    for index in index_urls():
        try:
            page = _read_index_page(index, project)
            listed = None if page is None else _parse_page(project, *page)
        except (OSError, ValueError) as exc:
            errors.append(f"cannot read package index {without_userinfo(index)}: {_reason(exc)}")
            continue
        found = found or listed is not None
        for dist in listed or []:
            seen.setdefault(dist.filename, dist)
    for link in find_links():
        try:
            listed = _linked_files(project, link)
        except (OSError, ValueError) as exc:
            errors.append(f"cannot read find-links location {without_userinfo(link)}: {_reason(exc)}")
            continue
        found = found or bool(listed)
        for dist in listed:
            seen.setdefault(dist.filename, dist)
    if not found and errors:
        raise SourceError(errors[0])
    if not seen and _flag("no-index"):
        raise _refused(
            "no-index",
            f"is set and no find-links location holds {project}: add one that does (pip's find-links), or unset "
            "no-index",
        )
    return [dist for dist in seen.values() if not dist.yanked]


def pick_file(files: Iterable[DistFile]) -> DistFile | None:
    """The archive to read for one version: a pure py3 wheel, else the sdist, else a platform wheel.

    pq reads Python sources only: a platform wheel carries compiled kernels besides them (vLLM's
    is 300 MB against a 40 MB sdist) and is taken only when there is nothing else.
    """
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    ranked: list[tuple[int, str, DistFile]] = []
    for dist in files:
        if dist.kind == "sdist":
            ranked.append((1, dist.filename, dist))
            continue
        try:
            tags = parse_wheel_filename(dist.filename)[3]
        except InvalidWheelFilename:
            continue
        if any(tag.interpreter.startswith(("py3", "cp3")) for tag in tags):
            pure = all(tag.abi == "none" and tag.platform == "any" for tag in tags)
            ranked.append((0 if pure else 2, dist.filename, dist))
    return min(ranked, key=lambda r: (r[0], r[1]))[2] if ranked else None


def newest_version(files: Iterable[DistFile]) -> str | None:
    """The highest version that has a file :func:`pick_file` would read, by PEP 440 order."""
    versions = [dist.version for dist in files if pick_file([dist]) is not None]
    return max(versions, key=lambda v: v.key).text if versions else None


def newest_release(name: str) -> str:
    """The highest version of ``name`` on the registry by PEP 440 order, pre-releases included."""
    newest = newest_version(project_files(name))
    if newest is None:
        raise SourceError(f"no release of {normalize_name(name)} on the registry")
    return newest


# -- downloads -----------------------------------------------------------------------------


_ATTEMPTS = 3  # a download whose connection closes before its Content-Length is taken again, this many times


def _fetch(dist: DistFile, out: BinaryIO, digest: Any, progress: Progress | None) -> tuple[int, int]:
    """One request for ``dist``'s bytes into ``out`` and ``digest``: (bytes read, Content-Length or 0)."""
    with _open(_request(dist.url)) as response:
        total = int(response.headers.get("Content-Length") or 0)
        size = f" ({total / (1 << 20):.1f} MiB)" if total else ""
        say(progress, f"Downloading {dist.filename}{size}")
        with bar(dist.filename, unit="bytes") as shown:
            done = 0
            for chunk in iter(lambda: response.read(_CHUNK), b""):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                shown.update(done, total or None)
    return done, total


def download(dist: DistFile, dest: Path, progress: Progress | None) -> str:
    """Download ``dist`` to ``dest`` through a temp file in the same folder; return its sha256.

    The temp file is verified before ``os.replace`` puts it in place, so the cache never holds a
    partial or unverified archive, even after an interrupt.
    """
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        for stale in dest.parent.glob(f".part-{dest.name}.*"):
            # left by a download that was killed; an hour-old one cannot still be running usefully
            with suppress(OSError):
                if time.time() - stale.stat().st_mtime > 3600:
                    stale.unlink()
        fd, tmp_name = tempfile.mkstemp(prefix=f".part-{dest.name}.", dir=dest.parent)
    except OSError as exc:
        raise unwritable_cache(dest.parent, exc, "the release archives") from None
    tmp = Path(tmp_name)
    try:
        # mkstemp makes the file private; a cache entry is ordinary readable data.
        os.chmod(fd, 0o644)
        with os.fdopen(fd, "wb") as out:
            for attempt in range(1, _ATTEMPTS + 1):
                out.seek(0)
                out.truncate()
                digest = hashlib.sha256()
                done, total = _fetch(dist, out, digest, progress)
                if not total or done >= total:
                    break
                # the server closed the connection early (urllib's chunked reads do not raise on it): again
                if attempt == _ATTEMPTS:
                    raise SourceError(
                        f"cannot download {dist.filename} from {without_userinfo(dist.url)}: the connection closed "
                        f"after {done} of {total} bytes, {_ATTEMPTS} times"
                    )
                say(progress, f"The download of {dist.filename} stopped after {done} of {total} bytes; again")
        actual = digest.hexdigest()
        if dist.sha256 is not None and actual != dist.sha256:
            raise SourceError(f"sha256 mismatch for {dist.filename}: the index says {dist.sha256}, downloaded {actual}")
        os.replace(tmp, dest)
        return actual
    except (OSError, ValueError) as exc:
        raise SourceError(f"cannot download {dist.filename} from {without_userinfo(dist.url)}: {_reason(exc)}") from exc
    finally:
        tmp.unlink(missing_ok=True)
