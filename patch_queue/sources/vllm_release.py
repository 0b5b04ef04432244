"""The vLLM release a vllm-omni release goes with: what the GPU audit, ``pq check`` and ``pq sync-gpu`` read.

vllm-omni's own rule (``vllm_omni/version.py``, ``warn_if_misaligned_vllm_version``, from 0.20.0 on) is that the
major.minor of vllm-omni and vLLM match; no release up to 0.32.0rc1 requires vllm in its metadata.  For vllm-omni
``X`` pq reads (:func:`choose`):

1. vLLM ``X`` itself when the registry has it (every final vllm-omni release so far; what pq always read);
2. else the newest final vLLM release of ``X``'s major.minor (vllm-omni 0.32.0rc1 -> vLLM 0.32.x);
3. else the newest pre-release of that major.minor.

Where the release's metadata requires vllm (a ``Requires-Dist`` without a marker), only the versions it allows
are candidates.  No candidate is a :class:`SourceError` naming both.  When vLLM ``X`` is already pinned in the
cache and allowed, the index is not asked (:func:`vllm_release`), so a release read once resolves offline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass

from patch_queue.errors import SourceError
from patch_queue.progress import Progress
from patch_queue.sources import archives, registry
from patch_queue.sources.cache import cache_dir

VLLM = "vllm"


@dataclass(frozen=True)
class VllmRelease:
    """The vLLM release ``version`` chosen for vllm-omni ``omni``, and by which ``rule``."""

    version: str
    omni: str
    rule: str

    def describe(self) -> str:
        return f"vllm {self.version} (for vllm-omni {self.omni}: {self.rule})"


def requirement(metadata: Mapping[str, bytes]) -> str:
    """The specifier a release's metadata (``*.dist-info/METADATA`` or an sdist's ``PKG-INFO``) puts on vllm
    (``Requires-Dist`` lines without a marker, joined by commas); "" when it puts none."""
    from packaging.requirements import InvalidRequirement, Requirement

    found: list[str] = []
    for path, data in sorted(metadata.items()):
        if not (path == "PKG-INFO" or path.endswith(".dist-info/METADATA")):
            continue
        for line in data.decode("utf-8", errors="replace").splitlines():
            key, _sep, value = line.partition(":")
            if key.strip().lower() != "requires-dist":
                continue
            try:
                req = Requirement(value.strip())
            except InvalidRequirement:
                continue
            if registry.normalize_name(req.name) == VLLM and req.marker is None and str(req.specifier):
                found.append(str(req.specifier))
    return ",".join(found)


def choose(omni: str, available: Iterable[str], required: str = "") -> VllmRelease:
    """The vLLM release for vllm-omni ``omni`` among the versions ``available`` on the registry, by the rule of
    this module; ``required``: the release's specifier on vllm ("" for none)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    parsed = registry.parse_version(omni)
    if parsed is None:
        raise SourceError(f"'{omni}' is not a valid vllm-omni version")
    try:
        allows = SpecifierSet(required)
    except InvalidSpecifier:
        raise SourceError(f"vllm-omni {omni} requires vllm{required}, which is not a version specifier") from None
    major_minor = (*parsed.key.release, 0)[:2]  # "1" is 1.0
    series = f"{major_minor[0]}.{major_minor[1]}"
    versions = sorted({v for text in available if (v := registry.parse_version(text))}, key=lambda v: v.key)
    candidates = [
        v for v in versions if (*v.key.release, 0)[:2] == major_minor and allows.contains(v.key, prereleases=True)
    ]
    allowed = f", which its requirement vllm{required} allows" if required else ""
    exact = [v for v in candidates if v.key == parsed.key]
    finals = [v for v in candidates if not v.key.is_prerelease]
    if exact:
        return VllmRelease(exact[0].text, parsed.text, "the same version")
    if finals:
        rule = f"no vllm {parsed.text} on the registry; the newest final {series}.x release{allowed}"
        return VllmRelease(finals[-1].text, parsed.text, rule)
    if candidates:
        rule = f"no final vllm {series}.x on the registry; the newest {series}.x pre-release{allowed}"
        return VllmRelease(candidates[-1].text, parsed.text, rule)
    newest = f"newest vllm there: {versions[-1].text}" if versions else "no vllm release there"
    needs = f" that its requirement vllm{required} allows" if required else ""
    raise SourceError(
        f"no vLLM release for vllm-omni {parsed.text}: it goes with a vLLM {series}.x release (same major.minor)"
        f"{needs}, and the registry has none ({newest})"
    )


def vllm_release(omni_name: str, omni: str, progress: Progress | None = None) -> VllmRelease:
    """The vLLM release vllm-omni ``omni_name==omni`` goes with (:func:`choose` on the registry's vLLM releases and
    the release's own requirement on vllm)."""
    pinned = archives.fetch_release(omni_name, omni, progress)
    meta = archives.archive_members(pinned, "PKG-INFO") if pinned.filename.endswith(".tar.gz") else {}
    if not meta:
        dist_info = f"{pinned.filename.partition('-')[0]}-"
        meta = {k: v for k, v in archives.archive_members(pinned, dist_info).items() if k.endswith("/METADATA")}
    required = requirement(meta)
    if (cache_dir() / "dist" / f"{VLLM}=={pinned.version}.json").is_file():
        with suppress(SourceError):  # vLLM X was read before (and is allowed): no index needed
            return choose(pinned.version, [pinned.version], required)
    files = registry.project_files(VLLM)
    return choose(pinned.version, [d.version.text for d in files if registry.pick_file([d]) is not None], required)
