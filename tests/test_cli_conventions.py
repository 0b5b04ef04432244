"""The command-line conventions pq's users bring from git and other typer CLIs: ``--version``, ``-h``, the
exit-code table in the help."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

from conftest import pq

from patch_queue import errors


def test_version(tmp_path: Path) -> None:
    proc = pq(tmp_path, "--version")
    assert proc.stdout == f"pq {version('patch-queue')}\n"


def test_dash_h_is_help_for_pq_and_its_commands(tmp_path: Path) -> None:
    assert pq(tmp_path, "-h").stdout == pq(tmp_path, "--help").stdout
    for args in (("status",), ("resolutions", "list")):
        short = pq(tmp_path, *args, "-h").stdout
        assert short == pq(tmp_path, *args, "--help").stdout and "Usage: pq " + " ".join(args) in short


def test_help_lists_every_exit_code_pq_uses(tmp_path: Path) -> None:
    text = " ".join(pq(tmp_path, "--help").stdout.split())
    listed = {int(code) for code in re.findall(r"(?:Exit codes:|;) (\d+) ", text)}
    constants = {getattr(errors, n) for n in dir(errors) if n.startswith("EXIT_")}
    assert constants <= listed and {2, 130, 141} <= listed, listed
    # the codes the command line itself exits with besides the constants: typer's usage error, an interrupt
    # and a broken pipe
    assert pq(tmp_path, "no-such-command", check=2).returncode == 2
