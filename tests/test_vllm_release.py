"""The vLLM release a vllm-omni release goes with (:mod:`patch_queue.sources.vllm_release`).

On the real registry (pip's configured index; skipped when it cannot be read): the rule on the real release
lists of vllm and vllm-omni, and ``pq check`` / ``pq sync-gpu`` on a series adopted from the pre-release
vllm-omni 0.32.0rc1, for which no vLLM 0.32.0rc1 exists.  A file:// index (built here from the real 0.32.0rc1
wheel and a release made up for the case) gives a vllm-omni version no vLLM release goes with.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest
from conftest import BASE_030, copy_project, new_project, pq, state
from packaging.version import Version
from test_errors import one_error_line

from patch_queue.errors import SourceError
from patch_queue.sources import archives, registry
from patch_queue.sources.cache import cache_dir
from patch_queue.sources.vllm_release import VLLM, choose, requirement, vllm_release

CORPUS_RELEASES = ("0.14.0", "0.16.0", "0.18.0", "0.20.0", "0.22.0", "0.24.0", "0.30.0")
PRE_RELEASES = ("0.31.0rc1", "0.32.0rc1")
OMNI = "vllm-omni"


def _key(version: str) -> Version:
    return Version(version)


def _major_minor(version: str) -> tuple[int, ...]:
    return _key(version).release[:2]


@pytest.fixture(scope="module")
def vllm_versions() -> list[str]:
    """Every vLLM version on the registry that pq can read."""
    try:
        files = registry.project_files(VLLM)
    except SourceError as exc:
        pytest.skip(f"the package index cannot be read: {exc}")
    return sorted({d.version.text for d in files if registry.pick_file([d]) is not None})


# -- the rule --------------------------------------------------------------------------------


def test_the_rule_on_the_real_release_lists(vllm_versions: list[str]) -> None:
    omni_versions = {d.version.text for d in registry.project_files(OMNI)}
    assert set(CORPUS_RELEASES + PRE_RELEASES) <= omni_versions
    for omni in CORPUS_RELEASES + PRE_RELEASES:
        pinned = archives.fetch_release(OMNI, omni, progress=lambda _: None)
        metadata = archives.archive_members(pinned, f"vllm_omni-{omni}.dist-info/")
        assert requirement(metadata) == "", omni  # no release states a requirement on vllm
        found = vllm_release(OMNI, omni)
        assert found == choose(omni, vllm_versions)
        assert _major_minor(found.version) == _major_minor(omni), found
        if omni in CORPUS_RELEASES:  # what pq always read: the same version, which the registry has
            assert found.version == omni and found.rule == "the same version", found
            continue
        same = [v for v in vllm_versions if _major_minor(v) == _major_minor(omni)]
        finals = [v for v in same if not _key(v).is_prerelease]
        assert omni not in vllm_versions and finals, (omni, same)
        assert found.version == max(finals, key=_key)
        series = ".".join(map(str, _major_minor(omni)))
        assert found.rule == f"no vllm {omni} on the registry; the newest final {series}.x release", found
        assert found.describe() == f"vllm {found.version} (for vllm-omni {omni}: {found.rule})"
    # vllm-omni's own statement of the rule, in the release pq reads it for
    version_py = archives.release_files(OMNI, "0.32.0rc1", "vllm_omni/version.py")["vllm_omni/version.py"]
    assert b"def warn_if_misaligned_vllm_version" in version_py and b"(major.minor)" in version_py


def test_the_rule_where_the_registry_lacks_a_final_release_or_the_release_requires_one() -> None:
    # no final 0.40.x: the newest pre-release, said so
    found = choose("0.40.0rc2", ["0.39.1", "0.40.0rc1", "0.40.0rc3", "0.41.0"])
    assert (found.version, found.rule) == (
        "0.40.0rc3",
        "no final vllm 0.40.x on the registry; the newest 0.40.x pre-release",
    )
    # a final beats a newer-looking pre-release; the exact version beats both
    assert choose("0.40.0rc2", ["0.40.0", "0.40.1rc1"]).version == "0.40.0"
    assert choose("0.40.0rc1", ["0.40.0rc1", "0.40.1"]).rule == "the same version"
    # the release's requirement narrows the candidates, and the rule says so
    found = choose("0.40.0rc2", ["0.40.0", "0.40.1", "0.40.2"], "<0.40.2")
    assert (found.version, found.rule) == (
        "0.40.1",
        "no vllm 0.40.0rc2 on the registry; the newest final 0.40.x release, which its requirement vllm<0.40.2 allows",
    )
    assert choose("1", ["1.0.1", "1.1.0"]).version == "1.0.1"  # "1" is 1.0
    with pytest.raises(SourceError) as none:
        choose("0.34.0rc1", ["0.33.0", "0.35.0"])
    assert none.value.message == (
        "no vLLM release for vllm-omni 0.34.0rc1: it goes with a vLLM 0.34.x release (same major.minor), and the "
        "registry has none (newest vllm there: 0.35.0)"
    )
    with pytest.raises(SourceError, match=r"that its requirement vllm==0\.40\.9 allows, and the registry has none"):
        choose("0.40.0", ["0.40.0"], "==0.40.9")
    with pytest.raises(SourceError, match=r"requires vllm=>1, which is not a version specifier"):
        choose("0.40.0", ["0.40.0"], "=>1")
    with pytest.raises(SourceError, match=r"'x\.y' is not a valid vllm-omni version"):
        choose("x.y", ["0.40.0"])


def test_the_requirement_is_read_from_requires_dist_without_markers() -> None:
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: vllm-omni",
            "Requires-Dist: vllm-ascend>=0.1",
            "Requires-Dist: vllm_omni_extras==1",
            "Requires-Dist: VLLM >=0.34.0,<0.35",
            'Requires-Dist: vllm==0.34.9; extra == "cuda"',
            'Requires-Dist: vllm==0.34.8; python_version < "3.11"',
            "Requires-Dist: vllm",
            "Requires-Dist: not a requirement ((",
        ]
    ).encode()
    assert requirement({"vllm_omni-0.34.0.dist-info/METADATA": metadata}) == "<0.35,>=0.34.0"
    assert requirement({"PKG-INFO": metadata}) == "<0.35,>=0.34.0"
    assert requirement({"vllm_omni/METADATA": metadata, "README.md": metadata}) == ""


def test_the_same_version_pinned_in_the_cache_resolves_without_the_index(
    vllm_versions: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    archives.fetch_release(VLLM, "0.30.0", progress=lambda _: None)  # pinned (from the cache or the registry)

    def offline(name: str) -> list[registry.DistFile]:
        raise AssertionError(f"the index was asked for {name}")

    monkeypatch.setattr(registry, "project_files", offline)
    assert (cache_dir() / "dist" / "vllm==0.30.0.json").is_file()
    assert vllm_release(OMNI, "0.30.0").describe() == "vllm 0.30.0 (for vllm-omni 0.30.0: the same version)"
    with pytest.raises(AssertionError, match="the index was asked for vllm"):  # no vLLM 0.32.0rc1 to pin
        vllm_release(OMNI, "0.32.0rc1")


# -- pq check and pq sync-gpu on a series of vllm-omni 0.32.0rc1 -----------------------------------


@pytest.fixture(scope="module")
def adopted_032(tmp_path_factory: pytest.TempPathFactory, vllm_versions: list[str], corpus: Path) -> Path:
    proj = new_project(tmp_path_factory.mktemp("adopted-032") / "p")
    pq(proj, "adopt", f"{OMNI}==0.32.0rc1", "--at", BASE_030)
    return proj


def _expected_line(vllm_versions: list[str]) -> str:
    found = choose("0.32.0rc1", vllm_versions)
    assert found.version.startswith("0.32.")
    return found.describe()


def test_check_of_a_pre_release_series_reads_the_vllm_it_goes_with(adopted_032: Path, vllm_versions: list[str]) -> None:
    proc = pq(adopted_032, "check", check=None)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1) and "Traceback" not in out, out
    assert "unknown release" not in out and "sources-unavailable" not in out, out
    assert f"Reading vllm-omni 0.32.0rc1 and {_expected_line(vllm_versions)} ...\n" in proc.stderr
    assert "[gpu-unported]" in out  # the GPU audit ran against that vLLM


def test_sync_gpu_of_a_pre_release_series_reads_the_vllm_it_goes_with(
    adopted_032: Path, vllm_versions: list[str], tmp_path: Path
) -> None:
    proj = copy_project(adopted_032, tmp_path / "p")
    proc = pq(proj, "sync-gpu", "--backlog", "--apply", "all")
    assert "unknown release" not in proc.stdout + proc.stderr
    assert f"Reading the GPUModelRunner of {_expected_line(vllm_versions)} ...\n" in proc.stderr
    assert "unported omni GPU change(s) in vllm-omni==0.32.0rc1" in proc.stdout
    assert "sync-gpu" in (proj / "patches" / "series").read_text()


def _wheel(name: str, version: str, files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        wheel.writestr(
            f"{name}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
    return buffer.getvalue()


def _page(root: Path, project: str, files: dict[str, bytes]) -> None:
    (root / "files").mkdir(parents=True, exist_ok=True)
    (root / "simple" / project).mkdir(parents=True)
    links = []
    for filename, data in files.items():
        (root / "files" / filename).write_bytes(data)
        links.append(f'<a href="../../files/{filename}#sha256={hashlib.sha256(data).hexdigest()}">{filename}</a>')
    (root / "simple" / project / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")


def test_sync_gpu_from_a_vllm_omni_version_no_vllm_release_goes_with_is_one_line(
    adopted_032: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = archives.fetch_release(OMNI, "0.32.0rc1", progress=lambda _: None)
    with zipfile.ZipFile(io.BytesIO(real.data)) as wheel:
        gpu = {n: wheel.read(n) for n in wheel.namelist() if n.startswith("vllm_omni/worker/gpu_")}
    index = tmp_path / "index"
    made_up = "vllm_omni-0.34.0rc1-py3-none-any.whl"  # a vllm-omni version after every vLLM release here
    _page(index, OMNI, {real.filename: real.data, made_up: _wheel("vllm_omni", "0.34.0rc1", gpu)})
    _page(index, VLLM, {"vllm-0.33.0-py3-none-any.whl": _wheel("vllm", "0.33.0", {"vllm/__init__.py": b""})})
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{index / 'simple'}")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PQ_CACHE", str(tmp_path / "cache"))  # the made-up release stays out of the session cache
    proj = copy_project(adopted_032, tmp_path / "p")
    before = state(proj)
    proc = pq(proj, "sync-gpu", "--omni", "0.34.0rc1", check=1)
    assert one_error_line(proc) == (
        "pq: error: no vLLM release for vllm-omni 0.34.0rc1: it goes with a vLLM 0.34.x release (same major.minor), "
        "and the registry has none (newest vllm there: 0.33.0)"
    )
    assert state(proj) == before
