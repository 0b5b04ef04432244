"""Hostile round four (issue 46): pq writes and deletes only what it owns, and an unusable or foreign cache
entry, cache or output folder is a miss or one line, never a crash.

Through the real command line on copies of the adopted 0.30.0 project (``proj``).  A path read from a file
(the output folder's manifest ``.pq-build``, a recorded edit of ``refs/pq/resolutions``, a record of the
download cache) is taken only when it names a file below pq's own folder: pq never writes nor deletes
``../notes.txt``, an absolute path, or a file reached through a symbolic link inside its folder.  A cache (or a
``--out`` folder) that cannot be made or written is one line naming it; a cache entry with the right seal but
another shape (valid JSON of the wrong types or keys, bytes that are not UTF-8) is recomputed, and the command
gives what it gives on a sound cache.  Every refused case asserts exit 1, the one line, no traceback, and
that every file and ref is as before (``state``), the user's file byte for byte.  The unwritable folders are
``chattr +i`` (CI runs as root, where permissions alone stop nothing): those cases skip where it is missing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import pq, state
from test_errors import one_error_line, proj  # noqa: F401  (proj: a copy of adopted_030)

USER = b"my own notes: not pq's\n"
CLEAN_TARGET = "c9e95ba32421"  # 0.30.0's series replays onto it without a conflict (see test_bad_input)
ZERO = "0" * 64


def refused(proj: Path, *args: str) -> str:
    """Run pq, expect exit 1 with one error line and no traceback, and nothing changed; return the line."""
    before = state(proj)
    proc = pq(proj, *args, check=1)
    line = one_error_line(proc)
    assert "Traceback" not in proc.stdout
    assert line.startswith("pq: error: "), line
    assert state(proj) == before
    return line


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {made.stderr.strip() or 'no chattr'}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


# -- 1. the output folder's manifest names files below the folder only ----------------------------------------


def _manifest_line(proj: Path, rel: str) -> int:
    """Add a line naming ``rel`` to npu_worker/.pq-build; its line number."""
    manifest = proj / "npu_worker" / ".pq-build"
    text = manifest.read_text()
    manifest.write_text(text + f"{ZERO} {rel}\n")
    return text.count("\n") + 1


def _outside(proj: Path, tmp_path: Path, case: str) -> tuple[str, Path, str]:
    """(the manifest's path, the user's file it reaches, why it is not pq's) for each way out of the folder."""
    if case == "parent":
        mine = proj / "notes.txt"
        return "../notes.txt", mine, "which is not a file below npu_worker/"
    if case == "absolute":
        mine = tmp_path / "elsewhere" / "notes.txt"
        return str(mine), mine, "which is not a file below npu_worker/"
    (tmp_path / "elsewhere").mkdir()
    (proj / "npu_worker" / "sub").symlink_to(tmp_path / "elsewhere")
    mine = tmp_path / "elsewhere" / "x.py"
    return "sub/x.py", mine, "which is reached through the symbolic link npu_worker/sub"


@pytest.mark.parametrize("case", ["parent", "absolute", "link"])
def test_a_manifest_line_outside_the_folder_is_refused_and_its_file_kept(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    case: str,
) -> None:
    rel, mine, why = _outside(proj, tmp_path, case)
    mine.parent.mkdir(exist_ok=True)
    mine.write_bytes(USER)
    line = _manifest_line(proj, rel)
    expected = (
        f"pq: error: npu_worker/.pq-build:{line}: names {rel!r}, {why}; pq writes and deletes the files of "
        "npu_worker/ only, and did not write this one: delete the line, then run the command again"
    )
    for args in (("build",), ("build", "--discard"), ("refresh", "--to", CLEAN_TARGET, "--discard"), ("record",)):
        assert refused(proj, *args) == expected, args
        assert mine.read_bytes() == USER
    status = pq(proj, "status")  # said, not refused; and never an edit of the folder
    assert f"warning: {expected.removeprefix('pq: error: ')}" in status.stdout.splitlines()
    assert "unrecorded" not in status.stdout
    # the line deleted, the folder is pq's again
    manifest = proj / "npu_worker" / ".pq-build"
    manifest.write_text("".join(manifest.read_text().splitlines(keepends=True)[: line - 1]))
    pq(proj, "build")
    assert mine.read_bytes() == USER


def test_a_build_into_another_folder_reads_its_manifest_the_same_way(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    pq(proj, "build", "--out", str(tmp_path / "out"))
    mine = tmp_path / "notes.txt"
    mine.write_bytes(USER)
    manifest = tmp_path / "out" / ".pq-build"
    line = manifest.read_text().count("\n") + 1
    manifest.write_text(manifest.read_text() + f"{ZERO} ../notes.txt\n")
    assert refused(proj, "build", "--out", str(tmp_path / "out"), "--discard") == (
        f"pq: error: {tmp_path}/out/.pq-build:{line}: names '../notes.txt', which is not a file below out/; pq writes "
        f"and deletes the files of {tmp_path}/out/ only, and did not write this one: delete the line, then run the "
        "command again"
    )
    assert mine.read_bytes() == USER


# -- 2. a cache or an output folder that cannot be written: one line -------------------------------------------


def _below_a_file(tmp_path: Path) -> Path:
    (tmp_path / "afile").write_bytes(USER)
    return tmp_path / "afile" / "cache"


def test_a_cache_below_a_file_is_one_line(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = _below_a_file(tmp_path)
    monkeypatch.setenv("PQ_CACHE", str(cache))
    assert refused(proj, "refresh", "--to", CLEAN_TARGET) == (
        f"pq: error: {cache}/git: the download cache cannot be written (Not a directory); pq keeps the upstream "
        "mirror there: make it writable, or point PQ_CACHE at another folder"
    )
    assert (tmp_path / "afile").read_bytes() == USER


def test_a_cache_that_cannot_be_written_is_one_line(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("PQ_CACHE", str(cache))
    with immutable(cache):
        assert refused(proj, "refresh", "--to", CLEAN_TARGET) == (
            f"pq: error: {cache}/git: the download cache cannot be written (Operation not permitted); pq keeps the "
            "upstream mirror there: make it writable, or point PQ_CACHE at another folder"
        )
        assert refused(proj, "build", "--wheel") == (
            f"pq: error: {cache}/git: the download cache cannot be written (Operation not permitted); pq keeps the "
            "upstream mirror there: make it writable, or point PQ_CACHE at another folder"
        )
        # what needs no download reads on, only slower
        assert pq(proj, "status").returncode == 0
    assert list(cache.iterdir()) == []


def test_a_download_into_a_cache_that_cannot_be_written_is_one_line(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    (cache / "dist").mkdir(parents=True)
    # the choice of archive recorded, its file not there: a download, which has nowhere to go
    record = cache / "dist" / "vllm-omni==0.30.0.json"
    url = f"file://{tmp_path / 'vllm_omni-0.30.0-py3-none-any.whl'}"
    record.write_text(
        f'{{"filename": "vllm_omni-0.30.0-py3-none-any.whl", "url": "{url}", "sha256": "{ZERO}", "kind": "wheel"}}'
    )
    monkeypatch.setenv("PQ_CACHE", str(cache))
    with immutable(cache / "dist"):
        assert refused(project, "adopt", "vllm-omni==0.30.0") == (
            f"pq: error: {cache}/dist: the download cache cannot be written (Operation not permitted); pq keeps "
            "the release archives there: make it writable, or point PQ_CACHE at another folder"
        )


@pytest.mark.parametrize("case", ["file", "below-a-file", "immutable"])
def test_a_wheel_folder_that_cannot_be_written_is_one_line(
    proj: Path,  # noqa: F811
    case: str,
) -> None:
    (proj / "afile").write_bytes(USER)
    (proj / "frozen").mkdir()
    out, why = {
        "file": ("afile", "is not a folder"),
        "below-a-file": ("afile/x", "Not a directory"),
        "immutable": ("frozen", "Operation not permitted"),
    }[case]
    with immutable(proj / "frozen"):
        assert refused(proj, "build", "--wheel", "--out", out) == (
            f"pq: error: {out}: the wheel cannot be written there ({why}); name a folder pq can write with --out"
        )
    assert (proj / "afile").read_bytes() == USER
    assert list((proj / "frozen").iterdir()) == []
    built = pq(proj, "build", "--wheel", "--out", "wheels")
    assert built.stdout.strip().startswith("wheels/") or "wheels/" in built.stdout + built.stderr


def test_a_build_folder_that_cannot_be_written_is_one_line(proj: Path) -> None:  # noqa: F811
    (proj / "frozen").mkdir()
    with immutable(proj / "frozen"):
        assert refused(proj, "build", "--out", "frozen") == (
            "pq: error: frozen/.pq-build: cannot be written (Operation not permitted); everything was put back as it "
            "was; make room (or make it writable) and run `pq build` again"
        )
