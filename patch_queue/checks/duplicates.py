"""Statements merged code runs more often than either input of the merge did.

When the omni side added a statement (often ported from the GPU runners) and upstream later added
the same one, perhaps under another guard, a merge can keep both: the result compiles and keeps
every omni block, but runs the work twice.  For every method of the output, each call statement
(compared by its code with the layout dropped) is counted, and so it is in the two inputs: the
same method of the reference (the previous build: the old omni method) and of the upstream class
(the new upstream method).  A
statement both inputs have and the output has more often than either is an error at its last copy
(a statement only one side has is new code, however often it is written).  Only statements that
are a call (``x.fill_(-1)``, ``await f()``) count: a value assigned twice is most often two
branches of one ``if``, a call made twice is work done twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from patch_queue.checks.findings import ERROR, Finding
from patch_queue.merge.calls import calls, counts, methods

RULE = "statement-duplicated"


def check_duplicates(
    files: Mapping[str, str], reference: Mapping[str, str], upstream: str | None, *, cls: str
) -> list[Finding]:
    """One error per statement a method of ``files`` runs more often than the same method of ``reference``
    (same module) and of upstream's class ``cls`` (``upstream``: the vendored module text) both do."""
    up = {k.split(".", 1)[1]: v for k, v in methods(upstream or "").items() if k.startswith(cls + ".")}
    out: list[Finding] = []
    for path, text in sorted(files.items()):
        before = methods(reference.get(path, ""))
        for name, method in methods(text).items():
            have = list(calls(method))
            got = Counter(code for code, _line in have)
            old, new = counts(before.get(name)), counts(up.get(name.rsplit(".", 1)[-1]))
            for code, n in sorted(got.items()):
                if old[code] and new[code] and n > max(old[code], new[code]):
                    line = max(at for c, at in have if c == code)
                    message = (
                        f"{name} runs `{code.splitlines()[0]}` {n} times; the omni method did {old[code]}, "
                        f"upstream's {new[code]}: a statement both sides added is kept twice"
                    )
                    out.append(Finding(path, line, RULE, ERROR, message))
    return out
