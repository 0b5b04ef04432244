"""pq check: every rule on real runner code, one snippet that fires and one that does not."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import copy_project, pq

from patch_queue import presets
from patch_queue.checks import rules as check
from patch_queue.errors import QueueError
from patch_queue.sources.snapshot import resolve_upstream

RUNNER_030 = "npu_ar_model_runner.py"


def runners(corpus: Path, release: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((corpus / f"vllm-omni-{release}" / "npu").glob("*.py"))}


def rule_ids(findings: list[check.Finding]) -> list[str]:
    return [f.rule for f in findings]


def only_rules(files: dict[str, str]) -> list[check.Finding]:
    return check.check_rules(files, check.load_rules(None, rule_set=presets.NPU.rules))


# -- the data-driven NPU rules ---------------------------------------------------------------


def test_every_release_passes_the_npu_rules(corpus: Path) -> None:
    """The published runners follow the checklist: no rule fires on any of them."""
    for release in ("0.14.0", "0.16.0", "0.18.0", "0.20.0", "0.22.0", "0.24.0", "0.30.0"):
        assert only_rules(runners(corpus, release)) == [], release


def test_cuda_graph_wrapper_in_code_fires_in_a_comment_does_not(corpus: Path) -> None:
    text = runners(corpus, "0.16.0")["npu_model_runner.py"]
    assert "CUDAGraphWrapper" in text  # in a comment of the real runner: not a finding
    assert only_rules({"npu_model_runner.py": text}) == []
    planted = text.replace(
        "            self.talker_mtp = talker_mtp  # type: ignore[assignment]",
        "            self.talker_mtp = CUDAGraphWrapper(talker_mtp, self.vllm_config, runtime_mode=CUDAGraphMode.FULL)",
    )
    assert planted != text
    found = only_rules({"npu_model_runner.py": planted})
    assert sorted(rule_ids(found)) == ["no-cuda-graph-wrapper", "talker-mtp-aclgraph"]
    assert {f.severity for f in found} == {"error"}


def test_talker_mtp_wrapped_with_aclgraph_passes(corpus: Path) -> None:
    text = runners(corpus, "0.14.0")["npu_model_runner.py"]
    assert "self.talker_mtp = ACLGraphWrapper(" in text
    assert only_rules({"npu_model_runner.py": text}) == []


def test_set_forward_context_fires(corpus: Path) -> None:
    text = runners(corpus, "0.30.0")[RUNNER_030]
    assert "set_ascend_forward_context(" in text
    planted = text.replace("set_ascend_forward_context(", "set_forward_context(", 1)
    found = only_rules({RUNNER_030: planted})
    # and vLLM's context takes no aclgraph_runtime_mode either
    assert sorted(rule_ids(found)) == ["ascend-forward-context", "platform-forward-context-keyword"]
    line = planted.splitlines()[next(f for f in found if f.rule == "ascend-forward-context").line - 1]
    assert "set_forward_context(" in line


def test_the_platform_wrapper_of_set_forward_context_takes_the_cuda_keyword(corpus: Path) -> None:
    """vllm-omni's ``current_omni_platform.set_forward_context`` dispatches to vllm-ascend's on NPU and takes
    ``cudagraph_runtime_mode``: fine as it is, an error with vllm-ascend's keyword (a TypeError at run time)."""
    text = runners(corpus, "0.30.0")[RUNNER_030]
    call = next(line for line in text.splitlines() if "set_ascend_forward_context(" in line)
    wrapped = "current_omni_platform.set_forward_context(\n"
    fine = text.replace("set_ascend_forward_context(\n", wrapped, 1)
    assert fine != text and call.endswith("(")
    kept = re.sub(r"aclgraph_runtime_mode=", "cudagraph_runtime_mode=", fine[fine.index(wrapped) :], count=1)
    fine = fine[: fine.index(wrapped)] + kept
    assert only_rules({RUNNER_030: fine}) == []
    wrong = fine.replace("cudagraph_runtime_mode=", "aclgraph_runtime_mode=", 1)
    found = only_rules({RUNNER_030: wrong})
    assert rule_ids(found) == ["platform-forward-context-keyword"]
    assert "aclgraph_runtime_mode=" in wrong.splitlines()[found[0].line - 1]


def test_cudagraph_runtime_mode_keyword_only_fires_in_the_ascend_context(corpus: Path) -> None:
    text = runners(corpus, "0.30.0")["npu_model_runner.py"]
    # the real runner passes cudagraph_runtime_mode= to other calls: fine
    assert "cudagraph_runtime_mode=cudagraph_runtime_mode" in text
    assert only_rules({"npu_model_runner.py": text}) == []
    ar = runners(corpus, "0.30.0")[RUNNER_030]
    planted = ar.replace("aclgraph_runtime_mode=", "cudagraph_runtime_mode=", 1)
    assert planted != ar
    assert rule_ids(only_rules({RUNNER_030: planted})) == ["aclgraph-runtime-mode"]


def test_a_doubled_block_fires_similar_calls_do_not(corpus: Path) -> None:
    text = runners(corpus, "0.14.0")["npu_model_runner.py"]  # two mrope calls with the same keyword lines
    assert only_rules({"npu_model_runner.py": text}) == []
    ar = runners(corpus, "0.30.0")[RUNNER_030]
    lines = ar.splitlines(keepends=True)
    start = next(
        i for i, line in enumerate(lines) if "hidden_states, multimodal_outputs = self.extract_multimodal" in line
    )
    block = lines[start : start + 11]
    doubled = "".join(lines[: start + 11] + block + lines[start + 11 :])
    found = only_rules({RUNNER_030: doubled})
    assert rule_ids(found) == ["duplicate-block"]
    assert found[0].line == start + 12


def test_project_rules_extend_and_replace(tmp_path: Path, corpus: Path) -> None:
    (tmp_path / "check-rules.toml").write_text(
        '[[rule]]\nid = "no-print"\nkind = "regex"\nseverity = "warning"\npattern = \'\\bprint\\(\'\n'
        'message = "use the logger"\n\n'
        '[[rule]]\nid = "duplicate-block"\nkind = "duplicate"\nseverity = "error"\nmin_lines = 6\nmessage = "doubled"\n'
    )
    rules = {r.id: r for r in check.load_rules(tmp_path, rule_set=presets.NPU.rules)}
    assert rules["duplicate-block"].severity == "error" and "no-print" in rules
    assert rule_ids(check.check_rules({"m.py": "def f():\n    print(1)\n"}, rules.values())) == ["no-print"]


def test_bad_rule_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "check-rules.toml"
    path.write_text('[[rule]]\nid = "x"\nkind = "regex"\nseverity = "fatal"\npattern = "a"\nmessage = "m"\n')
    with pytest.raises(QueueError, match="check-rules.toml:4: rule\\[0\\].severity must be"):
        check.load_rules(tmp_path, rule_set=presets.NPU.rules)
    path.write_text('[[rule]]\nid = "x"\nkind = "regex"\nseverity = "error"\npattern = "("\nmessage = "m"\n')
    with pytest.raises(QueueError, match="bad pattern"):
        check.load_rules(tmp_path, rule_set=presets.NPU.rules)


# -- parse, fences, omni blocks ----------------------------------------------------------------


def test_conflict_markers_do_not_compile(corpus: Path) -> None:
    text = runners(corpus, "0.30.0")[RUNNER_030]
    assert check.check_parse({RUNNER_030: text}) == []
    lines = text.splitlines(keepends=True)
    lines.insert(200, "<<<<<<< upstream\n")
    found = check.check_parse({RUNNER_030: "".join(lines)})
    assert rule_ids(found) == ["parse"] and found[0].line == 201


def test_the_stray_fence_of_030_is_found(corpus: Path) -> None:
    found = check.check_fences(runners(corpus, "0.30.0"))
    assert [(f.file, f.line) for f in found] == [(RUNNER_030, 133)]
    assert check.check_fences(runners(corpus, "0.20.0")) == []


def test_omni_blocks_missing_duplicated_changed(corpus: Path) -> None:
    ref = runners(corpus, "0.30.0")
    assert check.check_blocks(ref, ref, what="0.30.0") == []
    text = ref[RUNNER_030]
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if "on_requests_finished(scheduler_output.finished_req_ids)" in line)
    # the block is fence, `if ...:`, call, fence
    assert "Omni-new" in lines[start - 2] and "Omni-new" in lines[start + 1]
    missing = "".join(lines[: start - 2] + lines[start + 2 :])
    found = check.check_blocks(ref, {**ref, RUNNER_030: missing}, what="0.30.0")
    assert [(f.rule, f.severity) for f in found] == [("omni-block-missing", "error")]
    doubled = "".join(lines[: start + 2] + lines[start - 2 : start + 2] + lines[start + 2 :])
    found = check.check_blocks(ref, {**ref, RUNNER_030: doubled}, what="0.30.0")
    assert [f.rule for f in found] == ["omni-block-duplicated"]
    changed = text.replace(
        "self.model.on_requests_finished(scheduler_output.finished_req_ids)",
        "self.model.on_requests_finished(list(scheduler_output.finished_req_ids))",
    )
    found = check.check_blocks(ref, {**ref, RUNNER_030: changed}, what="0.30.0")
    assert [(f.rule, f.severity) for f in found] == [("omni-block-changed", "warning")]


# -- signature drift -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def upstream_030(corpus: Path) -> str:
    snap = resolve_upstream("cf0baa38dfb2", upstream_git=str(corpus / "vllm-ascend.bundle"), queue=presets.NPU)
    return snap.read("vllm_ascend/worker/model_runner_v1.py").decode()


def test_signature_drift_on_the_real_runners(corpus: Path, upstream_030: str) -> None:
    found = check.check_signatures(
        runners(corpus, "0.30.0"), upstream_030, base_class="NPUModelRunner", label="cf0baa38dfb2"
    )
    got = sorted((f.file, f.message.split(" vs ")[0]) for f in found)
    assert got == [
        ("npu_generation_model_runner.py", "NPUGenerationModelRunner._dummy_run"),
        ("npu_model_runner.py", "OmniNPUModelRunner._dummy_run"),
        ("npu_model_runner.py", "OmniNPUModelRunner.initialize_kv_cache"),
    ]
    assert all("extra " in f.message for f in found)
    # *args/**kwargs overrides (load_model and friends) hand everything on: never reported
    assert not any(".load_model " in f.message for f in found)


def test_signature_drift_fires_on_a_changed_parameter(upstream_030: str) -> None:
    text = "class R(NPUModelRunner):\n    def execute_model(self, scheduler_output):\n        pass\n"
    found = check.check_signatures({"r.py": text}, upstream_030, base_class="NPUModelRunner", label="x")
    assert len(found) == 1 and "missing intermediate_tensors" in found[0].message


def test_signature_drift_only_on_the_classes_of_a_runner(seeded_once: Path, upstream_030: str) -> None:
    # 0.32.0rc1's generation runner module defines helper classes (_NPUHostCopyBatch, _AsyncNPUGenerationOutput)
    # whose __init__ is no runner's: they were compared with NPUModelRunner.__init__
    files = {p.name: p.read_text() for p in sorted((seeded_once / "npu_worker").glob("*.py"))}
    assert "class _NPUHostCopyBatch:" in files["npu_generation_model_runner.py"]
    found = check.check_signatures(files, upstream_030, base_class="NPUModelRunner", label="cf0baa38dfb2")
    assert sorted(f.message.split(" vs ")[0] for f in found) == [
        "NPUGenerationModelRunner._dummy_run",
        "OmniNPUModelRunner._dummy_run",
        "OmniNPUModelRunner.initialize_kv_cache",
    ]


def test_signature_drift_follows_the_runner_classes_across_modules(upstream_030: str) -> None:
    init = "    def __init__(self, output):\n        pass\n"
    files = {
        "m.py": "class Mixin:\n" + init,  # in a runner's bases: its __init__ overrides the runner's
        "base.py": "class Base(Mixin, other.NPUModelRunner):\n    pass\nclass Helper:\n" + init,
        "r.py": "class R(Base):\n" + init + "class Out(Generic[T]):\n" + init,
    }
    found = check.check_signatures(files, upstream_030, base_class="NPUModelRunner", label="x")
    assert sorted(f.message.split(" vs ")[0] for f in found) == ["Mixin.__init__", "R.__init__"]


# -- the commands ---------------------------------------------------------------------------------


def test_pq_check_and_pq_blocks_on_the_adopted_030(adopted_030_once: Path, tmp_path: Path) -> None:
    proj = copy_project(adopted_030_once, tmp_path / "p")  # the corpus folder of 0.30.0 adopted at cf0baa38dfb2
    out = tmp_path / "check.json"
    proc = pq(proj, "check", "--no-sources", "--json", str(out))
    data = json.loads(out.read_text())
    assert data["errors"] == 0 and data["counts"] == {"fence": 1, "signature-drift": 3}
    assert "npu_worker/npu_ar_model_runner.py:133: warning: [fence]" in proc.stdout
    # plant a missing omni block in the built runner (fences and all): an error, exit 1
    runner = proj / "npu_worker" / RUNNER_030
    lines = runner.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "on_requests_finished(scheduler_output.finished_req_ids)" in line)
    assert "Omni-new" in lines[at - 2] and "Omni-new" in lines[at + 1]
    runner.write_text("".join(lines[: at - 2] + lines[at + 2 :]))
    proc = pq(proj, "check", "--no-sources", "--json", str(out), check=1)
    data = json.loads(out.read_text())
    assert data["errors"] == 1 and [f["rule"] for f in data["findings"] if f["severity"] == "error"] == [
        "omni-block-missing"
    ]
    assert "[omni-block-missing]" in proc.stdout
    md = tmp_path / "blocks.md"
    listing = pq(proj, "blocks", "--markdown", str(md)).stdout
    assert "24 fenced" in listing
    body = md.read_text()
    assert body.startswith("# Omni blocks: vllm-omni ") and body.count("| fenced |") == 24


def test_planted_import_and_missing_block_are_both_reported(released_030_once: Path, tmp_path: Path) -> None:
    """The full check (with the upstream source trees) on a real runner with two planted faults."""
    proj = copy_project(released_030_once, tmp_path / "p")  # `pq adopt vllm-omni==0.30.0 --at cf0baa38dfb2`
    out = tmp_path / "check.json"
    pq(proj, "check", "--json", str(out))
    clean = json.loads(out.read_text())
    assert clean["errors"] == 0 and clean["sources"] is True
    assert not any(f["rule"].startswith("import-") for f in clean["findings"])
    runner = proj / "npu_worker" / "npu_model_runner.py"
    lines = runner.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("from vllm_ascend."))
    lines.insert(at, "from vllm_ascend.worker.model_runner_v1 import NoSuchRunnerHelper\n")
    fence = next(i for i, line in enumerate(lines) if "Omni-new" in line)
    close = next(i for i in range(fence + 1, len(lines)) if "Omni-new" in lines[i])
    del lines[fence : close + 1]
    runner.write_text("".join(lines))
    proc = pq(proj, "check", "--json", str(out), check=1)
    data = json.loads(out.read_text())
    errors = sorted((f["rule"], f["file"]) for f in data["findings"] if f["severity"] == "error")
    assert errors == [("import-name-unresolved", "npu_model_runner.py"), ("omni-block-missing", "npu_model_runner.py")]
    assert "NoSuchRunnerHelper" in proc.stdout


# -- statements run twice ---------------------------------------------------------------------------


def test_a_planted_duplicate_statement_is_an_error(
    corpus: Path, upstream_030: str, adopted_030_once: Path, tmp_path: Path
) -> None:
    """A call both inputs make once (the omni method and upstream's) written twice in the output: an error at
    the second copy, through pq check as well; the real runners have none."""
    from patch_queue.checks.duplicates import check_duplicates

    ref = runners(corpus, "0.30.0")
    assert check_duplicates(ref, ref, upstream_030, cls="NPUModelRunner") == []
    call = "self.input_batch.block_table.commit_block_table(num_reqs_padded)"
    text = ref["npu_model_runner.py"]
    assert text.count(call) == 1 and call in upstream_030
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if call in line)
    doubled = "".join(lines[: at + 1] + [lines[at]] + lines[at + 1 :])
    found = check_duplicates({**ref, "npu_model_runner.py": doubled}, ref, upstream_030, cls="NPUModelRunner")
    assert [(f.file, f.line, f.rule, f.severity) for f in found] == [
        ("npu_model_runner.py", at + 2, "statement-duplicated", "error")
    ]
    assert "OmniNPUModelRunner._dummy_run runs" in found[0].message and "2 times" in found[0].message
    # a statement only one side has is new code, however often it is written
    assert check_duplicates({**ref, "npu_model_runner.py": doubled}, {}, upstream_030, cls="NPUModelRunner") == []
    proj = copy_project(adopted_030_once, tmp_path / "p")  # the corpus folder of 0.30.0 adopted at cf0baa38dfb2
    (proj / "npu_worker" / "npu_model_runner.py").write_text(doubled)
    proc = pq(proj, "check", "--no-sources", check=1)
    assert f"npu_worker/npu_model_runner.py:{at + 2}: error: [statement-duplicated]" in proc.stdout


def test_a_block_whose_code_upstream_has_now_is_a_warning(corpus: Path) -> None:
    ref = runners(corpus, "0.30.0")
    lines = ref[RUNNER_030].splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "on_requests_finished(scheduler_output.finished_req_ids)" in line)
    unfenced = "".join(lines[: at - 2] + lines[at - 1 : at + 1] + lines[at + 2 :])  # the fences gone, the code kept
    found = check.check_blocks(ref, {**ref, RUNNER_030: unfenced}, what="0.30.0")
    assert [(f.rule, f.severity) for f in found] == [("omni-block-upstream", "warning")]
    gone = "".join(lines[: at - 2] + lines[at + 2 :])
    assert [f.rule for f in check.check_blocks(ref, {**ref, RUNNER_030: gone}, what="0.30.0")] == ["omni-block-missing"]


def test_a_module_over_the_size_limit_is_compiled_and_named(adopted_030_once: Path, tmp_path: Path) -> None:
    """A runner grown past pq check's size limit by a patch of comment lines: the patch is read and applied
    (the streaming applier), the module still gets the compile check, and the warning names it; the other
    modules get every check."""
    from patch_queue.commands.check import LARGE

    proj = copy_project(adopted_030_once, tmp_path / "p")  # the corpus folder of 0.30.0 adopted at cf0baa38dfb2
    runner = proj / "npu_worker" / "npu_model_runner.py"
    filler = "# " + "x" * 97 + "\n"
    runner.write_text(runner.read_text() + filler * (LARGE // len(filler) + 1))
    pq(proj, "new", "--record", "big")
    out = tmp_path / "check.json"
    pq(proj, "check", "--no-sources", "--json", str(out))
    data = json.loads(out.read_text())
    large = [f for f in data["findings"] if f["rule"] == "module-too-large"]
    assert [(f["file"], f["severity"]) for f in large] == [("npu_model_runner.py", "warning")]
    assert data["counts"]["fence"] == 1  # the other modules' findings are all there
    # the compile check still runs on it: a syntax error at its end is an error at its line
    runner.write_text(runner.read_text() + "def broken(:\n")
    proc = pq(proj, "check", "--no-sources", "--json", str(out), check=1)
    lines = runner.read_text().count("\n")
    assert f"npu_worker/npu_model_runner.py:{lines}: error: [parse]" in proc.stdout


def test_a_finding_without_a_file_names_pq() -> None:
    from patch_queue.checks.findings import WARNING, Finding

    assert Finding("", 0, "gpu-audit-skipped", WARNING, "no GPU runners").render() == (
        "pq: warning: [gpu-audit-skipped] no GPU runners"
    )
    assert Finding("a.py", 3, "x", WARNING, "m").render(prefix="npu_worker/") == "npu_worker/a.py:3: warning: [x] m"
    assert Finding("a.py", 0, "x", WARNING, "m").render() == "a.py: warning: [x] m"
