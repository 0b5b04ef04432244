"""What a refresh leaves that would fail at run time, on every real upgrade: undefined names and calls made twice.

Usage::

    python bench/merge_defects.py [--only OLD,...] [--keep DIR] [--out FILE.md]

Per upgrade of ``bench/bench.py`` (the older corpus release adopted, ``pq refresh --no-stop`` onto
the newer release's upstream base, or onto the newest vllm-ascend release), with each side of
every conflict region taken in turn (upstream, patch):

- **undefined names** (ruff F821): split into names the new upstream module binds (an import pq
  should have added), names only the old upstream module bound (an API upstream removed, which the
  old code on a conflict's patch side still calls) and the rest (locals only the other side of a
  conflict region binds);
- **calls made twice**: ``pq check``'s ``statement-duplicated`` rule, a call statement a method
  makes more often than both the old omni method and the new upstream method do;
- the refresh's conflicts by kind, its ``import-added`` / ``import-stale`` / ``api-replaced`` /
  ``already-upstream`` flags, and the omni blocks before and after;
- the size of the pull-request body the scheduled refresh would post (``report.markdown`` within its
  budget, in the characters GitHub counts) and of the whole report.

The Markdown holds no timing, so two commits' outputs compare with ``diff``.  Environment as for
``bench/bench.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from conflict_table import corpus_dir, say

from bench import UPGRADES, Json, Upgrade, adopt, git, pq
from patch_queue import presets
from patch_queue.checks.duplicates import check_duplicates
from patch_queue.outputs import report as body_report
from patch_queue.series import fmt, reimport

RUNNER_MODULE = "vllm_ascend.worker.model_runner_v1"
SIDES = ("upstream", "patch")


def measure(up: Upgrade, corpus: Path, work: Path) -> Json:
    say(f"== {up.title}")
    if up.new is not None:
        target = adopt(work / "new", corpus / f"vllm-omni-{up.new}" / "npu")[1].upstream.public_commit
    project = work / "old"
    adopt(project, corpus / f"vllm-omni-{up.old}" / "npu")
    report = work / "refresh.json"
    args = ["refresh", "--no-stop", "--report", str(report)] + ([] if up.new is None else ["--to", target])
    pq(project, *args, ok=(0, 3))
    data = json.loads(report.read_text(encoding="utf-8"))
    base = "refs/pq/refresh/base" if git(project, "for-each-ref", "refs/pq/refresh/base").strip() else "refs/pq/base"
    upstream = git(project, "show", f"{base}:.pq-upstream/vllm_ascend/worker/model_runner_v1.py")
    bound = reimport.bindings(upstream, RUNNER_MODULE)
    # what the old upstream module bound: a name it lost is an API upstream removed, which old code still calls
    old_up = git(project, "show", "refs/pq/base:.pq-upstream/vllm_ascend/worker/model_runner_v1.py")
    removed = set(reimport.bindings(old_up, RUNNER_MODULE)) - set(bound)
    old = {p.name: p.read_text(encoding="utf-8") for p in (corpus / f"vllm-omni-{up.old}" / "npu").glob("*.py")}
    texts = {p.name: p.read_text(encoding="utf-8") for p in sorted((project / "npu_worker").glob("*.py"))}
    row: Json = {
        "title": up.title,
        "conflicts": dict(sorted(Counter(str(c["kind"]) for c in data["conflicts"]).items())),
        "flags": {
            k: sum(1 for f in data["flags"] if f["kind"] == k)
            for k in ("import-added", "import-stale", "api-replaced", "already-upstream")
        },
        "blocks": [data["blocks"]["before"], data["blocks"]["after"]],
        "body": [
            body_report.github_chars(body_report.markdown(data, limit=lim, queue=presets.NPU))
            for lim in (body_report.BODY_BUDGET, None)
        ],
    }
    for i, side in enumerate(SIDES):
        views = {name: reimport.sides(text)[min(i, len(reimport.sides(text)) - 1)] for name, text in texts.items()}
        undefined = [(name, lint.name) for name, view in views.items() for lint in fmt.lint(view, ("F821",)) or []]
        row[side] = {
            "unparsable": sorted(name for name, view in views.items() if fmt.lint(view, ("F821",)) is None),
            "undefined_upstream_binds": sorted(f"{n}:{x}" for n, x in undefined if x in bound),
            "undefined_removed": len([x for _n, x in undefined if x in removed]),
            "undefined_other": len([x for _n, x in undefined if x not in bound and x not in removed]),
            "twice": sorted(
                f"{f.file}:{f.line}" for f in check_duplicates(views, old, upstream, cls=presets.NPU.upstream_class)
            ),
        }
    return row


def render(rows: Sequence[Json]) -> str:
    out = [
        "# Merge defects on the real upgrades",
        "",
        "| upgrade | conflicts | import-added | import-stale | api-replaced | already-upstream | blocks | side "
        "| unparsable "
        "| undefined: upstream binds | undefined: upstream removed | undefined: other | calls made twice "
        f"| PR body chars (full report chars), budget {body_report.BODY_BUDGET:,} |",
        "|---|---|--:|--:|--:|--:|---|---|---|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        conflicts = ", ".join(f"{k} {v}" for k, v in r["conflicts"].items()) or "0"
        for side in SIDES:
            s = r[side]
            head = [r["title"], conflicts, *(str(r["flags"][k]) for k in r["flags"])] if side == SIDES[0] else [""] * 6
            blocks = f"{r['blocks'][0]} → {r['blocks'][1]}" if side == SIDES[0] else ""
            cells = [*head, blocks, side, ", ".join(s["unparsable"]) or "-"]
            cells += [str(len(s["undefined_upstream_binds"])), str(s["undefined_removed"]), str(s["undefined_other"])]
            cells.append(str(len(s["twice"])))
            cells.append(f"{r['body'][0]:,} ({r['body'][1]:,})" if side == SIDES[0] else "")
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    parser.add_argument("--keep", type=Path, help="work here and keep the projects")
    parser.add_argument("--only", type=lambda t: t.split(","), help="the upgrades from these releases, e.g. 0.18.0")
    args = parser.parse_args(argv)
    corpus = corpus_dir()
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    chosen = [u for u in UPGRADES if args.only is None or u.old in args.only]
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="pq-merge-defects-"))
    try:
        rows = []
        for i, up in enumerate(chosen):
            work = root / f"u{i}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            rows.append(measure(up, corpus, work))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    text = render(rows)
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
