"""Where a maintainer's edits go (patch_queue/series/absorb.py): a line written inside a carried upstream method goes
into the patch that carries that method's omni edits, never into the module's skeleton, whose copy of every carried
method stays upstream's text as projected; by `pq continue` after a resolved refresh and by `pq record`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from conftest import copy_project, git, new_project, pq, resolve_all

from patch_queue.merge import pieces

GEN = "npu_generation_model_runner.py"
HAND = "assert num_reqs >= 0  # hand-ported"


def show(proj: Path, commit: str, path: str) -> str:
    return git(proj, "show", f"{commit}:{path}")


def skeleton_drift(proj: Path) -> dict[str, list[str]]:
    """Per runner module, the carried upstream symbols whose copy in the module's skeleton patch (the first patch
    of refs/pq/top that writes the module) is not their text in the projection (the module in refs/pq/base)."""
    base = git(proj, "rev-parse", "refs/pq/base").strip()
    chain = git(proj, "rev-list", "--reverse", f"{base}..refs/pq/top").split()
    modules = [p for p in git(proj, "ls-tree", "--name-only", base).split() if p.endswith(".py")]
    assert modules, "the base holds no projected module"
    out: dict[str, list[str]] = {}
    for path in modules:
        projected = show(proj, base, path)
        carried = set(re.findall(r"^(?: {4})?(?:async def|def|class) (\w+)", projected, re.M))
        skeleton = next(c for c in chain if show(proj, c, path) != show(proj, f"{c}~1", path))
        copies = {n: s for n, s in pieces.symbols_of(show(proj, skeleton, path)).items() if n.split(".")[-1] in carried}
        assert len(copies) >= len(carried), (path, carried, sorted(copies))
        out[path] = sorted(n for n, s in copies.items() if s.text not in projected)
    return out


def patch_of(proj: Path, needle: str) -> list[str]:
    """The patches whose body adds the line ``needle``."""
    series = [n for n in (proj / "patches" / "series").read_text().split() if n.endswith(".patch")]
    return [
        n
        for n in series
        if any(line.startswith("+") and needle in line for line in (proj / "patches" / n).read_text().splitlines())
    ]


def insert_after(path: Path, method: str, anchor: str, line: str) -> int:
    """Insert ``line`` after the first line of the method ``method`` (``.name``) of ``path`` that is ``anchor``
    (stripped), at its indentation; its 1-based number."""
    text = path.read_text()
    (sym,) = [s for n, s in pieces.symbols_of(text).items() if n.endswith(method)]
    lines = text.splitlines(keepends=True)
    at = next(i for i in range(sym.start - 1, sym.end) if lines[i].strip() == anchor)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines.insert(at + 1, f"{indent}{line}\n")
    path.write_text("".join(lines))
    return at + 2


def test_continue_puts_a_line_written_in_a_carried_method_into_its_patch(refreshed_030: Path) -> None:
    # the maintainer resolves every region, then ports a line by hand between two clean upstream lines of the
    # generation runner's execute_model (which 0.30.0's series carries, in the skeleton as upstream wrote it)
    proj = refreshed_030
    assert resolve_all(proj, "--keep-patch") > 0
    runner = proj / "npu_worker" / GEN
    line = insert_after(runner, ".execute_model", "num_reqs = self.input_batch.num_reqs", HAND)
    out = pq(proj, "continue", "--accept-errors").stdout
    (method_patch,) = [p for p in patch_of(proj, HAND)]
    assert method_patch.endswith("-npu-generation-model-runner-execute-model.patch"), method_patch
    assert f"recorded: npu_worker/{GEN}:{line} +1 -0 into patches/{method_patch}" in out, out
    assert HAND in runner.read_text()
    assert skeleton_drift(proj) == {p: [] for p in skeleton_drift(proj)}


def test_record_puts_a_line_written_in_a_carried_method_into_its_patch(adopted_030: Path, tmp_path: Path) -> None:
    proj = copy_project(adopted_030, tmp_path / "p")
    runner = proj / "npu_worker" / GEN
    first = insert_after(runner, ".execute_model", "num_reqs = self.input_batch.num_reqs", HAND)
    out = pq(proj, "record").stdout
    (method_patch,) = patch_of(proj, HAND)
    assert method_patch.endswith("-npu-generation-model-runner-execute-model.patch"), method_patch
    assert f"recorded: npu_worker/{GEN}:{first} +1 -0 into patches/{method_patch}" in out, out
    # a new method after a carried one is no edit of it: the skeleton takes it
    text = runner.read_text()
    (sym,) = [s for n, s in pieces.symbols_of(text).items() if n.endswith(".execute_model")]
    lines = text.splitlines(keepends=True)
    lines.insert(sym.end, "\n    def omni_helper(self):\n        return None\n")
    runner.write_text("".join(lines))
    out = pq(proj, "record").stdout
    (skeleton,) = patch_of(proj, "def omni_helper(self):")
    assert skeleton.endswith("-npu-generation-model-runner.patch"), (skeleton, out)
    assert all(not methods for methods in skeleton_drift(proj).values()), skeleton_drift(proj)


def test_every_skeleton_carries_upstream_text_after_a_resolved_refresh(upstream_resolved_once: Path) -> None:
    # 0.30.0 onto vllm-ascend 0.30.0rc2, patch by patch, every region to upstream's side, `pq continue` each time
    drift = skeleton_drift(upstream_resolved_once)
    assert len(drift) == 3 and all(not methods for methods in drift.values()), drift


def test_this_repositorys_series_reproduces_byte_for_byte(corpus: Path, tmp_path: Path) -> None:
    """The series this repository commits (patches/queue.toml and series: vllm-omni 0.30.0 adopted, then 0.32.0rc1
    merged, recorded by an earlier pq), in a fresh project: `pq reproduce` gives every body the lineage records.
    Its merge step records no ``placed``, so `pq reproduce` puts the release's edits of upstream lines where that step
    put them (the skeleton), not into the carried method's patch as `pq merge` does now: when it did, 16 of the 18
    bodies differed."""
    root = Path(__file__).resolve().parents[1]
    proj = new_project(tmp_path / "p")
    (proj / "patches").mkdir()
    for name in ("queue.toml", "series"):
        shutil.copy(root / "patches" / name, proj / "patches" / name)
    out = pq(proj, "reproduce").stdout
    assert "every sha256 as queue.toml records" in out and "differs:" not in out, out


def test_record_on_a_series_with_skeleton_drift_adds_none(seeded_once: Path, tmp_path: Path) -> None:
    """The merge step of this repository's series, recorded by an earlier pq, placed the release's edits of upstream
    lines in the skeleton (and reproduces so), so the series holds edits of five carried methods in their skeletons
    (`pq continue` moves them once a refresh is through: test_maintainer_resolution); a `pq record` there still puts
    a line written inside a carried method into the method's patch, not into the skeleton, and adds no drift."""
    proj = copy_project(seeded_once, tmp_path / "p")
    drift = skeleton_drift(proj)
    assert sum(len(names) for names in drift.values()) == 5, drift
    runner = proj / "npu_worker" / GEN
    line = insert_after(runner, ".execute_model", "num_reqs = self.input_batch.num_reqs", HAND)
    bodies = {p.name: p.read_bytes() for p in sorted((proj / "patches").glob("*.patch"))}
    out = pq(proj, "record").stdout
    method_patch = "0009-npu-generation-model-runner-execute-model.patch"
    assert f"recorded: npu_worker/{GEN}:{line} +1 -0 into patches/{method_patch}" in out, out
    assert patch_of(proj, HAND) == [method_patch]
    # the series' bodies are in form 1 (git's `From <commit id>` line), which the record writes again in form 2:
    # that line aside
    changed = sorted(
        p.name
        for p in sorted((proj / "patches").glob("*.patch"))
        if p.read_bytes().split(b"\n", 1)[1] != bodies[p.name].split(b"\n", 1)[1]
    )
    # the method's patch, and the later patches of that module (their line numbers and blob ids), nothing else
    assert changed == [method_patch] + [n for n in changed if n > method_patch and "-npu-generation-model-" in n]
    assert skeleton_drift(proj) == drift
