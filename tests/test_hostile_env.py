"""Damaged inputs and environments (issue 31), through the real command line on copies of the adopted 0.30.0
project: rule files of the wrong types or bytes, catastrophic regular expressions, a disk that fills and a
file size limit, a read-only repository, a patch file removed while `pq series` reads, refs/pq/ of the wrong
object type, and a damaged download cache (an upstream mirror, a pin record) that heals.

Every refused case asserts exit 1, the one line (``pq: error: <file>:<line>: ...``), no traceback, and that
every file and ref is as before (``state``), or what the command did instead.  The full disk is a small tmpfs,
the read-only repository a read-only bind mount, the immutable folder ``chattr +i``: each case skips, with the
reason, only where this machine cannot make it (CI runs as root, where all three work).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import BASE_030, corpus_dir, git, new_project, pq, state
from test_errors import one_error_line, proj  # noqa: F401  (proj: a copy of adopted_030)

CLEAN_TARGET = "c9e95ba32421"  # 0.30.0's series replays onto it without a conflict (see test_bad_input)
# a pattern that backtracks exponentially even in the regex package, on any Python module
CATASTROPHIC = r"(\w|\w)+#"


def refused(proj: Path, *args: str, cwd: Path | None = None) -> str:
    before = state(proj)
    line = one_error_line(pq(cwd or proj, *args, check=1))
    assert line.startswith("pq: error: "), line
    assert state(proj) == before
    return line


def sh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


# -- 1. rule files: types, bytes, shapes --------------------------------------------------------------------

RULE = '[[rule]]\nid = "x"\nkind = "regex"\nseverity = "error"\nmessage = "m"\npattern = "foo"\n'


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (RULE + 'files = "x"\n', 7, 'rule[0].files must be a list of strings (["a", "b"])'),
        (RULE + "files = [1]\n", 7, 'rule[0].files must be a list of strings (["a", "b"])'),
        (RULE.replace('"foo"', "5"), 6, "rule[0].pattern must be a non-empty string"),
        (RULE + "scope = 5\n", 7, "rule[0].scope must be a non-empty string"),
        (RULE + 'scope = "everything"\n', 7, "rule[0].scope must be 'code' or 'all'"),
        (RULE + 'fils = ["x"]\n', 7, "rule[0] has an unknown key 'fils'"),
        (RULE.replace('kind = "regex"', 'kind = "duplicate"') + 'min_lines = "six"\n', 7, "rule[0].min_lines must be"),
        ("rule = 5\n", 1, "rule must be an array of [[rule]] tables"),
        ("[[rule]\n", 1, "not valid TOML"),
        (b'[[rule]]\nid = "x\xff"\n', 2, "is not UTF-8 text (byte 0xff); save it as UTF-8"),
    ],
    ids=[
        "files-str",
        "files-int",
        "pattern-int",
        "scope-int",
        "scope-word",
        "unknown-key",
        "min-lines",
        "rule-int",
        "toml",
        "not-utf8",
    ],
)
def test_bad_check_rules_are_one_line_at_the_key(proj: Path, text: str | bytes, line: int, message: str) -> None:
    path = proj / "patches" / "check-rules.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    got = refused(proj, "check")
    assert got.startswith(f"pq: error: {path}:{line}: {message}"), got


def _omni_release() -> None:
    """The GPU-sync cases read vllm-omni 0.30.0 and vLLM 0.30.0 as test_gpu_sync's real runs do."""
    if corpus_dir() is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('[[rule]]\nid = "x"\nfind = 3\nreplace = "a"\n', 3, "rule[0].find must be a non-empty string"),
        ('[[rule]]\nid = "x"\nfind = "a"\nreplace = "b"\nnote = 5\n', 5, "rule[0].note must be a string"),
        ('[[rule]]\nid = "x"\nfind = "a"\nreplace = "b"\nregex = "no"\n', 5, "rule[0].regex must be true or false"),
        ('rule = "x"\n', 1, "rule must be an array of [[rule]] tables"),
        (b"\xff\xfe", 1, "is not UTF-8 text (byte 0xff); save it as UTF-8"),
        (
            f'[[rule]]\nid = "slow"\nfind = {json.dumps(CATASTROPHIC)}\nreplace = "b"\n',
            3,
            "rule 'slow': its regular expression ran past the 2 s limit on the GPU line",
        ),
    ],
    ids=["find-int", "note-int", "regex-str", "rule-str", "not-utf8", "catastrophic"],
)
def test_bad_gpu_sync_rules_are_one_line_at_the_key(proj: Path, text: str | bytes, line: int, message: str) -> None:
    _omni_release()
    path = proj / "patches" / "gpu-sync-rules.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    got = refused(proj, "sync-gpu", "--omni", "vllm-omni==0.30.0", "--backlog")  # the backlog: rules applied
    assert got.startswith(f"pq: error: {path}:{line}: {message}"), got


# -- 2. a catastrophic regular expression ----------------------------------------------------------------


def _slow_rule(proj: Path) -> Path:
    path = proj / "patches" / "check-rules.toml"
    path.write_text(RULE.replace('"foo"', json.dumps(CATASTROPHIC)) + 'scope = "all"\n')
    return path


def test_a_catastrophic_rule_is_stopped_and_named_by_pq_check(proj: Path) -> None:
    path = _slow_rule(proj)
    got = refused(proj, "check")
    assert re.fullmatch(
        rf"pq: error: {re.escape(str(path))}:6: rule 'x': its regular expression ran past the 2 s limit on "
        r"\w+\.py \(a catastrophic pattern: nested repeats such as \( \+\)\+\); rewrite it",
        got,
    ), got


def test_a_catastrophic_rule_stops_inside_refresh_and_pq_abort_puts_everything_back(proj: Path) -> None:
    path = _slow_rule(proj)
    git(proj, "add", "-f", "patches/check-rules.toml")
    git(proj, "commit", "-qm", "a rule")
    before = state(proj)
    proc = pq(proj, "refresh", "--to", CLEAN_TARGET, check=1)
    line = one_error_line(proc)
    assert line.startswith("pq: error: pq check reports 1 error(s) in the result: the refresh is pending"), line
    assert "`pq abort`" in line
    shown = pq(proj, "status", check=None).stdout
    assert f"{path}:6: rule 'x': its regular expression ran past the 2 s limit" in shown, shown
    pq(proj, "abort")
    assert state(proj) == before


# -- 3. a disk that fills, a file size limit ------------------------------------------------------------


def unmount(where: Path) -> None:
    """Unmount ``where``, or fail: a mount left behind outlives the run (and pytest cannot remove its folder). pq
    ran in this process, so the repositories it opened (libgit2 keeps their files open) are collected first."""
    gc.collect()
    gone = sh("umount", str(where))
    assert gone.returncode == 0, gone.stderr


@contextmanager
def small_disk(src: Path, where: Path) -> Iterator[tuple[Path, int]]:
    """A copy of ``src`` on a tmpfs of its own (mounted at ``where``), with its used size in KiB."""
    where.mkdir()
    made = sh("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where))
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        shutil.copytree(src, where / "p", symlinks=True)
        used = shutil.disk_usage(where).used // 1024
        yield where / "p", used
    finally:
        unmount(where)


def test_a_disk_that_fills_during_refresh_is_one_line_and_changes_nothing(proj: Path, tmp_path: Path) -> None:
    outcomes = []
    with small_disk(proj, tmp_path / "disk") as (copy, used):
        pristine = state(copy)
        snapshot = tmp_path / "pristine"
        shutil.copytree(copy, snapshot, symlinks=True)
        for extra in (0, 60, 120, 200, 280, 360, 440, 520, 600):  # KiB of room: the refresh needs some 600
            shutil.rmtree(copy)
            shutil.copytree(snapshot, copy, symlinks=True)
            assert sh("mount", "-o", f"remount,size={used + 64 + extra}k", str(copy.parent)).returncode == 0
            proc = pq(copy, "refresh", "--to", CLEAN_TARGET, check=None)
            assert "Traceback" not in proc.stderr + proc.stdout
            assert proc.returncode in (0, 1), proc.stderr
            if proc.returncode == 1:
                line = one_error_line(proc)
                assert re.fullmatch(
                    r"pq: error: (\.git/objects|\.git/pq/journal\.json|npu_worker/\S+|patches/\S+): cannot be written "
                    r"\(.*(No space left on device|was not kept|object not found).*\)"  # a write or what it needed
                    r"(: a full disk or a file size limit; nothing was changed: make room and run the command again"
                    r"|; (nothing was changed|everything was put back as it was); make room \(or make it writable\) "
                    r"and run `pq refresh` again)",
                    line,
                ), line
                assert state(copy) == pristine
                assert not (copy / ".git" / "pq" / "journal.json").exists()
            outcomes.append(proc.returncode)
            sh("mount", "-o", "remount,size=64m", str(copy.parent))
    assert 1 in outcomes, outcomes  # the disk did fill


def test_a_file_size_limit_is_one_line_and_changes_nothing(proj: Path) -> None:
    before = state(proj)

    def limit() -> None:  # Python ignores SIGXFSZ: a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (50 * 1024, 50 * 1024))

    proc = subprocess.run(
        [sys.executable, "-m", "patch_queue", "refresh", "--to", CLEAN_TARGET],
        cwd=proj,
        capture_output=True,
        text=True,
        preexec_fn=limit,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert one_error_line(proc) == (
        "pq: error: .git/objects: cannot be written (failed to write out file: File too large): a full disk or a file "
        "size limit; nothing was changed: make room and run the command again"
    )
    assert state(proj) == before


# -- 4. a read-only repository, an immutable folder ----------------------------------------------------


@contextmanager
def read_only(src: Path, where: Path) -> Iterator[Path]:
    where.mkdir()
    bound = sh("mount", "--bind", str(src), str(where))
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.strip()}")
    try:
        ro = sh("mount", "-o", "remount,ro,bind", str(where))
        if ro.returncode != 0:
            pytest.skip(f"cannot make a bind mount read-only here: {ro.stderr.strip()}")
        yield where
    finally:
        unmount(where)


READING = [("status",), ("series",), ("show",), ("diff",), ("check", "--no-sources"), ("blocks",)]


def test_reading_commands_work_on_a_read_only_repository(proj: Path, tmp_path: Path) -> None:
    expected = {args: pq(proj, *args, check=None) for args in READING}  # as on the writable repository
    before = state(proj)
    with read_only(proj, tmp_path / "ro") as ro:
        assert sh("touch", str(ro / "x")).returncode != 0  # really read-only
        for args in READING:
            proc = pq(ro, *args, check=None)
            assert "Traceback" not in proc.stderr, proc.stderr
            assert (proc.returncode, proc.stdout) == (expected[args].returncode, expected[args].stdout), args
    assert state(proj) == before


@pytest.mark.parametrize("args", [("push",), ("pop",), ("refresh", "--to", CLEAN_TARGET), ("build",)])
def test_writing_commands_refuse_a_read_only_repository(proj: Path, tmp_path: Path, args: tuple[str, ...]) -> None:
    with read_only(proj, tmp_path / "ro") as ro:
        line = refused(proj, *args, cwd=ro)
    assert line == (
        f"pq: error: .git/pq/lock: cannot take the pq lock (Read-only file system): `pq {args[0]}` writes patches/, "
        "npu_worker/ and refs/pq/; make the repository writable (nothing was changed)"
    )


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    made = sh("chattr", "+i", str(path))
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {made.stderr.strip() or 'no chattr'}")
    try:
        yield
    finally:
        sh("chattr", "-i", str(path))


def test_an_immutable_state_folder_refuses_writes_and_reads_on(proj: Path) -> None:
    (proj / ".git" / "pq").mkdir(exist_ok=True)
    with immutable(proj / ".git" / "pq"):
        line = refused(proj, "refresh", "--to", CLEAN_TARGET)
        assert line == (
            "pq: error: .git/pq/lock: cannot take the pq lock (Operation not permitted): `pq refresh` writes "
            "patches/, npu_worker/ and refs/pq/; make the repository writable (nothing was changed)"
        )
        before = state(proj)
        assert pq(proj, "status").returncode == 0
        assert pq(proj, "check", "--no-sources").returncode == 0
        assert state(proj) == before


def test_an_unwritable_patches_folder_puts_back_what_refresh_wrote(proj: Path) -> None:
    with immutable(proj / "patches"):
        line = refused(proj, "refresh", "--to", CLEAN_TARGET)
    assert re.fullmatch(
        r"pq: error: patches/\d{4}-[\w-]+\.patch: cannot be written \(Operation not permitted\); everything was put "
        r"back as it was; make room \(or make it writable\) and run `pq refresh` again",
        line,
    ), line
    assert not (proj / ".git" / "pq" / "journal.json").exists()


# -- 5. pq series while a pq delete removes a patch file -------------------------------------------------


def test_series_racing_a_removed_patch_file_is_a_listing_or_one_line(proj: Path) -> None:
    path = proj / "patches" / "0008-npu-generation-model-runner.patch"
    body = path.read_bytes()
    stop = threading.Event()

    def flip() -> None:  # what a `pq delete` does to the file (and an undo of it: an atomic rename), again and again
        spare = path.with_name(".spare")
        while not stop.is_set():
            path.unlink()
            spare.write_bytes(body)
            spare.replace(path)

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        runs = [pq(proj, "series", check=None) for _ in range(15)]
    finally:
        stop.set()
        flipper.join()
    for proc in runs:
        assert "Traceback" not in proc.stderr
        if proc.returncode == 0:
            assert len(proc.stdout.splitlines()) == 16
            continue
        crash = proj / ".git" / "pq" / "crash.log"
        assert proc.returncode == 1 and not proc.stdout, crash.read_text() if crash.exists() else proc.stderr
        assert one_error_line(proc) in (
            "pq: error: patches/series:9: names 0008-npu-generation-model-runner.patch, which does not exist",
            "pq: error: patches/0008-npu-generation-model-runner.patch: was removed while pq read the series "
            "(another pq command changed patches/ meanwhile); nothing was changed: run the command again",
        )


# -- 6. refs/pq/ of the wrong object type ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "kind"),
    [("refs/pq/base", "blob"), ("refs/pq/top", "blob"), ("refs/pq/patches/0003-npu-ar-model-runner.patch", "tree")],
)
@pytest.mark.parametrize("args", [("status",), ("series",), ("refresh", "--to", CLEAN_TARGET)])
def test_a_ref_of_the_wrong_type_is_one_line(proj: Path, ref: str, kind: str, args: tuple[str, ...]) -> None:
    oid = git(proj, "hash-object", "-w", ".gitignore").strip() if kind == "blob" else git(proj, "write-tree").strip()
    git(proj, "update-ref", ref, oid)
    assert refused(proj, *args) == (
        f"pq: error: {ref}: points at {oid[:12]}, a {kind}, not a commit; the ref is damaged: delete it "
        f"(`git update-ref -d {ref}`) and rebuild with `pq build` (or `pq abort` a refresh)"
    )


# -- 7. the cache heals ----------------------------------------------------------------------------------


def _cache_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, real: tuple[str, ...]) -> Path:
    """A cache of its own: the folders ``real`` copied from the session cache, the others linked."""
    session = Path(os.environ["PQ_CACHE"])
    mine = tmp_path / "cache"
    mine.mkdir()
    for entry in session.iterdir():
        if entry.name in real:
            shutil.copytree(entry, mine / entry.name, symlinks=True)
        else:
            (mine / entry.name).symlink_to(entry)
    monkeypatch.setenv("PQ_CACHE", str(mine))
    return mine


def _damage_pack_gone(mirror: Path) -> None:
    for pack in (mirror / "objects" / "pack").glob("*.pack"):
        pack.unlink()


def _damage_pack_cut(mirror: Path) -> None:
    for pack in (mirror / "objects" / "pack").glob("*.pack"):
        os.truncate(pack, pack.stat().st_size // 2)


def _damage_refs_cut(mirror: Path) -> None:
    packed = mirror / "packed-refs"
    packed.write_bytes(packed.read_bytes()[:300])


@pytest.mark.parametrize("damage", [_damage_pack_gone, _damage_pack_cut, _damage_refs_cut], ids=["gone", "cut", "refs"])
def test_a_damaged_mirror_is_cloned_again_once(
    proj: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: object
) -> None:
    # a process of its own: libgit2 keeps the packs it opened by path for the life of a process, so a pack cut
    # under an earlier in-process command is not what a new `pq` finds
    monkeypatch.setenv("PQ_TEST_SUBPROCESS", "1")
    cache = _cache_copy(tmp_path, monkeypatch, real=("git",))
    mirrors = sorted((cache / "git").glob("*.git"))
    assert mirrors
    for mirror in mirrors:
        damage(mirror)  # type: ignore[operator]
    first = pq(proj, "refresh", "--to", CLEAN_TARGET)
    assert "Traceback" not in first.stderr
    healed = [line for line in first.stderr.splitlines() if "is damaged" in line]
    assert len(healed) == 1 and re.fullmatch(
        r"warning: the cached mirror \S+\.git is damaged \(.+\); cloning \S+vllm-ascend\.bundle again", healed[0]
    ), first.stderr
    pq(proj, "abort", check=None)
    again = pq(proj, "status")
    assert "is damaged" not in again.stderr


def test_a_wrong_pin_record_is_checked_against_the_index_and_fixed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if corpus_dir() is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    session = Path(os.environ["PQ_CACHE"])
    wheel = session / "dist" / "vllm_omni-0.30.0-py3-none-any.whl"
    if not wheel.is_file():
        pytest.skip("the session cache holds no vllm-omni 0.30.0 wheel (test_gpu_sync's real runs bring it)")
    cache = _cache_copy(tmp_path, monkeypatch, real=())
    (cache / "dist").unlink()
    (cache / "dist").mkdir()
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    index = tmp_path / "index"
    (index / "simple" / "vllm-omni").mkdir(parents=True)
    (index / "files").mkdir()
    (index / "files" / wheel.name).symlink_to(wheel)
    (index / "simple" / "vllm-omni" / "index.html").write_text(
        f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>\n'
    )
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{index / 'simple'}")
    (cache / "dist" / wheel.name).symlink_to(wheel)
    record = cache / "dist" / "vllm-omni==0.30.0.json"
    url = f"file://{index / 'files' / wheel.name}"
    record.write_text(json.dumps({"filename": wheel.name, "url": url, "sha256": "0" * 64, "kind": "wheel"}))

    def adopt(where: Path) -> subprocess.CompletedProcess[str]:
        project = new_project(where)
        return pq(project, "adopt", "vllm-omni==0.30.0", "--at", BASE_030, check=None)

    first = adopt(tmp_path / "a")
    assert first.returncode == 0, first.stderr
    assert (
        f"warning: {record} recorded sha256 {'0' * 64} for {wheel.name}, which the index and the cached file give "
        f"as {digest}; the record is fixed"
    ) in first.stderr.splitlines()
    assert json.loads(record.read_text())["sha256"] == digest
    second = adopt(tmp_path / "b")
    assert second.returncode == 0 and "recorded sha256" not in second.stderr

    # a record the index does not confirm, with the index gone: one line naming the record
    record.write_text(json.dumps({"filename": wheel.name, "url": url, "sha256": "0" * 64, "kind": "wheel"}))
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path / 'no-index'}")
    third = adopt(tmp_path / "c")
    assert third.returncode == 1
    assert one_error_line(third) == (
        f"pq: error: {record}: records {wheel.name}, which the index no longer lists; delete the record to choose "
        "the archive again"
    )
