"""The translation rules of ``pq sync-gpu``: ``gpu_sync.toml``, extended by a project's
``patches/gpu-sync-rules.toml``.

Every rule rewrites each line of a GPU hunk, in order (``CUDAGraphWrapper`` -> ``ACLGraphWrapper``,
``set_forward_context`` -> ``set_ascend_forward_context``, ...); a project's rule with a built-in id replaces it
in place, a new id goes after the built-in ones.  Every key's type is checked (file:line), and a rule's ``find``
runs with a time limit (:mod:`patch_queue.checks.rule_files`).

A project's ``[[decline]]`` tables name GPU changes its maintainers chose not to port (``file``, ``method``, the
change's ``first`` meaningful line, an optional ``note``): ``pq sync-gpu`` lists them and ports them no more.
``pq delete`` of a ``sync-gpu-*`` patch writes one per change the patch ported, so a port taken out stays out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from patch_queue.checks import rule_files
from patch_queue.errors import QueueError
from patch_queue.merge import anchors
from patch_queue.series.queue import toml_string

USER_RULES = "gpu-sync-rules.toml"
BUILTIN = "patch_queue/sync/gpu_sync.toml"


@dataclass(frozen=True)
class Rule:
    id: str
    find: str
    replace: str
    regex: bool = True
    note: str = ""
    source: str = field(default="", compare=False)  # the rules file, and the line of the rule's find (or head)
    line: int | None = field(default=None, compare=False)

    def apply(self, line: str) -> str:
        if not self.regex:
            return line.replace(self.find, self.replace)
        try:
            return rule_files.sub(self.find, self.replace, line)
        except rule_files.RuleTimeout:
            raise rule_files.timed_out(self.source, self.line, self.id, f"the GPU line {line.strip()[:60]!r}") from None


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
    # each line's translation, kept: a sync translates the same GPU lines tens of thousands of times
    _translated: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def translate(self, line: str) -> str:
        done = self._translated.get(line)
        if done is None:
            done = line
            for rule in self.rules:
                done = rule.apply(done)
            self._translated[line] = done
        return done

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


_RULE_KEYS = {"id": "str", "find": "str", "replace": "text", "regex": "bool", "note": "text"}
_DECLINE_KEYS = {"file": "str", "method": "str", "first": "str", "note": "text"}


def parse_rules(text: str, *, path: str) -> tuple[list[Rule], str | None, list[Decline]]:
    """The rules of one rules file, its ``fence`` (None when it sets none) and its declined changes; one line
    naming the file, the line and the key of the first bad value otherwise."""
    data = rule_files.parse(text, path)
    fence = data.get("fence")
    if fence is not None and not (isinstance(fence, str) and anchors.FENCE.match(fence)):
        line = rule_files.key_line(text, (1, len(text.splitlines()) or 1), "fence")
        raise QueueError("fence must be an Omni-new fence comment line (# ---- Omni-new ----)", path=path, line=line)
    unknown = sorted(set(data) - {"fence", "rule", "decline"})
    if unknown:
        line = rule_files.key_line(text, (1, len(text.splitlines()) or 1), unknown[0])
        raise QueueError(f"unknown key {unknown[0]!r} (the keys: fence, [[rule]], [[decline]])", path=path, line=line)
    rules: list[Rule] = []
    for raw, fail, line_of in _tables(data, "rule", _RULE_KEYS, text, path):
        if "replace" not in raw:
            raise fail(f" ({raw['id']}).replace must be a string")
        regex = raw.get("regex", True)
        rule = Rule(raw["id"], raw["find"], raw["replace"], regex, raw.get("note", ""), path, line_of("find"))
        if regex:
            try:
                rule_files.sub(rule.find, rule.replace, "")
            except rule_files.RuleTimeout:
                raise rule_files.timed_out(path, rule.line, rule.id, "an empty line") from None
            except (rule_files.PatternError, IndexError) as exc:  # IndexError: a bad group reference
                raise fail(f" ({rule.id}): bad find or replace: {exc}", "find") from None
        rules.append(rule)
    declined: list[Decline] = []
    for raw, _fail, _line in _tables(data, "decline", _DECLINE_KEYS, text, path):
        declined.append(Decline(raw["file"], raw["method"], raw["first"].strip(), raw.get("note", "")))
    return rules, fence, declined


def _tables(
    data: dict[str, Any], kind: str, keys: dict[str, str], text: str, path: str
) -> Iterator[tuple[dict[str, Any], Callable[..., QueueError], Callable[[str], int | None]]]:
    """Each ``[[kind]]`` table of ``data`` whose keys are of their types (``keys``; the ``str`` ones are
    required), with the error of that table (the message after ``kind[i]``, at the line of the key named, else
    the table's line in ``text``) and the line of a key."""
    raws = data.get(kind, [])
    if not isinstance(raws, list):
        line = rule_files.key_line(text, (1, len(text.splitlines()) or 1), kind)
        raise QueueError(f"{kind} must be an array of [[{kind}]] tables", path=path, line=line)
    spans = rule_files.table_lines(text, kind)
    for i, raw in enumerate(raws):
        span = spans[i] if i < len(spans) else None

        def line_of(key: str, span: tuple[int, int] | None = span) -> int | None:
            return rule_files.key_line(text, span, key)

        def fail(message: str, key: str | None = None, i: int = i, span: tuple[int, int] | None = span) -> QueueError:
            line = rule_files.key_line(text, span, key) if key else (span[0] if span else None)
            return QueueError(f"{kind}[{i}]{message}", path=path, line=line)

        if not isinstance(raw, dict):
            raise fail(" must be a table")
        for key, want in keys.items():
            if want == "str" and key not in raw:
                raise fail(f".{key} must be a non-empty string")
        for key, value in raw.items():
            if key not in keys:
                raise fail(f" has an unknown key {key!r} (its keys: {', '.join(keys)})", key)
            problem = rule_files.type_error(value, keys[key])
            if problem is not None:
                raise fail(f".{key} {problem}", key)
        yield raw, fail, line_of


def load_rules(project_patches: Path | None = None) -> Rules:
    """The built-in rules with the project's ``patches/gpu-sync-rules.toml`` applied: a rule with a
    built-in id replaces it in place, a new one goes after the built-in ones."""
    text = resources.files("patch_queue.sync").joinpath("gpu_sync.toml").read_text(encoding="utf-8")
    builtin, fence, declined = parse_rules(text, path=BUILTIN)
    rules = {r.id: r for r in builtin}
    if project_patches is not None and (project_patches / USER_RULES).is_file():
        user = project_patches / USER_RULES
        extra, user_fence, user_declined = parse_rules(rule_files.read(user), path=str(user))
        rules.update((r.id, r) for r in extra)
        fence = user_fence or fence
        declined += user_declined
    assert fence is not None, "the built-in rules set the fence"
    return Rules(tuple(rules.values()), fence.strip(), tuple(declined))


RULES_HEAD = "pq sync-gpu: this project's translation rules, and the GPU changes it does not port"


def with_declines(project_patches: Path, entries: Sequence[Decline]) -> tuple[list[Decline], dict[Path, bytes]]:
    """The ``entries`` the project's rules file does not decline yet, and that file with them added ({} when there
    are none); a broken rules file stops here.

    The file is the user's: pq adds each entry as a ``[[decline]]`` table at its end and leaves every byte before
    it as it was (comments, inline tables, order, line endings).  A file where such tables do not extend the
    ``decline`` entries (one that holds them in an inline array) is refused in one line, naming the line."""
    path = project_patches / USER_RULES
    text = rule_files.read(path) if path.is_file() else ""
    known = {d.key for d in load_rules(project_patches).declined}
    new = [d for d in dict.fromkeys(entries) if d.key not in known]
    if not new:
        return [], {}
    nl = "\r\n" if "\r\n" in text else "\n"
    head = text.rstrip("\r\n") + nl + nl if text.strip() else f"# {RULES_HEAD}{nl}{nl}"
    after = head + nl.join(d.toml().replace("\n", nl) for d in new)
    _refuse_unextended(text, after, new, f"{project_patches.name}/{USER_RULES}")
    return new, {path: after.encode("utf-8")}


def _refuse_unextended(before: str, after: str, new: list[Decline], path: str) -> None:
    """One line unless ``after`` reads as ``before`` with the ``new`` entries after its own."""
    try:
        got = rule_files.parse(after, path)
    except QueueError:
        got = None
    want = rule_files.parse(before, path) if before.strip() else {}
    added = rule_files.parse("\n".join(d.toml() for d in new), path)["decline"]
    want = want | {"decline": [*want.get("decline", []), *added]}
    if got == want:
        return
    line = rule_files.key_line(before, (1, len(before.splitlines()) or 1), "decline")
    raise QueueError(
        "pq adds a declined change as a [[decline]] table at the end of this file, which its own decline entries "
        "(an inline array) do not allow: write them as [[decline]] tables, then run the command again",
        path=path,
        line=line,
    )
