"""Name the upstream commits that caused a rebase conflict.

A conflict region has a text in the old upstream (``before``) and a text in the new one (``after``).
The upstream commit that made the region what it is now is the first commit, between the old base and
the new one, whose file no longer contains ``before`` (a change or a deletion) or first contains
``after`` (an insertion).  Only the commits that changed the file are candidates, and the search is a
bisection over them, so it reads a logarithmic number of file versions.

The texts are compared in a normalised form that survives reformatting (pq formats code with
``ruff format``, upstream used yapf): all whitespace, commas, backslashes, parentheses and quotes
dropped (ruff adds and removes parentheses and joins implicitly concatenated strings).
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import json
import re
from dataclasses import replace
from datetime import UTC, datetime

from patch_queue.errors import PqError
from patch_queue.git.remote import UpstreamGit
from patch_queue.merge.conflict import Conflict, Culprit
from patch_queue.progress import Progress
from patch_queue.series.queue import UpstreamPin
from patch_queue.sources.cache import code_stamp, derived_get, derived_json, derived_key, derived_put
from patch_queue.sources.snapshot import open_git, upstream_git_location
from patch_queue.spec import QueueSpec

_PR = re.compile(r"\(#(\d+)\)")
_DROPPED = b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f ,\\()'\""


def normalize(text: str | bytes) -> bytes:
    """The comparison form of code (UTF-8): no ASCII whitespace, commas, backslashes, parentheses or quotes."""
    # bytes.translate deletes in one C pass: ~0.5 ms for the 320 KB runner, 10x faster than str methods.
    # Non-ASCII spaces are kept: code has none outside strings and comments, which stay comparable.
    data = text.encode("utf-8") if isinstance(text, str) else text
    return data.translate(None, _DROPPED)


def parse_pr(subject: str) -> int | None:
    """The pull-request number of a squash-merge subject, ``"... (#1234)"`` -> 1234 (the last one)."""
    found = _PR.findall(subject)
    return int(found[-1]) if found else None


class CulpritFinder:
    """Bisects the commits that changed ``path`` between ``old`` and ``new`` for the cause of a change."""

    def __init__(self, git: UpstreamGit, path: str, old: str, new: str) -> None:
        self.git = git
        self.path = path
        self.old = git.resolve(old)
        self.new = git.resolve(new)
        self.reads = 0
        self._candidates: list[str] | None = None
        self._texts: dict[str | None, bytes] = {None: b""}  # normalised file text by blob id; None: absent

    def candidates(self) -> list[str]:
        """Commits reachable from ``new`` and not ``old`` whose blob of ``path`` differs from their first
        parent's, oldest first (computed once)."""
        if self._candidates is None:
            self._candidates = self.git.commits_between(self.old, self.new, self.path)
        return list(self._candidates)

    def _text(self, commit: str) -> bytes:
        """The normalised text of ``path`` at ``commit``, read once per distinct blob."""
        blob = self.git.blob_id(commit, self.path)
        if blob not in self._texts:
            self._texts[blob] = normalize(self.git.read(commit, self.path) or b"")
            self.reads += 1
        return self._texts[blob]

    def find(self, before: str, after: str) -> list[Culprit]:
        """The commits that removed ``before`` from the file or brought ``after`` into it, oldest first."""
        gone, came = normalize(before), normalize(after)
        if not gone and not came:
            return []
        commits = self.candidates()
        if not commits:
            return []
        old_text = self._text(self.old)
        new_text = self._text(self.new)
        # bisections for the first commit where the change holds (it holds from there on, and at ``new``)
        found = set()
        if gone and gone in old_text and gone not in new_text:
            found.add(bisect.bisect_left(commits, True, key=lambda c: gone not in self._text(c)))
        if came and came in new_text and came not in old_text:
            found.add(bisect.bisect_left(commits, True, key=lambda c: came in self._text(c)))
        # len(commits) stands for ``new``: no candidate made the change
        return [self.culprit(commits[i]) for i in sorted(found) if i < len(commits)]

    def culprit(self, commit: str) -> Culprit:
        """The description of one (local) commit."""
        subject = self.git.subject(commit)
        when = datetime.fromtimestamp(self.git.commit_time(commit), tz=UTC)
        return Culprit(self.git.public_commit(commit), subject, parse_pr(subject), when.date().isoformat())


def blob_id(data: bytes) -> str:
    """Git's id of a blob holding ``data`` (equal ids: equal bytes)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _commit_of(git: UpstreamGit, pin: UpstreamPin, path: str, data: bytes | None) -> tuple[str | None, str]:
    """The upstream commit of a pin and how it was found, or None and why there is none.

    A git pin is its own commit; a registry release is its tag's commit when the tagged file is the
    released one (``data``, sha256 in the pin), else the first commit of the history whose file is
    byte for byte the released one.  The answer for a release depends on the history's refs too
    (a tag may come): it is cached by them.
    """
    if pin.kind == "git" and pin.pin:
        return pin.pin, ""
    if pin.kind != "release" or "==" not in pin.spec:
        return None, f"{pin.label} is no git commit or registry release"
    digest = "" if data is None else hashlib.sha256(data).hexdigest()
    code = code_stamp("series/culprits.py", "git/remote.py")
    key = derived_key(code, "release", git.tip_key(), pin.spec, pin.label, path, pin.files.get(path, ""), digest)
    hit = derived_json("culprits", key, tuple[str | None, str])
    if hit is not None:
        commit, why = hit[0]
        return commit, why
    found = _release_commit(git, pin, path, data)
    derived_put("culprits", key, json.dumps(list(found)).encode("utf-8"))
    return found


def _release_commit(git: UpstreamGit, pin: UpstreamPin, path: str, data: bytes | None) -> tuple[str | None, str]:
    """:func:`_commit_of` for a registry release, searched."""
    version = pin.spec.split("==", 1)[1].strip()
    tags = (f"v{version}", version)
    for tag in tags:
        try:
            commit = git.resolve(tag)
        except PqError:
            continue
        tagged = git.read(commit, path)
        if tagged is not None and hashlib.sha256(tagged).hexdigest() == pin.files.get(path):
            return commit, f"{pin.label} is its tag {tag}"
    if data is not None and hashlib.sha256(data).hexdigest() == pin.files.get(path):
        found = git.commits_with_blob(path, blob_id(data))
        if found:
            return found[0], f"{pin.label}'s {path.rsplit('/', 1)[-1]} is the one of upstream commit " + (
                git.public_commit(found[0])[:12]
            )
    touching = len(git.commits_touching(path))
    return None, (
        f"{pin.label} has no tag {tags[0]} in the upstream history, and none of the {touching} commits there "
        f"that changed {path.rsplit('/', 1)[-1]} has the released file (the history ends {git.newest_date()})"
    )


def annotate(
    found: list[Conflict],
    old: UpstreamPin,
    new: UpstreamPin,
    *,
    upstream_git: str | None,
    progress: Progress | None = None,
    files: tuple[bytes | None, bytes | None] = (None, None),
    queue: QueueSpec,
) -> tuple[list[Conflict], str]:
    """``found`` with the ``culprits`` of every conflict and flag named from the upstream git history,
    and a line saying between which commits they were searched, or why none were (``queue``: the queue, whose
    upstream's history is searched).

    A git pin is its commit; a registry release is the commit its release tag (``v<version>``)
    points at when the tagged file is byte for byte the released one, else the first commit whose
    file is (``files``: the old and new upstream file, as vendored).  When an end has no commit
    (a folder, or a release the history does not reach), nothing is searched and ``found`` comes
    back as it was.
    """
    paths = sorted(old.files)
    if not found or not paths:
        return found, ""
    location = upstream_git_location(upstream_git, queue)
    if not location:
        return found, (
            f"no upstream commits named: the queue names no git history of {queue.upstream_dist} (its registry "
            "releases are its history; --upstream names a repository of it)"
        )
    try:
        git = open_git(location, progress=progress)
    except PqError as exc:
        return found, f"no upstream commits named: the upstream history cannot be read ({exc})"
    ends = [_commit_of(git, pin, paths[0], data) for pin, data in zip((old, new), files, strict=True)]
    old_commit, new_commit = ends[0][0], ends[1][0]
    if old_commit is None or new_commit is None:
        return found, "no upstream commits named: " + "; ".join(why for c, why in ends if c is None)
    finder = CulpritFinder(git, paths[0], old_commit, new_commit)
    # the answer depends only on immutable commits, the texts and this code (and the git layer's): cached
    code = code_stamp("series/culprits.py", "git/remote.py")

    @functools.cache
    def culprits(before: str, after: str) -> tuple[Culprit, ...]:
        key = derived_key(code, paths[0], finder.old, finder.new, before, after)
        hit = derived_json("culprits", key, tuple[Culprit, ...])
        if hit is not None:
            kept: tuple[Culprit, ...] = hit[0]
            return kept
        found = tuple(finder.find(before, after))
        derived_put("culprits", key, json.dumps([c.as_json() for c in found]).encode("utf-8"))
        return found

    named = [replace(e, culprits=culprits(e.base or "", e.ours or "")) if e.base or e.ours else e for e in found]
    # how many candidates there were: cached too, so a refresh whose answers are all cached walks no history
    key = derived_key(code, "candidates", paths[0], finder.old, finder.new)
    counted = derived_get("culprits", key)
    if counted is None or not counted.isdigit():
        counted = str(len(finder.candidates())).encode()
        derived_put("culprits", key, counted)
    how = "; ".join(why for _c, why in ends if why)
    note = (
        f"upstream commits named from the {int(counted)} that changed {paths[0].rsplit('/', 1)[-1]} "
        f"between {git.public_commit(finder.old)[:12]} and {git.public_commit(finder.new)[:12]}"
        + (f" ({how})" if how else "")
    )
    return named, note
