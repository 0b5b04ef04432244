"""``pq resolutions``: list, drop and merge the entries of the store (``refs/pq/resolutions``), and show its history.

Two clones that both record diverge: each store is a commit of its own.  ``merge`` brings another
store in: a remote's (``pq resolutions merge origin`` fetches its ``refs/pq/resolutions`` into
``refs/pq/remotes/origin/resolutions``, which then says what origin held when last fetched), or any
ref or commit (an old value ``log`` lists).  When the local store holds theirs already there is
nothing to do; when theirs descends from it and keeps each of its entries, a fast-forward; else a
commit with two parents (local, theirs) whose tree is the union of both (so an entry another clone
dropped or changed is not lost here either; ``scripts/refresh_pr.py`` merges origin's store the same
way).  With ``--theirs``, a store merged in before (an ancestor) whose entries differ from
the local ones where both hold a path gives a commit that takes its entries there (an entry the
local store dropped since stays dropped).  A path both hold with different contents is a clash: the local entry is kept
(``--theirs``: theirs), each clash is one warning line with both blob ids, and the other entry
stays reachable from the merge's parent, so nothing recorded is lost.  Every entry of the side
merged in is checked first (a damaged one is one error, nothing merged).

``drop`` commits the store without the entries named (by key, or a blob's id, or the path);
``pq undo`` puts them back.  ``log`` lists every value the ref held, from its reflog (see
:func:`patch_queue.series.rerere.keep_history`), each marked with whether the store holds it now.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from patch_queue.errors import QueueError
from patch_queue.git import command
from patch_queue.project.journal import Writes
from patch_queue.project.workspace import Workspace
from patch_queue.series import rerere
from patch_queue.series.stack import PERSON


@dataclass(frozen=True)
class Entry:
    kind: str  # region, edit, blob, or damaged
    key: str
    path: str
    blob: str
    patch: str = ""  # a region's or an edit's patch
    before: str = ""  # an edit's sha256s
    after: str = ""
    damaged: str = ""  # what is wrong with it


def do_list(ws: Workspace) -> list[Entry]:
    store = rerere.Store(ws.repo, damaged_ok=True)
    out = []
    entries = store.entries()
    for path, blob in sorted(store.ids.items()):
        key, kind = rerere.entry_key(path), rerere.entry_kind(path)
        if path in store.damaged:
            out.append(Entry("damaged", key, path, blob, damaged=store.damaged[path][1]))
        elif kind == "blob":
            out.append(Entry(kind, key, path, blob))
        else:
            e = entries[path]
            before, after = (str(e["before"]), str(e["after"])) if kind == "edit" else ("", "")
            out.append(Entry(kind, key, path, blob, str(e.get("patch", "")), before, after))
    return out


def do_drop(ws: Workspace, keys: Sequence[str]) -> tuple[list[str], str]:
    """Commit the store without the entries of ``keys``; the paths dropped and the store's old value."""
    store = rerere.Store(ws.repo, damaged_ok=True)
    if store.head is None:
        raise QueueError("this repository has no store: nothing to drop", path=rerere.REF)
    paths: list[str] = []
    for key in keys:
        found = [p for p in store.ids if p == key or rerere.entry_key(p) == key]
        if not found:
            raise QueueError(
                f"holds no entry {key!r} (`pq resolutions list` lists them); nothing was dropped",
                path=f"{rerere.REF} ({store.head})",
            )
        paths += [p for p in found if p not in paths]
    gone = sorted(p for p in store.ids if p not in paths and not ws.repo.has_object(store.ids[p]))
    if gone:
        raise QueueError(
            f"the object of {gone[0]} is missing from this repository, so no store without it can be written; "
            f"drop it too (`pq resolutions drop {rerere.entry_key(gone[0])}`)",
            path=f"{rerere.REF}:{gone[0]} ({store.ids[gone[0]]})",
        )
    kept = {p: b for p, b in store.ids.items() if p not in paths}
    message = "pq resolutions drop: " + " ".join(sorted(rerere.entry_key(p) for p in paths)) + "\n"
    new = ws.repo.commit(ws.repo.write_tree_ids(kept), [store.head], message, PERSON, PERSON)
    writes = Writes(ws, "resolutions drop", undoable=True)
    writes.move_refs({rerere.REF: (store.head, new)})
    writes.commit()
    return sorted(paths), store.head


@dataclass(frozen=True)
class Merged:
    how: str  # "none" (the remote has no store), "up to date", "fast-forward", "merge", or "theirs" (see do_merge)
    source: str  # what was merged: the scratch ref of a remote, or the ref or commit given
    theirs: str | None
    old: str | None
    new: str | None
    clashes: tuple[tuple[str, str, str], ...] = ()  # path, local blob, their blob


def scratch_ref(remote: str) -> str:
    """Where ``pq resolutions merge REMOTE`` keeps the remote's store as last fetched."""
    return f"{rerere.REMOTES}{remote}/resolutions"


def do_merge(ws: Workspace, source: str, *, theirs_wins: bool = False) -> Merged:
    repo = ws.repo
    label, theirs = _theirs(ws, source)
    local = repo.ref(rerere.REF)
    if theirs is None:
        return Merged("none", label, None, local, local)
    other = rerere.Store(repo, theirs, label=label)  # every entry checked before any is taken
    mine = rerere.Store(repo)
    clashes: list[tuple[str, str, str]] = []
    if local is not None and repo.is_ancestor(theirs, local):
        differ = {p: b for p, b in other.ids.items() if p in mine.ids and mine.ids[p] != b}
        if not (theirs_wins and differ):
            return Merged("up to date", label, theirs, local, local)
        # a store merged in before, where the local entries were kept: --theirs takes its entries now
        clashes = [(p, mine.ids[p], b) for p, b in sorted(differ.items())]
        message = f"pq resolutions merge --theirs {label}: its entries over the local ones\n"
        how, new = "theirs", repo.commit(repo.write_tree_ids({**mine.ids, **differ}), [local], message, PERSON, PERSON)
    elif local is None or (repo.is_ancestor(local, theirs) and all(other.ids.get(p) == b for p, b in mine.ids.items())):
        how, new = "fast-forward", theirs
    else:
        ids = dict(mine.ids)
        for path, blob in sorted(other.ids.items()):
            have = ids.get(path)
            if have is None:
                ids[path] = blob
            elif have != blob:
                clashes.append((path, have, blob))
                if theirs_wins:
                    ids[path] = blob
        kept = "theirs" if theirs_wins else "the local entry"
        message = f"pq resolutions merge {label}\n" + (
            f"\n{len(clashes)} clash(es), {kept} kept:\n" + "".join(f"{p} {a} {b}\n" for p, a, b in clashes)
            if clashes
            else ""
        )
        how, new = "merge", repo.commit(repo.write_tree_ids(ids), [local, theirs], message, PERSON, PERSON)
    writes = Writes(ws, "resolutions merge")
    writes.move_refs({rerere.REF: (local, new)})
    writes.commit()
    return Merged(how, label, theirs, local, new, tuple(clashes))


def _theirs(ws: Workspace, source: str) -> tuple[str, str | None]:
    """What ``source`` names: (the scratch ref a remote's store was fetched into, its value; None when the remote
    has none), or (the ref or commit, the commit)."""
    repo = ws.repo
    if source and not source.startswith("-") and repo.config(f"remote.{source}.url") is not None:
        scratch = scratch_ref(source)
        if not repo.valid_ref(scratch):
            raise QueueError(f"remote {source!r} has a name no ref can hold", path=f"remote.{source}")
        try:
            listed = repo.git("ls-remote", "--", source, rerere.REF)
        except command.GitFailed as exc:
            raise QueueError(f"cannot reach remote {source!r}: {exc.reason}; nothing was merged") from None
        if not listed.strip():
            return scratch, None
        try:
            repo.git("fetch", "-q", "--no-tags", "--", source, f"+{rerere.REF}:{scratch}")
        except command.GitFailed as exc:
            raise QueueError(f"cannot fetch {rerere.REF} of {source!r}: {exc.reason}; nothing was merged") from None
        found = repo.ref(scratch)
        assert found is not None
        return scratch, found
    try:
        out = repo.git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{source}^{{commit}}")
    except command.GitFailed:
        raise QueueError(
            f"{source!r} is neither a remote nor a ref or commit this repository has (`pq resolutions log` lists "
            "the stores refs/pq/resolutions held); nothing was merged"
        ) from None
    return source, out.decode().strip()


@dataclass(frozen=True)
class Logged:
    held: rerere.Held
    state: str  # "in the store", "not in the store", "gone" (its objects were pruned), "deleted"


def do_log(ws: Workspace) -> list[Logged]:
    repo = ws.repo
    head = repo.ref(rerere.REF)
    out = []
    for held in rerere.history(repo):
        if held.commit == "0" * 40:
            state = "deleted"
        elif repo.kind_of(held.commit) != "commit":
            state = "gone"
        elif head is not None and repo.kind_of(head) == "commit" and repo.is_ancestor(held.commit, head):
            state = "in the store"
        else:
            state = "not in the store"
        out.append(Logged(held, state))
    return out


def diverged(ws: Workspace) -> str | None:
    """Why the local store may lack what another clone recorded: it and a remote's, as last fetched
    (``refs/pq/remotes/REMOTE/resolutions``), have diverged, or the remote's holds more; None when neither."""
    repo = ws.repo
    local = repo.ref(rerere.REF)
    for ref, theirs in sorted(repo.refs(rerere.REMOTES).items()):
        remote = ref.removeprefix(rerere.REMOTES).removesuffix("/resolutions")
        if local is None or repo.kind_of(theirs) != "commit" or repo.kind_of(local) != "commit":
            continue
        if repo.is_ancestor(theirs, local):
            continue
        if repo.is_ancestor(local, theirs):
            return (
                f"{remote}'s store ({ref}, at {theirs[:12]}) holds entries refs/pq/resolutions (at {local[:12]}) "
                f"lacks: take them: `pq resolutions merge {shlex.quote(remote)}`"
            )
        return (
            f"refs/pq/resolutions (at {local[:12]}) and {remote}'s store ({ref}, at {theirs[:12]}) have diverged: "
            f"merge them: `pq resolutions merge {shlex.quote(remote)}`"
        )
    return None
