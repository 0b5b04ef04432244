"""Section 5 of the benchmark alone: work saved on every real upgrade with a newer corpus release.

Usage::

    python bench/work_saved.py [--out FILE.md] [--json FILE.json] [--keep DIR] [--only OLD,...]

Per upgrade it adopts both releases and runs one ``pq refresh`` (as ``bench/bench.py`` section 1
does), without the baselines, timings and scale; the Markdown it prints (and writes to ``--out``)
holds no date or timing, so two commits' outputs compare with ``diff``.  Environment as for
``bench/bench.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from conflict_table import corpus_dir, say

from bench import UPGRADES, Json, StepError, quality, render_work_saved
from patch_queue import presets
from patch_queue.sources.snapshot import upstream_git_location


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--keep", type=Path, help="work here and keep the projects")
    parser.add_argument(
        "--only", type=lambda text: text.split(","), help="the upgrades from these releases, e.g. 0.18.0"
    )
    args = parser.parse_args(argv)
    corpus = corpus_dir()
    if not (corpus / "vllm-ascend.bundle").is_file():
        parser.error(f"no corpus at {corpus} (set PQ_CORPUS)")
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    location = upstream_git_location(None, spec=presets.NPU)
    chosen = [u for u in UPGRADES if u.new is not None and (args.only is None or u.old in args.only)]
    if not chosen:
        parser.error(f"no upgrade from {args.only} with a newer corpus release")
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="pq-work-saved-"))
    rows: list[Json] = []
    try:
        for i, up in enumerate(chosen):
            work = root / f"u{i}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            try:
                rows.append(quality(up, corpus, work, location, None)[0])
            except (StepError, OSError, ValueError) as exc:
                say(f"{up.title}: {exc}")
                rows.append({"title": up.title, "error": str(exc)})
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    md = ["# Work saved", "", *render_work_saved(rows)]
    md += [f"- {r['title']}: not measured: {r['error']}" for r in rows if r.get("error")]
    text = "\n".join(md).rstrip("\n") + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    if args.json is not None:
        keys = ("title", "error", "work_saved", "work_saved_synced")
        data = [{k: r.get(k) for k in keys} for r in rows]
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
