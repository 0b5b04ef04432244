"""End to end on the real corpus: adopt, build, refresh, continue, abort, through the real command line."""

from __future__ import annotations

import ast
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from conftest import BASE_030, RELEASES, copy_project, git, new_project, pq, state

from patch_queue.checks import upstream_kept
from patch_queue.merge import checked
from patch_queue.series.queue import QueueDir


def omni_lines(text: str) -> Counter[str]:
    return Counter(line for line in text.splitlines() if "Omni-new" in line)


def lost_statements(proj: Path, old_base: str) -> list[upstream_kept.Lost]:
    """The statements the refresh's new upstream adds to a carried symbol that its output lacks on both sides of
    every conflict region (``old_base``: the stack's base commit before the refresh)."""
    pending = git(proj, "for-each-ref", "refs/pq/refresh/base").strip()
    new_base = "refs/pq/refresh/base" if pending else "refs/pq/base"
    lost: list[upstream_kept.Lost] = []
    for m in QueueDir(proj / "patches").load_queue().modules:
        if m.upstream:
            old, new = (git(proj, "show", f"{ref}:.pq-upstream/{m.upstream}") for ref in (old_base, new_base))
            out = (proj / "npu_worker" / m.path).read_text()
            lost += upstream_kept.lost(old, new, out, m.symbols, file=m.path)
    return lost


@pytest.mark.parametrize("release", RELEASES)
def test_round_trip(corpus: Path, tmp_path: Path, release: str) -> None:
    """adopt then build reproduces the release's npu/ files byte for byte, with the base found by search."""
    proj = new_project(tmp_path / "p")
    npu = corpus / f"vllm-omni-{release}" / "npu"
    out = pq(proj, "adopt", str(npu)).stdout
    assert re.search(r"upstream base: git [0-9a-f]{12} \(public [0-9a-f]{12}\).*score \d+/\d+", out), out
    series = [s for s in (proj / "patches" / "series").read_text().split() if s.endswith(".patch")]
    assert len(series) >= len(list(npu.glob("*.py")))
    # a fresh build from the exported patch files alone (refs dropped) gives the same bytes
    for ref in git(proj, "for-each-ref", "--format=%(refname)", "refs/pq/").split():
        git(proj, "update-ref", "-d", ref)
    shutil.rmtree(proj / "npu_worker")
    pq(proj, "build")
    for f in sorted(npu.glob("*.py")):
        assert (proj / "npu_worker" / f.name).read_bytes() == f.read_bytes(), f.name
    assert sorted(p.name for p in (proj / "npu_worker").glob("*.py")) == sorted(p.name for p in npu.glob("*.py"))
    # and the stack is visible to git
    log = git(proj, "log", "--format=%s", "refs/pq/top")
    assert len(log.splitlines()) == len(series) + 1  # the patches and the base


def test_adopt_from_registry_matches_directory(adopted_030: Path, released_030_once: Path) -> None:
    """The registry wheel of vllm-omni 0.30.0 gives the same series, byte for byte, as its unpacked files (the
    session's `pq adopt vllm-omni==0.30.0 --at BASE_030` in a new project, only read)."""
    proj = released_030_once
    names = (adopted_030 / "patches" / "series").read_text()
    assert (proj / "patches" / "series").read_text() == names
    for name in names.split():
        if name.endswith(".patch"):
            assert (proj / "patches" / name).read_bytes() == (adopted_030 / "patches" / name).read_bytes(), name
    queue = (proj / "patches" / "queue.toml").read_text()
    assert 'release = "0.30.0"' in queue and 'name = "vllm-omni"' in queue


def test_git_am_reads_the_patches(adopted_030: Path, tmp_path: Path) -> None:
    """The exported series is plain git format-patch: git am replays it onto the base tree."""
    work = tmp_path / "am"
    git(tmp_path, "clone", "-q", str(adopted_030), str(work))
    git(work, "fetch", "-q", str(adopted_030), "refs/pq/base:refs/heads/base")
    git(work, "checkout", "-q", "base")
    patches = [
        str(adopted_030 / "patches" / n)
        for n in (adopted_030 / "patches" / "series").read_text().split()
        if n.endswith(".patch")
    ]
    git(work, "am", "-q", *patches)
    top = git(adopted_030, "rev-parse", "refs/pq/top^{tree}").strip()
    assert git(work, "rev-parse", "HEAD^{tree}").strip() == top


def test_refresh_real_upgrade_no_stop(
    adopted_030: Path, reported_030_once: tuple[Path, str], tmp_path: Path, corpus: Path
) -> None:
    """0.30.0's series onto vllm-ascend 0.30.0rc2 (sdist only; a copy of the session's `pq refresh --no-stop
    --report --markdown --annotations`): exit 3, report, every Omni-new line kept."""
    proj = copy_project(reported_030_once[0], tmp_path / "p")
    report, md = proj / "reports" / "refresh.json", proj / "reports" / "refresh.md"
    old_base = git(adopted_030, "rev-parse", "refs/pq/base").strip()
    stdout = reported_030_once[1]  # the refresh exited 3
    data = json.loads(report.read_text())
    # no statement the new upstream adds is dropped outside a conflict region (17 were: the kept replacements
    # of the KV prefetch's complete_forward, the device-metadata release, the dummy run's positions reset, ...)
    assert lost_statements(proj, old_base) == []
    kvpp = [c for c in data["conflicts"] if any("kvpp.prepare_forward" in x for x in c["links"])]
    assert kvpp and all(any("kvpp.complete_forward" in x for x in c["links"]) for c in kvpp)
    assert data["format"] == 2
    assert data["upstream"]["target"] == "vllm-ascend 0.30.0rc2"
    assert BASE_030 in data["upstream"]["base"]
    names = [p["name"] for p in data["patches"]]
    assert names == [n for n in (proj / "patches" / "series").read_text().split() if n.endswith(".patch")]
    assert {p["status"] for p in data["patches"]} <= {"modified", "conflict", "unchanged", "empty"}
    assert data["conflicts"], "this upgrade is known to conflict"
    keys = {
        "patch",
        "file",
        "line",
        "symbol",
        "kind",
        "message",
        "anchor",
        "sides",
        "culprits",
        "reused",
        "key",
        "links",
    }
    for c in data["conflicts"]:
        assert set(c) == keys | {"explanation"}, c
        assert c["explanation"]["upstream"] and c["explanation"]["block"], c
        kinds = {"both-changed", "anchor-lost", "upstream-changed-replaced", "symbol-removed", "name-linked"}
        assert c["kind"] in kinds, c
        assert set(c["sides"]) == {"base", "upstream", "patch"}
        assert c["patch"] in names
        text = (proj / "npu_worker" / c["file"]).read_text().splitlines()
        assert text[c["line"] - 1].startswith("<<<<<<< "), c
        assert re.fullmatch(r"\w+\.\w+", c["symbol"]), c
    assert data["flags"], "this upgrade takes decisions a reviewer must see"
    for f in data["flags"]:
        assert set(f) == keys | {"resolution"}, f
        if f["kind"] not in {"reformatted"}:
            text = (proj / "npu_worker" / f["file"]).read_text()
            lines = text.splitlines(keepends=True)
            region = "".join(lines[f["line"] - 1 : f["line"] - 1 + f["resolution"].count("\n")])
            assert region == f["resolution"], f  # the flag points at the text it describes
    assert data["blocks"]["before"] == data["blocks"]["after"] > 0
    # 0.30.0's AR runner holds a real stray fence (a close whose open was lost in an earlier upgrade)
    stray = [f for f in data["fences"] if f["file"] == "npu_ar_model_runner.py"]
    assert len(stray) == 1 and "not closed" in stray[0]["message"], data["fences"]
    line = (proj / "npu_worker" / "npu_ar_model_runner.py").read_text().splitlines()[stray[0]["line"] - 1]
    assert "Omni-new" in line
    assert "Omni-new fence problems" in md.read_text()
    body = md.read_text()
    assert body.startswith("## NPU runners: ") and body.count("<details>") == len(data["conflicts"]) + len(
        data["flags"]
    )
    notes = [line for line in stdout.splitlines() if line.startswith("::")]
    assert len([n for n in notes if n.startswith("::error file=npu_worker/")]) == len(data["conflicts"])
    assert len([n for n in notes if n.startswith("::warning file=npu_worker/")]) == len(data["flags"])
    per_file = Counter(c["file"] for c in data["conflicts"])
    assert f"{len(data['conflicts'])} conflict region(s)" in stdout
    assert set(per_file) <= {"npu_model_runner.py", "npu_ar_model_runner.py", "npu_generation_model_runner.py"}
    for f in (corpus / "vllm-omni-0.30.0" / "npu").glob("*.py"):
        have = omni_lines((proj / "npu_worker" / f.name).read_text())
        want = omni_lines(f.read_text())
        assert not (want - have), (f.name, want - have)
    st = pq(proj, "status", check=3).stdout
    assert "refresh in progress onto vllm-ascend 0.30.0rc2" in st
    # the history ends before 0.30.0rc2: no culprits, and the reason, once in each output
    reason = "no upstream commits named: vllm-ascend 0.30.0rc2 has no tag v0.30.0rc2 in the upstream history"
    assert data["upstream"]["culprits"].startswith(reason) and not any(c["culprits"] for c in data["conflicts"])
    assert f"culprits: {reason}" in stdout and reason in body


def test_abort_restores_everything(adopted_030: Path, refreshed_030: Path) -> None:
    """The session's refresh of a copy of the adopted series (`pq refresh --no-stop`, pending), aborted: every file
    and ref as in the adopted series (conftest.state is relative to the project folder)."""
    before = state(adopted_030)
    proj = refreshed_030
    assert state(proj) != before
    pq(proj, "refresh", "--to", "vllm-ascend==0.30.0rc2", check=1)  # one refresh at a time
    pq(proj, "abort")
    assert state(proj) == before
    pq(proj, "abort", check=1)


def test_refresh_onto_same_base_changes_nothing(adopted_030: Path, tmp_path: Path) -> None:
    proj = copy_project(adopted_030, tmp_path / "p")
    before = state(proj)
    proc = pq(proj, "refresh", "--to", BASE_030)
    assert "no conflicts" in proc.stdout
    assert state(proj) == before


def _take_patch_side(text: str) -> str:
    """Resolve every diff3 region by keeping the patch's side (what a hurried maintainer might do)."""
    out: list[str] = []
    mode = None
    for line in text.splitlines(keepends=True):
        if line.startswith("<<<<<<< "):
            mode = "ours"
        elif line.startswith("||||||| ") and mode == "ours":
            mode = "base"
        elif line.startswith("=======") and mode == "base":
            mode = "theirs"
        elif line.startswith(">>>>>>> ") and mode == "theirs":
            mode = None
        elif mode in (None, "theirs"):
            out.append(line)
    return "".join(out)


def test_stop_continue_until_done(adopted_030: Path, tmp_path: Path) -> None:
    """Stop at each conflicted patch, resolve in npu_worker/, continue; the end state is a clean series."""
    proj = copy_project(adopted_030, tmp_path / "p")
    proc = pq(proj, "refresh", "--to", "vllm-ascend==0.30.0rc2", check=3)
    assert "stopped at 0005-" in proc.stdout
    # markers left in place are refused with file and line
    bad = pq(proj, "continue", check=1)
    assert re.search(r"npu_worker/\w+\.py:\d+: conflict markers remain", bad.stderr), bad.stderr
    stops = 1
    while True:
        for f in (proj / "npu_worker").glob("*.py"):
            text = f.read_text()
            if "<<<<<<< " in text:
                f.write_text(_take_patch_side(text))
        proc = pq(proj, "continue", check=None)
        if proc.returncode == 0:
            break
        assert proc.returncode == 3, proc.stderr
        stops += 1
        assert stops < 20
    assert stops >= 3
    queue = (proj / "patches" / "queue.toml").read_text()
    assert 'label = "vllm-ascend 0.30.0rc2"' in queue and 'kind = "release"' in queue
    assert "<<<<<<<" not in "".join(f.read_text() for f in (proj / "npu_worker").glob("*.py"))
    # the refreshed series is self-consistent: rebuilding it from patches/ alone gives the same package
    built = {f.name: f.read_bytes() for f in (proj / "npu_worker").glob("*.py")}
    for ref in git(proj, "for-each-ref", "--format=%(refname)", "refs/pq/").split():
        git(proj, "update-ref", "-d", ref)
    shutil.rmtree(proj / "npu_worker")
    pq(proj, "build")
    assert {f.name: f.read_bytes() for f in (proj / "npu_worker").glob("*.py")} == built
    assert "refresh in progress" not in pq(proj, "status").stdout


def _code_after_imports(text: str) -> tuple[str, set[str]]:
    """The module's text from its first top-level statement that is no import on, and the names its imports bind."""
    body = ast.parse(text).body
    lines = text.splitlines(keepends=True)
    first = next((n.lineno for n in body if not isinstance(n, (ast.Import, ast.ImportFrom, ast.Expr))), len(lines) + 1)
    bound = {
        a.asname or a.name.split(".")[0] for n in body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names
    }
    return "".join(lines[first - 1 :]), bound


def test_no_stop_then_continue_carries_resolutions_back(refreshed_030: Path, tmp_path: Path) -> None:
    """After --no-stop, resolving the whole output once and continuing folds each fix into its own patch; the
    imports the resolved code does not use go (each said by an import-removed flag), the code stays as written."""
    proj = refreshed_030
    resolved = {}
    for f in (proj / "npu_worker").glob("*.py"):
        text = f.read_text()
        if "<<<<<<< " in text:
            f.write_text(_take_patch_side(text))
        resolved[f.name] = f.read_text()
    report = tmp_path / "r.json"
    out = pq(proj, "continue", "--report", str(report)).stdout
    removed = [f for f in json.loads(report.read_text())["flags"] if f["kind"] == "import-removed"]
    assert removed and all(f"review: npu_worker/{f['file']}:{f['line']} import-removed " in out for f in removed)
    for name, text in resolved.items():
        now = (proj / "npu_worker" / name).read_text()
        (code, bound), (code_before, bound_before) = _code_after_imports(now), _code_after_imports(text)
        assert code == code_before, name
        gone = {n for f in removed if f["file"] == name for n in re.findall(r"`(\w+)`", f["message"].split(" (")[0])}
        assert bound == bound_before - gone and gone <= bound_before, name
    for name in (proj / "patches" / "series").read_text().split():
        if name.endswith(".patch"):
            assert "<<<<<<<" not in (proj / "patches" / name).read_text(), name


# the bases pq adopt finds for vllm-omni 0.14.0, 0.16.0, 0.18.0 and 0.20.0 (see test_round_trip)
BASES = {"0.14.0": "65289676b42e", "0.16.0": "2870f7c8ad20", "0.18.0": "5df2ddd8dbb8", "0.20.0": "3e1b977b05c1"}


@pytest.mark.parametrize("old,new", [("0.14.0", "0.16.0"), ("0.16.0", "0.18.0"), ("0.18.0", "0.20.0")])
def test_real_upgrade_anchor_aware(corpus: Path, tmp_path: Path, old: str, new: str) -> None:
    """A real upgrade between corpus releases: no omni block lost, no upstream statement dropped outside a
    conflict region, every conflict and flag explained."""
    proj = new_project(tmp_path / "p")
    pq(proj, "adopt", str(corpus / f"vllm-omni-{old}" / "npu"), "--at", BASES[old])
    report = tmp_path / "r.json"
    old_base = git(proj, "rev-parse", "refs/pq/base").strip()
    pq(proj, "refresh", "--no-stop", "--to", BASES[new], "--report", str(report), check=3)
    data = json.loads(report.read_text())
    assert lost_statements(proj, old_base) == []  # 3 on 0.16.0 -> 0.18.0 and 5 on 0.18.0 -> 0.20.0 were
    for f in (corpus / f"vllm-omni-{old}" / "npu").glob("*.py"):
        have = omni_lines((proj / "npu_worker" / f.name).read_text())
        want = omni_lines(f.read_text())
        # the one inline tag of 0.14.0 ("x, # Omni-new") is laid out by ruff as "x,  # Omni-new"
        norm = Counter({re.sub(r"\s+", " ", k): v for k, v in want.items()})
        got = Counter({re.sub(r"\s+", " ", k): v for k, v in have.items()})
        assert not (norm - got), (f.name, norm - got)
    assert data["blocks"]["before"] == data["blocks"]["after"]
    # no conflict region cuts a statement: every module parses with every region taken to either side
    for f in (proj / "npu_worker").glob("*.py"):
        for side in ("ours", "theirs"):
            probe = checked.one_side(f.read_text(), side)[0]
            assert checked.syntax_error_line(probe) is None, (f.name, side)
    if data["removed_symbols"]:  # 0.14.0 -> 0.16.0: upstream dropped _generate_process_reqs_hidden_states
        assert any(c["kind"] == "symbol-removed" for c in data["conflicts"]), data["conflicts"]
    kinds = {f["kind"] for f in data["flags"]}
    assert kinds & {"block-moved", "both-inserted", "kept-replacement", "layout-only"}, kinds
    # the upstream is the git bundle: conflicts name the upstream commits that caused them
    named = [c for c in data["conflicts"] if c["culprits"]]
    assert len(named) >= len(data["conflicts"]) // 2, data["conflicts"]
    for c in named:
        assert all(re.fullmatch(r"[0-9a-f]{40}", x["commit"]) and x["subject"] for x in c["culprits"])


def test_resolution_recorded_once_is_reused(corpus: Path, tmp_path: Path) -> None:
    """Resolve a real conflict once; a second refresh from the same base (another clone) reuses it."""
    first = new_project(tmp_path / "a")
    pq(first, "adopt", str(corpus / "vllm-omni-0.18.0" / "npu"), "--at", BASES["0.18.0"])
    second = copy_project(first, tmp_path / "b")
    report = tmp_path / "r1.json"
    pq(first, "refresh", "--no-stop", "--to", BASES["0.20.0"], "--report", str(report), check=3)
    conflicts = json.loads(report.read_text())["conflicts"]
    assert conflicts
    for path in (first / "npu_worker").glob("*.py"):
        path.write_text(_take_patch_side(path.read_text()))
    pq(first, "continue", "--report", str(report))
    stored = git(first, "ls-tree", "-r", "--name-only", "refs/pq/resolutions").split()
    regions = [p for p in stored if not p.startswith(("edits/", "blobs/"))]
    edits = [p for p in stored if p.startswith("edits/")]
    assert len(regions) == len(conflicts)
    # one recorded edit per patch the maintainer changed, and per patch whose imports followed the resolution
    imports = {f["patch"] for f in json.loads(report.read_text())["flags"] if f["kind"] == "import-removed"}
    conflicted = {c["patch"] for c in conflicts} | imports
    assert imports and len(edits) == len(conflicted)
    # each keeps the module file it changed before and after it (a base to merge it onto another merge result)
    blobs = {p.rsplit("/", 1)[1] for p in stored if p.startswith("blobs/")}
    kept = [json.loads(git(first, "show", f"refs/pq/resolutions:{p}"))["files"] for p in edits]
    assert blobs == {b for files in kept for pair in files.values() for b in pair if b} and blobs
    # share the recorded resolutions the way a team would: fetch the ref
    git(second, "fetch", "-q", str(first), "refs/pq/resolutions:refs/pq/resolutions")
    report2 = tmp_path / "r2.json"
    pq(second, "refresh", "--no-stop", "--to", BASES["0.20.0"], "--report", str(report2))
    data = json.loads(report2.read_text())
    assert not data["conflicts"]
    recorded = [f for f in data["flags"] if f["kind"] == "recorded-edits"]
    assert {f["patch"] for f in recorded} == conflicted, recorded
    for path in (first / "npu_worker").glob("*.py"):
        assert (second / "npu_worker" / path.name).read_bytes() == path.read_bytes(), path.name
    for path in (first / "patches").glob("*.patch"):
        assert (second / "patches" / path.name).read_bytes() == path.read_bytes(), path.name


def test_culprits_for_a_registry_release_through_its_tag(corpus: Path, tmp_path: Path) -> None:
    """A release target (sdist) is mapped to its release tag in the upstream history, so culprits are named."""
    proj = new_project(tmp_path / "p")
    pq(proj, "adopt", str(corpus / "vllm-omni-0.24.0" / "npu"), "--at", BASES["0.20.0"])
    report = tmp_path / "r.json"
    pq(proj, "refresh", "--no-stop", "--to", "vllm-ascend==0.25.1rc1", "--report", str(report), check=3)
    data = json.loads(report.read_text())
    assert data["upstream"]["target"] == "vllm-ascend 0.25.1rc1"
    entries = data["conflicts"] + data["flags"]
    named = [e for e in entries if e["culprits"]]
    assert len(named) >= len(entries) // 2, (len(named), len(entries))
    assert "(vllm-ascend 0.25.1rc1 is its tag v0.25.1rc1)" in data["upstream"]["culprits"]
    assert sum(1 for c in data["conflicts"] if c["culprits"]) >= len(data["conflicts"]) // 2
    for e in named:
        for c in e["culprits"]:
            assert re.fullmatch(r"[0-9a-f]{40}", c["commit"]) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", c["date"])
