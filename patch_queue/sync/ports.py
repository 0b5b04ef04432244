"""What ``pq sync-gpu`` produces (:class:`Port`, :class:`Unplaced`) and the steps every port shares: the names and
imports it needs, re-indenting, the NPU method holding a line."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from patch_queue.checks import gpu_audit
from patch_queue.checks.gpu_audit import GpuChange
from patch_queue.merge import anchors, symbols
from patch_queue.series import reimport


@dataclass(frozen=True)
class Port:
    """Omni GPU changes (one, or several in one statement) written into an NPU method."""

    changes: tuple[GpuChange, ...]
    npu_file: str
    symbol: str  # Class.method on the NPU side
    line: int  # 1-based: the opening fence in the new module text (inside an omni block: its first line)
    gpu_hunk: str  # the GPU lines ported, as written
    replaced: str  # the NPU lines the port replaced ("" for an insertion)
    result: str  # what was written, fences included (none inside an omni block)
    text: str  # the whole new module
    missing_names: tuple[str, ...] = ()  # names of the GPU module the NPU module neither defines nor imports
    how: str = ""  # how it was placed, when not at verbatim anchors
    imports: tuple[str, ...] = ()  # the import statements added for it (reimport's messages)
    import_lines: int = 0  # lines the imports added above the method
    needs: tuple[str, ...] = ()  # what it reads from self that only a base the NPU class lacks provides (messages)


@dataclass(frozen=True)
class Unplaced:
    """Omni GPU changes that were not ported, and why."""

    changes: tuple[GpuChange, ...]
    reason: str
    npu_file: str = ""
    symbol: str = ""
    gpu_hunk: str = ""


@dataclass(frozen=True)
class Since:
    """The GPU runners of the release the NPU series ports (``label``: e.g. ``vllm-omni==0.18.0``): their omni code
    is what the NPU methods hold, so a GPU change of it since is placed against it."""

    label: str
    files: Mapping[str, str]

    def method(self, gpu_file: str, name: str) -> symbols.Symbol | None:
        """The method ``Class.method`` of the GPU module ``gpu_file`` there."""
        text = self.files.get(gpu_file)
        return None if text is None else symbols.symbols_ast(text, path=gpu_file).get(name)


class NotPlaced(Exception):
    pass


def joined(lines: Iterable[str]) -> str:
    return "".join(line + "\n" for line in lines)


def method_at(text: str, path: str, *, line: int = 0, name: str = "") -> symbols.Symbol | None:
    """The method named ``name``, else the one holding ``line``."""
    for sym in symbols.symbols_ast(text, path=path).values():
        if sym.is_method and (sym.name == name if name else sym.start <= line <= sym.end):
            return sym
    return None


def reindent(line: str, delta: int) -> str:
    if not line.strip():
        return ""
    if delta >= 0:
        return " " * delta + line
    return line[min(-delta, anchors.indent_of(line)) :]


@functools.lru_cache(maxsize=64)
def bound_names(text: str) -> frozenset[str]:
    """The names a module binds at its top level or imports anywhere (kept: a sync asks for the same modules
    again and again)."""
    try:
        tree = symbols.parsed(text)
    except SyntaxError:
        return frozenset()
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
    return frozenset(out)


def bare_names(code: str) -> set[str]:
    return set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", code))


def with_imports(port: Port, gpu_text: str, gpu_file: str, mirror: gpu_audit.Mirror) -> Port:
    """The port with an import of every name it uses that the NPU module does not bind, taken the way the GPU
    module binds it (:func:`patch_queue.series.reimport.reconcile`; a name the GPU module defines at its top
    level is imported from that module, ``vllm_omni.worker.<its name>``, which the NPU runners already import
    from)."""
    module = mirror.gpu_modules + Path(gpu_file).stem
    text, changes = reimport.reconcile(
        port.text, new_upstream=gpu_text, old_upstream=None, upstream_module=module, first_party=mirror.first_party
    )
    added = tuple(c.message for c in changes if c.kind == reimport.ADDED)
    if not added:
        return port
    lines = len(text.splitlines()) - len(port.text.splitlines())
    return replace(port, text=text, line=port.line + lines, imports=added, import_lines=lines)


def completed(port: Port, gpu_text: str, gpu_file: str, mirror: gpu_audit.Mirror) -> Port:
    """The port with its imports (:func:`with_imports`; ``mirror``: where the GPU modules are) and the names of the
    GPU module it uses that the NPU module still neither defines nor imports."""
    port = with_imports(port, gpu_text, gpu_file, mirror)
    used = bare_names("\n".join(gpu_audit.code_lines(port.result).code.values()))
    return replace(port, missing_names=tuple(sorted((used & bound_names(gpu_text)) - bound_names(port.text))))
