"""pq's suggestions on real upgrades against what the next release's maintainers shipped (a measuring script).

Usage::

    python bench/suggestion_audit.py [--only NAME,...] [--keep DIR] [--json OUT]

Per upgrade: ``pq adopt`` the older release, ``pq refresh --no-stop`` onto the upstream the newer release copies
(as :mod:`upstream_kept` finds it), then the regions top down as a maintainer takes them, each as `pq status` lists
it at that moment. Where it shows a suggestion: `pq resolve --suggested FILE:LINE --alone`, and the lines written
in the region's place are compared with the maintainers' (the newer release's copy of the method, between the code
lines around the region, when plausible: :func:`located`; where those are not found, the written code must be a
run of the method's), layout aside. A suggestion that agrees and passes the sanity checks is kept; else the file
is put back. Every region not resolved so takes the maintainers' lines where they are located and the file then
parses (a later copy's region may then be suggested that resolution, carried), else stays open.

Sanity of each taken suggestion: the file parses with the other regions at the patch's side; no statement new
upstream adds is lost (:func:`patch_queue.checks.upstream_kept.lost`, against the file before it; where the
maintainers' method is known, only one it holds); no line the omni side inserted (replacing no line of the base) is
dropped. Upgrades with no maintainers' text (this repository's series onto a newer vllm-ascend release) get the
sanity checks only. A table goes to stdout, each disagreement and failed check under it; exit 1 when there is one.

Environment: ``PQ_UPSTREAM_GIT`` (default: the corpus bundle), ``PQ_CACHE``, ``PQ_CORPUS``.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from upstream_kept import adopt, pq, run  # noqa: E402

from patch_queue.checks import upstream_kept  # noqa: E402
from patch_queue.merge import markers  # noqa: E402
from patch_queue.series.queue import QueueDir  # noqa: E402

# (name, the older release: a corpus folder's version or a registry spec, the newer one likewise, or a target)
UPGRADES = (
    ("0.14.0->0.16.0", "0.14.0", "0.16.0"),
    ("0.16.0->0.18.0", "0.16.0", "0.18.0"),
    ("0.18.0->0.20.0", "0.18.0", "0.20.0"),
    ("0.24.0->0.26.0", "0.24.0", "vllm-omni==0.26.0"),
    ("0.26.0->0.28.0", "vllm-omni==0.26.0", "vllm-omni==0.28.0"),
    ("0.28.0->0.30.0", "vllm-omni==0.28.0", "0.30.0"),
    ("0.24.0->0.30.0", "0.24.0", "0.30.0"),
    ("0.30.0->0.31.0rc1", "0.30.0", "vllm-omni==0.31.0rc1"),
    ("0.31.0rc1->0.32.0rc1", "vllm-omni==0.31.0rc1", "vllm-omni==0.32.0rc1"),
    ("series->0.30.0rc2", "series", "vllm-ascend==0.30.0rc2"),
    ("series->0.30.0rc1", "series", "vllm-ascend==0.30.0rc1"),
)
CONFLICT = re.compile(r"^conflict: (?P<where>(?P<path>\S+):(?P<line>\d+)) \S+ in (?P<symbol>\S+) \(patch \S+\)$")
SUGGESTION = re.compile(r"^  suggestion: (?P<reason>.*): `pq resolve --suggested (?P<where>\S+)`$")


def source(corpus: Path, release: str) -> str:
    return release if "==" in release else str(corpus / f"vllm-omni-{release}" / "npu")


def method(text: str, symbol: str) -> list[str] | None:
    """The lines of ``Class.name`` (any class, by the method's name and its class's name when that exists) in
    ``text``, decorators left out; None when it is not there."""
    cls, _, name = symbol.rpartition(".")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lines = text.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name == name:
                    found.append((node.name != cls, lines[m.lineno - 1 : m.end_lineno]))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not cls and node.name == name:
            found.append((False, lines[node.lineno - 1 : node.end_lineno]))
    return sorted(found, key=lambda f: f[0])[0][1] if found else None


def code(lines: Sequence[str]) -> str:
    """The code of ``lines`` without layout and comments: what two copies of one text share however laid out."""
    out = []
    for line in lines:
        bare = line.split("#", 1)[0] if "'" not in line and '"' not in line else line
        out.append(re.sub(r"\s+|,(?=[)\]}])", "", bare))
    return "".join(out).replace(",)", ")").replace('"', "'")


def parses(text: str) -> bool:
    """``text`` parses once every region left is resolved to the patch's side."""
    for r in reversed(markers.regions(text)):
        text = markers.resolve(text, r, r.side("patch"))
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def series_project(work: Path) -> Path:
    """This repository's series, cloned and reproduced."""
    project = work / "series"
    shutil.rmtree(project, ignore_errors=True)
    run(work, "git", "clone", "-q", str(REPO), str(project))
    pq(project, "reproduce")
    return project


def audit(name: str, old: str, new: str, corpus: Path, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    if old == "series":
        project = series_project(work)
    else:
        project = work / "old"
        adopt(project, Path(source(corpus, old)) if "==" not in old else Path(old))
    theirs: Path | None = None
    if new.startswith("vllm-ascend=="):
        target = new
    else:
        adopt(work / "new", Path(source(corpus, new)) if "==" not in new else Path(new))
        target = QueueDir(work / "new" / "patches").load_queue().upstream.public_commit
        theirs = work / "new" / "npu_worker"
    old_base = run(project, "git", "rev-parse", "refs/pq/base").strip()
    pq(project, "refresh", "--no-stop", "--to", target, ok=(0, 1, 3))
    pending = run(project, "git", "for-each-ref", "refs/pq/refresh/base").strip()
    new_base = "refs/pq/refresh/base" if pending else "refs/pq/base"
    modules = {m.path: m for m in QueueDir(project / "patches").load_queue().modules if m.upstream}
    old_up = {p: run(project, "git", "show", f"{old_base}:.pq-upstream/{m.upstream}") for p, m in modules.items()}
    new_up = {p: run(project, "git", "show", f"{new_base}:.pq-upstream/{m.upstream}") for p, m in modules.items()}
    row: dict[str, Any] = {"upgrade": name, "regions": 0, "suggestions": 0, "agree": 0, "disagree": 0}
    row.update(unknown=0, insane=0, hand=0, open=0, notes=[])
    seen: set[Any] = set()  # the key of each region met
    first = True
    while True:
        listed = status(project)
        if first:
            row["regions"] = len(listed)
            first = False
        todo = [o for o in listed if o["key"] not in seen]
        if not todo:
            row["open"] = len(listed)
            break
        here = todo[0]
        seen.add(here["key"])
        path = project / here["path"]
        file = path.relative_to(project / "npu_worker").as_posix()
        before = path.read_text(encoding="utf-8")
        region = markers.region_at(before, here["line"])
        assert region is not None, here
        shipped = method_of(theirs / file, here["symbol"]) if theirs is not None else None
        want = located(before, region, shipped) if shipped is not None else None
        if here["tip"] is not None:
            row["suggestions"] += 1
            pq(project, "resolve", "--suggested", here["where"], "--alone")
            after = path.read_text(encoding="utf-8")
            verdict, problems = judge(before, after, region, shipped, want, file, modules, old_up, new_up)
            row[verdict] += 1
            if problems and verdict != "disagree":
                row["insane"] += 1
            # every suggestion taken is listed, with what is wrong with it
            where = f"{file}:{here['line']} {here['symbol']}"
            row["notes"].append(f"{verdict}: {where} ({here['tip']})" + "".join(f" | {p}" for p in problems))
            if not problems:
                continue
            path.write_text(before, encoding="utf-8")  # put back: the maintainer writes their own there
        # the maintainers' lines in the region's place (a later copy may carry them), where the file then parses
        if want is not None and parses(markers.resolve(before, region, want)):
            path.write_text(markers.resolve(before, region, want), encoding="utf-8")
            row["hand"] += 1
    return row


def judge(
    before: str,
    after: str,
    region: markers.Region,
    shipped: list[str] | None,
    want: list[str] | None,
    file: str,
    modules: dict[str, Any],
    old_up: dict[str, str],
    new_up: dict[str, str],
) -> tuple[str, list[str]]:
    """A suggestion taken in ``region`` (``before`` -> ``after``) against the maintainers' method (``shipped``; the
    lines they wrote in the region's place: ``want``, when located): agree, disagree or unknown, and the problems
    (sanity, and what differs)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    written = b[region.first - 1 : len(b) - (len(a) - region.last)]
    problems = []
    if not parses(after):
        problems.append("does not parse")
    if file in modules:
        lost = [
            upstream_kept.lost(old_up[file], new_up[file], t, modules[file].symbols, file=file) for t in (before, after)
        ]
        had = {x.statement for x in lost[0]}
        # one the maintainers dropped too is not lost (where their method is known)
        kept = code(shipped) if shipped is not None else None
        problems += [
            f"upstream statement lost: {x.statement[:70]}"
            for x in lost[1]
            if x.statement not in had and (kept is None or code(x.statement.splitlines()) in kept)
        ]
    # the omni side's insertions (lines it added between the base's, replacing none): no other change explains them
    pairs = difflib.SequenceMatcher(None, region.base, region.patch, autojunk=False).get_opcodes()
    omni = [line for op, _a, _b, c, d in pairs if op == "insert" for line in region.patch[c:d] if code([line])]
    gone = [line.strip() for line in omni if code([line]) not in code(written)]
    if gone:
        problems.append(f"omni line(s) dropped: {gone[:2]}")
    if shipped is None:
        return "unknown", problems
    agree = code(written) == code(want) if want is not None else code(written) in code(shipped)
    if not agree:
        theirs = want if want is not None else shipped
        missing = [line.strip() for line in written if line.strip() and code([line]) not in code(theirs)]
        kept = [line.strip() for line in theirs if line.strip() and code([line]) not in code(written)]
        problems.append(
            f"maintainers differ{'' if want is not None else ' (their lines not located)'}: written, not theirs "
            f"{missing[:3]}; theirs, not written {kept[:3] if want is not None else '?'}"
        )
    return ("agree" if agree else "disagree"), problems


def located(text: str, region: markers.Region, shipped: list[str]) -> list[str] | None:
    """The lines of the maintainers' method ``shipped`` in ``region``'s place: between the (up to 3) code lines
    above the region and those below it, found once in ``shipped`` (layout aside); None when not found."""
    lines = text.splitlines(keepends=True)
    norm = [code([line]) for line in shipped]

    def context(part: list[str]) -> list[str]:  # the code lines of ``part`` up to the first marker of a region
        out = []
        for line in part:
            if line.startswith(("<<<<<<<", "|||||||", "=======", ">>>>>>>")):
                break
            if code([line]):
                out.append(code([line]))
        return out

    above = context(lines[: region.first - 1][::-1])[:3][::-1]
    below = context(lines[region.last :])[:3]
    for k in (3, 2, 1):
        up, down = above[-k:], below[:k]
        if len(up) < k or len(down) < k:
            continue
        at = [i + k for i in range(len(norm) - k + 1) if norm[i : i + k] == up]
        if len(at) != 1:
            continue
        end = next((j for j in range(at[0], len(norm) - k + 1) if norm[j : j + k] == down), None)
        if end is not None:
            return shipped[at[0] : end] if plausible(region, shipped[at[0] : end]) else None
    return None


def plausible(region: markers.Region, lines: list[str]) -> bool:
    """``lines`` can be the maintainers' resolution of ``region``: no longer than both sides and two lines more, and
    half of its code lines or more code of the sides, layout aside (a span found between contexts far apart is
    not)."""
    sides = code([*region.upstream, *region.patch])
    ours = [code([line]) for line in lines if code([line])]
    fits = len(lines) <= len(region.upstream) + len(region.patch) + 2
    return fits and 2 * sum(c in sides for c in ours) >= len(ours)


def method_of(path: Path, symbol: str) -> list[str] | None:
    found = method(path.read_text(encoding="utf-8"), symbol) if path.is_file() else None
    return None if found is None else [line + "\n" for line in found]


def status(project: Path) -> list[dict[str, Any]]:
    """The open regions as `pq status` lists them: where, symbol, suggestion, and a key that names the region
    however lines above it change (its file, symbol, sides and suggestion: a region is taken again when a later
    resolution gives it another suggestion)."""
    out: list[dict[str, Any]] = []
    for line in pq(project, "status", ok=(0, 1, 3)).splitlines():
        if m := CONFLICT.match(line):
            out.append({"where": m["where"], "path": m["path"], "line": int(m["line"]), "symbol": m["symbol"]})
            out[-1]["tip"] = None
        elif (s := SUGGESTION.match(line)) and out and s["where"] == out[-1]["where"]:
            out[-1]["tip"] = s["reason"]
    for o in out:
        region = markers.region_at((project / o["path"]).read_text(encoding="utf-8"), o["line"])
        o["key"] = (o["path"], o["symbol"], region and (region.upstream, region.base, region.patch), o["tip"])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="upgrades to audit (their names), comma-separated")
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    corpus = Path(os.environ.get("PQ_CORPUS") or REPO.parent / "shared" / "corpus")
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    only = {x for x in args.only.split(",") if x}
    work = args.keep or Path(tempfile.mkdtemp(prefix="pq-audit-"))
    rows = []
    print(
        "| upgrade | regions | suggestions | agree | disagree | no maintainers' text | failed sanity | written from "
        "the maintainers' text | left open |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, old, new in UPGRADES:
        if only and name not in only:
            continue
        try:
            row = audit(name, old, new, corpus, work / name.replace(">", ""))
        except SystemExit as e:
            print(f"| {name} | not run: {str(e)[-200:]} |", flush=True)
            continue
        rows.append(row)
        keys = ("upgrade", "regions", "suggestions", "agree", "disagree", "unknown", "insane", "hand", "open")
        cells = [row[k] for k in keys]
        print("| " + " | ".join(map(str, cells)) + " |", flush=True)
        for note in row["notes"]:
            print(f"  {note}", flush=True)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 1 if any(row["disagree"] or row["insane"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
