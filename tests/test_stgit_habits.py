"""StGit and quilt habits (issue 34): `pq new` makes an empty patch (git's author and date), `pq record` fills an
empty top patch, `pq redo` after undoing a `pq new`, patch files whose From line is zero (so an edit of one patch
leaves the others' files byte for byte, while a lineage of the older form still reproduces), the verbs edit,
squash, float, sink and import (each a lineage step a fresh clone reproduces), and shell completion of patch
names.  On the real corpus with real git; StGit's behaviour from its documentation and tests (t/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import copy_project, git, new_project, pq, push_to_bare, state
from test_verbs import RUNNER, names, proj  # noqa: F401  (proj: a copy of adopted_030)

REPO = Path(__file__).resolve().parents[1]
ZERO = "From " + "0" * 40 + " Mon Sep 17 00:00:00 2001\n"


def series(p: Path) -> list[str]:
    """`pq series` as (mark, name) lines: `> 0001-x.patch`."""
    return [" ".join(line.split()[:2]) for line in pq(p, "series").stdout.splitlines()]


def reproduced(mine: Path, tmp_path: Path, message: str) -> Path:
    """``mine`` committed and pushed with refs/pq/resolutions, cloned afresh and reproduced (checked against every
    recorded sha256): the clone."""
    origin = push_to_bare(mine, message)
    git(mine, "push", "-q", str(origin), "refs/pq/resolutions")
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(origin), str(fresh))
    git(fresh, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
    assert "every sha256 as queue.toml records" in pq(fresh, "reproduce").stdout
    return fresh


def bodies(p: Path) -> dict[str, bytes]:
    return {n: (p / "patches" / n).read_bytes() for n in names(p)}


def modules(p: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((p / "npu_worker").iterdir()) if f.suffix == ".py"}


def error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pq: error: "), proc.stderr
    return lines[0]


def append(p: Path, rel: str, text: str) -> None:
    path = p / rel
    path.write_text(path.read_text() + text)


def test_new_is_empty_with_gits_author_and_record_fills_it(proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # t1003-new.sh: `stg new` makes an empty patch whatever the work tree holds; `stg refresh` then takes the edits
    append(proj, RUNNER, "# a maintainer's edit\n")
    out = pq(proj, "new", "fill-me", "-m", "npu: to fill").stdout
    assert "created patches/0017-fill-me.patch (empty); `pq record` puts the unrecorded edits" in out, out
    body = (proj / "patches" / "0017-fill-me.patch").read_text()
    assert body == (
        f"{ZERO}From: Test Author <author@example.com>\nDate: Thu, 1 Jan 2026 00:00:00 +0000\n"
        "Subject: [PATCH] npu: to fill\n\n"
    )
    assert "unrecorded: npu_worker/npu_model_runner.py +1 -0" in pq(proj, "status").stdout  # the edit stays
    assert "into patches/0017-fill-me.patch" in pq(proj, "record").stdout  # the empty top patch takes it
    assert "+# a maintainer's edit" in (proj / "patches" / "0017-fill-me.patch").read_text()
    # the identity of the repository's configuration, as git takes it, when no GIT_AUTHOR_* says otherwise
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE"):
        monkeypatch.delenv(key)
    git(proj, "config", "user.name", "Repo Maintainer")
    git(proj, "config", "user.email", "maintainer@example.org")
    append(proj, "npu_worker/npu_ar_worker.py", "# taken\n")
    assert "of the edits of 1 file(s)" in pq(proj, "new", "--record", "taken").stdout
    head = (proj / "patches" / "0018-taken.patch").read_text().splitlines()
    assert (
        head[1] == "From: Repo Maintainer <maintainer@example.org>"
        and head[2] != "Date: Thu, 1 Jan 2026 00:00:00 +0000"
    )
    assert "+# taken" in "\n".join(head) and pq(proj, "diff").stdout == ""


def test_redo_takes_back_the_undo_of_a_new_that_took_the_edits(proj: Path) -> None:
    # t3103-undo-hard.sh / t3105-undo-external-mod.sh: undo and redo are each other's inverse
    append(proj, RUNNER, "# into a new patch\n")
    edited = state(proj)
    pq(proj, "new", "--record", "mine")
    made = state(proj)
    assert "undid `pq new`" in pq(proj, "undo").stdout
    assert state(proj)["files"] == edited["files"]  # the edit is back in npu_worker/, unrecorded
    assert "took back `pq undo`" in pq(proj, "redo").stdout
    assert {k: v for k, v in state(proj).items() if k != "refs"} == {k: v for k, v in made.items() if k != "refs"}


def test_an_edit_of_one_patch_leaves_the_other_files_byte_for_byte(proj: Path) -> None:
    before = bodies(proj)
    assert all(b.decode().startswith(ZERO) for b in before.values())  # git format-patch --zero-commit
    append(proj, "npu_worker/npu_ar_worker.py", "# only this patch\n")
    assert "into patches/0007-npu-ar-worker.patch" in pq(proj, "record").stdout
    after = bodies(proj)
    assert [n for n in after if after[n] != before[n]] == ["0007-npu-ar-worker.patch"]


def test_a_lineage_of_the_older_form_reproduces_and_goes_on_in_the_new_one(corpus: Path, tmp_path: Path) -> None:
    """This repository's own queue.toml (every step in form 1: From <commit id>) reproduces byte for byte; a `pq
    record` after it writes form 2 (only the edited patch is a recorded edit), and a fresh clone reproduces both."""
    mine = new_project(tmp_path / "mine")
    (mine / "patches").mkdir()
    for name in ("queue.toml", "series"):
        shutil.copy(REPO / "patches" / name, mine / "patches" / name)
    assert "bodies = " not in (mine / "patches" / "queue.toml").read_text()
    assert "every sha256 as queue.toml records" in pq(mine, "reproduce").stdout
    old = bodies(mine)
    assert not any(b.decode().startswith(ZERO) for b in old.values())
    append(mine, "npu_worker/npu_ar_worker.py", "# after the old lineage\n")
    pq(mine, "record")
    new = bodies(mine)
    assert all(b.decode().startswith(ZERO) for b in new.values())
    text = (mine / "patches" / "queue.toml").read_text()
    last = text[text.rindex("[[lineage]]") :]
    assert text.count("bodies = 2") == 1 and "bodies = 2" in last
    assert 'edited = [\n    "0007-npu-ar-worker.patch",\n]' in last
    for name in old:  # every other file differs only in its first line
        if name != "0007-npu-ar-worker.patch":
            assert new[name].split(b"\n", 1)[1] == old[name].split(b"\n", 1)[1], name
    fresh = reproduced(mine, tmp_path, "record after a form-1 lineage")
    assert bodies(fresh) == new and modules(fresh) == modules(mine)


def test_edit_rewords_one_patch(proj: Path) -> None:
    # t3300-edit.sh: `stg edit -m` sets the message; the diff and the other patches stay
    before, built = bodies(proj), modules(proj)
    out = pq(proj, "edit", "npu-ar-worker", "-m", "npu_ar_worker: the omni worker\n\nWith a description.").stdout
    assert out == "reworded: patches/0007-npu-ar-worker.patch\n"
    after = bodies(proj)
    assert [n for n in after if after[n] != before[n]] == ["0007-npu-ar-worker.patch"]
    text = after["0007-npu-ar-worker.patch"].decode()
    assert "Subject: [PATCH] npu_ar_worker: the omni worker\n\nWith a description.\n---\n" in text
    assert text.split("\ndiff --git", 1)[1] == before["0007-npu-ar-worker.patch"].decode().split("\ndiff --git", 1)[1]
    assert modules(proj) == built
    message = proj.parent / "message.txt"
    message.write_text("init: the package\n")
    assert "reworded: patches/0016-" in pq(proj, "edit", "--file", str(message)).stdout  # default: the top one
    snap = state(proj)
    assert error(pq(proj, "edit", "init", "-m", "  \n", check=1)).endswith(
        "the message is empty (its first line is the patch's subject)"
    )
    assert "pass -m MESSAGE or --file FILE, not both" in error(
        pq(proj, "edit", "-m", "x", "--file", str(message), check=1)
    )
    assert "description line 1 '---' would end the commit message" in error(pq(proj, "edit", "-m", "x\n\n---", check=1))
    assert state(proj) == snap


def test_squash_float_and_sink(proj: Path) -> None:
    series0, built = names(proj), modules(proj)
    # t2600-squash.sh: p0 p1 p2 p3, squash --name=q0 p1 p2 gives p0 q0 p3 (where the lowest one stood)
    out = pq(
        proj, "squash", "npu-ar-model-runner-sample-tokens", "npu-ar-model-runner-execute-model", "-n", "ar-run"
    ).stdout
    assert out == (
        "squashed 0006-npu-ar-model-runner-sample-tokens.patch, 0005-npu-ar-model-runner-execute-model.patch "
        "into patches/0006-ar-run.patch\n"
    )
    assert names(proj) == [*series0[:4], "0006-ar-run.patch", *series0[6:]]
    body = (proj / "patches" / "0006-ar-run.patch").read_text()
    assert body.count("\ndiff --git ") == 1 and "sample_tokens" in body and "execute_model" in body
    assert modules(proj) == built  # the same changes, one patch
    # t3000-float.sh / t1501-sink.sh: float moves to the top of the applied ones (pushing an unapplied one), sink
    # to the bottom or below --to; omni-only modules here, so every order applies
    s1 = names(proj)
    pq(proj, "goto", s1[9])
    assert "moved 0002-base.patch to the top; applied 10 of the series" in pq(proj, "float", "base").stdout
    assert series(proj)[8:11] == [f"+ {s1[9]}", "> 0002-base.patch", f"- {s1[10]}"]
    pq(proj, "float", "npu-generation-worker")  # unapplied: pushed
    assert series(proj)[10:12] == ["> 0012-npu-generation-worker.patch", f"- {s1[11]}"]
    pq(proj, "sink", "npu-generation-worker", "--to", "init")
    assert series(proj)[:2] == ["+ 0012-npu-generation-worker.patch", "+ 0001-init.patch"]
    assert series(proj)[10] == "> 0002-base.patch"
    pq(proj, "sink")  # the top one, to the bottom
    assert series(proj)[0] == "+ 0002-base.patch" and series(proj)[10] == f"> {s1[9]}"
    pq(proj, "push", "--all")
    assert modules(proj) == built
    snap = state(proj)
    assert error(pq(proj, "squash", "init", check=1)) == "pq: error: squash needs two or more patches"
    assert error(pq(proj, "squash", "init", "0001-init", check=1)).endswith("patch `0001-init.patch` is named twice")
    assert error(pq(proj, "float", "nope", check=1)).endswith("patch `nope` does not exist")
    assert state(proj) == snap
    pq(proj, "pop", "npu-model-runner-update-states")
    snap = state(proj)
    assert error(pq(proj, "sink", "init", "--to", "npu-model-runner-dummy-run", check=1)).endswith(
        "patch `0015-npu-model-runner-dummy-run.patch` is not applied"
    )
    assert state(proj) == snap


def test_import_a_diff_and_a_format_patch_file(proj: Path, tmp_path: Path) -> None:
    # t1800-import.sh: a plain diff and a mail patch each become a patch on top, named after the file
    append(proj, "npu_worker/npu_ar_worker.py", "# from a diff\n")
    diff = tmp_path / "0042-worker-note.diff"
    diff.write_text(pq(proj, "diff").stdout)
    pq(proj, "goto", names(proj)[-1], "--discard")
    out = pq(proj, "import", str(diff)).stdout
    assert out == f"imported {diff} as patches/0017-worker-note.patch (npu_ar_worker.py)\n"
    assert series(proj)[-1] == "> 0017-worker-note.patch" and pq(proj, "diff").stdout == ""
    assert (proj / "npu_worker" / "npu_ar_worker.py").read_text().endswith("# from a diff\n")
    mail = tmp_path / "mail.patch"  # a patch of the downstream's tree, as git format-patch writes it there
    text = pq(proj, "show").stdout.replace("# from a diff", "# from a mail")
    text = text.replace(" a/npu_ar_worker.py", " a/vllm_omni/platforms/npu/worker/npu_ar_worker.py")
    text = text.replace(" b/npu_ar_worker.py", " b/vllm_omni/platforms/npu/worker/npu_ar_worker.py")
    text = text.replace("From: Test Author <author@example.com>", "From: Someone Else <else@example.com>")
    pq(proj, "delete", "--top")
    mail.write_text(text)
    assert "as patches/0017-mail.patch" in pq(proj, "import", str(mail), "-n", "mail").stdout
    head = (proj / "patches" / "0017-mail.patch").read_text().splitlines()[:4]
    assert head[1:] == [
        "From: Someone Else <else@example.com>",
        "Date: Thu, 1 Jan 2026 00:00:00 +0000",
        "Subject: [PATCH] worker-note",
    ]
    assert series(proj)[-1] == "> 0017-mail.patch"
    assert "+# from a mail" in (proj / "patches" / "0017-mail.patch").read_text()
    snap = state(proj)
    bad = tmp_path / "bad.patch"
    bad.write_text(text.replace("@@ -", "@@ -x", 1))
    assert error(pq(proj, "import", str(bad), check=1)).startswith(f"pq: error: {bad}:")
    other = tmp_path / "other.diff"
    other.write_text(diff.read_text().replace("npu_ar_worker.py", "elsewhere.py"))
    assert error(pq(proj, "import", str(other), check=1)) == (
        f"pq: error: {other}: changes npu_worker/elsewhere.py, which is not a module of npu_worker/ "
        "(queue.toml lists the modules)"
    )
    (tmp_path / "junk.diff").write_text("not a diff\n")
    assert "holds no git diff" in error(pq(proj, "import", str(tmp_path / "junk.diff"), check=1))
    assert error(pq(proj, "import", str(mail), "-n", "mail", check=1)).endswith(
        "patch `mail` already exists (0017-mail.patch)"
    )
    assert state(proj) == snap


def test_a_fresh_clone_reproduces_the_new_verbs(released_030_once: Path, tmp_path: Path) -> None:
    mine = copy_project(released_030_once, tmp_path / "mine")  # `pq adopt vllm-omni==0.30.0 --at BASE_030`
    s = names(mine)
    pq(mine, "new", "placeholder", "-m", "npu: a placeholder")
    pq(mine, "edit", s[6], "-m", "npu_ar_worker: reworded")
    pq(mine, "squash", s[4], s[5], "-n", "ar-exec-and-sample")
    pq(mine, "float", s[1])
    pq(mine, "sink", "placeholder")
    append(mine, "npu_worker/npu_ar_worker.py", "# imported\n")
    diff = tmp_path / "note.diff"
    diff.write_text(pq(mine, "diff").stdout)
    pq(mine, "build", "--discard")
    pq(mine, "import", str(diff))
    kinds = [
        line for line in (mine / "patches" / "queue.toml").read_text().splitlines() if line.startswith("command = ")
    ]
    assert kinds[-6:] == [f'command = "{c}"' for c in ("new", "edit", "squash", "float", "sink", "import")]
    fresh = reproduced(mine, tmp_path, "verbs")
    assert bodies(fresh) == bodies(mine) and modules(fresh) == modules(mine)


def complete(cwd: Path, line: str) -> subprocess.CompletedProcess[str]:
    """What bash's completion of ``line`` (the cursor at its end) gets from pq."""
    words = line.split(" ")
    env = {**os.environ, "_PQ_COMPLETE": "complete_bash", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1)}
    script = "from patch_queue.cli import main; main()"
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def test_shell_completion_of_patch_names(proj: Path, tmp_path: Path) -> None:
    assert "_pq_completion" in pq(proj, "--show-completion", "bash").stdout
    got = complete(proj, "pq goto npu-ar-model-runner-")
    assert got.returncode == 0 and got.stdout.split() == [
        "npu-ar-model-runner-executemodelstate",
        "npu-ar-model-runner-execute-model",
        "npu-ar-model-runner-sample-tokens",
    ]
    assert complete(proj / "npu_worker", "pq sink --to 001").stdout.split() == [
        n.removesuffix(".patch") for n in names(proj)[9:16]
    ]
    assert complete(proj, "pq squash init ba").stdout.split() == ["base"]
    assert complete(proj, "pq record -p 0002").stdout.split() == ["0002-base"]
    (proj / "patches" / "series").write_bytes(b"\xff\xfe\x00")
    broken = complete(proj, "pq goto ")
    assert broken.returncode == 0 and broken.stdout.strip() == "" and broken.stderr == ""
    outside = complete(tmp_path, "pq goto in")
    assert outside.returncode == 0 and outside.stdout.strip() == ""
