"""Unit tests of :mod:`patch_queue.merge.anchors` on small synthetic runner snippets with the real fence lines."""

from __future__ import annotations

import pytest

from patch_queue.merge import anchors
from patch_queue.merge.anchors import Block, FenceProblem, parse_blocks

# The fence variants the published runners use, verbatim (indentation included).
FENCE_SPACED_8 = (
    "        #  -------------------------------------- Omni-new -------------------------------------------------"  # noqa: E501
)
FENCE_SPACED_12 = (
    "            # -------------------------------------- Omni-new -------------------------------------------------"  # noqa: E501
)
FENCE_TIGHT_8 = (
    "        # ---------------------------------------Omni-new----------------------------------------------"  # noqa: E501
)
FENCE_TIGHT_12 = (
    "            # ---------------------------------------Omni-new----------------------------------------------"  # noqa: E501
)
FENCE_SPACED_4 = (
    "    #  -------------------------------------- Omni-new -------------------------------------------------"  # noqa: E501
)
PLAIN_8 = "        # -------------------------------------------------------------------------------------------------"
PLAIN_12 = (
    "            # -------------------------------------------------------------------------------------------------"  # noqa: E501
)


def src(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def lines_of(text: str, block: Block) -> list[str]:
    return text.splitlines()[block.start - 1 : block.end]


@pytest.mark.parametrize(
    "fence",
    [
        FENCE_SPACED_8,
        FENCE_TIGHT_8,
        "        # -------------------------------------- Omni-new -------------------------------------------------",
        "        # ----- Omni-new -----",
        "        #---Omni-new---",
        "\t\t# ----- Omni-new -----",
    ],
    ids=["double-space", "tight", "single-space", "short", "no-space", "tabs"],
)
def test_every_fence_variant_pairs_with_itself(fence: str) -> None:
    text = src(
        "class NPUModelRunner(GPUModelRunner):",
        "    def _update_states(self, scheduler_output):",
        "        super()._update_states(scheduler_output)",
        fence,
        "        # [Omni] keep the talker's per-request state in step",
        "        for req_id in scheduler_output.finished_req_ids:",
        "            self.talker_states.pop(req_id, None)",
        fence,
        "        return self.input_batch",
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert len(blocks) == 1
    b = blocks[0]
    assert (b.index, b.start, b.end, b.fenced) == (0, 4, 8, True)
    assert b.indent == len(fence) - len(fence.lstrip(" \t"))
    assert b.first == "# [Omni] keep the talker's per-request state in step"


def test_mixed_variants_pair_in_order() -> None:
    """The first fence opens, the next closes, whatever the spelling of each."""
    text = src(
        "    def load_model(self):",
        FENCE_SPACED_8,
        "        self.talker = None",
        FENCE_TIGHT_8,
        "        self.model = get_model(vllm_config=self.vllm_config)",
        FENCE_TIGHT_8,
        "        self.model.set_omni_mode(True)",
        FENCE_SPACED_8,
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert [(b.start, b.end) for b in blocks] == [(2, 4), (6, 8)]
    assert [b.first for b in blocks] == ["self.talker = None", "self.model.set_omni_mode(True)"]


def test_plain_dashed_line_closes_a_block() -> None:
    text = src(
        "    def _dummy_run(self, num_tokens):",
        "        with self.maybe_dummy_run_with_lora(self.lora_config, num_scheduled_tokens):",
        "            outputs = self.model(input_ids=input_ids, positions=positions)",
        "            if self.use_aux_hidden_state_outputs:",
        "                hidden_states, _ = outputs",
        "            else:",
        "                hidden_states = outputs",
        FENCE_SPACED_12,
        "            hidden_states, _ = self.extract_multimodal_outputs(hidden_states)",
        PLAIN_12,
        "            dummy_compute_logits(hidden_states)",
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert len(blocks) == 1
    b = blocks[0]
    assert (b.start, b.end, b.indent, b.fenced) == (8, 10, 12, True)
    assert b.first == "hidden_states, _ = self.extract_multimodal_outputs(hidden_states)"
    assert lines_of(text, b) == [FENCE_SPACED_12, "            " + b.first, PLAIN_12]


def test_plain_dashed_line_outside_a_block_is_not_a_fence() -> None:
    text = src(
        "    def profile_run(self):",
        PLAIN_8,
        "        # Profile with multimodal encoder & encoder cache.",
        PLAIN_8,
        "        self._dummy_run(self.max_num_tokens)",
    )
    assert parse_blocks(text) == ([], [])


def test_inline_omni_new_comment_is_a_one_line_block() -> None:
    text = src(
        "    def _prepare_inputs(self, scheduler_output):",
        "        return (",
        "            attn_metadata,",
        "            logits_indices,",
        "            spec_decode_metadata,",
        "            num_scheduled_tokens,  # Omni-new: the talker needs the per-request counts",
        "        )",
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert blocks == [
        Block(0, 6, 6, 12, False, "num_scheduled_tokens,  # Omni-new: the talker needs the per-request counts")
    ]


def test_comment_only_mention_of_omni_new_is_not_an_inline_block() -> None:
    text = src(
        "    def execute_model(self, scheduler_output):",
        "        # Omni-new: see below",
        "        return self._execute(scheduler_output)",
    )
    assert parse_blocks(text) == ([], [])


def test_inline_tag_inside_a_fenced_block_is_part_of_it() -> None:
    text = src(
        "    def sample_tokens(self, grammar_output):",
        FENCE_SPACED_8,
        "        self._omni_sample(",
        "            grammar_output,  # Omni-new: structured output for the talker",
        "        )",
        FENCE_SPACED_8,
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert [(b.start, b.end, b.fenced) for b in blocks] == [(2, 6, True)]


def test_nested_indentation_inside_a_block_and_blocks_at_several_depths() -> None:
    text = src(
        "class NPUARModelRunner(NPUModelRunner):",
        "    def execute_model(self, scheduler_output):",
        FENCE_SPACED_8,
        "        if self.has_talker_mtp:",
        "            for req_id in scheduler_output.scheduled_new_reqs:",
        "                if req_id not in self.talker_states:",
        "                    self.talker_states[req_id] = TalkerState()",
        "            self._sync_talker()",
        FENCE_SPACED_8,
        "        for i, req_id in enumerate(self.input_batch.req_ids):",
        "            if req_id in discard_ids:",
        FENCE_TIGHT_12.replace("            ", "                ", 1),
        "                self.talker_states.pop(req_id, None)",
        FENCE_TIGHT_12.replace("            ", "                ", 1),
        "                continue",
        FENCE_TIGHT_12,
        FENCE_TIGHT_12,
        "        return output",
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert [(b.start, b.end, b.indent) for b in blocks] == [(3, 9, 8), (12, 14, 16), (16, 17, 12)]
    assert blocks[0].first == "if self.has_talker_mtp:"
    assert blocks[1].first == "self.talker_states.pop(req_id, None)"
    assert blocks[2].first == ""  # an empty block (fence right after fence) has no meaningful line


def test_whole_omni_method_wrapped_at_class_indentation() -> None:
    text = src(
        "class NPUARModelRunner(NPUModelRunner):",
        "    def _make_buffer(self, *size, dtype, numpy=True):",
        "        return super()._make_buffer(*size, dtype=dtype, numpy=numpy)",
        "",
        FENCE_SPACED_4,
        "    def capture_model(self) -> int:",
        "        npugraph_memory_bytes = super().capture_model()",
        "        self._capture_talker_mtp_graphs()",
        "        return npugraph_memory_bytes",
        "",
        "    @staticmethod",
        "    def _as_bool(value) -> bool:",
        "        if isinstance(value, str):",
        '            return value.lower() in ("1", "true", "yes", "on")',
        "        return bool(value)",
        FENCE_SPACED_4,
        "",
        "    @torch.inference_mode()",
        "    def execute_model(self, scheduler_output):",
        "        pass",
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert len(blocks) == 1
    b = blocks[0]
    assert (b.start, b.end, b.indent, b.fenced) == (5, 16, 4, True)
    assert b.first == "def capture_model(self) -> int:"


def test_unclosed_fence_at_end_of_file_is_a_problem_on_its_line() -> None:
    text = src(
        "class NPUModelRunner(GPUModelRunner):",
        "    def load_model(self):",
        "        self.model = get_model(vllm_config=self.vllm_config)",
        FENCE_SPACED_8,
        "        self.talker = self.model.talker",
        "        self.talker.eval()",
    )
    blocks, problems = parse_blocks(text)
    assert blocks == []
    assert len(problems) == 1
    assert problems[0].line == 4
    assert "never closed" in problems[0].message


def test_close_at_another_indentation_is_a_problem_on_the_close_line() -> None:
    text = src(
        "    def _dummy_run(self, num_tokens):",
        "        if self.use_aux_hidden_state_outputs:",
        FENCE_TIGHT_12,
        "            hidden_states, _ = self.extract_multimodal_outputs(hidden_states)",
        FENCE_TIGHT_8,
        "        return hidden_states",
    )
    blocks, problems = parse_blocks(text)
    assert [(b.start, b.end, b.indent) for b in blocks] == [(3, 5, 12)]
    assert len(problems) == 1
    assert problems[0].line == 5
    assert "another indentation" in problems[0].message
    assert "(8 vs 12)" in problems[0].message
    assert "line 3" in problems[0].message


def test_plain_dashed_close_at_another_indentation_is_a_problem() -> None:
    text = src(
        "    def _dummy_run(self, num_tokens):",
        "        if self.use_aux_hidden_state_outputs:",
        FENCE_TIGHT_12,
        "            hidden_states, _ = self.extract_multimodal_outputs(hidden_states)",
        PLAIN_8,
        "        return hidden_states",
    )
    _blocks, problems = parse_blocks(text)
    assert [p.line for p in problems] == [5]


def test_block_leaving_its_indentation_is_a_problem_on_the_open_line() -> None:
    """The close fence was lost: the block would run past the end of its method."""
    text = src(
        "class NPUModelRunner(GPUModelRunner):",
        "    def _update_states(self, scheduler_output):",
        "        super()._update_states(scheduler_output)",
        FENCE_SPACED_8,
        "        self._omni_update(scheduler_output)",
        "",
        "        # a comment at any depth does not end the block",
        "# even one at column 0",
        "    def _omni_update(self, scheduler_output):",
        "        pass",
    )
    blocks, problems = parse_blocks(text)
    assert blocks == []
    assert len(problems) == 1
    assert problems[0].line == 4
    assert "not closed before line 9" in problems[0].message
    assert "leaves its indentation" in problems[0].message


def test_block_crossing_the_end_of_a_branch_is_a_problem() -> None:
    text = src(
        "    def execute_model(self, scheduler_output):",
        "        if not scheduler_output.total_num_scheduled_tokens:",
        FENCE_TIGHT_12,
        "            self._omni_flush(scheduler_output)",
        "            return EMPTY_MODEL_RUNNER_OUTPUT",
        "        hidden_states = self.model(input_ids, positions)",
        FENCE_TIGHT_12,
        "            x = 1",
        FENCE_TIGHT_12,
    )
    blocks, problems = parse_blocks(text)
    assert problems[0] == FenceProblem(3, "Omni-new block is not closed before line 6, which leaves its indentation")
    # the block that crossed the branch end is never returned
    assert all(not (b.start <= 6 <= b.end) for b in blocks)


def test_first_meaningful_line_skips_blanks_and_fences_but_not_comments() -> None:
    text = src(
        "    def execute_model(self, scheduler_output):",
        FENCE_SPACED_8,
        "",
        "        # [Omni] Handle KV transfer BEFORE updating states",
        "        if not getattr(self, '_warmup_state_cleared', False):",
        "            self._warmup_state_cleared = True",
        FENCE_SPACED_8,
        FENCE_SPACED_8,
        "",
        "        ",
        "        self.kv_extractor.extract(scheduler_output)",
        PLAIN_8,
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert [b.first for b in blocks] == [
        "# [Omni] Handle KV transfer BEFORE updating states",
        "self.kv_extractor.extract(scheduler_output)",
    ]
    assert blocks[0].as_json() == {"index": 0, "line": 2, "text": blocks[0].first}


def test_block_indices_follow_file_order() -> None:
    text = src(
        "class NPUGenerationModelRunner(NPUModelRunner):",
        "    def _prepare_inputs(self, scheduler_output):",
        "        req_ids = self.input_batch.req_ids  # Omni-new: generation requests only",
        FENCE_SPACED_8,
        "        self._omni_prepare(req_ids)",
        FENCE_SPACED_8,
        "        positions = self.positions[:num_tokens]",
        "        mrope = self.mrope_positions[:, :num_tokens]  # Omni-new",
        "        if self.uses_mrope:",
        FENCE_TIGHT_12,
        "            positions = mrope",
        PLAIN_12,
        "        return positions,  # Omni-new: tuple for the talker",
    )
    blocks, problems = parse_blocks(text)
    assert problems == []
    assert [b.index for b in blocks] == list(range(5))
    assert [(b.start, b.end, b.fenced) for b in blocks] == [
        (3, 3, False),
        (4, 6, True),
        (8, 8, False),
        (10, 12, True),
        (13, 13, False),
    ]
    starts = [b.start for b in blocks]
    assert starts == sorted(starts)


def test_file_without_fences() -> None:
    text = src(
        "class NPUModelRunner(GPUModelRunner):",
        "    def load_model(self):",
        "        # -------- load --------",
        "        self.model = get_model(vllm_config=self.vllm_config)",
        "        # Omni support lands in a later patch",
        "",
    )
    assert parse_blocks(text) == ([], [])
    assert parse_blocks("") == ([], [])
    assert anchors.fence_lines(text) == []


def test_fence_lines_lists_every_marked_line_as_written() -> None:
    text = src(
        "    def load_model(self):",
        FENCE_SPACED_8,
        "        self.talker = None",
        FENCE_SPACED_8,
        "        self.model = get_model(config)  # Omni-new: talker-aware",
    )
    assert anchors.fence_lines(text) == [
        FENCE_SPACED_8,
        FENCE_SPACED_8,
        "        self.model = get_model(config)  # Omni-new: talker-aware",
    ]
