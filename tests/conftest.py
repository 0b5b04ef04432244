"""Shared fixtures: sealed real git repositories, the real corpus, one download cache per session."""

from __future__ import annotations

import fcntl
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

RELEASES = ["0.14.0", "0.16.0", "0.18.0", "0.20.0", "0.22.0", "0.24.0", "0.30.0"]
BASE_030 = "cf0baa38dfb2"  # what adopt finds for vllm-omni 0.30.0 in the bundle (see test_round_trip)


def corpus_dir() -> Path | None:
    env = os.environ.get("PQ_CORPUS")
    for candidate in ([Path(env)] if env else []) + [Path(__file__).resolve().parents[2] / "shared" / "corpus"]:
        if (candidate / "vllm-ascend.bundle").is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def corpus() -> Path:
    found = corpus_dir()
    if found is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    return found


@pytest.fixture(scope="session")
def pq_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("PQ_CACHE")
    return Path(env) if env else tmp_path_factory.mktemp("pq-cache")


@pytest.fixture(scope="session")
def import_cache(pq_cache: Path) -> Path:
    """A cache for the import test's environment alone, sharing the test cache's downloads and mirrors."""
    from patch_queue.sources import import_env

    if not import_env.registry_reachable():
        pytest.skip("the package registry is unreachable through pip's configuration: the import test needs it")
    sub = pq_cache / "import-test"
    sub.mkdir(parents=True, exist_ok=True)
    for name in ("dist", "git", "unpacked", "derived"):
        (pq_cache / name).mkdir(exist_ok=True)
        try:
            (sub / name).symlink_to(pq_cache / name)
        except FileExistsError:
            pass
    return sub


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name``, filled by ``build(folder)`` once for the whole run. Under pytest-xdist every worker
    shares it: the first to ask builds it in the run's common temporary folder under a file lock (as pytest-xdist's
    documentation shows), the others wait for it and take it as built; a build that failed is built again by the
    next worker to ask (and fails there too). Run alone, it is built in the session's temporary folder. The folder
    is everyone's: copy what it holds (`copy_project`), never change it."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = tmp_path_factory.mktemp(f"once-{name}", numbered=False)
        build(folder)
        return folder
    root = tmp_path_factory.getbasetemp().parent / "built-once"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, however the build ends
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


# The modules that take longest (seconds of a whole run, the slowest first): they start first, so that under
# `--dist loadfile --no-loadscope-reorder` (scripts/test.sh) the workers end together, the short modules filling in
# at the end. Every other module follows them in its usual order. Only the order changes, never what runs.
SLOWEST_FIRST = (
    "test_import_check",
    "test_gpu_sync",
    "test_hostile_store",
    "test_hostile_files",
    "test_lineage",
    "test_merge_release",
    "test_interrupt",
    "test_refresh_pr",
    "test_hostile_bot",
    "test_properties",
    "test_bench",
    "test_checked_finish",
    "test_bad_input",
    "test_end_to_end",
    "test_hostile_env",
    "test_resolve_tools",
    "test_vllm_release",
    "test_check",
    "test_merge",
    "test_maintainer_resolution",
    "test_merge_defects",
    "test_stgit_habits",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: each module's own order stays


SEAL = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.com",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "TZ": "UTC",
    # scripts/main.sh and the bot run pq check --import on a refresh that finishes: its environment (2.6 GB) is
    # built only by tests/test_import_check.py, in a cache of its own
    "PQ_IMPORT_TEST": "0",
}


@pytest.fixture(scope="session", autouse=True)
def sealed_session(tmp_path_factory: pytest.TempPathFactory, pq_cache: Path) -> Iterator[None]:
    """The seal of `sealed` for the whole session, so session- and module-scoped fixtures (which run before any
    function-scoped one) never see the developer's HOME, git identity or cache either."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp_path_factory.mktemp("session-home")))
        for key, value in SEAL.items():
            mp.setenv(key, value)
        mp.setenv("PQ_CACHE", str(pq_cache))
        found = corpus_dir()
        if found is not None:
            mp.setenv("PQ_UPSTREAM_GIT", str(found / "vllm-ascend.bundle"))
        yield


@pytest.fixture(autouse=True)
def sealed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pq_cache: Path) -> None:
    """A fixed HOME and git identity, no system git config, the session cache, the corpus bundle."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for key, value in SEAL.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PQ_CACHE", str(pq_cache))
    found = corpus_dir()
    if found is not None:
        monkeypatch.setenv("PQ_UPSTREAM_GIT", str(found / "vllm-ascend.bundle"))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


SUBPROCESS_ENV = "PQ_TEST_SUBPROCESS"  # =1: every pq() runs `python -m patch_queue` in a subprocess


def pq_subprocess(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command line in a subprocess, as a maintainer runs it."""
    return subprocess.run([sys.executable, "-m", "patch_queue", *args], cwd=cwd, capture_output=True, text=True)


def _fresh_process_state() -> None:
    """Forget what an earlier in-process command kept, as a new process would: every functools cache of
    patch_queue's modules, the upstream repositories opened once per process, and libgit2's global and XDG config
    search paths (libgit2 reads them from $HOME when it starts: each test has its own HOME)."""
    import pygit2
    from pygit2.enums import ConfigLevel

    for name, module in list(sys.modules.items()):
        if name == "patch_queue" or name.startswith("patch_queue."):
            for value in list(vars(module).values()):
                clear = getattr(value, "cache_clear", None)
                if callable(clear) and getattr(value, "__module__", None) == name:
                    clear()
    snapshot = sys.modules.get("patch_queue.sources.snapshot")
    if snapshot is not None:
        snapshot._open_repos.clear()
    home = os.environ.get("HOME", "")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    pygit2.settings.search_path[ConfigLevel.GLOBAL] = home
    pygit2.settings.search_path[ConfigLevel.XDG] = os.path.join(xdg, "git")


def _universal_newlines(data: bytes, errors: str) -> str:
    """What ``subprocess.run(..., text=True)`` makes of a stream's bytes."""
    return data.decode("utf-8", errors).replace("\r\n", "\n").replace("\r", "\n")


def pq_in_process(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The same command line run in this process: argv, cwd, stdin from /dev/null, file descriptors 1 and 2 on
    files of their own (so what a git child writes is captured too), the exit code of the SystemExit; stdout and
    stderr as a piped `python -m patch_queue` writes them (UTF-8, not a terminal)."""
    from patch_queue.cli import main

    _fresh_process_state()
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(0), os.dup(1), os.dup(2)
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    code: object = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as errs, open(os.devnull, "rb") as null:
        os.dup2(null.fileno(), 0)
        os.dup2(out.fileno(), 1)
        os.dup2(errs.fileno(), 2)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="strict")
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True
        )
        sys.argv = [str(Path(__file__).resolve().parents[1] / "patch_queue" / "__main__.py"), *args]
        try:
            os.chdir(cwd)
            main()
        except SystemExit as done:
            code = done.code
        finally:
            os.environ.pop("PQ_QUEUE_FOLDER", None)  # what main() settled for this command line only
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            sys.argv = saved_argv
            os.chdir(saved_cwd)
            for fd, saved in enumerate(saved_fds):
                os.dup2(saved, fd)
                os.close(saved)
        out.seek(0)
        errs.seek(0)
        stdout, stderr = out.read(), errs.read()
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): the message on stderr, exit 1
        stderr += f"{code}\n".encode()
        code = 1
    return subprocess.CompletedProcess(
        ["pq", *args], code, _universal_newlines(stdout, "strict"), _universal_newlines(stderr, "backslashreplace")
    )


def pq(cwd: Path, *args: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    """Run the real command line, as a maintainer would: in this process (the same app, argv, cwd, streams and
    exit code as `python -m patch_queue`, without ~0.3 s of interpreter start and imports per command), or in a
    subprocess with PQ_TEST_SUBPROCESS=1 or when a kill point would SIGKILL the process."""
    kill = os.environ.get("PQ_TEST_KILL_AT", "")
    # `pq -C DIR` picks its refs before they are imported (patch_queue/namespace.py): a process of its own
    if os.environ.get(SUBPROCESS_ENV) == "1" or (kill and not kill.startswith("bug:")) or args[:1] == ("-C",):
        proc = pq_subprocess(cwd, *args)
    else:
        proc = pq_in_process(cwd, *args)
    if check is not None and proc.returncode != check:
        raise AssertionError(
            f"pq {' '.join(args)} exited {proc.returncode}, expected {check}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def new_project(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text("/patches/*.patch\n/npu_worker/\n/reports/\n")
    git(path, "add", ".gitignore")
    git(path, "commit", "-qm", "project")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return new_project(tmp_path / "project")


def push_to_bare(proj: Path, message: str) -> Path:
    """Commit everything in ``proj``, push main to a new bare ``origin.git`` beside it and return that."""
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", message)
    origin = proj.parent / "origin.git"
    git(proj.parent, "init", "-q", "--bare", "-b", "main", str(origin))
    git(proj, "push", "-q", str(origin), "main")
    return origin


def main_sh(proj: Path, *, check: int | None) -> subprocess.CompletedProcess[str]:
    """The README's main command, on a project, with the pq under test (``check``: the exit code it must end with)."""
    proc = subprocess.run(
        ["bash", "scripts/main.sh"],
        cwd=proj,
        capture_output=True,
        text=True,
        env={**os.environ, "PQ": f"{sys.executable} -m patch_queue"},
    )
    if check is not None:
        assert proc.returncode == check, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


NEWEST_OMNI = "0.32.0rc1"  # the newest vllm-omni release on the registry, which this repository's series holds


@pytest.fixture(scope="session")
def seeded_once(released_030_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project as this repository is once `push_to_bare` commits it: main.sh with queue.toml and series (adopted
    from vllm-omni 0.30.0 at its base, then vllm-omni 0.32.0rc1 merged: the same upstream base), no patch bodies
    once pushed (they are gitignored). This repository's own queue.toml and series, reproduced: its merge step was
    recorded by a pq that put the release's edits of carried methods into the skeletons, and reproduces so (a
    `pq merge` now puts them by method, another series). Built once per run (`built_once`): copy it
    (`copy_project`), never change it."""

    def build(folder: Path) -> None:
        proj = copy_project(released_030_once, folder / "p")
        root = Path(__file__).resolve().parents[1]
        (proj / "scripts").mkdir()
        shutil.copy(root / "scripts" / "main.sh", proj / "scripts" / "main.sh")
        for body in (proj / "patches").glob("*.patch"):
            body.unlink()
        for name in ("queue.toml", "series"):
            shutil.copy(root / "patches" / name, proj / "patches" / name)
        pq(proj, "reproduce")
        assert tomllib.loads((proj / "patches" / "queue.toml").read_text())["downstream"]["release"] == NEWEST_OMNI

    return built_once(tmp_path_factory, "seeded", build) / "p"


def skeleton_drift(proj: Path) -> dict[str, list[str]]:
    """Per module of refs/pq/base that carries upstream symbols, the carried symbols whose copy in the module's
    skeleton patch (the first patch of refs/pq/top that writes the module) is not upstream's text as projected
    (the module in refs/pq/base): [] for every module when the skeleton's copies, laid out as the projection lays
    them out, are the projection byte for byte."""
    from patch_queue.merge import pieces, symbols

    base = git(proj, "rev-parse", "refs/pq/base").strip()
    chain = git(proj, "rev-list", "--reverse", f"{base}..refs/pq/top").split()
    out: dict[str, list[str]] = {}
    for path in [p for p in git(proj, "ls-tree", "--name-only", base).split() if p.endswith(".py")]:
        projected = git(proj, "show", f"{base}:{path}")
        carried = re.findall(r"^(?: {4})?(?:async def|def|class) (\w+)", projected, re.M)  # in projection order
        skeleton = next(c for c in chain if git(proj, "show", f"{c}:{path}") != git(proj, "show", f"{c}~1:{path}"))
        copies = {n.split(".")[-1]: s for n, s in pieces.symbols_of(git(proj, "show", f"{skeleton}:{path}")).items()}
        assert all(n in copies for n in carried), (path, carried, sorted(copies))
        laid_out = symbols.project([copies[n] for n in carried])
        out[path] = (
            [] if laid_out == projected else [copies[n].name for n in carried if copies[n].text not in projected]
        )
        assert out[path] or laid_out == projected, (path, "the copies are upstream's, their layout is not")
    return out


def copy_project(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def state(path: Path) -> dict[str, object]:
    """Everything a refresh or abort may touch: git status, refs, and every file's bytes."""
    files = {}
    for f in sorted(path.rglob("*")):
        rel = f.relative_to(path).as_posix()
        if f.is_file() and not rel.startswith(".git/") and "__pycache__" not in rel:
            files[rel] = f.read_bytes()
    return {
        "status": git(path, "status", "--porcelain", "--ignored"),
        "refs": git(path, "for-each-ref", "--format=%(refname) %(objectname)"),
        "files": files,
    }


@pytest.fixture(scope="session")
def adopted_030_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vllm-omni 0.30.0's series adopted from the corpus folder at its base, once per run (`built_once`, inside the
    session's seal): copy it, never change it."""
    found = corpus_dir()
    if found is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")

    def build(folder: Path) -> None:
        pq(new_project(folder / "p"), "adopt", str(found / "vllm-omni-0.30.0" / "npu"), "--at", BASE_030)

    return built_once(tmp_path_factory, "adopted", build) / "p"


@pytest.fixture(scope="session")
def released_030_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pq adopt vllm-omni==0.30.0 --at BASE_030` (the registry release) in a new project, once per run
    (`built_once`), left as the adopt left it (nothing committed): copy it, never change it."""
    return _released_once(tmp_path_factory, "released", "0.30.0", BASE_030)


def _released_once(tmp_path_factory: pytest.TempPathFactory, name: str, release: str, base: str) -> Path:
    """`pq adopt vllm-omni==RELEASE --at BASE` in a new project, once per run (`built_once` under ``name``)."""
    if corpus_dir() is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")

    def build(folder: Path) -> None:
        pq(new_project(folder / "p"), "adopt", f"vllm-omni=={release}", "--at", base)

    return built_once(tmp_path_factory, name, build) / "p"


@pytest.fixture(scope="module")
def adopted_030(adopted_030_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A module's own copy of the adopted 0.30.0 series (tests copy it again before they change anything)."""
    return copy_project(adopted_030_once, tmp_path_factory.mktemp("adopted") / "p")


RC2 = "vllm-ascend==0.30.0rc2"
BASE_018 = "5df2ddd8dbb8"  # what pq adopt finds for vllm-omni 0.18.0


@pytest.fixture(scope="session")
def released_018_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pq adopt vllm-omni==0.18.0 --at BASE_018` (the registry release) in a new project, as this repository
    keeps its series (queue.toml and series committed, the bodies git-ignored), nothing committed yet; once per run
    (`built_once`): copy it, never change it."""
    return _released_once(tmp_path_factory, "released-018", "0.18.0", BASE_018)


@pytest.fixture(scope="session")
def forked_018_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fork's project (it owns its series: the patch bodies are not git-ignored) with vllm-omni 0.18.0's folder
    adopted at BASE_018, nothing committed yet; once per run (`built_once`): copy it, never change it."""
    found = corpus_dir()
    if found is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")

    def build(folder: Path) -> None:
        proj = new_project(folder / "p")
        (proj / ".gitignore").write_text("/npu_worker/\n/reports/\n")
        pq(proj, "adopt", str(found / "vllm-omni-0.18.0" / "npu"), "--at", BASE_018)

    return built_once(tmp_path_factory, "forked-018", build) / "p"


@pytest.fixture(scope="session")
def refreshed_030_once(adopted_030_once: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The adopted 0.30.0 series refreshed onto vllm-ascend 0.30.0rc2 with `pq refresh --no-stop` (exit 3: the
    refresh pending over its conflicts), once per run (`built_once`): (the project, what the refresh printed).
    Copy it."""

    def build(folder: Path) -> None:
        proj = copy_project(adopted_030_once, folder / "p")
        (folder / "stdout").write_text(pq(proj, "refresh", "--no-stop", "--to", RC2, check=3).stdout)

    folder = built_once(tmp_path_factory, "refreshed", build)
    return folder / "p", (folder / "stdout").read_text()


REPORTED = ("--report", "reports/refresh.json", "--markdown", "reports/refresh.md", "--annotations")


@pytest.fixture(scope="session")
def reported_030_once(adopted_030_once: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The adopted 0.30.0 series refreshed onto vllm-ascend 0.30.0rc2 with `pq refresh --no-stop` and its reports
    (REPORTED: the JSON and Markdown reports in the project's git-ignored reports/, the annotations on stdout), exit
    3, once per run (`built_once`): (the project, what the refresh printed). The pending refresh keeps the report
    paths relative to the project, so a copy's `pq continue` rewrites the copy's own reports. Copy it, or only read
    it."""

    def build(folder: Path) -> None:
        proj = copy_project(adopted_030_once, folder / "p")
        (proj / "reports").mkdir()
        (folder / "stdout").write_text(pq(proj, "refresh", "--no-stop", "--to", RC2, *REPORTED, check=3).stdout)

    folder = built_once(tmp_path_factory, "reported", build)
    return folder / "p", (folder / "stdout").read_text()


@pytest.fixture(scope="session")
def reported_032_once(seeded_once: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """This repository's series (`seeded_once`: vllm-omni 0.30.0 adopted, 0.32.0rc1 merged) refreshed onto
    vllm-ascend 0.30.0rc2 with `pq refresh --no-stop` and its reports (REPORTED), exit 3, once per run
    (`built_once`): (the project, what the refresh printed). Copy it, or only read it."""

    def build(folder: Path) -> None:
        proj = copy_project(seeded_once, folder / "p")
        (proj / "reports").mkdir(exist_ok=True)
        (folder / "stdout").write_text(pq(proj, "refresh", "--no-stop", "--to", RC2, *REPORTED, check=3).stdout)

    folder = built_once(tmp_path_factory, "reported-032", build)
    return folder / "p", (folder / "stdout").read_text()


@pytest.fixture
def refreshed_030(refreshed_030_once: tuple[Path, str], tmp_path: Path) -> Path:
    """A test's own copy of the pending refresh of `refreshed_030_once`."""
    return copy_project(refreshed_030_once[0], tmp_path / "refreshed")


def resolve_all(proj: Path, side: str) -> int:
    """Resolve every conflict region of npu_worker/ to ``side`` with `pq resolve SIDE --alone`, first region
    first; how many there were."""
    done = 0
    while True:
        hits = [
            (f, n)
            for f in sorted((proj / "npu_worker").glob("*.py"))
            for n, line in enumerate(f.read_text().splitlines(), 1)
            if line.startswith("<<<<<<< ")
        ]
        if not hits:
            return done
        f, n = hits[0]
        pq(proj, "resolve", side, "--alone", f"{f}:{n}")
        done += 1


@pytest.fixture(scope="session")
def upstream_resolved_once(released_030_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The registry adoption of 0.30.0 refreshed onto vllm-ascend 0.30.0rc2 as this repository's series was: `pq
    refresh` stopping at each conflicted patch, every region resolved to upstream's side, `pq continue
    --accept-errors` over the errors of pq check that leaves; nothing committed. Once per run (`built_once`): copy
    it."""

    def build(folder: Path) -> None:
        proj = copy_project(released_030_once, folder / "p")
        code = pq(proj, "refresh", "--to", RC2, check=None).returncode
        while code == 3:
            resolve_all(proj, "--keep-upstream")
            code = pq(proj, "continue", "--accept-errors", check=None).returncode
        assert code == 0

    return built_once(tmp_path_factory, "upstream-resolved", build) / "p"
