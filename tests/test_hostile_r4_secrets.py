"""Hostile round four (issue 46): credentials of any shape are printed, logged and cached nowhere, and pq honours
pip's whole configuration (``no-index``, ``find-links``, ``extra-index-url``, ``proxy``, ``trusted-host``,
``cert``, ``client-cert``, ``timeout``, ``retries``), in its ``PIP_*`` and config-file forms.

Through the real command line on the adopted 0.30.0 project, against real servers on the loopback (python's
``http.server`` in a thread: an index behind HTTP Basic, a proxy asking Proxy-Authorization, an HTTPS server with
a certificate made by ``openssl``) and real git.  A password is made of two halves around the characters under
test (quotes, spaces, ``@``, ``:``, ``%xx``, unicode, newlines): the server must receive it whole (pq used it as
pip does), and neither half may show up in any output, the crash log, the project or the cache.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import importlib
import json
import os
import shutil
import ssl
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import git, pq, state
from test_errors import one_error_line, proj  # noqa: F401  (proj: a copy of adopted_030)

HEAD, TAIL = "Hx7q", "T0ken-9f1c"  # the halves of every password: neither may be printed or written
ARCHIVE = b"not an archive\n"
NOT_GZIP = (
    "pq: error: cannot read archive vllm_ascend-99.0.0.tar.gz "
    f"(pinned sha256 {hashlib.sha256(ARCHIVE).hexdigest()[:12]}): not a gzip file"
)
LINK = f'<a href="/files/vllm_ascend-99.0.0.tar.gz#sha256={hashlib.sha256(ARCHIVE).hexdigest()}">x</a>'

# what stands between the halves: (as written in the URL, as the server must receive it)
SHAPES = {
    "quote": ("'", "'"),
    "quote %27": ("%27", "'"),
    "double quote": ('"', '"'),
    "space": (" ", " "),
    "space %20": ("%20", " "),
    "at": ("@", "@"),
    "colon": (":", ":"),
    "percent %25": ("%25", "%"),
    "unicode": ("é€", "é€"),
    "newline %0A": ("%0A", "\n"),
    "angle brackets": ("<>", "<>"),
    "backslash": ("\\", "\\"),
}


def password(shape: str) -> tuple[str, str]:
    """(the password as written in a URL, as the server receives it) for ``shape``."""
    written, sent = SHAPES[shape]
    return HEAD + written + TAIL, HEAD + sent + TAIL


def no_secret(*texts: str) -> None:
    for text in texts:
        assert HEAD not in text and TAIL not in text, text


def no_secret_anywhere(*roots: Path) -> None:
    for root in roots:
        for half in (HEAD, TAIL):
            found = subprocess.run(["grep", "-rl", half, str(root)], capture_output=True, text=True).stdout
            assert found == "", found


class Server:
    """A loopback HTTP(S) server in a thread answering ``pages`` (by path) and ``root``'s files to requests whose
    ``header`` is HTTP Basic ``alice`` and ``secret`` (401, or 407 for a proxy, to the others); ``fail`` answers
    that many first requests with 503. It records every request (path, header)."""

    def __init__(
        self,
        root: Path,
        secret: str | None,
        pages: dict[str, bytes] | None = None,
        *,
        header: str = "Authorization",
        fail: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.seen: list[tuple[str, str | None]] = []
        want = None if secret is None else "Basic " + base64.b64encode(f"alice:{secret}".encode()).decode()
        seen, made, failures = self.seen, pages or {}, [fail]
        denied = 407 if header == "Proxy-Authorization" else 401

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.path = urllib.parse.urlsplit(self.path).path  # a proxy is asked for the whole URL
                seen.append((self.path, self.headers.get(header)))
                if want is not None and self.headers.get(header) != want:
                    self.send_response(denied)
                    self.send_header("WWW-Authenticate" if denied == 401 else "Proxy-Authenticate", 'Basic realm="pq"')
                    self.end_headers()
                    return
                if failures[0] > 0:
                    failures[0] -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                if self.path in made:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.end_headers()
                    self.wfile.write(made[self.path])
                    return
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.want = want

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def authorized(self) -> bool:
        return bool(self.seen) and all(auth == self.want for _path, auth in self.seen)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own (searched for the credential), and no pip configuration but the test's."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PQ_CACHE", str(path))
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return path


def files_root(tmp_path: Path) -> Path:
    """A folder serving ``/files/vllm_ascend-99.0.0.tar.gz`` (an archive that is none)."""
    (tmp_path / "served" / "files").mkdir(parents=True)
    (tmp_path / "served" / "files" / "vllm_ascend-99.0.0.tar.gz").write_bytes(ARCHIVE)
    return tmp_path / "served"


def configure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, form: str, **options: str) -> Path | None:
    """Set pip's ``options`` in the environment (``PIP_*``) or in a config file's [global] (then returned)."""
    if form == "env":
        for option, value in options.items():
            monkeypatch.setenv("PIP_" + option.upper(), value)
        return None
    config = tmp_path / "pip.conf"
    lines = "".join(f"{option.replace('_', '-')} = {value}\n" for option, value in options.items())
    config.write_text("[global]\n" + lines, encoding="utf-8")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    return config


# -- 1. an index password of any shape: used as pip uses it, shown nowhere ------------------------------------


@pytest.mark.parametrize("form", ["env", "file"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_an_index_password_of_any_shape_authenticates_and_is_shown_nowhere(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    shape: str,
    form: str,
) -> None:
    written, sent = password(shape)
    with Server(files_root(tmp_path), sent, {"/simple/vllm-ascend/": LINK.encode()}) as server:
        configure(monkeypatch, tmp_path, form, index_url=f"http://alice:{written}@127.0.0.1:{server.port}/simple")
        before = state(proj)
        proc = pq(proj, "refresh", "--no-check", check=1)
        assert one_error_line(proc) == NOT_GZIP
        assert server.authorized(), server.seen
    assert [p for p, _a in server.seen][-1] == "/files/vllm_ascend-99.0.0.tar.gz"
    no_secret(proc.stdout, proc.stderr)
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


@pytest.mark.parametrize("where", ["extra-index-url", "find-links page", "a link of the page", "netrc"])
def test_a_password_of_another_place_pip_reads_authenticates_and_is_shown_nowhere(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    where: str,
) -> None:
    """Besides index-url: an extra index, a find-links page, a credential a link of a (local) index page carries
    (kept aside for the download: the pin record in the cache holds the URL without it), ``~/.netrc``."""
    written, sent = password("quote")
    (tmp_path / "empty-index").mkdir()
    pages = {"/simple/vllm-ascend/": LINK.encode(), "/links/": LINK.encode()}
    with Server(files_root(tmp_path), sent, pages) as server:
        url = f"http://alice:{written}@127.0.0.1:{server.port}"
        monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path / 'empty-index'}")
        if where == "extra-index-url":
            monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"{url}/simple")
        elif where == "find-links page":
            monkeypatch.setenv("PIP_FIND_LINKS", f"{url}/links/")
        elif where == "a link of the page":
            (tmp_path / "empty-index" / "vllm-ascend").mkdir()
            link = LINK.replace('href="', f'href="{url}')
            (tmp_path / "empty-index" / "vllm-ascend" / "index.html").write_text(link, encoding="utf-8")
        else:
            monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.port}/simple")
            netrc = Path(os.environ["HOME"]) / ".netrc"
            netrc.write_text(f"machine 127.0.0.1 login alice password {written}\n", encoding="utf-8")
            netrc.chmod(0o600)
        before = state(proj)
        proc = pq(proj, "refresh", "--no-check", check=1)
        assert one_error_line(proc) == NOT_GZIP
        assert server.authorized(), server.seen
    assert [p for p, _a in server.seen][-1] == "/files/vllm_ascend-99.0.0.tar.gz"
    no_secret(proc.stdout, proc.stderr)
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


@pytest.mark.parametrize("shape", ["quote", "space", "at", "newline %0A"])
def test_a_proxy_password_authenticates_and_is_shown_nowhere(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    shape: str,
) -> None:
    """pip's ``proxy`` (here in a config file: it is read every time, never cached) carries every request; the
    index's host is a name only the proxy knows."""
    written, sent = password(shape)
    pages = {"/simple/vllm-ascend/": LINK.encode()}
    with Server(files_root(tmp_path), sent, pages, header="Proxy-Authorization") as proxy:
        configure(
            monkeypatch,
            tmp_path,
            "file",
            index_url="http://pq-index.invalid/simple",
            proxy=f"http://alice:{written}@127.0.0.1:{proxy.port}",
        )
        before = state(proj)
        proc = pq(proj, "refresh", "--no-check", check=1)
        assert one_error_line(proc) == NOT_GZIP
        assert proxy.authorized(), proxy.seen
    no_secret(proc.stdout, proc.stderr)
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


def test_a_password_the_server_refuses_is_shown_nowhere(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """A newline written as it is in the URL: urllib drops it (as pip's parser does), the server refuses."""
    with Server(files_root(tmp_path), "another") as server:
        index = f"http://127.0.0.1:{server.port}/simple"
        monkeypatch.setenv("PIP_INDEX_URL", index.replace("//", f"//alice:{HEAD}'\n\t {TAIL}@"))
        before = state(proj)
        proc = pq(proj, "refresh", "--no-check", check=1)
    assert one_error_line(proc) == f"pq: error: cannot read package index {index}: HTTP 401 Unauthorized"
    no_secret(proc.stdout, proc.stderr)
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


# -- 2. the crash log is redacted before it is written ------------------------------------------------------


@pytest.mark.parametrize("shape", ["quote", "space", "at", "unicode", "backslash", "newline %0A"])
@pytest.mark.parametrize("how", ["PIP_INDEX_URL", "https_proxy", "PQ_UPSTREAM_GIT", "git: spec"])
def test_the_crash_log_holds_no_password_of_any_shape(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    shape: str,
    how: str,
) -> None:
    """A planted bug whose exception carries the URL (its text and its repr, as a library's exception would): the
    crash log and stderr hold the traceback and the command line without the password."""
    written, _sent = password(shape)
    url = f"https://alice:{written}@127.0.0.1:1/x"
    args = ["refresh", "--to", f"git:{url}@main" if how == "git: spec" else "main"]
    if how != "git: spec":
        monkeypatch.setenv(how, url)

    def planted(name: str) -> None:
        raise ValueError(f"a planted bug holding {url!r}: {url}", url)

    monkeypatch.setattr(importlib.import_module("patch_queue.cli.app"), "kill_point", planted)
    proc = pq(proj, *args, check=4)
    log = (proj / ".git" / "pq" / "crash.log").read_text()
    assert "command: " in log and "Traceback" in log and "ValueError: (" in log and "a planted bug holding" in log
    assert "https://127.0.0.1:1/x" in log, log
    no_secret(log, proc.stdout, proc.stderr)


def test_a_url_with_a_space_in_its_password_is_no_crash(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reported case: exit 4 and the password in the crash log; now an unreachable index, in one line."""
    monkeypatch.setenv("PIP_INDEX_URL", f"http://alice:{HEAD} {TAIL}@127.0.0.1:1/simple")
    before = state(proj)
    proc = pq(proj, "refresh", "--no-check", check=1)
    line = one_error_line(proc)
    assert line.startswith("pq: error: cannot read package index http://127.0.0.1:1/simple: "), line
    no_secret(proc.stdout, proc.stderr)
    assert not (proj / ".git" / "pq" / "crash.log").exists()
    assert state(proj) == before


# -- 3. git: the mirror's remote, git's own texts ----------------------------------------------------------


@pytest.fixture
def served_repo(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    """A small bare repository over git's dumb HTTP protocol, behind HTTP Basic with the shape's password."""
    work = tmp_path / "up-work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "README").write_text("not vllm-ascend\n")
    git(work, "add", "README")
    git(work, "commit", "-qm", "one commit")
    root = tmp_path / "served-git"
    root.mkdir()
    git(tmp_path, "clone", "-q", "--bare", str(work), str(root / "up.git"))
    git(root / "up.git", "update-server-info")
    with Server(root, password(request.param)[1]) as server:
        yield server


@pytest.mark.parametrize("served_repo", ["quote", "space", "at", "unicode", "percent %25"], indirect=True)
@pytest.mark.parametrize("how", ["PQ_UPSTREAM_GIT", "git: spec"])
def test_an_upstream_password_of_any_shape_clones_and_is_kept_nowhere(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    served_repo: Server,
    request: pytest.FixtureRequest,
    how: str,
) -> None:
    written = password(request.node.callspec.params["served_repo"])[0]
    url = f"http://127.0.0.1:{served_repo.port}/up.git"
    secret_url = url.replace("http://", f"http://alice:{written}@")
    if how == "PQ_UPSTREAM_GIT":
        monkeypatch.setenv("PQ_UPSTREAM_GIT", secret_url)
        args: tuple[str, ...] = ("refresh", "--to", "main", "--no-check")
    else:
        args = ("refresh", "--to", f"git:{secret_url}@main", "--no-check")
    before = state(proj)
    proc = pq(proj, *args, check=1)  # cloned: it is no vllm-ascend
    line = one_error_line(proc)
    assert line.startswith(f"pq: error: vllm_ascend/worker/model_runner_v1.py: no such file in git:{url}@"), line
    assert f"Cloning {url} into " in proc.stderr, proc.stderr
    assert served_repo.authorized(), served_repo.seen
    mirror = next((cache / "git").glob("*.git"))
    assert git(mirror, "config", "remote.origin.url").strip() == url
    no_secret(proc.stdout, proc.stderr)
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


NO_REPOSITORY = (
    "pq: error: malformed upstream spec: expected git:<location>@<ref>, and its URL names no repository (a '/', "
    "'?' or '#' in a password is percent-encoded: %2F, %3F, %23)"
)
BAD_PORT = "pq: error: the upstream git location is a URL git cannot read: its port is not a number"


@pytest.mark.parametrize(
    ("middle", "ref", "line"),
    [
        ("'", "", NO_REPOSITORY),
        (" ", "", NO_REPOSITORY),
        ("@", "", NO_REPOSITORY),
        ("#", "@main", NO_REPOSITORY),
        ("?", "@main", NO_REPOSITORY),
        ("/", "@main", BAD_PORT),
    ],
    ids=["quote, no ref", "space, no ref", "at, no ref", "hash", "question mark", "slash"],
)
def test_a_git_spec_split_inside_its_password_is_one_line_without_it(
    proj: Path,  # noqa: F811
    cache: Path,
    middle: str,
    ref: str,
    line: str,
) -> None:
    """``git:URL`` without ``@REF`` splits at the password's "@" or the host's; a raw "#", "?" or "/" ends the
    URL's host inside the password: one line that shows no part of the spec."""
    before = state(proj)
    spec = f"git:https://alice:{HEAD}{middle}{TAIL}@127.0.0.1:1/x.git{ref}"
    proc = pq(proj, "refresh", "--to", spec, "--no-check", check=1)
    assert one_error_line(proc) == line
    no_secret(proc.stdout, proc.stderr)
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


@pytest.mark.parametrize("middle", ["#", "?", "/"])
def test_an_upstream_url_with_a_raw_delimiter_in_its_password_is_one_line_without_it(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    middle: str,
) -> None:
    monkeypatch.setenv("PQ_UPSTREAM_GIT", f"https://alice:{HEAD}{middle}{TAIL}@127.0.0.1:1/x.git")
    before = state(proj)
    proc = pq(proj, "refresh", "--to", "main", "--no-check", check=1)
    assert one_error_line(proc) == BAD_PORT
    no_secret(proc.stdout, proc.stderr)
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


# -- 4. a setting pq cannot use: one line naming it, never its value ---------------------------------------


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (f"http://alice:{HEAD}/{TAIL}@127.0.0.1:1/simple", "its port is not a number"),  # "/" ends the host
        (f"http://alice:{HEAD}#{TAIL}@127.0.0.1:1/simple", "its port is not a number"),
        (f"http://alice:{HEAD}?{TAIL}@127.0.0.1:1/simple", "its port is not a number"),
        (f"http://alice:{HEAD}@[::1/{TAIL}", "it is not a URL"),
        (f"ftp://alice:{HEAD}{TAIL}@127.0.0.1/simple", "not an http, https or file URL"),
        (f"http://alice:{HEAD}{TAIL}@/simple", "it names no host"),
        (f"http://alice:{HEAD}{TAIL}@127.0.0.1:1/sim ple", "a space or a control character outside its user name"),
    ],
    ids=["slash in password", "hash in password", "question mark in password", "open bracket", "ftp", "no host"]
    + ["space in path"],
)
@pytest.mark.parametrize("form", ["env", "file"])
def test_an_index_url_pq_cannot_read_is_one_line_naming_the_setting(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    value: str,
    why: str,
    form: str,
) -> None:
    config = configure(monkeypatch, tmp_path, form, index_url=value)
    before = state(proj)
    proc = pq(proj, "refresh", "--no-check", check=1)
    where = "PIP_INDEX_URL" if config is None else str(config)
    assert one_error_line(proc) == f"pq: error: {where}: pip's index-url holds a URL pq cannot read: {why}"
    no_secret(proc.stdout, proc.stderr)
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("timeout", "soon", "is not a number"),
        ("retries", "-1", "is not a number of zero or more"),
        ("no_index", "maybe", "is not a yes/no value (yes/no, true/false, on/off or 1/0)"),
        ("cert", "/nonexistent/ca.pem", "names no file or folder"),
        ("client_cert", "/nonexistent/client.pem", "names no file or folder"),
        (
            "extra_index_url",
            f"http://alice:{HEAD} {TAIL}@127.0.0.1:1/simple",
            "holds a URL pq cannot read: its port is not a number",
        ),
    ],
)
def test_a_setting_pq_cannot_use_is_one_line_naming_it(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    option: str,
    value: str,
    why: str,
) -> None:
    with Server(files_root(tmp_path), None, {"/simple/vllm-ascend/": LINK.encode()}) as server:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.port}/simple")
        monkeypatch.setenv(f"PIP_{option.upper()}", value)
        before = state(proj)
        proc = pq(proj, "refresh", "--no-check", check=1)
    name = option.replace("_", "-")
    assert one_error_line(proc) == f"pq: error: PIP_{option.upper()}: pip's {name} {why}"
    no_secret(proc.stdout, proc.stderr)
    assert state(proj) == before


# -- 5. no-index, find-links, trusted-host, cert, client-cert, retries ----------------------------------------


@pytest.mark.parametrize("form", ["env", "file"])
def test_no_index_asks_no_index_and_says_so_in_one_line(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    form: str,
) -> None:
    with Server(files_root(tmp_path), None, {"/simple/vllm-ascend/": LINK.encode()}) as server:
        config = configure(
            monkeypatch, tmp_path, form, index_url=f"http://127.0.0.1:{server.port}/simple", no_index="true"
        )
        before = state(proj)
        proc = pq(proj, "refresh", "--no-check", check=1)
    where = "PIP_NO_INDEX" if config is None else str(config)
    assert one_error_line(proc) == (
        f"pq: error: {where}: pip's no-index is set and no find-links location holds vllm-ascend: add one that "
        "does (pip's find-links), or unset no-index"
    )
    assert server.seen == []
    assert state(proj) == before


@pytest.mark.parametrize("link", ["folder", "file URL", "HTML file"])
def test_no_index_reads_find_links_alone(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    link: str,
) -> None:
    served = files_root(tmp_path)
    page = tmp_path / "links.html"
    page.write_text(f'<a href="{served.as_uri()}/files/vllm_ascend-99.0.0.tar.gz">x</a>')
    location = {
        "folder": str(served / "files"),
        "file URL": (served / "files").as_uri(),
        "HTML file": str(page),
    }[link]
    with Server(served, None, {"/simple/vllm-ascend/": LINK.encode()}) as server:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.port}/simple")
        monkeypatch.setenv("PIP_NO_INDEX", "1")
        monkeypatch.setenv("PIP_FIND_LINKS", f"{tmp_path / 'no-such-folder'} {location}")
        before = state(proj)
        proc = pq(proj, "refresh", "--no-check", check=1)
    assert one_error_line(proc) == NOT_GZIP
    assert server.seen == []
    assert state(proj) == before


def test_no_index_off_reads_the_index(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    with Server(files_root(tmp_path), None, {"/simple/vllm-ascend/": LINK.encode()}) as server:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.port}/simple")
        monkeypatch.setenv("PIP_NO_INDEX", "off")
        proc = pq(proj, "refresh", "--no-check", check=1)
    assert one_error_line(proc) == NOT_GZIP
    assert server.seen


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, made by openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on this machine")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.parametrize("how", ["none", "cert", "trusted-host", "trusted-host:port"])
def test_tls_is_verified_as_pip_is_told(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    certificate: tuple[Path, Path],
    how: str,
) -> None:
    cert, key = certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with Server(files_root(tmp_path), None, {"/simple/vllm-ascend/": LINK.encode()}, tls=tls) as server:
        monkeypatch.setenv("PIP_INDEX_URL", f"https://127.0.0.1:{server.port}/simple")
        if how == "cert":
            monkeypatch.setenv("PIP_CERT", str(cert))
        elif how.startswith("trusted-host"):
            monkeypatch.setenv("PIP_TRUSTED_HOST", "127.0.0.1" + (f":{server.port}" if how.endswith("port") else ""))
        before = state(proj)
        proc = pq(proj, "refresh", "--no-check", check=1)
    line = one_error_line(proc)
    if how == "none":
        assert line.startswith(f"pq: error: cannot read package index https://127.0.0.1:{server.port}/simple: "), line
        assert "CERTIFICATE_VERIFY_FAILED" in line, line
    else:
        assert line == NOT_GZIP
    assert state(proj) == before


def test_a_client_certificate_that_cannot_be_loaded_is_one_line(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    certificate: tuple[Path, Path],
) -> None:
    """pip's ``client-cert`` is presented (loaded with the TLS context); a file that holds no key is one line."""
    monkeypatch.setenv("PIP_INDEX_URL", "https://127.0.0.1:1/simple")
    monkeypatch.setenv("PIP_CLIENT_CERT", str(certificate[0]))  # the certificate without its key
    before = state(proj)
    proc = pq(proj, "refresh", "--no-check", check=1)
    line = one_error_line(proc)
    assert line.startswith("pq: error: PIP_CLIENT_CERT: pip's client-cert cannot be loaded: "), line
    assert state(proj) == before


@pytest.mark.parametrize("retries", [None, "1"])
def test_retries_ask_again_after_a_server_error(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    retries: str | None,
) -> None:
    with Server(files_root(tmp_path), None, {"/simple/vllm-ascend/": LINK.encode()}, fail=1) as server:
        index = f"http://127.0.0.1:{server.port}/simple"
        monkeypatch.setenv("PIP_INDEX_URL", index)
        if retries is not None:
            monkeypatch.setenv("PIP_RETRIES", retries)
        proc = pq(proj, "refresh", "--no-check", check=1)
    if retries is None:
        assert one_error_line(proc) == f"pq: error: cannot read package index {index}: HTTP 503 Service Unavailable"
    else:
        assert one_error_line(proc) == NOT_GZIP


def test_a_password_that_is_also_part_of_a_path_changes_no_path(
    proj: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Messages drop a known password wherever it stands; what pq reads, records and keys (the upstream's folder,
    the mirror's name) is never redacted text: the bundle is still found when the password is a word of its path."""
    word = Path(os.environ["PQ_UPSTREAM_GIT"]).parent.name  # "corpus"
    monkeypatch.setenv("https_proxy", f"http://alice:{word}@127.0.0.1:1")
    proc = pq(proj, "refresh", "--to", "c9e95ba32421", "--no-check")
    assert "refreshed onto " in proc.stdout, proc.stdout
    assert f"/{word}/" not in proc.stdout + proc.stderr


def test_a_pending_refresh_keeps_no_password_of_its_upstream_option(
    proj: Path,  # noqa: F811
) -> None:
    """``--upstream URL`` of a refresh that stops is kept for ``pq continue`` (``.git/pq/refresh.json`` and the
    journal) without the URL's user information; the culprit search says it cannot clone without it either."""
    written, _sent = password("quote")
    url = f"http://alice:{written}@127.0.0.1:1/x.git"
    proc = pq(proj, "refresh", "--to", "vllm-ascend==0.30.0rc2", "--upstream", url, check=3)
    assert "Cloning http://127.0.0.1:1/x.git into " in proc.stderr, proc.stderr
    saved = json.loads((proj / ".git" / "pq" / "refresh.json").read_text())
    assert saved["upstream_git"] == "http://127.0.0.1:1/x.git"
    no_secret(proc.stdout, proc.stderr)
    no_secret_anywhere(proj)
