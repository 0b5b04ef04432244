"""Pure measurements behind ``bench/conflict_table.py`` and ``bench/bench.py``: text in, numbers out.

- the baseline: plain ``git merge-file --diff3`` on one carried method's three texts;
- which downstream symbol carries an upstream one (the mapping ``pq adopt`` uses);
- fence lines kept, upstream lines dropped without a flag, agreement of a resolution with the
  maintainers' own next release;
- work saved: how far pq's output of an upgrade is from the maintainers' next release, against how
  far the old release is (multisets of code lines), split by side, and the omni lines pq ported.
"""

from __future__ import annotations

import difflib
import functools
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patch_queue.merge import symbols
from patch_queue.merge.markers import one_side

UPSTREAM_CLASS = "NPUModelRunner"
FENCE_WORD = "Omni-new"
_SPACE = re.compile(r"\s+")


# -- baseline ---------------------------------------------------------------------------------


def count_regions(merged: str) -> int:
    """Conflict regions of a diff3 merge: lines that open one."""
    return sum(1 for line in merged.splitlines() if line.startswith("<<<<<<<"))


def merge_file_regions(base: str, ours: str, theirs: str) -> tuple[int, str]:
    """(regions, merged text) of ``git merge-file --diff3 -p ours base theirs``."""
    with tempfile.TemporaryDirectory(prefix="pq-merge-file-") as tmp:
        paths = []
        for name, text in (("ours", ours), ("base", base), ("theirs", theirs)):
            path = Path(tmp) / name
            path.write_text(text, encoding="utf-8")
            paths.append(str(path))
        proc = subprocess.run(
            ["git", "merge-file", "--diff3", "-p", "-L", "omni", "-L", "base", "-L", "upstream", *paths],
            capture_output=True,
            text=True,
            check=False,
        )
    # merge-file exits with the number of conflicts (capped), negative on error
    if proc.returncode < 0 or proc.returncode > 127:
        raise RuntimeError(f"git merge-file failed ({proc.returncode}): {proc.stderr.strip()}")
    return count_regions(proc.stdout), proc.stdout


# -- symbols ----------------------------------------------------------------------------------


def downstream_symbol(
    module_text: str, upstream_name: str, *, path: str, cls: str = UPSTREAM_CLASS
) -> symbols.Symbol | None:
    """The downstream symbol that carries ``upstream_name``, as ``pq adopt`` maps them.

    A top-level name maps to itself; ``NPUModelRunner.m`` maps to the first ``Class.m`` of the
    module (each runner module holds one class).
    """
    found = symbols.symbols_ast(module_text, path=path)
    if "." not in upstream_name:
        return found.get(upstream_name)
    owner, method = upstream_name.split(".", 1)
    if owner != cls:
        return found.get(upstream_name)
    candidates = sorted(
        (s for s in found.values() if s.is_method and s.name.count(".") == 1 and s.name.split(".", 1)[1] == method),
        key=lambda s: s.start,
    )
    return candidates[0] if candidates else None


# -- omni fences ------------------------------------------------------------------------------


def fence_lines(text: str) -> Counter[str]:
    """Every line naming the Omni-new fence, stripped, as a multiset."""
    return Counter(line.strip() for line in text.splitlines() if FENCE_WORD in line)


def squashed(lines: Counter[str]) -> Counter[str]:
    """The same multiset with all whitespace taken out of each line."""
    out: Counter[str] = Counter()
    for line, count in lines.items():
        out[squash(line)] += count
    return out


def kept_count(old: Counter[str], new: Counter[str]) -> int:
    """How many of the ``old`` multiset's lines ``new`` still holds."""
    return sum(min(count, new.get(line, 0)) for line, count in old.items())


# -- upstream drops ---------------------------------------------------------------------------


def _content(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def added_lines(old: str, new: str) -> list[str]:
    """Stripped, non-blank lines that ``new`` adds over ``old`` (difflib insert and replace)."""
    a, b = _content(old), _content(new)
    out: list[str] = []
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("insert", "replace"):
            out.extend(b[j1:j2])
    return out


def _ruff() -> str | None:
    try:
        from ruff.__main__ import find_ruff_bin
    except ImportError:
        found = shutil.which("ruff")
        return found
    return str(find_ruff_bin())


def ruff_layout(text: str, *, is_method: bool, line_length: int = 120) -> str | None:
    """``text`` as ``ruff format --line-length N`` lays it out (the downstream's layout); None without ruff.

    A method is wrapped in a dummy class so that its real indentation counts against the width.
    Text ruff refuses comes back unchanged.
    """
    binary = _ruff()
    if binary is None:
        return None
    wrap = "class _Wrap:\n" if is_method else ""
    source = wrap + (text if text.endswith("\n") else text + "\n")
    proc = subprocess.run(
        [binary, "format", "--isolated", "--line-length", str(line_length), "--stdin-filename", "m.py", "-"],
        input=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.startswith(wrap):
        return text
    return proc.stdout[len(wrap) :]


def stripped_set(texts: Iterable[str]) -> set[str]:
    return {line.strip() for text in texts for line in text.splitlines() if line.strip()}


@dataclass(frozen=True)
class Drop:
    file: str
    symbol: str
    line: str

    def as_json(self) -> dict[str, str]:
        return {"file": self.file, "symbol": self.symbol, "line": self.line}


def unflagged_drops(
    file: str, symbol: str, added: Sequence[str], output: str, flagged_upstream: Sequence[str]
) -> list[Drop]:
    """Added upstream lines found neither in the output file nor in any conflict's or flag's upstream side."""
    seen = stripped_set([output]) | stripped_set(flagged_upstream)
    return [Drop(file, symbol, line) for line in added if line not in seen]


# -- agreement with the maintainers -----------------------------------------------------------


def squash(line: str) -> str:
    """A line compared without any whitespace."""
    return _SPACE.sub("", line)


def contains_run(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    if not needle:
        return True
    n = len(needle)
    first = needle[0]
    return any(haystack[i] == first and list(haystack[i : i + n]) == list(needle) for i in range(len(haystack) - n + 1))


def region_with_context(output_lines: Sequence[str], line: int, length: int) -> list[str]:
    """Lines ``line .. line+length-1`` (1-based) of the output plus the nearest non-blank line above and below."""
    start = min(max(line - 1, 0), len(output_lines))
    end = min(start + length, len(output_lines))
    above = next((output_lines[i] for i in range(start - 1, -1, -1) if output_lines[i].strip()), None)
    below = next((output_lines[i] for i in range(end, len(output_lines)) if output_lines[i].strip()), None)
    run = [*([above] if above is not None else []), *output_lines[start:end], *([below] if below is not None else [])]
    return [squash(x) for x in run if x.strip()]


def region_is_resolution(output: str, line: int, resolution: str) -> bool:
    """Whether the output holds ``resolution`` at ``line`` (whitespace ignored): does the flag's line point at it?"""
    lines = output.splitlines()
    want = [squash(x) for x in resolution.splitlines() if x.strip()]
    start = min(max(line - 1, 0), len(lines))
    got = [squash(x) for x in lines[start : start + len(resolution.splitlines())] if x.strip()]
    return got == want


def agrees(output: str, line: int, resolution: str, maintainers: str) -> bool:
    """The resolved region, with one non-blank line of context each side, is a run of the maintainers' file."""
    length = len(resolution.splitlines())
    run = region_with_context(output.splitlines(), line, length)
    theirs = [squash(x) for x in maintainers.splitlines() if x.strip()]
    return contains_run(theirs, run)


def flagged_upstream_sides(items: Iterable[Mapping[str, object]], file: str) -> list[str]:
    """The ``sides.upstream`` texts of the report's conflicts and flags for one file."""
    out: list[str] = []
    for item in items:
        if item.get("file") != file:
            continue
        sides = item.get("sides")
        if isinstance(sides, Mapping):
            up = sides.get("upstream")
            if isinstance(up, str):
                out.append(up)
    return out


# -- decision-level agreement -------------------------------------------------------------------

DECISIONS = (
    "block-moved",
    "both-inserted",
    "kept-replacement",
    "layout-only",
    "comment-only",
    "merged-words",
    "merged-tokens",
)
_COMMENT_TAIL = re.compile(r"\s+#[^\"']*$")


def code_lines(text: str) -> list[str]:
    """Lines compared as code: comments, blank lines and all whitespace dropped."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        out.append(squash(_COMMENT_TAIL.sub("", line)))
    return out


def _code_index(text: str) -> tuple[list[str], list[int]]:
    """Code lines of ``text`` and, for each, its 0-based line number in ``text``."""
    code: list[str] = []
    where: list[int] = []
    for number, line in enumerate(text.splitlines()):
        got = code_lines(line)
        if got:
            code.append(got[0])
            where.append(number)
    return code, where


@functools.lru_cache(maxsize=64)
def _alignment(
    output: str, maintainers: str
) -> tuple[tuple[str, ...], tuple[int, ...], dict[int, int], tuple[str, ...]]:
    """Code lines of the output, their line numbers, the LCS map output index -> maintainers' index, theirs."""
    out_code, where = _code_index(output)
    theirs, _ = _code_index(maintainers)
    matcher = difflib.SequenceMatcher(None, out_code, theirs, autojunk=False)
    mapping = {block.a + k: block.b + k for block in matcher.get_matching_blocks() for k in range(block.size)}
    return tuple(out_code), tuple(where), mapping, tuple(theirs)


def decision_agrees(flag: Mapping[str, object], output: str, maintainers: str) -> str:
    """ "agree", "disagree" or "n/a": does the maintainers' next release take the same decision?

    Judged on code (comments, blank lines and layout ignored).  The output and the maintainers'
    file are aligned line by line (longest common subsequence).  Judged are the first and last
    line of the region that came from the omni patch and the nearest code line above and below
    it: each of them that the maintainers' file also holds must be aligned, i.e. sit in the same
    order among the lines both files share (what the maintainers later changed inside their own
    omni code is not the decision).  Lines the decision took from upstream are judged only where the
    maintainers have them at that place (they often did not port them at all).  Upstream lines the decision dropped
    (kept-replacement, layout-only, comment-only) must not be in the maintainers' version of the
    same place.  Fewer than two judged lines: "n/a".
    """
    resolution = flag.get("resolution")
    sides = flag.get("sides")
    if not isinstance(resolution, str) or not isinstance(sides, Mapping):
        return "n/a"
    out_code, where, mapping, theirs = _alignment(output, maintainers)
    start = max(_int(flag.get("line")) - 1, 0)
    end = start + len(resolution.splitlines())
    inside = [i for i, n in enumerate(where) if start <= n < end]
    first = inside[0] if inside else next((i for i, n in enumerate(where) if n >= start), len(where))
    last = inside[-1] if inside else first - 1
    omni = set(code_lines(str(sides.get("patch", ""))))
    # the decision is where the omni lines go, not what the maintainers later did inside them:
    # judge the context lines and the first and last omni line of the region
    ends = [i for i in range(first, last + 1) if out_code[i] in omni]
    window = sorted({first - 1, last + 1, *ends[:1], *ends[-1:]} & set(range(len(out_code))))
    judged = [i for i in window if out_code[i] in set(theirs)]
    if len(judged) < 2:
        return "n/a"
    if any(i not in mapping for i in judged):
        return "disagree"
    lo, hi = mapping[judged[0]], mapping[judged[-1]]
    place = set(theirs[lo : hi + 1])
    # upstream lines of the decision that the maintainers have at that place must be in the same order
    upstream = set(code_lines(str(sides.get("upstream", "")))) - omni
    if any(i not in mapping and out_code[i] in place and out_code[i] in upstream for i in range(first, last + 1)):
        return "disagree"
    if flag.get("kind") in ("kept-replacement", "layout-only", "comment-only"):
        kept = set(code_lines(resolution))
        dropped = [x for x in code_lines(str(sides.get("upstream", ""))) if x not in kept]
        if any(x in place for x in dropped):
            return "disagree"
    return "agree"


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


# -- work saved ---------------------------------------------------------------------------------

Folder = Mapping[str, str]  # runner module file name -> its text
SIDES = {"patch": "theirs", "upstream": "ours"}  # pq's diff3 regions: <<<<<<< new upstream ||||||| base ======= patch


def take_side(text: str, side: str) -> str:
    """``text`` with every diff3 region of pq's output resolved to its ``"patch"`` or ``"upstream"`` side."""
    return one_side(text, SIDES[side])[0]


def code_multiset(text: str) -> Counter[str]:
    """A module's lines as work saved compares them: stripped, blank and comment-only lines dropped."""
    return Counter(s for line in text.splitlines() if (s := line.strip()) and not s.startswith("#"))


def multiset_distance(a: Counter[str], b: Counter[str]) -> int:
    """Lines added or removed between two multisets of lines."""
    return (a - b).total() + (b - a).total()


def distance(a: Folder, b: Folder) -> int:
    """d(A, B): :func:`multiset_distance` per module name, summed over both sides' modules (a missing one: empty)."""
    return sum(multiset_distance(code_multiset(a.get(n, "")), code_multiset(b.get(n, ""))) for n in a.keys() | b.keys())


def pooled(folder: Folder) -> Counter[str]:
    """All modules' :func:`code_multiset` together."""
    return sum((code_multiset(text) for text in folder.values()), Counter())


@dataclass(frozen=True)
class Split:
    """d(pq, maintainers) by the side a line comes from ("upstream": it is in the new upstream file) and who has it."""

    upstream_maintainers_only: int
    upstream_pq_only: int
    omni_maintainers_only: int
    omni_pq_only: int

    @property
    def upstream(self) -> int:
        return self.upstream_maintainers_only + self.upstream_pq_only

    @property
    def omni(self) -> int:
        return self.omni_maintainers_only + self.omni_pq_only

    def as_json(self) -> dict[str, int]:
        return {
            "upstream_maintainers_only": self.upstream_maintainers_only,
            "upstream_pq_only": self.upstream_pq_only,
            "omni_maintainers_only": self.omni_maintainers_only,
            "omni_pq_only": self.omni_pq_only,
            "upstream": self.upstream,
            "omni": self.omni,
            "total": self.upstream + self.omni,
        }


def split_difference(pq: Folder, maintainers: Folder, upstream: set[str]) -> Split:
    """:func:`distance` of ``pq`` and ``maintainers`` in four parts summing to it; ``upstream``: its stripped lines."""
    counts = Counter[tuple[bool, bool]]()  # (upstream line, the maintainers have it) -> lines
    for name in pq.keys() | maintainers.keys():
        ours, theirs = code_multiset(pq.get(name, "")), code_multiset(maintainers.get(name, ""))
        for only, theirs_only in ((theirs - ours, True), (ours - theirs, False)):
            for line, n in only.items():
                counts[(line in upstream, theirs_only)] += n
    return Split(counts[(True, True)], counts[(True, False)], counts[(False, True)], counts[(False, False)])


def gpu_side_recall(pq: Folder, maintainers: Folder, old: Folder, upstream: set[str], gpu: set[str]) -> tuple[int, int]:
    """(of them in pq's output, GPU-side omni lines of the maintainers' release), as multisets over all modules.

    GPU-side omni lines: the maintainers' lines in neither the new upstream file nor the old release's
    runners that occur in the new release's GPU runners (``gpu``, stripped lines).
    """
    seen = set(pooled(old))
    wanted = Counter({x: n for x, n in pooled(maintainers).items() if x not in upstream and x not in seen and x in gpu})
    return kept_count(wanted, pooled(pq)), wanted.total()


def ported_precision(
    pq: Folder, maintainers: Folder, old: Folder, upstream: set[str], left_out: Iterable[str] = ()
) -> tuple[int, int]:
    """(of them in the maintainers' release, lines pq wrote itself), as multisets over all modules.

    Lines pq wrote itself: its output's lines in neither the old release's runners nor the new upstream file,
    less the ``left_out`` lines (as a multiset: the lines of ports the maintainers' release does not make).
    """
    seen = set(pooled(old))
    written = Counter({x: n for x, n in pooled(pq).items() if x not in upstream and x not in seen})
    written -= Counter(s for line in left_out if (s := line.strip()) and not s.startswith("#"))
    return kept_count(written, pooled(maintainers)), written.total()


def sync_ceiling(pq: Folder, maintainers: Folder, upstream: set[str], gpu: set[str], gpu_removed: set[str]) -> int:
    """d(pq, maintainers) after the best GPU sync there could be, an upper bound on what porting can save:
    every omni line only the maintainers have that occurs in the newer release's GPU runners (``gpu``) added,
    and every omni line only pq has that the GPU runners removed (``gpu_removed``: in the older release's,
    not the newer's) taken out; each module as it is otherwise."""
    left = 0
    for name in pq.keys() | maintainers.keys():
        ours, theirs = code_multiset(pq.get(name, "")), code_multiset(maintainers.get(name, ""))
        left += sum(n for line, n in (theirs - ours).items() if line in upstream or line not in gpu)
        left += sum(n for line, n in (ours - theirs).items() if line in upstream or line not in gpu_removed)
    return left


def saved(d_pq: int, d_old: int) -> float | None:
    """Work saved: 1 - d(pq, maintainers) / d(old, maintainers); None when the maintainers changed nothing."""
    return 1 - d_pq / d_old if d_old else None


def work_saved(
    output: Folder,
    old: Folder,
    maintainers: Folder,
    upstream_text: str,
    gpu_texts: Iterable[str],
    left_out: Iterable[str] = (),
    old_gpu_texts: Iterable[str] = (),
) -> dict[str, object]:
    """Everything work saved measures for one upgrade; ``output`` is pq's, diff3 regions still in it;
    ``left_out``: the lines of ports of changes the maintainers' release does not make (for the second
    precision); ``gpu_texts`` / ``old_gpu_texts``: the newer / older release's GPU runners."""
    upstream = stripped_set([upstream_text])
    gpu = stripped_set(gpu_texts)
    patch = {name: take_side(text, "patch") for name, text in output.items()}
    upstream_side = {name: take_side(text, "upstream") for name, text in output.items()}
    old_gpu = stripped_set(old_gpu_texts) - gpu
    return {
        "d_old": distance(old, maintainers),
        "d_pq": distance(patch, maintainers),
        "d_pq_upstream_side": distance(upstream_side, maintainers),
        "d_ceiling": min(sync_ceiling(side, maintainers, upstream, gpu, old_gpu) for side in (patch, upstream_side)),
        "split": split_difference(patch, maintainers, upstream).as_json(),
        "recall": list(gpu_side_recall(patch, maintainers, old, upstream, gpu)),
        "precision": list(ported_precision(patch, maintainers, old, upstream)),
        "precision_ported": list(ported_precision(patch, maintainers, old, upstream, left_out)),
    }
