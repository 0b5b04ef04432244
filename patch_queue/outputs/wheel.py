"""``pq build --wheel``: an installable, reproducible wheel of the standalone runner package.

The wheel holds the top of the stack in its ``--standalone`` form (the package is named after
the output folder, ``npu_worker``, and its ``vllm_omni.platforms.npu.worker`` imports point into
itself).  Its version encodes both pins, ``<vllm-omni release>+ascend.<vllm-ascend target>``:

* a registry release upstream (``vllm-ascend==0.30.0rc2``): ``0.30.0+ascend.0.30.0rc2``, and the
  wheel requires exactly that vllm-ascend release;
* a git upstream: ``0.30.0+ascend.g<first 12 of the public commit>``; no release can express a
  commit, so the wheel requires no vllm-ascend and records the commit in its description and a
  ``Project-URL`` instead;
* a folder upstream: ``+ascend.d<first 12 of the sha256 of the vendored files' digests>``.

A queue adopted from a folder has no downstream release: its public version is ``0``.

The wheel is built by setuptools' PEP 517 backend (``build_wheel``) in a subprocess of the
current Python, from a generated project in a temporary folder, without network.  Then it is
rewritten deterministically (sorted entries, one fixed timestamp derived from the series, fixed
file modes, RECORD regenerated), so two builds of the same series are byte-identical whatever
the umask, the build folder or the clock.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import io
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from patch_queue.errors import PqError, QueueError
from patch_queue.series.queue import QUEUE_FILE, Queue
from patch_queue.sources.registry import parse_version

DIST_NAME = "vllm-omni-npu-worker"
PYTHON_REQUIRES = ">=3.10"
LICENSE = "Apache-2.0"  # vllm-omni's and vllm-ascend's licence
UPSTREAM_COMMIT_URL = "https://github.com/vllm-project/vllm-ascend/commit/"
# `license = "<SPDX>"` in [project] needs setuptools 77; setuptools writes wheels itself since 70.1
MIN_SETUPTOOLS = (77, 0)
BUILD_REQUIRES = "setuptools>=77"
MIN_EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can hold
WHEEL_MODE = 0o644
# (setuptools' backend rewrites sys.argv, so the arguments are read first)
_BUILD_SCRIPT = (
    "import sys\n"
    "dist, result = sys.argv[1:3]\n"
    "from setuptools import build_meta\n"
    "name = build_meta.build_wheel(dist)\n"
    "with open(result, 'w', encoding='utf-8') as fh:\n"
    "    fh.write(name)\n"
)


@dataclass(frozen=True)
class WheelMeta:
    """Everything the wheel says about itself, derived from ``queue.toml`` and the series."""

    name: str
    version: str
    summary: str
    requires: tuple[str, ...]  # Requires-Dist, in order
    omni: str  # the one requirement of the extra "omni"
    urls: tuple[tuple[str, str], ...]  # Project-URL (label, url)
    readme: str


# -- version and metadata -------------------------------------------------------------------------


def local_label(text: str) -> str:
    """``text`` as a PEP 440 local version segment: lower case, only [a-z0-9.]."""
    label = re.sub(r"[^a-z0-9]+", ".", text.lower()).strip(".")
    if not label:
        raise QueueError(f"cannot make a local version label of {text!r}", path=QUEUE_FILE)
    return label


def upstream_release(queue: Queue) -> str | None:
    """The vllm-ascend version of a registry release pin (``vllm-ascend==0.30.0rc2`` -> ``0.30.0rc2``)."""
    up = queue.upstream
    if up.kind != "release":
        return None
    _name, sep, version = up.spec.partition("==")
    parsed = parse_version(version) if sep else None
    if parsed is None:
        raise QueueError(f"upstream.spec {up.spec!r} is not NAME==VERSION", path=QUEUE_FILE)
    return parsed.text


def upstream_commit(queue: Queue) -> str | None:
    """The public vllm-ascend commit of a git pin."""
    up = queue.upstream
    if up.kind != "git":
        return None
    commit = up.public_commit or up.pin
    if not re.fullmatch(r"[0-9a-f]{12,64}", commit):
        raise QueueError(f"upstream.public_commit {commit!r} is not a commit id", path=QUEUE_FILE)
    return commit


def upstream_target(queue: Queue) -> str:
    """The local version label naming the upstream pin."""
    release = upstream_release(queue)
    if release is not None:
        return local_label(release)
    commit = upstream_commit(queue)
    if commit is not None:
        return "g" + commit[:12]
    if queue.upstream.kind == "dir":
        listing = "".join(f"{path}\0{digest}\n" for path, digest in sorted(queue.upstream.files.items()))
        return "d" + hashlib.sha256(listing.encode()).hexdigest()[:12]
    raise QueueError(f"unknown upstream.kind {queue.upstream.kind!r}", path=QUEUE_FILE)


def downstream_version(queue: Queue) -> str:
    """The public version: the downstream release, ``0`` when the series was adopted from a folder."""
    release = queue.downstream_release.strip()
    if not release:
        return "0"
    parsed = parse_version(release)
    if parsed is None or "+" in parsed.text:
        raise QueueError(f"downstream.release {release!r} is not a public PEP 440 version", path=QUEUE_FILE)
    return parsed.text


def wheel_version(queue: Queue) -> str:
    """``<downstream release>+ascend.<target>``, e.g. ``0.30.0+ascend.gcf0baa38dfb2``."""
    return f"{downstream_version(queue)}+ascend.{upstream_target(queue)}"


def wheel_meta(queue: Queue, *, package: str, patches: list[str]) -> WheelMeta:
    version = wheel_version(queue)
    up_name = queue.upstream.name or "vllm-ascend"
    down_name = queue.downstream_name or "vllm-omni"
    release = upstream_release(queue)
    commit = upstream_commit(queue)
    requires: list[str] = []
    urls: list[tuple[str, str]] = []
    if release is not None:
        requires.append(f"{up_name}=={release}")
        upstream_line = f"{up_name} release {release} (required by this wheel)"
    elif commit is not None:
        urls.append((f"{up_name} commit", UPSTREAM_COMMIT_URL + commit))
        upstream_line = (
            f"{up_name} git commit {commit} (no release holds it, so this wheel does not require "
            f"{up_name}: install it from that commit)"
        )
    else:
        upstream_line = f"{up_name} from a folder (vendored files {upstream_target(queue)[1:]}; not required)"
    requires.append("torch-npu")
    down_release = queue.downstream_release.strip()
    omni = f"{down_name}=={downstream_version(queue)}" if down_release else down_name
    summary = (
        f"{down_name}'s Ascend NPU model runners as the standalone package {package}, "
        f"replayed onto {up_name} {release or (commit[:12] if commit else 'from a folder')}"
    )
    readme = "\n".join(
        [
            f"# {DIST_NAME} {version}",
            "",
            f"{down_name}'s Ascend NPU model runners (`{queue.package}/`) as the standalone package `{package}`",
            f"(its `{queue.package.replace('/', '.')}` imports point into `{package}`), built by `pq build --wheel`",
            "from the patch series below.",
            "",
            f"- {down_name}: {down_release or '(adopted from a folder: no release)'}"
            + (f"; `pip install '{DIST_NAME}[omni]'` installs {omni}" if down_release else ""),
            f"- {upstream_line}",
            f"- series: {len(patches)} patches",
            "",
            *(f"  - `{name}`" for name in patches),
            "",
        ]
    )
    return WheelMeta(DIST_NAME, version, summary, tuple(requires), omni, tuple(urls), readme)


def _toml(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(map(_toml, values)) + "]"


def pyproject(meta: WheelMeta, package: str, *, data_files: list[str]) -> str:
    lines = [
        "[build-system]",
        f"requires = {_toml_list([BUILD_REQUIRES])}",
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        f"name = {_toml(meta.name)}",
        f"version = {_toml(meta.version)}",
        f"description = {_toml(meta.summary)}",
        'readme = {file = "README.md", content-type = "text/markdown"}',
        f"requires-python = {_toml(PYTHON_REQUIRES)}",
        f"license = {_toml(LICENSE)}",
        f"dependencies = {_toml_list(meta.requires)}",
        "",
        "[project.optional-dependencies]",
        f"omni = {_toml_list([meta.omni])}",
    ]
    if meta.urls:
        lines += ["", "[project.urls]", *(f"{_toml(label)} = {_toml(url)}" for label, url in meta.urls)]
    lines += [
        "",
        "[tool.setuptools]",
        f"packages = {_toml_list([package])}",
        "include-package-data = false",
        "zip-safe = false",
    ]
    if data_files:
        lines += ["", "[tool.setuptools.package-data]", f"{package} = {_toml_list(data_files)}"]
    return "\n".join(lines) + "\n"


def project_files(meta: WheelMeta, package: str, files: dict[str, bytes]) -> dict[str, bytes]:
    """The generated project: pyproject.toml, README.md and the package."""
    for path in files:
        if path.startswith("/") or ".." in path.split("/") or not path:
            raise QueueError(f"module path {path!r} cannot go into a wheel", path=QUEUE_FILE)
    data_files = sorted(p for p in files if not p.endswith(".py"))
    out = {
        "pyproject.toml": pyproject(meta, package, data_files=data_files).encode("utf-8"),
        "README.md": meta.readme.encode("utf-8"),
    }
    out.update({f"{package}/{path}": data for path, data in files.items()})
    return out


# -- building -------------------------------------------------------------------------------------


def check_backend() -> None:
    """A one-line error when the setuptools the build will use cannot build the wheel."""
    try:
        have = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        raise PqError(
            f"setuptools is not installed in {sys.executable}; `pip install '{BUILD_REQUIRES}'` to build wheels"
        ) from None
    numbers = tuple(int(p) for p in re.findall(r"\d+", have)[:2])
    if numbers < MIN_SETUPTOOLS:
        raise PqError(
            f"setuptools {have} in {sys.executable} cannot build this wheel; `pip install '{BUILD_REQUIRES}'`"
        )


def build_wheel_bytes(project: dict[str, bytes], *, epoch: int) -> tuple[str, bytes]:
    """Build the generated ``project`` with setuptools' PEP 517 backend: (file name, normalised wheel)."""
    check_backend()
    epoch = max(epoch, MIN_EPOCH)
    with tempfile.TemporaryDirectory(prefix="pq-wheel-") as tmp:
        root = Path(tmp) / "project"
        for rel, data in sorted(project.items()):
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        dist = Path(tmp) / "dist"
        dist.mkdir()
        result = Path(tmp) / "wheel-name"
        env = {k: v for k, v in os.environ.items() if k not in ("DIST_EXTRA_CONFIG", "SETUPTOOLS_USE_DISTUTILS")}
        # HOME: no ~/.pydistutils.cfg of the user's
        env.update(SOURCE_DATE_EPOCH=str(epoch), PYTHONDONTWRITEBYTECODE="1", HOME=tmp, PYTHONHASHSEED="0")
        command = [sys.executable, "-c", _BUILD_SCRIPT, str(dist), str(result)]
        proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not result.is_file():
            lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
            raise PqError(f"setuptools could not build the wheel: {lines[-1] if lines else f'exit {proc.returncode}'}")
        name = result.read_text(encoding="utf-8").strip()
        data = (dist / name).read_bytes()
    return name, normalise_wheel(data, epoch=epoch)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def normalise_wheel(data: bytes, *, epoch: int) -> bytes:
    """Rewrite a wheel deterministically: package files then .dist-info, each sorted; one timestamp;
    mode 0644; deflate level 9; RECORD regenerated (and last)."""
    with zipfile.ZipFile(io.BytesIO(data)) as zin:
        entries = {info.filename: zin.read(info) for info in zin.infolist() if not info.is_dir()}
    records = [n for n in entries if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
    if len(records) != 1:
        raise PqError(f"the built wheel has {len(records)} RECORD files, expected 1")
    record = records[0]
    dist_info = record.rsplit("/", 1)[0] + "/"
    del entries[record]
    order = sorted(entries, key=lambda n: (n.startswith(dist_info), n))
    lines = [f"{name},{_record_hash(entries[name])},{len(entries[name])}" for name in order] + [f"{record},,"]
    entries[record] = ("\n".join(lines) + "\n").encode("utf-8")
    order.append(record)
    stamp = time.gmtime(max(epoch, MIN_EPOCH))[:6]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zout:
        for name in order:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.create_system = 3  # unix, so the mode below is read
            info.external_attr = (stat.S_IFREG | WHEEL_MODE) << 16
            zout.writestr(info, entries[name], compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    return buf.getvalue()


# -- the command ----------------------------------------------------------------------------------


def wheel_package_files(data: bytes, package: str) -> dict[str, bytes]:
    """The files of ``package/`` inside a wheel, by their path inside the package."""
    prefix = package + "/"
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename[len(prefix) :]: zf.read(i) for i in zf.infolist() if i.filename.startswith(prefix)}
