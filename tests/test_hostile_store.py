"""A hostile round on the store of recorded resolutions and edits (refs/pq/resolutions) and the text pq writes.

Two clones of one origin that both record diverge; `pq resolutions merge` takes the other's store with nothing
lost (the union, each clash said), main.sh does it itself, `pq reproduce` says "diverged", and a forced fetch
over the store is recovered from its reflog.  A damaged store (an entry not JSON, of the wrong shape, truncated,
its object missing; the ref at a blob or a tree) is one error line naming the entry, exit 1, nothing changed.
Values a user gives are written to queue.toml exactly (tomllib reads them back) and printed on one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from conftest import copy_project, git, main_sh, pq, push_to_bare, state
from test_errors import one_error_line

REF = "refs/pq/resolutions"
CLEAN_TARGET = "c9e95ba32421"  # 0.30.0's series replays onto it without a conflict (see test_bad_input)
WORKER = "npu_ar_worker.py"  # patches/0007-npu-ar-worker.patch owns its lines


def hand_fix(proj: Path, line: int, tag: str, module: str = WORKER) -> None:
    """A maintainer's edit of one line of a runner module (a comment appended)."""
    path = proj / "npu_worker" / module
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = lines[line - 1].rstrip("\n") + f"  # {tag}\n"
    path.write_text("".join(lines))


def take_patch_side(out: Path) -> None:
    """A maintainer's resolution: the patch side of every conflict region."""
    for f in sorted(out.glob("*.py")):
        kept, side = [], None
        for line in f.read_text().splitlines(keepends=True):
            marker = line[:7]
            if marker == "<<<<<<<":
                side = "ours"
            elif marker in ("|||||||", "=======") and side:
                side = "base" if marker == "|||||||" else "theirs"
            elif marker == ">>>>>>>" and side:
                side = None
            elif side in (None, "theirs"):
                kept.append(line)
        f.write_text("".join(kept))


@pytest.fixture(scope="module")
def cloned(seeded_once: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding origin.git, a bare origin as this repository is (queue.toml, series, main.sh; no bodies)
    with a store of one record, and clone/, a maintainer's clone of it (the branch, origin's store, the bodies
    reproduced). Built once for the module: each test takes its own copy (`origin`, then `clone`)."""
    root = tmp_path_factory.mktemp("hostile-store")
    proj = copy_project(seeded_once, root / "seed")
    hand_fix(proj, 4, "seed")
    pq(proj, "record")
    bare = push_to_bare(proj, "adopt vllm-omni 0.30.0, one record")
    git(proj, "push", "-q", str(bare), REF)
    git(root, "clone", "-q", str(bare), "clone")
    git(root / "clone", "fetch", "-q", "origin", f"{REF}:{REF}")
    pq(root / "clone", "reproduce")
    return root


@pytest.fixture
def origin(cloned: Path, tmp_path: Path) -> Path:
    """The test's own copy of the module's origin (and, beside it, of its clone, which `clone` copies)."""
    shutil.copytree(cloned, tmp_path / "shared", symlinks=True)
    return tmp_path / "shared" / "origin.git"


def clone(origin: Path, dst: Path) -> Path:
    """A maintainer's clone: the branch, origin's store, the bodies reproduced: a copy of the module's clone of an
    origin equal to ``origin`` (see `cloned`), its remote ``origin``."""
    shutil.copytree(origin.parent / "clone", dst, symlinks=True)
    git(dst, "remote", "set-url", "origin", str(origin))
    return dst


def ids(proj: Path, rev: str) -> dict[str, str]:
    """Path -> blob id of every entry of the store at ``rev``."""
    out = git(proj, "ls-tree", "-r", rev)
    return {line.split("\t")[1]: line.split()[2] for line in out.splitlines()}


def record_and_push(proj: Path, line: int, tag: str) -> None:
    hand_fix(proj, line, tag)
    pq(proj, "record")
    git(proj, "add", "-A", "patches")
    git(proj, "commit", "-qm", f"record {tag}")
    git(proj, "push", "-q", "origin", "HEAD", REF)


def own_patch(proj: Path, tag: str) -> None:
    """`pq new` of a patch with an edit: its recorded edit is of a patch only this clone has (no clash)."""
    hand_fix(proj, 9, tag, "npu_generation_worker.py")
    pq(proj, "new", "--record", f"{tag}-fix", "-m", f"{tag}: a fix of its own")


def take_origins_branch(proj: Path) -> None:
    """The clone takes origin's branch (another clone's lineage) and has no bodies, as a fresh checkout."""
    git(proj, "fetch", "-q", "origin")
    git(proj, "reset", "-q", "--hard", "origin/main")
    for body in (proj / "patches").glob("0*.patch"):
        body.unlink()
    shutil.rmtree(proj / "npu_worker", ignore_errors=True)


# -- two clones ------------------------------------------------------------------------------------------------


def test_diverged_stores_merge_into_their_union_each_clash_said(origin: Path, tmp_path: Path) -> None:
    a, b = clone(origin, tmp_path / "a"), clone(origin, tmp_path / "b")
    record_and_push(a, 6, "a's fix")
    hand_fix(b, 7, "b's fix")  # the same patch's edits from the same bodies: clashes
    pq(b, "record")
    own_patch(b, "b")  # entries only b has
    mine, theirs = git(b, "rev-parse", REF).strip(), git(a, "rev-parse", REF).strip()
    # git refuses the fetch a maintainer was told to run
    fetch = subprocess.run(["git", "fetch", "origin", f"{REF}:{REF}"], cwd=b, capture_output=True, text=True)
    assert fetch.returncode != 0 and "non-fast-forward" in fetch.stderr
    ours_ids, their_ids = ids(b, mine), ids(b, theirs)
    clashes = sorted(p for p in set(ours_ids) & set(their_ids) if ours_ids[p] != their_ids[p])
    assert clashes and set(their_ids) - set(ours_ids) and set(ours_ids) - set(their_ids)

    proc = pq(b, "resolutions", "merge", "origin")
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"pq: warning: {REF}:{p}: both stores hold it, differently (local {ours_ids[p]}, theirs {their_ids[p]}); "
        "kept the local one (--theirs takes theirs)"
        for p in clashes
    ]
    merged = git(b, "rev-parse", REF).strip()
    assert proc.stdout == (
        f"{REF}: merged refs/pq/remotes/origin/resolutions ({theirs}) into {mine}: {merged}, {len(clashes)} clash(es)\n"
    )
    assert git(b, "rev-parse", f"{merged}^1", f"{merged}^2").split() == [mine, theirs]
    # the union: every entry of both, the local one where they clash (origin's stays in the second parent)
    assert ids(b, merged) == {**their_ids, **ours_ids}
    assert git(b, "rev-parse", "refs/pq/remotes/origin/resolutions").strip() == theirs
    # again: nothing to merge
    again = pq(b, "resolutions", "merge", "origin")
    assert again.stdout == f"{REF} already holds refs/pq/remotes/origin/resolutions ({theirs}): nothing to merge\n"
    assert git(b, "rev-parse", REF).strip() == merged

    # origin's lineage with b's store: its recorded edits lost to b's clashing ones: said, and how to take them
    take_origins_branch(b)
    line = one_error_line(pq(b, "reproduce", check=1))
    assert line.startswith("pq: error: patches/0007-npu-ar-worker.patch: reproduced body has sha256 "), line
    assert "`pq resolutions merge origin --theirs` takes origin's" in line and "different pq version" not in line
    took = pq(b, "resolutions", "merge", "origin", "--theirs")
    assert took.stdout.startswith(f"{REF}: took {len(clashes)} entries of refs/pq/remotes/origin/resolutions")
    assert ids(b, REF) == {**ours_ids, **their_ids}
    assert "every sha256 as queue.toml records" in pq(b, "reproduce").stdout


def test_main_sh_merges_origins_store_into_a_diverged_one(origin: Path, tmp_path: Path) -> None:
    a, b = clone(origin, tmp_path / "a"), clone(origin, tmp_path / "b")
    record_and_push(a, 6, "a's fix")
    own_patch(b, "b")
    mine, theirs = git(b, "rev-parse", REF).strip(), git(a, "rev-parse", REF).strip()
    take_origins_branch(b)
    proc = main_sh(b, check=None)
    assert "Traceback" not in proc.stdout + proc.stderr
    merged = git(b, "rev-parse", REF).strip()
    assert f"{REF}: merged refs/pq/remotes/origin/resolutions ({theirs}) into {mine}: {merged}\n" in proc.stdout
    assert "reproduced 18 patches from 4 lineage step(s)" in proc.stdout, proc.stdout + proc.stderr
    assert ids(b, merged) == {**ids(b, theirs), **ids(b, mine)}


def test_main_sh_passes_over_an_origin_it_cannot_reach(origin: Path, tmp_path: Path) -> None:
    """Offline: the merge's one error line, then main.sh says origin's edits were not taken and reproduces from the
    clone's own store (which holds every edit the lineage names)."""
    a = clone(origin, tmp_path / "a")
    take_origins_branch(a)
    git(a, "remote", "set-url", "origin", str(tmp_path / "gone.git"))
    kept = git(a, "rev-parse", REF).strip()
    proc = main_sh(a, check=None)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "pq: error: cannot reach remote 'origin'" in proc.stderr
    assert "== origin's recorded edits were not taken (the error above says why)" in proc.stdout
    assert re.search(r"reproduced 18 patches from \d+ lineage step", proc.stdout), proc.stdout + proc.stderr
    assert git(a, "rev-parse", REF).strip() == kept


def test_reproduce_says_the_stores_diverged_and_names_the_merge(origin: Path, tmp_path: Path) -> None:
    a, b = clone(origin, tmp_path / "a"), clone(origin, tmp_path / "b")
    record_and_push(a, 6, "a's fix")
    own_patch(b, "b")
    take_origins_branch(b)
    git(b, "fetch", "-q", "origin", f"+{REF}:refs/pq/remotes/origin/resolutions")  # as main.sh and merge fetch it
    mine, theirs = git(b, "rev-parse", REF).strip(), git(b, "rev-parse", "refs/pq/remotes/origin/resolutions").strip()
    before = state(b)
    line = one_error_line(pq(b, "reproduce", check=1))
    assert re.fullmatch(
        r"pq: error: patches/0\d{3}-[a-z0-9-]+\.patch: the recorded edit of lineage step 4 \(edit, `pq record`\) "
        rf"for this patch is not in {REF}; {REF} \(at {mine[:12]}\) and origin's store "
        rf"\(refs/pq/remotes/origin/resolutions, at {theirs[:12]}\) have diverged: merge them: "
        r"`pq resolutions merge origin`",
        line,
    ), line
    assert state(b) == before


def test_a_forced_fetch_is_recovered_from_the_history(origin: Path, tmp_path: Path) -> None:
    a, b = clone(origin, tmp_path / "a"), clone(origin, tmp_path / "b")
    record_and_push(a, 6, "a's fix")
    own_patch(b, "b")
    lost = git(b, "rev-parse", REF).strip()
    lost_ids = ids(b, lost)
    # the user forces origin's store over b's: git keeps the old value in the reflog pq started
    git(b, "fetch", "-q", "origin", f"+{REF}:{REF}")
    theirs = git(b, "rev-parse", REF).strip()
    assert theirs != lost
    # git gc keeps the log (pq told it never to expire it: the fetch is dated long ago here) and its objects
    git(b, "gc", "-q", "--prune=now")
    assert git(b, "reflog", "show", "--format=%H", REF).split()[:2] == [theirs, lost]
    assert git(b, "cat-file", "-t", lost).strip() == "commit"
    log = pq(b, "resolutions", "log").stdout.splitlines()
    assert log[0].startswith(f"{theirs}  ") and log[0].endswith(": in the store")
    assert log[1].startswith(f"{lost}  ") and log[1].endswith(
        f"pq new: not in the store (`pq resolutions merge {lost[:12]}` merges it in)"
    )
    proc = pq(b, "resolutions", "merge", lost[:12])
    merged = git(b, "rev-parse", REF).strip()
    assert proc.stdout == f"{REF}: merged {lost[:12]} ({lost}) into {theirs}: {merged}\n"
    assert all(ids(b, merged)[p] == blob for p, blob in lost_ids.items() if p not in ids(b, theirs))
    assert set(lost_ids) <= set(ids(b, merged))


def test_drop_is_undone_and_list_names_every_entry(origin: Path, tmp_path: Path) -> None:
    b = clone(origin, tmp_path / "b")
    head = git(b, "rev-parse", REF).strip()
    listed = pq(b, "resolutions", "list", "--json").stdout.splitlines()
    entries = [json.loads(line) for line in listed]
    assert sorted(e["path"] for e in entries) == sorted(ids(b, head))
    edit = next(e for e in entries if e["kind"] == "edit")
    assert set(edit) == {"kind", "key", "path", "blob", "patch", "before", "after"}
    plain = pq(b, "resolutions", "list").stdout.splitlines()
    assert f"edit    {edit['key']}  {edit['patch']}  {edit['before']} -> {edit['after']}" in plain
    assert pq(b, "resolutions", "drop", edit["key"]).stdout == (
        f"dropped {edit['path']}\nthe store was {head} (`pq undo` puts it back)\n"
    )
    dropped = git(b, "rev-parse", REF).strip()
    assert edit["path"] not in ids(b, dropped)
    pq(b, "undo")
    assert git(b, "rev-parse", REF).strip() == head
    # a store that dropped an entry is merged in, not fast-forwarded to: a merge loses no entry
    proc = pq(b, "resolutions", "merge", dropped)
    merged = git(b, "rev-parse", REF).strip()
    assert proc.stdout == f"{REF}: merged {dropped} ({dropped}) into {head}: {merged}\n"
    assert ids(b, merged) == ids(b, head)


# -- a damaged store ------------------------------------------------------------------------------------------

DAMAGE = {  # case -> (where: an edit or a region entry, its new text, what the error says is wrong)
    "not-json": ("edit", b"garbage {", "not JSON (Expecting value, line 1 column 1: truncated or overwritten?)"),
    "truncated": (
        "edit",
        None,
        "not JSON (Unterminated string starting at, line 4 column 3: truncated or overwritten?)",
    ),
    "a-list": ("edit", b"[1, 2]", "JSON list, not an object"),
    "a-number": ("edit", b"5", "JSON int, not an object"),
    "ops-a-string": ("edit", {"ops": "x"}, '"ops" is "x", not a list'),
    "op-of-numbers": ("edit", {"ops": [[0, 1, 5]]}, '"ops" holds [0, 1, 5], not [line, count, text]'),
    "region-resolution-5": ("region", b'{"key": "ab00", "resolution": 5}', '"resolution" is 5, not a string'),
    "region-a-list": ("region", b"[]", "JSON list, not an object"),
    "not-utf8": ("region", b'{"resolution": "\xff"}', "not UTF-8 text"),
    "missing-object": ("edit", "missing", "its object is missing from this repository"),
}


def damage(proj: Path, case: str) -> tuple[str, str]:
    """Commit a store with one entry damaged as ``case`` says; the entry's path and blob id."""
    kind, text, _why = DAMAGE[case]
    head = git(proj, "rev-parse", REF).strip()
    entries = ids(proj, head)
    path = sorted(p for p in entries if p.startswith("edits/"))[0] if kind == "edit" else "ab/ab00.json"
    if text is None:
        data = subprocess.run(["git", "show", f"{head}:{path}"], cwd=proj, capture_output=True, check=True).stdout
        text = data[:100]
    elif isinstance(text, dict):
        entry = json.loads(git(proj, "show", f"{head}:{path}"))
        text = json.dumps({**entry, **text}).encode()
    if text == "missing":
        blob = "1234567890123456789012345678901234567890"
    else:
        assert isinstance(text, bytes)
        blob = (
            subprocess.run(
                ["git", "hash-object", "-w", "--stdin"], cwd=proj, input=text, capture_output=True, check=True
            )
            .stdout.decode()
            .strip()
        )
    index = {**{p: b for p, b in entries.items()}, path: blob}
    env = {**os.environ, "GIT_INDEX_FILE": str(proj / ".git" / "damage-index")}
    feed = "".join(f"100644 {b} 0\t{p}\n" for p, b in sorted(index.items()))
    subprocess.run(["git", "update-index", "--index-info"], cwd=proj, input=feed, text=True, env=env, check=True)
    tree = subprocess.run(
        ["git", "write-tree", "--missing-ok"], cwd=proj, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    (proj / ".git" / "damage-index").unlink()
    git(proj, "update-ref", REF, git(proj, "commit-tree", tree, "-p", head, "-m", "damaged").strip())
    return path, blob


@pytest.fixture
def damaged_base(origin: Path, tmp_path: Path) -> Path:
    return clone(origin, tmp_path / "clone")


@pytest.mark.parametrize("case", sorted(DAMAGE))
@pytest.mark.parametrize("args", [("record",), ("reproduce",), ("refresh", "--to", CLEAN_TARGET)])
def test_a_damaged_entry_is_one_line_and_changes_nothing(damaged_base: Path, case: str, args: tuple[str, ...]) -> None:
    proj = damaged_base
    path, blob = damage(proj, case)
    if args == ("record",):
        hand_fix(proj, 5, "unrecorded")
    if args == ("reproduce",):
        for body in (proj / "patches").glob("0*.patch"):
            body.unlink()
    before = state(proj)
    key = path.rsplit("/", 1)[1].removesuffix(".json")
    line = one_error_line(pq(proj, *args, check=1))
    assert line == (
        f"pq: error: {REF}:{path} ({blob}): {DAMAGE[case][2]}; the entry is damaged: drop it "
        f"(`pq resolutions drop {key}`)"
    )
    assert state(proj) == before


def test_a_damaged_entry_is_listed_and_dropped_then_the_commands_work(damaged_base: Path) -> None:
    proj = damaged_base
    path, blob = damage(proj, "missing-object")
    key = path.rsplit("/", 1)[1].removesuffix(".json")
    assert f"damaged {key}  {path} ({blob}): its object is missing from this repository" in (
        pq(proj, "resolutions", "list").stdout.splitlines()
    )
    other = next(p for p in ids(proj, REF) if p.startswith("blobs/"))
    line = one_error_line(pq(proj, "resolutions", "drop", other.rsplit("/", 1)[1], check=1))
    assert line == (
        f"pq: error: {REF}:{path} ({blob}): the object of {path} is missing from this repository, so no store "
        f"without it can be written; drop it too (`pq resolutions drop {key}`)"
    )
    pq(proj, "resolutions", "drop", key)
    hand_fix(proj, 5, "recorded now")
    assert "recorded: npu_worker/npu_ar_worker.py:5" in pq(proj, "record").stdout


def test_a_pending_refresh_continues_only_over_a_sound_store(damaged_base: Path) -> None:
    """`pq continue` reads the store too; `pq status` does not need it."""
    proj = damaged_base
    pq(proj, "refresh", "--to", "vllm-ascend==0.30.0rc2", check=3)  # conflicts leave it pending
    take_patch_side(proj / "npu_worker")
    path, blob = damage(proj, "op-of-numbers")
    before = state(proj)
    line = one_error_line(pq(proj, "continue", "--accept-errors", check=1))
    assert line.startswith(f"pq: error: {REF}:{path} ({blob}): "), line
    assert state(proj) == before
    assert "refresh in progress onto" in pq(proj, "status").stdout


@pytest.mark.parametrize("kind", ["blob", "tree"])
def test_the_ref_at_a_blob_or_a_tree(damaged_base: Path, kind: str) -> None:
    proj = damaged_base
    head = git(proj, "rev-parse", REF).strip()
    target = git(proj, "rev-parse", f"{head}^{{tree}}" if kind == "tree" else f"{head}:{sorted(ids(proj, head))[0]}")
    git(proj, "update-ref", REF, target.strip())
    before = state(proj)
    for args in (("record",), ("resolutions", "merge", head)):
        line = one_error_line(pq(proj, *args, check=1))
        assert line == (
            f"pq: error: {REF}: points at {target[:12]}, a {kind}, not a commit; the ref is damaged: delete it "
            f"(`git update-ref -d {REF}`) or set it to a store `pq resolutions log` lists (`git update-ref {REF} ID`)"
        )
    line = one_error_line(pq(proj, "resolutions", "list", check=1))
    assert line == (
        f"pq: error: {REF} ({target.strip()}): points at a {kind}, not a commit: set it to a store `pq resolutions "
        f"log` lists (`git update-ref {REF} ID`), or delete it (`git update-ref -d {REF}`)"
    )
    assert state(proj) == before


def test_a_damaged_store_is_not_merged_in(damaged_base: Path) -> None:
    proj = damaged_base
    sound = git(proj, "rev-parse", REF).strip()
    path, blob = damage(proj, "a-list")
    bad = git(proj, "rev-parse", REF).strip()
    git(proj, "update-ref", REF, sound)
    before = state(proj)
    line = one_error_line(pq(proj, "resolutions", "merge", bad, check=1))
    key = path.rsplit("/", 1)[1].removesuffix(".json")
    assert line == (
        f"pq: error: {bad}:{path} ({blob}): JSON list, not an object; the entry is damaged: drop it "
        f"(`pq resolutions drop {key}`)"
    )
    line = one_error_line(pq(proj, "resolutions", "merge", "no-such-thing", check=1))
    assert line == (
        "pq: error: 'no-such-thing' is neither a remote nor a ref or commit this repository has (`pq resolutions "
        "log` lists the stores refs/pq/resolutions held); nothing was merged"
    )
    assert state(proj) == before


# -- text pq writes and prints ---------------------------------------------------------------------------------

HOSTILE = 'up "quoted" \\back\\slash\nnew line\ttab\x01\x1f\x7f é'


def test_a_hostile_folder_name_is_written_to_queue_toml_exactly(damaged_base: Path, tmp_path: Path) -> None:
    proj = damaged_base
    base = git(proj, "show", "refs/pq/base:.pq-upstream/vllm_ascend/worker/model_runner_v1.py")
    folder = tmp_path / HOSTILE
    (folder / "vllm_ascend" / "worker").mkdir(parents=True)
    (folder / "vllm_ascend" / "worker" / "model_runner_v1.py").write_text(base)
    pq(proj, "refresh", "--to", str(folder), "--accept-errors")
    queue = tomllib.loads((proj / "patches" / "queue.toml").read_text(encoding="utf-8"))
    assert queue["upstream"]["spec"] == f"dir:{folder}" and queue["upstream"]["label"] == f"dir {folder}"
    assert queue["lineage"][-1]["upstream"]["spec"] == f"dir:{folder}"


def test_an_upstream_folder_name_that_is_not_utf8_is_refused(damaged_base: Path, tmp_path: Path) -> None:
    proj = damaged_base
    raw = os.fsencode(tmp_path) + b"/up\xff"
    os.makedirs(raw + b"/vllm_ascend/worker")
    runner = git(proj, "show", "refs/pq/base:.pq-upstream/vllm_ascend/worker/model_runner_v1.py")
    Path(os.fsdecode(raw + b"/vllm_ascend/worker/model_runner_v1.py")).write_text(runner)
    folder = os.fsdecode(raw)
    before = state(proj)
    line = one_error_line(pq(proj, "refresh", "--to", folder, check=1))
    assert line == (
        f"pq: error: upstream spec '{tmp_path}/up\\xff' is not UTF-8 text (byte 0xff at {len(str(tmp_path)) + 3}), "
        "and queue.toml records it: rename the folder"
    )
    assert state(proj) == before and not (proj / "pq-crash.log").exists()


def test_an_error_about_a_value_with_control_characters_is_one_line(damaged_base: Path) -> None:
    proc = pq(damaged_base, "new", "two\nlines\x01", check=1)
    assert proc.stderr == "pq: error: invalid patch name `two\\x0alines\\x01` (letters, digits and . _ + - only)\n"


def test_a_decline_table_reads_back_exactly() -> None:
    from patch_queue.sync.translation import Decline

    entry = Decline("gpu_model_runner.py", "m", HOSTILE, note=HOSTILE)
    assert tomllib.loads(entry.toml())["decline"] == [
        {"file": "gpu_model_runner.py", "method": "m", "first": HOSTILE, "note": HOSTILE}
    ]
