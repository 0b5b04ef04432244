"""Scale measurement: pq's in-memory replay against ``git rebase`` on a synthetic series.

A seeded generator writes a Python-like upstream file (one class, ~10,000 lines of methods; more
when the series needs more methods than that: the ``lines`` column says), a series of N patches
(each edits a line or two of its own method, or inserts a small fenced ``# ---- Omni-new ----``
block) and M upstream revisions (each edits a few lines of other methods).  Patches and revisions
never touch the same method, so both replays are clean.

For every (N, M) the same commits are replayed from revision 0 onto revision M, in pairs (one loop, the
order swapped every pair), each pair on its own fresh copies of the fixture (a first replay: no object an
earlier run wrote is in the store), by

- pq: :func:`patch_queue.series.replay.replay`, in a fresh ``python`` child process that reports its wall
  time and its peak RSS (``VmHWM``), and
- git: ``git rebase --merge --onto <rev M> <rev 0> <branch>`` (the merge backend) in a real
  repository with a work tree, same machine, same run.

Each figure is the min, median and max over the pairs; the ratio is git / pq of each pair.

Usage: ``python bench/bench_scale.py [--sizes 10,30,100,300,1000] [--revisions 10,30,100] [--repeats 3]``.
:func:`run_scale` returns the rows for other scripts (``bench/bench.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODULE = "model_runner.py"
METHOD_LINES = 10  # every generated method: 9 lines and a blank one
FENCE = "# ---- Omni-new ----"
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


# -- the synthetic series -----------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """Texts of one synthetic case: ``revisions[0]`` is the old base, ``revisions[-1]`` the new one."""

    revisions: tuple[str, ...]  # M + 1 texts of the upstream file
    patches: tuple[str, ...]  # N texts: the module after each patch, on revisions[0]

    @property
    def lines(self) -> int:
        return self.revisions[0].count("\n")


def _method(k: int, rng: random.Random) -> list[str]:
    a, b, c = rng.randrange(2, 97), rng.randrange(2, 97), rng.randrange(2, 97)
    return [
        f"    def method_{k:04d}(self, x, y):\n",
        f'        """Step {k} of the runner."""\n',
        f"        a = x + {a}\n",
        f"        b = y * {b}\n",
        "        if a > b:\n",
        f"            return self.helper_{k:04d}(a)\n",
        f"        c = a - b + {c}\n",
        f"        d = c * {a % 7 + 2}\n",
        "        return c + d\n",
        "\n",
    ]


def generate(patches: int, revisions: int, *, lines: int = 10_000, seed: int = 0) -> Series:
    """A deterministic series of ``patches`` patches and ``revisions`` upstream revisions.

    Every patch and every revision edits methods of its own (a revision edits two), so nothing
    overlaps: the file has ``lines`` lines, or the ``patches + 2 * revisions`` methods that takes.
    """
    rng = random.Random(seed)
    header = ["import torch\n", "\n", "\n", "class NPUModelRunner:\n", '    """Synthetic runner."""\n', "\n"]
    count = max(1, (lines - len(header)) // METHOD_LINES, patches + 2 * revisions)
    methods = [_method(k, rng) for k in range(count)]
    order = list(range(count))
    rng.shuffle(order)
    patch_methods = order[:patches]
    rev_methods = order[patches : patches + 2 * revisions]

    def text(ms: list[list[str]]) -> str:
        return "".join(header) + "".join(line for m in ms for line in m)

    ups = [text(methods)]
    current = [list(m) for m in methods]
    for j in range(revisions):
        for k in rev_methods[2 * j : 2 * j + 2]:
            body = current[k]
            body[3] = body[3].replace("\n", f" + {j + 1}  # upstream r{j + 1}\n")
            if rng.random() < 0.5:
                body[6] = body[6].replace("c = a - b", "c = b - a")
        ups.append(text(current))
    series = []
    mine = [list(m) for m in methods]
    for i, k in enumerate(patch_methods):
        body = mine[k]
        kind = rng.random()
        if kind < 0.4:  # a fenced omni block after the first statement
            block = [
                f"        {FENCE}\n",
                "        if self.omni_enabled:\n",
                f"            a = self.omni_hook_{i}(a, x)\n",
                f"        {FENCE}\n",
            ]
            body[3:3] = block
        elif kind < 0.8:  # a changed line and a tagged one
            body[7] = body[7].replace("\n", f" + self.omni_offset({i})\n")
            body[2] = body[2].replace("\n", "  # Omni-new\n")
        else:  # a block at the end of the method
            body[8:8] = [f"        {FENCE}\n", f"        d = self.omni_post_{i}(c, d)\n", f"        {FENCE}\n"]
        series.append(text(mine))
    return Series(tuple(ups), tuple(series))


# -- fixtures -------------------------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@dataclass(frozen=True)
class Fixture:
    path: Path  # a git repository with a work tree
    old_base: str
    new_base: str
    patches: tuple[tuple[str, str], ...]  # (name, commit), in order, on old_base


def build_fixture(path: Path, series: Series) -> Fixture:
    """A repository holding the upstream history (branch ``upstream``) and the series (branch ``series``)."""
    from patch_queue.git.repo import Person, ProjectRepo

    _git(path.parent, "init", "-q", "-b", "main", str(path))
    repo = ProjectRepo(path)
    person = Person("bench", "bench@localhost", 1_700_000_000, 0)
    parent: list[str] = []
    ups: list[str] = []
    for j, text in enumerate(series.revisions):
        tree = repo.write_tree({MODULE: text.encode()})
        ups.append(repo.commit(tree, parent, f"upstream r{j}\n", person, person))
        parent = [ups[-1]]
    patches: list[tuple[str, str]] = []
    parent = [ups[0]]
    for i, text in enumerate(series.patches):
        tree = repo.write_tree({MODULE: text.encode()})
        commit = repo.commit(tree, parent, f"omni patch {i + 1}\n", person, person)
        patches.append((f"{i + 1:04d}-omni-{i + 1}.patch", commit))
        parent = [commit]
    _git(path, "update-ref", "refs/heads/upstream", ups[-1])
    _git(path, "update-ref", "refs/heads/series", patches[-1][1] if patches else ups[0])
    _git(path, "checkout", "-q", "series")
    return Fixture(path, ups[0], ups[-1], tuple(patches))


# -- measurements ---------------------------------------------------------------------------------


def _peak_kib() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _child_pq(args: dict[str, object]) -> dict[str, float]:
    """Runs in a fresh interpreter: one replay, its wall time and the process's peak RSS.

    The peak is ``VmHWM`` of ``/proc/self/status`` (reset by exec; ``ru_maxrss`` is not: on Linux
    it keeps the parent's size at fork), ``ru_maxrss`` where there is no ``/proc``.
    """
    from patch_queue.git.repo import ProjectRepo
    from patch_queue.series import replay

    repo = ProjectRepo(Path(str(args["path"])))
    patches = [(str(n), str(c)) for n, c in args["patches"]]  # type: ignore[attr-defined]
    before = _peak_kib()
    start = time.perf_counter()
    results = replay.replay(repo, patches, str(args["new_base"]), labels=("old", "new"), stop=False)
    seconds = time.perf_counter() - start
    if any(r.conflicts for r in results) or len(results) != len(patches):
        raise SystemExit("the synthetic replay was not clean")
    peak = _peak_kib()
    return {"seconds": seconds, "peak_mib": peak / 1024, "start_mib": before / 1024}


def time_pq(fixture: Fixture) -> dict[str, float]:
    """One first replay by pq in a fresh child process: seconds, peak MiB and MiB before the replay."""
    payload = json.dumps({"path": str(fixture.path), "patches": fixture.patches, "new_base": fixture.new_base})
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import bench_scale; "
        "print(json.dumps(bench_scale._child_pq(json.loads(sys.stdin.read()))))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).resolve().parent)],
        input=payload,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    run: dict[str, float] = json.loads(done.stdout)
    return run


def time_rebase(fixture: Fixture) -> float:
    """Seconds of one ``git rebase --merge --onto <new base> <old base>`` of the series branch."""
    tip = _git(fixture.path, "rev-parse", "series")
    _git(fixture.path, "checkout", "-q", "-B", "bench", tip)
    start = time.perf_counter()
    _git(
        fixture.path,
        "-c",
        "rebase.backend=merge",
        "rebase",
        "-q",
        "--merge",
        "--no-autosquash",
        "--no-update-refs",
        "--onto",
        fixture.new_base,
        fixture.old_base,
        "bench",
    )
    seconds = time.perf_counter() - start
    if _git(fixture.path, "rev-list", "--count", f"{fixture.new_base}..HEAD") != str(len(fixture.patches)):
        raise RuntimeError("git rebase did not replay every commit")
    return seconds


def spread(values: Sequence[float]) -> dict[str, float]:
    """min, median and max of ``values`` and how many there are."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def paired(fixture: Fixture, work: Path, repeats: int) -> dict[str, Any]:
    """``repeats`` pairs of a first replay, each on fresh copies of ``fixture`` (no object of an earlier run in
    the store): pq and git rebase one after the other in one loop, the order swapped every pair.  The spread of
    pq's seconds, git's and of git / pq per pair; pq's peak memory (the highest) and its memory before the
    replay (the lowest)."""
    pq_s: list[float] = []
    git_s: list[float] = []
    peaks: list[float] = []
    starts: list[float] = []
    for r in range(repeats):
        pq_dir, git_dir = work / f"pq-{r}", work / f"git-{r}"
        shutil.copytree(fixture.path, pq_dir, symlinks=True)
        shutil.copytree(fixture.path, git_dir, symlinks=True)
        runs = [("pq", Fixture(pq_dir, *_rest(fixture))), ("git", Fixture(git_dir, *_rest(fixture)))]
        for who, fx in runs if r % 2 == 0 else runs[::-1]:
            if who == "pq":
                got = time_pq(fx)
                pq_s.append(got["seconds"])
                peaks.append(got["peak_mib"])
                starts.append(got["start_mib"])
            else:
                git_s.append(time_rebase(fx))
        shutil.rmtree(pq_dir)
        shutil.rmtree(git_dir)
    return {
        "pq": spread(pq_s),
        "git": spread(git_s),
        "ratio": spread([g / p for g, p in zip(git_s, pq_s, strict=True)]),
        "peak_mib": max(peaks),
        "start_mib": min(starts),
    }


def _rest(fixture: Fixture) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    return fixture.old_base, fixture.new_base, fixture.patches


def replay_once(patches: int, revisions: int) -> None:
    """One replay of a generated case, in this process (for a profile)."""
    from patch_queue.git.repo import ProjectRepo
    from patch_queue.series import replay

    with tempfile.TemporaryDirectory(prefix="pq-bench-scale-") as tmp:
        fixture = build_fixture(Path(tmp) / "pq", generate(patches, revisions))
        replay.replay(
            ProjectRepo(fixture.path), list(fixture.patches), fixture.new_base, labels=("old", "new"), stop=False
        )


def run_scale(
    sizes: Sequence[int] = (10, 30, 100, 300, 1000),
    revisions: Sequence[int] = (10, 30, 100),
    repeats: int = 3,
) -> list[dict[str, float | int]]:
    """One row per (patches, revisions) on a 10,000-line file (or longer, see :func:`generate`), from
    :func:`paired` runs.

    Keys: patches, revisions, lines, n (pairs), pq_seconds / rebase_seconds / ratio (rebase / pq per pair)
    with their _min and _max, pq_peak_mib (peak RSS of the child process, interpreter and imports included),
    pq_start_mib (its RSS before the replay).
    """
    rows: list[dict[str, float | int]] = []
    with tempfile.TemporaryDirectory(prefix="pq-bench-scale-") as tmp:
        for n in sizes:
            for m in revisions:
                series = generate(n, m)
                pristine = build_fixture(Path(tmp) / f"fixture-{n}-{m}", series)
                got = paired(pristine, Path(tmp), repeats)
                row: dict[str, float | int] = {"patches": n, "revisions": m, "lines": series.lines}
                for key, name in (("pq", "pq_seconds"), ("git", "rebase_seconds"), ("ratio", "ratio")):
                    figures = got[key]
                    row[name] = round(figures["median"], 4)
                    row[f"{name}_min"] = round(figures["min"], 4)
                    row[f"{name}_max"] = round(figures["max"], 4)
                    row["n"] = int(figures["n"])
                row["pq_peak_mib"] = round(got["peak_mib"], 1)
                row["pq_start_mib"] = round(got["start_mib"], 1)
                rows.append(row)
                shutil.rmtree(pristine.path)
    return rows


def format_table(rows: Sequence[dict[str, float | int]]) -> str:
    head = (
        "| patches | revisions | lines | pairs | pq s (min–max) | pq peak MiB (start) | git rebase s (min–max) "
        "| rebase / pq, median (min–max) |"
    )
    out = [head, "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(
            f"| {r['patches']} | {r['revisions']} | {r['lines']} | {r['n']} | {r['pq_seconds']:.3f} "
            f"({r['pq_seconds_min']:.3f}–{r['pq_seconds_max']:.3f}) | {r['pq_peak_mib']:.1f} ({r['pq_start_mib']:.1f}) "
            f"| {r['rebase_seconds']:.3f} ({r['rebase_seconds_min']:.3f}–{r['rebase_seconds_max']:.3f}) "
            f"| {r['ratio']:.2f}x ({r['ratio_min']:.2f}–{r['ratio_max']:.2f}) |"
        )
    return "\n".join(out)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10,30,100,300,1000", help="patch counts, comma-separated")
    parser.add_argument("--revisions", default="10,30,100", help="upstream revision counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    rows = run_scale(_ints(args.sizes), _ints(args.revisions), args.repeats)
    print(format_table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
