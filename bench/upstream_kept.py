"""Upstream statements a refresh drops outside every conflict region, on the real upgrade history.

Usage::

    python bench/upstream_kept.py [--only OLD,...] [--keep DIR] [--json OUT]

Per upgrade (0.14.0 -> 0.16.0, ..., 0.24.0 -> 0.30.0: the target is the upstream base ``pq adopt`` finds
for the newer corpus release; 0.30.0 -> vllm-ascend==0.30.0rc2): ``pq adopt`` the older corpus release,
``pq refresh --no-stop`` onto the target, then :func:`patch_queue.checks.upstream_kept.lost`: the
statements the new upstream adds to each carried symbol that the output holds on neither side of its
conflict regions.  Also the conflict regions and the decisions (regions joined by their links, which the
maintainer takes to one side together), against the regions of plain ``git merge-file --diff3`` on the same
projections (per runner module: the old upstream projection, the new one, the module the series built on the
old one).  A table goes to stdout; exit 1 when any statement is lost.

Environment: ``PQ_UPSTREAM_GIT`` (default: the corpus bundle), ``PQ_CACHE``, ``PQ_CORPUS``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from conflict_metrics import merge_file_regions  # noqa: E402
from golden import UPGRADES  # noqa: E402

from patch_queue.checks import upstream_kept  # noqa: E402
from patch_queue.series.queue import QueueDir  # noqa: E402


def run(cwd: Path, *args: str, ok: Sequence[int] = (0,)) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(args)} exited {proc.returncode} in {cwd}: {proc.stderr.strip()[-400:]}")
    return proc.stdout


def pq(cwd: Path, *args: str, ok: Sequence[int] = (0,)) -> str:
    return run(cwd, sys.executable, "-m", "patch_queue", *args, ok=ok)


def adopt(project: Path, source: Path) -> None:
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    run(project, "git", "init", "-q")
    pq(project, "adopt", str(source))


def decisions(conflicts: Sequence[Mapping[str, Any]]) -> int:
    """The conflict regions joined by a link they share within one patch: how many choices a maintainer makes."""
    parent = list(range(len(conflicts)))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    owner: dict[tuple[str, str], int] = {}
    for k, c in enumerate(conflicts):
        for link in c.get("links") or []:
            first = owner.setdefault((str(c["patch"]), str(link)), k)
            parent[find(k)] = find(first)
    return len({find(k) for k in range(len(conflicts))})


def measure(old: str, new: str, corpus: Path, work: Path) -> dict[str, Any]:
    project = work / "old"
    adopt(project, corpus / f"vllm-omni-{old}" / "npu")
    if new.startswith("vllm-ascend=="):
        target = new
    else:
        adopt(work / "new", corpus / f"vllm-omni-{new}" / "npu")
        target = QueueDir(work / "new" / "patches").load_queue().upstream.public_commit
    old_base = run(project, "git", "rev-parse", "refs/pq/base").strip()
    old_top = run(project, "git", "rev-parse", "refs/pq/top").strip()
    report = work / "refresh.json"
    pq(project, "refresh", "--no-stop", "--to", target, "--report", str(report), ok=(0, 1, 3))
    data = json.loads(report.read_text(encoding="utf-8"))
    pending = run(project, "git", "for-each-ref", "refs/pq/refresh/base").strip()
    new_base = "refs/pq/refresh/base" if pending else "refs/pq/base"
    lost: list[upstream_kept.Lost] = []
    plain = 0
    for module in QueueDir(project / "patches").load_queue().modules:
        if not module.upstream:
            continue
        path = f".pq-upstream/{module.upstream}"
        out = project / "npu_worker" / module.path
        lost += upstream_kept.lost(
            run(project, "git", "show", f"{old_base}:{path}"),
            run(project, "git", "show", f"{new_base}:{path}"),
            out.read_text(encoding="utf-8") if out.is_file() else "",
            module.symbols,
            file=module.path,
        )
        projections = [run(project, "git", "show", f"{ref}:{module.path}") for ref in (old_base, new_base, old_top)]
        plain += merge_file_regions(*projections)[0]
    return {
        "upgrade": f"{old} -> {new}",
        "git_merge_file": plain,
        "regions": len(data["conflicts"]),
        "decisions": decisions(data["conflicts"]),
        "lost": [{"file": x.file, "symbol": x.symbol, "line": x.line, "statement": x.statement} for x in sorted(lost)],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="older releases to measure, comma-separated")
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    corpus = Path(os.environ.get("PQ_CORPUS") or REPO.parent / "shared" / "corpus")
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    only = {x for x in args.only.split(",") if x}
    work = args.keep or Path(tempfile.mkdtemp(prefix="pq-kept-"))
    rows = []
    print("| upgrade | git merge-file regions | pq conflict regions | decisions | upstream statements lost |")
    print("|---|---|---|---|---|")
    for old, new in UPGRADES:
        if only and old not in only:
            continue
        row = measure(old, new, corpus, work / old)
        rows.append(row)
        cells = (row["upgrade"], row["git_merge_file"], row["regions"], row["decisions"], len(row["lost"]))
        print("| " + " | ".join(map(str, cells)) + " |", flush=True)
        for x in row["lost"]:
            print(
                f"  lost: {x['file']} {x['symbol']} (upstream line {x['line']}): {x['statement'][:90]}", file=sys.stderr
            )
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 1 if any(row["lost"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
