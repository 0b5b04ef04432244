"""Porting the omni changes of the GPU runners that the NPU runners lack (``pq sync-gpu``): pure logic.

:func:`patch_queue.checks.gpu_audit.audit` lists the omni edits of vllm-omni's GPU copies of
vLLM's ``GPUModelRunner`` methods and says which the NPU runners lack.  :func:`sync` ports each
of those into the NPU method the audit names, one at a time (a later port may anchor on an earlier
one), and never guesses:

1. **Translation**: every line of the GPU hunk goes through the ordered rules of
   ``gpu_sync.toml`` (``CUDAGraphWrapper`` -> ``ACLGraphWrapper``, ``set_forward_context`` ->
   ``set_ascend_forward_context``, ...), extended by the project's ``patches/gpu-sync-rules.toml``.
2. **Anchors**: the GPU code lines right before and right after the change (other unported changes
   skipped), translated and normalised like the audit's code lines, as the shortest run that occurs
   once in the NPU method (the run before, then the run after).  When neither is there (the NPU
   copy rewrote the statement before it, e.g. its own ``_build_attention_metadata(...)`` call), the
   insertion goes after the one NPU statement most like the GPU statement before it (difflib's ratio
   of the normalised code at least :data:`_SIMILAR`, no other as close), and the port says so.
3. **What it replaces**: the same anchors in vLLM's method give the upstream code the change
   replaced (none for an insertion).  The NPU code between the anchors must be that code
   (normalised), else the NPU method diverged there and the change is reported, not placed.
   When an anchor is itself omni code (vLLM lacks it), the NPU side must have nothing between the
   anchors: an insertion.
4. **The port**: the translated hunk, re-indented by the NPU anchor's indentation, between two
   ``Omni-new`` fence lines at the indentation of its shallowest line.  The module must still
   parse, and the port must not read a local name of the GPU method that the NPU method never binds
   (it would raise ``NameError``), else the change is reported.

A change that cannot be placed (no NPU method to hold it, an anchor absent or ambiguous, diverged
NPU code, a result that does not parse or reads an unbound local) comes back as :class:`Unplaced` with the reason.

:func:`copy_helpers` then copies the whole omni helper methods of a GPU runner class (``self.X`` it defines
itself, not vLLM's) that its NPU counterpart calls and lacks, when the NPU class does not inherit the GPU class
(``NPUARModelRunner``, ``NPUGenerationModelRunner``): translated by the same rules, the GPU class name read as
the NPU one, inside one fence pair at class-body indentation after the calling method, with its imports, and
the helpers it calls in turn.  A helper that calls ``super()`` or reads ``self.attr`` that nothing in the NPU
class's MRO (NPU classes, the omni GPU classes they inherit, the upstream runners) sets is not copied.
"""

from __future__ import annotations

import ast
import difflib
import re
import textwrap
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from patch_queue.checks import gpu_audit
from patch_queue.checks.gpu_audit import GpuChange
from patch_queue.errors import QueueError
from patch_queue.merge import anchors, symbols
from patch_queue.series import reimport

USER_RULES = "gpu-sync-rules.toml"
BUILTIN = "patch_queue/checks/gpu_sync.toml"
# the longest run of code lines tried to make an anchor unique
_MAX_ANCHOR = 8
# two statements this similar (difflib's ratio) are one edited statement
_SIMILAR = 0.6


# -- the translation rules -------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    id: str
    find: str
    replace: str
    regex: bool = True
    note: str = ""

    def apply(self, line: str) -> str:
        return re.sub(self.find, self.replace, line) if self.regex else line.replace(self.find, self.replace)


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...]
    fence: str

    def translate(self, line: str) -> str:
        for rule in self.rules:
            line = rule.apply(line)
        return line


def parse_rules(text: str, *, path: str) -> tuple[list[Rule], str | None]:
    """The rules of one rules file, and its ``fence`` (None when it sets none)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise QueueError(f"not valid TOML: {exc}", path=path) from None
    fence = data.get("fence")
    if fence is not None and not (isinstance(fence, str) and anchors.FENCE.match(fence)):
        raise QueueError("fence must be an Omni-new fence comment line (# ---- Omni-new ----)", path=path)
    rules: list[Rule] = []
    for i, raw in enumerate(data.get("rule", [])):
        where = f"rule[{i}]"
        if not isinstance(raw, dict):
            raise QueueError(f"{where} must be a table", path=path)
        for key in ("id", "find"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise QueueError(f"{where}.{key} must be a non-empty string", path=path)
        if not isinstance(raw.get("replace"), str):
            raise QueueError(f"{where} ({raw['id']}).replace must be a string", path=path)
        regex = raw.get("regex", True)
        if not isinstance(regex, bool):
            raise QueueError(f"{where} ({raw['id']}).regex must be true or false", path=path)
        rule = Rule(raw["id"], raw["find"], raw["replace"], regex, str(raw.get("note", "")))
        if regex:
            try:
                rule.apply("")
                re.compile(rule.find)
            except re.error as exc:
                raise QueueError(f"{where} ({rule.id}): bad find or replace: {exc}", path=path) from None
        rules.append(rule)
    return rules, fence


def load_rules(project_patches: Path | None = None) -> Rules:
    """The built-in rules with the project's ``patches/gpu-sync-rules.toml`` applied: a rule with a
    built-in id replaces it in place, a new one goes after the built-in ones."""
    text = resources.files("patch_queue.checks").joinpath("gpu_sync.toml").read_text(encoding="utf-8")
    builtin, fence = parse_rules(text, path=BUILTIN)
    rules = {r.id: r for r in builtin}
    if project_patches is not None and (project_patches / USER_RULES).is_file():
        user = project_patches / USER_RULES
        extra, user_fence = parse_rules(user.read_text(encoding="utf-8"), path=str(user))
        rules.update((r.id, r) for r in extra)
        fence = user_fence or fence
    assert fence is not None, "the built-in rules set the fence"
    return Rules(tuple(rules.values()), fence.strip())


# -- placement -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Port:
    """Omni GPU changes (one, or several in one statement) written into an NPU method."""

    changes: tuple[GpuChange, ...]
    npu_file: str
    symbol: str  # Class.method on the NPU side
    line: int  # 1-based: the opening fence in the new module text
    gpu_hunk: str  # the GPU lines ported, as written
    replaced: str  # the NPU lines the port replaced ("" for an insertion)
    result: str  # what was written, fences included
    text: str  # the whole new module
    missing_names: tuple[str, ...] = ()  # names of the GPU module the NPU module neither defines nor imports
    how: str = ""  # how it was placed, when not at verbatim anchors
    imports: tuple[str, ...] = ()  # the import statements added for it (reimport's messages)
    import_lines: int = 0  # lines the imports added above the method


@dataclass(frozen=True)
class Unplaced:
    """Omni GPU changes that were not ported, and why."""

    changes: tuple[GpuChange, ...]
    reason: str
    npu_file: str = ""
    symbol: str = ""
    gpu_hunk: str = ""


class _NotPlaced(Exception):
    pass


def _joined(lines: Iterable[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _method(text: str, path: str, *, line: int = 0, name: str = "") -> symbols.Symbol | None:
    """The method named ``name``, else the one holding ``line``."""
    for sym in symbols.symbols_ast(text, path=path).values():
        if sym.is_method and (sym.name == name if name else sym.start <= line <= sym.end):
            return sym
    return None


def _code(lines: Sequence[str]) -> dict[int, str]:
    """0-based row -> the normalised code of that line (rows without code are absent)."""
    return {r - 1: c for r, c in gpu_audit.code_lines(_joined(lines)).code.items()}


def _anchor(run: Sequence[str], target: Sequence[str], *, before: bool, after: int = -1) -> int | None:
    """Index in ``target`` of the line next to the change: the shortest run of ``run`` next to it (its
    tail when ``before``, else its head) that occurs once in ``target`` after ``after``.  None when the
    nearest line is absent; _NotPlaced when every run occurs more than once."""
    for k in range(1, min(_MAX_ANCHOR, len(run)) + 1):
        keys = list(run[-k:] if before else run[:k])
        hits = [i for i in range(after + 1, len(target) - k + 1) if list(target[i : i + k]) == keys]
        if not hits:
            return None
        if len(hits) == 1:
            return hits[0] + k - 1 if before else hits[0]
    if not run:
        return None
    raise _NotPlaced(f"the code {'before' if before else 'after'} it occurs more than once in the method")


def _statements(text: str) -> list[tuple[int, int, int]]:
    """(first, last header row, last row) of every statement of a method (0-based rows); a simple
    statement is all header."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return []
    out: list[tuple[int, int, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.stmt, ast.ExceptHandler)) and not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            end = (node.end_lineno or node.lineno) - 1
            body = getattr(node, "body", None)
            header = max(node.lineno - 1, body[0].lineno - 2) if isinstance(body, list) and body else end
            out.append((node.lineno - 1, header, end))
    return sorted(out)


def _whole(first: int, last: int, stmts: Sequence[tuple[int, int, int]]) -> tuple[int, int]:
    """[first, last] widened to whole statements: every statement whose header it touches (a simple
    statement is all header)."""
    while True:
        wider = [(s, end) for s, header, end in stmts if s <= last and header >= first]
        lo, hi = min([first, *(s for s, _e in wider)]), max([last, *(e for _s, e in wider)])
        if (lo, hi) == (first, last):
            return first, last
        first, last = lo, hi


@dataclass(frozen=True)
class _Unit:
    """A statement (a compound one: its header), or a clause line (``else:``), as normalised code."""

    first: int  # 0-based rows
    last: int  # the statement's last row (a compound statement: its header's)
    key: str


def _units(lines: Sequence[str]) -> list[_Unit]:
    """The units of a method's lines, in order: wrapping does not change their keys."""
    code = _code(lines)
    out: list[_Unit] = []
    covered: set[int] = set()
    for s, header, _end in _statements(_joined(lines)):
        rows = [r for r in range(s, header + 1) if r in code and r not in covered]
        if rows:
            covered.update(rows)
            out.append(_Unit(s, header, "".join(code[r] for r in rows)))
    out += [_Unit(r, r, c) for r, c in code.items() if r not in covered]
    return sorted(out, key=lambda u: u.first)


def _reindent(line: str, delta: int) -> str:
    if not line.strip():
        return ""
    if delta >= 0:
        return " " * delta + line
    return line[min(-delta, anchors.indent_of(line)) :]


def _bound_names(text: str) -> set[str]:
    """The names a module binds at its top level or imports anywhere."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    out = {
        (a.asname or a.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for a in node.names
    }
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def _bare_names(code: str) -> set[str]:
    return set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", code))


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
        gsym = _method(text, change.gpu_file, line=change.gpu_line)
        if gsym is None:
            out.append(Unplaced((change,), "not inside a method of the GPU module", gpu_hunk=_joined(change.lines)))
            continue
        first = change.gpu_line - gsym.start
        first, last = _whole(first, first + len(change.lines) - 1, _statements(gsym.text))
        prev = out[-1] if out else None
        if isinstance(prev, _Group) and prev.gpu == gsym:
            code = _code(gsym.text.splitlines())
            if first <= prev.last or not any(prev.last < r < first for r in code):
                out[-1] = _Group((*prev.changes, change), gsym, min(prev.first, first), max(prev.last, last))
                continue
        out.append(_Group((change,), gsym, first, last))
    return out


def _opcodes(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes a -> b with every uneven replacement split: a unit of b similar to one of a
    (in order) replaces it, the others of b are insertions and the others of a deletions."""
    out: list[tuple[str, int, int, int, int]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "replace" or i2 - i1 == j2 - j1:
            out.append((tag, i1, i2, j1, j2))
            continue
        i = i1
        for j in range(j1, j2):
            ratios = [difflib.SequenceMatcher(None, a[k], b[j], autojunk=False).ratio() for k in range(i, i2)]
            best = max(range(len(ratios)), key=lambda k: ratios[k], default=-1)
            if best >= 0 and ratios[best] >= _SIMILAR:
                if best:
                    out.append(("delete", i, i + best, j, j))
                out.append(("replace", i + best, i + best + 1, j, j + 1))
                i += best + 1
            else:
                out.append(("insert", i, i, j, j + 1))
        if i < i2:
            out.append(("delete", i, i2, j2, j2))
    return out


def _replaced(group: _Group, gunits: Sequence[_Unit], vunits: Sequence[_Unit]) -> tuple[int, int, list[int]]:
    """The group's rows widened over every vLLM -> GPU replacement it takes part in, and the indices of the
    vLLM units those rows stand for (none for an insertion)."""
    first, last = group.first, group.last
    g_keys, v_keys = [u.key for u in gunits], [u.key for u in vunits]
    ops = _opcodes(v_keys, g_keys)
    stmts = _statements(group.gpu.text)
    while True:
        inside = {j for j, u in enumerate(gunits) if first <= u.first <= last}
        lo, hi = first, last
        for tag, _i1, _i2, j1, j2 in ops:
            if tag == "replace" and inside & set(range(j1, j2)):
                lo, hi = min(lo, gunits[j1].first), max(hi, gunits[j2 - 1].last)
        lo, hi = _whole(lo, hi, stmts)
        if (lo, hi) == (first, last):
            break
        first, last = lo, hi
    upstream: list[int] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            upstream += [i1 + j - j1 for j in range(j1, j2) if j in inside]
        elif tag == "replace" and inside & set(range(j1, j2)):
            upstream += range(i1, i2)
    return first, last, upstream


def _run(keys: Sequence[str], target: Sequence[str]) -> list[int]:
    n = len(keys)
    return [i for i in range(len(target) - n + 1) if list(target[i : i + n]) == list(keys)]


def _similar(key: str, keys: Sequence[str], lo: int = 0) -> int | None:
    """Index in ``keys`` (from ``lo`` on) of the one statement most like ``key``: difflib's ratio at least
    :data:`_SIMILAR` and above every other's; None when there is none or two are as close."""
    if gpu_audit._is_trivial(key):
        return None
    scored = []
    for i in range(lo, len(keys)):
        m = difflib.SequenceMatcher(None, key, keys[i], autojunk=False)
        if m.real_quick_ratio() >= _SIMILAR and m.quick_ratio() >= _SIMILAR and (r := m.ratio()) >= _SIMILAR:
            scored.append((r, i))
    scored.sort(reverse=True)
    if not scored or (len(scored) > 1 and scored[1][0] == scored[0][0]):
        return None
    return scored[0][1]


@dataclass(frozen=True)
class _Site:
    """The NPU method a group goes into, and the three sides as translated lines and units."""

    group: _Group
    npu: symbols.Symbol
    npu_text: str
    npu_file: str
    rules: Rules
    npu_lines: list[str]
    nunits: list[_Unit]
    gpu_lines: list[str]
    gunits: list[_Unit]
    vllm_lines: list[str]
    vunits: list[_Unit]

    @property
    def symbol(self) -> str:
        return self.npu.name

    def raw(self, first: int, last: int) -> list[str]:
        return self.group.gpu.text.splitlines()[first : last + 1]


def _site(group: _Group, vllm: symbols.Symbol, npu_text: str, npu_file: str, symbol: str, rules: Rules) -> _Site:
    npu = _method(npu_text, npu_file, name=symbol)
    if npu is None:
        raise _NotPlaced(f"{symbol} is not in {npu_file}")
    gpu_lines = [rules.translate(line) for line in group.gpu.text.splitlines()]
    vllm_lines = [rules.translate(line) for line in vllm.text.splitlines()]
    npu_lines = npu.text.splitlines()
    return _Site(
        group, npu, npu_text, npu_file, rules, npu_lines, _units(npu_lines), gpu_lines, _units(gpu_lines),
        vllm_lines, _units(vllm_lines),
    )  # fmt: skip


def _finish(site: _Site, start: int, end: int, result: list[str], raw: list[str], how: str) -> Port:
    """The port that writes ``result`` over the NPU method's rows [start, end), once it parses."""
    npu = site.npu
    lines = site.npu_text.splitlines(keepends=True)
    new_text = "".join(lines[: npu.start - 1]) + _joined([*site.npu_lines[:start], *result, *site.npu_lines[end:]])
    new_text += "".join(lines[npu.end :])
    try:
        ast.parse(new_text)
    except SyntaxError as exc:
        raise _NotPlaced(f"the port does not parse ({exc.msg}, line {exc.lineno})") from None
    fence = next(i for i, line in enumerate(result) if anchors.FENCE.match(line))
    rows = range(npu.start + start, npu.start + start + len(result))
    unbound = _unbound(new_text, rows, site.group.gpu.text)
    if unbound:
        raise _NotPlaced(f"it uses {', '.join(unbound)}, which the GPU method binds and {site.symbol} does not")
    replaced = _joined(site.npu_lines[start:end])
    return Port(site.group.changes, site.npu_file, site.symbol, npu.start + start + fence, _joined(raw), replaced,
                _joined(result), new_text, how=how)  # fmt: skip


def _locals(fn: ast.AST) -> set[str]:
    """The names a function binds: parameters, assignment and loop targets, ``as`` names, imports."""
    out = {a.arg for a in ast.walk(fn) if isinstance(a, ast.arg)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


def _unbound(text: str, rows: range, gpu_method: str) -> list[str]:
    """The names the code at ``rows`` of ``text`` reads that the GPU method binds as locals and the innermost
    function holding those rows (the port's NPU method) binds nowhere: the port would raise NameError."""
    fn = max(
        (
            n
            for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.lineno <= rows.start
            and (n.end_lineno or n.lineno) >= rows.stop - 1
        ),
        key=lambda n: n.lineno,
    )
    gpu = _locals(ast.parse(textwrap.dedent(gpu_method)))
    npu = _locals(fn)
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.lineno in rows}
    return sorted((used & gpu) - npu)


def _check_partial(site: _Site, first: int, last: int, keep: set[int]) -> None:
    """_NotPlaced when the NPU method already holds a statement of the change outside the rows it replaces."""
    n_keys = [u.key for u in site.nunits]
    for u in site.gunits:
        if first <= u.first <= last and not gpu_audit._is_trivial(u.key):
            if any(u.key == n_keys[i] for i in range(len(n_keys)) if i not in keep):
                shown = site.gpu_lines[u.first].strip()
                raise _NotPlaced(f"{site.symbol} already holds part of it ({shown}): a partial port to finish by hand")


def _shown(site: _Site, unit: int) -> str:
    """An NPU unit's first line, as written."""
    return site.npu_lines[site.nunits[unit].first].strip()


def _place(group: _Group, vllm: symbols.Symbol, npu_text: str, npu_file: str, symbol: str, rules: Rules) -> Port:
    site = _site(group, vllm, npu_text, npu_file, symbol, rules)
    gunits, nunits, npu_lines = site.gunits, site.nunits, site.npu_lines
    first, last, v_idx = _replaced(group, gunits, site.vunits)
    upstream = [site.vunits[i].key for i in v_idx]
    before = [u.key for u in gunits if u.first < first]
    after = [u.key for u in gunits if u.first > last]
    n_keys = [u.key for u in nunits]
    how = ""
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
            raise _NotPlaced(
                f"the vLLM code it replaces ({len(upstream)} statement(s) from {shown}) is {where} in {symbol}"
            )
        lo, hi = hits[0], hits[0] + len(upstream) - 1
        start, end = nunits[lo].first, max(u.last for u in nunits[lo : hi + 1]) + 1
        g_anchor, n_anchor = next(u for u in gunits if u.first >= first).first, nunits[lo].first
        keep = set(range(lo, hi + 1))
    else:
        p = _anchor(before, n_keys, before=True)
        q = _anchor(after, n_keys, before=False, after=-1 if p is None else p)
        if p is None and q is None and before:  # the statement before it, changed on NPU
            p = _similar(before[-1], n_keys)
            how = "" if p is None else f"after the NPU statement most like the GPU one before it: {_shown(site, p)}"
        if p is None and q is None:
            raise _NotPlaced(f"neither the GPU code before it nor the code after it is in {symbol}")
        if p is not None:
            start = nunits[p].last + 1
            while start < len(npu_lines) and anchors.FENCE.match(npu_lines[start]):
                start += 1  # after the closing fence of the omni block the anchor ends
            g_anchor, n_anchor = [u for u in gunits if u.first < first][-1].first, nunits[p].first
        else:
            assert q is not None
            start = nunits[q].first
            while start > 0 and anchors.FENCE.match(npu_lines[start - 1]):
                start -= 1
            g_anchor, n_anchor = next(u for u in gunits if u.first > last).first, nunits[q].first
        end = start
        keep = set()
    _check_partial(site, first, last, keep)
    raw = site.raw(first, last)
    delta = anchors.indent_of(npu_lines[n_anchor]) - anchors.indent_of(site.gpu_lines[g_anchor])
    body = [_reindent(rules.translate(line), delta) for line in raw]
    fence = " " * min(anchors.indent_of(line) for line in body if line.strip()) + rules.fence
    return _finish(site, start, end, [fence, *body, fence], raw, how)


def _with_imports(port: Port, gpu_text: str, gpu_file: str) -> Port:
    """The port with an import of every name it uses that the NPU module does not bind, taken the way the GPU
    module binds it (:func:`patch_queue.series.reimport.reconcile`; a name the GPU module defines at its top
    level is imported from that module, ``vllm_omni.worker.<its name>``, which the NPU runners already import
    from)."""
    module = "vllm_omni.worker." + Path(gpu_file).stem
    text, changes = reimport.reconcile(port.text, new_upstream=gpu_text, old_upstream=None, upstream_module=module)
    added = tuple(c.message for c in changes if c.kind == reimport.ADDED)
    if not added:
        return port
    lines = len(text.splitlines()) - len(port.text.splitlines())
    return replace(port, text=text, line=port.line + lines, imports=added, import_lines=lines)


def sync(
    changes: Sequence[GpuChange],
    gpu_files: Mapping[str, str],
    vllm_runner: str,
    npu_files: Mapping[str, str],
    rules: Rules,
) -> tuple[list[Port | Unplaced], dict[str, str]]:
    """Port the unported ``changes`` (the audit of these files) in GPU file and line order, each onto the
    NPU modules the ones before left; returns each outcome and the NPU modules after them all."""
    vllm_syms = symbols.symbols_ast(vllm_runner, path=gpu_audit.VLLM_RUNNER)
    files = dict(npu_files)
    out: list[Port | Unplaced] = []
    for group in _groups([c for c in changes if not c.ported], gpu_files):
        if isinstance(group, Unplaced):
            out.append(group)
            continue
        change = group.changes[0]
        hunk = _joined(group.gpu.text.splitlines()[group.first : group.last + 1])
        npu_sym = (
            _method(npu_files[change.npu_file], change.npu_file, line=change.npu_line)
            if change.npu_file in npu_files and change.npu_line
            else None
        )
        if npu_sym is None:
            why = f"no NPU method to place it into ({change.reason})"
            out.append(Unplaced(group.changes, why, change.npu_file, gpu_hunk=hunk))
            continue
        vsym = vllm_syms.get(f"{gpu_audit.VLLM_CLASS}.{change.method}")
        try:
            if vsym is None:
                raise _NotPlaced(f"vLLM's runner has no {gpu_audit.VLLM_CLASS}.{change.method}")
            port = _place(group, vsym, files[change.npu_file], change.npu_file, npu_sym.name, rules)
        except _NotPlaced as exc:
            out.append(Unplaced(group.changes, str(exc), change.npu_file, npu_sym.name, hunk))
            continue
        gpu_text = gpu_files[change.gpu_file]
        port = _with_imports(port, gpu_text, change.gpu_file)
        used = _bare_names("\n".join(gpu_audit.code_lines(port.result).code.values()))
        missing = tuple(sorted((used & _bound_names(gpu_text)) - _bound_names(port.text)))
        port = replace(port, missing_names=missing)
        files[change.npu_file] = port.text
        out.append(port)
    return out, files


# -- whole helper methods --------------------------------------------------------------------

# how many helpers deep a copy follows the helpers a copied helper calls
_MAX_HELPER_DEPTH = 4
HELPER = "helper method copied"


def _self_refs(node: ast.AST, names: Iterable[str] = ()) -> list[tuple[int, str]]:
    """(line, attribute) of every ``self.X`` (or ``Name.X`` for a class name in ``names``) read under ``node``."""
    owners = {"self", *names}
    return sorted(
        (n.lineno, n.attr)
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Load)
        and isinstance(n.value, ast.Name)
        and n.value.id in owners
    )


def _assigned_attrs(text: str) -> set[str]:
    """Every ``self.X`` a text assigns (any target form), and the names its class bodies bind."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return set()
    out = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, (ast.Store, ast.Del))
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
    }
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign):
                out.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                out.add(stmt.target.id)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(stmt.name)
    return out


def _fence_row(lines: Sequence[str], row: int, indent: int) -> int:
    """``row`` (0-based insertion point between class members), moved past the closing fence when an Omni-new
    block of the class body (its fences at ``indent``) holds it."""

    def fence(line: str) -> bool:
        return bool(anchors.FENCE.match(line)) and anchors.indent_of(line) == indent

    if sum(1 for line in lines[:row] if fence(line)) % 2 == 0:
        return row
    return next((i + 1 for i in range(row, len(lines)) if fence(lines[i])), len(lines))


@dataclass(frozen=True)
class _HelperCtx:
    npu_file: str
    npu_cls: str
    gpu_file: str
    gpu_cls: str
    order: tuple[str, ...]  # the NPU class's MRO
    classes: Mapping[str, gpu_audit._Class]
    vllm_methods: frozenset[str]
    gpu_methods: Mapping[str, symbols.Symbol]
    upstream_attrs: frozenset[str]  # what the known classes of the NPU MRO outside the NPU modules set

    def resolved(self, name: str) -> bool:
        return any(c in self.classes and name in self.classes[c].methods for c in self.order)

    def wanted(self, name: str) -> bool:
        """An omni method of the GPU class itself that the NPU class does not resolve."""
        return name in self.gpu_methods and name not in self.vllm_methods and not self.resolved(name)


def _helper_ctx(
    npu_file: str, files: Mapping[str, str], gpu_files: Mapping[str, str], vllm_runner: str, ascend_runner: str
) -> list[_HelperCtx]:
    classes: dict[str, gpu_audit._Class] = {}
    for side, group in (("npu", files), ("gpu", gpu_files)):
        for path, text in sorted(group.items()):
            for name, cls in gpu_audit._classes(path, text, side).items():
                classes.setdefault(name, cls)
    upstream_attrs: set[str] = set()
    for upstream, text, side, path in (
        (gpu_audit.ASCEND_CLASS, ascend_runner, "ascend", "model_runner_v1.py"),
        (gpu_audit.VLLM_CLASS, vllm_runner, "vllm", gpu_audit.VLLM_RUNNER),
    ):
        found = gpu_audit._classes(path, text, side).get(upstream)
        if found is not None:
            classes[upstream] = replace(found, module="")
            upstream_attrs |= _assigned_attrs(text)
    vllm = classes.get(gpu_audit.VLLM_CLASS)
    vllm_methods = frozenset(vllm.methods) if vllm else frozenset()
    gpu_file = next((g for g in sorted(gpu_files) if Path(g).name == "gpu_" + Path(npu_file).name[len("npu_") :]), "")
    if not gpu_file or not Path(npu_file).name.startswith("npu_"):
        return []
    gpu_runners = [
        c
        for c in classes.values()
        if c.module == gpu_file and c.side == "gpu" and gpu_audit.VLLM_CLASS in gpu_audit._c3(c.name, classes)[1:]
    ]
    out = []
    for cls in sorted(classes.values(), key=lambda c: c.name):
        if cls.module != npu_file or cls.side != "npu":
            continue
        mro = gpu_audit._c3(cls.name, classes)
        if gpu_audit.ASCEND_CLASS not in mro[1:]:
            continue
        # the most derived GPU runner class of the counterpart module
        gpu = max(gpu_runners, key=lambda g: (len(gpu_audit._c3(g.name, classes)), g.name), default=None)
        if gpu is None or gpu.name in mro:
            continue  # the NPU class inherits the GPU class: its methods resolve there
        out.append(
            _HelperCtx(
                npu_file,
                cls.name,
                gpu_file,
                gpu.name,
                tuple(mro),
                classes,
                vllm_methods,
                gpu.methods,
                frozenset(upstream_attrs),
            )  # fmt: skip
        )
    return out


def _npu_attrs(ctx: _HelperCtx, files: Mapping[str, str], gpu_files: Mapping[str, str]) -> set[str]:
    """What the NPU class's MRO sets or defines: attributes, class names, methods (of the NPU classes, the omni GPU
    classes they inherit and the upstream runners)."""
    out = set(ctx.upstream_attrs)
    for name in ctx.order:
        cls = ctx.classes.get(name)
        if cls is None:
            continue
        out.update(cls.methods)
        if cls.side in ("npu", "gpu"):
            for sym in cls.methods.values():
                out |= _assigned_attrs(sym.text)
            text = files.get(cls.module, "") if cls.side == "npu" else gpu_files.get(cls.module, "")
            for sym in symbols.symbols_ast(text, path=cls.module).values():
                if sym.name == cls.name:
                    out |= _assigned_attrs(sym.text)
    return out


def _helper_plan(
    ctx: _HelperCtx, name: str, caller: str, have: set[str], seen: tuple[str, ...]
) -> tuple[list[tuple[str, str]], str]:
    """The helpers to copy for ``name`` as (helper, the method calling it): it, then its own helpers; or the reason
    it cannot be copied."""
    gsym = ctx.gpu_methods[name]
    try:
        tree = ast.parse(textwrap.dedent(gsym.text))
    except SyntaxError:
        return [], f"{ctx.gpu_cls}.{name} does not parse on its own"
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super" for n in ast.walk(tree)):
        return [], f"{ctx.gpu_cls}.{name} calls super(), which resolves elsewhere in {ctx.npu_cls}"
    own = _assigned_attrs(gsym.text)
    order: list[tuple[str, str]] = [(name, caller)]
    for _line, attr in _self_refs(tree, (ctx.gpu_cls,)):
        if any(attr == h for h, _c in order):
            continue
        if ctx.wanted(attr) and attr not in have:
            if attr in seen or len(seen) >= _MAX_HELPER_DEPTH:
                return (
                    [],
                    f"{ctx.gpu_cls}.{name} needs {attr}, a helper {'cycle' if attr in seen else 'chain'} too deep",
                )
            sub, why = _helper_plan(ctx, attr, name, have, (*seen, name))
            if why:
                return [], f"it calls {attr}, which is not copied: {why}"
            order += [s for s in sub if all(s[0] != h for h, _c in order)]
        elif attr not in have and attr not in own and attr not in ctx.gpu_methods:
            return [], f"{ctx.gpu_cls}.{name} reads self.{attr}, which {ctx.npu_cls} never sets"
    return order, ""


def copy_helpers(
    files: Mapping[str, str],
    gpu_files: Mapping[str, str],
    vllm_runner: str,
    ascend_runner: str,
    rules: Rules,
) -> tuple[list[Port | Unplaced], dict[str, str]]:
    """Copy every omni helper method of a GPU runner class that its NPU counterpart (a class that does not
    inherit the GPU class) calls and lacks: the whole method, translated, fenced at class-body indentation,
    after the NPU method calling it (else at the class end), with the imports it needs.  A helper that calls
    ``super()`` or reads an attribute the NPU class never sets comes back as :class:`Unplaced`."""
    out_files = dict(files)
    out: list[Port | Unplaced] = []
    refused: set[tuple[str, str]] = set()
    for npu_file in sorted(files):
        for ctx0 in _helper_ctx(npu_file, out_files, gpu_files, vllm_runner, ascend_runner):
            while True:
                ctx = next(c for c in _helper_ctx(npu_file, out_files, gpu_files, vllm_runner, ascend_runner)
                           if c.npu_cls == ctx0.npu_cls)  # fmt: skip
                text = out_files[npu_file]
                syms = symbols.symbols_ast(text, path=npu_file)
                prefix = ctx.npu_cls + "."
                calls = [
                    (line, attr, sym.name[len(prefix) :])
                    for sym in syms.values()
                    if sym.name.startswith(prefix) and sym.is_method
                    for line, attr in _self_refs(ast.parse(textwrap.dedent(sym.text)), (ctx.npu_cls,))
                ]
                todo = [(attr, caller) for _l, attr, caller in calls if ctx.wanted(attr)]
                todo = [t for t in dict.fromkeys(todo) if (ctx.npu_cls, t[0]) not in refused]
                if not todo:
                    break
                name, caller = todo[0]
                have = _npu_attrs(ctx, out_files, gpu_files)
                plan, why = _helper_plan(ctx, name, caller, have, ())
                if why:
                    refused.add((ctx.npu_cls, name))
                    gsym = ctx.gpu_methods[name]
                    change = GpuChange(ctx.gpu_file, name, gsym.start, tuple(gsym.text.splitlines()), False, HELPER,
                                       npu_file)  # fmt: skip
                    out.append(Unplaced((change,), f"helper {name} of {ctx.npu_cls}.{caller} not copied: {why}",
                                        npu_file, f"{ctx.npu_cls}.{caller}", gsym.text))  # fmt: skip
                    continue
                for helper, calling in plan:
                    port = _copy_helper(ctx, helper, calling, out_files[npu_file], rules)
                    port = _with_imports(port, gpu_files[ctx.gpu_file], ctx.gpu_file)
                    used = _bare_names("\n".join(gpu_audit.code_lines(port.result).code.values()))
                    missing = tuple(sorted((used & _bound_names(gpu_files[ctx.gpu_file])) - _bound_names(port.text)))
                    port = replace(port, missing_names=missing)
                    out_files[npu_file] = port.text
                    out.append(port)
    return out, out_files


def _copy_helper(ctx: _HelperCtx, name: str, caller: str, text: str, rules: Rules) -> Port:
    gsym = ctx.gpu_methods[name]
    syms = symbols.symbols_ast(text, path=ctx.npu_file)
    cls = syms[ctx.npu_cls]
    after = syms.get(f"{ctx.npu_cls}.{caller}")
    lines = text.splitlines()
    body_indent = min(
        (s.indent for n, s in syms.items() if n.startswith(ctx.npu_cls + ".") and s.is_method), default=cls.indent + 4
    )
    row = _fence_row(lines, (after or cls).end, body_indent)
    delta = body_indent - gsym.indent
    own = re.compile(r"\b" + re.escape(ctx.gpu_cls) + r"\b")
    body = [_reindent(own.sub(ctx.npu_cls, rules.translate(line)), delta) for line in gsym.text.splitlines()]
    fence = " " * body_indent + rules.fence
    result = [fence, *body, fence]
    new_lines = [*lines[:row], "", *result, *lines[row:]]
    new_text = _joined(new_lines)
    ast.parse(new_text)  # the GPU method parses, and so does the NPU class around it
    change = GpuChange(
        ctx.gpu_file, name, gsym.start, tuple(gsym.text.splitlines()), False, HELPER, ctx.npu_file, row + 2
    )
    how = f"as a whole method after {ctx.npu_cls}.{caller}" if after else "as a whole method at the class end"
    return Port((change,), ctx.npu_file, f"{ctx.npu_cls}.{name}", row + 2, gsym.text, "", _joined(["", *result]),
                new_text, how=f"{HELPER} ({how})")  # fmt: skip
