"""Derive a patch series from hand-maintained runners: find their upstream base, split the edits.

The pure part of ``pq adopt``:

1. :func:`search_base` scores every upstream revision of the upstream file by how many lines of
   the downstream methods it matches (methods of the same name, aligned with difflib) and picks
   the best; ties go to the newest commit, since identical methods make any of them the same
   base.  Revisions are deduplicated by blob and methods by text, so 600+ revisions cost a
   few seconds.
2. :func:`classify` decides which downstream symbols are *carried copies* of upstream ones (same
   name, similarity >= ``CARRY_RATIO`` and not an override that calls ``super()`` of itself);
   the rest is omni-only.
3. :func:`plan_series` splits each module into readable steps: a skeleton patch (imports, class,
   omni-only methods, with the carried methods still as upstream wrote them), then one patch per
   carried symbol with the omni edits inside it.  Omni-only modules are one new-file patch each.
   Applying all steps to the projection gives the downstream files back byte for byte.
"""

from __future__ import annotations

import ast
import difflib
import heapq
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from patch_queue.merge import symbols
from patch_queue.series import fmt
from patch_queue.series.queue import Module

CARRY_RATIO = 0.28
TOP = 10  # candidates reported by the search


class _Matcher:
    """Cached line-alignment scores between texts."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[int, float]] = {}
        self._counts: dict[str, Counter[str]] = {}
        self._bounds: dict[tuple[str, str], int] = {}

    def bound(self, a: str, b: str) -> int:
        """An upper bound of ``score(a, b)[0]``: the lines the two texts share, with multiplicity (each
        matched line pairs one line of ``a`` with an equal line of ``b``).  Cheap: no alignment."""
        if (a, b) in self._cache:
            return self._cache[(a, b)][0]
        if (a, b) not in self._bounds:
            ca, cb = (self._counts.get(t) or self._counts.setdefault(t, Counter(t.splitlines())) for t in (a, b))
            if len(ca) > len(cb):
                ca, cb = cb, ca
            self._bounds[(a, b)] = sum(min(n, cb[line]) for line, n in ca.items() if line in cb)
        return self._bounds[(a, b)]

    def score(self, a: str, b: str) -> tuple[int, float]:
        if (a, b) not in self._cache:
            sm = difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(), autojunk=False)
            self._cache[(a, b)] = (sum(block.size for block in sm.get_matching_blocks()), sm.ratio())
        return self._cache[(a, b)]


@dataclass(frozen=True)
class Candidate:
    commit: str
    matched: int
    total: int
    time: int


@dataclass(frozen=True)
class SearchResult:
    best: Candidate
    ties: int
    searched: int
    ranking: tuple[Candidate, ...]  # best first, at most TOP


def _downstream_methods(modules: dict[str, str]) -> dict[tuple[str, str], str]:
    """(module, method name) -> text, for every method of every class of the runner modules."""
    out: dict[tuple[str, str], str] = {}
    for path, text in sorted(modules.items()):
        for name, sym in symbols.symbols_ast(text, path=path).items():
            if sym.is_method:
                out[(path, name.split(".", 1)[1])] = sym.text
    return out


def search_base(
    modules: dict[str, str],
    commits: Sequence[str],
    blob_id: Callable[[str], str | None],
    methods: Callable[[str, str], dict[str, str]],
    commit_time: Callable[[str], int],
    *,
    progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """Best upstream revision for the downstream modules.

    ``blob_id(commit)`` is the blob of the upstream file at that commit (None: absent), and
    ``methods(commit, blob)`` its methods of the upstream class (:func:`symbols.scan_methods`).
    """
    down = _downstream_methods(modules)
    matcher = _Matcher()
    by_blob: dict[str, dict[str, str]] = {}
    blob_of: dict[str, str] = {}
    for i, commit in enumerate(commits):
        blob = blob_id(commit)
        if progress is not None:
            progress(i + 1, len(commits))
        if blob is None:
            continue
        blob_of[commit] = blob
        if blob not in by_blob:
            by_blob[blob] = methods(commit, blob)

    down_lines = {key: len(text.splitlines()) for key, text in down.items()}
    commits_of = Counter(blob_of.values())

    def rank(keys: set[tuple[str, str]] | None) -> list[Candidate]:
        """The candidates best first: at least the best ``TOP`` commits and every tie of the best.

        Revisions are aligned in the order of an upper bound of their score, and the search stops
        where that bound falls below the ``TOP``-th best exact score: the rest cannot rank.
        """
        wanted = [(key, text) for key, text in down.items() if keys is None or key in keys]

        def tally(methods: dict[str, str], measure: Callable[[str, str], int]) -> tuple[int, int]:
            matched = total = 0
            for key, text in wanted:
                up = methods.get(key[1])
                if up is not None:
                    matched += measure(text, up)
                    total += down_lines[key]
            return matched, total

        bounds = {blob: tally(methods, matcher.bound)[0] for blob, methods in by_blob.items()}
        scored_blob: dict[str, tuple[int, int]] = {}
        best: list[int] = []  # the TOP best exact scores, one entry per commit, best first
        for blob in sorted(by_blob, key=lambda b: (-bounds[b], b)):
            if len(best) == TOP and bounds[blob] < best[-1]:
                break
            scored_blob[blob] = tally(by_blob[blob], lambda a, b: matcher.score(a, b)[0])
            best = heapq.nlargest(TOP, best + [scored_blob[blob][0]] * commits_of[blob])
        cands = [Candidate(c, *scored_blob[b], commit_time(c)) for c, b in blob_of.items() if b in scored_blob]
        return sorted(cands, key=lambda c: (-c.matched, -c.time, c.commit))

    if not blob_of:
        raise ValueError("no upstream revision holds the upstream file")
    first = rank(None)
    best_methods = by_blob[blob_of[first[0].commit]]
    carried = {
        key
        for key, text in down.items()
        if key[1] in best_methods and _is_copy(key[1], text, best_methods[key[1]], matcher)
    }
    final = rank(carried or None)
    # report the total as the downstream lines of the carried methods, whatever the revision holds
    total = sum(down_lines[k] for k in carried) if carried else final[0].total
    final = [Candidate(c.commit, c.matched, total, c.time) for c in final]
    ties = sum(1 for c in final if c.matched == final[0].matched)
    return SearchResult(final[0], ties, len(blob_of), tuple(final[:TOP]))


def _is_copy(name: str, down: str, up: str, matcher: _Matcher) -> bool:
    if re.search(r"super\(\)\s*\.\s*" + re.escape(name) + r"\s*\(", down):
        return False  # an override that delegates to upstream is not a copy of it
    return matcher.score(down, up)[1] >= CARRY_RATIO


@dataclass(frozen=True)
class Carried:
    module: str
    downstream: str  # downstream symbol name (Class.method or top-level name)
    upstream: str  # upstream symbol name
    ratio: float


def classify(modules: dict[str, str], upstream_text: str, *, upstream_path: str, cls: str) -> list[Carried]:
    """The carried symbols of every module, in module order."""
    up = symbols.symbols_ast(upstream_text, path=upstream_path)
    matcher = _Matcher()
    out: list[Carried] = []
    for path, text in sorted(modules.items()):
        used: set[str] = set()
        for name, sym in sorted(symbols.symbols_ast(text, path=path).items(), key=lambda kv: kv[1].start):
            if sym.is_method and name.count(".") != 1:
                continue
            target = f"{cls}.{name.split('.', 1)[1]}" if sym.is_method else name
            usym = up.get(target)
            if usym is None or target in used or (not sym.is_method and (target == cls or usym.is_method)):
                continue
            if sym.is_method and not _is_copy(target.split(".", 1)[1], sym.text, usym.text, matcher):
                continue
            ratio = matcher.score(sym.text, usym.text)[1]
            if ratio < CARRY_RATIO:
                continue
            used.add(target)
            out.append(Carried(path, name, target, round(ratio, 3)))
    return out


@dataclass(frozen=True)
class Mismatch:
    """The runners and the upstream file disagree on the class the carried methods come from: ``message`` (one
    line, without its consequence) about ``path`` (and ``line``, where it is one class of the runners)."""

    path: str
    line: int | None
    message: str


def _bases(node: ast.ClassDef) -> list[str]:
    """The names of the bases a class statement names (``A``, or ``a.b.A`` as ``A``)."""
    return [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))]


def _classes(text: str) -> list[ast.ClassDef]:
    try:
        return [node for node in symbols.parsed(text).body if isinstance(node, ast.ClassDef)]
    except SyntaxError:
        return []


def class_mismatch(modules: dict[str, str], upstream_text: str, *, upstream_path: str, cls: str) -> Mismatch | None:
    """Why the runners' methods cannot be copies of ``cls``'s, if they cannot: the upstream file has no top-level
    class ``cls`` (the upstream class is absent), or no class of the runners subclasses ``cls`` while one subclasses
    a class the upstream file does not have (the runners name another class); None when they agree (or the runners
    define no class)."""
    upstream = {node.name for node in _classes(upstream_text)}
    runners = [(path, node) for path, text in sorted(modules.items()) for node in _classes(text)]
    own = {node.name for _path, node in runners}
    named = [(path, node, base) for path, node in runners for base in _bases(node) if base not in own]
    if cls not in upstream:
        shared = sorted({base for _p, _n, base in named if base in upstream})
        has = f"; the runners subclass {', '.join(shared)}, which it has" if shared else ""
        return Mismatch(
            upstream_path, None, f"has no class {cls}, the class the runners' methods are carried from{has}"
        )
    if not runners or any(base == cls for _p, _n, base in named):
        return None
    # the runner class whose bases stand where cls should: the one that, with the runner classes deriving from it,
    # defines the most methods of cls by name (the root of the runners' hierarchy)
    methods = {name.split(".", 1)[1] for name in symbols.symbols_ast(upstream_text) if name.startswith(cls + ".")}
    by_name = {node.name: node for _path, node in reversed(runners)}

    def ancestors(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        node = by_name.get(name)
        if node is None or name in seen:
            return set()
        return {name}.union(*(ancestors(b, seen | {name}) for b in _bases(node)))

    same: Counter[str] = Counter()
    for _path, node in runners:
        defined = sum(
            1 for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name in methods
        )
        for name in ancestors(node.name):
            same[name] += defined
    found = [
        (same[node.name], -i, path, node, foreign)
        for i, (path, node) in enumerate(runners)
        if (foreign := [b for b in _bases(node) if b not in own and b not in upstream]) and same[node.name]
    ]
    if not found:
        return None
    _same, _i, path, node, foreign = max(found, key=lambda f: (f[0], f[1]))
    which = "no class " + foreign[0] if len(foreign) == 1 else "none of them"
    return Mismatch(
        path,
        node.lineno,
        f"class {node.name} subclasses {', '.join(foreign)}, not {cls}: {upstream_path} has {which}",
    )


@dataclass(frozen=True)
class Step:
    """One patch of the planned series: the module's text after it."""

    name: str
    subject: str
    description: str
    module: str
    after: bytes


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _fences(what: str, text: str, fence: str) -> list[str]:
    """The description line that counts the fence lines (comments naming ``fence``, the downstream's fence word) of
    ``text`` (none when it has none, or the downstream fences nothing)."""
    if not fence:
        return []
    fences = len(re.findall(rf"^\s*#.*{re.escape(fence)}", text, re.MULTILINE))
    return [f"{what} holds {fences} {fence} fence lines."] if fences else []


def plan_series(
    modules: dict[str, bytes],
    carried: list[Carried],
    upstream_text: str,
    *,
    base_label: str,
    upstream_path: str,
    downstream: str,
    fence: str,
    formatter: str = "",
    line_length: int = 120,
) -> tuple[tuple[Module, ...], list[Step]]:
    """The queue layout and the ordered steps that turn the projection into ``modules``.

    The carried upstream symbols enter the skeleton as the projection lays them out (formatted
    with ``formatter`` when one is set), so the later patches hold only the omni edits.
    """
    up = symbols.symbols_ast(upstream_text, path=upstream_path)
    wanted = [up[n] for n in sorted({c.upstream for c in carried})]
    up.update({s.name: s for s in fmt.format_symbols(wanted, formatter=formatter, line_length=line_length)})
    layout: list[Module] = []
    steps: list[Step] = []
    for path in sorted(modules):
        data = modules[path]
        mine = [c for c in carried if c.module == path]
        stem = path.removesuffix(".py")
        if not mine:
            layout.append(Module(path, "", ()))
            desc = [f"Omni-only module {path}: new in {downstream}, no upstream counterpart."]
            desc += _fences("It", data.decode("utf-8", errors="replace"), fence)
            steps.append(Step(_slug(stem), f"{stem}: add omni-only module {path}", "\n".join(desc), path, data))
            continue
        text = data.decode("utf-8")
        down = symbols.symbols_ast(text, path=path)
        layout.append(Module(path, upstream_path, tuple(c.upstream for c in mine)))
        # skeleton: every carried symbol back to its upstream text
        spans = sorted(((down[c.downstream], up[c.upstream]) for c in mine), key=lambda s: s[0].start)
        skeleton = text.splitlines(keepends=True)
        for dsym, usym in reversed(spans):
            skeleton[dsym.start - 1 : dsym.end] = usym.text.splitlines(keepends=True)
        omni_only = [n for n, s in down.items() if s.is_method and n not in {c.downstream for c in mine}]
        classes = [n for n, s in down.items() if not s.is_method]
        desc = [
            f"The omni module {path}, with the upstream symbols it carries from {upstream_path}",
            f"({base_label}) still as upstream wrote them; the next patches put the omni edits into them.",
            "",
            "Carried: " + ", ".join(f"{c.upstream} as {c.downstream} (similarity {c.ratio:.2f})" for c in mine) + ".",
        ]
        if classes:
            desc.append("Classes and top-level symbols: " + ", ".join(classes) + ".")
        if omni_only:
            desc.append("Omni-only methods: " + ", ".join(omni_only) + ".")
        current = "".join(skeleton)
        subject = f"{stem}: omni module skeleton and omni-only methods"
        steps.append(Step(_slug(stem), subject, "\n".join(desc), path, current.encode("utf-8")))
        # then the omni edits of each carried symbol, in module order
        for dsym, usym in spans:
            if dsym.text == usym.text:
                continue
            cur_lines = current.splitlines(keepends=True)
            # everything above this symbol already holds its downstream text, so it starts
            # where it starts downstream
            start = dsym.start - 1
            end = start + len(usym.text.splitlines())
            assert "".join(cur_lines[start:end]) == usym.text, (path, dsym.name)
            cur_lines[start:end] = dsym.text.splitlines(keepends=True)
            current = "".join(cur_lines)
            desc = [
                f"Omni edits to {usym.name} as carried in {dsym.name} ({path}).",
                f"Upstream: {upstream_path} at {base_label}.",
            ]
            desc += _fences("The method", dsym.text, fence)
            slug = f"{_slug(stem)}-{_slug(dsym.name.split('.')[-1])}"
            subject = f"{stem}: omni edits in {dsym.name}"
            steps.append(Step(slug, subject, "\n".join(desc), path, current.encode("utf-8")))
        assert current == text, path
    return tuple(layout), steps
