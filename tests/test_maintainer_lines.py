"""A scripted maintainer on the real 0.30.0 -> 0.30.0rc2 refresh: every path:line pq prints or reports
points at the right line of the file as it is on disk at that moment, after the refresh and after
each `pq continue` (which rewrites the refresh's reports)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import copy_project, pq
from test_end_to_end import _take_patch_side

from patch_queue.merge.conflict import Conflict
from patch_queue.outputs.report_parts import to_read as to_read_flag

RC2 = "vllm-ascend==0.30.0rc2"
WHERE = re.compile(r"npu_worker/(\w+\.py):(\d+)")


def check_lines(proj: Path, stdout: str) -> tuple[int, int]:
    """Every path:line of ``stdout``, the JSON and the Markdown report against the files on disk;
    (conflicts, flags) of the report."""
    report = json.loads((proj / "reports" / "refresh.json").read_text())
    out = proj / report["out"]

    def lines(name: str) -> list[str]:
        return (out / name).read_text().splitlines(keepends=True)

    for c in report["conflicts"]:
        assert lines(c["file"])[c["line"] - 1].startswith("<<<<<<< "), c
    flagged = set()
    for f in report["flags"]:
        flagged.add((f["file"], f["line"], f["kind"]))
        text = lines(f["file"])
        assert 0 < f["line"] <= len(text) + 1, f
        if f["kind"] != "reformatted":  # the file as a whole: line 1
            assert "".join(text[f["line"] - 1 : f["line"] - 1 + f["resolution"].count("\n")]) == f["resolution"], f
    for e in report["conflicts"] + report["flags"]:
        if e["anchor"] is not None and e["anchor"]["line"] is not None:  # the omni block's opening fence
            assert "Omni-new" in lines(e["file"])[e["anchor"]["line"] - 1], e
    entries = {(e["file"], e["line"]) for e in report["conflicts"] + report["flags"]}
    markdown = (proj / "reports" / "refresh.md").read_text()
    # a suggestion carried from another copy names where that copy's region was resolved: a line of resolved code
    resolved_at = {
        (f, int(n)) for f, n in re.findall(r"same upstream change[^\n]*? at npu_worker/(\w+\.py):(\d+)", markdown)
    }
    for file, line in resolved_at:
        assert not lines(file)[line - 1].startswith(("<<<<<<< ", "||||||| ", "=======", ">>>>>>> ")), (file, line)
    for file, line in WHERE.findall(markdown):
        at = (file, int(line))
        assert at in entries or at in resolved_at or "Omni-new" in lines(file)[int(line) - 1], (file, line)
    for row in stdout.splitlines():
        m = WHERE.search(row)
        if m is None:
            continue
        file, line = m.group(1), int(m.group(2))
        assert 0 < line <= len(lines(file)), row
        if row.startswith("conflict: "):
            assert lines(file)[line - 1].startswith("<<<<<<< "), row
        elif row.startswith("review: "):
            assert (file, line, row.split()[2]) in flagged, row
    return len(report["conflicts"]), len(report["flags"])


def test_every_line_is_right_after_refresh_and_each_continue(adopted_030: Path, tmp_path: Path) -> None:
    proj = copy_project(adopted_030, tmp_path / "p")
    (proj / "reports").mkdir()
    reports = ("--report", "reports/refresh.json", "--markdown", "reports/refresh.md")
    proc = pq(proj, "refresh", "--to", RC2, *reports, "-v", check=3)
    assert proc.stdout.index("conflict: ") < proc.stdout.index("review: ")
    # regions that bind and read one name say so where the maintainer reads them
    assert re.search(r"^  why: .*goes with the other regions that name `\w+`.*: take the same side", proc.stdout, re.M)
    seen = [check_lines(proj, proc.stdout)]
    assert seen[0][0] > 0
    st = pq(proj, "status", "-v", check=3).stdout
    check_lines(proj, st)
    # each continue (resolving by the patch's side) rewrites the reports, the lines as they are then; at the
    # first stop with two regions or more, the maintainer resolves one first: status follows the lines on disk
    work = proj / "npu_worker"
    partial = False
    code = 3
    while code == 3:
        if not partial and seen[-1][0] >= 2:
            partial = True
            marked = next(f for f in sorted(work.glob("*.py")) if "<<<<<<< " in f.read_text())
            text = marked.read_text()
            first = text.index("<<<<<<< ")
            end = text.index("\n", text.index(">>>>>>> ", first)) + 1
            marked.write_text(text[:first] + _take_patch_side(text[first:end]) + text[end:])
            st = pq(proj, "status", "-v", check=3).stdout
            left = re.findall(r"^conflict: npu_worker/(\w+\.py):(\d+)", st, re.MULTILINE)
            assert len(left) == seen[-1][0] - 1 and f"1 of {seen[-1][0]} conflict region(s) resolved on disk" in st
            for file, line in left:
                assert (work / file).read_text().splitlines()[int(line) - 1].startswith("<<<<<<< "), st
            flags = re.findall(r"^review: npu_worker/(\w+\.py):(\d+) ", st, re.MULTILINE)
            assert len(flags) == seen[-1][1]
            assert all(0 < int(n) <= len((work / f).read_text().splitlines()) for f, n in flags)
        for f in work.glob("*.py"):
            if "<<<<<<< " in f.read_text():
                f.write_text(_take_patch_side(f.read_text()))
        proc = pq(proj, "continue", "-v", check=None)
        code = proc.returncode
        assert code in (0, 3), proc.stderr
        seen.append(check_lines(proj, proc.stdout))
    assert partial, seen
    assert len(seen) >= 4 and seen[-1][0] == 0
    # the patch headers name the new upstream
    headers = [line for f in sorted((proj / "patches").glob("*.patch")) for line in f.read_text().splitlines()]
    named = [line for line in headers if line.startswith("Upstream: ")]
    assert len(named) == 9 and all(line.endswith(" at vllm-ascend 0.30.0rc2.") for line in named), named


def test_no_stop_then_continue_lines(reported_030_once: tuple[Path, str], tmp_path: Path) -> None:
    """The flags of a --no-stop refresh, after one `pq continue`, point into the resolved files (a copy of the
    session's `pq refresh --no-stop --report reports/refresh.json --markdown reports/refresh.md`)."""
    proj, stdout = copy_project(reported_030_once[0], tmp_path / "p"), reported_030_once[1]
    # the terminal lists the flags to read, each with its why, and counts the others
    report = json.loads((proj / "reports" / "refresh.json").read_text())
    to_read = [f for f in report["flags"] if to_read_flag(Conflict.from_json(f, "flag", conflict=False))]
    listed = re.findall(r"^review: npu_worker/(\w+\.py):(\d+) ([\w-]+) ", stdout, re.MULTILINE)
    assert listed == [(f["file"], str(f["line"]), f["kind"]) for f in to_read] and to_read
    rows = stdout.splitlines()
    assert all(rows[i + 1].startswith("  why: ") for i, row in enumerate(rows) if row.startswith("review: "))
    assert f"{len(to_read)} review flag(s) to read (listed above): " in stdout
    others = re.search(r"^(\d+) other review flag\(s\): .*\b\d+ near-block", stdout, re.MULTILINE)
    assert others and int(others.group(1)) == len(report["flags"]) - len(to_read)
    only = pq(proj, "status", "--flags", "near-block,kept-replacement", check=3).stdout
    assert {r.split()[2] for r in only.splitlines() if r.startswith("review: ")} == {"near-block", "kept-replacement"}
    for f in (proj / "npu_worker").glob("*.py"):
        f.write_text(_take_patch_side(f.read_text()))
    proc = pq(proj, "continue", "-v")
    assert check_lines(proj, proc.stdout)[0] == 0
