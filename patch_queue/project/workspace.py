"""The project a command works on: the repository, ``patches/``, the output folder and the stack refs.

Also the lock that keeps two mutating commands apart, and loading the stack from ``patches/``
(the stack is always rebuilt from the patch files; commits are deterministic, so an unchanged
series gives the same commit ids and moves no ref).
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from patch_queue import namespace, presets
from patch_queue.errors import QueueError, SourceError
from patch_queue.git.repo import ProjectRepo
from patch_queue.progress import Progress
from patch_queue.series import stack
from patch_queue.series.queue import Queue, QueueDir
from patch_queue.spec import QueueSpec

if TYPE_CHECKING:  # the upstream is opened only when refs/pq/base does not hold the pinned files
    from patch_queue.git.remote import UpstreamGit
    from patch_queue.sources.snapshot import Snapshot

MANIFEST = ".pq-build"  # what pq wrote into an output folder (see patch_queue.outputs.folder)


@dataclass
class Workspace:
    repo: ProjectRepo
    root: Path
    queue_dir: QueueDir
    out_given: Path | None = None  # the output folder the command was told (None: the queue's own)
    _spec: QueueSpec | None = None

    @property
    def spec(self) -> QueueSpec:
        """What the queue here is: ``queue.toml``'s (read once), the default preset's before there is one, or the one
        :meth:`use_spec` set (``pq adopt``)."""
        if self._spec is None:
            self._spec = self.queue_dir.load_spec() or presets.DEFAULT
        return self._spec

    def use_spec(self, spec: QueueSpec) -> None:
        self._spec = spec

    @property
    def out(self) -> Path:
        """The output folder: the one given, else the queue's (``spec.out``) in the project."""
        return (self.out_given or self.root / self.spec.out).resolve()

    @property
    def state_dir(self) -> Path:
        return self.repo.gitdir / namespace.state()

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


def open_workspace(cwd: Path | None = None, *, out: Path | None = None) -> Workspace:
    try:
        here = (cwd or Path.cwd()).resolve()
    except OSError as exc:  # a working directory removed under the shell: git cannot start there either
        raise QueueError(f"cannot read the working directory ({exc.strerror or exc}): cd into the project") from None
    repo = ProjectRepo(here)
    root = repo.workdir
    if repo.main_gitdir is not None:
        raise QueueError(
            "is a linked git work tree: its refs/pq/ are shared with every work tree of the repository while the "
            f"lock and a refresh's state are not, so pq runs in the main work tree only ({repo.main_gitdir.parent})",
            path=str(root),
        )
    if namespace.folder():  # a queue in a folder of its own (`pq -C DIR`): its patches/ and output are there
        root = root / namespace.folder()
    return Workspace(repo, root, QueueDir(root / "patches"), out.resolve() if out else None)


JOURNAL_FILE = "journal.json"  # see patch_queue/project/journal.py
# keeps the journal's saved contents reachable; only patch_queue/project/journal.py moves it
REF_JOURNAL = namespace.refs() + "journal"
REF_UNDO = namespace.refs() + "undo"  # keeps the saved contents of the last undoable command reachable (pq undo)
UNDO_FILE = "undo.json"  # what `pq undo` puts back; see patch_queue/project/journal.py
RECOVERY_COMMANDS = ("continue", "abort")  # the commands that may run while a journal is left
READING_COMMANDS = ("check", "blocks")  # locked commands that also run where no lock can be taken (read-only)


@contextmanager
def locked(ws: Workspace, command: str) -> Iterator[None]:
    """One mutating command at a time in a repository.

    The lock is ``.git/pq/lock`` held with ``flock``: taking it is atomic, and the kernel lets go
    of it when its process dies, however it dies.  The file names the holder (pid, the start time
    of that pid from ``/proc/<pid>/stat``, command) for the message a second command prints, and
    is removed on release.  A lock file left by a process that is gone, or whose pid now belongs
    to another process (its start time differs), is stale and taken over; so are git ref locks
    (``refs/pq/**.lock``) such a process left.  A journal of writes that a killed command left
    behind stops every command but ``pq continue`` / ``pq abort`` (see :mod:`patch_queue.project.journal`).
    Where the lock file cannot be made (a read-only repository, an immutable ``.git/pq``) a writing command
    is refused with one line, and a reading one (:data:`READING_COMMANDS`) runs without it: no writer can
    take the lock there either.
    """
    lock = ws.state_dir / "lock"
    for _attempt in range(10):
        try:
            ws.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if command not in READING_COMMANDS:
                raise QueueError(
                    f"cannot take the pq lock ({exc.strerror or exc}): `pq {command}` writes patches/, "
                    f"{ws.spec.out}/ and refs/pq/; make the repository writable (nothing was changed)",
                    path=ws.rel(lock),
                ) from None
            # no lock can be taken here, so no writing pq runs beside this one either
            if command not in RECOVERY_COMMANDS:
                check_no_journal(ws)
            check_refs(ws)
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            holder = _read_holder(lock)
            if holder is None:  # it has the lock but has not written its name yet
                time.sleep(0.1)
                holder = _read_holder(lock)
            raise _held(lock, holder) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # the holder removed the file between our open and our flock: take a fresh one
            os.close(fd)
            continue
        try:
            holder = _read_holder(lock)
            if holder is not None and holder.get("pid") != os.getpid() and _holder_alive(holder):
                # a live process named in a lock file that is not flocked: a pq without flock
                raise _held(lock, holder)
            if holder is not None:
                _clear_ref_locks(ws)  # its holder died while pq held the lock
            me = {"pid": os.getpid(), "start": _start_time(os.getpid()), "command": command}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me, sort_keys=True) + "\n").encode(), 0)
            if command not in RECOVERY_COMMANDS:
                check_no_journal(ws)
            check_refs(ws)
        except BaseException:
            _release(lock, fd)
            raise
        try:
            yield
        finally:
            _release(lock, fd)
        return
    raise QueueError("could not take the pq lock (it kept changing hands)", path=str(lock))


def check_refs(ws: Workspace) -> None:
    """Every ref under refs/pq/ names a commit this repository has; else one line naming the ref."""
    for name, oid in ws.repo.refs().items():
        kind = ws.repo.kind_of(oid)
        if kind != "commit":
            what = "an object the repository does not have" if kind is None else f"a {kind}, not a commit"
            fix = (  # the recorded resolutions are not rebuilt: an older value of the ref is in its reflog
                f"or set it to a store `pq resolutions log` lists (`git update-ref {namespace.refs()}resolutions ID`)"
                if name == namespace.refs() + "resolutions"
                else "and rebuild with `pq build` (or `pq abort` a refresh)"
            )
            raise QueueError(
                f"points at {oid[:12]}, {what}; the ref is damaged: delete it "
                f"(`git update-ref -d {shlex.quote(name)}`) {fix}",
                path=name,
            )


def _release(lock: Path, fd: int) -> None:
    lock.unlink(missing_ok=True)  # while still flocked, so nobody takes an unlinked file's lock
    os.close(fd)


def _held(lock: Path, holder: dict[str, object] | None) -> QueueError:
    what = f"{holder.get('command', '?')}, pid {holder.get('pid', '?')}" if holder else "?"
    return QueueError(
        f"another pq command ({what}) is running in this repository; wait for it to finish", path=str(lock)
    )


def _read_holder(lock: Path) -> dict[str, object] | None:
    try:
        value = json.loads(lock.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and isinstance(value.get("pid"), int) else None


def _holder_alive(holder: dict[str, object]) -> bool:
    pid = holder["pid"]
    assert isinstance(pid, int)
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    recorded = holder.get("start")
    if recorded is None:
        return True  # no start time recorded: trust the pid
    now = _start_time(pid)
    return now is None or now == recorded  # None: no /proc here, so the pid is all we know


def _start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot, field 22 of /proc/<pid>/stat); None without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rpartition(")")[2].split()[19])  # the command name may hold spaces and ')'
    except (IndexError, ValueError):
        return None


def _clear_ref_locks(ws: Workspace) -> None:
    """Remove the git ref locks under refs/pq/ that a killed pq left (pq is the only writer there)."""
    refs = ws.repo.gitdir / namespace.refs().rstrip("/")
    if refs.is_dir():
        for stale in refs.rglob("*.lock"):
            stale.unlink(missing_ok=True)


def check_no_journal(ws: Workspace) -> None:
    """Refuse to run while a killed command's journal of writes is left (see patch_queue/project/journal.py)."""
    path = ws.state_dir / JOURNAL_FILE
    if not path.is_file():
        return
    try:
        command = str(json.loads(path.read_text()).get("command", "?"))
    except (OSError, ValueError, AttributeError):
        command = "?"
    raise QueueError(
        f"`pq {command}` was interrupted while writing patches/, {ws.spec.out}/ and refs/pq/; "
        f"run `pq continue` to finish its writes or `pq abort` to undo them",
        path=ws.rel(path),
    )


def upstream_snapshot(queue: Queue, *, upstream_git: str | None, progress: Progress | None = None) -> Snapshot:
    """The pinned upstream tree (a git pin found by its mirror commit, else by its public commit)."""
    from patch_queue.sources.snapshot import open_git, resolve_upstream, upstream_git_location

    up = queue.upstream
    if up.kind != "git":
        return resolve_upstream(up.spec, progress=progress, queue=queue.spec)
    location = upstream_git_location(upstream_git, queue.spec)
    git = open_git(location, progress=progress)
    commit = up.pin if _has_commit(git, up.pin) else None
    if commit is None and up.public_commit:
        commit = git.find_public(up.public_commit)
    if commit is None:
        raise SourceError(
            f"pinned upstream commit {up.public_commit or up.pin} is not in {location}; "
            "point --upstream or PQ_UPSTREAM_GIT at a repository that has it"
        )
    return resolve_upstream(commit, upstream_git=location, progress=progress, queue=queue.spec)


def upstream_reader(
    queue: Queue, *, upstream_git: str | None, progress: Progress | None = None
) -> Callable[[str], bytes]:
    """Read the pinned upstream's files, each checked against its sha256 in queue.toml."""
    up = queue.upstream

    @functools.cache  # opened on the first read (a failed open is tried again on the next)
    def snap() -> Snapshot:
        return upstream_snapshot(queue, upstream_git=upstream_git, progress=progress)

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


def _has_commit(git: UpstreamGit, commit: str) -> bool:
    if not commit:
        return False
    try:
        return git.resolve(commit) == commit
    except SourceError:
        return False


def base_for_queue(
    ws: Workspace, queue: Queue, *, upstream_git: str | None, progress: Progress | None = None
) -> tuple[str, tuple[str, ...]]:
    """The base commit for the queue's pin: reuse refs/pq/base when its vendored files match."""
    current = ws.repo.ref(stack.REF_BASE)
    if current is not None:
        files = ws.repo.read_tree(ws.repo.commit_info(current).tree)
        vendored = {p[len(stack.VENDOR) :]: stack.sha256(d) for p, d in files.items() if p.startswith(stack.VENDOR)}
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

    def top(self, applied: int | None = None) -> str:
        """The commit with ``applied`` patches on (default: all of them)."""
        if applied is None:
            applied = len(self.patches)
        return self.patches[applied - 1][1] if applied else self.base


def load_stack(ws: Workspace, *, upstream_git: str | None, progress: Progress | None = None) -> LoadedStack:
    from patch_queue.series import lineage

    check_refs(ws)  # the unlocked commands (status, series, show, diff) too: a damaged ref is one line
    queue = ws.queue_dir.load_queue()
    if queue.lineage and not lineage.present_bodies(ws.queue_dir, queue.lineage[-1].names):
        raise QueueError(
            "holds no patch bodies; `pq reproduce` rebuilds them from the lineage in queue.toml",
            path=ws.rel(ws.queue_dir.root),
        )
    names = ws.queue_dir.load_series()
    if not names:  # a lost or emptied series must not empty the stack
        held = [k for k in ws.repo.refs() if k.startswith(stack.REF_PATCHES)]
        known = queue.lineage[-1].names if queue.lineage else ()
        if held or known:
            what = f"refs/pq/patches/ holds {len(held)} patches" if held else f"queue.toml lists {len(known)}"
            raise QueueError(
                f"is missing or names no patch while {what}; restore it (`git checkout -- patches/series`)",
                path=ws.rel(ws.queue_dir.series_path),
            )
    data = [(n, read_patch(ws, n)) for n in names]
    base, missing = base_for_queue(ws, queue, upstream_git=upstream_git, progress=progress)
    if missing:
        raise QueueError(
            "carried symbols missing at the pinned upstream: " + "; ".join(missing), path=str(ws.queue_dir.queue_path)
        )
    commits = stack.import_series(ws.repo, queue, base, data)  # a malformed body: the parser names its line
    lineage.check_bodies(ws.queue_dir, queue, names, [d for _n, d in data])
    return LoadedStack(queue, base, commits)


def read_patch(ws: Workspace, name: str) -> bytes:
    """The bytes of ``patches/<name>``; one line when it vanished since the series was read (a `pq delete` or
    `pq rename` that ran meanwhile, as the lock-free commands do not wait for one)."""
    path = ws.queue_dir.root / name
    try:
        return path.read_bytes()
    except OSError as exc:
        raise vanished(ws, path, exc) from None


def vanished(ws: Workspace, path: Path, exc: OSError) -> QueueError:
    if isinstance(exc, FileNotFoundError):
        why = "was removed while pq read the series (another pq command changed patches/ meanwhile)"
    else:
        why = f"cannot be read ({exc.strerror or exc})"
    return QueueError(f"{why}; nothing was changed: run the command again", path=ws.rel(path))


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
    want = {stack.REF_BASE: loaded.base, stack.REF_TOP: loaded.top(applied)}
    want.update((stack.REF_PATCHES + name, commit) for name, commit in loaded.patches)
    # only the stack's own refs: a pending refresh's (refs/pq/refresh/*), the recorded resolutions, the
    # previous build, the journal's and any other ref under refs/pq/ are never moved or deleted here
    have = {
        k: v
        for k, v in ws.repo.refs().items()
        if k in (stack.REF_BASE, stack.REF_TOP) or k.startswith(stack.REF_PATCHES)
    }
    return ref_moves(have, want)


def ref_moves(have: dict[str, str], want: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """The moves (old, new) that turn the refs ``have`` into ``want`` (a ref missing from ``want`` goes)."""
    return {
        ref: (have.get(ref), want.get(ref)) for ref in sorted(set(want) | set(have)) if have.get(ref) != want.get(ref)
    }
