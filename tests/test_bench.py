"""bench/bench.py --quick on one real upgrade (vllm-omni 0.18.0 -> 0.20.0): the tables are there and parse;
the work saved measures on small texts; bench/work_saved.py on that upgrade."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPT = BENCH / "bench.py"
sys.path.insert(0, str(BENCH))

import conflict_metrics as cm  # noqa: E402

import bench  # noqa: E402


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
    out, keep = tmp_path / "docs", tmp_path / "work"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--keep", str(keep)],
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
        "## 5. Work saved on real history",
    ):
        assert heading in text
    assert "bench/bench.py --quick --out" in text and "- pygit2: " in text and "- git: git version" in text

    [quality] = _table(text, "upgrade")
    assert quality[0] == "0.18.0 → 0.20.0"
    patches, conflicts, flags = (int(quality[i]) for i in (3, 4, 5))
    # the conflict regions the report lists are the regions marked in the refreshed project's modules
    marked = sum(
        cm.count_regions(p.read_text(encoding="utf-8")) for p in (keep / "u0" / "old" / "npu_worker").glob("*.py")
    )
    assert patches > 0 and conflicts == marked > 0 and flags >= 0
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
    pq_s, rebase_s, fair_s, cold_s = (_number(speed[i]) for i in (1, 2, 3, 5))
    assert fair_s > rebase_s  # the fair baseline is git rebase and the checks after it
    for seconds, cell in ((pq_s, speed[4]), (cold_s, speed[6])):
        # each ratio is of one pair: of two pairs, the ratio of the medians lies between the two ratios
        spread = re.fullmatch(r"([\d.]+) \(([\d.]+)–([\d.]+), n=(\d+)\)", cell)
        assert spread, cell
        median_, low, high, n = (float(x) for x in spread.groups())
        assert n == 2 and low <= median_ <= high and 0.97 * low <= seconds / fair_s <= 1.03 * high  # (rounded)
    goals = _table(text, "measure")
    assert len(goals) == 7 and all(g[3] in ("yes", "**no**") for g in goals)
    assert _number(goals[0][1]) > 0 and _number(goals[1][1]) > 0  # refresh ratios, warm and cold
    assert _number(goals[2][1]) > 0 and _number(goals[3][1]) > 0  # adopt seconds, warm and cold
    startup = re.fullmatch(r"([\d.]+) s / ([\d.]+) s \(([\d.]+)x / ([\d.]+)x\)", goals[4][1])
    assert startup, goals[4][1]
    assert all(float(x) > 1 for x in startup.groups()[2:])  # a pq process does more than `python -c pass`
    assert _number(goals[5][1].rstrip("x")) > 0  # scale speed-up
    scale = _table(text, "patches | revisions")
    assert [int(r[0]) for r in scale] == [10, 30]
    for row in scale:  # one pair each (--quick): the speed-up is that pair's git rebase s / pq s
        pairs, pq_s, rebase_s = int(row[3]), _number(row[4]), _number(row[6])
        ratio, low, high = (float(x) for x in re.findall(r"[\d.]+", row[7]))
        assert pairs == 1 and low == ratio == high
        # the seconds and the ratio are rounded to 2 decimals: the ratio lies within what that rounding allows
        least = (rebase_s - 0.005) / (pq_s + 0.005) - 0.005
        most = (rebase_s + 0.005) / (pq_s - 0.005) + 0.005 if pq_s > 0.005 else math.inf
        assert least <= ratio <= most, (ratio, rebase_s, pq_s)
    culprits = _table(text, "upgrade | candidates")
    for row in culprits:
        assert int(row[1]) >= 0 and _number(row[5]) >= 0

    [saved, saved_total] = _table(text, "upgrade | d(old, maint)")
    assert saved[0] == "0.18.0 → 0.20.0" and saved_total[0] == "**total**" and saved[1:] == saved_total[1:]
    d_old, d_pq = int(saved[1]), int(saved[2])
    assert d_old > 0 and d_pq == total  # section 1's distance is the same measure
    assert sum(int(cell) for cell in saved[6:10]) == d_pq and int(saved[6]) + int(saved[7]) == up
    assert saved[3] == f"{1 - d_pq / d_old:.1%}"
    assert _number(saved[5].rstrip("%")) >= max(_number(saved[3].rstrip("%")), _number(saved[4].rstrip("%")))
    for cell in saved[10:]:
        assert re.fullmatch(r"\d+/\d+ \(\d+\.\d%\)|n/a \(0 lines\)", cell), cell

    if importlib.util.find_spec("matplotlib") is not None:
        png = out / "benchmark.png"
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_work_saved_alone(corpus: Path, tmp_path: Path) -> None:
    md, data = tmp_path / "ws.md", tmp_path / "ws.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "work_saved.py"), "--only", "0.18.0", "--out", str(md), "--json", str(data)],
        capture_output=True,
        text=True,
        env={**os.environ, "PQ_CORPUS": str(corpus)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = md.read_text(encoding="utf-8")
    assert proc.stdout == text and "Written by" not in text  # no date or timing: two commits' outputs diff
    [row, total] = _table(text, "upgrade | d(old, maint)")
    assert row[0] == "0.18.0 → 0.20.0" and row[1:] == total[1:]
    [measured] = json.loads(data.read_text(encoding="utf-8"))
    w = measured["work_saved"]
    assert measured["error"] is None and [w["d_old"], w["d_pq"]] == [int(row[1]), int(row[2])]
    assert w["split"]["total"] == w["d_pq"]


# -- the pure measures, on texts small enough to count by hand --------------------------------------


def test_distance_counts_code_lines_as_multisets() -> None:
    a = {"m.py": "import os\n\n# comment\nx = 1\nx = 1\n  y = 2  \n", "only_a.py": "a = 1\n# c\nb = 2\n"}
    b = {"m.py": "import os\ny = 2\nx = 1\nz = 3\n    # indented comment\n", "only_b.py": "q = 1\n"}
    # m.py: one "x = 1" too many, "z = 3" missing (order does not count); only_a.py 2 lines, only_b.py 1
    assert cm.distance(a, b) == cm.distance(b, a) == 5
    assert cm.distance(a, a) == 0
    assert cm.code_multiset("x = 1  # trailing\n#x\n") == Counter({"x = 1  # trailing": 1})
    assert cm.multiset_distance(Counter({"x": 3, "y": 1}), Counter({"x": 1, "z": 2})) == 5


def test_take_side_of_diff3_regions() -> None:
    text = (
        "a\n<<<<<<< new\nU1\n||||||| old\nB1\n=======\nP1\nP2\n>>>>>>> 0002-x.patch\nb\n"
        "<<<<<<< new (deleted)\n||||||| old\n=======\nS\n>>>>>>> 0003-y.patch\n"
        "<<<<<<< new\nU2\n=======\nP3\n>>>>>>> 0004-z.patch\n"
    )
    assert cm.take_side(text, "patch") == "a\nP1\nP2\nb\nS\nP3\n"
    assert cm.take_side(text, "upstream") == "a\nU1\nb\nU2\n"
    with pytest.raises(KeyError):
        cm.take_side(text, "base")


def test_split_difference_four_ways() -> None:
    upstream = {"up_a()", "up_b()", "up_c()"}
    pq = {"m.py": "up_a()\nup_b()\nup_b()\nomni_x()\nomni_y()\n"}
    maint = {"m.py": "up_a()\nup_c()\nomni_x()\nomni_z()\nomni_z()\n", "n.py": "up_c()\nomni_w()\n"}
    split = cm.split_difference(pq, maint, upstream)
    # m.py: pq only up_b x2, omni_y; maintainers only up_c, omni_z x2; n.py (maintainers only): up_c, omni_w
    assert split == cm.Split(upstream_maintainers_only=2, upstream_pq_only=2, omni_maintainers_only=3, omni_pq_only=1)
    assert split.as_json()["total"] == cm.distance(pq, maint) == 8


def test_recall_and_precision_of_ported_lines() -> None:
    old = {"m.py": "keep()\nold_omni()\n"}
    upstream = {"up()"}
    gpu = {"gpu_port()", "gpu_port2()", "old_omni()", "up()"}
    maint = {"m.py": "keep()\nold_omni()\nup()\ngpu_port()\ngpu_port()\ngpu_port2()\nmaint_own()\n"}
    pq = {"m.py": "keep()\nold_omni()\nup()\ngpu_port()\nimport torch\nwrong()\n", "other.py": "gpu_port2()\n"}
    # GPU-side omni lines: gpu_port x2, gpu_port2 (old_omni is old, up() upstream, maint_own not in gpu/)
    assert cm.gpu_side_recall(pq, maint, old, upstream, gpu) == (2, 3)
    # pq wrote gpu_port, import torch, wrong(), gpu_port2; the maintainers have gpu_port and gpu_port2
    assert cm.ported_precision(pq, maint, old, upstream) == (2, 4)
    assert cm.ported_precision(old, maint, old, upstream) == (0, 0)
    # without the lines of a port the maintainers did not make (wrong()): a multiset, comments ignored
    assert cm.ported_precision(pq, maint, old, upstream, ["  wrong()", "# note", "never_written()"]) == (2, 3)
    assert bench.share(0, 0) == "n/a (0 lines)" and bench.share(2, 4) == "2/4 (50.0%)"


def test_work_saved_takes_the_patch_side() -> None:
    old = {"m.py": "a\nb\n"}
    maint = {"m.py": "a\nb2\nc\n"}
    output = {"m.py": "a\n<<<<<<< new\nu\n||||||| old\nb\n=======\nb2\n>>>>>>> p\nc\n"}
    got = cm.work_saved(output, old, maint, "a\nc\nu\n", ["b2\n"])
    assert got == {
        "d_old": 3,  # b removed, b2 and c added
        "d_pq": 0,  # a, b2, c
        "d_pq_upstream_side": 2,  # a, u, c: u removed, b2 added
        "d_ceiling": 0,  # the patch side already matches
        "split": {
            "upstream_maintainers_only": 0,
            "upstream_pq_only": 0,
            "omni_maintainers_only": 0,
            "omni_pq_only": 0,
            "upstream": 0,
            "omni": 0,
            "total": 0,
        },
        "recall": [1, 1],  # b2: omni, new, in gpu/
        "precision": [1, 1],  # b2 again: pq wrote it, the maintainers have it
        "precision_ported": [1, 1],  # no line left out
    }
    assert cm.saved(got["d_pq"], got["d_old"]) == 1.0
    assert cm.saved(got["d_pq_upstream_side"], got["d_old"]) == pytest.approx(1 / 3)
    assert cm.saved(5, 0) is None


def test_the_ceiling_of_a_gpu_sync_adds_gpu_lines_and_drops_what_the_gpu_side_removed() -> None:
    pq = {"m.py": "a\nold_omni()\nkept_omni()\nu_new\n"}
    maint = {"m.py": "a\nported()\nown()\nu_old\n", "n.py": "ported2()\n"}
    upstream = {"a", "u_new", "u_old"}
    gpu = {"ported()", "ported2()", "u_old"}
    # old_omni, kept_omni, u_new only pq's; ported, own, u_old, ported2 only the maintainers'
    assert cm.distance(pq, maint) == 7
    # a sync adds ported() and ported2() (omni, on the GPU side) and drops old_omni() (the GPU side removed
    # it); own() is not on the GPU side, kept_omni() was not removed there, u_old/u_new are upstream lines
    assert cm.sync_ceiling(pq, maint, upstream, gpu, {"old_omni()", "u_new"}) == 4
    assert cm.sync_ceiling(pq, maint, upstream, set(), set()) == 7


def test_work_saved_total_sums_the_distances() -> None:
    def row(title: str, d_old: int, d_pq: int, precision: list[int]) -> bench.Json:
        split = dict.fromkeys(bench.SPLIT, 0) | {"omni_pq_only": d_pq}
        work = {"d_old": d_old, "d_pq": d_pq, "d_pq_upstream_side": d_old, "d_ceiling": d_pq, "split": split}
        return {"title": title, "work_saved": work | {"recall": [1, 4], "precision": precision}}

    rows = [row("u1", 10, 5, [0, 0]), row("u2", 90, 90, [3, 4]), {"title": "u3", "error": "boom"}]
    lines = bench.render_work_saved(rows)
    u1, u2, total = _table("\n".join(lines), "upgrade | d(old, maint)")
    assert u1[1:5] == ["10", "5", "50.0%", "0.0%"] and u1[-1] == "n/a (0 lines)"
    assert u2[3] == "0.0%"
    # 1 - 95/100, not the mean of 50% and 0%
    assert total[:6] == ["**total**", "100", "95", "5.0%", "0.0%", "5.0%"]
    assert total[6:] == ["0", "0", "0", "95", "2/8 (25.0%)", "3/4 (75.0%)"]


def test_mainsh_phases_take_pq_s_parts_out_of_main_sh_s_steps() -> None:
    timings = (
        "step set-up 10.000\nstep download 0.100\nwithin download 0.400\nstep reproduce 2.000\n"
        "within download 0.500\nwithin check 1.000\nstep refresh 4.000\n"
    )
    phases = bench.mainsh_phases(timings)
    assert phases == pytest.approx(
        {"set-up": 10.0, "download": 1.0, "reproduce": 1.6, "merge": 0.0, "refresh": 2.5, "check": 1.0}
    )
    assert sum(phases.values()) == pytest.approx(16.1)  # the steps' total: nothing counted twice
