"""The StGit verbs (issue 15, part 4): goto, push/pop NAME, show, diff, delete, rename, record --patch, an
empty pq new, undo/redo; each against what StGit documents for the same case (its t/ tests), on the real
corpus with real git.  Where pq differs from StGit it says why in docs/commands.md ("StGit parity")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import copy_project, git, pq, push_to_bare, state

BASE_030 = "cf0baa38dfb2"
RUNNER = "npu_worker/npu_model_runner.py"


@pytest.fixture
def proj(adopted_030: Path, tmp_path: Path) -> Path:
    return copy_project(adopted_030, tmp_path / "p")


def names(p: Path) -> list[str]:
    return [n for n in (p / "patches" / "series").read_text().split() if n.endswith(".patch")]


def applied(p: Path) -> list[str]:
    return [line.split()[1] for line in pq(p, "series").stdout.splitlines() if line[:2] in ("+ ", "> ")]


def error(proc: object) -> str:
    stderr = getattr(proc, "stderr", "")
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pq: error: "), stderr
    return lines[0]


def test_goto_pushes_or_pops_to_the_patch(proj: Path) -> None:
    # t1700-goto.sh: goto the current patch is a no-op; goto p3 leaves p1..p3 applied; an unknown name fails
    series = names(proj)
    pq(proj, "goto", series[-1])
    assert applied(proj) == series
    assert "applied 3 of the series (was 16)" in pq(proj, "goto", "npu-ar-model-runner").stdout
    assert applied(proj) == series[:3]
    pq(proj, "goto", series[9].removesuffix(".patch"))
    assert applied(proj) == series[:10]
    before = state(proj)
    assert error(pq(proj, "goto", "p999", check=1)) == "pq: error: patches/series: patch `p999` does not exist"
    assert state(proj) == before


def test_push_and_pop_a_named_patch(proj: Path) -> None:
    # t1208-push-and-pop.sh: pushing an applied patch fails ("is already applied"), an unknown one "does not
    # exist"; pq pops NAME with every patch above it (StGit 2 reorders to pop NAME alone: see docs/commands.md)
    series = names(proj)
    pq(proj, "pop", series[5])
    assert applied(proj) == series[:5]
    assert error(pq(proj, "pop", series[7], check=1)).endswith(f"patch `{series[7]}` is not applied")
    pq(proj, "push", series[8])
    assert applied(proj) == series[:9]
    before = state(proj)
    assert error(pq(proj, "push", series[0], check=1)) == (
        f"pq: error: patches/series: patch `{series[0]}` is already applied"
    )
    assert error(pq(proj, "push", "p99999", check=1)).endswith("patch `p99999` does not exist")
    assert state(proj) == before
    pq(proj, "push", "--all")
    assert error(pq(proj, "push", check=1)) == "pq: error: no unapplied patches"
    pq(proj, "pop", "--all")
    assert error(pq(proj, "pop", check=1)) == "pq: error: no patches applied"


def test_show_and_diff(proj: Path) -> None:
    # t0005-show.sh: show without a name is the top patch; t2400-diff.sh: diff is the work tree against it
    series = names(proj)
    assert pq(proj, "show").stdout == (proj / "patches" / series[-1]).read_text()
    assert pq(proj, "show", "init").stdout == (proj / "patches" / series[0]).read_text()
    assert pq(proj, "diff").stdout == ""
    runner = proj / RUNNER
    runner.write_text(runner.read_text() + "# a maintainer's edit\n")
    diff = pq(proj, "diff").stdout
    assert diff.startswith(f"diff --git a/{RUNNER} b/{RUNNER}\n--- a/{RUNNER}\n+++ b/{RUNNER}\n"), diff
    assert diff.rstrip("\n").endswith("+# a maintainer's edit")
    assert error(pq(proj, "show", "nope", check=1)).endswith("patch `nope` does not exist")


def test_delete(proj: Path) -> None:
    # t1600-delete-one.sh: delete a dirty top fails; delete the top, an unapplied one, an applied non-top one
    series = names(proj)
    runner = proj / RUNNER
    runner.write_text(runner.read_text() + "# dirty\n")
    before = state(proj)
    assert "has edits no patch holds" in error(pq(proj, "delete", series[-1], check=1))
    assert state(proj) == before
    assert "deleted patches/" + series[-1] in pq(proj, "delete", "--top", "--discard").stdout
    pq(proj, "pop")
    pq(proj, "delete", series[-2])  # unapplied
    assert names(proj) == series[:-2] and applied(proj) == series[:-2]
    pq(proj, "delete", series[6])  # applied, not the top: the patches above are applied again without it
    assert names(proj) == series[:6] + series[7:-2] and applied(proj) == names(proj)
    assert not (proj / "patches" / series[6]).exists()
    assert error(pq(proj, "delete", "bar", check=1)).endswith("patch `bar` does not exist")
    pq(proj, "pop", "--all")
    assert error(pq(proj, "delete", "--top", check=1)) == "pq: error: no patches applied"


def test_rename(proj: Path) -> None:
    # t2900-rename.sh: rename the top (one argument), OLD NEW, to an existing name, to the same name, a name
    # that differs in case only, an invalid name
    series = names(proj)
    body = (proj / "patches" / series[-1]).read_bytes()
    assert "to patches/0016-forward.patch" in pq(proj, "rename", "forward").stdout
    assert (proj / "patches" / "0016-forward.patch").read_bytes() == body
    assert not (proj / "patches" / series[-1]).exists()
    pq(proj, "rename", "init", "package-init")
    assert names(proj)[0] == "0001-package-init.patch"
    before = state(proj)
    assert error(pq(proj, "rename", "forward", "base", check=1)) == (
        "pq: error: patches/series: patch `base` already exists (0002-base.patch)"
    )
    assert error(pq(proj, "rename", "forward", "forward", check=1)).endswith(
        "patch `forward` already exists (0016-forward.patch)"
    )
    assert "new name `Base` collides with `base`" in error(pq(proj, "rename", "forward", "Base", check=1))
    assert "invalid patch name `bar fo`" in error(pq(proj, "rename", "forward", "bar fo", check=1))
    assert error(pq(proj, "rename", "neithersuchpatch", "norsuchpatch", check=1)).endswith("does not exist")
    assert state(proj) == before
    pq(proj, "rename", "forward", "Forward")  # its own name in another case: fine


def test_record_into_a_named_patch(proj: Path) -> None:
    # t2701-refresh-p.sh: refresh -p PATCH puts the changes into PATCH; pq takes only an applied one
    series = names(proj)
    runner = proj / RUNNER
    runner.write_text(runner.read_text() + "# into the dummy run patch\n")
    out = pq(proj, "record", "--patch", "npu-model-runner-dummy-run").stdout
    assert f"into patches/{series[14]}" in out, out
    assert "+# into the dummy run patch" in (proj / "patches" / series[14]).read_text()
    pq(proj, "pop", series[10])
    target = proj / "npu_worker" / "npu_ar_model_runner.py"
    target.write_text(target.read_text() + "# more\n")
    assert error(pq(proj, "record", "--patch", series[12], check=1)).endswith(
        f"patch `{series[12]}` is not applied; `pq goto {series[12]}` first"
    )


def test_new_without_edits_is_an_empty_patch(proj: Path) -> None:
    # t1003-new.sh: stg new makes an empty patch; its body is what `git format-patch --always` writes
    pq(proj, "pop", "--all")
    pq(proj, "push")
    out = pq(proj, "new", "later", "-m", "npu: a patch to fill").stdout
    assert "created patches/0017-later.patch" in out
    body = (proj / "patches" / "0017-later.patch").read_text()
    assert body.endswith("Subject: [PATCH] npu: a patch to fill\n\n") and "diff --git" not in body
    assert applied(proj) == names(proj)[:2] and names(proj)[1] == "0017-later.patch"
    assert pq(proj, "show").stdout == body
    pq(proj, "push", "--all")  # the rest applies on it unchanged
    assert error(pq(proj, "new", "base", check=1)).endswith("patch `base` already exists (0002-base.patch)")
    init = proj / "npu_worker" / "__init__.py"  # 0001 writes it, the empty patch comes after it
    init.write_text(init.read_text() + "# filled\n")
    pq(proj, "record", "--patch", "later")
    assert "+# filled" in (proj / "patches" / "0017-later.patch").read_text()


def undo_state(p: Path) -> dict[str, object]:
    """state() but for the refs pq undo leaves: its own (refs/pq/undo holds what redo needs) and the recorded
    edits (refs/pq/resolutions only grows)."""
    out = state(p)
    refs = str(out["refs"]).splitlines(keepends=True)
    keep = [r for r in refs if not r.startswith(("refs/pq/undo ", "refs/pq/resolutions "))]
    return {**out, "refs": "".join(keep)}


def test_undo_restores_every_byte_and_redo_takes_it_back(proj: Path) -> None:
    # t3102-undo.sh: pop, undo: as before; undo past the history fails; redo only after an undo
    assert "no command pq can undo" in error(pq(proj, "undo", check=1))
    before = undo_state(proj)
    pq(proj, "pop", "npu-ar-worker")
    popped = undo_state(proj)
    assert "undid `pq pop`" in pq(proj, "undo").stdout
    assert undo_state(proj) == before
    assert "pq keeps the last command only" in error(pq(proj, "undo", check=1))
    assert "took back `pq undo`" in pq(proj, "redo").stdout
    assert undo_state(proj) == popped
    assert "not an undo: nothing to redo" in error(pq(proj, "redo", check=1))
    pq(proj, "goto", names(proj)[-1])
    for args in (["delete", "npu-ar-worker"], ["rename", "top"], ["new", "empty"]):
        before = undo_state(proj)
        pq(proj, *args)
        pq(proj, "undo")
        assert undo_state(proj) == before, args
    # something changed since: refused, nothing written
    pq(proj, "delete", "--top")
    series = proj / "patches" / "series"
    series.write_text(series.read_text() + "\n")
    before = state(proj)
    assert error(pq(proj, "undo", check=1)) == (
        "pq: error: patches/series: changed since `pq delete`; pq undoes the last command only while what it "
        "wrote is unchanged: nothing was written"
    )
    assert state(proj) == before


def test_verbs_refuse_unrecorded_edits_and_a_pending_refresh(proj: Path) -> None:
    runner = proj / RUNNER
    runner.write_text(runner.read_text() + "# unrecorded\n")
    before = state(proj)
    for args in (["goto", "init"], ["pop", "init"], ["delete", "init"], ["rename", "x"], ["undo"]):
        proc = pq(proj, *args, check=1)
        if args != ["undo"]:
            assert "has edits no patch holds" in error(proc), args
    assert state(proj) == before
    pq(proj, "goto", "init", "--discard")
    assert "# unrecorded" not in runner.read_text()


def test_a_fresh_clone_reproduces_delete_rename_and_an_empty_patch(released_030_once: Path, tmp_path: Path) -> None:
    mine = copy_project(released_030_once, tmp_path / "mine")  # `pq adopt vllm-omni==0.30.0 --at BASE_030`
    series = names(mine)
    pq(mine, "delete", series[6])  # re-applies 0008..0016 without it
    pq(mine, "rename", series[10], "generation-dummy-run")
    pq(mine, "goto", series[3])
    pq(mine, "new", "placeholder", "-m", "npu: to be filled")
    pq(mine, "push", "--all")
    origin = push_to_bare(mine, "verbs")
    git(mine, "push", "-q", str(origin), "refs/pq/resolutions")
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(origin), str(fresh))
    git(fresh, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
    assert "every sha256 as queue.toml records" in pq(fresh, "reproduce").stdout
    assert names(fresh) == names(mine)
    for name in names(mine):
        assert (fresh / "patches" / name).read_bytes() == (mine / "patches" / name).read_bytes(), name
    for f in sorted((mine / "npu_worker").iterdir()):
        assert (fresh / "npu_worker" / f.name).read_bytes() == f.read_bytes(), f.name
    shutil.rmtree(fresh)


def test_series_marks_the_top_and_prints_json(proj: Path) -> None:
    # StGit's `stg series`: > the top patch, + the applied ones below it, - the unapplied ones
    series = names(proj)
    pq(proj, "goto", series[2])
    marks = [line[:2] for line in pq(proj, "series").stdout.splitlines()]
    assert marks == ["+ ", "+ ", "> "] + ["- "] * (len(series) - 3)
    data = json.loads(pq(proj, "series", "--json").stdout)
    assert [p["name"] for p in data["patches"]] == series and data["merge"] is None
    assert [p["name"] for p in data["patches"] if p["top"]] == [series[2]]
    assert [p["applied"] for p in data["patches"]] == [True] * 3 + [False] * (len(series) - 3)
    assert all(p["subject"] for p in data["patches"])


def test_status_json(proj: Path) -> None:
    data = json.loads(pq(proj, "status", "--json").stdout)
    assert data["in_progress"] is None and data["conflicts"] == [] and data["unrecorded"] == []
    assert [p["name"] for p in data["patches"]] == names(proj) and data["upstream"]
    target = proj / "npu_worker" / "npu_model_runner.py"
    target.write_text(target.read_text() + "# an edit\n")
    data = json.loads(pq(proj, "status", "--json").stdout)
    assert data["unrecorded"] == [{"file": "npu_model_runner.py", "added": 1, "removed": 0}]
