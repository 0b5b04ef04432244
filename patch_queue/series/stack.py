"""The git-native stack: a base commit (vendored upstream files + projections) and one commit a patch.

Tree layout of every stack commit::

    .pq-upstream/<upstream path>   the vendored upstream files, byte for byte
    <module>.py                    the output modules (projections in the base commit)

Refs (all under ``refs/pq/``): ``base`` (the base commit), ``top`` (the last applied patch, or
the base when none is applied) and ``patches/<name>`` (every patch's commit, applied or not).
``patches/`` is the exported form of the stack; :func:`import_series` and :func:`export_patch`
are inverses, byte for byte, because commits are deterministic (author = committer, fixed
times taken from the patch's Date header).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_tz
from typing import TypedDict

from patch_queue import namespace
from patch_queue.errors import PatchError, PqError, SourceError
from patch_queue.git.repo import CommitInfo, Person, ProjectRepo
from patch_queue.merge import symbols
from patch_queue.series import fmt, patchfile
from patch_queue.series.queue import BODIES, Queue
from patch_queue.sources import cache

VENDOR = ".pq-upstream/"
BASE_PERSON_NAME = "pq"
BASE_PERSON_EMAIL = "pq@localhost"
PERSON = Person(BASE_PERSON_NAME, BASE_PERSON_EMAIL, 0, 0)  # the author of pq's own commits
REF_BASE = namespace.refs() + "base"
REF_TOP = namespace.refs() + "top"
REF_PATCHES = namespace.refs() + "patches/"
_HEX40 = re.compile(r"[0-9a-f]{40}")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Projection:
    files: dict[str, bytes]  # module path -> projected text; vendored files under VENDOR
    missing: tuple[str, ...]  # "module: Symbol" carried symbols not found upstream


class _Kept(TypedDict):
    """A projection as the download cache keeps it: each module's text, in module order, and what was missing."""

    files: dict[str, str]
    missing: tuple[str, ...]


def project_modules(queue: Queue, read_upstream: Callable[[str], bytes], *, label: str) -> Projection:
    """Vendored files and the projected base text of every module that carries upstream symbols.

    The projected texts are kept in the download cache by their inputs (the vendored files, the
    modules' carried symbols, the formatter settings, the formatter binary and pq's code).
    """
    vendored = {path: read_upstream(path) for path in queue.upstream_paths()}
    key = cache.derived_key(
        fmt.tool_stamp(),
        queue.formatter,
        str(queue.line_length),
        json.dumps([[m.path, m.upstream, list(m.symbols)] for m in queue.modules]),
        *(part for path, data in sorted(vendored.items()) for part in (path, data)),
    )
    hit = cache.derived_json("projection", key, _Kept)
    if hit is not None and set(hit[0]["files"]) <= {m.path for m in queue.modules}:  # the modules, no other path
        modules = {p: t.encode("utf-8") for p, t in hit[0]["files"].items()}
        return Projection({**{VENDOR + p: d for p, d in vendored.items()}, **modules}, hit[0]["missing"])
    projection = _project(queue, vendored, label=label)
    modules_text = {p: d.decode("utf-8") for p, d in projection.files.items() if not p.startswith(VENDOR)}
    entry = {"files": modules_text, "missing": list(projection.missing)}  # files in module order, as computed
    cache.derived_put("projection", key, json.dumps(entry).encode())
    return projection


def _project(queue: Queue, vendored: dict[str, bytes], *, label: str) -> Projection:
    files = {VENDOR + path: data for path, data in vendored.items()}
    parsed: dict[str, dict[str, symbols.Symbol]] = {}
    for path, data in vendored.items():
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SourceError(
                f"upstream file is not UTF-8 at byte {exc.start} ({label})",
                path=path,
                line=data.count(b"\n", 0, exc.start) + 1,
            ) from None
        try:
            parsed[path] = symbols.symbols_ast(text, path=path)
        except PqError as exc:
            raise SourceError(f"{exc.message} ({label})", path=path, line=exc.line) from None
    missing: list[str] = []
    carried: list[tuple[str, list[symbols.Symbol]]] = []
    for m in queue.modules:
        if not m.upstream:
            continue
        # a carried class gone as a whole is a different upstream, not a removed method to port
        gone = sorted({s.split(".")[0] for s in m.symbols if "." in s} - set(parsed[m.upstream]))
        if gone:
            raise SourceError(
                f"has no class {', '.join(gone)}, whose methods {m.path} carries ({label}); "
                f"point --to at a {queue.spec.upstream_dist} that has it, or edit the [[module]] in queue.toml",
                path=m.upstream,
            )
        upstream = parsed[m.upstream]
        missing += [f"{m.path}: {name}" for name in m.symbols if name not in upstream]
        carried.append((m.path, [upstream[name] for name in m.symbols if name in upstream]))
    every = [s for _path, found in carried for s in found]  # one formatter run for every module
    laid_out = iter(fmt.format_symbols(every, formatter=queue.formatter, line_length=queue.line_length))
    for path, found in carried:
        files[path] = symbols.project([next(laid_out) for _s in found]).encode("utf-8")
    return Projection(files, tuple(missing))


def parse_person(author: str, date: str, *, path: str) -> Person:
    if "<" not in author or not author.endswith(">"):
        raise PatchError(f"From: header {author!r} is not 'Name <email>'", path=path)
    name, email = author[:-1].split("<", 1)
    parsed = parsedate_tz(date)
    if parsed is None:
        raise PatchError(f"Date: header {date!r} is not an RFC 2822 date", path=path)
    offset_s = parsed[9] or 0
    utc = datetime(*parsed[:6], tzinfo=timezone(timedelta(seconds=offset_s)))
    return Person(name.strip(), email.strip(), int(utc.timestamp()), offset_s // 60)


def message_of(p: patchfile.PatchFile) -> str:
    return p.subject + "\n" + (("\n" + p.description + "\n") if p.description else "")


def base_commit(repo: ProjectRepo, queue: Queue, projection: Projection) -> str:
    """The deterministic base commit for a projection (depends only on its content and pin)."""
    tree = repo.write_tree(projection.files)
    up = queue.upstream
    lines = [f"pq base: {up.name} {up.public_commit or up.label}", ""]
    lines += [
        f"{path[len(VENDOR) :]} sha256:{sha256(data)}"
        for path, data in sorted(projection.files.items())
        if path.startswith(VENDOR)
    ]
    return repo.commit(tree, [], "\n".join(lines) + "\n", PERSON, PERSON)


def commit_patch(repo: ProjectRepo, parent: str, p: patchfile.PatchFile, queue: Queue, *, path: str) -> str:
    """Apply one patch on ``parent`` (exactly, no fuzz) and commit the result."""
    info = repo.commit_info(parent)
    files = repo.read_tree(info.tree)
    diff = p.parsed(path)
    touched = diff.touched()
    for name in touched:
        if queue.module(name) is None:
            raise PatchError(f"touches {name!r}, which is not an output module listed in queue.toml", path=path)
    changes = diff.apply({k: v for k, v in files.items() if k in touched}, patch_path=path)
    for name, data in changes.items():
        if data is None:
            files.pop(name, None)
        else:
            files[name] = data
    person = parse_person(p.author, p.date, path=path)
    return repo.commit(repo.write_tree(files), [parent], message_of(p), person, person)


def commit_files(repo: ProjectRepo, parent: str, files: dict[str, bytes], like: CommitInfo) -> str:
    """A commit of ``files`` on ``parent`` carrying the message and author of ``like``."""
    return repo.commit(repo.write_tree(files), [parent], like.message, like.author, like.author)


def export_patches(repo: ProjectRepo, commits: list[str], *, bodies: int = BODIES) -> list[bytes]:
    """The patch file of each commit (against its first parent), as ``git format-patch`` writes it: one git
    run for them all.  Refuses (PatchError) a commit ``git am`` would not read back as it is.  A commit that
    changes nothing is an empty patch: the mail header and the message, no diff (``format-patch --always``;
    ``git am --allow-empty`` reads it back).  ``bodies``: the form (see :mod:`patch_queue.series.queue`): 2 writes
    the first line with a zero id, as ``--zero-commit`` does, 1 with the commit's."""
    blank = set()
    for commit in commits:
        info = repo.commit_info(commit)
        subject, description = patchfile.split_message(info.message)
        patchfile.check_message(subject, description, f"{info.author.name} <{info.author.email}>")
        if not subject:
            blank.add(commit)
    texts = repo.format_patches(commits)
    # For a blank message pq's own writer, before git wrote the patches, put a space after "[PATCH]": kept,
    # since a lineage holds the sha256 of every body it wrote.
    old = b"\nSubject: [PATCH]\n", b"\nSubject: [PATCH] \n"
    out = [texts[c].replace(*old, 1) if c in blank else texts[c] for c in commits]
    return out if bodies == 1 else [_zero_from(c, text) for c, text in zip(commits, out, strict=True)]


def _zero_from(commit: str, body: bytes) -> bytes:
    """``body`` (form 1, its first line ``From <commit>``) in form 2: that id all zeros, as ``--zero-commit``."""
    return b"From " + b"0" * len(commit) + body[5 + len(commit) :]


def body_forms(repo: ProjectRepo, commit: str) -> list[bytes]:
    """The patch file of ``commit`` in every form (pq's first, see :mod:`patch_queue.series.queue`), one git run."""
    legacy = export_patch(repo, commit, bodies=1)
    return [_zero_from(commit, legacy), legacy]


def export_patch(repo: ProjectRepo, commit: str, *, bodies: int = BODIES) -> bytes:
    return export_patches(repo, [commit], bodies=bodies)[0]


def export_series(repo: ProjectRepo, patches: list[tuple[str, str]], *, bodies: int = BODIES) -> dict[str, bytes]:
    """The patch file of each (name, commit), by name, from one git run."""
    commits = [c for _n, c in patches]
    return dict(zip([n for n, _c in patches], export_patches(repo, commits, bodies=bodies), strict=True))


def import_series(
    repo: ProjectRepo, queue: Queue, base: str, patches: list[tuple[str, bytes]]
) -> list[tuple[str, str]]:
    """Commit every patch in order on ``base``; returns (name, commit) pairs.

    Every command loads the stack this way, and parsing and applying the bodies was most of ``pq status``'s
    own work: a patch's commit is kept in the download cache by its inputs (the parent commit, the body, the
    queue's modules and pq's code) and reused while the repository holds it.
    """
    modules = [m.path for m in queue.modules]
    out: list[tuple[str, str]] = []
    parent = base
    for name, data in patches:
        key = cache.derived_key(_import_code(), parent, data, *modules)
        kept = (cache.derived_get("commit", key) or b"").decode("ascii", "replace")
        if _HEX40.fullmatch(kept) and repo.kind_of(kept) == "commit" and repo.commit_info(kept).parents == (parent,):
            parent = kept
        else:
            p = patchfile.parse(data, path=f"patches/{name}")
            parent = commit_patch(repo, parent, p, queue, path=f"patches/{name}")
            cache.derived_put("commit", key, parent.encode("ascii"))
        out.append((name, parent))
    return out


@functools.cache
def _import_code() -> str:
    """The stamp of the code a patch's commit comes from (:func:`import_series`): the parser, the exact apply,
    this module and the object writer."""
    return cache.code_stamp("series/stack.py", "series/patchfile.py", "series/diffs.py", "git/repo.py", "git/pack.py")
