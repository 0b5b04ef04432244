"""Set-up (issue 15, part 5): main.sh says how to put pq on PATH; offline, the error names PQ_UPSTREAM_GIT."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from email.parser import HeaderParser
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from patch_queue.errors import SourceError
from patch_queue.sources import archives

ROOT = Path(__file__).resolve().parents[1]


def _main_sh_with_fake_pq(folder: Path, fake_pq: str) -> None:
    """``folder`` with this repository's main.sh and a stand-in setup.sh that installs ``fake_pq`` as pq."""
    (folder / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "main.sh", folder / "scripts" / "main.sh")
    (folder / "scripts" / "setup.sh").write_text(
        f"mkdir -p .venv/bin\ncat > .venv/bin/pq <<'EOF'\n{fake_pq}EOF\nchmod +x .venv/bin/pq\n"
    )


def test_main_sh_prints_how_to_put_pq_on_path(tmp_path: Path) -> None:
    # a stand-in setup.sh and pq: what is checked is main.sh's own output, at the end, however pq exits
    _main_sh_with_fake_pq(tmp_path, '#!/bin/sh\necho "pq $1"\n[ "$1" = refresh ] && exit 3\nexit 0\n')
    env = {k: v for k, v in os.environ.items() if k != "PQ"}
    proc = subprocess.run(["bash", "scripts/main.sh"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 3, proc.stderr
    last = proc.stdout.splitlines()[-1]
    assert f'export PATH="{tmp_path.resolve()}/.venv/bin:$PATH"' in last and "source .venv/bin/activate" in last


def test_offline_error_names_pq_upstream_git_and_the_corpus(tmp_path: Path) -> None:
    code = (
        "from patch_queue.errors import SourceError\n"
        "from patch_queue.sources.snapshot import open_git\n"
        "try:\n    open_git('http://127.0.0.1:9/vllm-ascend.git')\n"
        "except SourceError as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PQ_CACHE": str(tmp_path / "cache"), "GIT_TERMINAL_PROMPT": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.startswith("cannot read upstream git repository http://127.0.0.1:9/vllm-ascend.git: "), out
    assert "set PQ_UPSTREAM_GIT (or --upstream)" in out and "../shared/corpus/vllm-ascend.bundle" in out
    assert out.count("\n") == 1


def test_main_sh_records_each_step_for_pq_timings(tmp_path: Path) -> None:
    # a stand-in pq that, as the real one does, adds the parts of its commands that fetched sources
    fake_pq = '#!/bin/sh\necho "within download 0.250" >>"$PQ_TIMINGS"\n[ "$1" = refresh ] && exit 3\nexit 0\n'
    _main_sh_with_fake_pq(tmp_path, fake_pq)
    timings = tmp_path / "timings.txt"
    env = {k: v for k, v in os.environ.items() if k != "PQ"} | {"PQ_TIMINGS": str(timings)}
    proc = subprocess.run(["bash", "scripts/main.sh"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 3, proc.stderr
    lines = [line.split() for line in timings.read_text(encoding="utf-8").splitlines()]
    assert [line[:2] for line in lines] == [
        ["step", "set-up"],
        ["step", "download"],
        ["within", "download"],
        ["step", "reproduce"],
        ["within", "download"],
        ["step", "merge"],
        ["within", "download"],
        ["step", "refresh"],
    ]
    assert all(float(line[2]) >= 0 for line in lines)


def test_setup_sh_keeps_an_up_to_date_venv(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    # a venv whose python logs how it is called (a pip install would show) and a pq
    log = tmp_path / "calls.txt"
    (bin_dir / "python").write_text(f'#!/bin/sh\necho "$*" >>{log}\n')
    (bin_dir / "pq").write_text("#!/bin/sh\n")
    for tool in ("python", "pq"):
        (bin_dir / tool).chmod(0o755)

    def stamp() -> str:
        command = '(cat pyproject.toml constraints.txt scripts/setup.sh; python3 --version; echo "") | cksum'
        return subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    def setup(*args: str) -> None:
        proc = subprocess.run(["bash", "scripts/setup.sh", *args], cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr

    (tmp_path / ".venv" / "pq-setup").write_text(stamp())
    setup()
    assert log.read_text() == "-c \n"  # asked whether it runs, and nothing installed
    # another option (--dev) is another set-up: pip is run, with the constraints
    setup("--dev")
    assert "-m pip install" in log.read_text() and "-c constraints.txt -e .[dev,bench]" in log.read_text()
    # a change of constraints.txt alone installs again
    (tmp_path / ".venv" / "pq-setup").write_text(stamp())
    log.write_text("")
    setup()
    assert log.read_text() == "-c \n"
    with (tmp_path / "constraints.txt").open("a") as fh:
        fh.write("# changed\n")
    setup()
    assert "-m pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e ." in log.read_text()


# -- pq's own packaging -----------------------------------------------------------------------------

EXACT = {"pygit2", "ruff"}  # pq's output depends on their versions (the diffs, the generated code's layout)


def project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return dict(tomllib.load(fh)["project"])


def requirements(group: str = "") -> list[Requirement]:
    data = project()
    extras = data["optional-dependencies"]
    assert isinstance(extras, dict)
    listed = extras[group] if group else data["dependencies"]
    assert isinstance(listed, list)
    return [Requirement(line) for line in listed]


def constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for number, line in enumerate((ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines(), 1):
        if line and not line.startswith("#"):
            found = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", line)
            assert found, f"constraints.txt:{number}: not NAME==VERSION: {line!r}"
            pins[canonicalize_name(found.group(1))] = found.group(2)
    return pins


def test_runtime_requirements_are_ranges_but_where_output_depends_on_the_version() -> None:
    reqs = {canonicalize_name(r.name): r for r in requirements()}
    assert "setuptools" not in reqs  # the wheel is written by pq itself
    assert {"rich", "typer", "gitpython", "packaging", "regex"} <= set(reqs)  # imported by pq (rich: progress.py)
    for name, req in reqs.items():
        exact = [s for s in req.specifier if s.operator in ("==", "===")]
        assert bool(exact) == (name in EXACT), f"{name}: {req}"
        assert len(req.specifier) >= 1, f"{name}: no version bound at all"
    assert str(reqs["typer"].specifier) == "<0.29,>=0.28"
    # the reason for typer's upper bound is kept beside it
    assert "TypeAdapter per parameter" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_constraints_pin_every_requirement_within_its_range() -> None:
    pins = constraints()
    for group in ("", "dev", "bench"):
        for req in requirements(group):
            name = canonicalize_name(req.name)
            assert name in pins, f"constraints.txt pins no {name} ({group or 'runtime'})"
            assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} is not in {req}"
    # the file is what a --dev venv holds: this one's packages (pq itself aside) at these versions
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format=json", "--disable-pip-version-check", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {canonicalize_name(p["name"]): p["version"] for p in json.loads(listed)}
    for name in ("ruff", "pygit2", "typer", "mypy", "twine", "pre-commit"):
        assert installed.get(name) == pins[name], name


def test_package_data_license_and_typed_marker() -> None:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        data = tomllib.load(fh)
    package_data = data["tool"]["setuptools"]["package-data"]
    for package, files in package_data.items():
        for name in files:
            assert (ROOT / package.replace(".", "/") / name).is_file(), f"{package}: {name}"
    assert package_data["patch_queue"] == ["py.typed"]
    assert data["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert (ROOT / "LICENSE").read_bytes() == (ROOT / "patch_queue" / "outputs" / "apache-2.0.txt").read_bytes()


def test_pre_commit_hooks_are_the_checks_of_test_sh() -> None:
    """.pre-commit-config.yaml runs the commands scripts/test.sh runs before pytest, with .venv's tools."""
    test_sh = [
        line.strip()
        for line in (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8").splitlines()
        if line.startswith(".venv/bin/") and "pytest" not in line
    ]
    config = (ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    entries = re.findall(r"^\s+entry: (.+)$", config, re.M)
    assert entries == test_sh and len(entries) == 3, (entries, test_sh)
    assert config.count("language: unsupported") == 3 and config.count("pass_filenames: false") == 3
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "pre-commit"), "validate-config", str(ROOT / ".pre-commit-config.yaml")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _dry_run(venv: Path, report: Path, *specs: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """``pip install --dry-run --report`` of ``specs`` into the fresh ``venv``: the process and what pip chose."""
    command = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--dry-run"]
    command += ["--quiet", "--disable-pip-version-check", "--ignore-installed", "--report", str(report), *specs]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0 and "ResolutionImpossible" not in proc.stderr:
        if re.search(r"No matching distribution|Could not fetch URL|NewConnectionError", proc.stderr):
            pytest.skip(f"package registry unreachable: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, shlex.join(command) + "\n" + proc.stderr[-3000:]
    chosen = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    return proc, chosen


def test_pq_installs_next_to_vllm_0_30_0(tmp_path: Path) -> None:
    """`pip install --dry-run` of this repository into a fresh venv with vLLM 0.30.0's own requirements (from its
    sdist's PKG-INFO, as its wheel's METADATA holds them) on every package of pq's own closure resolves: pq's
    ranges admit vLLM's pins (0.30.0 needs setuptools<81, which pq's exact pins once refused).  Only those of
    vLLM's requirements take part that name a package a --dev venv of pq holds (constraints.txt), or setuptools:
    a direct requirement on anything else cannot conflict with pq's, and the whole set (CUDA and torch builds)
    downloads some 1.4 GB."""
    try:
        pinned = archives.fetch_release("vllm", "0.30.0", None)
    except SourceError as exc:
        pytest.skip(f"package registry unreachable: {exc}")
    headers = HeaderParser().parsestr(archives.archive_members(pinned, "PKG-INFO")["PKG-INFO"].decode("utf-8"))
    env = default_environment()
    vllm = [
        Requirement(line)
        for line in headers.get_all("Requires-Dist") or []
        if "extra ==" not in line and (Requirement(line).marker is None or Requirement(line).marker.evaluate(env))
    ]
    assert {"regex", "transformers", "typing-extensions"} <= {canonicalize_name(r.name) for r in vllm}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # the packages a --dev venv of pq holds (constraints.txt): pq's closure and more
    shared = [str(r) for r in vllm if canonicalize_name(r.name) in {*constraints(), "setuptools"}]
    assert any(canonicalize_name(Requirement(r).name) == "regex" for r in shared), shared
    _proc, chosen = _dry_run(venv, tmp_path / "both.json", str(ROOT), *shared)
    assert chosen["patch-queue"] == "0.1.0"
    for line in shared:  # vLLM's pins hold
        req = Requirement(line)
        assert req.specifier.contains(chosen[canonicalize_name(req.name)], prereleases=True), req
    for req in requirements():  # and so do pq's ranges
        assert req.specifier.contains(chosen[canonicalize_name(req.name)], prereleases=True), req
