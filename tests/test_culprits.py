"""Culprit finding on the real vllm-ascend history: bisection agrees with a linear scan, in few reads.

The ranges are one month of ``main`` each (some 40-50 commits that changed the model runner); the
conflict regions are the real diff hunks of ``model_runner_v1.py`` between the two ends, as written
upstream and as ``ruff format`` rewrites them.
"""

from __future__ import annotations

import difflib
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pygit2
import pytest

from patch_queue import presets
from patch_queue.git.remote import UpstreamGit
from patch_queue.merge.conflict import Culprit
from patch_queue.series.culprits import CulpritFinder, normalize, parse_pr
from patch_queue.sources.snapshot import open_git

PATH = "vllm_ascend/worker/model_runner_v1.py"
# Public shas of main on 2025-09-01 / 2025-10-01 (upstream still formatted with yapf) and on
# 2026-03-01 / 2026-04-01.
RANGES = {
    "2025-09": ("3a5fc5ee01edb3e6c88774edfea2a85eed1ff990", "474fa737c865dfaece24aa760e16095d9b05d6d6"),
    "2026-03": ("9d09488b4a5c64ca52987da6f1c0d159e7fe9dae", "b61efb9b8f25f777e50c60fe862adeefdd11d097"),
}


@pytest.fixture(scope="module")
def upstream(corpus: Path) -> UpstreamGit:
    return open_git(str(corpus / "vllm-ascend.bundle"), progress=lambda _: None)  # the session's cache (conftest)


def _text(git: UpstreamGit, commit: str) -> str:
    return (git.read(commit, PATH) or b"").decode()


def _ruff_format(text: str) -> str | None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).is_file():
        return None
    proc = subprocess.run([ruff, "format", "--line-length", "120", "-"], input=text, capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def _hunks(before: str, after: str) -> list[tuple[str, str]]:
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [("".join(a[i1:i2]), "".join(b[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


@dataclass
class Scan:
    """The linear-scan answer for one region: candidate indices, and whether bisection's premise held."""

    expected: list[int]
    monotone: bool


class Range:
    """One range of history with every candidate's normalised file, for brute-force answers."""

    def __init__(self, git: UpstreamGit, old_public: str, new_public: str) -> None:
        self.git = git
        self.old = git.resolve(old_public)
        self.new = git.resolve(new_public)
        self.candidates = CulpritFinder(git, PATH, self.old, self.new).candidates()
        self.files = [normalize(_text(git, c)) for c in self.candidates]
        self.old_file = normalize(_text(git, self.old))
        self.new_file = normalize(_text(git, self.new))

    def scan(self, before: str, after: str) -> Scan:
        """The spec, applied by reading every candidate."""
        gone, came = normalize(before), normalize(after)
        found: set[int] = set()
        monotone = True
        if gone and gone in self.old_file:
            seq = [gone in f for f in self.files]
            monotone &= not any(not x and y for x, y in zip(seq, seq[1:], strict=False))
            if not all(seq):
                found.add(seq.index(False))
        if came and came in self.new_file and came not in self.old_file:
            seq = [came in f for f in self.files]
            monotone &= not any(x and not y for x, y in zip(seq, seq[1:], strict=False))
            if any(seq):
                found.add(seq.index(True))
        return Scan(sorted(found), monotone)

    def finder(self) -> CulpritFinder:
        return CulpritFinder(self.git, PATH, self.old, self.new)


@pytest.fixture(scope="module", params=sorted(RANGES))
def history(request: pytest.FixtureRequest, upstream: UpstreamGit) -> Range:
    old, new = RANGES[request.param]
    return Range(upstream, old, new)


def _first_parent(repo: pygit2.Repository, sha: str) -> str:
    commit = repo.revparse_single(sha).peel(pygit2.Commit)
    return str(commit.parents[0].id)


def _bound(n: int) -> int:
    return 2 * math.ceil(math.log2(max(n, 2))) + 4


# -- pure helpers ------------------------------------------------------------------------------


def test_parse_pr() -> None:
    assert parse_pr("[BugFix] Fix PP PCP hidden state restore (#11401)") == 11401
    assert parse_pr('Revert "[Feat] thing (#12)" (#34)') == 34
    assert parse_pr("[Misc] no pull request here") is None
    assert parse_pr("issue #12 is not a PR reference") is None
    assert parse_pr("") is None


def test_normalize_ignores_layout_quotes_and_commas() -> None:
    yapf = "x = foo(a,\n        'b',\n        c)\n"
    ruff = 'x = foo(\n    a,\n    "b",\n    c,\n)\n'
    assert normalize(yapf) == normalize(ruff) == b"x=fooabc"
    # ruff adds and drops parentheses and joins implicitly concatenated strings
    assert normalize("y = (a +\n     b)\n") == normalize("y = a + b\n")
    assert normalize("m('ab' 'cd')") == normalize('m("abcd")')
    assert normalize("a = 1 + \\\n    2\n") == b"a=1+2"
    assert normalize(" \t\n\r\x0b\x0c,\\ ") == b""
    # text and its UTF-8 bytes normalise alike; non-ASCII text survives
    assert normalize("# 注释\n x = 'é'\n") == normalize("# 注释\n x = 'é'\n".encode()) == "#注释x=é".encode()


def test_culprit_as_json() -> None:
    c = Culprit(commit="a" * 40, subject="[Fix] thing (#7)", pr=7, date="2026-01-02")
    assert c.as_json() == {"commit": "a" * 40, "subject": "[Fix] thing (#7)", "pr": 7, "date": "2026-01-02"}


# -- the real history --------------------------------------------------------------------------


def test_candidates_are_the_commits_that_changed_the_file(history: Range) -> None:
    git, cands = history.git, history.candidates
    assert 30 <= len(cands) <= 60
    repo = pygit2.Repository(str(git.path))
    in_range = {str(c.id) for c in repo.walk(pygit2.Oid(hex=history.new))} - {
        str(c.id) for c in repo.walk(pygit2.Oid(hex=history.old))
    }
    # main is linear, so git log's simplified history of the file says the same.
    assert set(cands) == set(git.commits_touching(PATH)) & in_range
    times = [git.commit_time(c) for c in cands]
    assert times == sorted(times)  # oldest first
    for commit in cands:
        parent = _first_parent(repo, commit)
        assert git.blob_id(commit, PATH) != git.blob_id(parent, PATH)


def test_empty_or_unmatched_texts_give_nothing(history: Range) -> None:
    finder = history.finder()
    assert finder.find("", "") == []
    assert finder.find("  \n\t", ",\\\n") == []
    assert finder.reads == 0
    assert finder.find("def this_function_never_existed_upstream():\n", "") == []
    assert finder.find("", "also_never_there = 'x'\n") == []
    assert finder.reads <= 2


def test_same_commit_gives_nothing(upstream: UpstreamGit) -> None:
    old = RANGES["2026-03"][0]
    finder = CulpritFinder(upstream, PATH, old, old)
    assert finder.candidates() == []
    assert finder.find("import torch\n", "import numpy\n") == []


@pytest.mark.parametrize("formatted", [False, True], ids=["upstream-text", "ruff-formatted"])
def test_bisection_agrees_with_linear_scan(history: Range, formatted: bool) -> None:
    old_text, new_text = _text(history.git, history.old), _text(history.git, history.new)
    if formatted:
        old_fmt, new_fmt = _ruff_format(old_text), _ruff_format(new_text)
        if old_fmt is None or new_fmt is None:
            pytest.skip("ruff is not installed")
        old_text, new_text = old_fmt, new_fmt
    hunks = _hunks(old_text, new_text)
    assert len(hunks) > 50
    scans = [history.scan(before, after) for before, after in hunks]
    with_culprit = [i for i, s in enumerate(scans) if s.monotone and s.expected]
    without = [i for i, s in enumerate(scans) if s.monotone and not s.expected]
    assert len(with_culprit) >= 40
    # A fresh finder per region (so reads are not helped by an earlier search), on a spread of them.
    chosen = with_culprit[:: max(1, len(with_culprit) // 20)] + without[:5]
    n = len(history.candidates)
    two = 0
    for index in chosen:
        before, after = hunks[index]
        finder = history.finder()
        got = finder.find(before, after)
        expected = [history.candidates[i] for i in scans[index].expected]
        assert [c.commit for c in got] == [history.git.public_commit(c) for c in expected], (before, after)
        assert finder.reads <= _bound(n), (finder.reads, n)
        for culprit, local in zip(got, expected, strict=True):
            assert re.fullmatch(r"[0-9a-f]{40}", culprit.commit)
            assert culprit.subject == history.git.subject(local)
            assert culprit.pr == parse_pr(culprit.subject) and culprit.pr is not None
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", culprit.date)
        two += len(got) == 2
    assert two >= 1 or formatted  # a replaced region whose old and new texts came from different commits


def test_reads_are_logarithmic_over_the_whole_history(upstream: UpstreamGit) -> None:
    old, new = upstream.resolve("main~2000"), upstream.resolve("main")
    finder = CulpritFinder(upstream, PATH, old, new)
    n = len(finder.candidates())
    assert n > 300
    now = normalize(_text(upstream, new))
    # Long lines of the old runner that are gone today: each is bisected over the whole range.
    gone = [line for line in _text(upstream, old).splitlines() if len(line) > 60 and normalize(line) not in now]
    assert len(gone) > 10
    for line in gone[:: len(gone) // 10]:
        before = finder.reads
        got = finder.find(line, "")
        assert finder.reads - before <= math.ceil(math.log2(n)) + 3
        assert len(got) == 1
        # Whatever the history between, bisection stops on a commit that removed the text.
        local = upstream.resolve(got[0].commit)
        parent = _first_parent(pygit2.Repository(str(upstream.path)), local)
        assert normalize(line) in normalize(_text(upstream, parent))
        assert normalize(line) not in normalize(_text(upstream, local))


def test_reformatted_region_is_still_found(history: Range) -> None:
    old_text, new_text = _text(history.git, history.old), _text(history.git, history.new)
    hunks = [(b, a) for b, a in _hunks(old_text, new_text) if a.count("\n") >= 4 and normalize(a)]
    checked = 0
    for before, after in hunks:
        scan = history.scan(before, after)
        if not (scan.monotone and scan.expected):
            continue
        plain = history.finder().find(before, after)
        assert plain
        # Another formatter's layout: one long line per statement group, other quotes, trailing commas.
        reformatted = [_reformat(before), _reformat(after)]
        assert normalize(reformatted[0]) == normalize(before) and reformatted[1] != after
        assert history.finder().find(*reformatted) == plain
        checked += 1
        if checked == 5:
            break
    assert checked == 5


def _reformat(text: str) -> str:
    swapped = text.translate(str.maketrans("'\"", "\"'"))
    joined = " ".join(line.strip() for line in swapped.splitlines())
    return re.sub(r"(\w)\)", r"\1,)", joined) + "\n"


def test_annotate_keeps_its_answers_in_the_cache(
    upstream: UpstreamGit, pq_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from patch_queue.merge.conflict import Conflict
    from patch_queue.series import culprits
    from patch_queue.series.queue import UpstreamPin

    shutil.rmtree(pq_cache / "derived" / "culprits", ignore_errors=True)
    old, new = RANGES["2026-03"]
    hunks = _hunks(_text(upstream, upstream.resolve(old)), _text(upstream, upstream.resolve(new)))[:4]
    pins = [UpstreamPin("vllm-ascend", "git", c, c, c[:12], c, {PATH: "-"}) for c in (old, new)]
    finds: list[tuple[str, str]] = []
    real_find = CulpritFinder.find

    def counting(self: CulpritFinder, before: str, after: str) -> list[Culprit]:
        finds.append((before, after))
        return real_find(self, before, after)

    monkeypatch.setattr(CulpritFinder, "find", counting)

    notes: list[str] = []

    def run() -> list[list[dict[str, object]]]:
        entries = [Conflict("both-changed", base=b, ours=a) for b, a in hunks]
        named, note = culprits.annotate(
            entries, pins[0], pins[1], upstream_git=str(upstream.location), queue=presets.NPU
        )
        assert note.startswith("upstream commits named from the ") and note.endswith(f"and {new[:12]}")
        notes.append(note)
        return [[c.as_json() for c in e.culprits] for e in named]

    first = run()
    assert len(finds) == len(set(hunks)) and any(first)
    walks: list[CulpritFinder] = []

    def walking(self: CulpritFinder) -> list[str]:
        walks.append(self)
        return []

    monkeypatch.setattr(CulpritFinder, "candidates", walking)
    # the second time: from the cache, no search and no walk of the history for the note's count of candidates
    assert run() == first and len(finds) == len(set(hunks)) and not walks
    assert notes[1] == notes[0]


def test_a_release_without_its_tag_is_the_first_commit_with_its_file(
    upstream: UpstreamGit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry release the history has no tag for: the first commit whose file is the released one;
    a file no commit has: no commit, and the one-line reason.  Both answers are cached by the refs."""
    import hashlib

    from patch_queue.series.culprits import _commit_of
    from patch_queue.series.queue import UpstreamPin

    commit = upstream.resolve(RANGES["2026-03"][1])
    data = upstream.read(commit, PATH)
    assert data is not None
    pin = UpstreamPin("vllm-ascend", "release", "vllm-ascend==9.9.9", "", "vllm-ascend 9.9.9", "", {})
    pin = replace(pin, files={PATH: hashlib.sha256(data).hexdigest()})
    found, how = _commit_of(upstream, pin, PATH, data)
    assert found is not None and upstream.read(found, PATH) == data
    found_first = found
    assert (
        how
        == f"vllm-ascend 9.9.9's model_runner_v1.py is the one of upstream commit {upstream.public_commit(found)[:12]}"
    )
    parents = pygit2.Repository(str(upstream.path))[found].parent_ids  # it is the commit that made the file so
    assert all(upstream.blob_id(str(p), PATH) != upstream.blob_id(found, PATH) for p in parents)
    other = data + b"\n# released with a local change\n"
    pin = replace(pin, files={PATH: hashlib.sha256(other).hexdigest()})
    found, why = _commit_of(upstream, pin, PATH, other)
    assert found is None
    assert why.startswith("vllm-ascend 9.9.9 has no tag v9.9.9 in the upstream history, and none of the ")
    assert why.endswith(" that changed model_runner_v1.py has the released file (the history ends 2026-08-22)")

    def searched(*_args: object) -> None:
        raise AssertionError("searched the history again")

    monkeypatch.setattr(UpstreamGit, "commits_with_blob", searched)
    monkeypatch.setattr(UpstreamGit, "newest_date", searched)
    assert _commit_of(upstream, pin, PATH, other) == (None, why)
    pin = replace(pin, files={PATH: hashlib.sha256(data).hexdigest()})
    assert _commit_of(upstream, pin, PATH, data) == (found_first, how)
