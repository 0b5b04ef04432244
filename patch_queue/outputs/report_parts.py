"""A refresh report read into a typed value, and its Markdown parts: the head (status paragraph and tables), and
one ``<details>`` section or one list line per conflict and flag. :mod:`patch_queue.outputs.report` puts them
together within a budget.

Reading tolerates missing keys (empty defaults, so a format 1 report renders too) and raises ``ValueError``
naming a key of the wrong type.
"""

from __future__ import annotations

import functools
import html
import json
import re
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from operator import attrgetter

from patch_queue import presets
from patch_queue.merge import explain
from patch_queue.merge.conflict import Conflict, ConflictKind, boolean, integer, listing, mapping, string, wrong
from patch_queue.sources import cache
from patch_queue.spec import QueueSpec

TRUNCATED_NOTE = "… (truncated: see the full report)"
MESSAGE_CHARS = 200  # what a conflict's message keeps in its one-line form
EXCERPT_LINES = 20  # what a truncated side keeps
EXCERPT_CHARS = 1_500
SUPPORTED_FORMATS = (1, 2)

# table order of the kinds: conflicts first, then flags, as the schema lists them; unknown kinds sort after
KIND_ORDER = (
    ConflictKind.BOTH_CHANGED,
    ConflictKind.UPSTREAM_CHANGED_REPLACED,
    ConflictKind.ANCHOR_LOST,
    ConflictKind.BOTH_ADDED_SAME,
    ConflictKind.NAME_LINKED,
    ConflictKind.BOTH_INSERTED,
    ConflictKind.ALREADY_UPSTREAM,
    ConflictKind.SYMBOL_REMOVED,
    ConflictKind.DELETED_FILE,
    ConflictKind.KEPT_REPLACEMENT,
    ConflictKind.BLOCK_MOVED,
    ConflictKind.NEAR_BLOCK,
    ConflictKind.REUSED,
    ConflictKind.MERGED_WORDS,
    ConflictKind.MERGED_TOKENS,
    ConflictKind.IMPORT_ADDED,
    ConflictKind.IMPORT_STALE,
    ConflictKind.IMPORT_REMOVED,
    ConflictKind.API_REPLACED,
    ConflictKind.RELOCATED,
    ConflictKind.GPU_SYNCED,
    ConflictKind.GPU_PROPOSED,
    ConflictKind.GPU_UNPLACED,
)

# the review flags a maintainer must read: decisions pq took on its own that change what the code does (the
# terminal lists them after the conflicts and counts the rest); a `both-inserted` or `block-moved` counts as one
# only when it places code (both sides' code, in an order pq chose; code moved by its anchor), not blank lines
TO_READ = frozenset(
    {
        ConflictKind.KEPT_REPLACEMENT,
        ConflictKind.ALREADY_UPSTREAM,
        ConflictKind.MERGED_WORDS,
        ConflictKind.MERGED_TOKENS,
        ConflictKind.API_REPLACED,
        ConflictKind.IMPORT_STALE,
        ConflictKind.IMPORT_REMOVED,
        ConflictKind.BOTH_INSERTED,
        ConflictKind.BLOCK_MOVED,
    }
)


def to_read(flag: Conflict) -> bool:
    """Whether ``flag`` is one a maintainer must read (:data:`TO_READ`)."""
    if flag.kind == ConflictKind.BOTH_INSERTED:
        return _has_code(flag.ours) and _has_code(flag.theirs)
    if flag.kind == ConflictKind.BLOCK_MOVED:
        return _has_code(flag.resolution)
    return flag.kind in TO_READ


def _has_code(text: str | None) -> bool:
    """Whether ``text`` holds a line that is neither blank nor a comment."""
    return any(line.strip() and not line.lstrip().startswith("#") for line in (text or "").splitlines())


SHA = re.compile(r"[0-9a-fA-F]{7,64}")
_TICKS = re.compile(r"`+")

# what an entry shows, from everything to nothing; flags go from SIDES to NO_CODE and then out
SIDES, EXCERPT, NO_CODE, LINE, NAME, LEFT_OUT = range(6)

# ---------------------------------------------------------------------------------------------
# reading the report (typed, tolerant of missing keys, strict about wrong types)


@dataclass(frozen=True)
class Report:
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
    check_errors: tuple[tuple[str, int, str, str], ...] = ()  # (file, line, rule, message) of pq check's errors
    accepted: bool = False  # the refresh was finished over them (--accept-errors)
    merged: str = ""  # a merge (pq merge): the release it takes in ("name==version")
    imported: str = ""  # what pq check --import imported ("" when it did not run)
    import_warnings: tuple[tuple[str, int, str, str], ...] = ()  # its warnings: (file, line, rule, message)
    upstream_name: str = "the upstream"  # the queue's upstream distribution (not in the JSON: the queue's)
    # what is said of a conflict (file, line) whose deleted lines upstream moved into a helper (`explanation.moved`)
    moved: tuple[tuple[str, int, str], ...] = ()
    # the suggestion of a conflict (file, line) as `pq status` showed it when the report was written
    # (`explanation.suggestion`, null: none); a conflict whose entry has no such key (an older report) is told the
    # suggestion of pq's rules
    tips: tuple[tuple[str, int, explain.Suggestion | None], ...] = ()
    runners: str = "NPU runners"  # the heading's name of the queue's runners (not in the JSON: the queue's)


def _items(report: Mapping[str, object], key: str) -> Iterator[tuple[str, object]]:
    """The elements of the list ``report[key]``, each with its place for error messages."""
    for i, raw in enumerate(listing(report, key, "")):
        yield f"{key}[{i}]", raw


def _objects(report: Mapping[str, object], key: str) -> Iterator[tuple[str, Mapping[str, object]]]:
    return ((where, mapping(raw, where)) for where, raw in _items(report, key))


def read(report: Mapping[str, object], queue: QueueSpec) -> Report:
    """The report ``report`` (JSON) of a refresh of the queue ``queue``, which names what
    the JSON leaves out: the upstream's name, and the downstream and output folder of a report that has none."""
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
    return Report(
        base=string(upstream, "base", "upstream"),
        target=string(upstream, "target", "upstream"),
        base_commit=string(upstream, "base_commit", "upstream"),
        target_commit=string(upstream, "target_commit", "upstream"),
        downstream=string(downstream, "name", "downstream") or queue.downstream_dist,
        release=string(downstream, "release", "downstream"),
        out=string(report, "out", "") or queue.out,
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
        check_errors=_check_errors(report),
        imported=string(mapping(report.get("check"), "check"), "imported", "check") if report.get("check") else "",
        import_warnings=_check_errors(report, severity="warning", rules=IMPORT_WARNINGS),
        accepted=bool(listing(report, "accepted_errors", "")),
        merged=string(report, "merged", ""),
        upstream_name=queue.upstream_dist,
        moved=tuple(_moved(report)),
        tips=tuple(_tips(report)),
        runners=_heading_runners(queue),
    )


def _heading_runners(queue: QueueSpec) -> str:
    """The runners of ``queue`` as the heading names them: "NPU runners", "GPU runners", "Runners of <package>"."""
    words = presets.runners(queue).removeprefix("the ")
    return words[:1].upper() + words[1:]


def _moved(report: Mapping[str, object]) -> Iterator[tuple[str, int, str]]:
    """(file, line, what is said) of each conflict whose explanation says where upstream moved its deleted lines."""
    for where, e in _objects(report, "conflicts"):
        said = e.get("explanation")
        note = said.get("moved") if isinstance(said, Mapping) else None
        if isinstance(note, str) and note:
            yield string(e, "file", where), integer(e, "line", where) or 0, note


def _tips(report: Mapping[str, object]) -> Iterator[tuple[str, int, explain.Suggestion | None]]:
    """(file, line, suggestion or None) of each conflict whose explanation has a ``suggestion`` key."""
    for where, e in _objects(report, "conflicts"):
        said = e.get("explanation")
        if not isinstance(said, Mapping) or "suggestion" not in said:
            continue
        tip, at = said["suggestion"], f"{where}.explanation.suggestion"
        if tip is not None:
            tip = mapping(tip, at)
            side, text, reason = (string(tip, k, at) for k in ("side", "text", "reason"))
            tip = explain.Suggestion(side, text, reason, string(tip, "writes", at))
        yield string(e, "file", where), integer(e, "line", where) or 0, tip


# the warnings of pq check --import the Markdown report lists: the import test did not run, or the environment failed
IMPORT_WARNINGS = ("import-test-skipped", "import-failed-control", "import-control-failed")


def _check_errors(
    report: Mapping[str, object], *, severity: str = "error", rules: tuple[str, ...] = ()
) -> tuple[tuple[str, int, str, str], ...]:
    """The errors (or findings of ``severity`` and ``rules``) of the report's ``check`` (pq check on a result without
    conflicts), in its order."""
    if report.get("check") is None:
        return ()
    check = mapping(report.get("check"), "check")
    out = []
    for i, raw in enumerate(listing(check, "findings", "check")):
        where = f"check.findings[{i}]"
        f = mapping(raw, where)
        if string(f, "severity", where) == severity and (not rules or string(f, "rule", where) in rules):
            line = integer(f, "line", where) or 0
            out.append((string(f, "file", where), line, string(f, "rule", where), string(f, "message", where)))
    return tuple(out)


def is_reused(entry: Conflict) -> bool:
    return entry.reused or entry.kind == ConflictKind.REUSED


def _where(r: Report, entry: Conflict) -> str:
    """``path:line`` of an entry (the path relative to the repository root)."""
    where = path(r.out, entry.file) or "(no file)"
    return where if entry.line is None else f"{where}:{entry.line}"


def path(out: str, file: str) -> str:
    """The entry's file relative to the repository root."""
    out = out.strip("/")
    return f"{out}/{file}" if file and out not in ("", ".") else file


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def one_line(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------
# Markdown pieces


def _longest_ticks(text: str) -> int:
    return max((len(m) for m in _TICKS.findall(text)), default=0)


def _fence(text: str, lang: str) -> str:
    """A fenced code block whose fence is longer than any backtick run in ``text``."""
    fence = "`" * max(3, _longest_ticks(text) + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


def code(text: str) -> str:
    """An inline code span holding ``text`` as it is (longer backtick runs, padded where needed)."""
    text = one_line(text) if "\n" in text or "\r" in text else text
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
    return f"[{commit[:7]}]({url}/commit/{commit})" if SHA.fullmatch(commit) else code(commit)


def _excerpt(text: str) -> tuple[str, bool]:
    cut = "".join(text.splitlines(keepends=True)[:EXCERPT_LINES])[:EXCERPT_CHARS]
    return cut, cut != text


@dataclass(frozen=True)
class Told:
    """A conflict's explanation (what upstream changed, the omni block, a suggestion), worked out once."""

    upstream: str = ""
    omni: str = ""
    tip: explain.Suggestion | None = None


def tell(entry: Conflict, r: Report | None = None) -> Told:
    """``entry``'s explanation; its suggestion the one report ``r`` holds for it (what `pq status` showed), else pq's
    rules'."""
    if not entry.conflict:
        return Told()
    held = [tip for f, n, tip in (r.tips if r is not None else ()) if (f, n) == (entry.file, entry.line or 0)]
    tip = held[0] if held else explain.suggest(entry)
    return Told(upstream_change(entry), explain.omni_block(entry), tip)


def upstream_change(conflict: Conflict) -> str:
    """:func:`explain.upstream_change`, kept in the download cache by the two sides it reads (the old upstream and
    the new), the code that reads them and Python's version (``ast.unparse`` writes the phrases): it parses and
    unparses both sides statement by statement, ~2 ms a region, and a refresh of the same upgrade, its report and
    `pq status` tell the same regions again."""
    sides = [part for text in (conflict.base, conflict.ours) for part in (("-", "") if text is None else ("+", text))]
    key = cache.derived_key(_explain_code(), *sides)
    kept = cache.derived_text("explanation", key)
    if kept is not None:
        return kept
    said = explain.upstream_change(conflict)
    cache.derived_put("explanation", key, said.encode("utf-8"))
    return said


def forwarded(conflict: Conflict, upstream: str) -> explain.Suggestion | None:
    """:func:`explain.forwarded`, kept in the download cache by the region's three sides, the ``upstream`` module,
    the code and Python's version: it parses the whole upstream module (~0.1 s for vllm-ascend's
    ``model_runner_v1.py``), which `pq status` would do on every run over a pending refresh."""
    sides = json.dumps([conflict.base, conflict.ours, conflict.theirs])
    key = cache.derived_key(_explain_code(), sides, upstream)
    hit = cache.derived_json("forwarded", key, explain.Suggestion | None)
    if hit is not None:
        tip: explain.Suggestion | None = hit[0]
        return tip
    tip = explain.forwarded(conflict, upstream)
    cache.derived_put("forwarded", key, json.dumps(None if tip is None else asdict(tip)).encode("utf-8"))
    return tip


@functools.lru_cache(maxsize=1)
def _explain_code() -> str:
    """What :mod:`~patch_queue.merge.explain` says depends on besides its inputs: the modules it runs on and Python."""
    modules = ("explain", "statements", "symbols", "conflict", "folded", "anchors")
    return sys.version + cache.code_stamp(*(f"merge/{m}.py" for m in modules), "git/diff.py", "errors.py")


def _section(r: Report, url: str, entry: Conflict, level: int, told: Told) -> str:
    """One ``<details>`` section; ``level`` 0 full, 1 sides cut to an excerpt, 2 sides left out.

    ``url`` is the upstream repository's, without a trailing slash; ``told`` is :func:`tell` of ``entry``."""
    where = _where(r, entry)
    summary = [f"<code>{html.escape(where)}</code>", html.escape(entry.kind)]
    if entry.symbol:
        summary.append(f"<code>{html.escape(entry.symbol)}</code>")
    if entry.reused and entry.kind != ConflictKind.REUSED:
        summary.append("reused")
    blocks = [f"<details><summary>{' — '.join(summary)}</summary>"]
    facts = [f"**Patch:** {code(entry.patch)}" if entry.patch else "**Patch:** (unknown)"]
    if entry.reused:
        facts.append("a recorded maintainer resolution was applied")
    blocks.append(" · ".join(facts))
    if entry.message:
        blocks.append(_text(entry.message))
    if entry.conflict:  # what upstream changed, the omni edit, a suggestion (never applied by pq)
        blocks.append(f"**{'The series' if r.merged else 'Upstream'} change:** {_text(told.upstream)}")
        moved = next((said for f, n, said in r.moved if (f, n) == (entry.file, entry.line or 0)), "")
        if moved:
            blocks.append(f"**Moved:** {_text(moved)}")
        if entry.anchor is None:
            blocks.append(f"**Omni:** {_text(told.omni)}")
    if entry.anchor is not None:
        a = entry.anchor
        where_a = ", ".join(f"{label} {n}" for label, n in (("omni block", a.index), ("line", a.line)) if n is not None)
        blocks.append(f"**Anchor:** {where_a or 'omni block'}" + (f": {code(a.first)}" if a.first else ""))
    if entry.culprits:
        lines = ["**Culprits:**"]
        for c in entry.culprits:
            bits = [_commit_link(c.commit, url)] if c.commit else []
            if c.pr is not None:
                bits.append(f"[#{c.pr}]({url}/pull/{c.pr})")
            if c.subject:
                bits.append(_text(one_line(c.subject)))
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
            "base": f"old upstream{' ' + code(r.base) if r.base else ''}",
            "upstream": f"new upstream{' ' + code(r.target) if r.target else ''}",
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


def head(r: Report, url: str) -> str:
    base, target = r.base or "(unknown)", r.target or "(unknown)"
    blocks = [f"## {r.runners}: {base} → {target}"]

    def upstream_ref(label: str, commit: str) -> str:
        ref = code(label) if label else "(unknown)"
        return f"{ref} ({_commit_link(commit, url)})" if commit else ref

    who = f"{r.downstream} {r.release}".strip()
    # "NPU runners" -> "NPU model runners", "Runners of pkg" -> "model runners of pkg"
    model_runners = r.runners.replace("Runners", "runners").replace("runners", "model runners", 1)
    status = [
        f"{_text(who)}'s {_text(model_runners)} replayed from {_text(r.upstream_name)} "
        f"{upstream_ref(r.base, r.base_commit)} "
        f"onto {upstream_ref(r.target, r.target_commit)}."
    ]
    if r.merged:  # a merge: the maintainers' release taken into the series on its upstream
        taken = r.merged.replace("==", " ")
        blocks = [f"## {r.runners}: {taken} merged"]
        status = [
            f"The {_text(model_runners)} of {_text(taken)} merged into the series on "
            f"{upstream_ref(r.base, r.base_commit)}, three-way (`pq merge`): conflict regions hold the series' "
            "side first and the release's side last."
        ]
    if r.conflicts:
        status.append(
            f"**{plural(len(r.conflicts), 'conflict')} need{'s' if len(r.conflicts) == 1 else ''} resolution:** "
            f"{code(r.out + '/')} holds {code('<<<<<<<')} markers at the places listed below."
        )
    else:
        status.append(f"**Clean:** {plural(len(r.patches), 'patch', 'patches')} replayed without conflicts.")
    if not r.finished:
        stopped = code(r.stopped_at or "?")
        status.append(f"The refresh stopped at {stopped}; the patches after it are not replayed yet.")
    reused = sum(1 for f in r.flags if is_reused(f))
    if r.flags:
        flags = plural(len(r.flags), "review flag")
        reused_text = f" ({plural(reused, 'reused resolution')})" if reused else ""
        status.append(f"{flags}{reused_text}: decisions the tool took on its own, listed below for review.")
    else:
        status.append("No review flags.")
    if r.blocks_before is not None or r.blocks_after is not None:
        before, after = r.blocks_before or 0, r.blocks_after or 0
        lost = f" (**{plural(before - after, 'block')} lost**)" if after < before else ""
        status.append(f"Omni blocks: {before} before → {after} after{lost}.")
    if r.removed_symbols:
        shown = [code(s) for s in r.removed_symbols[:50]]
        more = len(r.removed_symbols) - len(shown)
        tail = f" and {more} more (see the JSON report)" if more else ""
        status.append(f"Upstream removed {plural(len(r.removed_symbols), 'symbol')}: {', '.join(shown)}{tail}.")
    else:
        status.append("No upstream symbols removed.")
    if r.conflicts and r.culprits:
        status.append(f"Culprits: {_text(r.culprits)}.")
    errors = plural(len(r.check_errors), "error")
    if r.check_errors and r.accepted:
        status.append(
            f"**Finished over {errors} of `pq check`** (`--accept-errors`, recorded in the lineage): "
            "fix them before this ships."
        )
    elif r.check_errors:
        status.append(
            f"**Not finished: `pq check` reports {errors} in the result:** fix them in {code(r.out + '/')}, then "
            f"`pq continue` (`--accept-errors` finishes over them)."
        )
    blocks.append(" ".join(status))
    if r.check_errors:
        items = []
        for file, line, rule, message in r.check_errors[:50]:
            where = path(r.out, file) + (f":{line}" if line else "") if file else r.out + "/"
            items.append(f"- {code(where)}: {code(rule)} {_text(one_line(message))}")
        if len(r.check_errors) > 50:
            items.append(f"- and {len(r.check_errors) - 50} more (see the JSON report)")
        blocks.append("**`pq check` errors:**\n\n" + "\n".join(items))
    if r.imported or r.import_warnings:
        said = (
            f"The result imports against the real releases (`pq check --import`): {_text(r.imported)}."
            if r.imported
            else "The import test (`pq check --import`) did not run."
        )
        items = [
            f"- {code(path(r.out, file) + (f':{line}' if line else '') if file else r.out + '/')}: {code(rule)} "
            f"{_text(one_line(message))}"
            for file, line, rule, message in r.import_warnings[:20]
        ]
        blocks.append(said + ("\n\n" + "\n".join(items) if items else ""))
    if r.fences:
        items = [
            f"- {code(path(r.out, file) + ':' + str(line))}: {_text(message)}" for file, line, message in r.fences[:50]
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
            rows.append(f"| {_cell(code(name) or '(unknown)')} | {_cell(_text(statuses.get(name, '')))} | {c} | {f} |")
        blocks.append("\n".join(rows))

        by_kind = _tally(entries, attrgetter("kind"))
        rows = ["| kind | conflicts | flags |", "|---|--:|--:|"]
        for kind in _in_kind_order(by_kind):
            c, f = by_kind[kind]
            rows.append(f"| {_cell(code(kind))} | {c} | {f} |")
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks)


def _line(r: Report, entry: Conflict, message: bool) -> str:
    """One list item naming an entry: ``path:line — kind — symbol``, and with ``message`` its message."""
    where = _where(r, entry)
    bits = [code(where), _text(entry.kind)] + ([code(entry.symbol)] if entry.symbol else [])
    text = "- " + " — ".join(bits)
    said = one_line(entry.message) if message else ""
    if len(said) > MESSAGE_CHARS:
        said = said[: MESSAGE_CHARS - 1].rstrip() + "…"
    return text + (f": {_text(said)}" if said else "")


def render(r: Report, url: str, entry: Conflict, level: int, told: Told) -> str:
    """An entry at ``level``: its ``<details>`` section down to NO_CODE, below that one list item."""
    if level <= NO_CODE:
        return _section(r, url, entry, level, told)
    return _line(r, entry, message=level == LINE)


def kinds(flags: Sequence[Conflict]) -> list[tuple[str, list[Conflict]]]:
    """The flags grouped by kind, the kinds in table order, each kind's flags in report order."""
    groups: dict[str, list[Conflict]] = {}
    for f in flags:
        groups.setdefault(f.kind, []).append(f)
    return [(k, groups[k]) for k in _in_kind_order(groups)]


def _in_kind_order(kinds: Collection[str]) -> list[str]:
    """``kinds`` in table order (:data:`KIND_ORDER`), unknown ones after it by name."""
    return [k for k in KIND_ORDER if k in kinds] + sorted(k for k in kinds if k not in KIND_ORDER)
