"""What the two rule files share (``check-rules.toml`` of :mod:`.rules`, ``gpu-sync-rules.toml`` of
:mod:`patch_queue.sync.translation`): reading one as UTF-8 TOML, the line of a key for an error message (tomllib
gives no line numbers), the type check of a key's value, and regular expressions run with a time limit.

A rule's regular expression is the project's data, run on every module by ``pq check`` (and so inside
``pq refresh``) and on every GPU line by ``pq sync-gpu``: a catastrophic one (``( +)+#X`` against a long run of
spaces) would run for minutes.  They are compiled with the ``regex`` package, whose syntax is ``re``'s and whose
matching functions take a ``timeout``: one that runs past :data:`TIMEOUT` seconds is an error naming the rule.
"""

from __future__ import annotations

import functools
import re
import tomllib
from pathlib import Path
from typing import Any

import regex

from patch_queue.errors import QueueError

TIMEOUT = 2.0  # seconds for one rule on one module (or one line): a sane pattern takes milliseconds


def read(path: Path) -> str:
    """The text of a rule file; one line naming the file (and the line of the first bad byte) otherwise."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise QueueError(f"cannot be read: {exc.strerror or exc}", path=str(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise QueueError(
            f"is not UTF-8 text (byte {data[exc.start]:#04x}); save it as UTF-8", path=str(path), line=line
        ) from None


def parse(text: str, path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column \d+\)", str(exc))  # Python 3.11's tomllib has no lineno
        raise QueueError(f"not valid TOML: {exc}", path=path, line=int(at[1]) if at else None) from None


def table_lines(text: str, kind: str) -> list[tuple[int, int]]:
    """(first, last) line of each ``[[kind]]`` table of ``text``, in order (a table ends at the next header)."""
    lines = text.splitlines()
    heads = [n for n, line in enumerate(lines, 1) if line.strip().startswith("[")]
    out = []
    for n in heads:
        if re.match(rf"\[\[\s*{re.escape(kind)}\s*\]\]", lines[n - 1].strip()):
            later = [h for h in heads if h > n]
            out.append((n, (later[0] - 1) if later else len(lines)))
    return out


def key_line(text: str, span: tuple[int, int] | None, key: str) -> int | None:
    """The line of ``key = ...`` in the table at ``span``; the table's first line when the key is not there."""
    if span is None:
        return None
    lines = text.splitlines()
    pattern = re.compile(rf"\s*(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')\s*=")
    return next((n for n in range(span[0], span[1] + 1) if pattern.match(lines[n - 1])), span[0])


def type_error(value: object, kind: str) -> str | None:
    """Why ``value`` is not of ``kind`` (``str``: a non-empty string; ``text``: any string; ``strs``: a list of
    strings; ``bool``; ``int``: a whole number of at least 1), or None when it is."""
    if kind == "str":
        return None if isinstance(value, str) and value else "must be a non-empty string"
    if kind == "text":
        return None if isinstance(value, str) else "must be a string"
    if kind == "strs":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else 'must be a list of strings (["a", "b"])'
    if kind == "bool":
        return None if isinstance(value, bool) else "must be true or false"
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        return None if ok else "must be a whole number of at least 1"
    raise AssertionError(kind)


@functools.lru_cache(maxsize=256)
def compiled(pattern: str) -> regex.Pattern[str]:
    """``pattern`` compiled (regex.error when it is not a valid one); re's syntax, VERSION0."""
    return regex.compile(pattern)


PatternError = regex.error  # a pattern (or a replacement's group reference) that does not compile


class RuleTimeout(Exception):
    """A rule's regular expression ran past :data:`TIMEOUT`."""


def finditer(pattern: str, text: str) -> list[regex.Match[str]]:
    try:
        return list(compiled(pattern).finditer(text, timeout=TIMEOUT))
    except TimeoutError:
        raise RuleTimeout(pattern) from None


def sub(pattern: str, replace: str, text: str) -> str:
    try:
        return str(compiled(pattern).sub(replace, text, timeout=TIMEOUT))
    except TimeoutError:
        raise RuleTimeout(pattern) from None


def timed_out(where: str, line: int | None, rule: str, on: str) -> QueueError:
    return QueueError(
        f"rule {rule!r}: its regular expression ran past the {TIMEOUT:g} s limit on {on} "
        "(a catastrophic pattern: nested repeats such as ( +)+); rewrite it",
        path=where,
        line=line,
    )
