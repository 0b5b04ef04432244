"""The project repository: objects, commits, refs under ``refs/pq/``, diffs and file merges.

Only this package (``git/``) talks to pygit2 / git; everything else passes plain values (paths,
bytes, hex ids).

Invariants:
- The repository is the one git works on from the working directory: git itself finds it (``git rev-parse``,
  reading ``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_CEILING_DIRECTORIES``, ...) and pygit2 opens the git folder it
  names; every git pq runs on it is handed that folder and work tree (:attr:`ProjectRepo.env`), every other git
  none of the user's repository variables (:func:`patch_queue.git.command.environment`).
- Commits are deterministic: author and committer come from the caller with fixed times, so
  the same inputs give the same commit ids on every machine.
- Refs move only through :meth:`ProjectRepo.update_refs`, which checks every old value first
  and writes all refs or none.
- A repository whose object store cannot be written (a read-only mount, an immutable
  folder) is read as git reads it: the objects a command computes (trees, commits of the stack)
  go to a scratch object folder that lives as long as the process, so reading commands work there;
  moving a ref still fails, with one line.
- Every object written is checked to be in the store (on a full disk libgit2 reports a small one as
  written): one that is not, or a write that fails, is one line naming ``.git/objects``.
- Inside :meth:`ProjectRepo.batched` (a replay) the trees, commits and module texts written go to one pack file
  (:mod:`patch_queue.git.pack`), written before anything else reads the store and when the batch ends; the
  same objects, with the same ids, as loose ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypeVar

import pygit2
from pygit2 import ffi
from pygit2.enums import FileMode

from patch_queue import namespace
from patch_queue.errors import PqError, QueueError
from patch_queue.git import command, pack

REF_PREFIX = namespace.refs()
# objects are read as git reads them: inflated, not hashed again (libgit2 checks every object read against its
# id by default, which costs as much as the inflate; git leaves that to ``git fsck``)
pygit2.option(pygit2.enums.Option.ENABLE_STRICT_HASH_VERIFICATION, False)
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Person:
    name: str
    email: str
    time: int
    offset: int = 0  # minutes east of UTC

    def signature(self) -> pygit2.Signature:
        return pygit2.Signature(self.name, self.email, self.time, self.offset)


@dataclass(frozen=True)
class CommitInfo:
    id: str
    tree: str
    parents: tuple[str, ...]
    message: str
    author: Person


@dataclass(frozen=True)
class FileMerge:
    text: bytes
    clean: bool


class ProjectRepo:
    """The git repository that holds ``patches/``; the stack lives in its object store."""

    def __init__(self, path: Path) -> None:
        self.gitdir, common, self.workdir = _locate(path)
        try:
            self._repo = pygit2.Repository(str(self.gitdir))
        except pygit2.GitError as exc:  # what git opened and libgit2 does not (a format or extension it lacks)
            raise QueueError(f"libgit2 cannot open the repository git found: {exc}", path=str(self.gitdir)) from None
        self.main_gitdir = common if common != self.gitdir else None  # a linked work tree's (or GIT_COMMON_DIR's)
        # what names this repository to a git pq runs on it (command.environment() clears the user's variables)
        self.env = {**command.user_env(), "GIT_DIR": str(self.gitdir), "GIT_WORK_TREE": str(self.workdir)}
        # recently read or written blobs by id: a replay reads each text it wrote right back
        self._blobs: dict[pygit2.Oid, bytes] = {}
        self._oids: dict[bytes, pygit2.Oid] = {}
        # objects never change: a replay reads each commit and tree it wrote, or read, again
        self._commits: dict[str, CommitInfo] = {}
        self._trees: dict[str, list[tuple[str, pygit2.Oid]]] = {}
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        # inside batched(): the objects to write as one pack, and each path's last text in it (a delta's base)
        self._pack: pack.Pack | None = None
        self._bases: dict[str, tuple[bytes, bytes]] = {}
        if not os.access(self.objects, os.W_OK):
            # written first (the highest priority): computed objects never need the real store
            self._scratch = tempfile.TemporaryDirectory(prefix="pq-objects-")
            self._repo.odb.add_backend(pygit2.OdbBackendLoose(self._scratch.name, -1, False), 1000)

    _BLOB_CACHE = 32
    _BLOB_LARGE = 4 << 20

    def _keep(self, cache: dict[K, V], key: K, value: V, size: int) -> None:
        """Remember ``key`` in a small cache of recent blobs (of a runner module's size, not a huge one),
        forgetting the oldest one when it is full."""
        if size > self._BLOB_LARGE:
            return
        if len(cache) >= self._BLOB_CACHE:
            del cache[next(iter(cache))]
        cache[key] = value

    def _write_blob(self, data: bytes) -> pygit2.Oid:
        """The blob of ``data``, written only when the object store lacks it (hashing is 3x cheaper than
        compressing, and a replay writes the same module texts again and again)."""
        oid = self._oids.get(data)
        if oid is None:
            digest = hashlib.sha1(b"blob %d\0" % len(data))  # git's blob id (pygit2.hash, at a third of the time)
            digest.update(data)
            oid = pygit2.Oid(raw=digest.digest())
            if oid not in self._repo.odb:
                oid = self._stored(lambda: self._repo.create_blob(data))
            self._keep(self._oids, data, oid, len(data))
        return oid

    def _stored(self, write: Callable[[], pygit2.Oid]) -> pygit2.Oid:
        """The object ``write`` stored, checked: libgit2 reports a failed write of a small object on a full disk
        as a success (and a failed blob as "no error"), so what it returns must be in the store."""
        try:
            oid = write()
        except (OSError, pygit2.GitError) as exc:
            why = str(exc)
        else:
            if oid in self._repo.odb:
                return oid
            why = f"{oid} was not kept"
        self._unwritten(why)

    def _unwritten(self, why: str) -> NoReturn:
        objects = self.objects
        shown = objects.relative_to(self.workdir).as_posix() if objects.is_relative_to(self.workdir) else str(objects)
        raise QueueError(
            f"cannot be written ({why}): a full disk or a file size limit; nothing was changed: "
            "make room and run the command again",
            path=shown,
        )

    def _blob_data(self, oid: pygit2.Oid) -> bytes:
        data = self._blobs.get(oid)
        if data is None:
            if self._pack is not None and oid.raw in self._pack.where:
                self._flush()
            # the object database's raw read (as git reads it): one inflate, no Blob object in between;
            # anything else than a blob is peeled as before (and refused there)
            kind, raw = self._repo.odb.read(oid)
            data = raw if kind == pygit2.enums.ObjectType.BLOB else self._repo[oid].peel(pygit2.Blob).data
            self._keep(self._blobs, oid, data, len(data))
        return data

    # ---- a batch of objects written as one pack ------------------------------------------------
    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """Trees, commits and texts written inside go to one pack file (:mod:`patch_queue.git.pack`), each text
        a delta of the one written before it at its path: written before any other use of the store reads them
        (:meth:`_flush`) and at the end.  A read-only store (objects in a scratch folder) writes as before."""
        if self._pack is not None or self._scratch is not None:
            yield
            return
        self._pack = pack.Pack()
        try:
            yield
        except BaseException:
            with contextlib.suppress(QueueError):  # the first error is the one to show
                self._flush()
            raise
        else:
            self._flush()
        finally:
            self._pack = None
            self._bases.clear()

    def _flush(self) -> None:
        """The objects of the batch written (one pack) and checked to be in the store; the batch goes on."""
        if self._pack is None or not len(self._pack):
            return
        written, self._pack = self._pack, pack.Pack()
        self._bases.clear()
        folder = self.objects / "pack"
        try:
            written.write(folder)
        except OSError as exc:
            self._unwritten(f"failed to write out file: {exc.strerror or exc}")
        for raw in written.where:
            if pygit2.Oid(raw=raw) not in self._repo.odb:
                self._unwritten(f"{pygit2.Oid(raw=raw)} was not kept")

    def _pending(self, kind: str, data: bytes, base: tuple[bytes, bytes] | None = None) -> bytes:
        """The raw id of ``data`` as an object of ``kind``, added to the batch unless the store has it."""
        assert self._pack is not None
        raw = pack.object_id(kind, data)
        if raw not in self._pack.where and pygit2.Oid(raw=raw) not in self._repo.odb:
            self._pack.add(kind, raw, data, base)
        return raw

    def _batched_tree(self, files: dict[str, bytes]) -> str | None:
        """:meth:`write_tree` inside a batch: the trees built here, as libgit2 builds them from an index; None
        when a path is not a plain one (then libgit2 decides)."""
        root: dict[str, object] = {}
        for path in files:
            *folders, name = parts = path.split("/")
            node = root
            for folder in folders:
                child = node.setdefault(folder, {})
                if not isinstance(child, dict):
                    return None
                node = child
            if "" in parts or "." in parts or ".." in parts or name in node or "\0" in path:
                return None
            node[name] = path
        entries: list[tuple[str, pygit2.Oid]] = []
        for path in sorted(files):  # an index's order (paths by their UTF-8 bytes)
            data = files[path]
            known = self._oids.get(data)  # written (to the store or the batch) a moment ago
            oid = known if known is not None else pygit2.Oid(raw=self._pending("blob", data, self._bases.get(path)))
            if len(data) <= self._BLOB_LARGE:
                self._bases[path] = (oid.raw, data)
            self._keep(self._blobs, oid, data, len(data))
            if known is None:
                self._keep(self._oids, data, oid, len(data))
            entries.append((path, oid))
        ids = dict(entries)

        def tree(node: dict[str, object]) -> bytes:
            items = []
            for name, value in node.items():
                key = name.encode()
                if isinstance(value, dict):
                    items.append((key + b"/", b"40000 " + key + b"\0" + tree(value)))
                else:
                    items.append((key, b"100644 " + key + b"\0" + ids[str(value)].raw))
            items.sort()  # git's order: a folder's name as if it ended with a slash
            return self._pending("tree", b"".join(entry for _key, entry in items))

        made = str(pygit2.Oid(raw=tree(root)))
        self._trees[made] = entries
        return made

    def _batched_commit(
        self, tree: str, parents: list[str], message: str, author: pygit2.Signature, committer: pygit2.Signature
    ) -> str:
        """:meth:`commit` inside a batch: the object libgit2's ``git_commit_create`` writes, built here."""

        def person(sig: pygit2.Signature) -> bytes:
            offset = sig.offset
            sign = "-" if offset < 0 else "+"
            return b"%s <%s> %d %s%02d%02d" % (
                sig.raw_name,
                sig.raw_email,
                sig.time,
                sign.encode(),
                abs(offset) // 60,
                abs(offset) % 60,
            )

        head = [b"tree %s\n" % tree.encode(), *(b"parent %s\n" % p.encode() for p in parents)]
        head += [b"author " + person(author) + b"\n", b"committer " + person(committer) + b"\n", b"\n"]
        oid = str(pygit2.Oid(raw=self._pending("commit", b"".join(head) + message.encode("utf-8"))))
        self._commits[oid] = CommitInfo(
            id=oid,
            tree=tree,
            parents=tuple(parents),
            message=message,
            author=Person(author.name, author.email, author.time, author.offset),
        )
        return oid

    @property
    def objects(self) -> Path:
        """The object store (a linked work tree's is the main repository's)."""
        return (self.main_gitdir or self.gitdir) / "objects"

    # ---- the user's tools ------------------------------------------------------------------
    def git(self, *args: str) -> bytes:
        """stdout of ``git args...`` on this repository (:func:`command.run`): the repository pq found, whatever
        the working directory."""
        return command.run(self.workdir, *args, env=self.env)

    def config(self, key: str) -> str | None:
        """The value of a git configuration ``key`` as git reads it (repository, global, system), or None."""
        try:
            return self.git("config", "--get", key).decode("utf-8").strip() or None
        except command.GitFailed:
            return None

    def author(self) -> Person:
        """Who git would write as the author of a commit made here now (``git var GIT_AUTHOR_IDENT``: user.name
        and user.email of the configuration, GIT_AUTHOR_NAME/EMAIL/DATE); one line with git's reason when git
        knows no identity."""
        try:
            ident = self.git("var", "GIT_AUTHOR_IDENT").decode("utf-8", "replace").strip()
        except command.GitFailed as exc:
            raise QueueError(
                f"git knows no author to write ({exc.reason}): `git config user.name NAME` and "
                "`git config user.email EMAIL`, or set GIT_AUTHOR_NAME and GIT_AUTHOR_EMAIL"
            ) from None
        m = re.fullmatch(r"(.*) <([^<>]*)> (-?\d+) ([+-])(\d\d)(\d\d)", ident)
        if m is None:
            raise QueueError(f"git var GIT_AUTHOR_IDENT gives {ident!r}, not 'Name <email> TIME +ZONE'")
        offset = (int(m.group(5)) * 60 + int(m.group(6))) * (-1 if m.group(4) == "-" else 1)
        return Person(m.group(1), m.group(2), int(m.group(3)), offset)

    def mergetool(self, folder: Path, path: str, base: bytes, local: bytes, remote: bytes, tool: str | None) -> int:
        """``git mergetool`` on ``folder/path`` as if a merge had left it conflicted with these three sides: a
        scratch index holds them as stages 1-3 and ``folder`` is the work tree (so the repository's ignore
        rules and index stay out of it), and git's own mergetool runs the user's tool (``merge.tool`` or
        ``tool``; built-in or ``mergetool.<name>.cmd``) with its usual BASE, LOCAL, REMOTE and MERGED files.
        Returns git's exit code."""
        self._flush()  # git and libgit2 read the store
        sides = ((1, base), (2, local), (3, remote))
        stages = "".join(f"100644 {self.write_blob(data)} {n}\t{path}\n" for n, data in sides)
        with tempfile.TemporaryDirectory(dir=self.gitdir, prefix="pq-mergetool-") as scratch:
            env = {**self.env, "GIT_WORK_TREE": str(folder), "GIT_INDEX_FILE": f"{scratch}/index"}
            command.run_fed(folder, "update-index", "--index-info", env=env, input=stages.encode())
            args = ["-c", "mergetool.keepBackup=false", "mergetool", "--no-prompt"]
            args += [f"--tool={tool}"] if tool else []
            return command.run_interactive(folder, *args, "--", path, env=env)

    # ---- objects -------------------------------------------------------------------------
    def write_blob(self, data: bytes) -> str:
        self._flush()  # git and libgit2 read the store
        return str(self._write_blob(data))

    def read_blob(self, oid: str) -> bytes:
        return self._blob_data(pygit2.Oid(hex=oid))

    def tree_of_blobs(self, blobs: list[str]) -> str:
        """A flat tree whose entries are the given blobs (named by their ids): keeps them reachable."""
        self._flush()  # git and libgit2 read the store
        tb = self._repo.TreeBuilder()
        for oid in sorted(set(blobs)):
            tb.insert(oid, pygit2.Oid(hex=oid), FileMode.BLOB)
        return str(self._stored(tb.write))

    def kind_of(self, oid: str) -> str | None:
        """The type of object ``oid`` ("commit", "tree", "blob", "tag"), None when the repository lacks it."""
        self._flush()  # git and libgit2 read the store
        try:
            return str(self._repo[oid].type_str)
        except (KeyError, ValueError):
            return None

    def has_object(self, oid: str) -> bool:
        self._flush()  # git and libgit2 read the store
        try:
            self._repo[oid]
        except (KeyError, ValueError):
            return False
        return True

    def write_tree(self, files: dict[str, bytes]) -> str:
        """A tree holding exactly ``files`` (slash-separated paths), as regular files."""
        if self._pack is not None and (made := self._batched_tree(files)) is not None:
            return made
        self._flush()
        index = pygit2.Index()
        for path, data in files.items():
            oid = self._write_blob(data)
            self._keep(self._blobs, oid, data, len(data))
            index.add(pygit2.IndexEntry(path, oid, FileMode.BLOB))
        return str(self._stored(lambda: index.write_tree(self._repo)))

    def read_tree(self, oid: str) -> dict[str, bytes]:
        entries = self._trees.get(oid)
        if entries is None:
            index = pygit2.Index()
            index.read_tree(self._repo[oid].peel(pygit2.Tree))
            entries = self._trees[oid] = [(entry.path, entry.id) for entry in index]
        return {path: self._blob_data(blob) for path, blob in entries}

    def tree_ids(self, oid: str) -> dict[str, str]:
        """The blob id of every file of tree ``oid`` (slash-separated paths), without reading the blobs."""
        self._flush()  # git and libgit2 read the store
        index = pygit2.Index()
        index.read_tree(self._repo[oid].peel(pygit2.Tree))
        return {entry.path: str(entry.id) for entry in index}

    def write_tree_ids(self, ids: dict[str, str]) -> str:
        """A tree holding exactly the blobs ``ids`` (slash-separated path -> blob id), as regular files."""
        self._flush()  # git and libgit2 read the store
        index = pygit2.Index()
        for path, oid in ids.items():
            index.add(pygit2.IndexEntry(path, pygit2.Oid(hex=oid), FileMode.BLOB))
        return str(index.write_tree(self._repo))

    def is_ancestor(self, older: str, newer: str) -> bool:
        """Whether commit ``older`` is ``newer`` or one of its ancestors."""
        self._flush()  # git and libgit2 read the store
        return older == newer or bool(self._repo.descendant_of(newer, older))

    def commit(self, tree: str, parents: list[str], message: str, author: Person, committer: Person) -> str:
        signatures = author.signature(), committer.signature()  # a bad name is its own error, not the store's
        if self._pack is not None:
            return self._batched_commit(tree, parents, message, *signatures)
        oid = self._stored(
            lambda: self._repo.create_commit(
                None,
                *signatures,
                message,
                pygit2.Oid(hex=tree),
                [pygit2.Oid(hex=p) for p in parents],
            )
        )
        return str(oid)

    def commit_info(self, oid: str) -> CommitInfo:
        info = self._commits.get(oid)
        if info is None:
            c = self._repo[oid].peel(pygit2.Commit)
            a = c.author
            info = CommitInfo(
                id=str(c.id),
                tree=str(c.tree_id),
                parents=tuple(str(p) for p in c.parent_ids),
                message=c.message,
                author=Person(a.name, a.email, a.time, a.offset),
            )
            self._commits[oid] = info
        return info

    # ---- refs ----------------------------------------------------------------------------
    def ref(self, name: str) -> str | None:
        try:
            return str(self._repo.references[name].target)
        except KeyError:
            return None

    @staticmethod
    def valid_ref(name: str) -> bool:
        """Whether git accepts ``name`` as a ref name (``git check-ref-format``)."""
        return bool(pygit2.reference_is_valid_name(name))

    def refs(self, prefix: str = REF_PREFIX) -> dict[str, str]:
        return {r: str(self._repo.references[r].target) for r in sorted(self._repo.references) if r.startswith(prefix)}

    def update_refs(self, updates: dict[str, tuple[str | None, str | None]], message: str) -> None:
        """Move refs from their expected old values to new ones (None: absent / delete).

        A compare-and-swap in one libgit2 reference transaction: every ref is locked first (git's
        ``<ref>.lock`` files, which git itself honours), then each current value is compared with
        the expected old one while the locks are held, and only then are all of them written; a
        ref that changed underneath is an error and nothing moves.
        """
        self._flush()  # git and libgit2 read the store
        for name in updates:
            if not name.startswith(REF_PREFIX):
                raise PqError(f"refusing to move {name}: pq only owns {REF_PREFIX}")
        if not updates:
            return
        try:
            with self._repo.transaction() as tx:
                for name in sorted(updates):
                    try:
                        tx.lock_ref(name)
                    except pygit2.GitError:
                        raise QueueError(
                            f"{name} is locked by another git command (or one that was killed); "
                            f"retry, or remove {name}.lock if no git command is running",
                            path=str(self.gitdir / name),
                        ) from None
                for name, (old, _new) in sorted(updates.items()):
                    current = self.ref(name)
                    if current != old:
                        raise QueueError(
                            f"{name} moved underneath pq (expected {old}, found {current}); nothing was moved, "
                            "retry the command",
                            path=str(self.gitdir / name),
                        )
                for name, (old, new) in sorted(updates.items()):
                    if new is not None:
                        tx.set_target(name, pygit2.Oid(hex=new), message=message)
                    elif old is not None:
                        tx.remove(name)
        except pygit2.GitError as exc:
            raise QueueError(f"could not move {', '.join(sorted(updates))}: {exc}", path=str(self.gitdir)) from None

    @staticmethod
    def blob_id(data: bytes) -> str:
        """The id ``data`` has (or would have) as a blob, without writing it."""
        return str(pygit2.hash(data))

    # ---- diffs and merges ----------------------------------------------------------------
    def format_patches(self, commits: list[str]) -> dict[str, bytes]:
        """What ``git format-patch`` writes for each commit (against its first parent), from one git run.

        git reads this repository's objects through a scratch git directory and no configuration at
        all (system, global, repository, attributes, mailmap), so the text depends on the commits
        alone.  The ``index`` lines of text files carry 7-digit ids: git would lengthen one that is
        ambiguous among the objects of this clone, and a patch must read the same in every clone.
        """
        self._flush()  # git and libgit2 read the store
        ids = list(dict.fromkeys(commits))
        if not ids:
            return {}
        objects = self.objects
        with tempfile.TemporaryDirectory(prefix="pq-format-") as scratch:
            (Path(scratch) / "refs").mkdir()
            (Path(scratch) / "HEAD").write_text("ref: refs/heads/main\n")
            (Path(scratch) / "config").write_text("[core]\n\tbare = true\n")
            env = {
                "GIT_DIR": scratch,
                "GIT_OBJECT_DIRECTORY": str(objects),
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_CONFIG_PARAMETERS": "",
                "GIT_CONFIG_COUNT": "0",
                "HOME": scratch,
                "XDG_CONFIG_HOME": scratch,
            }
            if self._scratch is not None:  # the objects computed in a read-only repository
                env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = self._scratch.name
            # one commit given alone would mean "every commit since"; --no-walk with the count means just these;
            # --always writes a commit that changes nothing too (an empty patch: header and message, no diff)
            args = [
                "--always",
                "--no-signature",
                "--no-numbered",
                "--full-index",
                "--no-walk=unsorted",
                f"--max-count={len(ids)}",
            ]
            out = command.run(scratch, "format-patch", "--stdout", *args, *ids, env=env)
        starts: dict[int, str] = {}  # where each patch starts, by its "From <id>" line
        for m in _MBOX_FROM.finditer(out):
            oid = m.group(1).decode()
            if oid in ids and oid not in starts.values():
                starts[m.start()] = oid
        at = list(starts)  # in the order of the text
        if len(at) != len(ids) or any(out[a - 2 : a] != b"\n\n" for a in at[1:]):  # a blank line between two
            raise PqError(f"git format-patch wrote {len(at)} patches for {len(ids)} commits", path=str(self.gitdir))
        return {starts[a]: _short_ids(out[a:b]) for a, b in zip(at, [*(a - 1 for a in at[1:]), len(out)], strict=True)}

    def merge_file(
        self, base: bytes, ours: bytes, theirs: bytes, *, labels: tuple[str, str, str], path: str
    ) -> FileMerge:
        """Three-way merge of one file in memory (libgit2's xdiff), diff3-style markers on conflict.

        ``labels`` are (base, ours, theirs).  pygit2 does not expose the merge options, so the
        libgit2 call is made through pygit2's own cffi binding.
        """
        self._flush()  # git and libgit2 read the store
        # each C entry lives as long as its companion in the pair
        converted = [pygit2.IndexEntry(path, self._write_blob(d), FileMode.BLOB)._to_c() for d in (base, ours, theirs)]
        opts = ffi.new("git_merge_file_options *")
        opts.version = 1
        c_labels = [ffi.new("char[]", label.encode()) for label in labels]
        opts.ancestor_label, opts.our_label, opts.their_label = c_labels
        opts.flags = int(pygit2.enums.MergeFileFlag.STYLE_DIFF3)
        opts.marker_size = 7
        result = ffi.new("git_merge_file_result *")
        err = pygit2.C.git_merge_file_from_index(result, self._repo._repo, *(c for c, _ in converted), opts)
        if err < 0:
            raise PqError(f"libgit2 merge of {path} failed ({err})")
        try:
            text = bytes(ffi.buffer(result.ptr, result.len)) if result.ptr != ffi.NULL else b""
            clean = bool(result.automergeable)
        finally:
            pygit2.C.git_merge_file_result_free(result)
        return FileMerge(text, clean)


_MBOX_FROM = re.compile(rb"^From ([0-9a-f]{40,64}) Mon Sep 17 00:00:00 2001$", re.MULTILINE)
_FULL_INDEX = re.compile(rb"^(index [0-9a-f]{7})[0-9a-f]*\.\.([0-9a-f]{7})[0-9a-f]*", re.MULTILINE)


def _short_ids(patch: bytes) -> bytes:
    """The ``index`` lines of a ``--full-index`` patch cut to 7-digit ids, except for binary files (as git
    writes them by default).  A line of the diff that starts with ``index`` can only be such a header."""
    head, *files = patch.split(b"\ndiff --git ")
    files = [f if b"\nGIT binary patch\n" in f else _FULL_INDEX.sub(rb"\1..\2", f) for f in files]
    return b"\ndiff --git ".join([head, *files])


def _locate(here: Path) -> tuple[Path, Path, Path]:
    """The git folder, the common git folder and the work tree of the repository git works on in ``here``, as
    git finds it: it reads ``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_COMMON_DIR``, ``GIT_CEILING_DIRECTORIES``,
    ``core.worktree`` and ``safe.directory`` as for any command (libgit2 reads none of the variables, so pygit2
    opens the folder git names).  pq keeps the series' objects in the repository's store: a
    ``GIT_OBJECT_DIRECTORY`` naming another one is refused (``GIT_INDEX_FILE`` names nothing pq reads)."""
    asked = ("--absolute-git-dir", "--git-common-dir", "--git-path", "objects", "--is-bare-repository", "--show-cdup")
    try:
        out = command.run(here, "rev-parse", *asked, env=command.user_env()).decode("utf-8", "surrogateescape")
    except command.GitFailed as exc:
        if exc.reason.startswith("not a git repository") and "GIT_DIR" not in os.environ:
            raise QueueError("not inside a git repository; run `git init` first", path=str(here)) from None
        raise QueueError(f"git finds no repository to work on here: {exc.reason}", path=str(here)) from None
    gitdir, common, objects, bare, *cdup = out.split("\n")[:-1]
    gitdir_path, common_path = Path(gitdir).resolve(), (here / common).resolve()
    if bare == "true":
        raise QueueError("a bare repository has no work tree for patches/", path=gitdir)
    if not cdup:  # in the git folder: git works on no work tree from here either
        raise QueueError("is inside the git folder, not in a work tree: run pq in the work tree", path=str(here))
    store = (here / objects).resolve()
    if store != common_path / "objects":
        raise QueueError(
            f"is not the repository's object store ({common_path / 'objects'}): pq keeps the series' objects there; "
            "unset GIT_OBJECT_DIRECTORY (nothing was changed)",
            path=str(store),
        )
    return gitdir_path, common_path, (here / cdup[0]).resolve()
