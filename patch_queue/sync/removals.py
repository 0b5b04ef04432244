"""Omni GPU code removed since the release the NPU series ports, removed on NPU where it is held the same way.

For each method of a GPU runner at the series' release (:class:`~patch_queue.sync.ports.Since`) and now, the
statements the GPU side deleted (difflib's deletions of the two methods' statements, translated by the rules), less
the ones vllm-ascend's runner holds (upstream code is upstream's to remove): when the NPU module's runner method holds
that run of statements the same way (statement for statement, in order, with nothing else between them), they go:
a removal :class:`~patch_queue.sync.ports.Port` with an empty result.  A compound statement whose whole block the GPU
side deleted goes whole on NPU when its body is held the same way and only its header differs (the NPU guards the same
code its own way: ``if self.vllm_config.model_config.enable_return_routed_experts:`` for the GPU's
``if self.routed_experts_initialized:``); its ``how`` says so.  Not removed, and listed as unplaced with why: a run the
NPU method lacks or holds in part, a removal that would leave a local read but no longer bound, or one that leaves
the method uncompilable.  Removing every statement of an ``Omni-new`` block takes its fences too.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Mapping, Sequence, Set

from patch_queue.checks import gpu_audit
from patch_queue.checks.gpu_audit import GpuChange
from patch_queue.merge import anchors, symbols
from patch_queue.sync import statements
from patch_queue.sync.ports import Port, Since, Unplaced, joined
from patch_queue.sync.translation import Rules

REMOVED = "removed on the GPU side"
GONE = "its names gone from the GPU runners"
_WORD = re.compile(r"[A-Za-z_]\w*")
_COMMON = frozenset({"self", "None", "True", "False", "not", "and", "or", "is", "in", "if", "else", "elif", "for"})
_FENCE = "Omni-new"


def is_removal(result: Port | Unplaced) -> bool:
    return result.changes[0].reason.startswith(REMOVED)


def is_dropped_feature(result: Port | Unplaced) -> bool:
    """A removal whose code the GPU side dropped, not moved: a name it uses occurs in no GPU runner any more."""
    return is_removal(result) and GONE in result.changes[0].reason


def gone_names(lines: Sequence[str], gpu_files: Mapping[str, str]) -> list[str]:
    """The names the lines use from outside them (not the locals they bind themselves) that no GPU runner module
    uses any more: what the removed code worked with is gone, not moved."""
    used = {w for line in lines for w in _WORD.findall(line.split("#", 1)[0])} - _COMMON
    try:
        tree = ast.parse(textwrap.dedent(joined(lines)))
    except SyntaxError:
        return []  # not whole statements: nothing to judge by
    own = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and _stores(n)}
    own |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    everywhere = {w for text in gpu_files.values() for w in _WORD.findall(text)}
    return sorted(used - own - everywhere)


def removals(
    since: Since,
    gpu_files: Mapping[str, str],
    npu_files: Mapping[str, str],
    ascend: str,
    rules: Rules,
    *,
    only: Set[tuple[str, int]] | None = None,
) -> tuple[list[Port | Unplaced], dict[str, str]]:
    """The removals of omni GPU statements deleted since ``since`` from the NPU modules, in GPU file and line
    order, each on the modules the ones before left (``only``: just the removals of these GPU file and lines);
    returns each outcome and the NPU modules after them all."""
    upstream = symbols.symbols_ast(ascend, path="upstream")
    files = dict(npu_files)
    out: list[Port | Unplaced] = []
    for gpu_file in sorted(gpu_files):
        npu_file = gpu_audit.npu_counterpart(gpu_file, files)
        if npu_file is None or gpu_file not in since.files:
            continue
        now = symbols.symbols_ast(gpu_files[gpu_file], path=gpu_file)
        for name, old in symbols.symbols_ast(since.files[gpu_file], path=gpu_file).items():
            new = now.get(name)
            if not old.is_method or new is None or new.text == old.text:
                continue
            method = name.rsplit(".", 1)[-1]
            theirs = next((s for n, s in upstream.items() if n.rsplit(".", 1)[-1] == method and s.is_method), None)
            held = set() if theirs is None else {u.key for u in statements.units(theirs.text.splitlines())}
            for run in _deleted_runs(old, new, rules):
                if only is not None and (gpu_file, old.start + run[0].first) not in only:
                    continue
                first = old.text.splitlines()[run[0].first].strip()
                if rules.decline_of(gpu_file, name.rsplit(".", 1)[-1], first) is not None:
                    continue  # the project declines it (pq sync-gpu --decline)
                result = _remove(gpu_file, name, old, run, files, npu_file, since.label, held, gpu_files)
                if isinstance(result, Port):
                    files[npu_file] = result.text
                if result is not None:
                    out.append(result)
    return out, files


def _deleted_runs(old: symbols.Symbol, new: symbols.Symbol, rules: Rules) -> list[list[statements.Unit]]:
    """The runs of the old method's units the new one deleted (trivial units left out)."""
    old_lines = old.text.splitlines()
    old_units = statements.units([rules.translate(line) for line in old_lines])
    new_units = statements.units([rules.translate(line) for line in new.text.splitlines()])
    runs = []
    for tag, i1, i2, _j1, _j2 in statements.opcodes([u.key for u in old_units], [u.key for u in new_units]):
        if tag != "delete":
            continue
        run = [u for u in old_units[i1:i2] if not gpu_audit.is_trivial(u.key)]
        if run:
            runs.append(run)
    return runs


def _remove(
    gpu_file: str,
    name: str,
    old: symbols.Symbol,
    run: Sequence[statements.Unit],
    files: Mapping[str, str],
    npu_file: str,
    label: str,
    upstream: set[str],
    gpu_files: Mapping[str, str],
) -> Port | Unplaced | None:
    """The removal of ``run`` from the NPU method, why not, or None when the NPU method holds none of it."""
    old_lines = old.text.splitlines()
    gpu_lines = tuple(old_lines[run[0].first : run[-1].last + 1])
    method = name.rsplit(".", 1)[-1]
    gone = gone_names(gpu_lines, gpu_files)
    reason = f"{REMOVED} since {label}" + (f"; {GONE}: {', '.join(gone)}" if gone else "")
    change = GpuChange(gpu_file, method, old.start + run[0].first, gpu_lines, False, reason, npu_file)
    hunk = joined(old_lines[run[0].first : _block_end(old_lines, run[-1]) + 1])
    text = files[npu_file]
    owners = [
        s
        for s in symbols.symbols_ast(text, path=npu_file).values()
        if s.is_method and s.name.count(".") == 1 and s.name.rsplit(".", 1)[-1] == method
    ]
    held = {u.key for o in owners for u in statements.units(o.text.splitlines())}
    if not any(u.key in held for u in run if not u.key.endswith(":")):
        return None  # the NPU side never had it: nothing to remove
    if len(owners) != 1:
        return Unplaced((change,), "no one NPU method overrides it", npu_file, gpu_hunk=hunk)
    npu = owners[0]
    change = GpuChange(gpu_file, method, change.gpu_line, gpu_lines, False, reason, npu_file, npu.start)
    lines = npu.text.splitlines()
    found = _held(lines, [u.key for u in run])
    if found is None:
        why = "the NPU method does not hold these statements the same way: not removed"
        return Unplaced((change,), why, npu_file, npu.name, hunk)
    first, last, how = found
    if any(u.key in upstream and not u.key.endswith(":") for u in statements.units(lines[first : last + 1])):
        why = "the upstream method holds some of these statements too (upstream code is upstream's): not removed"
        return Unplaced((change,), why, npu_file, npu.name, hunk)
    first, last = _with_fences(lines, first, last)
    kept = lines[:first] + lines[last + 1 :]
    problem = _broken(lines[first : last + 1], kept)
    if problem:
        return Unplaced((change,), f"removing them {problem}: not removed", npu_file, npu.name, hunk)
    module = text.splitlines(keepends=True)
    start = npu.start - 1  # the method's first row in the module
    new_text = "".join(module[: start + first] + module[start + last + 1 :])
    replaced = joined(lines[first : last + 1])
    return Port((change,), npu_file, npu.name, npu.start + first, hunk, replaced, "", new_text, how=how)


def _block_end(lines: Sequence[str], unit: statements.Unit) -> int:
    """The last row of the statement ``unit`` opens (its block, for a compound header)."""
    if not lines[unit.last].rstrip().endswith(":"):
        return unit.last
    return _past(lines, unit.last) - 1


def _past(lines: Sequence[str], header: int) -> int:
    """The first row after the block of the compound header at ``header`` (blank lines at its end left out)."""
    indent = anchors.indent_of(lines[header])
    end = header + 1
    last = header
    while end < len(lines):
        line = lines[end]
        if line.strip() and anchors.indent_of(line) <= indent:
            break
        if line.strip():
            last = end
        end += 1
    return last + 1


def _held(lines: Sequence[str], keys: Sequence[str]) -> tuple[int, int, str] | None:
    """(first row, last row, how) of the one run of the NPU method's units that holds ``keys`` in order with no
    other code between them; a compound header may differ when the NPU block is that whole run.  None when there
    is no such run, or more than one."""
    units = [u for u in statements.units(list(lines)) if not gpu_audit.is_trivial(u.key)]
    ukeys = [u.key for u in units]
    found: list[tuple[int, int, str]] = []
    n = len(keys)
    for i in range(len(units) - n + 1):
        window = ukeys[i : i + n]
        if window == list(keys):
            found.append((units[i].first, _block_end(lines, units[i + n - 1]), ""))
        elif keys[0].endswith(":") and window[1:] == list(keys[1:]) and _same_kind(window[0], keys[0]):
            end = _past(lines, units[i].last) - 1  # the NPU block: exactly the run's body, nothing more
            if n > 1 and end == _block_end(lines, units[i + n - 1]) and _inside(units, i, n, end):
                how = f"the NPU block's header differs: `{lines[units[i].first].strip()}`"
                found.append((units[i].first, end, how))
    if len(found) != 1:
        return None
    return found[0]


def _inside(units: Sequence[statements.Unit], i: int, n: int, end: int) -> bool:
    """Whether the units after the header at ``i`` up to the block's end ``end`` are exactly the run's."""
    inner = [u for u in units if units[i].last < u.first <= end]
    return len(inner) == n - 1


def _same_kind(a: str, b: str) -> bool:
    """Two compound headers of the same statement kind (``if``, ``with``, ``for`` ...)."""
    word = re.compile(r"[A-Za-z_]\w*")
    ma, mb = word.match(a), word.match(b)
    return ma is not None and mb is not None and ma.group() == mb.group()


def _with_fences(lines: Sequence[str], first: int, last: int) -> tuple[int, int]:
    """The rows, widened over an ``Omni-new`` block's fences when the removal empties it."""
    up = first - 1
    while up >= 0 and not lines[up].strip():
        up -= 1
    down = last + 1
    while down < len(lines) and not lines[down].strip():
        down += 1
    fenced = 0 <= up and down < len(lines) and all(_FENCE in lines[r] for r in (up, down))
    if fenced and all(lines[r].lstrip().startswith("#") for r in (up, down)):
        first, last = up, down
    if first > 0 and not lines[first - 1].strip() and last + 1 < len(lines) and not lines[last + 1].strip():
        last += 1  # one blank line where the removed lines stood, not two
    return first, last


def _broken(removed: Sequence[str], kept: Sequence[str]) -> str:
    """Why the method without ``removed`` would be wrong ("" when it is not): it no longer compiles, a clause
    (``else:``) lost its statement, or a local the removed lines bound is read and no longer bound."""
    source = textwrap.dedent(joined(kept))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "leaves the method uncompilable"
    try:
        gone = ast.parse(textwrap.dedent(joined(removed)))
    except SyntaxError:
        gone = None
    bound = set() if gone is None else {n.id for n in ast.walk(gone) if isinstance(n, ast.Name) and _stores(n)}
    still = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and _stores(n)}
    fn = tree.body[0] if tree.body and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    params = set() if fn is None else {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    lost = sorted((bound & read) - still - params)
    if lost:
        return f"leaves {', '.join(lost)} read but no longer bound"
    return ""


def _stores(node: ast.Name) -> bool:
    return isinstance(node.ctx, (ast.Store, ast.Del))
