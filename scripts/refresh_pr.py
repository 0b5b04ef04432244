"""The scheduled rebase pull request, in two halves the workflow calls (`.github/workflows/refresh.yml`).

``prepare`` runs with a read-only token: it refreshes the series onto the target
(``pq refresh --no-stop --accept-errors`` with its reports and annotations; on a result without conflicts that
runs ``pq check`` too, and finishes over its errors, which the lineage step records), commits the result
on top of the default branch with the maintainers' message template (the clone is then put back on the default
branch's series, :func:`restore`), and writes everything the
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

Before it starts, ``prepare`` refuses any change under ``patches/`` it did not make (:func:`user_files`:
a user's notes or drafts there would otherwise be committed and then cleaned away); the patch bodies
``pq reproduce`` writes are not the user's.  It fetches ``refs/pq/resolutions`` by merging origin's
into a local one (:func:`fetch_resolutions`).

``publish`` runs with the write token and executes no code from the refreshed branch (nor imports
``patch_queue``).  It trusts nothing in the artifact: the target comes from the workflow
(``--target``) and the branch from :func:`branch_of`; every field of ``decision.json`` is checked
(:meth:`Decision.read`); the bundled commit must have one parent on the default branch as the remote
has it now and change regular files under ``patches/`` only; the branch must still be where prepare
saw it, with no commit of a maintainer's.  The bundled store must descend from the one prepare saw,
still in origin's; it is merged with origin's current store (:func:`merge_stores`: the union, origin's
entry kept on a clash, which the output and the pull-request body report), so no push removes an
entry origin holds.  Anything else is one line ``refresh_pr: error: <path>: ...``, exit 1, nothing
pushed.  Both refs go in one atomic push, each with ``--force-with-lease`` on the value publish read.
It talks to GitHub through :class:`GhCli` (the ``gh`` command line; tests/test_hostile_bot.py runs it
against a recording ``gh``).

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
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from patch_queue import presets

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
PREVIOUS = "refs/pq/previous"  # the top before the last finished refresh (pq check compares with it)
TARGETS = {"release": None, "main": "main"}  # name -> the --to spec (None: the newest release)
DOWNSTREAM = "vllm-omni"  # the target that takes in the newest vllm-omni release (`pq merge`), or vllm-omni==X
PENDING_MERGE = "pending-merge.toml"
TOKEN_ENV = "PQ_GIT_TOKEN"  # the workflow's token, for git's requests to the remote only
# the work folder's reports: all of it (the artifact), the job summary (1 MiB), the pull-request body
FULL, SUMMARY, BODY = "report.md", "summary.md", "body.md"
SYNC_JSON, SYNC_MD = "sync.json", "sync.md"  # a merge's GPU-side sync (`pq sync-gpu --since` the release before)
BODY_BUDGET = 60_000  # = patch_queue.outputs.report.BODY_BUDGET (publish does not import pq)
SHOWN_COMMITS = 10  # maintainers' commits a comment names (and store clashes a body names)
ACTIONS = ("update", "noop", "comment")
SHA = re.compile(r"^[0-9a-f]{40}$")
PUBLISH_REFS = "refs/pq/publish/"  # publish's scratch refs (deleted when it ends)
BOT_ENV = {
    "GIT_AUTHOR_NAME": BOT_NAME,
    "GIT_AUTHOR_EMAIL": BOT_EMAIL,
    "GIT_COMMITTER_NAME": BOT_NAME,
    "GIT_COMMITTER_EMAIL": BOT_EMAIL,
}


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
    cmd: Sequence[str],
    *,
    cwd: Path,
    ok: Sequence[int] = (0,),
    env: dict[str, str] | None = None,
    capture: bool = True,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    # the token never reaches a subprocess through the inherited environment (see remote_auth)
    inherited = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    proc = subprocess.run(
        list(cmd),
        cwd=cwd,
        text=True,
        input=stdin,
        capture_output=capture,
        env={**inherited, **(env or {})},
        check=False,
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
    """The maintainers' template: subject, upstream changes, GPU sync, omni blocks, trailer.

    ``target_label`` is the report's name of the target (``vllm-ascend 0.30.0rc2``, ``git 3e1b977b05c1``):
    the subject names vllm-ascend once."""
    conflicts = _dicts(report.get("conflicts"))
    flags = _dicts(report.get("flags"))
    version = re.sub(r"^vllm[-_]ascend(?:\s+|\s*==\s*)", "", target_label.strip(), flags=re.IGNORECASE)
    lines = [f"[NPU] Upgrade model runners to align with vllm-ascend {version}", ""]
    merged = report.get("merged")
    if isinstance(merged, str) and merged:  # the vllm-omni target: a merge, not a refresh
        taken = merged.replace("==", " ")
        lines = [f"[NPU] Take in the NPU runners of {taken}", "", "Downstream changes:"]
        lines.append(f"- the maintainers' NPU runner changes of {taken}, merged into the series (`pq merge`)")
        lines.append("")
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


def last_taken(root: Path) -> str:
    """The vllm-omni release (``name==version``) the series last took in (its last adopt or merge step), "" when
    it names none (adopted from a folder)."""
    import tomllib

    path = root / "patches" / "queue.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    steps = [s for s in data.get("lineage", []) if isinstance(s, dict) and s.get("kind") in ("adopt", "merge")]
    return str(steps[-1].get("downstream", "")) if steps else ""


def sync_gpu(root: Path, pq: Sequence[str], workdir: Path, since: str) -> None:
    """Step 7 after a clean merge: ``pq sync-gpu --since`` the release taken in before it, so the pull request
    lists what changed on the GPU side between the two releases (its sure ports applied, the rest proposed for
    review); its Markdown goes at the end of the report and of the body (within the budget)."""
    args = [
        *pq,
        "sync-gpu",
        "--since",
        since,
        "--report",
        str(workdir / SYNC_JSON),
        "--markdown",
        str(workdir / SYNC_MD),
    ]
    proc = run(args, cwd=root, ok=(0, 1), capture=True)
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        (workdir / SYNC_MD).write_text(f"## GPU-side sync: not run\n\n`pq sync-gpu --since {since}`: {said}\n")
    sync = (workdir / SYNC_MD).read_text(encoding="utf-8")
    for name in (FULL, SUMMARY):
        path = workdir / name
        path.write_text(path.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + sync, encoding="utf-8")
    body = workdir / BODY
    text = body.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + sync
    body.write_text(fit(text), encoding="utf-8")


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
        data,
        limit=md.JOB_SUMMARY_BUDGET,
        in_bytes=True,
        full_report=full_report_pointer(target, link=False),
        queue=presets.NPU,
    )
    (workdir / FULL).write_text(md.markdown(data, limit=None, queue=presets.NPU), encoding="utf-8")
    (workdir / SUMMARY).write_text(summary, encoding="utf-8")
    (workdir / BODY).write_text(
        md.markdown(data, limit=budget, full_report=full_report_pointer(target), queue=presets.NPU), encoding="utf-8"
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
# the recorded-resolutions store: merged, never replaced


def _is_ancestor(root: Path, ancestor: str, descendant: str) -> bool:
    """Whether ``ancestor`` is ``descendant`` or one of its ancestors (False for an object this clone lacks)."""
    if run(["git", "cat-file", "-e", f"{ancestor}^{{commit}}"], cwd=root, ok=(0, 1, 128)).returncode:
        return False
    return run(["git", "merge-base", "--is-ancestor", ancestor, descendant], cwd=root, ok=(0, 1)).returncode == 0


def _shares_history(root: Path, one: str, other: str) -> bool:
    return run(["git", "merge-base", one, other], cwd=root, ok=(0, 1)).returncode == 0


def _entries(root: Path, commit: str) -> dict[str, tuple[str, str]]:
    """Every file of ``commit``'s tree: path -> (mode, blob id)."""
    out: dict[str, tuple[str, str]] = {}
    for record in git(root, "ls-tree", "-r", "-z", "--full-tree", commit).split("\0"):
        if record:
            meta, path = record.split("\t", 1)
            mode, _kind, blob = meta.split()
            out[path] = (mode, blob)
    return out


@dataclass(frozen=True)
class Clash:
    """A store key both sides hold with different contents: origin's (the maintainers') entry is kept."""

    path: str
    kept: str  # origin's blob id at the path or at a parent folder's ("" where origin has a folder there)
    dropped: str  # the other side's blob id

    def line(self) -> str:
        return f"{RESOLUTIONS}: {self.path}: kept origin's {self.kept or 'folder'}, not the bot's {self.dropped}"


def merge_stores(root: Path, origin: str, other: str, *, label: str) -> tuple[str, list[Clash]]:
    """The store that holds every entry of ``origin`` and of ``other``, and the keys they disagree on.

    ``origin`` when it holds ``other`` already, ``other`` when it descends from ``origin`` and keeps
    each of its entries; else a commit with the two as parents whose tree is the union of theirs,
    origin's entry kept where both hold a key with different contents (git plumbing only: a
    temporary index, ``update-index --index-info``, ``write-tree``, ``commit-tree``).
    """
    if _is_ancestor(root, other, origin):
        return origin, []
    ours, theirs = _entries(root, origin), _entries(root, other)
    union = dict(ours)
    clashes: list[Clash] = []
    folders = {"/".join(p.split("/")[:i]) for p in ours for i in range(1, p.count("/") + 1)}
    for path, entry in sorted(theirs.items()):
        parents = ["/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1)]
        blocker = next((p for p in parents if p in ours), None)
        if path in ours:
            if ours[path] != entry:
                clashes.append(Clash(path, ours[path][1], entry[1]))
        elif blocker is not None or path in folders:
            clashes.append(Clash(path, ours[blocker][1] if blocker else "", entry[1]))
        else:
            union[path] = entry
    if union == theirs and _is_ancestor(root, origin, other):
        return other, clashes
    with tempfile.TemporaryDirectory(prefix="pq-store-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        listing = "".join(f"{mode} {blob}\t{path}\n" for path, (mode, blob) in sorted(union.items()))
        run(["git", "update-index", "--add", "--index-info"], cwd=root, env=env, stdin=listing)
        tree = git(root, "write-tree", env=env)
    said = f"Merge {label} into origin's recorded resolutions\n\n" + "".join(c.line() + "\n" for c in clashes)
    commit = run(["git", "commit-tree", tree, "-p", origin, "-p", other, "-m", said], cwd=root, env=BOT_ENV).stdout
    return commit.strip(), clashes


def _remote_ref(root: Path, remote: str, ref: str) -> str:
    """The object id of exactly ``ref`` on ``remote`` ("" if it has none)."""
    for line in remote_git(root, remote, "ls-remote", remote, ref).splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha
    return ""


# ---------------------------------------------------------------------------------------------
# prepare


def materialize(root: Path, pq: list[str], remote: str = "origin") -> str:
    """Reproduce the patch bodies from the lineage in ``queue.toml`` when the repository does not commit them.

    This repository commits only ``queue.toml`` and ``series`` (the bodies are third-party code);
    ``pq reproduce`` rebuilds them byte for byte (hash-checked) from the pinned releases and the
    recorded edits under ``refs/pq/resolutions``, which it fetches from ``remote`` first.  Returns the
    value of ``remote``'s store it fetched ("" for none).
    """
    seen = fetch_resolutions(root, remote)
    run([*pq, "reproduce"], cwd=root)
    return seen


def fetch_resolutions(root: Path, remote: str) -> str:
    """Bring ``remote``'s ``refs/pq/resolutions`` into the local one, and return the value fetched.

    A local store that ``remote``'s holds is moved up to it; one that has entries ``remote``'s lacks
    is merged with it (:func:`merge_stores`: remote's entry kept on a clash, which is printed), so
    neither side's entries are lost.  A remote without a store is fine ("")."""
    if not _remote_ref(root, remote, RESOLUTIONS):
        return ""
    scratch = "refs/pq/remote-resolutions"
    remote_git(root, remote, "fetch", "--quiet", "--no-tags", remote, f"+{RESOLUTIONS}:{scratch}")
    try:
        theirs = git(root, "rev-parse", scratch)
        local = git(root, "rev-parse", "-q", "--verify", RESOLUTIONS, ok=(0, 1))
        merged, clashes = (theirs, []) if not local else merge_stores(root, theirs, local, label="the local store")
        if merged != local:
            git(root, "update-ref", RESOLUTIONS, merged, local)
        for clash in clashes:
            print(clash.line())
        return theirs
    finally:
        git(root, "update-ref", "-d", scratch)


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string on one line: quotes, backslashes, control characters (C0, DEL, C1)
    and the Unicode line and paragraph separators escaped."""
    named = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}

    def escaped(ch: str) -> str:
        if ch in named:
            return named[ch]
        code = ord(ch)
        return f"\\u{code:04X}" if code < 0x20 or 0x7F <= code <= 0x9F or ch in "\u2028\u2029" else ch

    return '"' + "".join(escaped(ch) for ch in value) + '"'


def pending_refresh(resolved: str, conflicts: int) -> str:
    """``patches/pending-refresh.toml``: the target a refresh left conflicts on, and the command to redo it."""
    return (
        "# A scheduled refresh left conflicts.  On this branch: `pq reproduce`, then the command below;\n"
        "# resolve the markers in npu_worker/, `pq continue`, delete this file, commit patches/, and\n"
        "# push the branch with the recorded edits: git push origin HEAD refs/pq/resolutions\n"
        f"target = {toml_string(resolved)}\n"
        f"conflicts = {conflicts}\n"
        f"command = {toml_string('pq refresh --to ' + shlex.quote(resolved))}\n"
    )


def pending_merge(release: str, conflicts: int) -> str:
    """``patches/pending-merge.toml``: the vllm-omni release a merge left conflicts on, and the command to redo it."""
    return (
        "# The scheduled merge of a vllm-omni release left conflicts.  On this branch: `pq reproduce`, then the\n"
        "# command below; resolve the markers in npu_worker/, `pq continue`, delete this file, commit patches/,\n"
        "# and push the branch with the recorded edits: git push origin HEAD refs/pq/resolutions\n"
        f"release = {toml_string(release)}\n"
        f"conflicts = {conflicts}\n"
        f"command = {toml_string('pq merge ' + shlex.quote(release))}\n"
    )


def series_names(root: Path) -> list[str]:
    """The patch file names ``patches/series`` lists ([] without one)."""
    series = root / "patches" / "series"
    if not series.is_file():
        return []
    lines = series.read_text(encoding="utf-8", errors="replace").splitlines()
    return [line.split()[0] for line in lines if line.strip() and not line.lstrip().startswith("#")]


def user_files(root: Path) -> list[str]:
    """Files under ``patches/`` that prepare would commit but did not write: modified tracked files and
    untracked ones, except the patch bodies ``pq reproduce`` writes (the names ``patches/series`` lists)."""
    listed = {f"patches/{name}" for name in series_names(root)}
    status = run(["git", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", "patches"], cwd=root).stdout
    records = iter(status.split("\0"))
    out = []
    for record in records:
        if not record:
            continue
        code, path = record[:2], record[3:]
        if code[0] in "RC":
            next(records, None)  # a rename's or copy's old path
        if code == "??" and path in listed:
            continue
        out.append(path)
    return out


def restore(root: Path, pq: list[str], previous: str) -> None:
    """Put the clone back on the default branch's series once the commit holds the result (the artifact has the
    built package): ``queue.toml`` and ``series`` as HEAD has them, and the patch bodies, ``refs/pq/`` and
    ``npu_worker/`` as ``pq reproduce`` and ``pq build`` give them there, so ``pq status``, ``pq reproduce`` and
    prepare itself run in the clone afterwards.  git restores no body it does not track (this repository ignores
    them): the refreshed ones are removed first, each a file pq wrote (a refresh writes over none it did not
    write), which ``pq reproduce`` would otherwise refuse to replace; ``refs/pq/previous`` (the top before the last
    refresh, what ``pq check`` compares with) gets ``previous`` back.  A refresh that left the lineage as it was
    (conflicts: ``pq abort`` put everything back) changed no body."""
    moved = git(root, "diff", "--name-only", "HEAD", "--", "patches/queue.toml")
    written = series_names(root)
    tracked = set(git(root, "ls-files", "-z", "--", "patches").split("\0"))
    git(root, "reset", "--quiet", "--mixed", "HEAD")
    git(root, "checkout", "--quiet", "--", "patches")
    git(root, "clean", "--quiet", "-fd", "--", "patches")
    if not moved:
        return
    for name in written:
        if f"patches/{name}" not in tracked:
            (root / "patches" / name).unlink(missing_ok=True)
    run([*pq, "reproduce"], cwd=root)
    run([*pq, "build"], cwd=root)
    git(root, "update-ref", *([PREVIOUS, previous] if previous else ["-d", PREVIOUS]))


@dataclass
class Decision:
    action: str  # one of ACTIONS: "update" | "noop" | "comment"
    branch: str
    target: str
    reason: str
    commit: str = ""
    expected_remote: str = ""  # the branch head prepare saw ("" = no branch yet)
    resolutions: str = ""  # refs/pq/resolutions to push with the branch ("" = unchanged)
    expected_resolutions: str = ""  # its value on the remote when prepare fetched it ("" = none)
    title: str = ""
    draft: bool = False
    labels: tuple[str, ...] = ()

    def write(self, workdir: Path) -> None:
        data = {**self.__dict__, "labels": list(self.labels)}
        (workdir / "decision.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    @staticmethod
    def read(workdir: Path) -> Decision:
        """The decision in ``workdir``, every field checked (it comes from the unprivileged job's artifact)."""
        path = workdir / "decision.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ScriptError(
                f"{path}: missing: the refresh job left no decision (see its log); nothing pushed"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ScriptError(f"{path}: unreadable ({exc}); nothing pushed") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScriptError(f"{path}:{exc.lineno}: not JSON ({exc.msg}); nothing pushed") from None
        if not isinstance(data, dict):
            raise ScriptError(f"{path}: not a JSON object; nothing pushed")
        fields = {name: type(value) for name, value in Decision("", "", "", "").__dict__.items()}
        fields["labels"] = list
        unknown = sorted(set(data) - set(fields))
        missing = sorted({"action", "branch", "target", "reason"} - set(data))
        if unknown or missing:
            what = f"unknown key {unknown[0]!r}" if unknown else f"no {missing[0]!r}"
            raise ScriptError(f"{path}: {what}; nothing pushed")
        for name, value in data.items():
            if type(value) is not fields[name]:
                want = {str: "a string", bool: "true or false", list: "a list"}[fields[name]]
                raise ScriptError(f"{path}: {name!r} must be {want}, not {json.dumps(value)[:40]}; nothing pushed")
            if isinstance(value, str) and any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
                raise ScriptError(f"{path}: {name!r} holds a control character; nothing pushed")
        if data["action"] not in ACTIONS:
            raise ScriptError(
                f"{path}: 'action' must be one of {', '.join(ACTIONS)}, not {data['action'][:40]!r}; nothing pushed"
            )
        for name in ("commit", "expected_remote", "resolutions", "expected_resolutions"):
            if data.get(name, "") and not SHA.match(data[name]):
                raise ScriptError(f"{path}: {name!r} is not a commit id: {data[name][:40]!r}; nothing pushed")
        if data["action"] == "update" and not data.get("commit"):
            raise ScriptError(f"{path}: an update names no 'commit'; nothing pushed")
        labels = data.get("labels", [])
        for label in labels:
            if not isinstance(label, str) or label not in LABELS:
                known = ", ".join(sorted(LABELS))
                raise ScriptError(
                    f"{path}: label {json.dumps(label)[:40]} is not one the bot sets ({known}); nothing pushed"
                )
        if len(set(labels)) != len(labels):
            raise ScriptError(f"{path}: 'labels' names a label twice; nothing pushed")
        data["labels"] = tuple(labels)
        return Decision(**data)


def _remote_head(root: Path, remote: str, branch: str) -> str:
    return _remote_ref(root, remote, f"refs/heads/{branch}")


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
    branch = branch_of(target)
    try:
        target.encode("utf-8")
    except UnicodeEncodeError:
        raise ScriptError(f"target {target!r} is not UTF-8 text") from None
    mine = user_files(root)
    if mine:
        more = f" (and {len(mine) - 1} more)" if len(mine) > 1 else ""
        raise ScriptError(
            f"{mine[0]}{more}: a change under patches/ that prepare did not make and would commit: "
            "commit it, move it out of patches/ or delete it, then run prepare again; nothing was changed"
        )
    workdir.mkdir(parents=True, exist_ok=True)
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
    seen_resolutions = materialize(root, pq, remote)
    merging = target == DOWNSTREAM or target.startswith(DOWNSTREAM + "==")
    # a result with errors of pq check is committed, and its pull request is a draft
    reports = ["--accept-errors", "--report", str(workdir / "report.json"), "--annotations"]
    before = last_taken(root)
    previous = git(root, "rev-parse", "-q", "--verify", PREVIOUS, ok=(0, 1))
    if merging:  # the newest vllm-omni release (or the one named), taken into the series
        args = [*pq, "merge", *reports] + ([target] if "==" in target else [])
    else:
        # a result without conflicts is imported against the real releases (pq check --import), its environment
        # kept in the workflow's cache of PQ_CACHE; PQ_IMPORT_TEST=0 skips it
        imported = ["--no-import"] if os.environ.get("PQ_IMPORT_TEST") == "0" else ["--import"]
        args = [*pq, "refresh", "--no-stop", *imported, *reports] + (["--to", spec] if spec else [])
    proc = run(args, cwd=root, ok=(0, 3), capture=True)
    sys.stdout.write("".join(line + "\n" for line in proc.stdout.splitlines() if line.startswith("::")))
    if merging and "already up to date" in proc.stdout:  # a release the series holds changes nothing
        said = next(line for line in proc.stdout.splitlines() if "already up to date" in line)
        decision = Decision("noop", branch, target, said, expected_remote=remote_sha)
        decision.write(workdir)
        for name in (FULL, SUMMARY, BODY):
            (workdir / name).write_text(f"## NPU runners: {branch}\n\n{said}\n")
        return decision
    report = json.loads((workdir / "report.json").read_text())
    render(root, workdir, target)
    if merging and proc.returncode == 0 and before:
        sync_gpu(root, pq, workdir, before)
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
    if conflicted and merging:
        # the merge waits for a maintainer: record what to merge, leave the queue as it was
        release = str(report.get("merged") or target)
        pending = root / "patches" / PENDING_MERGE
        pending.write_text(pending_merge(release, len(report.get("conflicts", []))), encoding="utf-8")
        run([*pq, "abort"], cwd=root)
    elif conflicted:
        # the series cannot move until a maintainer resolves: record what to resolve, leave the queue as it was
        pending = root / "patches" / "pending-refresh.toml"
        resolved = spec or "vllm-ascend==" + target_label.split()[-1]
        pending.write_text(pending_refresh(resolved, len(report.get("conflicts", []))), encoding="utf-8")
        run([*pq, "abort"], cwd=root)
    status = git(root, "status", "--porcelain", "--", "patches")
    if not status:
        decision = Decision("noop", branch, target, "the series is already on the target", expected_remote=remote_sha)
        decision.write(workdir)
        return decision
    git(root, "add", "--all", "--", "patches")  # only what pq and prepare wrote (user_files() was empty)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write(message(target_label, report, check, target))
        msg_file = handle.name
    tree = git(root, "write-tree")
    commit = run(["git", "commit-tree", tree, "-p", head, "-F", msg_file], cwd=root, env=BOT_ENV).stdout.strip()
    os.unlink(msg_file)
    restore(root, pq, previous)
    if remote_sha and git(root, "rev-parse", f"{remote_sha}^{{tree}}") == tree:
        decision = Decision("noop", branch, target, f"{branch} already holds this refresh", expected_remote=remote_sha)
        decision.write(workdir)
        return decision
    git(root, "update-ref", BUNDLE_REF, commit)
    # the recorded edits the new lineage names travel with the branch
    resolutions = git(root, "rev-parse", "-q", "--verify", RESOLUTIONS, ok=(0, 1))
    bundled = [BUNDLE_REF] + ([RESOLUTIONS] if resolutions and resolutions != seen_resolutions else [])
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
        expected_resolutions=seen_resolutions if RESOLUTIONS in bundled else "",
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


def _check_commit(root: Path, commit: str, base_ref: str, where: Path) -> None:
    """Refuse a branch commit prepare could not have made: one parent, on the default branch as the remote
    has it now, and changes under ``patches/`` only (regular files)."""
    parents = git(root, "rev-list", "--parents", "-n", "1", commit).split()[1:]
    if len(parents) != 1 or not _is_ancestor(root, parents[0], base_ref):
        said = "is a root commit" if not parents else f"has {len(parents)} parents" if len(parents) > 1 else ""
        said = said or f"has parent {parents[0][:12]}, which is not on the default branch"
        raise ScriptError(f"{where}: commit {commit[:12]} {said}: refused, nothing pushed")
    raw = git(root, "diff-tree", "-r", "-z", "--no-commit-id", "--no-renames", parents[0], commit)
    fields = raw.split("\0")
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        new_mode = meta.split()[1] if meta.startswith(":") else ""
        if not path.startswith("patches/") or new_mode not in {"000000", "100644", "100755"}:
            what = "a file outside patches/" if not path.startswith("patches/") else f"mode {new_mode}"
            raise ScriptError(f"{where}: commit {commit[:12]} changes {path} ({what}): refused, nothing pushed")


def _store_to_push(root: Path, decision: Decision, remote: str, where: Path) -> tuple[str, str, list[Clash]]:
    """(the store to push, the remote's value publish read = its lease, the clashes merging it gave).

    The bundled store must descend from the one prepare saw, which must still be in origin's; where
    origin moved on since, the two are merged (:func:`merge_stores`), so no push removes an entry of
    origin's store.  ("", ...) when origin holds everything already."""
    bundled = git(root, "rev-parse", f"{PUBLISH_REFS}resolutions")
    if bundled != decision.resolutions:
        raise ScriptError(
            f"{where}: holds {RESOLUTIONS} {bundled[:12]}, the decision names {decision.resolutions[:12]}"
        )
    now = _remote_ref(root, remote, RESOLUTIONS)
    if now:
        remote_git(root, remote, "fetch", "--quiet", "--no-tags", remote, f"+{now}:{PUBLISH_REFS}origin-resolutions")
    seen = decision.expected_resolutions
    if seen and not _is_ancestor(root, seen, bundled):
        raise ScriptError(
            f"{where}: {RESOLUTIONS} {bundled[:12]} does not descend from origin's {seen[:12]} that prepare saw: "
            "refused, nothing pushed"
        )
    if seen and not (now and _is_ancestor(root, seen, now)):
        raise ScriptError(
            f"{where}: origin's {RESOLUTIONS} no longer holds {seen[:12]}, which prepare saw (rewritten since): "
            "refused, nothing pushed; run the refresh again"
        )
    if now and not _shares_history(root, now, bundled):
        raise ScriptError(
            f"{where}: {RESOLUTIONS} {bundled[:12]} has no history in common with origin's {now[:12]}: "
            "refused, nothing pushed"
        )
    if not now:
        return bundled, "", []
    merged, clashes = merge_stores(root, now, bundled, label=f"the bot's {bundled[:12]}")
    return ("" if merged == now else merged), now, clashes


def _clash_note(clashes: Sequence[Clash]) -> str:
    shown = [f"- `{c.path}`: origin's `{c.kept or 'folder'}` kept, the bot's `{c.dropped}` left out" for c in clashes]
    more = [f"- and {len(clashes) - SHOWN_COMMITS} more (the publish job's log lists them)"]
    return (
        f"> **Recorded resolutions:** {len(clashes)} key(s) of `{RESOLUTIONS}` hold different entries on origin "
        "and in this refresh; origin's were kept:\n\n"
        + "\n".join(shown[:SHOWN_COMMITS] + (more if len(shown) > SHOWN_COMMITS else []))
        + "\n\n"
    )


def publish(
    workdir: Path, *, target: str, root: Path, prs: PullRequests, remote: str = "origin", base: str = "main"
) -> str:
    """Push what ``workdir``'s artifact holds for ``target`` (the workflow's own value, never the artifact's)
    and open or update its pull request; refuse (nothing pushed) anything prepare could not have written."""
    decision = Decision.read(workdir)
    where = workdir / "decision.json"
    branch = branch_of(target)
    if decision.target != target or decision.branch != branch:
        raise ScriptError(
            f"{where}: names target {decision.target[:60]!r} and branch {decision.branch[:60]!r}; this job publishes "
            f"{target[:60]!r} to {branch}: refused, nothing pushed"
        )
    if decision.action == "noop":
        return f"{branch}: nothing to do ({decision.reason})"
    if decision.action == "comment":
        number = prs.find(branch)
        if number is not None:
            said = f"{COMMENT_MARKER}\nThe scheduled refresh did not update this branch: {decision.reason}.\n"
            prs.comment_once(number, COMMENT_MARKER, fit(said))
        return f"{branch}: left to the maintainers ({decision.reason})"
    bundle = workdir / "branch.bundle"
    if not bundle.is_file():
        raise ScriptError(f"{bundle}: missing: the refresh job's artifact holds no commit; nothing pushed")
    with bundle.open("rb") as handle:
        if handle.readline(64).rstrip(b"\n") not in (b"# v2 git bundle", b"# v3 git bundle"):
            raise ScriptError(f"{bundle}: not a git bundle; nothing pushed")
    try:
        return _publish_update(decision, bundle, branch, root=root, prs=prs, remote=remote, base=base)
    finally:
        for ref in git(root, "for-each-ref", "--format=%(refname)", PUBLISH_REFS).splitlines():
            git(root, "update-ref", "-d", ref)


def _publish_update(
    decision: Decision, bundle: Path, branch: str, *, root: Path, prs: PullRequests, remote: str, base: str
) -> str:
    wanted = [f"+{BUNDLE_REF}:{PUBLISH_REFS}commit"]
    wanted += [f"+{RESOLUTIONS}:{PUBLISH_REFS}resolutions"] if decision.resolutions else []
    try:
        git(root, "fetch", "--quiet", "--no-tags", str(bundle), *wanted)
    except ScriptError as exc:
        raise ScriptError(f"{bundle}: not a bundle of what the decision names ({exc}); nothing pushed") from None
    commit = git(root, "rev-parse", f"{PUBLISH_REFS}commit")
    if commit != decision.commit:
        raise ScriptError(f"{bundle}: holds {commit[:12]}, the decision names {decision.commit[:12]}; nothing pushed")
    remote_git(root, remote, "fetch", "--quiet", "--no-tags", remote, f"+refs/heads/{base}:{PUBLISH_REFS}base")
    _check_commit(root, commit, f"{PUBLISH_REFS}base", bundle)
    head = _remote_head(root, remote, branch)
    if head != decision.expected_remote:
        raise ScriptError(
            f"{branch}: moved since prepare ran (now {head[:12] or 'absent'}, prepare saw "
            f"{decision.expected_remote[:12] or 'none'}): nothing pushed; run the refresh again"
        )
    if head:
        remote_git(root, remote, "fetch", "--quiet", "--no-tags", remote, f"+{head}:{PUBLISH_REFS}branch")
        humans = _human_commits(root, head, f"{PUBLISH_REFS}base")
        if humans:
            raise ScriptError(
                f"{branch}: holds {len(humans)} commit(s) the bot did not make ({humans[0][:12]}): nothing pushed"
            )
    refspecs = [f"{commit}:refs/heads/{branch}"]
    leases = [f"--force-with-lease=refs/heads/{branch}:{head}"]
    clashes: list[Clash] = []
    if decision.resolutions:
        store, lease, clashes = _store_to_push(root, decision, remote, bundle)
        if store:
            refspecs.append(f"{store}:{RESOLUTIONS}")
            leases.append(f"--force-with-lease={RESOLUTIONS}:{lease}")
    try:
        remote_git(root, remote, "push", "--quiet", "--atomic", "--no-verify", *leases, remote, *refspecs)
    except ScriptError as exc:
        raise ScriptError(f"{branch}: the push was refused, nothing pushed (one atomic push): {exc}") from None
    workdir = bundle.parent
    found = [workdir / name for name in (BODY, FULL) if (workdir / name).is_file()]
    text = found[0].read_text(encoding="utf-8", errors="replace") if found else decision.reason + "\n"
    body = fit((_clash_note(clashes) if clashes else "") + text)
    number = prs.find(branch)
    if number is None:
        number = prs.create(branch, base, decision.title, body, draft=decision.draft, labels=decision.labels)
    else:
        prs.update(number, decision.title, body, draft=decision.draft, labels=decision.labels)
    said = [f"{branch}: pushed {commit[:12]}, pull request #{number}"]
    return "\n".join(said + [clash.line() for clash in clashes])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="refresh, check, commit; write the work folder (read-only token)")
    p.add_argument("--target", required=True, help="release | main | an explicit spec (vllm-ascend==X, a ref)")
    p.add_argument("--workdir", required=True, type=Path)
    p.add_argument("--remote", default="origin")
    q = sub.add_parser("publish", help="push the branch and open or update its pull request (write token)")
    q.add_argument("--target", required=True, help="the matrix's target: publish derives the branch from it")
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
            said = publish(
                args.workdir, target=args.target, root=root, prs=GhCli(root), remote=args.remote, base=args.base
            )
            print(said)
    except ScriptError as exc:
        print(f"refresh_pr: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a work folder or file that cannot be read or written
        print(f"refresh_pr: error: {exc.filename or args.workdir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
