"""What a queue is: the upstream file and class its runners copy, the downstream package they live in, the output.

A :class:`QueueSpec` is data: ``queue.toml`` holds it (its ``[queue]`` table, format 4; a format-3 file, which
has none, is the queue of the ``npu`` preset) and :func:`patch_queue.series.queue.parse_queue` reads it, in one
place, for every command.  The two real queues are presets (:mod:`patch_queue.presets`); any other pair is set by
``pq adopt``'s options.  No code below ``patch_queue/commands/`` names one queue's files or classes: it is given
the spec and asks it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

# the keys of the [queue] table, each a field of QueueSpec, in the order pq writes them
TABLE = "queue"


@dataclass(frozen=True)
class QueueSpec:
    """One queue of copied runner methods (see the module's doc)."""

    preset: str  # the preset it was made from ("" for a pair set by options alone)
    upstream_dist: str  # the upstream distribution (``pip install`` name)
    upstream_file: str  # the upstream module the runners copy methods of, from the project root
    upstream_class: str  # the class of that module whose methods are copied
    upstream_git: str  # where its history comes from: a git repository's URL ("" = the registry's releases only)
    downstream_dist: str  # the downstream distribution
    package: str  # the downstream package folder the runners live in
    out: str  # the output folder pq builds the runners into
    wheel: str  # the distribution name of the wheel `pq build --wheel` writes
    wheel_requires: tuple[str, ...]  # requirements the wheel pins as the upstream's own metadata pins them
    fence: str  # the word of the downstream's fence comments ("" when it fences none of its edits)
    rules: str  # the check rule set that applies ("" = only the rules of every queue)
    gpu_reference: str  # the preset of the queue of GPU reference runners these runners mirror ("" = none)

    @property
    def upstream_package(self) -> str:
        """The upstream's top-level package: the first folder of its file."""
        return self.upstream_file.split("/", 1)[0]

    @property
    def upstream_module(self) -> str:
        """The upstream file as a module name."""
        return self.upstream_file.removesuffix(".py").replace("/", ".")

    @property
    def downstream_package(self) -> str:
        """The downstream's top-level package: the first folder of its package."""
        return self.package.split("/", 1)[0]

    @property
    def upstream_url(self) -> str:
        """The web page of the upstream's repository ("" when its history is not a git repository on the web)."""
        url = self.upstream_git
        return url.removesuffix(".git") if url.startswith(("https://", "http://")) else ""

    def with_options(self, **options: str | None) -> QueueSpec:
        """The spec with every option given (not None) set; a changed spec is no preset's any more."""
        given = {k: v for k, v in options.items() if v is not None}
        if not given or all(getattr(self, k) == v for k, v in given.items()):
            return self
        return replace(self, preset="", **given)  # type: ignore[arg-type]


KEYS = tuple(f.name for f in fields(QueueSpec))
