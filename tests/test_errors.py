"""Bad input: one clear line naming the file (and line), a non-zero exit, and nothing changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_project, git, pq, state


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("pq: ")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def first_patch(proj: Path) -> Path:
    name = next(n for n in (proj / "patches" / "series").read_text().split() if n.endswith(".patch"))
    return proj / "patches" / name


@pytest.fixture
def proj(adopted_030: Path, tmp_path: Path) -> Path:
    return copy_project(adopted_030, tmp_path / "p")


def test_truncated_patch(proj: Path) -> None:
    victim = proj / "patches" / "0005-npu-ar-model-runner-execute-model.patch"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    before = state(proj)
    proc = pq(proj, "build", check=1)
    line = one_error_line(proc)
    assert line.startswith("pq: error: patches/0005-npu-ar-model-runner-execute-model.patch:"), line
    assert state(proj) == before


def test_patch_that_no_longer_applies(proj: Path) -> None:
    victim = proj / "patches" / "0005-npu-ar-model-runner-execute-model.patch"
    text = victim.read_text()
    # change a context line of the first hunk: the patch is well-formed but does not apply
    head, _, rest = text.partition("\n@@ ")
    hunk_header, _, body = rest.partition("\n")
    lines = body.split("\n")
    idx = next(i for i, x in enumerate(lines) if x.startswith(" ") and x.strip())
    lines[idx] = " " + lines[idx][1:] + "  # changed"
    victim.write_text(head + "\n@@ " + hunk_header + "\n" + "\n".join(lines))
    before = state(proj)
    line = one_error_line(pq(proj, "build", check=1))
    assert "patches/0005-npu-ar-model-runner-execute-model.patch:" in line and "does not apply" in line, line
    assert state(proj) == before


@pytest.mark.parametrize(
    ("series", "message"),
    [
        ("0001-init.patch\nmissing.patch\n", "patches/series:2: names missing.patch, which does not exist"),
        ("0001-init.patch\n0001-init.patch\n", "patches/series:2: 0001-init.patch is listed twice (first on line 1)"),
        ("../outside.patch\n", "patches/series:1: '../outside.patch' is not a patch file name inside patches/"),
    ],
)
def test_bad_series(proj: Path, series: str, message: str) -> None:
    (proj / "patches" / "series").write_text(series)
    before = state(proj)
    line = one_error_line(pq(proj, "build", check=1))
    assert line == "pq: error: " + message, line
    assert state(proj) == before


def test_patch_touching_a_path_outside_the_modules(proj: Path) -> None:
    victim = first_patch(proj)
    victim.write_text(
        victim.read_text().replace("b/__init__.py", "b/../escape.py").replace("a/__init__.py", "a/../escape.py")
    )
    before = state(proj)
    line = one_error_line(pq(proj, "build", check=1))
    assert f"patches/{victim.name}" in line, line
    assert state(proj) == before


def test_unknown_release(proj: Path) -> None:
    before = state(proj)
    line = one_error_line(pq(proj, "refresh", "--to", "vllm-ascend==9.9.9", check=1))
    assert "unknown release vllm-ascend==9.9.9" in line, line
    assert state(proj) == before


def test_unknown_upstream_ref(proj: Path) -> None:
    before = state(proj)
    line = one_error_line(pq(proj, "refresh", "--to", "no-such-branch-xyz", check=1))
    assert "no-such-branch-xyz" in line, line
    assert state(proj) == before


def test_sha256_mismatch_of_vendored_file(proj: Path) -> None:
    queue = proj / "patches" / "queue.toml"
    text = queue.read_text()
    digest = text.split('"vllm_ascend/worker/model_runner_v1.py" = "', 1)[1][:64]
    queue.write_text(text.replace(digest, "0" * 64))
    git(proj, "update-ref", "-d", "refs/pq/base")
    before = state(proj)
    line = one_error_line(pq(proj, "build", check=1))
    assert "sha256 mismatch for vendored file vllm_ascend/worker/model_runner_v1.py" in line, line
    assert state(proj) == before


def test_corrupt_and_newer_queue(proj: Path) -> None:
    queue = proj / "patches" / "queue.toml"
    good = queue.read_text()
    queue.write_text(good.replace("[downstream]", "[downstream"))
    line = one_error_line(pq(proj, "build", check=1))
    assert "patches/queue.toml:" in line and "not valid TOML" in line, line
    queue.write_text(good.replace("format = 3", "format = 5"))
    line = one_error_line(pq(proj, "build", check=1))
    assert "format 5 is newer than this pq understands" in line, line


def test_not_a_git_repository(tmp_path: Path) -> None:
    bare = tmp_path / "plain"
    bare.mkdir()
    line = one_error_line(pq(bare, "build", check=1))
    assert "not inside a git repository" in line, line


def test_hand_edits_in_output_block_refresh(proj: Path) -> None:
    target = proj / "npu_worker" / "npu_model_runner.py"
    target.write_text(target.read_text() + "\n# a maintainer's unrecorded edit\n")
    before = state(proj)
    line = one_error_line(pq(proj, "refresh", "--to", "vllm-ascend==0.30.0rc2", check=1))
    assert "npu_worker/npu_model_runner.py: has edits no patch holds (+2 -0 lines)" in line, line
    assert state(proj) == before


def test_lock_held_by_a_live_process_and_stale_lock(proj: Path) -> None:
    lock = proj / ".git" / "pq" / "lock"
    lock.parent.mkdir(exist_ok=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(json.dumps({"pid": sleeper.pid, "command": "refresh"}))
        line = one_error_line(pq(proj, "build", check=1))
        assert f"another pq command (refresh, pid {sleeper.pid}) is running" in line, line
    finally:
        sleeper.kill()
        sleeper.wait()
    pq(proj, "build")  # the lock's process is gone: taken over
    assert not lock.exists()
    assert os.path.isdir(proj / "npu_worker")


def test_record_puts_edits_into_the_patch_that_owns_the_lines(proj: Path) -> None:
    target = proj / "npu_worker" / "npu_model_runner.py"
    target.write_text(target.read_text() + "\n# recorded edit\n")
    out = pq(proj, "record").stdout
    names = (proj / "patches" / "series").read_text().split()
    owner = "0013-npu-model-runner.patch"  # the module's skeleton writes its last lines, not the top patch
    assert (
        f"recorded: npu_worker/npu_model_runner.py:{len(target.read_text().splitlines()) - 1} +2 -0 into "
        f"patches/{owner}" in out
    ), out
    assert "+# recorded edit" in (proj / "patches" / owner).read_text()
    assert "# recorded edit" not in (proj / "patches" / names[-1]).read_text()
    assert "unrecorded" not in pq(proj, "status").stdout
    pq(proj, "pop")
    assert target.read_text().endswith("# recorded edit\n")  # 0013 is still applied
    pq(proj, "push")
    assert target.read_text().endswith("# recorded edit\n")
    target.write_text(target.read_text() + "# forced into the top patch\n")
    out = pq(proj, "record", "--patch", names[-1]).stdout
    assert f"into patches/{names[-1]}" in out, out
    assert "+# forced into the top patch" in (proj / "patches" / names[-1]).read_text()
    assert "created patches/0017-to-fill.patch" in pq(proj, "new", "to-fill").stdout  # no edits: an empty patch
    pq(proj, "delete", "to-fill")
    target.write_text(target.read_text() + "# another edit\n")
    out = pq(proj, "new", "--record", "extra-fix", "-m", "npu: an extra fix").stdout
    assert "extra-fix.patch" in out
    series = pq(proj, "series").stdout
    assert (
        series.splitlines()[-1].startswith("> ") and "npu: an extra fix" in series
    )  # the top patch, as StGit marks it
