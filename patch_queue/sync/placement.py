"""Porting the omni changes of the GPU runners that the NPU runners lack (``pq sync-gpu``): pure logic.

:func:`patch_queue.checks.gpu_audit.audit` lists the omni edits of vllm-omni's GPU copies of
vLLM's ``GPUModelRunner`` methods and says which the NPU runners lack.  :func:`sync` ports each
of those into the NPU method the audit names, one at a time (a later port may anchor on an earlier
one), and never guesses:

1. **Translation**: every line of the GPU hunk goes through the ordered rules of
   ``gpu_sync.toml`` (:mod:`patch_queue.sync.translation`: ``CUDAGraphWrapper`` -> ``ACLGraphWrapper``,
   ``set_forward_context`` -> ``set_ascend_forward_context``, ...),
   extended by the project's ``patches/gpu-sync-rules.toml``.
2. **Anchors**: the GPU code lines right before and right after the change (other unported changes
   skipped), translated and normalised like the audit's code lines, as the shortest run that occurs
   once in the NPU method (the run before, then the run after).  When neither is there (the NPU
   copy rewrote the statement before it, e.g. its own ``_build_attention_metadata(...)`` call), the
   insertion goes after the one NPU statement most like the GPU statement before it (difflib's ratio
   of the normalised code at least :data:`patch_queue.sync.statements.SIMILAR`, no other as close), and the port
   says so.
3. **What it replaces**: the same anchors in vLLM's method give the upstream code the change
   replaced (none for an insertion).  The NPU code between the anchors must be that code
   (normalised), else the NPU method diverged there and the change is reported, not placed.
   When an anchor is itself omni code (vLLM lacks it), the NPU side must have nothing between the
   anchors: an insertion.  Against the release's GPU method, statements of the change it has unchanged but the NPU
   method lacks (at either end: omni code the NPU side never got, brought along with the change) are inserted, not
   replaced.
4. **The port**: the translated hunk, re-indented by the NPU anchor's indentation, between two
   ``Omni-new`` fence lines at the indentation of its shallowest line; inside an omni block of the NPU method
   without fences of its own (the block marks it as omni already: fences there would nest, and the fence parser,
   which pairs them in order, would read the block as two); never over one fence of a block and not the other.  The
   module must still
   parse, the port must not read a local name of the GPU method that the NPU method never binds, nor
   replace the code binding a local the rest of the NPU method still reads (either would raise
   ``NameError``), else the change is reported.

A change that cannot be placed (no NPU method to hold it, an anchor absent or ambiguous, diverged
NPU code, a result that does not parse or reads an unbound local) comes back as :class:`Unplaced` with the reason.

Whole omni helper methods the ports call are copied by :mod:`patch_queue.sync.helper_methods`; what a port is,
and the steps every port shares, live in :mod:`patch_queue.sync.ports`; the statement units the sides are
compared by, in :mod:`patch_queue.sync.statements`.
"""

from __future__ import annotations

import ast
import difflib
import functools
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from patch_queue.checks import gpu_audit
from patch_queue.checks.gpu_audit import GpuChange
from patch_queue.merge import anchors, symbols, three_way
from patch_queue.sync.ports import NotPlaced, Port, Since, Unplaced, completed, joined, method_at, reindent
from patch_queue.sync.statements import SIMILAR, Unit, code_rows, opcodes, similar, spans, units, whole
from patch_queue.sync.translation import Rules

# the longest run of code lines tried to make an anchor unique
_MAX_ANCHOR = 8
# how many more NPU statements than the code a change replaces may stand between its GPU neighbours
_MAX_BETWEEN = 3
# the merge regions of edits that do not overlap: next to each other, an insertion placed by its anchor next to
# the other side's change, lines both sides have; every other kind lets one side's text win over the other's
_DISJOINT = frozenset({"near-block", "block-moved", "already-upstream"})
# how many GPU statements away from a change its neighbours for a merge may be
_MAX_AROUND = 4


def _anchor(run: Sequence[str], target: Sequence[str], *, before: bool, after: int = -1) -> int | None:
    """Index in ``target`` of the line next to the change: the shortest run of ``run`` next to it (its
    tail when ``before``, else its head) that occurs once in ``target`` after ``after``.  None when the
    nearest line is absent; NotPlaced when every run occurs more than once."""
    for k in range(1, min(_MAX_ANCHOR, len(run)) + 1):
        keys = list(run[-k:] if before else run[:k])
        hits = [i for i in range(after + 1, len(target) - k + 1) if list(target[i : i + k]) == keys]
        if not hits:
            return None
        if len(hits) == 1:
            return hits[0] + k - 1 if before else hits[0]
    if not run:
        return None
    raise NotPlaced(f"the code {'before' if before else 'after'} it occurs more than once in the method")


@dataclass(frozen=True)
class _Group:
    changes: tuple[GpuChange, ...]
    gpu: symbols.Symbol
    first: int  # 0-based rows of the GPU method, whole statements
    last: int


def _groups(todo: Sequence[GpuChange], gpu_files: Mapping[str, str]) -> list[_Group | Unplaced]:
    """The unported changes widened to whole statements, those that overlap or touch merged."""
    out: list[_Group | Unplaced] = []
    for change in todo:
        text = gpu_files[change.gpu_file]
        gsym = method_at(text, change.gpu_file, line=change.gpu_line)
        if gsym is None:
            out.append(Unplaced((change,), "not inside a method of the GPU module", gpu_hunk=joined(change.lines)))
            continue
        first = change.gpu_line - gsym.start
        first, last = whole(first, first + len(change.lines) - 1, spans(gsym.text))
        prev = out[-1] if out else None
        if isinstance(prev, _Group) and prev.gpu == gsym:
            code = code_rows(gsym.text.splitlines())
            if first <= prev.last or not any(prev.last < r < first for r in code):
                out[-1] = _Group((*prev.changes, change), gsym, min(prev.first, first), max(prev.last, last))
                continue
        out.append(_Group((change,), gsym, first, last))
    return out


def _replaced(
    group: _Group, gunits: Sequence[Unit], vunits: Sequence[Unit], held: Sequence[str] | None
) -> tuple[int, int, list[int]]:
    """The group's rows widened over every vLLM -> GPU replacement it takes part in, and the indices of the vLLM
    units those rows stand for, deleted ones between them included (none for an insertion).  An unchanged statement
    of the rows at either end that the NPU method (its unit keys ``held``: given when the code compared with is the
    release's GPU method, whose omni code the NPU method may never have got) lacks is inserted with the change, not
    code it replaces."""
    first, last = group.first, group.last
    g_keys, v_keys = [u.key for u in gunits], [u.key for u in vunits]
    ops = opcodes(v_keys, g_keys)
    stmts = spans(group.gpu.text)
    while True:
        inside = {j for j, u in enumerate(gunits) if first <= u.first <= last}
        lo, hi = first, last
        for tag, _i1, _i2, j1, j2 in ops:
            if tag == "replace" and inside & set(range(j1, j2)):
                lo, hi = min(lo, gunits[j1].first), max(hi, gunits[j2 - 1].last)
        lo, hi = whole(lo, hi, stmts)
        if (lo, hi) == (first, last):
            break
        first, last = lo, hi
    upstream: list[tuple[int, bool]] = []  # (vLLM unit, unchanged)
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            upstream += [(i1 + j - j1, True) for j in range(j1, j2) if j in inside]
        elif tag == "replace" and inside & set(range(j1, j2)):
            upstream += [(i, False) for i in range(i1, i2)]
    while held is not None and upstream and upstream[0][1] and vunits[upstream[0][0]].key not in held:
        upstream.pop(0)
    while held is not None and upstream and upstream[-1][1] and vunits[upstream[-1][0]].key not in held:
        upstream.pop()
    # the units the GPU side deleted between them are part of the code the rows replace
    return first, last, list(range(upstream[0][0], upstream[-1][0] + 1)) if upstream else []


def _run(keys: Sequence[str], target: Sequence[str]) -> list[int]:
    n = len(keys)
    return [i for i in range(len(target) - n + 1) if list(target[i : i + n]) == list(keys)]


@dataclass(frozen=True)
class _Site:
    """The NPU method a group goes into, and the three sides as translated lines and units."""

    group: _Group
    npu: symbols.Symbol
    npu_text: str
    npu_file: str
    rules: Rules
    npu_lines: list[str]
    nunits: list[Unit]
    gpu_lines: list[str]
    gunits: list[Unit]
    vllm_lines: list[str]
    vunits: list[Unit]

    @property
    def symbol(self) -> str:
        return self.npu.name

    def raw(self, first: int, last: int) -> list[str]:
        return self.group.gpu.text.splitlines()[first : last + 1]

    @functools.cached_property
    def blocks(self) -> list[tuple[int, int]]:
        """The module's fenced omni blocks as the rows of their opening and closing fences, counted from the NPU
        method's first line."""
        found, _problems = anchors.parse_blocks(self.npu_text)
        return [(b.start - self.npu.start, b.end - self.npu.start) for b in found if b.fenced]

    def inside(self, start: int, end: int) -> bool:
        """Whether rows [start, end) of the NPU method (when empty: the insertion point before ``start``) lie
        inside an omni block."""
        return any(s < start and end <= e for s, e in self.blocks)


def _site(group: _Group, vllm: symbols.Symbol, npu_text: str, npu_file: str, symbol: str, rules: Rules) -> _Site:
    npu = method_at(npu_text, npu_file, name=symbol)
    if npu is None:
        raise NotPlaced(f"{symbol} is not in {npu_file}")
    gpu_lines = [rules.translate(line) for line in group.gpu.text.splitlines()]
    vllm_lines = [rules.translate(line) for line in vllm.text.splitlines()]
    npu_lines = npu.text.splitlines()
    return _Site(
        group, npu, npu_text, npu_file, rules, npu_lines, units(npu_lines), gpu_lines, units(gpu_lines),
        vllm_lines, units(vllm_lines),
    )  # fmt: skip


def _finish(site: _Site, start: int, end: int, body: list[str], raw: list[str], how: str) -> Port:
    """The port that writes ``body`` over the NPU method's rows [start, end), once it parses: fenced at the
    indentation of its shallowest line, unless an omni block holds those rows."""
    npu = site.npu
    crossed = [s for s, e in site.blocks if (start <= s < end) != (start <= e < end)]
    if crossed:
        raise NotPlaced(f"it would replace one fence of the omni block at line {npu.start + crossed[0]}, not both")
    if site.inside(start, end):
        result = body
        how = "; ".join(w for w in (how, "inside an omni block, without fences of its own") if w)
    else:
        fence = " " * min(anchors.indent_of(line) for line in body if line.strip()) + site.rules.fence
        result = [fence, *body, fence]
    lines = site.npu_text.splitlines(keepends=True)
    method = joined([*site.npu_lines[:start], *result, *site.npu_lines[end:]])
    new_text = "".join(lines[: npu.start - 1]) + method + "".join(lines[npu.end :])
    try:
        symbols.parsed(new_text)  # kept: _unbound reads the same tree
    except SyntaxError as exc:
        raise NotPlaced(f"the port does not parse ({exc.msg}, line {exc.lineno})") from None
    moved = _moved(site.npu.text, method, (start, end), len(result))
    if moved is not None:
        shown = site.npu_lines[moved - 1].strip()
        raise NotPlaced(f"it would move NPU code into another block ({shown}, line {npu.start + moved - 1})")
    rows = range(npu.start + start, npu.start + start + len(result))
    unbound = _unbound(new_text, rows, site.group.gpu.text)
    if unbound:
        raise NotPlaced(
            f"it uses {', '.join(unbound)}, which the GPU method binds and {site.symbol} does not bind before it"
        )
    lost = _lost(site.npu.text, method)
    if lost:
        raise NotPlaced(f"it replaces the code binding {', '.join(lost)}, which the rest of {site.symbol} still reads")
    replaced = joined(site.npu_lines[start:end])
    return Port(site.group.changes, site.npu_file, site.symbol, npu.start + start, joined(raw), replaced,
                joined(result), new_text, how=how)  # fmt: skip


def _blocks(method: str) -> dict[int, tuple[int, str]]:
    """Each statement (and ``except`` clause) of a method by its first line (1-based): the first line of the
    statement whose block holds it, and which block (``body``, ``orelse``, ...)."""
    out: dict[int, tuple[int, str]] = {}

    def visit(node: ast.AST) -> None:
        for name in ("body", "handlers", "orelse", "finalbody", "cases"):
            for child in getattr(node, name, None) or []:
                if isinstance(child, ast.stmt | ast.ExceptHandler):
                    out[child.lineno] = (node.lineno if isinstance(node, ast.stmt | ast.ExceptHandler) else 0, name)
                    visit(child)
                elif isinstance(child, ast.match_case):
                    visit(child)

    visit(ast.parse(textwrap.dedent(method)))
    return out


def _moved(before: str, after: str, rows: tuple[int, int], added: int) -> int | None:
    """The first line of ``before`` (1-based) whose statement sits in another block of ``after``: the method with
    its rows [start, end) (0-based) replaced by ``added`` lines.  A statement of the rows replaced is gone; one
    whose block was the statement of a replaced row must now be in a block of a statement of the new lines.
    None when every statement kept keeps its block."""
    start, end = rows
    old, new = _blocks(before), _blocks(after)

    def at(line: int) -> int:
        return line if line <= start else line + added - (end - start)

    for line, (parent, name) in sorted(old.items()):
        if start < line <= end:
            continue
        got = new.get(at(line))
        if start < parent <= end:
            if got is None or not start < got[0] <= start + added:
                return line
        elif got != ((at(parent) if parent else 0), name):
            return line
    return None


def _lost(before: str, after: str) -> list[str]:
    """The locals a method's text binds ``before`` and no longer ``after``, which it still reads after (none when
    either does not parse on its own)."""
    try:
        old, tree = ast.parse(textwrap.dedent(before)), ast.parse(textwrap.dedent(after))
    except SyntaxError:
        return []
    reads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return sorted((_locals(old) - _locals(tree)) & reads)


def _locals(fn: ast.AST) -> set[str]:
    """The names a function binds: parameters, assignment and loop targets, ``as`` names, imports."""
    return set(_first_bound(fn))


@functools.lru_cache(maxsize=256)  # a sync asks for the same few NPU methods' locals again and again
def bound_locals(method: str) -> frozenset[str]:
    """:func:`_locals` of a method's text (none when it does not parse)."""
    try:
        return frozenset(_locals(ast.parse(textwrap.dedent(method))))
    except SyntaxError:
        return frozenset()


def _unbound(text: str, rows: range, gpu_method: str) -> list[str]:
    """The names the code at ``rows`` of ``text`` reads that the GPU method binds as locals and the innermost
    function holding those rows (the port's NPU method; its fences aside) binds nowhere, or only after them: the
    port would raise NameError.  NotPlaced when no function holds them."""
    fns = [
        n
        for n in ast.walk(symbols.parsed(text))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.lineno <= rows.start
        and (n.end_lineno or n.lineno) >= rows.stop - 2
    ]
    if not fns:
        raise NotPlaced("the port would not stay inside the NPU method")
    fn = max(fns, key=lambda n: n.lineno)
    gpu = _locals(ast.parse(textwrap.dedent(gpu_method)))
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.lineno in rows}
    return sorted((used & gpu) - {n for n, line in _first_bound(fn).items() if line < rows.stop})


def _first_bound(fn: ast.AST) -> dict[str, int]:
    """The line where a function (or any tree) first binds each name it binds: parameters, assignment and loop
    targets, ``as`` names, imports."""
    out: dict[str, int] = {}
    for node in ast.walk(fn):
        names: list[str] = []
        if isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names = [node.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names = [node.name]
        line: int = getattr(node, "lineno", 0)
        for name in names:
            out[name] = min(out.get(name, line), line)
    return out


def _check_partial(site: _Site, first: int, last: int, keep: set[int], replaced: set[int]) -> None:
    """NotPlaced when the NPU method already holds a statement of the change outside the rows it replaces (``keep``)
    more often than both the code compared with holds it outside the code the change replaces (``replaced``, its
    unit indices) and the GPU method holds it outside the change: those are the NPU copy's own statements of the code
    compared with, or of the GPU code around the change (an earlier port)."""
    n_keys = Counter(u.key for i, u in enumerate(site.nunits) if i not in keep)
    v_keys = Counter(u.key for i, u in enumerate(site.vunits) if i not in replaced)
    g_keys = Counter(u.key for u in site.gunits if not first <= u.first <= last)
    for u in site.gunits:
        if (
            first <= u.first <= last
            and not gpu_audit.is_trivial(u.key)
            and n_keys[u.key] > max(v_keys[u.key], g_keys[u.key])
        ):
            shown = site.gpu_lines[u.first].strip()
            raise NotPlaced(f"{site.symbol} already holds part of it ({shown}): a partial port to finish by hand")


def _shown(site: _Site, unit: int) -> str:
    """An NPU unit's first line, as written."""
    return site.npu_lines[site.nunits[unit].first].strip()


def _place(
    group: _Group,
    vllm: symbols.Symbol,
    npu_text: str,
    npu_file: str,
    symbol: str,
    rules: Rules,
    base: str = "vLLM",
    since: bool = False,
) -> Port:
    """The port of ``group`` into ``symbol``: ``vllm`` is the method the GPU one is compared with (vLLM's, or the
    GPU method of the series' release, named by ``base``, when ``since``)."""
    site = _site(group, vllm, npu_text, npu_file, symbol, rules)
    gunits, nunits, npu_lines = site.gunits, site.nunits, site.npu_lines
    n_keys = [u.key for u in nunits]
    first, last, v_idx = _replaced(group, gunits, site.vunits, n_keys if since else None)
    upstream = [site.vunits[i].key for i in v_idx]
    before = [u.key for u in gunits if u.first < first]
    after = [u.key for u in gunits if u.first > last]
    how = ""
    after_anchor = False  # inserted after the NPU statement standing for the GPU one before it
    if upstream:
        hits = _run(upstream, n_keys)
        if len(hits) > 1:  # the one the GPU neighbours point at
            n = len(upstream)
            hits = [
                h
                for h in hits
                if (before and h and n_keys[h - 1] == before[-1])
                or (after and h + n < len(n_keys) and n_keys[h + n] == after[0])
            ]
        if len(hits) != 1:
            where = "more than once" if hits else "nowhere"
            shown = site.vllm_lines[site.vunits[v_idx[0]].first].strip()
            why = f"the {base} code it replaces ({len(upstream)} statement(s) from {shown}) is {where} in {symbol}"
            return _merge_between(site, first, last, why)
        lo, hi = hits[0], hits[0] + len(upstream) - 1
        start, end = nunits[lo].first, max(u.last for u in nunits[lo : hi + 1]) + 1
        g_anchor, n_anchor = next(u for u in gunits if u.first >= first).first, nunits[lo].first
        keep = set(range(lo, hi + 1))
    else:
        p = _anchor(before, n_keys, before=True)
        q = _anchor(after, n_keys, before=False, after=-1 if p is None else p)
        if p is None and q is None and before:  # the statement before it, changed on NPU
            p = similar(before[-1], n_keys)
            how = "" if p is None else f"after the NPU statement most like the GPU one before it: {_shown(site, p)}"
        if p is None and q is None:
            raise NotPlaced(f"neither the GPU code before it nor the code after it is in {symbol}")
        if p is not None:
            after_anchor = True
            start = nunits[p].last + 1
            while start < len(npu_lines) and start in {e for _s, e in site.blocks}:
                start += 1  # after the closing fence of the omni block the anchor ends
            g_anchor, n_anchor = [u for u in gunits if u.first < first][-1].first, nunits[p].first
        else:
            assert q is not None
            start = nunits[q].first
            while start - 1 in {s for s, _e in site.blocks}:
                start -= 1  # before the opening fence of the omni block the anchor starts
            g_anchor, n_anchor = next(u for u in gunits if u.first > last).first, nunits[q].first
        end = start
        keep = set()
    _check_partial(site, first, last, keep, set(v_idx))
    raw = site.raw(first, last)
    delta = anchors.indent_of(npu_lines[n_anchor]) - anchors.indent_of(site.gpu_lines[g_anchor])
    body = [reindent(rules.translate(line), delta) for line in raw]
    if after_anchor:
        end = start = _past_block(npu_lines, start, min(anchors.indent_of(line) for line in body if line.strip()))
    return _finish(site, start, end, body, raw, how)


def _past_block(lines: Sequence[str], start: int, indent: int) -> int:
    """Where code at ``indent`` goes after row ``start - 1``: past the rows that follow it indented deeper (the
    rest of the block the GPU anchor ended, which the NPU method goes on with), so that no NPU line changes
    block."""
    row = end = start
    while row < len(lines) and (not lines[row].strip() or anchors.indent_of(lines[row]) > indent):
        row += 1
        end = row if lines[row - 1].strip() else end
    return end


def _npu_match(site: _Site, key: str, lo: int = 0) -> int | None:
    """The NPU unit (from ``lo`` on) that is ``key`` (the one occurrence), else the one most like it."""
    hits = [i for i in range(lo, len(site.nunits)) if site.nunits[i].key == key]
    if len(hits) == 1:
        return hits[0]
    return None if hits else similar(key, [u.key for u in site.nunits], lo)


def _merge_between(site: _Site, first: int, last: int, why: str) -> Port:
    """The port of GPU rows [first, last] when the code they replace is not verbatim in the NPU method: the nearest
    GPU statements around them (at most :data:`_MAX_AROUND` away) that are the code compared with too and that the
    NPU method holds (the one occurrence, else the one statement most like it) bound three regions, merged with
    pq's three-way merge: the NPU code between them onto the GPU code, against the code compared with.  Only edits
    of the two sides that do not overlap are merged (:data:`_DISJOINT`): a conflict, a region where one side's
    text won over the other's, or far more NPU statements there than in the code compared with, places nothing.
    ``why``: the reason it was not verbatim."""
    gunits, vunits, nunits = site.gunits, site.vunits, site.nunits
    ops = opcodes([u.key for u in vunits], [u.key for u in gunits])
    g2v = {j: i1 + j - j1 for tag, i1, _i2, j1, j2 in ops if tag == "equal" for j in range(j1, j2)}
    before = [j for j, u in enumerate(gunits) if u.first < first and j in g2v][-_MAX_AROUND:]
    after = [j for j, u in enumerate(gunits) if u.first > last and j in g2v][:_MAX_AROUND]
    found = [(j, n) for j in reversed(before) if (n := _npu_match(site, gunits[j].key)) is not None][:1]
    lo = found[0][1] + 1 if found else 0
    found += [(j, n) for j in after if (n := _npu_match(site, gunits[j].key, lo)) is not None][:1]
    if len(found) != 2 or found[0][0] > first or found[1][1] <= found[0][1]:
        raise NotPlaced(f"{why}, and the GPU statements around it are not both there")
    (gp, p), (gq, q) = found
    vp, vq = g2v[gp], g2v[gq]
    if q - p > vq - vp + _MAX_BETWEEN:
        raise NotPlaced(f"{why}, and {site.symbol} holds {q - p - 1} statements where it had {vq - vp - 1}")
    n_between, v_between = [u.key for u in nunits[p + 1 : q]], [u.key for u in vunits[vp + 1 : vq]]
    if n_between and v_between and difflib.SequenceMatcher(None, n_between, v_between).ratio() < SIMILAR:
        raise NotPlaced(f"{why}, and the NPU code where it goes is not like the code it replaces")
    start, end = nunits[p].last + 1, nunits[q].first
    npu_indent = anchors.indent_of(site.npu_lines[nunits[p].first])
    g_delta = npu_indent - anchors.indent_of(site.gpu_lines[gunits[gp].first])
    v_delta = npu_indent - anchors.indent_of(site.vllm_lines[vunits[vp].first])
    ours = [line for line in site.npu_lines[start:end] if not anchors.FENCE.match(line)]
    base = [reindent(line, v_delta) for line in site.vllm_lines[vunits[vp].last + 1 : vunits[vq].first]]
    raw = site.raw(gunits[gp].last + 1, gunits[gq].first - 1)
    theirs = [reindent(site.rules.translate(line), g_delta) for line in raw]
    merged = three_way.merge3(joined(base), joined(ours), joined(theirs))
    if any(r.kind not in _DISJOINT for r in merged.regions):
        raise NotPlaced(f"{why}, and merging it with the NPU code there conflicts")
    body = merged.text.splitlines()
    while body and not body[-1].strip():
        body.pop()
    while body and not body[0].strip():
        body.pop(0)
    if not body or [line for line in body if line.strip()] == [line for line in ours if line.strip()]:
        raise NotPlaced(f"{why}, and merging it with the NPU code there changes nothing")
    _check_partial(site, first, last, set(range(p + 1, q)), set(range(vp + 1, vq)))
    how = f"merged with the NPU code between {_shown(site, p)} and {_shown(site, q)}"
    return _finish(site, start, end, body, site.raw(first, last), how)


def sync(
    changes: Sequence[GpuChange],
    gpu_files: Mapping[str, str],
    vllm_runner: str,
    npu_files: Mapping[str, str],
    rules: Rules,
    since: Since | None = None,
    *,
    mirror: gpu_audit.Mirror,
) -> tuple[list[Port | Unplaced], dict[str, str]]:
    """Port the unported ``changes`` (the audit of these files) in GPU file and line order, each onto the
    NPU modules the ones before left; returns each outcome and the NPU modules after them all.  A change that
    cannot be placed against vLLM's method is placed against the GPU method of ``since`` (the release the NPU
    series ports), when it has one: the NPU method then holds that release's omni code, which the change updates.
    ``mirror``: the two upstream classes (the queue's: :func:`gpu_audit.mirror`)."""
    m = mirror
    vllm_syms = symbols.symbols_ast(vllm_runner, path=m.gpu_file)
    files = dict(npu_files)
    out: list[Port | Unplaced] = []
    for group in _groups([c for c in changes if not c.ported], gpu_files):
        if isinstance(group, Unplaced):
            out.append(group)
            continue
        change = group.changes[0]
        hunk = joined(group.gpu.text.splitlines()[group.first : group.last + 1])
        npu_sym = (
            method_at(npu_files[change.npu_file], change.npu_file, line=change.npu_line)
            if change.npu_file in npu_files and change.npu_line
            else None
        )
        if npu_sym is None:
            why = f"no NPU method to place it into ({change.reason})"
            out.append(Unplaced(group.changes, why, change.npu_file, gpu_hunk=hunk))
            continue
        vsym = vllm_syms.get(f"{m.gpu_class}.{change.method}")
        try:
            if vsym is None and since is None:
                raise NotPlaced(f"vLLM's runner has no {m.gpu_class}.{change.method}")
            if vsym is None:
                raise NotPlaced("")  # an omni method: compared with the release's GPU method only
            port = _place(group, vsym, files[change.npu_file], change.npu_file, npu_sym.name, rules)
        except NotPlaced as exc:
            placed = _against_since(group, since, files[change.npu_file], change.npu_file, npu_sym.name, rules)
            if isinstance(placed, str):
                why = "; ".join(w for w in (str(exc), placed) if w)
                out.append(Unplaced(group.changes, why, change.npu_file, npu_sym.name, hunk))
                continue
            port = placed
        port = completed(port, gpu_files[change.gpu_file], change.gpu_file, m)
        files[change.npu_file] = port.text
        out.append(port)
    return out, files


def _against_since(
    group: _Group, since: Since | None, npu_text: str, npu_file: str, symbol: str, rules: Rules
) -> Port | str:
    """The port of ``group`` placed against the GPU method of ``since``, else why not ("" when there is none)."""
    if since is None:
        return ""
    old = since.method(group.changes[0].gpu_file, group.gpu.name)
    if old is None or old.text == group.gpu.text:
        return ""
    try:
        port = _place(group, old, npu_text, npu_file, symbol, rules, base=f"{since.label} GPU", since=True)
    except NotPlaced as exc:
        return f"against {since.label}'s GPU method: {exc}"
    how = f"updating the omni code of {since.label}'s {group.gpu.name}"
    return replace(port, how=f"{how}; {port.how}" if port.how else how)
