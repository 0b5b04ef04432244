"""Patch files against real git: pq's export (stack.export_patch) must write what ``git format-patch``
writes, parse() must read it back, apply() must produce what git committed, and ``git am`` must accept
the exported files.  Every repository is a sealed temporary one (fixed HOME, no system config, fixed
names, e-mails and dates)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patch_queue.errors import PatchError
from patch_queue.git.repo import Person, ProjectRepo
from patch_queue.series import stack
from patch_queue.series.diffs import apply, files_touched
from patch_queue.series.patchfile import PatchFile, check_message, parse, split_message

CORPUS = Path(os.environ.get("PQ_CORPUS", "/work/shared/corpus"))
NPU_RUNNER = CORPUS / "vllm-omni-0.30.0" / "npu" / "npu_ar_model_runner.py"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


class Repo:
    """A git repository in a sealed environment."""

    def __init__(self, path: Path, home: Path) -> None:
        self.path = path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        self.env.update(
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            GIT_CONFIG_NOSYSTEM="1",
            GIT_AUTHOR_NAME="A U Thor",
            GIT_AUTHOR_EMAIL="author@example.com",
            GIT_AUTHOR_DATE="2024-05-06T07:08:09+0200",
            GIT_COMMITTER_NAME="C O Mitter",
            GIT_COMMITTER_EMAIL="committer@example.com",
            GIT_COMMITTER_DATE="2024-05-06T07:08:09+0200",
            LC_ALL="C",
            COLUMNS="200",  # format-patch must ignore the terminal width
        )
        path.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)

    def git(self, *args: str, env: dict[str, str] | None = None) -> bytes:
        result = subprocess.run(["git", *args], cwd=self.path, env={**self.env, **(env or {})}, capture_output=True)
        if result.returncode:
            raise AssertionError(f"git {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")
        return result.stdout

    def out(self, *args: str) -> str:
        return self.git(*args).decode("utf-8")

    def write(self, name: str, data: bytes, mode: int | None = None) -> None:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if mode is not None:
            target.chmod(mode)

    def commit(self, message: str, author: str | None = None) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message, env={"GIT_AUTHOR_NAME": author} if author else None)
        return self.out("rev-parse", "HEAD").strip()

    def format_patch(self, commit: str, *extra: str) -> bytes:
        return self.git("format-patch", "-1", "--stdout", *extra, commit)

    def patchfile(self, commit: str) -> PatchFile:
        """The PatchFile for a commit, from git's own data; the diff is cut out of format-patch's output."""
        text = self.format_patch(commit, "--no-signature").decode("utf-8")
        subject, description = split_message(self.out("log", "-1", "--format=%B", commit))
        return PatchFile(
            subject=subject,
            description=description,
            author=self.out("log", "-1", "--format=%an <%ae>", commit).rstrip("\n"),
            date=self.out("log", "-1", "--format=%aD", commit).rstrip("\n"),
            diff=text[text.index("\ndiff --git ") + 1 :],
        )

    def blob(self, commit: str, name: str) -> bytes | None:
        result = subprocess.run(
            ["git", "cat-file", "blob", f"{commit}:{name}"], cwd=self.path, env=self.env, capture_output=True
        )
        return result.stdout if result.returncode == 0 else None

    def files(self, commit: str, names: list[str]) -> dict[str, bytes | None]:
        return {name: self.blob(commit, name) for name in names}

    def tree(self, commit: str) -> str:
        return self.out("rev-parse", f"{commit}^{{tree}}").strip()


def export(r: Repo, commit: str) -> bytes:
    """The patch file pq writes for a commit of r."""
    return stack.export_patch(ProjectRepo(r.path), commit)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo(tmp_path / "repo", tmp_path / "home")
    r.git("init", "-q", "-b", "main")
    r.write("a.txt", b"".join(b"line %d\n" % i for i in range(1, 31)))
    r.write("gone.txt", b"to be deleted\n")
    r.write("src/mod.py", b"def f():\n    return 1\n")
    r.write("nonl.txt", b"first\nlast without newline")
    r.write("old/name.py", b"".join(b"x = %d\n" % i for i in range(20)))
    r.commit("Initial commit")
    return r


def _edit_lines(data: bytes, edits: dict[int, bytes | None], inserts: dict[int, bytes] | None = None) -> bytes:
    lines = data.split(b"\n")
    out: list[bytes] = []
    for i, line in enumerate(lines):
        if inserts and i in inserts:
            out.append(inserts[i])
        if i in edits:
            if edits[i] is not None:
                out.append(edits[i])  # type: ignore[arg-type]
        else:
            out.append(line)
    return b"\n".join(out)


# Each case changes the fixture repository and commits; it returns the commit.
def case_modify(r: Repo) -> str:
    r.write("a.txt", _edit_lines((r.path / "a.txt").read_bytes(), {2: b"line 3 changed", 20: None}, {25: b"added"}))
    return r.commit("Modify a.txt in two places")


def case_add(r: Repo) -> str:
    r.write("new/file.py", b"print('hello')\n")
    r.write("empty.txt", b"")
    return r.commit("Add a file and an empty file")


def case_delete(r: Repo) -> str:
    (r.path / "gone.txt").unlink()
    return r.commit("Delete gone.txt")


def case_multi_file(r: Repo) -> str:
    r.write("a.txt", (r.path / "a.txt").read_bytes().replace(b"line 1\n", b"line one\n"))
    r.write("src/mod.py", b"def f():\n    return 2\n\n\ndef g():\n    return 3\n", mode=0o755)
    r.write("src/new_module.py", b"import os\n")
    (r.path / "gone.txt").unlink()
    (r.path / "new").mkdir(exist_ok=True)
    r.git("mv", "old/name.py", "new/name.py")
    r.write("new/name.py", (r.path / "new/name.py").read_bytes() + b"y = 1\n")
    return r.commit("Touch many files\n\nModify, add, delete, rename and chmod in one commit.")


def case_non_ascii(r: Repo) -> str:
    r.write("a.txt", (r.path / "a.txt").read_bytes().replace(b"line 5\n", "ligne cinq — été\n".encode()))
    message = (
        "Überarbeite die Ausgabe: naïve café handling für die NPU-Läufer, ganz lang\n\nCorps du message: déjà vu.\n"
    )
    return r.commit(message, author="Jöhn Dœ")


def case_no_newline(r: Repo) -> str:
    r.write("nonl.txt", b"first\nlast without newline, changed")
    r.write("a.txt", (r.path / "a.txt").read_bytes().rstrip(b"\n"))
    return r.commit("Edit files without a final newline")


def case_description(r: Repo) -> str:
    r.write("src/mod.py", b"def f():\n    return 10\n")
    message = (
        "Return ten from f\n\nThe first paragraph explains why.\nIt has two lines.\n\n"
        "    Indented block stays.\n\nSigned-off-by: A U Thor <author@example.com>\n"
    )
    return r.commit(message, author="A. U. Thor")


def case_crlf(r: Repo) -> str:
    r.write("dos.txt", b"one\r\ntwo\r\nthree\r\n")
    r.commit("Add a DOS file")
    r.write("dos.txt", b"one\r\n2\r\nthree\r\nfour\r")
    return r.commit("Edit a DOS file, keeping the carriage returns")


def case_long_names(r: Repo) -> str:
    deep = "some/very/long/directory/name/that/goes/on/and_on/file_with_a_long_name.py"
    r.write(deep, b"".join(b"value_%d = %d\n" % (i, i) for i in range(300)))
    r.write("caf\u00e9 menu.txt", "entr\u00e9e\n".encode())
    r.write("tab\tname.txt", b"x\n")
    subject = "A long subject that git folds at seventy-eight columns when it writes the mail header"
    return r.commit(subject, author="Someone With A Rather Long Name, Who Needs Quoting (Really)")


CASES: dict[str, Callable[[Repo], str]] = {
    "modify": case_modify,
    "add": case_add,
    "delete": case_delete,
    "multi_file": case_multi_file,
    "non_ascii": case_non_ascii,
    "no_newline": case_no_newline,
    "description": case_description,
    "crlf": case_crlf,
    "long_names": case_long_names,
}


def check_against_git(r: Repo, commit: str, tmp_path: Path, *, keep_cr: bool = False) -> PatchFile:
    """All the properties, for one commit."""
    p = r.patchfile(commit)
    rendered = export(r, commit)
    # the form pq writes (bodies = 2): git's --zero-commit; the form of older lineage steps: git's own
    assert rendered == r.format_patch(commit, "--no-signature", "--zero-commit")
    assert stack.export_patch(ProjectRepo(r.path), commit, bodies=1) == r.format_patch(commit, "--no-signature")

    assert parse(rendered, path="x.patch") == p
    assert parse(r.format_patch(commit), path="x.patch") == p  # with signature
    assert parse(r.format_patch(commit, "--no-stat"), path="x.patch") == p  # without diffstat

    touched = files_touched(p.diff)
    parent = r.out("rev-parse", f"{commit}^").strip()
    old = {name: data for name, data in r.files(parent, touched).items() if data is not None}
    assert apply(p.diff, old, patch_path="x.patch") == r.files(commit, touched)

    # git am of the rendered file at the parent gives the same tree.
    clone = Repo(tmp_path / f"am-{commit[:8]}", Path(r.env["HOME"]))
    clone.git("init", "-q", "-b", "main")
    clone.git("fetch", "-q", str(r.path), parent)
    clone.git("checkout", "-q", "FETCH_HEAD")
    patch_file = tmp_path / f"{commit[:8]}.patch"
    patch_file.write_bytes(rendered)
    clone.git("am", "-q", *(["--keep-cr"] if keep_cr else []), str(patch_file))
    assert clone.tree("HEAD") == r.tree(commit)
    assert clone.out("log", "-1", "--format=%an <%ae>%n%aD%n%B") == r.out(
        "log", "-1", "--format=%an <%ae>%n%aD%n%B", commit
    )
    return p


@pytest.mark.parametrize("name", sorted(CASES))
def test_render_parse_apply_am_match_git(repo: Repo, tmp_path: Path, name: str) -> None:
    commit = CASES[name](repo)
    # git am drops the CR of every line unless told to keep them (am.keepcr); the patch itself is exact.
    check_against_git(repo, commit, tmp_path, keep_cr=name == "crlf")


def test_expected_layout(repo: Repo) -> None:
    """A readable spot check of the layout, beyond byte equality with git."""
    commit = case_multi_file(repo)
    text = export(repo, commit).decode()
    head, _, rest = text.partition("\n---\n")
    assert head.splitlines()[:4] == [
        f"From {'0' * len(commit)} Mon Sep 17 00:00:00 2001",
        "From: A U Thor <author@example.com>",
        "Date: Mon, 6 May 2024 07:08:09 +0200",
        "Subject: [PATCH] Touch many files",
    ]
    assert head.endswith("\n\nModify, add, delete, rename and chmod in one commit.")
    stat = rest[: rest.index("\ndiff --git")]
    assert stat.splitlines() == [
        " a.txt                | 2 +-",
        " gone.txt             | 1 -",
        " {old => new}/name.py | 1 +",
        " src/mod.py           | 6 +++++-",
        " src/new_module.py    | 1 +",
        " 5 files changed, 8 insertions(+), 3 deletions(-)",
        " delete mode 100644 gone.txt",
        " rename {old => new}/name.py (95%)",
        " mode change 100644 => 100755 src/mod.py",
        " create mode 100644 src/new_module.py",
    ]
    numbered = repo.format_patch(commit, "-n", "--subject-prefix=PATCH v2")
    assert b"Subject: [PATCH v2 1/1] Touch many files\n" in numbered
    assert parse(numbered, path="x.patch") == repo.patchfile(commit)
    assert files_touched(repo.patchfile(commit).diff) == [
        "a.txt",
        "gone.txt",
        "old/name.py",
        "new/name.py",
        "src/mod.py",
        "src/new_module.py",
    ]


@pytest.mark.skipif(not NPU_RUNNER.is_file(), reason="the corpus is not available")
def test_real_size_file(repo: Repo, tmp_path: Path) -> None:
    original = NPU_RUNNER.read_bytes()
    repo.write("vllm_omni/platforms/npu/worker/npu_ar_model_runner.py", original)
    repo.commit("Import the NPU AR model runner")
    lines = original.split(b"\n")
    edits: dict[int, bytes | None] = {}
    inserts: dict[int, bytes] = {}
    for i in range(5, len(lines) - 5, 37):
        edits[i] = lines[i] + b"  # pq: adjusted"
    for i in range(20, len(lines) - 5, 101):
        inserts[i] = b"# pq: inserted line"
    for i in range(60, len(lines) - 5, 211):
        edits[i] = None
    changed = _edit_lines(original, edits, inserts).replace(b"import torch\n", b"import torch  # noqa\n", 1)
    repo.write("vllm_omni/platforms/npu/worker/npu_ar_model_runner.py", changed)
    repo.write("vllm_omni/platforms/npu/worker/notes.md", "Ascend NPU — notes\n".encode())
    commit = repo.commit("npu: adjust the AR model runner for the new upstream\n\nMany small edits all over the file.")
    p = check_against_git(repo, commit, tmp_path)
    assert len(p.diff.splitlines()) > 200
    assert " 2 files changed" in export(repo, commit).decode()


def test_binary_stat_matches_git(repo: Repo) -> None:
    """Binary patches are written as git writes them ("Bin" diffstat lines with the sizes, full index ids);
    parse() refuses them."""
    rng = random.Random(7)
    blob = bytes(rng.randrange(256) for _ in range(6000)) + b"\0"
    repo.write("data.bin", blob)
    repo.write("small.bin", b"\0\1\2")
    first = repo.commit("Add binary files")
    repo.write("data.bin", blob[:3000] + b"patched" + blob[3000:])
    (repo.path / "small.bin").unlink()
    second = repo.commit("Change and delete binary files")
    for commit in (first, second):
        assert export(repo, commit) == repo.format_patch(commit, "--no-signature", "--zero-commit")
    assert b" data.bin  | Bin 6001 -> 6008 bytes\n" in export(repo, second)
    with pytest.raises(PatchError, match=r"^x\.patch:\d+: binary patch for data\.bin is not supported"):
        parse(repo.format_patch(second), path="x.patch")


def test_diffstat_layout_matches_git(repo: Repo) -> None:
    """Random commits with big and small changes, long names and renames: the diffstat scaling and the
    name abbreviation must equal git's."""
    rng = random.Random(2024)
    names = [
        "a.txt",
        "src/mod.py",
        "deep/er/and/deeper/still/going/down/into/the/tree/with/a/very_long_file_name.py",
        "x/y/z.py",
        "x/q/z.py",
    ]
    for n in range(12):
        for name in rng.sample(names, rng.randint(1, 4)):
            size = rng.choice([1, 3, 10, 60, 400])
            repo.write(name, b"".join(b"%d %d\n" % (n, rng.randrange(5)) for _ in range(size)))
        if n % 4 == 3:
            src, dst = ("x/y/z.py", "x/q/z.py") if (repo.path / "x/y/z.py").exists() else ("x/q/z.py", "x/y/z.py")
            if (repo.path / src).exists() and not (repo.path / dst).exists():
                repo.git("mv", src, dst)
        commit = repo.commit(f"Change {n}")
        p = repo.patchfile(commit)
        assert export(repo, commit) == repo.format_patch(commit, "--no-signature", "--zero-commit")
        assert parse(export(repo, commit), path="x.patch") == p


def test_headers_match_git(repo: Repo) -> None:
    """Folding and RFC 2047 encoding of subjects and author names, against git."""
    subjects = [
        "x" * 100,
        "word " * 30,
        "Subject with =? in it",
        "日本語の件名 " * 8,
        "Ends with an underscore_ and ? and = signs",
        "ESC \x1b[1mbold\x1b[0m subject",
    ]
    authors = ["Dr. Who", 'Quote "Q" Back\\slash', "Name " * 20, "Ünïcödé " * 10, "N" * 90]
    for i, subject in enumerate(subjects):
        repo.write("a.txt", b"%d\n" % i)
        commit = repo.commit(subject + "\n\nbody", author=authors[i % len(authors)])
        p = repo.patchfile(commit)
        rendered = export(repo, commit)
        assert rendered == repo.format_patch(commit, "--no-signature", "--zero-commit")
        assert parse(rendered, path="x.patch") == p


# ------------------------------------------------------------------------------------------------
# Errors.


@pytest.fixture
def modified(repo: Repo) -> tuple[Repo, str, bytes]:
    commit = case_modify(repo)
    return repo, commit, export(repo, commit)


def line_of(data: bytes, prefix: bytes, nth: int = 1) -> int:
    """1-based number of the nth line of data that starts with prefix."""
    hits = [i + 1 for i, line in enumerate(data.split(b"\n")) if line.startswith(prefix)]
    return hits[nth - 1]


def test_apply_to_wrong_content_fails_with_hunk_and_line(modified: tuple[Repo, str, bytes]) -> None:
    repo, commit, data = modified
    p = parse(data, path="patches/0001-modify.patch")
    old = repo.blob(f"{commit}^", "a.txt")
    assert old is not None
    wrong = old.replace(b"line 24\n", b"line 24 edited locally\n")
    with pytest.raises(PatchError) as info:
        apply(p.diff, {"a.txt": wrong}, patch_path="patches/0001-modify.patch", first_line=p.diff_line)
    second_hunk = line_of(data, b"@@ ", 2)
    assert second_hunk == 22
    assert str(info.value) == f"patches/0001-modify.patch:{second_hunk}: hunk 2 for a.txt does not apply"
    assert info.value.line == second_hunk

    with pytest.raises(PatchError) as info:
        apply(p.diff, {"a.txt": old.replace(b"line 1\n", b"")}, patch_path="p.patch", first_line=p.diff_line)
    assert str(info.value) == f"p.patch:{line_of(data, b'@@ ')}: hunk 1 for a.txt does not apply"

    with pytest.raises(PatchError) as info:
        apply(p.diff, {}, patch_path="p.patch", first_line=p.diff_line)
    assert str(info.value) == f"p.patch:{line_of(data, b'diff --git')}: a.txt does not exist, the patch changes it"


def test_apply_is_byte_exact(repo: Repo) -> None:
    """No fuzz and no line-end normalisation: a CR LF file does not take an LF patch."""
    commit = case_modify(repo)
    p = repo.patchfile(commit)
    old = repo.blob(f"{commit}^", "a.txt")
    assert old is not None
    with pytest.raises(PatchError, match=r"^p:\d+: hunk 1 for a\.txt does not apply$"):
        apply(p.diff, {"a.txt": old.replace(b"\n", b"\r\n")}, patch_path="p")
    with pytest.raises(PatchError, match=r"hunk 1 for a\.txt does not apply$"):
        apply(p.diff, {"a.txt": b"\n" + old}, patch_path="p")  # shifted by one line: no offset search
    commit = case_no_newline(repo)
    p = repo.patchfile(commit)
    with pytest.raises(PatchError, match=r"hunk 1 for nonl\.txt does not apply$"):
        apply(p.diff, {"nonl.txt": b"first\nlast without newline\n", "a.txt": old}, patch_path="p")


def replace_line(data: bytes, prefix: bytes, new: bytes | None) -> bytes:
    lines = data.split(b"\n")
    i = next(i for i, line in enumerate(lines) if line.startswith(prefix))
    if new is None:
        del lines[i]
    else:
        lines[i] = new
    return b"\n".join(lines)


MALFORMED: list[tuple[str, Callable[[bytes], bytes], str]] = [
    ("empty", lambda d: b"", "x.patch:1: not an mbox patch: it does not start with a 'From ' line"),
    (
        "plain diff",
        lambda d: d[d.index(b"diff --git") :],
        "x.patch:1: not an mbox patch: it does not start with a 'From ' line",
    ),
    ("no subject", lambda d: replace_line(d, b"Subject:", None), "x.patch:4: not an mbox patch: no Subject: header"),
    ("no diff", lambda d: d[: d.index(b"diff --git")], "x.patch:9: no diff in the patch (no 'diff --git' line)"),
    (
        "truncated hunk",
        lambda d: d[: d.rindex(b"\n", 0, len(d) - 1) + 1],
        "x.patch:22: hunk 2 for a.txt does not match its header's line counts (truncated patch?)",
    ),
    (
        "hunk with an extra line",
        lambda d: d.replace(b"+added\n", b"+added\n+more\n"),
        "x.patch:22: hunk 2 for a.txt does not match its header's line counts (truncated patch?)",
    ),
    (
        "cut in the middle of a line",
        lambda d: d[:-3],
        "x.patch:34: the last line has no newline (truncated patch?)",
    ),
    (
        "not UTF-8",
        lambda d: d.replace(b"line 3 changed", b"line 3 \xe9t\xe9"),
        "x.patch:18: not valid UTF-8 (byte 0xe9 at column 9)",
    ),
    (
        "CR LF headers",
        lambda d: d.replace(b"\n", b"\r\n"),
        "x.patch:1: mail header line ends with CR LF (DOS line ends)",
    ),
    (
        "CR LF in one header",
        lambda d: d.replace(b"+0200\n", b"+0200\r\n", 1),
        "x.patch:3: mail header line ends with CR LF (DOS line ends)",
    ),
    (
        "absolute path",
        lambda d: d.replace(b"--- a/a.txt", b"--- /etc/passwd"),
        "x.patch:12: file name '/etc/passwd' is an absolute path",
    ),
    (
        "dot-dot path",
        lambda d: d.replace(b"a/a.txt", b"a/../../a.txt").replace(b"b/a.txt", b"b/../../a.txt"),
        "x.patch:10: file name '../../a.txt' has a '..' component",
    ),
    (
        "missing b/ prefix",
        lambda d: d.replace(b"+++ b/a.txt", b"+++ a.txt"),
        "x.patch:13: file name 'a.txt' does not start with 'b/'",
    ),
    (
        "missing prefixes everywhere",
        lambda d: d.replace(b"a/a.txt", b"a.txt").replace(b"b/a.txt", b"a.txt"),
        "x.patch:10: file name 'a.txt' does not start with 'a/'",
    ),
    (
        "into .git",
        lambda d: d.replace(b"a/a.txt", b"a/.git/hooks/pre-commit").replace(b"b/a.txt", b"b/.git/hooks/pre-commit"),
        "x.patch:10: file name '.git/hooks/pre-commit' points into .git",
    ),
    (
        "two patches",
        lambda d: d + d,
        "x.patch:35: more than one patch in the file (one commit per file expected)",
    ),
    (
        "garbage after the diff",
        lambda d: d + b"trailing text\n",
        "x.patch:35: unexpected line after the diff",
    ),
]


@pytest.mark.parametrize("label,mutate,message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_patches(
    modified: tuple[Repo, str, bytes], label: str, mutate: Callable[[bytes], bytes], message: str
) -> None:
    _, _, data = modified
    with pytest.raises(PatchError) as info:
        parse(mutate(data), path="x.patch")
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_binary_patches_are_refused(repo: Repo) -> None:
    repo.write("blob.bin", b"\0\1\2\3")
    commit = repo.commit("Add a binary file")
    with_data = repo.format_patch(commit)
    assert str(pytest.raises(PatchError, parse, with_data, path="b.patch").value) == (
        f"b.patch:{line_of(with_data, b'GIT binary patch')}: binary patch for blob.bin is not supported "
        "(pq keeps text changes only)"
    )
    without = repo.format_patch(commit, "--no-binary")
    assert str(pytest.raises(PatchError, parse, without, path="b.patch").value) == (
        f"b.patch:{line_of(without, b'Binary files')}: binary patch for blob.bin is not supported "
        "(pq keeps text changes only)"
    )


def test_export_refuses_what_git_am_would_misread(modified: tuple[Repo, str, bytes]) -> None:
    repo, commit, data = modified
    p = parse(data, path="x.patch")
    bad = [
        PatchFile(p.subject, "text\n---\nmore", p.author, p.date, p.diff),
        PatchFile(p.subject, "Date: tomorrow", p.author, p.date, p.diff),
        PatchFile("two\nlines", "", p.author, p.date, p.diff),
        PatchFile(p.subject, "", "no email", p.date, p.diff),
    ]
    for q in bad:
        with pytest.raises(PatchError):
            check_message(q.subject, q.description, q.author)
    repo.write("a.txt", b"cut\n")
    cut = repo.commit("A subject\n\ntext\n---\nmore")
    with pytest.raises(PatchError, match=r"^description line 2 '---' would end the commit message for git am$"):
        export(repo, cut)


def test_an_empty_patch_is_what_format_patch_always_writes(repo: Repo) -> None:
    """A commit that changes nothing (`pq new` without edits, as `stg new`): the mail header and the message,
    no diff; it reads back as an empty diff, and `git am --allow-empty` takes it."""
    repo.write("a.txt", b"first\n")
    repo.commit("First")
    repo.git("commit", "-q", "--allow-empty", "-m", "Nothing", "-m", "at all")
    empty = repo.out("rev-parse", "HEAD").strip()
    data = export(repo, empty)
    assert data == repo.format_patch(empty, "--no-signature", "--always", "--zero-commit")
    assert data.endswith(b"Subject: [PATCH] Nothing\n\nat all\n") and b"diff --git" not in data
    p = parse(data, path="x.patch")
    assert (p.subject, p.description, p.diff) == ("Nothing", "at all", "")
    assert parse(data[: data.index(b"\n\nat all")] + b"\n\n", path="x.patch").diff == ""  # no description
    with pytest.raises(PatchError, match="no diff in the patch"):  # a "---" and no diff: cut, not empty
        parse(data + b"---\n a.txt | 1 +\n", path="x.patch")


def test_export_of_a_blank_message(repo: Repo) -> None:
    """git writes "Subject: [PATCH]" for a blank message; pq keeps the space its own writer put after the tag."""
    repo.write("a.txt", b"blank\n")
    repo.git("commit", "-q", "-a", "--allow-empty-message", "-m", " ")
    commit = repo.out("rev-parse", "HEAD").strip()
    data = export(repo, commit)
    assert data == repo.format_patch(commit, "--no-signature", "--zero-commit").replace(
        b"Subject: [PATCH]\n", b"Subject: [PATCH] \n"
    )
    assert parse(data, path="x.patch").subject == ""


def test_export_ignores_the_maintainers_git_config(repo: Repo) -> None:
    """The bytes depend on the commits alone: not on config that changes what format-patch writes."""
    first = case_modify(repo)
    second = case_multi_file(repo)
    expected = [repo.format_patch(c, "--no-signature", "--zero-commit") for c in (first, second)]
    for key, value in [
        ("diff.noprefix", "true"),
        ("diff.algorithm", "histogram"),
        ("diff.renames", "false"),
        ("core.abbrev", "12"),
        ("format.signature", "sig"),
        ("format.numbered", "true"),
        ("format.subjectPrefix", "PQ"),
        ("format.headers", "X-Extra: 1"),
    ]:
        repo.git("config", key, value)
    (repo.path / ".gitattributes").write_text("*.py diff=python\n")
    assert export(repo, first) == expected[0]
    assert stack.export_patches(ProjectRepo(repo.path), [second, first, second]) == [expected[1], *expected]


# ------------------------------------------------------------------------------------------------
# Robustness: parse() raises PatchError and nothing else, whatever the bytes.

_FUZZ_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def parse_or_one_line_error(data: bytes, path: str = "fuzz.patch") -> PatchFile | None:
    """Parse ``data``: it parses, or raises PatchError with one line naming ``path``; what parses, check_message,
    files_touched and apply handle too (a one-line PatchError at worst).  Shared with test_properties."""

    def one_line(e: PatchError) -> None:
        assert "\n" not in str(e) and str(e).startswith(path + ":"), str(e)

    try:
        p = parse(data, path=path)
    except PatchError as e:
        one_line(e)
        return None
    try:
        check_message(p.subject, p.description, p.author)
    except PatchError:
        pass
    try:
        touched = files_touched(p.diff)
        apply(p.diff, {f: b"" for f in touched}, patch_path=path, first_line=p.diff_line)
    except PatchError as e:
        one_line(e)
    return p


def mutate(patch: bytes, data: st.DataObject, rounds: int) -> bytes:
    """``patch`` after up to ``rounds`` random edits: truncation, a line deleted, duplicated or swapped, a
    byte replaced or flipped, bytes inserted, CR LF line ends."""
    kinds = ["truncate", "delete line", "duplicate line", "swap lines", "replace byte", "flip byte", "insert", "crlf"]
    for _ in range(data.draw(st.integers(1, rounds))):
        kind = data.draw(st.sampled_from(kinds))
        lines = patch.split(b"\n")
        if kind == "truncate":
            patch = patch[: data.draw(st.integers(0, len(patch)))]
        elif kind == "delete line" and lines:
            del lines[data.draw(st.integers(0, len(lines) - 1))]
            patch = b"\n".join(lines)
        elif kind == "duplicate line" and lines:
            i = data.draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            patch = b"\n".join(lines)
        elif kind == "swap lines" and len(lines) > 1:
            i = data.draw(st.integers(0, len(lines) - 2))
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
            patch = b"\n".join(lines)
        elif kind == "replace byte" and patch:
            i = data.draw(st.integers(0, len(patch) - 1))
            patch = patch[:i] + bytes([data.draw(st.integers(0, 255))]) + patch[i + 1 :]
        elif kind == "flip byte" and patch:
            i = data.draw(st.integers(0, len(patch) - 1))
            patch = patch[:i] + bytes([patch[i] ^ (1 << data.draw(st.integers(0, 7)))]) + patch[i + 1 :]
        elif kind == "insert":
            i = data.draw(st.integers(0, len(patch)))
            chunk = data.draw(
                st.one_of(
                    st.binary(min_size=1, max_size=8),
                    st.sampled_from(
                        [b"\n", b"\r\n", b"@@ -1 +1 @@\n", b"\\ No newline at end of file\n", b"-- \n", b" "]
                    ),
                )
            )
            patch = patch[:i] + chunk + patch[i:]
        elif kind == "crlf":
            patch = patch.replace(b"\n", b"\r\n")
    return patch


@_FUZZ_SETTINGS
@given(st.binary(max_size=2000))
def test_parse_random_bytes(data: bytes) -> None:
    parse_or_one_line_error(data)


@pytest.fixture(scope="module")
def real_patch(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    base = tmp_path_factory.mktemp("fuzz")
    r = Repo(base / "repo", base / "home")
    r.git("init", "-q", "-b", "main")
    r.write("a.txt", b"".join(b"line %d\n" % i for i in range(1, 31)))
    r.write("old/name.py", b"".join(b"x = %d\n" % i for i in range(20)))
    r.write("nonl.txt", b"a\nb")
    r.commit("Initial commit")
    r.write("a.txt", _edit_lines((r.path / "a.txt").read_bytes(), {2: b"l\xc3\xa9ne 3", 20: None}, {25: b"added"}))
    (r.path / "new").mkdir(exist_ok=True)
    r.git("mv", "old/name.py", "new/name.py")
    r.write("nonl.txt", b"a\nc")
    r.write("mode.sh", b"#!/bin/sh\n", mode=0o755)
    commit = r.commit("Fuzz seed: \u00fcber\n\nBody text.")
    return r.format_patch(commit)


@_FUZZ_SETTINGS
@given(data=st.data())
def test_parse_mutated_real_patch(real_patch: bytes, data: st.DataObject) -> None:
    parse_or_one_line_error(mutate(real_patch, data, 3))


@settings(max_examples=200, deadline=None)
@given(
    subject=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\n\r\t"), max_size=120),
    description=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\r"), max_size=200),
    name=st.text(st.characters(exclude_categories=["Cs"], exclude_characters="<>\n\r\t"), min_size=1, max_size=90),
)
def test_render_parse_round_trip(
    round_trip_repo: tuple[ProjectRepo, str], subject: str, description: str, name: str
) -> None:
    """parse(export(commit)) == p for any subject, description and author that a commit carries and pq exports."""
    diff = "diff --git a/f b/f\nindex 7898192..6178079 100644\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    p = PatchFile(
        subject.strip(), description.rstrip("\n"), f"{name} <n@example.com>", "Thu, 1 Jan 1970 00:00:00 +0000", diff
    )
    try:
        data = render(round_trip_repo, p)
    except PatchError:
        return
    assert parse(data, path="r.patch") == p


@pytest.fixture(scope="module")
def round_trip_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[ProjectRepo, str]:
    base = tmp_path_factory.mktemp("round-trip")
    r = Repo(base / "repo", base / "home")
    r.git("init", "-q", "-b", "main")
    repo = ProjectRepo(r.path)
    person = Person("pq", "pq@localhost", 0, 0)
    return repo, repo.commit(repo.write_tree({"f": b"a\n"}), [], "base\n", person, person)


def render(round_trip_repo: tuple[ProjectRepo, str], p: PatchFile) -> bytes:
    """The patch pq writes for the commit it makes of p (f: a -> b), as an import would make it; PatchError
    when pq refuses to export it or the commit cannot carry p as it is (a name git trims, a description
    git's message layout normalises)."""
    repo, parent = round_trip_repo
    person = stack.parse_person(p.author, p.date, path="r.patch")
    try:
        commit = repo.commit(repo.write_tree({"f": b"b\n"}), [parent], stack.message_of(p), person, person)
    except (ValueError, pygit2.GitError) as e:
        raise PatchError(f"no commit carries {p.author!r}") from e
    info = repo.commit_info(commit)
    carried = (*split_message(info.message), f"{info.author.name} <{info.author.email}>")
    if carried != (p.subject, p.description, p.author):
        raise PatchError("the commit does not carry p as it is")
    return stack.export_patch(repo, commit)
