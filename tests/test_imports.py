"""Static import resolution (:mod:`patch_queue.checks.imports`): small synthetic trees for each way a
module binds a name, each with one import that resolves and one that does not; then the real
vllm-omni 0.30.0 runners against the sources they were released with."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from patch_queue import presets
from patch_queue.checks.findings import ERROR, Finding
from patch_queue.checks.imports import SourceTree, check_imports, tree_from_release, tree_from_snapshot
from patch_queue.errors import SourceError
from patch_queue.sources.snapshot import resolve_upstream

WORKER = "vllm_omni.platforms.npu.worker"


def tree(files: Mapping[str, str], label: str = "") -> SourceTree:
    return SourceTree({path: text.encode() for path, text in files.items()}, label=label)


def check(text: str, trees: Mapping[str, SourceTree], package: str = "pkg") -> list[tuple[int, str]]:
    """(line, rule) of each finding, after checking that every finding is a well-formed error."""
    found = check_imports(text, file="runner.py", package=package, trees=trees)
    for finding in found:
        assert finding.file == "runner.py" and finding.severity == ERROR
        assert finding.rule in ("import-unresolved", "import-name-unresolved")
        assert "\n" not in finding.message
    return [(f.line, f.rule) for f in found]


NAME = "import-name-unresolved"
MODULE = "import-unresolved"


# -- one module, each binding form --------------------------------------------------------------

# (case, source of pkg/m.py, a name it binds, a name it does not bind)
BINDINGS = [
    ("def", "def f():\n    inner = 1\n", "f", "inner"),
    ("async-def", "async def f():\n    pass\n", "f", "g"),
    ("class", "class C:\n    attr = 1\n    def method(self): ...\n", "C", "attr"),
    ("assign", "X = 1\n", "X", "Y"),
    ("chained-assign", "X = Y = 1\n", "Y", "Z"),
    ("attribute-target", "import os\nos.sep2 = 1\n", "os", "sep2"),
    ("tuple-unpack", "A, (B, *C) = 1, (2, 3, 4)\n", "C", "D"),
    ("list-unpack", "[A, B] = [1, 2]\n", "B", "AB"),
    ("annotated", "X: int = 1\nY: int\n", "X", "Y"),  # Python binds nothing for a bare annotation
    ("augmented", "N = 0\nM += 1\n", "M", "K"),
    ("walrus", "if (W := 1):\n    pass\n", "W", "V"),
    ("walrus-in-comprehension", "ROWS = [(LAST := i) for i in range(3)]\n", "LAST", "i"),
    ("walrus-in-lambda", "F = lambda: (HIDDEN := 1)\n", "F", "HIDDEN"),
    ("for-target", "for I, J in []:\n    K = I\nelse:\n    L = 0\n", "K", "M"),
    ("while", "while False:\n    W = 1\n", "W", "V"),
    ("with-target", "with open(__file__) as (FH):\n    DATA = 1\n", "FH", "FILE"),
    ("if-else", "import sys\nif sys.platform == 'x':\n    A = 1\nelif 0:\n    B = 2\nelse:\n    C = 3\n", "C", "D"),
    (
        "conditional-import-try",
        "try:\n    from json import loads as parse\nexcept ImportError:\n    fallback = None\nfinally:\n    done = 1\n",
        "parse",
        "loads",
    ),
    ("try-else", "try:\n    pass\nexcept Exception:\n    pass\nelse:\n    OK = 1\n", "OK", "NOK"),
    ("except-as", "try:\n    pass\nexcept Exception as err:\n    H = 1\n", "H", "err"),  # Python deletes `err`
    ("conditional-import-if", "import sys\nif sys.version_info >= (3, 11):\n    import os.path\n", "os", "path"),
    ("import-as", "import os.path as osp\n", "osp", "os"),
    ("from-import-as", "from os import path as p\n", "p", "path"),
    (
        "type-checking",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from os import sep\n",
        "sep",
        "pathsep",
    ),
    ("global-in-function", "def init():\n    global CACHE\n    CACHE = {}\n", "CACHE", "init2"),
    ("match", "match 1:\n    case [A, *REST]:\n        pass\n    case {'k': V, **KW}:\n        pass\n", "KW", "k"),
    ("dunder-all-entry", "__all__ = ['lazy']\n", "lazy", "other"),
    ("dunder-all-plus-equals", "__all__ = ['a']\n__all__ += ['b']\n", "b", "c"),
    ("dunder-all-extend", "__all__ = []\n__all__.extend(('b',))\n__all__.append('c')\n", "c", "d"),
    ("module-getattr", "def __getattr__(name):\n    raise AttributeError(name)\n", "anything", None),
    ("nested-def-only", "def outer():\n    def inner():\n        pass\n", "outer", "inner"),
]


@pytest.mark.parametrize(("source", "good", "bad"), [case[1:] for case in BINDINGS], ids=[c[0] for c in BINDINGS])
def test_binding_form(source: str, good: str, bad: str | None) -> None:
    trees = {"pkg": tree({"pkg/__init__.py": "", "pkg/m.py": source})}
    assert check(f"from pkg.m import {good}\n", trees) == []
    if bad is None:  # a module-level __getattr__ binds every name
        assert check("from pkg.m import no_such_name_at_all\n", trees) == []
        assert check("from pkg import m\nfrom pkg import missing\n", trees) == [(2, NAME)]
    else:
        assert check(f"from pkg.m import {good}\nfrom pkg.m import {bad}\n", trees) == [(2, NAME)]


def test_bound_names_of_one_module() -> None:
    source = (
        "import a.b\nimport c.d as e\nfrom f import g as h, i\n"
        "def j(): pass\nclass K: pass\nL, (M, *N) = 1, (2, 3)\nO: int = 1\nP: int\n"
        "__all__ = ['Q']\n"
    )
    pkg = tree({"pkg/__init__.py": "", "pkg/m.py": source})
    assert pkg.bound_names("pkg.m") == frozenset({"a", "e", "h", "i", "j", "K", "L", "M", "N", "O", "Q", "__all__"})
    assert pkg.bound_names("pkg.m") is pkg.bound_names("pkg.m")  # cached
    assert pkg.bound_names("pkg.nope") is None


# -- star imports ---------------------------------------------------------------------------------


def test_star_import_with_dunder_all() -> None:
    trees = {
        "pkg": tree(
            {
                "pkg/__init__.py": "",
                "pkg/src.py": "__all__ = ['public', '_listed']\npublic = 1\n_listed = 2\nunlisted = 3\n",
                "pkg/m.py": "from pkg.src import *\n",
            }
        )
    }
    assert check("from pkg.m import public, _listed\n", trees) == []
    assert check("from pkg.m import unlisted\n", trees) == [(1, NAME)]


def test_star_import_without_dunder_all() -> None:
    trees = {
        "pkg": tree(
            {
                "pkg/__init__.py": "",
                "pkg/src.py": "import os\npublic = 1\n_private = 2\n",
                "pkg/m.py": "from .src import *\n",  # relative, resolved against pkg
            }
        )
    }
    assert check("from pkg.m import public, os\n", trees) == []
    assert check("from pkg.m import _private\n", trees) == [(1, NAME)]


def test_star_import_follows_dunder_all_plus_equals_and_chains() -> None:
    files = {
        "pkg/__init__.py": "from pkg.mid import *\n",
        "pkg/mid.py": "from pkg.low import *\n__all__ = ['m1']\n__all__ += ['m2']\nm1 = m2 = 0\nm3 = 0\n",
        "pkg/low.py": "deep = 1\n",
    }
    trees = {"pkg": tree(files)}
    assert check("from pkg import m1, m2\nfrom pkg.mid import deep\nfrom pkg import low\n", trees) == []
    # mid's __all__ decides what its star exports: deep and m3 are bound in mid but not listed.
    assert check("from pkg import m3\nfrom pkg import deep\n", trees) == [(1, NAME), (2, NAME)]


def test_star_import_cycle_terminates() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import *\nA = 1\n",
        "pkg/b.py": "from pkg.a import *\nB = 1\n",
        "pkg/c.py": "from pkg.c import *\nC = 1\n",
    }
    pkg = tree(files)
    assert pkg.bound_names("pkg.a") == frozenset({"A", "B"})
    assert pkg.bound_names("pkg.b") == frozenset({"A", "B"})
    assert pkg.bound_names("pkg.c") == frozenset({"C"})
    assert check("from pkg.a import A, B\nfrom pkg.c import C\nfrom pkg.a import Z\n", {"pkg": pkg}) == [(3, NAME)]


def test_star_import_across_trees() -> None:
    ascend = tree({"vllm_ascend/__init__.py": "", "vllm_ascend/m.py": "from vllm.src import *\n"})
    vllm = tree({"vllm/__init__.py": "", "vllm/src.py": "__all__ = ['x']\nx = y = 1\n"})
    trees = {"vllm_ascend": ascend, "vllm": vllm}
    assert check("from vllm_ascend.m import x\n", trees) == []
    assert check("from vllm_ascend.m import y\n", trees) == [(1, NAME)]
    # Without vllm's sources the star import may bind anything: nothing to report.
    assert check("from vllm_ascend.m import y\n", {"vllm_ascend": ascend}) == []


def test_star_import_of_computed_dunder_all_or_unparsable_module_is_lenient() -> None:
    files = {
        "pkg/__init__.py": "",
        "pkg/computed.py": "_names = ['a']\n__all__ = list(_names)\n",
        "pkg/broken.py": "def (:\n",
        "pkg/m.py": "from pkg.computed import *\n",
        "pkg/n.py": "from pkg.broken import *\n",
        "pkg/plain.py": "x = 1\n",
    }
    trees = {"pkg": tree(files)}
    lenient = "from pkg.m import whatever\nfrom pkg.n import whatever\nfrom pkg.broken import whatever\n"
    assert check(lenient, trees) == []
    assert trees["pkg"].is_open("pkg.broken") and not trees["pkg"].is_open("pkg.plain")
    assert check("from pkg.plain import y\n", trees) == [(1, NAME)]


# -- modules, packages, submodules ---------------------------------------------------------------


def test_module_path_and_submodules() -> None:
    pkg = tree(
        {
            "pkg/__init__.py": "",
            "pkg/mod.py": "",
            "pkg/both.py": "",
            "pkg/both/__init__.py": "",
            "pkg/sub/__init__.py": "",
            "pkg/sub/leaf.py": "",
            "pkg/ns/deep/leaf.py": "",  # namespace packages: no __init__.py
            "pkg/data/readme.txt": "",
        }
    )
    assert pkg.module_path("pkg") == "pkg/__init__.py"
    assert pkg.module_path("pkg.mod") == "pkg/mod.py"
    assert pkg.module_path("pkg.both") == "pkg/both/__init__.py"  # a package wins, as in Python
    assert pkg.module_path("pkg.sub.leaf") == "pkg/sub/leaf.py"
    assert pkg.module_path("pkg.ns") == "pkg/ns/"
    assert pkg.module_path("pkg.ns.deep.leaf") == "pkg/ns/deep/leaf.py"
    assert pkg.module_path("pkg.data") is None  # a folder without sources is no package
    assert pkg.module_path("pkg.nope") is None
    assert pkg.module_path("pkg.mod.x") is None
    assert pkg.has_submodule("pkg", "sub") and pkg.has_submodule("pkg.sub", "leaf")
    assert not pkg.has_submodule("pkg", "nope") and not pkg.has_submodule("pkg.mod", "x")
    assert pkg.bound_names("pkg.ns") == frozenset()


def test_submodule_imports() -> None:
    trees = {"pkg": tree({"pkg/__init__.py": "", "pkg/sub/__init__.py": "", "pkg/sub/leaf.py": "X = 1\n"})}
    good = "import pkg.sub.leaf\nimport pkg.sub.leaf as leaf\nfrom pkg import sub\nfrom pkg.sub import leaf\n"
    assert check(good, trees) == []
    bad = "import pkg.sub.nope\nfrom pkg import nope\nfrom pkg.sub.nope import X\nfrom pkg.sub.leaf import Y\n"
    assert check(bad, trees) == [(1, MODULE), (2, NAME), (3, MODULE), (4, NAME)]


def test_unresolved_module_message_names_the_missing_part() -> None:
    trees = {"pkg": tree({"pkg/__init__.py": "", "pkg/a/__init__.py": ""}, label="pkg 1.0")}
    [finding] = check_imports("from pkg.a.b.c import x\n", file="r.py", package="pkg", trees=trees)
    assert finding == Finding(
        "r.py", 1, MODULE, ERROR, "from pkg.a.b.c import: no module named 'pkg.a.b.c' in pkg 1.0: pkg.a has no b"
    )
    [finding] = check_imports("from pkg.a import x\n", file="r.py", package="pkg", trees=trees)
    assert finding.message == "cannot import name 'x' from 'pkg.a' (pkg/a/__init__.py in pkg 1.0)"


# -- where imports sit in the checked module -----------------------------------------------------


def test_relative_imports() -> None:
    trees = {
        "vllm_omni": tree(
            {
                "vllm_omni/__init__.py": "",
                "vllm_omni/platforms/__init__.py": "",
                "vllm_omni/platforms/npu/__init__.py": "",
                "vllm_omni/platforms/npu/foo.py": "y = 1\n",
                "vllm_omni/platforms/npu/worker/__init__.py": "",
                "vllm_omni/platforms/npu/worker/npu_model_runner.py": "class X: ...\n",
            }
        )
    }
    good = "from .npu_model_runner import X\nfrom ..foo import y\nfrom . import npu_model_runner\nfrom .. import foo\n"
    assert check(good, trees, WORKER) == []
    bad = (
        "from .npu_model_runner import Z\n"
        "from ..foo import z\n"
        "from .nope import X\n"
        "from ...nope import y\n"
        "from . import nope\n"
        "from ..... import beyond\n"
    )
    assert check(bad, trees, WORKER) == [(1, NAME), (2, NAME), (3, MODULE), (4, MODULE), (5, NAME), (6, MODULE)]


def test_imports_in_functions_type_checking_and_try() -> None:
    trees = {"pkg": tree({"pkg/__init__.py": "", "pkg/m.py": "A = 1\n"})}
    text = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.m import A\n"
        "    from pkg.m import B\n"
        "try:\n"
        "    from pkg.m import C\n"
        "except ImportError:\n"
        "    import pkg.fallback\n"
        "def f():\n"
        "    from pkg.m import A\n"
        "    from pkg.m import D\n"
        "class K:\n"
        "    def g(self):\n"
        "        import pkg.m\n"
        "        import pkg.gone\n"
    )
    assert check(text, trees) == [(4, NAME), (6, NAME), (8, MODULE), (11, NAME), (15, MODULE)]


def test_multiline_from_import_points_at_the_name() -> None:
    trees = {"pkg": tree({"pkg/__init__.py": "", "pkg/m.py": "a = c = 1\n"})}
    assert check("from pkg.m import (\n    a,\n    b,\n    c,\n)\n", trees) == [(3, NAME)]


def test_packages_without_a_tree_are_not_checked() -> None:
    trees = {"pkg": tree({"pkg/__init__.py": ""})}
    text = "import numpy.nothing\nfrom torch import nothing\nfrom pkg_other.x import y\nimport pkg\n"
    assert check(text, trees) == []
    # A module of a package without a tree: its relative imports are not checked either.
    assert check("from . import anything\nfrom .. import x\n", trees, package="npu_worker") == []


def test_module_that_does_not_parse_yields_nothing() -> None:
    # The `parse` check of pq check reports it; imports are not guessed at.
    assert check("from pkg.m import (\n", {"pkg": tree({"pkg/__init__.py": ""})}) == []


# -- the real runners ----------------------------------------------------------------------------

ASCEND_COMMIT = "cf0baa38dfb2"  # public vllm-ascend commit vllm-omni 0.30.0 was built against
NPU_MODULES = [
    "__init__.py",
    "base.py",
    "npu_ar_model_runner.py",
    "npu_ar_worker.py",
    "npu_generation_model_runner.py",
    "npu_generation_worker.py",
    "npu_model_runner.py",
]
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def real_trees(corpus: Path) -> Iterator[dict[str, SourceTree]]:
    """vllm-ascend at the declared commit (from the corpus bundle), vllm and vllm-omni 0.30.0 (registry)."""
    start = time.perf_counter()
    snapshot = resolve_upstream(
        ASCEND_COMMIT, upstream_git=str(corpus / "vllm-ascend.bundle"), progress=lambda _: None, queue=presets.NPU
    )
    ascend = tree_from_snapshot(snapshot, "vllm_ascend/")
    TIMINGS["vllm_ascend"] = time.perf_counter() - start
    try:
        start = time.perf_counter()
        vllm = tree_from_release("vllm", "0.30.0", "vllm/")
        TIMINGS["vllm"] = time.perf_counter() - start
        start = time.perf_counter()
        omni = tree_from_release("vllm-omni", "0.30.0", "vllm_omni/")
        TIMINGS["vllm_omni"] = time.perf_counter() - start
    except SourceError as exc:
        if "cannot read package index" in str(exc) or "cannot download" in str(exc):
            pytest.skip(f"package registry unreachable: {exc}")
        raise
    yield {"vllm_ascend": ascend, "vllm": vllm, "vllm_omni": omni}


def _check_runners(
    corpus: Path, trees: Mapping[str, SourceTree], texts: Mapping[str, str] | None = None
) -> list[Finding]:
    folder = corpus / "vllm-omni-0.30.0" / "npu"
    found: list[Finding] = []
    for name in NPU_MODULES:
        text = texts[name] if texts and name in texts else (folder / name).read_text()
        found += check_imports(text, file=name, package=WORKER, trees=trees)
    return found


def test_real_runners_resolve_against_their_sources(corpus: Path, real_trees: dict[str, SourceTree]) -> None:
    """Every import of the seven NPU modules of vllm-omni 0.30.0 resolves: no findings."""
    assert sorted(p.name for p in (corpus / "vllm-omni-0.30.0" / "npu").glob("*.py")) == NPU_MODULES
    assert real_trees["vllm_ascend"].module_path("vllm_ascend.worker.model_runner_v1") is not None
    assert len(real_trees["vllm"]) > 2000 and len(real_trees["vllm_omni"]) > 1000
    start = time.perf_counter()
    found = _check_runners(corpus, real_trees)
    TIMINGS["check"] = time.perf_counter() - start
    assert found == []
    print("timings (s):", {k: round(v, 2) for k, v in TIMINGS.items()})


def test_real_runner_with_planted_imports(corpus: Path, real_trees: dict[str, SourceTree]) -> None:
    """Two planted bad imports in npu_model_runner.py are exactly the two findings added."""
    name = "npu_model_runner.py"
    lines = (corpus / "vllm-omni-0.30.0" / "npu" / name).read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("from vllm_ascend.worker.model_runner_v1 import"))
    planted = [
        "from vllm_ascend.worker.model_runner_v1 import NoSuchThing\n",
        "import vllm_ascend.no_such_module\n",
    ]
    text = "".join(lines[: at + 1] + planted + lines[at + 1 :])
    before = _check_runners(corpus, real_trees)
    after = _check_runners(corpus, real_trees, {name: text})
    shifted = [
        Finding(f.file, f.line + 2 if f.file == name and f.line > at + 1 else f.line, f.rule, f.severity, f.message)
        for f in before
    ]
    added = [f for f in after if f not in shifted]
    assert sorted(shifted) == sorted(f for f in after if f in shifted)
    assert [(f.file, f.line, f.rule) for f in added] == [(name, at + 2, NAME), (name, at + 3, MODULE)]
    assert "'NoSuchThing'" in added[0].message and "vllm_ascend/worker/model_runner_v1.py" in added[0].message
    assert "'vllm_ascend.no_such_module'" in added[1].message


def test_real_runners_against_an_older_vllm_ascend(corpus: Path, real_trees: dict[str, SourceTree]) -> None:
    """Against vllm-ascend v0.11.0rc0 the 0.30.0 runners import what that release did not have yet."""
    snapshot = resolve_upstream("v0.11.0rc0", upstream_git=str(corpus / "vllm-ascend.bundle"), queue=presets.NPU)
    trees = {**real_trees, "vllm_ascend": tree_from_snapshot(snapshot, "vllm_ascend/")}
    found = {(f.file, f.line, f.rule) for f in _check_runners(corpus, trees)}
    assert found == {
        ("base.py", 11, MODULE),  # vllm_ascend._310p came later
        ("base.py", 13, MODULE),  # vllm_ascend.worker.worker (was worker_v1)
        ("npu_model_runner.py", 33, MODULE),
        ("npu_ar_model_runner.py", 42, NAME),  # update_cos_sin
        ("npu_ar_model_runner.py", 43, NAME),  # global_stream
        ("npu_generation_model_runner.py", 32, NAME),  # using_paged_attention
        ("npu_generation_model_runner.py", 33, NAME),
        ("npu_generation_model_runner.py", 35, NAME),  # SEQ_LEN_WITH_MAX_PA_WORKSPACE
        ("npu_model_runner.py", 19, NAME),
        ("npu_model_runner.py", 20, NAME),
        ("npu_model_runner.py", 22, NAME),
    }
