"""The diff of a patch file, git's unified format: read with errors naming the patch file's line
(:class:`DiffParser`, :func:`parse_diff`), the files it touches, and the exact applier (:func:`apply`):
every hunk must match at the line numbers in its header, context and removed lines byte for byte
(``\\r`` is content, line ends are never normalised; ``\\ No newline at end of file`` is honoured),
with no fuzz and no offset search.  Pure: no git, no file system.
"""

from __future__ import annotations

import io
import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from patch_queue.errors import PatchError

ErrorFactory = Callable[..., PatchError]
DIFF_LABEL = "<diff>"
_HUNK = re.compile(r"@@ -(\d{1,9})(?:,(\d{1,9}))? \+(\d{1,9})(?:,(\d{1,9}))? @@(?: .*)?")
_MODE_LINE = re.compile(r"(old|new|new file|deleted file) mode ([0-7]{6})")
_SIMILARITY = re.compile(r"(?:similarity|dissimilarity) index \d{1,3}%")
_INDEX = re.compile(r"index [0-9a-f]+\.\.[0-9a-f]+(?: [0-7]{6})?")
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a C-quoted name, as git writes it
_ESCAPE = re.compile(rb'\\([abtnvfr"\\]|[0-3][0-7][0-7])?')  # a backslash and what it escapes (None: bad)
_C_ESCAPES = {b"a": 7, b"b": 8, b"t": 9, b"n": 10, b"v": 11, b"f": 12, b"r": 13, b'"': 34, b"\\": 92}


class Lines:
    """The lines of a text held once, as its UTF-8 bytes and the offset where each line starts: line ``i``
    (without its newline) is decoded when it is read.  A 200 MB patch costs its bytes and 8 bytes a line,
    not a string object a line.  As ``text.split("\\n")`` without the empty string after a last newline.
    """

    __slots__ = ("_n", "_starts", "buf", "lax")

    def __init__(self, buf: bytes, *, lax: bool = False) -> None:
        starts = array("q", [0])
        find, pos = buf.find, buf.find(b"\n")
        while pos >= 0:
            starts.append(pos + 1)
            pos = find(b"\n", pos + 1)
        self.buf = buf
        self.lax = lax  # a text that came as a str with lone surrogates, encoded with "surrogatepass"
        self._starts = starts
        self._n = len(starts) - (1 if buf.endswith(b"\n") else 0)

    def __len__(self) -> int:
        return self._n

    def raw(self, i: int) -> bytes:
        """Line ``i`` as bytes, without its newline."""
        starts = self._starts
        end = starts[i + 1] - 1 if i + 1 < len(starts) else len(self.buf)
        return self.buf[starts[i] : end]

    def __getitem__(self, i: int) -> str:
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self.raw(i).decode("utf-8", "surrogatepass" if self.lax else "strict")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(self._n))

    def tag(self, i: int) -> str:
        """What ``_tag(self[i])`` is, from the line's first byte."""
        start = self._starts[i]
        first = self.buf[start : start + 1]
        return " " if first in (b"", b"\n") else chr(first[0])

    def text(self, i: int, j: int) -> str:
        """Lines ``i`` to ``j`` (exclusive) as one string, each with its newline."""
        starts = self._starts
        return self.buf[starts[i] : starts[j] if j < len(starts) else len(self.buf)].decode(
            "utf-8", "surrogatepass" if self.lax else "strict"
        )

    def find(self, sub: bytes, start: int) -> int:
        """The first line from ``start`` on that holds ``sub``, else ``len(self)``."""
        if start >= self._n:
            return self._n
        at = self.buf.find(sub, self._starts[start])
        return self._n if at < 0 else min(bisect_right(self._starts, at) - 1, self._n)


@dataclass(slots=True)
class _Hunk:
    number: int
    line: int
    old_start: int
    old_count: int
    new_count: int
    # where the hunk's lines ("+x", "-x", " x"; "" an empty context line) are in the parsed Lines, and the
    # indexes (into rows) of those followed by "\ No newline at end of file"
    rows: array[int] = field(default_factory=lambda: array("q"))
    no_eol: set[int] = field(default_factory=set)


@dataclass(slots=True)
class _FileDiff:
    line: int
    old_path: str | None = None
    new_path: str | None = None
    kind: str = "modify"  # modify, add, delete, rename, copy
    old_mode: str | None = None
    new_mode: str | None = None
    hunks: list[_Hunk] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The path that names the file in messages: the new one, or the old one if deleted."""
        return self.new_path or self.old_path or "?"


class DiffParser:
    """Parses ``lines[start:]`` as a sequence of git diffs; stops at the first line that is not part of one."""

    def __init__(self, lines: Lines, *, path: str, first_line: int) -> None:
        self.lines = lines
        self.path = path
        self.first_line = first_line  # line number of lines[0]
        self.i = 0

    def error(self, message: str, index: int | None = None) -> PatchError:
        at = self.i if index is None else index
        return PatchError(message, path=self.path, line=self.first_line + at)

    def peek(self) -> str | None:
        return self.lines[self.i] if self.i < len(self.lines) else None

    def parse(self, start: int) -> tuple[list[_FileDiff], int]:
        if (nul := self.lines.find(b"\0", start)) < len(self.lines):
            raise self.error("binary content (a NUL byte) in the diff; pq keeps text changes only", nul)
        self.i = start
        files: list[_FileDiff] = []
        while (line := self.peek()) is not None and line.startswith("diff --git "):
            files.append(self.file_diff())
        return files, self.i

    def file_diff(self) -> _FileDiff:
        start = self.i
        fd = _FileDiff(line=self.first_line + start)
        git_names = self.git_names(self.lines[start])
        shown = git_names[1] if git_names is not None else "?"
        self.i += 1
        new_mode_file = deleted_mode_file = False
        rename: list[str | None] = [None, None]
        copy: list[str | None] = [None, None]
        minus: str | None = None
        plus: str | None = None
        has_minus = False
        while (line := self.peek()) is not None:
            if line.startswith("@@"):
                raise self.error(f"hunk without '---'/'+++' lines in the diff for {shown}")
            if line.startswith("diff --git ") or line in ("", "-- "):
                break
            if line.startswith("--- "):
                has_minus = True
                minus = self.file_name(line[4:], "a/")
                self.i += 1
                nxt = self.peek()
                if nxt is None or not nxt.startswith("+++ "):
                    raise self.error(f"'---' line without a '+++' line in the diff for {shown}")
                plus = self.file_name(nxt[4:], "b/")
                self.i += 1
                break
            if line == "GIT binary patch" or line.startswith("Binary files "):
                raise self.error(f"binary patch for {shown} is not supported (pq keeps text changes only)")
            if m := _MODE_LINE.fullmatch(line):
                which, mode = m.groups()
                if which in ("old", "deleted file"):
                    fd.old_mode = mode
                else:
                    fd.new_mode = mode
                new_mode_file |= which == "new file"
                deleted_mode_file |= which == "deleted file"
            elif m := re.fullmatch(r"(rename|copy) (from|to) (.+)", line):
                target = rename if m.group(1) == "rename" else copy
                target[0 if m.group(2) == "from" else 1] = self.file_name(m.group(3), "")
            elif not (_SIMILARITY.fullmatch(line) or _INDEX.fullmatch(line)):
                raise self.error(f"unexpected line in the header of the diff for {shown}")
            self.i += 1

        # Work out the kind and the paths, and check that every source of names agrees.
        if (rename[0] is None) != (rename[1] is None) or (copy[0] is None) != (copy[1] is None):
            raise self.error(f"incomplete rename/copy header in the diff for {shown}", start)
        is_add = new_mode_file or (has_minus and minus is None)
        is_delete = deleted_mode_file or (has_minus and plus is None)
        renamed = rename[0] is not None or copy[0] is not None
        # a "new file" or "deleted file" line that the '---'/'+++' names contradict
        modes_disagree = has_minus and (
            (new_mode_file and minus is not None) or (deleted_mode_file and plus is not None)
        )
        if (is_add and is_delete) or (renamed and (is_add or is_delete)) or modes_disagree:
            raise self.error(f"contradictory header in the diff for {shown}", start)
        if rename[0] is not None:
            fd.kind, fd.old_path, fd.new_path = "rename", rename[0], rename[1]
        elif copy[0] is not None:
            fd.kind, fd.old_path, fd.new_path = "copy", copy[0], copy[1]
        elif has_minus:
            fd.old_path, fd.new_path = minus, plus
        elif git_names is not None:
            fd.old_path, fd.new_path = git_names
        else:
            raise self.error("cannot tell the file name from the 'diff --git' line", start)
        if is_add:
            fd.kind, fd.old_path = "add", None
        elif is_delete:
            fd.kind, fd.new_path = "delete", None
        if has_minus and renamed and (minus, plus) != (fd.old_path, fd.new_path):
            raise self.error(f"the '---'/'+++' names disagree with the header of the diff for {fd.name}")
        if git_names is not None:
            a, b = git_names
            if a != (fd.old_path or fd.new_path) or b != (fd.new_path or fd.old_path):
                raise self.error(
                    f"the 'diff --git' line disagrees with the file names in the diff for {fd.name}", start
                )
        if fd.kind == "modify" and fd.old_path != fd.new_path:
            raise self.error(f"the '---' and '+++' names differ in the diff for {fd.name}")

        if has_minus:
            while (line := self.peek()) is not None and line.startswith("@@"):
                fd.hunks.append(self.hunk(fd, len(fd.hunks) + 1))
            if not fd.hunks:
                raise self.error(f"no hunk after the '---'/'+++' lines of the diff for {fd.name} (truncated patch?)")
            if fd.kind == "add" and (fd.hunks[0].old_count or len(fd.hunks) > 1):
                raise self.error(f"hunk 1 for {fd.name} does not create the file", fd.hunks[0].line - self.first_line)
            if fd.kind == "delete" and (fd.hunks[-1].new_count or len(fd.hunks) > 1):
                raise self.error(f"hunk 1 for {fd.name} does not delete the file", fd.hunks[0].line - self.first_line)
        elif fd.kind == "modify" and (fd.old_mode is None or fd.new_mode is None):
            raise self.error(f"the diff for {fd.name} has no hunks (truncated patch?)", start)
        return fd

    def hunk(self, fd: _FileDiff, number: int) -> _Hunk:
        header = self.lines[self.i]
        m = _HUNK.fullmatch(header)
        if m is None:
            raise self.error(f"malformed hunk header for {fd.name}")
        old_count = 1 if m.group(2) is None else int(m.group(2))
        new_count = 1 if m.group(4) is None else int(m.group(4))
        h = _Hunk(number, self.first_line + self.i, int(m.group(1)), old_count, new_count)
        header_index = self.i
        self.i += 1
        old_left, new_left = old_count, new_count
        mismatch = f"hunk {number} for {fd.name} does not match its header's line counts (truncated patch?)"
        lines, rows = self.lines, h.rows
        while True:
            line = self.peek()
            if line is not None and line.startswith("\\"):
                if not rows or len(rows) - 1 in h.no_eol:
                    raise self.error(f"misplaced '\\ No newline at end of file' in hunk {number} for {fd.name}")
                h.no_eol.add(len(rows) - 1)
                self.i += 1
                continue
            if old_left == 0 and new_left == 0:
                break
            if line is None:
                raise self.error(mismatch, header_index)
            tag = _tag(line)
            if tag == " " and old_left and new_left:
                old_left -= 1
                new_left -= 1
            elif tag == "-" and old_left:
                old_left -= 1
            elif tag == "+" and new_left:
                new_left -= 1
            else:
                raise self.error(mismatch, header_index)
            rows.append(self.i)
            self.i += 1
        line = self.peek()
        if line is not None and line[:1] in (" ", "+", "-") and line != "-- ":
            raise self.error(mismatch, header_index)
        # Only the last line of each side may lack its newline.
        for side in ("-", "+"):
            on_side = [k for k in h.no_eol if lines.tag(rows[k]) in (" ", side)]
            last = next((k for k in range(len(rows) - 1, -1, -1) if lines.tag(rows[k]) in (" ", side)), None)
            if any(k != last for k in on_side):
                raise self.error(f"misplaced '\\ No newline at end of file' in hunk {number} for {fd.name}")
        return h

    def file_name(self, raw: str, prefix: str) -> str | None:
        if prefix and raw.endswith("\t"):  # git adds a tab after names with a space in them
            raw = raw[:-1]
        if prefix and raw == "/dev/null":
            return None
        name = _unquote(raw, self.error) if raw.startswith('"') else raw
        return self.strip_prefix(name, prefix)

    def strip_prefix(self, name: str, prefix: str) -> str:
        """Checks that name starts with prefix ("a/", "b/" or "") and that the rest is a safe relative path."""
        if name.startswith("/"):
            raise self.error(f"file name {name!r} is an absolute path")
        if not name.startswith(prefix):
            raise self.error(f"file name {name!r} does not start with {prefix!r}")
        name = name[len(prefix) :]
        if name.startswith("/"):
            raise self.error(f"file name {name!r} is an absolute path")
        parts = name.split("/")
        if any(p == ".." for p in parts):
            raise self.error(f"file name {name!r} has a '..' component")
        if any(p in ("", ".") for p in parts) or "\0" in name:
            raise self.error(f"file name {name!r} is not a clean relative path")
        if any(p.lower() == ".git" for p in parts):
            raise self.error(f"file name {name!r} points into .git")
        return name

    def git_names(self, line: str) -> tuple[str, str] | None:
        """The two names of a ``diff --git`` line, or None when unquoted names with spaces make it ambiguous."""
        rest = line[len("diff --git ") :]
        if rest.startswith('"'):
            end = quoted_end(rest)
            if end is None or rest[end : end + 1] != " ":
                raise self.error("malformed file name in the 'diff --git' line")
            a = _unquote(rest[:end], self.error)
            b_raw = rest[end + 1 :]
            b = _unquote(b_raw, self.error) if b_raw.startswith('"') else b_raw
        elif rest.endswith('"') and ' "' in rest:
            cut = rest.index(' "')
            a, b = rest[:cut], _unquote(rest[cut + 1 :], self.error)
        else:
            n = len(rest)
            half = (n - 5) // 2
            if (
                n % 2 == 1
                and rest.startswith("a/")
                and rest[2 + half : 5 + half] == " b/"
                and rest[2 : 2 + half] == rest[5 + half :]
            ):
                a, b = rest[: 2 + half], rest[3 + half :]
            elif rest.count(" b/") == 1:
                a, b = rest.split(" b/", 1)
                b = "b/" + b
            elif rest.count(" ") == 1:
                a, b = rest.split(" ")
            else:
                self.strip_prefix(rest, "a/")  # at least refuse what is plainly wrong
                return None
        return self.strip_prefix(a, "a/"), self.strip_prefix(b, "b/")


def quoted_end(s: str) -> int | None:
    """Index just past the closing quote of the C-quoted string at the start of s."""
    m = _QUOTED.match(s)
    return m.end() if m else None


def _unquote(s: str, error: ErrorFactory) -> str:
    """Undoes git's C-style quoting of a file name ("caf\\303\\251")."""
    if len(s) < 2 or not s.startswith('"') or quoted_end(s) != len(s):
        raise error(f"malformed quoted file name {s}")

    def unescape(m: re.Match[bytes]) -> bytes:
        escape = m.group(1)
        if escape is None:
            raise error(f"malformed quoted file name {s}")
        return bytes([_C_ESCAPES[escape] if len(escape) == 1 else int(escape, 8)])

    try:
        return _ESCAPE.sub(unescape, s[1:-1].encode("utf-8", "surrogatepass")).decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"file name {s} is not valid UTF-8") from None


@dataclass(frozen=True, slots=True)
class Diff:
    """A parsed diff: its files over the :class:`Lines` it was read from (``start``/``end``: its lines there)."""

    lines: Lines
    files: list[_FileDiff]
    start: int
    end: int

    def text(self) -> str:
        return self.lines.text(self.start, self.end)

    def touched(self) -> list[str]:
        """The paths the diff changes, in order: new paths, deleted files by their old path, renames by both."""
        out: list[str | None] = []
        for fd in self.files:
            out += [fd.old_path, fd.new_path] if fd.kind in ("delete", "rename") else [fd.new_path]
        return [name for name in dict.fromkeys(out) if name is not None]

    def apply(self, files: Mapping[str, bytes], *, patch_path: str) -> dict[str, bytes | None]:
        """Applies the diff exactly to ``files`` (path -> content); the touched paths' new content (None: deleted)."""
        result: dict[str, bytes | None] = {}

        def current(name: str) -> bytes | None:
            return result[name] if name in result else files.get(name)

        for fd in self.files:
            if fd.kind == "add":
                source = b""
            else:
                assert fd.old_path is not None
                got = current(fd.old_path)
                if got is None:
                    message = f"{fd.old_path} does not exist, the patch changes it"
                    raise PatchError(message, path=patch_path, line=fd.line)
                source = got
            new_path = fd.new_path
            if new_path is not None and new_path != fd.old_path and current(new_path) is not None:
                raise PatchError(f"{new_path} already exists, the patch creates it", path=patch_path, line=fd.line)
            content = _apply_hunks(source, fd, self.lines, patch_path)
            if fd.kind == "delete" and content:
                if fd.hunks:
                    raise _does_not_apply(fd, fd.hunks[-1], patch_path)
                message = f"{fd.name} is not empty, the patch deletes it as an empty file"
                raise PatchError(message, path=patch_path, line=fd.line)
            if fd.kind in ("delete", "rename"):
                assert fd.old_path is not None
                result[fd.old_path] = None
            if new_path is not None:
                result[new_path] = content
        return result


def parse_diff(diff: str, *, path: str, first_line: int) -> Diff:
    """Reads ``diff`` (the diff part of a patch file, starting at its line ``first_line``)."""
    try:
        lines = Lines(diff.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: read them, and refuse to apply the hunks that hold them
        lines = Lines(diff.encode("utf-8", "surrogatepass"), lax=True)
    if diff == "":  # an empty patch (see patch_queue.series.patchfile)
        return Diff(lines, [], 0, 0)
    if not diff.startswith("diff --git "):
        raise PatchError("the diff does not start with a 'diff --git' line", path=path, line=first_line)
    if not diff.endswith("\n"):
        line = first_line + diff.count("\n")
        raise PatchError("the diff does not end with a newline (truncated patch?)", path=path, line=line)
    parser = DiffParser(lines, path=path, first_line=first_line)
    files, end = parser.parse(0)
    if end != len(lines):
        raise parser.error("unexpected line after the diff", end)
    return Diff(lines, files, 0, end)


# -- applying ----------------------------------------------------------------------------------


def files_touched(diff: str) -> list[str]:
    """The paths a diff changes (:meth:`Diff.touched`)."""
    return parse_diff(diff, path=DIFF_LABEL, first_line=1).touched()


def _tag(line: str) -> str:
    """A hunk line's tag: " ", "-" or "+" (an empty line is an empty context line, as for git apply)."""
    return line[:1] or " "


def _does_not_apply(fd: _FileDiff, h: _Hunk, patch_path: str) -> PatchError:
    return PatchError(f"hunk {h.number} for {fd.name} does not apply", path=patch_path, line=h.line)


def _apply_hunks(content: bytes, fd: _FileDiff, lines: Lines, patch_path: str) -> bytes:
    """``content`` with ``fd``'s hunks applied, written as a stream: the unchanged stretches are sliced out
    of ``content`` and each hunk line out of the patch's bytes, with no list of lines on either side."""
    out = io.BytesIO()
    line_no, off = 0, 0  # the line of content reached, and its offset
    ends_newline: bool | None = None  # whether the last line written ends with a newline (None: none yet)
    find, size = content.find, len(content)
    for h in fd.hunks:
        start = h.old_start - 1 if h.old_count else h.old_start
        if start < line_no:
            raise _does_not_apply(fd, h, patch_path)
        begin = off
        for _ in range(start - line_no):  # the unchanged lines before the hunk
            if begin >= size:
                raise _does_not_apply(fd, h, patch_path)
            nl = find(b"\n", begin)
            begin = size if nl < 0 else nl + 1
        if begin > off:
            out.write(content[off:begin])
            ends_newline = content[begin - 1] == 0x0A
        at, new, old = begin, False, 0  # the removed and context lines must be the content's, byte for byte
        for k, row in enumerate(h.rows):
            body = lines.raw(row)[1:]
            if lines.lax:
                try:
                    body.decode("utf-8")
                except UnicodeDecodeError:  # text that is not valid UTF-8
                    raise _does_not_apply(fd, h, patch_path) from None
            tag = lines.tag(row)
            new = new or tag != "-"
            if tag == "+":
                continue
            want = body if k in h.no_eol else body + b"\n"
            if not want or content[at : at + len(want)] != want or (k in h.no_eol and at + len(want) != size):
                raise _does_not_apply(fd, h, patch_path)
            at += len(want)
            old += 1
        if new and ends_newline is False:
            raise _does_not_apply(fd, h, patch_path)
        for k, row in enumerate(h.rows):
            if lines.tag(row) != "-":
                out.write(lines.raw(row)[1:])
                if k not in h.no_eol:
                    out.write(b"\n")
                ends_newline = k not in h.no_eol
        line_no, off = start + old, at
        if ends_newline is False and off < size:
            raise _does_not_apply(fd, h, patch_path)
    out.write(content[off:])
    return out.getvalue()


def apply(diff: str, files: Mapping[str, bytes], *, patch_path: str, first_line: int = 1) -> dict[str, bytes | None]:
    """Applies diff exactly to files (path -> content) and returns the touched paths' new content (None: deleted).

    ``first_line`` is the line of the patch file where diff starts (``PatchFile.diff_line``), so that
    errors name the right line.
    """
    return parse_diff(diff, path=patch_path, first_line=first_line).apply(files, patch_path=patch_path)
