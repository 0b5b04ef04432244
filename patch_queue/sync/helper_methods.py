"""``pq sync-gpu``'s copies of whole omni helper methods (pure logic): :func:`copy_helpers` copies the omni helper
methods of a GPU runner class (``self.X`` it defines itself, not vLLM's) that its NPU counterpart calls and lacks,
when the NPU class does not inherit the GPU class (``NPUARModelRunner``, ``NPUGenerationModelRunner``): translated
by the rules (:mod:`patch_queue.sync.translation`), the GPU class name read as the NPU one, inside one fence pair at
class-body indentation after the calling method, with its imports, and the helpers it calls in turn.  A helper
that calls ``super()`` or reads ``self.attr`` that nothing in the NPU class's MRO (NPU classes, the omni GPU
classes they inherit, the upstream runners) sets is not copied.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence, Set

from patch_queue.checks import gpu_audit
from patch_queue.checks.gpu_audit import GpuChange
from patch_queue.checks.gpu_needs import HelperCtx, assigned_attrs, helper_ctx, npu_attrs
from patch_queue.merge import anchors, symbols
from patch_queue.sync.ports import Port, Unplaced, completed, joined, reindent
from patch_queue.sync.translation import USER_RULES, Rules

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


@functools.lru_cache(maxsize=1024)  # the NPU methods are read again for each helper copied
def _method_self_refs(text: str, cls: str) -> tuple[tuple[int, str], ...]:
    """:func:`_self_refs` of a method's text (``self.X`` and ``cls.X``)."""
    return tuple(_self_refs(ast.parse(textwrap.dedent(text)), (cls,)))


def _fence_row(lines: Sequence[str], row: int, indent: int) -> int:
    """``row`` (0-based insertion point between class members), moved past the closing fence when an Omni-new
    block of the class body (its fences at ``indent``) holds it."""

    def fence(line: str) -> bool:
        return bool(anchors.FENCE.match(line)) and anchors.indent_of(line) == indent

    if sum(1 for line in lines[:row] if fence(line)) % 2 == 0:
        return row
    return next((i + 1 for i in range(row, len(lines)) if fence(lines[i])), len(lines))


def _super_calls(tree: ast.AST) -> set[str]:
    """The ``X`` of every ``super().X`` under ``tree`` (``""`` for a bare ``super()``)."""
    supers = {
        id(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super"
    }
    out = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and id(n.value) in supers}
    return out | ({""} if len(out) < len(supers) else set())


def _overrides(ctx: HelperCtx) -> list[str]:
    """The methods of the GPU class that override a vLLM ``GPUModelRunner`` method and call that method through
    ``super()``, where the NPU class runs the upstream method itself (no omni class of its MRO overrides it): on
    NPU, ``super()`` reaches vllm-ascend's method, as it reaches vLLM's on the GPU."""
    out = []
    for name in sorted(ctx.gpu_methods):
        owner = next((c for c in ctx.order if c in ctx.classes and name in ctx.classes[c].methods), None)
        if name not in ctx.vllm_methods or owner not in (ctx.mirror.npu_class, ctx.mirror.gpu_class):
            continue
        try:
            tree = ast.parse(textwrap.dedent(ctx.gpu_methods[name].text))
        except SyntaxError:
            continue
        if _super_calls(tree) == {name}:
            out.append(name)
    return out


def _helper_plan(
    ctx: HelperCtx, name: str, caller: str, have: set[str], seen: tuple[str, ...]
) -> tuple[list[tuple[str, str]], str]:
    """The helpers to copy for ``name`` as (helper, the method calling it; "" for an override of
    :func:`_overrides`, whose own ``super()`` call stays): it, then its own helpers; or the reason it cannot be
    copied."""
    gsym = ctx.gpu_methods[name]
    try:
        tree = ast.parse(textwrap.dedent(gsym.text))
    except SyntaxError:
        return [], f"{ctx.gpu_cls}.{name} does not parse on its own"
    if _super_calls(tree) and (caller or _super_calls(tree) != {name}):
        return [], f"{ctx.gpu_cls}.{name} calls super(), which resolves elsewhere in {ctx.npu_cls}"
    own = assigned_attrs(gsym.text)
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
    only: Set[str] | None = None,
    *,
    mirror: gpu_audit.Mirror,
) -> tuple[list[Port | Unplaced], dict[str, str]]:
    """Copy every omni helper method of a GPU runner class that its NPU counterpart (a class that does not
    inherit the GPU class) calls and lacks: the whole method, translated, fenced at class-body indentation,
    after the NPU method calling it (else at the class end), with the imports it needs.  A helper that calls
    ``super()`` or reads an attribute the NPU class never sets comes back as :class:`Unplaced`.  ``only``: just
    the helpers of these names (and what they call in turn), no overrides: the ones new ports call."""
    out_files = dict(files)
    out: list[Port | Unplaced] = []
    refused: set[tuple[str, str]] = set()
    for npu_file in sorted(files):
        for ctx0 in helper_ctx(npu_file, out_files, gpu_files, vllm_runner, ascend_runner, mirror):
            while True:
                ctx = next(c for c in helper_ctx(npu_file, out_files, gpu_files, vllm_runner, ascend_runner, mirror)
                           if c.npu_cls == ctx0.npu_cls)  # fmt: skip
                text = out_files[npu_file]
                syms = symbols.symbols_ast(text, path=npu_file)
                prefix = ctx.npu_cls + "."
                calls = [
                    (line, attr, sym.name[len(prefix) :])
                    for sym in syms.values()
                    if sym.name.startswith(prefix) and sym.is_method
                    for line, attr in _method_self_refs(sym.text, ctx.npu_cls)
                ]
                todo = [(attr, caller) for _l, attr, caller in calls if ctx.wanted(attr)]
                todo = [t for t in dict.fromkeys(todo) if (ctx.npu_cls, t[0]) not in refused]
                if only is not None:
                    todo = [t for t in todo if t[0] in only]
                else:
                    todo += [(n, "") for n in _overrides(ctx) if (ctx.npu_cls, n) not in refused]
                if not todo:
                    break
                name, caller = todo[0]
                have = npu_attrs(ctx, out_files, gpu_files)
                plan, why = _helper_plan(ctx, name, caller, have, ())
                gsym = ctx.gpu_methods[name]
                change = GpuChange(ctx.gpu_file, name, gsym.start, tuple(gsym.text.splitlines()), False, HELPER,
                                   npu_file)  # fmt: skip
                if not why and rules.decline_of(change.gpu_file, name, change.first) is not None:
                    why = f"the project declines it ({USER_RULES})"
                if why:
                    refused.add((ctx.npu_cls, name))
                    what = f"helper {name} of {ctx.npu_cls}.{caller}" if caller else f"override {ctx.gpu_cls}.{name}"
                    out.append(Unplaced((change,), f"{what} not copied: {why}", npu_file,
                                        f"{ctx.npu_cls}.{caller or name}", gsym.text))  # fmt: skip
                    continue
                for helper, calling in plan:
                    port = _copy_helper(ctx, helper, calling, out_files[npu_file], rules)
                    port = completed(port, gpu_files[ctx.gpu_file], ctx.gpu_file, ctx.mirror)
                    out_files[npu_file] = port.text
                    out.append(port)
    return out, out_files


def _copy_helper(ctx: HelperCtx, name: str, caller: str, text: str, rules: Rules) -> Port:
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
    body = [reindent(own.sub(ctx.npu_cls, rules.translate(line)), delta) for line in gsym.text.splitlines()]
    fence = " " * body_indent + rules.fence
    result = [fence, *body, fence]
    new_lines = [*lines[:row], "", *result, *lines[row:]]
    new_text = joined(new_lines)
    ast.parse(new_text)  # the GPU method parses, and so does the NPU class around it
    change = GpuChange(
        ctx.gpu_file, name, gsym.start, tuple(gsym.text.splitlines()), False, HELPER, ctx.npu_file, row + 2
    )
    how = f"as a whole method after {ctx.npu_cls}.{caller}" if after else "as a whole method at the class end"
    if not caller:
        how += f", an override of {ctx.mirror.gpu_class}.{name} calling super(), as {ctx.gpu_cls}'s"
    return Port((change,), ctx.npu_file, f"{ctx.npu_cls}.{name}", row + 2, gsym.text, "", joined(["", *result]),
                new_text, how=f"{HELPER} ({how})")  # fmt: skip
