"""Upstream's rewrites of an API it removed, carried into the runner lines that still use the old one.

When upstream removes a name from the top level of its module (``ProfileExecuteDuration``, gone with
vllm-ascend #6461), it rewrites its own uses of it: ``with ProfileExecuteDuration().capture_async("forward"):``
became ``with record_function_or_nullcontext("forward"):``.  The old code on a conflict's patch side, and omni
lines written against the old API, still read the removed name: a NameError at run time.

:func:`learn` finds, in the change old upstream module -> new upstream module, each expression around a
removed name that upstream rewrote into one same expression in at least two lines (the part of the line
that changed, both parts whole expressions, the rest of the line the same); :func:`carry` rewrites the
lines of a merged module that still read the name the same way.  The import module (``reimport``) calls it
before it adds imports, and lists each rewritten line for review (``api-replaced``).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from patch_queue.git.diff import line_hunks
from patch_queue.merge.conflict import ConflictKind

KIND = ConflictKind.API_REPLACED
_WORD = re.compile(r"[A-Za-z_]\w*")
_TOKEN = re.compile(r"""[A-Za-z_]\w*|\d[\w.]*|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\S""")  # a line's tokens


@dataclass(frozen=True)
class Replacement:
    """Upstream wrote ``new`` for ``old`` (an expression reading ``name``, which it removed), ``seen`` times."""

    name: str
    old: str
    new: str
    seen: int

    def apply(self, line: str) -> str:
        """``line`` with every whole occurrence of ``old`` written as ``new``."""
        pattern = (r"(?<![\w.])" if _is_word(self.old, 0) else "") + re.escape(self.old)
        pattern += r"(?!\w)" if _is_word(self.old, len(self.old) - 1) else ""
        return re.sub(pattern, lambda _m: self.new, line)

    def message(self) -> str:
        return (
            f"upstream removed `{self.name}` and wrote `{self.new}` where it had `{self.old}` "
            f"({self.seen} lines); this line still read it: rewritten the same way"
        )


@functools.lru_cache(maxsize=4)
def learn(old_upstream: str, new_upstream: str, removed: frozenset[str]) -> tuple[Replacement, ...]:
    """The rewrites upstream made of the expressions around each name of ``removed`` (names the old upstream
    module bound and the new one does not), longest first; an expression rewritten two ways is none."""
    old, new = old_upstream.splitlines(), new_upstream.splitlines()
    votes: dict[tuple[str, str], Counter[str]] = {}
    for start, count, new_start, new_count in line_hunks(old_upstream.encode(), new_upstream.encode()):
        written = [line.strip() for line in new[new_start : new_start + new_count]]
        for line in old[start : start + count]:
            for name in removed & set(_WORD.findall(line)):
                pair = _rewrite(line.strip(), written, name)
                if pair is not None:
                    votes.setdefault((name, pair[0]), Counter())[pair[1]] += 1
    found = [
        Replacement(name, expr, *counts.most_common(1)[0])
        for (name, expr), counts in votes.items()
        if len(counts) == 1 and sum(counts.values()) >= 2
    ]
    return tuple(sorted(found, key=lambda r: (-len(r.old), r.old)))


def _rewrite(line: str, written: Sequence[str], name: str) -> tuple[str, str] | None:
    """(old expression, new expression): the change of ``line`` into the line of ``written`` that keeps the
    most of it, when the part that changed reads ``name`` on the old side and not on the new (cut down to
    whole expressions by :func:`_expressions`)."""
    best: tuple[int, str, str] | None = None
    for other in written:
        kept, old, new = _middle(line, other)
        if kept >= 2 and name in _WORD.findall(old) and name not in _WORD.findall(new):
            if best is None or kept > best[0]:
                best = (kept, old, new)
    return None if best is None else _expressions(best[1], best[2], name)


def _middle(a: str, b: str) -> tuple[int, str, str]:
    """(characters kept, what ``a`` had, what ``b`` has): the part between the longest common prefix and suffix
    of ``a`` and ``b``, widened so that it cuts no identifier."""
    most = min(len(a), len(b))
    p = 0
    while p < most and a[p] == b[p]:
        p += 1
    s = 0
    while s < most - p and a[-1 - s] == b[-1 - s]:
        s += 1
    while p and _is_word(a, p - 1) and (_is_word(a, p) or _is_word(b, p)):
        p -= 1
    while s and _is_word(a, len(a) - s) and (_is_word(a, len(a) - s - 1) or _is_word(b, len(b) - s - 1)):
        s -= 1
    return p + s, a[p : len(a) - s].strip(), b[p : len(b) - s].strip()


def _expressions(old: str, new: str, name: str) -> tuple[str, str] | None:
    """``old`` and ``new`` when both are expressions; else the longest head of ``old`` that is one and reads
    ``name``, with the longest head of ``new`` that is one and does not, where both tails start with the same
    token (``f().g("a`` -> ``h("b``: ``f().g`` -> ``h``, the argument is another change); else None."""
    if _expression(old) and _expression(new):
        return old, new
    for cut in reversed([t.start() for t in _TOKEN.finditer(old)][1:]):
        head, first = old[:cut].rstrip(), _TOKEN.match(old, cut)
        if first is None or name not in _WORD.findall(head) or not _expression(head):
            continue
        for t in reversed([t for t in _TOKEN.finditer(new) if t.start() and t.group() == first.group()]):
            written = new[: t.start()].rstrip()
            if name not in _WORD.findall(written) and _expression(written):
                return head, written
    return None


def _is_word(text: str, at: int) -> bool:
    """Whether ``text[at]`` exists and can be part of an identifier."""
    return 0 <= at < len(text) and (text[at].isalnum() or text[at] == "_")


def _expression(text: str) -> bool:
    try:
        ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    return True


def carry(
    text: str, reads: Mapping[int, Collection[str]], rules: Sequence[Replacement]
) -> dict[int, tuple[str, tuple[Replacement, ...]]]:
    """For each 1-based line of ``text`` in ``reads`` (with the removed names it reads) that a rule for one of
    those names changes: the line rewritten by every such rule, longest first, and the rules."""
    lines = text.splitlines(keepends=True)
    out: dict[int, tuple[str, tuple[Replacement, ...]]] = {}
    for number, names in sorted(reads.items()):
        line, used = lines[number - 1], []
        for rule in rules:
            if rule.name in names and (changed := rule.apply(line)) != line:
                line = changed
                used.append(rule)
        if used:
            out[number] = line, tuple(used)
    return out
