"""What a port reads from ``self`` that only a base class of the GPU runner provides.

The GPU runner classes inherit vllm-omni mixins (``OmniConnectorModelRunnerMixin``, ``DuplexSamplingRunnerMixin``)
that an NPU runner class may lack.  A GPU change calling ``self.register_chunk_recv(...)`` ports as text, but on an
NPU class without the mixin the call fails at run time.  :func:`needed_bases` finds, for a port, each such base
and the names it alone provides (read from the module the GPU runner imports it from), so the port says so for
review instead of passing as done.

The context of an NPU runner class that does not inherit its GPU counterpart (:class:`HelperCtx`: its MRO, the
GPU class, what the known classes set, :func:`npu_attrs`) lives here, public: ``pq check`` reads it for its
warnings, and ``pq sync-gpu``'s copies of helper methods (:mod:`patch_queue.sync.helper_methods`) read it too.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import textwrap
import tokenize
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from patch_queue.checks import gpu_audit
from patch_queue.checks.findings import WARNING, Finding
from patch_queue.merge import symbols

ModuleText = Callable[[str], "str | None"]  # a dotted module -> its source, if known (imports.SourceTree.text)


@dataclass(frozen=True)
class Need:
    base: str  # a base of the GPU runner class that the NPU class lacks
    names: tuple[str, ...]  # what the port reads from self that only that base provides

    def message(self, npu_cls: str) -> str:
        reads = ", ".join(f"self.{n}" for n in self.names)
        return f"reads {reads}, which only {self.base} provides: {npu_cls} lacks that base (it fails at run time)"


@functools.lru_cache(maxsize=4096)
def assigned_attrs(text: str) -> frozenset[str]:
    """Every ``self.X`` a text assigns (any target form), and the names its class bodies bind (kept: the MRO of
    each NPU class is read again for every helper and port)."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return frozenset()
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
    return frozenset(out)


@dataclass(frozen=True)
class HelperCtx:
    npu_file: str
    npu_cls: str
    gpu_file: str
    gpu_cls: str
    order: tuple[str, ...]  # the NPU class's MRO
    classes: Mapping[str, gpu_audit.RunnerClass]
    vllm_methods: frozenset[str]
    gpu_methods: Mapping[str, symbols.Symbol]
    upstream_attrs: frozenset[str]  # what the known classes of the NPU MRO outside the NPU modules set
    mirror: gpu_audit.Mirror  # the two upstream classes

    def resolved(self, name: str) -> bool:
        return any(c in self.classes and name in self.classes[c].methods for c in self.order)

    def wanted(self, name: str) -> bool:
        """An omni method of the GPU class itself that the NPU class does not resolve."""
        return name in self.gpu_methods and name not in self.vllm_methods and not self.resolved(name)


def helper_ctx(
    npu_file: str,
    files: Mapping[str, str],
    gpu_files: Mapping[str, str],
    vllm_runner: str,
    ascend_runner: str,
    mirror: gpu_audit.Mirror,
) -> list[HelperCtx]:
    """``mirror``: the two upstream classes (the queue's, :func:`gpu_audit.mirror`)."""
    m = mirror
    classes: dict[str, gpu_audit.RunnerClass] = {}
    for side, group in (("npu", files), ("gpu", gpu_files)):
        for path, text in sorted(group.items()):
            for name, cls in gpu_audit.runner_classes(path, text, side).items():
                classes.setdefault(name, cls)
    upstream_attrs: set[str] = set()
    for upstream, text, side, path in (
        (m.npu_class, ascend_runner, "ascend", m.npu_file.rsplit("/", 1)[-1]),
        (m.gpu_class, vllm_runner, "vllm", m.gpu_file),
    ):
        found = gpu_audit.runner_classes(path, text, side).get(upstream)
        if found is not None:
            classes[upstream] = replace(found, module="")
            upstream_attrs |= assigned_attrs(text)
    vllm = classes.get(m.gpu_class)
    vllm_methods = frozenset(vllm.methods) if vllm else frozenset()
    gpu_file = next((g for g in sorted(gpu_files) if Path(g).name == "gpu_" + Path(npu_file).name[len("npu_") :]), "")
    if not gpu_file or not Path(npu_file).name.startswith("npu_"):
        return []
    gpu_runners = [
        c
        for c in classes.values()
        if c.module == gpu_file and c.side == "gpu" and m.gpu_class in gpu_audit.c3_mro(c.name, classes)[1:]
    ]
    out = []
    for cls in sorted(classes.values(), key=lambda c: c.name):
        if cls.module != npu_file or cls.side != "npu":
            continue
        mro = gpu_audit.c3_mro(cls.name, classes)
        if m.npu_class not in mro[1:]:
            continue
        # the most derived GPU runner class of the counterpart module
        gpu = max(gpu_runners, key=lambda g: (len(gpu_audit.c3_mro(g.name, classes)), g.name), default=None)
        if gpu is None or gpu.name in mro:
            continue  # the NPU class inherits the GPU class: its methods resolve there
        out.append(
            HelperCtx(
                npu_file,
                cls.name,
                gpu_file,
                gpu.name,
                tuple(mro),
                classes,
                vllm_methods,
                gpu.methods,
                frozenset(upstream_attrs),
                m,
            )  # fmt: skip
        )
    return out


def npu_attrs(ctx: HelperCtx, files: Mapping[str, str], gpu_files: Mapping[str, str]) -> set[str]:
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
                out |= assigned_attrs(sym.text)
            text = files.get(cls.module, "") if cls.side == "npu" else gpu_files.get(cls.module, "")
            for sym in symbols.symbols_ast(text, path=cls.module).values():
                if sym.name == cls.name:
                    out |= assigned_attrs(sym.text)
    return out


def self_reads(code: str) -> list[str]:
    """The ``X`` of every ``self.X`` in ``code`` (comments and strings aside), in order, once each."""
    out: list[str] = []
    try:
        tokens = [
            t
            for t in tokenize.generate_tokens(io.StringIO(code).readline)
            if t.type == tokenize.OP or t.type == tokenize.NAME
        ]
    except (tokenize.TokenError, IndentationError):
        return out
    for a, dot, b in zip(tokens, tokens[1:], tokens[2:], strict=False):
        if a.string == "self" and dot.string == "." and b.type == tokenize.NAME and b.string not in out:
            out.append(b.string)
    return out


def needed_bases(
    code: Sequence[tuple[str, str, str]],
    files: Mapping[str, str],
    gpu_files: Mapping[str, str],
    vllm_runner: str,
    ascend_runner: str,
    module_text: ModuleText,
    mirror: gpu_audit.Mirror,
) -> list[list[Need]]:
    """Per (NPU module, NPU class, code of that class: a port's lines, or the class), the bases of the GPU class
    that the NPU class lacks and whose code alone provides what the code reads from ``self`` (``files``: the NPU
    modules as they are)."""
    contexts: dict[str, list[HelperCtx]] = {}
    have: dict[tuple[str, str], set[str]] = {}
    provided: dict[str, set[str]] = {}
    out: list[list[Need]] = []
    for npu_file, npu_cls, text in code:
        if npu_file not in contexts:
            contexts[npu_file] = helper_ctx(npu_file, files, gpu_files, vllm_runner, ascend_runner, mirror)
        ctx = next((c for c in contexts[npu_file] if c.npu_cls == npu_cls), None)
        needs: list[Need] = []
        out.append(needs)
        if ctx is None:
            continue
        if (npu_file, npu_cls) not in have:
            have[npu_file, npu_cls] = npu_attrs(ctx, files, gpu_files)
        wanted = [n for n in self_reads(text) if n not in have[npu_file, npu_cls]]
        for base in gpu_audit.c3_mro(ctx.gpu_cls, ctx.classes) if wanted else []:
            if base in ctx.order or base in ctx.classes:
                continue  # the NPU class has it too, or it is a runner class pq reads
            if base not in provided:
                provided[base] = _provided(base, gpu_files, module_text)
            names = tuple(n for n in wanted if n in provided[base])
            if names:
                needs.append(Need(base, names))
                wanted = [n for n in wanted if n not in names]
    return out


def findings(
    files: Mapping[str, str],
    gpu_files: Mapping[str, str],
    vllm_runner: str,
    ascend_runner: str,
    module_text: ModuleText,
    mirror: gpu_audit.Mirror,
) -> list[Finding]:
    """``pq check``'s warnings: each NPU runner class reading from ``self`` what only a base of its GPU counterpart
    provides, which the NPU class lacks (at the first line reading it)."""
    classes = [
        (path, name, symbols.symbols_ast(text, path=path)[name])
        for path, text in sorted(files.items())
        for name in gpu_audit.runner_classes(path, text, "npu")
    ]
    out = []
    needed = needed_bases(
        [(p, n, sym.text) for p, n, sym in classes], files, gpu_files, vllm_runner, ascend_runner, module_text, mirror
    )
    for (path, name, sym), needs in zip(classes, needed, strict=True):
        lines = sym.text.splitlines()
        for need in needs:
            reads = re.compile(r"\bself\.(?:" + "|".join(need.names) + r")\b")
            first = next((i for i, line in enumerate(lines) if reads.search(line)), 0)
            out.append(Finding(path, sym.start + first, RULE, WARNING, need.message(name)))
    return out


RULE = "gpu-base-missing"


def _provided(base: str, gpu_files: Mapping[str, str], module_text: ModuleText) -> set[str]:
    """What class ``base`` and its own bases define or assign on ``self``, read from the module a GPU runner
    imports it from."""
    for path in sorted(gpu_files):
        module = _imported_from(gpu_files[path], base)
        if module is not None:
            return _class_provides(base, module, module_text, _DEPTH)
    return set()


_DEPTH = 4  # classes followed through re-exports and bases


def _imported_from(text: str, name: str) -> str | None:
    """The module ``text`` imports ``name`` from (``from M import name``), if it does."""
    try:
        tree = symbols.parsed(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if any(a.name == name and a.asname is None for a in node.names):
                return node.module
    return None


def _class_provides(name: str, module: str, module_text: ModuleText, depth: int) -> set[str]:
    text = module_text(module)
    if text is None or depth <= 0:
        return set()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    found = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if found is None:  # re-exported from another module
        origin = _imported_from(text, name)
        return set() if origin is None else _class_provides(name, origin, module_text, depth - 1)
    out = {n.name for n in found.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    out |= assigned_attrs(ast.get_source_segment(text, found) or "")
    for b in found.bases:
        if isinstance(b, ast.Name):
            origin = module if any(isinstance(n, ast.ClassDef) and n.name == b.id for n in tree.body) else None
            origin = origin or _imported_from(text, b.id)
            out |= set() if origin is None else _class_provides(b.id, origin, module_text, depth - 1)
    return out
