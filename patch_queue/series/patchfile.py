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
    <description lines, if any>      an empty patch (no change) ends here: git's ``--always`` form
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
- the diff part is read and applied by :mod:`patch_queue.series.diffs`.

Why not git or a library: ``git mailinfo`` and ``git apply --cached`` take a process per patch (a
refresh reads the whole series) and their errors name neither the patch file's line nor the hunk;
``unidiff`` is lenient (unknown header lines, quoted names, copies) and its errors carry no line.
"""

from __future__ import annotations

import base64
import binascii
import operator
import re
from collections.abc import Callable
from itertools import dropwhile, takewhile

from patch_queue.errors import PatchError
from patch_queue.series.diffs import Diff, DiffParser, ErrorFactory, Lines, parse_diff, quoted_end

__all__ = ["PatchFile", "check_message", "parse", "split_message"]

_SPACE = " \t\n\r"  # git's isspace()
_IDENT = re.compile(r"([^<>\n\r]+) <([^<>\n\r]*)>")
_HEADER = re.compile(r"([!-9;-~]+):(.*)")
_ENCODED_WORD = re.compile(r"=\?([^?\s]+)\?([qQbB])\?([^?\s]*)\?=")
_Q_TEXT = re.compile(r"(?:[^=]|=[0-9A-Fa-f]{2})*")
_INBODY = re.compile(r"(?i)(?:from|subject|date):|\[PATCH\](?:[ \t\r]|$)")
_MBOX_FROM = re.compile(r"From [0-9a-f]{40,64} Mon Sep 17 00:00:00 2001")
_CHARSETS = {"utf-8", "utf8", "us-ascii", "ascii"}


class PatchFile:
    """One commit as a patch file.

    ``diff`` is the diff text; a parsed patch keeps its diff parsed over the file's own bytes
    (:meth:`parsed`) and makes the text only when it is asked for.  ``diff_line`` is where the diff
    starts in the file it was parsed from (1 for a patch built in memory); it only serves error
    messages and takes no part in equality.
    """

    __slots__ = ("_diff", "_parsed", "author", "date", "description", "diff_line", "subject")

    def __init__(
        self,
        subject: str,
        description: str,
        author: str,
        date: str,
        diff: str | Diff = "",
        diff_line: int = 1,
    ) -> None:
        self.subject, self.description, self.author, self.date = subject, description, author, date
        self._diff: str = "" if isinstance(diff, Diff) else diff
        self._parsed: Diff | None = diff if isinstance(diff, Diff) else None
        self.diff_line = diff_line

    @property
    def diff(self) -> str:
        return self._diff if self._parsed is None else self._parsed.text()

    def parsed(self, path: str) -> Diff:
        """The diff, read (errors name ``path`` and the lines from ``diff_line``)."""
        if self._parsed is None:
            return parse_diff(self.diff, path=path, first_line=self.diff_line)
        return self._parsed

    def _key(self) -> tuple[str, str, str, str, str]:
        return self.subject, self.description, self.author, self.date, self.diff

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PatchFile) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"PatchFile(subject={self.subject!r}, author={self.author!r}, date={self.date!r})"


# -- before git writes a patch -----------------------------------------------------------------


def split_message(message: str) -> tuple[str, str]:
    """Splits a commit message into (subject, description) the way ``git format-patch`` prints them.

    The subject is the first paragraph joined with spaces; the description is the rest without
    leading blank lines, trailing white space on each line and trailing blank lines.
    """
    lines = list(dropwhile(operator.not_, [line.rstrip(_SPACE) for line in message.split("\n")]))
    subject = list(takewhile(bool, lines))
    body = dropwhile(operator.not_, lines[len(subject) :])
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
    if line.startswith(("diff -", "Index: ")):
        return True
    rest = line[3:]  # after "---": white space only, or one space and a file name
    return line.startswith("---") and (not rest.strip(_SPACE) or (rest[:1] == " " and rest[1:2].strip(_SPACE) != ""))


def _mbox_from(line: str) -> bool:
    """git mailsplit's is_from_line(): a line where ``git am`` starts another mail (``From ``, its last colon
    inside a time such as ``00:00:00``, then a year after 90).  git format-patch writes a message as it is (no
    ``>From`` quoting), so such a line in a description would split the patch in two."""
    raw = line.encode("utf-8", "surrogatepass")  # git counts bytes
    colon = raw.rfind(b":", 5, len(raw) - 1)
    if len(raw) < 19 or not raw.startswith(b"From ") or colon < 9:
        return False
    digits = raw[colon - 4 : colon - 3] + raw[colon - 2 : colon] + raw[colon + 1 : colon + 3]
    year = re.match(rb"\s*[+-]?\d+", raw[colon + 3 :])
    return len(digits) == 5 and digits.isdigit() and year is not None and int(year.group()) > 90


def _check_description(description: str, error: ErrorFactory, first_line: int = 0) -> None:
    lines = description.split("\n")
    for i, line in enumerate(lines):
        if _patchbreak(line):
            raise error(f"description line {i + 1} {line!r} would end the commit message for git am", first_line + i)
        if _mbox_from(line):
            raise error(
                f"description line {i + 1} {line!r} would start another mail for git am (an mbox 'From ' line): "
                "reword it",
                first_line + i,
            )
    first = next((x for x in lines if x.strip(_SPACE)), "")
    if _INBODY.match(first):
        i = lines.index(first)
        raise error(f"description line {i + 1} {first!r} would be read as a mail header by git am", first_line + i)


# -- parsing -----------------------------------------------------------------------------------


def _decode_utf8(data: bytes, path: str) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        message = f"not valid UTF-8 (byte 0x{data[e.start]:02x} at column {column})"
        raise PatchError(message, path=path, line=line) from None


def _decode_words(text: str, error: ErrorFactory) -> str:
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
        elif _Q_TEXT.fullmatch(payload):
            raw = binascii.a2b_qp(payload.encode("utf-8"), header=True)
        else:
            raise error("malformed quoted-printable encoded header text")
        pending.append(raw)
        pending_charset = charset
        pos = m.end()
    flush()
    out.append(text[pos:])
    return "".join(out)


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


def _parse_author(raw: str, error: ErrorFactory) -> str:
    if raw.startswith("=?"):
        raw = _decode_words(raw, error)
    elif raw.startswith('"'):
        end = quoted_end(raw)
        if end is None:
            raise error("From: header has an unterminated quoted name")
        email = re.fullmatch(r" <[^<>\n\r]*>", raw[end:])
        if email is None:
            raise error("From: header is not of the form 'Name <email>'")
        raw = re.sub(r"\\(.)", r"\1", raw[1 : end - 1]) + email.group()
    if _IDENT.fullmatch(raw) is None:
        raise error("From: header is not of the form 'Name <email>'")
    return raw


def _first(lines: Lines, start: int, found: Callable[[str], object]) -> int:
    """The index of the first of ``lines[start:]`` that is ``found``, else ``len(lines)``."""
    return next((i for i in range(start, len(lines)) if found(lines[i])), len(lines))


def parse(data: bytes, *, path: str) -> PatchFile:
    """Reads a patch file written by ``git format-patch`` (one commit).  Raises only PatchError."""
    _decode_utf8(data, path)  # checked once; the lines are decoded one by one as they are read
    lines = Lines(data)
    ends_with_newline = data.endswith(b"\n")

    def fail(message: str, index: int) -> PatchError:
        return PatchError(message, path=path, line=index + 1)

    def error_at(index: int) -> ErrorFactory:
        return lambda message="", at=None: fail(message, index if at is None else at)

    if not lines or not lines[0].startswith("From "):
        raise PatchError("not an mbox patch: it does not start with a 'From ' line", path=path, line=1)

    # Mail headers, up to the first blank line.
    headers: dict[str, tuple[int, str, list[str]]] = {}
    current: str | None = None
    for i, line in enumerate(lines):
        if "\r" in line:
            raise fail("mail header line ends with CR LF (DOS line ends)", i)
        if i == 0:
            continue
        if line == "":
            break
        if line[0] in " \t":
            if current is None:
                raise fail("not an mbox patch: malformed mail header line", i)
            headers[current][2].append(line)
        else:
            m = _HEADER.fullmatch(line)
            if m is None:
                raise fail("not an mbox patch: malformed mail header line", i)
            current = m.group(1).lower()
            value = m.group(2)[1:] if m.group(2).startswith(" ") else m.group(2)
            if current in headers and current in ("from", "subject", "date"):
                raise fail(f"duplicate {m.group(1)}: header", i)
            headers.setdefault(current, (i, value, []))
    else:
        raise PatchError(
            "not an mbox patch: the mail header does not end with a blank line", path=path, line=len(lines)
        )
    header_end = i

    if "subject" not in headers:
        raise fail("not an mbox patch: no Subject: header", header_end)
    for name in ("from", "date"):
        if name not in headers:
            raise fail(f"no {name.capitalize()}: header", header_end)
    cte = headers.get("content-transfer-encoding")
    if cte is not None and _unfold(cte[1], cte[2]).strip().lower() not in ("7bit", "8bit", "binary"):
        raise fail("unsupported Content-Transfer-Encoding (expected 8bit)", cte[0])
    ctype = headers.get("content-type")
    if ctype is not None:
        value = _unfold(ctype[1], ctype[2]).strip().lower()
        charset = re.search(r"charset=\"?([^\";\s]+)", value)
        if not value.startswith("text/plain") or (charset is not None and charset.group(1) not in _CHARSETS):
            raise fail("unsupported Content-Type (expected text/plain; charset=UTF-8)", ctype[0])

    index, first, continuations = headers["subject"]
    prefix_len = _patch_tag_length(first)
    subject = _unfold(first, continuations, prefix_len)[prefix_len:]
    if "=?" in subject:
        subject = _decode_words(subject, error_at(index))
    if "\n" in subject or "\r" in subject:
        raise fail("the Subject: header has a line break in it", index)
    index, first, continuations = headers["from"]
    author = _parse_author(_unfold(first, continuations), error_at(index))
    index, first, continuations = headers["date"]
    date = _unfold(first, continuations)
    if not date.strip():
        raise fail("empty Date: header", index)

    # The message body, up to where git am would stop reading it.
    body_start = header_end + 1
    k = _first(lines, body_start, _patchbreak)
    if (nul := lines.find(b"\0", 0)) < k:  # the diff's own bytes are the diff parser's to check
        raise fail("a NUL byte in the mail header or message; a commit message is text", nul)
    description = lines.text(body_start, k).rstrip("\n")
    _check_description(description, error_at(body_start), body_start)

    if k == len(lines):  # nothing ends the message: an empty patch, as `git format-patch --always` writes it
        if not ends_with_newline:
            raise PatchError("the last line has no newline (truncated patch?)", path=path, line=len(lines))
        return PatchFile(subject, description, author, date, "", diff_line=len(lines) + 1)
    diff_start = _first(lines, k, lambda line: line.startswith("diff --git "))
    if diff_start >= len(lines):
        raise PatchError("no diff in the patch (no 'diff --git' line)", path=path, line=max(len(lines), 1))

    parser = DiffParser(lines, path=path, first_line=1)
    files, end = parser.parse(diff_start)
    if end == len(lines) and not ends_with_newline:
        raise PatchError("the last line has no newline (truncated patch?)", path=path, line=len(lines))
    if (mbox := _first(lines, end, _MBOX_FROM.fullmatch)) < len(lines):
        raise fail("more than one patch in the file (one commit per file expected)", mbox)
    rest = _first(lines, end, bool)
    if rest < len(lines) and lines[rest] != "-- ":  # anything after "-- " is the signature
        raise fail("unexpected line after the diff", rest)
    diff = Diff(lines, files, diff_start, end)
    return PatchFile(subject, description, author, date, diff, diff_line=diff_start + 1)
