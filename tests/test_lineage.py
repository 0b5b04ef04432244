"""A committed refresh is reproduced exactly, and nothing a maintainer writes is lost (issue 12).

Real git (bare remotes, fresh clones), the real corpus bundle and registry releases, the real
``scripts/main.sh`` and ``scripts/refresh_pr.py``.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BASE_030, copy_project, git, main_sh, pq, push_to_bare, state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import refresh_pr  # noqa: E402
from test_refresh_pr import CONFLICTED, Recorder, checkout, seed  # noqa: E402

IMPORT = "import itertools  # a maintainer's import, outside every conflict region\n"


def resolve(out: Path) -> None:
    """What a maintainer does: take the patch side of every conflict region, add an import to each runner."""
    for f in sorted(out.glob("*.py")):
        kept, side = [], None
        for line in f.read_text().splitlines(keepends=True):
            if line.startswith("<<<<<<<"):
                side = "ours"
            elif line.startswith("|||||||") and side:
                side = "base"
            elif line.startswith("=======") and side:
                side = "theirs"
            elif line.startswith(">>>>>>>") and side:
                side = None
            elif side in (None, "theirs"):
                kept.append(line)
        if f.name.endswith("model_runner.py"):
            at = next(i for i, line in enumerate(kept) if line.startswith("import "))
            kept.insert(at + 1, IMPORT)
        f.write_text("".join(kept))


def modules(proj: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((proj / "npu_worker").glob("*.py"))}


@pytest.fixture
def origin(seeded_once: Path, tmp_path: Path) -> Path:
    """A project as this repository is: queue.toml, series and main.sh committed, no patch bodies."""
    return push_to_bare(copy_project(seeded_once, tmp_path / "seed"), "adopt vllm-omni 0.30.0, merge 0.32.0rc1")


@pytest.fixture(scope="module")
def stopped(seeded_once: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A folder holding origin.git (a project as this repository is: queue.toml, series and main.sh committed, no
    patch bodies) and maintainer/, its clone, after main.sh stopped there on the refresh's conflicts (exit 3):
    (the folder, what main.sh printed). Built once for the module: tests take their own copy (`stopped_copy`)."""
    tmp = tmp_path_factory.mktemp("stopped")
    origin = push_to_bare(copy_project(seeded_once, tmp / "seed"), "adopt vllm-omni 0.30.0, merge 0.32.0rc1")
    return tmp, main_sh(checkout(origin, tmp / "maintainer"), check=3).stdout


def stopped_copy(stopped: tuple[Path, str], dst: Path) -> tuple[Path, Path]:
    """(origin, the maintainer's clone): a copy of both in ``dst``, the clone's origin the copied one."""
    shutil.copytree(stopped[0], dst, symlinks=True)
    git(dst / "maintainer", "remote", "set-url", "origin", str(dst / "origin.git"))
    return dst / "origin.git", dst / "maintainer"


def test_a_committed_upgrade_is_reproduced_from_a_fresh_clone(stopped: tuple[Path, str], tmp_path: Path) -> None:
    # the maintainer: main.sh stops on conflicts (the module's run, copied); resolve, add imports, continue, commit,
    # push with the edits
    origin, mine = stopped_copy(stopped, tmp_path / "maintained")
    out = stopped[1]
    assert "== reproducing the series" in out and "conflict region(s)" in out
    resolve(mine / "npu_worker")
    done = pq(mine, "continue").stdout
    for skeleton in ("0003-npu-ar-model-runner", "0008-npu-generation-model-runner", "0013-npu-model-runner"):
        assert f"+1 -0 into patches/{skeleton}.patch" in done, done  # the imports went to the module skeletons
    assert IMPORT.strip() not in (mine / "patches" / "0016-npu-model-runner-model-forward.patch").read_text()
    assert git(mine, "status", "--porcelain").split() == ["M", "patches/queue.toml"]
    git(mine, "commit", "-qam", "[NPU] upgrade to vllm-ascend 0.30.0rc2")
    git(mine, "push", "-q", "origin", "main", "refs/pq/resolutions")
    wanted = modules(mine)
    assert all(IMPORT in wanted[m].decode() for m in wanted if m.endswith("model_runner.py"))

    # anyone: a fresh clone, main.sh fetches the recorded edits and ends on the maintainer's bytes, exit 0
    fresh = checkout(origin, tmp_path / "fresh")
    out = main_sh(fresh, check=0).stdout
    assert "recorded edit(s) applied" in out and "no conflicts" in out
    took = git(fresh, "rev-parse", "refs/pq/resolutions").strip()
    assert (
        f"refs/pq/resolutions: fast-forward to refs/pq/remotes/origin/resolutions ({took}; this clone had no store)"
        in out
    )
    assert modules(fresh) == wanted
    for name in (mine / "patches" / "series").read_text().split():
        if name.endswith(".patch"):
            assert (fresh / "patches" / name).read_bytes() == (mine / "patches" / name).read_bytes(), name
    assert git(fresh, "status", "--porcelain").strip() == ""  # a refresh onto the same target adds nothing

    # a recorded edit missing: exit 1, one line naming the patch, nothing written
    broken = checkout(origin, tmp_path / "broken")
    git(broken, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
    stored = git(broken, "ls-tree", "-r", "--name-only", "refs/pq/resolutions").split()
    victim = sorted(p for p in stored if p.startswith("edits/"))[0]
    index_env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}  # a scratch index: the clone's stays
    for args in (["read-tree", "refs/pq/resolutions"], ["rm", "-q", "--cached", victim]):
        subprocess.run(["git", "-C", str(broken), *args], env=index_env, check=True)
    tree = subprocess.run(
        ["git", "-C", str(broken), "write-tree"], env=index_env, check=True, capture_output=True, text=True
    ).stdout.strip()
    commit = git(broken, "commit-tree", tree, "-m", "a store without one edit").strip()
    git(broken, "update-ref", "refs/pq/resolutions", commit)
    before = state(broken)
    proc = pq(broken, "reproduce", check=1)  # (main.sh would merge origin's store in, which holds it)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("pq:")]
    assert len(errors) == 1 and "is not in refs/pq/resolutions" in errors[0], proc.stderr
    assert errors[0].startswith("pq: error: patches/0") and "`pq resolutions merge origin`" in errors[0]
    assert state(broken) == before


def test_an_old_queue_without_lineage_is_refused_not_readopted(origin: Path, tmp_path: Path) -> None:
    work = checkout(origin, tmp_path / "old")
    queue = work / "patches" / "queue.toml"
    text = queue.read_text()
    queue.write_text(text.replace("format = 3", "format = 2").split("\n[build]")[0] + "\n")
    before = state(work)
    line = pq(work, "reproduce", check=1).stderr.strip()
    assert line.startswith("pq: error: patches/queue.toml: format 2 records no lineage"), line
    assert state(work) == before


def test_the_bots_branch_resolved_by_a_maintainer_is_reproduced_by_anyone(
    released_018_once: Path, tmp_path: Path
) -> None:
    origin = seed(tmp_path, released_018_once)
    bot = checkout(origin, tmp_path / "bot")
    decision = refresh_pr.prepare(CONFLICTED, tmp_path / "wd", root=bot)
    assert decision.draft
    refresh_pr.publish(tmp_path / "wd", target=CONFLICTED, root=bot, prs=Recorder())
    branch = refresh_pr.branch_of(CONFLICTED)
    # the maintainer follows patches/pending-refresh.toml on the bot's branch
    human = checkout(origin, tmp_path / "human")
    git(human, "checkout", "-q", branch)
    pending = (human / "patches" / "pending-refresh.toml").read_text()
    assert "pq reproduce" in pending and "git push origin HEAD refs/pq/resolutions" in pending
    pq(human, "reproduce")
    pq(human, "refresh", "--no-stop", "--to", CONFLICTED, check=3)
    resolve(human / "npu_worker")
    pq(human, "continue")
    (human / "patches" / "pending-refresh.toml").unlink()
    git(human, "add", "-A", "patches")
    git(human, "commit", "-qm", "resolve the refresh")
    git(human, "push", "-q", "origin", "HEAD", "refs/pq/resolutions")
    # anyone, from the branch alone plus the refs: the bot's materialize (fetch the edits, reproduce)
    other = checkout(origin, tmp_path / "other")
    git(other, "checkout", "-q", branch)
    refresh_pr.materialize(other, [sys.executable, "-m", "patch_queue"])
    assert modules(other) == modules(human)
    # and the bot's next run leaves the maintainer's branch alone
    decision = refresh_pr.prepare(CONFLICTED, tmp_path / "wd2", root=checkout(origin, tmp_path / "bot2"))
    assert decision.action == "comment"


def test_a_clean_bot_refresh_pushes_a_reproducible_lineage(released_018_once: Path, tmp_path: Path) -> None:
    from test_refresh_pr import CLEAN

    origin = seed(tmp_path, released_018_once)
    bot = checkout(origin, tmp_path / "bot")
    refresh_pr.prepare(CLEAN, tmp_path / "wd", root=bot)
    refresh_pr.publish(tmp_path / "wd", target=CLEAN, root=bot, prs=Recorder())
    fresh = checkout(origin, tmp_path / "fresh")
    git(fresh, "checkout", "-q", refresh_pr.branch_of(CLEAN))
    queue = (fresh / "patches" / "queue.toml").read_text()
    assert queue.count("[[lineage]]") == 2 and 'kind = "refresh"' in queue
    refresh_pr.materialize(fresh, [sys.executable, "-m", "patch_queue"])
    for f in (tmp_path / "wd" / "npu_worker").glob("*.py"):
        assert (fresh / "npu_worker" / f.name).read_bytes() == f.read_bytes(), f.name


# -- no silent loss -----------------------------------------------------------------------------------------


@pytest.fixture
def edited(released_030_once: Path, tmp_path: Path) -> Path:
    proj = copy_project(released_030_once, tmp_path / "p")  # `pq adopt vllm-omni==0.30.0 --at BASE_030`
    runner = proj / "npu_worker" / "npu_model_runner.py"
    runner.write_text(runner.read_text().replace("import ", "import  ", 1) + "# unrecorded\n")
    return proj


@pytest.mark.parametrize(
    "args",
    [
        ("pop",),
        ("pop", "--all"),
        ("build",),
        ("refresh", "--to", BASE_030),
        ("adopt", "vllm-omni==0.30.0", "--at", BASE_030, "--force"),
    ],
    ids=["pop", "pop-all", "build", "refresh", "adopt-force"],
)
def test_unrecorded_edits_are_never_overwritten(edited: Path, args: tuple[str, ...]) -> None:
    before = state(edited)
    proc = pq(edited, *args, check=1)
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "pq: error: npu_worker/npu_model_runner.py: has edits no patch holds (+2 -1 lines); "
        "`pq record` them into the series, or pass --discard to drop them"
    ], proc.stderr
    assert state(edited) == before
    assert "unrecorded: npu_worker/npu_model_runner.py +2 -1 lines" in pq(edited, "status").stdout


def test_discard_says_what_it_dropped(edited: Path) -> None:
    out = pq(edited, "pop", "--discard").stdout
    assert "discarded 3 edited line(s) in 1 file(s): npu_model_runner.py" in out, out
    pq(edited, "push")
    assert "# unrecorded" not in (edited / "npu_worker" / "npu_model_runner.py").read_text()


def test_a_fork_catches_a_hand_edited_patch_body(forked_018_once: Path, tmp_path: Path) -> None:
    origin = seed(tmp_path, forked_018_once)
    fork = checkout(origin, tmp_path / "fork")
    name = [n for n in (fork / "patches" / "series").read_text().split() if n.endswith(".patch")][4]
    body = fork / "patches" / name
    lines = body.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("+    ") and line.strip() != "+")
    lines[at] = lines[at].rstrip("\n") + "  # hand edit\n"  # same line counts: a valid patch, edited by hand
    body.write_text("".join(lines))
    before = state(fork)
    for command in ("build", "status", "refresh"):
        proc = pq(fork, command, check=1)
        assert proc.stderr.strip() == (
            f"pq: error: patches/{name}: sha256 {_sha(body)[:12]} is not the "
            f"{_recorded(fork, name)[:12]} queue.toml records: the body was edited by "
            "hand; restore it (git checkout), or take the edit with `pq accept`"
        )
        assert state(fork) == before
    pq(fork, "accept")
    assert 'kind = "import"' in (fork / "patches" / "queue.toml").read_text()
    pq(fork, "build")
    assert "# hand edit" in "".join(p.read_text() for p in (fork / "npu_worker").glob("*.py"))


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recorded(proj: Path, name: str) -> str:
    import tomllib

    steps = tomllib.loads((proj / "patches" / "queue.toml").read_text())["lineage"]
    return next(row.split()[0] for row in steps[-1]["patches"] if row.endswith(" " + name))


# -- what a maintainer writes after `pq continue` survives (issue 30, point 6) ------------------------------

FIX = "# a maintainer's fix, written after pq continue\n"
NOTE = "# a maintainer's new patch, written after pq continue\n"
ANOTHER = "  # one line another merge gives"  # what a differently merging pq puts at the end of one line


def resolve_with_pq(out: Path) -> None:
    """Resolve every conflict region to the patch side, through `pq resolve` (the regions that go with it too)."""
    while True:
        marked = [
            (f, i) for f in sorted(out.glob("*.py")) for i, line in enumerate(f.read_text().splitlines(), 1)
            if line.startswith("<<<<<<<")
        ]  # fmt: skip
        if not marked:
            return
        f, line = marked[0]
        pq(out.parent, "resolve", "--keep-patch", f"{out.name}/{f.name}:{line}")


def method_lines(path: Path, cls: str, method: str) -> tuple[int, int, int]:
    """(first line of the body after any docstring, last line) of ``cls.method`` in ``path``, and its indentation."""
    import ast

    tree = ast.parse(path.read_text())
    node = next(
        f
        for c in tree.body
        if isinstance(c, ast.ClassDef) and c.name == cls
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == method
    )
    body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
    assert node.end_lineno is not None
    return body[0].lineno, node.end_lineno, body[0].col_offset


def insert_line(path: Path, at: int, text: str, indent: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(at - 1, " " * indent + text)
    path.write_text("".join(lines))


def step_kinds(proj: Path) -> list[tuple[str, str]]:
    import tomllib

    steps = tomllib.loads((proj / "patches" / "queue.toml").read_text())["lineage"]
    return [(s["kind"], s["command"]) for s in steps]


@pytest.fixture(scope="module")
def maintained_and_origin(stopped: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(The maintainer's clone, its origin), pushed with refs/pq/resolutions: main.sh stops on conflicts (a copy of
    the module's `stopped`), every region resolved to the patch side with `pq resolve`, `pq continue`; then, by
    hand: a fix in a patch the continue edited and an import in a module skeleton it did not edit, `pq record`; a
    comment in an omni-only module, `pq new`. Built once for the module: the tests only read both (and clone the
    origin)."""
    origin, mine = stopped_copy(stopped, tmp_path_factory.mktemp("maintained") / "m")
    resolve_with_pq(mine / "npu_worker")
    pq(mine, "continue")
    runner = mine / "npu_worker" / "npu_model_runner.py"
    first, _last, indent = method_lines(runner, "OmniNPUModelRunner", "_update_states")
    insert_line(runner, first, FIX, indent)
    text = runner.read_text()
    at = text.index("\nimport ") + 1
    runner.write_text(text[:at] + IMPORT + text[at:])
    placed = pq(mine, "record").stdout
    assert "into patches/0014-npu-model-runner-update-states.patch" in placed, placed
    assert "into patches/0013-npu-model-runner.patch" in placed, placed  # the skeleton: not edited by the continue
    worker = mine / "npu_worker" / "npu_ar_worker.py"
    worker.write_text(worker.read_text() + NOTE)
    assert "created patches/0019-maintainer-note.patch" in pq(mine, "new", "--record", "maintainer-note").stdout
    assert step_kinds(mine) == [
        ("adopt", "adopt"),
        ("merge", "merge"),
        ("refresh", "continue"),
        ("edit", "record"),
        ("edit", "new"),
    ]
    git(mine, "add", "-A", "patches")
    git(mine, "commit", "-qm", "[NPU] upgrade to vllm-ascend 0.30.0rc2, with fixes after continue")
    git(mine, "push", "-q", "origin", "main", "refs/pq/resolutions")
    return mine, origin


def test_record_and_new_after_continue_are_reproduced_from_a_fresh_clone(
    maintained_and_origin: tuple[Path, Path], tmp_path: Path
) -> None:
    maintained, origin = maintained_and_origin
    wanted = modules(maintained)
    assert FIX.strip() in wanted["npu_model_runner.py"].decode() and NOTE in wanted["npu_ar_worker.py"].decode()
    fresh = checkout(origin, tmp_path / "fresh")
    out = main_sh(fresh, check=0).stdout
    assert "reproduced 19 patches from 5 lineage step(s)" in out and "every sha256 as queue.toml records" in out
    assert "merged:" not in out and "differs:" not in out
    assert modules(fresh) == wanted
    for name in (maintained / "patches" / "series").read_text().split():
        if name.endswith(".patch"):
            assert (fresh / "patches" / name).read_bytes() == (maintained / "patches" / name).read_bytes(), name
    assert git(fresh, "status", "--porcelain").strip() == ""

    # a lineage written before steps named their bases (an older pq's queue.toml) reproduces the same bytes
    old = checkout(origin, tmp_path / "old")
    queue = old / "patches" / "queue.toml"
    text = queue.read_text()
    queue.write_text(re.sub(r"\nbases = \[\n(    \"[0-9a-f]{64} [^\"]+\",\n)*\]", "", text))
    assert "bases" in text and "bases" not in queue.read_text()
    main_sh(old, check=0)
    assert modules(old) == wanted

    # the edits not fetched: the error says so, naming the first patch the continue edited, and writes nothing
    unfetched = checkout(origin, tmp_path / "unfetched")
    before = state(unfetched)
    line = pq(unfetched, "reproduce", check=1).stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"pq: error: patches/0\d{3}-[a-z0-9-]+\.patch: the recorded edit of lineage step 3 "
        r"\(refresh, `pq continue`\) for this patch is not in refs/pq/resolutions; this repository has no "
        r"refs/pq/resolutions: fetch it: git fetch origin refs/pq/resolutions:refs/pq/resolutions",
        line,
    ), line
    assert state(unfetched) == before


def spliced(origin: Path, dst: Path, change: tuple[str, str, str, bool]) -> Path:
    """A clone whose lineage is the maintainer's with, between the adoption and the refresh, a `pq record` of one
    line (``change``: the file, the class and the method whose last line gets :data:`ANOTHER` appended, or, when
    the flag is False, that gets a line of it before its first statement): the refresh then merges a patch to a
    result one line unlike the one its recorded edit was made on, as a pq whose merge gives another text would.
    Returns the clone with no patch bodies, ready for `pq reproduce`."""
    work = checkout(origin, dst)
    git(work, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
    queue = work / "patches" / "queue.toml"
    theirs = queue.read_text().split("\n[[lineage]]\n")
    queue.write_text(git(work, "show", "HEAD~1:patches/queue.toml"))  # the adoption
    pq(work, "reproduce")
    path, cls, method, at_end = change
    runner = work / "npu_worker" / path
    first, last, indent = method_lines(runner, cls, method)
    if at_end:
        lines = runner.read_text().splitlines(keepends=True)
        lines[last - 1] = lines[last - 1].rstrip("\n") + ANOTHER + "\n"
        runner.write_text("".join(lines))
    else:
        insert_line(runner, first, ANOTHER.strip() + "\n", indent)
    into = {"_dummy_run": "0015-npu-model-runner-dummy-run", "_update_states": "0014-npu-model-runner-update-states"}
    pq(work, "record", "--patch", into[method])
    ours = queue.read_text().split("\n[[lineage]]\n")
    queue.write_text("\n[[lineage]]\n".join([theirs[0], *ours[1:4], *theirs[3:]]))  # adopt, merge, record, ...
    git(work, "checkout", "HEAD", "--", "patches/series")  # the maintainer's series
    for body in (work / "patches").glob("0*.patch"):
        body.unlink()
    git(work, "add", "-A", "patches")
    git(work, "commit", "-qm", "the lineage, with a record before the refresh")
    return work


def test_an_edit_is_merged_onto_a_merge_result_one_line_unlike_its_base(
    maintained_and_origin: tuple[Path, Path], tmp_path: Path
) -> None:
    maintained, origin = maintained_and_origin
    wanted = modules(maintained)
    # the line that differs is far from every recorded edit of the patch: the first statement of a long method
    change = ("npu_model_runner.py", "OmniNPUModelRunner", "_dummy_run", False)
    work = spliced(origin, tmp_path / "far", change)
    assert step_kinds(work)[2:4] == [("edit", "record"), ("refresh", "continue")]
    out = pq(work, "reproduce").stdout
    assert (
        "merged: the recorded edit of patches/0015-npu-model-runner-dummy-run.patch (lineage step 4) onto this pq's "
        "merge, which differs from the one it was made on"
    ) in out, out
    assert "differs: patches/0015-npu-model-runner-dummy-run.patch: lineage step 4: sha256" in out, out
    assert "this pq's merge gives another body" in out, out
    assert "which queue.toml now records (commit it)" in out, out
    got = modules(work)
    assert {m for m in got if got[m] != wanted[m]} == {"npu_model_runner.py"}
    lines = [x.splitlines(keepends=True) for x in (wanted["npu_model_runner.py"], got["npu_model_runner.py"])]
    changes = [d for d in list(difflib.diff_bytes(difflib.unified_diff, *lines, n=0))[2:] if d[:2] != b"@@"]
    added = [d[1:] for d in changes if d[:1] == b"+"]
    assert len(added) == len(changes) == 1, changes  # one line added, none removed or changed
    assert [b.strip() for b in added] == [ANOTHER.strip().encode()], added  # the maintainer's result, one line on
    assert git(work, "status", "--porcelain").split() == ["M", "patches/queue.toml"]
    # the lineage now records what this pq reproduces: reproducing it again gives the same bytes, sha256 checked
    for body in (work / "patches").glob("0*.patch"):
        body.unlink()
    again = pq(work, "reproduce").stdout
    assert "every sha256 as queue.toml records" in again and "differs:" not in again, again
    assert modules(work) == got


def test_an_edit_that_conflicts_with_another_merge_stops_reproduce(
    maintained_and_origin: tuple[Path, Path], tmp_path: Path
) -> None:
    maintained, origin = maintained_and_origin
    # the line that differs is the method's last line, the `_update_states` call upstream rewrote: both changed it.
    # This pq merges that statement by tokens (merged-tokens) where the lineage's own refresh met it, so the lineage
    # records no resolution there; with the recorded line's comment on it the tokens overlap: a conflict, and the
    # lineage has nothing to resolve it with
    change = ("npu_model_runner.py", "OmniNPUModelRunner", "_update_states", True)
    work = spliced(origin, tmp_path / "near", change)
    before = state(work)
    proc = pq(work, "reproduce", check=1)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("pq:")]
    assert len(errors) == 1, proc.stderr
    assert re.fullmatch(
        r"pq: error: patches/0014-npu-model-runner-update-states\.patch: the merge of lineage step 4 \(refresh, "
        r"`pq continue`\) leaves 1 conflict\(s\) \(first at npu_model_runner\.py:\d+\) and the lineage records no "
        r"resolution for them",
        errors[0],
    ), errors[0]
    assert state(work) == before
