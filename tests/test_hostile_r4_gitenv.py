"""Hostile round four (issue 46): the git environment.  pq works on the repository git would work on
(``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_CEILING_DIRECTORIES``, a subdirectory, the variables a hook exports) and
keeps those variables away from its own repositories (the upstream mirror in the cache and its clone of a local
repository, the scratch repositories of ``git format-patch`` and ``git mergetool``); and the bot's prepare leaves
the clone it ran in as it found it.

Through the real command line on copies of the adopted 0.30.0 project.  Every refused case asserts exit 1, the
one line, no traceback, and every file and ref as before (``state``); every honoured case asserts what git
itself does there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import corpus_dir, git, new_project, pq, state
from test_errors import one_error_line, proj  # noqa: F401  (proj: a copy of adopted_030)


def refused(proj: Path, *args: str, env: dict[str, str], cwd: Path | None = None) -> str:
    """Run pq with ``env`` set, expect exit 1 with one error line and no traceback, and nothing changed (as git
    sees it without ``env``); return the line."""
    before = state(proj)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        proc = pq(cwd or proj, *args, check=1)
    line = one_error_line(proc)
    assert "Traceback" not in proc.stdout
    assert line.startswith("pq: error: "), line
    assert state(proj) == before
    return line


def bodies(proj: Path) -> dict[str, bytes]:
    """Every file of patches/ and npu_worker/, by path."""
    return {
        f.relative_to(proj).as_posix(): f.read_bytes()
        for folder in ("patches", "npu_worker")
        for f in sorted((proj / folder).rglob("*"))
        if f.is_file() and "__pycache__" not in f.parts
    }


def refs(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()


# -- 1. the variables stay away from pq's own repositories ------------------------------------------------------


@pytest.fixture(scope="module")
def local_upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus bundle as a local repository (a mirror clone): a local upstream is fetched through its own
    upload-pack, which reads GIT_NAMESPACE."""
    found = corpus_dir()
    if found is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    up = tmp_path_factory.mktemp("upstream") / "vllm-ascend.git"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "clone", "-q", "--mirror", str(found / "vllm-ascend.bundle"), str(up)], env=env, check=True)
    return up


HOOK_ENV = {"GIT_DIR": ".git", "GIT_INDEX_FILE": ".git/index", "GIT_PREFIX": "", "GIT_NAMESPACE": "hook"}


def test_a_hooks_environment_never_reaches_the_mirror(
    adopted_030_once: Path, local_upstream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a hook exports (GIT_DIR=.git, GIT_INDEX_FILE) and a namespace name the project's repository: the
    clone of the upstream into a new cache, git's log and cat-file on that mirror, and its fetch run without them.
    The adoption is the one of a plain environment, byte for byte, and the mirror holds every upstream ref."""
    found = corpus_dir()
    assert found is not None
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PQ_UPSTREAM_GIT", str(local_upstream))
    project = new_project(tmp_path / "p")
    for key, value in HOOK_ENV.items():
        monkeypatch.setenv(key, value)
    pq(project, "adopt", str(found / "vllm-omni-0.30.0" / "npu"))  # no --at: it searches the history (git log)
    assert bodies(project) == bodies(adopted_030_once)
    (mirror,) = (tmp_path / "cache" / "git").glob("*.git")
    for key in HOOK_ENV:
        monkeypatch.delenv(key)
    assert refs(mirror) == refs(local_upstream)
    # a new upstream ref: the next command fetches it, and prunes nothing
    git(local_upstream, "update-ref", "refs/heads/pq-test", git(local_upstream, "rev-parse", "HEAD").strip())
    for key, value in HOOK_ENV.items():
        monkeypatch.setenv(key, value)
    again = new_project(tmp_path / "q")
    pq(again, "adopt", str(found / "vllm-omni-0.30.0" / "npu"))
    assert bodies(again) == bodies(adopted_030_once)
    for key in HOOK_ENV:
        monkeypatch.delenv(key)
    assert refs(mirror) == refs(local_upstream) and any("refs/heads/pq-test" in r for r in refs(mirror))


def test_format_patch_and_the_author_read_the_project_under_git_dir(
    proj: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command that writes a patch body (``git format-patch`` in a scratch repository that reads the project's
    objects) and asks git for the author (the project's configuration) under a hook's GIT_DIR=.git and
    GIT_INDEX_FILE, and a graft file that would make the new patch's commit a root: the same body as without
    them (the body depends on the commits alone)."""
    plain = proj.parent / "plain"
    shutil.copytree(proj, plain, symlinks=True)
    pq(plain, "new", "foo")
    grafts = proj / ".git" / "grafts"
    grafts.write_text(git(plain, "rev-parse", "refs/pq/top"))
    monkeypatch.setenv("GIT_DIR", ".git")
    monkeypatch.setenv("GIT_INDEX_FILE", str(proj / ".git" / "index.lock"))  # what `git commit -a` hands pre-commit
    monkeypatch.setenv("GIT_GRAFT_FILE", str(grafts))
    pq(proj, "new", "foo")
    for key in ("GIT_DIR", "GIT_INDEX_FILE", "GIT_GRAFT_FILE"):
        monkeypatch.delenv(key)
    assert bodies(proj) == bodies(plain)
    assert refs(proj) == refs(plain)
    assert not (proj / ".git" / "index.lock").exists()


# -- 2. the project's repository is the one git works on -------------------------------------------------------


def test_git_dir_and_work_tree_name_the_project_from_another_repository(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GIT_DIR and GIT_WORK_TREE naming the project while the working directory is in another repository: pq
    reads and writes the project, as git would, and leaves the repository of the working directory alone."""
    other = new_project(tmp_path / "other")
    before_other = state(other)
    shown = pq(proj, "series").stdout
    monkeypatch.setenv("GIT_DIR", str(proj / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(proj))
    assert pq(other, "series").stdout == shown
    pq(other, "new", "foo")
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    assert state(other) == before_other
    assert (proj / "patches" / "0017-foo.patch").is_file()
    assert "0017-foo.patch" in (proj / "patches" / "series").read_text()
    assert any(r.startswith("refs/pq/") for r in refs(proj)) and not any(r.startswith("refs/pq/") for r in refs(other))
    pq(proj, "status")


def test_a_git_folder_apart_from_its_work_tree(proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """A repository whose git folder is not in its work tree (GIT_DIR elsewhere, GIT_WORK_TREE the files): the
    refs and pq's state go to that git folder, the files to the work tree, as git does."""
    away = tmp_path / "away.git"
    shutil.move(proj / ".git", away)
    monkeypatch.setenv("GIT_DIR", str(away))
    monkeypatch.setenv("GIT_WORK_TREE", str(proj))
    shown = pq(proj / "patches", "series").stdout
    pq(proj / "npu_worker", "pop")
    assert pq(proj, "series").stdout != shown
    pq(proj, "push")
    assert pq(proj, "series").stdout == shown
    pq(proj, "status")
    assert not (proj / ".git").exists()
    assert (away / "pq").is_dir()


def test_a_subdirectory_is_the_project_it_is_in(proj: Path) -> None:  # noqa: F811
    """pq run in a subdirectory of the work tree works on the whole project, as git does."""
    shown = pq(proj, "series").stdout
    for sub in (proj / "patches", proj / "npu_worker"):
        assert pq(sub, "series").stdout == shown
    pq(proj / "patches", "new", "foo")
    assert (proj / "patches" / "0017-foo.patch").is_file() and not (proj / "patches" / "patches").exists()


def test_a_relative_git_dir_from_a_subdirectory_names_no_repository(proj: Path) -> None:  # noqa: F811
    """GIT_DIR=.git is relative to the working directory: from patches/ it names nothing, for git as for pq."""
    env = {**os.environ, "GIT_DIR": ".git"}
    assert subprocess.run(["git", "status"], cwd=proj / "patches", env=env, capture_output=True).returncode != 0
    line = refused(proj, "new", "foo", cwd=proj / "patches", env={"GIT_DIR": ".git"})
    assert line == (
        f"pq: error: {proj / 'patches'}: git finds no repository to work on here: not a git repository: '.git'"
    )


def test_a_ceiling_stops_the_search_as_it_stops_git(proj: Path) -> None:  # noqa: F811
    """GIT_CEILING_DIRECTORIES: git does not look above it for a repository, nor does pq."""
    ceiling = {"GIT_CEILING_DIRECTORIES": str(proj)}
    env = {**os.environ, **ceiling}
    assert subprocess.run(["git", "status"], cwd=proj / "patches", env=env, capture_output=True).returncode != 0
    line = refused(proj, "new", "foo", cwd=proj / "patches", env=ceiling)
    assert line == f"pq: error: {proj / 'patches'}: not inside a git repository; run `git init` first"


def test_another_object_store_is_refused(proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """GIT_OBJECT_DIRECTORY naming another store: pq keeps the series' objects (the commits refs/pq/ name) in the
    repository's store, so it refuses, in one line, before anything is written."""
    store = tmp_path / "objects"
    store.mkdir()
    line = refused(proj, "new", "foo", env={"GIT_OBJECT_DIRECTORY": str(store)})
    assert line == (
        f"pq: error: {store}: is not the repository's object store ({proj / '.git' / 'objects'}): pq keeps the "
        "series' objects there; unset GIT_OBJECT_DIRECTORY (nothing was changed)"
    )
    assert not any(store.iterdir())
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(proj / ".git" / "objects"))  # the repository's own: as without
    pq(proj, "new", "foo")


# -- 3. a pq a hook runs ---------------------------------------------------------------------------------------

HOOK = """#!/bin/sh
{python} -m patch_queue {args} > "$(git rev-parse --absolute-git-dir)/hook.out" 2>&1
echo "exit $?" >> "$(git rev-parse --absolute-git-dir)/hook.out"
"""


@pytest.mark.parametrize("explicit", [False, True], ids=["commit-a", "git-dir"])
def test_a_pre_commit_hook_runs_pq_on_the_project(proj: Path, explicit: bool) -> None:  # noqa: F811
    """A pre-commit hook running `pq status` and `pq build` during `git commit -a` from a subdirectory (git hands
    the hook GIT_INDEX_FILE, the index being written, and GIT_PREFIX; with --git-dir, GIT_DIR and GIT_WORK_TREE)."""
    how = [f"--git-dir={proj / '.git'}", f"--work-tree={proj}"] if explicit else []
    how += ["commit", "-q", "-a", "-m", "m"]
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "project")
    expected = pq(proj, "status").stdout
    hooks = proj / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    hook = hooks / "pre-commit"
    hook.write_text(HOOK.format(python=sys.executable, args="status"))
    hook.chmod(0o755)
    (proj / ".gitignore").write_text((proj / ".gitignore").read_text() + "# a change to commit\n")
    subprocess.run(["git", *how], cwd=proj / "patches", check=True)
    out = (proj / ".git" / "hook.out").read_text()
    assert out == expected + "exit 0\n", out
    hook.write_text(HOOK.format(python=sys.executable, args="build"))
    (proj / ".gitignore").write_text((proj / ".gitignore").read_text() + "# another\n")
    subprocess.run(["git", *how], cwd=proj / "npu_worker", check=True)
    assert (proj / ".git" / "hook.out").read_text().endswith("exit 0\n")
    assert git(proj, "status", "--porcelain") == ""


# -- 4. the bot's prepare leaves its clone as it found it ------------------------------------------------------


def pq_refs(repo: Path) -> list[str]:
    """refs/pq/ but the store of recorded edits, which a refresh may add to (and prepare bundles)."""
    return [r for r in refs(repo) if r.startswith("refs/pq/") and not r.startswith("refs/pq/resolutions ")]


@pytest.mark.parametrize("layout", ["released_018_once", "forked_018_once"], ids=["bodies-ignored", "bodies-committed"])
def test_prepare_leaves_the_clone_it_ran_in_as_it_found_it(
    layout: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """prepare commits the refresh for the artifact and leaves the default branch checked out: queue.toml and
    series as HEAD has them, and so the patch bodies, refs/pq/ and npu_worker/ as `pq reproduce` and `pq build`
    give them there (as before the refresh), not the refresh's.  `pq status` and `pq reproduce` work in the clone
    after it, and a second prepare finds nothing of its own to refuse."""
    from test_refresh_pr import CLEAN, checkout, refresh_pr, seed

    origin = seed(tmp_path, request.getfixturevalue(layout))
    reference = checkout(origin, tmp_path / "reference")
    pq(reference, "reproduce")
    pq(reference, "build")  # where the bodies are committed, reproduce has nothing to do and builds nothing
    work = checkout(origin, tmp_path / "run")
    decision = refresh_pr.prepare(CLEAN, tmp_path / "wd", root=work)
    assert decision.action == "update"
    assert bodies(work) == bodies(reference)
    assert pq_refs(work) == pq_refs(reference)
    assert git(work, "status", "--porcelain") == ""
    pq(work, "status")
    assert "already" in pq(work, "reproduce").stdout
    again = refresh_pr.prepare(CLEAN, tmp_path / "wd2", root=work)
    assert again.commit == decision.commit


def test_a_working_directory_removed_under_the_shell(tmp_path: Path) -> None:
    """A shell left in a folder that was removed: git cannot read the working directory, nor pq (no traceback)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f'cd "{gone}" && rmdir "{gone}" && exec "{sys.executable}" -m patch_queue status'
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert one_error_line(proc) == (
        "pq: error: cannot read the working directory (No such file or directory): cd into the project"
    )


def test_a_repository_git_opens_and_libgit2_cannot(tmp_path: Path) -> None:
    """A SHA-256 repository: git opens it, libgit2 (pygit2) does not know the format: one line, nothing written."""
    repo = tmp_path / "sha256"
    git(tmp_path, "init", "-q", "--object-format=sha256", str(repo))
    line = refused(repo, "new", "foo", env={})
    assert line == (
        f"pq: error: {repo / '.git'}: libgit2 cannot open the repository git found: {repo / '.git'}: unknown "
        "object format 'sha256'"
    )
    assert not (repo / "pq-crash.log").exists()
