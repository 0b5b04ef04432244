"""Patch files of the queue: one commit per file, in the mbox layout of ``git format-patch``.

git writes them: :meth:`patch_queue.git.repo.ProjectRepo.format_patches` runs ``git format-patch``
for a whole series at once.  This module does what git cannot do for pq, and it is pure (no git,
no file system)::

    From <commit id> Mon Sep 17 00:00:00 2001
    From: A U Thor <author@example.com>               } RFC 2047 "Q" words if not ASCII,
    Date: Thu, 1 Jan 1970 00:00:00 +0000              } folded at 78 columns
    Subject: [PATCH] <subject>                        }
    MIME-Version: 1.0 ...                             only for a non-ASCII message
    <blank line>
    <description lines, if any>
    ---
     path/of/file.py | 12 +++++++-----                 the diffstat and summary (git's; not read)
     1 file changed, 7 insertions(+), 5 deletions(-)
    <blank line>
    diff --git a/path/of/file.py b/path/of/file.py    the diff, git's unified format
    ...
    -- (and the git version)                          a signature, accepted and ignored

- :func:`split_message` and :func:`check_message`, before git writes: the subject and description
  format-patch prints for a commit message, and a refusal of what ``git am`` would not read back as
  written: a description line where it stops reading the message (``---``, ``diff -``, ``Index:``),
  a first description line it takes for an in-body header (``From:``, ``Subject:``, ``Date:``,
  ``[PATCH]``), a subject that is not one line, an author that is not ``Name <email>``.
- :func:`parse` reads what ``git format-patch`` writes for one commit (with or without signature
  and diffstat, numbered or not) and refuses anything else with a :class:`PatchError` naming the
  file and the 1-based line: a malformed header or hunk, a file name that is absolute, has ``..``
  or points into ``.git``, text that is not UTF-8, CR LF line ends, binary patches (the queue keeps
  text changes only).  The description ends, as for ``git am``, at the first line that is ``---``
  (optionally followed by white space or a file name), starts with ``diff -`` or ``Index: ``.
- :func:`apply` applies a diff exactly: every hunk must match at the line numbers in its header,
  context and removed lines byte for byte (``\\r`` is content, line ends are never normalised;
  ``\\ No newline at end of file`` is honoured).  There is no fuzz and no offset search.

Why not git or a library for these: ``git mailinfo`` and ``git apply --cached`` take one process per
patch (a refresh reads the whole series) and their errors name neither the patch file's line nor
the hunk; ``unidiff`` reads hunks, but leniently (an unknown header line becomes "patch info",
quoted names stay quoted, copies are not understood) and its errors carry no line, so it would be
a second parse next to the one that finds the line to name.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from patch_queue.errors import PatchError

__all__ = ["PatchFile", "apply", "check_message", "files_touched", "parse", "split_message"]

_DIFF_LABEL = "<diff>"
_SPACE = " \t\n\r"  # git's isspace()
_IDENT = re.compile(r"([^<>\n\r]+) <([^<>\n\r]*)>")
_HEADER = re.compile(r"([!-9;-~]+):(.*)")
_ENCODED_WORD = re.compile(r"=\?([^?\s]+)\?([qQbB])\?([^?\s]*)\?=")
_Q_TEXT = re.compile(r"(?:[^=]|=[0-9A-Fa-f]{2})*")
_HUNK = re.compile(r"@@ -(\d{1,9})(?:,(\d{1,9}))? \+(\d{1,9})(?:,(\d{1,9}))? @@(?: .*)?")
_MODE = r"([0-7]{6})"
_INDEX = re.compile(r"index [0-9a-f]+\.\.[0-9a-f]+(?: [0-7]{6})?")
_INBODY = re.compile(r"(?i)(?:from|subject|date):|\[PATCH\](?:[ \t\r]|$)")
_MBOX_FROM = re.compile(r"From [0-9a-f]{40,64} Mon Sep 17 00:00:00 2001")
_CHARSETS = {"utf-8", "utf8", "us-ascii", "ascii"}

_ErrorFactory = Callable[..., PatchError]
"""Makes the PatchError for a message (and optionally a 0-based line index) at a place known to the maker."""


@dataclass(frozen=True)
class PatchFile:
    """One commit as a patch file.

    ``diff_line`` is where ``diff`` starts in the file it was parsed from (1 for a patch built in
    memory); it only serves error messages and takes no part in equality.
    """

    subject: str
    description: str
    author: str
    date: str
    diff: str
    diff_line: int = field(default=1, compare=False, repr=False)


# --------------------------------------------------------------------------------------------
# Before git writes a patch.


def split_message(message: str) -> tuple[str, str]:
    """Splits a commit message into (subject, description) the way ``git format-patch`` prints them.

    The subject is the first paragraph joined with spaces; the description is the rest without
    leading blank lines, trailing white space on each line and trailing blank lines.
    """
    lines = message.split("\n")
    i = 0
    while i < len(lines) and not lines[i].rstrip(_SPACE):
        i += 1
    subject: list[str] = []
    while i < len(lines) and lines[i].rstrip(_SPACE):
        subject.append(lines[i].rstrip(_SPACE))
        i += 1
    while i < len(lines) and not lines[i].rstrip(_SPACE):
        i += 1
    body = [line.rstrip(_SPACE) for line in lines[i:]]
    return " ".join(subject), "\n".join(body).rstrip(_SPACE)


def check_message(subject: str, description: str, author: str) -> None:
    """Refuses (PatchError) a commit whose patch ``git am`` would not read back as it was written."""
    if "\n" in subject or "\r" in subject:
        raise PatchError(f"subject {subject!r} is not a single line")
    _check_description(description, lambda message, at=None: PatchError(message))
    if _IDENT.fullmatch(author) is None:
        raise PatchError(f"author {author!r} is not of the form 'Name <email>'")


def _patchbreak(line: str) -> bool:
    """git mailinfo's patchbreak(): where git am stops reading the commit message."""
    if line.startswith("diff -") or line.startswith("Index: "):
        return True
    if len(line) < 3 or not line.startswith("---"):
        return False
    if line[3:4] == " " and line[4:5] != "" and line[4] not in _SPACE:
        return True
    return all(c in _SPACE for c in line[3:])


def _check_description(description: str, error: _ErrorFactory, first_line: int = 0) -> None:
    lines = description.split("\n")
    for i, line in enumerate(lines):
        if _patchbreak(line):
            raise error(f"description line {i + 1} {line!r} would end the commit message for git am", first_line + i)
    first = next((x for x in lines if x.strip(_SPACE)), "")
    if _INBODY.match(first):
        i = lines.index(first)
        raise error(f"description line {i + 1} {first!r} would be read as a mail header by git am", first_line + i)


# --------------------------------------------------------------------------------------------
# Parsing.


def _decode_utf8(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise PatchError(
            f"not valid UTF-8 (byte 0x{data[e.start]:02x} at column {column})", path=path, line=line
        ) from None


def _decode_words(text: str, error: _ErrorFactory) -> str:
    """Decodes RFC 2047 encoded words; white space between two encoded words is dropped."""
    out: list[str] = []
    pending: list[bytes] = []
    pending_charset = ""

    def flush() -> None:
        nonlocal pending, pending_charset
        if pending:
            codec = "utf-8" if pending_charset in ("utf-8", "utf8") else "ascii"
            try:
                out.append(b"".join(pending).decode(codec))
            except UnicodeDecodeError:
                raise error(f"encoded header text is not valid {pending_charset}") from None
        pending, pending_charset = [], ""

    pos = 0
    for m in _ENCODED_WORD.finditer(text):
        between = text[pos : m.start()]
        if not (pending and between.strip(" \t") == ""):
            flush()
            out.append(between)
        charset = m.group(1).lower().split("*")[0]
        if charset not in _CHARSETS:
            raise error(f"unsupported charset {m.group(1)!r} in an encoded header")
        if pending and charset != pending_charset:
            flush()
        payload = m.group(3)
        if m.group(2) in "bB":
            try:
                raw = base64.b64decode(payload, validate=True)
            except (binascii.Error, ValueError):
                raise error("malformed base64 encoded header text") from None
        else:
            raw = _q_decode(payload, error)
        pending.append(raw)
        pending_charset = charset
        pos = m.end()
    flush()
    out.append(text[pos:])
    return "".join(out)


def _q_decode(payload: str, error: _ErrorFactory) -> bytes:
    if not _Q_TEXT.fullmatch(payload):
        raise error("malformed quoted-printable encoded header text")
    return binascii.a2b_qp(payload.encode("utf-8"), header=True)


def _patch_tag_length(subject: str) -> int:
    """Length of a leading "[PATCH]" / "[PATCH v2 3/7] " tag and the one space after it, else 0."""
    if not subject.startswith("["):
        return 0
    end = subject.find("]")
    if end < 0 or "PATCH" not in subject[1:end].split():
        return 0
    return end + 2 if subject[end + 1 : end + 2] == " " else end + 1


def _unfold(first: str, continuations: list[str], prefix_len: int = 0) -> str:
    """Joins a folded header.  git folds by turning a space into newline + space, so removing the newlines
    undoes it; when git broke the line right after the fixed prefix, the continuation's one-space indent is dropped."""
    if continuations and first[prefix_len:] == "":
        continuations = [continuations[0][1:], *continuations[1:]]
    return first + "".join(continuations)


def _parse_author(first: str, continuations: list[str], error: _ErrorFactory) -> str:
    raw = _unfold(first, continuations)
    if raw.startswith("=?"):
        text = _decode_words(raw, error)
        m = _IDENT.fullmatch(text)
        if m is None:
            raise error("From: header is not of the form 'Name <email>'")
        return text
    if raw.startswith('"'):
        end = _quoted_end(raw)
        if end is None:
            raise error("From: header has an unterminated quoted name")
        name = re.sub(r"\\(.)", r"\1", raw[1 : end - 1])
        rest = raw[end:]
        m = re.fullmatch(r" <([^<>\n\r]*)>", rest)
        if m is None or not _IDENT.fullmatch(f"{name} <{m.group(1)}>"):
            raise error("From: header is not of the form 'Name <email>'")
        return f"{name} <{m.group(1)}>"
    if _IDENT.fullmatch(raw) is None:
        raise error("From: header is not of the form 'Name <email>'")
    return raw


def parse(data: bytes, *, path: str) -> PatchFile:
    """Reads a patch file written by ``git format-patch`` (one commit).  Raises only PatchError."""
    text = _decode_utf8(data, path)
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines.pop()

    def error_at(index: int) -> _ErrorFactory:
        def make(message: str = "", at: int | None = None) -> PatchError:
            return PatchError(message, path=path, line=(index if at is None else at) + 1)

        return make

    if not lines or not lines[0].startswith("From "):
        raise PatchError("not an mbox patch: it does not start with a 'From ' line", path=path, line=1)

    # Mail headers, up to the first blank line.
    headers: dict[str, tuple[int, str, list[str]]] = {}
    current: str | None = None
    i = 0
    while True:
        if i >= len(lines):
            raise PatchError("not an mbox patch: the mail header does not end with a blank line", path=path, line=i)
        line = lines[i]
        if "\r" in line:
            raise PatchError("mail header line ends with CR LF (DOS line ends)", path=path, line=i + 1)
        if i == 0:
            i += 1
            continue
        if line == "":
            break
        if line[0] in " \t":
            if current is None:
                raise PatchError("not an mbox patch: malformed mail header line", path=path, line=i + 1)
            headers[current][2].append(line)
        else:
            m = _HEADER.fullmatch(line)
            if m is None:
                raise PatchError("not an mbox patch: malformed mail header line", path=path, line=i + 1)
            current = m.group(1).lower()
            value = m.group(2)[1:] if m.group(2).startswith(" ") else m.group(2)
            if current in headers and current in ("from", "subject", "date"):
                raise PatchError(f"duplicate {m.group(1)}: header", path=path, line=i + 1)
            headers.setdefault(current, (i, value, []))
        i += 1
    header_end = i

    if "subject" not in headers:
        raise PatchError("not an mbox patch: no Subject: header", path=path, line=header_end + 1)
    for name in ("from", "date"):
        if name not in headers:
            raise PatchError(f"no {name.capitalize()}: header", path=path, line=header_end + 1)
    cte = headers.get("content-transfer-encoding")
    if cte is not None and _unfold(cte[1], cte[2]).strip().lower() not in ("7bit", "8bit", "binary"):
        raise PatchError("unsupported Content-Transfer-Encoding (expected 8bit)", path=path, line=cte[0] + 1)
    ctype = headers.get("content-type")
    if ctype is not None:
        value = _unfold(ctype[1], ctype[2]).strip().lower()
        charset = re.search(r"charset=\"?([^\";\s]+)", value)
        if not value.startswith("text/plain") or (charset is not None and charset.group(1) not in _CHARSETS):
            raise PatchError(
                "unsupported Content-Type (expected text/plain; charset=UTF-8)", path=path, line=ctype[0] + 1
            )

    index, first, continuations = headers["subject"]
    prefix_len = _patch_tag_length(first)
    subject = _unfold(first, continuations, prefix_len)[prefix_len:]
    if "=?" in subject:
        subject = _decode_words(subject, error_at(index))
    if "\n" in subject or "\r" in subject:
        raise PatchError("the Subject: header has a line break in it", path=path, line=index + 1)
    index, first, continuations = headers["from"]
    author = _parse_author(first, continuations, error_at(index))
    index, first, continuations = headers["date"]
    date = _unfold(first, continuations)
    if not date.strip():
        raise PatchError("empty Date: header", path=path, line=index + 1)

    # The message body, up to where git am would stop reading it.
    body_start = header_end + 1
    k = body_start
    while k < len(lines) and not _patchbreak(lines[k]):
        k += 1
    description_lines = lines[body_start:k]
    while description_lines and description_lines[-1] == "":
        description_lines.pop()
    description = "\n".join(description_lines)
    _check_description(description, error_at(body_start), body_start)

    diff_start = k
    while diff_start < len(lines) and not lines[diff_start].startswith("diff --git "):
        diff_start += 1
    if diff_start >= len(lines):
        raise PatchError("no diff in the patch (no 'diff --git' line)", path=path, line=max(len(lines), 1))
    for j in range(diff_start, len(lines)):
        if "\0" in lines[j]:
            raise PatchError(
                "binary content (a NUL byte) in the diff; pq keeps text changes only", path=path, line=j + 1
            )

    parser = _DiffParser(lines, path=path, first_line=1)
    parser.parse(diff_start)
    end = parser.i
    if end == len(lines) and not ends_with_newline:
        raise PatchError("the last line has no newline (truncated patch?)", path=path, line=len(lines))
    for j in range(end, len(lines)):
        if _MBOX_FROM.fullmatch(lines[j]):
            raise PatchError("more than one patch in the file (one commit per file expected)", path=path, line=j + 1)
    rest = end
    while rest < len(lines) and lines[rest] == "":
        rest += 1
    if rest < len(lines) and lines[rest] != "-- ":  # anything after "-- " is the signature
        raise PatchError("unexpected line after the diff", path=path, line=rest + 1)
    diff = "\n".join(lines[diff_start:end]) + "\n"
    return PatchFile(subject, description, author, date, diff, diff_line=diff_start + 1)


# --------------------------------------------------------------------------------------------
# The diff, as parse (validation), files_touched and apply read it.


@dataclass
class _Line:
    tag: str  # " ", "-" or "+"
    text: str
    eol: bool = True  # False after "\ No newline at end of file"


@dataclass
class _Hunk:
    number: int
    line: int
    old_start: int
    old_count: int
    new_count: int
    lines: list[_Line] = field(default_factory=list)


@dataclass
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


class _DiffParser:
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
        while True:
            line = self.peek()
            if line is None or not line.startswith("diff --git "):
                return files, self.i
            files.append(self.file_diff())

    def file_diff(self) -> _FileDiff:
        fd = _FileDiff(line=self.first_line + self.i)
        git_names = self.git_names(self.lines[self.i])
        self.i += 1
        new_mode_file = deleted_mode_file = False
        rename: list[str | None] = [None, None]
        copy: list[str | None] = [None, None]
        minus: str | None = None
        plus: str | None = None
        has_minus = False
        while (line := self.peek()) is not None:
            if line.startswith("diff --git ") or line.startswith("@@"):
                if line.startswith("@@"):
                    raise self.error(f"hunk without '---'/'+++' lines in the diff for {_shown(git_names)}")
                break
            if line.startswith("--- "):
                has_minus = True
                minus = self.file_name(line[4:], "a/")
                self.i += 1
                nxt = self.peek()
                if nxt is None or not nxt.startswith("+++ "):
                    raise self.error(f"'---' line without a '+++' line in the diff for {_shown(git_names)}")
                plus = self.file_name(nxt[4:], "b/")
                self.i += 1
                break
            if line == "GIT binary patch" or line.startswith("Binary files "):
                name = _shown(git_names)
                raise self.error(f"binary patch for {name} is not supported (pq keeps text changes only)")
            if line in ("", "-- "):
                break
            m: re.Match[str] | None
            if m := re.fullmatch("old mode " + _MODE, line):
                fd.old_mode = m.group(1)
            elif m := re.fullmatch("new mode " + _MODE, line):
                fd.new_mode = m.group(1)
            elif m := re.fullmatch("new file mode " + _MODE, line):
                fd.new_mode = m.group(1)
                new_mode_file = True
            elif m := re.fullmatch("deleted file mode " + _MODE, line):
                fd.old_mode = m.group(1)
                deleted_mode_file = True
            elif re.fullmatch(r"(?:similarity|dissimilarity) index \d{1,3}%", line):
                pass
            elif m := re.fullmatch(r"(rename|copy) (from|to) (.+)", line):
                target = rename if m.group(1) == "rename" else copy
                target[0 if m.group(2) == "from" else 1] = self.file_name(m.group(3), "")
            elif _INDEX.fullmatch(line):
                pass
            else:
                raise self.error(f"unexpected line in the header of the diff for {_shown(git_names)}")
            self.i += 1

        # Work out the kind and the paths, and check that every source of names agrees.
        if (rename[0] is None) != (rename[1] is None) or (copy[0] is None) != (copy[1] is None):
            raise self.error(
                f"incomplete rename/copy header in the diff for {_shown(git_names)}", fd.line - self.first_line
            )
        is_add = new_mode_file or (has_minus and minus is None)
        is_delete = deleted_mode_file or (has_minus and plus is None)
        renamed = rename[0] is not None or copy[0] is not None
        if (
            (is_add and is_delete)
            or (has_minus and minus is None and plus is None)
            or (renamed and (is_add or is_delete))
        ):
            raise self.error(f"contradictory header in the diff for {_shown(git_names)}", fd.line - self.first_line)
        if has_minus and ((new_mode_file and minus is not None) or (deleted_mode_file and plus is not None)):
            raise self.error(f"contradictory header in the diff for {_shown(git_names)}", fd.line - self.first_line)
        if rename[0] is not None:
            fd.kind, fd.old_path, fd.new_path = "rename", rename[0], rename[1]
        elif copy[0] is not None:
            fd.kind, fd.old_path, fd.new_path = "copy", copy[0], copy[1]
        elif has_minus:
            fd.old_path, fd.new_path = minus, plus
        elif git_names is not None:
            fd.old_path, fd.new_path = git_names
        else:
            raise self.error("cannot tell the file name from the 'diff --git' line", fd.line - self.first_line)
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
                    f"the 'diff --git' line disagrees with the file names in the diff for {fd.name}",
                    fd.line - self.first_line,
                )
        if fd.kind == "modify" and fd.old_path != fd.new_path:
            raise self.error(f"the '---' and '+++' names differ in the diff for {fd.name}")

        if has_minus:
            number = 0
            while (line := self.peek()) is not None and line.startswith("@@"):
                number += 1
                fd.hunks.append(self.hunk(fd, number))
            if not fd.hunks:
                raise self.error(f"no hunk after the '---'/'+++' lines of the diff for {fd.name} (truncated patch?)")
            if fd.kind == "add" and (fd.hunks[0].old_count or len(fd.hunks) > 1):
                raise self.error(f"hunk 1 for {fd.name} does not create the file", fd.hunks[0].line - self.first_line)
            if fd.kind == "delete" and (fd.hunks[-1].new_count or len(fd.hunks) > 1):
                raise self.error(f"hunk 1 for {fd.name} does not delete the file", fd.hunks[0].line - self.first_line)
        elif fd.kind == "modify" and (fd.old_mode is None or fd.new_mode is None):
            raise self.error(f"the diff for {fd.name} has no hunks (truncated patch?)", fd.line - self.first_line)
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
                if not h.lines or not h.lines[-1].eol:
                    raise self.error(f"misplaced '\\ No newline at end of file' in hunk {number} for {fd.name}")
                h.lines[-1].eol = False
                self.i += 1
                continue
            if old_left == 0 and new_left == 0:
                break
            if line is None:
                raise self.error(mismatch, header_index)
            tag = line[:1] or " "  # an empty line is an empty context line, as for git apply
            if tag == " " and old_left and new_left:
                old_left -= 1
                new_left -= 1
            elif tag == "-" and old_left:
                old_left -= 1
            elif tag == "+" and new_left:
                new_left -= 1
            else:
                raise self.error(mismatch, header_index)
            h.lines.append(_Line(tag, line[1:]))
            self.i += 1
        line = self.peek()
        if line is not None and line[:1] in (" ", "+", "-") and line != "-- ":
            raise self.error(mismatch, header_index)
        # Only the last line of each side may lack its newline.
        for side in ("-", "+"):
            body = [x for x in h.lines if x.tag in (" ", side)]
            if any(not x.eol for x in body[:-1]):
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
        return self.check_path(name[len(prefix) :])

    def check_path(self, name: str) -> str:
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
            end = _quoted_end(rest)
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


def _shown(names: tuple[str, str] | None) -> str:
    return names[1] if names is not None else "?"


def _quoted_end(s: str) -> int | None:
    """Index just past the closing quote of the C-quoted string at the start of s."""
    i = 1
    while i < len(s):
        if s[i] == "\\":
            i += 2
        elif s[i] == '"':
            return i + 1
        else:
            i += 1
    return None


_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(s: str, error: _ErrorFactory) -> str:
    """Undoes git's C-style quoting of a file name ("caf\\303\\251")."""
    if len(s) < 2 or not s.startswith('"') or _quoted_end(s) != len(s):
        raise error(f"malformed quoted file name {s}")
    out = bytearray()
    i = 1
    while i < len(s) - 1:
        c = s[i]
        if c != "\\":
            out += c.encode("utf-8", "surrogatepass")
            i += 1
            continue
        e = s[i + 1]
        if e in _C_ESCAPES:
            out.append(_C_ESCAPES[e])
            i += 2
        elif re.fullmatch("[0-3][0-7][0-7]", s[i + 1 : i + 4]):
            out.append(int(s[i + 1 : i + 4], 8))
            i += 4
        else:
            raise error(f"malformed quoted file name {s}")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"file name {s} is not valid UTF-8") from None


def _diff_lines(diff: str, path: str, first_line: int) -> list[str]:
    if not diff.startswith("diff --git "):
        raise PatchError("the diff does not start with a 'diff --git' line", path=path, line=first_line)
    if not diff.endswith("\n"):
        line = first_line + diff.count("\n")
        raise PatchError("the diff does not end with a newline (truncated patch?)", path=path, line=line)
    return diff[:-1].split("\n")


def _parse_diff(diff: str, *, path: str, first_line: int) -> list[_FileDiff]:
    lines = _diff_lines(diff, path, first_line)
    parser = _DiffParser(lines, path=path, first_line=first_line)
    files, end = parser.parse(0)
    if end != len(lines):
        raise parser.error("unexpected line after the diff", end)
    return files


# --------------------------------------------------------------------------------------------
# Applying.


def files_touched(diff: str) -> list[str]:
    """The paths a diff changes, in order: new paths, deleted files by their old path, renames by both."""
    out: list[str] = []
    for fd in _parse_diff(diff, path=_DIFF_LABEL, first_line=1):
        names = [fd.old_path] if fd.kind in ("delete", "rename") else []
        names.append(fd.new_path)
        for name in names:
            if name is not None and name not in out:
                out.append(name)
    return out


def _split_lines(content: bytes) -> list[bytes]:
    parts = content.split(b"\n")
    out = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _encode(line: _Line, error: _ErrorFactory) -> bytes:
    try:
        raw = line.text.encode("utf-8")
    except UnicodeEncodeError:
        raise error("the diff has text that is not valid UTF-8") from None
    return raw + b"\n" if line.eol else raw


def _apply_hunks(content: bytes, fd: _FileDiff, patch_path: str) -> bytes:
    lines = _split_lines(content)
    out: list[bytes] = []
    pos = 0
    for h in fd.hunks:

        def fail(message: str = "", at: int | None = None, h: _Hunk = h) -> PatchError:
            return PatchError(f"hunk {h.number} for {fd.name} does not apply", path=patch_path, line=h.line)

        old = [_encode(x, fail) for x in h.lines if x.tag != "+"]
        new = [_encode(x, fail) for x in h.lines if x.tag != "-"]
        start = h.old_start - 1 if h.old_count else h.old_start
        if start < pos or start + len(old) > len(lines) or lines[start : start + len(old)] != old:
            raise fail()
        out.extend(lines[pos:start])
        if new and out and not out[-1].endswith(b"\n"):
            raise fail()
        out.extend(new)
        pos = start + len(old)
        if out and not out[-1].endswith(b"\n") and pos < len(lines):
            raise fail()
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

    for fd in _parse_diff(diff, path=patch_path, first_line=first_line):
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
        if fd.kind == "delete":
            assert fd.old_path is not None
            if content:
                if fd.hunks:
                    last = fd.hunks[-1]
                    raise PatchError(
                        f"hunk {last.number} for {fd.name} does not apply", path=patch_path, line=last.line
                    )
                message = f"{fd.name} is not empty, the patch deletes it as an empty file"
                raise PatchError(message, path=patch_path, line=fd.line)
            result[fd.old_path] = None
            continue
        if fd.kind == "rename":
            assert fd.old_path is not None
            result[fd.old_path] = None
        assert new_path is not None
        result[new_path] = content
    return result
