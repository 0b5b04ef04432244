"""What upstream changed in a conflict region, in one line, and a resolution when a rule is sure of it.

Pure functions of a conflict's three sides (old upstream, new upstream, the omni patch):

- :func:`upstream_change`: the upstream edit named by its shape (a phrase without a subject):
  identifiers renamed
  (``renamed `a` → `b```), arguments or parameters added or dropped, a block of lines moved,
  lines inserted or deleted, else the first line rewritten;
- :func:`suggest`: a resolution when one rule is certain, shown to the maintainer and never applied:
  upstream only renamed identifiers (the patch side with the same renames), or one side's edit is
  layout only (the other side).  None otherwise, and for a ``name-linked`` region (its side is the side
  taken in the regions that go with it);
- :func:`carried`: the resolution of another copy's region of the same upstream change (the AR and the generation
  runner and ``OmniNPUModelRunner`` carry copies of the same upstream methods), as an edit of that region's patch
  side merged three-way onto this one's (:func:`carried_change` says which regions match: by upstream's side and
  base side, at the same method, not by the omni side).
"""

from __future__ import annotations

import ast
import difflib
import functools
import keyword
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from patch_queue.merge import statements, symbols
from patch_queue.merge.conflict import Conflict, ConflictKind

_WORD = re.compile(r"[A-Za-z_]\w*|\S")
_NAME = re.compile(r"[A-Za-z_]\w*")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_LAYOUT = re.compile(r"\s+|,(?=\s*[)\]}])")  # whitespace and trailing commas: what a formatter changes
_CUT = 60


WRITES = {"upstream": "upstream's side", "patch": "the patch's side", "both": "both sides"}


@dataclass(frozen=True)
class Suggestion:
    """A resolution: which side (``upstream``, ``patch``, ``both``, or ``merged``: a text of both) and the text,
    and why it is safe; ``wrote``: what the text is, in a few words, where the side does not say it (a merged
    text: "the patch's side, renamed", "the resolution of npu_worker/x.py:L, merged")."""

    side: str
    text: str
    reason: str
    wrote: str = ""

    @property
    def writes(self) -> str:
        """What `pq resolve --suggested` says it wrote: "upstream's side", "the patch's side", "both sides", or
        :attr:`wrote`."""
        return self.wrote or WRITES.get(self.side, "a merge of both sides")


def suggestion_json(tip: Suggestion | None) -> dict[str, str] | None:
    """A suggestion as a report's conflict entry holds it (``explanation.suggestion``)."""
    return None if tip is None else {"side": tip.side, "reason": tip.reason, "text": tip.text, "writes": tip.writes}


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _CUT else text[: _CUT - 1] + "…"


def _code_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _layout(text: str) -> str:
    return _LAYOUT.sub("", "\n".join(_code_lines(text)))


_Opcode = tuple[str, int, int, int, int]


@functools.lru_cache(maxsize=64)
def _word_diff(base: str, ours: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[_Opcode, ...]]:
    """The words of the code lines of ``base`` and ``ours`` and the opcodes from the one to the other.

    The lines are diffed first and the words only within the lines that changed: a word diff of a whole
    region costs the product of its lengths (5x the time on the real conflicts, the same explanations).
    Kept for a while: a conflict's explanation and its suggestion diff the same pair, on the terminal and
    again in each report.
    """
    old, new = _code_lines(base), _code_lines(ours)
    a: list[str] = []
    b: list[str] = []
    opcodes: list[_Opcode] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        wa, wb = _WORD.findall(" ".join(old[i1:i2])), _WORD.findall(" ".join(new[j1:j2]))
        steps: Sequence[_Opcode] = [("equal", 0, len(wa), 0, len(wb))]
        if tag != "equal":
            steps = difflib.SequenceMatcher(None, wa, wb, autojunk=False).get_opcodes()
        for t, k1, k2, m1, m2 in steps:
            at = (t, len(a) + k1, len(a) + k2, len(b) + m1, len(b) + m2)
            if opcodes and opcodes[-1][0] == t:
                last = opcodes.pop()
                at = (t, last[1], at[2], last[3], at[4])
            opcodes.append(at)
        a += wa
        b += wb
    return tuple(a), tuple(b), tuple(opcodes)


def renames(base: str, ours: str) -> list[tuple[str, str]] | None:
    """The identifier renames that turn ``base`` into ``ours`` (layout aside), None when it is more than that."""
    a, b, opcodes = _word_diff(base, ours)
    found: dict[str, str] = {}
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        olds, news = [t for t in a[i1:i2] if t != ","], [t for t in b[j1:j2] if t != ","]
        if tag != "replace":
            return None
        after = a[i2] if i2 < len(a) else ""
        keyword_arg = after == "=" and (a[i2 + 1 : i2 + 2] != ("=",)) and (i1 > 0 and a[i1 - 1] in "(," or i1 == 0)
        if keyword_arg and (i1 > 0 or base.rstrip().endswith(",")):
            return None  # another keyword argument, not a rename: `routed_experts=…` -> `num_nans=…`
        if len(olds) != len(news):  # a dotted name for another: `self.model.f` -> `self._g`
            olds, news = ["".join(olds)], ["".join(news)]
        for old, new in zip(olds, news, strict=True):
            if old == new:
                continue
            if not (_DOTTED.fullmatch(old) and _DOTTED.fullmatch(new)) or found.get(old, new) != new:
                return None
            found[old] = new
    return sorted(found.items()) or None


def _arguments(base: str, ours: str) -> str | None:
    """``new argument `x=`…`` when upstream only added (or dropped) keyword arguments or parameters."""
    a, b, opcodes = _word_diff(base, ours)
    added: list[str] = []
    dropped: list[str] = []
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        if tag not in ("insert", "delete"):
            return None
        words = b[j1:j2] if tag == "insert" else a[i1:i2]
        names = [
            w
            for k, (w, nxt) in enumerate(zip(words, words[1:], strict=False))
            if _NAME.fullmatch(w) and nxt in ("=", ":") and (k == 0 or words[k - 1] in ("(", ","))
        ]
        if not names or any(keyword.iskeyword(w) for w in words):
            return None
        (added if tag == "insert" else dropped).extend(names)
    what = "parameter" if re.search(r"\bdef\b", base) else "argument"
    parts = []
    for verb, names in (("new", added), ("dropped", dropped)):
        if names:
            parts.append(f"{verb} {what}{'s' if len(names) > 1 else ''} " + ", ".join(f"`{n}`" for n in names))
    return "; ".join(parts) or None


def _wrapped(base: str, ours: str) -> tuple[int, int, int] | None:
    """(first, last, extra indent) when ``ours`` holds every line of ``base``, in a row, indented deeper
    by one amount, inside lines of its own (a ``try:``, an ``if``, a ``with``): upstream wrapped the code."""
    old = [line for line in base.splitlines() if line.strip()]
    new = ours.splitlines()
    if not old or len(new) <= len(old):
        return None
    stripped = [line.strip() for line in new]
    want = [line.strip() for line in old]
    for first in range(len(new) - len(old) + 1):
        if stripped[first : first + len(want)] == want and [
            _indent(new[first + k]) - _indent(line) for k, line in enumerate(old)
        ] == [_indent(new[first]) - _indent(old[0])] * len(old):
            extra = _indent(new[first]) - _indent(old[0])
            if extra > 0:
                return first, first + len(old) - 1, extra
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _shape(base: str, ours: str) -> str | None:
    """The wrapper upstream put around the old lines, in a few words."""
    found = _wrapped(base, ours)
    if found is None:
        return None
    first, last, _extra = found
    lines = ours.splitlines()
    head = next((line.strip() for line in lines[:first] if line.strip()), "")
    tail = next((line.strip() for line in lines[last + 1 :] if line.strip()), "")
    parts = [f"`{_short(head)}`"] if head else []
    parts += [f"`{_short(tail)}`"] if tail else []
    return f"wrapped the {last - first + 1 - _blank(lines[first : last + 1])} line(s) in " + " … ".join(parts)


def _blank(lines: list[str]) -> int:
    return sum(1 for line in lines if not line.strip())


# ---------------------------------------------------------------------------------------------
# what upstream did, in statements

_MAX_SAID = 3  # changes named in one explanation; the rest counted


@dataclass(frozen=True)
class _Stmt:
    head: str  # the statement as ast.unparse writes it; a compound one by its header (`if x:`, `try:`)
    whole: str  # the whole statement, body and all, as ast.unparse writes it
    node: ast.stmt


_STUB = "_pq_stub_"
_CLAUSE = re.compile(r"(elif\b|else\s*:|except\b|finally\s*:)")


def _statements(text: str) -> list[_Stmt] | None:
    """The top-level statements of a region's side, None when the side does not parse alone.  A side may start
    deeper than it ends (the end of a block, then code after it), start with a clause (``elif x:``) or end with
    a header (``if (...):`` without its body): it is read inside a stub statement, or with a stub body, and
    the stubs are left out."""
    lines = [line for line in textwrap.dedent(text).splitlines() if line.strip()]
    code = [line for line in lines if not line.lstrip().startswith("#")]
    if not code:
        return []
    if code[-1].rstrip().endswith(","):
        return None  # arguments of a call cut by the region (`x=y,` would parse as a tuple assignment)
    first = code[0]
    indent = len(first) - len(first.lstrip())
    head: list[str] = []
    if _CLAUSE.match(first.lstrip()):
        stub = "try:" if first.lstrip().startswith(("except", "finally")) else f"if {_STUB}:"
        head = [" " * indent + stub, " " * (indent + 4) + _STUB]
    elif indent:
        head = [f"if {_STUB}:"]
    tail = [" " * (len(code[-1]) - len(code[-1].lstrip()) + 4) + _STUB] if code[-1].rstrip().endswith(":") else []
    try:
        tree = ast.parse("\n".join([*head, *lines, *tail]) + "\n")
    except (SyntaxError, ValueError):
        return None
    return [_Stmt(_head(n), ast.unparse(n), n) for n in _unstub(tree.body)]


def _unstub(body: list[ast.stmt]) -> list[ast.stmt]:
    """``body`` without the stubs of :func:`_statements`: a stub statement stands for what it holds."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Name) and node.value.id == _STUB:
            continue
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == _STUB:
            out += _unstub(node.body) + _unstub(node.orelse)
            continue
        if isinstance(node, ast.Try) and len(node.body) == 1 and _is_stub(node.body[0]):
            out += [y for h in node.handlers for y in _unstub(h.body)] + _unstub(node.finalbody)
            continue
        for field in ("body", "orelse", "finalbody"):
            value = getattr(node, field, None)
            if isinstance(value, list) and value and all(_is_stub(y) for y in value):
                setattr(node, field, [])
        out.append(node)
    return out


def _is_stub(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Name) and node.value.id == _STUB


def _head(node: ast.stmt) -> str:
    return statements.head(node, arguments=False)


def _bodies(node: ast.stmt) -> list[tuple[str, list[ast.stmt]]]:
    """The statement lists a compound statement holds, by the clause that holds them (an ``elif`` chain is
    one clause a branch)."""
    out: list[tuple[str, list[ast.stmt]]] = [("", list(getattr(node, "body", [])))]
    for handler in getattr(node, "handlers", []):
        out.append(("except", handler.body))
    orelse: list[ast.stmt] = list(getattr(node, "orelse", []) or [])
    while isinstance(node, ast.If) and len(orelse) == 1 and isinstance(orelse[0], ast.If):
        branch = orelse[0]
        out.append((f"elif {ast.unparse(branch.test)}:", branch.body))
        orelse = branch.orelse
    if orelse:
        out.append(("else", orelse))
    finalbody: list[ast.stmt] = list(getattr(node, "finalbody", []) or [])
    if finalbody:
        out.append(("finally", finalbody))
    return out


def _quote(text: str) -> str:
    return f"`{_short(text)}`"


def _counted(stmts: Sequence[_Stmt]) -> str:
    more = f" and {len(stmts) - 1} more statement(s)" if len(stmts) > 1 else ""
    return _quote(stmts[0].head) + more


def _header_change(old: str, new: str) -> str:
    """How a statement's header (or a simple statement) changed, word by word."""
    a, b = _WORD.findall(old), _WORD.findall(new)
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    changed = sum(max(i2 - i1, j2 - j1) for _tag, i1, i2, j1, j2 in ops)
    scattered = any(not _NAME.search(" ".join(a[i1:i2] + b[j1:j2])) for _tag, i1, i2, j1, j2 in ops)
    if not ops or len(ops) > _MAX_SAID or scattered or 2 * changed > max(len(a), len(b)):
        return f"rewrote {_quote(old)} as {_quote(new)}"
    parts: list[str] = []
    for tag, i1, i2, j1, j2 in ops:
        added, gone = (_joined(words) for words in (b[j1:j2], a[i1:i2]))
        if tag == "insert":
            what = "the condition " if re.match(r"(and|or)\b", added) and old.endswith(":") else ""
            parts.append(f"added {what}`{added}`")
        elif tag == "delete":
            parts.append(f"removed `{gone}`")
        else:
            parts.append(f"changed `{gone}` to `{added}`")
    return ", ".join(parts) + f" in {_quote(old)}"


def _joined(words: Sequence[str]) -> str:
    """Words of code put back together the way code is written: no space around dots and square brackets,
    inside round brackets or before a call's; a condition without the brackets ``ast.unparse`` put around it."""
    text = " ".join(words)
    text = re.sub(r" ?([.\[\]]) ?", r"\1", text)
    text = re.sub(r"\( ", "(", re.sub(r" \)", ")", text))
    text = re.sub(r"(\w) \(", lambda m: m.group(1) + "(", text)
    text = re.sub(r"\b(and|or|not|in|is|if|else)\(", r"\1 (", text)
    text = re.sub(r" ?, ?", ", ", text).strip(", ") or text
    text = re.sub(r"^(and|or) \((.*)\)$", r"\1 \2", text)
    return _short(text)


def _changes(old: list[_Stmt], new: list[_Stmt], where: str = "") -> list[str]:
    """The changes from the statements ``old`` to ``new``, each a phrase (``where``: the clause they are in)."""
    said: list[str] = []
    at = f" in {where}" if where else ""
    matcher = difflib.SequenceMatcher(None, [x.whole for x in old], [x.whole for x in new], autojunk=False)
    spans = [(list(old[i1:i2]), list(new[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]
    # a statement taken out in one place and put back whole in another: moved
    moved = {x.whole for g, _c in spans for x in g} & {x.whole for _g, c in spans for x in c}
    if moved:
        said.append(f"moved {_counted([x for g, _c in spans for x in g if x.whole in moved])}{at}")
    for gone, came in spans:
        gone, came = [x for x in gone if x.whole not in moved], [x for x in came if x.whole not in moved]
        if not gone and not came:
            continue
        # a new compound statement holding old statements: upstream wrapped them
        for wrapper in [x for x in came if _bodies(x.node)[0][1] and x.head not in {g.head for g in gone}]:
            inner = [y for _clause, body in _bodies(wrapper.node) for y in body]
            held = [g for g in gone if any(ast.unparse(y) == g.whole for y in inner)]
            if not held:
                continue
            clauses = [c for c, _body in _bodies(wrapper.node) if c]
            shape = "`" + wrapper.head + "`" + "".join(f"/`{c}:`" for c in clauses)
            said.append(f"wrapped {_counted(held)} in {shape}{at}")
            for clause, body in _bodies(wrapper.node):
                extra = [
                    _Stmt(_head(y), ast.unparse(y), y) for y in body if ast.unparse(y) not in {g.whole for g in held}
                ]
                if extra:
                    said.append(f"added {_counted(extra)} in its {clause + ' block' if clause else 'body'}")
            gone = [g for g in gone if g not in held]
            came.remove(wrapper)
        # the same header: what changed inside
        for g in list(gone):
            twin = next((c for c in came if c.head == g.head and type(c.node) is type(g.node)), None)
            if twin is None:
                twin = _twin(g, came)
                if twin is None:
                    continue
                said.append(_header_change(g.head, twin.head) + at)
            if twin.whole != g.whole:
                said += _clauses(g, twin)
            gone.remove(g)
            came.remove(twin)
        if gone and came and len(gone) == 1 == len(came) and not _bodies(gone[0].node)[0][1]:
            said.append(f"replaced {_quote(gone[0].head)} with {_quote(came[0].head)}{at}")
            continue
        if gone:
            said.append(f"removed {_counted(gone)}{at}")
        if came:
            said.append(f"added {_counted(came)}{at}")
    return said


def _key(node: ast.stmt) -> str:
    """What a statement is about: the targets of an assignment, the function an expression calls, else its
    kind."""
    if isinstance(node, ast.Assign):
        return "=" + ", ".join(ast.unparse(t) for t in node.targets)
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return "=" + ast.unparse(node.target)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return "call " + ast.unparse(node.value.func)
    return type(node).__name__


def _twin(old: _Stmt, candidates: list[_Stmt]) -> _Stmt | None:
    """The statement of ``candidates`` that ``old`` became: of its kind, about the same thing (the same target,
    the same function called) when one is, and most like it (at least 0.6 alike)."""
    same = [c for c in candidates if type(c.node) is type(old.node)]
    keyed = [c for c in same if _key(c.node) == _key(old.node)] or same
    scored = [(difflib.SequenceMatcher(None, old.head, c.head, autojunk=False).ratio(), k) for k, c in enumerate(keyed)]
    best = max(scored, default=None)
    return keyed[best[1]] if best is not None and best[0] >= 0.6 else None


def _stmts(body: list[ast.stmt]) -> list[_Stmt]:
    return [_Stmt(_head(y), ast.unparse(y), y) for y in body]


def _clauses(old: _Stmt, new: _Stmt) -> list[str]:
    """What changed inside a compound statement whose header stayed: clause by clause, a clause added or
    removed whole (``added the branch `elif x:` …``)."""
    before, after = dict(_bodies(old.node)), dict(_bodies(new.node))
    said: list[str] = []
    for clause, body in after.items():
        if clause not in before:
            kind = "branch" if clause.startswith("elif") or clause == "else" else "block"
            name = clause if clause.startswith("elif") else f"{clause}:"
            said.append(f"added the {kind} `{_short(name)}` ({_counted(_stmts(body))}) to {_quote(old.head)}")
            continue
        where = _quote(old.head) + (f" (its `{_short(clause)}`)" if clause else "")
        said += _changes(_stmts(before[clause]), _stmts(body), where)
    for clause in before:
        if clause not in after:
            said.append(f"removed the `{_short(clause)}` clause of {_quote(old.head)}")
    return said


def _statement_change(base: str, ours: str) -> str | None:
    """What upstream did, statement by statement, when both sides parse alone; None when they do not, or when
    the statements are the same (a change of layout or comments)."""
    old, new = _statements(base), _statements(ours)
    if old is None or new is None:
        return None
    said = _changes(old, new)
    if not said:
        return None
    more = f"; and {len(said) - _MAX_SAID} more change(s)" if len(said) > _MAX_SAID else ""
    return "; ".join(said[:_MAX_SAID]) + more


def upstream_change(conflict: Conflict) -> str:
    """What upstream did to the region, in one line."""
    base, ours = conflict.base or "", conflict.ours or ""
    if conflict.base is None or conflict.ours is None:
        return "deleted the file" if conflict.ours is None else "no old text here (a new file)"
    if base == ours:
        return "did not change these lines"
    if _layout(base) == _layout(ours):
        return "changed only the layout or comments"
    found = renames(base, ours)
    if found:
        told = "renamed " + ", ".join(f"`{a}` → `{b}`" for a, b in found)
        theirs = renames(base, conflict.theirs or "")
        if theirs:
            told += "; the patch renamed " + ", ".join(f"`{a}` → `{b}`" for a, b in theirs)
        return told
    args = _arguments(base, ours)
    if args:
        return args
    stated = _statement_change(base, ours)
    if stated:
        return stated
    wrapped = _shape(base, ours)
    if wrapped:
        return wrapped
    old, new = _code_lines(base), _code_lines(ours)
    if not old:
        return f"inserted {len(new)} line(s): `{_short(new[0])}`" if new else "inserted blank lines"
    if not new:
        return f"deleted {len(old)} line(s): `{_short(old[0])}`"
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    gone = [
        line for tag, i1, i2, _j1, _j2 in matcher.get_opcodes() if tag in ("delete", "replace") for line in old[i1:i2]
    ]
    came = [
        line for tag, _i1, _i2, j1, j2 in matcher.get_opcodes() if tag in ("insert", "replace") for line in new[j1:j2]
    ]
    if gone and sorted(gone) == sorted(came):
        return f"moved {len(gone)} line(s): `{_short(gone[0])}`"
    if not gone:
        return f"inserted {len(came)} line(s): `{_short(came[0])}`"
    if not came:
        return f"deleted {len(gone)} line(s): `{_short(gone[0])}`"
    # lines of the side only, not whole statements: what came and what went, each by its first line of code
    first_came, first_gone = _short(_first_code(came)), _short(_first_code(gone))
    if len(came) == len(gone) == 1:
        return f"replaced `{first_gone}` with `{first_came}`"
    return f"inserted {len(came)} line(s) (`{first_came}`) and deleted {len(gone)} (`{first_gone}`)"


def _first_code(lines: list[str]) -> str:
    """The first of ``lines`` with a name in it (not a lone bracket)."""
    return next((line for line in lines if _NAME.search(line)), lines[0])


def omni_block(conflict: Conflict) -> str:
    """The omni block the region belongs to, for humans."""
    a = conflict.anchor
    if a is None:
        old = set(_code_lines(conflict.base or ""))
        edit = next((line for line in _code_lines(conflict.theirs or "") if line not in old), "")
        return "no omni block: an unfenced omni edit" + (f" (`{_short(edit)}`)" if edit else "")
    at = f" at line {a.line}" if a.line is not None else ""
    return f"omni block {a.index}{at}" + (f": `{_short(a.first)}`" if a.first else "")


def suggest(conflict: Conflict) -> Suggestion | None:
    """A resolution a rule is certain of, or None."""
    if (
        conflict.base is None
        or conflict.ours is None
        or conflict.theirs is None
        or conflict.kind == ConflictKind.NAME_LINKED
    ):
        return None  # (a name-linked region is resolved with the regions that go with it)
    base, ours, theirs = conflict.base, conflict.ours, conflict.theirs
    if _layout(base) == _layout(ours):
        return Suggestion("patch", theirs, "upstream changed only the layout here")
    if _layout(base) == _layout(theirs):
        return Suggestion("upstream", ours, "the patch changed only the layout here")
    if _layout(ours) == _layout(theirs):
        return Suggestion("upstream", ours, "both sides wrote the same code (layout aside)")
    wrapped = _wrapped(base, ours)
    if wrapped is not None:
        first, last, extra = wrapped
        lines = ours.splitlines(keepends=True)
        inner = [(" " * extra + line) if line.strip() else line for line in theirs.splitlines(keepends=True)]
        text = "".join(lines[:first] + inner + lines[last + 1 :])
        return Suggestion(
            "merged",
            text,
            "upstream only wrapped the old lines: the patch side, indented into the wrapper",
            "the patch's side, indented into upstream's wrapper",
        )
    pairs = renames(base, ours)
    if pairs and all(_word(old).search(theirs) and not _word(new).search(theirs) for old, new in pairs):
        names = ", ".join(f"`{a}` → `{b}`" for a, b in pairs)
        return Suggestion(
            "merged",
            _renamed(theirs, pairs),
            f"upstream only renamed {names}: the patch side, renamed",
            "the patch's side, renamed as upstream renamed",
        )
    return None


def _normal(text: str) -> str:
    """A region's side for comparing copies: indentation and blank lines at either end aside."""
    return textwrap.dedent(text).strip("\n")


def _hunks(c: Conflict, side: str = "ours") -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """What a side (``ours``: upstream, ``theirs``: the patch) changed in a region: the lines it took out and
    put in, hunk by hunk, blank lines and the region's own indentation aside (the lines around the change, which
    regions grown apart may differ in, do not count)."""
    base, ours = (c.base or "").splitlines(), (getattr(c, side) or "").splitlines()
    indent = min((_indent(x) for x in base + ours if x.strip()), default=0)
    old, new = ([x[indent:].rstrip() for x in side if x.strip()] for side in (base, ours))
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return tuple(
        (tuple(old[i1:i2]), tuple(new[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
    )


def same_upstream_change(a: Conflict, b: Conflict) -> bool:
    """Whether two conflicts show the same upstream change (the same lines taken out and put in, indentation
    aside): the AR and the generation runner carry copies of the same upstream methods, so one upstream change
    meets the omni edits of each copy, in regions that may have grown to other extents."""
    if a.base is None or a.ours is None or b.base is None or b.ours is None:
        return False
    change = _hunks(a)
    return bool(change) and change == _hunks(b)


def side_of(conflict: Conflict, text: str) -> str:
    """Which resolution ``text`` is of ``conflict``: "upstream", "patch", "both" (upstream's lines then the
    patch's), else "merged"; the first that fits when several do (an empty patch side)."""
    ours, theirs = conflict.ours or "", conflict.theirs or ""
    return {ours + theirs: "both", theirs: "patch", ours: "upstream"}.get(text, "merged")


def _reindent(text: str, delta: int) -> str:
    lines = text.splitlines(keepends=True)
    if delta >= 0:
        return "".join(" " * delta + line if line.strip() else line for line in lines)
    return "".join(line[min(-delta, _indent(line)) :] if line.strip() else line for line in lines)


def _first_indent(text: str) -> int:
    return next((_indent(line) for line in text.splitlines() if line.strip()), 0)


def _omni_lines(c: Conflict) -> tuple[frozenset[str], frozenset[str]]:
    """The lines the patch took out of the region and put in (indentation aside)."""
    gone, came = set(), set()
    for old, new in _hunks(c, "theirs"):
        gone |= set(old)
        came |= set(new)
    return frozenset(gone), frozenset(came)


def _within(a: tuple[frozenset[str], frozenset[str]], b: tuple[frozenset[str], frozenset[str]]) -> bool:
    """The omni edit ``a`` is part of ``b``: every line it took out and every line it put in."""
    return a[0] <= b[0] and a[1] <= b[1]


def as_resolved(conflict: Conflict, twin: Conflict, text: str) -> Suggestion | None:
    """The resolution of ``conflict`` like the one ``text`` gave ``twin`` (the same upstream change, see
    :func:`same_upstream_change`): the same side, both sides, or, when the patch's sides are the same too, the
    same text indented as here."""
    side = side_of(twin, text)
    ours, theirs = conflict.ours or "", conflict.theirs or ""
    said = {"upstream": "upstream's side", "patch": "the patch's side", "both": "both sides"}
    here, there = _omni_lines(conflict), _omni_lines(twin)
    # the same decision only where it keeps or drops at least what it kept or dropped there: the patch's side where
    # this copy's omni edit holds the other's (more omni code kept), upstream's or both where it is part of it
    holds = {"patch": _within(there, here), "upstream": _within(here, there), "both": _within(here, there)}
    if side in said and holds[side]:
        chosen = {"upstream": ours, "patch": theirs, "both": ours + theirs}[side]
        return Suggestion(side, chosen, f"{said[side]}, as the same upstream change was resolved")
    if (
        twin.theirs is not None
        and _normal(twin.theirs) == _normal(theirs)
        and _normal(twin.ours or "") == _normal(ours)
    ):
        moved = _reindent(text, _first_indent(ours) - _first_indent(twin.ours or ""))
        return Suggestion("merged", moved, "the resolution of the same change, in the same omni code,", "re-indented")
    return None


def _method(c: Conflict) -> str:
    return c.symbol.rpartition(".")[2]


_Hunk = tuple[tuple[str, ...], tuple[str, ...]]


def _change(c: Conflict) -> list[tuple[_Hunk, int]]:
    """Upstream's change in a region, hunk by hunk (:func:`_hunks`), each hunk's lines without their indentation
    (copies nest the same code at other depths, and regions grow apart), with the indentation of its first line."""
    base, ours = (c.base or "").splitlines(), (c.ours or "").splitlines()
    old, new = ([x.rstrip() for x in side if x.strip()] for side in (base, ours))
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            first = (old[i1:i2] or new[j1:j2])[0]
            out.append(((tuple(x.strip() for x in old[i1:i2]), tuple(x.strip() for x in new[j1:j2])), _indent(first)))
    return out


def _part_of(part: list[tuple[_Hunk, int]], whole: list[tuple[_Hunk, int]]) -> list[int] | None:
    """Where each hunk of ``part`` is in ``whole`` (in order), None when one is not there."""
    at: list[int] = []
    k = 0
    for hunk, _indent_of in part:
        while k < len(whole) and whole[k][0] != hunk:
            k += 1
        if k == len(whole):
            return None
        at.append(k)
        k += 1
    return at


def carried_change(done: Conflict, conflict: Conflict) -> bool:
    """Whether the resolution of ``done`` may carry to ``conflict``, another copy's region: the same upstream
    method (when both name theirs), and every change upstream made in ``done``'s region is one it made in
    ``conflict``'s (the same lines taken out and put in, indentation aside).  The omni sides do not count: each
    copy has its own."""
    if done.base is None or done.ours is None or conflict.base is None or conflict.ours is None:
        return False
    if done.symbol and conflict.symbol and _method(done) != _method(conflict):
        return False
    change = _change(done)
    return bool(change) and _part_of(change, _change(conflict)) is not None


_EDGE = ("pq_carried_edge_above\n", "pq_carried_edge_below\n")  # the lines around a region that no side changes
_FENCE_WORD, _HIDDEN = "Omni-new", "Omni~pq~new"  # fences hidden from the merge: the edit may change a block's lines


def _merged_edit(base: str, edit: str, copy: str, *, into_deleted: bool = False) -> tuple[str, int] | None:
    """The edit from ``base`` to ``edit`` merged three-way onto ``copy`` (another text made from ``base``) by the
    anchor-aware merge, omni blocks whole, else (the edit changes lines in one) line by line, between lines no side
    changes (an insertion at either end stays there), and how many of the edit's changes were left out.  None
    where the two changed the same lines, except lines the edit deleted that the copy holds with only names renamed
    (or only its layout changed), which go too, and (``into_deleted``) lines the copy deleted that the edit
    changed, which stay deleted (left out); None too where both inserted code at one place (which goes first would
    be a guess)."""
    for hide in (False, True):
        merged = _merged_once(base, edit, copy, hide=hide, into_deleted=into_deleted)
        if merged is not None:
            return merged
    return None


def _merged_once(base: str, edit: str, copy: str, *, hide: bool, into_deleted: bool) -> tuple[str, int] | None:
    """:func:`_merged_edit` with the omni fences hidden from the merge (``hide``) or not."""
    from patch_queue.merge import markers, three_way

    if _HIDDEN in base + edit + copy:
        return None
    above, below = _EDGE
    word = _FENCE_WORD if hide else _HIDDEN
    base, edit, copy = (above + t.replace(word, _HIDDEN) + below for t in (base, edit, copy))
    result = three_way.merge3(base, edit, copy)
    if any(
        r.kind == ConflictKind.BOTH_INSERTED and _code_lines(r.ours or "") and _code_lines(r.theirs or "")
        for r in result.regions
    ):
        return None
    text = result.text
    left = 0
    for region in reversed(markers.regions(text)):
        made, held, was = ("".join(region.side(s)) for s in ("upstream", "patch", "base"))
        if into_deleted and not _code_lines(held):
            left += 1
            text = markers.resolve(text, region, region.side("patch"))
            continue
        if _code_lines(made) or not (_layout(held) == _layout(was) or renames(was, held)):
            return None
        text = markers.resolve(text, region, region.side("upstream"))
    lines = text.splitlines(keepends=True)
    if not lines or lines[0] != above or lines[-1] != below:
        return None
    return "".join(lines[1:-1]).replace(_HIDDEN, _FENCE_WORD), left


def _opcodes(c: Conflict) -> tuple[list[str], list[str], list[int], list[int], list[_Opcode]]:
    """The region's base and upstream lines, where their non-blank lines are, and upstream's change in them (the
    hunks of :func:`_change`, in order)."""
    base, ours = (c.base or "").splitlines(keepends=True), (c.ours or "").splitlines(keepends=True)
    kept = [k for k, x in enumerate(base) if x.strip()]
    made = [k for k, x in enumerate(ours) if x.strip()]
    old, new = ([x.rstrip() for x in side if x.strip()] for side in (base, ours))
    ops = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
    return base, ours, kept, made, [op for op in ops if op[0] != "equal"]


def _made_here(c: Conflict, taken: list[int]) -> tuple[str, str, str]:
    """The changes upstream made in the region but those at ``taken`` (indexes into :func:`_change`): the lines
    it put at the region's start and at its end (where no side's other line can anchor them), and the base side
    with the others made."""
    base, ours, kept, made, ops = _opcodes(c)
    head = tail = ""
    out: list[str] = []
    at = 0  # the next base line not yet written
    for n, (_tag, i1, i2, j1, j2) in enumerate(ops):
        start = kept[i1] if i1 < len(kept) else len(base)
        end = kept[i2 - 1] + 1 if i2 > i1 else start
        out += base[at:start]
        at = end
        if n in taken:
            out += base[start:end]  # a change the other copy's resolution made: not here
        elif i1 == i2 == 0:
            head = "".join(ours[: made[j2 - 1] + 1])
        elif i1 == i2 == len(kept):
            tail = "".join(ours[made[j1] :])
        elif j2 > j1:
            out += ours[made[j1] : made[j2 - 1] + 1]
    return head, "".join(out + base[at:]), tail


def carried(conflict: Conflict, done: Conflict, text: str) -> Suggestion | None:
    """The resolution ``text`` of ``done`` (another copy's region of the same upstream change:
    :func:`carried_change`) carried to ``conflict``: the same side or both where that keeps or drops what it did
    there (:func:`as_resolved`), else ``text`` taken as an edit of ``done``'s patch side and merged three-way onto
    this one's (and then the changes upstream made here and not there merged onto that); None where they clash.
    The reason ends where the caller says the resolution was made."""
    if same_upstream_change(done, conflict):
        tip = as_resolved(conflict, done, text)
        if tip is not None:
            return tip
    if done.theirs is None or conflict.theirs is None or conflict.base is None:
        return None
    there, here = _change(done), _change(conflict)
    at = _part_of(there, here)
    if not there or at is None:
        return None
    shift = here[at[0]][1] - there[0][1]  # this copy's code is nested deeper by this much
    merged = _merged_edit(_reindent(done.theirs, shift), _reindent(text, shift), conflict.theirs)
    if merged is not None and len(at) < len(here):  # upstream changed more here: merged onto the carried text
        head, middle, tail = _made_here(conflict, at)
        merged = _merged_edit(conflict.base, middle, merged[0], into_deleted=True)
        merged = None if merged is None else (head + merged[0] + tail, merged[1])
    if merged is None:
        return None
    said = "the resolution of the same upstream change, merged onto this copy's patch side"
    if merged[1]:
        said += " (upstream's other changes here are in code this copy's patch deleted: left out)"
    return Suggestion(side_of(conflict, merged[0]), merged[0], said + ",")


def forwarded(conflict: Conflict, upstream: str) -> Suggestion | None:
    """Upstream's side when it is the patch's, through a new upstream method that only forwards to it: upstream
    renamed a call ``self.a()`` to ``self.b()``, the patch renamed it to ``self.c()``, and ``b`` (a method of the
    new ``upstream`` module) only returns ``self.c(...)`` with its own parameters (vllm-ascend 0.30.0rc2's
    ``_get_ascend_mamba_state_copy_funcs``, which returns vLLM's ``_get_mamba_state_copy_funcs()``)."""
    if conflict.base is None or conflict.ours is None or conflict.theirs is None:
        return None
    ups, omni = renames(conflict.base, conflict.ours), renames(conflict.base, conflict.theirs)
    if not ups or not omni or {a for a, _b in ups} != {a for a, _b in omni}:
        return None
    try:
        tree = symbols.parsed(upstream)
    except (SyntaxError, ValueError):
        return None
    methods = {
        n.name: n
        for klass in tree.body
        if isinstance(klass, ast.ClassDef)
        for n in klass.body
        if isinstance(n, ast.FunctionDef)
    }
    patch_of = dict(omni)
    said = []
    for old, new in ups:
        method = methods.get(new.rsplit(".", 1)[-1])
        if method is None or not _forwards(method, patch_of[old]):
            return None
        said.append(f"`{new}()` only returns `self.{patch_of[old]}(…)`")
    return Suggestion("upstream", conflict.ours, f"upstream's {', '.join(said)}, the patch's call: the same call")


def _forwards(method: ast.FunctionDef, target: str) -> bool:
    """``method`` only returns ``self.<target>(…)`` with its own parameters, in order (a docstring aside)."""
    body = [n for n in method.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
        return False
    call = body[0].value
    params = [a.arg for a in method.args.args[1:]]
    passed = [a.id for a in call.args if isinstance(a, ast.Name)]
    return ast.unparse(call.func) == f"self.{target}" and passed == params and not call.keywords


def _word(name: str) -> re.Pattern[str]:
    """``name`` (dotted or not) as a whole word of code."""
    return re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")


def _renamed(text: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        text = _word(old).sub(new, text)
    return text
