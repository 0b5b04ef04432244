"""Render a refresh report (the JSON of ``pq refresh --report``, format 2) for people.

Three pure functions, no I/O:

- :func:`markdown`: a GitHub pull-request body (status paragraph, summary tables, one collapsed
  section per conflict and per review flag), kept under GitHub's 65,536-character body limit;
- :func:`annotations`: GitHub Actions workflow commands (``::error`` / ``::warning``), escaped
  the way ``@actions/core`` escapes them;
- :func:`summary_line`: one line for the terminal.

The report schema is documented in :func:`markdown`.  Missing keys take empty defaults (so a
format 1 report renders too); a key of the wrong type raises ``ValueError`` naming it.
The output depends on the report alone: same report, same text.
"""

# no ``from __future__ import annotations``: it would bind the name of :func:`annotations` below
import html
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

from patch_queue.merge import explain
from patch_queue.merge.conflict import Conflict, boolean, integer, listing, mapping, string, wrong

UPSTREAM_URL = "https://github.com/vllm-project/vllm-ascend"
GITHUB_BODY_LIMIT = 65_536  # characters of a pull-request body; measured here in UTF-8 bytes, to be safe
TRUNCATED_NOTE = "… (truncated, see the JSON report)"
EXCERPT_LINES = 20  # what a truncated side keeps
EXCERPT_CHARS = 1_500
SUPPORTED_FORMATS = (1, 2)

# table order of the kinds: conflicts first, then flags, as the schema lists them; unknown kinds sort after
KIND_ORDER = (
    "both-changed",
    "upstream-changed-replaced",
    "anchor-lost",
    "both-added-same",
    "both-inserted",
    "already-upstream",
    "symbol-removed",
    "deleted-file",
    "kept-replacement",
    "block-moved",
    "near-block",
    "reused",
    "merged-words",
    "import-added",
    "import-stale",
    "gpu-synced",
    "gpu-unplaced",
)

_SHA = re.compile(r"[0-9a-fA-F]{7,64}")
_TICKS = re.compile(r"`+")


# ---------------------------------------------------------------------------------------------
# reading the report (typed, tolerant of missing keys, strict about wrong types)


@dataclass(frozen=True)
class _Report:
    base: str
    target: str
    base_commit: str
    target_commit: str
    downstream: str
    release: str
    out: str
    patches: tuple[tuple[str, str], ...]  # (name, status)
    conflicts: tuple[Conflict, ...]
    flags: tuple[Conflict, ...]
    removed_symbols: tuple[str, ...]
    blocks_before: int | None
    blocks_after: int | None
    finished: bool
    stopped_at: str | None
    fences: tuple[tuple[str, int, str], ...]  # (file, line, message) of Omni-new fence problems
    culprits: str = ""  # between which upstream commits the culprits were searched, or why none were


def _items(report: Mapping[str, object], key: str) -> Iterator[tuple[str, object]]:
    """The elements of the list ``report[key]``, each with its place for error messages."""
    for i, raw in enumerate(listing(report, key, "")):
        yield f"{key}[{i}]", raw


def _objects(report: Mapping[str, object], key: str) -> Iterator[tuple[str, Mapping[str, object]]]:
    return ((where, mapping(raw, where)) for where, raw in _items(report, key))


def _read(report: Mapping[str, object]) -> _Report:
    fmt = report.get("format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt not in SUPPORTED_FORMATS:
        raise ValueError(f"report format {fmt!r} is not supported (known: {', '.join(map(str, SUPPORTED_FORMATS))})")
    upstream = mapping(report.get("upstream"), "upstream")
    downstream = mapping(report.get("downstream"), "downstream")
    blocks = mapping(report.get("blocks"), "blocks")
    patches = tuple((string(p, "name", where), string(p, "status", where)) for where, p in _objects(report, "patches"))
    removed = []
    for where, s in _items(report, "removed_symbols"):
        if not isinstance(s, str):
            raise wrong(where, "a string", s)
        removed.append(s)
    stopped = string(report, "stopped_at", "")
    return _Report(
        base=string(upstream, "base", "upstream"),
        target=string(upstream, "target", "upstream"),
        base_commit=string(upstream, "base_commit", "upstream"),
        target_commit=string(upstream, "target_commit", "upstream"),
        downstream=string(downstream, "name", "downstream") or "vllm-omni",
        release=string(downstream, "release", "downstream"),
        out=string(report, "out", "") or "npu_worker",
        patches=patches,
        conflicts=tuple(Conflict.from_json(e, where) for where, e in _items(report, "conflicts")),
        flags=tuple(Conflict.from_json(e, where, conflict=False) for where, e in _items(report, "flags")),
        removed_symbols=tuple(removed),
        blocks_before=integer(blocks, "before", "blocks"),
        blocks_after=integer(blocks, "after", "blocks"),
        finished=boolean(report, "finished", "", True),
        stopped_at=stopped or None,
        fences=tuple(
            (string(f, "file", where), integer(f, "line", where) or 0, string(f, "message", where))
            for where, f in _objects(report, "fences")
        ),
        culprits=string(upstream, "culprits", "upstream"),
    )


def _is_reused(entry: Conflict) -> bool:
    return entry.reused or entry.kind == "reused"


def _path(out: str, file: str) -> str:
    """The entry's file relative to the repository root."""
    out = out.strip("/")
    return f"{out}/{file}" if file and out not in ("", ".") else file


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# terminal


def summary_line(report: dict[str, object]) -> str:
    """One line for the terminal, e.g. ``3 conflicts, 12 review flags (2 reused), 24/24 omni blocks kept``."""
    r = _read(report)
    parts = [_plural(len(r.conflicts), "conflict") if r.conflicts else "no conflicts"]
    flags = _plural(len(r.flags), "review flag")
    reused = sum(1 for f in r.flags if _is_reused(f))
    parts.append(f"{flags} ({reused} reused)" if reused else flags)
    if r.blocks_before is not None or r.blocks_after is not None:
        parts.append(f"{r.blocks_after or 0}/{r.blocks_before or 0} omni blocks kept")
    if r.removed_symbols:
        parts.append(_plural(len(r.removed_symbols), "upstream symbol") + " removed")
    if not r.finished:
        parts.append(f"stopped at {_one_line(r.stopped_at or '?')}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# GitHub Actions workflow commands


def _escape_data(text: str) -> str:
    """``escapeData`` of @actions/core: the message part of a workflow command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """``escapeProperty`` of @actions/core: a ``key=value`` property of a workflow command."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _short(commit: str) -> str:
    return commit[:7] if _SHA.fullmatch(commit) else commit


def _annotation(command: str, out: str, entry: Conflict) -> str:
    props: list[tuple[str, str]] = []
    if entry.file:
        props.append(("file", _path(out, entry.file)))
        if entry.line is not None and entry.line >= 1:
            props.append(("line", str(entry.line)))
    props.append(("title", entry.kind))
    blame = [
        " ".join(p for p in (_short(c.commit), f"#{c.pr}" if c.pr is not None else "") if p) for c in entry.culprits
    ]
    blame = [b for b in blame if b]
    details = [entry.symbol] if entry.symbol else []
    if blame:
        details.append("culprits: " + ", ".join(blame))
    message = entry.message or entry.kind
    if details:
        message += f" ({'; '.join(details)})"
    rendered = ",".join(f"{k}={_escape_property(v)}" for k, v in props)
    return f"::{command} {rendered}::{_escape_data(message)}"


def annotations(report: dict[str, object]) -> list[str]:
    """GitHub Actions workflow commands: one ``::error`` per conflict, then one ``::warning`` per flag.

    ``::error file=<out>/<file>,line=<line>,title=<kind>::<message> (<symbol>; culprits: abc1234 #1234)``
    """
    r = _read(report)
    return [_annotation("error", r.out, e) for e in r.conflicts] + [_annotation("warning", r.out, e) for e in r.flags]


# ---------------------------------------------------------------------------------------------
# Markdown pieces


def _longest_ticks(text: str) -> int:
    return max((len(m) for m in _TICKS.findall(text)), default=0)


def _fence(text: str, lang: str) -> str:
    """A fenced code block whose fence is longer than any backtick run in ``text``."""
    fence = "`" * max(3, _longest_ticks(text) + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


def _code(text: str) -> str:
    """An inline code span holding ``text`` as it is (longer backtick runs, padded where needed)."""
    text = _one_line(text) if "\n" in text or "\r" in text else text
    if not text:
        return ""
    ticks = "`" * (_longest_ticks(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text[0] == text[-1] == " " and text.strip()) else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _cell(text: str) -> str:
    """Text for a GFM table cell: pipes escaped (also inside code spans, as GFM requires)."""
    return text.replace("|", "\\|")


def _text(text: str) -> str:
    """Free text (messages, subjects) safe inside the HTML of a ``<details>`` section."""
    return html.escape(text, quote=False)


def _lang(text: str) -> str:
    """``diff`` for text that reads as a unified diff, ``python`` for code."""
    lines = [line for line in text.splitlines() if line.strip()]
    diffish = all(line[0] in "+- \\" or line.startswith("@@") for line in lines)
    changed = any(line[0] in "+-" or line.startswith("@@") for line in lines)
    return "diff" if lines and diffish and changed else "python"


def _commit_link(commit: str, url: str) -> str:
    return f"[{commit[:7]}]({url}/commit/{commit})" if _SHA.fullmatch(commit) else _code(commit)


def _excerpt(text: str) -> tuple[str, bool]:
    cut = "".join(text.splitlines(keepends=True)[:EXCERPT_LINES])[:EXCERPT_CHARS]
    return cut, cut != text


def _section(r: _Report, url: str, entry: Conflict, level: int) -> str:
    """One ``<details>`` section; ``level`` 0 full, 1 sides cut to an excerpt, 2 sides left out.

    ``url`` is the upstream repository's, without a trailing slash."""
    where = _path(r.out, entry.file) or "(no file)"
    if entry.line is not None:
        where += f":{entry.line}"
    summary = [f"<code>{html.escape(where)}</code>", html.escape(entry.kind)]
    if entry.symbol:
        summary.append(f"<code>{html.escape(entry.symbol)}</code>")
    if entry.reused and entry.kind != "reused":
        summary.append("reused")
    blocks = [f"<details><summary>{' — '.join(summary)}</summary>"]
    facts = [f"**Patch:** {_code(entry.patch)}" if entry.patch else "**Patch:** (unknown)"]
    if entry.reused:
        facts.append("a recorded maintainer resolution was applied")
    blocks.append(" · ".join(facts))
    if entry.message:
        blocks.append(_text(entry.message))
    if entry.conflict:  # what upstream changed, the omni edit, a suggestion (never applied by pq)
        blocks.append(f"**Upstream change:** {_text(explain.upstream_change(entry))}")
        if entry.anchor is None:
            blocks.append(f"**Omni:** {_text(explain.omni_block(entry))}")
    if entry.anchor is not None:
        a = entry.anchor
        where_a = ", ".join(f"{label} {n}" for label, n in (("omni block", a.index), ("line", a.line)) if n is not None)
        blocks.append(f"**Anchor:** {where_a or 'omni block'}" + (f": {_code(a.first)}" if a.first else ""))
    if entry.culprits:
        lines = ["**Culprits:**"]
        for c in entry.culprits:
            bits = [_commit_link(c.commit, url)] if c.commit else []
            if c.pr is not None:
                bits.append(f"[#{c.pr}]({url}/pull/{c.pr})")
            if c.subject:
                bits.append(_text(_one_line(c.subject)))
            if c.date:
                bits.append(f"({_text(c.date)})")
            lines.append("- " + " ".join(bits))
        blocks.append("\n".join(lines))
    texts = list(entry.sides.items())
    if entry.resolution is not None and (not entry.conflict or entry.resolution):
        texts.append(("resolution", entry.resolution))
    tip = explain.suggest(entry) if entry.conflict else None
    if tip is not None:
        blocks.append(f"**Suggested resolution** (not applied): {_text(tip.reason)}")
        texts.append(("suggestion", tip.text))
    if texts and level >= 2:
        blocks.append(TRUNCATED_NOTE)
    elif texts:
        labels = {
            "base": f"old upstream{' ' + _code(r.base) if r.base else ''}",
            "upstream": f"new upstream{' ' + _code(r.target) if r.target else ''}",
            "patch": f"{_text(r.downstream)} patch",
            "resolution": "what the tool wrote",
            "suggestion": "the suggested resolution",
        }
        for name, text in texts:  # the three sides and the resolution: each has its label
            label = f"**{name}** ({labels[name]})"
            if not text.strip():
                blocks.append(f"{label}: _(empty)_")
                continue
            cut, truncated = _excerpt(text) if level >= 1 else (text, False)
            blocks.append(f"{label}\n\n{_fence(cut, _lang(text))}" + (f"\n\n{TRUNCATED_NOTE}" if truncated else ""))
    blocks.append("</details>")
    return "\n\n".join(blocks)


def _tally(entries: Sequence[Conflict], key: Callable[[Conflict], str]) -> dict[str, list[int]]:
    """key -> [conflicts, flags] among ``entries``, in first-seen order."""
    counts: dict[str, list[int]] = {}
    for e in entries:
        counts.setdefault(key(e), [0, 0])[0 if e.conflict else 1] += 1
    return counts


def _head(r: _Report, url: str) -> str:
    base, target = r.base or "(unknown)", r.target or "(unknown)"
    blocks = [f"## NPU runners: {base} → {target}"]

    def upstream_ref(label: str, commit: str) -> str:
        ref = _code(label) if label else "(unknown)"
        return f"{ref} ({_commit_link(commit, url)})" if commit else ref

    who = f"{r.downstream} {r.release}".strip()
    status = [
        f"{_text(who)}'s NPU model runners replayed from vllm-ascend {upstream_ref(r.base, r.base_commit)} "
        f"onto {upstream_ref(r.target, r.target_commit)}."
    ]
    if r.conflicts:
        status.append(
            f"**{_plural(len(r.conflicts), 'conflict')} need{'s' if len(r.conflicts) == 1 else ''} resolution:** "
            f"{_code(r.out + '/')} holds {_code('<<<<<<<')} markers at the places listed below."
        )
    else:
        status.append(f"**Clean:** {_plural(len(r.patches), 'patch', 'patches')} replayed without conflicts.")
    if not r.finished:
        stopped = _code(r.stopped_at or "?")
        status.append(f"The refresh stopped at {stopped}; the patches after it are not replayed yet.")
    reused = sum(1 for f in r.flags if _is_reused(f))
    if r.flags:
        flags = _plural(len(r.flags), "review flag")
        reused_text = f" ({_plural(reused, 'reused resolution')})" if reused else ""
        status.append(f"{flags}{reused_text}: decisions the tool took on its own, listed below for review.")
    else:
        status.append("No review flags.")
    if r.blocks_before is not None or r.blocks_after is not None:
        before, after = r.blocks_before or 0, r.blocks_after or 0
        lost = f" (**{_plural(before - after, 'block')} lost**)" if after < before else ""
        status.append(f"Omni blocks: {before} before → {after} after{lost}.")
    if r.removed_symbols:
        shown = [_code(s) for s in r.removed_symbols[:50]]
        more = len(r.removed_symbols) - len(shown)
        tail = f" and {more} more (see the JSON report)" if more else ""
        status.append(f"Upstream removed {_plural(len(r.removed_symbols), 'symbol')}: {', '.join(shown)}{tail}.")
    else:
        status.append("No upstream symbols removed.")
    if r.conflicts and r.culprits:
        status.append(f"Culprits: {_text(r.culprits)}.")
    blocks.append(" ".join(status))
    if r.fences:
        items = [
            f"- {_code(_path(r.out, file) + ':' + str(line))}: {_text(message)}" for file, line, message in r.fences
        ]
        blocks.append("**Omni-new fence problems** (unbalanced or misplaced fences):\n\n" + "\n".join(items))

    entries = r.conflicts + r.flags
    if entries:
        counts = _tally(entries, attrgetter("patch"))
        statuses = dict(r.patches)
        order = [n for n, _s in r.patches if n in counts] + [n for n in counts if n not in statuses]
        rows = ["| patch | status | conflicts | flags |", "|---|---|--:|--:|"]
        for name in order:
            c, f = counts[name]
            rows.append(f"| {_cell(_code(name) or '(unknown)')} | {_cell(_text(statuses.get(name, '')))} | {c} | {f} |")
        blocks.append("\n".join(rows))

        by_kind = _tally(entries, attrgetter("kind"))
        known = [k for k in KIND_ORDER if k in by_kind]
        rows = ["| kind | conflicts | flags |", "|---|--:|--:|"]
        for kind in known + sorted(k for k in by_kind if k not in KIND_ORDER):
            c, f = by_kind[kind]
            rows.append(f"| {_cell(_code(kind))} | {c} | {f} |")
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks)


def _size(text: str) -> int:
    return len(text.encode())


def _assemble(head: str, sections: Sequence[str], kept: int, n_conflicts: int, limit: int) -> list[str]:
    """The body's parts: ``head``, then the first ``kept`` sections (conflicts, then flags) under their titles."""
    parts = [head]
    for title, what, start, end in (
        ("### Conflicts", "conflicts", 0, n_conflicts),
        ("### Review flags", "review flags", n_conflicts, len(sections)),
    ):
        if end > start:
            parts += [title, *sections[start : min(kept, end)]]
            if kept < end:
                omitted = f"{end - max(kept, start)} of {end - start} {what} omitted"
                parts.append(f"_{omitted} to stay under GitHub's {limit:,}-character limit; see the JSON report._")
    return parts


def markdown(report: dict[str, object], *, upstream_url: str = UPSTREAM_URL, limit: int = GITHUB_BODY_LIMIT) -> str:
    """A GitHub pull-request body for a refresh report.

    Report (format 2)::

        {"format": 2,
         "upstream": {"base": LABEL, "target": LABEL, "base_commit": SHA, "target_commit": SHA,
                      "culprits": "between which commits the culprits were searched, or why none were"},
         "downstream": {"name": "vllm-omni", "release": "0.30.0"},
         "out": "npu_worker",
         "patches": [{"name": PATCH, "status": "modified|unchanged|conflict|empty"}],
         "conflicts": [ENTRY], "flags": [ENTRY], "removed_symbols": ["file: Class.method"],
         "blocks": {"before": N, "after": N}, "finished": BOOL, "stopped_at": PATCH | null}
        ENTRY = {"patch", "file" (relative to out), "line" (1-based), "symbol", "kind", "message",
                 "anchor": {"index", "line", "text"} | null,
                 "culprits": [{"commit", "subject", "pr", "date"}],
                 "sides": {"base", "upstream", "patch"}, "resolution" (flags), "reused",
                 "explanation" (conflicts): {"upstream": what upstream changed, "block": the omni block,
                                             "suggestion": {"side", "reason", "text"} | null}}

    Layout: title, status paragraph, a table of the patches with conflicts or flags, a table by
    kind, then ``### Conflicts`` and ``### Review flags`` with one ``<details>`` section each.
    Over ``limit`` (counted in UTF-8 bytes, so never over GitHub's character count) the sides of
    the last entries are cut to an excerpt, then left out, each with a note, and at last whole
    sections are dropped from the end with a line saying how many.
    """
    r, url = _read(report), upstream_url.rstrip("/")
    entries = r.conflicts + r.flags
    head = _head(r, url)
    sections = [_section(r, url, e, 0) for e in entries]
    sizes = [_size(s) for s in sections]
    kept = len(entries)

    def total() -> int:
        """Size of the body as it stands: sections measured once each, the rest (empty placeholders) here."""
        parts = _assemble(head, [""] * len(entries), kept, len(r.conflicts), limit)
        return sum(sizes[:kept]) + sum(_size(p) for p in parts) + 2 * (len(parts) - 1) + 1  # + final newline

    for level in (1, 2):  # from the last entry up: first cut its sides to an excerpt, then leave them out
        for i in reversed(range(len(entries))):
            if total() <= limit:
                break
            sections[i] = _section(r, url, entries[i], level)
            sizes[i] = _size(sections[i])
    while kept and total() > limit:
        kept -= 1
    parts = _assemble(head, sections, kept, len(r.conflicts), limit)
    text = "\n\n".join(parts) + "\n"
    if _size(text) > limit:  # the head alone is too long: cut it on a character boundary
        room = limit - _size("\n\n" + TRUNCATED_NOTE + "\n")
        text = text.encode()[: max(room, 0)].decode(errors="ignore") + "\n\n" + TRUNCATED_NOTE + "\n"
    return text
