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
The output depends on the report alone: same report, same text.  Reading the report and its
Markdown parts are :mod:`patch_queue.outputs.report_parts`; :func:`markdown` fits them in a budget.
"""

# no ``from __future__ import annotations``: it would bind the name of :func:`annotations` below
from collections.abc import Iterator, Sequence

from patch_queue.merge.conflict import Conflict
from patch_queue.outputs.report_parts import (
    EXCERPT,
    LEFT_OUT,
    LINE,
    NAME,
    NO_CODE,
    SHA,
    SIDES,
    TRUNCATED_NOTE,
    code,
    head,
    is_reused,
    kinds,
    one_line,
    path,
    plural,
    read,
    render,
    tell,
)
from patch_queue.spec import QueueSpec

GITHUB_BODY_LIMIT = 65_536  # characters of a pull-request or comment body (HTTP 422 over it)
BODY_BUDGET = 60_000  # what a body is kept to: well under the limit, as Renovate keeps to about 60,000
JOB_SUMMARY_LIMIT = 1_048_576  # bytes of a step's job summary
JOB_SUMMARY_BUDGET = 1_000_000
FULL_REPORT = "the JSON report (`pq refresh --report`)"  # where everything is, when a body is shortened


# ---------------------------------------------------------------------------------------------
# terminal


def summary_line(report: dict[str, object], queue: QueueSpec) -> str:
    """One line for the terminal, e.g. ``3 conflicts, 12 review flags (2 reused), 24/24 omni blocks kept`` (``queue``:
    the queue refreshed)."""
    r = read(report, queue)
    parts = [plural(len(r.conflicts), "conflict") if r.conflicts else "no conflicts"]
    flags = plural(len(r.flags), "review flag")
    reused = sum(1 for f in r.flags if is_reused(f))
    parts.append(f"{flags} ({reused} reused)" if reused else flags)
    if r.blocks_before is not None or r.blocks_after is not None:
        parts.append(f"{r.blocks_after or 0}/{r.blocks_before or 0} omni blocks kept")
    if r.removed_symbols:
        parts.append(plural(len(r.removed_symbols), "upstream symbol") + " removed")
    if not r.finished:
        parts.append(f"stopped at {one_line(r.stopped_at or '?')}")
    if r.check_errors:
        parts.append(plural(len(r.check_errors), "pq check error") + (" (accepted)" if r.accepted else ""))
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
    return commit[:7] if SHA.fullmatch(commit) else commit


def _annotation(command: str, out: str, entry: Conflict) -> str:
    props: list[tuple[str, str]] = []
    if entry.file:
        props.append(("file", path(out, entry.file)))
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


def annotations(report: dict[str, object], queue: QueueSpec) -> list[str]:
    """GitHub Actions workflow commands: one ``::error`` per conflict, then one per error of `pq check`, then one
    ``::warning`` per flag.

    ``::error file=<out>/<file>,line=<line>,title=<kind>::<message> (<symbol>; culprits: abc1234 #1234)``
    (``<out>``: the report's output folder, else that of ``queue``, the queue refreshed)
    """
    r = read(report, queue)
    checked = [
        _annotation("error", r.out, Conflict(f"pq check: {rule}", message, file=file, line=line or None))
        for file, line, rule, message in r.check_errors
    ]
    conflicts = [_annotation("error", r.out, e) for e in r.conflicts]
    return conflicts + checked + [_annotation("warning", r.out, e) for e in r.flags]


# ---------------------------------------------------------------------------------------------
# the body: everything, or what fits in a budget


def github_chars(text: str) -> int:
    """At least the characters GitHub counts in a body, whichever way it counts them.

    Code points (what the API's Ruby counts), UTF-16 code units (what a browser counts: an emoji is
    two) and line ends as CRLF (what a form posts): UTF-16 units plus one per ``\\n``.
    """
    return len(text.encode("utf-16-le")) // 2 + text.count("\n")


def utf8_bytes(text: str) -> int:
    """Bytes of ``text`` in UTF-8: what the job summary's 1 MiB limit counts."""
    return len(text.encode())


def _shortened(counts: Sequence[int], flags_out: int, limit: int, unit: str, full_report: str) -> str:
    """The closing note of a body that does not hold everything: what was shortened, where the rest is.

    ``counts[level]``: the entries at each level; ``flags_out``: the review flags left out."""
    said = [
        plural(counts[EXCERPT], "entry", "entries") + " with their code cut to an excerpt" if counts[EXCERPT] else "",
        plural(counts[NO_CODE], "entry", "entries") + " without their code" if counts[NO_CODE] else "",
        plural(counts[LINE] + counts[NAME], "conflict") + " in one line" if counts[LINE] + counts[NAME] else "",
        plural(flags_out, "review flag") + " left out" if flags_out else "",
        plural(counts[LEFT_OUT] - flags_out, "conflict") + " left out" if counts[LEFT_OUT] - flags_out else "",
    ]
    return (
        f"_This report is shortened to fit in {limit:,} {unit}: {', '.join(s for s in said if s)}. "
        f"Everything is in {full_report}._"
    )


def markdown(
    report: dict[str, object],
    *,
    upstream_url: str | None = None,
    queue: QueueSpec,
    limit: int | None = BODY_BUDGET,
    in_bytes: bool = False,
    full_report: str = FULL_REPORT,
) -> str:
    """The refresh report in Markdown: a pull-request body within ``limit``, or all of it (``limit=None``); of a
    refresh of the queue ``queue``, its commits linked in ``upstream_url`` (None: the
    queue's upstream repository).

    Report (format 2)::

        {"format": 2,
         "upstream": {"base": LABEL, "target": LABEL, "base_commit": SHA, "target_commit": SHA,
                      "culprits": "between which commits the culprits were searched, or why none were"},
         "downstream": {"name": "vllm-omni", "release": "0.30.0"},
         "out": "npu_worker",
         "patches": [{"name": PATCH, "status": "modified|unchanged|conflict|empty"}],
         "conflicts": [ENTRY], "flags": [ENTRY], "removed_symbols": ["file: Class.method"],
         "blocks": {"before": N, "after": N}, "finished": BOOL, "stopped_at": PATCH | null,
         "check": the JSON of `pq check --json` on a result without conflicts | null,
         "pending": BOOL (the refresh waits for `pq continue`: conflicts, or errors of `pq check`),
         "accepted_errors": ["file:line: error: [rule] message"] (finished over them: --accept-errors),
         "merged": "vllm-omni==X" (only in the report of `pq merge`: the release it takes in)}
        ENTRY = {"patch", "file" (relative to out), "line" (1-based), "symbol", "kind", "message",
                 "anchor": {"index", "line", "text"} | null,
                 "culprits": [{"commit", "subject", "pr", "date"}],
                 "sides": {"base", "upstream", "patch"}, "resolution" (flags), "reused", "key",
                 "links": ["name:x" | "call:c"] (regions of the same patch and file sharing one go together),
                 "explanation" (conflicts): {"upstream": what upstream changed, "block": the omni block,
                                             "suggestion": {"side", "reason", "text", "writes"} | null (what
                                                 `pq status` shows: a rule's, the resolution of another copy
                                                 carried, moved code; "writes": what `pq resolve --suggested`
                                                 says it wrote),
                                             "moved": where upstream moved the lines it deleted, and the
                                                      patch side's copy of them (`moved:`) | null}}

    Layout: title, status paragraph (with the errors of `pq check`, listed, when there are any), a table of the
    patches with conflicts or flags, a table by
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
    r, url = read(report, queue), (queue.upstream_url if upstream_url is None else upstream_url).rstrip("/")
    size = utf8_bytes if in_bytes else github_chars
    unit = "bytes" if in_bytes else "characters"
    top = head(r, url)
    groups = kinds(r.flags)
    n = len(r.conflicts)
    entries = [*r.conflicts, *(f for _kind, fs in groups for f in fs)]
    starts = [n + sum(len(fs) for _k, fs in groups[:g]) for g in range(len(groups))]
    levels = [SIDES] * len(entries)
    told = [tell(e, r) for e in entries]
    texts = [render(r, url, e, SIDES, t) for e, t in zip(entries, told, strict=True)]
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

        out = [top]
        if n:
            out += ["### Conflicts", *entries_in(0, n)]
            if left[-1]:
                out.append(f"_{left[-1]} of {plural(n, 'conflict')} not shown: see {full_report}._")
        if groups:
            out.append("### Review flags")
        for g, ((kind, fs), start) in enumerate(zip(groups, starts, strict=True)):
            out += [f"#### {code(kind)}: {plural(len(fs), 'flag')}", *entries_in(start, start + len(fs))]
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
            texts[i] = "" if level == LEFT_OUT else render(r, url, entries[i], level, told[i])
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
