"""The GPU queue end to end on the real releases: vllm-omni's GPU runners (``vllm_omni/worker/``) as a patch series on
vLLM's ``GPUModelRunner``, and the figures of issue 49's acceptance.

Usage::

    python bench/gpu_queue.py [--keep DIR] [--json OUT] [--source vllm-omni==0.24.0] [--targets 0.26.0,0.28.0,0.30.0]

Steps, each with the installed pq in a fresh project (``git init``):

1. ``pq adopt vllm-omni==0.24.0 --preset gpu``: the base is searched among vLLM's registry releases (there is no
   vLLM git history here); its name and score;
2. ``pq build``: the output folder against the release's ``vllm_omni/worker/``, byte for byte;
3. ``pq check --json -``: no rule of the NPU rule set (``patch_queue/checks/rules.toml``) fires;
4. for each target vllm-omni release X, ``pq refresh --no-stop --to vllm==V`` (V the vLLM release X goes with):
   its conflict regions against ``git merge-file --diff3`` on the same texts (per runner module: the module the
   series built on the old base, the old upstream projection, the new one), and the upstream statements dropped
   outside every conflict region (:func:`patch_queue.checks.upstream_kept.lost`); then ``pq abort``;
5. ``pq merge vllm-omni==0.26.0`` onto the adopted series: the output against that release's GPU runners, byte for
   byte (and what ``pq check`` says of them on the adopted base); then ``pq abort``;
6. ``pq refresh --to vllm==V`` (V: the vLLM of the merged release) for real: every conflict region resolved
   (``pq resolve --keep-patch``, to show the mechanics), ``pq continue`` to the end; then ``pq merge vllm-omni==0.26.0``
   onto the refreshed series, the way a maintainer takes both;
7. the project committed and pushed with its recorded resolutions to a bare repository; a fresh clone runs
   ``pq resolutions merge origin`` and ``pq reproduce``: ``patches/`` and the output folder byte for byte;
8. ``pq build --wheel`` in that clone: the wheel's name and its pinned requirements;
9. every line pq printed, scanned for a name of the NPU queue (vllm-ascend, NPU, npu_worker, torch-npu).

The Markdown table goes to stdout, progress to stderr.  Downloads are cached under ``PQ_CACHE``.  Exit 0 when every
figure meets its mark (byte for byte, no NPU rule, no statement lost, nothing naming the NPU queue).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from conflict_metrics import merge_file_regions  # noqa: E402

from patch_queue import presets  # noqa: E402
from patch_queue.checks import upstream_kept  # noqa: E402
from patch_queue.series.queue import QueueDir  # noqa: E402
from patch_queue.sources import vllm_release  # noqa: E402
from patch_queue.sources.archives import release_files  # noqa: E402

SOURCE = "vllm-omni==0.24.0"
TARGETS = ("0.26.0", "0.28.0", "0.30.0")  # the vllm-omni releases whose vLLM the series is refreshed onto
MERGED = "0.26.0"  # the vllm-omni release merged into the series
# a name of the NPU queue in what pq prints for the GPU queue
NPU_WORDS = re.compile(r"vllm[-_]ascend|\bNPU\b|npu_worker|torch[-_]npu|Ascend", re.IGNORECASE)
CONFLICT_AT = re.compile(r"^conflict: (\S+?):(\d+) ", re.MULTILINE)


class StepError(Exception):
    """A step of the run went wrong: the message says which and how."""


@dataclass
class Run:
    """What pq printed over the whole run, each command with its output."""

    env: dict[str, str]
    printed: list[tuple[str, str]] = field(default_factory=list)  # (command, stdout + stderr)

    def pq(self, cwd: Path, *args: str, ok: Sequence[int] = (0,)) -> tuple[int, str]:
        proc = subprocess.run(
            [sys.executable, "-m", "patch_queue", *args], cwd=cwd, capture_output=True, text=True, env=self.env
        )
        out = proc.stdout + proc.stderr
        self.printed.append(("pq " + " ".join(args), out))
        if proc.returncode not in ok:
            raise StepError(f"pq {' '.join(args)} exited {proc.returncode} in {cwd}:\n{out[-3000:]}")
        return proc.returncode, out


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StepError(f"git {' '.join(args)} exited {proc.returncode} in {cwd}: {proc.stderr.strip()[-400:]}")
    return proc.stdout


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def new_project(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    out = presets.GPU.out
    (path / ".gitignore").write_text(f"/patches/*.patch\n/{out}/\n/reports/\n/dist/\n", encoding="utf-8")
    git(path, "add", ".gitignore")
    git(path, "-c", "user.name=pq", "-c", "user.email=pq@localhost", "commit", "-qm", "project")
    return path


def release_runners(name: str, version: str) -> dict[str, bytes]:
    """The GPU runner modules of a downstream release, from the corpus when it keeps them (unchanged files of the
    release's wheel), else from the registry."""
    corpus = os.environ.get("PQ_CORPUS")
    folder = Path(corpus) / f"{name}-{version}" / "gpu" if corpus else None
    if folder is not None and folder.is_dir():
        return {p.name: p.read_bytes() for p in sorted(folder.glob("*.py"))}
    prefix = presets.GPU.package + "/"
    files = release_files(name, version, prefix)
    return {
        k.removeprefix(prefix): v for k, v in files.items() if "/" not in k.removeprefix(prefix) and k.endswith(".py")
    }


def folder_modules(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.py"))}


def differing(a: dict[str, bytes], b: dict[str, bytes]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def npu_rule_ids() -> set[str]:
    rules = tomllib.loads((REPO / "patch_queue" / "checks" / presets.RULE_FILES["npu"]).read_text(encoding="utf-8"))
    return {str(rule["id"]) for rule in rules.get("rule", [])}


def vllm_of(omni: str) -> str:
    return vllm_release.vllm_release(presets.GPU.downstream_dist, omni).version


def measured_refresh(run: Run, project: Path, target: str, folder: str = presets.GPU.out) -> dict[str, Any]:
    """``pq refresh --no-stop --to target``, its regions against git merge-file on the same texts, the upstream
    statements lost outside a conflict; then ``pq abort``.  ``folder``: the queue's output folder."""
    report = project / "reports" / "refresh.json"
    report.parent.mkdir(exist_ok=True)
    started = time.perf_counter()
    code, out = run.pq(project, "refresh", "--no-stop", "--to", target, "--report", str(report), ok=(0, 1, 3))
    seconds = time.perf_counter() - started
    data = json.loads(report.read_text(encoding="utf-8"))
    pending = git(project, "for-each-ref", "refs/pq/refresh/base").strip()
    old_base = git(project, "rev-parse", "refs/pq/base").strip()
    old_top = git(project, "rev-parse", "refs/pq/top").strip()
    new_base = "refs/pq/refresh/base" if pending else "refs/pq/base"
    lost: list[upstream_kept.Lost] = []
    plain = plain_lines = 0
    out_dir = project / folder
    for module in QueueDir(project / "patches").load_queue().modules:
        if not module.upstream:
            continue
        path = f".pq-upstream/{module.upstream}"
        built = out_dir / module.path
        lost += upstream_kept.lost(
            git(project, "show", f"{old_base}:{path}"),
            git(project, "show", f"{new_base}:{path}"),
            built.read_text(encoding="utf-8") if built.is_file() else "",
            module.symbols,
            file=module.path,
        )
        base, theirs, ours = (git(project, "show", f"{ref}:{module.path}") for ref in (old_base, new_base, old_top))
        regions, merged = merge_file_regions(base, ours, theirs)
        plain += regions
        plain_lines += _conflicted_lines(merged)
    pq_lines = sum(_conflicted_lines((out_dir / f).read_text(encoding="utf-8")) for f in _files_with_markers(out_dir))
    if code != 0 or pending:
        run.pq(project, "abort")
    return {
        "target": target,
        "exit": code,
        "regions": len(data["conflicts"]),
        "conflicted_lines": pq_lines,
        "git_merge_file": plain,
        "git_merge_file_lines": plain_lines,
        "lost": [f"{x.file} {x.symbol} (upstream line {x.line}): {x.statement}" for x in sorted(lost)],
        "seconds": round(seconds, 2),
        "culprits": next((line for line in out.splitlines() if line.startswith("culprits:")), ""),
    }


def _files_with_markers(folder: Path) -> list[str]:
    return [p.name for p in sorted(folder.glob("*.py")) if "\n<<<<<<< " in "\n" + p.read_text(encoding="utf-8")]


def _conflicted_lines(text: str) -> int:
    """The lines inside conflict regions (markers included)."""
    inside, count = False, 0
    for line in text.splitlines():
        if line.startswith("<<<<<<< "):
            inside = True
        if inside:
            count += 1
        if line.startswith(">>>>>>> "):
            inside = False
    return count


def resolve_all(run: Run, project: Path) -> int:
    """Resolve every conflict region to the patch's side, one `pq resolve` at a time; how many commands it took."""
    resolved = 0
    while True:
        _code, status = run.pq(project, "status", ok=(0, 1, 3))
        found = CONFLICT_AT.search(status)
        if found is None:
            return resolved
        run.pq(project, "resolve", "--keep-patch", f"{found[1]}:{found[2]}")
        resolved += 1
        if resolved > 200:
            raise StepError("more than 200 `pq resolve` commands: the regions do not go")


def measure(work: Path, source: str = SOURCE, targets: Sequence[str] = TARGETS, merged: str = MERGED) -> dict[str, Any]:
    run = Run(dict(os.environ))  # PQ_UPSTREAM_GIT, where set, names the NPU queue's history: the GPU queue has none
    row: dict[str, Any] = {"source": source}
    project = new_project(work / "gpu")
    name, _sep, version = source.partition("==")

    say(f"== pq adopt {source} --preset gpu")
    started = time.perf_counter()
    _code, out = run.pq(project, "adopt", source, "--preset", "gpu")
    row["adopt_seconds"] = round(time.perf_counter() - started, 2)
    base = next((line for line in out.splitlines() if line.startswith("upstream base: ")), "")
    found = re.match(r"upstream base: (.+?), score (\d+)/(\d+) .*best of (\d+) (\w+), (\d+) tied(?: \(([^;]*);)?", base)
    if found is None:
        raise StepError(f"pq adopt printed no upstream base:\n{out[-2000:]}")
    row["base"] = {
        "label": found[1],
        "matched": int(found[2]),
        "total": int(found[3]),
        "searched": int(found[4]),
        "searched_kind": found[5],
        "tied": int(found[6]),
        "tied_with": found[7].split(", ") if found[7] else [],
    }
    row["patches"] = len(list((project / "patches").glob("*.patch")))
    row["carried"] = sum(1 for line in out.splitlines() if line.startswith("carried: "))

    say("== pq build")
    run.pq(project, "build")
    row["build_differs"] = differing(folder_modules(project / presets.GPU.out), release_runners(name, version))

    say("== pq check")
    _code, out = run.pq(project, "check", "--json", "-", ok=(0, 1))
    checked = json.loads(out[: out.rindex("}") + 1])
    row["check"] = {"errors": checked["errors"], "warnings": checked["warnings"], "counts": checked["counts"]}
    row["npu_rules_fired"] = sorted(set(checked["counts"]) & npu_rule_ids())

    git(project, "add", "-A")
    git(project, "-c", "user.name=pq", "-c", "user.email=pq@localhost", "commit", "-qm", f"pq adopt {source}")
    row["refreshes"] = []
    for omni in targets:
        target = f"vllm=={vllm_of(omni)}"
        say(f"== pq refresh --no-stop --to {target} (the vLLM of vllm-omni {omni}), then pq abort")
        measured = measured_refresh(run, project, target)
        measured["omni"] = omni
        row["refreshes"].append(measured)

    say("== pq refresh --no-stop (the default: the newest vLLM release)")
    code, out = run.pq(project, "refresh", "--no-stop", ok=(0, 1, 2, 3))
    newest: dict[str, Any] = {"exit": code, "said": out.strip().splitlines()[-1] if out.strip() else ""}
    suggested = re.search(r"`pq refresh --to (\S+)`", newest["said"])
    if git(project, "for-each-ref", "refs/pq/refresh/base").strip():
        run.pq(project, "abort")
    if suggested is not None:
        say(f"== pq refresh --no-stop --to {suggested[1]} (the newest release with the upstream file), then pq abort")
        newest["refresh"] = measured_refresh(run, project, suggested[1])
    row["newest"] = newest

    say(f"== pq merge vllm-omni=={merged} onto the adopted series (on {row['base']['label']}), then pq abort")
    code, out = run.pq(project, "merge", f"{name}=={merged}", ok=(0, 1))
    row["merge_differs"] = differing(folder_modules(project / presets.GPU.out), release_runners(name, merged))
    row["merge_on_base"] = {"exit": code, "check": next((x for x in out.splitlines() if x.startswith("pq check:")), "")}
    if git(project, "for-each-ref", "refs/pq/refresh/base").strip():  # pending over pq check's errors
        run.pq(project, "abort")

    target = f"vllm=={vllm_of(merged)}"
    say(f"== pq refresh --to {target}, every region resolved, pq continue to the end")
    code, out = run.pq(project, "refresh", "--to", target, ok=(0, 1, 3))
    resolves = continues = 0
    while code == 3:
        resolves += resolve_all(run, project)
        code, out = run.pq(project, "continue", ok=(0, 1, 3))
        continues += 1
        if continues > 50:
            raise StepError("more than 50 `pq continue`: the refresh does not end")
    row["resolved"] = {"target": target, "resolve_commands": resolves, "continues": continues, "exit": code}
    say(f"== pq merge vllm-omni=={merged} onto the refreshed series")
    code, out = run.pq(project, "merge", f"{name}=={merged}", ok=(0, 1, 3))
    row["merge_refreshed"] = {
        "exit": code,
        "said": next((x for x in out.splitlines() if x.startswith(("merged ", "pq: error"))), ""),
    }
    git(project, "add", "-A")
    git(project, "-c", "user.name=pq", "-c", "user.email=pq@localhost", "commit", "-qm", f"pq refresh --to {target}")

    say("== push, fresh clone, pq resolutions merge origin, pq reproduce")
    origin = work / "origin.git"
    shutil.rmtree(origin, ignore_errors=True)
    git(work, "init", "-q", "--bare", "-b", "main", str(origin))
    git(project, "push", "-q", str(origin), "HEAD:main", "refs/pq/resolutions:refs/pq/resolutions")
    clone = work / "clone"
    shutil.rmtree(clone, ignore_errors=True)
    git(work, "clone", "-q", str(origin), str(clone))
    run.pq(clone, "resolutions", "merge", "origin")
    run.pq(clone, "reproduce")
    row["reproduce_differs"] = differing(
        {f"patches/{p.name}": p.read_bytes() for p in sorted((project / "patches").iterdir())}
        | {f"out/{k}": v for k, v in folder_modules(project / presets.GPU.out).items()},
        {f"patches/{p.name}": p.read_bytes() for p in sorted((clone / "patches").iterdir())}
        | {f"out/{k}": v for k, v in folder_modules(clone / presets.GPU.out).items()},
    )

    say("== pq build --wheel (in the clone)")
    _code, out = run.pq(clone, "build", "--wheel")
    wheel = clone / next(line for line in out.splitlines() if line.endswith(".whl"))
    with zipfile.ZipFile(wheel) as zf:
        meta = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    headers = [line.partition(": ") for line in meta.split("\n\n", 1)[0].splitlines()]
    row["wheel"] = {
        "file": wheel.name,
        "name": next(v for k, _s, v in headers if k == "Name"),
        "requires": [v for k, _s, v in headers if k == "Requires-Dist"],
        "summary": next(v for k, _s, v in headers if k == "Summary"),
    }

    row["npu_words"] = sorted(
        {
            f"{cmd}: {line.strip()[:160]}"
            for cmd, text in run.printed
            for line in text.splitlines()
            if NPU_WORDS.search(line)
        }
    )
    row["commands"] = len(run.printed)
    return row


def ok(row: dict[str, Any]) -> bool:
    return not (
        row["build_differs"]
        or row["npu_rules_fired"]
        or row["merge_differs"]
        or row["reproduce_differs"]
        or row["npu_words"]
        or any(r["lost"] for r in row["refreshes"] + [row["newest"].get("refresh") or {"lost": []}])
        or row["resolved"]["exit"] != 0
        or row["merge_refreshed"]["exit"] != 0
        or any(r.startswith(("torch-npu", "torch_npu")) for r in row["wheel"]["requires"])
    )


def table(row: dict[str, Any], *, timings: bool = True) -> str:
    """The figures as a Markdown table (``timings``: with the seconds each step took, which vary from run to run;
    docs/gpu-queue.md shows it without them)."""
    b = row["base"]

    def took(seconds: float) -> str:
        return f"; {seconds} s" if timings else ""

    lines = [
        f"GPU queue, {row['source']}",
        "",
        "| figure | measured |",
        "|---|---|",
        f"| base among vLLM's releases | {b['label']}: {b['matched']}/{b['total']} lines of the carried methods "
        f"({100.0 * b['matched'] / max(b['total'], 1):.1f}%), best of {b['searched']} {b['searched_kind']}, "
        f"{b['tied']} tied"
        + (
            f" ({b['tied_with'][-1]} to {b['tied_with'][0]}; a tie goes to the newest)"
            if len(b["tied_with"]) > 1
            else ""
        )
        + " |",
        f"| adopted | {row['patches']} patches, {row['carried']} carried methods{took(row['adopt_seconds'])} |",
        "| `pq build` = the release's `vllm_omni/worker/` | "
        + ("byte for byte" if not row["build_differs"] else f"differs: {', '.join(row['build_differs'])}")
        + " |",
        f"| `pq check` | {row['check']['errors']} error(s), {row['check']['warnings']} warning(s) "
        f"({', '.join(f'{k} {v}' for k, v in row['check']['counts'].items()) or 'none'}); NPU rules fired: "
        f"{len(row['npu_rules_fired'])} |",
    ]
    for r in row["refreshes"]:
        lines.append(
            f"| refresh onto {r['target']} (vllm-omni {r['omni']}) | {r['regions']} regions "
            f"({r['conflicted_lines']} conflicted lines) vs git merge-file --diff3 {r['git_merge_file']} "
            f"({r['git_merge_file_lines']} lines); upstream statements lost outside a conflict: {len(r['lost'])}"
            f"{took(r['seconds'])} |"
        )
    newest = row["newest"]
    lines.append(f"| `pq refresh` (the newest vLLM) | exit {newest['exit']}: {newest['said']} |")
    if "refresh" in newest:
        r = newest["refresh"]
        lines.append(
            f"| refresh onto {r['target']} (the newest with the file) | {r['regions']} regions "
            f"({r['conflicted_lines']} conflicted lines) vs git merge-file --diff3 {r['git_merge_file']} "
            f"({r['git_merge_file_lines']} lines); upstream statements lost outside a conflict: {len(r['lost'])}"
            f"{took(r['seconds'])} |"
        )
    culprits = next((r["culprits"] for r in row["refreshes"] if r["culprits"]), "")
    if culprits:
        lines.append(f"| culprits | {culprits.removeprefix('culprits: ')} |")
    lines += [
        f"| `pq merge vllm-omni=={MERGED}` = its GPU runners | "
        + ("byte for byte" if not row["merge_differs"] else f"differs: {', '.join(row['merge_differs'])}")
        + " |",
        f"| its `pq check` on the adopted base | exit {row['merge_on_base']['exit']}: "
        f"{row['merge_on_base']['check'] or '(none)'} |",
        f"| refresh onto {row['resolved']['target']}, resolved and continued | {row['resolved']['resolve_commands']} "
        f"`pq resolve`, {row['resolved']['continues']} `pq continue`, exit {row['resolved']['exit']} |",
        f"| then `pq merge vllm-omni=={MERGED}` | exit {row['merge_refreshed']['exit']}: "
        f"{row['merge_refreshed']['said']} |",
        "| fresh clone: `pq resolutions merge origin && pq reproduce` | "
        + ("byte for byte" if not row["reproduce_differs"] else f"differs: {', '.join(row['reproduce_differs'])}")
        + " |",
        f"| `pq build --wheel` | `{row['wheel']['file']}`: {', '.join(f'`{r}`' for r in row['wheel']['requires'])} |",
        f"| lines naming the NPU queue in what pq printed ({row['commands']} commands) | {len(row['npu_words'])} |",
    ]
    return "\n".join(lines)


def report(text: str, row: dict[str, Any], json_out: Path | None, passed: bool) -> int:
    """Print the table ``text`` and, to stderr, the lines naming the NPU queue and the statements lost; write ``row``
    as JSON to ``json_out``; the exit code (1 unless ``passed``)."""
    print(text)
    for line in row["npu_words"]:
        say(f"  names the NPU queue: {line}")
    for r in row["refreshes"]:
        for lost in r["lost"]:
            say(f"  lost ({r['target']}): {lost}")
    if json_out is not None:
        json_out.write_text(json.dumps(row, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0 if passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    parser.add_argument("--source", default=SOURCE, help="the adopted vllm-omni release")
    parser.add_argument("--targets", default=",".join(TARGETS), help="vllm-omni releases whose vLLM to refresh onto")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="pq-gpu-queue-"))
    try:
        row = measure(work, args.source, [t for t in args.targets.split(",") if t])
    except StepError as exc:
        print(f"gpu_queue: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return report(table(row), row, args.json, ok(row))


if __name__ == "__main__":
    sys.exit(main())
