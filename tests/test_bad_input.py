"""The bad-input matrix of issue 7 (items 1 and 5), through the real command line on the adopted 0.30.0 project.

Each refused case checks the exact one-line error (``pq: error: <file>:<line>: ...``), exit 1, no
traceback, and that every file and ref is as before (``state``).  The cases that are not errors by
design (unbalanced ``Omni-new`` fences, a corrupted download cache, an unlisted patch file) check what
the tool does instead and that nothing is lost.  The last test runs the same adopt, refresh and wheel
build in two folders and time zones and compares the bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import copy_project, git, new_project, pq, state
from test_errors import one_error_line, proj  # noqa: F401  (proj: a copy of adopted_030)
from test_sources import _file_index, _wheel

RUNNER = "vllm_ascend/worker/model_runner_v1.py"
P5 = "0005-npu-ar-model-runner-execute-model.patch"
ADDED = b"+        scheduler_output: SchedulerOutput,\n"  # an added line of patch 0005
FENCE = b"+        #  " + b"-" * 38 + b" Omni-new " + b"-" * 49 + b"\n"  # an Omni-new fence line of patch 0005
# a vllm-ascend commit (public sha, found through the bundle's Upstream-Commit trailers) that the 0.30.0
# series replays onto without a conflict, with review flags
CLEAN_TARGET = "c9e95ba32421"


def line_of(data: bytes, needle: bytes) -> int:
    """1-based number of the line holding the first ``needle``."""
    at = data.index(needle)
    return data.count(b"\n", 0, at) + 1


def refused(proj: Path, *args: str) -> str:
    """Run pq, expect exit 1 with one error line and no traceback, and nothing changed; return the line."""
    before = state(proj)
    proc = pq(proj, *args, check=1)
    line = one_error_line(proc)
    assert line.startswith("pq: error: "), line
    assert state(proj) == before
    return line


def mutate(path: Path, old: bytes, new: bytes) -> int:
    """Replace the first ``old`` in the file by ``new``; return its line number."""
    data = path.read_bytes()
    assert old in data, (path, old)
    path.write_bytes(data.replace(old, new, 1))
    return line_of(data, old)


@pytest.fixture(scope="module")
def vendored(adopted_030: Path) -> bytes:
    """The upstream runner the 0.30.0 series is pinned to, as the base commit holds it."""
    return subprocess.run(
        ["git", "show", f"refs/pq/base:.pq-upstream/{RUNNER}"], cwd=adopted_030, check=True, capture_output=True
    ).stdout


def upstream_folder(root: Path, runner: bytes) -> Path:
    (root / "vllm_ascend" / "worker").mkdir(parents=True)
    (root / RUNNER).write_bytes(runner)
    return root


# -- patch files ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (b"\n@@ -", b"\n@@ -x", "malformed hunk header for npu_ar_model_runner.py"),
        (b"From ", b"Frob ", "not an mbox patch: it does not start with a 'From ' line"),
        (
            b"--- a/npu_ar_model_runner.py\n+++ b/npu_ar_model_runner.py\n",
            b"GIT binary patch\nliteral 0\nHcmV?d00001\n\n",
            "binary patch for npu_ar_model_runner.py is not supported (pq keeps text changes only)",
        ),
        (ADDED, ADDED[:-2] + b"\0,\n", "binary content (a NUL byte) in the diff; pq keeps text changes only"),
        (ADDED, ADDED[:-2] + b"\xff,\n", "not valid UTF-8 (byte 0xff at column 43)"),
        (ADDED, ADDED[:-2] + b"\xe9,\n", "not valid UTF-8 (byte 0xe9 at column 43)"),  # a Latin-1 editor
    ],
    ids=["hunk-header", "no-from-line", "git-binary", "nul-byte", "non-utf8", "latin1"],
)
def test_malformed_binary_and_non_utf8_patch(proj: Path, old: bytes, new: bytes, message: str) -> None:
    victim = proj / "patches" / P5
    line = mutate(victim, old, new) + (1 if old.startswith(b"\n") else 0)
    assert refused(proj, "build") == f"pq: error: patches/{P5}:{line}: {message}"


def test_crlf_patch(proj: Path) -> None:
    """A patch checked out with CR LF line ends (core.autocrlf): refused at its first line, not half-applied."""
    victim = proj / "patches" / P5
    victim.write_bytes(victim.read_bytes().replace(b"\n", b"\r\n"))
    assert refused(proj, "build") == f"pq: error: patches/{P5}:1: mail header line ends with CR LF (DOS line ends)"


def test_crlf_in_a_context_line_does_not_apply(proj: Path) -> None:
    victim = proj / "patches" / P5
    mutate(victim, b"\n     @torch.inference_mode()\n", b"\n     @torch.inference_mode()\r\n")
    hunk = line_of(victim.read_bytes(), b"\n@@ ") + 1
    assert refused(proj, "build") == f"pq: error: patches/{P5}:{hunk}: hunk 1 for npu_ar_model_runner.py does not apply"


def test_truncated_patch_exact_line(proj: Path) -> None:
    victim = proj / "patches" / P5
    data = victim.read_bytes()
    cut = data[: data.index(b"\n", len(data) // 2)]  # a whole number of lines, the last one without its newline
    victim.write_bytes(cut)
    hunk = cut.count(b"\n@@ ")  # the hunk the cut falls in, and its header line
    header = cut.count(b"\n", 0, cut.rindex(b"\n@@ ")) + 2
    assert refused(proj, "build") == (
        f"pq: error: patches/{P5}:{header}: hunk {hunk} for npu_ar_model_runner.py "
        "does not match its header's line counts (truncated patch?)"
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("/etc/evil.py", "file name '/etc/evil.py' is an absolute path"),
        ("b/../escape.py", "file name '../escape.py' has a '..' component"),
        ("b/.git/hooks/post-checkout", "file name '.git/hooks/post-checkout' points into .git"),
    ],
    ids=["absolute", "dotdot", "dot-git"],
)
def test_patch_paths_escaping_the_output_folder(proj: Path, name: str, message: str) -> None:
    victim = proj / "patches" / "0001-init.patch"
    line = mutate(victim, b"diff --git a/__init__.py b/__init__.py\n", f"diff --git a/__init__.py {name}\n".encode())
    assert refused(proj, "build") == f"pq: error: patches/0001-init.patch:{line}: {message}"


def test_symlink_in_the_output_folder(proj: Path, tmp_path: Path) -> None:
    """A link in npu_worker/ pointing outside: pq neither writes through it nor replaces it."""
    outside = tmp_path / "outside.py"
    outside.write_text("# somebody else's file\n")
    link = proj / "npu_worker" / "base.py"
    link.unlink()
    link.symlink_to(outside)
    for args in (("build",), ("refresh", "--to", CLEAN_TARGET)):
        assert refused(proj, *args) == (
            f"pq: error: npu_worker/base.py: is a symbolic link (to {outside}); "
            "pq writes regular files only: replace the link with a copy of its file"
        )
    assert outside.read_text() == "# somebody else's file\n" and link.is_symlink()


@pytest.mark.parametrize("name", ["0001-init.patch", "series"])
def test_symlink_in_patches_is_written_through(proj: Path, tmp_path: Path, name: str) -> None:
    """A file of patches/ is the user's: a refresh writes its target and keeps the link (as every writer does,
    tests/test_hostile_r4_userfiles.py)."""
    outside = tmp_path / name
    link = proj / "patches" / name
    shutil.move(link, outside)
    link.symlink_to(outside)
    kept = outside.read_bytes()
    pq(proj, "build")  # reading through the link is fine
    pq(proj, "refresh", "--to", CLEAN_TARGET)
    assert link.is_symlink() and os.readlink(link) == str(outside)
    assert outside.read_bytes() == kept  # this refresh leaves both as they were: nothing replaced the link


# -- upstream sources ----------------------------------------------------------------------------------------


def test_upstream_file_that_no_longer_parses(proj: Path, tmp_path: Path, vendored: bytes) -> None:
    broken = vendored.replace(b"class NPUModelRunner", b"class NPUModelRunner(((", 1)
    folder = upstream_folder(tmp_path / "up", broken)
    line = line_of(broken, b"class NPUModelRunner(((")
    assert refused(proj, "refresh", "--to", str(folder)) == (
        f"pq: error: {RUNNER}:{line}: does not parse: invalid syntax (dir {folder})"
    )


def test_upstream_file_without_the_class(proj: Path, tmp_path: Path, vendored: bytes) -> None:
    folder = upstream_folder(tmp_path / "up", vendored.replace(b"class NPUModelRunner", b"class RenamedRunner"))
    assert refused(proj, "refresh", "--to", str(folder)) == (
        f"pq: error: {RUNNER}: has no class NPUModelRunner, whose methods npu_ar_model_runner.py carries "
        f"(dir {folder}); point --to at a vllm-ascend that has it, or edit the [[module]] in queue.toml"
    )


def test_upstream_file_not_utf8(proj: Path, tmp_path: Path, vendored: bytes) -> None:
    bad = vendored.replace(b"class NPUModelRunner", b"# \xff\nclass NPUModelRunner", 1)
    folder = upstream_folder(tmp_path / "up", bad)
    at = bad.index(b"\xff")
    line = bad.count(b"\n", 0, at) + 1
    assert refused(proj, "refresh", "--to", str(folder)) == (
        f"pq: error: {RUNNER}:{line}: upstream file is not UTF-8 at byte {at} (dir {folder})"
    )


def test_upstream_folder_without_the_runner(proj: Path, tmp_path: Path) -> None:
    folder = tmp_path / "up"
    (folder / "vllm_ascend").mkdir(parents=True)
    assert refused(proj, "refresh", "--to", str(folder)) == f"pq: error: {RUNNER}: no such file in dir:{folder}"


@pytest.mark.parametrize("location", ["/nonexistent/vllm-ascend", "file:///nonexistent/vllm-ascend.git"])
def test_unreachable_git_source(proj: Path, monkeypatch: pytest.MonkeyPatch, location: str) -> None:
    monkeypatch.setenv("PQ_UPSTREAM_GIT", location)
    expected = f"pq: error: cannot read upstream git repository {location}: no such file or directory"
    assert refused(proj, "refresh", "--to", "main") == expected
    git(proj, "update-ref", "-d", "refs/pq/base")  # the base must be rebuilt from the pinned commit
    assert refused(proj, "build") == expected


@pytest.fixture
def private_cache(tmp_path: Path, pq_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty download cache (sharing the session's git clones) and pip told to read no config file."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (pq_cache / "git").mkdir(parents=True, exist_ok=True)
    (cache / "git").symlink_to(pq_cache / "git")
    monkeypatch.setenv("PQ_CACHE", str(cache))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    return cache


def test_unreachable_registry(proj: Path, private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    for args in (("refresh", "--to", "vllm-ascend==0.30.0rc2"), ("refresh",)):
        line = refused(proj, *args)
        assert line.startswith("pq: error: cannot read package index http://127.0.0.1:9/simple: "), line
        assert "refused" in line.lower() or "unreachable" in line.lower(), line
    assert not (private_cache / "dist").exists() or not any((private_cache / "dist").iterdir())


def test_unknown_release_in_a_file_index(
    proj: Path,
    private_cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    archives = {"vllm_ascend-99.0-py3-none-any.whl": _wheel("vllm_ascend", "99.0", {})}
    _file_index(tmp_path / "index", "vllm-ascend", archives, yanked=set(), bad=set())
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path / 'index' / 'simple'}")
    assert refused(proj, "refresh", "--to", "vllm-ascend==98.0") == (
        "pq: error: unknown release vllm-ascend==98.0 (newest on the registry: 99.0)"
    )


@pytest.fixture
def file_index(tmp_path: Path, private_cache: Path, vendored: bytes, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file:// index with a vllm-ascend 99.0 wheel that holds the pinned runner, and a bad 99.1."""
    wheel = _wheel("vllm_ascend", "99.0", {RUNNER: vendored})
    archives = {"vllm_ascend-99.0-py3-none-any.whl": wheel, "vllm_ascend-99.1-py3-none-any.whl": wheel}
    _file_index(tmp_path / "index", "vllm-ascend", archives, yanked=set(), bad={"vllm_ascend-99.1-py3-none-any.whl"})
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path / 'index' / 'simple'}")
    return tmp_path / "index"


def test_download_sha256_mismatch(proj: Path, file_index: Path, private_cache: Path) -> None:
    data = (file_index / "files" / "vllm_ascend-99.1-py3-none-any.whl").read_bytes()
    good, listed = hashlib.sha256(data).hexdigest(), hashlib.sha256(data + b"x").hexdigest()
    assert refused(proj, "refresh", "--to", "vllm-ascend==99.1") == (
        f"pq: error: sha256 mismatch for vllm_ascend-99.1-py3-none-any.whl: the index says {listed}, downloaded {good}"
    )
    assert [p.name for p in (private_cache / "dist").iterdir() if "99.1" in p.name] == []  # nothing cached


def test_corrupted_download_cache(
    adopted_030: Path,
    tmp_path: Path,
    file_index: Path,
    private_cache: Path,
) -> None:
    """A cached archive that fails its sha256 is fetched again (and said so); if it cannot be, a clear error."""
    first = copy_project(adopted_030, tmp_path / "first")
    pq(first, "refresh", "--to", "vllm-ascend==99.0", "--no-check")
    archive = private_cache / "dist" / "vllm_ascend-99.0-py3-none-any.whl"
    good = archive.read_bytes()
    archive.write_bytes(good[:-10] + b"corrupted!")
    second = copy_project(adopted_030, tmp_path / "second")
    proc = pq(second, "refresh", "--to", "vllm-ascend==99.0", "--no-check")
    assert f"warning: cached {archive} fails its sha256 check" in proc.stderr, proc.stderr
    assert archive.read_bytes() == good
    assert state(first)["files"] == state(second)["files"]  # the same refresh as with a sound cache
    # corrupted again, and the registry's file is gone: refused, nothing changed, the bad file not trusted
    archive.write_bytes(good[:-10] + b"corrupted!")
    (file_index / "files" / archive.name).unlink()
    third = copy_project(adopted_030, tmp_path / "third")
    line = refused(third, "refresh", "--to", "vllm-ascend==99.0")
    assert line.startswith(
        f"pq: error: cannot download {archive.name} from file://{file_index}/files/{archive.name}: "
    ), line


def test_sha256_mismatch_of_vendored_file_names_queue_pin(proj: Path) -> None:
    queue = proj / "patches" / "queue.toml"
    text = queue.read_text()
    digest = text.split(f'"{RUNNER}" = "', 1)[1][:64]
    queue.write_text(text.replace(digest, "0" * 64))
    git(proj, "update-ref", "-d", "refs/pq/base")
    line = refused(proj, "build")
    assert line == (
        f"pq: error: sha256 mismatch for vendored file {RUNNER} from git cf0baa38dfb2: "
        f"queue.toml pins {'0' * 64}, got {digest}"
    ), line


# -- queue.toml, series, work tree ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "[downstream]",
            "[downstream",
            "patches/queue.toml:{line}: not valid TOML: Expected ']' at the end of a table declaration",
        ),
        ("format = 3", "format = 5", "patches/queue.toml: format 5 is newer than this pq understands (4); upgrade pq"),
        ("format = 3", 'format = "3"', "patches/queue.toml: missing integer 'format'"),
        ('name = "vllm-omni"', 'name = "vllm-\xe9mni"', None),  # written below as Latin-1
        # format 4's [queue] table: what the queue is (issue 49); each wrong key one line, at its line
        ("format = 3", "format = 4", "patches/queue.toml: format 4 needs a [queue] table (what the queue is)"),
        (
            "format = 3\n",
            'format = 4\n\n[queue]\npreset = "tpu"\n',
            "patches/queue.toml:{line+3}: [queue].preset 'tpu' is no preset (they are npu, gpu)",
        ),
        (
            "format = 3\n",
            'format = 4\n\n[queue]\npreset = "gpu"\nout = 7\n',
            "patches/queue.toml:{line+4}: [queue].out must be a string",
        ),
        (
            "format = 3\n",
            'format = 4\n\n[queue]\npreset = "gpu"\nupstream = "vllm"\n',
            "patches/queue.toml:{line+4}: [queue].upstream is no key of a queue (they are preset, upstream_dist, "
            "upstream_file, upstream_class, upstream_git, downstream_dist, package, out, wheel, wheel_requires, fence, "
            "rules, gpu_reference)",
        ),
        (
            "format = 3\n",
            'format = 3\n\n[queue]\npreset = "gpu"\n',
            "patches/queue.toml:{line+2}: [queue] needs format = 4 (this file says format = 3)",
        ),
    ],
    ids=[
        "corrupt",
        "newer",
        "format-not-int",
        "not-utf8",
        "4-without-queue",
        "unknown-preset",
        "out-not-string",
        "unknown-key",
        "queue-in-3",
    ],
)
def test_bad_queue_toml(proj: Path, old: str, new: str, message: str | None) -> None:
    queue = proj / "patches" / "queue.toml"
    text = queue.read_text()
    assert old in text
    line = text[: text.index(old)].count("\n") + 1
    if message is None:
        queue.write_bytes(text.replace(old, new, 1).encode("latin-1"))
        message = "patches/queue.toml:{line}: not UTF-8 (byte 0xe9)"
    else:
        queue.write_text(text.replace(old, new, 1))
    for args in (("build",), ("refresh", "--to", CLEAN_TARGET), ("status",)):
        shown = re.sub(r"\{line\+(\d)\}", lambda m: str(line + int(m.group(1))), message).format(line=line)
        assert refused(proj, *args) == "pq: error: " + shown, args


def test_series_not_utf8(proj: Path) -> None:
    series = proj / "patches" / "series"
    series.write_bytes(series.read_bytes() + b"# caf\xe9\n")
    line = series.read_bytes().count(b"\n")
    assert refused(proj, "build") == f"pq: error: patches/series:{line}: not UTF-8 (byte 0xe9)"


def test_unbalanced_fences_build_and_warn(proj: Path) -> None:
    """An Omni-new fence lost from a patch: not an error (the code is still right), a warning with file and line."""
    before = pq(proj, "build").stdout
    mutate(proj / "patches" / P5, FENCE, b"+        # (the fence line was deleted by hand)\n")
    assert "edited by hand" in refused(proj, "build")  # the lineage's hash names the hand-edited body
    pq(proj, "accept")  # a fork takes its hand edit into the lineage
    proc = pq(proj, "build")
    assert "Traceback" not in proc.stderr
    new_warnings = [w for w in proc.stdout.splitlines() if w.startswith("warning: ") and w not in before]
    assert new_warnings, proc.stdout
    for w in new_warnings:
        assert w.startswith("warning: npu_worker/npu_ar_model_runner.py:") and "Omni-new" in w, w
    built = (proj / "npu_worker" / "npu_ar_model_runner.py").read_text()
    assert "# (the fence line was deleted by hand)" in built  # built all the same, nothing dropped
    check = pq(proj, "check", "--no-sources")
    assert "[fence]" in check.stdout


def test_unlisted_patch_file_survives_refresh(proj: Path) -> None:
    """A maintainer's work-in-progress patch that series does not name is theirs: a refresh leaves it alone."""
    wip = proj / "patches" / "0099-my-wip.patch"
    wip.write_text("half-written, not in series yet\n")
    pq(proj, "refresh", "--to", CLEAN_TARGET, "--no-check")
    assert wip.read_text() == "half-written, not in series yet\n"
    assert "0099-my-wip.patch" not in (proj / "patches" / "series").read_text()


def test_hand_edit_where_refresh_writes(proj: Path) -> None:
    """A dirty npu_worker/ (a module edited, not recorded): refresh and its state are refused up front."""
    target = proj / "npu_worker" / "npu_ar_model_runner.py"
    mutate(target, b"import ", b"import  ")
    assert refused(proj, "refresh", "--to", CLEAN_TARGET) == (
        "pq: error: npu_worker/npu_ar_model_runner.py: has edits no patch holds (+1 -1 lines); "
        "`pq record` them into the series, or pass --discard to drop them"
    )


# -- determinism (item 5) ------------------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_same_inputs_same_bytes(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """adopt + refresh + wheel in two folders (different depth and name), two time zones, no fixed git dates."""
    monkeypatch.delenv("GIT_AUTHOR_DATE")
    monkeypatch.delenv("GIT_COMMITTER_DATE")
    results = []
    for where, tz in ((tmp_path / "a", "UTC"), (tmp_path / "b" / "deeper" / "x", "Asia/Kolkata")):
        monkeypatch.setenv("TZ", tz)
        project = new_project(where / "p")
        pq(project, "adopt", str(corpus / "vllm-omni-0.30.0" / "npu"), "--at", "cf0baa38dfb2")
        reports = where / "reports"
        reports.mkdir()  # pq never creates an output path's folder
        pq(
            project,
            "refresh",
            "--to",
            CLEAN_TARGET,
            "--report",
            str(reports / "r.json"),
            "--markdown",
            str(reports / "r.md"),
        )
        pq(project, "build", "--wheel")
        results.append(
            {
                "patches": _tree(project / "patches"),
                "npu_worker": _tree(project / "npu_worker"),
                "reports": _tree(reports),
                "dist": _tree(project / "dist"),
                "refs": git(project, "for-each-ref", "--format=%(refname) %(objectname)", "refs/pq/"),
            }
        )
    first, second = results
    assert first["patches"] and first["reports"].keys() == {"r.json", "r.md"} and len(first["dist"]) == 1
    assert b"c9e95ba32421" in first["reports"]["r.json"]
    for name, data in first["reports"].items():  # no machine path leaks into a report
        assert str(tmp_path).encode() not in data and b"/tmp/" not in data, name
    for key in first:
        assert first[key] == second[key], key


@pytest.mark.parametrize("how", ["missing", "emptied"])
def test_a_lost_series_never_empties_the_stack(proj: Path, how: str) -> None:
    series = proj / "patches" / "series"
    if how == "missing":
        series.unlink()
    else:
        series.write_text("# pq series: patch order, one file a line (quilt format)\n")
    for args in (("build",), ("series",), ("push",)):
        line = refused(proj, *args)
        assert "patches/series: is missing or names no patch while refs/pq/patches/ holds 16 patches" in line, line


def test_output_paths_are_written_in_place_or_refused(proj: Path, tmp_path: Path) -> None:
    """--json/--markdown/--report name files the user owns: a link is written through, a device gets a stream,
    a missing folder is refused before anything runs; no file is ever replaced by another."""
    target = tmp_path / "real.json"
    target.write_text("")  # empty: a file that is no report of pq's is refused (tests/test_hostile_files.py)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    pq(proj, "check", "--no-sources", "--json", str(link))
    assert link.is_symlink() and target.read_text().startswith("{")
    hard = tmp_path / "hard.md"
    (tmp_path / "blocks.md").write_text("")
    os.link(tmp_path / "blocks.md", hard)
    pq(proj, "blocks", "--markdown", str(tmp_path / "blocks.md"))
    assert hard.read_text().startswith("#")  # written in place: the other link sees it
    pq(proj, "blocks", "--markdown", "/dev/null")
    assert Path("/dev/null").is_char_device()
    line = refused(proj, "check", "--no-sources", "--json", str(tmp_path / "no" / "such" / "x.json"))
    assert line.endswith("x.json: its folder does not exist; create it first"), line
    assert not (tmp_path / "no").exists()
    line = refused(proj, "refresh", "--report", str(tmp_path))
    assert "is a folder; name a file to write" in line, line
    if Path("/dev/full").exists():
        proc = pq(proj, "blocks", "--markdown", "/dev/full", check=1)
        assert one_error_line(proc).startswith("pq: error: /dev/full: cannot be written: No space left on device")
        assert Path("/dev/full").is_char_device()


def test_dash_names_stdout(proj: Path) -> None:
    """``-`` for a file option is stdout, as git, tar and curl read it: no file named ``-`` is made."""
    proc = pq(proj, "blocks", "--markdown", "-")
    assert proc.stdout.startswith("#") and "unfenced" in proc.stderr, proc.stdout[:200]
    proc = pq(proj, "check", "--no-sources", "--json", "-")
    report = json.loads(proc.stdout)  # the report alone: the findings went to stderr
    assert "errors" in report and "findings" in report
    assert not (proj / "-").exists()


def test_damaged_refs_and_environment_are_one_line(proj: Path, tmp_path: Path) -> None:
    """What used to be exit 4: a ref at a blob or at a missing object, PQ_CACHE naming a file, a patch name
    that is no ref name, stdout on a full device."""
    blob = git(proj, "hash-object", "-w", "patches/series").strip()
    real = git(proj, "rev-parse", "refs/pq/base").strip()
    git(proj, "update-ref", "refs/pq/base", blob)
    line = refused(proj, "build")
    assert line.startswith(f"pq: error: refs/pq/base: points at {blob[:12]}, a blob, not a commit"), line
    git(proj, "update-ref", "refs/pq/base", real)
    ref_file = proj / ".git" / "refs" / "pq" / "top"
    git(proj, "pack-refs", "--all")  # the good value stays in packed-refs; a loose file overrides it
    (proj / ".git" / "refs" / "pq").mkdir(parents=True, exist_ok=True)
    ref_file.write_text("1" * 40 + "\n")  # a dangling sha, as a hand edit or a broken copy leaves it
    line = refused(proj, "pop")
    assert "refs/pq/top: points at 111111111111, an object the repository does not have" in line, line
    ref_file.unlink()
    cache_file = tmp_path / "cache-file"
    cache_file.write_text("")
    env = {**os.environ, "PQ_CACHE": str(cache_file)}
    before = state(proj)
    proc = subprocess.run(
        [sys.executable, "-m", "patch_queue", "build"], cwd=proj, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1 and "cache-file: the download cache (PQ_CACHE) is not a folder" in proc.stderr
    assert state(proj) == before
    line = refused(proj, "new", "x..y")
    assert "invalid patch name 'x..y': the file name is no name git takes for a ref" in line, line
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [sys.executable, "-m", "patch_queue", "series"],
                cwd=proj,
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
            )
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.strip() == "pq: error: cannot write the output: No space left on device", proc.stderr


def test_a_bug_is_one_line_and_a_crash_log_whatever_is_writable(proj: Path) -> None:
    """Exit 4 with one line; crash.log has the command line, pq's version and the time; with .git/pq not
    writable the log goes to ./pq-crash.log; no journal is left behind."""
    env = {**os.environ, "PQ_TEST_KILL_AT": "bug:command"}
    proc = subprocess.run(
        [sys.executable, "-m", "patch_queue", "status"], cwd=proj, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 4
    log = proj / ".git" / "pq" / "crash.log"
    assert proc.stderr.strip() == f"pq: internal error (a bug); traceback written to {log}"
    text = log.read_text()
    assert text.startswith("pq 0.1.0 at 20") and "command: " in text and " status\n" in text
    assert "RuntimeError: a planted bug at command" in text
    shutil.rmtree(proj / ".git" / "pq")
    (proj / ".git" / "pq").write_text("not a folder")
    proc = subprocess.run(
        [sys.executable, "-m", "patch_queue", "series"], cwd=proj, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 4 and proc.stderr.strip().endswith(str(proj / "pq-crash.log")), proc.stderr
    assert "planted bug" in (proj / "pq-crash.log").read_text()


def test_a_git_ref_lock_during_the_writes_is_undone_without_a_journal(proj: Path) -> None:
    """A git command holding a refs/pq lock while pq writes: exit 1, one line, everything as before, no journal."""
    runner = proj / "npu_worker" / "npu_model_runner.py"
    runner.write_text(runner.read_text() + "\n# a maintainer's edit\n")
    (proj / ".git" / "refs" / "pq" / "patches").mkdir(parents=True, exist_ok=True)
    lock = proj / ".git" / "refs" / "pq" / "top.lock"
    lock.write_text("")
    try:
        before = state(proj)
        proc = pq(proj, "record", check=1)
        assert "is locked by another git command" in one_error_line(proc)
        assert state(proj) == before
        assert not (proj / ".git" / "pq" / "journal.json").exists()
    finally:
        lock.unlink()
    pq(proj, "record")  # with the lock gone it goes through


def test_record_after_a_standalone_build_takes_only_the_edit(proj: Path) -> None:
    """`pq build --standalone` into npu_worker/, an edit, `pq record`: the patches gain the edit, not the
    standalone build's import rewrites."""
    pq(proj, "build", "--standalone")
    runner = proj / "npu_worker" / "npu_ar_model_runner.py"
    text = runner.read_text()
    assert "vllm_omni.platforms.npu.worker" not in text and "from npu_worker." in text  # imports point into it
    runner.write_text(text + "\n# a maintainer's note\n")
    before = {p.name: p.read_text() for p in (proj / "patches").glob("*.patch")}
    pq(proj, "record")
    after = {p.name: p.read_text() for p in (proj / "patches").glob("*.patch")}

    def body_lines(texts: dict[str, str]) -> Counter[str]:  # the diff lines of every patch (later ones rebase)
        return Counter(
            x for t in texts.values() for x in t.splitlines() if x[:1] in "+-" and x[:3] not in ("+++", "---")
        )

    assert body_lines(after) - body_lines(before) == Counter({"+": 1, "+# a maintainer's note": 1})
    assert not body_lines(before) - body_lines(after)
    assert "vllm_omni.platforms.npu.worker" in git(proj, "show", "refs/pq/top:npu_ar_model_runner.py")


def test_build_out_never_overwrites_a_users_file(proj: Path, tmp_path: Path) -> None:
    out = tmp_path / "elsewhere"
    out.mkdir()
    (out / "npu_model_runner.py").write_text("# my own file\n")
    line = refused(proj, "build", "--out", str(out))
    assert line.endswith(
        "npu_model_runner.py: is not a file pq wrote (.pq-build does not list it); pq does not "
        "overwrite it: move it away, or build into another folder"
    ), line
    assert (out / "npu_model_runner.py").read_text() == "# my own file\n"
    (out / "npu_model_runner.py").unlink()
    pq(proj, "build", "--out", str(out))
    pq(proj, "build", "--out", str(out))  # its own files it rewrites


def test_a_linked_work_tree_is_refused(proj: Path, tmp_path: Path) -> None:
    """refs/pq/ are shared by every work tree, the lock and a refresh's state are not: pq runs in the main one."""
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "project")
    linked = tmp_path / "linked"
    git(proj, "worktree", "add", "-q", str(linked))
    refs = git(proj, "for-each-ref", "refs/pq/")
    for args in (("status",), ("build",), ("refresh",)):
        proc = pq(linked, *args, check=1)
        line = one_error_line(proc)
        assert line == (
            f"pq: error: {linked}: is a linked git work tree: its refs/pq/ are shared with every work tree of the "
            "repository while the lock and a refresh's state are not, so pq runs in the main work tree only "
            f"({proj})"
        ), line
    assert git(proj, "for-each-ref", "refs/pq/") == refs
    pq(proj, "status")
