"""Hostile round four (issue 46): no command takes the series backwards, and a release spec is a release.

Rule 3: a release older than the one the series holds is refused by `pq merge`, `pq sync-gpu` (`--omni`, and a
`--since` after the release it ends at) and `pq refresh` (`--to vllm-ascend==X` older than the release the series is
on, or the newest one when the index lags behind), in one line naming `patches/queue.toml`, before anything is
downloaded: the refusals run with pip's index on a closed loopback port and an empty download cache, which gains
nothing.  A commit, a ref or a folder is taken as named (the tests of other files replay onto older commits).  A
folder's path that holds `==` (`./x==1/npu`) is that folder, never a release to download; a spec that is neither is
one line.  Through the real command line; each refused case checks exit 1, the one line, no traceback, and every
file and ref as before (`refused`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import BASE_030, copy_project, corpus_dir, new_project, pq, state
from test_errors import proj  # noqa: F401  (proj: a copy of adopted_030, the corpus folder of 0.30.0)
from test_hostile_files import refused
from test_sources import _file_index, _wheel

QUEUE = "patches/queue.toml"
CLOSED = "http://127.0.0.1:9/simple"  # the discard port: nothing listens there


@pytest.fixture
def offline(tmp_path: Path, pq_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip's index unreachable and an empty download cache (sharing the session's upstream mirrors): a command that
    reads a release fails on the index, and one refused at its door leaves the cache's ``dist/`` as it was."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (pq_cache / "git").mkdir(parents=True, exist_ok=True)
    (cache / "git").symlink_to(pq_cache / "git")
    monkeypatch.setenv("PQ_CACHE", str(cache))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", CLOSED)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    return cache


def downloaded(cache: Path) -> list[str]:
    return sorted(
        p.name for folder in ("dist", "unpacked") if (cache / folder).is_dir() for p in (cache / folder).iterdir()
    )


@pytest.fixture
def released(released_030_once: Path, tmp_path: Path) -> Path:
    """`pq adopt vllm-omni==0.30.0 --at BASE_030`: a series holding vllm-omni 0.30.0 on a vllm-ascend commit."""
    return copy_project(released_030_once, tmp_path / "released")


@pytest.fixture(scope="module")
def adopted_032_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vllm-omni 0.32.0rc1 adopted from the registry at BASE_030 (its NPU runners copy the same commit): a series
    holding a release newer than 0.31.0rc1 and 0.30.0.  Copy it, never change it."""
    if corpus_dir() is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    proj = new_project(tmp_path_factory.mktemp("r4-032") / "p")
    pq(proj, "adopt", "vllm-omni==0.32.0rc1", "--at", BASE_030)
    return proj


@pytest.fixture(scope="module")
def on_release_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vllm-omni 0.30.0 adopted at vllm-ascend==0.30.0rc2: a series on a release of vllm-ascend.  Copy it."""
    if corpus_dir() is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    proj = new_project(tmp_path_factory.mktemp("r4-rc2") / "p")
    pq(proj, "adopt", "vllm-omni==0.30.0", "--at", "vllm-ascend==0.30.0rc2")
    return proj


# -- rule 3: vllm-omni, pq sync-gpu and pq merge ----------------------------------------------------------------

HELD_030 = "vllm-omni 0.30.0, the release the series last took in (lineage step 1)"
SYNC = "a sync does not take the series back"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("sync-gpu", "--omni", "0.24.0"), f"vllm-omni 0.24.0 is older than {HELD_030}: {SYNC}"),
        (
            ("sync-gpu", "--omni", "vllm-omni==0.24.0", "--since", "0.22.0"),
            f"vllm-omni 0.24.0 is older than {HELD_030}: {SYNC}",
        ),
        (
            ("sync-gpu", "--omni", "0.24.0", "--backlog", "--apply", "all"),
            f"vllm-omni 0.24.0 is older than {HELD_030}: {SYNC}",
        ),
        (
            ("sync-gpu", "--since", "0.32.0rc1"),
            f"vllm-omni 0.30.0 is older than vllm-omni 0.32.0rc1, the release --since names: {SYNC}",
        ),
        (
            ("merge", "0.31.0rc1", "--since", "vllm-omni==0.32.0rc1"),
            "vllm-omni 0.31.0rc1 is older than vllm-omni 0.32.0rc1, the release --since names: nothing to merge",
        ),
    ],
    ids=["sync-older", "sync-older-since-older", "sync-older-backlog", "sync-since-newer", "merge-since-newer"],
)
def test_an_older_release_is_refused_before_anything_is_downloaded(
    released: Path, offline: Path, args: tuple[str, ...], line: str
) -> None:
    """`pq sync-gpu --omni 0.24.0` on a series of 0.30.0 took the GPU delta backwards and applied, unasked,
    `sync-gpu-*` patches deleting 0.30.0's omni code; a `--since` after the release the delta ends at ran it
    backwards too."""
    assert refused(released, *args) == f"pq: error: {QUEUE}: {line}"
    assert downloaded(offline) == []


@pytest.mark.parametrize(
    "args",
    [("merge", "0.31.0rc1", "--since", "0.30.0"), ("sync-gpu", "--omni", "0.31.0rc1", "--since", "0.30.0")],
    ids=["merge", "sync-gpu"],
)
def test_since_does_not_let_a_command_take_an_older_release(
    adopted_032_once: Path, tmp_path: Path, offline: Path, args: tuple[str, ...]
) -> None:
    """`pq merge 0.31.0rc1 --since 0.30.0` on a series of 0.32.0rc1 took the older release in and moved the pin
    back: the release is compared with the one the series holds, whatever `--since` names."""
    proj = copy_project(adopted_032_once, tmp_path / "p")
    why = "nothing to merge" if args[0] == "merge" else SYNC
    assert refused(proj, *args) == (
        f"pq: error: {QUEUE}: vllm-omni 0.31.0rc1 is older than vllm-omni 0.32.0rc1, the release the series last "
        f"took in (lineage step 1): {why}"
    )
    assert downloaded(offline) == []


def test_a_pin_a_sync_moved_forward_is_held_too(released: Path, offline: Path) -> None:
    """`pq sync-gpu --omni 0.32.0rc1` moves the pin of a series of 0.30.0 to 0.32.0rc1 (the ports make it that
    release's runners; here the pin written as it leaves it): a merge of 0.31.0rc1 would move it back."""
    queue = released / QUEUE
    queue.write_text(queue.read_text().replace('release = "0.30.0"', 'release = "0.32.0rc1"', 1))
    held = "vllm-omni 0.32.0rc1, the release the series holds (its [downstream] release)"
    line = f"pq: error: {QUEUE}: vllm-omni 0.31.0rc1 is older than {held}"
    assert refused(released, "merge", "0.31.0rc1") == f"{line}: nothing to merge"
    assert refused(released, "sync-gpu", "--omni", "0.31.0rc1") == f"{line}: {SYNC}"
    assert downloaded(offline) == []


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        ("vllm==0.31.0", "pq: error: vllm is not vllm-omni, the downstream of the series"),
        ("./y==1/gpu", "pq: error: './y==1/gpu' is neither a release of vllm-omni (X or vllm-omni==X) nor a folder"),
    ],
    ids=["another-package", "no-such-folder"],
)
def test_sync_gpu_reads_only_releases_of_the_downstream(released: Path, offline: Path, spec: str, line: str) -> None:
    """`--omni` and `--since` go through the door `pq merge` has: another package's release is not read (its
    archive was downloaded to find no GPU runners), and a path that is no folder is not a release."""
    assert refused(released, "sync-gpu", "--omni", spec) == line
    assert refused(released, "sync-gpu", "--since", spec) == line
    assert downloaded(offline) == []


def test_a_folder_named_like_a_newer_release_moves_no_pin(released: Path, corpus: Path) -> None:
    """GPU runners read from a folder `vllm-omni==0.40.0` (0.30.0's, copied there) are a folder's: the pin stays at
    the series' release, where it moved to a version no registry has."""
    shutil.copytree(corpus / "vllm-omni-0.30.0" / "gpu", released / "vllm-omni==0.40.0")
    before = state(released)
    out = pq(released, "sync-gpu", "--omni", "vllm-omni==0.40.0").stdout
    assert "downstream:" not in out, out
    assert state(released) == before


# -- rule 3: vllm-ascend, pq refresh ----------------------------------------------------------------------------

OLDER = (
    f"pq: error: {QUEUE}: vllm-ascend 0.25.1rc1 is older than vllm-ascend 0.30.0rc2, the release the series is on: "
    "a refresh does not take the series back (`pq undo` takes one back; to replay the series onto 0.25.1rc1 "
    "deliberately, name its tag or commit: `pq refresh --to v0.25.1rc1`)"
)


def test_refresh_to_an_older_release_is_refused_and_says_how_to_go_back(
    on_release_once: Path, tmp_path: Path, pq_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On vllm-ascend 0.30.0rc2, `--to vllm-ascend==0.25.1rc1` is refused before the index is read; the release's
    tag, as the line says, replays the series onto it (a commit is taken as named: it stops at its conflicts); the
    release the series is on is no older than itself."""
    proj = copy_project(on_release_once, tmp_path / "p")
    with monkeypatch.context() as offline:
        cache = tmp_path / "cache"
        cache.mkdir()
        (cache / "git").symlink_to(pq_cache / "git")
        offline.setenv("PQ_CACHE", str(cache))
        offline.setenv("PIP_CONFIG_FILE", os.devnull)
        offline.setenv("PIP_INDEX_URL", CLOSED)
        for spec in ("vllm-ascend==0.25.1rc1", " vllm_ascend == 0.25.1RC1 "):
            assert refused(proj, "refresh", "--to", spec) == OLDER
        assert downloaded(cache) == []
    stopped = pq(proj, "refresh", "--to", "v0.25.1rc1", "--no-check", check=3)
    assert "stopped at" in stopped.stdout, stopped.stdout
    pq(proj, "abort")
    again = pq(proj, "refresh", "--to", "vllm-ascend==0.30.0rc2", "--no-check").stdout
    assert "refreshed onto vllm-ascend 0.30.0rc2: 16 patches, no conflicts" in again, again


def test_refresh_to_the_newest_release_when_the_index_lags_behind(
    on_release_once: Path, tmp_path: Path, offline: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pq refresh` takes the newest release on the index: an index whose newest is older than the release the
    series is on (a mirror behind) is refused, its archive not downloaded."""
    proj = copy_project(on_release_once, tmp_path / "p")
    archives = {"vllm_ascend-0.25.1rc1-py3-none-any.whl": _wheel("vllm_ascend", "0.25.1rc1", {})}
    _file_index(tmp_path / "index", "vllm-ascend", archives, yanked=set(), bad=set())
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path / 'index' / 'simple'}")
    for args in (("refresh",), ("refresh", "--to", "latest")):
        assert refused(proj, *args) == OLDER
    assert downloaded(offline) == []


# -- a folder's path holding `==` is the folder ------------------------------------------------------------------


def test_adopt_takes_a_folder_whose_path_holds_two_equals_signs(tmp_path: Path, corpus: Path, offline: Path) -> None:
    proj = new_project(tmp_path / "p")
    assert refused(proj, "adopt", "./x==1/npu", "--at", BASE_030) == (
        "pq: error: ./x==1/npu: neither a NAME==VERSION release nor a directory"
    )
    shutil.copytree(corpus / "vllm-omni-0.30.0" / "npu", proj / "x==1" / "npu")
    out = pq(proj, "adopt", "./x==1/npu", "--at", BASE_030).stdout
    assert "wrote 16 patches" in out, out
    assert 'name = "vllm-omni"\nrelease = ""' in (proj / QUEUE).read_text()
    assert downloaded(offline) == []


def test_a_merge_since_such_a_folder_records_no_path(proj: Path, corpus: Path) -> None:  # noqa: F811
    """The series adopted from a folder names its runners with `--since`; a folder is this machine's, so the merge
    step records no `since`, also when its path holds `==` (it recorded `x==1/npu`, which `pq reproduce` then
    read as a release)."""
    shutil.copytree(corpus / "vllm-omni-0.30.0" / "npu", proj / "x==1" / "npu")
    pq(proj, "merge", "0.31.0rc1", "--since", "./x==1/npu")
    queue = (proj / QUEUE).read_text()
    assert 'downstream = "vllm-omni==0.31.0rc1"' in queue
    assert 'since = ""' in queue and "x==1" not in queue


def test_refresh_to_a_folder_whose_path_holds_two_equals_signs(proj: Path) -> None:  # noqa: F811
    """`--to x==1/up` (an existing folder holding vllm_ascend/) is read as that folder, not as release 1/up of x."""
    (proj / "x==1" / "up" / "vllm_ascend").mkdir(parents=True)
    folder = (proj / "x==1" / "up").resolve()
    assert refused(proj, "refresh", "--to", "x==1/up") == (
        f"pq: error: vllm_ascend/worker/model_runner_v1.py: no such file in dir:{folder}"
    )
    assert refused(proj, "refresh", "--to", "vllm-ascend==not-a-version") == (
        "pq: error: 'vllm-ascend==not-a-version' is neither a release NAME==VERSION (VERSION a PEP 440 version) nor "
        "a folder"
    )
