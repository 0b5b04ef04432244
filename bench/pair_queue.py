"""A queue set by options alone, end to end on the real releases: issue 49's last acceptance ("a third real pair of
the same shape, adopted and refreshed by options alone"), measured as ``bench/gpu_queue.py`` measures the GPU
queue.

Usage::

    python bench/pair_queue.py PAIR [--keep DIR] [--json OUT]
    python bench/pair_queue.py --source vllm-omni==0.31.0rc1 --upstream-dist vllm \\
        --upstream-file vllm/v1/worker/gpu/model_runner.py --upstream-class GPUModelRunner \\
        --package vllm_omni/worker_v2 --out worker_v2 --targets vllm==0.31.0,vllm==0.32.0 --merge vllm-omni==0.32.0rc1

``PAIR`` is one of :data:`PAIRS` (the pairs tried: vllm-omni's model runner v2 on vLLM's ``v1/worker/gpu``
runner, vllm-ascend's own runner on vLLM's ``GPUModelRunner``).  Steps, each with the installed pq in a fresh
project (``git init``), no preset named:

1. ``pq adopt SOURCE --upstream-dist … --package … --out …``: the base found among the upstream's releases (its
   name and score) and what adopt warned of;
2. ``pq build``: the output folder against the release's package (its own modules), byte for byte;
3. ``pq check --json -``: no rule of the NPU rule set fires;
4. for each target, ``pq refresh --no-stop --to TARGET``: its conflict regions against ``git merge-file --diff3``
   on the same texts, and the upstream statements dropped outside every conflict region; then ``pq abort``
   (:func:`gpu_queue.measured_refresh`); then plain ``pq refresh --no-stop`` (the newest upstream release);
5. ``pq merge MERGE`` (a newer downstream release) onto the adopted series, with ``--import`` where the pair's import
   environment can be built from the registry (:attr:`Pair.imports`): its exit and the output against that
   release's package, byte for byte;
6. ``pq build --wheel``: the wheel's name, and the imports of its modules that still point into the downstream's tree;
7. every line pq printed, scanned for a name of the NPU queue that the pair's own files do not hold (a pair whose
   downstream is vllm-ascend names vllm-ascend rightly).

The Markdown table goes to stdout, progress to stderr; downloads are cached under ``PQ_CACHE``.  Exit 0 when every
figure meets its mark (byte for byte, no NPU rule, no statement lost, the merge finished, nothing naming the NPU
queue).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from gpu_queue import Run, StepError, differing, git, measured_refresh, npu_rule_ids, report, say  # noqa: E402

from patch_queue import presets  # noqa: E402
from patch_queue.sources.archives import release_files  # noqa: E402


@dataclass(frozen=True)
class Pair:
    """A pair of the same shape as the two presets, set by ``pq adopt``'s options."""

    source: str  # the downstream release adopted, NAME==VERSION
    upstream_dist: str
    upstream_file: str
    upstream_class: str
    package: str
    out: str
    targets: tuple[str, ...]  # upstream releases to refresh onto, NAME==VERSION
    merge: str  # a newer downstream release merged into the adopted series ("" = none)
    imports: bool = False  # the merge runs `pq check --import` (an environment the registry's releases can build)

    def options(self) -> list[str]:
        return [
            "--upstream-dist",
            self.upstream_dist,
            "--upstream-file",
            self.upstream_file,
            "--upstream-class",
            self.upstream_class,
            "--package",
            self.package,
            "--out",
            self.out,
        ]


PAIRS = {
    # vllm-omni's model runner v2 (vllm_omni/worker_v2/, from 0.30.0 on) copies methods of vLLM's v2 runner
    "worker-v2": Pair(
        "vllm-omni==0.31.0rc1",
        "vllm",
        "vllm/v1/worker/gpu/model_runner.py",
        "GPUModelRunner",
        "vllm_omni/worker_v2",
        "worker_v2",
        ("vllm==0.30.0", "vllm==0.31.0", "vllm==0.32.0"),
        "vllm-omni==0.32.0rc1",
        imports=True,
    ),
    # vllm-ascend's NPUModelRunner copies methods of vLLM's GPUModelRunner
    "ascend": Pair(
        "vllm-ascend==0.29.0rc1",
        "vllm",
        "vllm/v1/worker/gpu_model_runner.py",
        "GPUModelRunner",
        "vllm_ascend/worker",
        "ascend_worker",
        ("vllm==0.30.0", "vllm==0.31.0"),
        "vllm-ascend==0.30.0rc2",
    ),
}
# the NPU queue's own names: a message of another queue that holds one (and whose files do not) names the wrong queue
NPU_NAMES = (
    presets.NPU.upstream_dist,
    presets.NPU.upstream_dist.replace("-", "_"),
    presets.NPU.upstream_class,
    presets.NPU.out,
    presets.NPU.wheel,
    presets.NPU.package,
    presets.NPU.package.replace("/", "."),
    *presets.NPU.wheel_requires[:1],
    presets.RUNNERS["npu"],
    presets.NPU.fence,
)


def package_modules(release: str, package: str) -> dict[str, bytes]:
    """The modules of ``package`` itself (not its subpackages) in the downstream release ``release``."""
    name, _sep, version = release.partition("==")
    prefix = package + "/"
    files = release_files(name, version, prefix)
    return {
        k.removeprefix(prefix): v for k, v in files.items() if "/" not in k.removeprefix(prefix) and k.endswith(".py")
    }


def folder_modules(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.py"))}


def new_project(path: Path, out: str) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text(f"/patches/*.patch\n/{out}/\n/reports/\n/dist/\n", encoding="utf-8")
    git(path, "add", ".gitignore")
    git(path, "-c", "user.name=pq", "-c", "user.email=pq@localhost", "commit", "-qm", "project")
    return path


def in_tree_imports(wheel: Path, pair: Pair) -> list[str]:
    """The import lines of the wheel's modules that still name a module of the series in the downstream's tree
    (the wheel's package stands for it): ``file:line: text``.  A subpackage of the downstream's is no such module."""
    dotted = re.escape(pair.package.replace("/", "."))
    found = []
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith(pair.out + "/") and n.endswith(".py")]
        modules = {n.removeprefix(pair.out + "/").removesuffix(".py") for n in names if n.count("/") == 1}
        for name in sorted(names):
            for number, line in enumerate(zf.read(name).decode("utf-8").splitlines(), 1):
                m = re.match(rf"\s*(?:from|import)\s+{dotted}(?:\.(\w+))?(?:\s+import\s+(\w+))?", line)
                if m and (m[1] in modules or (m[1] is None and m[2] in modules)):
                    found.append(f"{name}:{number}: {line.strip()}")
    return found


def wrong_names(run: Run, own: dict[str, bytes]) -> list[str]:
    """The lines pq printed that hold a name of the NPU queue which none of the pair's own modules holds."""
    texts = b"\n".join(own.values()).decode("utf-8", errors="replace")
    words = [w for w in NPU_NAMES if w and w not in texts]
    pattern = re.compile("|".join(re.escape(w) for w in words))
    return sorted(
        {
            f"{cmd}: {line.strip()[:160]}"
            for cmd, text in run.printed
            for line in text.splitlines()
            if pattern.search(line)
        }
    )


def measure(work: Path, pair: Pair) -> dict[str, Any]:
    run = Run(dict(os.environ))
    project = new_project(work / "pair", pair.out)
    row: dict[str, Any] = {"source": pair.source, "upstream": f"{pair.upstream_dist}: {pair.upstream_file}"}

    say(f"== pq adopt {pair.source} {' '.join(pair.options())}")
    started = time.perf_counter()
    _code, out = run.pq(project, "adopt", pair.source, *pair.options())
    row["adopt_seconds"] = round(time.perf_counter() - started, 2)
    base = next((line for line in out.splitlines() if line.startswith("upstream base: ")), "")
    found = re.match(r"upstream base: (.+?), score (\d+)/(\d+) .*best of (\d+) releases, (\d+) tied", base)
    if found is None:
        raise StepError(f"pq adopt printed no upstream base:\n{out[-2000:]}")
    row["base"] = {
        "label": found[1],
        "matched": int(found[2]),
        "total": int(found[3]),
        "searched": int(found[4]),
        "tied": int(found[5]),
    }
    row["widened"] = sum(1 for line in out.splitlines() if "widening the search" in line)
    row["patches"] = len(list((project / "patches").glob("*.patch")))
    row["carried"] = sum(1 for line in out.splitlines() if line.startswith("carried: "))
    row["warnings"] = [line.removeprefix("warning: ") for line in out.splitlines() if line.startswith("warning: ")]

    say("== pq build")
    run.pq(project, "build")
    own = package_modules(pair.source, pair.package)
    row["build_differs"] = differing(folder_modules(project / pair.out), own)

    say("== pq check")
    _code, out = run.pq(project, "check", "--json", "-", ok=(0, 1))
    checked = json.loads(out[: out.rindex("}") + 1])
    row["check"] = {"errors": checked["errors"], "warnings": checked["warnings"], "counts": checked["counts"]}
    row["npu_rules_fired"] = sorted(set(checked["counts"]) & npu_rule_ids())

    git(project, "add", "-A")
    git(project, "-c", "user.name=pq", "-c", "user.email=pq@localhost", "commit", "-qm", f"pq adopt {pair.source}")
    row["refreshes"] = []
    for target in pair.targets:
        say(f"== pq refresh --no-stop --to {target}, then pq abort")
        row["refreshes"].append(measured_refresh(run, project, target, pair.out))

    say("== pq refresh --no-stop (the newest upstream release), then pq abort")
    code, out = run.pq(project, "refresh", "--no-stop", ok=(0, 1, 2, 3))
    ends = ("pq: error", "refreshed onto", "all patches replayed", "stopped at")
    row["newest"] = {"exit": code, "said": next((x for x in out.splitlines() if x.startswith(ends)), "")}
    if git(project, "for-each-ref", "refs/pq/refresh/base").strip():
        run.pq(project, "abort")

    if pair.merge:
        say(f"== pq merge {pair.merge} onto the adopted series")
        started = time.perf_counter()
        code, out = run.pq(project, "merge", pair.merge, "--import" if pair.imports else "--no-import", ok=(0, 1, 3))
        row["merge"] = {
            "release": pair.merge,
            "exit": code,
            "check": next((x for x in out.splitlines() if x.startswith("pq check:")), ""),
            "differs": differing(folder_modules(project / pair.out), package_modules(pair.merge, pair.package)),
            "seconds": round(time.perf_counter() - started, 2),
        }
        own |= package_modules(pair.merge, pair.package)
        if git(project, "for-each-ref", "refs/pq/refresh/base").strip():
            run.pq(project, "abort")

    say("== pq build --wheel")
    _code, out = run.pq(project, "build", "--wheel")
    wheel = project / next(line for line in out.splitlines() if line.endswith(".whl"))
    row["wheel"] = wheel.name
    row["wheel_in_tree"] = in_tree_imports(wheel, pair)
    row["npu_words"] = wrong_names(run, own)
    row["commands"] = len(run.printed)
    return row


def ok(row: dict[str, Any]) -> bool:
    return not (
        row["build_differs"]
        or row["npu_rules_fired"]
        or row["npu_words"]
        or row["wheel_in_tree"]
        or any(r["lost"] for r in row["refreshes"])
        or ("merge" in row and (row["merge"]["exit"] != 0 or row["merge"]["differs"]))
    )


def table(row: dict[str, Any]) -> str:
    b = row["base"]
    lines = [
        f"{row['source']} on {row['upstream']}, by options alone",
        "",
        "| figure | measured |",
        "|---|---|",
        f"| base among the upstream's releases | {b['label']}: {b['matched']}/{b['total']} lines of the carried "
        f"methods ({100.0 * b['matched'] / max(b['total'], 1):.1f}%), best of {b['searched']} releases, {b['tied']} "
        f"tied{'; the search widened ' + str(row['widened']) + ' time(s)' if row['widened'] else ''} |",
        f"| adopted | {row['patches']} patches, {row['carried']} carried methods; {row['adopt_seconds']} s |",
        *(f"| adopt warned | {w} |" for w in row["warnings"]),
        "| `pq build` = the release's package | "
        + ("byte for byte" if not row["build_differs"] else f"differs: {', '.join(row['build_differs'])}")
        + " |",
        f"| `pq check` | {row['check']['errors']} error(s), {row['check']['warnings']} warning(s); NPU rules fired: "
        f"{len(row['npu_rules_fired'])} |",
    ]
    for r in row["refreshes"]:
        lines.append(
            f"| refresh onto {r['target']} | exit {r['exit']}: {r['regions']} regions ({r['conflicted_lines']} "
            f"conflicted lines) vs git merge-file --diff3 {r['git_merge_file']} ({r['git_merge_file_lines']} lines); "
            f"upstream statements lost outside a conflict: {len(r['lost'])}; {r['seconds']} s |"
        )
    lines.append(f"| `pq refresh` (the newest) | exit {row['newest']['exit']}: {row['newest']['said']} |")
    if "merge" in row:
        m = row["merge"]
        lines.append(
            f"| `pq merge {m['release']}` | exit {m['exit']}, "
            + ("byte for byte" if not m["differs"] else f"differs: {', '.join(m['differs'])}")
            + f"; {m['check'] or '(no check line)'}; {m['seconds']} s |"
        )
    lines += [
        f"| `pq build --wheel` | `{row['wheel']}`; imports of the series' modules left in the downstream's tree: "
        f"{len(row['wheel_in_tree'])} |",
        f"| lines naming the NPU queue in what pq printed ({row['commands']} commands) | {len(row['npu_words'])} |",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pair", nargs="?", choices=sorted(PAIRS), help="one of the pairs tried")
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    for option in ("source", "upstream-dist", "upstream-file", "upstream-class", "package", "out", "merge"):
        parser.add_argument(f"--{option}")
    parser.add_argument("--targets", help="upstream releases to refresh onto, NAME==VERSION,…")
    args = parser.parse_args(argv)
    if args.pair:
        pair = PAIRS[args.pair]
    else:
        given = [args.source, args.upstream_dist, args.upstream_file, args.upstream_class, args.package, args.out]
        if not all(given):
            parser.error("name a PAIR, or give --source and every option of the pair")
        pair = Pair(
            source=args.source,
            upstream_dist=args.upstream_dist,
            upstream_file=args.upstream_file,
            upstream_class=args.upstream_class,
            package=args.package,
            out=args.out,
            targets=tuple(t for t in (args.targets or "").split(",") if t),
            merge=args.merge or "",
        )
    work = args.keep or Path(tempfile.mkdtemp(prefix="pq-pair-queue-"))
    try:
        row = measure(work, pair)
    except StepError as exc:
        print(f"pair_queue: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return report(table(row), row, args.json, ok(row))


if __name__ == "__main__":
    sys.exit(main())
