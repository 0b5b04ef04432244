"""Static import resolution: does every import of a runner module name something that exists?

Nothing is imported.  A :class:`SourceTree` holds one package's source files (``vllm_ascend/``,
``vllm/``, ``vllm_omni/``) and answers, from their syntax trees alone, which modules exist and
which names each module binds.  :func:`check_imports` checks every ``import X`` and
``from X import a, b`` of a module (at any depth: inside functions, ``if TYPE_CHECKING:``,
``try:``; relative imports resolved against the module's own package) whose top-level package
has a tree, and reports

- ``import-unresolved`` (error): the module is in none of ``X.py``, ``X/__init__.py`` or a
  namespace-package folder ``X/`` of the tree;
- ``import-name-unresolved`` (error): ``a`` is neither bound in ``X`` nor a submodule of ``X``.

A name is *bound* in a module when the module's top level (everything outside def and class
bodies, so inside ``if``/``else``, ``try``/``except``/``finally``, ``with``, ``for``,
``while`` and ``match`` too) binds it: a def or class; an assignment target (plain, unpacked,
annotated with a value, augmented, ``for`` and ``with ... as`` targets, walrus outside lambdas,
``match`` captures, ``type X = ...``); an import (``import a.b`` binds ``a``, ``import a.b as c``
binds ``c``, ``from m import x as y`` binds ``y``); a ``global`` declaration in any function of
the module (a function that runs can bind it); an entry of a literal ``__all__`` (``=``, ``+=``,
``.append``, ``.extend``); or a star import ``from m import *`` (``m``'s literal ``__all__`` if it
has one, else ``m``'s public bound names; resolved recursively, across trees, cycles cut).
A module that defines a module-level ``__getattr__`` (vllm's lazy exports) binds every name, and
so does a module of the tree that does not parse (nothing can be said about it), and so does a
module with a star import whose exports are unknowable (a package without a tree, a module that
does not parse, a computed ``__all__``).

A finding must be a real failure, so where the source cannot tell, the check is lenient: a
name bound only under ``if TYPE_CHECKING:`` or in one branch of a condition counts as bound.
Where Python is strict, so is the check: ``x: int`` without a value and ``except E as e`` bind
nothing (Python binds nothing, resp. deletes ``e``); ``import a.b`` needs the module ``a.b``
even when ``a`` has an attribute ``b`` or a ``__getattr__``.  Syntax errors in the checked
module are left to the ``parse`` check of ``pq check``.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from patch_queue.checks.findings import ERROR, Finding
from patch_queue.progress import Progress
from patch_queue.series.reimport import absolute
from patch_queue.sources.snapshot import Snapshot, release_snapshot

RULE_MODULE = "import-unresolved"
RULE_NAME = "import-name-unresolved"

# Source files a module can come from (extension modules are never in a source tree).
_SOURCE_SUFFIX = ".py"


@dataclass(frozen=True)
class _Scan:
    """What one module's own top level says, before star imports are followed."""

    names: frozenset[str]  # bound by the module itself (including literal __all__ entries)
    all_names: tuple[str, ...] | None  # the literal __all__, None when absent or not literal
    stars: tuple[str, ...]  # absolute dotted modules of its `from m import *`, in order
    opaque: bool  # did not parse: every name counts as bound
    all_computed: bool = False  # __all__ is built by code: what a star import of it binds is unknowable


class SourceTree:
    """The source files of one top-level package, keyed by path (``"vllm_ascend/utils.py"``)."""

    def __init__(self, files: Mapping[str, bytes], *, label: str = "") -> None:
        self.label = label
        self._files: dict[str, bytes] = {}
        self._dirs: set[str] = set()  # every folder holding a .py file somewhere below it
        for raw, data in files.items():
            path = posixpath.normpath(raw.replace("\\", "/")).lstrip("/")
            if not path.endswith(_SOURCE_SUFFIX):
                continue
            self._files[path] = data
            folder = posixpath.dirname(path)
            while folder and folder not in self._dirs:
                self._dirs.add(folder)
                folder = posixpath.dirname(folder)
        self.packages = frozenset(p.split("/", 1)[0] for p in self._files if "/" in p)
        self._scans: dict[str, _Scan | None] = {}
        self._bound: dict[str, frozenset[str] | None] = {}

    def __repr__(self) -> str:
        return f"SourceTree({self.label or ', '.join(sorted(self.packages))}: {len(self._files)} files)"

    @property
    def described(self) -> str:
        """The tree, as findings name it."""
        return self.label or f"the {', '.join(sorted(self.packages))} sources"

    def __len__(self) -> int:
        return len(self._files)

    # -- modules --------------------------------------------------------------------------

    def module_path(self, dotted: str) -> str | None:
        """The file of a module: ``a/b/__init__.py`` (a package wins, as in Python), else ``a/b.py``;
        ``a/b/`` for a namespace package (a folder of sources without ``__init__.py``); else None."""
        if not dotted or any(not part.isidentifier() for part in dotted.split(".")):
            return None
        base = dotted.replace(".", "/")
        for candidate in (f"{base}/__init__.py", f"{base}.py"):
            if candidate in self._files:
                return candidate
        parent = dotted.rpartition(".")[0]
        if base in self._dirs and (not parent or self.is_package(parent)):
            return base + "/"
        return None

    def text(self, dotted: str) -> str | None:
        """The source of a module (a package's ``__init__.py``), None when the tree has no file for it."""
        path = self.module_path(dotted)
        return None if path is None or path.endswith("/") else self._files[path].decode("utf-8", errors="replace")

    def is_package(self, dotted: str) -> bool:
        path = self.module_path(dotted)
        return path is not None and (path.endswith("/__init__.py") or path.endswith("/"))

    def has_submodule(self, dotted: str, name: str) -> bool:
        """``dotted.name`` is a module of the tree and ``dotted`` a package holding it."""
        return self.is_package(dotted) and self.module_path(f"{dotted}.{name}") is not None

    def is_open(self, dotted: str) -> bool:
        """Every name counts as bound: a module-level ``__getattr__``, or a module that does not parse."""
        scan = self._scan(dotted)
        return scan is not None and (scan.opaque or "__getattr__" in scan.names)

    # -- names ----------------------------------------------------------------------------

    def bound_names(self, dotted: str) -> frozenset[str] | None:
        """Names bound at the module's top level, star imports from this tree followed; None when
        the module is missing.  Star imports of other packages are left to :func:`check_imports`."""
        if dotted in self._bound:
            return self._bound[dotted]
        names, _unknown, complete = self._resolve(dotted, None, frozenset())
        if complete:
            self._bound[dotted] = names
        return names

    def _scan(self, dotted: str) -> _Scan | None:
        if dotted in self._scans:
            return self._scans[dotted]
        path = self.module_path(dotted)
        scan: _Scan | None
        if path is None:
            scan = None
        elif path.endswith("/"):
            scan = _Scan(frozenset(), None, (), False)  # a namespace package binds nothing itself
        else:
            package = dotted if path.endswith("/__init__.py") else dotted.rpartition(".")[0]
            scan = _scan_module(self._files[path], package)
        self._scans[dotted] = scan
        return scan

    def _resolve(
        self, dotted: str, trees: Mapping[str, SourceTree] | None, visiting: frozenset[tuple[int, str]]
    ) -> tuple[frozenset[str] | None, frozenset[str], bool]:
        """(bound names, the star-imported modules whose exports are unknowable, result is complete).

        Unknowable: a module outside this tree and ``trees``, one that does not parse, one whose
        ``__all__`` is computed.  With ``trees`` star imports cross into the other trees; an import
        cycle contributes nothing more than what is already being resolved (``complete`` False:
        do not cache).
        """
        scan = self._scan(dotted)
        if scan is None:
            return None, frozenset(), True
        names = set(scan.names)
        unknown: set[str] = set()
        complete = True
        here = visiting | {(id(self), dotted)}
        for star in scan.stars:
            owner = self._owner(star, trees)
            if owner is None:
                unknown.add(star)
                continue
            if (id(owner), star) in here:
                complete = False
                continue
            exported, more_unknown, done = owner._star(star, trees, here)
            complete = complete and done
            unknown |= more_unknown
            if exported is not None:
                names |= exported
            # A star import of a missing module fails at run time: check_imports reports the
            # import in the module it checks; here the module simply gains nothing.
        return frozenset(names), frozenset(unknown), complete

    def _star(
        self, dotted: str, trees: Mapping[str, SourceTree] | None, visiting: frozenset[tuple[int, str]]
    ) -> tuple[frozenset[str] | None, frozenset[str], bool]:
        scan = self._scan(dotted)
        if scan is None:
            return None, frozenset(), True
        if scan.opaque or scan.all_computed:
            return frozenset(scan.names), frozenset({dotted}), True
        if scan.all_names is not None:
            return frozenset(scan.all_names), frozenset(), True
        names, unknown, complete = self._resolve(dotted, trees, visiting)
        public = None if names is None else frozenset(n for n in names if not n.startswith("_"))
        return public, unknown, complete

    def _owner(self, dotted: str, trees: Mapping[str, SourceTree] | None) -> SourceTree | None:
        top = dotted.partition(".")[0]
        return self if top in self.packages else (trees or {}).get(top)


# -- scanning one module ----------------------------------------------------------------------


def _scan_module(data: bytes, package: str) -> _Scan:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return _Scan(frozenset(), None, (), True)
    binder = _Binder(package)
    for stmt in tree.body:
        binder.stmt(stmt)
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            binder.names.update(node.names)
    all_names = tuple(binder.all_names) if binder.all_literal and binder.all_seen else None
    names = binder.names | set(binder.all_names)
    computed = binder.all_seen and not binder.all_literal
    return _Scan(frozenset(names), all_names, tuple(binder.stars), False, computed)


class _Binder:
    """Collects the names a module's top level binds (outside def and class bodies)."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.names: set[str] = set()
        self.stars: list[str] = []
        self.all_names: list[str] = []
        self.all_seen = False
        self.all_literal = True

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self.names.add(node.name)
            for expr in [*node.decorator_list, *_defaults(node)]:
                self.walrus(expr)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                self.names.add(alias.asname or alias.name.partition(".")[0])
            return
        if isinstance(node, ast.ImportFrom):
            module = absolute(node.module, node.level, self.package)
            for alias in node.names:
                if alias.name == "*":
                    if module is not None:
                        self.stars.append(module)
                else:
                    self.names.add(alias.asname or alias.name)
            return
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.target(target)
            self.dunder_all_assign(node.targets, node.value)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.target(node.target)
                self.dunder_all_assign([node.target], node.value)
        elif isinstance(node, ast.AugAssign):
            self.target(node.target)
            if isinstance(node.target, ast.Name) and node.target.id == "__all__":
                self.dunder_all_extend(node.value)
        elif isinstance(node, ast.For | ast.AsyncFor):
            self.target(node.target)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                if item.optional_vars is not None:
                    self.target(item.optional_vars)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                self.pattern(case.pattern)
        elif type(node).__name__ == "TypeAlias":  # `type X = ...` (Python 3.12+)
            name = getattr(node, "name", None)
            if isinstance(name, ast.expr):
                self.target(name)
        elif isinstance(node, ast.Expr):
            self.dunder_all_call(node.value)
        # Expressions of every statement can hold a walrus; nested statements are blocks.
        for _field, value in ast.iter_fields(node):
            items = value if isinstance(value, list) else [value]
            for item in items:
                if isinstance(item, ast.stmt):
                    self.stmt(item)
                elif isinstance(item, ast.expr):
                    self.walrus(item)
                elif isinstance(item, ast.ExceptHandler | ast.match_case):
                    for sub in item.body:
                        self.stmt(sub)
                    guard = getattr(item, "guard", None)
                    if isinstance(guard, ast.expr):
                        self.walrus(guard)

    def target(self, node: ast.expr) -> None:
        if isinstance(node, ast.Name):
            self.names.add(node.id)
        elif isinstance(node, ast.Tuple | ast.List):
            for element in node.elts:
                self.target(element)
        elif isinstance(node, ast.Starred):
            self.target(node.value)
        # Attributes and subscripts bind no name.

    def pattern(self, node: ast.pattern) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.MatchAs | ast.MatchStar) and sub.name:
                self.names.add(sub.name)
            elif isinstance(sub, ast.MatchMapping) and sub.rest:
                self.names.add(sub.rest)

    def walrus(self, node: ast.expr) -> None:
        """``(x := ...)`` binds ``x`` in the module, also inside comprehensions; not inside a lambda."""
        for sub in _walk_no_lambda(node):
            if isinstance(sub, ast.NamedExpr):
                self.target(sub.target)

    # -- __all__ --------------------------------------------------------------------------

    def dunder_all_assign(self, targets: list[ast.expr], value: ast.expr) -> None:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            # Every branch's entries count (`if X: __all__ = [...] else: __all__ = [...]`).
            self.all_seen = True
            self.dunder_all_extend(value)

    def dunder_all_extend(self, value: ast.expr) -> None:
        strings = _literal_strings(value)
        if strings is None:
            self.all_literal = False
        else:
            self.all_names += strings

    def dunder_all_call(self, value: ast.expr) -> None:
        if not (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and isinstance(value.func.value, ast.Name)
            and value.func.value.id == "__all__"
            and len(value.args) == 1
        ):
            return
        if value.func.attr in ("append", "extend"):
            # __all__.append(x) is __all__.extend([x])
            self.dunder_all_extend(value.args[0] if value.func.attr == "extend" else ast.List([value.args[0]]))


def _defaults(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[ast.expr]:
    if isinstance(node, ast.ClassDef):
        return [*node.bases, *(k.value for k in node.keywords)]
    args = node.args
    return [*args.defaults, *(d for d in args.kw_defaults if d is not None)]


def _walk_no_lambda(node: ast.AST) -> Iterator[ast.AST]:
    yield node
    if isinstance(node, ast.Lambda):
        return
    for child in ast.iter_child_nodes(node):
        yield from _walk_no_lambda(child)


def _literal_strings(node: ast.expr) -> list[str] | None:
    """The strings of a literal list/tuple (or a ``+`` of them), None for anything else."""
    if isinstance(node, ast.List | ast.Tuple):
        out = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return out if len(out) == len(node.elts) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_strings(node.left), _literal_strings(node.right)
        return None if left is None or right is None else left + right
    return None


# -- checking one module ----------------------------------------------------------------------


def check_imports(text: str, *, file: str, package: str, trees: Mapping[str, SourceTree]) -> list[Finding]:
    """Findings for the imports of ``text`` that name a missing module or a name its module lacks.

    ``package`` is the module's own dotted package (relative imports resolve against it);
    ``trees`` maps top-level package names to their sources.  Imports of other packages are not
    checked.  A module that does not parse yields nothing here (the ``parse`` check reports it).
    """
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out: list[Finding] = []
    for node in ast.walk(module):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out += _missing_module(alias.name, trees, file, alias.lineno, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            out += _from_import(node, package, file, trees)
    return sorted(set(out))


def _missing_module(
    dotted: str, trees: Mapping[str, SourceTree], file: str, line: int, statement: str
) -> list[Finding]:
    """The finding for ``dotted`` when its tree lacks it; none when it exists or is not checked."""
    tree = trees.get(dotted.partition(".")[0])
    if tree is None or tree.module_path(dotted) is not None:
        return []
    # Name the deepest package that is there: the part below it is what moved or went.
    parts = dotted.split(".")
    n = next((n for n in range(len(parts) - 1, 0, -1) if tree.module_path(".".join(parts[:n])) is not None), 0)
    hint = f": {'.'.join(parts[:n])} has no {parts[n]}" if 0 < n < len(parts) - 1 else ""
    message = f"{statement}: no module named '{dotted}' in {tree.described}{hint}"
    return [Finding(file, line, RULE_MODULE, ERROR, message)]


def _from_import(node: ast.ImportFrom, package: str, file: str, trees: Mapping[str, SourceTree]) -> list[Finding]:
    dotted = absolute(node.module, node.level, package)
    dots = "." * node.level + (node.module or "")
    if dotted is None:
        if package.partition(".")[0] not in trees:
            return []
        message = f"from {dots} import: relative import beyond the top-level package (in package {package})"
        return [Finding(file, node.lineno, RULE_MODULE, ERROR, message)]
    tree = trees.get(dotted.partition(".")[0])
    if tree is None:
        return []
    missing = _missing_module(dotted, trees, file, node.lineno, f"from {dots} import")
    names = [alias for alias in node.names if alias.name != "*"]
    if missing or not names or tree.is_open(dotted):
        return missing
    bound, unknown, _complete = tree._resolve(dotted, trees, frozenset())
    if unknown:
        # A star import of a package we have no sources for (or of a module whose exports are
        # computed) may bind anything: nothing is reported then.
        return []
    where = f"{tree.module_path(dotted)} in {tree.described}"
    return [
        Finding(file, alias.lineno, RULE_NAME, ERROR, f"cannot import name '{alias.name}' from '{dotted}' ({where})")
        for alias in names
        if alias.name not in (bound or ()) and not tree.has_submodule(dotted, alias.name)
    ]


# -- building trees from real sources ---------------------------------------------------------


def tree_from_snapshot(snapshot: Snapshot, prefix: str) -> SourceTree:
    """The ``.py`` files under ``prefix`` of a :class:`~patch_queue.sources.snapshot.Snapshot`."""
    files = {path: snapshot.read(path) for path in snapshot.list_files(prefix) if path.endswith(_SOURCE_SUFFIX)}
    return SourceTree(files, label=snapshot.label)


def tree_from_release(name: str, version: str, prefix: str, progress: Progress | None = None) -> SourceTree:
    """The ``.py`` files under ``prefix`` of a registry release, from its cached, sha256-pinned archive.

    The archive is the one :func:`~patch_queue.sources.archives.release_files` would read (a py3 wheel when
    the release has one, else the sdist, its ``<name>-<version>/`` folder stripped; the choice is
    pinned in the cache on first use).  It is read through the release's snapshot, so a wheel's
    ``.py`` members are the only ones decompressed: vllm's 300 MB wheel holds compiled kernels
    that ``release_files`` would read whole.
    """
    snapshot = release_snapshot(name, version, progress)
    return tree_from_snapshot(snapshot, prefix)
