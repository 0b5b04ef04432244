"""The layout of patch_queue/ (docs/architecture.md, "Layout"): imports go down the layers only, and the pure core
(merge/ and the report) uses neither the repository nor the command line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "patch_queue"
# lowest first; a module may import its own folder and any folder of a lower layer
LAYERS = (
    {"errors", "spec", "namespace"},
    {"fsutil", "progress", "presets"},
    {"git"},
    {"merge"},
    {"sources"},
    {"series"},
    {"project"},
    {"checks", "outputs"},
    {"sync"},
    {"commands"},
    {"cli"},
    {"__main__"},
)
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}
PURE = ("merge/", "outputs/report.py", "outputs/report_parts.py")
NOT_IN_PURE = ("pygit2", "git", "typer", "subprocess", "patch_queue.cli", "patch_queue.commands", "patch_queue.project")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of ``path``; ``from patch_queue.git import diff`` (from a package of
    pq) counts as ``patch_queue.git.diff``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            package = (
                node.module.startswith("patch_queue") and PACKAGE.parent.joinpath(*node.module.split(".")).is_dir()
            )
            names = [f"{node.module}.{a.name}" for a in node.names] if package else [node.module]
            out += [(node.lineno, n) for n in names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def folder(path: Path) -> str:
    return path.relative_to(PACKAGE).with_suffix("").parts[0]


def test_every_module_has_a_layer() -> None:
    assert {folder(p) for p in modules()} - {"__init__"} <= set(RANK)


def test_imports_go_down_the_layers() -> None:
    wrong = []
    for path in modules():
        own = folder(path)
        for line, name in imports(path):
            if not name.startswith("patch_queue."):
                continue
            target = name.split(".")[1]
            if target != own and own in RANK and RANK.get(target, -1) >= RANK[own]:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("where", PURE)
def test_the_pure_core_uses_no_repository_and_no_command_line(where: str) -> None:
    paths = [p for p in modules() if p.relative_to(PACKAGE).as_posix().startswith(where)]
    assert paths
    found = []
    for path in paths:
        for line, name in imports(path):
            banned = name in NOT_IN_PURE or name.startswith(tuple(f"{b}." for b in NOT_IN_PURE))
            # the only git code it may use is git/diff.py: libgit2's line diff, a text algorithm
            if banned or (name.startswith("patch_queue.git") and name != "patch_queue.git.diff"):
                found.append(f"{path.relative_to(PACKAGE)}:{line} imports {name}")
    assert not found, "\n".join(found)


def test_a_planted_upward_import_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from patch_queue.commands import refresh\nimport pygit2\n", encoding="utf-8")
    assert imports(bad) == [(1, "patch_queue.commands.refresh"), (2, "pygit2")]
