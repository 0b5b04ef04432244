"""The objects a replay writes as one pack (``ProjectRepo.batched``, ``patch_queue.git.pack``): the same ids as
libgit2's loose objects, read back by git, deltas that git resolves."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from patch_queue.git import pack
from patch_queue.git.repo import Person, ProjectRepo


def _repo(path: Path) -> ProjectRepo:
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return ProjectRepo(path)


def _git(path: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=path, check=True, capture_output=True, text=True).stdout


TREES: list[dict[str, bytes]] = [
    {},
    {"a.py": b"x = 1\n"},
    {
        "a.py": b"x = 1\n",
        "a/b.py": b"",
        "a-b": b"dash\n",
        "ab/c/d.txt": b"deep\n",
        "\u00e9t\u00e9.py": "\u00e9\n".encode(),
    },
    {"pkg/mod.py": b"line\n" * 5000, "pkg/other.py": b"no newline at the end"},
    {"pkg/mod.py": b"line\n" * 2500 + b"changed\n" + b"line\n" * 2499, "pkg/other.py": b"no newline at the end"},
]
PEOPLE = [
    Person("A U Thor", "a@example.com", 1_700_000_000, 0),
    Person("Zo\u00eb", "z@example.com", 1_600_000_123, -330),
    Person("  spaced  ", " s@example.com ", 1_234_567_890, 90),
]
MESSAGES = ["subject\n\nbody\n", "no newline", "", "\u00fcnicode \u2603\n"]


def _write(repo: ProjectRepo) -> list[str]:
    ids: list[str] = []
    parents: list[str] = []
    for i, files in enumerate(TREES):
        tree = repo.write_tree(files)
        ids.append(tree)
        for j, person in enumerate(PEOPLE):
            message = MESSAGES[(i + j) % len(MESSAGES)]
            commit = repo.commit(tree, parents, message, person, PEOPLE[(j + 1) % len(PEOPLE)])
            ids.append(commit)
            parents = [commit] if j % 2 else [*parents, commit][-2:]  # merges too
    return ids


def test_batched_objects_have_the_ids_libgit2_gives_and_git_reads_them(tmp_path: Path) -> None:
    loose, packed = _repo(tmp_path / "loose"), _repo(tmp_path / "packed")
    expected = _write(loose)
    with packed.batched():
        got = _write(packed)
        # read back inside the batch: what a replay reads of what it wrote
        for commit in got[1::4]:
            info = packed.commit_info(commit)
            assert info == loose.commit_info(commit)
            assert packed.read_tree(info.tree) == loose.read_tree(info.tree)
    assert got == expected
    assert list((tmp_path / "packed" / ".git" / "objects" / "pack").glob("pack-*.idx"))
    _git(tmp_path / "packed", "update-ref", "refs/heads/main", got[-1])
    _git(tmp_path / "packed", "fsck", "--full", "--strict")
    for oid in got:
        assert _git(tmp_path / "packed", "cat-file", "-p", oid) == _git(tmp_path / "loose", "cat-file", "-p", oid)
    fresh = ProjectRepo(tmp_path / "packed")  # another process: nothing cached
    assert fresh.read_tree(fresh.commit_info(got[-1]).tree) == TREES[-1]


def test_a_long_series_of_texts_is_stored_as_delta_chains_git_resolves(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    person = PEOPLE[0]
    texts = [b"".join(b"line %d of %d\n" % (k, i if k == i * 7 else 0) for k in range(3000)) for i in range(60)]
    commits: list[str] = []
    with repo.batched():
        for text in texts:
            commits.append(repo.commit(repo.write_tree({"m.py": text}), commits[-1:], "m\n", person, person))
    _git(tmp_path / "r", "update-ref", "refs/heads/main", commits[-1])
    _git(tmp_path / "r", "fsck", "--full", "--strict")
    (idx,) = (tmp_path / "r" / ".git" / "objects" / "pack").glob("pack-*.idx")
    stats = _git(tmp_path / "r", "verify-pack", "-v", str(idx))
    # "chain length = 3: 4 objects": the deltas of the texts, none longer than DEPTH
    chains = [int(line.split("=")[1].split(":")[0]) for line in stats.splitlines() if line.startswith("chain length")]
    assert stats.count(" blob ") == 60
    assert max(chains) == pack.DEPTH, stats
    fresh = ProjectRepo(tmp_path / "r")
    for text, commit in zip(texts, commits, strict=True):
        assert fresh.read_tree(fresh.commit_info(commit).tree) == {"m.py": text}


def test_what_reads_the_store_inside_a_batch_finds_its_objects(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    person = PEOPLE[0]
    with repo.batched():
        first = repo.commit(repo.write_tree({"a.py": b"a\n"}), [], "one\n", person, person)
        texts = [b"text %d\n" % i * 100 for i in range(ProjectRepo._BLOB_CACHE + 8)]  # more than the cache keeps
        second = repo.commit(
            repo.write_tree({f"f{i}": t for i, t in enumerate(texts)}), [first], "two\n", person, person
        )
        assert repo.is_ancestor(first, second)  # libgit2 reads the commits: the batch was written first
        assert repo.kind_of(repo.commit_info(second).tree) == "tree"
        assert repo.read_tree(repo.commit_info(second).tree) == {f"f{i}": t for i, t in enumerate(texts)}
        third = repo.commit(repo.write_tree({"a.py": b"b\n"}), [second], "three\n", person, person)
    assert repo.has_object(third)
    assert len(list((tmp_path / "r" / ".git" / "objects" / "pack").glob("pack-*.pack"))) == 2


@pytest.mark.parametrize(
    ("base", "target"),
    [
        (b"", b""),
        (b"abc", b"abc"),
        (b"x" * 1000, b"x" * 500 + b"y" + b"x" * 500),
        (b"a" * 70000 + b"b" * 70000, b"a" * 70000 + b"c" * 10 + b"b" * 70000),
        (b"head\n" * 40000, b"head\n" * 39999),
    ],
)
def test_a_delta_makes_its_target(tmp_path: Path, base: bytes, target: bytes) -> None:
    made = pack.delta(base, target)
    assert made is not None
    written = pack.Pack()
    base_id, target_id = pack.object_id("blob", base), pack.object_id("blob", target)
    written.add("blob", base_id, base)
    written.add("blob", target_id, target, (base_id, base))
    _repo(tmp_path / "r")
    written.write(tmp_path / "r" / ".git" / "objects" / "pack")
    assert (
        subprocess.run(
            ["git", "cat-file", "blob", target_id.hex()], cwd=tmp_path / "r", check=True, capture_output=True
        ).stdout
        == target
    )
