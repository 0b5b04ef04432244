"""The GPU-side sync audit: omni changes in vllm-omni's GPU runners that the NPU runners lack.

vllm-omni's GPU runners (``vllm_omni/worker/gpu_*model_runner.py``) copy methods of vLLM's
``GPUModelRunner`` and edit them without ``Omni-new`` fences; the NPU runners copy vllm-ascend's
``NPUModelRunner`` methods and must carry the same omni logic.  :func:`audit` lists the omni
edits of the GPU copies and says, for each, whether the NPU side has it.

1. **The copies**: :func:`patch_queue.series.adopt.classify` against vLLM's ``GPUModelRunner`` (same
   name, similar text, not a ``super()`` override).
2. **The omni GPU changes**: vLLM's method is diffed against the GPU copy over *code* only: each
   line is reduced to its tokens without comments, docstrings, whitespace, commas, parentheses and
   quotes, and the signature to its parameters (annotations dropped), so comment-only, re-wrapped
   and annotation-only hunks vanish.  A hunk that adds code is split into paragraphs at blank
   lines and where the code leaves the block it started in (one omni hunk often holds unrelated
   edits, ported separately); each paragraph is one change.  Its *meaningful* lines are the added
   ones that are not trivial (``else:``, ``return``, a bracket), not a line or a re-wrapped
   statement of the upstream method (moved code, generic ``x=x`` arguments) and not an upstream
   import moved into the method; a paragraph with none is dropped.  Pure deletions are ignored.
   With ``history`` (vLLM's runner at older releases) the same method there counts as upstream
   too: the GPU copies lag vLLM in places (parts of ``sample_tokens`` are vLLM 0.20 code), and
   that stale upstream code is no omni change.
3. **Where the change must live on NPU**: the runner class of the matching NPU module
   (``gpu_ar_model_runner`` -> ``npu_ar_model_runner``) resolves the method through Python's MRO
   over the omni classes of both sides, vllm-ascend's ``NPUModelRunner`` and vLLM's
   ``GPUModelRunner``, following ``super().m(`` / ``Base.m(self`` delegation.

   - When that chain reaches the GPU class holding the change, the change runs on NPU as written:
     ``OmniNPUModelRunner(OmniGPUModelRunner, NPUModelRunner)`` puts ``OmniGPUModelRunner`` before
     ``NPUModelRunner`` in its MRO, so an ``OmniGPUModelRunner`` method the NPU class does not
     override wins over vllm-ascend's even where ``NPUModelRunner`` defines it.
   - ``NPUARModelRunner`` and ``NPUGenerationModelRunner`` do not inherit from their GPU
     counterparts, so a change there is ported only if the NPU code has it: at least
     :data:`PORT_RATIO` of its meaningful lines in the omni NPU methods of the chain, else
     anywhere in the NPU modules of the NPU class's MRO.  A line is there when it is an NPU code
     line or part of one re-wrapped NPU statement, or (in the NPU methods only) when every name
     it introduces (a name vLLM's runner module does not use) is used there: the NPU copies
     rewrite guards (``hasattr(m, "x")`` for ``callable(getattr(m, "x", None))``).
   - When no omni NPU method is on the chain and it ends in ``NPUModelRunner``, vllm-ascend's
     version runs instead: *shadowed by NPUModelRunner.m*.
"""

from __future__ import annotations

import ast
import copy
import difflib
import io
import keyword
import posixpath
import re
import textwrap
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

from patch_queue import presets
from patch_queue.checks.findings import WARNING, Finding
from patch_queue.errors import QueueError, SourceError
from patch_queue.merge import symbols
from patch_queue.series import adopt
from patch_queue.sources.snapshot import release_snapshot
from patch_queue.spec import QueueSpec

RULE = "gpu-unported"
# A change counts as ported when this share of its meaningful lines is on the NPU side.  On
# vllm-omni 0.30.0 (130 changes) the scores are 1.0 (51 changes), 0.6-0.89 (7: ports that differ
# in a line or two), 0.5-0.56 (4: two-line changes with one line on NPU, and a partial port that
# really lacks its gating lines) and 0-0.33 (34).  0.6 is the lowest share above those partial
# ports: "half of it" is not a port.
PORT_RATIO = 0.6
# A normalised line this long may also match inside the NPU code joined across its line breaks
# (the NPU side wraps a statement differently); shorter ones must be a whole NPU line.
_SUBSTRING_MIN = 16

_DROP = frozenset({",", "(", ")"})
_TRIVIAL = frozenset({"else:", "try:", "finally:", "return", "pass", "continue", "break", "returnNone", "..."})
_SKIP_TOKENS = frozenset(
    {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
)
_STRING_TOKENS = frozenset(
    {tokenize.STRING}
    | {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, n)}
)
_COMMON_NAMES = frozenset({"self", "None", "True", "False"})


@dataclass(frozen=True)
class GpuChange:
    """One omni edit of a GPU copy of a ``GPUModelRunner`` method, and whether the NPU side has it."""

    gpu_file: str
    method: str  # the method name (no class)
    gpu_line: int  # 1-based line of the change's first line in gpu_file
    lines: tuple[str, ...]  # the omni GPU lines, as written
    ported: bool
    reason: str  # found in NPU method X / not found in X / shadowed by NPUModelRunner.X / runs on NPU as ...
    npu_file: str = ""  # the NPU module that should hold it
    npu_line: int = 0  # 1-based line of the NPU method that should hold it; 0 when there is none
    meaningful: tuple[str, ...] = ()  # the lines the port check looked for, as written (stripped)
    found: int = 0  # how many of them the NPU side holds
    missing: tuple[str, ...] = ()  # the meaningful lines the NPU side lacks (also when ported: a partial port)

    @property
    def first(self) -> str:
        """The first meaningful line (else the first line), as written."""
        return self.meaningful[0] if self.meaningful else (self.lines[0].strip() if self.lines else "")


# -- code lines ------------------------------------------------------------------------------


class _Code(NamedTuple):
    """Per 1-based line: the normalised code, and the names (identifiers, string contents) used."""

    code: dict[int, str]
    names: dict[int, frozenset[str]]

    def joined(self) -> str:
        return "".join(self.code.values())

    def all_names(self) -> set[str]:
        return set[str]().union(*self.names.values())


def _string_content(text: str) -> str:
    return text.lstrip("rRbBuUfF").strip("\"'")


def _fallback_code(text: str) -> _Code:
    code: dict[int, str] = {}
    names: dict[int, frozenset[str]] = {}
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            norm = re.sub(r"[\s,()'\"]", "", stripped)
            if norm:
                code[i] = norm
                names[i] = frozenset(re.findall(r"[A-Za-z_]\w*", stripped)) - _COMMON_NAMES
    return _Code(code, names)


@lru_cache(maxsize=512)
def code_lines(text: str) -> _Code:
    """The code of each line, normalised: no comments, docstrings, whitespace, commas, parentheses
    or quotes.  Lines without code are absent; a multi-line string belongs to its first line."""
    parts: dict[int, list[str]] = {}
    names: dict[int, set[str]] = {}
    logical: list[tokenize.TokenInfo] = []

    def flush() -> None:
        # a statement that is only a string is a docstring (or a comment written as one)
        if not (len(logical) == 1 and logical[0].type == tokenize.STRING):
            for tok in logical:
                row = tok.start[0]
                if tok.type in _STRING_TOKENS:
                    norm = tok.string.replace('"', "").replace("'", "")
                    content = _string_content(tok.string)
                    if content:
                        names.setdefault(row, set()).add(content)
                else:
                    norm = "" if tok.string in _DROP else tok.string
                    if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
                        names.setdefault(row, set()).add(tok.string)
                if norm:
                    parts.setdefault(row, []).append(norm)
        logical.clear()

    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.NEWLINE:
                flush()
            elif tok.type not in _SKIP_TOKENS:
                logical.append(tok)
        flush()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return _fallback_code(text)
    code = {row: "".join(p) for row, p in parts.items()}
    return _Code(code, {row: frozenset(names.get(row, set())) - _COMMON_NAMES for row in code})


@lru_cache(maxsize=512)  # a sync judges the same methods again for every change in them
def method_code(text: str) -> _Code:
    """:func:`code_lines` of one method, its signature reduced to one line of parameters without
    annotations (so a changed return type is no code change)."""
    base = code_lines(text)
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        return base
    fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fn is None or not fn.body or fn.body[0].lineno <= fn.lineno:
        return base
    args = copy.deepcopy(fn.args)
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if arg is not None:
            arg.annotation = None
    signature = code_lines(f"def {fn.name}({ast.unparse(args)}):\n    pass\n").joined().removesuffix("pass")
    code = {r: c for r, c in base.code.items() if not fn.lineno <= r < fn.body[0].lineno}
    names = {r: n for r, n in base.names.items() if r in code}
    code[fn.lineno] = signature
    names[fn.lineno] = frozenset({fn.name})
    return _Code(dict(sorted(code.items())), names)


class _Target:
    """The normalised code of some texts (the NPU side, or upstream), for line look-ups."""

    def __init__(self, codes: Sequence[_Code]) -> None:
        self.lines = {c for code in codes for c in code.code.values()}
        self.joined = "\n".join(code.joined() for code in codes)
        self.names = set[str]().union(*(code.all_names() for code in codes))

    def has(self, line: _Line, *, by_names: bool = True) -> bool:
        if line.code in self.lines or (len(line.code) >= _SUBSTRING_MIN and line.code in self.joined):
            return True
        return by_names and bool(line.new_names) and line.new_names <= self.names


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def is_trivial(code: str) -> bool:
    return code in _TRIVIAL or not re.search(r"[A-Za-z0-9_]", code)


# -- the diff vLLM -> omni GPU ---------------------------------------------------------------


class _Line(NamedTuple):
    code: str
    text: str  # as written, stripped
    new_names: frozenset[str]  # names the upstream method does not use


@dataclass(frozen=True)
class _Hunk:
    start: int  # 1-based line in the GPU file
    lines: tuple[str, ...]  # as written
    meaningful: tuple[_Line, ...]


def _hunks(
    base: str, omni: str, omni_start: int, vocabulary: frozenset[str] = frozenset(), history: Sequence[str] = ()
) -> list[_Hunk]:
    """The changes base -> omni that add or change code, one per paragraph of each hunk.

    ``vocabulary``: the names upstream uses anywhere (a line's other names are its new names);
    ``history``: the same method in older upstream releases (its lines count as upstream too).
    """
    base_code = method_code(base)
    omni_code = method_code(omni)
    upstream = _Target([base_code, *(method_code(old) for old in history)])
    upstream_names = upstream.names | vocabulary
    a_rows, b_rows = list(base_code.code), list(omni_code.code)
    a = [base_code.code[r] for r in a_rows]
    b = [omni_code.code[r] for r in b_rows]
    omni_lines = omni.splitlines()
    out: list[_Hunk] = []
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal" or j1 == j2:
            continue
        if "".join(a[i1:i2]) == "".join(b[j1:j2]):
            continue  # re-wrapped only
        # paragraphs: split where the omni text has a blank line between two code lines, or where
        # the code leaves the block the paragraph started in (``finally:`` after a ``try`` body)
        paragraphs: list[list[int]] = [[]]
        for j in range(j1, j2):
            row = b_rows[j]
            current = paragraphs[-1]
            if current and (
                any(not omni_lines[r - 1].strip() for r in range(current[-1] + 1, row))
                or _indent(omni_lines[row - 1]) < _indent(omni_lines[current[0] - 1])
            ):
                paragraphs.append([])
            paragraphs[-1].append(row)
        for rows in paragraphs:
            meaningful: list[_Line] = []
            for row in rows:
                line = _Line(omni_code.code[row], omni_lines[row - 1].strip(), omni_code.names[row] - upstream_names)
                # trivial, an upstream line (moved here, or a generic one like "x=x") or part of an upstream
                # statement wrapped differently
                if is_trivial(line.code) or upstream.has(line, by_names=False):
                    continue
                if not line.new_names and re.match(r"(from|import)\s", line.text):
                    continue  # an upstream import moved into the method
                meaningful.append(line)
            if meaningful:
                out.append(
                    _Hunk(omni_start + rows[0] - 1, tuple(omni_lines[rows[0] - 1 : rows[-1]]), tuple(meaningful))
                )
    return out


# -- classes and the MRO ---------------------------------------------------------------------


@dataclass(frozen=True)
class RunnerClass:
    name: str
    module: str  # "" for the upstream classes
    side: str  # "gpu" | "npu" | "vllm" | "ascend"
    bases: tuple[str, ...]
    methods: Mapping[str, symbols.Symbol]


def runner_classes(path: str, text: str, side: str) -> dict[str, RunnerClass]:
    try:
        tree = symbols.parsed(text)
    except SyntaxError as exc:
        raise SourceError(f"does not parse: {exc.msg}", path=path, line=exc.lineno) from None
    syms = symbols.symbols_ast(text, path=path)
    out: dict[str, RunnerClass] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = tuple(
            b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, (ast.Name, ast.Attribute))
        )
        prefix = node.name + "."
        methods = {n[len(prefix) :]: s for n, s in syms.items() if n.startswith(prefix) and s.is_method}
        out.setdefault(node.name, RunnerClass(node.name, path, side, bases, methods))
    return out


def c3_mro(name: str, classes: Mapping[str, RunnerClass], seen: tuple[str, ...] = ()) -> list[str]:
    """C3 linearisation over the known classes; unknown bases (mixins of other files) are leaves."""
    cls = classes.get(name)
    if cls is None or name in seen:
        return [name]
    seqs = [c3_mro(b, classes, (*seen, name)) for b in cls.bases] + [list(cls.bases)]
    out = [name]
    while any(seqs):
        head = next((seq[0] for seq in seqs if seq and not any(seq[0] in s[1:] for s in seqs)), "")
        if not head:  # inconsistent hierarchy (Python would refuse it): depth-first order
            for seq in seqs:
                out.extend(c for c in seq if c not in out)
            return out
        out.append(head)
        for seq in seqs:
            if seq and seq[0] == head:
                del seq[0]
    return out


def _delegates(method: str, text: str, mro: Sequence[str], at: int) -> int | None:
    """Index in ``mro`` of the class whose ``method`` this text calls, or None when it calls none."""
    if re.search(r"super\(\s*\)\s*\.\s*" + re.escape(method) + r"\s*\(", text):
        return at + 1
    for i in range(at + 1, len(mro)):
        if re.search(r"\b" + re.escape(mro[i]) + r"\s*\.\s*" + re.escape(method) + r"\s*\(\s*self\b", text):
            return i
    return None


# -- the audit -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mirror:
    """A queue whose runners mirror GPU reference runners (its ``gpu_reference``): its own upstream class and file,
    and the reference queue's upstream class, file and distribution and the reference runners' package."""

    npu_class: str
    npu_file: str
    gpu_class: str
    gpu_file: str
    gpu_dist: str
    gpu_package: str
    first_party: str  # the queue's downstream top-level package (its imports' own section)

    @property
    def gpu_modules(self) -> str:
        """The dotted package of the reference runners: ``<package>.`` begins the name of each of their modules."""
        return self.gpu_package.replace("/", ".") + "."


def mirror(queue: QueueSpec) -> Mirror:
    """The :class:`Mirror` of the queue ``queue`` ; one line when it has no GPU
    reference runners."""
    ref = presets.preset(queue.gpu_reference)
    if ref is None:
        raise QueueError(f"the queue of {queue.upstream_class} names no GPU reference runners (gpu_reference)")
    return Mirror(
        queue.upstream_class,
        queue.upstream_file,
        ref.upstream_class,
        ref.upstream_file,
        ref.upstream_dist,
        ref.package,
        queue.downstream_package,
    )


def npu_counterpart(gpu_file: str, npu_files: Mapping[str, str]) -> str | None:
    base = posixpath.basename(gpu_file)
    if not base.startswith("gpu_"):
        return None
    want = "npu_" + base[len("gpu_") :]
    return next((p for p in sorted(npu_files) if posixpath.basename(p) == want), None)


@dataclass(frozen=True)
class _Where:
    """Where the NPU side resolves one method, for one GPU class."""

    npu_file: str
    npu_line: int = 0
    runs_gpu: str = ""  # non-empty: the GPU method itself runs on NPU, and why
    chain: tuple[RunnerClass, ...] = ()  # the omni NPU classes whose method the NPU side runs, in call order
    modules: tuple[str, ...] = ()  # the NPU modules of the NPU class's MRO (the fallback search)
    ends_in: str = ""  # the non-omni-NPU class whose method the chain ends in ("" if an NPU method does not delegate)
    missing: str = ""  # non-empty: no NPU counterpart at all


def _locate(
    gpu_file: str,
    gpu_cls: str,
    method: str,
    npu_files: Mapping[str, str],
    classes: Mapping[str, RunnerClass],
    npu_class: str,
) -> _Where:
    npu_file = npu_counterpart(gpu_file, npu_files)
    if npu_file is None:
        return _Where("", missing=f"no NPU module for {posixpath.basename(gpu_file)}")
    runners = [c for c in classes.values() if c.module == npu_file and npu_class in c3_mro(c.name, classes)[1:]]
    if not runners:
        return _Where(npu_file, missing=f"no subclass of {npu_class} in {npu_file}")
    mro = c3_mro(runners[0].name, classes)
    modules = (
        npu_file,
        *sorted({classes[c].module for c in mro if c in classes and classes[c].side == "npu"} - {npu_file}),
    )
    chain: list[RunnerClass] = []
    at = 0
    ends_in = ""
    while True:
        owner = next((i for i in range(at, len(mro)) if mro[i] in classes and method in classes[mro[i]].methods), None)
        if owner is None:
            break
        cls = classes[mro[owner]]
        if cls.name == gpu_cls:
            how = f"{chain[-1].name}.{method} calls it" if chain else "inherited"
            line = chain[0].methods[method].start if chain else 0
            return _Where(npu_file, line, runs_gpu=f"runs on NPU as {gpu_cls}.{method} ({how})")
        if cls.side != "npu":
            ends_in = cls.name
            break
        chain.append(cls)
        nxt = _delegates(method, cls.methods[method].text, mro, owner)
        if nxt is None:
            break
        at = nxt
    line = next((c.methods[method].start for c in chain if c.module == npu_file), 0)
    return _Where(npu_file, line, chain=tuple(chain), modules=modules, ends_in=ends_in)


def _judge(
    gpu_file: str, method: str, hunk: _Hunk, where: _Where, npu_files: Mapping[str, str], npu_class: str
) -> GpuChange:
    lines = hunk.meaningful
    total = len(lines)
    unjudged = GpuChange(gpu_file, method, hunk.start, hunk.lines, False, "", where.npu_file, where.npu_line)

    def change(ported: bool, reason: str, missing: Sequence[_Line]) -> GpuChange:
        texts = tuple(line.text for line in missing)
        meaningful = tuple(line.text for line in lines)
        return replace(
            unjudged, ported=ported, reason=reason, meaningful=meaningful, found=total - len(missing), missing=texts
        )

    if where.missing:
        return change(False, where.missing, lines)
    if where.runs_gpu:
        return change(True, where.runs_gpu, ())
    names = ", ".join(f"{c.name}.{method}" for c in where.chain)
    in_method = _Target([code_lines(c.methods[method].text) for c in where.chain]) if where.chain else None
    lacking = [line for line in lines if in_method is None or not in_method.has(line)]
    hits = total - len(lacking)
    if in_method is not None and hits >= PORT_RATIO * total:
        return change(True, f"found in {names} ({hits}/{total} lines)", lacking)
    # anywhere else: whole lines only, as a name alone proves nothing in a whole module
    anywhere = _Target([code_lines(npu_files[m]) for m in where.modules])
    lacking_wide = [line for line in lines if not anywhere.has(line, by_names=False)]
    wide = total - len(lacking_wide)
    if in_method is not None:
        runs = f"not found in {names} ({hits}/{total} lines)"
    elif where.ends_in == npu_class:
        runs = f"shadowed by {npu_class}.{method}"
    elif where.ends_in:
        runs = f"the NPU side runs {where.ends_in}.{method}"
    else:
        runs = f"no NPU method {method}"
    if wide >= PORT_RATIO * total:
        elsewhere = f"found elsewhere in {', '.join(where.modules)} ({wide}/{total} lines)"
        return change(True, f"{runs}, but {elsewhere}", lacking_wide)
    return change(False, runs, lacking)


def audit(
    gpu_files: Mapping[str, str],
    vllm_runner: str,
    npu_files: Mapping[str, str],
    ascend_runner: str,
    *,
    history: Sequence[str] = (),
    queue: QueueSpec,
) -> list[GpuChange]:
    """Every omni change of the GPU copies of ``GPUModelRunner`` methods, with its NPU status.

    ``gpu_files`` / ``npu_files``: module path -> text of the runner modules (more omni modules
    may be passed; their classes then take part in the MRO).  ``vllm_runner``: vLLM's
    ``vllm/v1/worker/gpu_model_runner.py`` of the release the vllm-omni one goes with
    (:mod:`patch_queue.sources.vllm_release`); ``ascend_runner``:
    vllm-ascend's ``vllm_ascend/worker/model_runner_v1.py`` at the NPU runners' base;
    ``history``: the vLLM file at older releases (optional; their code counts as upstream).  ``queue``: the queue
    of the NPU runners, whose upstream and GPU reference name the two classes.
    Changes come sorted by GPU file and line.
    """
    m = mirror(queue)
    classes: dict[str, RunnerClass] = {}
    for side, files in (("npu", npu_files), ("gpu", gpu_files)):
        for path, text in sorted(files.items()):
            for name, cls in runner_classes(path, text, side).items():
                classes.setdefault(name, cls)
    for upstream, text, side, path in (
        (m.npu_class, ascend_runner, "ascend", m.npu_file),
        (m.gpu_class, vllm_runner, "vllm", m.gpu_file),
    ):
        found = runner_classes(path, text, side).get(upstream)
        if found is not None:
            classes[upstream] = replace(found, module="")
    vllm_syms = symbols.symbols_ast(vllm_runner, path=m.gpu_file)
    old_syms = [symbols.symbols_ast(text, path=m.gpu_file) for text in history]
    vocabulary = frozenset[str]().union(*(code_lines(t).all_names() for t in (vllm_runner, *history)))
    carried = adopt.classify(dict(gpu_files), vllm_runner, upstream_path=m.gpu_file, cls=m.gpu_class)

    out: list[GpuChange] = []
    for carry in carried:
        if "." not in carry.downstream:
            continue  # a module-level function of a GPU runner (vllm-omni 0.18.0 has one): the audit is of methods
        gpu_cls, method = carry.downstream.split(".", 1)
        gsym = symbols.symbols_ast(gpu_files[carry.module], path=carry.module)[carry.downstream]
        older = [s[carry.upstream].text for s in old_syms if carry.upstream in s]
        hunks = _hunks(vllm_syms[carry.upstream].text, gsym.text, gsym.start, vocabulary, older)
        if not hunks:
            continue
        where = _locate(carry.module, gpu_cls, method, npu_files, classes, m.npu_class)
        out.extend(_judge(carry.module, method, hunk, where, npu_files, m.npu_class) for hunk in hunks)
    out.sort(key=lambda c: (c.gpu_file, c.gpu_line))
    return out


def findings(changes: Sequence[GpuChange]) -> list[Finding]:
    """One ``gpu-unported`` warning per unported change, on the NPU module (and method) that lacks it."""
    out: list[Finding] = []
    for c in changes:
        if c.ported:
            continue
        gpu_file = posixpath.basename(c.gpu_file)
        where = c.npu_file or gpu_file.replace("gpu_", "npu_", 1)
        first = c.first if len(c.first) <= 100 else c.first[:97] + "..."
        message = f"omni GPU change {gpu_file}:{c.gpu_line} in {c.method} not on NPU ({c.reason}): {first}"
        out.append(Finding(posixpath.basename(where), c.npu_line, RULE, WARNING, message))
    return out


# -- vLLM's runner from the registry ---------------------------------------------------------


def load_vllm_runner(version: str, queue: QueueSpec) -> str:
    """The GPU reference's upstream file (vLLM's runner) of its release ``version``, from the registry (``queue``:
    the queue whose GPU reference it is).

    vLLM's wheels are platform builds of about 300 MiB; :func:`patch_queue.sources.registry.pick_file`
    takes its 40 MiB sdist, which holds the same source.  The archive is pinned, cached and
    sha256-checked like every release pq reads.
    """
    m = mirror(queue)
    snapshot = release_snapshot(m.gpu_dist, version, progress=lambda _: None)
    if not snapshot.exists(m.gpu_file):
        raise SourceError(f"{m.gpu_dist}=={version} holds no {m.gpu_file}")
    return snapshot.read(m.gpu_file).decode("utf-8")
