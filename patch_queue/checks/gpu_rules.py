"""The translation rules of ``pq sync-gpu``: ``gpu_sync.toml``, extended by a project's
``patches/gpu-sync-rules.toml``.

Every rule rewrites each line of a GPU hunk, in order (``CUDAGraphWrapper`` -> ``ACLGraphWrapper``,
``set_forward_context`` -> ``set_ascend_forward_context``, ...); a project's rule with a built-in id replaces it
in place, a new id goes after the built-in ones.

A project's ``[[decline]]`` tables name GPU changes its maintainers chose not to port (``file``, ``method``, the
change's ``first`` meaningful line, an optional ``note``): ``pq sync-gpu`` lists them and ports them no more.
``pq delete`` of a ``sync-gpu-*`` patch writes one per change the patch ported, so a port taken out stays out.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from patch_queue.errors import QueueError
from patch_queue.merge import anchors
from patch_queue.series.queue import toml_string

USER_RULES = "gpu-sync-rules.toml"
BUILTIN = "patch_queue/checks/gpu_sync.toml"


@dataclass(frozen=True)
class Rule:
    id: str
    find: str
    replace: str
    regex: bool = True
    note: str = ""

    def apply(self, line: str) -> str:
        return re.sub(self.find, self.replace, line) if self.regex else line.replace(self.find, self.replace)


@dataclass(frozen=True)
class Decline:
    """A GPU change not to port: of the GPU module ``file``, in its method ``method``, whose first meaningful
    line (stripped) is ``first``."""

    file: str
    method: str
    first: str
    note: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return self.file, self.method, self.first

    def toml(self) -> str:
        """The ``[[decline]]`` table of this entry."""
        keys = [("file", self.file), ("method", self.method), ("first", self.first)]
        keys += [("note", self.note)] if self.note else []
        return "[[decline]]\n" + "".join(f"{k} = {toml_string(v)}\n" for k, v in keys)


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...]
    fence: str
    declined: tuple[Decline, ...] = ()

    def translate(self, line: str) -> str:
        for rule in self.rules:
            line = rule.apply(line)
        return line

    def decline_of(self, gpu_file: str, method: str, first: str) -> Decline | None:
        """The entry that declines the change (``GpuChange.gpu_file``, ``.method``, ``.first``), if any."""
        return next((d for d in self.declined if d.key == (gpu_file, method, first)), None)


_PORTED = re.compile(r"^- (\S+?):\d+(?: (\w+))?: (.+)$", re.M)  # an older port's message names no method


def ported_line(gpu_file: str, gpu_line: int, method: str, first: str) -> str:
    """The line of a ``sync-gpu-*`` patch's message naming a GPU change it ports (read by :func:`declines_of`)."""
    return f"- {gpu_file}:{gpu_line} {method}: {first}\n"


def declines_of(name: str, message: str) -> list[Decline]:
    """The ``[[decline]]`` entries of the GPU changes a ``sync-gpu-*`` patch (``name``, its commit ``message``)
    ported; [] for another patch.  Without a method in the message, the method of the subject's NPU symbol."""
    if not re.fullmatch(r"\d+-sync-gpu-.+\.patch", name):
        return []
    symbol = message.partition("\n")[0].rsplit(" ", 1)[-1]
    return [
        Decline(file, method or symbol.rpartition(".")[2], first.strip(), f"pq delete {name}")
        for file, method, first in _PORTED.findall(message)
    ]


def parse_rules(text: str, *, path: str) -> tuple[list[Rule], str | None, list[Decline]]:
    """The rules of one rules file, its ``fence`` (None when it sets none) and its declined changes."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise QueueError(f"not valid TOML: {exc}", path=path) from None
    fence = data.get("fence")
    if fence is not None and not (isinstance(fence, str) and anchors.FENCE.match(fence)):
        raise QueueError("fence must be an Omni-new fence comment line (# ---- Omni-new ----)", path=path)
    rules: list[Rule] = []
    for raw, fail in _tables(data, "rule", ("id", "find"), text, path):
        if not isinstance(raw.get("replace"), str):
            raise fail(f" ({raw['id']}).replace must be a string")
        regex = raw.get("regex", True)
        if not isinstance(regex, bool):
            raise fail(f" ({raw['id']}).regex must be true or false")
        rule = Rule(raw["id"], raw["find"], raw["replace"], regex, str(raw.get("note", "")))
        if regex:
            try:
                rule.apply("")
                re.compile(rule.find)
            except re.error as exc:
                raise fail(f" ({rule.id}): bad find or replace: {exc}") from None
        rules.append(rule)
    declined: list[Decline] = []
    for raw, fail in _tables(data, "decline", ("file", "method", "first"), text, path):
        if not isinstance(raw.get("note", ""), str):
            raise fail(".note must be a string")
        declined.append(Decline(raw["file"], raw["method"], raw["first"].strip(), raw.get("note", "")))
    return rules, fence, declined


def _tables(
    data: dict[str, Any], kind: str, required: tuple[str, ...], text: str, path: str
) -> Iterator[tuple[dict[str, Any], Callable[[str], QueueError]]]:
    """Each ``[[kind]]`` table of ``data`` whose ``required`` keys are non-empty strings, with the error of that
    table (the message after ``kind[i]``, at the table's line in ``text``)."""
    heads = [n for n, line in enumerate(text.splitlines(), 1) if line.strip().startswith(f"[[{kind}]]")]
    for i, raw in enumerate(data.get(kind, [])):

        def fail(message: str, i: int = i) -> QueueError:
            return QueueError(f"{kind}[{i}]{message}", path=path, line=heads[i] if i < len(heads) else None)

        if not isinstance(raw, dict):
            raise fail(" must be a table")
        for key in required:
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise fail(f".{key} must be a non-empty string")
        yield raw, fail


def load_rules(project_patches: Path | None = None) -> Rules:
    """The built-in rules with the project's ``patches/gpu-sync-rules.toml`` applied: a rule with a
    built-in id replaces it in place, a new one goes after the built-in ones."""
    text = resources.files("patch_queue.checks").joinpath("gpu_sync.toml").read_text(encoding="utf-8")
    builtin, fence, declined = parse_rules(text, path=BUILTIN)
    rules = {r.id: r for r in builtin}
    if project_patches is not None and (project_patches / USER_RULES).is_file():
        user = project_patches / USER_RULES
        extra, user_fence, user_declined = parse_rules(user.read_text(encoding="utf-8"), path=str(user))
        rules.update((r.id, r) for r in extra)
        fence = user_fence or fence
        declined += user_declined
    assert fence is not None, "the built-in rules set the fence"
    return Rules(tuple(rules.values()), fence.strip(), tuple(declined))
