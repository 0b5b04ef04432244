"""The queue on disk: ``patches/queue.toml``, ``patches/series`` and the ``NNNN-name.patch`` files.

``queue.toml`` (format 3; format 4 adds ``[queue]``, below)::

    format = 3

    [upstream]                       # the pin the series applies to
    name = "vllm-ascend"
    kind = "git"                     # "git" | "release" | "dir"
    spec = "git:/path/or/url@<sha>"  # re-resolvable source spec (see patch_queue.sources)
    pin = "<sha>"                    # git: commit; release: "<archive>#sha256=<hex>"; dir: ""
    label = "git 1a2b3c4d5e6f (upstream 05e095a202bd)"
    public_commit = "<sha>"          # git only: the public vllm-ascend commit

    [upstream.files]                 # sha256 of every vendored upstream file
    "vllm_ascend/worker/model_runner_v1.py" = "<hex>"

    [downstream]                     # the hand-maintained release the series was adopted from
    name = "vllm-omni"
    release = "0.30.0"               # or "" when adopted from a directory
    package = "vllm_omni/platforms/npu/worker"   # where the modules live in-tree

    [projection]                     # how carried upstream symbols are laid out in the base
    formatter = "ruff"               # the downstream's formatter ("" = upstream text unchanged)
    line_length = 120

    [[module]]                       # one per output module, in file-name order
    path = "npu_model_runner.py"
    upstream = "vllm_ascend/worker/model_runner_v1.py"   # "" for omni-only modules
    symbols = ["NPUModelRunner._update_states", "NPUModelRunner._dummy_run"]  # carried, module order

    [build]                          # sha256 of every module at the top of the whole series
    "npu_model_runner.py" = "<hex>"

    [[lineage]]                      # how the series came to be, oldest first; the first is its origin
    kind = "adopt"                   # "adopt" | "refresh" | "merge" | "edit" | "import"
    command = "adopt"                # the pq command that made the step
    downstream = "vllm-omni==0.30.0" # adopt: the hand-maintained release; merge: the release it took in;
                                     # sync-gpu: the release it moved the pin to
    since = "vllm-omni==0.24.0"      # merge: the release the series held before (the merge's ancestor)
    resolved = "<sha256>"            # merge: the merge's body its recorded edit (the resolution) was made on
    placed = "method"                # merge: where it put the release's edits of upstream lines (absent: the
                                     # skeleton): see below
    bodies = 2                       # how its patch files are written (absent: 1): see below
    edited = []                      # patches whose bodies carry recorded edits (refs/pq/resolutions)
    accepted_errors = []             # refresh: the errors of `pq check` it was finished over (--accept-errors);
                                     # written only when there are some
    patches = ["<sha256> 0001-init.patch", ...]   # the series after the step, with each body's sha256
    bases = ["<sha256> 0005-x.patch", ...]        # per edited patch, the body its edit was made on (optional)
    [lineage.upstream]               # adopt: the upstream it was adopted at; refresh: the target
    kind = "git"                     # same keys as [upstream], files included
    ...
    [lineage.files]                  # merge: sha256 of every module of the release it took in
    "npu_model_runner.py" = "<hex>"

The lineage is the recipe of the patch bodies: ``pq reproduce`` adopts the origin, then replays
every step (a refresh onto its pinned target, the recorded edits of ``edited`` patches) and
checks every body's sha256.  ``bases`` names, for each ``edited`` patch, the sha256 of the body
its recorded edit was made on: in a refresh pq's merge result, in an edit step the body before
it (the empty body's for a patch the step made).  It is what ties the step to its edit in
``refs/pq/resolutions``: a pq whose merge gives another body merges the edit onto it three-way
from that base (see :mod:`patch_queue.series.rerere`).  Steps written before pq recorded
``bases`` have none (the key is left out when empty); their edits are found by the body the
merge gives or by the body the step records.  The bodies in ``patches/``, when present, must
have the sha256 of the last step (a hand edit is refused; ``pq accept`` takes it as an
``import`` step).  An ``import`` step takes bodies as they were, not reproducible without them.
A ``merge`` step (``pq merge``) took a newer release of the downstream in: ``pq reproduce`` reads
both releases again (each module of ``downstream`` checked against ``[lineage.files]``), merges
them into the series as it stands three-way, applies the recorded resolution made on the body
``resolved`` names (none when the merge was clean), and puts the result into the patches that own
its lines (see :mod:`patch_queue.commands.merge`).  ``placed = "method"``: the release's edits of a carried upstream
method went into the patch that carries the method, so the skeleton's copy stays upstream's text as projected
(:func:`patch_queue.series.absorb.relocate`); a step without the key (pq wrote it before) put them into the
module's skeleton patch, and ``pq reproduce`` puts them there again, so its bodies reproduce byte for byte.
``bodies`` is the form of the step's patch files, which its sha256s are of: 1 (the key absent, every step
pq wrote before it existed) is ``git format-patch``'s own, whose first line ``From <commit id>`` names the
patch's commit and so changes with every patch below it; 2 writes that line with a zero id, as
``git format-patch --zero-commit`` does, so an edit of one patch leaves the files of the others byte for byte
(unless it moves the lines they change).  pq writes form 2; ``pq reproduce`` exports each step's bodies in the
step's own form, so a lineage recorded in form 1 still verifies, and the first step pq writes after it is in
form 2 (every body then has a new sha256, only its From line differs).
``series`` lists the patch files in order, one a line; blank lines and ``#`` comments are
ignored, as quilt reads it, and kept where they are when pq writes it again (:func:`render_series`).  Every
name must be a plain file name inside ``patches/``.  ``queue.toml`` is written whole in the layout above: a
comment or a key a user adds to it would be lost, so a write is refused while it holds one
(:meth:`QueueDir.refuse_unkept`).

**Names.** A module's name and a patch's file name (``NNNN-name.patch``, the whole of it) follow one rule
(:func:`name_problem`), checked at every door a name comes in by (a module file of a folder or release pq
adopts or merges, ``pq new``/``rename``/``import``/``squash``, ``series``, ``queue.toml``'s modules and lineage):
a name git takes as a ref (``git check-ref-format``: a patch is ``refs/pq/patches/<name>``), one file name
of at most 250 bytes in UTF-8 (the 255 of a path component, less the ``.lock`` of git's lock file of the ref),
with no control character and no backslash.
A name pq makes itself (a patch of ``pq adopt``, ``pq merge``, ``pq sync-gpu``, ``pq import`` without ``-n``) is
cut to fit (:func:`cut_slug`).

**Format 4** adds the ``[queue]`` table after ``format``: what the queue is (:class:`patch_queue.spec.QueueSpec`:
the upstream distribution, file and class and where its history is, the downstream distribution and package, the
output folder, the wheel's name and requirements, the fence word, the check rule set, the GPU reference), every key
written; a table that names a ``preset`` takes the keys it leaves out from it (:mod:`patch_queue.presets`).  A
file without the table (formats 1-3) is the queue of the default preset (``npu``), and pq writes that queue as
format 3, without the table, so its ``queue.toml`` stays byte for byte what it was; any other queue is written as
format 4.  A wrong key of ``[queue]`` is one line naming the file and the key's line (:func:`parse_spec`).

Format 1 (no ``[projection]`` table) is still read: its projection is the upstream text unchanged.
Formats 1 and 2 have no lineage: pq adds one (an ``import`` step of the bodies in ``patches/``)
at its next write, and ``pq reproduce`` refuses them.  The format version is checked first: a
newer version is refused, never half-read.  Writes go through
:func:`patch_queue.fsutil.atomic_write`.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from patch_queue import presets
from patch_queue.errors import QueueError
from patch_queue.spec import KEYS, TABLE, QueueSpec

FORMAT = 4
IMPLICIT = 3  # the format written for a queue of the default preset: no [queue] table, as before format 4
QUEUE_FILE = "queue.toml"
SERIES_FILE = "series"


@dataclass(frozen=True)
class Module:
    path: str
    upstream: str
    symbols: tuple[str, ...]


@dataclass(frozen=True)
class UpstreamPin:
    name: str
    kind: str
    spec: str
    pin: str
    label: str
    public_commit: str
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One step of the lineage."""

    kind: str  # "adopt" | "refresh" | "merge" | "edit" | "import"
    command: str
    patches: tuple[tuple[str, str], ...]  # (name, sha256 of the body) after the step, series order
    upstream: UpstreamPin | None = None  # adopt: where; refresh: the target
    downstream: str = ""  # adopt: "name==version" ("" when adopted from a folder); sync-gpu: the pin it moved to
    edited: tuple[str, ...] = ()
    accepted_errors: tuple[str, ...] = ()  # refresh: the errors of `pq check` it finished over ("file:line: ...")
    bases: tuple[tuple[str, str], ...] = ()  # (edited patch, sha256 of the body its recorded edit was made on)
    since: str = ""  # merge: the release the series held before ("name==version")
    files: tuple[tuple[str, str], ...] = ()  # merge: (module, sha256) of the release it took in
    resolved: str = ""  # merge: sha256 of the merge's body its recorded resolution was made on ("": clean)
    bodies: int = 1  # the form of its patch files (BODY_FORMS): 1 git's From <commit id> line, 2 a zero id
    placed: str = ""  # merge: PLACED_BY_METHOD (the release's edits of a carried method in its carrier), "" skeleton

    @property
    def names(self) -> list[str]:
        return [n for n, _h in self.patches]

    def base_of(self, name: str) -> str | None:
        """The sha256 of the body the recorded edit of ``name`` was made on (None: not recorded)."""
        return next((digest for n, digest in self.bases if n == name), None)


STEP_KINDS = ("adopt", "refresh", "merge", "edit", "import")
BODIES = 2  # the form of the patch files pq writes (``bodies`` of a lineage step: see the module's doc)
BODY_FORMS = (1, 2)
PLACED_BY_METHOD = "method"  # ``placed`` of a merge step that put a release's edits by method (see the module's doc)


@dataclass(frozen=True)
class Queue:
    upstream: UpstreamPin
    downstream_name: str
    downstream_release: str
    package: str
    modules: tuple[Module, ...]
    formatter: str = ""  # see patch_queue.series.fmt
    line_length: int = 120
    lineage: tuple[Step, ...] = ()  # () for formats 1 and 2
    build: dict[str, str] = field(default_factory=dict)  # module -> sha256 at the top of the series
    format: int = 3  # the format the file was read in (one made in code: 3, before a [queue] table)
    spec: QueueSpec = presets.DEFAULT  # what the queue is ([queue]; formats 1-3: the default preset)

    def module(self, path: str) -> Module | None:
        return next((m for m in self.modules if m.path == path), None)

    def upstream_paths(self) -> list[str]:
        return sorted({m.upstream for m in self.modules if m.upstream})


# bytes of a name: the 255 of one path component (Linux, macOS, Windows), less the ``.lock`` of the lock file git
# and libgit2 write beside a ref's (``refs/pq/patches/<name>.lock``); for a patch, the whole ``NNNN-name.patch``
NAME_MAX = 250
SLUG_MAX = 200  # bytes of a slug pq makes: room for the number, its own words and ``.patch``
# what git's check-ref-format refuses in one component, control characters and the backslash included
_REF_BAD = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|^\.|\.$|\.lock$")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a module's name or a patch's file name (None: it can).  The one rule of both:
    a plain file name of at most ``NAME_MAX`` bytes in UTF-8 that git takes as a ref's last component
    (``git check-ref-format``), with no control character and no backslash (each of which some command of
    git, the file system or the terminal reads otherwise)."""
    if not name:
        return "is empty"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a file name of bytes that are not UTF-8 (os.fsdecode's surrogates)
        return "is not UTF-8 text"
    if bad := re.search(r"[\x00-\x1f\x7f-\x9f]", name):
        return f"holds a control character (U+{ord(bad.group()):04X})"
    if "\\" in name:
        return "holds a backslash"
    if "/" in name:
        return "must be a plain file name (it holds a slash)"
    if size > NAME_MAX:
        return f"is {size} bytes long; a file name holds at most {NAME_MAX}"
    if _REF_BAD.search(name):
        return (
            "is no name git takes for a ref (`git check-ref-format`: no space, `~ ^ : ? * [`, `..` or `@{`, "
            "no `.` first nor last, no final `.lock`)"
        )
    return None


def shown_name(name: str) -> str:
    """``name`` for a message: quoted, its control characters escaped, a long one cut."""
    text = name if len(name) <= 60 else name[:40] + "…" + name[-12:]
    text = re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: repr(m.group())[1:-1], text)
    return "'" + text.encode("utf-8", "backslashreplace").decode("utf-8") + "'"


def cut_slug(slug: str) -> str:
    """A slug pq makes itself (from a module's, a method's or a file's name), cut to ``SLUG_MAX`` bytes so that
    every file name made of it (``NNNN-sync-gpu-<slug>-N.patch``) fits the file system; a name the user gives
    is refused instead (:func:`name_problem`)."""
    return slug.encode("utf-8")[:SLUG_MAX].decode("utf-8", "ignore").rstrip("-.")


_PIN_KEYS = ("name", "kind", "spec", "pin", "label", "public_commit")  # UpstreamPin's string fields, in order


def toml_string(value: str) -> str:
    """A TOML basic string holding exactly ``value`` (quotes, backslashes and every control character escaped)."""
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    out = re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\u{ord(m.group()):04x}", out)
    return f'"{out}"'


def _pin_lines(table: str, up: UpstreamPin) -> list[str]:
    return [
        f"[{table}]",
        *(f"{key} = {toml_string(getattr(up, key))}" for key in _PIN_KEYS),
        "",
        f"[{table}.files]",
        *(f"{toml_string(path)} = {toml_string(digest)}" for path, digest in sorted(up.files.items())),
    ]


def _list(key: str, values: Sequence[str]) -> list[str]:
    if not values:
        return [f"{key} = []"]
    return [f"{key} = [", *(f"    {toml_string(v)}," for v in values), "]"]


def written_format(spec: QueueSpec) -> int:
    """The format pq writes a queue of ``spec`` in: a queue of the default preset as format 3 (no ``[queue]``
    table: the file stays byte for byte what pq wrote before format 4), any other as format 4."""
    return IMPLICIT if spec == presets.DEFAULT else FORMAT


def _spec_lines(spec: QueueSpec) -> list[str]:
    if written_format(spec) == IMPLICIT:
        return []
    out = [f"[{TABLE}]"]
    for key in KEYS:
        value = getattr(spec, key)
        out += _list(key, value) if isinstance(value, tuple) else [f"{key} = {toml_string(value)}"]
    return [*out, ""]


def render_queue(q: Queue) -> str:
    lines = [
        "# pq patch queue; the format is documented in patch_queue/series/queue.py.",
        f"format = {written_format(q.spec)}",
        "",
        *_spec_lines(q.spec),
        *_pin_lines("upstream", q.upstream),
        "",
        "[downstream]",
        f"name = {toml_string(q.downstream_name)}",
        f"release = {toml_string(q.downstream_release)}",
        f"package = {toml_string(q.package)}",
        "",
        "[projection]",
        f"formatter = {toml_string(q.formatter)}",
        f"line_length = {q.line_length}",
    ]
    for m in q.modules:
        lines += ["", "[[module]]", f"path = {toml_string(m.path)}", f"upstream = {toml_string(m.upstream)}"]
        lines += _list("symbols", m.symbols)
    lines += [
        "",
        "[build]",
        *(f"{toml_string(path)} = {toml_string(digest)}" for path, digest in sorted(q.build.items())),
    ]
    for step in q.lineage:
        lines += [
            "",
            "[[lineage]]",
            f"kind = {toml_string(step.kind)}",
            f"command = {toml_string(step.command)}",
            f"downstream = {toml_string(step.downstream)}",
            *_list("edited", step.edited),
            *(_list("accepted_errors", step.accepted_errors) if step.accepted_errors else []),
            *_list("patches", [f"{digest} {name}" for name, digest in step.patches]),
            *(_list("bases", [f"{digest} {name}" for name, digest in step.bases]) if step.bases else []),
            *([f"since = {toml_string(step.since)}"] if step.kind == "merge" else []),
            *([f"resolved = {toml_string(step.resolved)}"] if step.resolved else []),
            *([f"bodies = {step.bodies}"] if step.bodies != 1 else []),
            *([f"placed = {toml_string(step.placed)}"] if step.placed else []),
        ]
        if step.upstream is not None:
            lines += ["", *_pin_lines("lineage.upstream", step.upstream)]
        if step.files:
            lines += ["", "[lineage.files]", *(f"{toml_string(p)} = {toml_string(d)}" for p, d in step.files)]
    return "\n".join(lines) + "\n"


def _str(table: dict[str, object], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str):
        raise QueueError(f"{where}.{key} must be a string", path=QUEUE_FILE)
    return value


def parse_queue(text: str, *, path: str = QUEUE_FILE) -> Queue:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        if line is None and (at := re.search(r" \(at line (\d+), column \d+\)$", str(exc))):
            line = int(at.group(1))  # Python < 3.14 has the position only in the text
        msg = getattr(exc, "msg", str(exc).split(" (at ")[0])
        raise QueueError(f"not valid TOML: {msg}", path=path, line=line) from None
    fmt = data.get("format")
    if not isinstance(fmt, int):
        raise QueueError("missing integer 'format'", path=path)
    if fmt > FORMAT:
        raise QueueError(f"format {fmt} is newer than this pq understands ({FORMAT}); upgrade pq", path=path)
    if fmt < 1:
        raise QueueError(f"unknown format {fmt}", path=path)
    try:
        down = data["downstream"]
        pin = _parse_pin(data["upstream"], "upstream", path)
        modules = []
        for i, m in enumerate(data.get("module", [])):
            symbols = m.get("symbols", [])
            if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
                raise QueueError(f"module[{i}].symbols must be a list of strings", path=path)
            mpath = _str(m, "path", f"module[{i}]")
            if problem := name_problem(mpath):
                raise QueueError(f"module[{i}].path {shown_name(mpath)} {problem}", path=path)
            modules.append(Module(mpath, _str(m, "upstream", f"module[{i}]"), tuple(symbols)))
        proj = data.get("projection", {}) if fmt >= 2 else {}
        formatter = _str(proj, "formatter", "projection") if fmt >= 2 else ""
        line_length = proj.get("line_length", 120)
        if not isinstance(line_length, int) or not 40 <= line_length <= 400:
            raise QueueError("projection.line_length must be an integer from 40 to 400", path=path)
        build = data.get("build", {}) if fmt >= 3 else {}
        if not isinstance(build, dict) or not all(isinstance(v, str) for v in build.values()):
            raise QueueError("[build] must map module paths to sha256 strings", path=path)
        lineage = _parse_lineage(data.get("lineage", []) if fmt >= 3 else [], path)
        if fmt >= 3 and not lineage:
            raise QueueError("format 3 needs a [[lineage]] (where the series came from)", path=path)
        name, release, package = (_str(down, key, "downstream") for key in ("name", "release", "package"))
        build = {str(k): v for k, v in build.items()}
        if bad := next((k for k in build if name_problem(k)), None):
            raise QueueError(f"[build]: module {shown_name(bad)} {name_problem(bad)}", path=path)
        spec = parse_spec(data, text, path)
        return Queue(pin, name, release, package, tuple(modules), formatter, line_length, lineage, build, fmt, spec)
    except KeyError as exc:
        raise QueueError(f"missing table or key {exc.args[0]!r}", path=path) from None
    except AttributeError:
        raise QueueError("a table has the wrong type", path=path) from None


def _key_line(text: str, table: str, key: str | None) -> int | None:
    """The line of ``key`` in the table ``[table]`` of the TOML ``text`` (None: not found); of the table's header
    when ``key`` is None."""
    inside = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("["):
            inside = line.split("#", 1)[0].strip() == f"[{table}]"
            if inside and key is None:
                return lineno
        elif inside and key is not None and re.match(rf'["\']?{re.escape(key)}["\']?\s*=', line):
            return lineno
    return None


def parse_spec(data: dict[str, object], text: str, path: str) -> QueueSpec:
    """The queue the parsed ``queue.toml`` (``data``, its ``text`` for the lines of errors) describes: its
    ``[queue]`` table (format 4), every key given or taken from the table's ``preset``; a file of an earlier format,
    which has none, is the default preset's queue (migrated: format 4 is written when pq writes it anyway)."""
    fmt = data.get("format")
    if not isinstance(fmt, int) or not 1 <= fmt <= FORMAT:  # parse_queue says so first
        return presets.DEFAULT
    raw = data.get(TABLE)
    if raw is None:
        if isinstance(fmt, int) and fmt >= FORMAT:
            raise QueueError(f"format {fmt} needs a [{TABLE}] table (what the queue is)", path=path)
        return presets.DEFAULT
    if not isinstance(raw, dict):
        raise QueueError(f"{TABLE} must be a table ([{TABLE}])", path=path, line=_key_line(text, TABLE, None))
    if fmt < FORMAT:
        raise QueueError(
            f"[{TABLE}] needs format = {FORMAT} (this file says format = {fmt})",
            path=path,
            line=_key_line(text, TABLE, None),
        )
    if unknown := next((k for k in raw if k not in KEYS), None):
        raise QueueError(
            f"[{TABLE}].{unknown} is no key of a queue (they are {', '.join(KEYS)})",
            path=path,
            line=_key_line(text, TABLE, str(unknown)),
        )
    for key, value in raw.items():
        ok = (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
            if key == "wheel_requires"
            else isinstance(value, str)
        )
        if not ok:
            what = "a list of strings" if key == "wheel_requires" else "a string"
            raise QueueError(f"[{TABLE}].{key} must be {what}", path=path, line=_key_line(text, TABLE, key))
    name = raw.get("preset", "")
    base = presets.preset(str(name)) if name else None
    if name and base is None:
        raise QueueError(
            f"[{TABLE}].preset {name!r} is no preset (they are {', '.join(presets.PRESETS)})",
            path=path,
            line=_key_line(text, TABLE, "preset"),
        )
    values: dict[str, object] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items()}
    if base is None:
        missing = [k for k in KEYS if k not in values and k != "preset"]
        if missing:
            raise QueueError(
                f"[{TABLE}] has no preset and no {', '.join(missing)}", path=path, line=_key_line(text, TABLE, None)
            )
        values.setdefault("preset", "")
        return QueueSpec(**values)  # type: ignore[arg-type]
    return QueueSpec(**{k: values.get(k, getattr(base, k)) for k in KEYS})  # type: ignore[arg-type]


def _parse_pin(up: dict[str, object], where: str, path: str) -> UpstreamPin:
    files = up.get("files", {})
    if not isinstance(files, dict):
        raise QueueError(f"{where}.files must be a table", path=path)
    name, kind, spec, pin, label, public_commit = (_str(up, key, where) for key in _PIN_KEYS)
    return UpstreamPin(name, kind, spec, pin, label, public_commit, {str(k): str(v) for k, v in files.items()})


_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _parse_lineage(raw: object, path: str) -> tuple[Step, ...]:
    if not isinstance(raw, list):
        raise QueueError("lineage must be an array of tables ([[lineage]])", path=path)
    steps = []
    for i, item in enumerate(raw):
        where = f"lineage[{i}]"
        if not isinstance(item, dict):
            raise QueueError(f"{where} must be a table", path=path)
        kind = _str(item, "kind", where)
        if kind not in STEP_KINDS:
            raise QueueError(f"{where}.kind {kind!r} is not one of {', '.join(STEP_KINDS)}", path=path)
        if (i == 0 and kind not in ("adopt", "import")) or (i > 0 and kind == "adopt"):
            raise QueueError(
                f"{where}: a lineage starts with an adopt or import step, and an adopt step stands only there",
                path=path,
            )
        patches = _digests(item, "patches", where, path)
        edited = item.get("edited", [])
        if not isinstance(edited, list) or not all(isinstance(e, str) for e in edited):
            raise QueueError(f"{where}.edited must be a list of strings", path=path)
        if set(edited) - {n for n, _d in patches}:
            raise QueueError(f"{where}.edited names a patch the step does not list", path=path)
        accepted = item.get("accepted_errors", [])
        if not isinstance(accepted, list) or not all(isinstance(e, str) for e in accepted):
            raise QueueError(f"{where}.accepted_errors must be a list of strings", path=path)
        if accepted and kind not in ("refresh", "merge"):
            raise QueueError(f"{where}.accepted_errors: only a refresh or merge step finishes over errors", path=path)
        bases = _digests(item, "bases", where, path)
        if {n for n, _d in bases} - set(edited) or len({n for n, _d in bases}) != len(bases):
            raise QueueError(f"{where}.bases names a patch twice or one the step's edited does not list", path=path)
        up = item.get("upstream")
        if up is not None and not isinstance(up, dict):
            raise QueueError(f"{where}.upstream must be a table", path=path)
        command = _str(item, "command", where)
        pin = _parse_pin(up, f"{where}.upstream", path) if up is not None else None
        downstream = _str(item, "downstream", where)
        since, resolved, placed = "", "", ""
        files: tuple[tuple[str, str], ...] = ()
        if kind == "merge":
            since = _str(item, "since", where)
            resolved = item.get("resolved", "")
            if not isinstance(resolved, str) or (resolved and not _DIGEST.match(resolved)):
                raise QueueError(f"{where}.resolved must be a sha256", path=path)
            raw_files = item.get("files", {})
            if (
                (downstream and "==" not in downstream)
                or not isinstance(raw_files, dict)
                or not raw_files
                or not all(isinstance(v, str) and _DIGEST.match(v) for v in raw_files.values())
            ):
                raise QueueError(
                    f"{where}: a merge step names its release (downstream = 'name==version', or '' for a folder) "
                    "and the sha256 of each of its modules ([lineage.files])",
                    path=path,
                )
            files = tuple(sorted((str(k), v) for k, v in raw_files.items()))
            placed = item.get("placed", "")
            if placed not in ("", PLACED_BY_METHOD):
                raise QueueError(f"{where}.placed must be {PLACED_BY_METHOD!r} (a newer pq wrote it?)", path=path)
            if bad := next((k for k, _v in files if name_problem(k)), None):
                raise QueueError(f"{where}.files: module {shown_name(bad)} {name_problem(bad)}", path=path)
        bodies = item.get("bodies", 1)
        if type(bodies) is not int or bodies not in BODY_FORMS:
            raise QueueError(
                f"{where}.bodies must be one of {', '.join(map(str, BODY_FORMS))} (a newer pq wrote it?)", path=path
            )
        steps.append(
            Step(
                kind,
                command,
                tuple(patches),
                pin,
                downstream,
                tuple(edited),
                tuple(accepted),
                tuple(bases),
                since,
                files,
                resolved,
                bodies,
                str(placed),
            )
        )
    return tuple(steps)


def _digests(item: dict[str, object], key: str, where: str, path: str) -> list[tuple[str, str]]:
    """A lineage step's list of ``"<sha256> <name>.patch"`` rows, as (name, sha256) pairs."""
    rows = item.get(key, [])
    if not isinstance(rows, list):
        raise QueueError(f"{where}.{key} must be a list of strings", path=path)
    out = []
    for row in rows:
        digest, _, name = str(row).partition(" ")
        if not _DIGEST.match(digest) or not _NAME.match(name):
            raise QueueError(f"{where}.{key}: {row!r} is not '<sha256> <name>.patch'", path=path)
        if problem := name_problem(name):
            raise QueueError(f"{where}.{key}: patch name {shown_name(name)} {problem}", path=path)
        out.append((name, digest))
    return out


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.patch$")


def parse_series(text: str, *, path: str = SERIES_FILE) -> list[str]:
    names: list[str] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        # quilt allows options after the name (-p1); we write none and accept none
        if not _NAME.match(line):
            raise QueueError(f"{line!r} is not a patch file name inside patches/", path=path, line=lineno)
        if problem := name_problem(line):
            raise QueueError(f"patch name {shown_name(line)} {problem}", path=path, line=lineno)
        if line in seen:
            raise QueueError(f"{line} is listed twice (first on line {seen[line]})", path=path, line=lineno)
        seen[line] = lineno
        names.append(line)
    return names


def render_series(names: list[str], before: str = "") -> str:
    """``series`` listing ``names``, written over ``before`` (the file as it is, "" for a new one): the user's
    lines stay where they were (comments, blank lines, a name's own trailing comment), a renamed or renumbered
    patch keeps its line, a removed one loses it, and a new one goes after the line of the patch before it."""
    if not before.strip():
        before = "# pq series: patch order, one file a line (quilt format)\n"
    lines = before.splitlines(keepends=True)
    lines[-1] = lines[-1] if lines[-1].endswith("\n") else lines[-1] + "\n"
    nl = "\r\n" if lines[0].endswith("\r\n") else "\n"
    at = [i for i, line in enumerate(lines) if line.split("#", 1)[0].strip()]  # the lines listing a patch
    old = [lines[i].split("#", 1)[0].strip() for i in at]
    out: dict[int, list[str]] = {i: [] for i in at}  # what each listing line becomes
    after: dict[int, list[str]] = {}  # new lines after a line (-1: where the first listing is, or the end)
    stems = difflib.SequenceMatcher(None, [_stem(n) for n in old], [_stem(n) for n in names], autojunk=False)
    for op, i1, i2, j1, j2 in stems.get_opcodes():
        kept = min(i2 - i1, j2 - j1) if op in ("equal", "replace") else 0
        for k in range(kept):  # the same patch (renamed, renumbered): its line, the name changed in it
            out[at[i1 + k]] = [lines[at[i1 + k]].replace(old[i1 + k], names[j1 + k], 1)]
        if j1 + kept < j2:
            where = at[i1 + kept - 1] if i1 + kept > 0 else -1
            after.setdefault(where, []).extend(n + nl for n in names[j1 + kept : j2])
    text = ""
    for i, line in enumerate(lines):
        if at and i == at[0]:
            text += "".join(after.get(-1, []))
        text += "".join(out[i]) if i in out else line
        text += "".join(after.get(i, []))
    return text if at else text + "".join(after.get(-1, []))


# a TOML string (multi-line, basic, literal) or a comment: scanned left to right, a "#" inside a string is no comment
_TOML_TOKEN = re.compile(
    r'"""(?:[^\\]|\\.)*?"""'  # a multi-line basic string
    r"|'''.*?'''"  # a multi-line literal string
    r'|"(?:[^"\\\n]|\\.)*"'  # a basic string
    r"|'[^'\n]*'"  # a literal string
    r"|#[^\n]*",  # a comment
    re.S,
)


def _comment_lines(text: str) -> Iterator[int]:
    """The lines of the TOML ``text`` that hold a comment: a ``#`` outside every string."""
    for m in _TOML_TOKEN.finditer(text):
        if m.group().startswith("#"):
            yield text.count("\n", 0, m.start()) + 1


def _dropped(have: object, kept: object, where: str = "") -> str | None:
    """The first key of ``have`` (parsed TOML) that ``kept`` does not hold with the same value, as a dotted path;
    None when it keeps them all (``kept`` may hold more)."""
    if isinstance(have, dict) and isinstance(kept, dict):
        for key, value in have.items():
            at = f"{where}.{key}" if where else str(key)
            lost = at if key not in kept else _dropped(value, kept[key], at)
            if lost is not None:
                return lost
        return None
    if isinstance(have, list) and isinstance(kept, list) and len(have) == len(kept):
        return next((lost for i, v in enumerate(have) if (lost := _dropped(v, kept[i], f"{where}[{i}]"))), None)
    return None if have == kept else where


def _stem(name: str) -> str:
    """A patch file's name without its series number: what stays when the series is renumbered."""
    return re.sub(r"^\d+-", "", name)


@dataclass(frozen=True)
class QueueDir:
    """The ``patches/`` folder."""

    root: Path

    @property
    def queue_path(self) -> Path:
        return self.root / QUEUE_FILE

    @property
    def series_path(self) -> Path:
        return self.root / SERIES_FILE

    def exists(self) -> bool:
        return self.queue_path.is_file()

    def shown(self, name: str) -> str:
        """How errors name a file of this folder: ``patches/<name>``, as the maintainer sees it."""
        return f"{self.root.name}/{name}"

    def _text(self, path: Path) -> str:
        data = path.read_bytes()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise QueueError(
                f"not UTF-8 (byte 0x{data[exc.start]:02x})",
                path=self.shown(path.name),
                line=data.count(b"\n", 0, exc.start) + 1,
            ) from None

    def queue_bytes(self, q: Queue, *, anew: bool = False) -> bytes:
        """``queue.toml`` holding ``q``, to write over the file as it is (see :meth:`refuse_unkept`; ``anew``: over
        whatever it holds, for a new series)."""
        if not anew:
            self.refuse_unkept()
        return render_queue(q).encode()

    def refuse_unkept(self) -> None:
        """pq writes ``queue.toml`` whole, in the layout of :func:`render_queue` (its own first line, its key order,
        its arrays), which keeps every key pq reads and nothing else: one line, before anything is written, naming
        a comment or a key of the user's that the next write would drop."""
        if not self.queue_path.is_file():
            return
        text = self._text(self.queue_path)
        shown = self.shown(QUEUE_FILE)
        why = f"pq writes this file whole, in its own layout ({__name__.replace('.', '/')}.py)"
        ours = text.startswith("# pq patch queue")
        line = next((n for n in _comment_lines(text) if not (n == 1 and ours)), None)
        if line is not None:
            raise QueueError(
                f"holds a comment pq would drop: {why}; move the comment elsewhere (a commit message), then run the "
                "command again",
                path=shown,
                line=line,
            )
        queue = parse_queue(text, path=shown)
        lost = _dropped(tomllib.loads(text), tomllib.loads(render_queue(queue))) if queue.format >= IMPLICIT else None
        if lost is not None:
            raise QueueError(
                f"holds {lost}, which pq would drop: {why}; remove it, then run the command again",
                path=shown,
            )

    def load_queue(self) -> Queue:
        if not self.queue_path.is_file():
            raise QueueError(
                "no queue here; run `pq adopt NAME==VERSION` first (a downstream release, or a folder of its runners)",
                path=str(self.queue_path),
            )
        return parse_queue(self._text(self.queue_path), path=self.shown(QUEUE_FILE))

    def load_spec(self) -> QueueSpec | None:
        """What the queue here is (None: no ``queue.toml``; the default preset's when the file is no TOML, which
        :meth:`load_queue` reports): its ``[queue]`` table alone, read as :func:`parse_queue` reads it."""
        if not self.queue_path.is_file():
            return None
        try:
            text = self._text(self.queue_path)
            data = tomllib.loads(text)
        except (QueueError, tomllib.TOMLDecodeError):
            return presets.DEFAULT
        return parse_spec(data, text, self.shown(QUEUE_FILE))

    def series_text(self) -> str:
        """``series`` as it is ("" when there is none): what a new one is written over."""
        return self._text(self.series_path) if self.series_path.is_file() else ""

    def load_series(self) -> list[str]:
        if not self.series_path.is_file():
            return []
        text = self._text(self.series_path)
        names = parse_series(text, path=self.shown(SERIES_FILE))
        for name in names:
            if not (self.root / name).is_file():
                lineno = next(i for i, raw in enumerate(text.splitlines(), 1) if raw.split("#", 1)[0].strip() == name)
                raise QueueError(f"names {name}, which does not exist", path=self.shown(SERIES_FILE), line=lineno)
        return names
