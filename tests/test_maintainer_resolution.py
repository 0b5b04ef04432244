"""Careful maintainers' resolutions of two refreshes onto vllm-ascend 0.30.0rc2, kept in ``tests/data/`` (side names
and line numbers only), applied through pq's own commands by one simulated maintainer:
``rc2_resolution.toml``, vllm-omni 0.30.0's series; ``rc2_resolution_032.toml``, this repository's series
(vllm-omni 0.32.0rc1 on cf0baa38dfb2).

The maintainer takes the regions in the fixture's order (file by file, top down). At each one `pq status` is read:
the region's line on disk now, and pq's suggestion when it shows one (any kind: a rule's, or one carried from the
resolution of another copy; the same `pq resolve --suggested FILE:LINE` line). A suggestion is taken with `pq
resolve --suggested --alone` and kept only when it writes exactly what the fixture does (a right suggestion; else
a wrong one); else the file is put back as it was and the fixture's own resolution is written: `pq resolve
--keep-upstream|--keep-patch|--both --alone` when it is a side or upstream's lines then the patch's, else the
lines written into the region's place by hand and nothing else (a hand-written region). A region pq no longer
leaves (it merged the statement itself: a `merged-tokens` review flag with the fixture's sides) counts as a right
suggestion when the refresh's output holds the fixture's lines in its place, else as a wrong one. Then `pq
continue` and `pq check`.

The figures (regions, hand-written regions, right and wrong suggestions, decisions, check findings) are printed
(`pytest -s`) and written to ``rc2_resolution.json`` / ``rc2_resolution_032.json`` in the test's folder.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_project, git, pq, push_to_bare, skeleton_drift

from patch_queue.merge import markers
from patch_queue.series import fmt

FIXTURE = Path(__file__).parent / "data" / "rc2_resolution.toml"
FIXTURE_032 = Path(__file__).parent / "data" / "rc2_resolution_032.toml"
RUNNERS = ("npu_ar_model_runner.py", "npu_generation_model_runner.py", "npu_model_runner.py")
TARGET = "vllm-ascend==0.30.0rc2"

ITEM = re.compile(r"(?P<side>upstream|patch)(?::(?P<a>\d+)(?:-(?P<b>\d+))?)?(?: indent \+(?P<indent>\d+))?")
CONFLICT = re.compile(r"^conflict: npu_worker/(?P<file>\S+):(?P<line>\d+) \S+ in (?P<symbol>\S+) \(patch \S+\)$")
# one line made of pieces of lines (an edit inside one statement): `SIDE:L[A:B] + SIDE:L[C:D] + ...`
PIECE = re.compile(r"(?P<side>upstream|patch):(?P<n>\d+)\[(?P<a>-?\d*):(?P<b>-?\d*)\]")
SUGGESTION = re.compile(r"^  suggestion: (?P<reason>.*): `pq resolve (?P<option>--\w+) (?P<where>\S+)`$")


@dataclass(frozen=True)
class Entry:
    """One region of the fixture and the maintainer's resolution of it."""

    file: str
    symbol: str
    ordinal: int  # among the conflict regions of ``symbol`` in ``file``, in file order, from 1
    lines: tuple[int, int, int]  # of its base, upstream and patch sides
    side: str | None  # "upstream" or "patch"
    combine: tuple[str, ...] | None  # the lines written in its place, by side and line numbers
    why: str

    @property
    def name(self) -> str:
        return f"{self.file} {self.symbol} #{self.ordinal}"

    def written(self, region: markers.Region) -> list[str]:
        """The lines this resolution writes in ``region``'s place."""
        if self.side is not None:
            return region.side(self.side)
        out: list[str] = []
        for item in self.combine or ():
            if "[" in item:  # one line of pieces
                pieces = [PIECE.fullmatch(piece) for piece in item.split(" + ")]
                line = ""
                for p in pieces:
                    assert p is not None, f"{self.name}: cannot read {item!r}"
                    lines = region.side(p["side"])
                    assert 1 <= int(p["n"]) <= len(lines), (
                        f"{self.name}: {item!r} outside the side's {len(lines)} lines"
                    )
                    text = lines[int(p["n"]) - 1].rstrip("\n")
                    line += text[slice(int(p["a"]) if p["a"] else None, int(p["b"]) if p["b"] else None)]
                out.append(line + "\n")
                continue
            m = ITEM.fullmatch(item)
            assert m is not None, f"{self.name}: cannot read {item!r}"
            lines = region.side(m["side"])
            first = int(m["a"]) if m["a"] else 1
            last = int(m["b"]) if m["b"] else (first if m["a"] else len(lines))
            assert 1 <= first <= last <= len(lines), f"{self.name}: {item!r} outside the side's {len(lines)} lines"
            pad = " " * int(m["indent"] or 0)
            out += [pad + line if line.strip() else line for line in lines[first - 1 : last]]
        return out

    def command(self, region: markers.Region) -> str | None:
        """The `pq resolve` option that writes this resolution in ``region``, or None when the lines are written by
        hand (neither side, nor both)."""
        want = self.written(region)
        return next(
            (f"--{o}" for o in ("keep-upstream", "keep-patch", "both") if region.side(o.removeprefix("keep-")) == want),
            None,
        )


def load_fixture(path: Path = FIXTURE) -> list[Entry]:
    entries = []
    for raw in tomllib.loads(path.read_text(encoding="utf-8"))["region"]:
        assert ("side" in raw) != ("combine" in raw), raw
        assert raw.get("side", "upstream") in ("upstream", "patch"), raw
        assert raw["why"].strip(), raw
        combine = tuple(raw["combine"]) if "combine" in raw else None
        entries.append(
            Entry(raw["file"], raw["symbol"], raw["ordinal"], tuple(raw["lines"]), raw.get("side"), combine, raw["why"])
        )
    return entries


def load_methods(path: Path = FIXTURE) -> dict[tuple[str, str], str]:
    """(file, symbol) -> the sha256 of the method's text once the maintainer's resolution of all its regions is
    applied (the fixture's ``[methods]``): where pq resolves some of those regions itself now, the method it gives,
    the rest resolved by the maintainer, must be that very text."""
    raw = tomllib.loads(path.read_text(encoding="utf-8")).get("methods", {})
    return {tuple(key.split(" ", 1)): value for key, value in raw.items()}  # type: ignore[misc]


def method_text(text: str, symbol: str) -> str | None:
    """The lines of method ``Class.name`` of ``text`` (decorators included), or None."""
    cls, name = symbol.split(".", 1)
    lines = text.splitlines(keepends=True)
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for m in node.body:
                if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name == name:
                    start = min([m.lineno, *(d.lineno for d in m.decorator_list)])
                    return "".join(lines[start - 1 : m.end_lineno])
    return None


@pytest.mark.parametrize("fixture", [FIXTURE, FIXTURE_032], ids=lambda p: p.stem)
def test_fixture_holds_no_code(fixture: Path) -> None:
    """Only side names, line numbers and reasons: every resolution item is a side and lines (or one line of pieces
    of lines), every region named once, in the order a maintainer takes them: file by file, top down (this one runs
    without the corpus)."""
    entries = load_fixture(fixture)
    assert len({(e.file, e.symbol, e.ordinal) for e in entries}) == len(entries)
    runs = [e.file for i, e in enumerate(entries) if i == 0 or entries[i - 1].file != e.file]
    assert len(runs) == len(set(runs)), runs  # file by file
    for f, s in {(e.file, e.symbol) for e in entries}:  # top down
        ordinals = [e.ordinal for e in entries if (e.file, e.symbol) == (f, s)]
        assert ordinals == list(range(1, len(ordinals) + 1)), (f, s, ordinals)
    for e in entries:
        for item in e.combine or ():
            assert ITEM.fullmatch(item) or all(PIECE.fullmatch(p) for p in item.split(" + ")), (e.name, item)
        assert len(e.lines) == 3 and all(isinstance(n, int) and n >= 0 for n in e.lines), e.name
        assert "\n" not in e.why and not re.search(r"self\.\w+\(|\bdef \w+\(|^\s*(if|for|with) ", e.why), e.name
    for (f, s), digest in load_methods(fixture).items():  # hashes of methods only, each of a method it names
        assert re.fullmatch(r"[0-9a-f]{64}", digest) and any((e.file, e.symbol) == (f, s) for e in entries), (f, s)


def groups(conflicts: Sequence[Mapping[str, Any]]) -> list[set[int]]:
    """The decisions: conflicts joined by their links (the same patch and a link in common, or in common with one
    that is), as `pq resolve` takes them together; indices into ``conflicts``, in order."""
    parent = list(range(len(conflicts)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(conflicts):
        for j in range(i):
            b = conflicts[j]
            if a["patch"] == b["patch"] and set(a["links"]) & set(b["links"]):
                parent[root(i)] = root(j)
    out: dict[int, set[int]] = {}
    for i in range(len(conflicts)):
        out.setdefault(root(i), set()).add(i)
    return sorted(out.values(), key=min)


@dataclass(frozen=True)
class Open:
    """A conflict region as `pq status` lists it now."""

    file: str
    line: int
    symbol: str
    option: str | None  # the `pq resolve` option of its suggestion, when it has one
    reason: str | None


def status(proj: Path) -> list[Open]:
    out: list[Open] = []
    for line in pq(proj, "status", check=None).stdout.splitlines():
        if m := CONFLICT.match(line):
            out.append(Open(m["file"], int(m["line"]), m["symbol"], None, None))
        elif (s := SUGGESTION.match(line)) and out:
            assert s["where"] == f"npu_worker/{out[-1].file}:{out[-1].line}", line
            out[-1] = Open(out[-1].file, out[-1].line, out[-1].symbol, s["option"], s["reason"])
    return out


def lints(files: Mapping[str, str], codes: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(file, code, name) of each finding of ruff's ``codes`` in ``files``, by pq's own ruff run."""
    return [(f, x.code, x.name) for f, text in sorted(files.items()) for x in fmt.lint(text, codes) or []]


def added_imports(report: dict[str, Any]) -> set[tuple[str, str]]:
    """(file, name) of each import the refresh added (its ``import-added`` flags)."""
    return {
        (f["file"], name)
        for f in report["flags"]
        if f["kind"] == "import-added"
        for name in re.findall(r"`(\w+)` \(imported at upstream line", f["message"])
    }


def sides_of(item: Mapping[str, Any]) -> markers.Region:
    """The three sides a report's conflict or review flag shows, as a region of no place."""
    return markers.Region(
        0, 0, *(tuple(item["sides"][s].splitlines(keepends=True)) for s in ("upstream", "base", "patch"))
    )


def counts(item: Mapping[str, Any]) -> tuple[int, int, int]:
    return tuple(len(item["sides"][s].splitlines()) for s in ("base", "upstream", "patch"))  # type: ignore[return-value]


def match(
    conflicts: Sequence[Mapping[str, Any]],
    flags: Sequence[Mapping[str, Any]],
    entries: Sequence[Entry],
    methods: Mapping[tuple[str, str], str] | None = None,
) -> dict[int, tuple[str, int]]:
    """Each entry (by index) and what it names in the report: ("conflict", index) or, where pq merged the region
    itself, ("merged", index into ``flags``): a `merged-tokens` flag of the same symbol with the fixture's sides;
    or ("clean", -1): a region of a method ``methods`` names that pq no longer leaves once it merged another region
    of that method (a region grown or linked with it, `name-linked`), judged by the whole method's text (:func:`apply`).
    The regions of one symbol keep their order; every conflict is named once."""
    out: dict[int, tuple[str, int]] = {}
    used: set[int] = set()
    for file, symbol in dict.fromkeys((e.file, e.symbol) for e in entries):
        mine = sorted(
            (i for i, c in enumerate(conflicts) if (c["file"], c["symbol"]) == (file, symbol)),
            key=lambda i: conflicts[i]["line"],
        )
        merged = [
            i
            for i, f in enumerate(flags)
            if f["kind"] == "merged-tokens" and (f["file"], f["symbol"]) == (file, symbol)
        ]
        for k, e in sorted(
            ((k, e) for k, e in enumerate(entries) if (e.file, e.symbol) == (file, symbol)),
            key=lambda ke: ke[1].ordinal,
        ):
            if mine and (
                counts(conflicts[mine[0]]) == e.lines
                or len(mine)
                == len([x for x in entries if (x.file, x.symbol) == (file, symbol) and x.ordinal >= e.ordinal])
            ):
                i = mine.pop(0)
                assert counts(conflicts[i]) == e.lines, (
                    f"{e.name}: the sides now hold {counts(conflicts[i])} lines, the fixture was written for {e.lines}"
                )
                out[k] = ("conflict", i)
            else:
                f = next((f for f in merged if f not in used and counts(flags[f]) == e.lines), None)
                if f is None and merged and (file, symbol) in (methods or {}):
                    out[k] = ("clean", -1)
                    continue
                assert f is not None, f"{e.name}: no conflict region and no merged-tokens flag with sides {e.lines}"
                used.add(f)
                out[k] = ("merged", f)
        assert not mine, f"{file} {symbol}: regions the fixture does not name: {[conflicts[i]['line'] for i in mine]}"
    assert sorted(i for kind, i in out.values() if kind == "conflict") == list(range(len(conflicts))), (
        "the fixture is not this refresh"
    )
    return out


def apply(
    proj: Path, report: Mapping[str, Any], entries: list[Entry], methods: Mapping[tuple[str, str], str] | None = None
) -> tuple[list[set[int]], list[dict[str, Any]]]:
    """Resolve every conflict region of the refresh pending in ``proj`` (``report``: its JSON report) the way
    ``entries`` say, in their order, through pq's commands; the decisions, and one row per entry applied.  A region
    pq resolved itself is right when the output holds the fixture's lines in its place (a `merged-tokens` flag) and,
    for a method ``methods`` names, when the method, once every region is resolved, is the maintainer's text."""
    conflicts, flags = report["conflicts"], report["flags"]
    named = match(conflicts, flags, entries, methods)
    entry_of = {i: entries[k] for k, (kind, i) in named.items() if kind == "conflict"}
    # a region pq merged itself: the refresh's output holds the fixture's lines in its place (read before anything
    # is resolved: the flag's line is the refresh's)
    merged_right: dict[int, bool] = {}
    for k, (kind, i) in named.items():
        if kind == "merged":
            f, want = flags[i], entries[k].written(sides_of(flags[i]))
            text = (proj / "npu_worker" / f["file"]).read_text(encoding="utf-8").splitlines(keepends=True)
            merged_right[k] = text[f["line"] - 1 : f["line"] - 1 + len(want)] == want
    # where pq's merge is not the maintainer's, the maintainer writes their lines in its place by hand (bottom up)
    for k, (kind, i) in sorted(named.items(), key=lambda ki: -(flags[ki[1][1]]["line"] if ki[1][0] == "merged" else 0)):
        if kind == "merged" and not merged_right[k]:
            f = flags[i]
            path = proj / "npu_worker" / f["file"]
            text = path.read_text(encoding="utf-8").splitlines(keepends=True)
            at, length = f["line"] - 1, len((f["resolution"] or "").splitlines())
            path.write_text("".join(text[:at] + entries[k].written(sides_of(f)) + text[at + length :]), "utf-8")

    decisions = groups(conflicts)
    decision_of = {i: d for d, members in enumerate(decisions) for i in members}
    done: set[int] = set()  # indices into conflicts
    rows: list[dict[str, Any]] = []
    for k, e in enumerate(entries):
        kind, me = named[k]
        if kind in ("merged", "clean"):
            rows.append(
                {
                    "region": e.name,
                    "decision": None,
                    "resolution": e.side or list(e.combine or ()),
                    "lines": len(entries[k].written(sides_of(flags[me]))) if kind == "merged" else None,
                    "taken": "merged by pq" if merged_right.get(k, True) else "hand",
                    "suggestion": (
                        f"{flags[me]['kind']}: {flags[me]['message']}"
                        if kind == "merged"
                        else "resolved by pq with the region it merged in the same method"
                    ),
                    "correct": merged_right.get(k, True),
                    "linked taken wrongly by the printed command": [],
                }
            )
            continue
        # its line now: the regions of this symbol still open, in order, as `pq status` lists them
        mine = [o for o in status(proj) if (o.file, o.symbol) == (e.file, e.symbol)]
        still = sorted(
            (i for i, c in enumerate(conflicts) if (c["file"], c["symbol"]) == (e.file, e.symbol) and i not in done),
            key=lambda i: conflicts[i]["line"],
        )
        assert len(mine) == len(still), (e.name, mine)
        here = mine[still.index(me)]
        path = proj / "npu_worker" / e.file
        before = path.read_text(encoding="utf-8")
        region = markers.region_at(before, here.line)
        assert region is not None and region.first == here.line, (e.name, here)
        want = markers.resolve(before, region, e.written(region))
        where = f"npu_worker/{e.file}:{here.line}"
        correct = False
        if here.option is not None:
            pq(proj, "resolve", "--suggested", where, "--alone")
            correct = path.read_text(encoding="utf-8") == want
            if not correct:  # not what the maintainer ships: the file as it was, then the maintainer's way
                path.write_text(before, encoding="utf-8")
        option = e.command(region)
        if not correct:
            if option is not None:
                pq(proj, "resolve", option, where, "--alone")
            else:
                path.write_text(want, encoding="utf-8")
        assert path.read_text(encoding="utf-8") == want, e.name
        # the command the suggestion prints (`pq resolve --upstream|--patch`, without --alone) also takes the
        # regions still open that go with it to that side: those the maintainer resolves otherwise
        linked = [
            i
            for i in decisions[decision_of[me]]
            if i != me and i not in done and entry_of[i].side != (here.option or "--")[2:]
        ]
        done.add(me)
        rows.append(
            {
                "region": e.name,
                "decision": decision_of[me] + 1,
                "resolution": e.side or list(e.combine or ()),
                "lines": len(e.written(region)),
                "taken": "suggestion" if correct else (option[2:].removeprefix("keep-") if option else "hand"),
                "suggestion": here.option and f"{here.option}: {here.reason}",
                "correct": correct,
                "linked taken wrongly by the printed command": (
                    [entry_of[i].name for i in linked] if here.option in ("--upstream", "--patch") else []
                ),
            }
        )

    # the methods where pq resolved regions itself: the maintainer's text, once every region is resolved
    for k, e in enumerate(entries):
        want = (methods or {}).get((e.file, e.symbol))
        if named[k][0] in ("merged", "clean") and want is not None:
            text = method_text((proj / "npu_worker" / e.file).read_text(encoding="utf-8"), e.symbol) or ""
            rows[k]["correct"] = rows[k]["correct"] and hashlib.sha256(text.encode()).hexdigest() == want
    return decisions, rows


def replay(
    proj: Path,
    entries: list[Entry],
    before: Mapping[str, str],
    tmp_path: Path,
    name: str,
    methods: Mapping[tuple[str, str], str] | None = None,
) -> dict[str, Any]:
    """The maintainer's whole resolution of the refresh pending in ``proj`` (run with `--report
    reports/refresh.json`), then `pq continue` and `pq check`: the figures, printed and written to
    ``tmp_path / name``. ``before``: the runners the refreshed series built before (their lint findings);
    ``methods``: the fixture's method hashes (:func:`load_methods`)."""
    report = json.loads((proj / "reports" / "refresh.json").read_text())  # `pq continue` writes it again
    conflicts = report["conflicts"]

    decisions, rows = apply(proj, report, entries, methods)

    # every region resolved, nothing else changed by hand
    for f in RUNNERS:
        assert not markers.regions((proj / "npu_worker" / f).read_text(encoding="utf-8")), f
    st = pq(proj, "status", check=0).stdout
    assert f"{len(conflicts)} of {len(conflicts)} conflict region(s) resolved on disk" in st
    drift_before = skeleton_drift(proj)  # the series the refresh started from
    cont = pq(proj, "continue", check=None)
    checked = proj.parent / "check.json"
    result = pq(proj, "check", "--json", str(checked), check=None)
    findings = json.loads(checked.read_text())

    built = {p.name: p.read_text(encoding="utf-8") for p in sorted((proj / "npu_worker").glob("*.py"))}
    codes = ("F401", "F821", "F841")
    now, then = lints(built, codes), lints(before, codes)
    unused = [(f, name) for f, code, name in now if code == "F401"]
    added = added_imports(report)
    per_decision = [[r for r in rows if r["decision"] == d + 1] for d in range(len(decisions))]
    figures: dict[str, Any] = {
        "regions": len(rows),
        "regions pq merged itself": sum(r["taken"] == "merged by pq" for r in rows),
        # neither side, nor both, nor the suggestion pq offered at that moment is the maintainer's resolution
        "hand-written regions": sum(r["taken"] == "hand" for r in rows),
        "lines in hand-written regions": sum(r["lines"] for r in rows if r["taken"] == "hand"),
        "right suggestions": sum(bool(r["suggestion"]) and r["correct"] for r in rows),
        "wrong suggestions": sum(bool(r["suggestion"]) and not r["correct"] for r in rows),
        "sides taken": {s: sum(r["taken"] == s for r in rows) for s in ("upstream", "patch", "both")},
        "decisions": len(decisions),
        "regions with a suggestion": sum(bool(r["suggestion"]) for r in rows),
        "regions with a correct suggestion": sum(bool(r["correct"]) for r in rows),
        "decisions with a suggestion": sum(any(r["suggestion"] for r in rs) for rs in per_decision),
        "decisions with a correct suggestion": sum(all(r["correct"] for r in rs) for rs in per_decision),
        # the region where the maintainer takes the decision: the first of its group they reach
        "decisions whose first region had a correct suggestion": sum(bool(rs[0]["correct"]) for rs in per_decision),
        "suggestions whose printed command takes linked regions wrongly": sum(
            bool(r["linked taken wrongly by the printed command"]) for r in rows
        ),
        "continue exit": cont.returncode,
        "check errors": findings["errors"],
        "check warnings": findings["warnings"],
        "check rules": sorted({f"{f['severity']}:{f['rule']}" for f in findings["findings"]}),
        "ruff format: files it would change": sorted(
            f for f, text in built.items() if fmt.format_source(text, 120) not in (None, text)
        ),
        "unused imports (F401)": len(unused),
        "unused imports the refresh added": sorted(f"{f}:{n}" for f, n in unused if (f, n) in added),
        "unused imports of the previous runners": sorted(f"{f}:{n}" for f, n in unused if (f, n) not in added),
        "unused locals (F841)": sorted(f"{f}:{n}" for f, code, n in now if code == "F841"),
        "undefined names (F821)": sum(code == "F821" for _f, code, _n in now),
        "previous runners (F401, F821, F841)": len(then),
        "skeleton drift before": drift_before,
        "skeleton drift after": skeleton_drift(proj) if cont.returncode == 0 else None,
        "relocated": [line for line in cont.stdout.splitlines() if line.startswith(("relocated:", "skeleton drift:"))],
        "regions applied": rows,
    }
    (tmp_path / name).write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures, indent=1))
    assert cont.returncode == 0, cont.stdout + cont.stderr
    assert figures["undefined names (F821)"] == 0 and findings["errors"] == 0, result.stdout
    return figures


def test_maintainer_resolution_of_rc2(reported_030_once: tuple[Path, str], tmp_path: Path, corpus: Path) -> None:
    # the session's `pq refresh --no-stop --to vllm-ascend==0.30.0rc2 --report reports/refresh.json`, copied
    proj = copy_project(reported_030_once[0], tmp_path / "p")
    released = {
        p.name: p.read_text(encoding="utf-8") for p in sorted((corpus / "vllm-omni-0.30.0" / "npu").glob("*.py"))
    }
    figures = replay(proj, load_fixture(), released, tmp_path, "rc2_resolution.json", load_methods(FIXTURE))
    rows = figures["regions applied"]

    # 12 decisions: the generation runner's pipeline-parallel block goes with no other region (its only link was
    # `scheduler_output`, a parameter every statement of execute_model reads); pq merges the generation runner's
    # `_dummy_run` header itself (merged-tokens), so the two regions that went with it are no conflicts either
    assert (figures["regions"], figures["decisions"]) == (28, 12), figures
    # every suggestion pq showed was what the maintainer ships there (the AR runner's decisions carry over to the
    # generation runner where the omni code is the same, the generation runner's _dummy_run to npu_model_runner's,
    # and a name-linked region takes the side the regions it goes with took), but pq's own two merged-tokens
    # merges: this maintainer kept one side of each (upstream's `super()` call, the omni header without upstream's
    # new condition), where the maintainer of rc2_resolution_032.toml, on the very same three sides, merged them
    # as pq does; this maintainer rewrites them by hand, and npu_model_runner's copy then carries that rewrite
    merged_wrong = [r["region"] for r in rows if r["suggestion"] and not r["correct"]]
    assert merged_wrong == [
        "npu_generation_model_runner.py NPUGenerationModelRunner._dummy_run #2",
        "npu_model_runner.py OmniNPUModelRunner._update_states #1",
    ], rows
    assert figures["wrong suggestions"] == 2 and figures["right suggestions"] >= 15, rows
    assert figures["hand-written regions"] <= 7, rows
    assert figures["decisions whose first region had a correct suggestion"] >= 6, figures
    assert figures["previous runners (F401, F821, F841)"] == 0  # the runners the series reproduces have none
    # imports follow the resolution: pq continue removed what the resolved code no longer reads (the refresh's
    # imports for sides not taken, and the runners' `import time`, whose only use was the omni timing code that
    # upstream's profiling-chunk helpers replaced); pq check and ruff agree
    assert figures["unused imports (F401)"] == 0 and "warning:import-unused" not in figures["check rules"], figures
    # as `ruff format` lays it out, as the inputs were (no double blank line where upstream's new blank line stood
    # above the `use_compress` block the omni patch deleted)
    assert figures["ruff format: files it would change"] == [], figures


def test_maintainer_resolution_of_032(reported_032_once: tuple[Path, str], tmp_path: Path) -> None:
    """This repository's series onto vllm-ascend 0.30.0rc2 (issue 48): 28 regions; on the day the fixture was
    written 13 of them were written by hand, and pq's 3 suggestions (the mamba copy call twice, the try/finally
    wrapper) were right. A resolution carried to the other copies (the AR runner's to the generation runner's, the
    generation runner's `_dummy_run` to `OmniNPUModelRunner`'s, on disk or from refs/pq/resolutions) brought that
    to 8 by hand and 13 right. Statements merged by tokens (issue 48, point 2): pq merges the `_update_states` call
    and the generation runner's `_dummy_run` header itself (merged-tokens, the fixture's lines), the two
    generation-runner regions that went with that header are then no conflicts (the method is the maintainer's, by
    its hash), and `OmniNPUModelRunner._dummy_run`'s header and forward regions carry the generation runner's merge
    (pq's merged-tokens and block-moved flags are carried like a maintainer's resolution). Omni's copies of the
    timing code upstream moved into its profiling-chunk helpers are dropped (:mod:`patch_queue.merge.moved`). The
    rest are the `with (...)` header with upstream's new keyword in a statement the omni patch re-indented."""
    proj = copy_project(reported_032_once[0], tmp_path / "p")
    previous = {f: git(proj, "show", f"refs/pq/top:{f}") for f in RUNNERS}
    figures = replay(
        proj, load_fixture(FIXTURE_032), previous, tmp_path, "rc2_resolution_032.json", load_methods(FIXTURE_032)
    )
    rows = figures["regions applied"]

    assert figures["regions"] == 28, figures
    assert figures["wrong suggestions"] == 0, rows
    assert figures["hand-written regions"] <= 3 and figures["right suggestions"] >= 19, rows
    assert figures["regions pq merged itself"] == 4, rows
    # the other copies' suggestions, carried from the first copy's resolution (the reason says where it was made)
    carried = [r for r in rows if r["correct"] and re.search(r" at npu_worker/\w+\.py:\d+", r["suggestion"] or "")]
    assert len(carried) >= 8, rows
    # code upstream moved into its profiling-chunk helpers: the AR runner's timing start (execute_model #1) and
    # timing tail (sample_tokens #1), omni's copy dropped (the generation runner's timing start is carried from there)
    moved = [r["region"] for r in rows if r["correct"] and "upstream moved these lines into" in (r["suggestion"] or "")]
    assert moved == [
        "npu_ar_model_runner.py NPUARModelRunner.execute_model #1",
        "npu_ar_model_runner.py NPUARModelRunner.sample_tokens #1",
    ], rows
    assert figures["unused imports the refresh added"] == [], figures
    assert figures["ruff format: files it would change"] == [], figures  # 0.32.0rc1's runners are formatted
    # edits go where they belong (issue 48, point 5): the series as `pq merge` took in the maintainers' releases
    # held edits of five carried methods in their skeletons; `pq continue` moved each into the patch that carries
    # the method and said so, and every skeleton's copy of a carried method is upstream's text as projected
    drifted = sorted(f"{path} {name}" for path, names in figures["skeleton drift before"].items() for name in names)
    assert drifted == [
        "npu_ar_model_runner.py NPUARModelRunner.execute_model",
        "npu_ar_model_runner.py NPUARModelRunner.sample_tokens",
        "npu_generation_model_runner.py NPUGenerationModelRunner.execute_model",
        "npu_generation_model_runner.py NPUGenerationModelRunner.sample_tokens",
        "npu_model_runner.py OmniNPUModelRunner._model_forward",
    ], figures["skeleton drift before"]
    assert figures["skeleton drift after"] == {path: [] for path in figures["skeleton drift before"]}, figures
    relocated = figures["relocated"]
    assert len(relocated) == len(drifted) and all(line.startswith("relocated: npu_worker/") for line in relocated)
    for line, name in zip(relocated, drifted, strict=True):
        path, symbol = name.split(" ")
        method = symbol.split(".")[-1].strip("_").replace("_", "-")
        assert re.search(
            rf"npu_worker/{path}: .* of {re.escape(symbol)} that upstream did not write: moved into "
            rf"patches/\d{{4}}-{path.removesuffix('.py').replace('_', '-')}-{method}\.patch",
            line,
        ), line
    report = json.loads((proj / "reports" / "refresh.json").read_text())
    moved = [f for f in report["flags"] if f["kind"] == "relocated"]
    assert sorted(f"{f['file']} {f['symbol']}" for f in moved) == drifted, moved
    for f in moved:  # the lines moved, each now added by the patch that carries the method
        body = (proj / "patches" / f["patch"]).read_text(encoding="utf-8").splitlines()
        assert f["sides"]["patch"].strip() and all(
            "+" + line in body for line in f["sides"]["patch"].splitlines() if line.strip()
        ), f

    # a fresh clone of the pushed result (the commit and refs/pq/resolutions) reproduces it byte for byte
    origin = push_to_bare(proj, "pq: refresh onto vllm-ascend 0.30.0rc2")
    git(proj, "push", "-q", str(origin), "refs/pq/resolutions")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    pq(clone, "resolutions", "merge", "origin")
    out = pq(clone, "reproduce").stdout
    assert "every sha256 as queue.toml records" in out and "differs:" not in out, out
    for folder, pattern in (("patches", "*"), ("npu_worker", "*.py")):
        ours = {f.name: f.read_bytes() for f in sorted((proj / folder).glob(pattern)) if f.is_file()}
        theirs = {f.name: f.read_bytes() for f in sorted((clone / folder).glob(pattern)) if f.is_file()}
        assert ours.keys() == theirs.keys() and ours == theirs, (folder, sorted(ours), sorted(theirs))


def test_the_reports_tell_the_suggestions_status_shows(reported_032_once: tuple[Path, str]) -> None:
    """Every suggestion where the maintainer reads (issue 48, point 4): the refresh's JSON and Markdown reports and
    its output carry, under each region, the suggestion `pq status` shows, those carried from another copy's
    resolution (here pq's own merges: the generation runner's `_dummy_run` header, carried to
    `OmniNPUModelRunner`'s) and those of code upstream moved into a helper among them; the JSON holds what
    `pq resolve --suggested` writes and says it wrote."""
    proj, printed = reported_032_once
    report = json.loads((proj / "reports" / "refresh.json").read_text())
    shown = {(o.file, o.line): o.reason for o in status(proj)}
    told = {
        (c["file"], c["line"]): c["explanation"]["suggestion"] and c["explanation"]["suggestion"]["reason"]
        for c in report["conflicts"]
    }
    assert told == shown, (told, shown)
    reasons = [r for r in told.values() if r]
    assert any(re.search(r" at npu_worker/\w+\.py:\d+$", r) for r in reasons), reasons  # carried
    assert any(r.startswith("upstream moved these lines into") for r in reasons), reasons  # moved code
    markdown = (proj / "reports" / "refresh.md").read_text()
    for c in report["conflicts"]:
        tip = c["explanation"]["suggestion"]
        if tip is None:
            continue
        assert f"`pq resolve --suggested npu_worker/{c['file']}:{c['line']}`" in printed, c
        assert tip["writes"], tip
        # the Markdown says the reason (its own escaping aside: compare the words)
        assert " ".join(re.findall(r"\w+", tip["reason"])) in " ".join(re.findall(r"\w+", markdown)), tip
