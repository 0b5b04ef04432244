"""A careful maintainer's resolution of vllm-omni 0.30.0's series refreshed onto vllm-ascend 0.30.0rc2, kept in
``tests/data/rc2_resolution.toml`` (side names and line numbers only), applied through pq's own commands.

The maintainer takes the regions in the fixture's order. At each one `pq status` is read: the region's line on
disk now, and pq's suggestion when it shows one. A suggestion is taken with `pq resolve --suggested --alone`
and kept only when it writes exactly what the fixture does (a correct suggestion); else the file is put back as
it was and the fixture's own resolution is written: `pq resolve --upstream|--patch|--both --alone` for a side
or for upstream's lines then the patch's, or the combined lines written into the region's place and nothing
else. Then `pq continue` and `pq check`.

The figures (regions, decisions, decisions that came with a correct suggestion, check findings) are printed
(`pytest -s`) and written to ``rc2_resolution.json`` in the test's folder.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import copy_project, pq

from patch_queue.merge import markers
from patch_queue.series import fmt

FIXTURE = Path(__file__).parent / "data" / "rc2_resolution.toml"
TARGET = "vllm-ascend==0.30.0rc2"

ITEM = re.compile(r"(?P<side>upstream|patch)(?::(?P<a>\d+)(?:-(?P<b>\d+))?)?(?: indent \+(?P<indent>\d+))?")
CONFLICT = re.compile(r"^conflict: npu_worker/(?P<file>\S+):(?P<line>\d+) \S+ in (?P<symbol>\S+) \(patch \S+\)$")
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
            m = ITEM.fullmatch(item)
            assert m is not None, f"{self.name}: cannot read {item!r}"
            lines = region.side(m["side"])
            first = int(m["a"]) if m["a"] else 1
            last = int(m["b"]) if m["b"] else (first if m["a"] else len(lines))
            assert 1 <= first <= last <= len(lines), f"{self.name}: {item!r} outside the side's {len(lines)} lines"
            pad = " " * int(m["indent"] or 0)
            out += [pad + line if line.strip() else line for line in lines[first - 1 : last]]
        return out

    def command(self) -> str | None:
        """The `pq resolve` option that writes this resolution, or None when the lines are written by hand."""
        if self.side is not None:
            return f"--keep-{self.side}"
        return "--both" if self.combine == ("upstream", "patch") else None


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


def test_fixture_holds_no_code() -> None:
    """Only side names, line numbers and reasons: every resolution item is a side and lines, every region named
    once (this one runs without the corpus)."""
    entries = load_fixture()
    assert len({(e.file, e.symbol, e.ordinal) for e in entries}) == len(entries)
    for e in entries:
        for item in e.combine or ():
            assert ITEM.fullmatch(item), (e.name, item)
        assert len(e.lines) == 3 and all(isinstance(n, int) and n >= 0 for n in e.lines), e.name
        assert "\n" not in e.why and not re.search(r"self\.\w+\(|\bdef \w+\(|^\s*(if|for|with) ", e.why), e.name


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


def apply(
    proj: Path, conflicts: list[dict[str, Any]], entries: list[Entry]
) -> tuple[list[set[int]], list[dict[str, Any]]]:
    """Resolve every conflict region of the refresh pending in ``proj`` (``conflicts``: its report's) the way
    ``entries`` say, in their order, through pq's commands; the decisions, and one row per region applied."""
    # every region of the refresh is in the fixture once, named by file, symbol and ordinal, with the sides it had
    ordinal: dict[tuple[str, str], int] = {}
    by_name: dict[tuple[str, str, int], int] = {}
    for c in sorted(conflicts, key=lambda c: (c["file"], c["line"])):
        k = (c["file"], c["symbol"])
        ordinal[k] = ordinal.get(k, 0) + 1
        by_name[(*k, ordinal[k])] = conflicts.index(c)
    assert sorted(by_name) == sorted((e.file, e.symbol, e.ordinal) for e in entries), "the fixture is not this refresh"
    for e in entries:
        sides = conflicts[by_name[(e.file, e.symbol, e.ordinal)]]["sides"]
        have = tuple(len(sides[s].splitlines()) for s in ("base", "upstream", "patch"))
        assert have == e.lines, f"{e.name}: the sides now hold {have} lines, the fixture was written for {e.lines}"
    entry_of = {by_name[(e.file, e.symbol, e.ordinal)]: e for e in entries}

    decisions = groups(conflicts)
    decision_of = {i: d for d, members in enumerate(decisions) for i in members}
    done: set[int] = set()  # indices into conflicts
    rows: list[dict[str, Any]] = []
    for e in entries:
        me = by_name[(e.file, e.symbol, e.ordinal)]
        # its line now: the regions of this symbol still open, in order, as `pq status` lists them
        mine = [o for o in status(proj) if (o.file, o.symbol) == (e.file, e.symbol)]
        still = sorted(n for (f, s, n), i in by_name.items() if (f, s) == (e.file, e.symbol) and i not in done)
        assert len(mine) == len(still), (e.name, mine)
        here = mine[still.index(e.ordinal)]
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
        if not correct:
            option = e.command()
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
                "suggestion": here.option and f"{here.option}: {here.reason}",
                "correct": correct,
                "linked taken wrongly by the printed command": (
                    [entry_of[i].name for i in linked] if here.option in ("--upstream", "--patch") else []
                ),
            }
        )

    return decisions, rows


def test_maintainer_resolution_of_rc2(reported_030_once: tuple[Path, str], tmp_path: Path, corpus: Path) -> None:
    # the session's `pq refresh --no-stop --to vllm-ascend==0.30.0rc2 --report reports/refresh.json`, copied
    proj = copy_project(reported_030_once[0], tmp_path / "p")
    report = json.loads((proj / "reports" / "refresh.json").read_text())  # `pq continue` writes it again
    conflicts = report["conflicts"]
    entries = load_fixture()

    decisions, rows = apply(proj, conflicts, entries)

    # every region resolved, nothing else changed by hand
    for f in ("npu_ar_model_runner.py", "npu_generation_model_runner.py", "npu_model_runner.py"):
        assert not markers.regions((proj / "npu_worker" / f).read_text(encoding="utf-8")), f
    st = pq(proj, "status", check=0).stdout
    assert f"{len(conflicts)} of {len(conflicts)} conflict region(s) resolved on disk" in st
    cont = pq(proj, "continue", check=None)
    checked = tmp_path / "check.json"
    result = pq(proj, "check", "--json", str(checked), check=None)
    findings = json.loads(checked.read_text())

    built = {p.name: p.read_text(encoding="utf-8") for p in sorted((proj / "npu_worker").glob("*.py"))}
    released = {
        p.name: p.read_text(encoding="utf-8") for p in sorted((corpus / "vllm-omni-0.30.0" / "npu").glob("*.py"))
    }
    codes = ("F401", "F821", "F841")
    now, then = lints(built, codes), lints(released, codes)
    unused = [(f, name) for f, code, name in now if code == "F401"]
    added = added_imports(report)
    per_decision = [[r for r in rows if r["decision"] == d + 1] for d in range(len(decisions))]
    figures: dict[str, Any] = {
        "regions": len(conflicts),
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
        "unused imports (F401)": len(unused),
        "unused imports the refresh added": sorted(f"{f}:{n}" for f, n in unused if (f, n) in added),
        "unused imports of the 0.30.0 code": sorted(f"{f}:{n}" for f, n in unused if (f, n) not in added),
        "unused locals (F841)": sorted(f"{f}:{n}" for f, code, n in now if code == "F841"),
        "undefined names (F821)": sum(code == "F821" for _f, code, _n in now),
        "0.30.0 runners (F401, F821, F841)": len(then),
        "regions applied": rows,
    }
    (tmp_path / "rc2_resolution.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps(figures, indent=1))

    assert cont.returncode == 0, cont.stdout + cont.stderr
    assert (len(conflicts), len(decisions)) == (28, 13), figures
    # every suggestion pq showed was what the maintainer ships there: the AR runner's decisions carry over to the
    # generation runner where the omni code is the same, the generation runner's _dummy_run to npu_model_runner's,
    # and a name-linked region takes the side the regions it goes with took
    assert figures["regions with a suggestion"] == figures["regions with a correct suggestion"] >= 13, rows
    assert figures["decisions whose first region had a correct suggestion"] >= 5, figures  # a third of 13
    # the resolution runs: no NameError, no call made twice, every check passes
    assert figures["undefined names (F821)"] == 0 and findings["errors"] == 0, result.stdout
    assert not then  # the runners the series reproduces have none of these
    # imports follow the resolution: pq continue removed what the resolved code no longer reads (the refresh's
    # imports for sides not taken, and the runners' `import time`, whose only use was the omni timing code that
    # upstream's profiling-chunk helpers replaced); pq check and ruff agree
    assert unused == [] and not any(f["rule"] == "import-unused" for f in findings["findings"]), figures
