"""The GPU queue end to end on the real releases (issue 49, point 3): vllm-omni 0.24.0's GPU runners adopted onto
vLLM's GPUModelRunner with the base searched among vLLM's registry releases, built, checked, refreshed onto the
vLLM of vllm-omni 0.26.0, 0.28.0 and 0.30.0, merged with vllm-omni 0.26.0, resolved, reproduced in a fresh clone and
built as a wheel (``bench/gpu_queue.py``, run once for the module).  The releases come from the registry
(downloads cached under PQ_CACHE); without it the module is skipped with one line."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import git, new_project, pq

from patch_queue import presets
from patch_queue.errors import PqError
from patch_queue.merge.conflict import Conflict
from patch_queue.series import culprits
from patch_queue.series.queue import UpstreamPin
from patch_queue.sources import registry, release_search
from patch_queue.sources.snapshot import upstream_git_location

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import gpu_queue  # noqa: E402


def _dist(version: str, kind: str = "sdist") -> registry.DistFile:
    parsed = registry.parse_version(version)
    assert parsed is not None
    name = f"up-{version}.tar.gz" if kind == "sdist" else f"up-{version}-py3-none-any.whl"
    return registry.DistFile(name, f"https://example.invalid/{name}", None, parsed, kind, False)  # type: ignore[arg-type]


def test_the_release_window_stops_at_the_downstream_major_minor(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = ["0.20.0", "0.21.0", "0.22.0rc1", "0.22.0", "0.22.1", "0.23.0", "0.23.1", "0.24.0", "0.25.0"]
    monkeypatch.setattr(registry, "project_files", lambda name: [_dist(v) for v in versions])
    window = release_search.release_window("up", "0.23.0", limit=3)
    assert window.versions == ("0.22.1", "0.23.0", "0.23.1")
    assert window.why == (
        "the 3 newest final releases of up, 0.22.1 to 0.23.1: none newer than 0.23.1, the newest of the downstream "
        "release 0.23.0's major.minor"
    )
    # a downstream whose numbers the upstream does not share (or a folder): the newest final releases
    assert release_search.release_window("up", "7.0", limit=2).versions == ("0.24.0", "0.25.0")
    assert release_search.release_window("up", "", limit=12).versions[0] == "0.20.0"
    monkeypatch.setattr(registry, "project_files", lambda name: [_dist("1.0rc1")])
    assert release_search.release_window("up").why == "no final release of up on the registry"


def test_a_queue_without_git_history_has_no_upstream_git_nor_culprits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PQ_UPSTREAM_GIT", "/somewhere/the-npu-queue.bundle")
    assert upstream_git_location(None, presets.GPU) == ""  # the environment names the other queue's history
    assert upstream_git_location("/a/repo", presets.GPU) == "/a/repo"
    assert upstream_git_location(None, presets.NPU) == "/somewhere/the-npu-queue.bundle"
    pin = UpstreamPin("vllm", "release", "vllm==0.23.0", "x", "vllm 0.23.0", "", {presets.GPU.upstream_file: "0"})
    found = [Conflict(kind="both-changed", message="m", line=1)]
    named, note = culprits.annotate(found, pin, pin, upstream_git=None, queue=presets.GPU)
    assert named == found
    assert note == (
        "no upstream commits named: the queue names no git history of vllm (its registry releases are its history; "
        "--upstream names a repository of it)"
    )


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    try:
        registry.project_files(presets.GPU.upstream_dist)
        gpu_queue.release_runners(presets.GPU.downstream_dist, gpu_queue.SOURCE.partition("==")[2])
    except (PqError, OSError) as exc:
        pytest.skip(f"the registry cannot supply vLLM's releases and {gpu_queue.SOURCE} ({exc})")
    row: dict[str, Any] = gpu_queue.measure(tmp_path_factory.mktemp("gpu-queue"))
    print("\n" + gpu_queue.table(row), file=sys.stderr)  # shown with -s, or when a test fails
    return row


def test_adopt_finds_the_base_among_vllm_releases_and_builds_the_release_byte_for_byte(
    figures: dict[str, Any],
) -> None:
    base = figures["base"]
    assert base["label"] == "vllm 0.23.0" and base["searched_kind"] == "releases"
    assert base["matched"] > 0.6 * base["total"]
    assert figures["carried"] == 8
    assert figures["build_differs"] == []


def test_check_fires_no_npu_rule(figures: dict[str, Any]) -> None:
    assert figures["npu_rules_fired"] == []
    # the one error is true: vllm-omni 0.24.0's gpu_ar_worker.py imports a name vLLM 0.24.0 added, and the methods
    # it copies match vLLM 0.23.0 best, the base the series (and its wheel) is on
    assert figures["check"]["counts"] == {"import-name-unresolved": 1, "signature-drift": 1}


def test_refreshes_beat_git_merge_file_and_lose_no_upstream_statement(figures: dict[str, Any]) -> None:
    rows = figures["refreshes"]
    assert [r["target"] for r in rows] == ["vllm==0.26.0", "vllm==0.28.0", "vllm==0.30.0"]
    for r in rows:
        assert r["exit"] == 3 and 0 < r["regions"] < r["git_merge_file"], r
        assert r["conflicted_lines"] < r["git_merge_file_lines"], r
        assert r["lost"] == [], r
    assert rows[0]["culprits"].startswith("culprits: no upstream commits named: the queue names no git history")


def test_the_default_refresh_names_the_newest_release_that_still_has_the_upstream_file(figures: dict[str, Any]) -> None:
    # vLLM 0.34.0 has no vllm/v1/worker/gpu_model_runner.py: the newest release is no target, and pq says which is
    newest = figures["newest"]
    assert newest["exit"] == 1
    assert newest["said"].startswith(
        "pq: error: vllm 0.34.0, the newest release, has no vllm/v1/worker/gpu_model_runner.py, the file the series "
        "copies GPUModelRunner from (upstream removed or moved it); the newest release that has it is "
    )
    refreshed = newest["refresh"]
    assert refreshed["regions"] < refreshed["git_merge_file"] and refreshed["lost"] == []


def test_merge_resolve_reproduce_and_wheel(figures: dict[str, Any]) -> None:
    assert figures["merge_differs"] == []
    assert figures["merge_on_base"]["exit"] == 1  # the same import, now in 0.26.0's runners, on vLLM 0.23.0
    assert figures["resolved"]["exit"] == 0 and figures["resolved"]["resolve_commands"] > 0
    assert figures["merge_refreshed"]["said"].startswith("merged vllm-omni==0.26.0 into the series, no conflicts")
    assert figures["reproduce_differs"] == []
    wheel = figures["wheel"]
    assert wheel["name"] == presets.GPU.wheel and wheel["file"].startswith("vllm_omni_gpu_worker-0.26.0+vllm.0.26.0-")
    assert [r.partition("==")[0] for r in wheel["requires"]] == ["torch", "vllm", "vllm-omni"]
    assert all("==" in r for r in wheel["requires"])
    assert wheel["summary"].startswith("vllm-omni's GPU model runners as the standalone package gpu_worker")


def test_nothing_pq_printed_names_the_npu_queue(figures: dict[str, Any]) -> None:
    assert figures["npu_words"] == []
    assert gpu_queue.ok(figures)


ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_show_the_figures_measured(figures: dict[str, Any]) -> None:
    doc = (ROOT / "docs" / "gpu-queue.md").read_text(encoding="utf-8")
    rows = gpu_queue.table(figures, timings=False).split("\n", 2)[2]  # the table, without its title line
    assert rows in doc, "docs/gpu-queue.md's table is not what bench/gpu_queue.py measures now:\n" + rows


def test_the_repository_s_gpu_queue_reproduces_the_release_byte_for_byte(
    figures: dict[str, Any], tmp_path: Path
) -> None:
    proj = new_project(tmp_path / "p")
    shutil.copytree(ROOT / "queues" / "gpu" / "patches", proj / "queues" / "gpu" / "patches")
    done = pq(proj, "-C", "queues/gpu", "reproduce")
    assert done.stdout == (
        "reproduced 21 patches from 1 lineage step(s) (0 recorded edit(s) applied), every sha256 as queue.toml "
        "records; runners in gpu_worker/\n"
    )
    built = gpu_queue.folder_modules(proj / "queues" / "gpu" / presets.GPU.out)
    assert gpu_queue.differing(built, gpu_queue.release_runners("vllm-omni", "0.24.0")) == []
    assert git(proj, "for-each-ref", "--format=%(refname)", "refs/pq").splitlines() == []
    assert git(proj, "for-each-ref", "--format=%(refname)", "refs/pq-queues-gpu/base").splitlines() == [
        "refs/pq-queues-gpu/base"
    ]


def test_options_alone_that_name_another_upstream_make_a_pair_of_no_preset(tmp_path: Path) -> None:
    from patch_queue.commands import adopt
    from patch_queue.project.workspace import open_workspace

    ws = open_workspace(new_project(tmp_path / "p"))
    gpu = {k: getattr(presets.GPU, k) for k in ("upstream_dist", "upstream_file", "upstream_class", "package")}
    spec = adopt.queue_spec(ws, None, "other-omni==1.0", out="runners", **gpu)
    assert spec == replace(
        presets.GPU,
        preset="",
        downstream_dist="other-omni",
        out="runners",
        wheel="other-omni-runners",
        wheel_requires=(),
    )
    # the default (npu) queue's own upstream history, fence, rules and wheel never carry over to another upstream
    assert (spec.upstream_git, spec.fence, spec.rules, spec.gpu_reference) == ("", "", "", "")
    # a preset named, or options that keep the upstream, keep the rest of it
    assert adopt.queue_spec(ws, None, "vllm-omni==0.30.0", out="runners") == presets.NPU.with_options(out="runners")
    assert adopt.queue_spec(ws, "gpu", "", out="runners").wheel == presets.GPU.wheel


def test_the_gpu_pair_by_options_alone(figures: dict[str, Any], tmp_path: Path) -> None:
    proj = new_project(tmp_path / "p")
    options = [f"--{k.replace('_', '-')}={getattr(presets.GPU, k)}" for k in ("upstream_dist", "upstream_file")]
    options += [f"--upstream-class={presets.GPU.upstream_class}", f"--package={presets.GPU.package}", "--out=runners"]
    out = pq(proj, "adopt", gpu_queue.SOURCE, *options).stdout
    assert f"upstream base: {figures['base']['label']}, score" in out
    built = gpu_queue.folder_modules(proj / "runners")
    assert gpu_queue.differing(built, gpu_queue.release_runners("vllm-omni", "0.24.0")) == []
    refreshed = pq(proj, "refresh", "--no-stop", "--to", "vllm==0.28.0", check=3)
    regions = figures["refreshes"][1]["regions"]
    assert f"{regions} conflict region(s)" in refreshed.stdout
    assert not gpu_queue.NPU_WORDS.search(out + refreshed.stdout + refreshed.stderr)
