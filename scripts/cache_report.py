"""Say what the workflow's cache gave pq: whether it hit, and whether the vllm-ascend mirror was read from it.

Usage (the scheduled workflow runs it around `scripts/refresh_pr.py prepare`)::

    python bench/cache_report.py before --state FILE
    python bench/cache_report.py after --state FILE

``before`` (after the cache is restored) prints whether the cache hit (``CACHE_HIT``, the `cache-hit`
output of actions/cache: ``true`` only for the exact key), which entry it restored (``CACHE_MATCHED``) and
each upstream mirror found under ``$PQ_CACHE/git/`` (its objects and a digest of its refs), and keeps
that in FILE. ``after`` compares each mirror with FILE: ``cloned`` (it was not in the cache), ``fetched``
(refs or objects changed: an older entry restored, or upstream moved since), or ``unchanged`` (read
from the cache as it was, nothing fetched). So the second run of a day, which hits the day's entry,
prints ``cache: hit`` and ``unchanged`` for the mirror, and a first run prints ``fetched`` (an older
entry) or ``cloned`` (none). Each line goes to stdout and, in a workflow, to the job summary
(``$GITHUB_STEP_SUMMARY``). Exit 1 with one line on bad input (no ``PQ_CACHE``, an unreadable FILE).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


class ReportError(Exception):
    pass


def mirrors(cache: Path) -> dict[str, dict[str, str | int]]:
    """Every bare mirror under ``cache/git``: its object count and a sha256 of its refs, by folder name."""
    out: dict[str, dict[str, str | int]] = {}
    for path in sorted((cache / "git").glob("*.git")):
        if not (path / "HEAD").is_file():
            continue
        counts = dict(
            line.split(": ", 1)
            for line in _git(path, "count-objects", "-v").splitlines()
            if line.startswith(("count:", "in-pack:"))
        )
        refs = _git(path, "for-each-ref", "--format=%(objectname) %(refname)")
        out[path.name] = {
            "objects": int(counts.get("count", 0)) + int(counts.get("in-pack", 0)),
            "refs": len(refs.splitlines()),
            "digest": hashlib.sha256(refs.encode()).hexdigest(),
        }
    return out


def _git(path: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ReportError(f"{path}: git {args[0]} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout


def before(cache: Path, hit: str, matched: str) -> tuple[list[str], dict[str, dict[str, str | int]]]:
    found = mirrors(cache)
    if hit == "true":
        lines = [f"cache: hit ({matched or 'the exact key'}): the upstream mirror is read from it"]
    elif matched:
        lines = [f"cache: an older entry restored ({matched}): the upstream mirror is fetched from there on"]
    else:
        lines = ["cache: miss: pq clones the upstream mirror"]
    lines += [f"mirror {name}: {m['objects']} objects, {m['refs']} refs in the cache" for name, m in found.items()]
    if not found:
        lines.append("mirror: none in the cache")
    return lines, found


def after(cache: Path, saved: dict[str, dict[str, str | int]]) -> list[str]:
    lines = []
    for name, m in mirrors(cache).items():
        old = saved.get(name)
        if old is None:
            lines.append(f"mirror {name}: cloned ({m['objects']} objects): it was not in the cache")
        elif old["digest"] != m["digest"] or old["objects"] != m["objects"]:
            lines.append(f"mirror {name}: fetched ({old['objects']} -> {m['objects']} objects, refs changed)")
        else:
            lines.append(f"mirror {name}: unchanged: read from the cache, nothing fetched")
    return lines or ["mirror: none (pq read no upstream git history)"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("when", choices=("before", "after"))
    parser.add_argument("--state", type=Path, required=True, help="where `before` keeps what `after` compares")
    args = parser.parse_args(argv)
    try:
        if not os.environ.get("PQ_CACHE"):
            raise ReportError("PQ_CACHE is not set: name pq's cache folder")
        cache = Path(os.environ["PQ_CACHE"]).expanduser()
        if args.when == "before":
            lines, found = before(cache, os.environ.get("CACHE_HIT", ""), os.environ.get("CACHE_MATCHED", ""))
            args.state.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        else:
            try:
                saved = json.loads(args.state.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ReportError(f"{args.state}: cannot read the state `before` wrote ({exc})") from None
            lines = after(cache, saved)
    except ReportError as exc:
        print(f"cache_report: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as out:
            out.write("".join(f"- {line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
