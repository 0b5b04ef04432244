"""``pq sync-gpu``'s copies of the module-level functions that changes left unplaced need (pure logic).

A GPU change that could not be placed (:class:`~patch_queue.sync.ports.Unplaced`) is ported by hand; when its
GPU code calls a function that a GPU runner module defines at its top level (``_ensure_tensor_values`` of
``gpu_ar_model_runner.py``, which ``gpu_generation_model_runner.py`` imports from there) and the NPU counterpart of
that module (``npu_ar_model_runner.py``) neither defines nor imports, :func:`copy_functions` copies the whole
function there: translated by the rules, fenced at column 0, before the NPU module's copy of the top-level class or
function that follows it in the GPU module (else before the NPU module's first class), with its imports, and the
functions of the same kind it calls in turn.  The NPU runners mirror the GPU runner modules this way: they never
import from ``gpu_ar_model_runner`` or ``gpu_generation_model_runner``.  Nothing calls the copy until the change is
ported, so each copy says which change not placed needs it (its GPU hunk's place), for review.  A change that was
placed is left alone: its port imported what it uses (:func:`patch_queue.sync.ports.with_imports`).
"""

from __future__ import annotations

import ast
import io
import keyword
import posixpath
import re
import textwrap
import tokenize
from collections.abc import Mapping, Sequence

from patch_queue.checks import gpu_audit
from patch_queue.checks.gpu_audit import GpuChange
from patch_queue.merge import symbols
from patch_queue.sync.ports import Port, Unplaced, bare_names, bound_names, completed, joined
from patch_queue.sync.translation import Rules

FUNCTION = "module function copied"
# how many functions deep a copy follows the functions a copied function calls
_MAX_DEPTH = 4


def _top_functions(text: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    try:
        tree = symbols.parsed(text)
    except SyntaxError:
        return {}
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _defining(name: str, gpu_file: str, gpu_files: Mapping[str, str], gpu_modules: str) -> str | None:
    """The GPU runner module that defines ``name`` as a top-level function, for the code of ``gpu_file``: that module
    itself, or the GPU runner module it imports ``name`` from (``from vllm_omni.worker.gpu_x import name``)."""
    text = gpu_files.get(gpu_file, "")
    if name in _top_functions(text):
        return gpu_file
    try:
        tree = symbols.parsed(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (
            m := re.fullmatch(re.escape(gpu_modules) + r"(gpu_\w+)", node.module or "")
        ):
            if any((a.asname or a.name) == name and a.name == name for a in node.names):
                found = next((g for g in sorted(gpu_files) if posixpath.basename(g) == m[1] + ".py"), None)
                if found is not None and name in _top_functions(gpu_files[found]):
                    return found
    return None


def _used(code: str) -> set[str]:
    """The bare names a text's code reads: its name tokens not after a ``.`` (strings and comments aside); a text that
    does not tokenize, by the words of its lines with their comments cut."""
    out: set[str] = set()
    prev = ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(textwrap.dedent(code)).readline):
            if tok.type == tokenize.NAME and prev != "." and not keyword.iskeyword(tok.string):
                out.add(tok.string)
            if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT):
                prev = tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return bare_names("\n".join(line.split("#", 1)[0] for line in code.splitlines()))
    return out


def copy_functions(
    unplaced: Sequence[Unplaced],
    files: Mapping[str, str],
    gpu_files: Mapping[str, str],
    rules: Rules,
    mirror: gpu_audit.Mirror,
) -> tuple[list[Port], dict[str, str], list[GpuChange]]:
    """Copy every top-level function of a GPU runner module that the GPU code of a change in ``unplaced`` calls and
    the NPU counterpart of the defining module lacks (and that the NPU module of the change does not bind), once,
    in the order of the changes; returns the copies, the NPU modules after them, and the functions the project
    declines (not copied).  ``mirror``: the two upstream classes and the GPU runners' package (the queue's:
    :func:`gpu_audit.mirror`)."""
    m = mirror
    gpu_modules = m.gpu_modules
    out_files = dict(files)
    out: list[Port] = []
    declined: list[GpuChange] = []
    done: set[tuple[str, str]] = set()

    def copy(name: str, gpu_file: str, needs: str, depth: int) -> None:
        source = _defining(name, gpu_file, gpu_files, gpu_modules)
        npu_file = gpu_audit.npu_counterpart(source, out_files) if source else None
        if source is None or npu_file is None or (source, name) in done or name in bound_names(out_files[npu_file]):
            return
        done.add((source, name))
        node = _top_functions(gpu_files[source])[name]
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        change = GpuChange(
            source, name, first, tuple(gpu_files[source].splitlines()[first - 1 : first]), False, FUNCTION
        )
        if rules.decline_of(source, name, change.first) is not None:
            declined.append(change)
            return
        if depth + 1 < _MAX_DEPTH:  # the functions it calls first, so that its imports do not import them
            for inner in sorted(_used(ast.get_source_segment(gpu_files[source], node) or "") - {name}):
                copy(inner, source, f"{name}, copied for {needs}", depth + 1)
        port = _copy(name, source, npu_file, out_files[npu_file], gpu_files[source], needs, rules)
        if port is not None:
            port = completed(port, gpu_files[source], source, m)
            out_files[npu_file] = port.text
            out.append(port)

    for u in unplaced:
        if not u.changes or not u.gpu_hunk or u.changes[0].reason == FUNCTION:
            continue
        change = u.changes[0]
        caller_npu = u.npu_file or gpu_audit.npu_counterpart(change.gpu_file, out_files) or ""
        needs = ", ".join(f"{c.gpu_file}:{c.gpu_line}" for c in u.changes) + (f" in {u.symbol}" if u.symbol else "")
        for name in sorted(_used(u.gpu_hunk)):
            if name not in bound_names(out_files.get(caller_npu, "")):
                copy(name, change.gpu_file, f"{needs}, not placed,", 0)
    return out, out_files, declined


def _copy(name: str, source: str, npu_file: str, text: str, gpu_text: str, needs: str, rules: Rules) -> Port | None:
    """The port writing the GPU function ``name`` of ``source`` into the NPU module ``text`` (None when the NPU module
    does not parse or the result would not)."""
    funcs = _top_functions(gpu_text)
    node = funcs[name]
    gpu_lines = gpu_text.splitlines()
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    gpu_def = gpu_lines[first - 1 : node.end_lineno]
    try:
        npu_tree = ast.parse(text)
        gpu_tree = ast.parse(gpu_text)
    except SyntaxError:
        return None
    npu_top = {n.name: n for n in npu_tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    later = [
        n.name
        for n in gpu_tree.body
        if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno > node.lineno
    ]
    before = next((npu_top[n] for n in later if n in npu_top), None)
    if before is None:
        before = next((n for n in npu_top.values() if isinstance(n, ast.ClassDef)), None)
    lines = text.splitlines()
    end = len(lines)
    if before is not None:
        end = min([before.lineno, *(d.lineno for d in before.decorator_list)]) - 1
        while end > 0 and lines[end - 1].lstrip().startswith("#"):
            end -= 1  # the comments right above it belong to it
    row = end
    while row > 0 and not lines[row - 1].strip():
        row -= 1
    body = [rules.translate(line) for line in gpu_def]
    result = ["", "", rules.fence, *body, rules.fence, *(["", ""] if end < len(lines) else [])]
    new_text = joined([*lines[:row], *result, *lines[end:]])
    try:
        ast.parse(new_text)
    except SyntaxError:
        return None
    change = GpuChange(source, name, first, tuple(gpu_def), False, FUNCTION, npu_file, row + 3)
    where = f"before {before.name}" if before is not None else "at the module end"
    how = f"{FUNCTION} (as a whole module-level function {where}; nothing calls it yet: {needs} calls it)"
    replaced = joined(lines[row:end])
    return Port((change,), npu_file, name, row + 3, joined(gpu_def), replaced, joined(result), new_text, how=how)
