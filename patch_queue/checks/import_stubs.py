"""What ``pq check --import`` stubs, and the script that imports each module with those stubs in a process of its own.

This file runs *inside the import-test environment* (:mod:`patch_queue.sources.import_env`), as
``venv/bin/python -I import_stubs.py REQUEST``: it imports nothing of pq, and its interpreter sees only the
environment's packages (``-I``: no ``PYTHONPATH``, no user site, not the current folder).  It installs the stubs,
imports the upstream (torch, vLLM, the carried vllm-ascend modules: nothing of the downstream), then forks one child
per module to import (:func:`main`): each module is imported in a process that has imported nothing else of the
downstream, as a fresh interpreter after vLLM's platform loaded, for a fifth of the time (torch and vLLM take about
5 s to import).

**What is stubbed, and why.** Only the NPU's native modules, which no x86_64 machine without Ascend's toolkit can
import (torch-npu's x86_64 wheel needs ``libhccl.so``); everything else is the real code of the real releases:

* :data:`STUBBED_PACKAGES`: ``torch_npu`` (torch-npu: the NPU device, its kernels ``op_plugin``/``atb``, its
  profiler; what vllm-ascend reads at import: ``torch_npu``, ``.npu``, ``.op_plugin``, ``.op_plugin.atb``,
  ``.op_plugin.atb._atb_ops``, ``.profiler``) and ``acl`` (the Ascend runtime's Python binding, ``acl.rt``, which
  only the workers reach), each with every submodule;
* :data:`BUILD_INFO`: ``vllm_ascend._build_info``, the file vllm-ascend's build writes (not in its sdist), with
  the value a build for an Atlas A2 (``SOC_VERSION=ascend910b1``, vllm-ascend's own default) writes;
* ``torch.npu``: torch-npu registers its device module with torch on import; the stub does the same
  (``torch.utils.rename_privateuse1_backend("npu")`` then ``torch._register_device_module("npu", torch_npu.npu)``:
  the second alone fails), because vllm-ascend evaluates ``torch.npu.Event`` in a signature at import.

``vllm_ascend.vllm_ascend_C`` (vllm-ascend's compiled kernels) is *not* stubbed: vllm-ascend guards its import.

A stubbed module gives a stub for every attribute (a class, so it can be called, subclassed, subscripted, used in
annotations); it never fails.  So a stub must not hide an error of the output: every name a module of the output
reads from a stub while it is imported (``from torch_npu import X``, ``torch.npu.Event`` at module level) is
recorded with its file and line, and pq reports it as not checked (``import-stubbed``).

**The request** (a JSON file): ``paths`` to put first on ``sys.path`` (the upstream's sources), ``package`` (the
in-tree package, ``vllm_omni.platforms.npu.worker``), ``preload`` (the upstream modules to import first),
``parallel`` (how many children at once) and ``jobs``, each with ``overlay`` (a folder holding the output's modules,
which then stand in for that package's own: the built runners dropped into the downstream's tree, as on a
maintainer's machine; ``null`` for the control: the release's own modules), ``module`` (the module's name in the
package, "" for the package), ``carried`` (per upstream class name, the methods the series carries from it) and
``result`` (where to write its result).

**A job's result** (a JSON file): ``error`` (null, or the exception in one line with ``file``/``line``: the innermost
frame in the package's folder), ``stubbed`` (the names read from a stub: ``[file, line, name]``) and ``overrides``
(``[rule, file, line, message]``: ``override-lost`` when a carried method no longer overrides a method of the
real upstream class, ``override-signature`` when it cannot take the arguments upstream's signature gives).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import sys
import traceback
import types
from typing import Any

# what is stubbed: the request's ``stubs`` (the queue's rule set's, :data:`patch_queue.presets.IMPORT_STUBS`), set by
# :func:`configure` before anything is imported; this script imports nothing of pq, so it is handed the data
STUBBED_PACKAGES: tuple[str, ...] = ()
BUILD_INFO = ""
BUILD_INFO_VALUES: dict[str, str] = {}
DEVICE = ""  # the torch device the stubbed package registers ("" = none)
DEVICE_MODULE = ""  # the stubbed module that is that device's module
UPSTREAM_PACKAGE = ""  # the upstream's top-level package: the classes whose methods the series carries live there


def configure(stubs: dict[str, Any]) -> None:
    """What is stubbed, from the request: ``packages``, ``build_info``, ``build_values``, ``device``,
    ``device_module`` and ``upstream_package``."""
    global STUBBED_PACKAGES, BUILD_INFO, BUILD_INFO_VALUES, DEVICE, DEVICE_MODULE, UPSTREAM_PACKAGE
    STUBBED_PACKAGES = tuple(stubs.get("packages", ()))
    BUILD_INFO = str(stubs.get("build_info", ""))
    BUILD_INFO_VALUES = dict(stubs.get("build_values", {}))
    DEVICE = str(stubs.get("device", ""))
    DEVICE_MODULE = str(stubs.get("device_module", ""))
    UPSTREAM_PACKAGE = str(stubs["upstream_package"])


_reads: list[tuple[str, int, str]] = []
_watched: list[str] = []  # folders whose frames' reads of a stub are recorded


def _record(name: str) -> None:
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        for folder in _watched:
            if path.startswith(folder + os.sep):
                _reads.append((os.path.relpath(path, folder), frame.f_lineno, name))
                return
        if not path.startswith(os.path.dirname(os.path.abspath(__file__))):
            return  # the direct reader is elsewhere: a stub read by the upstream, not by the output
        frame = frame.f_back  # type: ignore[assignment]


class _StubMeta(type):
    """The type of every stub: any attribute is a stub, and so is any call, subscript or operation."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        _record(f"{cls.__qualname__}.{name}")
        return _stub(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return _stub(f"{cls.__qualname__}()")

    def __getitem__(cls, key: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        return iter(())

    def __bool__(cls) -> bool:
        return False

    def __int__(cls) -> int:
        return 0

    def __index__(cls) -> int:
        return 0


def _stub(qualname: str) -> Any:
    return _StubMeta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname, "__module__": "stub"})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        _record(f"{self.__name__}.{name}")
        return _stub(f"{self.__name__}.{name}")


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        if BUILD_INFO and spec.name == BUILD_INFO:
            module.__dict__.update(BUILD_INFO_VALUES)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # a package: its submodules are stubs too


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if (BUILD_INFO and name == BUILD_INFO) or name.split(".", 1)[0] in STUBBED_PACKAGES:
            return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)
        return None


class _OverlayFinder(importlib.abc.MetaPathFinder):
    """The output's modules in place of ``package``'s own (a module the output lacks stays the release's: the
    package's path is the output's folder, then the release's, so its subpackages, which no series keeps, are
    the release's)."""

    def __init__(self, package: str, folder: str) -> None:
        self.package, self.folder = package, folder

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name == self.package:
            init = os.path.join(self.folder, "__init__.py")
            if os.path.isfile(init):
                own = importlib.machinery.PathFinder.find_spec(name, path)
                below = list(own.submodule_search_locations or []) if own is not None else []
                locations = [self.folder, *(p for p in below if os.path.abspath(p) != self.folder)]
                return importlib.util.spec_from_file_location(name, init, submodule_search_locations=locations)
            return None
        if not name.startswith(self.package + "."):
            return None
        rest = name[len(self.package) + 1 :].replace(".", os.sep)
        file = os.path.join(self.folder, rest + ".py")
        return importlib.util.spec_from_file_location(name, file) if os.path.isfile(file) else None


def install_stubs() -> None:
    """The stubs of the module's docstring (as :func:`configure` set them), before anything imports a stubbed
    package."""
    sys.meta_path.insert(0, _StubFinder())
    if not DEVICE:
        return
    import torch

    device = importlib.import_module(DEVICE_MODULE)
    torch.utils.rename_privateuse1_backend(DEVICE)
    torch._register_device_module(DEVICE, device)


def _where(exc: BaseException, folder: str) -> tuple[str, int]:
    """The innermost frame of the traceback in ``folder`` (a syntax error: its own file and line)."""
    found = ("", 0)
    for frame, line in traceback.walk_tb(exc.__traceback__):
        path = os.path.abspath(frame.f_code.co_filename)
        if path.startswith(folder + os.sep):
            found = (os.path.relpath(path, folder), line)
    if isinstance(exc, SyntaxError) and exc.filename and os.path.abspath(exc.filename).startswith(folder + os.sep):
        found = (os.path.relpath(os.path.abspath(exc.filename), folder), exc.lineno or 0)
    return found


def _raised_in(exc: BaseException, folder: str) -> str:
    """Where ``exc`` was raised: its innermost frame's file, relative to ``folder`` when inside it, else the path
    of the module below ``site-packages`` (or as it is)."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    if not frames:
        return ""
    frame, line = frames[-1]
    path = os.path.abspath(frame.f_code.co_filename)
    if path.startswith(folder + os.sep):
        return f"{os.path.relpath(path, folder)}:{line}"
    return f"{path.rsplit('site-packages' + os.sep, 1)[-1]}:{line}"


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (a message's line breaks, as in an MRO conflict's, are spaces)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _accepts(override: inspect.Signature, upstream: inspect.Signature) -> str:
    """Why ``override`` cannot take a call that ``upstream``'s signature allows ("" when it can): every parameter of
    upstream's, by position where upstream takes it so and by name where upstream takes it so; none required that
    upstream's callers do not pass."""
    kinds = inspect.Parameter
    ours = list(override.parameters.values())
    theirs = list(upstream.parameters.values())
    var_pos = any(p.kind == kinds.VAR_POSITIONAL for p in ours)
    var_kw = any(p.kind == kinds.VAR_KEYWORD for p in ours)
    positional = [p for p in ours if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    by_name = {p.name: p for p in ours if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)}
    for i, p in enumerate(theirs):
        if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD):
            if i >= len(positional) and not var_pos:
                return f"takes no positional argument {i} (upstream's `{p.name}`)"
        if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY) and p.name not in by_name and not var_kw:
            return f"takes no argument `{p.name}`"
        if p.kind == kinds.VAR_POSITIONAL and not var_pos:
            return f"takes no `*{p.name}`"
        if p.kind == kinds.VAR_KEYWORD and not var_kw:
            return f"takes no `**{p.name}`"
    names = {p.name for p in theirs}
    upstream_var_kw = any(p.kind == kinds.VAR_KEYWORD for p in theirs)
    for p in ours:
        required = p.default is kinds.empty and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
        if required and p.name not in names and not upstream_var_kw:
            return f"requires `{p.name}`, which upstream's callers do not pass"
    return ""


def check_overrides(module: types.ModuleType, carried: dict[str, list[str]], folder: str) -> list[list[object]]:
    """``override-lost`` and ``override-signature`` for the carried methods of the classes ``module`` defines."""
    out: list[list[object]] = []
    for cls in vars(module).values():
        if not isinstance(cls, type) or cls.__module__ != module.__name__:
            continue
        for base in cls.__mro__[1:]:
            methods = carried.get(base.__name__)
            if not methods or not base.__module__.startswith(UPSTREAM_PACKAGE + "."):
                continue
            for name in methods:
                ours = cls.__dict__.get(name)
                if not inspect.isfunction(ours):
                    continue
                code = inspect.unwrap(ours).__code__  # a decorator's wrapper (``torch.inference_mode``): its function
                file, line = os.path.relpath(code.co_filename, folder), code.co_firstlineno
                owner = next((k for k in base.__mro__ if name in k.__dict__), None)
                where = f"{cls.__name__}.{name}"
                if owner is None or not owner.__module__.startswith(UPSTREAM_PACKAGE + "."):
                    instead = f" (only {owner.__module__}.{owner.__name__} does)" if owner is not None else ""
                    why = f"{where} overrides nothing of {base.__module__}.{base.__name__}: it defines no `{name}`"
                    out.append(["override-lost", file, line, why + instead])
                    continue
                theirs = owner.__dict__[name]
                try:
                    why = _accepts(inspect.signature(ours), inspect.signature(theirs))
                except (TypeError, ValueError):
                    continue
                if why:
                    message = f"{where} {why}, which {owner.__module__}.{owner.__name__}.{name}'s signature allows"
                    out.append(["override-signature", file, line, message])
            break  # the nearest upstream base the series carries from
    return out


def _run_job(package: str, job: dict[str, Any]) -> dict[str, object]:
    """One module's import (in a process of its own): its result."""
    overlay: str | None = job["overlay"]
    result: dict[str, object] = {"error": None, "stubbed": [], "overrides": []}
    folder = ""
    try:
        if overlay is not None:
            folder = os.path.abspath(overlay)
            sys.meta_path.insert(0, _OverlayFinder(package, folder))
        else:
            spec = importlib.util.find_spec(package)
            locations = list(spec.submodule_search_locations or []) if spec else []
            folder = os.path.abspath(locations[0]) if locations else ""
        _watched.append(folder)
        name = f"{package}.{job['module']}" if job["module"] else package
        module = importlib.import_module(name)
        result["overrides"] = check_overrides(module, job["carried"], folder)
    except BaseException as exc:  # noqa: BLE001 - whatever the import raised is the finding
        file, line = _where(exc, folder) if folder else ("", 0)
        inside = bool(folder) and any(
            os.path.abspath(f.f_code.co_filename).startswith(folder + os.sep)
            for f, _n in list(traceback.walk_tb(exc.__traceback__))[-1:]
        )
        raised = _raised_in(exc, folder) if folder else ""
        result["error"] = {"message": one_line(exc), "file": file, "line": line, "raised": raised, "inside": inside}
    result["stubbed"] = sorted(set(_reads))
    return result


def _write(path: str, result: dict[str, object]) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)


def main(request_path: str) -> None:
    """Preload the upstream (``preload``: torch, vLLM, vllm-ascend; nothing of the downstream), then import each
    job's module in a child forked from that state: each module is imported in a process of its own that has
    imported nothing of the downstream, as a fresh interpreter would be after the platform loaded, without paying
    for torch and vLLM again.  A preload that fails is every job's result (the environment's, shared with the
    control)."""
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    sys.path[:0] = request["paths"]
    package: str = request["package"]
    jobs: list[dict[str, Any]] = request["jobs"]
    configure(request["stubs"])
    try:
        install_stubs()
        for name in request["preload"]:
            importlib.import_module(name)
    except BaseException as exc:  # noqa: BLE001
        # raised outside every package imported below (in the upstream, vLLM or torch): never the output's own cause
        raised = _raised_in(exc, os.path.abspath(request["paths"][0])) if request["paths"] else ""
        failed: dict[str, object] = {
            "error": {"message": one_line(exc), "file": "", "line": 0, "raised": raised, "inside": False},
            "stubbed": [],
            "overrides": [],
        }
        for job in jobs:
            _write(job["result"], failed)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    running: set[int] = set()
    for job in jobs:
        while len(running) >= max(1, int(request["parallel"])):
            running.discard(os.wait()[0])
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _write(job["result"], _run_job(package, job))
            except BaseException:  # noqa: BLE001 - the parent sees no result file
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        running.add(pid)
    while running:
        running.discard(os.wait()[0])


if __name__ == "__main__":
    main(sys.argv[1])
