"""`pq build --wheel`: an installable, byte-reproducible wheel of the standalone runner package."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest
from conftest import copy_project, new_project, pq

from patch_queue import presets
from patch_queue.errors import QueueError, SourceError
from patch_queue.fsutil import read_folder
from patch_queue.outputs import wheel
from patch_queue.series.queue import Queue, UpstreamPin
from patch_queue.sources import archives
from patch_queue.sources.snapshot import dir_snapshot, release_snapshot

PUBLIC_030 = "cf0baa38dfb2aef4faf6baaaa97beb4ac974ae35"  # the public commit of BASE_030
GIT_REQUIREMENT = f"vllm-ascend @ git+https://github.com/vllm-project/vllm-ascend.git@{PUBLIC_030}"
ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "npu_worker"


def metadata(whl: Path) -> Message:
    with zipfile.ZipFile(whl) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(zf.read(name).decode("utf-8"))


def package_files(whl: Path) -> dict[str, bytes]:
    return wheel.wheel_package_files(whl.read_bytes(), PACKAGE)


def build_wheel(proj: Path, out: Path | None) -> Path:
    args = ["build", "--wheel"] + (["--out", str(out)] if out is not None else [])
    printed = pq(proj, *args).stdout.strip().splitlines()
    assert len(printed) == 1, printed
    path = Path(printed[0])
    return path if path.is_absolute() else proj / path


def standalone_build(proj: Path, tmp: Path) -> dict[str, bytes]:
    out = tmp / "standalone" / PACKAGE  # the package is named after the output folder
    pq(proj, "build", "--standalone", "--out", str(out))
    return {k: v for k, v in read_folder(out).items() if k != ".pq-build"}


def twine_check(whl: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(whl)], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "PASSED" in proc.stdout, proc.stdout + proc.stderr


def pip_install(whl: Path, target: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            "--target",
            str(target),
            str(whl),
        ],
        check=True,
        capture_output=True,
        text=True,
    )


# -- the real 0.30.0 adopts -----------------------------------------------------------------------


def test_wheel_of_the_folder_adopt(adopted_030: Path, tmp_path: Path) -> None:
    """A folder adopt records no downstream release: the public version is 0, the omni extra is unpinned."""
    proj = copy_project(adopted_030, tmp_path / "p")
    queue = (proj / "patches" / "queue.toml").read_text()
    assert 'release = ""' in queue and 'kind = "git"' in queue and PUBLIC_030 in queue
    worker_before = read_folder(proj / "npu_worker")
    whl = build_wheel(proj, tmp_path / "d1")
    assert whl == tmp_path / "d1" / "vllm_omni_npu_worker-0+ascend.gcf0baa38dfb2-py3-none-any.whl"
    meta = metadata(whl)
    assert meta["Name"] == "vllm-omni-npu-worker"
    assert meta["Version"] == "0+ascend.gcf0baa38dfb2"
    assert meta["Requires-Python"] == ">=3.10"
    # a git pin: vllm-ascend by a direct reference to the public commit; the corpus' mirror of vllm-ascend holds
    # vllm_ascend/ only (no requirements.txt), so torch-npu and torch are unpinned; vllm-omni itself is required
    assert meta.get_all("Requires-Dist") == ["torch-npu", "torch", GIT_REQUIREMENT, "vllm-omni"]
    assert meta.get_all("Provides-Extra") is None
    assert meta.get_all("Project-URL") == [
        f"vllm-ascend commit, https://github.com/vllm-project/vllm-ascend/commit/{PUBLIC_030}"
    ]
    assert PUBLIC_030 in meta.get_payload()
    # the package is the --standalone build, byte for byte; npu_worker/ is not touched
    files = package_files(whl)
    assert files == standalone_build(proj, tmp_path)
    assert sorted(files) == sorted(p.name for p in (adopted_030 / "npu_worker").glob("*.py"))
    assert b"from vllm_omni.platforms.npu.worker" not in b"".join(files.values())
    assert b"from npu_worker" in b"".join(files.values())
    assert read_folder(proj / "npu_worker") == worker_before
    # installs without network, and the installed files are the package
    target = tmp_path / "site"
    pip_install(whl, target)
    for rel, data in files.items():
        assert (target / PACKAGE / rel).read_bytes() == data, rel
    assert (target / "vllm_omni_npu_worker-0+ascend.gcf0baa38dfb2.dist-info" / "METADATA").is_file()
    # a second build is byte-identical
    again = build_wheel(proj, tmp_path / "d2")
    assert again.name == whl.name and again.read_bytes() == whl.read_bytes()


def test_wheel_of_the_registry_adopt(released_030_once: Path, tmp_path: Path) -> None:
    """`pq adopt vllm-omni==0.30.0` (the session's, copied): the release is recorded, so it is the public version
    and the omni pin."""
    proj = copy_project(released_030_once, tmp_path / "p")
    assert 'release = "0.30.0"' in (proj / "patches" / "queue.toml").read_text()
    printed = pq(proj, "build", "--wheel").stdout.strip()
    assert printed == "dist/vllm_omni_npu_worker-0.30.0+ascend.gcf0baa38dfb2-py3-none-any.whl"  # default dist/
    whl = proj / printed
    meta = metadata(whl)
    assert meta["Version"] == "0.30.0+ascend.gcf0baa38dfb2"
    assert meta.get_all("Requires-Dist") == ["torch-npu", "torch", GIT_REQUIREMENT, "vllm-omni==0.30.0"]
    assert meta.get_all("Provides-Extra") is None
    assert package_files(whl) == standalone_build(proj, tmp_path)
    target = tmp_path / "site"
    pip_install(whl, target)
    assert sorted(p.name for p in (target / PACKAGE).glob("*.py")) == sorted(package_files(whl))


# -- errors ---------------------------------------------------------------------------------------


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("pq: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_refresh_in_progress_or_nothing_built(adopted_030: Path, tmp_path: Path) -> None:
    proj = copy_project(adopted_030, tmp_path / "p")
    state = proj / ".git" / "pq" / "refresh.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{}\n")
    line = one_error_line(pq(proj, "build", "--wheel", "--out", str(tmp_path / "d"), check=1))
    assert "a refresh is in progress" in line, line
    state.unlink()
    pq(proj, "pop", "--all")
    line = one_error_line(pq(proj, "build", "--wheel", "--out", str(tmp_path / "d"), check=1))
    assert "nothing built" in line and "pq push --all" in line, line
    pq(proj, "push")
    line = one_error_line(pq(proj, "build", "--wheel", "--out", str(tmp_path / "d"), check=1))
    assert "only 1 of" in line, line
    assert not (tmp_path / "d").exists()
    empty = new_project(tmp_path / "empty")
    line = one_error_line(pq(empty, "build", "--wheel", check=1))
    assert "no queue here" in line, line


# -- version and metadata, without the corpus -----------------------------------------------------


def make_queue(
    kind: str, spec: str, *, release: str = "0.30.0", public_commit: str = "", files: dict[str, str] | None = None
) -> Queue:
    pin = UpstreamPin("vllm-ascend", kind, spec, "", "label", public_commit, files or {})
    return Queue(pin, "vllm-omni", release, "vllm_omni/platforms/npu/worker", ())


def test_versions() -> None:
    assert wheel.wheel_version(make_queue("release", "vllm-ascend==0.30.0rc2")) == "0.30.0+ascend.0.30.0rc2"
    assert wheel.wheel_version(make_queue("release", "vllm-ascend==0.30.0RC2", release="")) == "0+ascend.0.30.0rc2"
    assert wheel.wheel_version(make_queue("release", "vllm-ascend==1!0.9.0-post1")) == "0.30.0+ascend.1.0.9.0.post1"
    git_queue = make_queue("git", PUBLIC_030, public_commit=PUBLIC_030)
    assert wheel.wheel_version(git_queue) == "0.30.0+ascend.gcf0baa38dfb2"
    dir_queue = make_queue("dir", "dir:/somewhere", files={"vllm_ascend/worker/model_runner_v1.py": "ab" * 32})
    target = wheel.wheel_version(dir_queue).split("+ascend.")[1]
    assert target.startswith("d") and len(target) == 13
    assert wheel.local_label("V0.30.0_rc-2") == "v0.30.0.rc.2"
    with pytest.raises(QueueError):
        wheel.wheel_version(make_queue("release", "vllm-ascend==0.30.0", release="not a version"))
    with pytest.raises(QueueError):
        wheel.wheel_version(make_queue("release", "vllm-ascend==0.30.0", release="0.30.0+local"))


def test_release_pin_wheel_requires_the_release(tmp_path: Path) -> None:
    """A registry-release upstream: the wheel pins vllm-ascend to it; built twice, byte-identical."""
    queue = make_queue("release", "vllm-ascend==0.30.0rc2")
    pinned = ("torch-npu==2.10.0.post4", "torch==2.10.0")
    meta = wheel.wheel_meta(queue, package=PACKAGE, patches=["0001-init.patch"], pinned=pinned)
    assert meta.version == "0.30.0+ascend.0.30.0rc2"
    assert meta.requires == (*pinned, "vllm-ascend==0.30.0rc2", "vllm-omni==0.30.0") and meta.urls == ()
    files = {"__init__.py": b"", "runner.py": b"from npu_worker import base\n", "base.py": b"X = 1\n"}
    name, data = wheel.build_wheel_bytes(meta, PACKAGE, files, notice_text="N\n", epoch=1_700_000_000)
    assert name == "vllm_omni_npu_worker-0.30.0+ascend.0.30.0rc2-py3-none-any.whl"
    assert wheel.build_wheel_bytes(meta, PACKAGE, files, notice_text="N\n", epoch=1_700_000_000) == (name, data)
    whl = tmp_path / name
    whl.write_bytes(data)
    meta_file = metadata(whl)
    assert meta_file.get_all("Requires-Dist") == [*pinned, "vllm-ascend==0.30.0rc2", "vllm-omni==0.30.0"]
    assert meta_file.get_all("Provides-Extra") is None and meta_file.get_all("Project-URL") is None
    assert (
        meta_file.get_all("License-File") == ["LICENSE", "NOTICE"] and meta_file["License-Expression"] == "Apache-2.0"
    )
    assert package_files(whl) == files
    info = "vllm_omni_npu_worker-0.30.0+ascend.0.30.0rc2.dist-info"
    with zipfile.ZipFile(whl) as zf:
        infos = zf.infolist()
        assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}
        assert {i.external_attr >> 16 for i in infos} == {0o100644}
        assert [i.filename for i in infos] == [
            *(f"{PACKAGE}/{n}" for n in sorted(files)),
            f"{info}/METADATA",
            f"{info}/WHEEL",
            f"{info}/licenses/LICENSE",
            f"{info}/licenses/NOTICE",
            f"{info}/RECORD",
        ]
        assert zf.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
        assert zf.read(f"{info}/licenses/NOTICE") == b"N\n"
        record = zf.read(f"{info}/RECORD").decode().splitlines()
    assert len(record) == len(infos) and record[-1] == f"{info}/RECORD,,"
    twine_check(whl)
    pip_install(whl, tmp_path / "site")
    assert (tmp_path / "site" / PACKAGE / "runner.py").read_bytes() == files["runner.py"]
    # the installed distribution's RECORD is what pip checked each file against
    assert (tmp_path / "site" / info / "licenses" / "NOTICE").read_bytes() == b"N\n"


def test_apache_license_is_vllm_omnis(corpus: Path, pq_cache: Path) -> None:
    """The LICENSE pq puts into the wheel (and its own, at the root) is the text vllm-omni's release ships."""
    pinned = archives.fetch_release("vllm-omni", "0.30.0", None)
    shipped = archives.archive_members(pinned, "vllm_omni-0.30.0.dist-info/licenses/LICENSE")
    assert list(shipped.values()) == [(ROOT / "LICENSE").read_bytes()] == [wheel.license_text()]


# -- the requirements the upstream pins -----------------------------------------------------------


def test_pins_read_from_a_release_metadata_or_requirements(tmp_path: Path) -> None:
    tree = tmp_path / "up"
    (tree / "vllm_ascend").mkdir(parents=True)
    assert wheel.upstream_requirements(dir_snapshot(tree, spec=presets.NPU), spec=presets.NPU) == (
        "torch-npu",
        "torch",
    )  # nothing states them
    assert wheel.upstream_requirements(None, spec=presets.NPU) == ("torch-npu", "torch")
    (tree / "requirements.txt").write_text(
        "# the build\n-r requirements-dev.txt\n--extra-index-url https://example.invalid/simple\n"
        "Torch_NPU == 2.9.0.post1  # the Ascend adapter\ntorch==2.9.0 --hash=sha256:00\n"
        "torch==2.8.0; platform_machine == 'aarch64'\nnumpy\n"
    )
    # names canonicalised, comments and options skipped; a requirement with a marker is one too, with its marker
    assert wheel.upstream_requirements(dir_snapshot(tree, spec=presets.NPU), spec=presets.NPU) == (
        "torch-npu==2.9.0.post1",
        "torch==2.9.0",
        'torch==2.8.0; platform_machine == "aarch64"',
    )
    # a release's metadata comes first: its Requires-Dist headers (none of an extra), none of its description
    (tree / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: vllm-ascend\nRequires-Dist: torch==2.10.0\n"
        "Requires-Dist: torch-npu==2.10.0.post4\nRequires-Dist: torch-npu==9; extra == 'dev'\n"
        "\nRequires-Dist: torch==0.1\n"
    )
    assert wheel.upstream_requirements(dir_snapshot(tree, spec=presets.NPU), spec=presets.NPU) == (
        "torch-npu==2.10.0.post4",
        "torch==2.10.0",
    )
    (tree / "PKG-INFO").write_text("Name: vllm-ascend\nRequires-Dist: torch ==\n")
    with pytest.raises(SourceError) as err:
        wheel.upstream_requirements(dir_snapshot(tree, spec=presets.NPU), spec=presets.NPU)
    assert str(err.value).startswith(f"dir:{tree.resolve()}:PKG-INFO:2: 'torch ==' is not a PEP 508 requirement")


def test_pins_of_vllm_ascend_0_30_0rc2(pq_cache: Path) -> None:
    """The real release: its sdist's PKG-INFO pins torch and torch-npu (a 20 MB download when not cached)."""
    try:
        snap = release_snapshot("vllm-ascend", "0.30.0rc2")
    except SourceError as exc:
        pytest.skip(f"package registry unreachable: {exc}")
    assert wheel.upstream_requirements(snap, spec=presets.NPU) == ("torch-npu==2.10.0.post4", "torch==2.10.0")


def _header_copyrights(text: str) -> set[str]:
    """The ``Copyright ...`` lines of a source file's leading comment block, read here from the real file (the
    test quotes no one's header)."""
    found = set()
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        m = re.fullmatch(r"#\s*(?:SPDX-FileCopyrightText:\s*)?(Copyright\b.*?)\s*", line)
        if m:
            found.add(m.group(1))
    return found


def test_notice_names_the_copyright_lines_of_the_sources(adopted_030: Path, tmp_path: Path) -> None:
    """NOTICE: the copyright lines of the real vllm-omni modules and of the vendored vllm-ascend file, each under
    the sources it comes from."""
    proj = copy_project(adopted_030, tmp_path / "p")
    vendored = subprocess.run(
        ["git", "show", "refs/pq/base:.pq-upstream/vllm_ascend/worker/model_runner_v1.py"],
        cwd=proj, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    ascend = _header_copyrights(vendored)
    omni = set().union(*(_header_copyrights(p.read_text()) for p in (proj / "npu_worker").glob("*.py")))
    assert ascend and omni and not ascend & omni  # the real sources name different holders
    whl = build_wheel(proj, tmp_path / "d")
    with zipfile.ZipFile(whl) as zf:
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
        notice = zf.read(f"{info}/licenses/NOTICE").decode()
        assert zf.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    omni_part, _, ascend_part = notice.partition(f"\nvllm-ascend commit {PUBLIC_030}, vllm_ascend/worker/")
    assert ascend_part.startswith("model_runner_v1.py:\n"), notice  # the vendored file
    assert all(f"    {line}\n" in omni_part for line in omni), notice
    assert all(f"    {line}\n" in ascend_part for line in ascend), notice
    assert not any(line in omni_part for line in ascend), notice
    twine_check(whl)


# -- docs/using-npu-worker.md against the built package -------------------------------------------

DOC = ROOT / "docs" / "using-npu-worker.md"


def classes_defined(files: dict[str, bytes], package: str) -> set[str]:
    """``package.module.Class`` for every top-level class of the package's modules."""
    found = set()
    for path, data in files.items():
        if path.endswith(".py"):
            module = f"{package}.{path[: -len('.py')].replace('/', '.')}".removesuffix(".__init__")
            tree = ast.parse(data, filename=path)
            found |= {f"{module}.{node.name}" for node in tree.body if isinstance(node, ast.ClassDef)}
    return found


def test_the_doc_names_classes_the_built_package_defines(adopted_030: Path, tmp_path: Path) -> None:
    """Every worker or runner class docs/using-npu-worker.md names (its `worker_cls` values, the model runners, the
    platform's default classes of the in-tree form) is a class of the built package; the package's modules import
    each other through `npu_worker`, never through vllm_omni.platforms.npu.worker."""
    files = package_files(build_wheel(copy_project(adopted_030, tmp_path / "p"), tmp_path / "d"))
    own = {p[: -len(".py")] for p in files if p.endswith(".py")}
    sibling_imports = 0
    for path, data in files.items():
        for node in ast.walk(ast.parse(data, filename=path)):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                assert not name.startswith("vllm_omni.platforms.npu.worker"), f"{path}:{node.lineno}: {name}"
                if name.startswith(f"{PACKAGE}."):
                    assert name.split(".")[1] in own, f"{path}:{node.lineno}: {name}"
                    sibling_imports += 1
    assert sibling_imports >= 5
    defined = classes_defined(files, PACKAGE)
    doc = DOC.read_text(encoding="utf-8")
    worker_cls = re.findall(r"^\s*worker_cls: (\S+)$", doc, re.M)
    assert worker_cls == [
        "npu_worker.npu_ar_worker.NPUARWorker",
        "npu_worker.npu_generation_worker.NPUGenerationWorker",
    ]
    named = set(re.findall(r"`(npu_worker(?:\.\w+)+)`", doc)) | set(worker_cls)
    assert len(named) >= 4
    for qualname in sorted(named):
        assert qualname in defined, f"{DOC.name} names {qualname}, which the built package does not define"
    # the in-tree form: the platform's defaults that the doc names are the same classes under vllm-omni's name
    in_tree = set(re.findall(r"`vllm_omni\.platforms\.npu\.worker((?:\.\w+)+)`", doc))
    assert in_tree and {f"{PACKAGE}{rest}" for rest in in_tree} <= defined
