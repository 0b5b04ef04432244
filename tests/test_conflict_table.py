"""bench/conflict_table.py: its pure measurements, and a real run on U3 (vllm-omni 0.18.0 -> 0.20.0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import conflict_metrics as cm  # noqa: E402

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


def test_merge_file_counts_regions() -> None:
    base = "a\nb\nc\nd\ne\n"
    assert cm.merge_file_regions(base, "A\nb\nc\nd\ne\n", "a\nb\nc\nd\nE\n")[0] == 0
    regions, merged = cm.merge_file_regions(base, "a\nb\nX\nd\ne\n", "a\nb\nY\nd\ne\n")
    assert regions == 1 and "||||||| base" in merged


def test_added_lines_and_drops() -> None:
    added = cm.added_lines("x = 1\n\ny = 2\n", "x = 1\n    z = 3\ny = 4\n")
    assert added == ["z = 3", "y = 4"]
    drops = cm.unflagged_drops("m.py", "C.f", added, "  z = 3\n", ["y = 4\n"])
    assert drops == []
    assert [d.line for d in cm.unflagged_drops("m.py", "C.f", added, "", [])] == ["z = 3", "y = 4"]


def test_agreement_uses_context_and_ignores_whitespace() -> None:
    output = "def f():\n\n    a = 1\n    b = 2\n\n    return a\n"
    maintainers = "def f():\n    a=1\n    b  =  2\n    return a\n"
    assert cm.agrees(output, 3, "a = 1\nb = 2\n", maintainers)
    assert not cm.agrees(output, 3, "a = 1\nb = 2\n", "def f():\n    a = 1\n    c = 0\n    b = 2\n    return a\n")


def _flag(kind: str, line: int, resolution: str, upstream: str, patch: str) -> dict[str, object]:
    return {
        "kind": kind,
        "line": line,
        "resolution": resolution,
        "sides": {"base": "", "upstream": upstream, "patch": patch},
    }


def test_decision_agreement_judges_where_the_omni_lines_go() -> None:
    output = (
        "    def f(self):\n"
        "        with ctx():\n"
        "            aux = None  # upstream\n"
        "            hidden, mm = self.extract(hidden)  # omni\n"
        "        return hidden\n"
    )
    flag = _flag(
        "both-inserted",
        3,
        "            aux = None\n            hidden, mm = self.extract(hidden)\n",
        "            aux = None\n",
        "            hidden, mm = self.extract(hidden)\n",
    )
    same = output.replace("  # upstream", "").replace("  # omni", "")
    assert cm.decision_agrees(flag, output, same) == "agree"
    omni_first = (
        "    def f(self):\n        with ctx():\n            hidden, mm = self.extract(hidden)\n"
        "            aux = None\n        return hidden\n"
    )
    assert cm.decision_agrees(flag, output, omni_first) == "disagree"
    # the maintainers never ported upstream's line: only the omni placement is judged
    unported = (
        "    def f(self):\n        with ctx():\n            hidden, mm = self.extract(hidden)\n        return hidden\n"
    )
    assert cm.decision_agrees(flag, output, unported) == "agree"
    # nothing in common to judge
    assert cm.decision_agrees(flag, output, "x = 1\n") == "n/a"


def test_decision_agreement_on_a_kept_replacement() -> None:
    output = "    def g(self):\n        out = omni_build(x)\n        return out\n"
    flag = _flag(
        "kept-replacement",
        2,
        "        out = omni_build(x)\n",
        "        out = build(x, new_flag=True)\n",
        "        out = omni_build(x)\n",
    )
    assert cm.decision_agrees(flag, output, output) == "agree"
    ported = (
        "    def g(self):\n        out = omni_build(x)\n        out = build(x, new_flag=True)\n        return out\n"
    )
    assert cm.decision_agrees(flag, output, ported) == "disagree"


def test_fence_lines_multiset() -> None:
    fence = "    # ----- Omni-new -----\n"
    old = cm.fence_lines(fence * 2 + "x\n")
    assert cm.kept_count(old, cm.fence_lines(fence)) == 1
    assert cm.kept_count(old, cm.fence_lines("  " + fence * 3)) == 2


def test_u3_on_the_corpus(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "table.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "conflict_table.py"), "--only", "0.18.0", "--json", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PQ_CORPUS": str(corpus)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    header, rule, row_line = proc.stdout.splitlines()[:3]
    assert header == "| " + " | ".join(COLUMNS) + " |"
    assert rule.count("|") == len(COLUMNS) + 1
    assert row_line.startswith("| U3 0.18.0 → 0.20.0 |") and row_line.count("|") == len(COLUMNS) + 1

    data = json.loads(out.read_text(encoding="utf-8"))
    [row] = data["upgrades"]
    assert row["key"] == "U3" and row["error"] is None
    assert len(row["target"]) == 40  # the public commit adopt finds for 0.20.0

    baseline = row["baseline"]
    assert baseline["symbols"], "0.18.0 carries upstream methods"
    assert baseline["regions"] == sum(s["regions"] for s in baseline["symbols"]) >= 0
    assert baseline["regions"] == baseline["regions_methods_present"] + baseline["regions_top_level"] + baseline["gone"]

    refresh = row["refresh"]
    assert refresh["exit"] in (0, 3)
    assert refresh["conflicts"] == len(refresh["report"]["conflicts"])
    assert refresh["flags"] == len(refresh["report"].get("flags", []))
    assert (refresh["exit"] == 3) == (refresh["conflicts"] > 0)
    assert set(refresh["reused"]) == {"conflicts", "flags"}

    omni = row["omni"]
    assert omni["total"] > 0
    assert omni["kept"] == omni["total"] == omni["kept_ignoring_whitespace"], omni["files"]
    assert f"| {omni['kept']}/{omni['total']} |" in row_line

    drops = row["drops"]
    assert drops["count"] == len(drops["items"]) >= 0

    agreement = row["agreement"]
    assert 0 <= agreement["agree"] <= agreement["total"]
    assert len(agreement["disagreements"]) == agreement["total"] - agreement["agree"]
    assert set(row["seconds"]) == {"adopt_old", "adopt_new", "merge_file", "refresh"}
