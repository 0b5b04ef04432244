"""The scheduled rebase pull request, in two halves the workflow calls (`.github/workflows/refresh.yml`).

``prepare`` runs with a read-only token: it refreshes the series onto the target
(``pq refresh --no-stop --accept-errors`` with its reports and annotations; on a result without conflicts that
runs ``pq check`` too, and finishes over its errors, which the lineage step records), commits the result
on top of the default branch with the maintainers' message template, and writes everything the
second half needs into a work folder (``report.json``; ``report.md``, the whole report, for the
artifact; ``summary.md`` for the job summary; ``body.md``, the pull-request body within
:data:`BODY_BUDGET`; the built package, ``decision.json`` and a git bundle of the commit).  It decides one of:

- ``update``: push the commit to ``pq/refresh/<target>`` and open or update its pull request
  (a draft with the ``needs-resolution`` label when conflicts are left; a draft with the ``check-errors``
  label when the result was finished over errors of ``pq check``, which the body lists);
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
CHECK_LABEL = "check-errors"
LABELS = {  # every label the bot sets, with its description
    LABEL: "pq: conflicts left for a maintainer",
    CHECK_LABEL: "pq: the refresh was finished over errors of pq check; fix them before merging",
}
BUNDLE_REF = "refs/heads/pq-refresh-commit"
COMMENT_MARKER = "<!-- pq-refresh: maintainer commits -->"
RESOLUTIONS = "refs/pq/resolutions"  # recorded resolutions and edits: the lineage's other half
TARGETS = {"release": None, "main": "main"}  # name -> the --to spec (None: the newest release)
TOKEN_ENV = "PQ_GIT_TOKEN"  # the workflow's token, for git's requests to the remote only
# the work folder's reports: all of it (the artifact), the job summary (1 MiB), the pull-request body
FULL, SUMMARY, BODY = "report.md", "summary.md", "body.md"
BODY_BUDGET = 60_000  # = patch_queue.outputs.report.BODY_BUDGET (publish does not import pq)
SHOWN_COMMITS = 10  # maintainers' commits a comment names


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
    accepted = report.get("accepted_errors")
    if isinstance(accepted, list) and accepted:
        lines.append(f"- pq check: finished over {len(accepted)} error(s) (--accept-errors); fix them before merging:")
        lines += [f"  - {e}" for e in accepted]
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
# the reports: all of it, the job summary, the pull-request body


def github_chars(text: str) -> int:
    """At least what GitHub counts in a body: UTF-16 units, line ends as CRLF (as ``report.github_chars``)."""
    return len(text.encode("utf-16-le")) // 2 + text.count("\n")


def full_report_pointer(target: str, *, link: bool = True) -> str:
    """Where the whole report is: the run's job summary (a link, on GitHub Actions) and the work-folder artifact."""
    artifact = f"`{FULL}` and `report.json` in the artifact `pq-refresh-{slug(target)}`"
    server, repo, run_id = (os.environ.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if link and server and repo and run_id:
        return f"[the job summary of this run]({server}/{repo}/actions/runs/{run_id}) and {artifact}"
    return artifact


def render(root: Path, workdir: Path, target: str, *, budget: int = BODY_BUDGET) -> None:
    """Write ``report.md`` (all of it), ``summary.md`` (within the job summary's 1 MiB) and ``body.md``
    (within ``budget``) from ``report.json``, with pq's one renderer (``patch_queue.outputs.report``).

    It runs as ``render`` under pq's Python (the venv ``scripts/setup.sh`` made), which has the package.
    """
    local = root / ".venv" / "bin" / "python"
    python = str(local) if local.is_file() else sys.executable
    script = str(Path(__file__).resolve())
    run([python, script, "render", "--workdir", str(workdir), "--target", target, "--budget", str(budget)], cwd=root)


def _render_here(workdir: Path, target: str, budget: int) -> None:
    from patch_queue.outputs import report as md

    data = json.loads((workdir / "report.json").read_text(encoding="utf-8"))
    summary = md.markdown(
        data, limit=md.JOB_SUMMARY_BUDGET, in_bytes=True, full_report=full_report_pointer(target, link=False)
    )
    (workdir / FULL).write_text(md.markdown(data, limit=None), encoding="utf-8")
    (workdir / SUMMARY).write_text(summary, encoding="utf-8")
    (workdir / BODY).write_text(
        md.markdown(data, limit=budget, full_report=full_report_pointer(target)), encoding="utf-8"
    )


_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_OPEN_DETAILS = re.compile(r"<details[\s>]")
FIT_NOTE = "_… shortened to fit GitHub's limit: the whole report is in the job summary and the artifact of the run._"


def fit(text: str, budget: int = BODY_BUDGET, note: str = FIT_NOTE) -> str:
    """``text`` if it fits in ``budget`` (:func:`github_chars`), else its longest head that ends at a blank
    line outside every code block and ``<details>``, and ``note``.

    A text that is one long paragraph is cut between two words.  ``body.md`` fits already (prepare
    renders it within the budget); this is publish's guard for anything else it posts (an older
    artifact's ``report.md``, a comment)."""
    if github_chars(text) <= budget:
        return text
    tail = f"\n\n{note}\n"
    room = budget - github_chars(tail)
    cut = pos = used = depth = 0
    fence = ""
    for line in text.splitlines(keepends=True):
        used += github_chars(line)
        if used > room:
            if not cut and not fence and depth <= 0:  # one long paragraph, in no block: cut it between words
                part = line[: max(0, room - used + github_chars(line)) // 2]
                cut = pos + len(part.rsplit(" ", 1)[0] if " " in part else part)
            break
        pos += len(line)
        stripped, m = line.strip(), _FENCE.match(line)
        if fence:
            fence = "" if stripped.startswith(fence) and set(stripped) == {fence[0]} else fence
        elif m:
            fence = m.group(1)
        else:
            depth += len(_OPEN_DETAILS.findall(line)) - line.count("</details>")
        if not fence and depth <= 0 and not stripped:
            cut = pos
    return text[:cut].rstrip("\n") + tail


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
            named = ", ".join(h[:12] for h in humans[:SHOWN_COMMITS])
            more = f" and {len(humans) - SHOWN_COMMITS} more" if len(humans) > SHOWN_COMMITS else ""
            decision = Decision(
                "comment",
                branch,
                target,
                f"maintainers pushed {len(humans)} commit(s) to {branch} ({named}{more}); "
                "the bot leaves the branch to them",
                expected_remote=remote_sha,
            )
            decision.write(workdir)
            for name in (FULL, SUMMARY, BODY):
                (workdir / name).write_text(f"## NPU runners: {branch}\n\n{decision.reason}.\n")
            return decision
    pq = pq_command(root)
    materialize(root, pq, remote)
    args = [
        *pq,
        "refresh",
        "--no-stop",
        "--accept-errors",  # a result with errors of pq check is committed, and its pull request is a draft
        "--report",
        str(workdir / "report.json"),
        "--annotations",
    ]
    if spec:
        args += ["--to", spec]
    proc = run(args, cwd=root, ok=(0, 3), capture=True)
    sys.stdout.write("".join(line + "\n" for line in proc.stdout.splitlines() if line.startswith("::")))
    report = json.loads((workdir / "report.json").read_text())
    render(root, workdir, target)
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
    accepted = report.get("accepted_errors")
    errors = len(accepted) if isinstance(accepted, list) else 0
    reason = f"{len(report.get('conflicts', []))} conflict(s), {len(report.get('flags', []))} review flag(s)"
    decision = Decision(
        "update",
        branch,
        target,
        reason + (f", finished over {errors} pq check error(s)" if errors else ""),
        commit=commit,
        expected_remote=remote_sha,
        resolutions=resolutions if RESOLUTIONS in bundled else "",
        expected_resolutions=remote_resolutions,
        title=message(target_label, report, check, target).splitlines()[0],
        draft=conflicted or bool(errors),
        labels=(LABEL,) if conflicted else (CHECK_LABEL,) if errors else (),
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

    def _gh_body(self, body: str, *args: str) -> str:
        """``gh <args> --body-file FILE``: a body is data in a file, never a command-line argument."""
        with tempfile.TemporaryDirectory(prefix="pq-body-") as tmp:
            path = Path(tmp) / "body.md"
            path.write_text(body, encoding="utf-8")
            return self._gh(*args, "--body-file", str(path))

    def find(self, branch: str) -> int | None:
        out = self._gh("pr", "list", "--head", branch, "--state", "open", "--json", "number", "--jq", ".[0].number")
        return int(out) if out else None

    def _labels(self, labels: Sequence[str]) -> None:
        """Make sure each of ``labels`` exists (``gh`` refuses to add or remove a label the repository lacks)."""
        for label in labels:
            self._gh("label", "create", label, "--force", "--description", LABELS.get(label, "pq"))

    def create(self, branch: str, base: str, title: str, body: str, *, draft: bool, labels: Sequence[str]) -> int:
        self._labels(labels)
        args = ["pr", "create", "--head", branch, "--base", base, "--title", title]
        args += ["--draft"] if draft else []
        for label in labels:
            args += ["--label", label]
        url = self._gh_body(body, *args)
        return int(url.rstrip("/").rsplit("/", 1)[-1])

    def update(self, number: int, title: str, body: str, *, draft: bool, labels: Sequence[str]) -> None:
        self._labels(sorted(set(LABELS) | set(labels)))
        args = ["pr", "edit", str(number), "--title", title]
        for label in labels:
            args += ["--add-label", label]
        for label in sorted(set(LABELS) - set(labels)):
            args += ["--remove-label", label]
        self._gh_body(body, *args)
        self._gh("pr", "ready", str(number), *(["--undo"] if draft else []))

    def comment_once(self, number: int, marker: str, body: str) -> None:
        bodies = self._gh("pr", "view", str(number), "--json", "comments", "--jq", ".comments[].body")
        if marker not in bodies:
            self._gh_body(body, "pr", "comment", str(number))


def publish(workdir: Path, *, root: Path, prs: PullRequests, remote: str = "origin", base: str = "main") -> str:
    decision = Decision.read(workdir)
    if decision.action == "noop":
        return f"{decision.branch}: nothing to do ({decision.reason})"
    if decision.action == "comment":
        number = prs.find(decision.branch)
        if number is not None:
            said = f"{COMMENT_MARKER}\nThe scheduled refresh did not update this branch: {decision.reason}.\n"
            prs.comment_once(number, COMMENT_MARKER, fit(said))
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
    found = [workdir / name for name in (BODY, FULL) if (workdir / name).is_file()]
    body = fit(found[0].read_text(encoding="utf-8") if found else decision.reason + "\n")
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
    r = sub.add_parser("render", help="report.json to report.md, summary.md and body.md (under pq's Python)")
    r.add_argument("--workdir", required=True, type=Path)
    r.add_argument("--target", required=True)
    r.add_argument("--budget", type=int, default=BODY_BUDGET, help="of body.md, in characters")
    args = parser.parse_args(argv)
    root = Path.cwd()
    try:
        if args.command == "render":
            _render_here(args.workdir, args.target, args.budget)
        elif args.command == "prepare":
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
