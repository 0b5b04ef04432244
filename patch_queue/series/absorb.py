"""Put a maintainer's edits of the built modules into the patches that own the lines they touch.

Like ``git absorb`` or StGit's ``absorb``, by blame over the stack: each line of the top of the
stack belongs to the patch that last wrote it (0: the base, the upstream projection).  An edit
(a hunk of top -> the maintainer's text) goes into the latest patch that wrote a line it
changes or sits between; an edit of upstream lines only goes, inside a carried upstream method (a
method some of whose lines the base, the projection, wrote), into the patch that carries that
method's omni edits (the first patch after the skeleton that changes the method), so the
skeleton's copy of the method stays upstream's text as projected; elsewhere (and in a carried
method no later patch changes) into the module's skeleton patch (the first patch that touches the
module).  ``into`` forces one patch (``pq record --patch``).  ``by_method=False`` (``pq merge``, which
places a release's changes as the lineage recorded them) sends every edit of upstream lines to the skeleton:
that placement is part of the bodies of each merge step an older pq recorded, so a series merged and committed
by it reproduces byte for byte; a merge step now records ``placed = "method"`` and :func:`relocate` then moves
such edits out of the skeleton (as `pq continue` does when it rewrites the series after a refresh, recorded with
the refresh's edits, so that step reproduces too).

Patch *k* then becomes ``merge3(base = top, ours = C_k, theirs = top + the edits owned by
patches <= k)``: the edits carry into every later patch, and the top becomes exactly the
maintainer's text.  An edit that does not merge cleanly into its owner (a later patch changed
the lines next to it) moves up to the next patch, and the move is said (:class:`Placement`).
Pure: commits are written as unreferenced objects; the caller moves refs.
"""

from __future__ import annotations

from dataclasses import dataclass

from patch_queue.errors import PqError, QueueError
from patch_queue.git.diff import line_hunks
from patch_queue.git.repo import ProjectRepo
from patch_queue.merge import pieces, symbols
from patch_queue.merge.symbols import Symbol
from patch_queue.series import fmt, stack
from patch_queue.series.queue import Queue


@dataclass(frozen=True)
class Placement:
    file: str
    line: int  # 1-based, in the maintainer's text
    added: int
    removed: int
    patch: str
    moved_from: str = ""  # the owner it could not merge into, when it moved up


@dataclass
class _Hunk:
    start: int  # in the top text, 0-based
    count: int
    new_start: int  # in the maintainer's text
    new_lines: list[bytes]
    owner: int  # index into the chain, 1-based (0 never: see skeleton)
    first_owner: int = 0


def _lines(data: bytes | None) -> list[bytes]:
    return data.splitlines(keepends=True) if data else []


def blame(repo: ProjectRepo, texts: list[bytes | None]) -> list[int]:
    """For each line of ``texts[-1]``, the index of the text that last wrote it (0: ``texts[0]``)."""
    owners = [0] * len(_lines(texts[0]))
    for k in range(1, len(texts)):
        old, new = texts[k - 1] or b"", texts[k] or b""
        if old == new:
            continue
        out: list[int] = []
        pos = 0
        for start, count, _n_start, n_count in line_hunks(old, new):
            out += owners[pos:start]
            out += [k] * n_count
            pos = start + count
        owners = out + owners[pos:]
    return owners


def methods_of(data: bytes | None) -> dict[str, Symbol]:
    """The methods (``Class.method``) and functions of a module text; {} when it does not parse."""
    try:
        return pieces.symbols_of((data or b"").decode("utf-8"))
    except (PqError, UnicodeDecodeError):
        return {}


_NONE = Symbol("", 0, 0, "", 0)  # a symbol a text does not hold


class _Carriers:
    """For one module along the chain: the patch that carries each carried upstream method's omni edits."""

    def __init__(self, history: list[bytes | None], owners: list[int], skeleton: int) -> None:
        self.history, self.owners, self.skeleton = history, owners, skeleton
        self.top = methods_of(history[-1])
        self._texts: dict[int, dict[str, Symbol]] = {}
        self._found: dict[str, int] = {}

    def _at(self, k: int) -> dict[str, Symbol]:
        if k not in self._texts:
            self._texts[k] = methods_of(self.history[k])
        return self._texts[k]

    def of(self, start: int, count: int, new_lines: list[bytes]) -> int | None:
        """The patch (index into the chain) carrying the method of the top's lines ``start``..``start + count``
        (0-based; an insertion when ``count`` is 0, after line ``start - 1``), when that method is a carried
        one (the base wrote some of its lines) a later patch than the skeleton changes; else None."""
        anchor = start if count else start - 1
        for name, sym in self.top.items():
            if "." not in name or not sym.start - 1 <= anchor <= sym.end - 1 or start + count > sym.end:
                continue
            if not count and anchor == sym.end - 1:  # after its last line: inside only when indented into it
                first = next((line for line in new_lines if line.strip()), b"")
                if len(first) - len(first.lstrip()) <= sym.indent:
                    return None
            if 0 not in self.owners[sym.start - 1 : sym.end]:
                return None  # an omni-only method: its lines are the skeleton's or a later patch's
            if name not in self._found:
                self._found[name] = next(
                    (
                        k
                        for k in range(self.skeleton + 1, len(self.history))
                        if name in self._at(k) and self._at(k)[name].text != self._at(k - 1).get(name, sym).text
                    ),
                    0,
                )
            return self._found[name] or None
        return None


def _apply(top: list[bytes], hunks: list[_Hunk]) -> bytes:
    out = list(top)
    for h in sorted(hunks, key=lambda h: h.start, reverse=True):
        out[h.start : h.start + h.count] = h.new_lines
    return b"".join(out)


def _rewrite(
    repo: ProjectRepo,
    base: str,
    chain: list[tuple[str, str]],
    trees: list[dict[str, bytes]],
    new_trees: list[dict[str, bytes]],
) -> list[tuple[str, str]]:
    """``chain`` recommitted on ``base`` with ``new_trees`` (index k: the k-th patch's tree; 0 is the base's): a
    patch whose parent and tree are unchanged keeps its commit."""
    out: list[tuple[str, str]] = []
    parent = base
    for k, (name, commit) in enumerate(chain, 1):
        info = repo.commit_info(commit)
        if parent != info.parents[0] or new_trees[k] != trees[k]:
            commit = stack.commit_files(repo, parent, new_trees[k], info)
        out.append((name, commit))
        parent = commit
    return out


def absorb(
    repo: ProjectRepo,
    base: str,
    chain: list[tuple[str, str]],
    work: dict[str, bytes],
    *,
    into: str | None = None,
    by_method: bool = True,
) -> tuple[list[tuple[str, str]], list[Placement]]:
    """The chain with ``work`` (module path -> the maintainer's text) absorbed; and where each edit went.

    ``chain`` holds (name, commit) from the first patch up, each commit's parent being the one
    before (``base`` for the first).  Paths of ``work`` equal to the top are left alone.
    """
    if not chain:
        raise QueueError("no patch is applied to take the edits")
    trees = [repo.read_tree(repo.commit_info(c).tree) for c in [base] + [c for _n, c in chain]]
    top = trees[-1]
    names = [n for n, _c in chain]
    forced = None
    if into is not None:
        if into not in names:
            raise QueueError(f"no applied patch is named {into}")
        forced = names.index(into) + 1
    per_file: dict[str, list[_Hunk]] = {}
    placements: list[Placement] = []
    for path in sorted(work):
        old = top.get(path)
        if old is None or old == work[path] or path.startswith(stack.VENDOR):
            continue
        history = [t.get(path) for t in trees]
        owners = blame(repo, history)
        skeleton = next(k for k in range(1, len(trees)) if history[k] != history[k - 1])
        new = _lines(work[path])
        carriers = _Carriers(history, owners, skeleton)
        hunks = []
        for start, count, n_start, n_count in line_hunks(old, work[path]):
            # an insertion sits between two lines: it needs both
            touched = owners[start : start + count] if count else owners[max(start - 1, 0) : start + 1]
            owner = max(touched, default=0) or skeleton
            if owner == skeleton and by_method:  # upstream lines (or the skeleton's): the carried method's patch
                owner = carriers.of(start, count, new[n_start : n_start + n_count]) or owner
            if forced is not None and forced < owner:
                raise QueueError(
                    f"this edit touches lines {names[owner - 1]} writes, which comes after "
                    f"{into}; record it into {names[owner - 1]} or a later patch",
                    path=path,
                    line=n_start + 1,
                )
            owner = forced or owner
            hunks.append(_Hunk(start, count, n_start, new[n_start : n_start + n_count], owner, owner))
        per_file[path] = hunks
    # each patch's new text of each file: the edits it owns (and those of earlier patches) merged in
    new_trees = [dict(t) for t in trees]
    for path, hunks in per_file.items():
        old_top = _lines(top[path])
        k = min(h.owner for h in hunks)
        while k < len(trees):
            mine = [h for h in hunks if h.owner <= k]
            theirs = _apply(old_top, mine)
            ours = trees[k].get(path) or b""
            if k == len(trees) - 1:
                new_trees[k][path] = theirs
                break
            merged = repo.merge_file(top[path], ours, theirs, labels=("top", "patch", "edit"), path=path)
            if merged.clean:
                new_trees[k][path] = merged.text
                k += 1
                continue
            for h in hunks:  # the edits owned here do not fit this patch: they go one patch up
                if h.owner == k:
                    h.owner = k + 1
            for j in range(min(h.first_owner for h in hunks), k + 1):
                new_trees[j][path] = trees[j].get(path) or b""
            k = min(h.owner for h in hunks)
        for h in hunks:
            moved_from = names[h.first_owner - 1] if h.owner != h.first_owner else ""
            placements.append(
                Placement(path, h.new_start + 1, len(h.new_lines), h.count, names[h.owner - 1], moved_from)
            )
    return _rewrite(repo, base, chain, trees, new_trees), sorted(placements, key=lambda p: (p.file, p.line))


@dataclass(frozen=True)
class Relocation:
    """A carried method whose copy in its module's skeleton patch held lines upstream did not write (an edit a
    release's merge or an earlier pq left there): the skeleton's copy is upstream's text as projected again, and
    the edit is in ``patch``, the patch that carries the method's omni edits (``patch`` "": no patch does, so the
    edit stays in the skeleton).  ``added``/``removed``: the lines of the edit, against upstream's text."""

    file: str
    symbol: str  # the downstream name (``Class.method``)
    skeleton: str
    patch: str
    added: int
    removed: int
    lines: str = ""  # the lines of the skeleton's copy that upstream did not write, in order


def projected_symbols(repo: ProjectRepo, base: str, queue: Queue) -> dict[str, list[Symbol]]:
    """Per module that carries upstream symbols, each carried symbol as the projection in ``base`` lays it out (in
    the module's order), read from the upstream files ``base`` vendors; a module whose projection in ``base`` is
    not those symbols (an older layout) is left out."""
    tree = repo.read_tree(repo.commit_info(base).tree)
    found: list[tuple[str, list[Symbol]]] = []
    for m in queue.modules:
        vendored, projected = tree.get(stack.VENDOR + m.upstream), tree.get(m.path)
        if not m.upstream or vendored is None or projected is None:
            continue
        upstream = methods_of(vendored)
        if all(name in upstream for name in m.symbols):
            found.append((m.path, [upstream[name] for name in m.symbols]))
    every = iter(
        fmt.format_symbols(
            [s for _p, syms in found for s in syms], formatter=queue.formatter, line_length=queue.line_length
        )
    )
    out: dict[str, list[Symbol]] = {}
    for path, syms in found:
        laid_out = [next(every) for _s in syms]
        if symbols.project(laid_out).encode("utf-8") == tree[path]:
            out[path] = laid_out
    return out


def skeleton_drift(
    repo: ProjectRepo, base: str, chain: list[tuple[str, str]], queue: Queue
) -> list[tuple[str, str, str, str]]:
    """(module path, downstream symbol, the skeleton's text of it, upstream's text as projected) of each carried
    symbol whose copy in the module's skeleton patch (the first of ``chain`` that writes the module) is not
    upstream's text as projected in ``base``."""
    trees = [repo.read_tree(repo.commit_info(c).tree) for c in [base] + [c for _n, c in chain]]
    out = []
    for path, carried in sorted(projected_symbols(repo, base, queue).items()):
        history = [t.get(path) for t in trees]
        skeleton = next((k for k in range(1, len(trees)) if history[k] != history[k - 1]), None)
        if skeleton is None:
            continue
        copies = methods_of(history[skeleton])
        for sym in carried:
            for name in fmt.downstream_names(copies, [sym.name]):
                if copies[name].text != sym.text:
                    out.append((path, name, copies[name].text, sym.text))
    return out


def relocate(
    repo: ProjectRepo, base: str, chain: list[tuple[str, str]], queue: Queue
) -> tuple[list[tuple[str, str]], list[Relocation]]:
    """The chain with each carried symbol's copy in its module's skeleton patch put back to upstream's text as
    projected in ``base``, its edit moved into the patch that carries the symbol's omni edits (the first after the
    skeleton that changes it): that patch and every later one keep their trees (the top stays as it is), the
    skeleton and the patches between take upstream's text of the symbol.  A symbol no later patch changes keeps
    its edit in the skeleton (said with ``patch`` ""); what was moved, in module and symbol order."""
    drift = skeleton_drift(repo, base, chain, queue)
    if not drift:
        return chain, []
    trees = [repo.read_tree(repo.commit_info(c).tree) for c in [base] + [c for _n, c in chain]]
    new_trees = [dict(t) for t in trees]
    names = [n for n, _c in chain]
    moved: list[Relocation] = []
    for path, name, copy, upstream in drift:
        history = [t.get(path) for t in new_trees]
        skeleton = next(k for k in range(1, len(trees)) if history[k] != history[k - 1])
        texts = [methods_of(h) for h in history]
        carrier = next(
            (k for k in range(skeleton + 1, len(trees)) if texts[k].get(name, _NONE).text != copy),
            None,
        )
        added = removed = 0
        copy_lines = copy.encode("utf-8").splitlines(keepends=True)  # as the line diff counts lines
        written: list[bytes] = []
        for _s, count, n_start, n_count in line_hunks(upstream.encode("utf-8"), copy.encode("utf-8")):
            added, removed = added + n_count, removed + count
            written += copy_lines[n_start : n_start + n_count]
        edit = b"".join(written).decode("utf-8")
        if carrier is None:
            moved.append(Relocation(path, name, names[skeleton - 1], "", added, removed, edit))
            continue
        for k in range(skeleton, carrier):
            sym = texts[k][name]
            lines = (history[k] or b"").decode("utf-8").splitlines(keepends=True)
            lines[sym.start - 1 : sym.end] = upstream.splitlines(keepends=True)
            new_trees[k][path] = "".join(lines).encode("utf-8")
        moved.append(Relocation(path, name, names[skeleton - 1], names[carrier - 1], added, removed, edit))
    return _rewrite(repo, base, chain, trees, new_trees), moved
