"""scripts/refresh_pr.py end to end: real git remotes (local bare repositories), the real pq, a real series.

Only the pull-request calls go to a recording implementation of the script's one GitHub interface.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from conftest import NEWEST_OMNI, copy_project, git, new_project, pq, push_to_bare
from test_report import named, well_formed

from patch_queue import presets
from patch_queue.commands.adopt import read_downstream
from patch_queue.outputs.report import BODY_BUDGET, github_chars, markdown

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import refresh_pr  # noqa: E402

CONFLICTED = "3e1b977b05c1"  # the base of 0.20.0: conflicts from 0.18.0's series
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


def seed(tmp: Path, adopted: Path) -> Path:
    """A project repository with the 0.18.0 series on main, pushed to a bare origin: a copy of ``adopted``, the
    session's adoption of 0.18.0 as this repository keeps it (`released_018_once`: queue.toml and series only, the
    bodies come back from the registry release) or as a fork does (`forked_018_once`: the bodies committed)."""
    return push_to_bare(copy_project(adopted, tmp / "seed"), "adopt vllm-omni 0.18.0")


def checkout(origin: Path, dst: Path) -> Path:
    git(origin.parent, "clone", "-q", str(origin), str(dst))
    return dst


def remote_head(origin: Path, branch: str) -> str:
    out = git(origin, "for-each-ref", "--format=%(objectname)", f"refs/heads/{branch}").strip()
    return out


def test_conflicts_give_a_draft_then_no_noise_then_maintainers_keep_the_branch(
    released_018_once: Path, tmp_path: Path
) -> None:
    origin = seed(tmp_path, released_018_once)
    prs = Recorder()
    branch = refresh_pr.branch_of(CONFLICTED)
    assert branch == f"pq/refresh/{CONFLICTED}"

    # 1. the scheduled run: a draft pull request with the needs-resolution label
    work = checkout(origin, tmp_path / "run1")
    decision = refresh_pr.prepare(CONFLICTED, tmp_path / "wd1", root=work)
    assert decision.action == "update" and decision.draft and decision.labels == ("needs-resolution",)
    assert (tmp_path / "wd1" / "report.json").is_file() and (tmp_path / "wd1" / "npu_worker").is_dir()
    assert "conflict" in (tmp_path / "wd1" / "report.md").read_text()
    # the artifact holds the whole report; the body and the job summary are the same renderer within budgets
    wd1 = tmp_path / "wd1"
    data = json.loads((wd1 / "report.json").read_text())
    assert (wd1 / "report.md").read_text() == markdown(data, limit=None, queue=presets.NPU)
    assert (wd1 / "summary.md").read_text() == (wd1 / "report.md").read_text()  # far under 1 MiB
    assert (wd1 / "body.md").read_text() == markdown(
        data, full_report=refresh_pr.full_report_pointer(CONFLICTED), queue=presets.NPU
    )
    refresh_pr.render(work, wd1, CONFLICTED, budget=3_000)  # a budget this report passes: shortened
    body = (wd1 / "body.md").read_text()
    assert github_chars(body) <= 3_000 < github_chars((wd1 / "report.md").read_text())
    well_formed(body)
    assert data["conflicts"] and all(named(body, c) for c in data["conflicts"])
    assert f"in the artifact `pq-refresh-{CONFLICTED}`" in body
    assert git(work, "status", "--porcelain").strip() == ""  # the checkout is left as it was
    refresh_pr.publish(tmp_path / "wd1", target=CONFLICTED, root=work, prs=prs)
    head = remote_head(origin, branch)
    assert head == decision.commit
    msg = git(origin, "log", "-1", "--format=%B", head)
    assert msg.startswith("[NPU] Upgrade model runners to align with vllm-ascend git ")
    assert f"{len(data['conflicts'])} conflict(s) need resolution" in msg and f"Pq-Refresh: {CONFLICTED}" in msg
    assert (
        git(origin, "show", f"{head}:patches/pending-refresh.toml").count(f"conflicts = {len(data['conflicts'])}") == 1
    )
    assert prs.calls == [("create", 1)] and prs.prs[1]["draft"] is True
    assert prs.prs[1]["labels"] == ["needs-resolution"] and str(prs.prs[1]["body"]).startswith("## NPU runners")
    assert prs.prs[1]["body"] == body  # publish posts body.md

    # 2. the next run, nothing new upstream: no commit, no pull-request call
    work2 = checkout(origin, tmp_path / "run2")
    decision2 = refresh_pr.prepare(CONFLICTED, tmp_path / "wd2", root=work2)
    assert decision2.action == "noop"
    refresh_pr.publish(tmp_path / "wd2", target=CONFLICTED, root=work2, prs=prs)
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
        refresh_pr.publish(tmp_path / f"wd-{run}", target=CONFLICTED, root=work3, prs=prs)
        assert remote_head(origin, branch) == theirs
    assert prs.calls == [("create", 1), ("comment", 1)]


def test_the_vllm_omni_target_merges_the_newest_release_and_a_fresh_clone_reproduces_it(
    released_030_once: Path, tmp_path: Path
) -> None:
    proj = copy_project(released_030_once, tmp_path / "seed")  # `pq adopt vllm-omni==0.30.0 --at BASE_030`
    origin = push_to_bare(proj, "adopt vllm-omni 0.30.0")
    prs = Recorder()
    work = checkout(origin, tmp_path / "run")
    decision = refresh_pr.prepare("vllm-omni", tmp_path / "wd", root=work)
    assert decision.action == "update" and decision.branch == "pq/refresh/vllm-omni"
    assert decision.title == f"[NPU] Take in the NPU runners of vllm-omni {NEWEST_OMNI}"
    body = (tmp_path / "wd" / "body.md").read_text()
    assert "merged" in body
    # step 7: the GPU side's changes between the release taken in before and this one, for review
    sync = json.loads((tmp_path / "wd" / "sync.json").read_text())
    assert (sync["source"], sync["since"]) == (f"vllm-omni=={NEWEST_OMNI}", "vllm-omni==0.30.0")
    assert f"## GPU-side sync: vllm-omni=={NEWEST_OMNI} since vllm-omni==0.30.0\n" in body
    assert all(f"#### `{p['id']}`" in body for p in sync["proposals"]) and sync["proposals"]
    refresh_pr.publish(tmp_path / "wd", target="vllm-omni", root=work, prs=prs)
    head = remote_head(origin, "pq/refresh/vllm-omni")
    msg = git(origin, "log", "-1", "--format=%B", head)
    assert "Downstream changes:" in msg and "Pq-Refresh: vllm-omni" in msg
    assert prs.prs[1]["title"] == decision.title
    # the next run: the same merge, already on the branch: nothing
    again = refresh_pr.prepare("vllm-omni", tmp_path / "wd2", root=checkout(origin, tmp_path / "run2"))
    assert again.action == "noop"
    # a maintainer's fresh clone of the branch reproduces the merged series: the release's modules, byte for byte
    fresh = checkout(origin, tmp_path / "fresh")
    git(fresh, "checkout", "-q", "pq/refresh/vllm-omni")
    pq(fresh, "reproduce")
    release = read_downstream(f"vllm-omni=={NEWEST_OMNI}", progress=None, spec=presets.NPU)[0]
    assert {p.name: p.read_bytes() for p in (fresh / "npu_worker").glob("*.py")} == release
    # merged into main, the next run finds the series holding the newest release: no commit, no pull-request call
    git(fresh, "checkout", "-q", "main")
    git(fresh, "merge", "-q", "--ff-only", "pq/refresh/vllm-omni")
    git(fresh, "push", "-q", "origin", "main")
    last = refresh_pr.prepare("vllm-omni", tmp_path / "wd3", root=checkout(origin, tmp_path / "run3"))
    assert last.action == "noop" and "already up to date" in last.reason
    assert prs.calls == [("create", 1)]


def test_a_merge_with_conflicts_goes_through_a_maintainer_and_reproduces(
    upstream_resolved_once: Path, tmp_path: Path
) -> None:
    """The bot's round trip with a merge in it: prepare (conflicts: pending-merge.toml, a draft), publish, a
    maintainer merges and resolves on the branch and pushes with the store, a fresh clone reproduces it."""
    # this repository's refresh onto vllm-ascend 0.30.0rc2, resolved: every region to upstream's side (conftest)
    proj = copy_project(upstream_resolved_once, tmp_path / "seed")
    origin = push_to_bare(proj, "refreshed onto 0.30.0rc2")
    git(proj, "push", "-q", str(origin), "refs/pq/resolutions")
    prs = Recorder()
    work = checkout(origin, tmp_path / "run")
    decision = refresh_pr.prepare(f"vllm-omni=={NEWEST_OMNI}", tmp_path / "wd", root=work)
    assert decision.action == "update" and decision.draft and decision.labels == ("needs-resolution",)
    refresh_pr.publish(tmp_path / "wd", target=f"vllm-omni=={NEWEST_OMNI}", root=work, prs=prs)
    branch = refresh_pr.branch_of(f"vllm-omni=={NEWEST_OMNI}")
    pending = git(origin, "show", f"{remote_head(origin, branch)}:patches/pending-merge.toml")
    assert f'command = "pq merge vllm-omni=={NEWEST_OMNI}"' in pending
    # the maintainer, on the branch
    mine = checkout(origin, tmp_path / "maintainer")
    git(mine, "checkout", "-q", branch)
    git(mine, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
    pq(mine, "reproduce")
    pq(mine, "merge", f"vllm-omni=={NEWEST_OMNI}", check=3)
    for f in sorted((mine / "npu_worker").glob("*.py")):
        at = next((n for n, line in enumerate(f.read_text().splitlines(), 1) if line.startswith("<<<<<<< ")), None)
        while at is not None:
            pq(mine, "resolve", "--theirs", "--alone", f"{f}:{at}")
            lines = f.read_text().splitlines()
            at = next((n for n, line in enumerate(lines, 1) if line.startswith("<<<<<<< ")), None)
    pq(mine, "continue", "--accept-errors")
    (mine / "patches" / "pending-merge.toml").unlink()
    git(mine, "add", "-A", "patches")
    git(mine, "commit", "-qm", f"[NPU] take in vllm-omni {NEWEST_OMNI}")
    git(mine, "push", "-q", "origin", f"HEAD:{branch}", "refs/pq/resolutions")
    # anyone: a fresh clone of the branch with the store gives the maintainer's bytes
    fresh = checkout(origin, tmp_path / "fresh")
    git(fresh, "checkout", "-q", branch)
    git(fresh, "fetch", "-q", "origin", "refs/pq/resolutions:refs/pq/resolutions")
    pq(fresh, "reproduce")
    for folder in ("npu_worker", "patches"):
        assert {p.name: p.read_bytes() for p in (fresh / folder).iterdir() if p.is_file()} == {
            p.name: p.read_bytes() for p in (mine / folder).iterdir() if p.is_file()
        }, folder
    talker = read_downstream(f"vllm-omni=={NEWEST_OMNI}", progress=None, spec=presets.NPU)[0]["talker_multiframe.py"]
    assert (fresh / "npu_worker" / "talker_multiframe.py").read_bytes() == talker


def test_a_clean_target_commits_the_refreshed_series(forked_018_once: Path, tmp_path: Path) -> None:
    origin = seed(tmp_path, forked_018_once)
    prs = Recorder()
    work = checkout(origin, tmp_path / "run")
    decision = refresh_pr.prepare(CLEAN, tmp_path / "wd", root=work)
    assert decision.action == "update" and not decision.draft and decision.labels == ()
    check = (tmp_path / "wd" / "check.json").read_text()
    assert '"errors": 0' in check
    refresh_pr.publish(tmp_path / "wd", target=CLEAN, root=work, prs=prs)
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


def test_a_result_with_check_errors_is_committed_as_a_draft(forked_018_once: Path, tmp_path: Path) -> None:
    """The bot refreshes with --accept-errors: a clean result that pq check finds errors in is committed (its
    lineage step lists them) and its pull request is a draft labelled check-errors, the errors in its body."""
    origin = seed(tmp_path, forked_018_once)
    rules = checkout(origin, tmp_path / "rules")
    (rules / "patches" / "check-rules.toml").write_text(
        '[[rule]]\nid = "no-execute-model"\nkind = "regex"\nseverity = "error"\n'
        "pattern = '\\bdef execute_model\\b'\nmessage = \"a project rule the result breaks\"\n"
    )
    git(rules, "add", "patches/check-rules.toml")
    git(rules, "commit", "-qm", "a project rule")
    git(rules, "push", "-q", "origin", "main")
    prs = Recorder()
    work = checkout(origin, tmp_path / "run")
    decision = refresh_pr.prepare(CLEAN, tmp_path / "wd", root=work)
    report = json.loads((tmp_path / "wd" / "report.json").read_text())
    errors = report["accepted_errors"]
    assert errors and all("[no-execute-model]" in e for e in errors) and not report["pending"]
    assert decision.action == "update" and decision.draft and decision.labels == (refresh_pr.CHECK_LABEL,)
    assert f"finished over {len(errors)} pq check error(s)" in decision.reason
    refresh_pr.publish(tmp_path / "wd", target=CLEAN, root=work, prs=prs)
    pr = prs.prs[1]
    assert pr["draft"] is True and pr["labels"] == ["check-errors"]
    assert "**Finished over " in str(pr["body"]) and "[no-execute-model]" not in str(pr["title"])
    head = remote_head(origin, refresh_pr.branch_of(CLEAN))
    msg = git(origin, "log", "-1", "--format=%B", head)
    assert f"- pq check: finished over {len(errors)} error(s) (--accept-errors); fix them before merging:" in msg
    queue = git(origin, "show", f"{head}:patches/queue.toml")
    assert queue.count("[no-execute-model]") == len(errors) and "accepted_errors = [" in queue


def test_target_names_are_slugged() -> None:
    assert refresh_pr.branch_of("vllm-ascend==0.30.0rc2") == "pq/refresh/vllm-ascend-0.30.0rc2"
    assert refresh_pr.branch_of("main") == "pq/refresh/main"
    with pytest.raises(refresh_pr.ScriptError):
        refresh_pr.slug("==")


# ---------------------------------------------------------------------------------------------
# the token: checkouts do not persist it; only git's requests to the remote carry it (PQ_GIT_TOKEN)

TOKEN = "ghs_test-token-0123456789"


class GitHttp:
    """A git smart-HTTP server on 127.0.0.1 (``git http-backend``) that demands the token, as GitHub does.

    A request without ``Authorization: basic base64(x-access-token:TOKEN)`` gets 401; every
    Authorization header it saw is kept in ``seen``.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seen: list[str] = []
        self.server = make_server("127.0.0.1", 0, self.app, handler_class=_QuietHandler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> GitHttp:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if auth:
            self.seen.append(auth)
        expected = "basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
        if auth.lower() != expected.lower():
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="test"')])
            return [b""]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        cgi = {
            "PATH": os.environ.get("PATH", ""),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "x-access-token",  # http-backend serves receive-pack to authenticated users
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "PATH_INFO": environ.get("PATH_INFO", ""),
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": environ.get("HTTP_CONTENT_ENCODING", ""),
            "GIT_PROTOCOL": environ.get("HTTP_GIT_PROTOCOL", ""),
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=cgi, capture_output=True, check=True).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        headers = [tuple(line.split(": ", 1)) for line in head.decode().split("\r\n") if line]
        status = next((v for k, v in headers if k.lower() == "status"), "200 OK")
        start_response(status, [(k, v) for k, v in headers if k.lower() != "status"])
        return [payload]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _update_workdir(tmp: Path, origin: Path) -> tuple[Path, Path, str]:
    """A checkout of ``origin`` and a work folder whose decision is an ``update`` (what prepare leaves)."""
    work = checkout(origin, tmp / "publish")
    (work / "patches").mkdir()
    (work / "patches" / "refreshed.txt").write_text("the refreshed series\n")  # prepare commits only patches/
    git(work, "add", "patches/refreshed.txt")
    tree = git(work, "write-tree").strip()
    commit = git(work, "commit-tree", tree, "-p", "HEAD", "-m", "refresh").strip()
    git(work, "reset", "-q", "--hard", "HEAD")
    git(work, "update-ref", refresh_pr.BUNDLE_REF, commit)
    wd = tmp / "wd"
    wd.mkdir()
    git(work, "bundle", "create", "-q", str(wd / "branch.bundle"), refresh_pr.BUNDLE_REF)
    git(work, "update-ref", "-d", refresh_pr.BUNDLE_REF)
    branch = refresh_pr.branch_of("main")
    refresh_pr.Decision("update", branch, "main", "0 conflict(s)", commit=commit, title="[NPU] refresh").write(wd)
    return work, wd, commit


def test_publish_pushes_over_https_with_the_token_and_nothing_else_sees_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publish job checks out with persist-credentials: false; the push authenticates with PQ_GIT_TOKEN."""
    served = tmp_path / "served"
    served.mkdir()
    git(served, "init", "-q", "--bare", "-b", "main", "origin.git")
    seed_repo = new_project(tmp_path / "seed")
    git(seed_repo, "push", "-q", str(served / "origin.git"), "main")
    origin = served / "origin.git"
    work, wd, commit = _update_workdir(tmp_path, origin)
    branch = refresh_pr.branch_of("main")
    with GitHttp(served) as server:
        # as actions/checkout leaves it: an http(s) remote and no credentials in .git/config
        git(work, "remote", "set-url", "origin", f"{server.url}/origin.git")
        assert "extraheader" not in git(work, "config", "--list")

        monkeypatch.delenv(refresh_pr.TOKEN_ENV, raising=False)
        with pytest.raises(refresh_pr.ScriptError):
            refresh_pr.publish(wd, target="main", root=work, prs=Recorder())
        assert remote_head(origin, branch) == "" and server.seen == []

        monkeypatch.setenv(refresh_pr.TOKEN_ENV, TOKEN)
        prs = Recorder()
        refresh_pr.publish(wd, target="main", root=work, prs=prs)
        assert remote_head(origin, branch) == commit and prs.calls == [("create", 1)]
        assert server.seen and all(TOKEN not in h for h in server.seen)  # base64 on the wire, as GitHub expects
        # prepare's reads go through the same door: it sees the branch it just pushed
        assert refresh_pr._remote_head(work, "origin", branch) == commit

    # still nothing on disk, and no other process inherits the token
    assert TOKEN not in (work / ".git" / "config").read_text()
    probe = [sys.executable, "-c", f"import os; print(os.environ.get({refresh_pr.TOKEN_ENV!r}, 'absent'))"]
    assert refresh_pr.run(probe, cwd=work).stdout.strip() == "absent"


def test_the_token_is_sent_only_to_http_remotes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = new_project(tmp_path / "repo")
    git(repo, "remote", "add", "origin", "https://github.com/owner/pq.git")
    git(repo, "remote", "add", "local", str(tmp_path / "origin.git"))
    monkeypatch.delenv(refresh_pr.TOKEN_ENV, raising=False)
    assert refresh_pr.remote_auth(repo, "origin") == {}
    monkeypatch.setenv(refresh_pr.TOKEN_ENV, TOKEN)
    monkeypatch.delenv("GIT_CONFIG_COUNT", raising=False)
    env = refresh_pr.remote_auth(repo, "origin")
    assert env["GIT_CONFIG_COUNT"] == "1" and env["GIT_CONFIG_KEY_0"] == "http.https://github.com/.extraheader"
    header = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert env["GIT_CONFIG_VALUE_0"] == f"AUTHORIZATION: basic {header}"
    # git itself reads it for that host only
    merged = {**os.environ, **env}
    got = subprocess.run(
        ["git", "config", "--get-urlmatch", "http.extraheader", "https://github.com/owner/pq.git"],
        cwd=repo,
        env=merged,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert got == f"AUTHORIZATION: basic {header}"
    other = subprocess.run(
        ["git", "config", "--get-urlmatch", "http.extraheader", "https://example.com/x.git"],
        cwd=repo,
        env=merged,
        capture_output=True,
        text=True,
        check=False,
    )
    assert other.returncode == 1 and other.stdout == ""
    assert refresh_pr.remote_auth(repo, "local") == {}  # a path: nothing to authenticate
    assert refresh_pr.remote_auth(repo, str(tmp_path / "origin.git")) == {}
    # an environment that already sets git config through GIT_CONFIG_COUNT keeps its entries
    for key, value in {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "a.b", "GIT_CONFIG_VALUE_0": "1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GIT_CONFIG_KEY_1", "a.c")
    monkeypatch.setenv("GIT_CONFIG_VALUE_1", "2")
    assert set(refresh_pr.remote_auth(repo, "origin")) == {"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_2", "GIT_CONFIG_VALUE_2"}


# ---------------------------------------------------------------------------------------------
# the body: within GitHub's limit, from a file


def test_budgets_agree() -> None:
    assert refresh_pr.BODY_BUDGET == BODY_BUDGET  # publish does not import pq: the number is written twice
    for text in ("abc", "😀\né", ""):
        assert refresh_pr.github_chars(text) == github_chars(text)


def test_fit_cuts_only_between_blocks() -> None:
    side = "x = 1\n\n" * 400  # blank lines inside the code block: no place to cut
    body = "## title\n\npara\n\n" + "".join(
        f"<details><summary>{i}</summary>\n\n```python\n{side}```\n\n</details>\n\n" for i in range(40)
    )
    assert github_chars(body) > BODY_BUDGET >= github_chars(refresh_pr.fit(body))
    out = refresh_pr.fit(body, budget=20_000)
    assert github_chars(out) <= 20_000 and out.endswith(refresh_pr.FIT_NOTE + "\n")
    well_formed(out)
    assert out.count("<details>") >= 1 and body.startswith(out[: -len(refresh_pr.FIT_NOTE) - 3])
    assert refresh_pr.fit("short\n") == "short\n"


def test_the_comment_on_a_taken_branch_fits(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    wd.mkdir()
    reason = "maintainers pushed 9000 commit(s) to pq/refresh/main (" + ", ".join(["0123456789ab"] * 9000) + ")"
    refresh_pr.Decision("comment", "pq/refresh/main", "main", reason).write(wd)
    prs = Recorder()
    prs.prs[1] = {"branch": "pq/refresh/main", "comments": []}
    refresh_pr.publish(wd, target="main", root=tmp_path, prs=prs)
    (comment,) = prs.prs[1]["comments"]  # type: ignore[misc]
    assert comment.startswith(refresh_pr.COMMENT_MARKER) and github_chars(comment) <= BODY_BUDGET


def test_gh_gets_the_body_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GhCli passes every body with --body-file: no body on gh's command line, whatever its size."""
    log = tmp_path / "gh.log"
    fake = tmp_path / "bin" / "gh"
    fake.parent.mkdir()
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        "args = sys.argv[1:]\n"
        "body = open(args[args.index('--body-file') + 1]).read() if '--body-file' in args else None\n"
        f"open({str(log)!r}, 'a').write(json.dumps([args, body]) + '\\n')\n"
        "print('https://github.com/o/r/pull/7' if args[:2] == ['pr', 'create'] else '')\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    body = "## body\n\n" + "é" * 70_000 + "\n"
    gh = refresh_pr.GhCli(tmp_path)
    assert gh.create("b", "main", "t", body, draft=True, labels=["needs-resolution"]) == 7
    gh.update(7, "t", body, draft=False, labels=[])
    gh.comment_once(7, "<!-- m -->", "<!-- m -->\nhello\n")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    with_body = [(args, got) for args, got in calls if got is not None]
    assert [args[:2] for args, _ in with_body] == [["pr", "create"], ["pr", "edit"], ["pr", "comment"]]
    assert [got for _, got in with_body] == [body, body, "<!-- m -->\nhello\n"]
    assert all("--body" not in args and not any("éé" in a for a in args) for args, _ in calls)
