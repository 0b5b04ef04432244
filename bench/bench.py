"""One command for the benchmark: writes ``docs/benchmark.md`` and ``docs/benchmark.png``.

Usage::

    python bench/bench.py [--quick] [--speed] [--only OLD,...] [--out DIR] [--repeats N] [--keep DIR] [--json FILE]

Sections (all from one run):

1. quality on real history: every upgrade between consecutive corpus releases of vllm-omni, and
   0.30.0 -> the newest vllm-ascend release (``pq refresh``'s default target): hard conflicts,
   review flags, omni blocks before/after, upstream lines absorbed in the carried methods, and
   the lines that differ from what the maintainers wrote in the newer release (upstream-side and
   omni-side);
2. baselines: the same stack commits replayed with ``git rebase`` (merge backend) in a real
   repository, and a whole-file ``git merge-file`` of the vendored upstream file;
3. speed: ``pq refresh`` vs the fair baseline (``git rebase`` of the same stack, then ``ruff`` F821/F811 and
   a compile of the modules it wrote), whole processes in interleaved pairs (the derived cache emptied, and
   kept), min/median/max of the per-pair ratios; ``pq adopt``'s upstream search, culprit search reads vs log2
   of the candidates, ``pq --help`` and ``pq status`` start-up as ratios to ``python -c pass``,
   ``scripts/main.sh`` on a fresh clone by phase (set-up, download, reproduce, refresh, check); a profile for
   every goal missed;
4. scale: ``bench/bench_scale.run_scale`` against git rebase, with a profile of the largest replay, and
   the chart;
5. work saved: per upgrade with a newer corpus release, how much closer section 1's refresh comes to
   the maintainers' next release than the older release was (``bench/work_saved.py`` measures
   this section alone, quickly).

``--quick`` measures one upgrade (0.18.0 -> 0.20.0) with few repeats and small scale sizes (the
test's mode; main.sh runs without its set-up).  ``--speed`` measures only section 3's refresh timings,
their profiles and the main.sh breakdown, and prints them (``--quick --speed``: one upgrade, no profiles).
Environment as for ``bench/conflict_table.py``: ``PQ_UPSTREAM_GIT`` (default: the
corpus bundle), ``PQ_CACHE``, ``PQ_CORPUS``.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import json
import math
import os
import platform
import pstats
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_scale  # noqa: E402
import conflict_metrics as cm  # noqa: E402
from conflict_table import corpus_dir, say  # noqa: E402

from patch_queue import presets  # noqa: E402
from patch_queue.checks import gpu_audit  # noqa: E402
from patch_queue.merge import symbols  # noqa: E402
from patch_queue.series.queue import Queue, QueueDir  # noqa: E402
from patch_queue.sources.cache import cache_dir  # noqa: E402
from patch_queue.sources.snapshot import Snapshot, open_git, resolve_upstream, upstream_git_location  # noqa: E402

REPO = HERE.parent
RUNNER = "vllm_ascend/worker/model_runner_v1.py"
Json = dict[str, Any]

SPLIT = ("upstream_maintainers_only", "upstream_pq_only", "omni_maintainers_only", "omni_pq_only")
GOALS = {
    "refresh": "within 1.1x of git rebase + ruff F821/F811 + py_compile",
    "refresh_cold": "within 2x of git rebase + ruff F821/F811 + py_compile",
    "adopt": "under 2 s",
    "culprits": "logarithmic (reads per find <= 2 ceil(log2 candidates) + 2: two bisections and both ends)",
    "startup": "under 0.3 s (shown: the median ratio to `python -c pass`, interleaved)",
    "scale": "at least 3x as fast as git rebase at the largest series",
}


@dataclass(frozen=True)
class Upgrade:
    old: str
    new: str | None  # newer corpus release; None: the newest vllm-ascend release

    @property
    def title(self) -> str:
        return f"{self.old} → {self.new or 'newest vllm-ascend'}"


UPGRADES = (
    Upgrade("0.14.0", "0.16.0"),
    Upgrade("0.16.0", "0.18.0"),
    Upgrade("0.18.0", "0.20.0"),
    Upgrade("0.20.0", "0.22.0"),
    Upgrade("0.22.0", "0.24.0"),
    Upgrade("0.24.0", "0.30.0"),
    Upgrade("0.30.0", None),
)
QUICK = Upgrade("0.18.0", "0.20.0")
WARM_GOAL, COLD_GOAL = 1.1, 2.0  # pq refresh / the fair baseline: the derived cache kept, and emptied


class StepError(Exception):
    pass


def run(
    cmd: Sequence[str], cwd: Path, *, ok: Sequence[int] = (0,), env: dict[str, str] | None = None
) -> tuple[int, float, str]:
    started = time.perf_counter()
    proc = subprocess.run(
        list(cmd),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})},
    )
    seconds = time.perf_counter() - started
    if proc.returncode not in ok:
        tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise StepError(f"{' '.join(cmd)} exited {proc.returncode} in {cwd}: {tail}")
    return proc.returncode, seconds, proc.stdout


def pq(cwd: Path, *args: str, ok: Sequence[int] = (0,)) -> tuple[int, float, str]:
    return run([sys.executable, "-m", "patch_queue", *args], cwd, ok=ok)


def git(cwd: Path, *args: str, ok: Sequence[int] = (0,)) -> str:
    return run(["git", *args], cwd, ok=ok)[2]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- 1. quality ---------------------------------------------------------------------------------


def adopt(project: Path, npu: Path) -> tuple[float, Queue]:
    if project.exists():
        shutil.rmtree(project)
    project.mkdir(parents=True)
    git(project, "init", "-q")
    _code, seconds, _out = pq(project, "adopt", str(npu))
    return seconds, QueueDir(project / "patches").load_queue()


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def carried(queue: Queue) -> list[tuple[str, str, str]]:
    return [(m.path, m.upstream, s) for m in queue.modules if m.upstream for s in m.symbols]


def upstream_syms(snap: Snapshot, path: str) -> dict[str, symbols.Symbol]:
    return symbols.symbols_ast(snap.read(path).decode("utf-8"), path=f"{path} ({snap.label})")


def absorbed(queue: Queue, out: Path, old: Snapshot, new: Snapshot) -> tuple[int, int]:
    """(upstream lines added to carried methods between the two bases that are in the output, added)."""
    got = total = 0
    parsed: dict[tuple[str, str], dict[str, symbols.Symbol]] = {}
    for module, upath, name in carried(queue):
        for label, snap in (("old", old), ("new", new)):
            parsed.setdefault((label, upath), upstream_syms(snap, upath))
        after = parsed[("new", upath)].get(name)
        before = parsed[("old", upath)].get(name)
        if after is None or before is None:
            continue
        added = cm.added_lines(before.text, after.text)
        present = cm.stripped_set([read_text(out / module)])
        total += len(added)
        got += sum(1 for line in added if line in present)
    return got, total


def read_folder(path: Path) -> dict[str, str]:
    """The runner modules (``*.py``) of a folder by file name."""
    return {p.name: read_text(p) for p in sorted(path.glob("*.py"))}


def work_saved(up: Upgrade, corpus: Path, out: Path, upstream_text: str, left_out: Sequence[str] = ()) -> Json:
    """Section 5 for one upgrade with a newer corpus release: pq's ``out`` against the maintainers' runners
    (``left_out``: the lines of ports the maintainers did not make, see :func:`unmade_port_lines`)."""
    assert up.new is not None
    release, older = corpus / f"vllm-omni-{up.new}", corpus / f"vllm-omni-{up.old}"
    return cm.work_saved(
        read_folder(out),
        read_folder(older / "npu"),
        read_folder(release / "npu"),
        upstream_text,
        read_folder(release / "gpu").values(),
        left_out,
        read_folder(older / "gpu").values(),
    )


_SYNCED = re.compile(r"^synced: \S+ in \S+ from (?P<changes>.+) \(patches/(?P<patch>\S+)\)$", re.M)


def unmade_port_lines(up: Upgrade, corpus: Path, project: Path, sync_out: str, upstream_text: str) -> list[str]:
    """The lines ``pq sync-gpu`` added (its patches' ``+`` lines) in ports of GPU changes that the maintainers'
    release does not make: the audit of the newer release's GPU runners against its own NPU runners (and
    ``upstream_text``, the vllm-ascend runner they are based on) says they are unported there.  A port of
    something the audit does not list (an omni method updated since the older release, a whole method copied)
    counts as made by the audit's own rule: at least ``PORT_RATIO`` of its added code lines are in the
    maintainers' NPU runners."""
    assert up.new is not None
    release = corpus / f"vllm-omni-{up.new}"
    maintainers = read_folder(release / "npu")
    changes = gpu_audit.audit(
        read_folder(release / "gpu"),
        gpu_audit.load_vllm_runner(up.new, queue=presets.NPU),
        maintainers,
        upstream_text,
        queue=presets.NPU,
    )
    audited = {f"{c.gpu_file}:{c.gpu_line}" for c in changes}
    made = {f"{c.gpu_file}:{c.gpu_line}" for c in changes if c.ported}
    theirs = set(cm.pooled(maintainers))
    out: list[str] = []
    for m in _SYNCED.finditer(sync_out):
        body = read_text(project / "patches" / m["patch"])
        added = [line[1:] for line in body.splitlines() if line.startswith("+") and not line.startswith("+++")]
        where = m["changes"].split(", ")
        if all(w in audited for w in where):
            if all(w in made for w in where):
                continue
        else:
            code = [s for line in added if (s := line.strip()) and not s.startswith("#")]
            if code and sum(1 for s in code if s in theirs) >= gpu_audit.PORT_RATIO * len(code):
                continue
        out += added
    return out


def fetch_refs(dest: Path, project: Path, mapping: dict[str, str]) -> None:
    git(dest, "fetch", "-q", "--no-tags", str(project), *[f"+{src}:{dst}" for src, dst in mapping.items()])


def git_rebase(repo: Path) -> tuple[int, int, float]:
    """(conflict regions, commits that stopped, seconds) of ``git rebase --onto newbase oldbase series``."""
    git(repo, "checkout", "-q", "-f", "-B", "work", "refs/bench/series")
    started = time.perf_counter()
    regions = stops = 0
    env = {"GIT_EDITOR": "true"}
    code = run(
        ["git", "rebase", "--merge", "--onto", "refs/bench/newbase", "refs/bench/oldbase"],
        repo,
        ok=range(0, 256),
        env=env,
    )[0]
    while code != 0:
        conflicted = git(repo, "diff", "--name-only", "--diff-filter=U").split()
        if not conflicted:
            raise StepError(f"git rebase stopped without a conflict in {repo}")
        stops += 1
        for name in conflicted:
            regions += cm.count_regions(read_text(repo / name))
        git(repo, "add", "-A")
        code = run(["git", "rebase", "--continue"], repo, ok=range(0, 256), env=env)[0]
    return regions, stops, time.perf_counter() - started


def whole_file_merge(queue: Queue, npu: Path, old: Snapshot, new: Snapshot) -> tuple[int, float]:
    """Regions of ``git merge-file`` on the whole vendored upstream file with every carried method as omni wrote it."""
    base = old.read(RUNNER).decode("utf-8")
    ours = new.read(RUNNER).decode("utf-8")
    syms = symbols.symbols_ast(base, path=RUNNER)
    replaced: dict[str, str] = {}
    for module, upath, name in carried(queue):
        if upath != RUNNER or name in replaced or name not in syms:
            continue
        mine = cm.downstream_symbol(read_text(npu / module), name, path=module)
        if mine is not None:
            replaced[name] = mine.text
    lines = base.splitlines(keepends=True)
    for name in sorted(replaced, key=lambda n: syms[n].start, reverse=True):
        s = syms[name]
        lines[s.start - 1 : s.end] = [replaced[name] if replaced[name].endswith("\n") else replaced[name] + "\n"]
    theirs = "".join(lines)
    started = time.perf_counter()
    regions, _merged = cm.merge_file_regions(base, ours, theirs)
    return regions, time.perf_counter() - started


def quality(
    up: Upgrade, corpus: Path, work: Path, location: str, newest: Snapshot | None
) -> tuple[Json, Queue, Snapshot, Snapshot]:
    """Sections 1 and 5 for one upgrade: adopt the older release into ``work/old`` (a copy of it before
    the refresh in ``work/pristine``), ``pq refresh`` it, measure ``npu_worker/``; (row, queue, old and new base)."""
    row, queue, old_snap, target_snap = adopt_upgrade(up, corpus, work, location, newest)
    project = work / "old"
    target = row["target_spec"]
    say(f"== {up.title}: pq refresh {'(default target)' if up.new is None else '--to ' + target}")
    report_path = work / "refresh.json"
    args = ["refresh", "--no-stop", "--report", str(report_path)] + ([] if up.new is None else ["--to", target])
    code, row["refresh_check_seconds"], _ = pq(project, *args, ok=(0, 3))
    report = json.loads(report_path.read_text(encoding="utf-8"))
    row["refresh_exit"] = code
    row["report_target"] = report["upstream"]["target"]
    row["conflicts"] = len(report.get("conflicts", []))
    row["flags"] = len(report.get("flags", []))
    row["blocks"] = [report["blocks"]["before"], report["blocks"]["after"]]
    row["findings"] = [
        {"before": (f.get("sides") or {}).get("base", ""), "after": (f.get("sides") or {}).get("upstream", "")}
        for f in [*report.get("conflicts", []), *report.get("flags", [])]
    ]
    out = project / "npu_worker"
    row["absorbed"] = list(absorbed(queue, out, old_snap, target_snap))
    row["work_saved"] = work_saved(up, corpus, out, target_snap.read(RUNNER).decode("utf-8")) if up.new else None
    row["work_saved_synced"] = row["synced_error"] = None
    if up.new is not None:
        try:
            row["work_saved_synced"] = sync_and_measure(up, corpus, project, target_snap.read(RUNNER).decode("utf-8"))
        except StepError as exc:  # e.g. a patch side that does not parse: the refresh's own figures still count
            row["synced_error"] = str(exc)
    return row, queue, old_snap, target_snap


def adopt_upgrade(
    up: Upgrade, corpus: Path, work: Path, location: str, newest: Snapshot | None
) -> tuple[Json, Queue, Snapshot, Snapshot]:
    """Adopt the older release into ``work/old`` (a copy in ``work/pristine``) and find the target: (row with
    the bases, queue, old and new base)."""
    row: Json = {"title": up.title, "old": up.old, "new": up.new, "error": None}
    npu = corpus / f"vllm-omni-{up.old}" / "npu"
    say(f"== {up.title}: adopt {npu}")
    row["adopt_seconds_old"], queue = adopt(work / "old", npu)
    if up.new is not None:
        row["adopt_seconds_new"], new_queue = adopt(work / "new", corpus / f"vllm-omni-{up.new}" / "npu")
        target = new_queue.upstream.public_commit
        target_snap = resolve_upstream(target, upstream_git=location, queue=presets.NPU)
    else:
        assert newest is not None
        target_snap = newest
        target = newest.spec
    old_snap = resolve_upstream(
        queue.upstream.pin if queue.upstream.kind == "git" else queue.upstream.spec,
        upstream_git=location,
        queue=presets.NPU,
    )
    row["old_base"], row["target"] = queue.upstream.label, target_snap.label
    row["old_pin"], row["target_pin"], row["target_spec"] = old_snap.pin, target_snap.pin, target
    row["noop"] = old_snap.read(RUNNER) == target_snap.read(RUNNER)
    project = work / "old"
    shutil.copytree(project, work / "pristine", symlinks=True)
    row["patches"] = int(git(project, "rev-list", "--count", "refs/pq/base..refs/pq/top").strip())
    return row, queue, old_snap, target_snap


def sync_and_measure(up: Upgrade, corpus: Path, project: Path, upstream_text: str) -> Json:
    """The rest of the maintainers' upgrade, done the way a maintainer would with pq: every conflict resolved to
    its patch side and ``pq continue``, then ``pq sync-gpu --omni <the newer release> --since <the older>`` (the
    series was adopted from a folder, so it names no release of its own); section 5 measured
    on the result (a copy of the project, so the refresh's own measurements stay as they are)."""
    assert up.new is not None
    synced = project.parent / "synced"
    shutil.copytree(project, synced, symlinks=True)
    if (synced / ".git" / "pq" / "refresh.json").is_file():
        for path in sorted((synced / "npu_worker").glob("*.py")):
            path.write_text(cm.take_side(read_text(path), "patch"), encoding="utf-8")
        pq(synced, "continue", ok=(0, 1))
    _code, _seconds, out = pq(synced, "sync-gpu", "--omni", up.new, "--since", up.old)
    left_out = unmade_port_lines(up, corpus, synced, out, upstream_text)
    return work_saved(up, corpus, synced / "npu_worker", upstream_text, left_out)


def measure_upgrade(
    up: Upgrade, corpus: Path, work: Path, location: str, repeats: int, newest: Snapshot | None
) -> Json:
    row, queue, old_snap, target_snap = quality(up, corpus, work, location, newest)
    npu = corpus / f"vllm-omni-{up.old}" / "npu"
    say(f"== {up.title}: baselines")
    row["merge_file_regions"], row["merge_file_seconds"] = whole_file_merge(queue, npu, old_snap, target_snap)
    time_refresh(row, work, repeats)
    return row


def speed_upgrade(up: Upgrade, corpus: Path, work: Path, location: str, repeats: int, newest: Snapshot | None) -> Json:
    """Section 3's refresh timings alone (``--speed``): adopt, one ``pq refresh --no-check`` (it makes the new
    base git rebase replays onto), then :func:`time_refresh`."""
    row = adopt_upgrade(up, corpus, work, location, newest)[0]
    pq(work / "old", "refresh", "--no-stop", "--no-check", "--to", row["target_spec"], ok=(0, 3))
    time_refresh(row, work, repeats)
    return row


def fair_checks(repo: Path) -> float:
    """Seconds of the checks a refresh's merges make and git does not, on the modules ``git rebase`` left in
    ``repo``'s work tree: ``ruff check --select F821,F811`` and a compile of each (``py_compile`` without the
    byte-code file written: nothing left in the work tree)."""
    files = sorted(str(p.relative_to(repo)) for p in repo.glob("*.py"))
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    started = time.perf_counter()
    run([ruff or "ruff", "check", "--isolated", "--no-cache", "--select", "F821,F811", *files], repo, ok=range(256))
    compile_all = (
        "import sys\nfor f in sys.argv[1:]:\n try: compile(open(f).read(), f, 'exec')\n except SyntaxError: pass"
    )
    run([sys.executable, "-c", compile_all, *files], repo)
    return time.perf_counter() - started


def spread(values: Sequence[float]) -> Json:
    return bench_scale.spread(values) if values else {"min": math.nan, "median": math.nan, "max": math.nan, "n": 0}


def time_refresh(row: Json, work: Path, repeats: int) -> None:
    """``pq refresh --no-stop --no-check`` from a fresh copy of ``work/pristine`` (the adopted project) against the
    fair baseline: ``git rebase`` of the same stack commits onto the new base the refresh of ``work/old`` made,
    then :func:`fair_checks` on what it wrote.  ``repeats`` pairs in one loop, the order swapped every pair:
    a refresh with the derived cache emptied (cold), the baseline, a refresh with the cache that one made
    (warm).  Each ratio is of one pair; figures are medians, with the spread of the ratios."""
    target = row["target_spec"]
    project, pristine = work / "old", work / "pristine"
    # the stack's commits for git rebase: the old ones from the copy taken before pq rewrote the refs
    rb = work / "rebase"
    rb.mkdir()
    git(rb, "init", "-q")
    git(rb, "config", "user.name", "bench")
    git(rb, "config", "user.email", "bench@localhost")
    fetch_refs(rb, pristine, {"refs/pq/top": "refs/bench/series", "refs/pq/base": "refs/bench/oldbase"})
    new_base_ref = (
        "refs/pq/refresh/base" if git(project, "for-each-ref", "refs/pq/refresh/base").strip() else "refs/pq/base"
    )
    fetch_refs(rb, project, {new_base_ref: "refs/bench/newbase"})
    row["rebase_regions"], row["rebase_stops"], _first = git_rebase(rb)

    def refresh(i: int, cold: bool) -> float:
        trial = work / f"trial{i}-{'cold' if cold else 'warm'}"
        shutil.copytree(pristine, trial, symlinks=True)
        if cold:
            shutil.rmtree(cache_dir() / "derived", ignore_errors=True)
        seconds = pq(trial, "refresh", "--no-stop", "--no-check", "--to", target, ok=(0, 3))[1]
        shutil.rmtree(trial)
        return seconds

    say(f"== {row['title']}: speed ({repeats} pairs)")
    cold_times: list[float] = []
    warm_times: list[float] = []
    rb_times: list[float] = []
    fair_times: list[float] = []
    for i in range(repeats):
        if i % 2:
            rb_times.append(git_rebase(rb)[2])
            fair_times.append(rb_times[-1] + fair_checks(rb))
        cold_times.append(refresh(i, True))
        warm_times.append(refresh(i, False))
        if not i % 2:
            rb_times.append(git_rebase(rb)[2])
            fair_times.append(rb_times[-1] + fair_checks(rb))
    row["pq_seconds"] = median(warm_times)
    row["pq_cold_seconds"] = median(cold_times)
    row["rebase_seconds"] = median(rb_times)
    row["fair_seconds"] = median(fair_times)
    row["ratio_spread"] = spread([p / f for p, f in zip(warm_times, fair_times, strict=True)])
    row["ratio_cold_spread"] = spread([p / f for p, f in zip(cold_times, fair_times, strict=True)])
    row["ratio"] = row["ratio_spread"]["median"]
    row["ratio_cold"] = row["ratio_cold_spread"]["median"]


# -- 3. speed: adopt, culprits, start-up ----------------------------------------------------------


def culprit_search(rows: Sequence[Json], location: str) -> list[Json]:
    from patch_queue.series.culprits import CulpritFinder

    git_up = open_git(location)
    out: list[Json] = []
    for row in rows:
        if row.get("error") or row.get("noop") or not row.get("findings") or "target_pin" not in row:
            continue
        try:
            finder = CulpritFinder(git_up, RUNNER, row["old_pin"], row["target_pin"])
        except Exception as exc:  # a release target without a commit in the history
            say(f"culprits {row['title']}: {exc}")
            continue
        started = time.perf_counter()
        n = len(finder.candidates())
        cand_s = time.perf_counter() - started
        times, reads = [], []
        for f in row["findings"]:
            finder._texts = {None: b""}  # every find from a cold text cache: reads are its own
            finder.reads = 0
            started = time.perf_counter()
            finder.find(str(f["before"] or ""), str(f["after"] or ""))
            times.append(time.perf_counter() - started)
            reads.append(finder.reads)
        # a find bisects at most twice (text gone, text come), each over n candidates, plus the two ends
        bound = 2 * math.ceil(math.log2(n)) + 2 if n > 1 else 4
        out.append(
            {
                "title": row["title"],
                "candidates": n,
                "candidates_seconds": cand_s,
                "finds": len(times),
                "median_seconds": median(times),
                "max_reads": max(reads),
                "median_reads": median(reads),
                "bound": bound,
                "log2": math.log2(n) if n else 0.0,
            }
        )
    return out


def startup(repeats: int, root: Path) -> Json:
    """``pq --help`` and ``pq status`` (in the first adopted project of this run under ``root``) against
    ``python -c pass``, interleaved: the median seconds of each and the spread of each one's ratio to the
    ``pass`` of its round."""
    where = next(iter(sorted(root.glob("u*/pristine"))), REPO)
    runs: dict[str, list[float]] = {"pass": [], "help": [], "status": []}
    for _ in range(repeats):
        runs["pass"].append(run([sys.executable, "-c", "pass"], REPO)[1])
        runs["help"].append(pq(REPO, "--help")[1])
        runs["status"].append(pq(where, "status", ok=range(256))[1])
    out: Json = {k: median(v) for k, v in runs.items()}
    for k in ("help", "status"):
        out[f"{k}_ratio"] = spread([a / b for a, b in zip(runs[k], runs["pass"], strict=True)])
    return out


def speed_table(good: Sequence[Json]) -> list[str]:
    """Section 3's refresh rows: the medians and the spread of the per-pair ratios to the fair baseline."""

    def ratios(x: Json) -> str:
        return f"{f2(x['median'])} ({f2(x['min'])}–{f2(x['max'])}, n={x['n']})"

    checked = all("refresh_check_seconds" in r for r in good)
    return table(
        [
            "upgrade",
            "pq refresh s",
            "git rebase s",
            "fair baseline s",
            f"pq / fair (goal ≤ {WARM_GOAL})",
            "derived cache empty s",
            f"cold pq / fair (goal ≤ {COLD_GOAL})",
            *["pq refresh with check s"] * checked,
        ],
        [
            [
                r["title"] + (" (no-op)" if r.get("noop") else ""),
                f2(r["pq_seconds"]),
                f2(r["rebase_seconds"]),
                f2(r["fair_seconds"]),
                ratios(r["ratio_spread"]),
                f2(r["pq_cold_seconds"]),
                ratios(r["ratio_cold_spread"]),
                *[f2(r.get("refresh_check_seconds", math.nan))] * checked,
            ]
            for r in good
        ],
    )


def stats_text(stats: pstats.Stats) -> str:
    """Where the time goes: pq's own functions by cumulative time, then everything by own time."""
    out = []
    for sort, restrict, title in (
        ("cumulative", ("patch_queue|bench_scale", 22), "pq's functions, cumulative"),
        ("tottime", (12,), "all functions, own time"),
    ):
        buf = io.StringIO()
        stats.stream = buf  # type: ignore[attr-defined]
        stats.sort_stats(sort).print_stats(*restrict)
        text = buf.getvalue()
        out.append(f"# {title}\n" + text[text.find("   ncalls") :].rstrip())
    return "\n\n".join(out)


def profile(fn: Callable[[], object]) -> str:
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    return stats_text(pstats.Stats(prof))


def profile_cli(cwd: Path, *args: str) -> str:
    """cProfile of one whole ``pq`` command, in its own process."""
    with tempfile.TemporaryDirectory(prefix="pq-bench-prof-") as tmp:
        dump = Path(tmp) / "pq.prof"
        code = (
            "import cProfile,sys\n"
            "from patch_queue.cli import main\n"
            f"sys.argv=['pq',*{list(args)!r}]\n"
            "p=cProfile.Profile();p.enable()\n"
            "try:\n main()\nexcept SystemExit:\n pass\n"
            f"p.disable();p.dump_stats({str(dump)!r})\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=False)
        if not dump.is_file():
            return proc.stderr.strip()[-3000:]
        return stats_text(pstats.Stats(str(dump)))


def profile_refresh(root: Path, index: int, target: str, *, cold: bool) -> str:
    """Profile of ``pq refresh`` of upgrade ``index`` from its pristine project; warm: after one unprofiled run."""
    pristine = root / f"u{index}" / "pristine"
    for name in ("warm-up", "profile"):
        trial = root / f"profile-refresh-{name}"
        shutil.rmtree(trial, ignore_errors=True)
        shutil.copytree(pristine, trial, symlinks=True)
        if name == "warm-up" and not cold:
            pq(trial, "refresh", "--no-stop", "--no-check", "--to", target, ok=(0, 3))
    if cold:
        shutil.rmtree(cache_dir() / "derived", ignore_errors=True)
    return profile_cli(trial, "refresh", "--no-stop", "--no-check", "--to", target)


MAINSH_PHASES = ("set-up", "download", "reproduce", "merge", "refresh", "check")


def mainsh_phases(timings: str) -> dict[str, float]:
    """scripts/main.sh's time by phase, from the file it wrote for ``PQ_TIMINGS``: each of its steps (``step NAME
    SECONDS``) less the parts of the pq command in it that fetched sources or checked the result (``within
    download|check SECONDS``, written before the step's line), which count as download and check."""
    phases = dict.fromkeys(MAINSH_PHASES, 0.0)
    within: list[tuple[str, float]] = []
    for line in timings.splitlines():
        kind, name, seconds = line.split()
        if kind == "within":
            within.append((name, float(seconds)))
            continue
        phases[name] = phases.get(name, 0.0) + float(seconds) - sum(t for _n, t in within)
        for part, took in within:
            phases[part] = phases.get(part, 0.0) + took
        within = []
    return phases


def mainsh_breakdown(root: Path) -> Json:
    """``bash scripts/main.sh`` in a fresh clone of this repository (its committed HEAD), its own set-up included,
    with its phases; then ``scripts/setup.sh`` once more (its .venv up to date).  The cache is this run's
    (``PQ_CACHE``): the releases and the upstream mirror are there, as on a machine that ran pq before."""
    clone, timings = root / "mainsh", root / "mainsh-timings.txt"
    shutil.rmtree(clone, ignore_errors=True)
    timings.unlink(missing_ok=True)
    started = time.perf_counter()
    git(root, "clone", "-q", str(REPO), str(clone))
    cloned = time.perf_counter() - started
    # as on a user's machine: byte code written, no venv or pq of this run's
    hidden = ("PQ", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env["PQ_TIMINGS"] = str(timings)
    say("== scripts/main.sh in a fresh clone")
    started = time.perf_counter()
    proc = subprocess.run(["bash", "scripts/main.sh"], cwd=clone, env=env, capture_output=True, text=True, check=False)
    total = time.perf_counter() - started
    if proc.returncode not in (0, 3):
        tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise StepError(f"scripts/main.sh exited {proc.returncode} in {clone}: {tail}")
    out: Json = {"clone": cloned, "total": total, "exit": proc.returncode}
    out["phases"] = mainsh_phases(timings.read_text(encoding="utf-8"))
    started = time.perf_counter()
    subprocess.run(["bash", "scripts/setup.sh"], cwd=clone, env=env, capture_output=True, check=True)
    out["setup_again"] = time.perf_counter() - started
    shutil.rmtree(clone, ignore_errors=True)
    return out


def render_mainsh(m: Json) -> list[str]:
    md = [
        "### scripts/main.sh on a fresh clone",
        "",
        "`git clone` of this repository, then `bash scripts/main.sh` in it (its set-up: a new .venv, pq"
        " installed with its pinned dependencies); its own `PQ_TIMINGS` record of its steps. *download*:"
        " fetching the recorded edits from origin, and the parts of pq's commands that resolve, fetch and verify"
        " the sources (registry index, release archives, the upstream mirror; the cache of this run holds them,"
        " as on a machine that ran pq before); *reproduce*: `pq reproduce` (the adoption and lineage replay)"
        " less its download; *refresh*: `pq refresh` onto the newest vllm-ascend release with both reports, less"
        " its download and check; *check*: its `pq check` (none when conflicts stop the refresh before it).",
        "",
    ]
    phases = m["phases"]
    md += table(
        ["clone s", *[f"{p} s" for p in MAINSH_PHASES], "main.sh total s", "main.sh exit"],
        [[f2(m["clone"]), *[f2(phases.get(p, 0.0)) for p in MAINSH_PHASES], f2(m["total"]), m["exit"]]],
    )
    md += [f"`scripts/setup.sh` again in that clone (its .venv up to date): {f2(m['setup_again'])} s.", ""]
    return md


def each_upgrade(chosen: Sequence[Upgrade], root: Path, measure: Callable[[Upgrade, Path], Json]) -> list[Json]:
    """``measure(upgrade, its fresh folder)`` for each upgrade; a failed one is a row with its error."""
    rows: list[Json] = []
    for i, up in enumerate(chosen):
        work = root / f"u{i}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        try:
            rows.append(measure(up, work))
        except (StepError, OSError, ValueError) as exc:
            say(f"{up.title}: {exc}")
            rows.append({"title": up.title, "old": up.old, "new": up.new, "error": str(exc)})
    return rows


def speed_only(args: argparse.Namespace, chosen: Sequence[Upgrade], corpus: Path, root: Path, location: str) -> int:
    """``--speed``: section 3's refresh timings (and, unless ``--quick``, profiles of the worst upgrade warm and
    cold) and the main.sh breakdown, printed as Markdown (and ``--json``); docs/ is not written."""
    newest = resolve_upstream(None, progress=say, queue=presets.NPU) if any(u.new is None for u in chosen) else None
    rows = each_upgrade(chosen, root, lambda up, work: speed_upgrade(up, corpus, work, location, args.repeats, newest))
    good = [r for r in rows if not r.get("error")]
    real = [r for r in good if not r["noop"]] or good
    ratio = median([r["ratio"] for r in real])
    ratio_cold = median([r["ratio_cold"] for r in real])
    md = [f"Medians of {args.repeats} interleaved pairs; ratios to the fair baseline, min–median–max.", ""]
    md += speed_table(good)
    md += [
        f"Median of the per-upgrade ratios, no-ops excluded: {f2(ratio)} (goal ≤ {WARM_GOAL}), derived cache empty"
        f" {f2(ratio_cold)} (goal ≤ {COLD_GOAL}).",
        "",
    ]
    profiles: dict[str, str] = {}
    if real and not args.quick:
        for cold, of_row in (
            (False, lambda r: r["ratio"]),
            (True, lambda r: r["ratio_cold"]),
        ):
            worst = max(real, key=of_row)
            name = f"pq refresh --no-check on {worst['title']}, {'derived cache empty' if cold else 'warm cache'}"
            profiles[name] = profile_refresh(root, rows.index(worst), worst["target_spec"], cold=cold)
    for name, text in profiles.items():
        md += [f"### Profile: {name}", "", "```", text, "```", ""]
    mainsh: Json | None = None
    if not args.quick:  # main.sh refreshes onto the newest release: it reads the registry
        try:
            mainsh = mainsh_breakdown(root)
            md += render_mainsh(mainsh)
        except (StepError, OSError, subprocess.CalledProcessError) as exc:
            md += [f"scripts/main.sh: {exc}", ""]
    print("\n".join(md))
    if args.json is not None:
        data = {"upgrades": rows, "ratio": ratio, "ratio_cold": ratio_cold, "profiles": profiles, "mainsh": mainsh}
        args.json.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    return 1 if any(r.get("error") for r in rows) or (mainsh is None and not args.quick) else 0


# -- 4. scale and chart ---------------------------------------------------------------------------


def scale(
    quick: bool, sizes: tuple[int, ...] | None, revisions: tuple[int, ...] | None, repeats: int | None
) -> list[Json]:
    kwargs: Json = {"sizes": (10, 30), "revisions": (10,), "repeats": 1} if quick else {}
    for key, value in (("sizes", sizes), ("revisions", revisions), ("repeats", repeats)):
        if value:
            kwargs[key] = value
    return list(bench_scale.run_scale(**kwargs))


def chart(path: Path, rows: Sequence[Json], scale_rows: Sequence[Json] | None) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install '.[bench]'): no chart."
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), dpi=100)
    ax_t, ax_m, ax_c = axes
    if scale_rows:
        for rev in sorted({r["revisions"] for r in scale_rows}):
            pts = sorted((r for r in scale_rows if r["revisions"] == rev), key=lambda r: r["patches"])
            xs = [r["patches"] for r in pts]
            line = ax_t.plot(xs, [r["pq_seconds"] for r in pts], marker="o", label=f"pq, {rev} revisions")[0]
            ax_t.plot(
                xs,
                [r["rebase_seconds"] for r in pts],
                marker="x",
                linestyle="--",
                color=line.get_color(),
                label=f"git rebase, {rev} revisions",
            )
            ax_m.plot(xs, [r["pq_peak_mib"] for r in pts], marker="o", label=f"{rev} revisions")
        ax_t.set_xscale("log")
        ax_t.set_yscale("log")
        ax_m.set_xscale("log")
        ax_t.legend(fontsize=7)
        ax_m.legend(fontsize=7)
    else:
        for ax in (ax_t, ax_m):
            ax.text(0.5, 0.5, "scale not measured", ha="center", va="center", transform=ax.transAxes)
    ax_t.set_title("refresh time by series size")
    ax_t.set_xlabel("patches")
    ax_t.set_ylabel("seconds")
    ax_m.set_title("pq peak memory by series size")
    ax_m.set_xlabel("patches")
    ax_m.set_ylabel("MiB")
    good = [r for r in rows if not r.get("error")]
    xs = list(range(len(good)))
    width = 0.27
    ax_c.bar([x - width for x in xs], [r["conflicts"] for r in good], width, label="pq conflicts")
    ax_c.bar(list(xs), [r["rebase_regions"] for r in good], width, label="git rebase regions")
    ax_c.bar([x + width for x in xs], [r["merge_file_regions"] for r in good], width, label="git merge-file regions")
    ax_c.set_xticks(list(xs))
    ax_c.set_xticklabels(
        [r["title"].replace(" → ", "→\n").replace("newest vllm-ascend", "newest") for r in good], fontsize=7
    )
    ax_c.set_title("conflicts per upgrade")
    ax_c.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


# -- output -------------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines + [""]


def machine() -> list[str]:
    import pygit2

    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True, check=False).stdout.strip()
    cpu = ""
    try:
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
    except OSError:
        pass
    try:
        load = " (load average as the report was written: {:.2f} {:.2f} {:.2f})".format(*os.getloadavg())
    except OSError:
        load = ""
    return [
        f"- uname: `{' '.join(platform.uname())}`",
        f"- CPUs: {os.cpu_count()}" + (f" ({cpu})" if cpu else "") + load,
        "- the machine may be shared with other jobs while the benchmark runs: every timing is paired with its"
        " baseline in one loop, and only the ratios are meant to be compared",
        f"- Python: {platform.python_version()}",
        f"- git: {git_version}",
        f"- pygit2: {getattr(pygit2, '__version__', '?')} (libgit2 {pygit2.LIBGIT2_VERSION})",
        "- pq's modules are byte-compiled before the timings, as `pip install` does"
        + (
            " (`PYTHONDONTWRITEBYTECODE` is set here: without it every run would compile them again, ~0.1 s)"
            if os.environ.get("PYTHONDONTWRITEBYTECODE")
            else ""
        ),
    ]


def f2(x: float) -> str:
    return f"{x:.2f}"


def percent(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({percent(part / whole)})" if whole else f"n/a ({whole} lines)"


WORK_SAVED_INTRO = (
    "d(A, B): code lines (stripped; blank and comment-only lines dropped) added or removed between the runner"
    " modules A and B, compared as multisets per module file name and summed over both sides' modules (a module"
    " missing on one side counts all its lines). *maint*: the newer release's NPU runners; *old*: the older"
    " release's; *pq*: `npu_worker/` after `pq refresh --to <the newer release's base>` with every diff3 region"
    " resolved to its patch side. *Work saved* = 1 − d(pq, maint) / d(old, maint); *upstream side*: the same with"
    " the regions resolved to their upstream side. *Ceiling of any GPU sync*: the work saved if a sync then"
    " added every omni line only the maintainers have that is in the newer release's `gpu/` runners, and took out"
    " every omni line only pq has that the GPU runners removed since the older release (with the better side of"
    " the regions): what no port of GPU-side changes can exceed (first table). The four columns split"
    " d(pq, maint): a line is *upstream* when it occurs in the target's `model_runner_v1.py`, else *omni*;"
    " *maint only* / *pq only*: who has it."
    " *Recall*: of the maintainers' GPU-side omni lines (neither upstream nor in the old release's runners, and in"
    " the newer release's `gpu/` runners), how many pq's output holds. *Precision*: of the lines pq wrote itself"
    " (in neither the old release's runners nor the upstream file), how many the maintainers' release holds."
    " Recall and precision count multisets over all modules together. Total: sums of the counts, not a mean of"
    " the ratios. `python bench/work_saved.py` measures this section alone."
)


def render_work_saved(rows: Sequence[Json]) -> list[str]:
    """Section 5: work saved per upgrade that has a newer corpus release, and over all of them: after the
    refresh, and after the rest of the upgrade (conflicts to their patch side, ``pq sync-gpu``)."""
    out = [
        "## 5. Work saved on real history",
        "",
        WORK_SAVED_INTRO,
        "",
        "After `pq refresh`:",
        "",
        *_work_saved_table(rows, "work_saved"),
        "",
        "After the rest of the upgrade with pq: every conflict resolved to its patch side, `pq continue`, then"
        " `pq sync-gpu --omni <the newer release> --since <the older>` (the ports of the newer release's GPU-side"
        " omni changes, and of the omni GPU code changed since the older release)."
        " The last column leaves out the lines of the ports of changes the maintainers did not make in that"
        " release (the audit of its GPU runners against its own NPU runners says they are unported there; a port"
        " the audit does not list, an update or a whole method, counts as made when the audit's share of its"
        " lines, 60 %, is in the maintainers' runners): the share of the rest the maintainers wrote the same way.",
        "",
        *_work_saved_table(rows, "work_saved_synced"),
        *(f"- {r['title']}: not measured after the sync: {r['synced_error']}" for r in rows if r.get("synced_error")),
        "",
    ]
    return out


def _work_saved_table(rows: Sequence[Json], which: str) -> list[str]:
    measured = [(r["title"], r[which]) for r in rows if not r.get("error") and r.get(which)]
    totals: Json = {
        key: sum(w[key] for _t, w in measured) for key in ("d_old", "d_pq", "d_pq_upstream_side", "d_ceiling")
    }
    totals["split"] = {key: sum(w["split"][key] for _t, w in measured) for key in SPLIT}
    synced = which == "work_saved_synced"
    for key in ("recall", "precision", *(("precision_ported",) if synced else ())):
        totals[key] = [sum(w[key][i] for _t, w in measured) for i in (0, 1)]

    def cells(title: str, w: Json) -> list[object]:
        return [
            title,
            w["d_old"],
            w["d_pq"],
            percent(cm.saved(w["d_pq"], w["d_old"])),
            percent(cm.saved(w["d_pq_upstream_side"], w["d_old"])),
            *([] if synced else [percent(cm.saved(w["d_ceiling"], w["d_old"]))]),
            *(w["split"][key] for key in SPLIT),
            share(*w["recall"]),
            share(*w["precision"]),
            *([share(*w["precision_ported"])] if synced else []),
        ]

    return [
        *table(
            [
                "upgrade",
                "d(old, maint)",
                "d(pq, maint)",
                "work saved (patch side)",
                "work saved (upstream side)",
                *([] if synced else ["ceiling of any GPU sync"]),
                "upstream: maint only",
                "upstream: pq only",
                "omni: maint only",
                "omni: pq only",
                "recall of GPU-side omni lines",
                "precision of ported lines",
                *(["precision without the ports the maintainers did not make"] if synced else []),
            ],
            [cells(t, w) for t, w in measured] + ([cells("**total**", totals)] if measured else []),
        ),
    ]


def render(
    args: argparse.Namespace,
    rows: Sequence[Json],
    speed: Json,
    scale_rows: Sequence[Json] | None,
    notes: list[str],
    total: float,
) -> str:
    cmd = "python bench/bench.py " + " ".join(shlex.quote(a) for a in args.argv)
    md = [
        "# Benchmark",
        "",
        f"Written by `{cmd.strip()}` on {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC in {total:.0f} s.",
        "",
        "## Machine",
        "",
        *machine(),
        f"- upstream git: `{os.environ.get('PQ_UPSTREAM_GIT', '')}`;"
        f" cache `{os.environ.get('PQ_CACHE', '~/.cache/pq')}`",
        "",
    ]
    good = [r for r in rows if not r.get("error")]
    md += [
        "## 1. Quality on real history",
        "",
        "Adopt the older release's corpus folder, `pq refresh --no-stop` onto the upstream base `pq adopt` finds"
        " for the newer release (last row: `pq refresh`'s default target, the newest vllm-ascend release). "
        "*Absorbed*: upstream lines added to the carried methods between the two bases that are in pq's output. "
        "*Differs from maintainers*: d(pq, maintainers) of section 5 (code lines that differ, as multisets,"
        " between pq's output with its conflicts resolved to the patch side and the newer release's runners),"
        " split into upstream-side (the line is in the target's `model_runner_v1.py`) and omni-side.",
        "",
    ]
    md += table(
        [
            "upgrade",
            "old base",
            "target",
            "patches",
            "hard conflicts",
            "review flags",
            "omni blocks before→after",
            "upstream lines absorbed",
            "differs from maintainers (upstream + omni)",
        ],
        [
            [
                r["title"],
                r["old_base"],
                r["target"] + (" (no-op: same base)" if r["noop"] else ""),
                r["patches"],
                r["conflicts"],
                r["flags"],
                f"{r['blocks'][0]}→{r['blocks'][1]}",
                f"{r['absorbed'][0]}/{r['absorbed'][1]}",
                "n/a"
                if r["work_saved"] is None
                else "{total} ({upstream} + {omni})".format(**r["work_saved"]["split"]),
            ]
            for r in good
        ],
    )
    for r in rows:
        if r.get("error"):
            md.append(f"- {r['title']}: not measured: {r['error']}")
    noops = [r["title"] for r in good if r["noop"]]
    if noops:
        md.append(
            f"- No-ops: {', '.join(noops)}: vllm-omni 0.20.0, 0.22.0 and 0.24.0 adopt to the same upstream "
            "base, so these refreshes replay onto an unchanged upstream file and change nothing."
        )
    newest = [r for r in good if r["new"] is None]
    if newest:
        md.append(f"- The newest vllm-ascend release, resolved through the registry: **{newest[0]['target']}**.")
    md.append("")
    md += [
        "## 2. Baselines in the same run",
        "",
        "*git rebase*: pq's own stack (`refs/pq/base..refs/pq/top` of the adopted project) rebased with"
        " `git rebase --merge --onto <new base commit made by the refresh>` in a plain repository; on each stop"
        " the `<<<<<<<` regions are counted, then `git add -A && git rebase --continue`. *git merge-file*: the whole"
        " vendored file, base = old upstream `model_runner_v1.py`, ours = new upstream, theirs = old upstream with"
        " every carried method replaced by the omni version.",
        "",
    ]
    md += table(
        [
            "upgrade",
            "pq conflicts",
            "pq flags",
            "git rebase regions",
            "git rebase commits stopped",
            "git merge-file regions",
            "merge-file seconds",
        ],
        [
            [
                r["title"],
                r["conflicts"],
                r["flags"],
                r["rebase_regions"],
                r["rebase_stops"],
                r["merge_file_regions"],
                f2(r["merge_file_seconds"]),
            ]
            for r in good
        ],
    )
    md += [
        "## 3. Speed",
        "",
        f"Wall time of whole processes in {args.repeats} interleaved pairs (one loop, the order swapped every"
        " pair): `pq refresh --no-stop --no-check --to TARGET` from a fresh copy of the adopted project each time"
        " (local upstream), against the fair baseline: `git rebase --merge` of the same stack commits onto the"
        " same new base, plus the checks a refresh's merges make and git does not, on the modules it wrote"
        " (`ruff check --select F821,F811` and a compile of each, as `py_compile`). *Warm*: with the derived"
        " cache (projections, layouts, import reconciliations, culprit answers, checked merges) of the cold"
        " refresh of the same pair. *Derived cache empty* (cold): right after deleting `$PQ_CACHE/derived`, as"
        " the first refresh of an upgrade on a machine is. Each ratio is of one pair: median (min–max, n). The"
        " machine is shared with other jobs while it runs: only the ratios mean anything. *With check*: the one"
        " `pq refresh` of section 1.",
        "",
    ]
    md += speed_table(good)
    adopt_times, up = speed["adopt"], speed["startup"]
    md += table(
        ["measure", "value", "goal", "met"],
        [
            [
                "pq refresh / fair baseline, warm (median of the per-upgrade median ratios, no-ops excluded)",
                f2(speed["ratio"]),
                GOALS["refresh"],
                "yes" if speed["ratio"] <= WARM_GOAL else "**no**",
            ],
            [
                "the same, with the derived cache empty (first refresh of an upgrade on a machine)",
                f2(speed["ratio_cold"]),
                GOALS["refresh_cold"],
                "yes" if speed["ratio_cold"] <= COLD_GOAL else "**no**",
            ],
            [
                f"pq adopt with the upstream search (median of {len(adopt_times)} adoptions)",
                f"{f2(median(adopt_times))} s",
                GOALS["adopt"],
                "yes" if median(adopt_times) < 2 else "**no**",
            ],
            [
                f"pq adopt {speed['adopt_cold_release']} with the method cache empty (first adoption on a machine)",
                f"{f2(speed['adopt_cold'])} s",
                GOALS["adopt"],
                "yes" if speed["adopt_cold"] < 2 else "**no**",
            ],
            [
                f"pq --help / pq status start-up (median of {speed['startup_runs']}; x `python -c pass`)",
                f"{up['help']:.3f} s / {up['status']:.3f} s"
                f" ({f2(up['help_ratio']['median'])}x / {f2(up['status_ratio']['median'])}x)",
                GOALS["startup"],
                "yes" if max(up["help"], up["status"]) < 0.3 else "**no**",
            ],
            [
                f"git rebase s / pq s at {speed['scale_patches']} synthetic patches (median over histories)",
                f"{f2(speed['scale_ratio'])}x",
                GOALS["scale"],
                "yes" if speed["scale_ratio"] >= 3 else "**no**",
            ],
            [
                "culprit search: max reads per find ≤ 2·⌈log2(candidates)⌉ + 2",
                "see below",
                GOALS["culprits"],
                "yes" if speed["culprits_ok"] else "**no**",
            ],
        ],
    )
    md += table(
        ["upgrade", "candidates", "log2", "finds", "median reads", "max reads", "median s/find", "candidate walk s"],
        [
            [
                c["title"],
                c["candidates"],
                f"{c['log2']:.1f}",
                c["finds"],
                c["median_reads"],
                c["max_reads"],
                f"{c['median_seconds']:.4f}",
                f"{c['candidates_seconds']:.3f}",
            ]
            for c in speed["culprits"]
        ],
    )
    md += ["Adoption times (s): " + ", ".join(f"{k} {f2(v)}" for k, v in speed["adopt_by_release"].items()), ""]
    if speed.get("mainsh"):
        md += render_mainsh(speed["mainsh"])
    for name, text in speed["profiles"].items():
        md += [f"### Profile: {name}", "", "```", text, "```", ""]
    md += [
        "## 4. Scale",
        "",
        "`bench/bench_scale.run_scale`: a synthetic series on a synthetic ~10,000-line upstream file (longer"
        " where a series needs more methods: *lines*); a first replay: pq's in-memory replay (a fresh process)"
        " against `git rebase --merge` of the same commits, in interleaved pairs, each pair on fresh copies of"
        " the fixture (no object of an earlier run in the store). Seconds: medians; *speed-up*: git rebase s /"
        " pq s of each pair, median (min–max) (goal ≥ 3 at the largest series); *peak*: the highest RSS of"
        " pq's process over the pairs, interpreter included.",
        "",
    ]
    if scale_rows:
        md += table(
            ["patches", "revisions", "lines", "pairs", "pq s", "pq peak MiB", "git rebase s", "speed-up"],
            [
                [
                    r["patches"],
                    r["revisions"],
                    r["lines"],
                    r["n"],
                    f2(r["pq_seconds"]),
                    f"{r['pq_peak_mib']:.0f}",
                    f2(r["rebase_seconds"]),
                    f"{f2(r['ratio'])} ({f2(r['ratio_min'])}–{f2(r['ratio_max'])})",
                ]
                for r in scale_rows
            ],
        )
    md += ["![benchmark](benchmark.png)", ""]
    md += render_work_saved(good)
    if notes:
        md += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    return "\n".join(md)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one upgrade, fewer repeats, small scale sizes")
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="folder for benchmark.md/.png")
    parser.add_argument("--repeats", type=int, default=None, help="runs per timing (default 5, --quick 2)")
    parser.add_argument("--keep", type=Path, help="work here and keep the projects")
    parser.add_argument("--json", type=Path, help="also write all the data here")
    parser.add_argument(
        "--speed",
        action="store_true",
        help="only section 3's refresh timings, their profiles and the main.sh breakdown, printed (docs/ untouched)",
    )
    ints = lambda text: tuple(int(x) for x in text.split(","))  # noqa: E731
    parser.add_argument("--scale-sizes", type=ints, help="patches per series for run_scale, e.g. 10,30,100")
    parser.add_argument("--scale-revisions", type=ints, help="history sizes for run_scale, e.g. 10,30")
    parser.add_argument("--scale-repeats", type=int, help="repeats for run_scale")
    parser.add_argument(
        "--only", type=lambda text: tuple(text.split(",")), help="only the upgrades from these releases: 0.24.0,0.30.0"
    )
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.repeats = args.repeats or (2 if args.quick else 5)
    corpus = corpus_dir()
    if not (corpus / "vllm-ascend.bundle").is_file():
        parser.error(f"no corpus at {corpus} (set PQ_CORPUS)")
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    location = upstream_git_location(None, spec=presets.NPU)
    # the pq processes read byte code as an installed package would (the folder is git-ignored)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "patch_queue")], check=True)
    started = time.perf_counter()
    chosen = tuple(u for u in ((QUICK,) if args.quick else UPGRADES) if not args.only or u.old in args.only)
    if not chosen:
        parser.error(f"--only {','.join(args.only)}: no upgrade from those releases")
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="pq-bench-"))
    if args.speed:
        try:
            return speed_only(args, chosen, corpus, root, location)
        finally:
            if args.keep is None:
                shutil.rmtree(root, ignore_errors=True)
    newest = resolve_upstream(None, progress=say, queue=presets.NPU) if any(u.new is None for u in chosen) else None
    rows: list[Json] = []
    notes: list[str] = []
    try:
        # the adopt search keeps the methods it scanned in the cache: time one adoption without them
        say("== pq adopt with an empty method cache")
        shutil.rmtree(cache_dir() / "methods", ignore_errors=True)
        adopt_cold = adopt(root / "cold-adopt", corpus / f"vllm-omni-{chosen[-1].old}" / "npu")[0]
        rows += each_upgrade(
            chosen, root, lambda up, work: measure_upgrade(up, corpus, work, location, args.repeats, newest)
        )
        good = [r for r in rows if not r.get("error")]
        adopt_by: dict[str, float] = {}
        for r in good:
            adopt_by.setdefault(r["old"], r["adopt_seconds_old"])
            if r.get("new"):
                adopt_by.setdefault(r["new"], r["adopt_seconds_new"])
        real = [r for r in good if not r["noop"]] or good
        speed: Json = {
            "ratio": median([r["ratio"] for r in real]),
            "ratio_cold": median([r["ratio_cold"] for r in real]),
            "adopt": list(adopt_by.values()),
            "adopt_by_release": adopt_by,
            "adopt_cold": adopt_cold,
            "adopt_cold_release": chosen[-1].old,
            "startup_runs": 10 if not args.quick else 3,
            "profiles": {},
        }
        speed["startup"] = startup(speed["startup_runs"], root)
        if not args.quick:  # main.sh refreshes onto the newest release: it reads the registry
            try:
                speed["mainsh"] = mainsh_breakdown(root)
            except (StepError, OSError, subprocess.CalledProcessError) as exc:
                notes.append(f"scripts/main.sh on a fresh clone: {exc}")
        say("== culprit search")
        speed["culprits"] = culprit_search(good, location)
        speed["culprits_ok"] = all(c["max_reads"] <= c["bound"] for c in speed["culprits"])
        # (cold, median ratio, its goal, a row's ratio, the note, the profile's name)
        refresh_cases: list[tuple[bool, float, float, Callable[[Json], float], str, str]] = [
            (
                False,
                speed["ratio"],
                WARM_GOAL,
                lambda r: r["ratio"],
                "Goal missed: pq refresh takes {ratio}x the fair baseline (median over upgrades; worst {worst}x on"
                " {title}); profile below.",
                "warm cache",
            ),
            (
                True,
                speed["ratio_cold"],
                COLD_GOAL,
                lambda r: r["ratio_cold"],
                "Goal missed with the derived cache empty: pq refresh takes {ratio}x the fair baseline (median; the"
                " first refresh of an upgrade on a machine); profile below.",
                "derived cache empty",
            ),
        ]
        for cold, ratio, goal, of_row, note, label in refresh_cases:
            if ratio <= goal or not real:
                continue
            worst = max(real, key=of_row)
            notes.append(note.format(ratio=f2(ratio), worst=f2(of_row(worst)), title=worst["title"]))
            if not args.quick:
                speed["profiles"][f"pq refresh --no-check on {worst['title']}, {label}"] = profile_refresh(
                    root, rows.index(worst), worst["target_spec"], cold=cold
                )
        if adopt_by and (median(speed["adopt"]) >= 2 or speed["adopt_cold"] >= 2):
            notes.append(
                f"Goal missed: pq adopt with its upstream search takes {f2(median(speed['adopt']))} s (median),"
                f" {f2(speed['adopt_cold'])} s with the method cache empty (goal: 2 s); profile below (cache empty)."
            )
            if not args.quick:
                proj = root / "profile-adopt"
                proj.mkdir()
                git(proj, "init", "-q")
                shutil.rmtree(cache_dir() / "methods", ignore_errors=True)
                speed["profiles"]["pq adopt vllm-omni-0.30.0 (upstream search, method cache empty)"] = profile_cli(
                    proj, "adopt", str(corpus / "vllm-omni-0.30.0" / "npu")
                )
        slowest = max(speed["startup"]["help"], speed["startup"]["status"])
        if slowest >= 0.3:
            notes.append(
                f"Goal missed: start-up {slowest:.3f} s ({slowest / 0.3:.2f}x the 0.3 s goal);"
                " profile below (`python -X importtime` names the imports)."
            )
            if not args.quick:
                speed["profiles"]["pq --help"] = profile_cli(REPO, "--help")
        if not speed["culprits_ok"]:
            notes.append("Goal missed: a culprit search read more than 2·⌈log2(candidates)⌉ + 2 file versions.")
        say("== scale")
        scale_rows = scale(args.quick, args.scale_sizes, args.scale_revisions, args.scale_repeats)
        largest = max(r["patches"] for r in scale_rows)
        speed["scale_patches"] = largest
        speed["scale_ratio"] = median([r["ratio"] for r in scale_rows if r["patches"] == largest])
        if speed["scale_ratio"] < 3:
            notes.append(
                f"Goal missed: at {largest} patches pq's replay is {f2(speed['scale_ratio'])}x as fast as git rebase"
                " (goal: 3x); profile below."
            )
            if not args.quick:
                revs = min(r["revisions"] for r in scale_rows)
                speed["profiles"][f"pq's replay of {largest} synthetic patches ({revs} revisions)"] = profile(
                    lambda: bench_scale.replay_once(largest, revs)
                )
        args.out.mkdir(parents=True, exist_ok=True)
        chart_note = chart(args.out / "benchmark.png", rows, scale_rows)
        if chart_note:
            notes.append(chart_note)
        total = time.perf_counter() - started
        text = render(args, rows, speed, scale_rows, notes, total)
        (args.out / "benchmark.md").write_text(text, encoding="utf-8")
        if args.json is not None:
            args.json.write_text(
                json.dumps(
                    {"upgrades": rows, "speed": speed, "scale": scale_rows, "notes": notes}, indent=1, default=str
                )
                + "\n",
                encoding="utf-8",
            )
        print(text)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
