"""What upstream changed in a conflict region, in one line, and the suggestions a rule is sure of."""

from __future__ import annotations

import pytest

from patch_queue.merge import explain
from patch_queue.merge.conflict import Anchor, Conflict


def region(base: str, ours: str, theirs: str, anchor: Anchor | None = None) -> Conflict:
    return Conflict("both-changed", base=base, ours=ours, theirs=theirs, anchor=anchor)


def test_a_rename_is_named_and_the_patch_side_renamed_is_suggested() -> None:
    c = region(
        "        fs = self._get_mamba_state_copy_funcs()\n        n = 1\n",
        "        fs = self._get_ascend_mamba_state_copy_funcs()\n        n = 1\n",
        "        fs = self._get_mamba_state_copy_funcs()\n        n = 2  # omni\n",
    )
    assert explain.upstream_change(c) == "renamed `_get_mamba_state_copy_funcs` → `_get_ascend_mamba_state_copy_funcs`"
    tip = explain.suggest(c)
    assert tip is not None and tip.side == "merged"
    assert tip.text == "        fs = self._get_ascend_mamba_state_copy_funcs()\n        n = 2  # omni\n"


def test_a_rename_the_patch_made_differently_is_left_to_the_maintainer() -> None:
    c = region("        self.model.f(),\n", "        self._g(),\n", "        self._h(),\n")
    assert explain.upstream_change(c) == "renamed `model.f` → `_g`; the patch renamed `model.f` → `_h`"
    assert explain.suggest(c) is None


def test_new_parameters_and_arguments() -> None:
    c = region("    def f(self, a):\n", "    def f(self, a, b: int = 0):\n", "    def f(self, a, omni=None):\n")
    assert explain.upstream_change(c) == "new parameter `b`"
    c = region("    g(a,\n      c=1)\n", "    g(a,\n      c=1, d=2)\n", "    g(a, c=3)\n")
    assert explain.upstream_change(c) == "new argument `d`"
    c = region("    g(a, c=1, d=2)\n", "    g(a)\n", "    g(a, c=3, d=2)\n")
    assert explain.upstream_change(c) == "dropped arguments `c`, `d`"


def test_a_wrapped_block_and_its_suggestion() -> None:
    base = "        if x:\n            y = f()\n"
    ours = "        try:\n            if x:\n                y = f()\n        finally:\n            done()\n"
    theirs = "        if x:\n            y = f()  # omni\n            omni()\n"
    c = region(base, ours, theirs)
    assert explain.upstream_change(c) == "wrapped `if x:` in `try:`/`finally:`; added `done()` in its finally block"
    tip = explain.suggest(c)
    assert tip is not None and tip.side == "merged"
    assert tip.text == (
        "        try:\n            if x:\n                y = f()  # omni\n                omni()\n"
        "        finally:\n            done()\n"
    )


def test_moves_insertions_deletions_and_layout() -> None:
    assert explain.upstream_change(region("a()\nb()\nc()\n", "b()\nc()\na()\n", "x()\n")) == "moved `a()`"
    assert explain.upstream_change(region("a()\n", "a()\nb()\n", "x()\n")) == "added `b()`"
    assert explain.upstream_change(region("a()\nb()\n", "", "x()\n")) == "removed `a()` and 1 more statement(s)"
    # lines that do not parse alone (a call cut in its arguments): said by lines
    assert explain.upstream_change(region("f(\n    a,\n", "f(\n    b,\n    c,\n", "x()\n")) == (
        "inserted 2 line(s) (`b,`) and deleted 1 (`a,`)"
    )
    layout = region("f(a, b)\n", "f(\n    a,\n    b,\n)\n", "f(a, c)\n")
    assert explain.upstream_change(layout) == "changed only the layout or comments"
    tip = explain.suggest(layout)
    assert tip is not None and (tip.side, tip.text) == ("patch", "f(a, c)\n")
    same = region("if g:\n    h()\n", "", "\n")
    tip = explain.suggest(same)
    assert tip is not None and tip.side == "upstream"
    assert explain.suggest(region("a = 1\n", "a = 2\n", "a = 3\n")) is None


def test_the_omni_block() -> None:
    fenced = region("a\n", "b\n", "c\n", Anchor(3, 120, "self.omni_call()"))
    assert explain.omni_block(fenced) == "omni block 3 at line 120: `self.omni_call()`"
    assert explain.omni_block(region("a = 1\n", "a = 2\n", "a = omni()\n")) == (
        "no omni block: an unfenced omni edit (`a = omni()`)"
    )


def test_a_name_linked_region_suggests_no_side() -> None:
    """Only the patch changed these lines; they bind what another region reads: the side is the one taken there,
    so no rule suggests one (the layout rule would take the patch's)."""
    base, theirs = "    y = a + 1\n", "    q = omni(a)\n"
    linked = Conflict("name-linked", base=base, ours=base, theirs=theirs)
    assert explain.upstream_change(linked) == "did not change these lines"
    assert explain.suggest(linked) is None
    tip = explain.suggest(region(base, base, theirs))
    assert tip is not None and tip.side == "patch"


def test_the_word_diff_of_a_long_region_is_anchored_on_its_lines() -> None:
    """The words are diffed within the lines that changed; the opcodes still cover both sides, in order, and
    a rename deep in a long region is found as in a short one."""
    body = [f"        x{i} = self.step_{i}(batch, out={i})  # {i}\n" for i in range(200)]
    base = "".join(body)
    ours = "".join(line.replace("self.step_150(", "self.stage_150(") for line in body[:100] + body[101:])
    a, b, opcodes = explain._word_diff(base, ours)
    assert a == tuple(explain._WORD.findall(" ".join(explain._code_lines(base))))
    assert b == tuple(explain._WORD.findall(" ".join(explain._code_lines(ours))))
    i = j = 0
    for tag, i1, i2, j1, j2 in opcodes:
        assert (i1, j1) == (i, j) and (tag != "equal" or a[i1:i2] == b[j1:j2])
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    assert [tag for tag, *_ in opcodes].count("equal") == 3  # around the deleted line and the renamed word
    renamed = base.replace("self.step_150(", "self.stage_150(")
    assert explain.upstream_change(region(base, renamed, base)) == "renamed `step_150` → `stage_150`"


@pytest.mark.parametrize(
    "base,ours,said",
    [
        # vllm-ascend 0.30.0rc2's _dummy_run: one condition more
        (
            "if self.supports_mm_inputs and not self.model_config.is_encoder_decoder or self.enable_prompt_embeds:\n",
            "if (\n    self.supports_mm_inputs\n    and not self.model_config.is_encoder_decoder\n"
            "    and not self.model_config.requires_raw_input_tokens\n) or self.enable_prompt_embeds:\n",
            "added the condition `and not self.model_config.requires_raw_input_tokens` in "
            "`if self.supports_mm_inputs and (not self.model_config.is_en…`",
        ),
        # its _model_forward: the forward wrapped in try/finally, the executor released in the finally block
        (
            "        model_output = run_model()\n",
            "        try:\n            model_output = run_model()\n        finally:\n"
            "            if executor is not None:\n                executor.release()\n",
            "wrapped `model_output = run_model()` in `try:`/`finally:`; added `if executor is not None:` in its "
            "finally block",
        ),
        # its _dummy_run: a branch added to an `if` (the side starts deeper than it ends, and with an elif)
        (
            "                if self.use_compress:\n                    self.positions.fill_(127)\n",
            "                if self.use_compress:\n                    self.positions.fill_(127)\n"
            "                elif self.uses_positions_for_attention:\n"
            "                    self.positions[:n].fill_(0)\n",
            "added the branch `elif self.uses_positions_for_attention:` (`self.positions[:n].fill_(0)`) to "
            "`if self.use_compress:`",
        ),
        (
            "                x = f(a)\n            y = g(x)\n",
            "                x = f(a, b)\n            y = g(x)\n            self.kvpp.complete_forward()\n",
            "added `b` in `x = f(a)`; added `self.kvpp.complete_forward()`",
        ),
        (
            "elif x:\n    a()\n",
            "elif x and y:\n    a()\n",
            "added the condition `and y` in `if x:`",
        ),
    ],
)
def test_what_upstream_did_in_statements(base: str, ours: str, said: str) -> None:
    assert explain.upstream_change(region(base, ours, "omni()\n")) == said


def test_another_copys_side_is_suggested_only_where_the_omni_edit_allows_it() -> None:
    """The same upstream change in two copies: the patch's side carries over to a copy whose omni edit holds the
    other's (it keeps at least the omni code kept there), upstream's side to one whose omni edit is part of the
    other's (it drops no omni code that was kept there); the suggestion is that copy's own side."""
    base, ours = "        x = f(a)\n", "        x = f(a, b)\n"
    small = region(base, ours, "        x = omni(a)\n")
    large = region(base, ours, "        x = omni(a)\n        omni_more()\n")
    kept = explain.as_resolved(large, small, small.theirs or "")
    assert kept is not None and (kept.side, kept.text) == ("patch", large.theirs)
    assert explain.as_resolved(small, large, large.theirs or "") is None
    up = explain.as_resolved(small, large, large.ours or "")
    assert up is not None and (up.side, up.text) == ("upstream", small.ours)
    assert explain.as_resolved(large, small, small.ours or "") is None
    other = region("        y = g()\n" + base, "        y = g()\n" + ours, "        y = g()\n        x = omni(a)\n")
    assert explain.same_upstream_change(small, other)  # the regions differ in extent, the change is the same


def test_a_call_upstream_renamed_to_a_method_that_forwards_to_the_patchs_call_suggests_upstream() -> None:
    """vllm-ascend 0.30.0rc2: `self.model.get_mamba_state_copy_func()` became
    `self._get_ascend_mamba_state_copy_funcs()`, which only returns vLLM's `self._get_mamba_state_copy_funcs()`,
    the patch's call: upstream's side is the same call.  A method that does more, or another call, is no such
    rule."""
    c = region(
        "            self.model.get_copy_func(),\n",
        "            self._get_ascend_copy_funcs(),\n",
        "            self._get_copy_funcs(),\n",
    )
    upstream = (
        "class R:\n    def _get_ascend_copy_funcs(self):\n"
        '        """Bridge."""\n        return self._get_copy_funcs()\n'
    )
    tip = explain.forwarded(c, upstream)
    assert tip is not None and (tip.side, tip.text) == ("upstream", c.ours)
    assert explain.forwarded(c, upstream.replace("return self._get_copy_funcs()", "return self._other()")) is None
    more = upstream.replace("        return", "        log()\n        return")
    assert explain.forwarded(c, more) is None


FENCE = "# ---------------------------------------Omni-new----------------------------------------------\n"


def test_a_hand_resolution_is_merged_onto_another_copys_patch_side() -> None:
    """Issue 48: the generation runner's `_dummy_run` resolved by hand (upstream's new condition in omni's branch);
    npu_model_runner's copy holds the same branch inside an omni block, one level deeper, with more omni code: the
    edit of the first copy's patch side, merged onto the second's, changes only that line there."""

    def deeper(text: str) -> str:
        return "".join("    " + line for line in text.splitlines(keepends=True))

    base, ours = "if a or b:\n    x = 1\n", "if a and c or b:\n    x = 1\n"
    branch = "k = omni()\nif a:\n    x = 2\nelif b:\n"
    first = Conflict("both-changed", base=base, ours=ours, theirs=branch, symbol="A._dummy_run")
    held = deeper(FENCE + branch + "    x = 1\nelif more():\n    x = 3\n" + FENCE)
    second = Conflict("both-changed", base=deeper(base), ours=deeper(ours), theirs=held, symbol="B._dummy_run")
    assert explain.carried_change(first, second)
    tip = explain.carried(second, first, branch.replace("if a:", "if a and c:"))
    assert tip is not None and tip.side == "merged"
    assert tip.text == held.replace("    if a:\n", "    if a and c:\n")
    # another method's region is not the same upstream change
    assert not explain.carried_change(first, Conflict("both-changed", base=base, ours=ours, theirs="", symbol="B.f"))


def test_a_carried_edit_keeps_upstreams_further_change_and_refuses_a_guess() -> None:
    """Issue 48, the force-EPLB lines: the first copy's resolution puts upstream's new lines before the omni call;
    the second copy's region holds upstream's change and lines upstream added after it, which the suggestion
    keeps at the region's end; where both copies insert code at one place with no line to order them by (the
    first copy's patch side is empty), no suggestion."""
    eplb = "if force:\n    build()\n"
    first = Conflict("anchor-lost", base="out = fwd(x)\n", ours=eplb + "out = fwd(x)\n", theirs="out = model(x)\n")
    second = Conflict(
        "anchor-lost",
        base="out = fwd(x)\n",
        ours=eplb + "out = fwd(x)\nrelease()\n",
        theirs=FENCE + "talker()\nout = model(x, **kw)\n" + FENCE,
    )
    tip = explain.carried(second, first, eplb + "out = model(x)\n")
    assert tip is not None and tip.text == eplb + FENCE + "talker()\nout = model(x, **kw)\n" + FENCE + "release()\n"
    inserted = Conflict("both-changed", base="", ours="finish()\n", theirs="")
    other = Conflict("both-changed", base="", ours="finish()\nmore()\n", theirs="omni_forward()\n")
    assert explain.carried(other, inserted, "finish()\n") is None
