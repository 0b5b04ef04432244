"""scripts/refresh_pr.py end to end: real git remotes (local bare repositories), the real pq, a real series.

Only the pull-request calls go to a recording implementation of the script's one GitHub interface.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import git, new_project, pq, push_to_bare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import refresh_pr  # noqa: E402

BASE_018 = "5df2ddd8dbb8"  # what pq adopt finds for vllm-omni 0.18.0
CONFLICTED = "3e1b977b05c1"  # the base of 0.20.0: two conflicts from 0.18.0's series
CLEAN = "2db12ed935da"  # the first upstream commit after BASE_018 that touched the runner: replays cleanly


class Recorder:
    """A :class:`refresh_pr.PullRequests` that remembers what it was asked to do."""

    def __init__(self) -> None:
        self.prs: dict[int, dict[str, object]] = {}
        self.calls: list[tuple[str, object]] = []

    def find(self, branch: str) -> int | None:
        return next((n for n, pr in self.prs.items() if pr["branch"] == branch), None)

    def create(self, branch: str, base: str, title: str, body: str, *, draft: bool, labels: Sequence[str]) -> int:
        number = len(self.prs) + 1
        self.prs[number] = {
            "branch": branch,
            "base": base,
            "title": title,
            "body": body,
            "draft": draft,
            "labels": list(labels),
            "comments": [],
        }
        self.calls.append(("create", number))
        return number

    def update(self, number: int, title: str, body: str, *, draft: bool, labels: Sequence[str]) -> None:
        self.prs[number].update(title=title, body=body, draft=draft, labels=list(labels))
        self.calls.append(("update", number))

    def comment_once(self, number: int, marker: str, body: str) -> None:
        comments = self.prs[number]["comments"]
        assert isinstance(comments, list)
        if not any(marker in c for c in comments):
            comments.append(body)
            self.calls.append(("comment", number))


def seed(tmp: Path, corpus: Path, *, fork: bool) -> Path:
    """A project repository with the 0.18.0 series on main, pushed to a bare origin."""
    proj = new_project(tmp / "seed")
    if fork:  # a fork owns its series: patch bodies are committed
        (proj / ".gitignore").write_text("/npu_worker/\n/reports/\n")
        pq(proj, "adopt", str(corpus / "vllm-omni-0.18.0" / "npu"), "--at", BASE_018)
    else:  # as this repository: queue.toml and series only, the bodies come back from the registry release
        pq(proj, "adopt", "vllm-omni==0.18.0", "--at", BASE_018)
    return push_to_bare(proj, "adopt vllm-omni 0.18.0")


def checkout(origin: Path, dst: Path) -> Path:
    git(origin.parent, "clone", "-q", str(origin), str(dst))
    return dst


def remote_head(origin: Path, branch: str) -> str:
    out = git(origin, "for-each-ref", "--format=%(objectname)", f"refs/heads/{branch}").strip()
    return out


def test_conflicts_give_a_draft_then_no_noise_then_maintainers_keep_the_branch(corpus: Path, tmp_path: Path) -> None:
    origin = seed(tmp_path, corpus, fork=False)
    prs = Recorder()
    branch = refresh_pr.branch_of(CONFLICTED)
    assert branch == f"pq/refresh/{CONFLICTED}"

    # 1. the scheduled run: a draft pull request with the needs-resolution label
    work = checkout(origin, tmp_path / "run1")
    decision = refresh_pr.prepare(CONFLICTED, tmp_path / "wd1", root=work)
    assert decision.action == "update" and decision.draft and decision.labels == ("needs-resolution",)
    assert (tmp_path / "wd1" / "report.json").is_file() and (tmp_path / "wd1" / "npu_worker").is_dir()
    assert "conflict" in (tmp_path / "wd1" / "report.md").read_text()
    assert git(work, "status", "--porcelain").strip() == ""  # the checkout is left as it was
    refresh_pr.publish(tmp_path / "wd1", root=work, prs=prs)
    head = remote_head(origin, branch)
    assert head == decision.commit
    msg = git(origin, "log", "-1", "--format=%B", head)
    assert msg.startswith("[NPU] Upgrade model runners to align with vllm-ascend git ")
    assert "2 conflict(s) need resolution" in msg and f"Pq-Refresh: {CONFLICTED}" in msg
    assert git(origin, "show", f"{head}:patches/pending-refresh.toml").count("conflicts = 2") == 1
    assert prs.calls == [("create", 1)] and prs.prs[1]["draft"] is True
    assert prs.prs[1]["labels"] == ["needs-resolution"] and str(prs.prs[1]["body"]).startswith("## NPU runners")

    # 2. the next run, nothing new upstream: no commit, no pull-request call
    work2 = checkout(origin, tmp_path / "run2")
    decision2 = refresh_pr.prepare(CONFLICTED, tmp_path / "wd2", root=work2)
    assert decision2.action == "noop"
    refresh_pr.publish(tmp_path / "wd2", root=work2, prs=prs)
    assert remote_head(origin, branch) == head and prs.calls == [("create", 1)]

    # 3. a maintainer pushes a resolution commit: the next run keeps it and says why, once
    human = checkout(origin, tmp_path / "maintainer")
    git(human, "checkout", "-q", branch)
    (human / "patches" / "pending-refresh.toml").unlink()
    git(human, "commit", "-qam", "resolve the refresh by hand")
    git(human, "push", "-q", "origin", branch)
    theirs = remote_head(origin, branch)
    for run in ("run3", "run4"):
        work3 = checkout(origin, tmp_path / run)
        decision3 = refresh_pr.prepare(CONFLICTED, tmp_path / f"wd-{run}", root=work3)
        assert decision3.action == "comment" and theirs[:12] in decision3.reason
        refresh_pr.publish(tmp_path / f"wd-{run}", root=work3, prs=prs)
        assert remote_head(origin, branch) == theirs
    assert prs.calls == [("create", 1), ("comment", 1)]


def test_a_clean_target_commits_the_refreshed_series(corpus: Path, tmp_path: Path) -> None:
    origin = seed(tmp_path, corpus, fork=True)
    prs = Recorder()
    work = checkout(origin, tmp_path / "run")
    decision = refresh_pr.prepare(CLEAN, tmp_path / "wd", root=work)
    assert decision.action == "update" and not decision.draft and decision.labels == ()
    check = (tmp_path / "wd" / "check.json").read_text()
    assert '"errors": 0' in check
    refresh_pr.publish(tmp_path / "wd", root=work, prs=prs)
    head = remote_head(origin, refresh_pr.branch_of(CLEAN))
    changed = git(origin, "diff", "--name-only", "main", head).split()
    assert "patches/queue.toml" in changed and any(p.endswith(".patch") for p in changed)
    msg = git(origin, "log", "-1", "--format=%B", head)
    assert "omni blocks preserved" in msg and "Upstream changes in the carried methods:" in msg
    assert prs.prs[1]["draft"] is False and prs.prs[1]["labels"] == []
    # the pushed series builds: pq on a checkout of the branch reproduces what prepare built
    built = checkout(origin, tmp_path / "verify")
    git(built, "checkout", "-q", refresh_pr.branch_of(CLEAN))
    pq(built, "build")
    for f in (tmp_path / "wd" / "npu_worker").glob("*.py"):
        assert (built / "npu_worker" / f.name).read_bytes() == f.read_bytes(), f.name


def test_target_names_are_slugged() -> None:
    assert refresh_pr.branch_of("vllm-ascend==0.30.0rc2") == "pq/refresh/vllm-ascend-0.30.0rc2"
    assert refresh_pr.branch_of("main") == "pq/refresh/main"
    with pytest.raises(refresh_pr.ScriptError):
        refresh_pr.slug("==")
