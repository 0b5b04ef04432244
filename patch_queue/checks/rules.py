"""``pq check``: the maintainers' upgrade checklist, run on the built runner package.

Each check is a pure function of module texts (and, for some, upstream sources) returning
:class:`~patch_queue.checks.findings.Finding` objects:

- ``parse``: every module parses and compiles;
- ``fence``: ``Omni-new`` fences are balanced (see :mod:`patch_queue.merge.anchors`);
- ``omni-block-missing`` / ``omni-block-duplicated`` / ``omni-block-changed``: every omni block
  of a reference build (the previous build, or the adopted release) is present exactly once;
- the NPU rules of ``rules.toml`` (and a project's ``patches/check-rules.toml``): data, so a
  maintainer adds a rule without touching this code; every key's type is checked (file:line), and a
  rule's pattern runs with a time limit (:mod:`patch_queue.checks.rule_files`);
- ``signature-drift``: a method the runner classes override or carry whose parameters differ from the
  method of the same name in the upstream base class at the target version;
- import resolution (:mod:`patch_queue.checks.imports`) and the GPU-side audit
  (:mod:`patch_queue.checks.gpu_audit`) are wired in by the engine, which knows where the sources are.
"""

from __future__ import annotations

import ast
import difflib
import fnmatch
import functools
import re
import tokenize
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from patch_queue import presets
from patch_queue.checks import rule_files
from patch_queue.checks.findings import ERROR, WARNING, Finding
from patch_queue.errors import QueueError
from patch_queue.merge import anchors

USER_RULES = "check-rules.toml"


# ---------------------------------------------------------------------------------------------
# parse and fences


def check_parse(files: Mapping[str, str]) -> list[Finding]:
    out: list[Finding] = []
    for path, text in sorted(files.items()):
        try:
            compile(text, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            out.append(Finding(path, exc.lineno or 0, "parse", ERROR, f"does not compile: {exc.msg}"))
    return out


def check_fences(files: Mapping[str, str]) -> list[Finding]:
    out: list[Finding] = []
    for path, text in sorted(files.items()):
        _blocks, problems = anchors.parse_blocks(text)
        out += [Finding(path, p.line, "fence", WARNING, p.message) for p in problems]
    return out


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _block_keys(text: str) -> list[tuple[anchors.Block, str]]:
    """Each omni block of ``text`` with its text squashed (no whitespace): what blocks are compared by."""
    lines = text.splitlines(keepends=True)
    blocks, _problems = anchors.parse_blocks(text)
    return [(b, _squash("".join(lines[b.start - 1 : b.end]))) for b in blocks]


def _code(text: str) -> str:
    """``text`` without its comment lines."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("#"))


def _code_of(block: anchors.Block, text: str) -> str:
    """The code of an omni block of ``text`` (its fences and comments left out), squashed."""
    return _squash(_code("".join(text.splitlines(keepends=True)[block.start - 1 : block.end])))


def check_blocks(reference: Mapping[str, str], files: Mapping[str, str], *, what: str) -> list[Finding]:
    """Every omni block of ``reference`` is in ``files`` exactly once (compared without whitespace).

    A block whose text changed but whose first line is still there, once, is ``omni-block-changed``
    (a warning: a merge or a maintainer edited it); gone entirely is ``omni-block-missing``, unless
    its code stands in the module outside any block (``omni-block-upstream``, a warning: upstream
    has it now, and the merge kept upstream's copy); more copies than the reference has is
    ``omni-block-duplicated``.
    """
    out: list[Finding] = []
    for path in sorted(reference):
        ref_blocks = _block_keys(reference[path])
        if not ref_blocks:
            continue
        text = files.get(path)
        if text is None:
            message = f"the module with {len(ref_blocks)} omni blocks of {what} is gone"
            out.append(Finding(path, 0, "omni-block-missing", ERROR, message))
            continue
        now = _block_keys(text)
        unmatched = list(range(len(now)))  # blocks of the checked text no reference block accounts for
        lost: list[tuple[anchors.Block, str]] = []
        for block, key in ref_blocks:
            hit = next((i for i in unmatched if now[i][1] == key), None)
            if hit is None:
                lost.append((block, key))
            else:
                unmatched.remove(hit)
        ref_keys = {key for _block, key in ref_blocks}
        for i in list(unmatched):
            block, key = now[i]
            if key in ref_keys:  # one more copy of a block the reference has
                message = f"omni block {block.first!r} of {what} appears more often than there"
                out.append(Finding(path, block.start, "omni-block-duplicated", ERROR, message))
                unmatched.remove(i)
        for block, key in lost:
            similar = next(
                (
                    i
                    for i in unmatched
                    if now[i][0].first == block.first
                    or difflib.SequenceMatcher(None, now[i][1], key, autojunk=False).ratio() >= 0.6
                ),
                None,
            )
            if similar is not None:
                unmatched.remove(similar)
                message = f"omni block {block.index} of {what} ({block.first!r}) was changed"
                out.append(Finding(path, now[similar][0].start, "omni-block-changed", WARNING, message))
            elif _code_of(block, reference[path]) and _code_of(block, reference[path]) in _squash(_code(text)):
                message = (
                    f"omni block {block.index} of {what} (line {block.start}: {block.first!r}) is gone, "
                    "but its code is in the module outside any block: upstream has it now"
                )
                out.append(Finding(path, 0, "omni-block-upstream", WARNING, message))
            else:
                message = f"omni block {block.index} of {what} (line {block.start}: {block.first!r}) is gone"
                out.append(Finding(path, 0, "omni-block-missing", ERROR, message))
    return sorted(set(out))


# ---------------------------------------------------------------------------------------------
# data-driven NPU rules


@dataclass(frozen=True)
class Rule:
    id: str
    kind: str
    severity: str
    message: str
    options: Mapping[str, object]
    files: tuple[str, ...] = ()
    source: str = field(default="", compare=False)  # the rule file, and the line of the rule's pattern (or head)
    line: int | None = field(default=None, compare=False)

    def applies(self, path: str) -> bool:
        return not self.files or any(fnmatch.fnmatch(Path(path).name, g) for g in self.files)


# the options each kind of rule needs, and the type of every key a rule may have (see rule_files.type_error)
_KINDS: dict[str, tuple[str, ...]] = {
    "regex": ("pattern",),
    "call-keyword": ("call", "keyword"),
    "assign-call": ("attribute", "allowed"),
    "duplicate": (),
}
_FIELDS = ("id", "kind", "severity", "message")
_TYPES = {
    **dict.fromkeys(_FIELDS, "str"),
    "files": "strs",
    "pattern": "str",
    "scope": "str",
    "call": "str",
    "keyword": "str",
    "attribute": "str",
    "allowed": "strs",
    "min_lines": "int",
}


def parse_rules(text: str, *, path: str) -> list[Rule]:
    """The rules of one rules file; one line naming the file, the line and the key of the first bad value."""
    data = rule_files.parse(text, path)
    raws = data.get("rule", [])
    if not isinstance(raws, list):
        raise QueueError(
            "rule must be an array of [[rule]] tables", path=path, line=rule_files.key_line(text, (1, 1), "rule")
        )
    spans = rule_files.table_lines(text, "rule")
    rules: list[Rule] = []
    for i, raw in enumerate(raws):
        span = spans[i] if i < len(spans) else None
        where = f"rule[{i}]"

        def fail(
            message: str, key: str | None = None, where: str = where, span: tuple[int, int] | None = span
        ) -> QueueError:
            line = rule_files.key_line(text, span, key) if key else (span[0] if span else None)
            return QueueError(f"{where}{message}", path=path, line=line)

        if not isinstance(raw, dict):
            raise fail(" must be a table")
        for key in _FIELDS:
            if key not in raw:
                raise fail(f".{key} must be a non-empty string")
        named = f"{where} ({raw['id']})" if isinstance(raw["id"], str) and raw["id"] else where
        for key, value in raw.items():
            if key not in _TYPES:
                known = ", ".join(sorted(_TYPES))
                raise fail(f" has an unknown key {key!r} (a rule's keys: {known})", key)
            problem = rule_files.type_error(value, _TYPES[key])
            if problem is not None:
                raise fail(f".{key} {problem}", key)
        if raw["kind"] not in _KINDS:
            raise fail(f".kind {raw['kind']!r} is not one of {', '.join(sorted(_KINDS))}", "kind")
        if raw["severity"] not in (ERROR, WARNING):
            raise fail(".severity must be 'error' or 'warning'", "severity")
        if raw.get("scope", "code") not in ("code", "all"):
            raise fail(".scope must be 'code' or 'all'", "scope")
        for key in _KINDS[raw["kind"]]:
            if key not in raw:
                raise QueueError(f"{named} needs {key!r}", path=path, line=span[0] if span else None)
        if raw["kind"] == "regex":
            try:
                rule_files.compiled(raw["pattern"])
            except rule_files.PatternError as exc:
                raise QueueError(
                    f"{named}: bad pattern: {exc}", path=path, line=rule_files.key_line(text, span, "pattern")
                ) from None
        options = {k: v for k, v in raw.items() if k not in (*_FIELDS, "files")}
        line = rule_files.key_line(text, span, "pattern")
        rules.append(
            Rule(
                raw["id"],
                raw["kind"],
                raw["severity"],
                raw["message"],
                options,
                tuple(raw.get("files", [])),
                path,
                line,
            )
        )
    return rules


def load_rules(project_patches: Path | None, rule_set: str) -> list[Rule]:
    """The built-in rules of the queue's rule set (``rule_set``: a queue's ``rules``;
    :data:`patch_queue.presets.RULE_FILES` names its file, none for a set without), with a project's
    ``patches/check-rules.toml`` added (same id replaces)."""
    name = presets.RULE_FILES.get(rule_set)
    rules: dict[str, Rule] = {}
    if name is not None:
        builtin = resources.files("patch_queue.checks").joinpath(name).read_text(encoding="utf-8")
        rules = {r.id: r for r in parse_rules(builtin, path=f"patch_queue/checks/{name}")}
    if project_patches is not None and (project_patches / USER_RULES).is_file():
        user = project_patches / USER_RULES
        for r in parse_rules(rule_files.read(user), path=str(user)):
            rules[r.id] = r
    return list(rules.values())


def code_only(text: str) -> str:
    """``text`` with comments and string literals blanked (line and column numbers kept).

    The tokens are read as a stream and only the lines that hold a comment or a string are taken
    apart, so memory stays a small multiple of the text however large it is.
    """
    lines = text.splitlines(keepends=True)
    spans: dict[int, list[tuple[int, int]]] = {}  # 0-based line -> the column ranges to blank
    try:
        for tok in tokenize.generate_tokens(functools.partial(next, iter(lines), "")):  # no 4-byte StringIO copy
            if tok.type in (tokenize.COMMENT, tokenize.STRING):
                (sr, sc), (er, ec) = tok.start, tok.end
                for row in range(sr, er + 1):
                    width = len(lines[row - 1])
                    spans.setdefault(row - 1, []).append(
                        (sc if row == sr else 0, min(ec if row == er else width, width))
                    )
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text
    for i, ranges in spans.items():
        chars = list(lines[i])
        for lo, hi in ranges:
            chars[lo:hi] = [" " if c != "\n" else c for c in chars[lo:hi]]
        lines[i] = "".join(chars)
    return "".join(lines)


def _call_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


_TRIVIAL = re.compile(r"^(\)|\]|\}|\)\:|else:|try:|pass|return|continue|break|\)\)|\),|\],)$")


def _duplicates(tree: ast.AST, lines: list[str], min_lines: int) -> list[tuple[int, int, str]]:
    """(line of the second copy, line of the first, name) for repeated runs of meaningful lines in a function."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        own = enumerate(lines[node.lineno - 1 : node.end_lineno or node.lineno], node.lineno)
        body = [
            (n, s)
            for n, s in ((n, _squash(line)) for n, line in own)
            if s and not s.startswith("#") and not _TRIVIAL.match(s)
        ]
        starts = {n.lineno for n in ast.walk(node) if isinstance(n, ast.stmt)}
        seen: dict[tuple[str, ...], int] = {}
        last_hit = -min_lines
        for i in range(len(body) - min_lines + 1):
            window = tuple(s for _n, s in body[i : i + min_lines])
            # a repeated run must hold statements, not just the arguments of two similar calls
            if sum(1 for n, _s in body[i : i + min_lines] if n in starts) < 3:
                continue
            first = seen.get(window)
            if first is None:
                seen[window] = i
            elif i - first >= min_lines and i - last_hit >= min_lines:
                found.append((body[i][0], body[first][0], node.name))
                last_hit = i
    return found


def _assigned_calls(tree: ast.AST, attribute: object) -> Iterator[tuple[int, str]]:
    """(line, callee name) of every ``self.<attribute> = callee(...)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(
                isinstance(t, ast.Attribute)
                and t.attr == attribute
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
                for t in targets
            ):
                yield node.lineno, _call_name(node.value.func)


def check_rules(files: Mapping[str, str], rules: Iterable[Rule]) -> list[Finding]:
    out: list[Finding] = []
    for path, text in sorted(files.items()):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue  # reported by check_parse
        code = code_only(text)
        for rule in rules:
            if not rule.applies(path):
                continue
            opts = rule.options
            hits: list[tuple[int, str]]  # (line, message)
            if rule.kind == "regex":
                haystack = text if opts.get("scope") == "all" else code
                try:
                    found = rule_files.finditer(str(opts["pattern"]), haystack)
                except rule_files.RuleTimeout:
                    raise rule_files.timed_out(rule.source, rule.line, rule.id, path) from None
                hits = [(haystack.count("\n", 0, m.start()) + 1, rule.message) for m in found]
            elif rule.kind == "call-keyword":
                hits = [
                    (kw.value.lineno, rule.message)
                    for node in ast.walk(tree)
                    if isinstance(node, ast.Call) and _call_name(node.func) == opts["call"]
                    for kw in node.keywords
                    if kw.arg == opts["keyword"]
                ]
            elif rule.kind == "assign-call":
                listed = opts["allowed"]
                allowed = {str(a) for a in listed} if isinstance(listed, list) else set()
                hits = [
                    (line, f"{rule.message} (found {callee or 'a call'})")
                    for line, callee in _assigned_calls(tree, opts["attribute"])
                    if callee not in allowed
                ]
            else:  # duplicate (parse_rules admits no other kind)
                min_lines = int(str(opts.get("min_lines", 6)))
                hits = [
                    (line, f"{rule.message}: {name} repeats lines from line {first}")
                    for line, first, name in _duplicates(tree, text.splitlines(), min_lines)
                ]
            out += (Finding(path, line, rule.id, rule.severity, message) for line, message in hits)
    return sorted(set(out))


# ---------------------------------------------------------------------------------------------
# signature drift


_Function = ast.FunctionDef | ast.AsyncFunctionDef
_Params = tuple[tuple[str, str, bool], ...]


def _params(fn: _Function) -> _Params:
    """(name, kind, has default) of every parameter, in order."""
    a = fn.args
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    out = [(arg.arg, "positional", i >= first_default) for i, arg in enumerate(positional)]
    if a.vararg:
        out.append((a.vararg.arg, "*args", False))
    out += [(arg.arg, "keyword", default is not None) for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.kwarg:
        out.append((a.kwarg.arg, "**kwargs", False))
    return tuple(out)


def _drift(mine: _Params, theirs: _Params) -> str:
    """What differs, in words: extra and missing parameters, changed kinds or defaults, order."""
    a = {n: (k, d) for n, k, d in mine}
    b = {n: (k, d) for n, k, d in theirs}
    parts = []
    extra = [n for n in a if n not in b]
    missing = [n for n in b if n not in a]
    if extra:
        parts.append("extra " + ", ".join(extra))
    if missing:
        parts.append("missing " + ", ".join(missing))
    for n in a:
        if n in b and a[n] != b[n]:
            (k1, d1), (k2, d2) = a[n], b[n]
            parts.append(f"{n} is {k1}{' with default' if d1 else ''} here, {k2}{' with default' if d2 else ''} there")
    if not parts:
        parts.append("parameter order differs")
    return "; ".join(parts)


def _methods(tree: ast.Module) -> dict[str, dict[str, _Function]]:
    classes = (node for node in tree.body if isinstance(node, ast.ClassDef))
    return {c.name: {n.name: n for n in c.body if isinstance(n, _Function)} for c in classes}


def _base_names(cls: ast.ClassDef) -> set[str]:
    """The last name of each base class expression (``a.B`` and ``B`` are both ``B``)."""
    out = set()
    for base in cls.bases:
        if isinstance(base, ast.Subscript):  # Generic[T] and friends
            base = base.value
        if isinstance(base, ast.Name):
            out.add(base.id)
        elif isinstance(base, ast.Attribute):
            out.add(base.attr)
    return out


def _runner_classes(trees: Iterable[ast.Module], base_class: str) -> set[str]:
    """The classes of the package in a runner's method resolution order: those deriving from
    ``base_class`` (directly or through another such class of the package), and the package's own
    classes they derive from (a mixin's method overrides ``base_class``'s too). A helper class
    (``_NPUHostCopyBatch``, an output type) is none of these: its ``__init__`` is no runner's."""
    bases: dict[str, set[str]] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(_base_names(node))
    runners: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, of in bases.items():
            if name not in runners and of & (runners | {base_class}):
                runners.add(name)
                grew = True
    mixins = {b for name in runners for b in bases[name] if b in bases}
    return runners | mixins


def check_signatures(
    files: Mapping[str, str], upstream: str, *, base_class: str, label: str = "upstream"
) -> list[Finding]:
    """Methods of the runner classes whose parameters differ from ``base_class``'s method of that name.

    Only the classes of a runner's method resolution order count (:func:`_runner_classes`). A method
    that takes ``*args, **kwargs`` and hands them on is compatible with any signature and is not
    reported.
    """
    try:
        up = _methods(ast.parse(upstream)).get(base_class, {})
    except SyntaxError:
        return []
    trees: dict[str, ast.Module] = {}
    for path, text in sorted(files.items()):
        try:
            trees[path] = ast.parse(text)
        except SyntaxError:
            continue
    runners = _runner_classes(trees.values(), base_class)
    out: list[Finding] = []
    for path, tree in trees.items():
        for cls, methods in _methods(tree).items():
            if cls not in runners:
                continue
            for name, fn in methods.items():
                base = up.get(name)
                if base is None or name.startswith("__") and name != "__init__":
                    continue
                mine, theirs = _params(fn), _params(base)
                if mine == theirs:
                    continue
                kinds = {k for _n, k, _d in mine}
                if "*args" in kinds and "**kwargs" in kinds:
                    continue
                message = f"{cls}.{name} vs {base_class}.{name} at {label}: {_drift(mine, theirs)}"
                out.append(Finding(path, fn.lineno, "signature-drift", WARNING, message))
    return out
