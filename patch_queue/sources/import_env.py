"""The environment ``pq check --import`` imports the built runners in: built once per set of exact versions, in pq's
cache, by pip with pip's own configuration.

What it holds (``import-env/<key>/`` in the cache, ``<key>`` a hash of every exact version below):

* ``venv/``: a virtual environment (``python -m venv --without-pip``) into which pip's own command line, run in a
  subprocess by pq's interpreter (``python -m pip --python venv/bin/python install``), installs

  1. torch exactly as the vLLM release pins it (``Requires-Dist: torch==X`` of its metadata), with its
     dependencies: pip takes the highest local version of ``X``, so where pip's configuration offers a CPU build
     (``torch-X+cpu`` through ``find-links``) that one (about 190 MB), else the registry's (a CUDA build: about
     2.7 GB with its dependencies);
  2. vLLM (the release that goes with the downstream: :mod:`.vllm_release`), the downstream release's own package
     (whose runners are the control) and the pure-Python packages of ``import_packages.txt``, all with
     ``--no-deps``: vLLM's own requirements hold native builds for GPUs that neither install nor matter here.
     ``import_packages.txt`` is a measured set (importing until no ``ModuleNotFoundError``) for vLLM 0.32.0,
     vllm-omni 0.32.0rc1 and vllm-ascend 0.30.0rc2; another vLLM may need another set.

* ``env.json``: what was installed (the versions above and what pip reported), written last.

The upstream (vllm-ascend) is not installed: its sources at the series' pin are written apart
(``import-env/upstream-<key>/``, by the snapshot's pin), with a ``<package>.egg-info`` (the sdist's own, or made
from ``setup.py``'s ``entry_points``) so that vLLM loads the ``ascend`` platform plugin as on hardware.  Its native
modules are stubbed at import time (:mod:`patch_queue.checks.import_stubs`).

Both folders are built in a temporary folder of ``import-env/`` and renamed into place at the end: a run killed,
offline or out of space leaves nothing half-built under a final name (a stale temporary folder is removed by the
next build).  Nothing is installed outside the cache.  Offline or out of space with none built is a
:class:`SourceError` of one line.

pip's configuration is pip's own, and pq holds it to the rules of its own registry client first
(:func:`.registry.check_configuration`): a value pq cannot use is one line naming the setting, never its value,
before anything is built; what pip says is printed without any credential (:func:`patch_queue.errors.redact`: the
configuration's credentials are known by then).  pip runs without the user's git repository variables
(:data:`patch_queue.git.command.LOCAL_ENV`), as every other process pq starts outside the project's repository.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from patch_queue import presets
from patch_queue.errors import SourceError
from patch_queue.git import command as git_command
from patch_queue.progress import Progress, say
from patch_queue.sources import archives, registry
from patch_queue.sources.cache import cache_dir
from patch_queue.sources.snapshot import Snapshot
from patch_queue.spec import QueueSpec

FORMAT = 1
PACKAGES = Path(__file__).with_name("import_packages.txt")
# Free space a build needs before it starts: the measured environment is 2.6 GB with the CPU torch, and pip keeps
# the downloads (about 715 MB) in its own cache as it goes.
NEEDED_BYTES = 4 << 30
_TMP = ".tmp-"


@dataclass(frozen=True)
class Versions:
    """The exact versions one environment is built for."""

    vllm: str
    torch: str  # a requirement: "torch==2.13.0"
    downstream: str  # "vllm-omni==0.32.0rc1"
    python: str  # "cp311-x86_64-linux"

    def key(self) -> str:
        parts = [str(FORMAT), self.vllm, self.torch, self.downstream, self.python, PACKAGES.read_text()]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]

    def describe(self) -> str:
        return f"{self.torch}, vllm=={self.vllm}, {self.downstream}"


@dataclass(frozen=True)
class ImportEnv:
    """A built environment: its interpreter, and the folder of the upstream sources to put on its path."""

    python: Path
    upstream: Path
    versions: Versions


def python_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}-{sys.platform}"


def torch_requirement(vllm_version: str, progress: Progress | None = None) -> str:
    """The torch requirement vLLM ``vllm_version`` pins (``torch==X`` in its metadata)."""
    from packaging.requirements import InvalidRequirement, Requirement

    pinned = archives.fetch_release("vllm", vllm_version, progress)
    if pinned.filename.endswith(".tar.gz"):
        meta = archives.archive_members(pinned, "PKG-INFO")
    else:
        meta = {k: v for k, v in archives.archive_members(pinned, "vllm-").items() if k.endswith("/METADATA")}
    for data in meta.values():
        for line in data.decode("utf-8", errors="replace").splitlines():
            key, _sep, value = line.partition(":")
            if key.strip().lower() != "requires-dist":
                continue
            try:
                req = Requirement(value.strip())
            except InvalidRequirement:
                continue
            if req.name == "torch" and req.marker is None and str(req.specifier).startswith("=="):
                return f"torch{req.specifier}"
    raise SourceError(f"vllm {vllm_version} pins no torch version in its metadata: the import test needs one")


def root() -> Path:
    return cache_dir() / "import-env"


def existing(versions: Versions) -> Path | None:
    """The built environment's folder for ``versions``, or None when none is built."""
    folder = root() / versions.key()
    return folder if (folder / "env.json").is_file() and python_of(folder).exists() else None


def python_of(folder: Path) -> Path:
    return folder / "venv" / "bin" / "python"


def build(versions: Versions, progress: Progress | None = None) -> Path:
    """The environment for ``versions``: the cached one, else built now (a progress line, then the time it took)."""
    found = existing(versions)
    if found is not None:
        return found
    registry.check_configuration()  # a setting pq cannot use is one line before anything is made
    top = root()
    try:
        top.mkdir(parents=True, exist_ok=True)
        _remove_stale(top)
        free = shutil.disk_usage(top).free
    except OSError as exc:
        raise SourceError(f"cannot build the import-test environment in {top}: {exc.strerror or exc}") from None
    if free < NEEDED_BYTES:
        raise SourceError(
            f"the import-test environment needs about {NEEDED_BYTES >> 30} GB free in {top}, "
            f"which has {free / (1 << 30):.1f} GB: free some space or point PQ_CACHE elsewhere"
        )
    say(progress, f"Building the import-test environment ({versions.describe()}) in {top} ...")
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=_TMP, dir=top))
    try:
        _venv(tmp / "venv")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", dir=tmp, delete=False) as pure:
            pure.write(PACKAGES.read_text())
        # torch with its dependencies (none but small pure-Python ones for a CPU build), held to the measured set's
        # versions where they overlap; then the rest without theirs
        _pip(tmp, ["-c", pure.name, versions.torch])
        _pip(tmp, ["--no-deps", "-r", pure.name, f"vllm=={versions.vllm}", versions.downstream])
        os.unlink(pure.name)
        record = {"format": FORMAT, "versions": versions.__dict__, "packages": _installed(tmp)}
        (tmp / "env.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        final = top / versions.key()
        try:
            os.rename(tmp, final)
        except OSError:
            if existing(versions) is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another pq built it meanwhile: that one is as good
            return final
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SourceError(f"cannot build the import-test environment in {top}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = sum(f.stat().st_size for f in final.rglob("*") if f.is_file() and not f.is_symlink())
    say(progress, f"built the import-test environment in {time.monotonic() - started:.0f} s ({size / 1e9:.1f} GB)")
    return final


def _remove_stale(top: Path) -> None:
    """Temporary folders of builds that were killed (older than a day: a build under way elsewhere is younger)."""
    for entry in top.glob(f"{_TMP}*"):
        try:
            if time.time() - entry.stat().st_mtime > 86400:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


def _venv(path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SourceError(f"cannot make the import-test environment: {_last_error(proc.stderr)}")


def _pip(tmp: Path, args: list[str]) -> None:
    """pip's own command line, with pip's configuration (files and ``PIP_*``), installing into the venv."""
    command = [sys.executable, "-m", "pip", "--python", str(tmp / "venv" / "bin" / "python"), "install"]
    command += ["--no-input", "--progress-bar", "off", "--disable-pip-version-check", *args]
    proc = subprocess.run(
        command, capture_output=True, text=True, check=False, cwd=tmp, env=git_command.environment(locale=False)
    )
    if proc.returncode != 0:
        output = proc.stderr + proc.stdout
        missing = re.search(r"No matching distribution found for ([A-Za-z0-9._-]+)", output)
        if missing:  # none found: pip does not say that it could not reach the index; pq's registry client does
            try:
                registry.project_files(missing.group(1))
            except SourceError as exc:
                raise SourceError(f"cannot build the import-test environment: {exc.message}") from None
        raise SourceError(f"cannot build the import-test environment: pip: {_last_error(output)}")


def _last_error(output: str) -> str:
    """pip's cause in one line: no space, no network, or its last ``ERROR:`` line."""
    if "No space left on device" in output:
        return "no space left on device (free some space or point PQ_CACHE elsewhere)"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    network = ("NewConnectionError", "Temporary failure in name resolution", "Network is unreachable", "timed out")
    if any(word in output for word in network):
        cause = errors[-1] if errors else lines[-1] if lines else ""
        return f"the package registry is unreachable (offline?): {cause.removeprefix('ERROR: ')}"
    found = errors[-1] if errors else lines[-1] if lines else "failed"
    return found.removeprefix("ERROR: ")


def _installed(tmp: Path) -> list[str]:
    """``name==version`` of every distribution in the venv, sorted."""
    out: list[str] = []
    for meta in sorted((tmp / "venv" / "lib").glob("python*/site-packages/*.dist-info/METADATA")):
        fields = dict(
            line.split(": ", 1) for line in meta.read_text(errors="replace").splitlines()[:10] if ": " in line
        )
        if "Name" in fields and "Version" in fields:
            out.append(f"{fields['Name']}=={fields['Version']}")
    return sorted(out, key=str.lower)


# -- the upstream's sources -------------------------------------------------------------------


def upstream_sources(snapshot: Snapshot, spec: QueueSpec, progress: Progress | None = None) -> Path:
    """A folder holding the upstream package of the queue ``spec`` (``<package>/``) of ``snapshot`` and its
    ``<package>.egg-info/``, written once per pin (a folder's: per its sources' bytes)."""
    package = spec.upstream_package

    def sources() -> list[str]:
        return sorted(path for path in snapshot.list_files(package + "/") if path.endswith(".py"))

    pin = snapshot.pin
    if not pin:  # a folder on disk is pinned by nothing: by its sources' bytes, so that another folder's are not read
        digest = hashlib.sha256()
        for path in sources():
            digest.update(f"{path}\0{len(data := snapshot.read(path))}\0".encode() + data)
        pin = "dir:" + digest.hexdigest()
    key = hashlib.sha256(f"{FORMAT}\0{package}\0{pin}".encode()).hexdigest()[:16]
    final = root() / f"upstream-{key}"
    if (final / f"{package}.egg-info" / "PKG-INFO").is_file():
        return final
    say(progress, f"Writing the sources of {snapshot.label} for the import test ...")
    top = root()
    try:
        top.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=_TMP, dir=top))
    except OSError as exc:
        raise SourceError(f"cannot write the upstream sources in {top}: {exc.strerror or exc}") from None
    try:
        for path in sources():
            target = tmp / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(snapshot.read(path))
        info = tmp / f"{package}.egg-info"
        info.mkdir()
        (info / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {_version(snapshot)}\n")
        (info / "entry_points.txt").write_text(_entry_points(snapshot, spec))
        (info / "top_level.txt").write_text(package + "\n")
        os.rename(tmp, final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if final.is_dir():  # another run wrote it meanwhile
            return final
        raise SourceError(f"cannot write the upstream sources in {top}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _version(snapshot: Snapshot) -> str:
    """The upstream's version: a release's own, else ``0+g<pin>`` (a local version: vLLM reads none of it)."""
    release = registry.parse_release(snapshot.spec) if snapshot.kind == "release" else None
    if release is not None:
        return release[1].text
    return "0+" + "".join(c for c in snapshot.pin if c.isalnum())[:12]


def _entry_points(snapshot: Snapshot, spec: QueueSpec) -> str:
    """The sdist's ``entry_points.txt``, else the one ``setup.py``'s literal ``entry_points=`` would give (with the
    platform plugin of the queue's rule set, :data:`patch_queue.presets.IMPORT_STUBS`, when it names none)."""
    given = f"{spec.upstream_package}.egg-info/entry_points.txt"
    if snapshot.exists(given):
        return snapshot.read(given).decode("utf-8", errors="replace")
    groups: dict[str, list[str]] = {}
    if snapshot.exists("setup.py"):
        tree = ast.parse(snapshot.read("setup.py"))
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "entry_points":
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    groups = {str(k): [str(e) for e in v] for k, v in value.items() if isinstance(v, list)}
    stubs = presets.IMPORT_STUBS.get(spec.rules)
    if "vllm.platform_plugins" not in groups and stubs is not None and stubs.platform_plugin:
        groups["vllm.platform_plugins"] = [stubs.platform_plugin]  # what the plugin has always been called
    return "".join(f"[{g}]\n" + "".join(f"{e}\n" for e in sorted(v)) + "\n" for g, v in sorted(groups.items()))


def registry_reachable() -> bool:
    """Whether the package registry answers (through pip's configuration, as every fetch of pq)."""
    try:
        registry.project_files("vllm")
    except SourceError:
        return False
    return True
