"""Write docs/reference.md, the command reference, from the help of pq's Typer app.

Usage::

    python bench/reference.py [--out FILE] [--check]

It walks the commands of ``patch_queue.cli.app`` in the order of ``pq --help`` (a command group such as
``pq resolutions`` with its commands after it) and renders each one's usage, help text, arguments and
options as Markdown, from the click objects Typer builds: no terminal, no colour and no width enter it, so
the output is byte for byte the same on every machine. Hidden options (old spellings kept for a while)
are left out, as ``pq --help`` leaves them out. ``--check`` writes nothing and exits 1 when the file
differs (``tests/test_docs.py`` checks the same). Rerun it whenever a command, an option or a help text
changes.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import typer.main
from typer._click.core import Command, Context
from typer.core import TyperArgument, TyperGroup, TyperOption

from patch_queue.cli import app
from patch_queue.cli.app import EXIT_CODES

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "reference.md"
TITLE = "# pq command reference"


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _paragraphs(text: str) -> str:
    """A help text as Markdown: its lines as written, blank lines between paragraphs kept."""
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _first_paragraph(text: str | None) -> str:
    return (text or "").strip().split("\n\n")[0]


def exit_codes() -> list[tuple[str, str]]:
    """(code, meaning) of every exit code ``pq --help`` lists (``EXIT_CODES`` of ``patch_queue/cli/app.py``)."""
    prefix = "Exit codes: "
    assert EXIT_CODES.startswith(prefix), EXIT_CODES
    rows = []
    for part in EXIT_CODES[len(prefix) :].rstrip(".").split("; "):
        code, _, meaning = part.partition(" ")
        assert code.isdigit() and meaning, part
        rows.append((code, meaning))
    return rows


def _walk(group: TyperGroup, ctx: Context, path: str) -> Iterator[tuple[str, Command, Context]]:
    for name, cmd in group.commands.items():
        if cmd.hidden:
            continue
        sub = Context(cmd, info_name=name, parent=ctx)
        yield f"{path} {name}", cmd, sub
        if isinstance(cmd, TyperGroup):
            yield from _walk(cmd, sub, f"{path} {name}")


def _argument(param: TyperArgument) -> str:
    name = (param.metavar or param.name or "").upper()
    if param.nargs != 1:
        name += "..."
    return name if param.required else f"[{name}]"


def _usage(path: str, cmd: Command, ctx: Context) -> str:
    pieces = [path]
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    if any(isinstance(p, TyperOption) and "--help" not in p.opts for p in params):
        pieces.append("[OPTIONS]")
    pieces += [_argument(p) for p in params if isinstance(p, TyperArgument)]
    if isinstance(cmd, TyperGroup):
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def _option_cells(param: TyperOption, ctx: Context) -> tuple[str, str, str, str]:
    """(names, value, default, help) of an option: no value for a flag, no default where it has none."""
    names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
    value = "" if param.is_flag else f"`{_cell(param.make_metavar(ctx))}`"
    default = param.default
    shown = "" if param.is_flag or default in (None, (), "") else f"`{_cell(str(default))}`"
    return names, value, shown, _cell(param.help or "")


def _option_table(options: list[TyperOption], ctx: Context) -> list[str]:
    """The options as a table; the default column only when one of them has a default."""
    rows = [_option_cells(p, ctx) for p in options]
    if any(row[2] for row in rows):
        return ["| option | value | default | help |", "|---|---|---|---|", *(f"| {' | '.join(r)} |" for r in rows)]
    return ["| option | value | help |", "|---|---|---|", *(f"| {n} | {v} | {h} |" for n, v, _, h in rows)]


def render_command(path: str, cmd: Command, ctx: Context) -> list[str]:
    out = [f"## `{path}`", "", "```text", f"{_usage(path, cmd, ctx)}", "```", ""]
    if cmd.help:
        out += [_paragraphs(cmd.help), ""]
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    arguments = [p for p in params if isinstance(p, TyperArgument)]
    options = [p for p in params if isinstance(p, TyperOption) and "--help" not in p.opts]
    if arguments:
        out += ["| argument | help |", "|---|---|"]
        out += [f"| `{_argument(p)}` | {_cell(getattr(p, 'help', None) or '')} |" for p in arguments]
        out.append("")
    if options:
        out += _option_table(options, ctx)
        out.append("")
    if isinstance(cmd, TyperGroup):
        out += ["Commands: " + ", ".join(f"`{path} {n}`" for n, c in cmd.commands.items() if not c.hidden) + ".", ""]
    if cmd.epilog and path != "pq":
        out += [_paragraphs(cmd.epilog), ""]
    return out


def render() -> str:
    """The whole of docs/reference.md."""
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    ctx = Context(root, info_name="pq")
    commands = list(_walk(root, ctx, "pq"))
    out = [
        TITLE,
        "",
        "<!-- Generated by bench/reference.py from pq's --help; do not edit: run `python bench/reference.py`. -->",
        "",
        _paragraphs(root.help or ""),
        "",
        "Every command takes `-h`/`--help`; `pq --version` prints pq's version. The guide to each command is"
        " [commands.md](commands.md).",
        "",
        "## Commands",
        "",
    ]
    out += [f"- [`{path}`](#{_anchor(path)}): {_cell(_first_paragraph(cmd.help))}" for path, cmd, _ in commands]
    out += ["", "## Exit codes", "", "| code | meaning |", "|---|---|"]
    out += [f"| {code} | {_cell(meaning)} |" for code, meaning in exit_codes()]
    out.append("")
    out += render_command("pq", root, ctx)
    for path, cmd, sub in commands:
        out += render_command(path, cmd, sub)
    return "\n".join(out).rstrip("\n") + "\n"


def _anchor(path: str) -> str:
    """GitHub's anchor of the heading ``## `path` ``: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^a-z0-9 _-]", "", path.lower()).replace(" ", "-")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the file to write (default docs/reference.md)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file differs")
    args = parser.parse_args(argv)
    text = render()
    current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
    if args.check:
        if current != text:
            print(f"{args.out}: stale: run `python bench/reference.py`", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
