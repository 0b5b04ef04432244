"""Property tests: the patch parser on random and mutated real input, adopt then build on random runners.

The merge's own property (no omni block lost or duplicated on random upstream edits) lives in
tests/test_merge.py; the parser's fuzzing on a synthetic format-patch in tests/test_patchfile.py.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_patchfile import mutate, parse_or_one_line_error

from patch_queue.commands import adopt, write
from patch_queue.errors import PqError
from patch_queue.project.workspace import open_workspace

# ---------------------------------------------------------------------------------------------
# (a) the parser: it parses, or raises PatchError with one line that names the file (the oracle and
# the mutations are test_patchfile's, here on the real series and on patch-like token soup)

PATH = "patches/fuzz.patch"


@pytest.fixture(scope="module")
def real_patches(adopted_030_once: Path) -> list[bytes]:
    """The series pq adopt makes of vllm-omni 0.30.0 (real omni code and real upstream context): the session's
    adoption, read only."""
    out = [p.read_bytes() for p in sorted((adopted_030_once / "patches").glob("*.patch"))]
    assert len(out) > 10
    for data in out:  # the seeds themselves parse
        assert parse_or_one_line_error(data, PATH) is not None
    return out


_PATCHLIKE = st.lists(
    st.one_of(
        st.sampled_from(
            [
                b"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n",
                b"From: A <a@b.c>\n",
                b"Date: Thu, 1 Jan 1970 00:00:00 +0000\n",
                b"Subject: [PATCH] x\n",
                b"\n",
                b"---\n",
                b"diff --git a/m.py b/m.py\n",
                b"index 1111111..2222222 100644\n",
                b"--- a/m.py\n",
                b"+++ b/m.py\n",
                b"--- /dev/null\n",
                b"new file mode 100644\n",
                b"deleted file mode 100644\n",
                b"@@ -1 +1 @@\n",
                b"@@ -1,2 +1,3 @@\n",
                b"@@ -0,0 +1 @@\n",
                b" ctx\n",
                b"-old\n",
                b"+new\n",
                b"\\ No newline at end of file\n",
                b"-- \n",
                b"2.39.5\n",
                b"rename from a\n",
                b"rename to b\n",
                b"GIT binary patch\n",
                b"literal 0\n",
                b"Binary files a/x and b/x differ\n",
                b"\r\n",
                b"=?utf-8?q?=C3=BC?=\n",
            ]
        ),
        st.binary(max_size=12),
    ),
    max_size=40,
).map(b"".join)


@settings(max_examples=4000, deadline=None)
@given(st.one_of(st.binary(max_size=3000), _PATCHLIKE))
def test_parser_on_random_bytes(data: bytes) -> None:
    parse_or_one_line_error(data, PATH)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_parser_on_mutated_real_patches(real_patches: list[bytes], data: st.DataObject) -> None:
    parse_or_one_line_error(mutate(data.draw(st.sampled_from(real_patches)), data, 4), PATH)


# ---------------------------------------------------------------------------------------------
# (b) adopt then build is the identity on random runner-like modules

_FENCES = [
    "# -------------------------------------- Omni-new -------------------------------------------------",
    "# ---------------------------------------Omni-new----------------------------------------------",
]


@st.composite
def _statement(draw: st.DrawFn, j: int) -> list[str]:
    """One upstream statement (lines without the method indentation), in ruff's layout."""
    n = draw(st.integers(0, 99))
    kind = draw(st.sampled_from(["assign", "call", "if", "for"]))
    if kind == "assign":
        return [f"v{j} = self.a{n} + {n}"]
    if kind == "call":
        return [f"self.buf{n}.append(v{max(j - 1, 0)})"]
    if kind == "if":
        return [f"if self.flag{n}:", f"    v{j} = {n}", "else:", f"    v{j} = -{n}"]
    return [f"for i{j} in range({n}):", f"    self.acc{j} += i{j}"]


@st.composite
def _runner(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    """(upstream model_runner_v1.py, downstream modules) with omni blocks in copies of upstream methods."""
    n_methods = draw(st.integers(2, 5))
    methods: list[tuple[str, list[list[str]]]] = []
    for m in range(n_methods):
        stmts = [draw(_statement(j)) for j in range(draw(st.integers(2, 6)))]
        methods.append((f"step_{m}", stmts))

    def render(name: str, stmts: list[list[str]], extra: str = "") -> str:
        body = "".join("        " + line + "\n" for stmt in stmts for line in stmt)
        return f"    def {name}(self, batch{extra}):\n" + body + "        return batch\n"

    upstream = "import torch\n\n\nclass NPUModelRunner:\n    def __init__(self):\n        self.a = 1\n\n" + "\n".join(
        render(n, s) for n, s in methods
    )
    carried = draw(st.lists(st.sampled_from(range(n_methods)), min_size=1, max_size=n_methods, unique=True))
    down_methods: list[str] = []
    for m in carried:
        name, stmts = methods[m]
        stmts = [list(s) for s in stmts]
        fence = draw(st.sampled_from(_FENCES))
        # omni blocks between statements (at the method's indentation), or inside an if/for body
        for k in sorted(draw(st.lists(st.integers(0, len(stmts)), max_size=3)), reverse=True):
            block = [fence] + [f"omni_{k}_{i} = self.omni_hook({i})" for i in range(draw(st.integers(1, 3)))] + [fence]
            stmts.insert(k, block)
        for stmt in stmts:
            if len(stmt) > 1 and stmt[0].startswith(("if ", "for ")) and draw(st.booleans()):
                stmt.insert(2, "    " + fence)
                stmt.insert(3, "    self.omni_inner = True")
                stmt.insert(4, "    " + fence)
        if draw(st.booleans()):  # a one-line omni edit with an inline tag
            i = draw(st.integers(0, len(stmts) - 1))
            if len(stmts[i]) == 1 and stmts[i][0].startswith("v"):
                stmts[i] = [stmts[i][0] + " * self.omni_scale  # Omni-new"]
        down_methods.append(render(name, stmts))
    if draw(st.booleans()):
        down_methods.insert(
            draw(st.integers(0, len(down_methods))), "    def omni_only(self):\n        return self.omni_hook(0)\n"
        )
    down = (
        "import torch\n\nfrom vllm_ascend.worker.model_runner_v1 import NPUModelRunner\n\n\n"
        "class OmniNPUModelRunner(NPUModelRunner):\n" + "\n".join(down_methods)
    )
    modules = {"npu_model_runner.py": down}
    if draw(st.booleans()):
        modules["npu_omni_worker.py"] = "class OmniWorker:\n    pass\n"
    return upstream, modules


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("adopt-identity")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_runner())
def test_adopt_then_build_is_the_identity(scratch: Path, runner: tuple[str, dict[str, str]]) -> None:
    upstream, modules = runner
    for text in [upstream, *modules.values()]:
        ast.parse(text)  # well-formed Python
    work = Path(tempfile.mkdtemp(dir=scratch))
    try:
        up = work / "up" / "vllm_ascend" / "worker"
        up.mkdir(parents=True)
        (up / "model_runner_v1.py").write_text(upstream)
        down = work / "down"
        down.mkdir()
        for name, text in modules.items():
            (down / name).write_text(text)
        proj = work / "p"
        proj.mkdir()
        subprocess.run(["git", "init", "-q", str(proj)], check=True)
        ws = open_workspace(proj)
        try:
            res = adopt.do_adopt(ws, str(down), upstream_git=None, at=str(work / "up"), force=False)
        except PqError as exc:  # adopt may refuse an input, but only with one line
            assert "\n" not in str(exc)
            pytest.fail(f"adopt refused a well-formed runner: {exc}")
        event(f"{len(res.carried)} carried method(s), {len(res.patches)} patches")
        # forget everything but patches/ and rebuild from the patch files alone
        ws.repo.update_refs({r: (c, None) for r, c in ws.repo.refs().items()}, "test")
        shutil.rmtree(ws.out)
        ws = open_workspace(proj)
        write.do_build(ws, out=None, standalone_pkg=False, upstream_git=None)
        built = {p.name: p.read_text() for p in ws.out.glob("*.py")}
        assert built == modules
    finally:
        shutil.rmtree(work, ignore_errors=True)
