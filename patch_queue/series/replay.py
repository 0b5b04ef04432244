"""Replay: rebase the stack onto a new base, one three-way merge per patch, in memory.

For patch *i* with old parent P, old result C and new parent N (the replayed stack so far),
every file is merged as base = P, ours = N (upstream side), theirs = C (the patch), the way
``git cherry-pick`` does, with diff3 markers on conflict.  Along a series, :func:`replay` keeps each
module's :class:`~patch_queue.merge.window.Window`: a patch far from every upstream change is
spliced into the replayed text (cost in proportion to the patch), the rest get the whole-file merge;
both give the same bytes.  Nothing here writes files or moves refs: callers get commits
(unreferenced objects) and a list of conflicts, then write once.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TypedDict

from patch_queue.git.diff import line_hunks, move_line
from patch_queue.git.repo import ProjectRepo
from patch_queue.merge import markers, window
from patch_queue.merge import three_way as merge
from patch_queue.merge.conflict import Conflict, ConflictKind
from patch_queue.series import reimport, stack
from patch_queue.series.status import PatchStatus as PatchStatus  # (what a replay did to a patch: its own module)
from patch_queue.sources import cache

MARKER_ANY = re.compile(rb"^(?:<{7}|\|{7}|={7}|>{7})(?: |$)", re.MULTILINE)


@dataclass
class PatchResult:
    name: str
    status: PatchStatus  # UNCHANGED, MODIFIED, CONFLICT or EMPTY
    commit: str  # the replayed commit (holding markers when conflicted)
    conflicts: list[Conflict] = field(default_factory=list)
    flags: list[Conflict] = field(default_factory=list)


@dataclass(frozen=True)
class Imports:
    """What the import reconciliation of the runner modules needs (:mod:`patch_queue.series.reimport`):
    runner module path -> the upstream file it carries code of, the formatter's line length, and the
    old series' top commit (whose omni code may still use an import)."""

    modules: Mapping[str, str]
    line_length: int
    old_top: str
    first_party: str = ""  # the downstream's top-level package (its imports are the last section)


_IMPORT_LINE = re.compile(rb"^(?:from|import) .*$", re.MULTILINE)
_DEF = re.compile(r"^(\s*)(?:(?:async\s+)?def|class)\s+(\w+)")


def enclosing_symbol(text: str, line: int) -> str:
    """The Class.method around 1-based ``line`` of (possibly conflicted) source, by indentation."""
    return _Outline(text).symbol_at(line)


class _Outline:
    """A text's lines and its ``def`` and ``class`` lines (index, indent, name): :func:`enclosing_symbol` at
    every region of a merge with one pass over the text."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.defs = [(i, len(m.group(1)), m.group(2)) for i, probe in enumerate(self.lines) if (m := _DEF.match(probe))]

    def symbol_at(self, line: int) -> str:
        # the indent of the first real code line in the region tells how deep it sits
        limit = 0
        for probe in self.lines[line:]:
            if probe.strip() and not MARKER_ANY.match(probe.encode()):
                limit = len(probe) - len(probe.lstrip())
                if probe.lstrip()[0] in ")]}":
                    limit += 1  # the closing line of a signature belongs inside the def it closes
                break
        names: list[str] = []
        above = len(range(len(self.lines))[: line - 1])  # the lines before ``line``
        for _i, indent, name in reversed(self.defs[: bisect.bisect_left(self.defs, (above,))]):
            if limit == 0:
                break
            if indent < limit:
                names.append(name)
                limit = indent
        return ".".join(names[::-1][:2])  # the outermost class and the method right inside it (Class.method)


def conflict_lines(data: bytes, theirs: str | None = None) -> list[int]:
    """1-based lines of the ``<<<<<<<`` markers; only regions closed by ``>>>>>>> theirs`` when given.

    Under --no-stop a later patch's merge carries the markers of earlier patches along; the
    closing label tells which patch a region belongs to.
    """
    return [first + 1 for first, _last in _blocks(data.split(b"\n"), theirs)]


def has_markers(data: bytes) -> int | None:
    """1-based line of the first conflict marker, or None."""
    m = MARKER_ANY.search(data)
    return None if m is None else data.count(b"\n", 0, m.start()) + 1


Normalize = Callable[[str, bytes], bytes]
Recorded = Callable[[str], "str | None"]
Edited = Callable[[str, str], "str | None"]  # (patch, merged commit) -> the commit with its recorded edits


def patch_key(name: str) -> str:
    """A patch's name without its series number, so recorded resolutions survive renumbering."""
    return re.sub(r"^\d+-", "", name).removesuffix(".patch")


def replay_patch(
    repo: ProjectRepo,
    name: str,
    old_commit: str,
    new_parent: str,
    *,
    labels: tuple[str, str],
    normalize: Normalize | None = None,
    recorded: Recorded | None = None,
    imports: Imports | None = None,
    windows: dict[str, window.Window] | None = None,
) -> PatchResult:
    """Cherry-pick ``old_commit`` onto ``new_parent``. ``labels`` = (old base label, new base label).

    ``normalize(path, data)`` lays out the carried symbols of the old sides the way the new base
    is laid out (the projection's formatter); ``recorded(key)`` gives recorded resolutions;
    ``imports``: reconcile the imports of a runner module in the patch that writes them;
    ``windows``: each module's :class:`~patch_queue.merge.window.Window` along a replay (the merge of
    a patch far from every upstream change, by splicing; the same text the whole-file merge gives).
    """
    info = repo.commit_info(old_commit)
    old_parent = repo.commit_info(info.parents[0])
    p_files = repo.read_tree(old_parent.tree)
    c_files = repo.read_tree(info.tree)
    n_info = repo.commit_info(new_parent)
    if old_parent.tree == n_info.tree:
        commit = stack.commit_files(repo, new_parent, c_files, info)
        return PatchResult(name, PatchStatus.UNCHANGED, commit)
    n_files = repo.read_tree(n_info.tree)
    merged: dict[str, bytes] = {}
    conflicts: list[Conflict] = []
    flags: list[Conflict] = []
    for path in sorted(set(p_files) | set(c_files) | set(n_files)):
        p, c, n = p_files.get(path), c_files.get(path), n_files.get(path)
        if p == c:
            result = n  # the patch leaves this file alone
        elif p == n or c == n:
            result = c
        elif c is None or n is None:
            # one side deleted what the other changed: keep the surviving text, marked whole
            survivor = c if c is not None else n
            assert survivor is not None
            head = f"<<<<<<< {labels[1]} (deleted)\n||||||| {labels[0]}\n=======\n".encode()
            result = head + survivor + (b"" if survivor.endswith(b"\n") else b"\n") + f">>>>>>> {name}\n".encode()
            conflicts.append(
                Conflict(
                    ConflictKind.DELETED_FILE,
                    "one side deleted the file the other changed",
                    patch=name,
                    file=path,
                    line=1,
                )
            )
        else:  # both sides added the file (no base: merge against empty) or changed it
            result = None
            if windows is not None and p is not None and not path.startswith(stack.VENDOR):
                if normalize is None or (normalize(path, p) == p and normalize(path, c) == c):
                    reimports = imports is not None and bool(imports.modules.get(path))
                    result = windows.setdefault(path, window.Window()).merge(p, n, c, same_imports=reimports)
            if result is None:
                result = _merge_one(repo, path, p or b"", n, c, (*labels, name), normalize, recorded, conflicts, flags)
        upstream = imports.modules.get(path) if imports is not None else None
        # the patch that owns the module's imports; or a later patch's conflict regions: a side a maintainer may
        # take can read a name the module never needed (a widened region keeps upstream code the old series
        # deleted): imported, nothing removed
        skeleton = bool(upstream) and result is not None and _imports_of(p) != _imports_of(c)
        if (
            imports is not None
            and upstream
            and result is not None
            and (skeleton or any(f.file == path for f in conflicts))
        ):
            before = result
            result = _reimport(repo, imports, path, upstream, result, p_files, n_files, name, flags, stale=skeleton)
            if result != before:
                hunks = line_hunks(before, result)
                text = result.decode("utf-8", "replace")
                conflicts[:] = [_resided(moved(f, hunks), text) if f.file == path else f for f in conflicts]
        if result is not None:
            merged[path] = result
    commit = stack.commit_files(repo, new_parent, merged, replace(info, message=relabel(info.message, labels)))
    status = PatchStatus.CONFLICT if conflicts else (PatchStatus.EMPTY if merged == n_files else PatchStatus.MODIFIED)
    return PatchResult(name, status, commit, conflicts, flags)


def relabel(message: str, labels: tuple[str, str]) -> str:
    """A patch's message naming the new upstream where it named the old one (the ``Upstream: FILE at LABEL.``
    line of a carried method's patch); ``labels`` as the diff3 markers' (``base OLD``, ``upstream NEW``)."""
    old, new = labels[0].removeprefix("base "), labels[1].removeprefix("upstream ")
    if old == new:
        return message
    return re.sub(rf"^(Upstream: \S+ at ){re.escape(old)}\.$", lambda m: f"{m.group(1)}{new}.", message, flags=re.M)


@functools.lru_cache(maxsize=16)
def _imports_of(data: bytes | None) -> tuple[bytes, ...]:
    """The import lines of a module (kept for a while: a replay compares each module text before and after
    every patch, and a patch's result is the next one's old side)."""
    return tuple(_IMPORT_LINE.findall(data or b""))


def _reimport(
    repo: ProjectRepo,
    imports: Imports,
    path: str,
    upstream: str,
    merged: bytes,
    p_files: dict[str, bytes],
    n_files: dict[str, bytes],
    name: str,
    flags: list[Conflict],
    *,
    stale: bool,
) -> bytes:
    """``merged`` with its imports reconciled with the new upstream file; one review flag per change.
    ``stale``: also imports the new upstream file no longer has (else only what merged code reads)."""
    new_up, old_up = n_files.get(stack.VENDOR + upstream), p_files.get(stack.VENDOR + upstream)
    if new_up is None:
        return merged
    omni = repo.read_tree(repo.commit_info(imports.old_top).tree).get(path, b"")
    module = reimport.module_of(upstream)
    try:
        text, changes = reimport.reconcile(
            merged.decode("utf-8"),
            new_upstream=new_up.decode("utf-8"),
            old_upstream=None if old_up is None or not stale else old_up.decode("utf-8"),
            upstream_module=module,
            omni=omni.decode("utf-8"),
            old_base=p_files.get(path, b"").decode("utf-8"),
            line_length=imports.line_length,
            rewrite_from=None if old_up is None else old_up.decode("utf-8"),
            first_party=imports.first_party,
        )
    except UnicodeDecodeError:
        return merged
    if not changes:
        return merged
    out = text.encode("utf-8")
    hunks = line_hunks(merged, out)
    flags[:] = [moved(f, hunks) if f.file == path else f for f in flags]
    flags += [
        Conflict(c.kind, c.message, conflict=False, resolution=c.text, patch=name, file=path, line=c.line)
        for c in changes
    ]
    return out


_REFORMATTED = (
    "the patch's copy of the carried upstream code was laid out with the projection's formatter "
    "(the new upstream code is); check the diff of this file"
)


def _merge_one(
    repo: ProjectRepo,
    path: str,
    p: bytes,
    n: bytes,
    c: bytes,
    diff3_labels: tuple[str, str, str],  # old base, new base, the patch's name
    normalize: Normalize | None,
    recorded: Recorded | None,
    conflicts: list[Conflict],
    flags: list[Conflict],
) -> bytes:
    name = diff3_labels[2]
    texts = None
    if not path.startswith(stack.VENDOR):  # vendored and non-UTF-8 files get git's plain line merge
        with contextlib.suppress(UnicodeDecodeError):
            texts = [x.decode("utf-8") for x in (p, n, c)]
    if texts is None:
        m = repo.merge_file(p, n, c, labels=diff3_labels, path=path)
        if not m.clean:
            conflicts += [
                Conflict(ConflictKind.BOTH_CHANGED, patch=name, file=path, line=ln)
                for ln in conflict_lines(m.text, name)
            ]
        return m.text
    if normalize is not None:
        texts[0] = normalize(path, p).decode("utf-8")
        norm_c = normalize(path, c).decode("utf-8")
        if norm_c != texts[2]:
            flags.append(
                Conflict(ConflictKind.REFORMATTED, _REFORMATTED, conflict=False, patch=name, file=path, line=1)
            )
        texts[2] = norm_c
    text, regions = _merged(texts, diff3_labels, f"{patch_key(name)}\0{path}", recorded, path.endswith(".py"))
    if regions:
        outline = _Outline(text)
        for region in regions:
            found = replace(region, patch=name, file=path, symbol=outline.symbol_at(region.line or 0))
            (conflicts if region.conflict else flags).append(found)
    return text.encode("utf-8")


def _merged(
    texts: list[str], labels: tuple[str, str, str], key_prefix: str, recorded: Recorded | None, python: bool
) -> tuple[str, list[Conflict]]:
    """The anchor-aware merge of ``texts`` (base, upstream, patch), checked for a Python module; its text and
    regions.

    Kept in the download cache by its inputs and the merge's code, with the recorded resolutions it asked
    for: a merge is a function of its texts and of those answers, so a result is reused only when the store
    gives every one of them again.  This is what a second refresh of the same upgrade (the scheduled bot's,
    or one after ``pq abort``) saves: the merge checks parse and bind every side."""
    key = cache.derived_key(_merge_code(), str(python), str(recorded is not None), *texts, *labels, key_prefix)
    kept = cache.derived_json("merges", key, _Kept)
    if kept is not None and all((recorded(k) if recorded else None) == v for k, v in kept[0]["asked"].items()):
        return kept[0]["text"], list(kept[0]["regions"])
    asked: dict[str, str | None] = {}

    def ask(k: str) -> str | None:
        asked[k] = recorded(k) if recorded is not None else None
        return asked[k]

    from patch_queue.merge import checked  # (parsing and binding every side: only when the cache has no answer)

    do_merge = checked.merge3_checked if python else merge.merge3
    result = do_merge(*texts, labels=labels, key_prefix=key_prefix, recorded=ask if recorded is not None else None)
    data = {"asked": asked, "text": result.text, "regions": [asdict(r) for r in result.regions]}
    cache.derived_put("merges", key, json.dumps(data, sort_keys=True).encode())
    return result.text, result.regions


@functools.lru_cache(maxsize=1)
def _merge_code() -> str:
    """The stamp of the merge's code for :func:`_merged`'s cache key: every module of ``merge/`` and of the layers
    below it (``git/``, ``errors.py``, ``fsutil.py``, ``progress.py``: all it may import, ``tests/test_layout.py``)."""
    here = Path(cache.__file__).parents[1]
    below = [p for folder in ("merge", "git") for p in (here / folder).glob("*.py")]
    below += [here / name for name in ("errors.py", "fsutil.py", "progress.py")]
    return cache.code_stamp(*sorted(p.relative_to(here).as_posix() for p in below))


class _Kept(TypedDict):
    """A merge kept by :func:`_merged`: the recorded resolutions it asked for, its text and its regions
    (``dataclasses.asdict`` of each :class:`Conflict`)."""

    asked: dict[str, str | None]
    text: str
    regions: tuple[Conflict, ...]


def replay(
    repo: ProjectRepo,
    patches: list[tuple[str, str]],
    new_base: str,
    *,
    labels: tuple[str, str],
    stop: bool,
    progress: Callable[[PatchResult], None] | None = None,
    normalize: Normalize | None = None,
    recorded: Recorded | None = None,
    edited: Edited | None = None,
    imports: Imports | None = None,
) -> list[PatchResult]:
    """Replay ``patches`` (name, old commit) on ``new_base``; stops after the first conflict if ``stop``.

    ``edited`` gives the maintainer's recorded edits of a patch's merge result (see
    :meth:`patch_queue.series.rerere.Store.lookup_edit`); they are looked up on the plain merge, before
    the recorded regions (``recorded``), so the same inputs always meet the same record.  The objects a replay
    writes go to one pack (:meth:`~patch_queue.git.repo.ProjectRepo.batched`), written when it ends.
    """
    with repo.batched():
        return _replay(repo, patches, new_base, labels, stop, progress, normalize, recorded, edited, imports)


def _replay(
    repo: ProjectRepo,
    patches: list[tuple[str, str]],
    new_base: str,
    labels: tuple[str, str],
    stop: bool,
    progress: Callable[[PatchResult], None] | None,
    normalize: Normalize | None,
    recorded: Recorded | None,
    edited: Edited | None,
    imports: Imports | None,
) -> list[PatchResult]:
    results: list[PatchResult] = []
    parent = new_base
    windows: dict[str, window.Window] = {}
    found = False
    for name, old in patches:
        plain = None if edited is not None else recorded
        res = replay_patch(
            repo,
            name,
            old,
            parent,
            labels=labels,
            normalize=normalize,
            recorded=plain,
            imports=imports,
            windows=windows,
        )
        final = edited(name, res.commit) if edited is not None else None
        if final is not None:
            res = _with_edits(repo, res, final)
        elif edited is not None and res.conflicts and recorded is not None:
            res = replay_patch(
                repo, name, old, parent, labels=labels, normalize=normalize, recorded=recorded, imports=imports
            )
        if found:  # earlier findings follow their lines through this patch's edit
            _follow_results(repo, results, parent, res.commit)
        found = found or bool(res.conflicts or res.flags)
        results.append(res)
        if progress is not None:
            progress(res)
        parent = res.commit
        if res.conflicts and stop:
            break
    return results


def _with_edits(repo: ProjectRepo, merged: PatchResult, final: str) -> PatchResult:
    """The result of a patch whose merge met recorded edits: one review flag per file they changed."""
    before = repo.read_tree(repo.commit_info(merged.commit).tree)
    after = repo.read_tree(repo.commit_info(final).tree)
    flags = follow_lines(repo, list(merged.flags), merged.commit, final)
    for path in sorted(set(before) | set(after)):
        if before.get(path) == after.get(path):
            continue
        hunks = line_hunks(before.get(path) or b"", after.get(path) or b"")
        resolved = sum(1 for c in merged.conflicts if c.file == path)
        tail = f", resolving {resolved} conflict region(s)" if resolved else ""
        added, removed = sum(h[3] for h in hunks), sum(h[1] for h in hunks)
        message = f"the maintainer's recorded edits of this merge were applied (+{added} -{removed} lines{tail})"
        flags.append(
            Conflict(
                ConflictKind.RECORDED_EDITS, message, conflict=False, patch=merged.name, file=path, line=hunks[0][2] + 1
            )
        )
    return PatchResult(merged.name, PatchStatus.MODIFIED, final, [], flags)


def _follow_results(repo: ProjectRepo, results: list[PatchResult], old_commit: str, new_commit: str) -> None:
    """:func:`follow_lines` for the findings of every earlier patch result."""
    followed = iter(follow_lines(repo, [f for r in results for f in r.conflicts + r.flags], old_commit, new_commit))
    for r in results:
        r.conflicts = [next(followed) for _ in r.conflicts]
        r.flags = [next(followed) for _ in r.flags]


def follow_lines(repo: ProjectRepo, findings: list[Conflict], old_commit: str, new_commit: str) -> list[Conflict]:
    """``findings`` with each ``line`` moved to where its text is after a later patch changed the file."""
    if not findings:
        return findings
    old_files = repo.read_tree(repo.commit_info(old_commit).tree)
    new_files = repo.read_tree(repo.commit_info(new_commit).tree)
    hunks = {}
    for path in {f.file for f in findings}:
        a, b = old_files.get(path), new_files.get(path)
        if a is not None and b is not None and a != b:
            hunks[path] = line_hunks(a, b)
    return [moved(f, hunks[f.file]) if f.file in hunks else f for f in findings]


def _resided(conflict: Conflict, text: str) -> Conflict:
    """``conflict`` with its upstream and patch sides read again from its region in ``text`` (the import step
    rewrites lines that read a name upstream removed, on either side)."""
    region = markers.region_at(text, conflict.line or 0) if conflict.theirs is not None else None
    if region is None or region.first != conflict.line:
        return conflict
    return replace(conflict, ours="".join(region.upstream), theirs="".join(region.patch))


def moved(finding: Conflict, hunks: list[tuple[int, int, int, int]]) -> Conflict:
    """``finding`` with its line (and its omni block's) where they are after the edit ``hunks`` describe."""
    anchor = finding.anchor
    if anchor is not None and anchor.line is not None:
        anchor = replace(anchor, line=move_line(anchor.line, hunks))
    return replace(finding, line=move_line(finding.line or 0, hunks), anchor=anchor)


def _blocks(lines: list[bytes], theirs: str | None = None) -> list[tuple[int, int]]:
    """(first, last) 0-based line spans of conflict regions, only those closed by ``theirs`` if given."""
    out: list[tuple[int, int]] = []
    opened: int | None = None
    for i, line in enumerate(lines):
        if line.startswith(b"<<<<<<<") and opened is None:
            opened = i
        elif line.startswith(b">>>>>>>") and opened is not None:
            if theirs is None or line[8:].decode("utf-8", errors="replace").strip() == theirs:
                out.append((opened, i))
            opened = None
    return out


def _replacements(top_marked: bytes, resolved: bytes, mine: bytes) -> list[tuple[int, int, list[bytes]]] | None:
    """For each conflict region of ``mine`` (first, last line), the lines the maintainer put in its place.

    Every region of ``mine`` must appear verbatim in ``top_marked``; what replaced it in
    ``resolved`` is found by aligning the unchanged lines around it.  None when one cannot be placed.
    """
    top = top_marked.splitlines(keepends=True)
    res = resolved.splitlines(keepends=True)
    own = mine.splitlines(keepends=True)
    # the lines both sides keep, top -> resolved, increasing on both sides
    blocks = difflib.SequenceMatcher(None, top, res, autojunk=False).get_matching_blocks()
    mapping = {block.a + k: block.b + k for block in blocks for k in range(block.size)}
    top_blocks = {b"".join(top[s : e + 1]): (s, e) for s, e in _blocks(top)}
    out: list[tuple[int, int, list[bytes]]] = []
    for s, e in _blocks(own):
        key = b"".join(own[s : e + 1])
        if key not in top_blocks:
            return None
        ts, te = top_blocks[key]
        lo = max((mapping[i] + 1 for i in mapping if i < ts), default=0)
        hi = min((mapping[i] for i in mapping if i > te), default=len(res))
        out.append((s, e, res[lo:hi]))
    return out


def carry_resolutions(top_marked: bytes, resolved: bytes, mine: bytes) -> bytes | None:
    """Put into ``mine`` the resolution the maintainer wrote, in ``resolved``, for each region of ``top_marked``.

    None when a region cannot be placed (then the caller asks for patch-by-patch resolution).
    """
    replacements = _replacements(top_marked, resolved, mine)
    if replacements is None:
        return None
    own = mine.splitlines(keepends=True)
    for s, e, lines in reversed(replacements):
        own[s : e + 1] = lines
    return b"".join(own)


def replaced_regions(top_marked: bytes, resolved: bytes) -> dict[int, str] | None:
    """For each conflict region of ``top_marked`` (by its 1-based first line), the text now in its place in
    ``resolved`` (the region itself while it is not resolved); None when one cannot be placed."""
    replacements = _replacements(top_marked, resolved, top_marked)
    if replacements is None:
        return None
    return {s + 1: b"".join(lines).decode("utf-8", "replace") for s, _e, lines in replacements}


def resolutions_of(top_marked: bytes, resolved: bytes, mine: bytes, theirs: str) -> list[str] | None:
    """The texts that replaced the regions of ``mine`` closed by ``>>>>>>> theirs``, in file order."""
    replacements = _replacements(top_marked, resolved, mine)
    if replacements is None:
        return None
    own = mine.splitlines(keepends=True)
    own_regions = {(s, e) for s, e in _blocks(own, theirs)}
    return [b"".join(lines).decode("utf-8", "replace") for s, e, lines in replacements if (s, e) in own_regions]
