"""Import reconciliation after a merge (patch_queue/series/reimport.py) and the names check of pq check."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from conftest import git, new_project, pq

from patch_queue.checks.names import check_names
from patch_queue.series import fmt, reimport

UP = "vllm_ascend.worker.model_runner_v1"
NEW_UPSTREAM = """import os
from typing import TYPE_CHECKING

from vllm.v1.outputs import EMPTY_OUTPUT, ModelRunnerOutput, make_output
from vllm_ascend.ops import build_topk as topk_builder

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput


def graph_capture():
    pass


class NPUModelRunner:
    pass
"""
OLD_UPSTREAM = """from vllm.v1.outputs import EMPTY_OUTPUT
from vllm.v1.gone import removed_helper, still_used


def old_capture():
    pass
"""
RUNNER = """from typing import Any

import torch
from vllm.v1.gone import removed_helper
from vllm.v1.gone import still_used
from vllm.v1.outputs import EMPTY_OUTPUT, make_output
from vllm_ascend.worker.model_runner_v1 import old_capture

from vllm_omni.outputs import OmniOutput


class R:
    def execute_model(self) -> Any:
        out = ModelRunnerOutput(EMPTY_OUTPUT, make_output(), topk_builder(torch.ones(1)))
        with graph_capture():
            pass
        s: SchedulerOutput | None = None
        return out, os.getpid(), s, OmniOutput
"""


def lints(text: str) -> list[tuple[str, str]]:
    return [(x.code, x.name) for view in reimport.sides(text) for x in fmt.lint(view, ("F821",)) or []]


def test_names_upstream_binds_are_imported_grouped_and_flagged() -> None:
    omni = "class R:\n    def f(self):\n        return still_used()\n"
    out, changes = reimport.reconcile(
        RUNNER, new_upstream=NEW_UPSTREAM, old_upstream=OLD_UPSTREAM, upstream_module=UP, omni=omni
    )
    lines = out.splitlines()
    # joined into the existing statement, laid out by the formatter (isort's order: constants, classes, functions)
    assert "from vllm.v1.outputs import EMPTY_OUTPUT, ModelRunnerOutput, make_output" in lines
    # new statements sorted into their section: `import os` with the standard library, aliases kept
    assert lines.index("import os") < lines.index("from typing import Any") < lines.index("import torch")
    assert "from vllm_ascend.ops import build_topk as topk_builder" in lines
    assert "from vllm_ascend.worker.model_runner_v1 import graph_capture" in lines
    assert lines.index("from vllm_ascend.ops import build_topk as topk_builder") < lines.index(
        "from vllm_omni.outputs import OmniOutput"
    )
    # the upstream name it only imports under TYPE_CHECKING is left for pq check, and nothing else is undefined
    assert lints(out) == [("F821", "SchedulerOutput")]
    added = {n for c in changes if c.kind == reimport.ADDED for n in c.names}
    assert added == {"ModelRunnerOutput", "topk_builder", "graph_capture", "os"}
    for c in changes:  # each change points at the lines it is about (a removed import: where it stood)
        assert out.splitlines(keepends=True)[c.line - 1 : c.line - 1 + c.text.count("\n")] == c.text.splitlines(
            keepends=True
        ), c
        assert c.text or c.message.endswith("removed")
    # stale: upstream dropped them; the unused one is removed, the one omni code uses is kept and flagged
    stale = {c.names[0]: c.message for c in changes if c.kind == reimport.STALE}
    assert set(stale) == {"removed_helper", "still_used", "old_capture"}
    assert stale["removed_helper"].endswith("removed") and "removed_helper" not in out
    assert stale["still_used"].endswith("check it") and "from vllm.v1.gone import still_used" in lines
    assert stale["old_capture"].endswith("removed") and "old_capture" not in out


def test_both_sides_of_a_conflict_are_read_and_a_second_run_changes_nothing() -> None:
    text = RUNNER.replace(
        "        with graph_capture():\n",
        "<<<<<<< upstream\n        with graph_capture():\n||||||| base\n        with old():\n"
        "=======\n        with os.fdopen(0):\n>>>>>>> patch\n",
    ).replace("os.getpid(), ", "")
    out, changes = reimport.reconcile(text, new_upstream=NEW_UPSTREAM, old_upstream=None, upstream_module=UP)
    assert {n for c in changes for n in c.names} >= {"graph_capture", "os"}
    assert not any(c.kind == reimport.STALE for c in changes)  # no old upstream: nothing to call stale
    assert [n for _code, n in lints(out)] == ["SchedulerOutput", "SchedulerOutput"]
    again, more = reimport.reconcile(out, new_upstream=NEW_UPSTREAM, old_upstream=None, upstream_module=UP)
    assert (again, more) == (out, [])


PREVIOUS = """import json
import time

from vllm_omni.outputs import OmniOutput, OmniPayload


class R:
    def f(self):
        return OmniOutput(json.dumps(time.time()))
"""
# the refresh's output: it imported `make_output` and `graph_capture` for the sides of a region, the omni code of
# the previous build used `OmniOutput` and `time`; the maintainer took upstream's side and added an import
WRITTEN = """import json
import time

from vllm.v1.outputs import make_output
from vllm_ascend.worker.model_runner_v1 import graph_capture

from vllm_omni.outputs import OmniOutput, OmniPayload


class R:
    def f(self):
<<<<<<< upstream
        with graph_capture():
            return make_output(json.dumps(1))
||||||| base
        return None
=======
        return OmniOutput(json.dumps(time.time()))
>>>>>>> patch
"""
RESOLVED = """import json
import time
import textwrap

from vllm.v1.outputs import make_output
from vllm_ascend.worker.model_runner_v1 import graph_capture

from vllm_omni.outputs import OmniOutput, OmniPayload


class R:
    def f(self):
        return make_output(json.dumps(os.getpid()), EMPTY_OUTPUT)
"""


def test_imports_follow_a_resolution() -> None:
    """After the resolution: what the code reads is imported, what pq imported and the code no longer uses goes,
    each said with its reason; an import the maintainer wrote, one another module imports, or one the previous
    build had unused already stays."""
    out, changes = reimport.follow(
        RESOLVED, new_upstream=NEW_UPSTREAM, upstream_module=UP, previous=PREVIOUS, written=WRITTEN, keep={"json"}
    )
    lines = out.splitlines()
    assert fmt.lint(out, ("F821",)) == []
    unused = {x.name for x in fmt.lint(out, ("F401",)) or []}
    assert unused == {"textwrap", "OmniPayload"}  # the maintainer's; unused in the previous build already
    assert "from vllm.v1.outputs import EMPTY_OUTPUT, make_output" in lines and "import os" in lines
    assert "import time" not in lines and "graph_capture" not in out
    assert "from vllm_omni.outputs import OmniPayload" in lines
    removed = {n: c for c in changes if c.kind == reimport.REMOVED for n in c.names}
    assert set(removed) == {"time", "graph_capture", "OmniOutput"}
    assert "the previous build used it" in removed["time"].message and removed["time"].message.endswith(
        "removed `import time`"
    )
    assert "the refresh imported it" in removed["graph_capture"].message
    added = {n for c in changes if c.kind == reimport.ADDED for n in c.names}
    assert added == {"EMPTY_OUTPUT", "os"}
    assert all(c.message.startswith("the resolved code uses") for c in changes if c.kind == reimport.ADDED)
    for c in changes:  # each points at its statement as it is now (a removed one: where it stood)
        assert out.splitlines(keepends=True)[c.line - 1 :][: c.text.count("\n")] == c.text.splitlines(True), c
    again, more = reimport.follow(
        out, new_upstream=NEW_UPSTREAM, upstream_module=UP, previous=PREVIOUS, written=WRITTEN, keep={"json"}
    )
    assert (again, more) == (out, [])
    # a name another runner module imports from this one stays
    kept, _ = reimport.follow(
        RESOLVED, new_upstream=NEW_UPSTREAM, upstream_module=UP, previous=PREVIOUS, written=WRITTEN, keep={"time"}
    )
    assert "import time" in kept.splitlines()
    assert reimport.imported_from(
        {"a.py": "from pkg.b import x, y\nfrom pkg.c import z\n", "b.py": "x = y = 1\n"}, "pkg"
    ) == {"b.py": {"x", "y"}}


OLD_API = """from vllm_ascend.utils import Timer, Other


class NPUModelRunner:
    def a(self):
        with Timer().capture("prepare"):
            pass
        with Timer().capture("forward"):
            pass
        with Timer().capture("Sample"):
            pass
        Timer().flush()
        Other().one("x")
"""
NEW_API = """from vllm.v1.utils import record


class NPUModelRunner:
    def a(self):
        with record("prepare"):
            pass
        with record("forward"):
            pass
        with record("sample_token"):
            pass
        Thing().one("x")
"""


def test_upstreams_rewrites_of_a_removed_api_are_learnt() -> None:
    """The expression around a removed name that upstream rewrote the same way in two lines or more (a line
    whose argument changed as well counts); a call it dropped, or rewrote once, teaches nothing."""
    rules = reimport.api_rewrites(OLD_API, NEW_API, UP)
    assert [(r.name, r.old, r.new, r.seen) for r in rules] == [("Timer", "Timer().capture", "record", 3)]
    assert rules[0].apply('    with Timer().capture("x"), MyTimer().capture(1):\n') == (
        '    with record("x"), MyTimer().capture(1):\n'
    )
    # rewritten two ways: no rule
    two_ways = NEW_API.replace('record("forward")', 'trace("forward")').replace('record("sample_token")', "trace(1)")
    assert reimport.api_rewrites(OLD_API, two_ways, UP) == ()
    assert reimport.api_rewrites(OLD_API, OLD_API, UP) == ()


def test_a_conflicts_patch_side_that_reads_a_removed_api_is_rewritten_as_upstream_did() -> None:
    """Old code on a conflict's patch side reads `Timer`, which upstream removed (and the skeleton patch's
    reconciliation dropped its import): rewritten the way upstream rewrote its own uses, the new name
    imported, each line flagged."""
    runner = """import os


class R:
    def a(self):
<<<<<<< upstream
        with record("prepare"):
            pass
||||||| base
        with Timer().capture("prepare"):
            pass
=======
        with Timer().capture("prepare"):
            omni()
>>>>>>> patch
        with Timer().capture("omni"):
            pass
        Timer().flush()


def omni():
    pass
"""
    out, changes = reimport.reconcile(
        runner, new_upstream=NEW_API, old_upstream=OLD_API, upstream_module=UP, omni=runner, rewrite_from=OLD_API
    )
    replaced = [(c.line, c.text.strip()) for c in changes if c.kind == "api-replaced"]
    lines = out.splitlines()
    assert (
        [(lines[k - 1].strip()) for k, _t in replaced]
        == [t for _k, t in replaced]
        == [
            'with record("prepare"):',
            'with record("omni"):',
        ]
    )
    assert "from vllm.v1.utils import record" in lines
    # a use no rule covers stays undefined (pq check reports it); the base side is history: left as it was
    assert lints(out) == [("F821", "Timer")] * 2 and "        Timer().flush()" in lines
    assert '        with Timer().capture("prepare"):' in lines
    without, _ = reimport.reconcile(runner, new_upstream=NEW_API, old_upstream=OLD_API, upstream_module=UP, omni=runner)
    assert 'with Timer().capture("omni"):' in without


def test_a_text_that_does_not_parse_is_left_alone() -> None:
    text = RUNNER + "def broken(:\n"
    assert reimport.reconcile(text, new_upstream=NEW_UPSTREAM, old_upstream=OLD_UPSTREAM, upstream_module=UP) == (
        text,
        [],
    )


def test_the_names_check() -> None:
    found = check_names({"m.py": "import os\nimport sys\nimport sys\n\n\ndef f():\n    return sys, undefined_x\n"})
    got = [(f.line, f.rule, f.severity) for f in found]
    assert got == [(1, "import-unused", "warning"), (3, "name-redefined", "warning"), (7, "name-undefined", "error")]
    assert "undefined_x" in found[-1].message
    assert check_names({"m.py": "def f(:\n"}) == []  # the parse rule reports it


def _undefined(folder: Path) -> list[str]:
    """Every F821 of ``folder``'s modules with each side of every conflict region taken."""
    out = []
    for path in sorted(folder.glob("*.py")):
        for view in reimport.sides(path.read_text()):
            out += [f"{path.name}:{x.line}:{x.name}" for x in fmt.lint(view, ("F821",)) or []]
    return out


def test_refresh_onto_a_real_release_imports_what_upstream_code_needs(reported_030_once: tuple[Path, str]) -> None:
    """0.30.0 onto vllm-ascend 0.30.0rc2 (the session's `pq refresh --no-stop --report`, only read): the imports the
    merged upstream code needs are added to the skeleton patches and flagged; no name is left undefined on either
    side of a conflict: neither one upstream binds nor a local (conflict regions grow until each side binds what it
    reads)."""
    proj, _stdout = reported_030_once
    report = proj / "reports" / "refresh.json"
    flags = [f for f in json.loads(report.read_text())["flags"] if f["kind"] == "import-added"]
    assert {f["file"] for f in flags} == {
        "npu_ar_model_runner.py",
        "npu_generation_model_runner.py",
        "npu_model_runner.py",
    }
    for f in flags:  # in the skeleton patch, pointing at the import line in npu_worker/
        assert f["patch"] in {"0003-npu-ar-model-runner.patch", "0008-npu-generation-model-runner.patch"} | {
            "0013-npu-model-runner.patch"
        }
        line = (proj / "npu_worker" / f["file"]).read_text().splitlines()[f["line"] - 1]
        assert line.lstrip().startswith(("from ", "import ")) or line.strip().endswith(","), (f, line)
    names = {n for f in flags for n in f["message"].split("`")[1::2]}
    assert {"is_circular_kv_cache_spec", "UniformTypeKVCacheSpecs", "build_force_eplb_topk"} <= names
    runner = (proj / "npu_worker" / "npu_model_runner.py").read_text().splitlines()
    assert "from vllm_ascend.ops.fused_moe.force_eplb import build_force_eplb_topk" in runner
    assert _undefined(proj / "npu_worker") == []


def test_a_planted_upstream_call_gets_its_import(corpus: Path, tmp_path: Path) -> None:
    """A folder target whose carried upstream method calls a helper the upstream module imports (and one it
    defines): the clean refresh adds both imports, flags them, and pq check finds no undefined name."""
    proj = new_project(tmp_path / "p")
    pq(proj, "adopt", str(corpus / "vllm-omni-0.22.0" / "npu"))
    upstream = git(proj, "show", "refs/pq/base:.pq-upstream/vllm_ascend/worker/model_runner_v1.py")
    assert "def graph_capture(" in upstream and "planted_join" not in upstream
    cls = next(n for n in ast.parse(upstream).body if isinstance(n, ast.ClassDef) and n.name == "NPUModelRunner")
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "execute_model")
    lines = upstream.splitlines(keepends=True)
    at = method.body[-1].lineno - 1  # before its last statement (after the docstring, inside its own block)
    indent = " " * method.body[-1].col_offset
    lines[at:at] = [f"{indent}planted_join('a', 'b')\n", f"{indent}_ = graph_capture\n"]
    target = tmp_path / "target"
    path = target / "vllm_ascend" / "worker" / "model_runner_v1.py"
    path.parent.mkdir(parents=True)
    path.write_text("from os.path import join as planted_join\n" + "".join(lines))
    report = tmp_path / "r.json"
    # the folder holds no other upstream module: the imports could not resolve against it (--no-sources)
    pq(proj, "refresh", "--to", str(target), "--report", str(report), "--no-sources")
    flags = [f for f in json.loads(report.read_text())["flags"] if f["kind"] == "import-added"]
    statements = {f["message"].split("added `")[-1].rstrip("`") for f in flags}
    assert "from os.path import join as planted_join" in statements
    assert "from vllm_ascend.worker.model_runner_v1 import graph_capture" in statements
    assert _undefined(proj / "npu_worker") == []
    out = pq(proj, "check", "--no-sources").stdout
    assert "name-undefined" not in out
    # pq check catches an undefined name a maintainer makes
    runner = next(
        p for p in sorted((proj / "npu_worker").glob("npu_*model_runner.py")) if "planted_join" in p.read_text()
    )
    runner.write_text(runner.read_text().replace('planted_join("a", "b")', 'planted_joyn("a", "b")'))
    shutil.rmtree(tmp_path / "target")
    proc = pq(proj, "check", "--no-sources", check=1)
    line = next(i + 1 for i, x in enumerate(runner.read_text().splitlines()) if "planted_joyn" in x)
    assert f"npu_worker/{runner.name}:{line}: error: [name-undefined] Undefined name `planted_joyn`" in proc.stdout


def test_import_statements_are_laid_out_in_one_run_as_each_alone() -> None:
    sources = [
        "from vllm.v1.outputs import EMPTY_OUTPUT, ModelRunnerOutput, make_output\n",
        "from vllm_ascend.ops import (\n    build_topk as topk_builder,\n)\n",
        "import os\n",
    ]
    # at width 40 the first is wrapped; the second keeps its magic trailing comma
    assert fmt.format_statements(sources, 40) == [fmt.format_source(s, 40) for s in sources]
    assert fmt.format_statements(sources[:1], 120) == sources[:1]
    assert fmt.format_statements([], 120) == []


def test_a_reconciliation_is_kept_in_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    omni = "class R:\n    def f(self):\n        return still_used()\n"
    args = {"new_upstream": NEW_UPSTREAM, "old_upstream": OLD_UPSTREAM, "upstream_module": UP, "omni": omni}
    first = reimport.reconcile(RUNNER, **args)
    assert first[1] and len(list((tmp_path / "cache" / "derived" / "imports").rglob("*"))) == 2  # a folder, a file

    def recompute(*_args: object) -> None:
        raise AssertionError("reconciled again")

    monkeypatch.setattr(reimport, "_reconcile", recompute)
    assert reimport.reconcile(RUNNER, **args) == first
    # other inputs are another entry
    with pytest.raises(AssertionError, match="reconciled again"):
        reimport.reconcile(RUNNER, **{**args, "old_upstream": None})
