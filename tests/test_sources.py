"""Tests of the upstream sources on real data: the vllm-ascend git bundle of the corpus and the
package registry that pip is configured with.  Only the file:// index at the end is synthetic
(a tiny wheel and sdist made here), for the edge cases a real registry never shows on demand.

``PQ_CORPUS`` points at the corpus (default /work/shared/corpus when it exists); the git tests
skip without it.  The registry tests skip when the configured index cannot be reached.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pygit2
import pytest

from patch_queue import presets
from patch_queue.errors import SourceError
from patch_queue.git.remote import UpstreamGit
from patch_queue.sources import snapshot
from patch_queue.sources.archives import release_files
from patch_queue.sources.cache import MethodCache, cache_dir
from patch_queue.sources.registry import DistFile, index_urls, newest_release, parse_version, pick_file
from patch_queue.sources.snapshot import open_git, resolve_upstream, upstream_git_location

RUNNER = "vllm_ascend/worker/model_runner_v1.py"
OMNI_NPU = "vllm_omni/platforms/npu/worker/"


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One download cache for the whole session, so each archive and clone is fetched once."""
    return tmp_path_factory.mktemp("pq-cache")


@pytest.fixture(autouse=True)
def _cache_env(session_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PQ_CACHE", str(session_cache))
    monkeypatch.delenv("PQ_UPSTREAM_GIT", raising=False)


@pytest.fixture(scope="session")
def corpus() -> Path:
    explicit = os.environ.get("PQ_CORPUS")
    path = Path(explicit) if explicit else Path("/work/shared/corpus")
    if not (path / "vllm-ascend.bundle").is_file():
        pytest.skip(f"no corpus at {path} (set PQ_CORPUS)")
    return path


@pytest.fixture(scope="session")
def bundle(corpus: Path) -> str:
    return str(corpus / "vllm-ascend.bundle")


@pytest.fixture(scope="session")
def upstream(bundle: str, session_cache: Path) -> UpstreamGit:
    """The bundle mirrored into this module's cache. PQ_CACHE is set only while it opens: a session fixture that
    kept it set would hand this module's cache to every later module's module-scoped fixtures."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PQ_CACHE", str(session_cache))
        return open_git(bundle, progress=lambda _: None)


@pytest.fixture(scope="session")
def registry(session_cache: Path) -> str:
    """The newest vllm-ascend on the real registry; skips when the registry is unreachable."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PQ_CACHE", str(session_cache))
        try:
            return newest_release("vllm-ascend")
        except SourceError as exc:
            if "cannot read package index" in str(exc):
                pytest.skip(f"package registry unreachable: {exc}")
            raise


# -- cache and versions --------------------------------------------------------------------


def test_cache_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == (tmp_path / "explicit").resolve()
    monkeypatch.delenv("PQ_CACHE")
    assert cache_dir() == (tmp_path / "xdg" / "pq").resolve()
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == (tmp_path / "home" / ".cache" / "pq").resolve()


def test_pep440_order_and_canonical_text() -> None:
    ordered = [
        "0.7.3rc1",
        "0.7.3",
        "0.7.3.post1",
        "0.9.2rc1",
        "0.10.0rc1",
        "0.11.0rc0",
        "0.11.0",
        "1.0.dev0",
        "1.0a1.dev2",
        "1.0a1",
        "1.0b2",
        "1.0rc1",
        "1.0",
        "1.0+local.1",
        "1.0.post1.dev0",
        "1.0.post1",
        "1!0.1",
    ]
    keys = []
    for text in ordered:
        parsed = parse_version(text)
        assert parsed is not None, text
        keys.append(parsed.key)
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    one, one_zero = parse_version("1.0"), parse_version("1.0.0")
    assert one is not None and one_zero is not None and one.key == one_zero.key
    spellings = {"0.30.0-RC2": "0.30.0rc2", "1.0-1": "1.0.post1", "1.0.a.1": "1.0a1", "v2.0c3": "2.0rc3"}
    for text, canonical in spellings.items():
        parsed = parse_version(text)
        assert parsed is not None and parsed.text == canonical, text
    assert parse_version("not-a-version") is None


# -- the git bundle ------------------------------------------------------------------------


def test_bundle_is_mirrored_into_the_cache(upstream: UpstreamGit, bundle: str, session_cache: Path) -> None:
    key = hashlib.sha1(str(Path(bundle).resolve()).encode()).hexdigest()[:16]
    assert upstream.path == session_cache / "git" / f"{key}.git"
    repo = pygit2.Repository(str(upstream.path))
    assert repo.is_bare
    refs = set(repo.references)
    assert "refs/heads/main" in refs
    assert "refs/tags/v0.25.1rc1" in refs and "refs/tags/v0.7.1rc1" in refs
    assert any(r.startswith("refs/heads/releases/v") for r in refs)
    # No temp dir of the atomic clone is left behind.
    assert not [p for p in upstream.path.parent.iterdir() if p.name.startswith(".tmp-")]


def test_read_blobs_streams_what_read_gives(upstream: UpstreamGit) -> None:
    path = "vllm_ascend/worker/model_runner_v1.py"
    commits = upstream.commits_touching(path)[:40]
    blobs = list(dict.fromkeys(b for c in commits if (b := upstream.blob_id(c, path)) is not None))
    first = {blob: c for c in reversed(commits) if (blob := upstream.blob_id(c, path)) is not None}
    got = list(upstream.read_blobs(blobs))
    assert [b for b, _ in got] == blobs and len(blobs) > 20
    assert all(data == upstream.read(first[b], path) for b, data in got)
    assert list(upstream.read_blobs([])) == []
    with pytest.raises(SourceError, match=r"cannot read blob 0{40} from .*missing"):
        list(upstream.read_blobs([blobs[0], "0" * 40]))


def test_git_run_gives_stdout_or_gits_reason_without_gitpython(tmp_path: Path) -> None:
    """``command.run``: git's stdout as bytes; a failure names git's own reason; GitPython stays unimported."""
    code = (
        "import sys\n"
        "from patch_queue.git import command\n"
        "assert command.run('.', 'version').startswith(b'git version ')\n"
        "try:\n"
        "    command.run('.', 'log')\n"
        "except command.GitFailed as exc:\n"
        "    print(exc)\n"
        "print('git' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert proc.stdout.splitlines() == [
        "git log failed: not a git repository (or any of the parent directories): .git",
        "False",
    ]


def test_commits_with_blob_are_the_ones_git_log_shows_making_it(tmp_path: Path) -> None:
    """The commits that made a file a given blob, as ``git log --raw`` lists them: the root commit counts, a
    merge that sets the file (it shows no diff for a merge) does not."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q", "-b", "main")
    git("config", "user.email", "pq@localhost")
    git("config", "user.name", "pq")
    for step in ("1 f root", "2 f side", "3 g main", "merge", "1 f back"):
        if step == "merge":  # an evil merge: the file is neither side's
            git("merge", "-q", "--no-commit", "side")
            (tmp_path / "f").write_text("5\n")
            git("add", "f")
            git("commit", "-qm", "merge")
            continue
        text, name, branch = step.split()
        if branch == "side":
            git("checkout", "-qb", "side")
        (tmp_path / name).write_text(text + "\n")
        git("add", name)
        git("commit", "-qm", step)
        if branch == "side":
            git("checkout", "-q", "main")
    small = open_git(str(tmp_path), progress=lambda _: None)
    shown: dict[str, list[str]] = {}
    commit = ""
    for line in git("log", "--all", "--topo-order", "--format=%H", "--raw", "--no-abbrev", "--", "f").splitlines():
        if line.startswith(":"):
            shown.setdefault(line.split()[3], []).insert(0, commit)
        elif line:
            commit = line
    blobs = {git("rev-parse", f"{c}:f").strip() for c in git("rev-list", "--all").split()}
    assert len(blobs) == 3 and len(shown[git("rev-parse", "HEAD:f").strip()]) == 2
    assert {b: small.commits_with_blob("f", b) for b in blobs} == {b: shown.get(b, []) for b in blobs}


def test_resolve_tag_branch_and_abbreviated_sha(upstream: UpstreamGit) -> None:
    tag = upstream.resolve("v0.25.1rc1")
    assert len(tag) == 40 and all(c in "0123456789abcdef" for c in tag)
    assert upstream.read(tag, RUNNER) is not None
    branch = upstream.resolve("releases/v0.26.0rc")
    assert branch != tag
    assert upstream.resolve("origin/releases/v0.26.0rc") == branch
    assert upstream.resolve(branch[:10]) == branch
    assert upstream.resolve(branch) == branch
    assert upstream.subject(branch)
    assert upstream.commit_time(branch) > upstream.commit_time(upstream.resolve("v0.7.1rc1"))


def test_resolve_public_sha_through_trailer(upstream: UpstreamGit) -> None:
    local = upstream.resolve("bb4d0776eee8")  # vllm-omni 0.22.0's declared base (a public sha)
    public = upstream.public_commit(local)
    assert public.startswith("bb4d0776eee8") and len(public) == 40
    assert local != public  # the bundle's history was rewritten
    assert upstream.find_public("bb4d0776eee8") == local
    assert upstream.find_public(public) == local
    assert upstream.resolve(public) == local
    assert upstream.find_public("bb4d07") is None  # shorter than 7 hex chars is not looked up


def test_commits_touching_runner(upstream: UpstreamGit) -> None:
    start = time.monotonic()
    commits = upstream.commits_touching(RUNNER)
    assert time.monotonic() - start < 30
    assert len(commits) >= 608
    assert len(set(commits)) == len(commits)
    repo = pygit2.Repository(str(upstream.path))
    # Newest first: no commit is a descendant of one listed before it.
    for newer, older in zip(commits[:40], commits[1:41], strict=True):
        assert not repo.descendant_of(older, newer)
    # Each listed commit changed the file relative to its first parent.
    for sha in commits[:10]:
        commit = repo[sha]
        assert isinstance(commit, pygit2.Commit)
        before = upstream.read(str(commit.parents[0].id), RUNNER) if commit.parents else None
        assert upstream.read(sha, RUNNER) != before
    # The main branch's own history of the file is all there.
    reachable_from_main = {str(c.id) for c in repo.walk(repo.revparse_single("main").id)}
    on_main = [sha for sha in commits if sha in reachable_from_main]
    assert len(on_main) >= 608
    assert upstream.commits_touching(RUNNER) == commits  # cached answer is the same


def test_read_blob_and_list(upstream: UpstreamGit) -> None:
    tag = upstream.resolve("v0.25.1rc1")
    assert upstream.read(tag, "vllm_ascend/no/such_file.py") is None
    assert upstream.blob_id(tag, "vllm_ascend/no/such_file.py") is None
    assert upstream.read(tag, "vllm_ascend/worker") is None  # a directory is not a file
    blob = upstream.blob_id(tag, RUNNER)
    data = upstream.read(tag, RUNNER)
    assert blob is not None and data is not None
    assert blob == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    files = upstream.list_files(tag, "vllm_ascend/worker/")
    assert RUNNER in files and files == sorted(files)
    assert all(f.startswith("vllm_ascend/worker/") for f in files)


def test_unknown_ref_message(upstream: UpstreamGit) -> None:
    with pytest.raises(SourceError) as info:
        upstream.resolve("no-such-ref-xyz")
    assert str(info.value) == f"unknown upstream ref 'no-such-ref-xyz' in {upstream.location}"
    with pytest.raises(SourceError, match="unknown upstream ref 'deadbeefcafe1234'"):
        upstream.resolve("deadbeefcafe1234")


def test_unreachable_locations(tmp_path: Path, session_cache: Path) -> None:
    not_a_repo = tmp_path / "plain"
    not_a_repo.mkdir()
    (not_a_repo / "file.txt").write_text("hello\n")
    fake_bundle = tmp_path / "broken.bundle"
    fake_bundle.write_text("not a bundle\n")
    for location in (tmp_path / "missing", not_a_repo, fake_bundle):
        with pytest.raises(SourceError) as info:
            open_git(str(location), progress=lambda _: None)
        message = str(info.value)
        assert message.startswith(f"cannot read upstream git repository {location}: ")
        assert "\n" not in message
    git_dir = session_cache / "git"
    leftovers = [p.name for p in git_dir.iterdir() if p.name.startswith(".tmp-")] if git_dir.is_dir() else []
    assert leftovers == []
    with pytest.raises(SourceError, match="cannot read upstream git repository"):
        resolve_upstream("main", upstream_git=str(not_a_repo), queue=presets.NPU)


def test_git_snapshot_and_respec(bundle: str, upstream: UpstreamGit, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = resolve_upstream("bb4d0776eee8", upstream_git=bundle, progress=lambda _: None, queue=presets.NPU)
    local = upstream.resolve("bb4d0776eee8")
    assert snap.kind == "git"
    assert snap.pin == local
    assert snap.spec == f"git:{Path(bundle).resolve()}@{local}"
    assert snap.public_commit is not None and snap.public_commit.startswith("bb4d0776eee8")
    assert snap.label == "git bb4d0776eee8"  # the public commit, whatever the mirror
    assert snap.read(RUNNER) == upstream.read(local, RUNNER)
    assert snap.exists(RUNNER) and not snap.exists("vllm_ascend/nope.py")
    with pytest.raises(SourceError, match="nope.py"):
        snap.read("vllm_ascend/nope.py")
    assert RUNNER in snap.list_files("vllm_ascend/worker/")
    again = resolve_upstream(snap.spec, queue=presets.NPU)
    assert again == snap
    # PQ_UPSTREAM_GIT is the default location.
    monkeypatch.setenv("PQ_UPSTREAM_GIT", bundle)
    assert upstream_git_location(None, spec=presets.NPU) == bundle
    assert resolve_upstream("v0.25.1rc1", queue=presets.NPU).pin == upstream.resolve("v0.25.1rc1")
    monkeypatch.delenv("PQ_UPSTREAM_GIT")
    assert upstream_git_location(None, spec=presets.NPU) == "https://github.com/vllm-project/vllm-ascend.git"
    assert upstream_git_location("/x", spec=presets.NPU) == "/x"


def test_local_repository_is_fetched_on_later_use(tmp_path: Path) -> None:
    work = tmp_path / "work"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@e"

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=work, env=env, check=True, capture_output=True, text=True).stdout

    work.mkdir()
    git("init", "-q", "-b", "main")
    (work / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("commit", "-q", "-m", "first\n\nUpstream-Commit: 1111111111111111111111111111111111111111")
    repo = open_git(str(work), progress=lambda _: None)
    first = repo.resolve("main")
    assert repo.public_commit(first) == "1" * 40
    (work / "a.txt").write_text("two\n")
    git("commit", "-q", "-am", "second")
    snapshot._open_repos.clear()  # a later run of pq
    repo = open_git(str(work), progress=lambda _: None)
    second = repo.resolve("main")
    assert second != first
    assert repo.read(second, "a.txt") == b"two\n"
    assert repo.public_commit(second) == second  # no trailer: the commit is its own public sha
    assert repo.commits_touching("a.txt") == [second, first]
    assert repo.find_public("1111111") == first
    # an unchanged source is not fetched again (a git process per command); a changed one is
    fetched = (repo.path / "FETCH_HEAD").stat().st_mtime_ns
    snapshot._open_repos.clear()
    assert open_git(str(work), progress=lambda _: None).resolve("main") == second
    assert (repo.path / "FETCH_HEAD").stat().st_mtime_ns == fetched
    git("tag", "v1", first)
    snapshot._open_repos.clear()
    assert open_git(str(work), progress=lambda _: None).resolve("v1") == first
    assert (repo.path / "FETCH_HEAD").stat().st_mtime_ns != fetched


# -- directories ---------------------------------------------------------------------------


def test_dir_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "checkout"
    (root / "vllm_ascend" / "worker").mkdir(parents=True)
    (root / "vllm_ascend" / "worker" / "model_runner_v1.py").write_bytes(b"class NPUModelRunner: ...\n")
    (root / "vllm_ascend" / "__init__.py").write_bytes(b"")
    for given in (str(root), str(root / "vllm_ascend"), f"dir:{root}"):
        snap = resolve_upstream(given, queue=presets.NPU)
        assert snap.kind == "dir" and snap.pin == "" and snap.public_commit is None
        assert snap.read(RUNNER) == b"class NPUModelRunner: ...\n"
        assert snap.list_files("vllm_ascend/") == ["vllm_ascend/__init__.py", RUNNER]
        assert resolve_upstream(snap.spec, queue=presets.NPU) == snap
    snap = resolve_upstream(str(root), queue=presets.NPU)
    assert snap.spec == f"dir:{root.resolve()}" and snap.label == f"dir {root.resolve()}"
    assert not snap.exists("vllm_ascend/missing.py")
    with pytest.raises(SourceError, match="missing.py"):
        snap.read("vllm_ascend/missing.py")
    with pytest.raises(SourceError):
        snap.read("../outside.py")
    monkeypatch.chdir(root)
    assert resolve_upstream("./vllm_ascend", queue=presets.NPU) == resolve_upstream(
        str(root / "vllm_ascend"), queue=presets.NPU
    )
    with pytest.raises(SourceError, match="no such directory"):
        resolve_upstream(f"dir:{tmp_path / 'nothing'}", queue=presets.NPU)


# -- the real registry ---------------------------------------------------------------------


def test_newest_vllm_ascend_release(registry: str) -> None:
    newest = parse_version(registry)
    floor = parse_version("0.30.0rc2")
    assert newest is not None and floor is not None
    assert newest.key >= floor.key


def test_sdist_release_snapshot(registry: str, session_cache: Path) -> None:
    messages: list[str] = []
    snap = resolve_upstream("vllm-ascend==0.30.0rc2", progress=messages.append, queue=presets.NPU)
    assert snap.kind == "release"
    assert snap.spec == "vllm-ascend==0.30.0rc2"
    assert snap.label == "vllm-ascend 0.30.0rc2"
    assert snap.public_commit is None
    filename, _, sha = snap.pin.partition("#sha256=")
    assert filename == "vllm_ascend-0.30.0rc2.tar.gz"
    archive = session_cache / "dist" / filename
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == sha
    runner = snap.read(RUNNER)
    assert b"class NPUModelRunner" in runner
    assert RUNNER in snap.list_files("vllm_ascend/worker/")
    assert not any(name.startswith("vllm_ascend-0.30.0rc2/") for name in snap.list_files())
    # Spelled differently, the same release.
    assert resolve_upstream("vllm_ascend == 0.30.0-rc2", progress=messages.append, queue=presets.NPU) == snap
    assert not [p for p in archive.parent.iterdir() if p.name.startswith(".part-")]


def test_latest_is_newest(registry: str) -> None:
    snap = resolve_upstream("latest", progress=lambda _: None, queue=presets.NPU)
    assert snap.spec == f"vllm-ascend=={registry}"


def test_omni_wheel_files_match_corpus(registry: str, corpus: Path) -> None:
    files = release_files("vllm-omni", "0.30.0", OMNI_NPU, progress=lambda _: None)
    expected_dir = corpus / "vllm-omni-0.30.0" / "npu"
    expected = {OMNI_NPU + p.name: p.read_bytes() for p in expected_dir.iterdir() if p.is_file()}
    assert sorted(files) == sorted(expected)
    for name, data in expected.items():
        assert files[name] == data, name


def test_unknown_release(registry: str) -> None:
    with pytest.raises(SourceError) as info:
        resolve_upstream("vllm-ascend==9.9.9", queue=presets.NPU)
    assert str(info.value) == f"unknown release vllm-ascend==9.9.9 (newest on the registry: {registry})"


def test_tampered_archive_is_replaced(registry: str, session_cache: Path) -> None:
    release_files("vllm-omni", "0.30.0", OMNI_NPU, progress=lambda _: None)
    archive = session_cache / "dist" / "vllm_omni-0.30.0-py3-none-any.whl"
    good = archive.read_bytes()
    tampered = bytearray(good)
    tampered[len(tampered) // 2] ^= 0xFF
    archive.write_bytes(bytes(tampered))
    messages: list[str] = []
    files = release_files("vllm-omni", "0.30.0", OMNI_NPU, progress=messages.append)
    assert any("sha256" in m and archive.name in m for m in messages)
    assert archive.read_bytes() == good
    assert OMNI_NPU + "npu_model_runner.py" in files


# -- a file:// index (synthetic: edge cases on demand) -------------------------------------


def _wheel(name: str, version: str, files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        wheel.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\nVersion: {version}\n")
    return buffer.getvalue()


def _sdist(name: str, version: str, files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as sdist:
        for path, data in {**files, "PKG-INFO": b"Name: x\n"}.items():
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size = len(data)
            sdist.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _file_index(root: Path, project: str, archives: dict[str, bytes], *, yanked: set[str], bad: set[str]) -> None:
    (root / "files").mkdir(parents=True, exist_ok=True)
    page = root / "simple" / project
    page.mkdir(parents=True)
    links = []
    for filename, data in archives.items():
        (root / "files" / filename).write_bytes(data)
        digest = hashlib.sha256(data + (b"x" if filename in bad else b"")).hexdigest()
        extra = ' data-yanked=""' if filename in yanked else ""
        links.append(f'<a href="../../files/{filename}#sha256={digest}"{extra}>{filename}</a><br/>')
    (page / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")


_FIRST_INDEX = (
    "import sys\nfrom patch_queue.sources import registry\nprint(registry.index_urls()[0], 'pip' in sys.modules)"
)


def test_pip_configuration_is_read_in_pips_order_and_kept_until_a_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip's own configuration class reads the files: a later file of a section overrides an earlier one (the
    legacy ~/.pip/pip.conf loads before ~/.config/pip/pip.conf), [install] beats [global]. The answer is kept:
    the next process reads it without importing pip, until a file pip read changes."""
    for key in [k for k in os.environ if k.startswith(("PIP_", "XDG_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    home = Path(os.environ["HOME"])
    (home / ".pip").mkdir()
    (home / ".pip" / "pip.conf").write_text("[global]\nindex-url = file:///legacy\n")
    (home / ".config" / "pip").mkdir(parents=True)
    config = home / ".config" / "pip" / "pip.conf"
    config.write_text("[global]\nindex-url = file:///global\n[install]\nindex-url = file:///install\n")

    def first_index() -> list[str]:
        return subprocess.run(
            [sys.executable, "-c", _FIRST_INDEX], capture_output=True, text=True, check=True
        ).stdout.split()

    assert first_index() == ["file:///install", "True"]  # read by pip
    assert first_index() == ["file:///install", "False"]  # kept
    config.write_text("[global]\nindex-url = file:///global\n")
    assert first_index() == ["file:///global", "True"]  # a file pip read changed: read again
    (home / ".config" / "pip" / "pip.conf").unlink()
    assert first_index() == ["file:///legacy", "True"]
    monkeypatch.setenv("PIP_INDEX_URL", "file:///env")  # the environment beats every file, and is part of the key
    assert first_index() == ["file:///env", "True"]
    assert first_index() == ["file:///env", "False"]
    # a file holding credentials: read every time, never written to the cache
    monkeypatch.delenv("PIP_INDEX_URL")
    (home / ".pip" / "pip.conf").write_text("[global]\nindex-url = http://alice:s3cret@127.0.0.1:9/simple\n")
    assert first_index() == ["http://alice:s3cret@127.0.0.1:9/simple", "True"]
    assert first_index() == ["http://alice:s3cret@127.0.0.1:9/simple", "True"]
    assert not [f for f in (tmp_path / "cache").rglob("*") if f.is_file() and b"s3cret" in f.read_bytes()]


def test_file_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "index"
    module = {"pq_fixture_pkg/__init__.py": b"VALUE = 1\n", "pq_fixture_pkg/sub/mod.py": b"X = 2\n"}
    archives = {
        "pq_fixture_pkg-0.9.tar.gz": _sdist("pq_fixture_pkg", "0.9", module),
        "pq_fixture_pkg-1.0-cp311-cp311-manylinux_2_17_x86_64.whl": _wheel("pq_fixture_pkg", "1.0", {}),
        "pq_fixture_pkg-1.0-py3-none-any.whl": _wheel("pq_fixture_pkg", "1.0", module),
        "pq_fixture_pkg-1.0.tar.gz": _sdist("pq_fixture_pkg", "1.0", {}),
        "pq_fixture_pkg-1.1rc1-py3-none-any.whl": _wheel("pq_fixture_pkg", "1.1rc1", module),
        "pq_fixture_pkg-2.0-py3-none-any.whl": _wheel("pq_fixture_pkg", "2.0", module),
        "pq_fixture_pkg-3.0-py3-none-any.whl": _wheel("pq_fixture_pkg", "3.0", module),
    }
    bad = "pq_fixture_pkg-3.0-py3-none-any.whl"
    _file_index(index, "pq-fixture-pkg", archives, yanked={"pq_fixture_pkg-2.0-py3-none-any.whl"}, bad={bad})
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path / 'empty-index'}")  # lacks the project
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"file://{index / 'simple'}")
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    assert index_urls() == [f"file://{tmp_path / 'empty-index'}", f"file://{index / 'simple'}"]

    # 2.0 is yanked; 3.0 (whose listed hash is wrong) is still the newest release.
    assert newest_release("pq_fixture.pkg") == "3.0"
    with pytest.raises(SourceError, match=r"unknown release pq-fixture-pkg==2\.0 \(newest on the registry: 3\.0\)"):
        release_files("pq-fixture-pkg", "2.0", "")

    # A pure wheel is preferred over a platform wheel and the sdist; the sdist over a platform wheel.
    snap = resolve_upstream("pq-fixture-pkg==1.0", progress=lambda _: None, queue=presets.NPU)
    assert snap.pin.startswith("pq_fixture_pkg-1.0-py3-none-any.whl#sha256=")
    one = parse_version("1.0")
    assert one is not None
    plat = DistFile("p-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", "u", None, one, "wheel", False)
    sdist = DistFile("p-1.0.tar.gz", "u", None, one, "sdist", False)
    assert pick_file([plat, sdist]) is sdist
    assert pick_file([plat]) is plat
    assert snap.read("pq_fixture_pkg/sub/mod.py") == b"X = 2\n"
    # Only an sdist: its top folder is stripped.
    files = release_files("pq-fixture-pkg", "0.9", "pq_fixture_pkg/", progress=lambda _: None)
    assert files == module
    assert resolve_upstream("pq-fixture-pkg==0.9", progress=lambda _: None, queue=presets.NPU).list_files() == [
        "PKG-INFO",
        *sorted(module),
    ]
    # The sdist is unpacked once into a zip named by its sha256; a damaged or foreign copy is made again.
    digest = hashlib.sha256(archives["pq_fixture_pkg-0.9.tar.gz"]).hexdigest()
    unpacked = tmp_path / "cache" / "unpacked" / f"{digest}.zip"
    assert zipfile.ZipFile(unpacked).namelist() == ["PKG-INFO", *sorted(module)]
    for damage in (
        lambda b: b.replace(b"VALUE = 1", b"VALUE = 7"),
        lambda b: b[:40],
        lambda b: b.replace(digest.encode(), b"0" * 64),
    ):
        unpacked.write_bytes(damage(unpacked.read_bytes()))
        assert release_files("pq-fixture-pkg", "0.9", "pq_fixture_pkg/", progress=lambda _: None) == module
        unpacked.write_bytes(damage(unpacked.read_bytes()))
        shutil.rmtree(tmp_path / "cache" / "derived", ignore_errors=True)  # a file the snapshot never read
        snap = resolve_upstream("pq-fixture-pkg==0.9", progress=lambda _: None, queue=presets.NPU)
        assert snap.read("pq_fixture_pkg/__init__.py") == b"VALUE = 1\n"
        assert zipfile.ZipFile(unpacked).read("pq_fixture_pkg/__init__.py") == b"VALUE = 1\n"
    # A file read once comes from the derived cache, by the archive's sha256: the archive is not opened again.
    unpacked.write_bytes(b"")
    snap = resolve_upstream("pq-fixture-pkg==0.9", progress=lambda _: None, queue=presets.NPU)
    assert snap.read("pq_fixture_pkg/__init__.py") == b"VALUE = 1\n" and unpacked.read_bytes() == b""

    # A download whose content does not match the index's hash never lands in the cache.  Temp files
    # of killed downloads are removed once an hour old; a fresh one may be a download still running.
    stale, fresh = (tmp_path / "cache" / "dist" / f".part-{bad}.{tag}" for tag in ("old", "new"))
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    with pytest.raises(SourceError) as info:
        release_files("pq-fixture-pkg", "3.0", "", progress=lambda _: None)
    message = str(info.value)
    data = archives[bad]
    assert message.startswith(f"sha256 mismatch for {bad}: ")
    assert hashlib.sha256(data).hexdigest() in message and hashlib.sha256(data + b"x").hexdigest() in message
    assert "\n" not in message
    assert [p.name for p in (tmp_path / "cache" / "dist").iterdir() if "3.0" in p.name] == [fresh.name]

    # A release missing from every index, and a project missing from every index.
    with pytest.raises(SourceError, match=r"no such package on the registry"):
        release_files("pq-fixture-none", "1.0", "")
    with pytest.raises(SourceError, match=r"no release of pq-fixture-none"):
        newest_release("pq-fixture-none")


def test_sdist_listed_before_it_was_ever_unpacked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first look into an sdist (no unpacked copy in the cache yet) lists what every later one does."""
    module = {"pq_fixture_pkg/__init__.py": b"VALUE = 1\n", "pq_fixture_pkg/sub/mod.py": b"X = 2\n"}
    _file_index(
        tmp_path / "index",
        "pq-fixture-pkg",
        {"pq_fixture_pkg-0.9.tar.gz": _sdist("pq_fixture_pkg", "0.9", module)},
        yanked=set(),
        bad=set(),
    )
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path / 'index' / 'simple'}")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    listed = ["PKG-INFO", *sorted(module)]
    cold = resolve_upstream("pq-fixture-pkg==0.9", progress=lambda _: None, queue=presets.NPU)
    assert cold.list_files() == listed and cold.read("pq_fixture_pkg/sub/mod.py") == b"X = 2\n"
    assert resolve_upstream("pq-fixture-pkg==0.9", progress=lambda _: None, queue=presets.NPU).list_files() == listed


def test_method_cache_round_trip_and_damage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    cache = MethodCache("Runner")
    assert cache.get("b1") is None
    cache.put("b1", {"f": "    def f(self):\n        pass\n", "g": "    def g(self): ...\n"})
    cache.put("b2", {"f": "    def f(self):\n        pass\n"})
    cache.save()
    again = MethodCache("Runner")
    assert again.get("b1") == {"f": "    def f(self):\n        pass\n", "g": "    def g(self): ...\n"}
    assert again.get("b2") == {"f": "    def f(self):\n        pass\n"} and again.get("b3") is None
    # a damaged body, or one scanned by another version of the scanner, is not used
    data = cache.path.read_bytes()
    cache.path.write_bytes(data.replace(b"pass", b"fail"))
    assert MethodCache("Runner").get("b1") is None
    cache.path.write_bytes(data)
    monkeypatch.setattr(MethodCache, "FORMAT", 2)
    assert MethodCache("Runner").get("b1") is None
