"""A pending refresh survives every other command and a `git gc`: its refs and state are nobody else's to move."""

from __future__ import annotations

from pathlib import Path

from conftest import copy_project, git, pq, state
from test_end_to_end import _take_patch_side

# every command a maintainer may type between `pq refresh` and `pq continue` / `pq abort`, and the exit codes
# allowed: read-only ones run, the others refuse in one line
BETWEEN = [
    (("status",), (3,)),
    (("series",), (0,)),
    (("blocks",), (0,)),
    (("check", "--no-sources"), (0, 1)),
    (("build",), (1,)),
    (("build", "--wheel"), (1,)),
    (("push",), (1,)),
    (("pop",), (1,)),
    (("new", "x"), (1,)),
    (("record",), (1,)),
    (("accept",), (1,)),
    (("reproduce",), (1,)),
    (("refresh",), (1,)),
    (("sync-gpu",), (1,)),
]


def _refresh_refs(proj: Path) -> str:
    return git(proj, "for-each-ref", "--format=%(refname) %(objectname)", "refs/pq/")


def test_every_command_between_refresh_and_continue_leaves_the_refresh_alone(
    adopted_030: Path, refreshed_030: Path, tmp_path: Path
) -> None:
    before_refresh = state(adopted_030)
    proj = refreshed_030  # pq refresh --no-stop onto vllm-ascend 0.30.0rc2, pending
    refs = _refresh_refs(proj)
    assert "refs/pq/refresh/top" in refs
    pending = (proj / ".git" / "pq" / "refresh.json").read_bytes()
    for args, codes in BETWEEN:
        proc = pq(proj, *args, check=None)
        assert proc.returncode in codes, (args, proc.returncode, proc.stdout[-500:], proc.stderr[-500:])
        assert "Traceback" not in proc.stdout + proc.stderr, args
        if proc.returncode == 1 and args[0] not in ("check",):
            assert len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
        assert _refresh_refs(proj) == refs, args
        assert (proj / ".git" / "pq" / "refresh.json").read_bytes() == pending, args
    git(proj, "gc", "-q", "--prune=now")
    aborted = copy_project(proj, tmp_path / "aborted")
    pq(aborted, "abort")
    assert state(aborted)["refs"] == before_refresh["refs"]
    for path in sorted((proj / "npu_worker").glob("*.py")):
        path.write_text(_take_patch_side(path.read_text()))
    proc = pq(proj, "continue", check=None)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-800:]
    assert not (proj / ".git" / "pq" / "refresh.json").exists()
    assert "refs/pq/refresh/" not in _refresh_refs(proj)
