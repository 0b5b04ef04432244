"""Statements merge by tokens (issue 48, point 2): a statement both sides changed in different tokens is merged
token by token, flagged `merged-tokens`, kept only when it parses and binds nothing new
(:mod:`patch_queue.merge.tokens`, through :func:`patch_queue.merge.three_way.merge3`)."""

from __future__ import annotations

from patch_queue.merge import tokens
from patch_queue.merge.checked import merge3_checked
from patch_queue.merge.folded import TOKEN
from patch_queue.merge.three_way import MergeResult, merge3

FENCE = "        # ------------------------------ Omni-new ------------------------------"


def src(*lines: str) -> str:
    return "".join(line + "\n" for line in lines)


def lines(*text: str) -> list[str]:
    return [line + "\n" for line in text]


def method(*body: str) -> str:
    return src("class Runner(Base):", "    def update(self, out):", *body, "", "    def other(self):", "        pass")


def kinds(result: MergeResult) -> list[str]:
    return [r.kind for r in result.regions]


def placed(result: MergeResult, kind: str) -> str:
    (region,) = [r for r in result.regions if r.kind == kind]
    text = result.text.splitlines(keepends=True)
    assert region.line is not None
    return "".join(text[region.line - 1 : region.line - 1 + region.length])


# ---------------------------------------------------------------------------------------------
# the items


def test_items_join_brackets_continuations_and_headers() -> None:
    side = lines(
        "        if (",
        "            a  # a comment (with a bracket",
        "            and b",
        "        ):",
        "",
        "        # a note",
        "        x = 1 + \\",
        "            2",
        '        s = """(',
        '        """',
        TOKEN + "0123456789abcdef",
        "        y = f(",
    )
    got = [(i.kind, len(i.lines)) for i in tokens.items(side)]
    assert got == [("code", 4), ("blank", 1), ("comment", 1), ("code", 2), ("code", 2), ("block", 1), ("code", 1)]
    assert "".join(i.text for i in tokens.items(side)) == "".join(side)


# ---------------------------------------------------------------------------------------------
# merged, flagged


def test_disjoint_token_edits_merge_with_upstream_lines_around() -> None:
    """The `_update_states` shape: upstream binds the parent call's result and adds code before and after it, the
    patch calls another class's method; the patch's blank line goes before upstream's new code."""
    base = method("        return super().update(out)")
    ours = method(
        "        if out.copies:",
        "            out = fix(out)",
        "        result = super().update(out)",
        "        self.track(out)",
        "        return result",
    )
    theirs = method("", "        return Other.update(self, out)")
    result = merge3(base, ours, theirs)
    assert result.clean and kinds(result) == ["merged-tokens"]
    assert result.text == method(
        "",
        "        if out.copies:",
        "            out = fix(out)",
        "        result = Other.update(self, out)",
        "        self.track(out)",
        "        return result",
    )
    (region,) = result.regions
    assert not region.conflict and region.sides == {
        "base": "        return super().update(out)\n",
        "upstream": "".join(ours.splitlines(keepends=True)[2:7]),
        "patch": "\n        return Other.update(self, out)\n",
    }
    # what each side changed, and what came of it
    assert "upstream: `return` → `result =`" in region.message
    assert "the omni patch: `super()` → `Other`, added `self,`" in region.message
    assert "`result = Other.update(self, out)`" in region.message
    assert placed(result, "merged-tokens") == region.resolution


def test_an_insertion_beside_a_deletion_merges() -> None:
    """The `_dummy_run` shape: upstream adds a condition before `or b` in a header it re-lays out, the patch drops
    `or b` (it becomes its own branch, which the patch adds below)."""
    base = method("        if a and not c or b:", "            x = 1")
    ours = method(
        "        if (",
        "            a",
        "            and not c",
        "            and not d",
        "        ) or b:",
        "            x = 1",
    )
    theirs = method("        if a and not c:", "            x = 2", "        elif b:", "            x = 1")
    result = merge3(base, ours, theirs)
    assert result.clean and kinds(result) == ["merged-tokens"]
    assert result.text == method(
        "        if (", "            a", "            and not c", "            and not d", "        ):",
        "            x = 2", "        elif b:", "            x = 1",
    )  # fmt: skip
    assert "dropped `or b`" in result.regions[0].message


def test_merged_tokens_is_a_flag_to_read() -> None:
    from patch_queue.merge.conflict import Conflict, ConflictKind
    from patch_queue.outputs.report_parts import KIND_ORDER, to_read

    assert ConflictKind("merged-tokens") is ConflictKind.MERGED_TOKENS and ConflictKind.MERGED_TOKENS in KIND_ORDER
    assert to_read(Conflict("merged-tokens", conflict=False))


# ---------------------------------------------------------------------------------------------
# conflicts


def test_overlapping_token_edits_stay_a_conflict() -> None:
    base = method("        return super().update(out)")
    ours = method("        x = 1", "        return super().update_all(out)")
    theirs = method("", "        return super().update_some(out)")
    assert tokens.merge(*(s.splitlines(keepends=True)[2:-3] for s in (base, ours, theirs))) is None
    result = merge3(base, ours, theirs)
    assert kinds(result) == ["both-changed"] and not result.clean


def test_different_insertions_at_one_point_stay_a_conflict() -> None:
    b, o, t = lines("        f(a)"), lines("        g()", "        f(a, b)"), lines("        h()", "        f(a, c)")
    assert tokens.merge(b, o, t) is None
    # and where both insert code before the statement, even with its tokens merging
    o2, t2 = lines("        g()", "        f(a, b)"), lines("        h()", "        f(z)")
    assert tokens.merge(b, o2, t2) is None


def test_a_merge_that_does_not_parse_stays_a_conflict() -> None:
    """Upstream returns nothing, the patch multiplies what is returned: each side parses, the merge `return * 2`
    does not."""
    base = method("        return a")
    ours = method("        x = 1", "        return")
    theirs = method("", "        return a * 2")
    assert (
        tokens.merge(
            lines("        return a"), lines("        x = 1", "        return"), lines("", "        return a * 2")
        )
        is None
    )
    result = merge3(base, ours, theirs)
    assert not result.clean and "merged-tokens" not in kinds(result)


def test_a_merge_that_binds_a_new_name_stays_a_conflict() -> None:
    """Upstream makes the comparison an assignment expression (binding `k`), the patch compares `j` instead: the
    merge `f(j := v)` would bind `j`, which neither side binds."""
    b, o, t = lines("        f(k == v)"), lines("        g()", "        f(k := v)"), lines("", "        f(j == v)")
    assert tokens.merge(b, o, t) is None
    result = merge3(method(*(x.rstrip("\n") for x in b)), method("        g()", "        f(k := v)"),
                    method("", "        f(j == v)"))  # fmt: skip
    assert not result.clean and "merged-tokens" not in kinds(result)


def test_a_statement_only_one_side_changed_is_no_token_merge() -> None:
    """Nothing both sides changed in one statement: not this rule's (an insertion placed by its anchor is)."""
    assert tokens.merge(lines("        f(a)"), lines("        g()", "        f(a)"), lines("        f(b)")) is None


# ---------------------------------------------------------------------------------------------
# omni blocks and blank lines


def test_an_omni_block_is_kept_whole_beside_a_merged_statement() -> None:
    body = ["        w = 2", "        w += 1"]
    base = method("        return super().update(out)")
    ours = method("        result = super().update(out)", "        return result")
    theirs = method(FENCE, *body, FENCE, "        return Other.update(self, out)")
    result = merge3_checked(base, ours, theirs)
    assert result.clean and "merged-tokens" in kinds(result)
    assert result.text == method(
        FENCE, *body, FENCE, "        result = Other.update(self, out)", "        return result"
    )
    assert result.text.count(FENCE) == 2


def test_an_omni_block_token_is_never_merged_into() -> None:
    """A folded block line is an item of its own: never paired, never cut into tokens."""
    block = TOKEN + "0123456789abcdef\n"
    other = TOKEN + "fedcba9876543210\n"
    assert tokens.merge([block], ["        x = 1\n", other], ["", "\n", block]) is None
    got = tokens.merge(
        ["        f(a)\n"], ["        f(a, b)\n", "        g()\n"], [block, "        h(a)\n"]
    )  # the block goes in whole, as the patch has it
    assert got is not None and got.lines == [block, "        h(a, b)\n", "        g()\n"]


def test_blank_lines_go_first_beside_code_inserted_at_one_place() -> None:
    b = lines("        f(a)")
    for o, t in (
        (lines("        g()", "        f(a, b)"), lines("", "        h(a)")),
        (lines("", "        f(a, b)"), lines("        g()", "        h(a)")),
    ):
        got = tokens.merge(b, o, t)
        assert got is not None and got.lines == lines("", "        g()", "        h(a, b)")


def test_the_merge_is_deterministic() -> None:
    base = method("        return super().update(out)")
    ours = method("        x = 1", "        result = super().update(out)", "        return result")
    theirs = method("", "        return Other.update(self, out)")
    first = merge3(base, ours, theirs)
    again = merge3(base, ours, theirs)
    assert first.text == again.text and [r.message for r in first.regions] == [r.message for r in again.regions]
