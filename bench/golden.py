"""Digest everything pq writes on the real upgrade history, to show a refactor changed no output.

Usage::

    python bench/golden.py OUT.json [--only 0.18.0] [--compare OLD.json]

For each corpus upgrade (0.14.0 -> 0.16.0, ..., 0.24.0 -> 0.30.0: the target is the upstream base
``pq adopt`` finds for the newer release; 0.30.0 -> vllm-ascend==0.30.0rc2) in a fixed folder
under ``$TMPDIR/pq-golden``: ``pq adopt`` the older release, then ``pq refresh --no-stop`` with
every report (JSON, Markdown, annotations), ``pq check --json``, ``pq blocks --markdown``,
``pq status`` and ``pq build --standalone --wheel``. The sha256 of each command's exit code and
stdout and of every file under ``patches/``, ``npu_worker/``, ``dist/`` and the reports goes to
OUT.json. ``--compare`` exits 1 naming every digest that differs from an earlier run.

Environment: ``PQ_UPSTREAM_GIT`` (default: the corpus bundle), ``PQ_CACHE``, ``PQ_CORPUS``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UPGRADES = (
    ("0.14.0", "0.16.0"),
    ("0.16.0", "0.18.0"),
    ("0.18.0", "0.20.0"),
    ("0.20.0", "0.22.0"),
    ("0.22.0", "0.24.0"),
    ("0.24.0", "0.30.0"),
    ("0.30.0", "vllm-ascend==0.30.0rc2"),
)


def pq(cwd: Path, digests: dict[str, str], key: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "patch_queue", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "SOURCE_DATE_EPOCH": "1700000000"},
    )
    if proc.returncode not in (0, 1, 3):
        raise SystemExit(f"pq {' '.join(args)} exited {proc.returncode} in {cwd}: {proc.stderr.strip()[-400:]}")
    digests[key] = hashlib.sha256(f"{proc.returncode}\n{proc.stdout}".encode()).hexdigest()
    return proc.stdout


def tree(root: Path, digests: dict[str, str], key: str) -> None:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digests[f"{key}/{path.relative_to(root)}"] = hashlib.sha256(path.read_bytes()).hexdigest()


def adopt(project: Path, npu: Path, digests: dict[str, str], key: str) -> None:
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    pq(project, digests, f"{key}/adopt", "adopt", str(npu))
    tree(project / "patches", digests, f"{key}/adopt/patches")


def upgrade(corpus: Path, work: Path, old: str, new: str) -> dict[str, str]:
    digests: dict[str, str] = {}
    key = f"{old}->{new}"
    if new.startswith("vllm-ascend"):
        target = new
    else:
        adopt(work / "new", corpus / f"vllm-omni-{new}" / "npu", {}, key)
        queue = (work / "new" / "patches" / "queue.toml").read_text(encoding="utf-8")
        target = next(
            line.split('"')[1] for line in queue.splitlines() if line.startswith(("public_commit", "public ="))
        )
    project = work / "old"
    adopt(project, corpus / f"vllm-omni-{old}" / "npu", digests, key)
    reports = work / "reports"
    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir()
    pq(
        project,
        digests,
        f"{key}/refresh",
        "refresh",
        "--no-stop",
        "--to",
        target,
        "--report",
        str(reports / "refresh.json"),
        "--markdown",
        str(reports / "refresh.md"),
        "--annotations",
    )
    pq(project, digests, f"{key}/status", "status")
    pq(project, digests, f"{key}/check", "check", "--json", str(reports / "check.json"))
    pq(project, digests, f"{key}/blocks", "blocks", "--markdown", str(reports / "blocks.md"))
    tree(reports, digests, f"{key}/reports")
    tree(project / "patches", digests, f"{key}/patches")
    tree(project / "npu_worker", digests, f"{key}/npu_worker")
    return digests


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", default=None)
    parser.add_argument("--compare", type=Path, default=None)
    args = parser.parse_args()
    corpus = Path(os.environ.get("PQ_CORPUS") or REPO.parent / "shared" / "corpus")
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    digests: dict[str, str] = {}
    for old, new in UPGRADES:
        if args.only and args.only != old:
            continue
        print(f"== {old} -> {new}", file=sys.stderr, flush=True)
        digests.update(upgrade(corpus, Path(tempfile.gettempdir()) / "pq-golden" / old, old, new))
    args.out.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    if args.compare is None:
        return 0
    before: dict[str, str] = json.loads(args.compare.read_text(encoding="utf-8"))
    differ = sorted(k for k in before.keys() | digests.keys() if before.get(k) != digests.get(k))
    for k in differ:
        print(f"differs: {k}", file=sys.stderr)
    print(f"{len(digests)} digests, {len(differ)} differ", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
