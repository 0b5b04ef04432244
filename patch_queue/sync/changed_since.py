"""GPU runner methods changed since the release the NPU series ports (``pq sync-gpu``, pure logic).

The audit (:mod:`patch_queue.checks.gpu_audit`) covers the GPU copies of vLLM's ``GPUModelRunner`` methods.  The
other methods of the GPU runners (omni-only ones such as ``_talker_mtp_forward``, and overrides calling ``super()``
such as ``load_model``) have NPU counterparts that ported them at the series' release: :func:`changes_since` lists,
for each such method that the GPU side changed since that release (:class:`~patch_queue.sync.ports.Since`)
and that the NPU module's runner class overrides, every hunk of that change (the release's method, translated,
against today's, compared by statement as the placement does), widened over the statements next to it that the GPU
side had at that release already and the NPU method never got (the omni code the change builds on, e.g. the line
binding what a new line reads).  :func:`patch_queue.sync.placement.sync` places
each against the release's GPU method: the NPU method holds that code, so a hunk replaces the lines it replaced
there.  Lines the GPU side only deleted are not deleted on NPU; a hunk whose statements the NPU method all holds is
not listed.
"""

from __future__ import annotations

import ast
import functools
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import replace

from patch_queue.checks import gpu_audit
from patch_queue.checks.gpu_audit import GpuChange
from patch_queue.merge import anchors, symbols
from patch_queue.series import adopt
from patch_queue.sync import placement, statements
from patch_queue.sync.ports import Since, joined, method_at
from patch_queue.sync.translation import Rules


def changes_since(
    since: Since,
    gpu_files: Mapping[str, str],
    npu_files: Mapping[str, str],
    vllm_runner: str,
    rules: Rules,
    mirror: gpu_audit.Mirror,
) -> list[GpuChange]:
    """The hunks of the omni GPU methods changed since ``since`` that the counterpart NPU module overrides, as
    unported changes of that NPU method, sorted by GPU file and line (``mirror``: the two upstream classes, the
    queue's: :func:`gpu_audit.mirror`)."""
    m = mirror
    copies = {
        (c.module, c.downstream)
        for c in adopt.classify(dict(gpu_files), vllm_runner, upstream_path=m.gpu_file, cls=m.gpu_class)
    }
    out: list[GpuChange] = []
    for gpu_file in sorted(gpu_files):
        npu_file = gpu_audit.npu_counterpart(gpu_file, npu_files)
        if npu_file is None or gpu_file not in since.files:
            continue
        npu_methods = [s for s in symbols.symbols_ast(npu_files[npu_file], path=npu_file).values() if s.is_method]
        for name, gsym in symbols.symbols_ast(gpu_files[gpu_file], path=gpu_file).items():
            method = name.rsplit(".", 1)[-1]
            old = since.method(gpu_file, name)
            if not gsym.is_method or (gpu_file, name) in copies or old is None or old.text == gsym.text:
                continue
            owners = [s for s in npu_methods if s.name.rsplit(".", 1)[-1] == method and s.name.count(".") == 1]
            if len(owners) != 1:
                continue  # the NPU class inherits the GPU method (it runs as written), or lacks it (a helper)
            new_lines = gsym.text.splitlines()
            old_units = statements.units([rules.translate(line) for line in old.text.splitlines()])
            new_units = statements.units([rules.translate(line) for line in new_lines])
            on_npu = {u.key for u in statements.units(owners[0].text.splitlines())}
            reason = f"{name} changed since {since.label}"
            ops = statements.opcodes([u.key for u in old_units], [u.key for u in new_units])
            unchanged = {j for tag, _i1, _i2, j1, j2 in ops if tag == "equal" for j in range(j1, j2)}
            for tag, _i1, _i2, j1, j2 in ops:
                keys = [u.key for u in new_units[j1:j2] if not gpu_audit.is_trivial(u.key)]
                if tag == "equal" or j2 == j1 or all(k in on_npu for k in keys):
                    continue  # unchanged, only deleted on the GPU side, or on NPU already
                j1, j2 = _widened(new_units, new_lines, j1, j2, unchanged, on_npu, owners[0].text)
                first, last = new_units[j1].first, max(u.last for u in new_units[j1:j2])
                lines = tuple(new_lines[first : last + 1])
                change = GpuChange(
                    gpu_file, method, gsym.start + first, lines, False, reason, npu_file, owners[0].start
                )
                out.append(change)
    return sorted(out, key=lambda c: (c.gpu_file, c.gpu_line))


def _widened(
    units: Sequence[statements.Unit],
    lines: Sequence[str],
    j1: int,
    j2: int,
    unchanged: set[int],
    on_npu: set[str],
    npu_method: str,
) -> tuple[int, int]:
    """Units [j1, j2) of a change widened over the statements next to it, in its block or deeper, that the GPU side
    had at the release already and the NPU method never got (its omni code the change builds on: the new line
    reads what they bind); blank lines and comments do not stop it.  A statement the NPU method holds, or holds
    rewritten, does: one as like it as :func:`patch_queue.sync.statements.like`, one binding a local the NPU method
    binds too (its own version of it), and a ``return`` or ``raise`` (the NPU method ends that path its own way)."""
    stmts = _statements_by_row(joined(lines))
    if stmts is None:
        return j1, j2
    npu_locals = placement.bound_locals(npu_method)
    indent = anchors.indent_of(lines[units[j1].first])

    def lacking(j: int) -> bool:
        u = units[j]
        node = stmts.get(u.first)
        return (
            j in unchanged
            and u.key not in on_npu
            and not gpu_audit.is_trivial(u.key)
            and anchors.indent_of(lines[u.first]) >= indent
            and not isinstance(node, (ast.Return, ast.Raise))
            and not (node is not None and _targets(node) & npu_locals)
            and not any(statements.like(u.key, k) for k in on_npu)
        )

    while j1 > 0 and lacking(j1 - 1):
        j1 -= 1
    while j2 < len(units) and lacking(j2):
        j2 += 1
    return j1, j2


def _targets(node: ast.stmt) -> set[str]:
    """The locals a statement binds itself (assignment and loop targets, ``with ... as``; not its body's)."""
    if isinstance(node, ast.Assign):
        targets: list[ast.expr] = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
    else:
        return set()
    out: set[str] = set()
    while targets:  # names, inside tuples and starred ones too; not the object of an attribute or subscript
        t = targets.pop()
        if isinstance(t, ast.Name):
            out.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            targets += t.elts
        elif isinstance(t, ast.Starred):
            targets.append(t.value)
    return out


def partly_ported(since: Since, changes: Sequence[GpuChange], gpu_files: Mapping[str, str]) -> list[GpuChange]:
    """The changes the audit reads as ported in part whose every line the NPU method lacks is new since ``since``
    (the GPU method there has none of them), as unported changes: the NPU method holds the change as it was at that
    release, which the GPU side changed since, so it is placed as an update of that code.  A change whose lacking
    lines the release's GPU method had is the NPU side's own way of writing them, and stays ported."""
    out = []
    for change in changes:
        gsym = method_at(gpu_files[change.gpu_file], change.gpu_file, line=change.gpu_line) if change.missing else None
        old = since.method(change.gpu_file, gsym.name) if change.ported and gsym is not None else None
        had = set() if old is None else {s for line in old.text.splitlines() if (s := line.strip())}
        if old is not None and not had & {line.strip() for line in change.missing}:
            lacking = f"{len(change.missing)} line(s) new since {since.label} lacking"
            out.append(replace(change, ported=False, reason=f"{change.reason}; {lacking}"))
    return out


@functools.lru_cache(maxsize=64)  # a method's changes are widened one by one over the same statements
def _statements_by_row(text: str) -> dict[int, ast.stmt] | None:
    """The statements of a method's text by their first row (0-based); None when it does not parse. Read, never
    change."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return None
    return {n.lineno - 1: n for n in ast.walk(tree) if isinstance(n, ast.stmt)}
