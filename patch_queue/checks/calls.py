"""Calls of a runner's own methods with a keyword the method does not take: a TypeError at run time.

A refresh can merge upstream's new arguments of a call into the call the downstream wrote in its place (upstream
passes ``parallel_config=`` to ``dispatch_cg_and_sync_dp``, which vllm-omni's model runner v2 calls through its own
``self._dispatch_batch_descriptor``, whose parameters are keyword-only and fixed): the words merge, the module
compiles and imports, and the call fails when it runs.  This check reads every ``self.NAME(..., key=...)`` in a
method of a class of the output and looks ``NAME`` up in that class, its bases and the classes deriving from it in
the output (a subclass's override is called as well): a keyword that none of them takes, where none takes
``**kwargs``, is an error at the call's line.  Not checked: a method that neither the class nor its bases in the
output define (upstream's), and one with a definition decorated other than by ``staticmethod`` or ``classmethod``
(a decorator may take any arguments).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from patch_queue.checks.findings import ERROR, Finding

RULE = "call-keyword"
_PLAIN_DECORATORS = {"staticmethod", "classmethod"}


@dataclass(frozen=True)
class _Method:
    where: str  # "Class.name" at "file:line"
    takes: frozenset[str]  # the keywords it takes
    any_keyword: bool  # it takes **kwargs, or a decorator hides what it takes


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return target.id if isinstance(target, ast.Name) else ""


def _method(cls: str, path: str, node: ast.FunctionDef | ast.AsyncFunctionDef) -> _Method:
    a = node.args
    takes = frozenset(x.arg for x in (*a.args, *a.kwonlyargs))
    hidden = any(_decorator_name(d) not in _PLAIN_DECORATORS for d in node.decorator_list)
    return _Method(f"{cls}.{node.name} ({path}:{node.lineno})", takes, a.kwarg is not None or hidden)


def _base_names(cls: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases if isinstance(b, ast.Name | ast.Attribute)]


def check_calls(files: Mapping[str, str]) -> list[Finding]:
    """The ``call-keyword`` errors of the modules ``files`` (name -> text); a module that does not parse is left to
    the parse rule.  ``self.NAME`` is looked up in the calling class and its bases of the output (one of them must
    define it, else it is upstream's, not checked) and in the classes of the output that derive from it (their
    overrides are called too)."""
    trees: dict[str, ast.Module] = {}
    for path, text in sorted(files.items()):
        try:
            trees[path] = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
    classes = [(path, c) for path, tree in trees.items() for c in ast.walk(tree) if isinstance(c, ast.ClassDef)]
    bases = {c.name: _base_names(c) for _p, c in classes}
    methods: dict[tuple[str, str], _Method] = {}
    for path, cls in classes:
        for node in cls.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                methods[cls.name, node.name] = _method(cls.name, path, node)

    def ancestors(name: str) -> list[str]:
        seen: list[str] = []
        todo = [name]
        while todo:
            current = todo.pop(0)
            if current not in seen:
                seen.append(current)
                todo += bases.get(current, [])
        return seen

    out: list[Finding] = []
    for path, cls in classes:
        up = ancestors(cls.name)
        down = [c.name for _p, c in classes if cls.name in ancestors(c.name)[1:]]
        for func in (n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
                f = call.func
                if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self"):
                    continue
                own = next((methods[c, f.attr] for c in up if (c, f.attr) in methods), None)
                if own is None:
                    continue
                defined = [own, *(methods[c, f.attr] for c in down if (c, f.attr) in methods)]
                if any(m.any_keyword for m in defined):
                    continue
                bad = [k.arg for k in call.keywords if k.arg is not None and not any(k.arg in m.takes for m in defined)]
                if bad:
                    names = ", ".join(f"`{k}`" for k in bad)
                    which = defined[0].where if len(defined) == 1 else "none of " + ", ".join(m.where for m in defined)
                    verb = "does not take" if len(defined) == 1 else "takes"
                    out.append(
                        Finding(
                            path,
                            call.lineno,
                            RULE,
                            ERROR,
                            f"{cls.name}.{func.name} calls self.{f.attr}() with {names}, which {which} {verb}: a "
                            "TypeError when it runs",
                        )
                    )
    return sorted(set(out))
