"""scripts/bench.py --quick on one real upgrade (vllm-omni 0.18.0 -> 0.20.0): the tables are there and parse."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench.py"


def _table(text: str, first_header: str) -> list[list[str]]:
    """The data rows of the Markdown table whose header starts with ``| first_header |``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    assert set(lines[start + 1].replace("|", "")) == {"-"}
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _number(cell: str) -> float:
    found = re.match(r"\*{0,2}(\d+(?:\.\d+)?)", cell)
    assert found, f"not a number: {cell!r}"
    return float(found[1])


def test_quick_bench_on_one_upgrade(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "docs"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PQ_CORPUS": str(corpus)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (out / "benchmark.md").read_text(encoding="utf-8")
    for heading in (
        "## Machine",
        "## 1. Quality on real history",
        "## 2. Baselines in the same run",
        "## 3. Speed",
        "## 4. Scale",
    ):
        assert heading in text
    assert "scripts/bench.py --quick --out" in text and "- pygit2: " in text and "- git: git version" in text

    [quality] = _table(text, "upgrade")
    assert quality[0] == "0.18.0 → 0.20.0"
    patches, conflicts, flags = (int(quality[i]) for i in (3, 4, 5))
    assert patches > 0 and conflicts >= 0 and flags >= 0
    before, after = (int(x) for x in quality[6].split("→"))
    assert before > 0 and after >= 0
    got, added = (int(x) for x in quality[7].split("/"))
    assert 0 <= got <= added
    total, up, omni = (int(x) for x in re.findall(r"\d+", quality[8]))
    assert total == up + omni

    [baseline] = _table(text, "upgrade | pq conflicts")
    assert int(baseline[1]) == conflicts and int(baseline[3]) >= 0 and int(baseline[5]) >= 0

    [speed] = _table(text, "upgrade | pq refresh s")
    assert all(_number(cell) > 0 for cell in speed[1:])
    goals = _table(text, "measure")
    assert len(goals) == 7 and all(g[3] in ("yes", "**no**") for g in goals)
    assert _number(goals[0][1]) > 0 and _number(goals[1][1]) > 0  # refresh ratios, warm and cold
    assert _number(goals[2][1]) > 0 and _number(goals[3][1]) > 0  # adopt seconds, warm and cold
    assert _number(goals[4][1]) > 0  # start-up seconds
    assert _number(goals[5][1].rstrip("x")) > 0  # scale speed-up
    culprits = _table(text, "upgrade | candidates")
    for row in culprits:
        assert int(row[1]) >= 0 and _number(row[5]) >= 0

    if importlib.util.find_spec("matplotlib") is not None:
        png = out / "benchmark.png"
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
