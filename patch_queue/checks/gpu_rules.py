"""The translation rules of ``pq sync-gpu``: ``gpu_sync.toml``, extended by a project's
``patches/gpu-sync-rules.toml``.

Every rule rewrites each line of a GPU hunk, in order (``CUDAGraphWrapper`` -> ``ACLGraphWrapper``,
``set_forward_context`` -> ``set_ascend_forward_context``, ...); a project's rule with a built-in id replaces it
in place, a new id goes after the built-in ones.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from patch_queue.errors import QueueError
from patch_queue.merge import anchors

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
class Rules:
    rules: tuple[Rule, ...]
    fence: str

    def translate(self, line: str) -> str:
        for rule in self.rules:
            line = rule.apply(line)
        return line


def parse_rules(text: str, *, path: str) -> tuple[list[Rule], str | None]:
    """The rules of one rules file, and its ``fence`` (None when it sets none)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise QueueError(f"not valid TOML: {exc}", path=path) from None
    fence = data.get("fence")
    if fence is not None and not (isinstance(fence, str) and anchors.FENCE.match(fence)):
        raise QueueError("fence must be an Omni-new fence comment line (# ---- Omni-new ----)", path=path)
    rules: list[Rule] = []
    for i, raw in enumerate(data.get("rule", [])):
        where = f"rule[{i}]"
        if not isinstance(raw, dict):
            raise QueueError(f"{where} must be a table", path=path)
        for key in ("id", "find"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise QueueError(f"{where}.{key} must be a non-empty string", path=path)
        if not isinstance(raw.get("replace"), str):
            raise QueueError(f"{where} ({raw['id']}).replace must be a string", path=path)
        regex = raw.get("regex", True)
        if not isinstance(regex, bool):
            raise QueueError(f"{where} ({raw['id']}).regex must be true or false", path=path)
        rule = Rule(raw["id"], raw["find"], raw["replace"], regex, str(raw.get("note", "")))
        if regex:
            try:
                rule.apply("")
                re.compile(rule.find)
            except re.error as exc:
                raise QueueError(f"{where} ({rule.id}): bad find or replace: {exc}", path=path) from None
        rules.append(rule)
    return rules, fence


def load_rules(project_patches: Path | None = None) -> Rules:
    """The built-in rules with the project's ``patches/gpu-sync-rules.toml`` applied: a rule with a
    built-in id replaces it in place, a new one goes after the built-in ones."""
    text = resources.files("patch_queue.checks").joinpath("gpu_sync.toml").read_text(encoding="utf-8")
    builtin, fence = parse_rules(text, path=BUILTIN)
    rules = {r.id: r for r in builtin}
    if project_patches is not None and (project_patches / USER_RULES).is_file():
        user = project_patches / USER_RULES
        extra, user_fence = parse_rules(user.read_text(encoding="utf-8"), path=str(user))
        rules.update((r.id, r) for r in extra)
        fence = user_fence or fence
    assert fence is not None, "the built-in rules set the fence"
    return Rules(tuple(rules.values()), fence.strip())
