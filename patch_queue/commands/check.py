"""pq check: every check of the built runners, with the upstream source trees when they can be read."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from patch_queue.checks.findings import ERROR, WARNING, Finding
from patch_queue.commands.write import REF_PREVIOUS, module_files, sync_stack
from patch_queue.errors import PqError, QueueError
from patch_queue.fsutil import read_folder
from patch_queue.progress import Progress, say
from patch_queue.project import operation
from patch_queue.project.workspace import Workspace
from patch_queue.series import stack
from patch_queue.series.queue import Queue
from patch_queue.sources.archives import release_files
from patch_queue.sources.snapshot import resolve_upstream
from patch_queue.sources.vllm_release import VLLM, vllm_release

if TYPE_CHECKING:
    from patch_queue.outputs.inventory import Entry


@dataclass
class CheckOutcome:
    findings: list[Finding]
    reference: str  # what the omni blocks were compared with
    files: list[str]
    sources: bool  # import resolution and the GPU audit ran
    imported: str = ""  # what the import test imported (pq check --import), "" when it did not run

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == ERROR)

    def as_json(self) -> dict[str, object]:
        counts = Counter(f.rule for f in self.findings)
        return {
            "format": 1,
            "reference": self.reference,
            "files": self.files,
            "sources": self.sources,
            **({"imported": self.imported} if self.imported else {}),
            "errors": self.errors,
            "warnings": len(self.findings) - self.errors,
            "counts": dict(sorted(counts.items())),
            "findings": [f.as_json() for f in self.findings],
        }


# A module larger than this (a runner is about 60 KB) gets only the compile check: the others hold a line list
# or a syntax tree of the module, which would make the memory of ``pq check`` many times its input.
LARGE = 8 << 20


def module_texts(files: dict[str, bytes], *, but: Collection[str] = ()) -> dict[str, str]:
    return {
        k: v.decode("utf-8", errors="replace")
        for k, v in files.items()
        if k.endswith(".py") and not k.startswith(stack.VENDOR) and "/" not in k and k not in but
    }


def _too_large(files: Mapping[str, str]) -> list[str]:
    return sorted(k for k, v in files.items() if len(v) > LARGE)


def run_checks(
    ws: Workspace,
    files: dict[str, str],
    *,
    queue: Queue,
    base: str,
    reference: dict[str, str],
    reference_label: str,
    upstream_git: str | None,
    sources_on: bool,
    progress: Progress | None = None,
    imports: bool | None = False,
    imports_required: bool = False,
) -> CheckOutcome:
    """Every check of ``pq check`` on ``files`` (module name -> text).  ``imports``: the import test
    (:func:`import_checks`): True runs it (building its environment when none is), None runs it when its environment
    is built, False not; ``imports_required``: an environment that cannot be built is an error (``pq check
    --import``), else a warning."""
    from patch_queue.checks import calls, duplicates, names
    from patch_queue.checks import rules as check

    findings = check.check_parse(files)
    large = _too_large(files)
    for path in large:
        message = f"{len(files[path]):,} characters: only the compile check runs on a module over {LARGE >> 20} MiB"
        findings.append(Finding(path, 0, "module-too-large", WARNING, message))
    checked, files = files, {k: v for k, v in files.items() if k not in large}
    findings += check.check_fences(files) + names.check_names(files) + calls.check_calls(files)
    findings += check.check_blocks(reference, files, what=reference_label)
    findings += check.check_rules(files, check.load_rules(ws.queue_dir.root, queue.spec.rules))
    vendored = ws.repo.read_tree(ws.repo.commit_info(base).tree)
    for path in queue.upstream_paths():
        data = vendored.get(stack.VENDOR + path)
        if data is not None:
            upstream = data.decode("utf-8", errors="replace")
            cls = queue.spec.upstream_class
            findings += check.check_signatures(files, upstream, base_class=cls, label=queue.upstream.label)
            findings += duplicates.check_duplicates(files, reference, upstream, cls=cls)
    if sources_on:
        findings += source_checks(queue, files, upstream_git=upstream_git, progress=progress)
    imported = ""
    if imports is True or (imports is None and sources_on):
        found, imported = import_checks(
            queue, files, upstream_git=upstream_git, build=bool(imports), required=imports_required, progress=progress
        )
        findings += found
    return CheckOutcome(sorted(set(findings)), reference_label, sorted(checked), sources_on, imported)


def source_checks(
    queue: Queue, files: dict[str, str], *, upstream_git: str | None, progress: Progress | None = None
) -> list[Finding]:
    """Import resolution against the real source trees, and the GPU-side sync audit."""
    from patch_queue.checks import gpu_audit, gpu_needs, imports

    out: list[Finding] = []
    release = queue.downstream_release
    trees: dict[str, imports.SourceTree] = {}
    downstream = queue.spec.downstream_package
    try:
        say(progress, f"Reading the {queue.spec.upstream_dist} source tree at {queue.upstream.label} ...")
        snapshot = resolve_upstream(queue.upstream.spec, upstream_git=upstream_git, progress=progress, queue=queue.spec)
        upstream_package = queue.spec.upstream_package
        trees[upstream_package] = imports.tree_from_snapshot(snapshot, upstream_package + "/")
        if release and VLLM in trees:  # the queue's upstream is vLLM itself: its tree is the series' upstream's
            say(progress, f"Reading {queue.downstream_name} {release} ...")
            trees[downstream] = imports.tree_from_release(queue.downstream_name, release, downstream + "/")
        elif release:
            vllm = vllm_release(queue.downstream_name, release, progress)
            say(progress, f"Reading {queue.downstream_name} {release} and {vllm.describe()} ...")
            trees[downstream] = imports.tree_from_release(queue.downstream_name, release, downstream + "/")
            trees["vllm"] = imports.tree_from_release(VLLM, vllm.version, "vllm/")
    except PqError as exc:
        return [
            _warning("sources-unavailable", f"import resolution and the GPU audit need the upstream sources: {exc}")
        ]
    package = queue.package.replace("/", ".")
    for path, text in sorted(files.items()):
        out += imports.check_imports(text, file=path, package=package, trees=trees)
    if not queue.spec.gpu_reference:  # a queue of runners that mirror none: nothing to audit
        return out
    if not release or "vllm" not in trees:
        why = "the GPU-side audit needs the pinned vllm-omni release (the series was adopted from a folder)"
        return out + [_warning("gpu-audit-skipped", why)]
    try:
        mirror = gpu_audit.mirror(queue.spec)
        gpu = release_files(queue.downstream_name, release, mirror.gpu_package + "/", progress=progress)
        gpu_files = {
            k.rsplit("/", 1)[-1]: v.decode("utf-8", errors="replace")
            for k, v in gpu.items()
            if re.fullmatch(r"gpu_\w*model_runner\.py", k.rsplit("/", 1)[-1])
        }
        vllm_runner = gpu_audit.load_vllm_runner(vllm.version, queue.spec)
    except PqError as exc:
        return out + [_warning("sources-unavailable", f"the GPU-side audit needs vLLM {vllm.version}: {exc}")]
    ascend = snapshot.read(queue.spec.upstream_file).decode("utf-8", errors="replace")
    broken = sorted(k for k, v in files.items() if not _parses(v))
    if broken:  # the parse rule reports them; an audit of half the runners would only mislead
        why = f"the GPU-side audit needs runners that parse; {', '.join(broken)} do not"
        return out + [_warning("gpu-audit-skipped", why)]
    try:
        out += gpu_audit.findings(gpu_audit.audit(gpu_files, vllm_runner, files, ascend, queue=queue.spec))
        out += gpu_needs.findings(files, gpu_files, vllm_runner, ascend, trees[downstream].text, mirror)
    except PqError as exc:
        return out + [_warning("gpu-audit-skipped", f"the GPU-side audit could not run: {exc}")]
    return out


def import_checks(
    queue: Queue,
    files: dict[str, str],
    *,
    upstream_git: str | None,
    build: bool,
    required: bool,
    progress: Progress | None = None,
) -> tuple[list[Finding], str]:
    """The import test (:mod:`patch_queue.checks.import_test`) of ``files`` in the environment of the queue's exact
    versions: built first when ``build`` (else skipped silently when none is built); one that cannot be built or
    read raises (``required``) or is a warning (``import-test-skipped``).  With what was imported, in words ("" when
    it did not run)."""
    import json
    import tempfile
    from pathlib import Path

    from patch_queue.checks import import_test
    from patch_queue.sources import import_env
    from patch_queue.sources.cache import code_stamp, derived_get, derived_key, derived_put

    release = queue.downstream_release
    if not release:
        if not build:
            return [], ""
        why = "the import test needs the pinned downstream release (the series was adopted from a folder)"
        if required:
            raise QueueError(why)
        return [_warning("import-test-skipped", why)], ""
    try:
        vllm = vllm_release(queue.downstream_name, release, progress)
        versions = import_env.Versions(
            vllm.version,
            import_env.torch_requirement(vllm.version, progress),
            f"{queue.downstream_name}=={release}",
            import_env.python_tag(),
        )
    except PqError as exc:
        if required:
            raise
        if not build:  # whether an environment is built is not known: none runs, and nothing was asked
            return [], ""
        return [_warning("import-test-skipped", f"the import test did not run: {exc.message}")], ""
    if not build and import_env.existing(versions) is None:
        return [], ""
    try:
        folder = import_env.build(versions, progress)
        snapshot = resolve_upstream(queue.upstream.spec, upstream_git=upstream_git, progress=progress, queue=queue.spec)
        env = import_env.ImportEnv(
            import_env.python_of(folder), import_env.upstream_sources(snapshot, queue.spec, progress), versions
        )
        ours = release_files(queue.downstream_name, release, queue.package + "/", progress=progress)
    except PqError as exc:
        if required:
            raise
        return [_warning("import-test-skipped", f"the import test did not run: {exc.message}")], ""
    control = sorted(k.rsplit("/", 1)[-1] for k in ours if k.endswith(".py") and "/" not in k[len(queue.package) + 1 :])
    carried = import_test.carried_methods({m.path: list(m.symbols) for m in queue.modules})
    preload = ["torch", *(path.removesuffix(".py").replace("/", ".") for path in queue.upstream_paths())]
    controlled = [c for c in control if c in files]
    # the control is the same in the same environment, upstream and pq: imported once, then read from the cache
    control_key = derived_key(
        "import-control",
        env.versions.key(),
        str(env.upstream),
        json.dumps([controlled, carried, preload, import_test.stubs_of(queue.spec)], sort_keys=True),
        code_stamp("checks/import_stubs.py", "checks/import_test.py"),
    )
    cached = derived_get("import-control", control_key)
    known = import_test.load(cached) if cached is not None else None
    say(
        progress,
        f"Importing the {len(files)} modules and {queue.downstream_name} {release}'s own (pq check --import) ...",
    )
    with tempfile.TemporaryDirectory(prefix="pq-import-out-") as tmp:
        overlay = Path(tmp) / queue.package.rsplit("/", 1)[-1]
        overlay.mkdir()
        for path, text in files.items():
            (overlay / path).write_text(text, encoding="utf-8")
        package = queue.package.replace("/", ".")
        output, theirs = import_test.import_all(
            env,
            package,
            sorted(files),
            carried,
            overlay,
            control=[] if known else controlled,
            preload=preload,
            stubs=import_test.stubs_of(queue.spec),
        )
    if known is not None:
        theirs = known
    elif all(i.error is None or i.raised for i in theirs):  # never a crash or a time-out
        derived_put("import-control", control_key, import_test.dump(theirs))
    label = f"{queue.downstream_name} {release}"
    said = f"{import_test.summary(output)}, and {import_test.summary(theirs)} of {label}'s own"
    return import_test.findings(output, theirs, release=label), said


def _warning(rule: str, message: str) -> Finding:
    """A finding about the check run itself (no file, no line)."""
    return Finding("", 0, rule, WARNING, message)


def _parses(text: str) -> bool:
    import ast

    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def do_check(
    ws: Workspace,
    *,
    upstream_git: str | None,
    sources_on: bool,
    progress: Progress | None = None,
    imports: bool | None = False,
    json_out: Path | None = None,
) -> CheckOutcome:
    """Check the built package in the output folder against the series and the upstream sources; with
    ``json_out``, the findings written there as JSON too."""
    modules = ws.out.glob("*.py") if ws.out.is_dir() else ()
    if not any(p.is_file() and not p.is_symlink() for p in modules):  # what module_texts would keep, unread
        raise QueueError(f"nothing to check: no modules in {ws.rel(ws.out)}/; run `pq build` first")
    state = operation.load(ws)
    if state is not None:
        queue, base = state.target(), state.new_base
        previous = state.patches[-1][1] if state.patches else base
    else:
        loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
        queue, base = loaded.queue, loaded.base
        previous = ws.repo.ref(REF_PREVIOUS) or loaded.top()
    files = module_texts(read_folder(ws.out))  # read after the stack: never both in memory at once
    label = "the previous build" if ws.repo.ref(REF_PREVIOUS) == previous else "the series"
    reference = module_texts(module_files(ws, previous), but=_too_large(files))
    result = run_checks(
        ws,
        files,
        queue=queue,
        base=base,
        reference=reference,
        reference_label=label,
        upstream_git=upstream_git,
        sources_on=sources_on,
        progress=progress,
        imports=imports,
        imports_required=imports is True,
    )
    if json_out is not None:
        from patch_queue.fsutil import CHECK_JSON, json_bytes, write_output

        write_output(json_out, json_bytes(result.as_json()), CHECK_JSON)
    return result


def do_blocks(
    ws: Workspace, *, upstream_git: str | None, markdown: Path | None = None, progress: Progress | None = None
) -> list[Entry]:
    """`pq blocks`: every omni block and unfenced omni edit of the series, with the patch that carries it; with
    ``markdown``, the inventory written there too."""
    from patch_queue.outputs import inventory  # (the replay's diffs: pq check reads none)

    loaded = sync_stack(ws, upstream_git=upstream_git, progress=progress)
    entries = inventory.inventory(ws.repo, loaded.base, loaded.patches)
    if markdown is not None:
        from patch_queue.fsutil import BLOCKS_MARKDOWN, write_output

        title = f"{loaded.queue.downstream_name} {loaded.queue.downstream_release} on {loaded.queue.upstream.label}"
        write_output(markdown, inventory.markdown(entries, title=title).encode("utf-8"), BLOCKS_MARKDOWN)
    return entries
