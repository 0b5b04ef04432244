"""The scheduled rebase pull request, in two halves the workflow calls (`.github/workflows/refresh.yml`).

``prepare`` runs with a read-only token: it refreshes the series onto the target
(``pq refresh --no-stop`` with its reports and annotations; on a result without conflicts that
runs ``pq check`` too), commits the result
on top of the default branch with the maintainers' message template, and writes everything the
second half needs into a work folder (reports, the built package, ``decision.json`` and a git
bundle of the commit).  It decides one of:

- ``update``: push the commit to ``pq/refresh/<target>`` and open or update its pull request
  (a draft with the ``needs-resolution`` label when conflicts are left);
- ``noop``: nothing changed upstream since the branch was last pushed (same tree): no commit, no
  pull-request edit, no noise;
- ``comment``: maintainers pushed their own commits to the branch; it is theirs now, the bot does
  not force-push over it and says so on the pull request (once).

``publish`` runs with the write token and executes no code from the refreshed branch: it only
fetches the bundle, pushes with ``--force-with-lease`` against the branch head ``prepare`` saw,
and talks to GitHub through :class:`GhCli` (the ``gh`` command line), the one part the tests do
not exercise (they pass a recording implementation of :class:`PullRequests`).

Credentials: the workflow checks out without persisting its token (nothing in ``.git/config``) and
hands the token to both halves as ``PQ_GIT_TOKEN``.  Only git's requests to the remote (``ls-remote``,
``fetch``, ``push``: :func:`remote_git`) carry it, as an HTTP header in that one git process's
environment; every other subprocess (``pq``, which builds and checks vendored code, ``gh``) runs
without it.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

BOT_NAME = "pq-bot"
BOT_EMAIL = "pq-bot@users.noreply.github.com"
TRAILER = "Pq-Refresh"
LABEL = "needs-resolution"
BUNDLE_REF = "refs/heads/pq-refresh-commit"
COMMENT_MARKER = "<!-- pq-refresh: maintainer commits -->"
RESOLUTIONS = "refs/pq/resolutions"  # recorded resolutions and edits: the lineage's other half
TARGETS = {"release": None, "main": "main"}  # name -> the --to spec (None: the newest release)
TOKEN_ENV = "PQ_GIT_TOKEN"  # the workflow's token, for git's requests to the remote only


class ScriptError(Exception):
    pass


def slug(target: str) -> str:
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", target).strip("-.")
    if not out:
        raise ScriptError(f"target {target!r} has no usable name")
    return out


def branch_of(target: str) -> str:
    return f"pq/refresh/{slug(target)}"


def run(
    cmd: Sequence[str], *, cwd: Path, ok: Sequence[int] = (0,), env: dict[str, str] | None = None, capture: bool = True
) -> subprocess.CompletedProcess[str]:
    # the token never reaches a subprocess through the inherited environment (see remote_auth)
    inherited = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    proc = subprocess.run(
        list(cmd), cwd=cwd, text=True, capture_output=capture, env={**inherited, **(env or {})}, check=False
    )
    if proc.returncode not in ok:
        detail = (proc.stderr or proc.stdout or "").strip().splitlines()
        raise ScriptError(f"{' '.join(cmd[:3])} ... exited {proc.returncode}: {detail[-1] if detail else ''}")
    return proc


def git(root: Path, *args: str, ok: Sequence[int] = (0,), env: dict[str, str] | None = None) -> str:
    return run(["git", *args], cwd=root, ok=ok, env={"GIT_TERMINAL_PROMPT": "0", **(env or {})}).stdout.strip()


def remote_auth(root: Path, remote: str) -> dict[str, str]:
    """The environment that makes git send ``$PQ_GIT_TOKEN`` to ``remote`` (an http(s) URL or a remote's name).

    As actions/checkout does when it persists credentials, but for one git process: an
    ``http.<scheme>://<host>/.extraheader`` set through ``GIT_CONFIG_COUNT``/``KEY``/``VALUE``, so the
    token is never written to ``.git/config``.  Empty without a token or for a remote that is not
    http(s) (a path, as in the tests' bare repositories).
    """
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        return {}
    url = git(root, "ls-remote", "--get-url", remote)
    m = re.match(r"^(https?)://(?:[^/@]*@)?([^/]+)", url)
    if m is None:
        return {}
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    n = int(os.environ.get("GIT_CONFIG_COUNT", "0") or 0)
    return {
        "GIT_CONFIG_COUNT": str(n + 1),
        f"GIT_CONFIG_KEY_{n}": f"http.{m.group(1)}://{m.group(2)}/.extraheader",
        f"GIT_CONFIG_VALUE_{n}": f"AUTHORIZATION: basic {basic}",
    }


def remote_git(root: Path, remote: str, *args: str, ok: Sequence[int] = (0,)) -> str:
    """``git <args>`` for a command that talks to ``remote`` (``ls-remote``, ``fetch``, ``push``), with the token."""
    return git(root, *args, ok=ok, env=remote_auth(root, remote))


def pq_command(root: Path) -> list[str]:
    local = root / ".venv" / "bin" / "pq"
    return [str(local)] if local.is_file() else [sys.executable, "-m", "patch_queue"]


# ---------------------------------------------------------------------------------------------
# the commit message


def _dicts(value: object) -> list[dict[str, object]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def message(target_label: str, report: dict[str, object], check: dict[str, object] | None, target: str) -> str:
    """The maintainers' template: subject, upstream changes, GPU sync, omni blocks, trailer."""
    conflicts = _dicts(report.get("conflicts"))
    flags = _dicts(report.get("flags"))
    lines = [f"[NPU] Upgrade model runners to align with vllm-ascend {target_label}", ""]
    seen: dict[str, dict[str, object]] = {}
    for item in conflicts + flags:
        for c in _dicts(item.get("culprits")):
            if isinstance(c.get("commit"), str):
                seen.setdefault(str(c["commit"]), c)
    lines.append("Upstream changes in the carried methods:")
    if seen:
        ordered = sorted(seen.values(), key=lambda c: (str(c.get("date", "")), str(c["commit"])))
        for c in ordered:
            pr = f" (#{c['pr']})" if c.get("pr") else ""
            subject = re.sub(r"\s*\(#\d+\)\s*$", "", str(c.get("subject", "")))
            lines.append(f"- {str(c['commit'])[:12]} {subject}{pr}")
    else:
        lines.append("- none that touched a conflict or review flag (or no upstream git history for this target)")
    lines += ["", "Changes synced from GPU:"]
    synced = [f for f in flags if f.get("kind") == "gpu-synced"]
    unplaced = [f for f in flags if f.get("kind") == "gpu-unplaced"]
    lines += [
        f"- {f.get('file')}:{f.get('line')} {f.get('symbol')}: {f.get('message')} ({f.get('patch')})" for f in synced
    ]
    if unplaced:
        lines.append(f"- {len(unplaced)} omni GPU change(s) could not be placed (gpu-unplaced flags say why)")
    unported = 0
    if check is not None:
        counts = check.get("counts", {})
        unported = int(counts.get("gpu-unported", 0)) if isinstance(counts, dict) else 0
    if check is None:
        lines.append("- pq check did not run (conflicts first)")
    elif unported:
        lines.append(f"- {unported} omni GPU changes still have no NPU counterpart (pq check: gpu-unported)")
    else:
        lines.append("- every omni GPU change has its NPU counterpart (pq check)")
    blocks = report.get("blocks", {})
    before = int(blocks.get("before", 0)) if isinstance(blocks, dict) else 0
    after = int(blocks.get("after", 0)) if isinstance(blocks, dict) else 0
    lines += ["", "Omni blocks:"]
    if conflicts:
        lines.append(f"- {len(conflicts)} conflict(s) need resolution:")
        lines += [
            f"  - {c.get('file')}:{c.get('line')} {c.get('kind')} in {c.get('symbol') or '<module>'}" for c in conflicts
        ]
    elif before == after:
        lines.append(f"- all {after} omni blocks preserved; {len(flags)} review flag(s) in the pull request")
    else:
        lines.append(f"- {after} of {before} omni blocks present: check the pull request")
    lines += ["", f"{TRAILER}: {slug(target)}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# prepare


def materialize(root: Path, pq: list[str], remote: str = "origin") -> None:
    """Reproduce the patch bodies from the lineage in ``queue.toml`` when the repository does not commit them.

    This repository commits only ``queue.toml`` and ``series`` (the bodies are third-party code);
    ``pq reproduce`` rebuilds them byte for byte (hash-checked) from the pinned releases and the
    recorded edits under ``refs/pq/resolutions``, which it fetches from ``remote`` first.
    """
    fetch_resolutions(root, remote)
    run([*pq, "reproduce"], cwd=root)


def fetch_resolutions(root: Path, remote: str) -> None:
    """Fetch ``refs/pq/resolutions`` from ``remote`` (fast-forward only; a remote without it is fine)."""
    if not remote_git(root, remote, "ls-remote", remote, RESOLUTIONS):
        return
    if git(root, "rev-parse", "-q", "--verify", RESOLUTIONS, ok=(0, 1)):
        remote_git(root, remote, "fetch", "--quiet", remote, f"{RESOLUTIONS}:refs/pq/remote-resolutions")
        local, theirs = git(root, "rev-parse", RESOLUTIONS), git(root, "rev-parse", "refs/pq/remote-resolutions")
        behind = run(["git", "merge-base", "--is-ancestor", local, theirs], cwd=root, ok=(0, 1)).returncode == 0
        if behind and local != theirs:
            git(root, "update-ref", RESOLUTIONS, theirs, local)
        git(root, "update-ref", "-d", "refs/pq/remote-resolutions")
        return
    remote_git(root, remote, "fetch", "--quiet", remote, f"{RESOLUTIONS}:{RESOLUTIONS}")


@dataclass
class Decision:
    action: str  # "update" | "noop" | "comment"
    branch: str
    target: str
    reason: str
    commit: str = ""
    expected_remote: str = ""  # the branch head prepare saw ("" = no branch yet)
    resolutions: str = ""  # refs/pq/resolutions to push with the branch ("" = unchanged)
    expected_resolutions: str = ""  # its value on the remote when prepare ran
    title: str = ""
    draft: bool = False
    labels: tuple[str, ...] = ()

    def write(self, workdir: Path) -> None:
        data = {**self.__dict__, "labels": list(self.labels)}
        (workdir / "decision.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    @staticmethod
    def read(workdir: Path) -> Decision:
        data = json.loads((workdir / "decision.json").read_text())
        data["labels"] = tuple(data.get("labels", ()))
        return Decision(**data)


def _remote_head(root: Path, remote: str, branch: str) -> str:
    out = remote_git(root, remote, "ls-remote", "--heads", remote, f"refs/heads/{branch}")
    return out.split()[0] if out else ""


def _human_commits(root: Path, remote_sha: str, base: str) -> list[str]:
    """Commits on the branch (not on ``base``) that the bot did not make."""
    log = git(root, "log", "--format=%H%x00%ae%x00%B%x1e", f"{base}..{remote_sha}")
    out = []
    for record in log.split("\x1e"):
        record = record.strip("\n")
        if not record:
            continue
        sha, email, body = record.split("\x00", 2)
        if email != BOT_EMAIL or f"\n{TRAILER}: " not in "\n" + body:
            out.append(sha)
    return out


def prepare(target: str, workdir: Path, *, root: Path, remote: str = "origin") -> Decision:
    workdir.mkdir(parents=True, exist_ok=True)
    branch = branch_of(target)
    spec = TARGETS.get(target, target)
    remote_sha = _remote_head(root, remote, branch)
    head = git(root, "rev-parse", "HEAD")
    if remote_sha:
        remote_git(root, remote, "fetch", "--quiet", remote, f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}")
        humans = _human_commits(root, remote_sha, head)
        if humans:
            decision = Decision(
                "comment",
                branch,
                target,
                f"maintainers pushed {len(humans)} commit(s) to {branch} "
                f"({', '.join(h[:12] for h in humans)}); the bot leaves the branch to them",
                expected_remote=remote_sha,
            )
            decision.write(workdir)
            (workdir / "report.md").write_text(f"## NPU runners: {branch}\n\n{decision.reason}.\n")
            return decision
    pq = pq_command(root)
    materialize(root, pq, remote)
    args = [
        *pq,
        "refresh",
        "--no-stop",
        "--report",
        str(workdir / "report.json"),
        "--markdown",
        str(workdir / "report.md"),
        "--annotations",
    ]
    if spec:
        args += ["--to", spec]
    proc = run(args, cwd=root, ok=(0, 3), capture=True)
    sys.stdout.write("".join(line + "\n" for line in proc.stdout.splitlines() if line.startswith("::")))
    report = json.loads((workdir / "report.json").read_text())
    conflicted = proc.returncode == 3
    check: dict[str, object] | None = None
    if not conflicted and isinstance(report.get("check"), dict):
        # `pq refresh` runs `pq check` on a result without conflicts: its findings are in the report
        check = report["check"]
        (workdir / "check.json").write_text(json.dumps(check, indent=2, sort_keys=True) + "\n")
    out = root / "npu_worker"
    if out.is_dir():
        shutil.copytree(
            out, workdir / "npu_worker", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", ".pq-build")
        )
    upstream = report.get("upstream")
    target_label = str(upstream.get("target", target)) if isinstance(upstream, dict) else target
    if conflicted:
        # the series cannot move until a maintainer resolves: record what to resolve, leave the queue as it was
        pending = root / "patches" / "pending-refresh.toml"
        resolved = spec or "vllm-ascend==" + target_label.split()[-1]
        pending.write_text(
            "# A scheduled refresh left conflicts.  On this branch: `pq reproduce`, then the command below;\n"
            "# resolve the markers in npu_worker/, `pq continue`, delete this file, commit patches/, and\n"
            "# push the branch with the recorded edits: git push origin HEAD refs/pq/resolutions\n"
            f'target = "{resolved}"\n'
            f"conflicts = {len(report.get('conflicts', []))}\n"
            f'command = "pq refresh --to {resolved}"\n'
        )
        run([*pq, "abort"], cwd=root)
    status = git(root, "status", "--porcelain", "--", "patches")
    if not status:
        decision = Decision("noop", branch, target, "the series is already on the target", expected_remote=remote_sha)
        decision.write(workdir)
        return decision
    git(root, "add", "--all", "--", "patches")
    env = {
        "GIT_AUTHOR_NAME": BOT_NAME,
        "GIT_AUTHOR_EMAIL": BOT_EMAIL,
        "GIT_COMMITTER_NAME": BOT_NAME,
        "GIT_COMMITTER_EMAIL": BOT_EMAIL,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(message(target_label, report, check, target))
        msg_file = handle.name
    tree = git(root, "write-tree")
    commit = run(["git", "commit-tree", tree, "-p", head, "-F", msg_file], cwd=root, env=env).stdout.strip()
    os.unlink(msg_file)
    git(root, "reset", "--quiet", "--mixed", "HEAD")
    git(root, "checkout", "--quiet", "--", "patches")
    git(root, "clean", "--quiet", "-fd", "--", "patches")
    if remote_sha and git(root, "rev-parse", f"{remote_sha}^{{tree}}") == tree:
        decision = Decision("noop", branch, target, f"{branch} already holds this refresh", expected_remote=remote_sha)
        decision.write(workdir)
        return decision
    git(root, "update-ref", BUNDLE_REF, commit)
    # the recorded edits the new lineage names travel with the branch
    resolutions = git(root, "rev-parse", "-q", "--verify", RESOLUTIONS, ok=(0, 1))
    remote_resolutions = (remote_git(root, remote, "ls-remote", remote, RESOLUTIONS).split() or [""])[0]
    bundled = [BUNDLE_REF] + ([RESOLUTIONS] if resolutions and resolutions != remote_resolutions else [])
    git(root, "bundle", "create", "--quiet", str(workdir / "branch.bundle"), *bundled)
    git(root, "update-ref", "-d", BUNDLE_REF)
    decision = Decision(
        "update",
        branch,
        target,
        f"{len(report.get('conflicts', []))} conflict(s), {len(report.get('flags', []))} review flag(s)",
        commit=commit,
        expected_remote=remote_sha,
        resolutions=resolutions if RESOLUTIONS in bundled else "",
        expected_resolutions=remote_resolutions,
        title=message(target_label, report, check, target).splitlines()[0],
        draft=conflicted,
        labels=(LABEL,) if conflicted else (),
    )
    decision.write(workdir)
    return decision


# ---------------------------------------------------------------------------------------------
# publish


class PullRequests(Protocol):
    """The one interface to GitHub's pull requests."""

    def find(self, branch: str) -> int | None: ...
    def create(self, branch: str, base: str, title: str, body: str, *, draft: bool, labels: Sequence[str]) -> int: ...
    def update(self, number: int, title: str, body: str, *, draft: bool, labels: Sequence[str]) -> None: ...
    def comment_once(self, number: int, marker: str, body: str) -> None: ...


class GhCli:
    """:class:`PullRequests` through the ``gh`` command line (GH_TOKEN from the workflow)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _gh(self, *args: str) -> str:
        return run(["gh", *args], cwd=self.root).stdout.strip()

    def find(self, branch: str) -> int | None:
        out = self._gh("pr", "list", "--head", branch, "--state", "open", "--json", "number", "--jq", ".[0].number")
        return int(out) if out else None

    def create(self, branch: str, base: str, title: str, body: str, *, draft: bool, labels: Sequence[str]) -> int:
        for label in labels:
            self._gh("label", "create", label, "--force", "--description", "pq: conflicts left for a maintainer")
        args = ["pr", "create", "--head", branch, "--base", base, "--title", title, "--body", body]
        args += ["--draft"] if draft else []
        for label in labels:
            args += ["--label", label]
        url = self._gh(*args)
        return int(url.rstrip("/").rsplit("/", 1)[-1])

    def update(self, number: int, title: str, body: str, *, draft: bool, labels: Sequence[str]) -> None:
        args = ["pr", "edit", str(number), "--title", title, "--body", body]
        for label in labels:
            args += ["--add-label", label]
        if not labels:
            args += ["--remove-label", LABEL]
        self._gh(*args)
        self._gh("pr", "ready", str(number), *(["--undo"] if draft else []))

    def comment_once(self, number: int, marker: str, body: str) -> None:
        bodies = self._gh("pr", "view", str(number), "--json", "comments", "--jq", ".comments[].body")
        if marker not in bodies:
            self._gh("pr", "comment", str(number), "--body", body)


def publish(workdir: Path, *, root: Path, prs: PullRequests, remote: str = "origin", base: str = "main") -> str:
    decision = Decision.read(workdir)
    if decision.action == "noop":
        return f"{decision.branch}: nothing to do ({decision.reason})"
    if decision.action == "comment":
        number = prs.find(decision.branch)
        if number is not None:
            prs.comment_once(
                number,
                COMMENT_MARKER,
                f"{COMMENT_MARKER}\nThe scheduled refresh did not update this branch: {decision.reason}.",
            )
        return f"{decision.branch}: left to the maintainers ({decision.reason})"
    git(root, "fetch", "--quiet", str(workdir / "branch.bundle"), f"{BUNDLE_REF}:{BUNDLE_REF}")
    lease = f"refs/heads/{decision.branch}:{decision.expected_remote}"
    refspecs = [f"{decision.commit}:refs/heads/{decision.branch}"]
    leases = [f"--force-with-lease={lease}"]
    if decision.resolutions:
        git(root, "fetch", "--quiet", str(workdir / "branch.bundle"), f"{RESOLUTIONS}:refs/pq/bundled-resolutions")
        refspecs.append(f"{decision.resolutions}:{RESOLUTIONS}")
        leases.append(f"--force-with-lease={RESOLUTIONS}:{decision.expected_resolutions}")
    remote_git(root, remote, "push", "--quiet", "--atomic", *leases, remote, *refspecs)
    git(root, "update-ref", "-d", BUNDLE_REF)
    if decision.resolutions:
        git(root, "update-ref", "-d", "refs/pq/bundled-resolutions")
    body_file = workdir / "report.md"
    body = body_file.read_text() if body_file.is_file() else decision.reason
    number = prs.find(decision.branch)
    if number is None:
        number = prs.create(decision.branch, base, decision.title, body, draft=decision.draft, labels=decision.labels)
    else:
        prs.update(number, decision.title, body, draft=decision.draft, labels=decision.labels)
    return f"{decision.branch}: pushed {decision.commit[:12]}, pull request #{number}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="refresh, check, commit; write the work folder (read-only token)")
    p.add_argument("--target", required=True, help="release | main | an explicit spec (vllm-ascend==X, a ref)")
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--remote", default="origin")
    q = sub.add_parser("publish", help="push the branch and open or update its pull request (write token)")
    q.add_argument("--workdir", required=True, type=Path)
    q.add_argument("--remote", default="origin")
    q.add_argument("--base", default=os.environ.get("GITHUB_BASE_REF") or "main")
    args = parser.parse_args(argv)
    root = Path.cwd()
    try:
        if args.command == "prepare":
            decision = prepare(args.target, args.workdir, root=root, remote=args.remote)
            print(f"{decision.branch}: {decision.action} ({decision.reason})")
        else:
            print(publish(args.workdir, root=root, prs=GhCli(root), remote=args.remote, base=args.base))
    except ScriptError as exc:
        print(f"refresh_pr: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
