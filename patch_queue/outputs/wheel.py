"""``pq build --wheel``: an installable, reproducible wheel of the standalone runner package.

The wheel holds the top of the stack in its ``--standalone`` form (the package is named after
the output folder, ``npu_worker``, and its ``vllm_omni.platforms.npu.worker`` imports point into
itself).  Its version encodes both pins, ``<vllm-omni release>+ascend.<vllm-ascend target>``:

* a registry release upstream (``vllm-ascend==0.30.0rc2``): ``0.30.0+ascend.0.30.0rc2``, and the
  wheel requires exactly that vllm-ascend release;
* a git upstream: ``0.30.0+ascend.g<first 12 of the public commit>``, and the wheel requires
  vllm-ascend by a direct reference to that public commit (``vllm-ascend @ git+https://…@<sha>``);
* a folder upstream: ``+ascend.d<first 12 of the sha256 of the vendored files' digests>``; it requires
  no vllm-ascend (none can be named).

A queue adopted from a folder has no downstream release: its public version is ``0``.

It requires ``vllm-omni==<release>`` (``vllm-omni`` when there is none) and ``torch-npu`` and ``torch``
as the upstream it was built on pins them: a release's own metadata (an sdist's ``PKG-INFO``, a wheel's
``METADATA``), a git commit's ``requirements.txt`` (when the tree holds one); unpinned otherwise.

The wheel is written here, without a build backend: METADATA, WHEEL, the Apache-2.0 LICENSE and a NOTICE
naming the copyright lines of the files the package is made from, RECORD; entries sorted (package files,
then .dist-info, RECORD last), one fixed timestamp derived from the series, fixed file modes, so two builds
of the same series are byte-identical whatever the umask, the build folder or the clock.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import stat
import time
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

import patch_queue
from patch_queue import presets
from patch_queue.errors import QueueError, SourceError
from patch_queue.series.queue import QUEUE_FILE, Queue
from patch_queue.sources.registry import parse_version
from patch_queue.sources.snapshot import Snapshot
from patch_queue.spec import QueueSpec

PYTHON_REQUIRES = ">=3.10"
LICENSE = "Apache-2.0"  # vllm-omni's and vllm-ascend's licence
MIN_EPOCH = 315532800  # 1980-01-01, the earliest time a zip entry can hold
WHEEL_MODE = 0o644
TAG = "py3-none-any"


@dataclass(frozen=True)
class WheelMeta:
    """Everything the wheel says about itself, derived from ``queue.toml``, the series and the upstream."""

    name: str
    version: str
    summary: str
    requires: tuple[str, ...]  # Requires-Dist, in order
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
    return f"{downstream_version(queue)}+{upstream_word(queue.spec)}.{upstream_target(queue)}"


def upstream_word(spec: QueueSpec) -> str:
    """The word of the wheel's local version that names the upstream: the last word of its distribution's name."""
    return local_label(spec.upstream_dist.replace("_", "-").rsplit("-", 1)[-1])


# -- requirements --------------------------------------------------------------------------------


def _requirement_lines(snap: Snapshot) -> tuple[str, list[tuple[int, str]]]:
    """(file, [(line number, requirement)]) the upstream tree states: a release's metadata (its
    ``Requires-Dist`` headers) or ``requirements.txt``; ("", []) when it has neither."""
    metadata = [p for p in snap.list_files("") if p == "PKG-INFO" or re.fullmatch(r"[^/]+\.dist-info/METADATA", p)]
    path = sorted(metadata)[0] if metadata else "requirements.txt" if snap.exists("requirements.txt") else ""
    if not path:
        return "", []
    found: list[tuple[int, str]] = []
    for number, line in enumerate(snap.read(path).decode("utf-8", errors="replace").splitlines(), 1):
        if path != "requirements.txt":
            if not line.strip():
                break  # the headers end at the first empty line
            key, sep, value = line.partition(":")
            if sep and key.strip().lower() == "requires-dist":
                found.append((number, value.strip()))
            continue
        # a comment, and a requirement's own options (--hash=...), are no part of it
        text = re.split(r"(?:^|\s)(?:#|--)", line, maxsplit=1)[0].strip()
        if text and not text.startswith("-"):  # options (-r, --index-url, ...) name no requirement
            found.append((number, text))
    return path, found


def upstream_requirements(snap: Snapshot | None, spec: QueueSpec) -> tuple[str, ...]:
    """The wheel's requirements of the queue ``spec`` (its ``wheel_requires``) as the
    upstream tree requires them: each of its requirements of them (one with an environment marker too; none of an
    extra), in its order; a bare name where it requires none."""
    found: dict[str, list[str]] = {name: [] for name in spec.wheel_requires}
    where, lines = _requirement_lines(snap) if snap is not None else ("", [])
    for number, line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            shown = f"{snap.spec if snap else ''}:{where}"
            raise SourceError(f"{line!r} is not a PEP 508 requirement: {exc}", path=shown, line=number) from None
        name = canonicalize_name(req.name)
        if name in found and "extra" not in str(req.marker or ""):
            req.name = name  # as pip lists it
            found[name].append(str(req))
    return tuple(req for name, reqs in found.items() for req in reqs or [name])


def upstream_text(queue: Queue) -> str:
    """The upstream the series is built on, in words: ``vllm-ascend 0.30.0rc2``, ``... commit <sha>``."""
    name = queue.upstream.name or queue.spec.upstream_dist
    release, commit = upstream_release(queue), upstream_commit(queue)
    return f"{name} {release}" if release else f"{name} commit {commit}" if commit else f"{name} from a folder"


def wheel_meta(queue: Queue, *, package: str, patches: list[str], pinned: Iterable[str] | None = None) -> WheelMeta:
    """The wheel's metadata; ``pinned``: the requirements :func:`upstream_requirements` read (None: the queue's
    ``wheel_requires``, bare)."""
    spec = queue.spec
    version = wheel_version(queue)
    up_name = queue.upstream.name or spec.upstream_dist
    down_name = queue.downstream_name or spec.downstream_dist
    release = upstream_release(queue)
    commit = upstream_commit(queue)
    requires = list(spec.wheel_requires if pinned is None else pinned)
    urls: list[tuple[str, str]] = []
    if release is not None:
        requires.append(f"{up_name}=={release}")
        upstream_line = f"{up_name} release {release}"
    elif commit is not None:
        requires.append(f"{up_name} @ git+{spec.upstream_git}@{commit}")
        if spec.upstream_url:
            urls.append((f"{up_name} commit", f"{spec.upstream_url}/commit/{commit}"))
        upstream_line = f"{up_name} git commit {commit} (a direct reference: no release holds it)"
    else:
        upstream_line = f"{up_name} from a folder (vendored files {upstream_target(queue)[1:]}; not required)"
    down_release = queue.downstream_release.strip()
    requires.append(f"{down_name}=={downstream_version(queue)}" if down_release else down_name)
    summary = (
        f"{down_name}'s {presets.runner_kind(spec)} as the standalone package {package}, "
        f"replayed onto {up_name} {release or (commit[:12] if commit else 'from a folder')}"
    )
    readme = "\n".join(
        [
            f"# {spec.wheel} {version}",
            "",
            f"{down_name}'s {presets.runner_kind(spec)} (`{queue.package}/`) as the standalone package `{package}`",
            f"(its `{queue.package.replace('/', '.')}` imports point into `{package}`), built by `pq build --wheel`",
            "from the patch series below.",
            "",
            f"- {down_name}: {down_release or '(adopted from a folder: no release)'}",
            f"- {upstream_line}",
            "- requires: " + ", ".join(f"`{r}`" for r in requires),
            f"- series: {len(patches)} patches",
            "",
            *(f"  - `{name}`" for name in patches),
            "",
        ]
    )
    return WheelMeta(spec.wheel, version, summary, tuple(requires), tuple(urls), readme)


# -- licence and notice --------------------------------------------------------------------------

_COPYRIGHT = re.compile(r"#\s*(?:SPDX-FileCopyrightText:\s*)?(Copyright\b.*?)\s*")


def copyright_lines(files: dict[str, bytes]) -> list[str]:
    """The copyright lines of the files' leading comment blocks, each once, in the order of the sorted paths."""
    seen: dict[str, None] = {}
    for path in sorted(files):
        for line in files[path].decode("utf-8", errors="replace").splitlines():
            text = line.strip()
            if text and not text.startswith("#"):
                break
            found = _COPYRIGHT.fullmatch(text)
            if found:
                seen.setdefault(found.group(1))
    return list(seen)


def notice(queue: Queue, meta: WheelMeta, package: str, modules: dict[str, bytes], vendored: dict[str, bytes]) -> str:
    """NOTICE: what the package is made of, and the copyright lines its sources carry."""
    down = (
        f"{queue.downstream_name or queue.spec.downstream_dist} {queue.downstream_release.strip() or '(from a folder)'}"
    )
    up = upstream_text(queue)
    lines = [
        f"{meta.name} {meta.version}",
        "",
        f"The package {package} is {queue.package}/ of {down}",
        f"with methods of {up} in it, replayed by the patch series of pq.",
        "Both projects are licensed under the Apache License, Version 2.0 (LICENSE).",
    ]
    for what, files in ((f"{down}, {queue.package}/", modules), (f"{up}, " + ", ".join(sorted(vendored)), vendored)):
        held = copyright_lines(files)
        lines += ["", f"{what}:", *(f"    {line}" for line in held or ["(its file headers name no copyright holder)"])]
    return "\n".join(lines) + "\n"


def license_text() -> bytes:
    return resources.files("patch_queue.outputs").joinpath("apache-2.0.txt").read_bytes()


# -- writing ------------------------------------------------------------------------------------


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def dist_info(meta: WheelMeta) -> str:
    return f"{re.sub(r'[-_.]+', '_', meta.name).lower()}-{meta.version}.dist-info"


def wheel_name(meta: WheelMeta) -> str:
    return f"{re.sub(r'[-_.]+', '_', meta.name).lower()}-{meta.version}-{TAG}.whl"


def metadata_file(meta: WheelMeta) -> str:
    """METADATA (core metadata 2.4)."""
    headers = [
        ("Metadata-Version", "2.4"),
        ("Name", meta.name),
        ("Version", meta.version),
        ("Summary", meta.summary),
        *(("Project-URL", f"{label}, {url}") for label, url in meta.urls),
        ("License-Expression", LICENSE),
        ("License-File", "LICENSE"),
        ("License-File", "NOTICE"),
        ("Requires-Python", PYTHON_REQUIRES),
        ("Description-Content-Type", "text/markdown"),
        *(("Requires-Dist", req) for req in meta.requires),
    ]
    for key, value in headers:
        if "\n" in value or "\r" in value:
            raise QueueError(f"the wheel's {key} {value!r} holds a line break", path=QUEUE_FILE)
    return "".join(f"{key}: {value}\n" for key, value in headers) + "\n" + meta.readme


def wheel_file() -> str:
    return f"Wheel-Version: 1.0\nGenerator: pq {patch_queue.__version__}\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def wheel_entries(meta: WheelMeta, package: str, files: dict[str, bytes], notice_text: str) -> dict[str, bytes]:
    """Every file of the wheel but RECORD, by its name in the zip."""
    for path in files:
        if path.startswith("/") or ".." in path.split("/") or not path:
            raise QueueError(f"module path {path!r} cannot go into a wheel", path=QUEUE_FILE)
    info = dist_info(meta)
    entries = {f"{package}/{path}": data for path, data in files.items()}
    entries[f"{info}/METADATA"] = metadata_file(meta).encode("utf-8")
    entries[f"{info}/WHEEL"] = wheel_file().encode("utf-8")
    entries[f"{info}/licenses/LICENSE"] = license_text()
    entries[f"{info}/licenses/NOTICE"] = notice_text.encode("utf-8")
    return entries


def write_wheel(entries: dict[str, bytes], info: str, *, epoch: int) -> bytes:
    """The zip: package files then ``info``/ (.dist-info), each sorted, RECORD last; one timestamp; mode 0644;
    deflate level 9."""
    record = f"{info}/RECORD"
    order = sorted(entries, key=lambda n: (n.startswith(info + "/"), n))
    lines = [f"{name},{_record_hash(entries[name])},{len(entries[name])}" for name in order] + [f"{record},,"]
    entries = {**entries, record: ("\n".join(lines) + "\n").encode("utf-8")}
    order.append(record)
    stamp = time.gmtime(max(epoch, MIN_EPOCH))[:6]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zout:
        for name in order:
            zinfo = zipfile.ZipInfo(name, date_time=stamp)
            zinfo.create_system = 3  # unix, so the mode below is read
            zinfo.external_attr = (stat.S_IFREG | WHEEL_MODE) << 16
            zout.writestr(zinfo, entries[name], compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    return buf.getvalue()


def build_wheel_bytes(
    meta: WheelMeta, package: str, files: dict[str, bytes], *, notice_text: str, epoch: int
) -> tuple[str, bytes]:
    """(file name, bytes) of the wheel of ``files`` (the package's, by their path inside it)."""
    return wheel_name(meta), write_wheel(wheel_entries(meta, package, files, notice_text), dist_info(meta), epoch=epoch)


def wheel_package_files(data: bytes, package: str) -> dict[str, bytes]:
    """The files of ``package/`` inside a wheel, by their path inside the package."""
    prefix = package + "/"
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {i.filename[len(prefix) :]: zf.read(i) for i in zf.infolist() if i.filename.startswith(prefix)}
