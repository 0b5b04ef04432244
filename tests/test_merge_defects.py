"""scripts/merge_defects.py on one real upgrade: the table a change to the merge or the imports is judged by."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_merge_defects_on_one_real_upgrade(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "defects.md"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "merge_defects.py"), "--only", "0.16.0", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if line.startswith("| ")][1:]
    assert [r[0].strip() for r in rows] == ["0.16.0 → 0.18.0", ""]
    first, second = rows
    # the read of `sampler_output` that upstream added is a region of its own, with the lines that bind it
    assert first[1].strip() == "both-changed 2, name-linked 1, upstream-changed-replaced 1" and int(first[2]) > 0
    assert first[5].strip() == "14 → 14"  # every omni block kept
    for row, side in ((first, "upstream"), (second, "patch")):
        assert row[6].strip() == side
        assert int(row[8]) == 0  # no name the new upstream binds is left undefined
        assert int(row[10]) == 0  # nor a local that only the other side of a region, or the base, binds
        assert int(row[11]) == 0  # no call made twice
