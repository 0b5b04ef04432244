"""pq merge: the maintainers' newer vllm-omni releases taken into the series, on the real releases.

vllm-omni 0.31.0rc1 and 0.32.0rc1 copy their methods from the same vllm-ascend commit as 0.30.0 (cf0baa38)
and change the NPU runners by hand: 0.31.0rc1 adds ``aux_output.py``, 0.32.0rc1 ``talker_multiframe.py``.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import pytest
from conftest import BASE_030, copy_project, git, new_project, pq, push_to_bare, resolve_all, skeleton_drift, state

from patch_queue import presets
from patch_queue.commands.adopt import read_downstream

RC1, RC2 = "0.31.0rc1", "0.32.0rc1"


@pytest.fixture(scope="module")
def adopted(released_030_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vllm-omni 0.30.0 adopted from the release at its upstream base, committed."""
    proj = copy_project(released_030_once, tmp_path_factory.mktemp("merge") / "p")
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "adopted")
    return proj


@pytest.fixture(scope="module")
def refreshed(upstream_resolved_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The series refreshed onto vllm-ascend 0.30.0rc2, every conflict resolved to upstream's side, finished over
    the errors of pq check that leaves (conftest), committed: a series a merge cannot simply replace."""
    proj = copy_project(upstream_resolved_once, tmp_path_factory.mktemp("refreshed") / "p")
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "refreshed")
    return proj


def release(version: str) -> dict[str, bytes]:
    return read_downstream(f"vllm-omni=={version}", progress=None, spec=presets.NPU)[0]


def built(proj: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((proj / "npu_worker").glob("*.py"))}


def queue(proj: Path) -> dict[str, object]:
    return tomllib.loads((proj / "patches" / "queue.toml").read_text())


def test_merging_the_release_the_series_holds_changes_nothing(adopted: Path, tmp_path: Path) -> None:
    proj = copy_project(adopted, tmp_path / "p")
    before = state(proj)
    for spec in ("vllm-omni==0.30.0", "0.30.0"):
        out = pq(proj, "merge", spec)
        assert "already up to date" in out.stdout, out.stdout
        assert state(proj) == before


def test_a_clean_merge_gives_the_release_byte_for_byte_and_moves_the_pin(adopted: Path, tmp_path: Path) -> None:
    proj = copy_project(adopted, tmp_path / "p")
    before = state(proj)
    bodies = {p.name: p.read_bytes() for p in (proj / "patches").glob("*.patch")}
    out = pq(proj, "merge", RC1)
    assert f"merged vllm-omni=={RC1} into the series, no conflicts" in out.stdout
    assert f"downstream: vllm-omni 0.30.0 -> {RC1}" in out.stdout
    assert built(proj) == release(RC1)
    q = queue(proj)
    assert q["downstream"]["release"] == RC1  # type: ignore[index]
    assert {"path": "aux_output.py", "upstream": "", "symbols": []} in q["module"]  # type: ignore[operator]
    step = q["lineage"][-1]  # type: ignore[index]
    assert (step["kind"], step["downstream"], step["since"]) == ("merge", f"vllm-omni=={RC1}", "vllm-omni==0.30.0")
    assert step["files"] == {k: hashlib.sha256(v).hexdigest() for k, v in release(RC1).items()}
    series = (proj / "patches" / "series").read_text().split()
    assert series[-1] == "0017-aux-output.patch"
    new = (proj / "patches" / series[-1]).read_text()
    assert f"aux_output.py: new in vllm-omni {RC1}" in new and "+++ b/aux_output.py" in new
    assert new.count("+++ b/") == 1
    # the runners' changes went into the patches that own their lines, not into one patch
    changed = sorted(n for n, body in bodies.items() if (proj / "patches" / n).read_bytes() != body)
    assert len(changed) >= 3, changed
    assert "0005-npu-ar-model-runner-execute-model.patch" in changed
    # undone as one command (pq keeps what undo wrote, for `pq redo`)
    assert "undid `pq merge`" in pq(proj, "undo").stdout
    after = state(proj)
    after["refs"] = "".join(
        r for r in str(after["refs"]).splitlines(keepends=True) if not r.startswith("refs/pq/undo ")
    )
    assert after == before


def test_two_merges_reproduce_in_a_fresh_clone(adopted: Path, tmp_path: Path) -> None:
    proj = copy_project(adopted, tmp_path / "p")
    pq(proj, "merge", f"vllm-omni=={RC1}")
    pq(proj, "merge", RC2)
    assert built(proj) == release(RC2)
    assert queue(proj)["downstream"]["release"] == RC2  # type: ignore[index]
    # the releases' edits of carried methods went into the patches that carry them (issue 48, point 5): every
    # skeleton's copy of a carried method is upstream's text as projected, and the steps say so
    assert skeleton_drift(proj) == {path: [] for path in skeleton_drift(proj)} != {}, skeleton_drift(proj)
    assert [s.get("placed") for s in queue(proj)["lineage"] if s["kind"] == "merge"] == ["method"] * 2  # type: ignore[attr-defined, index, union-attr]
    origin = push_to_bare(proj, "merged")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    assert not list((clone / "patches").glob("*.patch"))  # the bodies are not committed
    out = pq(clone, "reproduce")
    assert "Replaying the merge of vllm-omni==0.32.0rc1" in out.stderr + out.stdout
    for name in ("patches", "npu_worker"):
        mine = {p.relative_to(proj): p.read_bytes() for p in (proj / name).rglob("*") if p.is_file()}
        theirs = {p.relative_to(clone): p.read_bytes() for p in (clone / name).rglob("*") if p.is_file()}
        assert mine == theirs, name


def test_conflicts_stop_the_merge_abort_puts_back_continue_records(refreshed: Path, tmp_path: Path) -> None:
    proj = copy_project(refreshed, tmp_path / "p")
    before = state(proj)
    out = pq(proj, "merge", RC1, "--markdown", str(tmp_path / "merge.md"), check=3)
    assert "(patch vllm-omni 0.31.0rc1)" in out.stdout and "conflict region(s)" in out.stdout
    assert "\n  series: " in out.stdout and "\n  upstream: " not in out.stdout  # what the series' side changed
    md = (tmp_path / "merge.md").read_text()
    assert md.startswith(f"## NPU runners: vllm-omni {RC1} merged\n") and "**The series change:**" in md
    text = (proj / "npu_worker" / "npu_ar_model_runner.py").read_text()
    first = text.index("<<<<<<< series on vllm-ascend 0.30.0rc2")  # the series' side first
    assert text.index("||||||| base vllm-omni 0.30.0", first) < text.index(">>>>>>> vllm-omni 0.31.0rc1", first)
    status = pq(proj, "status", check=3)
    assert f"merge in progress of vllm-omni=={RC1}" in status.stdout
    data = json.loads(pq(proj, "status", "--json", check=3).stdout)  # the same, as JSON and with the same exit
    assert data["in_progress"] == "merge" and data["target"] == f"vllm-omni=={RC1}"
    assert data["conflicts"] and all(c["file"] in status.stdout for c in data["conflicts"])
    refused = pq(proj, "refresh", check=1)
    assert "a merge is already in progress" in refused.stderr
    assert "(merge of vllm-omni==0.31.0rc1)" in pq(proj, "series").stdout
    pq(proj, "abort")
    assert state(proj) == before
    # again, resolved to the release's side and finished
    pq(proj, "merge", RC1, check=3)
    assert resolve_all(proj, "--theirs") >= 1
    done = pq(proj, "continue", "--accept-errors")
    assert f"merged vllm-omni=={RC1} into the series" in done.stdout
    step = queue(proj)["lineage"][-1]  # type: ignore[index]
    assert step["kind"] == "merge" and len(step["resolved"]) == 64
    assert (proj / "npu_worker" / "aux_output.py").read_bytes() == release(RC1)["aux_output.py"]
    # the rc2 refresh is kept: the upstream pin and its lineage step
    assert queue(proj)["upstream"]["label"] == "vllm-ascend 0.30.0rc2"  # type: ignore[index]
    # a fresh clone with the store reproduces it byte for byte
    origin = push_to_bare(proj, "merged")
    git(proj, "push", "-q", str(origin), "refs/pq/resolutions")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    git(clone, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
    pq(clone, "reproduce")
    assert built(clone) == built(proj)
    assert {p.name: p.read_bytes() for p in (clone / "patches").glob("*.patch")} == {
        p.name: p.read_bytes() for p in (proj / "patches").glob("*.patch")
    }
    # undone, the merge is pending again as continue found it; abort then puts back what the merge began on
    assert "the merge is pending again" in pq(proj, "undo").stdout
    assert f"merge in progress of vllm-omni=={RC1}" in pq(proj, "status", check=None).stdout
    pq(proj, "abort")

    def worked(files: object) -> dict[str, bytes]:
        assert isinstance(files, dict)
        return {k: v for k, v in files.items() if k.startswith(("patches/", "npu_worker/"))}

    assert worked(state(proj)["files"]) == worked(before["files"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("0.24.0", "vllm-omni 0.24.0 is older than vllm-omni 0.30.0, the release the series last took in"),
        ("vllm==0.31.0", "vllm is not vllm-omni, the downstream of the series"),
        ("latest-please", "'latest-please' is neither a release of vllm-omni"),
        ("EMPTY", "holds no NPU worker modules"),
    ],
)
def test_bad_specs_are_one_line_and_change_nothing(adopted: Path, tmp_path: Path, spec: str, message: str) -> None:
    proj = copy_project(adopted, tmp_path / "p")
    if spec == "EMPTY":
        (tmp_path / "empty").mkdir()
        spec = str(tmp_path / "empty")
    before = state(proj)
    out = pq(proj, "merge", spec, check=1)
    lines = [line for line in out.stderr.splitlines() if line.startswith("pq: ")]
    assert len(lines) == 1 and lines[0].startswith("pq: error: ") and message in lines[0], out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert state(proj) == before


def test_a_module_the_release_removed_leaves_the_series(adopted: Path, tmp_path: Path) -> None:
    proj = copy_project(adopted, tmp_path / "p")
    folder = tmp_path / "npu"
    folder.mkdir()
    for name, data in release("0.30.0").items():
        if name != "npu_generation_worker.py":
            (folder / name).write_bytes(data)
    out = pq(proj, "merge", str(folder))
    assert "no conflicts" in out.stdout
    assert not (proj / "npu_worker" / "npu_generation_worker.py").exists()
    series = (proj / "patches" / "series").read_text().split()
    assert not any("npu-generation-worker" in n for n in series)
    assert all(m["path"] != "npu_generation_worker.py" for m in queue(proj)["module"])  # type: ignore[union-attr]
    assert queue(proj)["downstream"]["release"] == "0.30.0"  # type: ignore[index]  # a folder leaves the pin
    # a folder cannot be read again: reproducing says so in one line
    origin = push_to_bare(proj, "merged a folder")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    bad = pq(clone, "reproduce", check=1)
    assert "merged a folder, which cannot be read again" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_series_adopted_from_a_folder_names_its_release(tmp_path: Path, corpus: Path) -> None:
    proj = new_project(tmp_path / "p")
    pq(proj, "adopt", str(corpus / "vllm-omni-0.30.0" / "npu"), "--at", BASE_030)
    before = state(proj)
    bad = pq(proj, "merge", RC1, check=1)
    assert "adopted from a folder (lineage step 1): name the release" in bad.stderr and "--since" in bad.stderr
    assert state(proj) == before
    pq(proj, "merge", RC1, "--since", "0.30.0")
    assert built(proj) == release(RC1)


def test_a_merge_step_round_trips_and_a_damaged_one_is_one_line(tmp_path: Path) -> None:
    from patch_queue.errors import QueueError
    from patch_queue.series.queue import Module, Queue, Step, UpstreamPin, parse_queue, render_queue

    digest = "ab" * 32
    pin = UpstreamPin("vllm-ascend", "git", "c" * 40, "c" * 40, "git cccccccccccc", "c" * 40, {"f.py": digest})
    adopt = Step("adopt", "adopt", (("0001-a.patch", digest),), pin, "vllm-omni==0.30.0")
    merge = Step(
        "merge",
        "continue",
        (("0001-a.patch", digest), ("0002-aux-output.patch", digest)),
        downstream="vllm-omni==0.31.0rc1",
        since="vllm-omni==0.30.0",
        files=(("aux_output.py", digest), ("base.py", digest)),
        resolved="cd" * 32,
        placed="method",
    )
    queue = Queue(pin, "vllm-omni", "0.31.0rc1", "pkg", (Module("a.py", "", ()),), lineage=(adopt, merge))
    text = render_queue(queue)
    assert parse_queue(text).lineage[-1] == merge
    for bad, said in (
        (text.replace('resolved = "' + "cd" * 32 + '"', 'resolved = "nope"'), "lineage[1].resolved must be a sha256"),
        (text.replace('"aux_output.py" = "' + digest + '"\n"base.py" = "' + digest + '"\n', ""), "[lineage.files]"),
        (text.replace('downstream = "vllm-omni==0.31.0rc1"', 'downstream = "0.31.0rc1"'), "name==version"),
        (text.replace('placed = "method"', 'placed = "skeleton"'), "lineage[1].placed must be 'method'"),
    ):
        assert bad != text
        with pytest.raises(QueueError) as caught:
            parse_queue(bad, path="patches/queue.toml")
        assert said in str(caught.value) and str(caught.value).startswith("patches/queue.toml: ")
