"""The adopt search's pruning: aligning revisions in the order of an upper bound of their score and
stopping early must give exactly the ranking of aligning every revision."""

from __future__ import annotations

import difflib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patch_queue.series import adopt

LINES = [f"        x{i} = f(x{i - 1})\n" for i in range(1, 9)] + ["        pass\n", "        return x\n"]


def method(name: str, body: list[str]) -> str:
    return f"    def {name}(self):\n" + "".join(body)


def module(methods: dict[str, str]) -> str:
    return "class OmniRunner(Base):\n" + "\n".join(methods.values())


def brute_force(
    down: dict[str, str], revisions: dict[str, dict[str, str]], times: dict[str, int], keys: set[str] | None
) -> list[tuple[int, int, str]]:
    """(-matched, -time, commit) of every revision, aligning every pair."""
    out = []
    for commit, methods in revisions.items():
        matched = 0
        for name, text in down.items():
            if (keys is None or name in keys) and name in methods:
                sm = difflib.SequenceMatcher(None, text.splitlines(), methods[name].splitlines(), autojunk=False)
                matched += sum(b.size for b in sm.get_matching_blocks())
        out.append((-matched, -times[commit], commit))
    return sorted(out)


bodies = st.lists(st.sampled_from(LINES), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    down=st.dictionaries(st.sampled_from(["a", "b", "c"]), bodies, min_size=1),
    revisions=st.lists(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), bodies), min_size=1, max_size=30),
    shared=st.lists(st.integers(0, 29), max_size=10),
)
def test_pruned_ranking_equals_brute_force(
    down: dict[str, list[str]], revisions: list[dict[str, list[str]]], shared: list[int]
) -> None:
    down_methods = {name: method(name, body) for name, body in sorted(down.items())}
    blobs = {f"blob{i}": {n: method(n, b) for n, b in rev.items()} for i, rev in enumerate(revisions)}
    # several commits may hold one blob (a revert, a merge): commits, not blobs, are ranked
    commit_blob = {f"c{i:02d}": f"blob{i}" for i in range(len(revisions))}
    commit_blob.update({f"d{j:02d}": f"blob{k % len(revisions)}" for j, k in enumerate(shared)})
    times = {c: (i * 7) % 5 for i, c in enumerate(sorted(commit_blob))}  # many equal times: the sha breaks ties
    result = adopt.search_base(
        {"runner.py": module(down_methods)},
        sorted(commit_blob),
        commit_blob.get,
        lambda _c, blob: blobs[blob],
        times.__getitem__,
    )
    first = brute_force(down_methods, {c: blobs[b] for c, b in commit_blob.items()}, times, None)
    best = blobs[commit_blob[first[0][2]]]
    carried = {n for n, t in down_methods.items() if n in best and adopt._is_copy(n, t, best[n], adopt._Matcher())}
    final = brute_force(down_methods, {c: blobs[b] for c, b in commit_blob.items()}, times, carried or None)
    assert [(-c.matched, -c.time, c.commit) for c in result.ranking] == final[: adopt.TOP]
    assert result.ties == sum(1 for m, _t, _c in final if m == final[0][0])
    assert result.searched == len(commit_blob)
