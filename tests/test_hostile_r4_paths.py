"""Hostile round four (issue 46): pq writes and deletes only what it owns, and an unusable or foreign cache
entry, cache or output folder is a miss or one line, never a crash.

Through the real command line on copies of the adopted 0.30.0 project (``proj``).  A path read from a file
(the output folder's manifest ``.pq-build``, a recorded edit of ``refs/pq/resolutions``, a record of the
download cache) is taken only when it names a file below pq's own folder: pq never writes nor deletes
``../notes.txt``, an absolute path, or a file reached through a symbolic link inside its folder.  A cache (or a
``--out`` folder) that cannot be made or written is one line naming it; a cache entry with the right seal but
another shape (valid JSON of the wrong types or keys, bytes that are not UTF-8) is recomputed, and the command
gives what it gives on a sound cache.  Every refused case asserts exit 1, the one line, no traceback, and
that every file and ref is as before (``state``), the user's file byte for byte.  The unwritable folders are
``chattr +i`` (CI runs as root, where permissions alone stop nothing): those cases skip where it is missing.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import RC2, git, new_project, pq, state
from test_errors import one_error_line, proj  # noqa: F401  (proj: a copy of adopted_030)

from patch_queue.sources.cache import write_sealed

USER = b"my own notes: not pq's\n"
CLEAN_TARGET = "c9e95ba32421"  # 0.30.0's series replays onto it without a conflict (see test_bad_input)
ZERO = "0" * 64


def refused(proj: Path, *args: str) -> str:
    """Run pq, expect exit 1 with one error line and no traceback, and nothing changed; return the line."""
    before = state(proj)
    proc = pq(proj, *args, check=1)
    line = one_error_line(proc)
    assert "Traceback" not in proc.stdout
    assert line.startswith("pq: error: "), line
    assert state(proj) == before
    return line


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {made.stderr.strip() or 'no chattr'}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=False)


# -- 1. the output folder's manifest names files below the folder only ----------------------------------------


def _manifest_line(proj: Path, rel: str) -> int:
    """Add a line naming ``rel`` to npu_worker/.pq-build; its line number."""
    manifest = proj / "npu_worker" / ".pq-build"
    text = manifest.read_text()
    manifest.write_text(text + f"{ZERO} {rel}\n")
    return text.count("\n") + 1


def _outside(proj: Path, tmp_path: Path, case: str) -> tuple[str, Path, str]:
    """(the manifest's path, the user's file it reaches, why it is not pq's) for each way out of the folder."""
    if case == "parent":
        mine = proj / "notes.txt"
        return "../notes.txt", mine, "which is not a file below npu_worker/"
    if case == "absolute":
        mine = tmp_path / "elsewhere" / "notes.txt"
        return str(mine), mine, "which is not a file below npu_worker/"
    (tmp_path / "elsewhere").mkdir()
    (proj / "npu_worker" / "sub").symlink_to(tmp_path / "elsewhere")
    mine = tmp_path / "elsewhere" / "x.py"
    return "sub/x.py", mine, "which is reached through the symbolic link npu_worker/sub"


@pytest.mark.parametrize("case", ["parent", "absolute", "link"])
def test_a_manifest_line_outside_the_folder_is_refused_and_its_file_kept(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    case: str,
) -> None:
    rel, mine, why = _outside(proj, tmp_path, case)
    mine.parent.mkdir(exist_ok=True)
    mine.write_bytes(USER)
    line = _manifest_line(proj, rel)
    expected = (
        f"pq: error: npu_worker/.pq-build:{line}: names {rel!r}, {why}; pq writes and deletes the files of "
        "npu_worker/ only, and did not write this one: delete the line, then run the command again"
    )
    for args in (("build",), ("build", "--discard"), ("refresh", "--to", CLEAN_TARGET, "--discard"), ("record",)):
        assert refused(proj, *args) == expected, args
        assert mine.read_bytes() == USER
    status = pq(proj, "status")  # said, not refused; and never an edit of the folder
    assert f"warning: {expected.removeprefix('pq: error: ')}" in status.stdout.splitlines()
    assert "unrecorded" not in status.stdout
    # the line deleted, the folder is pq's again
    manifest = proj / "npu_worker" / ".pq-build"
    manifest.write_text("".join(manifest.read_text().splitlines(keepends=True)[: line - 1]))
    pq(proj, "build")
    assert mine.read_bytes() == USER


def test_a_build_into_another_folder_reads_its_manifest_the_same_way(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    pq(proj, "build", "--out", str(tmp_path / "out"))
    mine = tmp_path / "notes.txt"
    mine.write_bytes(USER)
    manifest = tmp_path / "out" / ".pq-build"
    line = manifest.read_text().count("\n") + 1
    manifest.write_text(manifest.read_text() + f"{ZERO} ../notes.txt\n")
    assert refused(proj, "build", "--out", str(tmp_path / "out"), "--discard") == (
        f"pq: error: {tmp_path}/out/.pq-build:{line}: names '../notes.txt', which is not a file below out/; pq writes "
        f"and deletes the files of {tmp_path}/out/ only, and did not write this one: delete the line, then run the "
        "command again"
    )
    assert mine.read_bytes() == USER


# -- 2. a cache or an output folder that cannot be written: one line -------------------------------------------


def _below_a_file(tmp_path: Path) -> Path:
    (tmp_path / "afile").write_bytes(USER)
    return tmp_path / "afile" / "cache"


def test_a_cache_that_is_a_file_is_one_line(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "afile").write_bytes(USER)
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "afile"))
    assert refused(proj, "refresh", "--to", CLEAN_TARGET) == (
        f"pq: error: {tmp_path}/afile: the download cache (PQ_CACHE) is not a folder; point it at one"
    )
    assert (tmp_path / "afile").read_bytes() == USER


def test_a_cache_below_a_file_is_one_line(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = _below_a_file(tmp_path)
    monkeypatch.setenv("PQ_CACHE", str(cache))
    assert refused(proj, "refresh", "--to", CLEAN_TARGET) == (
        f"pq: error: {cache}/git: the download cache cannot be written (Not a directory); pq keeps the upstream "
        "mirror there: make it writable, or point PQ_CACHE at another folder"
    )
    assert (tmp_path / "afile").read_bytes() == USER


def test_a_cache_that_cannot_be_written_is_one_line(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("PQ_CACHE", str(cache))
    with immutable(cache):
        assert refused(proj, "refresh", "--to", CLEAN_TARGET) == (
            f"pq: error: {cache}/git: the download cache cannot be written (Operation not permitted); pq keeps the "
            "upstream mirror there: make it writable, or point PQ_CACHE at another folder"
        )
        assert refused(proj, "build", "--wheel") == (
            f"pq: error: {cache}/git: the download cache cannot be written (Operation not permitted); pq keeps the "
            "upstream mirror there: make it writable, or point PQ_CACHE at another folder"
        )
        # what needs no download reads on, only slower
        assert pq(proj, "status").returncode == 0
    assert list(cache.iterdir()) == []


def test_a_download_into_a_cache_that_cannot_be_written_is_one_line(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    (cache / "dist").mkdir(parents=True)
    # the choice of archive recorded, its file not there: a download, which has nowhere to go
    record = cache / "dist" / "vllm-omni==0.30.0.json"
    url = f"file://{tmp_path / 'vllm_omni-0.30.0-py3-none-any.whl'}"
    record.write_text(
        f'{{"filename": "vllm_omni-0.30.0-py3-none-any.whl", "url": "{url}", "sha256": "{ZERO}", "kind": "wheel"}}'
    )
    monkeypatch.setenv("PQ_CACHE", str(cache))
    with immutable(cache / "dist"):
        assert refused(project, "adopt", "vllm-omni==0.30.0") == (
            f"pq: error: {cache}/dist: the download cache cannot be written (Operation not permitted); pq keeps "
            "the release archives there: make it writable, or point PQ_CACHE at another folder"
        )


@pytest.mark.parametrize("case", ["file", "below-a-file", "immutable"])
def test_a_wheel_folder_that_cannot_be_written_is_one_line(
    proj: Path,  # noqa: F811
    case: str,
) -> None:
    (proj / "afile").write_bytes(USER)
    (proj / "frozen").mkdir()
    out, why = {
        "file": ("afile", "is not a folder"),
        "below-a-file": ("afile/x", "Not a directory"),
        "immutable": ("frozen", "Operation not permitted"),
    }[case]
    with immutable(proj / "frozen"):
        assert refused(proj, "build", "--wheel", "--out", out) == (
            f"pq: error: {out}: the wheel cannot be written there ({why}); name a folder pq can write with --out"
        )
    assert (proj / "afile").read_bytes() == USER
    assert list((proj / "frozen").iterdir()) == []
    built = pq(proj, "build", "--wheel", "--out", "wheels")
    assert built.stdout.strip().startswith("wheels/") or "wheels/" in built.stdout + built.stderr


def test_a_build_folder_that_cannot_be_written_is_one_line(proj: Path) -> None:  # noqa: F811
    (proj / "frozen").mkdir()
    with immutable(proj / "frozen"):
        assert refused(proj, "build", "--out", "frozen") == (
            "pq: error: frozen/.pq-build: cannot be written (Operation not permitted); everything was put back as it "
            "was; make room (or make it writable) and run `pq build` again"
        )


# -- 3. a cache entry of another shape, damaged or moved from another name is a miss ---------------------------

UPSTREAM_MAIN = "cd68936d7c56"  # the bundle's main: 0.30.0's series stops there with conflicts (every kind of entry)
WRONG = {  # the keys of every kind of entry, each of another type
    **dict.fromkeys(("asked", "files", "changes", "regions", "texts", "blobs"), 5),
    **dict.fromkeys(("text", "missing", "items", "side", "reason", "scanner", "format"), [1]),
}
DAMAGES = {
    "not UTF-8": b"\xff\xfe\x00",
    "a list of another shape": b"[{}]",
    "an empty object": b"{}",
    "a number": b"123",
    "a string": b'"x"',
    "a pair of numbers": b"[1, 2]",
    "every key of another type": json.dumps(WRONG).encode(),
    "nested past Python's stack": b"[" * 100_000,
}
TEXT_KINDS = ("layout", "explanation")  # any UTF-8 text is an answer there; a member's bytes are any bytes


def _entries(cache: Path) -> list[tuple[Path, str]]:
    """Every sealed entry of ``cache`` and the name it is sealed under."""
    derived = [(p, f"{p.parts[-4]}/{p.name}") for p in sorted((cache / "derived").rglob("*")) if p.is_file()]
    return derived + [(p, f"methods/{p.stem}") for p in sorted((cache / "methods").glob("*.json"))]


def _damage(cache: Path, damage: str) -> int:
    """Put ``damage`` (one of DAMAGES, sealed under each entry's own name; "moved": each entry's file over another
    of the same kind) over every entry that cannot hold it as an answer, and over the mirror's history caches;
    how many entries it changed."""
    entries = _entries(cache)
    files = {path: path.read_bytes() for path, _name in entries}
    changed = 0
    for i, (path, name) in enumerate(entries):
        kind = name.split("/")[0]
        if damage == "moved":
            other = next((p for p, n in entries[i + 1 :] + entries[:i] if n.split("/")[0] == kind), None)
            if other is None:
                continue
            path.write_bytes(files[other])
        elif kind == "member" or (kind in TEXT_KINDS and damage != "not UTF-8"):
            continue
        elif damage == "a number" and files[path].partition(b"\n")[2].isdigit():
            continue  # a count of candidate commits: a number is its answer
        else:
            write_sealed(path, name, DAMAGES[damage])
        changed += 1
    for history in (cache / "git").glob("*.json"):  # the mirror's: commits it does not have, values of other types
        data = json.loads(history.read_text())
        if "paths" in data:
            data["paths"] = {path: ["0" * 40] for path in data["paths"]}
        if "map" in data:
            data["map"] = {key: 5 for key in data["map"]}
        history.write_text(json.dumps(data))
    return changed


def test_a_cache_entry_of_another_shape_or_name_is_a_miss(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    corpus: Path,
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(Path(os.environ["PQ_CACHE"]) / "git", cache / "git", symlinks=True)
    monkeypatch.setenv("PQ_CACHE", str(cache))
    runs = iter(range(100))

    def run() -> list[tuple[int, str, str]]:
        """A refresh that stops at conflicts, pq status over it, and an adopt that searches the upstream history."""
        out = [pq(proj, "refresh", "--to", UPSTREAM_MAIN, check=None), pq(proj, "status", check=None)]
        pq(proj, "abort")
        out.append(pq(new_project(tmp_path / f"a{next(runs)}"), "adopt", str(corpus / "vllm-omni-0.30.0" / "npu")))
        return [(p.returncode, p.stdout, p.stderr) for p in out]

    run()  # the cache filled
    sound = run()
    assert [code for code, _o, _e in sound] == [3, 3, 0]
    for damage in [*DAMAGES, "moved"]:
        assert _damage(cache, damage) > 40, damage
        assert run() == sound, damage


# -- 4. a recorded edit names module files of the series only ----------------------------------------------------

REF = "refs/pq/resolutions"


def _store_with(proj: Path, path: str, data: bytes) -> str:
    """Commit onto refs/pq/resolutions a store whose entry at ``path`` holds ``data``; the entry's blob id."""
    head = git(proj, "rev-parse", REF).strip()
    blob = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"], cwd=proj, input=data, capture_output=True, check=True
    ).stdout.decode()
    listing = git(proj, "ls-tree", "-r", head)
    entries = {line.split("\t")[1]: line.split()[2] for line in listing.splitlines()}
    entries[path] = blob.strip()
    env = {**os.environ, "GIT_INDEX_FILE": str(proj / ".git" / "r4-index")}
    feed = "".join(f"100644 {b} 0\t{p}\n" for p, b in sorted(entries.items()))
    subprocess.run(["git", "update-index", "--index-info"], cwd=proj, input=feed, text=True, env=env, check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=proj, env=env, capture_output=True, text=True, check=True)
    (proj / ".git" / "r4-index").unlink()
    commit = git(proj, "commit-tree", tree.stdout.strip(), "-p", head, "-m", "hand-made").strip()
    git(proj, "update-ref", REF, commit)
    return blob.strip()


@pytest.mark.parametrize("name", ["../escape.py", "/tmp/escape.py", "a//b.py", ".pq-upstream/vllm_ascend/x.py"])
def test_a_recorded_edit_naming_no_module_path_is_a_damaged_entry(proj: Path, name: str) -> None:  # noqa: F811
    module = proj / "npu_worker" / "npu_model_runner.py"
    module.write_text(module.read_text() + "# a maintainer's note\n")
    pq(proj, "record")
    head = git(proj, "rev-parse", REF).strip()
    path = next(p for p in git(proj, "ls-tree", "-r", "--name-only", head).split() if p.startswith("edits/"))
    entry = json.loads(git(proj, "show", f"{head}:{path}"))
    (base, final), *_ = entry["files"].values()
    blob = _store_with(proj, path, json.dumps({**entry, "files": {name: [base, final]}}).encode())
    key = path.rsplit("/", 1)[1].removesuffix(".json")
    assert refused(proj, "refresh", "--to", CLEAN_TARGET) == (
        f'pq: error: {REF}:{path} ({blob}): "files" names {json.dumps(name)}, which is no module of a series; the '
        f"entry is damaged: drop it (`pq resolutions drop {key}`)"
    )


# -- 5. pq's own records (the undo record, the journal, a pending refresh) name pq's files only --------------------


def _blob(path: Path) -> str:
    return subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()


def _user_file(proj: Path, tmp_path: Path, case: str) -> tuple[str, Path]:
    """(a record's key for the user's file, the file) for each way out of pq's folders."""
    if case == "link":
        (tmp_path / "elsewhere").mkdir()
        (proj / "npu_worker" / "sub").symlink_to(tmp_path / "elsewhere")
        return "work:npu_worker/sub/x.py", tmp_path / "elsewhere" / "x.py"
    mine = tmp_path / "notes.txt"
    key = {"absolute": f"abs:{mine}", "parent": "work:../notes.txt", "patches": "work:patches/../../notes.txt"}[case]
    return key, mine


@pytest.mark.parametrize("case", ["absolute", "parent", "patches", "link"])
def test_an_undo_record_naming_a_file_pq_does_not_own_is_refused(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    case: str,
) -> None:
    pq(proj, "new", "foo")
    key, mine = _user_file(proj, tmp_path, case)
    mine.write_bytes(USER)
    record_path = proj / ".git" / "pq" / "undo.json"
    record = json.loads(record_path.read_text())
    record["files"].append({"path": key, "group": "out", "old": None, "new": _blob(mine)})
    record_path.write_text(json.dumps(record))
    assert refused(proj, "undo") == (
        f"pq: error: .git/pq/undo.json: unreadable undo record (it names {key}, which is no file pq writes in its "
        "folders); pq cannot undo"
    )
    assert mine.read_bytes() == USER


@pytest.mark.parametrize("verb", ["abort", "continue"])
@pytest.mark.parametrize("case", ["absolute", "parent", "link"])
def test_a_journal_naming_a_file_pq_does_not_own_is_refused(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    case: str,
    verb: str,
) -> None:
    key, mine = _user_file(proj, tmp_path, case)
    mine.write_bytes(USER)
    blob = _blob(mine)
    old, new = (None, blob) if verb == "abort" else (blob, None)  # either way: the user's file deleted
    journal = {"version": 1, "command": "build", "pid": 1, "refs": []}
    journal["files"] = [{"path": key, "group": "out", "old": old, "new": new}]
    (proj / ".git" / "pq").mkdir(exist_ok=True)
    (proj / ".git" / "pq" / "journal.json").write_text(json.dumps(journal))
    assert refused(proj, verb) == (
        f"pq: error: .git/pq/journal.json: unreadable pq journal (it names {key}, which is no file pq writes in its "
        "folders); compare patches/ and refs/pq/ by hand, then delete it"
    )
    assert mine.read_bytes() == USER


def test_abort_never_puts_the_output_folder_back_through_a_link(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    (proj / "npu_worker" / "sub").mkdir()
    (proj / "npu_worker" / "sub" / "x.py").write_text("# the maintainer's, kept by pq\n")
    pq(proj, "refresh", "--to", UPSTREAM_MAIN, check=3)
    shutil.rmtree(proj / "npu_worker" / "sub")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.py").write_bytes(USER)
    (proj / "npu_worker" / "sub").symlink_to(tmp_path / "elsewhere")
    assert refused(proj, "abort") == (
        "pq: error: npu_worker: pq does not put back 'sub/x.py', which is reached through the symbolic link "
        "npu_worker/sub: remove the link, then run `pq abort` again"
    )
    assert (tmp_path / "elsewhere" / "x.py").read_bytes() == USER
    (proj / "npu_worker" / "sub").unlink()
    pq(proj, "abort")
    assert (proj / "npu_worker" / "sub" / "x.py").read_text() == "# the maintainer's, kept by pq\n"


# -- 6. a release's pin record names an archive of dist/ only; a report is refused before the command runs ---------


@pytest.mark.parametrize("where", ["absolute", "parent"])
def test_a_pin_record_naming_a_file_outside_the_cache_is_a_miss(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    cache = tmp_path / "cache"
    (cache / "dist").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    payload = tmp_path / "payload"
    payload.write_bytes(USER)
    target = tmp_path / "outside" / "vllm_ascend-0.30.0rc2.tar.gz"
    filename = str(target) if where == "absolute" else "../../outside/vllm_ascend-0.30.0rc2.tar.gz"
    digest = hashlib.sha256(USER).hexdigest()
    record = {"filename": filename, "url": f"file://{payload}", "sha256": digest, "kind": "sdist"}
    (cache / "dist" / "vllm-ascend==0.30.0rc2.json").write_text(json.dumps(record))
    monkeypatch.setenv("PQ_CACHE", str(cache))
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path / 'no-index'}")  # the choice made again: no index here
    assert refused(proj, "refresh", "--to", "vllm-ascend==0.30.0rc2") == (
        "pq: error: unknown release vllm-ascend==0.30.0rc2 (no such package on the registry)"
    )
    assert list((tmp_path / "outside").iterdir()) == []


@pytest.mark.parametrize("option", ["--report", "--markdown"])
def test_a_refresh_report_into_a_folder_that_cannot_be_written_is_refused_before_the_refresh(
    proj: Path,  # noqa: F811
    option: str,
) -> None:
    (proj / "frozen").mkdir()
    with immutable(proj / "frozen"):
        assert refused(proj, "refresh", "--to", CLEAN_TARGET, "--no-check", option, "frozen/r") == (
            "pq: error: frozen/r: cannot be written: Operation not permitted"
        )


def _stored_as_deflated(zip_path: Path) -> None:
    """Rewrite the zip at ``zip_path`` (its comment kept: the seal of pq's unpacked copy) with every member stored,
    its headers saying deflated: each read is a zlib error."""
    with zipfile.ZipFile(zip_path) as src:
        members = {name: src.read(name) for name in src.namelist()}
        comment = src.comment
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        for name, data in members.items():
            out.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
        out.comment = comment
    data = bytearray(buffer.getvalue())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):  # a local header's method, the directory's
        at = data.find(signature)
        while at >= 0:
            data[at + offset : at + offset + 2] = (8).to_bytes(2, "little")
            at = data.find(signature, at + 4)
    zip_path.write_bytes(bytes(data))


def test_a_damaged_unpacked_copy_of_an_sdist_is_made_again(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pq(proj, "refresh", "--to", RC2, check=3)  # the sdist in the session's cache (downloaded once a run)
    pq(proj, "abort")
    cache, session = tmp_path / "cache", Path(os.environ["PQ_CACHE"])
    record = json.loads((session / "dist" / f"{RC2}.json").read_text())
    shutil.copytree(session / "git", cache / "git", symlinks=True)
    for name in (f"dist/{RC2}.json", f"dist/{record['filename']}", f"unpacked/{record['sha256']}.zip"):
        (cache / name).parent.mkdir(exist_ok=True)
        shutil.copy(session / name, cache / name)
    monkeypatch.setenv("PQ_CACHE", str(cache))
    sound = pq(proj, "refresh", "--to", RC2, check=3)
    pq(proj, "abort")
    shutil.rmtree(cache / "derived")  # (the files a snapshot read are kept there too)
    copy = cache / "unpacked" / f"{record['sha256']}.zip"
    _stored_as_deflated(copy)
    again = pq(proj, "refresh", "--to", RC2, check=3)
    assert (again.stdout, again.stderr) == (sound.stdout, sound.stderr)
    with zipfile.ZipFile(copy) as made:
        assert made.testzip() is None  # made again from the verified archive
