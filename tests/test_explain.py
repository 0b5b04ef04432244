"""What upstream changed in a conflict region, in one line, and the suggestions a rule is sure of."""

from __future__ import annotations

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
    assert explain.upstream_change(c) == "wrapped the 2 line(s) in `try:` … `finally:`"
    tip = explain.suggest(c)
    assert tip is not None and tip.side == "merged"
    assert tip.text == (
        "        try:\n            if x:\n                y = f()  # omni\n                omni()\n"
        "        finally:\n            done()\n"
    )


def test_moves_insertions_deletions_and_layout() -> None:
    assert explain.upstream_change(region("a()\nb()\nc()\n", "b()\nc()\na()\n", "x()\n")) == "moved 1 line(s): `a()`"
    assert explain.upstream_change(region("a()\n", "a()\nb()\n", "x()\n")) == "inserted 1 line(s): `b()`"
    assert explain.upstream_change(region("a()\nb()\n", "", "x()\n")) == "deleted 2 line(s): `a()`"
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
