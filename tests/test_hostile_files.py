"""Hostile round three (issue 31): files a user owns, URL credentials, and the bytes ``pq record`` takes.

Through the real command line on the adopted 0.30.0 project.  Every refused case checks exit 1, the one
line it prints (``pq: error: <file>[:<line>]: ...``), no traceback, and that every file and ref is as before
(``state``), the user's file byte for byte.  The credential cases run real git and a real HTTP server on
the loopback (python's ``http.server`` in a thread, asking for HTTP Basic) and check that the credential
reached the server, and no output nor any file of the project or the cache.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import git, pq, state
from test_errors import one_error_line, proj  # noqa: F401  (proj: a copy of adopted_030)

USER = b"my own work in progress: not pq's\n"
SECRET = "s3cr3t-T0KEN-9f1c"
CLEAN_TARGET = "c9e95ba32421"  # 0.30.0's series replays onto it without a conflict (see test_bad_input)
TOP = "0016-npu-model-runner-model-forward.patch"


def refused(proj: Path, *args: str) -> str:
    """Run pq, expect exit 1 with one error line and no traceback, and nothing changed; return the line."""
    before = state(proj)
    proc = pq(proj, *args, check=1)
    line = one_error_line(proc)
    assert "Traceback" not in proc.stdout
    assert line.startswith("pq: error: "), line
    assert state(proj) == before
    return line


# -- 1. a file pq did not write is never replaced ------------------------------------------------------------

FOREIGN = (
    "is not a patch of the series (patches/series does not list it) and pq did not write it; pq does not "
    "overwrite it: move it away (or rename it), then run the command again"
)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("0017-foo.patch", ("new", "foo")),
        ("0016-bar.patch", ("rename", "bar")),
        ("0017-sync-gpu-execute-model-1.patch", ("sync-gpu", "--omni", "0.30.0", "--backlog", "--apply", "all")),
    ],
    ids=["new", "rename", "sync-gpu"],
)
def test_a_writer_of_patches_keeps_a_patch_file_the_series_does_not_list(
    proj: Path,  # noqa: F811
    name: str,
    args: tuple[str, ...],
) -> None:
    mine = proj / "patches" / name
    mine.write_bytes(USER)
    assert refused(proj, *args) == f"pq: error: patches/{name}: {FOREIGN}"
    assert mine.read_bytes() == USER


def test_a_new_patch_over_a_file_pq_wrote_under_that_name_is_written(proj: Path) -> None:  # noqa: F811
    pq(proj, "new", "foo")
    body = (proj / "patches" / "0017-foo.patch").read_bytes()
    pq(proj, "undo")
    assert not (proj / "patches" / "0017-foo.patch").exists()
    (proj / "patches" / "0017-foo.patch").write_bytes(body)  # the very body: pq's own, not the user's
    pq(proj, "new", "foo")
    assert "0017-foo.patch" in (proj / "patches" / "series").read_text()


def test_undo_keeps_a_file_the_user_put_where_the_deleted_patch_was(proj: Path) -> None:  # noqa: F811
    pq(proj, "delete", "--top")
    mine = proj / "patches" / TOP
    mine.write_bytes(USER)
    assert refused(proj, "undo") == (
        f"pq: error: patches/{TOP}: changed since `pq delete`; pq undoes the last command only while what it "
        "wrote is unchanged: nothing was written"
    )


REPORTS = [
    (("refresh", "--to", CLEAN_TARGET, "--no-check", "--report"), "r.json", "a refresh report (--report)"),
    (("refresh", "--to", CLEAN_TARGET, "--no-check", "--markdown"), "r.md", "a refresh report (--markdown)"),
    (("check", "--no-sources", "--json"), "c.json", "a report of pq check (--json)"),
    (("blocks", "--markdown"), "b.md", "an inventory of pq blocks (--markdown)"),
]


@pytest.mark.parametrize(("args", "name", "what"), REPORTS, ids=["refresh-json", "refresh-md", "check", "blocks"])
def test_a_report_is_never_written_over_a_file_that_is_not_such_a_report(
    proj: Path,  # noqa: F811
    args: tuple[str, ...],
    name: str,
    what: str,
) -> None:
    mine = proj / name
    mine.write_bytes(USER)
    assert refused(proj, *args, name) == (
        f"pq: error: {name}: is not {what} pq wrote; pq does not overwrite it: name another file, or move it away"
    )
    assert mine.read_bytes() == USER
    # through a symbolic link the target is what counts
    mine.rename(proj / "target")
    mine.symlink_to("target")
    refused(proj, *args, name)
    assert (proj / "target").read_bytes() == USER


@pytest.mark.parametrize(("args", "name", "what"), REPORTS[2:], ids=["check", "blocks"])
def test_a_report_pq_wrote_or_an_empty_file_is_written_again(
    proj: Path,  # noqa: F811
    args: tuple[str, ...],
    name: str,
    what: str,
) -> None:
    (proj / name).write_bytes(b"")
    pq(proj, *args, name, check=None)
    first = (proj / name).read_bytes()
    assert first
    pq(proj, *args, name, check=None)
    assert (proj / name).read_bytes() == first


def pending(proj: Path) -> None:
    """A refresh kept pending by an error of pq check (a project rule), its report in r.json."""
    rules = proj / "patches" / "check-rules.toml"
    rules.write_text(
        '[[rule]]\nid = "no-del-hidden-states"\nkind = "regex"\nseverity = "error"\n'
        "pattern = '\\bdel hidden_states\\b'\nmessage = \"free hidden_states by rebinding it\"\n"
    )
    pq(proj, "refresh", "--to", CLEAN_TARGET, "--report", "r.json", check=1)


def test_continue_keeps_a_file_put_in_place_of_the_refresh_report(proj: Path) -> None:  # noqa: F811
    pending(proj)
    (proj / "r.json").write_bytes(USER)
    line = refused(proj, "continue", "--accept-errors")
    assert line == (
        "pq: error: r.json: is not a refresh report (--report) pq wrote; pq does not overwrite it: "
        "name another file, or move it away"
    )
    pq(proj, "continue", "--accept-errors", "--report", "r2.json")  # another path: the user's file stays
    assert (proj / "r.json").read_bytes() == USER
    assert b'"upstream"' in (proj / "r2.json").read_bytes()


def test_a_module_pq_did_not_write_is_not_replaced_by_a_build(proj: Path) -> None:  # noqa: F811
    (proj / "npu_worker" / ".pq-build").unlink()  # no record of what pq wrote: every module is the user's
    mine = proj / "npu_worker" / "base.py"
    mine.write_bytes(mine.read_bytes() + b"# mine\n")
    line = refused(proj, "build")
    assert line.startswith(f"pq: error: {mine}: is not a file pq wrote (.pq-build does not list it); "), line


# -- 2. npu_worker is not a folder ----------------------------------------------------------------------------

NOT_A_FOLDER = (
    "pq: error: npu_worker: is not a folder; pq writes the runners into a folder of that name: move the file "
    "away, then run the command again"
)
COMMANDS = [
    ("build",),
    ("record",),
    ("new", "x"),
    ("pop",),
    ("goto", "base"),
    ("delete", "--top"),
    ("rename", "zz"),
    ("diff",),
    ("check", "--no-sources"),
    ("refresh", "--to", CLEAN_TARGET, "--no-check"),
    ("reproduce",),
    ("sync-gpu", "--omni", "0.30.0", "--backlog", "--apply", "all"),
    ("abort",),
]


@pytest.mark.parametrize("kind", ["file", "symlink"])
@pytest.mark.parametrize("args", COMMANDS, ids=[a[0] for a in COMMANDS])
def test_npu_worker_that_is_no_folder_is_named_in_one_line(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    kind: str,
    args: tuple[str, ...],
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    git(proj, "rm", "-rq", "--cached", "--ignore-unmatch", "npu_worker")
    subprocess.run(["rm", "-r", str(proj / "npu_worker")], check=True)
    if kind == "file":
        (proj / "npu_worker").write_bytes(USER)
        expected = NOT_A_FOLDER
    else:
        (proj / "npu_worker").symlink_to(elsewhere)
        expected = (
            f"pq: error: npu_worker: is a symbolic link (to {elsewhere}); pq writes the runners into a folder of "
            "the project only, never through a link: remove the link (`rm npu_worker`), then run the command again"
        )
    assert refused(proj, *args) == expected
    assert list(elsewhere.iterdir()) == []


def test_build_out_that_is_a_file_is_named_in_one_line(proj: Path) -> None:  # noqa: F811
    (proj / "elsewhere").write_bytes(USER)
    assert refused(proj, "build", "--out", "elsewhere") == (
        "pq: error: elsewhere: is not a folder; pq writes the runners into a folder of that name: move the file "
        "away, then run the command again"
    )


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_status_reports_npu_worker_that_is_no_folder(proj: Path, tmp_path: Path, kind: str) -> None:  # noqa: F811
    subprocess.run(["rm", "-r", str(proj / "npu_worker")], check=True)
    if kind == "file":
        (proj / "npu_worker").write_bytes(USER)
    else:
        (proj / "npu_worker").symlink_to(tmp_path)
    before = state(proj)
    proc = pq(proj, "status")
    assert "Traceback" not in proc.stderr + proc.stdout
    warning = [line for line in proc.stdout.splitlines() if line.startswith("warning: npu_worker: ")]
    assert len(warning) == 1, proc.stdout
    assert state(proj) == before


# -- 3. credentials in URLs -------------------------------------------------------------------------------------


def no_secret_anywhere(*roots: Path) -> None:
    found = subprocess.run(["grep", "-rl", SECRET, *map(str, roots)], capture_output=True, text=True).stdout
    assert found == "", found


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own: what pq writes into it is searched for the credential."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PQ_CACHE", str(path))
    return path


@pytest.mark.parametrize("how", ["PQ_UPSTREAM_GIT", "git: spec"])
def test_an_upstream_url_credential_is_printed_nowhere(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    url = f"https://user:{SECRET}@127.0.0.1:1/x.git"
    if how == "PQ_UPSTREAM_GIT":
        monkeypatch.setenv("PQ_UPSTREAM_GIT", url)
        args: tuple[str, ...] = ("refresh", "--to", "main", "--no-check")
    else:
        args = ("refresh", "--to", f"git:{url}@main", "--no-check")
    before = state(proj)
    proc = pq(proj, *args, check=1)
    line = one_error_line(proc)
    assert line.startswith(
        "pq: error: cannot read upstream git repository https://127.0.0.1:1/x.git: unable to access "
        "'https://127.0.0.1:1/x.git/': "
    ), line
    assert SECRET not in proc.stdout + proc.stderr
    assert "Cloning https://127.0.0.1:1/x.git into " in proc.stderr
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


def test_the_crash_log_holds_no_credential_of_the_command_line(
    proj: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PQ_TEST_KILL_AT", "bug:command")  # a planted bug: exit 4, the command line in the log
    proc = pq(proj, "refresh", "--to", f"git:https://user:{SECRET}@127.0.0.1:1/x.git@main", check=4)
    log = (proj / ".git" / "pq" / "crash.log").read_text()
    assert "command: " in log and "git:https://127.0.0.1:1/x.git@main" in log, log
    assert SECRET not in log + proc.stdout + proc.stderr


class Server:
    """A loopback HTTP server in a thread serving ``root``'s files to requests with HTTP Basic ``alice`` and the
    secret (401 to the others); ``pages`` answers some paths with made bytes.  It records every request."""

    def __init__(self, root: Path, pages: dict[str, bytes] | None = None) -> None:
        self.seen: list[tuple[str, str | None]] = []
        want = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
        seen, made = self.seen, pages or {}

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                seen.append((self.path, self.headers.get("Authorization")))
                if self.headers.get("Authorization") != want:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="pq"')
                    self.end_headers()
                    return
                path = self.path.split("?")[0]
                if path in made:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.end_headers()
                    self.wfile.write(made[path])
                    return
                super().do_GET()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def authorized(self) -> bool:
        want = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
        return bool(self.seen) and all(auth == want for _path, auth in self.seen)


@pytest.fixture
def served_repo(tmp_path: Path) -> Iterator[Server]:
    """A small bare repository served over git's dumb HTTP protocol, behind HTTP Basic."""
    work = tmp_path / "up-work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "README").write_text("not vllm-ascend\n")
    git(work, "add", "README")
    git(work, "commit", "-qm", "one commit")
    root = tmp_path / "served"
    root.mkdir()
    git(tmp_path, "clone", "-q", "--bare", str(work), str(root / "up.git"))
    git(root / "up.git", "update-server-info")
    with Server(root) as server:
        yield server


def test_a_clone_authenticates_and_keeps_no_credential(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    served_repo: Server,
) -> None:
    url = f"http://127.0.0.1:{served_repo.port}/up.git"
    monkeypatch.setenv("PQ_UPSTREAM_GIT", url.replace("http://", f"http://alice:{SECRET}@"))
    before = state(proj)
    proc = pq(proj, "refresh", "--to", "main", "--no-check", check=1)  # cloned: it is no vllm-ascend
    line = one_error_line(proc)
    assert line.startswith(f"pq: error: vllm_ascend/worker/model_runner_v1.py: no such file in git:{url}@"), line
    assert SECRET not in proc.stdout + proc.stderr
    assert f"Cloning {url} into " in proc.stderr, proc.stderr
    assert served_repo.authorized(), served_repo.seen
    mirrors = list((cache / "git").glob("*.git"))
    assert len(mirrors) == 1
    assert git(mirrors[0], "config", "remote.origin.url").strip() == url
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


ARCHIVE = b"not an archive\n"


@pytest.fixture
def served_index(tmp_path: Path) -> Iterator[Server]:
    """An index with one vllm-ascend release whose archive is no archive, behind HTTP Basic."""
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "vllm_ascend-99.0.0.tar.gz").write_bytes(ARCHIVE)
    link = f'<a href="/files/vllm_ascend-99.0.0.tar.gz#sha256={hashlib.sha256(ARCHIVE).hexdigest()}">x</a>'
    with Server(tmp_path, {"/simple/vllm-ascend/": link.encode()}) as server:
        yield server


@pytest.mark.parametrize("how", ["index URL", "netrc"])
def test_the_registry_authenticates_as_pip_does(
    proj: Path,  # noqa: F811
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    served_index: Server,
    how: str,
) -> None:
    index = f"http://127.0.0.1:{served_index.port}/simple"
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    if how == "netrc":
        monkeypatch.setenv("PIP_INDEX_URL", index)
        netrc = tmp_path / "home" / ".netrc"
        netrc.write_text(f"machine 127.0.0.1 login alice password {SECRET}\n")
        netrc.chmod(0o600)
    else:
        monkeypatch.setenv("PIP_INDEX_URL", index.replace("http://", f"http://alice:{SECRET}@"))
    before = state(proj)
    proc = pq(proj, "refresh", "--no-check", check=1)
    assert one_error_line(proc) == (
        "pq: error: cannot read archive vllm_ascend-99.0.0.tar.gz "
        f"(pinned sha256 {hashlib.sha256(ARCHIVE).hexdigest()[:12]}): not a gzip file"
    )
    assert served_index.authorized(), served_index.seen
    assert [p for p, _a in served_index.seen][-1] == "/files/vllm_ascend-99.0.0.tar.gz"
    assert SECRET not in proc.stdout + proc.stderr
    assert state(proj) == before
    no_secret_anywhere(proj, cache)


# -- 4. bytes a patch cannot hold -------------------------------------------------------------------------------


@pytest.mark.parametrize(("bad", "what"), [(b"\xff", "byte 0xff is not UTF-8"), (b"\0", "a NUL byte (0x00)")])
@pytest.mark.parametrize("args", [("record",), ("new", "--record", "mine")], ids=["record", "new"])
def test_a_module_that_is_no_text_is_not_recorded(
    proj: Path,  # noqa: F811
    bad: bytes,
    what: str,
    args: tuple[str, ...],
) -> None:
    module = proj / "npu_worker" / "base.py"
    data = module.read_bytes()
    at = data.index(b"\n", 200)
    module.write_bytes(data[:at] + b"  # x" + bad + data[at:])
    line = data.count(b"\n", 0, at) + 1
    column = at - data.rfind(b"\n", 0, at) - 1 + len(b"  # x") + 1
    assert refused(proj, *args) == (
        f"pq: error: npu_worker/base.py:{line}: {what} at column {column}; a patch holds UTF-8 text only: "
        "remove the byte (or `pq build --discard` drops every edit no patch holds), then run the command again"
    )
    status = pq(proj, "status").stdout
    assert "unrecorded: npu_worker/base.py +1 -1 lines" in status, status


def test_continue_does_not_record_a_module_that_is_no_text(proj: Path) -> None:  # noqa: F811
    pending(proj)
    module = proj / "npu_worker" / "base.py"
    data = module.read_bytes()
    module.write_bytes(data.replace(b"\n", b"\xff\n", 1))
    column = data.index(b"\n") + 1
    assert refused(proj, "continue", "--accept-errors") == (
        f"pq: error: npu_worker/base.py:1: byte 0xff is not UTF-8 at column {column}; a patch holds UTF-8 text "
        "only: remove the byte (or `pq build --discard` drops every edit no patch holds), then run the command again"
    )


@pytest.mark.parametrize(
    ("bad", "message"),
    [(b"\xff", "not valid UTF-8 (byte 0xff at column 2)"), (b"\0", "binary content (a NUL byte) in the diff")],
    ids=["0xff", "NUL"],
)
@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("build",),
        ("series",),
        ("show", "base"),
        ("diff",),
        ("check", "--no-sources"),
        ("push",),
        ("goto", "base"),
        ("record",),
        ("accept",),
        ("blocks",),
    ],
    ids=lambda a: a[0],
)
def test_a_patch_file_that_is_no_text_is_named_by_every_reader(
    proj: Path,  # noqa: F811
    bad: bytes,
    message: str,
    args: tuple[str, ...],
) -> None:
    victim = proj / "patches" / "0002-base.patch"
    data = victim.read_bytes()
    at = data.index(b"\n+") + 2
    victim.write_bytes(data[:at] + bad + data[at:])
    line = data.count(b"\n", 0, at) + 1
    assert refused(proj, *args).startswith(f"pq: error: patches/0002-base.patch:{line}: {message}")
