"""The diff of a patch file, git's unified format: read with errors naming the patch file's line
(:class:`DiffParser`, :func:`parse_diff`), the files it touches, and the exact applier (:func:`apply`):
every hunk must match at the line numbers in its header, context and removed lines byte for byte
(``\\r`` is content, line ends are never normalised; ``\\ No newline at end of file`` is honoured),
with no fuzz and no offset search.  Pure: no git, no file system.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
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


@dataclass(slots=True)
class _Hunk:
    number: int
    line: int
    old_start: int
    old_count: int
    new_count: int
    # the hunk's lines as the patch file has them ("+x", "-x", " x"; "" an empty context line), shared with
    # the parsed file's line list (no copy per line), and the indexes of those followed by "\ No newline"
    lines: list[str] = field(default_factory=list)
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

    def __init__(self, lines: list[str], *, path: str, first_line: int) -> None:
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
        while True:
            line = self.peek()
            if line is not None and line.startswith("\\"):
                if not h.lines or len(h.lines) - 1 in h.no_eol:
                    raise self.error(f"misplaced '\\ No newline at end of file' in hunk {number} for {fd.name}")
                h.no_eol.add(len(h.lines) - 1)
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
            h.lines.append(line)
            self.i += 1
        line = self.peek()
        if line is not None and line[:1] in (" ", "+", "-") and line != "-- ":
            raise self.error(mismatch, header_index)
        # Only the last line of each side may lack its newline.
        for side in ("-", "+"):
            body = [k for k, x in enumerate(h.lines) if _tag(x) in (" ", side)]
            if any(k in h.no_eol for k in body[:-1]):
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


def parse_diff(diff: str, *, path: str, first_line: int) -> list[_FileDiff]:
    if diff == "":  # an empty patch (see patch_queue.series.patchfile)
        return []
    if not diff.startswith("diff --git "):
        raise PatchError("the diff does not start with a 'diff --git' line", path=path, line=first_line)
    if not diff.endswith("\n"):
        line = first_line + diff.count("\n")
        raise PatchError("the diff does not end with a newline (truncated patch?)", path=path, line=line)
    lines = diff[:-1].split("\n")
    parser = DiffParser(lines, path=path, first_line=first_line)
    files, end = parser.parse(0)
    if end != len(lines):
        raise parser.error("unexpected line after the diff", end)
    return files


# -- applying ----------------------------------------------------------------------------------


def files_touched(diff: str) -> list[str]:
    """The paths a diff changes, in order: new paths, deleted files by their old path, renames by both."""
    out: list[str | None] = []
    for fd in parse_diff(diff, path=DIFF_LABEL, first_line=1):
        out += [fd.old_path, fd.new_path] if fd.kind in ("delete", "rename") else [fd.new_path]
    return [name for name in dict.fromkeys(out) if name is not None]


def _split_lines(content: bytes) -> list[bytes]:
    parts = content.split(b"\n")
    out = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _tag(line: str) -> str:
    """A hunk line's tag: " ", "-" or "+" (an empty line is an empty context line, as for git apply)."""
    return line[:1] or " "


def _encode(h: _Hunk, k: int) -> bytes:
    """The bytes the hunk's line ``k`` stands for in the file (its text, and its newline unless it has none)."""
    return h.lines[k][1:].encode("utf-8") + (b"" if k in h.no_eol else b"\n")


def _does_not_apply(fd: _FileDiff, h: _Hunk, patch_path: str) -> PatchError:
    return PatchError(f"hunk {h.number} for {fd.name} does not apply", path=patch_path, line=h.line)


def _apply_hunks(content: bytes, fd: _FileDiff, patch_path: str) -> bytes:
    lines = _split_lines(content)
    out: list[bytes] = []
    pos = 0
    for h in fd.hunks:
        try:
            old = [_encode(h, k) for k, x in enumerate(h.lines) if _tag(x) != "+"]
            new = [_encode(h, k) for k, x in enumerate(h.lines) if _tag(x) != "-"]
        except UnicodeEncodeError:  # text that is not valid UTF-8
            raise _does_not_apply(fd, h, patch_path) from None
        start = h.old_start - 1 if h.old_count else h.old_start
        if start < pos or start + len(old) > len(lines) or lines[start : start + len(old)] != old:
            raise _does_not_apply(fd, h, patch_path)
        out.extend(lines[pos:start])
        if new and out and not out[-1].endswith(b"\n"):
            raise _does_not_apply(fd, h, patch_path)
        out.extend(new)
        pos = start + len(old)
        if out and not out[-1].endswith(b"\n") and pos < len(lines):
            raise _does_not_apply(fd, h, patch_path)
    out.extend(lines[pos:])
    return b"".join(out)


def apply(diff: str, files: Mapping[str, bytes], *, patch_path: str, first_line: int = 1) -> dict[str, bytes | None]:
    """Applies diff exactly to files (path -> content) and returns the touched paths' new content (None: deleted).

    ``first_line`` is the line of the patch file where diff starts (``PatchFile.diff_line``), so that
    errors name the right line.
    """
    result: dict[str, bytes | None] = {}

    def current(name: str) -> bytes | None:
        return result[name] if name in result else files.get(name)

    for fd in parse_diff(diff, path=patch_path, first_line=first_line):
        if fd.kind == "add":
            source = b""
        else:
            assert fd.old_path is not None
            got = current(fd.old_path)
            if got is None:
                raise PatchError(f"{fd.old_path} does not exist, the patch changes it", path=patch_path, line=fd.line)
            source = got
        new_path = fd.new_path
        if new_path is not None and new_path != fd.old_path and current(new_path) is not None:
            raise PatchError(f"{new_path} already exists, the patch creates it", path=patch_path, line=fd.line)
        content = _apply_hunks(source, fd, patch_path)
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
