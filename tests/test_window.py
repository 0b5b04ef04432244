"""The windowed replay (merge/window.py) gives what the whole-file merge gives, or nothing.

A random series on a random upstream text (few distinct lines, so many repeat; omni blocks; upstream
edits that move lines and land next to the patches) is replayed twice, patch by patch: the
whole-file :func:`merge3_checked` is the oracle, and every answer of :class:`Window` must be its
text with no region.  The replay goes on from the oracle's result, as the series replay does.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patch_queue.git.repo import ProjectRepo
from patch_queue.merge import checked
from patch_queue.merge import window as window_module
from patch_queue.merge.checked import merge3_checked
from patch_queue.merge.window import Window
from patch_queue.series import replay

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import bench_scale  # noqa: E402

FENCE = "        # ---------------------------------------Omni-new----------------------------------------------\n"
LABELS = ("base", "ours", "theirs")


def _line(rng: random.Random, vocabulary: int) -> str:
    k = rng.randrange(vocabulary)
    return ["        x = 1\n", "\n", "        return x\n", f"        y = f({k})\n", f"    def m{k}(self):\n"][k % 5]


def _edit(rng: random.Random, lines: list[str], vocabulary: int, *, omni: bool) -> list[str]:
    out = list(lines)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(out) + 1)
        kind = rng.random()
        if omni and kind < 0.3:  # a fenced block
            body = [f"        omni_{rng.randrange(1000)}()\n" for _ in range(rng.randint(1, 3))]
            out[at:at] = [FENCE, *body, FENCE]
        elif omni and kind < 0.4:  # a tagged line
            out[at:at] = [f"        z = {rng.randrange(50)}  # Omni-new\n"]
        elif kind < 0.6 and len(out) > 4:  # a replaced run
            span = rng.randint(1, 3)
            out[at : at + span] = [_line(rng, vocabulary) for _ in range(rng.randint(0, 3))]
        elif kind < 0.75 and len(out) > 8:  # a moved run
            span = rng.randint(1, 4)
            run = out[at : at + span]
            del out[at : at + span]
            to = rng.randrange(len(out) + 1)
            out[to:to] = run
        else:
            out[at:at] = [_line(rng, vocabulary) for _ in range(rng.randint(1, 3))]
    return out


def _check(seed: int) -> tuple[int, int]:
    """Replay one random series both ways; (patches the window answered, patches)."""
    rng = random.Random(seed)
    vocabulary = rng.choice([6, 20, 200])
    old_base = [_line(rng, vocabulary) for _ in range(rng.randint(10, 120))]
    new_base = old_base
    for _ in range(rng.randint(0, 4)):
        new_base = _edit(rng, new_base, vocabulary, omni=False)
    stack = [old_base]
    for _ in range(rng.randint(1, 12)):
        stack.append(_edit(rng, stack[-1], vocabulary, omni=True))
    window = Window()
    answered = 0
    ours = "".join(new_base)
    for before, after in zip(stack, stack[1:], strict=False):
        p, c = "".join(before), "".join(after)
        if p == c:
            continue
        whole = merge3_checked(p, ours, c, labels=LABELS)
        fast = window.merge(p.encode(), ours.encode(), c.encode())
        if fast is not None:
            answered += 1
            assert not whole.regions, (seed, whole.regions)
            assert fast.decode() == whole.text, seed
        ours = whole.text
    return answered, len(stack) - 1


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32))
def test_the_window_answers_what_the_whole_file_merge_does(seed: int) -> None:
    _check(seed)


def test_the_window_answers_most_patches_of_a_long_series() -> None:
    """Not a vacuous oracle: far apart patches on a text of unique lines are answered by the window."""
    lines = [f"    def m{k}(self):\n        return {k}\n\n" for k in range(200)]
    base = "".join(lines)
    ours = base.replace("return 7\n", "return 7 + 1\n").replace("return 150\n", "return -150\n")
    window = Window()
    stack = [base]
    for k in range(20, 120, 10):
        stack.append(stack[-1].replace(f"return {k}\n", f"return {k}  # Omni-new\n"))
    answered = 0
    for p, c in zip(stack, stack[1:], strict=False):
        whole = merge3_checked(p, ours, c, labels=LABELS)
        fast = window.merge(p.encode(), ours.encode(), c.encode())
        assert fast is not None and fast.decode() == whole.text
        answered += 1
        ours = whole.text
    assert answered == 10


def test_a_series_replays_to_the_same_commits_with_and_without_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scale benchmark's series, short: the windowed replay makes the very commits, statuses and
    findings of the whole-file one, and answers nearly every patch itself."""
    fixture = bench_scale.build_fixture(tmp_path / "repo", bench_scale.generate(40, 15, lines=1500, seed=3))
    answered: list[bool] = []
    merge = Window.merge

    def counted(self: Window, p: bytes, n: bytes, c: bytes, *, same_imports: bool = False) -> bytes | None:
        out = merge(self, p, n, c, same_imports=same_imports)
        answered.append(out is not None)
        return out

    def run() -> list[tuple[str, str, list[object], list[object]]]:
        results = replay.replay(
            ProjectRepo(fixture.path), list(fixture.patches), fixture.new_base, labels=("old", "new"), stop=False
        )
        return [(r.commit, r.status, list(r.conflicts), list(r.flags)) for r in results]

    monkeypatch.setattr(window_module.Window, "merge", counted)
    windowed = run()
    monkeypatch.setattr(window_module.Window, "merge", lambda *_a, **_k: None)
    assert windowed == run()
    assert len(answered) == 40 and sum(answered) >= 30


def test_a_patch_that_drops_a_name_upstream_now_reads_is_left_to_the_whole_merge() -> None:
    """The patch rewrites the line that binds `y`; far below, upstream adds a line that reads it.  The hunks are
    far apart, but the merge would leave the read unbound: merge3_checked makes it a conflict, and the window
    gives no answer of its own."""
    body = [f"        k{k} = {k}\n" for k in range(30)]
    base = "class A:\n    def m(self, a):\n        y = a + 1\n" + "".join(body) + "        return k0\n"
    ours = base.replace("        return k0\n", "        log(y)\n        return k0\n")
    theirs = base.replace("        y = a + 1\n", "        q = omni(a)\n")
    whole = merge3_checked(base, ours, theirs, labels=LABELS)
    assert whole.conflicts and "`y`" in whole.conflicts[0].message
    assert Window().merge(base.encode(), ours.encode(), theirs.encode()) is None
    # the same patch with a name upstream does not touch is answered by the window
    other = base.replace("        k3 = 3\n", "        k3 = 33\n")
    fast = Window().merge(base.encode(), ours.encode(), other.encode())
    assert fast is not None and fast.decode() == merge3_checked(base, ours, other, labels=LABELS).text


def test_a_merge_is_kept_by_its_inputs_and_the_recorded_answers_it_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A second merge of the same texts is read from the cache, unless the store answers another way now."""
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))
    base = "def f():\n    a = 1\n    return a\n"
    texts = [base, base.replace("1", "2"), base.replace("1", "3")]
    labels = ("old", "new", "0001-p.patch")
    store: dict[str, str] = {}
    first = replay._merged(list(texts), labels, "p\0m.py", store.get, True)
    assert first[1] and first[1][0].conflict
    key = first[1][0].key

    def no_merge(*_a: object, **_k: object) -> None:
        raise AssertionError("merged again")

    with monkeypatch.context() as m:
        m.setattr(checked, "merge3_checked", no_merge)  # replay imports it on a cache miss
        assert replay._merged(list(texts), labels, "p\0m.py", store.get, True) == first
        store[key] = "    a = 4\n"  # a maintainer's resolution recorded since: the kept merge asked for it
        with pytest.raises(AssertionError, match="merged again"):
            replay._merged(list(texts), labels, "p\0m.py", store.get, True)
    text, regions = replay._merged(list(texts), labels, "p\0m.py", store.get, True)
    assert "a = 4" in text and [r.kind for r in regions] == ["reused"]
    assert replay._merged(list(texts), labels, "p\0m.py", store.get, True) == (text, regions)
