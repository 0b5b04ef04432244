"""Hostile round four (issue 46): names at the door, and the bytes pq takes from the user's files.

One rule for a module's name and a patch's file name (``NNNN-name.patch``, the whole of it): a name git takes
as a ref, one file name of at most 250 bytes (255 less git's ``.lock``), no control character, no backslash;
checked where a name comes in (a folder ``pq adopt`` or ``pq merge`` reads, ``pq new``/``rename``/``squash``/
``import``, ``series``, ``queue.toml``), a name pq makes itself cut to fit.  A module pq adopts or merges, a GPU
runner ``pq sync-gpu`` reads, a diff ``pq import`` takes, a message: UTF-8 text without a NUL byte, refused
naming the user's file and line; a message line git am would read as the start of another mail is refused.

Through the real command line on the adopted 0.30.0 project (``proj``).  Every refused case checks exit 1, the
one line, no traceback, and every file and ref as before (``refused``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import BASE_030, corpus_dir, git, new_project, pq
from test_errors import one_error_line, proj  # noqa: F401  (proj: a copy of adopted_030)
from test_hostile_files import refused

TOP = "0016-npu-model-runner-model-forward.patch"
LONG = "a" * 300
FIT = "b" * 239  # 0017-<239>.patch: 250 bytes, the longest name


def runners(tmp_path: Path, kind: str = "npu") -> tuple[Path, Path]:
    """A copy of vllm-omni 0.30.0's NPU (or GPU) runners to spoil, and the corpus folder itself."""
    found = corpus_dir()
    if found is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    source = found / "vllm-omni-0.30.0" / kind
    return Path(shutil.copytree(source, tmp_path / f"{kind}-copy")), source


def mails(patch: Path, out: Path) -> int:
    """How many mails ``git am`` reads from ``patch`` (git mailsplit, as git am splits its input), split into
    the new folder ``out``."""
    out.mkdir()
    return int(git(out, "mailsplit", f"-o{out}", str(patch)).strip())


# -- 1. a module's name, from a folder pq adopts or merges ---------------------------------------------------

BAD_MODULES = [
    ("ba\nd.py", "module file 'ba\\nd.py' holds a control character (U+000A): rename it"),
    ("a\\b.py", "module file 'a\\b.py' holds a backslash: rename it"),
    ("a b.py", "module file 'a b.py' is no name git takes for a ref"),
    ("m" * 248 + ".py", f"module file '{'m' * 40}…{'m' * 9}.py' is 251 bytes long; a file name holds at most 250"),
]


@pytest.mark.parametrize(("name", "said"), BAD_MODULES, ids=["newline", "backslash", "space", "long"])
def test_adopt_refuses_a_module_name_against_the_rule(tmp_path: Path, name: str, said: str) -> None:
    folder, _source = runners(tmp_path)
    (folder / name).write_bytes(b"X = 1\n")
    project = new_project(tmp_path / "p")
    line = refused(project, "adopt", str(folder), "--at", BASE_030)
    assert line.startswith(f"pq: error: {folder}: {said}"), line


@pytest.mark.parametrize(("name", "said"), BAD_MODULES[:2], ids=["newline", "backslash"])
def test_merge_refuses_a_module_name_against_the_rule(proj: Path, tmp_path: Path, name: str, said: str) -> None:  # noqa: F811
    folder, source = runners(tmp_path)
    (folder / name).write_bytes(b"X = 1\n")
    assert refused(proj, "merge", str(folder), "--since", str(source)) == f"pq: error: {folder}: {said}"
    pq(proj, "build", "--discard")  # every command still works
    pq(proj, "status")


def test_a_module_new_in_a_merge_with_a_long_name_gets_a_patch_name_that_fits(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    folder, source = runners(tmp_path)
    (folder / ("m" * 240 + ".py")).write_bytes(b"X = 1\n")
    pq(proj, "merge", str(folder), "--since", str(source), "--no-check")
    name = (proj / "patches" / "series").read_text().split()[-1]
    assert name == "0017-" + "m" * 200 + ".patch"
    assert (proj / "npu_worker" / ("m" * 240 + ".py")).read_bytes() == b"X = 1\n"
    pq(proj, "pop")
    pq(proj, "push")


# -- 2. a module's bytes: UTF-8 text without a NUL, or the user's file named -----------------------------------

SPOILED = [
    (b"# caf\xe9\n", "byte 0xe9 is not UTF-8 at column 6"),
    (b"# a\x00b\n", "a NUL byte (0x00) at column 4"),
]
TEXT_ONLY = "a module of the series is UTF-8 text without NUL bytes (a patch holds text only): fix the file, then run"


@pytest.mark.parametrize(("tail", "said"), SPOILED, ids=["not-utf8", "nul"])
def test_merge_refuses_a_module_that_is_not_text_naming_the_source_file(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    tail: bytes,
    said: str,
) -> None:
    folder, source = runners(tmp_path)
    module = folder / "npu_ar_worker.py"
    line = module.read_bytes().count(b"\n") + 1
    module.write_bytes(module.read_bytes() + tail)
    got = refused(proj, "merge", str(folder), "--since", str(source))
    assert got.startswith(f"pq: error: {module}:{line}: {said}; {TEXT_ONLY}"), got
    pq(proj, "status")


@pytest.mark.parametrize(("tail", "said"), SPOILED, ids=["not-utf8", "nul"])
def test_adopt_refuses_a_module_that_is_not_text_naming_the_source_file(tmp_path: Path, tail: bytes, said: str) -> None:
    folder, _source = runners(tmp_path)
    module = folder / "base.py"
    line = module.read_bytes().count(b"\n") + 1
    module.write_bytes(module.read_bytes() + tail)
    got = refused(new_project(tmp_path / "p"), "adopt", str(folder), "--at", BASE_030)
    assert got.startswith(f"pq: error: {module}:{line}: {said}; {TEXT_ONLY}"), got


def test_sync_gpu_refuses_a_gpu_runner_that_is_not_text(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    folder, _source = runners(tmp_path, "gpu")
    module = folder / "gpu_ar_model_runner.py"
    line = module.read_bytes().count(b"\n") + 1
    module.write_bytes(module.read_bytes() + b"# a\x00b\n")
    assert refused(proj, "sync-gpu", "--omni", "0.30.0", "--since", str(folder)) == (
        f"pq: error: {module}:{line}: a NUL byte (0x00) at column 4; a GPU runner is read as UTF-8 text"
    )


# -- 3. a patch's name: new, rename, squash, import, series, queue.toml ----------------------------------------


@pytest.mark.parametrize(
    "args",
    [("new", LONG), ("rename", LONG), ("squash", "-n", LONG, TOP, "0015-npu-model-runner-dummy-run")],
    ids=["new", "rename", "squash"],
)
def test_a_patch_name_too_long_for_a_file_is_refused(proj: Path, args: tuple[str, ...]) -> None:  # noqa: F811
    line = refused(proj, *args)
    assert line.startswith("pq: error: invalid patch name 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…aaaaaaaaaaaa': "), (
        line
    )
    assert line.endswith("the file name is 311 bytes long; a file name holds at most 250"), line


def test_the_longest_patch_name_works_in_every_command(proj: Path) -> None:  # noqa: F811
    refused(proj, "new", FIT + "b")
    pq(proj, "new", FIT)
    name = f"0017-{FIT}.patch"
    assert len(name) == 250 and (proj / "patches" / name).is_file()
    pq(proj, "rename", "c" * 239)
    pq(proj, "pop")
    pq(proj, "push")
    pq(proj, "status")


@pytest.mark.parametrize(
    ("file", "named"), [("d" * 245 + ".patch", "d" * 200), ("0003-fix..it.diff", "fix.it")], ids=["long", "dotdot"]
)
def test_import_makes_the_name_it_takes_from_a_file_name_fit_the_rule(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    file: str,
    named: str,
) -> None:
    diff = pq(proj, "show", TOP).stdout
    pq(proj, "pop")
    source = tmp_path / file
    source.write_text(diff)
    pq(proj, "delete", TOP)
    pq(proj, "import", str(source))
    assert (proj / "patches" / "series").read_text().split()[-1] == f"0016-{named}.patch"
    pq(proj, "status")


def test_import_refuses_a_name_too_long(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    source = tmp_path / "top.patch"
    source.write_text(pq(proj, "show", TOP).stdout)
    pq(proj, "pop")
    line = refused(proj, "import", str(source), "-n", LONG)
    assert line.endswith("the file name is 311 bytes long; a file name holds at most 250"), line


@pytest.mark.parametrize(
    ("listed", "said"),
    [
        ("0017-" + LONG + ".patch", "is 311 bytes long; a file name holds at most 250"),
        ("0017-a..b.patch", "is no name git takes for a ref (`git check-ref-format`"),
    ],
    ids=["long", "dotdot"],
)
def test_a_series_edited_by_hand_with_a_bad_name_is_one_line(proj: Path, listed: str, said: str) -> None:  # noqa: F811
    series = proj / "patches" / "series"
    series.write_text(series.read_text() + listed + "\n")
    count = len(series.read_text().splitlines())
    for args in (("status",), ("accept",), ("build", "--discard")):
        line = refused(proj, *args)
        assert line.startswith(f"pq: error: patches/series:{count}: patch name "), line
        assert said in line, line


def test_a_renamed_patch_file_with_a_bad_name_is_refused_before_accept_writes_a_ref(proj: Path) -> None:  # noqa: F811
    (proj / "patches" / TOP).rename(proj / "patches" / "0016-a..b.patch")
    series = proj / "patches" / "series"
    series.write_text(series.read_text().replace(TOP, "0016-a..b.patch"))
    line = refused(proj, "accept")
    assert line.startswith("pq: error: patches/series:"), line
    assert "'0016-a..b.patch' is no name git takes for a ref" in line, line


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ('path = "base.py"', 'path = "ba\\nse.py"', "module[1].path 'ba\\nse.py' holds a control character (U+000A)"),
        ('path = "base.py"', 'path = "ba\\\\se.py"', "module[1].path 'ba\\se.py' holds a backslash"),
        (f'{TOP}",', '0016-a..b.patch",', "lineage[0].patches: patch name '0016-a..b.patch' is no name git takes"),
        ('"base.py" = ', '"ba\\nse.py" = ', "[build]: module 'ba\\nse.py' holds a control character (U+000A)"),
    ],
    ids=["module-newline", "module-backslash", "lineage-dotdot", "build-newline"],
)
def test_queue_toml_with_a_bad_name_is_one_line(proj: Path, old: str, new: str, said: str) -> None:  # noqa: F811
    toml = proj / "patches" / "queue.toml"
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, new, 1))
    for args in (("status",), ("build", "--discard")):
        line = refused(proj, *args)
        assert line.startswith(f"pq: error: patches/queue.toml: {said}"), line


# -- 4. a message: one mail for git am, text without a NUL -------------------------------------------------------

MBOX_LINE = "From me Mon Sep 17 00:00:00 2001"
SPLITS = "would start another mail for git am (an mbox 'From ' line): reword it"


def test_a_message_with_an_mbox_from_line_is_refused(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    message = f"subject\n\nbody\n{MBOX_LINE}\nmore"
    assert refused(proj, "new", "foo", "-m", message) == f"pq: error: description line 2 '{MBOX_LINE}' {SPLITS}"
    assert refused(proj, "edit", "-m", message) == f"pq: error: description line 2 '{MBOX_LINE}' {SPLITS}"
    mail = tmp_path / "mail.patch"
    body = (proj / "patches" / TOP).read_text()
    mail.write_text(body.replace("\nUpstream: ", f"\n{MBOX_LINE}\nUpstream: ", 1))
    at = mail.read_text().splitlines().index(MBOX_LINE) + 1
    pq(proj, "pop")
    got = refused(proj, "import", str(mail), "-n", "again")
    assert got == f"pq: error: {mail}:{at}: description line 2 '{MBOX_LINE}' {SPLITS}", got


def test_a_from_line_git_am_reads_as_text_is_kept_and_stays_one_mail(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    message = "subject\n\nFrom now on: 12:30 is the time\nFrom the GPU runners of vllm-omni 0.30.0:"
    pq(proj, "new", "foo", "-m", message)
    patch = proj / "patches" / "0017-foo.patch"
    assert mails(patch, tmp_path / "new") == 1
    assert "\nFrom now on: 12:30 is the time\nFrom the GPU runners" in patch.read_text()
    assert mails(proj / "patches" / TOP, tmp_path / "top") == 1


def test_a_nul_in_a_message_is_refused_naming_its_file(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    message = tmp_path / "msg"
    message.write_bytes(b"subject\n\nbody\x00more\n")
    assert refused(proj, "edit", "--file", str(message)) == (
        f"pq: error: {message}:3: a NUL byte in the message; a commit message is text"
    )
    mail = tmp_path / "mail.patch"
    data = (proj / "patches" / TOP).read_bytes()
    mail.write_bytes(data.replace(b"\nUpstream: ", b"\nx\x00y\nUpstream: ", 1))
    at = mail.read_bytes().split(b"\n").index(b"x\x00y") + 1
    pq(proj, "pop")
    assert refused(proj, "import", str(mail), "-n", "again") == (
        f"pq: error: {mail}:{at}: a NUL byte in the mail header or message; a commit message is text"
    )


# -- 5. an imported diff holding a NUL byte: the diff's own line ---------------------------------------------


def test_an_imported_diff_with_a_nul_names_the_diff_and_its_line(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    first = (proj / "npu_worker" / "base.py").read_text().splitlines()[0]
    diff = tmp_path / "nul.diff"
    diff.write_bytes(
        b"my notes\n"
        b"diff --git a/base.py b/base.py\n--- a/base.py\n+++ b/base.py\n@@ -1 +1,2 @@\n"
        + f"-{first}\n+{first}\n".encode()
        + b"+x\x00y\n"
    )
    assert refused(proj, "import", str(diff)) == (
        f"pq: error: {diff}:8: binary content (a NUL byte) in the diff; pq keeps text changes only"
    )
