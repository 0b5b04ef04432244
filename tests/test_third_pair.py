"""Pairs of the presets' shape set by ``pq adopt``'s options alone, on the real releases (issue 49's last acceptance):
vllm-omni's model runner v2 (``vllm_omni/worker_v2/``) on vLLM's ``vllm/v1/worker/gpu/model_runner.py``, and
vllm-ascend's own ``NPUModelRunner`` on vLLM's ``GPUModelRunner`` (``bench/pair_queue.py``, one run per pair with
fewer targets than the script's); and a folder of runners, which names no release to bound the search for the base.
The releases come from the registry (downloads cached under PQ_CACHE); without it the module is skipped."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import new_project, pq

from patch_queue.checks import calls
from patch_queue.errors import PqError
from patch_queue.merge import markers
from patch_queue.sources import registry

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import pair_queue  # noqa: E402

GPU_RUNNER = ["--upstream-dist", "vllm", "--upstream-file", "vllm/v1/worker/gpu_model_runner.py"]
GPU_OPTIONS = [*GPU_RUNNER, "--upstream-class", "GPUModelRunner", "--package", "vllm_omni/worker", "--out", "gw"]


@pytest.fixture(scope="module", autouse=True)
def _registry() -> None:
    try:
        registry.project_files("vllm")
    except (PqError, OSError) as exc:
        pytest.skip(f"the registry cannot supply vLLM's releases ({exc})")


def _base(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("upstream base: ")).split(", best of")[0]


def test_a_folder_of_runners_finds_the_base_its_release_finds(tmp_path: Path) -> None:
    """A folder names no release, so the search starts among the newest upstream releases, all later than the copies
    of vllm-omni 0.24.0; its oldest scoring the best widens it until the base is inside: the base the release finds
    (whose window the release's own number bounds)."""
    folder = tmp_path / "runners"
    folder.mkdir()
    for name, data in pair_queue.package_modules("vllm-omni==0.24.0", "vllm_omni/worker").items():
        (folder / name).write_bytes(data)
    (folder / "helpers").mkdir()  # a subpackage: no module of the series, and adopt says so
    (folder / "helpers" / "__init__.py").write_text("X = 1\n", encoding="utf-8")
    by_release = pq(new_project(tmp_path / "release"), "adopt", "vllm-omni==0.24.0", *GPU_OPTIONS)
    by_folder = pq(new_project(tmp_path / "folder"), "adopt", str(folder), *GPU_OPTIONS)
    said = by_folder.stdout + by_folder.stderr  # the search's progress goes to stderr
    first = re.search(r"Searching the \d+ newest final releases of vllm, (\S+) to ", said)
    assert first is not None, said
    assert "widening the search" in said
    assert f"warning: {folder}: helpers/ not read: the series keeps the modules of vllm_omni/worker/ itself" in said
    assert _base(by_folder.stdout) == _base(by_release.stdout)
    base = registry.parse_version(_base(by_folder.stdout).split()[3].rstrip(","))
    oldest_first = registry.parse_version(first[1])
    assert base is not None and oldest_first is not None and base.key < oldest_first.key


@pytest.fixture(scope="module")
def worker_v2(tmp_path_factory: pytest.TempPathFactory, import_cache: Path) -> dict[str, Any]:
    pair = replace(pair_queue.PAIRS["worker-v2"], targets=("vllm==0.32.0",))
    # the merge runs pq check --import: in the import test's cache, whose environment (vLLM 0.32.0 with vllm-omni
    # 0.32.0rc1) tests/test_import_check.py builds too
    old = os.environ["PQ_CACHE"] if "PQ_CACHE" in os.environ else None
    os.environ["PQ_CACHE"] = str(import_cache)
    try:
        row: dict[str, Any] = pair_queue.measure(tmp_path_factory.mktemp("worker-v2"), pair)
    finally:
        if old is None:
            del os.environ["PQ_CACHE"]
        else:
            os.environ["PQ_CACHE"] = old
    print("\n" + pair_queue.table(row), file=sys.stderr)
    return row


def test_model_runner_v2_round_trips_and_names_what_it_leaves(worker_v2: dict[str, Any]) -> None:
    assert worker_v2["build_differs"] == []
    assert worker_v2["patches"] > 0 and worker_v2["carried"] > 0
    # its subpackage (model_states/) is no module of the series, and adopt says so
    assert any("model_states/ not read" in w for w in worker_v2["warnings"]), worker_v2["warnings"]
    assert worker_v2["npu_rules_fired"] == []
    assert worker_v2["npu_words"] == []
    assert worker_v2["wheel"].startswith("vllm_omni_worker_v2-")
    # its modules import each other in the wheel's package, and model_states from vllm-omni
    assert worker_v2["wheel_in_tree"] == []


def test_model_runner_v2_refreshes_with_every_conflict_explained(worker_v2: dict[str, Any]) -> None:
    (refresh,) = worker_v2["refreshes"]
    assert refresh["exit"] == 3 and refresh["regions"] > 0  # vLLM 0.32.0 rewrote execute_model's dispatch
    assert refresh["conflicted_lines"] > 0


def test_model_runner_v2_merges_a_newer_release_that_imports_its_subpackage(worker_v2: dict[str, Any]) -> None:
    """vllm-omni 0.32.0rc1's runners import ``vllm_omni.worker_v2.model_states``, which the output folder lacks: the
    import test finds it in the release, so every module imports and the merge finishes, byte for byte."""
    merge = worker_v2["merge"]
    assert merge["exit"] == 0 and merge["differs"] == []
    imported = re.search(r"--import: (\d+) of (\d+) module", merge["check"])
    assert imported is not None and imported[1] == imported[2], merge["check"]


@pytest.fixture(scope="module")
def ascend(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    pair = replace(pair_queue.PAIRS["ascend"], targets=("vllm==0.30.0",))
    work = tmp_path_factory.mktemp("ascend")
    row: dict[str, Any] = pair_queue.measure(work, pair)
    print("\n" + pair_queue.table(row), file=sys.stderr)
    return row, work / "pair"


def test_vllm_ascend_on_vllm_by_options(ascend: tuple[dict[str, Any], Path]) -> None:
    row, project = ascend
    assert row["build_differs"] == []
    assert row["npu_rules_fired"] == []  # the NPU rules are the NPU queue's, not every NPU runner's
    assert row["npu_words"] == []
    (refresh,) = row["refreshes"]
    assert refresh["exit"] == 3 and refresh["regions"] > 0
    # a newer vllm-ascend merged: its modules byte for byte (pending over the true import errors of its base)
    assert row["merge"]["differs"] == []
    assert row["wheel"].startswith("vllm_ascend_ascend_worker-")
    assert row["wheel_in_tree"] == []
    # the maintainers' edits are the downstream's contributors', not another project's
    first = (project / "patches" / "0001-init.patch").read_text(encoding="utf-8")
    assert first.splitlines()[1] == 'From: "vllm-ascend contributors (adopted by pq)" <pq@localhost>'


def test_upstream_arguments_taken_into_an_own_call_are_a_check_error(tmp_path: Path) -> None:
    """vLLM 0.30.0 passes three new arguments to ``dispatch_cg_and_sync_dp``; vllm-omni 0.31.0rc1's runner v2 calls it
    through its own ``self._dispatch_batch_descriptor`` (keyword-only, fixed) and adds arguments of its own there: the
    refresh leaves both in a conflict region; taken to upstream's side, the call is a TypeError when it runs, which
    ``pq check``'s ``call-keyword`` names.  The releases' own modules give no such error."""
    pair = pair_queue.PAIRS["worker-v2"]
    project = new_project(tmp_path / "v2")
    pq(project, "adopt", pair.source, *pair.options())
    pq(project, "refresh", "--no-stop", "--to", "vllm==0.30.0", check=3)
    merged = {}
    for path in sorted((project / pair.out).glob("*.py")):
        text = path.read_text(encoding="utf-8")
        merged[path.name] = markers.one_side(text, "ours")[0] if "\n<<<<<<< " in text else text
    found = calls.check_calls(merged)
    assert {(f.file, f.rule, f.severity) for f in found} == {("omni_model_runner.py", "call-keyword", "error")}
    assert all("self._dispatch_batch_descriptor() with `parallel_config`" in f.message for f in found), found
    for release in (pair.source, pair.merge):
        own = pair_queue.package_modules(release, pair.package)
        assert calls.check_calls({k: v.decode("utf-8") for k, v in own.items()}) == []


def test_call_keyword_reads_overrides_bases_and_decorators() -> None:
    base = "class A:\n    def f(self, *, x):\n        pass\n\n    def g(self):\n        self.f(x=1, y=2)\n"
    (found,) = calls.check_calls({"a.py": base})
    assert (found.line, found.rule) == (6, "call-keyword") and "`y`" in found.message and "`x`" not in found.message
    # an override in a subclass that takes the keyword is called too; **kwargs and decorators take anything
    override = "class B(A):\n    def f(self, *, x, y=0):\n        pass\n"
    assert calls.check_calls({"a.py": base, "b.py": override}) == []
    assert calls.check_calls({"a.py": base.replace("*, x", "*, x, **kw")}) == []
    assert calls.check_calls({"a.py": base.replace("    def f", "    @cache\n    def f")}) == []
    # a method of upstream's (no class of the output defines it) is not checked; a subclass's call of its base's is
    assert calls.check_calls({"a.py": "class C(Up):\n    def g(self):\n        self.h(z=1)\n"}) == []
    fixed = base.replace("y=2", "x=2")
    (sub,) = calls.check_calls({"a.py": fixed, "c.py": "class C(A):\n    def h(self):\n        self.f(z=1)\n"})
    assert (sub.file, sub.line) == ("c.py", 3) and "A.f (a.py:2)" in sub.message
