"""`pq check` after `pq sync-gpu` on every real upgrade, with the source checks (imports resolved in the real
trees, the NPU rules, undefined names): what ports would fail at run time.

Usage::

    python bench/sync_check.py [--keep DIR] [--only OLD,...]

Per corpus upgrade OLD -> NEW it adopts vllm-omni==OLD from the package registry (at the upstream base
``pq adopt`` finds for it; the source checks need a pinned release, which a corpus folder is not), runs
``pq check``, then ``pq sync-gpu --omni vllm-omni==NEW --since vllm-omni==OLD`` and ``pq check`` again, and
prints the findings of each check counted by rule, and every error after the sync.  Exit 1 when a sync leaves
an error the adopted release did not have.  Environment as for ``bench/bench.py`` (``PQ_CORPUS``, and the
upstream history: ``PQ_UPSTREAM_GIT``, default the corpus bundle).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from conflict_table import corpus_dir

from bench import UPGRADES, git, pq

_FINDING = re.compile(r"^\S+:\d+: (error|warning): \[([\w-]+)\]", re.M)


def findings(out: str) -> tuple[Counter[str], list[str]]:
    """The findings `pq check` printed, counted by rule (``error:``/``warning:`` before it), and its error lines."""
    counted = Counter(f"{m[1]} {m[2]}" for m in _FINDING.finditer(out))
    return counted, [line for line in out.splitlines() if ": error: [" in line]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="work here and keep the projects")
    parser.add_argument("--only", type=lambda text: text.split(","), help="the upgrades from these releases")
    args = parser.parse_args(argv)
    corpus = corpus_dir()
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    chosen = [u for u in UPGRADES if u.new is not None and (args.only is None or u.old in args.only)]
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="pq-sync-check-"))
    failed = False
    try:
        for up in chosen:
            assert up.new is not None
            project = root / f"r{up.old}"
            shutil.rmtree(project, ignore_errors=True)
            project.mkdir(parents=True)
            git(project, "init", "-q")
            pq(project, "adopt", f"vllm-omni=={up.old}")
            before, old_errors = findings(pq(project, "check", ok=(0, 1))[2])
            sync = pq(project, "sync-gpu", "--omni", f"vllm-omni=={up.new}", "--since", f"vllm-omni=={up.old}")[2]
            after, errors = findings(pq(project, "check", ok=(0, 1))[2])
            summary = next((line for line in sync.splitlines() if line.startswith("sync-gpu:")), "")
            print(f"## {up.title}\n\n- {summary}")
            for label, counted in (("adopted", before), ("synced", after)):
                print(f"- check, {label}: " + (", ".join(f"{n} {k}" for k, n in sorted(counted.items())) or "clean"))
            print("".join(f"  - {line}\n" for line in errors))
            failed |= len(errors) > len(old_errors)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
