"""The latent defects of issue 49 (point 5), each with the behaviour that could fail.

- A class header over several lines (``class GPUModelRunner(\\n    A,\\n    B,\\n):``): the adopt search's scan
  (:func:`patch_queue.merge.symbols.scan_methods`) finds every method, on a synthetic file and on vLLM's real
  ``vllm/v1/worker/gpu_model_runner.py`` (the 0.30.0 sdist, from the registry through pip's configuration).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from patch_queue.errors import SourceError
from patch_queue.merge import symbols
from patch_queue.series import adopt

# -- a class header over several lines -------------------------------------------------------------------------

MULTI = """import x


class Runner(
    Base,
    Mixin,  # a comment (with an unbalanced parenthesis
    metaclass=Meta,
):
    attr = 1

    # glued comment
    @decorator
    def first(self,
              a):
        return a

    def second(self):
        \"\"\"Doc.\"\"\"
        pass


def helper():
    return 1
"""


def _exact(source: str, cls: str) -> dict[str, str]:
    return {k.split(".", 1)[1]: v.text for k, v in symbols.symbols_ast(source).items() if k.startswith(cls + ".")}


def test_scan_methods_reads_a_class_header_over_several_lines() -> None:
    scanned = symbols.scan_methods(MULTI, "Runner")
    assert list(scanned) == ["first", "second"]
    assert scanned == _exact(MULTI, "Runner")
    # the slow path (other line breaks) reads the same header the same way
    crlf = symbols.scan_methods(MULTI.replace("\n", "\r\n"), "Runner")
    assert {k: v.replace("\r\n", "\n") for k, v in crlf.items()} == scanned
    # a header on one line is read as before, and one that does not tokenize as its first line alone
    one_line = MULTI.replace("class Runner(\n    Base,\n    Mixin,  # a comment (with an unbalanced parenthesis\n", "")
    one_line = one_line.replace("    metaclass=Meta,\n):", "class Runner(Base, metaclass=Meta):")
    assert symbols.scan_methods(one_line, "Runner") == _exact(one_line, "Runner")
    unclosed = 'class Runner("\n    def f(self):\n        pass\n'  # an unterminated string: the first line alone
    assert symbols.scan_methods(unclosed, "Runner") == {"f": "    def f(self):\n        pass\n"}


def _module(body: str) -> str:
    return f"class Runner(\n    Base,\n    Mixin,\n):\n{body}"


def test_the_adopt_search_scores_revisions_with_a_header_over_several_lines() -> None:
    """The downstream copies match the older revision; the newer one rewrote both methods.  Read only up to the
    header, every revision scored 0/0 and the tie went to the newest."""
    old = _module("    def go(self, a):\n        x = a + 1\n        y = x * 2\n        return y\n")
    old += "\n    def stop(self):\n        self.done = True\n        return None\n"
    new = _module("    def go(self, a):\n        return a\n\n    def stop(self):\n        raise RuntimeError\n")
    down = "class Mine(Runner):\n" + old.split("):\n", 1)[1].replace("x * 2", "x * 3")
    texts = {"old": old, "new": new}
    result = adopt.search_base(
        {"mine.py": down},
        ["c-old", "c-new"],
        lambda c: c.removeprefix("c-"),
        lambda _c, blob: symbols.scan_methods(texts[blob], "Runner"),
        {"c-old": 1, "c-new": 2}.__getitem__,
    )
    assert result.best.commit == "c-old"
    assert (result.best.matched, result.best.total) == (6, 7)
    assert result.ties == 1


# -- the real file: vLLM's GPUModelRunner ---------------------------------------------------------------------

VLLM = "0.30.0"  # the vLLM release test_gpu_audit reads too (one download for the run)


@pytest.fixture(scope="module")
def vllm_runner() -> Iterator[str]:
    from patch_queue.checks import gpu_audit

    try:
        yield gpu_audit.load_vllm_runner(VLLM)
    except SourceError as exc:
        if "cannot read package index" in str(exc) or "cannot download" in str(exc):
            pytest.skip(f"package registry unreachable: {exc}")
        raise


@pytest.fixture(scope="module")
def omni_gpu_runners() -> dict[str, str]:
    from patch_queue.sources.archives import release_files

    try:
        files = release_files("vllm-omni", VLLM, "vllm_omni/worker/")
    except SourceError as exc:
        if "cannot read package index" in str(exc) or "cannot download" in str(exc):
            pytest.skip(f"package registry unreachable: {exc}")
        raise
    names = ("gpu_model_runner.py", "gpu_ar_model_runner.py", "gpu_generation_model_runner.py")
    return {k.rsplit("/", 1)[-1]: v.decode("utf-8") for k, v in files.items() if k.rsplit("/", 1)[-1] in names}


def test_the_real_vllm_runner_header_over_several_lines_hides_no_method(vllm_runner: str) -> None:
    assert "\nclass GPUModelRunner(\n    " in vllm_runner  # the layout the defect is about
    scanned = symbols.scan_methods(vllm_runner, "GPUModelRunner")
    exact = _exact(vllm_runner, "GPUModelRunner")
    assert len(exact) > 100
    assert list(scanned) == list(exact)
    assert scanned == {k: v.rstrip("\n") + "\n" for k, v in exact.items()}


def test_the_adopt_search_finds_the_real_vllm_runner(vllm_runner: str, omni_gpu_runners: dict[str, str]) -> None:
    """vllm-omni 0.30.0's GPU runners against two revisions of vLLM's file: the real 0.30.0 one and a newer one
    whose methods all raise (made here from it).  The real one wins with the lines of the carried methods."""
    exact = symbols.symbols_ast(vllm_runner)
    lines = vllm_runner.splitlines(keepends=True)
    for name, sym in sorted(exact.items(), key=lambda kv: -kv[1].start):
        if name.startswith("GPUModelRunner.") and name.count(".") == 1:
            head = next(i for i in range(sym.start - 1, sym.end) if lines[i].lstrip().startswith(("def ", "async ")))
            close = next(i for i in range(head, sym.end) if lines[i].rstrip().endswith(":"))
            lines[close + 1 : sym.end] = ["        raise NotImplementedError\n"]
    hollow = "".join(lines)
    texts = {"real": vllm_runner, "hollow": hollow}
    result = adopt.search_base(
        omni_gpu_runners,
        ["v-real", "v-hollow"],
        lambda c: c.removeprefix("v-"),
        lambda _c, blob: symbols.scan_methods(texts[blob], "GPUModelRunner"),
        {"v-real": 1, "v-hollow": 2}.__getitem__,
    )
    assert result.best.commit == "v-real"
    assert result.best.total > 500 and result.best.matched > result.best.total // 2, result.best
    carried = adopt.classify(omni_gpu_runners, vllm_runner, upstream_path="vllm/v1/worker/gpu_model_runner.py",
                             cls="GPUModelRunner")  # fmt: skip
    assert len([c for c in carried if "." in c.downstream]) >= 8
