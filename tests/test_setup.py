"""Set-up (issue 15, part 5): main.sh says how to put pq on PATH; offline, the error names PQ_UPSTREAM_GIT."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _main_sh_with_fake_pq(folder: Path, fake_pq: str) -> None:
    """``folder`` with this repository's main.sh and a stand-in setup.sh that installs ``fake_pq`` as pq."""
    (folder / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "main.sh", folder / "scripts" / "main.sh")
    (folder / "scripts" / "setup.sh").write_text(
        f"mkdir -p .venv/bin\ncat > .venv/bin/pq <<'EOF'\n{fake_pq}EOF\nchmod +x .venv/bin/pq\n"
    )


def test_main_sh_prints_how_to_put_pq_on_path(tmp_path: Path) -> None:
    # a stand-in setup.sh and pq: what is checked is main.sh's own output, at the end, however pq exits
    _main_sh_with_fake_pq(tmp_path, '#!/bin/sh\necho "pq $1"\n[ "$1" = refresh ] && exit 3\nexit 0\n')
    env = {k: v for k, v in os.environ.items() if k != "PQ"}
    proc = subprocess.run(["bash", "scripts/main.sh"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 3, proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert f'export PATH="{tmp_path.resolve()}/.venv/bin:$PATH"' in last and "source .venv/bin/activate" in last


def test_offline_error_names_pq_upstream_git_and_the_corpus(tmp_path: Path) -> None:
    code = (
        "from patch_queue.errors import SourceError\n"
        "from patch_queue.sources.snapshot import open_git\n"
        "try:\n    open_git('http://127.0.0.1:9/vllm-ascend.git')\n"
        "except SourceError as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PQ_CACHE": str(tmp_path / "cache"), "GIT_TERMINAL_PROMPT": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.startswith("cannot read upstream git repository http://127.0.0.1:9/vllm-ascend.git: "), out
    assert "set PQ_UPSTREAM_GIT (or --upstream)" in out and "../shared/corpus/vllm-ascend.bundle" in out
    assert out.count("\n") == 1


def test_main_sh_records_each_step_for_pq_timings(tmp_path: Path) -> None:
    # a stand-in pq that, as the real one does, adds the parts of its commands that fetched sources
    fake_pq = '#!/bin/sh\necho "within download 0.250" >>"$PQ_TIMINGS"\n[ "$1" = refresh ] && exit 3\nexit 0\n'
    _main_sh_with_fake_pq(tmp_path, fake_pq)
    timings = tmp_path / "timings.txt"
    env = {k: v for k, v in os.environ.items() if k != "PQ"} | {"PQ_TIMINGS": str(timings)}
    proc = subprocess.run(["bash", "scripts/main.sh"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 3, proc.stderr
    lines = [line.split() for line in timings.read_text(encoding="utf-8").splitlines()]
    assert [line[:2] for line in lines] == [
        ["step", "set-up"],
        ["step", "download"],
        ["within", "download"],
        ["step", "reproduce"],
        ["within", "download"],
        ["step", "merge"],
        ["within", "download"],
        ["step", "refresh"],
    ]
    assert all(float(line[2]) >= 0 for line in lines)


def test_setup_sh_keeps_an_up_to_date_venv(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    # a venv whose python logs how it is called (a pip install would show) and a pq
    log = tmp_path / "calls.txt"
    (bin_dir / "python").write_text(f'#!/bin/sh\necho "$*" >>{log}\n')
    (bin_dir / "pq").write_text("#!/bin/sh\n")
    for tool in ("python", "pq"):
        (bin_dir / tool).chmod(0o755)
    stamp = subprocess.run(
        ["bash", "-c", '(cat pyproject.toml scripts/setup.sh; python3 --version; echo "") | cksum'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (tmp_path / ".venv" / "pq-setup").write_text(stamp)
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text() == "-c \n"  # asked whether it runs, and nothing installed
    # another option (--dev) is another set-up: pip is run
    proc = subprocess.run(["bash", "scripts/setup.sh", "--dev"], cwd=tmp_path, capture_output=True, text=True)
    assert "-m pip install" in log.read_text()
