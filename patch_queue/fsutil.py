"""Atomic file writes and the files they must not replace (a link, a read-only file), the user's output files
(written in place, never over a file that is not a report of the same kind), reading a folder, telling text from
other bytes, and the test hook of the interruption tests (kill points)."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from patch_queue.errors import PqError, SourceError

KILL_ENV = "PQ_TEST_KILL_AT"


def kill_point(name: str) -> None:
    """Test hook of the interruption tests: SIGKILL this process here when ``$PQ_TEST_KILL_AT`` is ``name``;
    raise an unexpected exception (a stand-in for a bug) when it is ``bug:name``."""
    if os.environ.get(KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(KILL_ENV) == f"bug:{name}":
        raise RuntimeError(f"a planted bug at {name} ({KILL_ENV})")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder and ``os.replace``.

    The file keeps the mode of the one it replaces (a new file gets 0666 less the umask, as
    ``open`` would give it, not mkstemp's 0600).  ``durable`` also fsyncs the file and its folder.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_umask()
    stem = os.fsdecode(os.fsencode(path.name)[:200])  # the temp file's name fits the 255 bytes of a long one's
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if durable:
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def unreplaceable(path: Path, *, follow: bool, remove: bool = False) -> str | None:
    """Why pq must not write ``path`` (``remove``: delete it), a file a user may have made, or None.

    pq writes a file by an atomic rename (:func:`atomic_write`), which would make a link the user made into a
    file of its own: a symbolic link is written through when ``follow`` (its target, in place of the link) and
    refused otherwise, and never removed; a file with other hard links is refused (the rename would cut it off
    from them), and so is a file its owner made read-only.  Its other modes (an executable bit) are kept."""
    if path.is_symlink():
        to = os.readlink(path)
        if not follow:
            return (
                f"is a symbolic link (to {to}); pq writes regular files only: replace the link with a copy of its file"
            )
        if remove:
            return (
                f"is a symbolic link (to {to}); pq writes through it but never removes it: remove the link (or "
                "replace it with a copy of its file), then run the command again"
            )
        if not path.is_file():
            return f"is a symbolic link to no file ({to}); create its file, or remove the link"
    if remove or not path.is_file():
        return None
    st = path.stat()
    if st.st_nlink > 1:
        return (
            f"has {st.st_nlink} hard links; pq writes a file by replacing it, which would cut it off from the other "
            f"{st.st_nlink - 1}: make it a file of its own (copy it, then move the copy over it), then run the "
            "command again"
        )
    if not st.st_mode & stat.S_IWUSR:
        return (
            "is read-only; pq does not write a file made read-only: make it writable (chmod u+w), then run the "
            "command again"
        )
    return None


def written_path(path: Path) -> Path:
    """The file a write of ``path`` goes to: the target of a symbolic link (see :func:`unreplaceable`)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


@dataclass(frozen=True)
class Report:
    """A kind of report pq writes, as its own bytes tell it: a JSON object with ``keys`` (a JSON report), or
    text whose first line starts with ``head`` (a Markdown one).  An output path that holds anything else
    (a non-empty regular file that is no such report) is a file pq did not write, and is never overwritten."""

    what: str
    keys: frozenset[str] = frozenset()
    head: str = ""  # what the first line starts with; with ``{}``: a pattern, where ``{}`` stands for any words

    def written_by_pq(self, data: bytes) -> bool:
        if "{}" in self.head:
            first = data.split(b"\n", 1)[0].decode("utf-8", errors="replace")
            words = [re.escape(part) for part in self.head.split("{}")]
            return re.match(r"[^\n]*?".join(words), first) is not None
        if self.head:
            return data.startswith(self.head.encode("utf-8"))
        try:
            loaded = json.loads(data)
        except ValueError:
            return False
        return isinstance(loaded, dict) and self.keys <= set(loaded)


REFRESH_JSON = Report("a refresh report (--report)", keys=frozenset({"format", "upstream", "patches", "conflicts"}))
# the heading names the queue's runners: "## NPU runners: ", "## GPU runners: ", "## Runners of <package>: "
REFRESH_MARKDOWN = Report("a refresh report (--markdown)", head="## {}unners{}: ")
CHECK_JSON = Report("a report of pq check (--json)", keys=frozenset({"format", "findings", "counts", "errors"}))
SYNC_JSON = Report("a report of pq sync-gpu (--report)", keys=frozenset({"format", "source", "since", "proposals"}))
SYNC_MARKDOWN = Report("a report of pq sync-gpu (--markdown)", head="## GPU-side sync: ")
BLOCKS_MARKDOWN = Report("an inventory of pq blocks (--markdown)", head="# Omni blocks: ")


def check_output(path: Path | None, report: Report, *, shown: str | None = None) -> None:
    """Refuse, before a command changes anything, an output path that cannot be written: its folder must
    exist (pq never creates one for it), it must not be a folder, and a regular file there (through a
    symbolic link too) must be empty or ``report`` as pq writes it: pq never overwrites a user's file.
    ``shown``: how the message names it (default: as given)."""
    if path is None or is_stdout(path):
        return
    try:
        _check_output(path, report)
    except PqError as exc:
        if shown is None:
            raise
        raise PqError(exc.message, path=shown) from None


def _check_output(path: Path, report: Report) -> None:
    if not path.parent.is_dir():
        raise PqError("its folder does not exist; create it first", path=str(path))
    if path.is_dir():
        raise PqError("is a folder; name a file to write", path=str(path))
    if not path.exists() and not path.is_symlink():
        _probe(path)
        return
    if not path.is_file():
        return  # a device or a FIFO: a stream to write
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise PqError(f"cannot be read: {exc.strerror or exc}", path=str(path)) from None
    if data and not report.written_by_pq(data):
        raise PqError(
            f"is not {report.what} pq wrote; pq does not overwrite it: name another file, or move it away",
            path=str(path),
        )
    try:
        with open(path, "ab"):  # opened for writing, not written: a read-only or immutable file says so now
            pass
    except OSError as exc:
        raise PqError(f"cannot be written: {exc.strerror or exc}", path=str(path)) from None


def _probe(path: Path) -> None:
    """Refuse, before the command runs, a file to make in a folder that cannot be written (read-only, immutable,
    full of inodes): made and removed at once, so that a command never finishes its work to fail at its report."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as exc:
        raise PqError(f"cannot be written: {exc.strerror or exc}", path=str(path)) from None
    os.unlink(path)


def is_stdout(path: Path) -> bool:
    """``-``, the name every file option of pq takes for stdout (as git, tar and curl do)."""
    return str(path) == "-"


def write_output(path: Path, data: bytes, report: Report) -> None:
    """Write a file the user named for output in place, as a shell redirection would: through a symbolic
    link to its target, into a device or FIFO as a stream, over a regular file's contents (the file, its
    mode and its links stay) when it is empty or ``report`` as pq writes it; never replaced by another file;
    ``-``: stdout."""
    if is_stdout(path):  # the process's own stdout: the command's listing went to stderr
        out = sys.__stdout__ or sys.stdout
        out.flush()
        out.buffer.write(data)
        out.buffer.flush()
        return
    check_output(path, report)
    try:
        with open(path, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise PqError(f"cannot be written: {exc.strerror or exc}", path=str(path)) from None


def clean_relative(rel: str) -> bool:
    """Whether ``rel`` (a path a file gave) is a clean relative slash path: not absolute, no empty, ``.`` or
    ``..`` part, no NUL; the first check of every path pq reads from a file before it writes or deletes there."""
    return bool(rel) and not rel.startswith("/") and "\0" not in rel and not {"", ".", ".."} & set(rel.split("/"))


def linked_folder(root: Path, rel: str) -> str:
    """The first folder of the clean relative path ``rel`` below ``root`` that is a symbolic link ("" when none
    is): a write there would land outside ``root``."""
    parts = rel.split("/")
    return next(("/".join(parts[:i]) for i in range(1, len(parts)) if root.joinpath(*parts[:i]).is_symlink()), "")


def unwritable_cache(folder: Path, exc: OSError, what: str) -> SourceError:
    """The one line for a folder of the download cache that a download or a clone, which cannot do without it,
    cannot write (a read-only or full cache, a path below a file); ``what``: what it would have kept there."""
    return SourceError(
        f"the download cache cannot be written ({exc.strerror or exc}); pq keeps {what} there: make it writable, "
        "or point PQ_CACHE at another folder",
        path=str(folder),
    )


def read_folder(root: Path) -> dict[str, bytes]:
    """Every regular file below ``root`` (relative slash paths); {} when it does not exist."""
    if not root.is_dir():
        return {}
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def not_text(data: bytes) -> tuple[int, int, str] | None:
    """Where ``data`` stops being UTF-8 text without a NUL byte (what a patch body holds, and what pq reads as a
    module): (line, column, what the byte is), both 1-based; None for text."""
    bad, what = None, ""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad, what = exc.start, f"byte 0x{data[exc.start]:02x} is not UTF-8"
    nul = data.find(b"\0")
    if nul >= 0 and (bad is None or nul < bad):
        bad, what = nul, "a NUL byte (0x00)"
    if bad is None:
        return None
    return data.count(b"\n", 0, bad) + 1, bad - (data.rfind(b"\n", 0, bad) + 1) + 1, what


def json_bytes(data: object, *, indent: int = 2) -> bytes:
    """The bytes of every JSON file pq writes: keys sorted, indented, a final newline."""
    return (json.dumps(data, indent=indent, sort_keys=True) + "\n").encode("utf-8")
