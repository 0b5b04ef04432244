"""Hostile round for the bot (issue 31): ``publish`` trusts no artifact, stores are merged, prepare keeps user files.

Every attack runs ``scripts/refresh_pr.py`` as the workflow does (a subprocess, ``--target`` from the
workflow) against a local bare repository as origin, with a recording ``gh`` first on PATH (so
:class:`refresh_pr.GhCli` itself runs).  The forged artifacts are made with git plumbing in a separate
clone, so the publishing clone gets their objects only through the bundle, as in the workflow.  A
refused attack is one line ``refresh_pr: error: <path>: ...``, exit 1, no traceback, and neither
origin's refs nor the publishing clone's change; ``gh`` is not asked to open or edit anything.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import copy_project, git, state

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import refresh_pr  # noqa: E402

SCRIPT = Path(refresh_pr.__file__).resolve()
RES = refresh_pr.RESOLUTIONS
STORE = {"r/origin.json": '{"side": "origin"}\n', "blobs/aa": "a blob\n", "edits/p/one.json": "{}\n"}


def _git_env(repo: Path, args: list[str], env: dict[str, str], stdin: str = "") -> str:
    proc = subprocess.run(
        ["git", *args], cwd=repo, input=stdin, text=True, capture_output=True, env={**os.environ, **env}, check=True
    )
    return proc.stdout.strip()


def tree(repo: Path, files: dict[str, str | None], *, base: str = "", modes: dict[str, str] | None = None) -> str:
    """The tree of ``base`` (none: empty) with ``files`` written (None: removed), through a scratch index."""
    env = {"GIT_INDEX_FILE": str(repo / ".git" / "scratch-index")}
    _git_env(repo, ["read-tree", *([base] if base else ["--empty"])], env)
    lines = []
    for path, text in files.items():
        if text is None:
            lines.append(f"0 {'0' * 40}\t{path}\n")
        else:
            blob = _git_env(repo, ["hash-object", "-w", "--stdin"], {}, text)
            lines.append(f"{(modes or {}).get(path, '100644')} {blob}\t{path}\n")
    _git_env(repo, ["update-index", "--index-info"], env, "".join(lines))
    out = _git_env(repo, ["write-tree"], env)
    (repo / ".git" / "scratch-index").unlink()
    return out


def commit(repo: Path, tree_id: str, *parents: str, message: str = "forged") -> str:
    return git(repo, "commit-tree", tree_id, *[a for p in parents for a in ("-p", p)], "-m", message).strip()


def refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


def entries(repo: Path, rev: str) -> dict[str, str]:
    out = {}
    for line in git(repo, "ls-tree", "-r", "--full-tree", rev).splitlines():
        meta, path = line.split("\t", 1)
        out[path] = meta.split()[2]
    return out


@dataclass
class Bot:
    origin: Path  # the bare remote
    forge: Path  # where the artifacts are made (the unprivileged job, or an attacker)
    pub: Path  # the publish job's checkout of the default branch
    gh_log: Path
    env: dict[str, str]
    main: str  # origin's main
    store: str  # origin's refs/pq/resolutions

    def patches_commit(self, text: str = "0001-a.patch\n0002-b.patch\n") -> str:
        """A commit as prepare makes it: on main's head, patches/ only."""
        return commit(self.forge, tree(self.forge, {"patches/series": text}, base=self.main), self.main)

    def artifact(
        self,
        name: str,
        branch_commit: str,
        *,
        resolutions: str = "",
        bundle: bool = True,
        **fields: Any,
    ) -> Path:
        wd = self.forge.parent / name
        wd.mkdir()
        git(self.forge, "update-ref", refresh_pr.BUNDLE_REF, branch_commit)
        if resolutions:
            git(self.forge, "update-ref", RES, resolutions)
        if bundle:
            bundled = [refresh_pr.BUNDLE_REF] + ([RES] if resolutions else [])
            git(self.forge, "bundle", "create", "-q", str(wd / "branch.bundle"), *bundled)
        git(self.forge, "update-ref", "-d", refresh_pr.BUNDLE_REF)
        git(self.forge, "update-ref", "-d", RES)
        data: dict[str, Any] = {
            "action": "update",
            "branch": refresh_pr.branch_of("main"),
            "target": "main",
            "reason": "0 conflict(s), 0 review flag(s)",
            "commit": branch_commit,
            "expected_remote": "",
            "resolutions": resolutions,
            "expected_resolutions": self.store if resolutions else "",
            "title": "[NPU] Upgrade model runners to align with vllm-ascend main",
            "draft": False,
            "labels": [],
        }
        data.update(fields)
        (wd / "decision.json").write_text(json.dumps(data, indent=2) + "\n")
        (wd / "body.md").write_text("## NPU runners: the refresh\n\nbody\n")
        return wd

    def publish(self, wd: Path, target: str = "main") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPT), "publish", "--target", target, "--workdir", str(wd)],
            cwd=self.pub,
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )

    def gh_calls(self) -> list[tuple[list[str], str | None]]:
        if not self.gh_log.is_file():
            return []
        return [tuple(json.loads(line)) for line in self.gh_log.read_text().splitlines()]  # type: ignore[misc]


RECORDING_GH = """#!{python}
import json, sys
args = sys.argv[1:]
body = open(args[args.index('--body-file') + 1]).read() if '--body-file' in args else None
with open({log!r}, 'a') as out:
    out.write(json.dumps([args, body]) + '\\n')
print('https://github.com/o/r/pull/7' if args[:2] == ['pr', 'create'] else '')
"""


@pytest.fixture
def bot(tmp_path: Path) -> Bot:
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    (seed / ".gitignore").write_text("/patches/*.patch\n/npu_worker/\n")
    (seed / "patches").mkdir()
    (seed / "patches" / "series").write_text("0001-a.patch\n")
    (seed / "README.md").write_text("the project\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "project")
    (seed / "README.md").write_text("the project, second commit\n")
    git(seed, "commit", "-qam", "history the default branch keeps")
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(seed, "push", "-q", str(origin), "main")
    store = commit(seed, tree(seed, STORE), message="the maintainers' store")
    git(seed, "push", "-q", str(origin), f"{store}:{RES}")
    forge = tmp_path / "forge" / "repo"
    forge.parent.mkdir()
    git(tmp_path, "clone", "-q", str(origin), str(forge))
    git(forge, "fetch", "-q", "origin", f"{RES}:{RES}")
    git(forge, "update-ref", "-d", RES)  # the objects stay; the ref is made per artifact
    pub = tmp_path / "pub"
    git(tmp_path, "clone", "-q", str(origin), str(pub))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "gh.log"
    (bindir / "gh").write_text(RECORDING_GH.format(python=sys.executable, log=str(log)))
    (bindir / "gh").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    env.pop(refresh_pr.TOKEN_ENV, None)
    main = git(origin, "rev-parse", "main").strip()
    return Bot(origin, forge, pub, log, env, main, store)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert lines[0].startswith("refresh_pr: error: "), lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------
# forged artifacts: each refused with one line, nothing pushed

Forge = Callable[[Bot], Path]


def _branch_main(b: Bot) -> Path:
    return b.artifact("wd", b.patches_commit(), branch="main", expected_remote=b.main)


def _branch_main_root(b: Bot) -> Path:
    root = commit(b.forge, tree(b.forge, {"GONE": "history erased\n"}))
    return b.artifact("wd", root, branch="main", target="main", expected_remote=b.main)


def _other_target(b: Bot) -> Path:
    return b.artifact("wd", b.patches_commit(), target="release", branch=refresh_pr.branch_of("release"))


def _root_commit(b: Bot) -> Path:
    return b.artifact("wd", commit(b.forge, tree(b.forge, {"patches/series": "0001-a.patch\n"})))


def _parent_not_on_main(b: Bot) -> Path:
    side = commit(b.forge, tree(b.forge, {"side.txt": "not on main\n"}, base=b.main), b.main)
    return b.artifact("wd", commit(b.forge, tree(b.forge, {"patches/series": "x\n"}, base=side), side))


def _two_parents(b: Bot) -> Path:
    side = commit(b.forge, tree(b.forge, {"side.txt": "not on main\n"}, base=b.main), b.main)
    t = tree(b.forge, {"patches/series": "x\n"}, base=b.main)
    return b.artifact("wd", commit(b.forge, t, b.main, side))


def _outside_patches(b: Bot) -> Path:
    t = tree(b.forge, {"patches/series": "x\n", ".github/workflows/evil.yml": "on: push\n"}, base=b.main)
    return b.artifact("wd", commit(b.forge, t, b.main))


def _symlink_in_patches(b: Bot) -> Path:
    t = tree(b.forge, {"patches/link": "../.github"}, base=b.main, modes={"patches/link": "120000"})
    return b.artifact("wd", commit(b.forge, t, b.main))


def _store_unrelated(b: Bot) -> Path:
    mine = commit(b.forge, tree(b.forge, {"r/bot.json": "{}\n"}), message="a store of its own")
    return b.artifact("wd", b.patches_commit(), resolutions=mine)


def _store_unrelated_unseen(b: Bot) -> Path:
    mine = commit(b.forge, tree(b.forge, {"r/bot.json": "{}\n"}), message="a store of its own")
    return b.artifact("wd", b.patches_commit(), resolutions=mine, expected_resolutions="")


def _store_seen_not_origins(b: Bot) -> Path:
    # "prepare saw" a store origin never had: the bundled one descends from it, not from origin's history
    fake = commit(b.forge, tree(b.forge, {"r/x.json": "{}\n"}), message="not origin's")
    mine = commit(b.forge, tree(b.forge, {"r/x.json": "{}\n", "r/y.json": "{}\n"}), fake)
    return b.artifact("wd", b.patches_commit(), resolutions=mine, expected_resolutions=fake)


def _store_not_from_seen(b: Bot) -> Path:
    # the bundled store does not descend from what the decision says prepare saw (origin's)
    older = commit(b.forge, tree(b.forge, {"r/old.json": "{}\n"}), message="older")
    return b.artifact("wd", b.patches_commit(), resolutions=older)


def _store_deleted(b: Bot) -> Path:
    mine = commit(b.forge, tree(b.forge, {"r/bot.json": "{}\n"}, base=b.store), b.store)
    git(b.origin, "update-ref", "-d", RES)  # origin's store went away after prepare saw it
    return b.artifact("wd", b.patches_commit(), resolutions=mine)


def _commit_not_bundled(b: Bot) -> Path:
    return b.artifact("wd", b.patches_commit(), commit=b.main)


def _store_not_bundled(b: Bot) -> Path:
    mine = commit(b.forge, tree(b.forge, {"r/bot.json": "{}\n"}, base=b.store), b.store)
    wd = b.artifact("wd", b.patches_commit(), resolutions=mine)
    data = json.loads((wd / "decision.json").read_text())
    data["resolutions"] = b.main
    (wd / "decision.json").write_text(json.dumps(data))
    return wd


def _no_bundle(b: Bot) -> Path:
    return b.artifact("wd", b.patches_commit(), bundle=False)


def _garbage_bundle(b: Bot) -> Path:
    wd = b.artifact("wd", b.patches_commit())
    (wd / "branch.bundle").write_text("not a bundle\n")
    return wd


def _broken_bundle(b: Bot) -> Path:
    wd = b.artifact("wd", b.patches_commit())
    (wd / "branch.bundle").write_text("# v2 git bundle\nnot really\n")
    return wd


def _bundle_without_the_commit_ref(b: Bot) -> Path:
    wd = b.artifact("wd", b.patches_commit())
    git(b.forge, "bundle", "create", "-q", str(wd / "branch.bundle"), "main")
    return wd


def _decision_text(text: bytes) -> Forge:
    def forge(b: Bot) -> Path:
        wd = b.artifact("wd", b.patches_commit())
        (wd / "decision.json").write_bytes(text)
        return wd

    return forge


def _no_decision(b: Bot) -> Path:
    wd = b.artifact("wd", b.patches_commit())
    (wd / "decision.json").unlink()
    return wd


def _fields(**fields: Any) -> Forge:
    return lambda b: b.artifact("wd", b.patches_commit(), **fields)


def _without(key: str) -> Forge:
    def forge(b: Bot) -> Path:
        wd = b.artifact("wd", b.patches_commit())
        data = json.loads((wd / "decision.json").read_text())
        del data[key]
        (wd / "decision.json").write_text(json.dumps(data))
        return wd

    return forge


def _branch_moved(b: Bot) -> Path:
    theirs = b.patches_commit("someone else's\n")
    git(b.forge, "push", "-q", "origin", f"{theirs}:refs/heads/{refresh_pr.branch_of('main')}")
    return b.artifact("wd", b.patches_commit())


def _maintainer_commits(b: Bot) -> Path:
    theirs = b.patches_commit("a maintainer's resolution\n")  # by the test's identity, no trailer
    git(b.forge, "push", "-q", "origin", f"{theirs}:refs/heads/{refresh_pr.branch_of('main')}")
    return b.artifact("wd", b.patches_commit(), expected_remote=theirs)


def _origin_refuses(b: Bot) -> Path:
    hook = b.origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected' >&2\nexit 1\n")
    hook.chmod(0o755)
    return b.artifact("wd", b.patches_commit())


DEC, BUNDLE = r"\S+/wd/decision\.json", r"\S+/wd/branch\.bundle"
FORGED: list[tuple[str, Forge, str]] = [
    ("branch main", _branch_main, rf"{DEC}: names target 'main' and branch 'main'; this job publishes 'main' to "),
    ("branch main, a root commit", _branch_main_root, rf"{DEC}: names target 'main' and branch 'main'"),
    ("another target", _other_target, rf"{DEC}: names target 'release' and branch 'pq/refresh/release'"),
    ("a root commit", _root_commit, rf"{BUNDLE}: commit [0-9a-f]{{12}} is a root commit: refused"),
    ("parent not on main", _parent_not_on_main, rf"{BUNDLE}: commit \w+ has parent \w+, which is not on the default"),
    ("two parents", _two_parents, rf"{BUNDLE}: commit \w+ has 2 parents: refused"),
    ("outside patches/", _outside_patches, rf"{BUNDLE}: commit \w+ changes \.github/workflows/evil\.yml \(a file outs"),
    ("a symlink in patches/", _symlink_in_patches, rf"{BUNDLE}: commit \w+ changes patches/link \(mode 120000\)"),
    ("store unrelated", _store_unrelated, rf"{BUNDLE}: {RES} \w+ does not descend from origin's \w+ that prepare saw"),
    ("store unrelated, none seen", _store_unrelated_unseen, rf"{BUNDLE}: {RES} \w+ has no history in common with"),
    ("seen store not origin's", _store_seen_not_origins, rf"{BUNDLE}: origin's {RES} no longer holds \w+, which pre"),
    ("store deleted since", _store_deleted, rf"{BUNDLE}: origin's {RES} no longer holds \w+, which prepare saw"),
    ("store not from the seen", _store_not_from_seen, rf"{BUNDLE}: {RES} \w+ does not descend from origin's"),
    ("commit not the bundle's", _commit_not_bundled, rf"{BUNDLE}: holds \w+, the decision names \w+; nothing pushed"),
    ("store not the bundle's", _store_not_bundled, rf"{BUNDLE}: holds {RES} \w+, the decision names \w+"),
    ("no bundle", _no_bundle, rf"{BUNDLE}: missing: the refresh job's artifact holds no commit; nothing pushed"),
    ("garbage bundle", _garbage_bundle, rf"{BUNDLE}: not a git bundle; nothing pushed"),
    ("broken bundle", _broken_bundle, rf"{BUNDLE}: not a bundle of what the decision names \(.*\); nothing pushed"),
    ("bundle of main", _bundle_without_the_commit_ref, rf"{BUNDLE}: not a bundle of what the decision names"),
    ("no decision.json", _no_decision, rf"{DEC}: missing: the refresh job left no decision \(see its log\); nothing"),
    ("not JSON", _decision_text(b'{"action": "update",\n oops}'), rf"{DEC}:2: not JSON \(.+\); nothing pushed"),
    ("a JSON list", _decision_text(b"[]\n"), rf"{DEC}: not a JSON object; nothing pushed"),
    ("not UTF-8", _decision_text(b"\xff{}"), rf"{DEC}: unreadable \(.+\); nothing pushed"),
    ("unknown key", _fields(push_to="main"), rf"{DEC}: unknown key 'push_to'; nothing pushed"),
    ("missing key", _without("branch"), rf"{DEC}: no 'branch'; nothing pushed"),
    ("draft a string", _fields(draft="yes"), rf"""{DEC}: 'draft' must be true or false, not "yes"; nothing pushed"""),
    ("labels a string", _fields(labels="check-errors"), rf"{DEC}: 'labels' must be a list, not \"check-errors\""),
    ("commit a number", _fields(commit=12), rf"{DEC}: 'commit' must be a string, not 12; nothing pushed"),
    ("title null", _fields(title=None), rf"{DEC}: 'title' must be a string, not null; nothing pushed"),
    ("unknown action", _fields(action="delete"), rf"{DEC}: 'action' must be one of update, noop, comment, not 'de"),
    ("unknown label", _fields(labels=["admin"]), rf"""{DEC}: label "admin" is not one the bot sets \(check-erro"""),
    ("label an object", _fields(labels=[{}]), rf"{DEC}: label \{{\}} is not one the bot sets"),
    ("label twice", _fields(labels=["check-errors"] * 2), rf"{DEC}: 'labels' names a label twice; nothing pushed"),
    ("option as commit", _fields(commit="--upload-pack=touch x"), rf"{DEC}: 'commit' is not a commit id: '--uplo"),
    ("short sha", _fields(expected_remote="abc123"), rf"{DEC}: 'expected_remote' is not a commit id: 'abc123'"),
    ("title two lines", _fields(title="a\nb"), rf"{DEC}: 'title' holds a control character; nothing pushed"),
    ("update no commit", _fields(commit=""), rf"{DEC}: an update names no 'commit'; nothing pushed"),
    ("branch moved", _branch_moved, r"pq/refresh/main: moved since prepare ran \(now \w+, prepare saw none\): nothin"),
    ("origin refuses the push", _origin_refuses, r"pq/refresh/main: the push was refused, nothing pushed \(one a"),
    ("maintainers' commits", _maintainer_commits, r"pq/refresh/main: holds 1 commit\(s\) the bot did not make \(\w+"),
]


@pytest.mark.parametrize(("forge", "expected"), [c[1:] for c in FORGED], ids=[c[0] for c in FORGED])
def test_a_forged_artifact_is_refused_and_nothing_is_pushed(bot: Bot, forge: Forge, expected: str) -> None:
    wd = forge(bot)
    before_origin, before_pub = refs(bot.origin), state(bot.pub)
    line = one_error_line(bot.publish(wd))
    assert re.fullmatch(r"refresh_pr: error: " + expected + ".*", line), line
    assert refs(bot.origin) == before_origin
    assert state(bot.pub) == before_pub  # no scratch ref left, no file written
    assert not [args for args, _ in bot.gh_calls() if args[:2] in (["pr", "create"], ["pr", "edit"])]


def test_the_same_artifact_with_its_own_target_is_published(bot: Bot) -> None:
    """The control for the matrix above: a well-formed artifact goes through, to the branch the target names."""
    c = bot.patches_commit()
    proc = bot.publish(bot.artifact("wd", c))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout == f"pq/refresh/main: pushed {c[:12]}, pull request #7\n"
    assert git(bot.origin, "rev-parse", "refs/heads/pq/refresh/main").strip() == c
    assert git(bot.origin, "rev-parse", "main").strip() == bot.main
    assert [args[:2] for args, _ in bot.gh_calls() if args[0] == "pr"] == [["pr", "list"], ["pr", "create"]]
    assert git(bot.pub, "for-each-ref", refresh_pr.PUBLISH_REFS) == ""


# ---------------------------------------------------------------------------------------------
# recorded resolutions: merged with origin's, nothing lost


def _store(b: Bot, files: dict[str, str | None], parent: str, message: str) -> str:
    return commit(b.forge, tree(b.forge, files, base=parent), parent, message=message)


def test_a_store_origin_moved_on_since_prepare_is_merged_and_a_clash_keeps_origins(bot: Bot) -> None:
    maintainers = _store(bot, {"r/maint.json": "{}\n", "r/clash.json": '"maintainer"\n'}, bot.store, "pushed meanwhile")
    git(bot.forge, "push", "-q", "origin", f"{maintainers}:{RES}")
    ours = _store(bot, {"r/bot.json": "{}\n", "r/clash.json": '"bot"\n', "edits/p/two.json": "[]\n"}, bot.store, "bot")
    wd = bot.artifact("wd", bot.patches_commit(), resolutions=ours)  # prepare saw bot.store
    proc = bot.publish(wd)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    merged = git(bot.origin, "rev-parse", RES).strip()
    assert git(bot.origin, "rev-list", "--parents", "-n1", merged).split()[1:] == [maintainers, ours]
    got, theirs, mine = entries(bot.origin, merged), entries(bot.origin, maintainers), entries(bot.origin, ours)
    assert set(got) == set(theirs) | set(mine)  # every entry of both sides
    assert all(got[p] == theirs[p] for p in theirs)  # origin's entries as they were, the clash included
    assert all(got[p] == mine[p] for p in set(mine) - set(theirs))
    clash = f"{RES}: r/clash.json: kept origin's {theirs['r/clash.json']}, not the bot's {mine['r/clash.json']}"
    assert proc.stdout.splitlines()[1:] == [clash]
    (body,) = [b for args, b in bot.gh_calls() if args[:2] == ["pr", "create"]]
    assert body is not None and "`r/clash.json`" in body
    assert theirs["r/clash.json"] in body and mine["r/clash.json"] in body


def test_a_store_that_drops_origins_entries_is_merged_back(bot: Bot) -> None:
    """A descendant of origin's store that deletes an entry cannot remove it: publish merges the union."""
    dropping = _store(bot, {"r/origin.json": None, "r/bot.json": "{}\n"}, bot.store, "drops an entry")
    proc = bot.publish(bot.artifact("wd", bot.patches_commit(), resolutions=dropping))
    assert proc.returncode == 0, proc.stderr
    merged = git(bot.origin, "rev-parse", RES).strip()
    assert merged != dropping
    assert set(entries(bot.origin, merged)) == set(STORE) | {"r/bot.json"}


def test_a_store_that_only_adds_is_pushed_as_it_is(bot: Bot) -> None:
    adds = _store(bot, {"r/bot.json": "{}\n"}, bot.store, "adds an entry")
    proc = bot.publish(bot.artifact("wd", bot.patches_commit(), resolutions=adds))
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1, proc.stdout + proc.stderr
    assert git(bot.origin, "rev-parse", RES).strip() == adds


def test_a_first_store_is_pushed_where_origin_has_none(bot: Bot) -> None:
    git(bot.origin, "update-ref", "-d", RES)
    first = commit(bot.forge, tree(bot.forge, {"r/first.json": "{}\n"}), message="the first store")
    proc = bot.publish(bot.artifact("wd", bot.patches_commit(), resolutions=first, expected_resolutions=""))
    assert proc.returncode == 0, proc.stderr
    assert git(bot.origin, "rev-parse", RES).strip() == first


def test_a_folder_against_a_file_is_a_clash_origin_wins(bot: Bot) -> None:
    maintainers = _store(bot, {"r/deep": "a file\n"}, bot.store, "a file")
    git(bot.forge, "push", "-q", "origin", f"{maintainers}:{RES}")
    in_the_way = {"r/deep/inside.json": "{}\n", "blobs/aa": None, "blobs/aa/x": "y\n"}  # under origin's files
    in_the_way |= {"edits/p/one.json": None, "edits/p": "a file\n"}  # a file where origin has a folder
    ours = _store(bot, in_the_way, bot.store, "folders")
    proc = bot.publish(bot.artifact("wd", bot.patches_commit(), resolutions=ours))
    assert proc.returncode == 0, proc.stderr
    got = entries(bot.origin, RES)
    assert got == entries(bot.origin, maintainers)
    said = proc.stdout.splitlines()[1:]
    assert [line.split(": ")[1] for line in said] == ["blobs/aa/x", "edits/p", "r/deep/inside.json"]
    assert said[1].startswith(f"{RES}: edits/p: kept origin's folder, not the bot's ")


def test_prepares_fetch_merges_a_diverged_local_store(bot: Bot) -> None:
    """A runner (or a maintainer's clone) with a store of its own: fetch_resolutions merges, it does not keep one."""
    maintainers = _store(bot, {"r/maint.json": "{}\n", "r/clash.json": '"maintainer"\n'}, bot.store, "origin's")
    git(bot.forge, "push", "-q", "origin", f"{maintainers}:{RES}")
    local = _store(bot, {"r/local.json": "{}\n", "r/clash.json": '"local"\n'}, bot.store, "local")
    git(bot.forge, "update-ref", RES, local)
    seen = refresh_pr.fetch_resolutions(bot.forge, "origin")
    assert seen == maintainers
    merged = git(bot.forge, "rev-parse", RES).strip()
    assert git(bot.forge, "rev-list", "--parents", "-n1", merged).split()[1:] == [maintainers, local]
    got = entries(bot.forge, merged)
    assert set(got) == set(STORE) | {"r/maint.json", "r/clash.json", "r/local.json"}
    assert got["r/clash.json"] == entries(bot.forge, maintainers)["r/clash.json"]
    # behind: moved up; ahead: kept; none on origin: left alone
    git(bot.forge, "update-ref", RES, bot.store)
    assert refresh_pr.fetch_resolutions(bot.forge, "origin") == maintainers
    assert git(bot.forge, "rev-parse", RES).strip() == maintainers
    ahead = _store(bot, {"r/new.json": "{}\n"}, maintainers, "ahead")
    git(bot.forge, "update-ref", RES, ahead)
    assert refresh_pr.fetch_resolutions(bot.forge, "origin") == maintainers
    assert git(bot.forge, "rev-parse", RES).strip() == ahead
    assert git(bot.forge, "for-each-ref", "refs/pq/remote-resolutions") == ""


# ---------------------------------------------------------------------------------------------
# prepare never commits nor deletes what it did not write


@pytest.fixture
def adopted_checkout(adopted_030: Path, tmp_path: Path) -> Path:
    """The real adopted project, committed (queue.toml and series; the bodies are gitignored) and pushed."""
    proj = copy_project(adopted_030, tmp_path / "adopted")
    git(proj, "add", "-A")
    git(proj, "commit", "-qm", "adopt vllm-omni 0.30.0")
    origin = tmp_path / "adopted-origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(proj, "remote", "add", "origin", str(origin))
    git(proj, "push", "-q", "origin", "main")
    return proj


USER_FILES: list[tuple[str, Callable[[Path], None], str]] = [
    ("notes", lambda p: (p / "patches" / "NOTES.md").write_text("mine\n"), "patches/NOTES.md"),
    ("a rules draft", lambda p: (p / "patches" / "check-rules.toml").write_text("#\n"), "patches/check-rules.toml"),
    ("in a folder", lambda p: _nested(p), "patches/drafts/a.txt"),
    ("an edited series", lambda p: (p / "patches" / "series").write_text("# mine\n"), "patches/series"),
    ("a staged file", lambda p: _staged(p), "patches/staged.txt"),
    ("a deleted series", lambda p: (p / "patches" / "series").unlink(), "patches/series"),
]


def _nested(p: Path) -> None:
    (p / "patches" / "drafts").mkdir()
    (p / "patches" / "drafts" / "a.txt").write_text("a\n")
    (p / "patches" / "drafts" / "b.txt").write_text("b\n")


def _staged(p: Path) -> None:
    (p / "patches" / "staged.txt").write_text("staged\n")
    git(p, "add", "patches/staged.txt")


@pytest.mark.parametrize(("make", "named"), [c[1:] for c in USER_FILES], ids=[c[0] for c in USER_FILES])
def test_prepare_refuses_a_user_file_under_patches(
    adopted_checkout: Path, tmp_path: Path, make: Callable[[Path], None], named: str
) -> None:
    assert refresh_pr.user_files(adopted_checkout) == []  # pq's own bodies are not the user's
    make(adopted_checkout)
    before, origin_refs = state(adopted_checkout), refs(tmp_path / "adopted-origin.git")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "prepare", "--target", "main", "--workdir", str(tmp_path / "wd")],
        cwd=adopted_checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    line = one_error_line(proc)
    more = r" \(and 1 more\)" if named == "patches/drafts/a.txt" else ""
    assert re.fullmatch(
        rf"refresh_pr: error: {re.escape(named)}{more}: a change under patches/ that prepare did not make and would "
        r"commit: commit it, move it out of patches/ or delete it, then run prepare again; nothing was changed",
        line,
    ), line
    assert state(adopted_checkout) == before and not (tmp_path / "wd").exists()
    assert refs(tmp_path / "adopted-origin.git") == origin_refs


def test_the_bodies_pq_reproduce_writes_are_not_user_files(adopted_checkout: Path) -> None:
    """Even where no .gitignore hides them: an untracked file the series names is pq's."""
    (adopted_checkout / ".gitignore").write_text("/npu_worker/\n")
    git(adopted_checkout, "commit", "-qam", "bodies not ignored")
    listed = [n for n in (adopted_checkout / "patches" / "series").read_text().split() if n.endswith(".patch")]
    assert listed and all((adopted_checkout / "patches" / n).is_file() for n in listed)
    assert refresh_pr.user_files(adopted_checkout) == []
    (adopted_checkout / "patches" / "9999-mine.patch").write_text("not in the series\n")
    assert refresh_pr.user_files(adopted_checkout) == ["patches/9999-mine.patch"]


# ---------------------------------------------------------------------------------------------
# patches/pending-refresh.toml and the pull request's title

HOSTILE_SPECS = [
    'x"\nevil = "injected',
    "a\\b\\u0041",
    "tab\tcr\rff\fbs\bnul\x00esc\x1bdel\x7f",
    "x; rm -rf ~",
    "$(touch pwned) `id`",
    "it's",
    "vllm-ascend==0.30.0rc2",
    "é 😀 \u2028\u2029 nel\x85",
]


@pytest.mark.parametrize("spec", HOSTILE_SPECS)
def test_pending_refresh_reads_back_the_spec(spec: str) -> None:
    text = refresh_pr.pending_refresh(spec, 3)
    data = tomllib.loads(text)
    assert data == {"target": spec, "conflicts": 3, "command": "pq refresh --to " + shlex.quote(spec)}
    assert shlex.split(data["command"]) == ["pq", "refresh", "--to", spec]
    assert [line.split(" = ")[0] for line in text.splitlines() if not line.startswith("#")] == [
        "target",
        "conflicts",
        "command",
    ]


@pytest.mark.parametrize(
    ("label", "subject"),
    [
        ("vllm-ascend 0.30.0rc2", "[NPU] Upgrade model runners to align with vllm-ascend 0.30.0rc2"),
        ("vllm-ascend==0.30.0rc2", "[NPU] Upgrade model runners to align with vllm-ascend 0.30.0rc2"),
        ("git 3e1b977b05c1", "[NPU] Upgrade model runners to align with vllm-ascend git 3e1b977b05c1"),
        ("main", "[NPU] Upgrade model runners to align with vllm-ascend main"),
    ],
)
def test_the_title_names_vllm_ascend_once(label: str, subject: str) -> None:
    assert refresh_pr.message(label, {}, None, "release").splitlines()[0] == subject
