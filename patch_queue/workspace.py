"""The project a command works on: the repository, ``patches/``, the output folder and the stack refs.

Also the lock that keeps two mutating commands apart, and loading the stack from ``patches/``
(the stack is always rebuilt from the patch files; commits are deterministic, so an unchanged
series gives the same commit ids and moves no ref).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from patch_queue import sources, stack
from patch_queue.errors import QueueError, SourceError
from patch_queue.fsutil import atomic_write
from patch_queue.git.repo import ProjectRepo
from patch_queue.queue import Queue, QueueDir

OUT_DIR = "npu_worker"
Progress = Callable[[str], None]


@dataclass
class Workspace:
    repo: ProjectRepo
    root: Path
    queue_dir: QueueDir
    out: Path

    @property
    def state_dir(self) -> Path:
        return self.repo.gitdir / "pq"

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


def open_workspace(cwd: Path | None = None, *, out: Path | None = None) -> Workspace:
    here = (cwd or Path.cwd()).resolve()
    repo = ProjectRepo(here)
    root = repo.workdir
    return Workspace(repo, root, QueueDir(root / "patches"), (out or root / OUT_DIR).resolve())


@contextmanager
def locked(ws: Workspace, command: str) -> Iterator[None]:
    """One mutating command at a time; a lock left by a dead process is taken over."""
    ws.state_dir.mkdir(parents=True, exist_ok=True)
    lock = ws.state_dir / "lock"
    for _attempt in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = json.loads(lock.read_text())
                pid = int(holder["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                pid = -1
            if pid > 0 and _alive(pid):
                raise QueueError(
                    f"another pq command ({holder.get('command', '?')}, pid {pid}) is running in this repository; "
                    "wait for it to finish",
                    path=str(lock),
                ) from None
            lock.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as fh:
            json.dump({"pid": os.getpid(), "command": command}, fh)
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)
        return
    raise QueueError("could not take the pq lock", path=str(lock))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def upstream_reader(queue: Queue, *, upstream_git: str | None, progress: Progress | None = None
                    ) -> Callable[[str], bytes]:
    """Read the pinned upstream's files, each checked against its sha256 in queue.toml."""
    up = queue.upstream
    snapshot: sources.Snapshot | None = None

    def snap() -> sources.Snapshot:
        nonlocal snapshot
        if snapshot is None:
            if up.kind == "git":
                location = sources.upstream_git_location(upstream_git)
                git = sources.open_git(location, progress=progress)
                commit = up.pin if _has_commit(git, up.pin) else None
                if commit is None and up.public_commit:
                    commit = git.find_public(up.public_commit)
                if commit is None:
                    raise SourceError(
                        f"pinned upstream commit {up.public_commit or up.pin} is not in {location}; "
                        "point --upstream or PQ_UPSTREAM_GIT at a repository that has it"
                    )
                snapshot = sources.resolve_upstream(commit, upstream_git=location, progress=progress)
            elif up.kind == "release":
                snapshot = sources.resolve_upstream(up.spec, progress=progress)
            else:
                snapshot = sources.resolve_upstream(up.spec, progress=progress)
        return snapshot

    def read(path: str) -> bytes:
        data = snap().read(path)
        want = up.files.get(path)
        if want is not None and stack.sha256(data) != want:
            raise SourceError(
                f"sha256 mismatch for vendored file {path} from {snap().label}: "
                f"queue.toml pins {want}, got {stack.sha256(data)}"
            )
        return data

    return read


def _has_commit(git: sources.UpstreamGit, commit: str) -> bool:
    if not commit:
        return False
    try:
        return git.resolve(commit) == commit
    except SourceError:
        return False


def base_for_queue(ws: Workspace, queue: Queue, *, upstream_git: str | None, progress: Progress | None = None
                   ) -> tuple[str, tuple[str, ...]]:
    """The base commit for the queue's pin: reuse refs/pq/base when its vendored files match."""
    current = ws.repo.ref(stack.REF_BASE)
    if current is not None:
        files = ws.repo.read_tree(ws.repo.commit_info(current).tree)
        vendored = {p[len(stack.VENDOR):]: stack.sha256(d) for p, d in files.items() if p.startswith(stack.VENDOR)}
        if vendored == queue.upstream.files:
            projection = stack.project_modules(queue, lambda p: files[stack.VENDOR + p], label=queue.upstream.label)
            return stack.base_commit(ws.repo, queue, projection), projection.missing
    projection = stack.project_modules(
        queue, upstream_reader(queue, upstream_git=upstream_git, progress=progress), label=queue.upstream.label
    )
    return stack.base_commit(ws.repo, queue, projection), projection.missing


@dataclass(frozen=True)
class LoadedStack:
    queue: Queue
    base: str
    patches: list[tuple[str, str]]  # (name, commit) in series order, all of them

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.patches]


def load_stack(ws: Workspace, *, upstream_git: str | None, progress: Progress | None = None) -> LoadedStack:
    queue = ws.queue_dir.load_queue()
    names = ws.queue_dir.load_series()
    base, missing = base_for_queue(ws, queue, upstream_git=upstream_git, progress=progress)
    if missing:
        raise QueueError(
            "carried symbols missing at the pinned upstream: " + "; ".join(missing), path=str(ws.queue_dir.queue_path)
        )
    data = [(n, (ws.queue_dir.root / n).read_bytes()) for n in names]
    commits = stack.import_series(ws.repo, queue, base, data)
    return LoadedStack(queue, base, commits)


def applied_count(ws: Workspace, loaded: LoadedStack) -> int:
    """How many patches are applied: the top ref's position in the series (all when unset)."""
    top = ws.repo.ref(stack.REF_TOP)
    if top is None:
        return len(loaded.patches)
    if top == loaded.base:
        return 0
    for i, (_n, c) in enumerate(loaded.patches):
        if c == top:
            return i + 1
    return len(loaded.patches)  # patches were edited by hand: treat the whole series as applied


def stack_ref_updates(ws: Workspace, loaded: LoadedStack, applied: int) -> dict[str, tuple[str | None, str | None]]:
    """Ref moves that make refs/pq/ describe ``loaded`` with ``applied`` patches on."""
    want: dict[str, str] = {stack.REF_BASE: loaded.base}
    want[stack.REF_TOP] = loaded.patches[applied - 1][1] if applied else loaded.base
    for name, commit in loaded.patches:
        want[stack.REF_PATCHES + name] = commit
    # refs/pq/resolutions (recorded resolutions) and refs/pq/previous (the build before the last
    # refresh, the reference of `pq check`) are not part of the stack and are never moved here
    have = {k: v for k, v in ws.repo.refs().items()
            if not k.startswith("refs/pq/orig/") and k not in ("refs/pq/resolutions", "refs/pq/previous")}
    updates: dict[str, tuple[str | None, str | None]] = {}
    for ref in sorted(set(want) | set(have)):
        if have.get(ref) != want.get(ref):
            updates[ref] = (have.get(ref), want.get(ref))
    return updates


def write_state(ws: Workspace, name: str, data: object) -> None:
    atomic_write(ws.state_dir / name, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def read_state(ws: Workspace, name: str) -> dict[str, object] | None:
    path = ws.state_dir / name
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except ValueError as exc:
        raise QueueError(f"corrupt pq state: {exc}; run `pq abort`", path=str(path)) from None
    if not isinstance(value, dict):
        raise QueueError("corrupt pq state; run `pq abort`", path=str(path))
    return value
