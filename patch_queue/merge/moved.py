"""Code upstream moved into a helper, and the omni side's copy of it (issue 48, point 3).

Where upstream deleted lines in a conflict region and the statements of those lines (layout and comments aside,
names renamed, guard clauses inverted) now stand in a helper its new code calls, and the patch side holds a copy
of the deleted lines, the region is explained ("upstream moved these lines into `_finish_profiling_chunk_timing`,
which `execute_model` now calls") and, where the omni copy is the old lines with small edits only, a resolution is
suggested: the patch's side without its copy, upstream's new lines in its place.

Pure functions of texts: the region's three sides, the new upstream module (where the region's method is, and the
imports that name the helper) and a reader of other upstream modules (:func:`helpers` resolves a called name
through the module's imports to its module in the upstream snapshot, or to a function or method of the module
itself); :func:`find` compares.

The measure: each side's statements are flattened to *atoms* (a simple statement; a compound statement's header
test), written as ``ast.unparse`` writes them, with the locals a method binds once to an attribute chain (``cfg =
self.ascend_config.x``) put back as that chain, the helper's parameters as its call passes them, a ``return V``
as the binding the call makes (``t = V``) and a call of a one-statement method of the class (``self._sync_device()``)
as that statement; a deleted statement is in the helper when its atoms are alike the helper's (difflib's ratio of
their words, ``self.``, leading underscores, ``not`` and brackets aside) by :data:`ALIKE` on average (:data:`SURE`
for a statement of one atom), and more alike them than upstream's new lines of the region.  The omni copy may
differ from the old lines by a local it reads them through, renamed names, a comment, or an ``and`` condition
without a call (``cfg.enabled and …``): the explanation names each.  A copy that makes a call neither the old
lines nor the helper make, writes a statement of its own, or names something upstream's code has nowhere, is never
dropped: the explanation says so; nor is one where upstream changed other lines of the region too, or deleted code
the patch side still holds (the explanation says the copy may go, and why nothing is suggested).
"""

from __future__ import annotations

import ast
import copy
import difflib
import functools
import re
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

SURE = 0.9  # the likeness a deleted statement of one atom needs
ALIKE = 0.6  # the mean likeness of a deleted statement's atoms to the helper's, for it to count as moved there
_WORD = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d*)?|\S")
_PUNCTUATION = frozenset(".,:()[]{}")  # no word of its own: two calls of other names are not alike by their brackets
_CLAUSE = re.compile(r"(elif\b|else\s*:|except\b|finally\s*:)")


@dataclass(frozen=True)
class Helper:
    """A function upstream's new code calls: its name as called, the module it is defined in (``""``: the region's
    own module), its definition, and the call (in ``caller``: a method of the new upstream module, ``""`` when the
    region's new lines make it) with the name its result is bound to."""

    name: str
    module: str
    node: ast.FunctionDef
    call: ast.Call
    target: str | None
    caller: str


@dataclass(frozen=True)
class Moved:
    """Lines upstream deleted in a region that are now in ``helper``; ``copy``: the patch side's lines holding the
    omni copy (1-based, first and last), ``differs``: what the copy has that the old lines had not, ``blocked``: why
    the copy is not to be dropped ("" when it may be), ``text``: the suggested resolution (None: none)."""

    helper: Helper
    statements: int  # deleted statements found in the helper
    of: int  # deleted statements in the hunk
    alike: float  # their mean likeness to the helper's
    copy: tuple[int, int]
    differs: tuple[str, ...]
    blocked: str
    text: str | None
    orphans: tuple[str, ...] = ()  # locals the patch's method binds outside the region that only the copy reads
    held_back: str = ""  # why no resolution is suggested though the copy may go (other code of the region)

    def said(self) -> str:
        """The explanation, in one line."""
        h = self.helper
        where = f" ({h.module})" if h.module else ""
        caller = f"`{h.caller}` now calls" if h.caller else "the new code calls"
        out = (
            f"upstream moved these lines into `{h.name}`{where}, which {caller} ({self.statements} of {self.of} "
            f"deleted statement(s), {round(100 * self.alike)}% alike)"
        )
        first, last = self.copy
        out += f"; the patch side holds a copy (its lines {first}-{last})"
        out += f": {', '.join(self.differs)}" if self.differs else ", the old lines as they were"
        if self.blocked:
            out += f"; {self.blocked}: the copy is not dropped, port it by hand"
        elif self.held_back:
            out += f"; the copy may go, but {self.held_back}"
        elif self.orphans:
            names = ", ".join(f"`{n}`" for n in self.orphans)
            out += f"; without it nothing in the method reads {names} (bound outside this region: remove it too)"
        return out

    @property
    def reason(self) -> str:
        return self.said() + "; the patch's side without its copy, upstream's new lines in its place"

    def told(self) -> Told:
        return Told(self.said(), self.reason, self.text)


@dataclass(frozen=True)
class Told:
    """What is said of a :class:`Moved` (the ``moved:`` line), the reason of its suggestion and the suggested text
    (None: none): what `pq status` shows, kept in the download cache."""

    said: str
    reason: str
    text: str | None


# ---------------------------------------------------------------------------------------------------------------
# parsing a side's lines


def _parse(lines: Sequence[str]) -> list[tuple[ast.stmt, int, int]] | None:
    """The top-level statements of ``lines`` (a piece of a region's side, all at one depth or deeper) with their
    first and last line (0-based, into ``lines``), None when they do not parse alone."""
    code = [x for x in lines if x.strip() and not x.lstrip().startswith("#")]
    if not code or _CLAUSE.match(code[0].lstrip()) or code[-1].rstrip().endswith((",", ":", "(", "[", "\\")):
        return None
    indent = len(code[0]) - len(code[0].lstrip())
    if any(len(x) - len(x.lstrip()) < indent for x in code):
        return None
    text = textwrap.dedent("".join(x if x.endswith("\n") else x + "\n" for x in lines))
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    # a region holding a whole ``def`` (its first line among the region's): the statements of its body
    body = [y for n in tree.body for y in (n.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) else [n])]
    return [(n, n.lineno - 1, (n.end_lineno or n.lineno) - 1) for n in body]


def _window(lines: Sequence[str]) -> tuple[int, list[tuple[ast.stmt, int, int]]] | None:
    """The statements of ``lines`` from the first line they parse from (a region may begin inside a statement:
    the end of a ``def``'s signature), with that line; a few lines tried, then None."""
    for start in range(min(len(lines), 8)):
        found = _parse(lines[start:])
        if found is not None:
            return start, [(n, a + start, b + start) for n, a, b in found]
    return None


# ---------------------------------------------------------------------------------------------------------------
# atoms


class _Inline(ast.NodeTransformer):
    """Names put back as the expressions they stand for (a side's locals, a helper's parameters)."""

    def __init__(self, names: dict[str, ast.expr]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.names:
            return self.names[node.id]
        return node


def _inline(node: ast.AST, names: dict[str, ast.expr]) -> ast.AST:
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    for _ in range(2):  # and the names those read
        used |= {n.id for k in list(used) if k in names for n in ast.walk(names[k]) if isinstance(n, ast.Name)}
    names = {k: v for k, v in names.items() if k in used}
    if not names:
        return node
    resolved = dict(names)
    for _ in range(2):  # a local read through another (never through itself)
        resolved = {
            k: _Inline({n: e for n, e in resolved.items() if n != k}).visit(copy.deepcopy(v))
            for k, v in resolved.items()
        }
    out: ast.AST = _Inline(resolved).visit(copy.deepcopy(node))
    return out


def _atoms(node: ast.stmt, names: dict[str, ast.expr], result: str | None = None) -> list[str]:
    """The simple statements and the header tests of ``node``, each as ``ast.unparse`` writes it, ``names``
    inlined; ``result``: a helper's ``return V`` is ``result = V`` (a bare ``return`` or ``return None``: no atom)."""
    node = _inline(node, names)  # type: ignore[assignment]
    out: list[str] = []
    if isinstance(node, ast.If | ast.While):
        out.append(ast.unparse(node.test))
        for y in [*node.body, *node.orelse]:
            out += _atoms(y, {}, result)
    elif isinstance(node, ast.For | ast.AsyncFor):
        out.append(f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}")
        for y in [*node.body, *node.orelse]:
            out += _atoms(y, {}, result)
    elif isinstance(node, ast.With | ast.AsyncWith):
        out.append("with " + ", ".join(ast.unparse(i) for i in node.items))
        for y in node.body:
            out += _atoms(y, {}, result)
    elif isinstance(node, ast.Try):
        for y in [*node.body, *(s for h in node.handlers for s in h.body), *node.orelse, *node.finalbody]:
            out += _atoms(y, {}, result)
    elif isinstance(node, ast.Return):
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            out.append(f"{result or '_'} = {ast.unparse(node.value)}")
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        pass  # a docstring
    else:
        out.append(ast.unparse(node))
    return out


@functools.lru_cache(maxsize=4096)
def _words(atom: str) -> tuple[str, ...]:
    """An atom's words for comparing: ``self.`` and leading underscores aside (a local that became an attribute,
    or a private name), ``not`` aside (a guard clause is the old condition inverted), brackets, dots and commas
    aside."""
    atom = re.sub(r"\bself\.", "", atom)
    return tuple(w.lstrip("_") or w for w in _WORD.findall(atom) if w != "not" and w not in _PUNCTUATION)


@functools.lru_cache(maxsize=16384)
def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, _words(a), _words(b), autojunk=False).ratio()


def _best(atom: str, others: Sequence[str]) -> float:
    return max((_ratio(atom, o) for o in others), default=0.0)


def _expanded(atoms: list[str], methods: dict[str, ast.FunctionDef]) -> list[str]:
    """``atoms`` with a call of a one-statement method of the module (``self._sync_device()``) put back as that
    statement (``torch.npu.synchronize()``)."""
    out: list[str] = []
    for atom in atoms:
        m = re.fullmatch(r"self\.(\w+)\(\)", atom)
        method = methods.get(m[1]) if m else None
        body = [] if method is None else [n for n in method.body if not _docstring(n)]
        if method is not None and len(body) == 1 and isinstance(body[0], ast.Expr) and not method.args.args[1:]:
            out.append(ast.unparse(body[0]))
        else:
            out.append(atom)
    return out


def _docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


@functools.lru_cache(maxsize=64)
def aliases(text: str, symbol: str) -> dict[str, ast.expr]:
    """The locals ``symbol`` (``Class.method`` or a function) of the module ``text`` binds once, to an attribute
    chain (``cfg = self.ascend_config.scheduler_config.cfg``): what its statements read through them (kept: read it,
    never change it)."""
    try:
        tree = _tree(text)
    except (SyntaxError, ValueError):
        return {}
    return _aliases(_function(tree, symbol))


def _aliases(node: ast.FunctionDef | None) -> dict[str, ast.expr]:
    if node is None:
        return {}
    found: dict[str, list[ast.expr]] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            for t in targets:
                for name in ast.walk(t):
                    if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                        value = n.value if isinstance(n, ast.Assign) and len(targets) == 1 and t is name else None
                        found.setdefault(name.id, []).append(value if value is not None else ast.Constant(None))
    return {k: v[0] for k, v in found.items() if len(v) == 1 and _chain(v[0])}


def _chain(node: ast.expr) -> bool:
    """``self.a.b`` or ``x.a``: names and attributes only."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _function(tree: ast.Module, symbol: str) -> ast.FunctionDef | None:
    *outer, name = symbol.split(".")
    body: list[ast.stmt] = tree.body
    for klass in outer:
        found = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == klass), None)
        if found is None:
            return None
        body = found.body
    return next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)


# ---------------------------------------------------------------------------------------------------------------
# the helpers upstream's new code calls


def _called(node: ast.AST) -> list[tuple[str, ast.Call, str | None]]:
    """The calls ``node`` makes of a plain name or of ``self.NAME``: (name as written, the call, the name its result
    is bound to when a statement binds it)."""
    out: list[tuple[str, ast.Call, str | None]] = []
    bound: dict[int, str] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.Call):
            bound[id(n.value)] = ast.unparse(n.targets[0])
    for n in ast.walk(node):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if isinstance(f, ast.Name):
            out.append((f.id, n, bound.get(id(n))))
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            out.append((f"self.{f.attr}", n, bound.get(id(n))))
    return out


def _module_path(module: str, level: int, here: str) -> list[str]:
    """Where the module ``from <level dots><module> import …`` in the file ``here`` names may be."""
    if level:
        parts = here.split("/")[:-level]
        module = ".".join([*parts, *([module] if module else [])])
    path = module.replace(".", "/")
    return [f"{path}.py", f"{path}/__init__.py"]


def helpers(
    new: str,
    old: str,
    path: str,
    symbol: str,
    region_new: str,
    read: Callable[[str], str | None],
) -> list[Helper]:
    """The functions upstream's new code calls that may hold code it moved: those the region's new lines
    (``region_new``) call, then those the new upstream module ``new`` (at ``path``) calls and the old one ``old``
    does not (in ``symbol``'s own method first): a method of the module's class, a function of the module, or one it
    imports (``read``: an upstream file's text, None when there is none)."""
    try:
        _tree(new)
    except (SyntaxError, ValueError):
        return []
    calls: list[tuple[str, ast.Call, str | None, str]] = []
    parsed = _window(region_new.splitlines(keepends=True))
    for node, _a, _b in parsed[1] if parsed else []:
        calls += [(name, c, t, "") for name, c, t in _called(node)]
    calls += _module_calls(new, old, symbol)
    out: list[Helper] = []
    seen: set[str] = set()
    for name, call, target, caller in calls:
        if name in seen or name == f"self.{symbol.rpartition('.')[2]}":
            continue
        seen.add(name)
        found = _definition(new, symbol, name, path, read)
        if found is not None:
            klass = symbol.split(".")[0] if "." in symbol else ""
            inlined = _inline(call, _caller_aliases(new, f"{klass}.{caller}" if klass and caller else caller or symbol))
            assert isinstance(inlined, ast.Call)
            out.append(Helper(name.removeprefix("self."), found[1], found[0], inlined, target, caller))
    return out


@functools.lru_cache(maxsize=16)
def _module_calls(new: str, old: str, symbol: str) -> list[tuple[str, ast.Call, str | None, str]]:
    """The calls the new upstream module makes that the old one does not, ``symbol``'s method's first: (name, the
    call, the name bound to its result, the calling method or function)."""
    tree = _tree(new)
    klass = symbol.split(".")[0] if "." in symbol else ""
    methods = _methods(tree, klass)
    mine = _function(tree, symbol)
    others = [mine] if mine is not None else []
    others += [m for m in methods.values() if m is not mine]
    others += [f for f in tree.body if isinstance(f, ast.FunctionDef) and f not in others]
    made = _new_calls(new, old)
    return [
        (name, c, t, f.name)
        for f in others
        for name, c, t in made.get((klass if f in methods.values() else "", f.name), [])
    ]


@functools.lru_cache(maxsize=4)
def _new_calls(new: str, old: str) -> dict[tuple[str, str], list[tuple[str, ast.Call, str | None]]]:
    """The calls each function of the new module makes (by its class, ``""`` for a function of the module, and its
    name) that the old module ``old`` makes nowhere."""
    try:
        before = {name for name, _c, _t in _called(_tree(old))} if old else set()
    except (SyntaxError, ValueError):
        before = set()
    tree = _tree(new)
    out: dict[tuple[str, str], list[tuple[str, ast.Call, str | None]]] = {}
    for owner, body in [("", tree.body), *((k.name, k.body) for k in tree.body if isinstance(k, ast.ClassDef))]:
        for f in body:
            if isinstance(f, ast.FunctionDef):
                out[(owner, f.name)] = [(name, c, t) for name, c, t in _called(f) if name not in before]
    return out


@functools.lru_cache(maxsize=64)
def _caller_aliases(new: str, symbol: str) -> dict[str, ast.expr]:
    return aliases(new, symbol)


@functools.lru_cache(maxsize=256)
def _definition(
    new: str, symbol: str, name: str, path: str, read: Callable[[str], str | None]
) -> tuple[ast.FunctionDef, str] | None:
    """Where ``name`` (as called in ``symbol`` of the module ``new`` at ``path``) is defined: a method of the class,
    a function of the module (``""``), or a function of the upstream module it is imported from (that module's
    path); None when it is none of those (a builtin, a name of another project)."""
    tree = _tree(new)
    if name.startswith("self."):
        method = _methods(tree, symbol.split(".")[0] if "." in symbol else "").get(name[5:])
        return None if method is None else (method, "")
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if function is not None:
        return function, ""
    imported = next(
        ((n.module or "", n.level, a.name) for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names
         if (a.asname or a.name) == name),
        None,
    )  # fmt: skip
    if imported is None:
        return None
    module, level, real = imported
    for candidate in _module_path(module, level, path):
        text = read(candidate)
        if text is None:
            continue
        try:
            other = _tree(text)
        except (SyntaxError, ValueError):
            return None
        node = next((n for n in other.body if isinstance(n, ast.FunctionDef) and n.name == real), None)
        return None if node is None else (node, candidate)
    return None


def methods(text: str, symbol: str) -> dict[str, ast.FunctionDef]:
    """The methods of ``symbol``'s class (``Class.method``) in the module ``text``."""
    try:
        return _methods(_tree(text), symbol.split(".")[0]) if "." in symbol else {}
    except (SyntaxError, ValueError):
        return {}


@functools.lru_cache(maxsize=128)
def _tree(text: str) -> ast.Module:
    """The syntax tree of ``text`` (kept: every region of a module reads the same upstream module); never change it."""
    return ast.parse(text)


def _methods(tree: ast.Module, klass: str) -> dict[str, ast.FunctionDef]:
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == klass), None)
    return {} if node is None else {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}


def _helper_atoms(h: Helper) -> list[str]:
    """The helper's body as atoms, its parameters as the call passes them (the caller's locals bound to an
    attribute chain put back as that chain: :func:`helpers`)."""
    return list(_helper_atoms_of(h.node, ast.unparse(h.call), h.target))


@functools.lru_cache(maxsize=256)
def _helper_atoms_of(node: ast.FunctionDef, written: str, target: str | None) -> tuple[str, ...]:
    """:func:`_helper_atoms` of the definition ``node`` (one of :func:`_tree`'s, kept) called as ``written``."""
    call = ast.parse(written, mode="eval").body
    assert isinstance(call, ast.Call)
    params = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
    if params[:1] == ["self"]:
        params = params[1:]
    passed: dict[str, ast.expr] = dict(zip(params, call.args, strict=False))
    passed.update({kw.arg: kw.value for kw in call.keywords if kw.arg is not None})
    out: list[str] = []
    for statement in node.body:
        if not _docstring(statement):
            out += _atoms(statement, passed, target)
    return tuple(out)


# ---------------------------------------------------------------------------------------------------------------
# the region


def _hunks(base: Sequence[str], ours: Sequence[str]) -> list[tuple[int, int, int, int]]:
    matcher = difflib.SequenceMatcher(None, [x.rstrip() for x in base], [x.rstrip() for x in ours], autojunk=False)
    return [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def _blank(line: str) -> bool:
    return not line.strip() or line.lstrip().startswith("#")


def find(
    base: str,
    ours: str,
    theirs: str,
    found: Sequence[Helper] | Callable[[], Sequence[Helper]],
    *,
    upstream_names: dict[str, ast.expr] | None = None,
    patch_names: dict[str, ast.expr] | None = None,
    methods: dict[str, ast.FunctionDef] | None = None,
    known: Callable[[str], bool] = lambda _name: True,
    patch_reads: dict[str, int] | None = None,
) -> Moved | None:
    """The code upstream deleted from ``base`` (the region's old upstream side; ``ours``: its new one) that stands
    in one of the helpers ``found`` (:func:`helpers`), and the patch side ``theirs``'s copy of it; None when there
    is none, or when the patch side holds no copy of it.

    ``upstream_names``/``patch_names``: the locals each side's method reads attribute chains through
    (:func:`aliases`); ``methods``: the upstream class's methods (a one-statement method called in the old lines
    is read as its statement); ``known(name)``: the name is upstream's (a copy naming another is the omni edit's);
    ``patch_reads``: how often the patch side's method reads each name (:func:`reads`; a local the copy reads that
    the method reads nowhere else goes with it), None when only the region is known."""
    up_names, omni_names, methods = upstream_names or {}, patch_names or {}, methods or {}
    b, o, t = (x.splitlines(keepends=True) for x in (base, ours, theirs))
    hunks = [h for h in _hunks(b, o) if any(not _blank(x) for x in b[h[0] : h[1]])]
    made = _window(o)  # upstream's new lines here: a statement still there was rewritten in place, not moved
    here = [x for n, _a, _z in (made[1] if made else []) for x in _atoms(n, up_names)]
    helpers_: Sequence[Helper] | None = None
    best: tuple[float, int, Helper, list[_Gone], list[_Gone], tuple[int, int, int, int]] | None = None
    for i1, i2, j1, j2 in hunks:  # each stretch of code upstream deleted (or replaced)
        parsed = _parse(b[i1:i2])
        if parsed is None:
            continue
        gone = [(n, a + i1, z + i1, _expanded(_atoms(n, up_names), methods)) for n, a, z in parsed]
        if helpers_ is None:
            helpers_ = found() if callable(found) else found
        for h in helpers_:
            theirs_atoms = _helper_atoms(h)
            if not theirs_atoms:
                continue
            moved = []
            scores = []
            for stmt in gone:
                score = sum(_best(x, theirs_atoms) for x in stmt[3]) / max(len(stmt[3]), 1)
                stays = sum(_best(x, here) for x in stmt[3]) / max(len(stmt[3]), 1)
                # a statement of one atom is little to go on: it must be nearly the helper's
                if score >= (ALIKE if len(stmt[3]) > 1 else SURE) and score > stays:
                    moved.append(stmt)
                    scores.append(score)
            if moved and (best is None or (len(moved), sum(scores)) > (best[1], best[0] * best[1])):
                best = (sum(scores) / len(scores), len(moved), h, moved, gone, (i1, i2, j1, j2))
    if best is None:
        return None
    alike, count, helper, moved, gone, (i1, i2, j1, j2) = best
    first, last = moved[0][1], moved[-1][2]
    if any(s[1] > first and s[2] < last and s not in moved for s in gone):
        return None  # the moved statements are not in one stretch
    held = _copy(b, t, moved, omni_names, methods, o[j1:j2], i2, patch_reads)
    old_atoms = [x for s in moved for x in s[3]]
    count, of = len(old_atoms), sum(len(s[3]) for s in gone)
    if held is None:
        return None  # the patch side holds no copy: upstream's change alone, nothing to say of the omni edit
    c0, c1, copy_atoms, alias, words, orphans = held
    differs, blocked = _compare(old_atoms, copy_atoms, alias, known, _helper_atoms(helper))
    for chain, name in sorted(words.items(), key=lambda kv: -len(kv[0])):  # the copy's conditions as it writes them
        differs = [d if d == alias else d.replace(chain, name) for d in differs]
    text, held_back = None, ""
    if not blocked and len(hunks) > 1:
        held_back = "upstream also changed other lines here (decide those apart)"
    elif not blocked:
        text, held_back = _resolution(b, o, t, (i1, i2, j1, j2), (first, last), (c0, c1))
    return Moved(helper, count, of, alike, (c0 + 1, c1 + 1), tuple(differs), blocked, text, orphans, held_back)


_Gone = tuple[ast.stmt, int, int, list[str]]  # a deleted statement, its first and last line, its atoms


def _copy(
    base: list[str],
    theirs: list[str],
    moved: list[tuple[ast.stmt, int, int, list[str]]],
    omni_names: dict[str, ast.expr],
    methods: dict[str, ast.FunctionDef],
    made: list[str],
    end: int,
    patch_reads: dict[str, int] | None,
) -> tuple[int, int, list[str], str, dict[str, str], tuple[str, ...]] | None:
    """The patch side's copy of the ``moved`` statements: its first and last line (0-based), its atoms, and the
    local it reads the old lines' chain through, when the patch binds one just above it (part of the copy when
    upstream's new lines bind it the same way), and the chains the patch side reads through locals (to say the copy
    in its own words), and the locals of the patch's method only the copy reads."""
    window = _window(theirs)
    if window is None:
        return None
    _start, stmts = window
    local = dict(omni_names)
    for n, _a, _z in stmts:  # the patch side's own locals bound to a chain, in the region
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and _chain(n.value):
            local.setdefault(n.targets[0].id, n.value)
    old = [x for s in moved for x in s[3]]
    picked = []
    for k, (n, _a, _z) in enumerate(stmts):
        atoms = _expanded(_atoms(n, local), methods)
        if atoms and sum(_best(x, old) for x in atoms) / len(atoms) >= ALIKE and not _alias(n):
            picked.append(k)
    if not picked or picked != list(range(picked[0], picked[-1] + 1)):
        return None
    first, last = picked[0], picked[-1]
    atoms = [x for k in picked for x in _expanded(_atoms(stmts[k][0], local), methods)]
    alias = ""
    if first > 0 and _alias(stmts[first - 1][0]):
        node = stmts[first - 1][0]
        assert isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        name = node.targets[0].id
        reads = [k for k, (n, _a, _z) in enumerate(stmts) if k != first - 1 and _reads(n, name)]
        rebound = any(line.strip() == ast.unparse(node) for line in made)
        inside = sum(_count(stmts[k][0], name) for k in reads)
        alone = patch_reads is None or patch_reads.get(name, 0) == inside  # the method reads it nowhere else
        if reads and all(first <= k <= last for k in reads) and (rebound or alone):
            first -= 1
            alias = f"a local `{name}` for `{ast.unparse(node.value)}`"
    c0, c1 = stmts[first][1], stmts[last][2]
    after = moved[-1][2] + 1
    while after < end and not base[after].strip() and c1 + 1 < len(theirs) and not theirs[c1 + 1].strip():
        c1 += 1  # a blank line after it that upstream deleted with the old lines
        after += 1
    # the patch method's locals (bound outside the region) that only the copy reads: nothing reads them once it goes
    copied = [stmts[k][0] for k in picked]
    bound_here = {
        t.id for n, _a, _z in stmts for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)
    }
    orphans = tuple(
        name
        for name in sorted(omni_names)
        if name not in bound_here
        and patch_reads is not None
        and (count := sum(_count(n, name) for n in copied))
        and patch_reads.get(name, 0) == count
    )
    return c0, c1, atoms, alias, {ast.unparse(v): k for k, v in local.items()}, orphans


def _alias(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and _chain(node.value)
        and isinstance(node.value, ast.Attribute)
    )


def _count(node: ast.AST, name: str) -> int:
    return sum(1 for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load))


def reads(text: str, symbol: str) -> dict[str, int]:
    """How often ``symbol``'s function in the module ``text`` reads each name."""
    try:
        node = _function(_tree(text), symbol)
    except (SyntaxError, ValueError):
        return {}
    out: dict[str, int] = {}
    for n in ast.walk(node) if node is not None else []:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out[n.id] = out.get(n.id, 0) + 1
    return out


def _reads(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(node))


def _compare(
    old: list[str], copy: list[str], alias: str, known: Callable[[str], bool], helper: list[str]
) -> tuple[list[str], str]:
    """What the omni copy's atoms have that the old lines' have not (small edits), and why it is not to be dropped
    ("" when it may be): a call neither the old lines nor the ``helper``'s atoms make, a statement of its own, or a
    name upstream's code has nowhere."""
    differs = [alias] if alias else []
    blocked = ""
    calls = {c for x in [*old, *helper] for c in _calls(x)}
    names = {n for x in [*old, *helper] for n in _names(x)}
    for atom in copy:
        if atom in old:
            continue
        twin = max(old, key=lambda x: _ratio(atom, x))
        new_calls = sorted(set(_calls(atom)) - calls)
        unknown = sorted(n for n in set(_names(atom)) - names if not known(n))
        if new_calls:
            blocked = blocked or f"omni's copy calls `{new_calls[0]}()`, which the old lines and the helper do not"
            continue
        if unknown:
            blocked = blocked or f"omni's copy names `{unknown[0]}`, which upstream's code does not have"
            continue
        extra = _conditions(twin, atom)
        if extra is not None:
            differs += [f"the condition `{c}`" for c in extra]
            continue
        renamed = _renamed(twin, atom)
        if renamed and _ratio(atom, twin) >= ALIKE:
            differs += [f"`{a}` renamed `{b}`" for a, b in renamed]
            continue
        blocked = blocked or f"omni's copy has `{_short(atom)}`, which the old lines have not"
    return list(dict.fromkeys(differs)), blocked


def _calls(atom: str) -> list[str]:
    try:
        tree = ast.parse(atom)
    except SyntaxError:
        return []
    return [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _names(atom: str) -> list[str]:
    try:
        tree = ast.parse(atom)
    except SyntaxError:
        return []
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.append(n.id)
        elif isinstance(n, ast.Attribute):
            out.append(n.attr)
    return out


def _conditions(old: str, new: str) -> list[str] | None:
    """The ``and`` conditions of the test ``new`` that the test ``old`` has not, when ``new`` is ``old`` with
    conditions added that make no call; None otherwise."""
    try:
        a, b = ast.parse(old, mode="eval").body, ast.parse(new, mode="eval").body
    except SyntaxError:
        return None
    left = [ast.unparse(x) for x in (a.values if isinstance(a, ast.BoolOp) and isinstance(a.op, ast.And) else [a])]
    right = b.values if isinstance(b, ast.BoolOp) and isinstance(b.op, ast.And) else [b]
    have = [ast.unparse(x) for x in right]
    if len(have) <= len(left) or [x for x in have if x in left] != left:
        return None
    extra = [x for x in right if ast.unparse(x) not in left]
    if any(isinstance(n, ast.Call) for x in extra for n in ast.walk(x)):
        return None
    return [ast.unparse(x) for x in extra]


def _renamed(old: str, new: str) -> list[tuple[str, str]]:
    from patch_queue.merge.explain import renames

    return renames(old, new) or []


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:59] + "…"


def _resolution(
    base: list[str],
    ours: list[str],
    theirs: list[str],
    hunk: tuple[int, int, int, int],
    moved: tuple[int, int],
    span: tuple[int, int],
) -> tuple[str | None, str]:
    """The patch's side with its copy (lines ``span``) replaced by upstream's new lines of the ``hunk`` that deleted
    the ``moved`` lines; None, and why, where that would lose a change of either side: the hunk deletes code besides
    the moved statements that the patch side still holds (or holds edited)."""
    i1, i2, j1, j2 = hunk
    c0, c1 = span
    kept = [x.strip() for k, x in enumerate(theirs) if not (c0 <= k <= c1) and x.strip() and not _blank(x)]
    for k in range(i1, i2):
        line = base[k].strip()
        if moved[0] <= k <= moved[1] or _blank(base[k]):
            continue
        if line in kept or max((difflib.SequenceMatcher(None, line, x).ratio() for x in kept), default=0) >= 0.8:
            return None, f"upstream also deleted `{_short(line)}`, which the patch side holds (decide that apart)"
    return "".join(theirs[:c0] + ours[j1:j2] + theirs[c1 + 1 :]), ""


def known_names(texts: Iterable[str]) -> Callable[[str], bool]:
    """Whether a name is written in one of ``texts`` (upstream's modules) as a word."""
    sets = [_words_in(t) for t in texts]
    return lambda name: any(name in words for words in sets)


@functools.lru_cache(maxsize=32)
def _words_in(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"[A-Za-z_]\w*", text))
