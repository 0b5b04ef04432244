"""Measure what the installed pq does on four real upgrades, against plain ``git merge-file``.

Usage::

    python bench/conflict_table.py [--json OUT] [--only 0.14.0] [--keep DIR] [--timeout S] [--memory-gib G]

Upgrades: U1 vllm-omni 0.14.0 -> 0.16.0, U2 0.16.0 -> 0.18.0, U3 0.18.0 -> 0.20.0 (the target is
the upstream base ``pq adopt`` finds for the newer release), U4 0.30.0 -> vllm-ascend==0.30.0rc2.
For each: ``pq adopt`` the older release's corpus folder into a fresh repository; count the
conflict regions of ``git merge-file --diff3`` on every carried method (base = upstream at the
old base, ours = the omni method, theirs = upstream at the target; 1 when the method is gone);
run ``pq refresh --no-stop --to TARGET --report``; then from its report and output count the
conflicts, review flags and reused decisions, the Omni-new fence lines kept, the upstream lines
dropped without a flag, and (U1-U3) how many flagged resolutions the maintainers' next release
agrees with.  The Markdown table goes to stdout, progress to stderr, everything to ``--json``.

Environment: ``PQ_UPSTREAM_GIT`` (default: the corpus bundle), ``PQ_CACHE``, ``PQ_CORPUS``
(default: ``../shared/corpus`` beside the repository).  Exit 0 when every upgrade was measured.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conflict_metrics as cm  # noqa: E402

from patch_queue import presets
from patch_queue.errors import PqError  # noqa: E402
from patch_queue.merge import symbols
from patch_queue.series.queue import Queue, QueueDir  # noqa: E402
from patch_queue.sources.snapshot import Snapshot, resolve_upstream, upstream_git_location

REPO = Path(__file__).resolve().parents[1]
LIST_LIMIT = 10


@dataclass(frozen=True)
class Upgrade:
    key: str
    old: str  # vllm-omni release in the corpus
    new: str | None  # the newer vllm-omni release in the corpus (its adopted base is the target)
    target_spec: str | None = None  # a fixed target instead

    @property
    def title(self) -> str:
        to = self.new if self.new else (self.target_spec or "?").replace("==", " ")
        return f"{self.key} {self.old} → {to}"


UPGRADES = (
    Upgrade("U1", "0.14.0", "0.16.0"),
    Upgrade("U2", "0.16.0", "0.18.0"),
    Upgrade("U3", "0.18.0", "0.20.0"),
    Upgrade("U4", "0.30.0", None, "vllm-ascend==0.30.0rc2"),
)

Json = dict[str, Any]


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def corpus_dir() -> Path:
    env = os.environ.get("PQ_CORPUS")
    return Path(env) if env else REPO.parent / "shared" / "corpus"


class StepError(Exception):
    """One upgrade could not be measured; the message says which command failed."""


@dataclass
class Limits:
    """What one pq command may take: wall seconds and address space (GiB, 0 = unlimited)."""

    timeout: float = 900.0
    memory_gib: float = 16.0


LIMITS = Limits()


def _limit_memory() -> None:  # runs in the child before exec
    if LIMITS.memory_gib > 0:
        size = int(LIMITS.memory_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (size, size))


def run_pq(cwd: Path, *args: str, ok: Sequence[int] = (0,)) -> tuple[int, float, str]:
    """(exit code, seconds, stdout) of the installed pq, run as a maintainer would, within ``LIMITS``."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "patch_queue", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        preexec_fn=_limit_memory,
        start_new_session=True,  # its own process group, so a timeout ends git/ruff children too
    )
    try:
        stdout, stderr = proc.communicate(timeout=LIMITS.timeout or None)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise StepError(f"pq {' '.join(args)} timed out after {LIMITS.timeout:.0f} s in {cwd}") from None
    seconds = time.perf_counter() - started
    if proc.returncode not in ok:
        tail = (stderr.strip().splitlines() or ["(no output)"])[-1]
        if (
            isinstance(proc.returncode, int)
            and proc.returncode in (-signal.SIGKILL, -signal.SIGSEGV)
            or ("MemoryError" in stderr)
        ):
            tail += f" (memory limit {LIMITS.memory_gib:g} GiB?)"
        raise StepError(f"pq {' '.join(args)} exited {proc.returncode} in {cwd}: {tail}")
    return proc.returncode, seconds, stdout


def refresh_extras() -> list[str]:
    """``--markdown``/``--annotations`` only when this pq's refresh offers both."""
    _code, _s, out = run_pq(REPO, "refresh", "--help")
    return ["--annotations"] if "--markdown" in out and "--annotations" in out else []


def adopt(project: Path, npu: Path) -> tuple[float, Queue]:
    project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    _code, seconds, _out = run_pq(project, "adopt", str(npu))
    return seconds, QueueDir(project / "patches").load_queue()


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def upstream_symbols(snapshot: Snapshot, path: str) -> dict[str, symbols.Symbol]:
    return symbols.symbols_ast(snapshot.read(path).decode("utf-8"), path=f"{path} ({snapshot.label})")


def carried(queue: Queue) -> list[tuple[str, str, str]]:
    """(module, upstream file, upstream symbol) of every carried symbol, in queue order."""
    return [(m.path, m.upstream, s) for m in queue.modules if m.upstream for s in m.symbols]


def baseline(queue: Queue, npu: Path, old: Snapshot, target: Snapshot) -> Json:
    started = time.perf_counter()
    rows: list[Json] = []
    parsed: dict[tuple[str, str], dict[str, symbols.Symbol]] = {}
    for module, upath, name in carried(queue):
        for label, snap in (("old", old), ("target", target)):
            if (label, upath) not in parsed:
                parsed[(label, upath)] = upstream_symbols(snap, upath)
        base = parsed[("old", upath)][name]
        mine = cm.downstream_symbol(read_text(npu / module), name, path=module)
        if mine is None:
            raise StepError(f"{module} carries {name} by queue.toml but holds no method of that name")
        theirs = parsed[("target", upath)].get(name)
        if theirs is None:
            rows.append({"module": module, "upstream": name, "downstream": mine.name, "regions": 1, "gone": True})
            continue
        regions, _merged = cm.merge_file_regions(base.text, mine.text, theirs.text)
        rows.append({"module": module, "upstream": name, "downstream": mine.name, "regions": regions, "gone": False})
    methods = [r for r in rows if "." in r["upstream"]]
    return {
        "regions": sum(r["regions"] for r in rows),
        # DESIGN.md's projection numbers count methods only and leave removed ones out
        "regions_methods_present": sum(r["regions"] for r in methods if not r["gone"]),
        "regions_top_level": sum(r["regions"] for r in rows if "." not in r["upstream"]),
        "gone": sum(1 for r in rows if r["gone"]),
        "symbols": rows,
        "seconds": time.perf_counter() - started,
    }


def omni_kept(npu: Path, out: Path) -> Json:
    files: dict[str, Json] = {}
    for path in sorted(npu.glob("*.py")):
        old = cm.fence_lines(read_text(path))
        if not old:
            continue
        new = cm.fence_lines(read_text(out / path.name))
        files[path.name] = {
            "kept": cm.kept_count(old, new),
            "kept_ignoring_whitespace": cm.kept_count(cm.squashed(old), cm.squashed(new)),
            "total": sum(old.values()),
            "present": (out / path.name).is_file(),
        }
    return {
        "kept": sum(f["kept"] for f in files.values()),
        "kept_ignoring_whitespace": sum(f["kept_ignoring_whitespace"] for f in files.values()),
        "total": sum(f["total"] for f in files.values()),
        "files": files,
    }


def upstream_drops(
    queue: Queue, out: Path, old: Snapshot, target: Snapshot, items: Sequence[Mapping[str, object]]
) -> Json:
    """Upstream additions to carried methods found neither in the output nor in a flagged upstream side.

    ``count`` follows the definition (raw upstream lines, stripped); ``ruff_count`` repeats it with
    both upstream versions first laid out by ``ruff format`` the way the downstream is, so that
    lines pq merged in but reformatted do not count as dropped (None when ruff is missing).
    """
    drops: list[cm.Drop] = []
    ruff_drops: list[cm.Drop] | None = []
    added_total = 0
    gone: list[str] = []
    width = int(getattr(queue, "line_length", 0) or 120)
    parsed: dict[tuple[str, str], dict[str, symbols.Symbol]] = {}
    for module, upath, name in carried(queue):
        for label, snap in (("old", old), ("target", target)):
            if (label, upath) not in parsed:
                parsed[(label, upath)] = upstream_symbols(snap, upath)
        new = parsed[("target", upath)].get(name)
        if new is None:
            gone.append(f"{module}: {name}")
            continue
        base = parsed[("old", upath)][name]
        output = read_text(out / module)
        sides = cm.flagged_upstream_sides(items, module)
        added = cm.added_lines(base.text, new.text)
        added_total += len(added)
        drops += cm.unflagged_drops(module, name, added, output, sides)
        base_fmt = cm.ruff_layout(base.text, is_method=base.is_method, line_length=width)
        new_fmt = cm.ruff_layout(new.text, is_method=new.is_method, line_length=width)
        if ruff_drops is None or base_fmt is None or new_fmt is None:
            ruff_drops = None
        else:
            ruff_drops += cm.unflagged_drops(module, name, cm.added_lines(base_fmt, new_fmt), output, sides)
    return {
        "count": len(drops),
        "added_lines": added_total,
        "gone_symbols": gone,
        "items": [d.as_json() for d in drops],
        "ruff_count": None if ruff_drops is None else len(ruff_drops),
        "ruff_items": None if ruff_drops is None else [d.as_json() for d in ruff_drops],
    }


def agreement(flags: Sequence[Mapping[str, object]], out: Path, maintainers: Path) -> Json:
    """Flags whose resolution, with a line of context each side, the maintainers' next release also holds.

    Every flag with a ``resolution`` string counts (an empty one is a deletion: then only the two
    context lines are compared).  ``at_line`` tells whether the output holds the resolution at the
    flag's ``line`` at all, to tell a misplaced line number from a real disagreement.
    """
    checked: list[Json] = []
    order = sorted(
        flags, key=lambda f: (str(f.get("file", "")), _int(f.get("line")), str(f.get("kind", "")), str(f.get("patch")))
    )
    for flag in order:
        resolution = flag.get("resolution")
        if not isinstance(resolution, str):
            continue
        file, line = str(flag.get("file", "")), _int(flag.get("line"))
        output, theirs = read_text(out / file), maintainers / file
        checked.append(
            {
                "file": file,
                "line": line,
                "kind": str(flag.get("kind", "")),
                "patch": str(flag.get("patch", "")),
                "symbol": str(flag.get("symbol", "")),
                "at_line": cm.region_is_resolution(output, line, resolution),
                "agrees": theirs.is_file() and cm.agrees(output, line, resolution, read_text(theirs)),
                "decision": cm.decision_agrees(flag, output, read_text(theirs)) if theirs.is_file() else "n/a",
            }
        )
    return {
        "agree": sum(1 for c in checked if c["agrees"]),
        "total": len(checked),
        "disagreements": [c for c in checked if not c["agrees"]],
        "not_at_line": sum(1 for c in checked if not c["at_line"]),
        # the automatic decisions (not the clean near-block merges), judged on code order and drops
        "decisions": {
            verdict: sum(1 for c in checked if c["kind"] in cm.DECISIONS and c["decision"] == verdict)
            for verdict in ("agree", "disagree", "n/a")
        },
        "decision_disagreements": [c for c in checked if c["kind"] in cm.DECISIONS and c["decision"] == "disagree"],
    }


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def _items(report: Mapping[str, object], key: str) -> list[Mapping[str, object]]:
    value = report.get(key, [])
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def measure(up: Upgrade, corpus: Path, work: Path, extras: list[str], location: str) -> Json:
    npu = corpus / f"vllm-omni-{up.old}" / "npu"
    row: Json = {"key": up.key, "title": up.title, "old": up.old, "new": up.new, "error": None, "seconds": {}}
    say(f"== {up.title}: adopting {npu}")
    row["seconds"]["adopt_old"], queue = adopt(work / "old", npu)
    if up.new is not None:
        say(f"== {up.title}: adopting vllm-omni {up.new} for the target base")
        row["seconds"]["adopt_new"], new_queue = adopt(work / "new", corpus / f"vllm-omni-{up.new}" / "npu")
        target = new_queue.upstream.public_commit
    else:
        assert up.target_spec is not None
        target = up.target_spec
    row["old_base"] = {
        "public_commit": queue.upstream.public_commit,
        "pin": queue.upstream.pin,
        "label": queue.upstream.label,
    }
    row["target"] = target
    old_snap = resolve_upstream(
        queue.upstream.pin if queue.upstream.kind == "git" else queue.upstream.spec,
        upstream_git=location,
        progress=say,
        queue=presets.NPU,
    )
    target_snap = resolve_upstream(target, upstream_git=location, progress=say, queue=presets.NPU)
    row["target_label"] = target_snap.label

    say(f"== {up.title}: git merge-file on the method projections")
    row["baseline"] = baseline(queue, npu, old_snap, target_snap)
    row["seconds"]["merge_file"] = row["baseline"].pop("seconds")

    say(f"== {up.title}: pq refresh --no-stop --to {target}")
    report_path = work / "refresh.json"
    args = ["refresh", "--no-stop", "--to", target, "--report", str(report_path)]
    if extras:
        args += ["--markdown", str(work / "refresh.md"), *extras]
    code, row["seconds"]["refresh"], _out = run_pq(work / "old", *args, ok=(0, 3))
    report: Json = json.loads(report_path.read_text(encoding="utf-8"))
    conflicts, flags = _items(report, "conflicts"), _items(report, "flags")
    out = work / "old" / "npu_worker"
    row["refresh"] = {
        "exit": code,
        "conflicts": len(conflicts),
        "flags": len(flags),
        "reused": {
            "conflicts": sum(1 for c in conflicts if c.get("reused") is True),
            "flags": sum(1 for f in flags if f.get("reused") is True),
        },
        "removed_symbols": report.get("removed_symbols", []),
        "report": report,
    }
    row["omni"] = omni_kept(npu, out)
    row["drops"] = upstream_drops(queue, out, old_snap, target_snap, [*conflicts, *flags])
    row["agreement"] = agreement(flags, out, corpus / f"vllm-omni-{up.new}" / "npu") if up.new is not None else None
    return row


# -- output -----------------------------------------------------------------------------------

COLUMNS = (
    "upgrade",
    "git merge-file regions",
    "pq conflicts",
    "review flags",
    "reused",
    "omni lines kept",
    "unflagged upstream drops",
    "agreement (verbatim, all flags)",
    "decisions agreeing (code order)",
    "times",
)


def _times(seconds: Mapping[str, float]) -> str:
    parts = [f"merge-file {seconds['merge_file']:.2f} s", f"refresh {seconds['refresh']:.2f} s"]
    adopts = [f"{seconds[k]:.1f}" for k in ("adopt_old", "adopt_new") if k in seconds]
    parts.append(f"adopt {' + '.join(adopts)} s")
    return ", ".join(parts)


def _omni_cell(omni: Json) -> str:
    cell = f"{omni['kept']}/{omni['total']}"
    loose = omni["kept_ignoring_whitespace"]
    return cell if loose == omni["kept"] else f"{cell} ({loose} ignoring whitespace)"


def _drops_cell(drops: Json) -> str:
    ruff = drops.get("ruff_count")
    return str(drops["count"]) + ("" if ruff is None else f" ({ruff} in ruff layout)")


def table_row(row: Json) -> list[str]:
    if row["error"] is not None:
        return [row["title"], *(["error"] * (len(COLUMNS) - 2)), row["error"].replace("|", "\\|")]
    ref, agree = row["refresh"], row["agreement"]
    reused = ref["reused"]["flags"] + ref["reused"]["conflicts"]
    return [
        row["title"],
        str(row["baseline"]["regions"]),
        str(ref["conflicts"]),
        str(ref["flags"]),
        str(reused),
        _omni_cell(row["omni"]),
        _drops_cell(row["drops"]),
        "n/a" if agree is None else f"{agree['agree']}/{agree['total']}",
        "n/a" if agree is None else _decision_cell(agree["decisions"]),
        _times(row["seconds"]),
    ]


def _decision_cell(decisions: Json) -> str:
    judged = decisions["agree"] + decisions["disagree"]
    return f"{decisions['agree']}/{judged}" + (f" ({decisions['n/a']} n/a)" if decisions["n/a"] else "")


def markdown(rows: Sequence[Json], total: float, extras: Sequence[str]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(table_row(r)) + " |" for r in rows]
    lines += [
        "",
        f"Total time {total:.1f} s; refresh options: --no-stop --report"
        + (" --markdown --annotations" if extras else ""),
        "",
    ]
    for row in rows:
        if row["error"] is not None:
            continue
        ref = row["refresh"]
        lines.append(f"### {row['title']}")
        lines.append(f"- base {row['old_base']['label']} → target {row['target_label']}; refresh exit {ref['exit']}")
        base = row["baseline"]
        lines.append(
            f"- merge-file regions {base['regions']}: {base['regions_methods_present']} in methods present at the"
            f" target, {base['regions_top_level']} in top-level symbols, {base['gone']} for methods removed upstream"
        )
        per = ", ".join(
            f"{s['module']} {s['downstream']} {s['regions']}" + (" (gone)" if s["gone"] else "")
            for s in row["baseline"]["symbols"]
        )
        lines.append(f"- merge-file regions by method: {per}")
        if ref["removed_symbols"]:
            lines.append(f"- carried symbols removed upstream: {', '.join(ref['removed_symbols'])}")
        lines.append(f"- reused: {ref['reused']['flags']} flags, {ref['reused']['conflicts']} conflicts")
        for name, f in row["omni"]["files"].items():
            if f["kept"] != f["total"]:
                lines.append(
                    f"- omni lines lost in {name}: {f['total'] - f['kept']} of {f['total']}"
                    f" ({f['total'] - f['kept_ignoring_whitespace']} ignoring whitespace)"
                )
        drops = row["drops"]
        lines.append(
            f"- upstream added {drops['added_lines']} lines to carried methods; {drops['count']} dropped"
            " without a flag" + (":" if drops["count"] else "")
        )
        for d in drops["items"][:LIST_LIMIT]:
            lines.append(f"  - {d['file']} {d['symbol']}: `{d['line']}`")
        if drops["count"] > LIST_LIMIT:
            lines.append(f"  - ... {drops['count'] - LIST_LIMIT} more (see --json)")
        if drops.get("ruff_items") is not None:
            ruff_items = drops["ruff_items"]
            lines.append(
                f"- with both upstream versions in ruff layout first, {len(ruff_items)} dropped without a flag"
                + (":" if ruff_items else "")
            )
            lines += [f"  - {d['file']} {d['symbol']}: `{d['line']}`" for d in ruff_items[:LIST_LIMIT]]
            if len(ruff_items) > LIST_LIMIT:
                lines.append(f"  - ... {len(ruff_items) - LIST_LIMIT} more (see --json)")
        agree = row["agreement"]
        if agree is not None and agree["total"]:
            lines.append(
                f"- agreement {agree['agree']}/{agree['total']}; the resolution is not at the flag's line in the"
                f" output for {agree['not_at_line']}"
            )
        if agree is not None and agree["decision_disagreements"]:
            lines.append("- automatic decisions the maintainers took otherwise (code order or dropped upstream lines):")
            lines += [
                f"  - {d['file']}:{d['line']} {d['kind']} in {d['symbol']}" for d in agree["decision_disagreements"]
            ]
        if agree is not None and agree["disagreements"]:
            lines.append("- disagreements with the maintainers' next release:")
            lines += [
                f"  - {d['file']}:{d['line']} {d['kind']}" + ("" if d["at_line"] else " (resolution not at that line)")
                for d in agree["disagreements"]
            ]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--json", type=Path, help="write all the data here")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="measure only the upgrade from this vllm-omni release (or U1..U4); repeatable",
    )
    parser.add_argument("--keep", type=Path, help="work in this folder and keep the projects (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=LIMITS.timeout, help="seconds one pq command may take")
    parser.add_argument(
        "--memory-gib", type=float, default=LIMITS.memory_gib, help="address space one pq command may take (0: any)"
    )
    args = parser.parse_args(argv)
    LIMITS.timeout, LIMITS.memory_gib = args.timeout, args.memory_gib

    corpus = corpus_dir()
    if not (corpus / "vllm-ascend.bundle").is_file():
        parser.error(f"no corpus at {corpus} (set PQ_CORPUS)")
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    location = upstream_git_location(None, spec=presets.NPU)
    chosen = [u for u in UPGRADES if not args.only or u.old in args.only or u.key in args.only]
    if not chosen:
        parser.error(f"--only matches none of {', '.join(u.old for u in UPGRADES)}")

    started = time.perf_counter()
    extras = refresh_extras()
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="conflict-table-"))
    rows: list[Json] = []
    try:
        for up in chosen:
            work = root / up.key
            if work.exists():
                shutil.rmtree(work)
            work.mkdir(parents=True)
            try:
                rows.append(measure(up, corpus, work, extras, location))
            except (StepError, PqError, OSError, ValueError) as exc:
                say(f"{up.title}: {exc}")
                rows.append({"key": up.key, "title": up.title, "old": up.old, "new": up.new, "error": str(exc)})
            except Exception as exc:  # a bug here or in pq's report: keep measuring the others
                say(traceback.format_exc())
                error = f"{type(exc).__name__}: {exc}"
                rows.append({"key": up.key, "title": up.title, "old": up.old, "new": up.new, "error": error})
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    total = time.perf_counter() - started
    print(markdown(rows, total, extras))
    if args.json is not None:
        data = {
            "format": 1,
            "refresh_options": ["--no-stop", "--report", *(["--markdown"] if extras else []), *extras],
            "total_seconds": total,
            "upgrades": rows,
        }
        args.json.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return 1 if any(r["error"] is not None for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
