"""`pq build --wheel`: an installable, byte-reproducible wheel of the standalone runner package."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest
from conftest import BASE_030, copy_project, new_project, pq

from patch_queue.errors import QueueError
from patch_queue.fsutil import read_folder
from patch_queue.outputs import wheel
from patch_queue.series.queue import Queue, UpstreamPin

PUBLIC_030 = "cf0baa38dfb2aef4faf6baaaa97beb4ac974ae35"  # the public commit of BASE_030
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
    # a git pin: no vllm-ascend requirement (no release holds the commit); the commit is recorded instead
    assert meta.get_all("Requires-Dist") == ["torch-npu", 'vllm-omni; extra == "omni"']
    assert meta.get_all("Provides-Extra") == ["omni"]
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


def test_wheel_of_the_registry_adopt(corpus: Path, tmp_path: Path) -> None:
    """`pq adopt vllm-omni==0.30.0`: the release is recorded, so it is the public version and the omni pin."""
    proj = new_project(tmp_path / "p")
    pq(proj, "adopt", "vllm-omni==0.30.0", "--at", BASE_030)
    assert 'release = "0.30.0"' in (proj / "patches" / "queue.toml").read_text()
    printed = pq(proj, "build", "--wheel").stdout.strip()
    assert printed == "dist/vllm_omni_npu_worker-0.30.0+ascend.gcf0baa38dfb2-py3-none-any.whl"  # default dist/
    whl = proj / printed
    meta = metadata(whl)
    assert meta["Version"] == "0.30.0+ascend.gcf0baa38dfb2"
    assert meta.get_all("Requires-Dist") == ["torch-npu", 'vllm-omni==0.30.0; extra == "omni"']
    assert meta.get_all("Provides-Extra") == ["omni"]
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
    meta = wheel.wheel_meta(queue, package=PACKAGE, patches=["0001-init.patch"])
    assert meta.version == "0.30.0+ascend.0.30.0rc2"
    assert meta.requires == ("vllm-ascend==0.30.0rc2", "torch-npu") and meta.urls == ()
    files = {"__init__.py": b"", "runner.py": b"from npu_worker import base\n", "base.py": b"X = 1\n"}
    project = wheel.project_files(meta, PACKAGE, files)
    name, data = wheel.build_wheel_bytes(project, epoch=1_700_000_000)
    assert name == "vllm_omni_npu_worker-0.30.0+ascend.0.30.0rc2-py3-none-any.whl"
    assert wheel.build_wheel_bytes(project, epoch=1_700_000_000) == (name, data)
    whl = tmp_path / name
    whl.write_bytes(data)
    meta_file = metadata(whl)
    assert meta_file.get_all("Requires-Dist") == [
        "vllm-ascend==0.30.0rc2",
        "torch-npu",
        'vllm-omni==0.30.0; extra == "omni"',
    ]
    assert meta_file.get_all("Provides-Extra") == ["omni"] and meta_file.get_all("Project-URL") is None
    assert package_files(whl) == files
    with zipfile.ZipFile(whl) as zf:
        infos = zf.infolist()
        assert {i.date_time for i in infos} == {(2023, 11, 14, 22, 13, 20)}
        assert {i.external_attr >> 16 for i in infos} == {0o100644}
        assert infos[-1].filename.endswith(".dist-info/RECORD")
    pip_install(whl, tmp_path / "site")
    assert (tmp_path / "site" / PACKAGE / "runner.py").read_bytes() == files["runner.py"]
