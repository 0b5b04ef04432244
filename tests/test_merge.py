"""Unit tests of the anchor-aware three-way merge (:mod:`patch_queue.merge.three_way`) on small runner-like snippets.

``ours`` is always the new upstream side, ``theirs`` the omni patch, ``base`` the old upstream parent.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from patch_queue.merge import binding
from patch_queue.merge import calls as merge_calls
from patch_queue.merge import checked as merge_checked
from patch_queue.merge import three_way as merge
from patch_queue.merge.conflict import Conflict
from patch_queue.merge.markers import one_side, sides
from patch_queue.merge.three_way import MergeResult, merge3

FENCE = "        #  -------------------------------------- Omni-new -------------------------------------------------"
FENCE_TIGHT = (
    "            # ---------------------------------------Omni-new----------------------------------------------"  # noqa: E501
)
PLAIN = (
    "            # -------------------------------------------------------------------------------------------------"  # noqa: E501
)


def src(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


def block(*body: str, fence: str = FENCE) -> list[str]:
    return [fence, *body, fence]


def count_seq(text: str, seq: list[str]) -> int:
    """How many times the contiguous run of lines ``seq`` occurs in ``text``."""
    lines = text.splitlines()
    n = len(seq)
    return sum(1 for i in range(len(lines) - n + 1) if lines[i : i + n] == seq)


def check_regions(result: MergeResult) -> None:
    """Every region's line/length point at what it placed in the merged text."""
    lines = result.text.splitlines(keepends=True)
    for r in result.regions:
        placed = lines[r.line - 1 : r.line - 1 + r.length]
        assert len(placed) == r.length
        if r.conflict:
            assert placed[0].startswith("<<<<<<< ")
            assert placed[-1].startswith(">>>>>>> ")
            assert r.resolution is None
        else:
            assert "".join(placed) == r.resolution


def only(result: MergeResult) -> Conflict:
    assert len(result.regions) == 1, [r.kind for r in result.regions]
    return result.regions[0]


def conflict_sections(text: str) -> list[dict[str, list[str]]]:
    """The ours/base/theirs sections of every diff3 conflict in ``text``."""
    out: list[dict[str, list[str]]] = []
    current: dict[str, list[str]] | None = None
    part = ""
    for line in text.splitlines():
        if line.startswith("<<<<<<< "):
            current, part = {"ours": [], "base": [], "theirs": []}, "ours"
        elif line.startswith("||||||| ") and current is not None:
            part = "base"
        elif line == "=======" and current is not None:
            part = "theirs"
        elif line.startswith(">>>>>>> ") and current is not None:
            out.append(current)
            current = None
        elif current is not None:
            current[part].append(line)
    assert current is None, "unterminated conflict"
    return out


# A slice of NPUModelRunner.execute_model, the base most tests start from.
EXEC = [
    "class NPUModelRunner(GPUModelRunner):",
    "    @torch.inference_mode()",
    "    def execute_model(self, scheduler_output, intermediate_tensors=None):",
    "        self._update_states(scheduler_output)",
    "        num_scheduled_tokens = scheduler_output.total_num_scheduled_tokens",
    "        if not num_scheduled_tokens:",
    "            return EMPTY_MODEL_RUNNER_OUTPUT",
    "        attn_metadata, logits_indices = self._prepare_inputs(scheduler_output)",
    "        input_ids = self.input_ids.gpu[:num_input_tokens]",
    "        positions = self.positions.gpu[:num_input_tokens]",
    "        hidden_states = self.model(input_ids=input_ids, positions=positions)",
    "        logits = self.model.compute_logits(hidden_states[logits_indices])",
    "        return self._postprocess(logits)",
]
KV_BLOCK = block(
    "        # [Omni] Handle KV transfer BEFORE updating states (which removes finished requests)",
    "        self.kv_extractor.extract(scheduler_output)",
)


def with_block_after(lines: list[str], after: int, blk: list[str]) -> list[str]:
    """``lines`` with ``blk`` inserted after line number ``after`` (1-based)."""
    return lines[:after] + blk + lines[after:]


def replaced(lines: list[str], old: str, new: str) -> list[str]:
    assert sum(old in line for line in lines) == 1, old
    return [line.replace(old, new) for line in lines]


# ---------------------------------------------------------------------------------------------
# trivial cases


def test_identical_sides() -> None:
    base = src(*EXEC)
    result = merge3(base, base, base)
    assert result.text == base
    assert result.regions == []
    assert result.clean and result.conflicts == []


def test_both_sides_made_the_same_change() -> None:
    base = src(*EXEC)
    same = src(*replaced(EXEC, "self._update_states(scheduler_output)", "self._update_states(scheduler_output, True)"))
    result = merge3(base, same, same)
    assert result.text == same
    assert result.regions == []


def test_only_upstream_changed() -> None:
    base = src(*EXEC)
    ours = src(*replaced(EXEC, "hidden_states = self.model(", "hidden_states = self._model_forward("))
    result = merge3(base, ours, base)
    assert result.text == ours
    assert result.regions == []


def test_only_the_patch_changed() -> None:
    base = src(*EXEC)
    theirs = src(*with_block_after(EXEC, 3, KV_BLOCK))
    result = merge3(base, base, theirs)
    assert result.text == theirs
    assert result.regions == []


def test_far_apart_changes_merge_cleanly_without_flags() -> None:
    base = src(*EXEC)
    ours = src(*replaced(EXEC, "return self._postprocess(logits)", "return self._postprocess(logits, hidden_states)"))
    theirs = src(*with_block_after(EXEC, 3, KV_BLOCK))
    result = merge3(base, ours, theirs)
    assert result.text == src(
        *with_block_after(EXEC[:-1], 3, KV_BLOCK), "        return self._postprocess(logits, hidden_states)"
    )
    assert result.regions == []


# ---------------------------------------------------------------------------------------------
# insertions follow their anchor


def test_block_follows_upstreams_new_line_above() -> None:
    """Upstream rewrote the line above the omni insertion: the block goes before the line below it."""
    base = src(*EXEC)
    new_above = "        self._update_states(scheduler_output, self.input_batch)"
    ours_lines = replaced(
        EXEC, "self._update_states(scheduler_output)", "self._update_states(scheduler_output, self.input_batch)"
    )
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))
    result = merge3(base, src(*ours_lines), theirs)
    assert result.clean
    assert result.text == src(*with_block_after(ours_lines, 4, KV_BLOCK))
    assert count_seq(result.text, KV_BLOCK) == 1
    lines = result.text.splitlines()
    at = lines.index(KV_BLOCK[0])
    assert lines[at - 1] == new_above
    assert lines[at + len(KV_BLOCK)] == EXEC[4]
    region = only(result)
    assert region.kind == "block-moved"
    assert not region.conflict
    assert region.anchor is not None and region.anchor.first == KV_BLOCK[1].strip()
    check_regions(result)


def test_block_stays_after_the_line_above_when_upstream_rewrote_the_line_below() -> None:
    base = src(*EXEC)
    ours_lines = replaced(EXEC, "scheduler_output.total_num_scheduled_tokens", "scheduler_output.num_tokens")
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))
    result = merge3(base, src(*ours_lines), theirs)
    assert result.clean
    assert result.text == src(*with_block_after(ours_lines, 4, KV_BLOCK))
    assert count_seq(result.text, KV_BLOCK) == 1
    region = only(result)
    assert region.kind == "block-moved"
    check_regions(result)


def test_block_goes_before_the_line_below_when_upstream_deleted_the_line_above() -> None:
    base = src(*EXEC)
    ours_lines = [line for line in EXEC if "self._update_states(" not in line]
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))
    result = merge3(base, src(*ours_lines), theirs)
    assert result.clean
    assert result.text == src(*with_block_after(ours_lines, 3, KV_BLOCK))
    assert only(result).kind == "block-moved"
    check_regions(result)


# vllm-ascend 0.30.0rc2's execute_model: a blank line above `if self.use_compress:`, the block the omni patch deletes
COMPRESSED = [
    "def execute_model(self, scheduler_output):",
    "    if self.mamba:",
    "        stage_postprocess(",
    "            scheduler_output,",
    "        )",
    "    if self.use_compress:",
    "        deferred_state_corrections_fn()",
    "        dsa_positions(scheduler_output)",
    "",
    "    use_spec_decode = len(scheduler_output.scheduled_spec_decode_tokens) > 0",
    "    return use_spec_decode",
]


@pytest.mark.parametrize("deleter", ["patch", "upstream"])
def test_a_blank_line_inserted_above_a_deleted_block_leaves_one_blank_line(deleter: str) -> None:
    """One side puts a blank line between a call and the block below it; the other deletes that block, whose own
    blank line below stays: one blank line remains, as either side has it (and `ruff format` keeps), not two."""
    spaced = COMPRESSED[:5] + [""] + COMPRESSED[5:]
    without = COMPRESSED[:5] + COMPRESSED[8:]
    ours, theirs = (spaced, without) if deleter == "patch" else (without, spaced)
    result = merge3(src(*COMPRESSED), src(*ours), src(*theirs))
    assert result.clean
    assert result.text == src(*without), result.text
    assert "\n\n\n" not in result.text
    check_regions(result)
    # a blank line with code between it and the deletion is no such line: it stays where its anchor puts it
    spaced = COMPRESSED[:3] + [""] + COMPRESSED[3:]
    ours, theirs = (spaced, without) if deleter == "patch" else (without, spaced)
    result = merge3(src(*COMPRESSED), src(*ours), src(*theirs))
    assert result.clean and result.text == src(*without[:3], "", *without[3:]), result.text


def test_block_closed_by_a_plain_dashed_line_moves_whole() -> None:
    base = [
        "    def _dummy_run(self, num_tokens):",
        "        with self.maybe_dummy_run_with_lora(self.lora_config, num_scheduled_tokens):",
        "            outputs = self.model(input_ids=input_ids, positions=positions)",
        "            hidden_states = outputs",
        "            dummy_compute_logits(hidden_states)",
    ]
    blk = [FENCE_TIGHT, "            hidden_states, _ = self.extract_multimodal_outputs(hidden_states)", PLAIN]
    ours = replaced(
        base, "hidden_states = outputs", "hidden_states = outputs[0] if isinstance(outputs, tuple) else outputs"
    )
    theirs = with_block_after(base, 4, blk)
    result = merge3(src(*base), src(*ours), src(*theirs))
    assert result.clean
    assert result.text == src(*with_block_after(ours, 4, blk))
    region = only(result)
    assert region.kind == "block-moved"
    assert region.anchor is not None and region.anchor.first == blk[1].strip()
    check_regions(result)


def test_upstream_insertion_follows_its_anchor_next_to_an_omni_change() -> None:
    """The mirror rule: the patch rewrote the line above an upstream insertion."""
    base = src(*EXEC)
    ours_lines = with_block_after(EXEC, 4, ["        self._sync_metadata_across_dp(scheduler_output)"])
    theirs_lines = replaced(EXEC, "self._update_states(scheduler_output)", "self._omni_update_states(scheduler_output)")
    result = merge3(base, src(*ours_lines), src(*theirs_lines))
    assert result.clean
    assert result.text == src(
        *with_block_after(theirs_lines, 4, ["        self._sync_metadata_across_dp(scheduler_output)"])
    )
    assert only(result).kind == "block-moved"
    check_regions(result)


def test_both_anchors_gone_is_an_anchor_lost_conflict_with_the_block_whole() -> None:
    base = src(*EXEC)
    # upstream rewrote both anchor lines into something else (not a word-level edit of them)
    ours_lines = replaced(EXEC, "self._update_states(scheduler_output)", "with self.synchronize_input_prep():")
    ours_lines = replaced(
        ours_lines,
        "num_scheduled_tokens = scheduler_output.total_num_scheduled_tokens",
        "self._update_persistent_batch(scheduler_output, defer=True)",
    )
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))
    result = merge3(base, src(*ours_lines), theirs, labels=("v0.14.0", "v0.16.0", "0002-omni-kv.patch"))
    assert not result.clean
    region = only(result)
    assert region.kind == "anchor-lost"
    assert region.conflict
    assert region.anchor is not None and region.anchor.fenced
    assert count_seq(result.text, KV_BLOCK) == 1
    (sections,) = conflict_sections(result.text)
    assert count_seq("\n".join(sections["theirs"]), KV_BLOCK) == 1
    assert sections["ours"] == ours_lines[3:5]
    assert sections["base"] == EXEC[3:5]
    assert result.text.count("<<<<<<< v0.16.0\n") == 1
    assert result.text.count(">>>>>>> 0002-omni-kv.patch\n") == 1
    check_regions(result)


def test_both_sides_insert_at_one_place_upstream_first() -> None:
    base = src(*EXEC)
    upstream_line = "        self._sync_metadata_across_dp(scheduler_output)"
    ours = src(*with_block_after(EXEC, 4, [upstream_line]))
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))
    result = merge3(base, ours, theirs)
    assert result.clean
    assert result.text == src(*with_block_after(EXEC, 4, [upstream_line, *KV_BLOCK]))
    region = only(result)
    assert region.kind == "both-inserted"
    assert region.resolution == src(upstream_line, *KV_BLOCK)
    check_regions(result)


# ---------------------------------------------------------------------------------------------
# layout, words, replacements, conflicts

DUMMY_BASE = [
    "    def _dummy_run(self, num_tokens):",
    "        hidden_states = self.model(input_ids=input_ids, positions=positions, intermediate_tensors=None)",
    "        return hidden_states",
]
DUMMY_WRAPPED = [
    "    def _dummy_run(self, num_tokens):",
    "        hidden_states = self.model(",
    "            input_ids=input_ids,",
    "            positions=positions,",
    "            intermediate_tensors=None,",
    "        )",
    "        return hidden_states",
]
DUMMY_UPSTREAM = replaced(DUMMY_BASE, "positions=positions,", "positions=positions, inputs_embeds=inputs_embeds,")


def test_patch_only_rewrapped_lines_upstream_changed_takes_upstream_with_a_flag() -> None:
    result = merge3(src(*DUMMY_BASE), src(*DUMMY_UPSTREAM), src(*DUMMY_WRAPPED))
    assert result.clean
    assert result.text == src(*DUMMY_UPSTREAM)
    region = only(result)
    assert region.kind == "layout-only"
    assert not region.conflict
    assert region.theirs == src(*DUMMY_WRAPPED[1:6])
    check_regions(result)


def test_upstream_only_rewrapped_lines_the_patch_changed_keeps_the_omni_text() -> None:
    theirs = replaced(DUMMY_BASE, "intermediate_tensors=None", "intermediate_tensors=self.omni_tensors")
    result = merge3(src(*DUMMY_BASE), src(*DUMMY_WRAPPED), src(*theirs))
    assert result.clean
    assert result.text == src(*theirs)
    assert only(result).kind == "layout-only"
    check_regions(result)


def test_words_at_both_ends_of_a_line_merge() -> None:
    base = [
        "    def _prepare_inputs(self, scheduler_output):",
        "        num_reqs = self.input_batch.num_reqs",
        "        req_ids = self.input_batch.req_ids[:num_reqs]",
        "        return req_ids",
    ]
    ours = replaced(base, "        req_ids = self.input_batch", "        request_ids = self.input_batch")
    theirs = replaced(base, "[:num_reqs]", "[:num_reqs_padded]")
    result = merge3(src(*base), src(*ours), src(*theirs))
    assert result.clean
    assert result.text.splitlines()[2] == "        request_ids = self.input_batch.req_ids[:num_reqs_padded]"
    region = only(result)
    assert region.kind == "merged-words"
    check_regions(result)


def test_overlapping_words_do_not_merge() -> None:
    base = ["    def load_model(self):", "        self.model = get_model(vllm_config=self.vllm_config)"]
    ours = replaced(
        base, "get_model(vllm_config=self.vllm_config)", "get_model(vllm_config=self.vllm_config, prefix='model')"
    )
    theirs = replaced(
        base, "get_model(vllm_config=self.vllm_config)", "get_model(vllm_config=self.vllm_config, omni=True)"
    )
    result = merge3(src(*base), src(*ours), src(*theirs))
    assert only(result).kind == "both-changed"


def test_upstream_edited_lines_the_patch_deleted_is_a_conflict_showing_the_change() -> None:
    """Upstream added an argument to a call the omni patch replaced: keeping the omni text would lose it."""
    base = [
        "    def _sample(self, logits, spec_decode_metadata):",
        "        sampling_metadata = self.input_batch.sampling_metadata",
        "        sampler_output = self.sampler(logits=logits, sampling_metadata=sampling_metadata)",
        "        return sampler_output",
    ]
    ours = replaced(
        base, "sampling_metadata=sampling_metadata)", "sampling_metadata=sampling_metadata, predict_bonus_token=True)"
    )
    theirs = [
        base[0],
        base[1],
        *block("        return self.omni_sampler.run(logits, sampling_metadata)"),
        base[3],
    ]
    result = merge3(src(*base), src(*ours), src(*theirs))
    region = only(result)
    assert (region.kind, region.conflict) == ("upstream-changed-replaced", True)
    (sections,) = conflict_sections(result.text)
    assert any("predict_bonus_token=True" in line for line in sections["ours"])  # shown beside the omni code
    assert any("omni_sampler.run" in line for line in sections["theirs"])
    assert region.anchor is not None
    assert region.anchor.first == "return self.omni_sampler.run(logits, sampling_metadata)"
    check_regions(result)


@pytest.mark.parametrize(
    "upstream",
    [
        ["        # the sampler is the V2 runner's now"],  # only a comment: nothing of upstream's code is lost
        [],  # upstream deleted the lines the patch replaced
    ],
)
def test_replaced_code_keeps_the_replacement_when_no_upstream_code_is_lost(upstream: list[str]) -> None:
    base = [
        "    def _sample(self, logits, spec_decode_metadata):",
        "        sampling_metadata = self.input_batch.sampling_metadata",
        "        sampler_output = self.sampler(logits=logits, sampling_metadata=sampling_metadata)",
        "        bookkeeping = self._bookkeeping(sampler_output)",
        "        return sampler_output",
    ]
    ours = [*base[:3], *upstream, base[4]]  # upstream's change to the bookkeeping line the patch replaced
    theirs = [*base[:2], *block("        sampler_output = self.omni_sampler.run(logits)"), base[4]]
    result = merge3(src(*base), src(*ours), src(*theirs))
    assert result.clean and result.text == src(*theirs)
    assert only(result).kind == "kept-replacement"


def test_replaced_code_keeps_the_replacement_when_the_patch_has_upstreams_line_elsewhere() -> None:
    """Upstream rewrote a call the omni patch moved further down, and the patch's copy is already the new call:
    nothing upstream wrote is lost where the patch deleted the old one."""
    base = [
        "    def f(self, x):",
        "        self._start_dump_data()",
        "        y = g(x)",
        "        return y",
    ]
    ours = ["    def f(self, x):", "        self._start_dump_data(tokens=x)", "        y = g(x)", "        return y"]
    theirs = ["    def f(self, x):", "        y = g(x)", "        self._start_dump_data(tokens=x)", "        return y"]
    result = merge3(src(*base), src(*ours), src(*theirs))
    assert result.clean and result.text == src(*theirs)
    assert [r.kind for r in result.regions] == ["kept-replacement"]


def test_upstreams_new_line_found_only_in_another_function_is_not_kept_elsewhere() -> None:
    """vllm-ascend on vLLM 0.30.0: upstream added a keyword line to `bind_kv_cache(...)`, which the downstream patch
    rewrote (moved into an `else:`); the same keyword line in another method does not hold upstream's change, so
    keeping the replacement would lose it: a conflict showing upstream's change."""
    other = ["    def other(self, config):", "        g(", "            groups=config.groups,", "        )"]
    call = ["        bind(", "            caches,", "        )"]
    base = [*other, "    def init(self, config):", "        caches = make(config)", *call, "        return caches"]
    ours = [*other, "    def init(self, config):", "        caches = make(config)"]
    ours += [
        "        bind(",
        "            caches,",
        "            groups=config.groups,",
        "        )",
        "        return caches",
    ]
    theirs = [*other, "    def init(self, config):", "        caches = make(config)", "        if self.flat:"]
    theirs += ["            pass", "        else:", "            bind(caches)", "        return caches"]
    result = merge3(src(*base), src(*ours), src(*theirs))
    assert [(r.kind, r.conflict) for r in result.regions] == [("upstream-changed-replaced", True)]
    check_regions(result)


def test_upstreams_new_arguments_of_a_call_the_patch_replaced_are_a_conflict() -> None:
    """vllm-omni's model runner v2 on vLLM 0.30.0: upstream added keywords at the end of `dispatch(...)`, the patch
    called its own `self._dispatch(...)` there and added keywords at the same place; both insertions in one call
    would hand upstream's arguments to a function that need not take them."""
    head = ["    def run(self, n):", "        desc = dispatch("]
    base = [*head, "            n,", "            eager=False,", "        )", "        return desc"]
    ours = [*head, "            n,", "            eager=False,", "            ubatch=self.ubatch,", "        )"]
    ours += ["        return desc"]
    theirs = ["    def run(self, n):", "        desc = self._dispatch(", "            n=n,", "            eager=False,"]
    theirs += ["            max_len=self.max_len,", "        )", "        return desc"]
    result = merge3(src(*base), src(*ours), src(*theirs))
    assert [(r.kind, r.conflict) for r in result.regions if r.conflict] == [("both-changed", True)], result.regions
    assert "ubatch=self.ubatch" in result.text and "both-inserted" not in [r.kind for r in result.regions]
    assert (
        "a call the omni patch made a call of another function" in next(r for r in result.regions if r.conflict).message
    )
    check_regions(result)
    # the same insertions in a call both sides still make as it was: upstream's first, as before
    theirs_same = [
        *head,
        "            n,",
        "            eager=False,",
        "            max_len=self.max_len,",
        "        )",
    ]
    merged = merge3(src(*base), src(*ours), src(*theirs_same, "        return desc"))
    assert [r.kind for r in merged.regions] == ["both-inserted"] and merged.clean


def test_real_overlapping_edit_is_a_diff3_conflict() -> None:
    base = [
        "    def load_model(self):",
        "        with DeviceMemoryProfiler() as m:",
        "            self.model = get_model(vllm_config=self.vllm_config)",
        "            self.model.eval()",
        "        logger.info('Loading model weights took %.4f GB', m.consumed_memory / GiB_bytes)",
    ]
    ours = replaced(
        base, "get_model(vllm_config=self.vllm_config)", "get_model(vllm_config=self.vllm_config, prefix='model')"
    )
    theirs = replaced(
        base, "get_model(vllm_config=self.vllm_config)", "get_model(vllm_config=self.vllm_config, omni=True)"
    )
    labels = ("v0.14.0", "v0.16.0", "0003-omni-talker.patch")
    result = merge3(src(*base), src(*ours), src(*theirs), labels=labels)
    assert not result.clean
    region = only(result)
    assert result.conflicts == [region]
    assert region.kind == "both-changed"
    assert region.conflict
    assert region.line == 3
    assert region.length == 7
    assert region.base == base[2] + "\n"
    assert region.ours == ours[2] + "\n"
    assert region.theirs == theirs[2] + "\n"
    assert region.key
    assert result.text == src(
        *base[:2],
        "<<<<<<< v0.16.0",
        ours[2],
        "||||||| v0.14.0",
        base[2],
        "=======",
        theirs[2],
        ">>>>>>> 0003-omni-talker.patch",
        *base[3:],
    )
    assert result.text.splitlines()[region.line - 1] == "<<<<<<< v0.16.0"
    check_regions(result)


def test_conflict_line_counts_expanded_blocks_above_it() -> None:
    """Blocks above a conflict are folded while merging; the reported line is in the expanded text."""
    base = list(EXEC)
    ours = replaced(base, "return self._postprocess(logits)", "return self._postprocess(logits, None)")
    theirs = with_block_after(
        replaced(base, "return self._postprocess(logits)", "return self._postprocess(logits, self.talker_outputs)"),
        4,
        KV_BLOCK,
    )
    result = merge3(src(*base), src(*ours), src(*theirs))
    region = only(result)
    assert region.conflict
    assert result.text.splitlines()[region.line - 1] == "<<<<<<< ours"
    assert region.line == len(EXEC) + len(KV_BLOCK)
    check_regions(result)


def test_default_labels() -> None:
    result = merge3("a = 1\n", "a = 2\n", "a = 3\n")
    assert result.text == "<<<<<<< ours\na = 2\n||||||| base\na = 1\n=======\na = 3\n>>>>>>> theirs\n"


# ---------------------------------------------------------------------------------------------
# near-block flags


def test_clean_upstream_edit_two_lines_from_an_omni_change_is_flagged() -> None:
    base = src(*EXEC)
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))  # before base line 5
    ours_lines = replaced(EXEC, "if not num_scheduled_tokens:", "if num_scheduled_tokens == 0:")  # base line 6
    result = merge3(base, src(*ours_lines), theirs)
    assert result.clean
    assert result.text == src(*with_block_after(ours_lines, 4, KV_BLOCK))
    region = only(result)
    assert region.kind == "near-block"
    assert not region.conflict
    assert region.ours == "        if num_scheduled_tokens == 0:\n"
    assert region.anchor is not None and region.anchor.first == KV_BLOCK[1].strip()
    assert result.text.splitlines()[region.line - 1] == "        if num_scheduled_tokens == 0:"
    check_regions(result)


def test_clean_upstream_edit_far_from_omni_changes_is_not_flagged() -> None:
    base = src(*EXEC)
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))
    ours_lines = replaced(EXEC, "return self._postprocess(logits)", "return self._postprocess(logits, None)")
    result = merge3(base, src(*ours_lines), theirs)
    assert result.clean
    assert result.regions == []


# ---------------------------------------------------------------------------------------------
# recorded resolutions


def _conflicting() -> tuple[str, str, str]:
    base = [
        "    def load_model(self):",
        "        self.model = get_model(vllm_config=self.vllm_config)",
        "        self.model.eval()",
    ]
    ours = replaced(
        base, "get_model(vllm_config=self.vllm_config)", "get_model(vllm_config=self.vllm_config, prefix='model')"
    )
    theirs = replaced(
        base, "get_model(vllm_config=self.vllm_config)", "get_model(vllm_config=self.vllm_config, omni=True)"
    )
    return src(*base), src(*ours), src(*theirs)


def test_recorded_resolution_is_reused() -> None:
    base, ours, theirs = _conflicting()
    first = merge3(base, ours, theirs, key_prefix="0003-omni.patch:npu_model_runner.py")
    region = only(first)
    assert region.conflict and region.kind == "both-changed"
    key = region.key
    assert len(key) == 64

    asked: list[str] = []
    store = {key: "        self.model = get_model(vllm_config=self.vllm_config, prefix='model', omni=True)\n"}

    def recorded(k: str) -> str | None:
        asked.append(k)
        return store.get(k)

    second = merge3(base, ours, theirs, key_prefix="0003-omni.patch:npu_model_runner.py", recorded=recorded)
    assert asked == [key]
    assert second.clean
    reused = only(second)
    assert reused.reused is True
    assert reused.kind == "reused"
    assert not reused.conflict
    assert reused.key == key
    assert reused.resolution == store[key]
    assert second.text == src(
        "    def load_model(self):",
        "        self.model = get_model(vllm_config=self.vllm_config, prefix='model', omni=True)",
        "        self.model.eval()",
    )
    assert "<<<<<<<" not in second.text
    check_regions(second)


def test_recorded_callback_is_only_asked_about_conflicts() -> None:
    base, ours, _ = _conflicting()
    asked: list[str] = []

    def recorded(k: str) -> str | None:
        asked.append(k)
        return None

    merge3(base, ours, base, recorded=recorded)
    assert asked == []


def test_unknown_key_leaves_the_conflict() -> None:
    base, ours, theirs = _conflicting()
    result = merge3(base, ours, theirs, recorded={"0" * 64: "x\n"}.get)
    assert only(result).conflict


def test_key_is_stable_and_depends_on_texts_and_prefix() -> None:
    base, ours, theirs = _conflicting()
    k1 = only(merge3(base, ours, theirs, key_prefix="p")).key
    k2 = only(merge3(base, ours, theirs, key_prefix="p")).key
    assert k1 == k2
    assert only(merge3(base, ours, theirs, labels=("a", "b", "c"), key_prefix="p")).key == k1  # labels are cosmetic
    assert only(merge3(base, ours, theirs, key_prefix="q")).key != k1
    other_theirs = theirs.replace("omni=True", "omni=False")
    assert only(merge3(base, ours, other_theirs, key_prefix="p")).key != k1
    other_ours = ours.replace("prefix='model'", "prefix='language_model'")
    assert only(merge3(base, other_ours, theirs, key_prefix="p")).key != k1
    # unrelated text elsewhere in the file does not move the key
    padded = "import torch\n\n\nclass NPUModelRunner:\n"
    assert only(merge3(padded + base, padded + ours, padded + theirs, key_prefix="p")).key == k1


def test_anchor_lines_edited_in_place_keep_the_block_between_them() -> None:
    """Upstream edited words of both anchor lines: the block stays between them (a word-level merge)."""
    base = src(*EXEC)
    ours_lines = replaced(EXEC, "self._update_states(scheduler_output)", "self._update_states(scheduler_output, None)")
    ours_lines = replaced(ours_lines, "scheduler_output.total_num_scheduled_tokens", "scheduler_output.num_tokens")
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))
    result = merge3(base, src(*ours_lines), theirs)
    assert result.clean
    assert only(result).kind == "merged-words"
    assert result.text == src(*with_block_after(ours_lines, 4, KV_BLOCK))


def test_recorded_resolution_for_an_anchor_lost_conflict() -> None:
    base = src(*EXEC)
    # upstream rewrote both anchor lines into something else (not a word-level edit of them)
    ours_lines = replaced(EXEC, "self._update_states(scheduler_output)", "with self.synchronize_input_prep():")
    ours_lines = replaced(
        ours_lines,
        "num_scheduled_tokens = scheduler_output.total_num_scheduled_tokens",
        "self._update_persistent_batch(scheduler_output, defer=True)",
    )
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))
    first = merge3(base, src(*ours_lines), theirs)
    key = only(first).key
    resolution = src(ours_lines[3], *KV_BLOCK, ours_lines[4])
    second = merge3(base, src(*ours_lines), theirs, recorded={key: resolution}.get)
    assert second.clean
    assert only(second).reused
    assert second.text == src(*with_block_after(ours_lines, 4, KV_BLOCK))


# ---------------------------------------------------------------------------------------------
# never drop or duplicate an omni block


@pytest.mark.parametrize(
    "ours",
    [
        DUMMY_BASE,
        DUMMY_UPSTREAM,
        DUMMY_WRAPPED,
        replaced(DUMMY_WRAPPED, "positions=positions,", "positions=positions, inputs_embeds=inputs_embeds,"),
    ],
    ids=["unchanged", "upstream-edit", "upstream-rewrap", "upstream-rewrap-and-edit"],
)
@pytest.mark.parametrize("where", ["after", "around"])
def test_patch_adding_a_block_plus_rewrapping_keeps_the_block_once(ours: list[str], where: str) -> None:
    extract = "        hidden_states, _ = self.extract_multimodal_outputs(hidden_states)"
    if where == "after":
        theirs = DUMMY_WRAPPED[:6] + block(extract) + DUMMY_WRAPPED[6:]
        blk = block(extract)
    else:  # the block wraps the re-wrapped call itself
        blk = block(*DUMMY_WRAPPED[1:6], extract)
        theirs = DUMMY_WRAPPED[:1] + blk + DUMMY_WRAPPED[6:]
    result = merge3(src(*DUMMY_BASE), src(*ours), src(*theirs))
    assert count_seq(result.text, blk) == 1
    assert result.text.count("Omni-new") == 2
    check_regions(result)


def test_rule_that_would_drop_a_block_falls_back_to_a_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stacked series: an earlier patch's block is in base and in ours (where upstream's replay changed it).

    The patch replaced that block and the line after it: kept-replacement would keep the patch's
    text and silently drop ours' version of the earlier block.  The merge must leave a conflict.
    """
    old = block("        self._omni_prepare(scheduler_output)")
    new = block("        self._omni_prepare(scheduler_output, self.input_batch)")
    head = "    def execute_model(self, scheduler_output):"
    tail = "        return logits"
    base = src(head, *old, "        logits = self.model.compute_logits(hidden_states[logits_indices])", tail)
    ours = src(head, *new, "        logits = self.model.compute_logits(hidden_states[logits_indices], None)", tail)
    theirs = src(head, "        logits = self.talker.run(scheduler_output)", tail)

    result = merge3(base, ours, theirs)
    region = only(result)
    assert region.conflict
    assert region.kind == "upstream-changed-replaced"
    (sections,) = conflict_sections(result.text)
    assert count_seq("\n".join(sections["ours"]), new) == 1
    assert count_seq(result.text, new) == 1
    check_regions(result)

    # without the block safety net, the rule that loses no upstream code still refuses: the block upstream's
    # replay changed is code the omni text lacks
    monkeypatch.setattr(merge, "_blocks_kept", lambda *args: True)
    unsafe = merge3(base, ours, theirs)
    assert only(unsafe).kind == "upstream-changed-replaced"
    assert count_seq(unsafe.text, new) == 1


def test_block_both_sides_inserted_is_not_doubled() -> None:
    base = src(*EXEC)
    theirs = src(*with_block_after(EXEC, 4, KV_BLOCK))
    ours_lines = with_block_after(
        replaced(EXEC, "self._update_states(scheduler_output)", "self._update_states(scheduler_output, None)"),
        4,
        KV_BLOCK,
    )
    result = merge3(base, src(*ours_lines), theirs)
    assert count_seq(result.text, KV_BLOCK) == 1


def test_line_wrapped_verbatim_into_a_block_is_not_replaced_code() -> None:
    base = [
        "    def _dummy_run(self, num_tokens):",
        "        hidden_states = self.model(input_ids=input_ids, positions=positions)",
        "        return hidden_states",
    ]
    ours = replaced(base, "positions=positions)", "positions=positions, inputs_embeds=inputs_embeds)")
    theirs = (
        base[:1]
        + block(base[1], "        hidden_states, _ = self.extract_multimodal_outputs(hidden_states)")
        + base[2:]
    )
    result = merge3(src(*base), src(*ours), src(*theirs))
    assert all(r.kind != "kept-replacement" for r in result.regions)
    assert "inputs_embeds=inputs_embeds" in result.text


# ---------------------------------------------------------------------------------------------
# property: random upstream edits never drop or duplicate the patch's blocks

_BODY = [
    "        self._update_states(scheduler_output)",
    "        num_scheduled_tokens = scheduler_output.total_num_scheduled_tokens",
    "        if not num_scheduled_tokens:",
    "            return EMPTY_MODEL_RUNNER_OUTPUT",
    "        attn_metadata, logits_indices = self._prepare_inputs(scheduler_output)",
    "        input_ids = self.input_ids.gpu[:num_input_tokens]",
    "        positions = self.positions.gpu[:num_input_tokens]",
    "        hidden_states = self.model(input_ids=input_ids, positions=positions)",
    "        logits = self.model.compute_logits(hidden_states[logits_indices])",
    "        self.input_batch.refresh_metadata()",
    "",
    "        sampler_output = self._sample(logits, spec_decode_metadata)",
    "        return self._postprocess(sampler_output)",
]
_UPSTREAM = [
    "        self._sync_metadata_across_dp(scheduler_output)",
    "        num_scheduled_tokens = scheduler_output.num_tokens",
    "        hidden_states = self._model_forward(input_ids, positions)",
    "        if self.use_aux_hidden_state_outputs:",
    "            hidden_states, aux = hidden_states",
    "",
    "        logits = self.model.compute_logits(hidden_states)",
    "        # upstream: ubatching",
    "        return self._postprocess(sampler_output)",
]
_BLOCKS = [
    [
        "        # [Omni] Handle KV transfer BEFORE updating states",
        "        self.kv_extractor.extract(scheduler_output)",
    ],
    ["        hidden_states, multimodal_outputs = self.extract_multimodal_outputs(hidden_states)"],
    [
        "        if self.has_talker_mtp:",
        "            self._talker_mtp_forward(hidden_states)",
        "        self.omni_connector.flush()",
    ],
]

_edit = st.tuples(st.sampled_from(["insert", "delete", "replace"]), st.integers(0, 40), st.sampled_from(_UPSTREAM))


@st.composite
def _scenario(draw: st.DrawFn) -> tuple[list[str], list[str], list[str], list[list[str]]]:
    body = draw(st.lists(st.sampled_from(_BODY), min_size=3, max_size=14))
    base = ["class NPUModelRunner(GPUModelRunner):", "    def execute_model(self, scheduler_output):", *body]
    n_blocks = draw(st.integers(1, 3))
    fence = draw(
        st.sampled_from(
            [
                FENCE,
                FENCE.replace("#  --", "# --"),
                "        # ---------------------------------------Omni-new------------------------",
            ]
        )
    )
    chosen = draw(st.permutations(range(len(_BLOCKS))))[:n_blocks]
    blocks = [[fence, *_BLOCKS[i], fence] for i in chosen]
    positions = sorted(draw(st.lists(st.integers(2, len(base)), min_size=n_blocks, max_size=n_blocks)))
    theirs = list(base)
    for blk, at in sorted(zip(blocks, positions, strict=True), key=lambda x: -x[1]):
        theirs[at:at] = blk
    ours = list(base)
    for kind, at, line in draw(st.lists(_edit, max_size=6)):
        at = at % (len(ours) + 1)
        if kind == "insert":
            ours.insert(at, line)
        elif at < len(ours):
            if kind == "delete":
                del ours[at]
            else:
                ours[at] = line
    return base, ours, theirs, blocks


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_scenario())
def test_random_upstream_edits_never_drop_or_duplicate_a_block(
    scenario: tuple[list[str], list[str], list[str], list[list[str]]],
) -> None:
    base, ours, theirs, blocks = scenario
    result = merge3(src(*base), src(*ours), src(*theirs), labels=("old", "new", "omni"))
    for blk in blocks:
        want = count_seq(src(*theirs), blk)
        assert want == 1
        assert count_seq(result.text, blk) == want, (blk, result.text)
        for inner in blk[1:-1]:
            assert result.text.splitlines().count(inner) == src(*theirs).splitlines().count(inner)
    assert sum("Omni-new" in line for line in result.text.splitlines()) == 2 * len(blocks)
    check_regions(result)
    for sections in conflict_sections(result.text):
        assert all("Omni-new" not in line for line in sections["ours"] + sections["base"])
    if result.clean:
        assert "<<<<<<<" not in result.text


# ---------------------------------------------------------------------------------------------
# the result must compile


def test_upstream_branch_added_to_code_the_patch_deleted_is_a_conflict() -> None:
    """Upstream adds an `elif` to an `if` the omni patch removed (vllm-ascend 0.30.0rc2's
    `uses_positions_for_attention` in `_dummy_run`): placing it alone would not compile, and keeping the omni
    text would lose it, so it is a conflict whose sides both compile."""
    base = src(
        "    def _dummy_run(self, num_tokens):",
        "        if self.use_compress:",
        "            self.positions.fill_(127)",
        "        attn_metadata = self._build_attention_metadata(num_tokens)",
    )
    ours = src(
        "    def _dummy_run(self, num_tokens):",
        "        if self.use_compress:",
        "            self.positions.fill_(127)",
        "        elif self.uses_positions_for_attention:",
        "            self.positions[:num_tokens].fill_(0)",
        "        attn_metadata = self._build_attention_metadata(num_tokens)",
    )
    theirs = src(
        "    def _dummy_run(self, num_tokens):",
        "        attn_metadata = self._build_attention_metadata(num_tokens)",
    )
    result = merge_checked.merge3_checked(base, ours, theirs)
    assert [r.kind for r in result.conflicts] == ["upstream-changed-replaced"]
    assert "uses_positions_for_attention" in (result.conflicts[0].ours or "")
    for side in ("ours", "theirs"):
        compile("class R:\n" + one_side(result.text, side)[0], "r.py", "exec")


def test_a_resolution_that_does_not_compile_becomes_a_conflict() -> None:
    """Both sides add a branch at one place: upstream's `else` first, then the omni `elif`, is not Python."""
    base = src("    def f(self, a):", "        if a:", "            self.x()", "        self.y()")
    ours = src(
        "    def f(self, a):",
        "        if a:",
        "            self.x()",
        "        else:",
        "            self.z()",
        "        self.y()",
    )
    theirs = src(
        "    def f(self, a):",
        "        if a:",
        "            self.x()",
        "        elif self.c:",
        "            self.q()",
        "        self.y()",
    )
    plain = merge3(base, ours, theirs)
    assert plain.clean and [r.kind for r in plain.regions] == ["both-inserted"]
    with pytest.raises(SyntaxError):
        compile("class R:\n" + plain.text, "r.py", "exec")
    wrapped = ["class R:"]
    checked = merge_checked.merge3_checked(
        "\n".join(wrapped) + "\n" + base, "\n".join(wrapped) + "\n" + ours, "\n".join(wrapped) + "\n" + theirs
    )
    assert not checked.clean
    (region,) = checked.conflicts
    assert "did not compile" in region.message
    assert "elif self.c:" in region.theirs and "else:" in region.ours


def sides_parse(text: str) -> list[int | None]:
    """The first syntax error of the module with every region taken to upstream, then to the patch."""
    return [merge_checked.syntax_error_line(merge_checked.one_side(text, side)[0]) for side in ("ours", "theirs")]


def test_a_conflict_region_never_cuts_a_statement() -> None:
    """Upstream turned a `with g(` into a `y = prep(` call; the patch edited the lines around `with g(`.  The
    plain region ends inside the open `with g(` on the patch side, whose common lines after it are upstream's
    arguments: taking the patch's side would not parse.  The region takes in the whole `with` statement."""
    base = src(
        "def f(a, b, n):",
        "    x = 1",
        "    with g(",
        "        a,",
        "        b=1,",
        "    ) as h:",
        "        run(h)",
        "    return x",
    )
    ours = src("def f(a, b, n):", "    x = 1", "    y = prep(", "        a,", "        n,", "    )", "    return x")
    theirs = src(
        "def f(a, b, n):",
        "    x = 2",
        "    with g2(",
        "        a,",
        "        b=1,",
        "    ) as h:",
        "        run(h)",
        "    return x",
    )
    plain = merge3(base, ours, theirs)
    assert sides_parse(plain.text)[0] is None and sides_parse(plain.text)[1] is not None
    result = merge_checked.merge3_checked(base, ours, theirs)
    assert sides_parse(result.text) == [None, None]
    (region,) = result.conflicts
    assert region.kind == "both-changed" and "widened to whole statements" in region.message
    assert region.ours == "".join(ours.splitlines(keepends=True)[1:6])
    assert region.theirs == "".join(theirs.splitlines(keepends=True)[1:7])
    assert region.base == "".join(base.splitlines(keepends=True)[1:7])
    assert region.line == 2 and region.length == 1 + 5 + 1 + 6 + 1 + 6 + 1
    assert result.text.splitlines()[region.line - 1].startswith("<<<<<<< ")
    assert region.key and region.key != plain.conflicts[0].key
    # taking either side gives that side's own code
    assert merge_checked.one_side(result.text)[0] == ours
    assert merge_checked.one_side(result.text, "theirs")[0] == theirs
    # a resolution recorded for the grown region is reused
    again = merge_checked.merge3_checked(base, ours, theirs, recorded={region.key: "    pass\n"}.get)
    assert again.clean and "    pass\n" in again.text and [r.kind for r in again.regions] == ["reused"]


def test_regions_whose_sides_parse_are_left_as_they_are() -> None:
    base = src("def f():", "    x = 1", "    return x")
    ours = src("def f():", "    x = 3", "    return x")
    theirs = src("def f():", "    x = 2", "    return x")
    plain, result = merge3(base, ours, theirs), merge_checked.merge3_checked(base, ours, theirs)
    assert result.text == plain.text and result.conflicts == plain.conflicts


# ---------------------------------------------------------------------------------------------
# code both sides added: kept once, or a conflict, never two copies (issue 18)

PREEMPT = [
    "        if has_kv_transfer_group():",
    "            kv_connector_metadata = scheduler_output.kv_connector_metadata",
    "            get_kv_transfer_group().handle_preemptions(kv_connector_metadata)",
]


def calls(text: str, call: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip() == call)


def test_the_same_code_both_sides_inserted_is_kept_once_upstreams_copy() -> None:
    """Upstream now inserts, with its own comment and layout, what the omni patch inserted at the same place."""
    theirs = with_block_after(EXEC, 3, ["        # omni: store preempted blocks first", *PREEMPT])
    ours = with_block_after(EXEC, 3, ["        # Preemption stores must run before _update_states()", *PREEMPT[:2]])
    ours = with_block_after(
        ours,
        6,
        [
            "            get_kv_transfer_group().handle_preemptions(",
            "                kv_connector_metadata",
            "            )",
        ],
    )
    result = merge3(src(*EXEC), src(*ours), src(*theirs))
    check_regions(result)
    assert result.clean and result.text == src(*ours)
    region = only(result)
    assert region.kind == "already-upstream" and not region.conflict
    assert "omni: store preempted blocks first" in (region.theirs or "")


def test_the_same_call_under_another_guard_is_a_both_added_same_conflict() -> None:
    """The omni block asserts what upstream tests: a conflict of its own kind showing both, not two calls."""
    omni = block(*PREEMPT[:2], "            assert kv_connector_metadata is not None", PREEMPT[2])
    upstream = [*PREEMPT[:2], "            if kv_connector_metadata is not None:", "    " + PREEMPT[2]]
    theirs = with_block_after(EXEC, 3, omni)
    ours = with_block_after(EXEC, 3, ["", *upstream])  # upstream's lines one blank line away
    result = merge3(src(*EXEC), src(*ours), src(*theirs))
    check_regions(result)
    conflict = only(result)
    assert conflict.kind == "both-added-same" and conflict.conflict
    section = conflict_sections(result.text)[0]
    assert any("if kv_connector_metadata" in x for x in section["ours"])
    assert any("assert kv_connector_metadata" in x for x in section["theirs"])
    for side in ("ours", "theirs"):
        assert calls(merge_checked.one_side(result.text, side)[0], PREEMPT[2].strip()) == 1


def test_different_code_both_sides_inserted_keeps_both() -> None:
    theirs = with_block_after(EXEC, 3, ["        self.omni_hook(scheduler_output)"])
    ours = with_block_after(EXEC, 3, ["        self.upstream_hook(scheduler_output)"])
    result = merge3(src(*EXEC), src(*ours), src(*theirs))
    assert result.clean and "omni_hook" in result.text and "upstream_hook" in result.text
    assert only(result).kind == "both-inserted"


_STATEMENTS = [
    "        self.kv_extractor.extract(scheduler_output)",
    "        get_kv_transfer_group().handle_preemptions(kv_connector_metadata)",
    "        self.model.on_requests_finished(scheduler_output.finished_req_ids)",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(min_value=3, max_value=len(EXEC) - 1),
    st.lists(st.integers(min_value=0, max_value=len(_STATEMENTS) - 1), min_size=1, max_size=3),
    st.integers(min_value=-2, max_value=2),
    st.booleans(),
    st.booleans(),
)
def test_statements_both_sides_add_never_run_twice(
    at: int, picked: list[int], shift: int, guarded: bool, fenced: bool
) -> None:
    """Upstream inserts statements the omni patch already inserted near the same place (maybe under a guard):
    the merge never has more copies of a call than either side, and never loses the omni block."""
    stmts = [_STATEMENTS[i] for i in dict.fromkeys(picked)]
    omni = block(*stmts) if fenced else stmts
    theirs = with_block_after(EXEC, at, omni)
    up = ["        if scheduler_output is not None:", *("    " + s for s in stmts)] if guarded else list(stmts)
    where = min(max(3, at + shift), len(EXEC) - 1)
    ours = with_block_after(EXEC, where, up)
    result = merge3(src(*EXEC), src(*ours), src(*theirs))
    check_regions(result)
    for side in ("ours", "theirs"):
        text = merge_checked.one_side(result.text, side)[0]
        for s in stmts:
            assert calls(text, s.strip()) <= 1, (side, s, result.text)
    if fenced:  # the block is in the result whole, in a conflict showing it, or reported as upstream's now
        kept = count_seq(result.text, omni) >= 1
        assert kept or any(r.kind == "already-upstream" and "\n".join(omni) in (r.theirs or "") for r in result.regions)


def test_an_omni_block_upstream_now_has_is_reported_with_its_fences() -> None:
    omni = block("        # omni: store preempted blocks first", *PREEMPT)
    theirs = with_block_after(EXEC, 3, omni)
    ours = with_block_after(EXEC, 3, PREEMPT)
    result = merge3(src(*EXEC), src(*ours), src(*theirs))
    check_regions(result)
    region = only(result)
    assert result.clean and result.text == src(*ours)
    assert region.kind == "already-upstream" and src(*omni) in (region.theirs or "")


def unbound_reads(text: str, *names: str) -> list[str]:
    """Which of ``names`` a side of ``text`` reads with no binding before it (ruff's F821, as pq check runs it)."""
    from patch_queue.series import fmt

    out = []
    for side in ("ours", "theirs"):
        found = fmt.lint(merge_checked.one_side(text, side)[0], ("F821",)) or []
        out += [f"{side}:{x.name}" for x in found if x.name in names]
    return out


def test_a_clean_merge_that_loses_a_binding_becomes_a_conflict() -> None:
    """The patch rewrote the lines that assign `y`; upstream added a line that reads `y`.  Each hunk merges
    cleanly, and the result would raise NameError.  Each becomes a region of its own, saying they go together:
    taken to the same side, each side is its own."""
    base = src("def f(a):", "    y = a + 1", "    z = 2", "    w = 3", "    v = 4", "    return z")
    ours = src("def f(a):", "    y = a + 1", "    z = 2", "    w = 3", "    v = 4", "    log(y)", "    return z")
    theirs = src("def f(a):", "    q = omni(a)", "    z = 2", "    w = 3", "    v = 4", "    return z")
    plain = merge3(base, ours, theirs)
    assert plain.clean and unbound_reads(plain.text, "y") == ["ours:y", "theirs:y"]
    result = merge_checked.merge3_checked(base, ours, theirs)
    assert unbound_reads(result.text, "y") == []
    binder, reader = result.conflicts
    assert (binder.ours, binder.theirs) == ("    y = a + 1\n", "    q = omni(a)\n")
    assert (reader.ours, reader.theirs) == ("    log(y)\n", "")
    for region in (binder, reader):
        assert region.kind == "name-linked"
        assert "goes with the other regions that name `y`: take the same side in each" in region.message
    assert merge_checked.one_side(result.text)[0] == ours
    assert merge_checked.one_side(result.text, "theirs")[0] == theirs


def test_a_region_grows_down_to_the_clean_line_that_reads_what_one_side_binds() -> None:
    """Upstream's side of a conflict binds `n`, and upstream's clean change further down reads it: taking the
    patch's side would leave the read unbound, so the read becomes a region too, with no line on the patch
    side, and both regions say they go together."""
    base = src("def f(a):", "    x = 1", "    k = 0", "    k += 1", "    k += 2", "    return x")
    ours = src(
        "def f(a):", "    x = 3", "    n = a", "    k = 0", "    k += 1", "    k += 2", "    use(n)", "    return x"
    )
    theirs = src("def f(a):", "    x = 2", "    k = 0", "    k += 1", "    k += 2", "    return x")
    plain = merge3(base, ours, theirs)
    assert len(plain.conflicts) == 1 and unbound_reads(plain.text, "n") == ["theirs:n"]
    result = merge_checked.merge3_checked(base, ours, theirs)
    assert unbound_reads(result.text, "n") == []
    binder, reader = result.conflicts
    assert binder.kind == "both-changed" and binder.ours == "    x = 3\n    n = a\n"
    assert (reader.kind, reader.ours, reader.theirs) == ("name-linked", "    use(n)\n", "")
    assert all("goes with the other regions that name `n`" in r.message for r in (binder, reader))
    assert merge_checked.one_side(result.text)[0] == ours
    assert merge_checked.one_side(result.text, "theirs")[0] == theirs


def test_a_read_before_the_line_that_binds_it_grows_the_region() -> None:
    """The patch renamed `h` to `out` inside a conflict and added lines below that read `out` and then assign it
    again: taking upstream's side reads `out` before anything binds it (ruff's F821, an UnboundLocalError)."""
    base = src("def f(a):", "    h = run(a)", "    k = 0", "    k += 1", "    k += 2", "    return h")
    ours = src("def f(a):", "    h = run(a, 1)", "    k = 0", "    k += 1", "    k += 2", "    return h")
    theirs = src(
        "def f(a):",
        "    out = run(a, 2)",
        "    k = 0",
        "    k += 1",
        "    k += 2",
        "    if wrap(out):",
        "        out = make(out)",
        "    return out",
    )
    plain = merge3(base, ours, theirs)
    assert len(plain.conflicts) == 1 and set(unbound_reads(plain.text, "out")) == {"ours:out"}
    result = merge_checked.merge3_checked(base, ours, theirs)
    assert unbound_reads(result.text, "out") == []
    assert merge_checked.one_side(result.text)[0] == ours
    assert merge_checked.one_side(result.text, "theirs")[0] == theirs


def test_the_same_change_in_another_layout_takes_upstreams_lines() -> None:
    """Both sides deleted the same block; the patch left a blank line where upstream left none: one change,
    resolved to upstream's lines and flagged, not a conflict."""
    base = src("def f(a):", "    x = 1", "    if a:", "        g(a)", "        h(a)", "    return x")
    ours = src("def f(a):", "    x = 1", "    return x")
    theirs = src("def f(a):", "    x = 1", "", "    return x")
    result = merge3(base, ours, theirs)
    assert result.text == ours and result.clean
    (flag,) = result.regions
    assert flag.kind == "layout-only" and "both sides made the same change" in flag.message
    assert (flag.ours, flag.theirs) == ("", "\n")


def test_an_automatic_resolution_that_dropped_a_binding_becomes_a_region() -> None:
    """Upstream inserted `o0 = ...` among lines the patch rewrote and reads `o0` further down: the lines the
    patch rewrote are a region with upstream's binding on its side (keeping the patch's text would lose
    upstream's line), and the read a name-linked region of its own."""
    base = _program(["v0 = g(a)", "v1 = g(v0)", "v2 = g(v1)", "v3 = g(v2)", "return v3"])
    ours = _program(["v0 = g(a)", "o0 = h(a)", "v1 = g(v0)", "v2 = g(v1)", "use(o0)", "v3 = g(v2)", "return v3"])
    theirs = _program(["t_v0 = g(a)", "t0 = h(a)", "v1 = g(t_v0)", "v2 = g(v1)", "v3 = g(v2)", "return v3"])
    plain = merge3(base, ours, theirs)
    assert [r.kind for r in plain.regions] == ["upstream-changed-replaced", "near-block"]
    assert unbound_reads(plain.text, "o0") == ["theirs:o0"]
    result = merge_checked.merge3_checked(base, ours, theirs)
    assert unbound_reads(result.text, "o0") == []
    binder, reader = result.conflicts
    assert binder.ours is not None and "    o0 = h(a)\n" in binder.ours
    assert (reader.kind, reader.ours, reader.theirs) == ("name-linked", "    use(o0)\n", "")
    assert all("goes with the other regions that name `o0`" in r.message for r in (binder, reader))


def test_a_region_that_only_reads_the_name_is_not_taken_for_its_binding() -> None:
    """Upstream renamed `v0` (its binding and its read), the patch inserted a read of `v0` next to another
    upstream change: the region grown for it is the one around the binding, not the one around the read."""
    base = _program(["v0 = g(a)", "v1 = g(v0)", "v2 = g(v1)", "v3 = g(v2)", "return v3"])
    ours = _program(["w0 = g(a)", "v1 = g(w0)", "v2 = g(v1)", "w3 = g(v2)", "return w3"])
    theirs = _program(["v0 = g(a)", "v1 = g(v0)", "v2 = g(v1)", "t0 = h(v0)", "v3 = g(v2)", "return v3"])
    result = merge_checked.merge3_checked(base, ours, theirs)
    assert unbound_reads(result.text, "v0") == []
    binder, reader = result.conflicts
    assert (binder.ours, binder.theirs) == ("    w0 = g(a)\n    v1 = g(w0)\n", "    v0 = g(a)\n    v1 = g(v0)\n")
    assert reader.theirs is not None and "    t0 = h(v0)\n" in reader.theirs
    assert merge_checked.one_side(result.text)[0] == ours


def test_a_call_upstream_moved_out_of_a_region_is_made_once_on_either_side() -> None:
    """Upstream moved `s.update(a)` out of lines the patch rewrote (keeping the call there): taking the patch's
    side would run it twice.  The copy upstream's clean change brought in becomes a region of its own, and
    both regions say they go together."""
    base = src(
        "def f(a, s):", "    x = 1", "    k = 0", "    if a:", "        y = 2", "        s.update(a)", "    return x"
    )
    ours = src(
        "def f(a, s):", "    x = 1", "    s.update(a)", "    k = 0", "    if a:", "        y = 5", "    return x"
    )
    theirs = src(
        "def f(a, s):",
        "    x = 1",
        "    k = 0",
        "    if a:",
        "        y = omni(2)",
        "        s.update(a)",
        "    return x",
    )
    plain = merge3(base, ours, theirs)
    assert [t.code for t in merge_calls.made_twice(plain.text, ours, theirs)] == ["s.update(a)"]
    result = merge_checked.merge3_checked(base, ours, theirs)
    assert merge_calls.made_twice(result.text, ours, theirs) == []
    moved, rewritten = result.conflicts
    assert (moved.kind, moved.ours, moved.theirs) == ("name-linked", "    s.update(a)\n", "")
    assert rewritten.theirs is not None and "s.update(a)" in rewritten.theirs
    said = "goes with the other regions that make the call `s.update(a)`: take the same side in each"
    assert said in moved.message and said in rewritten.message
    assert merge_checked.one_side(result.text)[0] == ours
    assert merge_checked.one_side(result.text, "theirs")[0] == theirs


def test_a_call_made_twice_around_a_nested_def_is_found() -> None:
    """The copies of `s.go()` stand before and after a nested def of the method: still one method's calls."""
    ours = src("def f(s):", "    s.go()", "    def g():", "        pass", "    return g")
    theirs = src("def f(s):", "    def g():", "        pass", "    s.go()", "    return g")
    merged = src("def f(s):", "    s.go()", "    def g():", "        pass", "    s.go()", "    return g")
    (twice,) = merge_calls.made_twice(merged, ours, theirs)
    assert (twice.scope, twice.code, twice.lines) == ("f", "s.go()", (2, 5))
    assert merge_calls.made_twice(ours, ours, theirs) == []


def _program(body: list[str]) -> str:
    return "def f(a):\n" + "".join(f"    {line}\n" for line in body)


@st.composite
def _renamed_and_read(draw: st.DrawFn, tag: str) -> str:
    """A chain `v0 = g(a)`, `vK = g(vK-1)`, … edited as one side of a merge would: variables renamed (the binding
    and every read after it), lines inserted that bind a new name from a bound one and maybe read it later,
    calls changed, unread assignments deleted, an assignment wrapped in `if`/`else`."""
    chain: list[list[str]] = [["v0", "g", "a"]] + [
        [f"v{k}", "g", f"v{k - 1}"] for k in range(1, 8)
    ]  # target, call, read
    wrapped: set[int] = set()
    for n in range(draw(st.integers(1, 4))):
        k = draw(st.integers(0, len(chain) - 1))
        target = chain[k][0]
        op = draw(st.sampled_from(["rename", "rename", "insert", "insert", "call", "delete", "wrap"]))
        if op == "rename" and target:
            new = f"{tag}{n}_{target}"
            chain[k][0] = new
            for item in chain[k + 1 :]:
                item[2] = new if item[2] == target else item[2]
        elif op == "insert":
            read = draw(st.sampled_from(["a"] + [c[0] for c in chain[:k] if c[0]]))
            chain.insert(k, [f"{tag}{n}", "h", read])
            if draw(st.booleans()):
                chain.insert(draw(st.integers(k + 1, len(chain))), ["", "use", f"{tag}{n}"])
        elif op == "call" and target:
            chain[k][1] = "m"
        elif op == "delete" and target and k < len(chain) - 1 and all(c[2] != target for c in chain[k + 1 :]):
            del chain[k]
        elif op == "wrap" and target:
            wrapped.add(id(chain[k]))
    body: list[str] = []
    for target, call, read in chain:
        if not target:
            body.append(f"{call}({read})")
        elif any(id(c) in wrapped for c in chain if c[0] == target):
            body += [f"if c_{target}:", f"    {target} = {call}({read})", "else:", f"    {target} = None"]
        else:
            body.append(f"{target} = {call}({read})")
    last = [c[0] for c in chain if c[0]][-1]
    return _program([*body, f"return {last}"])


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_renamed_and_read("o"), _renamed_and_read("t"))
def test_each_side_of_a_merge_binds_what_it_reads(ours: str, theirs: str) -> None:
    """Upstream and the patch each bind everything they read; then so does each side of the merged module (its
    regions all taken to that side), whatever renames, insertions, reads and deletions the two made."""
    base = _program([f"v{k} = g({'a' if k == 0 else f'v{k - 1}'})" for k in range(8)] + ["return v7"])
    for text in (ours, theirs):
        assert binding.made_unbound(text, text, text) == [], text
    result = merge_checked.merge3_checked(base, ours, theirs)
    for view in sides(result.text).values():
        compile(view, "<merged>", "exec")
    assert binding.made_unbound(result.text, ours, theirs) == [], result.text


def test_a_name_the_patch_itself_leaves_unbound_grows_nothing() -> None:
    """The patch's own text reads `missing` with nothing binding it: not the merge's doing, left to pq check."""
    base = src("def f(a):", "    x = 1", "    y = 1", "    z = 1", "    return x")
    ours = src("def f(a):", "    x = 3", "    y = 1", "    z = 1", "    return x")
    theirs = src("def f(a):", "    x = 2", "    y = 1", "    z = 1", "    return missing")
    plain, result = merge3(base, ours, theirs), merge_checked.merge3_checked(base, ours, theirs)
    assert result.text == plain.text and result.conflicts == plain.conflicts


def test_regions_of_one_function_that_share_a_name_go_together() -> None:
    """Upstream binds `x` where the omni patch changed the lines, and reads it further down, where the patch
    changed the lines too: two regions, taking different sides of them reads `x` unbound, so both carry the
    link `name:x` and say so.  A nested def between them does not make them two functions."""
    base = (
        "class R:\n    def f(self):\n        if self.a:\n            v = 1\n        one = 1\n        two = 2\n"
        "        three = 3\n\n        def inner():\n            return 1\n\n        if self.b:\n            print(w)\n"
    )
    ours = base.replace("v = 1", "x = self.compute()").replace("print(w)", "print(x)")
    theirs = base.replace("v = 1", "v = 2").replace("print(w)", "print(w, 1)")
    result = merge_checked.merge3_checked(base, ours, theirs)
    conflicts = [r for r in result.regions if r.conflict]
    assert [c.links for c in conflicts] == [("name:x",), ("name:x",)]
    assert all(
        c.message.endswith("goes with the other regions that name `x`: take the same side in each") for c in conflicts
    )
    # in two functions, the same name is two locals: no link
    apart = base.replace("\n        def inner():\n            return 1\n", "\n    def g(self):\n")
    result = merge_checked.merge3_checked(
        apart,
        apart.replace("v = 1", "x = self.compute()").replace("print(w)", "print(x)"),
        apart.replace("v = 1", "v = 2").replace("print(w)", "print(w, 1)"),
    )
    assert compile(apart, "apart", "exec") and [c.links for c in result.regions if c.conflict] == [(), ()]


def test_bound_names_reads_each_binding_form_once_as_bound_in_does() -> None:
    """Lines that do not parse alone (a cut statement): the names bound_names finds in one pass are exactly the
    words bound_in says are bound, form by form."""
    lines = (
        "        a.b, c[0], total: int = 1\n        n += 2\n        for i, (j, k) in pairs:\n"
        "        with open(p) as handle:\n        def inner(x):\n        class Box:\n"
        "        from m import q as r, s\n        if (w := f(v)) and self.y == 3:\n        items.append(\n"
    )
    words = set(binding.NAME.findall(lines))
    expected = {w for w in words if binding.bound_in(lines, w)}
    assert binding.bound_names(lines) == expected
    assert expected >= {"total", "n", "i", "j", "k", "handle", "inner", "Box", "q", "r", "s", "w"}
    assert not expected & {"a", "b", "c", "pairs", "open", "p", "x", "f", "v", "self", "y", "items"}


# ---------------------------------------------------------------------------------------------
# statements that belong together: no half of a pair kept alone

_PAIR_BASE = [
    "class Runner:",
    "    def execute_model(self, x):",
    "        a = g(x)",
    "        b = g(a)",
    "        c = g(b)",
    "        hidden = self.model(c)",
    "        out = post(hidden)",
    "        return out",
]
_PAIR_OURS = [
    *_PAIR_BASE[:3],
    "        self.kvpp.prepare_forward(a)",
    *_PAIR_BASE[3:6],
    "        self.kvpp.complete_forward()",
    *_PAIR_BASE[6:],
]
_PAIR_THEIRS = [*_PAIR_BASE[:5], *block("        return self.omni_forward(c)")]


def test_a_call_upstream_adds_in_code_the_patch_replaced_conflicts_with_its_partner() -> None:
    """vllm-ascend 0.30.0rc2: `self.kvpp.prepare_forward(...)` before the forward call merges cleanly, its partner
    `self.kvpp.complete_forward()` after it lies in lines the omni patch replaced.  The partner is a conflict
    showing upstream's change, and the clean half becomes a region going with it, so that taking the patch's
    side of one takes the other's too."""
    plain = merge3(src(*_PAIR_BASE), src(*_PAIR_OURS), src(*_PAIR_THEIRS))
    assert "self.kvpp.prepare_forward(a)" in one_side(plain.text, "theirs")[0]  # plain: the half alone
    result = merge_checked.merge3_checked(src(*_PAIR_BASE), src(*_PAIR_OURS), src(*_PAIR_THEIRS))
    first, second = result.conflicts
    label = "pair:self.kvpp.complete_forward() and self.kvpp.prepare_forward()"
    assert first.kind == "name-linked" and label in first.links and "prepare_forward" in (first.ours or "")
    assert second.kind == "upstream-changed-replaced" and label in second.links
    assert "complete_forward" in (second.ours or "") and "which belong together" in second.message
    for side, present in (("ours", True), ("theirs", False)):
        view = one_side(result.text, side)[0]
        assert ("prepare_forward" in view, "complete_forward" in view) == (present, present)
        compile(view, "r.py", "exec")


def test_a_name_upstream_binds_for_code_the_patch_replaced_goes_with_it() -> None:
    """Upstream binds `executor = self._prepare_executor()` and reads it only in lines the omni patch replaced
    (`executor.release()`): the binding goes with that region."""
    ours = [
        *_PAIR_BASE[:3],
        "        executor = self._prepare_executor()",
        *_PAIR_BASE[3:6],
        "        if executor is not None:",
        "            executor.release()",
        *_PAIR_BASE[6:],
    ]
    result = merge_checked.merge3_checked(src(*_PAIR_BASE), src(*ours), src(*_PAIR_THEIRS))
    assert [("name:executor" in r.links) for r in result.conflicts] == [True, True]
    assert "executor = self._prepare_executor()" not in one_side(result.text, "theirs")[0]


@pytest.mark.parametrize(
    "call,partner",
    [
        ("self.kvpp.complete_forward", "self.kvpp.prepare_forward"),
        ("executor.release", "executor.acquire"),
        ("_finish_profiling_chunk_timing", "_start_profiling_chunk_timing"),
        ("self.unlocked_clock", None),  # a word of a pair only as a part of another word
    ],
)
def test_partners(call: str, partner: str | None) -> None:
    found = merge_checked.partners(call)
    assert (partner in found) if partner else not found


def test_an_upstream_change_that_holds_the_patchs_takes_upstreams_lines() -> None:
    """vllm-omni 0.24.0's _dummy_run already passed upstream's new first argument (`self.query_start_loc`) in the
    call upstream then moved into a deeper block: the patch's change is part of upstream's, so upstream's lines
    are taken (already-upstream) instead of a conflict; a patch line upstream lacks keeps it a conflict."""
    base = [
        "    def f(self):",
        "        if not profile:",
        "            n = self._pad(num_tokens, num_reqs)",
        "        return n",
    ]
    ours = [
        "    def f(self):",
        "        with ctx():",
        "            if not profile:",
        "                n = self._pad(",
        "                    self.query_start_loc,",
        "                    num_tokens,",
        "                    num_reqs,",
        "                )",
        "            self.commit(n)",
        "        return n",
    ]
    theirs = [
        "    def f(self):",
        "        if not profile:",
        "            n = self._pad(",
        "                self.query_start_loc,",
        "                num_tokens,",
        "                num_reqs,",
        "            )",
        "        return n",
    ]
    result = merge3(src(*base), src(*ours), src(*theirs))
    assert result.clean and result.text == src(*ours)
    assert [r.kind for r in result.regions] == ["already-upstream"]
    omni = [*theirs[:6], "                omni_arg,", *theirs[6:]]
    assert not merge3(src(*base), src(*ours), src(*omni)).clean
