"""Code upstream moved into a helper its new code calls, and the omni copy of it (issue 48, point 3):
:mod:`patch_queue.merge.moved` on small synthetic texts (a helper of the same module, one imported from another
module of a snapshot of a real git repository), then on the real refresh of this repository's series onto
vllm-ascend 0.30.0rc2."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from conftest import copy_project, pq

from patch_queue.merge import markers, moved

# ---- a helper of the same module

OLD = """\
class Runner:
    def run(self, batch):
        if self.config.timing:
            self.sync()
            self.start = now()
        out = self.forward(batch)
        return out

    def sync(self):
        device.synchronize()
"""

NEW = """\
class Runner:
    def run(self, batch):
        started = self._start_timing(self.config)
        out = self.forward(batch)
        return out

    def _start_timing(self, config):
        if not config.timing:
            return None
        device.synchronize()
        return now()

    def sync(self):
        device.synchronize()

    def warm(self):
        return self.config.enabled
"""

# a region of `run`: the old upstream lines, upstream's new ones, the patch's (omni's return type on the def line,
# a local for the config and the condition `enabled` in its copy of the timing start)
BASE = """\
    def run(self, batch):
        if self.config.timing:
            self.sync()
            self.start = now()
"""
OURS = """\
    def run(self, batch):
        started = self._start_timing(self.config)
"""
THEIRS = """\
    def run(self, batch) -> OmniOutput:
        config = self.config
        if config.enabled and config.timing:
            self.sync()
            self.start = now()
"""


def _find(base: str, ours: str, theirs: str, new: str = NEW, old: str = OLD, read=lambda _p: None) -> moved.Moved:
    found = moved.find(
        base,
        ours,
        theirs,
        moved.helpers(new, old, "pkg/runner.py", "Runner.run", ours, read),
        upstream_names=moved.aliases(new, "Runner.run"),
        methods=moved.methods(new, "Runner.run"),
        known=moved.known_names([new, old]),
    )
    assert found is not None
    return found


def test_moved_into_a_method_of_the_same_module() -> None:
    found = _find(BASE, OURS, THEIRS)
    assert found.helper.name == "_start_timing" and found.helper.module == "" and found.helper.caller == ""
    assert (found.statements, found.of) == (3, 3) and found.copy == (2, 5)
    # the old `self.sync()` is the helper's `device.synchronize()` (a one-statement method), `self.start` its result
    # bound to `started` (a name 67% alike in words)
    assert round(found.alike, 2) == 0.89
    assert found.differs == ("a local `config` for `self.config`", "the condition `config.enabled`")
    assert found.blocked == ""
    # the patch's side without its copy and the local only the copy read, upstream's new lines in its place
    assert found.text == "    def run(self, batch) -> OmniOutput:\n        started = self._start_timing(self.config)\n"


def test_the_explanation_names_the_helper_the_caller_and_how_much_matches() -> None:
    said = _find(BASE, OURS, THEIRS).said()
    assert said.startswith(
        "upstream moved these lines into `_start_timing`, which the new code calls (3 of 3 deleted statement(s), "
        "89% alike); the patch side holds a copy (its lines 2-5): a local `config` for `self.config`, the "
        "condition `config.enabled`"
    ), said


def test_a_copy_holding_an_omni_call_is_not_dropped() -> None:
    theirs = THEIRS + "            self.omni_stage_timer.begin()\n"
    found = _find(BASE, OURS, theirs)
    assert found.text is None
    assert "omni's copy calls `self.omni_stage_timer.begin()`" in found.blocked, found.blocked
    assert found.said().endswith("the copy is not dropped, port it by hand"), found.said()


def test_a_copy_reading_a_name_upstream_has_not_is_not_dropped() -> None:
    theirs = THEIRS.replace("config.enabled and", "config.omni_stage_enabled and")
    found = _find(BASE, OURS, theirs)
    assert found.text is None and "`omni_stage_enabled`, which upstream's code does not have" in found.blocked


def test_a_copy_storing_into_an_omni_name_is_not_dropped() -> None:
    """Omni keeps the start time under a name of its own (not a small edit: the helper returns it to upstream's
    caller, and omni's code reads its own)."""
    found = _find(BASE, OURS, THEIRS.replace("self.start = now()", "self.omni_stage_t0 = now()"))
    assert found.text is None
    assert found.blocked == "omni's copy names `omni_stage_t0`, which upstream's code does not have", found.blocked


def test_lines_upstream_rewrote_in_place_are_not_moved() -> None:
    """A statement still among upstream's new lines of the region was rewritten there, not moved."""
    base = "        return self.forward(batch)\n"
    ours = "        out = self.forward(batch)\n        self._start_timing(out)\n        return out\n"
    assert (
        moved.find(
            base,
            ours,
            "        return self.omni_forward(batch)\n",
            moved.helpers(NEW, OLD, "pkg/runner.py", "Runner.run", ours, lambda _p: None),
            methods=moved.methods(NEW, "Runner.run"),
        )
        is None
    )


def test_other_code_upstream_deleted_that_the_patch_holds_stops_the_suggestion() -> None:
    """Upstream deleted the capture too, which the patch edited and keeps: the copy may go, the rest is the
    maintainer's (no resolution suggested, the line says why)."""
    base = BASE.replace("    def run(self, batch):\n", "    def run(self, batch):\n        self.capture.clear()\n")
    theirs = THEIRS.replace(
        "        config = self.config\n", "        self.capture.clear(all=True)\n        config = self.config\n"
    )
    found = _find(base, OURS, theirs)
    assert found.blocked == "" and found.text is None
    assert found.said().endswith(
        "the copy may go, but upstream also deleted `self.capture.clear()`, which the patch side holds "
        "(decide that apart)"
    ), found.said()


def test_a_local_only_the_copy_read_is_named() -> None:
    """The patch's method binds `config` above the region and only the copy reads it: the line says so."""
    theirs = THEIRS.replace("        config = self.config\n", "")
    found = moved.find(
        BASE,
        OURS,
        theirs,
        moved.helpers(NEW, OLD, "pkg/runner.py", "Runner.run", OURS, lambda _p: None),
        upstream_names=moved.aliases(NEW, "Runner.run"),
        patch_names={"config": moved.aliases("def run(self):\n    config = self.config\n", "run")["config"]},
        methods=moved.methods(NEW, "Runner.run"),
        known=moved.known_names([NEW, OLD]),
        patch_reads={"config": 2, "self": 5},
    )
    assert found is not None and found.orphans == ("config",)
    assert found.text == "    def run(self, batch) -> OmniOutput:\n        started = self._start_timing(self.config)\n"
    assert found.said().endswith(
        "without it nothing in the method reads `config` (bound outside this region: remove it too)"
    )


# ---- a helper imported from another module, read from a snapshot of a real git repository

RUNNER_NEW = """\
from pkg.core.timing import finish_timing, start_timing


class Runner:
    def run(self, batch):
        started = start_timing(self.config)
        out = self.forward(batch)
        self.elapsed = finish_timing(self.config, started)
        return out

    def sample(self, out):
        result = self.pick(out)
        return result
"""

RUNNER_OLD = """\
class Runner:
    def run(self, batch):
        out = self.forward(batch)
        return out

    def sample(self, out):
        result = self.pick(out)
        if self.config.timing and self.started is not None:
            result.elapsed = (clock() - self.started) * 1000.0
        return result
"""

TIMING = """\
def start_timing(config):
    return clock() if config.timing else None


def finish_timing(config, started):
    if not config.timing or started is None:
        return None
    return (clock() - started) * 1000.0
"""


def _snapshot_reader(tmp_path: Path):
    from patch_queue.sources.snapshot import git_snapshot, open_git

    repo = tmp_path / "upstream"
    (repo / "pkg" / "core").mkdir(parents=True)
    (repo / "pkg" / "runner.py").write_text(RUNNER_NEW)
    (repo / "pkg" / "core" / "timing.py").write_text(TIMING)
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "helpers"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    snap = git_snapshot(open_git(str(repo)), "HEAD")
    return lambda path: snap.read(path).decode() if snap.exists(path) else None


def test_moved_into_an_imported_helper_another_method_calls(tmp_path: Path) -> None:
    """`sample`'s old timing tail is in `finish_timing` (pkg/core/timing.py), which `run` now calls: found through
    the module's imports in the snapshot; the omni copy (its result renamed) goes."""
    base = """\
        result = self.pick(out)
        if self.config.timing and self.started is not None:
            result.elapsed = (clock() - self.started) * 1000.0

"""
    ours = "        result = self.pick(out)\n"
    theirs = """\
        result = self.pick(out)
        result.omni_payload = self.omni_payload(out)
        if self.config.timing and self.started is not None:
            result.elapsed = (clock() - self.started) * 1000.0

"""
    read = _snapshot_reader(tmp_path)
    found = moved.find(
        base,
        ours,
        theirs,
        moved.helpers(RUNNER_NEW, RUNNER_OLD, "pkg/runner.py", "Runner.sample", ours, read),
        upstream_names=moved.aliases(RUNNER_NEW, "Runner.sample"),
        known=moved.known_names([RUNNER_NEW, RUNNER_OLD, TIMING]),
    )
    assert found is not None
    assert (found.helper.name, found.helper.module, found.helper.caller) == (
        "finish_timing",
        "pkg/core/timing.py",
        "run",
    )
    assert found.said().startswith(
        "upstream moved these lines into `finish_timing` (pkg/core/timing.py), which `run` now calls (2 of 2"
    ), found.said()
    assert found.copy == (3, 5) and found.differs == () and found.blocked == ""
    # the omni line stays, the copy and the blank line upstream deleted with the old lines go
    assert found.text == "        result = self.pick(out)\n        result.omni_payload = self.omni_payload(out)\n"


def test_no_helper_found_where_the_import_is_not_in_the_snapshot(tmp_path: Path) -> None:
    read = _snapshot_reader(tmp_path)
    new = RUNNER_NEW.replace("pkg.core.timing", "pkg.core.gone")
    assert all(
        h.name != "finish_timing" for h in moved.helpers(new, RUNNER_OLD, "pkg/runner.py", "Runner.sample", "", read)
    )


# ---- the real refresh

MOVED = re.compile(r"^conflict: (\S+) .*\n(?:  .*\n)*?  moved: (.*)$", re.MULTILINE)


def test_the_timing_code_upstream_moved_on_the_real_refresh(
    reported_032_once: tuple[Path, str], tmp_path: Path
) -> None:
    """This repository's series onto vllm-ascend 0.30.0rc2: the inline profiling timing start of both runners'
    execute_model is in `_start_profiling_chunk_timing` and the AR runner's timing tail of sample_tokens in
    `_finish_profiling_chunk_timing` (vllm_ascend/core/profiling_chunk_predictor.py); `pq status` says so under each
    region and suggests dropping omni's copy (a local for the config and an `enabled` condition: small edits);
    `pq resolve --suggested` writes what the maintainer ships (tests/data/rc2_resolution_032.toml)."""
    proj = copy_project(reported_032_once[0], tmp_path / "p")
    out = pq(proj, "status", check=3).stdout
    said = dict(MOVED.findall(out))
    start = said["npu_worker/npu_ar_model_runner.py:525"]
    assert start.startswith(
        "upstream moved these lines into `_start_profiling_chunk_timing` "
        "(vllm_ascend/core/profiling_chunk_predictor.py), which the new code calls (5 of 8 deleted statement(s), "
    ), start
    assert "a local `profiling_chunk_config` for `self.ascend_config.scheduler_config.profiling_chunk_config`" in start
    assert "the condition `profiling_chunk_config.enabled`" in start
    assert said["npu_worker/npu_generation_model_runner.py:186"] == start
    tail = said["npu_worker/npu_ar_model_runner.py:1362"]
    assert "into `_finish_profiling_chunk_timing` (vllm_ascend/core/profiling_chunk_predictor.py), which " in tail
    assert "`execute_model` now calls" in tail, tail

    # the JSON report says the same (`explanation.moved`)
    report = json.loads((proj / "reports" / "refresh.json").read_text())
    reported = {f"npu_worker/{c['file']}:{c['line']}": c["explanation"]["moved"] for c in report["conflicts"]}
    assert {k: v for k, v in reported.items() if v} == said
    markdown = (proj / "reports" / "refresh.md").read_text()
    assert markdown.count("**Moved:** upstream moved these lines into `_") == 4, markdown

    ar = proj / "npu_worker" / "npu_ar_model_runner.py"
    for line, want in ((1362, lambda r: list(r.patch[:198])), (525, lambda r: [r.patch[0], *r.upstream[1:]])):
        text = ar.read_text(encoding="utf-8")
        region = markers.region_at(text, line)
        assert region is not None and region.first == line
        expected = markers.resolve(text, region, want(region))
        done = pq(proj, "resolve", "--suggested", f"npu_worker/npu_ar_model_runner.py:{line}").stdout
        assert "with the suggestion, the patch's side without its copy of the moved code (" in done, done
        assert ar.read_text(encoding="utf-8") == expected
