"""Hostile round four (issue 46): a file the user made stays what they made.

A symbolic link in ``patches/`` (``queue.toml``, ``series``, ``gpu-sync-rules.toml``, a patch body) is written
through by every writer, undo included, and never removed; a link in ``npu_worker/``, a file with other hard links
and a read-only file are refused in one line; a file's mode is kept.  A file pq rewrites keeps the user's style:
``series`` its comments, ``gpu-sync-rules.toml`` every byte before the ``[[decline]]`` tables pq adds (or one line
where its ``decline`` entries are an inline array); ``queue.toml``, which pq writes whole in its own layout, is
refused in one line when it holds a comment of the user's.  Through the real command line on the adopted 0.30.0
project; every refused case checks exit 1, the one line, no traceback, and every file and ref as before.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from conftest import pq, state
from test_errors import one_error_line, proj  # noqa: F401  (proj: a copy of adopted_030)

TOP = "0016-npu-model-runner-model-forward.patch"
BELOW = "0015-npu-model-runner-dummy-run.patch"
SYNC = ("sync-gpu", "--omni", "0.30.0", "--backlog")
PROPOSAL = "fd918ac1"  # a proposal of that sync (its id is a hash of the port)
RULES = "gpu-sync-rules.toml"


def refused(proj: Path, *args: str) -> str:
    """Run pq, expect exit 1 with one error line and no traceback, and nothing changed; return the line."""
    before = state(proj)
    proc = pq(proj, *args, check=1)
    line = one_error_line(proc)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert state(proj) == before
    return line


def linked(proj: Path, name: str, elsewhere: Path) -> tuple[Path, Path]:
    """Move ``patches/name`` to ``elsewhere`` and put a symbolic link to it in its place: (link, target)."""
    elsewhere.mkdir(exist_ok=True)
    link, target = proj / "patches" / name, elsewhere / name
    shutil.move(link, target)
    link.symlink_to(target)
    return link, target


# -- 1. a symbolic link in patches/ is written through, by every writer, and undone through ----------------------

WRITERS = {
    "new": ("new", "foo"),
    "rename": ("rename", "bar"),
    "edit": ("edit", "-m", "npu model runner: another message"),
    "delete": ("delete", "--top"),
    "squash": ("squash", BELOW, TOP),
    "sink": ("sink",),
    "sync-gpu": (*SYNC, "--apply", "all"),
}


@pytest.mark.parametrize(
    ("name", "command"),
    [
        (name, command)
        for name in ("queue.toml", "series")
        for command in WRITERS
        if (name, command) != ("series", "edit")
    ],
)
def test_a_writer_writes_through_a_symlinked_file_and_undo_too(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    name: str,
    command: str,
) -> None:
    link, target = linked(proj, name, tmp_path / "mine")
    kept = target.read_bytes()
    pq(proj, *WRITERS[command])
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() != kept
    assert not list((proj / "patches").glob(f".{name}.*"))  # no temporary file left beside the link
    pq(proj, "series")
    pq(proj, "undo")
    assert link.is_symlink() and target.read_bytes() == kept


def test_a_killed_write_through_a_symlink_is_finished_or_undone_through_it(
    proj: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed after it wrote patches/ (queue.toml through its link): `pq abort` and `pq continue` write the
    target too, and the link stays."""
    link, target = linked(proj, "queue.toml", tmp_path / "mine")
    kept = target.read_bytes()
    for recovery in ("abort", "continue"):
        monkeypatch.setenv("PQ_TEST_KILL_AT", "after-refs")
        pq(proj, "new", "foo", check=-signal.SIGKILL)
        monkeypatch.delenv("PQ_TEST_KILL_AT")
        assert link.is_symlink() and target.read_bytes() != kept  # written through before the kill
        pq(proj, recovery)
        assert link.is_symlink() and (target.read_bytes() == kept) == (recovery == "abort")
    assert "0017-foo.patch" in (proj / "patches" / "series").read_text()


def test_refresh_writes_through_a_symlinked_queue(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    link, target = linked(proj, "queue.toml", tmp_path / "mine")
    kept = target.read_bytes()
    pq(proj, "refresh", "--to", "c9e95ba32421")
    assert link.is_symlink() and target.read_bytes() != kept and b'kind = "refresh"' in target.read_bytes()


def test_a_decline_is_written_through_a_symlinked_rules_file(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    mine = tmp_path / "shared"
    mine.mkdir()
    (mine / RULES).write_text("# the rules all my projects share\n")
    (proj / "patches" / RULES).symlink_to(mine / RULES)
    pq(proj, *SYNC, "--decline", PROPOSAL)
    assert (proj / "patches" / RULES).is_symlink()
    text = (mine / RULES).read_text()
    assert text.startswith("# the rules all my projects share\n\n[[decline]]\n") and PROPOSAL in text


def test_a_dangling_symlinked_rules_file_is_refused(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    """pq writes through a link into its file, never makes one where the link points."""
    (proj / "patches" / RULES).symlink_to(tmp_path / "gone" / RULES)
    assert refused(proj, *SYNC, "--decline", PROPOSAL) == (
        f"pq: error: patches/{RULES}: is a symbolic link to no file ({tmp_path / 'gone' / RULES}); create its file, "
        "or remove the link"
    )
    assert not (tmp_path / "gone").exists()


def test_a_symlinked_patch_is_never_removed(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    link, target = linked(proj, TOP, tmp_path / "mine")
    for args in (("delete", "--top"), ("rename", "bar")):
        assert refused(proj, *args) == (
            f"pq: error: patches/{TOP}: is a symbolic link (to {target}); pq writes through it but never removes "
            "it: remove the link (or replace it with a copy of its file), then run the command again"
        )
    assert link.is_symlink()


def test_a_symlink_in_the_output_folder_is_refused_by_every_writer(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    """Not only by `pq build` and `pq refresh`: `pq pop` rewrites the module the top patch changes."""
    module = proj / "npu_worker" / "npu_model_runner.py"
    outside = tmp_path / "npu_model_runner.py"
    shutil.move(module, outside)
    module.symlink_to(outside)
    kept = outside.read_bytes()
    for args in (("pop",), ("delete", "--top")):
        assert refused(proj, *args) == (
            f"pq: error: npu_worker/npu_model_runner.py: is a symbolic link (to {outside}); pq writes regular "
            "files only: replace the link with a copy of its file"
        )
    assert module.is_symlink() and outside.read_bytes() == kept


# -- 2. hard links and modes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [("new", "foo"), ("refresh", "--to", "c9e95ba32421")], ids=["new", "refresh"])
def test_a_hard_linked_queue_is_refused(proj: Path, tmp_path: Path, args: tuple[str, ...]) -> None:  # noqa: F811
    other = tmp_path / "queue.toml"
    os.link(proj / "patches" / "queue.toml", other)
    assert refused(proj, *args) == (
        "pq: error: patches/queue.toml: has 2 hard links; pq writes a file by replacing it, which would cut it "
        "off from the other 1: make it a file of its own (copy it, then move the copy over it), then run the "
        "command again"
    )
    assert os.stat(other).st_nlink == 2


def test_a_read_only_series_is_refused(proj: Path) -> None:  # noqa: F811
    series = proj / "patches" / "series"
    series.chmod(0o444)
    assert refused(proj, "new", "foo") == (
        "pq: error: patches/series: is read-only; pq does not write a file made read-only: make it writable "
        "(chmod u+w), then run the command again"
    )
    assert series.stat().st_mode & 0o777 == 0o444


def test_an_executable_bit_is_kept(proj: Path) -> None:  # noqa: F811
    series = proj / "patches" / "series"
    series.chmod(0o755)
    pq(proj, "new", "foo")
    assert series.stat().st_mode & 0o777 == 0o755 and "0017-foo.patch" in series.read_text()
    pq(proj, "undo")
    assert series.stat().st_mode & 0o777 == 0o755


# -- 3. the style of a file pq rewrites ----------------------------------------------------------------------------


def test_series_keeps_the_users_comments(proj: Path) -> None:  # noqa: F811
    series = proj / "patches" / "series"
    text = series.read_text().replace(f"{BELOW}\n", f"\n# the model runner, newest last\n{BELOW}  # mine\n")
    series.write_text(text)
    pq(proj, "new", "foo")
    assert series.read_text() == text + "0017-foo.patch\n"
    pq(proj, "delete", "--top")
    assert series.read_text() == text
    pq(proj, "rename", BELOW, "dummy")  # a renamed patch keeps its line and the comment on it
    assert series.read_text() == text.replace(BELOW, "0015-dummy.patch")


@pytest.mark.parametrize(
    ("mine", "said"),
    [
        ('[downstream]\nname = "vllm-omni"  # ours\n', "{line}: holds a comment pq would drop"),
        (
            '[downstream]\nname = "vllm-omni"\nowner = "me"\n',
            ": holds downstream.owner, which pq would drop",
        ),
    ],
    ids=["comment", "key"],
)
def test_what_queue_toml_would_lose_is_refused(proj: Path, mine: str, said: str) -> None:  # noqa: F811
    """pq writes queue.toml whole, in its own layout: a comment or a key of the user's is refused, not dropped."""
    queue = proj / "patches" / "queue.toml"
    text = queue.read_text().replace('[downstream]\nname = "vllm-omni"\n', mine, 1)
    assert text != queue.read_text()
    queue.write_text(text)
    said = said.format(line=f":{text[: text.index(mine)].count(chr(10)) + 2}")
    how = "move the comment elsewhere (a commit message)" if "comment" in said else "remove it"
    for args in (("new", "foo"), ("refresh", "--to", "c9e95ba32421")):
        assert refused(proj, *args) == (
            f"pq: error: patches/queue.toml{said}: pq writes this file whole, in its own layout "
            f"(patch_queue/series/queue.py); {how}, then run the command again"
        )
    pq(proj, "series")  # reading it is fine


INLINE = """# declined by hand
decline = [
    { file = "gpu_model_runner.py", method = "load_model", first = "x = 1" },
]
"""
INLINE_REFUSED = (
    f"pq: error: patches/{RULES}:2: pq adds a declined change as a [[decline]] table at the end of this file, "
    "which its own decline entries (an inline array) do not allow: write them as [[decline]] tables, then run the "
    "command again"
)


def test_a_decline_into_an_inline_array_is_refused(proj: Path) -> None:  # noqa: F811
    (proj / "patches" / RULES).write_text(INLINE)
    assert refused(proj, *SYNC, "--decline", PROPOSAL) == INLINE_REFUSED


def test_deleting_a_port_with_an_inline_decline_array_is_refused(proj: Path) -> None:  # noqa: F811
    pq(proj, *SYNC, "--apply", "all")
    name = next(n for n in (proj / "patches" / "series").read_text().split() if "-sync-gpu-" in n)
    (proj / "patches" / RULES).write_text(INLINE)
    assert refused(proj, "delete", name) == INLINE_REFUSED
    pq(proj, *SYNC)  # the rules file still reads


def test_a_decline_keeps_every_byte_of_the_rules_file(proj: Path) -> None:  # noqa: F811
    """Comments, an inline table of a rule, CRLF line endings and no final newline: all as they were."""
    rules = proj / "patches" / RULES
    mine = (
        b"# my rules\r\n"
        b'rule = [{ id = "mine", find = "foo", replace = "bar", regex = false }]  # inline\r\n'
        b"\r\n"
        b"[[decline]]\r\n"
        b'file = "gpu_model_runner.py"\r\nmethod = "load_model"\r\nfirst = "x = 1"  # kept'
    )
    rules.write_bytes(mine)
    pq(proj, *SYNC, "--decline", PROPOSAL)
    after = rules.read_bytes()
    assert after.startswith(mine + b"\r\n\r\n[[decline]]\r\n") and b"\n" not in after.replace(b"\r\n", b"")
    assert PROPOSAL.encode() in after
