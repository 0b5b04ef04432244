"""``pq check --import``: every module of the built package imported in a process of its own in the import-test
environment, against the real vLLM, vllm-ascend and vllm-omni, with only the NPU's native modules stubbed.

Each module is imported by :mod:`.import_stubs` in a process of its own (forked from one interpreter, ``-I``, that
has imported only the upstream), the output's modules standing in for the downstream's in-tree package.  The
**control** is the same run over the downstream release's own modules of the same names, in the same environment,
first.  The findings:

* ``import-failed`` (error): the module does not import; the exception in one line and the output's file and line
  where it was raised.  When the release's own module fails the same way (the same exception raised at the same
  place outside the package), the cause is the environment, not the output: a warning (``import-failed-control``)
  naming the cause instead.
* ``import-control-failed`` (warning): the release's own module does not import where the output's does: the
  environment differs from a maintainer's (a stub too few, a package missing), so the output's import says less.
* ``override-lost`` / ``override-signature`` (errors): a carried method of an imported class no longer overrides a
  method of the real upstream class, or cannot take the arguments upstream's signature allows
  (:func:`.import_stubs.check_overrides`), shared with the control or not (the output is meant to be on this
  upstream; the release was not).
* ``import-stubbed`` (warning): a name the output reads from a stub while it is imported: not checked.

What it proves: that the modules import (class bodies, decorators, base classes and their order, module-level
reads of upstream names, default arguments and annotations evaluated at import) as on an Ascend machine with the
same releases, and that the carried methods still override upstream's.  What it does not: no kernel runs, no
method body runs (an undefined name inside a method is ``pq check``'s, by ruff), no model is loaded or served.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from patch_queue import presets
from patch_queue.checks import import_stubs
from patch_queue.checks.findings import ERROR, WARNING, Finding
from patch_queue.errors import redact
from patch_queue.git import command as git_command
from patch_queue.sources.import_env import ImportEnv
from patch_queue.spec import QueueSpec

# A module's import takes about 5 s of CPU (torch, vLLM); a module that takes this long is stuck.
TIMEOUT = 600


@dataclass(frozen=True)
class Imported:
    """What one module's import gave (:mod:`.import_stubs`'s result)."""

    module: str  # the file: "npu_ar_model_runner.py"
    error: tuple[str, str, int] | None  # (the exception in one line, file, line)
    stubbed: tuple[tuple[str, int, str], ...]
    overrides: tuple[tuple[str, str, int, str], ...]
    raised: str = ""  # where the exception was raised (the innermost frame): "file:line"
    inside: bool = True  # that frame is in the package's folder (an error of the package's own code)


def dump(found: list[Imported]) -> bytes:
    return json.dumps([asdict(i) for i in found], sort_keys=True).encode()


def load(data: bytes) -> list[Imported] | None:
    """What :func:`dump` wrote; None when it is not that."""
    try:
        rows = json.loads(data)
        return [
            Imported(
                str(r["module"]),
                (str(r["error"][0]), str(r["error"][1]), int(r["error"][2])) if r["error"] else None,
                tuple((str(f), int(n), str(m)) for f, n, m in r["stubbed"]),
                tuple((str(a), str(f), int(n), str(m)) for a, f, n, m in r["overrides"]),
                str(r["raised"]),
                bool(r["inside"]),
            )
            for r in rows
        ]
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def module_name(path: str) -> str:
    """The module's name in its package ("" for ``__init__.py``)."""
    return "" if path == "__init__.py" else path.removesuffix(".py")


def carried_methods(symbols: Mapping[str, list[str]]) -> dict[str, dict[str, list[str]]]:
    """Per module, per upstream class, the methods the series carries (``queue.toml``'s ``symbols``)."""
    out: dict[str, dict[str, list[str]]] = {}
    for path, names in symbols.items():
        for symbol in names:
            cls, dot, method = symbol.partition(".")
            if dot:
                out.setdefault(path, {}).setdefault(cls, []).append(method)
    return out


def stubs_of(spec: QueueSpec) -> dict[str, object]:
    """What the import test of the queue ``spec`` stubs (the request's ``stubs``: see :mod:`.import_stubs`): its rule
    set's native packages (:data:`patch_queue.presets.IMPORT_STUBS`; none for a rule set without) and its upstream's
    package."""
    found = presets.IMPORT_STUBS.get(spec.rules)
    data: dict[str, object] = {"upstream_package": spec.upstream_package}
    if found is not None:
        data.update(
            packages=list(found.packages),
            build_info=found.build_info,
            build_values=dict(found.build_values),
            device=found.device,
            device_module=found.device_module,
        )
    return data


def import_all(
    env: ImportEnv,
    package: str,
    modules: list[str],
    carried: Mapping[str, dict[str, list[str]]],
    overlay: Path,
    *,
    control: list[str],
    preload: list[str],
    jobs: int | None = None,
    stubs: Mapping[str, object],
) -> tuple[list[Imported], list[Imported]]:
    """Import each of ``modules`` (file names) of the output (``overlay``: the folder of its modules), and first
    each of ``control`` of the release's own, every module in a process of its own (:func:`.import_stubs.main`,
    after ``preload``, with ``stubs``: :func:`stubs_of`): (the output's, the control's)."""
    parallel = jobs or max(1, min(4, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory(prefix="pq-import-") as tmp:
        work = Path(tmp)
        planned = [(m, None) for m in sorted(control)] + [(m, overlay) for m in sorted(modules)]
        body = {
            "paths": [str(env.upstream)],
            "package": package,
            "preload": preload,
            "stubs": dict(stubs),
            "parallel": parallel,
            "jobs": [
                {
                    "overlay": str(where) if where else None,
                    "module": module_name(m),
                    "carried": carried.get(m, {}),
                    "result": str(work / f"{'out' if where else 'control'}-{m}.json"),
                }
                for m, where in planned
            ],
        }
        (work / "request.json").write_text(json.dumps(body))
        command = [str(env.python), "-I", import_stubs.__file__, str(work / "request.json")]
        # the user's environment without git's repository variables (as every process pq starts outside the project)
        environ = {
            k: v for k, v in git_command.environment(locale=False).items() if not k.startswith(("PYTHON", "VLLM_"))
        }
        environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"})
        why = ""
        try:
            proc = subprocess.run(
                command, capture_output=True, text=True, errors="replace", timeout=TIMEOUT, env=environ, check=False
            )
            tail = [line.strip() for line in proc.stderr.splitlines() if line.strip()][-1:]
            why = f"the interpreter ended with exit {proc.returncode}" + (f": {tail[0]}" if tail else "")
        except subprocess.TimeoutExpired:
            why = f"the imports did not end within {TIMEOUT} s"
        found = [_result(m, work / f"{'out' if where else 'control'}-{m}.json", why) for m, where in planned]
    return found[len(control) :], found[: len(control)]


def _result(module: str, path: Path, why: str) -> Imported:
    """One module's result; an exception's message is kept without any credential (:func:`redact`): it is printed,
    written into the reports and kept in the cache."""
    why = redact(why)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # the process died before writing its result (a crash in native code)
        return Imported(module, (why or "no result", "", 0), (), ())
    error = data["error"]
    return Imported(
        module,
        (redact(error["message"]), error["file"], error["line"]) if error else None,
        tuple((str(f), int(n), str(name)) for f, n, name in data["stubbed"]),
        tuple((str(r), str(f), int(n), str(m)) for r, f, n, m in data["overrides"]),
        str(error.get("raised", "")) if error else "",
        bool(error.get("inside", True)) if error else True,
    )


def findings(output: list[Imported], control: list[Imported], *, release: str) -> list[Finding]:
    """The findings of the module's docstring, from the output's imports and the control's."""
    theirs = {c.module: c for c in control}
    out: list[Finding] = []
    for ours in output:
        mine = theirs.get(ours.module)
        name = ours.module
        if ours.error is not None:
            message, file, line = ours.error
            where = file or name
            if _shared(ours, mine):
                why = (
                    f"{name} does not import, nor does {release}'s own: {message} (raised in {ours.raised}, outside "
                    "the package): the environment's cause, not the output's"
                )
                out.append(Finding(where, line, "import-failed-control", WARNING, why))
            else:
                out.append(Finding(where, line, "import-failed", ERROR, f"{name} does not import: {message}"))
        elif mine is not None and mine.error is not None:
            why = f"{release}'s own {name} does not import in this environment ({mine.error[0]}), the output's does"
            out.append(Finding(name, 0, "import-control-failed", WARNING, why))
        for rule, file, line, message in ours.overrides:  # the release's own may share it: the output is on upstream
            out.append(Finding(file, line, rule, ERROR, message))
        for file, line, read in ours.stubbed:
            why = f"reads `{read}` from a stub of a native NPU module while importing: not checked"
            out.append(Finding(file, line, "import-stubbed", WARNING, why))
    return sorted(set(out))


def _shared(ours: Imported, theirs: Imported | None) -> bool:
    """Whether the control fails as the output does, by a cause outside the package: the same exception raised at
    the same place outside both folders (a package missing, a stub too few, the release's own platform code).  An
    exception raised in the package's own code (an upstream name the runners import that upstream dropped) is the
    output's even when the release shares it: the output is meant to be on this upstream."""
    return (
        theirs is not None
        and theirs.error is not None
        and ours.error is not None
        and theirs.error[0] == ours.error[0]
        and not ours.inside
        and not theirs.inside
        and ours.raised == theirs.raised
    )


def summary(output: list[Imported]) -> str:
    failed = sum(1 for i in output if i.error is not None)
    return f"{len(output) - failed} of {len(output)} module(s) imported"


def error_count(found: list[Finding]) -> int:
    return sum(1 for f in found if f.severity == ERROR)
