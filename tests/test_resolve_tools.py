"""`pq resolve SIDE FILE:LINE` for one conflict region and `pq mergetool` with the user's own merge tool
(a scripted tool configured the way git documents it, real git, no mocks), on the real 0.30.0rc2 refresh."""

from __future__ import annotations

import ast
import json
import re
import stat
from pathlib import Path

import pytest
from conftest import copy_project, git, pq

from patch_queue.merge import markers
from patch_queue.series import fmt

RC2 = "vllm-ascend==0.30.0rc2"
CONFLICT = re.compile(r"^conflict: (npu_worker/\w+\.py):(\d+) ", re.MULTILINE)


@pytest.fixture
def reported(reported_030_once: tuple[Path, str]) -> Path:
    """The session's refresh onto 0.30.0rc2 with --no-stop and its reports (reports/refresh.json), pending: tests
    copy it."""
    return reported_030_once[0]


def test_resolve_one_region_by_side(reported: Path, tmp_path: Path) -> None:
    proj = copy_project(reported, tmp_path / "p")
    report = json.loads((proj / "reports" / "refresh.json").read_text())
    first = next(c for c in report["conflicts"] if not c["links"])  # a region that goes with no other
    path = proj / "npu_worker" / first["file"]
    before = path.read_text()
    region = markers.region_at(before, first["line"])
    assert region is not None and region.first == first["line"]
    # a line inside the region (not only its marker) names it; the patch's side replaces it, nothing else changes
    done = pq(proj, "resolve", "--patch", f"npu_worker/{first['file']}:{first['line'] + 1}")  # the old name works
    assert done.stderr == "pq: note: `resolve --patch` is deprecated: say --keep-patch (or --theirs)\n", done.stderr
    out = done.stdout
    assert out.startswith(f"resolved npu_worker/{first['file']}:{region.first}-{region.last} with the patch side")
    assert path.read_text() == markers.resolve(before, region, list(region.patch))
    # no region there any more: one line, exit 1, nothing written
    after = path.read_text()
    bad = pq(proj, "resolve", "--keep-upstream", f"npu_worker/{first['file']}:{first['line']}", check=1)
    assert bad.stderr == f"pq: error: no conflict region at npu_worker/{first['file']}:{first['line']}\n"
    assert path.read_text() == after
    assert pq(proj, "resolve", "--ours", "--keep-patch", "x.py:1", check=1).stderr.count("\n") == 1
    # the lines `pq status` prints now are the regions' lines on disk: resolve one there, both sides
    status = pq(proj, "status", check=3).stdout
    where, line = CONFLICT.findall(status)[-1]
    text = (proj / where).read_text()
    region = markers.region_at(text, int(line))
    assert region is not None and region.first == int(line)
    pq(proj, "resolve", "--both", f"{where}:{line}")
    assert (proj / where).read_text() == markers.resolve(text, region, [*region.upstream, *region.patch])
    assert pq(proj, "status", check=3).stdout.count("conflict: ") == len(report["conflicts"]) - 2


def _undefined(folder: Path) -> list[str]:
    return [
        f"{p.name}:{x.line}:{x.name}"
        for p in sorted(folder.glob("*.py"))
        for x in fmt.lint(p.read_text(), ("F821",)) or []
    ]


def test_regions_that_go_together_are_resolved_together(reported: Path, tmp_path: Path) -> None:
    """Regions of one patch's merge where one binds a name on one side only and another reads it (or where each
    may make one call) go together: `pq resolve --upstream|--patch` takes the same side in each and says where
    they are; `--alone` takes only the one.  Every conflict resolved so, the two sides taken in turn, leaves no
    undefined name, whichever side comes first (taking the sides region by region does not)."""
    proj = copy_project(reported, tmp_path / "p")
    conflicts = json.loads((proj / "reports" / "refresh.json").read_text())["conflicts"]
    first = next(c for c in conflicts if c["links"])
    partners = [
        c
        for c in conflicts
        if c is not first
        and (c["patch"], c["file"]) == (first["patch"], first["file"])
        and set(c["links"]) & set(first["links"])
    ]
    assert partners
    where = f"npu_worker/{first['file']}:{first['line']}"
    alone = copy_project(proj, tmp_path / "alone")
    assert "also resolved" not in pq(alone, "resolve", "--keep-upstream", "--alone", where).stdout
    assert pq(alone, "status", check=3).stdout.count("conflict: ") == len(conflicts) - 1
    out = pq(proj, "resolve", "--keep-upstream", where).stdout.splitlines()
    assert out[1].startswith(f"also resolved with the upstream side, as they go with it: npu_worker/{first['file']}:")
    assert pq(proj, "status", check=3).stdout.count("conflict: ") <= len(conflicts) - 1 - len(partners)
    for start, project in ((1, proj), (0, copy_project(proj, tmp_path / "q"))):
        side, steps = start, 1
        while found := CONFLICT.findall(pq(project, "status", check=None).stdout):
            pq(project, "resolve", ("--keep-upstream", "--keep-patch")[side % 2], ":".join(found[0]))
            side, steps = side + 1, steps + 1
        assert steps < len(conflicts)
        assert _undefined(project / "npu_worker") == []
    # region by region, upstream and patch in turn from the first: a name bound on one side only is read unbound
    one = copy_project(alone, tmp_path / "one")
    side = 1
    while found := CONFLICT.findall(pq(one, "status", check=None).stdout):
        pq(one, "resolve", ("--keep-upstream", "--keep-patch")[side % 2], "--alone", ":".join(found[0]))
        side += 1
    assert _undefined(one / "npu_worker") != []


def test_resolve_by_the_suggestion(adopted_030: Path, tmp_path: Path) -> None:
    """Upstream renamed `scheduler_output` in `NPUModelRunner.execute_model` (the real pinned runner, renamed
    here): where the omni patch changed those lines, the suggestion is the patch side renamed, written only
    when asked for."""
    proj = copy_project(adopted_030, tmp_path / "p")
    runner = "vllm_ascend/worker/model_runner_v1.py"
    text = git(proj, "show", f"refs/pq/base:.pq-upstream/{runner}")
    method = next(
        f
        for c in ast.parse(text).body
        if isinstance(c, ast.ClassDef) and c.name == "NPUModelRunner"
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "execute_model"
    )
    lines = text.splitlines(keepends=True)
    renamed = re.sub(r"\bscheduler_output\b", "sched_out", "".join(lines[method.lineno - 1 : method.end_lineno]))
    folder = tmp_path / "upstream"
    (folder / runner).parent.mkdir(parents=True)
    (folder / runner).write_text("".join(lines[: method.lineno - 1]) + renamed + "".join(lines[method.end_lineno :]))
    out = pq(proj, "refresh", "--no-stop", "--to", str(folder), check=3).stdout
    tips = re.findall(r"suggestion: upstream only renamed .*: `pq resolve --suggested (npu_worker/\w+\.py):(\d+)`", out)
    assert tips, out
    where, line = tips[0]
    before = (proj / where).read_text()
    region = markers.region_at(before, int(line))
    assert region is not None
    conflicts = pq(proj, "status", check=3).stdout.count("conflict: ")
    pq(proj, "resolve", "--suggested", f"{where}:{line}")
    patch_side = re.sub(r"\bscheduler_output\b", "sched_out", "".join(region.patch))
    assert (proj / where).read_text() == markers.resolve(before, region, patch_side.splitlines(keepends=True))
    assert pq(proj, "status", check=3).stdout.count("conflict: ") == conflicts - 1


def test_mergetool_runs_the_configured_tool(reported: Path, tmp_path: Path) -> None:
    proj = copy_project(reported, tmp_path / "p")
    err = pq(proj, "mergetool", check=1).stderr
    assert err.count("\n") == 1 and "git config merge.tool" in err
    tool = tmp_path / "take-remote.sh"
    log = tmp_path / "tool.log"
    tool.write_text(f'#!/bin/sh\necho "$1|$2|$3|$4" >> {log}\ncp "$3" "$4"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    git(proj, "config", "merge.tool", "scripted")
    git(proj, "config", "mergetool.scripted.cmd", f'{tool} "$BASE" "$LOCAL" "$REMOTE" "$MERGED"')
    git(proj, "config", "mergetool.scripted.trustExitCode", "true")
    work = proj / "npu_worker"
    conflicted = {f.name: f.read_text() for f in sorted(work.glob("*.py")) if markers.regions(f.read_text())}
    assert len(conflicted) == 3
    out = pq(proj, "mergetool").stdout
    assert all(f"npu_worker/{name}: resolved" in out for name in conflicted), out
    calls = log.read_text().splitlines()
    assert len(calls) == len(conflicted)
    for name, text in conflicted.items():
        # REMOTE is the patch's side of every region, and the tool's answer is what npu_worker/ holds now
        assert (work / name).read_text() == markers.whole_side(text, "patch")
        base, local, remote, merged = next(c for c in calls if c.endswith(name)).split("|")
        assert "_BASE_" in base and "_LOCAL_" in local and "_REMOTE_" in remote and merged == name
    assert not list(work.glob("*.orig")) and "UU" not in git(proj, "status", "--porcelain")
    pq(proj, "continue")


SUGGESTION = re.compile(r"^  suggestion: .*: `pq resolve --suggested (\S+)`$", re.MULTILINE)


def test_every_suggestion_where_the_maintainer_reads(reported_032_once: tuple[Path, str], tmp_path: Path) -> None:
    """This repository's series onto 0.30.0rc2 (issue 48): the refresh prints under each region the suggestion `pq
    status` shows (the two of the mamba copy call, which need the new upstream module, too); `pq resolve
    --suggested` says what it wrote, a carried resolution naming where it comes from; `scheduler_output`, a
    parameter every statement of execute_model reads, links no region to another."""
    proj = copy_project(reported_032_once[0], tmp_path / "p")
    printed = SUGGESTION.findall(reported_032_once[1])
    shown = SUGGESTION.findall(pq(proj, "status", check=3).stdout)
    assert printed == shown, (printed, shown)
    assert {
        "npu_worker/npu_ar_model_runner.py:814",
        "npu_worker/npu_generation_model_runner.py:450",
        "npu_worker/npu_model_runner.py:763",  # below the `_update_states` call pq merges (merged-tokens)
    } <= set(printed)

    said = pq(proj, "resolve", "--suggested", "npu_worker/npu_ar_model_runner.py:814").stdout
    assert said.startswith(
        "resolved npu_worker/npu_ar_model_runner.py:814-820 with the suggestion, upstream's side (1"
    ), said
    said = pq(proj, "resolve", "--suggested", "npu_worker/npu_model_runner.py:763").stdout
    assert "with the suggestion, the patch's side, indented into upstream's wrapper (" in said, said

    # the maintainer writes the AR runner's first region by hand (omni's return type, upstream's timing start):
    # the generation runner's copy of it is suggested from there, and says so
    ar = proj / "npu_worker" / "npu_ar_model_runner.py"
    text = ar.read_text(encoding="utf-8")
    region = markers.region_at(text, 525)
    assert region is not None and region.first == 525
    ar.write_text(markers.resolve(text, region, [region.patch[0], *region.upstream[1:]]), encoding="utf-8")
    out = pq(proj, "status", check=3).stdout
    assert "`pq resolve --suggested npu_worker/npu_generation_model_runner.py:186`" in out, out
    said = pq(proj, "resolve", "--suggested", "npu_worker/npu_generation_model_runner.py:186").stdout
    assert re.match(
        r"resolved \S+:186-\d+ with the suggestion, the resolution of npu_worker/npu_ar_model_runner.py:525, "
        r"(re-indented|merged) \(7 line\(s\)\)",
        said,
    ), said

    report = json.loads((proj / "reports" / "refresh.json").read_text())
    linked = {label for c in report["conflicts"] for label in c["links"]}
    assert "name:scheduler_output" not in linked and "name:execution_start_time" in linked, linked
    (pp_block,) = [c for c in report["conflicts"] if c["file"] == "npu_generation_model_runner.py" and c["line"] == 232]
    assert pp_block["links"] == [] and "goes with" not in pp_block["message"], pp_block


def test_a_resolution_travels_to_the_other_copy_in_a_later_patch(seeded_once: Path, tmp_path: Path) -> None:
    """Issue 48, on this repository's series onto vllm-ascend 0.30.0rc2, patch by patch: the AR runner's
    `execute_model` timing start resolved by hand (omni's return type, then upstream's timing lines) in 0005 and
    recorded by `pq continue`; the generation runner's copy, which only 0009 carries, gets that resolution as its
    suggestion once `pq continue` reaches it, saying where it comes from, and `pq resolve --suggested` writes it."""
    proj = copy_project(seeded_once, tmp_path / "p")
    pq(proj, "refresh", "--to", "vllm-ascend==0.30.0rc2", check=3)
    ar = proj / "npu_worker" / "npu_ar_model_runner.py"
    text = ar.read_text(encoding="utf-8")
    first = next(r for r in markers.regions(text) if "_start_profiling_chunk_timing(" in "".join(r.upstream))
    ar.write_text(markers.resolve(text, first, [first.patch[0], *first.upstream[1:]]), encoding="utf-8")
    for _step in range(3):  # every other region to the patch's side, blindly, up to the generation runner's 0009
        for f in sorted((proj / "npu_worker").glob("*.py")):
            while regions := markers.regions(f.read_text(encoding="utf-8")):
                pq(proj, "resolve", "--keep-patch", "--alone", f"{f}:{regions[0].first}")
        out = pq(proj, "continue", check=3).stdout
        if "npu_generation_model_runner.py" in out:
            break
    gen = proj / "npu_worker" / "npu_generation_model_runner.py"
    before = gen.read_text(encoding="utf-8")
    second = next(r for r in markers.regions(before) if "_start_profiling_chunk_timing(" in "".join(r.upstream))
    where = f"npu_worker/npu_generation_model_runner.py:{second.first}"
    said = re.search(
        rf"  suggestion: (.*): `pq resolve --suggested {re.escape(where)}`", pq(proj, "status", check=3).stdout
    )
    assert said is not None and "npu_worker/npu_ar_model_runner.py:" in said[1], said
    pq(proj, "resolve", "--suggested", where)
    assert gen.read_text(encoding="utf-8") == markers.resolve(before, second, [second.patch[0], *second.upstream[1:]])
