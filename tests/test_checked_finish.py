"""Only a checked result is finished (issue 30, point 4), and the imports follow the resolution (point 5): real git,
the real 0.30.0 series, through the real command line.

A refresh or a `pq continue` whose result `pq check` finds errors in exits 1 with the refresh pending and, for
`pq continue`, nothing written; `--accept-errors` finishes over them and records them in the lineage step and the
report, and `pq reproduce` replays such a step like any other.  The check errors of the clean refresh come from a
project rule (`patches/check-rules.toml`) the tests write; those of 0.30.0 -> 0.30.0rc2 from taking upstream's side
in every conflict region (omni blocks of the previous build gone).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_project, git, pq, push_to_bare, state

from patch_queue.series import fmt

RC2 = "vllm-ascend==0.30.0rc2"
CLEAN_TARGET = "c9e95ba32421"  # 0.30.0's series replays onto it without a conflict (see test_bad_input)
RULE = """[[rule]]
id = "no-del-hidden-states"
kind = "regex"
severity = "error"
pattern = '\\bdel hidden_states\\b'
message = "free hidden_states by rebinding it"
"""
ERROR_LINE = re.compile(
    r"^pq: error: (npu_worker/\w+\.py)(?::(\d+))?: pq check reports (\d+) error\(s\) in the result: "
)


@pytest.fixture(scope="module")
def adopted(released_030_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The series as this repository keeps it: adopted from the registry release (a fresh clone can reproduce it)."""
    proj = copy_project(released_030_once, tmp_path_factory.mktemp("released") / "p")
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "adopt vllm-omni 0.30.0")
    return proj


def with_rule(adopted: Path, dst: Path) -> Path:
    proj = copy_project(adopted, dst)
    (proj / "patches" / "check-rules.toml").write_text(RULE)
    git(proj, "add", "patches/check-rules.toml")
    git(proj, "commit", "-qm", "a project rule")
    return proj


def error_line(stderr: str) -> re.Match[str]:
    lines = stderr.strip().splitlines()
    found = ERROR_LINE.match(lines[-1])
    assert found, stderr
    return found


def lineage(proj: Path) -> list[dict[str, Any]]:
    steps = tomllib.loads((proj / "patches" / "queue.toml").read_text())["lineage"]
    assert isinstance(steps, list)
    return steps


def test_a_clean_refresh_over_check_errors_stays_pending_until_they_are_fixed(adopted: Path, tmp_path: Path) -> None:
    proj = with_rule(adopted, tmp_path / "p")
    (proj / "reports").mkdir()
    original = state(proj)
    reports = ("--report", "reports/r.json", "--markdown", "reports/r.md")
    proc = pq(proj, "refresh", "--to", CLEAN_TARGET, "--no-sources", *reports, check=1)
    found = error_line(proc.stderr)
    runner = proj / found.group(1)
    line = int(found.group(2))
    assert runner.read_text().splitlines()[line - 1].strip() == "del hidden_states"  # the line on disk
    assert found.group(3) == "1" and "the refresh is pending" in proc.stderr
    assert f"{found.group(1)}:{line}: error: [no-del-hidden-states]" in proc.stdout
    data = json.loads((proj / "reports" / "r.json").read_text())
    assert data["pending"] and data["finished"] and not data["conflicts"] and data["accepted_errors"] == []
    assert data["check"]["errors"] == 1
    assert "**Not finished: `pq check` reports 1 error in the result:**" in (proj / "reports" / "r.md").read_text()
    st = pq(proj, "status", check=1).stdout
    assert "refresh in progress onto git " in st and f"{found.group(1)}:{line}: error: [no-del-hidden-states]" in st
    assert "next: pq check found 1 error(s) in the result: fix them in npu_worker/" in st
    pq(proj, "build", check=1)  # the refresh waits: nothing else writes the output folder
    # continue without a fix changes nothing
    pending = state(proj)
    assert pending != original
    again = pq(proj, "continue", check=1)
    assert "nothing written" in error_line(again.stderr).string and state(proj) == pending
    # the maintainer fixes the line on disk: continue takes it into the patch that owns it and finishes
    text = runner.read_text().splitlines(keepends=True)
    text[line - 1] = text[line - 1].replace("del hidden_states", "hidden_states = None")
    runner.write_text("".join(text))
    done = pq(proj, "continue")
    assert re.search(rf"^recorded: {found.group(1)}:{line} \+1 -1 into patches/\d{{4}}-", done.stdout, re.M)
    assert "refreshed onto git " in done.stdout and "pq check: 0 error(s)" in done.stdout
    assert "accepted_errors" not in lineage(proj)[-1] and lineage(proj)[-1]["kind"] == "refresh"
    assert "refresh in progress" not in pq(proj, "status").stdout
    assert "hidden_states = None" in runner.read_text() and "del hidden_states" not in runner.read_text()
    pq(proj, "check", "--no-sources")


def test_abort_of_a_pending_check_puts_everything_back(adopted: Path, tmp_path: Path) -> None:
    proj = with_rule(adopted, tmp_path / "p")
    before = state(proj)
    pq(proj, "refresh", "--to", CLEAN_TARGET, "--no-sources", check=1)
    assert state(proj) != before
    pq(proj, "abort")
    assert state(proj) == before


def test_accept_errors_finishes_records_and_reproduces(adopted: Path, tmp_path: Path) -> None:
    proj = with_rule(adopted, tmp_path / "p")
    (proj / "reports").mkdir()
    reports = ("--report", "reports/r.json", "--markdown", "reports/r.md")
    proc = pq(proj, "refresh", "--to", CLEAN_TARGET, "--no-sources", "--accept-errors", *reports)
    assert "finished over 1 error(s) of pq check (--accept-errors): recorded in the lineage step" in proc.stdout
    step = lineage(proj)[-1]
    assert step["kind"] == "refresh" and len(step["accepted_errors"]) == 1
    (accepted,) = step["accepted_errors"]
    assert re.fullmatch(r"npu_generation_model_runner\.py:\d+: error: \[no-del-hidden-states\] .+", accepted)
    data = json.loads((proj / "reports" / "r.json").read_text())
    assert data["accepted_errors"] == [accepted] and not data["pending"]
    assert "**Finished over 1 error of `pq check`** (`--accept-errors`" in (proj / "reports" / "r.md").read_text()
    assert "the last refresh (lineage step 2) was finished over 1 error(s) of pq check" in pq(proj, "status").stdout
    # a fresh clone reproduces the step (its errors are the series' to fix, not a reason to refuse)
    origin = push_to_bare(proj, "refresh over an accepted error")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    out = pq(clone, "reproduce").stdout
    assert "note: lineage step 2 (`pq refresh`) was finished over 1 error(s) of pq check (--accept-errors)" in out
    for f in sorted((proj / "npu_worker").glob("*.py")):
        assert (clone / "npu_worker" / f.name).read_bytes() == f.read_bytes(), f.name
    # the same refresh again changes nothing: the error it was finished over does not keep it pending, nothing moves
    before = (clone / "patches" / "queue.toml").read_bytes()
    again = pq(clone, "refresh", "--to", CLEAN_TARGET, "--no-sources")
    assert "the result is the series as it stands (nothing changed): its 1 error(s) of pq check" in again.stdout
    assert (clone / "patches" / "queue.toml").read_bytes() == before
    assert git(clone, "status", "--porcelain").strip() == ""


def _take_side(text: str, side: str) -> str:
    """Every diff3 region of ``text`` resolved to ``side`` (``upstream`` or ``patch``)."""
    out: list[str] = []
    mode = None
    for line in text.splitlines(keepends=True):
        if line.startswith("<<<<<<< "):
            mode = "upstream"
        elif line.startswith("||||||| ") and mode == "upstream":
            mode = "base"
        elif line.startswith("=======") and mode == "base":
            mode = "patch"
        elif line.startswith(">>>>>>> ") and mode == "patch":
            mode = None
        elif mode in (None, side):
            out.append(line)
    return "".join(out)


def introduced(proj: Path) -> tuple[list[str], list[str]]:
    """(unused imports the previous build did not have, undefined names) of npu_worker/ (ruff F401, F821)."""
    unused, undefined = [], []
    for f in sorted((proj / "npu_worker").glob("*.py")):
        now = fmt.lint(f.read_text(), ("F401", "F821")) or []
        before = fmt.lint(git(proj, "show", f"refs/pq/previous:{f.name}"), ("F401",)) or []
        unused += [
            f"{f.name}: {x.message}" for x in now if x.code == "F401" and x.message not in {b.message for b in before}
        ]
        undefined += [f"{f.name}: {x.message}" for x in now if x.code == "F821"]
    return unused, undefined


@pytest.fixture(scope="module")
def refreshed_rc2(adopted: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`adopted` after `pq refresh --no-stop --no-sources --to vllm-ascend==0.30.0rc2 --report reports/r.json`
    (exit 3, pending; the report path kept relative to the project), once for the module: tests copy it."""
    proj = copy_project(adopted, tmp_path_factory.mktemp("refreshed-rc2") / "p")
    (proj / "reports").mkdir()
    pq(proj, "refresh", "--no-stop", "--no-sources", "--to", RC2, "--report", "reports/r.json", check=3)
    return proj


@pytest.mark.parametrize("side", ["upstream", "patch"])
def test_rc2_resolved_to_one_side_imports_follow_and_errors_hold_the_continue(
    refreshed_rc2: Path, tmp_path: Path, side: str
) -> None:
    """0.30.0 -> 0.30.0rc2 with every region taken to one side: no unused import the previous build did not have,
    no undefined name; upstream's side loses omni blocks, so `pq continue` first refuses (exit 1, nothing
    written), then finishes with --accept-errors; the import edits are recorded and a fresh clone reproduces
    them."""
    proj = copy_project(refreshed_rc2, tmp_path / "p")  # the module's refresh, with its report in reports/r.json
    added = [f for f in json.loads((proj / "reports" / "r.json").read_text())["flags"] if f["kind"] == "import-added"]
    assert added
    for f in (proj / "npu_worker").glob("*.py"):
        f.write_text(_take_side(f.read_text(), side))
    if side == "upstream":
        before = state(proj)
        proc = pq(proj, "continue", check=1)
        errors = [row for row in proc.stdout.splitlines() if ": error: [" in row]
        assert int(error_line(proc.stderr).group(3)) == len(errors) >= 1
        assert all("[omni-block-missing]" in row for row in errors), errors
        assert state(proj) == before  # nothing written: files, refs and the reports as before
        proc = pq(proj, "continue", "--accept-errors")
        assert [f"npu_worker/{e}" for e in lineage(proj)[-1]["accepted_errors"]] == errors
    else:
        proc = pq(proj, "continue")
        assert "accepted_errors" not in lineage(proj)[-1]
    assert introduced(proj) == ([], [])
    data = json.loads((proj / "reports" / "r.json").read_text())
    removed = [f for f in data["flags"] if f["kind"] == "import-removed"]
    assert removed and all(
        f"review: npu_worker/{f['file']}:{f['line']} import-removed " in proc.stdout for f in removed
    )
    # the import-added flags that stay point at their statement as it is
    for f in data["flags"]:
        if f["kind"] in ("import-added", "import-removed"):
            lines = (proj / "npu_worker" / f["file"]).read_text().splitlines(keepends=True)
            assert "".join(lines[f["line"] - 1 :][: f["resolution"].count("\n")]) == f["resolution"], f
    assert {f["patch"] for f in removed} <= {f["patch"] for f in added}  # into the patches that own the lines
    # the import edits are recorded edits: a fresh clone with refs/pq/resolutions reproduces them byte for byte
    origin = push_to_bare(proj, f"refresh, resolved to the {side} side")
    git(proj, "push", "-q", str(origin), "refs/pq/resolutions")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
    pq(clone, "reproduce")
    for f in sorted((proj / "npu_worker").glob("*.py")):
        assert (clone / "npu_worker" / f.name).read_bytes() == f.read_bytes(), f.name
