"""Interruption: a command SIGKILLed at any point leaves the old state or the new one, never a mix.

Each test runs the real command line in a subprocess with ``PQ_TEST_KILL_AT=<point>``
(:func:`patch_queue.fsutil.kill_point`), checks that it died there (exit -9), and then compares
everything a command may touch (every file of the project, every ref, ``git status``, the files of
``.git/pq/``) with snapshots of an uninterrupted run: before the killed command (after `pq abort`,
or untouched when it died before writing) and after it (after `pq continue`, or after running it
again).  The next command must name the recovery commands.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import copy_project, git, new_project, state
from test_end_to_end import _take_patch_side

RC2 = "vllm-ascend==0.30.0rc2"
KILLED = -signal.SIGKILL
RECOVERY = "run `pq continue` to finish its writes or `pq abort` to undo them"


def run(
    proj: Path, *args: str, kill: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, **(env or {}))
    environ.pop("PQ_TEST_KILL_AT", None)
    if kill is not None:
        environ["PQ_TEST_KILL_AT"] = kill
    return subprocess.run(
        [sys.executable, "-m", "patch_queue", *args], cwd=proj, capture_output=True, text=True, env=environ
    )


def expect(proc: subprocess.CompletedProcess[str], code: int) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == code, f"exit {proc.returncode}, expected {code}\n{proc.stdout}\n{proc.stderr}"
    return proc


def snap(proj: Path, *, lock: bool = True) -> dict[str, object]:
    """conftest.state (every file, refs, git status) plus the files of .git/pq/."""
    out = state(proj)
    pq_dir = proj / ".git" / "pq"
    out["pq"] = (
        {p.name: p.read_bytes() for p in sorted(pq_dir.iterdir()) if p.is_file() and (lock or p.name != "lock")}
        if pq_dir.is_dir()
        else {}
    )
    return out


def without_lock(snapshot: dict[str, object]) -> dict[str, object]:
    files = snapshot["pq"]
    assert isinstance(files, dict)
    return {**snapshot, "pq": {k: v for k, v in files.items() if k != "lock"}}


def assert_same(got: dict[str, object], want: dict[str, object], what: str) -> None:
    for key in want:
        if got[key] != want[key]:
            if key in ("files", "pq"):
                g, w = got[key], want[key]
                assert isinstance(g, dict) and isinstance(w, dict)
                diff = sorted(k for k in set(g) | set(w) if g.get(k) != w.get(k))
                raise AssertionError(f"{what}: {key} differ in {diff}")
            raise AssertionError(f"{what}: {key} differ:\n{got[key]}\n---- want ----\n{want[key]}")


def uninterrupted(
    template: Path, work: Path, args: list[str], code: int
) -> tuple[dict[str, object], dict[str, object]]:
    """Snapshots of ``template`` before and after ``pq args`` runs to the end (in a copy), exiting ``code``."""
    before = snap(template)
    done = copy_project(template, work / "uninterrupted")
    expect(run(done, *args), code)
    return before, snap(done)


def recovery_line(proj: Path, command: str) -> None:
    """Every command but continue/abort stops with one line naming both; nothing changes (a stale lock goes)."""
    before = snap(proj, lock=False)
    for args in (["status"], ["build"], ["refresh", "--to", RC2]):
        proc = expect(run(proj, *args), 1)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("pq: ")]
        assert lines == [
            f"pq: error: .git/pq/journal.json: `pq {command}` was interrupted while writing "
            f"patches/, npu_worker/ and refs/pq/; {RECOVERY}"
        ], proc.stderr
    assert_same(snap(proj, lock=False), before, "a refused command")


def killed(
    template: Path,
    work: Path,
    point: str,
    args: list[str],
    *,
    command: str,
    before: dict[str, object],
    after: dict[str, object],
    after_code: int,
) -> str:
    """Kill ``pq args`` at ``point`` in a copy of ``template``; check recovery both ways. Returns how it recovered."""
    proj = copy_project(template, work / f"{point}-killed")
    expect(run(proj, *args, kill=point), KILLED)
    if (proj / ".git" / "pq" / "journal.json").is_file():
        recovery_line(proj, command)
        # the saved contents survive a gc of everything unreachable (refs/pq/journal holds them)
        git(proj, "gc", "-q", "--prune=now")
        forward = copy_project(proj, work / f"{point}-continue")
        out = expect(run(forward, "continue"), 0).stdout
        assert f"finished the writes of the interrupted `pq {command}`" in out
        assert_same(snap(forward), after, f"killed at {point}, then pq continue")
        back = copy_project(proj, work / f"{point}-abort")
        out = expect(run(back, "abort"), 0).stdout
        assert f"undid the writes of the interrupted `pq {command}`" in out
        assert_same(snap(back), before, f"killed at {point}, then pq abort")
        return "journal"
    # died before it wrote anything: the old state, only the dead process's lock is left
    assert_same(snap(proj, lock=False), without_lock(before), f"killed at {point}")
    holder = json.loads((proj / ".git" / "pq" / "lock").read_text())
    assert holder["command"] == command and isinstance(holder["start"], int)
    expect(run(proj, *args), after_code)  # the stale lock is taken over; running it again gets the new state
    assert_same(snap(proj), after, f"killed at {point}, then run again")
    return "untouched"


# ---------------------------------------------------------------------------------------------
# a small synthetic upstream whose refresh is clean: the finishing write (patches/, refs, npu_worker/)

FENCE = "        # ------------------ Omni-new ------------------\n"


def _methods(n: int, tweak: dict[int, str] | None = None) -> list[str]:
    out = []
    for i in range(n):
        body = [
            f"        x = self.a{i} + 1\n",
            f"        y = x * {i + 2}\n",
            f"        z = y - {i}\n",
            "        return z\n",
        ]
        if tweak and i in tweak:
            body.insert(3, tweak[i])
        out.append(f"    def step{i}(self, a):\n" + "".join(body))
    return out


def _upstream(root: Path, methods: list[str]) -> Path:
    path = root / "vllm_ascend" / "worker" / "model_runner_v1.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        "import os\n\n\nclass NPUModelRunner:\n    def __init__(self):\n        self.a = 1\n\n" + "\n".join(methods)
    )
    return root


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("synthetic")
    up1 = _upstream(root / "up1", _methods(6))
    up2 = _upstream(
        root / "up2",
        _methods(6, {0: "        z = z + 0  # upstream edit\n", 4: "        z = z * 1  # another upstream edit\n"}),
    )
    down = []
    for i, m in enumerate(_methods(6)):
        lines = m.splitlines(keepends=True)
        if i in (1, 2, 3, 5):
            lines[2:3] = [FENCE, f"        y = x * {i + 2} + self.omni\n", FENCE]
        down.append("".join(lines))
    (root / "down").mkdir()
    (root / "down" / "npu_model_runner.py").write_text(
        "import os\n\nfrom vllm_ascend.worker.model_runner_v1 import NPUModelRunner\n\n\n"
        "class OmniNPUModelRunner(NPUModelRunner):\n    omni = 3\n\n" + "\n".join(down)
    )
    (root / "down" / "npu_omni_helpers.py").write_text("def helper():\n    return 'omni'\n")
    proj = new_project(root / "p")
    expect(run(proj, "adopt", str(root / "down"), "--at", str(up1)), 0)
    return {"proj": proj, "up1": up1, "up2": up2, "down": root / "down"}


CLEAN_POINTS = [
    "after-download",
    "between-patches",
    "after-journal",
    "mid-write-patches",
    "after-refs",
    "mid-write-out",
]


def test_kill_a_clean_refresh(synthetic: dict[str, Path], tmp_path: Path) -> None:
    template = synthetic["proj"]
    args = ["refresh", "--to", str(synthetic["up2"]), "--no-sources"]
    before, after = uninterrupted(template, tmp_path, args, 0)
    assert after["files"] != before["files"] and after["refs"] != before["refs"]  # the refresh changes both
    how = {
        p: killed(template, tmp_path, p, args, command="refresh", before=before, after=after, after_code=0)
        for p in CLEAN_POINTS
    }
    assert how == {p: "untouched" if p in ("after-download", "between-patches") else "journal" for p in CLEAN_POINTS}


@pytest.mark.parametrize(
    ("args", "point"),
    [
        (["pop", "--all"], "mid-write-out"),
        (["pop"], "after-refs"),
        (["adopt", "--force", "DOWN", "--at", "UP1"], "mid-write-patches"),
        (["delete", "--top"], "mid-write-patches"),
        (["rename", "renamed"], "after-refs"),
    ],
)
def test_kill_other_writing_commands(synthetic: dict[str, Path], tmp_path: Path, args: list[str], point: str) -> None:
    """pop, adopt, delete and rename write through the same journal: killed, they recover to the state before or
    after (the undo record included)."""
    template = copy_project(synthetic["proj"], tmp_path / "template")
    if args[0] == "adopt":  # re-adopt with a second omni module: patches/, refs and npu_worker/ all change
        down = tmp_path / "down"
        shutil.copytree(synthetic["down"], down)
        (down / "npu_extra.py").write_text("EXTRA = 1\n")
        args = [str(down) if a == "DOWN" else str(synthetic["up1"]) if a == "UP1" else a for a in args]
    command = args[0]
    before, after = uninterrupted(template, tmp_path, args, 0)
    assert after["files"] != before["files"] and after["refs"] != before["refs"]
    assert (
        killed(template, tmp_path, point, args, command=command, before=before, after=after, after_code=0) == "journal"
    )


def test_kill_the_recovery_itself(synthetic: dict[str, Path], tmp_path: Path) -> None:
    """`pq continue` / `pq abort` killed while they finish or undo a journal: run them again."""
    template = synthetic["proj"]
    args = ["refresh", "--to", str(synthetic["up2"]), "--no-sources"]
    before, after = uninterrupted(template, tmp_path, args, 0)
    proj = copy_project(template, tmp_path / "p")
    expect(run(proj, *args, kill="mid-write-patches"), KILLED)
    back = copy_project(proj, tmp_path / "back")
    expect(run(proj, "continue", kill="mid-write-out"), KILLED)
    recovery_line(proj, "refresh")
    expect(run(proj, "continue"), 0)
    assert_same(snap(proj), after, "continue killed, continued again")
    expect(run(back, "abort", kill="after-refs"), KILLED)
    expect(run(back, "abort"), 0)
    assert_same(snap(back), before, "abort killed, aborted again")


def test_recovery_refuses_a_file_changed_since(synthetic: dict[str, Path], tmp_path: Path) -> None:
    proj = copy_project(synthetic["proj"], tmp_path / "p")
    expect(run(proj, "refresh", "--to", str(synthetic["up2"]), kill="after-refs"), KILLED)
    victim = proj / "npu_worker" / "npu_model_runner.py"
    victim.write_text("# someone's edit\n")
    before = snap(proj)
    for command in ("continue", "abort"):
        proc = expect(run(proj, command), 1)
        assert proc.stderr.startswith(
            "pq: error: npu_worker/npu_model_runner.py: changed since the interrupted pq command started writing"
        ), proc.stderr
        assert len(proc.stderr.splitlines()) == 1
        assert_same(snap(proj, lock=False), without_lock(before), f"refused {command}")


# ---------------------------------------------------------------------------------------------
# the real corpus: vllm-omni 0.30.0's series onto vllm-ascend 0.30.0rc2 (stops on conflicts)

STOP_POINTS = ["after-download", "between-patches", "after-journal", "after-refs", "mid-write-out", "mid-write-state"]
NO_STOP = ["refresh", "--no-stop", "--to", RC2, "--no-sources"]


@pytest.fixture(scope="module")
def refreshed_030(adopted_030: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """adopted_030 after `pq refresh` NO_STOP ran to the end (exit 3, pending), once for the module: the state an
    interrupted NO_STOP must reach. Tests copy it."""
    proj = copy_project(adopted_030, tmp_path_factory.mktemp("uninterrupted") / "p")
    expect(run(proj, *NO_STOP), 3)
    return proj


def test_kill_a_refresh_that_stops_on_conflicts(adopted_030: Path, refreshed_030: Path, tmp_path: Path) -> None:
    args = NO_STOP
    before, after = snap(adopted_030), snap(refreshed_030)
    assert "refresh.json" in after["pq"]  # type: ignore[operator]
    how = {
        p: killed(adopted_030, tmp_path, p, args, command="refresh", before=before, after=after, after_code=3)
        for p in STOP_POINTS
    }
    assert how == {p: "untouched" if p in ("after-download", "between-patches") else "journal" for p in STOP_POINTS}
    # the journal's recovery leaves a refresh that goes on as an uninterrupted one does
    proj = copy_project(adopted_030, tmp_path / "goes-on")
    expect(run(proj, *args, kill="mid-write-out"), KILLED)
    expect(run(proj, "continue"), 0)
    assert "refresh in progress onto vllm-ascend 0.30.0rc2" in expect(run(proj, "status"), 3).stdout
    expect(run(proj, "abort"), 0)
    assert_same(snap(proj), before, "recovered, then aborted")


@pytest.fixture(scope="module")
def resolved_030(refreshed_030: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0.30.0 refreshed onto 0.30.0rc2 with --no-stop, every conflict resolved in npu_worker/ (patch side)."""
    proj = copy_project(refreshed_030, tmp_path_factory.mktemp("resolved") / "p")
    for f in (proj / "npu_worker").glob("*.py"):
        text = f.read_text()
        if "<<<<<<< " in text:
            f.write_text(_take_patch_side(text))
    return proj


# no mid-write-out: npu_worker/ already holds the resolved result, so this continue writes nothing there
CONTINUE_POINTS = ["between-patches", "after-journal", "mid-write-patches", "after-refs", "mid-write-state"]


def test_kill_the_continue_that_finishes_a_refresh(resolved_030: Path, tmp_path: Path) -> None:
    before, after = uninterrupted(resolved_030, tmp_path, ["continue"], 0)
    assert "refresh.json" not in after["pq"] and after["refs"] != before["refs"]  # type: ignore[operator]
    assert "refs/pq/resolutions " in str(after["refs"])  # the resolutions were recorded too
    how = {
        p: killed(resolved_030, tmp_path, p, ["continue"], command="continue", before=before, after=after, after_code=0)
        for p in CONTINUE_POINTS
    }
    assert how == {p: "untouched" if p == "between-patches" else "journal" for p in CONTINUE_POINTS}


ABORT_POINTS = ["after-journal", "mid-write-state", "mid-write-out", "after-refs"]


def test_kill_an_abort(resolved_030: Path, adopted_030: Path, tmp_path: Path) -> None:
    """A killed `pq abort`: `pq continue` finishes the abort, `pq abort` undoes it (the refresh stays open)."""
    stopped = snap(resolved_030)
    original = snap(adopted_030)
    for point in ABORT_POINTS:
        proj = copy_project(resolved_030, tmp_path / point)
        expect(run(proj, "abort", kill=point), KILLED)
        recovery_line(proj, "abort")
        forward = copy_project(proj, tmp_path / f"{point}-continue")
        expect(run(forward, "continue"), 0)
        assert_same(snap(forward), original, f"abort killed at {point}, then pq continue")
        back = copy_project(proj, tmp_path / f"{point}-abort")
        expect(run(back, "abort"), 0)
        assert_same(snap(back), stopped, f"abort killed at {point}, then pq abort")


# ---------------------------------------------------------------------------------------------
# killed during the download itself: a local index that sends half the archive, then stalls


@pytest.fixture
def stalling_server(pq_cache: Path) -> Iterator[tuple[str, threading.Event, list[int]]]:
    from patch_queue.sources.snapshot import release_snapshot

    with pytest.MonkeyPatch.context() as mp:  # the release's pin and archive, whatever ran before
        mp.setenv("PQ_CACHE", str(pq_cache))
        release_snapshot("vllm-ascend", RC2.split("==")[1], progress=lambda _: None)
    pin = json.loads((pq_cache / "dist" / f"{RC2}.json").read_text())
    data = (pq_cache / "dist" / pin["filename"]).read_bytes()
    release = threading.Event()
    stall = [1]  # while 1, a request gets half the archive, then waits for ``release``

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if stall[0]:
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                release.wait(60)
                return
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{pin['filename']}", release, stall
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_kill_during_the_download(
    adopted_030: Path,
    refreshed_030: Path,
    tmp_path: Path,
    pq_cache: Path,
    stalling_server: tuple[str, threading.Event, list[int]],
) -> None:
    url, release, stall = stalling_server
    pin = json.loads((pq_cache / "dist" / f"{RC2}.json").read_text())
    cache = tmp_path / "cold-cache"
    (cache / "dist").mkdir(parents=True)
    (cache / "dist" / f"{RC2}.json").write_text(json.dumps({**pin, "url": url}))
    for part in ("git",):  # the upstream history clone is not what this test is about: share it
        (cache / part).symlink_to(pq_cache / part)
    args = NO_STOP
    before, after = snap(adopted_030), snap(refreshed_030)
    proj = copy_project(adopted_030, tmp_path / "p")
    environ = dict(os.environ, PQ_CACHE=str(cache))
    environ.pop("PQ_TEST_KILL_AT", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "patch_queue", *args],
        cwd=proj,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(p.stat().st_size > 0 for p in (cache / "dist").glob(".part-*")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
        stall[0] = 0
        release.set()
    assert proc.returncode == KILLED
    # half an archive never reaches its cache name, and nothing in the project changed
    assert not (cache / "dist" / pin["filename"]).exists()
    assert_same(snap(proj, lock=False), without_lock(before), "killed mid-download")
    expect(run(proj, *args, env={"PQ_CACHE": str(cache)}), 3)  # downloads it again, verified
    assert (cache / "dist" / pin["filename"]).read_bytes() == (pq_cache / "dist" / pin["filename"]).read_bytes()
    assert_same(snap(proj), after, "killed mid-download, then run again")


# ---------------------------------------------------------------------------------------------
# concurrency: one mutating command at a time


def test_two_refreshes_at_once(
    adopted_030: Path,
    refreshed_030: Path,
    tmp_path: Path,
    pq_cache: Path,
    stalling_server: tuple[str, threading.Event, list[int]],
) -> None:
    """Start two real refreshes together: one takes the lock (and stalls in its download), the other stops."""
    url, release, stall = stalling_server
    pin = json.loads((pq_cache / "dist" / f"{RC2}.json").read_text())
    cache = tmp_path / "cold-cache"
    (cache / "dist").mkdir(parents=True)
    (cache / "dist" / f"{RC2}.json").write_text(json.dumps({**pin, "url": url}))
    (cache / "git").symlink_to(pq_cache / "git")
    args = NO_STOP
    after = snap(refreshed_030)
    proj = copy_project(adopted_030, tmp_path / "p")
    environ = dict(os.environ, PQ_CACHE=str(cache))
    environ.pop("PQ_TEST_KILL_AT", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "patch_queue", *args],
            cwd=proj,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 60
        while all(p.poll() is None for p in procs):  # the one without the lock stops at once
            assert time.monotonic() < deadline
            time.sleep(0.05)
        loser = next(p for p in procs if p.poll() is not None)
        winner = next(p for p in procs if p is not loser)
        assert winner.poll() is None  # still in its (stalled) download, holding the lock
    finally:
        stall[0] = 0
        release.set()
    out, err = loser.communicate(timeout=60)
    assert loser.returncode == 1, err
    assert err == (
        f"pq: error: {proj.resolve() / '.git' / 'pq' / 'lock'}: another pq command (refresh, pid "
        f"{winner.pid}) is running in this repository; wait for it to finish\n"
    ), err
    _out, winner_err = winner.communicate(timeout=120)
    assert winner.returncode == 3, winner_err
    assert_same(snap(proj), after, "the refresh that ran")


MUTATING = [
    ["adopt", "vllm-omni==0.30.0", "--force"],
    ["refresh", "--to", RC2],
    ["continue"],
    ["abort"],
    ["new", "x"],
    ["record"],
    ["push"],
    ["pop"],
    ["goto", "x"],
    ["delete", "--top"],
    ["rename", "x"],
    ["edit", "-m", "x"],
    ["squash", "init", "base"],
    ["float", "init"],
    ["sink"],
    ["import", "x.patch"],
    ["undo"],
    ["redo"],
    ["build"],
    ["build", "--wheel"],
    ["check"],
    ["blocks"],
]


def test_every_mutating_command_takes_the_lock(adopted_030: Path, tmp_path: Path) -> None:
    """A lock held (flock) by a live process stops each of them with one line, and nothing changes."""
    import fcntl

    proj = copy_project(adopted_030, tmp_path / "p")
    lock = proj / ".git" / "pq" / "lock"
    lock.parent.mkdir(exist_ok=True)
    before = snap(proj)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": "test-holder"}).encode())
        for args in MUTATING:
            proc = expect(run(proj, *args), 1)
            assert proc.stderr == (
                f"pq: error: {lock.resolve()}: another pq command (test-holder, pid {os.getpid()}) "
                "is running in this repository; wait for it to finish\n"
            ), (args, proc.stderr)
        assert_same(snap(proj), {**before, "pq": {"lock": lock.read_bytes()}}, "refused commands")
    finally:
        os.close(fd)  # lets go of the flock
    lock.unlink()
    expect(run(proj, "build"), 0)
    assert not lock.exists()


def test_stale_locks(adopted_030: Path, tmp_path: Path) -> None:
    """A lock file of a dead process, or of a pid now used by another process, is taken over with the ref
    locks a killed pq left; a live holder with the same start time is not."""
    proj = copy_project(adopted_030, tmp_path / "p")
    lock = proj / ".git" / "pq" / "lock"
    lock.parent.mkdir(exist_ok=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = int(Path(f"/proc/{sleeper.pid}/stat").read_text().rpartition(")")[2].split()[19])
        lock.write_text(json.dumps({"pid": sleeper.pid, "start": start, "command": "refresh"}))
        proc = expect(run(proj, "build"), 1)
        assert f"another pq command (refresh, pid {sleeper.pid}) is running" in proc.stderr
        # the same pid, but a process that started at another time: the pid was reused, the lock is stale
        lock.write_text(json.dumps({"pid": sleeper.pid, "start": start + 1, "command": "refresh"}))
        expect(run(proj, "build"), 0)
        assert not lock.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    # a refresh killed while git held a ref lock: the lock of the dead pq and its ref lock are both stale
    expect(run(proj, "refresh", "--to", RC2, kill="after-download"), KILLED)
    (proj / ".git" / "refs" / "pq" / "top.lock").write_text("")
    expect(run(proj, "build"), 0)
    assert not (proj / ".git" / "refs" / "pq" / "top.lock").exists()


# ---------------------------------------------------------------------------------------------
# refs move by compare-and-swap


def test_refs_move_only_from_their_expected_values(tmp_path: Path) -> None:
    from patch_queue.errors import QueueError
    from patch_queue.git.repo import ProjectRepo

    proj = new_project(tmp_path / "p")
    head = git(proj, "rev-parse", "HEAD").strip()
    repo = ProjectRepo(proj)
    repo.update_refs({"refs/pq/a": (None, head), "refs/pq/b": (None, head)}, "test")
    other = git(proj, "commit-tree", "-m", "other", f"{head}^{{tree}}").strip()
    git(proj, "update-ref", "refs/pq/b", other)  # someone else moves b
    before = git(proj, "for-each-ref", "--format=%(refname) %(objectname)")
    with pytest.raises(QueueError, match=r"refs/pq/b: refs/pq/b moved underneath pq \(expected .*nothing was moved"):
        repo.update_refs({"refs/pq/a": (head, other), "refs/pq/b": (head, None)}, "test")
    assert git(proj, "for-each-ref", "--format=%(refname) %(objectname)") == before  # a did not move either
    (proj / ".git" / "refs" / "pq" / "a.lock").write_text("")  # a git command holds a
    with pytest.raises(QueueError, match=r"refs/pq/a is locked by another git command") as info:
        repo.update_refs({"refs/pq/a": (head, other), "refs/pq/b": (other, None)}, "test")
    assert "\n" not in str(info.value)
    assert git(proj, "for-each-ref", "--format=%(refname) %(objectname)") == before
    (proj / ".git" / "refs" / "pq" / "a.lock").unlink()
    repo.update_refs({"refs/pq/a": (head, other), "refs/pq/b": (other, None)}, "test")
    assert git(proj, "for-each-ref", "--format=%(refname)", "refs/pq/").split() == ["refs/pq/a"]


@pytest.mark.parametrize("short", [2, 3])
def test_a_download_cut_short_is_taken_again(tmp_path: Path, short: int) -> None:
    """A server that closes the connection before its Content-Length: the download is asked again (urllib's
    chunked reads do not raise on it), up to 3 times; after that, one line saying so, and nothing in the cache."""
    import hashlib

    from patch_queue.errors import SourceError
    from patch_queue.sources.registry import DistFile, download, parse_version

    data = os.urandom(3 << 20)
    served = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            served[0] += 1
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data if served[0] > short else data[: len(data) // 3])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/x-1.0.tar.gz"
        dist = DistFile("x-1.0.tar.gz", url, hashlib.sha256(data).hexdigest(), parse_version("1.0"), "sdist", False)
        dest = tmp_path / "dist" / "x-1.0.tar.gz"
        if short < 3:
            assert download(dist, dest, None) == dist.sha256 and dest.read_bytes() == data
        else:
            with pytest.raises(SourceError) as raised:
                download(dist, dest, None)
            assert str(raised.value) == (
                f"cannot download x-1.0.tar.gz from {url}: the connection closed after {len(data) // 3} of "
                f"{len(data)} bytes, 3 times"
            )
            assert not dest.exists() and not list(dest.parent.iterdir())
        assert served[0] == min(short + 1, 3)
    finally:
        server.shutdown()
        server.server_close()
