"""The imports of a runner module after a replay: what merged upstream code needs, what upstream dropped.

The runner modules copy methods of the upstream module (``vllm_ascend/worker/model_runner_v1.py``)
but have imports of their own, written by the maintainers for the upstream code of their time.
When a refresh merges newer upstream code, that code may use names the runner never imported
(``is_circular_kv_cache_spec``), which compiles and fails at run time.  :func:`reconcile` runs on
the merge result of the patch that owns a module's import block (its skeleton) and:

- adds, for every name the module uses but does not bind (``ruff`` F821 on each side of every
  conflict region), the import the new upstream module has for it, or an import from the upstream
  module itself when upstream defines the name at its top level (``import-added``).  A name
  upstream only imports under ``if TYPE_CHECKING:`` or inside a function is left for ``pq check``.
  The name joins an existing ``from M import`` of the same module, else a new statement goes
  after the last import of the same kind and section that sorts before it (isort's order: standard
  library, third party, ``vllm_omni``); the statement is laid out by the formatter;
- flags every import the old upstream module had (or a name it defined) that the new one has no
  more (``import-stale``), and removes it when nothing uses it: neither the module as merged
  (``ruff`` F401) nor the omni code of the whole old series (``omni``).
"""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TypedDict

from patch_queue.git.diff import Hunk, line_hunks, move_line
from patch_queue.merge import markers, pieces
from patch_queue.merge.conflict import ConflictKind
from patch_queue.merge.symbols import parsed
from patch_queue.series import fmt, replaced
from patch_queue.sources import cache

ADDED = ConflictKind.IMPORT_ADDED
STALE = ConflictKind.IMPORT_STALE
REMOVED = ConflictKind.IMPORT_REMOVED
_USED_BEFORE = "the previous build used it in code the resolution does not keep"
_ADDED_FOR_A_SIDE = "the refresh imported it for upstream code the result does not keep"


@dataclass(frozen=True)
class Change:
    kind: str  # ADDED | STALE
    line: int  # 1-based line of the import statement in the result (of the statement it was removed from)
    text: str  # the lines at ``line`` this change is about: the statement written or kept ("" when removed)
    names: tuple[str, ...]
    message: str


class _Kept(TypedDict):
    """A reconciliation kept in the download cache: the module's text and what changed in it."""

    text: str
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class _Binding:
    """How a module's top level binds a name: ``from module import origin as name``, ``import module``, or a
    definition (``module`` is None)."""

    module: str | None
    origin: str
    line: int

    def statement(self, name: str) -> str:
        if self.module is None:
            raise ValueError("a definition is no import")
        if self.origin == "":  # import a.b [as name]
            return f"import {self.module}" + ("" if self.module.split(".")[0] == name else f" as {name}")
        return f"from {self.module} import {self.origin}" + ("" if self.origin == name else f" as {name}")


def sides(text: str) -> list[str]:
    """``text`` as each side of its conflict regions would leave it (upstream, patch); [text] without regions."""
    return list(markers.sides(text).values())


@functools.lru_cache(maxsize=4)
def bindings(text: str, module: str) -> Mapping[str, _Binding]:
    """The names the top level of ``text`` (the module ``module``) binds, outside ``if TYPE_CHECKING:``.

    Kept for the last few texts: a refresh asks for the same old and new upstream module once per
    runner module, and parsing one (~4,000 lines) is most of a reconciliation.
    """
    try:
        tree = parsed(text)
    except SyntaxError:
        return {}
    out: dict[str, _Binding] = {}
    for node in _top(tree.body):
        if isinstance(node, ast.ImportFrom):
            source = absolute(node.module, node.level, module.rpartition(".")[0])
            for alias in node.names:
                if source is not None and alias.name != "*":
                    out.setdefault(alias.asname or alias.name, _Binding(source, alias.name, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                out.setdefault(name, _Binding(alias.name if alias.asname else name, "", node.lineno))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(node.name, _Binding(None, node.name, node.lineno))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, _Binding(None, t.id, node.lineno))
    return out


def api_rewrites(old_upstream: str, new_upstream: str, module: str) -> tuple[replaced.Replacement, ...]:
    """Upstream's rewrites of the uses of the names its module ``module`` no longer binds (:func:`replaced.learn`)."""
    removed = frozenset(bindings(old_upstream, module)) - frozenset(bindings(new_upstream, module))
    return replaced.learn(old_upstream, new_upstream, removed) if removed else ()


def _top(body: Sequence[ast.stmt]) -> Iterable[ast.stmt]:
    """The statements of a module's top level, looking into ``try`` and ``if`` (not ``if TYPE_CHECKING``)."""
    for node in body:
        if isinstance(node, ast.Try):
            yield from _top(node.body)
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                yield from _top(node.body)
                yield from _top(node.orelse)
        else:
            yield node


def module_of(path: str) -> str:
    """The dotted module of the source file at the tree-relative ``path``: what its definitions are imported from,
    and whose package (the path's folder) its relative imports resolve against.  ``vllm_ascend/worker/
    model_runner_v1.py`` is ``vllm_ascend.worker.model_runner_v1`` and ``vllm/v1/worker/gpu_model_runner.py``
    ``vllm.v1.worker.gpu_model_runner``: the upstream file's module comes from its path, never from a package
    named in pq's code."""
    return path.removesuffix(".py").replace("/", ".")


def absolute(module: str | None, level: int, package: str) -> str | None:
    """The absolute module of ``from <level dots><module> import`` in ``package``; None when it climbs past the top."""
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 >= len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def reconcile(
    text: str,
    *,
    new_upstream: str,
    old_upstream: str | None,
    upstream_module: str,
    omni: str = "",
    old_base: str = "",
    line_length: int = 120,
    rewrite_from: str | None = None,
    first_party: str = "",
) -> tuple[str, list[Change]]:
    """``text`` (a merged runner module, conflict regions allowed) with its imports reconciled with
    ``new_upstream`` (the text of the module ``upstream_module``).  ``old_upstream``: that module as the
    series knew it; ``omni``: the old series' final text of this runner, whose lines that are not
    ``old_upstream``'s are the omni code that may still use an import; ``old_base``: this runner
    before the patch in the old series.  A use the later patches will delete again does not count
    (:func:`_deleted_again`).  ``rewrite_from``: the old upstream module, whose rewrites of the names
    the new one no longer binds (:func:`api_rewrites`) are applied first to the lines that still read them.
    ``first_party``: the downstream's top-level package, whose imports stand in their own section, last.

    The result is kept in the download cache by its inputs, the formatter binary and this code: a
    refresh of the same upgrade runs neither ruff nor the parses again.
    """
    key = cache.derived_key(
        _stamp(),
        text,
        new_upstream,
        "-" if old_upstream is None else "+",
        old_upstream or "",
        upstream_module,
        omni,
        old_base,
        str(line_length),
        "-" if rewrite_from is None else "+",
        rewrite_from or "",
        *([first_party] if first_party else []),
    )
    kept = cache.derived_json("imports", key, _Kept)
    if kept is not None:
        return kept[0]["text"], list(kept[0]["changes"])
    out, changes = _reconcile(
        text, new_upstream, old_upstream, upstream_module, omni, old_base, line_length, rewrite_from, first_party
    )
    cache.derived_put("imports", key, json.dumps({"text": out, "changes": [asdict(c) for c in changes]}).encode())
    return out, changes


@functools.lru_cache(maxsize=1)
def _stamp() -> str:
    """What a reconciliation depends on besides its inputs: ruff and pq's code."""
    return fmt.tool_stamp() + cache.code_stamp(
        "series/reimport.py", "series/replaced.py", "merge/markers.py", "git/diff.py"
    )


def _reconcile(
    text: str,
    new_upstream: str,
    old_upstream: str | None,
    upstream_module: str,
    omni: str,
    old_base: str,
    line_length: int,
    rewrite_from: str | None = None,
    first_party: str = "",
) -> tuple[str, list[Change]]:
    views = sides(text)
    found = [fmt.lint(v, ("F821", "F401")) for v in views]
    if any(f is None for f in found):
        return text, []  # a side that does not parse: the parse check reports it
    undefined = any(lint.code == "F821" for f in found for lint in f or [])
    hunks = line_hunks(old_base.encode(), omni.encode()) if undefined else []  # the old series' deletions
    # for each view, its line -> the line of ``text``
    maps = [markers.one_side(text, side)[1] for side in ("ours", "theirs")[: len(views)]] if undefined else []
    inside = _inside_regions(text, maps) if undefined else [set[int]() for _ in views]
    per_side = [
        [
            lint
            for lint in f or []
            if lint.code != "F821"
            or lint.line in kept
            or not _deleted_again(view.splitlines(), lint.line, old_base, hunks)
        ]
        for view, f, kept in zip(views, found, inside, strict=True)
    ]
    lints = [lint for side in per_side for lint in side]
    undefined_read = any(lint.code == "F821" for side in per_side for lint in side)
    rules = api_rewrites(rewrite_from, new_upstream, upstream_module) if rewrite_from and undefined_read else ()
    rewritten = replaced.carry(text, _reads(maps, per_side, {r.name for r in rules}), rules) if rules else {}
    if rewritten:  # rewritten as upstream did, then reconciled: the new expressions may need imports
        lines = text.splitlines(keepends=True)
        for number, (line, _used) in rewritten.items():
            lines[number - 1] = line
        carried = "".join(lines)
        result, done = _reconcile(
            carried, new_upstream, old_upstream, upstream_module, omni, old_base, line_length, None, first_party
        )
        hunks = line_hunks(carried.encode(), result.encode())
        done += [
            Change(
                replaced.KIND,
                move_line(k, hunks),
                line,
                tuple(r.name for r in used),
                "; ".join(r.message() for r in used),
            )
            for k, (line, used) in rewritten.items()
        ]
        return result, sorted(done, key=lambda c: (c.line, c.kind, c.names))
    upstream = bindings(new_upstream, upstream_module)
    own = _statements(views[0], text)
    add, plain = _imports_for((lint.name for lint in lints if lint.code == "F821"), upstream, upstream_module)
    drop: dict[int, list[str]] = {}  # statement index -> aliases to remove
    changes: list[Change] = []
    # unused on every side: an import one side of a conflict region uses stays
    unused = set.intersection(*({lint.name for lint in f or [] if lint.code == "F401"} for f in found))
    uses = _uses(omni, old_upstream or "")
    for i, alias, note in _stale(own, old_upstream, upstream, upstream_module) if old_upstream is not None else []:
        name = alias.split(" as ")[-1]
        said = f"the new upstream {upstream_module} no longer binds `{name}` the way this import takes it{note}"
        if name in unused and name not in uses and "#" not in own[i].source:
            drop.setdefault(i, []).append(alias)
            changes.append(Change(STALE, own[i].first, "", (name,), said + "; unused: removed"))
        else:
            changes.append(Change(STALE, own[i].first, own[i].source, (name,), said + "; still used: check it"))
    return _edit(
        text,
        own,
        add,
        plain,
        drop,
        upstream,
        line_length,
        changes,
        why="merged upstream code uses",
        first_party=first_party,
    )


def follow(
    text: str,
    *,
    new_upstream: str,
    upstream_module: str,
    previous: str,
    written: str,
    line_length: int = 120,
    keep: Collection[str] = (),
    first_party: str = "",
) -> tuple[str, list[Change]]:
    """The imports of ``text`` (a runner module as a resolution left it, no conflict regions) made to follow it.

    Each name the text reads and does not bind is imported where the new upstream module (``new_upstream``,
    the module ``upstream_module``) imports or defines it, else as ``previous`` (the module in the previous
    build) imported it (``import-added``); each import the text does not use is removed (``import-removed``)
    unless ``previous`` had it unused already (the refresh imported it for a side of a conflict region
    the resolution did not keep, or the resolution dropped the code that used it), ``written`` (the module as
    pq wrote it for the maintainer, conflict regions and all) does not import it (the maintainer wrote it),
    another module imports the name from this one (``keep``), or its statement holds a comment (rewriting it
    would lose the comment).
    """
    found = fmt.lint(text, ("F821", "F401"))
    if found is None:
        return text, []  # the parse check reports it
    before = fmt.lint(previous, ("F401",)) or []
    unused_before = {lint.name for lint in before}
    view = sides(written)[0]
    try:
        pq_wrote = {_alias(a) for stmt in _statements(view, written) for a in stmt.node.names}
    except SyntaxError:
        pq_wrote = set()
    prior = bindings(previous, "")  # absolute imports only: the runner's own package is not needed
    upstream = bindings(new_upstream, upstream_module)
    wanted = [lint.name for lint in found if lint.code == "F821"]
    fallback = {n: b for n, b in prior.items() if b.module is not None and n not in upstream}
    add, plain = _imports_for(wanted, {**fallback, **upstream}, upstream_module)
    own = _statements(text, text)
    drop: dict[int, list[str]] = {}
    changes: list[Change] = []
    reasons: dict[tuple[int, str], list[str]] = {}  # (statement index, why) -> the names removed
    for lint in found:
        if lint.code != "F401" or lint.name in unused_before:
            continue
        for i, stmt in enumerate(own):
            alias = _alias_at(stmt, lint)
            if alias is None:
                continue
            name = alias.split(" as ")[-1].split(".")[0]
            if name not in keep and "#" not in stmt.source and alias in pq_wrote:
                drop.setdefault(i, []).append(alias)
                was = prior.get(name)
                used = was is not None and was.module is not None
                reasons.setdefault((i, _USED_BEFORE if used else _ADDED_FOR_A_SIDE), []).append(alias)
            break
    for (i, why), aliases in sorted(reasons.items()):
        stmt = own[i]
        names = tuple(a.split(" as ")[-1].split(".")[0] for a in aliases)
        what = f"from {stmt.module} import " if isinstance(stmt.node, ast.ImportFrom) else "import "
        said = f"the resolved code does not use {', '.join(f'`{n}`' for n in names)} ({why}): "
        changes.append(Change(REMOVED, stmt.first, "", names, said + f"removed `{what}{', '.join(aliases)}`"))
    return _edit(
        text,
        own,
        add,
        plain,
        drop,
        upstream,
        line_length,
        changes,
        why="the resolved code uses",
        previous=fallback,
        first_party=first_party,
    )


def imported_from(texts: Mapping[str, str], package: str) -> dict[str, set[str]]:
    """Module path (``x.py``) -> the names other modules of ``texts`` import from it (``from package.x import
    name``): an import :func:`follow` must keep, though the module itself does not use it."""
    out: dict[str, set[str]] = {}
    for path, text in sorted(texts.items()):
        try:
            tree = parsed(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                prefix, _, module = node.module.rpartition(".")
                target = module + ".py"
                if prefix == package and target in texts and target != path:
                    out.setdefault(target, set()).update(a.name for a in node.names)
    return out


def added_names(message: str) -> tuple[str, ...]:
    """The names an ``import-added`` flag's message says were imported (its closing ``added `statement```)."""
    m = re.search(r"added `(.+)`$", message)
    try:
        node = ast.parse(m.group(1)).body[0] if m else None
    except SyntaxError:
        return ()
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
        return ()
    return tuple(a.asname or a.name.split(".")[0] for a in node.names)


def statement_of(text: str, name: str) -> tuple[int, str] | None:
    """(first line, source) of the top-level import statement of ``text`` that binds ``name``, if any."""
    lines = text.splitlines(keepends=True)
    for stmt in _statements(text, text):
        if any((a.asname or a.name.split(".")[0]) == name for a in stmt.node.names):
            return stmt.first, "".join(lines[stmt.first - 1 : stmt.last])
    return None


def _alias_at(stmt: _Stmt, lint: fmt.Lint) -> str | None:
    """The alias (``name``, ``origin as name``, ``a.b``) of ``stmt`` that the F401 ``lint`` is about, if any."""
    if not stmt.first <= lint.line <= stmt.last:
        return None
    for a in stmt.node.names:
        if lint.name in (_alias(a), a.name, a.asname):
            return _alias(a)
    return None


def _alias(a: ast.alias) -> str:
    return a.name + (f" as {a.asname}" if a.asname else "")


def _imports_for(
    names: Iterable[str], where: Mapping[str, _Binding], upstream_module: str
) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """The imports that bind ``names`` as ``where`` binds them: module -> aliases for ``from module import``
    (a definition: from ``upstream_module``), and the ``import x`` statements with the name each binds."""
    add: dict[str, list[str]] = {}  # module -> aliases ("name" or "origin as name") to import from it
    plain: list[tuple[str, str]] = []  # (`import x` statement, the name it binds)
    for name in dict.fromkeys(names):
        binding = where.get(name)
        if binding is None:
            continue
        if binding.origin == "":
            plain.append((binding.statement(name), name))
        else:
            add.setdefault(binding.module or upstream_module, []).append(
                name if binding.origin == name else f"{binding.origin} as {name}"
            )
    return add, plain


def _edit(
    text: str,
    own: list[_Stmt],
    add: dict[str, list[str]],
    plain: list[tuple[str, str]],
    drop: Mapping[int, list[str]],
    upstream: Mapping[str, _Binding],
    line_length: int,
    changes: list[Change],
    *,
    why: str,
    previous: Mapping[str, _Binding] | None = None,
    first_party: str = "",
) -> tuple[str, list[Change]]:
    """``text`` with the aliases of ``add`` joined into its ``from`` imports ``own`` (or in new statements at their
    place), the ``import x`` statements of ``plain`` placed, and the aliases of ``drop`` removed; ``changes`` (the
    removals', at their statement's first line) with the added ones, every line where it is in the result.  Each
    name added is bound as ``upstream`` binds it, else as ``previous`` does."""
    prior = previous or {}
    # (first, last, the statement to lay out, "" to remove, what was added): laid out in one formatter run
    rewrites: list[tuple[int, int, str, Change | None]] = []
    for i, stmt in enumerate(own):
        extra = add.pop(stmt.module, []) if _joinable(stmt) else []
        if not extra and i not in drop:
            continue
        node = stmt.node
        old = [a.name + (f" as {a.asname}" if a.asname else "") for a in node.names]
        kept = [a for a in dict.fromkeys(old + extra) if a not in drop.get(i, [])]
        if isinstance(node, ast.Import):
            new = f"import {', '.join(kept)}\n" if kept else ""
        else:
            exploded = stmt.source.rstrip().removesuffix(")").rstrip().endswith(",")
            new = _from_import(stmt.module, sorted(kept, key=_order), exploded) if kept else ""
        rewrites.append((stmt.first, stmt.last, new, _added(stmt.module, extra, upstream, why, prior)))
    for module, names in sorted(add.items()):
        at = _insert_at(own, module, is_from=True, first=first_party)
        rewrites.append(
            (
                at,
                at - 1,
                _from_import(module, sorted(names, key=_order), False),
                _added(module, names, upstream, why, prior),
            )
        )
    laid_out = iter(fmt.format_statements([new for _f, _l, new, _c in rewrites if new], line_length))
    edits: list[tuple[int, int, list[str], Change | None]] = [  # (first, last, new lines, what was added)
        (first, last, (next(laid_out) if new else "").splitlines(keepends=True), change)
        for first, last, new, change in rewrites
    ]
    for statement, name in plain:
        at = _insert_at(own, statement.split()[1], is_from=False, first=first_party)
        edits.append((at, at - 1, [statement + "\n"], _added(statement, [name], upstream, why, prior)))
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 1
    moved: list[tuple[int, int]] = []  # (old line, its new line) where the edits start and end
    for first, last, new_lines, change in sorted(edits, key=lambda e: (e[0], e[1])):
        out += lines[pos - 1 : first - 1]
        moved.append((first, len(out) + 1))
        if change is not None:
            changes.append(replace(change, line=len(out) + 1, text="".join(new_lines)))
        out += new_lines
        pos = last + 1
        moved.append((pos, len(out) + 1))

    def follow_line(line: int) -> int:  # a removal's line after the edits (where it stood, if removed)
        old, new = max(((o, n) for o, n in moved if o <= line), default=(line, line))
        return new + line - old

    out += lines[pos - 1 :]
    changes = [replace(c, line=follow_line(c.line)) if c.kind in (STALE, REMOVED) else c for c in changes]
    return "".join(out), sorted(changes, key=lambda c: (c.line, c.kind, c.names))


def _reads(
    maps: Sequence[Sequence[int]], per_side: Sequence[Sequence[fmt.Lint]], names: Collection[str]
) -> dict[int, set[str]]:
    """The 1-based lines of the text where a side of it reads one of ``names`` undefined (``per_side``: the
    F821 lints of each of :func:`sides`' views; ``maps``: each view's lines -> the text's), with the names each
    reads."""
    out: dict[int, set[str]] = {}
    for where, lints in zip(maps, per_side, strict=True):
        for lint in lints:
            if lint.code == "F821" and lint.name in names:
                out.setdefault(where[lint.line - 1], set()).add(lint.name)
    return out


def _inside_regions(text: str, maps: Sequence[Sequence[int]]) -> list[set[int]]:
    """For each of :func:`sides`' views of ``text`` (``maps``: its lines -> the text's), its 1-based lines that
    stand inside a conflict region: a side a maintainer may take, so a name read there is imported even where
    the old series deleted the line."""
    if len(maps) == 1:
        return [set()]
    marked = markers.inside(text)
    return [{k for k, m in enumerate(where, 1) if m in marked} for where in maps]


def _deleted_again(lines: Sequence[str], line: int, old_base: str, hunks: Sequence[Hunk]) -> bool:
    """Whether the use on 1-based ``line`` of ``lines`` is on a line the old series deleted (a hunk of
    ``old_base`` -> the old series' final text, ``hunks``, that removes it) while the lines that hunk
    removed, and the line either side, stand unchanged, one after the other, in ``lines``: then the later
    patches delete them again.  Where upstream changed them, the merge keeps upstream's code or conflicts
    on it (a side a maintainer may take), and the name is imported."""
    text = lines[line - 1].strip()
    old = old_base.splitlines()
    stripped = [x.strip() for x in lines]
    for start, count, _new_start, _new_count in hunks:
        # with a line of context either side: upstream changing the line next to it conflicts too
        removed = [x.strip() for x in old[max(0, start - 1) : start + count + 1]]
        if text in removed[1:-1] and _contains(stripped, removed):
            return True
    return False


def _contains(lines: Sequence[str], block: Sequence[str]) -> bool:
    first = block[0]
    return any(lines[i : i + len(block)] == list(block) for i, x in enumerate(lines) if x == first)


def _added(
    source: str, aliases: Sequence[str], upstream: Mapping[str, _Binding], why: str, previous: Mapping[str, _Binding]
) -> Change | None:
    """The change that imports ``aliases`` from the module ``source`` (or, for ``import x``, by that statement), as
    ``upstream`` (the new upstream module) binds them, else ``previous`` (the module in the previous build)."""
    if not aliases:
        return None
    ordered = sorted(aliases, key=_order)
    names = tuple(a.split(" as ")[-1] for a in ordered)
    statement = source if source.startswith("import ") else f"from {source} import {', '.join(ordered)}"
    how = [
        f"`{n}` ({'defined' if upstream[n].module is None else 'imported'} at upstream line {upstream[n].line})"
        if n in upstream
        else f"`{n}` (imported at line {previous[n].line} of the previous build)"
        for n in names
    ]
    return Change(ADDED, 0, "", names, f"{why} {', '.join(how)}; added `{statement}`")


@dataclass(frozen=True)
class _Stmt:
    node: ast.Import | ast.ImportFrom  # its own line numbers count from its piece: read first and last
    first: int  # 1-based lines in the merged text
    last: int
    source: str

    @property
    def module(self) -> str:
        if isinstance(self.node, ast.ImportFrom):
            return "." * self.node.level + (self.node.module or "")
        return self.node.names[0].name


def _joinable(stmt: _Stmt) -> bool:
    """A ``from M import`` that can take more names: absolute, no star, no comment inside."""
    node = stmt.node
    return (
        isinstance(node, ast.ImportFrom)
        and not node.level
        and "#" not in stmt.source
        and not any(a.name == "*" for a in node.names)
    )


def _statements(view: str, text: str) -> list[_Stmt]:
    """The unconditional top-level import statements of ``view`` that stand before the first conflict
    region of ``text`` (so their lines are the same in both).  Read from the pieces of ``view``
    (:mod:`patch_queue.merge.pieces`), which the merge's checks have parsed already."""
    first_marker = next((i for i, line in enumerate(text.splitlines()) if markers.MARKER.match(line)), None)
    lines = view.splitlines(keepends=True)
    out = []
    for node, shift in pieces.outline(view).top:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        first, last = node.lineno + shift, (node.end_lineno or node.lineno) + shift
        if first_marker is not None and last > first_marker:
            break
        out.append(_Stmt(node, first, last, "".join(lines[first - 1 : last])))
    return out


@functools.lru_cache(maxsize=4)
def _uses(omni: str, old_upstream: str) -> frozenset[str]:
    """The words of the omni lines of ``omni`` (not lines of the old upstream, not imports); kept for the last
    few texts: every reconciliation of a runner module along a replay asks with the same two."""
    upstream_lines = {line.strip() for line in old_upstream.splitlines()}
    words: set[str] = set()
    for line in omni.splitlines():
        if line.strip() not in upstream_lines and not re.match(r"\s*(from|import)\s", line):
            words.update(re.findall(r"[A-Za-z_]\w*", line))
    return frozenset(words)


def _stale(own: list[_Stmt], old: str, new: Mapping[str, _Binding], upstream_module: str) -> list[tuple[int, str, str]]:
    """(statement index, alias, note) for each name a ``from M import`` of the runner takes the way the old
    upstream module bound it (the same import, or its own definition) while the new one does not."""
    before = bindings(old, upstream_module)
    out = []
    for i, stmt in enumerate(own):
        node = stmt.node
        if not isinstance(node, ast.ImportFrom) or node.level:
            continue
        for a in node.names:
            now = new.get(a.name)
            if _takes(before.get(a.name), a.name, node.module, upstream_module) and not _takes(
                now, a.name, node.module, upstream_module
            ):
                note = "" if now is None or now.module is None else f" (it has `{now.statement(a.name)}`)"
                out.append((i, a.name + (f" as {a.asname}" if a.asname else ""), note))
    return out


def _takes(b: _Binding | None, origin: str, module: str | None, upstream_module: str) -> bool:
    """Whether ``from module import origin`` takes what the binding ``b`` of the upstream module binds."""
    return b is not None and b.origin == origin and (b.module or upstream_module) == module


def _section(module: str, first: str) -> int:
    """isort's section of an import of ``module``: future, standard library, third party, first party (``first``:
    the downstream's top-level package, or a relative import)."""
    top = module.split(".")[0]
    if module.startswith(".") or (first and top == first):
        return 3
    if top == "__future__":
        return 0
    return 1 if top in sys.stdlib_module_names else 2


def _order(alias: str) -> tuple[int, str]:
    """isort's order by type: CONSTANTS, Classes, functions."""
    bare = alias.split(" as ")[0]
    kind = 0 if len(bare) > 1 and bare.isupper() else (1 if bare[:1].isupper() else 2)
    return kind, bare.lower()


def _insert_at(own: list[_Stmt], module: str, *, is_from: bool, first: str) -> int:
    """Where a new statement goes: after the last one of its section and kind that sorts before it, else
    before the first of its section, else after every import."""
    key = (_section(module, first), is_from, module.lower())
    peers = [s for s in own if _section(s.module, first) == key[0]]
    before = [s for s in peers if (key[0], isinstance(s.node, ast.ImportFrom), s.module.lower()) <= key]
    if before:
        return before[-1].last + 1
    if peers:
        return peers[0].first
    return own[-1].last + 1 if own else 1


def _from_import(module: str, names: list[str], exploded: bool) -> str:
    """``from module import names`` before the formatter lays it out (``exploded``: one name a line)."""
    if exploded:
        return f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")\n"
    return f"from {module} import {', '.join(names)}\n"
