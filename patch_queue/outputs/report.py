"""Render a refresh report (the JSON of ``pq refresh --report``, format 2) for people.

Three pure functions, no I/O:

- :func:`markdown`: the report in Markdown (status paragraph, summary tables, one collapsed
  section per conflict and per review flag, the flags grouped by kind): all of it (the job summary,
  the artifact), or a pull-request body within a budget well under GitHub's 65,536-character limit;
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
GITHUB_BODY_LIMIT = 65_536  # characters of a pull-request or comment body (HTTP 422 over it)
BODY_BUDGET = 60_000  # what a body is kept to: well under the limit, as Renovate keeps to about 60,000
JOB_SUMMARY_LIMIT = 1_048_576  # bytes of a step's job summary
JOB_SUMMARY_BUDGET = 1_000_000
FULL_REPORT = "the JSON report (`pq refresh --report`)"  # where everything is, when a body is shortened
TRUNCATED_NOTE = "… (truncated: see the full report)"
MESSAGE_CHARS = 200  # what a conflict's message keeps in its one-line form
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


@dataclass(frozen=True)
class _Told:
    """A conflict's explanation (what upstream changed, the omni block, a suggestion), worked out once."""

    upstream: str = ""
    omni: str = ""
    tip: explain.Suggestion | None = None


def _tell(entry: Conflict) -> _Told:
    if not entry.conflict:
        return _Told()
    return _Told(explain.upstream_change(entry), explain.omni_block(entry), explain.suggest(entry))


def _section(r: _Report, url: str, entry: Conflict, level: int, told: _Told) -> str:
    """One ``<details>`` section; ``level`` 0 full, 1 sides cut to an excerpt, 2 sides left out.

    ``url`` is the upstream repository's, without a trailing slash; ``told`` is :func:`_tell` of ``entry``."""
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
        blocks.append(f"**Upstream change:** {_text(told.upstream)}")
        if entry.anchor is None:
            blocks.append(f"**Omni:** {_text(told.omni)}")
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
    tip = told.tip
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
            f"- {_code(_path(r.out, file) + ':' + str(line))}: {_text(message)}"
            for file, line, message in r.fences[:50]
        ]
        if len(r.fences) > 50:
            items.append(f"- and {len(r.fences) - 50} more (see the JSON report)")
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


# ---------------------------------------------------------------------------------------------
# the body: everything, or what fits in a budget


# what an entry shows, from everything to nothing; flags go from SIDES to NO_CODE and then out
SIDES, EXCERPT, NO_CODE, LINE, NAME, LEFT_OUT = range(6)


def github_chars(text: str) -> int:
    """At least the characters GitHub counts in a body, whichever way it counts them.

    Code points (what the API's Ruby counts), UTF-16 code units (what a browser counts: an emoji is
    two) and line ends as CRLF (what a form posts): UTF-16 units plus one per ``\\n``.
    """
    return len(text.encode("utf-16-le")) // 2 + text.count("\n")


def utf8_bytes(text: str) -> int:
    """Bytes of ``text`` in UTF-8: what the job summary's 1 MiB limit counts."""
    return len(text.encode())


def _line(r: _Report, entry: Conflict, message: bool) -> str:
    """One list item naming an entry: ``path:line — kind — symbol``, and with ``message`` its message."""
    where = _path(r.out, entry.file) or "(no file)"
    if entry.line is not None:
        where += f":{entry.line}"
    bits = [_code(where), _text(entry.kind)] + ([_code(entry.symbol)] if entry.symbol else [])
    text = "- " + " — ".join(bits)
    said = _one_line(entry.message) if message else ""
    if len(said) > MESSAGE_CHARS:
        said = said[: MESSAGE_CHARS - 1].rstrip() + "…"
    return text + (f": {_text(said)}" if said else "")


def _render(r: _Report, url: str, entry: Conflict, level: int, told: _Told) -> str:
    if level <= NO_CODE:
        return _section(r, url, entry, level, told)
    return _line(r, entry, message=level == LINE)


def _kinds(flags: Sequence[Conflict]) -> list[tuple[str, list[Conflict]]]:
    """The flags grouped by kind, the kinds in table order, each kind's flags in report order."""
    groups: dict[str, list[Conflict]] = {}
    for f in flags:
        groups.setdefault(f.kind, []).append(f)
    known = [k for k in KIND_ORDER if k in groups]
    return [(k, groups[k]) for k in known + sorted(k for k in groups if k not in KIND_ORDER)]


def _shortened(counts: Sequence[int], flags_out: int, limit: int, unit: str, full_report: str) -> str:
    """The closing note of a body that does not hold everything: what was shortened, where the rest is.

    ``counts[level]``: the entries at each level; ``flags_out``: the review flags left out."""
    said = [
        _plural(counts[EXCERPT], "entry", "entries") + " with their code cut to an excerpt" if counts[EXCERPT] else "",
        _plural(counts[NO_CODE], "entry", "entries") + " without their code" if counts[NO_CODE] else "",
        _plural(counts[LINE] + counts[NAME], "conflict") + " in one line" if counts[LINE] + counts[NAME] else "",
        _plural(flags_out, "review flag") + " left out" if flags_out else "",
        _plural(counts[LEFT_OUT] - flags_out, "conflict") + " left out" if counts[LEFT_OUT] - flags_out else "",
    ]
    return (
        f"_This report is shortened to fit in {limit:,} {unit}: {', '.join(s for s in said if s)}. "
        f"Everything is in {full_report}._"
    )


def markdown(
    report: dict[str, object],
    *,
    upstream_url: str = UPSTREAM_URL,
    limit: int | None = BODY_BUDGET,
    in_bytes: bool = False,
    full_report: str = FULL_REPORT,
) -> str:
    """The refresh report in Markdown: a pull-request body within ``limit``, or all of it (``limit=None``).

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
    kind, then ``### Conflicts`` with one ``<details>`` section each and ``### Review flags`` with
    one ``#### kind`` group each (``<details>`` sections in report order).

    ``limit`` counts :func:`github_chars` (or :func:`utf8_bytes` with ``in_bytes``).  What does
    not fit gives way in this order, each step from the last entry up: the flags' code is cut to an
    excerpt, then left out; the same for the conflicts (their explanation stays); the flags are
    left out, from the kind with the most shown; the conflicts shrink to one line with their
    message, then to their name; at last conflicts are left out from the end.  Each group says
    how many it does not show and a closing note counts every step and points to
    ``full_report`` (a Markdown phrase or link).  Nothing is ever cut inside a code block or a
    ``<details>`` section: whole sections are replaced.  The default budget keeps well under
    GitHub's body limit, as Renovate does.
    """
    r, url = _read(report), upstream_url.rstrip("/")
    size = utf8_bytes if in_bytes else github_chars
    unit = "bytes" if in_bytes else "characters"
    head = _head(r, url)
    groups = _kinds(r.flags)
    n = len(r.conflicts)
    entries = [*r.conflicts, *(f for _kind, fs in groups for f in fs)]
    starts = [n + sum(len(fs) for _k, fs in groups[:g]) for g in range(len(groups))]
    levels = [SIDES] * len(entries)
    told = [_tell(e) for e in entries]
    texts = [_section(r, url, e, SIDES, t) for e, t in zip(entries, told, strict=True)]
    sep = size("\n\n")
    sizes = [size(t) + sep for t in texts]  # each entry is a part of the body, with its separator
    shown = sum(sizes)
    counts = [len(entries)] + [0] * LEFT_OUT  # entries at each level
    group = [-1] * n + [g for g, (_k, fs) in enumerate(groups) for _f in fs]
    left = [0] * (len(groups) + 1)  # left out of each kind of flags, and (last) of the conflicts

    def parts(with_entries: bool) -> list[str]:
        """The body's parts; without the entries (their sizes are kept in ``shown``) when not ``with_entries``."""

        def entries_in(first: int, last: int) -> list[str]:
            if not with_entries:
                return []
            return [texts[i] for i in range(first, last) if levels[i] != LEFT_OUT]

        out = [head]
        if n:
            out += ["### Conflicts", *entries_in(0, n)]
            if left[-1]:
                out.append(f"_{left[-1]} of {_plural(n, 'conflict')} not shown: see {full_report}._")
        if groups:
            out.append("### Review flags")
        for g, ((kind, fs), start) in enumerate(zip(groups, starts, strict=True)):
            out += [f"#### {_code(kind)}: {_plural(len(fs), 'flag')}", *entries_in(start, start + len(fs))]
            if left[g]:
                out.append(f"_{left[g]} of these {len(fs)} not shown._")
        if counts[SIDES] < len(entries):
            out.append(_shortened(counts, sum(left[:-1]), limit or 0, unit, full_report))
        return out

    def total() -> int:
        fixed = parts(with_entries=False)
        return shown + sum(size(p) for p in fixed) + sep * (len(fixed) - 1) + size("\n")

    def steps() -> Iterator[tuple[int, int]]:
        for first, last in ((n, len(entries)), (0, n)):  # flags, then conflicts: code to an excerpt, then out
            for level in (EXCERPT, NO_CODE):
                for i in reversed(range(first, last)):
                    yield i, level
        kept = [len(fs) for _k, fs in groups]
        while any(kept):  # the flags out, from the kind with the most shown, each from its end
            g = max(range(len(groups)), key=lambda g: (kept[g], g))
            kept[g] -= 1
            yield starts[g] + kept[g], LEFT_OUT
        for level in (LINE, NAME, LEFT_OUT):
            for i in reversed(range(n)):
                yield i, level

    if limit is not None:
        for i, level in steps():
            if total() <= limit:
                break
            counts[levels[i]] -= 1
            counts[level] += 1
            if level == LEFT_OUT:
                left[group[i]] += 1
            levels[i] = level
            texts[i] = "" if level == LEFT_OUT else _render(r, url, entries[i], level, told[i])
            new = 0 if level == LEFT_OUT else size(texts[i]) + sep
            shown += new - sizes[i]
            sizes[i] = new
    text = "\n\n".join(parts(with_entries=True)) + "\n"
    if limit is not None and size(text) > limit:  # the head alone is too long: whole lines of it
        note = f"\n\n{TRUNCATED_NOTE}\n"
        room = limit - size(note)
        lines = text.splitlines(keepends=True)
        kept_lines: list[str] = []
        for line in lines:
            room -= size(line)
            if room < 0:
                break
            kept_lines.append(line)
        text = "".join(kept_lines).rstrip("\n") + note
    return text
