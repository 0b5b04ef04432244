"""What a command imports before it runs: what it runs, and nothing of the others (each checked in a fresh
interpreter through ``sys.modules``; no timings)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer.core
import typer.main

from patch_queue.cli import only
from patch_queue.cli.app import app

RICH_HELP = ("typer.rich_utils", "rich", "markdown_it")  # typer's help machinery: `--help` alone reads it
GITPYTHON = "git"  # a clone or a request stream alone (patch_queue.git.command)

_RUN = """
import sys
from patch_queue.cli import main
sys.argv = ["pq", *sys.argv[1:]]
code = 0
try:
    main()
except SystemExit as done:
    code = done.code
print("\\n--", code, *sorted(sys.modules))
"""


def imported(cwd: Path, *args: str) -> tuple[object, set[str]]:
    """The exit code of ``pq args...`` run in ``cwd`` by a new interpreter, and every module it imported."""
    proc = subprocess.run([sys.executable, "-c", _RUN, *args], cwd=cwd, capture_output=True, text=True, check=True)
    code, *modules = proc.stdout.rsplit("\n-- ", 1)[1].split()
    return code, set(modules)


def commands(first: list[str]) -> dict[str, object]:
    """The click commands of the app a run whose first word is ``first`` builds, by name."""
    group = typer.main.get_command(only(first))
    assert isinstance(group, typer.core.TyperGroup)
    return dict(group.commands)


def test_a_run_builds_only_the_command_it_names() -> None:
    """Typer makes a click command of each registered one before it parses a word: a run registers the one it
    names (a verb family with its verbs); help, no word and a typo see them all."""
    registered = list(app.registered_commands)
    assert list(commands(["status"])) == ["status"]
    assert list(commands(["sync-gpu"])) == ["sync-gpu"]
    family = commands(["resolutions"])["resolutions"]
    assert isinstance(family, typer.core.TyperGroup)
    assert set(family.commands) == {"list", "drop", "merge", "log"}
    for first in ([], ["--help"], ["-h"], ["--version"], ["stauts"]):
        assert only(first) is app
    assert len(commands([])) == len(app.registered_commands) + len(app.registered_groups)
    assert app.registered_commands == registered


def test_help_imports_no_command(tmp_path: Path) -> None:
    """``pq --help`` lists every command from its signature: no command module, no libgit2."""
    code, modules = imported(tmp_path, "--help")
    assert code == "0"
    assert "typer.rich_utils" in modules
    assert not {m for m in modules if m.startswith("patch_queue.commands")}
    assert "pygit2" not in modules


def test_status_imports_neither_rich_nor_the_refresh(adopted_030: Path) -> None:
    """``pq status`` reads the stack and the output folder: not typer's rich help, GitPython, the replay, the
    upstream sources (refs/pq/base holds the pinned files) or packaging's platform tags."""
    code, modules = imported(adopted_030, "status")
    assert code == "0"
    unwanted = {
        *RICH_HELP,
        GITPYTHON,
        "patch_queue.commands.refresh",
        "patch_queue.commands.machine",
        "patch_queue.commands.pending",
        "patch_queue.commands.adopt",
        "patch_queue.series.replay",
        "patch_queue.sources.snapshot",
        "patch_queue.sources.registry",
        "packaging.utils",
    }
    assert modules & unwanted == set()


def test_a_release_name_is_normalized_without_packaging_tags(tmp_path: Path) -> None:
    """PEP 503's rule, as ``packaging.utils.canonicalize_name`` gives it, without importing that module (its
    platform tags would be read by every refresh onto a release)."""
    code = (
        "import sys\n"
        "from patch_queue.sources.registry import normalize_name\n"
        "print(normalize_name(sys.argv[1]), 'packaging.utils' in sys.modules)\n"
    )
    names = [" Vllm_Ascend ", "vllm-ascend", "a.-_b", "A__B..c"]
    got = [
        subprocess.run([sys.executable, "-c", code, n], capture_output=True, text=True, check=True).stdout.split()
        for n in names
    ]
    from packaging.utils import canonicalize_name

    assert got == [[str(canonicalize_name(n.strip())), "False"] for n in names]
