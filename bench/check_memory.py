"""Peak memory of pq on a huge patch: the real 0.30.0 runners adopted, ``N`` MB of comment lines appended
to one of them and made a patch with ``pq new --record``, then ``pq check --no-sources`` (and ``pq check`` with the
upstream sources) on it.

Usage::

    python bench/check_memory.py [--mb 200] [--keep DIR]

Each command runs as a child process; its peak resident memory is the ``ru_maxrss`` that ``wait4`` gives
for that child alone.  The ratio divides it by the size of the patch file.  Environment as for
``bench/bench.py`` (``PQ_CORPUS``, ``PQ_CACHE``, ``PQ_UPSTREAM_GIT``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conflict_table import corpus_dir

LINE = "# " + "x" * 98 + "\n"  # 101 bytes; the patch file holds it as a 102-byte "+" line


def run(cwd: Path, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
    """(seconds, peak MiB) of ``pq ARGS`` in ``cwd``."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "patch_queue", *args], cwd=cwd, stdout=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise SystemExit(f"pq {' '.join(args)} exited {code} in {cwd}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200, help="MB of lines the patch adds (default 200)")
    ap.add_argument("--keep", type=Path, help="build the project here and keep it")
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="pq-memory-"))
    proj = work / "project"
    proj.mkdir(parents=True)
    git = ["git", "-C", str(proj), "-c", "user.name=pq", "-c", "user.email=pq@localhost"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (proj / ".gitignore").write_text("/patches/*.patch\n/npu_worker/\n")
    subprocess.run([*git, "add", ".gitignore"], check=True)
    subprocess.run([*git, "commit", "-qm", "project"], check=True)
    run(proj, "adopt", str(corpus_dir() / "vllm-omni-0.30.0" / "npu"), "--at", "cf0baa38dfb2")
    with (proj / "npu_worker" / "npu_model_runner.py").open("a") as f:
        f.write(LINE * (args.mb * 1_000_000 // len(LINE)))
    rows = [("pq new --record big", *run(proj, "new", "--record", "big"))]
    patch = next((proj / "patches").glob("*-big.patch"))
    size = patch.stat().st_size / (1 << 20)
    rows.append(("pq check --no-sources", *run(proj, "check", "--no-sources")))
    rows.append(("pq check", *run(proj, "check")))
    print(f"patch file: {patch.name}, {size:.1f} MiB\n")
    print("| command | seconds | peak MiB | peak / patch size |")
    print("|---|---|---|---|")
    for name, seconds, mib in rows:
        print(f"| `{name}` | {seconds:.1f} | {mib:.0f} | {mib / size:.2f}x |")
    if args.keep is None:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
