"""`pq check --import` on the real releases: this repository's series (vllm-omni 0.32.0rc1 on vllm-ascend cf0baa38)
refreshed onto vllm-ascend 0.30.0rc2 and resolved to the patch's side, imported against the real vLLM 0.32.0,
vllm-ascend 0.30.0rc2 and vllm-omni 0.32.0rc1 on CPU, only the NPU's native modules stubbed.

The environment (about 2.6 GB, 700 MB of downloads) is built once per run, in a cache of its own under the test
cache (`import_cache`): in the test cache itself, every later refresh of a 0.32.0rc1 series in the suite would run
the import test too (it runs when its environment is built). Skipped only when the package registry is unreachable.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from patch_queue import presets
from tests.conftest import RC2, built_once, copy_project, pq, resolve_all

RELEASE = "vllm-omni 0.32.0rc1"


def pq_import(proj: Path, cache: Path, *args: str, check: int | None = 0) -> tuple[int, str, str]:
    """`pq ARGS` with the import test's cache: (exit code, stdout, stderr)."""
    old = os.environ["PQ_CACHE"]
    os.environ["PQ_CACHE"] = str(cache)
    try:
        proc = pq(proj, *args, check=check)
    finally:
        os.environ["PQ_CACHE"] = old
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="session")
def resolved_032_once(seeded_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This repository's series refreshed onto vllm-ascend 0.30.0rc2 (`--no-stop`), every region resolved to the
    patch's side (`pq resolve --keep-patch --alone`), `pq continue` finished; once per run: copy it."""

    def build(folder: Path) -> None:
        proj = copy_project(seeded_once, folder / "p")
        pq(proj, "refresh", "--no-stop", "--to", RC2, check=3)
        resolve_all(proj, "--keep-patch")
        pq(proj, "continue", check=0)

    return built_once(tmp_path_factory, "resolved-032", build) / "p"


@pytest.fixture(scope="session")
def imported_once(
    resolved_032_once: Path, import_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, object]]:
    """`pq check --import --json` on the resolved result, building the environment; once per run: (the folder
    holding `stdout`, `stderr`, `check.json`, `times.json`), the JSON report."""

    def build(folder: Path) -> None:
        proj = copy_project(resolved_032_once, folder / "p")
        started = time.monotonic()
        code, out, err = pq_import(proj, import_cache, "check", "--import", "--json", str(folder / "check.json"))
        took = time.monotonic() - started
        (folder / "stdout").write_text(out)
        (folder / "stderr").write_text(err)
        (folder / "times.json").write_text(json.dumps({"took": took, "code": code}))

    folder = built_once(tmp_path_factory, "imported-032", build)
    return folder, json.loads((folder / "check.json").read_text())


def test_the_refreshed_series_imports(imported_once: tuple[Path, dict[str, object]]) -> None:
    folder, report = imported_once
    out, err = (folder / "stdout").read_text(), (folder / "stderr").read_text()
    times = json.loads((folder / "times.json").read_text())
    print(f"pq check --import (building the environment when the cache has none): {times['took']:.0f} s")
    assert times["code"] == 0, out[-3000:] + err[-3000:]
    assert "pq check: 0 error(s)" in out
    assert f"--import: 9 of 9 module(s) imported, and 9 of 9 module(s) imported of {RELEASE}'s own" in out
    assert "(pq check --import) ..." in err
    assert report["imported"] == f"9 of 9 module(s) imported, and 9 of 9 module(s) imported of {RELEASE}'s own"
    rules = {str(f["rule"]) for f in report["findings"]}  # type: ignore[union-attr]
    assert not rules & {"import-failed", "import-failed-control", "import-control-failed", "override-lost"}
    assert "override-signature" not in rules and "import-test-skipped" not in rules


def _plant_namedtuple(files: dict[str, str]) -> tuple[str, str]:
    text = files["npu_ar_model_runner.py"]
    files["npu_ar_model_runner.py"] = text.replace(
        "    scheduler_output: SchedulerOutput\n", "    scheduler_output: SchedulerOutput | None = None\n", 1
    )
    return "npu_ar_model_runner.py", "class ExecuteModelState(NamedTuple):"


def _plant_dataclass(files: dict[str, str]) -> tuple[str, str]:
    text = files["talker_multiframe.py"]
    head, sep, tail = text.partition("class NarrowStep:")
    files["talker_multiframe.py"] = head + sep + tail.replace("    rows: int\n", "    rows: int = 1\n", 1)
    return "talker_multiframe.py", "@dataclass\nclass NarrowStep:"


def _plant_mro(files: dict[str, str]) -> tuple[str, str]:
    text = files["npu_ar_model_runner.py"]
    old = "class NPUARModelRunner(OmniNPUModelRunner,"
    text = text.replace(old, "class NPUARModelRunner(NPUAuxOutputMixin, OmniNPUModelRunner,", 1)
    imported = "from vllm_omni.platforms.npu.worker.npu_model_runner import OmniNPUModelRunner\n"
    text = text.replace(
        imported, "from vllm_omni.platforms.npu.worker.aux_output import NPUAuxOutputMixin\n" + imported, 1
    )
    files["npu_ar_model_runner.py"] = text
    return "npu_ar_model_runner.py", "class NPUARModelRunner(NPUAuxOutputMixin,"


def _plant_decorator(files: dict[str, str]) -> tuple[str, str]:
    text = files["npu_ar_model_runner.py"]
    files["npu_ar_model_runner.py"] = text.replace(
        "    @contextlib.contextmanager\n", "    @contextlib.contextmanager()\n"
    )
    return "npu_ar_model_runner.py", "    @contextlib.contextmanager()"


def _plant_enum(files: dict[str, str]) -> tuple[str, str]:
    text = files["npu_generation_model_runner.py"]
    line = "_PREFILL_STATES = (AscendAttentionState.ChunkedPrefil,)\n"
    files["npu_generation_model_runner.py"] = text.replace(
        "\n\nclass _NPUHostCopyBatch", f"\n{line}\n\nclass _NPUHostCopyBatch", 1
    )
    return "npu_generation_model_runner.py", line.rstrip("\n")


DEFECTS: dict[str, tuple[Callable[[dict[str, str]], tuple[str, str]], str]] = {
    "namedtuple-default-order": (_plant_namedtuple, "TypeError: Non-default namedtuple field"),
    "dataclass-default-order": (_plant_dataclass, "TypeError: non-default argument 'frames' follows default"),
    "mro-conflict": (_plant_mro, "TypeError: Cannot create a consistent method resolution order (MRO)"),
    "decorator-factory-uncalled": (_plant_decorator, "TypeError: contextmanager() missing 1 required positional"),
    "enum-member-misspelt": (_plant_enum, "AttributeError: ChunkedPrefil"),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_a_planted_defect_is_an_import_failure_and_only_that(
    defect: str,
    resolved_032_once: Path,
    imported_once: tuple[Path, dict[str, object]],
    import_cache: Path,
    tmp_path: Path,
) -> None:
    plant, said = DEFECTS[defect]
    proj = copy_project(resolved_032_once, tmp_path / "p")
    out_dir = proj / "npu_worker"
    files = {p.name: p.read_text() for p in out_dir.glob("*.py")}
    before = dict(files)
    module, marker = plant(files)
    assert files != before, f"the plant of {defect} changed nothing: the runners changed"
    for name, text in files.items():
        (out_dir / name).write_text(text)
    line = files[module][: files[module].index(marker)].count("\n") + 1  # the marker's first line
    lines = {line, line + marker.count("\n")}  # a decorated class: the decorator's or the class's line

    plain = pq(proj, "check", check=None)  # the checks pq ran before: they pass it
    assert plain.returncode == 0, plain.stdout[-3000:]
    assert re.search(r"^pq check: 0 error\(s\)", plain.stdout, re.M)

    code, out, _err = pq_import(proj, import_cache, "check", "--import", check=None)
    assert code == 1, out[-3000:]
    failed = [f for f in out.splitlines() if "[import-failed]" in f]
    assert any(
        f.startswith(f"npu_worker/{module}:{n}: error: [import-failed] {module} does not import: {said}")
        for f in failed
        for n in lines
    ), failed
    assert "[import-failed-control]" not in out  # the release's own modules import: not the environment's


def test_a_renamed_upstream_method_is_an_override_lost_and_a_new_argument_an_override_signature(
    resolved_032_once: Path, imported_once: tuple[Path, dict[str, object]], import_cache: Path, tmp_path: Path
) -> None:
    """vllm-ascend's `NPUModelRunner._dummy_run` renamed in the environment's sources: the carried copy of the
    generation runner overrides nothing of vllm-ascend's any more; its `sample_tokens` taking a new keyword: the
    carried copy cannot take what upstream's callers pass."""
    from patch_queue.checks import import_test
    from patch_queue.series.queue import parse_queue
    from patch_queue.sources import import_env

    old = os.environ["PQ_CACHE"]
    os.environ["PQ_CACHE"] = str(import_cache)
    try:
        built = sorted(p for p in (import_cache / "import-env").iterdir() if (p / "env.json").is_file())
        ascend = sorted(  # other queues' upstream sources may stand beside (tests/test_third_pair.py: vLLM's)
            p
            for p in (import_cache / "import-env").iterdir()
            if p.name.startswith("upstream-") and (p / "vllm_ascend").is_dir()
        )
    finally:
        os.environ["PQ_CACHE"] = old
    assert len(built) == 1 and len(ascend) == 1
    upstream = tmp_path / "upstream"
    shutil.copytree(ascend[0], upstream)
    runner = upstream / "vllm_ascend" / "worker" / "model_runner_v1.py"
    text = runner.read_text()
    assert text.count("    def _dummy_run(") == 1
    text = text.replace("    def _dummy_run(", "    def _dummy_run_renamed(", 1)
    # and upstream's callers of sample_tokens pass one more argument, by name
    old = '        self, grammar_output: "GrammarOutput | None"\n    ) -> ModelRunnerOutput'
    assert text.count(old) == 1
    runner.write_text(text.replace(old, old.replace('None"', 'None", *, sampled_at: float'), 1))
    versions = import_env.Versions("0.32.0", "torch==2.13.0", "vllm-omni==0.32.0rc1", import_env.python_tag())
    env = import_env.ImportEnv(import_env.python_of(built[0]), upstream, versions)
    queue = parse_queue((resolved_032_once / "patches" / "queue.toml").read_text(), path="queue.toml")
    carried = import_test.carried_methods({m.path: list(m.symbols) for m in queue.modules})
    overlay = shutil.copytree(resolved_032_once / "npu_worker", tmp_path / "worker")
    # a module that reads a name of a stub at import: reported as not checked, never as imported fine
    (overlay / "reads_a_stub.py").write_text("import torch\nimport torch_npu\n\nEVENT = torch.npu.Event\n")
    modules = ["npu_generation_model_runner.py", "reads_a_stub.py"]
    output, control = import_test.import_all(
        env,
        "vllm_omni.platforms.npu.worker",
        modules,
        carried,
        overlay,
        control=modules[:1],
        preload=["torch", "vllm_ascend.worker.model_runner_v1"],
        stubs=import_test.stubs_of(presets.NPU),
    )
    assert [(i.module, i.error) for i in output] == [(m, None) for m in modules]
    found = import_test.findings(output, control, release=RELEASE)
    stubbed = [(f.file, f.line, f.rule, f.severity) for f in found if f.file == "reads_a_stub.py"]
    assert stubbed == [("reads_a_stub.py", 4, "import-stubbed", "warning")], found
    assert "`torch_npu.npu.Event`" in next(f.message for f in found if f.file == "reads_a_stub.py")
    lost = [f for f in found if f.rule == "override-lost"]
    tree = ast.parse((resolved_032_once / "npu_worker" / modules[0]).read_text())
    method = next(
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "NPUGenerationModelRunner"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "_dummy_run"
    )
    line = method.decorator_list[0].lineno if method.decorator_list else method.lineno  # the function's first line
    assert [(f.file, f.line, f.severity) for f in lost] == [(modules[0], line, "error")], found
    assert (
        "NPUGenerationModelRunner._dummy_run overrides nothing of vllm_ascend.worker.model_runner_v1."
        in lost[0].message
    )
    assert "only vllm.v1.worker.gpu_model_runner.GPUModelRunner does" in lost[0].message
    sampled = [f for f in found if f.rule == "override-signature"]
    assert [(f.file, f.severity) for f in sampled] == [(modules[0], "error")], found
    assert sampled[0].message.startswith("NPUGenerationModelRunner.sample_tokens takes no argument `sampled_at`")


def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip and pq's registry client with no configuration but an index nobody listens at."""
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")


def test_offline_the_build_is_one_line_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from patch_queue.errors import SourceError
    from patch_queue.sources import import_env

    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    _offline(monkeypatch)
    versions = import_env.Versions("0.32.0", "torch==2.13.0", "vllm-omni==0.32.0rc1", import_env.python_tag())
    with pytest.raises(SourceError) as raised:
        import_env.build(versions)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("cannot build the import-test environment: cannot read package index http://127.0.0.1:9/")
    assert list((tmp_path / "cache" / "import-env").iterdir()) == []  # the temporary folder is gone


def test_offline_check_import_is_one_line_and_exit_1(
    resolved_032_once: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    proj = copy_project(resolved_032_once, tmp_path / "p")
    cache = tmp_path / "cache"
    monkeypatch.setenv("PQ_CACHE", str(cache))
    _offline(monkeypatch)
    proc = pq(proj, "check", "--import", "--no-sources", check=1)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("pq: error:")]
    assert len(errors) == 1 and "127.0.0.1:9" in errors[0], proc.stderr
    assert not (cache / "import-env").exists() or list((cache / "import-env").iterdir()) == []


def test_offline_no_credential_of_pip_s_configuration_is_printed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """pip's index URL in its configuration file carries a user and a password (with an "@" and a "%40" in it):
    pip's own failure and the registry's are printed without either."""
    from patch_queue.errors import SourceError
    from patch_queue.sources import import_env

    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    _offline(monkeypatch)
    monkeypatch.delenv("PIP_INDEX_URL")
    for key in ("HOME", "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS"):  # no configuration file of the machine's
        monkeypatch.setenv(key, str(tmp_path / "home"))
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = http://pq-user:pa@ss%40w0rd@127.0.0.1:9/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    versions = import_env.Versions("0.32.0", "torch==2.13.0", "vllm-omni==0.32.0rc1", import_env.python_tag())
    with pytest.raises(SourceError) as raised:
        import_env.build(versions)
    message = str(raised.value)
    assert "\n" not in message and "127.0.0.1:9" in message, message
    for secret in ("pq-user", "pa@ss", "ss%40w0rd", "ss@w0rd"):
        assert secret not in message, message
    assert list((tmp_path / "cache" / "import-env").iterdir()) == []


def test_a_pip_setting_pq_cannot_use_is_one_line_before_anything_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The environment's pip is held to pq's rules of pip's configuration: a value pq cannot use is one line naming
    the setting, never the value, and nothing is made in the cache."""
    from patch_queue.errors import SourceError
    from patch_queue.sources import import_env

    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    _offline(monkeypatch)
    monkeypatch.setenv("PIP_TIMEOUT", "s3cret-soon")
    versions = import_env.Versions("0.32.0", "torch==2.13.0", "vllm-omni==0.32.0rc1", import_env.python_tag())
    with pytest.raises(SourceError) as raised:
        import_env.build(versions)
    assert str(raised.value) == "PIP_TIMEOUT: pip's timeout is not a number"
    assert not (tmp_path / "cache" / "import-env").exists()


def test_continue_runs_it_when_its_environment_is_built(
    seeded_once: Path, imported_once: tuple[Path, dict[str, object]], import_cache: Path, tmp_path: Path
) -> None:
    """With the environment built, the `pq continue` that finishes the refresh runs the import test too, unasked,
    and its reports say so; `--no-import` leaves it out."""
    proj = copy_project(seeded_once, tmp_path / "p")
    (proj / "reports").mkdir()
    reports = ("--report", "reports/refresh.json", "--markdown", "reports/refresh.md")
    code, _out, _err = pq_import(proj, import_cache, "refresh", "--no-stop", "--to", RC2, *reports, check=3)
    resolve_all(proj, "--keep-patch")
    declined = copy_project(proj, tmp_path / "declined")
    code, out, err = pq_import(proj, import_cache, "continue")
    summary = f"--import: 9 of 9 module(s) imported, and 9 of 9 module(s) imported of {RELEASE}'s own"
    assert re.search(r"^pq check: 0 error\(s\), .*" + re.escape(summary), out, re.M), out[-2000:]
    assert "(pq check --import) ..." in err
    report = json.loads((proj / "reports" / "refresh.json").read_text())
    assert report["check"]["imported"] == summary.removeprefix("--import: ")
    markdown = (proj / "reports" / "refresh.md").read_text()
    assert f"The result imports against the real releases (`pq check --import`): {summary[10:]}." in markdown
    code, out, err = pq_import(declined, import_cache, "continue", "--no-import")
    assert "--import:" not in out and "(pq check --import)" not in err
