"""Issue 32's measure on this repository's series: refreshed onto vllm-ascend, resolved, then the maintainers' newer
vllm-omni releases merged in, one after the other.

Usage::

    python bench/merge_series.py [--to vllm-ascend==0.30.0rc2] [--releases 0.31.0rc1,0.32.0rc1] [--keep DIR]

``pq adopt vllm-omni==0.30.0`` at its upstream base, ``pq refresh --no-stop --to TO`` resolved as
``bench/bench.py``'s section 5 does (every region to its patch side, ``pq continue``; ``--accept-errors`` when
pq check's errors block it); then for each release ``pq merge X``, measured before its regions are resolved:

- the statements the maintainers added since the release before (``merge_saved.added_statements``) missing from
  the output, outside conflict regions and on the release's side of one (``merge_saved.missing``);
- the series' lines (the output before the merge) that the release did not remove, missing from the series'
  side of the output (outside conflict regions and the first side of each): lost without a conflict;

then every region resolved to the release's side (``merge_saved.resolve_all``) and ``pq continue``.  At the end:
the new modules byte for byte against the last release, the pins, and ``pq reproduce`` in a fresh clone (with
``refs/pq/resolutions``) byte for byte.  Deterministic Markdown on stdout.  Environment as for ``bench/bench.py``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from merge_saved import added_statements, missing, pending, resolve_all

from bench import git, pq, read_folder
from patch_queue import presets
from patch_queue.commands.adopt import read_downstream
from patch_queue.merge import markers

BASE_030 = "cf0baa38dfb2"


def release(version: str) -> dict[str, str]:
    return {
        k: v.decode("utf-8")
        for k, v in read_downstream(f"vllm-omni=={version}", progress=None, spec=presets.NPU)[0].items()
    }


def lost_without_conflict(
    before: dict[str, str], marked: dict[str, str], old: dict[str, str], new: dict[str, str]
) -> tuple[int, int]:
    """(series lines the release did not remove, those missing from the series' side of the merge's output)."""
    kept = lost = 0
    for module, text in before.items():
        removed = Counter(old.get(module, "").splitlines()) - Counter(new.get(module, "").splitlines())
        wanted = Counter(text.splitlines()) - removed
        ours = Counter(markers.one_side(marked.get(module, ""), "ours")[0].splitlines())
        kept += sum(wanted.values())
        lost += sum((wanted - ours).values())
    return kept, lost


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--to", default="vllm-ascend==0.30.0rc2")
    parser.add_argument("--releases", type=lambda text: text.split(","), default=["0.31.0rc1", "0.32.0rc1"])
    parser.add_argument("--keep", type=Path, help="work here and keep the projects")
    args = parser.parse_args(argv)
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="pq-merge-series-"))
    project = root / "series"
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    out = [f"# This repository's series: 0.30.0 refreshed onto {args.to}, then {', '.join(args.releases)} merged", ""]
    try:
        git(project, "init", "-q")
        pq(project, "adopt", "vllm-omni==0.30.0", "--at", BASE_030)
        code = pq(project, "refresh", "--no-stop", "--to", args.to, ok=(0, 1, 3))[0]
        if pending(project):
            resolve_all(project, 10_000)
            code = pq(project, "continue", ok=(0, 1))[0]
            if pending(project):
                code = pq(project, "continue", "--accept-errors")[0]
        out.append(
            f"- `pq refresh --no-stop --to {args.to}`, every region to its patch side, `pq continue`: exit {code}"
        )
        refreshed = read_folder(project / "npu_worker")
        previous = "0.30.0"
        out += [
            "",
            "| merge | exit | conflict regions | statements added | missing | series lines kept "
            "| lost without a conflict |",
            "|---|---|---|---|---|---|---|",
        ]
        for version in args.releases:
            before = read_folder(project / "npu_worker")
            code = pq(project, "merge", version, ok=(0, 1, 3))[0]
            marked = read_folder(project / "npu_worker")
            regions = sum(len(markers.regions(t)) for t in marked.values())
            old, new = release(previous), release(version)
            wanted = added_statements(old, new)
            lost, _notes = missing(wanted, marked)
            kept, dropped = lost_without_conflict(before, marked, old, new)
            out.append(
                f"| {previous} -> {version} | {code} | {regions} | {len(wanted)} | {len(lost)} | {kept} | {dropped} |"
            )
            if pending(project):
                resolve_all(project, 10_000)
                pq(project, "continue", "--accept-errors")
            previous = version
        final = read_folder(project / "npu_worker")
        last = release(args.releases[-1])
        out.append("")
        for module in sorted(set(last) - set(release("0.30.0"))):
            same = "byte-identical" if final.get(module) == last[module] else "DIFFERS"
            out.append(f"- `{module}` (new since 0.30.0): {same} to {args.releases[-1]}'s")
        queue = (project / "patches" / "queue.toml").read_text(encoding="utf-8")
        pins = [line for line in queue.splitlines() if line.startswith(("release = ", "label = "))][:2]
        out.append(f"- pins: {'; '.join(pins)}")
        lines = sum(Counter(t.splitlines()).total() for t in refreshed.values())
        kept_rc = sum(
            (Counter(t.splitlines()) - Counter(final.get(m, "").splitlines())).total() for m, t in refreshed.items()
        )
        out.append(
            "- lines of the refreshed output no longer in the end result (every region taken to the release's "
            f"side): {kept_rc} of {lines}"
        )
        # a fresh clone reproduces it
        git(project, "add", "-A")
        git(project, "commit", "-qm", "series")
        clone = root / "clone"
        shutil.rmtree(clone, ignore_errors=True)
        git(root, "clone", "-q", str(project), str(clone))
        git(clone, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
        for body in (clone / "patches").glob("*.patch"):
            body.unlink()
        shutil.rmtree(clone / "npu_worker", ignore_errors=True)
        pq(clone, "reproduce")
        same = all(read_folder(clone / folder) == read_folder(project / folder) for folder in ("npu_worker",)) and {
            p.name: p.read_bytes() for p in (clone / "patches").glob("*.patch")
        } == {p.name: p.read_bytes() for p in (project / "patches").glob("*.patch")}
        out.append(
            f"- `pq reproduce` in a fresh clone with `refs/pq/resolutions`: {'byte for byte' if same else 'DIFFERS'}"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
