"""The latent defects of issue 49 (point 5), each with the behaviour that could fail.

- A class header over several lines (``class GPUModelRunner(\\n    A,\\n    B,\\n):``): the adopt search's scan
  (:func:`patch_queue.merge.symbols.scan_methods`) finds every method, on a synthetic file and on vLLM's real
  ``vllm/v1/worker/gpu_model_runner.py`` (the 0.30.0 and 0.23.0 sdists, from the registry through pip's
  configuration): vllm-omni 0.24.0's GPU runners find 0.23.0, not the newer 0.30.0.
- A class-name mismatch between the runners and the upstream file: one line, an error when nothing is carried.
- A folder holding both ``npu/`` and ``gpu/``: the queue's own is read (``npu/`` for the npu queue, ``gpu/`` for
  the gpu queue), and a line says so and why; a queue of another package set by options refuses it in one line.
- ``pq sync-gpu --omni X`` on a series adopted from a folder, which pins no release to start the delta from: one
  line, and the downstream pin is not moved (it was moved from none to X while the sync said "nothing to do").
- ``pq merge vllm-omni==X --since Y`` on the gpu queue reads the release's GPU runners, not its NPU modules.
- The relative imports of the upstream file resolve against the package its path names
  (:func:`patch_queue.series.reimport.module_of`), vllm-ascend's as before and vLLM's ``vllm.v1.worker`` too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import new_project, pq, state
from test_errors import one_error_line

from patch_queue import presets
from patch_queue.errors import SourceError
from patch_queue.merge import symbols
from patch_queue.presets import NPU
from patch_queue.series import adopt, reimport

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


def test_adopt_searches_a_history_whose_class_header_spans_several_lines(tmp_path: Path) -> None:
    """`pq adopt` end to end on an upstream git history of two revisions, both opening the class over four lines:
    the older one, which the runners copy, is found with its score; no warning."""
    from conftest import git

    repo = tmp_path / "upstream"
    (repo / UPSTREAM).parent.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    header = "import os\n\n\nclass NPUModelRunner(\n    Base,\n    Mixin,\n):\n"
    for i, body in enumerate((_methods(4), _methods(4).replace("z = y - ", "z = y + "))):
        (repo / UPSTREAM).write_text(header + body)
        git(repo, "add", "-A")
        git(
            repo,
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@example.org",
            "commit",
            "-qm",
            f"r{i}",
            "--date",
            f"{i + 1}0000 +0000",
        )
    old = git(repo, "rev-parse", "HEAD~1").strip()
    down = _runners(tmp_path / "down", "NPUModelRunner")
    proj = new_project(tmp_path / "p")
    out = pq(proj, "adopt", str(down), "--upstream", str(repo)).stdout
    base = next(line for line in out.splitlines() if line.startswith("upstream base: "))
    assert f"(public {old[:12]}), score 16/20 lines" in base, out
    assert "warning" not in out and out.count("carried: npu_model_runner.py OmniNPUModelRunner.step") == 4


def test_a_search_that_read_no_method_says_the_base_is_a_guess() -> None:
    """Should the line scan ever miss the class again (every revision 0/0, the newest taken) while the base's syntax
    tree carries methods, adopt says so in a warning instead of taking the newest without a word."""
    from patch_queue.commands.adopt import search_warnings

    def result(matched: int, total: int) -> adopt.SearchResult:
        best = adopt.Candidate("c-new", matched, total, 2)
        return adopt.SearchResult(best, 2, 2, (best, adopt.Candidate("c-old", matched, total, 1)))

    carried = [adopt.Carried("m.py", "Mine.go", "Runner.go", 0.9), adopt.Carried("m.py", "helper", "helper", 1.0)]
    assert search_warnings(result(0, 0), carried, "up.py", "Runner", "git c-new") == (
        "up.py: the search read no method of Runner the runners define in any of 2 revision(s) (each scored 0/0; the "
        "newest, git c-new, was taken), yet 1 method(s) are carried from it: the base is a guess; name it with --at",
    )
    assert search_warnings(result(5, 7), carried, "up.py", "Runner", "git c-new") == ()  # a real score
    assert search_warnings(None, carried, "up.py", "Runner", "git c-new") == ()  # --at: no search
    assert search_warnings(result(0, 0), carried[1:], "up.py", "Runner", "git c-new") == ()  # no method carried


# -- the real file: vLLM's GPUModelRunner ---------------------------------------------------------------------

VLLM = "0.30.0"  # the vLLM release test_gpu_audit reads too (one download for the run)


@pytest.fixture(scope="module")
def vllm_runner() -> Iterator[str]:
    from patch_queue.checks import gpu_audit

    try:
        yield gpu_audit.load_vllm_runner(VLLM, queue=presets.NPU)
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


def test_the_adopt_search_finds_vllm_0_23_0_for_vllm_omni_0_24_0s_gpu_runners(vllm_runner: str, corpus: Path) -> None:
    """The issue's measurement, on two real releases: vllm-omni 0.24.0's GPU runners (the corpus's gpu/) match vLLM
    0.23.0's GPUModelRunner better than 0.30.0's.  Both files open the class over two lines (``class
    GPUModelRunner(\n    LoRAModelRunnerMixin, ...\n):``); read only up to the header, both scored 0/0 and the tie
    went to the newest, 0.30.0."""
    from patch_queue.checks import gpu_audit

    try:
        old = gpu_audit.load_vllm_runner("0.23.0", queue=presets.NPU)
    except SourceError as exc:
        if "cannot read package index" in str(exc) or "cannot download" in str(exc):
            pytest.skip(f"package registry unreachable: {exc}")
        raise
    texts = {"0.23.0": old, VLLM: vllm_runner}
    for text in texts.values():
        assert "\nclass GPUModelRunner(\n    LoRAModelRunnerMixin," in text
        assert list(symbols.scan_methods(text, "GPUModelRunner")) == list(_exact(text, "GPUModelRunner"))
    down = {p.name: p.read_text() for p in sorted((corpus / "vllm-omni-0.24.0" / "gpu").glob("*.py"))}
    result = adopt.search_base(
        down,
        list(texts),
        lambda version: version,
        lambda _c, version: symbols.scan_methods(texts[version], "GPUModelRunner"),
        {"0.23.0": 1, VLLM: 2}.__getitem__,
    )
    best, other = result.ranking
    assert (best.commit, other.commit) == ("0.23.0", VLLM)
    assert best.total > 2000 and best.matched > other.matched > best.total // 2, result.ranking


# -- a class-name mismatch ----------------------------------------------------------------------------------------

UPSTREAM = "vllm_ascend/worker/model_runner_v1.py"


def _methods(n: int, edit: str = "") -> str:
    return "\n".join(
        f"    def step{i}(self, a):\n        x = a + {i}\n        y = x * {i + 2}{edit}\n        z = y - {i}\n"
        "        return z\n"
        for i in range(n)
    )


def _upstream(root: Path, cls: str) -> Path:
    path = root / UPSTREAM
    path.parent.mkdir(parents=True)
    path.write_text(f"import os\n\n\nclass {cls}:\n    def __init__(self):\n        self.a = 1\n\n" + _methods(4))
    return root


def _runners(folder: Path, base: str, edit: str = " + self.omni") -> Path:
    folder.mkdir(parents=True)
    (folder / "npu_model_runner.py").write_text(
        f"import os\n\n\nclass OmniNPUModelRunner({base}):\n    omni = 3\n\n" + _methods(4, edit)
    )
    (folder / "npu_omni_helpers.py").write_text("def helper():\n    return 'omni'\n")
    return folder


def test_an_upstream_file_without_the_upstream_class_is_one_error(tmp_path: Path) -> None:
    """The runners subclass GPUModelRunner, which the upstream file has, instead of NPUModelRunner, which it lacks:
    nothing can be carried, so adopt stops with one line naming the class and the file, and writes nothing."""
    up = _upstream(tmp_path / "up", "GPUModelRunner")
    down = _runners(tmp_path / "down", "GPUModelRunner")
    proj = new_project(tmp_path / "p")
    before = state(proj)
    line = one_error_line(pq(proj, "adopt", str(down), "--at", str(up), check=1))
    assert line.startswith(
        f"pq: error: {UPSTREAM}: has no class NPUModelRunner, the class the runners' methods are carried "
    )
    assert "the runners subclass GPUModelRunner, which it has" in line
    assert line.endswith("nothing can be carried, so there is no series to adopt")
    assert state(proj) == before


def test_runners_naming_another_class_are_one_error_when_nothing_is_carried(tmp_path: Path) -> None:
    """The upstream file has NPUModelRunner; the runners subclass GPUModelRunner and share no method text with it:
    the error names the runner file and the line of its class."""
    up = _upstream(tmp_path / "up", "NPUModelRunner")
    down = tmp_path / "down"
    down.mkdir()
    (down / "gpu_model_runner.py").write_text(
        "class OmniGPUModelRunner(GPUModelRunner):\n"
        + "\n".join(f"    def step{i}(self, *args):\n        return self.gpu(*args, {i})\n" for i in range(4))
    )
    proj = new_project(tmp_path / "p")
    line = one_error_line(pq(proj, "adopt", str(down), "--at", str(up), check=1))
    assert line.startswith(
        f"pq: error: {down}/gpu_model_runner.py:1: class OmniGPUModelRunner subclasses GPUModelRunner, not "
    )
    assert f"NPUModelRunner: {UPSTREAM} has no class GPUModelRunner (upstream at " in line
    assert line.endswith("nothing can be carried, so there is no series to adopt")
    assert not (proj / "patches").exists()


def test_runners_naming_another_class_warn_when_methods_are_carried_by_name(tmp_path: Path) -> None:
    up = _upstream(tmp_path / "up", "NPUModelRunner")
    down = _runners(tmp_path / "down", "GPUModelRunner")
    proj = new_project(tmp_path / "p")
    out = pq(proj, "adopt", str(down), "--at", str(up)).stdout
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, out
    assert warnings[0].startswith(f"warning: {down}/npu_model_runner.py:4: class OmniNPUModelRunner subclasses ")
    assert warnings[0].endswith(": 4 method(s) and 0 top-level symbol(s) carried by name alone")
    assert out.count("carried: npu_model_runner.py") == 4
    # the runners that subclass the upstream class adopt as before, without a word
    other = new_project(tmp_path / "q")
    agreed = _runners(tmp_path / "agreed", "NPUModelRunner")
    out = pq(other, "adopt", str(agreed), "--at", str(up)).stdout
    assert "warning" not in out and out.count("carried: npu_model_runner.py") == 4


# -- a folder holding both npu/ and gpu/ ------------------------------------------------------------------------


def test_a_folder_with_npu_and_gpu_reads_npu_and_says_so(tmp_path: Path) -> None:
    up = _upstream(tmp_path / "up", "NPUModelRunner")
    release = tmp_path / "release"
    _runners(release / "npu", "NPUModelRunner")
    gpu = release / "gpu"
    gpu.mkdir()
    (gpu / "gpu_model_runner.py").write_text("class OmniGPUModelRunner(GPUModelRunner):\n    pass\n")
    proj = new_project(tmp_path / "p")
    done = pq(proj, "adopt", str(release), "--at", str(up))
    said = [line for line in done.stderr.splitlines() if "gpu/" in line]
    assert said == [
        f"Reading {release}/npu: {release} holds both npu/ and gpu/, and this queue's runners are the NPU ones "
        "(copies of vllm-ascend's NPUModelRunner); gpu/ is not read"
    ]
    assert sorted(p.name for p in (proj / "npu_worker").glob("*.py")) == ["npu_model_runner.py", "npu_omni_helpers.py"]
    # npu/ alone: read without a word about it; gpu/ alone: nothing is read, and the error says why
    only_npu = tmp_path / "only-npu"
    _runners(only_npu / "npu", "NPUModelRunner")
    quiet = pq(new_project(tmp_path / "q"), "adopt", str(only_npu), "--at", str(up))
    assert "gpu/" not in quiet.stderr
    (release / "npu").rename(tmp_path / "moved")
    line = one_error_line(pq(new_project(tmp_path / "r"), "adopt", str(release), "--at", str(up), check=1))
    assert line == (
        f"pq: error: {release}: holds no NPU worker modules (*.py) (gpu/ holds GPU runners, not this queue's: name the "
        "folder of the NPU runners)"
    )


def test_the_real_runners_agree_with_vllm_ascend_and_the_gpu_ones_do_not(corpus: Path) -> None:
    """On the real releases: every NPU runner folder of the corpus subclasses vllm-ascend's NPUModelRunner (no line:
    the NPU queue's adopt prints what it printed); each GPU folder names vLLM's GPUModelRunner at its class line."""
    from conftest import BASE_030, RELEASES

    from patch_queue.sources.snapshot import resolve_upstream

    snapshot = resolve_upstream(
        BASE_030, upstream_git=str(corpus / "vllm-ascend.bundle"), progress=lambda _: None, queue=presets.NPU
    )
    ascend = snapshot.read(UPSTREAM).decode("utf-8")
    for release in RELEASES:
        folder = corpus / f"vllm-omni-{release}"
        npu = {p.name: p.read_text() for p in (folder / "npu").glob("*.py")}
        assert adopt.class_mismatch(npu, ascend, upstream_path=NPU.upstream_file, cls=NPU.upstream_class) is None, (
            release
        )
        gpu = {p.name: p.read_text() for p in (folder / "gpu").glob("*.py")}
        found = adopt.class_mismatch(gpu, ascend, upstream_path=NPU.upstream_file, cls=NPU.upstream_class)
        assert found is not None and found.path == "gpu_model_runner.py", release
        assert found.message.startswith("class OmniGPUModelRunner subclasses "), found
        assert "GPUModelRunner, not NPUModelRunner: " in found.message, found
        line = gpu["gpu_model_runner.py"].splitlines()[(found.line or 0) - 1]
        assert line.startswith("class OmniGPUModelRunner("), (release, line)


GPU_FILE = "vllm/v1/worker/gpu_model_runner.py"


def _two_queues(root: Path) -> tuple[Path, Path]:
    """An upstream folder with both queues' upstream files, and a release folder holding npu/ and gpu/ runners (each
    subclassing its own queue's upstream class), as the corpus keeps a vllm-omni release."""
    up = _upstream(root / "up", "NPUModelRunner")
    gpu_up = up / GPU_FILE
    gpu_up.parent.mkdir(parents=True)
    gpu_up.write_text(
        "import os\n\n\nclass GPUModelRunner(\n    Mixin,\n):\n    def __init__(self):\n        pass\n\n" + _methods(4)
    )
    release = root / "release"
    _runners(release / "npu", "NPUModelRunner")
    gpu = release / "gpu"
    gpu.mkdir()
    (gpu / "gpu_model_runner.py").write_text(
        "import os\n\n\nclass OmniGPUModelRunner(GPUModelRunner):\n    omni = 3\n\n" + _methods(4, " + self.omni")
    )
    return up, release


def test_a_folder_with_npu_and_gpu_reads_the_gpu_queues_own_folder(tmp_path: Path) -> None:
    """The gpu queue reads gpu/ (it read npu/, whose NPU runners it then adopted as GPU ones with a warning), and
    says so in one line; the npu queue still reads npu/."""
    up, release = _two_queues(tmp_path)
    proj = new_project(tmp_path / "p")
    done = pq(proj, "adopt", str(release), "--at", str(up), "--preset", "gpu")
    said = [line for line in done.stderr.splitlines() if "npu/" in line]
    assert said == [
        f"Reading {release}/gpu: {release} holds both gpu/ and npu/, and this queue's runners are the GPU ones "
        "(copies of vllm's GPUModelRunner); npu/ is not read"
    ]
    assert "warning" not in done.stdout and done.stdout.count("carried: gpu_model_runner.py OmniGPUModelRunner.") == 4
    assert sorted(p.name for p in (proj / "gpu_worker").glob("*.py")) == ["gpu_model_runner.py"]
    assert not (proj / "npu_worker").exists()
    npu = pq(new_project(tmp_path / "q"), "adopt", str(release), "--at", str(up))
    assert f"Reading {release}/npu: {release} holds both npu/ and gpu/" in npu.stderr
    # gpu/ gone: the gpu queue reads nothing, and the error names npu/ as another queue's
    (release / "gpu").rename(tmp_path / "moved")
    line = one_error_line(
        pq(new_project(tmp_path / "r"), "adopt", str(release), "--at", str(up), "--preset", "gpu", check=1)
    )
    assert line == (
        f"pq: error: {release}: holds no GPU worker modules (*.py) (npu/ holds NPU runners, not this queue's: name the "
        "folder of the GPU runners)"
    )


def test_a_queue_set_by_options_refuses_a_folder_of_other_queues_runners(tmp_path: Path) -> None:
    """A queue of another downstream package, set by options, is neither preset's: a folder holding only npu/ and
    gpu/ is one line (it was read as npu/ without a word), and nothing is written."""
    up, release = _two_queues(tmp_path)
    proj = new_project(tmp_path / "p")
    before = state(proj)
    args = ("--upstream-file", GPU_FILE, "--upstream-class", "GPUModelRunner", "--package", "other/worker")
    line = one_error_line(pq(proj, "adopt", str(release), "--at", str(up), *args, check=1))
    assert line == (
        f"pq: error: {release}: holds no runner modules (*.py) of vllm-omni's other/worker/ (npu/ holds NPU runners, "
        "gpu/ holds GPU runners, not this queue's: name the folder of this queue's runners)"
    )
    assert state(proj) == before
    # the gpu preset changed by an option that keeps its package still reads gpu/
    done = pq(proj, "adopt", str(release), "--at", str(up), "--preset", "gpu", "--out", "gw")
    assert f"Reading {release}/gpu: " in done.stderr
    assert sorted(p.name for p in (proj / "gw").glob("*.py")) == ["gpu_model_runner.py"]


# -- pq merge on a GPU queue reads the queue's own package of a release -----------------------------------------


def test_merge_of_a_release_on_a_gpu_queue_reads_its_gpu_runners(tmp_path: Path, corpus: Path) -> None:
    """`pq merge vllm-omni==X --since Y` on the gpu queue took in the release's NPU modules
    (vllm_omni/platforms/npu/worker/, the default queue's package); it takes vllm_omni/worker/: the real vllm-omni
    0.24.0 GPU runners (the corpus) on vLLM 0.23.0, merged with 0.30.0's from the registry, give 0.30.0's byte for
    byte."""
    from patch_queue.checks import gpu_audit
    from patch_queue.presets import GPU
    from patch_queue.sources.archives import release_files

    try:
        files = release_files("vllm-omni", VLLM, GPU.package + "/")
        gpu_audit.load_vllm_runner("0.23.0", queue=presets.NPU)  # the base, read by adopt --at
    except SourceError as exc:
        if "cannot read package index" in str(exc) or "cannot download" in str(exc):
            pytest.skip(f"package registry unreachable: {exc}")
        raise
    release = {k.rsplit("/", 1)[-1]: v for k, v in files.items() if "/" not in k.removeprefix(GPU.package + "/")}
    folder = corpus / "vllm-omni-0.24.0"
    proj = new_project(tmp_path / "p")
    pq(proj, "adopt", str(folder), "--preset", "gpu", "--at", "vllm==0.23.0")
    # 0.30.0's gpu_ar_worker.py imports a name vLLM has only from 0.24.0 on, and pq check reads the series' own
    # upstream (0.23.0): a real error, finished over here (the merge is what this test is about)
    done = pq(proj, "merge", f"vllm-omni=={VLLM}", "--since", str(folder), "--accept-errors")
    assert f"Reading {folder}/gpu: " in done.stderr
    assert f"downstream: vllm-omni (none) -> {VLLM} in patches/queue.toml" in done.stdout
    out = {p.name: p.read_bytes() for p in (proj / "gpu_worker").glob("*.py")}
    assert not any(name.startswith("npu_") for name in out), sorted(out)
    assert {k: v for k, v in release.items() if k.endswith(".py")} == out


# -- sync-gpu on a series adopted from a folder -----------------------------------------------------------------


def test_sync_gpu_on_a_folder_series_without_since_moves_no_pin(tmp_path: Path) -> None:
    up = _upstream(tmp_path / "up", "NPUModelRunner")
    proj = new_project(tmp_path / "p")
    pq(proj, "adopt", str(_runners(tmp_path / "down", "NPUModelRunner")), "--at", str(up))
    assert 'release = ""' in (proj / "patches" / "queue.toml").read_text()
    before = state(proj)
    line = one_error_line(pq(proj, "sync-gpu", "--omni", "0.30.0", check=1))
    assert line == (
        "pq: error: patches/queue.toml: the series was adopted from a folder (lineage step 1) and pins no vllm-omni "
        "release to start the GPU changes of 0.30.0 from: nothing synced, the pin stays none; name the release (or "
        "folder) its NPU runners are with --since, or --backlog for every unported GPU change"
    )
    assert state(proj) == before
    # without --omni, the line it always said
    line = one_error_line(pq(proj, "sync-gpu", check=1))
    assert line.endswith("the series was adopted from a folder: name the GPU runners with --omni SPEC")
    assert state(proj) == before


# -- relative imports of the upstream file -----------------------------------------------------------------------

RUNNER_READS = "class OmniRunner:\n    def go(self):\n        return helper(Shared)\n"


def test_relative_imports_of_the_upstream_file_resolve_against_its_own_package() -> None:
    assert reimport.module_of(UPSTREAM) == "vllm_ascend.worker.model_runner_v1"  # the NPU queue's, as it was
    upstream = "from .utils import helper\nfrom ..common import Shared\n\n\nclass Runner:\n    pass\n"
    for path, package, parent in (
        (UPSTREAM, "vllm_ascend.worker", "vllm_ascend"),
        ("vllm/v1/worker/gpu_model_runner.py", "vllm.v1.worker", "vllm.v1"),
        ("pkg/runner.py", "pkg", None),  # `from ..common` climbs past the top: not imported
    ):
        out, _changes = reimport.reconcile(
            RUNNER_READS, new_upstream=upstream, old_upstream=None, upstream_module=reimport.module_of(path)
        )
        assert f"from {package}.utils import helper\n" in out, (path, out)
        assert (f"from {parent}.common import Shared\n" in out) if parent else ("Shared\n" not in out), (path, out)


def test_the_real_vllm_runner_relative_imports_resolve_against_vllm_v1_worker(vllm_runner: str) -> None:
    assert "\nfrom .utils import (\n" in vllm_runner  # the real file imports its neighbours relatively
    reads = "class OmniGPUModelRunner:\n    def go(self, kv):\n        return bind_kv_cache(kv)\n"
    module = reimport.module_of("vllm/v1/worker/gpu_model_runner.py")
    out, changes = reimport.reconcile(reads, new_upstream=vllm_runner, old_upstream=None, upstream_module=module)
    assert "from vllm.v1.worker.utils import bind_kv_cache\n" in out, out
    assert [c.kind for c in changes] == [reimport.ADDED]


def test_a_gpu_queue_refresh_imports_what_merged_code_reads_from_vllm_v1_worker(tmp_path: Path) -> None:
    """End to end on the gpu queue (no disguise): upstream code merged into a runner reads a name vLLM's file imports
    relatively (``from .utils import helper``); the refresh adds ``from vllm.v1.worker.utils import helper``."""
    up, release = _two_queues(tmp_path)
    new = tmp_path / "new"
    text = (up / GPU_FILE).read_text().replace("        return z\n", "        return helper(z)\n", 1)
    (new / GPU_FILE).parent.mkdir(parents=True)
    (new / GPU_FILE).write_text("from .utils import helper\n" + text)
    (new / GPU_FILE).with_name("utils.py").write_text("def helper(z):\n    return z\n")
    proj = new_project(tmp_path / "p")
    pq(proj, "adopt", str(release), "--at", str(up), "--preset", "gpu")
    done = pq(proj, "refresh", "--to", str(new))
    out = (proj / "gpu_worker" / "gpu_model_runner.py").read_text()
    assert "        y = x * 2 + self.omni\n        z = y - 0\n        return helper(z)\n" in out  # both sides' edits
    assert "from vllm.v1.worker.utils import helper\n" in out, done.stdout
    assert "vllm_ascend" not in out
