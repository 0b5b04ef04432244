"""The downstream's formatter, applied to the carried upstream symbols of a projection.

The vllm-omni runners are exactly what ``ruff format --line-length 120`` makes of their code,
while vllm-ascend used yapf (narrower, other wrapping rules) until early 2026.  A projection of
raw upstream text makes every omni patch carry that reformatting and every upgrade conflict on
it.  Formatting the carried symbols with the downstream's formatter first leaves the patches
holding only omni edits, and the merges only real changes.

All symbols of one projection go through a single ``ruff format`` process: each method is
wrapped in a dummy class (so its indentation, and so its line width, is the real one), each
item is preceded by a marker comment, and the output is split at the markers.  The ruff version
is pinned by the package, so the result is byte-stable.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from patch_queue.errors import PqError
from patch_queue.merge import pieces
from patch_queue.merge.symbols import Symbol
from patch_queue.sources import cache

RUFF = "ruff"
_MARK = "# pq-format-item-{}"
_MARK_RE = re.compile(r"^# pq-format-item-(\d+)\n", re.MULTILINE)
_WRAP = "class _PqFormatItem:\n"


@lru_cache(maxsize=1)
def _ruff_bin() -> str:
    try:
        from ruff.__main__ import find_ruff_bin
    except ImportError:  # pragma: no cover - ruff is a declared dependency
        raise PqError("the ruff formatter is not installed; reinstall pq with its dependencies") from None
    return str(find_ruff_bin())


def format_source(source: str, line_length: int) -> str | None:
    """``source`` laid out by ``ruff format``; None when the formatter refuses it."""
    proc = subprocess.run(
        [_ruff_bin(), "format", "--isolated", "--line-length", str(line_length), "--stdin-filename", "p.py", "-"],
        input=source.encode("utf-8"),
        capture_output=True,
        check=False,
    )
    return proc.stdout.decode("utf-8") if proc.returncode == 0 else None


def format_statements(sources: Sequence[str], line_length: int) -> list[str]:
    """Each of ``sources`` (top-level statements, each ending in a newline) laid out by ``ruff format`` as
    :func:`format_source` lays it out alone, all in one formatter run; a source it refuses stays as it is."""
    if len(sources) > 1:
        out = format_source("".join(f"{_MARK.format(i)}\n{s}\n\n" for i, s in enumerate(sources)), line_length)
        parts = _MARK_RE.split(out) if out is not None else []
        # parts: [prefix, "0", text0, "1", text1, ...]
        if len(parts) == 1 + 2 * len(sources) and not parts[0].strip():
            return [parts[2 + 2 * i].strip("\n") + "\n" for i in range(len(sources))]
    return [format_source(s, line_length) or s for s in sources]


@dataclass(frozen=True, order=True)
class Lint:
    """One finding of ``ruff check`` on a text: where (1-based line and column), the rule, the name it is about."""

    line: int
    column: int
    code: str  # e.g. "F821"
    name: str  # the source text the finding points at (the undefined or unused name)
    message: str


def lint(text: str, select: Sequence[str]) -> list[Lint] | None:
    """``ruff check`` with only the rules ``select`` (no configuration) on ``text``; None when it does not parse."""
    proc = subprocess.run(
        [_ruff_bin(), "check", "--isolated", "--no-cache", "--select", ",".join(select)]
        + ["--output-format", "json", "--stdin-filename", "p.py", "-"],
        input=text.encode("utf-8"),
        capture_output=True,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise PqError(f"ruff check failed: {proc.stderr.decode('utf-8', 'replace').strip()}")
    lines = text.splitlines()
    out: list[Lint] = []
    for item in json.loads(proc.stdout):
        if item.get("code") not in select:
            return None  # a syntax error ("invalid-syntax")
        start, end = item["location"], item["end_location"]
        row = lines[start["row"] - 1] if start["row"] <= len(lines) else ""
        name = row[start["column"] - 1 : end["column"] - 1] if end["row"] == start["row"] else ""
        out.append(Lint(start["row"], start["column"], item["code"], name, item["message"]))
    return sorted(out)


def _wrap(sym: Symbol) -> str:
    text = sym.text if sym.text.endswith("\n") else sym.text + "\n"
    return (_WRAP + text) if sym.is_method else text


def _unwrap(sym: Symbol, text: str) -> str:
    if sym.is_method:
        if not text.startswith(_WRAP):
            raise ValueError("wrapper lost")
        text = text[len(_WRAP) :]
    return text.strip("\n") + "\n"


def _batch(items: Sequence[Symbol], line_length: int) -> list[str] | None:
    source = "".join(f"{_MARK.format(i)}\n{_wrap(s)}\n\n" for i, s in enumerate(items))
    out = format_source(source, line_length)
    if out is None:
        return None
    parts = _MARK_RE.split(out)
    # parts: [prefix, "0", text0, "1", text1, ...]
    if len(parts) != 1 + 2 * len(items) or parts[0].strip():
        return None
    try:
        return [_unwrap(s, parts[2 + 2 * i]) for i, s in enumerate(items)]
    except ValueError:
        return None


def format_symbols(syms: Sequence[Symbol], *, formatter: str, line_length: int) -> list[Symbol]:
    """``syms`` with their text formatted; a symbol the formatter refuses keeps its own text."""
    if formatter == "" or not syms:
        return list(syms)
    if formatter != RUFF:
        raise PqError(f"unknown projection formatter {formatter!r} (known: {RUFF})")
    texts = _batch(syms, line_length)
    if texts is None:  # one symbol spoiled the batch: format them one by one
        texts = [(_batch([s], line_length) or [s.text])[0] for s in syms]
    return [replace(s, text=t) for s, t in zip(syms, texts, strict=True)]


def downstream_names(module_symbols: dict[str, Symbol], carried: Sequence[str]) -> list[str]:
    """The downstream names of the carried upstream symbols ``Cls.meth`` (the omni class renames ``Cls``)."""
    classes = [n for n, s in module_symbols.items() if not s.is_method]
    out: list[str] = []
    for name in carried:
        if "." not in name:
            if name in module_symbols:
                out.append(name)
            continue
        cls, meth = name.split(".", 1)
        candidates = [f"{c}.{meth}" for c in classes if f"{c}.{meth}" in module_symbols]
        if f"{cls}.{meth}" in candidates:
            out.append(f"{cls}.{meth}")
        elif len(candidates) == 1:
            out.append(candidates[0])
    return out


def format_carried_many(items: Sequence[tuple[str, Sequence[str]]], *, formatter: str, line_length: int) -> list[str]:
    """Each module text (with the names of its carried symbols) with those symbols formatted; a text that
    does not parse stays as it is.  One formatter run for all; results are kept in the download
    cache by their inputs (text, names, formatter settings, the formatter binary, this code)."""
    if formatter == "" or not items:
        return [text for text, _carried in items]
    keys = [
        cache.derived_key(tool_stamp(), formatter, str(line_length), "\0".join(carried), text)
        for text, carried in items
    ]
    hits = [cache.derived_text("layout", key) for key in keys]
    chosen: list[list[Symbol]] = []
    for (text, carried), hit in zip(items, hits, strict=True):
        try:
            syms = pieces.symbols_of(text, path="module") if carried and hit is None else {}
        except PqError:
            syms = {}
        chosen.append([syms[n] for n in downstream_names(syms, carried)])
    done = iter(format_symbols([s for group in chosen for s in group], formatter=formatter, line_length=line_length))
    out: list[str] = []
    for (text, _carried), group, hit, key in zip(items, chosen, hits, keys, strict=True):
        if hit is not None:
            out.append(hit)
            continue
        lines = text.splitlines(keepends=True)
        pairs = [(old, next(done)) for old in group]
        for old, new in sorted(pairs, key=lambda pair: -pair[0].start):
            lines[old.start - 1 : old.end] = [new.text]
        out.append("".join(lines))
        cache.derived_put("layout", key, out[-1].encode("utf-8"))
    return out


@lru_cache(maxsize=1)
def tool_stamp() -> str:
    """What a derived layout depends on besides its inputs: the formatter binary and pq's own code."""
    try:
        st = os.stat(_ruff_bin())
        binary = f"{_ruff_bin()} {st.st_size} {st.st_mtime_ns}"
    except (OSError, PqError):
        binary = "no ruff"
    return binary + " " + cache.code_stamp("series/fmt.py", "merge/symbols.py", "merge/pieces.py", "series/stack.py")
