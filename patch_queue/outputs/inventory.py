"""``pq blocks``: the inventory of omni blocks, generated from the series.

It replaces the hand-kept reference document of omni-specific blocks that the manual upgrade
relies on.  For every output module of the top of the stack it lists each omni block (index,
method, first meaningful lines, the patch that brought it, fenced or a one-line tag) and, per
carried method, the omni edits that carry no fence at all: lines a per-method patch added to the
copied upstream code outside any block.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from patch_queue.git.diff import line_hunks
from patch_queue.git.repo import ProjectRepo
from patch_queue.merge import anchors
from patch_queue.series import replay, stack


@dataclass(frozen=True)
class Entry:
    file: str
    line: int  # 1-based, in the top of the stack
    index: int | None  # the block's index in its file; None for an unfenced edit
    symbol: str
    kind: str  # "fenced" | "tag" | "unfenced"
    patch: str
    lines: tuple[str, ...]  # the first meaningful lines


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _meaningful(lines: Sequence[str], limit: int = 2) -> tuple[str, ...]:
    """The first ``limit`` lines that are neither blank nor a fence or tag, stripped."""
    code = (line.strip() for line in lines if not anchors.FENCE.match(line) and not anchors.PLAIN.match(line))
    return tuple(islice(filter(None, code), limit))


def _modules(repo: ProjectRepo, commit: str) -> dict[str, str]:
    files = repo.read_tree(repo.commit_info(commit).tree)
    return {
        k: v.decode("utf-8", errors="replace")
        for k, v in files.items()
        if not k.startswith(stack.VENDOR) and k.endswith(".py")
    }


def _entry(path: str, text: str, line: int, index: int | None, kind: str, patch: str, body: Sequence[str]) -> Entry:
    return Entry(path, line, index, replay.enclosing_symbol(text, line), kind, patch, _meaningful(body))


def inventory(repo: ProjectRepo, base: str, patches: Sequence[tuple[str, str]]) -> list[Entry]:
    """Every omni block and unfenced omni edit of the top of ``patches``, with the patch that brought it."""
    if not patches:
        return []
    top = _modules(repo, patches[-1][1])
    origin: dict[tuple[str, str], str] = {}  # (file, squashed block) -> first patch holding it
    unfenced: list[tuple[str, str, list[str]]] = []  # (file, patch, added lines outside blocks)
    parent = _modules(repo, base)
    seen_modules: set[str] = set()  # modules a patch has already touched (their skeleton is done)
    for name, commit in patches:
        now = _modules(repo, commit)
        for path, text in now.items():
            lines = text.splitlines(keepends=True)
            blocks, _problems = anchors.parse_blocks(text)
            inside: set[int] = set()
            for b in blocks:
                origin.setdefault((path, _squash("".join(lines[b.start - 1 : b.end]))), name)
                inside.update(range(b.start, b.end + 1))
            old = parent.get(path)
            if old == text:
                continue
            if old is None or path not in seen_modules:
                # a module's first patch is its skeleton (or an omni-only module): imports, class lines and
                # omni-only methods are omni code of its own, not edits of copied upstream code
                seen_modules.add(path)
                continue
            added = text.split("\n")  # git's lines: split at newlines only
            for _old_start, _old_count, new_start, new_count in line_hunks(old.encode(), text.encode()):
                new = range(new_start, new_start + new_count)
                outside = [added[n] for n in new if n + 1 not in inside and added[n].strip()]
                if outside:
                    unfenced.append((path, name, outside))
        parent = now
    out: list[Entry] = []
    for path in sorted(top):
        text = top[path]
        lines = text.splitlines(keepends=True)
        blocks, _problems = anchors.parse_blocks(text)
        for b in blocks:
            body = lines[b.start - 1 : b.end]
            patch = origin.get((path, _squash("".join(body))), "?")
            out.append(_entry(path, text, b.start, b.index, "fenced" if b.fenced else "tag", patch, body))
        squashed_top = [_squash(x) for x in lines]
        for fpath, name, added in unfenced:
            if fpath != path:
                continue
            first = _squash(added[0])
            line = next((i + 1 for i, x in enumerate(squashed_top) if x == first), 0)
            if line == 0:
                continue  # a later patch replaced it; that patch lists its own edit
            out.append(_entry(path, text, line, None, "unfenced", name, added))
    return sorted(out, key=lambda e: (e.file, e.line, e.kind))


def markdown(entries: Sequence[Entry], *, title: str) -> str:
    out = [f"# Omni blocks: {title}", ""]
    by_file: dict[str, list[Entry]] = {}
    for e in entries:
        by_file.setdefault(e.file, []).append(e)
    fenced = sum(1 for e in entries if e.kind != "unfenced")
    out.append(
        f"{fenced} omni blocks (fenced or tagged) and {len(entries) - fenced} unfenced omni edits "
        f"in {len(by_file)} modules, generated by `pq blocks` from the patch series."
    )
    for path, items in by_file.items():
        out += [
            "",
            f"## {path}",
            "",
            "| line | block | method | kind | patch | first lines |",
            "|--:|--:|---|---|---|---|",
        ]
        for e in items:
            first = " ⏎ ".join(x.replace("|", "\\|").replace("`", "'") for x in e.lines)
            out.append(
                f"| {e.line} | {'' if e.index is None else e.index} | `{e.symbol or '<module>'}` | {e.kind} "
                f"| `{e.patch}` | `{first}` |"
            )
    return "\n".join(out) + "\n"
