"""The queue is data (issue 49, points 1 and 2): queue.toml's [queue] table, the presets, and no literal of one queue
in pq's code below its commands."""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import new_project, pq

from patch_queue import presets
from patch_queue.checks import rules
from patch_queue.errors import QueueError
from patch_queue.series import queue
from patch_queue.spec import KEYS, QueueSpec

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "patch_queue"
# the names of one queue's projects, files and classes: only the presets name them
QUEUE_LITERALS = re.compile(
    r"vllm[-_]ascend|NPUModelRunner|GPUModelRunner|npu[-_]worker|torch[-_]npu|\bvllm_omni\b|vllm/v1/|vllm\.v1\."
)
# where they may stand: the presets, and the shell (the commands and the command line) above the engine
ALLOWED = ("presets.py", "commands/", "cli/")


def _docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _names(node: ast.AST) -> list[str]:
    """The identifiers a node introduces or reads."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, ast.keyword):
        return [node.arg or ""]
    return []


def queue_literals(root: Path = PACKAGE, allowed: tuple[str, ...] = ALLOWED) -> list[tuple[str, int, str]]:
    """(file, line, literal) of every string constant and identifier of ``root``'s code (docstrings and comments
    aside) that names one queue's project, file or class, outside ``allowed``."""
    hits = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(allowed):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            texts = _names(node)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                texts.append(node.value)
            hits += [(rel, getattr(node, "lineno", 0), m.group()) for t in texts for m in QUEUE_LITERALS.finditer(t)]
    return sorted(hits)


def test_no_literal_of_one_queue_below_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    hits = queue_literals()
    with capsys.disabled():
        print(f"\nliterals naming one queue outside the presets, commands/ and cli/: {len(hits)}")
    assert hits == [], "\n".join(f"patch_queue/{f}:{line}: {lit}" for f, line, lit in hits)
    assert queue_literals(allowed=("commands/", "cli/")), "the scan finds the presets' own"


def test_a_format_3_queue_is_the_npu_queue_and_is_written_as_it_was() -> None:
    text = (ROOT / "patches" / "queue.toml").read_text(encoding="utf-8")
    assert text.splitlines()[1] == "format = 3"
    read = queue.parse_queue(text)
    assert read.spec == presets.NPU == presets.DEFAULT
    assert queue.render_queue(read) == text  # migrated only when it is no npu queue: byte for byte the same


def test_another_queue_is_written_as_format_4_and_read_back() -> None:
    npu = queue.parse_queue((ROOT / "patches" / "queue.toml").read_text(encoding="utf-8"))
    for spec in (presets.GPU, presets.NPU.with_options(out="runners", upstream_class="MyRunner")):
        text = queue.render_queue(replace(npu, spec=spec))
        assert text.splitlines()[1] == "format = 4"
        table = tomllib.loads(text)["queue"]
        assert list(table) == list(KEYS)
        again = queue.parse_queue(text)
        assert again.spec == spec and again.format == 4
        assert replace(again, format=npu.format, spec=npu.spec) == npu
    custom = presets.NPU.with_options(out="runners")
    assert custom.preset == "" and custom.out == "runners" and custom.upstream_class == presets.NPU.upstream_class
    assert presets.GPU.with_options(out=None, package=presets.GPU.package) is presets.GPU


def test_a_queue_table_naming_a_preset_takes_the_rest_from_it() -> None:
    npu = (ROOT / "patches" / "queue.toml").read_text(encoding="utf-8")
    text = npu.replace("format = 3\n", 'format = 4\n\n[queue]\npreset = "gpu"\nout = "runners"\n', 1)
    assert queue.parse_queue(text).spec == replace(presets.GPU, out="runners")


@pytest.mark.parametrize(
    ("table", "line", "message"),
    [
        ('preset = "tpu"', 5, "[queue].preset 'tpu' is no preset (they are npu, gpu)"),
        ('preset = "gpu"\nwheel_requires = "torch"', 6, "[queue].wheel_requires must be a list of strings"),
        ('upstream_dist = "x"', 4, "[queue] has no preset and no upstream_file, upstream_class,"),
        ('preset = "gpu"\n"fence" = 1', 6, "[queue].fence must be a string"),
    ],
)
def test_a_malformed_queue_table_is_one_line_at_its_line(table: str, line: int, message: str) -> None:
    npu = (ROOT / "patches" / "queue.toml").read_text(encoding="utf-8")
    text = npu.replace("format = 3\n", f"format = 4\n\n[queue]\n{table}\n", 1)
    with pytest.raises(QueueError) as raised:
        queue.parse_queue(text, path="patches/queue.toml")
    assert str(raised.value).startswith(f"patches/queue.toml:{line}: {message}"), str(raised.value)
    assert "\n" not in str(raised.value)


UPSTREAM = """\
class GPUModelRunner:
    def __init__(self, config):
        self.config = config
        self.steps = 0

    def execute_model(self, batch):
        self.steps += 1
        out = self.model(batch)
        return out

    def load_model(self):
        self.model = object()
"""

DOWNSTREAM = """\
from vllm.v1.worker.gpu_model_runner import GPUModelRunner


class OmniGPUModelRunner(GPUModelRunner):
    def execute_model(self, batch):
        self.steps += 1
        out = self.model(batch)
        out = self.postprocess(out)
        return out

    def postprocess(self, out):
        return out
"""


def test_adopt_with_the_gpu_preset_records_the_gpu_queue(tmp_path: Path) -> None:
    up = tmp_path / "vllm-src"
    (up / "vllm" / "v1" / "worker").mkdir(parents=True)
    (up / "vllm" / "v1" / "worker" / "gpu_model_runner.py").write_text(UPSTREAM)
    down = tmp_path / "omni" / "vllm_omni" / "worker"
    down.mkdir(parents=True)
    (down / "gpu_model_runner.py").write_text(DOWNSTREAM)
    proj = new_project(tmp_path / "p")
    out = pq(proj, "adopt", str(tmp_path / "omni"), "--preset", "gpu", "--at", str(up)).stdout
    assert "carried: gpu_model_runner.py OmniGPUModelRunner.execute_model <- GPUModelRunner.execute_model" in out
    assert "the runners to gpu_worker/" in out
    text = (proj / "patches" / "queue.toml").read_text(encoding="utf-8")
    read = queue.parse_queue(text)
    assert read.spec == presets.GPU and read.format == 4
    assert read.package == "vllm_omni/worker" and read.upstream.name == "vllm"
    assert read.upstream_paths() == ["vllm/v1/worker/gpu_model_runner.py"]
    assert (proj / "gpu_worker" / "gpu_model_runner.py").read_text() == DOWNSTREAM
    assert not (proj / "npu_worker").exists()
    # the GPU queue's check runs no NPU rule (its runners are GPU code: CUDA graphs, vLLM's forward context)
    assert {r.id for r in rules.load_rules(proj / "patches", read.spec.rules)} == set()
    assert "no-cuda-graph-wrapper" in {r.id for r in rules.load_rules(None, presets.NPU.rules)}
    checked = pq(proj, "check", check=None)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # every later command reads the queue from queue.toml: a build writes the queue's own output folder
    (proj / "gpu_worker" / "gpu_model_runner.py").unlink()
    refused = pq(proj, "build", check=1).stderr  # the queue's output folder is the one guarded
    assert refused.startswith("pq: error: gpu_worker/gpu_model_runner.py: has edits no patch holds"), refused
    pq(proj, "build", "--discard")
    assert (proj / "gpu_worker" / "gpu_model_runner.py").read_text() == DOWNSTREAM
    assert not (proj / "npu_worker").exists()


def test_adopt_options_set_any_other_pair(tmp_path: Path) -> None:
    up = tmp_path / "tpu-src"
    (up / "tpu_plugin" / "worker").mkdir(parents=True)
    (up / "tpu_plugin" / "worker" / "runner.py").write_text(UPSTREAM.replace("GPUModelRunner", "TPUModelRunner"))
    down = tmp_path / "omni"
    down.mkdir()
    (down / "tpu_model_runner.py").write_text(
        DOWNSTREAM.replace("GPUModelRunner", "TPUModelRunner").replace("vllm.v1.worker.gpu_model_runner", "tpu_plugin")
    )
    proj = new_project(tmp_path / "p")
    options = ["--upstream-dist", "tpu-plugin", "--upstream-file", "tpu_plugin/worker/runner.py"]
    options += ["--upstream-class", "TPUModelRunner", "--package", "vllm_omni/platforms/tpu/worker", "--out", "tpu"]
    out = pq(proj, "adopt", str(down), "--preset", "gpu", "--at", str(up), *options).stdout
    assert "<- TPUModelRunner.execute_model" in out
    spec = queue.parse_queue((proj / "patches" / "queue.toml").read_text(encoding="utf-8")).spec
    assert spec == QueueSpec(
        **{
            **{k: getattr(presets.GPU, k) for k in KEYS},
            "preset": "",
            "upstream_dist": "tpu-plugin",
            "upstream_file": "tpu_plugin/worker/runner.py",
            "upstream_class": "TPUModelRunner",
            "package": "vllm_omni/platforms/tpu/worker",
            "out": "tpu",
        }
    )
    assert (proj / "tpu" / "tpu_model_runner.py").is_file()
    bad = pq(proj, "adopt", str(down), "--force", "--preset", "tpu", check=1).stderr
    assert bad.strip() == "pq: error: --preset 'tpu' is no preset (they are npu, gpu)"
