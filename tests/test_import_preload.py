"""The import test when the upstream itself does not import in the environment (`checks/import_stubs.py`'s preload).

The upstream at a pin may need another vLLM than the one the downstream release goes with (vllm-ascend at the
series' git pin imports `RoutedExpertsLists`, which vLLM 0.32.0 lacks): every module then fails the same way, the
release's own too. That is the environment's cause, never an error of the output.  The stub runner runs for real here
(this interpreter, a small upstream folder whose module raises at import); only the environment is small.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from patch_queue import presets
from patch_queue.checks import import_test
from patch_queue.checks.findings import WARNING
from patch_queue.sources import import_env
from patch_queue.sources.snapshot import dir_snapshot


def test_an_upstream_that_does_not_import_is_the_environment_s_cause(tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    runner = upstream / "vllm_ascend" / "worker" / "model_runner_v1.py"
    runner.parent.mkdir(parents=True)
    (upstream / "vllm_ascend" / "__init__.py").write_text("")
    (runner.parent / "__init__.py").write_text("")
    runner.write_text("import json\n\nfrom json import RoutedExpertsLists\n")
    overlay = tmp_path / "worker"
    overlay.mkdir()
    (overlay / "runner.py").write_text("X = 1\n")
    versions = import_env.Versions("0.32.0", "torch==2.13.0", "vllm-omni==0.32.0rc1", import_env.python_tag())
    env = import_env.ImportEnv(Path(sys.executable), upstream, versions)
    output, control = import_test.import_all(
        env,
        "json",  # the package the control's modules are read from: any importable one
        ["runner.py"],
        {},
        overlay,
        control=["runner.py"],
        preload=["vllm_ascend.worker.model_runner_v1"],
        stubs=import_test.stubs_of(replace(presets.DEFAULT, rules="")),  # no device: torch is not here
    )
    assert output[0].error is not None and "RoutedExpertsLists" in output[0].error[0]
    assert output[0].raised == "vllm_ascend/worker/model_runner_v1.py:3" and not output[0].inside
    found = import_test.findings(output, control, release="vllm-omni 0.32.0rc1")
    assert [(f.rule, f.severity) for f in found] == [("import-failed-control", WARNING)], found
    assert "raised in vllm_ascend/worker/model_runner_v1.py:3" in found[0].message


def test_two_upstream_folders_are_written_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a folder snapshot has no pin: the import test's copy of its sources is keyed by their bytes, never shared
    # with another folder's (once a fixed key, the first folder's copy was read for every later one)
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    written = []
    for n in (1, 2, 1):
        tree = tmp_path / f"tree{n}"
        (tree / "vllm_ascend" / "worker").mkdir(parents=True, exist_ok=True)
        (tree / "vllm_ascend" / "__init__.py").write_text("")
        (tree / "vllm_ascend" / "worker" / "model_runner_v1.py").write_text(f"VERSION = {n}\n")
        folder = import_env.upstream_sources(dir_snapshot(tree, presets.DEFAULT), presets.DEFAULT)
        written.append((folder, (folder / "vllm_ascend" / "worker" / "model_runner_v1.py").read_text()))
    assert [text for _folder, text in written] == ["VERSION = 1\n", "VERSION = 2\n", "VERSION = 1\n"]
    assert written[0][0] == written[2][0] != written[1][0]
