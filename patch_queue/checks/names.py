"""Names of the built modules: undefined (a NameError at run time), redefined, imported and unused.

``ruff`` (pq's pinned formatter, run without any configuration) finds them: F821 is an error, F811
and F401 are warnings.  A module that does not parse is left to the parse rule.
"""

from __future__ import annotations

from collections.abc import Mapping

from patch_queue.checks.findings import ERROR, WARNING, Finding
from patch_queue.series import fmt

RULES = {"F821": ("name-undefined", ERROR), "F811": ("name-redefined", WARNING), "F401": ("import-unused", WARNING)}


def check_names(files: Mapping[str, str]) -> list[Finding]:
    out: list[Finding] = []
    for path, text in sorted(files.items()):
        for lint in fmt.lint(text, tuple(RULES)) or []:
            rule, severity = RULES[lint.code]
            out.append(Finding(path, lint.line, rule, severity, lint.message))
    return out
