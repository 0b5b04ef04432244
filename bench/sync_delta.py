"""What the default `pq sync-gpu` (the GPU delta of one release) does on every pair of consecutive vllm-omni releases.

Usage::

    python bench/sync_delta.py [--keep DIR] [--only OLD,...] [--json FILE]

Per pair OLD -> NEW (the corpus releases, then 0.30.0 -> 0.31.0rc1 -> 0.32.0rc1 from the registry) it adopts OLD's
NPU runners, refreshes onto the vllm-ascend commit NEW's runners are based on (when it differs; every conflict
resolved to its patch side and ``pq continue``; not with ``--no-refresh``: the sync alone), measures work saved
against NEW's NPU runners (as ``bench/work_saved.py`` does), runs
``pq sync-gpu --omni vllm-omni==NEW --since vllm-omni==OLD --report`` (the default: the sure ports applied, the
rest proposed) and measures again, then ``pq check``.  Per pair it prints:

- work saved before and after the sync;
- applied: ports, the lines they add and remove, and their precision: added lines that occur in the maintainers'
  NEW or any later release's NPU runners, removed lines NEW's or a later release's runners hold fewer times than
  OLD's;
- proposals and their precision alike (lines a proposal adds that occur in NEW or later);
- unplaced changes;
- recall of proposals: of the omni lines the maintainers added in NEW (in neither OLD's NPU runners nor the new
  upstream file) that occur in NEW's GPU runners, the share an applied port or a proposal adds;
- the errors of ``pq check`` (undefined names among them) before and after the sync.

Exit 1 when a sync leaves work saved lower than before it, or more ``pq check`` errors.  Environment as for
``bench/bench.py`` (``PQ_CORPUS``; the upstream history ``PQ_UPSTREAM_GIT``, default the corpus bundle).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import conflict_metrics as cm
from conflict_table import corpus_dir

from bench import RUNNER, adopt, pq, read_folder
from patch_queue import presets
from patch_queue.sources.archives import release_files
from patch_queue.sources.snapshot import resolve_upstream, upstream_git_location

RELEASES = ("0.14.0", "0.16.0", "0.18.0", "0.20.0", "0.22.0", "0.24.0", "0.30.0", "0.31.0rc1", "0.32.0rc1")
_ERROR = re.compile(r"^\S+:\d+: error: \[([\w-]+)\]", re.M)
Json = dict[str, object]


def release_folder(version: str, corpus: Path, root: Path) -> Path:
    """A folder with ``npu/`` and ``gpu/`` of the release: the corpus's, else extracted from its wheel."""
    if (corpus / f"vllm-omni-{version}" / "npu").is_dir():
        return corpus / f"vllm-omni-{version}"
    out = root / f"vllm-omni-{version}"
    if not out.is_dir():
        for side, prefix in (("npu", "vllm_omni/platforms/npu/worker/"), ("gpu", "vllm_omni/worker/")):
            (out / side).mkdir(parents=True)
            for name, data in release_files("vllm-omni", version, prefix).items():
                rest = name[len(prefix) :] if name.startswith(prefix) else name.rsplit("/", 1)[-1]
                if "/" not in rest and rest.endswith(".py"):
                    (out / side / rest).write_bytes(data)
    return out


def errors(project: Path) -> Counter[str]:
    return Counter(_ERROR.findall(pq(project, "check", ok=(0, 1))[2]))


def code(text: str) -> list[str]:
    return [s for line in text.splitlines() if (s := line.strip()) and not s.startswith("#")]


def measure(old: str, new: str, corpus: Path, work: Path, location: str, refresh: bool = True) -> Json:
    old_dir, new_dir = release_folder(old, corpus, work), release_folder(new, corpus, work)
    later = [release_folder(v, corpus, work) for v in RELEASES[RELEASES.index(new) :]]
    project = work / "p"
    adopt(project, old_dir / "npu")
    _seconds, new_queue = adopt(work / "new", new_dir / "npu")
    target = resolve_upstream(new_queue.upstream.public_commit, upstream_git=location, queue=presets.NPU)
    queue_text = (project / "patches" / "queue.toml").read_text(encoding="utf-8")
    if refresh and new_queue.upstream.public_commit not in queue_text:
        pq(project, "refresh", "--no-stop", "--no-check", "--to", new_queue.upstream.public_commit, ok=(0, 3))
        if (project / ".git" / "pq" / "refresh.json").is_file():
            for path in sorted((project / "npu_worker").glob("*.py")):
                path.write_text(cm.take_side(path.read_text(encoding="utf-8"), "patch"), encoding="utf-8")
            pq(project, "continue", "--accept-errors", ok=(0, 1))
    upstream_text = target.read(RUNNER).decode("utf-8")
    old_npu, new_npu = read_folder(old_dir / "npu"), read_folder(new_dir / "npu")
    gpu = read_folder(new_dir / "gpu")
    old_gpu = read_folder(old_dir / "gpu")

    def saved() -> float | None:
        w = cm.work_saved(read_folder(project / "npu_worker"), old_npu, new_npu, upstream_text, gpu.values())
        return cm.saved(int(w["d_pq"]), int(w["d_old"]))  # type: ignore[call-overload]

    row: Json = {"pair": f"{old} → {new}", "before": saved(), "errors_before": errors(project)}
    report = work / "sync.json"
    pq(project, "sync-gpu", "--omni", f"vllm-omni=={new}", "--since", f"vllm-omni=={old}", "--report", str(report))
    data = json.loads(report.read_text(encoding="utf-8"))
    row["after"] = saved()
    row["errors_after"] = errors(project)
    theirs = cm.pooled({f"{i}/{n}": t for i, d in enumerate(later) for n, t in read_folder(d / "npu").items()})
    added = [line for a in data["applied"] for line in code(a["result"])]
    removed = [(Path(a["file"]).name, line) for a in data["applied"] for line in code(a["replaced"])]
    row["applied_removals"] = sum(1 for a in data["applied"] if not a["result"])
    row["applied"] = len(data["applied"])
    row["applied_patches"] = len({a["patch"] for a in data["applied"]})
    row["applied_added"] = [sum(1 for line in added if line in theirs), len(added)]
    gone = 0
    later_npu = [read_folder(d / "npu") for d in later]
    for name, line in removed:  # the maintainers removed it too: in NEW or a later release it is there fewer times
        before = Counter(code(old_npu.get(name, "")))[line]
        gone += any(Counter(code(folder.get(name, "")))[line] < before for folder in later_npu)
    row["applied_removed"] = [gone, len(removed)]
    proposed = [line for p in data["proposals"] for line in code(p["result"])]
    row["proposals"] = len(data["proposals"])
    row["proposed_lines"] = [sum(1 for line in proposed if line in theirs), len(proposed)]
    row["unplaced"] = len(data["unplaced"])
    upstream = cm.stripped_set([upstream_text])
    seen = set(cm.pooled(old_npu))
    gpu_lines = cm.stripped_set(gpu.values())
    wanted = Counter(
        {x: n for x, n in cm.pooled(new_npu).items() if x not in upstream and x not in seen and x in gpu_lines}
    )
    offered = Counter(added + proposed)
    row["recall"] = [sum(min(n, offered[x]) for x, n in wanted.items()), wanted.total()]
    row["gpu_changed_lines"] = cm.multiset_distance(cm.pooled(old_gpu), cm.pooled(gpu))
    return row


def share(pair: object) -> str:
    got, total = pair if isinstance(pair, list) else (0, 0)
    return f"{got}/{total}" + (f" ({100 * got / total:.0f} %)" if total else "")


def percent(value: object) -> str:
    return "n/a" if not isinstance(value, float) else f"{100 * value:.0f} %"


def render(rows: Sequence[Json]) -> str:
    head = (
        "| pair | work saved before → after | applied (patches) | applied lines added in NEW or later "
        "| applied removals the maintainers made | proposals | proposed lines in NEW or later | unplaced "
        "| recall of proposals | pq check errors before → after |"
    )
    out = [head, "|" + "---|" * 10]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['pair']} | {r['error']} |" + " |" * 8)
            continue
        eb, ea = r["errors_before"], r["errors_after"]
        assert isinstance(eb, Counter) and isinstance(ea, Counter)
        out.append(
            f"| {r['pair']} | {percent(r['before'])} → {percent(r['after'])} | {r['applied']} ({r['applied_patches']}) "
            f"| {share(r['applied_added'])} | {share(r['applied_removed'])} | {r['proposals']} "
            f"| {share(r['proposed_lines'])} | {r['unplaced']} | {share(r['recall'])} "
            f"| {eb.total()} → {ea.total()} ({ea.get('name-undefined', 0)} undefined names) |"
        )
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="work here and keep the projects")
    parser.add_argument("--only", type=lambda text: text.split(","), help="the pairs from these releases")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument(
        "--no-refresh", action="store_true", help="sync on OLD's own base (the sync alone), not NEW's base"
    )
    args = parser.parse_args(argv)
    corpus = corpus_dir()
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    location = upstream_git_location(None, spec=presets.NPU)
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="pq-sync-delta-"))
    rows: list[Json] = []
    failed = False
    try:
        for old, new in zip(RELEASES, RELEASES[1:], strict=False):
            if args.only is not None and old not in args.only:
                continue
            work = root / old
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            print(f"== {old} → {new}", file=sys.stderr, flush=True)
            try:
                row = measure(old, new, corpus, work, location, refresh=not args.no_refresh)
            except Exception as exc:  # noqa: BLE001 - one pair's failure is a row of the table
                rows.append({"pair": f"{old} → {new}", "error": str(exc).splitlines()[0]})
                failed = True
                continue
            rows.append(row)
            before, after = row["before"], row["after"]
            eb, ea = row["errors_before"], row["errors_after"]
            assert isinstance(eb, Counter) and isinstance(ea, Counter)
            worse = isinstance(before, float) and isinstance(after, float) and after < before
            failed |= worse or ea.total() > eb.total()
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    text = render(rows)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=dict) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
