"""Issue 32's measure: a newer vllm-omni release's NPU runners merged into a series refreshed since.

Usage::

    python bench/merge_saved.py [--old 0.24.0] [--new 0.30.0] [--out FILE.md] [--json FILE.json] [--keep DIR]

For the pair OLD -> NEW (default 0.24.0 -> 0.30.0):

1. *refresh alone*: ``pq adopt vllm-omni==OLD`` (the series then names the release it took in); the upstream
   commit NEW's runners match is the ``[upstream]`` pin of ``pq adopt vllm-omni==NEW`` in a second project;
   ``pq refresh --no-stop --to <it>``; its conflicts resolved as ``bench/bench.py``'s section 5 does (every
   region to its patch side, ``pq continue``, ``--accept-errors`` only if pq check's errors block); work saved
   of the refreshed ``npu_worker/`` against the maintainers' NEW (``bench.work_saved``).
2. *git merge-file*: ``git merge-file -p --diff3`` per module (``conflict_metrics.merge_file_regions``: its
   markers say ``omni`` for ours, the refreshed ``npu_worker/``, ``base`` for OLD's runners and ``upstream``
   for theirs, NEW's runners); a module only NEW has is taken as it is; every region resolved to theirs.
3. *pq merge*: in a copy of the refreshed project, ``pq merge vllm-omni==NEW --report merge.json``; its markers
   (series side first, NEW's last) checked, every region resolved with ``pq resolve --keep-patch`` (the bottom
   region of a file first, the files read again after each), then ``pq continue --accept-errors``.
4. *statements*: those the maintainers added between OLD and NEW (:func:`added_statements`) missing from each
   output before it is resolved (:func:`missing`): present when the output has it outside conflict regions
   or on NEW's side of one.

The runner sets are the corpus folders ``$PQ_CORPUS/vllm-omni-X/npu`` (the wheels' files unchanged; the script
says whether ``pq adopt`` wrote the same). The Markdown (stdout and ``--out``) holds no date or timing.
Environment as for ``bench/bench.py``. Exit 1 when a method could not be measured.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from conflict_metrics import code_multiset, count_regions, merge_file_regions, saved, squash, take_side
from conflict_table import corpus_dir, say
from upstream_kept import decisions

from bench import RUNNER, Json, StepError, Upgrade, git, percent, pq, read_folder, table, work_saved
from patch_queue import presets
from patch_queue.merge import markers, statements
from patch_queue.series.queue import Queue, QueueDir
from patch_queue.sources.snapshot import resolve_upstream, upstream_git_location

Folder = Mapping[str, str]
MODULE = "<module>"

# -- statements -------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Statement:
    file: str  # the runner module
    function: str  # the enclosing function (Class.method, outer.inner), a class body, or <module>
    text: str  # normalised: statements.head (ast.unparse; a compound statement by its header)
    line: int  # 1-based, in the newer release's module
    first: str  # its first source line, stripped
    last: int = 0  # its last line (a compound statement: of its header)


def _header(node: ast.excepthandler | ast.match_case) -> str:
    if isinstance(node, ast.ExceptHandler):
        caught = f" {ast.unparse(node.type)}" if node.type is not None else ""
        return f"except{caught}{f' as {node.name}' if node.name else ''}:"
    guard = f" if {ast.unparse(node.guard)}" if node.guard is not None else ""
    return f"case {ast.unparse(node.pattern)}{guard}:"


def _span(node: ast.AST) -> tuple[int, int]:
    """(first, last line) of a statement; a compound one's header ends before its body."""
    first = int(getattr(node, "lineno", 0) or getattr(getattr(node, "pattern", None), "lineno", 0))
    body = getattr(node, "body", None)
    if isinstance(body, list) and body:
        return first, max(first, int(getattr(body[0], "lineno", first)) - 1)
    return first, int(getattr(node, "end_lineno", None) or first)


def _child(scope: str, name: str) -> str:
    return name if scope == MODULE else f"{scope}.{name}"


def scoped(tree: ast.Module) -> Iterator[tuple[str, str, int, int]]:
    """(enclosing function, normalised text, first, last line) of every statement of ``tree``, nested ones too;
    an ``except``/``case`` clause counts as a statement by its header."""

    def walk(body: Sequence[ast.AST], scope: str) -> Iterator[tuple[str, str, int, int]]:
        for node in body:
            if isinstance(node, ast.excepthandler | ast.match_case):
                yield scope, _header(node), *_span(node)
                yield from walk(node.body, scope)
                continue
            assert isinstance(node, ast.stmt)
            yield scope, statements.head(node), *_span(node)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield from walk(node.body, _child(scope, node.name))
                continue
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                yield from walk(getattr(node, field, None) or [], scope)

    yield from walk(tree.body, MODULE)


def scope_lines(text: str) -> dict[str, set[str]]:
    """Each enclosing function's lines (whitespace squashed, nested functions' included; <module>: all of
    them); a text that does not parse: only <module>."""
    lines = text.splitlines()
    out = {MODULE: {squash(line) for line in lines}}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return out

    def walk(body: Sequence[ast.stmt], scope: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = _child(scope, node.name)
                out.setdefault(name, set()).update(squash(x) for x in lines[node.lineno - 1 : node.end_lineno])
                walk(node.body, name)

    walk(tree.body, MODULE)
    return out


def added_statements(old: Folder, new: Folder) -> list[Statement]:
    """The statements of ``new``'s modules whose normalised text ``old``'s same module has nowhere in the same
    enclosing function (each (function, text) once; a module ``old`` lacks: all of its statements)."""
    out: list[Statement] = []
    for name in sorted(new):
        had: dict[str, set[str]] = {}
        if name in old:
            for scope, text, _first, _last in scoped(ast.parse(old[name])):
                had.setdefault(scope, set()).add(text)
        lines = new[name].splitlines()
        seen: set[tuple[str, str]] = set()
        for scope, text, line, last in scoped(ast.parse(new[name])):
            if text in had.get(scope, set()) or (scope, text) in seen:
                continue
            seen.add((scope, text))
            out.append(Statement(name, scope, text, line, lines[line - 1].strip() if line else "", last))
    return out


def release_view(text: str) -> str:
    """The output with every diff3 region taken to its last side (NEW's: ``>>>>>>>``)."""
    return markers.one_side(text, "theirs")[0]


def missing(wanted: Sequence[Statement], output: Folder) -> tuple[list[Statement], list[str]]:
    """(the ``wanted`` statements the output lacks outside conflict regions and on the release's side of them,
    the modules that did not parse so read by each statement's whitespace-squashed first line instead)."""
    held: dict[str, dict[str, set[str]] | set[str]] = {}
    fallback: list[str] = []
    for name, text in output.items():
        view = release_view(text)
        try:
            found: dict[str, set[str]] = {}
            for scope, stmt, _first, _last in scoped(ast.parse(view)):
                found.setdefault(scope, set()).add(stmt)
            held[name] = found
        except SyntaxError:
            held[name] = {squash(line) for line in view.splitlines()}
            fallback.append(name)
    lost: list[Statement] = []
    for s in wanted:
        got = held.get(s.file)
        if isinstance(got, dict):
            ok = s.text in got.get(s.function, set())
        else:
            ok = got is not None and squash(s.first) in got
        if not ok:
            lost.append(s)
    return lost, sorted(fallback)


def new_lines(s: Statement, old: Folder, new: Folder) -> list[str]:
    """The code lines of ``s`` (whitespace squashed) that ``old``'s same enclosing function has none of."""
    had = scope_lines(old.get(s.file, "")).get(s.function, set())
    span = new[s.file].splitlines()[s.line - 1 : s.last or s.line]
    return [x for line in span if (x := squash(line)) and not x.startswith("#") and x not in had]


def held_merged(s: Statement, old: Folder, new: Folder, output: Folder) -> bool:
    """Whether a missing statement is there merged with the series' edits: every line of it that the
    release wrote new is a line of the output's same function (the release's side of its regions)."""
    wrote = new_lines(s, old, new)
    if not wrote or s.file not in output:
        return False
    lines = scope_lines(release_view(output[s.file]))
    return all(x in lines.get(s.function, lines[MODULE]) for x in wrote)


def flags_on(s: Statement, old: Folder, new: Folder, report: Json) -> list[str]:
    """The report's flags of ``s``'s function whose resolution holds a line the release wrote new in ``s``."""
    wrote = set(new_lines(s, old, new))
    return sorted(
        f"{f.get('kind')} at line {f.get('line')}"
        for f in report.get("flags", [])
        if f.get("symbol") == s.function and wrote & {squash(x) for x in str(f.get("resolution") or "").splitlines()}
    )


# -- the three methods ---------------------------------------------------------------------------


def adopt_release(project: Path, version: str) -> Queue:
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    git(project, "init", "-q")
    pq(project, "adopt", f"vllm-omni=={version}")
    return QueueDir(project / "patches").load_queue()


def pending(project: Path) -> bool:
    return (project / ".git" / "pq" / "refresh.json").is_file()


def flag_kinds(report: Json) -> dict[str, int]:
    return dict(sorted(Counter(str(f.get("kind")) for f in report.get("flags", [])).items()))


def refresh(project: Path, target: str, work: Path) -> Json:
    """``pq refresh --no-stop --to target`` and bench's resolution: every region to its patch side, continue."""
    report_path = work / "refresh.json"
    code = pq(project, "refresh", "--no-stop", "--to", target, "--report", str(report_path), ok=(0, 1, 3))[0]
    report = json.loads(report_path.read_text(encoding="utf-8"))
    row: Json = {
        "exit": code,
        "regions": len(report.get("conflicts", [])),
        "decisions": decisions(report.get("conflicts", [])),
        "flags": flag_kinds(report),
        "resolution": "none needed (the refresh finished)",
    }
    if pending(project):
        for path in sorted((project / "npu_worker").glob("*.py")):
            path.write_text(take_side(path.read_text(encoding="utf-8"), "patch"), encoding="utf-8")
        row["resolution"] = (
            "every region to its patch side (conflict_metrics.take_side, as bench.py's section 5), then `pq continue`"
        )
        if pq(project, "continue", ok=(0, 1))[0] != 0 or pending(project):
            pq(project, "continue", "--accept-errors")
            row["resolution"] += " `--accept-errors` (pq check's errors blocked it)"
        row["resolution"] += " (exit 0)"
    return row


def merge_file(base: Folder, ours: Folder, theirs: Folder) -> dict[str, tuple[int, str]]:
    """Per module: (conflict regions, merged text) of ``git merge-file -p --diff3 ours base theirs``; a module
    only one side has (never merged) as it is; one theirs dropped and ours did not change, dropped."""
    out: dict[str, tuple[int, str]] = {}
    for name in sorted(base.keys() | ours.keys() | theirs.keys()):
        b, o, t = base.get(name), ours.get(name), theirs.get(name)
        if b is None and (o is None or t is None):
            out[name] = (0, o if t is None else t)  # type: ignore[assignment]
        elif t is None and o == b:
            continue
        else:
            out[name] = merge_file_regions(b or "", o or "", t or "")
    return out


def write_folder(path: Path, folder: Folder) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    for name, text in folder.items():
        (path / name).write_text(text, encoding="utf-8")
    return path


_MARKER = re.compile(r"^(<{7}|\|{7}|={7}|>{7})(?: |$)")


def marker_problems(name: str, text: str) -> list[str]:
    """Each diff3 region must be ``<<<<<<<``, ``|||||||``, ``=======``, ``>>>>>>>`` in that order."""
    problems: list[str] = []
    order = ("<" * 7, "|" * 7, "=" * 7, ">" * 7)
    at, want = 0, 0
    for number, line in enumerate(text.splitlines(), 1):
        m = _MARKER.match(line)
        if not m:
            continue
        if m[1] != order[want]:  # said, then read on from the marker found
            problems.append(f"{name}:{number}: `{m[1]}` where `{order[want]}` was due (region from line {at})")
        at = number if m[1] == order[0] else at
        want = (order.index(m[1]) + 1) % 4
    if want:
        problems.append(f"{name}:{at}: region not closed")
    return problems


def resolve_all(project: Path, regions: int) -> int:
    """``pq resolve --keep-patch`` (the last side) of the bottom region of the first module that has one, the modules
    read again after each (a resolve may take linked regions too), until none is left: how many resolves."""
    steps = 0
    while True:
        now = read_folder(project / "npu_worker")
        todo = [(n, found) for n, t in now.items() if (found := markers.regions(t))]
        if not todo:
            return steps
        name, found = todo[0]
        if steps >= regions:
            raise StepError(f"pq resolve: {sum(len(r) for _n, r in todo)} region(s) left after {steps} resolves")
        steps += 1
        pq(project, "resolve", "--keep-patch", f"npu_worker/{name}:{found[-1].first}")


def pq_merge(project: Path, spec: str, work: Path) -> tuple[Json, dict[str, str], Json]:
    """``pq merge SPEC`` in ``project``, its regions resolved to the release's side: (row, output before the
    resolution, the report)."""
    report_path = work / "merge.json"
    code, _s, out = pq(project, "merge", spec, "--report", str(report_path), ok=(0, 1, 3))
    report = json.loads(report_path.read_text(encoding="utf-8"))
    shutil.copyfile(report_path, work / "merge-before-continue.json")  # pq continue rewrites the report
    before = read_folder(project / "npu_worker")
    conflicts = report.get("conflicts", [])
    row: Json = {
        "exit": code,
        "regions": sum(count_regions(t) for t in before.values()),
        "regions_by_file": {n: k for n, t in before.items() if (k := count_regions(t))},
        "reported": len(conflicts),
        "decisions": decisions(conflicts),
        "flags": flag_kinds(report),
        "problems": [p for n, t in before.items() for p in marker_problems(n, t)],
        "stdout_tail": out.strip().splitlines()[-3:],
    }
    for c in conflicts:  # each conflict of the report names a line of a region in the output
        text = before.get(Path(str(c.get("file", ""))).name, "")
        if markers.region_at(text, int(c.get("line") or 0)) is None:
            row["problems"].append(f"report: conflict at {c.get('file')}:{c.get('line')} is on no region")
    row["resolves"] = resolve_all(project, row["regions"])
    resolved = read_folder(project / "npu_worker")
    write_folder(work / "pq-merge-markers", before)
    write_folder(work / "pq-merge-resolved", resolved)
    row["resolve_differs"] = sorted(
        n for n in before.keys() | resolved.keys() if release_view(before.get(n, "")) != resolved.get(n, "")
    )
    row["continue"] = "not needed"
    if code != 0 or pending(project):
        row["continue"] = f"exit {pq(project, 'continue', '--accept-errors', ok=(0, 1, 3))[0]}"
    return row, before, report


# -- the measurement -----------------------------------------------------------------------------


def described(
    lost: Sequence[Statement], old: Folder, new: Folder, output: Folder, report: Json | None = None
) -> list[Json]:
    """The missing statements as JSON, each with whether it is there merged with the series' edits
    (:func:`held_merged`) and the report's flags on it (:func:`flags_on`)."""
    return [
        asdict(s)
        | {"held_merged": held_merged(s, old, new, output), "flags": flags_on(s, old, new, report) if report else []}
        for s in lost
    ]


def saved_of(w: Json) -> Json:
    return {"d_old": w["d_old"], "d": w["d_pq"], "saved": saved(w["d_pq"], w["d_old"]), "split": w["split"]}


def duplicated(output: Folder, ours: Folder, theirs: Folder) -> list[Json]:
    """Code lines (as work saved reads them) the resolved output holds more often than the series and the
    release each do: what the merge doubled (module, line, how many more)."""
    out: list[Json] = []
    for name in sorted(output):
        got = code_multiset(output[name])
        most = code_multiset(ours.get(name, "")) | code_multiset(theirs.get(name, ""))
        out += [{"file": name, "line": line, "extra": n} for line, n in sorted((got - most).items())]
    return out


def measure(up: Upgrade, corpus: Path, work: Path, location: str) -> Json:
    assert up.new is not None
    old_npu = read_folder(corpus / f"vllm-omni-{up.old}" / "npu")
    new_npu = read_folder(corpus / f"vllm-omni-{up.new}" / "npu")
    data: Json = {"old": up.old, "new": up.new, "methods": {}, "git": git(work, "--version").strip()}
    say(f"== adopt vllm-omni=={up.old}, vllm-omni=={up.new}")
    project = work / "refreshed"
    queue = adopt_release(project, up.old)
    data["adopted_same"] = {up.old: read_folder(project / "npu_worker") == old_npu}
    new_queue = adopt_release(work / "new", up.new)
    data["adopted_same"][up.new] = read_folder(work / "new" / "npu_worker") == new_npu
    target = new_queue.upstream.public_commit or new_queue.upstream.pin
    data["old_base"], data["target"] = queue.upstream.label, new_queue.upstream.label
    upstream_text = resolve_upstream(target, upstream_git=location, queue=presets.NPU).read(RUNNER).decode("utf-8")

    say(f"== pq refresh --to {target}")
    data["refresh"] = refresh(project, target, work)
    refreshed = read_folder(project / "npu_worker")
    wanted = added_statements(old_npu, new_npu)
    data["added"] = [asdict(s) for s in wanted]
    lost, fallback = missing(wanted, refreshed)
    data["methods"]["refresh alone"] = {
        "regions": data["refresh"]["regions"],  # the refresh's own, resolved to the patch side
        **saved_of(work_saved(up, corpus, project / "npu_worker", upstream_text)),
        "missing": described(lost, old_npu, new_npu, refreshed),
        "unparsed": fallback,
    }
    merge_copy = work / "merged"
    shutil.rmtree(merge_copy, ignore_errors=True)
    shutil.copytree(project, merge_copy, symlinks=True)

    say("== git merge-file per module")
    merged = merge_file(old_npu, refreshed, new_npu)
    write_folder(work / "merge-file-markers", {n: t for n, (_k, t) in merged.items()})
    resolved = write_folder(work / "merge-file", {n: release_view(t) for n, (_k, t) in merged.items()})
    lost, fallback = missing(wanted, {n: t for n, (_k, t) in merged.items()})
    data["methods"]["git merge-file"] = {
        "regions": sum(k for k, _t in merged.values()),
        "regions_by_file": {n: k for n, (k, _t) in merged.items() if k},
        **saved_of(work_saved(up, corpus, resolved, upstream_text)),
        "missing": described(lost, old_npu, new_npu, {n: t for n, (_k, t) in merged.items()}),
        "unparsed": fallback,
        "doubled": duplicated(read_folder(resolved), refreshed, new_npu),
    }

    say(f"== pq merge vllm-omni=={up.new}")
    try:
        pq(merge_copy, "merge", "--help")
    except StepError:
        data["methods"]["pq merge"] = {"error": "`pq merge` is not available (`pq merge --help` fails)"}
        return data
    try:
        row, before, report = pq_merge(merge_copy, f"vllm-omni=={up.new}", work)
        lost, fallback = missing(wanted, before)
        after = read_folder(merge_copy / "npu_worker")
        row |= saved_of(work_saved(up, corpus, merge_copy / "npu_worker", upstream_text))
        row["missing"] = described(lost, old_npu, new_npu, before, report)
        row["missing_after"] = len(missing(wanted, after)[0])
        row["unparsed"] = fallback
        row["doubled"] = duplicated(after, refreshed, new_npu)
        resolved_only = work_saved(up, corpus, work / "pq-merge-resolved", upstream_text)
        row["saved_before_continue"] = saved_of(resolved_only)["saved"]
        data["methods"]["pq merge"] = row
    except (StepError, OSError, ValueError, KeyError) as exc:
        data["methods"]["pq merge"] = {"error": str(exc)}
    return data


def render(data: Json) -> str:
    old, new = data["old"], data["new"]
    methods: dict[str, Json] = data["methods"]
    ref = data["refresh"]
    md = [
        f"# Merging vllm-omni {new}'s NPU runners into {old}'s refreshed series",
        "",
        f"- Series: `pq adopt vllm-omni=={old}` (upstream {data['old_base']});"
        f" the upstream commit {new}'s runners match: {data['target']} (`pq adopt vllm-omni=={new}`'s pin).",
        "- `pq adopt` wrote the corpus runners unchanged: "
        + ", ".join(f"{v} {'yes' if same else '**no**'}" for v, same in data["adopted_same"].items())
        + ".",
        f"- `pq refresh --no-stop --to {data['target'].split()[-1]}`: exit {ref['exit']}, {ref['regions']} conflict"
        f" region(s) ({ref['decisions']} decisions), flags {kinds(ref['flags'])}; resolved: {ref['resolution']}"
        " (the table's *refresh alone*: these regions, and its output).",
        f"- Three-way: ancestor {old}'s runners, ours the refreshed `npu_worker/`, theirs {new}'s runners; every"
        f" conflict region resolved to {new}'s side before work saved is measured. git merge-file: {data['git']},"
        " `-p --diff3`, per module.",
        f"- *Work saved* = 1 − d(output, {new}) / d({old}, {new}) (bench.py's section 5 measure: code lines as"
        f" multisets per module); *statements missing*: of the {len(data['added'])} statements the maintainers"
        f" added between {old} and {new} (per module and enclosing function, `ast.unparse`, a compound one by its"
        " header), those the output before resolving holds neither outside conflict regions nor on"
        f" {new}'s side of one.",
        "",
    ]
    rows = []
    for name, m in methods.items():
        if m.get("error"):
            rows.append([name, "n/a", "n/a", "n/a"])
            continue
        rows.append(
            [
                name,
                m["regions"],
                f"{percent(m['saved'])} ({m['d']} of {m['d_old']} lines left)",
                f"{len(m['missing'])} of {len(data['added'])}" + merged_note(m["missing"]),
            ]
        )
    md += table(["method", "conflict regions", "work saved", "statements missing"], rows)
    md += [
        f"d(output, {new}) by side (bench.py's split: *upstream*, a line of the target's `{RUNNER}`, else"
        f" *omni*; who has it), and the code lines the resolved output holds more often than both the series and"
        f" {new} do (*doubled*):",
        "",
    ]
    keys = ("upstream_maintainers_only", "upstream_pq_only", "omni_maintainers_only", "omni_pq_only")
    md += table(
        [
            "method",
            f"upstream, {new} only",
            "upstream, output only",
            f"omni, {new} only",
            "omni, output only",
            "doubled",
        ],
        [
            [name, *(m["split"][k] for k in keys), sum(d["extra"] for d in m["doubled"]) if "doubled" in m else "n/a"]
            for name, m in methods.items()
            if not m.get("error")
        ],
    )
    for name, m in methods.items():
        md += [f"## {name}", ""]
        if m.get("error"):
            md += [f"Not measured: {m['error']}", ""]
            continue
        if m.get("regions_by_file"):
            md.append(
                "- Conflict regions by module: " + ", ".join(f"{n} {k}" for n, k in m["regions_by_file"].items()) + "."
            )
        if name == "pq merge":
            md += [
                f"- `pq merge vllm-omni=={new} --report merge.json`: exit {m['exit']}; {m['reported']} conflict(s)"
                f" in the report, {m['regions']} region(s) in `npu_worker/`; {m['decisions']} decisions (regions"
                f" joined by their links); review flags {kinds(m['flags'])}.",
                f"- Markers: {'; '.join(m['problems']) if m['problems'] else 'every region diff3, in order'}.",
                f"- `pq resolve --keep-patch` run {m['resolves']} time(s); the result "
                + (
                    f"**differs** from each region taken to {new}'s side in {', '.join(m['resolve_differs'])}"
                    if m["resolve_differs"]
                    else f"is each region taken to {new}'s side"
                )
                + f"; `pq continue --accept-errors`: {m['continue']}.",
                f"- Statements missing after the resolution and continue: {m['missing_after']}; work saved of the"
                f" resolution before `pq continue`: {percent(m['saved_before_continue'])}.",
            ]
        if m.get("doubled"):
            md.append(
                f"- Doubled ({sum(d['extra'] for d in m['doubled'])} lines): "
                + "; ".join(f"{d['file']} `{d['line']}` +{d['extra']}" for d in m["doubled"])
                + "."
            )
        if m["unparsed"]:
            md.append(f"- Did not parse on {new}'s side (read by first lines): {', '.join(m['unparsed'])}.")
        listed = [f"  - {missing_line(s)}" for s in m["missing"]]
        if len(listed) > 40:  # the refresh alone lacks most of them: folded
            md += [
                f"<details><summary>Statements missing ({len(listed)})</summary>",
                "",
                *listed,
                "",
                "</details>",
            ]
        else:
            md += [f"- Statements missing ({len(listed)}){':' if listed else '.'}", *listed]
        md.append("")
    return "\n".join(md).rstrip("\n") + "\n"


def missing_line(s: Json) -> str:
    notes = ["there merged with the series' edits: every line the release wrote new is in the function"] * bool(
        s["held_merged"]
    )
    notes += ["flagged " + ", ".join(s["flags"])] * bool(s["flags"])
    return f"{s['file']} `{s['function']}` line {s['line']}: `{shown(s)}`" + (f" ({'; '.join(notes)})" if notes else "")


def merged_note(missing: Sequence[Json]) -> str:
    held = sum(1 for s in missing if s["held_merged"])
    return f" ({held} there merged with the series' edits)" if held else ""


def shown(s: Mapping[str, object]) -> str:
    """A statement's first line, or its normalised text (cut) when that line is only an opening bracket."""
    first, text = str(s["first"]), str(s["text"]).replace("\n", " ")
    return first if len(first.rstrip("([{: ")) > 4 else (text[:100] + " …" if len(text) > 100 else text)


def kinds(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in counts.items()) or "none"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--old", default="0.24.0", help="the release the series took in (default 0.24.0)")
    parser.add_argument("--new", default="0.30.0", help="the release merged in (default 0.30.0)")
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--keep", type=Path, help="work here and keep the projects")
    args = parser.parse_args(argv)
    corpus = corpus_dir()
    for version in (args.old, args.new):
        if not (corpus / f"vllm-omni-{version}" / "npu").is_dir():
            parser.error(f"no corpus runners for vllm-omni {version} in {corpus} (set PQ_CORPUS)")
    os.environ.setdefault("PQ_UPSTREAM_GIT", str(corpus / "vllm-ascend.bundle"))
    location = upstream_git_location(None, spec=presets.NPU)
    root = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="pq-merge-saved-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        data = measure(Upgrade(args.old, args.new), corpus, root, location)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    text = render(data)
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 1 if any(m.get("error") for m in data["methods"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
