"""A merge whose automatic resolutions must compile and whose conflict regions leave each side whole (parsing,
binding what it reads): :func:`merge3_checked` for Python modules."""

from __future__ import annotations

import ast
import functools
import keyword
import re
import textwrap
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from patch_queue.merge import binding, calls, markers, pieces, symbols
from patch_queue.merge.conflict import Conflict
from patch_queue.merge.markers import inside, one_side
from patch_queue.merge.statements import Folding, Statement, close, statements, whole_class, widen
from patch_queue.merge.three_way import MergeResult, merge3


@functools.lru_cache(maxsize=8)
def syntax_error_line(text: str) -> int | None:
    """The 1-based line of the first syntax error of ``text`` (Python), or None when it compiles.  Compiled to
    bytecode, which also refuses what only the compiler sees (``return`` outside a function), at two thirds of
    the cost of building its syntax tree.  Kept for the last few texts: along a replay, a merge's result read as
    its upstream side is the next patch's upstream side, checked again."""
    try:
        compile(text, "<merged>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc.lineno or 1
    except ValueError:  # a NUL byte
        return 1
    return None


@functools.lru_cache(maxsize=16)
def _ours_side_error(text: str) -> int | None:
    """:func:`syntax_error_line` of the upstream side of ``text`` (cached: a replay checks each text twice)."""
    return syntax_error_line(one_side(text)[0])


def merge3_checked(
    base: str,
    ours: str,
    theirs: str,
    *,
    labels: tuple[str, str, str] = ("base", "ours", "theirs"),
    key_prefix: str = "",
    recorded: Callable[[str], str | None] | None = None,
) -> MergeResult:
    """:func:`merge3` for Python modules: an automatic resolution that breaks the syntax becomes a conflict.

    Only when all three sides compile (conflict regions already in ``ours`` read as their upstream
    side): then the merged text, read the same way, must compile too.  The resolution nearest
    before the first syntax error is vetoed and the merge redone, until it compiles.  Then conflict
    regions grow until either side of each parses (:meth:`_Growth.whole_statements`), binds every
    local it reads (:meth:`_Growth.bind_names`) and makes no call twice (:meth:`_Growth.no_twice`).
    """

    def run(veto: frozenset[int] = frozenset()) -> MergeResult:
        return merge3(base, ours, theirs, labels=labels, key_prefix=key_prefix, recorded=recorded, veto=veto)

    def automatic(r: Conflict) -> bool:  # near-block flags are in no group
        return not r.conflict and r.group >= 0

    result = run()
    veto: set[int] = set()
    if any(automatic(r) for r in result.regions):  # else no automatic resolution that a veto could take back
        for attempt in range(12):
            probe, where = one_side(result.text)
            error = syntax_error_line(probe)
            if error is None:
                break
            # the sides are checked only now: most merges compile, and each parse of a module costs
            if attempt == 0 and any(_ours_side_error(x) is not None for x in (base, ours, theirs)):
                return result
            line = where[min(error, len(where)) - 1]
            decided = [r for r in result.regions if automatic(r) and r.group not in veto and (r.line or 0) <= line + 1]
            if not decided:
                break
            veto.add(max(decided, key=lambda r: r.line or 0).group)
            result = run(frozenset(veto))

    def widened(grow: list[tuple[int, int]]) -> MergeResult:
        return merge3(
            base, ours, theirs, labels=labels, key_prefix=key_prefix, recorded=recorded, veto=frozenset(veto), grow=grow
        )

    growth = _Growth(base, result, widened)
    if not result.clean and all(_ours_side_error(x) is None for x in (ours, theirs)):
        growth.whole_statements()
    if ours != base and theirs != base:  # else the result is one side's text, whose names are its own
        before = (growth.grow, growth.result)
        twice = growth.no_twice(ours, theirs)  # the copy grown may bind what other lines read
        growth.bind_names(ours, theirs)
        if twice and binding.made_unbound(growth.result.text, ours, theirs) != []:  # names first: taken back
            (growth.grow, growth.result), growth.ranges = before, []
            growth.bind_names(ours, theirs)
        growth.pairs(ours, theirs)
    return _say_linked(growth.result, growth.ranges)


# ---------------------------------------------------------------------------------------------
# statements that belong together: a call and its partner, a binding and the only side that reads it

_PAIRS = (
    ("prepare", "complete"),
    ("acquire", "release"),
    ("start", "finish"),
    ("start", "stop"),
    ("begin", "end"),
    ("open", "close"),
    ("enter", "exit"),
    ("lock", "unlock"),
    ("register", "unregister"),
    ("alloc", "free"),
    ("setup", "teardown"),
)
_CALL = re.compile(r"(?<![\w.])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\s*\(")


def _calls(text: str) -> set[str]:
    """The dotted names ``text`` calls (``self.kvpp.complete_forward``)."""
    return set(_CALL.findall(text))


def partners(call: str) -> set[str]:
    """The calls that pair with ``call``: the same receiver, a word of the name swapped for the other verb of a
    pair (``self.kvpp.complete_forward`` -> ``self.kvpp.prepare_forward``, ``_finish_profiling_chunk_timing`` ->
    ``_start_profiling_chunk_timing``, ``executor.release`` -> ``executor.acquire``)."""
    receiver, _, name = call.rpartition(".")
    words = name.split("_")
    found: set[str] = set()
    for a, b in _PAIRS:
        for x, y in ((a, b), (b, a)):
            for i, word in enumerate(words):
                if word == x:
                    swapped = "_".join([*words[:i], y, *words[i + 1 :]])
                    found.add(f"{receiver}.{swapped}" if receiver else swapped)
    return found


# ---------------------------------------------------------------------------------------------
# conflict regions grown: never cutting a statement, never leaving a name unbound


def _side_error(text: str) -> int | None:
    """The line of ``text`` (with diff3 regions) of the first syntax error of its upstream side, else of its
    patch side; None when both parse."""
    for side in ("ours", "theirs"):
        probe, where = one_side(text, side)
        error = syntax_error_line(probe)
        if error is not None:
            return where[min(error, len(where)) - 1] if where else 1
    return None


@functools.lru_cache(maxsize=8)
def _base_statements(base: str) -> tuple[Statement, ...]:
    """The statements of ``base`` (none when it does not parse); kept for the last few texts: the patches of
    one module along a replay often merge on the same base."""
    try:
        return tuple(statements(pieces.outline(base).top, base.splitlines()))
    except SyntaxError:
        return ()


class _Growth:
    """A merge redone with ranges of base lines grown into conflict regions (``grow`` of merge3): each side of
    a grown region is that side's own text of those lines, and regions that meet become one."""

    def __init__(self, base: str, result: MergeResult, merge: Callable[[list[tuple[int, int]]], MergeResult]) -> None:
        self.base = base
        self.result = result
        self.merge = merge
        self.grow: list[tuple[int, int]] = []  # folded base lines
        self.ranges: list[_Linked] = []  # the regions grown for names and calls
        self._statements: list[Statement] | None = None
        self._folding: Folding | None = None

    def statements(self) -> list[Statement]:
        if self._statements is None:
            self._statements = list(_base_statements(self.base))
        return self._statements

    def folding(self) -> Folding:
        if self._folding is None:
            self._folding = Folding(self.base)
        return self._folding

    def try_grow(self, *ranges: tuple[int, int]) -> tuple[list[tuple[int, int]], MergeResult]:
        """The grow list with the unfolded base lines [lo, hi) of each range added, and the merge it gives."""
        grow = list(self.grow)
        for lo, hi in ranges:
            lo, hi = self.folding().folded(lo, hi)
            for s, e in list(grow):
                if s < hi and lo < e:
                    grow.remove((s, e))
                    lo, hi = min(lo, s), max(hi, e)
            grow = sorted({*grow, (lo, hi)})
        return grow, self.merge(grow)

    def whole_statements(self) -> None:
        """Conflict regions grown until the module parses with every region taken to upstream and with every
        region taken to the patch.

        A region that cuts a statement (one side's text ends inside a call whose arguments are the other
        side's) takes in the base lines around it, up to whole statements of the base, then the statement
        enclosing those, at most its function.  None of it when no growth parses.
        """
        error = _side_error(self.result.text)
        if error is None or not self.statements():
            return
        current = self.result
        for _ in range(24):
            conflicts = sorted((r for r in current.conflicts if r.line is not None), key=lambda r: r.line or 0)
            if not conflicts:
                return
            region = ([r for r in conflicts if (r.line or 0) <= error] or conflicts[:1])[-1]
            span = current.spans.get(region.group)
            if span is None:
                return
            folding = self.folding()
            wider = widen(self.statements(), folding.unfolded(span[0]), folding.unfolded(span[1]))
            if wider is None:
                return
            grow, current = self.try_grow(wider)
            error = _side_error(current.text)
            if error is None:
                self.grow, self.result = grow, current
                return

    def bind_names(self, ours: str, theirs: str) -> None:
        """Regions grown until no function reads a name that the merge left unbound on either side of them
        (:mod:`patch_queue.merge.binding`).

        Where one side binds the name and the other side's change reads it, each becomes a region of its own
        (a clean change so grown is ``name-linked``): taken to the same side, they bind what they read.  When
        that is not enough (a read the two sides share), the region that binds the name grows down to the
        statement that reads it.  A growth is kept only when both sides still parse and the name is bound;
        what is left is ``pq check``'s to report.
        """
        missing = binding.made_unbound(self.result.text, ours, theirs)
        if not missing:
            return
        best = (len(missing), self.grow, self.result, list(self.ranges))
        ranges = list(self.ranges)
        tried: set[tuple[str, str]] = set()
        for _ in range(16):
            todo = [u for u in missing if (u.scope, u.name) not in tried]
            if not todo:
                break
            u = todo[0]
            tried.add((u.scope, u.name))
            found = self._bind(u, ours, theirs)
            if found is None:
                continue
            self.grow, self.result, missing, named, whole = found
            ranges += [_Linked(*self.folding().folded(lo, hi), "name", u.name, whole) for lo, hi in named]
            if len(missing) < best[0]:
                best = (len(missing), self.grow, self.result, list(ranges))
            if not missing:
                break
        _count, self.grow, self.result, self.ranges = best

    def no_twice(self, ours: str, theirs: str) -> bool:
        """Regions grown until no side of the merge makes a call statement more often than both inputs do
        (:mod:`patch_queue.merge.calls`): each copy a clean change brought in becomes a region of its own
        (``name-linked``), going with the region that holds the other copy.  Kept (True) only when both sides
        parse and fewer calls are made twice."""
        extra = calls.made_twice(self.result.text, ours, theirs)
        if not extra or not self.statements():
            return False
        marked = inside(self.result.text)
        grown: list[tuple[int, int]] = []
        linked: list[_Linked] = []
        for t in extra:
            view, where = one_side(self.result.text, t.side)
            place = binding.base_lines(self.base, view, inserted=True)
            back = {m: k for k, m in enumerate(where, 1)}
            for line in t.lines:
                if line not in marked:
                    lo, hi = close(self.statements(), *place(back[line]))
                    grown.append((lo, hi))
                    linked.append(_Linked(*self.folding().folded(lo, hi), "call", t.code, False))
                    continue
                held = [r for r in self.result.conflicts if (r.line or 0) <= line < (r.line or 0) + r.length]
                if held and held[0].group in self.result.spans:
                    linked.append(_Linked(*self.result.spans[held[0].group], "call", t.code, False))
        if not grown or any(whole_class(self.statements(), *r) for r in grown):
            return False
        grow, current = self.try_grow(*grown)
        if _side_error(current.text) is not None or len(calls.made_twice(current.text, ours, theirs)) >= len(extra):
            return False
        self.grow, self.result = grow, current
        self.ranges += linked
        return True

    def pairs(self, ours: str, theirs: str) -> None:
        """Statements that belong together go together.  A statement upstream wrote new, merged cleanly, that
        calls one of a pair (``self.kvpp.prepare_forward(...)``) whose partner (``self.kvpp.complete_forward()``)
        only the upstream side of a conflict region of the same function calls, or that binds a name
        (``active_device_metadata_executor = ...``) which the function reads only on the upstream side of
        conflict regions, becomes a region of its own going with them: taking the patch's side of one takes the
        other's too, so neither half is kept without the other.  Two conflict regions so paired are linked.
        Kept only when both sides still parse and bind what they read."""
        text = self.result.text
        conflicts = [r for r in self.result.conflicts if r.line and not r.reused and r.group in self.result.spans]
        if not conflicts or not self.statements():
            return
        view, where = one_side(text, "ours")
        region_of = {k: r for r in conflicts for k in range(r.line or 0, (r.line or 0) + r.length)}
        try:  # only the functions that hold a region line count: the pieces that hold one
            held = pieces.holding(view, (v for v, m in enumerate(where, 1) if m in region_of))
        except SyntaxError:
            return
        view_lines = view.splitlines()
        base_set = {line.strip() for line in self.base.splitlines()}
        ours_set = {line.strip() for line in ours.splitlines()}

        def span_of(node: ast.stmt | ast.expr, shift: int) -> range:  # its lines in ``view``
            return range(node.lineno + shift, (node.end_lineno or node.lineno) + shift + 1)

        def new_upstream(node: ast.stmt, shift: int) -> bool:  # a clean statement whose lines upstream wrote new
            span = span_of(node, shift)
            codes = [view_lines[v - 1].strip() for v in span if view_lines[v - 1].strip()]
            return (
                all(where[v - 1] not in region_of for v in span)
                and all(c in ours_set for c in codes)
                and any(c not in base_set for c in codes)
            )

        place = binding.base_lines(self.base, view, inserted=True)
        grown: list[tuple[int, int]] = []
        linked: list[_Linked] = []

        def link(r: Conflict, node: ast.stmt | None, shift: int, other: Conflict | None, what: str, label: str) -> None:
            linked.append(_Linked(*self.result.spans[r.group], what, label, False))
            if other is not None:
                linked.append(_Linked(*self.result.spans[other.group], what, label, False))
                return
            assert node is not None
            span = span_of(node, shift)
            lo, hi = close(self.statements(), min(place(v)[0] for v in span), max(place(v)[1] for v in span))
            grown.append((lo, hi))
            linked.append(_Linked(*self.folding().folded(lo, hi), what, label, False))

        for function, shift in _walk(held):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            body = [n for n in ast.walk(function) if n is not function]
            inner = {
                k
                for n in body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                for k in span_of(n, shift)
            }
            lines = span_of(function, shift)
            here = {id(r): r for v in lines if v not in inner and (r := region_of.get(where[v - 1])) is not None}
            if not here:
                continue
            statements_ = [n for n in body if isinstance(n, ast.stmt) and n.lineno + shift not in inner]
            reads_of: dict[str, list[int]] = {}  # the merged lines where the function reads each name
            for t in body:
                if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Load):
                    reads_of.setdefault(t.id, []).append(where[t.lineno + shift - 1])
            # the calls of a pair only upstream's side of a region makes, by their partner
            wanted: dict[str, tuple[str, Conflict]] = {}
            for r in here.values():
                for c in sorted(_calls(r.ours or "") - _calls(r.theirs or "")):
                    for p in partners(c):
                        wanted.setdefault(p, (c, r))
            for node in statements_:
                if isinstance(node, _COMPOUND):
                    continue
                span = span_of(node, shift)
                line = "\n".join(view_lines[span.start - 1 : span.stop - 1])
                for p in sorted(_calls(line) & set(wanted)):
                    c, r = wanted[p]
                    label = " and ".join(f"{x}()" for x in sorted((c, p)))
                    other = region_of.get(where[span.start - 1])
                    if other is not None and other is not r:
                        link(r, None, shift, other, "pair", label)
                    elif other is None and new_upstream(node, shift):
                        link(r, node, shift, None, "pair", label)
            # a name upstream's new clean statement binds and only upstream's side of regions reads
            for node in statements_:
                if isinstance(node, _COMPOUND) or not new_upstream(node, shift):
                    continue
                bound = {
                    t.id
                    for t in ast.walk(node)
                    if isinstance(t, ast.Name) and not isinstance(t.ctx, ast.Load) and not keyword.iskeyword(t.id)
                }
                for name in sorted(bound):
                    read_at = reads_of.get(name, [])
                    holders = {id(r): r for m in read_at if (r := region_of.get(m)) is not None}
                    if not read_at or len(holders) == 0 or any(m not in region_of for m in read_at):
                        continue
                    if any(name in binding.NAME.findall(r.theirs or "") for r in holders.values()):
                        continue  # the patch's side reads it too: no half left alone
                    for r in holders.values():
                        link(r, node, shift, None, "name", name)
        if not linked:
            return
        if grown:
            if any(whole_class(self.statements(), *g) for g in grown):
                return
            grow, current = self.try_grow(*grown)
            unbound = binding.made_unbound(self.result.text, ours, theirs)
            after = binding.made_unbound(current.text, ours, theirs) if _side_error(current.text) is None else None
            if after is None or (unbound is not None and len(after) > len(unbound)):
                return
            self.grow, self.result = grow, current
        self.ranges += linked

    def _bind(
        self, u: binding.Unbound, ours: str, theirs: str
    ) -> tuple[list[tuple[int, int]], MergeResult, list[binding.Unbound], list[tuple[int, int]], bool] | None:
        """The first of :meth:`_growths_for` that binds ``u``'s name: its grow list, merge, names left unbound,
        the ranges whose regions name ``u`` and whether it is one range."""
        for grown, named, whole in self._growths_for(u):
            grow, current = self.try_grow(*grown)
            after = binding.made_unbound(current.text, ours, theirs) if _side_error(current.text) is None else None
            if after is not None and all((x.scope, x.name) != (u.scope, u.name) for x in after):
                return grow, current, after, named, whole
        return None

    def _growths_for(self, u: binding.Unbound) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]], bool]]:
        """The growths to try for ``u``, smallest first, each as the unfolded base lines [lo, hi) to grow, the
        ranges whose regions then name ``u`` and whether it is one range: the lines that bind the name on the
        other side and the statements that read it, apart; then one range from the first down to the last."""
        view, where = one_side(self.result.text, u.side)
        used = binding.reads(view, u.scope, u.name)
        if not used or not self.statements():
            return []
        first = where[used[0] - 1]  # in the merged text
        # a region before the first read, one side of which binds the name (the other side of a conflict, or
        # either side of an automatic resolution that dropped the binding)
        bound = [
            r
            for r in self.result.regions
            if r.group >= 0
            and r.group in self.result.spans
            and (r.line or 0) <= first
            and (binding.bound_in(r.ours, u.name) or binding.bound_in(r.theirs, u.name))
        ]
        folding = self.folding()
        if bound:
            nearest = max(bound, key=lambda r: r.line or 0)
            if nearest.reused:  # a maintainer's recorded resolution: theirs to answer for
                return []
            lo, hi = self.result.spans[nearest.group]
            start, end = folding.unfolded(lo), folding.unfolded(hi)
            binder = [] if nearest.conflict else [(start, end)]  # an automatic resolution becomes a region
            named = [(start, max(end, start + 1))]
        else:  # the base bound it: a side rewrote those lines
            lines = binding.binds(self.base, u.scope, u.name)
            if not lines:
                return []
            start = lines[0] - 1
            binder = named = [close(self.statements(), start, start + 1)]
        place = binding.base_lines(self.base, view, inserted=True)
        apart = sorted({close(self.statements(), *place(k)) for k in used})
        base_of = binding.base_lines(self.base, view)
        lo, hi = base_of(used[0])[0], base_of(used[-1])[1]
        whole = [close(self.statements(), min(start, lo), max(hi, start + 1))]
        growths = [(binder + apart, named + apart, False), (whole, whole, True)]
        return [(g, n, w) for g, n, w in growths if not any(whole_class(self.statements(), *r) for r in g)]


def _walk(held: list[tuple[ast.stmt, int]]) -> Iterator[tuple[ast.AST, int]]:
    """Every node of the statements ``held`` (each with its shift), in the order of :func:`ast.walk` over a
    module of them."""
    todo: deque[tuple[ast.AST, int]] = deque(held)
    while todo:
        node, shift = todo.popleft()
        todo.extend((child, shift) for child in ast.iter_child_nodes(node))
        yield node, shift


_COMPOUND = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.TryStar,
    ast.Match,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)


@dataclass(frozen=True)
class _Linked:
    """The folded base lines of a region grown (or taken) for a name or a call, and whether one region was grown
    over both a binding and its reads (else the regions go together)."""

    lo: int
    hi: int
    what: str  # "name", "call" or "pair" (two calls that belong together)
    text: str
    whole: bool


def _say_linked(result: MergeResult, ranges: list[_Linked]) -> MergeResult:
    """``result`` with the message of each region grown for names or calls saying which, and, where regions go
    together (:attr:`Conflict.links`: grown apart for one name or call, or :func:`_name_links`), that they do."""

    def meets(r: _Linked, span: tuple[int, int]) -> bool:  # an empty range meets what is at its place
        return r.lo <= max(span[1] - 1, span[0]) and span[0] <= max(r.hi - 1, r.lo)

    def said(texts: set[str]) -> str:
        return ", ".join(f"`{t.splitlines()[0]}`" for t in sorted(texts))

    found = {
        r.group: [x for x in ranges if meets(x, span)]
        for r in result.regions
        if r.conflict and (span := result.spans.get(r.group)) is not None
    }
    # a link holds regions together only when two regions or more share it
    shared = Counter(label for xs in found.values() for label in {f"{x.what}:{x.text}" for x in xs if not x.whole})
    extra = _name_links(result)
    lines = result.text.splitlines()
    regions: list[Conflict] = []
    for r in result.regions:
        xs = found.get(r.group, [])
        labels = {f"{x.what}:{x.text}" for x in xs if not x.whole and shared[f"{x.what}:{x.text}"] > 1}
        labels |= extra.get(r.group, set())
        params: set[str] = set()
        if r.conflict and any(label.startswith("name:") for label in labels):
            # a parameter of the function is bound on both sides of every region: statements all over it read it
            # (`scheduler_output`), so it holds nothing together
            params = {f"name:{p}" for p in _parameters(lines, _enclosing_def(lines, r))} & labels
            labels -= params
        if not xs and not labels:
            regions.append(r)
            continue
        message = r.message.split("; widened")[0]
        names = {label[5:] for label in labels if label.startswith("name:")}
        made = {label[5:] for label in labels if label.startswith("call:")}
        paired = {label[5:] for label in labels if label.startswith("pair:")}
        whole = {x.text for x in xs if x.what == "name"} - names - {label[5:] for label in params}
        if whole:
            message += f"; widened so that either side parses and binds what it reads ({said(whole)})"
        told = [f"that name {said(names)}"] * bool(names) + [f"that make the call {said(made)}"] * bool(made)
        told += [f"that make the calls {said(paired)}, which belong together"] * bool(paired)
        if told:
            message += f"; goes with the other regions {' and '.join(told)}: take the same side in each"
        regions.append(replace(r, message=message, links=tuple(sorted(labels))))
    return MergeResult(result.text, regions, result.spans)


def _name_links(result: MergeResult) -> dict[int, set[str]]:
    """For each conflict region (by group), ``name:x`` for each other region of the same function it goes with:
    one of the two binds ``x`` on one side only and the other names it, so taking different sides of the two
    may leave ``x`` unbound (a ``NameError``) or read another value than either side meant."""
    conflicts = [r for r in result.regions if r.conflict and r.ours is not None and r.theirs is not None and r.line]
    if len(conflicts) < 2:
        return {}
    lines = result.text.splitlines()

    def function(r: Conflict) -> int:  # the line of the ``def`` the region is in (-1: the module's top level)
        return _enclosing_def(lines, r)

    seen = [
        (r.group, function(r), r.line or 0, binding.bound_names(r.ours or "") ^ binding.bound_names(r.theirs or ""))
        for r in conflicts
    ]
    named = {r.group: set(binding.NAME.findall(_uncommented(f"{r.ours}{r.theirs}"))) for r in conflicts}
    out: dict[int, set[str]] = {}
    for group, where, line, one_sided in seen:
        for other, there, after, _ in seen:
            # a region above the one that binds the name on one side reads the value it had before either side
            follows = other != group and there == where and after > line
            for name in one_sided & named[other] if follows else ():
                out.setdefault(group, set()).add(f"name:{name}")
                out.setdefault(other, set()).add(f"name:{name}")
    return out


def _enclosing_def(lines: list[str], r: Conflict) -> int:
    """The index in ``lines`` of the ``def`` line of the function conflict region ``r`` is in (-1: the module's
    top level)."""
    code = next((x for x in f"{r.ours}{r.theirs}".splitlines() if x.strip() and not x.lstrip().startswith(")")), "")
    floor = len(code) - len(code.lstrip())  # a def holds the region when every line since is deeper
    for k in range((r.line or 1) - 2, -1, -1):
        line = lines[k]
        if not line.strip() or line.lstrip().startswith(("#", ")")) or markers.MARKER.match(line):
            continue  # (a line closing brackets, as the last of a multi-line ``def`` header, is not a floor)
        indent = len(line) - len(line.lstrip())
        if indent < floor and symbols.DEF.match(line):
            return k
        floor = min(floor, indent)
    return -1


_PARAMETER = re.compile(r"(?:^|[(,])\s*\*{0,2}(\w+)\s*(?=[:=,)])")


def _parameters(lines: list[str], k: int) -> set[str]:
    """The parameter names of the ``def`` at ``lines[k]`` (-1: none): its header up to the line that closes it, a
    region's marker lines aside (a region in the header: its first side's lines close it)."""
    if k < 0:
        return set()
    header: list[str] = []
    depth = 0
    for line in lines[k : k + 80]:
        if markers.MARKER.match(line):
            continue
        header.append(line.split("#")[0])
        depth += sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")
        if depth <= 0 and line.rstrip().endswith(":"):
            break
    text = " ".join(x.strip() for x in header)
    try:
        tree = ast.parse(textwrap.dedent(text) + "\n    pass\n")
    except SyntaxError:  # what the header's parentheses hold, names before `:`, `=`, `,` or `)`
        inner = text[text.find("(") + 1 : text.rfind(")")]
        return set(_PARAMETER.findall("(" + re.sub(r"\[[^\[\]]*\]", "", inner) + ")")) - {"self"}
    fn = tree.body[0]
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
        return set()
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [x.arg for x in (a.vararg, a.kwarg) if x]
    return set(names) - {"self"}


_STRINGS = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'")


def _uncommented(text: str) -> str:
    """``text`` without its comments (a ``#`` outside a string to the end of its line): the names a comment
    mentions are not names the code reads."""
    out = []
    for line in text.splitlines(keepends=True):
        masked = _STRINGS.sub(lambda m: "_" * len(m.group(0)), line)
        cut = masked.find("#")
        out.append(line if cut < 0 else line[:cut] + "\n")
    return "".join(out)
