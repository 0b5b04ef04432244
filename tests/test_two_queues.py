"""Two queues in one repository (issue 49, point 4): the NPU queue at the work tree's root, the GPU queue in a folder
of its own (``pq -C queues/gpu ...``, as ``git -C``), each with its own queue.toml, output folder, refs and state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BASE_030, corpus_dir, git, new_project, pq

from patch_queue import namespace
from patch_queue.errors import PqError
from patch_queue.sources import registry

FOLDER = "queues/gpu"


def run_pq(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "patch_queue", *args], cwd=cwd, capture_output=True, text=True)


def test_the_queue_folder_is_the_one_named_else_the_nearest_holding_a_queue(tmp_path: Path) -> None:
    root = new_project(tmp_path / "p")
    (root / "patches").mkdir()
    (root / "patches" / "queue.toml").write_text("format = 3\n")
    gpu = root / "queues" / "gpu"
    (gpu / "gpu_worker").mkdir(parents=True)
    assert namespace.choose(root, given=False) == ""
    assert namespace.choose(gpu / "gpu_worker", given=False) == ""  # no queue there yet: the root's
    assert namespace.choose(gpu, given=True) == FOLDER  # named: a new queue's folder
    assert namespace.choose(root, given=True) == ""
    (gpu / "patches").mkdir()
    (gpu / "patches" / "queue.toml").write_text("format = 4\n")
    assert namespace.choose(gpu / "gpu_worker", given=False) == FOLDER
    assert namespace.choose(tmp_path, given=False) == ""  # outside any work tree


def test_minus_c_needs_a_folder_that_is_there(tmp_path: Path) -> None:
    proc = run_pq(new_project(tmp_path / "p"), "-C", "missing", "status")
    assert (proc.returncode, proc.stderr) == (
        2,
        "pq: error: missing: cannot change into it (No such file or directory)\n",
    )
    proc = run_pq(tmp_path / "p", "-C")
    assert (proc.returncode, proc.stderr) == (2, "pq: error: -C needs a folder: pq -C DIR COMMAND ...\n")


def test_an_npu_queue_at_the_root_and_a_gpu_queue_in_a_folder(tmp_path: Path) -> None:
    corpus = corpus_dir()
    if corpus is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    try:
        registry.project_files("vllm")
    except (PqError, OSError) as exc:
        pytest.skip(f"the registry cannot supply vLLM's releases ({exc})")
    root = new_project(tmp_path / "p")
    pq(root, "adopt", str(corpus / "vllm-omni-0.30.0" / "npu"), "--at", BASE_030)
    (root / FOLDER).mkdir(parents=True)
    pq(root, "-C", FOLDER, "adopt", "vllm-omni==0.24.0", "--preset", "gpu")
    npu_refs = git(root, "for-each-ref", "refs/pq")
    gpu = root / FOLDER
    assert (gpu / "patches" / "queue.toml").read_text().splitlines()[1] == "format = 4"
    assert (root / "patches" / "queue.toml").read_text().splitlines()[1] == "format = 3"
    assert sorted(p.name for p in (gpu / "gpu_worker").glob("*.py")) == sorted(
        p.name for p in (corpus / "vllm-omni-0.24.0" / "gpu").glob("*.py")
    )
    assert (root / ".git" / "pq-queues-gpu").is_dir()
    assert git(root, "for-each-ref", "--format=%(refname)", "refs/pq-queues-gpu").splitlines()[:2] == [
        "refs/pq-queues-gpu/base",
        "refs/pq-queues-gpu/patches/0001-init.patch",
    ]

    # a refresh of the GPU queue, left pending, is the GPU queue's alone
    proc = run_pq(root, "-C", FOLDER, "refresh", "--no-stop", "--to", "vllm==0.26.0")
    assert proc.returncode == 3, proc.stderr
    assert "resolve the markers in gpu_worker/" in proc.stdout + proc.stderr
    assert git(root, "for-each-ref", "refs/pq") == npu_refs
    assert "no refresh" not in run_pq(gpu / "gpu_worker", "status").stdout  # cd into the folder: the GPU queue
    npu = run_pq(root, "status")
    assert npu.returncode == 0 and "0016-npu-model-runner-model-forward.patch" in npu.stdout
    assert run_pq(root, "-C", FOLDER, "abort").stdout == (
        "refresh aborted; patches/, gpu_worker/ and refs/pq-queues-gpu/ are as before\n"
    )
    assert git(root, "for-each-ref", "refs/pq") == npu_refs
    assert not git(root, "for-each-ref", "refs/pq-queues-gpu/refresh")
