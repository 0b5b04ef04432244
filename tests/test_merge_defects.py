"""bench/merge_defects.py on two real upgrades: the table a change to the merge or the imports is judged by."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from patch_queue.merge import markers

REPO = Path(__file__).resolve().parents[1]


def test_merge_defects_on_real_upgrades(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "defects.md"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "merge_defects.py"), "--only", "0.14.0,0.16.0", "--out", str(out)]
        + ["--keep", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if line.startswith("| ")][1:]
    assert [r[0].strip() for r in rows] == ["0.14.0 → 0.16.0", "", "0.16.0 → 0.18.0", ""]
    # upstream removed ProfileExecuteDuration and rewrote its uses: the old lines on the conflicts' patch
    # side that still read it are rewritten the same way (three in the AR runner's execute_model, two in
    # the generation runner's)
    assert int(rows[0][4]) == 5
    # the read of `sampler_output` that upstream added is a region of its own, with the lines that bind it; the
    # three statements upstream added in code the omni patch replaced (the sampling-done event, the
    # flash_comm_v1 all-gather) are regions showing them, not kept replacements
    first = rows[2]
    kinds = "anchor-lost 1, both-changed 2, name-linked 1, upstream-changed-replaced 3"
    assert first[1].strip() == kinds and int(first[2]) > 0
    assert first[6].strip() == "14 → 14"  # every omni block kept
    for row, side in zip(rows, ("upstream", "patch") * 2, strict=True):
        assert row[7].strip() == side
        assert row[8].strip() == "-"  # each side parses
        assert int(row[9]) == 0  # no name the new upstream binds is left undefined
        assert int(row[10]) == 0  # nor one upstream removed
        assert int(row[11]) == 0  # nor a local that only the other side of a region, or the base, binds
        assert int(row[12]) == 0  # no call made twice
    # the report shows each conflict's sides as npu_worker/ holds them, rewritten lines included
    for upgrade in ("u0", "u1"):
        work = tmp_path / "work" / upgrade
        for c in json.loads((work / "refresh.json").read_text())["conflicts"]:
            region = markers.region_at((work / "old" / "npu_worker" / c["file"]).read_text(), c["line"])
            assert region is not None and region.first == c["line"]
            assert ("".join(region.upstream), "".join(region.patch)) == (c["sides"]["upstream"], c["sides"]["patch"])
