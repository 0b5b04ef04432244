"""Set-up (issue 15, part 5): main.sh says how to put pq on PATH; offline, the error names PQ_UPSTREAM_GIT."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_main_sh_prints_how_to_put_pq_on_path(tmp_path: Path) -> None:
    # a stand-in setup.sh and pq: what is checked is main.sh's own output, at the end, however pq exits
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "main.sh", tmp_path / "scripts" / "main.sh")
    fake_pq = '#!/bin/sh\necho "pq $1"\n[ "$1" = refresh ] && exit 3\nexit 0\n'
    (tmp_path / "scripts" / "setup.sh").write_text(
        f"mkdir -p .venv/bin\ncat > .venv/bin/pq <<'EOF'\n{fake_pq}EOF\nchmod +x .venv/bin/pq\n"
    )
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
