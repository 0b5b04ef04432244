"""The documentation: README.md and docs/.

docs/reference.md is generated from pq's --help by bench/reference.py and must equal what it generates
now (a changed command, option or help text fails here: rerun `python bench/reference.py`); every
relative link of README.md and docs/*.md names a file that exists and, with `#anchor`, a heading of it;
the README stays short, holds the two commands for a fresh machine exactly, and lists the exit codes
`pq --help` lists; docs/commands.md has a section for every command. On the real corpus, what the README shows
holds on this repository's series: its worked conflict and `pq merge` print what it quotes, and `git am` (and
`quilt push -a`) of patches/ on refs/pq/base give refs/pq/top.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from conftest import corpus_dir, git, new_project, pq

from patch_queue.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SCRIPT = ROOT / "bench" / "reference.py"
README_LIMIT = 12_000

sys.path.insert(0, str(ROOT / "bench"))
import reference  # noqa: E402  (bench/ is not a package)

LINK = re.compile(r"(?<!`)\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def documents() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def anchors(text: str) -> set[str]:
    """GitHub's anchors of the headings of a Markdown text: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    """Every relative link of ``doc`` (outside code blocks) whose file or heading does not exist, named by
    ``doc``'s path under ``root`` and its line."""
    out = []
    text = doc.read_text(encoding="utf-8")
    for n, line in enumerate(FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text).splitlines(), 1):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                out.append(f"{doc.relative_to(root)}:{n}: {target}: no such file")
            elif anchor and (file.suffix != ".md" or anchor not in anchors(file.read_text(encoding="utf-8"))):
                out.append(f"{doc.relative_to(root)}:{n}: {target}: no heading #{anchor} in {path or doc.name}")
    return out


def test_reference_is_current() -> None:
    committed = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert committed == reference.render(), "docs/reference.md is stale: run `python bench/reference.py`"


def test_reference_ignores_the_terminal(tmp_path: Path) -> None:
    """No width, colour or locale of the terminal enters the reference: two runs under different ones agree."""
    outs = []
    for i, env in enumerate(
        ({"COLUMNS": "40", "FORCE_COLOR": "1", "TERM": "xterm-256color"}, {"COLUMNS": "250", "NO_COLOR": "1"})
    ):
        out = tmp_path / f"ref{i}.md"
        subprocess.run(
            [sys.executable, str(SCRIPT), "--out", str(out)],
            cwd=tmp_path,
            env={**os.environ, **env},
            check=True,
            capture_output=True,
        )
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == reference.render().encode("utf-8")


def test_reference_check_mode(tmp_path: Path) -> None:
    """`--check` says how to fix a stale file and exits 1; on a current one it exits 0 and writes nothing."""
    stale = tmp_path / "reference.md"
    stale.write_text(reference.render().replace("## `pq refresh`", "## `pq refreshed`"))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--out", str(stale)], capture_output=True, text=True, check=False
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"{stale}: stale: run `python bench/reference.py`\n"
    stale.write_text(reference.render())
    before = stale.stat().st_mtime_ns
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", "--out", str(stale)], capture_output=True, text=True, check=False
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert stale.stat().st_mtime_ns == before


def command_paths() -> list[str]:
    root = typer.main.get_command(app)
    out = []
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        out.append(f"pq {name}")
        out += [f"pq {name} {sub}" for sub in getattr(cmd, "commands", {})]
    return out


def test_reference_covers_every_command_and_option() -> None:
    text = reference.render()
    root = typer.main.get_command(app)
    for path in command_paths():
        assert f"\n## `{path}`\n" in text, path
    refresh = root.commands["refresh"]  # type: ignore[attr-defined]
    section = text.split("## `pq refresh`")[1].split("\n## ")[0]
    for param in refresh.params:
        if param.name != "help":
            assert f"`{param.opts[0]}`" in section, param.opts


def test_every_command_has_a_guide_section() -> None:
    headings = [line for line in (DOCS / "commands.md").read_text().splitlines() if line.startswith("## ")]
    for path in command_paths():
        top = " ".join(path.split()[:2])
        assert any(f"`{top}`" in h for h in headings), f"docs/commands.md has no section for `{top}`: add one"


def test_every_relative_link_resolves() -> None:
    assert [b for doc in documents() for b in broken_links(doc)] == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# B title\n\n## Two words\n")
    doc = tmp_path / "a.md"
    doc.write_text(
        "[ok](b.md) [ok](b.md#two-words) [ok](#a) [web](https://example.invalid/x)\n"
        "`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"
        "[gone](c.md) [no heading](b.md#three) [self](#b-title)\n\n# A\n"
    )
    assert broken_links(doc, tmp_path) == [
        "a.md:6: c.md: no such file",
        "a.md:6: b.md#three: no heading #three in b.md",
        "a.md:6: #b-title: no heading #b-title in a.md",
    ]


def test_readme_is_short() -> None:
    size = len(README.read_text(encoding="utf-8"))
    assert size <= README_LIMIT, f"README.md has {size} characters (at most {README_LIMIT}): move detail to docs/"


def test_readme_holds_the_two_commands() -> None:
    """The commands for a fresh machine, each alone in a shell block, and the scripts they name."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
    assert "bash scripts/main.sh\n" in blocks and "bash scripts/test.sh\n" in blocks
    assert (ROOT / "scripts" / "main.sh").is_file() and (ROOT / "scripts" / "test.sh").is_file()
    assert "exec bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()


def test_readme_lists_the_exit_codes() -> None:
    text = README.read_text(encoding="utf-8")
    table = text.split("## Exit codes\n")[1].split("\n## ")[0]
    rows = re.findall(r"^\| (\d+) \| (.*) \|$", table, re.M)
    assert rows == reference.exit_codes()
    assert [code for code, _ in rows] == ["0", "1", "2", "3", "4", "130", "141"]


@pytest.mark.parametrize("doc", ["commands", "conflicts", "state", "measurement", "architecture", "reference"])
def test_readme_links_each_doc(doc: str) -> None:
    assert f"](docs/{doc}.md" in README.read_text(encoding="utf-8")


def test_git_am_and_quilt_rebuild_the_stack(tmp_path: Path) -> None:
    """README, "How the stack looks": this repository's series, reproduced from its lineage, is rebuilt
    without pq by `git am` on refs/pq/base (the very commit ids with the committer set to the author), and
    `quilt push -a` on a copy of refs/pq/base's files gives the files of refs/pq/top."""
    if corpus_dir() is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    proj = new_project(tmp_path / "p")
    shutil.copytree(ROOT / "patches", proj / "patches", ignore=shutil.ignore_patterns("*.patch"))
    pq(proj, "reproduce")
    series = [line for line in (proj / "patches" / "series").read_text().splitlines() if not line.startswith("#")]
    assert len(series) > 10
    stack = tmp_path / "stack"
    git(proj, "worktree", "add", "-q", "--detach", str(stack), "refs/pq/base")
    bodies = [str(proj / "patches" / name) for name in series]
    git(stack, "am", "-q", *bodies)  # the tests' own committer and date
    top = git(proj, "rev-parse", "refs/pq/top", "refs/pq/top^{tree}").split()
    assert git(stack, "rev-parse", "HEAD^{tree}").strip() == top[1]
    assert git(stack, "rev-parse", "HEAD").strip() != top[0]
    git(stack, "reset", "-q", "--hard", "refs/pq/base")
    author = subprocess.run(
        ["git", "log", "-1", "--format=%an%n%ae", "refs/pq/top"], cwd=proj, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    subprocess.run(
        ["git", "am", "-q", "--committer-date-is-author-date", *bodies],
        cwd=stack,
        env={**os.environ, "GIT_COMMITTER_NAME": author[0], "GIT_COMMITTER_EMAIL": author[1]},
        check=True,
        capture_output=True,
    )
    assert git(stack, "rev-parse", "HEAD").strip() == top[0]
    if shutil.which("quilt") is None:
        return  # quilt is not installed here: git am alone is checked
    files = tmp_path / "quilt"
    files.mkdir()
    archive = subprocess.run(["git", "archive", "refs/pq/base"], cwd=proj, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(files)], input=archive, check=True)
    shutil.copytree(proj / "patches", files / "patches")
    subprocess.run(["quilt", "push", "-a", "-q"], cwd=files, capture_output=True, check=True)
    shutil.rmtree(files / "patches")
    shutil.rmtree(files / ".pc")
    listed = git(proj, "ls-tree", "-r", "--name-only", "refs/pq/top").splitlines()
    assert sorted(p.relative_to(files).as_posix() for p in files.rglob("*") if p.is_file()) == sorted(listed)
    for name in listed:
        assert (files / name).read_bytes() == subprocess.run(
            ["git", "show", f"refs/pq/top:{name}"], cwd=proj, capture_output=True, check=True
        ).stdout, name


def transcript(section: str, *, until: str | None = None) -> list[tuple[list[str], list[str]]]:
    """The `$ pq ...` commands of the README's console blocks under the heading ``section``, each with the
    output lines the README shows for it (``...`` marks lines cut, and is skipped), up to the command
    ``until``."""
    text = README.read_text(encoding="utf-8")
    body = re.split(r"^#+ ", text.split(f"\n{section}\n", 1)[1], maxsplit=1, flags=re.M)[0]
    out: list[tuple[list[str], list[str]]] = []
    for block in re.findall(r"^```console\n(.*?)^```", body, re.S | re.M):
        for line in block.splitlines():
            if line.startswith("$ "):
                command = line[2:].split("  #")[0].split()
                if command[0] != "pq":
                    return out  # a git command: the transcript pq can replay ends here
                if until is not None and command[:2] == ["pq", until]:
                    return out
                out.append((command[1:], []))
            elif line != "..." and out:
                out[-1][1].append(line)
    return out


def test_the_readme_transcripts_are_real(tmp_path: Path) -> None:
    """The README's worked conflict and `pq merge` show pq's real output: replayed on this repository's
    series (reproduced from its lineage, as a fresh clone does), each line they show is a line pq prints.
    A changed message fails here: run the commands as the README says and paste their output there."""
    if corpus_dir() is None:
        pytest.skip("the real corpus is not here (set PQ_CORPUS)")
    proj = new_project(tmp_path / "p")
    shutil.copytree(ROOT / "patches", proj / "patches", ignore=shutil.ignore_patterns("*.patch"))
    pq(proj, "reproduce")
    merge = transcript("## A newer vllm-omni release")
    worked = transcript("### A worked conflict", until="continue")
    assert [c[0] for c, _ in merge] == ["merge"] and [c[0] for c, _ in worked] == ["refresh", "status", "resolve"]
    section = README.read_text(encoding="utf-8").split("\n### A worked conflict\n")[1]
    (region,) = re.findall(r"^```text\n(.*?)^```", section.split("\n## ")[0], re.S | re.M)
    for command, shown in merge + worked:
        proc = pq(proj, *command, check=None)
        printed = (proc.stdout + proc.stderr).splitlines()
        missing = [line for line in shown if line not in printed]
        assert not missing, f"pq {' '.join(command)} no longer prints these README lines: {missing}"
        if command[0] == "refresh":  # the region the README shows, as the file holds it
            assert proc.returncode == 3
            assert region in (proj / "npu_worker" / "npu_ar_model_runner.py").read_text(encoding="utf-8")
